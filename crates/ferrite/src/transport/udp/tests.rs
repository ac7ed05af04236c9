use super::super::tcp::card::test_board::{secret_of, TestBoard};
use super::*;
use crate::conn::wire;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};

fn job(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "udptest-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn ccfg(n: u32, inject: Inject) -> ChannelConfig {
    ChannelConfig {
        ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        rel: reliable::Config {
            max_datagram: 8192,
            window: 64,
            rto_initial: 5_000,
            ..reliable::Config::new(n)
        },
        rcvbuf: 4 << 20,
        inject,
    }
}

fn channels(tag: &str, n: u32, inject: Inject) -> (String, Vec<Channel>) {
    let j = job(tag);
    let chs = (0..n)
        .map(|r| {
            let inj = Inject {
                seed: u64::from(r) + 1,
                ..inject
            };
            Channel::new(r, ccfg(n, inj), Box::new(TestBoard(j.clone()))).unwrap()
        })
        .collect();
    (j, chs)
}

/// Waits on every wake fd (real timers must fire), up to `ms`.
fn wait(chs: &[Channel], ms: i32) {
    let mut fds: Vec<libc::pollfd> = chs
        .iter()
        .map(|c| libc::pollfd {
            fd: c.wake_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: fds is a valid array of pollfd.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}

/// A message of `len` bytes that says who sent it and its index.
fn message(from: u32, to: u32, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u32 ^ (from * 31) ^ (to * 7) ^ (i as u32 * 13)) as u8)
        .collect()
}

fn size_of_msg(i: usize) -> usize {
    match i % 100 {
        0 => 3 << 20,             // several MB
        1 | 2 => 100_000 + i * 7, // tens of datagrams
        3 => 0,
        _ => (i * 37) % 9000, // one or two datagrams
    }
}

/// Every channel sends `count` messages of mixed sizes to every other, all polling; checks
/// every message arrives whole, once and in order.
fn all_to_all(chs: &mut [Channel], count: usize) {
    let n = chs.len();
    let mut next = vec![vec![0usize; n]; n]; // next[from][to]: next index to send
    let mut got: Vec<Vec<Vec<Vec<u8>>>> = vec![vec![Vec::new(); n]; n]; // got[to][from]
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut progressed = false;
        for (from, row) in next.iter_mut().enumerate() {
            for (to, i) in row.iter_mut().enumerate() {
                while from != to && *i < count {
                    let m = message(from as u32, to as u32, *i, size_of_msg(*i));
                    // Two parts: the channel joins them.
                    let (a, b) = m.split_at(m.len() / 3);
                    if !chs[from].send(to as u32, &[a, b]).unwrap() {
                        break;
                    }
                    *i += 1;
                    progressed = true;
                }
            }
        }
        for (to, ch) in chs.iter_mut().enumerate() {
            let g = &mut got[to];
            progressed |= ch.poll(&mut |f, m| g[f as usize].push(m.to_vec()), &mut |_| {}) > 0;
        }
        let done = (0..n).all(|t| (0..n).all(|f| f == t || got[t][f].len() == count));
        if done && chs.iter().all(|c| !c.pending()) {
            break;
        }
        assert!(Instant::now() < deadline, "no progress: {:?}", next);
        if !progressed {
            wait(chs, 2);
        }
    }
    for (to, from_list) in got.iter().enumerate() {
        for (from, msgs) in from_list.iter().enumerate() {
            for (i, m) in msgs.iter().enumerate() {
                assert!(
                    *m == message(from as u32, to as u32, i, size_of_msg(i)),
                    "message {i} from {from} to {to} differs"
                );
            }
        }
    }
}

#[test]
fn thousands_of_mixed_messages_arrive_in_order_over_loopback() {
    let (_j, mut chs) = channels("clean", 3, Inject::default());
    all_to_all(&mut chs, 500);
    let s = chs[0].stats();
    assert_eq!(s.strangers + s.reliable.drops.total(), 0);
    assert_eq!(s.reliable.messages_delivered, 1000);
}

#[test]
fn drops_duplicates_and_reordering_are_repaired_by_real_timers() {
    let inject = Inject {
        drop_permille: 30,
        dup_permille: 20,
        reorder_permille: 50,
        seed: 0,
    };
    let (_j, mut chs) = channels("lossy", 2, inject);
    all_to_all(&mut chs, 1000);
    let (a, b) = (chs[0].stats(), chs[1].stats());
    assert!(a.injected_drops > 0 && b.injected_drops > 0);
    assert!(a.reliable.retransmits + b.reliable.retransmits > 0);
    assert!(a.reliable.duplicates + b.reliable.duplicates > 0);
}

