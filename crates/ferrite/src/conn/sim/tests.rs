//! The machines under the simulated network: exactly-once in-order delivery, handshake races,
//! a thousand processes connecting at once, and garbage on the wire.

use super::*;

fn world(n: u32, seed: u64, faults: Faults) -> World<SimProc> {
    let (rel, hs) = sim_configs(n);
    let nodes = (0..n)
        .map(|r| SimProc::new(r, n, rel.clone(), hs.clone()))
        .collect();
    World::new(nodes, DatagramNet::new(seed, faults))
}

/// Random messages, sizes 0..max (many spanning several datagrams).
fn messages(rng: &mut Rng, count: usize, max: u64) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| {
            let len = rng.below(max) as usize;
            rng.bytes(len)
        })
        .collect()
}

#[test]
fn two_peers_exchange_thousands_of_messages_exactly_once_in_order_under_faults() {
    for seed in [1, 2] {
        let mut w = world(2, seed, Faults::LOSSY);
        let mut rng = Rng::new(seed ^ 0xabc);
        let sent: Vec<Vec<Vec<u8>>> = (0..2).map(|_| messages(&mut rng, 2000, 5000)).collect();
        for (i, msgs) in sent.iter().enumerate() {
            let peer = 1 - i as Proc;
            w.nodes[i]
                .outbox
                .insert(peer, msgs.iter().cloned().collect());
            w.nodes[i].pump(0);
            w.touched(i);
        }
        w.run(u64::MAX);
        for (i, mine) in sent.iter().enumerate() {
            let got = w.nodes[1 - i].received.get(&(i as Proc));
            assert_eq!(got.map(Vec::len), Some(2000), "seed {seed}");
            assert!(got == Some(mine), "seed {seed}: {i}'s messages differ");
            let s = w.nodes[i].rel.stats();
            assert!(
                s.retransmits > 0 && s.no_room > 0,
                "faults not exercised: {s:?}"
            );
            assert_eq!(w.nodes[i].rel.in_flight(1 - i as Proc), 0);
            assert!(w.nodes[i].unreachable.is_empty());
            assert_eq!(s.drops.total(), 0);
        }
        let dups: u64 = (0..2).map(|i| w.nodes[i].rel.stats().duplicates).sum();
        assert!(dups > 0 && w.net.lost > 1000 && w.net.duplicated > 100);
    }
}

fn ud_states(w: &World<SimProc>) -> impl Fn(usize, Proc) -> PeerState + '_ {
    |i, p| w.nodes[i].ud.state(p)
}

#[test]
fn simultaneous_ud_handshakes_end_with_one_connection_that_both_agree_on() {
    // Clean network: the higher rank's attempt must be the survivor, every time.
    let mut w = world(2, 7, Faults::CLEAN);
    for i in 0..2 {
        w.nodes[i].starts.insert((0, 1 - i as Proc));
        w.touched(i);
    }
    w.run(u64::MAX);
    let pairs = BTreeSet::from([(0, 1)]);
    let events = |i: usize| w.nodes[i].hs_events.clone();
    check_one_connection_per_pair(&ud_states(&w), &events, 2, &pairs);
    assert_eq!(
        w.nodes[0].ud.state(1),
        PeerState::Connected(AttemptId {
            gen: 1,
            initiator: 1
        })
    );
    assert_eq!(w.nodes[0].ud.stats().races_lost, 1);
    assert_eq!(w.nodes[1].ud.stats().races_won, 1);
    // Lossy network, starts a few microseconds apart, many seeds.
    for seed in 0..300 {
        let mut w = world(2, seed, Faults::LOSSY);
        let mut rng = Rng::new(seed);
        for i in 0..2 {
            w.nodes[i].starts.insert((rng.below(3_000), 1 - i as Proc));
            w.touched(i);
        }
        w.run(u64::MAX);
        let events = |i: usize| w.nodes[i].hs_events.clone();
        check_one_connection_per_pair(&ud_states(&w), &events, 2, &pairs);
    }
}

