//! The protocols over an in-memory wire: several `P2p` instances in one process, a fabric
//! that can refuse sends (credits) and refuse single-copy reads.

use super::packet::HEADER_LEN;
use super::request::{Mode, Ptr, Source, Target};
use super::status::Status;
use super::{P2p, Wire};
use crate::consts::*;
use crate::error::{class_of, MpiResult};
use crate::objects::datatype::{Datatype, Datatypes};
use crate::transport::Proc;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

struct Fabric {
    /// Packets in flight per (from, to), in order.
    queues: HashMap<(Proc, Proc), VecDeque<Vec<u8>>>,
    /// Packets a (from, to) pair may have in flight before `try_send` says no.
    credits: usize,
    can_read: bool,
    max_packet: usize,
    reads: usize,
    refusals: usize,
}

struct MemWire<'a> {
    me: Proc,
    fab: &'a mut Fabric,
}

impl Wire for MemWire<'_> {
    fn max_packet(&self, _to: Proc) -> usize {
        self.fab.max_packet
    }
    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> MpiResult<bool> {
        let q = self.fab.queues.entry((self.me, to)).or_default();
        if q.len() >= self.fab.credits {
            self.fab.refusals += 1;
            return Ok(false);
        }
        let pkt = parts.concat();
        assert!(
            pkt.len() <= self.fab.max_packet,
            "packet larger than max_packet"
        );
        q.push_back(pkt);
        Ok(true)
    }
    fn read_remote(&mut self, _from: Proc, addr: u64, dst: &mut [u8]) -> MpiResult<bool> {
        if !self.fab.can_read {
            return Ok(false);
        }
        self.fab.reads += 1;
        // SAFETY: every "process" lives in this test process; `addr` is the address a sender
        // announced in its RTS, which stays valid until that send completes (after FIN).
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(true)
    }
}

struct Sim {
    fab: Fabric,
    procs: Vec<P2p>,
}

impl Sim {
    fn new(n: u32, credits: usize, can_read: bool, eager_limit: usize) -> Sim {
        let procs = (0..n)
            .map(|r| {
                let mut p = P2p::new(r, n);
                p.eager_limit = eager_limit;
                p
            })
            .collect();
        Sim {
            fab: Fabric {
                queues: HashMap::new(),
                credits,
                can_read,
                max_packet: 1024,
                reads: 0,
                refusals: 0,
            },
            procs,
        }
    }

    fn wire(&mut self, me: Proc) -> (&mut P2p, MemWire<'_>) {
        (
            &mut self.procs[me as usize],
            MemWire {
                me,
                fab: &mut self.fab,
            },
        )
    }

    /// One round: every process receives what is in flight to it (in order per sender),
    /// then flushes.
    fn step(&mut self) {
        for me in 0..self.procs.len() as Proc {
            let mut keys: Vec<_> = self
                .fab
                .queues
                .keys()
                .filter(|k| k.1 == me)
                .copied()
                .collect();
            keys.sort();
            for k in keys {
                let pkts: Vec<_> = self.fab.queues.get_mut(&k).unwrap().drain(..).collect();
                for p in pkts {
                    self.procs[me as usize].on_packet(k.0, &p);
                }
            }
            let (p, mut w) = self.wire(me);
            p.flush(&mut w);
        }
    }

    fn run_until(&mut self, mut done: impl FnMut(&Sim) -> bool) {
        for _ in 0..100_000 {
            if done(self) {
                return;
            }
            self.step();
        }
        panic!("simulation did not reach its goal");
    }

    fn settle(&mut self) {
        for _ in 0..50 {
            self.step();
        }
    }

    fn send(&mut self, from: Proc, to: Proc, tag: i32, data: &[u8], mode: Mode) -> MPI_Request {
        let (p, mut w) = self.wire(from);
        let h = p.new_request(MPI_COMM_WORLD, false);
        let src = Source::Owned(Arc::from(data));
        p.start_send(&mut w, h, mode, 0, from as i32, Some(to), tag, &src)
            .unwrap();
        h
    }

