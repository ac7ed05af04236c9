//! Collective operations and reduction operations at the C edge (MPI 4.1 chapter 6):
//! every collective in its blocking, nonblocking (MPI_I...) and persistent (..._init) form,
//! Op_create/free/commutative and Reduce_local. The plans are made in coll/plans.rs; the
//! three forms differ only in how the plan runs (coll/mod.rs).

use super::consts::*;
use super::out;
use crate::coll::plans::{self, Arr, Ngh, Side};
use crate::coll::reduce::{UserKind, UserOp};
use crate::coll::{self, Kind, Mode, PlanKey};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::state::{self, Ferrite};
use std::os::raw::{c_int, c_void};

/// No buffer (plan keys of collectives without one).
const NUL: *const c_void = std::ptr::null();

/// Size of `comm`'s group (Reduce_scatter's counts have one entry per local rank).
fn size(st: &Ferrite, comm: MPI_Comm) -> MpiResult<usize> {
    Ok(st.objects.comms.get(comm)?.size() as usize)
}

/// Number of processes `comm`'s ranks name: the remote group of an intercommunicator
/// (Alltoallv/w's arrays have one entry per remote rank there).
fn peers(st: &Ferrite, comm: MPI_Comm) -> MpiResult<usize> {
    Ok(st.objects.comms.get(comm)?.peers().len())
}

/// Declares the blocking, nonblocking and persistent forms of one collective. The build
/// script finds the names through the `fn MPI_X` list. With `key |st| k`, the blocking form
/// reuses the plan of an earlier call with the same [`coll::PlanKey`]. Given six names, it
/// declares the int forms and the large-count (`_c`) forms from one body ([`twins!`](crate::twins)).
macro_rules! coll {
    (fn $b:ident, fn $i:ident, fn $p:ident, fn $bc:ident, fn $ic:ident, fn $pc:ident
     $($rest:tt)*) => {
        twins! { coll [fn $b, fn $i, fn $p] [fn $bc, fn $ic, fn $pc] $($rest)* }
    };
    (fn $b:ident, fn $i:ident, fn $p:ident ($($a:ident : $t:ty),*) on $comm:ident
        |$st:ident, $mode:ident| $build:expr) => {
        coll! { fn $b, fn $i, fn $p ($($a: $t),*) on $comm key |_st| None =>
                |$st, $mode| $build }
    };
    (fn $b:ident, fn $i:ident, fn $p:ident ($($a:ident : $t:ty),*) on $comm:ident
        key |$kst:ident| $key:expr => |$st:ident, $mode:ident| $build:expr) => {
        mpi_fn! {
            fn $b($($a: $t),*) on ErrObj::Comm($comm) => {
                let $mode = Mode::Blocking;
                coll::blocking_cached($comm, |$kst| $key, |$st| $build)
            }
        }
        mpi_fn! {
            fn $i($($a: $t,)* request: *mut MPI_Request) on ErrObj::Comm($comm) => {
                let $mode = Mode::Deferred;
                if request.is_null() {
                    return Err(MpiError::new(MPI_ERR_ARG, "null request pointer"));
                }
                let h = coll::nonblocking($comm, |$st| $build)?;
                // SAFETY: checked non-null; the caller's MPI_Request*.
                unsafe { out(request, h) }
            }
        }
        mpi_fn! {
            fn $p($($a: $t,)* info: MPI_Info, request: *mut MPI_Request)
                on ErrObj::Comm($comm) => {
                let _ = info;
                let $mode = Mode::Deferred;
                if request.is_null() {
                    return Err(MpiError::new(MPI_ERR_ARG, "null request pointer"));
                }
                let h = coll::persistent($comm, |$st| $build)?;
                // SAFETY: checked non-null; the caller's MPI_Request*.
                unsafe { out(request, h) }
            }
        }
    };
}

/// Reduce_scatter's counts (one per rank, none negative).
///
/// # Safety
/// `a` has `n` entries.
unsafe fn reduce_counts(a: Arr, n: usize) -> MpiResult<Vec<usize>> {
    // SAFETY: per the contract.
    let c = unsafe { a.read(n, "counts") }?;
    c.iter()
        .map(|&x| {
            usize::try_from(x).map_err(|_| crate::mpi_err!(MPI_ERR_COUNT, "negative count {x}"))
        })
        .collect()
}

