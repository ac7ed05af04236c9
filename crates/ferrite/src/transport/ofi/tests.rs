//! The ofi transport on libfabric's tcp provider over loopback, two endpoints in one test
//! process (one per thread). Skipped, with a line saying so, where libfabric is missing.

use super::test_board::TestBoard;
use super::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn skip() -> bool {
    if let Err(e) = ffi::available() {
        eprintln!("SKIP ofi test: {e}");
        return true;
    }
    false
}

fn pair(job: &str, cfg: OfiConfig) -> (Ofi, Ofi) {
    let mut c = cfg;
    c.iface = "lo".into();
    let a = Ofi::new(0, 2, c.clone(), Box::new(TestBoard(job.into()))).expect("rank 0");
    let b = Ofi::new(1, 2, c, Box::new(TestBoard(job.into()))).expect("rank 1");
    (a, b)
}

/// A one-rank job's endpoint on lo, its card on board `job`.
fn alone_on_lo(job: &str) -> Ofi {
    let c = OfiConfig {
        iface: "lo".into(),
        ..OfiConfig::test_default()
    };
    Ofi::new(0, 1, c, Box::new(TestBoard(job.into()))).expect("tcp provider on lo")
}

/// Polls `t` until `n` packets arrived (or 20 s pass), returning them.
fn collect(t: &mut Ofi, n: usize) -> Vec<(Proc, Vec<u8>)> {
    let mut got = Vec::new();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while got.len() < n && std::time::Instant::now() < until {
        t.poll(&mut |from, p| got.push((from, p.to_vec())));
        if got.len() < n && t.arm() {
            t.wait(50);
        }
        t.disarm();
    }
    got
}

#[test]
fn opens_the_tcp_provider_on_loopback() {
    if skip() {
        return;
    }
    let t = alone_on_lo("ofitest-open");
    assert_eq!(t.provider().provider, "tcp");
    assert_eq!(t.provider().domain, "lo");
    assert!(t.wake_fd().is_some());
}

#[test]
fn packets_arrive_whole_in_order_with_credits() {
    if skip() {
        return;
    }
    let cfg = OfiConfig {
        credits: 4,
        ..OfiConfig::test_default()
    };
    let (mut a, mut b) = pair("ofitest-order", cfg);
    // Many more packets than credits, sent before the receiver polls at all: they wait
    // in order (first for the connection, then for credits) and none is dropped.
    let n = 200;
    let max = a.max_packet();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let sender = std::thread::spawn(move || {
        for i in 0..n {
            let len = [0, 1, 100, max][i % 4];
            let body: Vec<u8> = (0..len).map(|k| (i * 7 + k) as u8).collect();
            let idx = (i as u32).to_le_bytes();
            while !a
                .try_send(1, &[&idx, &body[..len.saturating_sub(4)]])
                .unwrap()
            {
                a.poll(&mut |_, _| panic!("nothing comes back"));
            }
        }
        while a.pending() && !stop2.load(Ordering::Relaxed) {
            a.poll(&mut |_, _| {});
            if a.arm() {
                a.wait(50);
            }
        }
        a
    });
    let got = collect(&mut b, n);
    stop.store(true, Ordering::Relaxed);
    let a = sender.join().unwrap();
    assert_eq!(got.len(), n);
    for (i, (from, p)) in got.iter().enumerate() {
        assert_eq!(*from, 0);
        assert_eq!(u32::from_le_bytes(p[..4].try_into().unwrap()) as usize, i);
        let len = [0, 1, 100, max][i % 4];
        assert_eq!(p.len(), 4 + len.saturating_sub(4));
        assert!(p[4..]
            .iter()
            .enumerate()
            .all(|(k, &x)| x == (i * 7 + k) as u8));
    }
    assert_eq!(a.stats().packets_sent, n as u64);
    assert_eq!(a.stats().conns_opened_first_message, 1);
    assert_eq!(b.stats().conns_accepted, 1);
    assert_eq!(b.stats().packets_received, n as u64);
}

