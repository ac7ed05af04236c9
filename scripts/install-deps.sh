#!/bin/sh
# Installs the Debian packages the test suite needs: Debian's MPICH (its mpi.h and
# libmpich.so.12 are the oracle for our ABI, and its mpicc builds the "unchanged binary"
# test), gfortran (MPICH's mpif90 builds the Fortran programs of tests/mpich-langs), and the
# tools the test scripts use (bc, pgrep, nm, g++, ip for tests/hosts), and libhdf5-mpich-dev
# (parallel HDF5 built against MPICH, for tests/hdf5; ~12 s to install). Open MPI is only needed
# for benchmarks (bench/run.sh installs it itself).
set -e
need=""
for pkg in mpich libmpich-dev gfortran bc procps binutils g++ iproute2 libhdf5-mpich-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need="$need $pkg"
done
[ -z "$need" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "install-deps: need Debian packages:$need (not root, no sudo); tests that need them will fail" >&2
    exit 0
fi
echo "install-deps: installing$need"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
