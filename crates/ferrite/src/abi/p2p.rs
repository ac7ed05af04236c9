//! Point-to-point entry points (MPI 4.1 chapter 3): sends in four modes, receives, their
//! nonblocking and persistent forms, Sendrecv(_replace), probes and matched probes, and the
//! Bsend buffer. Checks and protocols live in `p2p::ops` and `p2p::protocol`.

use super::consts::*;
use super::out;
use super::status::store;
use super::types::MPI_Status;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::p2p::bsend::Attached;
use crate::p2p::protocol::proc_null_status;
use crate::p2p::request::{Mode, Ptr, Source, Spec, Target};
use crate::p2p::status::Status;
use crate::state::{self, Ferrite};
use std::ffi::c_void;
use std::os::raw::c_int;

/// Waits for `h`, releases it and returns its status (errors raise on `comm`).
fn wait_status(st: &mut Ferrite, h: MPI_Request, comm: MPI_Comm) -> MpiResult<Status> {
    st.wait_until(|st| st.p2p.is_done(h))?;
    st.check_net(comm)?;
    Ok(st.release(h).0)
}

fn status_result(s: &Status, comm: MPI_Comm) -> MpiResult<()> {
    if s.error == MPI_SUCCESS {
        Ok(())
    } else {
        Err(MpiError::from_code(s.error).on(ErrObj::Comm(comm)))
    }
}

#[allow(clippy::too_many_arguments)]
fn send(
    buf: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    mode: Mode,
    request: Option<*mut MPI_Request>,
) -> MpiResult<()> {
    let h = state::with(|st| {
        let spec = st.send_spec(buf.cast(), count, dt, dest, tag, comm, mode)?;
        let h = st.start_new(comm, &spec)?;
        if request.is_none() {
            let s = wait_status(st, h, comm)?;
            status_result(&s, comm)?;
        }
        Ok(h)
    })?;
    match request {
        // SAFETY: `r` is the caller's MPI_Request*.
        Some(r) => unsafe { out(r, h) },
        None => Ok(()),
    }
}

macro_rules! send_fns {
    ($($blocking:ident, $nonblocking:ident, $init:ident => $mode:expr;)*) => {$(
        mpi_fn! {
            fn $blocking(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int,
                         tag: c_int, comm: MPI_Comm) on ErrObj::Comm(comm) => {
                send(buf, count, datatype, dest, tag, comm, $mode, None)
            }
        }
        mpi_fn! {
            fn $nonblocking(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int,
                            tag: c_int, comm: MPI_Comm, request: *mut MPI_Request)
                on ErrObj::Comm(comm) => {
                send(buf, count, datatype, dest, tag, comm, $mode, Some(request))
            }
        }
        mpi_fn! {
            fn $init(buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int,
                     tag: c_int, comm: MPI_Comm, request: *mut MPI_Request)
                on ErrObj::Comm(comm) => {
                let h = state::with(|st| {
                    let spec = st.send_spec(buf.cast(), count, datatype, dest, tag, comm, $mode)?;
                    Ok(st.persistent(comm, spec))
                })?;
                // SAFETY: `request` is the caller's MPI_Request*.
                unsafe { out(request, h) }
            }
        }
    )*};
}

send_fns! {
    MPI_Send, MPI_Isend, MPI_Send_init => Mode::Standard;
    MPI_Ssend, MPI_Issend, MPI_Ssend_init => Mode::Sync;
    MPI_Rsend, MPI_Irsend, MPI_Rsend_init => Mode::Ready;
    MPI_Bsend, MPI_Ibsend, MPI_Bsend_init => Mode::Buffered;
}

mpi_fn! {
    fn MPI_Recv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int,
                comm: MPI_Comm, status: *mut MPI_Status) on ErrObj::Comm(comm) => {
        let s = state::with(|st| {
            let spec = st.recv_spec(buf.cast(), count, datatype, source, tag, comm)?;
            let h = st.start_new(comm, &spec)?;
            wait_status(st, h, comm)
        })?;
        // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
        unsafe { store(status, &s) };
        status_result(&s, comm)
    }
}

mpi_fn! {
    fn MPI_Irecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int,
                 comm: MPI_Comm, request: *mut MPI_Request) on ErrObj::Comm(comm) => {
        let h = state::with(|st| {
            let spec = st.recv_spec(buf.cast(), count, datatype, source, tag, comm)?;
            st.start_new(comm, &spec)
        })?;
        // SAFETY: `request` is the caller's MPI_Request*.
        unsafe { out(request, h) }
    }
}

mpi_fn! {
    fn MPI_Recv_init(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int,
                     tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) on ErrObj::Comm(comm) => {
        let h = state::with(|st| {
            let spec = st.recv_spec(buf.cast(), count, datatype, source, tag, comm)?;
            Ok(st.persistent(comm, spec))
        })?;
        // SAFETY: `request` is the caller's MPI_Request*.
        unsafe { out(request, h) }
    }
}

