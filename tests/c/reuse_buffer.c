/* np: 2 */
/* A send buffer freed and allocated again at the same address between two large
 * (rendezvous) sends: the second message must carry the new contents, not the old pages a
 * cached registration (ofi's registration cache, RDMA read) or mapping could still name.
 * Three ways to get the same address back: malloc/free of a large block (glibc maps and
 * unmaps it), mmap/munmap/mmap at the same address, and realloc-free-malloc of a small-heap
 * block. Each round also sends from a fresh offset inside the buffer (a partial hit).
 * Under Ferrite with ofi the sender also checks, through MPI_T, that the munmap dropped the
 * cached registration of the old mapping (libmpi's munmap hook), and prints the cache's hit
 * rate with REUSE_BUFFER_VERBOSE. */
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

/* Ferrite's counter `name` in session s (started at once), or -1 where there is none. */
static int counter(MPI_T_pvar_session s, const char *name, MPI_T_pvar_handle *h)
{
    int i, count;
    if (!t_is_ferrite() || MPI_T_pvar_get_index(name, MPI_T_PVAR_CLASS_COUNTER, &i) != MPI_SUCCESS)
        return -1;
    CHECK(MPI_T_pvar_handle_alloc(s, i, NULL, h, &count) == MPI_SUCCESS, "%s: handle", name);
    CHECK(MPI_T_pvar_start(s, *h) == MPI_SUCCESS, "%s: start", name);
    return 0;
}

static unsigned long long value(MPI_T_pvar_session s, MPI_T_pvar_handle h)
{
    unsigned long long v = 0;
    CHECK(MPI_T_pvar_read(s, h, &v) == MPI_SUCCESS, "pvar read");
    return v;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int same = 0, provided;
    MPI_T_pvar_session s;
    MPI_T_pvar_handle hits, misses, inval;
    CHECK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS, "MPI_T_init_thread");
    CHECK(MPI_T_pvar_session_create(&s) == MPI_SUCCESS, "pvar session");
    int counted = counter(s, "ofi_mr_cache_hits", &hits) == 0 &&
                  counter(s, "ofi_mr_cache_misses", &misses) == 0 &&
                  counter(s, "ofi_mr_cache_invalidations", &inval) == 0;

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
    /* The sender's cache (ofi) registered the first mapping: the munmap must have dropped it. */
    if (counted && t_rank == 0 && value(s, misses) > 0)
        CHECK(value(s, inval) >= 1, "munmap left the old mapping's registration in the cache "
              "(%llu invalidated)", value(s, inval));
    munmap(m2, N);

    /* A heap block under the mmap threshold, grown and shrunk. */
    unsigned char *h = malloc(100000);
    round_(h, 100000, 6, "heap, first");
    free(h);
    h = malloc(100000);
    round_(h, 100000, 7, "heap, after free and malloc");
    free(h);

    if (t_rank == 0 && getenv("REUSE_BUFFER_VERBOSE")) {
        printf("same address again: %d of 2\n", same);
        if (counted) {
            unsigned long long h = value(s, hits), m = value(s, misses);
            printf("registration cache: hits %llu misses %llu invalidated %llu (hit rate %.0f%%)\n",
                   h, m, value(s, inval), h + m ? 100.0 * h / (h + m) : 0.0);
        }
    }
    MPI_T_pvar_session_free(&s);
    MPI_T_finalize();
    t_finish("reuse_buffer");
    return 0;
}