    fn recv(&mut self, at: Proc, src: i32, tag: i32, buf: &mut [u8]) -> MPI_Request {
        let p = &mut self.procs[at as usize];
        let h = p.new_request(MPI_COMM_WORLD, true);
        let target = Target::User {
            buf: Ptr(buf.as_mut_ptr()),
            count: buf.len(),
            dt: byte(),
        };
        p.start_recv(h, 0, src, tag, target);
        h
    }

    fn done(&self, at: Proc, h: MPI_Request) -> bool {
        self.procs[at as usize].is_done(h)
    }

    fn status(&self, at: Proc, h: MPI_Request) -> Status {
        self.procs[at as usize].status_of(h).unwrap()
    }
}

fn byte() -> Arc<Datatype> {
    Datatypes::new().get(MPI_BYTE).unwrap()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[1] ^ seed)
        .collect()
}

/// Sends `n` bytes 0 -> 1 and checks exact data, status and both completions.
fn round_trip(sim: &mut Sim, n: usize, recv_first: bool) {
    let data = pattern(n, n as u8);
    let mut buf = vec![0u8; n];
    let (s, r) = if recv_first {
        let r = sim.recv(1, 0, 9, &mut buf);
        (sim.send(0, 1, 9, &data, Mode::Standard), r)
    } else {
        let s = sim.send(0, 1, 9, &data, Mode::Standard);
        sim.settle();
        (s, sim.recv(1, 0, 9, &mut buf))
    };
    sim.run_until(|sim| sim.done(0, s) && sim.done(1, r));
    let st = sim.status(1, r);
    assert_eq!((st.source, st.tag, st.error, st.bytes), (0, 9, 0, n as u64));
    assert!(buf == data, "data of a {n}-byte message differs");
    assert!(!sim.procs[0].has_backlog() && !sim.procs[1].has_backlog());
}

const SIZES: &[usize] = &[0, 1, 983, 984, 985, 3000, 100_003];

#[test]
fn eager_and_rendezvous_by_read_carry_exact_data() {
    let mut sim = Sim::new(2, 64, true, 0);
    for &n in SIZES {
        round_trip(&mut sim, n, true);
        round_trip(&mut sim, n, false);
    }
    assert!(sim.fab.reads > 0, "large messages went by single-copy read");
}

#[test]
fn rendezvous_by_fragments_carries_exact_data() {
    let mut sim = Sim::new(2, 4, false, 0);
    for &n in SIZES {
        round_trip(&mut sim, n, true);
        round_trip(&mut sim, n, false);
    }
    assert_eq!(sim.fab.reads, 0);
    assert!(
        sim.fab.refusals > 0,
        "fragments ran out of credits at times"
    );
}

#[test]
fn sixteen_mib_both_ways() {
    let mut sim = Sim::new(2, 1024, true, 0);
    sim.fab.max_packet = 65536;
    round_trip(&mut sim, 16 << 20, false);
    sim.fab.can_read = false;
    round_trip(&mut sim, 16 << 20, true);
}

#[test]
fn eager_send_completes_at_once_rendezvous_after_the_receiver_has_it() {
    let mut sim = Sim::new(2, 64, true, 100);
    let small = sim.send(0, 1, 1, &[7; 100], Mode::Standard);
    assert!(
        sim.done(0, small),
        "eager send completes when its data is in a packet"
    );
    let big = sim.send(0, 1, 1, &[8; 101], Mode::Standard);
    sim.settle();
    assert!(
        !sim.done(0, big),
        "a rendezvous send waits for the receiver"
    );
    let mut b1 = [0u8; 100];
    let mut b2 = [0u8; 101];
    let r1 = sim.recv(1, 0, 1, &mut b1);
    let r2 = sim.recv(1, 0, 1, &mut b2);
    sim.run_until(|s| s.done(0, big) && s.done(1, r1) && s.done(1, r2));
    assert_eq!((b1, b2), ([7; 100], [8; 101]));
}

