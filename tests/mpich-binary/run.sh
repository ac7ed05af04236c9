#!/usr/bin/env bash
# ABI test: programs from tests/c built with Debian's MPICH compiler wrapper (MPICH's
# mpi.h, linked against libmpich.so.12) run unchanged under our mpirun with
# LD_LIBRARY_PATH=$PREFIX/lib, where libmpich.so.12 is Ferrite. Each must pass at -n 1, 2
# and 4; env.c also checks that the library it ran against names itself Ferrite.
# Ends with `mpich-binary: N passed, N failed`.
#
# Validate against MPICH itself: MPIRUN=mpirun.mpich MPI_LIBDIR= tests/mpich-binary/run.sh
# Knobs: MPICH_CC (default mpicc.mpich), MPIRUN (default $PREFIX/bin/mpirun), MPI_LIBDIR
# (default $PREFIX/lib; empty: leave LD_LIBRARY_PATH alone), TEST_TIMEOUT, MPIRUN_FLAGS.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src=$root/tests/c
PREFIX=${PREFIX:-$root/build}
MPICH_CC=${MPICH_CC:-mpicc.mpich}
if [ -z "${MPIRUN:-}" ]; then export FERRITE_TESTS_EXPECT=${FERRITE_TESTS_EXPECT:-ferrite}; fi
MPIRUN=${MPIRUN:-$PREFIX/bin/mpirun}
MPI_LIBDIR=${MPI_LIBDIR-$PREFIX/lib}
TEST_TIMEOUT=${TEST_TIMEOUT:-30}
MPIRUN_FLAGS=${MPIRUN_FLAGS:-}
PROGRAMS=${PROGRAMS:-ring sizes errors env}
bin=$here/bin
mkdir -p "$bin"
pass=0; fail=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1 ($2)"; [ -s "$log" ] && tail -n 8 "$log" | sed 's/^/    | /'; fail=$((fail + 1)); }

libenv=()
if [ -n "$MPI_LIBDIR" ]; then libenv=(env LD_LIBRARY_PATH="$MPI_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"); fi
echo "mpich-binary: built with $MPICH_CC, run with $MPIRUN, libraries from ${MPI_LIBDIR:-the system}"

if ! command -v "$MPICH_CC" >/dev/null; then
    : >"$log"; bad "mpich-binary" "$MPICH_CC not found (apt-get install mpich libmpich-dev)"
    echo "mpich-binary: $pass passed, $fail failed"; exit 1
fi

for p in $PROGRAMS; do
    if ! $MPICH_CC -O2 -o "$bin/$p" "$src/$p.c" >"$log" 2>&1; then
        bad "$p (build with $MPICH_CC)" "compile error"; continue
    fi
    # The binary must load libmpich.so.12 from MPI_LIBDIR, not the system's MPICH.
    if [ -n "$MPI_LIBDIR" ]; then
        "${libenv[@]}" ldd "$bin/$p" >"$log" 2>&1
        resolved=$(sed -n 's/^\s*libmpich\.so\.12 => \([^ ]*\).*/\1/p' "$log")
        if [ "$(readlink -f "$(dirname "${resolved:-/nonexistent/x}")")" != "$(readlink -f "$MPI_LIBDIR")" ]; then
            bad "$p loads libmpich.so.12 from $MPI_LIBDIR" "resolved to '${resolved:-nothing}'"; continue
        fi
    fi
    for np in 1 2 4; do
        name="$p -n $np"
        timeout -k 5 "$TEST_TIMEOUT" "${libenv[@]}" $MPIRUN -n "$np" $MPIRUN_FLAGS "$bin/$p" >"$log" 2>&1
        rc=$?
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then bad "$name" "timed out after ${TEST_TIMEOUT}s"
        elif [ "$rc" -ne 0 ]; then bad "$name" "exit status $rc"
        elif ! grep -qx "done: $p" "$log"; then bad "$name" "rank 0 never printed 'done: $p'"
        else ok "$name"; fi
        pids=$(pgrep -f -- "$bin/$p" || true)
        if [ -n "$pids" ]; then kill -9 $pids 2>/dev/null; bad "$name" "processes left after mpirun exited"; fi
    done
done
echo "mpich-binary: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
