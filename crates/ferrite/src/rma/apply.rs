//! The target side of RMA on local memory: where a request lands (checked against the
//! window, so no request can touch memory outside it), and put, get, accumulate and
//! compare-and-swap over flattened runs.

use crate::coll::op;
use crate::consts::*;
use crate::error::{MpiError, MpiResult};

/// The memory a window exposes in this process.
pub enum Exposed<'a> {
    /// `size` bytes at `base`; displacements count in `disp_unit` bytes.
    Region {
        base: usize,
        size: i64,
        disp_unit: i64,
    },
    /// A dynamic window: displacements are addresses inside attached (base, size) regions.
    Dynamic(&'a [(usize, MPI_Aint)]),
}

/// The address `disp` names, after checking that every run lies inside the window.
pub fn locate(w: &Exposed, disp: i64, runs: &[(isize, usize)]) -> MpiResult<usize> {
    let (lo, hi) = match span(runs) {
        Some(s) => s,
        None => return Ok(0),
    };
    match *w {
        Exposed::Region {
            base,
            size,
            disp_unit,
        } => {
            let start = disp.checked_mul(disp_unit);
            let ok = start.is_some_and(|s| {
                s.checked_add(lo).is_some_and(|a| a >= 0)
                    && s.checked_add(hi).is_some_and(|b| b <= size)
            });
            if !ok {
                return Err(crate::mpi_err!(
                    MPI_ERR_RMA_RANGE,
                    "target displacement {disp} (unit {disp_unit}) with bytes {lo}..{hi} lies outside the window of {size} bytes"
                ));
            }
            Ok(base.wrapping_add(start.unwrap_or(0) as usize))
        }
        Exposed::Dynamic(regions) => {
            let a = disp as i128;
            let (start, end) = (a + lo as i128, a + hi as i128);
            // Attached regions that touch form one range (an access may span them).
            let mut spans: Vec<(i128, i128)> = regions
                .iter()
                .map(|&(b, s)| (b as i128, b as i128 + s as i128))
                .collect();
            spans.sort_unstable();
            let mut merged: Vec<(i128, i128)> = Vec::with_capacity(spans.len());
            for (b, e) in spans {
                match merged.last_mut() {
                    Some(last) if b <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((b, e)),
                }
            }
            let inside = merged.iter().any(|&(b, e)| start >= b && end <= e);
            if !inside {
                return Err(crate::mpi_err!(
                    MPI_ERR_RMA_RANGE,
                    "target address {disp:#x} with bytes {lo}..{hi} is not inside memory attached to the dynamic window"
                ));
            }
            Ok(disp as usize)
        }
    }
}

/// The lowest and highest byte offsets (end exclusive) the runs touch; None if none.
pub fn span(runs: &[(isize, usize)]) -> Option<(i64, i64)> {
    let lo = runs.iter().map(|r| r.0 as i64).min()?;
    let hi = runs.iter().map(|r| r.0 as i64 + r.1 as i64).max()?;
    Some((lo, hi))
}

/// Total bytes of the runs.
pub fn bytes(runs: &[(isize, usize)]) -> usize {
    runs.iter().map(|r| r.1).sum()
}

/// The runs' bytes at `addr`, in order.
///
/// # Safety
/// Every run at `addr` is readable (checked by [`locate`] against the window).
pub unsafe fn gather(addr: usize, runs: &[(isize, usize)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes(runs));
    for &(off, len) in runs {
        // SAFETY: per the contract.
        out.extend_from_slice(unsafe {
            std::slice::from_raw_parts((addr as *const u8).wrapping_offset(off), len)
        });
    }
    out
}

/// Writes `data` over the runs at `addr`, in order (stops when `data` ends).
///
/// # Safety
/// Every run at `addr` is writable and does not overlap `data`.
pub unsafe fn scatter(addr: usize, runs: &[(isize, usize)], data: &[u8]) {
    let mut at = 0;
    for &(off, len) in runs {
        let n = len.min(data.len() - at);
        // SAFETY: per the contract; `n` bytes remain in `data`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr().add(at),
                (addr as *mut u8).wrapping_offset(off),
                n,
            )
        };
        at += n;
        if at == data.len() {
            break;
        }
    }
}

