#!/usr/bin/env bash
# Checks that our mpi.h describes MPICH's ABI: one C program, generated from the names our
# header defines, is built once against our header (linked with our libmpi) and once against
# Debian's MPICH header (linked with libmpich). It prints the size of every type, the layout of
# MPI_Status and the value of every constant and predefined handle (a pointer that is a symbol
# prints as the symbol's name, e.g. MPI_COMM_DUP_FN -> MPIR_Dup_fn). Both outputs must match.
# Names MPICH 4.0 does not have (MPI-4.1 additions) are skipped and listed.
# Then every function prototype must agree with MPICH's (C rejects a conflicting
# redeclaration). Ends with "abi-header: N passed, N failed" (N = names compared).
set -u
cd "$(dirname "$0")/../.."
PREFIX="${PREFIX:-./build}"
MPICH_INC="${MPICH_INC:-/usr/include/x86_64-linux-gnu/mpich}"
CC="${CC:-cc}"
OUR_H="$PREFIX/include/mpi.h"
[ -f "$OUR_H" ] || OUR_H=include/mpi.h

# Deliberate differences from MPICH 4.0: name and reason.
INTENDED="MPI_SUBVERSION"  # we implement the MPI 4.1 interface, MPICH 4.0 says 4.0

fail_setup() { echo "check-header: $*"; echo "abi-header: 0 passed, 1 failed"; exit 1; }
[ -f "$MPICH_INC/mpi.h" ] || fail_setup "MPICH's header not found in $MPICH_INC (install libmpich-dev)"
[ -e "$PREFIX/lib/libmpi.so" ] || fail_setup "$PREFIX/lib/libmpi.so not found (run make install)"

work=$(mktemp -d)
# ABI_KEEP=1 keeps the generated program and both outputs for a look.
trap 'if [ -n "${ABI_KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi' EXIT

strip_comments() { # C comments out, so commented-out names do not count
    sed -e ':a' -e '/\/\*/{ /\*\//!{ N; ba; }; s:/\*[^*]*\*\+\([^/*][^*]*\*\+\)*/::g; ba; }' "$@"
}

# Constants: object-like #defines and enum constants named MPI_*.
defined_names() { # header files...
    strip_comments "$@" | awk '
        $1 == "#define" && $2 ~ /^MPI_[A-Za-z0-9_]*$/ && NF >= 3 { print $2 }
        /^[ \t]*MPI_[A-Za-z0-9_]+[ \t]*(=.*)?,?[ \t]*$/ && !/#/ {
            n = $0; sub(/^[ \t]*/, "", n); sub(/[ \t=,].*$/, "", n); sub(/,$/, "", n); print n }
    ' | sort -u
}
# Types: typedef names (function types are marked with a trailing "()").
typedef_names() {
    strip_comments "$@" | awk '
        /^[ \t]*typedef/ && /\(/ { s = $0; sub(/^[^(]*\(/, "", s); sub(/\).*/, "", s);
                                   gsub(/[ *]/, "", s); fn[s] = 1
                                   if (s ~ /^MPI_/) print s "()"; next }
        /^[ \t]*typedef/ && /;/  { s = $0; sub(/;.*/, "", s); n = split(s, w, /[ *]+/);
                                   if (w[n] ~ /^MPI_/) print w[n] ((w[n-1] in fn) ? "()" : ""); next }
        /^[ \t]*}[ \t]*MPI_[A-Za-z0-9_]*[ \t]*;/ { s = $0; gsub(/[ \t};]/, "", s); print s }
    ' | sort -u
}

defined_names "$OUR_H" > "$work/ours.const"
typedef_names "$OUR_H" > "$work/ours.types"
mpich_files="$MPICH_INC/mpi.h $MPICH_INC/mpio.h"
defined_names $mpich_files > "$work/mpich.const"
typedef_names $mpich_files > "$work/mpich.types"
# Every MPI_ identifier MPICH's headers mention: what "MPICH has the name" means here.
strip_comments $mpich_files | grep -oE '\bMPI_[A-Za-z0-9_]+\b' | sort -u > "$work/mpich.idents"

comm -12 "$work/ours.const" "$work/mpich.idents" > "$work/both.const"
sed 's/()$//' "$work/ours.types" | sort -u | comm -12 - "$work/mpich.idents" > "$work/both.types.plain"
grep -F -x -f <(sed 's/$/()/' "$work/both.types.plain") "$work/ours.types" > "$work/both.fn" || true
sed 's/()$//' "$work/both.fn" | comm -23 "$work/both.types.plain" - > "$work/both.types"
for n in $INTENDED; do
    grep -v -x "$n" "$work/both.const" > "$work/x" && mv "$work/x" "$work/both.const"
done

ours_only=$(comm -23 "$work/ours.const" "$work/mpich.idents" | tr '\n' ' ')
mpich_only=$(comm -13 "$work/ours.const" "$work/mpich.const" | tr '\n' ' ')
[ -n "$ours_only" ] && echo "skipped (not in MPICH 4.0): $ours_only"
[ -n "$mpich_only" ] && echo "note: MPI_ names only MPICH defines: $mpich_only"
echo "skipped on purpose: $INTENDED"

# The program.
{
    cat <<'EOF'
#define _GNU_SOURCE
#include <mpi.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

/* Integers print as numbers; pointers that name a symbol print as the symbol, others as a
 * number (sentinels such as MPI_IN_PLACE). */
static void show(const char *name, int is_ptr, long long v, size_t size) {
    Dl_info info;
    if (is_ptr && v != 0 && dladdr((void *)(size_t)v, &info) && info.dli_sname &&
        info.dli_saddr == (void *)(size_t)v) {
        printf("%s = &%s (size %zu)\n", name, info.dli_sname, size);
        return;
    }
    printf("%s = %lld (size %zu)\n", name, v, size);
}
#define SHOW(n) show(#n, __builtin_classify_type(1 ? (n) : (n)) == 5, (long long)(size_t)(n), \
                     sizeof(1 ? (n) : (n)))
