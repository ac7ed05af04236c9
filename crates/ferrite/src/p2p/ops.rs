//! MPI-level point-to-point operations on the whole state: argument checks, communicator
//! and datatype lookup, then the protocols. Used by the C entry points (abi/p2p.rs,
//! abi/request.rs) and by collectives and communicator creation through the internal API:
//!
//! - `coll_send(comm, dest, tag, &[u8])`, `coll_recv(comm, src, tag) -> Vec<u8>`: blocking;
//! - `coll_isend(comm, dest, tag, Vec<u8>)`, `coll_irecv(comm, src, tag)`: nonblocking, give
//!   an internal request; `coll_isend_buf`/`coll_irecv_buf` do the same on user buffers with
//!   a datatype;
//! - `coll_sendrecv(comm, dest, sendtag, &[u8], src, recvtag) -> Vec<u8>`: blocking exchange;
//! - `req_test(req) -> bool` (no progress), `req_wait(req) -> (Status, Vec<u8>)`: completes
//!   and releases an internal request (the vector holds what `coll_irecv` received);
//!   `req_wait_all(&[req])` does that for several.
//!
//! All of these use the communicator's collective context (`context_id + 1`), so they never
//! match user point-to-point traffic; ranks are ranks in the communicator; any tag value is
//! allowed (collectives may use their own tag space).

use super::protocol::{P2p, RecvNow, DONE_SEND};
use super::request::{Mode, Op, Ptr, RecvOp, RecvStage, Source, Spec, Target};
use super::status::Status;
use crate::consts::*;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::datatype::Datatype;
use crate::state::{Ferrite, Held};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest tag value (the value of the MPI_TAG_UB attribute).
pub const TAG_UB: i32 = i32::MAX;

/// Which context of a communicator an operation uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    P2p,
    Coll,
}

impl Ferrite {
    fn comm_ctx(&self, comm: MPI_Comm, which: Ctx) -> MpiResult<(u32, i32, Arc<[u32]>)> {
        let c = self.objects.comms.get(comm)?;
        let ctx = match which {
            Ctx::P2p => c.context_id,
            Ctx::Coll => c.context_id + 1,
        };
        Ok((ctx, c.rank as i32, c.peers().clone()))
    }

    /// A datatype usable for communication (valid and committed).
    pub fn comm_datatype(&mut self, dt: MPI_Datatype) -> MpiResult<Arc<Datatype>> {
        let d = self.objects.datatypes.get(dt)?;
        if !d.committed {
            return Err(crate::mpi_err!(
                MPI_ERR_TYPE,
                "datatype {:#x} is not committed (call MPI_Type_commit)",
                dt as u32
            ));
        }
        Ok(d)
    }

    fn check_buffer(
        &mut self,
        buf: *const u8,
        count: i64,
        dt: MPI_Datatype,
    ) -> MpiResult<Arc<Datatype>> {
        if count < 0 {
            return Err(crate::mpi_err!(MPI_ERR_COUNT, "negative count {count}"));
        }
        // No data of no type: MPICH accepts MPI_DATATYPE_NULL with a zero count in
        // point-to-point calls, and programs rely on it (MPICH's part/nonblocking_pready).
        let dt = if count == 0 && dt == MPI_DATATYPE_NULL {
            MPI_BYTE
        } else {
            dt
        };
        let d = self.comm_datatype(dt)?;
        d.check_buffer(buf, count as u64)?;
        Ok(d)
    }

