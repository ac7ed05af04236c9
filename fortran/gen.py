#!/usr/bin/env python3
"""Generates Ferrite's Fortran bindings from include/mpi.h (the one API list).

    fortran/gen.py include/mpi.h OUTDIR

writes into OUTDIR:
  mpif.h            constants, sentinels (common blocks, as MPICH's) and EXTERNALs;
                    fixed-form compatible (no line over 72 columns, no continuation lines)
  mpi.f90           `use mpi`: constants, sentinels, explicit interfaces
  mpi_sizeof.f90    MPI_SIZEOF (module ferrite_mpi_sizeof, used by both modules)
  mpi_f08_types.f90 mpi_f08's handle types, MPI_Status, typed constants
  mpi_f08.f90       `use mpi_f08`: sentinels and the routines' interfaces
  mpifort.c         the Fortran entry points (mpi_send_, ...) as C wrappers over the C API;
                    compiled twice, once with -DFERRITE_PROFILE for the pmpi_ names
  f08-covered.txt   the routines mpi_f08 provides

Every C function of mpi.h gets a Fortran binding by the rules in `classify` unless it is
listed in SKIP (C-only: conversion functions, MPI_T, large-count `_c` variants, which
Fortran reaches through mpi_f08 only in MPI 4 and Ferrite's mpi_f08 does not provide yet)
or HAND (written by hand in fortran/special.c: callbacks with Fortran semantics,
attributes, MPI-1 routines whose Fortran arguments are INTEGER where C has MPI_Aint).
"""
import os
import re
import sys

HANDLES = ["MPI_Comm", "MPI_Group", "MPI_Datatype", "MPI_Op", "MPI_Errhandler", "MPI_Request",
           "MPI_Message", "MPI_Info", "MPI_Win", "MPI_Session", "MPI_File"]
KINDS = {"MPI_Aint": "MPI_ADDRESS_KIND", "MPI_Count": "MPI_COUNT_KIND",
         "MPI_Offset": "MPI_OFFSET_KIND"}
# int arguments that are Fortran LOGICALs (gfortran: .TRUE. is 1, as C's true).
LOGICAL_NAMES = {"flag", "weighted", "commute", "high", "reorder", "periods", "remain_dims"}
# int[] arguments that may be the MPI_UNWEIGHTED / MPI_WEIGHTS_EMPTY sentinels.
WEIGHT_NAMES = {"sourceweights", "destweights", "weights"}
# Functions written by hand in special.c (the generator still emits their interfaces when
# listed in HAND_IFACE).
HAND = {
    "MPI_Init", "MPI_Init_thread", "MPI_Pcontrol", "MPI_Wtime", "MPI_Wtick",
    "MPI_Comm_create_keyval", "MPI_Type_create_keyval", "MPI_Win_create_keyval",
    "MPI_Keyval_create", "MPI_Comm_set_attr", "MPI_Type_set_attr", "MPI_Win_set_attr",
    "MPI_Comm_get_attr", "MPI_Type_get_attr", "MPI_Win_get_attr", "MPI_Attr_put",
    "MPI_Attr_get", "MPI_Buffer_detach", "MPI_Comm_detach_buffer", "MPI_Session_detach_buffer",
    "MPI_Address", "MPI_Type_extent", "MPI_Type_lb", "MPI_Type_ub", "MPI_Type_hvector",
    "MPI_Type_hindexed", "MPI_Type_struct", "MPI_Grequest_start", "MPI_Info_create_env",
    "MPI_Comm_spawn", "MPI_Comm_spawn_multiple",
}
SKIP_PREFIX = ("MPI_T_",)
SKIP = {
    "MPI_Register_datarep", "MPI_Status_c2f", "MPI_Status_f2c", "MPI_Status_c2f08",
    "MPI_Status_f082c", "MPI_Status_f082f", "MPI_Status_f2f08",
}
# Predefined attribute keyvals: Fortran's is C's + 1 (MPICH's numbering).
FORTRAN_KEYVALS = {"MPI_TAG_UB", "MPI_HOST", "MPI_IO", "MPI_WTIME_IS_GLOBAL",
                   "MPI_UNIVERSE_SIZE", "MPI_LASTUSEDCODE", "MPI_APPNUM", "MPI_WIN_BASE",
                   "MPI_WIN_SIZE", "MPI_WIN_DISP_UNIT", "MPI_WIN_CREATE_FLAVOR",
                   "MPI_WIN_MODEL"}