coll! {
    fn MPI_Barrier, fn MPI_Ibarrier, fn MPI_Barrier_init (comm: MPI_Comm) on comm
    key |st| PlanKey::of(st, Kind::Barrier, comm, NUL, NUL, 0, MPI_DATATYPE_NULL, MPI_OP_NULL, 0) =>
    |st, mode| plans::barrier(st, comm, mode)
}

coll! {
    fn MPI_Bcast, fn MPI_Ibcast, fn MPI_Bcast_init,
    fn MPI_Bcast_c, fn MPI_Ibcast_c, fn MPI_Bcast_init_c
    (buffer: *mut c_void, count: Count, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm
    key |st| PlanKey::of(st, Kind::Bcast, comm, NUL, buffer, count as i64, datatype, MPI_OP_NULL,
                         root) =>
    |st, mode| plans::bcast(st, comm, buffer, count as i64, datatype, root, mode)
}

coll! {
    fn MPI_Reduce, fn MPI_Ireduce, fn MPI_Reduce_init,
    fn MPI_Reduce_c, fn MPI_Ireduce_c, fn MPI_Reduce_init_c
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, datatype: MPI_Datatype,
     op: MPI_Op, root: c_int, comm: MPI_Comm) on comm
    key |st| PlanKey::of(st, Kind::Reduce, comm, sendbuf, recvbuf, count as i64, datatype, op,
                         root) =>
    |st, mode| plans::reduce(st, comm, sendbuf, recvbuf, count as i64, datatype, op, root, mode)
}

coll! {
    fn MPI_Allreduce, fn MPI_Iallreduce, fn MPI_Allreduce_init,
    fn MPI_Allreduce_c, fn MPI_Iallreduce_c, fn MPI_Allreduce_init_c
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, datatype: MPI_Datatype,
     op: MPI_Op, comm: MPI_Comm) on comm
    key |st| PlanKey::of(st, Kind::Allreduce, comm, sendbuf, recvbuf, count as i64, datatype,
                         op, 0) =>
    |st, mode| plans::allreduce(st, comm, sendbuf, recvbuf, count as i64, datatype, op, mode)
}

coll! {
    fn MPI_Reduce_scatter_block, fn MPI_Ireduce_scatter_block, fn MPI_Reduce_scatter_block_init,
    fn MPI_Reduce_scatter_block_c, fn MPI_Ireduce_scatter_block_c, fn MPI_Reduce_scatter_block_init_c
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: Count, datatype: MPI_Datatype,
     op: MPI_Op, comm: MPI_Comm) on comm
    |st, mode| {
        let n = size(st, comm)?;
        if recvcount < 0 {
            return Err(crate::mpi_err!(MPI_ERR_COUNT, "negative count {recvcount}"));
        }
        let counts = vec![recvcount as usize; n];
        plans::reduce_scatter(st, comm, sendbuf, recvbuf, &counts, datatype, op, mode)
    }
}

coll! {
    fn MPI_Reduce_scatter, fn MPI_Ireduce_scatter, fn MPI_Reduce_scatter_init,
    fn MPI_Reduce_scatter_c, fn MPI_Ireduce_scatter_c, fn MPI_Reduce_scatter_init_c
    (sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const Count,
     datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) on comm
    |st, mode| {
        let n = size(st, comm)?;
        // SAFETY: the caller passes one count per rank.
        let counts = unsafe { reduce_counts(Arr::from(recvcounts), n) }?;
        plans::reduce_scatter(st, comm, sendbuf, recvbuf, &counts, datatype, op, mode)
    }
}

coll! {
    fn MPI_Scan, fn MPI_Iscan, fn MPI_Scan_init,
    fn MPI_Scan_c, fn MPI_Iscan_c, fn MPI_Scan_init_c
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, datatype: MPI_Datatype,
     op: MPI_Op, comm: MPI_Comm) on comm
    |st, mode| plans::scan(st, comm, sendbuf, recvbuf, count as i64, datatype, op, false, mode)
}

coll! {
    fn MPI_Exscan, fn MPI_Iexscan, fn MPI_Exscan_init,
    fn MPI_Exscan_c, fn MPI_Iexscan_c, fn MPI_Exscan_init_c
    (sendbuf: *const c_void, recvbuf: *mut c_void, count: Count, datatype: MPI_Datatype,
     op: MPI_Op, comm: MPI_Comm) on comm
    |st, mode| plans::scan(st, comm, sendbuf, recvbuf, count as i64, datatype, op, true, mode)
}

