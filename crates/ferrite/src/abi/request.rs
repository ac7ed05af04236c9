//! Completion and request calls (MPI 4.1, sections 3.7.3-3.9): Wait/Test and their any/all/
//! some forms, Request_free, Request_get_status, Cancel, Test_cancelled, Start/Startall,
//! and status queries (Get_count, Get_elements, Status_set_*).
//!
//! Rules kept here: MPI_REQUEST_NULL and inactive persistent requests complete at once with
//! an empty status (source MPI_ANY_SOURCE, tag MPI_ANY_TAG, count 0); a completed
//! nonpersistent request is freed and its handle set to MPI_REQUEST_NULL, a persistent one
//! becomes inactive; errors are raised on the request's communicator.

use super::consts::*;
use super::grequest;
use super::out;
use super::ptr::{request as read_request, Requests};
use super::status::{ignored, load, store, store_with_error};
use super::types::MPI_Status;
use crate::error::{class_of, ErrObj, MpiError, MpiResult};
use crate::p2p::ops::invalid_request;
use crate::p2p::protocol::{empty_status, P2p, DONE_SEND};
use crate::p2p::status::Status;
use crate::state::{self, Ferrite, Held};
use std::os::raw::c_int;

/// The state of one request handle as the completion calls see it.
enum Slot {
    /// MPI_REQUEST_NULL or an inactive persistent request: completes with an empty status.
    Empty,
    Pending,
    Done,
}

#[inline]
fn slot(st: &Ferrite, h: MPI_Request) -> MpiResult<Slot> {
    if h == MPI_REQUEST_NULL {
        return Ok(Slot::Empty);
    }
    if h == DONE_SEND {
        return Ok(Slot::Done);
    }
    if P2p::is_waiter(h) {
        return match st.p2p.waiter_state(h) {
            Some(true) => Ok(Slot::Done),
            Some(false) => Ok(Slot::Pending),
            None => Err(invalid_request(h)),
        };
    }
    let r = st.p2p.reqs.get(h).ok_or_else(|| invalid_request(h))?;
    Ok(if r.persistent.is_some() && !r.active {
        Slot::Empty
    } else if r.done {
        Slot::Done
    } else {
        Slot::Pending
    })
}

/// How a completion call treats requests.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    /// Wait*: block until done, then free (or deactivate).
    Wait,
    /// Test*: progress once; free (or deactivate) what is done.
    Test,
    /// Request_get_status*: progress once; leave every request as it is.
    Peek,
}

impl How {
    /// Progresses the way this call does; `ready` says when a Wait may stop.
    fn progress(self, st: &mut Held, ready: impl FnMut(&mut Ferrite) -> bool) -> MpiResult<()> {
        match self {
            How::Wait => st.wait_until(ready),
            How::Test | How::Peek => {
                st.progress();
                Ok(())
            }
        }
    }

    /// The status of a completed request, released unless peeking.
    #[inline]
    fn get(self, st: &mut Ferrite, h: &mut MPI_Request) -> (Status, MPI_Comm) {
        if self == How::Peek {
            return st.request_status(*h);
        }
        take(st, h)
    }
}

/// The common completed handles, taken with one lookup and no [`slot`] before it: a
/// completed send's shared handle and a completed MPI_Irecv that needed no request. None
/// (nothing done) for every other handle, valid or not, and for any handle while a
/// transport error waits to be raised (it goes first, with the request kept).
#[inline]
fn take_quick(st: &mut Ferrite, h: &mut MPI_Request) -> Option<(Status, MPI_Comm)> {
    if st.p2p.error.is_some() {
        return None;
    }
    if take_done_send(h) {
        return Some(sent());
    }
    let done = P2p::is_waiter(*h)
        .then(|| st.p2p.take_done_waiter(*h))
        .flatten()?;
    *h = MPI_REQUEST_NULL;
    Some(done)
}

