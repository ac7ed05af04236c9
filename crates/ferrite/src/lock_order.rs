//! The lock order, checked in debug builds: a thread takes locks only in increasing
//! level (docs/architecture.md, "State and threads"). Each thread keeps the levels it holds.

use std::sync::{Mutex, MutexGuard};

/// Who keeps the runtime up (abi/init.rs): held around MPI_Init's start-up.
pub const USERS: u8 = 0;
/// The state lock (`state::with`).
pub const STATE: u8 = 1;
/// Leaves, taken alone or inside the state lock, never around another lock: the info
/// table (`objects::info::with`), the Bsend buffers (abi/p2p.rs), the generalized
/// requests (abi/grequest.rs), the PMI client (runtime/pmi.rs), the tool interface's
/// sessions and handles (tool/), the knobs set through it (runtime/config.rs).
pub const INFO: u8 = 2;
pub const BSEND: u8 = 3;
pub const GREQS: u8 = 4;
pub const PMI: u8 = 5;
pub const TOOL: u8 = 6;
pub const CONFIG: u8 = 7;

/// A guard of a table lock whose level is checked and recorded.
pub struct Tracked<T: 'static> {
    guard: MutexGuard<'static, T>,
    level: u8,
}

/// Locks `m` (level `level`), checking the order; a poisoned lock is taken as it is.
pub fn lock<T>(m: &'static Mutex<T>, level: u8) -> Tracked<T> {
    acquire(level);
    Tracked {
        guard: m.lock().unwrap_or_else(|e| e.into_inner()),
        level,
    }
}

impl<T> std::ops::Deref for Tracked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Tracked<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for Tracked<T> {
    fn drop(&mut self) {
        release(self.level);
    }
}

#[cfg(debug_assertions)]
thread_local! {
    static HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// About to take the lock of `level`: no lock of the same or a higher level is held.
#[inline]
pub fn acquire(level: u8) {
    #[cfg(debug_assertions)]
    HELD.with(|h| {
        let held = h.get();
        // Leaves nest in nothing: any lock above STATE held forbids another.
        let forbidden = if level > STATE {
            held >> (STATE + 1)
        } else {
            held >> level
        };
        debug_assert!(
            forbidden == 0,
            "lock order: taking level {level} while holding levels {held:#b}"
        );
        h.set(held | 1 << level);
    });
    #[cfg(not(debug_assertions))]
    let _ = level;
}

/// Released the lock of `level`.
#[inline]
pub fn release(level: u8) {
    #[cfg(debug_assertions)]
    HELD.with(|h| h.set(h.get() & !(1 << level)));
    #[cfg(not(debug_assertions))]
    let _ = level;
}
