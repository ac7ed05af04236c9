//! The datagram path of a connection-oriented transport (tcp, ofi): the [`Channel`] that
//! carries adaptive traffic and `ud` handshakes, and per peer the packets its window has not
//! taken yet, in order. One copy of what both transports do with it; the connection manager
//! (`conn::manager`) decides what goes this way.

use super::channel::Channel;
use super::port::{Port, UdpPort};
use crate::conn::manager::Manager;
use crate::transport::error::TResult;
use crate::transport::Proc;
use std::collections::{HashMap, VecDeque};

pub struct Datagrams<P: Port = UdpPort> {
    pub chan: Channel<P>,
    /// Packets for `chan` that its window has not taken yet, per peer, in order, and their
    /// bytes.
    backlog: HashMap<Proc, (VecDeque<Vec<u8>>, usize)>,
    bytes: usize,
}

/// What one `poll` brought.
#[derive(Default)]
pub struct Polled {
    /// Packets handed to `deliver`, and their bytes.
    pub packets: u64,
    pub bytes: u64,
    /// Peers packets came from (for the manager's LRU order), in order, repeats collapsed.
    pub from: Vec<Proc>,
    /// `ud` handshake datagrams for `Manager::datagram`.
    pub control: Vec<Vec<u8>>,
}

impl<P: Port> Datagrams<P> {
    pub fn new(chan: Channel<P>) -> Self {
        Datagrams {
            chan,
            backlog: HashMap::new(),
            bytes: 0,
        }
    }

    /// Sends (or keeps, in order behind what waits) one packet to `to`.
    pub fn send(&mut self, to: Proc, parts: &[&[u8]]) -> TResult<()> {
        let (q, n) = self.backlog.entry(to).or_default();
        if q.is_empty() && self.chan.send(to, parts)? {
            return Ok(());
        }
        let b = parts.concat();
        self.bytes += b.len();
        *n += b.len();
        q.push_back(b);
        Ok(())
    }

    /// Packets that waited for a connection go over datagrams instead, in order.
    pub fn push(&mut self, to: Proc, pkts: impl IntoIterator<Item = Vec<u8>>) {
        let (q, n) = self.backlog.entry(to).or_default();
        for b in pkts {
            self.bytes += b.len();
            *n += b.len();
            q.push_back(b);
        }
        self.drain();
    }

    /// Offers the backlogs to the channel again.
    pub fn drain(&mut self) {
        for (&to, (q, n)) in self.backlog.iter_mut() {
            while let Some(b) = q.front() {
                match self.chan.send(to, &[b]) {
                    Ok(true) => {
                        self.bytes -= b.len();
                        *n -= b.len();
                        q.pop_front();
                    }
                    Ok(false) => break,
                    Err(_) => {
                        // The channel gave up on the peer: its `take_failures` reports it.
                        self.bytes -= *n;
                        *n = 0;
                        q.clear();
                    }
                }
            }
        }
    }

    /// Datagrams to `peer` not yet acknowledged or still waiting (its connection waits for 0).
    pub fn in_flight(&self, peer: Proc) -> usize {
        self.backlog.get(&peer).map_or(0, |(q, _)| q.len()) + self.chan.in_flight(peer)
    }

    /// Bytes waiting for the channel's window (to `peer`, or to all).
    pub fn backlog_bytes(&self, peer: Option<Proc>) -> usize {
        match peer {
            Some(p) => self.backlog.get(&p).map_or(0, |(_, n)| *n),
            None => self.bytes,
        }
    }

    /// Adaptive: the peers whose connection waits for their datagrams and has none in flight
    /// any more (for `Manager::datagrams_drained`).
    pub fn drained(&self, mgr: &Manager) -> Vec<Proc> {
        if !mgr.is_draining() {
            return Vec::new();
        }
        mgr.draining()
            .into_iter()
            .filter(|&p| self.in_flight(p) == 0)
            .collect()
    }

    /// Delivers what came over datagrams (whole packets, in order per peer) and collects the
    /// handshake datagrams; then offers the backlogs again.
    pub fn poll(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> Polled {
        let mut out = Polled::default();
        self.chan.poll(
            &mut |from, p| {
                out.packets += 1;
                out.bytes += p.len() as u64;
                if out.from.last() != Some(&from) {
                    out.from.push(from);
                }
                deliver(from, p)
            },
            &mut |b| out.control.push(b.to_vec()),
        );
        self.drain();
        out
    }
}
