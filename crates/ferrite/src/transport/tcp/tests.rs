use super::card::test_board::{secret_of, TestBoard};
use super::*;
use crate::conn::policy::CloseCause;
use crate::conn::wire::{self, Kind};
use crate::transport::Net;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

fn job(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "tcptest-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn cfg(sendq: usize) -> TcpConfig {
    TcpConfig {
        ip: IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        max_packet: 1 << 16,
        eager_packet: 1 << 16,
        sendq_bytes: sendq,
        linger_ms: 5000,
        connect_retries: 3,
        policy: crate::conn::policy::Kind::OnDemand,
        max_conns: 1000,
        threshold: 16,
        idle_ms: 0,
        setup: crate::conn::policy::Mechanism::Cm,
    }
}

/// `n` endpoints of one job, all listening.
fn endpoints(tag: &str, n: u32, sendq: usize) -> (String, Vec<Tcp>) {
    let j = job(tag);
    let eps = (0..n)
        .map(|r| Tcp::new(r, n, cfg(sendq), Box::new(TestBoard(j.clone()))).unwrap())
        .collect();
    (j, eps)
}

type Got = Vec<Vec<(Proc, Vec<u8>)>>;

/// Polls every endpoint until `done(received so far)` (a bound on passes keeps a broken run
/// from hanging; the test then fails on the data).
fn pump(eps: &mut [Tcp], got: &mut Got, mut done: impl FnMut(&Got) -> bool) {
    got.resize(eps.len(), Vec::new());
    for _ in 0..200_000 {
        if done(got) {
            return;
        }
        for (i, ep) in eps.iter_mut().enumerate() {
            ep.poll(&mut |f, p| got[i].push((f, p.to_vec())));
        }
    }
}

fn open_socks(t: &Tcp) -> usize {
    t.socks.len()
}

#[test]
fn first_message_opens_one_connection_and_packets_arrive_in_order() {
    let (_j, mut eps) = endpoints("basic", 2, 1 << 20);
    for i in 0..10u8 {
        assert!(eps[0].try_send(1, &[b"hdr", &[i; 3]]).unwrap());
    }
    let mut got = Vec::new();
    pump(&mut eps, &mut got, |g| g[1].len() == 10);
    let want: Vec<_> = (0..10u8)
        .map(|i| (0, [b"hdr".to_vec(), vec![i; 3]].concat()))
        .collect();
    assert_eq!(got[1], want);
    // The answer goes over the same connection.
    assert!(eps[1].try_send(0, &[b"back"]).unwrap());
    pump(&mut eps, &mut got, |g| g[0].len() == 1);
    assert_eq!(got[0], vec![(1, b"back".to_vec())]);
    let (a, b) = (eps[0].stats(), eps[1].stats());
    assert_eq!((a.conns_opened_first_message, a.conns_accepted), (1, 0));
    assert_eq!((b.conns_opened_first_message, b.conns_accepted), (0, 1));
    assert_eq!((a.packets_sent, a.bytes_sent), (10, 60));
    assert_eq!((b.packets_received, b.bytes_received), (10, 60));
    assert_eq!((open_socks(&eps[0]), open_socks(&eps[1])), (1, 1));
    assert!(!eps[0].pending() && !eps[1].pending());
}

#[test]
fn a_process_reaches_itself_without_a_socket() {
    let (_j, mut eps) = endpoints("own", 2, 1 << 20);
    assert!(eps[0].try_send(0, &[b"me"]).unwrap());
    let mut got = Vec::new();
    pump(&mut eps, &mut got, |g| g[0].len() == 1);
    assert_eq!(got[0], vec![(0, b"me".to_vec())]);
    assert_eq!(open_socks(&eps[0]), 0);
    let err = eps[0].try_send(2, &[b"x"]).unwrap_err();
    assert!(err.msg.contains("rank 2"), "{}", err.msg);
    let err = eps[0]
        .try_send(1, &[&vec![0u8; (1 << 16) + 1]])
        .unwrap_err();
    assert!(err.msg.contains("exceeds"), "{}", err.msg);
}

#[test]
fn everyone_sending_first_ends_with_one_connection_per_pair_and_order_kept() {
    let n = 6u32;
    let per = 50u32;
    let (_j, mut eps) = endpoints("race", n, 1 << 20);
    // Every endpoint sends to every other before anyone polls: every pair dials both ways.
    for k in 0..per {
        for (r, ep) in eps.iter_mut().enumerate() {
            for to in 0..n {
                if to != r as u32 {
                    let body = [r as u32, to, k].map(u32::to_le_bytes).concat();
                    assert!(ep.try_send(to, &[&body]).unwrap());
                }
            }
        }
    }
    let want = (per * (n - 1)) as usize;
    let mut got = Vec::new();
    pump(&mut eps, &mut got, |g| g.iter().all(|v| v.len() == want));
    for (me, v) in got.iter().enumerate() {
        assert_eq!(v.len(), want, "rank {me}");
        for from in 0..n {
            if from == me as u32 {
                continue;
            }
            let seq: Vec<u32> = v
                .iter()
                .filter(|(f, _)| *f == from)
                .map(|(_, p)| {
                    assert_eq!(p[..8], [from, me as u32].map(u32::to_le_bytes).concat()[..]);
                    u32::from_le_bytes(p[8..12].try_into().unwrap())
                })
                .collect();
            assert_eq!(seq, (0..per).collect::<Vec<_>>(), "{from} -> {me}");
        }
    }
    // Let the losing sockets' closes land, then count: one socket per pair on each side.
    pump(&mut eps, &mut got, |_| false);
    let mut losers = 0;
    for (r, ep) in eps.iter().enumerate() {
        let s = ep.stats();
        assert_eq!(open_socks(ep), (n - 1) as usize, "rank {r}");
        assert_eq!(
            s.conns_opened_first_message + s.conns_accepted,
            (n - 1) as u64,
            "rank {r}"
        );
        // The higher rank's attempt survives a race: rank r accepts from every higher rank.
        assert_eq!(s.conns_accepted, (n - 1) as u64 - r as u64, "rank {r}");
        losers += s.race_losers;
    }
    assert!(losers > 0, "no race happened");
}

