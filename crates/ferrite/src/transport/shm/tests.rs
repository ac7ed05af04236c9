use super::queue::{Queue, Received, Sent};
use super::segment::{Card, Geometry, Segment};
use super::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A job name no other test (or test run) uses.
pub(crate) fn unique_job(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "test-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Removes the card files of a job's ranks when dropped (also when a test fails).
pub(crate) struct ShmFiles(pub String);

impl Drop for ShmFiles {
    fn drop(&mut self) {
        for rank in 0..64 {
            if let Some(p) = test_card_path(&self.0, rank) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// True if `rank` of `job` made a segment (published its card).
pub(crate) fn shm_exists(job: &str, rank: u32) -> bool {
    lookup(job, rank).unwrap().is_some()
}

/// Files in /dev/shm whose name mentions `job` (segments never have one).
pub(crate) fn named_files(job: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(job))
                .collect()
        })
        .unwrap_or_default()
}

/// Maps `rank`'s segment as a peer would.
fn open_rank(job: &str, rank: u32) -> Option<Segment> {
    Segment::open(lookup(job, rank).ok()??).ok()?
}

fn cfg(ncells: u32, cell: usize, cma: bool) -> ShmConfig {
    ShmConfig {
        geom: Geometry::new(ncells, cell).unwrap(),
        cma,
        fast_after: 0,
        fast_slots: 64,
        fast_record: usize::MAX,
        membarrier: true,
    }
}

fn queue(seg: &Segment) -> Queue {
    // SAFETY: seg is a live segment laid out by its geometry.
    unsafe { Queue::at(seg.base(), seg.geometry()) }
}

/// The packet `seq` of producer `p`: its identity, then bytes derived from both.
fn packet(p: u32, seq: u32, max: usize) -> Vec<u8> {
    let len = 8 + (seq as usize * 7 + p as usize) % (max - 7);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&p.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend((8..len).map(|i| (i as u32 ^ seq ^ p) as u8));
    v
}

#[test]
fn cell_count_follows_k_log2_n_plus_b() {
    assert_eq!(segment::cell_count(1, 16, 64), 64);
    assert_eq!(segment::cell_count(2, 16, 64), 80);
    assert_eq!(segment::cell_count(5, 16, 64), 16 * 3 + 64);
    assert_eq!(segment::cell_count(4096, 16, 64), 16 * 12 + 64);
    assert!(Geometry::new(1, 8192).is_err());
    assert!(Geometry::new(8, 10).is_err());
    assert_eq!(Geometry::new(8, 100).unwrap().cell_size, 128);
}

#[test]
fn many_producers_every_packet_once_and_in_order() {
    const PRODUCERS: u32 = 6;
    const EACH: u32 = 3000;
    let job = unique_job("mp");
    let _files = ShmFiles(job.clone());
    let geom = Geometry::new(4, 128).unwrap();
    let seg = Arc::new(Segment::create(geom, 0, 1, false).unwrap());
    let max = queue(&seg).max_packet();
    let no_room = Arc::new(AtomicU32::new(0));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (seg, no_room) = (seg.clone(), no_room.clone());
            std::thread::spawn(move || {
                let q = queue(&seg);
                let deadline = Instant::now() + Duration::from_secs(120);
                for seq in 0..EACH {
                    let pk = packet(p, seq, max);
                    let (a, b) = pk.split_at(pk.len() / 2);
                    while q.send(p, &[a, b]) == Sent::NoRoom {
                        no_room.fetch_add(1, Ordering::Relaxed);
                        assert!(Instant::now() < deadline, "producer {p} starved");
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let q = queue(&seg);
    let mut next = vec![0u32; PRODUCERS as usize];
    let mut unfreed = Vec::new();
    let mut total = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while total < PRODUCERS * EACH {
        let r = q.recv(PRODUCERS, &mut unfreed, &mut |from, pk| {
            let p = u32::from_le_bytes(pk[0..4].try_into().unwrap());
            let seq = u32::from_le_bytes(pk[4..8].try_into().unwrap());
            assert_eq!(p, from, "sender rank in the cell header");
            assert_eq!(seq, next[p as usize], "producer {p} out of order");
            assert_eq!(pk, packet(p, seq, max).as_slice(), "content of {p}/{seq}");
            next[p as usize] += 1;
        });
        match r {
            Received::Delivered => total += 1,
            Received::Empty => {
                assert!(Instant::now() < deadline, "only {total} packets arrived");
                std::thread::yield_now();
            }
            Received::Corrupt => panic!("a valid cell was judged corrupt"),
        }
    }
    for t in producers {
        t.join().unwrap();
    }
    assert_eq!(
        q.recv(PRODUCERS, &mut unfreed, &mut |_, _| panic!("extra packet")),
        Received::Empty
    );
    assert!(next.iter().all(|&n| n == EACH));
    q.retry_free(&mut unfreed);
    assert!(unfreed.is_empty(), "no sender is mid-pop any more");
    // Every credit came back: the queue takes exactly ncells packets again.
    for i in 0..4 {
        assert!(matches!(q.send(0, &[&[i]]), Sent::Published { .. }));
    }
    assert_eq!(q.send(0, &[&[9]]), Sent::NoRoom);
}

#[test]
fn corrupt_cells_are_counted_and_dropped_without_losing_credits() {
    let job = unique_job("bad");
    let _files = ShmFiles(job.clone());
    let geom = Geometry::new(4, 64).unwrap();
    let seg = Segment::create(geom, 0, 1, false).unwrap();
    let q = queue(&seg);
    assert!(q.corrupt_next(7, 4)); // rank 7 in a job of 2
    assert!(q.corrupt_next(1, 100_000)); // longer than a cell
    assert!(matches!(q.send(1, &[b"ok"]), Sent::Published { .. }));
    let mut got = Vec::new();
    let mut unfreed = Vec::new();
    let mut deliver = |f: u32, p: &[u8]| got.push((f, p.to_vec()));
    assert_eq!(q.recv(2, &mut unfreed, &mut deliver), Received::Corrupt);
    assert_eq!(q.recv(2, &mut unfreed, &mut deliver), Received::Corrupt);
    assert_eq!(q.recv(2, &mut unfreed, &mut deliver), Received::Delivered);
    assert_eq!(q.recv(2, &mut unfreed, &mut deliver), Received::Empty);
    assert_eq!(got, vec![(1, b"ok".to_vec())]);
    for _ in 0..4 {
        assert!(matches!(q.send(0, &[b"x"]), Sent::Published { .. }));
    }
}

#[test]
fn a_peer_rejects_a_segment_that_is_not_ferrites() {
    // SAFETY: a valid name; the descriptor is closed below.
    let fd = unsafe { libc::memfd_create(c"junk".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    std::fs::write(format!("/proc/self/fd/{fd}"), vec![0u8; 4096]).unwrap();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let err = Segment::open(Card { pid, fd, token: 1 }).err().unwrap();
    assert!(err.contains("not a Ferrite segment"), "{err}");
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    // A segment whose header does not carry the published pid and token.
    let seg = Segment::create(Geometry::new(4, 128).unwrap(), 0, 7, false).unwrap();
    let forged = Card {
        token: 8,
        ..seg.card()
    };
    let err = Segment::open(forged).err().unwrap();
    assert!(err.contains("belongs to another process"), "{err}");
    assert!(Segment::open(seg.card()).unwrap().is_some());
    // An owner that has exited (no such descriptor any more): None, not an error.
    let card = seg.card();
    drop(seg);
    assert!(Segment::open(card).unwrap().is_none());
}

#[test]
fn segments_have_no_name_and_outlive_their_owner_only_while_mapped() {
    let job = unique_job("noname");
    let _files = ShmFiles(job.clone());
    let mut a = Shm::new(0, 2, &job, cfg(4, 128, false)).unwrap();
    let mut b = Shm::new(1, 2, &job, cfg(4, 128, false)).unwrap();
    assert!(named_files(&job).is_empty(), "{:?}", named_files(&job));
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains("/memfd:ferrite-shm"), "segments are memfds");
    assert!(a.try_send(1, &[b"hello"]).unwrap());
    let mut got = Vec::new();
    b.poll(&mut |f, p| got.push((f, p.to_vec())));
    assert_eq!(got, vec![(0, b"hello".to_vec())]);
}

mod interleavings {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[derive(Debug, Clone)]
    enum Op {
        Send { from: u32, len: usize },
        RecvOne,
        RecvAll,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u32..3, 0usize..=112).prop_map(|(from, len)| Op::Send { from, len }),
            1 => Just(Op::RecvOne),
            1 => Just(Op::RecvAll),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_a_fifo_model(ops in proptest::collection::vec(op(), 1..200)) {
            let job = unique_job("prop");
            let _files = ShmFiles(job.clone());
            let geom = Geometry::new(6, 128).unwrap();
            let seg = Segment::create(geom, 0, 1, false).unwrap();
            let q = queue(&seg);
            let mut model: VecDeque<(u32, Vec<u8>)> = VecDeque::new();
            let mut unfreed = Vec::new();
            let mut n = 0u8;
            for op in ops {
                match op {
                    Op::Send { from, len } => {
                        n = n.wrapping_add(1);
                        let pk: Vec<u8> = (0..len).map(|i| n ^ i as u8).collect();
                        let r = q.send(from, &[&pk[..len / 3], &pk[len / 3..]]);
                        if model.len() == 6 {
                            prop_assert_eq!(r, Sent::NoRoom);
                        } else {
                            prop_assert!(matches!(r, Sent::Published { .. }), "send refused with free cells");
                            model.push_back((from, pk));
                        }
                    }
                    Op::RecvOne | Op::RecvAll => loop {
                        let mut got = None;
                        let r = q.recv(3, &mut unfreed, &mut |f, p| got = Some((f, p.to_vec())));
                        match model.pop_front() {
                            None => {
                                prop_assert_eq!(r, Received::Empty);
                                break;
                            }
                            Some(want) => {
                                prop_assert_eq!(r, Received::Delivered);
                                prop_assert_eq!(got, Some(want));
                            }
                        }
                        if matches!(op, Op::RecvOne) {
                            break;
                        }
                    },
                }
            }
        }
    }
}

#[test]
fn doorbell_wakes_a_blocked_receiver_and_counts_strangers() {
    let job = unique_job("bell");
    let _files = ShmFiles(job.clone());
    let mut rx = crate::transport::Net::init_with(0, 2, &job, "shm").unwrap();
    let mut tx = crate::transport::Net::init_with(1, 2, &job, "shm").unwrap();
    let watch = open_rank(&job, 0).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        for _ in 0..2 {
            // Sleep with no time limit: only the doorbell can end this.
            rx.block(-1);
            rx.poll(&mut |f, p| got.push((f, p.to_vec())));
            done_tx.send(got.len()).unwrap();
        }
        (rx, got)
    });
    let wait_asleep = || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while watch.header().sleeping.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "receiver never armed");
            std::thread::yield_now();
        }
    };
    let limit = Duration::from_secs(60);
    // 1: a stranger's datagram wakes the receiver and is counted, not delivered.
    wait_asleep();
    doorbell::send_stranger(&doorbell::bell_addr(&job, 0), b"hello").unwrap();
    assert_eq!(
        done_rx.recv_timeout(limit).expect("stranger did not wake"),
        0
    );
    // 2: a packet published while the receiver sleeps rings its doorbell.
    wait_asleep();
    assert!(tx.try_send(0, &[b"wake", b" up"]).unwrap());
    assert_eq!(done_rx.recv_timeout(limit).expect("sender did not wake"), 1);
    let (rx, got) = receiver.join().unwrap();
    assert_eq!(got, vec![(1, b"wake up".to_vec())]);
    let s = rx.stats().transports[0].1;
    assert_eq!((s.strangers_dropped, s.packets_received), (1, 1));
    assert_eq!(rx.stats().blocks, 2);
    assert_eq!(tx.stats().transports[0].1.doorbells_rung, 1);
}

