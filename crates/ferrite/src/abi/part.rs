//! Partitioned communication entry points (MPI 4.1 chapter 4): MPI_Psend_init,
//! MPI_Precv_init, MPI_Pready(_range, _list), MPI_Parrived. The requests start, complete and
//! free with the ordinary calls (MPI_Start, MPI_Wait, ...); see `p2p::partitioned`.

use super::consts::*;
use super::out;
use crate::error::{ErrObj, MpiResult};
use crate::state::{self, Held};
use std::ffi::c_void;
use std::os::raw::c_int;

/// partitions x count elements, the size of the whole buffer.
fn whole(call: &str, partitions: c_int, count: MPI_Count) -> MpiResult<(usize, i64)> {
    if partitions < 1 {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "{call}: {partitions} partitions (at least 1 needed)"
        ));
    }
    if count < 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_COUNT,
            "{call}: negative count {count}"
        ));
    }
    let total = count.checked_mul(partitions as i64).ok_or_else(|| {
        crate::mpi_err!(
            MPI_ERR_COUNT,
            "{call}: {partitions} partitions of {count} elements overflow MPI_Count"
        )
    })?;
    Ok((partitions as usize, total))
}

/// Checks `info` (MPI_INFO_NULL or a valid object; no partitioned hints are used).
fn check_info(info: MPI_Info) -> MpiResult<()> {
    crate::objects::info::hints(info).map(drop)
}

mpi_fn! {
    fn MPI_Psend_init(buf: *const c_void, partitions: c_int, count: MPI_Count,
                      datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm,
                      info: MPI_Info, request: *mut MPI_Request) on ErrObj::Comm(comm) => {
        let h = state::with_held(|st: &mut Held| {
            let (n, total) = whole("MPI_Psend_init", partitions, count)?;
            let spec = st.send_spec(buf.cast(), total, datatype, dest, tag, comm,
                                    crate::p2p::request::Mode::Standard)?;
            check_info(info)?;
            st.part_init(comm, spec, n)
        })?;
        // SAFETY: `request` is the caller's MPI_Request*.
        unsafe { out(request, h) }
    }
}

mpi_fn! {
    fn MPI_Precv_init(buf: *mut c_void, partitions: c_int, count: MPI_Count,
                      datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm,
                      info: MPI_Info, request: *mut MPI_Request) on ErrObj::Comm(comm) => {
        let h = state::with_held(|st: &mut Held| {
            let (n, total) = whole("MPI_Precv_init", partitions, count)?;
            let spec = st.recv_spec(buf.cast(), total, datatype, source, tag, comm)?;
            check_info(info)?;
            st.part_init(comm, spec, n)
        })?;
        // SAFETY: `request` is the caller's MPI_Request*.
        unsafe { out(request, h) }
    }
}

mpi_fn! {
    fn MPI_Pready(partition: c_int, request: MPI_Request) on ErrObj::NoObject => {
        state::with(|st| st.pready(request, [partition as i64], "MPI_Pready"))
    }
}

mpi_fn! {
    fn MPI_Pready_range(partition_low: c_int, partition_high: c_int, request: MPI_Request)
        on ErrObj::NoObject => {
        if partition_low > partition_high {
            return Err(crate::mpi_err!(
                MPI_ERR_ARG,
                "MPI_Pready_range: low partition {partition_low} above high {partition_high}"
            ));
        }
        state::with(|st| {
            st.pready(request, partition_low as i64..=partition_high as i64, "MPI_Pready_range")
        })
    }
}

mpi_fn! {
    fn MPI_Pready_list(length: c_int, array_of_partitions: *mut c_int, request: MPI_Request)
        on ErrObj::NoObject => {
        let list: Vec<i64> = match usize::try_from(length) {
            Ok(0) => Vec::new(),
            Ok(n) if !array_of_partitions.is_null() => {
                // SAFETY: the caller passes `length` partition numbers.
                unsafe { std::slice::from_raw_parts(array_of_partitions, n) }
                    .iter()
                    .map(|&p| p as i64)
                    .collect()
            }
            _ => {
                return Err(crate::mpi_err!(
                    MPI_ERR_ARG,
                    "MPI_Pready_list: invalid list (length {length}, array {array_of_partitions:p})"
                ))
            }
        };
        state::with(|st| st.pready(request, list, "MPI_Pready_list"))
    }
}

mpi_fn! {
    fn MPI_Parrived(request: MPI_Request, partition: c_int, flag: *mut c_int)
        on ErrObj::NoObject => {
        let arrived = state::with(|st| st.parrived(request, partition as i64))?;
        // SAFETY: `flag` is the caller's int*.
        unsafe { out(flag, arrived as c_int) }
    }
}
