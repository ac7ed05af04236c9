//! Sessions (MPI 4.1 section 11.3): MPI_Session_init starts the runtime if MPI_Init has not
//! (see abi::init), offers the process sets `mpi://WORLD` and `mpi://SELF`, and the last
//! MPI_Session_finalize (with no world model running) ends it. Groups from a process set
//! make communicators through MPI_Comm_create_from_group.

use super::consts::*;
use super::{out, out_str};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::errhandler::{Handler, SessionErrhandlerFn};
use crate::objects::info::Info;
use crate::objects::session::{self, Session, PSETS};
use crate::state;
use std::os::raw::{c_char, c_int};
use std::sync::Arc;

/// A process set name argument.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn pset_name(p: *const c_char) -> MpiResult<String> {
    if p.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "null process set name"));
    }
    // SAFETY: per this function's contract.
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned())
}

/// The world ranks of a process set (names compare case-insensitively, MPI 4.1 11.3.2).
fn pset_members(name: &str) -> MpiResult<Arc<[u32]>> {
    state::with(|st| match name.to_ascii_lowercase().as_str() {
        "mpi://world" => Ok((0..st.world_size).collect()),
        "mpi://self" => Ok(Arc::from([st.world_rank])),
        _ => Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "no process set {name:?} (Ferrite has mpi://WORLD and mpi://SELF)"
        )),
    })
}

fn check_session_errhandler(errhandler: MPI_Errhandler) -> MpiResult<()> {
    if matches!(
        errhandler,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_RETURN | MPI_ERRORS_ABORT
    ) {
        return Ok(());
    }
    match state::try_with(|st| st.objects.errhandlers.resolve(errhandler)).flatten() {
        Some(Handler::Session(_)) => Ok(()),
        Some(_) => Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "error handler {:#x} was not made for sessions (MPI_Session_create_errhandler)",
            errhandler as u32
        )),
        None => Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "invalid error handler {:#x}",
            errhandler as u32
        )),
    }
}

mpi_fn! {
    fn MPI_Session_init(info: MPI_Info, errhandler: MPI_Errhandler, session: *mut MPI_Session)
        on ErrObj::NoObject => {
        super::out_given(session)?;
        check_session_errhandler(errhandler)?;
        let hints = crate::objects::info::hints(info)?;
        let required = match hints.get("thread_level") {
            Some(v) => session::parse_level(v)?,
            None => MPI_THREAD_SINGLE,
        };
        let thread_level = super::init::session_started(required)?;
        let h = session::with(|t| t.insert(Session { errhandler, thread_level }));
        // SAFETY: the caller passes an MPI_Session* output.
        unsafe { out(session, h) }
    }
}

mpi_fn! {
    fn MPI_Session_finalize(session: *mut MPI_Session) on ErrObj::NoObject => {
        super::out_given(session)?;
        // SAFETY: checked non-null; the caller passes an MPI_Session*.
        let h = unsafe { *session };
        session::get(h)?;
        session::with(|t| t.remove(h));
        super::init::session_ended()?;
        // SAFETY: as above.
        unsafe { out(session, MPI_SESSION_NULL) }
    }
}

mpi_fn! {
    fn MPI_Session_get_info(session: MPI_Session, info_used: *mut MPI_Info)
        on ErrObj::Session(session) => {
        let s = session::get(session)?;
        let mut info = Info::default();
        info.set("thread_level", session::level_name(s.thread_level));
        let h = crate::objects::info::insert(info);
        // SAFETY: the caller passes an MPI_Info* output.
        unsafe { out(info_used, h) }
    }
}

mpi_fn! {
    fn MPI_Session_get_num_psets(session: MPI_Session, _info: MPI_Info, npset_names: *mut c_int)
        on ErrObj::Session(session) => {
        session::get(session)?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(npset_names, PSETS.len() as c_int) }
    }
}

mpi_fn! {
    fn MPI_Session_get_nth_pset(session: MPI_Session, _info: MPI_Info, n: c_int,
        pset_len: *mut c_int, pset_name: *mut c_char) on ErrObj::Session(session) => {
        session::get(session)?;
        let name = usize::try_from(n).ok().and_then(|i| PSETS.get(i)).ok_or_else(|| {
            crate::mpi_err!(MPI_ERR_ARG, "no process set number {n} (there are {})", PSETS.len())
        })?;
        super::out_given(pset_len)?;
        // SAFETY: checked non-null; the caller passes an int* in/out argument.
        let cap = unsafe { *pset_len };
        let needed = name.len() as c_int + 1;
        if cap > 0 {
            // At most cap - 1 characters and the NUL (MPI 4.1 11.3.2).
            // SAFETY: the caller's buffer holds `cap` chars.
            unsafe { out_str(pset_name, cap, std::ptr::null_mut(), name)? };
        }
        // SAFETY: as above.
        unsafe { out(pset_len, needed) }
    }
}

mpi_fn! {
    fn MPI_Session_get_pset_info(session: MPI_Session, pset_name: *const c_char,
        info: *mut MPI_Info) on ErrObj::Session(session) => {
        session::get(session)?;
        // SAFETY: a C string from the caller.
        let name = unsafe { self::pset_name(pset_name) }?;
        let n = pset_members(&name)?.len();
        let mut i = Info::default();
        i.set("mpi_size", &n.to_string());
        let h = crate::objects::info::insert(i);
        // SAFETY: the caller passes an MPI_Info* output.
        unsafe { out(info, h) }
    }
}

mpi_fn! {
    fn MPI_Group_from_session_pset(session: MPI_Session, pset_name: *const c_char,
        newgroup: *mut MPI_Group) on ErrObj::Session(session) => {
        session::get(session)?;
        // SAFETY: a C string from the caller.
        let name = unsafe { self::pset_name(pset_name) }?;
        let members = pset_members(&name)?;
        let h = state::with(|st| Ok(st.objects.groups.insert(members)))?;
        // SAFETY: the caller passes an MPI_Group* output.
        unsafe { out(newgroup, h) }
    }
}

mpi_fn! {
    fn MPI_Session_create_errhandler(session_errhandler_fn: Option<SessionErrhandlerFn>,
        errhandler: *mut MPI_Errhandler) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Errhandler* output.
        unsafe { super::errhandler::create(session_errhandler_fn, Handler::Session, errhandler) }
    }
}

mpi_fn! {
    fn MPI_Session_set_errhandler(session: MPI_Session, errhandler: MPI_Errhandler)
        on ErrObj::Session(session) => {
        session::get(session)?;
        check_session_errhandler(errhandler)?;
        session::with(|t| {
            if let Some(s) = t.get_mut(session) {
                s.errhandler = errhandler;
            }
        });
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Session_get_errhandler(session: MPI_Session, errhandler: *mut MPI_Errhandler)
        on ErrObj::Session(session) => {
        let s = session::get(session)?;
        // SAFETY: the caller passes an MPI_Errhandler* output.
        unsafe { out(errhandler, s.errhandler) }
    }
}

mpi_fn! {
    fn MPI_Session_call_errhandler(session: MPI_Session, errorcode: c_int)
        on ErrObj::Session(session) => {
        session::get(session)?;
        // The handler runs without the state lock; its return value is not ours to report.
        crate::objects::errhandler::invoke(
            "MPI_Session_call_errhandler",
            ErrObj::Session(session),
            errorcode,
        );
        Ok(())
    }
}