/// Releases a completed send's shared handle ([`DONE_SEND`], no table entry); true if `h`
/// was one. The first case of [`take_quick`] and [`take`], and all a window of sends needs
/// in finish_all (no status moved around).
#[inline]
fn take_done_send(h: &mut MPI_Request) -> bool {
    if *h == DONE_SEND {
        *h = MPI_REQUEST_NULL;
        return true;
    }
    false
}

/// What a completed send reports, and the communicator errors would raise on.
#[inline]
fn sent() -> (Status, MPI_Comm) {
    (Status::default(), MPI_COMM_WORLD)
}

/// Hands back the status of a completed request and frees (or deactivates) it, updating the
/// caller's handle. Returns the status and the communicator errors raise on.
#[inline]
fn take(st: &mut Ferrite, h: &mut MPI_Request) -> (Status, MPI_Comm) {
    if take_done_send(h) {
        return sent();
    }
    // A completed MPI_Irecv that needed no request: one lookup, no general release.
    if let Some(done) = P2p::is_waiter(*h)
        .then(|| st.p2p.take_done_waiter(*h))
        .flatten()
    {
        *h = MPI_REQUEST_NULL;
        return done;
    }
    let (status, comm, kept) = st.release_user(*h);
    if !kept {
        *h = MPI_REQUEST_NULL;
    }
    (status, comm)
}

fn status_error(status: &Status, comm: MPI_Comm) -> MpiResult<()> {
    if status.error == MPI_SUCCESS {
        Ok(())
    } else {
        Err(MpiError::from_code(status.error).on(ErrObj::Comm(comm)))
    }
}

/// Stores status `i` of an array; `with_error` when the call returns MPI_ERR_IN_STATUS
/// (only then is MPI_ERROR set).
///
/// # Safety
/// `statuses` is MPI_STATUSES_IGNORE or has room for index `i`.
unsafe fn store_at(statuses: *mut MPI_Status, i: usize, s: &Status, with_error: bool) {
    if !ignored(statuses) {
        // SAFETY: per the contract, element `i` exists.
        unsafe {
            if with_error {
                store_with_error(statuses.add(i), s)
            } else {
                store(statuses.add(i), s)
            }
        }
    }
}

/// Progress once (Test* calls must move things along without blocking).
fn poke(st: &mut Ferrite) {
    st.progress();
}

/// Runs a completion call `f` over requests whose generalized ones are `greqs`: their
/// query_fn runs before (`grequest::prepare`, outside the lock) and their free_fn after, for
/// those `f` freed. Without generalized requests this is just `f()`.
fn with_greqs(greqs: Vec<MPI_Request>, f: impl FnOnce() -> MpiResult<()>) -> MpiResult<()> {
    if greqs.is_empty() {
        return f();
    }
    grequest::prepare(&greqs)?;
    let r = f();
    r.and(grequest::release(&greqs))
}

/// A Wait* call over generalized requests: polls its Test form (`test` says whether it
/// completed) releasing the lock in between, so that other traffic progresses and the
/// thread that calls MPI_Grequest_complete is never blocked by the waiter.
fn poll(mut test: impl FnMut() -> MpiResult<bool>) -> MpiResult<()> {
    while !test()? {
        std::thread::yield_now();
    }
    Ok(())
}

fn wait(req: *mut MPI_Request, status: *mut MPI_Status) -> MpiResult<()> {
    // SAFETY: `req` is the caller's MPI_Request*.
    let mut h = unsafe { read_request(req) }?;
    let (s, comm) = state::with_held(|st| {
        if let Some(done) = take_quick(st, &mut h) {
            return Ok(done);
        }
        match slot(st, h)? {
            Slot::Empty => return Ok((empty_status(), MPI_COMM_NULL)),
            Slot::Pending => {
                let id = h;
                st.wait_until(|st| st.p2p.is_done(id))?;
                if let Some(done) = take_quick(st, &mut h) {
                    return Ok(done);
                }
            }
            Slot::Done => {}
        }
        let comm = st.request_comm(h);
        st.check_net(comm)?;
        Ok(take(st, &mut h))
    })?;
    // SAFETY: as above.
    unsafe { out(req, h) }?;
    // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
    unsafe { store(status, &s) };
    status_error(&s, comm)
}

