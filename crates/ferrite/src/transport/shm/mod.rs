//! The shared-memory transport: one receive queue per process in its own segment, many
//! senders per queue (a shared receive queue), peers' segments mapped on first contact,
//! credits = free cells, a doorbell socket for sleeping, and single-copy reads via CMA;
//! pairs that talk often switch to a single-producer ring of their own (fastring.rs).

pub mod cma;
pub mod doorbell;
pub mod fastring;
pub mod queue;
pub mod segment;
pub mod sleepfence;

use super::{Proc, Transport, TransportStats};
use crate::fxhash::FxHashMap;
use crate::runtime::config;
use crate::terr;
use crate::transport::error::TResult;
use doorbell::{BellAddr, Doorbell};
use fastring::{Record, RxRing, TxRing};
use queue::{Queue, Received, Sent, KIND_DATA, KIND_OFFER};
use segment::{Card, Geometry, Segment};
use std::os::unix::io::RawFd;

#[derive(Clone, Copy, Debug)]
pub struct ShmConfig {
    pub geom: Geometry,
    /// Single-copy reads allowed (FERRITE_SHM_CMA).
    pub cma: bool,
    /// Packets to one peer through the shared queue before switching that pair to a fast
    /// ring (FERRITE_SHM_FAST_AFTER); 0: never.
    pub fast_after: u32,
    /// Slots per fast ring (FERRITE_SHM_FAST_SLOTS).
    pub fast_slots: u32,
    /// Largest packet carried in a fast ring's own slots (FERRITE_SHM_FAST_RECORD).
    pub fast_record: usize,
    /// Fence for sleepers with membarrier, not on every send (FERRITE_SHM_MEMBARRIER).
    pub membarrier: bool,
}

impl ShmConfig {
    /// From the FERRITE_SHM_* knobs, for a job of `size` ranks.
    pub fn from_knobs(size: u32) -> TResult<ShmConfig> {
        let k: u32 = config::get("FERRITE_SHM_CELLS_K");
        let b: u32 = config::get("FERRITE_SHM_CELLS_B");
        let cell: usize = config::get("FERRITE_SHM_CELL_SIZE");
        let cma: u32 = config::get("FERRITE_SHM_CMA");
        let fast_after: u32 = config::get("FERRITE_SHM_FAST_AFTER");
        let fast_slots: u32 = config::get("FERRITE_SHM_FAST_SLOTS");
        let fast_record: usize = config::get("FERRITE_SHM_FAST_RECORD");
        let membarrier: u32 = config::get("FERRITE_SHM_MEMBARRIER");
        let geom = Geometry::new(segment::cell_count(size, k, b), cell)
            .map_err(|e| terr!(InvalidArg, "{e}"))?;
        if fast_after > 0 && !fastring::valid_slots(fast_slots) {
            return Err(terr!(
                InvalidArg,
                "FERRITE_SHM_FAST_SLOTS={fast_slots} is not a power of two in 2..=65536"
            ));
        }
        Ok(ShmConfig {
            geom,
            cma: cma != 0,
            fast_after,
            fast_slots,
            fast_record,
            membarrier: membarrier != 0,
        })
    }
}

/// How packets to a peer travel (fastring.rs).
enum Path {
    /// Through its shared queue; the count of packets sent so far.
    Queue(u32),
    /// A fast ring is made but its offer is not yet in the peer's queue (no free cell):
    /// packets wait, the offer goes first.
    Offering(TxRing),
    /// Every packet through the ring (large ones as a cell index).
    Fast(TxRing),
    /// Through the queue for good (fast path off, or making a ring failed).
    QueueOnly,
}

/// A peer whose segment we mapped.
struct Peer {
    /// The queue in `seg`, laid out once.
    q: Queue,
    seg: Segment,
    bell: BellAddr,
    /// Cleared after the first EPERM/ENOSYS: later reads fall back to packets at once.
    cma_ok: bool,
    path: Path,
    /// The last "no room" was a full fast ring (not a lack of free cells), for a record
    /// of `ring_need` bytes.
    ring_full: bool,
    ring_need: usize,
    /// Both of us use membarrier: a compiler fence after publishing in the fast ring will do.
    light: bool,
}

