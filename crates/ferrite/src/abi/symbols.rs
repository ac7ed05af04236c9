//! Data symbols and helper functions that MPICH's `mpi.h` makes programs reference directly,
//! so a binary built against MPICH (or against our header) finds them in libmpi.so.12.
//!
//! The sentinels are addresses of private objects; the objects carry MPICH's names too, since
//! MPICH's Fortran layer refers to them.
#![allow(non_upper_case_globals)]

use super::consts::*;
use super::types::MPI_F08_status;
use std::os::raw::{c_int, c_void};
use std::ptr::{addr_of, addr_of_mut};

/// A pointer stored in an exported C variable (`int *const MPI_UNWEIGHTED`, ...).
#[repr(transparent)]
pub struct CPtr<T>(pub *mut T);
// SAFETY: the pointers are set once at compile time and only compared, never dereferenced,
// by Ferrite; C code sees them as plain constant variables.
unsafe impl<T> Sync for CPtr<T> {}

/// Zero-sized-in-spirit objects whose addresses are the sentinels. `static mut` so that the
/// C side may treat them as the writable objects MPICH declares (nothing ever writes them).
#[no_mangle]
pub static mut MPIR_C_MPI_UNWEIGHTED: c_int = 0;
#[no_mangle]
pub static mut MPIR_C_MPI_WEIGHTS_EMPTY: c_int = 0;
#[no_mangle]
pub static mut MPIR_F08_MPI_STATUS_IGNORE_OBJ: MPI_F08_status = MPI_F08_status {
    count_lo: 0,
    count_hi_and_cancelled: 0,
    MPI_SOURCE: 0,
    MPI_TAG: 0,
    MPI_ERROR: 0,
};
#[no_mangle]
pub static mut MPIR_F08_MPI_STATUSES_IGNORE_OBJ: [MPI_F08_status; 1] = [MPI_F08_status {
    count_lo: 0,
    count_hi_and_cancelled: 0,
    MPI_SOURCE: 0,
    MPI_TAG: 0,
    MPI_ERROR: 0,
}];
#[no_mangle]
pub static mut MPIR_F08_MPI_IN_PLACE: c_int = 0;
#[no_mangle]
pub static mut MPIR_F08_MPI_BOTTOM: c_int = 0;
static mut PVAR_ALL_HANDLES_OBJ: u8 = 0;

/// `MPI_UNWEIGHTED`: pass as the weights of a distributed graph to mean "no weights".
#[no_mangle]
pub static MPI_UNWEIGHTED: CPtr<c_int> = CPtr(addr_of_mut!(MPIR_C_MPI_UNWEIGHTED));
/// `MPI_WEIGHTS_EMPTY`: weights of a process that has no edges.
#[no_mangle]
pub static MPI_WEIGHTS_EMPTY: CPtr<c_int> = CPtr(addr_of_mut!(MPIR_C_MPI_WEIGHTS_EMPTY));
/// Null until a Fortran binding sets them: MPICH's Fortran library writes the addresses of
/// its own sentinels here in MPI_INIT, so these must be writable data, as in MPICH (a
/// read-only symbol makes MPICH's libmpifort crash on top of ours). Ferrite never reads them.
#[no_mangle]
pub static mut MPI_F_STATUS_IGNORE: CPtr<MPI_Fint> = CPtr(std::ptr::null_mut());
#[no_mangle]
pub static mut MPI_F_STATUSES_IGNORE: CPtr<MPI_Fint> = CPtr(std::ptr::null_mut());
#[no_mangle]
pub static MPI_F08_STATUS_IGNORE: CPtr<MPI_F08_status> =
    CPtr(addr_of_mut!(MPIR_F08_MPI_STATUS_IGNORE_OBJ));
#[no_mangle]
pub static MPI_F08_STATUSES_IGNORE: CPtr<MPI_F08_status> =
    CPtr(addr_of_mut!(MPIR_F08_MPI_STATUSES_IGNORE_OBJ).cast());
/// `MPI_T_PVAR_ALL_HANDLES`: a handle value that means "every handle of the session".
#[no_mangle]
pub static MPI_T_PVAR_ALL_HANDLES: CPtr<c_void> = CPtr(addr_of_mut!(PVAR_ALL_HANDLES_OBJ).cast());

/// True when `weights` is MPI_UNWEIGHTED.
pub fn is_unweighted(weights: *const c_int) -> bool {
    std::ptr::eq(weights, addr_of!(MPIR_C_MPI_UNWEIGHTED))
}

/// True when `weights` is MPI_WEIGHTS_EMPTY.
pub fn is_weights_empty(weights: *const c_int) -> bool {
    std::ptr::eq(weights, addr_of!(MPIR_C_MPI_WEIGHTS_EMPTY))
}

/// True when `handle` is MPI_T_PVAR_ALL_HANDLES.
pub fn is_pvar_all_handles(handle: MPI_T_pvar_handle) -> bool {
    std::ptr::eq(handle.cast::<u8>(), addr_of!(PVAR_ALL_HANDLES_OBJ))
}

/// The function behind MPI_DUP_FN, MPI_COMM_DUP_FN, MPI_TYPE_DUP_FN and MPI_WIN_DUP_FN
/// (MPICH's name, which MPICH-built programs reference): copies the attribute value as is.
#[no_mangle]
pub unsafe extern "C" fn MPIR_Dup_fn(
    _oldcomm: MPI_Comm,
    _keyval: c_int,
    _extra_state: *mut c_void,
    attribute_val_in: *mut c_void,
    attribute_val_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    if attribute_val_out.is_null() || flag.is_null() {
        return MPI_ERR_ARG;
    }
    // SAFETY: MPI calls copy callbacks with attribute_val_out pointing to a void* slot and
    // flag to an int, both writable (checked non-null above).
    unsafe {
        attribute_val_out
            .cast::<*mut c_void>()
            .write(attribute_val_in);
        flag.write(1);
    }
    MPI_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinels_are_distinct_and_recognised() {
        assert!(is_unweighted(MPI_UNWEIGHTED.0));
        assert!(is_weights_empty(MPI_WEIGHTS_EMPTY.0));
        assert!(!is_unweighted(MPI_WEIGHTS_EMPTY.0));
        assert!(!MPI_UNWEIGHTED.0.is_null());
        assert!(is_pvar_all_handles(MPI_T_PVAR_ALL_HANDLES.0));
        assert!(!MPI_F08_STATUS_IGNORE.0.is_null());
    }

    #[test]
    fn dup_fn_copies_the_value_and_sets_flag() {
        let mut out: *mut c_void = std::ptr::null_mut();
        let mut flag = 0;
        let val = 0x1234usize as *mut c_void;
        // SAFETY: out and flag are valid locals.
        let rc = unsafe {
            MPIR_Dup_fn(
                MPI_COMM_WORLD,
                7,
                std::ptr::null_mut(),
                val,
                (&mut out as *mut *mut c_void).cast(),
                &mut flag,
            )
        };
        assert_eq!((rc, out, flag), (MPI_SUCCESS, val, 1));
    }
}
