//! The collectives MPI-IO needs, on a file's private communicator (a dup of the one the file
//! was opened on, with MPI_ERRORS_RETURN), through the public entry points: MPI-IO sits
//! above the MPI objects and collectives like a user of them (as ROMIO does), and never
//! holds the state lock across them.

use crate::abi::coll as c;
use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use std::os::raw::{c_int, c_void};

fn check(rc: c_int, what: &str) -> MpiResult<()> {
    if rc == MPI_SUCCESS {
        Ok(())
    } else {
        Err(MpiError::from_code(rc).with_context(what))
    }
}

trait Context {
    fn with_context(self, what: &str) -> Self;
}

impl Context for MpiError {
    fn with_context(mut self, what: &str) -> Self {
        if self.msg.is_empty() {
            self.msg = format!("MPI-IO's internal {what} failed");
        }
        self
    }
}

/// A private duplicate of `comm` whose errors return.
pub fn dup(comm: MPI_Comm) -> MpiResult<MPI_Comm> {
    let mut d = MPI_COMM_NULL;
    check(
        // SAFETY: `d` is a valid MPI_Comm output.
        unsafe { crate::abi::comm::PMPI_Comm_dup(comm, &mut d) },
        "MPI_Comm_dup",
    )?;
    check(
        // SAFETY: plain handle arguments.
        unsafe { crate::abi::errhandler::PMPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN) },
        "MPI_Comm_set_errhandler",
    )?;
    Ok(d)
}

pub fn free(mut comm: MPI_Comm) {
    // SAFETY: `comm` is a valid MPI_Comm in/out argument.
    let _ = unsafe { crate::abi::comm::PMPI_Comm_free(&mut comm) };
}

pub fn barrier(comm: MPI_Comm) -> MpiResult<()> {
    // SAFETY: plain handle argument.
    check(unsafe { c::PMPI_Barrier(comm) }, "MPI_Barrier")
}

/// Broadcasts `buf` from `root` (every rank passes a buffer of the same length).
pub fn bcast(comm: MPI_Comm, buf: &mut [u8], root: i32) -> MpiResult<()> {
    check(
        // SAFETY: `buf` holds buf.len() bytes.
        unsafe {
            c::PMPI_Bcast(
                buf.as_mut_ptr() as *mut c_void,
                buf.len() as c_int,
                MPI_BYTE,
                root,
                comm,
            )
        },
        "MPI_Bcast",
    )
}

/// Every rank's `mine` (same length everywhere), in rank order.
pub fn allgather_u64(comm: MPI_Comm, mine: &[u64], size: usize) -> MpiResult<Vec<u64>> {
    let mut all = vec![0u64; mine.len() * size];
    check(
        // SAFETY: `mine` and `all` hold the counts given.
        unsafe {
            c::PMPI_Allgather(
                mine.as_ptr() as *const c_void,
                mine.len() as c_int,
                MPI_UINT64_T,
                all.as_mut_ptr() as *mut c_void,
                mine.len() as c_int,
                MPI_UINT64_T,
                comm,
            )
        },
        "MPI_Allgather",
    )?;
    Ok(all)
}

/// Number of distinct hosts among the ranks of `comm` (the default cb_nodes).
pub fn hosts(comm: MPI_Comm) -> MpiResult<usize> {
    let mut node = MPI_COMM_NULL;
    check(
        // SAFETY: `node` is a valid MPI_Comm output.
        unsafe {
            crate::abi::comm::PMPI_Comm_split_type(
                comm,
                MPI_COMM_TYPE_SHARED,
                0,
                MPI_INFO_NULL,
                &mut node,
            )
        },
        "MPI_Comm_split_type",
    )?;
    let mut r: c_int = 0;
    // SAFETY: `r` is a valid int output.
    let rc = unsafe { crate::abi::comm::PMPI_Comm_rank(node, &mut r) };
    free(node);
    check(rc, "MPI_Comm_rank")?;
    let leader = [u64::from(r == 0)];
    let mut n = [0u64];
    check(
        // SAFETY: one u64 each way.
        unsafe {
            c::PMPI_Allreduce(
                leader.as_ptr() as *const c_void,
                n.as_mut_ptr() as *mut c_void,
                1,
                MPI_UINT64_T,
                MPI_SUM,
                comm,
            )
        },
        "MPI_Allreduce",
    )?;
    Ok(n[0].max(1) as usize)
}
