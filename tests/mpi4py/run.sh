#!/usr/bin/env bash
# mpi4py's own test suite against Ferrite. Installs mpi4py's binary wheel (which loads any
# library with MPICH's ABI at run time) and unpacks its source distribution's test/ into a
# venv under build/mpi4py, then runs test/main.py under our mpirun at -n 1 and -n 2
# (test_util_sync is excluded at -n 2: it hangs on MPICH too) and prints the totals and
# the pass/fail/error counts per test file.
#
# Knobs: PREFIX (default ./build), MPI4PY_VERSION (default: latest), NP (default "1 2"),
# TIMEOUT (seconds per run, default 900), EXCLUDE (more test name patterns to leave out,
# space-separated, e.g. a test that hangs), and arguments passed on to main.py (e.g.
# test_datatype).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
NP=${NP:-1 2}
TIMEOUT=${TIMEOUT:-900}
work=$PREFIX/mpi4py
venv=$work/venv
spec=mpi4py${MPI4PY_VERSION:+==$MPI4PY_VERSION}

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || {
        echo "mpi4py: python3 -m venv failed (apt-get install python3-venv)"; exit 2; }
fi
if ! "$venv/bin/python" -c "import mpi4py" 2>/dev/null; then
    "$venv/bin/pip" install -q --only-binary :all: "$spec" || { echo "mpi4py: wheel install failed"; exit 2; }
fi
version=$("$venv/bin/python" -c "import mpi4py; print(mpi4py.__version__)")
src=$work/mpi4py-$version
if [ ! -f "$src/test/main.py" ]; then
    rm -rf "$work/sdist" && mkdir -p "$work/sdist"
    "$venv/bin/pip" download -q --no-deps --no-binary :all: -d "$work/sdist" "mpi4py==$version" \
        || { echo "mpi4py: sdist download failed"; exit 2; }
    tar -xzf "$work/sdist"/mpi4py-"$version".tar.gz -C "$work" || exit 2
fi
echo "mpi4py $version, tests from $src/test, library $PREFIX/lib/libmpi.so.12"

export MPI4PY_LIBMPI=$PREFIX/lib/libmpi.so.12 MPI4PY_MPIABI=mpich
# With MPI4PY_MPIABI set, mpi4py does not dlopen MPI4PY_LIBMPI itself: its extension module
# finds libmpi.so.12 through the loader's search path.
export LD_LIBRARY_PATH=$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
for np in $NP; do
    log=$work/np$np.log
    excl=()
    [ "$np" -gt 1 ] && excl=(-e test_util_sync)
    for e in ${EXCLUDE:-}; do excl+=(-e "$e"); done
    # -v prints one line per test ("... ok" / "... FAIL" / "... ERROR" / "... skipped").
    timeout -k 10 "$TIMEOUT" "$PREFIX/bin/mpirun" -n "$np" "$venv/bin/python" \
        "$src/test/main.py" -v "${excl[@]}" "$@" >"$log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && status=1
    [ $rc -eq 124 ] && echo "-n $np: TIMED OUT after ${TIMEOUT}s"
    echo "== -n $np (exit $rc): $(grep -E '^(Ran|OK|FAILED)' "$log" | sort -u | tr '\n' ' ')"
    # Per file: a verbose line looks like "testX (test_comm.TestCommWorld.testX) ... ok".
    grep -E '\(test_[a-z0-9_]+\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+\) \.\.\. ' "$log" \
        | sed -E 's/.*\((test_[a-z0-9_]+)\..*\) \.\.\. *(ok|FAIL|ERROR|skipped|expected failure|unexpected success).*/\1 \2/' \
        | awk '{f=$1; r=$2; if (r=="ok") p[f]++; else if (r=="FAIL") x[f]++; else if (r=="ERROR") e[f]++; else s[f]++; files[f]=1}
               END {for (f in files) printf "  %-28s pass %4d fail %3d error %3d skip %3d\n", f, p[f], x[f], e[f], s[f];
                    for (f in files) {tp+=p[f]; tx+=x[f]; te+=e[f]; ts+=s[f]}
                    printf "  %-28s pass %4d fail %3d error %3d skip %3d\n", "TOTAL (rank 0+)", tp, tx, te, ts}' \
        | sort
done
exit $status
