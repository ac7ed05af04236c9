//! Shared-memory collectives: blocking Barrier, Bcast, Reduce, Allreduce and Allgather of
//! small messages on an intracommunicator whose members all share a host, by flags and
//! copies in one segment per communicator instead of messages (Open MPI's coll/sm, MPICH's
//! release/gather).
//!
//! **Segment.** Made on the communicator's first shared-memory collective, collectively: its
//! rank 0 makes an anonymous file (memfd), every member opens it through
//! `/proc/<pid>/fd/<fd>` and maps it (as shared windows do, rma/shared.rs), and two
//! allgathers make every member agree that all of them could (else the communicator keeps
//! the message algorithms for good). It holds, per rank and parity of e, a box: a line with
//! its `arrive` counter (its contribution to collective e is written) followed by up to
//! [`INLINE`] bytes of that contribution, so one cache miss brings flag and data; per rank a
//! `done` counter (it finished reading everything of collective e) and a `waiting` word,
//! each on its own line; the root's box per parity (`release` and inline data); a
//! `sleepers` line (one bit per rank whose `waiting` word is set); six futex gates (per
//! kind of condition and parity: a `seq` word and a count of ranks asleep on it); then two broadcast
//! buffers and two slots per rank for larger contributions, and per rank and parity a spread
//! area of n slots (n blocks side by side; pages are touched only when used).
//!
//! **Sequence numbers, never reset.** Collective e of the communicator stores e in the
//! counters; a rank waits for counters >= e, so nothing is cleared between collectives and
//! a late reader of collective e sees e or more. Before writing a buffer of parity e it must
//! know that every member finished collective e-2 (`done` >= e-2): an all-to-all collective
//! (every rank arrives) proves it for e-1 (`known_done`), so only rooted ones (Bcast,
//! Reduce) may ever wait here.
//!
//! **Algorithms** (flat, for up to [`MAX_RANKS`] members): Barrier: arrive, wait for every
//! arrival, or one of the other [`BarrierForm`]s (rank 0 waits for every arrival and
//! releases the others at two ranks per CPU). Allreduce: write the input to the own slot, arrive, wait for all, and every rank
//! reduces all slots in rank order into its receive buffer (the same order everywhere, so
//! every rank gets the same bits). Reduce: the same, the root alone reduces. Allgather: every
//! rank copies every slot out; Gather: the root alone does. Bcast: the root writes the
//! broadcast buffer and raises `release`; the others copy it out; Scatter: the same with
//! every rank's block side by side in the root's spread area, each rank copying its own.
//! Alltoall: every rank writes its n blocks side by side in its spread area (n slots; in
//! its box when all fit), arrives, waits for all and copies block `me` of every area.
//!
//! **Waiting** ([`Held::shm_wait`]) goes through the shared wait loop (`Held::wait_with`,
//! progress.rs): spin (making progress on point-to-point traffic, so a rank inside a
//! collective still serves messages and RMA), yield, then sleep in the kernel in the
//! progress engine's epoll set, with the state lock let go while yielding and sleeping (other
//! threads' calls go on: the collectives run under MPI_THREAD_MULTIPLE too, one communicator
//! per thread at a time as MPI requires). Before sleeping a rank writes what it waits for
//! into its `waiting` word, sets its bit in `sleepers` and checks again; whoever then makes
//! that condition true (each rank reads `sleepers` after each counter it stores, with
//! sequentially consistent order on both sides, and then the sleepers' words) takes the
//! word back to 0 and rings the sleeper's collective doorbell (one abstract unix datagram
//! socket per process, `Net::bell_on`). A rank whose own wait ended rings the sleepers
//! still due too, so a ringer preempted by the first rank it woke does not hold up the
//! rest. The poller drains the doorbell after a sleep it ended and wakes every sleeping
//! thread, since the ring may be for any of them; a ring that arrives after its waiter saw
//! the condition on its own costs one spurious wake-up.
//!
//! That is for a process with something in flight that packets advance (requests, RMA
//! windows, file accesses...: `Ferrite::needs_no_packets`). Otherwise only the members
//! can end the wait, and the rank sleeps on the condition's futex gate instead
//! (`Pace::park`): it counts itself in, reads `seq`, checks again and FUTEX_WAITs; whoever
//! completes a condition while the count is nonzero bumps `seq` and wakes the gate's
//! sleepers with one FUTEX_WAKE (one system call for all, none on the sleepers' side but
//! their own wait; SeqCst on both sides, so either the sleeper's check sees the store or
//! the storer sees the count).

use super::reduce::Reducer;
use crate::consts::*;
use crate::error::MpiResult;
use crate::fxhash::FxHashMap;
use crate::objects::datatype::Datatype;
use crate::progress::{Pace, Phases};
use crate::state::{Ferrite, Held};
use crate::transport::shm::doorbell::{bell_addr, BellAddr, Doorbell};
use crate::transport::shm::segment::{anonymous_file, map, open_peer_file};
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// Largest communicator the flat algorithms serve (every rank reads every slot).
pub const MAX_RANKS: usize = 64;
/// Distance between counters written by different ranks (two cache lines: the adjacent-line
/// prefetcher pairs lines).
const LINE: usize = 128;
/// Bytes carried in a box's cache line after its counter.
pub const INLINE: usize = 56;

