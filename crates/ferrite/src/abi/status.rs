//! Writing statuses to C.

use super::consts::*;
use super::types::MPI_Status;
use crate::p2p::status::Status;

/// True when `p` is MPI_STATUS_IGNORE / MPI_STATUSES_IGNORE (MPICH: address 1) or null.
pub fn ignored(p: *const MPI_Status) -> bool {
    p.is_null() || p as usize == 1
}

/// Stores `st` into `*p` unless the caller passed MPI_STATUS_IGNORE.
///
/// # Safety
/// `p` is MPI_STATUS_IGNORE or points to writable memory for one `MPI_Status`.
pub unsafe fn store(p: *mut MPI_Status, st: &Status) {
    if ignored(p) {
        return;
    }
    let out = MPI_Status {
        count_lo: st.bytes as u32 as i32,
        count_hi_and_cancelled: (((st.bytes >> 32) as i32) << 1) | st.cancelled as i32,
        MPI_SOURCE: st.source,
        MPI_TAG: st.tag,
        MPI_ERROR: st.error,
    };
    // SAFETY: per this function's contract `p` is valid for one write.
    unsafe { p.write(out) };
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
        bytes: (s.count_lo as u32 as u64) | (((s.count_hi_and_cancelled >> 1) as u32 as u64) << 32),
        cancelled: s.count_hi_and_cancelled & 1 != 0,
    }
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
