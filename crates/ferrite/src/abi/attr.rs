//! Attribute caching at the C edge (MPI 4.1 section 7.7): keyvals and attributes for
//! communicators, datatypes and windows, plus the MPI-1 names MPICH still exports.

use super::consts::*;
use super::out;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::attr::{self, AttrKind, CopyFn, DeleteFn, Keyval, Owner};
use crate::state;
use std::ffi::c_void;
use std::os::raw::c_int;

/// # Safety
/// `keyval` is null or valid for one write.
unsafe fn create(
    owner: Owner,
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> MpiResult<()> {
    let k = state::with(|st| {
        Ok(st.objects.attrs.create_keyval(Keyval {
            owner,
            copy,
            delete,
            extra: extra as usize,
            freed: false,
            copy_proxy: None,
            delete_proxy: None,
        }))
    })?;
    // SAFETY: per this function's contract.
    unsafe { out(keyval, k) }
}

/// # Safety
/// `keyval` is null or valid for one read and write.
unsafe fn free(owner: Owner, keyval: *mut c_int) -> MpiResult<()> {
    if keyval.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for keyval"));
    }
    // SAFETY: non-null per the check.
    let k = unsafe { *keyval };
    if owner == Owner::Comm && super::comm::is_predefined(k) {
        return Err(crate::mpi_err!(
            MPI_ERR_KEYVAL,
            "cannot free predefined keyval {:#x}",
            k as u32
        ));
    }
    state::with(|st| st.objects.attrs.free_keyval(owner, k))?;
    // SAFETY: as above.
    unsafe { out(keyval, MPI_KEYVAL_INVALID) }
}

fn check_settable(owner: Owner, k: c_int) -> MpiResult<()> {
    if owner == Owner::Comm && super::comm::is_predefined(k) {
        return Err(crate::mpi_err!(
            MPI_ERR_KEYVAL,
            "predefined attribute {:#x} cannot be set or deleted",
            k as u32
        ));
    }
    Ok(())
}

fn check_comm(comm: MPI_Comm) -> MpiResult<()> {
    state::with(|st| st.objects.comms.get(comm).map(|_| ()))
}

fn check_type(dt: MPI_Datatype) -> MpiResult<()> {
    state::with(|st| st.objects.datatypes.lookup(dt).map(|_| ()))
}