/// Receive first, then send, then wait for both: no deadlock with a matching Sendrecv.
fn sendrecv(st: &mut Ferrite, send: Spec, recv: Spec, comm: MPI_Comm) -> MpiResult<Status> {
    let r = st.start_new(comm, &recv)?;
    let s = match st.start_new(comm, &send) {
        Ok(s) => s,
        Err(e) => {
            st.p2p.cancel(r);
            st.p2p.reqs.remove(r);
            return Err(e);
        }
    };
    st.wait_until(|st| st.p2p.is_done(r) && st.p2p.is_done(s))?;
    st.check_net(comm)?;
    let (ss, _, _) = st.release(s);
    status_result(&ss, comm)?;
    Ok(st.release(r).0)
}

mpi_fn! {
    fn MPI_Sendrecv(sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, dest: c_int,
                    sendtag: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype,
                    source: c_int, recvtag: c_int, comm: MPI_Comm, status: *mut MPI_Status)
        on ErrObj::Comm(comm) => {
        let s = state::with(|st| {
            let send = st.send_spec(sendbuf.cast(), sendcount, sendtype, dest, sendtag, comm, Mode::Standard)?;
            let recv = st.recv_spec(recvbuf.cast(), recvcount, recvtype, source, recvtag, comm)?;
            sendrecv(st, send, recv, comm)
        })?;
        // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
        unsafe { store(status, &s) };
        status_result(&s, comm)
    }
}

mpi_fn! {
    fn MPI_Sendrecv_replace(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, dest: c_int,
                            sendtag: c_int, source: c_int, recvtag: c_int, comm: MPI_Comm,
                            status: *mut MPI_Status) on ErrObj::Comm(comm) => {
        let s = state::with(|st| {
            let mut send = st.send_spec(buf.cast(), count, datatype, dest, sendtag, comm, Mode::Standard)?;
            let recv = st.recv_spec(buf.cast(), count, datatype, source, recvtag, comm)?;
            // The outgoing data is packed first: the receive overwrites the buffer.
            if let Spec::Send { src, .. } = &mut send {
                if let Source::User { buf, count, dt } = src {
                    let mut v = Vec::new();
                    // SAFETY: `buf` holds `count` elements of `dt` (checked arguments of
                    // the caller's buffer); pack only reads it.
                    unsafe { dt.pack(buf.0, *count, &mut v) };
                    *src = Source::Owned(v.into());
                }
            }
            sendrecv(st, send, recv, comm)
        })?;
        // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
        unsafe { store(status, &s) };
        status_result(&s, comm)
    }
}

// ----- probes -----