impl Peer {
    /// About to sleep after "no room": asks the peer to ring `me` when room appears, then
    /// re-checks; false when there is room already (the caller must not sleep).
    fn want_room(&mut self, me: Proc, asym: bool) -> bool {
        match (&mut self.path, self.ring_full) {
            (Path::Fast(ring), true) => {
                self.q.ask_credit(me, asym) && !ring.has_room_for(self.ring_need)
            }
            _ => self.q.want_credit(me, asym),
        }
    }
}

pub struct Shm {
    rank: Proc,
    size: u32,
    job: String,
    cfg: ShmConfig,
    /// Registered for membarrier and using it before sleeping (sleepfence.rs).
    asym: bool,
    /// Holds the mapping and the file `own_q` lives in (peers open it while it is open).
    _own: Segment,
    /// The queue in `own`, laid out once (every progress pass polls it).
    own_q: Queue,
    bell: Doorbell,
    /// Peers mapped so far, found through `peer_index`; `last` caches the most recent
    /// (peer, index), which is most sends of a pair exchange.
    peers: Vec<Peer>,
    peer_index: FxHashMap<Proc, usize>,
    last: (Proc, usize),
    /// Own cells waiting to go back on the free ring (see queue.rs).
    unfreed: Vec<u64>,
    /// Fast rings peers send us through, polled after the queue.
    fast_rx: Vec<RxRing>,
    /// Peers (indices in `peers`) that answered "no room" since we last slept or sent to
    /// them: before sleeping we ask them to ring us when they free cells.
    starved: Vec<usize>,
    stats: TransportStats,
}

fn random_token() -> u64 {
    let mut t = [0u8; 8];
    // SAFETY: t is valid for 8 bytes.
    let n = unsafe { libc::getrandom(t.as_mut_ptr().cast(), 8, 0) };
    if n == 8 {
        u64::from_le_bytes(t)
    } else {
        // Only guards against strangers' wake-ups; a weak token costs nothing but counts.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        now ^ ((std::process::id() as u64) << 32)
    }
}

/// The key under which a rank publishes its segment's [`Card`].
fn card_key(rank: Proc) -> String {
    format!("shm-{rank}")
}

/// Unit tests run ranks as threads and child processes without PMI: their jobs (`test-*`,
/// `tcptest-*`, `udptest-*`) publish cards as files in the temporary directory instead.
#[cfg(test)]
pub(crate) fn test_card_path(job: &str, rank: Proc) -> Option<std::path::PathBuf> {
    ["test-", "tcptest-", "udptest-"]
        .iter()
        .any(|p| job.starts_with(p))
        .then(|| std::env::temp_dir().join(format!("ferrite-{job}-{rank}.card")))
}

/// Publishes this rank's card (read by peers after MPI_Init's barrier).
fn publish(job: &str, rank: Proc, card: Card) -> TResult<()> {
    #[cfg(test)]
    if let Some(path) = test_card_path(job, rank) {
        return std::fs::write(path, card.encode())
            .map_err(|e| terr!(Other, "shm transport: test card: {e}"));
    }
    let _ = job;
    Ok(crate::runtime::pmi::put(&card_key(rank), &card.encode())?)
}

/// `rank`'s card, if it published one.
fn lookup(job: &str, rank: Proc) -> TResult<Option<Card>> {
    #[cfg(test)]
    if let Some(path) = test_card_path(job, rank) {
        return Ok(std::fs::read_to_string(path)
            .ok()
            .and_then(|c| Card::decode(&c)));
    }
    let _ = job;
    match crate::runtime::pmi::get(&card_key(rank))? {
        None => Ok(None),
        Some(c) => Card::decode(&c).map(Some).ok_or_else(|| {
            terr!(
                Protocol,
                "shm transport: rank {rank} published {c:?}, not a segment card"
            )
        }),
    }
}

