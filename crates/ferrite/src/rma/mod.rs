//! One-sided communication (MPI 4.1 chapter 12): the origin side (operations, epochs,
//! completion) and the target side (serving requests, the lock queue, PSCW notices).
//!
//! Every operation is a request message to the target (`wire.rs`) answered by a Reply
//! carrying its id (and, for Get, Get_accumulate, Fetch_and_op and Compare_and_swap, the
//! data fetched). The origin counts unanswered requests per target: flush, unlock,
//! complete and fence wait until the count is zero, which is remote completion (so the
//! local-completion calls are the same as the remote ones). Fence is then a barrier.
//! Locks are requests the target answers when it grants them (FIFO queue at the target);
//! post and complete are notices with no answer. The target applies requests to its
//! memory in `apply.rs` after checking them against the window. Messages travel by the
//! channel in `am.rs`. Targets on this host whose memory is mapped here (or reachable by
//! cross-memory attach) are accessed directly instead (`direct.rs`): those operations are
//! complete when the call returns.
//!
//! Over messages, small Puts and Accumulates to one target wait in a per-target Batch
//! (`Batch`) until a synchronization (flush, unlock, fence, complete, free), a message of
//! another kind to that target, or a full buffer sends them as one message with one Reply;
//! each channel is in order, so batching keeps every ordering the one-message-per-operation
//! scheme had. Large Gets, Puts and Accumulates stream their data apart from the request
//! (`wire.rs`); a target holds back what an origin sent after a streamed accumulate until
//! that one is applied, so accumulate ordering still holds.

pub mod am;
pub mod apply;
pub mod direct;
pub mod fast;
pub mod shared;
pub mod view;
pub mod wire;

use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::objects::datatype::Datatype;
use crate::state::{self, Ferrite};
use am::Route;
use apply::Exposed;
use direct::Reach;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use wire::{Head, Kind};

/// Where fetched data goes at the origin: `count` elements of `dt` at `buf`.
struct Fetched {
    buf: usize,
    count: usize,
    dt: Arc<Datatype>,
}

/// A request waiting for its Reply.
struct Pending {
    target: u32,
    into: Option<Fetched>,
    /// The user's request (MPI_Rput & co), completed with the Reply.
    req: Option<MPI_Request>,
    /// The message, sent from here without a copy: the Reply proves the target took it.
    _msg: Vec<u8>,
    /// A streamed Get: the receive its data lands by (no Reply unless the target failed).
    data: Option<MPI_Request>,
    /// Its data travels apart (`wire::streamed`): an unlock waits for its answer before the
    /// Unlock goes, as the target may still be moving the data then.
    streamed: bool,
}

/// Small Puts and Accumulates to one target not sent yet: a Batch message being built.
struct Batch {
    id: u64,
    msg: Vec<u8>,
}

/// A streamed request whose data is not received in place (an accumulate, non-contiguous
/// runs): the request (as a Put or Acc), its runs and the buffer the data arrives in.
type Deferred = (Head, Vec<(isize, usize)>, Vec<u8>);

/// A streamed Put or Accumulate this process (its target) is receiving: answered when the
/// data is in (and applied).
struct Incoming {
    recv: MPI_Request,
    from: u32,
    id: u64,
    /// Data not received in place, applied once in.
    apply: Option<Deferred>,
    /// An accumulate: later messages of its origin wait until it is applied.
    ordered: bool,
    /// The request was refused: the data is drained, then this is the answer.
    refused: Option<MpiError>,
}

/// A Batch is sent once it would pass this many bytes (under tcp's 64 KiB eager packet, so
/// it goes in one packet without a rendezvous).
const BATCH_MAX: usize = 60 << 10;
/// Puts and Accumulates whose request message is at most this long are batched.
const BATCH_OP_MAX: usize = 16 << 10;
/// Gets of at least this many bytes stream their data into the result buffer.
const STREAM_GET_MIN: usize = 16 << 10;
/// Puts and Accumulates of more bytes than this stream their data from the origin buffer
/// (more than tcp's eager packet: the rendezvous then moves it straight into the window, or
/// into a buffer the target keeps for accumulates).
const STREAM_PUT_MIN: usize = 64 << 10;

/// Where a passive-target lock by messages stands, per target.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum MsgLock {
    /// None by messages (no epoch, MPI_MODE_NOCHECK, a same-host lock slot).
    Off,
    /// Asked for by MPI_Win_lock/lock_all (lock type) but not sent: the Lock goes just
    /// before the first message to the target, unanswered, and the target holds what follows
    /// until it grants it. An epoch that sends nothing sends no Lock and no Unlock.
    Wanted(i32),
    /// The Lock went (lazily, or granted before MPI_Win_lock returned): unlock sends Unlock.
    Sent,
}

/// A lock this process holds on a target.
#[derive(Clone, Copy)]
struct Held {
    /// MPI_MODE_NOCHECK: no lock was requested, so none is released.
    nocheck: bool,
    /// MPI_LOCK_EXCLUSIVE (a same-host lock's release depends on it).
    excl: bool,
}

/// The locks this process holds, by target (a vector: the fast path asks per operation).
#[derive(Default)]
struct Locks {
    by: Vec<Option<Held>>,
    count: usize,
}

impl Locks {
    fn contains_key(&self, t: &u32) -> bool {
        self.by.get(*t as usize).is_some_and(Option::is_some)
    }
    fn get(&self, t: &u32) -> Option<&Held> {
        self.by.get(*t as usize)?.as_ref()
    }
    fn is_empty(&self) -> bool {
        self.count == 0
    }
    fn insert(&mut self, t: u32, h: Held) {
        let t = t as usize;
        if self.by.len() <= t {
            self.by.resize(t + 1, None);
        }
        if self.by[t].replace(h).is_none() {
            self.count += 1;
        }
    }
    fn remove(&mut self, t: &u32) {
        if let Some(slot) = self.by.get_mut(*t as usize) {
            if slot.take().is_some() {
                self.count -= 1;
            }
        }
    }
}

/// The RMA state of one window in this process.
pub struct WinRma {
    route: Route,
    /// The standing receive of the channel.
    recv: MPI_Request,
    /// (size, disp_unit) of every rank's memory, for checks at the origin.
    sizes: Vec<(i64, i64)>,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    /// Unanswered requests per target.
    outstanding: Vec<u32>,
    /// An error a target answered with, raised at the next synchronization.
    failed: Option<MpiError>,
    // Access epochs (origin side).
    fence: bool,
    locks: Locks,
    lock_all: Option<Held>,
    started: Option<Vec<u32>>,
    /// Post notices received from each target and not yet used by a start.
    posts: Vec<u32>,
    // Exposure (target side).
    excl: Option<u32>,
    shared: u32,
    /// Lock requests waiting: (origin, lock type, id).
    queue: VecDeque<(u32, i32, u64)>,
    /// Origins of the current PSCW exposure epoch.
    posted: Option<usize>,
    completes: u32,
    /// How each target's memory is reached (direct.rs).
    reach: Vec<Reach>,
    /// This process's accumulate lock word when other processes map its memory (0: none);
    /// taken to apply accumulates that came as messages.
    own_lock: usize,
    /// Mappings of other processes' window memory: (address, length), unmapped on free.
    maps: Vec<(usize, usize)>,
    /// Per target, the lock slot of its same-host passive-target lock (`direct::epoch`), or
    /// 0: MPI_Win_lock on it goes by messages. The same in every process of the window.
    lock_slot: Vec<usize>,
    /// Flushes that found nothing outstanding (every `IDLE_FLUSH_PROGRESS`th makes progress);
    /// windows with a view count in it instead.
    idle_flushes: u32,
    /// What the lock-free fast path sees of this window (view.rs), kept in step here.
    view: Option<&'static view::View>,
    /// Per target, this process's passive-target lock by messages.
    msg_lock: Vec<MsgLock>,
    /// Per target, the batch being built (it counts as one outstanding request).
    batches: Vec<Option<Batch>>,
    /// How many of `batches` are Some.
    batched: u32,
    /// Ids of pending streamed Gets (their data receives are watched by the progress hook).
    streams: Vec<u64>,
    /// Streamed Puts and Accumulates arriving here.
    incoming: Vec<Incoming>,
    /// Messages from origins with a streamed accumulate arriving, served after it in order.
    held: VecDeque<(u32, Vec<u8>)>,
    /// A buffer for streamed data that is not received in place, kept for the next one (no
    /// allocation, page faults or zeroing per operation).
    spare: Vec<u8>,
}