mpi_fn! {
    fn MPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status) on ErrObj::NoObject => {
        // SAFETY: `request` is the caller's MPI_Request*.
        let h = unsafe { read_request(request) }?;
        if grequest::among(&[h]).is_empty() {
            return wait(request, status);
        }
        poll(|| {
            let mut flag = 0;
            test(request, &mut flag, status)?;
            Ok(flag != 0)
        })
    }
}

mpi_fn! {
    fn MPI_Test(request: *mut MPI_Request, flag: *mut c_int, status: *mut MPI_Status)
        on ErrObj::NoObject => {
        test(request, flag, status)
    }
}

fn test(request: *mut MPI_Request, flag: *mut c_int, status: *mut MPI_Status) -> MpiResult<()> {
    // SAFETY: `request` is the caller's MPI_Request*.
    let mut h = unsafe { read_request(request) }?;
    with_greqs(grequest::among(&[h]), || {
        let r = state::with(|st| {
            poke(st);
            if let Some(done) = take_quick(st, &mut h) {
                return Ok(Some(done));
            }
            match slot(st, h)? {
                Slot::Empty => Ok(Some((empty_status(), MPI_COMM_NULL))),
                Slot::Pending => Ok(None),
                Slot::Done => Ok(Some(take(st, &mut h))),
            }
        })?;
        // SAFETY: as above.
        unsafe { out(request, h) }?;
        // SAFETY: `flag` is the caller's int*.
        unsafe { out(flag, r.is_some() as c_int) }?;
        if let Some((s, comm)) = r {
            // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
            unsafe { store(status, &s) };
            status_error(&s, comm)?;
        }
        Ok(())
    })
}

/// Completes every request of `reqs` that is done (all of them for Waitall), writing
/// statuses; errors become MPI_ERR_IN_STATUS with each status's MPI_ERROR set.
///
/// # Safety
/// `statuses` is MPI_STATUSES_IGNORE or has room for `reqs.len()` statuses.
unsafe fn finish_all(
    how: How,
    st: &mut Ferrite,
    reqs: &mut [MPI_Request],
    statuses: *mut MPI_Status,
) -> MpiResult<()> {
    let mut failed: Option<(MPI_Comm, c_int)> = None;
    for (i, h) in reqs.iter_mut().enumerate() {
        // take_quick's first two checks, for a completed send.
        if how != How::Peek && st.p2p.error.is_none() && take_done_send(h) {
            // SAFETY: per the contract, room for every index.
            unsafe { store_at(statuses, i, &sent().0, failed.is_some()) };
            continue;
        }
        let quick = if how == How::Peek {
            None
        } else {
            take_quick(st, h)
        };
        let (s, comm) = match quick {
            Some(done) => done,
            None => match slot(st, *h)? {
                Slot::Empty => (empty_status(), MPI_COMM_NULL),
                _ => how.get(st, h),
            },
        };
        if s.error != MPI_SUCCESS && failed.is_none() {
            failed = Some((comm, s.error));
            // The call returns MPI_ERR_IN_STATUS: every status says its error, so those
            // stored before (all successes) get MPI_SUCCESS.
            if !ignored(statuses) {
                for j in 0..i {
                    // SAFETY: per the contract, room for every index.
                    unsafe { (*statuses.add(j)).MPI_ERROR = MPI_SUCCESS };
                }
            }
        }
        // SAFETY: per the contract, room for every index.
        unsafe { store_at(statuses, i, &s, failed.is_some()) };
    }
    match failed {
        None => Ok(()),
        Some((comm, code)) => Err(crate::mpi_err!(
            MPI_ERR_IN_STATUS,
            "a request failed ({}); see the statuses",
            crate::error::class_string(class_of(code))
        )
        .on(ErrObj::Comm(comm))),
    }
}

