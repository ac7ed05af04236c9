//! Receive resources shared per process (the SRQ of the papers) and the credits that keep
//! senders from overrunning them.
//!
//! - The pool: P = K * ceil(log2 n) + B receive buffers (`FERRITE_OFI_SRQ_K`, `_B`; the
//!   sizing rule of shm's shared receive queue, `shm::segment::cell_count`), posted once to
//!   one shared receive context (fi_srx_context) that every endpoint is bound to, where the
//!   provider has shared contexts (libfabric 1.17's tcp provider does). Without them (or
//!   with `FERRITE_OFI_SRQ=0`) each endpoint posts its own 2R buffers, as before.
//! - Credits (`Credits`, sans-IO): a sender sends on a connection only with a credit its
//!   receiver lent it. The receiver lends from the pool: `INIT` (1) per new connection, more to
//!   a connection that keeps using its credits (at most doubling per report) while the pool
//!   has buffers not lent: with a shared pool up to all of it that is not reserved, so one
//!   busy connection can keep a whole window in flight; a connection lent more than its fair
//!   share (the lendable buffers over the connections) grows only while a fair share stays
//!   free for another, and gives back down to its share when the pool is all lent. Without
//!   a shared pool each connection has R = `FERRITE_OFI_CREDITS`. Buffers lent beyond the
//!   pool (more connections than it has room for, at `INIT` each) are taken back as they are
//!   used, down to one per connection.
//!   A buffer the peer used is lent again (or taken back) in the header of our next message
//!   to it, or in a credit message when half its lent buffers are used (or before we block).
//! - Credit messages carry no credit (they would need one to return one, and two idle
//!   processes would then pass credit messages back and forth forever); their buffers are
//!   the pool's reserve, W = P/4. A credit message answers at least one of our messages
//!   not yet acknowledged, so we keep at most W of those (across all connections): at most
//!   W credit messages can be on their way to us. Beyond W a sender borrows a buffer of its
//!   own pool's free part per message (given back as the message is acknowledged): a
//!   process that mostly sends has its pool idle, and that is what its window can use.
//!   Every message also acknowledges the
//!   peer's messages we took. Once half the window is used our messages ask their
//!   receivers to acknowledge at once (a credit message on their next progress), since the
//!   unacknowledged ones may be spread thin over many connections.
//!
//! So at most (lent) + (borrowed) + W + 2 buffers are in use, and lent + borrowed never
//! exceeds the lendable P - W - 3 (apart from `INIT` below): one less than the pool: it is never
//! overrun, nothing waits for a buffer, and nothing is dropped. `INIT` per connection is
//! the one promise made without looking at the pool (both ends start from it): more than
//! P - W - 3 connections at once overcommit it until their first messages give buffers
//! back (`taken_back`); a provider then holds a message until a buffer is posted (tcp
//! leaves it in the socket; verbs retries, receiver-not-ready).

use super::ffi::{self, Domain, Ep, Mr};
use crate::conn::manager::EpId;
use crate::fxhash::FxHashMap;

/// Credits both ends of a new connection start with (no message has passed yet): one, so
/// that (P - W - SLACK) connections fit in the pool before any is overcommitted; the
/// hello's answer lends more.
pub const INIT: u32 = 1;
/// Buffers not lent: two for messages sent without credit as a connection closes (its
/// leftover handshake bytes and the BYE, injected), and one that stays posted, so a pool
/// found empty (`Pool::lowest` 0) means the credits failed.
const SLACK: u32 = 3;

/// Pool buffers for a job of `n` ranks: K * ceil(log2 n) + B (shm's rule).
pub fn pool_size(n: u32, k: u32, b: u32) -> u32 {
    crate::transport::shm::segment::cell_count(n, k, b)
}

/// One connection's credit state, both directions.
#[derive(Clone, Copy, Debug, Default)]
struct Link {
    /// Sending: buffers the peer lent us, not yet used.
    credits: u32,
    /// Sending: our messages (with credit) the peer has not acknowledged yet.
    unacked: u32,
    /// Receiving: buffers we lent the peer (its credits, its messages in flight and those
    /// taken but not yet reported).
    lent: u32,
    /// Receiving: the peer's messages we took and have not reported.
    acks: u32,
    /// Receiving: the peer asked for its acknowledgements at once (its window fills).
    asked: bool,
}

