//! Error handlers: what happens to an error raised on an object.

use super::handles::{kind, HandleTable};
use crate::consts::*;
use crate::error::{code_string, ErrObj};
use crate::state;
use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::Mutex;

/// `void handler(MPI_Comm *, int *, ...)`
pub type CommErrhandlerFn = unsafe extern "C" fn(*mut MPI_Comm, *mut c_int, ...);
/// `void handler(MPI_Win *, int *, ...)`
pub type WinErrhandlerFn = unsafe extern "C" fn(*mut MPI_Win, *mut c_int, ...);
/// `void handler(MPI_File *, int *, ...)`
pub type FileErrhandlerFn = unsafe extern "C" fn(*mut MPI_File, *mut c_int, ...);
/// `void handler(MPI_Session *, int *, ...)`
pub type SessionErrhandlerFn = unsafe extern "C" fn(*mut MPI_Session, *mut c_int, ...);

/// The error handler of MPI_FILE_NULL: MPI_File_open's and MPI_File_delete's errors go there,
/// and a new file starts with it. MPI_ERRORS_RETURN by default, as MPI 4.1 section 9.3 says
/// for files.
static FILE_NULL_HANDLER: std::sync::atomic::AtomicI32 =
    std::sync::atomic::AtomicI32::new(MPI_ERRORS_RETURN);

pub fn file_null_handler() -> MPI_Errhandler {
    FILE_NULL_HANDLER.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn set_file_null_handler(h: MPI_Errhandler) {
    FILE_NULL_HANDLER.store(h, std::sync::atomic::Ordering::Relaxed)
}

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
    /// A handler made by MPI_Win_create_errhandler.
    Win(WinErrhandlerFn),
    /// A handler made by MPI_File_create_errhandler.
    File(FileErrhandlerFn),
    /// A handler made by MPI_Session_create_errhandler.
    Session(SessionErrhandlerFn),
    /// A C++ handler (MPICH's C++ library marks its handlers with MPII_Errhandler_set_cxx):
    /// `call(kind, &handle, &code, user)` runs the C++ function `user`, where kind is 0 for a
    /// communicator, 2 for a window.
    Cxx {
        call: CxxErrCall,
        user: usize,
        win: bool,
    },
}

/// MPICH's C++ error-handler trampoline: `void (int kind, int *handle, int *code, void (*)(void))`.
pub type CxxErrCall = unsafe extern "C" fn(c_int, *mut c_int, *mut c_int, *const std::ffi::c_void);

/// MPICH's C++ binding asks for exceptions with this handler (not in the MPI standard): the
/// error code is returned, and the C++ wrapper throws it.
pub const MPIR_ERRORS_THROW_EXCEPTIONS: MPI_Errhandler = 0x54000002;

impl Handler {
    /// A C++ handler for the same object kind (MPII_Errhandler_set_cxx).
    pub fn into_cxx(self, call: CxxErrCall) -> Option<Handler> {
        match self {
            Handler::Comm(f) => Some(Handler::Cxx {
                call,
                user: f as usize,
                win: false,
            }),
            Handler::Win(f) => Some(Handler::Cxx {
                call,
                user: f as usize,
                win: true,
            }),
            Handler::Cxx { user, win, .. } => Some(Handler::Cxx { call, user, win }),
            _ => None,
        }
    }
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
            MPI_ERRORS_RETURN | MPIR_ERRORS_THROW_EXCEPTIONS => Some(Handler::Return),
            _ => self.user.get(h).copied(),
        }
    }
}

