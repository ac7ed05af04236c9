#!/usr/bin/env bash
# MPICH's own language libraries on top of Ferrite: Fortran programs built with Debian's
# mpif90.mpich (mpif.h and `use mpi`) and a C++ program using MPICH's MPI:: bindings built
# with mpicxx.mpich run unchanged, with MPICH's libmpichfort.so.12 / libmpichcxx.so.12
# loaded on top of Ferrite's libmpi.so.12 (as libmpich.so.12) through LD_LIBRARY_PATH. Each
# program runs at the counts its first line declares (`! np: 1 2 4` / `// np: ...`) and
# passes when the job exits 0 and rank 0 printed `done: <name>`; the runner checks that the
# libmpich.so.12 the program loads is ours and the language library is MPICH's.
# Ends with `mpich-langs: N passed, N failed`.
#
# Against MPICH itself: MPIRUN=mpirun.mpich MPI_LIBDIR= tests/mpich-langs/run.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
MPIRUN=${MPIRUN:-$PREFIX/bin/mpirun}
MPI_LIBDIR=${MPI_LIBDIR-$PREFIX/lib}
TEST_TIMEOUT=${TEST_TIMEOUT:-60}
pass=0; fail=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/log

ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1 ($2)"; [ -s "$log" ] && tail -n 8 "$log" | sed 's/^/    | /'; fail=$((fail + 1)); }

# Only Ferrite's libmpi, under both of MPICH's names: the language libraries come from the
# system (a libmpifort of Ferrite's own in $PREFIX/lib must not stand in for MPICH's).
libenv=()
if [ -n "$MPI_LIBDIR" ]; then
    mkdir -p "$work/lib"
    ln -s "$(readlink -f "$MPI_LIBDIR/libmpi.so.12")" "$work/lib/libmpi.so.12"
    ln -s "$(readlink -f "$MPI_LIBDIR/libmpi.so.12")" "$work/lib/libmpich.so.12"
    libenv=(env LD_LIBRARY_PATH="$work/lib")
fi
echo "mpich-langs: run with $MPIRUN, libmpi from ${MPI_LIBDIR:-the system}"

for src in "$here"/*.f90 "$here"/*.cxx; do
    name=$(basename "${src%.*}")
    case "$src" in
        *.f90) cc=mpif90.mpich; lang=libmpichfort.so.12 ;;
        *.cxx) cc=mpicxx.mpich; lang=libmpichcxx.so.12 ;;
    esac
    if ! command -v "$cc" >/dev/null; then
        : >"$log"; bad "$name" "$cc not found (apt-get install libmpich-dev gfortran g++)"; continue
    fi
    exe=$work/$name
    # -J: module files go to the scratch directory, not the caller's.
    fflags=(); [ "${src##*.}" = f90 ] && fflags=(-J "$work")
    if ! "$cc" -w -O1 "${fflags[@]}" -o "$exe" "$src" >"$log" 2>&1; then bad "$name" "build failed"; continue; fi
    if [ ${#libenv[@]} -ne 0 ]; then
        resolved=$("${libenv[@]}" ldd "$exe")
        if ! echo "$resolved" | grep -q "libmpich.so.12 => $work/lib/" ||
           ! echo "$resolved" | grep -q "$lang => /"; then
            echo "$resolved" >"$log"; bad "$name" "does not load Ferrite's libmpich.so.12 and MPICH's $lang"; continue
        fi
    fi
    nps=$(head -n 1 "$src" | sed -n 's/^.*np:\(.*\)$/\1/p')
    for np in ${nps:-1 2}; do
        if timeout "$TEST_TIMEOUT" "${libenv[@]}" "$MPIRUN" -n "$np" "$exe" >"$log" 2>&1 &&
           grep -q "^done: $name\$" "$log"; then
            ok "$name -n $np"
        else
            bad "$name -n $np" "exit or output"
        fi
    done
done
echo "mpich-langs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