/// `bytes`: the receive takes a `Target::Bytes` through `irecv` (MPI_Irecv of a predefined
/// type: a waiter, or a request for rendezvous) instead of a datatype target through
/// `start_recv`.
fn truncation(can_read: bool, n: usize, cap: usize, eager_limit: usize, bytes: bool) {
    let mut sim = Sim::new(2, 8, can_read, eager_limit);
    let data = pattern(n, 3);
    let mut buf = vec![0xEEu8; cap + 64];
    let s = sim.send(0, 1, 5, &data, Mode::Standard);
    let p = &mut sim.procs[1];
    let r = if bytes {
        let target = Target::Bytes {
            buf: Ptr(buf.as_mut_ptr()),
            len: cap,
        };
        p.irecv(MPI_COMM_WORLD, 0, 0, 5, target)
    } else {
        let r = p.new_request(MPI_COMM_WORLD, true);
        let target = Target::User {
            buf: Ptr(buf.as_mut_ptr()),
            count: cap,
            dt: byte(),
        };
        p.start_recv(r, 0, 0, 5, target);
        r
    };
    sim.run_until(|s2| s2.done(0, s) && s2.done(1, r));
    let st = sim.status(1, r);
    assert_eq!(class_of(st.error), MPI_ERR_TRUNCATE);
    assert_eq!(st.bytes, cap as u64);
    assert_eq!(&buf[..cap], &data[..cap]);
    assert!(
        buf[cap..].iter().all(|&b| b == 0xEE),
        "nothing written past the buffer"
    );
    assert_eq!(sim.status(0, s).error, 0, "the sender completes normally");
}

#[test]
fn truncation_eager_read_and_fragments() {
    for bytes in [false, true] {
        truncation(true, 500, 300, 0, bytes);
        truncation(true, 5000, 3001, 0, bytes);
        truncation(false, 5000, 3001, 0, bytes);
        truncation(false, 5000, 0, 0, bytes);
    }
}

#[test]
fn credit_refusals_keep_order_across_eager_and_rendezvous() {
    let mut sim = Sim::new(2, 1, false, 0);
    let msgs: Vec<Vec<u8>> = (0..40)
        .map(|i| pattern(if i % 3 == 0 { 2500 + i } else { 10 + i }, i as u8))
        .collect();
    let mut sends = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        sends.push(sim.send(0, 1, 4, m, Mode::Standard));
        if i % 5 == 4 {
            // Credits come back while older packets still wait in the backlog.
            assert!(sim.procs[0].has_backlog());
            sim.step();
        }
    }
    let mut bufs: Vec<Vec<u8>> = msgs.iter().map(|m| vec![0; m.len() + 10]).collect();
    let recvs: Vec<_> = bufs
        .iter_mut()
        .map(|b| sim.recv(1, MPI_ANY_SOURCE, MPI_ANY_TAG, b))
        .collect();
    sim.run_until(|s| sends.iter().all(|&h| s.done(0, h)) && recvs.iter().all(|&h| s.done(1, h)));
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(sim.status(1, recvs[i]).bytes, m.len() as u64, "message {i}");
        assert!(
            &bufs[i][..m.len()] == m.as_slice(),
            "message {i} out of order"
        );
    }
    assert!(sim.fab.refusals > 0);
}

#[test]
fn sync_send_completes_only_after_match() {
    for eager_limit in [0, 10] {
        let mut sim = Sim::new(2, 8, true, eager_limit);
        let s = sim.send(0, 1, 2, b"hello world", Mode::Sync);
        sim.settle();
        assert!(!sim.done(0, s), "ssend must wait for a matching receive");
        let mut buf = [0u8; 11];
        let r = sim.recv(1, 0, 2, &mut buf);
        sim.run_until(|s2| s2.done(0, s) && s2.done(1, r));
        assert_eq!(&buf, b"hello world");
    }
}

