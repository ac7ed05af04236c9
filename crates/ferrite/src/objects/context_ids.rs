//! Context-id agreement: the one protocol every communicator constructor uses to give its
//! new communicator ids that no live communicator of any member uses.
//!
//! A process draws ids from two ranges, each an [`Ids`]: the blocking constructors' (from
//! `FIRST_USER_CONTEXT` up) and MPI_Comm_idup's (from
//! [`NB_FIRST`](super::comm_idup::NB_FIRST) up). Each agreement asks for a block of `n`
//! consecutive ids and runs in rounds; a round is one exchange that gives every member the
//! element-wise maximum of everyone's two words ([`Words`]):
//! 1. propose `[id, vote]`: each member reserves the lowest free block at or above the
//!    floor; the largest proposal is the candidate. `vote` is 1 where agreements may overlap
//!    in the process: under MPI_THREAD_MULTIPLE, or always for nonblocking dups (several
//!    may be pending at once). If no member asks for a vote, the candidate is the id: no
//!    member can have reserved or taken it (each runs one agreement of the range at a
//!    time, and the candidate is at or above every member's `next`), so a process below
//!    MULTIPLE pays the single round constructors always had.
//! 2. vote `[refuse, 0]`: each member says whether the candidate's block is free here and,
//!    if so, reserves it for this agreement, taking it from proposals of other agreements
//!    (a proposal is only a hint; a yes vote is a promise). All yes: it is the id.
//!    Otherwise everyone lets it go and proposes again above it, skipping a random number
//!    of blocks so that agreements of overlapping members that chose the same candidate
//!    (their proposals ordered differently in different processes) part ways.
//!
//! Safety: an id is taken only after every member voted yes; a process gives a yes vote
//! for a block to one agreement at a time and keeps it until the agreement ends, and a
//! taken id moves `next` past it, so no two of a process's communicators share an id.
//! No agreement waits for another (a refused vote moves on to other ids), so agreements
//! in different threads cannot deadlock whatever order their members call them in.

use crate::error::MpiResult;
use crate::state::Held;

/// One round's contribution, reduced by element-wise maximum.
pub type Words = [u32; 2];

/// A range of context ids: what is taken and what pending agreements hold.
pub struct Ids {
    /// Ids below this were taken (or skipped).
    next: u32,
    /// Blocks held by pending agreements: (first id, ids, agreement, voted yes).
    reserved: Vec<(u32, u32, u64, bool)>,
    /// The last agreement's number (numbers are never reused).
    last: u64,
    /// xorshift state for the skips after a refused vote.
    rand: u64,
}

/// One agreement in progress.
pub struct Agreement {
    id: u64,
    /// Ids asked for.
    n: u32,
    floor: u32,
    /// The candidate being voted on, if the round is a vote.
    candidate: Option<u32>,
    /// Whether the members vote (decided by the first round).
    voting: bool,
}

/// What the next round of an agreement is.
pub enum Step {
    /// Exchange these words.
    Send(Words),
    /// The agreed first id.
    Done(u32),
}

fn overlap(a: u32, na: u32, b: u32, nb: u32) -> bool {
    a < b.saturating_add(nb) && b < a.saturating_add(na)
}

impl Ids {
    /// Ids from `first` up; `seed` should differ between processes.
    pub fn new(first: u32, seed: u64) -> Self {
        Ids {
            next: first,
            reserved: Vec::new(),
            last: 0,
            rand: seed | 1,
        }
    }

    /// True if ids `id..id + n` are neither taken nor held by another agreement (a yes
    /// vote, or with `proposals` also a proposal); a block `a` holds already counts as free.
    fn free(&self, id: u32, n: u32, a: u64, proposals: bool) -> bool {
        let own = self.reserved.iter().any(|r| r.2 == a && r.0 == id);
        (own || id >= self.next)
            && !self
                .reserved
                .iter()
                .any(|r| r.2 != a && (r.3 || proposals) && overlap(id, n, r.0, r.1))
    }

    /// The lowest block of `n` at or above `floor` free of takers and holders.
    fn lowest_free(&self, floor: u32, n: u32, a: u64) -> u32 {
        let mut id = floor.max(self.next);
        while let Some(r) = self
            .reserved
            .iter()
            .find(|r| r.2 != a && overlap(id, n, r.0, r.1))
        {
            id = r.0 + r.1;
        }
        id
    }

    fn hold(&mut self, id: u32, n: u32, a: u64, voted: bool) {
        self.release(a);
        if voted {
            // A promise outranks other agreements' proposals here.
            self.reserved.retain(|r| r.3 || !overlap(id, n, r.0, r.1));
        }
        self.reserved.push((id, n, a, voted));
    }

    fn release(&mut self, a: u64) {
        self.reserved.retain(|r| r.2 != a);
    }

    /// Starts an agreement on `n` ids; `vote` if this process may run others in this
    /// range at the same time. Returns it and its first round's words.
    pub fn start(&mut self, n: u32, vote: bool) -> (Agreement, Words) {
        self.last += 1;
        let a = Agreement {
            id: self.last,
            n,
            floor: 0,
            candidate: None,
            voting: false,
        };
        let mine = self.lowest_free(0, n, a.id);
        self.hold(mine, n, a.id, false);
        (a, [mine, vote as u32])
    }