/// Byte offsets in the segment of a communicator of `n` ranks with slots of `slot` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub n: usize,
    pub slot: usize,
}

impl Layout {
    pub fn new(n: usize, max_bytes: usize) -> Layout {
        Layout {
            n,
            slot: max_bytes.max(8).div_ceil(LINE) * LINE,
        }
    }
    /// Rank r's box for collectives of parity `par`: its `arrive` counter, then up to
    /// [`INLINE`] bytes of data in the same cache line (one miss carries flag and data).
    pub fn boxed(&self, par: usize, r: usize) -> usize {
        (par * self.n + r) * LINE
    }
    fn done(&self, r: usize) -> usize {
        (2 * self.n + r) * LINE
    }
    fn waiting(&self, r: usize) -> usize {
        (3 * self.n + r) * LINE
    }
    /// The root's box of parity `par`: `release` and inline data.
    pub fn release(&self, par: usize) -> usize {
        (4 * self.n + par) * LINE
    }
    /// One bit per rank that announced a sleep (its `waiting` word is set): a rank that
    /// stores a counter reads this one line to learn whether anyone needs a ring.
    pub fn sleepers(&self) -> usize {
        (4 * self.n + 2) * LINE
    }
    /// The futex gate of what `u` waits for (one per kind of condition and parity): a
    /// `seq` word bumped by whoever makes such a condition true while `count` (the next
    /// word) says ranks sleep on it.
    pub fn gate(&self, u: Until) -> usize {
        let (kind, e) = match u {
            Until::Arrived(e) => (0, e),
            Until::Released(e) => (1, e),
            Until::Done(e) => (2, e),
        };
        (4 * self.n + 3 + kind * 2 + (e & 1) as usize) * LINE
    }
    fn data(&self) -> usize {
        (4 * self.n + 9) * LINE
    }
    fn bcast(&self, par: usize) -> usize {
        self.data() + par * self.slot
    }
    pub fn slot_at(&self, par: usize, r: usize) -> usize {
        self.data() + (2 + par * self.n + r) * self.slot
    }
    /// Where rank r's `len` bytes of parity `par` are: in its box when they fit.
    pub fn contribution(&self, par: usize, r: usize, len: usize) -> usize {
        if len <= INLINE {
            self.boxed(par, r) + 8
        } else {
            self.slot_at(par, r)
        }
    }
    /// Where the root's `len` bytes of parity `par` are.
    pub fn broadcast(&self, par: usize, len: usize) -> usize {
        if len <= INLINE {
            self.release(par) + 8
        } else {
            self.bcast(par)
        }
    }
    /// Rank r's area of parity `par` for n blocks side by side (its Alltoall send blocks, a
    /// Scatter root's blocks): n slots, touched only as far as used (the file is sparse).
    pub fn spread(&self, par: usize, r: usize) -> usize {
        self.data() + (2 + 2 * self.n + (par * self.n + r) * self.n) * self.slot
    }
    /// Where rank r's n blocks of `bs` bytes of parity `par` are: in its box when all fit.
    pub fn blocks(&self, par: usize, r: usize, bs: usize) -> usize {
        if self.n * bs <= INLINE {
            self.boxed(par, r) + 8
        } else {
            self.spread(par, r)
        }
    }
    /// Where a Scatter root's n blocks of `bs` bytes of parity `par` are.
    pub fn scattered(&self, par: usize, root: usize, bs: usize) -> usize {
        if self.n * bs <= INLINE {
            self.release(par) + 8
        } else {
            self.spread(par, root)
        }
    }
    pub fn total(&self) -> usize {
        self.data() + (2 + 2 * self.n + 2 * self.n * self.n) * self.slot
    }
}

/// What a waiting rank waits for (stored in its `waiting` word so that whoever makes it
/// true wakes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// Every rank's `arrive` >= e.
    Arrived(u64),
    /// `release` >= e.
    Released(u64),
    /// Every rank's `done` >= e.
    Done(u64),
}

impl Until {
    /// The nonzero word that stands for it (kind in the top byte).
    pub fn word(self) -> u64 {
        match self {
            Until::Arrived(e) => (1 << 56) | e,
            Until::Released(e) => (2 << 56) | e,
            Until::Done(e) => (3 << 56) | e,
        }
    }
    pub fn of_word(w: u64) -> Option<Until> {
        let e = w & ((1 << 56) - 1);
        match w >> 56 {
            1 => Some(Until::Arrived(e)),
            2 => Some(Until::Released(e)),
            3 => Some(Until::Done(e)),
            _ => None,
        }
    }
}

