#!/usr/bin/env bash
# Jobs across hosts, on one machine: three network namespaces stand for three hosts.
#
#   ns A: bridge fh0 10.231.7.1/24 (mpirun runs here; "localhost" in --host means A)
#   ns B: veth fh0 10.231.7.2/24 --- enslaved to A's bridge
#   ns C: veth fh0 10.231.7.3/24 --- enslaved to A's bridge
#
# Every interface lives inside a namespace this script created (nothing in the root
# namespace, no route out); the trap deletes them. Ranks on B and C start through an agent
# script that runs `ip netns exec <ns> <command...>`, so mpirun serves them PMI over TCP
# (PMI_PORT) on A's address, and `--iface fh0` makes every rank's tcp transport use fh0.
# Then the C programs ring, anysource and sizes run (through tests/c/run.sh) with ranks
# spread over the hosts: ranks on one host talk through shm, across hosts through tcp (or
# udp: a pass with FERRITE_TRANSPORTS=udp,self and one with self,shm,udp), and so does the
# whole C suite; then, when libfabric is installed, the whole C suite over ofi (libfabric's
# tcp provider on fh0) under every connection policy and a budget (see below). A program
# that times out prints every rank's stack (tests/c/run.sh), remote ranks' too.
#
# Needs root, `ip` and network namespaces; otherwise it prints SKIP lines and ends with
# `hosts: 0 passed, 0 failed, N skipped`. Knobs: PREFIX (default ./build), HOSTS_NET
# (the /24 prefix, default 10.231.7), TEST_TIMEOUT (per run, default 120: every rank pair
# goes through the network stack; at load 30-40, with every rank working (their stacks
# showed it), threads_stress -n 2 over ofi took 11-93 s, comm_loop -n 4 under the budget
# and threads -n 4 under ud over 60 s).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
MPIRUN_BIN=$PREFIX/bin/mpirun
net=${HOSTS_NET:-10.231.7}
pass=0; fail=0; skip=0
# How many results a skipped run stands for, as a full run counts them: the C runs the whole
# suite makes at its programs' declared counts (tests/c/run.sh's rule) and its programs (one
# run each under TEST_NP_UPTO); the runs below with libfabric (ofi_checks) and without
# (36 C runs of ring/anysource/sizes, 14 checks of this script, one whole suite).
c_runs=0; c_progs=0
for f in "$root"/tests/c/*.c; do
    nps=$(sed -n '1s|.*/\* *np: *\([0-9 ]*\)\*/.*|\1|p' "$f")
    c_runs=$((c_runs + $(echo ${nps:-1 2 4 16} | wc -w))); c_progs=$((c_progs + 1))
done
ofi_checks=$((6 + c_runs + 5 * c_progs))
checks=$((50 + c_runs + ofi_checks))

skip_all() {
    echo "SKIP hosts: $1"
    echo "hosts: 0 passed, 0 failed, $checks skipped"
    exit 0
}

[ "$(id -u)" -eq 0 ] || skip_all "network namespaces need root (running as uid $(id -u))"
command -v ip >/dev/null || skip_all "no 'ip' command (install iproute2)"
[ -x "$MPIRUN_BIN" ] || { echo "FAIL hosts: $MPIRUN_BIN missing (make install)"; echo "hosts: 0 passed, 1 failed"; exit 1; }

tag=fh$$
A=${tag}a; B=${tag}b; C=${tag}c
work=$(mktemp -d)
cleanup() {
    for ns in "$A" "$B" "$C"; do
        if ip netns list 2>/dev/null | grep -qw "$ns"; then
            # Only processes inside our own namespaces: the job's, if any survived.
            pids=$(ip netns pids "$ns" 2>/dev/null)
            [ -n "$pids" ] && kill -9 $pids 2>/dev/null
            ip netns del "$ns" 2>/dev/null
        fi
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$A" 2>"$work/err" || skip_all "cannot create a network namespace: $(cat "$work/err")"
setup() {
    ip netns add "$B" && ip netns add "$C" &&
    ip -n "$A" link add fh0 type bridge &&
    for ns in "$A" "$B" "$C"; do ip -n "$ns" link set lo up || return 1; done &&
    ip -n "$A" link add vb type veth peer name fh0 netns "$B" &&
    ip -n "$A" link add vc type veth peer name fh0 netns "$C" &&
    ip -n "$A" link set vb master fh0 && ip -n "$A" link set vc master fh0 &&
    ip -n "$A" addr add "$net.1/24" dev fh0 &&
    ip -n "$B" addr add "$net.2/24" dev fh0 &&
    ip -n "$C" addr add "$net.3/24" dev fh0 &&
    for l in fh0 vb vc; do ip -n "$A" link set "$l" up || return 1; done &&
    ip -n "$B" link set fh0 up && ip -n "$C" link set fh0 up
}
setup 2>"$work/err" || skip_all "cannot build the veth/bridge network: $(tail -n 1 "$work/err")"
echo "hosts: namespaces $A (mpirun, $net.1), $B ($net.2), $C ($net.3) on bridge fh0"

# The launcher agent: `agent <host> <command...>` runs the command in that namespace.
cat >"$work/agent" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in
$A|$B|$C) exec ip netns exec "\$host" "\$@" ;;
*) echo "agent: unknown host \$host" >&2; exit 255 ;;
esac
EOF
chmod +x "$work/agent"

