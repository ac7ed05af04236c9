#!/usr/bin/env bash
# Checks what a program sees when it calls a function Ferrite does not implement yet: the
# generated stub raises MPI_ERR_UNSUPPORTED_OPERATION on the right error handler (the
# communicator argument's, else MPI_COMM_SELF's), so with MPI_ERRORS_RETURN the call returns
# that class and MPI_Error_string names the function; with the default handler the job ends
# with a report naming it. Uses MPI_Comm_connect and MPI_Open_port, which are stubs
# for now (if one becomes real, pick another stub here). Runs as a singleton (no launcher).
# Ends with "abi-stubs: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
PREFIX="${PREFIX:-./build}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat > "$work/stubs.c" <<'EOF'
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int check(const char *func, int rc) {
    int cls = -1, len = 0;
    char msg[MPI_MAX_ERROR_STRING] = "";
    MPI_Error_class(rc, &cls);
    MPI_Error_string(rc, msg, &len);
    int ok = cls == MPI_ERR_UNSUPPORTED_OPERATION && strstr(msg, func) != NULL;
    printf("%s %s: class %d, \"%s\"\n", ok ? "ok" : "FAILED", func, cls, msg);
    return ok;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc > 1) { /* default handler: must not return */
        MPI_Comm c;
        MPI_Comm_connect("p", MPI_INFO_NULL, 0, MPI_COMM_WORLD, &c);
        printf("RETURNED\n");
        return 0;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Comm c;
    int ok = 0;
    ok += check("MPI_Comm_connect",
                MPI_Comm_connect("p", MPI_INFO_NULL, 0, MPI_COMM_WORLD, &c));
    ok += check("MPI_Comm_connect", PMPI_Comm_connect("p", MPI_INFO_NULL, 0, MPI_COMM_SELF, &c));
    char port[MPI_MAX_PORT_NAME];
    ok += check("MPI_Open_port", MPI_Open_port(MPI_INFO_NULL, port));
    MPI_Finalize();
    return ok == 3 ? 0 : 1;
}
EOF
passed=0
failed=0
if ! "$PREFIX/bin/mpicc" -o "$work/stubs" "$work/stubs.c" 2> "$work/cc.err"; then
    cat "$work/cc.err"
    echo "abi-stubs: 0 passed, 1 failed"
    exit 1
fi
if timeout 60 "$work/stubs" > "$work/out" 2>&1; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
    echo "FAILED: stubs with MPI_ERRORS_RETURN"
fi
sed 's/^/  /' "$work/out"
timeout 60 "$work/stubs" fatal > "$work/fatal" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && ! grep -q RETURNED "$work/fatal" &&
    grep -q "MPI_Comm_connect is not implemented by Ferrite" "$work/fatal"; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
    echo "FAILED: a stub under MPI_ERRORS_ARE_FATAL (exit $rc):"
    sed 's/^/  /' "$work/fatal"
fi
echo "abi-stubs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
