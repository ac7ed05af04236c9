//! The matching engine: posted receives and unexpected messages, keyed by (context id,
//! source comm rank, tag), with MPI_ANY_SOURCE and MPI_ANY_TAG. Pure data structure: no I/O.
//!
//! Invariants (MPI 4.1, section 3.5, non-overtaking):
//! - an arriving message matches the *earliest posted* receive that accepts it;
//! - a receive matches the *earliest arrived* unexpected message it accepts. Messages from
//!   one sender on one context are kept in arrival order, which the transports guarantee is
//!   send order.
//!
//! Receives with a specific source live in a per-(context, source) queue and messages in a
//! per-(context, source) queue, so the common case scans only one sender's traffic.
//! ANY_SOURCE receives live in one list per context; every entry carries a sequence number so
//! "earliest" can be decided across lists.

use crate::consts::{MPI_ANY_SOURCE, MPI_ANY_TAG};
use crate::fxhash::FxHashMap;
use std::collections::VecDeque;

struct Entry<T> {
    seq: u64,
    tag: i32,
    item: T,
}

fn tag_ok(want: i32, got: i32) -> bool {
    want == MPI_ANY_TAG || want == got
}

/// Whether a receive for (`want_src`, `want_tag`) takes a message from `src` with `tag`
/// (the queues apply the same rule through their per-source layout).
pub fn envelope_ok(want_src: i32, want_tag: i32, src: i32, tag: i32) -> bool {
    (want_src == MPI_ANY_SOURCE || want_src == src) && tag_ok(want_tag, tag)
}

fn first_match<T>(q: &VecDeque<Entry<T>>, tag: i32, want_is_pattern: bool) -> Option<usize> {
    if want_is_pattern {
        // `tag` is the receive's tag (may be ANY_TAG); entries are concrete messages.
        q.iter().position(|e| tag_ok(tag, e.tag))
    } else {
        // `tag` is a concrete message tag; entries are receive patterns.
        q.iter().position(|e| tag_ok(e.tag, tag))
    }
}

/// A queue map whose emptied queues stay (with their allocation) while the map is small, so
/// a steady exchange with a few peers allocates nothing per message; beyond `KEEP_EMPTY`
/// keys emptied queues are dropped, so memory follows the live traffic.
const KEEP_EMPTY: usize = 64;

/// Unexpected messages of one context, by source, with their count (an ANY_SOURCE receive
/// looks at no source queue when the count is 0).
struct CtxUnexpected<U> {
    count: usize,
    by_src: FxHashMap<i32, VecDeque<Entry<U>>>,
}

/// (context id, source comm rank): the key of a posted queue.
type Key = (u32, i32);

/// Posted receives with a specific source, one queue per (context, source): the queues
/// live in an arena found through a map, and the last queue found is remembered, so a
/// stream of receives and messages between one pair of ranks (osu_bw's windows, a halo
/// exchange's neighbours in turn) finds its queue by one compare instead of a hash lookup.
/// Emptied queues stay (with their allocation) while there are at most `KEEP_EMPTY`;
/// beyond, an emptied queue's arena slot is freed for the next new key.
struct PostedQueues<T> {
    map: FxHashMap<Key, u32>,
    /// Queues by arena index, with their key (a freed slot keeps its last key, not in
    /// `map`, and an empty queue).
    arena: Vec<(Key, VecDeque<Entry<T>>)>,
    free: Vec<u32>,
    /// The last key found and its arena index.
    last: Option<(Key, u32)>,
}

impl<T> Default for PostedQueues<T> {
    fn default() -> Self {
        PostedQueues {
            map: FxHashMap::default(),
            arena: Vec::new(),
            free: Vec::new(),
            last: None,
        }
    }
}

impl<T> PostedQueues<T> {
    /// The arena index of `k`'s queue, if it has one.
    #[inline]
    fn find(&mut self, k: Key) -> Option<u32> {
        if let Some((lk, i)) = self.last {
            if lk == k {
                return Some(i);
            }
        }
        let i = *self.map.get(&k)?;
        self.last = Some((k, i));
        Some(i)
    }