#[test]
fn block_returns_at_once_when_a_packet_is_waiting() {
    let job = unique_job("nosleep");
    let _files = ShmFiles(job.clone());
    let mut a = crate::transport::Net::init_with(0, 2, &job, "shm").unwrap();
    let mut b = crate::transport::Net::init_with(1, 2, &job, "shm").unwrap();
    assert!(b.try_send(0, &[b"x"]).unwrap());
    a.block(60_000); // would sleep (and count a block) if the re-check missed the packet
    assert_eq!(a.stats().blocks, 0);
    assert_eq!(a.poll(&mut |_, _| {}), 1);
}

#[test]
fn cma_reads_memory_and_can_be_disabled() {
    let job = unique_job("cma");
    let _files = ShmFiles(job.clone());
    let mut on = Shm::new(0, 2, &job, cfg(4, 256, true)).unwrap();
    let _peer = Shm::new(1, 2, &job, cfg(4, 256, false)).unwrap();
    let src: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let mut dst = vec![0u8; src.len()];
    // Rank 1 is this very process, so its memory holds `src`.
    assert!(on.read_remote(1, src.as_ptr() as u64, &mut dst).unwrap());
    assert_eq!(dst, src);
    assert_eq!(on.stats().remote_read_bytes, src.len() as u64);
    let err = on.read_remote(1, 8, &mut dst[..16]).unwrap_err();
    assert!(err.msg.contains("from rank 1"), "{}", err.msg);
    let off_job = unique_job("cma-off");
    let _off_files = ShmFiles(off_job.clone());
    let mut off = Shm::new(0, 2, &off_job, cfg(4, 256, false)).unwrap();
    assert!(!off.read_remote(1, src.as_ptr() as u64, &mut dst).unwrap());
}

