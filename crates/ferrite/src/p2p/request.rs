//! Requests: what an operation is, where its data lives and how far its protocol has got.
//!
//! One table (`P2p::reqs`, handles of kind REQUEST) holds user requests, persistent requests,
//! matched messages (MPI_Mprobe) and the internal requests of collectives and buffered sends.
//! The handle value is also the request's id on the wire (`sreq`/`rreq` in the header): a
//! request stays in the table until its protocol is over, so an id is never reused while a
//! peer may still name it.

use super::status::Status;
use crate::consts::{MPI_Comm, MPI_Request};
use crate::objects::datatype::Datatype;
use crate::transport::{Proc, RndvKey};
use std::sync::Arc;

/// A user buffer address. MPI's contract: the memory stays valid and untouched by the user
/// until the request that names it completes.
#[derive(Clone, Copy, Debug)]
pub struct Ptr(pub *mut u8);

// SAFETY: a `Ptr` is only dereferenced under the state lock while its request is active,
// when MPI's contract makes the memory ours; the thread that touches it does not matter.
unsafe impl Send for Ptr {}

/// Send modes (MPI 4.1, section 3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Standard,
    Sync,
    Ready,
    Buffered,
}

/// Where a send's data comes from.
#[derive(Clone)]
pub enum Source {
    /// `count` elements of `dt` at `buf` (user memory).
    User {
        buf: Ptr,
        count: usize,
        dt: Arc<Datatype>,
    },
    /// Bytes the library owns (internal sends of collectives).
    Owned(Arc<[u8]>),
}

/// Where a receive's data goes.
#[derive(Clone)]
pub enum Target {
    /// At most `count` elements of `dt` at `buf` (user memory).
    User {
        buf: Ptr,
        count: usize,
        dt: Arc<Datatype>,
    },
    /// At most `len` bytes at `buf` (user memory): `count` elements of a predefined basic
    /// type, which is contiguous from offset 0 and needs no datatype object.
    Bytes { buf: Ptr, len: usize },
    /// A library-owned vector that takes the whole message, whatever its length.
    Owned(Vec<u8>),
}

impl Target {
    /// Bytes this target can take.
    pub fn capacity(&self) -> u64 {
        match self {
            Target::User { count, dt, .. } => (dt.size() as u64).saturating_mul(*count as u64),
            Target::Bytes { len, .. } => *len as u64,
            Target::Owned(_) => u64::MAX,
        }
    }

    /// Where bytes can be written in place (contiguous user buffer), if anywhere.
    pub fn contiguous_ptr(&self) -> Option<*mut u8> {
        match self {
            Target::User { buf, dt, .. } if dt.is_contiguous() => {
                Some(buf.0.wrapping_offset(dt.true_lb()))
            }
            Target::Bytes { buf, .. } => Some(buf.0),
            _ => None,
        }
    }

    /// Stores a whole message (`data.len()` <= capacity): copies or unpacks it.
    pub fn store(&mut self, data: &[u8]) {
        match self {
            Target::User { buf, count, dt } => {
                if data.is_empty() {
                    return;
                }
                // SAFETY: `buf` holds `count` elements of `dt` (MPI's contract for the active
                // receive), and `data` is at most that long; unpack writes nowhere else.
                unsafe { dt.unpack(data, buf.0, *count) }
            }
            Target::Bytes { buf, len } => {
                let n = data.len().min(*len);
                if n > 0 {
                    // SAFETY: `buf` holds `len` bytes (MPI's contract for the active
                    // receive); at most that many are written.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.0, n) }
                }
            }
            Target::Owned(v) => *v = data.to_vec(),
        }
    }

    /// [`Target::store`] of a whole message already in a vector of ours: a library-owned
    /// target takes the vector itself, without a copy.
    pub fn store_vec(&mut self, data: Vec<u8>) {
        match self {
            Target::Owned(v) => *v = data,
            _ => self.store(&data),
        }
    }
}

