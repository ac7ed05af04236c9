//! Ferrite MPI: an MPI implementation behind MPICH's C ABI.
//!
//! Layers (top to bottom; docs/architecture.md, and tests/layers/check.py checks every
//! `crate::` path against its table): `abi` (C entry points) and `io` -> `objects`, `coll`,
//! `rma`, `p2p`, `state`, `progress`, `error` -> `transport` (self, shm, tcp, udp, ofi) -> `conn`
//! (the connection manager, sans-IO) -> `runtime`'s configuration and PMI client -> the
//! leaves `consts` (MPI constants), `types` (`Proc`, `Micros`, the status structs), `fxhash`, `lock_order`.
//! Errors below `error` carry no MPI class (`transport::Error`, `runtime::pmi::Error`);
//! `error` maps them to classes in one place.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types, non_snake_case, clippy::missing_safety_doc)]

pub mod abi;
pub mod coll;
pub mod conn;
pub mod consts;
pub mod error;
pub mod fxhash;
pub mod io;
pub mod lock_order;
pub mod objects;
pub mod p2p;
pub mod progress;
pub mod progress_thread;
pub mod rma;
pub mod runtime;
pub mod state;
pub mod tool;
pub mod transport;
pub mod types;
