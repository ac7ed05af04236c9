#!/usr/bin/env bash
# Benchmarks: builds pingpong.c, bw.c and the collective latency programs (allreduce.c,
# bcast.c, alltoall.c, barrier.c) with Ferrite ($PREFIX/bin/mpicc), Open MPI
# (mpicc.openmpi) and MPICH (mpicc.mpich), whichever are present (as root, installs the
# Debian packages of a missing one first, unless BENCH_NO_INSTALL=1), runs each over shared
# memory (point-to-point at -n 2, collectives at -n 2 and -n 4; BENCH_COLL_NP changes the
# latter, BENCH_ONLY="allreduce barrier" limits the programs), and prints one markdown
# table per benchmark and process count: size, Ferrite,
# Open MPI, MPICH and the ratio Ferrite/Open MPI (latency in usec: lower is better;
# bandwidth in MB/s: higher is better). The tables are also saved under bench/results/.
# BENCH_MPIS limits the set, e.g. BENCH_MPIS="openmpi mpich". Everything runs BENCH_REPS
# times (default 3), interleaved: each repetition runs every job with every MPI in turn, so
# a burst of load hits them alike; the tables give the median of each size.
#
# The tcp section (in the default set; BENCH_ONLY=tcp runs it alone, BENCH_ONLY="tcp
# barrier" both) runs pingpong and bw (BENCH_TCP changes that list) at -n 2 over sockets on
# this host: Ferrite with FERRITE_TRANSPORTS=tcp,self; Ferrite over udp
# (FERRITE_TRANSPORTS=udp,self) and with FERRITE_CONN=adaptive over tcp, each "n/a" when the
# installed library refuses it (a 2-rank bench/probe.c job fails); Open MPI with ob1 and the
# tcp,self BTLs; Debian's MPICH (ch4:ucx, which has no shared-memory module of its own: all
# traffic goes through UCX) with UCX_TLS=tcp,self and MPIR_CVAR_NOLOCAL=1. Before timing,
# each configuration's path is checked with 1000 bench/probe.c round trips: Ferrite's
# FERRITE_REPORT must count them on a socket transport and none on shm; for Open MPI and
# MPICH, strace (when installed) must count at least 1000 socket writes per rank.
#
# The rma section (in the default set; BENCH_ONLY=rma runs it alone) runs bench/rma.c's
# modes (BENCH_RMA, default "put_lat get_lat acc_lat put_bw get_bw": OSU-style passive-target
# put/get/accumulate latency and put/get bandwidth, 8 B .. 1 MiB) at -n 2 over shared memory
# with the launch lines above, then over tcp: Ferrite tcp, Open MPI tcp (plus --mca osc
# pt2pt, see rma_args) and MPICH tcp, each first checked as above
# with 1000 8-byte put+flush operations instead of the probe. Its tables add the ratio of
# Ferrite to the better of Open MPI and MPICH.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PREFIX=${PREFIX:-$root/build}
BENCH_MPIS=${BENCH_MPIS:-ferrite openmpi mpich}
BENCH_COLL_NP=${BENCH_COLL_NP:-2 4}
BENCH_TCP=${BENCH_TCP:-pingpong bw}
BENCH_RMA=${BENCH_RMA:-put_lat get_lat acc_lat put_bw get_bw}
BENCH_REPS=${BENCH_REPS:-3}
P2P_BENCHES="pingpong bw"
COLL_BENCHES="allreduce bcast alltoall barrier"
BENCHES="$P2P_BENCHES $COLL_BENCHES tcp rma"
if [ -n "${BENCH_ONLY:-}" ]; then BENCHES=$BENCH_ONLY; fi
# Jobs: benchmark:process-count over shared memory, tcp-benchmark:2 over sockets
# (rma-MODE runs bench/rma.c in that mode).
jobs=()
programs=()
p2p_tcp=0 rma_tcp=0
for b in $BENCHES; do
    case " $COLL_BENCHES " in
    *" $b "*) for np in $BENCH_COLL_NP; do jobs+=("$b:$np"); done; programs+=("$b") ;;
    *) if [ "$b" = tcp ]; then
           for t in $BENCH_TCP; do jobs+=("tcp-$t:2"); programs+=("$t"); p2p_tcp=1; done
           programs+=(probe)
       elif [ "$b" = rma ]; then
           for t in $BENCH_RMA; do jobs+=("rma-$t:2"); done
           for t in $BENCH_RMA; do jobs+=("tcp-rma-$t:2"); rma_tcp=1; done
           programs+=(rma)
       else
           jobs+=("$b:2"); programs+=("$b")
       fi ;;
    esac