/// Applies the error handler of `obj` to `code` (raised by `func`) and returns the code.
/// Called without the state lock held, so a user handler may call MPI.
pub fn invoke(func: &'static str, obj: ErrObj, code: c_int) -> c_int {
    if let ErrObj::File(f) = obj {
        let eh = crate::io::file::errhandler_of(f).unwrap_or_else(file_null_handler);
        let h = state::try_with(|st| st.objects.errhandlers.resolve(eh))
            .flatten()
            .unwrap_or(Handler::Return);
        return match h {
            Handler::Return => code,
            Handler::File(cb) => {
                let (mut fh, mut e) = (f as MPI_File, code);
                // SAFETY: `cb` was registered through MPI_File_create_errhandler with the C
                // signature `void(MPI_File *, int *, ...)`; both pointers are valid locals.
                unsafe { cb(&mut fh, &mut e) };
                code
            }
            _ => fatal(func, code),
        };
    }
    if let ErrObj::Session(sh) = obj {
        // A session's own handler (predefined ones need no runtime). An error on no valid
        // session (MPI_SESSION_NULL) has no session handler: it is raised as an error on
        // no object, as MPICH does (mpi4py expects an exception there, not an abort).
        let Ok(session) = crate::objects::session::get(sh) else {
            return invoke(func, ErrObj::NoObject, code);
        };
        let eh = session.errhandler;
        let h = match eh {
            MPI_ERRORS_RETURN => Some(Handler::Return),
            _ => state::try_with(|st| st.objects.errhandlers.resolve(eh)).flatten(),
        };
        return match h.unwrap_or(Handler::Fatal) {
            Handler::Return => code,
            Handler::Session(f) => {
                let (mut s, mut e) = (sh, code);
                // SAFETY: `f` was registered through MPI_Session_create_errhandler with the C
                // signature `void(MPI_Session *, int *, ...)`; both pointers are valid locals.
                unsafe { f(&mut s, &mut e) };
                code
            }
            _ => fatal(func, code),
        };
    }
    let (handler, handle) = state::try_with(|st| {
        // A window's own handler; a window whose handler was never set (or an invalid one)
        // goes to MPI_COMM_WORLD's, as MPICH (see DEFAULT_ERRHANDLER).
        if let ErrObj::Win(w) = obj {
            match st.objects.wins.get(w).ok().map(|x| x.errhandler) {
                Some(crate::objects::comm::DEFAULT_ERRHANDLER) | None => {}
                Some(h) => {
                    let h = st.objects.errhandlers.resolve(h);
                    return (h.unwrap_or(Handler::Fatal), w);
                }
            }
        }
        // No object: MPI 4.1 raises on MPI_COMM_SELF, whose handler follows
        // MPI_COMM_WORLD's until the program sets one (as MPICH, which raises on WORLD).
        let comm = match obj {
            ErrObj::Comm(c) => c,
            ErrObj::Win(_) => MPI_COMM_WORLD,
            _ => MPI_COMM_SELF,
        };
        let comms = &st.objects.comms;
        // An error on an invalid communicator is raised on MPI_COMM_WORLD's handler (as MPICH does).
        let h = comms
            .handler_of(comm)
            .or_else(|_| comms.handler_of(MPI_COMM_WORLD))
            .ok()
            .and_then(|h| st.objects.errhandlers.resolve(h));
        (h.unwrap_or(Handler::Fatal), comm)
    })
    .unwrap_or((Handler::Fatal, MPI_COMM_WORLD));
    match handler {
        Handler::Return => code,
        Handler::Fatal | Handler::Abort => fatal(func, code),
        Handler::Comm(f) => {
            let mut c = handle;
            let mut e = code;
            // SAFETY: `f` was registered by the user through MPI_Comm_create_errhandler with the
            // C signature `void(MPI_Comm *, int *, ...)`; both pointers are valid locals.
            unsafe { f(&mut c, &mut e) };
            code
        }
        Handler::Win(f) => {
            let mut w = handle;
            let mut e = code;
            // SAFETY: `f` was registered through MPI_Win_create_errhandler with the C
            // signature `void(MPI_Win *, int *, ...)`; both pointers are valid locals.
            unsafe { f(&mut w, &mut e) };
            code
        }
        // A file or session handler cannot be set on a communicator or window.
        Handler::File(_) | Handler::Session(_) => code,
        Handler::Cxx { call, user, win } => {
            let (mut h, mut e) = (handle, code);
            // SAFETY: MPICH's C++ library registered `call` as the trampoline for its handler
            // `user` (MPII_Errhandler_set_cxx); the pointers are valid locals.
            unsafe { call(if win { 2 } else { 0 }, &mut h, &mut e, user as *const _) };
            // As in MPICH: the C++ handler reports by throwing, never by a return code.
            MPI_SUCCESS
        }
    }
}