#[test]
fn cancelled_receive_takes_no_message() {
    let mut sim = Sim::new(2, 8, true, 0);
    let mut b1 = [0u8; 4];
    let mut b2 = [0u8; 4];
    let r1 = sim.recv(1, 0, 3, &mut b1);
    sim.procs[1].cancel(r1);
    assert!(sim.done(1, r1));
    assert!(sim.status(1, r1).cancelled);
    sim.send(0, 1, 3, b"abcd", Mode::Standard);
    sim.settle();
    assert_eq!(b1, [0; 4], "a cancelled receive gets no data");
    let r2 = sim.recv(1, 0, 3, &mut b2);
    assert!(sim.done(1, r2));
    assert_eq!(&b2, b"abcd");
    // A matched receive cannot be cancelled any more.
    sim.procs[1].cancel(r2);
    assert!(!sim.status(1, r2).cancelled);
}

#[test]
fn any_source_and_tags_keep_per_sender_order() {
    let mut sim = Sim::new(3, 2, true, 0);
    for i in 0..6u8 {
        sim.send(0, 2, (i % 2) as i32, &[0, i], Mode::Standard);
        sim.send(1, 2, (i % 2) as i32, &[1, i], Mode::Standard);
    }
    sim.settle();
    let mut got: Vec<[u8; 2]> = Vec::new();
    for _ in 0..12 {
        let mut b = [9u8; 2];
        let r = sim.recv(2, MPI_ANY_SOURCE, MPI_ANY_TAG, &mut b);
        sim.run_until(|s| s.done(2, r));
        let st = sim.status(2, r);
        assert_eq!(st.source, b[0] as i32);
        assert_eq!(st.tag, (b[1] % 2) as i32);
        got.push(b);
    }
    for src in 0..2u8 {
        let seq: Vec<u8> = got.iter().filter(|b| b[0] == src).map(|b| b[1]).collect();
        assert_eq!(seq, (0..6).collect::<Vec<_>>(), "sender {src} overtaken");
    }
}

#[test]
fn owned_targets_take_whole_messages() {
    for can_read in [true, false] {
        let mut sim = Sim::new(2, 4, can_read, 0);
        for n in [0usize, 5, 5000] {
            let data = pattern(n, 1);
            sim.send(0, 1, 0, &data, Mode::Standard);
            let p = &mut sim.procs[1];
            let r = p.new_request(MPI_COMM_WORLD, true);
            p.start_recv(r, 0, 0, 0, Target::Owned(Vec::new()));
            sim.run_until(|s| s.done(1, r));
            let req = sim.procs[1].reqs.remove(r).unwrap();
            assert_eq!(req.received.unwrap(), data);
        }
    }
}

#[test]
fn mprobe_then_mrecv_gets_that_message() {
    let mut sim = Sim::new(2, 8, false, 0);
    sim.send(0, 1, 1, &pattern(3000, 1), Mode::Standard);
    sim.send(0, 1, 2, b"second", Mode::Standard);
    sim.settle();
    let p = &mut sim.procs[1];
    assert_eq!(p.probe(0, 0, 2).map(|s| s.bytes), Some(6));
    let (m, st) = p
        .mprobe(MPI_COMM_WORLD, 0, MPI_ANY_SOURCE, MPI_ANY_TAG)
        .unwrap();
    assert_eq!((st.tag, st.bytes), (1, 3000));
    assert_eq!(p.probe(0, 0, 1), None, "the message left the queue");
    let mut buf = vec![0u8; 3000];
    let target = Target::User {
        buf: Ptr(buf.as_mut_ptr()),
        count: 3000,
        dt: byte(),
    };
    let r = p.mrecv(m, target).unwrap();
    sim.run_until(|s| s.done(1, r));
    assert!(buf == pattern(3000, 1));
}

