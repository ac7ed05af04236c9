#!/usr/bin/env bash
# Ferrite under a real single-node Slurm (Debian's slurm-wlm and munge), started and stopped
# here in a scratch directory with its own munge key, ports and state; nothing system-wide is
# touched. The node is named ferrite-node1 (NodeHostname = this host, NodeAddr 127.0.0.1), so
# to mpirun it is another host: `salloc -n 3 mpirun ./prog` starts every rank through srun.
# Checks, with tests/buildsys/allsum.c (allreduce + ring, output checked):
#   srun --mpi=pmi2       runs the job (Slurm's pmi2 plugin speaks our PMI-1)
#   srun --mpi=pmix       every task refuses in MPI_Init, naming srun --mpi=pmix (skipped
#                         when Slurm's pmix plugin cannot load)
#   srun --mpi=none       every task refuses (never 3 singletons)
#   salloc -n 3 mpirun    the allocation gives 3 ranks, started through srun
#   salloc -n 4 mpirun -n 1 a : -n 3 b   an MPMD job (tests/launch/mpmd.c checks MPI_APPNUM)
#   srun over shm, ending normally and with a rank SIGKILLed (tests/shm/spin.c): nothing
#                         of the job is left in /dev/shm, no rank survives
# Needs root and slurmctld, slurmd, munged, srun, salloc (scripts/install-deps.sh); otherwise
# prints a SKIP line and `slurm: 0 passed, 0 failed, 5 skipped`. Knobs: PREFIX.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=$(cd "${PREFIX:-$root/build}" && pwd)
checks=7
pass=0; fail=0; skip=0
skip_all() {
    echo "SKIP slurm: $1"
    echo "slurm: 0 passed, 0 failed, $checks skipped"
    exit 0
}
[ "$(id -u)" -eq 0 ] || skip_all "slurmd needs root (running as uid $(id -u))"
for t in slurmctld slurmd munged srun salloc sinfo; do
    command -v "$t" >/dev/null || skip_all "no $t (Debian packages slurm-wlm, munge: scripts/install-deps.sh)"
done

