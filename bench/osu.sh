#!/usr/bin/env bash
# The OSU micro-benchmarks against Ferrite, Open MPI and MPICH on this host.
#
# OSU is third-party code and is not in this repository: download it from
# https://mvapich.cse.ohio-state.edu/benchmarks/ (osu-micro-benchmarks-7.x.tar.gz), unpack
# it outside the repository and point OSU_SRC at the unpacked directory (the one holding
# c/util and c/mpi). Default: /work/ext/osu/src.
#
# Builds osu_latency, osu_bw, osu_bibw, osu_mbw_mr, osu_allreduce, osu_bcast, osu_barrier,
# osu_alltoall and osu_allgather three times, with Ferrite's $PREFIX/bin/mpicc, Open MPI's
# mpicc.openmpi and MPICH's mpicc.mpich (straight from the sources with the util files, no
# configure; binaries under $OSU_BUILD, default /work/ext/osu/build; each run uses its own
# $PREFIX/lib through LD_LIBRARY_PATH, so one OSU_BUILD serves several prefixes), then runs them over
# shared memory at each process count: osu_latency, osu_bw and osu_bibw at -n 2 only (they
# take exactly two ranks), osu_mbw_mr at every even count, the collectives at every count.
# The three MPIs are interleaved (for each repetition, each benchmark and count, each MPI),
# OSU_REPS times; the tables give per size the median of each MPI and the ratio of Ferrite
# to the better of the two others (latency: lower is better, a ratio < 1 is Ferrite ahead;
# bandwidth and message rate: higher is better, a ratio > 1 is Ferrite ahead). Raw outputs
# and the tables are kept in bench/results/osu-<time>/.
#
# Launchers as in bench/run.sh: Open MPI with ob1 and the vader (shared-memory) BTL,
# --oversubscribe; Debian's MPICH (ch4:ucx) with UCX_TLS=self,sm; each launcher binds as it
# does by default unless OSU_BIND says otherwise. -n 16 on this 2-core machine is
# oversubscribed: ranks that spin (Open MPI, MPICH) fight over the cores there.
#
# Knobs (environment):
#   OSU_BENCHES  which benchmarks, default all nine, e.g. "latency bw" (the osu_ prefix optional)
#   OSU_NP       process counts, default "2 4 16"
#   OSU_REPS     repetitions per MPI, default 3
#   OSU_MPIS     default "ferrite openmpi mpich"
#   OSU_OPTS     extra OSU options at -n 2 and -n 4, default "-m 1:1048576 -i 2000 -x 200"
#                (osu_barrier gets only -i/-x)
#   OSU_OPTS_BIG options above 4 ranks, default "-m 1:4096 -i 200 -x 20"
#   OSU_TIMEOUT  seconds per run before it counts as failed, default 300
#   OSU_MPICH_ITERS  appended to MPICH's options above 2 ranks, default "-i 20 -x 2": its
#                busy-polling ranks take ~5-15 ms per collective call once they outnumber
#                the cores, so the usual counts would run into OSU_TIMEOUT
#   OSU_FERRITE_OLD  another Ferrite installation (a copy of an earlier build/): adds the
#                MPI "ferrite_old" to OSU_MPIS, run interleaved with the rest (before/after)
#   OSU_TABLES   a results directory of an earlier (or interrupted) run: only print its tables
#   OSU_BIND     core, none, ...: passed as --bind-to to all three launchers (default:
#                each launcher's own policy)
# Example, a quick p2p look: OSU_BENCHES="latency mbw_mr" OSU_NP=2 OSU_REPS=5 bench/osu.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PREFIX=${PREFIX:-$root/build}
OSU_SRC=${OSU_SRC:-/work/ext/osu/src}
OSU_BUILD=${OSU_BUILD:-/work/ext/osu/build}
OSU_BENCHES=${OSU_BENCHES:-latency bw bibw mbw_mr allreduce bcast barrier alltoall allgather}
OSU_NP=${OSU_NP:-2 4 16}
OSU_REPS=${OSU_REPS:-3}
OSU_MPIS=${OSU_MPIS:-ferrite openmpi mpich}
OSU_OPTS=${OSU_OPTS:--m 1:1048576 -i 2000 -x 200}
OSU_OPTS_BIG=${OSU_OPTS_BIG:--m 1:4096 -i 200 -x 20}
OSU_TIMEOUT=${OSU_TIMEOUT:-300}
OSU_MPICH_ITERS=${OSU_MPICH_ITERS:--i 20 -x 2}
if [ -n "${OSU_FERRITE_OLD:-}" ]; then OSU_MPIS="$OSU_MPIS ferrite_old"; fi

