#!/usr/bin/env bash
# MPI_Init time and per-rank peak RSS against the job size, per connection policy, over tcp
# on one host (FERRITE_TRANSPORTS=tcp,self). For each N and policy it runs
# tests/scale/scale.c's `init` mode once (MPI_Init timed with CLOCK_MONOTONIC on every rank,
# reduced to the maximum; then one MPI_Reduce, so ondemand opens a binomial tree) and reads
# FERRITE_REPORT's JSON: peak RSS (VmHWM) max and average over ranks and connections per rank.
# Prints a markdown table. Adaptive (FERRITE_CONN=adaptive, its threshold
# FERRITE_CONN_THRESHOLD left at the library's default unless set in the environment) runs
# when the library accepts it: a 2-rank job first; "n/a" rows when MPI_Init refuses it.
# Usage: bench/scale.sh [N...]   (default 16 64 256; PREFIX, default ./build). Static is not
# run above STATIC_MAX (default 256): at 1024 it is half a million connections on one host.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PREFIX=${PREFIX:-$root/build}
mkdir -p "$here/bin"
bin=$here/bin/scale
"$PREFIX/bin/mpicc" -O2 -o "$bin" "$root/tests/scale/scale.c"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sizes=${*:-16 64 256}
# Whether the library takes adaptive at all (refused at MPI_Init until it exists).
adaptive=1
if ! FERRITE_TRANSPORTS=tcp,self FERRITE_CONN=adaptive timeout -k 5 60 "$PREFIX/bin/mpirun" -n 2 \
        "$bin" init >"$tmp/probe" 2>&1; then
    adaptive=0
    echo "scale: adaptive n/a: $(grep -m1 'MPI_Init' "$tmp/probe" | sed 's/.*MPI_Init: //' | cut -c1-120)" >&2
fi
echo "scale: adaptive threshold: ${FERRITE_CONN_THRESHOLD:-library default}" >&2
echo "| N | policy | MPI_Init max (ms) | peak RSS max (kB) | peak RSS avg (kB) | connections per rank |"
echo "|---|---|---|---|---|---|"
for n in $sizes; do
    for p in static ondemand partial adaptive; do
        if [ "$p" = adaptive ] && [ $adaptive = 0 ]; then
            echo "| $n | $p | n/a | n/a | n/a | n/a |"
            continue
        fi
        if [ "$p" = static ] && [ "$n" -gt "${STATIC_MAX:-256}" ]; then
            echo "| $n | $p | not run | | | |"
            continue
        fi
        if ! FERRITE_TRANSPORTS=tcp,self FERRITE_CONN=$p timeout -k 5 300 "$PREFIX/bin/mpirun" \
                -n "$n" --report="$tmp/r.json" "$bin" init >"$tmp/out" 2>&1; then
            echo "| $n | $p | failed: $(tail -n 1 "$tmp/out") | | | |"
            continue
        fi
        init=$(awk '/^init max/ { printf "%.1f", $3 * 1000 }' "$tmp/out")
        python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print("| %s | %s | %s | %d | %d | %.2f |" % (sys.argv[2], sys.argv[3], sys.argv[4],
      s["peak_rss_max_kb"], s["peak_rss_avg_kb"], s["connections_per_rank"]))' \
            "$tmp/r.json" "$n" "$p" "$init"
    done
done
