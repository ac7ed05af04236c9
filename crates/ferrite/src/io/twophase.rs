//! Collective buffering (two-phase I/O, as ROMIO): for a collective access whose pieces
//! interleave across ranks, `cb_nodes` aggregator ranks each own one contiguous file domain
//! of the accessed range. In rounds of `cb_buffer_size` bytes per aggregator, every rank
//! sends each aggregator the pieces that fall in its current window, and the aggregator
//! makes one large write of the window (reading it first when the pieces leave holes, under
//! an exclusive byte-range lock); reads go the other way (requests, then answers). A
//! strided collective write thus becomes a few large contiguous writes instead of many
//! small ones.
//!
//! When it is used (`romio_cb_write`/`romio_cb_read`): `enable` always, `disable` never,
//! `automatic` (the default) when some rank's access is non-contiguous and the ranks'
//! ranges interleave. Never in atomic mode (each process's access must then be atomic on
//! its own: the independent path locks it) nor with one process. Otherwise each rank
//! accesses its own extents (coalesced, with data sieving).
//!
//! Aggregator `a` of `n` is rank `a * size / n` of the file's communicator: spread evenly,
//! so with the default `cb_nodes` (the number of hosts) and ranks placed by host in blocks
//! there is about one per host.
//!
//! Every collective access, blocking or not, is a [`Collective`]: a state machine whose
//! steps are nonblocking internal messages on the file communicator's collective context
//! (one nonblocking-collective tag per access: +0 the opening allgather, +1 requests and
//! written data, +2 read answers, +3 the closing agreement) and the POSIX calls, which run
//! when their step does. The progress engine advances it (`io::engine`), so a nonblocking
//! collective access completes in the background, and the blocking forms wait on it.
//! An opening allgather of each rank's range and argument error decides the path and makes
//! every rank fail together when one had bad arguments; after two-phase, a closing one
//! makes an aggregator's I/O error everyone's.

use super::access::{read_indep, write_indep};
use super::engine::Stream;
use super::file::Io;
use super::hints::Switch;
use super::posix::{self, RangeLock};
use super::view::Seg;
use crate::abi::consts::*;
use crate::coll::Gather;
use crate::error::{MpiError, MpiResult};
use crate::state::Ferrite;

/// The geometry of one two-phase access, the same on every rank.
struct Plan {
    gmin: u64,
    /// Bytes of each aggregator's domain (the last may be shorter).
    domain: u64,
    naggr: usize,
    cb: u64,
    rounds: u64,
}

/// A piece of this rank's access: `len` bytes at file offset `off`, stream offset `pos`.
#[derive(Clone, Copy)]
struct Piece {
    off: u64,
    len: u64,
    pos: u64,
}

impl Plan {
    fn aggr_rank(&self, a: usize, size: usize) -> usize {
        a * size / self.naggr
    }

    fn is_aggregator(&self, rank: usize, size: usize) -> bool {
        (0..self.naggr).any(|a| self.aggr_rank(a, size) == rank)
    }

    /// (aggregator, round, end of that window) of file byte `x`.
    fn window(&self, x: u64) -> (usize, u64, u64) {
        let a = (((x - self.gmin) / self.domain) as usize).min(self.naggr - 1);
        let dlo = self.gmin + a as u64 * self.domain;
        let w = (x - dlo) / self.cb;
        let wend = dlo + ((w + 1) * self.cb).min(self.domain);
        (a, w, wend)
    }

    /// This rank's pieces by round, then by aggregator.
    fn pieces(&self, segs: &[Seg]) -> Vec<Vec<Vec<Piece>>> {
        let mut by = vec![vec![Vec::new(); self.naggr]; self.rounds as usize];
        let mut pos = 0;
        for s in segs {
            let (mut off, end) = (s.off, s.off + s.len);
            while off < end {
                let (a, w, wend) = self.window(off);
                let len = wend.min(end) - off;
                by[w as usize][a].push(Piece { off, len, pos });
                off += len;
                pos += len;
            }
        }
        by
    }
}

