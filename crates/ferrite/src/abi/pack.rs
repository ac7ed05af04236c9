//! MPI_Pack/MPI_Unpack and their "external32" forms, address arithmetic (MPI 4.1 5.2-5.3).

use super::consts::*;
use super::out;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::datatype::Datatype;
use crate::state;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

fn datatype(dt: MPI_Datatype) -> MpiResult<Arc<Datatype>> {
    state::with(|st| st.objects.datatypes.get(dt))
}

fn count_arg(n: i64) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| crate::mpi_err!(MPI_ERR_COUNT, "negative count {n}"))
}

/// Packs `count` elements at `inbuf` into `outbuf[*position..outsize]`, advancing position.
///
/// # Safety
/// `inbuf` holds `count` elements of `dt`; `outbuf` is writable for `outsize` bytes.
unsafe fn pack_into(
    inbuf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: i64,
    position: i64,
    external: bool,
) -> MpiResult<i64> {
    let n = count_arg(count)?;
    let t = datatype(dt)?;
    if position < 0 || outsize < 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "negative position {position} or outsize {outsize}"
        ));
    }
    t.check_buffer(inbuf.cast(), n as u64)?;
    let unit = if external { t.external_size() } else { t.size };
    let need = (unit * n) as i64;
    if outbuf.is_null() && need > 0 {
        return Err(MpiError::new(MPI_ERR_BUFFER, "null output buffer"));
    }
    if position + need > outsize {
        return Err(crate::mpi_err!(
            MPI_ERR_TRUNCATE,
            "packing {need} bytes at position {position} overflows an output buffer of {outsize} bytes"
        ));
    }
    let mut v = Vec::with_capacity(need as usize);
    if external {
        // SAFETY: per this function's contract.
        unsafe { t.pack_external(inbuf.cast(), n, &mut v) }
            .map_err(|m| MpiError::new(MPI_ERR_CONVERSION, m))?;
    } else {
        // SAFETY: per this function's contract.
        unsafe { t.pack(inbuf.cast(), n, &mut v) };
    }
    if !v.is_empty() {
        // SAFETY: position + len <= outsize, checked above.
        unsafe {
            std::ptr::copy_nonoverlapping(
                v.as_ptr(),
                outbuf.cast::<u8>().add(position as usize),
                v.len(),
            )
        };
    }
    Ok(position + need)
}

/// Unpacks `count` elements from `inbuf[*position..insize]` into `outbuf`.
///
/// # Safety
/// `inbuf` is readable for `insize` bytes; `outbuf` holds `count` elements of `dt`.
unsafe fn unpack_from(
    inbuf: *const c_void,
    insize: i64,
    position: i64,
    outbuf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    external: bool,
) -> MpiResult<i64> {
    let n = count_arg(count)?;
    let t = datatype(dt)?;
    let unit = if external { t.external_size() } else { t.size };
    let need = (unit * n) as i64;
    if position < 0 || position + need > insize {
        return Err(crate::mpi_err!(
            MPI_ERR_TRUNCATE,
            "unpacking {need} bytes at position {position} reads past an input buffer of {insize} bytes"
        ));
    }
    if need == 0 {
        return Ok(position);
    }
    if inbuf.is_null() {
        return Err(MpiError::new(MPI_ERR_BUFFER, "null input buffer"));
    }
    t.check_buffer(outbuf.cast_const().cast(), n as u64)?;
    // SAFETY: position + need <= insize, readable per the contract.
    let src = unsafe {
        std::slice::from_raw_parts(inbuf.cast::<u8>().add(position as usize), need as usize)
    };
    if external {
        let v = src.to_vec();
        // SAFETY: per the contract; `v` is our own copy.
        unsafe { t.unpack_external(&v, outbuf.cast(), n) };
    } else {
        let v = src.to_vec();
        // SAFETY: per the contract; a copy so the regions cannot overlap.
        unsafe { t.unpack(&v, outbuf.cast(), n) };
    }
    Ok(position + need)
}

fn check_datarep(datarep: *const c_char) -> MpiResult<()> {
    if datarep.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "null pointer passed for datarep",
        ));
    }
    // SAFETY: non-null NUL-terminated string from the caller.
    let d = unsafe { CStr::from_ptr(datarep) }.to_string_lossy();
    if d != "external32" {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "unsupported data representation \"{d}\" (only \"external32\")"
        ));
    }
    Ok(())
}

/// # Safety
/// `p` is the int* (MPI_Count*, MPI_Aint*) the caller passes as position.
unsafe fn read_pos<T: Copy + Into<i64>>(p: *const T) -> MpiResult<i64> {
    if p.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "null pointer passed for position",
        ));
    }
    // SAFETY: non-null per the check.
    Ok(unsafe { *p }.into())
}