mpi_fn! {
    fn MPI_Iprobe(source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int,
                  status: *mut MPI_Status) on ErrObj::Comm(comm) => {
        let found = state::with(|st| {
            let (ctx, src, tag) = st.probe_args(source, tag, comm)?;
            if src == MPI_PROC_NULL {
                return Ok(Some(proc_null_status()));
            }
            st.progress();
            Ok(st.p2p.probe(ctx, src, tag))
        })?;
        // SAFETY: `flag` is the caller's int*.
        unsafe { out(flag, found.is_some() as c_int) }?;
        if let Some(s) = found {
            // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
            unsafe { store(status, &s) };
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Probe(source: c_int, tag: c_int, comm: MPI_Comm, status: *mut MPI_Status)
        on ErrObj::Comm(comm) => {
        let s = state::with(|st| {
            let (ctx, src, tag) = st.probe_args(source, tag, comm)?;
            if src == MPI_PROC_NULL {
                return Ok(proc_null_status());
            }
            st.wait_until(|st| st.p2p.probe(ctx, src, tag).is_some())?;
            Ok(st.p2p.probe(ctx, src, tag).unwrap_or_default())
        })?;
        // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
        unsafe { store(status, &s) };
        Ok(())
    }
}

fn mprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    block: bool,
) -> MpiResult<Option<(MPI_Message, Status)>> {
    state::with(|st| {
        let (ctx, src, tag) = st.probe_args(source, tag, comm)?;
        if src == MPI_PROC_NULL {
            return Ok(Some((MPI_MESSAGE_NO_PROC, proc_null_status())));
        }
        if block {
            st.wait_until(|st| st.p2p.probe(ctx, src, tag).is_some())?;
        } else {
            st.progress();
        }
        Ok(st.p2p.mprobe(comm, ctx, src, tag))
    })
}

mpi_fn! {
    fn MPI_Mprobe(source: c_int, tag: c_int, comm: MPI_Comm, message: *mut MPI_Message,
                  status: *mut MPI_Status) on ErrObj::Comm(comm) => {
        let (m, s) = mprobe(source, tag, comm, true)?.unwrap_or((MPI_MESSAGE_NULL, Status::default()));
        // SAFETY: `message` is the caller's MPI_Message*.
        unsafe { out(message, m) }?;
        // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
        unsafe { store(status, &s) };
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Improbe(source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int,
                   message: *mut MPI_Message, status: *mut MPI_Status) on ErrObj::Comm(comm) => {
        let found = mprobe(source, tag, comm, false)?;
        // SAFETY: `flag` is the caller's int*.
        unsafe { out(flag, found.is_some() as c_int) }?;
        if let Some((m, s)) = found {
            // SAFETY: `message` is the caller's MPI_Message*.
            unsafe { out(message, m) }?;
            // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
            unsafe { store(status, &s) };
        }
        Ok(())
    }
}

/// Turns `*message` into a receive request; MPI_MESSAGE_NO_PROC gives None.
fn mrecv_start(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
) -> MpiResult<Option<(MPI_Request, MPI_Comm)>> {
    if message.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "null message pointer"));
    }
    // SAFETY: non-null MPI_Message* from the caller.
    let m = unsafe { message.read() };
    // SAFETY: as above; the message is consumed either way.
    unsafe { message.write(MPI_MESSAGE_NULL) };
    if m == MPI_MESSAGE_NO_PROC {
        return Ok(None);
    }
    if m == MPI_MESSAGE_NULL {
        return Err(MpiError::new(
            MPI_ERR_REQUEST,
            "MPI_MESSAGE_NULL is not a message",
        ));
    }
    state::with(|st| {
        let comm = st.p2p.reqs.get(m).map_or(MPI_COMM_WORLD, |r| r.comm);
        if count < 0 {
            return Err(crate::mpi_err!(MPI_ERR_COUNT, "negative count {count}"));
        }
        let dt = st.comm_datatype(datatype)?;
        let target = Target::User {
            buf: Ptr(buf.cast()),
            count: count as usize,
            dt,
        };
        let h = st.p2p.mrecv(m, target)?;
        st.p2p.flush(&mut st.net);
        Ok(Some((h, comm)))
    })
}

mpi_fn! {
    fn MPI_Mrecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, message: *mut MPI_Message,
                 status: *mut MPI_Status) on ErrObj::NoObject => {
        let (s, comm) = match mrecv_start(buf, count, datatype, message)? {
            None => (proc_null_status(), MPI_COMM_NULL),
            Some((h, comm)) => (state::with(|st| wait_status(st, h, comm))?, comm),
        };
        // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
        unsafe { store(status, &s) };
        status_result(&s, comm)
    }
}

mpi_fn! {
    fn MPI_Imrecv(buf: *mut c_void, count: c_int, datatype: MPI_Datatype, message: *mut MPI_Message,
                  request: *mut MPI_Request) on ErrObj::NoObject => {
        let h = match mrecv_start(buf, count, datatype, message)? {
            Some((h, _)) => h,
            // A receive from MPI_PROC_NULL: a request that is already complete.
            None => state::with(|st| {
                let spec = Spec::Recv { ctx: 0, src: MPI_PROC_NULL, tag: MPI_ANY_TAG, target: Target::Owned(Vec::new()) };
                st.start_new(MPI_COMM_WORLD, &spec)
            })?,
        };
        // SAFETY: `request` is the caller's MPI_Request*.
        unsafe { out(request, h) }
    }
}

// ----- the Bsend buffer -----

mpi_fn! {
    fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) on ErrObj::NoObject => {
        if size < 0 {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "negative buffer size {size}"));
        }
        if buffer.is_null() && size > 0 {
            return Err(MpiError::new(MPI_ERR_BUFFER, "null buffer"));
        }
        state::with(|st| {
            if st.p2p.attached.is_some() {
                return Err(MpiError::new(
                    MPI_ERR_BUFFER,
                    "a buffer is already attached (detach it first)",
                ));
            }
            st.p2p.attached = Some(Attached::new(Ptr(buffer.cast()), size as usize));
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) on ErrObj::NoObject => {
        let (base, len) = state::with(|st| {
            // Detach blocks until every buffered message has left the buffer.
            st.wait_until(|st| !st.p2p.bsend_busy())?;
            Ok(st
                .p2p
                .attached
                .take()
                .map_or((std::ptr::null_mut(), 0), |a| (a.base.0, a.size as c_int)))
        })?;
        // SAFETY: `buffer_addr` is, per the standard, the caller's `void **`.
        unsafe { out(buffer_addr.cast::<*mut c_void>(), base.cast()) }?;
        // SAFETY: `size` is the caller's int*.
        unsafe { out(size, len) }
    }
}

#[cfg(test)]
#[path = "p2p_tests.rs"]
mod tests;
