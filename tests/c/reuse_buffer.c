/* np: 2 */
/* A send buffer freed and allocated again at the same address between two large
 * (rendezvous) sends: the second message must carry the new contents, not the old pages a
 * cached registration (ofi's registration cache, RDMA read) or mapping could still name.
 * Three ways to get the same address back: malloc/free of a large block (glibc maps and
 * unmaps it), mmap/munmap/mmap at the same address, and realloc-free-malloc of a small-heap
 * block. Each round also sends from a fresh offset inside the buffer (a partial hit). */
#include "common.h"
#include <stdint.h>
#include <sys/mman.h>

#define N (1 << 20)

static void fill(unsigned char *b, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++) b[i] = t_byte((unsigned long)seed, i);
}

static void check(const unsigned char *b, size_t n, int seed, const char *what)
{
    for (size_t i = 0; i < n; i++)
        CHECK(b[i] == t_byte((unsigned long)seed, i),
              "%s: byte %zu of %zu is %d, want %d (seed %d)", what, i, n, b[i],
              t_byte((unsigned long)seed, i), seed);
}

/* Rank 0 sends `n` bytes of b seeded `seed`; rank 1 receives and checks. */
static void round_(unsigned char *b, size_t n, int seed, const char *what)
{
    if (t_rank == 0) {
        fill(b, n, seed);
        MPI_CHECK(MPI_Send(b, (int)n, MPI_BYTE, 1, seed, MPI_COMM_WORLD));
    } else if (t_rank == 1) {
        unsigned char *r = malloc(n);
        memset(r, 0xee, n);
        MPI_CHECK(MPI_Recv(r, (int)n, MPI_BYTE, 0, seed, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        check(r, n, seed, what);
        free(r);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int same = 0;

    /* malloc'd large block, freed, allocated again. */
    unsigned char *a = malloc(N);
    round_(a, N, 1, "malloc, first");
    round_(a + 4096, N / 2, 2, "malloc, inside");
    uintptr_t old = (uintptr_t)a;
    free(a);
    a = malloc(N);
    same += (uintptr_t)a == old;
    round_(a, N, 3, "malloc, after free and malloc");
    free(a);

    /* mmap, munmap, mmap again at the same address. */
    unsigned char *m = mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED, "mmap failed");
    round_(m, N, 4, "mmap, first");
    munmap(m, N);
    unsigned char *m2 = mmap(m, N, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m2 != MAP_FAILED, "mmap again failed");
    same += m2 == m;
    round_(m2, N, 5, "mmap, after munmap and mmap at the same address");
    munmap(m2, N);

    /* A heap block under the mmap threshold, grown and shrunk. */
    unsigned char *h = malloc(100000);
    round_(h, 100000, 6, "heap, first");
    free(h);
    h = malloc(100000);
    round_(h, 100000, 7, "heap, after free and malloc");
    free(h);

    if (t_rank == 0 && getenv("REUSE_BUFFER_VERBOSE"))
        printf("same address again: %d of 2\n", same);
    t_finish("reuse_buffer");
    return 0;
}
