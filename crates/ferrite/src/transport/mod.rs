//! Transports move bytes between processes and know nothing of MPI (no tags, communicators or
//! datatypes). `Net` routes each peer to one transport and is what the layers above use.

use crate::error::MpiResult;
use std::os::unix::io::RawFd;

/// A process of the job, by its rank in MPI_COMM_WORLD.
pub type Proc = u32;

/// One way of moving packets. A packet is what `try_send` got as `parts`, concatenated; it
/// arrives whole, once, and in order with respect to other packets between the same two
/// processes over the same transport.
pub trait Transport {
    fn name(&self) -> &'static str;

    /// Largest packet `try_send` accepts (header and payload together).
    fn max_packet(&self) -> usize;

    /// Sends one packet. `Ok(false)` means no room (credits exhausted) and nothing was sent:
    /// the caller keeps it, in order, and tries again after making progress. Never drops.
    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> MpiResult<bool>;

    /// Hands every packet that has arrived to `deliver(from, packet)`; returns how many.
    /// The slice is only valid during the call.
    fn poll(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize;

    /// Single-copy read of `dst.len()` bytes at address `addr` in `from`'s memory.
    /// `Ok(false)` when this transport cannot do that for this peer (the protocol then
    /// falls back to copying through packets).
    fn read_remote(&mut self, _from: Proc, _addr: u64, _dst: &mut [u8]) -> MpiResult<bool> {
        Ok(false)
    }

    /// A file descriptor that becomes readable when packets may have arrived, for the
    /// progress engine's epoll set, if this transport has one.
    fn wake_fd(&self) -> Option<RawFd> {
        None
    }

    /// About to block: ask senders to ring the doorbell. Returns false when a packet is
    /// already waiting (then the caller must not block).
    fn arm(&mut self) -> bool {
        true
    }

    /// Woke up (or decided not to block): senders may stop ringing.
    fn disarm(&mut self) {}
}

/// Routes peers to transports. Filled in by the transport layer.
pub struct Net {
    pub rank: Proc,
    pub size: u32,
}

impl Net {
    pub fn max_packet(&self, _to: Proc) -> usize {
        0
    }
    pub fn try_send(&mut self, to: Proc, _parts: &[&[u8]]) -> MpiResult<bool> {
        Err(crate::mpi_err!(
            crate::abi::consts::MPI_ERR_OTHER,
            "no transport reaches rank {to}"
        ))
    }
    pub fn poll(&mut self, _deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        0
    }
    pub fn read_remote(&mut self, _from: Proc, _addr: u64, _dst: &mut [u8]) -> MpiResult<bool> {
        Ok(false)
    }
    /// Blocks until a packet may have arrived or `timeout_ms` passes (-1: no limit).
    pub fn block(&mut self, _timeout_ms: i32) {}
    /// Releases what MPI_Init set up (unlinks this process's segment, closes sockets).
    pub fn shutdown(&mut self) {}
}

impl Net {
    /// Sets up this process's endpoints (its shared-memory receive queue, doorbell) and
    /// publishes its business card through PMI. Peers are contacted only when first needed.
    pub fn init(rank: Proc, size: u32, _kvsname: &str) -> MpiResult<Net> {
        Ok(Net { rank, size })
    }
}
