//! Writing statuses to C.

use super::consts::*;
use super::types::{MPI_F08_status, MPI_Status};
use crate::error::{ErrObj, MpiResult};
use crate::p2p::status::Status;
use std::os::raw::c_int;

/// True when `p` is MPI_STATUS_IGNORE / MPI_STATUSES_IGNORE (MPICH: address 1) or null.
pub fn ignored(p: *const MPI_Status) -> bool {
    p.is_null() || p as usize == 1
}

/// Stores `st` into `*p` unless the caller passed MPI_STATUS_IGNORE. A single-status call
/// returns its error as its result, and MPI 4.1 section 3.2.5 leaves MPI_ERROR to the calls
/// that return MPI_ERR_IN_STATUS (see [`store_with_error`]): after a successful operation
/// the field is left as it was (programs, MPICH's mprobe test among them, check that); after
/// a failed one it says why, as MPICH's does.
///
/// # Safety
/// `p` is MPI_STATUS_IGNORE or points to writable memory for one `MPI_Status`.
pub unsafe fn store(p: *mut MPI_Status, st: &Status) {
    if ignored(p) {
        return;
    }
    let error = if st.error == MPI_SUCCESS {
        // SAFETY: per this function's contract `p` is valid for reads and writes.
        unsafe { (*p).MPI_ERROR }
    } else {
        st.error
    };
    // SAFETY: as above.
    unsafe { p.write(c_status(st, error)) };
}

/// Like [`store`], MPI_ERROR included (multiple-completion calls returning
/// MPI_ERR_IN_STATUS).
///
/// # Safety
/// As for [`store`].
pub unsafe fn store_with_error(p: *mut MPI_Status, st: &Status) {
    if !ignored(p) {
        // SAFETY: per this function's contract `p` is valid for one write.
        unsafe { p.write(c_status(st, st.error)) };
    }
}

fn c_status(st: &Status, error: c_int) -> MPI_Status {
    MPI_Status {
        count_lo: st.bytes as u32 as i32,
        count_hi_and_cancelled: (((st.bytes >> 32) as i32) << 1) | st.cancelled as i32,
        MPI_SOURCE: st.source,
        MPI_TAG: st.tag,
        MPI_ERROR: error,
    }
}

/// Reads a C status back (MPI_Get_count, MPI_Status_set_*).
///
/// # Safety
/// `p` points to a readable `MPI_Status`.
pub unsafe fn load(p: *const MPI_Status) -> Status {
    // SAFETY: per this function's contract.
    let s = unsafe { p.read() };
    Status {
        source: s.MPI_SOURCE,
        tag: s.MPI_TAG,
        error: s.MPI_ERROR,
        // count_hi_and_cancelled holds the count's bits 32..63 above the cancelled bit:
        // shifted as unsigned, or a count >= 2^62 would come back with its sign smeared
        // into bit 63 (MPICH's big_count_status).
        bytes: (s.count_lo as u32 as u64)
            | ((((s.count_hi_and_cancelled as u32) >> 1) as u64) << 32),
        cancelled: s.count_hi_and_cancelled & 1 != 0,
    }
}

// ----- language conversions (MPI 4.1, section 19.3.5) -----
//
// MPICH's Fortran status (MPI_F_STATUS_SIZE = 5 INTEGERs) and MPI_F08_status hold the C
// status's five ints in the same order, so each conversion is a copy of five ints. The
// IGNORE values are not statuses: converting them is erroneous (MPI_ERR_ARG).

/// Reads five ints from a status-shaped input `p`, refusing null and the IGNORE values.
///
/// # Safety
/// `p` is null, one of the IGNORE values or points to five readable ints.
unsafe fn read5(p: *const c_int, ignore: *const c_int, what: &str) -> MpiResult<[c_int; 5]> {
    if p.is_null() || p as usize == 1 || p == ignore {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "{what} is null or an IGNORE value, not a status"
        ));
    }
    // SAFETY: per the contract, five readable ints (every status layout here is 5 x int).
    Ok(unsafe { p.cast::<[c_int; 5]>().read_unaligned() })
}

/// Writes five ints to a status-shaped output `p`, refusing null and the IGNORE values.
///
/// # Safety
/// `p` is null, one of the IGNORE values or points to room for five ints.
unsafe fn write5(p: *mut c_int, ignore: *const c_int, what: &str, v: [c_int; 5]) -> MpiResult<()> {
    if p.is_null() || p as usize == 1 || p.cast_const() == ignore {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "{what} is null or an IGNORE value, not a status"
        ));
    }
    // SAFETY: per the contract, room for five ints.
    unsafe { p.cast::<[c_int; 5]>().write_unaligned(v) };
    Ok(())
}

fn f08_ignore() -> *const c_int {
    super::symbols::MPI_F08_STATUS_IGNORE.0.cast_const().cast()
}

macro_rules! status_conversion {
    ($(fn $name:ident, $from:ident: $fty:ty, $to:ident: $tty:ty, $fign:expr, $tign:expr;)*) => {$(
        mpi_fn! {
            fn $name($from: $fty, $to: $tty) on ErrObj::NoObject => {
                // SAFETY: the caller passes its status pointers (checked for null/IGNORE).
                let v = unsafe { read5($from.cast(), $fign, stringify!($from)) }?;
                // SAFETY: as above.
                unsafe { write5($to.cast(), $tign, stringify!($to), v) }
            }
        }
    )*};
}

const NONE: *const c_int = std::ptr::null();

status_conversion! {
    fn MPI_Status_c2f, c_status: *const MPI_Status, f_status: *mut MPI_Fint, NONE, NONE;
    fn MPI_Status_f2c, f_status: *const MPI_Fint, c_status: *mut MPI_Status, NONE, NONE;
    fn MPI_Status_c2f08, c_status: *const MPI_Status, f08_status: *mut MPI_F08_status, NONE, f08_ignore();
    fn MPI_Status_f082c, f08_status: *const MPI_F08_status, c_status: *mut MPI_Status, f08_ignore(), NONE;
    fn MPI_Status_f082f, f08_status: *const MPI_F08_status, f_status: *mut MPI_Fint, f08_ignore(), NONE;
    fn MPI_Status_f2f08, f_status: *const MPI_Fint, f08_status: *mut MPI_F08_status, NONE, f08_ignore();
}

#[allow(dead_code)]
const _STATUS_IS_20_BYTES: () = assert!(std::mem::size_of::<MPI_Status>() == 20);
#[allow(dead_code)]
const _SUCCESS_IS_ZERO: () = assert!(MPI_SUCCESS == 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips_large_counts_and_cancel() {
        let st = Status {
            source: 3,
            tag: 77,
            error: 0,
            bytes: (5u64 << 32) + 12345,
            cancelled: true,
        };
        let mut c = MPI_Status::default();
        // SAFETY: `c` is a valid local MPI_Status.
        unsafe { store(&mut c, &st) };
        // SAFETY: as above.
        assert_eq!(unsafe { load(&c) }, st);
        // SAFETY: MPI_STATUS_IGNORE is never written to.
        unsafe { store(std::ptr::without_provenance_mut(1), &st) };
    }
}
