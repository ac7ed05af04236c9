#!/usr/bin/env bash
# Scale suite: a hello-world and a ring (tests/scale/scale.c, data checked) at -n 256 on one
# host under FERRITE_CONN=ondemand, over the default transports (shm) and over
# FERRITE_TRANSPORTS=tcp,self, at -n 64 over tcp, and at -n 384 over tcp with the soft
# open-file limit at the usual 1024; each run's FERRITE_REPORT JSON is checked (one record per
# rank, no failed connection, a ring opens exactly 2 connections per rank over tcp and none
# over shm) and no /dev/shm file of the job may remain. Ends with `scale: N passed, N failed`.
# Knobs: PREFIX (default ./build), SCALE_NP (default 256), TEST_TIMEOUT (seconds per job,
# default 120; a 256-rank job takes 1-3 s on a 2-core machine).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
MPICC=$PREFIX/bin/mpicc
MPIRUN=$PREFIX/bin/mpirun
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
SCALE_NP=${SCALE_NP:-256}
export FERRITE_CONN=ondemand
pass=0; fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$here/bin"
bin=$here/bin/scale

ok() { echo "PASS $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1 ($2)"; if [ -n "${3:-}" ] && [ -s "$3" ]; then tail -n 8 "$3" | sed 's/^/    | /'; fi; fail=$((fail + 1)); }

if ! $MPICC -O2 -Wall -o "$bin" "$here/scale.c" >"$tmp/build.log" 2>&1; then
    ko "build scale.c" "compile error" "$tmp/build.log"
    echo "scale: $pass passed, $fail failed"; exit 1
fi

# Runs one job and checks its output, its report and /dev/shm. `expr` is a Python expression
# over `r` (one rank's record), `n` and `tcp` (the rank's tcp counters, or None).
run() { # name transports np mode expression [ulimit -n]
    local name=$1 transports=$2 np=$3 mode=$4 expr=$5 nofile=${6:-}
    local json=$tmp/$name.json log=$tmp/$name.log pidfile=$tmp/$name.pid
    local env=()
    if [ "$transports" != default ]; then env=(FERRITE_TRANSPORTS="$transports"); fi
    # mpirun's pid names the job's /dev/shm files (ferrite-kvs_<pid>_...).
    if ! env "${env[@]}" timeout -k 5 "$TEST_TIMEOUT" bash -c \
            '[ -z "$1" ] || ulimit -Sn "$1" || exit 1; echo $$ >"$2"; shift 2; exec "$@"' _ \
            "$nofile" "$pidfile" "$MPIRUN" -n "$np" --report="$json" "$bin" "$mode" >"$log" 2>&1; then
        ko "$name" "job failed" "$log"; return
    fi
    local pid; pid=$(cat "$pidfile")
    if ls /dev/shm 2>/dev/null | grep -q "^ferrite-kvs_${pid}_"; then
        ko "$name" "files left in /dev/shm: $(ls /dev/shm | grep -c "^ferrite-kvs_${pid}_")"
        rm -f /dev/shm/ferrite-kvs_"${pid}"_*; return
    fi
    if ! grep -q "^done: $mode $np\$" "$log"; then ko "$name" "rank 0 did not finish" "$log"; return; fi
    if [ "$mode" = hello ] && ! grep -q "^hello from $np ranks\$" "$log"; then
        ko "$name" "no hello from every rank" "$log"; return
    fi
    local why
    why=$(python3 - "$json" "$np" <<PY 2>&1
import json, sys
doc = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
assert doc["policy"] == "ondemand", doc["policy"]
ranks = doc["ranks"]
assert sorted(x["rank"] for x in ranks) == list(range(n)), "not one record per rank"
for r in ranks:
    assert r["failed"] == 0, "rank %d: failed connections" % r["rank"]
    assert r["peak_rss_kb"] > 0, "rank %d: no peak RSS" % r["rank"]
    tcp = r["transports"].get("tcp")
    ok = $expr
    assert ok, "rank %d: %s" % (r["rank"], json.dumps(r))
assert doc["summary"]["ranks"] == n
PY
)
    if [ $? -ne 0 ]; then ko "$name" "report: $(echo "$why" | tail -n 1)"; return; fi
    ok "$name ($(grep '^init max' "$log"))"
}

opened='sum(r["opened"].values())'
# Over shm nothing is connected: the ring's 3 packets each way and every hello but rank 0's
# (a reduce to rank 0, plus the MPI_Init-time reduce) go through shm.
noconn="$opened == 0 and tcp is None"
shm_sent="r['transports']['shm']['msgs_sent']"
ring_tcp="r['connections']['peak'] == 2 and $opened == 2 and r['used'] == 2 and r['opened']['init'] == 0"
# hello reduces to rank 0 on a binomial tree: at most log2(n) + 1 peers, all of them used.
hello_tcp="1 <= $opened <= n.bit_length() and r['used'] == $opened"
N=$SCALE_NP
run "hello-shm-$N" default "$N" hello "$noconn and ($shm_sent >= 2 or r['rank'] == 0)"
run "ring-shm-$N" default "$N" ring "$noconn and $shm_sent >= 3"
run "hello-tcp-64" tcp,self 64 hello "$hello_tcp"
run "ring-tcp-64" tcp,self 64 ring "$ring_tcp"
run "hello-tcp-$N" tcp,self "$N" hello "$hello_tcp"
run "ring-tcp-$N" tcp,self "$N" ring "$ring_tcp"
# Under the usual soft open-file limit of 1024: mpirun holds 3 descriptors per rank (it
# raises its own soft limit; the ranks keep 1024 and hold only what they connect).
run "ring-tcp-384-nofile-1024" tcp,self 384 ring "$ring_tcp" 1024

echo "scale: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