    /// Checks a send's arguments and resolves them into what MPI_Start needs.
    #[allow(clippy::too_many_arguments)]
    pub fn send_spec(
        &mut self,
        buf: *const u8,
        count: i64,
        dt: MPI_Datatype,
        dest: i32,
        tag: i32,
        comm: MPI_Comm,
        mode: Mode,
    ) -> MpiResult<Spec> {
        let (ctx, me, group) = self.comm_ctx(comm, Ctx::P2p)?;
        let d = self.check_buffer(buf, count, dt)?;
        if !(0..=TAG_UB).contains(&tag) {
            return Err(crate::mpi_err!(
                MPI_ERR_TAG,
                "invalid tag {tag} for a send (valid: 0..={TAG_UB})"
            ));
        }
        let dest = send_rank(dest, &group)?;
        Ok(Spec::Send {
            mode,
            ctx,
            me,
            dest,
            tag,
            src: Source::User {
                buf: Ptr(buf as *mut u8),
                count: count as usize,
                dt: d,
            },
        })
    }

    /// MPI_Send's fast path: a contiguous message that fits one packet, to a peer with
    /// nothing queued, goes straight to the transport with no request. `Ok(false)` (nothing
    /// done) sends the caller down the general path, which also reports invalid ranks and
    /// tags; the checks made here fail exactly as they would there.
    pub fn send_eager_now(
        &mut self,
        buf: *const u8,
        count: i64,
        dt: MPI_Datatype,
        dest: i32,
        tag: i32,
        comm: MPI_Comm,
    ) -> MpiResult<bool> {
        // An invalid communicator goes down the general path, which reports it.
        let Some(c) = self.objects.comms.find(comm) else {
            return Ok(false);
        };
        let (ctx, me) = (c.context_id, c.rank as i32);
        let Some(&to) = usize::try_from(dest).ok().and_then(|d| c.peers().get(d)) else {
            return Ok(false);
        };
        if !(0..=TAG_UB).contains(&tag) || count < 0 || (buf.is_null() && count > 0) {
            return Ok(false);
        }
        // Predefined basic types need no table lookup.
        let (size, lb) = match builtin_size(dt) {
            Some(size) => (size, 0),
            None => {
                let d = self.check_buffer(buf, count, dt)?;
                if !d.is_contiguous() {
                    return Ok(false);
                }
                (d.size(), d.true_lb())
            }
        };
        let len = size * count as usize;
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: MPI's contract for a blocking send: `buf` holds `count` elements of
            // the contiguous type, i.e. `len` bytes from its true lower bound; they are only
            // read, during this call.
            unsafe { std::slice::from_raw_parts(buf.wrapping_offset(lb), len) }
        };
        let Ferrite { p2p, net, .. } = self;
        if !p2p.send_eager_now(net, ctx, me, to, tag, data)? {
            return Ok(false);
        }
        self.take_net_error(comm)?;
        Ok(true)
    }

    /// Checks a receive's arguments and resolves them into what MPI_Start needs.
    pub fn recv_spec(
        &mut self,
        buf: *mut u8,
        count: i64,
        dt: MPI_Datatype,
        src: i32,
        tag: i32,
        comm: MPI_Comm,
    ) -> MpiResult<Spec> {
        let (ctx, target) = self.recv_args(buf, count, dt, src, tag, comm)?;
        Ok(Spec::Recv {
            ctx,
            src,
            tag,
            target,
        })
    }

    /// MPI_Irecv: [`Self::recv_spec`] and a receive without a `Spec` in between, as a
    /// waiter unless a request is needed (`P2p::irecv`; one per message in a window of
    /// receives).
    pub fn irecv(
        &mut self,
        buf: *mut u8,
        count: i64,
        dt: MPI_Datatype,
        src: i32,
        tag: i32,
        comm: MPI_Comm,
    ) -> MpiResult<MPI_Request> {
        let (ctx, target) = self.recv_args(buf, count, dt, src, tag, comm)?;
        let h = self.p2p.irecv(comm, ctx, src, tag, target);
        self.p2p.flush(&mut self.net);
        Ok(h)
    }

    /// A receive's checked arguments: its context id and target. Inlined into its callers so
    /// that the common receive (a predefined type, valid tag and source) costs one
    /// communicator lookup and a few compares, with no result copied out; anything else
    /// takes [`Self::recv_args_checked`], which reports the first error.
    #[inline(always)]
    fn recv_args(
        &mut self,
        buf: *mut u8,
        count: i64,
        dt: MPI_Datatype,
        src: i32,
        tag: i32,
        comm: MPI_Comm,
    ) -> MpiResult<(u32, Target)> {
        if let Some(c) = self.objects.comms.find(comm) {
            // Predefined basic types need no datatype object (the checks are check_buffer's).
            if let Some(len) = builtin_bytes(buf, count, dt) {
                if recv_tag_ok(tag) && recv_rank_ok(src, c.peers().len()) {
                    return Ok((c.context_id, Target::Bytes { buf: Ptr(buf), len }));
                }
            }
        }
        self.recv_args_checked(buf, count, dt, src, tag, comm)
    }

    /// [`Self::recv_args`] with every check in order (communicator, buffer and datatype,
    /// tag, source): the way errors are found and the path of user datatypes.
    #[inline(never)]
    fn recv_args_checked(
        &mut self,
        buf: *mut u8,
        count: i64,
        dt: MPI_Datatype,
        src: i32,
        tag: i32,
        comm: MPI_Comm,
    ) -> MpiResult<(u32, Target)> {
        let c = self.objects.comms.get(comm)?;
        let (ctx, size) = (c.context_id, c.peers().len());
        let target = match builtin_bytes(buf, count, dt) {
            Some(len) => Target::Bytes { buf: Ptr(buf), len },
            None => Target::User {
                buf: Ptr(buf),
                count: count as usize,
                dt: self.check_buffer(buf, count, dt)?,
            },
        };
        check_recv_tag(tag)?;
        check_recv_rank(src, size)?;
        Ok((ctx, target))
    }

    /// Checks a probe's arguments: (context, source, tag).
    pub fn probe_args(&mut self, src: i32, tag: i32, comm: MPI_Comm) -> MpiResult<(u32, i32, i32)> {
        let (ctx, _, group) = self.comm_ctx(comm, Ctx::P2p)?;
        check_recv_tag(tag)?;
        check_recv_rank(src, group.len())?;
        Ok((ctx, src, tag))
    }

    /// Starts `spec` on request `h`.
    pub fn start_spec(&mut self, h: MPI_Request, spec: &Spec) -> MpiResult<()> {
        match spec {
            Spec::Send {
                mode,
                ctx,
                me,
                dest,
                tag,
                src,
            } => {
                let Ferrite { p2p, net, .. } = self;
                if *mode == Mode::Buffered && dest.is_some() {
                    // The data goes out through a background request; the user's completes.
                    let comm = p2p.reqs.get(h).map_or(MPI_COMM_WORLD, |r| r.comm);
                    let bg = p2p.new_request(comm, false);
                    if let Some(r) = p2p.reqs.get_mut(bg) {
                        r.background = true;
                    }
                    let res = p2p.start_send(net, bg, *mode, *ctx, *me, *dest, *tag, src);
                    if res.is_err() {
                        p2p.reqs.remove(bg);
                    }
                    res?;
                    p2p.start_send(net, h, Mode::Standard, *ctx, *me, None, *tag, src)?;
                    if let Some(r) = p2p.reqs.get_mut(h) {
                        r.status = Status::default();
                    }
                } else {
                    p2p.start_send(net, h, *mode, *ctx, *me, *dest, *tag, src)?;
                }
                self.p2p.flush(&mut self.net);
            }
            Spec::Recv {
                ctx,
                src,
                tag,
                target,
            } => {
                self.p2p.start_recv(h, *ctx, *src, *tag, target.clone());
                self.p2p.flush(&mut self.net);
            }
            Spec::Coll => self.coll_start_persistent(h)?,
        }
        Ok(())
    }

    /// A new (nonpersistent) request running `spec`.
    pub fn start_new(&mut self, comm: MPI_Comm, spec: &Spec) -> MpiResult<MPI_Request> {
        let h = self
            .p2p
            .new_request(comm, matches!(spec, Spec::Recv { .. }));
        if let Err(e) = self.start_spec(h, spec) {
            self.p2p.reqs.remove(h);
            return Err(e);
        }
        Ok(h)
    }

    /// MPI_Isendrecv: one request over a receive and a send (started in that order, so two
    /// processes exchanging with each other cannot deadlock).
    pub fn start_pair(
        &mut self,
        comm: MPI_Comm,
        send: &Spec,
        recv: &Spec,
    ) -> MpiResult<MPI_Request> {
        let p = self.p2p.new_pair(comm);
        let r = self.p2p.new_child(p, true);
        if let Err(e) = self.start_spec(r, recv) {
            self.p2p.reqs.remove(r);
            self.p2p.reqs.remove(p);
            return Err(e);
        }
        let s = self.p2p.new_child(p, false);
        if let Err(e) = self.start_spec(s, send) {
            self.p2p.reqs.remove(s);
            self.p2p.cancel(r);
            self.p2p.reqs.remove(r);
            self.p2p.reqs.remove(p);
            return Err(e);
        }
        Ok(p)
    }

    /// A persistent request for `spec`, inactive until MPI_Start.
    pub fn persistent(&mut self, comm: MPI_Comm, spec: Spec) -> MPI_Request {
        let h = self
            .p2p
            .new_request(comm, matches!(spec, Spec::Recv { .. }));
        if let Some(r) = self.p2p.reqs.get_mut(h) {
            r.persistent = Some(Box::new(spec));
            r.active = false;
            r.done = true;
        }
        h
    }

    /// MPI_Start on a persistent request.
    pub fn start_persistent(&mut self, h: MPI_Request) -> MpiResult<()> {
        if h == DONE_SEND || self.p2p.waiter_state(h).is_some() {
            return Err(not_persistent(h));
        }
        let r = self.p2p.reqs.get(h).ok_or_else(|| invalid_request(h))?;
        let Some(spec) = r.persistent.clone() else {
            return Err(not_persistent(h));
        };
        if r.active {
            return Err(crate::mpi_err!(
                MPI_ERR_REQUEST,
                "persistent request {:#x} is already active",
                h as u32
            ));
        }
        if let Some(r) = self.p2p.reqs.get_mut(h) {
            r.active = true;
        }
        if self.part_start(h) {
            return Ok(());
        }
        let res = self.start_spec(h, &spec);
        if res.is_err() {
            if let Some(r) = self.p2p.reqs.get_mut(h) {
                r.active = false;
                r.done = true;
            }
        }
        res
    }

    /// Receives posted for a peer found dead (by rank, not MPI_ANY_SOURCE) complete with
    /// MPI_ERR_PROC_ABORTED naming it; a message it sent before dying would have matched
    /// already, since packets are delivered before failures are reported.
    pub fn fail_receives_from_dead(&mut self) {
        let Ferrite { p2p, objects, .. } = self;
        let mut victims = Vec::new();
        for (h, r) in p2p.reqs.iter() {
            let Op::Recv(RecvOp {
                src,
                stage: RecvStage::Posted,
                ..
            }) = &r.op
            else {
                continue;
            };
            let world = usize::try_from(*src)
                .ok()
                .and_then(|s| Some(*objects.comms.get(r.comm).ok()?.peers().get(s)?));
            if let Some(why) = world.and_then(|w| p2p.dead.get(&w)) {
                victims.push((h, *src, why.clone()));
            }
        }
        for (h, comm, src) in p2p.posted_waiters() {
            let world = usize::try_from(src)
                .ok()
                .and_then(|s| Some(*objects.comms.get(comm).ok()?.peers().get(s)?));
            if let Some(why) = world.and_then(|w| p2p.dead.get(&w)) {
                victims.push((h, src, why.clone()));
            }
        }
        for (h, src, why) in victims {
            p2p.fail_posted(h, src, &format!("receive from rank {src}: {why}"));
        }
    }

    /// A network failure found while progressing, raised on `comm`.
    fn take_net_error(&mut self, comm: MPI_Comm) -> MpiResult<()> {
        match self.p2p.error.take() {
            Some(e) => Err(e.on(ErrObj::Comm(comm))),
            None => Ok(()),
        }
    }

    /// Hands back a completed request's status and releases it: a nonpersistent request
    /// leaves the table, a persistent one becomes inactive. Returns (status, received data,
    /// still allocated).
    pub fn release(&mut self, h: MPI_Request) -> (Status, Option<Vec<u8>>, bool) {
        let (st, _, received, kept) = self.release_in(h);
        (st, received, kept)
    }

    /// [`Self::release`] for the completion calls: (status, the communicator errors raise
    /// on, still allocated), from one table lookup.
    pub fn release_user(&mut self, h: MPI_Request) -> (Status, MPI_Comm, bool) {
        let (st, comm, _, kept) = self.release_in(h);
        (st, comm, kept)
    }

    #[inline]
    fn release_in(&mut self, h: MPI_Request) -> (Status, MPI_Comm, Option<Vec<u8>>, bool) {
        if P2p::is_waiter(h) {
            return self.release_waiter(h);
        }
        let Some(r) = self.p2p.reqs.get_mut(h) else {
            return (Self::unlisted_status(h), MPI_COMM_WORLD, None, false);
        };
        let comm = r.comm;
        let mut st = r.status;
        if let Some(part) = r.part.as_ref().filter(|_| st.tag != MPI_ANY_TAG) {
            st.tag = part.tag; // the user's, not the one on the wire
        }
        if r.persistent.is_some() {
            r.active = false;
            r.op = Op::Idle;
            return (st, comm, r.received.take(), true);
        }
        let received = r.received.take();
        // Dropped in place: moving the whole request out of the table costs more than
        // the rest of a small message's release.
        self.p2p.reqs.free(h);
        (st, comm, received, false)
    }

    /// [`Self::release_in`] of a waiter (MPI_Irecv's), or of the request it became.
    fn release_waiter(&mut self, h: MPI_Request) -> (Status, MPI_Comm, Option<Vec<u8>>, bool) {
        match self.p2p.take_user_waiter(h) {
            Some((comm, Ok(st))) => (st, comm, None, false),
            Some((comm, Err(r))) => {
                let (st, _, received, _) = self.release_in(r);
                (st, comm, received, false)
            }
            None => (Self::unlisted_status(h), MPI_COMM_WORLD, None, false),
        }
    }

    /// The status of a request handle the table does not hold: a completed send's for
    /// [`DONE_SEND`], else the empty status.
    fn unlisted_status(h: MPI_Request) -> Status {
        if h == DONE_SEND {
            Status::default()
        } else {
            super::protocol::empty_status()
        }
    }

    /// A completed request's status and communicator, left as it is (MPI_Request_get_status).
    pub fn request_status(&self, h: MPI_Request) -> (Status, MPI_Comm) {
        match self.p2p.reqs.get(h) {
            Some(r) => (r.status, r.comm),
            None => self
                .p2p
                .waiter_status(h)
                .unwrap_or((Self::unlisted_status(h), MPI_COMM_WORLD)),
        }
    }

    /// The communicator a request's or waiter's errors raise on.
    pub fn request_comm(&self, h: MPI_Request) -> MPI_Comm {
        match self.p2p.reqs.get(h) {
            Some(r) => r.comm,
            None => self.p2p.waiter_status(h).map_or(MPI_COMM_WORLD, |x| x.1),
        }
    }

    // ----- internal API for collectives and communicator creation -----

    fn coll_dest(&self, comm: MPI_Comm, rank: i32) -> MpiResult<(u32, i32, u32)> {
        let (ctx, me, group) = self.comm_ctx(comm, Ctx::Coll)?;
        let to = *group
            .get(rank as usize)
            .filter(|_| rank >= 0)
            .ok_or_else(|| {
                crate::mpi_err!(
                    MPI_ERR_RANK,
                    "invalid rank {rank} in a communicator of size {}",
                    group.len()
                )
            })?;
        Ok((ctx, me, to))
    }

    /// Nonblocking internal send of `data` on `comm`'s collective context.
    pub fn coll_isend(
        &mut self,
        comm: MPI_Comm,
        dest: i32,
        tag: i32,
        data: Vec<u8>,
    ) -> MpiResult<MPI_Request> {
        let (ctx, me, to) = self.coll_dest(comm, dest)?;
        let spec = Spec::Send {
            mode: Mode::Standard,
            ctx,
            me,
            dest: Some(to),
            tag,
            src: Source::Owned(data.into()),
        };
        self.start_new(comm, &spec)
    }

    /// Nonblocking internal receive of a message of any length (its bytes come back from
    /// `req_wait`) on `comm`'s collective context. `src` may be MPI_ANY_SOURCE.
    pub fn coll_irecv(&mut self, comm: MPI_Comm, src: i32, tag: i32) -> MpiResult<MPI_Request> {
        let (ctx, _, group) = self.comm_ctx(comm, Ctx::Coll)?;
        check_recv_rank(src, group.len())?;
        let spec = Spec::Recv {
            ctx,
            src,
            tag,
            target: Target::Owned(Vec::new()),
        };
        self.start_new(comm, &spec)
    }

    /// Nonblocking internal send of `count` elements of `dt` at `buf`.
    ///
    /// # Safety
    /// The memory stays valid and unmodified until the request completes.
    pub unsafe fn coll_isend_buf(
        &mut self,
        comm: MPI_Comm,
        dest: i32,
        tag: i32,
        buf: *const u8,
        count: usize,
        dt: MPI_Datatype,
    ) -> MpiResult<MPI_Request> {
        let (ctx, me, to) = self.coll_dest(comm, dest)?;
        let dt = self.comm_datatype(dt)?;
        let spec = Spec::Send {
            mode: Mode::Standard,
            ctx,
            me,
            dest: Some(to),
            tag,
            src: Source::User {
                buf: Ptr(buf as *mut u8),
                count,
                dt,
            },
        };
        self.start_new(comm, &spec)
    }

    /// Nonblocking internal receive into `count` elements of `dt` at `buf`.
    ///
    /// # Safety
    /// The memory stays valid and untouched by others until the request completes.
    pub unsafe fn coll_irecv_buf(
        &mut self,
        comm: MPI_Comm,
        src: i32,
        tag: i32,
        buf: *mut u8,
        count: usize,
        dt: MPI_Datatype,
    ) -> MpiResult<MPI_Request> {
        let (ctx, _, group) = self.comm_ctx(comm, Ctx::Coll)?;
        check_recv_rank(src, group.len())?;
        let dt = self.comm_datatype(dt)?;
        let spec = Spec::Recv {
            ctx,
            src,
            tag,
            target: Target::User {
                buf: Ptr(buf),
                count,
                dt,
            },
        };
        self.start_new(comm, &spec)
    }

    /// True when the internal request has completed (call `progress` or `req_wait` to move).
    pub fn req_test(&self, h: MPI_Request) -> bool {
        self.p2p.is_done(h)
    }

    /// Completion check for MPI_Wait & co: progresses, and if the request is done returns
    /// the network error (if any) on its communicator.
    pub fn check_net(&mut self, comm: MPI_Comm) -> MpiResult<()> {
        self.take_net_error(comm)
    }
}

