#!/usr/bin/env bash
# MPICH's conformance test suite (test/mpi of MPICH's sources) against Ferrite, without
# MPICH's autotools: compiles util/mtest*.c with a small generated mpitestconf.h, reads each
# directory's testlist(.in) (`name np [arg=.. env=.. timeLimit=.. xfail=.. resultTest=..]`,
# `subdir` lines recurse), builds each test with $MPICC and runs it with $MPIRUN under a
# timeout, judging it as MPICH's runtests does (default: exit 0 and a "No Errors" line;
# resultTest=TestStatus / TestStatusNoErrors / TestErrFatal: a non-zero exit is required).
# Fetches nothing: the suite is wherever the user put it (docs/conformance.md says where to
# get it). Nothing is written into this repository: builds go to $WORK.
#
#   tests/mpich-suite/run.sh /path/to/mpich/test/mpi [dir ...]
#
# Directories default to attr coll comm datatype errhan errors group info init pt2pt topo.
# Knobs: MPICC, MPIRUN (default Ferrite's in $PREFIX; MPICC=mpicc.mpich MPIRUN=mpirun.mpich
# runs Debian's MPICH as the yardstick), WORK (build dir, default $PREFIX/mpich-suite-<name>),
# TIMEOUT (seconds per test when the testlist sets none, default 60), EXCLUDE (a file of
# `dir/test np` lines to leave out, e.g. tests/mpich-suite/exclude.txt), ONLY (a regex of
# test names). EXCLUDE=tests/mpich-suite/exclude.txt leaves out the tests that fail on
# Debian's MPICH 4.0.2 too. Prints PASS/FAIL/SKIP per test, a per-directory table, and ends with
# `mpich-suite: N passed, N failed, N skipped`. STRICT=1 runs it as MPICH's runtests runs a
# non-MPICH MPI (configure --enable-strictmpi): tests marked strict=false, which rely on
# MPICH's own extensions or limits (MPI-1 names removed by MPI-3, a context-id limit that
# makes 200,000 dups fail, mpiexec -disable-auto-cleanup), are skipped.
set -u
suite=${1:?usage: tests/mpich-suite/run.sh /path/to/mpich/test/mpi [dir ...]}
shift
suite=$(cd "$suite" && pwd) || exit 2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
MPICC=${MPICC:-$PREFIX/bin/mpicc}
MPIRUN=${MPIRUN:-$PREFIX/bin/mpirun}
TIMEOUT=${TIMEOUT:-60}
EXCLUDE=${EXCLUDE:-}
ONLY=${ONLY:-}
STRICT=${STRICT:-0}
dirs=${*:-attr coll comm datatype errhan errors group info init pt2pt topo}
WORK=${WORK:-$PREFIX/mpich-suite-$(basename "$(dirname "$(dirname "$MPICC")")")}
mkdir -p "$WORK/include" "$WORK/bin" "$WORK/log"

# What MPICH's configure would find on a Linux machine with a C99 compiler.
cat >"$WORK/include/mpitestconf.h" <<'CONF'
#define HAVE_STDARG_H 1
#define HAVE_STRING_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STDINT_H 1
#define HAVE_UNISTD_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_RESOURCE_H 1
#define HAVE_GETRUSAGE 1
#define HAVE_LONG_DOUBLE 1
#define HAVE_LONG_LONG 1
#define HAVE__BOOL 1
#define HAVE_FLOAT__COMPLEX 1
#define HAVE_DOUBLE__COMPLEX 1
#define HAVE_LONG_DOUBLE__COMPLEX 1
#define USE_LONG_DOUBLE_COMPLEX 1
#define HAVE_MPI_WIN_CREATE 1
#define HAVE_MPI_TYPE_CREATE_STRUCT 1
#define HAVE_MPI2_COMBINERS 1
#define HAVE_MPI_INTEGER16 1
#define HAVE_MPI_IO 1
#define POINTERINT_t intptr_t
#define THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX
#include <stdint.h>
CONF
: >"$WORK/include/mtest_mpix.h"