#[test]
fn buffered_send_copies_the_data_and_accounts_space() {
    let mut sim = Sim::new(2, 8, true, 0);
    let mut space = vec![0u8; 5000 + MPI_BSEND_OVERHEAD as usize];
    sim.procs[0].attached = Some(super::bsend::Attached::new(
        Ptr(space.as_mut_ptr()),
        space.len(),
    ));
    let mut data = pattern(5000, 2);
    let expect = data.clone();
    let (p, mut w) = sim.wire(0);
    let h = p.new_request(MPI_COMM_WORLD, false);
    let src = Source::User {
        buf: Ptr(data.as_mut_ptr()),
        count: 5000,
        dt: byte(),
    };
    p.start_send(&mut w, h, Mode::Buffered, 0, 0, Some(1), 0, &src)
        .unwrap();
    assert!(p.bsend_busy());
    let h2 = p.new_request(MPI_COMM_WORLD, false);
    let err = p
        .start_send(&mut w, h2, Mode::Buffered, 0, 0, Some(1), 0, &src)
        .unwrap_err();
    assert_eq!(err.class, MPI_ERR_BUFFER, "the buffer is full");
    data.fill(0); // the user may reuse the buffer: the message was copied
    let mut buf = vec![0u8; 5000];
    let r = sim.recv(1, 0, 0, &mut buf);
    sim.run_until(|s| s.done(1, r) && !s.procs[0].bsend_busy());
    assert!(buf == expect);
}

#[test]
fn packets_never_exceed_max_packet() {
    let mut sim = Sim::new(2, 4, false, 0);
    sim.fab.max_packet = HEADER_LEN + 7;
    round_trip(&mut sim, 7, true);
    round_trip(&mut sim, 50, false);
}

#[test]
fn sync_send_by_fragments_waits_for_the_receiver() {
    let mut sim = Sim::new(2, 2, false, 16);
    let data = pattern(5000, 9);
    let s = sim.send(0, 1, 2, &data, Mode::Sync);
    sim.settle();
    assert!(!sim.done(0, s));
    let mut buf = vec![0u8; 5000];
    let r = sim.recv(1, 0, 2, &mut buf);
    sim.run_until(|s2| s2.done(0, s) && s2.done(1, r));
    assert!(buf == data);
}

#[test]
fn exchange_both_ways_under_credit_pressure() {
    let mut sim = Sim::new(2, 1, false, 0);
    let a = pattern(20_000, 1);
    let b = pattern(30_000, 2);
    let mut ra = vec![0u8; 30_000];
    let mut rb = vec![0u8; 20_000];
    let r0 = sim.recv(0, 1, 0, &mut ra);
    let r1 = sim.recv(1, 0, 0, &mut rb);
    let s0 = sim.send(0, 1, 0, &a, Mode::Standard);
    let s1 = sim.send(1, 0, 0, &b, Mode::Standard);
    sim.run_until(|s| {
        [(0, s0), (0, r0), (1, s1), (1, r1)]
            .iter()
            .all(|&(p, h)| s.done(p, h))
    });
    assert!(ra == b && rb == a);
}

#[test]
fn freed_requests_leave_the_table_when_their_protocol_ends() {
    for can_read in [true, false] {
        let mut sim = Sim::new(2, 4, can_read, 0);
        let data = pattern(4000, 4);
        let s = sim.send(0, 1, 0, &data, Mode::Standard);
        let e = sim.send(0, 1, 0, &data[..10], Mode::Sync);
        for h in [s, e] {
            sim.procs[0].reqs.get_mut(h).unwrap().freed = true;
        }
        let mut b1 = vec![0u8; 4000];
        let mut b2 = vec![0u8; 10];
        let r1 = sim.recv(1, 0, 0, &mut b1);
        let r2 = sim.recv(1, 0, 0, &mut b2);
        sim.procs[1].reqs.get_mut(r1).unwrap().freed = true;
        sim.run_until(|s| s.done(1, r2) && s.procs[0].reqs.is_empty() && s.done(1, r1));
        assert!(b1 == data && b2 == data[..10]);
        assert_eq!(
            sim.procs[1].reqs.len(),
            1,
            "only the unfreed receive is left"
        );
        assert!(!sim.procs[0].has_backlog() && !sim.procs[1].has_backlog());
    }
}

