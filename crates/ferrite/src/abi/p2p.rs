//! Point-to-point entry points (MPI 4.1 chapter 3): sends in four modes, receives, their
//! nonblocking and persistent forms, Sendrecv(_replace), probes and matched probes, and the
//! Bsend buffer. Checks and protocols live in `p2p::ops` and `p2p::protocol`.

use super::consts::*;
use super::out;
use super::status::store;
use super::types::MPI_Status;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::lock_order;
use crate::p2p::bsend::{Attached, OwnBuffer, OwnBuffers, Owner, Placed};
use crate::p2p::protocol::proc_null_status;
use crate::p2p::request::{Mode, Ptr, Source, Spec, Target};
use crate::p2p::status::Status;
use crate::state::{self, Ferrite, Held};
use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Waits for `h`, releases it and returns its status (errors raise on `comm`).
fn wait_status(st: &mut Held, h: MPI_Request, comm: MPI_Comm) -> MpiResult<Status> {
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

/// A count argument of either width (int or MPI_Count) as i64.
fn cnt(c: impl Into<i64>) -> i64 {
    c.into()
}

/// A send of any mode, blocking (`request` None) or not. Inlined into each entry point, so
/// that the mode is known and a standard or ready send that goes out eagerly at once pays
/// only for its own path; everything else is [`send_general`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn send(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    mode: Mode,
    request: Option<*mut MPI_Request>,
) -> MpiResult<()> {
    let h = state::with_held(|st| {
        // Standard and ready sends that go out eagerly at once need no protocol state: a
        // blocking one is done, a nonblocking one gets a request that is already complete.
        if matches!(mode, Mode::Standard | Mode::Ready) {
            let f: &mut Ferrite = st;
            if f.send_eager_now(buf.cast(), count, dt, dest, tag, comm)? {
                return Ok(match request {
                    Some(_) => f.p2p.new_done_send(comm),
                    None => 0,
                });
            }
        }
        send_general(st, buf, count, dt, dest, tag, comm, mode, request.is_some())
    })?;
    match request {
        // SAFETY: `r` is the caller's MPI_Request*.
        Some(r) => unsafe { out(r, h) },
        None => Ok(()),
    }
}

/// A send that needs protocol state (or its checks' errors): buffered sends, and sends
/// that could not go out at once. Returns the request (0 for a blocking send, done).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn send_general(
    st: &mut Held,
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    mode: Mode,
    nonblocking: bool,
) -> MpiResult<MPI_Request> {
    if mode == Mode::Buffered {
        if let Some(h) = bsend_own(st, buf, count, dt, dest, tag, comm, nonblocking)? {
            return Ok(h);
        }
    }
    let spec = st.send_spec(buf.cast(), count, dt, dest, tag, comm, mode)?;
    if let Spec::Send {
        mode: Mode::Buffered,
        src: Source::User { count, dt, .. },
        ..
    } = &spec
    {
        st.bsend_room(dt.size() * count)?;
    }
    let h = st.start_new(comm, &spec)?;
    if !nonblocking {
        let s = wait_status(st, h, comm)?;
        status_result(&s, comm)?;
    }
    Ok(h)
}

/// Blocking, nonblocking and persistent forms of one send mode, for one count type.
macro_rules! send_fns {
    ($(fn $blocking:ident, fn $nonblocking:ident, fn $init:ident, $count:ty => $mode:expr;)*) => {$(
        mpi_fn! {
            fn $blocking(buf: *const c_void, count: $count, datatype: MPI_Datatype, dest: c_int,
                         tag: c_int, comm: MPI_Comm) on ErrObj::Comm(comm) => {
                send(buf, cnt(count), datatype, dest, tag, comm, $mode, None)
            }
        }
        mpi_fn! {
            fn $nonblocking(buf: *const c_void, count: $count, datatype: MPI_Datatype, dest: c_int,
                            tag: c_int, comm: MPI_Comm, request: *mut MPI_Request)
                on ErrObj::Comm(comm) => {
                send(buf, cnt(count), datatype, dest, tag, comm, $mode, Some(request))
            }
        }
        mpi_fn! {
            fn $init(buf: *const c_void, count: $count, datatype: MPI_Datatype, dest: c_int,
                     tag: c_int, comm: MPI_Comm, request: *mut MPI_Request)
                on ErrObj::Comm(comm) => {
                let h = state::with(|st| {
                    let spec = st.send_spec(buf.cast(), cnt(count), datatype, dest, tag, comm, $mode)?;
                    Ok(st.persistent(comm, spec))
                })?;
                // SAFETY: `request` is the caller's MPI_Request*.
                unsafe { out(request, h) }
            }
        }
    )*};
}

