//! Collective operations over the communicator's collective context (`context_id + 1`),
//! built on the point-to-point layer's internal sends and receives.
//!
//! - `op`: predefined reduction kernels; `reduce`: user operations and [`reduce::Reducer`];
//! - `sched`: schedules (rounds of transfers and local steps) and their engine;
//! - `algo`: one schedule builder per algorithm; `plans`: MPI collectives -> plans;
//! - this file: the running state (nonblocking and persistent collectives, advanced by
//!   the progress engine), the blocking driver and the peer statistics.
//!
//! User reduction functions never run under the state lock: the blocking driver runs them
//! between `state::with` calls; nonblocking schedules with a user operation are built so
//! that every user step comes after the last communication, and those steps are queued
//! with `state::defer`: they run after the lock is released, before the MPI call that
//! completed the request returns to the user (or in a wait), and complete the request.

pub mod algo;
pub mod hier;
pub mod inter;
pub mod op;
pub mod plans;
pub mod reduce;
pub mod sched;
pub mod shm;
#[cfg(test)]
mod tests;

use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::fxhash::{FxHashMap, FxHasher};
use crate::state::{self, Ferrite, Held};
use sched::{Link, Plan, Poll, Run};
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

/// Collective k on a communicator uses tags TAG_BASE + space + (k mod TAG_SPAN) * 256 +
/// (0..=255): every member calls collectives in the same order, so the tags agree, and
/// consecutive collectives between the same two ranks can never match each other's
/// messages. Blocking, nonblocking and persistent collectives count in separate spaces
/// ([`Space`]), as in MPICH: a program that starts an Iallreduce on one rank and a Barrier on
/// another first (erroneous, but common) still matches each with its own kind. A persistent
/// collective takes its tag when it is initialized (MPI 4.1 section 6.13: they match in
/// initialization order), so its starts may come in any order.
/// The low byte is the transfer's own offset ([`sched::Xfer::tag`]).
/// (Communicator creation uses tags below 0x6000_0000 on the same context.)
const TAG_BASE: i32 = 0x6000_0000;
const TAG_SPAN: u32 = 0x8_0000;

/// The tag spaces of collectives (see TAG_BASE).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Space {
    Blocking = 0,
    Nonblocking = 0x0800_0000,
    Persistent = 0x1000_0000,
}

/// A running nonblocking or persistent collective.
struct Active {
    req: MPI_Request,
    comm: MPI_Comm,
    run: Run<MPI_Request>,
}

/// Collective state in [`Ferrite`].
#[derive(Default)]
pub struct Coll {
    pub ops: reduce::Ops,
    /// Collectives started per (context id, tag space) (tags, see TAG_BASE).
    seq: FxHashMap<(u32, Space), u32>,
    active: Vec<Active>,
    /// Persistent collective requests: their plan.
    persistent: HashMap<MPI_Request, (MPI_Comm, Arc<Plan>, i32)>,
    /// Distinct world ranks exchanged with by collectives since the last reset (Fx-hashed:
    /// one insertion per transfer).
    pub peers: HashSet<u32, BuildHasherDefault<FxHasher>>,
    /// The world rank last added to `peers` (cleared with it).
    pub last_peer: Option<u32>,
    /// Plans of recent blocking collectives (see [`PlanKey`]), oldest first.
    plan_cache: Vec<(PlanKey, Arc<Plan>)>,
    /// Shared-memory collectives: each communicator's segment.
    pub shm: shm::State,
    /// Two-level collectives: each communicator's levels.
    pub hier: hier::State,
}

impl Coll {
    /// Whether no nonblocking collective schedule waits for the progress engine.
    pub fn idle(&self) -> bool {
        self.active.is_empty()
    }
}

/// Blocking plans kept for reuse: a program calls the same few collectives in a loop.
const PLAN_CACHE_MAX: usize = 16;

