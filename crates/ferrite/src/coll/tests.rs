//! Schedule builders run between simulated ranks: each rank's [`Run`] exchanges through
//! in-memory queues (sends complete at once), all advanced round-robin until done; results
//! are checked against serial computations, for every size 1..=17 and 32.

use super::algo;
use super::reduce::{Reducer, UserKind};
use super::sched::{sl, Link, Plan, Poll, Run, Slice, UserBuf};
use crate::error::MpiResult;
use crate::objects::datatype::Datatype;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::os::raw::{c_int, c_void};
use std::rc::Rc;
use std::sync::Arc;

type Queues = Rc<RefCell<HashMap<(i32, i32, i32), VecDeque<Vec<u8>>>>>;

struct Sim {
    me: i32,
    q: Queues,
    peers: HashSet<i32>,
}

enum H {
    Sent,
    Recv(i32, i32),
    /// Receive into memory: (peer, tag, address, capacity).
    RecvAt(i32, i32, *mut u8, usize),
    /// A receive that completed when posted (bytes).
    Got(usize),
}

impl Link for Sim {
    type H = H;
    fn isend(&mut self, peer: i32, tag: i32, data: Vec<u8>) -> MpiResult<H> {
        self.peers.insert(peer);
        self.q
            .borrow_mut()
            .entry((self.me, peer, tag))
            .or_default()
            .push_back(data);
        Ok(H::Sent)
    }
    fn irecv(&mut self, peer: i32, tag: i32) -> MpiResult<H> {
        self.peers.insert(peer);
        Ok(H::Recv(peer, tag))
    }
    unsafe fn isend_at(&mut self, peer: i32, tag: i32, p: *const u8, len: usize) -> MpiResult<H> {
        // SAFETY: per the contract, `len` readable bytes.
        let data = unsafe { std::slice::from_raw_parts(p, len) }.to_vec();
        self.isend(peer, tag, data)
    }
    unsafe fn irecv_at(&mut self, peer: i32, tag: i32, p: *mut u8, len: usize) -> MpiResult<H> {
        self.peers.insert(peer);
        let h = H::RecvAt(peer, tag, p, len);
        // Like the real layer: a message already there is delivered as the receive is
        // posted (so a schedule reading a slice after posting a receive into it fails).
        Ok(match self.test(&h)? {
            Some((_, n)) => H::Got(n),
            None => h,
        })
    }
    fn test(&mut self, h: &H) -> MpiResult<Option<(Vec<u8>, usize)>> {
        let mut q = self.q.borrow_mut();
        Ok(match *h {
            H::Sent => Some((Vec::new(), 0)),
            H::Got(n) => Some((Vec::new(), n)),
            H::Recv(p, t) => q
                .get_mut(&(p, self.me, t))
                .and_then(|d| d.pop_front())
                .map(|d| {
                    let n = d.len();
                    (d, n)
                }),
            H::RecvAt(p, t, at, cap) => q
                .get_mut(&(p, self.me, t))
                .and_then(|d| d.pop_front())
                .map(|d| {
                    assert!(d.len() <= cap, "message longer than the receive slice");
                    // SAFETY: the run's buffer slice has room for `cap` >= d.len() bytes.
                    unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), at, d.len()) };
                    (Vec::new(), d.len())
                }),
        })
    }
}

/// Runs one plan per rank to completion; returns each rank's buffers and peer count.
fn simulate(plans: Vec<Plan>) -> Vec<(Vec<Vec<u8>>, usize)> {
    let q: Queues = Default::default();
    let mut runs: Vec<(Run<H>, Sim, bool)> = plans
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            // SAFETY: test inputs point at live vectors owned by the caller.
            let run = unsafe { Run::start(Arc::new(p), 7) };
            let sim = Sim {
                me: i as i32,
                q: q.clone(),
                peers: HashSet::new(),
            };
            (run, sim, false)
        })
        .collect();
    for _ in 0..10_000 {
        let mut all = true;
        for (run, sim, done) in runs.iter_mut() {
            if *done {
                continue;
            }
            match run.advance(sim).unwrap() {
                Poll::Done => *done = true,
                Poll::UserLocals => {
                    run.run_user_locals();
                    all = false;
                }
                Poll::Pending => all = false,
            }
        }
        if all {
            assert!(
                q.borrow().values().all(|d| d.is_empty()),
                "unreceived messages"
            );
            return runs
                .into_iter()
                .map(|(r, s, _)| (r.bufs().to_vec(), s.peers.len()))
                .collect();
        }
    }
    panic!("schedules did not complete (deadlock)");
}