#[test]
fn collective_context_is_separate_from_point_to_point() {
    use super::packet::{Header, Kind};
    let _g = crate::state::for_tests();
    let packet = |ctx: u32, tag: i32, data: &[u8]| {
        let h = Header {
            kind: Kind::Eager,
            context: ctx,
            src: 0,
            tag,
            len: data.len() as u64,
            sreq: 0,
            rreq: 0,
            arg: 0,
        };
        let mut pkt = h.encode().to_vec();
        pkt.extend_from_slice(data);
        pkt
    };
    crate::state::with_held(|st| {
        let r = st.coll_irecv(MPI_COMM_WORLD, 0, 5)?;
        st.p2p.on_packet(0, &packet(0, 5, b"p2p"));
        assert!(
            !st.req_test(r),
            "a point-to-point message does not match a collective receive"
        );
        st.p2p.on_packet(0, &packet(1, 5, b"coll data"));
        let (status, data) = st.req_wait(r)?;
        assert_eq!(
            (status.source, status.tag, data.as_slice()),
            (0, 5, &b"coll data"[..])
        );
        // The p2p message is still there for a p2p receive.
        let spec = st.recv_spec(std::ptr::null_mut(), 0, MPI_BYTE, 0, 5, MPI_COMM_WORLD)?;
        let h = st.start_new(MPI_COMM_WORLD, &spec)?;
        let (s2, _) = st.req_wait(h)?;
        assert_eq!((s2.bytes, class_of(s2.error)), (0, MPI_ERR_TRUNCATE));
        assert_eq!(
            class_of(st.coll_irecv(MPI_COMM_WORLD, 3, 0).unwrap_err().class),
            MPI_ERR_RANK
        );
        Ok(())
    })
    .unwrap();
}

/// mpi4py.util.pkl5's pattern to self: two synchronous sends with one tag (a header, then
/// the payload), neither complete before its receive; the payload is taken by a receive
/// or by a matched probe and receive, eager or rendezvous (by read or by fragments).
#[test]
fn sync_sends_to_self_complete_on_their_receives() {
    for (can_read, eager_limit) in [(true, 0), (false, 0), (true, 16)] {
        for n in [0usize, 10, 3000] {
            for matched in [false, true] {
                let mut sim = Sim::new(1, 8, can_read, eager_limit);
                let data = pattern(n, 3);
                let head = (n as u64).to_le_bytes();
                let s0 = sim.send(0, 0, 4, &head, Mode::Sync);
                let s1 = sim.send(0, 0, 4, &data, Mode::Sync);
                sim.settle();
                assert!(
                    !sim.done(0, s0) && !sim.done(0, s1),
                    "ssend to self done early"
                );
                assert_eq!(sim.procs[0].probe(0, 0, 4).map(|s| s.bytes), Some(8));
                let mut hb = [0u8; 8];
                let r0 = sim.recv(0, 0, 4, &mut hb);
                sim.run_until(|s| s.done(0, r0) && s.done(0, s0));
                assert_eq!(hb, head);
                assert!(!sim.done(0, s1), "payload ssend done before its receive");
                let mut buf = vec![0u8; n];
                let r1 = if matched {
                    let p = &mut sim.procs[0];
                    let (m, st) = p.mprobe(MPI_COMM_WORLD, 0, 0, 4).unwrap();
                    assert_eq!(st.bytes, n as u64);
                    let target = Target::User {
                        buf: Ptr(buf.as_mut_ptr()),
                        count: n,
                        dt: byte(),
                    };
                    p.mrecv(m, target).unwrap()
                } else {
                    sim.recv(0, 0, 4, &mut buf)
                };
                sim.run_until(|s| s.done(0, r1) && s.done(0, s1));
                assert_eq!(sim.status(0, r1).bytes, n as u64);
                assert!(buf == data, "{n}-byte payload to self differs");
                assert!(!sim.procs[0].has_backlog());
            }
        }
    }
}