if [ ! -d "$OSU_SRC/c/util" ]; then
    echo "osu: no OSU sources at OSU_SRC=$OSU_SRC (want c/util and c/mpi there);" >&2
    echo "     get them from https://mvapich.cse.ohio-state.edu/benchmarks/" >&2
    exit 2
fi

mpi_cc() {
    case $1 in
    ferrite) echo "$PREFIX/bin/mpicc" ;;
    ferrite_old) echo "$OSU_FERRITE_OLD/bin/mpicc" ;;
    openmpi) echo mpicc.openmpi ;;
    mpich) echo mpicc.mpich ;;
    esac
}
OMPI_RUN="env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --allow-run-as-root --oversubscribe"
mpi_run() {
    local bind=
    [ -n "${OSU_BIND:-}" ] && bind="-bind-to $OSU_BIND"
    case $1 in
    # The binaries' RUNPATH names the prefix that built them; LD_LIBRARY_PATH, searched
    # first, makes each run use its own prefix's library even when OSU_BUILD is shared.
    ferrite) echo "env LD_LIBRARY_PATH=$PREFIX/lib $PREFIX/bin/mpirun -n $2 $bind" ;;
    ferrite_old) echo "env LD_LIBRARY_PATH=$OSU_FERRITE_OLD/lib $OSU_FERRITE_OLD/bin/mpirun -n $2 $bind" ;;
    openmpi) echo "$OMPI_RUN -n $2 ${bind:+-$bind} --mca pml ob1 --mca btl self,vader" ;;
    mpich) echo "env UCX_TLS=self,sm mpirun.mpich -n $2 $bind" ;;
    esac
}
label() {
    case $1 in ferrite) echo Ferrite ;; ferrite_old) echo "Ferrite (old)" ;; openmpi) echo "Open MPI" ;; mpich) echo MPICH ;; esac
}
# Source file of a benchmark, relative to c/mpi.
bench_src() {
    case $1 in
    latency | bw | bibw | mbw_mr) echo "pt2pt/standard/osu_$1.c" ;;
    *) echo "collective/blocking/osu_$1.c" ;;
    esac
}

benches=()
for b in $OSU_BENCHES; do benches+=("${b#osu_}"); done

# Build: each benchmark with the OSU util files (graph/papi parts compile to no-ops without
# their libraries).
util=()
for f in osu_util.c osu_util_mpi.c osu_util_graph.c osu_util_papi.c osu_util_validation.c; do
    util+=("$OSU_SRC/c/util/$f")
done
have=()
if [ -n "${OSU_TABLES:-}" ]; then OSU_MPIS=; fi
for m in $OSU_MPIS; do
    cc=$(mpi_cc "$m")
    if ! command -v "$cc" >/dev/null 2>&1 && [ ! -x "$cc" ]; then
        echo "osu: $(label "$m") not available ($cc missing), skipped"; continue
    fi
    mkdir -p "$OSU_BUILD/$m"
    ok=1
    for b in "${benches[@]}"; do
        exe=$OSU_BUILD/$m/osu_$b src=$OSU_SRC/c/mpi/$(bench_src "$b")
        # Rebuild when the source or (for Ferrite) the library is newer.
        if [ -x "$exe" ] && [ "$exe" -nt "$src" ] \
                && { [ "$m" != ferrite ] || [ "$exe" -nt "$PREFIX/lib/libmpi.so" ]; } \
                && { [ "$m" != ferrite_old ] || [ "$exe" -nt "$OSU_FERRITE_OLD/lib/libmpi.so" ]; }; then
            continue
        fi
        if ! $cc -O2 -w -I"$OSU_SRC/c/util" -o "$exe" "$src" "${util[@]}" -lm >"$OSU_BUILD/$m/build.$b.log" 2>&1; then
            echo "osu: building osu_$b with $cc failed:"; tail -5 "$OSU_BUILD/$m/build.$b.log" | sed 's/^/    /'
            ok=0
        fi
    done
    [ "$ok" = 1 ] && have+=("$m")
done
if [ -n "${OSU_TABLES:-}" ]; then
    out=$OSU_TABLES OSU_REPS=0 load_start="?"
    have=($(ls "$out" | sed -n 's/^[a-z_]*\.[0-9]*\.\([a-z_]*\)\.[0-9]*$/\1/p' | sort -u))
    for m in ferrite openmpi mpich ferrite_old; do # table column order
        case " ${have[*]} " in *" $m "*) ordered+=("$m") ;; esac
    done
    have=("${ordered[@]}")
