//! The one progress engine, driven from MPI calls by whichever thread waits (and by the
//! opt-in progress thread, progress_thread.rs).
//!
//! `wait_until` polls every transport and lets the protocols act. An idle wait goes
//! through three phases:
//!
//! 1. spin: up to `limit` idle passes (a pass costs tens of nanoseconds), the fastest way
//!    to see a reply from a partner running on another CPU;
//! 2. yield: short spin bursts separated by `sched_yield`, so a partner that shares our CPU
//!    (an oversubscribed or unbound job) gets to run and answer;
//! 3. block: in the kernel on the transports' doorbells (one epoll set), so that idle ranks
//!    use no CPU.
//!
//! `limit` adapts (at most `FERRITE_PROGRESS_SPIN`): a wait that ended while spinning
//! doubles it, one that ended only after yielding divides it by four. With each rank on its
//! own CPU replies come while spinning and the limit stays high; with ranks sharing a CPU
//! they come only after a yield, and the limit drops to a short burst, so the partner runs
//! after a few microseconds instead of after a whole spin budget.
//!
//! A rank that has a CPU of its own (bound to one CPU, with no more ranks on the node than
//! CPUs: mpirun's default binding) shares it with no partner: a wait that outlasts the spin
//! phase means a slow partner, not a starved one, so its limit does not shrink (on a busy
//! machine it would otherwise collapse and every wait would hand the CPU to other
//! processes). `FERRITE_PROGRESS_ADAPT` overrides the guess.

use crate::error::MpiResult;
use crate::runtime::config;
use crate::state::{self, Ferrite, Held};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `FERRITE_PROGRESS_SPIN`, read once: every blocking call starts here, so the environment
/// is not parsed on the latency path.
fn spin_passes() -> u32 {
    static SPIN: OnceLock<u32> = OnceLock::new();
    *SPIN.get_or_init(|| config::get::<u32>("FERRITE_PROGRESS_SPIN").max(MIN_SPIN))
}

/// `FERRITE_PROGRESS_ADAPT`: whether the spin limit shrinks. `auto`: yes unless this
/// process is bound to a single CPU and the node has no more ranks than online CPUs
/// (`MPI_LOCALNRANKS`, set by mpirun and Hydra), when no partner shares its CPU.
fn adapt() -> bool {
    static ADAPT: OnceLock<bool> = OnceLock::new();
    *ADAPT.get_or_init(
        || match config::get::<String>("FERRITE_PROGRESS_ADAPT").as_str() {
            "yes" | "1" => true,
            "no" | "0" => false,
            _ => !own_cpu(),
        },
    )
}

/// Bound to one CPU, with no more ranks on this node than online CPUs.
fn own_cpu() -> bool {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    // SAFETY: CPU_COUNT only reads the set.
    let bound = rc == 0 && unsafe { libc::CPU_COUNT(&set) } == 1;
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let local: Option<i64> = std::env::var("MPI_LOCALNRANKS")
        .ok()
        .and_then(|v| v.parse().ok());
    bound && local.is_some_and(|n| n >= 1 && n <= online as i64)
}

/// The shortest spin phase, and the spin burst between two yields.
const MIN_SPIN: u32 = 32;
/// How long the yield phase lasts before blocking (and after each wake-up).
const YIELD_FOR: Duration = Duration::from_micros(200);
/// Idle passes between two looks at whether another thread wants the state lock.
const SPIN_BATCH: u32 = 16;
/// The adaptive spin limit (0: not set yet), shared by the threads (a hint: races are
/// harmless).
static SPIN_LIMIT: AtomicU32 = AtomicU32::new(0);

