//! The protocols, as a state machine over [`Wire`]:
//!
//! - eager (message <= eager limit): one EAGER packet; the send completes once its data is
//!   in a packet or in the per-peer backlog. Synchronous sends use EAGER_SYNC and complete
//!   on the receiver's ACK, sent when the message matches.
//! - rendezvous (larger): RTS with the sender's buffer address (contiguous data in place,
//!   non-contiguous data packed once) and, as its payload, whatever key the transport wants
//!   the reader to have (`Wire::rndv_key`; ofi: its registration, so the read needs no
//!   round trip first; none for shm and tcp). On match the receiver reads it with `read_remote`
//!   straight into the receive buffer (or a temporary, for non-contiguous receive types) and
//!   answers FIN, which completes the send. If the read is not possible it answers CTS and
//!   the sender streams DATA fragments; the send completes when the last one is out.
//!
//! Packets from `on_packet` (no network access there) and packets refused for lack of
//! credits wait in a FIFO backlog per peer; `flush` sends them in order, then does the reads
//! and fragment streams that need the network. Nothing is ever dropped.

use super::bsend::Attached;
use super::matching::Matching;
use super::packet::{Header, Kind, HEADER_LEN};
use super::request::*;
use super::status::Status;
use super::Wire;
use crate::consts::*;
use crate::error::{make_code, MpiError, MpiResult};
use crate::fxhash::FxHashMap;
use crate::objects::handles::{kind, HandleTable};
use crate::runtime::config;
use crate::transport::{KeyedRead, Proc, RndvKey};
use std::collections::VecDeque;
use std::sync::Arc;

/// An RTS as a receive needs it: the sender's request, its buffer's address and key.
type Rts = (u32, u64, RndvKey);

/// Point-to-point state: requests, queues, packets waiting to go out.
pub struct P2p {
    pub rank: Proc,
    pub reqs: HandleTable<Request>,
    pub matching: Matching<MPI_Request, Unexpected>,
    backlog: FxHashMap<Proc, VecDeque<Vec<u8>>>,
    backlog_len: usize,
    /// Receives that matched an RTS and wait for `flush` to read the data.
    reads: VecDeque<MPI_Request>,
    /// Sends streaming DATA fragments.
    streams: VecDeque<MPI_Request>,
    /// Largest eager payload; 0: whatever fits in one packet.
    pub eager_limit: usize,
    pub attached: Option<Attached>,
    /// A network failure found while progressing, reported by the next completion call.
    pub error: Option<MpiError>,
    /// Peers (world ranks) a transport found dead, with the reason: receives posted for them
    /// fail with MPI_ERR_PROC_ABORTED (`Ferrite::fail_receives_from_dead`).
    pub dead: FxHashMap<Proc, String>,
    /// A peer died or a receive was posted since the last sweep of posted receives.
    pub dead_news: bool,
    /// Places of the live partitioned requests per (context, peer, tag, is a send): the
    /// k-th on each side match each other (`partitioned::wire_tag`).
    pub part_inits: FxHashMap<(u32, i64, i32, bool), std::collections::BTreeSet<u32>>,
    /// Messages (and their payload bytes) this process started sending and that arrived
    /// here, collectives' and RMA's own included: the tool interface's counters.
    pub counts: MessageCounts,
    /// Receives without a request (see [`Waiter`]): blocking ones (MPI_Recv) and MPI_Irecv's.
    pub waiters: HandleTable<Waiter>,
    /// The blocking receive that waits in no queue ([`DIRECT_WAITER`]), if any.
    direct: Option<Waiter>,
}

/// Plain counters kept under the state lock (one add per message; read by tool/pvars.rs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageCounts {
    pub messages_sent: u64,
    pub bytes_sent: u64,
    pub messages_received: u64,
    pub bytes_received: u64,
}

/// First index of the waiters' handles: they are request handles (MPICH's type REQUEST)
/// in the upper half of the index range, which the request table never reaches, so one
/// mask tells them apart ([`P2p::is_waiter`]) and users may hold them (MPI_Irecv).
const WAITER_BASE: u32 = 1 << 25;

/// A receive waiting with no request: posted in `matching` like a request (same sequence
/// numbers, so matching order is the same), under a handle of the `waiters` table. A
/// blocking receive (MPI_Recv) waits for it; MPI_Irecv hands its handle to the user, and
/// the completion calls resolve it (`waiter_state`, `take_user_waiter`, `free_waiter`,
/// `cancel_waiter`). It is a third of a `Request`'s size and has no protocol state: an
/// eager message lands straight in its target; a rendezvous one turns it into a request
/// (`Waited::Request`), since that protocol names the receive on the wire.
pub struct Waiter {
    comm: MPI_Comm,
    ctx: u32,
    src: i32,
    tag: i32,
    target: Target,
    status: Status,
    state: Waited,
    /// MPI_Request_free was called on it while it was pending: dropped once it completes.
    freed: bool,
}

/// The handle of the direct waiter: a blocking receive posted when no receive at all was
/// posted (and nothing unexpected matched it) waits in `P2p::direct`, outside `matching`.
/// Every receive posted after it is later in matching order, so an arriving message it
/// accepts is its (`P2p::direct_match`, checked before `Matching::arrive`); one it does not
/// accept goes on to the queues. That saves the waiter table and both queue operations on
/// a ping-pong's receive. A second blocking receive meanwhile (another thread) waits as an
/// ordinary [`Waiter`]. The handle is the waiters' last index, which the table never
/// reaches.
const DIRECT_WAITER: MPI_Request = (0x8000_0000u32 | (kind::REQUEST << 26) | 0x03ff_ffff) as i32;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Waited {
    Posted,
    Done,
    Request(MPI_Request),
}

/// How MPI_Recv's start went ([`P2p::recv_now`]).
pub enum RecvNow {
    /// Received already (an unexpected eager message): its status.
    Done(Status),
    /// Wait for [`P2p::waiter_done`], then [`P2p::take_waiter`].
    Waiter(MPI_Request),
    /// Matched an unexpected rendezvous message: wait for and release this request.
    Request(MPI_Request),
}

