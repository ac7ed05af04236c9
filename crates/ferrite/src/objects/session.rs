//! Sessions (MPI 4.1 section 11.3): handles a library takes on MPI without MPI_Init. Each
//! has an error handler and the thread level it was given; the process sets it offers are
//! the two the standard requires, `mpi://WORLD` and `mpi://SELF`. The table lives outside
//! the state lock (like info objects): a session exists before and after the runtime it
//! starts.

use super::handles::{kind, HandleTable};
use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use std::os::raw::c_int;
use std::sync::Mutex;

#[derive(Clone, Copy, Debug)]
pub struct Session {
    pub errhandler: MPI_Errhandler,
    /// The thread level provided (reported by MPI_Session_get_info as `thread_level`).
    pub thread_level: c_int,
}

/// The process sets every session offers.
pub const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];

static SESSIONS: Mutex<HandleTable<Session>> = Mutex::new(HandleTable::new(kind::SESSION));

/// Runs `f` on the session table (a leaf lock: `f` takes no other lock).
pub fn with<R>(f: impl FnOnce(&mut HandleTable<Session>) -> R) -> R {
    f(&mut SESSIONS.lock().unwrap_or_else(|e| e.into_inner()))
}

pub fn get(h: MPI_Session) -> MpiResult<Session> {
    with(|t| t.get(h).copied()).ok_or_else(|| {
        if h == MPI_SESSION_NULL {
            MpiError::new(MPI_ERR_SESSION, "null session (MPI_SESSION_NULL)")
        } else {
            crate::mpi_err!(MPI_ERR_SESSION, "invalid session handle {:#x}", h as u32)
        }
    })
}

/// The name MPI gives a thread level (`thread_level` info values).
pub fn level_name(level: c_int) -> &'static str {
    match level {
        MPI_THREAD_SINGLE => "MPI_THREAD_SINGLE",
        MPI_THREAD_FUNNELED => "MPI_THREAD_FUNNELED",
        MPI_THREAD_SERIALIZED => "MPI_THREAD_SERIALIZED",
        _ => "MPI_THREAD_MULTIPLE",
    }
}

/// The thread level a `thread_level` info value asks for.
pub fn parse_level(s: &str) -> MpiResult<c_int> {
    Ok(match s.trim() {
        "MPI_THREAD_SINGLE" => MPI_THREAD_SINGLE,
        "MPI_THREAD_FUNNELED" => MPI_THREAD_FUNNELED,
        "MPI_THREAD_SERIALIZED" => MPI_THREAD_SERIALIZED,
        "MPI_THREAD_MULTIPLE" => MPI_THREAD_MULTIPLE,
        other => {
            return Err(crate::mpi_err!(
                MPI_ERR_INFO_VALUE,
                "thread_level {other:?} is not a thread level name (MPI_THREAD_SINGLE ...)"
            ))
        }
    })
}