send_fns! {
    fn MPI_Send, fn MPI_Isend, fn MPI_Send_init, c_int => Mode::Standard;
    fn MPI_Ssend, fn MPI_Issend, fn MPI_Ssend_init, c_int => Mode::Sync;
    fn MPI_Rsend, fn MPI_Irsend, fn MPI_Rsend_init, c_int => Mode::Ready;
    fn MPI_Bsend, fn MPI_Ibsend, fn MPI_Bsend_init, c_int => Mode::Buffered;
    fn MPI_Send_c, fn MPI_Isend_c, fn MPI_Send_init_c, MPI_Count => Mode::Standard;
    fn MPI_Ssend_c, fn MPI_Issend_c, fn MPI_Ssend_init_c, MPI_Count => Mode::Sync;
    fn MPI_Rsend_c, fn MPI_Irsend_c, fn MPI_Rsend_init_c, MPI_Count => Mode::Ready;
    fn MPI_Bsend_c, fn MPI_Ibsend_c, fn MPI_Bsend_init_c, MPI_Count => Mode::Buffered;
}

/// The send half of Sendrecv_replace: the data is packed first, since the receive
/// overwrites the buffer.
fn packed(mut send: Spec) -> Spec {
    if let Spec::Send { src, .. } = &mut send {
        if let Source::User { buf, count, dt } = src {
            let mut v = Vec::new();
            // SAFETY: `buf` holds `count` elements of `dt` (the caller's checked buffer);
            // pack only reads it.
            unsafe { dt.pack(buf.0, *count, &mut v) };
            *src = Source::Owned(v.into());
        }
    }
    send
}

