//! Per-window views that the RMA fast path (fast.rs) reads without the state lock.
//!
//! A small RMA call's cost was mostly the way in: the state lock, the handle lookup and the
//! epoch checks in `WinRma`. A view holds what the fast path needs as atomics in a static
//! table indexed by the window handle's index: per target, how its memory is mapped here
//! (published once, at window creation, after the peers' files are mapped) and whether an
//! epoch is open on it; per window, the fence and lock_all epochs, the number of locks held,
//! the requests sent by message and not yet answered, and whether one failed. The state
//! lock's holder keeps these in step with `WinRma` (mod.rs: `publish`, `sync_epochs`,
//! `WinRma::sent`/`answered`/`fail`); readers only load.
//!
//! Why this is safe without the lock:
//! - Everything is an atomic in static memory, and the per-target arrays are never freed
//!   (a slot keeps its array for the next window that gets the slot; a larger one replaces
//!   it and the old one is leaked), so a stale or racing reader reads old values, never
//!   freed memory.
//! - A reader takes the slot only when its `win` equals the handle, before and after it
//!   reads the target (Win_free clears `win` before anything is unmapped), so it never
//!   mixes two windows' targets.
//! - A view never says more than `WinRma` allows, only possibly less for a moment to other
//!   threads (an epoch opened by another thread): then the call takes the general path,
//!   which looks under the lock. Calls racing with the end of their own epoch or with
//!   MPI_Win_free are erroneous programs; like other MPIs' shared-memory windows they may
//!   then touch the memory while it is still mapped, or fault once it is not.

use crate::consts::*;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU8};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Windows whose handle index is below this have a view (others take the general path).
pub const SLOTS: usize = 4096;

/// `Target::open`: a lock (MPI_Win_lock) on the target is held.
pub const LOCKED: u8 = 1;
/// `Target::open`: the target is in the group of MPI_Win_start.
pub const STARTED: u8 = 2;

/// One target as the fast path sees it.
pub struct Target {
    /// Where its window memory is mapped here; 0: not mapped (the general path decides).
    pub base: AtomicUsize,
    /// Its accumulate lock word (direct::lock), or 0: accumulates go the general way (this
    /// process's own memory that nobody else maps: the state lock serializes those).
    pub lock: AtomicUsize,
    pub size: AtomicI64,
    pub unit: AtomicI64,
    /// LOCKED | STARTED.
    pub open: AtomicU8,
}

impl Target {
    const fn new() -> Self {
        Target {
            base: AtomicUsize::new(0),
            lock: AtomicUsize::new(0),
            size: AtomicI64::new(0),
            unit: AtomicI64::new(0),
            open: AtomicU8::new(0),
        }
    }
}

/// One window's view.
pub struct View {
    /// The window this slot describes (MPI_WIN_NULL: none).
    win: AtomicI32,
    /// Its targets (the first `n` of the array).
    targets: AtomicPtr<Box<[Target]>>,
    n: AtomicUsize,
    pub fence: AtomicBool,
    pub lock_all: AtomicBool,
    /// Locks held (MPI_Win_lock).
    pub locks: AtomicU32,
    /// Requests sent by message and not answered yet.
    pub busy: AtomicU32,
    /// A target answered with an error not raised yet (`WinRma::failed`).
    pub failed: AtomicBool,
    /// Flushes that found nothing to wait for (see mod.rs's IDLE_FLUSH_PROGRESS).
    pub idle_flushes: AtomicU32,
}

impl View {
    const fn new() -> Self {
        View {
            win: AtomicI32::new(MPI_WIN_NULL),
            targets: AtomicPtr::new(std::ptr::null_mut()),
            n: AtomicUsize::new(0),
            fence: AtomicBool::new(false),
            lock_all: AtomicBool::new(false),
            locks: AtomicU32::new(0),
            busy: AtomicU32::new(0),
            failed: AtomicBool::new(false),
            idle_flushes: AtomicU32::new(0),
        }
    }

