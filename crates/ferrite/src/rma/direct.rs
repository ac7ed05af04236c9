//! Direct access to targets on this host, without the target's participation: window memory
//! that every same-host member maps (MPI_Win_allocate puts it in an anonymous shared file,
//! MPI_Win_allocate_shared has one already) is read and written with loads and stores;
//! memory of MPI_Win_create is reached by cross-memory attach (`process_vm_readv/writev`)
//! for Put and Get. The shared-memory counterpart of RDMA read/write.
//!
//! Accumulates on mapped memory hold the target's accumulate lock word (shared for a few
//! aligned 1-8 byte elements updated by hardware atomics, exclusive otherwise:
//! `apply::native_size` has the rule and why it is atomic across paths), a word in the same
//! shared file, which the target itself also takes when it applies an accumulate that came
//! as a message (from a rank on another host). A waiter sleeps in the kernel (many ranks
//! share few cores), and critical sections never wait for anything else. The same slot holds the
//! target's passive-target lock (`epoch`), so same-host MPI_Win_lock needs no target.

use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes reserved for each lock word (its own cache line).
pub const LOCK_SLOT: usize = 64;

/// `n` rounded up to a lock slot.
pub fn align_slot(n: usize) -> usize {
    n.div_ceil(LOCK_SLOT) * LOCK_SLOT
}

/// How this process reaches one target's window memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Only by messages (another host, dynamic windows, direct access off or refused).
    Messages,
    /// Mapped here at `base`. `lock`: address of the target's accumulate lock word, or 0
    /// when this process is the target and no other process maps the memory (then the state
    /// lock already serializes its accumulates with those it serves).
    Mapped { base: usize, lock: usize },
    /// The target's shared file, not mapped here yet: `len` bytes of `/proc/pid/fd/fd`,
    /// the lock word at offset `lock`.
    File {
        pid: i32,
        fd: i32,
        len: usize,
        lock: usize,
    },
    /// Memory of the target's address space at `base`, reached by cross-memory attach (Put
    /// and Get only; accumulates go by messages, which the target applies itself).
    Cma { pid: i32, base: usize },
}

/// The accumulate lock word: bit 31 = held exclusively, bit 30 = an exclusive taker waits
/// (new shared takers then wait too, so it cannot starve), bit 29 = a taker may be asleep
/// on the word (a release wakes only then: a FUTEX_WAKE per uncontended exclusive release
/// cost a system call per medium accumulate), low bits = shared holders.
const EXCL: u32 = 1 << 31;
const WANT: u32 = 1 << 30;
const SLEEP: u32 = 1 << 29;
const HOLDERS: u32 = SLEEP - 1;

/// Holds an accumulate lock (shared or exclusive); releases it when dropped.
pub struct Guard<'a>(Option<(&'a AtomicU32, bool)>);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let Some((w, shared)) = self.0 else { return };
        let before = if shared {
            w.fetch_sub(1, Ordering::Release)
        } else {
            w.fetch_and(!(EXCL | SLEEP), Ordering::Release)
        };
        // Sleepers wait only while something is held; wake them when it went (the last
        // shared holder, or the exclusive one) and one may sleep. Clearing SLEEP first: a
        // taker that goes to sleep after this sets it again, and then someone holds the
        // word (its wait would fail otherwise), whose release wakes it.
        let last = !shared || (before - 1) & HOLDERS == 0;
        if last && before & SLEEP != 0 {
            if shared {
                w.fetch_and(!SLEEP, Ordering::Relaxed);
            }
            futex(w, libc::FUTEX_WAKE, i32::MAX as u32, None);
        }
    }
}

fn futex(w: &AtomicU32, op: i32, val: u32, timeout: Option<&libc::timespec>) {
    // SAFETY: the futex syscall on a valid, aligned word of memory we have mapped; not
    // FUTEX_PRIVATE, since other processes wait on and wake the same word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            op,
            val,
            timeout.map_or(std::ptr::null(), |t| t as *const libc::timespec),
        )
    };
}