impl WinRma {
    /// Mirrors the epochs into the view: the window's, and target `t`'s (all if None).
    fn sync_view(&self, t: Option<u32>) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(v) = self.view else { return };
        v.fence.store(self.fence, Relaxed);
        v.lock_all.store(self.lock_all.is_some(), Relaxed);
        v.locks.store(self.locks.count as u32, Relaxed);
        let one = |t: u32| {
            let Some(tv) = v.target(t as usize) else {
                return;
            };
            let mut open = 0;
            if self.locks.contains_key(&t) {
                open |= view::LOCKED;
            }
            if self.started.as_ref().is_some_and(|g| g.contains(&t)) {
                open |= view::STARTED;
            }
            tv.open.store(open, Relaxed);
        };
        match t {
            Some(t) => one(t),
            None => (0..self.sizes.len() as u32).for_each(one),
        }
    }

    /// Marks `msg`, the next message to `target`, as carrying a lock asked for but not
    /// sent yet (MsgLock::Wanted), which is then Sent.
    fn carry_lock(&mut self, target: u32, msg: &mut [u8]) {
        if let MsgLock::Wanted(ty) = self.msg_lock[target as usize] {
            self.msg_lock[target as usize] = MsgLock::Sent;
            wire::set_lock(msg, ty);
        }
    }

    /// A request went by message: flushes must wait (the view's count).
    fn sent(&mut self, target: u32) {
        self.outstanding[target as usize] += 1;
        if let Some(v) = self.view {
            v.busy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Its answer came (or its send failed).
    fn answered(&mut self, target: u32) {
        if let Some(o) = self.outstanding.get_mut(target as usize) {
            *o = o.saturating_sub(1);
        }
        if let Some(v) = self.view {
            let _ = v.busy.fetch_update(
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
                |n| n.checked_sub(1),
            );
        }
    }

    /// An error to raise at the next synchronization.
    fn fail(&mut self, e: MpiError) {
        self.failed = Some(e);
        if let Some(v) = self.view {
            v.failed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether messages from `src` must wait: a streamed accumulate of its is arriving, or
    /// its lock (sent lazily, followed by its operations) is queued here.
    fn blocked(&self, src: u32) -> bool {
        self.incoming.iter().any(|x| x.from == src && x.ordered)
            || self.queue.iter().any(|&(o, _, _)| o == src)
    }

    /// Whether a lock by messages on `t` may be sent lazily, with the first operation: every
    /// operation to `t` goes by message (a direct one would not wait for the grant), and
    /// `t` is not this process (MPI_Win_lock on one's own window returns holding the lock:
    /// local loads and stores may follow).
    fn lazy_lock(&self, t: u32) -> bool {
        matches!(self.reach[t as usize], Reach::Messages) && t != self.route.me as u32
    }

    /// Takes the error to raise, if any.
    fn take_failed(&mut self) -> MpiResult<()> {
        if let Some(v) = self.view {
            v.failed.store(false, std::sync::atomic::Ordering::Relaxed);
        }
        self.failed.take().map_or(Ok(()), Err)
    }
}

/// A flush with nothing outstanding makes one progress pass every this many calls: a
/// process polling window memory in a flush loop must still serve what others wait for
/// (mpi4py.util.sync's spin lock), but a pass per flush costs more than a direct operation.
const IDLE_FLUSH_PROGRESS: u32 = 16;

/// One operation, checked, as the direct path takes it.
struct Direct<'a> {
    kind: Kind,
    op: MPI_Op,
    basic: MPI_Datatype,
    disp: MPI_Aint,
    /// (buffer, count, datatype) of the origin data (None for Get and MPI_NO_OP).
    origin: Option<&'a (usize, usize, Arc<Datatype>)>,
    compare: Option<&'a [u8]>,
    into: Option<&'a Fetched>,
}

/// The arguments of one RMA operation (what every Put/Get/... entry point reduces to).
pub struct Call {
    pub kind: Kind,
    /// Data sent (Put, Accumulate, Get_accumulate, the new value of Compare_and_swap).
    pub origin: Option<(usize, i64, MPI_Datatype)>,
    /// Compare_and_swap's compare value.
    pub compare: Option<usize>,
    /// Where fetched data goes (Get, Get_accumulate, Fetch_and_op, Compare_and_swap).
    pub result: Option<(usize, i64, MPI_Datatype)>,
    pub target: i32,
    pub disp: MPI_Aint,
    pub tcount: i64,
    pub tdt: MPI_Datatype,
    pub op: MPI_Op,
}

fn sync_err(msg: impl Into<String>) -> MpiError {
    MpiError::new(MPI_ERR_RMA_SYNC, msg)
}

/// The predefined type every basic element of `d` (handle `h`) has, or None if mixed.
fn basic_type(h: MPI_Datatype, d: &Datatype) -> Option<MPI_Datatype> {
    let Some(env) = &d.envelope else {
        return Some(h);
    };
    let mut found = None;
    for (th, td) in &env.types {
        let b = basic_type(*th, td)?;
        if found.is_some_and(|f| f != b) {
            return None;
        }
        found = Some(b);
    }
    found
}

impl Ferrite {
    fn rma(&mut self, w: MPI_Win) -> MpiResult<&mut WinRma> {
        self.objects
            .wins
            .get_mut(w)?
            .rma
            .as_mut()
            .ok_or_else(|| MpiError::new(MPI_ERR_WIN, "window has no RMA state"))
    }

    /// After MPI_Win_free's barrier: the channel is closed.
    pub fn rma_free(&mut self, w: MPI_Win) {
        // First, so no fast-path call starts on memory about to be unmapped.
        view::withdraw(w);
        if let Ok(r) = self.rma(w) {
            r.view = None;
        }
        self.objects.wins.active.retain(|&x| x != w);
        let recv = self.rma(w).map(|r| r.recv).unwrap_or(MPI_REQUEST_NULL);
        am::withdraw(self, recv);
        if let Ok(r) = self.rma(w) {
            for (addr, len) in r.maps.drain(..) {
                // SAFETY: our mapping of a peer's window memory; after MPI_Win_free's
                // barrier no operation uses it.
                unsafe { libc::munmap(addr as *mut libc::c_void, len) };
            }
        }
    }

    /// How `t`'s memory is reached; maps a peer's shared file on first use (a failure
    /// leaves that target to messages).
    fn reach(&mut self, w: MPI_Win, t: u32) -> MpiResult<Reach> {
        let r = self.rma(w)?;
        let Reach::File { pid, fd, len, lock } = r.reach[t as usize] else {
            return Ok(r.reach[t as usize]);
        };
        let mapped = match crate::transport::shm::segment::open_peer_file(pid, fd) {
            Ok(Some(f)) => {
                let m = crate::transport::shm::segment::map(f, len);
                // SAFETY: our descriptor; the mapping keeps the file.
                unsafe { libc::close(f) };
                m.ok()
            }
            _ => None,
        };
        let now = match mapped {
            Some(p) => {
                r.maps.push((p as usize, len));
                Reach::Mapped {
                    base: p as usize,
                    lock: p as usize + lock,
                }
            }
            None => Reach::Messages,
        };
        r.reach[t as usize] = now;
        Ok(now)
    }

    // ----- the target side, run by the progress engine -----

    /// Progress hook: serves every message the windows' standing receives took.
    pub fn rma_progress(&mut self) -> bool {
        let mut did = false;
        let mut i = 0;
        while i < self.objects.wins.active.len() {
            let w = self.objects.wins.active[i];
            i += 1;
            while let Ok(r) = self.rma(w) {
                let h = r.recv;
                if h == MPI_REQUEST_NULL || !self.p2p.is_done(h) {
                    break;
                }
                let route = self.rma(w).expect("checked above").route.clone();
                let (status, data, _) = self.release(h);
                if status.error != MPI_SUCCESS {
                    let r = self.rma(w).expect("checked above");
                    r.recv = MPI_REQUEST_NULL;
                    r.fail(MpiError::new(
                        status.error,
                        "the window's communication channel failed",
                    ));
                    break;
                }
                let next = am::post(self, &route).unwrap_or(MPI_REQUEST_NULL);
                let src = status.source as u32;
                let data = data.unwrap_or_default();
                if let Ok(r) = self.rma(w) {
                    r.recv = next;
                    if !wire::is_reply(&data) && r.blocked(src) {
                        r.held.push_back((src, data));
                        did = true;
                        continue;
                    }
                }
                self.rma_serve(w, &route, src, &data);
                did = true;
            }
            did |= self.rma_streams_progress(w);
            // Batches go out whenever the progress engine runs, not only at a flush to
            // their target: a process that accumulates a notice to one process and then
            // polls its own memory (flushing only itself, as mpi4py.util.sync's MCS lock
            // does) must not keep the notice back forever. Between two MPI calls that make
            // no progress (a run of Puts) they still gather.
            if self.rma(w).is_ok_and(|r| r.batched > 0) {
                let n = self.rma(w).map_or(0, |r| r.batches.len() as u32);
                for t in 0..n {
                    if let Err(e) = self.rma_batch_send(w, t) {
                        if let Ok(r) = self.rma(w) {
                            r.fail(e);
                        }
                    }
                }
                did = true;
            }
        }
        did
    }

    /// Finishes streamed Gets whose data is in (origin side) and streamed Puts that arrived
    /// (target side).
    fn rma_streams_progress(&mut self, w: MPI_Win) -> bool {
        let Ok(r) = self.rma(w) else { return false };
        if r.streams.is_empty() && r.incoming.is_empty() {
            return false;
        }
        let mut did = false;
        let mut i = 0;
        while let Some(&id) = self.rma(w).ok().and_then(|r| r.streams.get(i)) {
            let r = self.rma(w).expect("checked above");
            let h = r.pending.get(&id).and_then(|p| p.data);
            let Some(h) = h.filter(|&h| self.p2p.is_done(h)) else {
                i += 1;
                continue;
            };
            let (status, _, _) = self.release(h);
            let r = self.rma(w).expect("checked above");
            r.streams.swap_remove(i);
            let p = r.pending.remove(&id).expect("a stream is pending");
            r.answered(p.target);
            if status.error != MPI_SUCCESS {
                r.fail(MpiError::new(
                    status.error,
                    format!("receiving a Get's data from target {}", p.target),
                ));
            }
            if let Some(req) = p.req {
                self.coll_complete(req, status.error);
            }
            did = true;
        }
        let mut i = 0;
        while let Some(h) = self
            .rma(w)
            .ok()
            .and_then(|r| r.incoming.get(i).map(|x| x.recv))
        {
            if !self.p2p.is_done(h) {
                i += 1;
                continue;
            }
            let (status, _, _) = self.release(h);
            let r = self.rma(w).expect("checked above");
            let inc = r.incoming.swap_remove(i);
            let route = r.route.clone();
            let res = match (inc.refused, status.error, inc.apply) {
                (Some(e), _, _) => Err(e),
                (None, MPI_SUCCESS, Some((h, runs, buf))) => {
                    let res = self
                        .rma_apply(w, &h, &runs, &buf[..apply::bytes(&runs)])
                        .map(|_| Vec::new());
                    if let Ok(r) = self.rma(w) {
                        if buf.len() > r.spare.len() {
                            r.spare = buf;
                        }
                    }
                    res
                }
                (None, MPI_SUCCESS, None) => Ok(Vec::new()),
                (None, e, _) => Err(MpiError::new(e, "receiving streamed RMA data failed")),
            };
            self.rma_reply(&route, inc.from, inc.id, res);
            self.rma_serve_held(w, &route, inc.from);
            did = true;
        }
        did
    }

    /// Serves what `origin` sent while it was blocked (`WinRma::blocked`), in order, until
    /// it is blocked again.
    fn rma_serve_held(&mut self, w: MPI_Win, route: &Route, origin: u32) {
        while let Ok(r) = self.rma(w) {
            if r.blocked(origin) {
                break;
            }
            let Some(at) = r.held.iter().position(|(o, _)| *o == origin) else {
                break;
            };
            let (_, m) = r.held.remove(at).expect("found above");
            self.rma_serve(w, route, origin, &m);
        }
    }

    fn rma_reply(&mut self, route: &Route, to: u32, id: u64, res: MpiResult<Vec<u8>>) {
        let (op, data) = match res {
            Ok(d) => (MPI_SUCCESS, d),
            Err(e) => (e.class, e.into_data().msg.into_bytes()),
        };
        let h = Head {
            kind: Kind::Reply,
            op,
            basic: MPI_DATATYPE_NULL,
            id,
            disp: 0,
        };
        let m = wire::encode(&h, &[], data.len());
        // A failed send shows up at the origin as an answer that never comes; the
        // transport reports the peer's failure there.
        let _ = am::send(self, route, to, &[&m, &data]);
    }

    fn rma_serve(&mut self, w: MPI_Win, route: &Route, src: u32, msg: &[u8]) {
        let Some((h, runs, data)) = wire::decode(msg) else {
            return;
        };
        if let Some(ty) = wire::lock_of(msg) {
            if !self.rma_carried_lock(w, src, ty, msg) {
                return;
            }
        }
        match h.kind {
            Kind::Reply => return self.rma_answered(w, h, data),
            Kind::Batch => {
                let mut res = Ok(Vec::new());
                for m in wire::entries(data) {
                    let r = match wire::decode(m) {
                        Some((eh, eruns, edata)) if matches!(eh.kind, Kind::Put | Kind::Acc) => {
                            self.rma_apply(w, &eh, &eruns, edata)
                        }
                        Some((eh, _, _)) if eh.kind == Kind::Unlock => {
                            self.rma_unlocked(w, route, src, 0);
                            Ok(Vec::new())
                        }
                        _ => Err(MpiError::new(MPI_ERR_INTERN, "malformed RMA batch")),
                    };
                    // The first error is the answer; the others still apply.
                    if res.is_ok() && r.is_err() {
                        res = r;
                    }
                }
                return self.rma_reply(route, src, h.id, res);
            }
            Kind::Get if h.op != 0 => return self.rma_stream_out(w, route, src, &h, &runs),
            Kind::Put if h.op != 0 => return self.rma_stream_in(w, route, src, &h, runs),
            Kind::AccStream => return self.rma_stream_in(w, route, src, &h, runs),
            Kind::Put | Kind::Get | Kind::Acc | Kind::GetAcc | Kind::Cas => {
                let res = self.rma_apply(w, &h, &runs, data);
                return self.rma_reply(route, src, h.id, res);
            }
            _ => {}
        }
        let Ok(r) = self.rma(w) else { return };
        // Lock answers to send: (origin, id).
        let mut grants = Vec::new();
        match h.kind {
            Kind::Post => {
                if let Some(p) = r.posts.get_mut(src as usize) {
                    *p += 1;
                }
            }
            Kind::Complete => r.completes += 1,
            Kind::Lock => {
                if r.queue.is_empty() && lock_free(r, h.op) {
                    take_lock(r, src, h.op);
                    grants.push((src, h.id));
                } else {
                    r.queue.push_back((src, h.op, h.id));
                }
            }
            Kind::Unlock => return self.rma_unlocked(w, route, src, h.id),
            _ => {}
        }
        // A Lock request is one waited for (lazily sent locks ride on requests instead,
        // `rma_carried_lock`, and are never answered).
        for (o, id) in grants {
            if id != 0 {
                self.rma_reply(route, o, id, Ok(Vec::new()));
            }
        }
    }

    /// `src` released its lock on this process (an Unlock request `id`, answered; or the
    /// last entry of a Batch, id 0, answered by the batch's Reply): grants what the queue
    /// allows now and serves what those origins sent meanwhile (held until their grant).
    fn rma_unlocked(&mut self, w: MPI_Win, route: &Route, src: u32, id: u64) {
        let Ok(r) = self.rma(w) else { return };
        if r.excl == Some(src) {
            r.excl = None;
        } else {
            r.shared = r.shared.saturating_sub(1);
        }
        let mut grants = vec![(src, id)];
        while let Some(&(o, ty, id)) = r.queue.front() {
            if !lock_free(r, ty) {
                break;
            }
            r.queue.pop_front();
            take_lock(r, o, ty);
            grants.push((o, id));
        }
        for &(o, id) in &grants {
            if id != 0 {
                self.rma_reply(route, o, id, Ok(Vec::new()));
            }
        }
        for &(o, _) in &grants[1..] {
            self.rma_serve_held(w, route, o);
        }
    }

    /// A request that carries its origin's lock (`wire::lock_of`, sent lazily): taken now
    /// if free, else queued, and the request (without the lock) waits in `held` ahead of
    /// anything else from `src`. Whether the request is served now.
    fn rma_carried_lock(&mut self, w: MPI_Win, src: u32, ty: i32, msg: &[u8]) -> bool {
        let Ok(r) = self.rma(w) else { return false };
        if r.queue.is_empty() && lock_free(r, ty) {
            take_lock(r, src, ty);
            return true;
        }
        r.queue.push_back((src, ty, 0));
        let mut m = msg.to_vec();
        wire::set_lock(&mut m, 0);
        let at = r.held.iter().position(|(o, _)| *o == src);
        r.held.insert(at.unwrap_or(r.held.len()), (src, m));
        false
    }

    /// A streamed Get at the target: its data goes from the window memory on the stream
    /// tag (one copy first only for non-contiguous runs); only an error is answered.
    fn rma_stream_out(
        &mut self,
        w: MPI_Win,
        route: &Route,
        src: u32,
        h: &Head,
        runs: &[(isize, usize)],
    ) {
        let sent = self.rma_locate(w, h, runs).and_then(|addr| {
            let data = match runs {
                [(off, len)] => crate::p2p::request::Source::User {
                    buf: crate::p2p::request::Ptr((addr as *mut u8).wrapping_offset(*off)),
                    count: *len,
                    dt: self.comm_datatype(MPI_BYTE)?,
                },
                _ => {
                    // SAFETY: `locate` checked the runs against this process's window memory.
                    let v = unsafe { apply::gather(addr, runs) };
                    crate::p2p::request::Source::Owned(v.into())
                }
            };
            am::send_stream(self, route, src, h.op, data)
        });
        if let Err(e) = sent {
            self.rma_reply(route, src, h.id, Err(e));
        }
    }

    /// A streamed Put or Accumulate (`AccStream`) at the target: receives a contiguous Put's
    /// data straight into the window memory, anything else into a buffer the window keeps
    /// (`spare`), applied once in; answers then (rma_streams_progress). Until an accumulate
    /// is applied, later messages of its origin wait (`held`): accumulate ordering.
    fn rma_stream_in(
        &mut self,
        w: MPI_Win,
        route: &Route,
        src: u32,
        h: &Head,
        runs: Vec<(isize, usize)>,
    ) {
        use crate::p2p::request::{Ptr, Target};
        let acc = h.kind == Kind::AccStream;
        let tag = if acc {
            wire::stream_tag(h.id, false)
        } else {
            h.op
        };
        let (target, apply, refused) = match self.rma_locate(w, h, &runs) {
            Ok(addr) => match runs[..] {
                [(off, len)] if !acc => (
                    Target::Bytes {
                        buf: Ptr((addr as *mut u8).wrapping_offset(off)),
                        len,
                    },
                    None,
                    None,
                ),
                _ => {
                    let len = apply::bytes(&runs);
                    let mut buf = self
                        .rma(w)
                        .map(|r| std::mem::take(&mut r.spare))
                        .unwrap_or_default();
                    if buf.len() < len {
                        buf.resize(len, 0);
                    }
                    let into = Target::Bytes {
                        buf: Ptr(buf.as_mut_ptr()),
                        len,
                    };
                    let head = Head {
                        kind: if acc { Kind::Acc } else { Kind::Put },
                        ..*h
                    };
                    (into, Some((head, runs, buf)), None)
                }
            },
            // The data still comes: drained, then refused.
            Err(e) => (Target::Owned(Vec::new()), None, Some(e)),
        };
        match am::post_stream(self, route, src, tag, target) {
            Ok(recv) => {
                if let Ok(r) = self.rma(w) {
                    r.incoming.push(Incoming {
                        recv,
                        from: src,
                        id: h.id,
                        apply,
                        ordered: acc,
                        refused,
                    });
                }
            }
            Err(e) => self.rma_reply(route, src, h.id, Err(e)),
        }
    }

    /// The address the runs of request `h` are relative to in this process's window memory,
    /// checked: every run lies in memory the window exposes.
    fn rma_locate(&mut self, w: MPI_Win, h: &Head, runs: &[(isize, usize)]) -> MpiResult<usize> {
        let win = self.objects.wins.get(w)?;
        let exposed = if win.attrs.flavor == MPI_WIN_FLAVOR_DYNAMIC {
            Exposed::Dynamic(&win.attached)
        } else {
            Exposed::Region {
                base: win.base,
                size: win.attrs.size,
                disp_unit: i64::from(win.attrs.disp_unit),
            }
        };
        apply::locate(&exposed, h.disp, runs)
    }

    /// Applies one data request to this process's window memory.
    fn rma_apply(
        &mut self,
        w: MPI_Win,
        h: &Head,
        runs: &[(isize, usize)],
        data: &[u8],
    ) -> MpiResult<Vec<u8>> {
        let own_lock = self.rma(w)?.own_lock;
        let addr = self.rma_locate(w, h, runs)?;
        // SAFETY: `locate` checked that every run lies inside memory this process exposed
        // in the window (its own, or attached to it), which MPI lets RMA read and write
        // during an epoch; the message buffer is ours and overlaps nothing. Accumulates
        // take the lock word other processes' direct accumulates take (direct.rs).
        unsafe {
            let atomic = apply::use_atomics(addr, runs, h.basic);
            let _g = match h.kind {
                Kind::Acc | Kind::GetAcc | Kind::Cas => direct::lock(own_lock, atomic),
                _ => direct::lock(0, false),
            };
            match h.kind {
                Kind::Put => {
                    apply::scatter(addr, runs, data);
                    Ok(Vec::new())
                }
                Kind::Get => Ok(apply::gather(addr, runs)),
                Kind::Acc => apply::accumulate(addr, runs, h.op, h.basic, data, false, atomic),
                Kind::GetAcc => apply::accumulate(addr, runs, h.op, h.basic, data, true, atomic),
                Kind::Cas => apply::compare_and_swap(addr, runs, h.basic, data, atomic),
                _ => Ok(Vec::new()),
            }
        }
    }

    /// A Reply at the origin: the request is complete.
    fn rma_answered(&mut self, w: MPI_Win, h: Head, data: &[u8]) {
        let Ok(r) = self.rma(w) else { return };
        let Some(p) = r.pending.remove(&h.id) else {
            return;
        };
        r.answered(p.target);
        if let Some(recv) = p.data {
            // A streamed Get the target refused: its data will not come.
            r.streams.retain(|&id| id != h.id);
            am::withdraw(self, recv);
        }
        let r = self.rma(w).expect("checked above");
        if h.op != MPI_SUCCESS {
            let msg = String::from_utf8_lossy(data).into_owned();
            r.fail(MpiError::new(
                h.op,
                format!("at target {}: {msg}", p.target),
            ));
        } else if let Some(into) = &p.into {
            // SAFETY: the origin buffer stays valid until the operation completes (MPI's
            // contract for Get & co), and it is described by `dt` and `count`.
            unsafe { into.dt.unpack(data, into.buf as *mut u8, into.count) };
        }
        if let Some(req) = p.req {
            self.coll_complete(req, h.op);
        }
    }

    // ----- the origin side -----

    /// The next request id of window `w`.
    fn rma_id(&mut self, w: MPI_Win) -> MpiResult<u64> {
        let r = self.rma(w)?;
        r.next_id += 1;
        Ok(r.next_id - 1)
    }

    /// Sends request `msg` (encoded with id `id`) to `target` and records it; `data` is a
    /// streamed Get's data receive. The batch for `target` goes first (channel order).
    #[allow(clippy::too_many_arguments)]
    fn rma_send(
        &mut self,
        w: MPI_Win,
        target: u32,
        id: u64,
        msg: Vec<u8>,
        into: Option<Fetched>,
        req: Option<MPI_Request>,
        data: Option<MPI_Request>,
    ) -> MpiResult<u64> {
        let mut msg = msg;
        // A lock not sent yet rides on this request (no batch is pending then: a batch
        // takes it when made).
        self.rma(w)?.carry_lock(target, &mut msg);
        self.rma_batch_send(w, target)?;
        self.rma(w)?.sent(target);
        self.rma_transmit(w, target, id, msg, into, req, data)
    }

    /// Sends `msg` to `target` as in `rma_send`, already counted as outstanding.
    #[allow(clippy::too_many_arguments)]
    fn rma_transmit(
        &mut self,
        w: MPI_Win,
        target: u32,
        id: u64,
        msg: Vec<u8>,
        into: Option<Fetched>,
        req: Option<MPI_Request>,
        data: Option<MPI_Request>,
    ) -> MpiResult<u64> {
        let r = self.rma(w)?;
        let route = r.route.clone();
        // The heap buffer stays where it is when the vector moves into `pending`.
        let bytes = (msg.as_ptr(), msg.len());
        let streamed = wire::streamed(&msg);
        r.pending.insert(
            id,
            Pending {
                target,
                into,
                req,
                _msg: msg,
                data,
                streamed,
            },
        );
        if data.is_some() {
            r.streams.push(id);
        }
        if let Err(e) = am::send_kept(self, &route, target, bytes) {
            let r = self.rma(w)?;
            r.pending.remove(&id);
            r.streams.retain(|&s| s != id);
            r.answered(target);
            return Err(e);
        }
        Ok(id)
    }

    /// Adds a request message of `len` bytes, written by `fill`, to the batch for `t`
    /// (sending the batch first if it would not fit).
    fn rma_batch_add(
        &mut self,
        w: MPI_Win,
        t: u32,
        len: usize,
        fill: impl FnOnce(&mut Vec<u8>),
    ) -> MpiResult<()> {
        let full = self.rma(w)?.batches[t as usize]
            .as_ref()
            .is_some_and(|b| b.msg.len() + 8 + len > BATCH_MAX);
        if full {
            self.rma_batch_send(w, t)?;
        }
        let r = self.rma(w)?;
        if r.batches[t as usize].is_none() {
            let id = r.next_id;
            r.next_id += 1;
            let head = Head {
                kind: Kind::Batch,
                op: 0,
                basic: MPI_DATATYPE_NULL,
                id,
                disp: 0,
            };
            let mut msg = wire::encode(&head, &[], (8 + len).max(4096));
            // A lock not sent yet travels in the batch: every other message to `t`
            // sends the batch first, so it still goes ahead of them.
            r.carry_lock(t, &mut msg);
            r.batches[t as usize] = Some(Batch { id, msg });
            r.batched += 1;
            // Counted from now: flushes see it and send it.
            r.sent(t);
        }
        let b = r.batches[t as usize].as_mut().expect("made above");
        let at = b.msg.len();
        b.msg.extend_from_slice(&[0; 8]);
        fill(&mut b.msg);
        let n = (b.msg.len() - at - 8) as u64;
        b.msg[at..at + 8].copy_from_slice(&n.to_ne_bytes());
        Ok(())
    }

    /// Sends the batch for `t`, if any.
    fn rma_batch_send(&mut self, w: MPI_Win, t: u32) -> MpiResult<()> {
        let r = self.rma(w)?;
        let Some(b) = r.batches[t as usize].take() else {
            return Ok(());
        };
        r.batched -= 1;
        self.rma_transmit(w, t, b.id, b.msg, None, None, None)
            .map(|_| ())
    }

    fn rma_notice(&mut self, w: MPI_Win, target: u32, kind: Kind) -> MpiResult<()> {
        self.rma_batch_send(w, target)?;
        let route = self.rma(w)?.route.clone();
        let h = Head {
            kind,
            op: 0,
            basic: MPI_DATATYPE_NULL,
            id: 0,
            disp: 0,
        };
        am::send(self, &route, target, &[&wire::encode(&h, &[], 0)])
    }

    fn rank_check(&mut self, w: MPI_Win, rank: i32) -> MpiResult<Option<u32>> {
        let n = self.rma(w)?.sizes.len() as i32;
        if rank == MPI_PROC_NULL {
            return Ok(None);
        }
        if !(0..n).contains(&rank) {
            return Err(crate::mpi_err!(
                MPI_ERR_RANK,
                "invalid target rank {rank} in a window of {n} processes"
            ));
        }
        Ok(Some(rank as u32))
    }

    fn rma_datatype(&mut self, dt: MPI_Datatype, count: i64) -> MpiResult<Arc<Datatype>> {
        if count < 0 {
            return Err(crate::mpi_err!(MPI_ERR_COUNT, "negative count {count}"));
        }
        self.comm_datatype(dt)
    }

    /// The datatype of an origin or result buffer, checked against the target side's
    /// `tbytes` (MPI_ERR_TYPE when the sizes differ) and for a usable buffer.
    fn local_side(
        &mut self,
        buf: usize,
        count: i64,
        dt: MPI_Datatype,
        tbytes: usize,
        what: &str,
    ) -> MpiResult<Arc<Datatype>> {
        let t = self.rma_datatype(dt, count)?;
        if t.size * count as usize != tbytes {
            return Err(crate::mpi_err!(
                MPI_ERR_TYPE,
                "{what} ({} bytes) does not match the target datatype ({tbytes} bytes)",
                t.size * count as usize
            ));
        }
        t.check_buffer(buf as *const u8, count as u64)?;
        Ok(t)
    }

    /// One RMA operation; with `request`, a request completed by its Reply (MPI_Rput &
    /// co), else MPI_REQUEST_NULL.
    pub fn rma_call(&mut self, w: MPI_Win, c: Call, request: bool) -> MpiResult<MPI_Request> {
        let comm = self.objects.wins.get(w)?.comm;
        let Some(t) = self.rank_check(w, c.target)? else {
            return Ok(if request {
                self.p2p.new_done_send(comm)
            } else {
                MPI_REQUEST_NULL
            });
        };
        {
            let r = self.rma(w)?;
            let open = r.fence
                || r.lock_all.is_some()
                || r.locks.contains_key(&t)
                || r.started.as_ref().is_some_and(|g| g.contains(&t));
            if !open {
                return Err(sync_err(format!(
                    "RMA operation on target {t} outside an access epoch (call MPI_Win_fence, MPI_Win_lock, MPI_Win_lock_all or MPI_Win_start first)"
                )));
            }
        }
        let tdt = self.rma_datatype(c.tdt, c.tcount)?;
        view::learn_builtin(c.tdt, &tdt);
        let runs = tdt.flatten(c.tcount as usize);
        let tbytes = apply::bytes(&runs);
        let (flavor, (size, unit)) = {
            let flavor = self.objects.wins.get(w)?.attrs.flavor;
            (flavor, self.rma(w)?.sizes[t as usize])
        };
        if flavor != MPI_WIN_FLAVOR_DYNAMIC {
            let region = Exposed::Region {
                base: 0,
                size,
                disp_unit: unit,
            };
            apply::locate(&region, c.disp, &runs)?;
        }
        let accumulates = matches!(c.kind, Kind::Acc | Kind::GetAcc | Kind::Cas);
        let basic = if accumulates {
            basic_type(c.tdt, &tdt).unwrap_or(MPI_DATATYPE_NULL)
        } else {
            MPI_DATATYPE_NULL
        };
        if matches!(c.kind, Kind::Acc | Kind::GetAcc) {
            if !crate::coll::op::is_predefined(c.op) {
                return Err(crate::mpi_err!(
                    MPI_ERR_OP,
                    "RMA accumulate needs a predefined operation, not {:#x}",
                    c.op as u32
                ));
            }
            if c.kind == Kind::Acc && c.op == MPI_NO_OP {
                return Err(MpiError::new(
                    MPI_ERR_OP,
                    "MPI_NO_OP is only for MPI_Get_accumulate and MPI_Fetch_and_op",
                ));
            }
            // Refuse an operation the type does not support here, not at the target
            // (MPICH lets zero elements through whatever the type).
            if tbytes > 0 {
                apply::check_op(c.op, basic)?;
            }
        }
        let skip_origin = c.kind == Kind::GetAcc && c.op == MPI_NO_OP;
        let origin = match (c.origin, skip_origin) {
            (Some((buf, count, dt)), false) => {
                let odt = self.local_side(buf, count, dt, tbytes, "origin data")?;
                Some((buf, count as usize, odt))
            }
            _ => None,
        };
        let into = match c.result {
            Some((buf, count, dt)) => {
                let rdt = self.local_side(buf, count, dt, tbytes, "result buffer")?;
                Some(Fetched {
                    buf,
                    count: count as usize,
                    dt: rdt,
                })
            }
            None => None,
        };
        let compare = c.compare.map(|cmp| {
            // SAFETY: the compare buffer holds one element of the (predefined) type, as
            // many bytes as the target datatype.
            unsafe { std::slice::from_raw_parts(cmp as *const u8, tbytes) }
        });
        let d = Direct {
            kind: c.kind,
            op: c.op,
            basic,
            disp: c.disp,
            origin: origin.as_ref(),
            compare,
            into: into.as_ref(),
        };
        let by_message = matches!(self.rma(w)?.reach[t as usize], Reach::Messages);
        if !by_message && self.rma_direct(w, t, &d, &runs)? {
            return Ok(if request {
                self.p2p.new_done_send(comm)
            } else {
                MPI_REQUEST_NULL
            });
        }
        // Batched requests need no id (the batch has one).
        let len = origin.as_ref().map_or(0, |_| tbytes) + compare.map_or(0, <[u8]>::len);
        let mlen = wire::len(runs.len(), len);
        let batched = matches!(c.kind, Kind::Put | Kind::Acc)
            && mlen <= BATCH_OP_MAX
            && tbytes <= STREAM_PUT_MIN;
        let id = if batched { 0 } else { self.rma_id(w)? };
        let mut head = Head {
            kind: c.kind,
            op: if matches!(c.kind, Kind::Put | Kind::Get) {
                0
            } else {
                c.op
            },
            basic,
            id,
            disp: c.disp,
        };
        match (c.kind, &origin, &into) {
            (Kind::Get, _, Some(f)) if tbytes >= STREAM_GET_MIN => {
                let route = self.rma(w)?.route.clone();
                // The data lands in the result buffer by a receive posted now.
                let tag = wire::stream_tag(id, true);
                let dst = crate::p2p::request::Target::User {
                    buf: crate::p2p::request::Ptr(f.buf as *mut u8),
                    count: f.count,
                    dt: f.dt.clone(),
                };
                let recv = am::post_stream(self, &route, t, tag, dst)?;
                head.op = tag;
                let req = request.then(|| self.p2p.new_request(comm, true));
                let m = wire::encode(&head, &runs, 0);
                if let Err(e) = self.rma_send(w, t, id, m, None, req, Some(recv)) {
                    am::withdraw(self, recv);
                    return Err(e);
                }
                return Ok(req.unwrap_or(MPI_REQUEST_NULL));
            }
            (Kind::Put | Kind::Acc, Some((buf, count, odt)), _) if tbytes > STREAM_PUT_MIN => {
                let route = self.rma(w)?.route.clone();
                // The request, then the data from the origin buffer (MPI keeps it unchanged
                // until the operation completes, which the target's answer says). A Put
                // names the tag in `op`; an accumulate keeps its op there and is AccStream.
                let tag = wire::stream_tag(id, false);
                if c.kind == Kind::Put {
                    head.op = tag;
                } else {
                    head.kind = Kind::AccStream;
                }
                let data = crate::p2p::request::Source::User {
                    buf: crate::p2p::request::Ptr(*buf as *mut u8),
                    count: *count,
                    dt: odt.clone(),
                };
                let req = request.then(|| self.p2p.new_request(comm, false));
                let m = wire::encode(&head, &runs, 0);
                self.rma_send(w, t, id, m, None, req, None)?;
                if let Err(e) = am::send_stream(self, &route, t, tag, data) {
                    // Nothing will answer the request now.
                    let r = self.rma(w)?;
                    if r.pending.remove(&id).is_some() {
                        r.answered(t);
                    }
                    return Err(e);
                }
                return Ok(req.unwrap_or(MPI_REQUEST_NULL));
            }
            _ => {}
        }
        // The data is packed once, straight after the header.
        let fill = |m: &mut Vec<u8>| {
            wire::encode_into(m, &head, &runs);
            if let Some((buf, count, odt)) = &origin {
                // SAFETY: the caller's origin buffer holds `count` elements of `odt`.
                unsafe { odt.pack(*buf as *const u8, *count, m) };
            }
            if let Some(cmp) = compare {
                m.extend_from_slice(cmp);
            }
        };
        if batched {
            // Into the batch for `t`: the data is copied, so a request (MPI_Rput,
            // MPI_Raccumulate: local completion) is complete now.
            self.rma_batch_add(w, t, mlen, fill)?;
            return Ok(if request {
                self.p2p.new_done_send(comm)
            } else {
                MPI_REQUEST_NULL
            });
        }
        let mut m = Vec::with_capacity(mlen);
        fill(&mut m);
        let req = request.then(|| self.p2p.new_request(comm, into.is_some()));
        self.rma_send(w, t, id, m, into, req, None)?;
        Ok(req.unwrap_or(MPI_REQUEST_NULL))
    }

    /// The operation `d` on target `t` by direct access when `t` is reached so; false:
    /// send it as a message instead. Checks were done by the caller.
    fn rma_direct(
        &mut self,
        w: MPI_Win,
        t: u32,
        d: &Direct,
        runs: &[(isize, usize)],
    ) -> MpiResult<bool> {
        let reach = self.reach(w, t)?;
        let (size, unit) = self.rma(w)?.sizes[t as usize];
        let tbytes = apply::bytes(runs);
        let region = |base| Exposed::Region {
            base,
            size,
            disp_unit: unit,
        };
        // The origin data as bytes, packed only when not contiguous.
        let packed;
        let src: &[u8] = match d.origin {
            Some((buf, count, odt)) if odt.is_contiguous() => {
                // SAFETY: the caller's origin buffer holds `count` elements of `odt`: its
                // `tbytes` bytes start at the true lower bound.
                unsafe {
                    std::slice::from_raw_parts(
                        (*buf as *const u8).wrapping_offset(odt.true_lb()),
                        tbytes.min(odt.size() * count),
                    )
                }
            }
            Some((buf, count, odt)) => {
                let mut v = Vec::with_capacity(tbytes);
                // SAFETY: as above.
                unsafe { odt.pack(*buf as *const u8, *count, &mut v) };
                packed = v;
                &packed
            }
            None => &[],
        };
        match reach {
            Reach::Mapped { base, lock } => {
                let addr = apply::locate(&region(base), d.disp, runs)?;
                // SAFETY: `locate` checked the runs against the target's window memory,
                // which is mapped here while the window lives; MPI's epoch rules make this
                // access legal now; accumulates hold the target's accumulate lock.
                unsafe {
                    let old = match d.kind {
                        Kind::Put => {
                            apply::scatter(addr, runs, src);
                            return Ok(true);
                        }
                        Kind::Get => {
                            let f = d.into.expect("Get has a result buffer");
                            if f.dt.is_contiguous() {
                                let dst = std::slice::from_raw_parts_mut(
                                    (f.buf as *mut u8).wrapping_offset(f.dt.true_lb()),
                                    tbytes,
                                );
                                direct::gather_into(addr, runs, dst);
                                return Ok(true);
                            }
                            apply::gather(addr, runs)
                        }
                        Kind::Acc | Kind::GetAcc => {
                            let atomic = apply::use_atomics(addr, runs, d.basic);
                            let _g = direct::lock(lock, atomic);
                            let fetch = d.into.is_some();
                            apply::accumulate(addr, runs, d.op, d.basic, src, fetch, atomic)?
                        }
                        Kind::Cas => {
                            let mut both = src.to_vec();
                            both.extend_from_slice(d.compare.unwrap_or_default());
                            let atomic = apply::use_atomics(addr, runs, d.basic);
                            let _g = direct::lock(lock, atomic);
                            apply::compare_and_swap(addr, runs, d.basic, &both, atomic)?
                        }
                        _ => return Ok(false),
                    };
                    if let Some(f) = d.into {
                        f.dt.unpack(&old, f.buf as *mut u8, f.count);
                    }
                }
                Ok(true)
            }
            Reach::Cma { pid, base } if matches!(d.kind, Kind::Put | Kind::Get) => {
                let addr = apply::locate(&region(base), d.disp, runs)?;
                let mut buf = Vec::new();
                let local = match (d.kind, d.into) {
                    (Kind::Put, _) => src.as_ptr() as *mut u8,
                    (_, Some(f)) if f.dt.is_contiguous() => {
                        (f.buf as *mut u8).wrapping_offset(f.dt.true_lb())
                    }
                    _ => {
                        buf.resize(tbytes, 0);
                        buf.as_mut_ptr()
                    }
                };
                // SAFETY: `local` holds `tbytes` bytes (the origin data, the contiguous
                // result buffer or `buf`), written only for Get.
                let done = unsafe { direct::cma(pid, addr, runs, local, d.kind == Kind::Put) };
                match done {
                    Ok(()) => {
                        if let (Kind::Get, Some(f), false) = (d.kind, d.into, buf.is_empty()) {
                            // SAFETY: the result buffer holds `count` elements of its type.
                            unsafe { f.dt.unpack(&buf, f.buf as *mut u8, f.count) };
                        }
                        Ok(true)
                    }
                    Err(e) if crate::transport::shm::cma::is_unavailable(&e) => {
                        // Not allowed here (ptrace scope): messages from now on.
                        self.rma(w)?.reach[t as usize] = Reach::Messages;
                        Ok(false)
                    }
                    Err(e) => Err(crate::mpi_err!(
                        MPI_ERR_RMA_RANGE,
                        "direct access to target {t}'s window memory failed: {e}"
                    )),
                }
            }
            _ => Ok(false),
        }
    }

    // ----- synchronization -----

    fn lock_request(&mut self, w: MPI_Win, t: u32, kind: Kind, ty: i32) -> MpiResult<u64> {
        let h = Head {
            kind,
            op: ty,
            basic: MPI_DATATYPE_NULL,
            id: self.rma_id(w)?,
            disp: 0,
        };
        self.rma_send(w, t, h.id, wire::encode(&h, &[], 0), None, None, None)
    }

    /// Window ranks of the members of `group` (world ranks).
    fn group_ranks(&mut self, w: MPI_Win, group: MPI_Group) -> MpiResult<Vec<u32>> {
        let g = self.objects.groups.get(group)?;
        let peers = self.rma(w)?.route.peers.clone();
        g.iter()
            .map(|&p| {
                crate::objects::group::rank_of(&peers, p)
                    .map(|r| r as u32)
                    .ok_or_else(|| {
                        MpiError::new(MPI_ERR_GROUP, "group member is not in the window's group")
                    })
            })
            .collect()
    }

    pub fn rma_post(&mut self, w: MPI_Win, group: MPI_Group, assert: i32) -> MpiResult<()> {
        let ranks = self.group_ranks(w, group)?;
        let r = self.rma(w)?;
        if r.posted.is_some() {
            return Err(sync_err("MPI_Win_post while an exposure epoch is open"));
        }
        r.posted = Some(ranks.len());
        if assert & MPI_MODE_NOCHECK == 0 {
            for t in ranks {
                self.rma_notice(w, t, Kind::Post)?;
            }
        }
        Ok(())
    }
}

/// Window operations that wait: they let the state lock go meanwhile (see
/// `state::Held::wait_until`).
impl state::Held {
    /// Sets up RMA on a window just registered (collective over its communicator):
    /// learns every rank's memory size and unit, and posts the standing receive.
    pub fn rma_init(&mut self, w: MPI_Win) -> MpiResult<()> {
        let (comm, size, unit) = {
            let win = self.objects.wins.get(w)?;
            (win.comm, win.attrs.size, win.attrs.disp_unit)
        };
        let c = self.objects.comms.get(comm)?;
        let route = Route {
            comm,
            ctx: c.context_id,
            me: c.rank as i32,
            peers: c.peers().clone(),
        };
        let win = self.objects.wins.get(w)?;
        let (flavor, base) = (win.attrs.flavor, win.base);
        // This process's shared file (MPI_Win_allocate): (fd, length, lock offset).
        let file = match (&win.shared, flavor) {
            (Some(m), MPI_WIN_FLAVOR_ALLOCATE) => (m.fd(), m.len, m.locks),
            _ => (-1, 0, 0),
        };
        let shared_parts = match (&win.shared, flavor) {
            (Some(m), MPI_WIN_FLAVOR_SHARED) => Some(
                (0..m.parts.len())
                    .map(|r| Reach::Mapped {
                        base: m.base + m.parts[r].0,
                        lock: m.lock_of(r),
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        };
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let mine: Vec<u8> = [
            size,
            i64::from(unit),
            i64::from(pid),
            i64::from(file.0),
            file.1 as i64,
            file.2 as i64,
            base as i64,
        ]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
        let all = self.allgather_fixed(comm, &mine)?;
        let rows: Vec<[i64; 7]> = all
            .chunks_exact(56)
            .map(|c| {
                std::array::from_fn(|i| {
                    i64::from_ne_bytes(c[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
                })
            })
            .collect();
        let sizes: Vec<(i64, i64)> = rows.iter().map(|r| (r[0], r[1])).collect();
        let n = sizes.len();
        let me = route.me as usize;
        let own_lock = match (&shared_parts, file.0) {
            (Some(parts), _) => match parts[me] {
                Reach::Mapped { lock, .. } => lock,
                _ => 0,
            },
            (None, fd) if fd >= 0 => base + file.2,
            _ => 0,
        };
        let direct_on = crate::runtime::config::get::<u32>("FERRITE_RMA_DIRECT") != 0;
        let cma_on = crate::runtime::config::get::<u32>("FERRITE_SHM_CMA") != 0;
        let reach: Vec<Reach> = (0..n)
            .map(|r| {
                let row = &rows[r];
                if !direct_on || flavor == MPI_WIN_FLAVOR_DYNAMIC {
                    Reach::Messages
                } else if let Some(parts) = &shared_parts {
                    parts[r]
                } else if r == me {
                    Reach::Mapped {
                        base,
                        lock: own_lock,
                    }
                } else if !self.net.via_shm(route.peers[r]) || row[0] == 0 {
                    Reach::Messages
                } else if row[3] >= 0 {
                    Reach::File {
                        pid: row[2] as i32,
                        fd: row[3] as i32,
                        len: row[4] as usize,
                        lock: row[5] as usize,
                    }
                } else if cma_on {
                    Reach::Cma {
                        pid: row[2] as i32,
                        base: row[6] as usize,
                    }
                } else {
                    Reach::Messages
                }
            })
            .collect();
        let recv = am::post(self, &route)?;
        self.objects.wins.get_mut(w)?.rma = Some(WinRma {
            route,
            recv,
            sizes,
            next_id: 1,
            pending: HashMap::new(),
            outstanding: vec![0; n],
            failed: None,
            fence: false,
            locks: Locks::default(),
            lock_all: None,
            started: None,
            posts: vec![0; n],
            excl: None,
            shared: 0,
            queue: VecDeque::new(),
            posted: None,
            completes: 0,
            reach,
            own_lock,
            maps: Vec::new(),
            lock_slot: vec![0; n],
            idle_flushes: 0,
            view: None,
            msg_lock: vec![MsgLock::Off; n],
            batches: (0..n).map(|_| None).collect(),
            batched: 0,
            streams: Vec::new(),
            incoming: Vec::new(),
            held: VecDeque::new(),
            spare: Vec::new(),
        });
        self.objects.wins.active.push(w);
        self.rma_lock_slots(w)?;
        self.rma_publish(w)
    }

    /// Publishes the window's view for the fast path (view.rs) once every target's reach
    /// is settled (`rma_lock_slots` mapped the peers' files).
    fn rma_publish(&mut self, w: MPI_Win) -> MpiResult<()> {
        let r = self.rma(w)?;
        let targets: Vec<view::TargetInit> = r
            .reach
            .iter()
            .zip(&r.sizes)
            .map(|(reach, &(size, unit))| match *reach {
                Reach::Mapped { base, lock } => (base, lock, size, unit),
                _ => (0, 0, size, unit),
            })
            .collect();
        r.view = view::publish(w, &targets);
        Ok(())
    }

    /// Decides (collectively) which targets' passive-target locks live in shared memory:
    /// those that every process of the window maps with a lock slot. Same-host origins then
    /// lock by `direct::epoch` without the target; a target with any origin that cannot
    /// reach its memory (another host, a namespace without shm, a refused mapping) keeps
    /// the target-granted lock by messages for every origin, so the two kinds never meet
    /// on one target. Maps peers' files now (not on first access) so the answer is known.
    fn rma_lock_slots(&mut self, w: MPI_Win) -> MpiResult<()> {
        let n = self.rma(w)?.sizes.len();
        let comm = self.objects.wins.get(w)?.comm;
        let mut bits = vec![0u8; n.div_ceil(8)];
        for t in 0..n {
            if let Reach::Mapped { lock, .. } = self.reach(w, t as u32)? {
                if lock != 0 {
                    bits[t / 8] |= 1 << (t % 8);
                }
            }
        }
        let all = self.allgather_fixed(comm, &bits)?;
        let r = self.rma(w)?;
        for t in 0..n {
            let everyone = all
                .chunks_exact(bits.len())
                .all(|b| b[t / 8] & (1 << (t % 8)) != 0);
            if let (true, Reach::Mapped { lock, .. }) = (everyone, r.reach[t]) {
                r.lock_slot[t] = lock;
            }
        }
        Ok(())
    }

    /// Before MPI_Win_free: every epoch must be over (MPI 4.1 12.2.5).
    pub fn rma_free_check(&mut self, w: MPI_Win) -> MpiResult<()> {
        let r = self.rma(w)?;
        if !r.locks.is_empty() || r.lock_all.is_some() {
            return Err(sync_err(
                "MPI_Win_free with a passive-target epoch open (call MPI_Win_unlock first)",
            ));
        }
        if r.started.is_some() || r.posted.is_some() {
            return Err(sync_err(
                "MPI_Win_free with a PSCW epoch open (call MPI_Win_complete / MPI_Win_wait first)",
            ));
        }
        self.rma_wait(w, None)
    }

    /// Waits until every request to `target` (all targets if None) is answered, then
    /// raises an error a target answered with.
    fn rma_wait(&mut self, w: MPI_Win, target: Option<u32>) -> MpiResult<()> {
        // Direct accesses are done; order them before what follows (the unlock or
        // completion message, the fence's barrier).
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let n = self.rma(w)?.batches.len() as u32;
        let mut sent = Ok(());
        for t in target.map_or(0..n, |t| t..t + 1) {
            if let Err(e) = self.rma_batch_send(w, t) {
                sent = Err(e);
            }
        }
        sent?;
        self.wait_until(|st| match st.rma(w) {
            Ok(r) => match target {
                Some(t) => r.outstanding[t as usize] == 0,
                None => r.outstanding.iter().all(|&n| n == 0),
            },
            Err(_) => true,
        })?;
        self.rma(w)?.take_failed()
    }

    /// MPI_Win_fence: completes this process's operations, then a barrier (so every
    /// operation on this window's memory is done when it returns).
    pub fn rma_fence(&mut self, w: MPI_Win, assert: i32) -> MpiResult<()> {
        let r = self.rma(w)?;
        if !r.locks.is_empty() || r.lock_all.is_some() || r.started.is_some() {
            return Err(sync_err("MPI_Win_fence inside a lock or PSCW access epoch"));
        }
        let comm = self.objects.wins.get(w)?.comm;
        let done = self.rma_wait(w, None);
        self.allgather_fixed(comm, &[0])?;
        let r = self.rma(w)?;
        r.fence = assert & MPI_MODE_NOSUCCEED == 0;
        r.sync_view(None);
        done
    }

    fn wait_ids(&mut self, w: MPI_Win, ids: &[u64]) -> MpiResult<()> {
        self.wait_until(|st| {
            st.rma(w)
                .map_or(true, |r| ids.iter().all(|id| !r.pending.contains_key(id)))
        })?;
        self.rma(w)?.take_failed()
    }

    pub fn rma_lock(&mut self, w: MPI_Win, ty: i32, rank: i32, assert: i32) -> MpiResult<()> {
        if ty != MPI_LOCK_SHARED && ty != MPI_LOCK_EXCLUSIVE {
            return Err(crate::mpi_err!(MPI_ERR_LOCKTYPE, "invalid lock type {ty}"));
        }
        let Some(t) = self.rank_check(w, rank)? else {
            return Ok(());
        };
        let r = self.rma(w)?;
        if r.locks.contains_key(&t) || r.lock_all.is_some() {
            return Err(sync_err(format!(
                "target {t} is already locked by this process"
            )));
        }
        if r.started.is_some() {
            return Err(sync_err("MPI_Win_lock inside a PSCW access epoch"));
        }
        let nocheck = assert & MPI_MODE_NOCHECK != 0;
        let excl = ty == MPI_LOCK_EXCLUSIVE;
        if !nocheck {
            let slot = self.rma(w)?.lock_slot[t as usize];
            if slot != 0 {
                self.epoch_lock(slot, excl)?;
            } else if self.rma(w)?.lazy_lock(t) {
                self.rma(w)?.msg_lock[t as usize] = MsgLock::Wanted(ty);
            } else {
                let id = self.lock_request(w, t, Kind::Lock, ty)?;
                self.wait_ids(w, &[id])?;
                self.rma(w)?.msg_lock[t as usize] = MsgLock::Sent;
            }
        }
        let r = self.rma(w)?;
        r.locks.insert(t, Held { nocheck, excl });
        r.sync_view(Some(t));
        Ok(())
    }

    /// Takes the same-host passive-target lock at `slot`: a place in its queue, then sleeps
    /// in the kernel until served, without the state lock; between naps (growing to 16 ms)
    /// one progress pass, so requests others sent this process meanwhile (it may be a
    /// target, or hold what they wait for) are still served.
    fn epoch_lock(&mut self, slot: usize, excl: bool) -> MpiResult<()> {
        let me = direct::epoch::ticket(slot);
        let mut nap = 1;
        let mut spins = 0;
        loop {
            let seen = match direct::epoch::try_take(slot, me, excl) {
                Ok(()) => return Ok(()),
                Err(seen) => seen,
            };
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            self.pause(|| direct::epoch::sleep(slot, seen, nap))?;
            self.progress();
            nap = (nap * 2).min(16);
        }
    }

    pub fn rma_unlock(&mut self, w: MPI_Win, rank: i32) -> MpiResult<()> {
        let Some(t) = self.rank_check(w, rank)? else {
            return Ok(());
        };
        let Some(held) = self.rma(w)?.locks.get(&t).copied() else {
            return Err(sync_err(format!(
                "MPI_Win_unlock: target {t} is not locked by this process"
            )));
        };
        let done = self.rma_unlock_msgs(w, Some(t));
        if !held.nocheck {
            let slot = self.rma(w)?.lock_slot[t as usize];
            if slot != 0 {
                direct::epoch::release(slot, held.excl);
            }
        }
        let r = self.rma(w)?;
        r.locks.remove(&t);
        r.sync_view(Some(t));
        done
    }

    pub fn rma_lock_all(&mut self, w: MPI_Win, assert: i32) -> MpiResult<()> {
        let r = self.rma(w)?;
        if !r.locks.is_empty() || r.lock_all.is_some() || r.started.is_some() {
            return Err(sync_err("MPI_Win_lock_all inside another access epoch"));
        }
        let n = r.sizes.len() as u32;
        let nocheck = assert & MPI_MODE_NOCHECK != 0;
        if !nocheck {
            let slots = self.rma(w)?.lock_slot.clone();
            let mut ids = Vec::with_capacity(n as usize);
            // Targets by messages are not contacted now (MsgLock::Wanted): only those the
            // epoch sends something to ever see a Lock.
            for t in 0..n {
                if slots[t as usize] != 0 {
                    continue;
                }
                let r = self.rma(w)?;
                if r.lazy_lock(t) {
                    r.msg_lock[t as usize] = MsgLock::Wanted(MPI_LOCK_SHARED);
                } else {
                    ids.push(self.lock_request(w, t, Kind::Lock, MPI_LOCK_SHARED)?);
                    self.rma(w)?.msg_lock[t as usize] = MsgLock::Sent;
                }
            }
            // Same-host locks in rank order (as every lock_all takes them).
            for &slot in slots.iter().filter(|&&s| s != 0) {
                self.epoch_lock(slot, false)?;
            }
            self.wait_ids(w, &ids)?;
        }
        let r = self.rma(w)?;
        r.lock_all = Some(Held {
            nocheck,
            excl: false,
        });
        r.sync_view(Some(0));
        Ok(())
    }

    pub fn rma_unlock_all(&mut self, w: MPI_Win) -> MpiResult<()> {
        let r = self.rma(w)?;
        let Some(held) = r.lock_all else {
            return Err(sync_err("MPI_Win_unlock_all without MPI_Win_lock_all"));
        };
        let done = self.rma_unlock_msgs(w, None);
        if !held.nocheck {
            let slots = self.rma(w)?.lock_slot.clone();
            for slot in slots.into_iter().filter(|&s| s != 0) {
                direct::epoch::release(slot, false);
            }
        }
        let r = self.rma(w)?;
        r.lock_all = None;
        r.sync_view(Some(0));
        done
    }

    /// Completes the operations to `target` (all if None) and releases the locks by
    /// messages this process holds there, in one round trip: the batch and the Unlock go
    /// together and the target answers the Unlock only after everything before it (one
    /// channel, served in order). Streamed data may still be moving at the target when it
    /// serves the Unlock, so those are waited for first. A lock never sent (nothing went to
    /// that target in the epoch) sends nothing.
    fn rma_unlock_msgs(&mut self, w: MPI_Win, target: Option<u32>) -> MpiResult<()> {
        let r = self.rma(w)?;
        let streaming = r
            .pending
            .values()
            .any(|p| p.streamed && target.is_none_or(|t| p.target == t));
        let mut done = if streaming {
            self.rma_wait(w, target)
        } else {
            Ok(())
        };
        let n = self.rma(w)?.sizes.len() as u32;
        for t in target.map_or(0..n, |t| t..t + 1) {
            let r = self.rma(w)?;
            let was = std::mem::replace(&mut r.msg_lock[t as usize], MsgLock::Off);
            if was != MsgLock::Sent {
                continue;
            }
            // The last entry of a batch still to go (its Reply answers both), else a request.
            let sent = if r.batches[t as usize].is_some() {
                let h = Head {
                    kind: Kind::Unlock,
                    op: 0,
                    basic: MPI_DATATYPE_NULL,
                    id: 0,
                    disp: 0,
                };
                self.rma_batch_add(w, t, wire::len(0, 0), |m| wire::encode_into(m, &h, &[]))
            } else {
                self.lock_request(w, t, Kind::Unlock, 0).map(|_| ())
            };
            if let Err(e) = sent {
                done = done.and(Err(e));
            }
        }
        let d = self.rma_wait(w, target);
        done.and(d)
    }

    /// MPI_Win_flush(_local)(_all): remote completion of the operations to `rank` (all
    /// if None); only inside a passive-target epoch.
    pub fn rma_flush(&mut self, w: MPI_Win, rank: Option<i32>) -> MpiResult<()> {
        // The common case in one look at the window: a passive epoch on a valid target with
        // nothing sent by message; direct operations are complete already.
        if let Ok(r) = self.rma(w) {
            let epoch = |t: u32| r.lock_all.is_some() || r.locks.contains_key(&t);
            let quiet = match rank {
                Some(t) => usize::try_from(t).is_ok_and(|t| {
                    t < r.outstanding.len() && r.outstanding[t] == 0 && epoch(t as u32)
                }),
                None => {
                    (r.lock_all.is_some() || !r.locks.is_empty())
                        && r.outstanding.iter().all(|&n| n == 0)
                }
            };
            if quiet {
                // Now and then one pass of the progress engine (see IDLE_FLUSH_PROGRESS).
                // With a view, fast::flush counted and sent this one here for its pass (or
                // for an error to raise).
                r.idle_flushes = r.idle_flushes.wrapping_add(1);
                if r.view.is_none() && !r.idle_flushes.is_multiple_of(IDLE_FLUSH_PROGRESS) {
                    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                    return r.take_failed();
                }
                self.progress();
                return self.rma_wait(w, rank.map(|t| t as u32));
            }
        }
        let target = match rank {
            Some(r) => match self.rank_check(w, r)? {
                Some(t) => Some(t),
                None => return Ok(()),
            },
            None => None,
        };
        let r = self.rma(w)?;
        let passive = r.lock_all.is_some()
            || match target {
                Some(t) => r.locks.contains_key(&t),
                None => !r.locks.is_empty(),
            };
        if !passive {
            return Err(sync_err(
                "MPI_Win_flush outside a passive-target epoch (MPI_Win_lock or MPI_Win_lock_all)",
            ));
        }
        let idle = match target {
            Some(t) => r.outstanding[t as usize] == 0,
            None => r.outstanding.iter().all(|&n| n == 0),
        };
        if idle {
            // A flush to itself or of direct operations (passive epoch checked above): one
            // pass of the progress engine (see IDLE_FLUSH_PROGRESS).
            self.progress();
        }
        self.rma_wait(w, target)
    }

    pub fn rma_start(&mut self, w: MPI_Win, group: MPI_Group, assert: i32) -> MpiResult<()> {
        let ranks = self.group_ranks(w, group)?;
        let r = self.rma(w)?;
        if r.started.is_some() || !r.locks.is_empty() || r.lock_all.is_some() {
            return Err(sync_err("MPI_Win_start while an access epoch is open"));
        }
        if assert & MPI_MODE_NOCHECK == 0 {
            self.wait_until(|st| {
                st.rma(w)
                    .map_or(true, |r| ranks.iter().all(|&t| r.posts[t as usize] > 0))
            })?;
            let r = self.rma(w)?;
            for &t in &ranks {
                r.posts[t as usize] -= 1;
            }
        }
        let r = self.rma(w)?;
        r.started = Some(ranks);
        r.sync_view(None);
        Ok(())
    }

    pub fn rma_complete(&mut self, w: MPI_Win) -> MpiResult<()> {
        let r = self.rma(w)?;
        let Some(ranks) = r.started.take() else {
            return Err(sync_err("MPI_Win_complete without MPI_Win_start"));
        };
        r.sync_view(None);
        let mut done = Ok(());
        for &t in &ranks {
            let d = self.rma_wait(w, Some(t));
            if done.is_ok() {
                done = d;
            }
        }
        for t in ranks {
            self.rma_notice(w, t, Kind::Complete)?;
        }
        done
    }

    /// MPI_Win_wait (`block`) or MPI_Win_test: whether every origin has completed.
    pub fn rma_wait_post(&mut self, w: MPI_Win, block: bool) -> MpiResult<bool> {
        let Some(k) = self.rma(w)?.posted else {
            return Err(sync_err("MPI_Win_wait/MPI_Win_test without MPI_Win_post"));
        };
        let k = k as u32;
        if block {
            self.wait_until(|st| st.rma(w).map_or(true, |r| r.completes >= k))?;
        } else {
            self.progress();
        }
        let r = self.rma(w)?;
        if r.completes < k {
            return Ok(false);
        }
        r.completes -= k;
        r.posted = None;
        Ok(true)
    }
}

fn lock_free(r: &WinRma, ty: i32) -> bool {
    r.excl.is_none() && (ty == MPI_LOCK_SHARED || r.shared == 0)
}

fn take_lock(r: &mut WinRma, origin: u32, ty: i32) {
    if ty == MPI_LOCK_EXCLUSIVE {
        r.excl = Some(origin);
    } else {
        r.shared += 1;
    }
}
