#!/usr/bin/env bash
# C conformance suite. Builds every tests/c/*.c with $MPICC into tests/c/bin (skipping binaries
# that are up to date, see build() below) and runs each under `timeout` with $MPIRUN at -n 1,
# 2, 4 and 16, or at the counts its first line declares (`/* np: 2 4 16 */`). Prints one
# PASS/FAIL/SKIP line per run (a PASS with the run's wall time) and ends with
# `c: N passed, N failed, N skipped`. A run that times out prints every rank's stack (gdb)
# under its FAIL line before it is killed (run_job below).
#
# Which MPI: by default Ferrite from $PREFIX (./build): $PREFIX/bin/mpicc, $PREFIX/bin/mpirun.
# Another one: MPICC=mpicc.mpich MPIRUN=mpirun.mpich tests/c/run.sh
# Other knobs: TEST_TIMEOUT (seconds per run, default 30), TEST_NP (override the counts,
# e.g. "2"), TEST_NP_UPTO (run each program once, at the largest of its counts not over
# this, or its smallest), MPIRUN_FLAGS (extra mpirun flags), TEST_STACK_LINES and TEST_STACKS_MAX (see
# print_stacks), arguments = test names to run (default all).
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
# Only this shell removes it: bash runs an inherited EXIT trap in a subshell killed before it
# ran its first command (run_job's watchdog, when the job ends at once), which removed the
# logs of every later run in a CI pass (c-tcp-partial, 2026-11-27: 32 "failed").
main_pid=$BASHPID
trap '[ "$BASHPID" = "$main_pid" ] && rm -rf "$logdir"' EXIT
mkdir -p "$bindir"
pass=0; fail=0; skip=0
start=$(date +%s)

echo "c: MPICC=$MPICC MPIRUN=$MPIRUN ferrite-checks=$ferrite"

report_fail() { # name np reason log [stacks]
    echo "FAIL $1 -n $2 ($3)"
    if [ -n "${4:-}" ] && [ -s "$4" ]; then tail -n 8 "$4" | sed 's/^/    | /'; fi
    if [ -n "${5:-}" ] && [ -s "$5" ]; then sed 's/^/    | /' "$5"; fi
    fail=$((fail + 1))
}