# mpi_f08: routines covered (the rest of the API is reached with `use mpi`). Callback
# routines (MPI_Op_create, ...) are in fortran/f08_callbacks.f90.
F08_PREFIXES = (
    "MPI_Init", "MPI_Finalize", "MPI_Initialized", "MPI_Finalized", "MPI_Abort",
    "MPI_Comm_", "MPI_Group_", "MPI_Intercomm_", "MPI_Cart", "MPI_Graph", "MPI_Dims_create",
    "MPI_Dist_graph", "MPI_Topo_test",
    "MPI_Send", "MPI_Recv", "MPI_Bsend", "MPI_Ssend", "MPI_Rsend", "MPI_Isend", "MPI_Irecv",
    "MPI_Ibsend", "MPI_Issend", "MPI_Irsend", "MPI_Sendrecv", "MPI_Isendrecv", "MPI_Probe",
    "MPI_Iprobe", "MPI_Mprobe", "MPI_Improbe", "MPI_Mrecv", "MPI_Imrecv", "MPI_Start",
    "MPI_Wait", "MPI_Test", "MPI_Request_", "MPI_Cancel", "MPI_Get_count", "MPI_Get_elements",
    "MPI_Buffer_attach", "MPI_Status_set",
    "MPI_Barrier", "MPI_Bcast", "MPI_Gather", "MPI_Scatter", "MPI_Allgather", "MPI_Alltoall",
    "MPI_Reduce", "MPI_Allreduce", "MPI_Scan", "MPI_Exscan", "MPI_Ibarrier", "MPI_Ibcast",
    "MPI_Igather", "MPI_Iscatter", "MPI_Iallgather", "MPI_Ialltoall", "MPI_Ireduce",
    "MPI_Iallreduce", "MPI_Iscan", "MPI_Iexscan", "MPI_Neighbor_", "MPI_Ineighbor_",
    "MPI_Type_", "MPI_Get_address", "MPI_Pack", "MPI_Unpack", "MPI_Op_", "MPI_Aint_",
    "MPI_Errhandler_free", "MPI_Error_", "MPI_Add_error", "MPI_Get_processor_name",
    "MPI_Get_version", "MPI_Get_library_version", "MPI_Query_thread", "MPI_Is_thread_main",
    "MPI_Info_", "MPI_Alloc_mem", "MPI_Free_mem", "MPI_Win_", "MPI_Put", "MPI_Get",
    "MPI_Accumulate", "MPI_Get_accumulate", "MPI_Fetch_and_op", "MPI_Compare_and_swap",
    "MPI_Rput", "MPI_Rget", "MPI_Raccumulate", "MPI_Rget_accumulate", "MPI_Wtime",
    "MPI_Wtick", "MPI_Session_", "MPI_Grequest_complete", "MPI_Group_from_session_pset",
    "MPI_Comm_create_from_group",
)
F08_DEPRECATED = {"MPI_Type_extent", "MPI_Type_lb", "MPI_Type_ub", "MPI_Type_hvector",
                  "MPI_Type_hindexed", "MPI_Type_struct", "MPI_Errhandler_create",
                  "MPI_Errhandler_set", "MPI_Errhandler_get"}


def strip_comments(src):
    return re.sub(r"/\*.*?\*/", "", src, flags=re.S)


def parse(path):
    src = strip_comments(open(path).read())
    consts = {}
    order = []
    for m in re.finditer(r"^#define\s+(MPI_\w+)\s+(.+?)\s*$", src, flags=re.M):
        consts[m.group(1)] = m.group(2)
        order.append(m.group(1))
    funcs = []
    for m in re.finditer(r"FERRITE_API\(\s*([^,]+?)\s*,\s*(\w+)\s*,\s*\((.*?)\)\s*\)\s*;",
                         src, flags=re.S):
        ret, name, params = m.group(1), m.group(2), " ".join(m.group(3).split())
        args = []
        if params != "void":
            for a in params.split(","):
                a = a.strip()
                if a == "...":
                    args.append(("...", "...", False))
                    continue
                mm = re.match(r"(.*?)(\w+)\s*((?:\[\w*\])*)$", a)
                ctype = " ".join(mm.group(1).split()).replace(" *", "*")
                args.append((ctype, mm.group(2), mm.group(3)))
        funcs.append((ret, name, args))
    return consts, order, funcs


def const_values(consts, order):
    """(name, fortran kind: 'int' | handle type, value) for every integer constant."""
    out = []
    resolved = {}

    def value(name, depth=0):
        if name in resolved:
            return resolved[name]
        text = consts[name]
        htype = None
        m = re.match(r"^\(\((\w+)\)\s*(-?(?:0x[0-9a-fA-F]+|\d+))\)$", text)
        if m:
            htype, num = m.group(1), m.group(2)
        else:
            m = re.match(r"^\(?(-?(?:0x[0-9a-fA-F]+|\d+))\)?$", text)
            if m:
                num = m.group(1)
            elif re.match(r"^MPI_\w+$", text) and text in consts and depth < 5:
                r = value(text, depth + 1)
                resolved[name] = r
                return r
            else:
                resolved[name] = None
                return None
        v = int(num, 0)
        if v >= 2**31:
            v -= 2**32
        r = (htype, v)
        resolved[name] = r
        return r

    for name in order:
        if name.startswith(("MPI_T_", "MPI_F_")) or name in ("MPI_INCLUDED",):
            continue
        r = value(name)
        if r is None:
            continue
        htype, v = r
        if htype is not None and htype not in HANDLES:
            continue  # pointer sentinels: common blocks, see below
        if name in FORTRAN_KEYVALS:
            v += 1
        if name.startswith("MPI_MAX_") and not htype:
            v -= 1  # Fortran strings have no terminating NUL
        out.append((name, htype, v))
    return out


