//! The transports' own errors: what went wrong in moving bytes (a peer failed or closed,
//! resources ran out, someone broke the protocol, a bad setting, the system refused), with a
//! message that names it. Transports know nothing of MPI: the layer above maps each kind to
//! an MPI error class in one place (`error.rs`, `From<transport::Error> for MpiError`).

use std::fmt;

/// What kind of failure: what the layers above need to pick an MPI error class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The peer is gone: lost without its clean close, or never reachable.
    PeerFailed,
    /// The peer closed its connections in MPI_Finalize.
    PeerClosed,
    /// Out of descriptors, memory or another resource the transport needs.
    Exhausted,
    /// Bytes that break the protocol: a stranger's packet, a malformed card.
    Protocol,
    /// A bad argument or setting: a FERRITE_* knob, a packet too large, a rank out of range.
    InvalidArg,
    /// Anything else the system or a library refused.
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: Kind,
    pub msg: String,
}

pub type TResult<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(kind: Kind, msg: impl Into<String>) -> Error {
        Error {
            kind,
            msg: msg.into(),
        }
    }

    /// An operating-system error: `Exhausted` when it says the process or the system ran
    /// short (descriptors, memory), else `Other`.
    pub fn os(e: &std::io::Error, msg: impl Into<String>) -> Error {
        let short = matches!(
            e.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
        );
        Error::new(if short { Kind::Exhausted } else { Kind::Other }, msg)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

/// The PMI client's failures (cards, the job secret) are the launcher's: `Other`.
impl From<crate::runtime::pmi::Error> for Error {
    fn from(e: crate::runtime::pmi::Error) -> Error {
        Error::new(Kind::Other, e.0)
    }
}

/// `terr!(InvalidArg, "packet of {} bytes", n)`: a transport error of that kind.
#[macro_export]
macro_rules! terr {
    ($kind:ident, $($fmt:tt)+) => {
        $crate::transport::error::Error::new(
            $crate::transport::error::Kind::$kind,
            format!($($fmt)+),
        )
    };
}