/// Blocking internal communication: waits let the state lock go (see `Held::wait_until`).
impl Held {
    /// Before a buffered send of `len` packed bytes into the attached buffer: when room is
    /// missing only because earlier buffered sends still hold their blocks (rendezvous data
    /// the receiver has not taken yet, or whose acknowledgement is on its way), waits while
    /// those blocks keep coming free. Programs size the buffer assuming their earlier
    /// messages have left (MPICH's threads/pt2pt/mt_ibsendirecv_huge sizes it for one round
    /// of sends); a buffer too small for good gives up after a second in which no block was
    /// freed, and the send then fails with MPI_ERR_BUFFER as before.
    pub fn bsend_room(&mut self, len: usize) -> MpiResult<()> {
        loop {
            let held = match self.p2p.attached.as_ref() {
                Some(a) if a.in_use() && !a.fits(len) => a.blocks(),
                _ => return Ok(()),
            };
            let give_up = Instant::now() + Duration::from_secs(1);
            self.wait_until(|st| {
                st.p2p
                    .attached
                    .as_ref()
                    .is_none_or(|a| a.fits(len) || a.blocks() < held)
                    || Instant::now() >= give_up
            })?;
            if self
                .p2p
                .attached
                .as_ref()
                .is_some_and(|a| !a.fits(len) && a.blocks() >= held)
            {
                return Ok(());
            }
        }
    }

