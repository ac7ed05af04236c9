//! The fast path of RMA calls on a target whose memory is mapped here, for the common case
//! of contiguous predefined data: the same type and count on both sides, a plain call (not
//! an R form). It runs without the state lock, on the window's view (view.rs): a few checks
//! on the cached target (its mapping, size, unit, lock word and epoch), then a copy or the
//! atomics of `apply.rs`. No datatype reference is taken, nothing is flattened or allocated
//! (but Get_accumulate's and Compare_and_swap's old values on the exclusive path).
//! Anything else, including every erroneous call, takes the general path in mod.rs, which
//! checks everything under the lock and reports the error; so this path never fails.
//! Flushes with nothing sent by message are a memory fence here too.

use super::direct;
use super::view::{self, View};
use super::wire::Kind;
use super::{apply, Call};
use crate::consts::*;
use std::sync::atomic::Ordering;

/// Does `c` on window `w` if it is the simple case on a mapped target; false: not done,
/// nothing touched.
pub fn op(w: MPI_Win, c: &Call) -> bool {
    if crate::state::is_finalized() {
        return false;
    }
    let Some(v) = view::find(w) else {
        return false;
    };
    let Ok(t) = usize::try_from(c.target) else {
        return false;
    };
    let Some(tv) = v.target(t) else {
        return false;
    };
    let base = tv.base.load(Ordering::Relaxed);
    let lock = tv.lock.load(Ordering::Relaxed);
    let (size, unit) = (
        tv.size.load(Ordering::Relaxed),
        tv.unit.load(Ordering::Relaxed),
    );
    if base == 0 || !v.open(tv) || c.tcount <= 0 || !v.still(w) {
        return false;
    }
    let Some(esize) = view::builtin_size(c.tdt) else {
        return false;
    };
    let Some(bytes) = (esize as i64).checked_mul(c.tcount) else {
        return false;
    };
    // Get_accumulate with MPI_NO_OP ignores its origin buffer.
    let origin = match c.kind {
        Kind::GetAcc if c.op == MPI_NO_OP => None,
        _ => c.origin,
    };
    let same = |side: Option<(usize, i64, MPI_Datatype)>| {
        side.is_none_or(|(buf, n, dt)| buf != 0 && n == c.tcount && dt == c.tdt)
    };
    if !same(origin) || !same(c.result) {
        return false;
    }
    let Some(off) = c.disp.checked_mul(unit) else {
        return false;
    };
    if off < 0 || off.checked_add(bytes).is_none_or(|end| end > size) {
        return false;
    }
    let addr = base + off as usize;
    let bytes = bytes as usize;
    match (c.kind, origin, c.result) {
        (Kind::Put, Some((buf, ..)), None) => {
            // SAFETY: the target range lies inside its window memory, mapped here while
            // the window lives (checked above); the origin buffer holds `bytes` bytes of
            // a contiguous predefined type. `copy`: the two may overlap (a process's own
            // window).
            unsafe { copy(buf, addr, bytes) };
            true
        }
        (Kind::Get, None, Some((buf, ..))) => {
            // SAFETY: as for Put, the other way.
            unsafe { copy(addr, buf, bytes) };
            true
        }
        // Without a lock word the state lock serializes accumulates (view::Target::lock).
        _ if lock == 0 => false,
        (Kind::Acc | Kind::GetAcc, _, result) => {
            let op = c.op;
            // Whether the type supports the operation is checked where the elements are
            // combined, before anything is written (`accumulate`).
            if !crate::coll::op::is_predefined(op) || (c.kind == Kind::Acc && op == MPI_NO_OP) {
                return false;
            }
            // SAFETY: the origin and result buffers hold `bytes` bytes (checked above),
            // the target range lies in the mapped window, the lock word in its mapping.
            unsafe { accumulate(addr, bytes, lock, op, c.tdt, origin, result) }
        }
        (Kind::Cas, Some((buf, ..)), Some((res, ..))) => {
            let Some(cmp) = c.compare else {
                return false;
            };
            // SAFETY: as for Accumulate; the compare buffer holds one element (`bytes`).
            unsafe { compare_and_swap(addr, bytes, lock, c.tdt, buf, cmp, res) }
        }
        _ => false,
    }
}