    #[inline]
    fn find_or_insert(&mut self, k: Key) -> u32 {
        if let Some(i) = self.find(k) {
            return i;
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.arena[i as usize].0 = k;
                i
            }
            None => {
                self.arena.push((k, VecDeque::new()));
                self.arena.len() as u32 - 1
            }
        };
        self.map.insert(k, i);
        self.last = Some((k, i));
        i
    }

    #[inline]
    fn queue(&self, i: u32) -> &VecDeque<Entry<T>> {
        &self.arena[i as usize].1
    }

    /// Removes entry `j` of queue `i`: (tag, item). The emptied queue stays unless there
    /// are many (see [`KEEP_EMPTY`]). (Always inlined: called once per arrival, and the
    /// call's own cost was a third of it.)
    #[inline(always)]
    fn take(&mut self, i: u32, j: usize) -> Option<(i32, T)> {
        let (k, q) = &mut self.arena[i as usize];
        let e = if j == 0 { q.pop_front()? } else { q.remove(j)? };
        if q.is_empty() && self.map.len() > KEEP_EMPTY {
            self.map.remove(k);
            self.free.push(i);
            if self.last.is_some_and(|l| l.1 == i) {
                self.last = None;
            }
        }
        Some((e.tag, e.item))
    }
}

/// Posted receives carry `P`, unexpected messages carry `U`.
pub struct Matching<P, U> {
    seq: u64,
    posted: PostedQueues<P>,
    posted_any: FxHashMap<u32, VecDeque<Entry<P>>>,
    unexpected: FxHashMap<u32, CtxUnexpected<U>>,
    n_posted: usize,
    /// Of which ANY_SOURCE receives (in `posted_any`).
    n_posted_any: usize,
    n_unexpected: usize,
    /// The most unexpected messages queued at once (the tool interface's high-water mark).
    peak_unexpected: usize,
}

impl<P, U> Default for Matching<P, U> {
    fn default() -> Self {
        Matching {
            seq: 0,
            posted: PostedQueues::default(),
            posted_any: FxHashMap::default(),
            unexpected: FxHashMap::default(),
            n_posted: 0,
            n_posted_any: 0,
            n_unexpected: 0,
            peak_unexpected: 0,
        }
    }
}

impl<P, U> Matching<P, U> {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    pub fn posted_len(&self) -> usize {
        self.n_posted
    }

    #[inline]
    pub fn unexpected_len(&self) -> usize {
        self.n_unexpected
    }

    pub fn unexpected_peak(&self) -> usize {
        self.peak_unexpected
    }

    /// A message (ctx, src, tag) arrived: removes and returns the earliest posted receive that
    /// accepts it, or None (the caller then calls [`Self::add_unexpected`]).
    pub fn arrive(&mut self, ctx: u32, src: i32, tag: i32) -> Option<P> {
        if self.n_posted == 0 {
            return None;
        }
        let qi = self.posted.find((ctx, src));
        if self.n_posted_any == 0 {
            // No wildcard receive anywhere: one queue, and usually its first entry.
            let i = qi?;
            let j = first_match(self.posted.queue(i), tag, false)?;
            let (_, item) = self.posted.take(i, j)?;
            self.n_posted -= 1;
            return Some(item);
        }
        let specific = qi.and_then(|i| {
            let q = self.posted.queue(i);
            first_match(q, tag, false).map(|j| (i, j, q[j].seq))
        });
        let any = self
            .posted_any
            .get(&ctx)
            .and_then(|q| first_match(q, tag, false).map(|i| (i, q[i].seq)));
        let item = match (specific, any) {
            (Some((i, j, a)), Some((_, b))) if a < b => self.posted.take(i, j),
            (Some((i, j, _)), None) => self.posted.take(i, j),
            (_, Some((j, _))) => {
                self.n_posted_any -= 1;
                take(&mut self.posted_any, ctx, j)
            }
            (None, None) => None,
        };
        if item.is_some() {
            self.n_posted -= 1;
        }
        item.map(|(_, p)| p)
    }

