#!/usr/bin/env bash
# Connection-management suite over tcp (FERRITE_TRANSPORTS=tcp,self): the connection counts
# each policy opens, read from FERRITE_REPORT's JSON, for known patterns (tests/conn/pattern.c),
# the budget FERRITE_CONN_MAX (eviction, peak), a dead peer (MPI_ERR_PROC_ABORTED), adaptive
# (datagrams below the threshold, connections above, idle closing), FERRITE_CONN_SETUP=ud,
# the text report, and a few C conformance programs under static,
# partial and adaptive. Ends with `conn: N passed, N failed`.
# Knobs: PREFIX (default ./build), TEST_TIMEOUT (seconds per job, default 60), CONN_TRANSPORT
# (tcp, default; ofi: the same counts over libfabric's tcp provider, FERRITE_TRANSPORTS=ofi,self,
# with adaptive traffic and the ud set-up over its FI_EP_DGRAM channel, udp provider).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
MPICC=$PREFIX/bin/mpicc
MPIRUN=$PREFIX/bin/mpirun
TEST_TIMEOUT=${TEST_TIMEOUT:-60}
CONN_TRANSPORT=${CONN_TRANSPORT:-tcp}
export FERRITE_TRANSPORTS=$CONN_TRANSPORT,self
if [ "$CONN_TRANSPORT" = ofi ]; then export FERRITE_OFI_PROVIDER=tcp; fi
pass=0; fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$here/bin"
bin=$here/bin/pattern

ok() { echo "PASS $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1 ($2)"; if [ -n "${3:-}" ] && [ -s "$3" ]; then tail -n 8 "$3" | sed 's/^/    | /'; fi; fail=$((fail + 1)); }

if ! $MPICC -O2 -Wall -o "$bin" "$here/pattern.c" >"$tmp/build.log" 2>&1; then
    ko "build pattern.c" "compile error" "$tmp/build.log"
    echo "conn: $pass passed, $fail failed"; exit 1
fi

# Runs the pattern under a policy and checks every rank's counts with a Python expression
# over `r` (one rank's record) and `n`, e.g. "r['connections']['peak'] == 2", and the
# summary with an optional expression over `s`.
# Over ofi (slower to set up, and every C suite run adds to CI's time) a representative
# subset: these repeat what the others show over tcp.
ofi_skip=" pingpong-ondemand-16 none-ondemand-16 static-ring-16 partial-12 partial-ring-16
           budget1-ring-8 budget2-alltoall_coll-8 ud-static-16 ud-budget4-alltoall-16 "
check() { # name policy np pattern expression [summary-expression]
    local name=$1 policy=$2 np=$3 pattern=$4 expr=$5 sexpr=${6:-True}
    if [ "$CONN_TRANSPORT" = ofi ] && [[ "${ofi_skip//$'\n'/ }" == *" $name "* ]]; then return; fi
    local json=$tmp/$name.json log=$tmp/$name.log
    if ! FERRITE_CONN=$policy timeout -k 5 "$TEST_TIMEOUT" $MPIRUN -n "$np" --report="$json" \
            "$bin" "$pattern" >"$log" 2>&1; then
        ko "$name" "job failed" "$log"; return
    fi
    if ! grep -q "done: $pattern" "$log"; then ko "$name" "rank 0 did not finish" "$log"; return; fi
    local why
    why=$(python3 - "$json" "$np" "$policy" <<PY 2>&1
import json, sys
doc = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
assert doc["policy"] == sys.argv[3], doc["policy"]
ranks = doc["ranks"]
assert sorted(x["rank"] for x in ranks) == list(range(n)), "not one record per rank"
def partial(rank):
    return len({(rank + s * d) % n for d in [1 << k for k in range(n.bit_length()) if (1 << k) < n]
                for s in (1, -1)} - {rank})
for r in ranks:
    assert r["failed"] == 0, "rank %d: failed connections" % r["rank"]
    ok = $expr
    assert ok, "rank %d: %s" % (r["rank"], json.dumps(r))
s = doc["summary"]
assert s["ranks"] == n
assert abs(s["opened_per_rank"] - sum(sum(r["opened"].values()) for r in ranks) / n) < 1e-3
assert $sexpr, "summary: %s" % json.dumps(s)
PY
)
    if [ $? -ne 0 ]; then ko "$name" "counts: $(echo "$why" | tail -n 1)"; return; fi
    ok "$name"
}

opened='sum(r["opened"].values())'
check ring-ondemand-16 ondemand 16 ring \
    "r['connections']['peak'] == 2 and $opened == 2 and r['used'] == 2 and r['opened']['init'] == 0"
check pingpong-ondemand-16 ondemand 16 pingpong \
    "r['connections']['peak'] == 1 and $opened == 1 and r['used'] == 1"
check alltoall-ondemand-16 ondemand 16 alltoall \
    "r['connections']['peak'] == n - 1 and $opened == n - 1 and r['used'] == n - 1"