#[test]
fn a_thousand_processes_connect_in_random_patterns_and_deliver_every_message_once_in_order() {
    const N: u32 = 1024;
    let mut w = world(N, 42, Faults::LOSSY);
    let mut rng = Rng::new(4242);
    let mut pairs = BTreeSet::new();
    let mut sent: BTreeMap<(Proc, Proc), Vec<Vec<u8>>> = BTreeMap::new();
    for a in 0..N {
        for _ in 0..2 {
            let b = (a + 1 + rng.below(N as u64 - 1) as u32) % N;
            pairs.insert((a.min(b), a.max(b)));
            // Half the pairs start from both sides at the same instant.
            let t = rng.below(50_000);
            w.nodes[a as usize].starts.insert((t, b));
            if rng.chance(0.5) {
                w.nodes[b as usize].starts.insert((t, a));
            }
            let msgs = messages(&mut rng, 4, 3000);
            w.nodes[a as usize]
                .outbox
                .entry(b)
                .or_default()
                .extend(msgs.iter().cloned());
            sent.entry((a, b)).or_default().extend(msgs);
        }
    }
    for i in 0..N as usize {
        w.nodes[i].pump(0);
        w.touched(i);
    }
    w.run(u64::MAX);
    let events = |i: usize| w.nodes[i].hs_events.clone();
    check_one_connection_per_pair(&ud_states(&w), &events, N as usize, &pairs);
    for ((a, b), msgs) in &sent {
        let got = w.nodes[*b as usize].received.get(a);
        assert!(got == Some(msgs), "{a} -> {b}: messages differ");
    }
    let races: u64 = w.nodes.iter().map(|n| n.ud.stats().races_lost).sum();
    let retries: u64 = w.nodes.iter().map(|n| n.ud.stats().retries).sum();
    assert!(
        races > 100 && retries > 100,
        "races {races} retries {retries}"
    );
}

#[test]
fn garbage_and_foreign_datagrams_never_panic_and_are_counted() {
    let (rel, hs) = sim_configs(4);
    let mut p = SimProc::new(1, 4, rel.clone(), hs.clone());
    let mut peer = SimProc::new(0, 4, rel.clone(), hs.clone());
    let mut rng = Rng::new(99);
    // Valid datagrams of each kind, to mutate.
    peer.rel.send(1, &rng.bytes(3000), 0).unwrap();
    peer.ud.connect(1, 0);
    let mut valid = Vec::new();
    peer.take_transmits(&mut valid);
    let valid: Vec<Vec<u8>> = valid.into_iter().map(|(_, b)| b).collect();
    let mut fed = 0u64;
    for round in 0..20_000 {
        let b = match round % 4 {
            0 => {
                let len = rng.below(80) as usize;
                rng.bytes(len)
            }
            1 => {
                let mut b = valid[rng.below(valid.len() as u64) as usize].clone();
                b[8 + rng.below(8) as usize] ^= 1 + rng.below(255) as u8; // wrong secret
                b
            }
            2 => {
                let b = &valid[rng.below(valid.len() as u64) as usize];
                b[..rng.below(16) as usize].to_vec() // shorter than any header
            }
            _ => {
                // Our own secret but a foreign header: a bad version, kind or reserved byte.
                let mut b = valid[rng.below(valid.len() as u64) as usize].clone();
                match rng.below(3) {
                    0 => b[0] = 2 + rng.below(250) as u8,
                    1 => b[1] = 8 + rng.below(240) as u8,
                    _ => b[3] = 1 + rng.below(255) as u8,
                }
                b
            }
        };
        fed += 1;
        p.on_datagram(&b, round);
    }
    let counted = p.rel.stats().drops.total() + p.ud.stats().drops.total() + p.foreign;
    assert_eq!(counted, fed);
    assert_eq!(p.rel.stats().datagrams_received, 0);
    assert!(p.received.is_empty() && p.hs_events.is_empty());
    // Mutations that keep the secret may be taken at face value, but must never panic.
    for round in 0..20_000u64 {
        let mut b = valid[rng.below(valid.len() as u64) as usize].clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(b.len() as u64) as usize;
            if !(8..16).contains(&at) {
                b[at] = rng.next_u64() as u8;
            }
        }
        if rng.chance(0.3) {
            b.truncate(rng.below(b.len() as u64) as usize);
        }
        p.on_datagram(&b, 1_000_000 + round);
        p.on_timeout(1_000_000 + round);
        let mut out = Vec::new();
        p.take_transmits(&mut out);
    }
    // The cm hello decoder takes the same garbage on an accepted socket.
    let mut cm = Cm::new(1, SECRET, handshake::Config::new(4));
    for i in 0..5_000u64 {
        let s = cm.accepted(i);
        let len = rng.below(40) as usize;
        cm.received(s, &rng.bytes(len), i);
        assert_eq!(cm.poll_action(), Some(Action::Close { sock: s }));
    }
    assert_eq!(cm.stats().drops.total(), 5_000);
}