/// Receive, matched receive and send-receive calls for one count type.
macro_rules! recv_fns {
    (fn $recv:ident, fn $irecv:ident, fn $init:ident, fn $mrecv:ident, fn $imrecv:ident,
     fn $sr:ident, fn $isr:ident, fn $srr:ident, fn $isrr:ident, $count:ty) => {
        mpi_fn! {
            fn $recv(buf: *mut c_void, count: $count, datatype: MPI_Datatype, source: c_int,
                     tag: c_int, comm: MPI_Comm, status: *mut MPI_Status) on ErrObj::Comm(comm) => {
                let s = state::with_held(|st| {
                    st.recv_blocking(buf.cast(), cnt(count), datatype, source, tag, comm)
                })?;
                // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
                unsafe { store(status, &s) };
                status_result(&s, comm)
            }
        }

        mpi_fn! {
            fn $irecv(buf: *mut c_void, count: $count, datatype: MPI_Datatype, source: c_int,
                      tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) on ErrObj::Comm(comm) => {
                let h = state::with(|st| {
                    st.irecv(buf.cast(), cnt(count), datatype, source, tag, comm)
                })?;
                // SAFETY: `request` is the caller's MPI_Request*.
                unsafe { out(request, h) }
            }
        }

        mpi_fn! {
            fn $init(buf: *mut c_void, count: $count, datatype: MPI_Datatype, source: c_int,
                     tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) on ErrObj::Comm(comm) => {
                let h = state::with(|st| {
                    let spec = st.recv_spec(buf.cast(), cnt(count), datatype, source, tag, comm)?;
                    Ok(st.persistent(comm, spec))
                })?;
                // SAFETY: `request` is the caller's MPI_Request*.
                unsafe { out(request, h) }
            }
        }

        mpi_fn! {
            fn $mrecv(buf: *mut c_void, count: $count, datatype: MPI_Datatype,
                      message: *mut MPI_Message, status: *mut MPI_Status) on ErrObj::NoObject => {
                let (s, comm) = match mrecv_start(buf, cnt(count), datatype, message)? {
                    None => (proc_null_status(), MPI_COMM_NULL),
                    Some((h, comm)) => (state::with_held(|st| wait_status(st, h, comm))?, comm),
                };
                // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
                unsafe { store(status, &s) };
                status_result(&s, comm)
            }
        }

        mpi_fn! {
            fn $imrecv(buf: *mut c_void, count: $count, datatype: MPI_Datatype,
                       message: *mut MPI_Message, request: *mut MPI_Request) on ErrObj::NoObject => {
                let h = match mrecv_start(buf, cnt(count), datatype, message)? {
                    Some((h, _)) => h,
                    // A receive from MPI_PROC_NULL: a request that is already complete.
                    None => state::with(|st| {
                        let spec = Spec::Recv {
                            ctx: 0,
                            src: MPI_PROC_NULL,
                            tag: MPI_ANY_TAG,
                            target: Target::Owned(Vec::new()),
                        };
                        st.start_new(MPI_COMM_WORLD, &spec)
                    })?,
                };
                // SAFETY: `request` is the caller's MPI_Request*.
                unsafe { out(request, h) }
            }
        }

        mpi_fn! {
            fn $sr(sendbuf: *const c_void, sendcount: $count, sendtype: MPI_Datatype, dest: c_int,
                   sendtag: c_int, recvbuf: *mut c_void, recvcount: $count, recvtype: MPI_Datatype,
                   source: c_int, recvtag: c_int, comm: MPI_Comm, status: *mut MPI_Status)
                on ErrObj::Comm(comm) => {
                let s = state::with_held(|st| {
                    let send = st.send_spec(sendbuf.cast(), cnt(sendcount), sendtype, dest, sendtag,
                                            comm, Mode::Standard)?;
                    let recv = st.recv_spec(recvbuf.cast(), cnt(recvcount), recvtype, source,
                                            recvtag, comm)?;
                    let h = st.start_pair(comm, &send, &recv)?;
                    wait_status(st, h, comm)
                })?;
                // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
                unsafe { store(status, &s) };
                status_result(&s, comm)
            }
        }

        mpi_fn! {
            fn $isr(sendbuf: *const c_void, sendcount: $count, sendtype: MPI_Datatype, dest: c_int,
                    sendtag: c_int, recvbuf: *mut c_void, recvcount: $count, recvtype: MPI_Datatype,
                    source: c_int, recvtag: c_int, comm: MPI_Comm, request: *mut MPI_Request)
                on ErrObj::Comm(comm) => {
                let h = state::with(|st| {
                    let send = st.send_spec(sendbuf.cast(), cnt(sendcount), sendtype, dest, sendtag,
                                            comm, Mode::Standard)?;
                    let recv = st.recv_spec(recvbuf.cast(), cnt(recvcount), recvtype, source,
                                            recvtag, comm)?;
                    st.start_pair(comm, &send, &recv)
                })?;
                // SAFETY: `request` is the caller's MPI_Request*.
                unsafe { out(request, h) }
            }
        }

        mpi_fn! {
            fn $srr(buf: *mut c_void, count: $count, datatype: MPI_Datatype, dest: c_int,
                    sendtag: c_int, source: c_int, recvtag: c_int, comm: MPI_Comm,
                    status: *mut MPI_Status) on ErrObj::Comm(comm) => {
                let s = state::with_held(|st| {
                    let send = st.send_spec(buf.cast(), cnt(count), datatype, dest, sendtag, comm,
                                            Mode::Standard)?;
                    let recv = st.recv_spec(buf.cast(), cnt(count), datatype, source, recvtag, comm)?;
                    let h = st.start_pair(comm, &packed(send), &recv)?;
                    wait_status(st, h, comm)
                })?;
                // SAFETY: `status` is the caller's MPI_Status* or MPI_STATUS_IGNORE.
                unsafe { store(status, &s) };
                status_result(&s, comm)
            }
        }

        mpi_fn! {
            fn $isrr(buf: *mut c_void, count: $count, datatype: MPI_Datatype, dest: c_int,
                     sendtag: c_int, source: c_int, recvtag: c_int, comm: MPI_Comm,
                     request: *mut MPI_Request) on ErrObj::Comm(comm) => {
                let h = state::with(|st| {
                    let send = st.send_spec(buf.cast(), cnt(count), datatype, dest, sendtag, comm,
                                            Mode::Standard)?;
                    let recv = st.recv_spec(buf.cast(), cnt(count), datatype, source, recvtag, comm)?;
                    st.start_pair(comm, &packed(send), &recv)
                })?;
                // SAFETY: `request` is the caller's MPI_Request*.
                unsafe { out(request, h) }
            }
        }
    };
}