/// `std::ptr::copy` (source and destination may overlap), without a call into libc for
/// the few-word copies that dominate small operations.
///
/// # Safety
/// As `std::ptr::copy` of `n` bytes.
#[inline(always)]
unsafe fn copy(src: usize, dst: usize, n: usize) {
    // SAFETY: per the contract (every arm); each reads everything before it writes.
    unsafe {
        match n {
            4 => (dst as *mut u32).write_unaligned((src as *const u32).read_unaligned()),
            8 => (dst as *mut u64).write_unaligned((src as *const u64).read_unaligned()),
            16 => (dst as *mut u128).write_unaligned((src as *const u128).read_unaligned()),
            _ if n > COPY_LOOP_MIN && n <= COPY_LOOP_MAX && src.abs_diff(dst) >= n => {
                copy_forward(src, dst, n)
            }
            _ => std::ptr::copy(src as *const u8, dst as *mut u8, n),
        }
    }
}

/// Copies above this size (up to [`COPY_LOOP_MAX`]) go through [`copy_forward`]'s vector
/// loop, not glibc's memcpy. From 2112 bytes (x86_rep_movsb_threshold here) up to the L2
/// size, glibc copies with `rep movsb`, which on this machine's AMD EPYC ran at half the
/// pace of its own vector loop, in cache and out (toggled with GLIBC_TUNABLES
/// x86_rep_movsb_threshold, quiet machine, `rma get_bw SIZE`, GB/s: 4 KiB 13-16 against
/// 34-37; 256 KiB 4.6-7.7 against 9.8-14.4; 512 KiB 5.5-6.9 against 7.7-11.6). Copying in
/// memcpy calls of 2 KiB, below the threshold, won to 128 KiB but lost above (512 KiB 4.4-6.2).
/// Below the threshold the loop still beat memmove from 512 B (`rma get_bw 512`, 6 rounds
/// interleaved: 17.6-22.1 against 13.1-17.1 GB/s; put_bw 18.4-23.4 against 15.2-18.5).
/// Not confirmed why: the bench's window and malloc'd buffer sit 16 bytes apart modulo
/// 4 KiB, where glibc's memmove takes its backward loop and unaligned stores.
const COPY_LOOP_MIN: usize = 256;
/// From here on glibc leaves `rep movsb` on AMD (its vector loop, then non-temporal stores
/// for copies larger than the cache): 1 MiB ran 8.1-10.1 GB/s either way.
const COPY_LOOP_MAX: usize = 1 << 20;

/// Forward copy of `n` (at least 128) bytes, 128 bytes a round in 32-byte vectors, with
/// aligned stores; what glibc's vector loop does, without its choice of `rep movsb`.
///
/// # Safety
/// As `std::ptr::copy_nonoverlapping` of `n` bytes (the ranges do not overlap); `n >= 128`.
#[inline(never)]
unsafe fn copy_forward(src: usize, dst: usize, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: per the contract; the CPU has AVX2.
        return unsafe { copy_forward_avx2(src as *const u8, dst as *mut u8, n) };
    }
    // SAFETY: per the contract.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, n) }
}

/// [`copy_forward`] on a CPU with AVX2.
///
/// # Safety
/// As [`copy_forward`]; the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_forward_avx2(src: *const u8, dst: *mut u8, n: usize) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_store_si256, _mm256_storeu_si256};
    debug_assert!(n >= 128);
    // SAFETY: every access lies in the first `n` bytes of `src` or `dst` (n >= 128); the
    // aligned stores are at `d`, which is 32-byte aligned; the ranges do not overlap, so
    // the head and tail (loaded first, stored last) hold the source's bytes.
    unsafe {
        let ld = |p: *const u8| _mm256_loadu_si256(p as *const __m256i);
        let head = ld(src);
        let end = src.add(n - 128);
        let tail = [ld(end), ld(end.add(32)), ld(end.add(64)), ld(end.add(96))];
        // From the first 32-byte boundary past `dst`; the head covers what comes before.
        let skip = 32 - (dst as usize & 31);
        let (mut s, mut d, mut left) = (src.add(skip), dst.add(skip), n - skip);
        // Four loads, then four stores: no store can be mistaken for a memcpy idiom.
        while left > 128 {
            let v = [ld(s), ld(s.add(32)), ld(s.add(64)), ld(s.add(96))];
            for (i, x) in v.into_iter().enumerate() {
                _mm256_store_si256(d.add(32 * i) as *mut __m256i, x);
            }
            (s, d, left) = (s.add(128), d.add(128), left - 128);
        }
        // What is left (at most 128 bytes) lies within the last 128.
        let dend = dst.add(n - 128);
        for (i, x) in tail.into_iter().enumerate() {
            _mm256_storeu_si256(dend.add(32 * i) as *mut __m256i, x);
        }
        _mm256_storeu_si256(dst as *mut __m256i, head);
    }
}

