//! Reliable, ordered, exactly-once messages over an unreliable datagram channel (the `udp`
//! transport's reliability, also what the adaptive policy's datagram path runs on).
//!
//! One [`Reliable`] per process; it keeps a `Link` per peer it has talked to (memory grows with
//! peers contacted, not with the job). Per link and direction:
//!
//! - the sender numbers datagrams 0, 1, 2, ...; a message larger than a datagram's payload is
//!   cut into segments flagged FIRST / LAST, each its own datagram;
//! - at most `window` datagrams are unacknowledged; [`Reliable::send`] answers `Ok(false)` (no
//!   room, nothing taken, the caller keeps the message) when the window is full or the previous
//!   message is not yet wholly in the window, so at most one message waits beyond the window;
//! - the receiver acknowledges cumulatively (`ack` = next sequence number it expects) and
//!   selectively (`sack` bit i = datagram `ack + 1 + i` received), piggybacked on data it sends
//!   or in a standalone `Ack` after `ack_delay` (at once for a duplicate or a gap);
//! - a datagram not acknowledged within the retransmission timeout (RTO) is sent again; each
//!   timeout doubles the RTO up to `rto_max`, progress resets it; after `max_retries` the peer is
//!   reported unreachable;
//! - the receiver keeps out-of-order datagrams within its window, drops duplicates and those
//!   beyond the window, and delivers whole messages in order, each exactly once.
//!
//! Wire body after the 16-byte prefix ([`super::wire`]), for `Data` and `Ack`:
//! ```text
//!  16 u32 seq   (low 32 bits; Ack: 0)
//!  20 u32 ack   (next sequence number expected from the destination, low 32 bits)
//!  24 u64 sack
//!  32 payload   (Data: one segment, flags FIRST=1 / LAST=2; Ack: empty, flags 0)
//! ```

use super::wire::{self, Drop, DropCounts, Kind};
use super::Micros;
use super::Proc;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub const HEADER_LEN: usize = 32;
pub const FIRST: u8 = 1;
pub const LAST: u8 = 2;

#[derive(Clone, Debug)]
pub struct Config {
    /// Ranks in the job; a datagram from a rank outside is dropped.
    pub job_size: u32,
    /// Largest datagram, header included (1472: UDP over a 1500-byte Ethernet MTU).
    pub max_datagram: usize,
    /// Most unacknowledged datagrams per peer (at most 2^20); also how far ahead a receiver
    /// keeps out-of-order datagrams, so both ends use the same value.
    pub window: u32,
    pub rto_initial: Micros,
    pub rto_max: Micros,
    /// Retransmissions of one datagram before the peer is declared unreachable.
    pub max_retries: u32,
    /// How long an acknowledgement may wait for data to ride on.
    pub ack_delay: Micros,
}

impl Config {
    pub fn new(job_size: u32) -> Config {
        Config {
            job_size,
            max_datagram: 1472,
            window: 128,
            rto_initial: 20_000,
            rto_max: 1_000_000,
            max_retries: 15,
            ack_delay: 1_000,
        }
    }

    fn max_payload(&self) -> usize {
        self.max_datagram - HEADER_LEN
    }
}

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub to: Proc,
    pub bytes: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A whole message from `from`, in order, exactly once.
    Delivered { from: Proc, msg: Vec<u8> },
    /// A datagram to `peer` went unacknowledged through `max_retries` retransmissions; what
    /// was in flight to it is discarded and further sends to it fail.
    Unreachable { peer: Proc },
}

/// `send` to a peer already reported [`Event::Unreachable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerUnreachable(pub Proc);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub messages_sent: u64,
    pub bytes_sent: u64,
    pub datagrams_sent: u64,
    pub retransmits: u64,
    pub acks_sent: u64,
    /// `send` answered no room.
    pub no_room: u64,
    pub datagrams_received: u64,
    pub messages_delivered: u64,
    pub bytes_delivered: u64,
    pub duplicates: u64,
    /// Data beyond the receive window (a misbehaving sender) dropped.
    pub beyond_window: u64,
    /// Acknowledgements of datagrams never sent, or segments out of FIRST/LAST order.
    pub protocol_errors: u64,
    pub drops: DropCounts,
}

struct Segment {
    flags: u8,
    payload: Vec<u8>,
    sent_at: Micros,
    /// Times sent.
    sends: u32,
    /// Selectively acknowledged: no need to send again.
    sacked: bool,
}

