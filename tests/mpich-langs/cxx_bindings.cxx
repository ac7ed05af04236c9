// np: 1 2 4
// Built with Debian's mpicxx.mpich using MPICH's C++ bindings (MPI::), run on Ferrite's
// libmpi with MPICH's libmpicxx: a user op written in C++ (called through the C++
// library's trampoline, MPII_Op_set_cxx), a C++ error handler (MPII_Errhandler_set_cxx),
// MPI::ERRORS_THROW_EXCEPTIONS, attributes, point-to-point with a status, and Bcast.
#include <mpi.h>
#include <cstdio>
#include <cstdlib>

static int rank_ = -1;
#define CHECK(c, ...) do { if (!(c)) { std::fprintf(stderr, "FAILED: rank %d line %d: ", rank_, __LINE__); \
    std::fprintf(stderr, __VA_ARGS__); std::fprintf(stderr, "\n"); MPI::COMM_WORLD.Abort(1); } } while (0)

static void maxabs(const void *in, void *inout, int len, const MPI::Datatype &) {
    const int *a = static_cast<const int *>(in);
    int *b = static_cast<int *>(inout);
    for (int i = 0; i < len; i++) {
        int x = a[i] < 0 ? -a[i] : a[i], y = b[i] < 0 ? -b[i] : b[i];
        b[i] = x > y ? a[i] : b[i];
    }
}

static int handled = 0, handled_code = 0;
static void on_error(MPI::Comm &, int *code, ...) { handled++; handled_code = *code; }

int main(int argc, char **argv) {
    MPI::Init(argc, argv);
    rank_ = MPI::COMM_WORLD.Get_rank();
    int n = MPI::COMM_WORLD.Get_size();

    // A commutative user op in C++.
    MPI::Op op;
    op.Init(maxabs, true);
    int v[2] = {rank_ % 2 ? -(rank_ + 10) : rank_ + 10, rank_}, r[2];
    MPI::COMM_WORLD.Allreduce(v, r, 2, MPI::INT, op);
    int want = (n - 1) % 2 ? -(n - 1 + 10) : n - 1 + 10;
    CHECK(r[0] == want && r[1] == n - 1, "user op: %d %d, expected %d %d", r[0], r[1], want, n - 1);
    op.Free();

    // A C++ error handler, then exceptions.
    MPI::Intracomm dup = MPI::COMM_WORLD.Dup();
    MPI::Errhandler eh = MPI::Comm::Create_errhandler(on_error);
    dup.Set_errhandler(eh);
    int x = 0;
    dup.Send(&x, 1, MPI::INT, n + 3, 0);
    CHECK(handled == 1 && MPI::Get_error_class(handled_code) == MPI::ERR_RANK,
          "C++ handler ran %d times, class %d", handled, MPI::Get_error_class(handled_code));
    dup.Set_errhandler(MPI::ERRORS_THROW_EXCEPTIONS);
    bool thrown = false;
    try {
        dup.Send(&x, 1, MPI::INT, n + 3, 0);
    } catch (MPI::Exception &e) {
        thrown = e.Get_error_class() == MPI::ERR_RANK;
    }
    CHECK(thrown, "no MPI::Exception of class ERR_RANK");
    eh.Free();

    // Attributes.
    int key = MPI::Comm::Create_keyval(MPI::Comm::NULL_COPY_FN, MPI::Comm::NULL_DELETE_FN, 0);
    static int value = 99;
    dup.Set_attr(key, &value);
    void *got = 0;
    CHECK(dup.Get_attr(key, &got) && got == &value, "Get_attr");
    dup.Delete_attr(key);
    MPI::Comm::Free_keyval(key);
    void *tagub = 0;
    CHECK(MPI::COMM_WORLD.Get_attr(MPI::TAG_UB, &tagub) && *static_cast<int *>(tagub) >= 32767, "TAG_UB");
    dup.Free();

    // Point-to-point around the ring with a status, then a broadcast.
    double out[3] = {rank_ + 0.25, rank_ + 0.5, rank_ + 0.75}, in[3];
    MPI::Status st;
    MPI::COMM_WORLD.Sendrecv(out, 3, MPI::DOUBLE, (rank_ + 1) % n, 5, in, 3, MPI::DOUBLE,
                             (rank_ + n - 1) % n, 5, st);
    int from = (rank_ + n - 1) % n;
    CHECK(st.Get_source() == from && st.Get_tag() == 5 && st.Get_count(MPI::DOUBLE) == 3, "status");
    CHECK(in[0] == from + 0.25 && in[2] == from + 0.75, "sendrecv data");
    long b = rank_ == 0 ? 123456789012L : 0;
    MPI::COMM_WORLD.Bcast(&b, 1, MPI::LONG, 0);
    CHECK(b == 123456789012L, "bcast");

    MPI::COMM_WORLD.Barrier();
    if (rank_ == 0) std::printf("done: cxx_bindings\n");
    MPI::Finalize();
    return 0;
}
