//! Communicator calls at the C edge: queries, naming, predefined attributes, creation
//! (dup/split) and free.

use super::consts::*;
use super::{out, out_str};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::comm::Comm;
use crate::runtime::pmi;
use crate::state;
use std::ffi::c_void;
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicI32, Ordering};

fn with_comm<R>(comm: MPI_Comm, f: impl FnOnce(&Comm) -> R) -> MpiResult<R> {
    state::with(|st| Ok(f(st.objects.comms.get(comm)?)))
}

mpi_fn! {
    fn MPI_Comm_rank(comm: MPI_Comm, rank: *mut c_int) on ErrObj::Comm(comm) => {
        let r = with_comm(comm, |c| c.rank as c_int)?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(rank, r) }
    }
}

mpi_fn! {
    fn MPI_Comm_size(comm: MPI_Comm, size: *mut c_int) on ErrObj::Comm(comm) => {
        let n = with_comm(comm, |c| c.size() as c_int)?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(size, n) }
    }
}

mpi_fn! {
    fn MPI_Comm_compare(comm1: MPI_Comm, comm2: MPI_Comm, result: *mut c_int)
        on ErrObj::Comm(comm1) => {
        let r = state::with(|st| {
            let a = st.objects.comms.get(comm1)?;
            let b = st.objects.comms.get(comm2)?;
            Ok(if comm1 == comm2 {
                MPI_IDENT
            } else if a.group == b.group {
                MPI_CONGRUENT
            } else {
                let mut x = a.group.to_vec();
                let mut y = b.group.to_vec();
                x.sort_unstable();
                y.sort_unstable();
                if x == y { MPI_SIMILAR } else { MPI_UNEQUAL }
            })
        })?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(result, r) }
    }
}

mpi_fn! {
    fn MPI_Comm_test_inter(comm: MPI_Comm, flag: *mut c_int) on ErrObj::Comm(comm) => {
        // Intercommunicators come with the object-model work; every comm here is intra.
        with_comm(comm, |_| ())?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(flag, 0) }
    }
}

