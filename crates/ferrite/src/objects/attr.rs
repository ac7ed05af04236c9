//! Attribute caching (MPI 4.1 section 7.7): keyvals with copy/delete callbacks, and the
//! attributes set on communicators, datatypes and windows.
//!
//! Values live in a side table keyed by (owner kind, handle), so the object structs stay
//! plain. User callbacks never run under the state lock: the helpers here collect what to
//! call under the lock, release it, call, then store the outcome.

use super::handles::{kind, HandleTable};
use crate::consts::*;
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

/// A language binding's trampoline for copy callbacks (MPICH's `MPII_Attr_copy_proxy`,
/// installed by `MPII_Keyval_set_proxy`): `(user_fn, handle, keyval, extra, kind, value,
/// *copy, *flag)`. MPICH's Fortran library uses it to call Fortran callbacks.
pub type CopyProxy = unsafe extern "C" fn(
    *const c_void,
    c_int,
    c_int,
    *mut c_void,
    c_int,
    *mut c_void,
    *mut *mut c_void,
    *mut c_int,
) -> c_int;
/// The same for delete callbacks: `(user_fn, handle, keyval, kind, value, extra)`.
pub type DeleteProxy =
    unsafe extern "C" fn(*const c_void, c_int, c_int, c_int, *mut c_void, *mut c_void) -> c_int;

/// How an attribute value was given (MPICH's `MPIR_Attr_type`, whose values the Fortran
/// library passes): a C pointer, or an integer from Fortran, address-sized
/// (INTEGER(KIND=MPI_ADDRESS_KIND)) or not (INTEGER, MPI-1's MPI_ATTR_PUT). MPI 4.1
/// section 19.3.7 says what each language sees of a value another one set: C gets a pointer
/// to an integer value, Fortran gets a pointer's address as an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Ptr = 0,
    Aint = 1,
    Int = 3,
}

impl AttrKind {
    pub fn from_c(k: c_int) -> MpiResult<AttrKind> {
        match k {
            0 => Ok(AttrKind::Ptr),
            1 => Ok(AttrKind::Aint),
            3 => Ok(AttrKind::Int),
            _ => Err(crate::mpi_err!(MPI_ERR_ARG, "invalid attribute type {k}")),
        }
    }
}

/// One attribute: its value, boxed so that its address is stable (C code given an integer
/// attribute gets a pointer to it), and how it was set.
struct Entry {
    key: c_int,
    value: Box<usize>,
    kind: AttrKind,
}

/// An attribute as read: the stored value, how it was set, and where it is stored.
#[derive(Clone, Copy, Debug)]
pub struct Value {
    pub raw: usize,
    pub kind: AttrKind,
    slot: usize,
}

impl Value {
    /// The value as a caller of language `want` sees it: C gets the pointer it stored, or a
    /// pointer to a stored integer; Fortran gets the integer (or the pointer's address).
    pub fn as_seen(&self, want: AttrKind) -> usize {
        if want == AttrKind::Ptr && self.kind != AttrKind::Ptr {
            self.slot
        } else {
            self.raw
        }
    }
}

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
    /// Set by a language binding (MPII_Keyval_set_proxy): the callbacks are called through
    /// these, with the user function as first argument.
    pub copy_proxy: Option<CopyProxy>,
    pub delete_proxy: Option<DeleteProxy>,
}

pub struct Attrs {
    keyvals: HandleTable<Keyval>,
    /// The attributes of each object, in the order they were first set.
    values: HashMap<(Owner, c_int), Vec<Entry>>,
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

    /// MPII_Keyval_set_proxy: a language binding's trampolines for keyval `k`.
    pub fn set_proxy(&mut self, k: c_int, copy: Option<CopyProxy>, delete: Option<DeleteProxy>) {
        if let Some(kv) = self.keyvals.get_mut(k) {
            kv.copy_proxy = copy;
            kv.delete_proxy = delete;
        }
    }

