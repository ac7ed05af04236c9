//! Communicator calls at the C edge: queries, naming, predefined attributes, creation
//! (dup/split) and free.

use super::consts::*;
use super::{out, out_given, out_str};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::attr::{self, AttrKind, Owner};
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

/// Two groups of distinct communicators: MPI_CONGRUENT (same ranks in the same order),
/// MPI_SIMILAR (same processes) or MPI_UNEQUAL.
fn compare_groups(a: &[u32], b: &[u32]) -> c_int {
    if a == b {
        return MPI_CONGRUENT;
    }
    let (mut x, mut y) = (a.to_vec(), b.to_vec());
    x.sort_unstable();
    y.sort_unstable();
    if x == y {
        MPI_SIMILAR
    } else {
        MPI_UNEQUAL
    }
}

mpi_fn! {
    fn MPI_Comm_compare(comm1: MPI_Comm, comm2: MPI_Comm, result: *mut c_int)
        on ErrObj::Comm(comm1) => {
        let r = state::with(|st| {
            let a = st.objects.comms.get(comm1)?;
            let b = st.objects.comms.get(comm2).map_err(|e| e.on(ErrObj::Comm(comm2)))?;
            Ok(if comm1 == comm2 {
                MPI_IDENT
            } else {
                // Intercommunicators compare both groups and take the weaker result
                // (MPI 4.1 7.4.1); an inter- and an intracommunicator are unequal.
                match (&a.inter, &b.inter) {
                    (None, None) => compare_groups(&a.group, &b.group),
                    (Some(x), Some(y)) => compare_groups(&a.group, &b.group)
                        .max(compare_groups(&x.remote, &y.remote)),
                    _ => MPI_UNEQUAL,
                }
            })
        })?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(result, r) }
    }
}

mpi_fn! {
    fn MPI_Comm_test_inter(comm: MPI_Comm, flag: *mut c_int) on ErrObj::Comm(comm) => {
        let inter = with_comm(comm, |c| c.inter.is_some())?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(flag, inter as c_int) }
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
        let name = if comm == MPI_COMM_NULL {
            "MPI_COMM_NULL".to_string()
        } else {
            with_comm(comm, |c| c.name.clone())?
        };
        // SAFETY: the caller passes a buffer of MPI_MAX_OBJECT_NAME chars and an int*.
        unsafe { out_str(comm_name, MPI_MAX_OBJECT_NAME, resultlen, &name) }
    }
}

/// MPI_Comm_dup: new context, same group, error handler, topology and hints; attributes
/// copied through their callbacks (outside the state lock).
pub(crate) fn dup(comm: MPI_Comm) -> MpiResult<MPI_Comm> {
    let h = state::with_held(|st| st.comm_dup(comm))?;
    if let Err(e) = attr::copy_all(Owner::Comm, comm, h) {
        // A failed copy callback fails the dup: no new communicator (MPI 4.1 7.7.2), and the
        // attributes already copied onto it are deleted with it.
        let _ = attr::delete_all(Owner::Comm, h);
        state::with_held(|st| {
            st.comm_remove(h);
            Ok(())
        })?;
        return Err(e);
    }
    Ok(h)
}

/// Copies the hints of `info` (MPI_INFO_NULL: none) onto `comm`.
fn set_info(comm: MPI_Comm, info: MPI_Info) -> MpiResult<()> {
    state::with(|st| {
        // MPI_Comm_get_info returns the hints in use: the standard's (mpi_*) ones; keys
        // Ferrite does not know are ignored, as MPICH ignores them.
        let mut hints = crate::objects::info::hints(info)?;
        hints.entries.retain(|(k, _)| k.starts_with("mpi_"));
        st.objects.comms.get_mut(comm)?.info = hints;
        Ok(())
    })
}

