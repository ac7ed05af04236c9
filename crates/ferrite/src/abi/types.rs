//! TEMPORARY stand-in until the ABI helper's types land.
use std::os::raw::c_int;
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MPI_Status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
}