#[test]
fn rendezvous_reads_the_senders_buffer_and_caches_its_registration() {
    if skip() {
        return;
    }
    let (mut a, mut b) = pair("ofitest-read", OfiConfig::test_default());
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let addr = data.as_ptr() as u64;
    // Rank 1 says hello first (the connection), then rank 0 makes progress (the provider
    // answers reads there) until told.
    b.try_send(0, &[b"hi"]).unwrap();
    let mut got = Vec::new();
    for _ in 0..2000 {
        b.poll(&mut |_, _| {});
        a.poll(&mut |from, p| got.push((from, p.to_vec())));
        if !got.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(got, vec![(1, b"hi".to_vec())]);
    // The keys the RTS packets carry; the second, inside the first buffer, is a cache hit.
    let whole = a.rndv_key(1, addr, data.len());
    let inside = a.rndv_key(1, addr + 12345, 5000);
    assert_eq!(whole.as_bytes().len(), 16);
    // A batch (a window of matched RTS): pieces on both sides of 16 KiB, odd offsets.
    let spans = [
        (0usize, 70_000usize),
        (1, 16_384),
        (300_000, 262_144),
        (999_000, 1000),
        (5, 65_537),
    ];
    let keys: Vec<RndvKey> = spans
        .iter()
        .map(|&(o, n)| a.rndv_key(1, addr + o as u64, n))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let server = std::thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            a.poll(&mut |_, _| {});
            if a.arm() {
                a.wait(20);
            }
            a.disarm();
        }
        a
    });
    let mut dst = vec![0u8; data.len()];
    assert!(b.read_keyed(0, addr, &whole, &mut dst).unwrap(), "fi_read");
    assert!(dst == data);
    let mut part = vec![0u8; 5000];
    assert!(b.read_keyed(0, addr + 12345, &inside, &mut part).unwrap());
    assert_eq!(part[..], data[12345..12345 + 5000]);
    // Without a key (an RTS from a sender that could not register): fragments.
    assert!(!b
        .read_keyed(0, addr, &RndvKey::default(), &mut part)
        .unwrap());
    // Every read of a batch in flight before waiting for any; a keyless one falls back.
    let mut dsts: Vec<Vec<u8>> = spans.iter().map(|&(_, n)| vec![0u8; n]).collect();
    dsts.push(vec![0u8; 100]);
    let mut reads: Vec<KeyedRead> = dsts
        .iter_mut()
        .zip(keys.iter().chain([RndvKey::default()].iter()))
        .zip(spans.iter().chain([(0, 100)].iter()))
        // SAFETY: each dst outlives the batch and is not touched during it.
        .map(|((d, k), &(o, _))| unsafe {
            KeyedRead::new(0, addr + o as u64, *k, d.as_mut_ptr(), d.len())
        })
        .collect();
    b.read_keyed_many(&mut reads);
    let done: Vec<bool> = reads.iter().map(|r| r.done).collect();
    assert_eq!(done, [true, true, true, true, true, false]);
    drop(reads);
    for (d, &(o, n)) in dsts.iter().zip(&spans) {
        assert!(d[..] == data[o..o + n], "read of {n} bytes at {o}");
    }
    assert_eq!(b.ofi_stats.read_batch_peak, 5);
    stop.store(true, Ordering::Relaxed);
    let a = server.join().unwrap();
    let batch: usize = spans.iter().map(|s| s.1).sum();
    assert_eq!(b.stats().remote_reads, 7);
    assert_eq!(b.stats().remote_read_fallbacks, 2);
    assert_eq!(b.stats().remote_read_bytes, 1_005_000 + batch as u64);
    assert_eq!((a.stats().mr_cache_misses, a.stats().mr_cache_hits), (1, 6));
}