/// Decides whether to use two-phase I/O, and how, from every rank's
/// `[lo, hi, non-contiguous, error]` record (`all`, in rank order).
fn plan(io: &Io, write: bool, all: &[u64]) -> Option<Plan> {
    let sw = if write {
        io.hints.cb_write
    } else {
        io.hints.cb_read
    };
    if sw == Switch::Disable || io.atomic {
        return None;
    }
    let mut ranges: Vec<(u64, u64)> = all
        .chunks(RECORD)
        .filter(|c| c[0] < c[1])
        .map(|c| (c[0], c[1]))
        .collect();
    if ranges.is_empty() {
        return None;
    }
    if sw == Switch::Automatic {
        let noncontig = all.chunks(RECORD).any(|c| c[2] != 0);
        ranges.sort_unstable();
        let interleave = ranges.windows(2).any(|w| w[1].0 < w[0].1);
        if !(noncontig && interleave) {
            return None;
        }
    }
    let gmin = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let gmax = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    let naggr = io.hints.cb_nodes.clamp(1, io.size);
    let domain = (gmax - gmin).div_ceil(naggr as u64).max(1);
    let cb = io.hints.cb_buffer_size.max(1);
    Some(Plan {
        gmin,
        domain,
        naggr,
        cb,
        rounds: domain.div_ceil(cb),
    })
}

/// u64 words of each rank's record in the opening gather.
const RECORD: usize = 4;

fn put_u64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

fn get_u64(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap())
}

/// One round's requests: to each aggregator, the count and `(file offset, length)` pairs
/// of this rank's pieces in its window (a write appends the data after). Every aggregator
/// gets a message, empty or not, so that it knows when it has heard from everyone.
fn requests(p: &Plan, round: &[Vec<Piece>], size: usize) -> Vec<(usize, Vec<u8>)> {
    let mut send = Vec::with_capacity(p.naggr);
    for (a, ps) in round.iter().enumerate() {
        let mut m = Vec::with_capacity(8 + 16 * ps.len());
        put_u64(&mut m, ps.len() as u64);
        for q in ps {
            put_u64(&mut m, q.off);
            put_u64(&mut m, q.len);
        }
        send.push((p.aggr_rank(a, size), m));
    }
    send
}

/// The `(file offset, length)` pairs of a request message.
fn asked(m: &[u8]) -> Vec<(u64, u64)> {
    let n = if m.is_empty() {
        0
    } else {
        get_u64(m, 0) as usize
    };
    (0..n)
        .map(|k| (get_u64(m, 1 + 2 * k), get_u64(m, 2 + 2 * k)))
        .collect()
}

/// An aggregator writes the pieces of one window: one write of their span, read first
/// (under an exclusive lock) when they leave holes.
fn aggregate_write(io: &Io, got: &mut [(u64, &[u8])]) -> MpiResult<()> {
    if got.is_empty() {
        return Ok(());
    }
    // Stable: where pieces overlap, the higher rank's bytes land last.
    got.sort_by_key(|g| g.0);
    let lo = got[0].0;
    let hi = got
        .iter()
        .map(|g| g.0 + g.1.len() as u64)
        .max()
        .unwrap_or(lo);
    let mut reach = lo;
    let mut holes = false;
    for g in got.iter() {
        holes |= g.0 > reach;
        reach = reach.max(g.0 + g.1.len() as u64);
    }
    if holes && !io.readable {
        // Write-only file: no read-modify-write, so piece by piece.
        for g in got.iter() {
            posix::pwrite(&io.fd, g.1, g.0)?;
        }
        return Ok(());
    }
    let _l = if holes {
        Some(RangeLock::new(&io.fd, lo, hi - lo, true)?)
    } else {
        None
    };
    let mut buf = vec![0u8; (hi - lo) as usize];
    if holes {
        posix::pread(&io.fd, &mut buf, lo)?;
    }
    for g in got.iter() {
        let b = (g.0 - lo) as usize;
        buf[b..b + g.1.len()].copy_from_slice(g.1);
    }
    posix::pwrite(&io.fd, &buf, lo)
}

