//! Groups at the C edge (MPI 4.1 section 7.3).

use super::consts::*;
use super::{out, slice};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::group::{self, Group};
use crate::state;
use std::os::raw::c_int;
use std::sync::Arc;

/// One (first, last, stride) range of MPI_Group_range_incl/excl.
type Triplet = [c_int; 3];

fn get(h: MPI_Group) -> MpiResult<Group> {
    state::with(|st| st.objects.groups.get(h))
}

/// Registers `g` and writes its handle to `newgroup`.
///
/// # Safety
/// `newgroup` is null or valid for one write.
unsafe fn new_group(g: Vec<u32>, newgroup: *mut MPI_Group) -> MpiResult<()> {
    let h = state::with(|st| Ok(st.objects.groups.insert(Arc::from(g))))?;
    // SAFETY: per this function's contract.
    unsafe { out(newgroup, h) }
}

mpi_fn! {
    fn MPI_Comm_group(comm: MPI_Comm, group: *mut MPI_Group) on ErrObj::Comm(comm) => {
        let h = state::with(|st| {
            let g = st.objects.comms.get(comm)?.group.clone();
            Ok(st.objects.groups.insert(g))
        })?;
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { out(group, h) }
    }
}

mpi_fn! {
    fn MPI_Group_size(group: MPI_Group, size: *mut c_int) on ErrObj::NoObject => {
        let n = get(group)?.len();
        // SAFETY: the caller passes an int* output.
        unsafe { out(size, n as c_int) }
    }
}

mpi_fn! {
    fn MPI_Group_rank(group: MPI_Group, rank: *mut c_int) on ErrObj::NoObject => {
        let g = get(group)?;
        let me = state::with(|st| Ok(st.world_rank))?;
        let r = group::rank_of(&g, me).map_or(MPI_UNDEFINED, |r| r as c_int);
        // SAFETY: the caller passes an int* output.
        unsafe { out(rank, r) }
    }
}

