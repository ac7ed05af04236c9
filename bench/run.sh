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
# BENCH_MPIS limits the set, e.g. BENCH_MPIS="openmpi mpich".
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PREFIX=${PREFIX:-$root/build}
BENCH_MPIS=${BENCH_MPIS:-ferrite openmpi mpich}
BENCH_COLL_NP=${BENCH_COLL_NP:-2 4}
P2P_BENCHES="pingpong bw"
COLL_BENCHES="allreduce bcast alltoall barrier"
BENCHES="$P2P_BENCHES $COLL_BENCHES"
if [ -n "${BENCH_ONLY:-}" ]; then BENCHES=$BENCH_ONLY; fi
# Jobs: benchmark:process-count.
jobs=()
for b in $BENCHES; do
    case " $COLL_BENCHES " in
    *" $b "*) for np in $BENCH_COLL_NP; do jobs+=("$b:$np"); done ;;
    *) jobs+=("$b:2") ;;
    esac
done
bin=$here/bin
out=$here/results
mkdir -p "$bin" "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

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

# Per MPI: compiler, launcher, launcher arguments (shared-memory transport); $2: ranks.
mpi_cc() {
    case $1 in
    ferrite) echo "$PREFIX/bin/mpicc" ;;
    openmpi) echo mpicc.openmpi ;;
    mpich) echo mpicc.mpich ;;
    esac
}
mpi_run() {
    case $1 in
    ferrite) echo "$PREFIX/bin/mpirun -n $2" ;;
    # ob1 with the vader shared-memory BTL (no UCX, no TCP).
    openmpi) echo "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --allow-run-as-root --oversubscribe -n $2 --mca pml ob1 --mca btl self,vader" ;;
    # Debian's MPICH is ch4:ucx: restrict UCX to its shared-memory transports.
    mpich) echo "env UCX_TLS=self,sm mpirun.mpich -n $2" ;;
    esac
}
label() {
    case $1 in ferrite) echo Ferrite ;; openmpi) echo "Open MPI" ;; mpich) echo MPICH ;; esac
}

have=()
for m in $BENCH_MPIS; do
    cc=$(mpi_cc "$m")
    if ! command -v "$cc" >/dev/null 2>&1 && [ ! -x "$cc" ]; then
        echo "bench: $(label "$m") not available ($cc missing), skipped"; continue
    fi
    okb=1
    for b in $BENCHES; do
        if ! $cc -O2 -w -o "$bin/$b.$m" "$here/$b.c" >"$work/build.$m.$b" 2>&1; then
            echo "bench: building $b with $cc failed:"; sed 's/^/    /' "$work/build.$m.$b" | tail -5; okb=0
        fi
    done
    [ "$okb" = 1 ] && have+=("$m")
done

for job in "${jobs[@]}"; do
    b=${job%%:*} np=${job##*:}
    for m in "${have[@]}"; do
        echo "bench: $b -n $np with $(label "$m")" >&2
        if ! timeout -k 5 300 $(mpi_run "$m" "$np") "$bin/$b.$m" >"$work/$job.$m.raw" 2>"$work/$job.$m.err"; then
            echo "bench: $b -n $np with $(label "$m") failed:" >&2; tail -5 "$work/$job.$m.err" >&2
        fi
        grep -v '^#' "$work/$job.$m.raw" | awk 'NF == 2' >"$work/$job.$m"
    done
done

stamp=$(date -u +%Y%m%d-%H%M%S)
report=$out/bench-$stamp.md
{
    echo "# Benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), shared memory, $(nproc) cores"
    for job in "${jobs[@]}"; do
        b=${job%%:*} np=${job##*:}
        case $b in
        pingpong) echo; echo "## pingpong: one-way latency, -n 2, usec (lower is better)" ;;
        bw) echo; echo "## bw: streaming bandwidth, window 64, -n 2, MB/s (higher is better)" ;;
        barrier) echo; echo "## barrier: latency, -n $np, usec (lower is better)" ;;
        *) echo; echo "## $b: latency, -n $np, bytes per rank, usec (lower is better)" ;;
        esac
        echo
        echo "| size (B) | Ferrite | Open MPI | MPICH | Ferrite/Open MPI |"
        echo "|---:|---:|---:|---:|---:|"
        for m in ferrite openmpi mpich; do [ -f "$work/$job.$m" ] || : >"$work/$job.$m"; done
        awk -v F="$work/$job.ferrite" -v O="$work/$job.openmpi" -v M="$work/$job.mpich" '
            function load(file, arr,   line, f) {
                while ((getline line < file) > 0) { split(line, f, " "); arr[f[1]] = f[2]; sizes[f[1]] = 1 }
            }
            BEGIN {
                load(F, fe); load(O, om); load(M, mp)
                n = 0; for (s in sizes) list[++n] = s + 0
                for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (list[j] < list[i]) { t = list[i]; list[i] = list[j]; list[j] = t }
                for (i = 1; i <= n; i++) {
                    s = list[i]
                    f = (s in fe) ? fe[s] : "-"; o = (s in om) ? om[s] : "-"; m = (s in mp) ? mp[s] : "-"
                    r = (f != "-" && o != "-" && o + 0 > 0) ? sprintf("%.2f", f / o) : "-"
                    printf "| %d | %s | %s | %s | %s |\n", s, f, o, m, r
                }
            }'
    done
} >"$report"
cat "$report"
echo
echo "bench: saved $report"
