//! The connection manager: which peers get a connection, when, and how it is set up, the same
//! way for every connection-oriented transport (tcp now, libfabric later).
//!
//! Everything here is a pure, sans-IO state machine in the style of quinn-proto: the driver
//! (a transport, or the simulated network in tests) feeds it datagrams or stream messages and
//! the current time, and takes out what to send, when to call again (timers) and events. No
//! sockets are touched and no clock is read inside, so the machines are deterministic and can
//! be run by the thousand in a simulation.
//!
//! - [`wire`]: the datagram channel's versioned header (job secret, source rank, kind).
//! - [`reliable`]: reliable, ordered, exactly-once messages over an unreliable datagram channel.
//! - [`handshake`]: connection set-up, `ud` (request/reply/confirm over datagrams) and `cm`
//!   (connect/accept with a hello on the new socket).
//! - [`policy`]: when to open and close connections (static, ondemand, partial, adaptive).
//! - [`manager`]: the composition of all of them that transports drive (sockets or fabric
//!   endpoints in, dial/write/close/flush/fail out).

pub mod handshake;
pub mod manager;
pub mod policy;
pub mod reliable;
pub mod wire;

#[cfg(test)]
mod sim;

pub use crate::types::{Micros, Proc};