/// The state shared with one peer.
///
/// Invariants: `send_base <= next_seq <= send_base + window`; `inflight[i]` is datagram
/// `send_base + i`; `staged` is non-empty only while `inflight` is full; every key of
/// `reorder` is in `recv_next + 1 .. recv_next + window`; `partial` is `Some` exactly between a
/// FIRST and its LAST segment.
struct Link {
    send_base: u64,
    next_seq: u64,
    inflight: VecDeque<Segment>,
    staged: VecDeque<(u8, Vec<u8>)>,
    rto: Micros,
    unreachable: bool,
    recv_next: u64,
    reorder: BTreeMap<u64, (u8, Vec<u8>)>,
    partial: Option<Vec<u8>>,
    ack_due: Option<Micros>,
    /// `recv_next` as last acknowledged (what the peer knows we have).
    acked: u64,
    /// `next_deadline()` as last indexed in `Reliable::timers`.
    deadline: Option<Micros>,
}

impl Link {
    fn new(rto: Micros) -> Link {
        Link {
            send_base: 0,
            next_seq: 0,
            inflight: VecDeque::new(),
            staged: VecDeque::new(),
            rto,
            unreachable: false,
            recv_next: 0,
            reorder: BTreeMap::new(),
            partial: None,
            ack_due: None,
            acked: 0,
            deadline: None,
        }
    }

    /// The selective-acknowledgement bitmap of what we hold beyond `recv_next`.
    fn sack(&self) -> u64 {
        let mut bits = 0u64;
        for &s in self.reorder.keys() {
            let i = s - self.recv_next - 1;
            if i >= 64 {
                break;
            }
            bits |= 1 << i;
        }
        bits
    }

