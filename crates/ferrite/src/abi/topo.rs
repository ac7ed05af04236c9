//! Process topologies at the C edge (MPI 4.1 chapter 8).

use super::consts::*;
use super::symbols::{is_unweighted, is_weights_empty};
use super::{out, out_given, slice};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::topo::{self, Topo};
use crate::state;
use std::os::raw::c_int;
use std::sync::Arc;

fn topo_of(comm: MPI_Comm) -> MpiResult<Option<Arc<Topo>>> {
    state::with(|st| Ok(st.objects.comms.get(comm)?.topo.clone()))
}

/// The Cartesian topology of `comm`: (dims, periods, my rank).
fn cart(comm: MPI_Comm) -> MpiResult<(Vec<i32>, Vec<bool>, i32)> {
    state::with(|st| {
        let c = st.objects.comms.get(comm)?;
        match c.topo.as_deref() {
            Some(Topo::Cart { dims, periods }) => {
                Ok((dims.clone(), periods.clone(), c.rank as i32))
            }
            _ => Err(MpiError::new(
                MPI_ERR_TOPOLOGY,
                "communicator has no Cartesian topology",
            )),
        }
    })
}

fn graph(comm: MPI_Comm) -> MpiResult<Arc<Topo>> {
    match topo_of(comm)? {
        Some(t) if matches!(*t, Topo::Graph { .. }) => Ok(t),
        _ => Err(MpiError::new(
            MPI_ERR_TOPOLOGY,
            "communicator has no graph topology",
        )),
    }
}

/// Writes `v` into a C array of capacity `max` (extra values are dropped, as MPI says).
///
/// # Safety
/// `p` is valid for `max` writes (or null when nothing is written).
unsafe fn out_array(p: *mut c_int, max: c_int, v: &[i32]) -> MpiResult<()> {
    let n = v.len().min(max.max(0) as usize);
    if n > 0 && p.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "null pointer passed for an output array",
        ));
    }
    for (i, x) in v.iter().take(n).enumerate() {
        // SAFETY: i < n <= max per the contract.
        unsafe { p.add(i).write(*x) };
    }
    Ok(())
}

/// Dimensions and periods from C arrays.
///
/// # Safety
/// Both arrays hold `ndims` ints.
unsafe fn dims_periods(
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
) -> MpiResult<(Vec<i32>, Vec<bool>)> {
    if ndims < 0 {
        return Err(crate::mpi_err!(MPI_ERR_DIMS, "negative ndims {ndims}"));
    }
    // SAFETY: per this function's contract.
    let (d, p) = unsafe {
        (
            slice(dims, ndims, "dims")?,
            slice(periods, ndims, "periods")?,
        )
    };
    // An empty dimension makes a grid of no process (MPI_Cart_create gives MPI_COMM_NULL and
    // MPI_Cart_map MPI_UNDEFINED to every rank, as in MPICH and Open MPI).
    if let Some(x) = d.iter().find(|&&x| x < 0) {
        return Err(crate::mpi_err!(
            MPI_ERR_DIMS,
            "dimension {x} must not be negative"
        ));
    }
    Ok((d.to_vec(), p.iter().map(|&x| x != 0).collect()))
}

mpi_fn! {
    fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) on ErrObj::NoObject => {
        if ndims < 0 {
            return Err(crate::mpi_err!(MPI_ERR_DIMS, "negative ndims {ndims}"));
        }
        if ndims > 0 && dims.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for dims"));
        }
        let mut d = vec![0; ndims as usize];
        // SAFETY: the caller's array holds `ndims` ints, read then written.
        unsafe {
            for (i, x) in d.iter_mut().enumerate() { *x = *dims.add(i); }
        }
        topo::dims_create(nnodes, &mut d)?;
        // SAFETY: as above.
        unsafe { out_array(dims, ndims, &d) }
    }
}

mpi_fn! {
    fn MPI_Cart_create(comm_old: MPI_Comm, ndims: c_int, dims: *const c_int,
        periods: *const c_int, _reorder: c_int, comm_cart: *mut MPI_Comm)
        on ErrObj::Comm(comm_old) => {
        out_given(comm_cart)?;
        // SAFETY: the caller's arrays hold `ndims` ints.
        let (d, p) = unsafe { dims_periods(ndims, dims, periods) }?;
        let n: i64 = d.iter().map(|&x| x as i64).product();
        // On error the output is MPI_COMM_NULL (as MPICH sets it; its cartsmall test).
        let h = state::with_held(|st| st.comm_with_topo(comm_old, n as usize,
            Topo::Cart { dims: d, periods: p })).inspect_err(|_| {
            // SAFETY: the caller passes an MPI_Comm* output (null is refused by out).
            let _ = unsafe { out(comm_cart, MPI_COMM_NULL) };
        })?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(comm_cart, h) }
    }
}