# mpirun inside A with a host list; tests/c/run.sh calls it as `$MPIRUN -n N prog`.
wrapper() { # file hosts...
    local f=$1; shift
    cat >"$f" <<EOF
#!/bin/sh
exec ip netns exec $A $MPIRUN_BIN $* --launcher $work/agent --iface fh0 "\$@"
EOF
    chmod +x "$f"
}
wrapper "$work/mpirun-2" --host "localhost,$B"
wrapper "$work/mpirun-3" --host "$A,$B,$C"
cat >"$work/mpirun-noif" <<EOF
#!/bin/sh
exec ip netns exec $A $MPIRUN_BIN --host $A,$B,$C --launcher $work/agent "\$@"
EOF
chmod +x "$work/mpirun-noif"

# Wait until A reaches B and C over the bridge (addresses become usable after DAD etc.).
for _ in $(seq 50); do
    if ip netns exec "$A" bash -c "exec 3<>/dev/tcp/$net.2/1" 2>&1 | grep -q refused &&
       ip netns exec "$A" bash -c "exec 3<>/dev/tcp/$net.3/1" 2>&1 | grep -q refused; then
        break
    fi
    sleep 0.1
done

c_suite() { # label mpirun-wrapper nps [programs...]  (nps "": each program's declared counts)
    local label=$1 mpirun=$2 nps=$3
    shift 3
    local progs=("$@")
    [ ${#progs[@]} -eq 0 ] && progs=(ring anysource sizes)
    [ "${progs[0]}" = all ] && progs=()
    echo "=== hosts: $label"
    env MPIRUN="$mpirun" FERRITE_TESTS_EXPECT=ferrite ${nps:+TEST_NP="$nps"} \
        TEST_TIMEOUT="${TEST_TIMEOUT:-120}" "$root/tests/c/run.sh" "${progs[@]}" \
        2>&1 | tee "$work/c.log"
    local line p f
    line=$(grep -E '^c: [0-9]+ passed' "$work/c.log" | tail -n 1)
    p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
    f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
    if [ -z "$line" ]; then echo "FAIL hosts: $label printed no summary"; f=1; p=0; fi
    pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
}

ok() { echo "PASS $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1"; [ -s "${2:-}" ] && tail -n 8 "$2" | sed 's/^/    | /'; fail=$((fail + 1)); }

# Local rank plus a remote host: -n 2 puts one rank on each, -n 4 alternates.
c_suite "localhost + $B (local ranks direct, $B through the agent)" "$work/mpirun-2" "2 4"
# Every rank through the agent, three hosts: -n 3 one each, -n 6 two each (alternating).
c_suite "$A + $B + $C (all through the agent)" "$work/mpirun-3" "3 6"
# The same over tcp only: ranks on one host talk through tcp too (mpirun forwards FERRITE_*).
FERRITE_TRANSPORTS=tcp,self c_suite "$A + $B + $C, FERRITE_TRANSPORTS=tcp,self" "$work/mpirun-3" "3"
# And over udp: every rank's one datagram socket on fh0, 1472-byte datagrams across hosts;
# then shm within a host and udp across (udp listed instead of tcp).
FERRITE_TRANSPORTS=udp,self c_suite "$A + $B + $C, FERRITE_TRANSPORTS=udp,self" "$work/mpirun-3" "3 6"
FERRITE_TRANSPORTS=self,shm,udp c_suite "$A + $B + $C, FERRITE_TRANSPORTS=self,shm,udp" "$work/mpirun-3" "6"
# The whole C suite at each program's declared counts, ranks dealt round-robin over the
# three hosts (shm within a host, tcp across).
c_suite "$A + $B + $C, every C program" "$work/mpirun-3" "" all
# Each connection policy and the ud set-up across hosts, over tcp only (two ranks per host).
for conn in static partial adaptive; do
    FERRITE_TRANSPORTS=tcp,self FERRITE_CONN=$conn \
        c_suite "$A + $B + $C, tcp, FERRITE_CONN=$conn" "$work/mpirun-3" "6"
done
FERRITE_TRANSPORTS=tcp,self FERRITE_CONN_SETUP=ud \
    c_suite "$A + $B + $C, tcp, FERRITE_CONN_SETUP=ud" "$work/mpirun-3" "6"
# ofi across hosts (libfabric's tcp provider on fh0), when libfabric is installed: the whole
# C suite under every connection policy, every pair of ranks over libfabric (ranks dealt
# round-robin over the three hosts): the connection manager's ondemand connections at each
# program's declared counts (up to -n 16); then each program once, at its largest declared
# count up to 6 (TEST_NP_UPTO: -n 4 for most, two ranks on one host), with connections all
# at init (static), some at init (partial), datagrams first then connections (adaptive, over
# the udp provider's FI_EP_DGRAM on fh0), the ud set-up over that channel, and a budget of
# two connections per rank under adaptive (threshold 4, as c-ofi-budget in tests/run.sh:
# peers past the budget stay on datagrams, unused connections are evicted). Why once: a run
# at the declared counts costs CI about 2 minutes, each of these about a third of that; and
# at -n 16 under adaptive, across the namespaces and at load 45, coll_shm took over 30 s
# (tests/run.sh's c-ofi-adaptive and c-ofi-budget run every count on one host). First ring,
# anysource and sizes at -n 3 (one rank per host) and 6.
# rma_passive is latency-bound: 50 lock rounds per target, each round trip waking a target
# that waits in MPI_Barrier; about 10 s at -n 6 over ofi across the namespaces at load 22
# (tcp: 5 s), no stall found.
if ls /usr/lib/*/libfabric.so.1 /usr/lib64/libfabric.so.1 /usr/local/lib/libfabric.so.1 \
        2>/dev/null | grep -q .; then
    ofi="$A + $B + $C, ofi" once="every C program once (counts up to 6)"
    FERRITE_TRANSPORTS=ofi,self FERRITE_OFI_PROVIDER=tcp FERRITE_OFI_IFACE=fh0 \
        c_suite "$ofi, FERRITE_CONN=ondemand" "$work/mpirun-3" "3 6"
    FERRITE_TRANSPORTS=ofi,self FERRITE_OFI_PROVIDER=tcp FERRITE_OFI_IFACE=fh0 \
        c_suite "$ofi, every C program" "$work/mpirun-3" "" all
    # Then each program once, at its largest declared count up to 6, under the others.
    FERRITE_TRANSPORTS=ofi,self FERRITE_OFI_PROVIDER=tcp FERRITE_OFI_IFACE=fh0 FERRITE_CONN=static \
        TEST_NP_UPTO=6 c_suite "$ofi, FERRITE_CONN=static, $once" "$work/mpirun-3" "" all
    FERRITE_TRANSPORTS=ofi,self FERRITE_OFI_PROVIDER=tcp FERRITE_OFI_IFACE=fh0 FERRITE_CONN=partial \
        TEST_NP_UPTO=6 c_suite "$ofi, FERRITE_CONN=partial, $once" "$work/mpirun-3" "" all
    FERRITE_TRANSPORTS=ofi,self FERRITE_OFI_PROVIDER=tcp FERRITE_OFI_IFACE=fh0 FERRITE_CONN=adaptive \
        TEST_NP_UPTO=6 c_suite "$ofi, FERRITE_CONN=adaptive, $once" "$work/mpirun-3" "" all
    FERRITE_TRANSPORTS=ofi,self FERRITE_OFI_PROVIDER=tcp FERRITE_OFI_IFACE=fh0 FERRITE_CONN_SETUP=ud \
        TEST_NP_UPTO=6 c_suite "$ofi, FERRITE_CONN_SETUP=ud, $once" "$work/mpirun-3" "" all
    FERRITE_TRANSPORTS=ofi,self FERRITE_OFI_PROVIDER=tcp FERRITE_OFI_IFACE=fh0 FERRITE_CONN=adaptive \
        FERRITE_CONN_MAX=2 FERRITE_CONN_THRESHOLD=4 TEST_NP_UPTO=6 \
        c_suite "$ofi, a budget (adaptive, FERRITE_CONN_MAX=2, FERRITE_CONN_THRESHOLD=4), $once" \
        "$work/mpirun-3" "" all
else
    echo "SKIP hosts: ofi across hosts (libfabric.so.1 is not installed)"
    skip=$((skip + ofi_checks))
fi

bindir=$root/tests/c/bin
# Placement and output forwarding: each rank prints the address it sees on fh0 (not an
# MPI program, so no PMI); rank i runs on host i mod 3 with one slot each.
log=$work/where.log
if timeout -k 5 30 "$work/mpirun-3" -n 4 --tag-output sh -c 'ip -4 -o addr show dev fh0' \
        >"$log" 2>&1; then
    got=$(sed -n 's/^\[\([0-9]*\)\]<stdout>:.* inet \([0-9.]*\)\/.*/\1=\2/p' "$log" | sort | tr '\n' ' ')
else
    got="exit status $?"
fi
want="0=$net.1 1=$net.2 2=$net.3 3=$net.1 "
if [ "$got" = "$want" ]; then ok "ranks run where placed: $got"; else ko "placement: got '$got', want '$want'" "$log"; fi

# Without --iface, mpirun and the ranks find their non-loopback address themselves.
log=$work/noif.log
if timeout -k 5 30 "$work/mpirun-noif" -n 3 "$bindir/ring" >"$log" 2>&1 && grep -qx "done: ring" "$log"; then
    ok "ring across $A, $B, $C without --iface (addresses found by mpirun and the ranks)"
else
    ko "ring across $A, $B, $C without --iface" "$log"
fi
log=$work/noif-tcp.log
if timeout -k 5 30 "$work/mpirun-noif" -n 6 -x FERRITE_TRANSPORTS=tcp,self "$bindir/ring" >"$log" 2>&1 &&
   grep -qx "done: ring" "$log"; then
    ok "ring across $A, $B, $C without --iface, tcp only"
else
    ko "ring across $A, $B, $C without --iface, tcp only" "$log"
fi

log=$work/noif-udp.log
if timeout -k 5 30 "$work/mpirun-noif" -n 6 -x FERRITE_TRANSPORTS=udp,self "$bindir/ring" >"$log" 2>&1 &&
   grep -qx "done: ring" "$log"; then
    ok "ring across $A, $B, $C without --iface, udp only"
else
    ko "ring across $A, $B, $C without --iface, udp only" "$log"
fi

# A hostfile with slots: ranks 0-1 on A, 2-3 on B; rank 0's output comes back from A.
printf '# two hosts\n%s slots=2\n%s slots=2\n' "$A" "$B" >"$work/hostfile"
log=$work/hostfile.log
if timeout -k 5 30 ip netns exec "$A" "$MPIRUN_BIN" --hostfile "$work/hostfile" \
        --launcher "$work/agent" --iface fh0 "$bindir/ring" >"$log" 2>&1 &&
   grep -qx "done: ring" "$log"; then
    ok "hostfile ($A slots=2, $B slots=2; -n from the slots)"
else
    ko "hostfile ($A slots=2, $B slots=2)" "$log"
fi

# Without tcp, a peer on another host is unreachable, and the error says so: proof that
# routing follows the hosts (the same job on one host passes over shm).
log=$work/shm-only.log
timeout -k 5 30 "$work/mpirun-2" -n 2 -x FERRITE_TRANSPORTS=self,shm "$bindir/ring" >"$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q "runs on another host" "$log"; then
    ok "FERRITE_TRANSPORTS=self,shm across hosts fails naming the other host (exit $rc)"
else
    ko "FERRITE_TRANSPORTS=self,shm across hosts should fail with 'runs on another host' (exit $rc)" "$log"
fi

# The job's secrets never show where another user could read them, and an attacker who
# knows everything but the secret is turned away by mpirun's PMI port and by a rank's tcp
# transport. A job with a rank on B, without --iface (mpirun finds its address itself),
# over tcp only. Its agent waits 3 s before starting the rank (a slow ssh) and stays alive
# while it runs, holding its command line as an ssh client does (the usual agent execs into
# the rank and its arguments vanish). Ranks run tests/conn/fdlimit.c: each prints
# "listening R PID", sleeps 4 s, then exchanges checked data with the other.
#  1. While the agent waits, the attacker reads PMI_PORT and PMI_ID from the agent's command
#     line (as `ps` shows any user) and, from B, claims rank 1 on mpirun's PMI port with a
#     wrong secret, then with none, each followed by an abort: no answer, the job goes on.
#  2. The PMI listener is bound to the job's address only, not every address.
#  3. The secret (read, as root, from the remote rank's environment) is on no process's
#     command line, and in no file another user could read (/tmp, /dev/shm).
#  4. From B, the attacker connects to rank 0's tcp listener and sends a well-formed hello
#     from rank 1 with a wrong secret: closed without a byte in answer, counted as a
#     stranger in the report; the job completes with the right data and exit 0.
log=$work/secret.log
json=$work/secret.json
printf '#!/bin/sh\nhost=$1; shift\nsleep 3\nip netns exec "$host" "$@"\n' >"$work/agent-slow"
chmod +x "$work/agent-slow"
"$PREFIX/bin/mpicc" -O1 -o "$work/fdlimit" "$root/tests/conn/fdlimit.c" >"$log" 2>&1
touch "$work/start"
timeout -k 5 40 ip netns exec "$A" "$MPIRUN_BIN" --host "localhost,$B" --launcher "$work/agent-slow" \
    -n 2 -x FERRITE_TRANSPORTS=tcp,self --report="$json" "$work/fdlimit" -4 >>"$log" 2>&1 &
job=$!
# 1. The PMI address from the waiting agent's command line.
port=""
for _ in $(seq 100); do
    for f in $(grep -laF -- "$work/fdlimit" /proc/[0-9]*/cmdline 2>/dev/null); do
        p=$(tr '\0' '\n' 2>/dev/null <"$f" | sed -n 's/^PMI_PORT=//p')
        [ -n "$p" ] && port=$p
    done
    [ -n "$port" ] && break
    sleep 0.02
done
pmi_attack() { # first line
    ip netns exec "$B" timeout 5 bash -c "exec 3<>/dev/tcp/${port%:*}/${port##*:} &&
        printf '%s\ncmd=abort exitcode=42 message=hijacked\n' '$1' >&3 && timeout 2 cat <&3" 2>&1
}
reply1=""; reply2=""; bound=""
if [ -n "$port" ]; then
    reply1=$(pmi_attack "cmd=initack pmiid=1 secret=0123456789abcdef")
    reply2=$(pmi_attack "cmd=initack pmiid=1")
    # 2. What the PMI listener is bound to (in A, where mpirun runs).
    bound=$(ip netns exec "$A" ss -ltnpH 2>/dev/null | grep '"mpirun"' | awk '{ print $4 }' | tr '\n' ' ')
fi
# 3. The secret, once the remote rank runs; the command lines and files that could leak it.
secret=""
for _ in $(seq 100); do
    for pid in $(ip netns pids "$B" 2>/dev/null); do
        s=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | sed -n 's/^FERRITE_PMI_SECRET=//p')
        [ -n "$s" ] && secret=$s
    done
    [ -n "$secret" ] && break
    sleep 0.1
done
leaks=""; hello=""
if [ -n "$secret" ]; then
    # The pattern from a file ($work is private): on grep's own command line it would match.
    printf '%s\n' "$secret" >"$work/secret.pat"
    for f in $(grep -laF -f "$work/secret.pat" /proc/[0-9]*/cmdline 2>/dev/null); do
        leaks="$leaks ${f#/proc/}"
    done
    files=$(find /tmp /dev/shm -xdev -type f -newer "$work/start" -size -1M 2>/dev/null |
        grep -v "^$work/" | xargs -r grep -lF -f "$work/secret.pat" 2>/dev/null | tr '\n' ' ')
    # 4. The hello, to rank 0's listener, while rank 0 sleeps (it reads it when it next polls).
    for _ in $(seq 50); do grep -q '^listening 0 ' "$log" && break; sleep 0.1; done
    pid0=$(awk '/^listening 0 / { print $3 }' "$log")
    addr0=$(ip netns exec "$A" ss -ltnpH 2>/dev/null | grep "pid=$pid0," | awk '{ print $4 }' | head -n 1)
    hello=$(ip netns exec "$B" python3 - "$addr0" <<'PY' 2>&1
import socket, struct, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
# Version 1, kind Hello, from rank 1, a wrong secret; to rank 0, attempt 1, verdict 0.
s.sendall(struct.pack("<BBBBIQIIB3x", 1, 6, 0, 0, 1, 0x0123456789ABCDEF, 0, 1, 0))
got = b""
try:
    while True:
        b = s.recv(64)
        if not b:
            break
        got += b
    print("closed after %d bytes" % len(got))
except socket.timeout:
    print("still open after %d bytes" % len(got))
PY
)
fi
wait "$job"; rc=$?
if [ -z "$port" ]; then
    ko "could not find PMI_PORT on the agent's command line (exit $rc)" "$log"
elif [ -z "$reply1$reply2" ] && [ "$rc" -eq 0 ] && ! grep -q hijacked "$log"; then
    ok "claims of rank 1 on the PMI port with a wrong secret and with none are refused"
else
    ko "PMI claims without the secret: replies '$reply1' '$reply2', job exit $rc" "$log"
fi
case " $bound " in
*" 0.0.0.0:"* | *" *:"* | *" [::]:"* | "  ") ko "the PMI listener is bound to: '$bound' (want $net.1 only)" ;;
*) ok "the PMI listener is bound to the job's address only: $bound" ;;
esac
if [ -z "$secret" ]; then
    ko "could not find the job's secret in the remote rank's environment (exit $rc)" "$log"
