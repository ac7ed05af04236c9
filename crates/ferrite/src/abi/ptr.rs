//! Typed access to the C caller's pointers, each carrying its safety argument once: output
//! arguments, input arrays (count + pointer; null allowed with count 0), strings, and request
//! arrays, which are copied in and written back so that no Rust reference to user memory is
//! alive while user code (a generalized request's query/free callback) runs.

use super::consts;
use super::consts::MPI_Request;
use crate::error::{MpiError, MpiResult};
use std::os::raw::c_int;

/// Writes an output argument, rejecting a null pointer with MPI_ERR_ARG.
///
/// # Safety
/// `p` is null or valid for writing one `T` (an output argument from the C caller).
pub unsafe fn out<T>(p: *mut T, v: T) -> MpiResult<()> {
    out_given(p)?;
    // SAFETY: non-null, and valid for one write per this function's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Refuses a null output pointer (MPI_ERR_ARG): constructors check theirs before they
/// start, so a bad argument neither runs a collective nor leaks the new object.
pub fn out_given<T>(p: *mut T) -> MpiResult<()> {
    if p.is_null() {
        return Err(MpiError::new(
            consts::MPI_ERR_ARG,
            "null pointer passed for an output argument",
        ));
    }
    Ok(())
}

/// Borrows a C input array of `n` elements, rejecting a null pointer (when `n > 0`) and a
/// negative length with MPI_ERR_ARG.
///
/// # Safety
/// `p` is null or valid for reading `n` elements of `T` for the returned lifetime.
pub unsafe fn slice<'a, T>(p: *const T, n: std::os::raw::c_int, what: &str) -> MpiResult<&'a [T]> {
    if n < 0 {
        return Err(crate::mpi_err!(
            consts::MPI_ERR_ARG,
            "negative length {n} for {what}"
        ));
    }
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(crate::mpi_err!(
            consts::MPI_ERR_ARG,
            "null pointer passed for {what}"
        ));
    }
    // SAFETY: non-null and valid for `n` reads per this function's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n as usize) })
}

/// Copies `s` into a C string buffer of `cap` bytes (NUL included), truncating, and writes
/// its length (without the NUL) to `len` if not null.
///
/// # Safety
/// `buf` is valid for writing `cap` bytes; `len` is null or valid for one write.
pub unsafe fn out_str(
    buf: *mut std::os::raw::c_char,
    cap: std::os::raw::c_int,
    len: *mut std::os::raw::c_int,
    s: &str,
) -> MpiResult<()> {
    if buf.is_null() {
        return Err(MpiError::new(
            consts::MPI_ERR_ARG,
            "null pointer passed for a string buffer",
        ));
    }
    let n = s.len().min(cap.max(1) as usize - 1);
    // SAFETY: `buf` holds `cap` >= n + 1 bytes per the contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    if !len.is_null() {
        // SAFETY: non-null, valid for one write per the contract.
        unsafe { len.write(n as std::os::raw::c_int) };
    }
    Ok(())
}

/// A copy of the caller's `MPI_Request` array. Completion calls
/// work on `handles` and [`write_back`](Self::write_back) the result, so user code that runs
/// in between (generalized request callbacks) sees a consistent array and Rust holds no
/// reference into it.
pub struct Requests {
    user: *mut MPI_Request,
    pub handles: Handles,
}

/// Arrays up to this long are copied into [`Handles`] itself, not the heap: a halo
/// exchange's Waitall of a few requests then allocates nothing.
const INLINE_HANDLES: usize = 16;

/// The handles of [`Requests`]: a slice, kept inline when short.
pub enum Handles {
    Inline(usize, [MPI_Request; INLINE_HANDLES]),
    Heap(Vec<MPI_Request>),
}

impl std::ops::Deref for Handles {
    type Target = [MPI_Request];
    #[inline]
    fn deref(&self) -> &[MPI_Request] {
        match self {
            Handles::Inline(n, a) => &a[..*n],
            Handles::Heap(v) => v,
        }
    }
}

impl std::ops::DerefMut for Handles {
    #[inline]
    fn deref_mut(&mut self) -> &mut [MPI_Request] {
        match self {
            Handles::Inline(n, a) => &mut a[..*n],
            Handles::Heap(v) => v,
        }
    }
}

impl Requests {
    /// Copies `n` requests in; a negative count is MPI_ERR_COUNT, a null array (n > 0)
    /// MPI_ERR_ARG.
    ///
    /// # Safety
    /// `p` is null or valid for reading and writing `n` requests until `write_back`.
    pub unsafe fn read(n: c_int, p: *mut MPI_Request) -> MpiResult<Self> {
        if n < 0 {
            return Err(crate::mpi_err!(consts::MPI_ERR_COUNT, "negative count {n}"));
        }
        if n > 0 && p.is_null() {
            return Err(MpiError::new(consts::MPI_ERR_ARG, "null array of requests"));
        }
        let n = n as usize;
        if n == 0 {
            return Ok(Requests {
                user: p,
                handles: Handles::Inline(0, [0; INLINE_HANDLES]),
            });
        }
        // SAFETY: non-null and valid for `n` reads per the contract.
        let from = unsafe { std::slice::from_raw_parts(p, n) };
        let handles = if n <= INLINE_HANDLES {
            let mut a = [0; INLINE_HANDLES];
            a[..n].copy_from_slice(from);
            Handles::Inline(n, a)
        } else {
            Handles::Heap(from.to_vec())
        };
        Ok(Requests { user: p, handles })
    }

    /// Stores the handles (some now MPI_REQUEST_NULL) into the caller's array.
    pub fn write_back(&self) {
        if self.handles.is_empty() {
            return;
        }
        // SAFETY: `read` checked `user` non-null for a non-empty array, valid for writing
        // `handles.len()` requests per its contract.
        unsafe {
            std::ptr::copy_nonoverlapping(self.handles.as_ptr(), self.user, self.handles.len())
        };
    }
}

/// Reads the caller's `MPI_Request*` (by value: it is written back with [`out`] when the
/// call changes it); a null pointer is MPI_ERR_REQUEST.
///
/// # Safety
/// `p` is null or valid for reading one request.
pub unsafe fn request(p: *const MPI_Request) -> MpiResult<MPI_Request> {
    if p.is_null() {
        return Err(MpiError::new(
            consts::MPI_ERR_REQUEST,
            "null request pointer",
        ));
    }
    // SAFETY: non-null, one request per the contract.
    Ok(unsafe { p.read() })
}
