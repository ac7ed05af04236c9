//! Memory release hooks for the registration cache (`regcache.rs`): libmpi.so exports
//! `munmap`, `mremap`, `madvise`, `brk` and `sbrk`, which record the range the program
//! gives back and then call the next definition (libc's, found with dlsym(RTLD_NEXT)).
//! Before every lookup the transport drops the registrations overlapping a recorded range,
//! so memory unmapped and mapped again at the same address is registered anew, never read
//! through a registration of the old pages (which a provider that pins pages would do).
//!
//! Why symbol interposition: it needs no thread, no kernel feature and no code patching.
//! userfaultfd needs `vm.unprivileged_userfaultfd` or a recent kernel, is refused by common
//! seccomp profiles (Docker's), makes the unmapping thread wait for a reader thread of ours,
//! and a registered range's missing-page faults would wait for it too; patching libc's code
//! at run time (Open MPI's patcher) rewrites instructions per architecture. What
//! interposition does not see: libc's calls to itself (free() unmapping a large block,
//! trimming the heap), for which the transport keeps freed heap memory mapped on providers
//! that pin (`ffi::keep_heap_mapped`); raw `syscall(SYS_munmap)`; and programs that load
//! libmpi with dlopen after libc (mpi4py), where libc's definitions come first.
//!
//! The hooks may run on any thread, inside a signal handler, or while this thread holds the
//! state lock, so they only touch atomics: a ring of the last [`SLOTS`] ranges, each slot
//! written under a sequence number. A reader that fell behind by more than the ring, or
//! finds a slot being written or overwritten, is told to drop everything (always safe).

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

/// Ranges remembered between two looks of a reader.
const SLOTS: usize = 64;

struct Slot {
    /// 2i+1 while range i is being written, 2i+2 once written.
    seq: AtomicU64,
    start: AtomicU64,
    len: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // only the array's initializer
const EMPTY: Slot = Slot {
    seq: AtomicU64::new(0),
    start: AtomicU64::new(0),
    len: AtomicU64::new(0),
};

static RING: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Ranges recorded so far (the next one's index).
static HEAD: AtomicU64 = AtomicU64::new(0);
/// A registration cache exists: record releases (otherwise the hooks only forward).
static WATCHING: AtomicBool = AtomicBool::new(false);

/// Start recording (before the first registration).
pub fn watch() {
    WATCHING.store(true, SeqCst);
}

/// What a reader learns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// `[start, start+len)` was given back.
    Range(u64, u64),
    /// Some ranges were missed: assume anything was.
    All,
}

/// Records `[start, start+len)` as given back (called before the memory goes).
fn released(start: u64, len: u64) {
    if len == 0 || !WATCHING.load(SeqCst) {
        return;
    }
    let i = HEAD.fetch_add(1, SeqCst);
    let s = &RING[i as usize % SLOTS];
    s.seq.store(2 * i + 1, SeqCst);
    s.start.store(start, SeqCst);
    s.len.store(len, SeqCst);
    s.seq.store(2 * i + 2, SeqCst);
}

/// One reader's place in the ring (each transport instance has its own).
#[derive(Debug)]
pub struct Reader {
    next: u64,
}

impl Reader {
    /// A reader that starts with what is recorded from now on.
    pub fn new() -> Reader {
        Reader {
            next: HEAD.load(SeqCst),
        }
    }

    /// Hands every release recorded since the last call to `f`, in order.
    pub fn take(&mut self, mut f: impl FnMut(Released)) {
        let head = HEAD.load(SeqCst);
        if head == self.next {
            return;
        }
        if head - self.next > SLOTS as u64 {
            f(Released::All);
            self.next = head;
            return;
        }
        for i in self.next..head {
            let s = &RING[i as usize % SLOTS];
            let seq = s.seq.load(SeqCst);
            let (start, len) = (s.start.load(SeqCst), s.len.load(SeqCst));
            fence(SeqCst);
            if seq != 2 * i + 2 || s.seq.load(SeqCst) != seq {
                // Still being written (its memory may go any moment) or already reused.
                f(Released::All);
                break;
            }
            f(Released::Range(start, len));
        }
        self.next = head;
    }
}

impl Default for Reader {
    fn default() -> Self {
        Reader::new()
    }
}

/// The next definition of `name` after libmpi (libc's), looked up once.
fn next(name: &CStr, cache: &AtomicUsize) -> usize {
    let p = cache.load(Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only reads the link maps.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    cache.store(p, Relaxed);
    p
}

static NEXT_MUNMAP: AtomicUsize = AtomicUsize::new(0);
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
static NEXT_MREMAP: AtomicUsize = AtomicUsize::new(0);
static NEXT_MADVISE: AtomicUsize = AtomicUsize::new(0);
static NEXT_BRK: AtomicUsize = AtomicUsize::new(0);
static NEXT_SBRK: AtomicUsize = AtomicUsize::new(0);

/// munmap(2), recording the range first.
///
/// # Safety
/// As munmap(2): the caller gives back memory nothing uses any more.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: libc::size_t) -> c_int {
    released(addr as u64, len as u64);
    match next(c"munmap", &NEXT_MUNMAP) {
        // SAFETY: the caller's munmap arguments, to the kernel.
        0 => unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int },
        f => {
            // SAFETY: f is libc's munmap, which has this signature.
            let f: unsafe extern "C" fn(*mut c_void, libc::size_t) -> c_int =
                unsafe { std::mem::transmute(f) };
            // SAFETY: the caller's arguments, passed on.
            unsafe { f(addr, len) }
        }
    }
}

