#!/usr/bin/env bash
# IOR (MPIIO backend) on Ferrite, MPICH (ROMIO) and Open MPI (OMPIO) in the same run:
# collective strided writes and reads (every rank's blocks interleaved with the others',
# one strided filetype per call), and collective contiguous ones, in a temp directory.
# Prints one markdown table of bandwidth (MiB/s, higher is better) per pattern, and saves
# it under bench/results/.
#
# IOR is not part of the repository; get it from https://github.com/hpc/ior (a release
# tarball from https://github.com/hpc/ior/releases, or a clone) and build it outside the
# repository once per MPI:
#
#   cd ior && ./bootstrap
#   mkdir ../ior-mpich && cd ../ior-mpich && ../ior/configure CC=mpicc.mpich && make -j
#   mkdir ../ior-openmpi && cd ../ior-openmpi && ../ior/configure CC=mpicc.openmpi && make -j
#
# The binary built against MPICH runs both on MPICH and, unchanged, on Ferrite (through
# LD_LIBRARY_PATH=$PREFIX/lib, where libmpich.so.12 is Ferrite).
#
# Usage: IOR_MPICH=/path/to/ior-mpich/src/ior [IOR_OPENMPI=/path/to/ior-openmpi/src/ior]
#        bench/ior.sh
# Knobs: PREFIX (default ./build), IOR_NP (default 4), IOR_DIR (where the files go,
# default a fresh directory under /tmp; use a shared directory to test across hosts),
# IOR_BLOCK / IOR_SEGMENTS (default 64k and 256: each rank writes 256 blocks of 64 KiB,
# 64 MiB in all at -n 4), IOR_REPS (default 3).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PREFIX=${PREFIX:-$root/build}
IOR_MPICH=${IOR_MPICH:-}
IOR_OPENMPI=${IOR_OPENMPI:-}
NP=${IOR_NP:-4}
BLOCK=${IOR_BLOCK:-64k}
SEGS=${IOR_SEGMENTS:-256}
REPS=${IOR_REPS:-3}
if [ -z "$IOR_MPICH" ] || [ ! -x "$IOR_MPICH" ]; then
    echo "bench/ior.sh: set IOR_MPICH to an ior binary built with mpicc.mpich (see the top of this script)" >&2
    exit 2
fi
dir=${IOR_DIR:-$(mktemp -d /tmp/ferrite-ior-XXXXXX)}
mkdir -p "$dir" "$here/results"
trap 'rm -f "$dir"/ior.*' EXIT

# run label mpirun-and-binary... : prints "write read" max MiB/s, or "n/a n/a".
run() {
    local log
    log=$(mktemp)
    if timeout 600 "$@" >"$log" 2>&1; then
        awk '/^write / && !w { w = $2 } /^read / && !r { r = $2 }
             /^Summary of all tests/ { s = 1 }
             s && /^write / { w = $2 } s && /^read / { r = $2 }
             END { printf "%s %s\n", (w ? w : "n/a"), (r ? r : "n/a") }' "$log"
    else
        echo "n/a n/a"
        tail -n 5 "$log" | sed 's/^/    | /' >&2
    fi
    rm -f "$log"
}

patterns=(
    "strided|-c -b $BLOCK -t $BLOCK -s $SEGS --mpiio.useStridedDatatype --mpiio.useFileView"
    "contiguous|-c -b 16m -t 4m -s 1"
)
out=$here/results/ior-np$NP.md
: >"$out"
for p in "${patterns[@]}"; do
    name=${p%%|*}
    args=${p#*|}
    # shellcheck disable=SC2086
    common=(-a MPIIO -w -r -C -e -i "$REPS" $args)
    f=$(run env LD_LIBRARY_PATH="$PREFIX/lib" "$PREFIX/bin/mpirun" -n "$NP" "$IOR_MPICH" "${common[@]}" -o "$dir/ior.ferrite")
    m=$(run mpirun.mpich -n "$NP" "$IOR_MPICH" "${common[@]}" -o "$dir/ior.mpich")
    o="n/a n/a"
    if [ -n "$IOR_OPENMPI" ] && [ -x "$IOR_OPENMPI" ]; then
        o=$(run mpirun.openmpi --allow-run-as-root --oversubscribe -n "$NP" "$IOR_OPENMPI" "${common[@]}" -o "$dir/ior.openmpi")
    fi
    {
        echo "### IOR MPIIO $name, -n $NP ($args), MiB/s"
        echo
        echo "| op | Ferrite | MPICH (ROMIO) | Open MPI (OMPIO) |"
        echo "|---|---|---|---|"
        echo "| write | ${f% *} | ${m% *} | ${o% *} |"
        echo "| read | ${f#* } | ${m#* } | ${o#* } |"
        echo
    } | tee -a "$out"
done
echo "saved: $out"
