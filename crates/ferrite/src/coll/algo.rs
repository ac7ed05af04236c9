//! Schedule builders: one function per algorithm, adding rounds to a [`Plan`] for rank `me`
//! of `n`. They only describe data movement between byte slices; the caller (coll/mod.rs)
//! packs user data into the input slices and unpacks the outputs. Costs (α latency, β per
//! byte, γ per reduced byte, m message bytes) are in docs/collectives.md.

use super::sched::{sl, Local, Plan, Slice};

/// Smallest power of two >= n (n >= 1).
fn ceil_pow2(n: usize) -> usize {
    n.next_power_of_two()
}

/// Largest power of two <= n (n >= 1).
fn floor_pow2(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

fn sub(s: Slice, off: usize, len: usize) -> Slice {
    sl(s.buf, s.off + off, len)
}

/// Dissemination barrier: ceil(log2 n) rounds; in round k send to me+2^k, receive from
/// me-2^k (one byte each way).
pub fn barrier(p: &mut Plan, me: usize, n: usize) {
    let b = p.buf(2);
    let mut k = 1;
    while k < n {
        p.sendrecv(
            ((me + k) % n) as i32,
            vec![sl(b, 0, 1)],
            ((me + n - k) % n) as i32,
            vec![sl(b, 1, 1)],
        );
        k <<= 1;
    }
}

/// Binomial-tree broadcast of `data` from `root`.
pub fn bcast_binomial(p: &mut Plan, me: usize, n: usize, root: usize, data: Slice) {
    let vr = (me + n - root) % n;
    let real = |v: usize| ((v + root) % n) as i32;
    let mut mask = ceil_pow2(n);
    if vr != 0 {
        mask = vr & vr.wrapping_neg();
        p.recv(real(vr - mask), vec![data]);
    }
    let round = p.round();
    let mut m = mask >> 1;
    while m > 0 {
        if vr + m < n {
            round.xfers.push(super::sched::Xfer {
                send: true,
                peer: real(vr + m),
                parts: vec![data],
                tag: 0,
            });
        }
        m >>= 1;
    }
}

/// Byte range of chunk `i` of `len` bytes split into `k` chunks.
fn chunk(len: usize, k: usize, i: usize) -> (usize, usize) {
    let a = i * len / k;
    let b = (i + 1) * len / k;
    (a, b - a)
}

fn chunks(data: Slice, k: usize, from: usize, to: usize) -> Slice {
    let (a, _) = chunk(data.len, k, from);
    let (b, _) = chunk(data.len, k, to);
    sub(data, a, b - a)
}

/// Large broadcast (van de Geijn): binomial scatter of n chunks, then ring allgather.
pub fn bcast_scatter_allgather(p: &mut Plan, me: usize, n: usize, root: usize, data: Slice) {
    let vr = (me + n - root) % n;
    let real = |v: usize| ((v + root) % n) as i32;
    let mut mask = ceil_pow2(n);
    if vr != 0 {
        mask = vr & vr.wrapping_neg();
        let hi = (vr + mask).min(n);
        p.recv(real(vr - mask), vec![chunks(data, n, vr, hi)]);
    }
    let mut m = mask >> 1;
    let round = p.round();
    while m > 0 {
        if vr + m < n {
            let hi = (vr + 2 * m).min(n);
            round.xfers.push(super::sched::Xfer {
                send: true,
                peer: real(vr + m),
                parts: vec![chunks(data, n, vr + m, hi)],
                tag: 0,
            });
        }
        m >>= 1;
    }
    // Ring allgather on relative ranks: step s passes chunk vr-s to the right.
    for s in 0..n.saturating_sub(1) {
        let send = (vr + n - s) % n;
        let recv = (vr + n - s - 1) % n;
        p.sendrecv(
            real((vr + 1) % n),
            vec![chunks(data, n, send, send + 1)],
            real((vr + n - 1) % n),
            vec![chunks(data, n, recv, recv + 1)],
        );
    }
}

/// Pairs ranks beyond the largest power of two p2 <= n with a neighbour so the rest can use
/// a power-of-two algorithm: ranks 2i and 2i+1 (i < n - p2) combine at 2i+1 (in rank order).
/// Returns this rank's index among the p2 remaining ranks (None if it sits out), and maps
/// indices back to ranks.
struct Fold {
    p2: usize,
    rem: usize,
}

impl Fold {
    fn new(n: usize) -> Fold {
        let p2 = floor_pow2(n);
        Fold { p2, rem: n - p2 }
    }
    fn index(&self, me: usize) -> Option<usize> {
        if me < 2 * self.rem {
            (me % 2 == 1).then_some(me / 2)
        } else {
            Some(me - self.rem)
        }
    }
    fn rank(&self, i: usize) -> usize {
        if i < self.rem {
            2 * i + 1
        } else {
            i + self.rem
        }
    }
    /// Even ranks below 2*rem hand their contribution to the odd neighbour.
    fn fold_in(&self, p: &mut Plan, me: usize, acc: Slice, tmp: Slice) {
        if me < 2 * self.rem {
            if me.is_multiple_of(2) {
                p.send(me as i32 + 1, vec![acc]);
            } else {
                p.recv(me as i32 - 1, vec![tmp]);
                p.local(Local::Reduce { a: tmp, b: acc });
            }
        }
    }
    /// ...and get the result back.
    fn fold_out(&self, p: &mut Plan, me: usize, acc: Slice) {
        if me < 2 * self.rem {
            if me.is_multiple_of(2) {
                p.recv(me as i32 + 1, vec![acc]);
            } else {
                p.send(me as i32 - 1, vec![acc]);
            }
        }
    }
}

/// Combines `mine` with `got` from `peer`, keeping rank order: the lower rank's data is the
/// left operand; the result ends in `mine`.
fn combine(p: &mut Plan, me: usize, peer: usize, mine: Slice, got: Slice) {
    if peer < me {
        p.local(Local::Reduce { a: got, b: mine });
    } else {
        p.local(Local::ReduceIntoA { a: mine, b: got });
    }
}

/// Like [`combine`] for a first exchange whose data arrived in `got` while this rank's own
/// part is `mine` (read only: the user's send buffer): the result ends in `got`.
fn combine_into_got(p: &mut Plan, me: usize, peer: usize, mine: Slice, got: Slice) {
    if peer < me {
        p.local(Local::ReduceIntoA { a: got, b: mine });
    } else {
        p.local(Local::Reduce { a: mine, b: got });
    }
}

/// `src` for the allreduces below: where this rank's input is when it is not in `acc` (only
/// for n a power of two, at least 2). The first exchange then sends from `src` and receives
/// into `acc`, combining there: no pass copying the input into `acc` first.
fn check_src(src: Option<Slice>, n: usize) {
    debug_assert!(src.is_none() || (n >= 2 && n.is_power_of_two()));
}

/// Recursive-doubling allreduce on `acc` (`tmp`: scratch of the same length; `src`: see
/// [`check_src`]): log2 p2 exchanges of the whole vector, plus two for non-power-of-two sizes.
pub fn allreduce_recursive_doubling(
    p: &mut Plan,
    me: usize,
    n: usize,
    acc: Slice,
    tmp: Slice,
    mut src: Option<Slice>,
) {
    check_src(src, n);
    let f = Fold::new(n);
    f.fold_in(p, me, acc, tmp);
    if let Some(i) = f.index(me) {
        let mut mask = 1;
        while mask < f.p2 {
            let peer = f.rank(i ^ mask);
            if let Some(s) = src.take() {
                p.sendrecv(peer as i32, vec![s], peer as i32, vec![acc]);
                combine_into_got(p, me, peer, s, acc);
            } else {
                p.sendrecv(peer as i32, vec![acc], peer as i32, vec![tmp]);
                combine(p, me, peer, acc, tmp);
            }
            mask <<= 1;
        }
    }
    f.fold_out(p, me, acc);
}

/// Rabenseifner allreduce: reduce-scatter by recursive halving (distance doubling, so each
/// partial result covers a contiguous range of ranks and non-commutative operations stay in
/// rank order), then allgather by recursive doubling. `esize`: bytes per element (blocks
/// split on element boundaries).
pub fn allreduce_rabenseifner(
    p: &mut Plan,
    me: usize,
    n: usize,
    acc: Slice,
    tmp: Slice,
    esize: usize,
    mut src: Option<Slice>,
) {
    check_src(src, n);
    let f = Fold::new(n);
    f.fold_in(p, me, acc, tmp);
    if let Some(i) = f.index(me) {
        let count = acc.len / esize.max(1);
        let k = f.p2;
        let at = |b: usize| (b * count / k) * esize;
        let blocks = |lo: usize, hi: usize| (at(lo), at(hi) - at(lo));
        let (mut lo, mut hi) = (0, k);
        let mut ranges = Vec::new();
        let mut mask = 1;
        while mask < k {
            let peer = f.rank(i ^ mask);
            let mid = (lo + hi) / 2;
            let (keep, give) = if i & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let (ko, kl) = blocks(keep.0, keep.1);
            let (go, gl) = blocks(give.0, give.1);
            if let Some(s) = src.take() {
                p.sendrecv(
                    peer as i32,
                    vec![sub(s, go, gl)],
                    peer as i32,
                    vec![sub(acc, ko, kl)],
                );
                combine_into_got(p, me, peer, sub(s, ko, kl), sub(acc, ko, kl));
            } else {
                p.sendrecv(
                    peer as i32,
                    vec![sub(acc, go, gl)],
                    peer as i32,
                    vec![sub(tmp, ko, kl)],
                );
                combine(p, me, peer, sub(acc, ko, kl), sub(tmp, ko, kl));
            }
            ranges.push((lo, hi));
            (lo, hi) = keep;
            mask <<= 1;
        }
        while let Some((plo, phi)) = ranges.pop() {
            mask >>= 1;
            let peer = f.rank(i ^ mask);
            let (mo, ml) = blocks(lo, hi);
            let other = if lo == plo { (hi, phi) } else { (plo, lo) };
            let (oo, ol) = blocks(other.0, other.1);
            p.sendrecv(
                peer as i32,
                vec![sub(acc, mo, ml)],
                peer as i32,
                vec![sub(acc, oo, ol)],
            );
            (lo, hi) = (plo, phi);
        }
    }
    f.fold_out(p, me, acc);
}

/// Binomial reduce in rank order to rank 0 (so non-commutative operations need no
/// reordering), then a hop to `root` if it is not 0. The result is in `acc` at `root`.
pub fn reduce_binomial(p: &mut Plan, me: usize, n: usize, root: usize, acc: Slice, tmp: Slice) {
    let mut mask = 1;
    while mask < n {
        if me & mask != 0 {
            p.send((me - mask) as i32, vec![acc]);
            break;
        }
        if me + mask < n {
            p.recv((me + mask) as i32, vec![tmp]);
            p.local(Local::ReduceIntoA { a: acc, b: tmp });
        }
        mask <<= 1;
    }
    if root != 0 {
        if me == 0 {
            p.send(root as i32, vec![acc]);
        } else if me == root {
            p.recv(0, vec![acc]);
        }
    }
}

/// Binomial gather of `bs`-byte blocks: `g` holds n blocks in relative-rank order (block i
/// is rank (root+i) % n); each rank's own block must be at its relative index.
pub fn gather_binomial(p: &mut Plan, me: usize, n: usize, root: usize, g: Slice, bs: usize) {
    let vr = (me + n - root) % n;
    let real = |v: usize| ((v + root) % n) as i32;
    let blk = |lo: usize, hi: usize| sub(g, lo * bs, (hi - lo) * bs);
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            p.send(real(vr - mask), vec![blk(vr, (vr + mask).min(n))]);
            break;
        }
        if vr + mask < n {
            p.recv(
                real(vr + mask),
                vec![blk(vr + mask, (vr + 2 * mask).min(n))],
            );
        }
        mask <<= 1;
    }
}