def classify(func):
    """Per argument: (kind, ctype, name, is_array). kind is one of: ival (scalar by value),
    handle, file, big (Aint/Count/Offset by value), dbl, buf, status, statuses, cstatus,
    ptr (pointer passed through), errcodes, weights, file_out, str_in, str_out, fn, ranges,
    unsupported."""
    ret, name, args = func
    out = []
    for ctype, aname, arr in args:
        base = ctype.replace("const ", "").replace("const", "")
        if ctype == "...":
            k = "unsupported"
        elif base in ("int",) and not arr:
            k = "ival"
        elif base == "double" and not arr:
            k = "dbl"
        elif base in HANDLES and not arr:
            k = "file" if base == "MPI_File" else "handle"
        elif base in KINDS and not arr:
            k = "big"
        elif base == "void*":
            k = "attr" if aname in ("attribute_val", "extra_state") else "buf"
        elif base == "MPI_Status*" and not arr:
            k = "cstatus" if ctype.startswith("const") else "status"
        elif base == "MPI_Status" and arr:
            k = "statuses"
        elif base == "MPI_File*":
            k = "file_out"
        elif base == "char*" and not arr:
            k = "str_in" if ctype.startswith("const") else "str_out"
        elif base == "char" and arr == "[]" and ctype.startswith("const"):
            k = "str_in"
        elif base.endswith("_function*"):
            k = "fn"
        elif base == "int" and arr == "[][3]":
            k = "ranges"
        elif aname == "array_of_errcodes":
            k = "errcodes"
        elif aname in WEIGHT_NAMES:
            k = "weights"
        elif (base.endswith("*") and base[:-1] in ["int"] + HANDLES[:-1] + list(KINDS)) or \
                (arr == "[]" and base in ["int"] + HANDLES[:-1] + list(KINDS)):
            k = "ptr"
        else:
            k = "unsupported"
        out.append((k, ctype, aname, arr))
    return out


def fortran_name(name):
    return name[4:].lower()  # MPI_Send -> send


def wanted(func):
    ret, name, args = func
    if name in HAND or name in SKIP or name.startswith(SKIP_PREFIX):
        return False
    if name.endswith("_c") or re.search(r"_(c2f|f2c|c2f08|f082c|f2f08|f082f)$", name):
        return False
    if name.startswith("MPIX_") or not name.startswith("MPI_"):
        return False
    if ret not in ("int",):
        return False
    return all(a[0] not in ("unsupported", "attr") for a in classify(func))


# ---------------------------------------------------------------------------------------------
# C wrappers

C_PRELUDE = r"""/* Generated by fortran/gen.py from include/mpi.h: do not edit. */
#include "fortran_glue.h"
"""


