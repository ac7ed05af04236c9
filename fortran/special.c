/*
 * Fortran entry points that fortran/gen.py cannot derive from a C prototype: Fortran-specific
 * semantics (attribute values are integers, callbacks take every argument by reference,
 * MPI-1 routines whose Fortran arguments are INTEGER where C has MPI_Aint), the sentinels'
 * common blocks and the string helpers. Compiled twice like the generated mpifort.c (see
 * fortran_glue.h); what exists once is under #ifndef FERRITE_PROFILE.
 */
#include "fortran_glue.h"

/* MPICH's entry points for language bindings, exported by Ferrite's libmpi (not in mpi.h). */
int MPII_Comm_set_attr(MPI_Comm, int, void *, int);
int MPII_Type_set_attr(MPI_Datatype, int, void *, int);
int MPII_Win_set_attr(MPI_Win, int, void *, int);
int MPII_Comm_get_attr(MPI_Comm, int, void *, int *, int);
int MPII_Type_get_attr(MPI_Datatype, int, void *, int *, int);
int MPII_Win_get_attr(MPI_Win, int, void *, int *, int);
typedef int(copy_proxy)(const void *, int, int, void *, int, void *, void **, int *);
typedef int(delete_proxy)(const void *, int, int, int, void *, void *);
void MPII_Keyval_set_proxy(int, copy_proxy *, delete_proxy *);
void MPII_Grequest_set_lang_f77(MPI_Request);

/* How an attribute value was given (MPICH's MPIR_Attr_type). */
enum { ATTR_AINT = 1, ATTR_INT = 3 };

/* Evaluates `call` always; stores its code where mpi_f08 gave no ierror (NULL) too. */
#define SET_ERR(call)                                                                        \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (ierr) *ierr = rc_;                                                               \
    } while (0)

#ifndef FERRITE_PROFILE

struct ferrite_mpipriv1 mpipriv1_ __attribute__((aligned(16)));
struct ferrite_mpipriv2 mpipriv2_ __attribute__((aligned(16)));
MPI_Fint mpifcmb5_ __attribute__((aligned(16))), mpifcmb9_ __attribute__((aligned(16)));
struct ferrite_mpiprivc mpiprivc_ __attribute__((aligned(16)));

/* C code of a mixed-language program compares Fortran statuses with MPI_F_STATUS(ES)_IGNORE:
 * they are the addresses of the common-block sentinels (MPICH's library sets them too). */
__attribute__((constructor)) static void set_f_status_ignore(void)
{
    MPI_F_STATUS_IGNORE = mpipriv1_.status_ignore;
    MPI_F_STATUSES_IGNORE = mpipriv2_.statuses_ignore;
}

size_t ferrite_fstr_len(const char *s, size_t len)
{
    while (len > 0 && s[len - 1] == ' ') len--;
    return len;
}

char *ferrite_fstr_in(const char *s, size_t len)
{
    while (len > 0 && s[len - 1] == ' ') len--;
    while (len > 0 && s[0] == ' ') s++, len--;
    char *c = malloc(len + 1);
    if (c) {
        memcpy(c, s, len);
        c[len] = 0;
    }
    return c;
}

char *ferrite_fstr_buf(size_t len)
{
    size_t n = len > MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING;
    return calloc(n + 1, 1);
}

void ferrite_fstr_out(char *dst, size_t len, char *c)
{
    if (c) {
        size_t n = strnlen(c, len);
        memcpy(dst, c, n);
        memset(dst + n, ' ', len - n);
        free(c);
    }
}

#endif /* !FERRITE_PROFILE */

/* --- Attribute callbacks: Fortran subroutines called through the library's proxies ------- */

/* MPI-2 callbacks (INTEGER(KIND=MPI_ADDRESS_KIND) values, as *_create_keyval makes). */
typedef void(f90_copy)(MPI_Fint *, MPI_Fint *, MPI_Aint *, MPI_Aint *, MPI_Aint *, MPI_Fint *,
                       MPI_Fint *);
typedef void(f90_delete)(MPI_Fint *, MPI_Fint *, MPI_Aint *, MPI_Aint *, MPI_Fint *);
/* MPI-1 callbacks (INTEGER values, MPI_KEYVAL_CREATE). */
typedef void(f77_copy)(MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *,
                       MPI_Fint *);