    fn next_deadline(&self) -> Option<Micros> {
        let rto = self
            .inflight
            .iter()
            .filter(|s| !s.sacked)
            .map(|s| s.sent_at + self.rto)
            .min();
        match (rto, self.ack_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

pub struct Reliable {
    rank: Proc,
    secret: u64,
    cfg: Config,
    links: BTreeMap<Proc, Link>,
    /// Each link's next deadline, `(deadline, peer)`, kept equal to `Link::deadline`.
    timers: BTreeSet<(Micros, Proc)>,
    out: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: Stats,
}

impl Reliable {
    pub fn new(rank: Proc, secret: u64, cfg: Config) -> Reliable {
        assert!(cfg.max_datagram > HEADER_LEN && cfg.window >= 1 && cfg.window <= 1 << 20);
        Reliable {
            rank,
            secret,
            cfg,
            links: BTreeMap::new(),
            timers: BTreeSet::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The link to `peer`, made on first contact.
    fn link(links: &mut BTreeMap<Proc, Link>, peer: Proc, rto: Micros) -> &mut Link {
        links.entry(peer).or_insert_with(|| Link::new(rto))
    }

    /// Takes a whole message for `to`. `Ok(false)`: no room now (the window is full, or the
    /// previous message is not wholly in it yet), nothing taken; the caller keeps the message,
    /// in order, and tries again after feeding acknowledgements in.
    pub fn send(&mut self, to: Proc, msg: &[u8], now: Micros) -> Result<bool, PeerUnreachable> {
        assert!(
            to != self.rank && to < self.cfg.job_size,
            "send to rank {to}"
        );
        let window = self.cfg.window as u64;
        let max_payload = self.cfg.max_payload();
        let link = Self::link(&mut self.links, to, self.cfg.rto_initial);
        if link.unreachable {
            return Err(PeerUnreachable(to));
        }
        if !link.staged.is_empty() || link.next_seq - link.send_base >= window {
            self.stats.no_room += 1;
            return Ok(false);
        }
        let mut chunks = msg.chunks(max_payload).peekable();
        if chunks.peek().is_none() {
            link.staged.push_back((FIRST | LAST, Vec::new()));
        }
        let mut first = FIRST;
        while let Some(c) = chunks.next() {
            let last = if chunks.peek().is_none() { LAST } else { 0 };
            link.staged.push_back((first | last, c.to_vec()));
            first = 0;
        }
        self.stats.messages_sent += 1;
        self.stats.bytes_sent += msg.len() as u64;
        self.pump(to, now);
        self.retime(to);
        Ok(true)
    }

    /// Datagrams (to `peer`) still unacknowledged or waiting for the window: 0 means everything
    /// sent so far has been received (the adaptive policy waits for this before moving a
    /// peer's traffic to a connection, so nothing is overtaken).
    pub fn in_flight(&self, peer: Proc) -> usize {
        self.links
            .get(&peer)
            .map_or(0, |l| l.inflight.len() + l.staged.len())
    }

    /// Forgets a peer entirely, after it was reported unreachable. (Sequence numbers restart
    /// at 0, so a live peer would have to reset its side too.)
    pub fn reset(&mut self, peer: Proc) {
        if let Some(Some(t)) = self.links.remove(&peer).map(|l| l.deadline) {
            self.timers.remove(&(t, peer));
        }
    }

    /// Test hook: both directions of the link to `peer` start at sequence number `seq` (the
    /// peer must do the same), to exercise the 32-bit wrap on the wire.
    #[cfg(test)]
    fn start_at(&mut self, peer: Proc, seq: u64) {
        let l = Self::link(&mut self.links, peer, self.cfg.rto_initial);
        (l.send_base, l.next_seq, l.recv_next, l.acked) = (seq, seq, seq, seq);
    }

    /// Moves staged segments into the window and sends them.
    fn pump(&mut self, peer: Proc, now: Micros) {
        let window = self.cfg.window as u64;
        let Some(link) = self.links.get_mut(&peer) else {
            return;
        };
        while link.next_seq - link.send_base < window {
            let Some((flags, payload)) = link.staged.pop_front() else {
                break;
            };
            let seq = link.next_seq;
            link.next_seq += 1;
            let bytes = encode(self.rank, self.secret, link, Some((seq, flags, &payload)));
            link.inflight.push_back(Segment {
                flags,
                payload,
                sent_at: now,
                sends: 1,
                sacked: false,
            });
            self.stats.datagrams_sent += 1;
            self.out.push_back(Transmit { to: peer, bytes });
        }
    }

    /// Feeds one received datagram (of kind `Data` or `Ack`). Anything malformed, foreign or
    /// truncated is counted in `stats().drops` and otherwise ignored.
    pub fn handle_datagram(&mut self, b: &[u8], now: Micros) {
        if let Err(d) = self.receive(b, now) {
            self.stats.drops.count(d);
        }
    }

    fn receive(&mut self, b: &[u8], now: Micros) -> Result<(), Drop> {
        let p = wire::decode_prefix(b, self.secret, self.rank, self.cfg.job_size)?;
        if p.kind != Kind::Data && p.kind != Kind::Ack {
            return Err(Drop::Kind);
        }
        if b.len() < HEADER_LEN {
            return Err(Drop::Truncated);
        }
        let (seq, ack, sack) = (
            wire::u32_at(b, 16),
            wire::u32_at(b, 20),
            wire::u64_at(b, 24),
        );
        let payload = &b[HEADER_LEN..];
        let flags_ok = match p.kind {
            Kind::Data => p.flags & !(FIRST | LAST) == 0,
            _ => p.flags == 0 && seq == 0 && payload.is_empty(),
        };
        if !flags_ok {
            return Err(Drop::Field);
        }
        self.stats.datagrams_received += 1;
        self.on_ack(p.src, ack, sack);
        if p.kind == Kind::Data {
            self.on_data(p.src, seq, p.flags, payload, now);
        }
        self.pump(p.src, now);
        self.retime(p.src);
        Ok(())
    }

    fn on_ack(&mut self, peer: Proc, ack: u32, sack: u64) {
        let rto = self.cfg.rto_initial;
        let link = Self::link(&mut self.links, peer, rto);
        let ack = wire::unwrap_seq(link.send_base, ack);
        if ack > link.next_seq {
            self.stats.protocol_errors += 1;
            return;
        }
        if ack < link.send_base {
            return; // older than what we know: reordered acknowledgement
        }
        if ack > link.send_base {
            link.inflight.drain(..(ack - link.send_base) as usize);
            link.send_base = ack;
            link.rto = rto;
        }
        for i in 0..64 {
            if sack & (1 << i) != 0 {
                let idx = (1 + i) as usize; // datagram ack + 1 + i
                if let Some(s) = link.inflight.get_mut(idx) {
                    s.sacked = true;
                }
            }
        }
    }

    fn on_data(&mut self, peer: Proc, seq: u32, flags: u8, payload: &[u8], now: Micros) {
        let window = self.cfg.window as u64;
        let ack_delay = self.cfg.ack_delay;
        let link = Self::link(&mut self.links, peer, self.cfg.rto_initial);
        let s = wire::unwrap_seq(link.recv_next, seq);
        if s < link.recv_next || link.reorder.contains_key(&s) {
            // The sender missed our acknowledgement: repeat it now.
            self.stats.duplicates += 1;
            link.ack_due = Some(now);
            return;
        }
        if s >= link.recv_next + window {
            self.stats.beyond_window += 1;
            return;
        }
        let in_order = s == link.recv_next;
        link.reorder.insert(s, (flags, payload.to_vec()));
        let mut delivered = Vec::new();
        let mut errors = 0;
        while let Some((flags, payload)) = link.reorder.remove(&link.recv_next) {
            link.recv_next += 1;
            if flags & FIRST != 0 {
                if link.partial.is_some() {
                    errors += 1; // a FIRST inside a message: drop the unfinished one
                }
                link.partial = Some(payload);
            } else if let Some(m) = link.partial.as_mut() {
                m.extend_from_slice(&payload);
            } else {
                errors += 1; // a continuation without its FIRST
                continue;
            }
            if flags & LAST != 0 {
                delivered.push(link.partial.take().unwrap_or_default());
            }
        }
        // A gap tells the sender at once what is missing; in-order data may wait for a ride,
        // unless a quarter of the window is unacknowledged (a sender streaming small
        // messages would otherwise stall on a full window once per `ack_delay`).
        let behind = link.recv_next.saturating_sub(link.acked) >= (window / 4).max(8);
        let due = if in_order && !behind {
            now + ack_delay
        } else {
            now
        };
        link.ack_due = Some(link.ack_due.map_or(due, |d| d.min(due)));
        self.stats.protocol_errors += errors;
        for msg in delivered {
            self.stats.messages_delivered += 1;
            self.stats.bytes_delivered += msg.len() as u64;
            self.events.push_back(Event::Delivered { from: peer, msg });
        }
    }

    /// Fires what is due at `now`: retransmissions (with backoff) and delayed acknowledgements.
    pub fn handle_timeout(&mut self, now: Micros) {
        let due: Vec<Proc> = self
            .timers
            .iter()
            .take_while(|&&(t, _)| t <= now)
            .map(|&(_, p)| p)
            .collect();
        for peer in due {
            self.timeout_link(peer, now);
            self.retime(peer);
        }
    }

    /// Re-indexes `peer`'s deadline after its link changed.
    fn retime(&mut self, peer: Proc) {
        let Some(link) = self.links.get_mut(&peer) else {
            return;
        };
        let new = link.next_deadline();
        let old = std::mem::replace(&mut link.deadline, new);
        if old != new {
            if let Some(t) = old {
                self.timers.remove(&(t, peer));
            }
            if let Some(t) = new {
                self.timers.insert((t, peer));
            }
        }
    }

    fn timeout_link(&mut self, peer: Proc, now: Micros) {
        let (rank, secret, max_retries, rto_max) = (
            self.rank,
            self.secret,
            self.cfg.max_retries,
            self.cfg.rto_max,
        );
        let Some(link) = self.links.get_mut(&peer) else {
            return;
        };
        let mut resent = Vec::new();
        for i in 0..link.inflight.len() {
            let s = &link.inflight[i];
            if s.sacked || s.sent_at + link.rto > now {
                continue;
            }
            if s.sends > max_retries {
                link.unreachable = true;
                link.inflight.clear();
                link.staged.clear();
                link.send_base = link.next_seq;
                self.events.push_back(Event::Unreachable { peer });
                resent.clear();
                break;
            }
            resent.push(i);
        }
        let any = !resent.is_empty();
        for i in resent {
            let seq = link.send_base + i as u64;
            let (flags, payload) = (link.inflight[i].flags, link.inflight[i].payload.clone());
            let bytes = encode(rank, secret, link, Some((seq, flags, &payload)));
            let s = &mut link.inflight[i];
            s.sent_at = now;
            s.sends += 1;
            self.stats.retransmits += 1;
            self.stats.datagrams_sent += 1;
            self.out.push_back(Transmit { to: peer, bytes });
        }
        if any {
            link.rto = (link.rto * 2).min(rto_max);
        }
        if link.ack_due.is_some_and(|d| d <= now) {
            let bytes = encode(rank, secret, link, None);
            self.stats.acks_sent += 1;
            self.out.push_back(Transmit { to: peer, bytes });
        }
    }

    /// When [`Reliable::handle_timeout`] must next be called, if anything is pending.
    pub fn poll_timeout(&self) -> Option<Micros> {
        self.timers.first().map(|&(t, _)| t)
    }

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }
}

/// A `Data` datagram (with `data`) or a standalone `Ack`, carrying `link`'s receive state; the
/// pending acknowledgement rides on it.
fn encode(rank: Proc, secret: u64, link: &mut Link, data: Option<(u64, u8, &[u8])>) -> Vec<u8> {
    let (kind, seq, flags, payload) = match data {
        Some((seq, flags, p)) => (Kind::Data, seq as u32, flags, p),
        None => (Kind::Ack, 0, 0, &[][..]),
    };
    let mut b = Vec::with_capacity(HEADER_LEN + payload.len());
    wire::encode_prefix(&mut b, kind, flags, rank, secret);
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&(link.recv_next as u32).to_le_bytes());
    b.extend_from_slice(&link.sack().to_le_bytes());
    b.extend_from_slice(payload);
    link.ack_due = None;
    link.acked = link.recv_next;
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: u64 = 0x5eed;

    fn cfg() -> Config {
        Config {
            max_datagram: HEADER_LEN + 10,
            window: 4,
            ..Config::new(2)
        }
    }

    fn drain(r: &mut Reliable) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| r.poll_transmit().map(|t| t.bytes)).collect()
    }

    fn delivered(r: &mut Reliable) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| r.poll_event())
            .filter_map(|e| match e {
                Event::Delivered { msg, .. } => Some(msg),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_large_message_is_segmented_and_reassembled() {
        let (mut a, mut b) = (
            Reliable::new(0, SECRET, cfg()),
            Reliable::new(1, SECRET, cfg()),
        );
        let msg: Vec<u8> = (0..35u8).collect();
        assert_eq!(a.send(1, &msg, 0), Ok(true));
        let dgs = drain(&mut a);
        assert_eq!(dgs.len(), 4); // 10 + 10 + 10 + 5, all within the window of 4
        assert_eq!(dgs[0][2], FIRST);
        assert_eq!(dgs[3][2], LAST);
        for d in dgs.iter().rev() {
            b.handle_datagram(d, 0); // reversed: reassembled only once all are in
        }
        assert_eq!(delivered(&mut b), vec![msg]);
        assert_eq!(b.stats().drops.total(), 0);
    }

    #[test]
    fn a_full_window_is_no_room_and_acks_open_it() {
        let (mut a, mut b) = (
            Reliable::new(0, SECRET, cfg()),
            Reliable::new(1, SECRET, cfg()),
        );
        for i in 0..4u8 {
            assert_eq!(a.send(1, &[i], 0), Ok(true));
        }
        assert_eq!(a.send(1, &[9], 0), Ok(false));
        assert_eq!(a.stats().no_room, 1);
        assert_eq!(a.in_flight(1), 4);
        for d in drain(&mut a) {
            b.handle_datagram(&d, 0);
        }
        assert_eq!(delivered(&mut b), vec![vec![0], vec![1], vec![2], vec![3]]);
        assert_eq!(b.poll_timeout(), Some(cfg().ack_delay));
        b.handle_timeout(cfg().ack_delay);
        for d in drain(&mut b) {
            a.handle_datagram(&d, 2000);
        }
        assert_eq!(a.in_flight(1), 0);
        assert_eq!(a.send(1, &[9], 2000), Ok(true));
    }

    #[test]
    fn lost_datagrams_are_retransmitted_with_backoff_then_the_peer_is_unreachable() {
        let c = Config {
            max_retries: 3,
            ..cfg()
        };
        let mut a = Reliable::new(0, SECRET, c.clone());
        a.send(1, b"x", 0).unwrap();
        assert_eq!(drain(&mut a).len(), 1);
        let mut t = 0;
        let mut gaps = Vec::new();
        while let Some(d) = a.poll_timeout() {
            gaps.push(d - t);
            t = d;
            a.handle_timeout(t);
            drain(&mut a);
        }
        let r = c.rto_initial;
        assert_eq!(gaps, vec![r, 2 * r, 4 * r, 8 * r]);
        assert_eq!(a.stats().retransmits, 3);
        assert_eq!(a.poll_event(), Some(Event::Unreachable { peer: 1 }));
        assert_eq!(a.send(1, b"y", t), Err(PeerUnreachable(1)));
    }

    #[test]
    fn duplicates_are_delivered_once_and_reacknowledged() {
        let (mut a, mut b) = (
            Reliable::new(0, SECRET, cfg()),
            Reliable::new(1, SECRET, cfg()),
        );
        a.send(1, b"once", 0).unwrap();
        let d = drain(&mut a).remove(0);
        b.handle_datagram(&d, 0);
        b.handle_datagram(&d, 0);
        assert_eq!(delivered(&mut b), vec![b"once".to_vec()]);
        assert_eq!(b.stats().duplicates, 1);
        assert_eq!(b.poll_timeout(), Some(0)); // the duplicate asks for an ack now
    }

    #[test]
    fn selective_acks_spare_received_datagrams() {
        let (mut a, mut b) = (
            Reliable::new(0, SECRET, cfg()),
            Reliable::new(1, SECRET, cfg()),
        );
        for i in 0..3u8 {
            a.send(1, &[i], 0).unwrap();
        }
        let d = drain(&mut a);
        b.handle_datagram(&d[1], 0); // 0 lost, 1 and 2 arrive: gap, ack at once
        b.handle_datagram(&d[2], 0);
        b.handle_timeout(0);
        let acks = drain(&mut b);
        assert_eq!(acks.len(), 1);
        assert_eq!(wire::u64_at(&acks[0], 24), 0b11);
        a.handle_datagram(&acks[0], 10);
        a.handle_timeout(cfg().rto_initial);
        let re = drain(&mut a);
        assert_eq!(re.len(), 1, "only datagram 0 goes again");
        b.handle_datagram(&re[0], 30_000);
        assert_eq!(delivered(&mut b), vec![vec![0], vec![1], vec![2]]);
    }

    #[test]
    fn sequence_numbers_wrap_on_the_wire() {
        let (mut a, mut b) = (
            Reliable::new(0, SECRET, cfg()),
            Reliable::new(1, SECRET, cfg()),
        );
        let start = (1u64 << 32) - 5;
        a.start_at(1, start);
        b.start_at(0, start);
        let mut got = Vec::new();
        for i in 0..40u8 {
            assert_eq!(a.send(1, &[i; 15], u64::from(i)), Ok(true)); // two segments each
            let mut dgs = drain(&mut a);
            dgs.reverse(); // each message's segments out of order
            for d in dgs {
                b.handle_datagram(&d, u64::from(i));
            }
            b.handle_timeout(u64::from(i) + cfg().ack_delay);
            for d in drain(&mut b) {
                a.handle_datagram(&d, u64::from(i) + cfg().ack_delay);
            }
            assert_eq!(
                a.in_flight(1),
                0,
                "message {i} acknowledged across the wrap"
            );
            got.extend(delivered(&mut b));
        }
        assert_eq!(got, (0..40u8).map(|i| vec![i; 15]).collect::<Vec<_>>());
        assert_eq!(b.stats().duplicates + b.stats().beyond_window, 0);
    }

    #[test]
    fn malformed_and_foreign_datagrams_are_counted_not_acted_on() {
        let (mut a, mut b) = (
            Reliable::new(0, SECRET, cfg()),
            Reliable::new(1, SECRET, cfg()),
        );
        a.send(1, b"hi", 0).unwrap();
        let d = drain(&mut a).remove(0);
        let mut wrong = d.clone();
        wrong[8] ^= 1;
        b.handle_datagram(&wrong, 0);
        b.handle_datagram(&d[..20], 0);
        let mut flags = d.clone();
        flags[2] = 0x80;
        b.handle_datagram(&flags, 0);
        let mut hs = d.clone();
        hs[1] = Kind::Req as u8;
        b.handle_datagram(&hs, 0);
        let s = b.stats();
        assert_eq!(
            (
                s.drops.secret,
                s.drops.truncated,
                s.drops.field,
                s.drops.kind
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(s.datagrams_received, 0);
        assert!(delivered(&mut b).is_empty());
    }
}