mpi_fn! {
    fn MPI_Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm) on ErrObj::Comm(comm) => {
        out_given(newcomm)?;
        // On failure *newcomm is MPI_COMM_NULL (MPI 4.1 7.7.2; MPICH's attrerr test).
        let h = dup(comm).inspect_err(|_| {
            // SAFETY: the caller passes an MPI_Comm* output (null is refused by out).
            let _ = unsafe { out(newcomm, MPI_COMM_NULL) };
        })?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

mpi_fn! {
    fn MPI_Comm_dup_with_info(comm: MPI_Comm, info: MPI_Info, newcomm: *mut MPI_Comm)
        on ErrObj::Comm(comm) => {
        out_given(newcomm)?;
        let h = dup(comm)?;
        set_info(h, info)?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

/// MPI_Comm_idup: the new handle at once, its context id agreed in the background (see
/// objects::comm_idup); attributes are copied now, through their callbacks.
fn idup(comm: MPI_Comm, info: Option<MPI_Info>) -> MpiResult<(MPI_Comm, MPI_Request)> {
    if let Some(info) = info {
        // Checked first: a bad info handle must not leave a dup running.
        crate::objects::info::hints(info)?;
    }
    let (h, r) = state::with(|st| st.comm_idup_start(comm))?;
    if let Some(info) = info {
        set_info(h, info)?;
    }
    if let Err(e) = attr::copy_all(Owner::Comm, comm, h) {
        // The agreement still runs (the other members take part in it); the new
        // communicator is not the caller's.
        let _ = attr::delete_all(Owner::Comm, h);
        return Err(e);
    }
    Ok((h, r))
}

mpi_fn! {
    fn MPI_Comm_idup(comm: MPI_Comm, newcomm: *mut MPI_Comm, request: *mut MPI_Request)
        on ErrObj::Comm(comm) => {
        out_given(newcomm)?;
        let (h, r) = idup(comm, None)?;
        // SAFETY: the caller passes MPI_Comm* and MPI_Request* outputs.
        unsafe { out(newcomm, h)?; out(request, r) }
    }
}

mpi_fn! {
    fn MPI_Comm_idup_with_info(comm: MPI_Comm, info: MPI_Info, newcomm: *mut MPI_Comm,
        request: *mut MPI_Request) on ErrObj::Comm(comm) => {
        out_given(newcomm)?;
        let (h, r) = idup(comm, Some(info))?;
        // SAFETY: the caller passes MPI_Comm* and MPI_Request* outputs.
        unsafe { out(newcomm, h)?; out(request, r) }
    }
}

mpi_fn! {
    fn MPI_Comm_set_info(comm: MPI_Comm, info: MPI_Info) on ErrObj::Comm(comm) => {
        set_info(comm, info)
    }
}

mpi_fn! {
    fn MPI_Comm_get_info(comm: MPI_Comm, info_used: *mut MPI_Info) on ErrObj::Comm(comm) => {
        let hints = state::with(|st| Ok(st.objects.comms.get(comm)?.info.clone()))?;
        let h = crate::objects::info::insert(hints);
        // SAFETY: the caller passes an MPI_Info* output.
        unsafe { out(info_used, h) }
    }
}

mpi_fn! {
    fn MPI_Comm_split(comm: MPI_Comm, color: c_int, key: c_int, newcomm: *mut MPI_Comm)
        on ErrObj::Comm(comm) => {
        out_given(newcomm)?;
        let h = state::with_held(|st| st.comm_split(comm, color, key))?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

mpi_fn! {
    fn MPI_Comm_split_type(comm: MPI_Comm, split_type: c_int, key: c_int, info: MPI_Info,
        newcomm: *mut MPI_Comm) on ErrObj::Comm(comm) => {
        out_given(newcomm)?;
        const RESOURCE: &str = "mpi_hw_resource_type";
        const SHARED_MEMORY: &str = "mpi_shared_memory";
        let asked = crate::objects::info::hints(info)?.get(RESOURCE).map(str::to_string);
        // Shared memory is the one resource we know: guided requests for it (or nothing
        // else) get the host's processes; an unguided request gets them when that is a
        // strict subset of `comm`, and says so through `info`.
        let shared = match split_type {
            MPI_COMM_TYPE_SHARED | MPI_COMM_TYPE_HW_UNGUIDED => true,
            // 4 is MPICH's value of MPI_COMM_TYPE_RESOURCE_GUIDED (mpi4py's wheel passes it).
            MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_RESOURCE_GUIDED | 4 => asked.as_deref() == Some(SHARED_MEMORY),
            MPI_UNDEFINED => false,
            _ => return Err(crate::mpi_err!(MPI_ERR_ARG, "unknown split_type {split_type}")),
        };
        // One lock: split, and for an unguided request drop a result that is all of `comm`.
        let (h, subset) = state::with_held(|st| {
            let h = st.comm_split_type(comm, shared, key)?;
            if split_type != MPI_COMM_TYPE_HW_UNGUIDED || h == MPI_COMM_NULL {
                return Ok((h, false));
            }
            if st.objects.comms.get(h)?.size() == st.objects.comms.get(comm)?.size() {
                st.comm_remove(h);
                return Ok((MPI_COMM_NULL, false));
            }
            Ok((h, true))
        })?;
        if subset && info != MPI_INFO_NULL {
            crate::objects::info::with(|i| { i.get_mut(info)?.set(RESOURCE, SHARED_MEMORY); Ok(()) })?;
        }
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

mpi_fn! {
    fn MPI_Comm_create(comm: MPI_Comm, group: MPI_Group, newcomm: *mut MPI_Comm)
        on ErrObj::Comm(comm) => {
        out_given(newcomm)?;
        let h = state::with_held(|st| {
            let g = st.objects.groups.get(group)?;
            st.comm_create(comm, &g)
        })?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

mpi_fn! {
    fn MPI_Comm_create_group(comm: MPI_Comm, group: MPI_Group, tag: c_int,
        newcomm: *mut MPI_Comm) on ErrObj::Comm(comm) => {
        out_given(newcomm)?;
        if tag < 0 {
            return Err(crate::mpi_err!(MPI_ERR_TAG, "invalid tag {tag}"));
        }
        let h = state::with_held(|st| {
            let g = st.objects.groups.get(group)?;
            st.comm_create_group(comm, &g, tag)
        })?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

mpi_fn! {
    fn MPI_Intercomm_create(local_comm: MPI_Comm, local_leader: c_int, peer_comm: MPI_Comm,
        remote_leader: c_int, tag: c_int, newintercomm: *mut MPI_Comm)
        on ErrObj::Comm(local_comm) => {
        out_given(newintercomm)?;
        let h = state::with_held(|st| {
            st.intercomm_create(local_comm, local_leader, peer_comm, remote_leader, tag)
        })?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newintercomm, h) }
    }
}

mpi_fn! {
    fn MPI_Intercomm_merge(intercomm: MPI_Comm, high: c_int, newintracomm: *mut MPI_Comm)
        on ErrObj::Comm(intercomm) => {
        out_given(newintracomm)?;
        let h = state::with_held(|st| st.intercomm_merge(intercomm, high != 0))?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newintracomm, h) }
    }
}

mpi_fn! {
    fn MPI_Comm_remote_size(comm: MPI_Comm, size: *mut c_int) on ErrObj::Comm(comm) => {
        let n = state::with(|st| {
            let c = st.objects.comms.get(comm)?;
            c.inter.as_ref().map(|i| i.remote.len()).ok_or_else(|| {
                MpiError::new(MPI_ERR_COMM, "MPI_Comm_remote_size needs an intercommunicator")
            })
        })?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(size, n as c_int) }
    }
}

mpi_fn! {
    fn MPI_Comm_remote_group(comm: MPI_Comm, group: *mut MPI_Group) on ErrObj::Comm(comm) => {
        let h = state::with(|st| {
            let c = st.objects.comms.get(comm)?;
            let g = c.inter.as_ref().map(|i| i.remote.clone()).ok_or_else(|| {
                MpiError::new(MPI_ERR_COMM, "MPI_Comm_remote_group needs an intercommunicator")
            })?;
            Ok(st.objects.groups.insert(g))
        })?;
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { out(group, h) }
    }
}

/// MPI_Comm_free's work, shared with MPI_Comm_disconnect.
///
/// # Safety
/// `comm` is null or the caller's MPI_Comm*.
unsafe fn free(comm: *mut MPI_Comm, disconnect: bool) -> MpiResult<()> {
    if comm.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for comm"));
    }
    // SAFETY: non-null; the caller passes an MPI_Comm*.
    let h = unsafe { *comm };
    state::with_held(|st| {
        if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
            return Err(crate::mpi_err!(
                MPI_ERR_COMM,
                "cannot free a predefined communicator"
            ));
        }
        st.objects.comms.get(h).map_err(|e| e.on(ErrObj::Comm(h)))?;
        Ok(())
    })?;
    if disconnect {
        // MPI_Comm_disconnect completes the communicator's pending communication on every
        // member before it goes: a barrier over it does (ours all complete in order).
        crate::coll::blocking(h, |st| {
            crate::coll::plans::barrier(st, h, crate::coll::Mode::Blocking)
        })?;
    }
    // Delete callbacks run first, while the communicator is still valid (MPI 4.1 7.7.2).
    attr::delete_all(Owner::Comm, h)?;
    state::with_held(|st| {
        // Its attached buffer goes with it (a later communicator may reuse the handle).
        crate::abi::p2p::comm_buffer_freed(st, h)?;
        st.comm_remove(h);
        Ok(())
    })?;
    // SAFETY: as above.
    unsafe { out(comm, MPI_COMM_NULL) }
}

mpi_fn! {
    /// Collective over the communicator; with no dynamic processes, a free after the
    /// communicator's pending communication has completed everywhere.
    fn MPI_Comm_disconnect(comm: *mut MPI_Comm) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Comm*.
        unsafe { free(comm, true) }
    }
}

mpi_fn! {
    fn MPI_Comm_free(comm: *mut MPI_Comm) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Comm*.
        unsafe { free(comm, false) }
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

/// For a predefined keyval, the address of its value, or `Some(None)` when it is not set
/// (MPI_APPNUM and MPI_UNIVERSE_SIZE when the launcher gives none, as MPICH); None for
/// another keyval.
fn predefined(keyval: c_int) -> Option<Option<&'static AtomicI32>> {
    let a = &ATTRS;
    let from_launcher = |v: pmi::Result<Option<u32>>| v.ok().flatten().map(|n| n as c_int);
    let (slot, value) = match super::attr::c_keyval(keyval, 0x6440_0000) {
        MPI_TAG_UB => (&a.tag_ub, crate::p2p::ops::TAG_UB),
        MPI_HOST => return Some(Some(&a.host)),
        MPI_IO => return Some(Some(&a.io)),
        MPI_WTIME_IS_GLOBAL => return Some(Some(&a.wtime_is_global)),
        MPI_UNIVERSE_SIZE => match from_launcher(pmi::universe_size()) {
            Some(n) => (&a.universe_size, n),
            None => return Some(None),
        },
        MPI_APPNUM => match from_launcher(pmi::appnum()) {
            Some(n) => (&a.appnum, n),
            None => return Some(None),
        },
        MPI_LASTUSEDCODE => (
            &a.lastusedcode,
            crate::objects::errhandler::last_used_code(),
        ),
        _ => return None,
    };
    slot.store(value, Ordering::Relaxed);
    Some(Some(slot))
}

/// MPI_Comm_get_attr as language `want` sees the value: predefined keyvals (C gets a
/// pointer to the value, Fortran the value), then user keyvals.
pub(crate) fn get_attr(comm: MPI_Comm, keyval: c_int, want: AttrKind) -> MpiResult<Option<usize>> {
    with_comm(comm, |_| ())?;
    if let Some(v) = predefined(keyval) {
        let Some(v) = v else { return Ok(None) };
        // Predefined attributes are on every communicator (copied by every dup, as MPICH).
        return Ok(Some(if want == AttrKind::Ptr {
            v.as_ptr() as usize
        } else {
            v.load(Ordering::Relaxed) as isize as usize
        }));
    }
    Ok(attr::get(Owner::Comm, comm, keyval)?.map(|v| v.as_seen(want)))
}

/// True for the keyvals of predefined attributes (which users cannot set or delete).
pub(crate) fn is_predefined(keyval: c_int) -> bool {
    matches!(
        super::attr::c_keyval(keyval, 0x6440_0000),
        MPI_TAG_UB
            | MPI_HOST
            | MPI_IO
            | MPI_WTIME_IS_GLOBAL
            | MPI_UNIVERSE_SIZE
            | MPI_APPNUM
            | MPI_LASTUSEDCODE
    )
}

mpi_fn! {
    fn MPI_Comm_get_attr(comm: MPI_Comm, comm_keyval: c_int, attribute_val: *mut c_void,
        flag: *mut c_int) on ErrObj::Comm(comm) => {
        let found = get_attr(comm, comm_keyval, AttrKind::Ptr)?;
        // SAFETY: the caller passes a void** (as void*) and an int*.
        unsafe { super::attr::put_found(found, attribute_val, flag) }
    }
}

mpi_fn! {
    /// The MPI-1 name of MPI_Comm_get_attr (removed from the standard, still widely used).
    fn MPI_Attr_get(comm: MPI_Comm, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int)
        on ErrObj::Comm(comm) => {
        let found = get_attr(comm, keyval, AttrKind::Ptr)?;
        // SAFETY: the caller passes a void** (as void*) and an int*.
        unsafe { super::attr::put_found(found, attribute_val, flag) }
    }
}

mpi_fn! {
    /// No process is ever spawned, so no process has a parent.
    fn MPI_Comm_get_parent(parent: *mut MPI_Comm) on ErrObj::NoObject => {
        state::with(|_| Ok(()))?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(parent, MPI_COMM_NULL) }
    }
}

/// A string tag argument.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn string_tag(p: *const c_char) -> MpiResult<String> {
    if p.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "null pointer passed for stringtag",
        ));
    }
    // SAFETY: per this function's contract.
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned())
}