else
    [ ${#have[@]} -gt 0 ] || { echo "osu: nothing to run" >&2; exit 1; }
    out=$here/results/osu-$(date -u +%Y%m%d-%H%M%S)
    mkdir -p "$out"
    load_start=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "osu: $(date -u +%H:%M) UTC, load $load_start; results in $out"
fi

# Which counts a benchmark runs at.
runs_at() {
    case $1 in
    latency | bw | bibw) [ "$2" = 2 ] ;;
    mbw_mr) [ $(($2 % 2)) = 0 ] ;;
    *) true ;;
    esac
}
opts_for() {
    local o=$OSU_OPTS
    [ "$2" -gt 4 ] && o=$OSU_OPTS_BIG
    # (OSU takes the last of repeated options.)
    [ "$3" = mpich ] && [ "$2" -gt 2 ] && o="$o $OSU_MPICH_ITERS"
    # osu_barrier has no message sizes.
    [ "$1" = barrier ] && o=$(echo "$o" | sed 's/-m [^ ]*//')
    echo "$o"
}

ordered=()
for rep in $(seq 1 "$OSU_REPS"); do
    for b in "${benches[@]}"; do
        for np in $OSU_NP; do
            runs_at "$b" "$np" || continue
            for m in "${have[@]}"; do
                f=$out/$b.$np.$m.$rep
                timeout -k 5 "$OSU_TIMEOUT" $(mpi_run "$m" "$np") "$OSU_BUILD/$m/osu_$b" $(opts_for "$b" "$np" "$m") >"$f" 2>"$f.err" </dev/null
                rc=$?
                if [ $rc -ne 0 ]; then
                    echo "osu: $(label "$m") osu_$b -n $np (rep $rep) failed, exit $rc: $(tail -n 1 "$f.err" | cut -c1-160)"
                    mv "$f" "$f.failed"
                fi
            done
        done
    done
    echo "osu: repetition $rep done ($(date -u +%H:%M) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))"
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# Tables: per benchmark and count, the median per size of each MPI's runs. osu_mbw_mr's
# third column is the message rate (messages/s), the rest report their second column
# (osu_barrier its first: it has no size).
python3 - "$out" "$load_start" "$load_end" "${have[*]}" "${benches[*]}" "$OSU_NP" <<'PY' | tee "$out/tables.md"
import glob, os, statistics, sys
out, load0, load1 = sys.argv[1:4]
mpis, benches, nps = sys.argv[4].split(), sys.argv[5].split(), sys.argv[6].split()
label = {"ferrite": "Ferrite", "ferrite_old": "Ferrite (old)", "openmpi": "Open MPI", "mpich": "MPICH"}
higher = {"bw", "bibw", "mbw_mr"}
unit = {"bw": "MB/s", "bibw": "MB/s", "mbw_mr": "messages/s"}

def parse(path, bench):
    rows = {}
    for line in open(path):
        f = line.split()
        if not f or line.startswith("#"):
            continue
        try:
            if bench == "barrier":
                rows["-"] = float(f[0])
            elif bench == "mbw_mr":
                rows[int(f[0])] = float(f[2])
            else:
                rows[int(f[0])] = float(f[1])
        except (ValueError, IndexError):
            continue
    return rows

print(f"OSU micro-benchmarks, load {load0} at start, {load1} at end; medians of the runs\n")
for b in benches:
    for np in nps:
        data = {}
        for m in mpis:
            runs = [parse(p, b) for p in sorted(glob.glob(f"{out}/{b}.{np}.{m}.*")) if p[-1].isdigit()]
            if runs:
                data[m] = runs
        if not data:
            continue
        sizes = sorted({s for runs in data.values() for r in runs for s in r}, key=lambda s: (s == "-", s if s != "-" else 0))
        u = unit.get(b, "usec")
        better = "higher" if b in higher else "lower"
        others = [m for m in mpis if m in ("openmpi", "mpich")]
        print(f"### osu_{b}, -n {np} ({u}, {better} is better)\n")
        hdr = ["size (B)"] + [f"{label[m]} (n={len(data.get(m, []))})" for m in mpis]
        if "ferrite" in mpis and others:
            hdr.append("Ferrite / best other")
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---:|" * len(hdr))
        for s in sizes:
            med = {}
            for m in mpis:
                vals = [r[s] for r in data.get(m, []) if s in r]
                if vals:
                    med[m] = statistics.median(vals)
            fmt = lambda v: f"{v:.0f}" if v >= 10000 else f"{v:.2f}"
            cells = [str(s)] + [fmt(med[m]) if m in med else "-" for m in mpis]
            if "ferrite" in mpis and others:
                o = [med[m] for m in others if m in med]
                if "ferrite" in med and o:
                    best = max(o) if b in higher else min(o)
                    cells.append(f"{med['ferrite'] / best:.2f}" if best else "-")
                else:
                    cells.append("-")
            print("| " + " | ".join(cells) + " |")
        print()
PY
