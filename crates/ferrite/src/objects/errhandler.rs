//! Error handlers: what happens to an error raised on an object.

use super::handles::{kind, HandleTable};
use crate::abi::consts::*;
use crate::error::{code_string, ErrObj};
use crate::state;
use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::Mutex;

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

/// The first class MPI_Add_error_class hands out (MPICH's last predefined class is 78).
pub const FIRST_USER_CLASS: c_int = 79;
/// Classes live in the low 7 bits of a code.
const LAST_USER_CLASS: c_int = 0x7f;

/// User error classes, codes and strings (MPI 4.1 section 9.5). Kept outside the state so
/// MPI_Error_string works whatever the state lock is doing.
struct UserErrors {
    next_class: c_int,
    /// Codes made per class so far.
    codes: HashMap<c_int, c_int>,
    strings: HashMap<c_int, String>,
    last_used: c_int,
}

static USER_ERRORS: Mutex<Option<UserErrors>> = Mutex::new(None);

fn user_errors<R>(f: impl FnOnce(&mut UserErrors) -> R) -> R {
    let mut g = USER_ERRORS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(|| UserErrors {
        next_class: FIRST_USER_CLASS,
        codes: HashMap::new(),
        strings: HashMap::new(),
        last_used: MPI_ERR_LASTCODE,
    }))
}

/// MPI_Add_error_class: a new class, or None when all are taken.
pub fn add_class() -> Option<c_int> {
    user_errors(|u| {
        if u.next_class > LAST_USER_CLASS {
            return None;
        }
        let c = u.next_class;
        u.next_class += 1;
        u.last_used = c;
        Some(c)
    })
}

/// True for predefined classes and classes made by MPI_Add_error_class.
pub fn is_class(c: c_int) -> bool {
    (0..FIRST_USER_CLASS).contains(&c)
        || user_errors(|u| (FIRST_USER_CLASS..u.next_class).contains(&c))
}

/// MPI_Add_error_code: a new code of class `class`.
pub fn add_code(class: c_int) -> c_int {
    user_errors(|u| {
        let n = u.codes.entry(class).or_insert(0);
        *n += 1;
        let code = crate::error::USER_CODE_BIT | (*n << 7) | class;
        u.last_used = code;
        code
    })
}

/// True for codes made by MPI_Add_error_code and user classes.
pub fn is_user(code: c_int) -> bool {
    code >= FIRST_USER_CLASS
        && user_errors(|u| {
            let class = code & 0x7f;
            let n = (code & !crate::error::USER_CODE_BIT) >> 7;
            (FIRST_USER_CLASS..u.next_class).contains(&class)
                && (code & crate::error::USER_CODE_BIT == 0 && n == 0
                    || code & crate::error::USER_CODE_BIT != 0
                        && (1..=u.codes.get(&class).copied().unwrap_or(0)).contains(&n))
        })
}

pub fn set_string(code: c_int, s: String) {
    user_errors(|u| u.strings.insert(code, s));
}

/// The string of a user class or code, if one was set.
pub fn user_string(code: c_int) -> Option<String> {
    user_errors(|u| u.strings.get(&code).cloned())
}

/// The value of the MPI_LASTUSEDCODE attribute.
pub fn last_used_code() -> c_int {
    user_errors(|u| u.last_used)
}