mpi_fn! {
    fn MPI_Cart_map(comm: MPI_Comm, ndims: c_int, dims: *const c_int, periods: *const c_int,
        newrank: *mut c_int) on ErrObj::Comm(comm) => {
        // SAFETY: the caller's arrays hold `ndims` ints.
        let (d, _) = unsafe { dims_periods(ndims, dims, periods) }?;
        let n: i64 = d.iter().map(|&x| x as i64).product();
        let (rank, size) = state::with(|st| { let c = st.objects.comms.get(comm)?; Ok((c.rank as i64, c.size() as i64)) })?;
        if n > size {
            return Err(crate::mpi_err!(MPI_ERR_DIMS, "grid of {n} processes on a communicator of {size}"));
        }
        // SAFETY: the caller passes an int* output.
        unsafe { out(newrank, if rank < n { rank as c_int } else { MPI_UNDEFINED }) }
    }
}

mpi_fn! {
    fn MPI_Cartdim_get(comm: MPI_Comm, ndims: *mut c_int) on ErrObj::Comm(comm) => {
        let (d, _, _) = cart(comm)?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(ndims, d.len() as c_int) }
    }
}

mpi_fn! {
    fn MPI_Cart_get(comm: MPI_Comm, maxdims: c_int, dims: *mut c_int, periods: *mut c_int,
        coords: *mut c_int) on ErrObj::Comm(comm) => {
        let (d, p, r) = cart(comm)?;
        let c = topo::cart_coords(&d, r);
        let p: Vec<i32> = p.iter().map(|&x| x as i32).collect();
        // SAFETY: the caller's arrays hold `maxdims` ints.
        unsafe { out_array(dims, maxdims, &d)?; out_array(periods, maxdims, &p)?; out_array(coords, maxdims, &c) }
    }
}

mpi_fn! {
    fn MPI_Cart_rank(comm: MPI_Comm, coords: *const c_int, rank: *mut c_int)
        on ErrObj::Comm(comm) => {
        let (d, p, _) = cart(comm)?;
        // SAFETY: the caller's array holds one int per dimension.
        let c = unsafe { slice(coords, d.len() as c_int, "coords") }?;
        let r = topo::cart_rank(&d, &p, c)?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(rank, r) }
    }
}

mpi_fn! {
    fn MPI_Cart_coords(comm: MPI_Comm, rank: c_int, maxdims: c_int, coords: *mut c_int)
        on ErrObj::Comm(comm) => {
        let (d, _, _) = cart(comm)?;
        let n: i32 = d.iter().product();
        if rank < 0 || rank >= n {
            return Err(crate::mpi_err!(MPI_ERR_RANK, "rank {rank} not in a grid of {n}"));
        }
        // SAFETY: the caller's array holds `maxdims` ints.
        unsafe { out_array(coords, maxdims, &topo::cart_coords(&d, rank)) }
    }
}

mpi_fn! {
    fn MPI_Cart_shift(comm: MPI_Comm, direction: c_int, disp: c_int, rank_source: *mut c_int,
        rank_dest: *mut c_int) on ErrObj::Comm(comm) => {
        let (d, p, r) = cart(comm)?;
        if direction < 0 || direction as usize >= d.len() {
            return Err(crate::mpi_err!(MPI_ERR_DIMS, "direction {direction} not in 0..{}", d.len()));
        }
        let (s, t) = topo::cart_shift(&d, &p, r, direction as usize, disp);
        // SAFETY: the caller passes int* outputs.
        unsafe { out(rank_source, s)?; out(rank_dest, t) }
    }
}

