#!/usr/bin/env bash
# Prints the markdown table of docs/connections.md: average connections per rank (and
# utilization = connections used / opened) for each pattern of tests/conn/pattern.c at each
# N, under static, ondemand and partial, over tcp, read from FERRITE_REPORT's JSON.
# Usage: tests/conn/table.sh [N...]   (default 16 32; needs tests/conn/bin/pattern, which
# tests/conn/run.sh builds, and the library installed in $PREFIX, default ./build)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
PREFIX=${PREFIX:-$(cd "$here/../.." && pwd)/build}
bin=$here/bin/pattern
[ -x "$bin" ] || "$PREFIX/bin/mpicc" -O2 -o "$bin" "$here/pattern.c"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sizes=${*:-16 32}
policies="static ondemand partial"
printf '| pattern | N |'
for p in $policies; do printf ' %s conns | %s util |' "$p" "$p"; done
printf '\n|---|---|'
for p in $policies; do printf -- '---|---|'; done
printf '\n'
for pattern in ring barrier bcast allreduce allgather alltoall_coll; do
    for n in $sizes; do
        printf '| %s | %s |' "${pattern%_coll}" "$n"
        for p in $policies; do
            FERRITE_TRANSPORTS=tcp,self FERRITE_CONN=$p timeout 120 "$PREFIX/bin/mpirun" -n "$n" \
                --report="$tmp/r.json" "$bin" "$pattern" >/dev/null
            python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(" %.2f | %.2f |" % (s["opened_per_rank"], s["utilization"]), end="")' "$tmp/r.json"
        done
        printf '\n'
    done
done