/// The adaptive policy's contract: when a sender sees a datagram acknowledged, the receiver
/// has already handed the message to `deliver`. The receiver's deliver callback lets the
/// sender read every acknowledgement that has left so far, and checks it covers only
/// delivered messages (both directions carry data, so acks ride on data too).
#[test]
fn no_acknowledgement_leaves_before_its_message_is_delivered() {
    let inject = Inject {
        drop_permille: 50,
        reorder_permille: 100,
        ..Inject::default()
    };
    let j = job("contract");
    let mk = |r: u32| {
        let mut c = ccfg(
            2,
            Inject {
                seed: u64::from(r) + 1,
                ..inject
            },
        );
        c.rel.window = 4;
        Channel::new(r, c, Box::new(TestBoard(j.clone()))).unwrap()
    };
    let (mut a, mut b) = (mk(0), mk(1));
    let total = 3000;
    let (mut sent_a, mut sent_b, mut got_b, mut checks) = (0usize, 0usize, 0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(60);
    while got_b < total {
        while sent_a < total && a.send(1, &[&[7u8; 40]]).unwrap() {
            sent_a += 1;
        }
        // Three datagrams each: the part beyond the window waits in the machine and leaves
        // the moment a's acknowledgements arrive, with b's acknowledgement on it.
        while sent_b < total && b.send(0, &[&[9u8; 20_000]]).unwrap() {
            sent_b += 1;
        }
        b.poll(
            &mut |_, _| {
                got_b += 1;
                a.poll(&mut |_, _| {}, &mut |_| {});
                // One datagram per message: acknowledged = sent - in flight.
                let acked = sent_a - a.in_flight(1);
                assert!(acked <= got_b, "{acked} acknowledged, {got_b} delivered");
                checks += 1;
            },
            &mut |_| {},
        );
        a.poll(&mut |_, _| {}, &mut |_| {});
        assert!(Instant::now() < deadline);
    }
    assert_eq!(checks, total);
}

#[test]
fn strangers_are_counted_and_never_delivered() {
    let (j, mut chs) = channels("strangers", 2, Inject::default());
    let target = chs[1].addr();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Noise, a foreign version, and well-formed datagrams with another job's secret.
    s.send_to(b"hello there", target).unwrap();
    s.send_to(&[], target).unwrap();
    s.send_to(&[2, 1, 0, 0, 0, 0, 0, 0], target).unwrap();
    let mut foreign = Vec::new();
    wire::encode_prefix(
        &mut foreign,
        wire::Kind::Data,
        3,
        0,
        secret_of("another job"),
    );
    foreign.extend_from_slice(&[0u8; 16]);
    foreign.extend_from_slice(b"payload");
    s.send_to(&foreign, target).unwrap();
    let mut x = 1u64;
    for len in 0..300usize {
        let d: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (x >> 56) as u8
            })
            .collect();
        s.send_to(&d, target).unwrap();
    }
    // A real one after them still arrives.
    assert!(chs[0].send(1, &[b"real"]).unwrap());
    let mut got = Vec::new();
    let mut ctl = 0;
    for _ in 0..1000 {
        chs[1].poll(&mut |f, m| got.push((f, m.to_vec())), &mut |_| ctl += 1);
        if !got.is_empty() {
            break;
        }
        wait(&chs, 5);
    }
    assert_eq!(got, vec![(0, b"real".to_vec())]);
    let st = chs[1].stats();
    // 304 + noise; the datagrams of handshake kinds went to control, unchecked here.
    assert_eq!(st.strangers + st.reliable.drops.total() + ctl, 304);
    assert!(st.reliable.drops.secret >= 1);
    let _ = j;
}

#[test]
fn handshake_kinds_go_to_control_and_send_control_is_unreliable_but_arrives() {
    let (j, mut chs) = channels("control", 2, Inject::default());
    let mut req = Vec::new();
    wire::encode_prefix(&mut req, wire::Kind::Req, 0, 0, secret_of(&j));
    req.extend_from_slice(b"body");
    chs[0].send_control(1, &req).unwrap();
    let mut ctl = Vec::new();
    for _ in 0..1000 {
        chs[1].poll(&mut |_, _| {}, &mut |b| ctl.push(b.to_vec()));
        if !ctl.is_empty() {
            break;
        }
        wait(&chs, 5);
    }
    assert_eq!(ctl, vec![req]);
    assert_eq!(chs[0].stats().control_sent, 1);
}