/// Writes a value found (or not) by an MPI_*_get_attr call as language `want` sees it: C
/// gets a pointer in a `void *` slot, Fortran an address-sized integer (MPICH's Fortran
/// library reads an intptr_t for both of its integer kinds).
///
/// # Safety
/// `attribute_val` is valid for writing one pointer; `flag` for one int.
pub(crate) unsafe fn put_found(
    found: Option<usize>,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> MpiResult<()> {
    match found {
        // SAFETY: per this function's contract.
        Some(v) => unsafe {
            out(attribute_val.cast::<*mut c_void>(), v as *mut c_void)?;
            out(flag, 1)
        },
        // SAFETY: per this function's contract.
        None => unsafe { out(flag, 0) },
    }
}

/// MPI_*_set_attr from any language (MPII_*_set_attr gives the kind).
pub(crate) fn set_attr(
    owner: Owner,
    h: c_int,
    k: c_int,
    v: usize,
    kind: AttrKind,
) -> MpiResult<()> {
    match owner {
        Owner::Comm => {
            check_comm(h)?;
            check_settable(Owner::Comm, k)?;
        }
        Owner::Type => check_type(h)?,
        Owner::Win => super::win::check_settable(h, k)?,
    }
    attr::set(owner, h, k, v, kind)
}

/// The C keyval of a predefined attribute given by its Fortran keyval: MPICH numbers each
/// predefined keyval pair C = base + 2k + 1, Fortran = C + 1 (mpif.h's MPI_TAG_UB is
/// 0x64400002), and MPICH's Fortran library passes the Fortran value. `base` is the
/// keyval block of communicators (0x64400000) or windows (0x66000000); other keyvals are
/// returned as they are.
pub(crate) fn c_keyval(k: c_int, base: c_int) -> c_int {
    if (base + 2..=base + 0xe).contains(&k) && k % 2 == 0 {
        k - 1
    } else {
        k
    }
}

/// # Safety
/// `attribute_val` is valid for writing one pointer; `flag` for one int.
unsafe fn get_into(
    owner: Owner,
    h: c_int,
    k: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> MpiResult<()> {
    let found = attr::get(owner, h, k)?.map(|v| v.as_seen(AttrKind::Ptr));
    // SAFETY: per this function's contract.
    unsafe { put_found(found, attribute_val, flag) }
}

mpi_fn! {
    fn MPI_Comm_create_keyval(comm_copy_attr_fn: Option<CopyFn>,
        comm_delete_attr_fn: Option<DeleteFn>, comm_keyval: *mut c_int,
        extra_state: *mut c_void) on ErrObj::NoObject => {
        // SAFETY: the caller passes an int* output.
        unsafe { create(Owner::Comm, comm_copy_attr_fn, comm_delete_attr_fn, comm_keyval, extra_state) }
    }
}

mpi_fn! {
    /// The MPI-1 name of MPI_Comm_create_keyval.
    fn MPI_Keyval_create(copy_fn: Option<CopyFn>, delete_fn: Option<DeleteFn>,
        keyval: *mut c_int, extra_state: *mut c_void) on ErrObj::NoObject => {
        // SAFETY: the caller passes an int* output.
        unsafe { create(Owner::Comm, copy_fn, delete_fn, keyval, extra_state) }
    }
}

mpi_fn! {
    fn MPI_Comm_free_keyval(comm_keyval: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: the caller passes an int*.
        unsafe { free(Owner::Comm, comm_keyval) }
    }
}

mpi_fn! {
    /// The MPI-1 name of MPI_Comm_free_keyval.
    fn MPI_Keyval_free(keyval: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: the caller passes an int*.
        unsafe { free(Owner::Comm, keyval) }
    }
}

mpi_fn! {
    fn MPI_Comm_set_attr(comm: MPI_Comm, comm_keyval: c_int, attribute_val: *mut c_void)
        on ErrObj::Comm(comm) => {
        set_attr(Owner::Comm, comm, comm_keyval, attribute_val as usize, AttrKind::Ptr)
    }
}

mpi_fn! {
    /// The MPI-1 name of MPI_Comm_set_attr.
    fn MPI_Attr_put(comm: MPI_Comm, keyval: c_int, attribute_val: *mut c_void)
        on ErrObj::Comm(comm) => {
        set_attr(Owner::Comm, comm, keyval, attribute_val as usize, AttrKind::Ptr)
    }
}

mpi_fn! {
    fn MPI_Comm_delete_attr(comm: MPI_Comm, comm_keyval: c_int) on ErrObj::Comm(comm) => {
        check_comm(comm)?;
        check_settable(Owner::Comm, comm_keyval)?;
        attr::delete(Owner::Comm, comm, comm_keyval)
    }
}

mpi_fn! {
    /// The MPI-1 name of MPI_Comm_delete_attr.
    fn MPI_Attr_delete(comm: MPI_Comm, keyval: c_int) on ErrObj::Comm(comm) => {
        check_comm(comm)?;
        check_settable(Owner::Comm, keyval)?;
        attr::delete(Owner::Comm, comm, keyval)
    }
}

mpi_fn! {
    fn MPI_Type_create_keyval(type_copy_attr_fn: Option<CopyFn>,
        type_delete_attr_fn: Option<DeleteFn>, type_keyval: *mut c_int,
        extra_state: *mut c_void) on ErrObj::NoObject => {
        // SAFETY: the caller passes an int* output.
        unsafe { create(Owner::Type, type_copy_attr_fn, type_delete_attr_fn, type_keyval, extra_state) }
    }
}

mpi_fn! {
    fn MPI_Type_free_keyval(type_keyval: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: the caller passes an int*.
        unsafe { free(Owner::Type, type_keyval) }
    }
}

mpi_fn! {
    fn MPI_Type_set_attr(datatype: MPI_Datatype, type_keyval: c_int, attribute_val: *mut c_void)
        on ErrObj::NoObject => {
        set_attr(Owner::Type, datatype, type_keyval, attribute_val as usize, AttrKind::Ptr)
    }
}

mpi_fn! {
    fn MPI_Type_get_attr(datatype: MPI_Datatype, type_keyval: c_int, attribute_val: *mut c_void,
        flag: *mut c_int) on ErrObj::NoObject => {
        check_type(datatype)?;
        // SAFETY: the caller passes a void** (as void*) and an int*.
        unsafe { get_into(Owner::Type, datatype, type_keyval, attribute_val, flag) }
    }
}

mpi_fn! {
    fn MPI_Type_delete_attr(datatype: MPI_Datatype, type_keyval: c_int) on ErrObj::NoObject => {
        check_type(datatype)?;
        attr::delete(Owner::Type, datatype, type_keyval)
    }
}

mpi_fn! {
    fn MPI_Win_create_keyval(win_copy_attr_fn: Option<CopyFn>,
        win_delete_attr_fn: Option<DeleteFn>, win_keyval: *mut c_int,
        extra_state: *mut c_void) on ErrObj::NoObject => {
        // SAFETY: the caller passes an int* output.
        unsafe { create(Owner::Win, win_copy_attr_fn, win_delete_attr_fn, win_keyval, extra_state) }
    }
}

mpi_fn! {
    fn MPI_Win_free_keyval(win_keyval: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: the caller passes an int*.
        unsafe { free(Owner::Win, win_keyval) }
    }
}