/// What a message's header carries back to its receiver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grant {
    /// Buffers lent (again or anew).
    pub credits: u32,
    /// The receiver's messages acknowledged.
    pub acks: u32,
    /// The sender's window is half full: acknowledge its messages now, not at half the
    /// lent buffers (their acknowledgements may be spread over many connections).
    pub ask: bool,
}

/// Credit accounting of one process: the pool it lends from and what each connection
/// holds. Pure; the transport reports messages and asks what it may send.
#[derive(Debug)]
pub struct Credits {
    /// Buffers of ours not lent to anyone nor borrowed for our window (negative: lent
    /// beyond the pool).
    free: i64,
    /// Buffers lendable in all (P - W - SLACK; without a pool, unbounded).
    lendable: i64,
    /// Most buffers lent on one connection (R without a pool; with one, `lendable`).
    cap: u32,
    /// Messages of ours unacknowledged that need no borrowed buffer (W).
    window: u32,
    unacked: u32,
    /// Buffers of `free` taken for messages unacknowledged beyond `window`.
    borrowed: u32,
    links: FxHashMap<EpId, Link>,
    /// Buffers taken back from connections lent beyond the pool.
    pub taken_back: u64,
    /// Times a send waited for the window (credit messages' reserve).
    pub window_waits: u64,
}

impl Credits {
    /// Accounting for a pool of `pool` buffers, at most `cap` lent per connection (and
    /// never more than the pool's lendable part).
    /// Per-connection buffers (no shared pool): pass `pool` = None; each connection then
    /// has its own 2R buffers, R lent and R for the credit messages.
    pub fn new(pool: Option<u32>, cap: u32) -> Credits {
        let (free, window) = match pool {
            Some(p) => {
                let w = (p / 4).max(1);
                (i64::from(p) - i64::from(w) - i64::from(SLACK), w)
            }
            None => (i64::MAX / 2, u32::MAX),
        };
        Credits {
            free,
            lendable: free,
            cap: (i64::from(cap).min(free.max(1)) as u32).max(INIT),
            window,
            unacked: 0,
            borrowed: 0,
            links: FxHashMap::default(),
            taken_back: 0,
            window_waits: 0,
        }
    }

    /// The credit-message reserve (W); u32::MAX without a shared pool.
    pub fn window(&self) -> u32 {
        self.window
    }

    /// A connection is up: both ends start with `INIT` credits.
    pub fn open(&mut self, ep: EpId) {
        self.close(ep);
        self.free -= i64::from(INIT);
        self.links.insert(
            ep,
            Link {
                credits: INIT,
                lent: INIT,
                ..Link::default()
            },
        );
    }

    /// A connection is gone: what it was lent is free again, its unacknowledged messages
    /// no longer count (no credit message can come for them).
    pub fn close(&mut self, ep: EpId) {
        if let Some(l) = self.links.remove(&ep) {
            self.free += i64::from(l.lent);
            self.unacked -= l.unacked;
            self.give_back();
        }
    }

    /// Borrowed buffers no longer needed for our window go back to the pool.
    fn give_back(&mut self) {
        let need = self.unacked.saturating_sub(self.window);
        if self.borrowed > need {
            self.free += i64::from(self.borrowed - need);
            self.borrowed = need;
        }
    }

    /// A connection's fair share of the lendable buffers (at least `INIT`).
    fn fair(&self) -> i64 {
        (self.lendable / self.links.len().max(1) as i64).max(i64::from(INIT))
    }

    /// Whether a message with credit may go on `ep` now.
    pub fn can_send(&mut self, ep: EpId) -> bool {
        let Some(l) = self.links.get(&ep) else {
            return false;
        };
        if l.credits == 0 {
            return false;
        }
        // Beyond the reserve the message needs a buffer of our pool's free part for the
        // credit message that may answer it (`sent` takes it).
        if self.unacked >= self.window.saturating_add(self.borrowed) && self.free <= 0 {
            self.window_waits += 1;
            return false;
        }
        true
    }

