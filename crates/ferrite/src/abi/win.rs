//! Windows at the C edge (MPI 4.1 chapter 12): creation and freeing, group, name, info,
//! error handlers and attributes, including the predefined MPI_WIN_BASE, MPI_WIN_SIZE,
//! MPI_WIN_DISP_UNIT, MPI_WIN_CREATE_FLAVOR and MPI_WIN_MODEL. RMA calls are in
//! abi/rma.rs.

use super::consts::*;
use super::{out, out_str};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::attr::{self, AttrKind, Owner};
use crate::objects::errhandler::{self, Handler, WinErrhandlerFn};
use crate::objects::win::{Predefined, Win};
use crate::rma::shared::SharedMem;
use crate::state;
use std::ffi::c_void;
use std::os::raw::{c_char, c_int};

/// What a new window holds locally.
struct Local {
    base: usize,
    size: MPI_Aint,
    disp_unit: c_int,
    flavor: c_int,
    memory: Option<Box<[u64]>>,
    shared: Option<SharedMem>,
}

/// The collective part of every creation call: checks the arguments, duplicates `comm`
/// (which synchronizes its processes) and registers the window.
///
/// # Safety
/// `win` is null or valid for one write.
unsafe fn create(comm: MPI_Comm, info: MPI_Info, local: Local, win: *mut MPI_Win) -> MpiResult<()> {
    if win.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for win"));
    }
    if local.size < 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_SIZE,
            "negative window size {}",
            local.size
        ));
    }
    if local.disp_unit <= 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_DISP,
            "displacement unit {} must be positive",
            local.disp_unit
        ));
    }
    let h = state::with_held(|st| {
        let c = st.objects.comms.get(comm)?;
        if c.inter.is_some() {
            return Err(crate::mpi_err!(
                MPI_ERR_COMM,
                "windows need an intracommunicator; {:#x} is an intercommunicator",
                comm as u32
            ));
        }
        let mut hints = crate::objects::info::Info::default();
        crate::objects::win::merge_hints(&mut hints, &crate::objects::info::hints(info)?);
        let dup = st.comm_dup(comm)?;
        let (group, rank) = st
            .objects
            .comms
            .get(dup)
            .map(|c| (c.group.clone(), c.rank))?;
        let h = st.objects.wins.user.insert(Win {
            comm: dup,
            group,
            base: local.base,
            attrs: Box::new(Predefined {
                size: local.size,
                disp_unit: local.disp_unit,
                flavor: local.flavor,
                model: MPI_WIN_UNIFIED,
            }),
            name: String::new(),
            errhandler: crate::objects::comm::DEFAULT_ERRHANDLER,
            info: hints,
            memory: local.memory,
            shared: local.shared,
            attached: Vec::new(),
            rank,
            rma: None,
        });
        st.rma_init(h)?;
        Ok(h)
    })?;
    // SAFETY: checked non-null; the caller passes an MPI_Win*.
    unsafe { out(win, h) }
}

/// The displacement unit of a window (an int; the `_c` forms pass an MPI_Aint).
fn disp_unit_int<T: Copy + TryInto<c_int> + std::fmt::Display>(d: T) -> MpiResult<c_int> {
    d.try_into()
        .map_err(|_| crate::mpi_err!(MPI_ERR_DISP, "displacement unit {d} does not fit in an int"))
}

mpi_fn! {
    fn MPI_Win_create, fn MPI_Win_create_c(base: *mut c_void, size: MPI_Aint, disp_unit: Disp,
        info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win) on ErrObj::Comm(comm) => {
        let disp_unit = disp_unit_int(disp_unit)?;
        let local = Local { base: base as usize, size, disp_unit, flavor: MPI_WIN_FLAVOR_CREATE, memory: None, shared: None };
        // SAFETY: the caller passes an MPI_Win* output.
        unsafe { create(comm, info, local, win) }
    }
}