/// An aggregator reads the span its requesters asked for in one read and answers each
/// with (bytes valid before end of file per piece, then the pieces' bytes). A failed read
/// answers "nothing valid" (the error is agreed on at the end of the access).
fn serve_reads(io: &Io, asks: &[Vec<u8>]) -> (Vec<Vec<u8>>, Option<MpiError>) {
    let want: Vec<Vec<(u64, u64)>> = asks.iter().map(|m| asked(m)).collect();
    let all = want.iter().flatten();
    let lo = all.clone().map(|w| w.0).min().unwrap_or(0);
    let hi = all.map(|w| w.0 + w.1).max().unwrap_or(0);
    let mut buf = vec![0u8; hi.saturating_sub(lo) as usize];
    let (got, err) = if buf.is_empty() {
        (lo, None)
    } else {
        match posix::pread(&io.fd, &mut buf, lo) {
            Ok(n) => (lo + n as u64, None),
            Err(e) => (lo, Some(e)),
        }
    };
    let replies = want
        .iter()
        .map(|ws| {
            let mut r = Vec::new();
            for &(off, len) in ws {
                put_u64(&mut r, got.saturating_sub(off).min(len));
            }
            for &(off, len) in ws {
                let b = (off - lo) as usize;
                r.extend_from_slice(&buf[b..b + len as usize]);
            }
            r
        })
        .collect();
    (replies, err)
}

/// One exchange of a round: a message to each of some ranks, one from each of others (in
/// the file communicator's collective context, on the access's tag).
struct Exchange {
    sends: Vec<MPI_Request>,
    recvs: Vec<(usize, MPI_Request)>,
    got: Vec<Vec<u8>>,
}

impl Exchange {
    /// Posts the receives from `from`, then the sends; a message to this rank itself is
    /// kept, not sent.
    fn post(
        st: &mut Ferrite,
        io: &Io,
        tag: i32,
        msgs: Vec<(usize, Vec<u8>)>,
        from: impl Iterator<Item = usize>,
    ) -> MpiResult<Exchange> {
        let mut x = Exchange {
            sends: Vec::new(),
            recvs: Vec::new(),
            got: vec![Vec::new(); io.size],
        };
        for r in from.filter(|&r| r != io.rank) {
            x.recvs.push((r, st.coll_irecv(io.comm, r as i32, tag)?));
        }
        for (to, m) in msgs {
            if to == io.rank {
                x.got[to] = m;
            } else {
                x.sends.push(st.coll_isend(io.comm, to as i32, tag, m)?);
            }
        }
        Ok(x)
    }

    /// Every message received, by sender, once all transfers have completed.
    fn poll(&mut self, st: &mut Ferrite, io: &Io) -> MpiResult<Option<Vec<Vec<u8>>>> {
        let all = self.sends.iter().chain(self.recvs.iter().map(|r| &r.1));
        if !all.clone().all(|&h| st.req_test(h)) {
            return Ok(None);
        }
        st.check_net(io.comm)?;
        for h in self.sends.drain(..) {
            let (status, _, _) = st.release(h);
            if status.error != MPI_SUCCESS {
                return Err(MpiError::from_code(status.error));
            }
        }
        for (r, h) in self.recvs.drain(..) {
            let (status, data, _) = st.release(h);
            if status.error != MPI_SUCCESS {
                return Err(MpiError::from_code(status.error));
            }
            self.got[r] = data.unwrap_or_default();
        }
        Ok(Some(std::mem::take(&mut self.got)))
    }
}