#[test]
fn segments_are_mapped_on_first_contact_only() {
    let job = unique_job("lazy");
    let _files = ShmFiles(job.clone());
    let mut a = Shm::new(0, 4, &job, cfg(4, 128, false)).unwrap();
    let _b = Shm::new(1, 4, &job, cfg(4, 128, false)).unwrap();
    let _c = Shm::new(2, 4, &job, cfg(4, 128, false)).unwrap();
    assert_eq!(a.stats().segments_mapped, 0);
    for _ in 0..3 {
        assert!(a.try_send(1, &[b"a"]).unwrap());
    }
    assert_eq!(a.stats().segments_mapped, 1);
    // Rank 3 never started: the error names it.
    let err = a.try_send(3, &[b"a"]).unwrap_err();
    assert!(err.msg.contains("rank 3"), "{}", err.msg);
    let mut small = Shm::new(3, 4, &job, cfg(4, 64, false)).unwrap();
    let err = small.try_send(1, &[b"a"]).unwrap_err();
    assert!(err.msg.contains("FERRITE_SHM_CELL_SIZE"), "{}", err.msg);
    let err = a.try_send(1, &[&[0u8; 200]]).unwrap_err();
    assert!(err.msg.contains("exceeds"), "{}", err.msg);
}

/// True when `fd` has something to read (a doorbell was rung), without waiting.
fn rung(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

#[test]
fn freeing_cells_rings_a_sender_asleep_for_credits() {
    let job = unique_job("credit");
    let _files = ShmFiles(job.clone());
    let mut rx = Shm::new(0, 2, &job, cfg(4, 128, false)).unwrap();
    let mut tx = Shm::new(1, 2, &job, cfg(4, 128, false)).unwrap();
    let fd = tx.wake_fd().unwrap();
    let mut sent = 0;
    while tx.try_send(0, &[b"fill"]).unwrap() {
        sent += 1;
    }
    assert_eq!(sent, 4);
    // Out of credits and nothing to read: the sender may sleep, asking to be rung.
    assert!(tx.arm());
    assert!(!rung(fd));
    let mut got = 0;
    assert_eq!(rx.poll(&mut |_, _| got += 1), 4);
    assert_eq!(got, 4);
    assert!(
        rung(fd),
        "freeing cells did not ring the sender waiting for them"
    );
    assert_eq!(rx.stats().doorbells_rung, 1);
    tx.disarm();
    assert!(!rung(fd));
    // Credits that come back before the sender arms: it must not sleep. (Its request
    // stays and costs one spurious ring later.)
    while tx.try_send(0, &[b"fill"]).unwrap() {}
    assert_eq!(rx.poll(&mut |_, _| {}), 4);
    assert!(!tx.arm(), "armed to sleep although a cell was free");
    tx.disarm();
    assert!(tx.try_send(0, &[b"x"]).unwrap());
    assert_eq!(rx.poll(&mut |_, _| {}), 1);
    assert!(rung(fd));
    tx.disarm();
    assert!(!rung(fd));
    // A sender that is not short of credits asks for nothing.
    assert!(tx.arm());
    tx.disarm();
    assert!(tx.try_send(0, &[b"y"]).unwrap());
    assert_eq!(rx.poll(&mut |_, _| {}), 1);
    assert!(!rung(fd));
    assert_eq!(rx.stats().doorbells_rung, 2);
}

// ---- two real processes: this test binary re-runs itself as rank 1 ----

const CHILD_ENV: &str = "FERRITE_TEST_SHM_CHILD_JOB";
const DONE: &[u8] = b"done";

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100000001b3)
    })
}

fn pattern(len: usize, salt: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2654435761) ^ salt) as u8)
        .collect()
}