done
programs=($(printf '%s\n' "${programs[@]}" | sort -u))
bin=$here/bin
out=$here/results
mkdir -p "$bin" "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

if [ "$(id -u)" = 0 ] && [ "${BENCH_NO_INSTALL:-0}" != 1 ]; then
    need=()
    case " $BENCH_MPIS " in *" openmpi "*) command -v mpicc.openmpi >/dev/null || need+=(openmpi-bin libopenmpi-dev) ;; esac
    case " $BENCH_MPIS " in *" mpich "*) command -v mpicc.mpich >/dev/null || need+=(mpich libmpich-dev) ;; esac
    if [ ${#need[@]} -gt 0 ]; then
        echo "bench: installing ${need[*]}"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") >"$work/apt.log" 2>&1 \
            || echo "bench: install failed (see apt-get output); going on without"
    fi
fi

# Per MPI: compiler; per configuration (MPI, or MPI.transport in the tcp section): launcher
# and its arguments; $2: ranks.
mpi_cc() {
    case $1 in
    ferrite) echo "$PREFIX/bin/mpicc" ;;
    openmpi) echo mpicc.openmpi ;;
    mpich) echo mpicc.mpich ;;
    esac
}
OMPI_RUN="env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --allow-run-as-root --oversubscribe"
mpi_run() {
    case $1 in
    ferrite) echo "$PREFIX/bin/mpirun -n $2" ;;
    # ob1 with the vader shared-memory BTL (no UCX, no TCP).
    openmpi) echo "$OMPI_RUN -n $2 --mca pml ob1 --mca btl self,vader" ;;
    # Debian's MPICH is ch4:ucx: restrict UCX to its shared-memory transports.
    mpich) echo "env UCX_TLS=self,sm mpirun.mpich -n $2" ;;
    ferrite.tcp) echo "env FERRITE_TRANSPORTS=tcp,self $PREFIX/bin/mpirun -n $2" ;;
    ferrite.udp) echo "env FERRITE_TRANSPORTS=udp,self $PREFIX/bin/mpirun -n $2" ;;
    ferrite.adaptive) echo "env FERRITE_TRANSPORTS=tcp,self FERRITE_CONN=adaptive $PREFIX/bin/mpirun -n $2" ;;
    openmpi.tcp) echo "$OMPI_RUN -n $2 --mca pml ob1 --mca btl tcp,self" ;;
    # ch4:ucx has no shm module in Debian's build (every message goes through UCX), so UCX's
    # transport list decides; NOLOCAL also turns off MPICH's node-local shortcuts.
    mpich.tcp) echo "env MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self mpirun.mpich -n $2" ;;
    esac
}
label() {
    case $1 in
    ferrite) echo Ferrite ;; openmpi) echo "Open MPI" ;; mpich) echo MPICH ;;
    ferrite.tcp) echo "Ferrite tcp" ;; ferrite.udp) echo "Ferrite udp" ;;
    ferrite.adaptive) echo "Ferrite adaptive" ;; openmpi.tcp) echo "Open MPI tcp" ;;
    mpich.tcp) echo "MPICH tcp" ;;
    esac
}

have=()
for m in $BENCH_MPIS; do
    cc=$(mpi_cc "$m")
    if ! command -v "$cc" >/dev/null 2>&1 && [ ! -x "$cc" ]; then
        echo "bench: $(label "$m") not available ($cc missing), skipped"; continue
    fi
    okb=1
    for b in "${programs[@]}"; do
        if ! $cc -O2 -w -o "$bin/$b.$m" "$here/$b.c" >"$work/build.$m.$b" 2>&1; then
            echo "bench: building $b with $cc failed:"; sed 's/^/    /' "$work/build.$m.$b" | tail -5; okb=0
        fi
    done
    [ "$okb" = 1 ] && have+=("$m")
done