/// The handle of every request that completed within the call that made it (see
/// [`P2p::new_done_send`]): a builtin request handle (MPICH's layout: kind 01, type
/// REQUEST; not MPI_MESSAGE_NO_PROC's index 0) that owns no table entry, so an osu_bw
/// window of Isends neither fills nor empties the request table (MPICH too returns shared
/// complete requests for such sends). The completion calls give it the status a completed
/// send had (`Status::default()`) and set the caller's handle to MPI_REQUEST_NULL;
/// MPI_Request_free and MPI_Cancel accept it and do nothing (it is complete, not
/// cancelled). Every place that resolves a user request handle checks for it:
/// `abi::request::slot`, `Ferrite::release`/`request_status`, MPI_Request_free,
/// MPI_Cancel and MPI_Start.
pub const DONE_SEND: MPI_Request = 0x6c00_0010;

impl Default for P2p {
    fn default() -> Self {
        P2p::new(0, 1)
    }
}

fn rid(h: MPI_Request) -> u32 {
    h as u32
}

fn handle(id: u32) -> MPI_Request {
    id as MPI_Request
}

/// The status of an operation on MPI_PROC_NULL.
pub fn proc_null_status() -> Status {
    Status {
        source: MPI_PROC_NULL,
        tag: MPI_ANY_TAG,
        ..Status::default()
    }
}

/// The status of a null or inactive request.
pub fn empty_status() -> Status {
    Status {
        source: MPI_ANY_SOURCE,
        tag: MPI_ANY_TAG,
        ..Status::default()
    }
}

impl P2p {
    pub fn new(world_rank: u32, _world_size: u32) -> Self {
        P2p {
            rank: world_rank,
            reqs: HandleTable::new(kind::REQUEST),
            matching: Matching::default(),
            backlog: FxHashMap::default(),
            backlog_len: 0,
            reads: VecDeque::new(),
            streams: VecDeque::new(),
            eager_limit: config::get("FERRITE_EAGER_LIMIT"),
            attached: None,
            error: None,
            dead: FxHashMap::default(),
            dead_news: false,
            part_inits: FxHashMap::default(),
            counts: MessageCounts::default(),
            waiters: HandleTable::with_base(kind::REQUEST, WAITER_BASE),
            direct: None,
        }
    }

    /// Fails the posted receive `h` from comm rank `src`, whose process is dead.
    pub fn fail_posted(&mut self, h: MPI_Request, src: i32, why: &str) {
        let posted = if h == DIRECT_WAITER {
            self.direct
                .as_ref()
                .is_some_and(|w| w.state == Waited::Posted)
        } else {
            self.matching.cancel_posted(|&x| x == h).is_some()
        };
        if !posted {
            return; // not posted (any more)
        }
        if let Some(w) = self.waiter_mut(h) {
            w.status.source = src;
            w.status.error = make_code(MPI_ERR_PROC_ABORTED, why.to_string());
            w.state = Waited::Done;
            if w.freed {
                self.waiters.free(h);
            }
            return;
        }
        if let Some(r) = self.reqs.get_mut(h) {
            r.status.source = src;
            r.status.error = make_code(MPI_ERR_PROC_ABORTED, why.to_string());
        }
        self.complete(h);
    }

    /// True when packets or fragments wait for credits or reads wait for `flush`: the
    /// progress engine must not sleep for long.
    #[inline]
    pub fn has_backlog(&self) -> bool {
        self.backlog_len > 0 || !self.streams.is_empty() || !self.reads.is_empty()
    }

    /// True while buffered sends still use the attached buffer.
    pub fn bsend_busy(&self) -> bool {
        self.attached.as_ref().is_some_and(|a| a.in_use())
    }

    fn eager_max<W: Wire + ?Sized>(&self, wire: &W, to: Proc) -> usize {
        let room = wire.eager_packet(to).saturating_sub(HEADER_LEN);
        if self.eager_limit == 0 {
            room
        } else {
            room.min(self.eager_limit)
        }
    }

    fn queue(&mut self, to: Proc, h: &Header, payload: &[u8]) {
        let (hdr, n) = h.wire();
        let mut pkt = Vec::with_capacity(n + payload.len());
        pkt.extend_from_slice(&hdr[..n]);
        pkt.extend_from_slice(payload);
        self.backlog.entry(to).or_default().push_back(pkt);
        self.backlog_len += 1;
    }