/// Binomial scatter, the reverse of [`gather_binomial`] (same layout of `g`).
pub fn scatter_binomial(p: &mut Plan, me: usize, n: usize, root: usize, g: Slice, bs: usize) {
    let vr = (me + n - root) % n;
    let real = |v: usize| ((v + root) % n) as i32;
    let blk = |lo: usize, hi: usize| sub(g, lo * bs, (hi - lo) * bs);
    let mut mask = ceil_pow2(n);
    if vr != 0 {
        mask = vr & vr.wrapping_neg();
        p.recv(real(vr - mask), vec![blk(vr, (vr + mask).min(n))]);
    }
    let round = p.round();
    let mut m = mask >> 1;
    while m > 0 {
        if vr + m < n {
            round.xfers.push(super::sched::Xfer {
                send: true,
                peer: real(vr + m),
                parts: vec![blk(vr + m, (vr + 2 * m).min(n))],
                tag: 0,
            });
        }
        m >>= 1;
    }
}

/// Direct (linear) gather of variable blocks: `blocks[r]` is rank r's block at the root;
/// `mine` is this rank's data (copied locally at the root).
pub fn gatherv_linear(
    p: &mut Plan,
    me: usize,
    n: usize,
    root: usize,
    blocks: &[Slice],
    mine: Slice,
) {
    if me == root {
        let round = p.round();
        for (r, b) in blocks.iter().enumerate().take(n) {
            if r != root {
                round.xfers.push(super::sched::Xfer {
                    send: false,
                    peer: r as i32,
                    parts: vec![*b],
                    tag: 0,
                });
            }
        }
        if mine != blocks[root] {
            round.locals.push(Local::Copy {
                from: mine,
                to: blocks[root],
            });
        }
    } else {
        p.send(root as i32, vec![mine]);
    }
}

