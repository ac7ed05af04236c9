//! PMI-1 ("simple PMI"), the wire protocol MPICH's Hydra speaks with MPI processes.
//!
//! - [`wire`]: the line codec (`cmd=NAME key=value ...`), bounded and total.
//! - [`client`]: the blocking client an MPI process uses (`PMI_FD` or `PMI_PORT`).
//! - [`server`]: the launcher's side as a pure state machine.

pub mod client;
pub mod server;
pub mod wire;

pub use client::{abort_line, Client, JobInfo, PmiError, PmiResult};
pub use server::{ClientId, Event, Output, Server};
pub use wire::{LineBuffer, Message, WireError, MAX_LINE};
