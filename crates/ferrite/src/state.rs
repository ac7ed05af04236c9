//! The process-global MPI state, behind one lock.
//!
//! Every MPI call takes the lock once (`with`) and does its work on `&mut Ferrite`, so
//! everything below it is plain safe Rust and matching is atomic per call. Calls that block
//! do not keep the lock while they wait (MPI_THREAD_MULTIPLE): `Held::wait_until`
//! (progress.rs) makes one progress pass at a time under the lock and lets it go to yield or
//! to sleep. One sleeping thread (the poller) sits in the kernel on the transports' doorbells
//! (the `Net`'s epoll set, which also holds the wake eventfd); the others sleep on a condvar.
//! A call that returns while threads sleep wakes them all (it may have completed or posted
//! what they wait for); each then re-checks its own condition under the lock. The lock is
//! never held while user code runs (error handlers, attribute callbacks, user reduction
//! ops): entry points return errors to `error::finish`, which calls handlers after the lock
//! is released, and user steps found under it wait in one queue (`defer`) that every call
//! runs on its way out.

use crate::error::{MpiError, MpiResult};
use crate::lock_order;
use crate::objects::Objects;
use crate::p2p::P2p;
use crate::transport::Net;
use std::ops::{Deref, DerefMut};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

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
/// Threads asleep in `Held::sleep` on the condvar wait here.
static SLEEP: Condvar = Condvar::new();
/// Threads that found the lock taken and wait for it: a waiter that spins under the lock
/// lets them in (`Held::pause`).
static WANT: AtomicU32 = AtomicU32::new(0);
/// Threads asleep in `Held::sleep` (poller included): `with` wakes them when it returns.
static SLEEPERS: AtomicU32 = AtomicU32::new(0);
/// A thread is the poller (it blocks in epoll without the lock). Changed under the lock.
static POLLER: AtomicBool = AtomicBool::new(false);
/// The poller is in epoll_wait now: a waker writes the eventfd.
static POLLING: AtomicBool = AtomicBool::new(false);
/// The wake eventfd (in the `Net`'s epoll set); -1 before MPI_Init.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

const NOT_STARTED: u8 = 0;
const RUNNING: u8 = 1;
const FINALIZED: u8 = 2;
static PHASE: AtomicU8 = AtomicU8::new(NOT_STARTED);

type Guard = MutexGuard<'static, Option<Box<Ferrite>>>;

#[inline]
fn lock() -> Guard {
    lock_order::acquire(lock_order::STATE);
    let g = match STATE.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => {
            WANT.fetch_add(1, Ordering::Relaxed);
            let g = STATE.lock().unwrap_or_else(|e| e.into_inner());
            WANT.fetch_sub(1, Ordering::Relaxed);
            g
        }
    };
    g
}

#[inline]
fn unlock(g: Guard) {
    drop(g);
    lock_order::release(lock_order::STATE);
}

/// The state lock, held: derefs to the live state. Blocking operations take `&mut Held`
/// (not `&mut Ferrite`) because they let the lock go while they wait, which a plain
/// reference into the state could not survive.
pub struct Held {
    /// None only inside `pause`/`sleep`, while the lock is released.
    guard: Option<Guard>,
}

impl Deref for Held {
    type Target = Ferrite;
    #[inline]
    fn deref(&self) -> &Ferrite {
        self.guard
            .as_ref()
            .and_then(|g| g.as_deref())
            .expect("state lock held with a live state")
    }
}

impl DerefMut for Held {
    #[inline]
    fn deref_mut(&mut self) -> &mut Ferrite {
        self.guard
            .as_mut()
            .and_then(|g| g.as_deref_mut())
            .expect("state lock held with a live state")
    }
}

impl Drop for Held {
    #[inline]
    fn drop(&mut self) {
        if let Some(g) = self.guard.take() {
            unlock(g);
        }
    }
}

impl Held {
    /// Takes the lock back after `pause`/`sleep`; fails if MPI was finalized meanwhile
    /// (another thread's MPI_Finalize: erroneous, but no reason to crash).
    fn relock(&mut self, g: Guard) -> MpiResult<()> {
        let live = g.is_some();
        self.guard = Some(g);
        if live {
            Ok(())
        } else {
            Err(not_running())
        }
    }

    /// Whether another thread waits for the lock.
    pub fn contended(&self) -> bool {
        WANT.load(Ordering::Relaxed) > 0
    }