/// Everything a blocking collective's plan is built from, so that an equal key means an
/// equal plan (building one was most of a small collective's instructions): the operation
/// and its arguments, the communicator's context, rank and size, the datatype's identity
/// (the plan holds it, so the address cannot be reused meanwhile), and the generation of the
/// FERRITE_COLL_* knobs. Only intracommunicators and predefined operations (a user
/// operation's handle may be freed and reused for another function).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PlanKey {
    kind: u8,
    comm: MPI_Comm,
    ctx: u32,
    me: u32,
    n: u32,
    count: i64,
    dt: usize,
    op: MPI_Op,
    root: i32,
    sb: usize,
    rb: usize,
    knobs: u64,
    /// Allgather: the send count and datatype identity (count/dt: the receive side).
    count2: i64,
    dt2: usize,
}

/// Which collective a [`PlanKey`] describes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Allgather,
    Gather,
    Scatter,
    Alltoall,
}

impl PlanKey {
    /// The key of a call, or None when its plan is not cached (intercommunicator, user
    /// operation, or arguments the builder will reject).
    #[allow(clippy::too_many_arguments)]
    pub fn of(
        st: &mut Ferrite,
        kind: Kind,
        comm: MPI_Comm,
        sb: *const std::os::raw::c_void,
        rb: *const std::os::raw::c_void,
        count: i64,
        dt: MPI_Datatype,
        op: MPI_Op,
        root: i32,
    ) -> Option<PlanKey> {
        let shape = PlanKey::shape(st, comm)?;
        PlanKey::of_shape(st, shape, kind, comm, sb, rb, count, dt, op, root)
    }

    /// An intracommunicator's context, rank and size (None for an intercommunicator).
    fn shape(st: &Ferrite, comm: MPI_Comm) -> Option<(u32, u32, u32)> {
        let c = st.objects.comms.get(comm).ok()?;
        if c.inter.is_some() {
            return None;
        }
        Some((c.context_id, c.rank, c.size()))
    }

    /// [`PlanKey::of`] with the communicator's [`PlanKey::shape`] already looked up.
    #[allow(clippy::too_many_arguments)]
    fn of_shape(
        st: &mut Ferrite,
        (ctx, me, n): (u32, u32, u32),
        kind: Kind,
        comm: MPI_Comm,
        sb: *const std::os::raw::c_void,
        rb: *const std::os::raw::c_void,
        count: i64,
        dt: MPI_Datatype,
        op: MPI_Op,
        root: i32,
    ) -> Option<PlanKey> {
        let dt = match kind {
            Kind::Barrier => 0,
            _ => dt_identity(st, dt)?,
        };
        if matches!(kind, Kind::Reduce | Kind::Allreduce) && !op::is_predefined(op) {
            return None;
        }
        Some(PlanKey {
            kind: kind as u8,
            comm,
            ctx,
            me,
            n,
            count,
            dt,
            op,
            root,
            sb: sb as usize,
            rb: rb as usize,
            knobs: plans::knobs_generation(),
            count2: 0,
            dt2: 0,
        })
    }

    /// The key of a blocking Allgather, Gather, Scatter or Alltoall (not the v forms): both
    /// sides, except those MPI_IN_PLACE leaves out and a non-root's receive side (Gather)
    /// or send side (Scatter), which the standard makes insignificant there.
    #[allow(clippy::too_many_arguments)]
    pub fn of_blocks(
        st: &mut Ferrite,
        kind: Kind,
        comm: MPI_Comm,
        sb: *const std::os::raw::c_void,
        sc: i64,
        sdt: MPI_Datatype,
        rb: *const std::os::raw::c_void,
        rc: i64,
        rdt: MPI_Datatype,
        root: i32,
    ) -> Option<PlanKey> {
        // (One communicator lookup for both the root test and the key.)
        let shape = PlanKey::shape(st, comm)?;
        let is_root = i64::from(shape.1) == i64::from(root);
        let send = match kind {
            Kind::Scatter => is_root,
            _ => !plans::in_place(sb),
        };
        let recv = match kind {
            Kind::Gather => is_root,
            Kind::Scatter => !plans::in_place(rb),
            _ => true,
        };
        let null = std::ptr::null();
        let (sb, rb) = (if send { sb } else { null }, if recv { rb } else { null });
        let (count, dt, second) = match (recv, send) {
            (true, s) => (rc, rdt, s.then_some((sc, sdt))),
            (false, true) => (sc, sdt, None),
            (false, false) => return None,
        };
        let mut k = PlanKey::of_shape(st, shape, kind, comm, sb, rb, count, dt, MPI_OP_NULL, root)?;
        if let Some((c2, d2)) = second {
            k.count2 = c2;
            k.dt2 = dt_identity(st, d2)?;
        }
        Some(k)
    }
}

