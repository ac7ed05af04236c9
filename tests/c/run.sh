#!/usr/bin/env bash
# C conformance suite. Builds every tests/c/*.c with $MPICC into tests/c/bin (skipping binaries
# that are up to date, see build() below) and runs each under `timeout` with $MPIRUN at -n 1,
# 2, 4 and 16, or at the counts its first line declares (`/* np: 2 4 16 */`). Prints one
# PASS/FAIL/SKIP line per run (a PASS with the run's wall time) and ends with
# `c: N passed, N failed, N skipped`.
#
# Which MPI: by default Ferrite from $PREFIX (./build): $PREFIX/bin/mpicc, $PREFIX/bin/mpirun.
# Another one: MPICC=mpicc.mpich MPIRUN=mpirun.mpich tests/c/run.sh
# Other knobs: TEST_TIMEOUT (seconds per run, default 30), TEST_NP (override the counts,
# e.g. "2"), MPIRUN_FLAGS (extra mpirun flags), arguments = test names to run (default all).
#
# A program passes when the job exits 0 and rank 0 printed `done: <name>`; it is skipped
# when rank 0 printed `skipped: <reason>` (only for Ferrite-only checks on another MPI).
# Programs named job_*.c are job-failure tests: one rank dies on purpose and the runner
# checks the launcher's reaction (see check_job_failure below).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
if [ -z "${MPICC:-}" ] && [ -z "${MPIRUN:-}" ]; then
    export FERRITE_TESTS_EXPECT=${FERRITE_TESTS_EXPECT:-ferrite}
fi
MPICC=${MPICC:-$PREFIX/bin/mpicc}
MPIRUN=${MPIRUN:-$PREFIX/bin/mpirun}
TEST_TIMEOUT=${TEST_TIMEOUT:-30}
MPIRUN_FLAGS=${MPIRUN_FLAGS:-}
ferrite=0
[ "${FERRITE_TESTS_EXPECT:-}" = ferrite ] && ferrite=1

bindir=$here/bin
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT
mkdir -p "$bindir"
pass=0; fail=0; skip=0
start=$(date +%s)

echo "c: MPICC=$MPICC MPIRUN=$MPIRUN ferrite-checks=$ferrite"

report_fail() { # name np reason log
    echo "FAIL $1 -n $2 ($3)"
    if [ -n "${4:-}" ] && [ -s "$4" ]; then tail -n 8 "$4" | sed 's/^/    | /'; fi
    fail=$((fail + 1))
}

# Processes of this binary still alive: print their pids.
leftovers() { pgrep -f -- "$1" || true; }

# Kill what a failed job left behind (only processes running our own test binary).
reap() {
    local pids
    pids=$(leftovers "$1")
    if [ -n "$pids" ]; then kill -9 $pids 2>/dev/null || true; fi
}

wait_gone() { # binary: wait up to 3 s for the job's processes to disappear
    for _ in $(seq 30); do
        [ -z "$(leftovers "$1")" ] && return 0
        sleep 0.1
    done
    return 1
}

# One rank (the last) dies on purpose while the others wait in MPI_Recv. Expected: mpirun
# exits non-zero (with the declared code, if any) within 10 s, no process of the job is
# left and, on Ferrite, the launcher prints a line naming the failing rank.
check_job_failure() { # name np bin log
    local name=$1 np=$2 bin=$3 log=$4
    local want_code
    want_code=$(sed -n '1,5s|.*/\* *exit: *\([0-9]*\).*|\1|p' "$here/$name.c" | head -n 1)
    local t0 t1 rc
    t0=$(date +%s.%N)
    timeout -k 5 20 $MPIRUN -n "$np" $MPIRUN_FLAGS "$bin" >"$log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    local elapsed
    elapsed=$(echo "$t1 - $t0" | bc)
    if ! wait_gone "$bin"; then
        reap "$bin"
        report_fail "$name" "$np" "processes of the job left after mpirun exited" "$log"; return
    fi
    # 124: timeout fired; 137 is also what `timeout -k` gives when it had to SIGKILL, but a
    # launcher legitimately exits 128+9 for a rank killed by SIGKILL, so tell them apart by time.
    if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "$(echo "$elapsed >= 20" | bc)" -eq 1 ]; }; then
        report_fail "$name" "$np" "mpirun did not exit within 20 s" "$log"; return
    fi
    if [ "$rc" -eq 0 ]; then
        report_fail "$name" "$np" "mpirun exited 0 although a rank failed" "$log"; return
    fi
    if [ "$(echo "$elapsed > 10" | bc)" -eq 1 ]; then
        report_fail "$name" "$np" "mpirun took ${elapsed}s to exit, limit 10 s" "$log"; return
    fi
    if [ "$ferrite" -eq 1 ]; then
        if [ -n "$want_code" ] && [ "$rc" -ne "$want_code" ]; then
            report_fail "$name" "$np" "mpirun exit status $rc, expected $want_code" "$log"; return
        fi
        local last=$((np - 1))
        if ! grep -Eiq "rank[ :=]*$last([^0-9]|$)" "$log"; then
            report_fail "$name" "$np" "no line naming the failing rank $last" "$log"; return
        fi
    fi
    echo "PASS $name -n $np (exit $rc after $(printf "%.1f" "$elapsed") s)"
    pass=$((pass + 1))
}