recv_fns!(fn MPI_Recv, fn MPI_Irecv, fn MPI_Recv_init, fn MPI_Mrecv, fn MPI_Imrecv,
          fn MPI_Sendrecv, fn MPI_Isendrecv, fn MPI_Sendrecv_replace, fn MPI_Isendrecv_replace,
          c_int);
recv_fns!(fn MPI_Recv_c, fn MPI_Irecv_c, fn MPI_Recv_init_c, fn MPI_Mrecv_c, fn MPI_Imrecv_c,
          fn MPI_Sendrecv_c, fn MPI_Isendrecv_c, fn MPI_Sendrecv_replace_c,
          fn MPI_Isendrecv_replace_c, MPI_Count);

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
        let s = state::with_held(|st| {
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
    state::with_held(|st| {
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
    count: i64,
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
        let st: &mut Ferrite = st;
        st.p2p.flush(&mut st.net);
        Ok(Some((h, comm)))
    })
}

// ----- the Bsend buffer -----

/// Communicator buffers and the automatic process buffer (`p2p::bsend`). Only touched with
/// the state lock held (so never contended); kept here because the send protocol, which
/// owns `P2p::attached`, does not know them.
static OWN: Mutex<OwnBuffers> = Mutex::new(OwnBuffers::new());

fn own() -> lock_order::Tracked<OwnBuffers> {
    lock_order::lock(&OWN, lock_order::BSEND)
}

/// Releases the internal sends of own buffers that have completed, freeing their blocks.
fn reap(st: &mut Ferrite) {
    for h in own().reap(|h| st.p2p.is_done(h)) {
        st.release(h);
    }
}

/// A buffered send on `comm` through the communicator's buffer or the automatic process
/// buffer (MPI 4.1, 3.6): packs the data into the buffer and sends it from there in
/// standard mode. None when the process's user buffer (the send protocol's) is the one.
/// Returns the user's request: already complete, as a buffered send is local.
#[allow(clippy::too_many_arguments)]
fn bsend_own(
    st: &mut Held,
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    nonblocking: bool,
) -> MpiResult<Option<MPI_Request>> {
    let Some(owner) = own().for_send(comm) else {
        return Ok(None);
    };
    let mut spec = st.send_spec(buf.cast(), count, dt, dest, tag, comm, Mode::Standard)?;
    let Spec::Send { src, .. } = &mut spec else {
        return Ok(None);
    };
    let mut data = Vec::new();
    if let Source::User { buf, count, dt } = src {
        // SAFETY: send_spec checked that `buf` holds `count` elements of `dt`; pack only
        // reads them.
        unsafe { dt.pack(buf.0, *count, &mut data) };
    }
    reap(st);
    let placed = loop {
        let size = match own().place(owner, data.len()) {
            Ok(placed) => break placed,
            Err(size) => size,
        };
        // No room: as for the process's user buffer (`Held::bsend_room`), wait while
        // earlier buffered sends through this buffer keep completing and freeing blocks;
        // give up after a second in which none did.
        let held = own().sends(owner);
        let give_up = Instant::now() + Duration::from_secs(1);
        if held > 0 {
            st.wait_until(|st| {
                reap(st);
                own().sends(owner) < held || Instant::now() >= give_up
            })?;
        }
        if held == 0 || own().sends(owner) >= held {
            return Err(crate::mpi_err!(
                MPI_ERR_BUFFER,
                "the buffer attached to {} ({size} bytes) has no room for a message of {} \
                 bytes plus MPI_BSEND_OVERHEAD ({MPI_BSEND_OVERHEAD})",
                if owner.is_some() {
                    "the communicator"
                } else {
                    "the process"
                },
                data.len()
            ));
        }
    };
    let block = match placed {
        Placed::Copy => {
            *src = Source::Owned(data.into());
            None
        }
        Placed::Block { ptr, off } => {
            // SAFETY: the block is `data.len()` bytes of the attached buffer reserved for
            // this send alone (alloc checked the bounds).
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.0, data.len()) };
            *src = Source::User {
                buf: ptr,
                count: data.len(),
                dt: st.comm_datatype(MPI_BYTE)?,
            };
            Some(off)
        }
    };
    let h = match st.start_new(comm, &spec) {
        Ok(h) => h,
        Err(e) => {
            if let Some(off) = block {
                own().unplace(owner, off);
            }
            return Err(e);
        }
    };
    own().track(owner, h, block);
    reap(st);
    Ok(Some(if nonblocking {
        st.p2p.new_done_send(comm)
    } else {
        0
    }))
}