/// mremap(2), recording the old range first (its pages may move). Declared with its five
/// arguments, not variadic (stable Rust cannot define a variadic function): on x86_64 and
/// aarch64 Linux a variadic caller passes them in the same registers. Elsewhere mremap is
/// not interposed, so a registration of memory the program moves with it is not dropped.
///
/// # Safety
/// As mremap(2).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: libc::size_t,
    new_len: libc::size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    released(old as u64, old_len as u64);
    match next(c"mremap", &NEXT_MREMAP) {
        // SAFETY: the caller's mremap arguments, to the kernel.
        0 => unsafe {
            libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void
        },
        f => {
            // SAFETY: f is libc's mremap; its variadic fifth argument is passed as named.
            let f: unsafe extern "C" fn(
                *mut c_void,
                libc::size_t,
                libc::size_t,
                c_int,
                *mut c_void,
            ) -> *mut c_void = unsafe { std::mem::transmute(f) };
            // SAFETY: the caller's arguments, passed on.
            unsafe { f(old, old_len, new_len, flags, new_addr) }
        }
    }
}

/// madvise(2), recording the range when the advice drops its pages.
///
/// # Safety
/// As madvise(2).
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: libc::size_t, advice: c_int) -> c_int {
    if matches!(
        advice,
        libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE
    ) {
        released(addr as u64, len as u64);
    }
    match next(c"madvise", &NEXT_MADVISE) {
        // SAFETY: the caller's madvise arguments, to the kernel.
        0 => unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int },
        f => {
            // SAFETY: f is libc's madvise, which has this signature.
            let f: unsafe extern "C" fn(*mut c_void, libc::size_t, c_int) -> c_int =
                unsafe { std::mem::transmute(f) };
            // SAFETY: the caller's arguments, passed on.
            unsafe { f(addr, len, advice) }
        }
    }
}

type SbrkFn = unsafe extern "C" fn(libc::intptr_t) -> *mut c_void;

/// The next `sbrk` (libc's keeps the break it knows in step with the kernel's).
fn next_sbrk() -> Option<SbrkFn> {
    match next(c"sbrk", &NEXT_SBRK) {
        0 => None,
        // SAFETY: the address is libc's sbrk, which has this signature.
        f => Some(unsafe { std::mem::transmute::<usize, SbrkFn>(f) }),
    }
}

/// sbrk(2), recording the range a negative increment gives back.
///
/// # Safety
/// As sbrk(2).
#[no_mangle]
pub unsafe extern "C" fn sbrk(incr: libc::intptr_t) -> *mut c_void {
    let Some(f) = next_sbrk() else {
        // No libc sbrk to forward to: fail as sbrk does.
        return usize::MAX as *mut c_void;
    };
    if incr < 0 {
        // SAFETY: sbrk(0) only reads the current break.
        let end = unsafe { f(0) } as u64;
        released(end - incr.unsigned_abs() as u64, incr.unsigned_abs() as u64);
    }
    // SAFETY: the caller's argument, passed on.
    unsafe { f(incr) }
}

/// brk(2), recording the range a lower break gives back.
///
/// # Safety
/// As brk(2).
#[no_mangle]
pub unsafe extern "C" fn brk(addr: *mut c_void) -> c_int {
    if let Some(sbrk) = next_sbrk() {
        // SAFETY: sbrk(0) only reads the current break.
        let end = unsafe { sbrk(0) } as u64;
        if (addr as u64) < end {
            released(addr as u64, end - addr as u64);
        }
    }
    match next(c"brk", &NEXT_BRK) {
        0 => -1,
        f => {
            // SAFETY: f is libc's brk, which has this signature.
            let f: unsafe extern "C" fn(*mut c_void) -> c_int = unsafe { std::mem::transmute(f) };
            // SAFETY: the caller's argument, passed on.
            unsafe { f(addr) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_ranges_in_order_and_everything_when_it_fell_behind() {
        watch();
        let mut r = Reader::new();
        // Other tests' threads may record too: look only for ours, in order.
        let base = 0x5555_0000_0000u64;
        released(base, 10);
        released(base + 100, 20);
        let mut seen = Vec::new();
        r.take(|x| seen.push(x));
        let ours: Vec<_> = seen
            .iter()
            .filter(|x| matches!(x, Released::Range(s, _) if *s >= base && *s < base + 1000))
            .collect();
        if !seen.contains(&Released::All) {
            assert_eq!(
                ours,
                vec![&Released::Range(base, 10), &Released::Range(base + 100, 20)]
            );
        }
        for k in 0..(SLOTS as u64 + 1) {
            released(base + k, 1);
        }
        let mut seen = Vec::new();
        r.take(|x| seen.push(x));
        assert_eq!(seen, vec![Released::All]);
        let mut seen = Vec::new();
        r.take(|x| seen.push(x));
        assert!(seen
            .iter()
            .all(|x| !matches!(x, Released::Range(s, _) if *s >= base && *s < base + 1000)));
    }

    #[test]
    fn munmap_through_the_hook_is_recorded_and_still_unmaps() {
        watch();
        let mut r = Reader::new();
        let len = 1 << 16;
        // SAFETY: a fresh anonymous mapping, unmapped below through the exported hook.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: p is our mapping of len bytes, used by nothing else.
        assert_eq!(unsafe { munmap(p, len) }, 0);
        let mut seen = Vec::new();
        r.take(|x| seen.push(x));
        assert!(
            seen.contains(&Released::Range(p as u64, len as u64)) || seen.contains(&Released::All),
            "{seen:?}"
        );
        // Gone: mincore on an unmapped page fails with ENOMEM.
        let mut v = 0u8;
        // SAFETY: mincore only reports on the range; v holds one page's byte.
        let rc = unsafe { libc::mincore(p, 4096, &mut v) };
        assert_eq!(rc, -1);
    }
}