    /// Target `t`, if the view has it.
    #[inline]
    pub fn target(&self, t: usize) -> Option<&Target> {
        let p = self.targets.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a published array is never freed (see the module comment).
        let all: &[Target] = unsafe { &*p };
        all[..self.n.load(Ordering::Relaxed).min(all.len())].get(t)
    }

    /// Whether this slot still describes `w` (a reader's check after it read a target).
    #[inline]
    pub fn still(&self, w: MPI_Win) -> bool {
        std::sync::atomic::fence(Ordering::Acquire);
        self.win.load(Ordering::Relaxed) == w
    }

    pub fn open(&self, t: &Target) -> bool {
        self.fence.load(Ordering::Relaxed)
            || self.lock_all.load(Ordering::Relaxed)
            || t.open.load(Ordering::Relaxed) != 0
    }
}

static VIEWS: [View; SLOTS] = [const { View::new() }; SLOTS];

/// Handles of user windows: MPICH's "direct" kind with the window type code (objects/handles.rs).
const WIN_DIRECT: u32 = 0x8000_0000 | (crate::objects::handles::kind::WIN << 26);
const INDEX_MASK: u32 = 0x03ff_ffff;

/// The slot of handle `w`, whoever it describes now.
#[inline]
fn slot(w: MPI_Win) -> Option<&'static View> {
    let u = w as u32;
    if u & !INDEX_MASK != WIN_DIRECT {
        return None;
    }
    VIEWS.get((u & INDEX_MASK) as usize)
}

/// The view of live window `w`, read without the state lock.
#[inline]
pub fn find(w: MPI_Win) -> Option<&'static View> {
    let v = slot(w)?;
    (v.win.load(Ordering::Acquire) == w && w != MPI_WIN_NULL).then_some(v)
}

/// What `publish` writes per target: (base, lock, size, unit); base 0 if not mapped.
pub type TargetInit = (usize, usize, i64, i64);

/// Publishes the view of new window `w` (under the state lock); None if `w` has no slot.
pub fn publish(w: MPI_Win, targets: &[TargetInit]) -> Option<&'static View> {
    let v = slot(w)?;
    v.win.store(MPI_WIN_NULL, Ordering::Release);
    let p = v.targets.load(Ordering::Acquire);
    // SAFETY: as in `target`.
    let fits = !p.is_null() && unsafe { &*p }.len() >= targets.len();
    if !fits {
        let n = targets.len().max(16);
        let fresh: Box<[Target]> = (0..n).map(|_| Target::new()).collect();
        // Leaked on purpose: a racing reader may still hold the old array (module comment).
        v.targets
            .store(Box::into_raw(Box::new(fresh)), Ordering::Release);
    }
    let p = v.targets.load(Ordering::Acquire);
    // SAFETY: as in `target`.
    let all: &[Target] = unsafe { &*p };
    for (t, &(base, lock, size, unit)) in all.iter().zip(targets) {
        t.base.store(base, Ordering::Relaxed);
        t.lock.store(lock, Ordering::Relaxed);
        t.size.store(size, Ordering::Relaxed);
        t.unit.store(unit, Ordering::Relaxed);
        t.open.store(0, Ordering::Relaxed);
    }
    v.n.store(targets.len(), Ordering::Relaxed);
    for b in [&v.fence, &v.lock_all, &v.failed] {
        b.store(false, Ordering::Relaxed);
    }
    for c in [&v.locks, &v.busy, &v.idle_flushes] {
        c.store(0, Ordering::Relaxed);
    }
    v.win.store(w, Ordering::Release);
    Some(v)
}

/// Withdraws `w`'s view (MPI_Win_free, before its memory is unmapped).
pub fn withdraw(w: MPI_Win) {
    if let Some(v) = slot(w) {
        if v.win.load(Ordering::Relaxed) == w {
            v.win.store(MPI_WIN_NULL, Ordering::Release);
        }
    }
}