def c_wrapper(func):
    ret, name, args = func
    low = fortran_name(name)
    params, call, pre, post, lens = [], [], [], [], []
    for k, ctype, a, arr in classify(func):
        base = ctype.replace("const ", "")
        if k == "ival":
            params.append(f"MPI_Fint *{a}")
            call.append(f"*{a}")
        elif k == "handle":
            params.append(f"MPI_Fint *{a}")
            call.append(f"({base})*{a}")
        elif k == "file":
            params.append(f"MPI_Fint *{a}")
            call.append(f"FILE_F2C(*{a})")
        elif k == "big":
            params.append(f"{base} *{a}")
            call.append(f"*{a}")
        elif k == "dbl":
            params.append(f"double *{a}")
            call.append(f"*{a}")
        elif k == "buf":
            params.append(f"void *{a}")
            call.append(f"FBUF({a})")
        elif k == "status":
            params.append(f"MPI_Fint *{a}")
            call.append(f"FSTATUS({a})")
        elif k == "statuses":
            params.append(f"MPI_Fint *{a}")
            call.append(f"FSTATUSES({a})")
        elif k == "cstatus":
            params.append(f"MPI_Fint *{a}")
            call.append(f"(const MPI_Status *){a}")
        elif k == "errcodes":
            params.append(f"MPI_Fint *{a}")
            call.append(f"FERRCODES({a})")
        elif k == "weights":
            params.append(f"MPI_Fint *{a}")
            call.append(f"FWEIGHTS({a})")
        elif k == "ptr":
            t = base.rstrip("*").strip()
            params.append(f"{t} *{a}")
            call.append(a)
        elif k == "file_out":
            params.append(f"MPI_Fint *{a}")
            pre.append(f"MPI_File c_{a} = FILE_F2C(*{a});")
            call.append(f"&c_{a}")
            post.append(f"*{a} = FILE_C2F(c_{a});")
        elif k == "str_in":
            params.append(f"const char *{a}")
            lens.append(f"size_t {a}_len")
            pre.append(f"char *c_{a} = fstr_in({a}, {a}_len);")
            call.append(f"c_{a}")
            post.append(f"free(c_{a});")
        elif k == "str_out":
            params.append(f"char *{a}")
            lens.append(f"size_t {a}_len")
            pre.append(f"char *c_{a} = fstr_buf({a}_len);")
            call.append(f"c_{a}")
            # The string is written when the call succeeded (and found it, for calls with a
            # flag): otherwise the caller's variable stays as it was.
            found = " && *flag" if any(x[1] == "flag" for x in args) else ""
            post.append(f"if (rc == MPI_SUCCESS{found}) fstr_out({a}, {a}_len, c_{a});\n"
                        f"    else free(c_{a});")
        elif k == "fn":
            params.append(f"{base} {a}")
            call.append(a)
        elif k == "ranges":
            params.append(f"int (*{a})[3]")
            call.append(a)
    # Fortran counts from 1: the indices the wait/test families return.
    if name in ("MPI_Waitany", "MPI_Testany", "MPI_Request_get_status_any"):
        post.append("if (rc == MPI_SUCCESS && *indx >= 0) *indx += 1;")
    if name in ("MPI_Waitsome", "MPI_Testsome", "MPI_Request_get_status_some"):
        post.append("if (rc == MPI_SUCCESS && *outcount != MPI_UNDEFINED)\n"
                    "        for (int i = 0; i < *outcount; i++) array_of_indices[i] += 1;")
    params.append("MPI_Fint *ierr")
    params += lens
    lines = [f"void FN({low})({', '.join(params)})", "{"]
    lines += ["    " + p for p in pre]
    lines.append(f"    int rc = CALL({name[4:]})({', '.join(call)});")
    lines += ["    " + p for p in post]
    lines.append("    if (ierr) *ierr = rc;")
    lines.append("}")
    lines.append(f"ALIASES({low}, {low.upper()})")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Fortran interfaces

def f_arg_decl(k, ctype, a, arr, f08):
    """Declaration lines of one dummy argument; None when the argument needs a wrapper in
    mpi_f08 (strings, procedures)."""
    base = ctype.replace("const ", "").rstrip("*").strip()
    logical = a in LOGICAL_NAMES
    is_array = bool(arr)
    if k == "buf":
        return [f"!GCC$ ATTRIBUTES NO_ARG_CHECK :: {a}",
                f"TYPE(*), DIMENSION(*) :: {a}" if f08 else f"INTEGER :: {a}(*)"]
    if k in ("weights", "errcodes"):
        return [f"!GCC$ ATTRIBUTES NO_ARG_CHECK :: {a}", f"INTEGER :: {a}(*)"]
    if k in ("status", "cstatus"):
        return [f"TYPE(MPI_Status) :: {a}" if f08 else f"INTEGER :: {a}(MPI_STATUS_SIZE)"]
    if k == "statuses":
        return [f"TYPE(MPI_Status) :: {a}(*)" if f08 else
                f"INTEGER :: {a}(MPI_STATUS_SIZE,*)"]
    if k in ("str_in", "str_out"):
        return [f"CHARACTER(LEN=*) :: {a}"]
    if k == "fn":
        return [f"EXTERNAL :: {a}"]
    if k == "ranges":
        return [f"INTEGER :: {a}(3,*)"]
    if k == "dbl":
        return [f"DOUBLE PRECISION :: {a}"]
    if base in KINDS:
        t = f"INTEGER(KIND={KINDS[base]})"
    elif base in HANDLES:
        t = f"TYPE({base})" if f08 else "INTEGER"
    elif logical:
        t = "LOGICAL"
    else:
        t = "INTEGER"
    if k in ("ival", "handle", "file", "big"):
        return [f"{t}, INTENT(IN) :: {a}"]
    return [f"{t} :: {a}" + ("(*)" if is_array else "")]


def f_interface(func, f08):
    ret, name, args = func
    cls = classify(func)
    names = [a for _, _, a, _ in cls] + ["ierror"]
    decls = []
    for c in cls:
        decls += f_arg_decl(*c, f08)
    decls.append("INTEGER, OPTIONAL :: ierror" if f08 else "INTEGER :: ierror")
    return names, decls


def wrap_args(names, width=80, indent="        "):
    """Free-form argument list split over continuation lines."""
    out, line = [], ""
    for i, n in enumerate(names):
        piece = n + (", " if i < len(names) - 1 else "")
        if len(indent + line + piece) > width - 2:
            out.append(line.rstrip() + " &")
            line = ""
        line += piece
    out.append(line)
    return ("\n" + indent).join(out)


def mpi_interface(func):
    names, decls = f_interface(func, False)
    n = func[1].upper()
    body = "\n".join("      " + d for d in decls)
    return (f"    SUBROUTINE {n}({wrap_args(names)})\n"
            f"      IMPORT\n      IMPLICIT NONE\n{body}\n    END SUBROUTINE {n}\n")