typedef void(f77_delete)(MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *);

static int f90_copy_proxy(const void *fn, int handle, int keyval, void *extra, int kind,
                          void *value, void **copy, int *flag)
{
    (void)kind;
    MPI_Fint h = handle, k = keyval, fl = 0, ierr = MPI_SUCCESS;
    MPI_Aint e = (MPI_Aint)extra, in = (MPI_Aint)value, out = 0;
    ((f90_copy *)fn)(&h, &k, &e, &in, &out, &fl, &ierr);
    *flag = fl != 0;
    if (fl) *copy = (void *)out;
    return ierr;
}

static int f90_delete_proxy(const void *fn, int handle, int keyval, int kind, void *value,
                            void *extra)
{
    (void)kind;
    MPI_Fint h = handle, k = keyval, ierr = MPI_SUCCESS;
    MPI_Aint e = (MPI_Aint)extra, v = (MPI_Aint)value;
    ((f90_delete *)fn)(&h, &k, &v, &e, &ierr);
    return ierr;
}

static int f77_copy_proxy(const void *fn, int handle, int keyval, void *extra, int kind,
                          void *value, void **copy, int *flag)
{
    (void)kind;
    MPI_Fint h = handle, k = keyval, fl = 0, ierr = MPI_SUCCESS;
    MPI_Fint e = (MPI_Fint)(MPI_Aint)extra, in = (MPI_Fint)(MPI_Aint)value, out = 0;
    ((f77_copy *)fn)(&h, &k, &e, &in, &out, &fl, &ierr);
    *flag = fl != 0;
    if (fl) *copy = (void *)(MPI_Aint)out;
    return ierr;
}

static int f77_delete_proxy(const void *fn, int handle, int keyval, int kind, void *value,
                            void *extra)
{
    (void)kind;
    MPI_Fint h = handle, k = keyval, ierr = MPI_SUCCESS;
    MPI_Fint e = (MPI_Fint)(MPI_Aint)extra, v = (MPI_Fint)(MPI_Aint)value;
    ((f77_delete *)fn)(&h, &k, &v, &e, &ierr);
    return ierr;
}

#ifndef FERRITE_PROFILE

/* The predefined callbacks, with Fortran semantics (MPI_COMM_DUP_FN, ...): Fortran programs
 * pass these procedures, which the proxies above call like any user callback. */
