//! The datagram channel over libfabric's udp provider (FI_EP_DGRAM) on loopback, in one test
//! process. Skipped, with a line saying so, where libfabric or its udp provider is missing.

use super::super::test_board::TestBoard;
use super::*;
use crate::transport::Transport;

fn cfg() -> OfiConfig {
    OfiConfig {
        iface: "lo".into(),
        policy: policy::Kind::Adaptive,
        ..OfiConfig::test_default()
    }
}

fn skip() -> bool {
    if let Err(e) = ffi::available() {
        eprintln!("SKIP ofi datagram test: {e}");
        return true;
    }
    if let Err(e) = ffi::dgram::info("udp", "lo") {
        eprintln!("SKIP ofi datagram test: {e}");
        return true;
    }
    false
}

/// The cards of `job`, but another secret: a process of another job that found our address.
struct Stranger(TestBoard);

impl Board for Stranger {
    fn put_as(&mut self, kind: &str, rank: Proc, card: &[u8]) -> MpiResult<()> {
        self.0.put_as(&format!("stranger-{kind}"), rank, card)
    }
    fn get_as(&mut self, kind: &str, rank: Proc) -> MpiResult<Option<Vec<u8>>> {
        self.0.get_as(kind, rank)
    }
    fn secret(&mut self) -> MpiResult<u64> {
        Ok(0x005e_ed0f_a57a_49e4)
    }
}

#[test]
fn messages_arrive_whole_in_order_and_strangers_are_counted_not_fatal() {
    if skip() {
        return;
    }
    let job = "ofi-dgram-test";
    let board = || Box::new(TestBoard(job.into()));
    let mut a = channel(0, 3, &cfg(), board()).expect("rank 0");
    let mut b = channel(1, 3, &cfg(), board()).expect("rank 1");
    assert_eq!(a.stats().strangers, 0);
    // Another job's process (rank 2 there) sending us data with its secret, and garbage.
    let mut other =
        channel(2, 3, &cfg(), Box::new(Stranger(TestBoard(job.into())))).expect("stranger");
    assert!(other.send(0, &[b"not for you"]).expect("stranger sends"));
    let mut raw =
        OfiPort::open(2, &cfg(), Box::new(Stranger(TestBoard(job.into())))).expect("raw port");
    let to_a = raw.lookup(0).expect("rank 0's card");
    for junk in [&b""[..], &b"\x01"[..], &[0xffu8; 40][..], &[1u8; 64][..]] {
        if !junk.is_empty() {
            raw.send_to(junk, to_a).expect("garbage sent");
        }
    }
    // Messages of every size up to several datagrams, in order.
    let mtu = a.port().mtu();
    let msgs: Vec<Vec<u8>> = (0..60)
        .map(|i| {
            (0..(i * 397) % (3 * mtu + 11))
                .map(|j| (i + j) as u8)
                .collect()
        })
        .collect();
    let mut sent = 0;
    let mut got: Vec<Vec<u8>> = Vec::new();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while (got.len() < msgs.len() || a.unacknowledged()) && std::time::Instant::now() < until {
        while sent < msgs.len() && a.send(1, &[&msgs[sent]]).expect("send") {
            sent += 1;
        }
        a.poll(&mut |_, _| panic!("rank 0 got data"), &mut |_| {});
        b.poll(
            &mut |from, m| {
                assert_eq!(from, 0);
                got.push(m.to_vec());
            },
            &mut |_| {},
        );
        other.poll(&mut |_, _| {}, &mut |_| {});
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(got.len(), msgs.len(), "all delivered");
    assert!(got == msgs, "whole and in order");
    assert!(!a.unacknowledged(), "all acknowledged");
    let s = a.stats();
    assert!(
        s.strangers + s.reliable.drops.total() >= 4,
        "the stranger's data and 3 garbage datagrams are counted: {s:?}"
    );
    assert!(
        s.reliable.drops.secret >= 1,
        "another job's secret is counted: {s:?}"
    );
    assert!(b.stats().reliable.drops.total() == 0 && b.stats().strangers == 0);
}

fn rcvbuf(fd: RawFd) -> libc::c_int {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one c_int into v.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "getsockopt(SO_RCVBUF)");
    v
}

#[test]
fn the_providers_socket_gets_the_buffers_udps_own_socket_gets() {
    if skip() {
        return;
    }
    let job = "ofi-dgram-rcvbuf";
    let _port = OfiPort::open(0, &cfg(), Box::new(TestBoard(job.into()))).expect("port");
    let name = TestBoard(job.into())
        .get_as("ofid", 0)
        .expect("board")
        .expect("the port's card");
    let fd = provider_socket(&name).expect("the udp provider's socket, bound to the name");
    let own = std::net::UdpSocket::bind("127.0.0.1:0").expect("a udp socket");
    let own_fd = std::os::unix::io::AsRawFd::as_raw_fd(&own);
    let before = rcvbuf(own_fd);
    udp::port::set_buffers(own_fd, config::get("FERRITE_UDP_RCVBUF"));
    assert_eq!(rcvbuf(fd), rcvbuf(own_fd));
    assert!(
        rcvbuf(fd) >= before,
        "{} < the default {before}",
        rcvbuf(fd)
    );
}

