//! The fast path of RMA operations on a target whose memory is mapped here, for the common
//! case of contiguous predefined data: the same type and count on both sides, a plain call
//! (not an R form). No datatype reference is taken, nothing is flattened or allocated (but
//! Get_accumulate's old values): a few checks on the window's cached view of the target
//! (its mapping, size, unit and lock word), then a copy or the atomics of `apply.rs`.
//! Anything else, including every erroneous call, takes the general path in mod.rs, which
//! checks everything and reports the error; so this path never fails.

use super::direct::{self, Reach};
use super::wire::Kind;
use super::{apply, Call};
use crate::consts::*;
use crate::state::Ferrite;

impl Ferrite {
    /// Does `c` on window `w` if it is the simple case on a mapped target; false: not done,
    /// nothing touched.
    pub(super) fn rma_fast(&mut self, w: MPI_Win, c: &Call) -> bool {
        let objects = &mut self.objects;
        let Ok(win) = objects.wins.get_mut(w) else {
            return false;
        };
        let Some(r) = win.rma.as_mut() else {
            return false;
        };
        let Ok(t) = usize::try_from(c.target) else {
            return false;
        };
        let Some(&Reach::Mapped { base, lock }) = r.reach.get(t) else {
            return false;
        };
        let open = r.fence
            || r.lock_all.is_some()
            || r.locks.contains_key(&(t as u32))
            || r.started.as_ref().is_some_and(|g| g.contains(&(t as u32)));
        if !open || c.tcount <= 0 {
            return false;
        }
        let (size, unit) = r.sizes[t];
        let Some(esize) = objects.datatypes.builtin_size(c.tdt) else {
            return false;
        };
        let bytes = esize as i64 * c.tcount;
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
                unsafe { std::ptr::copy(buf as *const u8, addr as *mut u8, bytes) };
                true
            }
            (Kind::Get, None, Some((buf, ..))) => {
                // SAFETY: as for Put, the other way.
                unsafe { std::ptr::copy(addr as *const u8, buf as *mut u8, bytes) };
                true
            }
            (Kind::Acc | Kind::GetAcc, _, result) => {
                let op = c.op;
                if !crate::coll::op::is_predefined(op)
                    || (c.kind == Kind::Acc && op == MPI_NO_OP)
                    || apply::check_op(op, c.tdt).is_err()
                {
                    return false;
                }
                let input: &[u8] = match origin {
                    // SAFETY: the origin buffer holds `bytes` bytes (checked above).
                    Some((buf, ..)) => unsafe {
                        std::slice::from_raw_parts(buf as *const u8, bytes)
                    },
                    None => &[],
                };
                let runs = [(0isize, bytes)];
                let atomic = apply::use_atomics(addr, &runs, c.tdt);
                // SAFETY: the accumulate lock word lives in the same mapping; held shared when
                // every element is updated by a hardware atomic (see apply::native_size).
                let _g = unsafe { direct::lock(lock, atomic) };
                if let (true, Some(s)) = (atomic, apply::native_size(c.tdt)) {
                    // Old values straight into the result buffer.
                    let out = result.map(|(buf, ..)| {
                        // SAFETY: the result buffer holds `bytes` bytes (checked above).
                        unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, bytes) }
                    });
                    // SAFETY: as for Put; aligned elements (use_atomics), lock held shared.
                    let done = unsafe { apply::atomic_run(addr, bytes, s, op, c.tdt, input, out) };
                    // Cannot fail (the operation was checked above).
                    return done.is_ok();
                }
                // SAFETY: as for Put; the lock is held exclusively.
                let old = unsafe {
                    apply::accumulate(addr, &runs, op, c.tdt, input, result.is_some(), false)
                };
                let Ok(old) = old else {
                    // Cannot happen (the operation was checked); nothing was changed then.
                    return false;
                };
                if let Some((buf, ..)) = result {
                    // SAFETY: the result buffer holds `bytes` bytes (checked above).
                    unsafe { std::ptr::copy(old.as_ptr(), buf as *mut u8, bytes) };
                }
                true
            }
            _ => false,
        }
    }
}