# Extra launcher arguments of configuration $1 for bench/rma.c. Open MPI's default osc/sm
# serves windows of node-local ranks by direct access whatever the BTLs are; osc/rdma fails
# MPI_Win_allocate over the tcp BTL (4.1.4: no RDMA-capable BTL); osc/pt2pt (active
# messages over the pml, like Ferrite; disabled in Debian's openmpi-mca-params.conf, which
# the command line overrides) goes through the tcp BTL.
rma_args() {
    case $1 in openmpi.tcp) echo "--mca osc pt2pt" ;; esac
}

# The tcp section's configurations, each checked before any timing. A configuration Ferrite
# refuses (udp, adaptive before they exist) is "n/a"; one whose messages did not take the
# intended path is dropped with the evidence ("-" in the tables).
# check_path CONFIG KIND: KIND p2p runs 1000 bench/probe.c round trips, rma 1000 8-byte
# put+flush operations of bench/rma.c; appends CONFIG to tcp_cfgs (rma_tcp_cfgs) if they
# took the intended path.
tcp_cfgs=()
rma_tcp_cfgs=()
na_cfgs=" "
notes=()
check_path() {
    local c=$1 kind=$2 m=${1%%.*} log=$work/probe.$1.$2 rc why try extra= what=probe
    local cmd=("$bin/probe.$m" 1000) okre='^probe ok 1000'
    if [ "$kind" = rma ]; then
        extra=$(rma_args "$c") what="rma probe"
        cmd=("$bin/rma.$m" put_lat 8 1000) okre='^8 '
    fi
    # Two tries: MPICH over UCX's tcp once hung in MPI_Finalize here (after the probe).
    for try in 1 2; do
        rm -f "$log".*
        if [ "$m" = ferrite ]; then
            timeout -k 5 30 $(mpi_run "$c" 2) --report="$log.json" "${cmd[@]}" >"$log" 2>&1
        elif command -v strace >/dev/null 2>&1; then
            # One strace summary per rank process; the launcher is not traced.
            timeout -k 5 30 $(mpi_run "$c" 2) $extra sh -c 'exec strace -f -qq -c -o "$0.$$" "$@"' \
                "$log.strace" "${cmd[@]}" >"$log" 2>&1
        else
            timeout -k 5 30 $(mpi_run "$c" 2) $extra "${cmd[@]}" >"$log" 2>&1
        fi
        rc=$?
        [ $rc = 124 ] || [ $rc = 137 ] || break
        echo "bench: the $(label "$c") $what timed out (try $try)" >&2
    done
    if [ $rc -ne 0 ] || ! grep -q "$okre" "$log"; then
        # Refused = MPI_Init failed with an error saying so (not a crash or a hang).
        if [ "$m" = ferrite ] && [ "$c" != ferrite.tcp ] && [ $rc != 124 ] && [ $rc != 137 ] \
                && grep -q 'MPI_Init.*\(unknown transport\|not supported\)' "$log"; then
            na_cfgs+="$c "
            notes+=("$(label "$c"): n/a, the library refuses it: $(grep -m1 'MPI_Init' "$log" | sed 's/.*MPI_Init: //' | cut -c1-150)")
        else
            notes+=("$(label "$c"): the 2-rank $what failed (exit $rc): $(tail -n 1 "$log" | cut -c1-160)")
        fi
        return
    fi
    if [ "$m" = ferrite ]; then
        # The socket transport that must carry them: udp for udp, any for adaptive.
        case $c in ferrite.tcp) want=tcp ;; ferrite.udp) want=udp ;; *) want= ;; esac
        why=$(python3 - "$log.json" "$want" "${c#ferrite.}" <<'PY' 2>&1
import json, sys
doc = json.load(open(sys.argv[1]))
if sys.argv[3] == "adaptive":
    assert doc["policy"] == "adaptive", "the report says policy %s" % doc["policy"]
for r in doc["ranks"]:
    t = r["transports"]
    shm = t.get("shm", {}).get("msgs_sent", 0)
    net = sum(v["msgs_sent"] for k, v in t.items()
              if k not in ("self", "shm") and sys.argv[2] in ("", k))
    assert shm == 0, "rank %d sent %d messages over shm" % (r["rank"], shm)
    assert net >= 1000, "rank %d sent only %d messages over %s" % (r["rank"], net, sys.argv[2] or "sockets")
print("policy %s; per rank: %s" % (doc["policy"], ", ".join(
    "%s %d" % (k, v["msgs_sent"]) for k, v in sorted(doc["ranks"][0]["transports"].items()) if v["msgs_sent"])))
PY
)
    elif ls "$log".strace.* >/dev/null 2>&1; then
        why=$(awk 'FNR == 1 { n[FILENAME] += 0 }
            $NF ~ /^(writev|sendto|sendmsg|send|write)$/ && $4 ~ /^[0-9]+$/ { n[FILENAME] += $4 }
            END { m = -1; for (f in n) if (m < 0 || n[f] < m) m = n[f]
                  if (m < 1000) { print "only " m " write-type calls in a rank"; exit 1 }
                  print "strace: at least " m " writev/sendto/sendmsg/send/write calls per rank" }' "$log".strace.*)
    else
        why="not verified (no strace)"
    fi
    if [ $? -ne 0 ]; then
        notes+=("$(label "$c"): dropped, its 1000 $what operations did not take the intended path: $(echo "$why" | tail -n 1)")
        return
    fi
    if [ "$kind" = rma ]; then
        notes+=("$(label "$c"): 1000 rma probe put+flush operations over sockets ($why)")
        rma_tcp_cfgs+=("$c")
    else
        notes+=("$(label "$c"): 1000 probe round trips over sockets ($why)")
        tcp_cfgs+=("$c")
    fi
}
if [ $p2p_tcp = 1 ]; then
    for m in "${have[@]}"; do
        case $m in ferrite) set -- ferrite.tcp ferrite.udp ferrite.adaptive ;; *) set -- "$m.tcp" ;; esac
        for c in "$@"; do check_path "$c" p2p; done
    done