impl Shm {
    /// Creates this process's segment, publishes where peers find it, binds its doorbell.
    pub fn new(rank: Proc, size: u32, job: &str, cfg: ShmConfig) -> TResult<Shm> {
        let token = random_token();
        let asym = cfg.membarrier && sleepfence::register();
        let own = Segment::create(cfg.geom, rank, token, asym)
            .map_err(|e| terr!(Other, "shm transport: {e}"))?;
        publish(job, rank, own.card())?;
        let bell = Doorbell::bind(&doorbell::bell_addr(job, rank), token).map_err(|e| {
            terr!(
                Other,
                "shm transport: cannot bind the doorbell socket of rank {rank} (job {job}): {e}"
            )
        })?;
        if cfg.cma {
            cma::allow_readers();
        }
        // SAFETY: `own` is a live mapping laid out by its geometry, kept alive (and never
        // moved: the mapping's address does not change) as long as `own_q`, both in `Shm`.
        let own_q = unsafe { Queue::at(own.base(), own.geometry()) };
        Ok(Shm {
            own_q,
            rank,
            size,
            job: job.to_string(),
            cfg,
            asym,
            _own: own,
            bell,
            peers: Vec::new(),
            peer_index: FxHashMap::default(),
            last: (Proc::MAX, 0),
            unfreed: Vec::new(),
            fast_rx: Vec::new(),
            starved: Vec::new(),
            stats: TransportStats::default(),
        })
    }

    fn own_queue(&self) -> &Queue {
        &self.own_q
    }

    /// The peer's mapping, made on first contact.
    #[inline]
    fn peer(&mut self, to: Proc) -> TResult<&mut Peer> {
        if self.last.0 != to {
            let i = match self.peer_index.get(&to) {
                Some(&i) => i,
                None => self.map_peer(to)?,
            };
            self.last = (to, i);
        }
        Ok(&mut self.peers[self.last.1])
    }