    /// MPI_Recv: the status of the message received into `buf` (its MPI_ERROR set on
    /// truncation). No request unless the message comes by rendezvous (`P2p::recv_now`).
    pub fn recv_blocking(
        &mut self,
        buf: *mut u8,
        count: i64,
        dt: MPI_Datatype,
        src: i32,
        tag: i32,
        comm: MPI_Comm,
    ) -> MpiResult<Status> {
        let (ctx, target) = self.recv_args(buf, count, dt, src, tag, comm)?;
        if src == MPI_PROC_NULL {
            return Ok(super::protocol::proc_null_status());
        }
        let Ferrite { p2p, net, .. } = &mut **self;
        let now = p2p.recv_now(comm, ctx, src, tag, target);
        p2p.flush(net);
        let h = match now {
            RecvNow::Done(st) => {
                self.take_net_error(comm)?;
                return Ok(st);
            }
            RecvNow::Request(h) => h,
            RecvNow::Waiter(w) => {
                self.wait_until(|st| st.p2p.waiter_done(w))?;
                match self.p2p.take_waiter(w) {
                    Ok(st) => {
                        self.take_net_error(comm)?;
                        return Ok(st);
                    }
                    Err(h) => h,
                }
            }
        };
        self.wait_until(|st| st.p2p.is_done(h))?;
        self.take_net_error(comm)?;
        Ok(self.release(h).0)
    }

