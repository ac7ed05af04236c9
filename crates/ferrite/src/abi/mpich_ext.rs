//! MPICH's own entry points outside the MPI standard that MPICH's Fortran library
//! (`libmpifort.so.12`), C++ library (`libmpicxx.so.12`) and tools call, so that those
//! libraries, built against MPICH, run on top of ours: the `MPII_` hooks of the language
//! bindings and the `MPIX_` extensions they wrap. None of them is in our mpi.h: programs
//! built with Ferrite's own header never see them.

use super::consts::*;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::attr::{self, AttrKind, CopyProxy, DeleteProxy, Owner};
use crate::objects::errhandler::CxxErrCall;
use crate::state;
use std::os::raw::{c_char, c_int, c_void};

/// `MPII_Version_custom`: MPICH's configure-time custom version string (empty here), read by
/// `mpichversion`.
#[no_mangle]
pub static MPII_Version_custom: [c_char; 1] = [0];

/// # Safety
/// `attribute_val` is valid for writing one pointer; `flag` for one int.
unsafe fn get(
    owner: Owner,
    h: c_int,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
    kind: c_int,
) -> MpiResult<()> {
    let want = AttrKind::from_c(kind)?;
    let found = match owner {
        Owner::Comm => super::comm::get_attr(h, keyval, want)?,
        Owner::Win => super::win::get_attr(h, keyval, want)?,
        Owner::Type => {
            state::with(|st| st.objects.datatypes.lookup(h).map(|_| ()))?;
            attr::get(Owner::Type, h, keyval)?.map(|v| v.as_seen(want))
        }
    };
    // SAFETY: per this function's contract.
    unsafe { super::attr::put_found(found, attribute_val, flag) }
}

mpich_internal_fn! {
    /// MPI_Comm_set_attr from another language: `kind` says how the value was given (a C
    /// pointer, or a Fortran integer stored in the pointer's place).
    fn MPII_Comm_set_attr(comm: MPI_Comm, keyval: c_int, attribute_val: *mut c_void,
        kind: c_int) on ErrObj::Comm(comm) => {
        super::attr::set_attr(Owner::Comm, comm, keyval, attribute_val as usize, AttrKind::from_c(kind)?)
    }
}

mpich_internal_fn! {
    fn MPII_Type_set_attr(datatype: MPI_Datatype, keyval: c_int, attribute_val: *mut c_void,
        kind: c_int) on ErrObj::NoObject => {
        super::attr::set_attr(Owner::Type, datatype, keyval, attribute_val as usize, AttrKind::from_c(kind)?)
    }
}

mpich_internal_fn! {
    fn MPII_Win_set_attr(win: MPI_Win, keyval: c_int, attribute_val: *mut c_void,
        kind: c_int) on ErrObj::Win(win) => {
        super::attr::set_attr(Owner::Win, win, keyval, attribute_val as usize, AttrKind::from_c(kind)?)
    }
}

mpich_internal_fn! {
    /// MPI_Comm_get_attr for another language: `kind` says what the caller wants (a pointer
    /// for C; for Fortran an address-sized integer, written in the pointer's place).
    fn MPII_Comm_get_attr(comm: MPI_Comm, keyval: c_int, attribute_val: *mut c_void,
        flag: *mut c_int, kind: c_int) on ErrObj::Comm(comm) => {
        // SAFETY: the binding passes a pointer-sized slot and an int*.
        unsafe { get(Owner::Comm, comm, keyval, attribute_val, flag, kind) }
    }
}

mpich_internal_fn! {
    fn MPII_Type_get_attr(datatype: MPI_Datatype, keyval: c_int, attribute_val: *mut c_void,
        flag: *mut c_int, kind: c_int) on ErrObj::NoObject => {
        // SAFETY: the binding passes a pointer-sized slot and an int*.
        unsafe { get(Owner::Type, datatype, keyval, attribute_val, flag, kind) }
    }
}

mpich_internal_fn! {
    fn MPII_Win_get_attr(win: MPI_Win, keyval: c_int, attribute_val: *mut c_void,
        flag: *mut c_int, kind: c_int) on ErrObj::Win(win) => {
        // SAFETY: the binding passes a pointer-sized slot and an int*.
        unsafe { get(Owner::Win, win, keyval, attribute_val, flag, kind) }
    }
}

/// Makes the copy and delete callbacks of `keyval` go through a language binding's proxies
/// (MPICH's Fortran library does this for keyvals created from Fortran).
///
/// # Safety
/// The proxies have MPICH's `MPII_Attr_copy_proxy` / `MPII_Attr_delete_proxy` signatures.
#[no_mangle]
pub unsafe extern "C" fn MPII_Keyval_set_proxy(
    keyval: c_int,
    copy_proxy: Option<CopyProxy>,
    delete_proxy: Option<DeleteProxy>,
) {
    // MPICH's returns nothing and ignores an invalid keyval: so do we.
    let _ = state::with(|st| {
        st.objects.attrs.set_proxy(keyval, copy_proxy, delete_proxy);
        Ok(())
    });
}

/// The callbacks of generalized request `greq` are Fortran subroutines.
#[no_mangle]
pub extern "C" fn MPII_Grequest_set_lang_f77(greq: MPI_Request) {
    let _ = super::grequest::set_lang_fortran(greq);
}

/// A user op made by MPICH's C++ library: its function is called through `opcall`.
///
/// # Safety
/// `opcall` has the signature of `crate::coll::reduce::CxxOpCall`.
#[no_mangle]
pub unsafe extern "C" fn MPII_Op_set_cxx(
    op: MPI_Op,
    opcall: Option<crate::coll::reduce::CxxOpCall>,
) {
    use crate::coll::reduce::UserKind;
    let Some(call) = opcall else { return };
    let _ = state::with(|st| {
        if let Some(u) = st.coll.ops.user.get_mut(op) {
            if let UserKind::Int(f) | UserKind::Cxx(f, _) = u.f {
                u.f = UserKind::Cxx(f, call);
            }
        }
        Ok(())
    });
}

