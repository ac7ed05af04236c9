#!/usr/bin/env bash
# Launch tests that need the MPI library (mpirun's own options are tested in
# crates/mpirun/tests): an MPMD job whose programs check MPI_APPNUM and exchange data, and
# programs started by launchers Ferrite cannot serve (faked PMIx, Open MPI and plain-srun
# environments), which must refuse to run as singletons with a message saying what to use.
# Ends with `launch: N passed, N failed`. Knobs: PREFIX (default ./build).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
MPIRUN=$PREFIX/bin/mpirun
pass=0; fail=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ok() { echo "PASS $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1: $2"; fail=$((fail + 1)); }

if ! "$PREFIX/bin/mpicc" -O1 -o "$work/mpmd" "$here/mpmd.c" 2>"$work/cc.err"; then
    ko build "$(cat "$work/cc.err")"
    echo "launch: $pass passed, $fail failed"; exit 1
fi
prog=$work/mpmd

# MPMD: 1 + 3 ranks, and 2 + 2 with a per-program working directory.
mpmd() { # name expected-output mpirun-args...
    local name=$1 want=$2; shift 2
    local out
    out=$(timeout 60 "$MPIRUN" "$@" 2>&1)
    local rc=$?
    if [ "$rc" -eq 0 ] && [ "$out" = "$want" ]; then ok "$name"; else ko "$name" "rc=$rc: $out"; fi
}
mpmd mpmd-1+3 "done: mpmd app 0 of 4 ranks" -n 1 "$prog" 0 1 : -n 3 "$prog" 1 1
mpmd mpmd-2+2-wdir "done: mpmd app 0 of 4 ranks" -n 2 -wdir "$work" ./mpmd 0 2 : -n 2 "$prog" 1 2
mpmd mpmd-1+1-tcp "done: mpmd app 0 of 2 ranks" -genv FERRITE_TRANSPORTS tcp,self \
    -n 1 "$prog" 0 1 : -n 1 "$prog" 1 1
# Hydra's MPMD: its appnums reach MPI_APPNUM; its universe size of -1 leaves
# MPI_UNIVERSE_SIZE unset (as MPICH).
if command -v mpirun.mpich >/dev/null; then
    MPIRUN=mpirun.mpich mpmd mpmd-hydra-1+2 "done: mpmd app 0 of 3 ranks" \
        -n 1 "$prog" 0 1 -1 : -n 2 "$prog" 1 1 -1
else
    ko mpmd-hydra "mpirun.mpich missing (scripts/install-deps.sh installs mpich)"
fi

# A foreign launcher's rank: refused, with the reason and what to use, never a singleton.
refused() { # name expected-words env-assignments...
    local name=$1 words=$2; shift 2
    local out
    out=$(env -u PMI_FD -u PMI_PORT "$@" timeout 30 "$prog" 0 1 2>&1)
    local rc=$?
    if [ "$rc" -eq 0 ] || echo "$out" | grep -q "done: mpmd"; then
        ko "$name" "ran as a singleton (rc=$rc): $out"
    elif ! echo "$out" | grep -q -- "$words" || ! echo "$out" | grep -q -- "--mpi=pmi2"; then
        ko "$name" "message lacks '$words' or the advice: $out"
    else
        ok "$name"
    fi
}
refused refuse-srun-pmix "srun --mpi=pmix" PMIX_NAMESPACE=slurm.pmix.1.0 PMIX_RANK=0 \
    SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2
refused refuse-prterun "PMIx launcher" PMIX_NAMESPACE=prterun-x-1@1 PMIX_RANK=0
refused refuse-ompi "Open MPI's mpirun" OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=0
refused refuse-plain-srun "task 0 of 2 started by srun" SLURM_JOB_ID=5 SLURM_STEP_ID=0 \
    SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2

# Where a singleton is right: a one-task step, a program run by hand inside an allocation,
# and the override.
singleton() { # name env-assignments...
    local name=$1; shift
    local out
    out=$(env -u PMI_FD -u PMI_PORT "$@" timeout 30 "$prog" 0 1 2>&1)
    if [ "$out" = "done: mpmd app 0 of 1 ranks" ]; then ok "$name"; else ko "$name" "$out"; fi
}
singleton singleton-one-task SLURM_JOB_ID=5 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1
singleton singleton-in-salloc SLURM_JOB_ID=5 SLURM_NTASKS=4 SLURM_JOB_NODELIST=x
singleton singleton-forced FERRITE_SINGLETON=1 OMPI_COMM_WORLD_SIZE=4

# MPI_Finalize failing after the state is gone (the report cannot be written): the fatal
# report still names the rank, and the job fails.
out=$(timeout 60 "$MPIRUN" -n 1 --report="$work/no-such-dir/r.json" "$prog" 0 1 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && echo "$out" | grep -q "Fatal error in MPI_Finalize on rank 0 " \
        && echo "$out" | grep -q "cannot write the report"; then
    ok finalize-report-unwritable
else
    ko finalize-report-unwritable "rc=$rc: $out"
fi

echo "launch: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