#define SIZE(t) printf("sizeof(%s) = %zu\n", #t, sizeof(t))
#define SIZE_FN(t) printf("sizeof(%s *) = %zu\n", #t, sizeof(t *))
#define OFFSET(t, f) printf("offsetof(%s, %s) = %zu\n", #t, #f, offsetof(t, f))

int main(void) {
    OFFSET(MPI_Status, count_lo);
    OFFSET(MPI_Status, count_hi_and_cancelled);
    OFFSET(MPI_Status, MPI_SOURCE);
    OFFSET(MPI_Status, MPI_TAG);
    OFFSET(MPI_Status, MPI_ERROR);
    printf("MPI_Aint signed = %d\n", (MPI_Aint)-1 < 0);
    printf("MPI_Count signed = %d\n", (MPI_Count)-1 < 0);
    printf("MPI_Offset signed = %d\n", (MPI_Offset)-1 < 0);
EOF
    sed 's/.*/    SIZE(&);/' "$work/both.types"
    sed 's/()$//; s/.*/    SIZE_FN(&);/' "$work/both.fn"
    sed 's/.*/    SHOW(&);/' "$work/both.const"
    echo "    return 0;"
    echo "}"
} > "$work/abi.c"

build() { # name -I... link-flags...
    local name=$1; shift
    if ! $CC -std=gnu99 -w -o "$work/$name" "$work/abi.c" "$@" -ldl 2> "$work/$name.err"; then
        echo "check-header: the program does not build against the $name header:"
        head -n 30 "$work/$name.err"
        return 1
    fi
    "$work/$name" > "$work/$name.out"
}
libdir=$(cd "$PREFIX/lib" && pwd)
build ours -I"$(dirname "$OUR_H")" -L"$libdir" -Wl,-rpath,"$libdir" -lmpi || fail_setup "build failed"
build mpich -I"$MPICH_INC" -L/usr/lib/x86_64-linux-gnu -lmpich || fail_setup "build failed"

# One result per name: a name passes when every line about it is identical.
names_in() { sed -E 's/^(sizeof|offsetof)\(([A-Za-z0-9_]+).*/\2/; s/^([A-Za-z0-9_]+).*/\1/' "$1"; }
passed=0
failed=0
for n in $(names_in "$work/ours.out" | sort -u); do
    a=$(grep -E "^(sizeof\(|offsetof\()?$n[ ,)*]" "$work/ours.out")
    b=$(grep -E "^(sizeof\(|offsetof\()?$n[ ,)*]" "$work/mpich.out")
    if [ "$a" = "$b" ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "MISMATCH $n"
        echo "  ours:  $a" | sed '2,$s/^/         /'
        echo "  mpich: $b" | sed '2,$s/^/         /'
    fi
done
# Prototypes: our header, then MPICH's own prototype lists. C rejects a redeclaration with a
# different type, so every function must have exactly MPICH's signature (MPI_X and PMPI_X).
cat > "$work/protos.c" <<EOF
#include <mpi.h>
/* What MPICH's mpi.h would have set up before its prototype files. */
#define MPICH 1
#define MPI_FILE_DEFINED 1
#define HAVE_MPI_OFFSET 1
#define MPICH_API_PUBLIC
#define ROMIO_API_PUBLIC
#define MPICH_ATTR_POINTER_WITH_TYPE_TAG(a, b)
typedef int MPIX_Grequest_class;
typedef int(MPIX_Grequest_poll_function)(void *, MPI_Status *);
typedef int(MPIX_Grequest_wait_function)(int, void **, double, MPI_Status *);
typedef struct { void **storage_stack; } QMPI_Context;
#include "$MPICH_INC/mpi_proto.h"
#include "$MPICH_INC/mpio.h"
EOF
grep -ohE '\bP?MPI_[A-Za-z0-9_]+ *\(' "$MPICH_INC/mpi_proto.h" "$MPICH_INC/mpio.h" |
    sed 's/ *($//' | sort -u > "$work/mpich.functions"
# Names our header makes macros (handle conversions) are not functions on either side.
grep -oE '^#define P?MPI_[A-Za-z0-9_]+\(' "$OUR_H" | sed 's/^#define //; s/($//' | sort -u |
    comm -23 "$work/mpich.functions" - > "$work/functions"
$CC -std=gnu11 -fsyntax-only -I"$(dirname "$OUR_H")" "$work/protos.c" 2> "$work/protos.err"
grep -oE "conflicting types for .P?MPI[A-Za-z0-9_]*" "$work/protos.err" |
    sed -E 's/.*for .//' | sort -u > "$work/protos.bad"
other_errors=$(grep -c "error:" "$work/protos.err")
fn_total=$(wc -l < "$work/functions")
fn_bad=$(wc -l < "$work/protos.bad")
while read -r f; do
    echo "MISMATCH prototype $f:"
    grep -A2 "conflicting types for .$f.;" "$work/protos.err" | head -n 3 | sed 's/^/  /'
done < "$work/protos.bad"
if [ "$other_errors" -gt 0 ] && [ "$fn_bad" -eq 0 ]; then
    echo "check-header: MPICH's prototypes do not compile after our header:"
    grep "error:" "$work/protos.err" | head -n 10
    fn_bad=1
fi
passed=$((passed + fn_total - fn_bad))
failed=$((failed + fn_bad))
echo "prototypes: $((fn_total - fn_bad)) of $fn_total functions declared as MPICH declares them"

echo "abi-header: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