/// An error handler made by MPICH's C++ library: it is called through `errcall`.
///
/// # Safety
/// `errcall` has the signature of `CxxErrCall`.
#[no_mangle]
pub unsafe extern "C" fn MPII_Errhandler_set_cxx(
    errhandler: MPI_Errhandler,
    errcall: Option<CxxErrCall>,
) {
    let Some(call) = errcall else { return };
    let _ = state::with(|st| {
        if let Some(h) = st.objects.errhandlers.user.get_mut(errhandler) {
            if let Some(c) = h.into_cxx(call) {
                *h = c;
            }
        }
        Ok(())
    });
}

mpi_fn! {
    /// ULFM's agreement: the bitwise AND of `flag` over the communicator. No process of a
    /// running Ferrite job has failed (a lost process ends the job), so every member takes
    /// part and this is an allreduce.
    fn MPIX_Comm_agree(comm: MPI_Comm, flag: *mut c_int) on ErrObj::Comm(comm) => {
        if flag.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for flag"));
        }
        // SAFETY: non-null per the check; the caller's int.
        let mine = unsafe { *flag };
        let mut all: c_int = 0;
        let (sb, rb) = (&mine as *const c_int as *const c_void, &mut all as *mut c_int as *mut c_void);
        crate::coll::blocking(comm, |st| {
            crate::coll::plans::allreduce(st, comm, sb, rb, 1, MPI_INT, MPI_BAND, crate::coll::Mode::Blocking)
        })?;
        // SAFETY: as above.
        unsafe { super::out(flag, all) }
    }
}

mpi_fn! {
    /// ULFM's shrink: a communicator of the surviving processes, all of them here (see
    /// MPIX_Comm_agree), so a duplicate.
    fn MPIX_Comm_shrink(comm: MPI_Comm, newcomm: *mut MPI_Comm) on ErrObj::Comm(comm) => {
        super::out_given(newcomm)?;
        if newcomm.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for newcomm"));
        }
        let h = super::comm::dup(comm)?;
        // SAFETY: non-null per the check.
        unsafe { super::out(newcomm, h) }
    }
}

mpi_fn! {
    /// ULFM: acknowledges the failures noticed so far (none can be, see MPIX_Comm_agree).
    fn MPIX_Comm_failure_ack(comm: MPI_Comm) on ErrObj::Comm(comm) => {
        state::with(|st| st.objects.comms.get(comm).map(|_| ()))
    }
}

mpi_fn! {
    /// ULFM: the group of acknowledged failed processes: empty.
    fn MPIX_Comm_failure_get_acked(comm: MPI_Comm, failedgrp: *mut MPI_Group)
        on ErrObj::Comm(comm) => {
        state::with(|st| st.objects.comms.get(comm).map(|_| ()))?;
        // SAFETY: the caller passes an MPI_Group* (null is refused by out).
        unsafe { super::out(failedgrp, MPI_GROUP_EMPTY) }
    }
}

mpi_fn! {
    /// ULFM's revoke needs every member told, at once, that the communicator is unusable:
    /// Ferrite has no such notice, so it says so instead of pretending.
    fn MPIX_Comm_revoke(comm: MPI_Comm) on ErrObj::Comm(comm) => {
        state::with(|st| st.objects.comms.get(comm).map(|_| ()))?;
        Err(MpiError::new(
            MPI_ERR_UNSUPPORTED_OPERATION,
            "MPIX_Comm_revoke is not implemented by Ferrite",
        ))
    }
}

mpi_fn! {
    /// No GPU memory support: `is_supported` is 0 for every GPU kind.
    fn MPIX_GPU_query_support(gpu_type: c_int, is_supported: *mut c_int) on ErrObj::NoObject => {
        let _ = gpu_type;
        // SAFETY: the caller passes an int* (null is refused by out).
        unsafe { super::out(is_supported, 0) }
    }
}

/// No CUDA, HIP or Level Zero memory support.
#[no_mangle]
pub extern "C" fn MPIX_Query_cuda_support() -> c_int {
    0
}
#[no_mangle]
pub extern "C" fn PMPIX_Query_cuda_support() -> c_int {
    0
}
#[no_mangle]
pub extern "C" fn MPIX_Query_hip_support() -> c_int {
    0
}
#[no_mangle]
pub extern "C" fn PMPIX_Query_hip_support() -> c_int {
    0
}
#[no_mangle]
pub extern "C" fn MPIX_Query_ze_support() -> c_int {
    0
}
#[no_mangle]
pub extern "C" fn PMPIX_Query_ze_support() -> c_int {
    0
}

mpi_fn! {
    /// MPICH's name, before MPI 4.1, for MPI_Remove_error_class.
    fn MPIX_Delete_error_class(errorclass: c_int) on ErrObj::NoObject => {
        super::errhandler::remove_class(errorclass)
    }
}

mpi_fn! {
    /// MPICH's name for MPI_Remove_error_code.
    fn MPIX_Delete_error_code(errorcode: c_int) on ErrObj::NoObject => {
        super::errhandler::remove_code(errorcode)
    }
}

mpi_fn! {
    /// MPICH's name for MPI_Remove_error_string.
    fn MPIX_Delete_error_string(errorcode: c_int) on ErrObj::NoObject => {
        super::errhandler::remove_string(errorcode)
    }
}