    /// Waits for an internal request and releases it: its status (MPI_ERROR set on
    /// truncation) and, for `coll_irecv`, the bytes received.
    pub fn req_wait(&mut self, h: MPI_Request) -> MpiResult<(Status, Vec<u8>)> {
        self.wait_until(|st| st.p2p.is_done(h))?;
        let comm = self.p2p.reqs.get(h).map_or(MPI_COMM_WORLD, |r| r.comm);
        self.take_net_error(comm)?;
        let (st, data, _) = self.release(h);
        Ok((st, data.unwrap_or_default()))
    }

    /// Blocking internal send on `comm`'s collective context.
    pub fn coll_send(&mut self, comm: MPI_Comm, dest: i32, tag: i32, data: &[u8]) -> MpiResult<()> {
        let h = self.coll_isend(comm, dest, tag, data.to_vec())?;
        self.req_wait(h).map(|_| ())
    }

    /// Blocking internal receive on `comm`'s collective context: the whole message.
    pub fn coll_recv(&mut self, comm: MPI_Comm, src: i32, tag: i32) -> MpiResult<Vec<u8>> {
        let h = self.coll_irecv(comm, src, tag)?;
        self.req_wait(h).map(|(_, d)| d)
    }

    /// Waits for every internal request of `reqs` and releases them, in order: their
    /// statuses and received bytes.
    pub fn req_wait_all(&mut self, reqs: &[MPI_Request]) -> MpiResult<Vec<(Status, Vec<u8>)>> {
        self.wait_until(|st| reqs.iter().all(|&h| st.p2p.is_done(h)))?;
        reqs.iter().map(|&h| self.req_wait(h)).collect()
    }