def f08_routine(func):
    """A bind(C) interface to the Fortran entry point, or, when strings are involved, a
    module procedure passing their lengths explicitly. Returns (interface, procedure)."""
    ret, name, args = func
    cls = classify(func)
    if any(k == "fn" for k, _, _, _ in cls):
        return None, None
    names, decls = f_interface(func, True)
    low = fortran_name(name)
    strs = [a for k, _, a, _ in cls if k in ("str_in", "str_out")]
    if not strs:
        body = "\n".join("      " + d for d in decls)
        return (f"    SUBROUTINE {name}({wrap_args(names)}) &\n"
                f"        BIND(C, NAME=\"mpi_{low}_\")\n"
                f"      IMPORT\n      IMPLICIT NONE\n{body}\n    END SUBROUTINE {name}\n"), None
    # Strings: the C entry takes the hidden lengths as trailing size_t values.
    cdecls = []
    for d in decls:
        m = re.match(r"CHARACTER\(LEN=\*\) :: (\w+)", d)
        cdecls.append(f"CHARACTER(KIND=C_CHAR) :: {m.group(1)}(*)" if m else d)
    cdecls += [f"INTEGER(C_SIZE_T), VALUE :: {s}_len" for s in strs]
    cnames = names + [f"{s}_len" for s in strs]
    iface = (f"    SUBROUTINE ferrite_f08_{low}({wrap_args(cnames)}) &\n"
             f"        BIND(C, NAME=\"mpi_{low}_\")\n      IMPORT\n      IMPLICIT NONE\n" +
             "\n".join("      " + d for d in cdecls) + f"\n    END SUBROUTINE ferrite_f08_{low}\n")
    actual = names + [f"LEN({s}, KIND=C_SIZE_T)" for s in strs]
    proc = (f"  SUBROUTINE {name}({wrap_args(names)})\n    IMPLICIT NONE\n" +
            "\n".join("    " + d for d in decls) +
            f"\n    CALL ferrite_f08_{low}({wrap_args(actual)})\n  END SUBROUTINE {name}\n")
    return iface, proc


def f08_wanted(func):
    name = func[1]
    if name in F08_DEPRECATED or not name.startswith(F08_PREFIXES):
        return False
    return wanted(func)


# ---------------------------------------------------------------------------------------------
# Constants

def fixed_lines(decls):
    """mpif.h lines: every one within 72 columns."""
    out = []
    for d in decls:
        line = "       " + d
        assert len(line) <= 72, line
        out.append(line)
    return out


SENTINELS_F77 = """INTEGER MPI_STATUS_IGNORE(MPI_STATUS_SIZE)
INTEGER MPI_STATUSES_IGNORE(MPI_STATUS_SIZE,1)
INTEGER MPI_ERRCODES_IGNORE(1)
CHARACTER*1 MPI_ARGVS_NULL(1,1)
CHARACTER*1 MPI_ARGV_NULL(1)
INTEGER MPI_BOTTOM, MPI_IN_PLACE, MPI_UNWEIGHTED
INTEGER MPI_WEIGHTS_EMPTY
COMMON /MPIFCMB5/ MPI_UNWEIGHTED
COMMON /MPIFCMB9/ MPI_WEIGHTS_EMPTY
SAVE /MPIFCMB5/
SAVE /MPIFCMB9/
COMMON /MPIPRIV1/ MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS_IGNORE
COMMON /MPIPRIV2/ MPI_STATUSES_IGNORE, MPI_ERRCODES_IGNORE
SAVE /MPIPRIV1/,/MPIPRIV2/
COMMON /MPIPRIVC/ MPI_ARGVS_NULL, MPI_ARGV_NULL
SAVE /MPIPRIVC/""".split("\n")

# Constants of kind MPI_OFFSET_KIND in Fortran.
OFFSET_CONSTS = {"MPI_DISPLACEMENT_CURRENT"}

FORTRAN_ONLY = [
    ("MPI_SOURCE", 3), ("MPI_TAG", 4), ("MPI_ERROR", 5), ("MPI_STATUS_SIZE", 5),
    ("MPI_ADDRESS_KIND", 8), ("MPI_OFFSET_KIND", 8), ("MPI_COUNT_KIND", 8),
    ("MPI_INTEGER_KIND", 4),
]

CALLBACKS = ["MPI_DUP_FN", "MPI_NULL_DELETE_FN", "MPI_NULL_COPY_FN", "MPI_COMM_DUP_FN",
             "MPI_COMM_NULL_DELETE_FN", "MPI_COMM_NULL_COPY_FN", "MPI_WIN_DUP_FN",
             "MPI_WIN_NULL_DELETE_FN", "MPI_WIN_NULL_COPY_FN", "MPI_TYPE_DUP_FN",
             "MPI_TYPE_NULL_DELETE_FN", "MPI_TYPE_NULL_COPY_FN", "MPI_CONVERSION_FN_NULL"]


