//! The plain types every layer shares: who (a world rank), when (a time), and the C ABI's
//! status structs (the generated constants in `consts` name them). A leaf: it imports nothing
//! from the crate.

/// A process: its rank in MPI_COMM_WORLD.
pub type Proc = u32;

/// Virtual or real time in microseconds since an origin the driver chooses. The connection
/// machines only compare and add times; they never read a clock.
pub type Micros = u64;
use std::os::raw::c_int;

/// `MPI_Status`, MPICH's 20-byte layout: the received byte count is split over `count_lo`
/// and the upper 31 bits of `count_hi_and_cancelled`, whose bit 0 is the cancelled flag.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MPI_Status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
}

/// `MPI_F08_status`: the status as the Fortran 2008 bindings see it (same fields, `MPI_Fint`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MPI_F08_status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
}

const _: () = assert!(std::mem::size_of::<MPI_Status>() == 20);
const _: () = assert!(std::mem::align_of::<MPI_Status>() == 4);
const _: () = assert!(std::mem::size_of::<MPI_F08_status>() == 20);
