//! The MPI constants and handle types, re-exported from the leaf module `crate::consts` (every
//! layer uses them; this path stays for the entry points and for code not moved yet).
pub use crate::consts::*;