mpi_fn! {
    fn MPI_Pack, fn MPI_Pack_c(inbuf: *const c_void, incount: Count, datatype: MPI_Datatype,
        outbuf: *mut c_void, outsize: Count, position: *mut Count, comm: MPI_Comm)
        on ErrObj::Comm(comm) => {
        state::with(|st| st.objects.comms.get(comm).map(|_| ()))?;
        // SAFETY: the caller's buffers and position follow MPI_Pack's contract.
        unsafe {
            let p = pack_into(inbuf, incount.into(), datatype, outbuf, outsize.into(), read_pos(position)?, false)?;
            // p <= outsize, which is a Count.
            out(position, p as Count)
        }
    }
}

mpi_fn! {
    fn MPI_Unpack, fn MPI_Unpack_c(inbuf: *const c_void, insize: Count, position: *mut Count,
        outbuf: *mut c_void, outcount: Count, datatype: MPI_Datatype, comm: MPI_Comm)
        on ErrObj::Comm(comm) => {
        state::with(|st| st.objects.comms.get(comm).map(|_| ()))?;
        // SAFETY: the caller's buffers and position follow MPI_Unpack's contract.
        unsafe {
            let p = unpack_from(inbuf, insize.into(), read_pos(position)?, outbuf, outcount.into(), datatype, false)?;
            // p <= insize, which is a Count.
            out(position, p as Count)
        }
    }
}

mpi_fn! {
    fn MPI_Pack_size, fn MPI_Pack_size_c(incount: Count, datatype: MPI_Datatype, comm: MPI_Comm,
        size: *mut Count) on ErrObj::Comm(comm) => {
        let s = state::with(|st| {
            st.objects.comms.get(comm)?;
            let n = count_arg(incount.into())?;
            Ok(st.objects.datatypes.lookup(datatype)?.size * n)
        })?;
        let s = Count::try_from(s).map_err(|_| crate::mpi_err!(MPI_ERR_VALUE_TOO_LARGE,
            "packed size {s} does not fit an int (use MPI_Pack_size_c)"))?;
        // SAFETY: the caller passes an int*/MPI_Count* output.
        unsafe { out(size, s) }
    }
}

/// Bytes of `count` elements of `dt` in "external32".
fn external_size(count: i64, dt: MPI_Datatype) -> MpiResult<usize> {
    let n = count_arg(count)?;
    Ok(state::with(|st| Ok(st.objects.datatypes.lookup(dt)?.external_size()))? * n)
}

mpi_fn! {
    // outsize, position: MPI_Aint(*) in the int form, MPI_Count(*) in _c (the same type).
    fn MPI_Pack_external, fn MPI_Pack_external_c(datarep: *const c_char, inbuf: *const c_void,
        incount: Count, datatype: MPI_Datatype, outbuf: *mut c_void, outsize: MPI_Aint,
        position: *mut MPI_Aint) on ErrObj::NoObject => {
        check_datarep(datarep)?;
        if position.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for position"));
        }
        // SAFETY: the caller's buffers and position follow MPI_Pack_external's contract.
        unsafe {
            let p = pack_into(inbuf, incount.into(), datatype, outbuf, outsize, *position, true)?;
            out(position, p)
        }
    }
}

mpi_fn! {
    // insize, position: MPI_Aint(*) in the int form, MPI_Count(*) in _c (the same type).
    fn MPI_Unpack_external, fn MPI_Unpack_external_c(datarep: *const c_char,
        inbuf: *const c_void, insize: MPI_Aint, position: *mut MPI_Aint, outbuf: *mut c_void,
        outcount: Count, datatype: MPI_Datatype) on ErrObj::NoObject => {
        check_datarep(datarep)?;
        if position.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for position"));
        }
        // SAFETY: the caller's buffers and position follow MPI_Unpack_external's contract.
        unsafe {
            let p = unpack_from(inbuf, insize, *position, outbuf, outcount.into(), datatype, true)?;
            out(position, p)
        }
    }
}

mpi_fn! {
    // size: MPI_Aint* in the int form, MPI_Count* in _c (the same type).
    fn MPI_Pack_external_size, fn MPI_Pack_external_size_c(datarep: *const c_char,
        incount: Count, datatype: MPI_Datatype, size: *mut MPI_Aint) on ErrObj::NoObject => {
        check_datarep(datarep)?;
        let s = external_size(incount.into(), datatype)?;
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(size, s as MPI_Aint) }
    }
}

// MPI_Aint_add / MPI_Aint_diff return an MPI_Aint, so they are written out like MPI_Wtime.

/// MPI_Aint_add: `base + disp` as an address.
#[no_mangle]
pub extern "C" fn PMPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    base.wrapping_add(disp)
}

#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    PMPI_Aint_add(base, disp)
}

/// MPI_Aint_diff: `addr1 - addr2`.
#[no_mangle]
pub extern "C" fn PMPI_Aint_diff(addr1: MPI_Aint, addr2: MPI_Aint) -> MPI_Aint {
    addr1.wrapping_sub(addr2)
}

#[no_mangle]
pub extern "C" fn MPI_Aint_diff(addr1: MPI_Aint, addr2: MPI_Aint) -> MPI_Aint {
    PMPI_Aint_diff(addr1, addr2)
}
