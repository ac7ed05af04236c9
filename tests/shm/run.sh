#!/usr/bin/env bash
# Nothing of a job's shared memory survives it, however it ends and whoever launched it:
# the shm transport's segments are anonymous files (memfd) that the kernel frees with the
# last process that has one open or mapped. For each launcher (our mpirun, MPICH's Hydra)
# and each ending (normal; a rank SIGKILLed; a rank calling MPI_Abort; the launcher
# SIGKILLed), a 4-rank job over
# shm exchanges checked data; while it runs, every rank must map its segments from memfds
# and /dev/shm must hold no file of ours; after it, no file and no rank may remain.
# Slurm is not installed here (Debian's slurm-wlm needs slurmctld/slurmd and munge set up):
# srun starts ranks through the same PMI-1 path as Hydra, and the segments are memfds either
# way, so nothing of Ferrite's can be left in /dev/shm whoever launches the job.
# Ends with `shm: N passed, N failed`.
set -u
cd "$(dirname "$0")/../.."
PREFIX=${PREFIX:-$PWD/build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0; fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1: $2"; fail=$((fail + 1)); }

"$PREFIX/bin/mpicc" -O1 -o "$work/spin" tests/shm/spin.c || { echo "shm: 0 passed, 1 failed"; exit 1; }
# Ferrite's own objects only (the memfd fallback's /dev/shm/ferrite-<pid>-<hex>, the job's
# ferrite-kvs_*): other MPIs' leftovers (MPICH's ucx_shm_posix_*, Open MPI's vader_segment.*,
# a PMIx shm_*) and their jobs running meanwhile are not ours to count.
ours() { ls /dev/shm 2>/dev/null | grep -E '^ferrite' | sort; }
before=$(ours)

# Waits until the job printed a pid line for every rank; prints the pids.
pids_of() { # log
    local i
    for i in $(seq 1 300); do
        [ "$(grep -c '^pid ' "$1")" -ge 4 ] && break
        sleep 0.05
    done
    awk '/^pid / { print $3 }' "$1"
}

# Checks while the job runs: ranks map memfd segments, /dev/shm has nothing new.
check_running() { # name pids...
    local name=$1; shift
    [ $# -eq 4 ] || { ko "$name" "only $# ranks reported (log: $(tail -n 3 "$work/log" | tr '\n' ' '))"; return 1; }
    local p
    # /proc/<pid>/maps is not read atomically: a rank that maps or unmaps buffers while
    # it is read can have a line skipped, so a miss is looked at again before it counts.
    for p in "$@"; do
        local seen=0 try
        for try in 1 2 3 4 5; do
            grep -q 'memfd:ferrite-shm' "/proc/$p/maps" 2>/dev/null && { seen=1; break; }
            sleep 0.1
        done
        [ $seen -eq 1 ] || {
            ko "$name" "rank pid $p maps no memfd segment (alive: $(kill -0 "$p" 2>/dev/null && echo yes || echo no))"; return 1; }
    done
    [ "$(ours)" = "$before" ] || { ko "$name" "/dev/shm holds files while the job runs: $(ours | tr '\n' ' ')"; return 1; }
}

check_after() { # name pids...
    local name=$1; shift
    local p i
    for i in $(seq 1 100); do
        local alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive -eq 0 ] && break
        sleep 0.1
    done
    for p in "$@"; do
        if kill -0 "$p" 2>/dev/null; then ko "$name" "rank pid $p still runs"; kill -9 "$@" 2>/dev/null; return; fi
    done
    if [ "$(ours)" != "$before" ]; then ko "$name" "left in /dev/shm: $(comm -13 <(echo "$before") <(ours) | tr '\n' ' ')"; return; fi
    ok "$name"
}

launchers=("ferrite:$PREFIX/bin/mpirun")
if command -v mpiexec.hydra >/dev/null; then launchers+=("hydra:mpiexec.hydra")
elif command -v mpirun.mpich >/dev/null; then launchers+=("hydra:mpirun.mpich")
else echo "mpiexec.hydra / mpirun.mpich missing: the Hydra cases are not run"; fail=$((fail + 1)); fi

for l in "${launchers[@]}"; do
    lname=${l%%:*}; run=${l#*:}
    export FERRITE_TRANSPORTS=shm,self
    # 1. A normal end.
    "$run" -n 4 "$work/spin" 1 >"$work/log" 2>&1 &
    job=$!
    mapfile -t pids < <(pids_of "$work/log")
    if check_running "$lname normal end" "${pids[@]}"; then
        wait $job; rc=$?
        if [ $rc -ne 0 ] || ! grep -q 'done: spin' "$work/log"; then ko "$lname normal end" "exit $rc"
        else check_after "$lname normal end" "${pids[@]}"; fi
    else kill -9 $job "${pids[@]}" 2>/dev/null; wait $job 2>/dev/null; fi

    # 2. A rank SIGKILLed mid-job: the job ends (launcher's teardown) and leaves nothing.
    "$run" -n 4 "$work/spin" >"$work/log" 2>&1 &
    job=$!
    mapfile -t pids < <(pids_of "$work/log")
    if check_running "$lname rank killed" "${pids[@]}"; then
        kill -9 "${pids[2]}"
        for i in $(seq 1 200); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
        if kill -0 $job 2>/dev/null; then ko "$lname rank killed" "the job did not end in 20 s"; kill -9 $job "${pids[@]}" 2>/dev/null
        else check_after "$lname rank killed" "${pids[@]}"; fi
        wait $job 2>/dev/null
    else kill -9 $job "${pids[@]}" 2>/dev/null; wait $job 2>/dev/null; fi

    # 3. A rank calls MPI_Abort: a failed job, ended by the launcher.
    "$run" -n 4 "$work/spin" abort >"$work/log" 2>&1 &
    job=$!
    mapfile -t pids < <(pids_of "$work/log")
    if check_running "$lname rank aborts" "${pids[@]}"; then
        for i in $(seq 1 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
        if kill -0 $job 2>/dev/null; then ko "$lname rank aborts" "the job did not end in 30 s"; kill -9 $job "${pids[@]}" 2>/dev/null
        else
            wait $job; rc=$?
            if [ $rc -eq 0 ]; then ko "$lname rank aborts" "the launcher exited 0"
            else check_after "$lname rank aborts (exit $rc)" "${pids[@]}"; fi
        fi
        wait $job 2>/dev/null
    else kill -9 $job "${pids[@]}" 2>/dev/null; wait $job 2>/dev/null; fi

    # 4. The launcher SIGKILLed mid-job: its ranks are killed too (ours: PR_SET_PDEATHSIG;
    # Hydra leaves them running, so the test kills them, as a batch system would).
    "$run" -n 4 "$work/spin" >"$work/log" 2>&1 &
    job=$!
    mapfile -t pids < <(pids_of "$work/log")
    if check_running "$lname launcher killed" "${pids[@]}"; then
        kill -9 $job; wait $job 2>/dev/null
        if [ "$lname" != ferrite ]; then sleep 0.5; kill -9 "${pids[@]}" 2>/dev/null; fi
        check_after "$lname launcher killed" "${pids[@]}"
    else kill -9 $job "${pids[@]}" 2>/dev/null; wait $job 2>/dev/null; fi
done
echo "shm: $pass passed, $fail failed"
[ $fail -eq 0 ]
