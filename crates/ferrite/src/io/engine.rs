//! Collective accesses in progress ([`twophase::Collective`]), advanced by the progress
//! engine's I/O hook (`Ferrite::progress` calls [`progress`]): a nonblocking collective
//! access returns its request at once and completes in the background, as ROMIO's do; a
//! blocking one waits on it.
//!
//! The accesses of one file run one after another, in the order they were started (which
//! every rank shares: collective calls are made in the same order), so a file's collective
//! accesses take effect and complete in order. Everything here runs under the state lock
//! and never takes a file's mutex (an MPI-IO call holds it while it waits here); no user
//! code runs (unpacking is the datatype engine's).

use super::access::file_status;
use super::datarep::{Datarep, Layout};
use super::file::Io;
use super::twophase::Collective;
use super::view::Seg;
use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::objects::datatype::Datatype;
use crate::p2p::request::Request;
use crate::state::{self, Ferrite};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The data stream of an access: the source of a write, the destination of a read.
pub enum Stream {
    /// The user's contiguous memory, used in place (MPI gives it to the library until the
    /// access completes).
    User {
        addr: usize,
        len: usize,
    },
    Owned(Vec<u8>),
}

impl Stream {
    pub fn src(&self) -> &[u8] {
        match self {
            // SAFETY: `len` readable bytes at `addr`, untouched by the user until completion.
            Stream::User { addr, len } => unsafe {
                std::slice::from_raw_parts(*addr as *const u8, *len)
            },
            Stream::Owned(v) => v,
        }
    }

    /// For reads only (a write's user memory may be read-only).
    pub fn dst(&mut self) -> &mut [u8] {
        match self {
            // SAFETY: `len` writable bytes at `addr`, the library's until completion.
            Stream::User { addr, len } => unsafe {
                std::slice::from_raw_parts_mut(*addr as *mut u8, *len)
            },
            Stream::Owned(v) => v,
        }
    }

    pub fn bytes(&self) -> usize {
        match self {
            Stream::User { len, .. } => *len,
            Stream::Owned(v) => v.len(),
        }
    }
}

/// Where a read's packed stream goes when it completes: `count` elements of `dtype` at
/// `addr` (external32 data is converted on the way, a user representation's through its
/// read conversion function).
pub struct Unpack {
    pub addr: usize,
    pub count: usize,
    pub dtype: Arc<Datatype>,
    pub ext32: bool,
    pub conv: Option<(Arc<Datarep>, Layout)>,
}

/// Unpacks the `data` read (at most the whole stream) to the user's buffer. With a user
/// conversion function this runs user code: never under the state lock.
pub fn unpack(u: &Unpack, data: &mut [u8]) -> MpiResult<()> {
    if let Some((rep, l)) = &u.conv {
        // SAFETY: the user's buffer holds `count` elements of the memory type and is the
        // library's until the access completes; `data` holds at most that many items.
        return unsafe { rep.from_file(l, data, u.addr as *mut u8) };
    }
    // SAFETY: as above; `data` is never longer than the elements' packed size.
    unsafe {
        if u.ext32 {
            u.dtype.unpack_external(data, u.addr as *mut u8, u.count)
        } else {
            u.dtype.unpack(data, u.addr as *mut u8, u.count)
        }
    }
    Ok(())
}

/// The outcome of a blocking access: bytes accessed and the data stream, or the error.
type Slot = Arc<Mutex<Option<MpiResult<(u64, Stream)>>>>;

enum Out {
    /// A nonblocking access's request, and its file's C handle.
    Request(MPI_Request, usize),
    /// A blocking access's caller waits for this.
    Slot(Slot),
    /// Nobody waits: this rank's call failed, and the access runs only so that the other
    /// ranks learn it and are not left waiting.
    Detached,
}

struct Op {
    comm: MPI_Comm,
    coll: Collective,
    write: bool,
    /// Read through `Stream::dst` only when `!write`.
    data: Stream,
    unpack: Option<Unpack>,
    out: Out,
}

/// The accesses in progress, oldest first (only touched under the state lock).
static OPS: Mutex<Vec<Op>> = Mutex::new(Vec::new());
/// Set while OPS is not empty: the hook costs one load when there is no I/O.
static ANY: AtomicBool = AtomicBool::new(false);

/// Whether no collective file access is in progress (nothing for the progress engine here).
pub fn idle() -> bool {
    !ANY.load(Ordering::Acquire)
}

fn ops() -> std::sync::MutexGuard<'static, Vec<Op>> {
    OPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// One collective access to start: the file, this rank's extents and data stream, and
/// the error its arguments had here (it still takes part, with no data, and makes the
/// access fail everywhere).
pub struct Start {
    pub io: Io,
    pub segs: Vec<Seg>,
    pub write: bool,
    pub data: Stream,
    pub unpack: Option<Unpack>,
    pub pre: Option<MpiError>,
}