/// Whether predefined `op` applies to elements of predefined type `basic` in an
/// accumulate (MPI_REPLACE and MPI_NO_OP apply to any type).
pub fn check_op(op: MPI_Op, basic: MPI_Datatype) -> MpiResult<()> {
    if op == MPI_NO_OP || op == MPI_REPLACE {
        return Ok(());
    }
    // The common cases without trying the kernel.
    if matches!(op, MPI_SUM | MPI_MAX | MPI_MIN | MPI_PROD)
        && op::elem_of(basic).is_some_and(|e| {
            use op::Elem::*;
            matches!(e, I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64 | F32 | F64)
        })
    {
        return Ok(());
    }
    let elem = op::elem_of(basic).ok_or_else(|| undefined(op, basic))?;
    op::apply(op, elem, &mut [], &[]).map_err(|_| undefined(op, basic))
}

/// The error of an accumulate whose `op` is not defined on `basic`.
fn undefined(op: MPI_Op, basic: MPI_Datatype) -> MpiError {
    crate::mpi_err!(
        MPI_ERR_OP,
        "{} is not defined on datatype {:#x} in an accumulate",
        op::name(op),
        basic as u32
    )
}

/// `cur = input op cur` elementwise for a predefined `op` on elements of predefined type
/// `basic`; MPI_REPLACE copies, MPI_NO_OP leaves `cur`. An `op` not defined on `basic`
/// fails before anything is written (`op::apply` decides before its loop). No elements:
/// nothing to check.
pub fn combine(op: MPI_Op, basic: MPI_Datatype, cur: &mut [u8], input: &[u8]) -> MpiResult<()> {
    if cur.is_empty() {
        return Ok(());
    }
    match op {
        MPI_NO_OP => Ok(()),
        MPI_REPLACE => {
            let n = cur.len().min(input.len());
            cur[..n].copy_from_slice(&input[..n]);
            Ok(())
        }
        _ => {
            let elem = op::elem_of(basic).ok_or_else(|| undefined(op, basic))?;
            op::apply(op, elem, cur, input).map_err(|_| undefined(op, basic))
        }
    }
}

/// Element atomicity of accumulates (MPI 4.1 12.7.1: accumulate operations on one location
/// with the same predefined type are atomic per element). Every accumulate, whatever path
/// runs it (an origin's fast or general direct path, the target serving a message), holds
/// the target's accumulate lock word (direct.rs), in one of two modes:
/// - shared, when [`use_atomics`] says so: every element is of a predefined type of 1, 2, 4
///   or 8 bytes at an address aligned to its size, and there is one of them (Fetch_and_op,
///   Compare_and_swap, one-element accumulates); it is then updated by one hardware atomic
///   read-modify-write (fetch_add/and/or/xor, swap, load, or a compare-exchange loop around
///   the operation). Shared holders run together and are atomic with respect to each other
///   because each element's update is one atomic.
/// - exclusive, otherwise (long double, 16-byte pairs, unaligned elements, or more than one
///   element): the elements are read and written plainly, vectorized, with no other holder.
///
/// So any two accumulates on one element either exclude each other or both update it
/// atomically. From two elements on, the exclusive mode costs less: its two atomics (take
/// and release) and a plain loop, against one locked read-modify-write (or compare-exchange
/// loop) per element plus the shared take and release, as Open MPI's osc/sm takes one lock
/// per accumulate. One element keeps the shared mode: concurrent Fetch_and_op counters on
/// different elements do not serialize on the word beyond its cache line, and a holder
/// descheduled mid-update stalls nobody.
pub fn native_size(basic: MPI_Datatype) -> Option<usize> {
    let h = basic as u32;
    if h & 0xffff_0000 != 0x4c00_0000 {
        return None;
    }
    let s = ((h >> 8) & 0xff) as usize;
    matches!(s, 1 | 2 | 4 | 8).then_some(s)
}

/// At most this many elements take the shared mode (see [`native_size`]).
const ATOMIC_MAX: usize = 1;

/// Whether an accumulate on the runs at `addr` updates its elements with hardware atomics
/// under the shared lock (else plainly under the exclusive one): see [`native_size`].
pub fn use_atomics(addr: usize, runs: &[(isize, usize)], basic: MPI_Datatype) -> bool {
    native_size(basic).is_some_and(|s| {
        bytes(runs) <= ATOMIC_MAX * s
            && runs.iter().all(|&(off, len)| {
                addr.wrapping_add_signed(off).is_multiple_of(s) && len.is_multiple_of(s)
            })
    })
}

