//! Error handlers and error codes at the C edge (MPI 4.1 section 9.3-9.5).

use super::consts::*;
use super::{out, out_str};
use crate::error::{self, ErrObj, MpiError, MpiResult};
use crate::objects::errhandler::{self, CommErrhandlerFn, FileErrhandlerFn, Handler};
use crate::state;
use std::os::raw::{c_char, c_int};

/// MPI_{Comm,Win,File,Session}_create_errhandler: a handle for the user's function `f`,
/// wrapped as `kind`.
///
/// # Safety
/// `errhandler` is null or valid for one write.
pub(crate) unsafe fn create<F>(
    f: Option<F>,
    kind: fn(F) -> Handler,
    errhandler: *mut MPI_Errhandler,
) -> crate::error::MpiResult<()> {
    let f = f.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "null error handler function"))?;
    let h = state::with(|st| Ok(st.objects.errhandlers.user.insert(kind(f))))?;
    // SAFETY: per this function's contract.
    unsafe { out(errhandler, h) }
}

mpi_fn! {
    fn MPI_Comm_create_errhandler(comm_errhandler_fn: Option<CommErrhandlerFn>,
        errhandler: *mut MPI_Errhandler) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Errhandler* output.
        unsafe { create(comm_errhandler_fn, Handler::Comm, errhandler) }
    }
}

mpi_fn! {
    fn MPI_Comm_set_errhandler(comm: MPI_Comm, errhandler: MPI_Errhandler)
        on ErrObj::Comm(comm) => {
        set_comm_errhandler(comm, errhandler)
    }
}

fn set_comm_errhandler(comm: MPI_Comm, errhandler: MPI_Errhandler) -> crate::error::MpiResult<()> {
    state::with(|st| {
        match st.objects.errhandlers.resolve(errhandler) {
            None => {
                return Err(crate::mpi_err!(
                    MPI_ERR_ARG,
                    "invalid error handler {:#x}",
                    errhandler as u32
                ))
            }
            Some(Handler::Win(_) | Handler::File(_) | Handler::Session(_)) => {
                return Err(crate::mpi_err!(
                    MPI_ERR_ARG,
                    "error handler {:#x} was made for windows or files, not communicators",
                    errhandler as u32
                ))
            }
            Some(_) => {}
        }
        st.objects.comms.get_mut(comm)?.errhandler = errhandler;
        Ok(())
    })
}

mpi_fn! {
    fn MPI_Comm_get_errhandler(comm: MPI_Comm, errhandler: *mut MPI_Errhandler)
        on ErrObj::Comm(comm) => {
        let h = state::with(|st| st.objects.comms.reported_handler(comm))?;
        // SAFETY: the caller passes an MPI_Errhandler* output.
        unsafe { out(errhandler, h) }
    }
}

mpi_fn! {
    fn MPI_Errhandler_free(errhandler: *mut MPI_Errhandler) on ErrObj::NoObject => {
        if errhandler.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for errhandler"));
        }
        // SAFETY: non-null; the caller passes an MPI_Errhandler*.
        let h = unsafe { *errhandler };
        state::with(|st| {
            if st.objects.errhandlers.resolve(h).is_none() {
                return Err(crate::mpi_err!(MPI_ERR_ARG, "invalid error handler {:#x}", h as u32));
            }
            // A handler stays usable by the objects it is attached to (MPI frees it only when
            // they let go); handlers are a few bytes, so the entry is simply kept.
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { out(errhandler, MPI_ERRHANDLER_NULL) }
    }
}

mpi_fn! {
    fn MPI_Comm_call_errhandler(comm: MPI_Comm, errorcode: c_int) on ErrObj::Comm(comm) => {
        state::with(|st| st.objects.comms.get(comm).map(|_| ()))?;
        // The handler runs without the state lock; its return value is not ours to report.
        errhandler::invoke("MPI_Comm_call_errhandler", ErrObj::Comm(comm), errorcode);
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int)
        on ErrObj::NoObject => {
        if !(0..=MPI_ERR_LASTCODE).contains(&errorcode) && !errhandler::is_user(errorcode) {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "invalid error code {errorcode}"));
        }
        let text = error::code_string(errorcode);
        // SAFETY: the caller passes a buffer of MPI_MAX_ERROR_STRING chars and an int*.
        unsafe { out_str(string, MPI_MAX_ERROR_STRING, resultlen, &text) }
    }
}

