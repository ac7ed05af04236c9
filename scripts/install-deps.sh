#!/bin/sh
# Installs the Debian packages the test suite needs: Debian's MPICH (its mpi.h and
# libmpich.so.12 are the oracle for our ABI, and its mpicc builds the "unchanged binary"
# test), gfortran (builds Ferrite's Fortran bindings and tests/fortran; MPICH's mpif90 builds
# tests/mpich-langs), the tools the test scripts use (bc, pgrep, nm, g++, ip for
# tests/hosts; gdb, with which tests/c/run.sh prints every rank's stack when a program
# times out; cmake, meson, ninja and pkg-config for tests/buildsys; Slurm, munge and
# libpmix-dev, whose daemons tests/slurm starts and stops itself), libhdf5-mpich-dev
# (parallel HDF5 built against MPICH, for tests/hdf5), libcoarrays-mpich-dev (OpenCoarrays'
# test programs built against MPICH, for tests/coarrays), and libfabric1 (the ofi transport's
# library, loaded at run time; tests/run.sh runs the C suite over its tcp provider). Open MPI is only needed for
# benchmarks (bench/run.sh installs it itself).
set -e
need=""
for pkg in mpich libmpich-dev gfortran bc procps binutils g++ iproute2 gdb \
    cmake meson ninja-build pkg-config slurm-wlm munge libpmix-dev libhdf5-mpich-dev libcoarrays-mpich-dev libfabric1; do
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
