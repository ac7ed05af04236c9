//! Schedules: a collective as rounds of sends, receives and local steps on byte buffers the
//! schedule owns. One engine runs them for blocking, nonblocking and persistent forms, and
//! the unit tests run them between simulated ranks.
//!
//! In a round every transfer is posted at once; when all have completed, the round's local
//! steps (copies, reductions) run in order, then the next round starts. Data moves between
//! the user's buffers and the schedule's only at the ends: `inputs` are packed when the
//! schedule starts, `outputs` unpacked when it ends (so derived datatypes cost one pack and
//! one unpack, and reductions act on packed data).

use super::reduce::Reducer;
use crate::consts::MPI_ERR_BUFFER;
use crate::error::MpiResult;
use crate::objects::datatype::Datatype;
use std::sync::{Arc, Mutex};

/// `len` bytes at `off` in schedule buffer `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub buf: usize,
    pub off: usize,
    pub len: usize,
}

pub fn sl(buf: usize, off: usize, len: usize) -> Slice {
    Slice { buf, off, len }
}

/// A message to or from `peer` (rank in the communicator): the concatenation of `parts`.
#[derive(Clone, Debug)]
pub struct Xfer {
    pub send: bool,
    pub peer: i32,
    pub parts: Vec<Slice>,
    /// Added to the schedule's tag (0..=255): tells apart several messages between the same
    /// two ranks in one round when FIFO order is not the intended pairing (Cartesian
    /// neighbourhoods where both directions reach the same rank).
    pub tag: i32,
}

impl Xfer {
    pub fn bytes(&self) -> usize {
        self.parts.iter().map(|s| s.len).sum()
    }
}

#[derive(Clone, Debug)]
pub enum Local {
    Copy {
        from: Slice,
        to: Slice,
    },
    /// `b = a op b` (a: lower ranks).
    Reduce {
        a: Slice,
        b: Slice,
    },
    /// `a = a op b` (a: lower ranks; the result stays in a).
    ReduceIntoA {
        a: Slice,
        b: Slice,
    },
}

#[derive(Clone, Debug, Default)]
pub struct Round {
    pub xfers: Vec<Xfer>,
    pub locals: Vec<Local>,
}

/// User memory the schedule reads at start or writes at the end: `count` elements of `dt`
/// at `ptr`, packed to / unpacked from `slice`.
#[derive(Clone)]
pub struct UserBuf {
    pub slice: Slice,
    /// The buffer's address (an integer so plans can be shared; only dereferenced while
    /// the collective runs, when MPI's contract makes the memory ours).
    pub ptr: usize,
    pub count: usize,
    pub dt: Arc<Datatype>,
}

/// What a schedule is: built once (and kept by persistent requests), run many times.
#[derive(Clone, Default)]
pub struct Plan {
    pub bufs: Vec<usize>,
    /// Buffers that are user memory rather than the run's own: (buffer, address). A
    /// contiguous receive buffer used this way saves the pack and unpack passes (large
    /// reductions work in place in it).
    pub user_bufs: Vec<(usize, usize)>,
    pub rounds: Vec<Round>,
    pub inputs: Vec<UserBuf>,
    pub outputs: Vec<UserBuf>,
    pub reducer: Option<Reducer>,
    /// Run on this communicator instead of the one the operation names (an
    /// intercommunicator's barrier runs on its union intracommunicator).
    pub comm: Option<crate::consts::MPI_Comm>,
    /// The shared-memory form of a blocking collective (coll/shm.rs), run instead of the
    /// rounds when the communicator has its segment.
    pub shm: Option<super::shm::Call>,
    /// The two-level form of a blocking collective on a communicator spanning hosts
    /// (coll/hier.rs), run instead of the rounds when the communicator has its levels.
    pub hier: Option<super::hier::Call>,
}

impl Plan {
    /// Refuses a plan that would read or write user memory at a null address (as MPI_Send
    /// checks its buffer): MPI_ERR_BUFFER, not a crash.
    pub fn check_user_memory(&self) -> MpiResult<()> {
        for u in self.inputs.iter().chain(&self.outputs) {
            u.dt.check_buffer(u.ptr as *const u8, u.count as u64)?;
        }
        if let Some(&(b, _)) = self
            .user_bufs
            .iter()
            .find(|&&(b, a)| a == 0 && self.bufs[b] > 0)
        {
            return Err(crate::mpi_err!(
                MPI_ERR_BUFFER,
                "null buffer of {} bytes",
                self.bufs[b]
            ));
        }
        Ok(())
    }