    /// A message with credit went on `ep`: its header carries the returned grant.
    pub fn sent(&mut self, ep: EpId) -> Grant {
        let mut g = self.grant(ep);
        g.ask = self.asks();
        if let Some(l) = self.links.get_mut(&ep) {
            l.credits -= 1;
            l.unacked += 1;
            self.unacked += 1;
            if self.unacked > self.window.saturating_add(self.borrowed) {
                self.borrowed += 1;
                self.free -= 1;
            }
        }
        g
    }

    /// Whether our messages ask for acknowledgements at once: half the reserve is used
    /// and our pool has little left to borrow.
    fn asks(&self) -> bool {
        self.unacked >= self.window / 2 && self.free < i64::from(self.window)
    }

    /// A message `sent` could not be posted after all (the endpoint's queue was full).
    pub fn unsent(&mut self, ep: EpId, g: Grant) {
        self.restore(ep, g);
        if let Some(l) = self.links.get_mut(&ep) {
            l.credits += 1;
            l.unacked -= 1;
            self.unacked -= 1;
            self.give_back();
        }
    }

    /// A grant that did not go: owed again, and the pool as before it.
    pub fn restore(&mut self, ep: EpId, g: Grant) {
        let Some(l) = self.links.get_mut(&ep) else {
            return;
        };
        l.acks += g.acks;
        let delta = i64::from(g.credits) - i64::from(g.acks);
        l.lent = (i64::from(l.lent) - delta) as u32;
        self.free += delta;
    }

    /// The grant a credit message on `ep` carries (which itself uses no credit), if one
    /// is due: half of what the peer was lent taken, or any when `all` or the peer asked.
    pub fn credit_message(&mut self, ep: EpId, all: bool) -> Option<Grant> {
        let l = self.links.get(&ep)?;
        let due = if all || l.asked {
            1
        } else {
            (l.lent / 2).max(1)
        };
        if l.acks < due {
            return None;
        }
        let mut g = self.grant(ep);
        g.ask = self.asks();
        Some(g)
    }

    /// Acknowledges what the peer sent on `ep` and lends its buffers again: fewer where
    /// the pool is overcommitted (down to one) or all lent (down to a fair share), more
    /// where it has room (up to the cap; beyond a fair share, while one stays free).
    fn grant(&mut self, ep: EpId) -> Grant {
        let fair = self.fair();
        let Some(l) = self.links.get_mut(&ep) else {
            return Grant::default();
        };
        let acks = std::mem::take(&mut l.acks);
        l.asked = false;
        let mut back = acks;
        if self.free < 0 {
            let take = (acks as i64)
                .min(-self.free)
                .min(i64::from(l.lent) - 1)
                .max(0) as u32;
            back -= take;
            l.lent -= take;
            self.free += i64::from(take);
            self.taken_back += u64::from(take);
        } else if self.free == 0 && i64::from(l.lent) > fair {
            // All lent: a connection above its share gives back as it reports, so that
            // the others can grow.
            let take = (acks as i64).min(i64::from(l.lent) - fair) as u32;
            back -= take;
            l.lent -= take;
            self.free += i64::from(take);
        } else if acks > 0 && self.free > 0 && l.lent < self.cap {
            // Grows with use (at most doubling per report); above its fair share only
            // while a fair share stays free for another connection.
            let room = if i64::from(l.lent) >= fair {
                self.free - fair
            } else {
                self.free
            };
            let more = room
                .min(i64::from(self.cap - l.lent))
                .min(i64::from(acks))
                .max(0) as u32;
            back += more;
            l.lent += more;
            self.free -= i64::from(more);
        }
        Grant {
            credits: back,
            acks,
            ask: false,
        }
    }

    /// A message came on `ep` with the peer's grant; `credited`: it used a credit (all but
    /// credit messages), so we owe the peer its buffer.
    pub fn received(&mut self, ep: EpId, g: Grant, credited: bool) {
        let Some(l) = self.links.get_mut(&ep) else {
            return;
        };
        l.credits += g.credits;
        let a = g.acks.min(l.unacked);
        l.unacked -= a;
        self.unacked -= a;
        if credited {
            l.acks += 1;
        }
        l.asked |= g.ask;
        if a > 0 {
            self.give_back();
        }
    }

