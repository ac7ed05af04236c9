//! Runtime services: the PMI client, the configuration registry, process-level helpers.

pub mod config;
pub mod host;
pub mod pmi;
pub mod report;

pub use host::hostname;
pub use pmi::{job_secret, publish_secret};

use crate::error::MpiResult;
use crate::state::Held;

/// MPI_Finalize's barrier: makes progress until this rank has nothing in flight (every
/// packet handed over, every datagram acknowledged, no acknowledgement owed), then waits in
/// the job-wide PMI barrier still making progress, so peers not done yet get what they need
/// from this rank (acknowledgements, closes they ask for). When it returns no rank has
/// anything in flight. See docs/architecture.md, "MPI_Finalize".
pub fn quiesce(st: &mut Held) -> MpiResult<()> {
    st.wait_until(|st| !st.p2p.has_backlog() && !st.net.has_pending())?;
    let Some(fd) = pmi::barrier_enter()? else {
        return Ok(()); // a singleton: no peers
    };
    st.net.wake_on(fd)?;
    let mut failed = None;
    st.wait_until(|_| match pmi::barrier_done() {
        Ok(done) => done,
        Err(e) => {
            failed = Some(e);
            true
        }
    })?;
    failed.map_or(Ok(()), |e| Err(e.into()))
}

/// Ends the whole job: tells the launcher (which stops every other rank) and exits.
/// Does not need the state lock, so it works from any error path.
pub fn abort_job(code: i32, msg: &str) -> ! {
    pmi::abort(code, msg);
    // Exit without running destructors or atexit handlers of a program in an unknown state.
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(if code == 0 { 1 } else { code & 0xff }) }
}
