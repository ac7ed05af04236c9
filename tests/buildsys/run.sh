#!/usr/bin/env bash
# Build systems find Ferrite in $PREFIX: CMake's find_package(MPI) with MPI_HOME and with only
# the compiler wrappers given (MPI_C_COMPILER...), meson's dependency('mpi') (through MPICC /
# MPICXX) and dependency('ferrite') (pkg-config), and plain `pkg-config --cflags --libs mpi`.
# Each builds tests/buildsys/allsum.c (and .cpp; .f90 when $PREFIX/bin/mpifort exists), runs
# it on 3 ranks with our mpirun and checks what rank 0 prints (library, sums, ring token).
# Ends with `buildsys: N passed, N failed`. Needs cmake, meson, ninja, pkg-config
# (scripts/install-deps.sh installs them).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=$(cd "${PREFIX:-$root/build}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0; fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1: $2"; fail=$((fail + 1)); }

declare -A want=(
    [allsum_c]="C lib=Ferrite MPI size=3 sum=6 token=3"
    [allsum_pc]="C lib=Ferrite MPI size=3 sum=6 token=3"
    [allsum_cxx]="C++ lib=Ferrite MPI size=3 sum=6"
    [allsum_f]="Fortran size=3 sum=6"
)
runs() { # test-name binary
    local out
    out=$(timeout 60 "$PREFIX/bin/mpirun" -n 3 "$2" 2>&1)
    local rc=$? expect=${want[$(basename "$2")]}
    if [ "$rc" -eq 0 ] && [ "$out" = "$expect" ]; then ok "$1"; else ko "$1" "rc=$rc: $out"; fi
}

fortran=
if [ -x "$PREFIX/bin/mpifort" ]; then fortran=Fortran; else
    echo "SKIP Fortran checks: no $PREFIX/bin/mpifort"
fi

# CMake: (name, extra configure arguments). Debian's MPICH mpicc on PATH must not be taken.
cmake_case() {
    local name=$1; shift
    local b=$work/$name langs="C CXX $fortran"
    if ! cmake -S "$here/cmake" -B "$b" ${fortran:+-DWITH_FORTRAN=ON} "$@" >"$b.log" 2>&1; then
        ko "$name configure" "$(tail -n 20 "$b.log")"; return
    fi
    local lang line
    for lang in $langs; do
        line=$(grep "ferrite-check $lang:" "$b.log")
        # FindMPI tries mpif90 before mpifort: any of our Fortran names is ours.
        local wrappers=mpicc
        [ "$lang" = CXX ] && wrappers=mpicxx
        [ "$lang" = Fortran ] && wrappers="mpifort|mpif90|mpif77"
        local compiler=${line#*compiler=}; compiler=${compiler%% *}
        if [[ $compiler =~ ^$PREFIX/bin/($wrappers)$ && $line == *"include=$PREFIX/include"* &&
              $line == *"libs="*"$PREFIX/lib/libmpi"* ]]; then
            ok "$name finds $lang"
        else
            ko "$name finds $lang" "${line:-no ferrite-check line}"
        fi
    done
    if ! cmake --build "$b" >"$b.build.log" 2>&1; then
        ko "$name build" "$(tail -n 20 "$b.build.log")"; return
    fi
    runs "$name C program" "$b/allsum_c"
    runs "$name C++ program" "$b/allsum_cxx"
    [ -n "$fortran" ] && runs "$name Fortran program" "$b/allsum_f"
}
if command -v cmake >/dev/null; then
    cmake_case cmake-mpi-home -DMPI_HOME="$PREFIX"
    MPI_HOME=$PREFIX cmake_case cmake-mpi-home-env
    cmake_case cmake-wrappers -DMPI_C_COMPILER="$PREFIX/bin/mpicc" \
        -DMPI_CXX_COMPILER="$PREFIX/bin/mpicxx" \
        ${fortran:+-DMPI_Fortran_COMPILER="$PREFIX/bin/mpifort"}
else
    ko cmake "cmake missing (scripts/install-deps.sh installs it)"
fi

# meson. A system Open MPI's ompi-c.pc would win over the config tool: then ask for that.
if command -v meson >/dev/null && command -v ninja >/dev/null; then
    method=auto
    pkg-config --exists ompi-c 2>/dev/null && method=config-tool
    b=$work/meson
    if MPICC=$PREFIX/bin/mpicc MPICXX=$PREFIX/bin/mpic++ PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig \
        meson setup "$b" "$here/meson" -Dmpi_method=$method >"$b.log" 2>&1 &&
        ninja -C "$b" >"$b.build.log" 2>&1; then
        if grep -q "ferrite-check mpi version=$("$PREFIX/bin/mpicc" --showme:version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+')" "$b.log"; then
            ok "meson finds mpi (version)"
        else
            ko "meson finds mpi (version)" "$(grep ferrite-check "$b.log")"
        fi
        runs "meson dependency('mpi') C program" "$b/allsum_c"
        runs "meson dependency('mpi') C++ program" "$b/allsum_cxx"
        runs "meson dependency('ferrite') pkg-config program" "$b/allsum_pc"
    else
        ko meson "$(tail -n 20 "$b.log" "$b.build.log" 2>/dev/null)"
    fi
else
    ko meson "meson or ninja missing (scripts/install-deps.sh installs them)"
fi

# pkg-config by hand, under each installed name.
for pc in mpi ferrite mpich; do
    flags=$(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --cflags --libs "$pc" 2>&1) ||
        { ko "pkg-config $pc" "$flags"; continue; }
    # shellcheck disable=SC2086
    if cc -o "$work/allsum_pc" "$here/allsum.c" $flags 2>"$work/cc.log"; then
        runs "pkg-config $pc program" "$work/allsum_pc"
    else
        ko "pkg-config $pc build" "$(cat "$work/cc.log")"
    fi
done

echo "buildsys: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
