//! The active-message channel: how RMA messages reach a window rank today. Every message
//! is a point-to-point message with tag 0 on the point-to-point context of the window's
//! private communicator (which nothing else uses); each window keeps one standing receive
//! (any source, tag 0, library-owned buffer) there, and the progress hook
//! (`Ferrite::rma_progress`) serves what it takes and posts it again. So a target serves
//! requests whenever its progress engine runs, never needing a matching user receive, and
//! the channel works over every transport (self, shm, tcp, udp) with p2p's flow control
//! and its eager and rendezvous protocols. Messages from one origin arrive in order
//! (non-overtaking), which gives accumulates their default ordering.
//!
//! This module is the only place RMA touches point-to-point: an RDMA transport would add
//! a second channel carrying Put and Get as remote writes and reads (and accumulates as
//! native atomics) without changing the epochs and bookkeeping in `rma/mod.rs`.

use crate::abi::consts::*;
use crate::error::MpiResult;
use crate::p2p::request::{Mode, Source, Spec, Target};
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

/// Sends `msg` to window rank `dest`; the message goes out in the background.
pub fn send(st: &mut Ferrite, r: &Route, dest: u32, msg: Vec<u8>) -> MpiResult<()> {
    let spec = Spec::Send {
        mode: Mode::Standard,
        ctx: r.ctx,
        me: r.me,
        dest: Some(r.peers[dest as usize]),
        tag: 0,
        src: Source::Owned(msg.into()),
    };
    let h = st.start_new(r.comm, &spec)?;
    if st.p2p.is_done(h) {
        st.p2p.reqs.remove(h);
    } else if let Some(req) = st.p2p.reqs.get_mut(h) {
        req.background = true;
    }
    Ok(())
}

/// Withdraws the standing receive of a window being freed.
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