/// True when every buffered message of `owner` (None: the process, both its user buffer
/// and its automatic one) has left its buffer.
pub fn flushed(st: &mut Ferrite, owner: Owner) -> bool {
    reap(st);
    !own().busy(owner) && (owner.is_some() || !st.p2p.bsend_busy())
}

fn check_comm(st: &mut Ferrite, comm: MPI_Comm) -> MpiResult<()> {
    st.objects.comms.get(comm).map(|_| ())
}

/// MPI_Comm_attach_buffer(_c).
fn comm_attach(comm: MPI_Comm, buffer: *mut c_void, size: i64) -> MpiResult<()> {
    let buf = own_buffer(buffer, size)?;
    state::with(|st| {
        check_comm(st, comm)?;
        if !own().attach(Some(comm), buf) {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                "the communicator already has a buffer attached (detach it first)",
            ));
        }
        Ok(())
    })
}

/// A buffer argument of an attach call, checked.
fn own_buffer(buffer: *mut c_void, size: i64) -> MpiResult<OwnBuffer> {
    if buffer as usize == MPI_BUFFER_AUTOMATIC {
        return Ok(OwnBuffer::Automatic);
    }
    if size < 0 {
        return Err(crate::mpi_err!(MPI_ERR_ARG, "negative buffer size {size}"));
    }
    if buffer.is_null() && size > 0 {
        return Err(MpiError::new(MPI_ERR_BUFFER, "null buffer"));
    }
    Ok(OwnBuffer::Region(Attached::new(
        Ptr(buffer.cast()),
        size as usize,
    )))
}

/// Detaches `owner`'s own buffer after flushing it: (address, size); MPI_BUFFER_AUTOMATIC
/// and 0 for the automatic buffer. None when it has none.
fn own_detach(st: &mut Held, owner: Owner) -> MpiResult<Option<(*mut c_void, usize)>> {
    if !own().attached(owner) {
        return Ok(None);
    }
    st.wait_until(|st| {
        reap(st);
        !own().busy(owner)
    })?;
    Ok(own().detach(owner).map(|b| match b {
        OwnBuffer::Region(a) => (a.base.0.cast(), a.size),
        OwnBuffer::Automatic => (std::ptr::without_provenance_mut(MPI_BUFFER_AUTOMATIC), 0),
    }))
}

/// For MPI_Comm_free/MPI_Comm_disconnect (to be called from `abi/comm.rs`): waits until
/// the buffer attached to `comm` is flushed and drops it, so that a communicator that later
/// gets the same handle does not inherit it.
pub fn comm_buffer_freed(st: &mut Held, comm: MPI_Comm) -> MpiResult<()> {
    own_detach(st, Some(comm)).map(|_| ())
}

/// Writes a detached buffer's address (through the caller's `void **`).
fn out_addr(buffer_addr: *mut c_void, base: *mut c_void) -> MpiResult<()> {
    // SAFETY: `buffer_addr` is, per the standard, the caller's `void **`.
    unsafe { out(buffer_addr.cast::<*mut c_void>(), base) }
}

