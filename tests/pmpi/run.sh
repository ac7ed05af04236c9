#!/usr/bin/env bash
# Profiling-interface (PMPI) test. Builds tool.c into libtool.so (intercepts MPI_Send and
# MPI_Finalize, forwards to PMPI_*) and prog.c, then checks at -n 2 and 4 that the tool
# saw exactly the program's MPI_Send calls, with the tool linked before the MPI library
# and with LD_PRELOAD, and that without the tool nothing is intercepted.
# Which MPI: $PREFIX (default ./build) or MPICC=... MPIRUN=... as in tests/c/run.sh.
# Ends with `pmpi: N passed, N failed`.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
MPICC=${MPICC:-$PREFIX/bin/mpicc}
MPIRUN=${MPIRUN:-$PREFIX/bin/mpirun}
MPIRUN_FLAGS=${MPIRUN_FLAGS:-}
TEST_TIMEOUT=${TEST_TIMEOUT:-30}
bin=$here/bin
mkdir -p "$bin"
pass=0; fail=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1 ($2)"; [ -s "$log" ] && tail -n 8 "$log" | sed 's/^/    | /'; fail=$((fail + 1)); }

# check NAME NP EXPECT_TOOL: the job's output in $log must show every rank's program line
# and, if EXPECT_TOOL, a tool line per rank with the same count (else no tool line).
check() {
    local name=$1 np=$2 tool=$3
    for r in $(seq 0 $((np - 1))); do
        local want
        want=$(sed -n "s/^pmpi-prog: rank $r made \([0-9]*\) MPI_Send calls$/\1/p" "$log")
        if [ -z "$want" ]; then bad "$name" "rank $r did not finish"; return; fi
        local got
        got=$(sed -n "s/^pmpi-tool: rank $r MPI_Send calls \([0-9]*\)$/\1/p" "$log")
        if [ "$tool" = 1 ] && [ "$got" != "$want" ]; then
            bad "$name" "rank $r: tool counted '${got:-nothing}' MPI_Send calls, program made $want"; return
        fi
        if [ "$tool" = 0 ] && [ -n "$got" ]; then
            bad "$name" "tool output without the tool"; return
        fi
    done
    ok "$name"
}

run() { # np command...
    local np=$1; shift
    timeout -k 5 "$TEST_TIMEOUT" $MPIRUN -n "$np" $MPIRUN_FLAGS "$@" >"$log" 2>&1
}

if ! $MPICC -O2 -fPIC -shared -o "$bin/libtool.so" "$here/tool.c" >"$log" 2>&1; then
    bad "build libtool.so" "compile error"
elif ! $MPICC -O2 -o "$bin/prog-linked" "$here/prog.c" -L"$bin" -ltool -Wl,-rpath,"$bin" >"$log" 2>&1; then
    bad "build prog-linked" "compile error"
elif ! $MPICC -O2 -o "$bin/prog" "$here/prog.c" >"$log" 2>&1; then
    bad "build prog" "compile error"
else
    for np in 2 4; do
        if run "$np" "$bin/prog-linked"; then check "pmpi linked -n $np" "$np" 1
        else bad "pmpi linked -n $np" "exit status $?"; fi
        if run "$np" env LD_PRELOAD="$bin/libtool.so" "$bin/prog"; then
            check "pmpi LD_PRELOAD -n $np" "$np" 1
        else bad "pmpi LD_PRELOAD -n $np" "exit status $?"; fi
    done
    if run 2 "$bin/prog"; then check "pmpi without tool -n 2" 2 0
    else bad "pmpi without tool -n 2" "exit status $?"; fi
fi
echo "pmpi: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