/// A datatype's identity in a [`PlanKey`]: a predefined type's handle (it names one type
/// for good; bit 63 keeps it apart from addresses), else the address of the type the
/// handle names now (a freed handle may come back for another type). None when the handle
/// is not a committed type. Predefined handles skip the table (a third of the key's cost);
/// one that names no type gets a key whose plan never builds, so it is never cached.
fn dt_identity(st: &mut Ferrite, dt: MPI_Datatype) -> Option<usize> {
    if dt as u32 & 0xffff_0000 == 0x4c00_0000 {
        return Some(dt as u32 as usize | 1 << 63);
    }
    Some(Arc::as_ptr(&st.comm_datatype(dt).ok()?) as *const u8 as usize)
}

/// The collective context of one communicator as a schedule's [`Link`].
struct CommLink<'a> {
    st: &'a mut Ferrite,
    comm: MPI_Comm,
}

impl CommLink<'_> {
    fn note_peer(&mut self, peer: i32) {
        if let Ok(c) = self.st.objects.comms.get(self.comm) {
            if let Some(&w) = c.group.get(peer as usize) {
                // Most transfers go to the same process as the one before (all at -n 2).
                if self.st.coll.last_peer != Some(w) {
                    self.st.coll.peers.insert(w);
                    self.st.coll.last_peer = Some(w);
                }
            }
        }
    }
}

impl Link for CommLink<'_> {
    type H = MPI_Request;
    fn isend(&mut self, peer: i32, tag: i32, data: Vec<u8>) -> MpiResult<MPI_Request> {
        self.note_peer(peer);
        self.st.coll_isend(self.comm, peer, tag, data)
    }
    fn irecv(&mut self, peer: i32, tag: i32) -> MpiResult<MPI_Request> {
        self.note_peer(peer);
        self.st.coll_irecv(self.comm, peer, tag)
    }
    unsafe fn isend_at(
        &mut self,
        peer: i32,
        tag: i32,
        p: *const u8,
        len: usize,
    ) -> MpiResult<MPI_Request> {
        self.note_peer(peer);
        // SAFETY: per this function's contract.
        unsafe {
            self.st
                .coll_isend_buf(self.comm, peer, tag, p, len, MPI_BYTE)
        }
    }
    unsafe fn irecv_at(
        &mut self,
        peer: i32,
        tag: i32,
        p: *mut u8,
        len: usize,
    ) -> MpiResult<MPI_Request> {
        self.note_peer(peer);
        // SAFETY: per this function's contract.
        unsafe {
            self.st
                .coll_irecv_buf(self.comm, peer, tag, p, len, MPI_BYTE)
        }
    }
    fn test(&mut self, h: &MPI_Request) -> MpiResult<Option<(Vec<u8>, usize)>> {
        if !self.st.req_test(*h) {
            return Ok(None);
        }
        self.st.check_net(self.comm)?;
        let (status, data, _) = self.st.release(*h);
        if status.error != MPI_SUCCESS {
            return Err(MpiError::from_code(status.error));
        }
        Ok(Some((data.unwrap_or_default(), status.bytes as usize)))
    }
}

impl Ferrite {
    /// The tag of the next collective on `comm`.
    fn coll_tag(&mut self, comm: MPI_Comm, space: Space) -> MpiResult<i32> {
        let ctx = self.objects.comms.get(comm)?.context_id;
        let k = self.coll.seq.entry((ctx, space)).or_insert(0);
        let tag = TAG_BASE + space as i32 + ((*k % TAG_SPAN) << 8) as i32;
        *k = k.wrapping_add(1);
        Ok(tag)
    }

