//! Ferrite MPI: an MPI implementation behind MPICH's C ABI.
//!
//! Layers (top to bottom, see docs/architecture.md): `abi` (C entry points) -> `objects`
//! (communicators, datatypes, ...) -> `p2p` (matching, protocols) -> `transport` (self, shm)
//! -> `progress` (the one loop) -> `runtime` (PMI, configuration).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types, non_snake_case, clippy::missing_safety_doc)]

pub mod abi;
pub mod coll;
pub mod conn;
pub mod error;
pub mod fxhash;
pub mod io;
pub mod objects;
pub mod p2p;
pub mod progress;
pub mod rma;
pub mod runtime;
pub mod state;
pub mod transport;
