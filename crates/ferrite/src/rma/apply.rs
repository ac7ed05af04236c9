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
    let undefined = || {
        crate::mpi_err!(
            MPI_ERR_OP,
            "{} is not defined on datatype {:#x} in an accumulate",
            op::name(op),
            basic as u32
        )
    };
    let elem = op::elem_of(basic).ok_or_else(undefined)?;
    op::apply(op, elem, &mut [], &[]).map_err(|_| undefined())
}

/// `cur = input op cur` elementwise for a predefined `op` on elements of predefined type
/// `basic`; MPI_REPLACE copies, MPI_NO_OP leaves `cur`. No elements: nothing to check.
pub fn combine(op: MPI_Op, basic: MPI_Datatype, cur: &mut [u8], input: &[u8]) -> MpiResult<()> {
    if cur.is_empty() {
        return Ok(());
    }
    check_op(op, basic)?;
    match op {
        MPI_NO_OP => Ok(()),
        MPI_REPLACE => {
            let n = cur.len().min(input.len());
            cur[..n].copy_from_slice(&input[..n]);
            Ok(())
        }
        _ => {
            let elem = op::elem_of(basic).expect("checked");
            op::apply(op, elem, cur, input)
                .map_err(|_| MpiError::new(MPI_ERR_OP, "operation not defined on this datatype"))
        }
    }
}

/// Accumulate at `addr`: returns the bytes from before when `fetch`.
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
) -> MpiResult<Vec<u8>> {
    let old = if fetch {
        // SAFETY: per the contract.
        unsafe { gather(addr, runs) }
    } else {
        Vec::new()
    };
    if op == MPI_NO_OP {
        return Ok(old);
    }
    // In place, run by run (runs hold whole elements: the target type has one basic type).
    let mut at = 0;
    for &(off, len) in runs {
        let n = len.min(input.len().saturating_sub(at));
        // SAFETY: per the contract the run is writable memory of ours that `input` does not
        // overlap.
        let cur =
            unsafe { std::slice::from_raw_parts_mut((addr as *mut u8).wrapping_offset(off), n) };
        combine(op, basic, cur, &input[at..at + n])?;
        at += n;
    }
    Ok(old)
}

/// Compare-and-swap of one element: `data` is (new value, compare value); returns the old.
///
/// # Safety
/// As [`gather`] and [`scatter`].
pub unsafe fn compare_and_swap(
    addr: usize,
    runs: &[(isize, usize)],
    data: &[u8],
) -> MpiResult<Vec<u8>> {
    // SAFETY: per the contract.
    let old = unsafe { gather(addr, runs) };
    let n = old.len();
    if data.len() != 2 * n {
        return Err(MpiError::new(
            MPI_ERR_TYPE,
            "compare-and-swap needs one element of the same type on both sides",
        ));
    }
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
        let old = unsafe { accumulate(addr, &runs, MPI_SUM, MPI_INT, &ones, true) }.unwrap();
        assert_eq!(old, vals);
        assert_eq!(mem, [0, 11, 0, 22, 0, 33, 0, 0]);
        // SAFETY: as above.
        unsafe { accumulate(addr, &runs, MPI_NO_OP, MPI_INT, &[], false) }.unwrap();
        assert_eq!(mem, [0, 11, 0, 22, 0, 33, 0, 0]);
        // SAFETY: as above.
        unsafe { accumulate(addr, &runs, MPI_REPLACE, MPI_INT, &ones, false) }.unwrap();
        assert_eq!(mem, [0, 1, 0, 2, 0, 3, 0, 0]);
        // SAFETY: as above.
        let e = unsafe { accumulate(addr, &runs, MPI_BAND, MPI_FLOAT, &ones, false) };
        assert!(e.is_err());
    }

    #[test]
    fn cas_swaps_only_on_equal() {
        let mut x = 5i64;
        let addr = &mut x as *mut i64 as usize;
        let runs = [(0isize, 8usize)];
        let msg = |new: i64, cmp: i64| [new.to_ne_bytes(), cmp.to_ne_bytes()].concat();
        // SAFETY: the run is `x`.
        let old = unsafe { compare_and_swap(addr, &runs, &msg(9, 4)) }.unwrap();
        assert_eq!((old, x), (5i64.to_ne_bytes().to_vec(), 5));
        // SAFETY: as above.
        let old = unsafe { compare_and_swap(addr, &runs, &msg(9, 5)) }.unwrap();
        assert_eq!((old, x), (5i64.to_ne_bytes().to_vec(), 9));
    }
}
