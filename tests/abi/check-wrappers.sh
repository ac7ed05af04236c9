#!/usr/bin/env bash
# Checks the installed compiler wrappers ($PREFIX/bin/mpicc, mpicxx): the flags they add, when
# they link, how they print commands, and that what they build runs against our library
# (MPI_Get_library_version is callable before MPI_Init). Also from a copy of the installation
# moved elsewhere, since the wrappers find their prefix from their own location.
# Ends with "abi-wrappers: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
PREFIX="${PREFIX:-./build}"
prefix=$(cd "$PREFIX" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

check() { # description, then a command that must succeed
    local what=$1; shift
    if "$@" > "$work/out" 2>&1; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAILED: $what"
        sed 's/^/  /' "$work/out" | head -n 20
    fi
}
same() { [ "$1" = "$2" ] || { echo "got:      $1"; echo "expected: $2"; return 1; }; }

cat > "$work/hello.c" <<'EOF'
#include <mpi.h>
#include <stdio.h>
int main(void) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) return 1;
    printf("%s\n", v);
    return 0;
}
EOF
cp "$work/hello.c" "$work/hello.cpp"

link="-L$prefix/lib -Wl,-rpath,$prefix/lib -lmpi"
check "mpicc -show adds the include and link flags" \
    same "$("$prefix/bin/mpicc" -show -O2 x.c)" "cc -I$prefix/include -O2 x.c $link"
check "mpicc -c does not link" \
    same "$("$prefix/bin/mpicc" -show -c x.c)" "cc -I$prefix/include -c x.c"
check "mpicc -E, -S, -M do not link" \
    same "$("$prefix/bin/mpicc" -show -E x.c; "$prefix/bin/mpicc" -show -S x.c; "$prefix/bin/mpicc" -show -M x.c)" \
    "$(printf 'cc -I%s/include -E x.c\ncc -I%s/include -S x.c\ncc -I%s/include -M x.c' "$prefix" "$prefix" "$prefix")"
check "mpicc -compile_info / -link_info" \
    same "$("$prefix/bin/mpicc" -compile_info x.c; "$prefix/bin/mpicc" -link_info x.o)" \
    "$(printf 'cc -I%s/include x.c\ncc -I%s/include x.o %s' "$prefix" "$prefix" "$link")"
check "-showme:compile / -showme:link print the flags" \
    same "$("$prefix/bin/mpicc" -showme:compile; "$prefix/bin/mpicc" -showme:link)" \
    "$(printf -- '-I%s/include\n%s' "$prefix" "$link")"
check "arguments with spaces and quotes are shown quoted" \
    same "$("$prefix/bin/mpicc" -showme -c "a b.c" "-DX=it's")" \
    "cc -I$prefix/include -c 'a b.c' '-DX=it'\\''s'"
check "FERRITE_CC and MPICH_CC choose the compiler" \
    same "$(FERRITE_CC="ccache gcc" "$prefix/bin/mpicc" -show -c x.c; MPICH_CC=clang "$prefix/bin/mpicc" -show -c x.c)" \
    "$(printf 'ccache gcc -I%s/include -c x.c\nclang -I%s/include -c x.c' "$prefix" "$prefix")"
check "mpicxx uses the C++ compiler (FERRITE_CXX overrides)" \
    same "$("$prefix/bin/mpicxx" -show -c x.cpp; FERRITE_CXX=g++ "$prefix/bin/mpicxx" -show -c x.cpp)" \
    "$(printf 'c++ -I%s/include -c x.cpp\ng++ -I%s/include -c x.cpp' "$prefix" "$prefix")"
missing_compiler() {
    local msg rc
    msg=$(FERRITE_CC=/nonexistent/cc "$prefix/bin/mpicc" -c x.c 2>&1)
    rc=$?
    [ "$rc" -eq 127 ] && [[ $msg == *"compiler '/nonexistent/cc' not found"* ]] ||
        { echo "exit $rc: $msg"; return 1; }
}
check "a missing compiler is reported" missing_compiler

runs_ferrite() { # binary
    "$1" | grep -q '^Ferrite MPI' || { echo "$1 printed: $("$1" 2>&1)"; return 1; }
}
check "mpicc builds a program that runs on Ferrite" \
    bash -c "'$prefix/bin/mpicc' -o '$work/hello' '$work/hello.c'"
check "  ... and it runs" runs_ferrite "$work/hello"
check "mpicxx builds a C++ program that runs on Ferrite" \
    bash -c "'$prefix/bin/mpicxx' -o '$work/hellocxx' '$work/hello.cpp'"
check "  ... and it runs" runs_ferrite "$work/hellocxx"

# Open MPI's and MPICH's query options, as build systems (CMake, meson) use them.
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
check "--showme:incdirs / :libdirs / :libs / :version" \
    same "$("$prefix/bin/mpicc" --showme:incdirs; "$prefix/bin/mpicc" --showme:libdirs
            "$prefix/bin/mpicc" --showme:libs; "$prefix/bin/mpicxx" --showme:version)" \
    "$(printf '%s/include\n%s/lib\nmpi\nmpicxx: Ferrite MPI %s (Language: C++)' "$prefix" "$prefix" "$version")"
check "--showme, -compile-info and -link-info (MPICH's spellings)" \
    same "$("$prefix/bin/mpicc" --showme -c x.c; "$prefix/bin/mpicc" -compile-info x.c
            "$prefix/bin/mpicc" -link-info x.o)" \
    "$(printf 'cc -I%s/include -c x.c\ncc -I%s/include x.c\ncc -I%s/include x.o %s' "$prefix" "$prefix" "$prefix" "$link")"
bad_showme() {
    local msg
    msg=$("$prefix/bin/mpicc" --showme:everything 2>&1) && { echo "accepted: $msg"; return 1; }
    [[ $msg == *"unknown option -showme:everything"* ]] || { echo "$msg"; return 1; }
}
check "an unknown --showme: query is an error" bad_showme
check "-v names Ferrite and its version, then the compiler's" \
    bash -c "out=\$('$prefix/bin/mpicc' -v 2>&1) && [[ \$out == 'mpicc for Ferrite MPI $version (MPICH ABI)'*[Vv]ersion* ]]"
check "--version names Ferrite, then the compiler's version" \
    bash -c "out=\$('$prefix/bin/mpicc' --version) && [ \$(echo \"\$out\" | wc -l) -gt 1 ] && [[ \$out == 'mpicc for Ferrite MPI $version (MPICH ABI)'* ]]"
check "mpic++ and mpiCC are mpicxx" \
    same "$("$prefix/bin/mpic++" -show -c x.cpp; "$prefix/bin/mpiCC" -show -c x.cpp)" \
    "$(printf 'c++ -I%s/include -c x.cpp\nc++ -I%s/include -c x.cpp' "$prefix" "$prefix")"

# A moved installation: the wrappers follow it.
cp -r "$prefix" "$work/moved"
check "a moved installation's mpicc points at the new place" \
    same "$("$work/moved/bin/mpicc" -show x.c)" \
    "cc -I$work/moved/include x.c -L$work/moved/lib -Wl,-rpath,$work/moved/lib -lmpi"
ln -s "$work/moved/bin/mpicc" "$work/mpicc-link"
check "mpicc reached through a symbolic link finds its installation" \
    same "$("$work/mpicc-link" -show -c x.c)" "cc -I$work/moved/include -c x.c"
check "a program built from the moved installation runs" \
    bash -c "'$work/moved/bin/mpicc' -o '$work/hello2' '$work/hello.c' && '$work/hello2' | grep -q '^Ferrite MPI'"

echo "abi-wrappers: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
