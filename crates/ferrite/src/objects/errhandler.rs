//! Error handlers: what happens to an error raised on an object.

use super::handles::{kind, HandleTable};
use crate::abi::consts::*;
use crate::error::{code_string, ErrObj};
use crate::state;
use std::os::raw::c_int;

/// `void handler(MPI_Comm *, int *, ...)`
pub type CommErrhandlerFn = unsafe extern "C" fn(*mut MPI_Comm, *mut c_int, ...);

#[derive(Clone, Copy, Debug)]
pub enum Handler {
    /// MPI_ERRORS_ARE_FATAL: report and end the whole job.
    Fatal,
    /// MPI_ERRORS_ABORT: report and end the processes of the communicator (here: the job).
    Abort,
    /// MPI_ERRORS_RETURN: return the code.
    Return,
    /// A handler made by MPI_Comm_create_errhandler.
    Comm(CommErrhandlerFn),
}

pub struct Errhandlers {
    pub user: HandleTable<Handler>,
}

impl Default for Errhandlers {
    fn default() -> Self {
        Self::new()
    }
}

impl Errhandlers {
    pub fn new() -> Self {
        Errhandlers {
            user: HandleTable::new(kind::ERRHANDLER),
        }
    }

    pub fn resolve(&self, h: MPI_Errhandler) -> Option<Handler> {
        match h {
            MPI_ERRORS_ARE_FATAL => Some(Handler::Fatal),
            MPI_ERRORS_ABORT => Some(Handler::Abort),
            MPI_ERRORS_RETURN => Some(Handler::Return),
            _ => self.user.get(h).copied(),
        }
    }
}

/// Applies the error handler of `obj` to `code` (raised by `func`) and returns the code.
/// Called without the state lock held, so a user handler may call MPI.
pub fn invoke(func: &'static str, obj: ErrObj, code: c_int) -> c_int {
    let (handler, comm) = state::try_with(|st| {
        let comm = match obj {
            ErrObj::Comm(c) => c,
            _ => MPI_COMM_SELF,
        };
        let h = st
            .objects
            .comms
            .get(comm)
            .ok()
            .and_then(|c| st.objects.errhandlers.resolve(c.errhandler));
        // An error on an invalid communicator is raised on MPI_COMM_WORLD's handler (as MPICH does).
        let h = h.or_else(|| {
            st.objects
                .errhandlers
                .resolve(st.objects.comms.world.errhandler)
        });
        (h.unwrap_or(Handler::Fatal), comm)
    })
    .unwrap_or((Handler::Fatal, MPI_COMM_WORLD));
    match handler {
        Handler::Return => code,
        Handler::Fatal | Handler::Abort => fatal(func, code),
        Handler::Comm(f) => {
            let mut c = comm;
            let mut e = code;
            // SAFETY: `f` was registered by the user through MPI_Comm_create_errhandler with the
            // C signature `void(MPI_Comm *, int *, ...)`; both pointers are valid locals.
            unsafe { f(&mut c, &mut e) };
            code
        }
    }
}

/// Reports an error the way ERRORS_ARE_FATAL must, then ends the job.
pub fn fatal(func: &str, code: c_int) -> ! {
    let rank = state::try_with(|st| st.world_rank.to_string()).unwrap_or_else(|| "?".into());
    let host = crate::runtime::hostname();
    eprintln!(
        "Fatal error in {func} on rank {rank} ({host}): {}",
        code_string(code)
    );
    crate::runtime::abort_job(1, &format!("fatal error in {func}"))
}
