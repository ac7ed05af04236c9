#!/usr/bin/env bash
# NAS Parallel Benchmarks 3.4 (MPI) built from their unchanged sources with each MPI's own
# compiler wrappers, run at one class and process count, verified, Mop/s side by side.
#
#   bench/npb.sh /path/to/NPB3.4-MPI
#
# The sources are not part of Ferrite: download NPB 3.4.x from NASA
# (https://www.nas.nasa.gov/software/npb.html, NPB3.4.2.tar.gz or newer) and give the
# NPB3.4-MPI directory. Each MPI builds in its own copy under a temporary directory.
#
# Knobs: NPB_CLASS (default A), NPB_NP (default 4), NPB_BENCHMARKS (default
# "cg mg ft ep lu sp bt is"; dt needs an input graph and is left out), NPB_MPIS (default
# "ferrite openmpi mpich", whichever are installed; as root, installs Debian's Open MPI and
# MPICH when missing), PREFIX (Ferrite's installation, default ./build).
# Prints one line per benchmark: Mop/s of each MPI, or FAIL (build, run or verification).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-$root/build}
npb=${1:-}
if [ -z "$npb" ] || [ ! -f "$npb/sys/setparams.c" ] || [ ! -d "$npb/CG" ]; then
    echo "usage: bench/npb.sh /path/to/NPB3.4-MPI (from https://www.nas.nasa.gov/software/npb.html)" >&2
    exit 2
fi
npb=$(cd "$npb" && pwd)
CLASS=${NPB_CLASS:-A}
NP=${NPB_NP:-4}
BENCHMARKS=${NPB_BENCHMARKS:-cg mg ft ep lu sp bt is}
MPIS=${NPB_MPIS:-ferrite openmpi mpich}
TIMEOUT=${NPB_TIMEOUT:-900}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

need=()
case " $MPIS " in *" openmpi "*) command -v mpifort.openmpi >/dev/null || need+=(openmpi-bin libopenmpi-dev) ;; esac
case " $MPIS " in *" mpich "*) command -v mpif90.mpich >/dev/null || need+=(mpich libmpich-dev) ;; esac
if [ ${#need[@]} -ne 0 ] && [ "$(id -u)" -eq 0 ]; then
    echo "npb: installing ${need[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") \
        >"$work/apt.log" 2>&1 || echo "npb: install failed; going on without"
fi

OMPI_RUN="env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --allow-run-as-root --oversubscribe"
wrappers() { # mpi -> "FC CC RUN"
    case $1 in
        ferrite) echo "$PREFIX/bin/mpifort $PREFIX/bin/mpicc $PREFIX/bin/mpirun" ;;
        openmpi) echo "mpifort.openmpi mpicc.openmpi $OMPI_RUN" ;;
        mpich) echo "mpif90.mpich mpicc.mpich mpirun.mpich" ;;
    esac
}

declare -A result
mpis=()
for mpi in $MPIS; do
    read -r fc cc run <<<"$(wrappers "$mpi")"
    if ! command -v "$fc" >/dev/null || ! command -v "$cc" >/dev/null; then
        echo "npb: $mpi: $fc or $cc not found, skipped"; continue
    fi
    mpis+=("$mpi")
    tree=$work/$mpi
    cp -r "$npb" "$tree"
    mkdir -p "$tree/bin" # the tarball's bin/ is empty, and lost in some copies
    # gfortran 10+ needs -fallow-argument-mismatch for mpif.h codes; MPICH's and Ferrite's
    # wrappers add it, Open MPI's (whose mpif.h routines have no interfaces either) does not.
    # Debian's mpifort.openmpi links -lmpi without its library directory, trusting the
    # libmpi.so alternative, which may be MPICH's: give the directory.
    libdirs=
    if [ "$mpi" = openmpi ]; then
        for d in $(mpicc.openmpi -showme:libdirs 2>/dev/null); do libdirs="$libdirs -L$d"; done
    fi
    cat >"$tree/config/make.def" <<EOF
MPIFC = $fc
FLINK = \$(MPIFC)
FFLAGS = -O3 -fallow-argument-mismatch
FLINKFLAGS = \$(FFLAGS)$libdirs
MPICC = $cc
CLINK = \$(MPICC)
CFLAGS = -O3
CLINKFLAGS = \$(CFLAGS)
CC = gcc
BINDIR = ../bin
RAND = randi8
EOF
    for b in $BENCHMARKS; do
        B=$(echo "$b" | tr a-z A-Z)
        log=$work/$mpi.$b.log
        if ! make -C "$tree" "$b" CLASS="$CLASS" >"$log" 2>&1; then
            echo "npb: $mpi $B: build failed"; tail -n 5 "$log" | sed 's/^/    | /'
            result[$mpi.$b]="build-FAIL"; continue
        fi
        exe=$tree/bin/$b.$CLASS.x
        # shellcheck disable=SC2086
        if (cd "$tree/bin" && timeout "$TIMEOUT" $run -n "$NP" "$exe") >"$log" 2>&1 &&
           grep -q "Verification *= *SUCCESSFUL" "$log"; then
            result[$mpi.$b]=$(awk '/Mop\/s total/ { print $NF }' "$log")
        else
            echo "npb: $mpi $B: run failed or not verified"; tail -n 5 "$log" | sed 's/^/    | /'
            result[$mpi.$b]="FAIL"
        fi
        echo "npb: $mpi $B class $CLASS -n $NP: ${result[$mpi.$b]}"
    done
done

echo
echo "NPB 3.4 class $CLASS, $NP processes, Mop/s total (higher is better)"
printf '%-6s' bench
for m in "${mpis[@]}"; do printf ' %12s' "$m"; done
echo
for b in $BENCHMARKS; do
    printf '%-6s' "$(echo "$b" | tr a-z A-Z)"
    for m in "${mpis[@]}"; do printf ' %12s' "${result[$m.$b]:-n/a}"; done
    echo
done
