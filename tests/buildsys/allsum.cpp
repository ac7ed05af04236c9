// The C++ twin of allsum.c (C API from C++): an allreduce of rank+1 over a std::vector.
#include <mpi.h>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, len;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::vector<char> lib(MPI_MAX_LIBRARY_VERSION_STRING);
    MPI_Get_library_version(lib.data(), &len);
    std::vector<long> mine(4, rank + 1), sum(4, 0);
    MPI_Allreduce(mine.data(), sum.data(), 4, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        std::printf("C++ lib=%.11s size=%d sum=%ld\n", std::string(lib.data()).c_str(), size,
                    sum[3]);
    MPI_Finalize();
    return 0;
}
