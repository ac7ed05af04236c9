//! Errors: the one path from "something is wrong" to the caller's error handler.
//!
//! An [`MpiError`] carries an MPI error class and a message that says what was wrong. When an
//! entry point fails, [`finish`] turns it into an error *code* that remembers the message, so
//! `MPI_Error_string(code)` tells the user exactly what happened, and then applies the error
//! handler of the object the call was about (`ERRORS_ARE_FATAL` by default).
//!
//! Error code layout (all codes are <= MPI_ERR_LASTCODE):
//! - bits 0..7: the class (predefined classes, and user classes from MPI_Add_error_class);
//! - bits 7..29: 0 for a bare class, or (slot + 1) of the message ring below;
//! - bit 29: set for user codes made by MPI_Add_error_code (owned by objects::errhandler).

use crate::consts::*;
use std::os::raw::c_int;
use std::sync::Mutex;

pub type MpiResult<T> = Result<T, MpiError>;

/// The object whose error handler an error is raised on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrObj {
    Comm(MPI_Comm),
    Win(c_int),
    File(usize),
    Session(c_int),
    /// Calls with no object raise on MPI_COMM_SELF (MPI 4.1, section 9.3).
    NoObject,
}

/// An MPI error: boxed, so `MpiResult<()>` is one pointer (null for success) and every
/// `MpiResult` carried through the layers, `catch_unwind` and [`finish`] stays small; the
/// details ([`ErrorData`]) are read and written through `Deref`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpiError(Box<ErrorData>);

/// What an [`MpiError`] says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorData {
    pub class: c_int,
    pub msg: String,
    /// Overrides the entry point's default object (e.g. MPI_Wait raises on the request's comm).
    pub obj: Option<ErrObj>,
    /// An already-made error code to return as is (e.g. a user code, or one from a status).
    pub code: Option<c_int>,
}

impl std::ops::Deref for MpiError {
    type Target = ErrorData;
    fn deref(&self) -> &ErrorData {
        &self.0
    }
}

impl std::ops::DerefMut for MpiError {
    fn deref_mut(&mut self) -> &mut ErrorData {
        &mut self.0
    }
}

impl MpiError {
    #[cold]
    pub fn new(class: c_int, msg: impl Into<String>) -> Self {
        MpiError(Box::new(ErrorData {
            class,
            msg: msg.into(),
            obj: None,
            code: None,
        }))
    }
    /// Raise on `obj` instead of the entry point's default object.
    pub fn on(mut self, obj: ErrObj) -> Self {
        self.obj = Some(obj);
        self
    }
    /// An error whose code is already known (its class is looked up from the code).
    #[cold]
    pub fn from_code(code: c_int) -> Self {
        MpiError(Box::new(ErrorData {
            class: class_of(code),
            msg: String::new(),
            obj: None,
            code: Some(code),
        }))
    }
    /// The details, taken out of the box.
    pub fn into_data(self) -> ErrorData {
        *self.0
    }
}

/// The one mapping from the transports' failures to MPI error classes (the message, which
/// names the peer and the cause, is kept as is).
impl From<crate::transport::error::Error> for MpiError {
    fn from(e: crate::transport::error::Error) -> MpiError {
        use crate::transport::error::Kind;
        let class = match e.kind {
            Kind::PeerFailed => MPI_ERR_PROC_ABORTED,
            Kind::InvalidArg => MPI_ERR_ARG,
            // Sending to a peer that finalized is the program's error, of no class of its own;
            // MPI has no class for descriptors or socket memory, or for a stranger's bytes.
            Kind::PeerClosed | Kind::Exhausted | Kind::Protocol | Kind::Other => MPI_ERR_OTHER,
        };
        MpiError::new(class, e.msg)
    }
}

/// The launcher's failures (PMI) have no class of their own.
impl From<crate::runtime::pmi::Error> for MpiError {
    fn from(e: crate::runtime::pmi::Error) -> MpiError {
        MpiError::new(MPI_ERR_OTHER, e.0)
    }
}