/// Whether every element of the runs at `addr` could be updated by a hardware atomic.
fn all_native(addr: usize, runs: &[(isize, usize)], basic: MPI_Datatype) -> bool {
    native_size(basic).is_some_and(|s| {
        runs.iter().all(|&(off, len)| {
            addr.wrapping_add_signed(off).is_multiple_of(s) && len.is_multiple_of(s)
        })
    })
}

/// `n` bytes of elements of `s` bytes at `at` (aligned), each updated by [`atomic_elem`]
/// with its element of `input` (unused for MPI_NO_OP); old values to `old` when given.
///
/// # Safety
/// As [`atomic_elem`] for each element.
pub unsafe fn atomic_run(
    at: usize,
    n: usize,
    s: usize,
    op: MPI_Op,
    basic: MPI_Datatype,
    input: &[u8],
    mut old: Option<&mut [u8]>,
) -> MpiResult<()> {
    let elem = op::elem_of(basic);
    let mut scratch = [0u8; 8];
    for e in (0..n).step_by(s) {
        let inp: &[u8] = if op == MPI_NO_OP {
            &[]
        } else {
            &input[e..e + s]
        };
        let dst = match old.as_deref_mut() {
            Some(o) => &mut o[e..e + s],
            None => &mut scratch[..s],
        };
        // SAFETY: per the contract.
        unsafe { atomic_elem(at + e, s, op, elem, inp, dst)? };
    }
    Ok(())
}

/// One element at `at` (`s` bytes, aligned): `*at = input op *at` as one atomic
/// read-modify-write; the value from before goes to `old`.
///
/// # Safety
/// `at` is valid, writable memory of `s` bytes aligned to `s`, accessed concurrently only by
/// atomics (see [`native_size`]).
#[inline]
unsafe fn atomic_elem(
    at: usize,
    s: usize,
    op: MPI_Op,
    elem: Option<op::Elem>,
    input: &[u8],
    old: &mut [u8],
) -> MpiResult<()> {
    use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::*};
    macro_rules! rmw {
        ($a:ty, $u:ty) => {{
            // SAFETY: per the contract.
            let a = unsafe { &*(at as *const $a) };
            let int = elem.is_some_and(|e| {
                use op::Elem::*;
                matches!(e, I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64)
            });
            let prev = match op {
                MPI_NO_OP => a.load(SeqCst),
                MPI_REPLACE => a.swap(<$u>::from_ne_bytes(input.try_into().expect("s")), SeqCst),
                // Two's complement: the same bits for signed and unsigned elements.
                MPI_SUM if int => {
                    a.fetch_add(<$u>::from_ne_bytes(input.try_into().expect("s")), SeqCst)
                }
                MPI_BAND if int => {
                    a.fetch_and(<$u>::from_ne_bytes(input.try_into().expect("s")), SeqCst)
                }
                MPI_BOR if int => {
                    a.fetch_or(<$u>::from_ne_bytes(input.try_into().expect("s")), SeqCst)
                }
                MPI_BXOR if int => {
                    a.fetch_xor(<$u>::from_ne_bytes(input.try_into().expect("s")), SeqCst)
                }
                MPI_SUM if elem == Some(op::Elem::F64) && s == 8 => {
                    let add = f64::from_ne_bytes(input.try_into().expect("s"));
                    let mut cur = a.load(Relaxed);
                    loop {
                        let new = (f64::from_bits(cur as u64) + add).to_bits() as $u;
                        match a.compare_exchange_weak(cur, new, SeqCst, Relaxed) {
                            Ok(_) => break cur,
                            Err(now) => cur = now,
                        }
                    }
                }
                _ => {
                    let elem = elem.ok_or_else(|| {
                        MpiError::new(MPI_ERR_OP, "operation not defined on this datatype")
                    })?;
                    let mut cur = a.load(Relaxed);
                    loop {
                        let mut b = cur.to_ne_bytes();
                        op::apply(op, elem, &mut b, input).map_err(|_| {
                            MpiError::new(MPI_ERR_OP, "operation not defined on this datatype")
                        })?;
                        match a.compare_exchange_weak(cur, <$u>::from_ne_bytes(b), SeqCst, Relaxed)
                        {
                            Ok(_) => break cur,
                            Err(now) => cur = now,
                        }
                    }
                }
            };
            old.copy_from_slice(&prev.to_ne_bytes());
        }};
    }
    match s {
        1 => rmw!(AtomicU8, u8),
        2 => rmw!(AtomicU16, u16),
        4 => rmw!(AtomicU32, u32),
        _ => rmw!(AtomicU64, u64),
    }
    Ok(())
}