elif [ -n "$leaks$files" ]; then
    ko "the PMI secret shows on the command line of:$leaks; in files: $files" "$log"
else
    ok "the PMI secret is on no command line and in no file in /tmp or /dev/shm"
fi
strangers=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ranks"][0]["dropped"]["strangers"])' "$json" 2>/dev/null)
if [ "$hello" = "closed after 0 bytes" ] && [ "${strangers:-0}" -ge 1 ] && [ "$rc" -eq 0 ] &&
   [ "$(grep -cE '^rank [01]: 0 fails 0 errs' "$log")" -eq 2 ]; then
    ok "a tcp hello with a wrong secret is closed unanswered (rank 0 counted $strangers stranger(s)); the job's data arrived"
else
    ko "tcp hello with a wrong secret to rank 0 ($addr0): '$hello', strangers '${strangers:-}', job exit $rc" "$log"
fi

# Two-level collectives (coll/hier.rs) and MPI_COMM_TYPE_SHARED following the launcher's
# node map: 7 ranks round-robin over A, B, C (3+2+2, no host's ranks consecutive), then 5 in
# blocks from a hostfile (A slots=3, B slots=2). Data of every collective, and only leaders
# sending between hosts (tests/hosts/coll_hier.c).
log=$work/coll_hier.log
"$PREFIX/bin/mpicc" -O1 -o "$work/coll_hier" "$here/coll_hier.c" >"$log" 2>&1
if timeout -k 5 60 "$work/mpirun-3" -n 7 "$work/coll_hier" >>"$log" 2>&1 &&
   grep -qx "done: coll_hier" "$log"; then
    ok "two-level collectives, 7 ranks round-robin on $A, $B, $C: $(grep -m1 '^two levels' "$log")"
