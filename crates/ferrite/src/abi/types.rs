//! The C structures of `include/mpi.h` (the aliases for handles and callbacks are generated
//! into `consts`).

pub use crate::types::{MPI_F08_status, MPI_Status};