check none-ondemand-16 ondemand 16 none "$opened == 0 and r['connections']['open'] == 0"
check static-16 static 16 none \
    "r['opened']['init'] == n - 1 and $opened == n - 1 and r['connections']['open'] == n - 1"
check static-ring-16 static 16 ring \
    "r['opened']['init'] == n - 1 and $opened == n - 1 and r['used'] == 2"
check partial-16 partial 16 none \
    "r['opened']['init'] == partial(r['rank']) == 7 and $opened == 7"
check partial-12 partial 12 none "r['opened']['init'] == partial(r['rank']) and $opened == 6"
# ±1 is among the initial peers: a ring needs nothing more.
check partial-ring-16 partial 16 ring "$opened == 7 and r['opened']['first_message'] == 0"
# Peers beyond ±2^k are connected on demand.
check partial-alltoall-16 partial 16 alltoall \
    "r['opened']['init'] == 7 and $opened == n - 1 and r['used'] == n - 1"

# A budget: FERRITE_CONN_MAX with every pair talking (data checked by pattern.c). Peers'
# hellos wait while no slot is free and least recently used connections are evicted (closed
# without losing anything) and reopened, so a rank holds at most FERRITE_CONN_MAX, plus the
# connections taken over budget (counted): a request held back 1 s, one taken to break a cycle
# of ranks waiting for each other, or ours after waiting 1 s for a close (a peer busy outside
# MPI does not answer one; a peer in MPI_Finalize does, as its barrier makes progress).
budget() { # name np pattern max
    FERRITE_CONN_MAX=$4 check "$1" ondemand "$2" "$3" \
        "r['connections']['peak'] <= $4 + r['over_budget'] and r['connections']['max'] == $4 \
         and r['closed']['eviction'] + r['closed']['peer'] > 0" "s['closed']['eviction'] > 0"
}
budget budget4-alltoall-16 16 alltoall 4
budget budget1-ring-8 8 ring 1
budget budget2-alltoall_coll-8 8 alltoall_coll 2
# Rank 1 must close its connection to rank 2, already in MPI_Finalize, to reach rank 0: rank 2
# answers the close from Finalize's barrier, so nothing is opened over budget.
FERRITE_CONN_MAX=1 check budget1-late_close-3 ondemand 3 late_close \
    "r['over_budget'] == 0 and r['connections']['peak'] <= 1" "s['closed']['eviction'] == 1"

# A peer that dies (its sockets close without the clean close of MPI_Finalize): pending and
# later communication with it fails with MPI_ERR_PROC_ABORTED naming it (tests/conn/dead_peer.c).
log=$tmp/dead_peer.log
if ! $MPICC -O2 -Wall -o "$here/bin/dead_peer" "$here/dead_peer.c" >"$log" 2>&1; then
    ko dead-peer "compile error" "$log"
else
    timeout -k 5 "$TEST_TIMEOUT" $MPIRUN -n 2 "$here/bin/dead_peer" >"$log" 2>&1
    if grep -q '^dead_peer: ok' "$log" \
            && [ "$(grep -c '^dead_peer: .*: Communication with an aborted or failed process.*rank 1' "$log")" -eq 3 ]; then
        ok dead-peer
    else
        ko dead-peer "no MPI_ERR_PROC_ABORTED naming rank 1 for each operation" "$log"
    fi
fi

# adaptive: datagrams first (tcp: a udp channel; ofi: an FI_EP_DGRAM endpoint's), a
# connection once a peer got
# FERRITE_CONN_THRESHOLD (16) messages. 10 messages each way per pair open none; 40 open one
# per pair (the race rule keeps one when both ends reach the threshold together).
check adaptive-alltoall10-16 adaptive 16 alltoall10 \
    "$opened == 0 and r['connections']['peak'] == 0 and r['used'] == 0" \
    "s['transports']['$CONN_TRANSPORT']['msgs_sent'] >= n * (n - 1) * 10"
check adaptive-alltoall40-16 adaptive 16 alltoall40 \
    "$opened == n - 1 and r['connections']['peak'] == n - 1 and r['used'] == n - 1 \
     and r['opened']['threshold'] + r['opened']['accepted'] == n - 1"
# A short idle limit: connections close between the bursts of a long exchange and reopen.
FERRITE_CONN_THRESHOLD=4 FERRITE_CONN_IDLE_MS=1 check adaptive-idle-8 adaptive 8 alltoall40 \
    "r['failed'] == 0" "s['closed']['idle'] > 0"
