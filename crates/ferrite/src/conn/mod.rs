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

pub mod handshake;
pub mod policy;
pub mod reliable;
pub mod wire;

#[cfg(test)]
mod sim;

use crate::runtime::config::Knob;

/// Virtual or real time in microseconds since an origin the driver chooses. The machines only
/// compare and add times; they never read a clock.
pub type Micros = u64;

/// Knobs of the connection manager. The lead moves these into `runtime/config.rs` KNOBS when
/// the connection manager is wired in.
/// (`FERRITE_CONN` and `FERRITE_CONN_MAX` are live: they are in KNOBS.)
pub const CONN_KNOBS: &[Knob] = &[
    Knob {
        name: "FERRITE_CONN_SETUP",
        default: "ud",
        doc: "Connection set-up: ud (handshake over the datagram channel) or cm (connect/accept).",
    },
    Knob {
        name: "FERRITE_CONN_THRESHOLD",
        default: "16",
        doc: "Adaptive policy: messages to a peer over datagrams before a connection is opened.",
    },
    Knob {
        name: "FERRITE_CONN_IDLE_MS",
        default: "30000",
        doc: "Adaptive policy: close a connection unused for this many milliseconds; 0: never.",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_are_named_by_area_and_documented() {
        for k in CONN_KNOBS {
            assert!(k.name.starts_with("FERRITE_CONN"), "{}", k.name);
            assert!(!k.doc.is_empty() && !k.default.is_empty());
        }
        assert_eq!(CONN_KNOBS.len(), 3);
    }
}