else
    ko "two-level collectives, 7 ranks round-robin on $A, $B, $C" "$log"
fi
printf '%s slots=3\n%s slots=2\n' "$A" "$B" >"$work/hostfile32"
log=$work/coll_hier_blocks.log
if timeout -k 5 60 ip netns exec "$A" "$MPIRUN_BIN" --hostfile "$work/hostfile32" \
        --launcher "$work/agent" --iface fh0 "$work/coll_hier" >"$log" 2>&1 &&
   grep -qx "done: coll_hier" "$log"; then
    ok "two-level collectives, ranks 0-2 on $A, 3-4 on $B: $(grep -m1 '^two levels' "$log")"
else
    ko "two-level collectives, ranks 0-2 on $A, 3-4 on $B" "$log"
fi

# A remote rank killed: mpirun ends the job, non-zero, naming the rank and its host.
log=$work/sigkill.log
"$PREFIX/bin/mpicc" -O2 -o "$work/job_sigkill" "$root/tests/c/job_sigkill.c" >"$log" 2>&1
timeout -k 5 30 "$work/mpirun-2" -n 2 "$work/job_sigkill" >>"$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "rank 1 on $B" "$log"; then
    ok "a remote rank killed ends the job (exit $rc) with: $(grep -m1 "rank 1 on $B" "$log")"
else
    ko "a remote rank killed: expected non-zero exit and a line naming 'rank 1 on $B' (exit $rc)" "$log"
fi
# Nothing of the job may survive in any namespace.
left=""
for ns in "$A" "$B" "$C"; do left="$left$(ip netns pids "$ns" 2>/dev/null)"; done
if [ -z "$left" ]; then ok "no process left in the namespaces"; else ko "processes left: $left"; fi

echo "hosts: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