/// MPI_Win_allocate(_c): `size` bytes of window memory owned by the window.
///
/// # Safety
/// `baseptr` is a void** output; `win` an MPI_Win* output.
unsafe fn allocate(
    size: MPI_Aint,
    disp_unit: c_int,
    info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    win: *mut MPI_Win,
) -> MpiResult<()> {
    if baseptr.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "null pointer passed for baseptr",
        ));
    }
    let bytes = usize::try_from(size)
        .map_err(|_| crate::mpi_err!(MPI_ERR_SIZE, "negative window size {size}"))?;
    // In a shared file when possible, so ranks on this host can map it (rma/direct.rs);
    // else on the heap, reached by messages only.
    let shared = (bytes > 0)
        .then(|| SharedMem::single(bytes, i64::from(disp_unit)).ok())
        .flatten();
    let (base, memory) = match &shared {
        Some(m) => (m.base, None),
        None => {
            let mut memory = vec![0u64; bytes.div_ceil(8)].into_boxed_slice();
            let base = if bytes == 0 {
                0
            } else {
                memory.as_mut_ptr() as usize
            };
            (base, Some(memory))
        }
    };
    let local = Local {
        base,
        size,
        disp_unit,
        flavor: MPI_WIN_FLAVOR_ALLOCATE,
        memory,
        shared,
    };
    // SAFETY: per this function's contract.
    unsafe {
        create(comm, info, local, win)?;
        out(baseptr.cast::<*mut c_void>(), base as *mut c_void)
    }
}

mpi_fn! {
    fn MPI_Win_allocate, fn MPI_Win_allocate_c(size: MPI_Aint, disp_unit: Disp, info: MPI_Info,
        comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win) on ErrObj::Comm(comm) => {
        let d = disp_unit_int(disp_unit)?;
        // SAFETY: the caller passes a void** (as void*) and an MPI_Win*.
        unsafe { allocate(size, d, info, comm, baseptr, win) }
    }
}

/// MPI_Win_allocate_shared(_c): `size` bytes of this process's part of memory every
/// member maps (rma/shared.rs).
///
/// # Safety
/// `baseptr` is a void** output; `win` an MPI_Win* output.
unsafe fn allocate_shared(
    size: MPI_Aint,
    disp_unit: c_int,
    info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    win: *mut MPI_Win,
) -> MpiResult<()> {
    if baseptr.is_null() || win.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "null pointer passed for baseptr or win",
        ));
    }
    if size < 0 {
        return Err(crate::mpi_err!(MPI_ERR_SIZE, "negative window size {size}"));
    }
    if disp_unit <= 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_DISP,
            "displacement unit {disp_unit} must be positive"
        ));
    }
    let (mem, me) = state::with_held(|st| {
        let c = st.objects.comms.get(comm)?;
        if c.inter.is_some() {
            return Err(crate::mpi_err!(
                MPI_ERR_COMM,
                "windows need an intracommunicator; {:#x} is an intercommunicator",
                comm as u32
            ));
        }
        let me = c.rank as usize;
        Ok((st.shared_alloc(comm, me, size, i64::from(disp_unit))?, me))
    })?;
    let base = mem.base + mem.parts[me].0;
    let local = Local {
        base,
        size,
        disp_unit,
        flavor: MPI_WIN_FLAVOR_SHARED,
        memory: None,
        shared: Some(mem),
    };
    // SAFETY: per this function's contract.
    unsafe {
        create(comm, info, local, win)?;
        out(baseptr.cast::<*mut c_void>(), base as *mut c_void)
    }
}

mpi_fn! {
    fn MPI_Win_allocate_shared, fn MPI_Win_allocate_shared_c(size: MPI_Aint, disp_unit: Disp,
        info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void, win: *mut MPI_Win)
        on ErrObj::Comm(comm) => {
        let d = disp_unit_int(disp_unit)?;
        // SAFETY: the caller passes a void** (as void*) and an MPI_Win*.
        unsafe { allocate_shared(size, d, info, comm, baseptr, win) }
    }
}

mpi_fn! {
    fn MPI_Win_create_dynamic(info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win)
        on ErrObj::Comm(comm) => {
        let local = Local { base: 0, size: 0, disp_unit: 1, flavor: MPI_WIN_FLAVOR_DYNAMIC, memory: None, shared: None };
        // SAFETY: the caller passes an MPI_Win* output.
        unsafe { create(comm, info, local, win) }
    }
}

