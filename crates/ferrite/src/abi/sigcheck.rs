//! Compile-time check of every implemented entry point against its mpi.h prototype:
//! build.rs writes one `const _: unsafe extern "C" fn(<C parameter types>) -> <C return type>
//! = <module>::PMPI_X;` per function (and per `MPI_X`), so a wrong argument count or type,
//! pointer constness or return type fails the build. Handle types that are the same Rust type
//! (MPI_Comm and MPI_Datatype are both `c_int`) cannot be told apart, as in C.
#![allow(unused_imports)]

use super::consts::*;
use super::types::{MPI_F08_status, MPI_Status};
use std::os::raw::{c_char, c_int, c_long, c_void};

include!(concat!(env!("OUT_DIR"), "/sigcheck.rs"));

#[cfg(test)]
mod tests {
    use super::{CHECKED, HEADER};
    use crate::abi::stubs::STUBBED;
    use std::collections::BTreeSet;

    /// Every function of mpi.h is either implemented with its signature checked or a stub:
    /// none is left out of the check.
    #[test]
    fn every_function_is_checked_or_stubbed() {
        let checked: BTreeSet<_> = CHECKED.iter().collect();
        let stubbed: BTreeSet<_> = STUBBED.iter().collect();
        assert!(checked.is_disjoint(&stubbed));
        for f in HEADER {
            assert!(
                checked.contains(f) || stubbed.contains(f),
                "{f} is neither checked nor stubbed"
            );
        }
        assert_eq!(checked.len() + stubbed.len(), HEADER.len());
        assert!(checked.len() > 400, "only {} checked", checked.len());
    }
}
