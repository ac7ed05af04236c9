#!/usr/bin/env bash
# Checks that a binary built against Debian's MPICH finds every symbol it could reference in
# our library: each MPI_/PMPI_ function and data symbol libmpich.so.12 exports, plus the
# internal MPIR_ symbols that MPICH's mpi.h macros make programs reference (MPI_DUP_FN and
# friends name MPIR_Dup_fn), must be exported by $PREFIX/lib/libmpi.so.12 with the same kind
# (function or data). So must every symbol MPICH's own Fortran and C++ libraries
# (libmpichfort.so.12, libmpichcxx.so.12) import from libmpich (MPII_ hooks, MPIX_
# extensions...), so they run on top of ours. MPICH's other extensions and internals are not
# part of the ABI a program sees and are skipped.
# Ends with "abi-symbols: N passed, N failed" (N = symbols compared).
set -u
cd "$(dirname "$0")/../.."
PREFIX="${PREFIX:-./build}"
MPICH_LIB="${MPICH_LIB:-/usr/lib/x86_64-linux-gnu/libmpich.so.12}"
MPICH_INC="${MPICH_INC:-/usr/include/x86_64-linux-gnu/mpich}"
OURS="$PREFIX/lib/libmpi.so.12"

fail_setup() { echo "check-symbols: $*"; echo "abi-symbols: 0 passed, 1 failed"; exit 1; }
[ -e "$MPICH_LIB" ] || fail_setup "$MPICH_LIB not found (install libmpich-dev)"
[ -e "$OURS" ] || fail_setup "$OURS not found (run make install)"
command -v nm > /dev/null || fail_setup "nm not found (install binutils)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# "name kind" lines; kind is "code" for functions (T, W, i) and "data" for the rest.
exported() {
    nm -D --defined-only "$1" | awk '
        NF == 3 { kind = ($2 ~ /^[TtWi]$/) ? "code" : "data"; print $3, kind }' | sort -u
}
exported "$MPICH_LIB" > "$work/mpich.all"
exported "$OURS" > "$work/ours.all"

# Internal names that MPICH's public headers make a program reference.
grep -ohE '\bMPI[RD]_[A-Za-z0-9_]+\b' "$MPICH_INC"/mpi.h "$MPICH_INC"/mpio.h | sort -u > "$work/referenced"

# What MPICH's language libraries import (when installed).
for lib in libmpichfort.so.12 libmpichcxx.so.12; do
    path=$(dirname "$MPICH_LIB")/$lib
    [ -e "$path" ] && nm -D --undefined-only "$path" | awk '{ sub(/@.*/, "", $2); print $2 }'
done | sort -u >> "$work/referenced"

awk 'NR == FNR { ref[$1] = 1; next }
     $1 ~ /^P?MPI_/ || ($1 in ref) { print }' "$work/referenced" "$work/mpich.all" > "$work/wanted"

awk 'NR == FNR { have[$1] = $2; next }
     !($1 in have)    { print "MISSING " $1 " (" $2 ")"; failed++; next }
     have[$1] != $2   { print "WRONG KIND " $1 ": MPICH exports " $2 ", we export " have[$1]; failed++; next }
                      { passed++ }
     END { printf "abi-symbols: %d passed, %d failed\n", passed, failed; exit failed != 0 }
' "$work/ours.all" "$work/wanted"
