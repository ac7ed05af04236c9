#!/bin/sh
# Builds Ferrite's Fortran library and modules: fortran/build.sh LIBMPI OUTDIR
#   LIBMPI  Ferrite's C library to link against (libmpi.so.12, or cargo's libferrite.so:
#           either records the soname libmpi.so.12)
#   OUTDIR  gets libmpifort.so.12, mpif.h and the .mod files (and the generated sources)
# The compilers are FC (default gfortran) and CC (default cc).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
libmpi=$1
out=$2
FC=${FC:-gfortran}
CC=${CC:-cc}
mkdir -p "$out/src" "$out/mod" "$out/obj"
python3 "$here/gen.py" "$here/../include/mpi.h" "$out/src"
cflags="-O2 -fPIC -Wall -Wno-unused-function -I$here/../include -I$here"
for f in "$out/src/mpifort.c" "$here/special.c"; do
    b=$(basename "$f" .c)
    $CC $cflags -c "$f" -o "$out/obj/$b.o"
    $CC $cflags -DFERRITE_PROFILE -c "$f" -o "$out/obj/p$b.o"
done
# Module order: each after the modules it uses.
fflags="-O2 -fPIC -J$out/mod"
for f in "$out/src/mpi_sizeof.f90" "$out/src/mpi.f90" "$out/src/mpi_f08_types.f90" \
         "$here/f08_callbacks.f90" "$out/src/mpi_f08.f90" "$here/f08_helpers.f90"; do
    $FC $fflags -c "$f" -o "$out/obj/$(basename "$f" .f90).o"
done
# $ORIGIN: libmpi.so.12 is found beside it (a program's run path covers only its own needs).
$CC -shared -Wl,-soname,libmpifort.so.12 -Wl,--no-undefined -Wl,-rpath,'$ORIGIN' -o "$out/libmpifort.so.12" "$out"/obj/*.o \
    "$libmpi" -lgfortran
cp "$out/src/mpif.h" "$out/mpif.h"
