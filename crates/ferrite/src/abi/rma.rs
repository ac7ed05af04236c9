//! RMA at the C edge (MPI 4.1 chapter 12): communication calls (Put, Get, Accumulate,
//! Get_accumulate, Fetch_and_op, Compare_and_swap, their request-based R forms and the
//! large-count _c forms) and synchronization (fence, lock, PSCW, flush, sync). They check
//! pointers, reduce to `rma::Call` and run in rma/mod.rs; errors go to the window's handler.

use super::consts::*;
use super::out;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::rma::wire::Kind;
use crate::rma::Call;
use crate::state;
use std::ffi::c_void;
use std::os::raw::c_int;

/// Runs `c` on `win`; with `request` (the R forms), stores the request made.
///
/// # Safety
/// `request` is null or valid for one write; the buffers in `c` are what the MPI call
/// describes.
unsafe fn call(win: MPI_Win, c: Call, request: Option<*mut MPI_Request>) -> MpiResult<()> {
    // The common same-host case without the state lock (rma/fast.rs); anything else, and
    // every error, goes the general way.
    if request.is_none() && crate::rma::fast::op(win, &c) {
        return Ok(());
    }
    if let Some(r) = request {
        if r.is_null() {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                "null pointer passed for request",
            ));
        }
    }
    let h = state::with(|st| st.rma_call(win, c, request.is_some()))?;
    match request {
        // SAFETY: checked non-null above; the caller passes an MPI_Request*.
        Some(r) => unsafe { out(r, h) },
        None => Ok(()),
    }
}

#[allow(clippy::too_many_arguments)]
fn data(
    kind: Kind,
    origin: Option<(*const c_void, i64, MPI_Datatype)>,
    result: Option<(*mut c_void, i64, MPI_Datatype)>,
    target: c_int,
    disp: MPI_Aint,
    tcount: i64,
    tdt: MPI_Datatype,
    op: MPI_Op,
) -> Call {
    Call {
        kind,
        origin: origin.map(|(b, n, d)| (b as usize, n, d)),
        compare: None,
        result: result.map(|(b, n, d)| (b as usize, n, d)),
        target,
        disp,
        tcount,
        tdt,
        op,
    }
}

mpi_fn! {
    fn MPI_Put, fn MPI_Put_c(origin_addr: *const c_void, origin_count: Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: Count,
        target_datatype: MPI_Datatype, win: MPI_Win) on ErrObj::Win(win) => {
        let c = data(Kind::Put, Some((origin_addr, i64::from(origin_count), origin_datatype)), None,
            target_rank, target_disp, i64::from(target_count), target_datatype, MPI_REPLACE);
        // SAFETY: the caller's buffers are as the MPI call describes.
        unsafe { call(win, c, None) }
    }
}

mpi_fn! {
    fn MPI_Rput, fn MPI_Rput_c(origin_addr: *const c_void, origin_count: Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: Count,
        target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request) on ErrObj::Win(win) => {
        let c = data(Kind::Put, Some((origin_addr, i64::from(origin_count), origin_datatype)), None,
            target_rank, target_disp, i64::from(target_count), target_datatype, MPI_REPLACE);
        // SAFETY: the caller's buffers are as the MPI call describes.
        unsafe { call(win, c, Some(request)) }
    }
}

mpi_fn! {
    fn MPI_Get, fn MPI_Get_c(origin_addr: *mut c_void, origin_count: Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: Count,
        target_datatype: MPI_Datatype, win: MPI_Win) on ErrObj::Win(win) => {
        let c = data(Kind::Get, None, Some((origin_addr, i64::from(origin_count), origin_datatype)),
            target_rank, target_disp, i64::from(target_count), target_datatype, MPI_NO_OP);
        // SAFETY: the caller's buffers are as the MPI call describes.
        unsafe { call(win, c, None) }
    }
}