    pub fn buf(&mut self, len: usize) -> usize {
        self.bufs.push(len);
        self.bufs.len() - 1
    }

    /// A buffer of `len` bytes that is the user's memory at `addr` (contiguous data, from
    /// its true lower bound). The run reads and writes it in place, while the collective
    /// runs, when MPI's contract makes the memory the library's.
    pub fn user_buf(&mut self, addr: usize, len: usize) -> usize {
        let b = self.buf(len);
        self.user_bufs.push((b, addr));
        b
    }

    pub fn round(&mut self) -> &mut Round {
        self.rounds.push(Round::default());
        self.rounds.last_mut().unwrap()
    }

    /// A round with one exchange: send `s` to `to` and receive `r` from `from`.
    pub fn sendrecv(&mut self, to: i32, s: Vec<Slice>, from: i32, r: Vec<Slice>) -> &mut Round {
        let round = self.round();
        round.xfers.push(Xfer {
            send: false,
            peer: from,
            parts: r,
            tag: 0,
        });
        round.xfers.push(Xfer {
            send: true,
            peer: to,
            parts: s,
            tag: 0,
        });
        round
    }

    pub fn send(&mut self, to: i32, s: Vec<Slice>) -> &mut Round {
        let round = self.round();
        round.xfers.push(Xfer {
            send: true,
            peer: to,
            parts: s,
            tag: 0,
        });
        round
    }

    pub fn recv(&mut self, from: i32, r: Vec<Slice>) -> &mut Round {
        let round = self.round();
        round.xfers.push(Xfer {
            send: false,
            peer: from,
            parts: r,
            tag: 0,
        });
        round
    }

    /// Appends local steps to the last round (or a new one).
    pub fn local(&mut self, l: Local) {
        if self.rounds.is_empty() {
            self.round();
        }
        self.rounds.last_mut().unwrap().locals.push(l);
    }

    /// True when local steps need a user function (run without the state lock).
    pub fn has_user_op(&self) -> bool {
        self.reducer.as_ref().is_some_and(|r| r.is_user())
    }
}

/// The messaging a schedule needs (Ferrite's collective context, or a test simulation).
pub trait Link {
    type H;
    fn isend(&mut self, peer: i32, tag: i32, data: Vec<u8>) -> MpiResult<Self::H>;
    fn irecv(&mut self, peer: i32, tag: i32) -> MpiResult<Self::H>;
    /// Sends the `len` bytes at `p` without copying them first.
    ///
    /// # Safety
    /// The bytes stay valid and unmodified until the request completes.
    unsafe fn isend_at(
        &mut self,
        peer: i32,
        tag: i32,
        p: *const u8,
        len: usize,
    ) -> MpiResult<Self::H>;
    /// Receives at most `len` bytes straight into `p`.
    ///
    /// # Safety
    /// The bytes stay valid and untouched by others until the request completes.
    unsafe fn irecv_at(
        &mut self,
        peer: i32,
        tag: i32,
        p: *mut u8,
        len: usize,
    ) -> MpiResult<Self::H>;
    /// A completed request, released: the data of an `irecv` (empty otherwise) and the
    /// number of bytes received. None while pending.
    fn test(&mut self, h: &Self::H) -> MpiResult<Option<(Vec<u8>, usize)>>;
}

/// What an in-flight request of a round is.
#[derive(Clone, Copy)]
enum Flight {
    Send,
    /// Receive into library-owned data, scattered into transfer `.0`'s parts.
    Owned(usize),
    /// Receive straight into the schedule's buffer; `.0` bytes expected.
    Direct(usize),
}

fn overlap(a: &Slice, b: &Slice) -> bool {
    a.buf == b.buf && a.off < b.off + b.len && b.off < a.off + a.len
}

/// Where a running schedule stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Poll {
    Pending,
    /// Communication is over; the local steps from here need a user function (run them
    /// with [`Run::finish_locals`] outside the lock).
    UserLocals,
    Done,
}

fn size_check(got: usize, want: usize) -> MpiResult<()> {
    if got == want {
        return Ok(());
    }
    Err(crate::mpi_err!(
        crate::consts::MPI_ERR_TRUNCATE,
        "collective received {got} bytes where {want} were expected (do the ranks' counts \
         and datatypes match?)"
    ))
}

/// Buffers of finished runs, for the next runs: a fresh allocation of a large buffer costs
/// a page fault per page at every call. At most [`POOL_MAX`] buffers of [`POOL_BYTES`] in all.
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
const POOL_MAX: usize = 8;
const POOL_BYTES: usize = 32 << 20;

