//! The active-message channel: how RMA messages reach a window rank today. Every message
//! is a point-to-point message with tag 0 on the point-to-point context of the window's
//! private communicator (which nothing else uses); each window keeps one standing receive
//! (any source, tag 0, library-owned buffer) there, and the progress hook
//! (`Ferrite::rma_progress`) serves what it takes and posts it again. So a target serves
//! requests whenever its progress engine runs, never needing a matching user receive, and
//! the channel works over every transport (self, shm, tcp, udp) with p2p's flow control
//! and its eager and rendezvous protocols. Messages from one origin arrive in order
//! (non-overtaking), which gives accumulates their default ordering. The data of large
//! Gets and Puts travels apart, on a tag of its own (`wire::stream_tag`), from and into the
//! memory where it is and will be (`post_stream`, `send_stream`): p2p's rendezvous moves it
//! without the copies a library-owned message costs.
//!
//! This module is the only place RMA touches point-to-point: an RDMA transport would add
//! a second channel carrying Put and Get as remote writes and reads (and accumulates as
//! native atomics) without changing the epochs and bookkeeping in `rma/mod.rs`.

use crate::consts::*;
use crate::error::MpiResult;
use crate::p2p::request::{Mode, Ptr, Source, Spec, Target};
use crate::state::Ferrite;

/// Where a window's messages travel.
#[derive(Clone)]
pub struct Route {
    /// The window's private communicator.
    pub comm: MPI_Comm,
    /// Its point-to-point context id.
    pub ctx: u32,
    /// This process's rank in it.
    pub me: i32,
    /// World rank of each window rank.
    pub peers: std::sync::Arc<[u32]>,
}

/// Posts the standing receive that takes the next message for the window.
pub fn post(st: &mut Ferrite, r: &Route) -> MpiResult<MPI_Request> {
    let spec = Spec::Recv {
        ctx: r.ctx,
        src: MPI_ANY_SOURCE,
        tag: 0,
        target: Target::Owned(Vec::new()),
    };
    st.start_new(r.comm, &spec)
}

/// Posts a receive of streamed data from window rank `from` on `tag` into `target`.
pub fn post_stream(
    st: &mut Ferrite,
    r: &Route,
    from: u32,
    tag: i32,
    target: Target,
) -> MpiResult<MPI_Request> {
    let spec = Spec::Recv {
        ctx: r.ctx,
        src: from as i32,
        tag,
        target,
    };
    st.start_new(r.comm, &spec)
}

/// Sends streamed data `src` to window rank `dest` on `tag`, in the background.
pub fn send_stream(st: &mut Ferrite, r: &Route, dest: u32, tag: i32, src: Source) -> MpiResult<()> {
    send_from(st, r, dest, tag, src)
}

/// Sends the concatenation of `parts` to window rank `dest`; the message goes out in the
/// background from one library-owned copy.
pub fn send(st: &mut Ferrite, r: &Route, dest: u32, parts: &[&[u8]]) -> MpiResult<()> {
    let mut msg = std::sync::Arc::<[u8]>::new_uninit_slice(parts.iter().map(|p| p.len()).sum());
    let mut at = 0;
    let buf = std::sync::Arc::get_mut(&mut msg).expect("a new Arc has one owner");
    for p in parts {
        // SAFETY: `buf` has room for every part (its length is their sum) and is new, so
        // it overlaps nothing; writing bytes into uninitialized memory is allowed.
        unsafe {
            std::ptr::copy_nonoverlapping(p.as_ptr(), buf.as_mut_ptr().add(at).cast(), p.len())
        };
        at += p.len();
    }
    // SAFETY: the parts' lengths add up to the slice's, so every byte was written.
    let msg = unsafe { msg.assume_init() };
    send_from(st, r, dest, 0, Source::Owned(msg))
}

/// Sends the `msg.1` bytes at `msg.0` to window rank `dest` from where they are, without a
/// copy: the caller keeps them there until the target has answered the message.
pub fn send_kept(st: &mut Ferrite, r: &Route, dest: u32, msg: (*const u8, usize)) -> MpiResult<()> {
    let src = Source::User {
        buf: Ptr(msg.0 as *mut u8),
        count: msg.1,
        dt: st.comm_datatype(MPI_BYTE)?,
    };
    send_from(st, r, dest, 0, src)
}

/// Starts a send of `src` to window rank `dest` that completes in the background (nobody
/// waits for it: the target's answer is what the origin waits for).
fn send_from(st: &mut Ferrite, r: &Route, dest: u32, tag: i32, src: Source) -> MpiResult<()> {
    let spec = Spec::Send {
        mode: Mode::Standard,
        ctx: r.ctx,
        me: r.me,
        dest: Some(r.peers[dest as usize]),
        tag,
        src,
    };
    let h = st.start_new(r.comm, &spec)?;
    if st.p2p.is_done(h) {
        st.p2p.reqs.remove(h);
    } else if let Some(req) = st.p2p.reqs.get_mut(h) {
        req.background = true;
    }
    Ok(())
}

/// Withdraws the standing receive of a window being freed (or a stream receive whose data
/// will not come).
pub fn withdraw(st: &mut Ferrite, h: MPI_Request) {
    if h == MPI_REQUEST_NULL {
        return;
    }
    st.p2p.cancel(h);
    if st.p2p.is_done(h) {
        st.p2p.reqs.remove(h);
    } else if let Some(req) = st.p2p.reqs.get_mut(h) {
        // Matched and still arriving (a rendezvous): dropped when it completes.
        req.freed = true;
    }
}