mpi_fn! {
    fn MPI_Rget, fn MPI_Rget_c(origin_addr: *mut c_void, origin_count: Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: Count,
        target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request) on ErrObj::Win(win) => {
        let c = data(Kind::Get, None, Some((origin_addr, i64::from(origin_count), origin_datatype)),
            target_rank, target_disp, i64::from(target_count), target_datatype, MPI_NO_OP);
        // SAFETY: the caller's buffers are as the MPI call describes.
        unsafe { call(win, c, Some(request)) }
    }
}

mpi_fn! {
    fn MPI_Accumulate, fn MPI_Accumulate_c(origin_addr: *const c_void, origin_count: Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: Count,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win) on ErrObj::Win(win) => {
        let c = data(Kind::Acc, Some((origin_addr, i64::from(origin_count), origin_datatype)), None,
            target_rank, target_disp, i64::from(target_count), target_datatype, op);
        // SAFETY: the caller's buffers are as the MPI call describes.
        unsafe { call(win, c, None) }
    }
}

mpi_fn! {
    fn MPI_Raccumulate, fn MPI_Raccumulate_c(origin_addr: *const c_void, origin_count: Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: Count,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request) on ErrObj::Win(win) => {
        let c = data(Kind::Acc, Some((origin_addr, i64::from(origin_count), origin_datatype)), None,
            target_rank, target_disp, i64::from(target_count), target_datatype, op);
        // SAFETY: the caller's buffers are as the MPI call describes.
        unsafe { call(win, c, Some(request)) }
    }
}

mpi_fn! {
    fn MPI_Get_accumulate, fn MPI_Get_accumulate_c(origin_addr: *const c_void, origin_count: Count, origin_datatype: MPI_Datatype,
        result_addr: *mut c_void, result_count: Count, result_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: Count,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win) on ErrObj::Win(win) => {
        let c = data(Kind::GetAcc, Some((origin_addr, i64::from(origin_count), origin_datatype)),
            Some((result_addr, i64::from(result_count), result_datatype)),
            target_rank, target_disp, i64::from(target_count), target_datatype, op);
        // SAFETY: the caller's buffers are as the MPI call describes.
        unsafe { call(win, c, None) }
    }
}

mpi_fn! {
    fn MPI_Rget_accumulate, fn MPI_Rget_accumulate_c(origin_addr: *const c_void, origin_count: Count, origin_datatype: MPI_Datatype,
        result_addr: *mut c_void, result_count: Count, result_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: Count,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request) on ErrObj::Win(win) => {
        let c = data(Kind::GetAcc, Some((origin_addr, i64::from(origin_count), origin_datatype)),
            Some((result_addr, i64::from(result_count), result_datatype)),
            target_rank, target_disp, i64::from(target_count), target_datatype, op);
        // SAFETY: the caller's buffers are as the MPI call describes.
        unsafe { call(win, c, Some(request)) }
    }
}

mpi_fn! {
    fn MPI_Fetch_and_op(origin_addr: *const c_void, result_addr: *mut c_void,
        datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, op: MPI_Op,
        win: MPI_Win) on ErrObj::Win(win) => {
        let c = data(Kind::GetAcc, Some((origin_addr, 1, datatype)), Some((result_addr, 1, datatype)),
            target_rank, target_disp, 1, datatype, op);
        // SAFETY: the caller's buffers hold one element of `datatype`.
        unsafe { call(win, c, None) }
    }
}

mpi_fn! {
    fn MPI_Compare_and_swap(origin_addr: *const c_void, compare_addr: *const c_void,
        result_addr: *mut c_void, datatype: MPI_Datatype, target_rank: c_int,
        target_disp: MPI_Aint, win: MPI_Win) on ErrObj::Win(win) => {
        if compare_addr.is_null() {
            return Err(MpiError::new(MPI_ERR_BUFFER, "null compare_addr"));
        }
        let mut c = data(Kind::Cas, Some((origin_addr, 1, datatype)), Some((result_addr, 1, datatype)),
            target_rank, target_disp, 1, datatype, MPI_REPLACE);
        c.compare = Some(compare_addr as usize);
        // A datatype the fast path takes is predefined (no check under the lock needed).
        if crate::rma::fast::op(win, &c) {
            return Ok(());
        }
        let dt_ok = state::with(|st| Ok(st.comm_datatype(datatype)?.envelope.is_none()))?;
        if !dt_ok {
            return Err(MpiError::new(MPI_ERR_TYPE,
                "MPI_Compare_and_swap needs a predefined datatype"));
        }
        // SAFETY: the caller's buffers hold one element of `datatype`.
        unsafe { call(win, c, None) }
    }
}