fi
if [ $rma_tcp = 1 ]; then
    for m in "${have[@]}"; do check_path "$m.tcp" rma; done
fi
for n in "${notes[@]}"; do echo "bench: $n" >&2; done

for rep in $(seq 1 "$BENCH_REPS"); do
for job in "${jobs[@]}"; do
    b=${job%%:*} np=${job##*:}
    case $b in tcp-rma-*) cfgs=("${rma_tcp_cfgs[@]}") ;; tcp-*) cfgs=("${tcp_cfgs[@]}") ;; *) cfgs=("${have[@]}") ;; esac
    for c in "${cfgs[@]}"; do
        m=${c%%.*}
        echo "bench: ${b#tcp-} -n $np with $(label "$c") (repetition $rep of $BENCH_REPS)" >&2
        raw=$work/$job.$c.raw.$rep
        # rma-MODE runs bench/rma.c in MODE, up to 1 MiB; the others up to 4 MiB.
        case ${b#tcp-} in
        rma-*) prog=("$bin/rma.$m" "${b#*rma-}") lastsize=1048576 extra=$(rma_args "$c") ;;
        *) prog=("$bin/${b#tcp-}.$m") lastsize=4194304 extra= ;;
        esac
        timeout -k 5 300 $(mpi_run "$c" "$np") $extra "${prog[@]}" >"$raw" 2>"$work/$job.$c.err" &
        pid=$!
        # MPICH over UCX's tcp sometimes hangs in MPI_Finalize after the last size (seen with
        # bw here): once the last size is printed, the job gets 15 s to exit.
        last=0
        while kill -0 $pid 2>/dev/null; do
            if [ $last = 0 ] && grep -q "^$lastsize " "$raw" 2>/dev/null; then last=$SECONDS; fi
            if [ $last != 0 ] && [ $((SECONDS - last)) -ge 15 ]; then
                notes+=("$(label "$c"): ${b#tcp-} hung after its last size (in MPI_Finalize); stopped")
                kill -TERM $pid 2>/dev/null; break
            fi
            sleep 0.2
        done
        if ! wait $pid && [ $last = 0 ]; then
            echo "bench: ${b#tcp-} -n $np with $(label "$c") failed:" >&2; tail -5 "$work/$job.$c.err" >&2
        fi
        grep -v '^#' "$raw" | awk 'NF == 2' >"$work/$job.$c.$rep"
    done
done
done
# Per job and configuration, the median over the repetitions of each size (the lower middle
# value when their number is even; a size missing from a repetition counts only where present).
for job in "${jobs[@]}"; do
    for f in "$work/$job".*.1; do
        [ -e "$f" ] || continue
        base=${f%.1}
        cat "$base".[0-9]* | sort -k1,1n -k2,2g | awk '
            function flush() { if (n) print size, v[int((n + 1) / 2)]; n = 0 }
            $1 != size { flush(); size = $1 }
            { v[++n] = $2 }
            END { flush() }' >"$base"
    done