/// Accumulate or Get_accumulate of `bytes` bytes of `basic` at `addr` (a predefined `op`;
/// whether `basic` supports it is checked here, before anything is written).
///
/// # Safety
/// `addr..addr+bytes` is mapped window memory whose accumulate lock word is `lock`;
/// `origin` and `result` buffers hold `bytes` bytes.
unsafe fn accumulate(
    addr: usize,
    bytes: usize,
    lock: usize,
    op: MPI_Op,
    basic: MPI_Datatype,
    origin: Option<(usize, i64, MPI_Datatype)>,
    result: Option<(usize, i64, MPI_Datatype)>,
) -> bool {
    let overlaps = |a: usize, b: usize| a < b + bytes && b < a + bytes;
    let inp = origin.map(|(buf, ..)| buf);
    let res = result.map(|(buf, ..)| buf);
    let runs = [(0isize, bytes)];
    let atomic = apply::use_atomics(addr, &runs, basic);
    // The exclusive path below reads the input and writes the result and target as
    // separate slices: buffers inside the target (or each other) go the general way.
    if !atomic
        && (inp.is_some_and(|i| overlaps(i, addr))
            || res.is_some_and(|r| overlaps(r, addr) || inp.is_some_and(|i| overlaps(i, r))))
    {
        return false;
    }
    let input: &[u8] = match inp {
        // SAFETY: per the contract.
        Some(buf) => unsafe { std::slice::from_raw_parts(buf as *const u8, bytes) },
        None => &[],
    };
    // SAFETY: per the contract; held shared when every element is updated by a hardware
    // atomic (see apply::native_size).
    let _g = unsafe { direct::lock(lock, atomic) };
    if let (true, Some(s)) = (atomic, apply::native_size(basic)) {
        // Old values straight into the result buffer.
        let out = res.map(|buf| {
            // SAFETY: per the contract.
            unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, bytes) }
        });
        // SAFETY: per the contract; aligned elements (use_atomics), lock held shared.
        let done = unsafe { apply::atomic_run(addr, bytes, s, op, basic, input, out) };
        // An operation the type does not support fails on the first element, before
        // anything is written (every element has the same type).
        return done.is_ok();
    }
    // Exclusive: plain reads and writes, vectorized by `combine`. Nothing is touched when
    // the type does not support the operation (the general path reports that): `combine`
    // checks before it writes, and Get_accumulate checks before its result copy.
    if res.is_some() && apply::check_op(op, basic).is_err() {
        return false;
    }
    // SAFETY: per the contract; the lock is held exclusively; no buffer overlaps the
    // target (checked above).
    let cur = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, bytes) };
    if let Some(buf) = res {
        // SAFETY: per the contract; it overlaps neither the target nor the input.
        unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, bytes) }.copy_from_slice(cur);
    }
    apply::combine(op, basic, cur, input).is_ok()
}

/// Compare_and_swap of one element of `basic` (`bytes` bytes) at `addr`.
///
/// # Safety
/// As for [`accumulate`]; `new`, `cmp` and `res` hold one element each.
unsafe fn compare_and_swap(
    addr: usize,
    bytes: usize,
    lock: usize,
    basic: MPI_Datatype,
    new: usize,
    cmp: usize,
    res: usize,
) -> bool {
    if bytes > 32 {
        return false;
    }
    let mut data = [0u8; 64];
    // SAFETY: per the contract.
    unsafe {
        std::ptr::copy_nonoverlapping(new as *const u8, data.as_mut_ptr(), bytes);
        std::ptr::copy_nonoverlapping(cmp as *const u8, data.as_mut_ptr().add(bytes), bytes);
    }
    let runs = [(0isize, bytes)];
    let atomic = apply::use_atomics(addr, &runs, basic);
    // SAFETY: per the contract; shared only for one aligned native element.
    let _g = unsafe { direct::lock(lock, atomic) };
    // SAFETY: per the contract.
    match unsafe { apply::compare_and_swap(addr, &runs, basic, &data[..2 * bytes], atomic) } {
        Ok(old) => {
            // SAFETY: per the contract.
            unsafe { std::ptr::copy(old.as_ptr(), res as *mut u8, bytes) };
            true
        }
        Err(_) => false,
    }
}