mpi_fn! {
    fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) on ErrObj::NoObject => {
        if !(0..=MPI_ERR_LASTCODE).contains(&errorcode) && !errhandler::is_user(errorcode) {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "invalid error code {errorcode}"));
        }
        // SAFETY: the caller passes an int* output.
        unsafe { out(errorclass, error::class_of(errorcode)) }
    }
}

mpi_fn! {
    fn MPI_Add_error_class(errorclass: *mut c_int) on ErrObj::NoObject => {
        state::with(|_| Ok(()))?;
        let c = errhandler::add_class().ok_or_else(|| MpiError::new(MPI_ERR_OTHER,
            "no more user error classes (at most 49)"))?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(errorclass, c) }
    }
}

mpi_fn! {
    fn MPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) on ErrObj::NoObject => {
        state::with(|_| Ok(()))?;
        if !errhandler::is_class(errorclass) {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "{errorclass} is not an error class"));
        }
        let c = errhandler::add_code(errorclass);
        // SAFETY: the caller passes an int* output.
        unsafe { out(errorcode, c) }
    }
}

mpi_fn! {
    fn MPI_Add_error_string(errorcode: c_int, string: *const c_char) on ErrObj::NoObject => {
        if string.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for string"));
        }
        if !errhandler::is_user(errorcode) {
            return Err(crate::mpi_err!(MPI_ERR_ARG,
                "error code {errorcode} was not made by MPI_Add_error_class/code"));
        }
        // SAFETY: non-null NUL-terminated string from the caller.
        let s = unsafe { std::ffi::CStr::from_ptr(string) }.to_string_lossy();
        if s.len() >= MPI_MAX_ERROR_STRING as usize {
            return Err(crate::mpi_err!(MPI_ERR_ARG,
                "error string of {} characters (at most {})", s.len(), MPI_MAX_ERROR_STRING - 1));
        }
        errhandler::set_string(errorcode, s.into_owned());
        Ok(())
    }
}

mpi_fn! {
    /// The MPI-1 name of MPI_Comm_create_errhandler.
    fn MPI_Errhandler_create(comm_errhandler_fn: Option<CommErrhandlerFn>,
        errhandler: *mut MPI_Errhandler) on ErrObj::NoObject => {
        let f = comm_errhandler_fn
            .ok_or_else(|| MpiError::new(MPI_ERR_ARG, "null error handler function"))?;
        let h = state::with(|st| Ok(st.objects.errhandlers.user.insert(Handler::Comm(f))))?;
        // SAFETY: the caller passes an MPI_Errhandler* output.
        unsafe { out(errhandler, h) }
    }
}

mpi_fn! {
    /// The MPI-1 name of MPI_Comm_set_errhandler.
    fn MPI_Errhandler_set(comm: MPI_Comm, errhandler: MPI_Errhandler) on ErrObj::Comm(comm) => {
        set_comm_errhandler(comm, errhandler)
    }
}

mpi_fn! {
    /// The MPI-1 name of MPI_Comm_get_errhandler.
    fn MPI_Errhandler_get(comm: MPI_Comm, errhandler: *mut MPI_Errhandler)
        on ErrObj::Comm(comm) => {
        let h = state::with(|st| st.objects.comms.reported_handler(comm))?;
        // SAFETY: the caller passes an MPI_Errhandler* output.
        unsafe { out(errhandler, h) }
    }
}

mpi_fn! {
    fn MPI_Remove_error_class(errorclass: c_int) on ErrObj::NoObject => {
        remove_class(errorclass)
    }
}

