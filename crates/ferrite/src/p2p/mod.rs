//! Point-to-point messaging: matching (posted and unexpected queues) and protocols (eager,
//! rendezvous by single-copy read or by fragments), over `transport::Net`.

pub mod status;

use crate::transport::{Net, Proc};

/// Point-to-point state: requests, queues, packets waiting to go out.
#[derive(Default)]
pub struct P2p {}

impl P2p {
    pub fn new(_world_rank: u32, _world_size: u32) -> Self {
        P2p {}
    }

    /// An arrived packet (called from the progress engine while the transport is polled;
    /// anything to send in response is queued and goes out in `flush`).
    pub fn on_packet(&mut self, _from: Proc, _packet: &[u8]) {}

    /// Sends what is queued and does deferred work that needs the network (single-copy
    /// reads). Returns true if anything happened.
    pub fn flush(&mut self, _net: &mut Net) -> bool {
        false
    }

    /// True when sends wait for credits: the progress engine must not sleep for long.
    pub fn has_backlog(&self) -> bool {
        false
    }
}
