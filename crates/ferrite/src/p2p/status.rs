//! What a completed operation reports (written to a C `MPI_Status` at the ABI edge).

use std::os::raw::c_int;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    /// Bytes received (MPI_Get_count divides by the datatype size).
    pub bytes: u64,
    pub cancelled: bool,
}
