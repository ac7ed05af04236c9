//! Datatype constructors and queries (MPI 4.1 chapter 5, the part point-to-point needs).

use super::consts::*;
use super::{out, slice};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::datatype::Datatype;
use crate::state::{self, Ferrite};
use std::os::raw::c_int;
use std::sync::Arc;

fn count_arg(n: c_int, what: &str) -> MpiResult<usize> {
    if n < 0 {
        return Err(crate::mpi_err!(MPI_ERR_COUNT, "negative {what} {n}"));
    }
    Ok(n as usize)
}

/// Registers a new (uncommitted) type and writes its handle to `newtype`.
///
/// # Safety
/// `newtype` is null or valid for one write.
unsafe fn make(
    newtype: *mut MPI_Datatype,
    f: impl FnOnce(&mut Ferrite) -> MpiResult<Datatype>,
) -> MpiResult<()> {
    if newtype.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "null pointer passed for newtype",
        ));
    }
    let h = state::with(|st| {
        let t = f(st)?;
        Ok(st.objects.datatypes.user.insert(Arc::new(t)))
    })?;
    // SAFETY: checked non-null above; the caller passes an MPI_Datatype*.
    unsafe { out(newtype, h) }
}

fn old(st: &mut Ferrite, h: MPI_Datatype) -> MpiResult<Arc<Datatype>> {
    st.objects.datatypes.lookup(h)
}

mpi_fn! {
    fn MPI_Type_contiguous(count: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype)
        on ErrObj::NoObject => {
        let n = count_arg(count, "count")?;
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                Ok(Datatype::hvector(1, n, 0, &o))
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
                Ok(Datatype::hvector(n, b, stride as isize * o.extent, &o))
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
                Ok(Datatype::hvector(n, b, stride as isize, &o))
            })
        }
    }
}

/// (displacement in bytes, block length) pairs from C arrays; `scale` converts element
/// displacements to bytes (1 for the h- forms).
///
/// # Safety
/// `lens` (if given) and `disps` are valid for `count` reads.
unsafe fn blocks<D: Copy + Into<i64>>(
    count: c_int,
    lens: Option<*const c_int>,
    same_len: c_int,
    disps: *const D,
    scale: isize,
) -> MpiResult<Vec<(isize, usize)>> {
    count_arg(count, "count")?;
    // SAFETY: per this function's contract.
    let d = unsafe { slice(disps, count, "array_of_displacements") }?;
    let l = match lens {
        // SAFETY: per this function's contract.
        Some(p) => unsafe { slice(p, count, "array_of_blocklengths") }?.to_vec(),
        None => vec![same_len; count as usize],
    };
    d.iter()
        .zip(l)
        .map(|(&disp, len)| Ok((disp.into() as isize * scale, count_arg(len, "blocklength")?)))
        .collect()
}

mpi_fn! {
    fn MPI_Type_indexed(count: c_int, array_of_blocklengths: *const c_int,
        array_of_displacements: *const c_int, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's output; arrays hold `count` entries.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                let b = blocks(count, Some(array_of_blocklengths), 0, array_of_displacements, o.extent)?;
                Ok(Datatype::hindexed(&b, &o))
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
                let b = blocks(count, Some(array_of_blocklengths), 0, array_of_displacements, 1)?;
                Ok(Datatype::hindexed(&b, &o))
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
                let b = blocks(count, None, blocklength, array_of_displacements, o.extent)?;
                Ok(Datatype::hindexed(&b, &o))
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
                let b = blocks(count, None, blocklength, array_of_displacements, 1)?;
                Ok(Datatype::hindexed(&b, &o))
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
                let b = blocks(count, Some(array_of_blocklengths), 0, array_of_displacements, 1)?;
                let types = slice(array_of_types, count, "array_of_types")?;
                let olds = types.iter().map(|&t| old(st, t)).collect::<MpiResult<Vec<_>>>()?;
                let parts: Vec<_> = b.iter().zip(&olds).map(|(&(d, l), t)| (d, l, &**t)).collect();
                Ok(Datatype::structure(&parts))
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
                Ok(Datatype::resized(&o, lb as isize, extent as isize))
            })
        }
    }
}

mpi_fn! {
    fn MPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                // A duplicate keeps the committed state of the original.
                Ok((*o).clone())
            })
        }
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