/// Adaptive under a budget of one connection: packets sent to a peer whose connection is
/// closing wait in its queue; once it closed they go over datagrams instead (`Action::Flush`
/// via datagrams, `queue_to_datagrams`). They must arrive, in order, and count as sent (they
/// never did: the report's sent count fell short of what the program sent).
#[test]
fn packets_queued_behind_a_closing_connection_go_over_datagrams_and_count_as_sent() {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    if skip() {
        return;
    }
    // Rank 0: 8 packets to rank 1 (a connection opens at the threshold), a pause beyond the
    // residency (so it may be evicted), 4 to rank 2 (its threshold evicts rank 1's), and at
    // once, while that close is under way, QUEUED more to rank 1.
    const FIRST: u32 = 8;
    const TO2: u32 = 4;
    const QUEUED: u32 = 6;
    let name = "ofi-dgram-queue-flush";
    let n = 3u32;
    let phase = Arc::new(AtomicU32::new(0));
    let body = |to: Proc, i: u32| -> Vec<u8> {
        let mut b = i.to_le_bytes().to_vec();
        b.extend(std::iter::repeat_n(
            (to * 31 + i) as u8,
            200 + i as usize * 13,
        ));
        b
    };
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let phase = phase.clone();
            std::thread::spawn(move || {
                let c = OfiConfig {
                    max_conns: 1,
                    threshold: 2,
                    ..cfg()
                };
                let board = || Box::new(TestBoard(name.into()));
                let chan = channel(r, n, &c, board()).expect("channel");
                let mut t = Ofi::new(r, n, c, board())
                    .expect("open")
                    .with_channel(Some(chan))
                    .expect("with channel");
                phase.fetch_add(1, SeqCst);
                let until = Instant::now() + Duration::from_secs(30);
                let mut got: Vec<Vec<u8>> = Vec::new();
                let turn = |t: &mut Ofi, got: &mut Vec<Vec<u8>>| {
                    assert!(Instant::now() < until, "rank {r}: timed out");
                    t.poll(&mut |from, p| {
                        assert_eq!(from, 0, "rank {r}: a packet from {from}");
                        got.push(p.to_vec())
                    });
                    if t.arm() {
                        t.wait(2);
                    }
                    t.disarm();
                };
                while phase.load(SeqCst) < n {
                    std::thread::yield_now();
                }
                let expect = match r {
                    0 => 0,
                    1 => FIRST + QUEUED,
                    _ => TO2,
                } as usize;
                if r == 0 {
                    for i in 0..FIRST {
                        while !t.try_send(1, &[&body(1, i)]).unwrap() {
                            turn(&mut t, &mut got);
                        }
                    }
                    while t.mgr.sendable(1).is_none() || t.pending() {
                        turn(&mut t, &mut got);
                    }
                    // Unused for longer than the residency (FERRITE_CONN_RESIDENCY_MS, 100).
                    let quiet = Instant::now() + Duration::from_millis(250);
                    while Instant::now() < quiet {
                        turn(&mut t, &mut got);
                    }
                    for i in 0..TO2 {
                        assert!(t.try_send(2, &[&body(2, i)]).unwrap());
                    }
                    assert!(
                        t.mgr.closing_of(1).is_some(),
                        "rank 2's threshold did not evict rank 1's connection"
                    );
                    for i in FIRST..FIRST + QUEUED {
                        assert!(t.try_send(1, &[&body(1, i)]).unwrap());
                    }
                }
                while got.len() < expect || t.pending() {
                    turn(&mut t, &mut got);
                }
                for (i, p) in got.iter().enumerate() {
                    assert!(
                        *p == body(r, i as u32),
                        "rank {r}: packet {i} wrong or out of order"
                    );
                }
                phase.fetch_add(1, SeqCst);
                while phase.load(SeqCst) < 2 * n && Instant::now() < until {
                    turn(&mut t, &mut got);
                }
                assert_eq!(got.len(), expect, "rank {r}");
                t.shutdown();
                t
            })
        })
        .collect();
    let ts: Vec<Ofi> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    let s = ts[0].stats();
    assert!(
        s.conn.queued >= QUEUED as u64,
        "the packets to rank 1 did not wait for its connection: {:?}",
        s.conn
    );
    assert_eq!(
        s.packets_sent,
        (FIRST + TO2 + QUEUED) as u64,
        "rank 0's sent count"
    );
    assert_eq!(ts[1].stats().packets_received, (FIRST + QUEUED) as u64);
}