mpi_fn! {
    fn MPI_Cart_sub(comm: MPI_Comm, remain_dims: *const c_int, newcomm: *mut MPI_Comm)
        on ErrObj::Comm(comm) => {
        out_given(newcomm)?;
        let (d, p, r) = cart(comm)?;
        // SAFETY: the caller's array holds one int per dimension.
        let keep = unsafe { slice(remain_dims, d.len() as c_int, "remain_dims") }?;
        let c = topo::cart_coords(&d, r);
        // Color: my coordinates in the dropped dimensions; key: my rank (keeps row-major order).
        let mut color = 0i32;
        let (mut nd, mut np) = (Vec::new(), Vec::new());
        for k in 0..d.len() {
            if keep[k] != 0 {
                nd.push(d[k]);
                np.push(p[k]);
            } else {
                color = color * d[k] + c[k];
            }
        }
        if nd.is_empty() {
            // No dimension kept: a zero-dimensional grid, which holds one process (as
            // MPI_Cart_create with ndims 0): rank 0 gets it, the others MPI_COMM_NULL (as
            // MPICH; its cartsuball test).
            color = if r == 0 { 0 } else { MPI_UNDEFINED };
        }
        let h = state::with_held(|st| {
            let h = st.comm_split(comm, color, r)?;
            if h != MPI_COMM_NULL {
                st.objects.comms.get_mut(h)?.topo =
                    Some(Arc::new(Topo::Cart { dims: nd, periods: np }));
            }
            Ok(h)
        })?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

/// Graph arguments from C arrays, checked.
///
/// # Safety
/// `index` holds `nnodes` ints and `edges` holds `index[nnodes-1]`.
unsafe fn graph_args(
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
) -> MpiResult<(Vec<i32>, Vec<i32>)> {
    if nnodes < 0 {
        return Err(crate::mpi_err!(MPI_ERR_ARG, "negative nnodes {nnodes}"));
    }
    // SAFETY: per this function's contract.
    let ix = unsafe { slice(index, nnodes, "index") }?.to_vec();
    let ne = ix.last().copied().unwrap_or(0);
    if ix.windows(2).any(|w| w[1] < w[0]) || ix.first().is_some_and(|&x| x < 0) {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "index {ix:?} is not non-decreasing"
        ));
    }
    // SAFETY: per this function's contract.
    let e = unsafe { slice(edges, ne, "edges") }?.to_vec();
    if let Some(x) = e.iter().find(|&&x| x < 0 || x >= nnodes) {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "edge to {x} outside a graph of {nnodes} nodes"
        ));
    }
    Ok((ix, e))
}

mpi_fn! {
    fn MPI_Graph_create(comm_old: MPI_Comm, nnodes: c_int, index: *const c_int,
        edges: *const c_int, _reorder: c_int, comm_graph: *mut MPI_Comm)
        on ErrObj::Comm(comm_old) => {
        out_given(comm_graph)?;
        // SAFETY: the caller's arrays follow MPI_Graph_create's contract.
        let (ix, e) = unsafe { graph_args(nnodes, index, edges) }?;
        let h = state::with_held(|st| st.comm_with_topo(comm_old, nnodes as usize,
            Topo::Graph { index: ix, edges: e }))?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(comm_graph, h) }
    }
}

mpi_fn! {
    fn MPI_Graph_map(comm: MPI_Comm, nnodes: c_int, index: *const c_int, edges: *const c_int,
        newrank: *mut c_int) on ErrObj::Comm(comm) => {
        // SAFETY: the caller's arrays follow MPI_Graph_map's contract.
        unsafe { graph_args(nnodes, index, edges) }?;
        let rank = state::with(|st| Ok(st.objects.comms.get(comm)?.rank as c_int))?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(newrank, if rank < nnodes { rank } else { MPI_UNDEFINED }) }
    }
}

mpi_fn! {
    fn MPI_Graphdims_get(comm: MPI_Comm, nnodes: *mut c_int, nedges: *mut c_int)
        on ErrObj::Comm(comm) => {
        let t = graph(comm)?;
        let Topo::Graph { index, edges } = &*t else { unreachable!() };
        // SAFETY: the caller passes int* outputs.
        unsafe { out(nnodes, index.len() as c_int)?; out(nedges, edges.len() as c_int) }
    }
}

mpi_fn! {
    fn MPI_Graph_get(comm: MPI_Comm, maxindex: c_int, maxedges: c_int, index: *mut c_int,
        edges: *mut c_int) on ErrObj::Comm(comm) => {
        let t = graph(comm)?;
        let Topo::Graph { index: ix, edges: e } = &*t else { unreachable!() };
        // SAFETY: the caller's arrays hold maxindex and maxedges ints.
        unsafe { out_array(index, maxindex, ix)?; out_array(edges, maxedges, e) }
    }
}

fn graph_node(t: &Topo, rank: c_int) -> MpiResult<Vec<i32>> {
    let n = match t {
        Topo::Graph { index, .. } => index.len() as c_int,
        _ => 0,
    };
    if rank < 0 || rank >= n {
        return Err(crate::mpi_err!(
            MPI_ERR_RANK,
            "rank {rank} not in a graph of {n} nodes"
        ));
    }
    Ok(t.graph_neighbors(rank as usize).unwrap_or(&[]).to_vec())
}