/// Takes the accumulate lock word at `addr` (0: no lock needed, nothing taken): `shared`
/// by operations that update every element with hardware atomics (they may run together),
/// exclusive by those that read and write elements plainly (`apply::use_atomics` decides).
/// A short spin, then FUTEX_WAIT on the word.
///
/// # Safety
/// `addr` is 0 or a 4-byte aligned lock word in shared memory mapped while the guard lives.
pub unsafe fn lock<'a>(addr: usize, shared: bool) -> Guard<'a> {
    if addr == 0 {
        return Guard(None);
    }
    // SAFETY: per the contract.
    let w = unsafe { &*(addr as *const AtomicU32) };
    let mut spins = 0;
    loop {
        let v = w.load(Ordering::Relaxed);
        let free = if shared {
            v & (EXCL | WANT) == 0
        } else {
            v & !(WANT | SLEEP) == 0
        };
        if free {
            // An exclusive taker clears WANT (other exclusive takers asleep set SLEEP and
            // are woken at its release) and keeps SLEEP.
            let next = if shared { v + 1 } else { EXCL | (v & SLEEP) };
            if w.compare_exchange_weak(v, next, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Guard(Some((w, shared)));
            }
            continue;
        }
        if spins < 100 {
            spins += 1;
            std::hint::spin_loop();
            continue;
        }
        // Announce a sleeper (and an exclusive taker), then sleep while the word is that.
        let seen = v | SLEEP | if shared { 0 } else { WANT };
        if seen != v
            && w.compare_exchange(v, seen, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        futex(w, libc::FUTEX_WAIT, seen, None);
    }
}

/// The passive-target lock of a same-host target (MPI_Win_lock granted without the target):
/// a reader-writer ticket lock (Mellor-Crummey and Scott) in the target's lock slot, after
/// its accumulate lock word. Origins are served in arrival order, so neither readers nor
/// writers starve, and consecutive readers hold it together. Words (u32) at `slot + 4`:
/// tickets handed out; `slot + 8`: tickets served (low 16 bits: the next writer's, high
/// 16 bits: the next reader's); `slot + 12`: processes asleep on the served word. A waiter
/// sleeps on the served word (FUTEX_WAIT); a release wakes all sleepers when there are any.
pub mod epoch {
    use super::futex;
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

    fn word(slot: usize, i: usize) -> &'static AtomicU32 {
        // SAFETY: callers pass the lock slot of a mapping that lives as long as the window,
        // which outlives every lock epoch on it; the slot has room for these words.
        unsafe { &*((slot + 4 * i) as *const AtomicU32) }
    }

    /// Takes a place in the queue of the lock at `slot`.
    pub fn ticket(slot: usize) -> u16 {
        word(slot, 1).fetch_add(1, SeqCst) as u16
    }

    /// Whether ticket `me` holds the lock now (exclusive: alone; else with other readers);
    /// Err: not yet, with the served word seen (to sleep on).
    pub fn try_take(slot: usize, me: u16, excl: bool) -> Result<(), u32> {
        let served = word(slot, 2);
        let s = served.load(SeqCst);
        if excl {
            return if s as u16 == me { Ok(()) } else { Err(s) };
        }
        if (s >> 16) as u16 != me {
            return Err(s);
        }
        // Our turn as a reader: let the next reader in (only we move the reader half now;
        // releases move the writer half meanwhile).
        bump(slot, 1 << 16);
        Ok(())
    }

    /// Adds `by` to the served word's halves, each modulo 2^16.
    fn bump(slot: usize, by: u32) {
        let served = word(slot, 2);
        let mut s = served.load(SeqCst);
        loop {
            let lo = (s as u16).wrapping_add(by as u16);
            let hi = ((s >> 16) as u16).wrapping_add((by >> 16) as u16);
            let n = (u32::from(hi) << 16) | u32::from(lo);
            match served.compare_exchange_weak(s, n, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        if word(slot, 3).load(SeqCst) > 0 {
            futex(served, libc::FUTEX_WAKE, i32::MAX as u32, None);
        }
    }

    /// Sleeps until the served word changes from `seen` or `ms` milliseconds pass.
    pub fn sleep(slot: usize, seen: u32, ms: u64) {
        let sleepers = word(slot, 3);
        sleepers.fetch_add(1, SeqCst);
        let ts = libc::timespec {
            tv_sec: (ms / 1000) as libc::time_t,
            tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
        };
        futex(word(slot, 2), libc::FUTEX_WAIT, seen, Some(&ts));
        sleepers.fetch_sub(1, SeqCst);
    }

    /// Ends the holder's epoch: a writer passes on both halves, a reader the writer half.
    pub fn release(slot: usize, excl: bool) {
        bump(slot, if excl { 0x1_0001 } else { 1 });
    }
}

/// Copies the runs at `addr` into `dst`/// Copies the runs at `addr` into `dst` (which holds exactly their bytes), in order.
///
/// # Safety
/// Every run at `addr` is readable; `dst` does not overlap them.
pub unsafe fn gather_into(addr: usize, runs: &[(isize, usize)], dst: &mut [u8]) {
    let mut at = 0;
    for &(off, len) in runs {
        // SAFETY: per the contract; `dst` holds the runs' total.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (addr as *const u8).wrapping_offset(off),
                dst.as_mut_ptr().add(at),
                len,
            )
        };
        at += len;
    }
}