    /// Sending credits left on `ep` (tests, reports).
    pub fn credits(&self, ep: EpId) -> u32 {
        self.links.get(&ep).map_or(0, |l| l.credits)
    }

    /// Buffers lent in all (the pool's use, apart from the reserve).
    pub fn lent(&self) -> u64 {
        self.links.values().map(|l| u64::from(l.lent)).sum()
    }

    /// Buffers of our pool borrowed for our window (tests, reports).
    pub fn borrowed(&self) -> u32 {
        self.borrowed
    }

    /// Connections with a credit message due (`credit_message`).
    pub fn links(&self) -> Vec<EpId> {
        self.links.keys().copied().collect()
    }
}

/// The shared receive context and its posted buffers.
pub struct Pool {
    // Field order: the context (its posted receives) goes before the memory they name.
    srx: Ep,
    mr: Mr,
    buf: Vec<u8>,
    len: usize,
    count: usize,
    /// Buffers posted now.
    posted: usize,
    /// The fewest buffers that were still posted as a message took one (count - 1 when the
    /// credits work and nothing ever waited).
    pub lowest: usize,
}

impl Pool {
    /// One context with `count` buffers of `len` bytes, registered with `key`, posted with
    /// completion contexts `ctx(i)`.
    pub fn new(
        domain: &Domain,
        cq: &ffi::Cq,
        count: usize,
        len: usize,
        key: u64,
        ctx: impl Fn(usize) -> usize,
    ) -> Result<Pool, String> {
        let srx = domain.srx(count, cq)?;
        let mut buf = vec![0u8; count * len];
        // SAFETY: buf lives in the pool with this registration; the context (and with it
        // every receive posted into buf) is closed first (field order).
        let mr = unsafe { domain.mr_reg(buf.as_mut_ptr() as u64, buf.len(), ffi::FI_RECV, key) }?;
        let mut p = Pool {
            srx,
            mr,
            buf,
            len,
            count,
            posted: 0,
            lowest: count,
        };
        for i in 0..count {
            p.repost(i, ctx(i))?;
        }
        Ok(p)
    }

