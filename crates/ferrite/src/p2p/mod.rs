//! Point-to-point messaging: matching (posted and unexpected queues) and protocols (eager,
//! rendezvous by single-copy read or by fragments), over `transport::Net`.
//!
//! - `packet`: the wire header; `matching`: the queues; `request`: request state;
//! - `protocol`: the protocol state machine (`P2p`), which reaches the network only through
//!   [`Wire`], so tests drive it over an in-memory wire;
//! - `ops`: MPI-level operations on the whole state (argument checks, comm and datatype
//!   lookup), used by the C entry points and by collectives (`coll_send`, `coll_recv`, ...);
//! - `bsend`: the buffer of MPI_Buffer_attach;
//! - `partitioned`: partitioned communication (MPI_Psend_init, MPI_Pready, MPI_Parrived).

pub mod bsend;
pub mod matching;
pub mod ops;
pub mod packet;
pub mod partitioned;
pub mod protocol;
pub mod request;
pub mod status;
#[cfg(test)]
mod tests;

pub use protocol::P2p;

use crate::error::MpiResult;
use crate::transport::{KeyedRead, Net, Proc, RndvKey};

/// The network as the protocols see it (implemented by `Net`; tests use an in-memory wire).
pub trait Wire {
    /// Largest packet (header and payload) `try_send` takes for `to`.
    fn max_packet(&self, to: Proc) -> usize;
    /// Largest packet (header and payload) carrying a whole message eagerly to `to`.
    fn eager_packet(&self, to: Proc) -> usize {
        self.max_packet(to)
    }
    /// Sends one packet; `Ok(false)`: no credits, nothing sent (the caller keeps it, in order).
    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> MpiResult<bool>;
    /// Single-copy read from `from`'s memory; `Ok(false)`: not possible, use packets.
    fn read_remote(&mut self, from: Proc, addr: u64, dst: &mut [u8]) -> MpiResult<bool>;
    /// What the transport to `to` wants in an RTS for `len` bytes at `addr` (empty: nothing).
    fn rndv_key(&mut self, _to: Proc, _addr: u64, _len: usize) -> RndvKey {
        RndvKey::default()
    }
    /// `read_remote` given the key the sender's RTS carried.
    fn read_keyed(
        &mut self,
        from: Proc,
        addr: u64,
        _key: &RndvKey,
        dst: &mut [u8],
    ) -> MpiResult<bool> {
        self.read_remote(from, addr, dst)
    }
    /// Several `read_keyed`s, in flight together where the transport can; sets `done`.
    fn read_keyed_many(&mut self, reads: &mut [KeyedRead]) {
        for r in reads {
            // SAFETY: KeyedRead::new's contract: dst is valid for len bytes during this call.
            let dst = unsafe { std::slice::from_raw_parts_mut(r.dst(), r.len()) };
            r.done = self
                .read_keyed(r.from, r.addr, &r.key, dst)
                .unwrap_or(false);
        }
    }
    /// Sends header `hdr` and a whole message `data` as one packet if `data` with a header of
    /// `hdr_max` bytes (the longest a message may have, so that which header it travels
    /// with does not change the protocol) fits the eager size for `to` (and `limit`, unless
    /// 0) and there is room; `Ok(false)`: nothing sent.
    fn try_send_eager(
        &mut self,
        to: Proc,
        hdr: &[u8],
        hdr_max: usize,
        data: &[u8],
        limit: usize,
    ) -> MpiResult<bool> {
        let room = self.eager_packet(to).saturating_sub(hdr_max);
        if data.len() > room || (limit != 0 && data.len() > limit) {
            return Ok(false);
        }
        self.try_send(to, &[hdr, data])
    }
}

impl Wire for Net {
    fn max_packet(&self, to: Proc) -> usize {
        Net::max_packet(self, to)
    }
    fn eager_packet(&self, to: Proc) -> usize {
        Net::eager_packet(self, to)
    }
    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> MpiResult<bool> {
        Ok(Net::try_send(self, to, parts)?)
    }
    fn read_remote(&mut self, from: Proc, addr: u64, dst: &mut [u8]) -> MpiResult<bool> {
        Ok(Net::read_remote(self, from, addr, dst)?)
    }
    fn rndv_key(&mut self, to: Proc, addr: u64, len: usize) -> RndvKey {
        // A bad rank is reported by the RTS's send right after.
        Net::rndv_key(self, to, addr, len).unwrap_or_default()
    }
    fn read_keyed(
        &mut self,
        from: Proc,
        addr: u64,
        key: &RndvKey,
        dst: &mut [u8],
    ) -> MpiResult<bool> {
        Ok(Net::read_keyed(self, from, addr, key, dst)?)
    }
    fn read_keyed_many(&mut self, reads: &mut [KeyedRead]) {
        Net::read_keyed_many(self, reads)
    }
    #[inline]
    fn try_send_eager(
        &mut self,
        to: Proc,
        hdr: &[u8],
        hdr_max: usize,
        data: &[u8],
        limit: usize,
    ) -> MpiResult<bool> {
        Ok(Net::try_send_eager(self, to, hdr, hdr_max, data, limit)?)
    }
}