// ----- MPI_Recv without a request (`P2p::recv_now`, waiters) -----

fn bytes_target(buf: &mut [u8]) -> Target {
    Target::Bytes {
        buf: Ptr(buf.as_mut_ptr()),
        len: buf.len(),
    }
}

/// Runs a blocking receive started with `recv_now` to its end: its status and whether it
/// needed a request.
fn finish_blocking(sim: &mut Sim, at: Proc, now: super::protocol::RecvNow) -> (Status, bool) {
    use super::protocol::RecvNow;
    let h = match now {
        RecvNow::Done(st) => return (st, false),
        RecvNow::Request(h) => h,
        RecvNow::Waiter(w) => {
            sim.run_until(|s| s.procs[at as usize].waiter_done(w));
            match sim.procs[at as usize].take_waiter(w) {
                Ok(st) => return (st, false),
                Err(h) => h,
            }
        }
    };
    sim.run_until(|s| s.done(at, h));
    let st = sim.status(at, h);
    sim.procs[at as usize].reqs.remove(h);
    (st, true)
}

#[test]
fn blocking_receives_carry_exact_data_with_a_request_only_for_rendezvous() {
    for can_read in [true, false] {
        for &n in SIZES {
            for posted_first in [true, false] {
                let mut sim = Sim::new(2, 4, can_read, 0);
                let data = pattern(n, 7);
                let mut buf = vec![0u8; n];
                let (now, s) = if posted_first {
                    let now =
                        sim.procs[1].recv_now(MPI_COMM_WORLD, 0, 0, 4, bytes_target(&mut buf));
                    (now, sim.send(0, 1, 4, &data, Mode::Standard))
                } else {
                    let s = sim.send(0, 1, 4, &data, Mode::Standard);
                    sim.settle();
                    let now =
                        sim.procs[1].recv_now(MPI_COMM_WORLD, 0, 0, 4, bytes_target(&mut buf));
                    (now, s)
                };
                let (st, request) = finish_blocking(&mut sim, 1, now);
                sim.run_until(|s2| s2.done(0, s));
                assert_eq!((st.source, st.tag, st.error, st.bytes), (0, 4, 0, n as u64));
                assert!(buf == data, "{n} bytes, posted first {posted_first}");
                assert_eq!(
                    request,
                    n > 984,
                    "a request only for rendezvous ({n} bytes)"
                );
                assert!(sim.procs[1].waiters.is_empty() && sim.procs[1].reqs.is_empty());
                assert_eq!(sim.procs[1].matching.posted_len(), 0);
            }
        }
    }
}

#[test]
fn blocking_receive_keeps_matching_order_with_posted_requests() {
    let mut sim = Sim::new(3, 64, true, 0);
    // An Irecv posted before the blocking receive takes the first message that both accept;
    // a blocking ANY_SOURCE receive posted before a specific Irecv takes the first.
    let mut a = [0u8; 4];
    let mut b = [0u8; 4];
    let r = sim.recv(2, 0, MPI_ANY_TAG, &mut a);
    let w = sim.procs[2].recv_now(MPI_COMM_WORLD, 0, 0, 3, bytes_target(&mut b));
    sim.send(0, 2, 3, &[1; 4], Mode::Standard);
    sim.send(0, 2, 3, &[2; 4], Mode::Standard);
    let (st, _) = finish_blocking(&mut sim, 2, w);
    sim.run_until(|s| s.done(2, r));
    assert_eq!((a, b, st.source, st.tag), ([1; 4], [2; 4], 0, 3));

    let mut c = [0u8; 4];
    let mut d = [0u8; 4];
    let w = sim.procs[2].recv_now(
        MPI_COMM_WORLD,
        0,
        MPI_ANY_SOURCE,
        MPI_ANY_TAG,
        bytes_target(&mut c),
    );
    let r = sim.recv(2, 1, 6, &mut d);
    sim.send(1, 2, 6, &[3; 4], Mode::Standard);
    sim.send(1, 2, 6, &[4; 4], Mode::Standard);
    let (st, _) = finish_blocking(&mut sim, 2, w);
    sim.run_until(|s| s.done(2, r));
    assert_eq!((c, d, st.source, st.tag), ([3; 4], [4; 4], 1, 6));

    // Unexpected messages from two senders: ANY_SOURCE takes the earliest arrival.
    sim.send(1, 2, 8, &[5; 4], Mode::Standard);
    sim.settle();
    sim.send(0, 2, 8, &[6; 4], Mode::Standard);
    sim.settle();
    for (want, src) in [([5u8; 4], 1), ([6; 4], 0)] {
        let mut e = [0u8; 4];
        let now = sim.procs[2].recv_now(MPI_COMM_WORLD, 0, MPI_ANY_SOURCE, 8, bytes_target(&mut e));
        let (st, req) = finish_blocking(&mut sim, 2, now);
        assert_eq!((e, st.source, req), (want, src, false));
    }
    assert!(sim.procs[2].waiters.is_empty());
    assert_eq!(sim.procs[2].matching.posted_len(), 0);
}