/// The way back, for the ofi transport, which still makes MpiErrors inside: the class picks
/// the kind, so the mapping above gives the class back.
impl From<MpiError> for crate::transport::error::Error {
    fn from(e: MpiError) -> crate::transport::error::Error {
        use crate::transport::error::{Error, Kind};
        let kind = match e.class {
            MPI_ERR_PROC_ABORTED => Kind::PeerFailed,
            MPI_ERR_ARG => Kind::InvalidArg,
            _ => Kind::Other,
        };
        Error::new(kind, e.into_data().msg)
    }
}

/// `mpi_err!(MPI_ERR_RANK, "invalid rank {} in communicator of size {}", r, n)`
#[macro_export]
macro_rules! mpi_err {
    ($class:expr, $($fmt:tt)+) => {
        $crate::error::MpiError::new($class, format!($($fmt)+))
    };
}

const RING: usize = 256;
const SLOT_SHIFT: u32 = 7;
pub const USER_CODE_BIT: c_int = 1 << 29;

struct Ring {
    next: usize,
    /// (code, function, message) of recent errors.
    msgs: Vec<Option<(c_int, String)>>,
}

static RING_STATE: Mutex<Ring> = Mutex::new(Ring {
    next: 0,
    msgs: Vec::new(),
});

fn ring() -> std::sync::MutexGuard<'static, Ring> {
    RING_STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes a code for `class` that remembers `text` for MPI_Error_string.
pub fn make_code(class: c_int, text: String) -> c_int {
    let mut r = ring();
    if r.msgs.is_empty() {
        r.msgs.resize(RING, None);
    }
    let slot = r.next;
    r.next = (r.next + 1) % RING;
    // Codes cycle through (slot + 1 + k*RING) so a stale code is not confused with a new one.
    let generation = (r.msgs[slot]
        .as_ref()
        .map_or(0, |(c, _)| (*c >> SLOT_SHIFT) as usize)
        / RING
        + 1)
        % ((USER_CODE_BIT as usize >> SLOT_SHIFT) / RING);
    let code = class | (((generation * RING + slot + 1) as c_int) << SLOT_SHIFT);
    r.msgs[slot] = Some((code, text));
    code
}

/// The class of an error code (MPI_Error_class). User codes are resolved by the errhandler
/// module, which registers them; here they map to their recorded class bits.
pub fn class_of(code: c_int) -> c_int {
    if code > MPI_ERR_LASTCODE {
        // Classes and codes made by MPI_Add_error_class/code live above MPI_ERR_LASTCODE.
        return crate::objects::errhandler::user_class_of(code);
    }
    code & 0x7f
}

/// The message remembered for `code`, if it is still in the ring.
pub fn message_of(code: c_int) -> Option<String> {
    if code & !0x7f == 0 || code & USER_CODE_BIT != 0 || code > MPI_ERR_LASTCODE {
        return None;
    }
    let slot = (((code & !USER_CODE_BIT) >> SLOT_SHIFT) as usize - 1) % RING;
    let r = ring();
    match r.msgs.get(slot) {
        Some(Some((c, m))) if *c == code => Some(m.clone()),
        _ => None,
    }
}