def mpif_h(items):
    d = ["! mpif.h: Ferrite MPI's Fortran include file.",
         "! Generated by fortran/gen.py from include/mpi.h: do not edit.",
         "! Fixed and free form: no line exceeds 72 columns."]
    body = []
    for n, v in FORTRAN_ONLY:
        body += [f"INTEGER {n}", f"PARAMETER ({n}={v})"]
    for n, htype, v in items:
        t = "INTEGER*8" if n in OFFSET_CONSTS else "INTEGER"
        body += [f"{t} {n}", f"PARAMETER ({n}={v})"]
    body += ["LOGICAL MPI_SUBARRAYS_SUPPORTED",
             "PARAMETER (MPI_SUBARRAYS_SUPPORTED=.FALSE.)",
             "LOGICAL MPI_ASYNC_PROTECTS_NONBLOCKING",
             "PARAMETER (MPI_ASYNC_PROTECTS_NONBLOCKING=.FALSE.)"]
    body += SENTINELS_F77
    for c in CALLBACKS:
        body.append("EXTERNAL " + c)
    body += ["EXTERNAL MPI_WTIME, MPI_WTICK", "EXTERNAL PMPI_WTIME, PMPI_WTICK",
             "DOUBLE PRECISION MPI_WTIME, MPI_WTICK",
             "DOUBLE PRECISION PMPI_WTIME, PMPI_WTICK"]
    return "\n".join(d + fixed_lines(body)) + "\n"


def module_constants(items, f08):
    out = []
    for n, v in FORTRAN_ONLY:
        out.append(f"  INTEGER, PARAMETER :: {n} = {v}")
    for n, htype, v in items:
        if n in OFFSET_CONSTS:
            out.append(f"  INTEGER(KIND=MPI_OFFSET_KIND), PARAMETER :: {n} = {v}")
        elif f08 and htype:
            out.append(f"  TYPE({htype}), PARAMETER :: {n} = {htype}({v})")
        else:
            out.append(f"  INTEGER, PARAMETER :: {n} = {v}")
    out += ["  LOGICAL, PARAMETER :: MPI_SUBARRAYS_SUPPORTED = .FALSE.",
            "  LOGICAL, PARAMETER :: MPI_ASYNC_PROTECTS_NONBLOCKING = .FALSE."]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------