/// `n` zeroed bytes, from the pool when it has a buffer large enough.
fn scratch(n: usize) -> Vec<u8> {
    if n == 0 {
        return Vec::new();
    }
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let best = (0..pool.len())
        .filter(|&i| pool[i].capacity() >= n)
        .min_by_key(|&i| pool[i].capacity());
    let Some(i) = best else {
        drop(pool);
        return vec![0u8; n];
    };
    let mut v = pool.swap_remove(i);
    drop(pool);
    v.clear();
    v.resize(n, 0);
    v
}

/// Gives buffers back to the pool (what does not fit is freed).
fn recycle(bufs: &mut Vec<Vec<u8>>) {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let mut held: usize = pool.iter().map(|v| v.capacity()).sum();
    for v in bufs.drain(..) {
        if v.capacity() > 0 && held + v.capacity() <= POOL_BYTES && pool.len() < POOL_MAX {
            held += v.capacity();
            pool.push(v);
        }
    }
}

/// A schedule being run.
pub struct Run<H> {
    pub plan: Arc<Plan>,
    pub tag: i32,
    /// The run's own buffers (empty for user buffers), kept alive for `base`: never resized
    /// or accessed directly while the run lives (given back to the pool when it ends).
    own: Vec<Vec<u8>>,
    /// Address of every buffer: of `own`'s vector, or the user memory ([`Plan::user_bufs`]).
    /// All access goes through these (see [`Run::mem`]), so no reference into `own` is
    /// alive while a transfer writes through a pointer.
    base: Vec<usize>,
    cur: usize,
    /// Requests of the current round.
    inflight: Vec<(H, Flight)>,
    posted: bool,
    /// Local steps of the current round already done.
    local_i: usize,
}

impl<H> Drop for Run<H> {
    fn drop(&mut self) {
        recycle(&mut self.own);
    }
}

impl<H> Run<H> {
    /// Allocates the buffers and packs the inputs (reads user memory).
    ///
    /// # Safety
    /// The plan's input buffers are readable as described.
    pub unsafe fn start(plan: Arc<Plan>, tag: i32) -> Self {
        let mut own: Vec<Vec<u8>> = Vec::with_capacity(plan.bufs.len());
        let mut base = Vec::with_capacity(plan.bufs.len());
        for (b, &n) in plan.bufs.iter().enumerate() {
            if let Some(&(_, addr)) = plan.user_bufs.iter().find(|u| u.0 == b) {
                own.push(Vec::new());
                base.push(addr);
            } else {
                let mut v = scratch(n);
                base.push(v.as_mut_ptr() as usize);
                own.push(v);
            }
        }
        let mut run = Run {
            plan,
            tag,
            own,
            base,
            cur: 0,
            inflight: Vec::new(),
            posted: false,
            local_i: 0,
        };
        let plan = run.plan.clone();
        for i in &plan.inputs {
            if i.count == 0 || i.slice.len == 0 {
                continue; // the pointer may be null
            }
            let dst = run.mem_mut(i.slice);
            if i.dt.is_contiguous() {
                let n = (i.dt.size() * i.count).min(dst.len());
                let src = (i.ptr as *const u8).wrapping_offset(i.dt.true_lb());
                if std::ptr::eq(src, dst.as_ptr()) {
                    continue; // in place in a user buffer: already there
                }
                // SAFETY: per the contract the user buffer holds `count` elements, i.e. at
                // least `n` bytes from its true lower bound; `copy` allows overlap.
                unsafe { std::ptr::copy(src, dst.as_mut_ptr(), n) };
                continue;
            }
            let mut v = Vec::with_capacity(i.slice.len);
            // SAFETY: per the contract the user buffer is readable.
            unsafe { i.dt.pack(i.ptr as *const u8, i.count, &mut v) };
            let n = v.len().min(dst.len());
            dst[..n].copy_from_slice(&v[..n]);
        }
        run
    }

    /// The bytes of `s`.
    fn mem(&self, s: Slice) -> &[u8] {
        if s.len == 0 {
            return &[];
        }
        // SAFETY: `base[s.buf]` is a live buffer of at least `s.off + s.len` bytes (the
        // plan's sizes; own vectors are never resized, user memory is the library's while
        // the collective runs); no transfer writes it while local steps run.
        unsafe { std::slice::from_raw_parts((self.base[s.buf] as *const u8).add(s.off), s.len) }
    }

