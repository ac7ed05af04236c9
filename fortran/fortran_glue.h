/*
 * What the Fortran entry points share (generated mpifort.c and hand-written special.c).
 *
 * Each source is compiled twice: without FERRITE_PROFILE it defines mpi_x_ calling MPI_X,
 * with it pmpi_x_ calling PMPI_X (so a C tool intercepting MPI_X sees Fortran calls too, as
 * with MPICH). Every entry is also exported under the other names gfortran and other
 * compilers call (mpi_x, mpi_x__, MPI_X), as MPICH's libmpifort does.
 *
 * Handles: MPI_Fint handles are the C handles (MPICH's ABI), so handle arrays, int arrays
 * and statuses (5 ints, MPI_Status's layout) pass through. LOGICAL: gfortran's .TRUE. is 1,
 * C's true, so flags pass through as well.
 */
#ifndef FERRITE_FORTRAN_GLUE_H
#define FERRITE_FORTRAN_GLUE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"

#ifdef FERRITE_PROFILE
#define FN(n) pmpi_##n##_
#define CALL(n) PMPI_##n
#define ALIASES(n, N)                                                                        \
    extern __typeof__(pmpi_##n##_) pmpi_##n##__ __attribute__((alias("pmpi_" #n "_")));     \
    extern __typeof__(pmpi_##n##_) pmpi_##n __attribute__((alias("pmpi_" #n "_")));         \
    extern __typeof__(pmpi_##n##_) pmpi_##n##_upper __asm__("PMPI_" #N)                       \
        __attribute__((alias("pmpi_" #n "_")));
#else
#define FN(n) mpi_##n##_
#define CALL(n) MPI_##n
#define ALIASES(n, N)                                                                        \
    extern __typeof__(mpi_##n##_) mpi_##n##__ __attribute__((alias("mpi_" #n "_")));         \
    extern __typeof__(mpi_##n##_) mpi_##n __attribute__((alias("mpi_" #n "_")));             \
    extern __typeof__(mpi_##n##_) mpi_##n##_upper __asm__("MPI_" #N)                         \
        __attribute__((alias("mpi_" #n "_")));
#endif

/* The sentinels of mpif.h / `use mpi`: Fortran common blocks (MPICH's names and layout),
 * defined in special.c. `use mpi_f08` binds its sentinels to objects of the C library. */
struct ferrite_mpipriv1 {
    MPI_Fint bottom, in_place, status_ignore[MPI_F_STATUS_SIZE];
};
struct ferrite_mpipriv2 {
    MPI_Fint statuses_ignore[MPI_F_STATUS_SIZE], errcodes_ignore;
};
struct ferrite_mpiprivc {
    char argvs_null, argv_null;
};
extern struct ferrite_mpipriv1 mpipriv1_;
extern struct ferrite_mpiprivc mpiprivc_;
extern struct ferrite_mpipriv2 mpipriv2_;
extern MPI_Fint mpifcmb5_, mpifcmb9_;
extern int MPIR_F08_MPI_IN_PLACE, MPIR_F08_MPI_BOTTOM;
extern MPI_F08_status MPIR_F08_MPI_STATUS_IGNORE_OBJ, MPIR_F08_MPI_STATUSES_IGNORE_OBJ[1];

static inline void *FBUF(void *p)
{
    if (p == &mpipriv1_.bottom || p == &MPIR_F08_MPI_BOTTOM) return MPI_BOTTOM;
    if (p == &mpipriv1_.in_place || p == &MPIR_F08_MPI_IN_PLACE) return MPI_IN_PLACE;
    return p;
}
static inline MPI_Status *FSTATUS(MPI_Fint *p)
{
    if (p == mpipriv1_.status_ignore || (void *)p == &MPIR_F08_MPI_STATUS_IGNORE_OBJ)
        return MPI_STATUS_IGNORE;
    return (MPI_Status *)p;
}
static inline MPI_Status *FSTATUSES(MPI_Fint *p)
{
    if (p == mpipriv2_.statuses_ignore || (void *)p == MPIR_F08_MPI_STATUSES_IGNORE_OBJ)
        return MPI_STATUSES_IGNORE;
    return (MPI_Status *)p;
}
static inline int *FERRCODES(MPI_Fint *p)
{
    return p == &mpipriv2_.errcodes_ignore ? MPI_ERRCODES_IGNORE : p;
}
static inline int *FWEIGHTS(MPI_Fint *p)
{
    if (p == &mpifcmb5_) return MPI_UNWEIGHTED;
    if (p == &mpifcmb9_) return MPI_WEIGHTS_EMPTY;
    return p; /* mpi_f08's sentinels are the C objects themselves */
}

/* MPI-IO is not implemented by Ferrite (its calls fail with MPI_ERR_UNSUPPORTED_OPERATION):
 * a Fortran file handle carries the C pointer's low bits. */
#define FILE_F2C(f) ((MPI_File)(intptr_t)(f))
#define FILE_C2F(f) ((MPI_Fint)(intptr_t)(f))

/* The length of a Fortran CHARACTER argument without its trailing blanks. */
size_t ferrite_fstr_len(const char *s, size_t len);
/* A Fortran CHARACTER argument as a C string: leading and trailing blanks dropped. */
char *ferrite_fstr_in(const char *s, size_t len);
/* A buffer for a C string the callee writes, big enough for any MPI_MAX_* string. */
char *ferrite_fstr_buf(size_t len);
/* Copies a C string into a Fortran CHARACTER argument, blank-padded, and frees it. */
void ferrite_fstr_out(char *dst, size_t len, char *c);
#define fstr_in ferrite_fstr_in
#define fstr_buf ferrite_fstr_buf
#define fstr_out ferrite_fstr_out

#endif