fn wait_segment(job: &str, rank: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while open_rank(job, rank).is_none() {
        assert!(
            Instant::now() < deadline,
            "rank {rank} never created its segment"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends with retries (progress in between), failing instead of hanging.
fn send(net: &mut Shm, to: u32, parts: &[&[u8]], inbox: &mut Vec<(u32, Vec<u8>)>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !net.try_send(to, parts).unwrap() {
        net.poll(&mut |f, p| inbox.push((f, p.to_vec())));
        assert!(Instant::now() < deadline, "no credits for 60 s");
        std::thread::yield_now();
    }
}

/// Waits (sleeping on the doorbell) until a packet is in `inbox`.
fn next(net: &mut Shm, inbox: &mut Vec<(u32, Vec<u8>)>) -> (u32, Vec<u8>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if !inbox.is_empty() {
            return inbox.remove(0);
        }
        if net.poll(&mut |f, p| inbox.push((f, p.to_vec()))) == 0 {
            assert!(Instant::now() < deadline, "no packet for 60 s");
            if net.arm() {
                let mut pfd = libc::pollfd {
                    fd: net.wake_fd().unwrap(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, 1000) };
            }
            net.disarm();
        }
    }
}

/// Rank 1 of [`two_processes_exchange_packets_and_read_each_other`]; does nothing when run
/// on its own.
#[test]
#[ignore]
fn child_process() {
    let Ok(job) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut net = Shm::new(1, 2, &job, cfg(4, 256, true)).unwrap();
    let mine = pattern(200_000, 1);
    let mut inbox = Vec::new();
    wait_segment(&job, 0);
    // Announce our buffer, then echo everything until told to stop.
    let addr = (mine.as_ptr() as u64).to_le_bytes();
    send(&mut net, 0, &[b"buf ", &addr], &mut inbox);
    loop {
        let (from, p) = next(&mut net, &mut inbox);
        assert_eq!(from, 0);
        if p == DONE {
            break;
        }
        if let Some(rest) = p.strip_prefix(b"read") {
            let addr = u64::from_le_bytes(rest[0..8].try_into().unwrap());
            let len = u64::from_le_bytes(rest[8..16].try_into().unwrap()) as usize;
            let mut buf = vec![0u8; len];
            let ok = net.read_remote(0, addr, &mut buf).unwrap();
            let sum = if ok { fnv(&buf) } else { 0 };
            send(&mut net, 0, &[b"sum ", &sum.to_le_bytes()], &mut inbox);
            continue;
        }
        send(&mut net, 0, &[&p], &mut inbox);
    }
    std::hint::black_box(&mine);
}

#[test]
fn two_processes_exchange_packets_and_read_each_other() {
    let job = unique_job("2proc");
    let _files = ShmFiles(job.clone());
    let mut net = Shm::new(0, 2, &job, cfg(4, 256, true)).unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "transport::shm::tests::child_process"])
        .args(["--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &job)
        .spawn()
        .unwrap();
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            if self.0.try_wait().ok().flatten().is_none() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
    let mut reap = Reap(child);
    let mut inbox = Vec::new();
    wait_segment(&job, 1);

    let (from, p) = next(&mut net, &mut inbox);
    assert_eq!(from, 1);
    assert_eq!(&p[..4], b"buf ");
    let theirs = u64::from_le_bytes(p[4..12].try_into().unwrap());

    // Many more packets than cells, so credits run out and come back.
    const N: u32 = 2000;
    let mut echoed = 0;
    for seq in 0..N {
        let pk = packet(0, seq, net.max_packet());
        send(&mut net, 1, &[&pk], &mut inbox);
        while let Some(pos) = inbox.iter().position(|(f, _)| *f == 1) {
            let (_, e) = inbox.remove(pos);
            assert_eq!(e, packet(0, echoed, net.max_packet()), "echo {echoed}");
            echoed += 1;
        }
    }
    while echoed < N {
        let (_, e) = next(&mut net, &mut inbox);
        assert_eq!(e, packet(0, echoed, net.max_packet()), "echo {echoed}");
        echoed += 1;
    }

    // The child reads our buffer with one copy...
    let mine = pattern(1 << 20, 2);
    let (a, l) = (
        (mine.as_ptr() as u64).to_le_bytes(),
        (mine.len() as u64).to_le_bytes(),
    );
    send(&mut net, 1, &[b"read", &a, &l], &mut inbox);
    let (_, p) = next(&mut net, &mut inbox);
    assert_eq!(p[..4], *b"sum ");
    assert_eq!(u64::from_le_bytes(p[4..12].try_into().unwrap()), fnv(&mine));
    // ...and we read the child's.
    let mut buf = vec![0u8; 200_000];
    assert!(net.read_remote(1, theirs, &mut buf).unwrap());
    assert_eq!(buf, pattern(200_000, 1));

    send(&mut net, 1, &[DONE], &mut inbox);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = reap.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "child did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "child failed: {status}");
    assert_eq!(net.stats().segments_mapped, 1);
    assert_eq!(net.stats().packets_sent, N as u64 + 2);
}

// ---- measurement, not a test: raw queue round trip between two processes ----
// cargo test --release -p ferrite measure_round_trip -- --ignored --nocapture

const PONG_ENV: &str = "FERRITE_TEST_SHM_PONG_JOB";

/// Rank 1 of [`measure_round_trip`]: echoes by busy polling until told to stop.
#[test]
#[ignore]
fn pong_process() {
    let Ok(job) = std::env::var(PONG_ENV) else {
        return;
    };
    let mut net = Shm::new(1, 2, &job, ShmConfig::from_knobs(2).unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let sleep = std::env::var("FERRITE_TEST_SHM_PONG_SLEEP").is_ok();
    let mut inbox = Vec::new();
    loop {
        if net.poll(&mut |f, p| inbox.push((f, p.to_vec()))) == 0 && sleep {
            sleep_on_doorbell(&mut net);
        }
        for (_, p) in inbox.drain(..) {
            if p == DONE {
                return;
            }
            while !net.try_send(0, &[&p]).unwrap() {}
        }
        assert!(Instant::now() < deadline, "pong ran for 300 s");
    }
}

/// Arms, sleeps on the doorbell (up to 1 s), disarms.
fn sleep_on_doorbell(net: &mut Shm) {
    if net.arm() {
        let mut pfd = libc::pollfd {
            fd: net.wake_fd().unwrap(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 1000) };
    }
    net.disarm();
}

#[test]
#[ignore]
fn measure_round_trip() {
    for sleep in [false, true] {
        round_trips(sleep);
    }
}

fn round_trips(sleep: bool) {
    let job = unique_job("rtt");
    let _files = ShmFiles(job.clone());
    let mut net = Shm::new(0, 2, &job, ShmConfig::from_knobs(2).unwrap()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "transport::shm::tests::pong_process"])
        .args(["--ignored", "--nocapture", "--test-threads=1"])
        .env(PONG_ENV, &job)
        .envs(sleep.then_some(("FERRITE_TEST_SHM_PONG_SLEEP", "1")))
        .spawn()
        .unwrap();
    wait_segment(&job, 1);
    let deadline = Instant::now() + Duration::from_secs(300);
    for &(len, iters) in &[(8usize, 20_000u32), (1024, 20_000), (8000, 10_000)] {
        let mut times = Vec::with_capacity(iters as usize);
        let mut pk = vec![0u8; len];
        for i in 0..iters + 1000 {
            pk[..4].copy_from_slice(&i.to_le_bytes());
            let t = Instant::now();
            assert!(net.try_send(1, &[&pk]).unwrap());
            let mut got = None;
            while got.is_none() {
                let n = net
                    .poll(&mut |_, p| got = Some(u32::from_le_bytes(p[..4].try_into().unwrap())));
                if n == 0 && sleep {
                    sleep_on_doorbell(&mut net);
                }
                assert!(Instant::now() < deadline, "no echo");
            }
            assert_eq!(got, Some(i));
            if i >= 1000 {
                times.push(t.elapsed().as_nanos() as u64);
            }
        }
        times.sort_unstable();
        let mean = times.iter().sum::<u64>() / times.len() as u64;
        println!(
            "shm round trip{}, {len:>5}-byte packets: median {} ns, mean {mean} ns, p99 {} ns ({iters} iterations)",
            if sleep { " (both sleep on doorbells)" } else { " (busy polling)" },
            times[times.len() / 2],
            times[times.len() * 99 / 100]
        );
    }
    // Windows of 64 sends (as osu_bw's), each echoed: the time of one `try_send` alone,
    // which is where a full fence per packet would wait for the slot's line.
    for &len in &[8usize, 1024, 4000] {
        let mut times = Vec::new();
        let pk = vec![7u8; len];
        for w in 0..1200 {
            let mut echoed = 0;
            for _ in 0..64 {
                let t = Instant::now();
                let sent = net.try_send(1, &[&pk]).unwrap();
                let dt = t.elapsed().as_nanos() as u64;
                if sent {
                    if w >= 200 {
                        times.push(dt);
                    }
                } else {
                    // No room: take echoes until there is.
                    while !net.try_send(1, &[&pk]).unwrap() {
                        echoed += net.poll(&mut |_, _| {});
                        assert!(Instant::now() < deadline, "no room for 300 s");
                    }
                }
            }
            while echoed < 64 {
                echoed += net.poll(&mut |_, _| {});
                assert!(Instant::now() < deadline, "no echo");
            }
        }
        times.sort_unstable();
        println!(
            "shm send in a window of 64, {len:>5}-byte packets: median {} ns, p90 {} ns",
            times[times.len() / 2],
            times[times.len() * 9 / 10]
        );
    }
    assert!(net.try_send(1, &[DONE]).unwrap());
    assert!(child.wait().unwrap().success());
}

// ---- the per-pair fast ring (fastring.rs) ----

fn fast_cfg(ncells: u32, cell: usize, after: u32, slots: u32) -> ShmConfig {
    ShmConfig {
        fast_after: after,
        fast_slots: slots,
        ..cfg(ncells, cell, false)
    }
}

#[test]
fn fast_ring_wraps_around_says_full_and_keeps_order() {
    use fastring::{Record, RxRing, TxRing};
    let mut tx = TxRing::create(4, 7, usize::MAX).unwrap();
    let mut rx = RxRing::open(tx.card(), 3).unwrap().unwrap();
    assert!(!rx.has_ready());
    let mut next_in = 0u32;
    let mut next_out = 0u32;
    // 25 rounds of uneven fills and drains: positions wrap the 4 slots many times.
    for round in 0..25u32 {
        let k = 1 + round % 5;
        for _ in 0..k {
            let p = packet(3, next_in, fastring::SLOT_PAYLOAD);
            if tx.push_inline(&[&p[..1], &p[1..]], p.len()) {
                next_in += 1;
            } else {
                assert_eq!(next_in - next_out, 4, "full before 4 slots were in use");
                assert!(!tx.has_room());
            }
        }
        assert!(rx.has_ready());
        let take = if round % 3 == 0 { usize::MAX } else { 1 };
        let mut got = 0;
        rx.consume(&mut |rec| {
            let Record::Inline(p) = rec else {
                panic!("not an inline record")
            };
            assert_eq!(p, packet(3, next_out, fastring::SLOT_PAYLOAD));
            next_out += 1;
            got += 1;
        });
        assert!(got <= 4 && got >= take.min(1));
        assert_eq!(next_in, next_out);
        assert!(!rx.has_ready());
        assert!(tx.has_room());
    }
    assert!(next_in > 50);
    // A record with a bad length or kind is skipped, not trusted; later ones still arrive.
    // (The ring takes 4 slots and the bad length 2 of them, perhaps after a pad.)
    let mut seen = Vec::new();
    let mut look = |rx: &mut RxRing| {
        rx.consume(&mut |rec| {
            seen.push(match rec {
                Record::Corrupt => "corrupt".to_string(),
                Record::Cell(i) => format!("cell {i}"),
                Record::Inline(_) => "inline".to_string(),
                Record::Pad => "pad".to_string(),
            })
        });
    };
    assert!(tx.push(9, 1, |_| {}));
    assert!(tx.push(fastring::KIND_INLINE, fastring::SLOT_PAYLOAD + 1, |_| {}));
    look(&mut rx);
    assert!(tx.push_cell(5));
    look(&mut rx);
    assert_eq!(seen, ["corrupt", "corrupt", "cell 5"]);
}

#[test]
fn fast_ring_rejects_bad_slot_counts() {
    assert!(fastring::TxRing::create(3, 1, 248).is_err());
    assert!(fastring::TxRing::create(1, 1, 248).is_err());
    assert!(fastring::TxRing::create(2, 1, 248).is_ok());
}

/// Everything `net` has for us, as (from, packet).
fn drain(net: &mut Shm) -> Vec<(u32, Vec<u8>)> {
    let mut got = Vec::new();
    while net.poll(&mut |f, p| got.push((f, p.to_vec()))) > 0 {}
    got
}

#[test]
fn pairs_switch_to_a_fast_ring_keeping_order_with_a_third_sender() {
    let job = unique_job("fast");
    let _files = ShmFiles(job.clone());
    // 16 cells of 512 bytes; the pair 1 -> 0 switches after 5 packets to a 4-slot ring,
    // rank 2 sends only 3 packets and stays on the queue.
    let c = fast_cfg(16, 512, 5, 4);
    let mut rx = Shm::new(0, 3, &job, c).unwrap();
    let mut a = Shm::new(1, 3, &job, c).unwrap();
    let mut b = Shm::new(2, 3, &job, c).unwrap();
    let max = a.max_packet();
    assert!(max > fastring::SLOT_PAYLOAD);
    let mut seq = [0u32; 3];
    let mut want: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
    let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
    // Sizes cross the inline limit: big packets go as cells passed through the ring.
    let send = |net: &mut Shm, me: u32, seq: &mut [u32; 3], want: &mut Vec<Vec<Vec<u8>>>| {
        let s = seq[me as usize];
        let len = [
            8,
            40,
            fastring::SLOT_PAYLOAD,
            fastring::SLOT_PAYLOAD + 1,
            max,
        ][s as usize % 5];
        let mut p = pattern(len, s * 3 + me);
        p[..4].copy_from_slice(&s.to_le_bytes());
        if net.try_send(0, &[&p[..3], &p[3..]]).unwrap() {
            seq[me as usize] += 1;
            want[me as usize].push(p);
            true
        } else {
            false
        }
    };
    let mut rounds = 0;
    while seq[1] < 200 {
        rounds += 1;
        // A burst from rank 1 until no room (a full ring or no free cell), one from rank 2
        // now and then, then the receiver drains part of the time.
        let mut burst = 0;
        while burst < 7 && send(&mut a, 1, &mut seq, &mut want) {
            burst += 1;
        }
        if rounds % 4 == 1 && seq[2] < 3 {
            send(&mut b, 2, &mut seq, &mut want);
        }
        if rounds % 2 == 0 || burst == 0 {
            for (f, p) in drain(&mut rx) {
                got[f as usize].push(p);
            }
        }
        assert!(rounds < 10_000, "no progress");
    }
    for (f, p) in drain(&mut rx) {
        got[f as usize].push(p);
    }
    assert!(
        got[1].len() >= 200,
        "only {} packets from rank 1",
        got[1].len()
    );
    assert!(
        got[1] == want[1],
        "rank 1's packets arrived out of order or changed"
    );
    assert!(got[2] == want[2]);
    assert_eq!(got[2].len(), 3);
    // One ring, offered by rank 1 and taken by rank 0; rank 2 made none.
    assert_eq!(a.stats().fast_rings, 1);
    assert_eq!(rx.stats().fast_rings, 1);
    assert_eq!(b.stats().fast_rings, 0);
    assert!(a.stats().no_room > 0, "the ring never filled");
    assert_eq!(rx.stats().corrupt_dropped, 0);
}

#[test]
fn a_full_fast_ring_rings_its_sender_and_a_waiting_slot_stops_the_receiver_sleeping() {
    let job = unique_job("fastcredit");
    let _files = ShmFiles(job.clone());
    let c = fast_cfg(16, 256, 1, 4);
    let mut rx = Shm::new(0, 2, &job, c).unwrap();
    let mut tx = Shm::new(1, 2, &job, c).unwrap();
    let fd = tx.wake_fd().unwrap();
    let rx_fd = rx.wake_fd().unwrap();
    // The first packet goes through the queue, the offer and the rest through the ring.
    assert!(tx.try_send(0, &[b"q"]).unwrap());
    assert_eq!(drain(&mut rx), [(1, b"q".to_vec())]);
    let mut sent = 0;
    while tx.try_send(0, &[b"r"]).unwrap() {
        sent += 1;
    }
    assert_eq!(sent, 4, "a 4-slot ring took {sent}");
    assert_eq!(tx.stats().fast_rings, 1);
    // The receiver has packets waiting in the ring (not the queue): it must not sleep.
    assert!(!rx.arm());
    rx.disarm();
    // The sender is out of room and may sleep, asking to be rung.
    assert!(tx.arm());
    assert!(!rung(fd));
    assert_eq!(drain(&mut rx).len(), 4);
    assert!(
        rung(fd),
        "freeing ring slots did not ring the sender waiting for them"
    );
    tx.disarm();
    // A receiver asleep on an empty ring is rung by the next ring packet.
    assert!(rx.arm());
    assert!(!rung(rx_fd));
    assert!(tx.try_send(0, &[b"wake"]).unwrap());
    assert!(
        rung(rx_fd),
        "a ring packet did not wake the sleeping receiver"
    );
    rx.disarm();
    assert_eq!(drain(&mut rx), [(1, b"wake".to_vec())]);
}

#[test]
fn fast_ring_medium_records_span_slots_and_pad_at_the_ring_end() {
    use fastring::{Record, RxRing, TxRing, SLOT, SLOT_HEADER};
    let mut tx = TxRing::create(64, 7, usize::MAX).unwrap();
    let mut rx = RxRing::open(tx.card(), 3).unwrap().unwrap();
    let max = tx.inline_max();
    assert_eq!(max, 8 * SLOT - SLOT_HEADER);
    // Every slot boundary up to the limit, +-1; stepping through them by 7 makes records
    // end at every offset of the ring, so pads come in many places.
    let sizes: Vec<usize> = (1..=8)
        .flat_map(|k| {
            let b = k * SLOT - SLOT_HEADER;
            [b - 1, b, b + 1]
        })
        .chain([0, 1])
        .filter(|&l| l <= max)
        .collect();
    let (mut next_in, mut next_out) = (0u32, 0u32);
    let mut lens = std::collections::VecDeque::new();
    let mut take = |rx: &mut RxRing, lens: &mut std::collections::VecDeque<usize>| {
        rx.consume(&mut |rec| {
            let Record::Inline(p) = rec else {
                panic!("not an inline record")
            };
            assert_eq!(p, pattern(lens.pop_front().unwrap(), next_out));
            next_out += 1;
        })
    };
    for round in 0..3000usize {
        let len = sizes[(round * 7) % sizes.len()];
        let p = pattern(len, next_in);
        let cut = len / 3;
        if !tx.push_inline(&[&p[..cut], &p[cut..]], len) {
            assert!(!tx.has_room_for(len));
            assert!(take(&mut rx, &mut lens) > 0, "full, yet nothing to read");
            assert!(tx.push_inline(&[&p[..cut], &p[cut..]], len));
        }
        lens.push_back(len);
        next_in += 1;
        if round % 5 == 0 {
            take(&mut rx, &mut lens);
        }
    }
    take(&mut rx, &mut lens);
    assert_eq!(next_in, next_out);
    assert!(!rx.has_ready());
    // A record's later slots hold payload: whatever it holds (here the sequence number a
    // one-slot record would have had there), it is not taken for a record of its own.
    let fake = (next_in as u64 + 2) as u32;
    let mut p = pattern(2 * SLOT, 0);
    p[SLOT - SLOT_HEADER..SLOT - SLOT_HEADER + 4].copy_from_slice(&fake.to_le_bytes());
    let before = lens.len();
    assert!(tx.push_inline(&[&p], p.len()));
    let mut n = 0;
    rx.consume(&mut |rec| {
        assert!(matches!(rec, Record::Inline(q) if q == p.as_slice()));
        n += 1;
    });
    assert_eq!((n, lens.len()), (1, before));
    assert!(!rx.has_ready());
}

/// Two ranks as threads sending to each other at once, every size across the fast ring's
/// slot boundaries, its record limit and the cells; a receiver with nothing to read sleeps
/// on its doorbell. Every packet arrives once, in order, with its bytes.
#[test]
fn both_directions_at_once_across_every_slot_boundary_with_sleeping_receivers() {
    use fastring::{SLOT, SLOT_HEADER};
    let job = unique_job("medium");
    let _files = ShmFiles(job.clone());
    // The ring switches on after 3 packets; 32 slots carry records of up to 4 slots.
    let c = fast_cfg(8, 4096, 3, 32);
    let nets: Vec<Shm> = (0..2).map(|r| Shm::new(r, 2, &job, c).unwrap()).collect();
    let run = move |mut net: Shm, me: u32| {
        let max = net.max_packet();
        let mut sizes: Vec<usize> = (1..=5)
            .flat_map(|k| {
                let b = k * SLOT - SLOT_HEADER;
                [b - 1, b, b + 1]
            })
            .chain([0, 1, max - 1, max])
            .collect();
        sizes.sort_unstable();
        let count = 600u32;
        let peer = 1 - me;
        let mut inbox = Vec::new();
        let mut got = 0u32;
        for i in 0..count {
            let len = sizes[i as usize % sizes.len()];
            let mut p = pattern(len.max(4), i ^ (me << 16));
            p[..4].copy_from_slice(&i.to_le_bytes());
            p.truncate(len.max(4));
            send(&mut net, peer, &[&p[..1], &p[1..]], &mut inbox);
            // Now and then wait for everything the peer sent so far (sleeping when it is
            // behind), so both sides sleep while the other is still sending.
            if i % 37 == 36 {
                while got < i {
                    let (from, q) = next(&mut net, &mut inbox);
                    assert_eq!(from, peer);
                    check(&q, got, peer, &sizes);
                    got += 1;
                }
            }
        }
        while got < count {
            let (from, q) = next(&mut net, &mut inbox);
            assert_eq!(from, peer);
            check(&q, got, peer, &sizes);
            got += 1;
        }
        // Nothing more arrives.
        assert!(inbox.is_empty() && net.poll(&mut |_, _| panic!("an extra packet")) == 0);
        let s = net.stats();
        assert_eq!(s.fast_rings, 2, "one ring each way (made and taken)");
        assert_eq!(s.corrupt_dropped, 0);
        // Keep the segment until the peer has read everything.
        net
    };
    fn check(q: &[u8], i: u32, from: u32, sizes: &[usize]) {
        let len = sizes[i as usize % sizes.len()].max(4);
        let mut want = pattern(len, i ^ (from << 16));
        want[..4].copy_from_slice(&i.to_le_bytes());
        assert_eq!(q.len(), len, "packet {i} from {from}: length");
        assert!(q == want.as_slice(), "packet {i} from {from}: bytes");
    }
    let mut it = nets.into_iter();
    let (a, b) = (it.next().unwrap(), it.next().unwrap());
    let ta = std::thread::spawn(move || run(a, 0));
    let tb = std::thread::spawn(move || run(b, 1));
    let (a, b) = (ta.join().unwrap(), tb.join().unwrap());
    drop((a, b));
}

#[test]
fn fast_ring_one_slot_push_copies_every_size_and_split() {
    use fastring::{Record, RxRing, TxRing, SLOT_PAYLOAD};
    // push_slot copies small parts without memcpy, by two overlapping loads and stores per
    // part: every length a slot holds, split at every place that puts each part in another
    // size class (0-1, 2-3, 4-7, 8-15, 16-32, 33-64, more), must arrive whole and exact;
    // the slot held 0xff bytes before, so a byte the copy skips shows.
    let mut tx = TxRing::create(8, 9, usize::MAX).unwrap();
    let mut rx = RxRing::open(tx.card(), 2).unwrap().unwrap();
    assert_eq!(tx.slot_max(), SLOT_PAYLOAD);
    let cuts = [0usize, 1, 2, 3, 4, 7, 8, 15, 16, 32, 33, 40, 64, 65];
    let mut seq = 0u32;
    for len in 0..=SLOT_PAYLOAD {
        for &cut in cuts.iter().filter(|&&c| c <= len) {
            let p = pattern(len, seq);
            // Fill the slot this packet will use with 0xff first (a full-slot packet).
            let junk = vec![0xffu8; SLOT_PAYLOAD];
            assert!(tx.push_slot(&[&junk], SLOT_PAYLOAD));
            let mut n = 0;
            rx.consume(&mut |_| n += 1);
            assert_eq!(n, 1);
            for _ in 1..8 {
                assert!(tx.push_slot(&[&junk], SLOT_PAYLOAD));
            }
            rx.consume(&mut |_| {});
            // The ring has lapped once: the next slot is the one the first junk used.
            assert!(tx.push_slot(&[&p[..cut], &p[cut..]], len));
            let mut got = None;
            rx.consume(&mut |rec| match rec {
                Record::Inline(b) => got = Some(b.to_vec()),
                _ => panic!("not an inline record"),
            });
            assert_eq!(got.as_deref(), Some(&p[..]), "len {len} cut {cut}");
            seq += 1;
        }
    }
    // A full ring refuses without writing; the consumer frees it.
    for i in 0..8 {
        assert!(tx.push_slot(&[b"x"], 1), "slot {i}");
    }
    assert!(!tx.push_slot(&[b"y"], 1));
    assert_eq!(rx.consume(&mut |_| {}), 8);
    assert!(tx.push_slot(&[b"z"], 1));
}

/// The hot path's records of several slots (`push_slot`): every length around each slot
/// boundary up to the record limit, starting at every offset of the ring. A record that
/// would run past the ring's end is refused without a write (the slow path pads it to the
/// next lap), a full ring refuses, and every record arrives whole over slots that held 0xff
/// bytes, so a byte the copy skips or a slot left out shows.
#[test]
fn fast_ring_records_over_several_slots_at_every_offset_wrap_and_full_ring() {
    use fastring::{Record, RxRing, TxRing, SLOT, SLOT_HEADER};
    let nslots = 16u64;
    let mut tx = TxRing::create(nslots as u32, 11, usize::MAX).unwrap();
    let mut rx = RxRing::open(tx.card(), 1).unwrap().unwrap();
    let max = tx.inline_max();
    assert_eq!(max, 2 * SLOT - SLOT_HEADER);
    let junk = vec![0xffu8; tx.slot_max()];
    let got = |rx: &mut RxRing| {
        let mut v = Vec::new();
        rx.consume(&mut |rec| match rec {
            Record::Inline(b) => v.push(b.to_vec()),
            _ => panic!("not an inline record"),
        });
        v
    };
    // Fill every slot with junk once, so stale bytes are 0xff.
    for _ in 0..nslots {
        assert!(tx.push_slot(&[&junk], junk.len()));
    }
    assert_eq!(got(&mut rx).len(), nslots as usize);
    let mut pos = nslots;
    let mut seq = 0u32;
    for len in [
        SLOT - SLOT_HEADER - 1,
        SLOT - SLOT_HEADER,
        SLOT - SLOT_HEADER + 1,
    ]
    .into_iter()
    .chain([SLOT, 300, max - 1, max])
    {
        let k = (SLOT_HEADER + len).div_ceil(SLOT) as u64;
        for _offset in 0..nslots {
            for cut in [0, 1, 8, 40, len / 2, len] {
                let p = pattern(len, seq);
                seq += 1;
                let wraps = (pos % nslots) + k > nslots;
                if wraps {
                    assert!(!tx.push_slot(&[&p[..cut], &p[cut..]], len), "len {len}");
                    // The slow path: a pad to the ring's end, then the record.
                    assert!(tx.push_inline(&[&p[..cut], &p[cut..]], len));
                    pos += nslots - pos % nslots;
                } else {
                    assert!(tx.push_slot(&[&p[..cut], &p[cut..]], len), "len {len}");
                }
                pos += k;
                assert_eq!(got(&mut rx), [p], "len {len} cut {cut} at {}", pos % nslots);
                // Junk over the slots the next record takes.
                for _ in 0..nslots - 1 {
                    assert!(tx.push_slot(&[&junk], junk.len()));
                }
                assert_eq!(got(&mut rx).len(), nslots as usize - 1);
                pos += nslots - 1;
            }
        }
    }
    // Records fill at most half the ring; one-slot packets the rest, then a full ring
    // refuses; consuming frees it. (From the ring's start, so no record meets its end.)
    while !pos.is_multiple_of(nslots) {
        assert!(tx.push_slot(&[&junk], junk.len()));
        pos += 1;
    }
    got(&mut rx);
    let p = pattern(max, 7);
    let mut n = 0;
    while tx.push_slot(&[&p], max) {
        n += 1;
    }
    assert_eq!(n, nslots / 2 / 2, "two-slot records in half the ring");
    assert!(!tx.has_room_for(max) && tx.has_room());
    for i in 0..nslots / 2 {
        assert!(tx.push_slot(&[b"one"], 3), "one-slot packet {i}");
    }
    assert!(!tx.push_slot(&[b"x"], 1) && !tx.has_room());
    let all = got(&mut rx);
    assert_eq!(all.len() as u64, n + nslots / 2);
    assert!(all[..n as usize].iter().all(|q| q == &p));
    assert!(all[n as usize..].iter().all(|q| q == b"one"));
    assert!(tx.push_slot(&[&p], max));
    assert_eq!(got(&mut rx), [p]);
}

/// Through `Shm::try_send`: a stream of 3-slot packets the receiver does not drain fills
/// half the ring with records, then goes on in queue cells passed through its other slots
/// (a record that does not fit is not "no room" while a slot and a cell are free), and
/// only then says no room; everything arrives in order with its bytes. Rounds start with
/// a few one-slot packets, so records start at other offsets and meet the ring's end.
#[test]
fn a_record_without_room_goes_in_a_cell_keeping_order() {
    use fastring::{SLOT, SLOT_HEADER};
    let job = unique_job("recfall");
    let _files = ShmFiles(job.clone());
    // 32 slots carry records of up to 4 slots; the ring switches on after 1 packet.
    let c = fast_cfg(64, 4096, 1, 32);
    let mut rx = Shm::new(0, 2, &job, c).unwrap();
    let mut tx = Shm::new(1, 2, &job, c).unwrap();
    assert!(tx.try_send(0, &[b"q"]).unwrap());
    assert_eq!(drain(&mut rx), [(1, b"q".to_vec())]);
    let len = 2 * SLOT - SLOT_HEADER + 100; // three slots
    let mut seq = 0u32;
    let mut want = Vec::new();
    for round in 0..6 {
        for i in 0..round {
            let p = pattern(1 + i * 50, seq + 1000);
            assert!(tx.try_send(0, &[&p]).unwrap());
            want.push((1, p));
        }
        let mut sent = 0;
        loop {
            let mut p = pattern(len, seq);
            p[..4].copy_from_slice(&seq.to_le_bytes());
            if !tx.try_send(0, &[&p[..8], &p[8..]]).unwrap() {
                break;
            }
            want.push((1, p));
            seq += 1;
            sent += 1;
        }
        if round == 0 {
            // Five records (15 of the 32 slots), then 17 cells.
            assert_eq!(sent, 22, "packets before no room");
        } else {
            assert!(sent >= 17, "round {round}: {sent} packets before no room");
        }
        let got = drain(&mut rx);
        assert!(
            got == want,
            "round {round}: packets lost, changed or out of order"
        );
        want.clear();
    }
    assert_eq!(rx.stats().corrupt_dropped, 0);
}