mpi_fn! {
    fn MPI_Remove_error_code(errorcode: c_int) on ErrObj::NoObject => {
        remove_code(errorcode)
    }
}

mpi_fn! {
    fn MPI_Remove_error_string(errorcode: c_int) on ErrObj::NoObject => {
        remove_string(errorcode)
    }
}

/// MPI_Remove_error_class (MPICH's MPIX_Delete_error_class before MPI 4.1).
pub(crate) fn remove_class(errorclass: c_int) -> MpiResult<()> {
    if !errhandler::is_user(errorclass) || errhandler::is_user_code(errorclass) {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "{errorclass} is not a class made by MPI_Add_error_class"
        ));
    }
    errhandler::remove(errorclass).map_err(|why| {
        crate::mpi_err!(MPI_ERR_ARG, "cannot remove error class {errorclass}: {why}")
    })
}

/// MPI_Remove_error_code (MPIX_Delete_error_code).
pub(crate) fn remove_code(errorcode: c_int) -> MpiResult<()> {
    if !errhandler::is_user_code(errorcode) {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "{errorcode} is not a code made by MPI_Add_error_code"
        ));
    }
    errhandler::remove(errorcode)
        .map_err(|why| crate::mpi_err!(MPI_ERR_ARG, "cannot remove error code {errorcode}: {why}"))
}

/// MPI_Remove_error_string (MPIX_Delete_error_string).
pub(crate) fn remove_string(errorcode: c_int) -> MpiResult<()> {
    if !errhandler::is_user(errorcode) {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "{errorcode} was not made by MPI_Add_error_class/code"
        ));
    }
    errhandler::remove_string(errorcode);
    Ok(())
}

mpi_fn! {
    fn MPI_File_create_errhandler(file_errhandler_fn: Option<FileErrhandlerFn>,
        errhandler: *mut MPI_Errhandler) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Errhandler* output.
        unsafe { create(file_errhandler_fn, Handler::File, errhandler) }
    }
}

/// Checks a file handle of the errhandler calls: MPI_FILE_NULL (whose handler is the
/// default for files and for MPI_File_open's errors) or an open file.
fn file_or_null(file: MPI_File) -> MpiResult<()> {
    if !file.is_null() {
        crate::io::file::get(file as usize)?;
    }
    Ok(())
}

mpi_fn! {
    fn MPI_File_set_errhandler(file: MPI_File, errhandler: MPI_Errhandler)
        on ErrObj::File(file as usize) => {
        file_or_null(file)?;
        match state::try_with(|st| st.objects.errhandlers.resolve(errhandler)).flatten() {
            Some(Handler::Comm(_) | Handler::Win(_) | Handler::Session(_)) => Err(crate::mpi_err!(MPI_ERR_ARG,
                "error handler {:#x} was not made for files (MPI_File_create_errhandler)", errhandler as u32)),
            Some(_) if file.is_null() => {
                errhandler::set_file_null_handler(errhandler);
                Ok(())
            }
            Some(_) => crate::io::file::set_errhandler(file as usize, errhandler),
            None => Err(crate::mpi_err!(MPI_ERR_ARG, "invalid error handler {:#x}", errhandler as u32)),
        }
    }
}

mpi_fn! {
    fn MPI_File_get_errhandler(file: MPI_File, errhandler: *mut MPI_Errhandler)
        on ErrObj::File(file as usize) => {
        file_or_null(file)?;
        let h = crate::io::file::errhandler_of(file as usize).unwrap_or_else(errhandler::file_null_handler);
        // SAFETY: the caller passes an MPI_Errhandler* output.
        unsafe { out(errhandler, h) }
    }
}

mpi_fn! {
    fn MPI_File_call_errhandler(file: MPI_File, errorcode: c_int) on ErrObj::File(file as usize) => {
        file_or_null(file)?;
        // The handler runs without the state lock; its return value is not ours to report.
        errhandler::invoke("MPI_File_call_errhandler", ErrObj::File(file as usize), errorcode);
        Ok(())
    }
}