    pub fn srx(&self) -> &Ep {
        &self.srx
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes posted (buffers times their size).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Buffer `i` holds a message of `n` bytes: its bytes, until it is posted again.
    pub fn take(&mut self, i: usize, n: usize) -> &[u8] {
        self.posted -= 1;
        self.lowest = self.lowest.min(self.posted);
        &self.buf[i * self.len..i * self.len + n.min(self.len)]
    }

    /// Posts buffer `i` again (completion context `ctx`).
    pub fn repost(&mut self, i: usize, ctx: usize) -> Result<(), String> {
        // SAFETY: buffer i of the pool, which outlives the context; not touched until its
        // completion (`take`).
        let ok = unsafe {
            self.srx.recv(
                self.buf.as_mut_ptr().add(i * self.len),
                self.len,
                self.mr.desc(),
                ctx,
            )
        }?;
        if !ok {
            return Err("fi_recv (shared receive context): queue full".into());
        }
        self.posted += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn pool_is_k_log2_n_plus_b() {
        assert_eq!(pool_size(1, 16, 64), 64);
        assert_eq!(pool_size(16, 16, 64), 128);
        assert_eq!(pool_size(17, 16, 64), 144);
        assert_eq!(pool_size(64, 16, 64), 160);
        assert_eq!(pool_size(8, 2, 6), 12);
    }

    /// A message in the simulation: (credited, grant, carries data).
    type Msg = (bool, Grant, bool);

    /// `senders` processes flood process 0 (pool `pool`, cap `cap`) with `each` messages,
    /// process 0 answers some; delivery order and who runs are random, process 0 sometimes
    /// stays away for a while. Returns the most messages process 0 held unread at once (the
    /// receive buffers they need), after checking every message arrived.
    fn flood(senders: usize, pool: u32, cap: u32, each: u32, seed: u64) -> u32 {
        let n = senders + 1;
        let mut rng = seed | 1;
        let mut rand = move |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let mut cr: Vec<Credits> = (0..n).map(|_| Credits::new(Some(pool), cap)).collect();
        // Link i joins process 0 and sender i (EpId(i) on both ends).
        for i in 1..n {
            cr[0].open(EpId(i as u64));
            cr[i].open(EpId(i as u64));
        }
        // Wires: to[i] from 0 to i, from[i] from i to 0.
        let mut to: Vec<VecDeque<Msg>> = vec![VecDeque::new(); n];
        let mut from: Vec<VecDeque<Msg>> = vec![VecDeque::new(); n];
        let mut left = vec![each; n];
        left[0] = 0;
        let mut got = vec![0u32; n];
        let mut answers = vec![0u32; n];
        let mut peak = 0u32;
        let mut away = 0u32;
        for _step in 0..2_000_000u32 {
            let unread: u32 = from.iter().map(|q| q.len() as u32).sum();
            peak = peak.max(unread);
            if got[1..].iter().all(|&g| g == each) && unread == 0 && to.iter().all(|q| q.is_empty())
            {
                return peak;
            }
            let who = rand(n as u64) as usize;
            if who == 0 {
                if away > 0 {
                    away -= 1;
                    continue;
                }
                if rand(50) == 0 {
                    away = 200; // out of MPI for a while
                }
                // Reads a few messages, answers some data, returns credits.
                for _ in 0..rand(4) + 1 {
                    let i = rand(senders as u64) as usize + 1;
                    if let Some((credited, g, data)) = from[i].pop_front() {
                        cr[0].received(EpId(i as u64), g, credited);
                        if data {
                            got[i] += 1;
                            if got[i].is_multiple_of(5) {
                                answers[i] += 1;
                            }
                        }
                    }
                }
                for i in 1..n {
                    let ep = EpId(i as u64);
                    if answers[i] > 0 && cr[0].can_send(ep) {
                        answers[i] -= 1;
                        let g = cr[0].sent(ep);
                        to[i].push_back((true, g, true));
                    }
                    let idle = from.iter().all(|q| q.is_empty());
                    if let Some(g) = cr[0].credit_message(ep, idle) {
                        to[i].push_back((false, g, false));
                    }
                }
            } else {
                let i = who;
                let ep = EpId(i as u64);
                while let Some((credited, g, _)) = to[i].pop_front() {
                    cr[i].received(ep, g, credited);
                }
                let mut blocked = left[i] == 0;
                if left[i] > 0 {
                    if cr[i].can_send(ep) {
                        left[i] -= 1;
                        let g = cr[i].sent(ep);
                        from[i].push_back((true, g, true));
                    } else {
                        blocked = true;
                    }
                }
                if let Some(g) = cr[i].credit_message(ep, blocked) {
                    from[i].push_back((false, g, false));
                }
            }
        }
        panic!("stalled: got {got:?} of {each} each, left {left:?}");
    }

    #[test]
    fn many_senders_never_overrun_the_pool_and_never_stall() {
        for seed in 1..6 {
            // 15 senders, the default pool at n = 16 (128), R = 16.
            let peak = flood(15, 128, 16, 400, seed);
            assert!(peak < 128, "seed {seed}: {peak} unread messages, pool 128");
            // A small pool: 7 senders into 12 buffers.
            let peak = flood(7, 12, 16, 300, seed);
            assert!(peak < 12, "seed {seed}: {peak} unread messages, pool 12");
        }
    }

    #[test]
    fn buffers_lent_beyond_the_pool_are_taken_back_down_to_one() {
        // Pool 12: W = 3, lendable 12 - 3 - 3 = 6.
        let mut c = Credits::new(Some(12), 8);
        let take = |c: &mut Credits, ep: u64, msgs: u32| {
            for _ in 0..msgs {
                c.received(EpId(ep), Grant::default(), true);
            }
            let g = c.credit_message(EpId(ep), true).expect("due");
            (g.credits, g.acks)
        };
        c.open(EpId(0));
        c.open(EpId(1));
        // A busy connection is lent more, at most as many as it used (and while free).
        assert_eq!(take(&mut c, 0, 2), (4, 2));
        assert_eq!(c.lent(), 4);
        // Eight more connections at one credit each: lent 12 of 6.
        for i in 2..10 {
            c.open(EpId(i));
        }
        assert_eq!(c.lent(), 12);
        // Connection 0's used buffers are taken back, down to one.
        assert_eq!(take(&mut c, 0, 3), (1, 3));
        assert_eq!((c.lent(), c.taken_back), (10, 2));
        // Closing connections frees their buffers; used ones are lent again, then more.
        for i in 4..10 {
            c.close(EpId(i));
        }
        assert_eq!(take(&mut c, 0, 1), (2, 1));
        assert_eq!(c.lent(), 5);
    }

    #[test]
    fn a_grant_that_did_not_go_is_owed_again() {
        let mut c = Credits::new(Some(128), 16);
        c.open(EpId(0));
        c.received(EpId(0), Grant::default(), true);
        assert!(c.can_send(EpId(0)));
        let g = c.sent(EpId(0));
        assert_eq!((g.credits, g.acks), (2, 1));
        c.unsent(EpId(0), g);
        assert_eq!((c.credits(EpId(0)), c.lent()), (1, 1));
        let g = c.credit_message(EpId(0), true).expect("owed again");
        assert_eq!((g.credits, g.acks), (2, 1));
    }

    /// Bursts as large as the credits allow from each of `busy` senders into one receiver
    /// with `links` connections (pool `pool`, no cap), the receiver returning credits after
    /// each round. Returns each busy sender's largest burst, after checking the receiver's
    /// buffers in use (messages in flight, credit messages it may get, slack) stay within
    /// the pool and the senders' own pools hold what they borrowed.
    fn bursts(pool: u32, links: u64, busy: u64, rounds: u32) -> Vec<u32> {
        let mut rx = Credits::new(Some(pool), u32::MAX);
        let mut tx: Vec<Credits> = (0..busy)
            .map(|_| Credits::new(Some(pool), u32::MAX))
            .collect();
        for i in 0..links {
            rx.open(EpId(i));
        }
        for (i, t) in tx.iter_mut().enumerate() {
            t.open(EpId(i as u64));
        }
        let mut best = vec![0u32; busy as usize];
        for _ in 0..rounds {
            let mut flight = Vec::new();
            for (i, t) in tx.iter_mut().enumerate() {
                let ep = EpId(i as u64);
                let mut n = 0;
                while t.can_send(ep) {
                    flight.push((ep, t.sent(ep)));
                    n += 1;
                }
                best[i] = best[i].max(n);
                assert!(t.lent() + u64::from(t.borrowed()) <= u64::from(pool - pool / 4 - SLACK));
            }
            let lendable = u64::from(pool - pool / 4 - SLACK);
            assert!(rx.lent() <= lendable, "lent {} of {lendable}", rx.lent());
            assert!(flight.len() as u64 <= rx.lent());
            for (ep, g) in flight {
                rx.received(ep, g, true);
            }
            for (i, t) in tx.iter_mut().enumerate() {
                let ep = EpId(i as u64);
                if let Some(g) = rx.credit_message(ep, true) {
                    t.received(ep, g, false);
                }
            }
        }
        best
    }

    #[test]
    fn one_busy_connection_is_lent_the_whole_lendable_pool() {
        // n = 2: P = 80, W = 20, lendable 57; the sender's window borrows past its W.
        let best = bursts(80, 1, 1, 12);
        assert_eq!(best, vec![57]);
    }

    #[test]
    fn busy_connections_share_the_pool_and_idle_ones_keep_their_one() {
        // P = 128 (n = 16), lendable 93, 15 connections (fair share 6), 3 busy.
        let best = bursts(128, 15, 3, 40);
        for b in &best {
            assert!(*b >= 6, "a busy connection got {b}: {best:?}");
        }
        // Two busy of two: each well past a per-connection 16 (`bursts` checks that
        // together they stay within the lendable 93).
        let best = bursts(128, 2, 2, 40);
        assert!(best.iter().all(|&b| b > 16), "{best:?}");
    }
}