#[test]
fn simultaneous_cm_connects_keep_one_socket_per_pair() {
    let mut cfg = handshake::Config::new(2);
    cfg.rto_initial = 10_000;
    cfg.rto_max = 200_000;
    cfg.max_retries = 30;
    // Clean: the higher rank's socket survives.
    let mut w = CmWorld::new(2, 3, cfg.clone());
    w.refuse = 0.0;
    w.starts.insert((0, 0, 1));
    w.starts.insert((0, 1, 0));
    w.run(u64::MAX);
    let pairs = BTreeSet::from([(0, 1)]);
    check_cm(&w, &pairs);
    assert_eq!(
        w.cms[0].state(1),
        PeerState::Connected(AttemptId {
            gen: 1,
            initiator: 1
        })
    );
    for seed in 0..300 {
        let mut w = CmWorld::new(2, seed, cfg.clone());
        w.refuse = 0.2;
        w.starts.insert((w.rng.below(3_000), 0, 1));
        w.starts.insert((w.rng.below(3_000), 1, 0));
        w.run(u64::MAX);
        check_cm(&w, &pairs);
    }
}

fn check_cm(w: &CmWorld, pairs: &BTreeSet<(Proc, Proc)>) {
    let states = |i: usize, p: Proc| w.cms[i].state(p);
    let events = |i: usize| w.events[i].clone();
    check_one_connection_per_pair(&states, &events, w.cms.len(), pairs);
    for &(a, b) in pairs {
        let open = w.open_conns(a as usize, b as usize);
        let (sa, sb) = (
            w.cms[a as usize].socket_of(b),
            w.cms[b as usize].socket_of(a),
        );
        assert_eq!(open, vec![(sa.unwrap(), sb.unwrap())], "{a}-{b}: sockets");
    }
}

#[test]
fn a_thousand_processes_connect_with_cm_in_random_patterns() {
    const N: u32 = 1024;
    let mut cfg = handshake::Config::new(N);
    cfg.rto_initial = 10_000;
    cfg.rto_max = 200_000;
    cfg.max_retries = 30;
    let mut w = CmWorld::new(N, 11, cfg);
    let mut pairs = BTreeSet::new();
    let mut rng = Rng::new(1111);
    for a in 0..N {
        for _ in 0..2 {
            let b = (a + 1 + rng.below(N as u64 - 1) as u32) % N;
            pairs.insert((a.min(b), a.max(b)));
            let t = rng.below(20_000);
            w.starts.insert((t, a as usize, b));
            if rng.chance(0.5) {
                w.starts.insert((t, b as usize, a));
            }
        }
    }
    w.run(u64::MAX);
    check_cm(&w, &pairs);
    let races: u64 = w.cms.iter().map(|c| c.stats().races_lost).sum();
    assert!(races > 50, "races {races}");
}