/// Validates every handle of `reqs`; returns the index of the first one pending
/// (`reqs.len()` if none is).
fn first_pending(st: &Ferrite, reqs: &[MPI_Request]) -> MpiResult<usize> {
    let mut first = reqs.len();
    for (i, &h) in reqs.iter().enumerate() {
        if matches!(slot(st, h)?, Slot::Pending) && first == reqs.len() {
            first = i;
        }
    }
    Ok(first)
}

fn validate(st: &Ferrite, reqs: &[MPI_Request]) -> MpiResult<()> {
    reqs.iter().try_for_each(|&h| slot(st, h).map(|_| ()))
}

fn all_done(st: &Ferrite, reqs: &[MPI_Request]) -> bool {
    reqs.iter()
        .all(|&h| !matches!(slot(st, h), Ok(Slot::Pending)))
}

mpi_fn! {
    fn MPI_Waitall(count: c_int, array_of_requests: *mut MPI_Request, array_of_statuses: *mut MPI_Status)
        on ErrObj::NoObject => {
        // SAFETY: the caller passes `count` requests.
        let mut copy = unsafe { Requests::read(count, array_of_requests) }?;
        if !grequest::among(&copy.handles).is_empty() {
            return poll(|| {
                let mut flag = 0;
                all(count, array_of_requests, &mut flag, array_of_statuses, How::Test)?;
                Ok(flag != 0)
            });
        }
        let reqs = &mut copy.handles;
        let r = state::with_held(|st| {
            // One pass validates every handle and finds the first one pending. A request
            // that is no longer pending stays so during the wait: each check resumes at the
            // first one still pending instead of rescanning the array.
            let mut next = first_pending(st, reqs)?;
            st.wait_until(|st| {
                while next < reqs.len() && !matches!(slot(st, reqs[next]), Ok(Slot::Pending)) {
                    next += 1;
                }
                next == reqs.len()
            })?;
            st.check_net(MPI_COMM_WORLD)?;
            // SAFETY: statuses are ignored or `count` long.
            unsafe { finish_all(How::Wait, st, reqs, array_of_statuses) }
        });
        copy.write_back();
        r
    }
}

/// Testall/Request_get_status_all: completes (or peeks at) all requests only if all are done.
fn all(
    count: c_int,
    array: *mut MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
    how: How,
) -> MpiResult<()> {
    // SAFETY: the caller passes `count` requests.
    let mut copy = unsafe { Requests::read(count, array) }?;
    with_greqs(grequest::among(&copy.handles), || {
        let reqs = &mut copy.handles;
        let r = state::with_held(|st| {
            validate(st, reqs)?;
            how.progress(st, |st| all_done(st, reqs))?;
            let done = all_done(st, reqs);
            // SAFETY: `flag` is the caller's int*.
            unsafe { out(flag, done as c_int) }?;
            if done {
                // SAFETY: statuses are ignored or `count` long.
                unsafe { finish_all(how, st, reqs, statuses) }?;
            }
            Ok(())
        });
        copy.write_back();
        r
    })
}

mpi_fn! {
    fn MPI_Testall(count: c_int, array_of_requests: *mut MPI_Request, flag: *mut c_int,
                   array_of_statuses: *mut MPI_Status) on ErrObj::NoObject => {
        all(count, array_of_requests, flag, array_of_statuses, How::Test)
    }
}

mpi_fn! {
    fn MPI_Request_get_status_all(count: c_int, array_of_requests: *mut MPI_Request,
                                  flag: *mut c_int, array_of_statuses: *mut MPI_Status)
        on ErrObj::NoObject => {
        all(count, array_of_requests, flag, array_of_statuses, How::Peek)
    }
}