/// Short description of a predefined error class (the text MPI_Error_string starts with).
pub fn class_string(class: c_int) -> &'static str {
    match class {
        0 => "No MPI error",
        1 => "Invalid buffer pointer",
        2 => "Invalid count",
        3 => "Invalid datatype",
        4 => "Invalid tag",
        5 => "Invalid communicator",
        6 => "Invalid rank",
        7 => "Invalid root",
        8 => "Invalid group",
        9 => "Invalid MPI_Op",
        10 => "Invalid topology",
        11 => "Invalid dimension argument",
        12 => "Invalid argument",
        13 => "Unknown error",
        14 => "Message truncated",
        15 => "Other MPI error",
        16 => "Internal MPI error",
        17 => "Error code is in status",
        18 => "Pending request (no error)",
        19 => "Invalid MPI_Request",
        20 => "Permission denied",
        21 => "Invalid amode value in MPI_File_open",
        22 => "Invalid file name",
        23 => "An error occurred in a user-supplied data conversion function",
        24 => "Conversion functions could not be registered because a data representation identifier that was already defined was passed to MPI_REGISTER_DATAREP",
        25 => "File exists",
        26 => "File operation could not be completed, as the file is currently open by some process",
        27 => "Invalid MPI_File",
        28 => "Invalid MPI_Info",
        29 => "Invalid key for MPI_Info",
        30 => "Invalid MPI_Info value",
        31 => "MPI_Info key is not defined",
        32 => "Other I/O error",
        33 => "Invalid service name (see MPI_Publish_name)",
        34 => "Unable to allocate memory for MPI_Alloc_mem",
        35 => "Inconsistent arguments to collective routine",
        36 => "Not enough space for file",
        37 => "File does not exist",
        38 => "Invalid port",
        39 => "Quota exceeded for files",
        40 => "Read-only file or filesystem name",
        41 => "Attempt to lookup an unknown service name",
        42 => "Error in spawn call",
        43 => "Unsupported datarep passed to MPI_File_set_view",
        44 => "Unsupported operation",
        45 => "Invalid MPI_Win",
        46 => "Invalid base address",
        47 => "Invalid lock type",
        48 => "Invalid keyval",
        49 => "Conflicting accesses to window",
        50 => "Wrong synchronization of RMA calls",
        51 => "Invalid size argument",
        52 => "Invalid displacement argument",
        53 => "Invalid assert argument",
        55 => "Target memory is not part of the window (in the case of a window created with MPI_WIN_CREATE_DYNAMIC, target memory is not attached)",
        56 => "Memory cannot be attached (e.g., because of resource exhaustion)",
        57 => "Memory cannot be shared (e.g., some process in the group of the specified communicator cannot expose shared memory)",
        58 => "Passed window has the wrong flavor for the called function",
        59 => "MPI_T: out of memory",
        60 => "MPI_T: the tool information interface is not initialized",
        61 => "MPI_T: the interface cannot be initialized now",
        62 => "MPI_T: invalid index",
        63 => "MPI_T: item index out of range",
        64 => "MPI_T: invalid handle",
        65 => "MPI_T: no more handles available",
        66 => "MPI_T: no more sessions available",
        67 => "MPI_T: invalid session",
        68 => "MPI_T: control variable cannot be set at this moment",
        69 => "MPI_T: control variable cannot be set until the end of the execution",
        70 => "MPI_T: performance variable cannot be started or stopped",
        71 => "MPI_T: performance variable cannot be written or reset",
        72 => "MPI_T: performance variable cannot be read and written atomically",
        73 => "MPI_T: name does not match any variable or category",
        74 => "Invalid MPI_T handle or argument",
        75 => "Invalid session handle",
        76 => "Communication with an aborted or failed process",
        77 => "Value is too large to store",
        78 => "MPI_T: requested functionality not supported",
        79 => "Invalid error handler",
        _ => "Unknown error class",
    }
}

/// The full text for a code: class text, then what was wrong.
pub fn code_string(code: c_int) -> String {
    if let Some(s) = crate::objects::errhandler::user_string(code) {
        return s;
    }
    if code > MPI_ERR_LASTCODE {
        // A user class or code without a string: MPI says the string is empty.
        return String::new();
    }
    match message_of(code) {
        Some(m) => format!("{}, {}", class_string(class_of(code)), m),
        None => class_string(class_of(code)).to_string(),
    }
}

/// Completes an entry point: success, or the error through the right error handler.
/// Inline for the success case (a compare), the rest out of line.
#[inline]
pub fn finish(
    func: &'static str,
    result: std::thread::Result<MpiResult<()>>,
    default_obj: impl FnOnce() -> ErrObj,
) -> c_int {
    match result {
        Ok(Ok(())) => MPI_SUCCESS,
        failed => finish_failed(func, failed, default_obj),
    }
}