S=$(mktemp -d /tmp/ferrite-slurm.XXXXXX)
chmod 755 "$S"
stop() {
    # Only the daemons started here, by their pid files.
    local f
    for f in "$S/slurmd.pid" "$S/slurmctld.pid" "$S/munge/munged.pid"; do
        [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    sleep 1
    rm -rf "$S"
}
trap stop EXIT
trap 'exit 130' INT TERM

mkdir -p "$S/state" "$S/spool" "$S/munge"
chmod 700 "$S/munge"
head -c 1024 /dev/urandom > "$S/munge/munge.key"
chmod 400 "$S/munge/munge.key"
host=$(hostname -s)
port=$((20000 + $$ % 20000))
cat > "$S/slurm.conf" <<CONF
ClusterName=ferritetest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.sock
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=ferrite-node1 NodeHostname=$host NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=ferrite Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$S/slurm.conf

munged --socket="$S/munge/munge.sock" --pid-file="$S/munge/munged.pid" \
    --log-file="$S/munge/munged.log" --seed-file="$S/munge/seed" \
    --key-file="$S/munge/munge.key" --force >"$S/start.log" 2>&1 ||
    skip_all "munged does not start: $(tail -n 3 "$S/start.log")"
slurmctld -f "$SLURM_CONF" >>"$S/start.log" 2>&1 ||
    skip_all "slurmctld does not start: $(tail -n 3 "$S/start.log" "$S/slurmctld.log" 2>/dev/null)"
slurmd -f "$SLURM_CONF" -N ferrite-node1 >>"$S/start.log" 2>&1 ||
    skip_all "slurmd does not start: $(tail -n 3 "$S/start.log" "$S/slurmd.log" 2>/dev/null)"
up=
for _ in $(seq 1 30); do
    if sinfo -h -o '%t' 2>/dev/null | grep -qE '^idle'; then up=1; break; fi
    sleep 1
done
[ -n "$up" ] || skip_all "the node never became idle: $(sinfo 2>&1 | tail -n 2); $(tail -n 3 "$S/slurmd.log")"

ok() { echo "PASS $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1: $2"; fail=$((fail + 1)); }

work=$S/work
mkdir -p "$work"
"$PREFIX/bin/mpicc" -o "$work/allsum" "$root/tests/buildsys/allsum.c" &&
    "$PREFIX/bin/mpicc" -o "$work/mpmd" "$root/tests/launch/mpmd.c" &&
    "$PREFIX/bin/mpicc" -o "$work/spin" "$root/tests/shm/spin.c" || {
    ko build "mpicc failed"; echo "slurm: $pass passed, $fail failed"; exit 1; }
want="C lib=Ferrite MPI size=3 sum=6 token=3"

out=$(cd "$work" && timeout 120 srun -n 3 --mpi=pmi2 ./allsum 2>&1)
[ "$out" = "$want" ] && ok "srun --mpi=pmi2" || ko "srun --mpi=pmi2" "$out"

refused() { # name mpi-type expected-words
    local out
    out=$(cd "$work" && timeout 120 srun -n 3 --mpi="$2" ./allsum 2>&1)
    local n
    n=$(echo "$out" | grep -c "Fatal error in MPI_Init.*$3")
    if [ "$n" -eq 3 ] && ! echo "$out" | grep -q "C lib="; then ok "$1"; else ko "$1" "$out"; fi
}
if srun --mpi=list 2>&1 | grep -qw pmix &&
   ! (cd "$work" && timeout 60 srun -n 1 --mpi=pmix true 2>&1) | grep -q "can not load PMIx"; then
    refused "srun --mpi=pmix refuses" pmix "srun --mpi=pmix"
else
    echo "SKIP srun --mpi=pmix: Slurm's pmix plugin cannot load here (libpmix-dev?)"
    skip=$((skip + 1))
fi
refused "srun --mpi=none refuses" none "started by srun with no PMI"

out=$(cd "$work" && timeout 120 salloc -n 3 "$PREFIX/bin/mpirun" --report-bindings ./allsum 2>&1)
if echo "$out" | grep -qx "$want" &&
   [ "$(echo "$out" | grep -c 'on ferrite-node1: not bound by this mpirun (remote)')" -eq 3 ]; then
    ok "salloc -n 3 mpirun (ranks through srun)"
else
    ko "salloc -n 3 mpirun (ranks through srun)" "$out"
fi

out=$(cd "$work" && timeout 120 salloc -n 4 "$PREFIX/bin/mpirun" -n 1 ./mpmd 0 1 : -n 3 ./mpmd 1 1 2>&1)
if echo "$out" | grep -qx "done: mpmd app 0 of 4 ranks"; then ok "salloc mpirun MPMD"; else
    ko "salloc mpirun MPMD" "$out"; fi


# Slurm as the launcher of a shared-memory job: nothing survives it in /dev/shm, whether it
# ends normally or a rank is SIGKILLed (srun then ends the step), and no rank is left.
# Ferrite's own objects only (the memfd fallback's /dev/shm/ferrite-<pid>-<hex>, the job's
# ferrite-kvs_*): other MPIs' leftovers (MPICH's ucx_shm_posix_*, Open MPI's vader_segment.*,
# a PMIx shm_*) and their jobs running meanwhile are not ours to count.
ours() { ls /dev/shm 2>/dev/null | grep -E '^ferrite' | sort; }
before=$(ours)
shm_job() { # name kill(yes|no)
    local log=$work/spin.log pids i args=(1) # run 1 s; without it, until killed
    [ "$2" = yes ] && args=()
    : >"$log"
    (cd "$work" && FERRITE_TRANSPORTS=shm,self timeout 120 srun -n 4 --mpi=pmi2 --kill-on-bad-exit=1 \
        ./spin "${args[@]}" >"$log" 2>&1) &
    local job=$!
    for i in $(seq 1 600); do [ "$(grep -c '^pid ' "$log")" -ge 4 ] && break; sleep 0.05; done
    pids=$(awk '/^pid / { print $3 }' "$log")
    [ "$(echo "$pids" | grep -c .)" -eq 4 ] || { ko "$1" "ranks did not start: $(tail -n 3 "$log")"; wait $job; return; }
    [ "$2" = yes ] && kill -9 "$(echo "$pids" | sed -n 3p)"
    wait $job
    local rc=$? p
    if [ "$2" = no ] && { [ $rc -ne 0 ] || ! grep -q 'done: spin' "$log"; }; then
        ko "$1" "exit $rc: $(tail -n 3 "$log")"; return; fi
    if [ "$2" = yes ] && [ $rc -eq 0 ]; then ko "$1" "the job exited 0 with a rank killed"; return; fi
    for p in $pids; do kill -0 "$p" 2>/dev/null && { ko "$1" "rank pid $p still runs"; kill -9 $pids 2>/dev/null; return; }; done
    [ "$(ours)" = "$before" ] || { ko "$1" "left in /dev/shm: $(comm -13 <(echo "$before") <(ours) | tr '\n' ' ')"; return; }
    ok "$1"
}
shm_job "srun shm job: normal end leaves nothing" no
shm_job "srun shm job: a rank SIGKILLed leaves nothing" yes

echo "slurm: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