coll! {
    fn MPI_Gather, fn MPI_Igather, fn MPI_Gather_init,
    fn MPI_Gather_c, fn MPI_Igather_c, fn MPI_Gather_init_c
    (sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
     recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm
    key |st| PlanKey::of_blocks(st, Kind::Gather, comm, sendbuf, sendcount as i64, sendtype,
                                recvbuf, recvcount as i64, recvtype, root) =>
    |st, mode| plans::gather(st, comm, sendbuf, sendcount as i64, sendtype, recvbuf,
                             recvcount as i64, recvtype, root, None, mode)
}

coll! {
    fn MPI_Gatherv, fn MPI_Igatherv, fn MPI_Gatherv_init,
    fn MPI_Gatherv_c, fn MPI_Igatherv_c, fn MPI_Gatherv_init_c
    (sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
     recvcounts: *const Count, displs: *const Disp, recvtype: MPI_Datatype, root: c_int,
     comm: MPI_Comm) on comm
    |st, mode| plans::gather(st, comm, sendbuf, sendcount as i64, sendtype, recvbuf, 0,
                             recvtype, root, Some((Arr::from(recvcounts), Arr::from(displs))),
                             mode)
}

coll! {
    fn MPI_Scatter, fn MPI_Iscatter, fn MPI_Scatter_init,
    fn MPI_Scatter_c, fn MPI_Iscatter_c, fn MPI_Scatter_init_c
    (sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
     recvcount: Count, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) on comm
    key |st| PlanKey::of_blocks(st, Kind::Scatter, comm, sendbuf, sendcount as i64, sendtype,
                                recvbuf, recvcount as i64, recvtype, root) =>
    |st, mode| plans::scatter(st, comm, sendbuf, sendcount as i64, sendtype, recvbuf,
                              recvcount as i64, recvtype, root, None, mode)
}

coll! {
    fn MPI_Scatterv, fn MPI_Iscatterv, fn MPI_Scatterv_init,
    fn MPI_Scatterv_c, fn MPI_Iscatterv_c, fn MPI_Scatterv_init_c
    (sendbuf: *const c_void, sendcounts: *const Count, displs: *const Disp,
     sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype,
     root: c_int, comm: MPI_Comm) on comm
    |st, mode| plans::scatter(st, comm, sendbuf, 0, sendtype, recvbuf, recvcount as i64,
                              recvtype, root, Some((Arr::from(sendcounts), Arr::from(displs))),
                              mode)
}

coll! {
    fn MPI_Allgather, fn MPI_Iallgather, fn MPI_Allgather_init,
    fn MPI_Allgather_c, fn MPI_Iallgather_c, fn MPI_Allgather_init_c
    (sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
     recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm
    key |st| PlanKey::of_blocks(st, Kind::Allgather, comm, sendbuf, sendcount as i64, sendtype,
                                recvbuf, recvcount as i64, recvtype, 0) =>
    |st, mode| plans::allgather(st, comm, sendbuf, sendcount as i64, sendtype, recvbuf,
                                recvcount as i64, recvtype, None, mode)
}

coll! {
    fn MPI_Allgatherv, fn MPI_Iallgatherv, fn MPI_Allgatherv_init,
    fn MPI_Allgatherv_c, fn MPI_Iallgatherv_c, fn MPI_Allgatherv_init_c
    (sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
     recvcounts: *const Count, displs: *const Disp, recvtype: MPI_Datatype, comm: MPI_Comm) on comm
    |st, mode| plans::allgather(st, comm, sendbuf, sendcount as i64, sendtype, recvbuf, 0,
                                recvtype, Some((Arr::from(recvcounts), Arr::from(displs))), mode)
}

coll! {
    fn MPI_Alltoall, fn MPI_Ialltoall, fn MPI_Alltoall_init,
    fn MPI_Alltoall_c, fn MPI_Ialltoall_c, fn MPI_Alltoall_init_c
    (sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
     recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm
    key |st| PlanKey::of_blocks(st, Kind::Alltoall, comm, sendbuf, sendcount as i64, sendtype,
                                recvbuf, recvcount as i64, recvtype, 0) =>
    |st, mode| plans::alltoall(st, comm, sendbuf, sendcount as i64, sendtype, recvbuf,
                               recvcount as i64, recvtype, mode)
}

coll! {
    fn MPI_Alltoallv, fn MPI_Ialltoallv, fn MPI_Alltoallv_init,
    fn MPI_Alltoallv_c, fn MPI_Ialltoallv_c, fn MPI_Alltoallv_init_c
    (sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Disp,
     sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Count,
     rdispls: *const Disp, recvtype: MPI_Datatype, comm: MPI_Comm) on comm
    |st, _mode| {
        let n = peers(st, comm)?;
        // SAFETY: the caller passes n counts and displacements per side.
        let recv = unsafe { Side::v(st, recvbuf, Arr::from(recvcounts), Arr::from(rdispls), recvtype, n) }?;
        let send = if plans::in_place(sendbuf) {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { Side::v(st, sendbuf, Arr::from(sendcounts), Arr::from(sdispls), sendtype, n) }?)
        };
        plans::alltoallw(st, comm, send, recv)
    }
}

coll! {
    fn MPI_Alltoallw, fn MPI_Ialltoallw, fn MPI_Alltoallw_init,
    fn MPI_Alltoallw_c, fn MPI_Ialltoallw_c, fn MPI_Alltoallw_init_c
    (sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Disp,
     sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Count,
     rdispls: *const Disp, recvtypes: *const MPI_Datatype, comm: MPI_Comm) on comm
    |st, _mode| {
        let n = peers(st, comm)?;
        // SAFETY: the caller passes n counts, displacements and types per side.
        let recv = unsafe { Side::w(st, recvbuf, Arr::from(recvcounts), Arr::from(rdispls), recvtypes, n) }?;
        let send = if plans::in_place(sendbuf) {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { Side::w(st, sendbuf, Arr::from(sendcounts), Arr::from(sdispls), sendtypes, n) }?)
        };
        plans::alltoallw(st, comm, send, recv)
    }
}

/// The three forms of a neighbourhood collective: like `coll!`, with the communicator's
/// neighbourhood (`nb`, computed before the state lock is taken) given to the body.
macro_rules! ngh {
    (fn $b:ident, fn $i:ident, fn $p:ident, fn $bc:ident, fn $ic:ident, fn $pc:ident
     $($rest:tt)*) => {
        twins! { ngh [fn $b, fn $i, fn $p] [fn $bc, fn $ic, fn $pc] $($rest)* }
    };
    (fn $b:ident, fn $i:ident, fn $p:ident ($($a:ident : $t:ty),*) on $comm:ident
        |$st:ident, $nb:ident| $build:expr) => {
        coll! {
            fn $b, fn $i, fn $p ($($a: $t),*) on $comm
            |$st, _mode| {
                let $nb = neighborhood($st, $comm)?;
                $build
            }
        }
    };
}

/// The neighbourhood of `comm` (MPI_ERR_TOPOLOGY without a topology).
fn neighborhood(st: &mut Ferrite, comm: MPI_Comm) -> MpiResult<Ngh> {
    use crate::objects::topo::{self, Topo};
    let c = st.objects.comms.get(comm)?;
    let rank = c.rank as i32;
    let (sources, dests, cart) = match c.topo.as_deref() {
        Some(Topo::Cart { dims, periods }) => {
            let v = topo::cart_neighbors(dims, periods, rank);
            (v.clone(), v, true)
        }
        Some(t @ Topo::Graph { .. }) => {
            let v = t.graph_neighbors(rank as usize).unwrap_or(&[]).to_vec();
            (v.clone(), v, false)
        }
        Some(Topo::DistGraph { sources, dests, .. }) => (sources.clone(), dests.clone(), false),
        None => {
            return Err(MpiError::new(
                MPI_ERR_TOPOLOGY,
                "neighborhood collective on a communicator without a topology",
            ))
        }
    };
    Ok(Ngh {
        sources,
        dests,
        cart,
    })
}

ngh! {
    fn MPI_Neighbor_allgather, fn MPI_Ineighbor_allgather, fn MPI_Neighbor_allgather_init,
    fn MPI_Neighbor_allgather_c, fn MPI_Ineighbor_allgather_c, fn MPI_Neighbor_allgather_init_c
    (sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
     recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm
    |st, nb| {
        let send = Side::regular(st, sendbuf, sendcount as i64, sendtype, nb.dests.len(), 0)?;
        let recv = Side::regular(st, recvbuf, recvcount as i64, recvtype, nb.sources.len(),
                                 recvcount as i64)?;
        plans::neighbor(st, comm, &nb, send, recv)
    }
}

ngh! {
    fn MPI_Neighbor_allgatherv, fn MPI_Ineighbor_allgatherv, fn MPI_Neighbor_allgatherv_init,
    fn MPI_Neighbor_allgatherv_c, fn MPI_Ineighbor_allgatherv_c, fn MPI_Neighbor_allgatherv_init_c
    (sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
     recvcounts: *const Count, displs: *const Disp, recvtype: MPI_Datatype, comm: MPI_Comm) on comm
    |st, nb| {
        let send = Side::regular(st, sendbuf, sendcount as i64, sendtype, nb.dests.len(), 0)?;
        // SAFETY: one count and displacement per source.
        let recv = unsafe {
            Side::v(st, recvbuf, Arr::from(recvcounts), Arr::from(displs), recvtype, nb.sources.len())
        }?;
        plans::neighbor(st, comm, &nb, send, recv)
    }
}

ngh! {
    fn MPI_Neighbor_alltoall, fn MPI_Ineighbor_alltoall, fn MPI_Neighbor_alltoall_init,
    fn MPI_Neighbor_alltoall_c, fn MPI_Ineighbor_alltoall_c, fn MPI_Neighbor_alltoall_init_c
    (sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, recvbuf: *mut c_void,
     recvcount: Count, recvtype: MPI_Datatype, comm: MPI_Comm) on comm
    |st, nb| {
        let send = Side::regular(st, sendbuf, sendcount as i64, sendtype, nb.dests.len(),
                                 sendcount as i64)?;
        let recv = Side::regular(st, recvbuf, recvcount as i64, recvtype, nb.sources.len(),
                                 recvcount as i64)?;
        plans::neighbor(st, comm, &nb, send, recv)
    }
}

ngh! {
    fn MPI_Neighbor_alltoallv, fn MPI_Ineighbor_alltoallv, fn MPI_Neighbor_alltoallv_init,
    fn MPI_Neighbor_alltoallv_c, fn MPI_Ineighbor_alltoallv_c, fn MPI_Neighbor_alltoallv_init_c
    (sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const Disp,
     sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Count,
     rdispls: *const Disp, recvtype: MPI_Datatype, comm: MPI_Comm) on comm
    |st, nb| {
        // SAFETY: one count and displacement per destination / source.
        let send = unsafe {
            Side::v(st, sendbuf, Arr::from(sendcounts), Arr::from(sdispls), sendtype, nb.dests.len())
        }?;
        // SAFETY: as above.
        let recv = unsafe {
            Side::v(st, recvbuf, Arr::from(recvcounts), Arr::from(rdispls), recvtype, nb.sources.len())
        }?;
        plans::neighbor(st, comm, &nb, send, recv)
    }
}

ngh! {
    fn MPI_Neighbor_alltoallw, fn MPI_Ineighbor_alltoallw, fn MPI_Neighbor_alltoallw_init,
    fn MPI_Neighbor_alltoallw_c, fn MPI_Ineighbor_alltoallw_c, fn MPI_Neighbor_alltoallw_init_c
    (sendbuf: *const c_void, sendcounts: *const Count, sdispls: *const MPI_Aint,
     sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const Count,
     rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm) on comm
    |st, nb| {
        // SAFETY: one count, displacement and type per destination / source.
        let send = unsafe {
            Side::w(st, sendbuf, Arr::from(sendcounts), Arr::from(sdispls), sendtypes, nb.dests.len())
        }?;
        // SAFETY: as above.
        let recv = unsafe {
            Side::w(st, recvbuf, Arr::from(recvcounts), Arr::from(rdispls), recvtypes, nb.sources.len())
        }?;
        plans::neighbor(st, comm, &nb, send, recv)
    }
}

// ----- reduction operations -----

fn op_create(f: UserKind, commute: c_int, op: *mut MPI_Op) -> MpiResult<()> {
    let h = state::with(|st| {
        Ok(st.coll.ops.user.insert(UserOp {
            f,
            commute: commute != 0,
        }))
    })?;
    // SAFETY: the caller's MPI_Op*.
    unsafe { out(op, h) }
}

mpi_fn! {
    // MPI_User_function(_c): the length is an int* or an MPI_Count*.
    fn MPI_Op_create, fn MPI_Op_create_c(
        user_fn: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut Count, *mut MPI_Datatype)>,
        commute: c_int, op: *mut MPI_Op) on ErrObj::NoObject => {
        let f = user_fn.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "null user function"))?;
        op_create(UserKind::from(f), commute, op)
    }
}