#[cold]
#[inline(never)]
fn finish_failed(
    func: &'static str,
    result: std::thread::Result<MpiResult<()>>,
    default_obj: impl FnOnce() -> ErrObj,
) -> c_int {
    let err = match result {
        Ok(Ok(())) => return MPI_SUCCESS,
        Ok(Err(e)) => e,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            MpiError::new(MPI_ERR_INTERN, format!("internal error (panic): {what}"))
        }
    };
    raise(func, err, default_obj)
}

/// Raises `err` from `func`: makes its code and runs the error handler of its object.
pub fn raise(func: &'static str, err: MpiError, default_obj: impl FnOnce() -> ErrObj) -> c_int {
    let obj = err.obj.unwrap_or_else(default_obj);
    let code = err
        .code
        .unwrap_or_else(|| make_code(err.class, format!("{func}: {}", err.msg)));
    crate::objects::errhandler::invoke(func, obj, code)
}

/// Body of every generated stub for a function of mpi.h that Ferrite does not implement.
pub fn unsupported(func: &'static str) -> c_int {
    unsupported_on(func, ErrObj::NoObject)
}

/// Like [`unsupported`], raised on the handler of the call's object (its first communicator,
/// window or file argument), as a real implementation of `func` would.
///
/// The call's handle arguments are checked first, as the real function would: an invalid
/// communicator or window is MPI_ERR_COMM / MPI_ERR_WIN, a null file MPI_ERR_FILE.
pub fn unsupported_on(func: &'static str, obj: ErrObj) -> c_int {
    let invalid = match obj {
        ErrObj::Comm(c) => crate::state::try_with(|st| st.objects.comms.get(c).err()).flatten(),
        ErrObj::Win(w) => crate::state::try_with(|st| st.objects.wins.get(w).err()).flatten(),
        ErrObj::File(0) => Some(MpiError::new(
            MPI_ERR_FILE,
            "null file handle (MPI_FILE_NULL)",
        )),
        ErrObj::Session(h) => crate::objects::session::get(h).err(),
        _ => None,
    };
    if let Some(e) = invalid {
        return raise(func, e, || obj);
    }
    raise(
        func,
        MpiError::new(
            MPI_ERR_UNSUPPORTED_OPERATION,
            format!("{func} is not implemented by Ferrite"),
        ),
        || obj,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_remember_messages_and_classes() {
        let c = make_code(6, "invalid rank 9".into());
        assert_eq!(class_of(c), 6);
        assert_ne!(c, 6);
        assert_eq!(message_of(c).as_deref(), Some("invalid rank 9"));
        assert!(code_string(c).starts_with("Invalid rank, invalid rank 9"));
        assert_eq!(message_of(6), None);
        assert!(c <= 0x3fffffff && c & USER_CODE_BIT == 0);
    }

    #[test]
    fn results_stay_one_word() {
        // Every entry point carries an MpiResult through its layers, catch_unwind and
        // finish: boxed, the error costs a pointer (null for success), not ~56 bytes.
        assert_eq!(std::mem::size_of::<MpiResult<()>>(), 8);
        assert_eq!(std::mem::size_of::<MpiResult<c_int>>(), 16);
        let mut e = MpiError::new(MPI_ERR_TAG, "bad tag").on(ErrObj::Comm(MPI_COMM_WORLD));
        e.msg.push_str(" -1");
        assert_eq!(
            (e.class, e.obj),
            (MPI_ERR_TAG, Some(ErrObj::Comm(MPI_COMM_WORLD)))
        );
        assert_eq!(e.into_data().msg, "bad tag -1");
    }

    #[test]
    fn old_codes_expire_instead_of_lying() {
        let first = make_code(2, "first".into());
        for i in 0..RING {
            make_code(3, format!("filler {i}"));
        }
        assert_eq!(message_of(first), None);
        assert_eq!(class_of(first), 2);
    }
}
