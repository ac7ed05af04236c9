#!/usr/bin/env bash
# Connection set-up when file descriptors run out, over tcp, under every policy and both
# set-up mechanisms: never a hang; every exchange either delivers the right data or fails
# with MPI_ERR_PROC_ABORTED and a message naming the cause (tests/conn/fdlimit.c):
# - 0, 1 and 3 descriptors left after MPI_Init, at 2 and 4 ranks, each policy with each
#   set-up (FERRITE_TCP_CONNECT_RETRIES lowered to 4 to keep the failing cases short); with
#   3 left at 2 ranks all data arrives;
# - MPI_Init itself under a soft `ulimit -n` too small: a clear error (or a working job with
#   the right data), no hang;
# - a rank out of descriptors that only receives: the senders it had to refuse give up, and
#   it fails them too (it is told by the hellos it refused), no hang;
# - every descriptor used up while MPI_Finalize runs: the report is written, the job ends well;
# - a stranger holding hundreds of connections to every rank's listener (more than
#   `ulimit -n 256` lets a rank accept; some silent, some sending junk) while the job
#   connects, then going away, under each policy and set-up: the job completes with the
#   right data, and FERRITE_REPORT counts the junk as strangers dropped, per rank and summed;
#   meanwhile each rank's own open() calls keep succeeding (MPI holds no more unidentified
#   connections than its budget).
# Ends with `conn-fdlimit: N passed, N failed`.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
export FERRITE_TRANSPORTS=tcp,self
pass=0; fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "PASS $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1 ($2)"; [ -s "${3:-}" ] && tail -n 6 "$3" | cut -c1-200 | sed 's/^/    | /'; fail=$((fail + 1)); }
bin=$tmp/fdlimit
if ! "$PREFIX/bin/mpicc" -O1 -o "$bin" "$here/fdlimit.c" >"$tmp/build.log" 2>&1; then
    ko "build fdlimit.c" "compile error" "$tmp/build.log"; echo "conn-fdlimit: $pass passed, $fail failed"; exit 1
fi

# Checks a finished job's log: a summary line per rank, no bad data, every failure clear.
judge() { # name np log rc all_ok
    local name=$1 np=$2 log=$3 rc=$4 all_ok=$5
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then ko "$name" "hung" "$log"; return; fi
    if [ "$rc" -ne 0 ]; then ko "$name" "exit $rc" "$log"; return; fi
    [ "$(grep -cE '^rank [0-9]+: [0-9]+ fails 0 errs' "$log")" -eq "$np" ] || { ko "$name" "bad data or missing ranks" "$log"; return; }
    local unclear
    unclear=$(grep -E '^rank [0-9]+: peer' "$log" | grep -vE 'class 76: .*(Too many open files|cannot connect|closed|gone|lost)' | head -n 1)
    [ -z "$unclear" ] || { ko "$name" "unclear failure: $unclear" "$log"; return; }
    if [ "$all_ok" = 1 ] && grep -qE '^rank [0-9]+: peer' "$log"; then ko "$name" "an exchange failed" "$log"; return; fi
    ok "$name ($(grep -cE '^rank [0-9]+: peer' "$log") failed exchanges)"
}

for setup in cm ud; do
    for conn in ondemand static partial adaptive; do
        for np in 2 4; do
            for k in 0 1 3; do
                name="$conn/$setup np=$np left=$k"
                log=$tmp/run.log
                FERRITE_CONN=$conn FERRITE_CONN_SETUP=$setup FERRITE_TCP_CONNECT_RETRIES=4 \
                    timeout -k 5 90 "$PREFIX/bin/mpirun" -n $np "$bin" $k >"$log" 2>&1
                rc=$?
                all_ok=0
                if [ $np = 2 ] && [ $k = 3 ]; then all_ok=1; fi
                judge "$name" $np "$log" $rc $all_ok
            done
        done
    done
done

# MPI_Init with almost no descriptors: it fails with a message, or works; it never hangs.
# Under 13 (a connection budget of 1) static and partial connect at init at -n 4: that
# waited forever for connections the budget had closed again.
init_case() { # conn setup limit
    local name="MPI_Init under ulimit -n $3 ($1/$2)" log=$tmp/init.log rc
    (ulimit -S -n $3; FERRITE_CONN=$1 FERRITE_CONN_SETUP=$2 FERRITE_TCP_CONNECT_RETRIES=4 \
        timeout -k 5 60 "$PREFIX/bin/mpirun" -n 4 "$bin" 3) >"$log" 2>&1
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then ko "$name" "hung" "$log"
    elif [ $rc -ne 0 ] && ! grep -qiE 'open files|descriptor|cannot' "$log"; then ko "$name" "exit $rc without a clear message" "$log"
    elif [ $rc -eq 0 ]; then judge "$name" 4 "$log" $rc 0
    else ok "$name (exit $rc)"; fi
}
for lim in 5 7 9; do init_case ondemand cm $lim; done
for setup in cm ud; do
    for conn in static partial; do init_case $conn $setup 13; done
done