    /// The bytes of `s`, writable.
    fn mem_mut(&mut self, s: Slice) -> &mut [u8] {
        if s.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `mem`; `&mut self` makes this the only reference made by the run.
        unsafe { std::slice::from_raw_parts_mut((self.base[s.buf] as *mut u8).add(s.off), s.len) }
    }

    fn gather(&self, parts: &[Slice]) -> Vec<u8> {
        let mut v = Vec::with_capacity(parts.iter().map(|s| s.len).sum());
        for s in parts {
            v.extend_from_slice(self.mem(*s));
        }
        v
    }

    fn scatter(&mut self, parts: &[Slice], data: &[u8]) -> MpiResult<()> {
        let want: usize = parts.iter().map(|s| s.len).sum();
        size_check(data.len(), want)?;
        let mut at = 0;
        for s in parts {
            self.mem_mut(*s).copy_from_slice(&data[at..at + s.len]);
            at += s.len;
        }
        Ok(())
    }

    /// Moves the schedule as far as it can without blocking. Stops before local steps that
    /// need a user function ([`Poll::UserLocals`]): run them with [`Self::run_user_locals`]
    /// without the state lock, then advance again.
    pub fn advance<L: Link<H = H>>(&mut self, link: &mut L) -> MpiResult<Poll> {
        let plan = self.plan.clone();
        while self.cur < plan.rounds.len() {
            let round = &plan.rounds[self.cur];
            if !self.posted {
                self.post(round, link)?;
                self.posted = true;
            }
            let mut k = 0;
            while k < self.inflight.len() {
                match link.test(&self.inflight[k].0)? {
                    None => k += 1,
                    Some((data, got)) => {
                        let (_, f) = self.inflight.swap_remove(k);
                        match f {
                            Flight::Send => {}
                            Flight::Owned(i) => self.scatter(&round.xfers[i].parts, &data)?,
                            Flight::Direct(want) => size_check(got, want)?,
                        }
                    }
                }
            }
            if !self.inflight.is_empty() {
                return Ok(Poll::Pending);
            }
            if plan.has_user_op() && !round.locals.is_empty() {
                return Ok(Poll::UserLocals);
            }
            self.run_user_locals();
        }
        Ok(Poll::Done)
    }

    /// Runs the current round's local steps and moves to the next round (after
    /// [`Poll::UserLocals`], with no lock held).
    pub fn run_user_locals(&mut self) {
        self.run_locals(self.cur);
        self.cur += 1;
        self.posted = false;
        self.local_i = 0;
    }

    /// True if a later round still communicates (a nonblocking run must not stop for user
    /// code before that: nothing would run the user code while MPI_Wait blocks).
    pub fn comm_remaining(&self) -> bool {
        self.plan.rounds[self.cur.min(self.plan.rounds.len())..]
            .iter()
            .skip(1)
            .any(|r| r.xfers.iter().any(|x| x.bytes() > 0))
    }

    /// Posts a round's transfers: receives first, so two ranks exchanging cannot both wait
    /// on sends. One-part transfers go straight from/to the schedule's buffers (they never
    /// move: the vectors are not resized); a send overlapping a receive of the same round, or
    /// made of several parts, is copied out before any receive is posted (a receive may
    /// complete as soon as it is posted).
    fn post<L: Link<H = H>>(&mut self, round: &Round, link: &mut L) -> MpiResult<()> {
        let clash = |s: &Slice| {
            round
                .xfers
                .iter()
                .any(|y| !y.send && y.parts.iter().any(|r| overlap(s, r)))
        };
        // (transfer index, bytes) of the sends copied out; usually none, so no allocation.
        let mut copies: Vec<(usize, Vec<u8>)> = Vec::new();
        for (i, x) in round.xfers.iter().enumerate() {
            match x.parts[..] {
                _ if !x.send || x.bytes() == 0 => {}
                [s] if !clash(&s) => {}
                _ => copies.push((i, self.gather(&x.parts))),
            }
        }
        for (i, x) in round.xfers.iter().enumerate() {
            if x.bytes() == 0 || x.send {
                continue;
            }
            let h = if let [s] = x.parts[..] {
                let p = (self.base[s.buf] as *mut u8).wrapping_add(s.off);
                // SAFETY: the slice lies in a buffer this run owns and does not touch until
                // the round's requests have completed.
                let h = unsafe { link.irecv_at(x.peer, self.tag + x.tag, p, s.len) }?;
                (h, Flight::Direct(s.len))
            } else {
                (link.irecv(x.peer, self.tag + x.tag)?, Flight::Owned(i))
            };
            self.inflight.push(h);
        }
        for (i, x) in round.xfers.iter().enumerate() {
            if x.bytes() == 0 || !x.send {
                continue;
            }
            let copy = copies
                .iter()
                .position(|c| c.0 == i)
                .map(|k| std::mem::take(&mut copies[k].1));
            let h = match (copy, &x.parts[..]) {
                (Some(data), _) => link.isend(x.peer, self.tag + x.tag, data)?,
                (None, [s]) => {
                    let p = (self.base[s.buf] as *const u8).wrapping_add(s.off);
                    // SAFETY: as above; nothing writes the slice during the round.
                    unsafe { link.isend_at(x.peer, self.tag + x.tag, p, s.len) }?
                }
                (None, _) => unreachable!("multi-part sends are copied"),
            };
            self.inflight.push((h, Flight::Send));
        }
        Ok(())
    }

