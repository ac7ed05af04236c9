#!/usr/bin/env bash
# mpi4py's own test suite against Ferrite. Installs mpi4py's binary wheel (which loads any
# library with MPICH's ABI at run time) into a venv under $PREFIX/mpi4py, takes the tests
# from its source distribution (or from MPI4PY_TESTS, a test/ directory you already have),
# runs test/main.py under our mpirun at each process count of NP, one log per rank, and
# prints per process count the totals of every rank and the pass/fail/error/skip counts per
# test file of rank 0 (and of any rank whose counts differ).
#
# What Ferrite does not implement is left to mpi4py's own switches, so nothing hangs:
# - MPI4PY_TEST_SPAWN=0: mpi4py skips its spawn tests (test_spawn, the ProcessPool of
#   test_util_pool, mpi4py.futures). Without it ProcessPool hangs: mpi4py.futures calls
#   MPI_Comm_spawn in a manager thread, the MPI_ERR_UNSUPPORTED_OPERATION it gets ends that
#   thread, and the pool waits for workers forever.
# - test_dynproc is excluded: when MPI_Open_port fails on rank 0, rank 1 waits in a recv
#   for the port name forever (mpi4py skips the file only for MPICH < 4.3 without ports;
#   Ferrite's vendor is not MPICH).
#
# Knobs: PREFIX (default ./build), MPI4PY_VERSION (default: latest), MPI4PY_TESTS (a test/
# directory of the same version; default: unpacked from the sdist), NP (default "1 2 3"),
# TIMEOUT (seconds per run, default 1200), EXCLUDE (more test name patterns to leave out,
# space-separated), and arguments passed on to main.py (e.g. test_datatype).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PREFIX=${PREFIX:-$root/build}
NP=${NP:-1 2 3}
TIMEOUT=${TIMEOUT:-1200}
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
if [ -n "${MPI4PY_TESTS:-}" ]; then
    tests=$(cd "$MPI4PY_TESTS" && pwd) || exit 2
else
    src=$work/mpi4py-$version
    if [ ! -f "$src/test/main.py" ]; then
        if [ ! -f "$work/sdist/mpi4py-$version.tar.gz" ]; then
            rm -rf "$work/sdist" && mkdir -p "$work/sdist"
            # pip prepares the sdist's metadata (a build environment): minutes on a busy machine.
            "$venv/bin/pip" download -q --no-deps --no-binary :all: -d "$work/sdist" "mpi4py==$version" \
                || { echo "mpi4py: sdist download failed"; exit 2; }
        fi
        tar -xzf "$work/sdist/mpi4py-$version.tar.gz" -C "$work" || exit 2
    fi
    tests=$src/test
fi
[ -f "$tests/main.py" ] || { echo "mpi4py: no main.py in $tests"; exit 2; }
echo "mpi4py $version, tests from $tests, library $PREFIX/lib/libmpi.so.12"

export MPI4PY_LIBMPI=$PREFIX/lib/libmpi.so.12 MPI4PY_MPIABI=mpich MPI4PY_TEST_SPAWN=0
# With MPI4PY_MPIABI set, mpi4py does not dlopen MPI4PY_LIBMPI itself: its extension module
# finds libmpi.so.12 through the loader's search path.
export LD_LIBRARY_PATH=$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# Per test file of one rank's log: pass fail error skip. A verbose line is
# "testX (test_comm.TestCommWorld.testX) ... ok"; a test with subtests prints its line with
# no result and then one indented line per failing subtest ("  testX (...) (p=1) ... ERROR"),
# each counted; a module that cannot be imported shows as
# "test_file (unittest.loader._FailedTest.test_file) ... ERROR". The file is the first
# dotted component inside the first parentheses (the test_ module after _FailedTest.).
per_file() { # log
    grep -E '^ *[A-Za-z_][A-Za-z0-9_]* \([A-Za-z0-9_.]+\)( .*)? \.\.\. *(ok|FAIL|ERROR|skipped|expected failure|unexpected success)' "$1" \
        | sed -E 's/^ +//' \
        | sed -E 's/^[^ ]+ \(([A-Za-z0-9_.]+)\).* \.\.\. *(ok|FAIL|ERROR|skipped|expected failure|unexpected success).*/\1 \2/' \
        | sed -E 's/^unittest\.loader\._FailedTest\.(test_[a-z0-9_]+)/\1./; s/^([a-z0-9_]+)\.[^ ]* /\1 /' \
        | awk '{f=$1; r=$2; if (r=="ok") p[f]++; else if (r=="FAIL") x[f]++; else if (r=="ERROR") e[f]++; else s[f]++; files[f]=1}
               END {for (f in files) printf "  %-24s pass %4d fail %3d error %3d skip %3d\n", f, p[f], x[f], e[f], s[f]}' \
        | sort
}

status=0
for np in $NP; do
    logs=$work/np$np
    rm -rf "$logs" && mkdir -p "$logs"
    excl=(-e test_dynproc)
    for e in ${EXCLUDE:-}; do excl+=(-e "$e"); done
    # One log per rank (PMI_RANK from the launcher); -v prints one line per test.
    timeout -k 10 "$TIMEOUT" "$PREFIX/bin/mpirun" -n "$np" sh -c \
        'exec "$0" "$@" >"'"$logs"'/rank$PMI_RANK.log" 2>&1' \
        "$venv/bin/python" "$tests/main.py" -v "${excl[@]}" "$@"
    rc=$?
    [ $rc -ne 0 ] && status=1
    [ $rc -eq 124 ] && echo "-n $np: TIMED OUT after ${TIMEOUT}s"
    echo "== -n $np (exit $rc), logs in $logs"
    for ((r = 0; r < np; r++)); do
        log=$logs/rank$r.log
        echo "  rank $r: $(grep -E '^(Ran|OK|FAILED)' "$log" | tr '\n' ' ')"
    done
    per_file "$logs/rank0.log" >"$logs/files0.txt"
    cat "$logs/files0.txt"
    for ((r = 1; r < np; r++)); do
        per_file "$logs/rank$r.log" >"$logs/files$r.txt"
        if ! cmp -s "$logs/files0.txt" "$logs/files$r.txt"; then
            echo "  rank $r differs:"; diff "$logs/files0.txt" "$logs/files$r.txt" | grep '^>' | sed 's/^> /  /'
        fi
    done
done
exit $status