    /// Queues a message no posted receive accepted.
    pub fn add_unexpected(&mut self, ctx: u32, src: i32, tag: i32, u: U) {
        let seq = self.next_seq();
        let c = self.unexpected.entry(ctx).or_insert_with(|| CtxUnexpected {
            count: 0,
            by_src: FxHashMap::default(),
        });
        c.by_src
            .entry(src)
            .or_default()
            .push_back(Entry { seq, tag, item: u });
        c.count += 1;
        self.n_unexpected += 1;
        self.peak_unexpected = self.peak_unexpected.max(self.n_unexpected);
    }

    /// Posts a receive. The caller first tried [`Self::take_unexpected`] with the same pattern.
    pub fn post(&mut self, ctx: u32, src: i32, tag: i32, p: P) {
        let seq = self.next_seq();
        let e = Entry { seq, tag, item: p };
        if src == MPI_ANY_SOURCE {
            self.posted_any.entry(ctx).or_default().push_back(e);
            self.n_posted_any += 1;
        } else {
            let i = self.posted.find_or_insert((ctx, src));
            self.posted.arena[i as usize].1.push_back(e);
        }
        self.n_posted += 1;
    }

    /// The source queue and index of the earliest unexpected message a receive accepts.
    fn locate(&self, ctx: u32, src: i32, tag: i32) -> Option<(i32, usize)> {
        if self.n_unexpected == 0 {
            return None;
        }
        let c = self.unexpected.get(&ctx).filter(|c| c.count > 0)?;
        if src != MPI_ANY_SOURCE {
            let q = c.by_src.get(&src)?;
            return first_match(q, tag, true).map(|i| (src, i));
        }
        c.by_src
            .iter()
            .filter_map(|(&s, q)| first_match(q, tag, true).map(|i| (q[i].seq, s, i)))
            .min_by_key(|&(seq, _, _)| seq)
            .map(|(_, s, i)| (s, i))
    }

    /// Probe: the earliest unexpected message (source, tag, item) the pattern accepts.
    pub fn find_unexpected(&self, ctx: u32, src: i32, tag: i32) -> Option<(i32, i32, &U)> {
        let (s, i) = self.locate(ctx, src, tag)?;
        let e = &self.unexpected[&ctx].by_src[&s][i];
        Some((s, e.tag, &e.item))
    }

    /// Removes and returns the earliest unexpected message (source, tag, item) the pattern
    /// accepts.
    pub fn take_unexpected(&mut self, ctx: u32, src: i32, tag: i32) -> Option<(i32, i32, U)> {
        let (s, i) = self.locate(ctx, src, tag)?;
        let c = self.unexpected.get_mut(&ctx)?;
        let item = take(&mut c.by_src, s, i)?;
        c.count -= 1;
        self.n_unexpected -= 1;
        Some((s, item.0, item.1))
    }

    /// Removes a posted receive (MPI_Cancel). Returns it if it was still posted.
    pub fn cancel_posted(&mut self, is_it: impl Fn(&P) -> bool) -> Option<P> {
        // (Freed arena slots hold empty queues: searching every slot is right.)
        let found = self
            .posted
            .arena
            .iter()
            .enumerate()
            .find_map(|(i, (_, q))| q.iter().position(|e| is_it(&e.item)).map(|j| (i as u32, j)));
        if let Some((i, j)) = found {
            self.n_posted -= 1;
            return self.posted.take(i, j).map(|(_, p)| p);
        }
        let found = self
            .posted_any
            .iter()
            .find_map(|(k, q)| q.iter().position(|e| is_it(&e.item)).map(|i| (*k, i)));
        let (k, i) = found?;
        self.n_posted -= 1;
        self.n_posted_any -= 1;
        take(&mut self.posted_any, k, i).map(|(_, p)| p)
    }
}