    /// Takes a round's reduced words: the next round, or the agreed id.
    pub fn step(&mut self, a: &mut Agreement, got: Words) -> Step {
        match a.candidate {
            None => {
                let c = got[0];
                a.voting |= got[1] != 0;
                if !a.voting {
                    return Step::Done(self.take(a, c));
                }
                let yes = self.free(c, a.n, a.id, false);
                if yes {
                    self.hold(c, a.n, a.id, true);
                } else {
                    self.release(a.id);
                }
                a.candidate = Some(c);
                Step::Send([!yes as u32, 0])
            }
            Some(c) if got[0] == 0 => Step::Done(self.take(a, c)),
            Some(c) => {
                self.rand ^= self.rand << 13;
                self.rand ^= self.rand >> 7;
                self.rand ^= self.rand << 17;
                a.floor = c + a.n * (1 + (self.rand % 8) as u32);
                a.candidate = None;
                let mine = self.lowest_free(a.floor, a.n, a.id);
                self.hold(mine, a.n, a.id, false);
                Step::Send([mine, 1])
            }
        }
    }

    fn take(&mut self, a: &Agreement, c: u32) -> u32 {
        self.release(a.id);
        self.next = self.next.max(c + a.n);
        c
    }

    /// Ends an agreement that failed (its exchange did).
    pub fn abandon(&mut self, a: &Agreement) {
        self.release(a.id);
    }
}

impl Held {
    /// Agrees on `n` fresh consecutive blocking-range context ids among the members that
    /// `exchange` reaches. `exchange(st, words)` must give every member the element-wise
    /// maximum of all members' words, and may carry the constructor's own data: what its
    /// first call returns besides is returned with the id.
    pub fn agree_context<R>(
        &mut self,
        n: u32,
        mut exchange: impl FnMut(&mut Held, Words) -> MpiResult<(Words, R)>,
    ) -> MpiResult<(u32, R)> {
        let vote = self.thread_level == crate::consts::MPI_THREAD_MULTIPLE;
        let (mut a, mut words) = self.objects.comms.ids.start(n, vote);
        let mut first = None;
        loop {
            let got = match exchange(self, words) {
                Ok((got, r)) => {
                    first.get_or_insert(r);
                    got
                }
                Err(e) => {
                    self.objects.comms.ids.abandon(&a);
                    return Err(e);
                }
            };
            match self.objects.comms.ids.step(&mut a, got) {
                Step::Send(w) => words = w,
                Step::Done(id) => {
                    let r = first.expect("the first round returned");
                    return Ok((id, r));
                }
            }
        }
    }
}

/// The element-wise maximum of `k`-word records (`all` as exchanged) at word `at`.
pub fn max_words(all: &[u32], k: usize, at: usize) -> Words {
    let mut m = [0, 0];
    for r in all.chunks_exact(k) {
        m[0] = m[0].max(r[at]);
        m[1] = m[1].max(r[at + 1]);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs agreements 0 and 1, each over the same two processes, which start and step
    /// them in the orders given (seeds: the processes' random skips); returns the ids.
    fn run(orders: [[usize; 2]; 2], seeds: [u64; 2]) -> Vec<u32> {
        let mut procs = [Ids::new(4, seeds[0]), Ids::new(4, seeds[1])];
        let mut ags: Vec<Vec<Option<(Agreement, Words)>>> = Vec::new();
        for p in 0..2 {
            let mut v = vec![None, None];
            for &k in &orders[p] {
                v[k] = Some(procs[p].start(2, true));
            }
            ags.push(v);
        }
        let mut done = [[None; 2]; 2];
        for _ in 0..100 {
            let got: Vec<Words> = (0..2)
                .map(|k| {
                    let w: Vec<u32> = (0..2).flat_map(|p| ags[p][k].as_ref().unwrap().1).collect();
                    max_words(&w, 2, 0)
                })
                .collect();
            for p in 0..2 {
                for &k in &orders[p] {
                    if done[p][k].is_some() {
                        continue;
                    }
                    let (a, w) = ags[p][k].as_mut().unwrap();
                    match procs[p].step(a, got[k]) {
                        Step::Send(n) => *w = n,
                        Step::Done(id) => done[p][k] = Some(id),
                    }
                }
            }
            if done.iter().flatten().all(Option::is_some) {
                break;
            }
        }
        assert_eq!(done[0], done[1], "both processes agree");
        done[0].iter().map(|d| d.expect("agreed")).collect()
    }

    #[test]
    fn single_round_without_vote() {
        let mut p = Ids::new(4, 1);
        let mut q = Ids::new(10, 2);
        let (mut a, wa) = p.start(2, false);
        let (mut b, wb) = q.start(2, false);
        let got = max_words(&[wa, wb].concat(), 2, 0);
        assert!(matches!(p.step(&mut a, got), Step::Done(10)));
        assert!(matches!(q.step(&mut b, got), Step::Done(10)));
        assert_eq!((p.next, q.next), (12, 12));
    }

    #[test]
    fn a_yes_vote_excludes_every_other_holder() {
        let mut p = Ids::new(4, 1);
        let (mut a, _) = p.start(6, true);
        let (mut b, wb) = p.start(2, true);
        assert_eq!(wb, [10, 1]);
        // a's candidate is b's proposal: a takes it from b.
        assert!(matches!(p.step(&mut a, [10, 1]), Step::Send([0, 0])));
        // b's candidate is its own proposal, now promised to a: refused.
        assert!(matches!(p.step(&mut b, [10, 1]), Step::Send([1, 0])));
        assert!(matches!(p.step(&mut a, [0, 0]), Step::Done(10)));
        assert!(!p.free(10, 2, b.id, false) && !p.free(15, 2, b.id, false));
        assert!(p.free(16, 2, b.id, false));
    }

    #[test]
    fn agreements_in_different_orders_get_distinct_ids() {
        for seed in 1..50 {
            let ids = run([[0, 1], [1, 0]], [seed, seed * 7919]);
            assert!(ids[0].abs_diff(ids[1]) >= 2, "{ids:?}");
            let ids = run([[0, 1], [0, 1]], [seed, seed + 1]);
            assert!(ids[0].abs_diff(ids[1]) >= 2, "{ids:?}");
        }
    }
}
