//! One stream's bytes: framing (a 4-byte little-endian length before each packet; the lengths
//! `BYE`, `CLOSE` and `CLOSE_ACK` are control frames), the per-peer queue of pending frames written with vectored
//! `sendmsg` (never blocking, never raising SIGPIPE), and reassembly of received frames.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::unix::io::RawFd;

pub const HEADER: usize = 4;
/// A frame length that is no packet: the peer is closing cleanly (MPI_Finalize).
pub const BYE: u32 = u32::MAX;
/// A frame length that is no packet: the sender sends nothing more on this connection (it is
/// closed to make room or for idleness; a new one may follow).
pub const CLOSE: u32 = u32::MAX - 1;
/// A frame length that is no packet: the sender has read the peer's `CLOSE`, so everything
/// the peer sent on this connection.
pub const CLOSE_ACK: u32 = u32::MAX - 2;
/// Most slices handed to one sendmsg.
const MAX_IOV: usize = 64;

pub fn header(len: usize) -> [u8; HEADER] {
    (len as u32).to_le_bytes()
}

/// Vectored, nonblocking send without SIGPIPE; WouldBlock counts as 0 bytes.
pub fn sendv(fd: RawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is guaranteed ABI-compatible with iovec on unix.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len().min(MAX_IOV) as _;
    loop {
        // SAFETY: msg points at `msg_iovlen` valid iovecs borrowed for this call.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(0),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Frames waiting for the socket, in order; the first may be partly written.
#[derive(Default)]
pub struct SendQueue {
    frames: VecDeque<Vec<u8>>,
    /// Bytes of `frames[0]` already written.
    head_off: usize,
    /// Unwritten bytes in all frames.
    bytes: usize,
}

impl SendQueue {
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn push(&mut self, frame: Vec<u8>) {
        self.bytes += frame.len();
        self.frames.push_back(frame);
    }

    pub fn clear(&mut self) {
        self.frames.clear();
        self.head_off = 0;
        self.bytes = 0;
    }

    /// Takes every frame out, whole (none may be partly written: only a connection's queue
    /// is ever written, and it moves to the closing socket before anything else could).
    pub fn take_frames(&mut self) -> Vec<Vec<u8>> {
        assert_eq!(self.head_off, 0, "a partly written queue cannot move");
        self.bytes = 0;
        self.frames.drain(..).collect()
    }

    /// Writes as much as the socket takes now; returns the bytes written.
    pub fn flush(&mut self, fd: RawFd) -> io::Result<usize> {
        let mut total = 0;
        while !self.frames.is_empty() {
            let iov: Vec<IoSlice<'_>> = self
                .frames
                .iter()
                .take(MAX_IOV)
                .enumerate()
                .map(|(i, f)| IoSlice::new(if i == 0 { &f[self.head_off..] } else { f }))
                .collect();
            let want: usize = iov.iter().map(|s| s.len()).sum();
            let n = sendv(fd, &iov)?;
            total += n;
            self.advance(n);
            if n < want {
                break; // the socket is full
            }
        }
        Ok(total)
    }

    fn advance(&mut self, mut n: usize) {
        self.bytes -= n;
        while n > 0 {
            let left = self.frames[0].len() - self.head_off;
            if n >= left {
                n -= left;
                self.frames.pop_front();
                self.head_off = 0;
            } else {
                self.head_off += n;
                n = 0;
            }
        }
    }
}

/// What one read brought.
#[derive(Debug, PartialEq, Eq)]
pub enum Filled {
    Bytes(usize),
    WouldBlock,
    Eof,
}

/// Received bytes not yet consumed.
pub struct RecvBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// A complete frame at the front of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Packet(&'a [u8]),
    Bye,
    Close,
    CloseAck,
}

impl RecvBuf {
    pub fn new(cap: usize) -> RecvBuf {
        RecvBuf {
            buf: vec![0; cap],
            start: 0,
            end: 0,
        }
    }

    /// Bytes received and not consumed.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// One read from `fd`, making room first (for a frame of up to `need` bytes).
    pub fn fill(&mut self, fd: RawFd, need: usize) -> io::Result<Filled> {
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                let cap = (self.buf.len() * 2).max(need);
                self.buf.resize(cap, 0);
            }
        }
        loop {
            let room = &mut self.buf[self.end..];
            // SAFETY: `room` is a valid writable buffer of room.len() bytes.
            let n =
                unsafe { libc::recv(fd, room.as_mut_ptr().cast(), room.len(), libc::MSG_DONTWAIT) };
            if n > 0 {
                self.end += n as usize;
                return Ok(Filled::Bytes(n as usize));
            }
            if n == 0 {
                return Ok(Filled::Eof);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(Filled::WouldBlock),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
    }

    /// The first `n` bytes, left in place, if they have all arrived.
    pub fn peek(&self, n: usize) -> Option<&[u8]> {
        (self.buffered() >= n).then(|| &self.buf[self.start..self.start + n])
    }

    /// The first `n` bytes, consumed, if they have all arrived.
    pub fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.buffered() < n {
            return None;
        }
        let s = self.start;
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            // The slice below stays valid: the bytes are not overwritten until the next fill.
        }
        Some(&self.buf[s..s + n])
    }

    /// The next complete frame, consumed. `Err(len)` for a length above `max` (a broken or
    /// foreign stream).
    pub fn next_frame(&mut self, max: usize) -> Result<Option<Frame<'_>>, u32> {
        if self.buffered() < HEADER {
            return Ok(None);
        }
        let len = u32::from_le_bytes(
            self.buf[self.start..self.start + HEADER]
                .try_into()
                .unwrap(),
        );
        let control = match len {
            BYE => Some(Frame::Bye),
            CLOSE => Some(Frame::Close),
            CLOSE_ACK => Some(Frame::CloseAck),
            _ => None,
        };
        if let Some(f) = control {
            self.start += HEADER;
            return Ok(Some(f));
        }
        if len as usize > max {
            return Err(len);
        }
        let total = HEADER + len as usize;
        if self.buffered() < total {
            return Ok(None);
        }
        let s = self.start + HEADER;
        self.start += total;
        Ok(Some(Frame::Packet(&self.buf[s..s + len as usize])))
    }

    /// Bytes the frame at the front needs in all (header included), once its header arrived.
    pub fn need(&self) -> usize {
        if self.buffered() < HEADER {
            return HEADER;
        }
        let len = u32::from_le_bytes(
            self.buf[self.start..self.start + HEADER]
                .try_into()
                .unwrap(),
        );
        if matches!(len, BYE | CLOSE | CLOSE_ACK) {
            HEADER
        } else {
            HEADER + len as usize
        }
    }

    /// Moves what is left to the front so a whole frame fits after it.
    pub fn compact(&mut self) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }
}