/// Sizes of the predefined datatypes by the low byte of their handle (0: not known to be
/// usable by the fast path yet). The general path fills it in as it resolves them (a
/// builtin's table entry is made on first use), so a type's first operation goes that way.
static BUILTIN: [AtomicU8; 256] = [const { AtomicU8::new(0) }; 256];

/// MPICH's builtin datatype handles: 0x4c00_SSII (size SS, index II).
fn builtin_parts(h: MPI_Datatype) -> Option<(usize, usize)> {
    let u = h as u32;
    (u & 0xffff_0000 == 0x4c00_0000).then_some((((u >> 8) & 0xff) as usize, (u & 0xff) as usize))
}

/// Records that builtin `h` resolved to `t` (under the state lock, in the general path).
pub fn learn_builtin(h: MPI_Datatype, t: &crate::objects::datatype::Datatype) {
    if let Some((size, i)) = builtin_parts(h) {
        if t.committed && t.contiguous && t.size == size && size > 0 {
            BUILTIN[i].store(size as u8, Ordering::Relaxed);
        }
    }
}

/// The size of predefined contiguous datatype `h`, if the fast path can take it.
#[inline]
pub fn builtin_size(h: MPI_Datatype) -> Option<usize> {
    let (size, i) = builtin_parts(h)?;
    (size != 0 && usize::from(BUILTIN[i].load(Ordering::Relaxed)) == size).then_some(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(i: u32) -> MPI_Win {
        (WIN_DIRECT | i) as MPI_Win
    }

    #[test]
    fn publish_find_withdraw_and_reuse() {
        // A slot far from what the library's own windows use in other tests.
        let w = handle(SLOTS as u32 - 3);
        assert!(find(w).is_none());
        let v = publish(w, &[(0x1000, 0x2000, 64, 8), (0, 0, 32, 4)]).expect("a slot");
        let found = find(w).expect("published");
        assert!(std::ptr::eq(v, found));
        let t = found.target(0).expect("target 0");
        assert_eq!(t.base.load(Ordering::Relaxed), 0x1000);
        assert_eq!(t.size.load(Ordering::Relaxed), 64);
        assert!(found.target(2).is_none(), "only the window's targets");
        assert!(!found.open(t), "no epoch yet");
        t.open.store(LOCKED, Ordering::Relaxed);
        assert!(found.open(t));
        assert!(found.still(w));
        withdraw(w);
        assert!(find(w).is_none(), "withdrawn at Win_free");
        assert!(!v.still(w));
        // The handle reused by a smaller window: the new values, nothing open.
        publish(w, &[(0x3000, 0, 16, 1)]).expect("a slot");
        let v = find(w).expect("published again");
        let t = v.target(0).expect("target 0");
        assert_eq!(
            (
                t.base.load(Ordering::Relaxed),
                t.size.load(Ordering::Relaxed)
            ),
            (0x3000, 16)
        );
        assert!(!v.open(t) && v.target(1).is_none());
        withdraw(w);
        // Foreign handles and slots beyond the table have no view.
        assert!(find(MPI_WIN_NULL).is_none());
        assert!(publish(handle(SLOTS as u32), &[]).is_none());
        assert!(find(0x4400_0000).is_none());
    }

    #[test]
    fn builtin_sizes_are_learnt_and_checked_against_the_handle() {
        let dt = 0x4c00_08fe_u32 as MPI_Datatype; // size 8, an index no real type uses
        assert_eq!(
            builtin_size(dt),
            None,
            "unknown until the general path resolved it"
        );
        use crate::objects::datatype::{Basic, Datatype, Ext};
        let t = Datatype::basic_of(Basic {
            size: 8,
            swap: 8,
            ext: Ext::Same,
        });
        learn_builtin(dt, &t);
        assert_eq!(builtin_size(dt), Some(8));
        // The same index with another size in the handle: not this type.
        assert_eq!(builtin_size(0x4c00_04fe_u32 as MPI_Datatype), None);
    }
}