mpi_fn! {
    fn MPI_Op_free(op: *mut MPI_Op) on ErrObj::NoObject => {
        // SAFETY: a non-null pointer from the caller to one MPI_Op.
        let h = unsafe { op.as_mut() }.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "null op pointer"))?;
        state::with(|st| {
            if crate::coll::op::is_predefined(*h) {
                return Err(crate::mpi_err!(
                    MPI_ERR_OP,
                    "cannot free the predefined operation {}",
                    crate::coll::op::name(*h)
                ));
            }
            st.coll.ops.user.remove(*h).ok_or_else(|| {
                crate::mpi_err!(MPI_ERR_OP, "invalid operation handle {:#x}", *h as u32)
            })
        })?;
        *h = MPI_OP_NULL;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Op_commutative(op: MPI_Op, commute: *mut c_int) on ErrObj::NoObject => {
        let c = state::with(|st| st.coll.ops.commutative(op))?;
        // SAFETY: the caller's int*.
        unsafe { out(commute, c as c_int) }
    }
}

fn reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> MpiResult<()> {
    if count < 0 {
        return Err(crate::mpi_err!(MPI_ERR_COUNT, "negative count {count}"));
    }
    let (red, d) = state::with(|st| {
        let d = st.comm_datatype(datatype)?;
        Ok((st.coll.ops.reducer(op, datatype, &d)?, d))
    })?;
    let n = count as usize;
    if n == 0 || d.size() == 0 {
        return Ok(()); // nothing to combine; the buffers may be null
    }
    // Neither buffer may be MPI_IN_PLACE (there is no other buffer to take it from), null,
    // or the other one (MPI_ERR_BUFFER, as MPICH; it used to crash reading address -1).
    if plans::in_place(inbuf) || plans::in_place(inoutbuf) {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            "MPI_IN_PLACE is not allowed in MPI_Reduce_local",
        ));
    }
    d.check_buffer(inbuf.cast(), n as u64)?;
    d.check_buffer(inoutbuf.cast_const().cast(), n as u64)?;
    if inbuf == inoutbuf.cast_const() {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            "the input and inout buffers are the same",
        ));
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    // SAFETY: the caller's buffers hold `count` elements of `datatype`; the user function
    // runs here with no lock held.
    unsafe {
        d.pack(inbuf as *const u8, n, &mut a);
        d.pack(inoutbuf as *const u8, n, &mut b);
        red.combine(&a, &mut b);
        d.unpack(&b, inoutbuf as *mut u8, n);
    }
    Ok(())
}