fn hello(secret: u64, from: u32, to: u32) -> Vec<u8> {
    let mut b = Vec::new();
    wire::encode_prefix(&mut b, Kind::Hello, 0, from, secret);
    b.extend_from_slice(&to.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    assert_eq!(b.len(), HELLO_LEN);
    b
}

/// Polls `ep` until the stranger's socket is closed by it; returns what it answered.
fn answered(ep: &mut Tcp, s: &mut std::net::TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
    let mut out = Vec::new();
    for _ in 0..20_000 {
        ep.poll(&mut |_, _| panic!("a stranger's bytes reached delivery"));
        let mut b = [0u8; 64];
        match s.read(&mut b) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
            Err(_) => {}
        }
    }
    panic!("the stranger's socket was never closed");
}

#[test]
fn strangers_are_dropped_counted_and_never_delivered() {
    let (j, mut eps) = endpoints("stranger", 2, 1 << 20);
    let addr = eps[0].addr();
    // Wrong secret.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&hello(secret_of(&j) ^ 1, 1, 0)).unwrap();
    assert_eq!(answered(&mut eps[0], &mut s), Vec::<u8>::new());
    assert_eq!(eps[0].stats().strangers_dropped, 1);
    // Noise of hello size, then more noise after it.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&[0xAB; HELLO_LEN + 100]).unwrap();
    answered(&mut eps[0], &mut s);
    assert_eq!(eps[0].stats().strangers_dropped, 2);
    // The right secret but a rank outside the job.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&hello(secret_of(&j), 7, 0)).unwrap();
    answered(&mut eps[0], &mut s);
    assert_eq!(eps[0].stats().strangers_dropped, 3);
    assert_eq!(open_socks(&eps[0]), 0);
    // The job still works.
    assert!(eps[1].try_send(0, &[b"still here"]).unwrap());
    let mut got = Vec::new();
    pump(&mut eps, &mut got, |g| g[0].len() == 1);
    assert_eq!(got[0], vec![(1, b"still here".to_vec())]);
}

#[test]
fn a_full_send_queue_says_no_room_and_nothing_is_lost_or_reordered() {
    let (_j, mut eps) = endpoints("full", 2, 256 << 10);
    let total = 3000u32;
    let body = vec![0x5Au8; 60_000];
    let mut sent = 0u32;
    let mut no_room = 0u32;
    let mut got = Vec::new();
    got.resize(2, Vec::new());
    // The receiver polls only every few rounds, so the sender's queue fills up.
    let mut round = 0u32;
    while sent < total && round < 1_000_000 {
        round += 1;
        let seq = sent.to_le_bytes();
        if eps[0].try_send(1, &[&seq, &body]).unwrap() {
            sent += 1;
        } else {
            no_room += 1;
            eps[0].poll(&mut |_, _| {});
            if no_room.is_multiple_of(4) {
                eps[1].poll(&mut |f, p| got[1].push((f, p[..4].to_vec())));
            }
        }
    }
    assert!(no_room > 0, "the queue never filled");
    assert!(eps[0].stats().no_room > 0);
    pump(&mut eps, &mut got, |g| g[1].len() == total as usize);
    let seq: Vec<u32> = got[1]
        .iter()
        .map(|(_, p)| u32::from_le_bytes(p[..4].try_into().unwrap()))
        .collect();
    assert_eq!(seq, (0..total).collect::<Vec<_>>());
    assert_eq!(eps[1].stats().bytes_received, total as u64 * 60_004);
    assert!(!eps[0].pending());
}

#[test]
fn a_peer_gone_without_closing_fails_later_sends_naming_it() {
    let (_j, mut eps) = endpoints("eof", 3, 1 << 20);
    assert!(eps[0].try_send(2, &[b"hi"]).unwrap());
    let mut got = Vec::new();
    pump(&mut eps, &mut got, |g| g[2].len() == 1);
    let gone = eps.pop().unwrap();
    drop(gone); // no shutdown: no BYE, just EOF
                // Rank 0 notices when it next reads; sends to rank 2 then fail, others still work.
    pump(&mut eps, &mut got, |_| false);
    let dead = eps[0].take_failures();
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].0 == 2 && dead[0].1.contains("rank 2 is gone"),
        "{dead:?}"
    );
    assert!(eps[0].take_failures().is_empty(), "reported once");
    let err = eps[0].try_send(2, &[b"x"]).unwrap_err();
    assert_eq!(err.kind, crate::transport::Kind::PeerFailed);
    assert!(
        err.msg.contains("rank 2") && err.msg.contains("lost"),
        "{}",
        err.msg
    );
    assert_eq!(eps[0].stats().conns_closed, 1);
    assert!(eps[0].try_send(1, &[b"ok"]).unwrap());
    pump(&mut eps, &mut got, |g| g[1].len() == 1);
    assert_eq!(got[1], vec![(0, b"ok".to_vec())]);
}

