//! Collective buffering (two-phase I/O, as ROMIO): for a collective access whose pieces
//! interleave across ranks, `cb_nodes` aggregator ranks each own one contiguous file domain
//! of the accessed range. In rounds of `cb_buffer_size` bytes per aggregator, every rank
//! sends the pieces that fall in each aggregator's current window (one MPI_Alltoallv), and
//! the aggregator makes one large write of the window (reading it first when the pieces
//! leave holes, under an exclusive byte-range lock); reads go the other way. A strided
//! collective write thus becomes a few large contiguous writes instead of many small ones.
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

use super::access::{read_indep, write_indep};
use super::coll;
use super::file::FileObj;
use super::hints::Switch;
use super::posix::{self, RangeLock};
use super::view::Seg;
use crate::error::MpiResult;

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

/// Decides (collectively) whether to use two-phase I/O, and how.
fn plan(f: &FileObj, segs: &[Seg], write: bool) -> MpiResult<Option<Plan>> {
    let sw = if write {
        f.hints.cb_write
    } else {
        f.hints.cb_read
    };
    if sw == Switch::Disable || f.atomic || f.size == 1 {
        return Ok(None);
    }
    let (lo, hi) = posix::span(segs).unwrap_or((u64::MAX, 0));
    let all = coll::allgather_u64(f.comm, &[lo, hi, u64::from(segs.len() > 1)], f.size)?;
    let mut ranges: Vec<(u64, u64)> = all
        .chunks(3)
        .filter(|c| c[0] < c[1])
        .map(|c| (c[0], c[1]))
        .collect();
    if ranges.is_empty() {
        return Ok(None);
    }
    if sw == Switch::Automatic {
        let noncontig = all.chunks(3).any(|c| c[2] != 0);
        ranges.sort_unstable();
        let interleave = ranges.windows(2).any(|w| w[1].0 < w[0].1);
        if !(noncontig && interleave) {
            return Ok(None);
        }
    }
    let gmin = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let gmax = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    let naggr = f.hints.cb_nodes.clamp(1, f.size);
    let domain = (gmax - gmin).div_ceil(naggr as u64).max(1);
    let cb = f.hints.cb_buffer_size.max(1);
    Ok(Some(Plan {
        gmin,
        domain,
        naggr,
        cb,
        rounds: domain.div_ceil(cb),
    }))
}

fn put_u64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

fn get_u64(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap())
}

/// One round's requests, one message per rank: to each aggregator this rank has pieces
/// for, their count and `(file offset, length)` pairs (a write appends the data after).
fn requests(p: &Plan, round: &[Vec<Piece>], size: usize) -> Vec<Vec<u8>> {
    let mut send = vec![Vec::new(); size];
    for (a, ps) in round.iter().enumerate() {
        if ps.is_empty() {
            continue;
        }
        let m = &mut send[p.aggr_rank(a, size)];
        put_u64(m, ps.len() as u64);
        for q in ps {
            put_u64(m, q.off);
            put_u64(m, q.len);
        }
    }
    send
}

/// A collective write of `data` (stream order) to `segs`.
pub fn write(f: &FileObj, segs: &[Seg], data: &[u8]) -> MpiResult<()> {
    let Some(p) = plan(f, segs, true)? else {
        return write_indep(f, segs, data);
    };
    let by = p.pieces(segs);
    for round in &by {
        let mut send = requests(&p, round, f.size);
        for (a, ps) in round.iter().enumerate() {
            let m = &mut send[p.aggr_rank(a, f.size)];
            for q in ps {
                m.extend_from_slice(&data[q.pos as usize..(q.pos + q.len) as usize]);
            }
        }
        let recv = coll::alltoallv(f.comm, &send)?;
        // Pieces this rank aggregates: (offset, bytes).
        let mut got: Vec<(u64, &[u8])> = Vec::new();
        for m in &recv {
            if m.is_empty() {
                continue;
            }
            let n = get_u64(m, 0) as usize;
            let mut at = 8 + 16 * n;
            for k in 0..n {
                let (off, len) = (get_u64(m, 1 + 2 * k), get_u64(m, 2 + 2 * k) as usize);
                got.push((off, &m[at..at + len]));
                at += len;
            }
        }
        aggregate_write(f, &mut got)?;
    }
    Ok(())
}

/// An aggregator writes the pieces of one window: one write of their span, read first
/// (under an exclusive lock) when they leave holes.
fn aggregate_write(f: &FileObj, got: &mut [(u64, &[u8])]) -> MpiResult<()> {
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
    if holes && !f.readable {
        // Write-only file: no read-modify-write, so piece by piece.
        for g in got.iter() {
            posix::pwrite(&f.fd, g.1, g.0)?;
        }
        return Ok(());
    }
    let _l = if holes {
        Some(RangeLock::new(&f.fd, lo, hi - lo, true)?)
    } else {
        None
    };
    let mut buf = vec![0u8; (hi - lo) as usize];
    if holes {
        posix::pread(&f.fd, &mut buf, lo)?;
    }
    for g in got.iter() {
        let b = (g.0 - lo) as usize;
        buf[b..b + g.1.len()].copy_from_slice(g.1);
    }
    posix::pwrite(&f.fd, &buf, lo)
}

/// A collective read of `segs` into `data` (stream order); returns the bytes read before the
/// first that lies past the end of the file.
pub fn read(f: &FileObj, segs: &[Seg], data: &mut [u8]) -> MpiResult<usize> {
    let Some(p) = plan(f, segs, false)? else {
        return read_indep(f, segs, data);
    };
    let by = p.pieces(segs);
    let mut short = data.len() as u64;
    for round in &by {
        let send = requests(&p, round, f.size);
        let asks = coll::alltoallv(f.comm, &send)?;
        let replies = serve_reads(f, &asks)?;
        let back = coll::alltoallv(f.comm, &replies)?;
        for (a, ps) in round.iter().enumerate() {
            if ps.is_empty() {
                continue;
            }
            let m = &back[p.aggr_rank(a, f.size)];
            let mut at = 8 * ps.len();
            for (k, q) in ps.iter().enumerate() {
                let valid = get_u64(m, k);
                let len = q.len as usize;
                data[q.pos as usize..q.pos as usize + len].copy_from_slice(&m[at..at + len]);
                at += len;
                if valid < q.len {
                    short = short.min(q.pos + valid);
                }
            }
        }
    }
    Ok(short as usize)
}

/// An aggregator reads the span its requesters asked for in one read and answers each
/// with (bytes valid before end of file per piece, then the pieces' bytes).
fn serve_reads(f: &FileObj, asks: &[Vec<u8>]) -> MpiResult<Vec<Vec<u8>>> {
    let mut want: Vec<Vec<(u64, u64)>> = Vec::with_capacity(asks.len());
    for m in asks {
        let n = if m.is_empty() {
            0
        } else {
            get_u64(m, 0) as usize
        };
        want.push(
            (0..n)
                .map(|k| (get_u64(m, 1 + 2 * k), get_u64(m, 2 + 2 * k)))
                .collect(),
        );
    }
    let all = want.iter().flatten();
    let lo = all.clone().map(|w| w.0).min();
    let hi = all.map(|w| w.0 + w.1).max();
    let (Some(lo), Some(hi)) = (lo, hi) else {
        return Ok(vec![Vec::new(); asks.len()]);
    };
    let mut buf = vec![0u8; (hi - lo) as usize];
    let got = lo + posix::pread(&f.fd, &mut buf, lo)? as u64;
    Ok(want
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
        .collect())
}
