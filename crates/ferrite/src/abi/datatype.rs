//! Datatype constructors, queries, names and decoding (MPI 4.1 chapter 5).

use super::consts::*;
use super::{out, out_str, slice};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::datatype::{builtin_name, Datatype, Envelope};
use crate::state::{self, Ferrite};
use std::os::raw::{c_char, c_int};
use std::sync::Arc;

fn count_arg(n: c_int, what: &str) -> MpiResult<usize> {
    if n < 0 {
        return Err(crate::mpi_err!(MPI_ERR_COUNT, "negative {what} {n}"));
    }
    Ok(n as usize)
}

/// What a constructor produced and was called with.
struct Made {
    t: Datatype,
    combiner: c_int,
    ints: Vec<c_int>,
    aints: Vec<isize>,
    types: Vec<(MPI_Datatype, Arc<Datatype>)>,
}

/// Registers a new (uncommitted) type, remembering its constructor arguments, and writes
/// its handle to `newtype`.
///
/// # Safety
/// `newtype` is null or valid for one write.
unsafe fn make(
    newtype: *mut MPI_Datatype,
    f: impl FnOnce(&mut Ferrite) -> MpiResult<Made>,
) -> MpiResult<()> {
    if newtype.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "null pointer passed for newtype",
        ));
    }
    let h = state::with(|st| {
        let m = f(st)?;
        let mut t = m.t;
        t.envelope = Some(Arc::new(Envelope {
            combiner: m.combiner,
            ints: m.ints,
            aints: m.aints,
            types: m.types,
        }));
        Ok(st.objects.datatypes.user.insert(Arc::new(t)))
    })?;
    // SAFETY: checked non-null above; the caller passes an MPI_Datatype*.
    unsafe { out(newtype, h) }
}

fn old(st: &mut Ferrite, h: MPI_Datatype) -> MpiResult<Arc<Datatype>> {
    st.objects.datatypes.lookup(h)
}

fn made(
    t: Datatype,
    combiner: c_int,
    ints: Vec<c_int>,
    aints: Vec<isize>,
    types: Vec<(MPI_Datatype, Arc<Datatype>)>,
) -> MpiResult<Made> {
    Ok(Made {
        t,
        combiner,
        ints,
        aints,
        types,
    })
}

mpi_fn! {
    fn MPI_Type_contiguous(count: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype)
        on ErrObj::NoObject => {
        let n = count_arg(count, "count")?;
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let t = Datatype::hvector(1, n, 0, &o);
                made(t, MPI_COMBINER_CONTIGUOUS, vec![count], vec![], vec![(oldtype, o)])
            })
        }
    }
}

mpi_fn! {
    fn MPI_Type_vector(count: c_int, blocklength: c_int, stride: c_int, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        let n = count_arg(count, "count")?;
        let b = count_arg(blocklength, "blocklength")?;
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let t = Datatype::hvector(n, b, stride as isize * o.extent, &o);
                made(t, MPI_COMBINER_VECTOR, vec![count, blocklength, stride], vec![],
                    vec![(oldtype, o)])
            })
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_hvector(count: c_int, blocklength: c_int, stride: MPI_Aint,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        let n = count_arg(count, "count")?;
        let b = count_arg(blocklength, "blocklength")?;
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let t = Datatype::hvector(n, b, stride as isize, &o);
                made(t, MPI_COMBINER_HVECTOR, vec![count, blocklength], vec![stride as isize],
                    vec![(oldtype, o)])
            })
        }
    }
}

/// (displacement in bytes, block length) pairs from C arrays; `scale` converts element
/// displacements to bytes (1 for the h- forms). Also returns the raw lengths and
/// displacements for the envelope.
///
/// # Safety
/// `lens` (if given) and `disps` are valid for `count` reads.
#[allow(clippy::type_complexity)]
unsafe fn blocks<D: Copy + Into<i64>>(
    count: c_int,
    lens: Option<*const c_int>,
    same_len: c_int,
    disps: *const D,
    scale: isize,
) -> MpiResult<(Vec<(isize, usize)>, Vec<c_int>, Vec<i64>)> {
    count_arg(count, "count")?;
    // SAFETY: per this function's contract.
    let d = unsafe { slice(disps, count, "array_of_displacements") }?;
    let l = match lens {
        // SAFETY: per this function's contract.
        Some(p) => unsafe { slice(p, count, "array_of_blocklengths") }?.to_vec(),
        None => vec![same_len; count as usize],
    };
    let b = d
        .iter()
        .zip(&l)
        .map(|(&disp, &len)| Ok((disp.into() as isize * scale, count_arg(len, "blocklength")?)))
        .collect::<MpiResult<_>>()?;
    Ok((b, l, d.iter().map(|&x| x.into()).collect()))
}