done

# One table: sizes from every file, a column per file ("n/a" for a configuration the
# library refused, "-" for a missing value), then ratio columns "a/b" of two columns.
table() { # "label=file[=na]" per column, then "--", then "i/j" ratios of columns (1-based)
    local cols=() ratios=() seen=0
    for a in "$@"; do
        if [ "$a" = -- ]; then seen=1; elif [ $seen = 0 ]; then cols+=("$a"); else ratios+=("$a"); fi
    done
    printf '| size (B) |'
    for c in "${cols[@]}"; do printf ' %s |' "${c%%=*}"; done
    for r in "${ratios[@]}"; do
        i=${r%/*} j=${r#*/}
        a=${cols[$((i - 1))]%%=*}
        case $j in [\<\>]*) b=best ;; *) b=${cols[$((j - 1))]%%=*} ;; esac
        printf ' %s/%s |' "$a" "$b"
    done
    printf '\n|---:|'
    for _ in "${cols[@]}" "${ratios[@]}"; do printf -- '---:|'; done
    printf '\n'
    local specs=()
    for c in "${cols[@]}"; do specs+=("${c#*=}"); done
    awk -v specs="$(printf '%s\n' "${specs[@]}")" -v ratios="${ratios[*]}" '
        BEGIN {
            nc = split(specs, spec, "\n")
            for (k = 1; k <= nc; k++) {
                na[k] = spec[k] ~ /=na$/; file = spec[k]; sub(/=na$/, "", file)
                while ((getline line < file) > 0) { split(line, f, " "); val[k, f[1]] = f[2]; sizes[f[1]] = 1 }
            }
            nr = split(ratios, rat, " ")
            n = 0; for (s in sizes) list[++n] = s + 0
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (list[j] < list[i]) { t = list[i]; list[i] = list[j]; list[j] = t }
            for (i = 1; i <= n; i++) {
                s = list[i]; printf "| %d |", s
                for (k = 1; k <= nc; k++) printf " %s |", na[k] ? "n/a" : ((k, s) in val ? val[k, s] : "-")
                for (r = 1; r <= nr; r++) {
                    split(rat[r], ab, "/"); a = ab[1] + 0; b = ab[2] + 0
                    if (ab[2] ~ /^[<>]/) { # "a/<j,k": to the lowest of columns j, k; ">": highest
                        nb = split(substr(ab[2], 2), bl, ","); best = ""
                        for (q = 1; q <= nb; q++) {
                            k = bl[q] + 0
                            if (na[k] || !((k, s) in val) || val[k, s] + 0 <= 0) continue
                            v = val[k, s] + 0
                            if (best == "" || (substr(ab[2], 1, 1) == "<" ? v < best : v > best)) best = v
                        }
                        ok = !na[a] && (a, s) in val && best != ""
                        printf " %s |", ok ? sprintf("%.2f", val[a, s] / best) : "-"
                        continue
                    }
                    ok = !na[a] && !na[b] && (a, s) in val && (b, s) in val && val[b, s] + 0 > 0
                    printf " %s |", ok ? sprintf("%.2f", val[a, s] / val[b, s]) : (na[a] || na[b] ? "n/a" : "-")
                }
                printf "\n"
            }
        }'
}