mpi_fn! {
    fn MPI_Comm_set_name(comm: MPI_Comm, comm_name: *const c_char) on ErrObj::Comm(comm) => {
        if comm_name.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for comm_name"));
        }
        // SAFETY: non-null NUL-terminated string from the caller.
        let name = unsafe { std::ffi::CStr::from_ptr(comm_name) }.to_string_lossy();
        let max = MPI_MAX_OBJECT_NAME as usize - 1;
        let name: String = name.chars().take(max).collect();
        state::with(|st| {
            st.objects.comms.get_mut(comm)?.name = name;
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Comm_get_name(comm: MPI_Comm, comm_name: *mut c_char, resultlen: *mut c_int)
        on ErrObj::Comm(comm) => {
        let name = with_comm(comm, |c| c.name.clone())?;
        // SAFETY: the caller passes a buffer of MPI_MAX_OBJECT_NAME chars and an int*.
        unsafe { out_str(comm_name, MPI_MAX_OBJECT_NAME, resultlen, &name) }
    }
}

/// A new communicator with the same group, in the same order, and a new context.
fn dup(comm: MPI_Comm) -> MpiResult<MPI_Comm> {
    state::with(|st| {
        let rank = st.objects.comms.get(comm)?.rank as c_int;
        st.comm_split(comm, 0, rank)
    })
}

mpi_fn! {
    fn MPI_Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm) on ErrObj::Comm(comm) => {
        let h = dup(comm)?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

mpi_fn! {
    fn MPI_Comm_dup_with_info(comm: MPI_Comm, _info: c_int, newcomm: *mut MPI_Comm)
        on ErrObj::Comm(comm) => {
        // No info hints change a communicator's behaviour yet.
        let h = dup(comm)?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

mpi_fn! {
    fn MPI_Comm_split(comm: MPI_Comm, color: c_int, key: c_int, newcomm: *mut MPI_Comm)
        on ErrObj::Comm(comm) => {
        let h = state::with(|st| st.comm_split(comm, color, key))?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

mpi_fn! {
    fn MPI_Comm_free(comm: *mut MPI_Comm) on ErrObj::NoObject => {
        if comm.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for comm"));
        }
        // SAFETY: non-null; the caller passes an MPI_Comm*.
        let h = unsafe { *comm };
        state::with(|st| {
            if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
                return Err(crate::mpi_err!(MPI_ERR_COMM, "cannot free a predefined communicator"));
            }
            st.objects.comms.get(h).map_err(|e| e.on(ErrObj::Comm(h)))?;
            st.objects.comms.user.remove(h);
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { out(comm, MPI_COMM_NULL) }
    }
}

/// Values of the predefined attributes, at fixed addresses: MPI hands out pointers to them.
struct PredefinedAttrs {
    tag_ub: AtomicI32,
    host: AtomicI32,
    io: AtomicI32,
    wtime_is_global: AtomicI32,
    universe_size: AtomicI32,
    appnum: AtomicI32,
    lastusedcode: AtomicI32,
}

static ATTRS: PredefinedAttrs = PredefinedAttrs {
    tag_ub: AtomicI32::new(0),
    host: AtomicI32::new(MPI_PROC_NULL),
    // Every process can do I/O.
    io: AtomicI32::new(MPI_ANY_SOURCE),
    // Each process's MPI_Wtime has its own origin.
    wtime_is_global: AtomicI32::new(0),
    universe_size: AtomicI32::new(0),
    appnum: AtomicI32::new(0),
    lastusedcode: AtomicI32::new(MPI_ERR_LASTCODE),
};

/// The address of a predefined attribute's value, or None for another keyval.
fn predefined(keyval: c_int) -> Option<&'static AtomicI32> {
    let a = &ATTRS;
    let (slot, value) = match keyval {
        MPI_TAG_UB => (&a.tag_ub, crate::p2p::ops::TAG_UB),
        MPI_HOST => return Some(&a.host),
        MPI_IO => return Some(&a.io),
        MPI_WTIME_IS_GLOBAL => return Some(&a.wtime_is_global),
        MPI_UNIVERSE_SIZE => (&a.universe_size, pmi::universe_size().unwrap_or(0) as c_int),
        MPI_APPNUM => (&a.appnum, pmi::appnum().unwrap_or(0) as c_int),
        MPI_LASTUSEDCODE => return Some(&a.lastusedcode),
        _ => return None,
    };
    slot.store(value, Ordering::Relaxed);
    Some(slot)
}

/// MPI_Comm_get_attr for the predefined keyvals (user keyvals come with the object model).
///
/// # Safety
/// `attribute_val` is valid for writing one pointer; `flag` for one int.
unsafe fn get_attr(
    comm: MPI_Comm,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> MpiResult<()> {
    with_comm(comm, |_| ())?;
    match predefined(keyval) {
        Some(v) => {
            // SAFETY: per this function's contract; the value lives in a static.
            unsafe {
                out(attribute_val.cast::<*mut c_int>(), v.as_ptr())?;
                out(flag, 1)
            }
        }
        None if keyval == MPI_KEYVAL_INVALID => Err(MpiError::new(
            MPI_ERR_KEYVAL,
            "MPI_KEYVAL_INVALID is not a keyval",
        )),
        None => Err(crate::mpi_err!(
            MPI_ERR_KEYVAL,
            "keyval {:#x} is not a predefined attribute (user keyvals are not implemented yet)",
            keyval as u32
        )),
    }
}

mpi_fn! {
    fn MPI_Comm_get_attr(comm: MPI_Comm, comm_keyval: c_int, attribute_val: *mut c_void,
        flag: *mut c_int) on ErrObj::Comm(comm) => {
        // SAFETY: the caller passes a void** (as void*) and an int*.
        unsafe { get_attr(comm, comm_keyval, attribute_val, flag) }
    }
}

mpi_fn! {
    /// The MPI-1 name of MPI_Comm_get_attr (removed from the standard, still widely used).
    fn MPI_Attr_get(comm: MPI_Comm, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int)
        on ErrObj::Comm(comm) => {
        // SAFETY: the caller passes a void** (as void*) and an int*.
        unsafe { get_attr(comm, keyval, attribute_val, flag) }
    }
}