    /// Maps `to`'s segment (first contact); returns its index in `peers`.
    fn map_peer(&mut self, to: Proc) -> TResult<usize> {
        if to >= self.size {
            return Err(terr!(
                InvalidArg,
                "shm transport: rank {to} is not in a job of {} ranks",
                self.size
            ));
        }
        let Some(card) = lookup(&self.job, to)? else {
            return Err(terr!(
                Other,
                "shm transport cannot reach rank {to}: it published no segment (it is on \
                 another host, or has not started)"
            ));
        };
        let seg = match Segment::open(card) {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(terr!(
                    PeerFailed,
                    "shm transport cannot reach rank {to}: its process (pid {}) has exited",
                    card.pid
                ))
            }
            Err(e) => return Err(terr!(Other, "shm transport, rank {to}: {e}")),
        };
        if seg.owner_rank != to {
            return Err(terr!(
                Protocol,
                "shm transport: the segment rank {to} published belongs to rank {}",
                seg.owner_rank
            ));
        }
        if seg.geometry().cell_size != self.cfg.geom.cell_size {
            return Err(terr!(
                InvalidArg,
                "shm transport: rank {to} uses {}-byte cells, rank {} uses {}; set \
                 FERRITE_SHM_CELL_SIZE the same for every rank",
                seg.geometry().cell_size,
                self.rank,
                self.cfg.geom.cell_size
            ));
        }
        self.stats.segments_mapped += 1;
        let bell = doorbell::bell_addr(&self.job, to);
        // SAFETY: `seg` is a live, validated mapping laid out by its geometry; it stays mapped
        // at the same address as long as the Peer that holds both.
        let q = unsafe { Queue::at(seg.base(), seg.geometry()) };
        let path = if self.cfg.fast_after > 0 {
            Path::Queue(0)
        } else {
            Path::QueueOnly
        };
        let light = self.asym && seg.membarrier;
        self.peers.push(Peer {
            light,
            q,
            seg,
            bell,
            cma_ok: true,
            path,
            ring_full: false,
            ring_need: 0,
        });
        self.peer_index.insert(to, self.peers.len() - 1);
        Ok(self.peers.len() - 1)
    }

    /// Counts a "no room" (`full_ring`: the fast ring was full, not the cells) and notes the
    /// peer, so that `arm` asks it for a ring when room appears. Returns false for try_send.
    fn no_room(&mut self, full_ring: bool) -> bool {
        self.stats.no_room += 1;
        let i = self.last.1;
        self.peers[i].ring_full = full_ring;
        if !self.starved.contains(&i) {
            self.starved.push(i);
        }
        false
    }

    /// Maps the fast ring `from` offered (its packets from now on come through it).
    fn take_offer(&mut self, from: Proc, card: &[u8]) {
        let ring = std::str::from_utf8(card)
            .ok()
            .and_then(Card::decode)
            .ok_or_else(|| format!("{card:?} is not a ring card"))
            .and_then(|c| RxRing::open(c, from));
        match ring {
            Ok(Some(r)) => {
                self.fast_rx.push(r);
                self.stats.fast_rings += 1;
            }
            // The sender is gone: nothing more will come from it.
            Ok(None) => {}
            Err(e) => {
                // Its later packets are in a ring we cannot read: say so loudly (the same
                // kernel let it open our segment, so this means a broken system).
                self.stats.corrupt_dropped += 1;
                eprintln!(
                    "ferrite: shm transport, rank {}: cannot take the fast ring of rank {from} \
                     ({e}); its further messages are lost",
                    self.rank
                );
            }
        }
    }

    /// Rings the senders that went to sleep waiting for our credits (called after freeing
    /// cells). A bit stands for every rank equal to it modulo 64: in a larger job a few
    /// ranks get a spurious wake-up, never a missed one.
    fn ring_credit_waiters(&mut self) {
        let mask = self.own_q.take_credit_waiters(self.asym);
        if mask == 0 {
            return;
        }
        let me = self.rank;
        for r in (0..self.size).filter(|&r| mask & (1 << (r % 64)) != 0 && r != me) {
            // A rank we cannot map has exited: nobody to wake.
            if let Ok(p) = self.peer(r) {
                let (addr, token) = (p.bell, p.seg.token);
                self.bell.ring(&addr, token);
                self.stats.doorbells_rung += 1;
            }
        }
    }

    /// After a packet of `len` bytes went to the peer of the last send: rings it if it
    /// sleeps (`ring`), notes it has room, counts.
    #[inline]
    fn sent(&mut self, ring: bool, len: usize) {
        let i = self.last.1;
        let peer = &mut self.peers[i];
        if ring {
            let (addr, token) = (peer.bell, peer.seg.token);
            self.bell.ring(&addr, token);
            self.stats.doorbells_rung += 1;
        }
        peer.ring_full = false;
        if !self.starved.is_empty() {
            self.starved.retain(|&s| s != i);
        }
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
    }

    /// Every send but the hot case of `try_send`: limits, the switch to a ring, queue
    /// cells, no room.
    #[inline(never)]
    fn try_send_general(&mut self, to: Proc, parts: &[&[u8]]) -> TResult<bool> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let max = self.max_packet();
        if len > max {
            return Err(terr!(
                InvalidArg,
                "shm transport: a packet of {len} bytes to rank {to} exceeds the {max}-byte limit"
            ));
        }
        let (from, fast_after, slots, record) = (
            self.rank,
            self.cfg.fast_after,
            self.cfg.fast_slots,
            self.cfg.fast_record,
        );
        let peer = self.peer(to)?;
        let mut ring = false;
        if matches!(peer.path, Path::Queue(n) if n >= fast_after) {
            // Often enough: make this pair a ring of its own (offered before the next packet).
            peer.path = match TxRing::create(slots, random_token(), record) {
                Ok(r) => Path::Offering(r),
                Err(_) => Path::QueueOnly,
            };
        }
        if let Path::Offering(r) = &peer.path {
            let card = r.card().encode();
            match peer.q.send_kind(from, KIND_OFFER, &[card.as_bytes()]) {
                Sent::NoRoom => return Ok(self.no_room(false)),
                Sent::Published { ring: r } => {
                    ring = r;
                    let Path::Offering(r) = std::mem::replace(&mut peer.path, Path::QueueOnly)
                    else {
                        unreachable!()
                    };
                    peer.path = Path::Fast(r);
                    self.stats.fast_rings += 1;
                }
            }
        }
        let peer = &mut self.peers[self.last.1];
        let sent = match &mut peer.path {
            Path::Fast(r) => {
                if len <= r.inline_max() && r.push_inline(parts, len) {
                    Sent::Published {
                        ring: peer.q.must_ring(peer.light),
                    }
                } else if len <= r.slot_max() {
                    // One slot, and the ring is full.
                    peer.ring_need = len;
                    Sent::NoRoom
                } else if !r.has_room() {
                    // Over a record, or a record the ring has no room for now (a cell then
                    // keeps a stream going while the receiver catches up): one slot.
                    peer.ring_need = 0;
                    Sent::NoRoom
                } else {
                    match peer.q.fill_cell(from, KIND_DATA, parts) {
                        None => {
                            peer.ring_full = false;
                            return Ok(self.no_room(false));
                        }
                        Some(idx) => {
                            // Room was checked above and only we fill this ring.
                            let pushed = r.push_cell(idx);
                            debug_assert!(pushed);
                            Sent::Published {
                                ring: peer.q.must_ring(peer.light),
                            }
                        }
                    }
                }
            }
            Path::Queue(n) => {
                let sent = peer.q.send(from, parts);
                if sent != Sent::NoRoom {
                    *n += 1;
                }
                sent
            }
            _ => peer.q.send(from, parts),
        };
        match sent {
            Sent::NoRoom => {
                let full_ring = matches!(peer.path, Path::Fast(_));
                Ok(self.no_room(full_ring))
            }
            Sent::Published { ring: r } => {
                self.sent(ring || r, len);
                Ok(true)
            }
        }
    }

    /// `poll` when something is there: the queue, then the rings.
    #[inline(never)]
    fn poll_some(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let (q, size) = (&self.own_q, self.size);
        // At most ncells packets can be waiting; the bound keeps one poll finite even if
        // senders refill the queue as fast as it drains.
        let queue_idle = self.unfreed.is_empty() && !q.has_ready();
        let mut n = 0;
        let mut bytes = 0u64;
        let mut offers: Vec<(Proc, Vec<u8>)> = Vec::new();
        for _ in 0..if queue_idle { 0 } else { self.cfg.geom.ncells } {
            match q.recv_kind(size, &mut self.unfreed, &mut |from, kind, p| {
                if kind == KIND_DATA {
                    n += 1;
                    bytes += p.len() as u64;
                    deliver(from, p)
                } else {
                    offers.push((from, p.to_vec()));
                }
            }) {
                Received::Empty => break,
                Received::Delivered => {}
                Received::Corrupt => self.stats.corrupt_dropped += 1,
            }
        }
        // An offer comes after every packet its sender put in the queue, and everything
        // after it is in the ring: mapping it now and reading rings last keeps the order.
        if !offers.is_empty() {
            for (from, card) in offers {
                self.take_offer(from, &card);
            }
        }
        let (q, unfreed, stats) = (&self.own_q, &mut self.unfreed, &mut self.stats);
        for r in self.fast_rx.iter_mut().filter(|r| r.has_ready()) {
            let from = r.from;
            r.consume(&mut |rec| match rec {
                Record::Inline(p) => {
                    n += 1;
                    bytes += p.len() as u64;
                    deliver(from, p)
                }
                Record::Cell(idx) => {
                    let mut ok = false;
                    q.take_cell(idx, size, unfreed, &mut |f, kind, p| {
                        if f == from && kind == KIND_DATA {
                            ok = true;
                            n += 1;
                            bytes += p.len() as u64;
                            deliver(from, p)
                        }
                    });
                    if !ok {
                        stats.corrupt_dropped += 1;
                    }
                }
                Record::Corrupt => stats.corrupt_dropped += 1,
                Record::Pad => {}
            });
        }
        self.stats.packets_received += n as u64;
        self.stats.bytes_received += bytes;
        if n > 0 {
            self.ring_credit_waiters();
        }
        n
    }
}