# A rank out of descriptors that only receives: every dial of its senders is refused (after
# its hello is read on the listener's spare descriptor) and they give up; it never had a
# connection to lose, so nothing told it: it waited in MPI_Recv forever (static set-up at
# `ulimit -n 12` hung this way 1 run in 4). It must fail them too, naming the cause.
for setup in cm ud; do
    name="receiver out of descriptors (ondemand/$setup)"
    log=$tmp/recv.log
    FERRITE_CONN=ondemand FERRITE_CONN_SETUP=$setup FERRITE_TCP_CONNECT_RETRIES=2 \
        timeout -k 5 90 "$PREFIX/bin/mpirun" -n 3 "$bin" 0 recv >"$log" 2>&1
    rc=$?
    # (Under ud, rank 0's own handshake may give up first: "no answer" to its replies.)
    cause='could not accept its connections.*Too many open files'
    [ $setup = ud ] && cause="$cause|cannot connect to rank"
    if [ $rc -ne 124 ] && [ $rc -ne 137 ] &&
        [ "$(grep -cE "^rank 0: peer [12]: class 76: .*($cause)" "$log")" -ne 2 ]; then
        ko "$name" "rank 0 did not fail both senders with the cause" "$log"
    else
        judge "$name" 3 "$log" $rc 0
    fi
done

# Out of descriptors during MPI_Finalize (a stranger's flood of silent connections can hold
# them all, as the next cases do): FERRITE_REPORT's file is still written (the sockets are
# closed first) and every rank finalizes (a rank leaving without PMI's finalize makes the
# launcher end the job).
for conn in ondemand adaptive; do
    name="out of descriptors in MPI_Finalize ($conn/cm)"
    log=$tmp/run.log
    json=$tmp/full.json
    rm -f "$json"
    FERRITE_CONN=$conn timeout -k 5 90 "$PREFIX/bin/mpirun" -n 4 --report="$json" "$bin" 64 full >"$log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && [ ! -s "$json" ]; then
        ko "$name" "no report written" "$log"
    else
        judge "$name" 4 "$log" $rc 1
    fi
done

# A stranger floods every rank's listener with silent connections, then goes away.
for setup_conn in cm/ondemand cm/static cm/partial cm/adaptive ud/ondemand ud/static ud/partial ud/adaptive; do
    setup=${setup_conn%/*}; conn=${setup_conn#*/}
    log=$tmp/stranger.log
    json=$tmp/stranger.json
    rm -f "$json"
    (ulimit -S -n 256; FERRITE_CONN=$conn FERRITE_CONN_SETUP=$setup timeout -k 5 120 "$PREFIX/bin/mpirun" -n 4 --report="$json" "$bin" -3) >"$log" 2>&1 &
    job=$!
    # (MPI_Init may take seconds on a loaded machine.)
    for i in $(seq 1 300); do [ "$(grep -c '^listening' "$log")" -ge 4 ] && break; sleep 0.1; done
    pids=$(awk '/^listening/ { print $3 }' "$log" | tr '\n' ' ')
    python3 - $pids <<'PY' >"$tmp/stranger.out" 2>&1
import re, socket, subprocess, sys, time
pids = set(sys.argv[1:])
# (ss -p reads every process's descriptors; on a busy machine a pass can miss some: retry.)
for attempt in range(30):
    ports = set()
    for line in subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines():
        m = re.search(r":(\d+)\s.*pid=(\d+),", line)
        if m and m.group(2) in pids:
            ports.add(int(m.group(1)))
    if pids and len(ports) >= len(pids):
        break
    time.sleep(0.1)
if len(ports) < len(pids) or not pids:
    print("stranger: listeners of pids %s: ports %s" % (sorted(pids), sorted(ports)))
held = []
for port in ports:
    for _ in range(400):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        except OSError:
            s.close(); continue
        held.append(s)
print("stranger: %d connections to %d listeners" % (len(held), len(ports)))
time.sleep(0.5)
junk = 0
for i, s in enumerate(held):
    if i % 4 == 0:
        try:
            s.send(b"GET / HTTP/1.0\r\n\r\n" * 4)
            junk += 1
        except OSError:
            pass
print("stranger: junk on %d" % junk)
time.sleep(3.5)
for s in held:
    s.close()
PY
    wait $job
    rc=$?
    cat "$tmp/stranger.out" >>"$log"
    if ! grep -q 'stranger: [1-9][0-9]* connections to 4 listeners' "$tmp/stranger.out"; then
        ko "stranger ($conn/$setup)" "the stranger found no listeners" "$log"
    elif ! python3 - "$json" <<'PY' >>"$log" 2>&1
import json, sys
doc = json.load(open(sys.argv[1]))
per_rank = [r["dropped"]["strangers"] for r in doc["ranks"]]
total = doc["summary"]["dropped"]["strangers"]
assert total == sum(per_rank) and total > 0, (per_rank, total)
print("report: strangers dropped per rank %s, summed %d" % (per_rank, total))
PY
    then
        ko "stranger ($conn/$setup)" "the report does not show the strangers" "$log"
    else
        judge "stranger ($conn/$setup)" 4 "$log" $rc 1
    fi
done
echo "conn-fdlimit: $pass passed, $fail failed"
[ $fail -eq 0 ]