    /// Lets the threads that wait for the lock have it (a waiter spinning under it calls
    /// this when `contended`): released until one of them got it, or a few yields passed,
    /// so this thread cannot take it straight back before they wake.
    pub fn let_in(&mut self) -> MpiResult<()> {
        self.pause(|| {
            let want = WANT.load(Ordering::Relaxed);
            for _ in 0..64 {
                if WANT.load(Ordering::Relaxed) < want {
                    break;
                }
                std::thread::yield_now();
            }
        })
    }

    /// Releases the lock around `f` (a yield), then takes it back.
    pub fn pause(&mut self, f: impl FnOnce()) -> MpiResult<()> {
        let g = self.guard.take().expect("state lock held");
        unlock(g);
        f();
        let g = lock();
        self.relock(g)
    }

    /// Sleeps without the lock until something may have happened: a doorbell rang, another
    /// thread's call returned, or `timeout_ms` passed. The first sleeper polls (epoll on
    /// the transports and the wake eventfd), the others wait on the condvar.
    pub fn sleep(&mut self, timeout_ms: i32) -> MpiResult<()> {
        self.sleep_as(timeout_ms, 1)
    }

    /// `sleep` for the progress thread (progress_thread.rs): not counted as a sleeper, so
    /// calls returning do not wake it (it waits for no call's result; doorbells, its
    /// timeout and `wake_poller` do).
    pub fn sleep_background(&mut self, timeout_ms: i32) -> MpiResult<()> {
        self.sleep_as(timeout_ms, 0)
    }

    fn sleep_as(&mut self, timeout_ms: i32, counted: u32) -> MpiResult<()> {
        let timeout = Duration::from_millis(timeout_ms.max(0) as u64);
        if POLLER.load(Ordering::Relaxed) {
            SLEEPERS.fetch_add(counted, Ordering::SeqCst);
            let g = self.guard.take().expect("state lock held");
            let (g, _) = SLEEP
                .wait_timeout(g, timeout)
                .unwrap_or_else(|e| e.into_inner());
            SLEEPERS.fetch_sub(counted, Ordering::SeqCst);
            return self.relock(g);
        }
        let Some(epoll) = self.net.arm() else {
            // A packet is already waiting: no sleep.
            self.net.disarm();
            return Ok(());
        };
        POLLER.store(true, Ordering::Relaxed);
        SLEEPERS.fetch_add(counted, Ordering::SeqCst);
        POLLING.store(true, Ordering::SeqCst);
        let g = self.guard.take().expect("state lock held");
        unlock(g);
        let rang = Net::sleep(epoll, timeout_ms);
        POLLING.store(false, Ordering::SeqCst);
        drain_wake_fd();
        let g = lock();
        SLEEPERS.fetch_sub(counted, Ordering::SeqCst);
        POLLER.store(false, Ordering::Relaxed);
        let r = self.relock(g);
        if r.is_ok() {
            self.net.disarm();
            if rang {
                self.net.drain_bells();
            }
        }
        if rang {
            // A doorbell of a layer above (coll/shm.rs): the ring may be for any sleeper.
            wake_sleepers();
        } else if SLEEPERS.load(Ordering::SeqCst) > 0 {
            // Another sleeper may take over the polling.
            SLEEP.notify_one();
        }
        r
    }
}

/// Wakes the threads asleep in `Held::sleep` (they re-check what they wait for).
#[inline]
pub fn wake_sleepers() {
    if SLEEPERS.load(Ordering::SeqCst) != 0 {
        wake_all();
    }
}

#[cold]
fn wake_all() {
    SLEEP.notify_all();
    if POLLING.load(Ordering::SeqCst) {
        let fd = WAKE_FD.load(Ordering::Relaxed);
        if fd >= 0 {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
            unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
        }
    }
}

/// Wakes whichever thread sleeps in epoll, counted as a sleeper or not (the progress
/// thread's stop).
pub fn wake_poller() {
    wake_all();
}

fn drain_wake_fd() {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid u64; the fd is non-blocking.
        unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    }
}

pub fn is_initialized() -> bool {
    PHASE.load(Ordering::Acquire) != NOT_STARTED
}

pub fn is_finalized() -> bool {
    PHASE.load(Ordering::Acquire) == FINALIZED
}

/// Runs `f` on the live state; fails with MPI_ERR_OTHER before MPI_Init or after MPI_Finalize.
#[inline]
pub fn with<R>(f: impl FnOnce(&mut Ferrite) -> MpiResult<R>) -> MpiResult<R> {
    let r = {
        let mut g = lock();
        let r = match g.as_deref_mut() {
            Some(st) => f(st),
            None => Err(not_running()),
        };
        unlock(g);
        r
    };
    after_call();
    r
}