#[test]
fn the_wake_fd_fires_for_retransmission_without_polling() {
    let inject = Inject {
        drop_permille: 1000,
        ..Inject::default()
    };
    let (_j, mut chs) = channels("timer", 2, inject);
    assert!(chs[0].send(1, &[b"lost"]).unwrap());
    let before = chs[0].stats().reliable.retransmits;
    // Nothing arrives (every datagram is dropped): only the timerfd can wake us.
    let mut fd = libc::pollfd {
        fd: chs[0].wake_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut fd, 1, 10_000) };
    assert_eq!(r, 1, "the timer woke the wake fd");
    chs[0].poll(&mut |_, _| {}, &mut |_| {});
    assert_eq!(chs[0].stats().reliable.retransmits, before + 1);
    assert!(chs[0].pending());
}

#[test]
fn an_unreachable_peer_is_a_proc_aborted_error_naming_it() {
    let j = job("gone");
    let mut cfg = ccfg(2, Inject::default());
    cfg.rel.max_retries = 2;
    cfg.rel.rto_initial = 1_000;
    let mut a = Channel::new(0, cfg.clone(), Box::new(TestBoard(j.clone()))).unwrap();
    let b = Channel::new(1, cfg, Box::new(TestBoard(j.clone()))).unwrap();
    drop(b); // its card stays, its socket is gone
    assert!(a.send(1, &[b"into the void"]).unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.failed(1).is_none() && Instant::now() < deadline {
        wait(std::slice::from_ref(&a), 50);
        a.poll(&mut |_, _| {}, &mut |_| {});
    }
    let e = a.send(1, &[b"again"]).unwrap_err();
    assert_eq!(e.kind, crate::transport::Kind::PeerFailed);
    assert!(e.msg.contains("rank 1"), "{}", e.msg);
    assert!(!a.pending(), "what was in flight to it is discarded");
    // Reported once to the transport (receives posted for rank 1 then fail).
    let lost = a.take_failures();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].0, 1);
    assert!(lost[0].1.contains("rank 1"), "{}", lost[0].1);
    assert!(a.take_failures().is_empty(), "reported once");
}

#[test]
fn the_udp_transport_carries_packets_and_shuts_down_cleanly() {
    let j = job("transport");
    let mk = |r| {
        let cfg = UdpConfig {
            chan: ccfg(2, Inject::default()),
            max_packet: 1 << 18,
            linger_ms: 2000,
        };
        Udp::new(r, 2, cfg, Box::new(TestBoard(j.clone()))).unwrap()
    };
    let (mut a, mut b) = (mk(0), mk(1));
    let big = message(0, 1, 0, 1 << 18);
    assert!(a.try_send(1, &[&big[..10], &big[10..]]).unwrap());
    assert!(a.try_send(0, &[b"self"]).unwrap());
    assert!(a.try_send(1, &[&[0u8; (1 << 18) + 1]]).is_err());
    let mut got = Vec::new();
    let mut mine = Vec::new();
    for _ in 0..2000 {
        a.poll(&mut |f, p| mine.push((f, p.to_vec())));
        b.poll(&mut |f, p| got.push((f, p.to_vec())));
        if !got.is_empty() && !a.pending() {
            break;
        }
        wait(&[], 1);
    }
    assert_eq!(got, vec![(0, big)]);
    assert_eq!(mine, vec![(0, b"self".to_vec())]);
    let s = a.stats();
    assert_eq!((s.packets_sent, s.bytes_sent), (2, (1 << 18) + 4));
    a.shutdown();
    b.shutdown();
    assert!(!a.pending() && !b.pending());
}

/// Three ranks on three hosts (no shm segment: each is alone on its host): whichever of tcp
/// and udp FERRITE_TRANSPORTS lists first carries the traffic across hosts.
#[test]
fn nets_route_across_hosts_to_the_first_listed_of_udp_and_tcp() {
    for (list, want) in [("self,shm,udp,tcp", "udp"), ("self,tcp,udp", "tcp")] {
        let j = job("net");
        let map = || crate::transport::nodes::NodeMap::parse("(vector,(0,3,1))");
        let mut nets: Vec<crate::transport::Net> = (0..3)
            .map(|r| crate::transport::Net::init_with_nodes(r, 3, &j, list, map()).unwrap())
            .collect();
        assert!(nets[0].try_send(2, &[b"0 to 2"]).unwrap());
        assert!(nets[1].try_send(2, &[b"1 to 2"]).unwrap());
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while got.len() < 2 && Instant::now() < deadline {
            for n in nets.iter_mut().take(2) {
                n.poll(&mut |_, _| {});
            }
            nets[2].poll(&mut |f, p| got.push((f, p.to_vec())));
        }
        got.sort();
        assert_eq!(got, [(0, b"0 to 2".to_vec()), (1, b"1 to 2".to_vec())]);
        let sent = |n: &crate::transport::Net, t: &str| {
            n.stats()
                .transports
                .iter()
                .find(|x| x.0 == t)
                .map_or(0, |x| x.1.packets_sent)
        };
        assert_eq!(sent(&nets[0], want), 1, "{list}");
    }
}