mpi_fn! {
    fn MPI_Group_translate_ranks(group1: MPI_Group, n: c_int, ranks1: *const c_int,
        group2: MPI_Group, ranks2: *mut c_int) on ErrObj::NoObject => {
        let (a, b) = (get(group1)?, get(group2)?);
        // SAFETY: the caller's array holds `n` ranks.
        let r1 = unsafe { slice(ranks1, n, "ranks1") }?;
        let mut res = Vec::with_capacity(r1.len());
        for &r in r1 {
            if r == MPI_PROC_NULL {
                res.push(MPI_PROC_NULL);
                continue;
            }
            if r < 0 || r as usize >= a.len() {
                return Err(crate::mpi_err!(MPI_ERR_RANK, "rank {r} not in group1 of size {}", a.len()));
            }
            res.push(group::rank_of(&b, a[r as usize]).map_or(MPI_UNDEFINED, |x| x as c_int));
        }
        if !res.is_empty() && ranks2.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for ranks2"));
        }
        for (i, v) in res.into_iter().enumerate() {
            // SAFETY: the caller's output array holds `n` ints.
            unsafe { ranks2.add(i).write(v) };
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Group_compare(group1: MPI_Group, group2: MPI_Group, result: *mut c_int)
        on ErrObj::NoObject => {
        let r = group::compare(&get(group1)?, &get(group2)?);
        // SAFETY: the caller passes an int* output.
        unsafe { out(result, r) }
    }
}

mpi_fn! {
    fn MPI_Group_union(group1: MPI_Group, group2: MPI_Group, newgroup: *mut MPI_Group)
        on ErrObj::NoObject => {
        let g = group::union(&get(group1)?, &get(group2)?);
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { new_group(g, newgroup) }
    }
}

mpi_fn! {
    fn MPI_Group_intersection(group1: MPI_Group, group2: MPI_Group, newgroup: *mut MPI_Group)
        on ErrObj::NoObject => {
        let g = group::intersection(&get(group1)?, &get(group2)?);
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { new_group(g, newgroup) }
    }
}

mpi_fn! {
    fn MPI_Group_difference(group1: MPI_Group, group2: MPI_Group, newgroup: *mut MPI_Group)
        on ErrObj::NoObject => {
        let g = group::difference(&get(group1)?, &get(group2)?);
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { new_group(g, newgroup) }
    }
}

/// Ranks from a C array, checked against a group of `size`.
///
/// # Safety
/// `ranks` holds `n` ints.
unsafe fn rank_list(n: c_int, ranks: *const c_int, size: usize) -> MpiResult<Vec<usize>> {
    // SAFETY: per this function's contract.
    let r = unsafe { slice(ranks, n, "ranks") }?;
    let mut v = Vec::with_capacity(r.len());
    for &x in r {
        if x < 0 {
            return Err(crate::mpi_err!(
                MPI_ERR_RANK,
                "rank {x} not in a group of size {size}"
            ));
        }
        v.push(x as usize);
    }
    group::check_ranks(size, &v)?;
    Ok(v)
}

mpi_fn! {
    fn MPI_Group_incl(group: MPI_Group, n: c_int, ranks: *const c_int, newgroup: *mut MPI_Group)
        on ErrObj::NoObject => {
        let g = get(group)?;
        // SAFETY: the caller's array holds `n` ranks.
        let r = unsafe { rank_list(n, ranks, g.len()) }?;
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { new_group(r.iter().map(|&i| g[i]).collect(), newgroup) }
    }
}

mpi_fn! {
    fn MPI_Group_excl(group: MPI_Group, n: c_int, ranks: *const c_int, newgroup: *mut MPI_Group)
        on ErrObj::NoObject => {
        let g = get(group)?;
        // SAFETY: the caller's array holds `n` ranks.
        let r = unsafe { rank_list(n, ranks, g.len()) }?;
        let keep = (0..g.len()).filter(|i| !r.contains(i)).map(|i| g[i]).collect();
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { new_group(keep, newgroup) }
    }
}

/// # Safety
/// `ranges` holds `n` triplets.
unsafe fn triplets(n: c_int, ranges: *const Triplet, size: usize) -> MpiResult<Vec<usize>> {
    // SAFETY: per this function's contract.
    let t = unsafe { slice(ranges, n, "ranges") }?;
    let v = group::ranges(size, t)?;
    group::check_ranks(size, &v)?;
    Ok(v)
}

mpi_fn! {
    fn MPI_Group_range_incl(group: MPI_Group, n: c_int, ranges: *mut Triplet,
        newgroup: *mut MPI_Group) on ErrObj::NoObject => {
        let g = get(group)?;
        // SAFETY: the caller's array holds `n` triplets.
        let r = unsafe { triplets(n, ranges.cast_const(), g.len()) }?;
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { new_group(r.iter().map(|&i| g[i]).collect(), newgroup) }
    }
}

mpi_fn! {
    fn MPI_Group_range_excl(group: MPI_Group, n: c_int, ranges: *mut Triplet,
        newgroup: *mut MPI_Group) on ErrObj::NoObject => {
        let g = get(group)?;
        // SAFETY: the caller's array holds `n` triplets.
        let r = unsafe { triplets(n, ranges.cast_const(), g.len()) }?;
        let keep = (0..g.len()).filter(|i| !r.contains(i)).map(|i| g[i]).collect();
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { new_group(keep, newgroup) }
    }
}

mpi_fn! {
    fn MPI_Group_free(group: *mut MPI_Group) on ErrObj::NoObject => {
        if group.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for group"));
        }
        // SAFETY: non-null; the caller passes an MPI_Group*.
        let h = unsafe { *group };
        state::with(|st| {
            st.objects.groups.get(h)?;
            // Freeing MPI_GROUP_EMPTY is allowed (MPI 4.1 7.3.3) and does nothing.
            st.objects.groups.user.remove(h);
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { out(group, MPI_GROUP_NULL) }
    }
}