/// One communicator's mapped segment and this rank's view of it.
pub struct Seg {
    base: usize,
    lay: Layout,
    me: usize,
    /// The last collective run on it (the next is epoch + 1).
    epoch: u64,
    /// Every member is known to have finished this collective.
    known_done: u64,
    /// Each member's collective doorbell and token.
    bells: Vec<(BellAddr, u64)>,
    /// How Barrier goes (rank 0's choice, so every member agrees).
    barrier: BarrierForm,
}

impl Drop for Seg {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `total()` bytes, used by nothing after this.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.lay.total()) };
    }
}

impl Seg {
    fn word(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is an 8-aligned offset inside the mapping (Layout), which lives as
        // long as `self`; other processes only access it atomically too.
        unsafe { &*((self.base + off) as *const AtomicU64) }
    }
    fn word32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as for `word`, 4-aligned.
        unsafe { &*((self.base + off) as *const AtomicU32) }
    }
    fn ptr(&self, off: usize) -> *mut u8 {
        (self.base + off) as *mut u8
    }
    /// Wakes every rank asleep on `u`'s gate if `u` now holds (one load when none sleeps).
    fn open_gate(&self, u: Until) {
        let g = self.lay.gate(u);
        if self.word32(g + 4).load(SeqCst) == 0 || !self.holds(u) {
            return;
        }
        let seq = self.word32(g);
        seq.fetch_add(1, SeqCst);
        // SAFETY: the futex syscall on an aligned word of our shared mapping; not
        // FUTEX_PRIVATE, since the sleepers are other processes.
        unsafe { libc::syscall(libc::SYS_futex, seq.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
    }

    fn holds(&self, u: Until) -> bool {
        let n = self.lay.n;
        match u {
            Until::Arrived(e) => {
                let par = (e & 1) as usize;
                (0..n).all(|q| self.word(self.lay.boxed(par, q)).load(SeqCst) >= e)
            }
            Until::Released(e) => self.word(self.lay.release((e & 1) as usize)).load(SeqCst) >= e,
            Until::Done(e) => (0..n).all(|q| self.word(self.lay.done(q)).load(SeqCst) >= e),
        }
    }
}

/// A communicator's shared-memory state.
pub enum Slot {
    On(Box<Seg>),
    /// Not available (members on several hosts, shm not allowed, or the segment could not
    /// be made): the message algorithms run.
    Off,
}

/// The process's shared-memory collective state (in [`super::Coll`]).
#[derive(Default)]
pub struct State {
    /// By context id; removed when the communicator is freed.
    pub comms: FxHashMap<u32, Slot>,
    bell: Option<(Doorbell, u64)>,
    bell_failed: bool,
}

/// A user buffer of a shared-memory collective.
#[derive(Clone)]
pub struct Mem {
    pub ptr: usize,
    pub count: usize,
    pub dt: Arc<Datatype>,
}

impl Mem {
    /// Copies its `len` packed bytes to `dst`.
    ///
    /// # Safety
    /// The buffer holds `count` elements; `dst` has `len` writable bytes apart from it.
    pub(super) unsafe fn pack_to(&self, dst: *mut u8, len: usize) {
        if len == 0 {
            return;
        }
        let p = self.ptr as *const u8;
        if self.dt.is_contiguous() {
            // SAFETY: per the contract.
            unsafe {
                std::ptr::copy_nonoverlapping(p.wrapping_offset(self.dt.true_lb()), dst, len)
            };
        } else {
            let mut v = Vec::with_capacity(len);
            // SAFETY: per the contract.
            unsafe {
                self.dt.pack(p, self.count, &mut v);
                std::ptr::copy_nonoverlapping(v.as_ptr(), dst, len.min(v.len()));
            }
        }
    }

    /// Fills it from `len` packed bytes at `src`.
    ///
    /// # Safety
    /// The buffer holds `count` elements; `src` has `len` readable bytes apart from it.
    pub(super) unsafe fn unpack_from(&self, src: *const u8, len: usize) {
        if len == 0 {
            return;
        }
        // SAFETY: per the contract.
        unsafe {
            self.dt.unpack(
                std::slice::from_raw_parts(src, len),
                self.ptr as *mut u8,
                self.count,
            )
        };
    }

    /// The contiguous bytes of the buffer (reductions only use contiguous types).
    ///
    /// # Safety
    /// The buffer holds `len` bytes from its true lower bound, used by nothing else now.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes(&self, len: usize) -> &mut [u8] {
        // SAFETY: per the contract.
        unsafe {
            std::slice::from_raw_parts_mut(
                (self.ptr as *mut u8).wrapping_offset(self.dt.true_lb()),
                len,
            )
        }
    }
}

