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
pub mod ptr;
pub mod request;
pub mod rma;
pub mod session;
mod sigcheck;
pub mod status;
pub mod stubs;
pub mod symbols;
pub mod tool;
pub mod topo;
pub mod types;
pub mod version;
pub mod win;

pub use ptr::{out, out_given, out_str, slice};