mpi_fn! {
    fn MPI_Reduce_local, fn MPI_Reduce_local_c(inbuf: *const c_void, inoutbuf: *mut c_void, count: Count,
                        datatype: MPI_Datatype, op: MPI_Op) on ErrObj::NoObject => {
        reduce_local(inbuf, inoutbuf, count as i64, datatype, op)
    }
}

// ----- Ferrite extension -----

mpi_fn! {
    /// `FERRITE_Coll_peers(reset, &count)`: distinct world ranks this process exchanged
    /// collective messages with since the last reset (declared in mpi.h).
    fn FERRITE_Coll_peers(reset: c_int, count: *mut c_int) on ErrObj::NoObject => {
        let n = state::with(|st| {
            let n = st.coll.peers.len();
            if reset != 0 {
                st.coll.peers.clear();
                st.coll.last_peer = None;
            }
            Ok(n)
        })?;
        // SAFETY: the caller's int*.
        unsafe { out(count, n as c_int) }
    }
}

mpi_fn! {
    /// `FERRITE_Coll_reload_knobs()`: the next collectives read the FERRITE_COLL_* knobs
    /// from the environment again (they are read once and cached; declared in mpi.h).
    fn FERRITE_Coll_reload_knobs() on ErrObj::NoObject => {
        plans::reload_knobs();
        Ok(())
    }
}