    /// Blocking internal exchange: sends `data` to `dest` and receives the message from
    /// `src` (receive posted first, so pairs of processes cannot deadlock).
    pub fn coll_sendrecv(
        &mut self,
        comm: MPI_Comm,
        dest: i32,
        sendtag: i32,
        data: &[u8],
        src: i32,
        recvtag: i32,
    ) -> MpiResult<Vec<u8>> {
        let r = self.coll_irecv(comm, src, recvtag)?;
        let s = self.coll_isend(comm, dest, sendtag, data.to_vec())?;
        let mut done = self.req_wait_all(&[r, s])?;
        Ok(std::mem::take(&mut done[0].1))
    }
}

/// The size of an MPICH predefined basic type from its handle alone (`0x4c00SSII`, SS the
/// size in bytes, as `objects::datatype` decodes it); such types are contiguous with a zero
/// lower bound and always committed.
fn builtin_size(dt: MPI_Datatype) -> Option<usize> {
    let u = dt as u32;
    let size = ((u >> 8) & 0xff) as usize;
    (u & 0xffff_0000 == 0x4c00_0000 && size != 0).then_some(size)
}

/// The bytes of `count` elements of a predefined basic type in a usable buffer (`count` not
/// negative, `buf` not null unless empty); `None` for anything a full check must see.
#[inline(always)]
fn builtin_bytes(buf: *mut u8, count: i64, dt: MPI_Datatype) -> Option<usize> {
    builtin_size(dt)
        .filter(|_| count >= 0 && !(buf.is_null() && count > 0))
        .and_then(|size| size.checked_mul(usize::try_from(count).ok()?))
}