#define FORTRAN_PROC(lower, UPPER, params)                                                   \
    void lower##_ params;                                                                    \
    extern __typeof__(lower##_) lower##__ __attribute__((alias(#lower "_")));                \
    extern __typeof__(lower##_) lower __attribute__((alias(#lower "_")));                    \
    extern __typeof__(lower##_) lower##_upper __asm__(#UPPER)                                \
        __attribute__((alias(#lower "_")));                                                  \
    extern __typeof__(lower##_) p##lower##_ __attribute__((alias(#lower "_")));              \
    extern __typeof__(lower##_) p##lower##__ __attribute__((alias(#lower "_")));             \
    extern __typeof__(lower##_) p##lower __attribute__((alias(#lower "_")));                 \
    extern __typeof__(lower##_) p##lower##_upper __asm__("P" #UPPER)                         \
        __attribute__((alias(#lower "_")));                                                  \
    void lower##_ params

#define F90_COPY_PARAMS                                                                      \
    (MPI_Fint * h, MPI_Fint * k, MPI_Aint * extra, MPI_Aint * in, MPI_Aint * out,            \
     MPI_Fint * flag, MPI_Fint * ierr)
#define F90_DELETE_PARAMS                                                                    \
    (MPI_Fint * h, MPI_Fint * k, MPI_Aint * value, MPI_Aint * extra, MPI_Fint * ierr)
#define F77_COPY_PARAMS                                                                      \
    (MPI_Fint * h, MPI_Fint * k, MPI_Fint * extra, MPI_Fint * in, MPI_Fint * out,            \
     MPI_Fint * flag, MPI_Fint * ierr)
#define F77_DELETE_PARAMS                                                                    \
    (MPI_Fint * h, MPI_Fint * k, MPI_Fint * value, MPI_Fint * extra, MPI_Fint * ierr)
#define DUP_BODY                                                                             \
    {                                                                                        \
        (void)h, (void)k, (void)extra;                                                       \
        *out = *in;                                                                          \
        *flag = 1;                                                                           \
        *ierr = MPI_SUCCESS;                                                                 \
    }
#define NULL_COPY_BODY                                                                       \
    {                                                                                        \
        (void)h, (void)k, (void)extra, (void)in, (void)out;                                  \
        *flag = 0;                                                                           \
        *ierr = MPI_SUCCESS;                                                                 \
    }
#define NULL_DELETE_BODY                                                                     \
    {                                                                                        \
        (void)h, (void)k, (void)value, (void)extra;                                          \
        *ierr = MPI_SUCCESS;                                                                 \
    }

FORTRAN_PROC(mpi_comm_dup_fn, MPI_COMM_DUP_FN, F90_COPY_PARAMS) DUP_BODY
FORTRAN_PROC(mpi_type_dup_fn, MPI_TYPE_DUP_FN, F90_COPY_PARAMS) DUP_BODY
FORTRAN_PROC(mpi_win_dup_fn, MPI_WIN_DUP_FN, F90_COPY_PARAMS) DUP_BODY
FORTRAN_PROC(mpi_comm_null_copy_fn, MPI_COMM_NULL_COPY_FN, F90_COPY_PARAMS) NULL_COPY_BODY
FORTRAN_PROC(mpi_type_null_copy_fn, MPI_TYPE_NULL_COPY_FN, F90_COPY_PARAMS) NULL_COPY_BODY
FORTRAN_PROC(mpi_win_null_copy_fn, MPI_WIN_NULL_COPY_FN, F90_COPY_PARAMS) NULL_COPY_BODY
FORTRAN_PROC(mpi_comm_null_delete_fn, MPI_COMM_NULL_DELETE_FN, F90_DELETE_PARAMS)
NULL_DELETE_BODY
FORTRAN_PROC(mpi_type_null_delete_fn, MPI_TYPE_NULL_DELETE_FN, F90_DELETE_PARAMS)
NULL_DELETE_BODY
FORTRAN_PROC(mpi_win_null_delete_fn, MPI_WIN_NULL_DELETE_FN, F90_DELETE_PARAMS)
NULL_DELETE_BODY
FORTRAN_PROC(mpi_dup_fn, MPI_DUP_FN, F77_COPY_PARAMS) DUP_BODY
FORTRAN_PROC(mpi_null_copy_fn, MPI_NULL_COPY_FN, F77_COPY_PARAMS) NULL_COPY_BODY
FORTRAN_PROC(mpi_null_delete_fn, MPI_NULL_DELETE_FN, F77_DELETE_PARAMS) NULL_DELETE_BODY

/* MPI_CONVERSION_FN_NULL: a marker for MPI_REGISTER_DATAREP, never called. */
FORTRAN_PROC(mpi_conversion_fn_null, MPI_CONVERSION_FN_NULL, (void)) {}

#endif /* !FERRITE_PROFILE */

/* --- Environment ----------------------------------------------------------------------- */

void FN(init)(MPI_Fint *ierr)
{
    SET_ERR(CALL(Init)(NULL, NULL));
}
ALIASES(init, INIT)

void FN(init_thread)(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)
{
    SET_ERR(CALL(Init_thread)(NULL, NULL, *required, provided));
}
ALIASES(init_thread, INIT_THREAD)

double FN(wtime)(void)
{
    return CALL(Wtime)();
}
ALIASES(wtime, WTIME)

double FN(wtick)(void)
{
    return CALL(Wtick)();
}
ALIASES(wtick, WTICK)

void FN(pcontrol)(MPI_Fint *level)
{
    CALL(Pcontrol)(*level);
}
ALIASES(pcontrol, PCONTROL)

MPI_Aint FN(aint_add)(MPI_Aint *base, MPI_Aint *disp)
{
    return CALL(Aint_add)(*base, *disp);
}
ALIASES(aint_add, AINT_ADD)

MPI_Aint FN(aint_diff)(MPI_Aint *a, MPI_Aint *b)
{
    return CALL(Aint_diff)(*a, *b);
}
ALIASES(aint_diff, AINT_DIFF)

/* MPI_F_SYNC_REG: its only effect is that the compiler must assume `buf` is used. */
void FN(f_sync_reg)(void *buf)
{
    (void)buf;
}
ALIASES(f_sync_reg, F_SYNC_REG)

void FN(info_create_env)(MPI_Fint *info, MPI_Fint *ierr)
{
    SET_ERR(CALL(Info_create_env)(0, NULL, info));
}
ALIASES(info_create_env, INFO_CREATE_ENV)

/* --- Dynamic processes: CHARACTER arrays of arguments, each list ended by a blank one ---- */

#define ARGV_NULL_F ((const char *)&mpiprivc_.argv_null)

/* `n` strings of `len` characters from `a`, every `stride`-th, up to the first blank one,
 * as a NULL-terminated C argv (one allocation). */
static char **argv_in(const char *a, size_t len, size_t stride)
{
    size_t n = 0;
    while (ferrite_fstr_len(a + n * stride * len, len) > 0) n++;
    char **v = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; v && i < n; i++) v[i] = ferrite_fstr_in(a + i * stride * len, len);
    return v;
}

static void argv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

void FN(comm_spawn)(const char *command, const char *argv, MPI_Fint *maxprocs, MPI_Fint *info,
                    MPI_Fint *root, MPI_Fint *comm, MPI_Fint *intercomm, MPI_Fint *errcodes,
                    MPI_Fint *ierr, size_t command_len, size_t argv_len)
{
    char *c = ferrite_fstr_in(command, command_len);
    char **v = argv == ARGV_NULL_F ? NULL : argv_in(argv, argv_len, 1);
    SET_ERR(CALL(Comm_spawn)(c, v, *maxprocs, *info, *root, *comm, intercomm,
                             FERRCODES(errcodes)));
    argv_free(v);
    free(c);
}
ALIASES(comm_spawn, COMM_SPAWN)

/* array_of_argv is argv(count, *): argument j of command i at (i, j), column-major. */
void FN(comm_spawn_multiple)(MPI_Fint *count, const char *commands, const char *argvs,
                             MPI_Fint *maxprocs, MPI_Fint *infos, MPI_Fint *root,
                             MPI_Fint *comm, MPI_Fint *intercomm, MPI_Fint *errcodes,
                             MPI_Fint *ierr, size_t commands_len, size_t argvs_len)
{
    int n = *count > 0 ? *count : 0;
    char **c = calloc((size_t)n + 1, sizeof(char *));
    char ***v = argvs == (const char *)&mpiprivc_.argvs_null
                    ? NULL
                    : calloc((size_t)n + 1, sizeof(char **));
    for (int i = 0; c && i < n; i++) {
        c[i] = ferrite_fstr_in(commands + (size_t)i * commands_len, commands_len);
        if (v) v[i] = argv_in(argvs + (size_t)i * argvs_len, argvs_len, (size_t)n);
    }
    SET_ERR(c ? CALL(Comm_spawn_multiple)(*count, c, v, maxprocs, infos, *root, *comm,
                                          intercomm, FERRCODES(errcodes))
              : MPI_ERR_NO_MEM);
    for (int i = 0; i < n; i++) {
        if (c) free(c[i]);
        if (v) argv_free(v[i]);
    }
    free(c);
    free(v);
}
ALIASES(comm_spawn_multiple, COMM_SPAWN_MULTIPLE)

/* The buffer's address goes nowhere: Fortran cannot use it (MPICH does the same). */
void FN(buffer_detach)(void *buffer_addr, MPI_Fint *size, MPI_Fint *ierr)
{
    (void)buffer_addr;
    void *b;
    SET_ERR(CALL(Buffer_detach)(&b, size));
}
ALIASES(buffer_detach, BUFFER_DETACH)

void FN(comm_detach_buffer)(MPI_Fint *comm, void *buffer_addr, MPI_Fint *size, MPI_Fint *ierr)
{
    (void)buffer_addr;
    void *b;
    SET_ERR(CALL(Comm_detach_buffer)(*comm, &b, size));
}
ALIASES(comm_detach_buffer, COMM_DETACH_BUFFER)

void FN(session_detach_buffer)(MPI_Fint *session, void *buffer_addr, MPI_Fint *size,
                               MPI_Fint *ierr)
{
    (void)buffer_addr;
    void *b;
    SET_ERR(CALL(Session_detach_buffer)(*session, &b, size));
}
ALIASES(session_detach_buffer, SESSION_DETACH_BUFFER)

void FN(grequest_start)(MPI_Grequest_query_function *query, MPI_Grequest_free_function *free_fn,
                        MPI_Grequest_cancel_function *cancel, MPI_Aint *extra,
                        MPI_Fint *request, MPI_Fint *ierr)
{
    /* The callbacks get extra_state by reference: the library passes them this address
     * (as MPICH's Fortran library does, so the variable must outlive the request). */
    int rc = CALL(Grequest_start)(query, free_fn, cancel, extra, request);
    if (rc == MPI_SUCCESS) MPII_Grequest_set_lang_f77(*request);
    SET_ERR(rc);
}
ALIASES(grequest_start, GREQUEST_START)

/* --- Attributes: values are integers (MPI 4.1 section 19.3.7) --------------------------- */

#define KEYVAL_CREATE(lower, UPPER, Cname, ctype, dtype)                            \
    void FN(lower)(ctype * copy_fn, dtype * delete_fn, MPI_Fint * keyval, MPI_Aint * extra,  \
                   MPI_Fint * ierr)                                                          \
    {                                                                                        \
        int rc = CALL(Cname)(copy_fn, delete_fn, keyval, (void *)*extra);                    \
        if (rc == MPI_SUCCESS) MPII_Keyval_set_proxy(*keyval, f90_copy_proxy, f90_delete_proxy);                    \
        SET_ERR(rc);                                                                         \
    }                                                                                        \
    ALIASES(lower, UPPER)

KEYVAL_CREATE(comm_create_keyval, COMM_CREATE_KEYVAL, Comm_create_keyval,
              MPI_Comm_copy_attr_function, MPI_Comm_delete_attr_function)
KEYVAL_CREATE(type_create_keyval, TYPE_CREATE_KEYVAL, Type_create_keyval,
              MPI_Type_copy_attr_function, MPI_Type_delete_attr_function)
KEYVAL_CREATE(win_create_keyval, WIN_CREATE_KEYVAL, Win_create_keyval,
              MPI_Win_copy_attr_function, MPI_Win_delete_attr_function)

void FN(keyval_create)(MPI_Copy_function *copy_fn, MPI_Delete_function *delete_fn,
                       MPI_Fint *keyval, MPI_Fint *extra, MPI_Fint *ierr)
{
    int rc = CALL(Comm_create_keyval)(copy_fn, delete_fn, keyval, (void *)(MPI_Aint)*extra);
    if (rc == MPI_SUCCESS) MPII_Keyval_set_proxy(*keyval, f77_copy_proxy, f77_delete_proxy);
    SET_ERR(rc);
}
ALIASES(keyval_create, KEYVAL_CREATE)

#define SET_ATTR(lower, UPPER, who)                                                          \
    void FN(lower)(MPI_Fint * h, MPI_Fint * keyval, MPI_Aint * value, MPI_Fint * ierr)       \
    {                                                                                        \
        SET_ERR(MPII_##who##_set_attr(*h, *keyval, (void *)*value, ATTR_AINT));              \
    }                                                                                        \
    ALIASES(lower, UPPER)
#define GET_ATTR(lower, UPPER, who)                                                          \
    void FN(lower)(MPI_Fint * h, MPI_Fint * keyval, MPI_Aint * value, MPI_Fint * flag,       \
                   MPI_Fint * ierr)                                                          \
    {                                                                                        \
        SET_ERR(MPII_##who##_get_attr(*h, *keyval, value, flag, ATTR_AINT));                 \
    }                                                                                        \
    ALIASES(lower, UPPER)

SET_ATTR(comm_set_attr, COMM_SET_ATTR, Comm)
SET_ATTR(type_set_attr, TYPE_SET_ATTR, Type)
SET_ATTR(win_set_attr, WIN_SET_ATTR, Win)
GET_ATTR(comm_get_attr, COMM_GET_ATTR, Comm)
GET_ATTR(type_get_attr, TYPE_GET_ATTR, Type)
GET_ATTR(win_get_attr, WIN_GET_ATTR, Win)

void FN(attr_put)(MPI_Fint *comm, MPI_Fint *keyval, MPI_Fint *value, MPI_Fint *ierr)
{
    SET_ERR(MPII_Comm_set_attr(*comm, *keyval, (void *)(MPI_Aint)*value, ATTR_INT));
}
ALIASES(attr_put, ATTR_PUT)

void FN(attr_get)(MPI_Fint *comm, MPI_Fint *keyval, MPI_Fint *value, MPI_Fint *flag,
                  MPI_Fint *ierr)
{
    MPI_Aint v = 0;
    int rc = MPII_Comm_get_attr(*comm, *keyval, &v, flag, ATTR_INT);
    if (rc == MPI_SUCCESS && *flag) *value = (MPI_Fint)v;
    SET_ERR(rc);
}
ALIASES(attr_get, ATTR_GET)

/* --- MPI-1 routines with INTEGER addresses (removed from MPI-3, still in MPICH's library) -- */

void FN(address)(void *location, MPI_Fint *address, MPI_Fint *ierr)
{
    MPI_Aint a = 0;
    int rc = CALL(Get_address)(FBUF(location), &a);
    *address = (MPI_Fint)a;
    SET_ERR(rc);
}
ALIASES(address, ADDRESS)

static int extent_of(MPI_Fint dt, MPI_Aint *lb, MPI_Aint *extent)
{
    return MPI_Type_get_extent(dt, lb, extent);
}

void FN(type_extent)(MPI_Fint *datatype, MPI_Fint *extent, MPI_Fint *ierr)
{
    MPI_Aint lb = 0, ext = 0;
    int rc = extent_of(*datatype, &lb, &ext);
    *extent = (MPI_Fint)ext;
    SET_ERR(rc);
}
ALIASES(type_extent, TYPE_EXTENT)

void FN(type_lb)(MPI_Fint *datatype, MPI_Fint *displacement, MPI_Fint *ierr)
{
    MPI_Aint lb = 0, ext = 0;
    int rc = extent_of(*datatype, &lb, &ext);
    *displacement = (MPI_Fint)lb;
    SET_ERR(rc);
}
ALIASES(type_lb, TYPE_LB)

void FN(type_ub)(MPI_Fint *datatype, MPI_Fint *displacement, MPI_Fint *ierr)
{
    MPI_Aint lb = 0, ext = 0;
    int rc = extent_of(*datatype, &lb, &ext);
    *displacement = (MPI_Fint)(lb + ext);
    SET_ERR(rc);
}
ALIASES(type_ub, TYPE_UB)

void FN(type_hvector)(MPI_Fint *count, MPI_Fint *blocklength, MPI_Fint *stride,
                      MPI_Fint *oldtype, MPI_Fint *newtype, MPI_Fint *ierr)
{
    SET_ERR(CALL(Type_create_hvector)(*count, *blocklength, *stride, *oldtype, newtype));
}
ALIASES(type_hvector, TYPE_HVECTOR)

static MPI_Aint *widen(const MPI_Fint *a, MPI_Fint n)
{
    MPI_Aint *w = malloc(sizeof(MPI_Aint) * (size_t)(n > 0 ? n : 1));
    if (w)
        for (MPI_Fint i = 0; i < n; i++) w[i] = a[i];
    return w;
}

void FN(type_hindexed)(MPI_Fint *count, MPI_Fint *blocklengths, MPI_Fint *displacements,
                       MPI_Fint *oldtype, MPI_Fint *newtype, MPI_Fint *ierr)
{
    MPI_Aint *d = widen(displacements, *count);
    SET_ERR(d ? CALL(Type_create_hindexed)(*count, blocklengths, d, *oldtype, newtype)
              : MPI_ERR_NO_MEM);
    free(d);
}
ALIASES(type_hindexed, TYPE_HINDEXED)

void FN(type_struct)(MPI_Fint *count, MPI_Fint *blocklengths, MPI_Fint *displacements,
                     MPI_Fint *types, MPI_Fint *newtype, MPI_Fint *ierr)
{
    MPI_Aint *d = widen(displacements, *count);
    SET_ERR(d ? CALL(Type_create_struct)(*count, blocklengths, d, types, newtype)
              : MPI_ERR_NO_MEM);
    free(d);
}
ALIASES(type_struct, TYPE_STRUCT)