/// A plan whose buffer 0 starts as `init` (through an input, so packing is exercised).
fn plan_with(init: &[u8], extra: &[usize]) -> Plan {
    let mut p = Plan::default();
    let b = p.buf(init.len());
    for &e in extra {
        p.buf(e);
    }
    p.inputs.push(UserBuf {
        slice: sl(b, 0, init.len()),
        ptr: init.as_ptr() as usize,
        count: init.len(),
        dt: Arc::new(Datatype::basic(1)),
    });
    p
}

fn sizes() -> Vec<usize> {
    (1..=17).chain([32]).collect()
}

fn ceil_log2(n: usize) -> usize {
    n.next_power_of_two().trailing_zeros() as usize
}

#[test]
fn barrier_touches_2_log_n_peers_at_most() {
    for n in sizes() {
        let plans = (0..n)
            .map(|me| {
                let mut p = Plan::default();
                algo::barrier(&mut p, me, n);
                p
            })
            .collect();
        for (_, peers) in simulate(plans) {
            assert!(peers <= 2 * ceil_log2(n), "n={n} peers={peers}");
        }
    }
}

fn data(rank: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (rank * 31 + i * 7 + 1) as u8).collect()
}

#[test]
fn bcast_both_algorithms_deliver_the_roots_data() {
    for n in sizes() {
        for root in [0, n / 2, n - 1] {
            for large in [false, true] {
                let len = 37;
                let inits: Vec<Vec<u8>> = (0..n)
                    .map(|r| {
                        if r == root {
                            data(root, len)
                        } else {
                            vec![0; len]
                        }
                    })
                    .collect();
                let plans = (0..n)
                    .map(|me| {
                        let mut p = plan_with(&inits[me], &[]);
                        let s = sl(0, 0, len);
                        if large {
                            algo::bcast_scatter_allgather(&mut p, me, n, root, s);
                        } else {
                            algo::bcast_binomial(&mut p, me, n, root, s);
                        }
                        p
                    })
                    .collect();
                for (me, (bufs, _)) in simulate(plans).into_iter().enumerate() {
                    assert_eq!(bufs[0], data(root, len), "n={n} root={root} me={me}");
                }
            }
        }
    }
}

/// Affine maps x -> m*x + c as (m, c) i64 pairs: composition is associative but not
/// commutative, so a result in the wrong order shows. `a op b` = b after a.
unsafe extern "C" fn compose(a: *mut c_void, b: *mut c_void, len: *mut c_int, _dt: *mut c_int) {
    // SAFETY: the engine passes `len` 16-byte elements in each buffer.
    let (a, b, n) = unsafe {
        (
            std::slice::from_raw_parts(a as *const i64, 2 * *len as usize),
            std::slice::from_raw_parts_mut(b as *mut i64, 2 * *len as usize),
            *len as usize,
        )
    };
    for i in 0..n {
        let (m1, c1, m2, c2) = (a[2 * i], a[2 * i + 1], b[2 * i], b[2 * i + 1]);
        b[2 * i] = m2.wrapping_mul(m1);
        b[2 * i + 1] = m2.wrapping_mul(c1).wrapping_add(c2);
    }
}

fn affine(rank: usize, i: usize) -> (i64, i64) {
    ((rank % 3 + 2) as i64, (rank * 5 + i) as i64)
}

fn affine_bytes(rank: usize, count: usize) -> Vec<u8> {
    (0..count)
        .flat_map(|i| {
            let (m, c) = affine(rank, i);
            m.to_ne_bytes().into_iter().chain(c.to_ne_bytes())
        })
        .collect()
}