/// Removes entry `i` of queue `key`: (tag, item). The emptied queue stays unless the map is
/// large (see [`KEEP_EMPTY`]).
fn take<K: std::hash::Hash + Eq + Copy, T>(
    map: &mut FxHashMap<K, VecDeque<Entry<T>>>,
    key: K,
    i: usize,
) -> Option<(i32, T)> {
    let q = map.get_mut(&key)?;
    let e = if i == 0 { q.pop_front()? } else { q.remove(i)? };
    if q.is_empty() && map.len() > KEEP_EMPTY {
        map.remove(&key);
    }
    Some((e.tag, e.item))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY_S: i32 = MPI_ANY_SOURCE;
    const ANY_T: i32 = MPI_ANY_TAG;

    #[test]
    fn exact_match_and_context_isolation() {
        let mut m: Matching<&str, &str> = Matching::default();
        m.post(0, 1, 5, "r1");
        assert_eq!(m.arrive(1, 1, 5), None, "other context must not match");
        assert_eq!(m.arrive(0, 2, 5), None, "other source must not match");
        assert_eq!(m.arrive(0, 1, 6), None, "other tag must not match");
        assert_eq!(m.arrive(0, 1, 5), Some("r1"));
        assert_eq!(m.posted_len(), 0);
    }

    #[test]
    fn earliest_posted_wins_across_specific_and_wildcard_lists() {
        let mut m: Matching<u32, ()> = Matching::default();
        m.post(0, ANY_S, ANY_T, 1);
        m.post(0, 3, 7, 2);
        m.post(0, 3, ANY_T, 3);
        assert_eq!(m.arrive(0, 3, 7), Some(1), "the wildcard was posted first");
        assert_eq!(m.arrive(0, 3, 7), Some(2));
        assert_eq!(m.arrive(0, 3, 9), Some(3));
        assert_eq!(m.arrive(0, 3, 7), None);

        m.post(0, 3, 7, 4);
        m.post(0, ANY_S, 7, 5);
        assert_eq!(
            m.arrive(0, 3, 7),
            Some(4),
            "the specific one was posted first"
        );
        assert_eq!(m.arrive(0, 4, 7), Some(5));
    }

    #[test]
    fn unexpected_messages_keep_order_per_sender() {
        let mut m: Matching<(), u32> = Matching::default();
        for i in 0..5 {
            m.add_unexpected(0, 1, i % 2, i as u32);
        }
        // ANY_TAG takes them in arrival order; a specific tag skips others but keeps order.
        assert_eq!(m.take_unexpected(0, 1, 1).map(|x| x.2), Some(1));
        assert_eq!(m.take_unexpected(0, 1, ANY_T).map(|x| x.2), Some(0));
        assert_eq!(m.take_unexpected(0, 1, 0).map(|x| x.2), Some(2));
        assert_eq!(m.take_unexpected(0, ANY_S, ANY_T), Some((1, 1, 3)));
        assert_eq!(m.take_unexpected(0, 1, ANY_T), Some((1, 0, 4)));
        assert_eq!(m.take_unexpected(0, 1, ANY_T), None);
        assert_eq!(m.unexpected_len(), 0);
    }

    #[test]
    fn any_source_takes_the_earliest_arrival_over_all_senders() {
        let mut m: Matching<(), char> = Matching::default();
        m.add_unexpected(0, 2, 0, 'a');
        m.add_unexpected(0, 1, 0, 'b');
        m.add_unexpected(0, 2, 1, 'c');
        m.add_unexpected(0, 1, 1, 'd');
        assert_eq!(m.take_unexpected(0, ANY_S, 1), Some((2, 1, 'c')));
        assert_eq!(m.take_unexpected(0, ANY_S, ANY_T), Some((2, 0, 'a')));
        assert_eq!(m.take_unexpected(0, ANY_S, ANY_T), Some((1, 0, 'b')));
        assert_eq!(m.take_unexpected(0, ANY_S, ANY_T), Some((1, 1, 'd')));
    }

    #[test]
    fn probe_then_receive_gets_the_same_message() {
        let mut m: Matching<(), u32> = Matching::default();
        m.add_unexpected(4, 0, 10, 100);
        m.add_unexpected(4, 1, 10, 101);
        let (s, t, &v) = m.find_unexpected(4, ANY_S, ANY_T).unwrap();
        assert_eq!((s, t, v), (0, 10, 100));
        assert_eq!(m.find_unexpected(4, ANY_S, ANY_T).map(|x| *x.2), Some(100));
        assert_eq!(m.take_unexpected(4, s, t), Some((0, 10, 100)));
        assert_eq!(m.find_unexpected(4, ANY_S, 11), None);
    }

    #[test]
    fn many_senders_keep_order_and_emptied_queues_do_not_pile_up() {
        let mut m: Matching<u32, u32> = Matching::default();
        for round in 0..3u32 {
            for s in 0..200 {
                m.add_unexpected(1, s, 7, round * 1000 + s as u32);
            }
        }
        for round in 0..3u32 {
            for s in (0..200).rev() {
                assert_eq!(
                    m.take_unexpected(1, s, 7),
                    Some((s, 7, round * 1000 + s as u32))
                );
            }
        }
        assert_eq!(m.take_unexpected(1, ANY_S, ANY_T), None);
        for s in 0..200 {
            m.post(2, s, ANY_T, s as u32);
        }
        for s in 0..200 {
            assert_eq!(m.arrive(2, s, 3), Some(s as u32));
        }
        assert!(
            m.posted.map.len() <= KEEP_EMPTY + 1,
            "{} posted queues",
            m.posted.map.len()
        );
        // A second round of new keys reuses the freed queues (all but the KEEP_EMPTY kept
        // empty) instead of growing the arena by 200 again.
        for s in 200..400 {
            m.post(2, s, ANY_T, s as u32);
        }
        for s in 200..400 {
            assert_eq!(m.arrive(2, s, 3), Some(s as u32));
        }
        assert_eq!(m.posted.arena.len(), 200 + KEEP_EMPTY);
        assert!(m.unexpected[&1].by_src.len() <= KEEP_EMPTY + 1);
        // Queues kept empty still match in order.
        m.add_unexpected(1, 3, 1, 10);
        m.add_unexpected(1, 2, 1, 11);
        assert_eq!(m.take_unexpected(1, ANY_S, 1), Some((3, 1, 10)));
        assert_eq!(m.take_unexpected(1, ANY_S, 1), Some((2, 1, 11)));
    }

    /// Posted receives against a plain list in posting order (the definition of MPI's
    /// rule): many keys (queues freed and reused, the remembered queue going stale),
    /// wildcards of both kinds, cancels, in a pseudo-random mix.
    #[test]
    fn posted_matching_follows_posting_order_like_a_plain_list() {
        let mut m: Matching<u32, ()> = Matching::default();
        let mut model: Vec<(u32, i32, i32, u32)> = Vec::new(); // (ctx, src, tag, id)
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for id in 0..40_000u32 {
            let r = next();
            let ctx = (r % 3) as u32;
            let src = ((r >> 8) % 90) as i32;
            let tag = ((r >> 16) % 3) as i32;
            match (r >> 24) % 10 {
                0..=4 => {
                    let src = if (r >> 32) % 16 == 0 { ANY_S } else { src };
                    let tag = if (r >> 36) % 8 == 0 { ANY_T } else { tag };
                    m.post(ctx, src, tag, id);
                    model.push((ctx, src, tag, id));
                }
                5..=8 => {
                    let want = model
                        .iter()
                        .position(|&(c, s, t, _)| c == ctx && envelope_ok(s, t, src, tag))
                        .map(|i| model.remove(i).3);
                    assert_eq!(m.arrive(ctx, src, tag), want, "message {ctx}/{src}/{tag}");
                }
                _ => {
                    if model.is_empty() {
                        continue;
                    }
                    let k = (r >> 40) as usize % model.len();
                    let victim = model.remove(k).3;
                    assert_eq!(m.cancel_posted(|&p| p == victim), Some(victim));
                }
            }
            assert_eq!(m.posted_len(), model.len());
        }
    }

    #[test]
    fn cancel_removes_only_the_named_receive() {
        let mut m: Matching<u32, ()> = Matching::default();
        m.post(0, 1, 1, 1);
        m.post(0, ANY_S, 1, 2);
        m.post(0, 1, 1, 3);
        assert_eq!(m.cancel_posted(|&p| p == 2), Some(2));
        assert_eq!(m.cancel_posted(|&p| p == 2), None);
        assert_eq!(m.arrive(0, 1, 1), Some(1));
        assert_eq!(m.cancel_posted(|&p| p == 3), Some(3));
        assert_eq!(m.arrive(0, 1, 1), None);
        assert_eq!(m.posted_len(), 0);
    }
}