/// Direct scatter of variable blocks from the root.
pub fn scatterv_linear(
    p: &mut Plan,
    me: usize,
    n: usize,
    root: usize,
    blocks: &[Slice],
    mine: Slice,
) {
    if me == root {
        let round = p.round();
        for (r, b) in blocks.iter().enumerate().take(n) {
            if r != root {
                round.xfers.push(super::sched::Xfer {
                    send: true,
                    peer: r as i32,
                    parts: vec![*b],
                    tag: 0,
                });
            }
        }
        if mine != blocks[root] {
            round.locals.push(Local::Copy {
                from: blocks[root],
                to: mine,
            });
        }
    } else {
        p.recv(root as i32, vec![mine]);
    }
}

/// Bruck allgather: `b` holds n blocks of `bs`; this rank's block must start at index 0.
/// After ceil(log2 n) rounds block i is rank (me+i) % n's.
pub fn allgather_bruck(p: &mut Plan, me: usize, n: usize, b: Slice, bs: usize) {
    let mut k = 1;
    while k < n {
        let cnt = k.min(n - k);
        p.sendrecv(
            ((me + n - k) % n) as i32,
            vec![sub(b, 0, cnt * bs)],
            ((me + k) % n) as i32,
            vec![sub(b, k * bs, cnt * bs)],
        );
        k <<= 1;
    }
}

