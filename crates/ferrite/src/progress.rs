//! The one progress engine, driven from MPI calls (no progress thread).
//!
//! `wait_until` polls every transport and lets the protocols act; when nothing happens for a
//! while it blocks in the kernel (the transports' doorbells in one epoll set), so that many
//! ranks on few cores sleep instead of spinning against each other.

use crate::error::MpiResult;
use crate::runtime::config;
use crate::state::Ferrite;
use std::sync::OnceLock;

/// `FERRITE_PROGRESS_SPIN`, read once: every blocking call starts here, so the environment
/// is not parsed on the latency path.
fn spin_passes() -> u32 {
    static SPIN: OnceLock<u32> = OnceLock::new();
    *SPIN.get_or_init(|| config::get("FERRITE_PROGRESS_SPIN"))
}

impl Ferrite {
    /// One pass: deliver arrived packets to the protocols, then send what they queued.
    /// Returns true if anything happened.
    pub fn progress(&mut self) -> bool {
        let Ferrite { net, p2p, .. } = self;
        let delivered = net.poll(&mut |from, packet| p2p.on_packet(from, packet));
        let flushed = p2p.flush(net);
        // Collectives hook: nonblocking collective schedules advance here.
        let coll = self.coll_progress();
        delivered > 0 || flushed || coll
    }

    /// Makes progress until `done` holds: spins for `FERRITE_PROGRESS_SPIN` idle passes, then
    /// blocks. With a send backlog (waiting for credits) it sleeps only briefly, since credits
    /// come back without a doorbell.
    pub fn wait_until(&mut self, mut done: impl FnMut(&mut Ferrite) -> bool) -> MpiResult<()> {
        let spin = spin_passes();
        let mut idle = 0u32;
        while !done(self) {
            if self.progress() {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle < spin {
                std::hint::spin_loop();
                continue;
            }
            if idle < spin + 8 {
                std::thread::yield_now();
                continue;
            }
            let timeout = if self.p2p.has_backlog() { 1 } else { 100 };
            self.net.block(timeout);
            idle = spin;
        }
        Ok(())
    }
}
