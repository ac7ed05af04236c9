//! The process-global MPI state, behind one lock.
//!
//! Ferrite supports MPI_THREAD_SERIALIZED at most, so one uncontended mutex costs little and
//! keeps everything below it plain safe Rust. The lock is never held while user code runs
//! (error handlers, attribute callbacks, user reduction ops): entry points return errors to
//! `error::finish`, which calls handlers after the lock is released.

use crate::error::{MpiError, MpiResult};
use crate::objects::Objects;
use crate::p2p::P2p;
use crate::transport::Net;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

pub struct Ferrite {
    pub world_rank: u32,
    pub world_size: u32,
    pub thread_level: c_int,
    pub objects: Objects,
    pub p2p: P2p,
    pub net: Net,
    /// Nonblocking/persistent collectives, user reduction operations (coll/mod.rs).
    pub coll: crate::coll::Coll,
}

static STATE: Mutex<Option<Box<Ferrite>>> = Mutex::new(None);

const NOT_STARTED: u8 = 0;
const RUNNING: u8 = 1;
const FINALIZED: u8 = 2;
static PHASE: AtomicU8 = AtomicU8::new(NOT_STARTED);

fn lock() -> MutexGuard<'static, Option<Box<Ferrite>>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn is_initialized() -> bool {
    PHASE.load(Ordering::Acquire) != NOT_STARTED
}

pub fn is_finalized() -> bool {
    PHASE.load(Ordering::Acquire) == FINALIZED
}

/// Runs `f` on the live state; fails with MPI_ERR_OTHER before MPI_Init or after MPI_Finalize.
pub fn with<R>(f: impl FnOnce(&mut Ferrite) -> MpiResult<R>) -> MpiResult<R> {
    let r = {
        let mut guard = lock();
        match guard.as_deref_mut() {
            Some(st) => f(st),
            None => Err(not_running()),
        }
    };
    // Collectives hook: user reduction steps of completed nonblocking collectives run here,
    // with the lock released, before the MPI call returns to the user.
    crate::coll::run_tails();
    r
}

/// Like [`with`] but returns None instead of an error when MPI is not running.
pub fn try_with<R>(f: impl FnOnce(&mut Ferrite) -> R) -> Option<R> {
    lock().as_deref_mut().map(f)
}

fn not_running() -> MpiError {
    let msg = if is_finalized() {
        "MPI has already been finalized"
    } else {
        "MPI has not been initialized (call MPI_Init or MPI_Init_thread first)"
    };
    MpiError::new(crate::consts::MPI_ERR_OTHER, msg)
}

/// Installs the state made by MPI_Init.
pub fn install(st: Box<Ferrite>) -> MpiResult<()> {
    let mut guard = lock();
    if guard.is_some() || is_initialized() {
        return Err(MpiError::new(
            crate::consts::MPI_ERR_OTHER,
            "MPI_Init called more than once",
        ));
    }
    *guard = Some(st);
    PHASE.store(RUNNING, Ordering::Release);
    Ok(())
}

/// Removes the state at MPI_Finalize and hands it back for teardown.
pub fn take() -> Option<Box<Ferrite>> {
    let st = lock().take();
    if st.is_some() {
        PHASE.store(FINALIZED, Ordering::Release);
    }
    st
}

/// Tests that use the global state: a one-process state with the transport stub and
/// MPI_ERRORS_RETURN on the builtin communicators, installed once per test binary. Hold the
/// returned guard for the whole test (tests run in parallel threads).
#[cfg(test)]
pub fn for_tests() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    static INSTALL: std::sync::Once = std::sync::Once::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    INSTALL.call_once(|| {
        let mut objects = Objects::new(0, 1);
        objects.comms.world.errhandler = crate::consts::MPI_ERRORS_RETURN;
        objects.comms.self_.errhandler = crate::consts::MPI_ERRORS_RETURN;
        install(Box::new(Ferrite {
            world_rank: 0,
            world_size: 1,
            thread_level: 0,
            objects,
            p2p: P2p::new(0, 1),
            net: Net::init(0, 1, "").expect("transport stub"),
            coll: Default::default(),
        }))
        .expect("install the test state");
    });
    guard
}