#[test]
fn blocking_receive_truncates_and_acks_synchronous_sends() {
    for (n, can_read) in [(500, true), (5000, true), (5000, false)] {
        for posted_first in [true, false] {
            let mut sim = Sim::new(2, 8, can_read, 0);
            let data = pattern(n, 1);
            let mut buf = vec![0xEEu8; 400];
            let target = Target::Bytes {
                buf: Ptr(buf.as_mut_ptr()),
                len: 300,
            };
            let (now, s) = if posted_first {
                let now = sim.procs[1].recv_now(MPI_COMM_WORLD, 0, 0, 5, target);
                (now, sim.send(0, 1, 5, &data, Mode::Sync))
            } else {
                let s = sim.send(0, 1, 5, &data, Mode::Sync);
                sim.settle();
                (sim.procs[1].recv_now(MPI_COMM_WORLD, 0, 0, 5, target), s)
            };
            let (st, _) = finish_blocking(&mut sim, 1, now);
            {
                let (p, mut w) = sim.wire(1);
                p.flush(&mut w);
            }
            sim.run_until(|s2| s2.done(0, s));
            assert_eq!(class_of(st.error), MPI_ERR_TRUNCATE, "{n} bytes");
            assert_eq!((st.bytes, st.source, st.tag), (300, 0, 5));
            assert_eq!(&buf[..300], &data[..300]);
            assert!(buf[300..].iter().all(|&b| b == 0xEE));
            assert_eq!(sim.status(0, s).error, 0);
        }
    }
}

#[test]
fn blocking_receive_from_a_dead_peer_fails() {
    let mut sim = Sim::new(2, 8, true, 0);
    let mut buf = [0u8; 8];
    let now = sim.procs[1].recv_now(MPI_COMM_WORLD, 0, 0, 1, bytes_target(&mut buf));
    let super::protocol::RecvNow::Waiter(w) = now else {
        panic!("nothing had arrived: the receive waits");
    };
    let posted: Vec<_> = sim.procs[1].posted_waiters().collect();
    assert_eq!(posted, vec![(w, MPI_COMM_WORLD, 0)]);
    sim.procs[1].fail_posted(w, 0, "gone");
    assert!(sim.procs[1].waiter_done(w));
    let st = sim.procs[1].take_waiter(w).unwrap();
    assert_eq!((class_of(st.error), st.source), (MPI_ERR_PROC_ABORTED, 0));
    assert_eq!(sim.procs[1].matching.posted_len(), 0);
    // A message sent now is unexpected, not delivered into the failed receive.
    sim.send(0, 1, 1, &[9; 8], Mode::Standard);
    sim.settle();
    assert_eq!(buf, [0; 8]);
    assert_eq!(sim.procs[1].matching.unexpected_len(), 1);
}
