//! The opt-in progress thread (`FERRITE_ASYNC_PROGRESS=1`): serves RMA requests (lock
//! grants, Put/Get/Accumulate as active messages) and advances point-to-point protocols
//! while the application computes outside MPI, so a passive target that never calls MPI
//! does not stall its origins.
//!
//! It is one more thread waiting in the progress engine the MPI_THREAD_MULTIPLE way
//! (progress.rs, state.rs): it takes the state lock only for progress passes, and sleeps in
//! the kernel in between (`Held::sleep`: on the transports' doorbells and the wake eventfd as
//! the poller, or on the condvar while an application thread polls), waking at least every
//! 100 ms (1 ms with a send backlog), as `wait_until`'s sleep does. User steps of nonblocking
//! collectives are left to the application's threads (their next call runs them). Because of it
//! the library locks as under MPI_THREAD_MULTIPLE whatever level the application asked for
//! (MPI_Query_thread still reports that level). MPI_Finalize stops and joins it first.

use crate::error::{MpiError, MpiResult};
use crate::runtime::config;
use crate::state;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;

/// Set under the state lock by `stop`; the thread looks at it under the lock, before each
/// sleep, so the wake-up that follows cannot be missed.
static STOP: AtomicBool = AtomicBool::new(false);
static THREAD: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

/// Whether `FERRITE_ASYNC_PROGRESS` asks for the thread.
pub fn wanted() -> bool {
    matches!(
        config::get::<String>("FERRITE_ASYNC_PROGRESS")
            .to_ascii_lowercase()
            .as_str(),
        "1" | "yes" | "true" | "on"
    )
}

/// Starts the thread (the state is installed).
pub fn start() -> MpiResult<()> {
    STOP.store(false, Ordering::Relaxed);
    let h = std::thread::Builder::new()
        .name("ferrite-progress".into())
        .spawn(run)
        .map_err(|e| {
            MpiError::new(
                crate::consts::MPI_ERR_OTHER,
                format!("FERRITE_ASYNC_PROGRESS: cannot start the progress thread: {e}"),
            )
        })?;
    *THREAD.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
    Ok(())
}

/// Stops and joins the thread if it runs (MPI_Finalize, before the runtime goes down).
pub fn stop() {
    let Some(h) = THREAD.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return;
    };
    // Under the lock: the thread is either in a pass (it sees STOP before sleeping) or
    // asleep, in epoll or on the condvar, where `wake_poller` reaches it.
    let set = state::with(|_| {
        STOP.store(true, Ordering::Relaxed);
        Ok(())
    });
    if set.is_err() {
        // No state: the thread's next relock fails and it ends anyway.
        STOP.store(true, Ordering::Relaxed);
    }
    state::wake_poller();
    let _ = h.join();
}

fn run() {
    let _ = state::with_held(|h| {
        while !STOP.load(Ordering::Relaxed) {
            if h.progress() {
                // What it did may be what an application thread waits for.
                state::wake_sleepers();
                if h.contended() {
                    h.let_in()?;
                }
                continue;
            }
            let timeout = if h.p2p.has_backlog() { 1 } else { 100 };
            h.sleep_background(timeout)?;
        }
        Ok(())
    });
}
