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
//! - retransmission (RFC 6298 timing, RFC 6675-style selective recovery): the sender measures
//!   round trips on datagrams sent once (Karn's rule: an acknowledgement of a datagram sent
//!   twice is ambiguous), keeps SRTT and RTTVAR and sets RTO = SRTT + max(ack_delay,
//!   4 RTTVAR), at least `rto_min` and at most `rto_max` (`rto_initial` before the first
//!   measurement). One timer per peer runs while anything is unacknowledged, restarted when the
//!   cumulative acknowledgement moves. When it fires only the oldest unacknowledged datagram
//!   is sent again and the RTO doubles (kept doubled until a new measurement); each later
//!   acknowledgement that moves on but stops short of what was in flight at the timeout
//!   resends the next datagrams sent before it, twice as many each time (unless it covers
//!   datagrams sent once: they were late, not lost, and recovery ends). A datagram with
//!   `DUPTHRESH` datagrams after it selectively acknowledged is resent at once (once). So a
//!   receiver that is merely descheduled costs one duplicate per (doubling) timeout, not a
//!   window; after `max_retries` timeouts in a row with nothing new acknowledged the peer is
//!   reported unreachable, within `(max_retries + 1) * rto_max`;
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
/// Datagrams selectively acknowledged after an unacknowledged one that make it count as lost
/// (TCP's duplicate-acknowledgement threshold).
pub const DUPTHRESH: usize = 3;
/// Most doublings of the RTO (`rto_max` caps it long before).
const MAX_BACKOFF: u32 = 20;

#[derive(Clone, Debug)]
pub struct Config {
    /// Ranks in the job; a datagram from a rank outside is dropped.
    pub job_size: u32,
    /// Largest datagram, header included (1472: UDP over a 1500-byte Ethernet MTU).
    pub max_datagram: usize,
    /// Most unacknowledged datagrams per peer (at most 2^20); also how far ahead a receiver
    /// keeps out-of-order datagrams, so both ends use the same value.
    pub window: u32,
    /// The retransmission timeout before a round trip to the peer was measured.
    pub rto_initial: Micros,
    /// Floor of a measured RTO: above the ack delay and the few milliseconds an oversubscribed
    /// host may keep a receiver from running, so neither alone causes a retransmission.
    pub rto_min: Micros,
    /// Ceiling of the RTO, backoff included.
    pub rto_max: Micros,
    /// Timeouts in a row, with nothing new acknowledged, before the peer is declared
    /// unreachable (each resends the oldest datagram once).
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
            rto_min: 10_000,
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
    /// Datagrams sent again, whatever the cause (the two below and recovery after a timeout).
    pub retransmits: u64,
    /// Retransmission timeouts that fired (each resends one datagram).
    pub timeouts: u64,
    /// Datagrams resent because selective acknowledgements showed them missing.
    pub fast_retransmits: u64,
    /// Round trips measured (datagrams sent once and then acknowledged).
    pub rtt_samples: u64,
    pub acks_sent: u64,
    /// `send` answered no room.
    pub no_room: u64,
    pub datagrams_received: u64,
    pub messages_delivered: u64,
    pub bytes_delivered: u64,
    /// Data datagrams received that were already received (a retransmission not needed).
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

/// Loss recovery after a timeout: until `until` is acknowledged, each acknowledgement that
/// moves on resends up to `burst` datagrams last sent before `before` (then twice as many).
struct Recovery {
    until: u64,
    before: Micros,
    burst: u32,
}

/// The state shared with one peer.
///
/// Invariants: `send_base <= next_seq <= send_base + window`; `inflight[i]` is datagram
/// `send_base + i` and `inflight[0]` is never `sacked`; `rtx_at` is `Some` exactly while
/// `inflight` is non-empty; `staged` is non-empty only while `inflight` is full; every key of
/// `reorder` is in `recv_next + 1 .. recv_next + window`; `partial` is `Some` exactly between a
/// FIRST and its LAST segment.
struct Link {
    send_base: u64,
    next_seq: u64,
    inflight: VecDeque<Segment>,
    staged: VecDeque<(u8, Vec<u8>)>,
    /// Smoothed round trip and its mean deviation (RFC 6298), once one was measured.
    srtt: Option<Micros>,
    rttvar: Micros,
    /// Doublings of the RTO since the last measurement (Karn's algorithm keeps them until one).
    backoff: u32,
    /// Timeouts since the peer last acknowledged anything new.
    retries: u32,
    /// When the oldest unacknowledged datagram goes again.
    rtx_at: Option<Micros>,
    recovery: Option<Recovery>,
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
    fn new() -> Link {
        Link {
            send_base: 0,
            next_seq: 0,
            inflight: VecDeque::new(),
            staged: VecDeque::new(),
            srtt: None,
            rttvar: 0,
            backoff: 0,
            retries: 0,
            rtx_at: None,
            recovery: None,
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

    /// The retransmission timeout now: from the measured round trips (RFC 6298, with the
    /// delayed acknowledgement as the clock granularity G), doubled per unanswered timeout.
    fn rto(&self, cfg: &Config) -> Micros {
        let base = match self.srtt {
            None => cfg.rto_initial,
            Some(srtt) => (srtt + (4 * self.rttvar).max(cfg.ack_delay)).max(cfg.rto_min),
        };
        base.saturating_mul(1 << self.backoff).min(cfg.rto_max)
    }

    /// Takes one round-trip measurement `r` (RFC 6298 2.2-2.3) and ends the backoff.
    fn measured(&mut self, r: Micros) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                self.rttvar = (3 * self.rttvar + srtt.abs_diff(r)) / 4;
                self.srtt = Some((7 * srtt + r) / 8);
            }
        }
        self.backoff = 0;
    }