/// Which collective, with what it needs.
#[derive(Clone)]
pub enum Op {
    Barrier,
    Bcast {
        root: usize,
        buf: Mem,
    },
    /// `input` None: MPI_IN_PLACE at the root (its input is in `out`).
    Reduce {
        root: usize,
        input: Option<Mem>,
        out: Mem,
        red: Reducer,
    },
    Allreduce {
        input: Option<Mem>,
        out: Mem,
        red: Reducer,
    },
    /// `out[k]`: where rank k's block goes; `input` None: MPI_IN_PLACE.
    Allgather {
        input: Option<Mem>,
        out: Vec<Mem>,
    },
    /// `out[k]` (the root's; empty elsewhere): where rank k's block goes; `input` None:
    /// MPI_IN_PLACE at the root.
    Gather {
        root: usize,
        input: Option<Mem>,
        out: Vec<Mem>,
    },
    /// `input[k]` (the root's; empty elsewhere): rank k's block; `out` None: MPI_IN_PLACE
    /// at the root.
    Scatter {
        root: usize,
        input: Vec<Mem>,
        out: Option<Mem>,
    },
    /// `input[k]`/`out[k]`: the blocks to and from rank k (`input` the receive buffer's
    /// blocks for MPI_IN_PLACE: all are packed before any is overwritten).
    Alltoall {
        input: Vec<Mem>,
        out: Vec<Mem>,
    },
}

/// A blocking collective to run in shared memory (kept in its plan, [`super::sched::Plan`]).
#[derive(Clone)]
pub struct Call {
    pub op: Op,
    /// Bytes of each contribution, what must fit a slot (the message, the vector, a block).
    pub len: usize,
}

/// FERRITE_COLL_SHM_MAX: the largest contribution in shared memory (the slot size).
pub fn max_bytes() -> usize {
    super::plans::shm_max()
}