def main():
    header, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    consts, order, funcs = parse(header)
    items = const_values(consts, order)
    gen = [f for f in funcs if wanted(f)]

    with open(f"{outdir}/mpif.h", "w") as f:
        f.write(mpif_h(items))

    with open(f"{outdir}/mpifort.c", "w") as f:
        f.write(C_PRELUDE)
        for fn in gen:
            f.write("\n" + c_wrapper(fn))

    ifaces = "".join(mpi_interface(fn) for fn in gen)
    with open(f"{outdir}/mpi.f90", "w") as f:
        f.write(f"""! `use mpi`. Generated by fortran/gen.py from include/mpi.h: do not edit.
MODULE mpi
  USE ferrite_mpi_sizeof
  IMPLICIT NONE
{module_constants(items, False)}
{chr(10).join('  ' + l for l in SENTINELS_F77)}
{chr(10).join('  EXTERNAL :: ' + c for c in CALLBACKS)}
  INTERFACE
    DOUBLE PRECISION FUNCTION MPI_WTIME()
    END FUNCTION MPI_WTIME
    DOUBLE PRECISION FUNCTION MPI_WTICK()
    END FUNCTION MPI_WTICK
    DOUBLE PRECISION FUNCTION PMPI_WTIME()
    END FUNCTION PMPI_WTIME
    DOUBLE PRECISION FUNCTION PMPI_WTICK()
    END FUNCTION PMPI_WTICK
  END INTERFACE
  INTERFACE
{ifaces}  END INTERFACE
END MODULE mpi
""")

    f08 = [fn for fn in funcs if f08_wanted(fn)]
    ifs, procs = [], []
    for fn in f08:
        i, p = f08_routine(fn)
        if i:
            ifs.append(i)
        if p:
            procs.append(p)
    types = "\n".join(f"  TYPE, BIND(C) :: {h}\n    INTEGER :: MPI_VAL\n  END TYPE {h}"
                      for h in HANDLES)
    eqs = []
    for h in HANDLES:
        eqs.append(f"""  ELEMENTAL LOGICAL FUNCTION ferrite_eq_{h[4:].lower()}(a, b)
    TYPE({h}), INTENT(IN) :: a, b
    ferrite_eq_{h[4:].lower()} = a%MPI_VAL == b%MPI_VAL
  END FUNCTION
  ELEMENTAL LOGICAL FUNCTION ferrite_ne_{h[4:].lower()}(a, b)
    TYPE({h}), INTENT(IN) :: a, b
    ferrite_ne_{h[4:].lower()} = a%MPI_VAL /= b%MPI_VAL
  END FUNCTION""")
    eq_generic = ("  INTERFACE OPERATOR(==)\n" + "".join(
        f"    MODULE PROCEDURE ferrite_eq_{h[4:].lower()}\n" for h in HANDLES) +
        "  END INTERFACE\n  INTERFACE OPERATOR(/=)\n" + "".join(
        f"    MODULE PROCEDURE ferrite_ne_{h[4:].lower()}\n" for h in HANDLES) +
        "  END INTERFACE\n")
    with open(f"{outdir}/mpi_f08_types.f90", "w") as f:
        f.write(f"""! mpi_f08's types. Generated by fortran/gen.py from include/mpi.h: do not edit.
MODULE mpi_f08_types
  USE, INTRINSIC :: ISO_C_BINDING
  IMPLICIT NONE
{types}
  TYPE, BIND(C) :: MPI_Status
    INTEGER :: count_lo, count_hi_and_cancelled
    INTEGER :: MPI_SOURCE, MPI_TAG, MPI_ERROR
  END TYPE MPI_Status
{module_constants(items, True)}
{eq_generic}CONTAINS
{chr(10).join(eqs)}
END MODULE mpi_f08_types
""")
    with open(f"{outdir}/mpi_f08.f90", "w") as f:
        f.write(f"""! `use mpi_f08`. Generated by fortran/gen.py from include/mpi.h: do not edit.
MODULE mpi_f08
  USE, INTRINSIC :: ISO_C_BINDING
  USE mpi_f08_types
  USE mpi_f08_callbacks
  USE ferrite_mpi_sizeof
  IMPLICIT NONE
  ! Sentinels: objects of the C library whose addresses the entry points recognise.
  TYPE(MPI_Status), BIND(C, NAME="MPIR_F08_MPI_STATUS_IGNORE_OBJ"), TARGET :: &
      MPI_STATUS_IGNORE
  TYPE(MPI_Status), BIND(C, NAME="MPIR_F08_MPI_STATUSES_IGNORE_OBJ"), TARGET :: &
      MPI_STATUSES_IGNORE(1)
  INTEGER, BIND(C, NAME="MPIR_F08_MPI_IN_PLACE"), TARGET :: MPI_IN_PLACE
  INTEGER, BIND(C, NAME="MPIR_F08_MPI_BOTTOM"), TARGET :: MPI_BOTTOM
  INTEGER, BIND(C, NAME="MPIR_C_MPI_UNWEIGHTED"), TARGET :: MPI_UNWEIGHTED
  INTEGER, BIND(C, NAME="MPIR_C_MPI_WEIGHTS_EMPTY"), TARGET :: MPI_WEIGHTS_EMPTY
  INTERFACE
    FUNCTION MPI_Wtime() BIND(C, NAME="mpi_wtime_") RESULT(t)
      IMPORT
      REAL(C_DOUBLE) :: t
    END FUNCTION MPI_Wtime
    FUNCTION MPI_Wtick() BIND(C, NAME="mpi_wtick_") RESULT(t)
      IMPORT
      REAL(C_DOUBLE) :: t
    END FUNCTION MPI_Wtick
    SUBROUTINE MPI_Init(ierror) BIND(C, NAME="mpi_init_")
      INTEGER, OPTIONAL :: ierror
    END SUBROUTINE MPI_Init
    SUBROUTINE MPI_Init_thread(required, provided, ierror) &
        BIND(C, NAME="mpi_init_thread_")
      INTEGER, INTENT(IN) :: required
      INTEGER :: provided
      INTEGER, OPTIONAL :: ierror
    END SUBROUTINE MPI_Init_thread
    SUBROUTINE MPI_Comm_set_attr(comm, comm_keyval, attribute_val, ierror) &
        BIND(C, NAME="mpi_comm_set_attr_")
      IMPORT
      TYPE(MPI_Comm), INTENT(IN) :: comm
      INTEGER, INTENT(IN) :: comm_keyval
      INTEGER(KIND=MPI_ADDRESS_KIND), INTENT(IN) :: attribute_val
      INTEGER, OPTIONAL :: ierror
    END SUBROUTINE MPI_Comm_set_attr
    SUBROUTINE MPI_Comm_get_attr(comm, comm_keyval, attribute_val, flag, ierror) &
        BIND(C, NAME="mpi_comm_get_attr_")
      IMPORT
      TYPE(MPI_Comm), INTENT(IN) :: comm
      INTEGER, INTENT(IN) :: comm_keyval
      INTEGER(KIND=MPI_ADDRESS_KIND) :: attribute_val
      LOGICAL :: flag
      INTEGER, OPTIONAL :: ierror
    END SUBROUTINE MPI_Comm_get_attr
    SUBROUTINE MPI_Type_set_attr(datatype, type_keyval, attribute_val, ierror) &
        BIND(C, NAME="mpi_type_set_attr_")
      IMPORT
      TYPE(MPI_Datatype), INTENT(IN) :: datatype
      INTEGER, INTENT(IN) :: type_keyval
      INTEGER(KIND=MPI_ADDRESS_KIND), INTENT(IN) :: attribute_val
      INTEGER, OPTIONAL :: ierror
    END SUBROUTINE MPI_Type_set_attr
    SUBROUTINE MPI_Type_get_attr(datatype, type_keyval, attribute_val, flag, ierror) &
        BIND(C, NAME="mpi_type_get_attr_")
      IMPORT
      TYPE(MPI_Datatype), INTENT(IN) :: datatype
      INTEGER, INTENT(IN) :: type_keyval
      INTEGER(KIND=MPI_ADDRESS_KIND) :: attribute_val
      LOGICAL :: flag
      INTEGER, OPTIONAL :: ierror
    END SUBROUTINE MPI_Type_get_attr
    SUBROUTINE MPI_Win_set_attr(win, win_keyval, attribute_val, ierror) &
        BIND(C, NAME="mpi_win_set_attr_")
      IMPORT
      TYPE(MPI_Win), INTENT(IN) :: win
      INTEGER, INTENT(IN) :: win_keyval
      INTEGER(KIND=MPI_ADDRESS_KIND), INTENT(IN) :: attribute_val
      INTEGER, OPTIONAL :: ierror
    END SUBROUTINE MPI_Win_set_attr
    SUBROUTINE MPI_Win_get_attr(win, win_keyval, attribute_val, flag, ierror) &
        BIND(C, NAME="mpi_win_get_attr_")
      IMPORT
      TYPE(MPI_Win), INTENT(IN) :: win
      INTEGER, INTENT(IN) :: win_keyval
      INTEGER(KIND=MPI_ADDRESS_KIND) :: attribute_val
      LOGICAL :: flag
      INTEGER, OPTIONAL :: ierror
    END SUBROUTINE MPI_Win_get_attr
{''.join(ifs)}  END INTERFACE
CONTAINS
{''.join(procs)}
END MODULE mpi_f08
""")
    # MPI_SIZEOF for every intrinsic numeric type and kind gfortran has, any rank.
    specs = [("INTEGER", k) for k in (1, 2, 4, 8, 16)] + \
        [("REAL", k) for k in (4, 8, 10, 16)] + [("COMPLEX", k) for k in (4, 8, 10, 16)] + \
        [("LOGICAL", k) for k in (1, 2, 4, 8)]
    procs = []
    for t, k in specs:
        n = f"ferrite_sizeof_{t[0].lower()}{k}"
        procs.append(f"""  SUBROUTINE {n}(x, size, ierror)
    {t}(KIND={k}), DIMENSION(..) :: x
    INTEGER, INTENT(OUT) :: size
    INTEGER, OPTIONAL, INTENT(OUT) :: ierror
    size = STORAGE_SIZE(x) / 8
    IF (PRESENT(ierror)) ierror = 0
  END SUBROUTINE {n}""")
    procs.append("""  SUBROUTINE ferrite_sizeof_character(x, size, ierror)
    CHARACTER(LEN=*), DIMENSION(..) :: x
    INTEGER, INTENT(OUT) :: size
    INTEGER, OPTIONAL, INTENT(OUT) :: ierror
    size = 1
    IF (PRESENT(ierror)) ierror = 0
  END SUBROUTINE ferrite_sizeof_character""")
    names = [f"ferrite_sizeof_{t[0].lower()}{k}" for t, k in specs] + ["ferrite_sizeof_character"]
    with open(f"{outdir}/mpi_sizeof.f90", "w") as f:
        f.write("! MPI_SIZEOF. Generated by fortran/gen.py: do not edit.\n"
                "MODULE ferrite_mpi_sizeof\n  IMPLICIT NONE\n  PRIVATE\n  PUBLIC :: MPI_SIZEOF\n"
                "  INTERFACE MPI_SIZEOF\n" +
                "".join(f"    MODULE PROCEDURE {n}\n" for n in names) +
                "  END INTERFACE\nCONTAINS\n" + "\n".join(procs) +
                "\nEND MODULE ferrite_mpi_sizeof\n")

    # Generated here, plus the hand-written ones of this file and of f08_callbacks.f90.
    covered = sorted(set(
        [fn[1] for fn in f08 if f08_routine(fn) != (None, None)] +
        ["MPI_Wtime", "MPI_Wtick", "MPI_Init", "MPI_Init_thread", "MPI_Op_create",
         "MPI_Comm_create_errhandler", "MPI_Win_create_errhandler",
         "MPI_Session_create_errhandler"] +
        [f"MPI_{o}_{w}" for o in ("Comm", "Type", "Win")
         for w in ("set_attr", "get_attr", "create_keyval")]))
    with open(f"{outdir}/f08-covered.txt", "w") as f:
        f.write("\n".join(covered) + "\n")


if __name__ == "__main__":
    main()
