#!/usr/bin/env bash
# Prints the markdown table of docs/connections.md: average connections per rank (and
# utilization = connections used / opened) for each pattern of tests/conn/pattern.c at each
# N, under static, ondemand, partial and adaptive, over tcp, read from FERRITE_REPORT's JSON.
# Adaptive (FERRITE_CONN_THRESHOLD left at the library's default unless set in the
# environment) runs when the library accepts it (a 2-rank job first); its columns are "n/a"
# when MPI_Init refuses it. A job that fails prints "failed" in its columns; utilization is
# "-" when nothing was opened.
# Usage: tests/conn/table.sh [N...]   (default 16 32; builds tests/conn/bin/pattern with the
# library installed in $PREFIX, default ./build; TABLE_PATTERNS="ring alltoall" picks other
# patterns of pattern.c)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
PREFIX=${PREFIX:-$(cd "$here/../.." && pwd)/build}
bin=$here/bin/pattern
mkdir -p "$here/bin"
# Always built here: the binary carries an rpath to the library it was built against.
"$PREFIX/bin/mpicc" -O2 -o "$bin" "$here/pattern.c"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sizes=${*:-16 32}
policies="static ondemand partial adaptive"
adaptive=1
if ! FERRITE_TRANSPORTS=tcp,self FERRITE_CONN=adaptive timeout -k 5 60 "$PREFIX/bin/mpirun" -n 2 \
        "$bin" pingpong >"$tmp/probe" 2>&1; then
    adaptive=0
    echo "table: adaptive n/a: $(grep -m1 'MPI_Init' "$tmp/probe" | sed 's/.*MPI_Init: //' | cut -c1-120)" >&2
fi
echo "table: adaptive threshold: ${FERRITE_CONN_THRESHOLD:-library default}" >&2
printf '| pattern | N |'
for p in $policies; do printf ' %s conns | %s util |' "$p" "$p"; done
printf '\n|---|---|'
for p in $policies; do printf -- '---|---|'; done
printf '\n'
for pattern in ${TABLE_PATTERNS:-ring barrier bcast allreduce allgather alltoall_coll}; do
    for n in $sizes; do
        printf '| %s | %s |' "${pattern%_coll}" "$n"
        for p in $policies; do
            if [ "$p" = adaptive ] && [ $adaptive = 0 ]; then printf ' n/a | n/a |'; continue; fi
            rm -f "$tmp/r.json"
            if ! FERRITE_TRANSPORTS=tcp,self FERRITE_CONN=$p timeout -k 5 120 "$PREFIX/bin/mpirun" \
                    -n "$n" --report="$tmp/r.json" "$bin" "$pattern" >"$tmp/out" 2>&1; then
                printf ' failed | failed |'
                echo "table: $pattern -n $n under $p failed: $(tail -n 1 "$tmp/out")" >&2
                continue
            fi
            python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
# Nothing opened (adaptive below its threshold): no utilization to speak of.
util = "%.2f" % s["utilization"] if s["opened_per_rank"] > 0 else "-"
print(" %.2f | %s |" % (s["opened_per_rank"], util), end="")' "$tmp/r.json"
        done
        printf '\n'
    done
done