    fn run_locals(&mut self, r: usize) {
        let plan = self.plan.clone();
        let locals = &plan.rounds[r].locals;
        while self.local_i < locals.len() {
            self.local(&locals[self.local_i], plan.reducer.as_ref());
            self.local_i += 1;
        }
    }

    /// Runs every remaining local step (after [`Poll::UserLocals`]; no locks held).
    pub fn finish_locals(&mut self) {
        while self.cur < self.plan.rounds.len() {
            self.run_locals(self.cur);
            self.cur += 1;
            self.local_i = 0;
        }
    }

    fn local(&mut self, l: &Local, red: Option<&Reducer>) {
        match *l {
            Local::Copy { from, to } => {
                if from == to || from.len == 0 {
                    return;
                }
                let (f, t) = (self.mem(from).as_ptr(), self.mem_mut(to).as_mut_ptr());
                // SAFETY: both are `from.len` bytes of live buffers (see `mem`); `copy`
                // allows overlap.
                unsafe { std::ptr::copy(f, t, from.len) };
            }
            Local::Reduce { a, b } => {
                if let Some(r) = red {
                    self.combine(r, a, b);
                }
            }
            Local::ReduceIntoA { a, b } => {
                let Some(r) = red else { return };
                if r.commutative() && !r.is_user() {
                    // a op b == b op a for predefined operations: combine straight into a.
                    self.combine(r, b, a);
                    return;
                }
                let mut bv = self.mem(b).to_vec();
                r.combine(self.mem(a), &mut bv);
                self.mem_mut(a).copy_from_slice(&bv);
            }
        }
    }

    /// `into = from op into`, without copying `from` unless the two overlap.
    fn combine(&mut self, r: &Reducer, from: Slice, into: Slice) {
        if overlap(&from, &into) {
            let fv = self.mem(from).to_vec();
            r.combine(&fv, self.mem_mut(into));
            return;
        }
        if from.len == 0 {
            return;
        }
        // SAFETY: `from` is a live buffer region (see `mem`) that does not overlap `into`,
        // the only region written.
        let fv = unsafe {
            std::slice::from_raw_parts((self.base[from.buf] as *const u8).add(from.off), from.len)
        };
        r.combine(fv, self.mem_mut(into));
    }

    /// Writes the outputs into user memory.
    ///
    /// # Safety
    /// The plan's output buffers are writable as described.
    pub unsafe fn write_outputs(&self) {
        for o in &self.plan.outputs {
            if o.count == 0 || o.slice.len == 0 {
                continue; // the pointer may be null
            }
            let data = self.mem(o.slice);
            if o.dt.is_contiguous()
                && std::ptr::eq(
                    data.as_ptr(),
                    (o.ptr as *const u8).wrapping_offset(o.dt.true_lb()),
                )
            {
                continue; // the result is already in place in a user buffer
            }
            // SAFETY: per the contract the user buffer holds `count` elements of `dt`.
            unsafe { o.dt.unpack(data, o.ptr as *mut u8, o.count) };
        }
    }

    /// Buffer `b` (internal collectives read their result here).
    pub fn buf(&self, b: usize) -> &[u8] {
        self.mem(sl(b, 0, self.plan.bufs[b]))
    }

    /// Copies of every buffer (the unit tests check them).
    #[cfg(test)]
    pub fn bufs(&self) -> Vec<Vec<u8>> {
        (0..self.plan.bufs.len())
            .map(|b| self.buf(b).to_vec())
            .collect()
    }
}
