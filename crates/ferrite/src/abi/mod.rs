//! The C ABI edge: every `MPI_X`/`PMPI_X` entry point, argument conversion, status writing.
//!
//! Entry points are declared once with [`mpi_fn!`](crate::mpi_fn), which makes `PMPI_X` the
//! implementation and `MPI_X` a thin, interposable forwarder (the profiling interface).
//! Functions of mpi.h not implemented anywhere are generated as loud failures (`unsupported`).

#[macro_use]
pub mod macros;
pub mod attr;
pub mod coll;
pub mod comm;
pub mod consts;
pub mod datatype;
pub mod environment;
pub mod errhandler;
pub mod file;
pub mod grequest;
pub mod group;
pub mod info;
pub mod init;
pub mod mpich_ext;
pub mod p2p;
pub mod pack;
pub mod part;
pub mod request;
pub mod rma;
pub mod session;
mod sigcheck;
pub mod status;
pub mod stubs;
pub mod symbols;
pub mod topo;
pub mod types;
pub mod version;
pub mod win;

use crate::error::{MpiError, MpiResult};

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