mpi_fn! {
    fn MPI_Type_indexed(count: c_int, array_of_blocklengths: *const c_int,
        array_of_displacements: *const c_int, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's output; arrays hold `count` entries.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let (b, l, d) = blocks(count, Some(array_of_blocklengths), 0, array_of_displacements, o.extent)?;
                let mut ints = vec![count];
                ints.extend(l);
                ints.extend(d.iter().map(|&x| x as c_int));
                made(Datatype::hindexed(&b, &o), MPI_COMBINER_INDEXED, ints, vec![], vec![(oldtype, o)])
            })
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_hindexed(count: c_int, array_of_blocklengths: *const c_int,
        array_of_displacements: *const MPI_Aint, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's output; arrays hold `count` entries.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let (b, l, d) = blocks(count, Some(array_of_blocklengths), 0, array_of_displacements, 1)?;
                let mut ints = vec![count];
                ints.extend(l);
                made(Datatype::hindexed(&b, &o), MPI_COMBINER_HINDEXED, ints,
                    d.iter().map(|&x| x as isize).collect(), vec![(oldtype, o)])
            })
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_indexed_block(count: c_int, blocklength: c_int,
        array_of_displacements: *const c_int, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's output; the array holds `count` entries.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let (b, _, d) = blocks(count, None, blocklength, array_of_displacements, o.extent)?;
                let mut ints = vec![count, blocklength];
                ints.extend(d.iter().map(|&x| x as c_int));
                made(Datatype::hindexed(&b, &o), MPI_COMBINER_INDEXED_BLOCK, ints, vec![],
                    vec![(oldtype, o)])
            })
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_hindexed_block(count: c_int, blocklength: c_int,
        array_of_displacements: *const MPI_Aint, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's output; the array holds `count` entries.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let (b, _, d) = blocks(count, None, blocklength, array_of_displacements, 1)?;
                made(Datatype::hindexed(&b, &o), MPI_COMBINER_HINDEXED_BLOCK,
                    vec![count, blocklength], d.iter().map(|&x| x as isize).collect(),
                    vec![(oldtype, o)])
            })
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_struct(count: c_int, array_of_blocklengths: *const c_int,
        array_of_displacements: *const MPI_Aint, array_of_types: *const MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's output; arrays hold `count` entries.
        unsafe {
            make(newtype, |st| {
                let (b, l, d) = blocks(count, Some(array_of_blocklengths), 0, array_of_displacements, 1)?;
                let types = slice(array_of_types, count, "array_of_types")?;
                let olds = types.iter().map(|&t| old(st, t)).collect::<MpiResult<Vec<_>>>()?;
                let parts: Vec<_> = b.iter().zip(&olds).map(|(&(d, l), t)| (d, l, &**t)).collect();
                let t = Datatype::structure(&parts);
                let mut ints = vec![count];
                ints.extend(l);
                made(t, MPI_COMBINER_STRUCT, ints, d.iter().map(|&x| x as isize).collect(),
                    types.iter().copied().zip(olds).collect())
            })
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_resized(oldtype: MPI_Datatype, lb: MPI_Aint, extent: MPI_Aint,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let t = Datatype::resized(&o, lb as isize, extent as isize);
                made(t, MPI_COMBINER_RESIZED, vec![], vec![lb as isize, extent as isize],
                    vec![(oldtype, o)])
            })
        }
    }
}

/// Checks the array-shape arguments shared by subarray and darray.
fn order_c(order: c_int) -> MpiResult<bool> {
    match order {
        MPI_ORDER_C => Ok(true),
        MPI_ORDER_FORTRAN => Ok(false),
        _ => Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "invalid order {order} (MPI_ORDER_C or MPI_ORDER_FORTRAN)"
        )),
    }
}