fn comm_detach(comm: MPI_Comm, buffer_addr: *mut c_void) -> MpiResult<usize> {
    let (base, len) = state::with_held(|st| {
        check_comm(st, comm)?;
        own_detach(st, Some(comm))?
            .ok_or_else(|| MpiError::new(MPI_ERR_BUFFER, "the communicator has no buffer attached"))
    })?;
    out_addr(buffer_addr, base)?;
    Ok(len)
}

mpi_fn! {
    fn MPI_Comm_attach_buffer, fn MPI_Comm_attach_buffer_c(comm: MPI_Comm, buffer: *mut c_void, size: Count)
        on ErrObj::Comm(comm) => {
        comm_attach(comm, buffer, cnt(size))
    }
}

mpi_fn! {
    fn MPI_Comm_detach_buffer, fn MPI_Comm_detach_buffer_c(comm: MPI_Comm,
        buffer_addr: *mut c_void, size: *mut Count) on ErrObj::Comm(comm) => {
        let n = comm_detach(comm, buffer_addr)?;
        // SAFETY: `size` is the caller's int*/MPI_Count* (an int form attached an int size).
        unsafe { out(size, n as Count) }
    }
}

mpi_fn! {
    fn MPI_Comm_flush_buffer(comm: MPI_Comm) on ErrObj::Comm(comm) => {
        state::with_held(|st| {
            check_comm(st, comm)?;
            st.wait_until(|st| flushed(st, Some(comm)))
        })
    }
}

mpi_fn! {
    fn MPI_Comm_iflush_buffer(comm: MPI_Comm, request: *mut MPI_Request) on ErrObj::Comm(comm) => {
        state::with(|st| check_comm(st, comm))?;
        super::grequest::start_until(comm, |st, comm| flushed(st, Some(comm)), request)
    }
}

mpi_fn! {
    fn MPI_Buffer_iflush(request: *mut MPI_Request) on ErrObj::NoObject => {
        super::grequest::start_until(MPI_COMM_WORLD, |st, _| flushed(st, None), request)
    }
}

fn buffer_attach(buffer: *mut c_void, size: i64) -> MpiResult<()> {
    let buf = own_buffer(buffer, size)?;
    state::with_held(|st| {
        if st.p2p.attached.is_some() || own().attached(None) {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                "a buffer is already attached (detach it first)",
            ));
        }
        match buf {
            OwnBuffer::Region(a) => st.p2p.attached = Some(a),
            // The send protocol knows only user memory: the automatic buffer is ours.
            OwnBuffer::Automatic => {
                own().attach(None, buf);
            }
        }
        Ok(())
    })
}

/// Detaches the buffer once every buffered message has left it: (address, size).
fn buffer_detach(buffer_addr: *mut c_void) -> MpiResult<usize> {
    let (base, len) = state::with_held(|st| {
        if let Some(d) = own_detach(st, None)? {
            return Ok(d);
        }
        st.wait_until(|st| !st.p2p.bsend_busy())?;
        Ok(st
            .p2p
            .attached
            .take()
            .map_or((std::ptr::null_mut(), 0), |a| (a.base.0.cast(), a.size)))
    })?;
    out_addr(buffer_addr, base)?;
    Ok(len)
}

mpi_fn! {
    fn MPI_Buffer_attach, fn MPI_Buffer_attach_c(buffer: *mut c_void, size: Count) on ErrObj::NoObject => {
        buffer_attach(buffer, cnt(size))
    }
}

mpi_fn! {
    fn MPI_Buffer_detach, fn MPI_Buffer_detach_c(buffer_addr: *mut c_void, size: *mut Count)
        on ErrObj::NoObject => {
        let n = buffer_detach(buffer_addr)?;
        // SAFETY: `size` is the caller's int*/MPI_Count* (an int form attached an int size).
        unsafe { out(size, n as Count) }
    }
}

mpi_fn! {
    fn MPI_Buffer_flush() on ErrObj::NoObject => {
        // MPI 4.1: every buffered message has left the attached buffer when this returns.
        state::with_held(|st| st.wait_until(|st| flushed(st, None)))
    }
}

#[cfg(test)]
#[path = "p2p_tests.rs"]
mod tests;