impl Ferrite {
    /// One pass: deliver arrived packets to the protocols, then send what they queued.
    /// Returns true if anything happened.
    pub fn progress(&mut self) -> bool {
        let Ferrite { net, p2p, .. } = self;
        let delivered = net.poll(&mut |from, packet| p2p.on_packet(from, packet));
        for (peer, why) in net.take_failures() {
            p2p.dead.insert(peer, why);
            p2p.dead_news = true;
        }
        if std::mem::take(&mut p2p.dead_news) {
            self.fail_receives_from_dead();
        }
        let Ferrite { net, p2p, .. } = self;
        let flushed = p2p.flush(net);
        // Collectives hook: nonblocking collective schedules advance here.
        let coll = self.coll_progress();
        let idup = self.idup_progress();
        // RMA hook: targets serve the requests windows received (rma/mod.rs).
        let rma = self.rma_progress();
        // MPI-IO hook: collective file accesses advance here (io/engine.rs).
        let io = crate::io::engine::progress(self);
        delivered > 0 || flushed || coll || idup || rma || io
    }

    /// Whether no pass of this engine is needed for packets: no request (which covers
    /// nonblocking collectives and Comm_idup), no blocking receive, send backlog, RMA window
    /// served by messages or collective file access (the hooks above). A rank waiting in a
    /// shared-memory collective may then sleep on the condition's futex gate, which only the
    /// members wake, instead of in the epoll set (coll/shm.rs).
    pub fn needs_no_packets(&self) -> bool {
        self.p2p.reqs.is_empty()
            && !self.p2p.has_waiters()
            && !self.p2p.has_backlog()
            && self.coll.idle()
            && self.objects.wins.active.is_empty()
            && crate::io::engine::idle()
    }
}

/// Sleeps on the shared futex word at `addr` while it holds `seen`, at most `timeout_ms`.
fn futex_wait(addr: usize, seen: u32, timeout_ms: i32) {
    let t = libc::timespec {
        tv_sec: (timeout_ms / 1000) as libc::time_t,
        tv_nsec: (timeout_ms % 1000) as libc::c_long * 1_000_000,
    };
    // SAFETY: `addr` is an aligned u32 of a shared mapping that outlives the wait
    // (Pace::park); not FUTEX_PRIVATE, since other processes wake it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            addr as *const u32,
            libc::FUTEX_WAIT,
            seen,
            &t as *const libc::timespec,
        )
    };
}

/// [`Pace::announce`]'s hook: told `true` before sleeping, `false` after.
pub type Announce<'a> = &'a mut dyn FnMut(&mut Ferrite, bool);

/// Fixed phases of a wait ([`Pace::phases`]).
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    /// Idle passes to spin before yielding.
    pub spin: u32,
    /// How long to yield before sleeping (also after each wake-up); zero: sleep at once.
    pub yield_for: Duration,
    /// Passes (each a progress pass) between two yields.
    pub burst: u32,
    /// While spinning, one pass in this many is a progress pass; the others only check the
    /// condition (cheap, so the spin ends sooner in wall time: with ranks sharing a CPU the
    /// awaited one gets it sooner).
    pub poll_every: u32,
}

/// How a wait paces itself and sleeps, beyond its condition ([`Held::wait_with`]).
#[derive(Default)]
pub struct Pace<'a> {
    /// Fixed phases instead of the adaptive limit and `YIELD_FOR` (which such a wait leaves
    /// alone): for waits whose caller knows better (coll/shm.rs, by ranks per CPU).
    pub phases: Option<Phases>,
    /// For conditions other processes make true through shared memory rather than packets:
    /// called under the lock with `true` just before the thread sleeps (ask them to ring a
    /// doorbell in the epoll set, `Net::bell_on`; the condition is checked once more after
    /// it) and with `false` once it is awake again (take that back).
    pub announce: Option<Announce<'a>>,
    /// Set by `announce` to sleep on a futex word in shared memory instead of the epoll
    /// set: (address of the word, the value it held when announced). The sleep ends when
    /// the word changes and is woken (FUTEX_WAKE), or at the usual timeout. For waiters
    /// that no packet needs to wake (coll/shm.rs decides).
    pub park: Option<&'a std::cell::Cell<Option<(usize, u32)>>>,
}