stamp=$(date -u +%Y%m%d-%H%M%S)
report=$out/bench-$stamp.md
{
    echo "# Benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
    for job in "${jobs[@]}"; do
        b=${job%%:*} np=${job##*:}
        case $b in
        pingpong) echo; echo "## pingpong over shared memory: one-way latency, -n 2, usec (lower is better)" ;;
        bw) echo; echo "## bw over shared memory: streaming bandwidth, window 64, -n 2, MB/s (higher is better)" ;;
        barrier) echo; echo "## barrier: latency, -n $np, usec (lower is better)" ;;
        tcp-pingpong) echo; echo "## pingpong over tcp (udp): one-way latency, -n 2, usec (lower is better)" ;;
        tcp-bw) echo; echo "## bw over tcp (udp): streaming bandwidth, window 64, -n 2, MB/s (higher is better)" ;;
        rma-* | tcp-rma-*)
            case $b in tcp-*) where=tcp ;; *) where="shared memory" ;; esac
            case ${b#*rma-} in
            put_lat) what="MPI_Put + MPI_Win_flush latency, usec (lower is better)" ;;
            get_lat) what="MPI_Get + MPI_Win_flush latency, usec (lower is better)" ;;
            acc_lat) what="MPI_Accumulate (MPI_SUM, doubles) + MPI_Win_flush latency, usec (lower is better)" ;;
            put_bw) what="MPI_Put bandwidth, 64 per flush, MB/s (higher is better)" ;;
            get_bw) what="MPI_Get bandwidth, 64 per flush, MB/s (higher is better)" ;;
            *) what="" ;;
            esac
            echo; echo "## rma ${b#*rma-} over $where: $what, -n 2, passive target" ;;
        tcp-*) echo; echo "## ${b#tcp-} over tcp (udp), -n 2" ;;
        *) echo; echo "## $b: latency, -n $np, bytes per rank, usec (lower is better)" ;;
        esac
        echo
        case ${b#*rma-} in *_bw) best=">2,3" ;; *) best="<2,3" ;; esac
        case $b in
        tcp-rma-*)
            for c in ferrite.tcp openmpi.tcp mpich.tcp; do [ -f "$work/$job.$c" ] || : >"$work/$job.$c"; done
            table "Ferrite tcp=$work/$job.ferrite.tcp" "Open MPI tcp=$work/$job.openmpi.tcp" \
                "MPICH tcp=$work/$job.mpich.tcp" -- 1/2 1/3 "1/$best"
            ;;
        rma-*)
            for m in ferrite openmpi mpich; do [ -f "$work/$job.$m" ] || : >"$work/$job.$m"; done
            table "Ferrite=$work/$job.ferrite" "Open MPI=$work/$job.openmpi" "MPICH=$work/$job.mpich" \
                -- 1/2 1/3 "1/$best"
            ;;
        tcp-*)
            for c in ferrite.tcp ferrite.udp ferrite.adaptive openmpi.tcp mpich.tcp; do
                [ -f "$work/$job.$c" ] || : >"$work/$job.$c"
            done
            na() { case "$na_cfgs" in *" $1 "*) echo =na ;; esac; }
            table "Ferrite tcp=$work/$job.ferrite.tcp" \
                "Ferrite udp=$work/$job.ferrite.udp$(na ferrite.udp)" \
                "Ferrite adaptive=$work/$job.ferrite.adaptive$(na ferrite.adaptive)" \
                "Open MPI tcp=$work/$job.openmpi.tcp" "MPICH tcp=$work/$job.mpich.tcp" \
                -- 1/4 1/5 2/4 3/4
            ;;
        *)
            for m in ferrite openmpi mpich; do [ -f "$work/$job.$m" ] || : >"$work/$job.$m"; done
            table "Ferrite=$work/$job.ferrite" "Open MPI=$work/$job.openmpi" "MPICH=$work/$job.mpich" -- 1/2
            ;;
        esac
    done
    case " ${jobs[*]} " in *" tcp-rma-"*)
        echo
        echo "rma over tcp: Ferrite: FERRITE_TRANSPORTS=tcp,self; Open MPI: --mca pml ob1 --mca btl"
        echo "tcp,self --mca osc pt2pt (its default osc/sm would serve node-local windows by direct"
        echo "access, osc/rdma cannot use the tcp BTL); MPICH (ch4:ucx): MPIR_CVAR_NOLOCAL=1"
        echo "UCX_TLS=tcp,self." ;;
    esac
    if [ $p2p_tcp = 1 ]; then
        echo
        echo "tcp section: Ferrite: FERRITE_TRANSPORTS=tcp,self (udp: udp,self; adaptive: tcp,self with"
        echo "FERRITE_CONN=adaptive); Open MPI: --mca pml ob1 --mca btl tcp,self; MPICH (ch4:ucx):"
        echo "MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self."
    fi
    if [ ${#notes[@]} -gt 0 ]; then
        echo
        echo "Path checks and notes:"
        echo
        for n in "${notes[@]}"; do echo "- $n"; done
    fi
} >"$report"
cat "$report"
echo
echo "bench: saved $report"