echo "mpich-suite: $suite with MPICC=$MPICC MPIRUN=$MPIRUN, work in $WORK"
# dtpools includes a configure-made ../dtpoolsconf.h: build it from a copy in $WORK.
rm -rf "$WORK/dtpools" && cp -r "$suite/dtpools" "$WORK/dtpools" && : >"$WORK/dtpools/dtpoolsconf.h"
inc=(-I"$WORK/include" -I"$suite/include" -I"$WORK/dtpools/include")
mt=$WORK/libmtest.a
rm -f "$mt"
objs=()
# MPICH's libmtest, libmtest_single (no thread package), libdtypes and libdtpools.
for u in "$suite"/util/mtest.c "$suite"/util/mtest_common.c "$suite"/util/mtest_single.c \
         "$suite"/util/dtypes.c "$WORK"/dtpools/src/*.c; do
    [ -f "$u" ] || continue
    o=$WORK/$(basename "${u%.c}").o
    if ! "$MPICC" -O1 -w "${inc[@]}" -c "$u" -o "$o" 2>"$WORK/log/util.log"; then
        cat "$WORK/log/util.log"; echo "mpich-suite: building $u failed"
        echo "mpich-suite: 0 passed, 1 failed, 0 skipped"; exit 1
    fi
    objs+=("$o")
done
ar rcs "$mt" "${objs[@]}"
# libmtest_thread: the same with mtest_thread.c (MTest_Start_thread & co over pthreads) in
# place of mtest_single.c, for the tests under threads/.
mtt=$WORK/libmtest_thread.a
rm -f "$mtt"
if "$MPICC" -O1 -w "${inc[@]}" -c "$suite/util/mtest_thread.c" -o "$WORK/mtest_thread.o" 2>"$WORK/log/util.log"; then
    tobjs=()
    for o in "${objs[@]}"; do [[ $o == */mtest_single.o ]] || tobjs+=("$o"); done
    ar rcs "$mtt" "${tobjs[@]}" "$WORK/mtest_thread.o"
else
    cat "$WORK/log/util.log"; echo "mpich-suite: building mtest_thread.c failed"
fi

pass=0; fail=0; skip=0
declare -A dpass dfail
failures=()

excluded() { # dir name np
    [ -n "$EXCLUDE" ] && grep -qE "^$1/$2 $3( |$)" "$EXCLUDE"
}