impl Transport for Shm {
    fn name(&self) -> &'static str {
        "shm"
    }

    /// A dead peer on this host is found by the protocols' own checks, not reported here.
    fn reports_failures(&self) -> bool {
        false
    }

    fn max_packet(&self) -> usize {
        self.cfg.geom.cell_size as usize - queue::CELL_HEADER
    }

    #[inline]
    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> TResult<bool> {
        // The hot case first: a packet of up to a record to the peer of the last send,
        // through the pair's ring (no limit or path checks: a record is below every limit).
        if self.last.0 == to {
            let peer = &mut self.peers[self.last.1];
            if let Path::Fast(r) = &mut peer.path {
                let len: usize = parts.iter().map(|p| p.len()).sum();
                if len <= r.inline_max() && r.push_slot(parts, len) {
                    let ring = peer.q.must_ring(peer.light);
                    self.sent(ring, len);
                    return Ok(true);
                }
            }
        }
        self.try_send_general(to, parts)
    }

    fn poll(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        // The idle pass of every spin: one look at the queue and each ring, nothing else.
        if self.unfreed.is_empty()
            && !self.own_q.has_ready()
            && !self.fast_rx.iter().any(|r| r.has_ready())
        {
            return 0;
        }
        self.poll_some(deliver)
    }
    fn read_remote(&mut self, from: Proc, addr: u64, dst: &mut [u8]) -> TResult<bool> {
        if !self.cfg.cma {
            return Ok(false);
        }
        let peer = self.peer(from)?;
        if !peer.cma_ok {
            return Ok(false);
        }
        match cma::read(peer.seg.pid, addr, dst) {
            Ok(()) => {
                self.stats.remote_reads += 1;
                self.stats.remote_read_bytes += dst.len() as u64;
                Ok(true)
            }
            Err(e) if cma::is_unavailable(&e) => {
                peer.cma_ok = false;
                self.stats.remote_read_fallbacks += 1;
                Ok(false)
            }
            Err(e) => Err(terr!(
                Other,
                "single-copy read of {} bytes at {addr:#x} from rank {from} (pid {}) failed: {e}",
                dst.len(),
                peer.seg.pid
            )),
        }
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.bell.fd())
    }

    fn arm(&mut self) -> bool {
        if !self.unfreed.is_empty() {
            self.own_q.retry_free(&mut self.unfreed);
            self.ring_credit_waiters();
        }
        // Peers we wait for credits from ring us when they free a cell (or one is free
        // already, and we must not sleep).
        let (rank, asym) = (self.rank, self.asym);
        let peers = &mut self.peers;
        if !self.starved.iter().all(|&i| peers[i].want_room(rank, asym)) {
            return false;
        }
        // Only packets of fast rings are published with a compiler fence (queue packets, the
        // offers included, with a full one): without a ring, a full fence is enough here,
        // and the membarrier (microseconds) is paid only by ranks with busy pairs. A ring
        // whose offer we have not taken yet cannot be slept through: the offer is in the
        // queue, re-checked below.
        let rx = &self.fast_rx;
        self.own_q
            .arm(|| rx.iter().any(|r| r.has_ready()), asym && !rx.is_empty())
    }

    fn disarm(&mut self) {
        self.own_queue().disarm();
        self.bell.drain();
        // Whoever is still out of credits finds out again on its next send.
        self.starved.clear();
    }

    fn stats(&self) -> TransportStats {
        TransportStats {
            strangers_dropped: self.bell.strangers,
            ..self.stats
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
