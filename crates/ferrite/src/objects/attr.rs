//! Attribute caching (MPI 4.1 section 7.7): keyvals with copy/delete callbacks, and the
//! attributes set on communicators, datatypes and windows.
//!
//! Values live in a side table keyed by (owner kind, handle), so the object structs stay
//! plain. User callbacks never run under the state lock: the helpers here collect what to
//! call under the lock, release it, call, then store the outcome.

use super::handles::{kind, HandleTable};
use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::state;
use std::collections::HashMap;
use std::ffi::c_void;
use std::os::raw::c_int;

/// `int copy(handle old, int keyval, void *extra, void *val_in, void *val_out, int *flag)`
/// (the handle is an MPI_Comm, MPI_Datatype or MPI_Win: all C ints).
pub type CopyFn =
    unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `int delete(handle obj, int keyval, void *val, void *extra)`
pub type DeleteFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    Comm,
    Type,
    Win,
}

impl Owner {
    fn what(self) -> &'static str {
        match self {
            Owner::Comm => "communicator",
            Owner::Type => "datatype",
            Owner::Win => "window",
        }
    }
}

#[derive(Clone, Copy)]
pub struct Keyval {
    pub owner: Owner,
    pub copy: Option<CopyFn>,
    pub delete: Option<DeleteFn>,
    /// The user's extra_state pointer, as an address (the state must be Send).
    pub extra: usize,
    /// Freed by the user: no new attributes, existing ones keep working.
    pub freed: bool,
}

pub struct Attrs {
    keyvals: HandleTable<Keyval>,
    /// (keyval, value address) per object, in the order they were first set.
    values: HashMap<(Owner, c_int), Vec<(c_int, usize)>>,
}

impl Default for Attrs {
    fn default() -> Self {
        Attrs {
            keyvals: HandleTable::new(kind::KEYVAL),
            values: HashMap::new(),
        }
    }
}

impl Attrs {
    pub fn create_keyval(&mut self, kv: Keyval) -> c_int {
        self.keyvals.insert(kv)
    }

    pub fn keyval(&self, owner: Owner, k: c_int) -> MpiResult<Keyval> {
        match self.keyvals.get(k) {
            Some(kv) if kv.owner == owner => Ok(*kv),
            Some(kv) => Err(crate::mpi_err!(
                MPI_ERR_KEYVAL,
                "keyval {:#x} was made for a {}, not a {}",
                k as u32,
                kv.owner.what(),
                owner.what()
            )),
            None if k == MPI_KEYVAL_INVALID => Err(MpiError::new(
                MPI_ERR_KEYVAL,
                "MPI_KEYVAL_INVALID is not a keyval",
            )),
            None => Err(crate::mpi_err!(
                MPI_ERR_KEYVAL,
                "invalid keyval {:#x}",
                k as u32
            )),
        }
    }

    pub fn free_keyval(&mut self, owner: Owner, k: c_int) -> MpiResult<()> {
        self.keyval(owner, k)?;
        if let Some(kv) = self.keyvals.get_mut(k) {
            kv.freed = true;
        }
        Ok(())
    }

    pub fn get(&self, owner: Owner, h: c_int, k: c_int) -> Option<usize> {
        self.values
            .get(&(owner, h))?
            .iter()
            .find(|e| e.0 == k)
            .map(|e| e.1)
    }

    /// Stores a value; returns the value it replaced.
    fn put(&mut self, owner: Owner, h: c_int, k: c_int, v: usize) -> Option<usize> {
        let list = self.values.entry((owner, h)).or_default();
        match list.iter_mut().find(|e| e.0 == k) {
            Some(e) => Some(std::mem::replace(&mut e.1, v)),
            None => {
                list.push((k, v));
                None
            }
        }
    }

    fn take(&mut self, owner: Owner, h: c_int, k: c_int) -> Option<usize> {
        let list = self.values.get_mut(&(owner, h))?;
        let i = list.iter().position(|e| e.0 == k)?;
        Some(list.remove(i).1)
    }

    /// Keyvals of the attributes on an object, in the order they were set.
    pub fn keys_of(&self, owner: Owner, h: c_int) -> Vec<(c_int, usize)> {
        self.values.get(&(owner, h)).cloned().unwrap_or_default()
    }
}

fn callback_error(what: &str, k: c_int, rc: c_int) -> MpiError {
    let mut e = crate::mpi_err!(
        MPI_ERR_OTHER,
        "attribute {what} callback of keyval {:#x} returned {rc}",
        k as u32
    );
    if rc != MPI_SUCCESS && crate::error::class_of(rc) != 0 {
        e.code = Some(rc);
        e.class = crate::error::class_of(rc);
    }
    e
}

