# Sourced by tests/conn/run.sh when CONN_TRANSPORT=ofi: the shared receive pool. Many ranks
# flood one receiver with eager messages of mixed sizes (tests/conn/flood.c, every byte
# checked, the receiver also staying out of MPI so senders run out of credits); every rank's
# report must show one shared context (srx) with K * ceil(log2 n) + B buffers, the same on
# the receiver with n-1 connections as on a sender with one (ondemand), and a pool never
# found empty (the credits held; one buffer always stays posted).
flood=$here/bin/flood
if ! $MPICC -O2 -Wall -o "$flood" "$here/flood.c" >"$tmp/flood-build.log" 2>&1; then
    ko "build flood.c" "compile error" "$tmp/flood-build.log"
else
    srq_check() { # name np k b messages-per-sender
        local name=$1 np=$2 k=$3 b=$4 msgs=$5 json=$tmp/$1.json log=$tmp/$1.log
        if ! FERRITE_CONN=ondemand FERRITE_OFI_SRQ_K=$k FERRITE_OFI_SRQ_B=$b \
                timeout -k 5 "$TEST_TIMEOUT" $MPIRUN -n "$np" --report="$json" "$flood" "$msgs" \
                >"$log" 2>&1 || ! grep -q "done: flood" "$log"; then
            ko "$name" "job failed" "$log"; return
        fi
        local why
        why=$(python3 - "$json" "$np" "$k" "$b" <<'PY' 2>&1
import json, sys
doc = json.load(open(sys.argv[1]))
n, k, b = (int(x) for x in sys.argv[2:5])
want = k * (n - 1).bit_length() + b  # K * ceil(log2 n) + B
ranks = doc["ranks"]
assert sorted(x["rank"] for x in ranks) == list(range(n)), "not one record per rank"
for r in ranks:
    rb, opened = r["recv_buffers"], sum(r["opened"].values())
    assert rb["shared"] == 1, "rank %d: no shared receive context: %s" % (r["rank"], rb)
    assert rb["buffers"] == want, "rank %d: %d buffers, want %d" % (r["rank"], rb["buffers"], want)
    assert rb["bytes"] == want * 16448, "rank %d: %s" % (r["rank"], rb)
    assert rb["lowest_free"] >= 1, "rank %d: the pool ran empty: %s" % (r["rank"], rb)
    assert opened == (n - 1 if r["rank"] == 0 else 1), "rank %d opened %d" % (r["rank"], opened)
    assert r["failed"] == 0
PY
)
        if [ $? -ne 0 ]; then ko "$name" "$(echo "$why" | tail -n 1)"; return; fi
        ok "$name"
    }
    # The default sizing at 16 ranks (8 per CPU here): 16 * 4 + 64 = 128 buffers per rank.
    srq_check srq-flood-16 16 16 64 48
    # A pool much smaller than the flood: 2 * 3 + 8 = 14 buffers for 7 senders.
    srq_check srq-flood-small-8 8 2 8 48
fi
