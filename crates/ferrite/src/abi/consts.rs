//! TEMPORARY stand-in until the generated constants (from include/mpi.h) land.
#![allow(dead_code)]
use std::os::raw::c_int;
pub type MPI_Comm = c_int;
pub type MPI_Datatype = c_int;
pub type MPI_Errhandler = c_int;
pub type MPI_Request = c_int;
pub type MPI_Group = c_int;
pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_ARG: c_int = 12;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_OTHER: c_int = 15;
pub const MPI_ERR_INTERN: c_int = 16;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 44;
pub const MPI_COMM_WORLD: MPI_Comm = 0x44000000;
pub const MPI_COMM_SELF: MPI_Comm = 0x44000001;
pub const MPI_COMM_NULL: MPI_Comm = 0x04000000;
pub const MPI_ERRORS_ARE_FATAL: MPI_Errhandler = 0x54000000;
pub const MPI_ERRORS_RETURN: MPI_Errhandler = 0x54000001;
pub const MPI_ERRORS_ABORT: MPI_Errhandler = 0x54000003;
pub const MPI_ERRHANDLER_NULL: MPI_Errhandler = 0x14000000;
pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1;
pub const MPI_THREAD_SERIALIZED: c_int = 2;
pub const MPI_THREAD_MULTIPLE: c_int = 3;
