//! Info objects at the C edge (MPI 4.1 section 10.1).

use super::consts::*;
use super::{out, out_str};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::info::{self, Info};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

/// A key argument: non-null, at most MPI_MAX_INFO_KEY characters, not empty.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn key_arg(p: *const c_char) -> MpiResult<String> {
    if p.is_null() {
        return Err(MpiError::new(
            MPI_ERR_INFO_KEY,
            "null pointer passed for key",
        ));
    }
    // SAFETY: non-null NUL-terminated string per the contract.
    let k = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    if k.is_empty() || k.len() > MPI_MAX_INFO_KEY as usize {
        return Err(crate::mpi_err!(
            MPI_ERR_INFO_KEY,
            "info key of {} characters (must be 1 to {MPI_MAX_INFO_KEY})",
            k.len()
        ));
    }
    Ok(k)
}

mpi_fn! {
    fn MPI_Info_create(info: *mut MPI_Info) on ErrObj::NoObject => {
        let h = info::with(|i| Ok(i.user.insert(Info::default())))?;
        // SAFETY: the caller passes an MPI_Info* output.
        unsafe { out(info, h) }
    }
}

mpi_fn! {
    fn MPI_Info_set(info: MPI_Info, key: *const c_char, value: *const c_char)
        on ErrObj::NoObject => {
        // SAFETY: C strings from the caller.
        let k = unsafe { key_arg(key) }?;
        if value.is_null() {
            return Err(MpiError::new(MPI_ERR_INFO_VALUE, "null pointer passed for value"));
        }
        // SAFETY: non-null NUL-terminated string from the caller.
        let v = unsafe { CStr::from_ptr(value) }.to_string_lossy().into_owned();
        if v.is_empty() || v.len() > MPI_MAX_INFO_VAL as usize {
            return Err(crate::mpi_err!(MPI_ERR_INFO_VALUE,
                "info value of {} characters (must be 1 to {MPI_MAX_INFO_VAL})", v.len()));
        }
        info::with(|i| {
            i.get_mut(info)?.set(&k, &v);
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Info_delete(info: MPI_Info, key: *const c_char) on ErrObj::NoObject => {
        // SAFETY: C string from the caller.
        let k = unsafe { key_arg(key) }?;
        info::with(|i| {
            if i.get_mut(info)?.delete(&k) {
                Ok(())
            } else {
                Err(crate::mpi_err!(MPI_ERR_INFO_NOKEY, "info key \"{k}\" is not set"))
            }
        })
    }
}

fn lookup(info: MPI_Info, key: &str) -> MpiResult<Option<String>> {
    info::with(|i| Ok(i.get(info)?.get(key).map(str::to_string)))
}

mpi_fn! {
    fn MPI_Info_get(info: MPI_Info, key: *const c_char, valuelen: c_int, value: *mut c_char,
        flag: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: C string from the caller.
        let k = unsafe { key_arg(key) }?;
        if valuelen < 0 {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "negative valuelen {valuelen}"));
        }
        match lookup(info, &k)? {
            // SAFETY: the caller's buffer holds valuelen + 1 chars (the standard's rule).
            Some(v) => unsafe {
                out_str(value, valuelen + 1, std::ptr::null_mut(), &v)?;
                out(flag, 1)
            },
            // SAFETY: the caller passes an int* output.
            None => unsafe { out(flag, 0) },
        }
    }
}

mpi_fn! {
    fn MPI_Info_get_valuelen(info: MPI_Info, key: *const c_char, valuelen: *mut c_int,
        flag: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: C string from the caller.
        let k = unsafe { key_arg(key) }?;
        match lookup(info, &k)? {
            // SAFETY: the caller passes int* outputs.
            Some(v) => unsafe { out(valuelen, v.len() as c_int)?; out(flag, 1) },
            // SAFETY: the caller passes an int* output.
            None => unsafe { out(flag, 0) },
        }
    }
}

mpi_fn! {
    fn MPI_Info_get_string(info: MPI_Info, key: *const c_char, buflen: *mut c_int,
        value: *mut c_char, flag: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: C string from the caller.
        let k = unsafe { key_arg(key) }?;
        if buflen.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for buflen"));
        }
        // SAFETY: non-null int* in/out argument.
        let cap = unsafe { *buflen };
        match lookup(info, &k)? {
            Some(v) => {
                if cap > 0 {
                    // SAFETY: the caller's buffer holds `cap` chars.
                    unsafe { out_str(value, cap, std::ptr::null_mut(), &v)? };
                }
                // SAFETY: as above; buflen returns the size needed, NUL included.
                unsafe { out(buflen, v.len() as c_int + 1)?; out(flag, 1) }
            }
            // SAFETY: the caller passes an int* output.
            None => unsafe { out(flag, 0) },
        }
    }
}

mpi_fn! {
    fn MPI_Info_get_nkeys(info: MPI_Info, nkeys: *mut c_int) on ErrObj::NoObject => {
        let n = info::with(|i| Ok(i.get(info)?.entries.len()))?;
        // SAFETY: the caller passes an int* output.
        unsafe { out(nkeys, n as c_int) }
    }
}

mpi_fn! {
    fn MPI_Info_get_nthkey(info: MPI_Info, n: c_int, key: *mut c_char) on ErrObj::NoObject => {
        let k = info::with(|i| {
            let i = i.get(info)?;
            usize::try_from(n).ok().and_then(|n| i.entries.get(n)).map(|e| e.0.clone())
                .ok_or_else(|| crate::mpi_err!(MPI_ERR_ARG,
                    "key index {n} out of range (the info has {} keys)", i.entries.len()))
        })?;
        // SAFETY: the caller's buffer holds MPI_MAX_INFO_KEY + 1 chars.
        unsafe { out_str(key, MPI_MAX_INFO_KEY + 1, std::ptr::null_mut(), &k) }
    }
}

mpi_fn! {
    fn MPI_Info_dup(info: MPI_Info, newinfo: *mut MPI_Info) on ErrObj::NoObject => {
        let h = info::with(|i| {
            let copy = i.get(info)?.clone();
            Ok(i.user.insert(copy))
        })?;
        // SAFETY: the caller passes an MPI_Info* output.
        unsafe { out(newinfo, h) }
    }
}

mpi_fn! {
    fn MPI_Info_free(info: *mut MPI_Info) on ErrObj::NoObject => {
        if info.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for info"));
        }
        // SAFETY: non-null; the caller passes an MPI_Info*.
        let h = unsafe { *info };
        info::with(|i| {
            if h == MPI_INFO_ENV {
                return Err(MpiError::new(MPI_ERR_INFO, "MPI_INFO_ENV cannot be freed"));
            }
            i.get(h)?;
            i.user.remove(h);
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { out(info, MPI_INFO_NULL) }
    }
}

mpi_fn! {
    fn MPI_Info_create_env(_argc: c_int, _argv: *mut *mut c_char, info: *mut MPI_Info)
        on ErrObj::NoObject => {
        // Callable before MPI_Init (MPI 4.1 11.2.3), as every MPI_Info function.
        let h = info::with(|i| {
            let env = i.env.clone();
            Ok(i.user.insert(env))
        })?;
        // SAFETY: the caller passes an MPI_Info* output.
        unsafe { out(info, h) }
    }
}
