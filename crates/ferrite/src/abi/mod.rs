//! The C ABI edge: every `MPI_X`/`PMPI_X` entry point, argument conversion, status writing.
//!
//! Entry points are declared once with [`mpi_fn!`](crate::mpi_fn), which makes `PMPI_X` the
//! implementation and `MPI_X` a thin, interposable forwarder (the profiling interface).
//! Functions of mpi.h not implemented anywhere are generated as loud failures (`unsupported`).

#[macro_use]
pub mod macros;
pub mod consts;
pub mod init;
pub mod p2p;
pub mod request;
pub mod status;
pub mod types;

use crate::error::{MpiError, MpiResult};

/// Writes an output argument, rejecting a null pointer with MPI_ERR_ARG.
///
/// # Safety
/// `p` is null or valid for writing one `T` (an output argument from the C caller).
pub unsafe fn out<T>(p: *mut T, v: T) -> MpiResult<()> {
    if p.is_null() {
        return Err(MpiError::new(
            consts::MPI_ERR_ARG,
            "null pointer passed for an output argument",
        ));
    }
    // SAFETY: non-null, and valid for one write per this function's contract.
    unsafe { p.write(v) };
    Ok(())
}