/// Reports an error the way ERRORS_ARE_FATAL must, then ends the job.
pub fn fatal(func: &str, code: c_int) -> ! {
    if crate::error::class_of(code) == MPI_ERR_PROC_ABORTED {
        // A peer vanished: its own end (its MPI_Abort, its death) is the job's cause, and
        // the launcher must see it first, not this survivor's report of it. The launcher
        // ends this process meanwhile; if not, the report follows.
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    // (After MPI_Finalize dropped the state, PMI still knows the rank.)
    let rank = state::try_with(|st| st.world_rank)
        .or_else(crate::runtime::pmi::known_rank)
        .map_or_else(|| "?".into(), |r| r.to_string());
    let host = crate::runtime::hostname();
    eprintln!(
        "Fatal error in {func} on rank {rank} ({host}): {}",
        code_string(code)
    );
    crate::runtime::abort_job(1, &format!("fatal error in {func}"))
}

/// Classes made by MPI_Add_error_class are `USER_CLASS_BASE + k` and codes made by
/// MPI_Add_error_code are `USER_CODE_BASE + k`: above MPI_ERR_LASTCODE, as MPI requires
/// (MPI_LASTUSEDCODE >= MPI_ERR_LASTCODE), and apart from the codes error.rs makes.
const USER_CLASS_BASE: c_int = MPI_ERR_LASTCODE + 1;
const USER_CODE_BASE: c_int = USER_CLASS_BASE + (1 << 28);
/// The last predefined class (MPI_ERR_ERRHANDLER in our mpi.h).
const LAST_PREDEFINED_CLASS: c_int = 79;

/// User error classes, codes and strings (MPI 4.1 section 9.5). Kept outside the state so
/// MPI_Error_string works whatever the state lock is doing.
struct UserErrors {
    classes: c_int,
    /// Class of each user code, by code - USER_CODE_BASE.
    code_class: Vec<c_int>,
    strings: HashMap<c_int, String>,
    /// Classes and codes given back by MPI_Remove_error_class/code (never handed out again).
    removed: std::collections::HashSet<c_int>,
    last_used: c_int,
}

static USER_ERRORS: Mutex<Option<UserErrors>> = Mutex::new(None);

fn user_errors<R>(f: impl FnOnce(&mut UserErrors) -> R) -> R {
    let mut g = USER_ERRORS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(|| UserErrors {
        classes: 0,
        code_class: Vec::new(),
        strings: HashMap::new(),
        removed: std::collections::HashSet::new(),
        last_used: MPI_ERR_LASTCODE,
    }))
}

/// MPI_Add_error_class: a new class.
pub fn add_class() -> Option<c_int> {
    user_errors(|u| {
        if u.classes >= (1 << 28) - 1 {
            return None;
        }
        u.classes += 1;
        let c = USER_CLASS_BASE + u.classes - 1;
        u.last_used = u.last_used.max(c);
        Some(c)
    })
}

/// True for predefined classes and classes made by MPI_Add_error_class.
pub fn is_class(c: c_int) -> bool {
    (0..=LAST_PREDEFINED_CLASS).contains(&c)
        || user_errors(|u| {
            (USER_CLASS_BASE..USER_CLASS_BASE + u.classes).contains(&c) && !u.removed.contains(&c)
        })
}

/// MPI_Add_error_code: a new code of class `class`.
pub fn add_code(class: c_int) -> c_int {
    user_errors(|u| {
        u.code_class.push(class);
        let code = USER_CODE_BASE + u.code_class.len() as c_int - 1;
        u.last_used = u.last_used.max(code);
        code
    })
}

/// True for codes made by MPI_Add_error_code and classes made by MPI_Add_error_class.
pub fn is_user(code: c_int) -> bool {
    user_errors(|u| {
        ((USER_CLASS_BASE..USER_CLASS_BASE + u.classes).contains(&code)
            || (USER_CODE_BASE..USER_CODE_BASE + u.code_class.len() as c_int).contains(&code))
            && !u.removed.contains(&code)
    })
}

/// True for a user code (not a class).
pub fn is_user_code(code: c_int) -> bool {
    code >= USER_CODE_BASE && is_user(code)
}

/// MPI_Remove_error_class/code: refused while the class still has live codes.
pub fn remove(code: c_int) -> Result<(), &'static str> {
    user_errors(|u| {
        if u.strings.contains_key(&code) {
            return Err("it still has an error string (MPI_Remove_error_string first)");
        }
        if code < USER_CODE_BASE {
            let live =
                u.code_class.iter().enumerate().any(|(i, &c)| {
                    c == code && !u.removed.contains(&(USER_CODE_BASE + i as c_int))
                });
            if live {
                return Err("the class still has error codes");
            }
        }
        u.removed.insert(code);
        u.strings.remove(&code);
        Ok(())
    })
}

/// The class of a user class or code (MPI_ERR_UNKNOWN for a value never handed out).
pub fn user_class_of(code: c_int) -> c_int {
    user_errors(|u| {
        if code >= USER_CODE_BASE {
            u.code_class
                .get((code - USER_CODE_BASE) as usize)
                .copied()
                .unwrap_or(MPI_ERR_UNKNOWN)
        } else if code < USER_CLASS_BASE + u.classes {
            code
        } else {
            MPI_ERR_UNKNOWN
        }
    })
}

pub fn set_string(code: c_int, s: String) {
    user_errors(|u| u.strings.insert(code, s));
}

/// MPI_Remove_error_string.
pub fn remove_string(code: c_int) -> bool {
    user_errors(|u| u.strings.remove(&code).is_some())
}

/// The string of a user class or code, if one was set.
pub fn user_string(code: c_int) -> Option<String> {
    user_errors(|u| u.strings.get(&code).cloned())
}

/// The value of the MPI_LASTUSEDCODE attribute.
pub fn last_used_code() -> c_int {
    user_errors(|u| u.last_used)
}