#[test]
fn cm_connections_closed_by_both_ends_reopen_from_either_side_as_one() {
    const N: u32 = 8;
    let mut cfg = handshake::Config::new(N);
    cfg.rto_initial = 10_000;
    cfg.rto_max = 200_000;
    cfg.hello_wait = 200_000;
    cfg.max_retries = 30;
    for seed in 0..40 {
        let mut w = CmWorld::new(N, seed, cfg.clone());
        let mut rng = Rng::new(seed * 7 + 1);
        let mut pairs = BTreeSet::new();
        for a in 0..N {
            let b = (a + 1 + rng.below(N as u64 - 1) as u32) % N;
            pairs.insert((a.min(b), a.max(b)));
            w.starts.insert((rng.below(5_000), a as usize, b));
        }
        let mut t = 0;
        for round in 0..4 {
            t += 1_000_000;
            w.run(t);
            check_cm(&w, &pairs);
            if round == 3 {
                break;
            }
            // Every pair closes: one end lets go, the other a little later (its CLOSE came),
            // then either end or both (a race) dial again once both have let go.
            for &(a, b) in &pairs {
                let (first, second) = if rng.chance(0.5) { (a, b) } else { (b, a) };
                w.detach(first as usize, second);
                w.detach(second as usize, first);
                let at = t + rng.below(3_000);
                match rng.below(3) {
                    0 => {
                        w.starts.insert((at, a as usize, b));
                    }
                    1 => {
                        w.starts.insert((at, b as usize, a));
                    }
                    _ => {
                        w.starts.insert((at, a as usize, b));
                        w.starts.insert((at + rng.below(2), b as usize, a));
                    }
                }
            }
        }
        // Every reopening was newer than what it replaced.
        for &(a, b) in &pairs {
            let PeerState::Connected(id) = w.cms[a as usize].state(b) else {
                unreachable!("checked")
            };
            assert!(id.gen >= 4, "{a}-{b}: {id:?}");
        }
    }
}

use crate::conn::policy::{
    CloseCause, Config as PConfig, Counters, Kind as PKind, Mechanism, OpenCause,
};