# A program is compiled only when its binary is not up to date: built by the same compiler
# command with the same flags (recorded in bin/.NAME.key) and newer than its source, the
# headers here, and the compiler wrapper, mpi.h and libmpi of the MPI it was built with
# (<wrapper's dir>/../include, ../lib). make test runs this script ~20 times on one
# installation; only the first compiles. Builds go to a temporary name first, so an
# interrupted or concurrent build never leaves a half-written binary.
cflags="-O2 -g -Wall"
mpicc_path=$(command -v "$MPICC" 2>/dev/null || echo "$MPICC")
mpicc_real=$(readlink -f -- "$mpicc_path" 2>/dev/null || echo "$mpicc_path")
build_key="$mpicc_real $cflags cc=${FERRITE_CC:-}${MPICH_CC:-}"
build_deps=("$mpicc_real")
for f in "$here"/*.h; do [ -e "$f" ] && build_deps+=("$f"); done
mpi_root=$(cd "$(dirname "$mpicc_real")/.." 2>/dev/null && pwd) || mpi_root=
if [ -n "$mpi_root" ]; then
    for f in "$mpi_root/include/mpi.h" "$mpi_root"/lib/libmpi.so*; do
        [ -e "$f" ] && build_deps+=("$f")
    done
fi
compiled=0; reused=0

up_to_date() { # src bin
    local key=$bindir/.$(basename "$2").key d
    [ -x "$2" ] && [ -f "$key" ] && [ "$(cat "$key")" = "$build_key" ] || return 1
    [ "$1" -nt "$2" ] && return 1
    for d in "${build_deps[@]}"; do [ "$d" -nt "$2" ] && return 1; done
    return 0
}

build() { # src bin log
    local key=$bindir/.$(basename "$2").key tmp=$2.tmp.$$
    if up_to_date "$1" "$2"; then reused=$((reused + 1)); return 0; fi
    rm -f "$key"
    compiled=$((compiled + 1))
    if ! $MPICC $cflags -o "$tmp" "$1" >"$3" 2>&1; then
        rm -f "$tmp" "$2"
        return 1
    fi
    mv -f "$tmp" "$2" && echo "$build_key" >"$key"
}

if [ $# -gt 0 ]; then names=("$@"); else
    names=()
    for f in "$here"/*.c; do names+=("$(basename "$f" .c)"); done
fi

for name in "${names[@]}"; do
    src=$here/$name.c
    bin=$bindir/$name
    nps=${TEST_NP:-$(sed -n '1s|.*/\* *np: *\([0-9 ]*\)\*/.*|\1|p' "$src")}
    nps=${nps:-1 2 4 16}
    if ! build "$src" "$bin" "$logdir/$name.build"; then
        for np in $nps; do report_fail "$name" "$np" "build failed" "$logdir/$name.build"; done
        continue
    fi
    timed_out=""
    for np in $nps; do
        log=$logdir/$name.$np.log
        # After a hang, larger runs of the same program are not tried (bounds the time a
        # broken library costs): they count as failures.
        if [ -n "$timed_out" ]; then
            report_fail "$name" "$np" "not run: timed out at -n $timed_out"; continue
        fi
        case $name in
        job_*) check_job_failure "$name" "$np" "$bin" "$log"; continue ;;
        esac
        t0=$(date +%s%N)
        timeout -k 5 "$TEST_TIMEOUT" $MPIRUN -n "$np" $MPIRUN_FLAGS "$bin" >"$log" 2>&1
        rc=$?
        took=$(( ($(date +%s%N) - t0) / 10000000 ))
        took=$(printf "%d.%02d s" $((took / 100)) $((took % 100)))
        if ! wait_gone "$bin"; then
            reap "$bin"
            report_fail "$name" "$np" "processes left after mpirun exited (status $rc)" "$log"
        elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            report_fail "$name" "$np" "timed out after ${TEST_TIMEOUT}s" "$log"
            timed_out=$np
        elif [ "$rc" -ne 0 ]; then
            report_fail "$name" "$np" "exit status $rc after $took" "$log"
        elif grep -q "^skipped: " "$log"; then
            echo "SKIP $name -n $np ($(grep -m1 '^skipped: ' "$log" | cut -c10-))"
            skip=$((skip + 1))
        elif ! grep -qx "done: $name" "$log"; then
            report_fail "$name" "$np" "exit 0 but rank 0 never printed 'done: $name'" "$log"
        else
            echo "PASS $name -n $np ($took)"
            pass=$((pass + 1))
        fi
    done
done
echo "c: suite took $(( $(date +%s) - start )) s ($compiled programs compiled, $reused up to date)"
echo "c: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
