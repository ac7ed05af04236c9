#!/usr/bin/env bash
# Ferrite's Fortran bindings: programs built with Ferrite's mpifort (mpif.h in fixed and
# free form, `use mpi`, `use mpi_f08`) run at the counts their first line declares
# (`! np: 1 2 4`) and pass when the job exits 0 and rank 0 printed `done: <name>`. Runs the
# programs of tests/fortran and, built with our mpifort instead of MPICH's, the Fortran
# programs of tests/mpich-langs. Checks that the binaries load Ferrite's libmpifort.so.12,
# and that the generated mpif.h is fixed-form (no line over 72 columns).
# Ends with `fortran: N passed, N failed`.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
MPIFORT=${MPIFORT:-$PREFIX/bin/mpifort}
MPIRUN=${MPIRUN:-$PREFIX/bin/mpirun}
TEST_TIMEOUT=${TEST_TIMEOUT:-60}
pass=0; fail=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/log

ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1 ($2)"; [ -s "$log" ] && tail -n 8 "$log" | sed 's/^/    | /'; fail=$((fail + 1)); }

echo "fortran: MPIFORT=$MPIFORT MPIRUN=$MPIRUN"
if [ ! -x "$MPIFORT" ]; then
    : >"$log"; bad mpifort "$MPIFORT missing: install gfortran (scripts/install-deps.sh) and make install"
    echo "fortran: $pass passed, $fail failed"; exit 1
fi

: >"$log"
if awk 'length > 72 { print FILENAME ": " FNR ": " length " columns"; bad = 1 } END { exit bad }' \
        "$PREFIX/include/mpif.h" >"$log"; then
    ok "mpif.h fixed form"
else
    bad "mpif.h fixed form" "lines over 72 columns"
fi

# The wrapper: the flags it adds, and its other names.
prefix=$(cd "$PREFIX" && pwd)
want="gfortran -I$prefix/include -fallow-argument-mismatch -O2 x.f90 -L$prefix/lib -Wl,-rpath,$prefix/lib -lmpifort -lmpi"
: >"$log"
for w in mpifort mpif90 mpif77; do
    got=$("$prefix/bin/$w" -show -O2 x.f90 2>&1)
    if [ "$got" = "$want" ]; then ok "$w -show"; else echo "got: $got" >"$log"; bad "$w -show" "expected: $want"; fi
done
got=$(FERRITE_FC=gfortran-12 "$prefix/bin/mpifort" -show -c x.f; "$prefix/bin/mpifort" -fc=flang -show -c x.f)
want=$(printf 'gfortran-12 -I%s/include -fallow-argument-mismatch -c x.f\nflang -I%s/include -c x.f' "$prefix" "$prefix")
if [ "$got" = "$want" ]; then ok "mpifort compiler choice"; else echo "got: $got" >"$log"; bad "mpifort compiler choice" "FERRITE_FC / -fc="; fi

for src in "$here"/*.f "$here"/*.f90 "$root"/tests/mpich-langs/*.f90; do
    name=$(basename "${src%.*}")
    exe=$work/$name
    if ! (cd "$work" && "$MPIFORT" -O1 -o "$exe" "$src") >"$log" 2>&1; then
        bad "$name" "build failed"; continue
    fi
    if ! ldd "$exe" | grep -q "libmpifort.so.12 => $PREFIX/lib/"; then
        ldd "$exe" >"$log"; bad "$name" "does not load $PREFIX/lib/libmpifort.so.12"; continue
    fi
    nps=$(head -n 1 "$src" | sed -n 's/^.*np:\(.*\)$/\1/p')
    for np in ${nps:-1 2}; do
        if timeout "$TEST_TIMEOUT" "$MPIRUN" -n "$np" "$exe" >"$log" 2>&1 &&
           grep -q "^done: $name\$" "$log"; then
            ok "$name -n $np"
        else
            bad "$name -n $np" "exit or output"
        fi
    done
done
echo "fortran: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