mpi_fn! {
    fn MPI_Type_create_subarray(ndims: c_int, array_of_sizes: *const c_int,
        array_of_subsizes: *const c_int, array_of_starts: *const c_int, order: c_int,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        if ndims <= 0 {
            return Err(crate::mpi_err!(MPI_ERR_DIMS, "ndims {ndims} must be positive"));
        }
        // SAFETY: the arrays hold `ndims` entries each.
        let (sizes, subs, starts) = unsafe {
            (slice(array_of_sizes, ndims, "array_of_sizes")?,
             slice(array_of_subsizes, ndims, "array_of_subsizes")?,
             slice(array_of_starts, ndims, "array_of_starts")?)
        };
        for d in 0..ndims as usize {
            if sizes[d] <= 0 || subs[d] <= 0 || starts[d] < 0 || starts[d] + subs[d] > sizes[d] {
                return Err(crate::mpi_err!(MPI_ERR_ARG,
                    "dimension {d}: size {}, subsize {} and start {} do not describe a subarray",
                    sizes[d], subs[d], starts[d]));
            }
        }
        let c = order_c(order)?;
        let u = |v: &[c_int]| v.iter().map(|&x| x as usize).collect::<Vec<_>>();
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let t = Datatype::subarray(&u(sizes), &u(subs), &u(starts), c, &o);
                let mut ints = vec![ndims];
                ints.extend(sizes);
                ints.extend(subs);
                ints.extend(starts);
                ints.push(order);
                made(t, MPI_COMBINER_SUBARRAY, ints, vec![], vec![(oldtype, o)])
            })
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_darray(size: c_int, rank: c_int, ndims: c_int,
        array_of_gsizes: *const c_int, array_of_distribs: *const c_int,
        array_of_dargs: *const c_int, array_of_psizes: *const c_int, order: c_int,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        if ndims <= 0 {
            return Err(crate::mpi_err!(MPI_ERR_DIMS, "ndims {ndims} must be positive"));
        }
        // SAFETY: the arrays hold `ndims` entries each.
        let (g, dist, darg, p) = unsafe {
            (slice(array_of_gsizes, ndims, "array_of_gsizes")?,
             slice(array_of_distribs, ndims, "array_of_distribs")?,
             slice(array_of_dargs, ndims, "array_of_dargs")?,
             slice(array_of_psizes, ndims, "array_of_psizes")?)
        };
        let procs: i64 = p.iter().map(|&x| x as i64).product();
        if p.iter().any(|&x| x <= 0) || procs != size as i64 || g.iter().any(|&x| x <= 0) {
            return Err(crate::mpi_err!(MPI_ERR_ARG,
                "process grid {p:?} does not match size {size}, or a global size in {g:?} is not positive"));
        }
        if rank < 0 || rank >= size {
            return Err(crate::mpi_err!(MPI_ERR_RANK, "rank {rank} not in a grid of {size} processes"));
        }
        let c = order_c(order)?;
        let u = |v: &[c_int]| v.iter().map(|&x| x as usize).collect::<Vec<_>>();
        let distribs: Vec<(i32, i32)> = dist.iter().copied().zip(darg.iter().copied()).collect();
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let t = Datatype::darray(rank as usize, &u(g), &distribs, &u(p), c, &o)?;
                let mut ints = vec![size, rank, ndims];
                ints.extend(g);
                ints.extend(dist);
                ints.extend(darg);
                ints.extend(p);
                ints.push(order);
                made(t, MPI_COMBINER_DARRAY, ints, vec![], vec![(oldtype, o)])
            })
        }
    }
}

mpi_fn! {
    fn MPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        let h = unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                // A duplicate keeps the committed state of the original.
                let mut t = (*o).clone();
                t.name = String::new();
                made(t, MPI_COMBINER_DUP, vec![], vec![], vec![(oldtype, o)])
            })
        };
        h?;
        // SAFETY: `make` wrote the new handle.
        let new = unsafe { *newtype };
        crate::objects::attr::copy_all(crate::objects::attr::Owner::Type, oldtype, new)
    }
}

mpi_fn! {
    fn MPI_Type_get_envelope(datatype: MPI_Datatype, num_integers: *mut c_int,
        num_addresses: *mut c_int, num_datatypes: *mut c_int, combiner: *mut c_int)
        on ErrObj::NoObject => {
        let env = state::with(|st| Ok(st.objects.datatypes.lookup(datatype)?.envelope.clone()))?;
        let (ni, na, nd, c) = match &env {
            Some(e) => (e.ints.len(), e.aints.len(), e.types.len(), e.combiner),
            None => (0, 0, 0, MPI_COMBINER_NAMED),
        };
        // SAFETY: the caller passes int* outputs.
        unsafe {
            out(num_integers, ni as c_int)?;
            out(num_addresses, na as c_int)?;
            out(num_datatypes, nd as c_int)?;
            out(combiner, c)
        }
    }
}