mpi_fn! {
    fn MPI_Graph_neighbors_count(comm: MPI_Comm, rank: c_int, nneighbors: *mut c_int)
        on ErrObj::Comm(comm) => {
        let v = graph_node(&*graph(comm)?, rank)?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(nneighbors, v.len() as c_int) }
    }
}

mpi_fn! {
    fn MPI_Graph_neighbors(comm: MPI_Comm, rank: c_int, maxneighbors: c_int,
        neighbors: *mut c_int) on ErrObj::Comm(comm) => {
        let v = graph_node(&*graph(comm)?, rank)?;
        // SAFETY: the caller's array holds maxneighbors ints.
        unsafe { out_array(neighbors, maxneighbors, &v) }
    }
}

/// Weights argument: None for MPI_UNWEIGHTED, else `n` values (MPI_WEIGHTS_EMPTY when n = 0).
///
/// # Safety
/// `w` is MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY or holds `n` ints.
unsafe fn weights(w: *const c_int, n: c_int, what: &str) -> MpiResult<Option<Vec<i32>>> {
    if is_unweighted(w) {
        return Ok(None);
    }
    if is_weights_empty(w) || n == 0 {
        return Ok(Some(Vec::new()));
    }
    // SAFETY: per this function's contract.
    Ok(Some(unsafe { slice(w, n, what) }?.to_vec()))
}

fn check_ranks(v: &[i32], size: u32, what: &str) -> MpiResult<()> {
    match v.iter().find(|&&r| r < 0 || r as u32 >= size) {
        Some(r) => Err(crate::mpi_err!(
            MPI_ERR_RANK,
            "{what} rank {r} not in a communicator of size {size}"
        )),
        None => Ok(()),
    }
}

/// Duplicates `comm` and attaches `t` (the distributed graph constructors).
fn dup_with_topo(comm: MPI_Comm, t: Topo) -> MpiResult<MPI_Comm> {
    state::with_held(|st| {
        let h = {
            let rank = st.objects.comms.get(comm)?.rank as i32;
            st.comm_split(comm, 0, rank)?
        };
        st.objects.comms.get_mut(h)?.topo = Some(Arc::new(t));
        Ok(h)
    })
}

mpi_fn! {
    fn MPI_Dist_graph_create_adjacent(comm_old: MPI_Comm, indegree: c_int,
        sources: *const c_int, sourceweights: *const c_int, outdegree: c_int,
        destinations: *const c_int, destweights: *const c_int, _info: MPI_Info,
        _reorder: c_int, comm_dist_graph: *mut MPI_Comm) on ErrObj::Comm(comm_old) => {
        out_given(comm_dist_graph)?;
        // SAFETY: the caller's arrays hold indegree / outdegree ints (or are the
        // MPI_UNWEIGHTED / MPI_WEIGHTS_EMPTY markers).
        let (s, sw, d, dw) = unsafe {
            (slice(sources, indegree, "sources")?.to_vec(), weights(sourceweights, indegree, "sourceweights")?,
             slice(destinations, outdegree, "destinations")?.to_vec(), weights(destweights, outdegree, "destweights")?)
        };
        let size = state::with(|st| Ok(st.objects.comms.get(comm_old)?.size()))?;
        check_ranks(&s, size, "source")?;
        check_ranks(&d, size, "destination")?;
        let h = dup_with_topo(comm_old, Topo::DistGraph { sources: s, source_weights: sw, dests: d, dest_weights: dw })?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(comm_dist_graph, h) }
    }
}