#[test]
fn a_reset_connection_fails_the_peer_too() {
    let (_j, mut eps) = endpoints("rst", 2, 1 << 20);
    assert!(eps[1].try_send(0, &[b"hi"]).unwrap());
    let mut got = Vec::new();
    pump(&mut eps, &mut got, |g| g[0].len() == 1);
    let gone = eps.pop().unwrap();
    // SO_LINGER 0: closing sends a reset instead of a FIN.
    for s in gone.socks.values() {
        let l = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: a valid socket and option value of the stated size.
        let rc = unsafe {
            libc::setsockopt(
                s.stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&l as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
    }
    drop(gone);
    pump(&mut eps, &mut got, |_| false);
    let err = eps[0].try_send(1, &[b"x"]).unwrap_err();
    assert_eq!(err.kind, crate::transport::Kind::PeerFailed);
    assert!(
        err.msg.contains("rank 1") && err.msg.contains("lost"),
        "{}",
        err.msg
    );
}

#[test]
fn an_unreachable_peer_is_an_error_after_retries() {
    let j = job("nocard");
    let mut cfg1 = cfg(1 << 20);
    cfg1.linger_ms = 0;
    let mut a = Tcp::new(0, 2, cfg1, Box::new(TestBoard(j))).unwrap();
    // Rank 1 never published a card.
    assert!(a.try_send(1, &[b"x"]).unwrap());
    assert!(a.pending());
    let mut failed = None;
    for _ in 0..2_000 {
        a.poll(&mut |_, _| {});
        match a.try_send(1, &[b"y"]) {
            Err(e) => {
                failed = Some(e);
                break;
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    let e = failed.expect("never gave up");
    assert!(
        e.msg.contains("rank 1") && e.msg.contains("business card"),
        "{}",
        e.msg
    );
    assert!(
        !a.pending(),
        "a failed peer's packets are dropped, not pending"
    );
    assert!(a.stats().handshake_retries > 0);
}

#[test]
fn clean_shutdown_is_not_a_failure_and_delivers_the_last_bytes() {
    let (_j, mut eps) = endpoints("bye", 2, 1 << 20);
    let big = vec![3u8; 60_000];
    // Until the queue is full (the receiver does not read yet): shutdown must send the rest.
    let mut sent = 0;
    while eps[0].try_send(1, &[&big]).unwrap() {
        sent += 1;
        eps[0].poll(&mut |_, _| {});
    }
    assert!(eps[0].pending());
    let mut b = eps.pop().unwrap();
    let mut a = eps.pop().unwrap();
    let got = std::thread::scope(|sc| {
        let rx = sc.spawn(move || {
            let mut n = 0;
            while n < sent {
                b.poll(&mut |_, p| {
                    assert_eq!(p, &big[..]);
                    n += 1
                });
            }
            b.shutdown();
            (n, b.stats())
        });
        a.shutdown();
        rx.join().unwrap()
    });
    assert_eq!(got.0, sent);
    assert_eq!(got.1.conns_closed, 1);
    assert_eq!(a.stats().conns_closed, 1);
    // Neither saw a loss; later sends would name the peer as finalized.
    let err = a.try_send(1, &[b"late"]).unwrap_err();
    assert!(
        err.msg.contains("MPI_Finalize") && err.kind == crate::transport::Kind::PeerClosed,
        "{}",
        err.msg
    );
}

#[test]
fn nets_route_peers_to_tcp_when_shm_is_not_allowed() {
    let j = job("net");
    let mut a = Net::init_with(0, 2, &j, "tcp,self").unwrap();
    let mut b = Net::init_with(1, 2, &j, "tcp").unwrap();
    assert!(a.try_send(1, &[b"to b"]).unwrap());
    assert!(a.try_send(0, &[b"to a"]).unwrap());
    assert!(b.try_send(1, &[b"b to b"]).unwrap());
    let mut ga = Vec::new();
    let mut gb = Vec::new();
    for _ in 0..100_000 {
        if gb.len() == 2 {
            break;
        }
        a.poll(&mut |f, p| ga.push((f, p.to_vec())));
        b.poll(&mut |f, p| gb.push((f, p.to_vec())));
    }
    assert_eq!(ga, vec![(0, b"to a".to_vec())]);
    assert_eq!(gb, vec![(1, b"b to b".to_vec()), (0, b"to b".to_vec())]);
    let names: Vec<_> = a.stats().transports.iter().map(|t| t.0).collect();
    assert_eq!(names, vec!["self", "tcp"]);
    assert!(!a.has_pending());
    // The defaults: 1 MiB rendezvous fragments, eager messages up to a 64 KiB packet.
    assert_eq!(a.max_packet(1), 1 << 20);
    assert_eq!(a.eager_packet(1), 1 << 16);
}

#[test]
fn frames_reassemble_across_any_split_and_oversize_lengths_are_refused() {
    use std::os::unix::net::UnixStream;
    let (mut tx, rx) = UnixStream::pair().unwrap();
    rx.set_nonblocking(true).unwrap();
    let mut wire = Vec::new();
    for len in [0usize, 1, 5, 9000, 3] {
        wire.extend_from_slice(&conn::header(len));
        wire.extend((0..len).map(|i| (i * 7 + len) as u8));
    }
    for c in [conn::CLOSE, conn::CLOSE_ACK, conn::BYE] {
        wire.extend_from_slice(&c.to_le_bytes());
    }
    let mut rb = RecvBuf::new(16);
    let mut frames: Vec<Result<Vec<u8>, &str>> = Vec::new();
    // Odd-sized chunks, so headers and bodies are split everywhere.
    for chunk in wire.chunks(13) {
        tx.write_all(chunk).unwrap();
        let need = rb.need().min(conn::HEADER + 10_000);
        while let Filled::Bytes(_) = rb.fill(rx.as_raw_fd(), need).unwrap() {}
        while let Some(f) = rb.next_frame(10_000).unwrap() {
            frames.push(match f {
                Frame::Packet(p) => Ok(p.to_vec()),
                Frame::Bye => Err("bye"),
                Frame::Close => Err("close"),
                Frame::CloseAck => Err("ack"),
            });
        }
        rb.compact();
    }
    let want: Vec<Result<Vec<u8>, &str>> = [0usize, 1, 5, 9000, 3]
        .iter()
        .map(|&len| Ok((0..len).map(|i| (i * 7 + len) as u8).collect()))
        .chain([Err("close"), Err("ack"), Err("bye")])
        .collect();
    assert_eq!(frames, want);
    tx.write_all(&conn::header(10_001)).unwrap();
    rb.fill(rx.as_raw_fd(), 4).unwrap();
    assert_eq!(rb.next_frame(10_000), Err(10_001));
    drop(tx);
    assert_eq!(rb.fill(rx.as_raw_fd(), 4).unwrap(), Filled::Eof);
}

#[test]
fn the_send_queue_resumes_partial_writes_in_order() {
    use std::os::unix::net::UnixStream;
    let (tx, mut rx) = UnixStream::pair().unwrap();
    tx.set_nonblocking(true).unwrap();
    let mut q = SendQueue::default();
    let frames: Vec<Vec<u8>> = (0..200u32)
        .map(|i| vec![i as u8; 7000 + i as usize])
        .collect();
    let total: usize = frames.iter().map(|f| f.len()).sum();
    for f in &frames {
        q.push(f.clone());
    }
    assert_eq!(q.bytes(), total);
    let mut got = Vec::new();
    rx.set_nonblocking(true).unwrap();
    while !q.is_empty() {
        q.flush(tx.as_raw_fd()).unwrap();
        let mut b = [0u8; 4096];
        while let Ok(n) = rx.read(&mut b) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&b[..n]);
        }
    }
    let mut b = [0u8; 65536];
    while let Ok(n) = rx.read(&mut b) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(got, frames.concat());
    assert_eq!(q.bytes(), 0);
}

#[test]
fn a_ring_opens_two_connections_per_rank_and_nothing_else() {
    let n = 16u32;
    let (_j, mut eps) = endpoints("ring", n, 1 << 20);
    for (r, ep) in eps.iter_mut().enumerate() {
        let to = (r as u32 + 1) % n;
        assert!(ep.try_send(to, &[&(r as u32).to_le_bytes()]).unwrap());
    }
    let mut got = Vec::new();
    pump(&mut eps, &mut got, |g| g.iter().all(|v| v.len() == 1));
    for (r, ep) in eps.iter().enumerate() {
        let left = (r as u32 + n - 1) % n;
        assert_eq!(got[r], vec![(left, left.to_le_bytes().to_vec())]);
        let s = ep.stats();
        assert_eq!(
            (
                s.conns_opened_first_message,
                s.conns_accepted,
                open_socks(ep)
            ),
            (1, 1, 2),
            "rank {r}"
        );
        // State exists for the two neighbours only (one card fetched: the right one).
        assert_eq!(ep.peers.len(), 2, "rank {r}");
    }
}

/// `n` endpoints with a connection budget of `max` each.
fn budget_endpoints(tag: &str, n: u32, max: usize) -> (String, Vec<Tcp>) {
    let j = job(tag);
    let eps = (0..n)
        .map(|r| {
            let c = TcpConfig {
                max_conns: max,
                ..cfg(1 << 20)
            };
            Tcp::new(r, n, c, Box::new(TestBoard(j.clone()))).unwrap()
        })
        .collect();
    (j, eps)
}

/// Every (from, to) stream in `got` is exactly messages 0..per, in order.
fn check_streams(got: &Got, n: u32, per: u32) {
    for (me, v) in got.iter().enumerate() {
        for from in (0..n).filter(|&f| f != me as u32) {
            let seq: Vec<u32> = v
                .iter()
                .filter(|(f, _)| *f == from)
                .map(|(_, p)| {
                    assert_eq!(p[..8], [from, me as u32].map(u32::to_le_bytes).concat()[..]);
                    let k = u32::from_le_bytes(p[8..12].try_into().unwrap());
                    assert!(
                        p[12..].iter().all(|&b| b == k as u8),
                        "{from} -> {me}: body"
                    );
                    k
                })
                .collect();
            assert_eq!(seq, (0..per).collect::<Vec<_>>(), "{from} -> {me}");
        }
    }
}

fn msg(from: u32, to: u32, k: u32) -> Vec<u8> {
    let mut b = [from, to, k].map(u32::to_le_bytes).concat();
    // Some large enough to be split by the socket, so closes meet partly written frames.
    b.resize(12 + (k as usize * 7919) % 40_000, k as u8);
    b
}

#[test]
fn a_budget_of_two_evicts_and_reopens_without_losing_or_reordering() {
    let (n, per, max) = (6u32, 40u32, 2usize);
    let (_j, mut eps) = budget_endpoints("budget", n, max);
    let mut got: Got = Vec::new();
    got.resize(n as usize, Vec::new());
    // Every endpoint talks to every other in turn while traffic flows both ways, so
    // connections are evicted with frames in flight in either direction, closes cross, and
    // peers dial back while an old connection still drains.
    for k in 0..per {
        for (r, ep) in eps.iter_mut().enumerate() {
            for d in 1..n {
                // Every peer once per round, starting somewhere else each time.
                let to = (r as u32 + 1 + (d - 1 + k) % (n - 1)) % n;
                assert!(ep.try_send(to, &[&msg(r as u32, to, k)]).unwrap());
            }
        }
        for _ in 0..(k % 4) * 5 {
            for (i, ep) in eps.iter_mut().enumerate() {
                ep.poll(&mut |f, p| got[i].push((f, p.to_vec())));
            }
        }
    }
    let want = (per * (n - 1)) as usize;
    pump(&mut eps, &mut got, |g| g.iter().all(|v| v.len() == want));
    check_streams(&got, n, per);
    for (r, ep) in eps.iter().enumerate() {
        let c = ep.stats().conn;
        assert_eq!(c.failed, 0, "rank {r}");
        assert!(
            c.closed(CloseCause::Eviction) > 0,
            "rank {r}: no eviction: {c:?}"
        );
        assert!(
            c.open_peak <= (max as u64) + c.over_budget,
            "rank {r}: peak {} over budget {max} (+{})",
            c.open_peak,
            c.over_budget
        );
        assert!(!ep.pending(), "rank {r}");
    }
    // The budget holds at rest: every endpoint ends with at most `max` sockets (plus any
    // taken over budget), none half-closed.
    pump(&mut eps, &mut got, |_| false);
    for (r, ep) in eps.iter().enumerate() {
        assert!(!ep.mgr.closing(), "rank {r}");
        assert!(
            open_socks(ep) <= max + ep.stats().conn.over_budget as usize,
            "rank {r}"
        );
    }
    // Shutting down after all that is clean.
    for ep in eps.iter_mut() {
        ep.cfg.linger_ms = 200;
    }
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        for ep in eps.iter_mut() {
            s.spawn(move || ep.shutdown());
        }
    });
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn closes_from_both_sides_at_once_and_a_dial_back_keep_order() {
    // Budget 1 among 3: each new peer evicts the other, from both ends at once.
    let (n, per) = (3u32, 30u32);
    let (_j, mut eps) = budget_endpoints("cross", n, 1);
    let mut got: Got = Vec::new();
    got.resize(n as usize, Vec::new());
    let mut sent = vec![vec![0u32; n as usize]; n as usize];
    for round in 0..per * 2 {
        // 0 and 1 alternate between each other and 2; 2 answers whoever spoke last.
        for r in 0..n {
            let to = match r {
                0 => [1, 2][(round % 2) as usize],
                1 => [0, 2][(round % 2) as usize],
                _ => round % 2,
            };
            let k = sent[r as usize][to as usize];
            if k < per {
                sent[r as usize][to as usize] += 1;
                assert!(eps[r as usize].try_send(to, &[&msg(r, to, k)]).unwrap());
            }
        }
        for _ in 0..round % 3 {
            for (i, ep) in eps.iter_mut().enumerate() {
                ep.poll(&mut |f, p| got[i].push((f, p.to_vec())));
            }
        }
    }
    assert!(sent
        .iter()
        .enumerate()
        .all(|(r, v)| v.iter().enumerate().all(|(t, &k)| r == t || k == per)));
    let want = (per * (n - 1)) as usize;
    pump(&mut eps, &mut got, |g| g.iter().all(|v| v.len() == want));
    check_streams(&got, n, per);
    let evicted: u64 = eps
        .iter()
        .map(|e| e.stats().conn.closed(CloseCause::Eviction))
        .sum();
    assert!(evicted >= 3, "{evicted}");
    for ep in &eps {
        assert_eq!(ep.stats().conn.failed, 0);
    }
}

#[test]
fn a_new_connection_waits_until_the_old_one_has_drained() {
    let (_j, mut eps) = endpoints("handoff", 2, 1 << 20);
    let mut got: Got = Vec::new();
    for k in 0..5 {
        assert!(eps[0].try_send(1, &[&msg(0, 1, k)]).unwrap());
        assert!(eps[1].try_send(0, &[&msg(1, 0, k)]).unwrap());
    }
    pump(&mut eps, &mut got, |g| g[0].len() == 5 && g[1].len() == 5);
    // 0 closes (as the policy would for eviction); 1 reads the CLOSE and answers, sending
    // more on the old connection first; 0 reads everything and is done.
    let now = eps[0].now();
    eps[0].mgr.close(1, now);
    eps[0].run_mgr();
    assert!(eps[1].try_send(0, &[&msg(1, 0, 5)]).unwrap());
    let old1 = eps[1].mgr.connection(0).expect("1 is still connected");
    for _ in 0..100 {
        eps[1].poll(&mut |f, p| got[1].push((f, p.to_vec())));
        if eps[1].mgr.closing_of(0).is_some() {
            break;
        }
    }
    assert_eq!(eps[1].mgr.closing_of(0), Some(old1));
    // 1 will not see 0's CLOSE_ACK before the new connection: hide the old socket from epoll.
    let fd1 = eps[1].socks[&old1].stream.as_raw_fd();
    eps[1].epoll_ctl(libc::EPOLL_CTL_DEL, fd1, 0, 0).unwrap();
    for _ in 0..100 {
        eps[0].poll(&mut |f, p| got[0].push((f, p.to_vec())));
        if eps[0].mgr.closing_of(1).is_none() {
            break;
        }
    }
    assert!(eps[0].mgr.closing_of(1).is_none() && eps[0].mgr.connection(1).is_none());
    assert_eq!(
        got[0].len(),
        6,
        "what 1 sent before its close arrived first"
    );
    // 0 dials again; 1 (still closing) sends too: its packets wait for the close.
    for k in 5..10 {
        assert!(eps[0].try_send(1, &[&msg(0, 1, k)]).unwrap());
    }
    for k in 6..10 {
        assert!(eps[1].try_send(0, &[&msg(1, 0, k)]).unwrap());
    }
    for _ in 0..2000 {
        eps[0].poll(&mut |f, p| got[0].push((f, p.to_vec())));
        eps[1].poll(&mut |f, p| got[1].push((f, p.to_vec())));
        if eps[1].mgr.connection(0).is_some() {
            break;
        }
    }
    let new1 = eps[1]
        .mgr
        .connection(0)
        .expect("the new connection is accepted");
    assert_ne!(new1, old1);
    for _ in 0..200 {
        eps[0].poll(&mut |f, p| got[0].push((f, p.to_vec())));
        eps[1].poll(&mut |f, p| got[1].push((f, p.to_vec())));
    }
    assert_eq!(
        got[1].len(),
        5,
        "nothing from the new connection before the old one's end"
    );
    assert_eq!(got[0].len(), 6);
    // The old socket's CLOSE_ACK arrives: the old connection ends and the new one takes over.
    let ev = eps[1].socks[&old1].events;
    eps[1]
        .epoll_ctl(libc::EPOLL_CTL_ADD, fd1, ev, old1.0)
        .unwrap();
    pump(&mut eps, &mut got, |g| g[0].len() == 10 && g[1].len() == 10);
    check_streams(&got, 2, 10);
    for ep in &eps {
        let s = ep.stats();
        assert_eq!((s.conns_closed, s.conn.failed, open_socks(ep)), (1, 0, 1));
    }
}

#[test]
fn a_ring_under_a_budget_of_one_completes_lap_after_lap() {
    let (n, laps) = (3u32, 4u32);
    let (_j, mut eps) = budget_endpoints("ring1", n, 1);
    let mut got: Got = Vec::new();
    got.resize(n as usize, Vec::new());
    for lap in 0..laps {
        for (r, ep) in eps.iter_mut().enumerate() {
            let to = (r as u32 + 1) % n;
            assert!(ep.try_send(to, &[&msg(r as u32, to, lap)]).unwrap());
        }
        let want = lap as usize + 1;
        pump(&mut eps, &mut got, |g| g.iter().all(|v| v.len() == want));
        assert!(
            got.iter().all(|v| v.len() == want),
            "lap {lap}: {:?}",
            got.iter().map(|v| v.len()).collect::<Vec<_>>()
        );
    }
}

/// `n` adaptive endpoints (datagrams first, a connection after `threshold` messages, closed
/// after `idle_ms` unused), each with its own udp channel.
fn adaptive_endpoints(tag: &str, n: u32, threshold: u64, idle_ms: u64) -> (String, Vec<Tcp>) {
    let c = TcpConfig {
        policy: crate::conn::policy::Kind::Adaptive,
        threshold,
        idle_ms,
        ..cfg(1 << 20)
    };
    channel_endpoints(tag, n, c)
}

/// `n` endpoints with configuration `c`, each with its own udp channel.
fn channel_endpoints(tag: &str, n: u32, c: TcpConfig) -> (String, Vec<Tcp>) {
    use crate::conn::reliable;
    use crate::transport::udp::{Channel, ChannelConfig, Inject};
    let j = job(tag);
    let eps = (0..n)
        .map(|r| {
            let c = c.clone();
            let chan = Channel::new(
                r,
                ChannelConfig {
                    ip: IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
                    rel: reliable::Config {
                        max_datagram: 8192,
                        window: 64,
                        rto_initial: 5_000,
                        ..reliable::Config::new(n)
                    },
                    rcvbuf: 4 << 20,
                    inject: Inject::default(),
                },
                Box::new(TestBoard(j.clone())),
            )
            .unwrap();
            Tcp::new(r, n, c, Box::new(TestBoard(j.clone())))
                .unwrap()
                .with_channel(Some(chan))
                .unwrap()
        })
        .collect();
    (j, eps)
}

#[test]
fn adaptive_sends_datagrams_first_then_moves_to_a_connection_in_order() {
    let (n, threshold) = (3u32, 8u64);
    let (_j, mut eps) = adaptive_endpoints("adaptive", n, threshold, 0);
    let mut got: Got = Vec::new();
    got.resize(n as usize, Vec::new());
    // Light traffic (below the threshold): datagrams only, no socket at all.
    for k in 0..5 {
        for r in 0..n {
            for to in (0..n).filter(|&t| t != r) {
                assert!(eps[r as usize].try_send(to, &[&msg(r, to, k)]).unwrap());
            }
        }
    }
    pump(&mut eps, &mut got, |g| g.iter().all(|v| v.len() == 10));
    check_streams(&got, n, 5);
    for ep in &eps {
        assert_eq!(open_socks(ep), 0);
        assert_eq!(ep.stats().conn.datagram_msgs, 10);
    }
    // 0 -> 1 gets heavy while messages still flow: a connection opens at the threshold, and
    // what follows waits until every datagram is acknowledged, then goes over it.
    let per = 200u32;
    for k in 5..per {
        assert!(eps[0].try_send(1, &[&msg(0, 1, k)]).unwrap());
        // Poll now and then, so the connection comes up while traffic flows.
        for _ in 0..(k % 3) * 20 {
            for (i, ep) in eps.iter_mut().enumerate() {
                ep.poll(&mut |f, p| got[i].push((f, p.to_vec())));
            }
        }
    }
    pump(&mut eps, &mut got, |g| {
        g[1].iter().filter(|(f, _)| *f == 0).count() == per as usize
    });
    let seq: Vec<u32> = got[1]
        .iter()
        .filter(|(f, _)| *f == 0)
        .map(|(_, p)| u32::from_le_bytes(p[8..12].try_into().unwrap()))
        .collect();
    assert_eq!(seq, (0..per).collect::<Vec<_>>());
    let c = eps[0].stats().conn;
    assert_eq!(
        c.opened(crate::conn::policy::OpenCause::Threshold),
        1,
        "{c:?}"
    );
    // 5 to each peer, then to 1 until the threshold (and while its connection opens).
    assert!(
        c.connection_msgs > 0 && c.datagram_msgs >= 10 + threshold - 5,
        "{c:?}"
    );
    assert_eq!(
        eps[1]
            .stats()
            .conn
            .opened(crate::conn::policy::OpenCause::Peer),
        1
    );
    assert_eq!(open_socks(&eps[2]), 0, "rank 2 never needed a connection");
    // The answer from 1 takes the connection at once (nothing of 1's is in flight).
    assert!(eps[1].try_send(0, &[&msg(1, 0, 5)]).unwrap());
    pump(&mut eps, &mut got, |g| g[0].len() == 11);
    assert_eq!(got[0].last().unwrap().0, 1);
    assert!(eps[1].stats().conn.connection_msgs >= 1);
}

#[test]
fn adaptive_closes_idle_connections_and_goes_back_to_datagrams_in_order() {
    let (_j, mut eps) = adaptive_endpoints("idle", 2, 2, 30);
    let mut got: Got = Vec::new();
    got.resize(2, Vec::new());
    let mut k = 0;
    for _ in 0..3 {
        // A burst opens the connection; a pause closes it for idleness.
        for _ in 0..10 {
            assert!(eps[0].try_send(1, &[&msg(0, 1, k)]).unwrap());
            k += 1;
        }
        let want = k as usize;
        pump(&mut eps, &mut got, |g| g[1].len() == want);
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(150) {
            for (i, ep) in eps.iter_mut().enumerate() {
                ep.poll(&mut |f, p| got[i].push((f, p.to_vec())));
            }
        }
    }
    let seq: Vec<u32> = got[1]
        .iter()
        .map(|(f, p)| {
            assert_eq!(*f, 0);
            u32::from_le_bytes(p[8..12].try_into().unwrap())
        })
        .collect();
    assert_eq!(seq, (0..k).collect::<Vec<_>>());
    assert!(got[0].is_empty());
    let c = eps[0].stats().conn;
    assert!(c.closed(CloseCause::Idle) >= 2, "{c:?}");
    assert!(
        c.opened(crate::conn::policy::OpenCause::Threshold) >= 2,
        "{c:?}"
    );
    assert_eq!(c.failed, 0);
    for ep in &eps {
        assert_eq!(open_socks(ep), 0, "every connection closed for idleness");
    }
}

#[test]
fn a_blocked_endpoint_is_woken_by_its_redial_timer() {
    // Rank 1 of 2 publishes a card but nobody listens there: every dial is refused.
    let j = job("timer");
    let mut ep = Tcp::new(0, 2, cfg(1 << 20), Box::new(TestBoard(j.clone()))).unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    TestBoard(j.clone())
        .put(1, dead.local_addr().unwrap())
        .unwrap();
    drop(dead);
    assert!(ep.try_send(1, &[b"x"]).unwrap());
    // Until the refusal is seen, then until the backoff's redial: only the timerfd can wake a
    // process that sleeps on the wake fd with nothing else to wait for.
    for _ in 0..100_000 {
        ep.poll(&mut |_, _| {});
        if ep.socks.is_empty() && ep.timer.armed().is_some() {
            break; // refused; the redial waits for the backoff
        }
    }
    assert!(ep.socks.is_empty() && ep.timer.armed().is_some());
    let before = ep.stats().handshake_retries;
    let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 1];
    // SAFETY: ev is valid for one event; the wake fd is the endpoint's epoll fd.
    let k = unsafe { libc::epoll_wait(ep.wake_fd().unwrap(), ev.as_mut_ptr(), 1, 10_000) };
    assert_eq!(k, 1, "the wake fd never became readable");
    ep.poll(&mut |_, _| {});
    assert!(
        ep.stats().handshake_retries > before,
        "no redial after the wake-up"
    );
}

#[test]
fn ud_set_up_settles_the_attempt_over_datagrams_and_the_initiator_dials() {
    let n = 5u32;
    let c = TcpConfig {
        setup: crate::conn::policy::Mechanism::Ud,
        max_conns: 2,
        ..cfg(1 << 20)
    };
    let (_j, mut eps) = channel_endpoints("ud", n, c);
    let mut got: Got = Vec::new();
    got.resize(n as usize, Vec::new());
    // Everyone to everyone under a budget of 2: attempts race, connections close and reopen.
    let per = 12u32;
    for k in 0..per {
        for (r, ep) in eps.iter_mut().enumerate() {
            for d in 1..n {
                let to = (r as u32 + 1 + (d - 1 + k) % (n - 1)) % n;
                assert!(ep.try_send(to, &[&msg(r as u32, to, k)]).unwrap());
            }
        }
        for _ in 0..(k % 3) * 10 {
            for (i, ep) in eps.iter_mut().enumerate() {
                ep.poll(&mut |f, p| got[i].push((f, p.to_vec())));
            }
        }
    }
    let want = (per * (n - 1)) as usize;
    pump(&mut eps, &mut got, |g| g.iter().all(|v| v.len() == want));
    check_streams(&got, n, per);
    for (r, ep) in eps.iter().enumerate() {
        let c = ep.stats().conn;
        assert_eq!(c.failed, 0, "rank {r}");
        assert!(
            c.closed(CloseCause::Eviction) + c.closed(CloseCause::Peer) > 0,
            "rank {r}"
        );
        let ud = ep.mgr.ud_stats().expect("ud runs");
        assert!(
            ud.connected > 0,
            "rank {r}: no ud handshake completed: {ud:?}"
        );
        // No card lookups: every address came in a handshake.
        assert!(ep.mgr.addrs_learned() > 0, "rank {r}");
    }
}

#[test]
fn ud_set_up_answers_a_peer_that_never_sent_anything() {
    let c = TcpConfig {
        setup: crate::conn::policy::Mechanism::Ud,
        ..cfg(1 << 20)
    };
    let (_j, mut eps) = channel_endpoints("udquiet", 2, c);
    let mut got: Got = Vec::new();
    // Rank 1 has made no machine yet (it only polls) when rank 0's request arrives.
    assert!(eps[0].try_send(1, &[b"first"]).unwrap());
    pump(&mut eps, &mut got, |g| g[1].len() == 1);
    assert_eq!(got[1], vec![(0, b"first".to_vec())]);
    assert_eq!(eps[1].stats().conns_accepted, 1);
}

#[test]
fn a_stranger_that_connects_and_stays_silent_counts_as_a_stranger() {
    let (_j, mut eps) = endpoints("silent", 2, 1 << 20);
    let s = std::net::TcpStream::connect(eps[0].addr()).unwrap();
    // Accepted (which makes the cm machine and its deadline for the hello)...
    for _ in 0..1000 {
        eps[0].poll(&mut |_, _| {});
        if open_socks(&eps[0]) == 1 {
            break;
        }
    }
    assert_eq!(open_socks(&eps[0]), 1);
    // ...then closed when the deadline passes, woken by the timerfd.
    let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 1];
    for _ in 0..3 {
        // SAFETY: ev is valid for one event; the wake fd is the endpoint's epoll fd.
        unsafe { libc::epoll_wait(eps[0].wake_fd().unwrap(), ev.as_mut_ptr(), 1, 5_000) };
        eps[0].poll(&mut |_, _| {});
        if open_socks(&eps[0]) == 0 {
            break;
        }
    }
    assert_eq!(open_socks(&eps[0]), 0);
    assert_eq!(eps[0].stats().strangers_dropped, 1);
    drop(s);
}