mpi_fn! {
    fn MPI_Type_get_contents(datatype: MPI_Datatype, max_integers: c_int,
        max_addresses: c_int, max_datatypes: c_int, array_of_integers: *mut c_int,
        array_of_addresses: *mut MPI_Aint, array_of_datatypes: *mut MPI_Datatype)
        on ErrObj::NoObject => {
        let types = state::with(|st| {
            let t = st.objects.datatypes.lookup(datatype)?;
            let e = t.envelope.clone().ok_or_else(|| MpiError::new(MPI_ERR_ARG,
                "MPI_Type_get_contents of a predefined datatype (combiner MPI_COMBINER_NAMED)"))?;
            if (max_integers as usize) < e.ints.len() || (max_addresses as usize) < e.aints.len()
                || (max_datatypes as usize) < e.types.len() || max_integers < 0
                || max_addresses < 0 || max_datatypes < 0 {
                return Err(crate::mpi_err!(MPI_ERR_ARG,
                    "arrays too small: the envelope has {} integers, {} addresses, {} datatypes",
                    e.ints.len(), e.aints.len(), e.types.len()));
            }
            // SAFETY: the caller's arrays hold at least as many entries as checked above.
            unsafe {
                for (i, v) in e.ints.iter().enumerate() {
                    array_of_integers.add(i).write(*v);
                }
                for (i, v) in e.aints.iter().enumerate() {
                    array_of_addresses.add(i).write(*v as MPI_Aint);
                }
            }
            // Derived constituents come back as new handles the caller frees.
            let hs: Vec<MPI_Datatype> = e.types.iter().map(|(h, t)| {
                if st.objects.datatypes.is_builtin(*h) && st.objects.datatypes.lookup(*h).is_ok() {
                    *h
                } else {
                    st.objects.datatypes.user.insert(t.clone())
                }
            }).collect();
            Ok(hs)
        })?;
        for (i, h) in types.iter().enumerate() {
            // SAFETY: checked capacity above.
            unsafe { array_of_datatypes.add(i).write(*h) };
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Type_set_name(datatype: MPI_Datatype, type_name: *const c_char) on ErrObj::NoObject => {
        if type_name.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for type_name"));
        }
        // SAFETY: non-null NUL-terminated string from the caller.
        let name = unsafe { std::ffi::CStr::from_ptr(type_name) }.to_string_lossy();
        let name: String = name.chars().take(MPI_MAX_OBJECT_NAME as usize - 1).collect();
        state::with(|st| {
            let dts = &mut st.objects.datatypes;
            let t = dts.lookup(datatype)?;
            let mut t = (*t).clone();
            t.name = name;
            dts.set(datatype, Arc::new(t));
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Type_get_name(datatype: MPI_Datatype, type_name: *mut c_char, resultlen: *mut c_int)
        on ErrObj::NoObject => {
        let name = if datatype == MPI_DATATYPE_NULL {
            "MPI_DATATYPE_NULL".to_string()
        } else {
            state::with(|st| Ok(st.objects.datatypes.lookup(datatype)?.name.clone()))?
        };
        let name = if name.is_empty() { builtin_name(datatype).unwrap_or("").to_string() } else { name };
        // SAFETY: the caller passes a buffer of MPI_MAX_OBJECT_NAME chars and an int*.
        unsafe { out_str(type_name, MPI_MAX_OBJECT_NAME, resultlen, &name) }
    }
}

mpi_fn! {
    fn MPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut MPI_Datatype)
        on ErrObj::NoObject => {
        let choices: &[MPI_Datatype] = match typeclass {
            MPI_TYPECLASS_INTEGER => &[MPI_INTEGER1, MPI_INTEGER2, MPI_INTEGER4, MPI_INTEGER8],
            MPI_TYPECLASS_REAL => &[MPI_REAL4, MPI_REAL8, MPI_REAL16],
            MPI_TYPECLASS_COMPLEX => &[MPI_COMPLEX8, MPI_COMPLEX16, MPI_COMPLEX32],
            _ => return Err(crate::mpi_err!(MPI_ERR_ARG, "invalid typeclass {typeclass}")),
        };
        let found = choices.iter().copied().find(|&h| (h as u32 >> 8) & 0xff == size as u32)
            .ok_or_else(|| crate::mpi_err!(MPI_ERR_ARG,
                "no predefined type of typeclass {typeclass} has size {size}"))?;
        // SAFETY: the caller passes an MPI_Datatype* output.
        unsafe { out(datatype, found) }
    }
}

mpi_fn! {
    fn MPI_Type_commit(datatype: *mut MPI_Datatype) on ErrObj::NoObject => {
        if datatype.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for datatype"));
        }
        // SAFETY: non-null; the caller passes an MPI_Datatype*.
        let h = unsafe { *datatype };
        state::with(|st| {
            let t = st.objects.datatypes.lookup(h)?;
            if !t.committed {
                let mut committed = (*t).clone();
                committed.committed = true;
                if let Some(slot) = st.objects.datatypes.user.get_mut(h) {
                    *slot = Arc::new(committed);
                }
            }
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Type_free(datatype: *mut MPI_Datatype) on ErrObj::NoObject => {
        if datatype.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for datatype"));
        }
        // SAFETY: non-null; the caller passes an MPI_Datatype*.
        let h = unsafe { *datatype };
        state::with(|st| {
            st.objects.datatypes.lookup(h)?;
            if st.objects.datatypes.is_builtin(h) {
                return Err(crate::mpi_err!(
                    MPI_ERR_TYPE,
                    "cannot free predefined datatype {:#x}",
                    h as u32
                ));
            }
            Ok(())
        })?;
        crate::objects::attr::delete_all(crate::objects::attr::Owner::Type, h)?;
        state::with(|st| {
            // Requests in flight hold their own Arc, so freeing here is safe.
            st.objects.datatypes.user.remove(h);
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { out(datatype, MPI_DATATYPE_NULL) }
    }
}

fn query<R>(h: MPI_Datatype, f: impl FnOnce(&Datatype) -> R) -> MpiResult<R> {
    state::with(|st| Ok(f(&*st.objects.datatypes.lookup(h)?)))
}

mpi_fn! {
    fn MPI_Type_size(datatype: MPI_Datatype, size: *mut c_int) on ErrObj::NoObject => {
        let s = query(datatype, |t| t.size)?;
        let v = c_int::try_from(s).unwrap_or(MPI_UNDEFINED);
        // SAFETY: the caller passes an int* output.
        unsafe { out(size, v) }
    }
}

mpi_fn! {
    fn MPI_Type_size_x(datatype: MPI_Datatype, size: *mut MPI_Count) on ErrObj::NoObject => {
        let s = query(datatype, |t| t.size)?;
        // SAFETY: the caller passes an MPI_Count* output.
        unsafe { out(size, s as MPI_Count) }
    }
}

mpi_fn! {
    fn MPI_Type_get_extent(datatype: MPI_Datatype, lb: *mut MPI_Aint, extent: *mut MPI_Aint)
        on ErrObj::NoObject => {
        let (l, e) = query(datatype, |t| (t.lb, t.extent))?;
        // SAFETY: the caller passes MPI_Aint* outputs.
        unsafe { out(lb, l as MPI_Aint)?; out(extent, e as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_Type_get_extent_x(datatype: MPI_Datatype, lb: *mut MPI_Count, extent: *mut MPI_Count)
        on ErrObj::NoObject => {
        let (l, e) = query(datatype, |t| (t.lb, t.extent))?;
        // SAFETY: the caller passes MPI_Count* outputs.
        unsafe { out(lb, l as MPI_Count)?; out(extent, e as MPI_Count) }
    }
}

mpi_fn! {
    fn MPI_Type_get_true_extent(datatype: MPI_Datatype, true_lb: *mut MPI_Aint,
        true_extent: *mut MPI_Aint) on ErrObj::NoObject => {
        let (l, e) = query(datatype, |t| (t.true_lb, t.true_extent))?;
        // SAFETY: the caller passes MPI_Aint* outputs.
        unsafe { out(true_lb, l as MPI_Aint)?; out(true_extent, e as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_Type_get_true_extent_x(datatype: MPI_Datatype, true_lb: *mut MPI_Count,
        true_extent: *mut MPI_Count) on ErrObj::NoObject => {
        let (l, e) = query(datatype, |t| (t.true_lb, t.true_extent))?;
        // SAFETY: the caller passes MPI_Count* outputs.
        unsafe { out(true_lb, l as MPI_Count)?; out(true_extent, e as MPI_Count) }
    }
}

mpi_fn! {
    fn MPI_Get_address(location: *const std::ffi::c_void, address: *mut MPI_Aint)
        on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(address, location as MPI_Aint) }
    }
}

// MPI-1 names removed from the standard in MPI-3 that MPICH still exports.

mpi_fn! {
    fn MPI_Address(location: *mut std::ffi::c_void, address: *mut MPI_Aint) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(address, location as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_Type_extent(datatype: MPI_Datatype, extent: *mut MPI_Aint) on ErrObj::NoObject => {
        let e = query(datatype, |t| t.extent)?;
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(extent, e as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_Type_lb(datatype: MPI_Datatype, displacement: *mut MPI_Aint) on ErrObj::NoObject => {
        let l = query(datatype, |t| t.lb)?;
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(displacement, l as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_Type_ub(datatype: MPI_Datatype, displacement: *mut MPI_Aint) on ErrObj::NoObject => {
        let u = query(datatype, |t| t.lb + t.extent)?;
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(displacement, u as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_Type_hvector(count: c_int, blocklength: c_int, stride: MPI_Aint,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: same contract as MPI_Type_create_hvector.
        code(unsafe { PMPI_Type_create_hvector(count, blocklength, stride, oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_hindexed(count: c_int, array_of_blocklengths: *mut c_int,
        array_of_displacements: *mut MPI_Aint, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: same contract as MPI_Type_create_hindexed.
        code(unsafe { PMPI_Type_create_hindexed(count, array_of_blocklengths,
            array_of_displacements, oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_struct(count: c_int, array_of_blocklengths: *mut c_int,
        array_of_displacements: *mut MPI_Aint, array_of_types: *mut MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: same contract as MPI_Type_create_struct.
        code(unsafe { PMPI_Type_create_struct(count, array_of_blocklengths,
            array_of_displacements, array_of_types, newtype) })
    }
}

/// Passes on the outcome of an entry point that already ran its error handler.
fn code(rc: c_int) -> MpiResult<()> {
    if rc == MPI_SUCCESS {
        Ok(())
    } else {
        Err(MpiError::from_code(rc))
    }
}

// Large-count (`_c`) forms (MPI 4.1 section 5.1). Counts are converted to the int forms,
// which hold every type a program can build in memory here; a count beyond an int is
// refused with MPI_ERR_VALUE_TOO_LARGE rather than silently truncated.

fn small(v: MPI_Count, what: &str) -> MpiResult<c_int> {
    c_int::try_from(v).map_err(|_| {
        crate::mpi_err!(
            MPI_ERR_VALUE_TOO_LARGE,
            "{what} {v} does not fit in an int (large counts are not supported yet)"
        )
    })
}

/// # Safety
/// `p` holds `n` counts.
unsafe fn small_array(p: *const MPI_Count, n: MPI_Count, what: &str) -> MpiResult<Vec<c_int>> {
    let n = small(n, "count")?;
    // SAFETY: per this function's contract.
    unsafe { slice(p, n, what) }?
        .iter()
        .map(|&v| small(v, what))
        .collect()
}

mpi_fn! {
    fn MPI_Type_size_c(datatype: MPI_Datatype, size: *mut MPI_Count) on ErrObj::NoObject => {
        let s = query(datatype, |t| t.size)?;
        // SAFETY: the caller passes an MPI_Count* output.
        unsafe { out(size, s as MPI_Count) }
    }
}

mpi_fn! {
    fn MPI_Type_get_extent_c(datatype: MPI_Datatype, lb: *mut MPI_Count, extent: *mut MPI_Count)
        on ErrObj::NoObject => {
        let (l, e) = query(datatype, |t| (t.lb, t.extent))?;
        // SAFETY: the caller passes MPI_Count* outputs.
        unsafe { out(lb, l as MPI_Count)?; out(extent, e as MPI_Count) }
    }
}

mpi_fn! {
    fn MPI_Type_get_true_extent_c(datatype: MPI_Datatype, true_lb: *mut MPI_Count,
        true_extent: *mut MPI_Count) on ErrObj::NoObject => {
        let (l, e) = query(datatype, |t| (t.true_lb, t.true_extent))?;
        // SAFETY: the caller passes MPI_Count* outputs.
        unsafe { out(true_lb, l as MPI_Count)?; out(true_extent, e as MPI_Count) }
    }
}

mpi_fn! {
    fn MPI_Type_contiguous_c(count: MPI_Count, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype)
        on ErrObj::NoObject => {
        // SAFETY: same contract as MPI_Type_contiguous.
        code(unsafe { PMPI_Type_contiguous(small(count, "count")?, oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_vector_c(count: MPI_Count, blocklength: MPI_Count, stride: MPI_Count,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: same contract as MPI_Type_vector.
        code(unsafe { PMPI_Type_vector(small(count, "count")?, small(blocklength, "blocklength")?,
            small(stride, "stride")?, oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_create_hvector_c(count: MPI_Count, blocklength: MPI_Count, stride: MPI_Count,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: same contract as MPI_Type_create_hvector.
        code(unsafe { PMPI_Type_create_hvector(small(count, "count")?,
            small(blocklength, "blocklength")?, stride as MPI_Aint, oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_indexed_c(count: MPI_Count, array_of_blocklengths: *const MPI_Count,
        array_of_displacements: *const MPI_Count, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the arrays hold `count` entries.
        let (l, d) = unsafe { (small_array(array_of_blocklengths, count, "array_of_blocklengths")?,
            small_array(array_of_displacements, count, "array_of_displacements")?) };
        // SAFETY: same contract as MPI_Type_indexed, with our own arrays.
        code(unsafe { PMPI_Type_indexed(small(count, "count")?, l.as_ptr(), d.as_ptr(), oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_create_hindexed_c(count: MPI_Count, array_of_blocklengths: *const MPI_Count,
        array_of_displacements: *const MPI_Count, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the arrays hold `count` entries; MPI_Count and MPI_Aint are both 64-bit.
        let l = unsafe { small_array(array_of_blocklengths, count, "array_of_blocklengths")? };
        // SAFETY: same contract as MPI_Type_create_hindexed.
        code(unsafe { PMPI_Type_create_hindexed(small(count, "count")?, l.as_ptr(),
            array_of_displacements.cast(), oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_create_indexed_block_c(count: MPI_Count, blocklength: MPI_Count,
        array_of_displacements: *const MPI_Count, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the array holds `count` entries.
        let d = unsafe { small_array(array_of_displacements, count, "array_of_displacements")? };
        // SAFETY: same contract as MPI_Type_create_indexed_block.
        code(unsafe { PMPI_Type_create_indexed_block(small(count, "count")?,
            small(blocklength, "blocklength")?, d.as_ptr(), oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_create_hindexed_block_c(count: MPI_Count, blocklength: MPI_Count,
        array_of_displacements: *const MPI_Count, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: same contract as MPI_Type_create_hindexed_block (Count and Aint are 64-bit).
        code(unsafe { PMPI_Type_create_hindexed_block(small(count, "count")?,
            small(blocklength, "blocklength")?, array_of_displacements.cast(), oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_create_struct_c(count: MPI_Count, array_of_blocklengths: *const MPI_Count,
        array_of_displacements: *const MPI_Count, array_of_types: *const MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the arrays hold `count` entries.
        let l = unsafe { small_array(array_of_blocklengths, count, "array_of_blocklengths")? };
        // SAFETY: same contract as MPI_Type_create_struct (Count and Aint are 64-bit).
        code(unsafe { PMPI_Type_create_struct(small(count, "count")?, l.as_ptr(),
            array_of_displacements.cast(), array_of_types, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_create_subarray_c(ndims: c_int, array_of_sizes: *const MPI_Count,
        array_of_subsizes: *const MPI_Count, array_of_starts: *const MPI_Count, order: c_int,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        let n = MPI_Count::from(ndims);
        // SAFETY: the arrays hold `ndims` entries.
        let (a, b, c) = unsafe { (small_array(array_of_sizes, n, "array_of_sizes")?,
            small_array(array_of_subsizes, n, "array_of_subsizes")?,
            small_array(array_of_starts, n, "array_of_starts")?) };
        // SAFETY: same contract as MPI_Type_create_subarray, with our own arrays.
        code(unsafe { PMPI_Type_create_subarray(ndims, a.as_ptr(), b.as_ptr(), c.as_ptr(), order,
            oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_create_darray_c(size: c_int, rank: c_int, ndims: c_int,
        array_of_gsizes: *const MPI_Count, array_of_distribs: *const c_int,
        array_of_dargs: *const c_int, array_of_psizes: *const c_int, order: c_int,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the array holds `ndims` entries.
        let g = unsafe { small_array(array_of_gsizes, MPI_Count::from(ndims), "array_of_gsizes")? };
        // SAFETY: same contract as MPI_Type_create_darray, with our own gsizes array.
        code(unsafe { PMPI_Type_create_darray(size, rank, ndims, g.as_ptr(), array_of_distribs,
            array_of_dargs, array_of_psizes, order, oldtype, newtype) })
    }
}

mpi_fn! {
    fn MPI_Type_create_resized_c(oldtype: MPI_Datatype, lb: MPI_Count, extent: MPI_Count,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: same contract as MPI_Type_create_resized.
        code(unsafe { PMPI_Type_create_resized(oldtype, lb as MPI_Aint, extent as MPI_Aint, newtype) })
    }
}

mpi_fn! {
    /// Envelopes are recorded in the int form, so there are never large counts.
    fn MPI_Type_get_envelope_c(datatype: MPI_Datatype, num_integers: *mut MPI_Count,
        num_addresses: *mut MPI_Count, num_large_counts: *mut MPI_Count,
        num_datatypes: *mut MPI_Count, combiner: *mut c_int) on ErrObj::NoObject => {
        let (mut ni, mut na, mut nd) = (0, 0, 0);
        // SAFETY: locals for the int form; the caller passes the outputs.
        unsafe {
            code(PMPI_Type_get_envelope(datatype, &mut ni, &mut na, &mut nd, combiner))?;
            out(num_integers, ni.into())?;
            out(num_addresses, na.into())?;
            out(num_large_counts, 0)?;
            out(num_datatypes, nd.into())
        }
    }
}

mpi_fn! {
    fn MPI_Type_get_contents_c(datatype: MPI_Datatype, max_integers: MPI_Count,
        max_addresses: MPI_Count, _max_large_counts: MPI_Count, max_datatypes: MPI_Count,
        array_of_integers: *mut c_int, array_of_addresses: *mut MPI_Aint,
        _array_of_large_counts: *mut MPI_Count, array_of_datatypes: *mut MPI_Datatype)
        on ErrObj::NoObject => {
        let cap = |v: MPI_Count| c_int::try_from(v).unwrap_or(c_int::MAX);
        // SAFETY: same contract as MPI_Type_get_contents.
        code(unsafe { PMPI_Type_get_contents(datatype, cap(max_integers), cap(max_addresses),
            cap(max_datatypes), array_of_integers, array_of_addresses, array_of_datatypes) })
    }
}

/// The predefined Fortran type of `class` that has at least decimal precision `p` and
/// exponent range `r` (MPI_UNDEFINED: any), as gfortran's kinds.
fn f90_base(combiner: c_int, p: c_int, r: c_int) -> MpiResult<MPI_Datatype> {
    let ok = |v: c_int, max: c_int| v == MPI_UNDEFINED || (0..=max).contains(&v);
    let found = match combiner {
        MPI_COMBINER_F90_INTEGER => [
            (2, MPI_INTEGER1),
            (4, MPI_INTEGER2),
            (9, MPI_INTEGER4),
            (18, MPI_INTEGER8),
        ]
        .into_iter()
        .find(|&(max, _)| ok(r, max))
        .map(|x| x.1),
        _ => {
            let kinds = if combiner == MPI_COMBINER_F90_REAL {
                [
                    (6, 37, MPI_REAL4),
                    (15, 307, MPI_REAL8),
                    (33, 4931, MPI_REAL16),
                ]
            } else {
                [
                    (6, 37, MPI_COMPLEX8),
                    (15, 307, MPI_COMPLEX16),
                    (33, 4931, MPI_COMPLEX32),
                ]
            };
            kinds
                .into_iter()
                .find(|&(mp, mr, _)| ok(p, mp) && ok(r, mr))
                .map(|x| x.2)
        }
    };
    found.ok_or_else(|| {
        crate::mpi_err!(
            MPI_ERR_ARG,
            "no Fortran type has precision {p} and range {r}"
        )
    })
}

/// # Safety
/// `newtype` is the caller's MPI_Datatype* output.
unsafe fn f90(combiner: c_int, p: c_int, r: c_int, newtype: *mut MPI_Datatype) -> MpiResult<()> {
    let base = f90_base(combiner, p, r)?;
    let h = state::with(|st| st.objects.datatypes.f90(combiner, p, r, base))?;
    // SAFETY: per this function's contract.
    unsafe { out(newtype, h) }
}

mpi_fn! {
    fn MPI_Type_create_f90_real(p: c_int, r: c_int, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Datatype* output.
        unsafe { f90(MPI_COMBINER_F90_REAL, p, r, newtype) }
    }
}

mpi_fn! {
    fn MPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Datatype* output.
        unsafe { f90(MPI_COMBINER_F90_COMPLEX, p, r, newtype) }
    }
}

mpi_fn! {
    fn MPI_Type_create_f90_integer(r: c_int, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Datatype* output.
        unsafe { f90(MPI_COMBINER_F90_INTEGER, MPI_UNDEFINED, r, newtype) }
    }
}

mpi_fn! {
    /// The predefined (value, index) pair type, or MPI_DATATYPE_NULL when there is none.
    fn MPI_Type_get_value_index(value_type: MPI_Datatype, index_type: MPI_Datatype,
        pair_type: *mut MPI_Datatype) on ErrObj::NoObject => {
        state::with(|st| { st.objects.datatypes.lookup(value_type)?; st.objects.datatypes.lookup(index_type).map(|_| ()) })?;
        let pairs = [
            (MPI_FLOAT, MPI_INT, MPI_FLOAT_INT), (MPI_DOUBLE, MPI_INT, MPI_DOUBLE_INT),
            (MPI_LONG, MPI_INT, MPI_LONG_INT), (MPI_SHORT, MPI_INT, MPI_SHORT_INT),
            (MPI_LONG_DOUBLE, MPI_INT, MPI_LONG_DOUBLE_INT), (MPI_INT, MPI_INT, MPI_2INT),
            (MPI_REAL, MPI_REAL, MPI_2REAL), (MPI_INTEGER, MPI_INTEGER, MPI_2INTEGER),
            (MPI_DOUBLE_PRECISION, MPI_DOUBLE_PRECISION, MPI_2DOUBLE_PRECISION),
        ];
        let h = pairs.iter().find(|p| p.0 == value_type && p.1 == index_type)
            .map_or(MPI_DATATYPE_NULL, |p| p.2);
        // SAFETY: the caller passes an MPI_Datatype* output.
        unsafe { out(pair_type, h) }
    }
}