    /// Sends now if nothing to `to` is waiting, else (or without credits) queues in order.
    fn send_now<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        to: Proc,
        h: &Header,
        payload: &[u8],
    ) -> MpiResult<()> {
        if self.backlog_len == 0 || self.backlog.get(&to).is_none_or(|q| q.is_empty()) {
            let (hdr, n) = h.wire();
            if wire.try_send(to, &[&hdr[..n], payload])? {
                return Ok(());
            }
        }
        self.queue(to, h, payload);
        Ok(())
    }

    /// A standard-mode eager send that needs no request (MPI_Send's fast path): sent at
    /// once if `data` fits one packet, nothing to `to` is queued and the transport has room.
    /// `Ok(false)`: nothing was sent, the caller takes the general path.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn send_eager_now<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        ctx: u32,
        me: i32,
        to: Proc,
        tag: i32,
        data: &[u8],
    ) -> MpiResult<bool> {
        if self.backlog_len > 0 && self.backlog.get(&to).is_some_and(|q| !q.is_empty()) {
            return Ok(false);
        }
        // No request: the receiver echoes `sreq` only for synchronous and rendezvous sends.
        let h = Header {
            kind: Kind::Eager,
            context: ctx,
            src: me,
            tag,
            len: data.len() as u64,
            sreq: 0,
            rreq: 0,
            arg: 0,
        };
        // Either form where it is built, with no copy (as `Header::wire` would make).
        let (short, full);
        let hdr: &[u8] = match h.short_form() {
            Some(s) => {
                short = s;
                &short
            }
            None => {
                full = h.encode();
                &full
            }
        };
        let sent = wire.try_send_eager(to, hdr, HEADER_LEN, data, self.eager_limit)?;
        if sent {
            self.counts.messages_sent += 1;
            self.counts.bytes_sent += data.len() as u64;
        }
        Ok(sent)
    }

    /// A new request in the table.
    pub fn new_request(&mut self, comm: MPI_Comm, is_recv: bool) -> MPI_Request {
        self.reqs.insert(Request::new(comm, is_recv))
    }

    /// A send request that is already complete (a nonblocking eager send that went out at
    /// once, a buffered send copied out, an RMA call on MPI_PROC_NULL): [`DONE_SEND`],
    /// which needs no table entry. `_comm` is where errors would raise; such a request
    /// has none.
    pub fn new_done_send(&mut self, _comm: MPI_Comm) -> MPI_Request {
        DONE_SEND
    }

    /// Whether request or waiter `h` is complete (true for handles of neither).
    pub fn is_done(&self, h: MPI_Request) -> bool {
        match self.reqs.get(h) {
            Some(r) => r.done,
            None => self.waiter_done(h),
        }
    }

    /// Marks a request complete; drops its protocol state (and its Bsend block) and, if the
    /// user freed it or it is internal, the request itself.
    fn complete(&mut self, h: MPI_Request) {
        let Some(r) = self.reqs.get_mut(h) else {
            return;
        };
        if !complete_plain(r) {
            self.complete_rest(h);
        }
    }

    /// What [`complete_plain`] left to do for request `h` (marked done).
    #[inline(never)]
    fn complete_rest(&mut self, h: MPI_Request) {
        let Some(r) = self.reqs.get_mut(h) else {
            return;
        };
        let op = std::mem::replace(&mut r.op, Op::Idle);
        let gone = r.freed || r.background;
        let op = match op {
            Op::Recv(RecvOp {
                target: Target::Owned(v),
                ..
            }) => {
                r.received = Some(v);
                Op::Idle
            }
            op => op,
        };
        if let Op::Send(SendOp {
            bsend_block: Some(off),
            ..
        }) = op
        {
            if let Some(a) = self.attached.as_mut() {
                a.free(off);
            }
        }
        let (parent, status, is_recv) = (r.parent, r.status, r.is_recv);
        if gone {
            self.reqs.remove(h);
        }
        if let Some(p) = parent {
            self.child_done(p, status, is_recv);
        }
    }

    /// One half of an MPI_Isendrecv completed: the receive's status is the pair's status;
    /// the first error of either half is kept.
    fn child_done(&mut self, p: MPI_Request, st: Status, is_recv: bool) {
        let Some(r) = self.reqs.get_mut(p) else {
            return;
        };
        let first_error = r.status.error;
        if is_recv {
            r.status = st;
        }
        if first_error != MPI_SUCCESS {
            r.status.error = first_error;
        } else if st.error != MPI_SUCCESS {
            r.status.error = st.error;
        }
        r.children = r.children.saturating_sub(1);
        if r.children == 0 {
            self.complete(p);
        }
    }

    /// A request for MPI_Isendrecv: completes when both halves (started with
    /// [`Self::new_child`]) have.
    pub fn new_pair(&mut self, comm: MPI_Comm) -> MPI_Request {
        let mut r = Request::new(comm, true);
        r.children = 2;
        self.reqs.insert(r)
    }

    /// A background half of the pair `parent`.
    pub fn new_child(&mut self, parent: MPI_Request, is_recv: bool) -> MPI_Request {
        let comm = self.reqs.get(parent).map_or(MPI_COMM_WORLD, |r| r.comm);
        let mut r = Request::new(comm, is_recv);
        r.parent = Some(parent);
        r.background = true;
        self.reqs.insert(r)
    }

    fn complete_with(&mut self, h: MPI_Request, st: Status) {
        if let Some(r) = self.reqs.get_mut(h) {
            r.status = st;
        }
        self.complete(h);
    }

    // ----- sends -----

    /// Starts the send `spec` on request `h` (new or a persistent one being started).
    #[allow(clippy::too_many_arguments)]
    pub fn start_send<W: Wire + ?Sized>(
        &mut self,
        wire: &mut W,
        h: MPI_Request,
        mode: Mode,
        ctx: u32,
        me: i32,
        dest: Option<Proc>,
        tag: i32,
        src: &Source,
    ) -> MpiResult<()> {
        if let Some(r) = self.reqs.get_mut(h) {
            r.done = false;
            r.status = Status::default();
        }
        let Some(to) = dest else {
            self.complete_with(h, proc_null_status());
            return Ok(());
        };
        let (mut ptr, len, mut owned) = match src {
            Source::User { buf, count, dt } => {
                if dt.is_contiguous() {
                    let p = buf.0.wrapping_offset(dt.true_lb());
                    (Ptr(p), dt.size() * count, None)
                } else {
                    let mut v = Vec::new();
                    // SAFETY: `buf` holds `count` elements of `dt` (the caller's contract
                    // for an active send); pack only reads that memory.
                    unsafe { dt.pack(buf.0, *count, &mut v) };
                    let a: Arc<[u8]> = v.into();
                    (Ptr(a.as_ptr() as *mut u8), a.len(), Some(a))
                }
            }
            Source::Owned(a) => (Ptr(a.as_ptr() as *mut u8), a.len(), Some(a.clone())),
        };
        let eager = len <= self.eager_max(wire, to);
        let mut block = None;
        if mode == Mode::Buffered {
            let Some(att) = self.attached.as_mut() else {
                return Err(MpiError::new(
                    MPI_ERR_BUFFER,
                    "buffered send with no buffer attached (call MPI_Buffer_attach)",
                ));
            };
            let Some(off) = att.alloc(len) else {
                return Err(crate::mpi_err!(
                    MPI_ERR_BUFFER,
                    "the attached buffer ({} bytes) has no room for a message of {len} bytes \
                     plus MPI_BSEND_OVERHEAD ({MPI_BSEND_OVERHEAD})",
                    att.size
                ));
            };
            if eager {
                // The packet copies the data at once: the space is free again right away.
                att.free(off);
            } else {
                let dst = att.base.0.wrapping_add(off);
                // SAFETY: [off, off+len) lies inside the attached buffer (alloc checked it)
                // and is reserved for this send alone; `ptr` is `len` readable bytes.
                unsafe { std::ptr::copy_nonoverlapping(ptr.0, dst, len) };
                ptr = Ptr(dst);
                owned = None;
                block = Some(off);
            }
        }
        let sync = mode == Mode::Sync;
        let mut hdr = Header {
            kind: if sync { Kind::EagerSync } else { Kind::Eager },
            context: ctx,
            src: me,
            tag,
            len: len as u64,
            sreq: rid(h),
            rreq: 0,
            arg: 0,
        };
        let key;
        let payload: &[u8] = if eager && len > 0 {
            // SAFETY: `ptr` is `len` readable bytes (user memory under MPI's contract, the
            // packed copy or the attached buffer), read only during this call.
            unsafe { std::slice::from_raw_parts(ptr.0, len) }
        } else if !eager {
            hdr.kind = Kind::Rts;
            hdr.arg = ptr.0 as u64;
            key = wire.rndv_key(to, hdr.arg, len);
            key.as_bytes()
        } else {
            &[]
        };
        self.send_now(wire, to, &hdr, payload)?;
        self.counts.messages_sent += 1;
        self.counts.bytes_sent += len as u64;
        if eager && !sync {
            self.complete(h);
            return Ok(());
        }
        let stage = if eager {
            SendStage::WaitAck
        } else {
            SendStage::WaitReply
        };
        if let Some(r) = self.reqs.get_mut(h) {
            r.op = Op::Send(SendOp {
                to,
                ptr,
                len,
                owned,
                bsend_block: block,
                stage,
            });
        }
        Ok(())
    }

    // ----- receives -----

    /// Starts a receive on request `h`: takes a matching unexpected message or posts it.
    pub fn start_recv(&mut self, h: MPI_Request, ctx: u32, src: i32, tag: i32, target: Target) {
        if let Some(r) = self.reqs.get_mut(h) {
            r.done = false;
            r.status = Status::default();
        }
        if src == MPI_PROC_NULL {
            self.complete_with(h, proc_null_status());
            return;
        }
        if let Some(r) = self.reqs.get_mut(h) {
            r.op = Op::Recv(RecvOp {
                ctx,
                src,
                tag,
                target,
                stage: RecvStage::Posted,
            });
        }
        self.match_or_post(h, ctx, src, tag);
    }

    /// MPI_Irecv: the receive as a [`Waiter`] whose handle the user holds (posted, or
    /// complete when an unexpected eager message or MPI_PROC_NULL satisfied it at once), or
    /// a request when it matched an unexpected rendezvous message.
    pub fn irecv(
        &mut self,
        comm: MPI_Comm,
        ctx: u32,
        src: i32,
        tag: i32,
        target: Target,
    ) -> MPI_Request {
        let status = if src == MPI_PROC_NULL {
            proc_null_status()
        } else {
            match self.start_waiter(comm, ctx, src, tag, target, false) {
                RecvNow::Done(st) => st,
                RecvNow::Waiter(h) | RecvNow::Request(h) => return h,
            }
        };
        self.waiters.insert(Waiter {
            comm,
            ctx,
            src,
            tag,
            target: Target::Owned(Vec::new()),
            status,
            state: Waited::Done,
            freed: false,
        })
    }

    /// True for the handle of a [`Waiter`] (live or not): one mask, no lookup.
    #[inline]
    pub fn is_waiter(h: MPI_Request) -> bool {
        (h as u32) & 0xfe00_0000 == 0x8000_0000 | (kind::REQUEST << 26) | WAITER_BASE
    }

    /// A user's waiter (MPI_Irecv): whether it is complete; None if `h` is none.
    #[inline]
    pub fn waiter_state(&self, h: MPI_Request) -> Option<bool> {
        let w = self.waiters.get(h)?;
        Some(match w.state {
            Waited::Posted => false,
            Waited::Done => true,
            Waited::Request(r) => self.is_done(r),
        })
    }

    /// Removes a user's complete waiter: its communicator and status, or `Err(r)` when it
    /// became request `r` (complete; the caller releases it). None if `h` is no waiter.
    #[inline]
    pub fn take_user_waiter(
        &mut self,
        h: MPI_Request,
    ) -> Option<(MPI_Comm, Result<Status, MPI_Request>)> {
        let w = self.waiters.get(h)?;
        let took = match w.state {
            Waited::Request(r) => Err(r),
            _ => Ok(w.status),
        };
        let comm = w.comm;
        self.waiters.free(h);
        Some((comm, took))
    }

    /// [`Self::take_user_waiter`] of a waiter that holds its own status (not one that became
    /// a request): the completion calls' fast path over a window of MPI_Irecvs.
    #[inline]
    pub fn take_done_waiter(&mut self, h: MPI_Request) -> Option<(Status, MPI_Comm)> {
        let w = self.waiters.get(h).filter(|w| w.state == Waited::Done)?;
        let out = (w.status, w.comm);
        self.waiters.free(h);
        Some(out)
    }

    /// A user's waiter's status as it stands and its communicator (MPI_Request_get_status).
    pub fn waiter_status(&self, h: MPI_Request) -> Option<(Status, MPI_Comm)> {
        let w = self.waiters.get(h)?;
        let st = match w.state {
            Waited::Request(r) => self.reqs.get(r).map_or(w.status, |r| r.status),
            _ => w.status,
        };
        Some((st, w.comm))
    }

    /// The status of request or waiter `h` as it stands.
    pub fn status_of(&self, h: MPI_Request) -> Option<Status> {
        match self.reqs.get(h) {
            Some(r) => Some(r.status),
            None => self.waiter_status(h).map(|x| x.0),
        }
    }

    /// MPI_Request_free on a waiter: dropped now if complete, else once it completes (its
    /// request's, if it became one). False if `h` is no waiter.
    pub fn free_waiter(&mut self, h: MPI_Request) -> bool {
        let Some(w) = self.waiters.get_mut(h) else {
            return false;
        };
        match w.state {
            Waited::Posted => w.freed = true,
            Waited::Done => {
                self.waiters.free(h);
            }
            Waited::Request(r) => {
                self.waiters.free(h);
                match self.reqs.get_mut(r) {
                    Some(q) if q.done => {
                        self.reqs.free(r);
                    }
                    Some(q) => q.freed = true,
                    None => {}
                }
            }
        }
        true
    }

    /// MPI_Cancel on a waiter: one still posted leaves the queues and completes cancelled.
    /// False if `h` is no waiter.
    pub fn cancel_waiter(&mut self, h: MPI_Request) -> bool {
        let Some(w) = self.waiters.get(h) else {
            return false;
        };
        if w.state == Waited::Posted && self.matching.cancel_posted(|&p| p == h).is_some() {
            if let Some(w) = self.waiters.get_mut(h) {
                w.status = Status {
                    cancelled: true,
                    ..empty_status()
                };
                w.state = Waited::Done;
                if w.freed {
                    self.waiters.free(h);
                }
            }
        }
        true
    }

    /// A receive request in the table, not yet matched or posted.
    fn recv_request(
        &mut self,
        comm: MPI_Comm,
        ctx: u32,
        src: i32,
        tag: i32,
        target: Target,
    ) -> MPI_Request {
        let mut r = Request::new(comm, true);
        r.op = Op::Recv(RecvOp {
            ctx,
            src,
            tag,
            target,
            stage: RecvStage::Posted,
        });
        self.reqs.insert(r)
    }

    /// MPI_Recv's start, with no request unless one is needed: the earliest unexpected
    /// message the receive accepts lands in `target` at once if it is eager; otherwise the
    /// receive is posted as a [`Waiter`] (same matching order as a posted request). An
    /// unexpected rendezvous message gets a request (`RecvNow::Request`). `src` is not
    /// MPI_PROC_NULL.
    pub fn recv_now(
        &mut self,
        comm: MPI_Comm,
        ctx: u32,
        src: i32,
        tag: i32,
        target: Target,
    ) -> RecvNow {
        self.start_waiter(comm, ctx, src, tag, target, true)
    }

    /// [`Self::recv_now`]; `direct`: the receive may wait as the direct waiter (a blocking
    /// one only: the direct slot has no user handle).
    fn start_waiter(
        &mut self,
        comm: MPI_Comm,
        ctx: u32,
        src: i32,
        tag: i32,
        mut target: Target,
        direct: bool,
    ) -> RecvNow {
        // (Nothing unexpected is the common case of a window of receives posted ahead.)
        let found = if self.matching.unexpected_len() == 0 {
            None
        } else {
            self.matching.take_unexpected(ctx, src, tag)
        };
        match found {
            Some((
                s,
                t,
                Unexpected {
                    from,
                    len,
                    body: Body::Eager { data, ack },
                },
            )) => {
                let mut st = Status {
                    source: s,
                    tag: t,
                    ..Status::default()
                };
                store_message(&mut target, &mut st, &data, len);
                if let Some(sreq) = ack {
                    self.queue(from, &Header::control(Kind::Ack, sreq, 0), &[]);
                }
                RecvNow::Done(st)
            }
            Some((s, t, u)) => {
                let h = self.recv_request(comm, ctx, src, tag, target);
                self.match_unexpected(h, s, t, u);
                RecvNow::Request(h)
            }
            None => {
                let w = Waiter {
                    comm,
                    ctx,
                    src,
                    tag,
                    target,
                    status: Status::default(),
                    state: Waited::Posted,
                    freed: false,
                };
                self.dead_news |= !self.dead.is_empty();
                if direct && self.direct.is_none() && self.matching.posted_len() == 0 {
                    self.direct = Some(w);
                    return RecvNow::Waiter(DIRECT_WAITER);
                }
                let w = self.waiters.insert(w);
                self.matching.post(ctx, src, tag, w);
                RecvNow::Waiter(w)
            }
        }
    }

    /// Whether waiter `w` (from [`Self::recv_now`]) has its message (or its request is
    /// complete).
    #[inline]
    pub fn waiter_done(&self, w: MPI_Request) -> bool {
        let w = if w == DIRECT_WAITER {
            self.direct.as_ref()
        } else {
            self.waiters.get(w)
        };
        match w.map(|x| x.state) {
            Some(Waited::Posted) => false,
            Some(Waited::Request(h)) => self.is_done(h),
            Some(Waited::Done) | None => true,
        }
    }

    /// Removes a done waiter: its status, or `Err(h)` when it became request `h` (complete;
    /// the caller releases it).
    pub fn take_waiter(&mut self, w: MPI_Request) -> Result<Status, MPI_Request> {
        let w = if w == DIRECT_WAITER {
            self.direct.take()
        } else {
            self.waiters.remove(w)
        };
        match w {
            Some(Waiter {
                state: Waited::Request(h),
                ..
            }) => Err(h),
            Some(x) => Ok(x.status),
            None => Ok(empty_status()),
        }
    }

    /// Posted waiters, for the sweep of receives from dead peers: (handle, comm, source).
    pub fn posted_waiters(&self) -> impl Iterator<Item = (MPI_Request, MPI_Comm, i32)> + '_ {
        let direct = self.direct.iter().map(|w| (DIRECT_WAITER, w));
        self.waiters
            .iter()
            .chain(direct)
            .filter(|(_, w)| w.state == Waited::Posted)
            .map(|(h, w)| (h, w.comm, w.src))
    }

    /// Whether any receive without a request exists (posted, or complete and not yet
    /// taken), the direct one included.
    pub fn has_waiters(&self) -> bool {
        self.direct.is_some() || !self.waiters.is_empty()
    }

    /// Requests and waiters allocated (the tool interface's count of active requests).
    pub fn requests_len(&self) -> usize {
        self.reqs.len() + self.waiters.len() + self.direct.is_some() as usize
    }

    /// Posted receives, requests and waiters (the tool interface's count).
    pub fn posted_len(&self) -> usize {
        let direct = self.direct.as_ref();
        self.matching.posted_len() + direct.is_some_and(|w| w.state == Waited::Posted) as usize
    }

    fn waiter_mut(&mut self, h: MPI_Request) -> Option<&mut Waiter> {
        if h == DIRECT_WAITER {
            self.direct.as_mut()
        } else {
            self.waiters.get_mut(h)
        }
    }

    /// The direct waiter, if it is posted and accepts the message (ctx, src, tag).
    #[inline]
    fn direct_match(&self, ctx: u32, src: i32, tag: i32) -> Option<MPI_Request> {
        let w = self.direct.as_ref()?;
        (w.state == Waited::Posted
            && w.ctx == ctx
            && super::matching::envelope_ok(w.src, w.tag, src, tag))
        .then_some(DIRECT_WAITER)
    }

    /// The posted receive an arriving message (ctx, src, tag) matches, taken out of the
    /// queues: the direct waiter first (it is earlier than every posted one).
    #[inline]
    fn arrive(&mut self, ctx: u32, src: i32, tag: i32) -> Option<MPI_Request> {
        self.direct_match(ctx, src, tag)
            .or_else(|| self.matching.arrive(ctx, src, tag))
    }

    /// A message matched the posted receive `h`: a request as it is, a waiter turned into
    /// a request (for the protocols that name the receive on the wire).
    fn as_request(&mut self, h: MPI_Request) -> MPI_Request {
        let Some(w) = self.waiter_mut(h) else {
            return h;
        };
        let target = std::mem::replace(&mut w.target, Target::Owned(Vec::new()));
        let (comm, ctx, src, tag, freed) = (w.comm, w.ctx, w.src, w.tag, w.freed);
        let r = self.recv_request(comm, ctx, src, tag, target);
        if freed {
            // Nobody will ask for it: the request goes when it completes.
            self.waiters.free(h);
            if let Some(q) = self.reqs.get_mut(r) {
                q.freed = true;
            }
        } else if let Some(w) = self.waiter_mut(h) {
            w.state = Waited::Request(r);
        }
        r
    }

    /// Receive `h` (holding its posted `RecvOp`) takes the earliest unexpected message it
    /// accepts, or joins the posted queue.
    fn match_or_post(&mut self, h: MPI_Request, ctx: u32, src: i32, tag: i32) {
        // (No unexpected message at all is the common case of a window of receives posted
        // ahead: one load instead of a call.)
        let found = if self.matching.unexpected_len() == 0 {
            None
        } else {
            self.matching.take_unexpected(ctx, src, tag)
        };
        match found {
            Some((s, t, u)) => self.match_unexpected(h, s, t, u),
            None => {
                self.matching.post(ctx, src, tag, h);
                // Check it against the dead peers at the next progress.
                self.dead_news |= !self.dead.is_empty();
            }
        }
    }

    /// Receive `h` (already holding its target) takes the message `u` from comm rank `s`.
    pub fn match_unexpected(&mut self, h: MPI_Request, s: i32, t: i32, u: Unexpected) {
        match u.body {
            Body::Eager { data, ack } => {
                self.deliver(h, s, t, &data, u.len);
                if let Some(sreq) = ack {
                    self.queue(u.from, &Header::control(Kind::Ack, sreq, 0), &[]);
                }
            }
            Body::Rts { sreq, addr, key } => self.pull(h, s, t, u.from, (sreq, addr, key), u.len),
        }
    }

    fn set_source(&mut self, h: MPI_Request, s: i32, t: i32) {
        if let Some(r) = self.reqs.get_mut(h) {
            r.status.source = s;
            r.status.tag = t;
        }
    }

    /// The final status bytes and error of a `len`-byte message into `cap` bytes.
    fn finish_recv(&mut self, h: MPI_Request, len: u64, cap: u64) {
        if let Some(Request {
            op: Op::Recv(op),
            status,
            ..
        }) = self.reqs.get_mut(h)
        {
            recv_result(status, &op.target, len, cap);
        }
        self.complete(h);
    }

    /// Stores a whole eager message into the posted receive `h` (a request or a waiter).
    fn deliver(&mut self, h: MPI_Request, s: i32, t: i32, data: &[u8], len: u64) {
        if let Some(w) = self.waiter_mut(h) {
            w.status.source = s;
            w.status.tag = t;
            store_message(&mut w.target, &mut w.status, data, len);
            w.state = Waited::Done;
            if w.freed {
                self.waiters.free(h);
            }
            return;
        }
        let Some(req) = self.reqs.get_mut(h) else {
            return;
        };
        let Request {
            op: Op::Recv(r),
            status,
            ..
        } = &mut *req
        else {
            return;
        };
        status.source = s;
        status.tag = t;
        store_message(&mut r.target, status, data, len);
        // Completed on the request in hand (no second lookup) unless it needs more.
        if !complete_plain(req) {
            self.complete_rest(h);
        }
    }

    /// Receive `h` matched an RTS: `flush` will read the data.
    fn pull(&mut self, h: MPI_Request, s: i32, t: i32, from: Proc, rts: Rts, len: u64) {
        let (sreq, addr, key) = rts;
        self.set_source(h, s, t);
        if let Some(Request {
            op: Op::Recv(r), ..
        }) = self.reqs.get_mut(h)
        {
            r.stage = RecvStage::Pull {
                from,
                sreq,
                addr,
                len,
                key,
            };
            self.reads.push_back(h);
        }
    }

    /// MPI_Cancel: a receive still in the posted queue is removed and completes cancelled.
    /// Sends are not cancelled (MPI allows this; the send completes normally).
    pub fn cancel(&mut self, h: MPI_Request) {
        let posted = matches!(
            self.reqs.get(h),
            Some(Request {
                op: Op::Recv(RecvOp {
                    stage: RecvStage::Posted,
                    ..
                }),
                done: false,
                ..
            })
        );
        if posted && self.matching.cancel_posted(|&p| p == h).is_some() {
            let st = Status {
                cancelled: true,
                ..empty_status()
            };
            self.complete_with(h, st);
        }
    }

    /// MPI_Iprobe: the status of the first message `(ctx, src, tag)` would receive.
    pub fn probe(&self, ctx: u32, src: i32, tag: i32) -> Option<Status> {
        let (s, t, u) = self.matching.find_unexpected(ctx, src, tag)?;
        Some(Status {
            source: s,
            tag: t,
            bytes: u.len,
            ..Status::default()
        })
    }

    /// MPI_Improbe: takes the message out of matching into a message handle.
    pub fn mprobe(
        &mut self,
        comm: MPI_Comm,
        ctx: u32,
        src: i32,
        tag: i32,
    ) -> Option<(MPI_Message, Status)> {
        let (s, t, u) = self.matching.take_unexpected(ctx, src, tag)?;
        let st = Status {
            source: s,
            tag: t,
            bytes: u.len,
            ..Status::default()
        };
        let mut r = Request::new(comm, true);
        r.op = Op::Message(s, t, u);
        r.done = true;
        Some((self.reqs.insert(r), st))
    }

    /// MPI_Imrecv: turns message `m` into a receive request (same handle) into `target`.
    pub fn mrecv(&mut self, m: MPI_Message, target: Target) -> MpiResult<MPI_Request> {
        let r = self
            .reqs
            .get_mut(m)
            .filter(|r| matches!(r.op, Op::Message(..)))
            .ok_or_else(|| {
                crate::mpi_err!(MPI_ERR_REQUEST, "invalid message handle {:#x}", m as u32)
            })?;
        let Op::Message(s, t, u) = std::mem::replace(&mut r.op, Op::Idle) else {
            unreachable!()
        };
        r.done = false;
        r.op = Op::Recv(RecvOp {
            ctx: 0,
            src: s,
            tag: t,
            target,
            stage: RecvStage::Posted,
        });
        self.match_unexpected(m, s, t, u);
        Ok(m)
    }

    // ----- packets -----

    /// An arrived packet (called from the progress engine while the transport is polled;
    /// anything to send in response is queued and goes out in `flush`).
    pub fn on_packet(&mut self, from: Proc, packet: &[u8]) {
        let Some((h, payload)) = Header::decode(packet) else {
            return;
        };
        if matches!(h.kind, Kind::Eager | Kind::EagerSync | Kind::Rts) {
            self.counts.messages_received += 1;
            self.counts.bytes_received += h.len;
        }
        match h.kind {
            Kind::Eager | Kind::EagerSync => {
                let ack = (h.kind == Kind::EagerSync).then_some(h.sreq);
                match self.arrive(h.context, h.src, h.tag) {
                    Some(r) => {
                        self.deliver(r, h.src, h.tag, payload, h.len);
                        if let Some(sreq) = ack {
                            self.queue(from, &Header::control(Kind::Ack, sreq, 0), &[]);
                        }
                    }
                    None => self.matching.add_unexpected(
                        h.context,
                        h.src,
                        h.tag,
                        Unexpected {
                            from,
                            len: h.len,
                            body: Body::Eager {
                                data: payload.to_vec(),
                                ack,
                            },
                        },
                    ),
                }
            }
            Kind::Rts => {
                let key = RndvKey::new(payload).unwrap_or_default();
                match self.arrive(h.context, h.src, h.tag) {
                    Some(r) => {
                        let r = self.as_request(r);
                        self.pull(r, h.src, h.tag, from, (h.sreq, h.arg, key), h.len)
                    }
                    None => self.matching.add_unexpected(
                        h.context,
                        h.src,
                        h.tag,
                        Unexpected {
                            from,
                            len: h.len,
                            body: Body::Rts {
                                sreq: h.sreq,
                                addr: h.arg,
                                key,
                            },
                        },
                    ),
                }
            }
            Kind::Cts => {
                let s = handle(h.sreq);
                if let Some(Request {
                    op: Op::Send(op), ..
                }) = self.reqs.get_mut(s)
                {
                    op.stage = SendStage::Streaming {
                        rreq: h.rreq,
                        off: 0,
                    };
                    self.streams.push_back(s);
                }
            }
            Kind::Data => self.on_data(handle(h.rreq), h.arg, payload),
            Kind::Fin | Kind::Ack => self.complete(handle(h.sreq)),
        }
    }

    fn on_data(&mut self, h: MPI_Request, off: u64, payload: &[u8]) {
        let Some(Request {
            op: Op::Recv(r), ..
        }) = self.reqs.get_mut(h)
        else {
            return;
        };
        let cap = r.target.capacity();
        let RecvStage::Fragments { len, got, temp } = &mut r.stage else {
            return;
        };
        if off < cap {
            let k = (payload.len() as u64).min(cap - off) as usize;
            let off = off as usize;
            match temp {
                Some(t) => {
                    if t.len() < off + k {
                        t.resize(off + k, 0);
                    }
                    t[off..off + k].copy_from_slice(&payload[..k]);
                }
                None => {
                    if let Some(p) = r.target.contiguous_ptr() {
                        // SAFETY: off + k <= capacity, so the bytes lie inside the contiguous
                        // receive buffer the user gave this active request.
                        unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(off), k) };
                    }
                }
            }
        }
        *got += payload.len() as u64;
        if *got < *len {
            return;
        }
        let len = *len;
        if let Some(t) = temp.take() {
            r.target.store_vec(t);
        }
        self.finish_recv(h, len, cap);
    }

    // ----- network work -----

    /// Sends what is queued and does deferred work that needs the network (single-copy
    /// reads, fragment streams). Returns true if anything happened.
    #[inline]
    pub fn flush<W: Wire + ?Sized>(&mut self, wire: &mut W) -> bool {
        // The common case, checked inline since every progress pass and every receive
        // posted comes here.
        if !self.has_backlog() {
            return false;
        }
        self.flush_backlog(wire)
    }

    #[inline(never)]
    fn flush_backlog<W: Wire + ?Sized>(&mut self, wire: &mut W) -> bool {
        let mut did = false;
        if !self.reads.is_empty() {
            did = true;
            let hs: Vec<MPI_Request> = self.reads.drain(..).collect();
            self.do_reads(wire, &hs);
        }
        did |= self.drain_backlog(wire);
        did |= self.do_streams(wire);
        did
    }

    fn drain_backlog<W: Wire + ?Sized>(&mut self, wire: &mut W) -> bool {
        let mut did = false;
        if self.backlog_len == 0 {
            return false;
        }
        for (&to, q) in self.backlog.iter_mut() {
            while let Some(pkt) = q.front() {
                match wire.try_send(to, &[pkt]) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => self.error = Some(e),
                }
                q.pop_front();
                self.backlog_len -= 1;
                did = true;
            }
        }
        self.backlog.retain(|_, q| !q.is_empty());
        did
    }

    /// Reads the matched rendezvous messages `hs` from their senders, all in flight
    /// together where the transport can (a window of them costs a sender one wake-up, not
    /// one each), then FIN each one read, or asks for fragments (CTS) where it could not.
    fn do_reads<W: Wire + ?Sized>(&mut self, wire: &mut W, hs: &[MPI_Request]) {
        // Per message: its request, its length and capacity, its read (None: nothing to
        // read) and a temporary buffer where the receive buffer is not contiguous.
        let mut jobs = Vec::with_capacity(hs.len());
        let mut reads = Vec::with_capacity(hs.len());
        for &h in hs {
            let Some(Request {
                op: Op::Recv(r), ..
            }) = self.reqs.get_mut(h)
            else {
                continue;
            };
            let RecvStage::Pull {
                from,
                addr,
                len,
                key,
                ..
            } = r.stage
            else {
                continue;
            };
            let cap = r.target.capacity();
            let n = len.min(cap) as usize;
            let mut temp = None;
            if n > 0 {
                let dst = match r.target.contiguous_ptr() {
                    Some(p) => p,
                    None => temp.insert(vec![0u8; n]).as_mut_ptr(),
                };
                // SAFETY: n <= capacity: the first n bytes of the contiguous receive buffer
                // the user gave this active request (or of `temp`, whose heap block stays
                // put when the Vec moves), untouched by us until the reads return.
                reads.push(unsafe { KeyedRead::new(from, addr, key, dst, n) });
            }
            jobs.push((h, len, cap, (n > 0).then(|| reads.len() - 1), temp));
        }
        wire.read_keyed_many(&mut reads);
        for (h, len, cap, read, temp) in jobs {
            let Some(Request {
                op: Op::Recv(r), ..
            }) = self.reqs.get_mut(h)
            else {
                continue;
            };
            let RecvStage::Pull { from, sreq, .. } = r.stage else {
                continue;
            };
            if read.is_none_or(|i| reads[i].done) {
                if let Some(t) = temp {
                    r.target.store_vec(t);
                }
                self.queue(from, &Header::control(Kind::Fin, sreq, 0), &[]);
                self.finish_recv(h, len, cap);
            } else {
                let n = len.min(cap) as usize;
                let temp = r
                    .target
                    .contiguous_ptr()
                    .is_none()
                    .then(|| Vec::with_capacity(n));
                r.stage = RecvStage::Fragments { len, got: 0, temp };
                self.queue(from, &Header::control(Kind::Cts, sreq, rid(h)), &[]);
            }
        }
    }

    fn do_streams<W: Wire + ?Sized>(&mut self, wire: &mut W) -> bool {
        let mut did = false;
        if self.streams.is_empty() {
            return false;
        }
        let mut waiting = VecDeque::new();
        while let Some(h) = self.streams.pop_front() {
            let Some(Request {
                op: Op::Send(op), ..
            }) = self.reqs.get_mut(h)
            else {
                continue;
            };
            let SendStage::Streaming { rreq, mut off } = op.stage else {
                continue;
            };
            if self.backlog.contains_key(&op.to) {
                waiting.push_back(h);
                continue;
            }
            let frag = wire.max_packet(op.to).saturating_sub(HEADER_LEN).max(1);
            let mut failed = None;
            while off < op.len {
                let k = frag.min(op.len - off);
                let mut hdr = Header::control(Kind::Data, rid(h), rreq);
                hdr.len = op.len as u64;
                hdr.arg = off as u64;
                // SAFETY: [off, off+k) lies inside the `len` bytes this send owns or borrows
                // (user memory under MPI's contract, its packed copy or its Bsend block).
                let part = unsafe { std::slice::from_raw_parts(op.ptr.0.add(off), k) };
                match wire.try_send(op.to, &[&hdr.encode(), part]) {
                    Ok(true) => {
                        off += k;
                        did = true;
                    }
                    Ok(false) => break,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            op.stage = SendStage::Streaming { rreq, off };
            if let Some(e) = failed {
                let code = make_code(e.class, e.into_data().msg);
                let st = Status {
                    error: code,
                    ..Status::default()
                };
                self.complete_with(h, st);
            } else if off >= op.len {
                self.complete(h);
            } else {
                waiting.push_back(h);
            }
        }
        self.streams = waiting;
        did
    }
}

/// Stores a whole eager message (`len` bytes announced, `data` what arrived) into `target`
/// and sets the status's count and error.
/// Marks `r` complete. The common case (a user's receive into its buffer, a plain send)
/// keeps nothing of its protocol state: it is dropped in place and true returned; false
/// leaves the rest (owned data, a Bsend block, a freed, background or child request) to
/// `P2p::complete_rest`.
#[inline]
fn complete_plain(r: &mut Request) -> bool {
    r.done = true;
    let keeps = match &r.op {
        Op::Recv(op) => matches!(op.target, Target::Owned(_)),
        Op::Send(op) => op.bsend_block.is_some(),
        _ => false,
    };
    if keeps || r.freed || r.background || r.parent.is_some() {
        return false;
    }
    r.op = Op::Idle;
    true
}

fn store_message(target: &mut Target, st: &mut Status, data: &[u8], len: u64) {
    let cap = target.capacity();
    let n = (len.min(cap) as usize).min(data.len());
    target.store(&data[..n]);
    recv_result(st, target, len, cap);
}

/// The count and error of a receive of a `len`-byte message into `target` (`cap` bytes),
/// whose status already names the source and tag.
fn recv_result(st: &mut Status, target: &Target, len: u64, cap: u64) {
    st.bytes = len.min(cap);
    if len > cap {
        st.error = make_code(
            MPI_ERR_TRUNCATE,
            format!(
                "message truncated: {len} bytes from rank {} with tag {} do not fit in the \
                 receive buffer of {cap} bytes",
                st.source, st.tag
            ),
        );
    } else if let Target::User { dt, .. } = target {
        // A message that ends inside a basic element of a derived receive type has a type
        // signature that cannot match: MPI_ERR_TRUNCATE, the class MPICH gives it (its
        // truncmsg2 test).
        if dt.size() > 0 && !len.is_multiple_of(dt.size() as u64) && dt.elements_in(len).is_none() {
            st.error = make_code(
                MPI_ERR_TRUNCATE,
                format!(
                    "the {len} bytes from rank {} with tag {} end inside a basic element of \
                     the receive datatype: the type signatures do not match",
                    st.source, st.tag
                ),
            );
        }
    }
}