mpi_fn! {
    fn MPI_Win_free(win: *mut MPI_Win) on ErrObj::NoObject => {
        if win.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for win"));
        }
        // SAFETY: non-null; the caller passes an MPI_Win*.
        let h = unsafe { *win };
        let comm = state::with_held(|st| {
            let comm = st.objects.wins.get(h).map_err(|e| e.on(ErrObj::Win(h)))?.comm;
            st.rma_free_check(h).map_err(|e| e.on(ErrObj::Win(h)))?;
            Ok(comm)
        })?;
        // Delete callbacks run while the window is still valid (MPI 4.1 7.7.2).
        attr::delete_all(Owner::Win, h).map_err(|e| e.on(ErrObj::Win(h)))?;
        // Collective: nobody frees before every process is done with the window.
        crate::coll::blocking(comm, |st| crate::coll::plans::barrier(st, comm, crate::coll::Mode::Blocking))
            .map_err(|e| e.on(ErrObj::Win(h)))?;
        state::with_held(|st| {
            st.rma_free(h);
            st.objects.wins.user.remove(h);
            st.comm_remove(comm);
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { out(win, MPI_WIN_NULL) }
    }
}

fn with_win<R>(h: MPI_Win, f: impl FnOnce(&mut Win) -> R) -> MpiResult<R> {
    state::with(|st| Ok(f(st.objects.wins.get_mut(h)?)))
}

mpi_fn! {
    fn MPI_Win_get_group(win: MPI_Win, group: *mut MPI_Group) on ErrObj::Win(win) => {
        let h = state::with(|st| {
            let g = st.objects.wins.get(win)?.group.clone();
            Ok(st.objects.groups.insert(g))
        })?;
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { out(group, h) }
    }
}

mpi_fn! {
    fn MPI_Win_set_name(win: MPI_Win, win_name: *const c_char) on ErrObj::Win(win) => {
        if win_name.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for win_name"));
        }
        // SAFETY: non-null NUL-terminated string from the caller.
        let name = unsafe { std::ffi::CStr::from_ptr(win_name) }.to_string_lossy();
        let name: String = name.chars().take(MPI_MAX_OBJECT_NAME as usize - 1).collect();
        with_win(win, |w| w.name = name)
    }
}

mpi_fn! {
    fn MPI_Win_get_name(win: MPI_Win, win_name: *mut c_char, resultlen: *mut c_int)
        on ErrObj::Win(win) => {
        let name = if win == MPI_WIN_NULL {
            "MPI_WIN_NULL".to_string()
        } else {
            with_win(win, |w| w.name.clone())?
        };
        // SAFETY: the caller passes a buffer of MPI_MAX_OBJECT_NAME chars and an int*.
        unsafe { out_str(win_name, MPI_MAX_OBJECT_NAME, resultlen, &name) }
    }
}