/// Like [`with`] for calls that may wait: `f` gets the lock itself (`Held`), which waits
/// let go of.
#[inline]
pub fn with_held<R>(f: impl FnOnce(&mut Held) -> MpiResult<R>) -> MpiResult<R> {
    let r = {
        let g = lock();
        if g.is_some() {
            f(&mut Held { guard: Some(g) })
        } else {
            unlock(g);
            Err(not_running())
        }
    };
    after_call();
    r
}

/// What every call does once it has released the lock.
#[inline]
fn after_call() {
    wake_sleepers();
    if deferred_pending() {
        run_deferred();
    }
}

/// A step that calls user code, queued under the lock to run without it (`defer`).
type Deferred = Box<dyn FnOnce() + Send>;
/// The queue of [`defer`] (a leaf lock: never held while a step runs).
static DEFERRED: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
/// Set while DEFERRED may be non-empty, so every call checks it with one load.
static DEFERRED_ANY: AtomicBool = AtomicBool::new(false);

/// Queues `f`, a step that calls user code found under the lock (the user reduction
/// steps of a completed nonblocking collective, coll/mod.rs; the read conversion of a
/// user data representation, io/engine.rs), to run once the lock is released: by the call
/// on its way out, before it returns to the user, or by a waiter (progress.rs), since
/// what it waits for may be one of them.
pub fn defer(f: impl FnOnce() + Send + 'static) {
    DEFERRED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Box::new(f));
    DEFERRED_ANY.store(true, Ordering::Release);
}

/// Whether [`run_deferred`] has work.
#[inline]
pub fn deferred_pending() -> bool {
    DEFERRED_ANY.load(Ordering::Acquire)
}

/// Runs the queued steps, without the state lock (and those they queue), then wakes
/// sleeping threads (a step may complete what they wait for). After MPI_Finalize they are
/// dropped: nothing is left to finish.
pub fn run_deferred() {
    let mut ran = false;
    while DEFERRED_ANY.swap(false, Ordering::AcqRel) {
        let steps = std::mem::take(&mut *DEFERRED.lock().unwrap_or_else(|e| e.into_inner()));
        if is_finalized() {
            continue;
        }
        for f in steps {
            f();
            ran = true;
        }
    }
    if ran {
        wake_sleepers();
    }
}

/// Like [`with`] but returns None instead of an error when MPI is not running.
pub fn try_with<R>(f: impl FnOnce(&mut Ferrite) -> R) -> Option<R> {
    let mut g = lock();
    let r = g.as_deref_mut().map(f);
    unlock(g);
    r
}

fn not_running() -> MpiError {
    let msg = if is_finalized() {
        "MPI has already been finalized"
    } else {
        "MPI has not been initialized (call MPI_Init or MPI_Init_thread first)"
    };
    MpiError::new(crate::consts::MPI_ERR_OTHER, msg)
}

/// Installs the state made by MPI_Init (under MPI_THREAD_MULTIPLE with the wake eventfd
/// added to its epoll set: below it no thread calls MPI while another sleeps in it, and a
/// job short of descriptors keeps the one it would cost).
pub fn install(mut st: Box<Ferrite>) -> MpiResult<()> {
    let mut fd = WAKE_FD.load(Ordering::Relaxed);
    if fd < 0 && st.thread_level == crate::consts::MPI_THREAD_MULTIPLE {
        // SAFETY: plain syscall; the fd lives as long as the process (one per process).
        fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(crate::mpi_err!(
                crate::consts::MPI_ERR_OTHER,
                "eventfd failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        WAKE_FD.store(fd, Ordering::Relaxed);
    }
    if fd >= 0 {
        st.net.wake_on(fd)?;
    }
    let mut guard = lock();
    if guard.is_some() || is_initialized() {
        unlock(guard);
        return Err(MpiError::new(
            crate::consts::MPI_ERR_OTHER,
            "MPI_Init called more than once",
        ));
    }
    *guard = Some(st);
    PHASE.store(RUNNING, Ordering::Release);
    unlock(guard);
    Ok(())
}

/// Removes the state at MPI_Finalize and hands it back for teardown.
pub fn take() -> Option<Box<Ferrite>> {
    let mut g = lock();
    let st = g.take();
    unlock(g);
    if st.is_some() {
        PHASE.store(FINALIZED, Ordering::Release);
    }
    wake_sleepers();
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