/// Composition of ranks lo..hi's maps, in rank order.
fn affine_fold(lo: usize, hi: usize, count: usize) -> Vec<u8> {
    (0..count)
        .flat_map(|i| {
            let (mut m, mut c) = (1i64, 0i64);
            for r in lo..hi {
                let (m2, c2) = affine(r, i);
                (m, c) = (m2.wrapping_mul(m), m2.wrapping_mul(c).wrapping_add(c2));
            }
            m.to_ne_bytes().into_iter().chain(c.to_ne_bytes())
        })
        .collect()
}

fn noncommutative() -> Reducer {
    Reducer::User {
        f: UserKind::Int(compose),
        commute: false,
        dt: 0,
        d: Arc::new(Datatype::basic(16)),
    }
}

#[test]
fn allreduce_algorithms_keep_rank_order_for_noncommutative_ops() {
    for n in sizes() {
        for count in [1usize, 5, 40] {
            for rab in [false, true] {
                let len = count * 16;
                let inits: Vec<Vec<u8>> = (0..n).map(|r| affine_bytes(r, count)).collect();
                let plans = (0..n)
                    .map(|me| {
                        let mut p = plan_with(&inits[me], &[len]);
                        p.reducer = Some(noncommutative());
                        let (acc, tmp) = (sl(0, 0, len), sl(1, 0, len));
                        if rab {
                            algo::allreduce_rabenseifner(&mut p, me, n, acc, tmp, 16, None);
                        } else {
                            algo::allreduce_recursive_doubling(&mut p, me, n, acc, tmp, None);
                        }
                        p
                    })
                    .collect();
                let want = affine_fold(0, n, count);
                for (me, (bufs, peers)) in simulate(plans).into_iter().enumerate() {
                    assert_eq!(bufs[0], want, "n={n} count={count} rab={rab} me={me}");
                    assert!(peers <= ceil_log2(n) + 2, "n={n} peers={peers}");
                }
            }
        }
    }
}

/// With the input read in place (`src`, power-of-two sizes): the result in `acc`, which
/// starts with other data, and the input untouched.
#[test]
fn allreduce_from_a_separate_input_keeps_rank_order() {
    for n in [2usize, 4, 8] {
        for count in [1usize, 5, 40] {
            for rab in [false, true] {
                let len = count * 16;
                let inits: Vec<Vec<u8>> = (0..n).map(|r| affine_bytes(r, count)).collect();
                let plans = (0..n)
                    .map(|me| {
                        let mut p = plan_with(&inits[me], &[len, len]);
                        p.reducer = Some(noncommutative());
                        // Garbage where the result goes: nothing may read it first.
                        p.inputs.push(UserBuf {
                            slice: sl(2, 0, len),
                            ptr: inits[(me + 1) % n].as_ptr() as usize,
                            count: len,
                            dt: Arc::new(Datatype::basic(1)),
                        });
                        let (src, tmp, acc) = (sl(0, 0, len), sl(1, 0, len), sl(2, 0, len));
                        if rab {
                            algo::allreduce_rabenseifner(&mut p, me, n, acc, tmp, 16, Some(src));
                        } else {
                            algo::allreduce_recursive_doubling(&mut p, me, n, acc, tmp, Some(src));
                        }
                        p
                    })
                    .collect();
                let want = affine_fold(0, n, count);
                for (me, (bufs, _)) in simulate(plans).into_iter().enumerate() {
                    assert_eq!(bufs[2], want, "n={n} count={count} rab={rab} me={me}");
                    assert_eq!(bufs[0], inits[me], "input changed: n={n} me={me}");
                }
            }
        }
    }
}

