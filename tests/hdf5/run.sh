#!/usr/bin/env bash
# Parallel HDF5 on Ferrite's MPI-IO: tests/hdf5/phdf5.c built with Debian's h5pcc.mpich
# (libhdf5-mpich-dev: HDF5 built against MPICH) runs unchanged under our mpirun with
# LD_LIBRARY_PATH=$PREFIX/lib, where libmpich.so.12 is Ferrite, at -n 1, 2 and 4: a
# collective hyperslab write, a strided collective write, and a collective read back, all
# checked. Ends with `hdf5: N passed, N failed`.
#
# Validate against MPICH itself: MPIRUN=mpirun.mpich MPI_LIBDIR= tests/hdf5/run.sh
# Knobs: H5PCC (default h5pcc.mpich), MPIRUN, MPI_LIBDIR (default $PREFIX/lib; empty: leave
# LD_LIBRARY_PATH alone), TEST_TIMEOUT, TEST_NP (default "1 2 4").
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
H5PCC=${H5PCC:-h5pcc.mpich}
MPIRUN=${MPIRUN:-$PREFIX/bin/mpirun}
MPI_LIBDIR=${MPI_LIBDIR-$PREFIX/lib}
TEST_TIMEOUT=${TEST_TIMEOUT:-60}
TEST_NP=${TEST_NP:-1 2 4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0; fail=0
echo "hdf5: built with $H5PCC, run with $MPIRUN, libraries from ${MPI_LIBDIR:-the system}"
if ! command -v "$H5PCC" >/dev/null; then
    echo "FAIL hdf5 ($H5PCC not found: apt-get install libhdf5-mpich-dev, or scripts/install-deps.sh)"
    echo "hdf5: 0 passed, 1 failed"; exit 1
fi
if ! "$H5PCC" -o "$work/phdf5" "$here/phdf5.c" >"$work/build.log" 2>&1; then
    echo "FAIL hdf5 (build)"; sed 's/^/    | /' "$work/build.log" | tail -n 12
    echo "hdf5: 0 passed, 1 failed"; exit 1
fi
libenv=()
if [ -n "$MPI_LIBDIR" ]; then libenv=(env LD_LIBRARY_PATH="$MPI_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"); fi
for np in $TEST_NP; do
    out="$work/out.$np"
    "${libenv[@]}" timeout "$TEST_TIMEOUT" "$MPIRUN" -n "$np" "$work/phdf5" "$work/grid.$np.h5" >"$out" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q "phdf5: ok" "$out"; then
        echo "PASS phdf5 -n $np"; pass=$((pass + 1))
    else
        echo "FAIL phdf5 -n $np (exit $rc)"; tail -n 8 "$out" | sed 's/^/    | /'; fail=$((fail + 1))
    fi
done
echo "hdf5: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