/// Where a collective access is.
enum Step {
    Begin,
    /// Gathering every rank's range, contiguity and local error.
    Plan(Gather),
    /// Round `r` of two-phase; for reads, `replies` once the requests were served.
    Round {
        p: Plan,
        by: Vec<Vec<Vec<Piece>>>,
        r: usize,
        x: Exchange,
        replies: bool,
    },
    /// Agreeing on the outcome after two-phase (an aggregator's failure is everyone's).
    Agree(Gather),
    Done,
}

/// One collective access (the `_all` forms, blocking or not), advanced by the progress
/// engine: an opening allgather decides the path, then the rounds of two-phase or the
/// rank's own independent access. Every rank takes part to the end even after a local
/// error, so that none is left waiting.
pub struct Collective {
    io: Io,
    segs: Vec<Seg>,
    write: bool,
    tag: i32,
    step: Step,
    /// The first error seen here (the access goes on to its end, then fails with it).
    pub err: Option<MpiError>,
    /// Reads: bytes read before the first that lies past the end of the file.
    pub short: usize,
}

impl Collective {
    /// An access of `segs` with the file communicator's next nonblocking collective tag;
    /// `pre`: this rank's argument error, reported to the others in the opening gather.
    pub fn new(
        io: Io,
        segs: Vec<Seg>,
        write: bool,
        tag: i32,
        len: usize,
        pre: Option<MpiError>,
    ) -> Collective {
        Collective {
            io,
            segs,
            write,
            tag,
            step: Step::Begin,
            err: pre,
            short: len,
        }
    }

    fn fail(&mut self, e: MpiError) {
        self.err.get_or_insert(e);
    }