/// A job of `n` ranks (one thread each) under `cfg`: every rank sends `m` numbered packets
/// to each peer `to(rank)` names, in turn, and checks what it receives (all of it, in
/// order per sender). Returns each rank's transport after its shutdown.
fn job(name: &str, n: u32, cfg: OfiConfig, m: u32, to: fn(u32, u32) -> Vec<u32>) -> Vec<Ofi> {
    let done = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let mut c = cfg.clone();
            c.iface = "lo".into();
            let done = done.clone();
            let name = name.to_string();
            std::thread::spawn(move || {
                let mut t = Ofi::new(r, n, c, Box::new(TestBoard(name))).expect("open");
                // Every rank's card is published before anyone dials (MPI_Init's barrier).
                done.fetch_add(1, Ordering::SeqCst);
                while done.load(Ordering::SeqCst) < n {
                    std::thread::yield_now();
                }
                let mut next = HashMap::new();
                let mut got = 0;
                let mut k = 0;
                let mut check = |from: Proc, p: &[u8], got: &mut usize| {
                    let i = u32::from_le_bytes(p[..4].try_into().unwrap());
                    let e = next.entry(from).or_insert(0u32);
                    assert_eq!(i, *e, "rank {r}: packet {i} from {from} out of order");
                    assert!(p[4..].iter().all(|&x| x == (from + i) as u8));
                    *e += 1;
                    *got += 1;
                };
                t.connect_init().unwrap();
                let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
                // (Peers done with theirs may send already.)
                while t.init_connecting() {
                    assert!(std::time::Instant::now() < until, "rank {r}: init hangs");
                    t.poll(&mut |from, p| check(from, p, &mut got));
                    if t.arm() {
                        t.wait(20);
                    }
                }
                // Peer after peer (under a budget each change of peer may close a connection).
                let sends: Vec<(u32, u32)> = to(r, n)
                    .into_iter()
                    .flat_map(|p| (0..m).map(move |i| (p, i)))
                    .collect();
                let expect: usize = (0..n).filter(|&s| to(s, n).contains(&r)).count() * m as usize;
                while (k < sends.len() || got < expect || t.pending())
                    && std::time::Instant::now() < until
                {
                    if let Some(&(p, i)) = sends.get(k) {
                        let body = vec![(r + i) as u8; 100 + (i as usize * 37) % 3000];
                        if t.try_send(p, &[&i.to_le_bytes(), &body]).unwrap() {
                            k += 1;
                        }
                    }
                    t.poll(&mut |from, p| check(from, p, &mut got));
                    if k == sends.len() && got < expect && t.arm() {
                        t.wait(20);
                    }
                }
                assert_eq!((k, got), (sends.len(), expect), "rank {r} timed out");
                done.fetch_add(1, Ordering::SeqCst);
                // Everyone has everything before anyone closes (MPI_Finalize's barrier).
                // (A rank that panicked never counts: the others give up at `until`.)
                while done.load(Ordering::SeqCst) < 2 * n && std::time::Instant::now() < until {
                    t.poll(&mut |_, _| {});
                    if t.arm() {
                        t.wait(5);
                    }
                }
                t.shutdown();
                t
            })
        })
        .collect();
    threads.into_iter().map(|h| h.join().unwrap()).collect()
}

fn all_peers(r: u32, n: u32) -> Vec<u32> {
    (1..n).map(|d| (r + d) % n).collect()
}

#[test]
fn static_connects_every_pair_at_init_once() {
    if skip() {
        return;
    }
    let cfg = OfiConfig {
        policy: policy::Kind::Static,
        ..OfiConfig::test_default()
    };
    let ts = job("ofitest-static", 4, cfg, 20, all_peers);
    for (r, t) in ts.iter().enumerate() {
        let s = t.stats();
        // Both sides dial at once; the cm race rule keeps one connection per pair.
        assert_eq!(s.conn.open_peak, 3, "rank {r}");
        assert_eq!(
            s.conns_opened_first_message + s.conns_accepted,
            3,
            "rank {r}"
        );
    }
}

#[test]
fn a_budget_of_one_connection_closes_and_reopens_without_losing_packets() {
    if skip() {
        return;
    }
    let cfg = OfiConfig {
        max_conns: 1,
        credits: 2,
        ..OfiConfig::test_default()
    };
    // Rank 0 sends to rank 1, then to rank 2, while both send to it: connections are evicted
    // (closed without losing anything) and reopened.
    let ts = job("ofitest-budget", 3, cfg, 20, |r, n| {
        if r == 0 {
            (1..n).collect()
        } else {
            vec![0]
        }
    });
    let s = ts[0].stats();
    // The manager may go over budget, and counts it: a hello held back too long, one taken
    // to break a cycle of ranks waiting for each other (docs/connections.md).
    assert!(
        s.conn.open_peak <= 1 + s.conn.over_budget,
        "peak {} over a budget of 1 (+{})",
        s.conn.open_peak,
        s.conn.over_budget
    );
    // Rank 0's change of peer evicts at least once; more depends on timing (ranks 1 and 2
    // may be done sending before rank 0 turns to the other).
    assert!(s.conns_closed >= 1, "evictions: {}", s.conns_closed);
    // After shutdown, peers that finalized are recorded as such; nothing else failed.
    for t in &ts {
        for p in 0..3 {
            if let Some(f) = t.mgr.failure(p) {
                assert!(
                    matches!(f.kind, FailKind::Finalized),
                    "rank {} peer {p}: {f:?}",
                    t.rank
                );
            }
        }
    }
}

