#!/usr/bin/env bash
# Two-level collectives vs flat across two "hosts": network namespaces A (bridge, mpirun) and
# B (veth), as tests/hosts/run.sh builds them (needs root and `ip`). Runs bench/hier.c at
# -n 4 (2+2) and -n 8 (4+4), ranks in blocks from a hostfile, interleaving two levels
# forced (FERRITE_COLL_*_ALGO=hier) with the flat algorithms (FERRITE_COLL_HIER_MAX=0), REPS
# times. Prints each run's table
# with the load. Knobs: PREFIX (default ./build), REPS (3), ITERS (calls per batch, 100),
# HOSTS_NET (/24 prefix, 10.231.9), NPS ("4 8"), HIER_OPTS (more mpirun options for both).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-$root/build}
net=${HOSTS_NET:-10.231.9}
A=fhb$$a B=fhb$$b
work=$(mktemp -d)
cleanup() {
    for ns in "$A" "$B"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip -n "$A" link add fh0 type bridge
ip -n "$A" link set lo up; ip -n "$B" link set lo up
ip -n "$A" link add vb type veth peer name fh0 netns "$B"
ip -n "$A" link set vb master fh0
ip -n "$A" addr add "$net.1/24" dev fh0; ip -n "$B" addr add "$net.2/24" dev fh0
ip -n "$A" link set fh0 up; ip -n "$A" link set vb up; ip -n "$B" link set fh0 up
printf '#!/bin/sh\nhost=$1; shift\nexec ip netns exec "$host" "$@"\n' >"$work/agent"
chmod +x "$work/agent"
sleep 2 # addresses usable (DAD)
"$PREFIX/bin/mpicc" -O2 -o "$work/hier" "$root/bench/hier.c"
for np in ${NPS:-4 8}; do
    printf '%s slots=%d\n%s slots=%d\n' "$A" $((np / 2)) "$B" $((np / 2)) >"$work/hosts$np"
    for rep in $(seq "${REPS:-3}"); do
        for mode in hier flat; do
            x="-x FERRITE_COLL_HIER_MAX=0"
            if [ "$mode" = hier ]; then
                x=""
                for c in BARRIER BCAST REDUCE ALLREDUCE ALLGATHER; do
                    x="$x -x FERRITE_COLL_${c}_ALGO=hier"
                done
            fi
            echo "== np $np rep $rep mode $mode load $(cut -d' ' -f1 /proc/loadavg)"
            timeout -k 5 600 ip netns exec "$A" "$PREFIX/bin/mpirun" --hostfile "$work/hosts$np" \
                --launcher "$work/agent" --iface fh0 $x ${HIER_OPTS:-} "$work/hier" "${ITERS:-100}"
        done
    done
done