/// Runs `n` processes driving the shipped connection manager (`ManagedProc`), connections
/// set up by `setup`, with a budget of `budget` connections each and random traffic (`msgs`
/// messages per process, half of them to one favourite peer) on a lossy network; checks every
/// message arrived exactly once and in order per pair, nobody failed, and the budget holds at
/// the end. Returns the summed counters.
fn run_manager(
    kind: PKind,
    seed: u64,
    n: u32,
    budget: usize,
    setup: Mechanism,
    msgs: u64,
) -> Counters {
    let pcfg = PConfig {
        kind,
        threshold_msgs: 3,
        threshold_bytes: 0,
        max_open: budget,
        idle: 150_000,
        hold_max: 500_000,
        residency: 20_000,
    };
    let nodes = (0..n)
        .map(|r| ManagedProc::new(r, n, pcfg.clone(), setup))
        .collect();
    let mut w = World::new(nodes, DatagramNet::new(seed, Faults::LOSSY));
    let mut rng = Rng::new(seed * 31);
    let mut sent: BTreeMap<(Proc, Proc), Vec<Vec<u8>>> = BTreeMap::new();
    for a in 0..n {
        let favourite = (a + 1 + rng.below(n as u64 - 1) as u32) % n;
        for k in 0..msgs {
            // Bursts to a favourite peer cross the threshold; the rest is spread out.
            let b = if rng.chance(0.5) {
                favourite
            } else {
                (a + 1 + rng.below(n as u64 - 1) as u32) % n
            };
            let t = rng.below(2_000_000);
            let len = rng.below(3000) as usize;
            let msg = rng.bytes(len);
            w.nodes[a as usize].workload.insert((t, k, b), msg);
        }
        let node = &w.nodes[a as usize];
        for (&(_, _, b), msg) in &node.workload {
            sent.entry((a, b)).or_default().push(msg.clone());
        }
    }
    for i in 0..n as usize {
        w.nodes[i].init(0);
        w.touched(i);
    }
    w.run(u64::MAX);
    for ((a, b), msgs) in &sent {
        let got = w.nodes[*b as usize].received.get(a);
        if got != Some(msgs) {
            let g = got.cloned().unwrap_or_default();
            let order: Vec<Option<usize>> =
                g.iter().map(|m| msgs.iter().position(|x| x == m)).collect();
            panic!(
                "{kind:?} {setup:?} seed {seed}: {a} -> {b} differs: sent {}, got {} as \
                 {order:?}\n{}\n{}",
                msgs.len(),
                g.len(),
                w.nodes[*a as usize].describe(*b),
                w.nodes[*b as usize].describe(*a),
            );
        }
    }
    let mut t = Counters::default();
    for node in &w.nodes {
        assert!(
            node.failures.is_empty(),
            "{}: {:?}",
            node.rank,
            node.failures
        );
        assert!(!node.mgr.closing(), "{}: a close never finished", node.rank);
        let c = node.mgr.counters();
        // Soft for connections peers open (evictions take a round trip), the budget holds
        // once things settle.
        assert!(
            c.open_now as usize <= budget,
            "{kind:?}: {} open",
            c.open_now
        );
        // Beyond the budget only by peer-opened connections, each counted.
        assert!(
            c.open_peak <= budget as u64 + c.over_budget,
            "{kind:?}: {c:?}"
        );
        for i in 0..4 {
            t.requested[i] += c.requested[i];
            t.opened[i] += c.opened[i];
        }
        for i in 0..3 {
            t.closed[i] += c.closed[i];
        }
        t.open_now += c.open_now;
        t.over_budget += c.over_budget;
        t.open_peak = t.open_peak.max(c.open_peak);
        t.datagram_msgs += c.datagram_msgs;
        t.connection_msgs += c.connection_msgs;
        t.queued += c.queued;
        t.failed += c.failed;
    }
    t
}

/// Checks the counters of a run of `run_manager` under `kind` (8 processes, budget 2).
fn check_counters(kind: PKind, setup: Mechanism, t: &Counters) {
    assert!(t.closed(CloseCause::Eviction) > 0 && t.closed(CloseCause::Peer) > 0);
    assert!(t.opened(OpenCause::Peer) > 0 && t.queued > 0 && t.connection_msgs > 0);
    assert_eq!(t.failed, 0, "{kind:?} {setup:?}");
    match kind {
        PKind::Adaptive => {
            assert!(t.opened(OpenCause::Threshold) > 0 && t.closed(CloseCause::Idle) > 0);
            assert!(t.datagram_msgs > 0);
            assert_eq!(t.open_now, 0, "idle connections all closed by the end");
        }
        PKind::OnDemand => assert!(t.opened(OpenCause::FirstMessage) > 0),
        _ => assert!(t.requested(OpenCause::Init) > 0),
    }
    if kind != PKind::Adaptive {
        assert_eq!(t.datagram_msgs, 0);
    }
}

/// The shipped manager under adaptive and both set-up mechanisms, on a lossy network: random
/// traffic between 8 processes with a budget of 2 connections each, so connections open (by
/// threshold or the peer), close (idle, eviction, the peer) and reopen while messages flow;
/// every message still arrives exactly once and in order per pair, across every switch
/// between the datagram path and connections.
#[test]
fn the_manager_keeps_every_pair_in_order_across_opens_closes_and_evictions() {
    for setup in [Mechanism::Cm, Mechanism::Ud] {
        let t = run_manager(PKind::Adaptive, 5, 8, 2, setup, 150);
        check_counters(PKind::Adaptive, setup, &t);
    }
}