/// Accumulate at `addr`: returns the bytes from before when `fetch`. With `atomic` (the
/// caller checked [`use_atomics`] and holds the lock word shared) each element is updated
/// by a hardware atomic; else plainly (the caller holds it exclusively).
///
/// # Safety
/// As [`gather`] and [`scatter`].
pub unsafe fn accumulate(
    addr: usize,
    runs: &[(isize, usize)],
    op: MPI_Op,
    basic: MPI_Datatype,
    input: &[u8],
    fetch: bool,
    atomic: bool,
) -> MpiResult<Vec<u8>> {
    let mut old = Vec::new();
    if op == MPI_NO_OP && !fetch {
        return Ok(old);
    }
    let total = bytes(runs);
    if total > 0 && op != MPI_NO_OP {
        check_op(op, basic)?;
    }
    let native = native_size(basic).filter(|_| atomic && all_native(addr, runs, basic));
    if fetch {
        old.resize(total, 0);
    }
    // In place, run by run (runs hold whole elements: the target type has one basic type).
    let mut at = 0;
    for &(off, len) in runs {
        let run = addr.wrapping_add_signed(off);
        let n = if op == MPI_NO_OP {
            len
        } else {
            len.min(input.len().saturating_sub(at))
        };
        match native {
            Some(s) if run.is_multiple_of(s) && n.is_multiple_of(s) => {
                let inp = if op == MPI_NO_OP {
                    &[][..]
                } else {
                    &input[at..at + n]
                };
                let dst = fetch.then(|| &mut old[at..at + n]);
                // SAFETY: per the contract the elements are our writable memory, aligned
                // (checked), and other processes touch them only with atomics.
                unsafe { atomic_run(run, n, s, op, basic, inp, dst)? };
            }
            _ => {
                // SAFETY: per the contract the run is writable memory of ours that `input`
                // does not overlap; the caller holds the lock word.
                let cur = unsafe { std::slice::from_raw_parts_mut(run as *mut u8, n) };
                if fetch {
                    old[at..at + n].copy_from_slice(cur);
                }
                if op != MPI_NO_OP {
                    combine(op, basic, cur, &input[at..at + n])?;
                }
            }
        }
        at += n;
    }
    Ok(old)
}