/// Polls both endpoints for up to 20 s (dials back off in real time) until `done`.
fn pump_slowly(eps: &mut [Tcp], got: &mut Got, mut done: impl FnMut(&mut [Tcp], &Got) -> bool) {
    got.resize(eps.len(), Vec::new());
    for _ in 0..20_000 {
        if done(eps, got) {
            return;
        }
        for (i, ep) in eps.iter_mut().enumerate() {
            ep.poll(&mut |f, p| got[i].push((f, p.to_vec())));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Set-up failures for want of descriptors or socket memory (EMFILE, ENFILE, ENOBUFS, ENOMEM;
/// injected: ENOBUFS cannot be produced on demand) all take one path, on either side: a
/// listener whose accept fails refuses the waiting connection, a dial that fails is tried
/// again with backoff; once the resource returns the connection comes up and the data
/// arrives.
#[test]
fn out_of_resources_in_set_up_is_retried_until_the_connection_comes_up() {
    use listener::inject;
    for errno in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
        // Rank 0's accepts fail twice.
        let (_j, mut eps) = endpoints("accept-fails", 2, 1 << 20);
        inject::set(&inject::ACCEPT, errno, 2);
        assert!(eps[1].try_send(0, &[b"through"]).unwrap());
        let mut got = Vec::new();
        pump_slowly(&mut eps, &mut got, |_, g| g[0].len() == 1);
        assert_eq!(got[0], vec![(1, b"through".to_vec())], "errno {errno}");
        // (An injected failure with nothing waiting refuses nothing.)
        assert!(eps[0].stats().refused_no_fd >= 1, "errno {errno}");
        assert!(eps[1].stats().handshake_retries >= 1, "errno {errno}");
        // Rank 1's dials fail twice.
        let (_j, mut eps) = endpoints("dial-fails", 2, 1 << 20);
        inject::set(&inject::CONNECT, errno, 2);
        assert!(eps[1].try_send(0, &[b"through"]).unwrap());
        let mut got = Vec::new();
        pump_slowly(&mut eps, &mut got, |_, g| g[0].len() == 1);
        assert_eq!(got[0], vec![(1, b"through".to_vec())], "errno {errno}");
        assert!(eps[1].stats().handshake_retries >= 2, "errno {errno}");
        inject::set(&inject::ACCEPT, 0, 0);
        inject::set(&inject::CONNECT, 0, 0);
    }
}

/// The same failures lasting past the retries: the peer's operations fail with
/// MPI_ERR_PROC_ABORTED and a message naming the peer and, for a failed dial, the cause and
/// what to do about it. Never a hang.
#[test]
fn out_of_resources_that_lasts_fails_the_peer_with_a_clear_message() {
    use listener::inject;
    let cases: [(&'static std::thread::LocalKey<_>, i32, &str); 4] = [
        (&inject::ACCEPT, libc::ENOBUFS, ""),
        (&inject::ACCEPT, libc::EMFILE, ""),
        (&inject::CONNECT, libc::ENOBUFS, "short of socket memory"),
        (&inject::CONNECT, libc::EMFILE, "ulimit -n"),
    ];
    for (which, errno, hint) in cases {
        let (_j, mut eps) = endpoints("fails-for-good", 2, 1 << 20);
        inject::set(which, errno, u32::MAX);
        assert!(eps[1].try_send(0, &[b"never"]).unwrap());
        let mut failed = None;
        pump_slowly(&mut eps, &mut Vec::new(), |eps, _| {
            if let Err(e) = eps[1].try_send(0, &[b"again"]) {
                failed = Some(e);
            }
            failed.is_some()
        });
        inject::set(which, 0, 0);
        let e = failed.unwrap_or_else(|| panic!("errno {errno}: never gave up"));
        assert_eq!(e.kind, crate::transport::Kind::PeerFailed, "{}", e.msg);
        assert!(
            e.msg.contains("cannot connect to rank 0") && e.msg.contains(hint),
            "errno {errno}: {}",
            e.msg
        );
        assert!(!eps[1].pending(), "errno {errno}: packets left pending");
    }
}