#[test]
fn reduce_and_scans_keep_rank_order() {
    for n in sizes() {
        let count = 3;
        let len = count * 16;
        let inits: Vec<Vec<u8>> = (0..n).map(|r| affine_bytes(r, count)).collect();
        for root in [0, n - 1] {
            let plans = (0..n)
                .map(|me| {
                    let mut p = plan_with(&inits[me], &[len]);
                    p.reducer = Some(noncommutative());
                    algo::reduce_binomial(&mut p, me, n, root, sl(0, 0, len), sl(1, 0, len));
                    p
                })
                .collect();
            let res = simulate(plans);
            assert_eq!(res[root].0[0], affine_fold(0, n, count), "reduce n={n}");
        }
        let plans = (0..n)
            .map(|me| {
                let mut p = plan_with(&inits[me], &[len, len]);
                p.reducer = Some(noncommutative());
                algo::scan(
                    &mut p,
                    me,
                    n,
                    sl(0, 0, len),
                    sl(1, 0, len),
                    Some(sl(2, 0, len)),
                );
                p
            })
            .collect();
        for (me, (bufs, _)) in simulate(plans).into_iter().enumerate() {
            assert_eq!(bufs[0], affine_fold(0, me + 1, count), "scan n={n} me={me}");
            if me > 0 {
                assert_eq!(bufs[2], affine_fold(0, me, count), "exscan n={n} me={me}");
            }
        }
    }
}

#[test]
fn gather_scatter_allgather_alltoall_place_every_block() {
    for n in sizes() {
        let bs = 3;
        for root in [0, n / 3] {
            // Gather in relative order: rank r's block lands at (r - root) mod n.
            let inits: Vec<Vec<u8>> = (0..n)
                .map(|r| {
                    let mut v = vec![0; n * bs];
                    let vr = (r + n - root) % n;
                    v[vr * bs..vr * bs + bs].copy_from_slice(&data(r, bs));
                    v
                })
                .collect();
            let plans = (0..n)
                .map(|me| {
                    let mut p = plan_with(&inits[me], &[]);
                    algo::gather_binomial(&mut p, me, n, root, sl(0, 0, n * bs), bs);
                    p
                })
                .collect();
            let res = simulate(plans);
            let want: Vec<u8> = (0..n).flat_map(|i| data((i + root) % n, bs)).collect();
            assert_eq!(res[root].0[0], want, "gather n={n} root={root}");
            // Scatter it back.
            let inits: Vec<Vec<u8>> = (0..n)
                .map(|r| {
                    if r == root {
                        want.clone()
                    } else {
                        vec![0; n * bs]
                    }
                })
                .collect();
            let plans = (0..n)
                .map(|me| {
                    let mut p = plan_with(&inits[me], &[]);
                    algo::scatter_binomial(&mut p, me, n, root, sl(0, 0, n * bs), bs);
                    p
                })
                .collect();
            for (me, (bufs, _)) in simulate(plans).into_iter().enumerate() {
                let vr = (me + n - root) % n;
                assert_eq!(
                    bufs[0][vr * bs..vr * bs + bs],
                    data(me, bs),
                    "scatter n={n}"
                );
            }
        }
        // Bruck allgather: own block first; afterwards block i is rank me+i's.
        let inits: Vec<Vec<u8>> = (0..n)
            .map(|r| {
                let mut v = vec![0; n * bs];
                v[..bs].copy_from_slice(&data(r, bs));
                v
            })
            .collect();
        let plans = (0..n)
            .map(|me| {
                let mut p = plan_with(&inits[me], &[]);
                algo::allgather_bruck(&mut p, me, n, sl(0, 0, n * bs), bs);
                p
            })
            .collect();
        for (me, (bufs, peers)) in simulate(plans).into_iter().enumerate() {
            let want: Vec<u8> = (0..n).flat_map(|i| data((me + i) % n, bs)).collect();
            assert_eq!(bufs[0], want, "bruck allgather n={n}");
            assert!(peers <= 2 * ceil_log2(n));
        }
        // Alltoall, both algorithms: block for rank k from rank r is data(r * 64 + k).
        let blk = |from: usize, to: usize| data(from * 64 + to, bs);
        for bruck in [false, true] {
            let inits: Vec<Vec<u8>> = (0..n)
                .map(|r| {
                    (0..n)
                        .flat_map(|i| blk(r, if bruck { (r + i) % n } else { i }))
                        .collect()
                })
                .collect();
            let plans = (0..n)
                .map(|me| {
                    let mut p = plan_with(&inits[me], &[n * bs]);
                    if bruck {
                        algo::alltoall_bruck(&mut p, me, n, sl(0, 0, n * bs), bs);
                    } else {
                        let s: Vec<Slice> = (0..n).map(|k| sl(0, k * bs, bs)).collect();
                        let r: Vec<Slice> = (0..n).map(|k| sl(1, k * bs, bs)).collect();
                        algo::alltoall_pairwise(&mut p, me, n, &s, &r);
                    }
                    p
                })
                .collect();
            for (me, (bufs, peers)) in simulate(plans).into_iter().enumerate() {
                for j in 0..n {
                    let got = if bruck {
                        let i = (me + n - j) % n;
                        &bufs[0][i * bs..i * bs + bs]
                    } else {
                        &bufs[1][j * bs..j * bs + bs]
                    };
                    assert_eq!(
                        got,
                        blk(j, me),
                        "alltoall bruck={bruck} n={n} me={me} j={j}"
                    );
                }
                if !bruck {
                    assert_eq!(peers, n - 1);
                } else {
                    assert!(peers <= 2 * ceil_log2(n));
                }
            }
        }
    }
}