run_one() { # dir name np opts...
    local dir=$1 name=$2 np=$3; shift 3
    local args=() envs=() limit=$TIMEOUT mode=default xfail="" strict=true
    local o
    for o in "$@"; do
        case "$o" in
            arg=*) args+=("${o#arg=}") ;;
            env=*) envs+=("${o#env=}") ;;
            timeLimit=*) limit=${o#timeLimit=} ;;
            resultTest=*) mode=${o#resultTest=} ;;
            xfail=*) xfail=${o#xfail=} ;;
            strict=*) strict=${o#strict=} ;;
            mpiexecarg=*|mem=*) ;;
        esac
    done
    local top=${dir%%/*}
    local id="$dir/$name -n $np${args:+ ${args[*]}}"
    if [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]]; then return; fi
    if excluded "$dir" "$name" "$np"; then echo "SKIP $id (excluded)"; skip=$((skip + 1)); return; fi
    if [ "$STRICT" = 1 ] && [ "${strict,,}" = false ]; then
        echo "SKIP $id (non-strict test, STRICT=1)"; skip=$((skip + 1)); return
    fi
    local srcs=() defs=()
    for ext in c cxx cpp; do [ -f "$suite/$dir/$name.$ext" ] && srcs=("$suite/$dir/$name.$ext"); done
    if [ ${#srcs[@]} -eq 0 ] && [ -f "$suite/$dir/Makefile.am" ]; then
        # A variant built from another test's source with extra -D flags
        # (`nbicbcast_SOURCES = icbcast.c`, `nbicbcast_CPPFLAGS = -DUSE_MTEST_NBC ...`).
        # Several sources (`mt_probe_isendrecv_SOURCES = mt_pt2pt_common.c mt_probe_impl.c`)
        # are all compiled in.
        local am=$suite/$dir/Makefile.am s f
        for s in $(sed -nE "s/^${name}_SOURCES[[:space:]]*=(.*)/\1/p" "$am" | head -n 1); do
            [ -f "$suite/$dir/$s" ] && srcs+=("$suite/$dir/$s")
        done
        for f in $(sed -nE "s/^${name}_CPPFLAGS[[:space:]]*=(.*)/\1/p" "$am" | head -n 1); do
            [[ $f == -D* ]] && defs+=("$f")
        done
    fi
    if [ ${#srcs[@]} -eq 0 ]; then echo "SKIP $id (no source: generated by MPICH's configure)"; skip=$((skip + 1)); return; fi
    local exe=$WORK/bin/${dir//\//_}_$name log=$WORK/log/${dir//\//_}_$name.$np.log
    if [ ! -x "$exe" ] || [ "${srcs[0]}" -nt "$exe" ]; then
        local lib=("$mt"); [ "$top" = threads ] && lib=("$mtt" -lpthread)
        if ! "$MPICC" -O1 -w "${inc[@]}" ${defs[@]+"${defs[@]}"} -o "$exe" "${srcs[@]}" "${lib[@]}" -lm >"$log" 2>&1; then
            echo "FAIL $id (build failed)"; sed 's/^/    | /' "$log" | tail -n 5
            fail=$((fail + 1)); dfail[$top]=$((${dfail[$top]:-0} + 1)); failures+=("$id (build)"); return
        fi
    fi
    local rc
    # As MPICH's runtests: the launcher gets MPIEXEC_TIMEOUT (init/timeout checks that it
    # ends a job that runs too long); `timeout` is only the backstop.
    (cd "$suite/$dir" && env "${envs[@]}" MPIEXEC_TIMEOUT="$limit" timeout -k 5 $((limit + 15)) \
        "$MPIRUN" -n "$np" "$exe" "${args[@]}") </dev/null >"$log" 2>&1
    rc=$?
    local ok=0
    local noerr=0
    grep -qE '^\s*No [Ee]rrors\s*$' "$log" && noerr=1
    case "$mode" in
        TestStatus) [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ok=1 ;;
        TestStatusNoErrors) [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ $noerr -eq 1 ] && ok=1 ;;
        TestErrFatal) [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ok=1 ;;
        *) [ "$rc" -eq 0 ] && [ $noerr -eq 1 ] && ok=1 ;;
    esac
    if [ $ok -eq 1 ]; then
        echo "PASS $id"; pass=$((pass + 1)); dpass[$top]=$((${dpass[$top]:-0} + 1))
    else
        local why="exit $rc"; [ "$rc" -eq 124 ] && why="timeout $((limit + 15))s"
        echo "FAIL $id ($why${xfail:+; MPICH marks it xfail: $xfail})"; grep -v '^\s*$' "$log" | tail -n 4 | sed 's/^/    | /'
        fail=$((fail + 1)); dfail[$top]=$((${dfail[$top]:-0} + 1)); failures+=("$id ($why)")
    fi
}

walk() { # dir
    local dir=$1 list=$suite/$1/testlist
    [ -f "$list" ] || list=$list.in
    [ -f "$list" ] || { echo "SKIP $dir (no testlist)"; return; }
    local line
    while read -r line; do
        line=${line%%#*}
        [ -z "${line// /}" ] && continue
        case "$line" in @*) continue ;; esac
        set -- $line
        if [ $# -eq 1 ]; then
            [ -d "$suite/$dir/$1" ] && walk "$dir/$1"
        else
            run_one "$dir" "$@"
        fi
    done <"$list"
}

for d in $dirs; do walk "$d"; done

echo
printf '%-10s %6s %6s %7s\n' dir passed failed percent
for d in $dirs; do
    p=${dpass[$d]:-0}; f=${dfail[$d]:-0}; t=$((p + f))
    [ $t -eq 0 ] && continue
    printf '%-10s %6d %6d %6.1f%%\n' "$d" "$p" "$f" "$(echo "100 * $p / $t" | bc -l)"
done
t=$((pass + fail))
[ $t -gt 0 ] && printf '%-10s %6d %6d %6.1f%%\n' all "$pass" "$fail" "$(echo "100 * $pass / $t" | bc -l)"
echo "mpich-suite: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
