//! MPI_Get_version and MPI_Get_library_version: callable at any time, even before MPI_Init.

use super::consts::*;
use super::out;
use crate::error::{ErrObj, MpiError};
use std::os::raw::{c_char, c_int};

/// The text MPI_Get_library_version returns.
pub fn library_version() -> String {
    format!(
        "Ferrite MPI {} (MPI {MPI_VERSION}.{MPI_SUBVERSION}, MPICH ABI, libmpi.so.12)",
        env!("CARGO_PKG_VERSION")
    )
}

mpi_fn! {
    fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: both come from the C caller as int* output arguments.
        unsafe {
            out(version, MPI_VERSION)?;
            out(subversion, MPI_SUBVERSION)
        }
    }
}

mpi_fn! {
    fn MPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) on ErrObj::NoObject => {
        if version.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for the version buffer"));
        }
        let text = library_version();
        let bytes = &text.as_bytes()[..text.len().min(MPI_MAX_LIBRARY_VERSION_STRING as usize - 1)];
        // SAFETY: the caller provides MPI_MAX_LIBRARY_VERSION_STRING bytes at `version`; we
        // write fewer, plus the terminating NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), version, bytes.len());
            version.add(bytes.len()).write(0);
        }
        // SAFETY: `resultlen` comes from the C caller as an int* output argument.
        unsafe { out(resultlen, bytes.len() as c_int) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_and_library_version() {
        let (mut v, mut sv) = (0, 0);
        // SAFETY: valid locals.
        assert_eq!(unsafe { PMPI_Get_version(&mut v, &mut sv) }, MPI_SUCCESS);
        assert_eq!((v, sv), (4, 1));
        let mut buf = vec![1 as c_char; MPI_MAX_LIBRARY_VERSION_STRING as usize];
        let mut len = -1;
        // SAFETY: the buffer has MPI_MAX_LIBRARY_VERSION_STRING bytes.
        let rc = unsafe { MPI_Get_library_version(buf.as_mut_ptr(), &mut len) };
        assert_eq!(rc, MPI_SUCCESS);
        // SAFETY: the call NUL-terminated the buffer.
        let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_str()
            .unwrap();
        assert_eq!(len as usize, s.len());
        assert!(
            s.starts_with("Ferrite MPI ") && s.contains(env!("CARGO_PKG_VERSION")),
            "{s}"
        );
    }
}