/// Ring allgather of variable blocks (`blocks[r]`: rank r's block, own block filled):
/// n-1 steps, each passing one block to the right neighbour.
pub fn allgatherv_ring(p: &mut Plan, me: usize, n: usize, blocks: &[Slice]) {
    for s in 0..n.saturating_sub(1) {
        let send = (me + n - s) % n;
        let recv = (me + n - s - 1) % n;
        p.sendrecv(
            ((me + 1) % n) as i32,
            vec![blocks[send]],
            ((me + n - 1) % n) as i32,
            vec![blocks[recv]],
        );
    }
}

/// Pairwise exchange: in step s send block me+s and receive block me-s (n-1 steps; own
/// block copied locally). `sends[r]`/`recvs[r]`: the blocks for/from rank r.
pub fn alltoall_pairwise(p: &mut Plan, me: usize, n: usize, sends: &[Slice], recvs: &[Slice]) {
    if sends[me].len > 0 {
        p.local(Local::Copy {
            from: sends[me],
            to: recvs[me],
        });
    }
    for s in 1..n {
        let to = (me + s) % n;
        let from = (me + n - s) % n;
        p.sendrecv(to as i32, vec![sends[to]], from as i32, vec![recvs[from]]);
    }
}

/// Bruck alltoall on `t`: n blocks of `bs` where block i must hold the data for rank
/// (me+i) % n. Round k sends every block whose index has bit k set to me+2^k. Afterwards
/// block i holds the data from rank (me-i) % n.
pub fn alltoall_bruck(p: &mut Plan, me: usize, n: usize, t: Slice, bs: usize) {
    let mut k = 1;
    while k < n {
        let parts: Vec<Slice> = (0..n)
            .filter(|i| i & k != 0)
            .map(|i| sub(t, i * bs, bs))
            .collect();
        p.sendrecv(
            ((me + k) % n) as i32,
            parts.clone(),
            ((me + n - k) % n) as i32,
            parts,
        );
        k <<= 1;
    }
}

/// Hillis-Steele scan: round d sends the partial result to me+d and folds in the one from
/// me-d (lower ranks on the left). `x`: this rank's value in, inclusive prefix out; `ex`
/// (if given) gets the exclusive prefix (undefined at rank 0). Returns whether `ex` was set.
pub fn scan(p: &mut Plan, me: usize, n: usize, x: Slice, tmp: Slice, ex: Option<Slice>) -> bool {
    let mut d = 1;
    let mut have_ex = false;
    while d < n {
        let round = p.round();
        if me >= d {
            round.xfers.push(super::sched::Xfer {
                send: false,
                peer: (me - d) as i32,
                parts: vec![tmp],
                tag: 0,
            });
        }
        if me + d < n {
            round.xfers.push(super::sched::Xfer {
                send: true,
                peer: (me + d) as i32,
                parts: vec![x],
                tag: 0,
            });
        }
        if me >= d {
            if let Some(e) = ex {
                if have_ex {
                    round.locals.push(Local::Reduce { a: tmp, b: e });
                } else {
                    round.locals.push(Local::Copy { from: tmp, to: e });
                    have_ex = true;
                }
            }
            round.locals.push(Local::Reduce { a: tmp, b: x });
        }
        d <<= 1;
    }
    have_ex
}

/// Reduces `n` contributions `blocks[0..n]` (rank order) into `blocks[0]` locally.
pub fn chain(p: &mut Plan, blocks: &[Slice]) {
    for b in &blocks[1..] {
        p.local(Local::ReduceIntoA {
            a: blocks[0],
            b: *b,
        });
    }
}