mpi_fn! {
    fn MPI_Request_get_status_any(count: c_int, array_of_requests: *mut MPI_Request,
                                  index: *mut c_int, flag: *mut c_int, status: *mut MPI_Status)
        on ErrObj::NoObject => {
        if flag.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null flag pointer"));
        }
        any(count, array_of_requests, index, flag, status, How::Peek)
    }
}

mpi_fn! {
    fn MPI_Request_get_status_some(incount: c_int, array_of_requests: *mut MPI_Request,
                                   outcount: *mut c_int, array_of_indices: *mut c_int,
                                   array_of_statuses: *mut MPI_Status) on ErrObj::NoObject => {
        some(incount, array_of_requests, outcount, array_of_indices, array_of_statuses, How::Peek)
    }
}

/// Index of the first completed active request; None if none; Err(()) if all are empty.
fn first_done(st: &Ferrite, reqs: &[MPI_Request]) -> Result<Option<usize>, ()> {
    let mut any_active = false;
    for (i, &h) in reqs.iter().enumerate() {
        match slot(st, h) {
            Ok(Slot::Done) => return Ok(Some(i)),
            Ok(Slot::Pending) => any_active = true,
            _ => {}
        }
    }
    if any_active {
        Ok(None)
    } else {
        Err(())
    }
}

/// Waitany/Testany/Request_get_status_any.
fn any(
    count: c_int,
    array: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
    how: How,
) -> MpiResult<()> {
    // SAFETY: the caller passes `count` requests.
    let mut copy = unsafe { Requests::read(count, array) }?;
    with_greqs(grequest::among(&copy.handles), || {
        let r = any_inner(&mut copy.handles, index, flag, status, how);
        copy.write_back();
        r
    })
}

fn any_inner(
    reqs: &mut [MPI_Request],
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
    how: How,
) -> MpiResult<()> {
    let r = state::with_held(|st| {
        validate(st, reqs)?;
        how.progress(st, |st| !matches!(first_done(st, reqs), Ok(None)))?;
        match first_done(st, reqs) {
            Err(()) => Ok(Some((MPI_UNDEFINED, empty_status(), MPI_COMM_NULL))),
            Ok(None) => Ok(None),
            Ok(Some(i)) => {
                let (s, comm) = how.get(st, &mut reqs[i]);
                Ok(Some((i as c_int, s, comm)))
            }
        }
    })?;
    if !flag.is_null() {
        // SAFETY: `flag` is the caller's int* (Testany only).
        unsafe { out(flag, r.is_some() as c_int) }?;
    }
    let (i, s, comm) = r.unwrap_or((MPI_UNDEFINED, empty_status(), MPI_COMM_NULL));
    // SAFETY: `index` is the caller's int*.
    unsafe { out(index, i) }?;
    if r.is_some() {
        // No active request: the empty status, MPI_ERROR included (MPI_SUCCESS, as MPICH
        // writes it; mpi4py checks it).
        let with_error = if i == MPI_UNDEFINED {
            store_with_error
        } else {
            store
        };
        // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
        unsafe { with_error(status, &s) };
    }
    status_error(&s, comm)
}

mpi_fn! {
    fn MPI_Waitany(count: c_int, array_of_requests: *mut MPI_Request, index: *mut c_int,
                   status: *mut MPI_Status) on ErrObj::NoObject => {
        // SAFETY: the caller passes `count` requests.
        let copy = unsafe { Requests::read(count, array_of_requests) }?;
        if grequest::among(&copy.handles).is_empty() {
            return any(count, array_of_requests, index, std::ptr::null_mut(), status, How::Wait);
        }
        poll(|| {
            let mut flag = 0;
            any(count, array_of_requests, index, &mut flag, status, How::Test)?;
            Ok(flag != 0)
        })
    }
}