    /// Progress hook (called from `Ferrite::progress`): advances every nonblocking
    /// collective; completes the requests of those that finished. True if any finished.
    pub fn coll_progress(&mut self) -> bool {
        if self.coll.active.is_empty() {
            return false;
        }
        let mut list = std::mem::take(&mut self.coll.active);
        let mut changed = false;
        let mut keep = Vec::with_capacity(list.len());
        for mut a in list.drain(..) {
            let res = a.run.advance(&mut CommLink {
                st: self,
                comm: a.comm,
            });
            match res {
                Ok(Poll::Pending) => keep.push(a),
                Ok(Poll::Done) => {
                    // SAFETY: the user's buffers stay valid until the request completes.
                    unsafe { a.run.write_outputs() };
                    self.coll_complete(a.req, MPI_SUCCESS);
                    changed = true;
                }
                Ok(Poll::UserLocals) if !a.run.comm_remaining() => {
                    // The rest is local and calls user code: finish it after the lock is
                    // released; the request completes only then, so no thread sees it
                    // done before the outputs are written.
                    let (mut run, req) = (a.run, a.req);
                    state::defer(move || {
                        run.finish_locals();
                        // SAFETY: the user's buffers stay valid until the request completes.
                        unsafe { run.write_outputs() };
                        state::try_with(|st| st.coll_complete(req, MPI_SUCCESS));
                    });
                    changed = true;
                }
                Ok(Poll::UserLocals) => {
                    self.coll_complete(a.req, MPI_ERR_INTERN);
                    changed = true;
                }
                Err(e) => {
                    self.coll_complete(a.req, e.class);
                    changed = true;
                }
            }
        }
        // Collectives started while advancing (none today) were pushed to the new list.
        keep.append(&mut self.coll.active);
        self.coll.active = keep;
        changed
    }

    pub(crate) fn coll_complete(&mut self, h: MPI_Request, code: i32) {
        if let Some(r) = self.p2p.reqs.get_mut(h) {
            r.done = true;
            r.status = crate::p2p::protocol::empty_status();
            r.status.error = code;
            if r.freed {
                self.p2p.reqs.remove(h);
            }
        }
    }

    /// Starts a nonblocking collective: a new request running `plan`.
    fn coll_start_new(&mut self, comm: MPI_Comm, plan: Arc<Plan>) -> MpiResult<MPI_Request> {
        let h = self.p2p.new_request(comm, false);
        let tag = self.coll_tag(plan.comm.unwrap_or(comm), Space::Nonblocking)?;
        self.coll_launch(h, comm, plan, tag)?;
        Ok(h)
    }

    fn coll_launch(
        &mut self,
        h: MPI_Request,
        comm: MPI_Comm,
        plan: Arc<Plan>,
        tag: i32,
    ) -> MpiResult<()> {
        let comm = plan.comm.unwrap_or(comm);
        // SAFETY: the caller's input buffers are valid (MPI contract for the call).
        let run = unsafe { Run::start(plan, tag) };
        if let Some(r) = self.p2p.reqs.get_mut(h) {
            r.done = false;
        }
        self.coll.active.push(Active { req: h, comm, run });
        self.coll_progress();
        Ok(())
    }

    /// MPI_Start on a persistent collective request.
    pub fn coll_start_persistent(&mut self, h: MPI_Request) -> MpiResult<()> {
        let (comm, plan, tag) = self
            .coll
            .persistent
            .get(&h)
            .cloned()
            .ok_or_else(|| crate::p2p::ops::invalid_request(h))?;
        self.coll_launch(h, comm, plan, tag)
    }
}

/// How the plan of an operation will run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Blocking: user reduction functions may run between communications.
    Blocking,
    /// Nonblocking or persistent: user functions only after the last communication.
    Deferred,
}

/// Runs a blocking collective whose plan `build` makes (under the lock).
pub fn blocking(
    comm: MPI_Comm,
    build: impl FnOnce(&mut Ferrite) -> MpiResult<Plan>,
) -> MpiResult<()> {
    blocking_plan(comm, |st| Ok(Arc::new(checked(build(st))?)))
}

/// A plan just built, refused if it would read or write user memory at a null address.
fn checked(plan: MpiResult<Plan>) -> MpiResult<Plan> {
    let plan = plan?;
    plan.check_user_memory()?;
    Ok(plan)
}

/// How a blocking collective goes on once its plan is chosen under the lock.
enum Start {
    /// It ran in shared memory.
    Done,
    /// It runs in two levels, without the lock.
    Hier(Arc<hier::Levels>, Arc<Plan>),
    /// Its rounds run on this communicator.
    Rounds(Run<MPI_Request>, MPI_Comm),
}