mpi_fn! {
    fn MPI_Dist_graph_create(comm_old: MPI_Comm, n: c_int, sources: *const c_int,
        degrees: *const c_int, destinations: *const c_int, weights_: *const c_int,
        _info: MPI_Info, _reorder: c_int, comm_dist_graph: *mut MPI_Comm)
        on ErrObj::Comm(comm_old) => {
        out_given(comm_dist_graph)?;
        // SAFETY: the caller's arrays follow MPI_Dist_graph_create's contract.
        let (src, deg) = unsafe { (slice(sources, n, "sources")?, slice(degrees, n, "degrees")?) };
        if let Some(d) = deg.iter().find(|&&d| d < 0) {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "negative degree {d}"));
        }
        let total: c_int = deg.iter().sum();
        // SAFETY: as above.
        let (dst, w) = unsafe { (slice(destinations, total, "destinations")?, weights(weights_, total, "weights")?) };
        let size = state::with(|st| Ok(st.objects.comms.get(comm_old)?.size()))?;
        check_ranks(src, size, "source")?;
        check_ranks(dst, size, "destination")?;
        let mut edges = Vec::with_capacity(total as usize);
        let mut k = 0usize;
        for (i, &s) in src.iter().enumerate() {
            for _ in 0..deg[i] {
                edges.push((s, dst[k], w.as_ref().map_or(1, |w| w.get(k).copied().unwrap_or(1))));
                k += 1;
            }
        }
        let weighted = w.is_some();
        let (ins, outs) = state::with_held(|st| st.dist_graph_gather(comm_old, &edges))?;
        let t = Topo::DistGraph {
            sources: ins.iter().map(|e| e.0).collect(),
            source_weights: weighted.then(|| ins.iter().map(|e| e.1).collect()),
            dests: outs.iter().map(|e| e.0).collect(),
            dest_weights: weighted.then(|| outs.iter().map(|e| e.1).collect()),
        };
        let h = dup_with_topo(comm_old, t)?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(comm_dist_graph, h) }
    }
}

/// In- and out-neighbours of any topology, in the order neighbourhood collectives use.
pub fn neighbors(comm: MPI_Comm) -> MpiResult<topo::Neighbors> {
    let rank = state::with(|st| Ok(st.objects.comms.get(comm)?.rank as i32))?;
    match topo_of(comm)?.as_deref() {
        Some(Topo::Cart { dims, periods }) => {
            let v = topo::cart_neighbors(dims, periods, rank);
            Ok(topo::Neighbors {
                sources: v.clone(),
                dests: v,
                weights: None,
            })
        }
        Some(t @ Topo::Graph { .. }) => {
            let v = t.graph_neighbors(rank as usize).unwrap_or(&[]).to_vec();
            Ok(topo::Neighbors {
                sources: v.clone(),
                dests: v,
                weights: None,
            })
        }
        Some(Topo::DistGraph {
            sources,
            source_weights,
            dests,
            dest_weights,
        }) => Ok(topo::Neighbors {
            sources: sources.clone(),
            dests: dests.clone(),
            weights: source_weights.clone().zip(dest_weights.clone()),
        }),
        None => Err(MpiError::new(
            MPI_ERR_TOPOLOGY,
            "communicator has no topology",
        )),
    }
}

mpi_fn! {
    fn MPI_Dist_graph_neighbors_count(comm: MPI_Comm, indegree: *mut c_int,
        outdegree: *mut c_int, weighted: *mut c_int) on ErrObj::Comm(comm) => {
        let t = topo_of(comm)?;
        let Some(Topo::DistGraph { sources, dests, source_weights, .. }) = t.as_deref() else {
            return Err(MpiError::new(MPI_ERR_TOPOLOGY, "communicator has no distributed graph topology"));
        };
        // SAFETY: the caller passes int* outputs.
        unsafe {
            out(indegree, sources.len() as c_int)?;
            out(outdegree, dests.len() as c_int)?;
            out(weighted, source_weights.is_some() as c_int)
        }
    }
}

mpi_fn! {
    fn MPI_Dist_graph_neighbors(comm: MPI_Comm, maxindegree: c_int, sources: *mut c_int,
        sourceweights: *mut c_int, maxoutdegree: c_int, destinations: *mut c_int,
        destweights: *mut c_int) on ErrObj::Comm(comm) => {
        let t = topo_of(comm)?;
        let Some(Topo::DistGraph { sources: s, source_weights: sw, dests: d, dest_weights: dw }) = t.as_deref() else {
            return Err(MpiError::new(MPI_ERR_TOPOLOGY, "communicator has no distributed graph topology"));
        };
        // SAFETY: the caller's arrays hold maxindegree / maxoutdegree ints; weights are
        // written only for a weighted graph and a real array.
        unsafe {
            out_array(sources, maxindegree, s)?;
            out_array(destinations, maxoutdegree, d)?;
            if let (Some(w), false) = (sw, is_unweighted(sourceweights)) {
                out_array(sourceweights, maxindegree, w)?;
            }
            if let (Some(w), false) = (dw, is_unweighted(destweights)) {
                out_array(destweights, maxoutdegree, w)?;
            }
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Topo_test(comm: MPI_Comm, status: *mut c_int) on ErrObj::Comm(comm) => {
        let k = topo_of(comm)?.map_or(MPI_UNDEFINED, |t| t.kind());
        // SAFETY: the caller passes an int* output.
        unsafe { out(status, k) }
    }
}