pub fn invalid_request(h: MPI_Request) -> MpiError {
    crate::mpi_err!(MPI_ERR_REQUEST, "invalid request handle {:#x}", h as u32)
}

fn not_persistent(h: MPI_Request) -> MpiError {
    crate::mpi_err!(
        MPI_ERR_REQUEST,
        "request {:#x} is not a persistent request",
        h as u32
    )
}

fn send_rank(dest: i32, group: &[u32]) -> MpiResult<Option<u32>> {
    if dest == MPI_PROC_NULL {
        return Ok(None);
    }
    if dest < 0 || dest as usize >= group.len() {
        return Err(crate::mpi_err!(
            MPI_ERR_RANK,
            "invalid destination rank {dest} in a communicator of size {}",
            group.len()
        ));
    }
    Ok(Some(group[dest as usize]))
}

/// Whether `src` is a valid source in a communicator (remote group) of `size`.
#[inline]
fn recv_rank_ok(src: i32, size: usize) -> bool {
    src == MPI_PROC_NULL || src == MPI_ANY_SOURCE || (src >= 0 && (src as usize) < size)
}

/// Whether `tag` is a valid receive tag.
#[inline]
fn recv_tag_ok(tag: i32) -> bool {
    tag == MPI_ANY_TAG || (0..=TAG_UB).contains(&tag)
}

fn check_recv_rank(src: i32, size: usize) -> MpiResult<()> {
    if recv_rank_ok(src, size) {
        return Ok(());
    }
    Err(crate::mpi_err!(
        MPI_ERR_RANK,
        "invalid source rank {src} in a communicator of size {size}"
    ))
}

fn check_recv_tag(tag: i32) -> MpiResult<()> {
    if recv_tag_ok(tag) {
        return Ok(());
    }
    Err(crate::mpi_err!(
        MPI_ERR_TAG,
        "invalid tag {tag} for a receive (valid: 0..={TAG_UB} or MPI_ANY_TAG)"
    ))
}
