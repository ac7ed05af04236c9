//! Generalized requests (MPI 4.1, section 13.2): MPI_Grequest_start and
//! MPI_Grequest_complete, and the hooks the completion calls of `request.rs` run.
//!
//! A generalized request is an ordinary entry of the request table (so handles, validation
//! and the any/all/some logic are shared) that stays pending until the user calls
//! MPI_Grequest_complete *and* a completion call has run its query_fn: `prepare` calls
//! query_fn (outside the state lock: it is user code and may call MPI_Status_set_*), stores
//! the status it filled in the request and marks the request done; the completion call then
//! takes it as any other request, and `release` calls free_fn for the ones it freed.
//! The callbacks live here, in their own table: the state lock is never held while they run.

use super::consts::*;
use super::status::{load, store};
use super::types::MPI_Status;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::lock_order;
use crate::p2p::protocol::empty_status;
use crate::p2p::request::Request;
use crate::state::{self, Ferrite};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

type QueryFn = unsafe extern "C" fn(*mut c_void, *mut MPI_Status) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type CancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
/// The same callbacks written in Fortran (subroutines with every argument by reference and
/// the error code last), as MPICH's Fortran library registers them: query(extra, status,
/// ierr), free(extra, ierr), cancel(extra, complete, ierr).
type FQueryFn = unsafe extern "C" fn(*mut c_void, *mut MPI_Fint, *mut MPI_Fint);
type FFreeFn = unsafe extern "C" fn(*mut c_void, *mut MPI_Fint);
type FCancelFn = unsafe extern "C" fn(*mut c_void, *mut MPI_Fint, *mut MPI_Fint);

#[derive(Clone, Copy)]
struct Greq {
    query: Option<QueryFn>,
    free: Option<FreeFn>,
    cancel: Option<CancelFn>,
    /// The user's extra_state, handed back to every callback.
    extra: usize,
    /// MPI_Grequest_complete was called.
    completed: bool,
    /// MPI_Request_free was called before completion: free_fn runs at MPI_Grequest_complete.
    freed: bool,
    /// The callbacks are Fortran subroutines (MPII_Grequest_set_lang_f77).
    fortran: bool,
    /// An internal request (MPI_Buffer_iflush): complete once this says so (checked with
    /// the state lock held, by the completion calls).
    until: Option<(Until, MPI_Comm)>,
}

/// The completion condition of an internal generalized request.
pub type Until = fn(&mut Ferrite, MPI_Comm) -> bool;

/// Live generalized requests by handle (few at a time: a linear scan is enough).
static GREQS: Mutex<Vec<(MPI_Request, Greq)>> = Mutex::new(Vec::new());
/// How many entries GREQS has: lets every Wait/Test skip the mutex when there are none.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn table() -> lock_order::Tracked<Vec<(MPI_Request, Greq)>> {
    lock_order::lock(&GREQS, lock_order::GREQS)
}

fn find(h: MPI_Request) -> Option<Greq> {
    table().iter().find(|e| e.0 == h).map(|e| e.1)
}

fn remove(h: MPI_Request) {
    let mut t = table();
    t.retain(|e| e.0 != h);
    LIVE.store(t.len(), Ordering::Release);
}

/// A callback's return code as a result (a callback's own error code, passed through).
fn check(code: c_int) -> MpiResult<()> {
    if code == MPI_SUCCESS {
        Ok(())
    } else {
        Err(MpiError::from_code(code))
    }
}

/// The generalized requests among `reqs`. Inlined: every completion call asks, and with
/// none alive the answer is one load.
#[inline]
pub fn among(reqs: &[MPI_Request]) -> Vec<MPI_Request> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    among_live(reqs)
}

#[inline(never)]
fn among_live(reqs: &[MPI_Request]) -> Vec<MPI_Request> {
    let t = table();
    reqs.iter()
        .copied()
        .filter(|h| t.iter().any(|e| e.0 == *h))
        .collect()
}