/// Compare-and-swap of one element of type `basic`: `data` is (new value, compare value);
/// returns the old. With `atomic` (see [`accumulate`]) by one hardware compare-exchange.
///
/// # Safety
/// As [`gather`] and [`scatter`].
pub unsafe fn compare_and_swap(
    addr: usize,
    runs: &[(isize, usize)],
    basic: MPI_Datatype,
    data: &[u8],
    atomic: bool,
) -> MpiResult<Vec<u8>> {
    use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::SeqCst};
    let n = bytes(runs);
    if data.len() != 2 * n {
        return Err(MpiError::new(
            MPI_ERR_TYPE,
            "compare-and-swap needs one element of the same type on both sides",
        ));
    }
    if let (Some(s), [(off, len)], true) = (native_size(basic), runs, atomic) {
        let at = addr.wrapping_add_signed(*off);
        if *len == s && at.is_multiple_of(s) {
            macro_rules! cas {
                ($a:ty, $u:ty) => {{
                    let new = <$u>::from_ne_bytes(data[..s].try_into().expect("s"));
                    let cmp = <$u>::from_ne_bytes(data[s..].try_into().expect("s"));
                    // SAFETY: per the contract; aligned (checked); touched concurrently only
                    // by atomics (see `native_size`).
                    let a = unsafe { &*(at as *const $a) };
                    let prev = a
                        .compare_exchange(cmp, new, SeqCst, SeqCst)
                        .unwrap_or_else(|v| v);
                    return Ok(prev.to_ne_bytes().to_vec());
                }};
            }
            match s {
                1 => cas!(AtomicU8, u8),
                2 => cas!(AtomicU16, u16),
                4 => cas!(AtomicU32, u32),
                _ => cas!(AtomicU64, u64),
            }
        }
    }
    // SAFETY: per the contract.
    let old = unsafe { gather(addr, runs) };
    if old[..] == data[n..] {
        // SAFETY: per the contract.
        unsafe { scatter(addr, runs, &data[..n]) };
    }
    Ok(old)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(mem: &mut [u8], unit: i64) -> Exposed<'static> {
        Exposed::Region {
            base: mem.as_mut_ptr() as usize,
            size: mem.len() as i64,
            disp_unit: unit,
        }
    }

    #[test]
    fn range_is_checked() {
        let mut mem = vec![0u8; 64];
        let w = region(&mut mem, 4);
        assert!(locate(&w, 0, &[(0, 64)]).is_ok());
        assert!(locate(&w, 15, &[(0, 4)]).is_ok());
        assert_eq!(
            locate(&w, 15, &[(0, 5)]).unwrap_err().class,
            MPI_ERR_RMA_RANGE
        );
        assert_eq!(
            locate(&w, -1, &[(0, 4)]).unwrap_err().class,
            MPI_ERR_RMA_RANGE
        );
        assert_eq!(
            locate(&w, 1, &[(-8, 4)]).unwrap_err().class,
            MPI_ERR_RMA_RANGE
        );
        assert_eq!(
            locate(&w, i64::MAX, &[(0, 1)]).unwrap_err().class,
            MPI_ERR_RMA_RANGE
        );
        // Nothing to touch: anywhere is fine.
        assert!(locate(&w, 1000, &[]).is_ok());
        let regions = [(0x1010usize, 16 as MPI_Aint), (0x1000, 16), (0x1040, 8)];
        let d = Exposed::Dynamic(&regions);
        assert!(locate(&d, 0x1008, &[(0, 8)]).is_ok());
        // Adjacent regions together: 0x1000..0x1020.
        assert!(locate(&d, 0x1008, &[(0, 24)]).is_ok());
        assert!(locate(&d, 0x1008, &[(0, 25)]).is_err());
        assert!(locate(&d, 0x1020, &[(0, 1)]).is_err());
        assert!(locate(&d, 0x1040, &[(0, 8)]).is_ok());
    }

    #[test]
    fn strided_put_get_and_accumulate() {
        let mut mem = [0i32; 8];
        let addr = mem.as_mut_ptr() as usize;
        // Elements 1, 3, 5 (4 bytes at 4, 12, 20).
        let runs = [(4isize, 4usize), (12, 4), (20, 4)];
        let vals: Vec<u8> = [10i32, 20, 30]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        // SAFETY: the runs lie inside `mem`.
        unsafe { scatter(addr, &runs, &vals) };
        assert_eq!(mem, [0, 10, 0, 20, 0, 30, 0, 0]);
        // SAFETY: as above.
        assert_eq!(unsafe { gather(addr, &runs) }, vals);
        let ones: Vec<u8> = [1i32, 2, 3].iter().flat_map(|v| v.to_ne_bytes()).collect();
        // SAFETY: as above.
        let old = unsafe { accumulate(addr, &runs, MPI_SUM, MPI_INT, &ones, true, false) }.unwrap();
        assert_eq!(old, vals);
        assert_eq!(mem, [0, 11, 0, 22, 0, 33, 0, 0]);
        // SAFETY: as above.
        unsafe { accumulate(addr, &runs, MPI_NO_OP, MPI_INT, &[], false, true) }.unwrap();
        assert_eq!(mem, [0, 11, 0, 22, 0, 33, 0, 0]);
        // SAFETY: as above.
        unsafe { accumulate(addr, &runs, MPI_REPLACE, MPI_INT, &ones, false, true) }.unwrap();
        assert_eq!(mem, [0, 1, 0, 2, 0, 3, 0, 0]);
        // SAFETY: as above.
        let e = unsafe { accumulate(addr, &runs, MPI_BAND, MPI_FLOAT, &ones, false, false) };
        assert!(e.is_err());
    }

    /// Threads add to the same elements by every mode at once, each holding the lock word
    /// as the paths do: hardware atomics under the shared lock (accumulate, per-element
    /// runs, compare-and-swap loops) against plain combines under the exclusive lock; and
    /// long doubles (never atomic) under the exclusive lock. Sums are exact.
    #[test]
    fn atomic_and_plain_accumulates_are_atomic_together() {
        use super::super::direct;
        let mem = Box::leak(Box::new([0i64; 4])).as_mut_ptr() as usize;
        let ld = Box::leak(Box::new([0u8; 32])).as_mut_ptr() as usize;
        let word = Box::leak(Box::new(0u64)) as *mut u64 as usize;
        assert!(use_atomics(mem, &[(0, 8)], MPI_LONG));
        assert!(!use_atomics(mem + 4, &[(0, 8)], MPI_LONG));
        assert!(!use_atomics(mem, &[(0, 16)], MPI_LONG));
        assert!(!use_atomics(mem, &[(0, 8), (8, 8)], MPI_LONG));
        assert!(!use_atomics(ld, &[(0, 16)], MPI_LONG_DOUBLE));
        const N: i64 = 2000;
        let ts: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    let one = 1i64.to_ne_bytes();
                    let ones = [one, one].concat();
                    let ld_one = {
                        // 1.0 as an x87 long double: exponent 0x3fff, explicit integer bit.
                        let mut b = [0u8; 16];
                        b[7] = 0x80;
                        b[8] = 0xff;
                        b[9] = 0x3f;
                        b
                    };
                    let run = [(0isize, 16usize)];
                    for _ in 0..N {
                        // SAFETY: the leaked arrays live forever; aligned.
                        unsafe {
                            match i {
                                0 => {
                                    let _g = direct::lock(word, true);
                                    accumulate(mem, &run, MPI_SUM, MPI_LONG, &ones, false, true)
                                        .unwrap();
                                }
                                1 => {
                                    let _g = direct::lock(word, false);
                                    accumulate(mem, &run, MPI_SUM, MPI_LONG, &ones, true, false)
                                        .unwrap();
                                }
                                2 => {
                                    let _g = direct::lock(word, true);
                                    atomic_run(mem, 8, 8, MPI_SUM, MPI_LONG, &one, None).unwrap();
                                    atomic_run(mem + 8, 8, 8, MPI_SUM, MPI_LONG, &one, None)
                                        .unwrap();
                                }
                                _ => loop {
                                    let _g = direct::lock(word, true);
                                    let cur = (*(mem as *const std::sync::atomic::AtomicI64))
                                        .load(std::sync::atomic::Ordering::SeqCst);
                                    let msg = [(cur + 1).to_ne_bytes(), cur.to_ne_bytes()].concat();
                                    let old =
                                        compare_and_swap(mem, &[(0, 8)], MPI_LONG, &msg, true)
                                            .unwrap();
                                    if old == cur.to_ne_bytes() {
                                        let r = [(8isize, 8usize)];
                                        accumulate(mem, &r, MPI_SUM, MPI_LONG, &one, false, true)
                                            .unwrap();
                                        break;
                                    }
                                },
                            }
                            let _g = direct::lock(word, false);
                            accumulate(ld, &run, MPI_SUM, MPI_LONG_DOUBLE, &ld_one, false, false)
                                .unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: every thread has ended.
        let m = unsafe { std::slice::from_raw_parts(mem as *const i64, 2) };
        assert_eq!(m, [4 * N, 4 * N]);
        // The long double sum, compared as the bytes of 4N accumulated the same way.
        let mut want = [0u8; 16];
        let one = {
            let mut b = [0u8; 16];
            b[7] = 0x80;
            b[8] = 0xff;
            b[9] = 0x3f;
            b
        };
        for _ in 0..4 * N {
            combine(MPI_SUM, MPI_LONG_DOUBLE, &mut want, &one).unwrap();
        }
        // SAFETY: as above.
        let got = unsafe { std::slice::from_raw_parts(ld as *const u8, 10) };
        assert_eq!(got, &want[..10]);
    }

    #[test]
    fn cas_swaps_only_on_equal() {
        let mut x = 5i64;
        let addr = &mut x as *mut i64 as usize;
        let runs = [(0isize, 8usize)];
        let msg = |new: i64, cmp: i64| [new.to_ne_bytes(), cmp.to_ne_bytes()].concat();
        // SAFETY: the run is `x`.
        let old = unsafe { compare_and_swap(addr, &runs, MPI_INT64_T, &msg(9, 4), true) }.unwrap();
        assert_eq!((old, x), (5i64.to_ne_bytes().to_vec(), 5));
        // SAFETY: as above.
        let old = unsafe { compare_and_swap(addr, &runs, MPI_INT64_T, &msg(9, 5), false) }.unwrap();
        assert_eq!((old, x), (5i64.to_ne_bytes().to_vec(), 9));
    }
}