/// The same under ondemand, partial and static. (It caught the manager keeping a closing
/// connection's queue back outside adaptive: frames stuck in the driver's queue for ever.)
#[test]
fn the_manager_keeps_every_pair_in_order_under_ondemand_partial_and_static() {
    for (kind, seed) in [
        (PKind::OnDemand, 6),
        (PKind::Partial, 7),
        (PKind::Static, 8),
    ] {
        for setup in [Mechanism::Cm, Mechanism::Ud] {
            let t = run_manager(kind, seed, 8, 2, setup, 150);
            check_counters(kind, setup, &t);
        }
    }
}

/// 1,024 processes under a budget of 2 connections each, ondemand and adaptive, random
/// traffic on a lossy network: the shipped manager at scale (races between dials, held hellos,
/// evictions while peers still send).
#[test]
fn a_thousand_managed_processes_deliver_everything_under_a_budget() {
    let t = run_manager(PKind::OnDemand, 41, 1024, 2, Mechanism::Cm, 6);
    assert!(t.closed(CloseCause::Eviction) > 0 && t.opened(OpenCause::Peer) > 0);
    let t = run_manager(PKind::Adaptive, 42, 1024, 2, Mechanism::Ud, 8);
    assert!(t.opened(OpenCause::Threshold) > 0 && t.datagram_msgs > 0);
}

/// A regression: a slot reserved for a peer's request that then proved stale was never given
/// back to the connection we wanted to that peer, and its messages waited for ever.
#[test]
fn a_released_reservation_asks_again_for_the_connection_we_wanted() {
    run_manager(PKind::Static, 120, 32, 4, Mechanism::Ud, 150);
}

/// More seeds, sizes and budgets (minutes): `cargo test -p ferrite conn -- --ignored`.
#[test]
#[ignore]
fn soak_the_manager() {
    for seed in 0..25 {
        for kind in [
            PKind::Adaptive,
            PKind::OnDemand,
            PKind::Partial,
            PKind::Static,
        ] {
            let (n, budget) = [(8, 1), (16, 3), (32, 4)][seed as usize % 3];
            let setup = [Mechanism::Cm, Mechanism::Ud][seed as usize % 2];
            eprintln!(
                "soak {kind:?} seed {} n {n} budget {budget} {setup:?}",
                100 + seed
            );
            run_manager(kind, 100 + seed, n, budget, setup, 150);
        }
    }
}

/// A process out of descriptors (its dials fail, its accepts are refused after the hello)
/// that only waits for a message: the sender gives up after its retries, and the waiting
/// process, which never had a connection to lose, fails the sender too (it knows from the
/// hellos it refused), under both set-up mechanisms, instead of waiting forever.
#[test]
fn a_process_out_of_descriptors_fails_the_peers_it_had_to_refuse() {
    for setup in [Mechanism::Cm, Mechanism::Ud] {
        let pcfg = PConfig {
            kind: PKind::OnDemand,
            threshold_msgs: 3,
            threshold_bytes: 0,
            max_open: 4,
            idle: 0,
            hold_max: 500_000,
            residency: 0,
        };
        let mut nodes: Vec<ManagedProc> = (0..2)
            .map(|r| ManagedProc::new(r, 2, pcfg.clone(), setup))
            .collect();
        nodes[0].exhausted = true;
        nodes[1].workload.insert((0, 0, 0), b"for rank 0".to_vec());
        let mut w = World::new(nodes, DatagramNet::new(7, Faults::CLEAN));
        for i in 0..2 {
            w.nodes[i].init(0);
            w.touched(i);
        }
        w.run(u64::MAX);
        let (f0, f1) = (&w.nodes[0].failures, &w.nodes[1].failures);
        assert!(
            f1.iter()
                .any(|(p, f)| *p == 0 && f.kind == manager::FailKind::Aborted),
            "{setup:?}: the sender did not give up: {f1:?}"
        );
        assert!(
            f0.iter().any(|(p, f)| *p == 1
                && f.kind == manager::FailKind::Aborted
                && f.why.contains("could not accept its connections")
                && f.why.contains("Too many open files")),
            "{setup:?}: the refusing process never failed its peer: {f0:?}"
        );
        assert!(w.nodes[0].received.is_empty());
    }
}