fn blocking_plan(
    comm: MPI_Comm,
    build: impl FnOnce(&mut Ferrite) -> MpiResult<Arc<Plan>>,
) -> MpiResult<()> {
    let started = state::with_held(|st| {
        let plan = build(st)?;
        if plan.hier.is_some() {
            if let Some(lv) = st.hier_levels(comm)? {
                return Ok(Start::Hier(lv, plan));
            }
        }
        if let Some(call) = &plan.shm {
            if st.shm_run(comm, call)? {
                return Ok(Start::Done);
            }
            if plan.rounds.is_empty() && plan.inputs.is_empty() && plan.outputs.is_empty() {
                // A plan of the shared-memory form only (plans::allgather) whose segment
                // went away: cannot happen within one call, but never report success.
                return Err(MpiError::new(
                    MPI_ERR_INTERN,
                    "shared-memory collective refused",
                ));
            }
        }
        let comm = plan.comm.unwrap_or(comm);
        let tag = st.coll_tag(comm, Space::Blocking)?;
        // SAFETY: the caller's input buffers are valid for the call.
        Ok(Start::Rounds(
            unsafe { Run::<MPI_Request>::start(plan, tag) },
            comm,
        ))
    })?;
    let (mut run, comm) = match started {
        Start::Done => return Ok(()),
        Start::Hier(lv, plan) => match &plan.hier {
            Some(call) => return hier::run(&lv, call),
            None => {
                return Err(MpiError::new(
                    MPI_ERR_INTERN,
                    "two-level plan lost its call",
                ))
            }
        },
        Start::Rounds(run, comm) => (run, comm),
    };
    loop {
        let poll = state::with_held(|st| {
            let mut out = Ok(Poll::Pending);
            st.wait_until(|st| {
                out = run.advance(&mut CommLink { st, comm });
                !matches!(out, Ok(Poll::Pending))
            })?;
            out
        })?;
        match poll {
            Poll::Done => break,
            // No lock held here: user reduction functions may call MPI.
            Poll::UserLocals => run.run_user_locals(),
            Poll::Pending => {}
        }
    }
    // SAFETY: the caller's output buffers are valid for the call.
    unsafe { run.write_outputs() };
    Ok(())
}

/// Runs a blocking collective whose plan is `key`'s from an earlier call if there is one,
/// else the one `build` makes (then kept under `key`).
pub fn blocking_cached(
    comm: MPI_Comm,
    key: impl FnOnce(&mut Ferrite) -> Option<PlanKey>,
    build: impl FnOnce(&mut Ferrite) -> MpiResult<Plan>,
) -> MpiResult<()> {
    blocking_plan(comm, |st| {
        let Some(k) = key(st) else {
            return Ok(Arc::new(checked(build(st))?));
        };
        if let Some((_, p)) = st.coll.plan_cache.iter().find(|(c, _)| *c == k) {
            return Ok(p.clone());
        }
        let plan = Arc::new(checked(build(st))?);
        let cache = &mut st.coll.plan_cache;
        if cache.len() >= PLAN_CACHE_MAX {
            cache.remove(0);
        }
        cache.push((k, plan.clone()));
        Ok(plan)
    })
}

/// Starts a nonblocking collective; returns its request.
pub fn nonblocking(
    comm: MPI_Comm,
    build: impl FnOnce(&mut Ferrite) -> MpiResult<Plan>,
) -> MpiResult<MPI_Request> {
    state::with(|st| {
        let plan = checked(build(st))?;
        st.coll_start_new(comm, Arc::new(plan))
    })
}

/// Creates a persistent collective request (inactive until MPI_Start).
pub fn persistent(
    comm: MPI_Comm,
    build: impl FnOnce(&mut Ferrite) -> MpiResult<Plan>,
) -> MpiResult<MPI_Request> {
    state::with(|st| {
        let st: &mut Ferrite = st;
        let plan = checked(build(st))?;
        // Forget the plans of persistent requests freed since (MPI_Request_free removes
        // the request from the p2p table only).
        let reqs = &st.p2p.reqs;
        st.coll.persistent.retain(|&h, _| {
            reqs.get(h).is_some_and(|r| {
                matches!(
                    r.persistent.as_deref(),
                    Some(crate::p2p::request::Spec::Coll)
                )
            })
        });
        let tag = st.coll_tag(plan.comm.unwrap_or(comm), Space::Persistent)?;
        let h = st.persistent(comm, crate::p2p::request::Spec::Coll);
        st.coll.persistent.insert(h, (comm, Arc::new(plan), tag));
        Ok(h)
    })
}

