//! The `self` transport: packets a process sends to itself go through an in-process FIFO,
//! and a single-copy read of its own memory is a memcpy.

use super::TResult;
use super::{Proc, Transport, TransportStats};
use std::collections::VecDeque;

pub struct Loopback {
    rank: Proc,
    fifo: VecDeque<Vec<u8>>,
    /// Delivered packets' buffers, reused so a steady exchange allocates nothing.
    spare: Vec<Vec<u8>>,
    stats: TransportStats,
}

/// Spare buffers kept at most (and only those up to `SPARE_BYTES` of capacity).
const SPARE_MAX: usize = 16;
const SPARE_BYTES: usize = 1 << 17;

impl Loopback {
    pub fn new(rank: Proc) -> Loopback {
        Loopback {
            rank,
            fifo: VecDeque::new(),
            spare: Vec::new(),
            stats: TransportStats::default(),
        }
    }
}

impl Transport for Loopback {
    fn name(&self) -> &'static str {
        "self"
    }

    fn reports_failures(&self) -> bool {
        false
    }

    /// No cells to fit: the limit only keeps eager sends to self comparable to shm.
    fn max_packet(&self) -> usize {
        1 << 16
    }

    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> TResult<bool> {
        debug_assert_eq!(to, self.rank);
        let mut packet = self.spare.pop().unwrap_or_default();
        packet.clear();
        for p in parts {
            packet.extend_from_slice(p);
        }
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += packet.len() as u64;
        self.fifo.push_back(packet);
        Ok(true)
    }

    fn poll(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        if self.fifo.is_empty() {
            return 0;
        }
        // Only what is queued now: packets sent from inside `deliver` wait for the next poll.
        let n = self.fifo.len();
        for _ in 0..n {
            let p = self.fifo.pop_front().expect("counted");
            self.stats.packets_received += 1;
            self.stats.bytes_received += p.len() as u64;
            deliver(self.rank, &p);
            if self.spare.len() < SPARE_MAX && p.capacity() <= SPARE_BYTES {
                self.spare.push(p);
            }
        }
        n
    }

    fn read_remote(&mut self, _from: Proc, addr: u64, dst: &mut [u8]) -> TResult<bool> {
        if !dst.is_empty() {
            // SAFETY: the protocol passes the address of a send buffer of this process that
            // it announced in a rendezvous packet and keeps alive (the send is incomplete)
            // until this read is done; it is `dst.len()` bytes long and distinct from `dst`
            // (a receive buffer), as MPI forbids overlapping send and receive buffers.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    addr as usize as *const u8,
                    dst.as_mut_ptr(),
                    dst.len(),
                )
            };
        }
        self.stats.remote_reads += 1;
        self.stats.remote_read_bytes += dst.len() as u64;
        Ok(true)
    }

    fn arm(&mut self) -> bool {
        self.fifo.is_empty()
    }

    fn stats(&self) -> TransportStats {
        self.stats
    }
}