mpi_fn! {
    fn MPI_Testany(count: c_int, array_of_requests: *mut MPI_Request, index: *mut c_int,
                   flag: *mut c_int, status: *mut MPI_Status) on ErrObj::NoObject => {
        if flag.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null flag pointer"));
        }
        any(count, array_of_requests, index, flag, status, How::Test)
    }
}

/// Waitsome/Testsome/Request_get_status_some.
fn some(
    incount: c_int,
    array: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
    how: How,
) -> MpiResult<()> {
    // SAFETY: the caller passes `incount` requests.
    let mut copy = unsafe { Requests::read(incount, array) }?;
    with_greqs(grequest::among(&copy.handles), || {
        let reqs = &mut copy.handles;
        let r = state::with_held(|st| {
            validate(st, reqs)?;
            how.progress(st, |st| !matches!(first_done(st, reqs), Ok(None)))?;
            if first_done(st, reqs).is_err() {
                // SAFETY: `outcount` is the caller's int*.
                return unsafe { out(outcount, MPI_UNDEFINED) };
            }
            let mut done = Vec::new();
            let mut failed = None;
            for (i, h) in reqs.iter_mut().enumerate() {
                if !matches!(slot(st, *h)?, Slot::Done) {
                    continue;
                }
                let (s, comm) = how.get(st, h);
                if s.error != MPI_SUCCESS && failed.is_none() {
                    failed = Some((comm, s.error));
                }
                done.push((i, s));
            }
            let n = done.len();
            for (k, (i, s)) in done.iter().enumerate() {
                if !indices.is_null() {
                    // SAFETY: `indices` has room for `incount` ints and k < incount.
                    unsafe { indices.add(k).write(*i as c_int) };
                }
                // SAFETY: statuses are ignored or have room for `incount`.
                unsafe { store_at(statuses, k, s, failed.is_some()) };
            }
            // SAFETY: `outcount` is the caller's int*.
            unsafe { out(outcount, n as c_int) }?;
            match failed {
                None => Ok(()),
                Some((comm, code)) => Err(crate::mpi_err!(
                    MPI_ERR_IN_STATUS,
                    "a request failed ({}); see the statuses",
                    crate::error::class_string(class_of(code))
                )
                .on(ErrObj::Comm(comm))),
            }
        });
        copy.write_back();
        r
    })
}

mpi_fn! {
    fn MPI_Waitsome(incount: c_int, array_of_requests: *mut MPI_Request, outcount: *mut c_int,
                    array_of_indices: *mut c_int, array_of_statuses: *mut MPI_Status)
        on ErrObj::NoObject => {
        // SAFETY: the caller passes `incount` requests.
        let copy = unsafe { Requests::read(incount, array_of_requests) }?;
        if grequest::among(&copy.handles).is_empty() {
            let how = How::Wait;
            return some(incount, array_of_requests, outcount, array_of_indices, array_of_statuses, how);
        }
        poll(|| {
            let how = How::Test;
            some(incount, array_of_requests, outcount, array_of_indices, array_of_statuses, how)?;
            // SAFETY: `some` wrote the caller's int* (it fails on null).
            Ok(unsafe { outcount.read() } != 0)
        })
    }
}

mpi_fn! {
    fn MPI_Testsome(incount: c_int, array_of_requests: *mut MPI_Request, outcount: *mut c_int,
                    array_of_indices: *mut c_int, array_of_statuses: *mut MPI_Status)
        on ErrObj::NoObject => {
        some(incount, array_of_requests, outcount, array_of_indices, array_of_statuses, How::Test)
    }
}