impl Held {
    /// Makes progress until `done` holds: spins, yields, then blocks (see the module
    /// comment). Each pass runs under the state lock; the lock is let go while yielding and
    /// sleeping, and every `SPIN_BATCH` idle passes when another thread wants it, so other
    /// threads' calls go on meanwhile (MPI_THREAD_MULTIPLE) and whichever thread waits makes
    /// progress for all. With a send backlog (waiting for credits) it sleeps at most 1 ms:
    /// shm rings a sender asleep for its credits when it frees cells, but a transport need
    /// not.
    pub fn wait_until(&mut self, done: impl FnMut(&mut Ferrite) -> bool) -> MpiResult<()> {
        self.wait_with(Pace::default(), done)
    }

    /// [`Held::wait_until`] paced as `pace` says.
    pub fn wait_with(
        &mut self,
        mut pace: Pace,
        mut done: impl FnMut(&mut Ferrite) -> bool,
    ) -> MpiResult<()> {
        if done(self) {
            return Ok(());
        }
        let max = spin_passes();
        let adapt = adapt();
        let p = pace.phases.unwrap_or_else(|| {
            let l = SPIN_LIMIT.load(Ordering::Relaxed);
            Phases {
                spin: if l == 0 { max } else { l },
                yield_for: YIELD_FOR,
                burst: MIN_SPIN,
                poll_every: 1,
            }
        });
        let (limit, yield_for) = (p.spin, p.yield_for);
        let poll_every = p.poll_every.max(1);
        let mut idle = 0u32;
        // Set when the spin phase is over: the time the yield phase ends.
        let mut yield_until: Option<Instant> = None;
        let mut blocked = false;
        while !done(self) {
            if state::deferred_pending() {
                // Steps that call user code (state::defer): run them without the lock
                // (what we wait for may be one of them).
                self.pause(state::run_deferred)?;
                continue;
            }
            if yield_until.is_none() && !idle.is_multiple_of(poll_every) {
                // A spin pass that only checks the condition.
                idle += 1;
                if idle >= limit {
                    yield_until = Some(Instant::now() + yield_for);
                    idle = 0;
                }
                std::hint::spin_loop();
                continue;
            }
            if self.progress() {
                // What we did may be what a sleeping thread waits for.
                state::wake_sleepers();
                // A paced wait's condition is another process's doing: serving traffic
                // meanwhile does not prolong its spin (else it may never yield).
                if pace.phases.is_none() {
                    idle = 0;
                    continue;
                }
            }
            idle += 1;
            if idle.is_multiple_of(SPIN_BATCH) && self.contended() {
                self.let_in()?;
                continue;
            }
            match yield_until {
                None if idle < limit => std::hint::spin_loop(),
                None => {
                    yield_until = Some(Instant::now() + yield_for);
                    idle = 0;
                }
                // (No yield phase: straight to sleep.)
                Some(_) if idle < p.burst && !yield_for.is_zero() => std::hint::spin_loop(),
                Some(end) => {
                    idle = 0;
                    if Instant::now() < end {
                        self.pause(std::thread::yield_now)?;
                        continue;
                    }
                    if let Some(announce) = pace.announce.as_mut() {
                        announce(self, true);
                        if done(self) {
                            announce(self, false);
                            break;
                        }
                    }
                    let timeout = if self.p2p.has_backlog() { 1 } else { 100 };
                    match pace.park.and_then(std::cell::Cell::get) {
                        Some((addr, seen)) => self.pause(|| futex_wait(addr, seen, timeout))?,
                        None => self.sleep(timeout)?,
                    }
                    if let Some(announce) = pace.announce.as_mut() {
                        announce(self, false);
                    }
                    blocked = true;
                    yield_until = Some(Instant::now() + yield_for);
                }
            }
        }
        if pace.phases.is_some() {
            return Ok(());
        }
        let next = match (yield_until, blocked) {
            (None, _) => limit.saturating_mul(2).min(max),
            (Some(_), false) if adapt => (limit / 4).max(MIN_SPIN),
            // A slow partner says nothing about whether it shares our CPU.
            (Some(_), _) => limit,
        };
        if next != limit {
            SPIN_LIMIT.store(next, Ordering::Relaxed);
        }
        Ok(())
    }
}