/// Runs the delete callback of keyval `k` for value `v` on object `h` (lock not held).
fn run_delete(kv: &Keyval, h: c_int, k: c_int, v: usize) -> MpiResult<()> {
    if let Some(f) = kv.delete {
        // SAFETY: `f` was registered by the user with the delete-callback C signature;
        // the arguments are what MPI defines for it.
        let rc = unsafe { f(h, k, v as *mut c_void, kv.extra as *mut c_void) };
        if rc != MPI_SUCCESS {
            return Err(callback_error("delete", k, rc));
        }
    }
    Ok(())
}

/// MPI_*_set_attr: replaces (deleting the old value through its callback) or adds.
pub fn set(owner: Owner, h: c_int, k: c_int, v: usize) -> MpiResult<()> {
    let (kv, old) = state::with(|st| {
        let kv = st.objects.attrs.keyval(owner, k)?;
        if kv.freed {
            return Err(crate::mpi_err!(
                MPI_ERR_KEYVAL,
                "keyval {:#x} has been freed",
                k as u32
            ));
        }
        Ok((kv, st.objects.attrs.get(owner, h, k)))
    })?;
    if let Some(old) = old {
        run_delete(&kv, h, k, old)?;
    }
    state::with(|st| {
        st.objects.attrs.put(owner, h, k, v);
        Ok(())
    })
}

/// MPI_*_get_attr for user keyvals.
pub fn get(owner: Owner, h: c_int, k: c_int) -> MpiResult<Option<usize>> {
    state::with(|st| {
        st.objects.attrs.keyval(owner, k)?;
        Ok(st.objects.attrs.get(owner, h, k))
    })
}

/// MPI_*_delete_attr.
pub fn delete(owner: Owner, h: c_int, k: c_int) -> MpiResult<()> {
    let (kv, v) = state::with(|st| {
        let kv = st.objects.attrs.keyval(owner, k)?;
        Ok((kv, st.objects.attrs.get(owner, h, k)))
    })?;
    let v = v.ok_or_else(|| {
        crate::mpi_err!(
            MPI_ERR_KEYVAL,
            "no attribute for keyval {:#x} on this {}",
            k as u32,
            owner.what()
        )
    })?;
    run_delete(&kv, h, k, v)?;
    state::with(|st| {
        st.objects.attrs.take(owner, h, k);
        Ok(())
    })
}

/// Calls the copy callbacks of every attribute on `old` and stores the copies on `new`
/// (MPI_Comm_dup, MPI_Type_dup).
pub fn copy_all(owner: Owner, old: c_int, new: c_int) -> MpiResult<()> {
    let items = state::with(|st| {
        let a = &st.objects.attrs;
        Ok(a.keys_of(owner, old)
            .into_iter()
            .filter_map(|(k, v)| a.keyvals.get(k).map(|kv| (k, *kv, v)))
            .collect::<Vec<_>>())
    })?;
    for (k, kv, v) in items {
        let Some(f) = kv.copy else { continue };
        let mut flag: c_int = 0;
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: `f` was registered with the copy-callback C signature; `out` and `flag`
        // are valid locals for the callback to write.
        let rc = unsafe {
            f(
                old,
                k,
                kv.extra as *mut c_void,
                v as *mut c_void,
                (&mut out as *mut *mut c_void).cast(),
                &mut flag,
            )
        };
        if rc != MPI_SUCCESS {
            return Err(callback_error("copy", k, rc));
        }
        if flag != 0 {
            state::with(|st| {
                st.objects.attrs.put(owner, new, k, out as usize);
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// Deletes every attribute of an object being freed, last set first, through the delete
/// callbacks. Stops at the first failing callback (the object is then not freed).
pub fn delete_all(owner: Owner, h: c_int) -> MpiResult<()> {
    loop {
        let next = state::with(|st| {
            let a = &st.objects.attrs;
            Ok(a.values
                .get(&(owner, h))
                .and_then(|l| l.last().copied())
                .and_then(|(k, v)| a.keyvals.get(k).map(|kv| (k, *kv, v))))
        })?;
        let Some((k, kv, v)) = next else { break };
        run_delete(&kv, h, k, v)?;
        state::with(|st| {
            st.objects.attrs.take(owner, h, k);
            Ok(())
        })?;
    }
    state::with(|st| {
        st.objects.attrs.values.remove(&(owner, h));
        Ok(())
    })
}