/// MPI_Win_flush(_local)(_all) when nothing went by message: every direct operation is
/// complete already, so a memory fence. False: the general path decides (it also makes the
/// progress pass that every IDLE_FLUSH_PROGRESSth idle flush owes).
pub fn flush(w: MPI_Win, rank: Option<i32>) -> bool {
    if crate::state::is_finalized() {
        return false;
    }
    let Some(v) = view::find(w) else {
        return false;
    };
    let passive = match rank {
        Some(t) => {
            let Some(tv) = usize::try_from(t).ok().and_then(|t| v.target(t)) else {
                return false;
            };
            v.lock_all.load(Ordering::Relaxed)
                || tv.open.load(Ordering::Relaxed) & view::LOCKED != 0
        }
        None => v.lock_all.load(Ordering::Relaxed) || v.locks.load(Ordering::Relaxed) > 0,
    };
    if !passive
        || v.busy.load(Ordering::Relaxed) != 0
        || v.failed.load(Ordering::Relaxed)
        || !v.still(w)
    {
        return false;
    }
    if idle_flush_due(v) {
        return false;
    }
    std::sync::atomic::fence(Ordering::SeqCst);
    true
}

/// Counts an idle flush; true when this one owes a progress pass.
fn idle_flush_due(v: &View) -> bool {
    // A load and a store, not an RMW: threads racing here only miscount.
    let k = v.idle_flushes.load(Ordering::Relaxed).wrapping_add(1);
    v.idle_flushes.store(k, Ordering::Relaxed);
    k.is_multiple_of(super::IDLE_FLUSH_PROGRESS)
}

#[cfg(test)]
mod tests {
    use super::copy;

    /// Every size around the piece boundaries, at odd offsets, overlapping either way or
    /// not: the bytes end up as `std::ptr::copy` puts them.
    #[test]
    fn copy_matches_memmove_at_every_size_and_overlap() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for n in (0..6200).step_by(97).chain([
            255, 256, 257, 300, 383, 384, 385, 512, 2047, 2048, 2049, 4096, 8192,
        ]) {
            for (so, d) in [(3usize, 5000usize), (1, 1), (4000, 3999), (3000, 3001)] {
                let mut a = src.clone();
                let mut b = src.clone();
                let (pa, pb) = (a.as_mut_ptr() as usize, b.as_mut_ptr() as usize);
                // SAFETY: both ranges lie inside the 20,000-byte buffers.
                unsafe {
                    copy(pa + so, pa + d, n);
                    std::ptr::copy((pb + so) as *const u8, (pb + d) as *mut u8, n);
                }
                assert_eq!(a, b, "n {n}, from {so} to {d}");
            }
        }
        // Around the loop's upper bound, every alignment of the destination.
        let big: Vec<u8> = (0..3u32 << 20).map(|i| (i * 13 + i / 4093) as u8).collect();
        for n in [(1 << 20) - 1, 1 << 20, (1 << 20) + 1, 300_001] {
            for d in (0..64).map(|k| (3 << 19) + 32 + k) {
                let mut a = big.clone();
                let pa = a.as_mut_ptr() as usize;
                // SAFETY: both ranges lie inside the buffer (d + n < 3 MiB) and do not meet.
                unsafe { copy(pa + 7, pa + d, n) };
                assert_eq!(a[d..d + n], big[7..7 + n], "n {n} to {d}");
                assert_eq!(a[..d], big[..d], "n {n} to {d}: before");
                assert_eq!(a[d + n..], big[d + n..], "n {n} to {d}: after");
            }
        }
    }
}