mpi_fn! {
    fn MPI_Win_set_info(win: MPI_Win, info: MPI_Info) on ErrObj::Win(win) => {
        state::with(|st| {
            let given = crate::objects::info::hints(info)?;
            crate::objects::win::merge_hints(&mut st.objects.wins.get_mut(win)?.info, &given);
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Win_get_info(win: MPI_Win, info_used: *mut MPI_Info) on ErrObj::Win(win) => {
        let hints = state::with(|st| Ok(crate::objects::win::hints_in_use(st.objects.wins.get(win)?)))?;
        let h = crate::objects::info::insert(hints);
        // SAFETY: the caller passes an MPI_Info* output.
        unsafe { out(info_used, h) }
    }
}

mpi_fn! {
    fn MPI_Win_create_errhandler(win_errhandler_fn: Option<WinErrhandlerFn>,
        errhandler: *mut MPI_Errhandler) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Errhandler* output.
        unsafe { super::errhandler::create(win_errhandler_fn, Handler::Win, errhandler) }
    }
}

mpi_fn! {
    fn MPI_Win_set_errhandler(win: MPI_Win, errhandler: MPI_Errhandler) on ErrObj::Win(win) => {
        state::with(|st| {
            match st.objects.errhandlers.resolve(errhandler) {
                None => return Err(crate::mpi_err!(MPI_ERR_ARG,
                    "invalid error handler {:#x}", errhandler as u32)),
                Some(Handler::Comm(_) | Handler::File(_) | Handler::Session(_)) => return Err(crate::mpi_err!(MPI_ERR_ARG,
                    "error handler {:#x} was made for communicators or files, not windows",
                    errhandler as u32)),
                Some(_) => {}
            }
            st.objects.wins.get_mut(win)?.errhandler = errhandler;
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Win_get_errhandler(win: MPI_Win, errhandler: *mut MPI_Errhandler) on ErrObj::Win(win) => {
        // Never set: reported as MPI_ERRORS_ARE_FATAL (see DEFAULT_ERRHANDLER).
        let h = match with_win(win, |w| w.errhandler)? {
            crate::objects::comm::DEFAULT_ERRHANDLER => MPI_ERRORS_ARE_FATAL,
            h => h,
        };
        // SAFETY: the caller passes an MPI_Errhandler* output.
        unsafe { out(errhandler, h) }
    }
}

mpi_fn! {
    fn MPI_Win_call_errhandler(win: MPI_Win, errorcode: c_int) on ErrObj::Win(win) => {
        with_win(win, |_| ())?;
        // The handler runs without the state lock; its return value is not ours to report.
        errhandler::invoke("MPI_Win_call_errhandler", ErrObj::Win(win), errorcode);
        Ok(())
    }
}

/// True for the keyvals of the predefined window attributes.
fn is_predefined(k: c_int) -> bool {
    matches!(
        super::attr::c_keyval(k, 0x6600_0000),
        MPI_WIN_BASE | MPI_WIN_SIZE | MPI_WIN_DISP_UNIT | MPI_WIN_CREATE_FLAVOR | MPI_WIN_MODEL
    )
}

/// The window exists and `k` is not one of its predefined attributes.
pub(crate) fn check_settable(win: MPI_Win, k: c_int) -> MpiResult<()> {
    with_win(win, |_| ())?;
    if is_predefined(k) {
        return Err(crate::mpi_err!(
            MPI_ERR_KEYVAL,
            "predefined window attribute {:#x} cannot be set or deleted",
            k as u32
        ));
    }
    Ok(())
}

mpi_fn! {
    fn MPI_Win_set_attr(win: MPI_Win, win_keyval: c_int, attribute_val: *mut c_void)
        on ErrObj::Win(win) => {
        super::attr::set_attr(Owner::Win, win, win_keyval, attribute_val as usize, AttrKind::Ptr)
    }
}

mpi_fn! {
    fn MPI_Win_delete_attr(win: MPI_Win, win_keyval: c_int) on ErrObj::Win(win) => {
        check_settable(win, win_keyval)?;
        attr::delete(Owner::Win, win, win_keyval)
    }
}

/// MPI_Win_get_attr as language `want` sees the value: for C, MPI_WIN_BASE is the base
/// address itself and the other predefined attributes are pointers to their values; for
/// Fortran, all of them are the values.
pub(crate) fn get_attr(win: MPI_Win, keyval: c_int, want: AttrKind) -> MpiResult<Option<usize>> {
    let pre = with_win(win, |w| {
        let a: &Predefined = &w.attrs;
        let c = want == AttrKind::Ptr;
        match super::attr::c_keyval(keyval, 0x6600_0000) {
            MPI_WIN_BASE => Some(w.base),
            MPI_WIN_SIZE if c => Some(&a.size as *const MPI_Aint as usize),
            MPI_WIN_SIZE => Some(a.size as usize),
            MPI_WIN_DISP_UNIT if c => Some(&a.disp_unit as *const c_int as usize),
            MPI_WIN_DISP_UNIT => Some(a.disp_unit as usize),
            MPI_WIN_CREATE_FLAVOR if c => Some(&a.flavor as *const c_int as usize),
            MPI_WIN_CREATE_FLAVOR => Some(a.flavor as usize),
            MPI_WIN_MODEL if c => Some(&a.model as *const c_int as usize),
            MPI_WIN_MODEL => Some(a.model as usize),
            _ => None,
        }
    })?;
    match pre {
        Some(v) => Ok(Some(v)),
        None => Ok(attr::get(Owner::Win, win, keyval)?.map(|v| v.as_seen(want))),
    }
}

mpi_fn! {
    fn MPI_Win_get_attr(win: MPI_Win, win_keyval: c_int, attribute_val: *mut c_void,
        flag: *mut c_int) on ErrObj::Win(win) => {
        let found = get_attr(win, win_keyval, AttrKind::Ptr)?;
        // SAFETY: the caller passes a void** (as void*) and an int*; predefined values live
        // in the window's box until MPI_Win_free.
        unsafe { super::attr::put_found(found, attribute_val, flag) }
    }
}

/// MPI_Win_shared_query(_c): (size, disp_unit, base) of `rank`'s memory. In a window made
/// by MPI_Win_allocate_shared, any member's part (MPI_PROC_NULL: the lowest rank with
/// memory); in other windows only a process's own memory is directly addressable, so other
/// ranks report none (MPI 4.1 12.2.3 allows this).
fn shared_query(win: MPI_Win, rank: c_int) -> MpiResult<(MPI_Aint, c_int, usize)> {
    with_win(win, |w| {
        let n = w.group.len() as c_int;
        if rank != MPI_PROC_NULL && !(0..n).contains(&rank) {
            return Err(crate::mpi_err!(
                MPI_ERR_RANK,
                "invalid rank {rank} in a window of {n} processes"
            ));
        }
        if let (Some(m), MPI_WIN_FLAVOR_SHARED) = (&w.shared, w.attrs.flavor) {
            let r = if rank == MPI_PROC_NULL {
                m.parts.iter().position(|p| p.1 > 0).unwrap_or(0)
            } else {
                rank as usize
            };
            let (off, size, unit) = m.parts[r];
            // No memory: no address (as MPICH; programs check for NULL).
            let base = if size == 0 { 0 } else { m.base + off };
            return Ok((size, unit as c_int, base));
        }
        Ok(if rank == w.rank as c_int {
            (w.attrs.size, w.attrs.disp_unit, w.base)
        } else {
            (0, w.attrs.disp_unit, 0)
        })
    })?
}

mpi_fn! {
    fn MPI_Win_shared_query, fn MPI_Win_shared_query_c(win: MPI_Win, rank: c_int,
        size: *mut MPI_Aint, disp_unit: *mut Disp, baseptr: *mut c_void) on ErrObj::Win(win) => {
        let (s, d, b) = shared_query(win, rank)?;
        // SAFETY: the caller passes MPI_Aint*, int* (MPI_Aint*) and void** (as void*) outputs.
        unsafe {
            out(size, s)?;
            out(disp_unit, Disp::from(d))?;
            out(baseptr.cast::<*mut c_void>(), b as *mut c_void)
        }
    }
}

mpi_fn! {
    fn MPI_Win_attach(win: MPI_Win, base: *mut c_void, size: MPI_Aint) on ErrObj::Win(win) => {
        with_win(win, |w| {
            if w.attrs.flavor != MPI_WIN_FLAVOR_DYNAMIC {
                return Err(MpiError::new(MPI_ERR_RMA_FLAVOR,
                    "MPI_Win_attach needs a window made by MPI_Win_create_dynamic"));
            }
            if size < 0 {
                return Err(crate::mpi_err!(MPI_ERR_SIZE, "negative size {size}"));
            }
            w.attached.push((base as usize, size));
            Ok(())
        })?
    }
}

mpi_fn! {
    fn MPI_Win_detach(win: MPI_Win, base: *const c_void) on ErrObj::Win(win) => {
        with_win(win, |w| {
            if w.attrs.flavor != MPI_WIN_FLAVOR_DYNAMIC {
                return Err(MpiError::new(MPI_ERR_RMA_FLAVOR,
                    "MPI_Win_detach needs a window made by MPI_Win_create_dynamic"));
            }
            let i = w.attached.iter().position(|a| a.0 == base as usize).ok_or_else(|| {
                crate::mpi_err!(MPI_ERR_RMA_ATTACH, "no memory attached at {base:p}")
            })?;
            w.attached.remove(i);
            Ok(())
        })?
    }
}