/// An allgather of a few bytes per member, advanced by whoever owns it: communicator
/// creation's exchanges (blocking ones wait for it under the lock; nonblocking ones poll it
/// from the progress engine). No user code runs in it.
pub struct Gather {
    run: Run<MPI_Request>,
    comm: MPI_Comm,
    buf: usize,
    me: usize,
    n: usize,
    bs: usize,
}

impl Gather {
    /// Advances the exchange; every member's record in rank order once it is complete.
    pub fn poll(&mut self, st: &mut Ferrite) -> MpiResult<Option<Vec<u8>>> {
        let comm = self.comm;
        match self.run.advance(&mut CommLink { st, comm })? {
            Poll::Pending => Ok(None),
            Poll::UserLocals => Err(MpiError::new(MPI_ERR_INTERN, "allgather ran user code")),
            Poll::Done => {
                // Block i holds rank (me + i) % n's record: rotate into rank order.
                let (got, n, bs) = (self.run.buf(self.buf), self.n, self.bs);
                let mut all = Vec::with_capacity(n * bs);
                for r in 0..n {
                    let i = (r + n - self.me) % n;
                    all.extend_from_slice(&got[i * bs..(i + 1) * bs]);
                }
                Ok(Some(all))
            }
        }
    }
}

impl Ferrite {
    /// The tag of the next nonblocking collective on `comm` (nonblocking communicator
    /// creation counts as one, as in MPI 4.1 section 7.4.2).
    pub fn coll_tag_nonblocking(&mut self, comm: MPI_Comm) -> MpiResult<i32> {
        self.coll_tag(comm, Space::Nonblocking)
    }

    /// Starts a Bruck allgather of `mine` (the same length on every member) on `comm`'s
    /// collective context with `tag` (ceil(log2 n) rounds, at most 2 ceil(log2 n) peers per
    /// rank). Several gathers may use one tag one after another: their messages between
    /// two ranks match in order.
    pub fn start_gather(&mut self, comm: MPI_Comm, mine: &[u8], tag: i32) -> MpiResult<Gather> {
        let (me, n) = {
            let c = self.objects.comms.get(comm)?;
            (c.rank as usize, c.size() as usize)
        };
        let bs = mine.len();
        let mut plan = Plan::default();
        let b = plan.buf(n * bs);
        algo::allgather_bruck(&mut plan, me, n, sched::sl(b, 0, n * bs), bs);
        plan.inputs.push(sched::UserBuf {
            slice: sched::sl(b, 0, bs),
            ptr: mine.as_ptr() as usize,
            count: bs,
            dt: Arc::new(crate::objects::datatype::Datatype::basic(1)),
        });
        // SAFETY: the input points at `mine`, alive for this call; it is packed at start.
        let run = unsafe { Run::<MPI_Request>::start(Arc::new(plan), tag) };
        Ok(Gather {
            run,
            comm,
            buf: b,
            me,
            n,
            bs,
        })
    }
}

impl Held {
    /// Every member's `mine` (all of the same length), concatenated in rank order: used by
    /// blocking communicator creation, with the state lock let go while it waits (no user code runs), with the
    /// communicator's next blocking collective tag (creation is collective over `comm`, so
    /// every member takes the same tag).
    pub fn allgather_fixed(&mut self, comm: MPI_Comm, mine: &[u8]) -> MpiResult<Vec<u8>> {
        let tag = self.coll_tag(comm, Space::Blocking)?;
        let mut g = self.start_gather(comm, mine, tag)?;
        let mut out = Ok(None);
        self.wait_until(|st| {
            out = g.poll(st);
            !matches!(out, Ok(None))
        })?;
        Ok(out?.unwrap_or_default())
    }
}