fn check_errhandler(errhandler: MPI_Errhandler) -> MpiResult<()> {
    state::with(|st| {
        st.objects
            .errhandlers
            .resolve(errhandler)
            .map(|_| ())
            .ok_or_else(|| {
                crate::mpi_err!(
                    MPI_ERR_ARG,
                    "invalid error handler {:#x}",
                    errhandler as u32
                )
            })
    })
}

mpi_fn! {
    fn MPI_Comm_create_from_group(group: MPI_Group, stringtag: *const c_char, info: MPI_Info,
        errhandler: MPI_Errhandler, newcomm: *mut MPI_Comm) on ErrObj::NoObject => {
        out_given(newcomm)?;
        // SAFETY: C string from the caller.
        let tag = unsafe { string_tag(stringtag) }?;
        check_errhandler(errhandler)?;
        let h = state::with_held(|st| {
            let g = st.objects.groups.get(group)?;
            let h = st.comm_from_group(&g, &tag)?;
            if h != MPI_COMM_NULL {
                st.objects.comms.get_mut(h)?.errhandler = errhandler;
            }
            Ok(h)
        })?;
        if h != MPI_COMM_NULL {
            set_info(h, info)?;
        }
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newcomm, h) }
    }
}

mpi_fn! {
    fn MPI_Intercomm_create_from_groups(local_group: MPI_Group, local_leader: c_int,
        remote_group: MPI_Group, remote_leader: c_int, stringtag: *const c_char, info: MPI_Info,
        errhandler: MPI_Errhandler, newintercomm: *mut MPI_Comm) on ErrObj::NoObject => {
        out_given(newintercomm)?;
        // SAFETY: C string from the caller.
        let tag = unsafe { string_tag(stringtag) }?;
        check_errhandler(errhandler)?;
        let h = state::with_held(|st| {
            let l = st.objects.groups.get(local_group)?;
            let r = st.objects.groups.get(remote_group)?;
            st.intercomm_from_groups(&l, local_leader, &r, remote_leader, &tag, errhandler)
        })?;
        set_info(h, info)?;
        // SAFETY: the caller passes an MPI_Comm* output.
        unsafe { out(newintercomm, h) }
    }
}