mpi_fn! {
    fn MPI_Win_fence(assert: c_int, win: MPI_Win) on ErrObj::Win(win) => {
        state::with_held(|st| st.rma_fence(win, assert))
    }
}

mpi_fn! {
    fn MPI_Win_lock(lock_type: c_int, rank: c_int, assert: c_int, win: MPI_Win)
        on ErrObj::Win(win) => {
        state::with_held(|st| st.rma_lock(win, lock_type, rank, assert))
    }
}

mpi_fn! {
    fn MPI_Win_unlock(rank: c_int, win: MPI_Win) on ErrObj::Win(win) => {
        state::with_held(|st| st.rma_unlock(win, rank))
    }
}

mpi_fn! {
    fn MPI_Win_lock_all(assert: c_int, win: MPI_Win) on ErrObj::Win(win) => {
        state::with_held(|st| st.rma_lock_all(win, assert))
    }
}

mpi_fn! {
    fn MPI_Win_unlock_all(win: MPI_Win) on ErrObj::Win(win) => {
        state::with_held(|st| st.rma_unlock_all(win))
    }
}

mpi_fn! {
    fn MPI_Win_flush(rank: c_int, win: MPI_Win) on ErrObj::Win(win) => {
        if crate::rma::fast::flush(win, Some(rank)) {
            return Ok(());
        }
        state::with_held(|st| st.rma_flush(win, Some(rank)))
    }
}

mpi_fn! {
    fn MPI_Win_flush_local(rank: c_int, win: MPI_Win) on ErrObj::Win(win) => {
        if crate::rma::fast::flush(win, Some(rank)) {
            return Ok(());
        }
        state::with_held(|st| st.rma_flush(win, Some(rank)))
    }
}

mpi_fn! {
    fn MPI_Win_flush_all(win: MPI_Win) on ErrObj::Win(win) => {
        if crate::rma::fast::flush(win, None) {
            return Ok(());
        }
        state::with_held(|st| st.rma_flush(win, None))
    }
}

mpi_fn! {
    fn MPI_Win_flush_local_all(win: MPI_Win) on ErrObj::Win(win) => {
        if crate::rma::fast::flush(win, None) {
            return Ok(());
        }
        state::with_held(|st| st.rma_flush(win, None))
    }
}

mpi_fn! {
    fn MPI_Win_sync(win: MPI_Win) on ErrObj::Win(win) => {
        state::with(|st| st.objects.wins.get(win).map(|_| ()))?;
        // The window's public and private copies are one (MPI_WIN_UNIFIED): only order
        // this process's loads and stores against other processes' accesses.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Win_post(group: MPI_Group, assert: c_int, win: MPI_Win) on ErrObj::Win(win) => {
        state::with(|st| st.rma_post(win, group, assert))
    }
}

mpi_fn! {
    fn MPI_Win_start(group: MPI_Group, assert: c_int, win: MPI_Win) on ErrObj::Win(win) => {
        state::with_held(|st| st.rma_start(win, group, assert))
    }
}

mpi_fn! {
    fn MPI_Win_complete(win: MPI_Win) on ErrObj::Win(win) => {
        state::with_held(|st| st.rma_complete(win))
    }
}

mpi_fn! {
    fn MPI_Win_wait(win: MPI_Win) on ErrObj::Win(win) => {
        state::with_held(|st| st.rma_wait_post(win, true).map(|_| ()))
    }
}

mpi_fn! {
    fn MPI_Win_test(win: MPI_Win, flag: *mut c_int) on ErrObj::Win(win) => {
        if flag.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for flag"));
        }
        let done = state::with_held(|st| st.rma_wait_post(win, false))?;
        // SAFETY: non-null; the caller passes an int*.
        unsafe { out(flag, c_int::from(done)) }
    }
}