/// Runs query_fn for every generalized request of `greqs` the user has completed and makes
/// the request done with the status it filled (its return code becomes the status's error).
pub fn prepare(greqs: &[MPI_Request]) -> MpiResult<()> {
    for &h in greqs {
        if let Some((until, comm)) = find(h).and_then(|g| g.until) {
            let met = state::with(|st| {
                st.progress();
                Ok(until(st, comm))
            })?;
            if met {
                if let Some(e) = table().iter_mut().find(|e| e.0 == h) {
                    e.1.completed = true;
                }
            }
        }
        let Some(g) = find(h).filter(|g| g.completed) else {
            continue;
        };
        let mut c = MPI_Status::default();
        // SAFETY: `c` is a local status.
        unsafe { store(&mut c, &empty_status()) };
        let code = match g.query {
            Some(q) if g.fortran => {
                let mut ierr: MPI_Fint = MPI_SUCCESS;
                // SAFETY: a Fortran query subroutine was registered (set_lang_f77); MPICH's
                // Fortran status is the C status's five ints, so it fills `c` in place.
                unsafe {
                    let q: FQueryFn = std::mem::transmute::<QueryFn, FQueryFn>(q);
                    q(
                        g.extra as *mut c_void,
                        (&mut c as *mut MPI_Status).cast(),
                        &mut ierr,
                    );
                }
                ierr
            }
            // SAFETY: the user's query_fn with its extra_state and a status to fill.
            Some(q) => unsafe { q(g.extra as *mut c_void, &mut c) },
            None => MPI_SUCCESS,
        };
        // SAFETY: `c` is a local status.
        let mut s = unsafe { load(&c) };
        if code != MPI_SUCCESS {
            s.error = code;
        }
        state::with(|st| {
            if let Some(r) = st.p2p.reqs.get_mut(h) {
                r.status = s;
                r.done = true;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Calls free_fn for the generalized requests of `greqs` a completion call has freed.
pub fn release(greqs: &[MPI_Request]) -> MpiResult<()> {
    let mut result = Ok(());
    for &h in greqs {
        let gone = state::with(|st| Ok(st.p2p.reqs.get(h).is_none()))?;
        if gone {
            if let Some(g) = find(h) {
                remove(h);
                result = result.and(call_free(&g));
            }
        }
    }
    result
}

fn call_free(g: &Greq) -> MpiResult<()> {
    match g.free {
        Some(f) if g.fortran => {
            let mut ierr: MPI_Fint = MPI_SUCCESS;
            // SAFETY: a Fortran free subroutine was registered (set_lang_f77), called once.
            unsafe { std::mem::transmute::<FreeFn, FFreeFn>(f)(g.extra as *mut c_void, &mut ierr) };
            check(ierr)
        }
        // SAFETY: the user's free_fn with its extra_state, called once.
        Some(f) => check(unsafe { f(g.extra as *mut c_void) }),
        None => Ok(()),
    }
}

/// MPI_Cancel on a generalized request: cancel_fn(extra_state, completed). None when `h` is
/// not a generalized request.
pub fn cancel(h: MPI_Request) -> Option<MpiResult<()>> {
    let g = find(h)?;
    Some(match g.cancel {
        Some(c) if g.fortran => {
            let (mut complete, mut ierr): (MPI_Fint, MPI_Fint) = (g.completed as _, MPI_SUCCESS);
            // SAFETY: a Fortran cancel subroutine was registered (set_lang_f77).
            unsafe {
                std::mem::transmute::<CancelFn, FCancelFn>(c)(
                    g.extra as *mut c_void,
                    &mut complete,
                    &mut ierr,
                )
            };
            check(ierr)
        }
        // SAFETY: the user's cancel_fn with its extra_state.
        Some(c) => check(unsafe { c(g.extra as *mut c_void, g.completed as c_int) }),
        None => Ok(()),
    })
}

/// MPI_Request_free on a generalized request: free_fn runs now if it is complete, else at
/// MPI_Grequest_complete. None when `h` is not a generalized request.
pub fn free(h: MPI_Request) -> Option<MpiResult<()>> {
    let g = find(h)?;
    if g.completed {
        remove(h);
        let r = state::with(|st| {
            st.p2p.reqs.remove(h);
            Ok(())
        });
        return Some(r.and(call_free(&g)));
    }
    if let Some(e) = table().iter_mut().find(|e| e.0 == h) {
        e.1.freed = true;
    }
    Some(Ok(()))
}

/// Starts an internal request that completes when `until(st, comm)` holds (nonblocking
/// flushes): a generalized request with no callbacks, so that Wait/Test poll it.
pub fn start_until(comm: MPI_Comm, until: Until, request: *mut MPI_Request) -> MpiResult<()> {
    start(
        None,
        None,
        None,
        std::ptr::null_mut(),
        Some((until, comm)),
        request,
    )
}

fn start(
    query: Option<QueryFn>,
    free: Option<FreeFn>,
    cancel: Option<CancelFn>,
    extra: *mut c_void,
    until: Option<(Until, MPI_Comm)>,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    if request.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "null request pointer"));
    }
    let comm = until.map_or(MPI_COMM_WORLD, |u| u.1);
    let h = state::with(|st| Ok(st.p2p.reqs.insert(Request::new(comm, false))))?;
    let mut t = table();
    t.push((
        h,
        Greq {
            query,
            free,
            cancel,
            extra: extra as usize,
            completed: false,
            freed: false,
            fortran: false,
            until,
        },
    ));
    LIVE.store(t.len(), Ordering::Release);
    drop(t);
    // SAFETY: `request` is the caller's MPI_Request* (checked for null).
    unsafe { super::out(request, h) }
}

mpi_fn! {
    fn MPI_Grequest_start(query_fn: Option<QueryFn>, free_fn: Option<FreeFn>,
                          cancel_fn: Option<CancelFn>, extra_state: *mut c_void,
                          request: *mut MPI_Request) on ErrObj::NoObject => {
        start(query_fn, free_fn, cancel_fn, extra_state, None, request)
    }
}

mpi_fn! {
    fn MPI_Grequest_complete(request: MPI_Request) on ErrObj::NoObject => {
        let g = {
            let mut t = table();
            let e = t.iter_mut().find(|e| e.0 == request).ok_or_else(|| {
                crate::mpi_err!(
                    MPI_ERR_REQUEST,
                    "request {request:#x} is not an active generalized request"
                )
            })?;
            if e.1.until.is_some() {
                return Err(crate::mpi_err!(
                    MPI_ERR_REQUEST,
                    "request {request:#x} is not a generalized request (MPI_Grequest_start)"
                ));
            }
            if e.1.completed {
                return Err(crate::mpi_err!(
                    MPI_ERR_REQUEST,
                    "generalized request {request:#x} was already completed"
                ));
            }
            e.1.completed = true;
            e.1
        };
        if g.freed {
            // Freed by MPI_Request_free before completion: nothing will wait on it.
            remove(request);
            state::with(|st| {
                st.p2p.reqs.remove(request);
                Ok(())
            })?;
            return call_free(&g);
        }
        Ok(())
    }
}

/// MPII_Grequest_set_lang_f77: the callbacks of generalized request `h` are Fortran
/// subroutines (MPICH's Fortran MPI_GREQUEST_START calls this after starting it).
pub fn set_lang_fortran(h: MPI_Request) -> MpiResult<()> {
    let mut t = table();
    let e = t.iter_mut().find(|e| e.0 == h).ok_or_else(|| {
        crate::mpi_err!(
            MPI_ERR_REQUEST,
            "request {h:#x} is not a generalized request"
        )
    })?;
    e.1.fortran = true;
    Ok(())
}