mpi_fn! {
    fn MPI_Request_free(request: *mut MPI_Request) on ErrObj::NoObject => {
        // SAFETY: `request` is the caller's MPI_Request*.
        let h = unsafe { read_request(request) }?;
        if let Some(r) = grequest::free(h) {
            // SAFETY: as above.
            unsafe { out(request, MPI_REQUEST_NULL) }?;
            return r;
        }
        state::with(|st| {
            if h == DONE_SEND || st.p2p.free_waiter(h) {
                return Ok(()); // complete and owning nothing, or a waiter (MPI_Irecv's)
            }
            st.part_free(h);
            let r = st.p2p.reqs.get_mut(h).ok_or_else(|| invalid_request(h))?;
            // An active request completes in the background and is dropped then.
            let idle = r.done || (r.persistent.is_some() && !r.active);
            if idle {
                st.p2p.reqs.remove(h);
            } else {
                r.freed = true;
            }
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { out(request, MPI_REQUEST_NULL) }
    }
}

mpi_fn! {
    fn MPI_Request_get_status(request: MPI_Request, flag: *mut c_int, status: *mut MPI_Status)
        on ErrObj::NoObject => {
        grequest::prepare(&grequest::among(&[request]))?;
        let r = state::with(|st| {
            poke(st);
            Ok(match slot(st, request)? {
                Slot::Empty => Some(empty_status()),
                Slot::Pending => None,
                Slot::Done => Some(st.request_status(request).0),
            })
        })?;
        // SAFETY: `flag` is the caller's int*.
        unsafe { out(flag, r.is_some() as c_int) }?;
        if let Some(s) = r {
            // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
            unsafe { store(status, &s) };
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Cancel(request: *mut MPI_Request) on ErrObj::NoObject => {
        // SAFETY: `request` is the caller's MPI_Request*.
        let h = unsafe { read_request(request) }?;
        if let Some(r) = grequest::cancel(h) {
            return r;
        }
        state::with(|st| {
            if h == DONE_SEND || st.p2p.cancel_waiter(h) {
                return Ok(()); // complete (nothing to cancel), or a waiter (MPI_Irecv's)
            }
            st.p2p.reqs.get(h).ok_or_else(|| invalid_request(h))?;
            st.p2p.cancel(h);
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Test_cancelled(status: *const MPI_Status, flag: *mut c_int) on ErrObj::NoObject => {
        if ignored(status) {
            return Err(MpiError::new(MPI_ERR_ARG, "MPI_STATUS_IGNORE is not a status to read"));
        }
        // SAFETY: a real status from the caller.
        let s = unsafe { load(status) };
        // SAFETY: `flag` is the caller's int*.
        unsafe { out(flag, s.cancelled as c_int) }
    }
}

mpi_fn! {
    fn MPI_Start(request: *mut MPI_Request) on ErrObj::NoObject => {
        // SAFETY: `request` is the caller's MPI_Request*.
        let h = unsafe { read_request(request) }?;
        state::with(|st| st.start_persistent(h))
    }
}

mpi_fn! {
    fn MPI_Startall(count: c_int, array_of_requests: *mut MPI_Request) on ErrObj::NoObject => {
        // SAFETY: the caller passes `count` requests.
        let reqs = unsafe { Requests::read(count, array_of_requests) }?.handles;
        state::with(|st| reqs.iter().try_for_each(|&h| st.start_persistent(h)))
    }
}

// ----- status queries -----

/// Reads a status the caller passed for querying.
fn read_status(status: *const MPI_Status) -> MpiResult<Status> {
    if ignored(status) {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "MPI_STATUS_IGNORE is not a status to read",
        ));
    }
    // SAFETY: a real status from the caller.
    Ok(unsafe { load(status) })
}

/// Size of `dt` for status arithmetic (any valid type, committed or not).
fn type_size(dt: MPI_Datatype) -> MpiResult<u64> {
    state::with(|st| Ok(st.objects.datatypes.get(dt)?.size() as u64))
}

/// Whole elements of `size` bytes in `bytes`, or MPI_UNDEFINED.
fn whole(bytes: u64, size: u64) -> i64 {
    if size == 0 {
        0
    } else if !bytes.is_multiple_of(size) {
        MPI_UNDEFINED as i64
    } else {
        (bytes / size) as i64
    }
}

mpi_fn! {
    fn MPI_Get_count, fn MPI_Get_count_c(status: *const MPI_Status, datatype: MPI_Datatype,
        count: *mut Count) on ErrObj::NoObject => {
        let s = read_status(status)?;
        let n = whole(s.bytes, type_size(datatype)?);
        let n = Count::try_from(n).unwrap_or(MPI_UNDEFINED.into());
        // SAFETY: `count` is the caller's int*/MPI_Count*.
        unsafe { out(count, n) }
    }
}

/// Basic elements in the bytes a status reports, as the datatype engine counts them
/// (MPI_UNDEFINED when the bytes end inside a basic element).
fn elements(status: *const MPI_Status, dt: MPI_Datatype) -> MpiResult<i64> {
    let s = read_status(status)?;
    let t = state::with(|st| st.objects.datatypes.get(dt))?;
    Ok(t.elements_in(s.bytes)
        .map_or(MPI_UNDEFINED as i64, |n| n as i64))
}

mpi_fn! {
    fn MPI_Get_elements, fn MPI_Get_elements_c, fn MPI_Get_elements_x(status: *const MPI_Status,
        datatype: MPI_Datatype, count: *mut Count) on ErrObj::NoObject => {
        let n = Count::try_from(elements(status, datatype)?).unwrap_or(MPI_UNDEFINED.into());
        // SAFETY: `count` is the caller's int*/MPI_Count*.
        unsafe { out(count, n) }
    }
}

fn set_elements(status: *mut MPI_Status, dt: MPI_Datatype, count: MPI_Count) -> MpiResult<()> {
    let mut s = read_status(status)?;
    if count < 0 {
        return Err(crate::mpi_err!(MPI_ERR_COUNT, "negative count {count}"));
    }
    // The bytes `count` basic elements take in the type's packed form.
    let t = state::with(|st| st.objects.datatypes.get(dt))?;
    s.bytes = t.bytes_for_elements(count as u64);
    // SAFETY: a real, writable status from the caller.
    unsafe { store(status, &s) };
    Ok(())
}

mpi_fn! {
    fn MPI_Status_set_elements(status: *mut MPI_Status, datatype: MPI_Datatype, count: c_int)
        on ErrObj::NoObject => {
        set_elements(status, datatype, MPI_Count::from(count))
    }
}

mpi_fn! {
    fn MPI_Status_set_elements_x(status: *mut MPI_Status, datatype: MPI_Datatype, count: MPI_Count)
        on ErrObj::NoObject => {
        set_elements(status, datatype, count)
    }
}

mpi_fn! {
    fn MPI_Status_set_cancelled(status: *mut MPI_Status, flag: c_int) on ErrObj::NoObject => {
        let mut s = read_status(status)?;
        s.cancelled = flag != 0;
        // SAFETY: a real, writable status from the caller.
        unsafe { store(status, &s) };
        Ok(())
    }
}

/// MPI 4.1 status field accessors.
macro_rules! status_field {
    ($(fn $get:ident, fn $set:ident, $field:ident;)*) => {$(
        mpi_fn! {
            fn $get(status: *const MPI_Status, value: *mut c_int) on ErrObj::NoObject => {
                let s = read_status(status)?;
                // SAFETY: `value` is the caller's int*.
                unsafe { out(value, s.$field) }
            }
        }
        mpi_fn! {
            fn $set(status: *mut MPI_Status, value: c_int) on ErrObj::NoObject => {
                let mut s = read_status(status)?;
                s.$field = value;
                // SAFETY: a real, writable status from the caller.
                unsafe { store(status, &s) };
                Ok(())
            }
        }
    )*};
}

status_field! {
    fn MPI_Status_get_source, fn MPI_Status_set_source, source;
    fn MPI_Status_get_tag, fn MPI_Status_set_tag, tag;
    fn MPI_Status_get_error, fn MPI_Status_set_error, error;
}