# A budget under adaptive: every pair crosses the threshold, but a rank holds at most 2
# connections; a busy one is not evicted for another peer (FERRITE_CONN_RESIDENCY_MS), whose
# traffic stays on datagrams instead (evictions still happen: connections unused that long).
# pattern.c checks the data.
FERRITE_CONN_MAX=2 check adaptive-budget2-alltoall40-16 adaptive 16 alltoall40 \
    "r['connections']['peak'] <= 2 + r['over_budget'] and $opened >= 1" \
    "s['transports']['$CONN_TRANSPORT']['msgs_sent'] >= n * (n - 1) * 40"
# FERRITE_CONN_SETUP=ud: the attempt is settled over datagrams (request/reply/confirm carry
# the listen address), then its initiator dials: the same counts as cm.
setup_ud() { FERRITE_CONN_SETUP=ud check "$@"; }
setup_ud ud-ring-16 ondemand 16 ring \
    "r['connections']['peak'] == 2 and $opened == 2 and r['used'] == 2"
setup_ud ud-alltoall-16 ondemand 16 alltoall \
    "r['connections']['peak'] == n - 1 and $opened == n - 1 and r['used'] == n - 1"
setup_ud ud-static-16 static 16 none "r['opened']['init'] == n - 1 and $opened == n - 1"
FERRITE_CONN_MAX=4 setup_ud ud-budget4-alltoall-16 ondemand 16 alltoall \
    "r['connections']['peak'] <= 4 + r['over_budget']" "s['closed']['eviction'] > 0"
setup_ud ud-adaptive-alltoall40-16 adaptive 16 alltoall40 "$opened == n - 1"

# The text report: one line per rank and the summary, from rank 0.
log=$tmp/text.log
if timeout -k 5 "$TEST_TIMEOUT" $MPIRUN -n 4 --report "$bin" ring >"$log" 2>&1 \
        && [ "$(grep -c '^ferrite report: rank [0-3]: connections open 2 (peak 2' "$log")" -eq 4 ] \
        && grep -q '^ferrite report: 4 ranks, FERRITE_CONN=ondemand: connections per rank 2.00' "$log" \
        && grep -q 'peak RSS max [1-9][0-9]* kB' "$log"; then
    ok text-report
else
    ko text-report "missing or wrong report lines" "$log"
fi

# A few C conformance programs under the policies that connect at init, adaptive, and ud set-up
# (CONN_C_POLICIES: which; empty when the whole C suite runs under each elsewhere).
policies=${CONN_C_POLICIES-static partial adaptive ud}
for policy in $policies; do
    log=$tmp/c-$policy.log
    # "ud": ondemand connections set up with FERRITE_CONN_SETUP=ud.
    setup=cm; conn=$policy
    if [ "$policy" = ud ]; then setup=ud; conn=ondemand; fi
    FERRITE_CONN=$conn FERRITE_CONN_SETUP=$setup TEST_NP="4 16" "$root/tests/c/run.sh" ring \
        anysource sendrecv coll_basic probe comms >"$log" 2>&1
    line=$(grep -E '^c: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
    f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
    if [ -n "$line" ] && [ "${f:-1}" -eq 0 ] && [ "${p:-0}" -gt 0 ]; then
        ok "c-$policy ($line)"
    else
        ko "c-$policy" "${line:-no summary}" "$log"
        grep '^FAIL' "$log" | sed 's/^/    /'
    fi
done

# ofi's shared receive pool and its credits (tests/conn/srq.sh).
if [ "$CONN_TRANSPORT" = ofi ]; then . "$here/srq.sh"; fi

# ofi start-up: libfabric's verbs init reads all of /proc/kallsyms twice (0.2-0.5 s a rank)
# unless transport/ofi/ffi/kallsyms.rs hides it; a rank's bytes read in MPI_Init stay below
# one copy of it (about 20 KB when hidden, twice the file's size when not).
if [ "$CONN_TRANSPORT" = ofi ]; then
    log=$tmp/startio.log
    ksize=$(wc -c </proc/kallsyms 2>/dev/null || echo 0)
    if ! $MPICC -O2 -Wall -o "$here/bin/startio" "$here/startio.c" >"$log" 2>&1; then
        ko ofi-start-no-kallsyms "compile error" "$log"
    elif ! timeout -k 5 "$TEST_TIMEOUT" $MPIRUN -n 2 "$here/bin/startio" >"$log" 2>&1 \
            || ! grep -qx "done: startio" "$log"; then
        ko ofi-start-no-kallsyms "job failed" "$log"
    else
        got=$(sed -n 's/^rchar: //p' "$log")
        if [ "$got" = unknown ] || [ "$ksize" -lt 100000 ]; then
            echo "SKIP ofi-start-no-kallsyms (not checkable here: rchar $got, kallsyms $ksize bytes)"
        elif [ "$got" -lt "$ksize" ]; then
            ok "ofi-start-no-kallsyms ($got bytes read in MPI_Init; kallsyms is $ksize)"
        else
            ko ofi-start-no-kallsyms "a rank read $got bytes in MPI_Init, kallsyms is $ksize" "$log"
        fi
    fi
fi

echo "conn: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