/// A send, from first packet to completion.
pub struct SendOp {
    pub to: Proc,
    /// The bytes on the wire: `ptr`/`len` point into user memory (contiguous types), into
    /// `owned` (packed non-contiguous data, internal data) or into the attached Bsend buffer.
    pub ptr: Ptr,
    pub len: usize,
    pub owned: Option<Arc<[u8]>>,
    /// Offset of this send's block in the attached buffer (buffered sends).
    pub bsend_block: Option<usize>,
    pub stage: SendStage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendStage {
    /// Eager synchronous: waiting for the receiver's ACK.
    WaitAck,
    /// RTS sent: waiting for FIN (the receiver read it) or CTS (send fragments).
    WaitReply,
    /// Sending DATA fragments to the receiver's request `rreq`, next at `off`.
    Streaming { rreq: u32, off: usize },
}

/// A receive, from posting to completion.
pub struct RecvOp {
    pub ctx: u32,
    pub src: i32,
    pub tag: i32,
    pub target: Target,
    pub stage: RecvStage,
}

pub enum RecvStage {
    /// In the posted queue.
    Posted,
    /// Matched an RTS: `flush` reads it from the sender (or asks for fragments).
    Pull {
        from: Proc,
        sreq: u32,
        addr: u64,
        len: u64,
        /// The sender's transport's key to its buffer (`Wire::rndv_key`).
        key: RndvKey,
    },
    /// Receiving DATA fragments of a `len`-byte message; `got` bytes so far. Non-contiguous
    /// and owned targets collect into `temp` and store it at the end.
    Fragments {
        len: u64,
        got: u64,
        temp: Option<Vec<u8>>,
    },
}

/// An unexpected message: arrived before a matching receive was posted.
pub struct Unexpected {
    pub from: Proc,
    pub len: u64,
    pub body: Body,
}

pub enum Body {
    /// The payload, and the sender's request to ACK for a synchronous send.
    Eager { data: Vec<u8>, ack: Option<u32> },
    /// A rendezvous announcement.
    Rts { sreq: u32, addr: u64, key: RndvKey },
}

pub enum Op {
    /// Nothing in flight (completed, inactive persistent, PROC_NULL).
    Idle,
    Send(SendOp),
    Recv(RecvOp),
    /// A message taken by MPI_Mprobe/Improbe, waiting for MPI_Mrecv: (source, tag, message).
    Message(i32, i32, Unexpected),
}

/// What MPI_Start does again for a persistent request.
#[derive(Clone)]
pub enum Spec {
    Send {
        mode: Mode,
        ctx: u32,
        me: i32,
        /// World rank of the destination; None for MPI_PROC_NULL.
        dest: Option<Proc>,
        tag: i32,
        src: Source,
    },
    Recv {
        ctx: u32,
        /// Comm rank, MPI_ANY_SOURCE or MPI_PROC_NULL.
        src: i32,
        tag: i32,
        target: Target,
    },
    /// A persistent collective (its plan is kept by coll/mod.rs under the request handle).
    Coll,
}

pub struct Request {
    /// Errors found when completing this request raise on this communicator's handler.
    pub comm: MPI_Comm,
    pub op: Op,
    pub done: bool,
    pub status: Status,
    /// Some for persistent requests (between completion and MPI_Start they are inactive).
    /// Boxed, like `part`: rare, and a smaller request is cheaper to insert and release
    /// (one per Isend/Irecv).
    pub persistent: Option<Box<Spec>>,
    /// A persistent request that has been started and not yet completed by Wait/Test.
    pub active: bool,
    /// MPI_Request_free was called: drop the request as soon as it completes.
    pub freed: bool,
    pub is_recv: bool,
    /// Internal request of a buffered send (completes in the background, no user handle).
    pub background: bool,
    /// What a receive into a library-owned target got (internal receives of collectives).
    pub received: Option<Vec<u8>>,
    /// MPI_Isendrecv: this request is one half of `parent`, which completes with both.
    pub parent: Option<MPI_Request>,
    /// MPI_Isendrecv: halves still running.
    pub children: u8,
    /// Partitioned communication (MPI_Psend_init/MPI_Precv_init): its partitions.
    pub part: Option<Box<super::partitioned::Partitions>>,
}

impl Request {
    pub fn new(comm: MPI_Comm, is_recv: bool) -> Request {
        Request {
            comm,
            op: Op::Idle,
            done: false,
            status: Status::default(),
            persistent: None,
            active: true,
            freed: false,
            is_recv,
            background: false,
            received: None,
            parent: None,
            children: 0,
            part: None,
        }
    }
}