/// The shared-memory segment's layout: counters written by different ranks on different
/// lines, 8-aligned, data after the counters, slots disjoint and inside the segment.
#[test]
fn shm_layout() {
    use super::shm::Layout;
    for n in [2usize, 3, 16, super::shm::MAX_RANKS] {
        for max in [0usize, 8, 100, 4096, 5000] {
            let l = Layout::new(n, max);
            assert!(l.slot >= max.max(8) && l.slot.is_multiple_of(128));
            let mut spans: Vec<(usize, usize)> = Vec::new();
            for par in 0..2 {
                for r in 0..n {
                    spans.push((l.slot_at(par, r), l.slot));
                    spans.push((l.spread(par, r), n * l.slot));
                }
            }
            spans.sort();
            assert!(spans[0].0 >= (4 * n + 9) * 128, "slots after the counters");
            for w in spans.windows(2) {
                assert!(w[0].0 + w[0].1 <= w[1].0, "slots overlap: n {n} max {max}");
            }
            let mut lines: Vec<usize> = (0..n)
                .flat_map(|r| [l.boxed(0, r), l.boxed(1, r)])
                .chain([l.release(0), l.release(1), l.sleepers()])
                .chain((0..2u64).flat_map(|e| {
                    use super::shm::Until;
                    [Until::Arrived(e), Until::Released(e), Until::Done(e)].map(|u| l.gate(u))
                }))
                .collect();
            lines.sort();
            for w in lines.windows(2) {
                assert!(w[0] + 128 <= w[1], "counters share a line");
            }
            assert!(lines.last().unwrap() + 128 <= spans[0].0);
            assert_eq!(l.contribution(1, n - 1, 56), l.boxed(1, n - 1) + 8);
            assert_eq!(l.contribution(1, n - 1, 57), l.slot_at(1, n - 1));
            assert!((l.boxed(0, 1) + 8 + super::shm::INLINE).is_multiple_of(64));
            assert_eq!(l.blocks(0, 1, 56 / n), l.boxed(0, 1) + 8);
            assert_eq!(l.blocks(0, 1, 56 / n + 1), l.spread(0, 1));
            assert_eq!(l.scattered(1, 0, 56 / n), l.release(1) + 8);
            assert_eq!(l.scattered(1, 0, 57), l.spread(1, 0));
            let last = spans.last().unwrap();
            assert!(last.0 + last.1 <= l.total());
            assert!(l.total() >= 2 * n * l.slot + 2 * l.slot);
        }
    }
}

/// A sleeper's `waiting` word says what it waits for; every word is nonzero and decodes back.
#[test]
fn shm_waiting_words() {
    use super::shm::Until;
    for e in [0u64, 1, 2, 12345, (1 << 56) - 1] {
        for u in [Until::Arrived(e), Until::Released(e), Until::Done(e)] {
            assert_ne!(u.word(), 0);
            assert_eq!(Until::of_word(u.word()), Some(u));
        }
    }
    assert_eq!(Until::of_word(0), None);
    assert_eq!(Until::of_word(7 << 56), None);
}