/// Cross-memory attach of the runs at `base` in process `pid`: writes the runs' total of
/// bytes at `data` there (`write`) or reads them into `data`. Err: the kernel refused (see
/// `cma::is_unavailable`) or the remote memory is not mapped.
///
/// # Safety
/// `data` is valid for the runs' total of bytes (writable unless `write`).
pub unsafe fn cma(
    pid: i32,
    base: usize,
    runs: &[(isize, usize)],
    data: *mut u8,
    write: bool,
) -> std::io::Result<()> {
    // IOV_MAX per call.
    const BATCH: usize = 1024;
    let mut at = 0usize;
    for chunk in runs.chunks(BATCH) {
        let remote: Vec<libc::iovec> = chunk
            .iter()
            .map(|&(off, len)| libc::iovec {
                iov_base: base.wrapping_add_signed(off) as *mut libc::c_void,
                iov_len: len,
            })
            .collect();
        let total: usize = chunk.iter().map(|r| r.1).sum();
        let mut done = 0usize;
        while done < total {
            // The remote runs still to do, after `done` bytes of this chunk.
            let mut skip = done;
            let rest: Vec<libc::iovec> = remote
                .iter()
                .filter_map(|v| {
                    if skip >= v.iov_len {
                        skip -= v.iov_len;
                        return None;
                    }
                    let o = std::mem::take(&mut skip);
                    Some(libc::iovec {
                        iov_base: (v.iov_base as usize + o) as *mut libc::c_void,
                        iov_len: v.iov_len - o,
                    })
                })
                .collect();
            let local = libc::iovec {
                iov_base: data.wrapping_add(at + done).cast(),
                iov_len: total - done,
            };
            // SAFETY: `local` is memory of ours valid for its length (written only when
            // reading); the kernel checks `rest` against the other process's mappings.
            let n = unsafe {
                if write {
                    libc::process_vm_writev(
                        pid,
                        &local,
                        1,
                        rest.as_ptr(),
                        rest.len() as libc::c_ulong,
                        0,
                    )
                } else {
                    libc::process_vm_readv(
                        pid,
                        &local,
                        1,
                        rest.as_ptr(),
                        rest.len() as libc::c_ulong,
                        0,
                    )
                }
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
            }
            done += n as usize;
        }
        at += total;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_excludes_threads() {
        let word = Box::leak(Box::new(AtomicU32::new(0)));
        let addr = word as *const AtomicU32 as usize;
        let count = std::sync::Arc::new(std::sync::Mutex::new(0u64));
        let shared = Box::leak(Box::new(std::cell::UnsafeCell::new(0u64))) as *mut _ as usize;
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let count = count.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        // SAFETY: a leaked, aligned word.
                        let _g = unsafe { lock(addr, false) };
                        // SAFETY: the leaked counter is touched only under the lock.
                        unsafe { *(shared as *mut u64) += 1 };
                    }
                    *count.lock().unwrap() += 1;
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: every thread has ended.
        assert_eq!(unsafe { *(shared as *const u64) }, 40_000);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }

    /// A leaked, zeroed lock slot.
    fn slot() -> usize {
        Box::leak(Box::new([0u64; LOCK_SLOT / 8])).as_ptr() as usize
    }

    fn take(slot: usize, excl: bool) {
        let me = epoch::ticket(slot);
        while let Err(seen) = epoch::try_take(slot, me, excl) {
            epoch::sleep(slot, seen, 5);
        }
    }

    #[test]
    fn epoch_lock_excludes_writers_and_shares_readers() {
        let s = slot();
        let inside = Box::leak(Box::new(AtomicU32::new(0))) as *const AtomicU32 as usize;
        let ts: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    // SAFETY: the leaked counter lives forever.
                    let inside = unsafe { &*(inside as *const AtomicU32) };
                    for k in 0..300 {
                        let excl = (i + k) % 3 == 0;
                        take(s, excl);
                        let before =
                            inside.fetch_add(if excl { 1000 } else { 1 }, Ordering::SeqCst);
                        // A writer is alone; a reader never meets a writer.
                        assert!(if excl { before == 0 } else { before < 1000 });
                        std::thread::yield_now();
                        inside.fetch_sub(if excl { 1000 } else { 1 }, Ordering::SeqCst);
                        epoch::release(s, excl);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // Readers hold it together: two shared holders at once.
        take(s, false);
        take(s, false);
        epoch::release(s, false);
        epoch::release(s, false);
        // Served in order: a writer queued behind a reader waits; a later reader waits
        // behind the writer (no writer starvation).
        take(s, false);
        let w = epoch::ticket(s);
        assert!(epoch::try_take(s, w, true).is_err());
        let r = epoch::ticket(s);
        assert!(epoch::try_take(s, r, false).is_err());
        epoch::release(s, false);
        assert!(epoch::try_take(s, w, true).is_ok());
        assert!(epoch::try_take(s, r, false).is_err());
        epoch::release(s, true);
        assert!(epoch::try_take(s, r, false).is_ok());
        epoch::release(s, false);
    }

    #[test]
    fn cma_reads_and_writes_own_memory() {
        let mut target = vec![0u8; 64];
        let base = target.as_mut_ptr() as usize;
        let runs = [(0isize, 4usize), (10, 4), (60, 4)];
        let mut data: Vec<u8> = (1..=12).collect();
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        // SAFETY: `data` holds the runs' 12 bytes; the target is our own vector.
        match unsafe { cma(pid, base, &runs, data.as_mut_ptr(), true) } {
            Err(e) if crate::transport::shm::cma::is_unavailable(&e) => return,
            r => r.unwrap(),
        }
        assert_eq!(&target[0..4], &[1, 2, 3, 4]);
        assert_eq!(&target[10..14], &[5, 6, 7, 8]);
        assert_eq!(&target[60..64], &[9, 10, 11, 12]);
        let mut back = vec![0u8; 12];
        // SAFETY: as above.
        unsafe { cma(pid, base, &runs, back.as_mut_ptr(), false) }.unwrap();
        assert_eq!(back, (1..=12).collect::<Vec<u8>>());
    }
}