    /// This rank's own access, without exchanges.
    fn independent(&mut self, data: &mut Stream) {
        let r = if self.write {
            write_indep(&self.io, &self.segs, data.src())
        } else {
            read_indep(&self.io, &self.segs, data.dst()).map(|n| self.short = n)
        };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    /// Advances as far as messages allow; true once the access is over (see `err`).
    /// `data` is the data stream (the source of a write, the destination of a read).
    pub fn advance(&mut self, st: &mut Ferrite, data: &mut Stream) -> MpiResult<bool> {
        loop {
            match &mut self.step {
                Step::Done => return Ok(true),
                Step::Begin if self.io.size == 1 => {
                    if self.err.is_none() {
                        self.independent(data);
                    }
                    self.step = Step::Done;
                }
                Step::Begin => {
                    let (lo, hi) = posix::span(&self.segs).unwrap_or((u64::MAX, 0));
                    let class = self.err.as_ref().map_or(0, |e| e.class as u64);
                    let rec = [lo, hi, u64::from(self.segs.len() > 1), class];
                    let bytes: Vec<u8> = rec.iter().flat_map(|w| w.to_le_bytes()).collect();
                    self.step = Step::Plan(st.start_gather(self.io.comm, &bytes, self.tag)?);
                }
                Step::Plan(g) => {
                    let Some(all) = g.poll(st)? else {
                        return Ok(false);
                    };
                    let all: Vec<u64> = (0..all.len() / 8).map(|i| get_u64(&all, i)).collect();
                    if let Some(k) = all.chunks(RECORD).position(|c| c[3] != 0) {
                        self.fail(crate::mpi_err!(
                            all[k * RECORD + 3] as i32,
                            "the collective access failed on rank {k} before it started"
                        ));
                        self.step = Step::Done;
                        continue;
                    }
                    match plan(&self.io, self.write, &all) {
                        None => {
                            self.independent(data);
                            self.step = Step::Done;
                        }
                        Some(p) => {
                            let by = p.pieces(&self.segs);
                            self.step = self.round(st, p, by, 0, data)?;
                        }
                    }
                }
                Step::Round { x, .. } => {
                    let Some(got) = x.poll(st, &self.io)? else {
                        return Ok(false);
                    };
                    let Step::Round {
                        p, by, r, replies, ..
                    } = std::mem::replace(&mut self.step, Step::Done)
                    else {
                        unreachable!()
                    };
                    if self.write {
                        self.gathered_writes(&got);
                    } else if !replies {
                        // Aggregators answer every rank; the others have nothing to send.
                        let msgs = if p.is_aggregator(self.io.rank, self.io.size) {
                            let (back, err) = serve_reads(&self.io, &got);
                            if let Some(e) = err {
                                self.fail(e);
                            }
                            back.into_iter().enumerate().collect()
                        } else {
                            Vec::new()
                        };
                        let aggrs = (0..p.naggr).map(|a| p.aggr_rank(a, self.io.size));
                        let x = Exchange::post(st, &self.io, self.tag + 2, msgs, aggrs)?;
                        self.step = Step::Round {
                            p,
                            by,
                            r,
                            x,
                            replies: true,
                        };
                        continue;
                    } else {
                        self.take_replies(&p, &by[r], &got, data);
                    }
                    self.step = self.round(st, p, by, r + 1, data)?;
                }
                Step::Agree(g) => {
                    let Some(all) = g.poll(st)? else {
                        return Ok(false);
                    };
                    let classes = (0..all.len() / 4)
                        .map(|i| i32::from_le_bytes(all[i * 4..i * 4 + 4].try_into().unwrap()));
                    if let Some((k, c)) = classes.enumerate().find(|&(_, c)| c != 0) {
                        self.fail(crate::mpi_err!(
                            c,
                            "collective buffering failed on rank {k} (an aggregator)"
                        ));
                    }
                    self.step = Step::Done;
                }
            }
        }
    }

    /// Starts round `r` (or the closing agreement after the last).
    fn round(
        &mut self,
        st: &mut Ferrite,
        p: Plan,
        by: Vec<Vec<Vec<Piece>>>,
        r: usize,
        data: &Stream,
    ) -> MpiResult<Step> {
        if r == by.len() {
            let class = self.err.as_ref().map_or(0, |e| e.class);
            let g = st.start_gather(self.io.comm, &class.to_le_bytes(), self.tag + 3)?;
            return Ok(Step::Agree(g));
        }
        let mut msgs = requests(&p, &by[r], self.io.size);
        if self.write {
            let data = data.src();
            for (a, ps) in by[r].iter().enumerate() {
                let m = &mut msgs[a].1;
                for q in ps {
                    m.extend_from_slice(&data[q.pos as usize..(q.pos + q.len) as usize]);
                }
            }
        }
        let from = if p.is_aggregator(self.io.rank, self.io.size) {
            0..self.io.size
        } else {
            0..0
        };
        let x = Exchange::post(st, &self.io, self.tag + 1, msgs, from)?;
        Ok(Step::Round {
            p,
            by,
            r,
            x,
            replies: false,
        })
    }

    /// An aggregator writes the pieces it was sent for its window.
    fn gathered_writes(&mut self, got: &[Vec<u8>]) {
        let mut pieces: Vec<(u64, &[u8])> = Vec::new();
        for m in got {
            let ws = asked(m);
            let mut at = 8 + 16 * ws.len();
            for (off, len) in ws {
                pieces.push((off, &m[at..at + len as usize]));
                at += len as usize;
            }
        }
        if let Err(e) = aggregate_write(&self.io, &mut pieces) {
            self.fail(e);
        }
    }

    /// Copies the aggregators' answers to this rank's read requests into `data`.
    fn take_replies(&mut self, p: &Plan, round: &[Vec<Piece>], got: &[Vec<u8>], data: &mut Stream) {
        let data = data.dst();
        for (a, ps) in round.iter().enumerate() {
            if ps.is_empty() {
                continue;
            }
            let m = &got[p.aggr_rank(a, self.io.size)];
            let mut at = 8 * ps.len();
            for (k, q) in ps.iter().enumerate() {
                let valid = get_u64(m, k);
                let len = q.len as usize;
                data[q.pos as usize..q.pos as usize + len].copy_from_slice(&m[at..at + len]);
                at += len;
                if valid < q.len {
                    self.short = self.short.min((q.pos + valid) as usize);
                }
            }
        }
    }
}
