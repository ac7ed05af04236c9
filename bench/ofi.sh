#!/usr/bin/env bash
# libfabric paths on one host, same run: Ferrite's ofi transport (FERRITE_TRANSPORTS=ofi,self,
# libfabric's tcp provider), Ferrite's own tcp transport, Open MPI with libfabric (pml cm,
# mtl ofi, provider "tcp;ofi_rxm": the mtl needs FI_EP_RDM) and Open MPI's own tcp btl
# (pml ob1). Open MPI's ofi btl is not used: it refuses the tcp provider for point-to-point
# here ("unreachable proc"). Runs bench/pingpong.c (one-way latency, usec) and bench/bw.c
# (streaming bandwidth, MB/s) at -n 2 for each size in OFI_BENCH_SIZES, OFI_BENCH_ROUNDS
# rounds interleaved over the configurations (so load changes hit them all alike), and prints
# a markdown table of the medians with the load before and after. A configuration that fails
# (library or provider missing) shows "n/a". Before timing, Ferrite's ofi configuration must
# show ofi traffic in FERRITE_REPORT (else the script stops: it would be timing something else).
#
#   PREFIX=$PWD/build bench/ofi.sh            # Ferrite from $PREFIX (default: build/)
#   OFI_BENCH_SIZES="8 65536" OFI_BENCH_ROUNDS=5 bench/ofi.sh
#   OFI_BENCH_BASE=/work/base-build bench/ofi.sh   # also another Ferrite's ofi (before/after)
#   OFI_BENCH_CONFIGS="base.ofi ferrite.ofi" ...   # only these configurations
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PREFIX=${PREFIX:-$root/build}
SIZES=${OFI_BENCH_SIZES:-8 1024 16384 65536 262144 1048576}
ROUNDS=${OFI_BENCH_ROUNDS:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/ofi-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

OMPI="env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --allow-run-as-root --oversubscribe -n 2"
BASE=${OFI_BENCH_BASE:-}
CONFIGS="ferrite.ofi ferrite.tcp openmpi.ofi openmpi.tcp"
[ -n "$BASE" ] && CONFIGS="base.ofi $CONFIGS"
CONFIGS=${OFI_BENCH_CONFIGS:-$CONFIGS}
launch() { # config -> launcher prefix
    case $1 in
    ferrite.ofi) echo "env FERRITE_TRANSPORTS=ofi,self FERRITE_OFI_PROVIDER=tcp $PREFIX/bin/mpirun -n 2" ;;
    base.ofi) echo "env FERRITE_TRANSPORTS=ofi,self FERRITE_OFI_PROVIDER=tcp LD_LIBRARY_PATH=$BASE/lib $BASE/bin/mpirun -n 2" ;;
    ferrite.tcp) echo "env FERRITE_TRANSPORTS=tcp,self $PREFIX/bin/mpirun -n 2" ;;
    openmpi.ofi) echo "$OMPI --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp;ofi_rxm --mca btl self" ;;
    openmpi.tcp) echo "$OMPI --mca pml ob1 --mca btl tcp,self" ;;
    esac
}
label() {
    case $1 in
    ferrite.ofi) echo "Ferrite ofi (tcp provider)" ;; ferrite.tcp) echo "Ferrite tcp" ;;
    base.ofi) echo "base Ferrite ofi" ;;
    openmpi.ofi) echo "Open MPI cm/mtl ofi (tcp;ofi_rxm)" ;; openmpi.tcp) echo "Open MPI ob1/btl tcp" ;;
    esac
}

# Build each program with each MPI; a missing MPI drops its configurations.
have=""
for c in $CONFIGS; do
    mpi=${c%%.*}
    cc=$PREFIX/bin/mpicc
    [ "$mpi" = openmpi ] && cc=mpicc.openmpi
    [ "$mpi" = base ] && cc=$BASE/bin/mpicc
    if ! command -v "$cc" >/dev/null; then echo "# $(label "$c"): no $cc, skipped"; continue; fi
    if [ ! -x "$work/pingpong.$mpi" ]; then
        { "$cc" -O2 -o "$work/pingpong.$mpi" "$here/pingpong.c" &&
            "$cc" -O2 -o "$work/bw.$mpi" "$here/bw.c"; } >"$work/build.log" 2>&1 ||
            { cat "$work/build.log" >&2; echo "ofi.sh: building with $cc failed" >&2; exit 1; }
    fi
    if [[ "$c" == *.ofi && "$mpi" != openmpi ]] && ! ldconfig -p | grep -q 'libfabric\.so\.1 '; then
        echo "# $(label "$c"): libfabric.so.1 not installed, skipped"; continue
    fi
    have="$have $c"
done

# The ofi configuration must really use ofi.
if [[ " $have " == *" ferrite.ofi "* ]]; then
    rep=$(FERRITE_REPORT=1 $(launch ferrite.ofi) "$work/pingpong.ferrite" 65536 50 2>&1)
    if ! grep -q "ofi: sent [1-9]" <<<"$rep"; then
        echo "ofi.sh: Ferrite's ofi configuration sent nothing over ofi:" >&2
        echo "$rep" | tail -5 >&2
        exit 1
    fi
fi

reps() { local n=$1 r=$((2000000 / ($1 + 1000))); [ $r -gt 1000 ] && r=1000; [ $r -lt 20 ] && r=20; echo $r; }
iters() { local r=$((33554432 / (64 * $1))); [ $r -gt 200 ] && r=200; [ $r -lt 5 ] && r=5; echo $r; }

echo "# load before: $(uptime)"
for round in $(seq "$ROUNDS"); do
    for n in $SIZES; do
        for c in $have; do
            mpi=${c%%.*}
            l=$(timeout 300 $(launch "$c") "$work/pingpong.$mpi" "$n" "$(reps "$n")" 2>/dev/null | awk -v n="$n" '$1 == n { print $2 }')
            echo "${l:-n/a}" >>"$work/pp.$c.$n"
            b=$(timeout 300 $(launch "$c") "$work/bw.$mpi" "$n" "$(iters "$n")" 2>/dev/null | awk -v n="$n" '$1 == n { print $2 }')
            echo "${b:-n/a}" >>"$work/bw.$c.$n"
        done
    done
done
echo "# load after: $(uptime)"

median() { grep -v n/a "$1" | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else print v[int((NR + 1) / 2)] }'; }
echo
echo "rounds: $ROUNDS (median, the lower of two middle values); latency: one-way usec (lower is better); bandwidth: MB/s (higher is better)"
echo
hdr="| size (B) |"; sep="|---|"
for c in $have; do hdr="$hdr lat $(label "$c") |"; sep="$sep---|"; done
for c in $have; do hdr="$hdr bw $(label "$c") |"; sep="$sep---|"; done
echo "$hdr"; echo "$sep"
for n in $SIZES; do
    row="| $n |"
    for c in $have; do row="$row $(median "$work/pp.$c.$n") |"; done
    for c in $have; do row="$row $(median "$work/bw.$c.$n") |"; done
    echo "$row"
done
echo
for c in $have; do echo "$(label "$c"): $(launch "$c") ./pingpong SIZE REPS | ./bw SIZE ITERS"; done