    fn next_deadline(&self) -> Option<Micros> {
        match (self.rtx_at, self.ack_due) {
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
    fn link(links: &mut BTreeMap<Proc, Link>, peer: Proc) -> &mut Link {
        links.entry(peer).or_insert_with(Link::new)
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
        let link = Self::link(&mut self.links, to);
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
        let l = Self::link(&mut self.links, peer);
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
        if link.rtx_at.is_none() && !link.inflight.is_empty() {
            link.rtx_at = Some(now + link.rto(&self.cfg));
        }
    }

    /// Sends `link.inflight[i]` again (with `link`'s acknowledgement riding on it).
    fn resend(&mut self, peer: Proc, i: usize, now: Micros) {
        let Some(link) = self.links.get_mut(&peer) else {
            return;
        };
        let seq = link.send_base + i as u64;
        let s = &mut link.inflight[i];
        s.sent_at = now;
        s.sends += 1;
        let (flags, payload) = (s.flags, std::mem::take(&mut s.payload));
        let bytes = encode(self.rank, self.secret, link, Some((seq, flags, &payload)));
        link.inflight[i].payload = payload;
        self.stats.retransmits += 1;
        self.stats.datagrams_sent += 1;
        self.out.push_back(Transmit { to: peer, bytes });
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
        self.on_ack(p.src, ack, sack, now);
        if p.kind == Kind::Data {
            self.on_data(p.src, seq, p.flags, payload, now);
        }
        self.pump(p.src, now);
        self.retime(p.src);
        Ok(())
    }

    /// Takes the peer's acknowledgement: frees what it covers, measures the round trip,
    /// restarts the timer, and resends what it shows missing (selective recovery).
    fn on_ack(&mut self, peer: Proc, ack: u32, sack: u64, now: Micros) {
        let cfg = &self.cfg;
        let link = Self::link(&mut self.links, peer);
        let ack = wire::unwrap_seq(link.send_base, ack);
        if ack > link.next_seq {
            self.stats.protocol_errors += 1;
            return;
        }
        if ack < link.send_base {
            return; // older than what we know: reordered acknowledgement
        }
        // Karn's rule: only datagrams sent once time a round trip. Any of them is acknowledged
        // no earlier than one round trip after its send; the newest gives the tightest bound.
        let mut newest: Option<Micros> = None;
        let advanced = ack > link.send_base;
        if advanced {
            for s in link.inflight.drain(..(ack - link.send_base) as usize) {
                if s.sends == 1 && !s.sacked {
                    newest = newest.max(Some(s.sent_at));
                }
            }
            link.send_base = ack;
        }
        // Datagrams sent once and not known to have arrived are covered now: they were not
        // lost, only late (the timeout was spurious, or only the oldest was missing).
        let originals = newest.is_some();
        let mut sacked_now = false;
        for i in 0..64 {
            if sack & (1 << i) != 0 {
                // datagram ack + 1 + i
                if let Some(s) = link.inflight.get_mut(1 + i) {
                    if !s.sacked {
                        s.sacked = true;
                        sacked_now = true;
                        if s.sends == 1 {
                            newest = newest.max(Some(s.sent_at));
                        }
                    }
                }
            }
        }
        if let Some(t) = newest {
            link.measured(now.saturating_sub(t));
            self.stats.rtt_samples += 1;
        }
        if advanced || sacked_now {
            link.retries = 0;
        }
        if advanced {
            link.rtx_at = (!link.inflight.is_empty()).then(|| now + link.rto(cfg));
        }
        // After a timeout, each acknowledgement that moves on but stops short of what was in
        // flight then resends the next datagrams sent before it, twice as many each time (so a
        // lost burst takes log2 of its length in round trips), unless it also covers originals
        // (a receiver that was merely slow: the timer and selective acks see to any loss left).
        let mut again: Vec<usize> = Vec::new();
        if let Some(rec) = link.recovery.as_mut() {
            if link.send_base >= rec.until || (advanced && originals) {
                link.recovery = None;
            } else if advanced {
                for (i, s) in link.inflight.iter().enumerate() {
                    if again.len() >= rec.burst as usize || link.send_base + i as u64 >= rec.until {
                        break;
                    }
                    if !s.sacked && s.sent_at < rec.before {
                        again.push(i);
                    }
                }
                rec.burst = (rec.burst * 2).min(cfg.window);
            }
        }
        // A datagram sent once with DUPTHRESH later ones selectively acknowledged is lost.
        let recovered = again.len();
        if sack != 0 {
            let mut above = 0;
            for i in (0..link.inflight.len().min(65)).rev() {
                let s = &link.inflight[i];
                if s.sacked {
                    above += 1;
                } else if above >= DUPTHRESH && s.sends == 1 && !again.contains(&i) {
                    again.push(i);
                }
            }
        }
        self.stats.fast_retransmits += (again.len() - recovered) as u64;
        again.sort_unstable();
        for i in again {
            self.resend(peer, i, now);
        }
    }

    fn on_data(&mut self, peer: Proc, seq: u32, flags: u8, payload: &[u8], now: Micros) {
        let window = self.cfg.window as u64;
        let ack_delay = self.cfg.ack_delay;
        let link = Self::link(&mut self.links, peer);
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
        let had_gap = !link.reorder.is_empty();
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
        // A gap, or a datagram filling one, tells the sender at once what is missing or
        // recovered; in-order data may wait for a ride, unless a quarter of the window is
        // unacknowledged (a sender streaming small messages would otherwise stall on a full
        // window once per `ack_delay`).
        let behind = link.recv_next.saturating_sub(link.acked) >= (window / 4).max(8);
        let due = if in_order && !had_gap && !behind {
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

    /// The peer's timers at `now`: the retransmission timeout (resend the oldest datagram
    /// not selectively acknowledged, double the RTO, start recovery; or give the peer up) and
    /// a delayed acknowledgement.
    fn timeout_link(&mut self, peer: Proc, now: Micros) {
        let Some(link) = self.links.get_mut(&peer) else {
            return;
        };
        if link.rtx_at.is_some_and(|t| t <= now) && link.inflight.is_empty() {
            link.rtx_at = None; // (not reached: the timer stops with the last acknowledgement)
        } else if link.rtx_at.is_some_and(|t| t <= now) {
            if link.retries >= self.cfg.max_retries {
                link.unreachable = true;
                link.inflight.clear();
                link.staged.clear();
                link.send_base = link.next_seq;
                link.rtx_at = None;
                link.recovery = None;
                self.events.push_back(Event::Unreachable { peer });
            } else {
                let oldest = link.inflight.iter().position(|s| !s.sacked).unwrap_or(0);
                link.retries += 1;
                link.backoff = (link.backoff + 1).min(MAX_BACKOFF);
                link.rtx_at = Some(now + link.rto(&self.cfg));
                link.recovery = Some(Recovery {
                    until: link.next_seq,
                    before: now,
                    burst: 2,
                });
                self.stats.timeouts += 1;
                self.resend(peer, oldest, now);
            }
        }
        let Some(link) = self.links.get_mut(&peer) else {
            return;
        };
        if link.ack_due.is_some_and(|d| d <= now) {
            let bytes = encode(self.rank, self.secret, link, None);
            self.stats.acks_sent += 1;
            self.out.push_back(Transmit { to: peer, bytes });
        }
    }

    /// The retransmission timeout towards `peer` now (backoff included), if it was contacted.
    pub fn rto(&self, peer: Proc) -> Option<Micros> {
        self.links.get(&peer).map(|l| l.rto(&self.cfg))
    }

    /// The smoothed round trip to `peer`, once one was measured.
    pub fn srtt(&self, peer: Proc) -> Option<Micros> {
        self.links.get(&peer).and_then(|l| l.srtt)
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

    /// Two machines, 0 sending to 1, over a wire with a fixed one-way `delay` on the virtual
    /// clock. Node 1 does not run before `wakes` (a descheduled receiver: its datagrams and
    /// timers wait); Data datagrams from 0 whose sequence number is in `lose` are lost once.
    struct Duo {
        r: [Reliable; 2],
        wire: BTreeMap<(Micros, u64), (usize, Vec<u8>)>,
        n: u64,
        delay: Micros,
        wakes: Micros,
        lose: BTreeSet<u32>,
        got: Vec<Vec<u8>>,
        unreachable_at: Option<Micros>,
    }

    /// The next event: (time, 0 for an arrival (first at a tie) or 1 for a timer, node, the
    /// arrival's wire key).
    type Next = (Micros, u8, usize, Option<(Micros, u64)>);

    impl Duo {
        fn new(c: Config, delay: Micros) -> Duo {
            Duo {
                r: [
                    Reliable::new(0, SECRET, c.clone()),
                    Reliable::new(1, SECRET, c),
                ],
                wire: BTreeMap::new(),
                n: 0,
                delay,
                wakes: 0,
                lose: BTreeSet::new(),
                got: Vec::new(),
                unreachable_at: None,
            }
        }

        fn send(&mut self, msgs: &[&[u8]], now: Micros) {
            for m in msgs {
                assert_eq!(self.r[0].send(1, m, now), Ok(true));
            }
            self.ship(0, now);
        }

        fn ship(&mut self, from: usize, now: Micros) {
            while let Some(t) = self.r[from].poll_transmit() {
                let data = t.bytes[1] == Kind::Data as u8;
                if from == 0 && data && self.lose.remove(&wire::u32_at(&t.bytes, 16)) {
                    continue;
                }
                let arrives = now + self.delay;
                self.wire.insert((arrives, self.n), (1 - from, t.bytes));
                self.n += 1;
            }
        }

        fn ready(&self, node: usize, t: Micros) -> Micros {
            if node == 1 {
                t.max(self.wakes)
            } else {
                t
            }
        }

        /// Runs until nothing is pending or the next event is after `end`; returns the time
        /// of the last event.
        fn run(&mut self, end: Micros) -> Micros {
            let mut last = 0;
            loop {
                let mut next: Option<Next> = None;
                for (&k, &(to, _)) in &self.wire {
                    let c = (self.ready(to, k.0), 0, to, Some(k));
                    next = Some(next.map_or(c, |n| n.min(c)));
                }
                for i in 0..2 {
                    if let Some(t) = self.r[i].poll_timeout() {
                        let c = (self.ready(i, t), 1, i, None);
                        next = Some(next.map_or(c, |n| n.min(c)));
                    }
                }
                let Some((t, _, node, key)) = next.filter(|n| n.0 <= end) else {
                    return last;
                };
                last = t;
                match key {
                    Some(k) => {
                        let (_, bytes) = self.wire.remove(&k).expect("found");
                        self.r[node].handle_datagram(&bytes, t);
                    }
                    None => self.r[node].handle_timeout(t),
                }
                while let Some(e) = self.r[node].poll_event() {
                    match e {
                        Event::Delivered { msg, .. } => self.got.push(msg),
                        Event::Unreachable { .. } => self.unreachable_at = Some(t),
                    }
                }
                self.ship(node, t);
            }
        }
    }

    fn msgs(n: u8) -> Vec<Vec<u8>> {
        (0..n).map(|i| vec![i; 5]).collect()
    }

    fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
        v.iter().map(Vec::as_slice).collect()
    }

    #[test]
    fn the_rto_follows_measured_round_trips_above_its_floor() {
        let c = Config {
            window: 16,
            ..cfg()
        };
        let mut d = Duo::new(c.clone(), 100);
        let m = msgs(1);
        d.send(&refs(&m), 0);
        d.run(u64::MAX);
        // One round trip: 2 x 100 on the wire + the delayed acknowledgement.
        let rtt = 200 + c.ack_delay;
        assert_eq!(d.r[0].srtt(1), Some(rtt));
        assert_eq!(
            d.r[0].rto(1),
            Some(c.rto_min),
            "a loopback round trip is floored"
        );
        // The receiver is kept from running for 40 ms: the first such round trip times out
        // twice (RTO 10 ms, then 20 ms: the oldest datagram each time), the second datagram,
        // sent once, measures it, which lifts the RTO above it, and the next such round trip
        // costs nothing.
        let m = msgs(2);
        let t = 100_000;
        d.wakes = t + 40_000;
        d.send(&refs(&m), t);
        d.run(u64::MAX);
        assert_eq!(d.r[0].stats().retransmits, 2);
        let slow = 40_000 + 100;
        let rttvar = (3 * (rtt / 2) + (slow - rtt)) / 4;
        let srtt = (7 * rtt + slow) / 8;
        assert_eq!(
            d.r[0].srtt(1),
            Some(srtt),
            "Karn: measured on the datagram sent once"
        );
        assert_eq!(d.r[0].rto(1), Some(srtt + 4 * rttvar));
        assert!(srtt + 4 * rttvar > slow);
        let t = 200_000;
        d.wakes = t + 40_000;
        d.send(&refs(&m), t);
        d.run(u64::MAX);
        assert_eq!(d.r[0].stats().retransmits, 2, "no timeout this time");
        assert_eq!(d.got.len(), 5);
    }

    #[test]
    fn a_descheduled_receiver_costs_one_duplicate_per_timeout_not_a_window() {
        let c = Config {
            window: 16,
            ..cfg()
        };
        let mut d = Duo::new(c.clone(), 100);
        d.wakes = 100_000;
        let m = msgs(16);
        d.send(&refs(&m), 0);
        d.run(u64::MAX);
        assert_eq!(d.got, m);
        // Timeouts at 20 ms and 20 + 40 ms (backoff), each resending the oldest datagram only.
        let (a, b) = (d.r[0].stats(), d.r[1].stats());
        assert_eq!((a.timeouts, a.retransmits, a.fast_retransmits), (2, 2, 0));
        assert_eq!(b.duplicates, 2);
        assert_eq!(a.datagrams_sent, 16 + 2);
        // The acknowledgement also covered datagrams sent once: 100.1 ms measured.
        assert_eq!(d.r[0].srtt(1), Some(100_100));
        assert_eq!(d.r[0].in_flight(1), 0);
    }

    #[test]
    fn karns_rule_takes_no_round_trip_from_a_retransmitted_datagram() {
        let c = cfg();
        let mut d = Duo::new(c.clone(), 100);
        d.wakes = 30_000;
        let m = msgs(1);
        d.send(&refs(&m), 0);
        d.run(u64::MAX);
        assert_eq!(d.r[0].stats().retransmits, 1);
        assert_eq!(d.r[0].srtt(1), None, "the only datagram was sent twice");
        assert_eq!(d.r[0].rto(1), Some(2 * c.rto_initial), "the backoff stays");
        d.send(&refs(&m), 50_000);
        d.run(u64::MAX);
        assert_eq!(d.r[0].stats().rtt_samples, 1);
        assert_eq!(d.r[0].srtt(1), Some(200 + c.ack_delay));
        assert_eq!(
            d.r[0].rto(1),
            Some(c.rto_min),
            "a measurement ends the backoff"
        );
    }

    #[test]
    fn a_datagram_selectively_shown_missing_is_resent_without_a_timeout() {
        let c = Config {
            window: 16,
            ..cfg()
        };
        let mut d = Duo::new(c.clone(), 100);
        d.lose.insert(2);
        let m = msgs(8);
        d.send(&refs(&m), 0);
        let end = d.run(u64::MAX);
        assert_eq!(d.got, m);
        let a = d.r[0].stats();
        assert_eq!((a.timeouts, a.retransmits, a.fast_retransmits), (0, 1, 1));
        assert_eq!(d.r[1].stats().duplicates, 0);
        assert!(end < c.rto_min, "recovered in round trips, at {end}");
    }

    #[test]
    fn after_a_timeout_a_lost_tail_is_resent_in_doubling_rounds_and_only_it() {
        let c = Config {
            window: 16,
            ..cfg()
        };
        let mut d = Duo::new(c.clone(), 100);
        d.lose.extend(2..12);
        let m = msgs(12);
        d.send(&refs(&m), 0);
        d.run(u64::MAX);
        assert_eq!(d.got, m);
        let a = d.r[0].stats();
        // One timeout resends datagram 2; then rounds of 2, 4 and the last 3.
        assert_eq!((a.timeouts, a.retransmits, a.fast_retransmits), (1, 10, 0));
        assert_eq!(d.r[1].stats().duplicates, 0);
    }

    #[test]
    fn a_spurious_timeout_ends_its_recovery_when_originals_are_acknowledged() {
        let c = Config {
            window: 16,
            ..cfg()
        };
        // A slow path (15 ms each way) and one message per millisecond: the RTO before any
        // measurement (20 ms) fires while everything is still on its way.
        let mut d = Duo::new(c.clone(), 15_000);
        let m = msgs(16);
        for (i, x) in m.iter().enumerate() {
            d.send(&[x.as_slice()], i as u64 * 1_000);
        }
        d.run(u64::MAX);
        assert_eq!(d.got, m);
        // The first acknowledgement after the timeout covers datagram 1, sent once: nothing
        // more is resent while the rest of the acknowledgements trickle in one by one.
        let a = d.r[0].stats();
        assert_eq!((a.timeouts, a.retransmits), (1, 1));
        assert_eq!(d.r[1].stats().duplicates, 1);
        assert!(d.r[0].rto(1).unwrap() > 30_000);
    }

    #[test]
    fn a_dead_peer_is_reported_within_the_retry_bound_whatever_the_rtt() {
        let c = Config {
            rto_max: 100_000,
            max_retries: 5,
            ..cfg()
        };
        let mut d = Duo::new(c.clone(), 100);
        // A slow peer first: a large measured round trip.
        d.wakes = 90_000;
        d.send(&refs(&msgs(2)), 0);
        d.run(u64::MAX);
        assert!(d.r[0].rto(1).unwrap() >= 90_000);
        let before = d.r[0].stats().retransmits;
        // Then it dies.
        d.wakes = u64::MAX / 2;
        let t = 1_000_000;
        d.send(&refs(&msgs(2)), t);
        d.run(t + 10_000_000);
        let at = d.unreachable_at.expect("reported");
        assert!(
            at - t <= u64::from(c.max_retries + 1) * c.rto_max,
            "after {}",
            at - t
        );
        assert_eq!(
            d.r[0].stats().retransmits - before,
            u64::from(c.max_retries)
        );
        assert_eq!(d.r[0].send(1, b"z", at), Err(PeerUnreachable(1)));
        assert_eq!(d.r[0].in_flight(1), 0);
    }

    #[test]
    fn a_datagram_filling_a_gap_is_acknowledged_at_once() {
        let (mut a, mut b) = (
            Reliable::new(0, SECRET, cfg()),
            Reliable::new(1, SECRET, cfg()),
        );
        a.send(1, &[0], 0).unwrap();
        a.send(1, &[1], 0).unwrap();
        let d = drain(&mut a);
        b.handle_datagram(&d[1], 5);
        assert_eq!(b.poll_timeout(), Some(5), "a gap: at once");
        b.handle_timeout(5);
        drain(&mut b);
        b.handle_datagram(&d[0], 7);
        assert_eq!(b.poll_timeout(), Some(7), "the gap filled: at once");
        b.handle_timeout(7);
        let ack = drain(&mut b).remove(0);
        assert_eq!(wire::u32_at(&ack, 20), 2);
        assert_eq!(delivered(&mut b), vec![vec![0], vec![1]]);
    }
}