/// Ranks on this host per online CPU, rounded up (`MPI_LOCALNRANKS`, set by mpirun and
/// Hydra; 1 when unknown).
fn ranks_per_cpu() -> i64 {
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as i64;
    let local: i64 = std::env::var("MPI_LOCALNRANKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    (local.max(1) + online - 1) / online
}

/// (spin passes, yield phase) of a wait. With a CPU each, the partner answers while we
/// spin: spin up to FERRITE_PROGRESS_SPIN passes, yield 200 us, sleep. Two ranks per CPU:
/// spin 8 cheap passes, then yield 30 us with one progress pass per yield (a yield hands
/// the CPU straight to the partner), then sleep. More: spin briefly and sleep at once, since ranks that yield in a loop still
/// compete for the CPU the awaited rank needs (on 2 CPUs at -n 16 with other load, a
/// 200 us yield phase made 8-byte Allreduce and Barrier take 3-25 ms per call in some runs,
/// sleeping at once 0.1-0.7 ms; 30 us was 1.5-2x slower than none there, and 1.2-4x faster
/// than none at -n 4); there the spin is a few passes too (each is a progress pass: 96 of
/// them before every sleep were a third of a -n 16 Barrier's CPU time).
/// FERRITE_COLL_SHM_YIELD_US overrides the yield phase.
fn phases() -> Phases {
    static P: std::sync::OnceLock<Phases> = std::sync::OnceLock::new();
    *P.get_or_init(|| {
        let per_cpu = ranks_per_cpu();
        let y: i64 = crate::runtime::config::get("FERRITE_COLL_SHM_YIELD_US");
        let y = match (y, per_cpu) {
            (y, _) if y >= 0 => y as u64,
            (_, 1) => 200,
            (_, 2) => 30,
            _ => 0,
        };
        let (spin, poll_every, burst) = match per_cpu {
            1 => (
                crate::runtime::config::get::<u32>("FERRITE_PROGRESS_SPIN").max(64),
                16,
                8,
            ),
            // Cheap spins (a progress pass every 16): with a progress pass each, the spin
            // and bursts took 4-10x longer before the partner got the CPU, and -n 4
            // Barrier/Allreduce/Bcast became 2-3x slower. A short spin, then one pass per
            // yield (as Open MPI's waiters when oversubscribed): the partner sharing the
            // CPU is the likely one awaited, and a yield with nobody else runnable costs one
            // system call (spin 64 and 8 passes per yield: 1.2-2x slower, -n 4 at load 30).
            2 => (8, 16, 1),
            _ => (8, 1, 8),
        };
        Phases {
            spin,
            yield_for: Duration::from_micros(y),
            burst,
            poll_every,
        }
    })
}

/// The shared-memory Barrier's forms. Every rank stores its arrival first; then
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierForm {
    /// every rank waits for every arrival (a CPU each, or more ranks than two per CPU: -n
    /// 16 on 2 CPUs was 1-1.5x slower with rank 0 woken before the rest);
    Flat,
    /// rank 0 waits for every arrival and raises `release`, the others wait for `release`
    /// (two ranks per CPU): rank 0 leaves first, so a rooted collective after it (Bcast
    /// from 0: osu_bcast -n 4 went from 6-8 us to 0.13-0.14) finds its root already
    /// through instead of waiting for it to be scheduled;
    Release,
    /// the rank that sees every arrival after storing its own raises `release` at once, the
    /// others wait for it.
    Last,
}

impl BarrierForm {
    fn code(self) -> i64 {
        self as i64
    }
    fn of_code(c: i64) -> BarrierForm {
        match c {
            1 => BarrierForm::Release,
            2 => BarrierForm::Last,
            _ => BarrierForm::Flat,
        }
    }
}

/// This rank's Barrier form (FERRITE_COLL_BARRIER_ALGO, else by ranks per CPU).
fn barrier_form() -> BarrierForm {
    match super::plans::barrier_form() {
        Some("shm_flat") => BarrierForm::Flat,
        Some("shm_release") => BarrierForm::Release,
        Some("shm_last") => BarrierForm::Last,
        _ if ranks_per_cpu() == 2 => BarrierForm::Release,
        _ => BarrierForm::Flat,
    }
}

impl Ferrite {
    /// Whether `comm` may run shared-memory collectives (intracommunicator of 2 to
    /// [`MAX_RANKS`] members all reached over shm, not found unusable before).
    pub fn shm_coll_possible(&mut self, comm: MPI_Comm) -> bool {
        let Ok(c) = self.objects.comms.get(comm) else {
            return false;
        };
        match self.coll.shm.comms.get(&c.context_id) {
            Some(Slot::On(_)) => return true,
            Some(Slot::Off) => return false,
            None => {}
        }
        let n = c.group.len();
        c.inter.is_none()
            && (2..=MAX_RANKS).contains(&n)
            && c.group.iter().all(|&w| self.net.on_shm(w))
    }

    /// Whether `comm` has its segment and a contribution of `len` bytes fits it: then
    /// [`Ferrite::shm_run`] runs the collective for sure.
    pub fn shm_coll_ready(&self, comm: MPI_Comm, len: usize) -> bool {
        let Ok(c) = self.objects.comms.get(comm) else {
            return false;
        };
        matches!(self.coll.shm.comms.get(&c.context_id),
            Some(Slot::On(s)) if len <= s.lay.slot && s.lay.n == c.size() as usize
                && s.me == c.rank as usize)
    }

    /// Forgets a freed communicator's segment (unmapped; the memory goes with its last
    /// mapping).
    pub fn shm_coll_forget(&mut self, context_id: u32) {
        self.coll.shm.comms.remove(&context_id);
    }
}

/// Blocking set-up (an allgather among the members) needs the lock as `Held`.
impl Held {
    /// Runs `call` on `comm` in shared memory; false (nothing done) when the communicator
    /// has no segment and cannot get one, or the call does not fit its slots: every member
    /// decides the same, and the caller runs the message algorithm.
    pub fn shm_run(&mut self, comm: MPI_Comm, call: &Call) -> MpiResult<bool> {
        let (ctx, me, n) = {
            let c = self.objects.comms.get(comm)?;
            (c.context_id, c.rank as usize, c.size() as usize)
        };
        // Taken out of its entry for the call (the wait lets the lock go; the entry says
        // Off meanwhile) with one lookup, put back with another.
        let taken = (self.coll.shm.comms.get_mut(&ctx)).map(|s| std::mem::replace(s, Slot::Off));
        let mut seg = match taken {
            Some(Slot::On(s)) if s.lay.n == n && s.me == me => s,
            Some(Slot::Off) => return Ok(false),
            // (A segment of another shape would be a freed communicator's whose context
            // came back without `shm_coll_forget`: never reused.)
            Some(Slot::On(_)) | None => match self.shm_create(comm, me, n)? {
                Some(s) => s,
                None => {
                    self.coll.shm.comms.insert(ctx, Slot::Off);
                    return Ok(false);
                }
            },
        };
        let fits = call.len <= seg.lay.slot;
        // (If MPI was finalized by another thread meanwhile, the segment goes with it.)
        let done = if fits {
            self.shm_do(&mut seg, call)
        } else {
            Ok(())
        };
        match self.coll.shm.comms.get_mut(&ctx) {
            Some(s) => *s = Slot::On(seg),
            None => {
                self.coll.shm.comms.insert(ctx, Slot::On(seg));
            }
        }
        done?;
        Ok(fits)
    }
}

impl Ferrite {
    /// This process's collective doorbell, bound on first use and added to the progress
    /// engine's epoll set. None if it cannot be made.
    fn shm_bell(&mut self) -> Option<u64> {
        if let Some((_, token)) = &self.coll.shm.bell {
            return Some(*token);
        }
        if self.coll.shm.bell_failed {
            return None;
        }
        let mut t = [0u8; 8];
        // SAFETY: t is valid for 8 bytes.
        unsafe { libc::getrandom(t.as_mut_ptr().cast(), 8, 0) };
        let token = u64::from_le_bytes(t) | 1;
        let addr = bell_addr(&bell_name(std::process::id(), token), 0);
        match Doorbell::bind(&addr, token) {
            Ok(d) if self.net.bell_on(d.fd()).is_ok() => {
                self.coll.shm.bell = Some((d, token));
                Some(token)
            }
            _ => {
                self.coll.shm.bell_failed = true;
                None
            }
        }
    }
}

impl Held {
    /// Collective over `comm`: maps its segment, or None on every member if some member
    /// cannot (then nothing is left behind).
    fn shm_create(&mut self, comm: MPI_Comm, me: usize, n: usize) -> MpiResult<Option<Box<Seg>>> {
        let lay = Layout::new(n, max_bytes());
        let token = self.shm_bell();
        let mut fd = -1;
        if me == 0 && token.is_some() {
            if let Ok(f) = anonymous_file() {
                // SAFETY: `f` is our open file.
                if unsafe { libc::ftruncate(f, lay.total() as libc::off_t) } == 0 {
                    fd = f;
                } else {
                    // SAFETY: ours.
                    unsafe { libc::close(f) };
                }
            }
        }
        let pid = std::process::id() as i64;
        let mine = [
            crate::rma::shared::host_id() as i64,
            pid,
            i64::from(fd),
            token.unwrap_or(0) as i64,
            lay.slot as i64,
            barrier_form().code(),
        ];
        let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let all = self.allgather_fixed(comm, &bytes)?;
        let rows: Vec<[i64; 6]> = all
            .chunks_exact(48)
            .map(|r| {
                std::array::from_fn(|i| {
                    i64::from_ne_bytes(r[i * 8..i * 8 + 8].try_into().unwrap_or_default())
                })
            })
            .collect();
        let close_own = || {
            if fd >= 0 {
                // SAFETY: our own descriptor.
                unsafe { libc::close(fd) };
            }
        };
        let agreed = rows.len() == n
            && rows
                .iter()
                .all(|r| r[0] == rows[0][0] && r[3] != 0 && r[4] == lay.slot as i64)
            && rows[0][2] >= 0;
        if !agreed {
            close_own();
            return Ok(None);
        }
        let base = if me == 0 {
            map(fd, lay.total()).ok()
        } else {
            match open_peer_file(rows[0][1] as i32, rows[0][2] as i32) {
                Ok(Some(f)) => {
                    let m = map(f, lay.total()).ok();
                    // SAFETY: ours; the mapping keeps the memory.
                    unsafe { libc::close(f) };
                    m
                }
                _ => None,
            }
        };
        let ok = self.allgather_fixed(comm, &[u8::from(base.is_some())])?;
        close_own();
        let seg = base.map(|b| {
            Box::new(Seg {
                base: b as usize,
                lay,
                me,
                epoch: 0,
                known_done: 0,
                barrier: BarrierForm::of_code(rows[0][5]),
                bells: rows
                    .iter()
                    .map(|r| {
                        (
                            bell_addr(&bell_name(r[1] as u32, r[3] as u64), 0),
                            r[3] as u64,
                        )
                    })
                    .collect(),
            })
        });
        if ok.contains(&0) {
            return Ok(None); // dropping `seg` unmaps it
        }
        Ok(seg)
    }
}

impl Ferrite {
    /// Stores `e` in the counter at `off`, the last store `u` may need, and wakes the
    /// sleepers it satisfies: those on `u`'s futex gate at once, those rung by datagram.
    fn shm_publish(&mut self, seg: &Seg, off: usize, e: u64, u: Until) {
        seg.word(off).store(e, SeqCst);
        seg.open_gate(u);
        self.shm_ring_satisfied(seg);
    }

    /// Rings every member asleep on a condition that now holds (one load when nobody
    /// sleeps). Called after each counter store, and by each rank whose own wait ended: a
    /// ringer that the first rank it woke preempts (likely, with ranks sharing CPUs) leaves
    /// the rest to the ranks already awake instead of delaying them until it runs again.
    fn shm_ring_satisfied(&mut self, seg: &Seg) {
        let asleep = seg.word(seg.lay.sleepers()).load(SeqCst) & !(1u64 << seg.me);
        if asleep == 0 {
            return;
        }
        let n = seg.lay.n;
        // The same condition is usually awaited by many: decide it once.
        let mut known: Option<(u64, bool)> = None;
        for k in 1..n {
            let w = (seg.me + k) % n;
            if asleep & (1u64 << w) == 0 {
                continue;
            }
            let cell = seg.word(seg.lay.waiting(w));
            let v = cell.load(SeqCst);
            let holds = match known {
                Some((kv, h)) if kv == v => h,
                _ => {
                    let h = v != 0 && Until::of_word(v).is_some_and(|u| seg.holds(u));
                    known = Some((v, h));
                    h
                }
            };
            if holds && cell.compare_exchange(v, 0, SeqCst, SeqCst).is_ok() {
                let (addr, token) = seg.bells[w];
                if let Some((bell, _)) = &mut self.coll.shm.bell {
                    bell.ring(&addr, token);
                }
            }
        }
    }
}

/// Waiting lets the lock go (other threads' calls go on, on other communicators too).
impl Held {
    /// Waits until `u` holds through the shared wait loop (progress.rs), paced by ranks per
    /// CPU ([`phases`]): before sleeping, this rank's `waiting` word says what it waits for,
    /// and whoever makes that true rings this process's doorbell (see the module comment).
    fn shm_wait(&mut self, seg: &Seg, u: Until) -> MpiResult<()> {
        let cell = seg.word(seg.lay.waiting(seg.me));
        let sleepers = seg.word(seg.lay.sleepers());
        let bit = 1u64 << seg.me;
        let (seq, count) = (seg.word32(seg.lay.gate(u)), seg.word32(seg.lay.gate(u) + 4));
        let park = Cell::new(None);
        let mut announce = |st: &mut Ferrite, asleep: bool| {
            if asleep {
                if st.needs_no_packets() {
                    // Counted before `seq` is read and the condition checked again: a
                    // member that completes it later sees the count and bumps `seq`.
                    count.fetch_add(1, SeqCst);
                    park.set(Some((seq.as_ptr() as usize, seq.load(SeqCst))));
                } else {
                    cell.store(u.word(), SeqCst);
                    sleepers.fetch_or(bit, SeqCst);
                }
            } else if park.take().is_some() {
                count.fetch_sub(1, SeqCst);
            } else {
                sleepers.fetch_and(!bit, SeqCst);
                // Failing means a member took the word: its ring (maybe still on its way)
                // is drained by a later sleep's `Net::disarm`, one spurious wake-up.
                let _ = cell.compare_exchange(u.word(), 0, SeqCst, SeqCst);
            }
        };
        let pace = Pace {
            phases: Some(phases()),
            announce: Some(&mut announce),
            park: Some(&park),
        };
        self.wait_with(pace, |_| seg.holds(u))?;
        self.shm_ring_satisfied(seg);
        Ok(())
    }

    /// Makes sure every member finished collective `e - 2` before this rank overwrites a
    /// buffer of `e`'s parity.
    fn shm_reuse(&mut self, seg: &mut Seg, e: u64) -> MpiResult<()> {
        if e >= 3 && seg.known_done < e - 2 {
            self.shm_wait(seg, Until::Done(e - 2))?;
            seg.known_done = e - 2;
        }
        Ok(())
    }

    fn shm_do(&mut self, seg: &mut Seg, call: &Call) -> MpiResult<()> {
        let e = seg.epoch + 1;
        seg.epoch = e;
        let par = (e & 1) as usize;
        let (me, n, len) = (seg.me, seg.lay.n, call.len);
        let lay = seg.lay;
        match &call.op {
            Op::Barrier => {
                self.shm_publish(seg, lay.boxed(par, me), e, Until::Arrived(e));
                match seg.barrier {
                    BarrierForm::Flat => self.shm_wait(seg, Until::Arrived(e))?,
                    BarrierForm::Release if me == 0 => {
                        self.shm_wait(seg, Until::Arrived(e))?;
                        self.shm_publish(seg, lay.release(par), e, Until::Released(e));
                    }
                    // (Several ranks may see every arrival and store the same e.)
                    BarrierForm::Last if seg.holds(Until::Arrived(e)) => {
                        self.shm_publish(seg, lay.release(par), e, Until::Released(e));
                    }
                    BarrierForm::Release | BarrierForm::Last => {
                        self.shm_wait(seg, Until::Released(e))?
                    }
                }
                seg.known_done = seg.known_done.max(e - 1);
            }
            Op::Bcast { root, buf } => {
                if me == *root {
                    self.shm_reuse(seg, e)?;
                    // SAFETY: the user's buffer holds the message; the buffer of this
                    // parity is ours until `release` says e.
                    unsafe { buf.pack_to(seg.ptr(lay.broadcast(par, len)), len) };
                    self.shm_publish(seg, lay.release(par), e, Until::Released(e));
                } else {
                    self.shm_wait(seg, Until::Released(e))?;
                    // SAFETY: the root wrote it and will not before we say done.
                    unsafe { buf.unpack_from(seg.ptr(lay.broadcast(par, len)), len) };
                }
            }
            Op::Reduce {
                root,
                input,
                out,
                red,
            } => {
                self.shm_reuse(seg, e)?;
                let src = input.as_ref().unwrap_or(out);
                // SAFETY: our slot of this parity is free (shm_reuse); the input is valid.
                unsafe { src.pack_to(seg.ptr(lay.contribution(par, me, len)), len) };
                self.shm_publish(seg, lay.boxed(par, me), e, Until::Arrived(e));
                if me == *root {
                    self.shm_wait(seg, Until::Arrived(e))?;
                    // SAFETY: every slot is written and stays until we say done; the
                    // receive buffer is contiguous with `len` bytes.
                    unsafe { fold(seg, par, red, out.bytes(len)) };
                    seg.known_done = seg.known_done.max(e - 1);
                }
            }
            Op::Allreduce { input, out, red } => {
                self.shm_reuse(seg, e)?;
                let src = input.as_ref().unwrap_or(out);
                // SAFETY: as for Reduce.
                unsafe { src.pack_to(seg.ptr(lay.contribution(par, me, len)), len) };
                self.shm_publish(seg, lay.boxed(par, me), e, Until::Arrived(e));
                self.shm_wait(seg, Until::Arrived(e))?;
                // SAFETY: as for Reduce.
                unsafe { fold(seg, par, red, out.bytes(len)) };
                seg.known_done = seg.known_done.max(e - 1);
            }
            Op::Allgather { input, out } => {
                self.shm_reuse(seg, e)?;
                let src = input.as_ref().unwrap_or(&out[me]);
                // SAFETY: as for Reduce.
                unsafe { src.pack_to(seg.ptr(lay.contribution(par, me, len)), len) };
                self.shm_publish(seg, lay.boxed(par, me), e, Until::Arrived(e));
                self.shm_wait(seg, Until::Arrived(e))?;
                for (k, o) in out.iter().enumerate().take(n) {
                    if k != me || input.is_some() {
                        // SAFETY: slot k holds rank k's block until we say done.
                        unsafe { o.unpack_from(seg.ptr(lay.contribution(par, k, len)), len) };
                    }
                }
                seg.known_done = seg.known_done.max(e - 1);
            }
            Op::Gather { root, input, out } => {
                // Rooted: the root's reads may still be going on (shm_reuse).
                self.shm_reuse(seg, e)?;
                if let Some(src) = input {
                    // SAFETY: as for Reduce.
                    unsafe { src.pack_to(seg.ptr(lay.contribution(par, me, len)), len) };
                }
                self.shm_publish(seg, lay.boxed(par, me), e, Until::Arrived(e));
                if me == *root {
                    self.shm_wait(seg, Until::Arrived(e))?;
                    for (k, o) in out.iter().enumerate().take(n) {
                        if k != me || input.is_some() {
                            // SAFETY: slot k holds rank k's block until we say done.
                            unsafe { o.unpack_from(seg.ptr(lay.contribution(par, k, len)), len) };
                        }
                    }
                    seg.known_done = seg.known_done.max(e - 1);
                }
            }
            Op::Scatter { root, input, out } => {
                let at = |k: usize| lay.scattered(par, *root, len) + k * len;
                if me == *root {
                    self.shm_reuse(seg, e)?;
                    for (k, b) in input.iter().enumerate().take(n) {
                        if k != me || out.is_some() {
                            // SAFETY: the user's blocks are valid; the buffer of this
                            // parity is ours until `release` says e.
                            unsafe { b.pack_to(seg.ptr(at(k)), len) };
                        }
                    }
                    self.shm_publish(seg, lay.release(par), e, Until::Released(e));
                    if let Some(o) = out {
                        // SAFETY: written just above.
                        unsafe { o.unpack_from(seg.ptr(at(me)), len) };
                    }
                } else {
                    self.shm_wait(seg, Until::Released(e))?;
                    if let Some(o) = out {
                        // SAFETY: the root wrote it and will not before we say done.
                        unsafe { o.unpack_from(seg.ptr(at(me)), len) };
                    }
                }
            }
            Op::Alltoall { input, out } => {
                self.shm_reuse(seg, e)?;
                let mine = seg.ptr(lay.blocks(par, me, len));
                for (k, b) in input.iter().enumerate().take(n) {
                    // SAFETY: our area of this parity is free (shm_reuse), n blocks long.
                    unsafe { b.pack_to(mine.wrapping_add(k * len), len) };
                }
                self.shm_publish(seg, lay.boxed(par, me), e, Until::Arrived(e));
                self.shm_wait(seg, Until::Arrived(e))?;
                for (k, o) in out.iter().enumerate().take(n) {
                    let from = seg.ptr(lay.blocks(par, k, len)).wrapping_add(me * len);
                    // SAFETY: rank k's area holds its blocks until we say done.
                    unsafe { o.unpack_from(from, len) };
                }
                seg.known_done = seg.known_done.max(e - 1);
            }
        }
        self.shm_publish(seg, lay.done(me), e, Until::Done(e));
        Ok(())
    }
}

/// Reduces every rank's slot of parity `par` into `acc` in rank order:
/// acc = s0 op (s1 op (... op s(n-1))).
///
/// # Safety
/// Every slot holds `acc.len()` bytes of this collective, written by their ranks.
unsafe fn fold(seg: &Seg, par: usize, red: &Reducer, acc: &mut [u8]) {
    let (n, len) = (seg.lay.n, acc.len());
    let slot = |r: usize| {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(seg.ptr(seg.lay.contribution(par, r, len)), len) }
    };
    acc.copy_from_slice(slot(n - 1));
    for r in (0..n - 1).rev() {
        red.combine(slot(r), acc);
    }
}

/// The abstract socket name of a process's collective doorbell.
fn bell_name(pid: u32, token: u64) -> String {
    format!("coll-{pid:x}-{token:x}")
}