    pub fn get(&self, owner: Owner, h: c_int, k: c_int) -> Option<Value> {
        self.values
            .get(&(owner, h))?
            .iter()
            .find(|e| e.key == k)
            .map(|e| Value {
                raw: *e.value,
                kind: e.kind,
                slot: &*e.value as *const usize as usize,
            })
    }

    /// Stores a value, replacing any earlier one.
    fn put(&mut self, owner: Owner, h: c_int, k: c_int, v: usize, kind: AttrKind) {
        let list = self.values.entry((owner, h)).or_default();
        match list.iter_mut().find(|e| e.key == k) {
            Some(e) => {
                *e.value = v;
                e.kind = kind;
            }
            None => list.push(Entry {
                key: k,
                value: Box::new(v),
                kind,
            }),
        }
    }

    fn take(&mut self, owner: Owner, h: c_int, k: c_int) {
        if let Some(list) = self.values.get_mut(&(owner, h)) {
            list.retain(|e| e.key != k);
        }
    }

    /// The attributes on an object, in the order they were set.
    fn keys_of(&self, owner: Owner, h: c_int) -> Vec<(c_int, Value)> {
        self.values
            .get(&(owner, h))
            .map(|l| {
                l.iter()
                    .filter_map(|e| Some((e.key, self.get(owner, h, e.key)?)))
                    .collect()
            })
            .unwrap_or_default()
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
fn run_delete(kv: &Keyval, h: c_int, k: c_int, v: Value) -> MpiResult<()> {
    let Some(f) = kv.delete else { return Ok(()) };
    let extra = kv.extra as *mut c_void;
    let rc = match kv.delete_proxy {
        // SAFETY: the binding registered the proxy for this keyval's callbacks; it gets the
        // user function and the value as MPICH's proxies expect them.
        Some(p) => unsafe {
            p(
                f as *const c_void,
                h,
                k,
                v.kind as c_int,
                v.raw as *mut c_void,
                extra,
            )
        },
        // SAFETY: `f` was registered by the user with the delete-callback C signature;
        // the arguments are what MPI defines for it.
        None => unsafe { f(h, k, v.as_seen(AttrKind::Ptr) as *mut c_void, extra) },
    };
    if rc != MPI_SUCCESS {
        return Err(callback_error("delete", k, rc));
    }
    Ok(())
}

/// MPI_*_set_attr: replaces (deleting the old value through its callback) or adds.
pub fn set(owner: Owner, h: c_int, k: c_int, v: usize, kind: AttrKind) -> MpiResult<()> {
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
        st.objects.attrs.put(owner, h, k, v, kind);
        Ok(())
    })
}

/// MPI_*_get_attr for user keyvals.
pub fn get(owner: Owner, h: c_int, k: c_int) -> MpiResult<Option<Value>> {
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
        let extra = kv.extra as *mut c_void;
        let rc = match kv.copy_proxy {
            // SAFETY: the binding registered the proxy for this keyval's callbacks; `out`
            // and `flag` are valid locals for it to write.
            Some(p) => unsafe {
                p(
                    f as *const c_void,
                    old,
                    k,
                    extra,
                    v.kind as c_int,
                    v.raw as *mut c_void,
                    &mut out,
                    &mut flag,
                )
            },
            // SAFETY: `f` was registered with the copy-callback C signature; `out` and
            // `flag` are valid locals for the callback to write.
            None => unsafe {
                f(
                    old,
                    k,
                    extra,
                    v.as_seen(AttrKind::Ptr) as *mut c_void,
                    (&mut out as *mut *mut c_void).cast(),
                    &mut flag,
                )
            },
        };
        if rc != MPI_SUCCESS {
            return Err(callback_error("copy", k, rc));
        }
        if flag != 0 {
            // The copy is of the same kind as the original (as in MPICH).
            state::with(|st| {
                st.objects.attrs.put(owner, new, k, out as usize, v.kind);
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
            Ok(a.keys_of(owner, h)
                .pop()
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