/// This process's descriptors whose peer is `addr` (a connected socket's other end).
fn sockets_with_peer(addr: std::net::SocketAddr) -> usize {
    let std::net::SocketAddr::V4(a) = addr else {
        return 0;
    };
    let mut n = 0;
    for fd in std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .flatten()
        .filter_map(|d| d.file_name().to_str()?.parse::<i32>().ok())
    {
        // SAFETY: sockaddr_in is plain data, valid zeroed.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: getpeername writes at most `len` bytes into `sa`; on a descriptor that is
        // not a connected socket it fails and touches nothing.
        let rc =
            unsafe { libc::getpeername(fd, (&mut sa as *mut libc::sockaddr_in).cast(), &mut len) };
        if rc == 0
            && i32::from(sa.sin_family) == libc::AF_INET
            && u16::from_be(sa.sin_port) == a.port()
            && u32::from_be(sa.sin_addr.s_addr) == u32::from(*a.ip())
        {
            n += 1;
        }
    }
    n
}

#[test]
fn a_dialer_that_closes_before_its_request_leaves_no_socket_behind() {
    if skip() {
        return;
    }
    let t = alone_on_lo("ofitest-cm-eof");
    // The passive endpoint's name is a sockaddr_in: family, port (big-endian), address.
    let card = TestBoard("ofitest-cm-eof".into())
        .get(0)
        .expect("board")
        .expect("card");
    let port = u16::from_be_bytes([card[2], card[3]]);
    let ip = std::net::Ipv4Addr::new(card[4], card[5], card[6], card[7]);
    // A dialer that connects and closes before sending its connection request (as a dial
    // the manager gives up at once, or a process that dies).
    let s = std::net::TcpStream::connect((ip, port)).expect("connect to the passive endpoint");
    let dialer = s.local_addr().expect("local address");
    drop(s);
    // The provider accepts the socket on one fi_eq_read and reads its end on a later one.
    // errno is EAGAIN before each read, as a udp provider's recvmsg or a data socket's recv
    // leaves it in a running job.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut accepted = false;
    loop {
        // SAFETY: this thread's errno.
        unsafe { *libc::__errno_location() = libc::EAGAIN };
        while t.eq.read().is_some() {}
        let open = sockets_with_peer(dialer);
        accepted |= open > 0;
        if accepted && open == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the half-accepted socket from {dialer} is still open after 10 s of fi_eq_read \
             (accepted: {accepted}): the provider took a stale EAGAIN for the reason of its end"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_dial_whose_peer_closes_before_answering_fails_instead_of_waiting_forever() {
    if skip() {
        return;
    }
    let mut t = alone_on_lo("ofitest-cm-eof-dial");
    // The "peer": a plain listener that takes the connection request and closes without an
    // answer (as an accepting process that closes the new endpoint at once, or dies).
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let std::net::SocketAddr::V4(la) = l.local_addr().expect("address") else {
        unreachable!("bound to IPv4");
    };
    let peer = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .expect("timeout");
        // Read the whole request (closing with unread bytes would reset, not end, the
        // connection).
        let mut got = 0;
        let mut b = [0u8; 512];
        loop {
            match std::io::Read::read(&mut s, &mut b) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(_) if got > 0 => break,
                Err(_) => {}
            }
        }
        got
    });
    // A sockaddr_in as the tcp provider names endpoints.
    let mut card = vec![0u8; 16];
    card[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    card[2..4].copy_from_slice(&la.port().to_be_bytes());
    card[4..8].copy_from_slice(&la.ip().octets());
    let ep = EpId(77);
    t.new_conn(None, ep, (0, ep.0)).expect("endpoint");
    t.conns[&ep]
        .ep
        .connect(&card, &[0u8; 20])
        .expect("fi_connect");
    // The dial must end in an error (or a shutdown) event; errno is EAGAIN before each
    // read, as a udp provider's recvmsg or a data socket's recv leaves it in a running job.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        // SAFETY: this thread's errno.
        unsafe { *libc::__errno_location() = libc::EAGAIN };
        let mut ended = false;
        while let Some(ev) = t.eq.read() {
            match ev {
                EqEvent::Error { ctx, .. } | EqEvent::Shutdown(ctx) if ctx == ep.0 as usize => {
                    ended = true
                }
                EqEvent::Connected(ctx) if ctx == ep.0 as usize => {
                    panic!("connected to a peer that never answered")
                }
                _ => {}
            }
        }
        if ended {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "a dial whose peer closed before answering got no event in 10 s (the provider \
             took a stale EAGAIN for the reason of the end): the manager would wait forever"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        peer.join().expect("peer thread") > 0,
        "the peer read the request"
    );
    t.forget(ep);
}