# A run that times out prints every rank's stack before it is killed, so the log says where
# each rank waits. The ranks are the job's processes running the test binary: descendants of
# the `timeout` process (through mpirun, and for remote ranks a launcher agent such as
# tests/hosts' `ip netns exec`: network namespaces share the pid space, so gdb attaches from
# here). The ranks are stopped (SIGSTOP) first and continued once every stack is taken: the
# stacks are of one moment, and a rank's peers do not declare it dead while gdb holds it
# (a datagram peer under adaptive does after about a minute). gdb reads libmpi's debug
# information (about 1.7 s of CPU per rank): the first rank alone, filling an index cache
# the others then read, the others 8 at a time, each limited to 60 s. A thread's stack is
# cut to 16 frames, each rank's to TEST_STACK_LINES lines (default 100: a single-threaded
# rank takes about 20); stacks are printed for the first TEST_STACKS_MAX
# timeouts of a run (default 5), so a broken library that hangs everywhere does not also
# pay for gdb everywhere.
STACK_LINES=${TEST_STACK_LINES:-100}
STACKS_MAX=${TEST_STACKS_MAX:-5}
descendants() { # pid: its descendants' pids
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { kids[$2] = kids[$2] " " $1 }
        END { q[1] = root; n = 1
              for (i = 1; i <= n; i++) {
                  m = split(kids[q[i]], c, " ")
                  for (j = 1; j <= m; j++) { q[++n] = c[j]; print c[j] }
              } }'
}
stack_of() { # pid out: the pid's threads' backtraces, or gdb's last words if it got none
    local raw=$2.raw rc
    timeout -k 2 60 gdb -nx -batch -iex "set index-cache directory $logdir/gdb-index" \
        -iex 'set index-cache enabled on' -iex 'set auto-load off' -p "$1" \
        -ex 'set width 0' -ex 'thread apply all bt' </dev/null >"$raw" 2>&1
    rc=$?
    # Frames of std's catch_unwind around every MPI call say nothing: left out. Of a longer
    # stack, a thread shows its 12 innermost frames and its 3 outermost (main's line).
    if grep -qE '^(Thread |#[0-9])' "$raw"; then
        grep -E '^(Thread |#[0-9])' "$raw" |
            grep -vE '^#[0-9]+ +(0x[0-9a-f]+ in )?(core::ops::function|core::panic::unwind_safe|std::panicking|std::panic::catch_unwind)' |
            awk 'function flush() { for (i = 1; i <= n; i++)
                                        if (n <= 16 || i <= 12 || i > n - 3) print f[i]
                                        else if (i == 13) print "    ... (" n - 15 " frames)"
                                    n = 0 }
                 /^Thread / { flush(); print; next } { f[++n] = $0 } END { flush() }' |
            cut -c1-300 | head -n "$STACK_LINES" >>"$2"
    else
        echo "(gdb printed no stack, exit $rc:)" >>"$2"; tail -n 3 "$raw" >>"$2"
    fi
    rm -f "$raw"
}
print_stacks() { # job-pid bin out
    local want p r pids=() ranks=() order i k=0
    want=$(readlink -f -- "$2")
    for p in $(descendants "$1"); do
        [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$want" ] || continue
        r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^PMI_RANK=//p' | head -n 1)
        pids+=("$p"); ranks+=("${r:-?}")
    done
    echo "--- stacks at the timeout: ${#pids[@]} rank(s) of $(basename "$2") (gdb, at most $STACK_LINES lines each) ---" >"$3"
    if [ ${#pids[@]} -eq 0 ]; then
        echo "(no process of $2 under the job; the job's processes:)" >>"$3"
        for p in $(descendants "$1"); do ps -o pid=,stat=,args= -p "$p" 2>/dev/null | cut -c1-160; done >>"$3"
        return
    fi
    command -v gdb >/dev/null || { echo "(gdb is not installed: scripts/install-deps.sh installs it)" >>"$3"; return; }
    order=$(for i in "${!pids[@]}"; do echo "${ranks[$i]} $i"; done | sort -n | cut -d' ' -f2)
    for i in $order; do
        p=${pids[$i]}
        echo "rank ${ranks[$i]} (pid $p, state $(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null), in $(cat "/proc/$p/wchan" 2>/dev/null)):" >"$3.$i"
    done
    kill -STOP "${pids[@]}" 2>/dev/null
    for i in $order; do
        stack_of "${pids[$i]}" "$3.$i" &
        k=$((k + 1))
        if [ $k -eq 1 ] || [ $((k % 8)) -eq 1 ]; then wait; fi
    done
    wait
    kill -CONT "${pids[@]}" 2>/dev/null
    for i in $order; do cat "$3.$i" >>"$3"; rm -f "$3.$i"; done
}

# Runs `$MPIRUN -n np $MPIRUN_FLAGS bin` with output in log and its exit status in $rc: 124
# when it ran over TEST_TIMEOUT s (after print_stacks wrote log.stacks), as `timeout` gives,
# whatever the job's status once killed. A watchdog sends `timeout` the SIGALRM of its own
# clock once the stacks are printed; `timeout` then kills the job as usual (TERM, and KILL
# 5 s later). Its own clock (600 s more) is only a backstop, should the watchdog fail.
run_job() { # np bin log
    timeout -k 5 $((TEST_TIMEOUT + 600)) $MPIRUN -n "$1" $MPIRUN_FLAGS "$2" >"$3" 2>&1 &
    local job=$!
    (
        # TERM: the job ended (before the deadline, or while the stacks were taken).
        trap 'kill $s 2>/dev/null; [ -e "$3.stacks" ] && [ -z "${taken:-}" ] &&
              echo "(the job ended while its stacks were taken: a run just over the time)" >>"$3.stacks"
              exit 0' TERM
        sleep "$TEST_TIMEOUT" & s=$!
        wait $s
        kill -0 $job 2>/dev/null || exit 0
        : >"$3.late"
        if [ "$(ls "$logdir" | grep -c '\.stacks$')" -lt "$STACKS_MAX" ]; then
            print_stacks $job "$2" "$3.stacks"
        else
            echo "(stacks not printed: printed for the first $STACKS_MAX timeouts)" >"$3.stacks"
        fi
        taken=1
        kill -ALRM $job 2>/dev/null
    ) &
    local dog=$!
    wait $job
    rc=$?
    kill $dog 2>/dev/null
    wait $dog 2>/dev/null
    if [ -e "$3.late" ]; then rc=124; rm -f "$3.late"; fi
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
    if [ -n "${TEST_NP_UPTO:-}" ]; then # one run: the largest count up to it, else the smallest
        nps=$(echo $nps | tr ' ' '\n' | sort -n | awk -v m="$TEST_NP_UPTO" 'NR == 1 || $1 <= m { p = $1 } END { print p }')
    fi
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
        run_job "$np" "$bin" "$log"
        took=$(( ($(date +%s%N) - t0) / 10000000 ))
        took=$(printf "%d.%02d s" $((took / 100)) $((took % 100)))
        if ! wait_gone "$bin"; then
            reap "$bin"
            report_fail "$name" "$np" "processes left after mpirun exited (status $rc)" "$log"
        elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            report_fail "$name" "$np" "timed out after ${TEST_TIMEOUT}s" "$log" "$log.stacks"
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
