//! The one progress engine, driven from MPI calls (no progress thread).
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

use crate::error::MpiResult;
use crate::runtime::config;
use crate::state::Ferrite;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `FERRITE_PROGRESS_SPIN`, read once: every blocking call starts here, so the environment
/// is not parsed on the latency path.
fn spin_passes() -> u32 {
    static SPIN: OnceLock<u32> = OnceLock::new();
    *SPIN.get_or_init(|| config::get::<u32>("FERRITE_PROGRESS_SPIN").max(MIN_SPIN))
}

/// The shortest spin phase, and the spin burst between two yields.
const MIN_SPIN: u32 = 32;
/// How long the yield phase lasts before blocking (and after each wake-up).
const YIELD_FOR: Duration = Duration::from_micros(200);
/// The adaptive spin limit (0: not set yet). Only used under the state lock.
static SPIN_LIMIT: AtomicU32 = AtomicU32::new(0);

impl Ferrite {
    /// One pass: deliver arrived packets to the protocols, then send what they queued.
    /// Returns true if anything happened.
    pub fn progress(&mut self) -> bool {
        let Ferrite { net, p2p, .. } = self;
        let delivered = net.poll(&mut |from, packet| p2p.on_packet(from, packet));
        let flushed = p2p.flush(net);
        delivered > 0 || flushed
    }

    /// Makes progress until `done` holds: spins, yields, then blocks (see the module
    /// comment). With a send backlog (waiting for credits) it sleeps only briefly, since
    /// credits come back without a doorbell.
    pub fn wait_until(&mut self, mut done: impl FnMut(&mut Ferrite) -> bool) -> MpiResult<()> {
        if done(self) {
            return Ok(());
        }
        let max = spin_passes();
        let mut limit = SPIN_LIMIT.load(Ordering::Relaxed);
        if limit == 0 {
            limit = max;
        }
        let mut idle = 0u32;
        // Set when the spin phase is over: the time the yield phase ends.
        let mut yield_until: Option<Instant> = None;
        let mut blocked = false;
        while !done(self) {
            if self.progress() {
                idle = 0;
                continue;
            }
            idle += 1;
            match yield_until {
                None if idle < limit => std::hint::spin_loop(),
                None => {
                    yield_until = Some(Instant::now() + YIELD_FOR);
                    idle = 0;
                }
                Some(_) if idle < MIN_SPIN => std::hint::spin_loop(),
                Some(end) => {
                    idle = 0;
                    if Instant::now() < end {
                        std::thread::yield_now();
                    } else {
                        let timeout = if self.p2p.has_backlog() { 1 } else { 100 };
                        self.net.block(timeout);
                        blocked = true;
                        yield_until = Some(Instant::now() + YIELD_FOR);
                    }
                }
            }
        }
        let next = match (yield_until, blocked) {
            (None, _) => limit.saturating_mul(2).min(max),
            (Some(_), false) => (limit / 4).max(MIN_SPIN),
            // A slow partner says nothing about whether it shares our CPU.
            (Some(_), true) => limit,
        };
        if next != limit {
            SPIN_LIMIT.store(next, Ordering::Relaxed);
        }
        Ok(())
    }
}
