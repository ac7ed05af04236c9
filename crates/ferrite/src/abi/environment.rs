//! Environment inquiry and process-level calls: timers, processor name, memory allocation,
//! profiling control (MPI 4.1 chapter 9).

use super::consts::*;
use super::{out, out_str};
use crate::error::{ErrObj, MpiError};
use std::ffi::c_void;
use std::os::raw::{c_char, c_int};

fn monotonic_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a valid local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

// MPI_Wtime and MPI_Wtick return a double, so they are written out instead of using
// mpi_fn! (which makes int-returning entry points); they cannot fail.

/// MPI_Wtime: seconds since an arbitrary fixed time (monotonic, per process).
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> f64 {
    monotonic_seconds()
}

#[no_mangle]
pub extern "C" fn MPI_Wtime() -> f64 {
    PMPI_Wtime()
}

/// MPI_Wtick: the resolution of MPI_Wtime.
#[no_mangle]
pub extern "C" fn PMPI_Wtick() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_getres writes one timespec into a valid local.
    unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9).max(1e-9)
}

#[no_mangle]
pub extern "C" fn MPI_Wtick() -> f64 {
    PMPI_Wtick()
}

mpi_fn! {
    fn MPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) on ErrObj::NoObject => {
        let host = crate::runtime::hostname();
        // SAFETY: the caller passes a buffer of MPI_MAX_PROCESSOR_NAME chars and an int*.
        unsafe { out_str(name, MPI_MAX_PROCESSOR_NAME, resultlen, &host) }
    }
}

mpi_fn! {
    fn MPI_Alloc_mem(size: MPI_Aint, _info: MPI_Info, baseptr: *mut c_void) on ErrObj::NoObject => {
        if size < 0 {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "negative size {size}"));
        }
        // malloc(0) may return NULL; ask for one byte so success always has a pointer.
        // SAFETY: malloc has no preconditions.
        let p = unsafe { libc::malloc((size as usize).max(1)) };
        if p.is_null() {
            return Err(crate::mpi_err!(MPI_ERR_NO_MEM, "cannot allocate {size} bytes"));
        }
        // SAFETY: `baseptr` is the caller's void** (passed as void*, as the standard says).
        unsafe { out(baseptr.cast::<*mut c_void>(), p) }
    }
}

mpi_fn! {
    fn MPI_Free_mem(base: *mut c_void) on ErrObj::NoObject => {
        if base.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "MPI_Free_mem of a null pointer"));
        }
        // SAFETY: `base` came from MPI_Alloc_mem (malloc), as the standard requires.
        unsafe { libc::free(base) };
        Ok(())
    }
}

mpi_fn! {
    /// Profiling control: no profiling layer of our own, so nothing to do (the call exists
    /// for tools that interpose it). The C prototype is variadic; extra arguments are ignored.
    fn MPI_Pcontrol(_level: c_int) on ErrObj::NoObject => {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn wtime_is_monotonic_and_tick_is_positive() {
        let a = super::PMPI_Wtime();
        let b = super::PMPI_Wtime();
        assert!(b >= a);
        assert!(super::PMPI_Wtick() > 0.0 && super::PMPI_Wtick() < 1e-3);
    }
}

mpi_fn! {
    /// MPI 4.1 section 11.4.2: the hardware resources MPI_COMM_TYPE_HW_GUIDED can split by.
    /// Ferrite offers none beyond MPI_COMM_TYPE_SHARED, so the new info object is empty
    /// (which the standard allows); the caller frees it.
    fn MPI_Get_hw_resource_info(hw_info: *mut MPI_Info) on ErrObj::NoObject => {
        if hw_info.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null hw_info argument"));
        }
        let h = crate::objects::info::insert(Default::default());
        // SAFETY: `hw_info` is the caller's MPI_Info* (checked non-null).
        unsafe { out(hw_info, h) }
    }
}