fn push(st: &mut Ferrite, s: Start, out: Out) -> MpiResult<()> {
    // Collective calls on a file come in the same order everywhere: so do the tags.
    let tag = st.coll_tag_nonblocking(s.io.comm)?;
    let comm = s.io.comm;
    let coll = Collective::new(s.io, s.segs, s.write, tag, s.data.bytes(), s.pre);
    ops().push(Op {
        comm,
        coll,
        write: s.write,
        data: s.data,
        unpack: s.unpack,
        out,
    });
    ANY.store(true, Ordering::Release);
    Ok(())
}

/// Starts a nonblocking collective access on file `fh`; its request completes in the
/// background.
pub fn start(s: Start, fh: usize) -> MpiResult<MPI_Request> {
    state::with(|st| {
        // The file's communicator returns errors (the files' default handler); completing
        // the request raises on it.
        let h = st.p2p.reqs.insert(Request::new(s.io.comm, true));
        push(st, s, Out::Request(h, fh))?;
        progress(st);
        Ok(h)
    })
}

/// Starts an access for a rank whose call failed (`s.pre` is set) and returns at once.
pub fn start_detached(s: Start) -> MpiResult<()> {
    state::with(|st| {
        push(st, s, Out::Detached)?;
        progress(st);
        Ok(())
    })
}

/// Runs a collective access to its end: the bytes accessed, and the data stream (which the
/// caller unpacks).
pub fn run(s: Start) -> MpiResult<(u64, Stream)> {
    let slot: Slot = Arc::new(Mutex::new(None));
    state::with_held(|st| {
        push(st, s, Out::Slot(slot.clone()))?;
        st.wait_until(|_| lock_slot(&slot).is_some())
    })?;
    let r = lock_slot(&slot).take();
    r.unwrap_or_else(|| Err(MpiError::new(MPI_ERR_INTERN, "collective access lost")))
}

fn lock_slot(s: &Slot) -> std::sync::MutexGuard<'_, Option<MpiResult<(u64, Stream)>>> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until the collective accesses of the file on `comm` are over (MPI_File_close:
/// those of requests freed with MPI_Request_free finish first).
pub fn drain(comm: MPI_Comm) -> MpiResult<()> {
    let pending = || ANY.load(Ordering::Acquire) && ops().iter().any(|o| o.comm == comm);
    if !pending() {
        return Ok(());
    }
    state::with_held(|st| st.wait_until(|_| !pending()))
}

/// The progress hook: advances the oldest access of each file; completes those that end.
/// True if any did.
pub fn progress(st: &mut Ferrite) -> bool {
    if !ANY.load(Ordering::Acquire) {
        return false;
    }
    // Taken out so that nothing below can find the list locked.
    let list = std::mem::take(&mut *ops());
    let mut keep = Vec::with_capacity(list.len());
    let mut busy: Vec<MPI_Comm> = Vec::new();
    let mut changed = false;
    for mut op in list {
        if busy.contains(&op.comm) {
            keep.push(op);
            continue;
        }
        match op.coll.advance(st, &mut op.data) {
            Ok(false) => {
                busy.push(op.comm);
                keep.push(op);
            }
            Ok(true) => {
                let e = op.coll.err.take();
                finish(st, op, e);
                changed = true;
            }
            Err(e) => {
                finish(st, op, Some(e));
                changed = true;
            }
        }
    }
    let mut g = ops();
    keep.append(&mut g);
    *g = keep;
    ANY.store(!g.is_empty(), Ordering::Release);
    changed
}

/// Hands an access's outcome to whoever waits for it.
fn finish(st: &mut Ferrite, op: Op, err: Option<MpiError>) {
    let res = match err {
        Some(e) => Err(e),
        None if op.write => Ok(op.data.bytes() as u64),
        None => Ok(op.coll.short as u64),
    };
    match op.out {
        Out::Request(h, fh) => {
            if let (Ok(n), Some(u), Stream::Owned(mut v)) = (&res, op.unpack, op.data) {
                v.truncate(*n as usize);
                if u.conv.is_some() {
                    // User code: after the lock is released, before the call that
                    // completed the request returns (state::defer). The status was handed
                    // out already: a failing conversion raises on the file's handler.
                    crate::state::defer(move || {
                        if let Err(e) = unpack(&u, &mut v) {
                            crate::error::raise("MPI-IO nonblocking read conversion", e, || {
                                crate::error::ErrObj::File(fh)
                            });
                        }
                    });
                } else {
                    let _ = unpack(&u, &mut v);
                }
            }
            if let Some(r) = st.p2p.reqs.get_mut(h) {
                r.done = true;
                r.status = file_status(*res.as_ref().unwrap_or(&0));
                if let Err(e) = &res {
                    r.status.error = e.class;
                }
                if r.freed {
                    st.p2p.reqs.remove(h);
                }
            }
        }
        Out::Slot(s) => *lock_slot(&s) = Some(res.map(|n| (n, op.data))),
        Out::Detached => {}
    }
}
