//! When a peer gets a connection, and when it loses it: the policies as one pure machine,
//! [`Policy`], generic over the message type `M` it may hold.
//!
//! - `static`: every peer is asked for during MPI_Init ([`Policy::init`]).
//! - `ondemand`: the first message to a peer asks for its connection; messages wait in a FIFO
//!   queue until it is up and then go first, in order (MPI's non-overtaking holds). A
//!   connection the peer opens is simply taken. Receiving never asks for one.
//! - `partial`: peers at distance ±2^k are asked for during MPI_Init, the rest on demand.
//! - `adaptive`: messages go over the datagram channel, counted per peer; the message that
//!   reaches `threshold_msgs` (or `threshold_bytes`) asks for a connection, and traffic keeps
//!   flowing over datagrams until it is up. Then new messages wait until every datagram to
//!   that peer is acknowledged ([`Policy::datagrams_drained`]), so nothing sent over the
//!   connection can overtake them. A connection unused for `idle` is closed.
//!
//! Under every policy a budget of `max_open` connections (open, opening or closing) holds:
//! asking for one more first closes the least recently used open one (eviction) and waits for
//! that close. Peers' requests go through [`Policy::may_accept`], which holds them back while
//! room is made (within limits that rule out deadlock and starvation); a transport that takes
//! them anyway gets a soft budget (a peer-opened connection over budget evicts at once). Our
//! own request that waited `hold_max` for room is opened over budget too (the close making
//! room needs a peer that may not be making progress). A connection being closed keeps later
//! messages queued until [`Policy::closed`], again
//! so that nothing overtakes what is still in the old connection. Idle closing is adaptive's
//! only.
//!
//! Driving it: after every call, take all of [`Policy::poll_action`] and carry the actions
//! out before the next [`Policy::send`]; a `Flush` holds messages that must leave before any
//! later one.
//!
//! Invariants: `open_now` counts peers in `Opening`, `Open` and `Closing` and never exceeds
//! `max_open` for connections we asked for; a peer's queue is non-empty only while it is
//! `Wanted`, `Opening`, `Closing`, or `Open` but not yet switched; `wanted` lists exactly the
//! `Wanted` peers, oldest first.

use super::Micros;
use super::Proc;
use std::collections::{BTreeMap, VecDeque};
use std::str::FromStr;

/// FERRITE_CONN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Static,
    OnDemand,
    Partial,
    Adaptive,
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Kind, String> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "static" => Kind::Static,
            "ondemand" | "on-demand" => Kind::OnDemand,
            "partial" => Kind::Partial,
            "adaptive" => Kind::Adaptive,
            _ => {
                return Err(format!(
                "FERRITE_CONN={s:?}: unknown policy (known: static, ondemand, partial, adaptive)"
            ))
            }
        })
    }
}

/// FERRITE_CONN_SETUP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    Ud,
    Cm,
}

impl FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Mechanism, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ud" => Ok(Mechanism::Ud),
            "cm" => Ok(Mechanism::Cm),
            _ => Err(format!(
                "FERRITE_CONN_SETUP={s:?}: unknown mechanism (known: ud, cm)"
            )),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub kind: Kind,
    pub threshold_msgs: u64,
    /// 0: messages only.
    pub threshold_bytes: u64,
    pub max_open: usize,
    /// 0: never close for idleness.
    pub idle: Micros,
    /// Longest a peer's request may be held back for room ([`Policy::may_accept`]); past it
    /// the request is taken over budget. Keep it well under the handshake's give-up time.
    pub hold_max: Micros,
    /// Adaptive under the budget: a connection used within this long is not evicted to make
    /// room for another peer that crossed the threshold; that peer stays on the datagram
    /// channel (and asks again after another threshold's worth). 0: plain LRU eviction.
    pub residency: Micros,
}

/// FERRITE_CONN_RESIDENCY_MS's default (100), in microseconds.
pub const RESIDENCY: Micros = 100_000;

impl Config {
    /// From the knobs' values; `max_open == 0` means [`max_from_fd_limit`]`(nofile)`.
    pub fn from_knobs(
        conn: &str,
        threshold: u64,
        max_open: usize,
        idle_ms: u64,
        nofile: u64,
    ) -> Result<Config, String> {
        Ok(Config {
            kind: conn.parse()?,
            threshold_msgs: threshold.max(1),
            threshold_bytes: 0,
            max_open: if max_open == 0 {
                max_from_fd_limit(nofile)
            } else {
                max_open
            },
            idle: idle_ms.saturating_mul(1000),
            hold_max: 1_000_000,
            residency: RESIDENCY,
        })
    }
}

/// The default connection budget for a soft open-file limit: half of it, less a reserve for
/// the rest of the process (shm segments, PMI, epoll, the user's files), at least 1.
pub fn max_from_fd_limit(nofile: u64) -> usize {
    (nofile / 2).saturating_sub(32).clamp(1, usize::MAX as u64) as usize
}

/// Why a connection was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenCause {
    Init = 0,
    FirstMessage = 1,
    Threshold = 2,
    /// The peer opened it.
    Peer = 3,
}

/// Why a connection was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseCause {
    Eviction = 0,
    Idle = 1,
    /// The peer closed it, or it broke.
    Peer = 2,
}

/// Every decision, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Connections asked for, by [`OpenCause`].
    pub requested: [u64; 4],
    /// Connections that came up, by the cause they were asked for.
    pub opened: [u64; 4],
    /// By [`CloseCause`].
    pub closed: [u64; 3],
    pub failed: u64,
    /// Connections that took us over the budget: peers' (see [`Policy::may_accept`]) and ours
    /// that waited `hold_max` for room.
    pub over_budget: u64,
    /// Adaptive: threshold crossings that got no connection because every open one was in
    /// use (see `Config::residency`); the peer's traffic stayed on datagrams.
    pub kept_on_datagrams: u64,
    pub open_now: u64,
    pub open_peak: u64,
    /// The budget (`Config::max_open`).
    pub max_open: u64,
    /// Messages that had to wait in a queue.
    pub queued: u64,
    pub datagram_msgs: u64,
    pub datagram_bytes: u64,
    pub connection_msgs: u64,
    pub connection_bytes: u64,
}

impl Counters {
    pub fn requested(&self, c: OpenCause) -> u64 {
        self.requested[c as usize]
    }
    pub fn opened(&self, c: OpenCause) -> u64 {
        self.opened[c as usize]
    }
    pub fn closed(&self, c: CloseCause) -> u64 {
        self.closed[c as usize]
    }
}

/// Where a message goes now.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<M> {
    Datagram(M),
    Connection(M),
    /// Kept in the peer's queue; it comes back in an [`Action::Flush`] or [`Action::Failed`].
    Queued,
}

/// What the driver must do.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<M> {
    /// Set up a connection to `peer` (with the chosen mechanism); report `connected` or `failed`.
    Open { peer: Proc, cause: OpenCause },
    /// Close the connection to `peer` once what was sent on it is out; report `closed`.
    Close { peer: Proc, cause: CloseCause },
    /// Send these queued messages to `peer`, in order, before any later one, by `via`.
    Flush { peer: Proc, via: Via, msgs: Vec<M> },
    /// The connection to `peer` could not be set up: complete these with an error.
    Failed { peer: Proc, msgs: Vec<M> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Datagram,
    Connection,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// No connection (adaptive: traffic on the datagram channel).
    None,
    /// Waiting for room under the budget.
    Wanted(OpenCause),
    Opening(OpenCause),
    /// Up. `switched` is false while adaptive traffic still drains from the datagram channel.
    Open {
        switched: bool,
    },
    Closing,
}

struct Peer<M> {
    state: State,
    /// Messages and bytes sent over datagrams since the last connection (adaptive).
    msgs: u64,
    bytes: u64,
    last_used: Micros,
    /// Since when it is `Wanted` (waiting for room).
    wanted_at: Micros,
    queue: VecDeque<M>,
}

impl<M> Peer<M> {
    /// An open connection with nothing waiting to go on it may be closed for idleness.
    fn may_idle(&self) -> bool {
        matches!(self.state, State::Open { .. }) && self.queue.is_empty()
    }
}

/// The connection policy of one process.
pub struct Policy<M> {
    rank: Proc,
    size: u32,
    cfg: Config,
    peers: BTreeMap<Proc, Peer<M>>,
    wanted: VecDeque<Proc>,
    /// Peers whose requests [`Policy::may_accept`] holds back, since when.
    held: BTreeMap<Proc, Micros>,
    /// Peers we wanted ourselves when `may_accept` gave their request our slot, and why.
    reserved_from: BTreeMap<Proc, OpenCause>,
    actions: VecDeque<Action<M>>,
    counters: Counters,
}

impl<M> Policy<M> {
    pub fn new(rank: Proc, size: u32, cfg: Config) -> Policy<M> {
        assert!(cfg.max_open >= 1 && rank < size);
        Policy {
            rank,
            size,
            peers: BTreeMap::new(),
            wanted: VecDeque::new(),
            held: BTreeMap::new(),
            reserved_from: BTreeMap::new(),
            actions: VecDeque::new(),
            counters: Counters {
                max_open: cfg.max_open.try_into().unwrap_or(u64::MAX),
                ..Counters::default()
            },
            cfg,
        }
    }

    fn peer(&mut self, p: Proc) -> &mut Peer<M> {
        self.peers.entry(p).or_insert(Peer {
            state: State::None,
            msgs: 0,
            bytes: 0,
            last_used: 0,
            wanted_at: 0,
            queue: VecDeque::new(),
        })
    }

    /// The peers MPI_Init connects to: all (static), those at distance ±2^k (partial), none.
    pub fn init_peers(&self) -> Vec<Proc> {
        let (r, n) = (self.rank as u64, self.size as u64);
        let mut v: Vec<Proc> = match self.cfg.kind {
            Kind::Static => (0..self.size).filter(|&p| p != self.rank).collect(),
            Kind::Partial => (0..)
                .map(|k| 1u64 << k)
                .take_while(|&d| d < n)
                .flat_map(|d| [(r + d) % n, (r + n - d) % n])
                .map(|p| p as Proc)
                .collect(),
            Kind::OnDemand | Kind::Adaptive => Vec::new(),
        };
        v.sort_unstable();
        v.dedup();
        v
    }

    /// MPI_Init: asks for the connections of [`Policy::init_peers`].
    pub fn init(&mut self, now: Micros) {
        for p in self.init_peers() {
            self.want(p, OpenCause::Init, now);
        }
    }

    /// Asks for a connection to `p`, evicting the least recently used one if over budget.
    fn want(&mut self, p: Proc, cause: OpenCause, now: Micros) {
        if self.counters.open_now as usize >= self.cfg.max_open {
            if self.cfg.kind == Kind::Adaptive && cause == OpenCause::Threshold {
                match self.lru(p, Some(now)) {
                    Some(q) => self.close(q, CloseCause::Eviction),
                    None if !self.any_closing() => return self.keep_on_datagrams(p),
                    None => {} // a slot is on its way
                }
            } else {
                self.evict_lru(p);
            }
        }
        self.counters.requested[cause as usize] += 1;
        if (self.counters.open_now as usize) < self.cfg.max_open {
            self.start_open(p, cause, now);
        } else {
            let peer = self.peer(p);
            peer.state = State::Wanted(cause);
            peer.wanted_at = now;
            self.wanted.push_back(p);
        }
    }

    fn start_open(&mut self, p: Proc, cause: OpenCause, _now: Micros) {
        self.peer(p).state = State::Opening(cause);
        self.counters.open_now += 1;
        self.counters.open_peak = self.counters.open_peak.max(self.counters.open_now);
        self.actions.push_back(Action::Open { peer: p, cause });
    }

    /// Closes the least recently used open connection other than `except`, if there is one.
    fn evict_lru(&mut self, except: Proc) {
        if let Some(q) = self.lru(except, None) {
            self.close(q, CloseCause::Eviction);
        }
    }

    /// The least recently used open connection other than `except`; with `cold_at`, only if
    /// it was not used within `residency` before that time.
    fn lru(&self, except: Proc, cold_at: Option<Micros>) -> Option<Proc> {
        let residency = self.cfg.residency;
        self.peers
            .iter()
            .filter(|(&q, s)| q != except && matches!(s.state, State::Open { .. }))
            .min_by_key(|(&q, s)| (s.last_used, q))
            .filter(|(_, s)| cold_at.is_none_or(|t| s.last_used + residency <= t))
            .map(|(&q, _)| q)
    }

    fn any_closing(&self) -> bool {
        self.peers.values().any(|s| s.state == State::Closing)
    }

    /// Adaptive, no room: every open connection is in use, so evicting one would only have it
    /// asked for again soon (with more busy peers than the budget, LRU eviction closed and
    /// reopened a connection every threshold's worth of messages). `p`'s traffic stays on the
    /// datagram channel, which carries it as well, and asks again after another threshold.
    fn keep_on_datagrams(&mut self, p: Proc) {
        let peer = self.peer(p);
        peer.state = State::None;
        peer.msgs = 0;
        peer.bytes = 0;
        self.counters.kept_on_datagrams += 1;
        self.flush(p, Via::Datagram);
    }

    fn close(&mut self, p: Proc, cause: CloseCause) {
        self.peer(p).state = State::Closing;
        self.counters.closed[cause as usize] += 1;
        self.actions.push_back(Action::Close { peer: p, cause });
    }

    /// Where the message `msg` (of `bytes` bytes) to `peer` goes now.
    pub fn send(&mut self, peer: Proc, msg: M, bytes: usize, now: Micros) -> Route<M> {
        let adaptive = self.cfg.kind == Kind::Adaptive;
        let (tm, tb) = (self.cfg.threshold_msgs, self.cfg.threshold_bytes);
        let p = self.peer(peer);
        p.last_used = now;
        let state = p.state;
        let queue_empty = p.queue.is_empty();
        let route = match state {
            State::Open { switched: true } if queue_empty => Route::Connection(msg),
            State::None if adaptive => {
                p.msgs += 1;
                p.bytes += bytes as u64;
                if p.msgs >= tm || (tb > 0 && p.bytes >= tb) {
                    self.want(peer, OpenCause::Threshold, now);
                }
                Route::Datagram(msg)
            }
            State::Opening(_) | State::Wanted(_) if adaptive && queue_empty => Route::Datagram(msg),
            State::None => {
                self.want(peer, OpenCause::FirstMessage, now);
                self.peer(peer).queue.push_back(msg);
                Route::Queued
            }
            _ => {
                p.queue.push_back(msg);
                Route::Queued
            }
        };
        match &route {
            Route::Datagram(_) => {
                self.counters.datagram_msgs += 1;
                self.counters.datagram_bytes += bytes as u64;
            }
            Route::Connection(_) => {
                self.counters.connection_msgs += 1;
                self.counters.connection_bytes += bytes as u64;
            }
            Route::Queued => self.counters.queued += 1,
        }
        route
    }

    /// A message from `peer` arrived (on either path): the connection is in use.
    pub fn received(&mut self, peer: Proc, now: Micros) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.last_used = now;
        }
    }

    /// The connection to `peer` is up (we asked for it, or the peer opened it). `datagrams_in_
    /// flight`: how many datagrams to `peer` are not yet acknowledged (adaptive waits for 0).
    /// While an old connection to `peer` is closing, the driver reports its [`Policy::closed`]
    /// before a new one's `connected` (one connection per peer at a time).
    pub fn connected(&mut self, peer: Proc, datagrams_in_flight: usize, now: Micros) {
        let adaptive = self.cfg.kind == Kind::Adaptive;
        self.held.remove(&peer);
        self.reserved_from.remove(&peer);
        let state = self.peer(peer).state;
        let cause = match state {
            State::Opening(c) => c,
            State::Open { .. } | State::Closing => return,
            State::Wanted(_) | State::None => {
                self.wanted.retain(|&q| q != peer);
                self.counters.open_now += 1;
                self.counters.open_peak = self.counters.open_peak.max(self.counters.open_now);
                if self.counters.open_now as usize > self.cfg.max_open {
                    self.counters.over_budget += 1;
                }
                OpenCause::Peer
            }
        };
        self.counters.opened[cause as usize] += 1;
        let switched = !adaptive || datagrams_in_flight == 0;
        let p = self.peer(peer);
        p.state = State::Open { switched };
        p.last_used = now;
        p.msgs = 0;
        p.bytes = 0;
        if switched {
            self.flush(peer, Via::Connection);
        }
        // A connection the peer opened may take us over budget: make room.
        if self.counters.open_now as usize > self.cfg.max_open {
            self.evict_lru(peer);
        }
        self.admit_wanted(now);
    }

    /// Whether a connection `peer` asks for may be set up now. `true` reserves its slot (the
    /// handshake then ends in [`Policy::connected`] or [`Policy::failed`], or the transport calls
    /// [`Policy::release`] if it dropped the request after all). `false` means "not yet": the
    /// transport holds the request back (drops the `ud` request, which the peer repeats; leaves
    /// the socket in the listen backlog) and asks again later, while the least recently used
    /// open connection, closed here, makes room. When nothing can be closed (every slot is still
    /// opening) the request is taken over budget if it comes from a higher rank than one we
    /// are connecting to ourselves, so processes cannot wait on each other in a cycle; and a
    /// request held back for `hold_max` is taken over budget, so none starves (the peer would
    /// give up). [`Counters::over_budget`] counts those.
    pub fn may_accept(&mut self, peer: Proc, now: Micros) -> bool {
        let p = self.peer(peer);
        if matches!(
            p.state,
            State::Opening(_) | State::Open { .. } | State::Closing
        ) {
            return true; // its slot is already counted
        }
        let since = *self.held.entry(peer).or_insert(now);
        let patience_left = now < since + self.cfg.hold_max;
        if (self.counters.open_now as usize) >= self.cfg.max_open && patience_left {
            if self.peers.values().any(|s| s.state == State::Closing) {
                return false; // room is on its way
            }
            let evictable = self
                .peers
                .iter()
                .any(|(&q, s)| q != peer && matches!(s.state, State::Open { .. }));
            if evictable {
                self.evict_lru(peer);
                return false;
            }
            // Every slot is still opening. Slots we answer for complete on their own, but our
            // own requests may be held back by peers that wait for us in turn. Taking the
            // request when it comes from a higher rank than one we wait for breaks every such
            // cycle: around a cycle some process's requester outranks its target.
            let lowest_target = self
                .peers
                .iter()
                .filter(|(_, s)| matches!(s.state, State::Opening(c) if c != OpenCause::Peer))
                .map(|(&q, _)| q)
                .min();
            if lowest_target.is_none_or(|t| peer <= t) {
                return false;
            }
        }
        self.held.remove(&peer);
        if (self.counters.open_now as usize) >= self.cfg.max_open {
            self.counters.over_budget += 1;
        }
        self.wanted.retain(|&q| q != peer);
        self.counters.requested[OpenCause::Peer as usize] += 1;
        if let State::Wanted(c) = self.peer(peer).state {
            self.reserved_from.insert(peer, c);
        }
        self.peer(peer).state = State::Opening(OpenCause::Peer);
        self.counters.open_now += 1;
        self.counters.open_peak = self.counters.open_peak.max(self.counters.open_now);
        true
    }

    /// Gives back a slot [`Policy::may_accept`] reserved for a request that was dropped after
    /// all (a stale duplicate, say).
    pub fn release(&mut self, peer: Proc, now: Micros) {
        if self.peer(peer).state == State::Opening(OpenCause::Peer) {
            self.peer_attempt_over(peer, now);
        }
    }

    /// The peer's attempt, whose slot we hold, will not complete: give the slot back; if we
    /// wanted a connection ourselves (or messages wait for one), ask for ours.
    fn peer_attempt_over(&mut self, peer: Proc, now: Micros) {
        let adaptive = self.cfg.kind == Kind::Adaptive;
        let prior = self.reserved_from.remove(&peer);
        let p = self.peer(peer);
        p.state = State::None;
        let waiting = !p.queue.is_empty();
        self.counters.open_now -= 1;
        if let Some(cause) = prior {
            self.want(peer, cause, now);
        } else if waiting && adaptive {
            self.flush(peer, Via::Datagram);
        } else if waiting {
            self.want(peer, OpenCause::FirstMessage, now);
        }
        self.admit_wanted(now);
    }

    /// The closing connection to `peer` is gone and a new one, which the peer opened while it
    /// closed, is up: `closed` and `connected` at once, the new connection taking the old one's
    /// slot (no other connection can take it in between).
    pub fn replaced(&mut self, peer: Proc, datagrams_in_flight: usize, now: Micros) {
        let p = self.peer(peer);
        if p.state == State::Closing {
            p.state = State::None;
            self.counters.open_now -= 1;
        }
        self.connected(peer, datagrams_in_flight, now);
    }

    /// Adaptive: every datagram to `peer` is acknowledged; a connection waiting for that takes
    /// over now.
    pub fn datagrams_drained(&mut self, peer: Proc) {
        if let Some(p) = self.peers.get_mut(&peer) {
            if p.state == (State::Open { switched: false }) {
                p.state = State::Open { switched: true };
                self.flush(peer, Via::Connection);
            }
        }
    }

    fn flush(&mut self, peer: Proc, via: Via) {
        let p = self.peer(peer);
        if !p.queue.is_empty() {
            let msgs: Vec<M> = p.queue.drain(..).collect();
            self.actions.push_back(Action::Flush { peer, via, msgs });
        }
    }

    /// The peer started closing the connection (its close request arrived): stop sending on
    /// it; later messages wait for [`Policy::closed`].
    pub fn peer_closing(&mut self, peer: Proc) {
        if let Some(p) = self.peers.get_mut(&peer) {
            if matches!(p.state, State::Open { .. }) {
                p.state = State::Closing;
                self.counters.closed[CloseCause::Peer as usize] += 1;
            }
        }
    }

    /// Setting up the connection to `peer` failed.
    pub fn failed(&mut self, peer: Proc, now: Micros) {
        let p = self.peer(peer);
        let State::Opening(cause) = p.state else {
            return;
        };
        if cause == OpenCause::Peer {
            self.counters.failed += 1;
            self.peer_attempt_over(peer, now);
            return;
        }
        p.state = State::None;
        p.msgs = 0; // adaptive: another threshold's worth of traffic before trying again
        p.bytes = 0;
        let msgs: Vec<M> = p.queue.drain(..).collect();
        self.counters.failed += 1;
        self.counters.open_now -= 1;
        if !msgs.is_empty() {
            self.actions.push_back(Action::Failed { peer, msgs });
        }
        self.admit_wanted(now);
    }

    /// The connection to `peer` is gone: we closed it (after [`Action::Close`]) and what was in
    /// it is out, or the peer closed it or it broke.
    pub fn closed(&mut self, peer: Proc, now: Micros) {
        let adaptive = self.cfg.kind == Kind::Adaptive;
        let p = self.peer(peer);
        match p.state {
            State::Closing => {}
            State::Open { .. } => self.counters.closed[CloseCause::Peer as usize] += 1,
            _ => return,
        }
        let p = self.peer(peer);
        p.state = State::None;
        p.msgs = 0;
        p.bytes = 0;
        let waiting = !p.queue.is_empty();
        self.counters.open_now -= 1;
        if adaptive {
            self.flush(peer, Via::Datagram);
        } else if waiting {
            self.want(peer, OpenCause::FirstMessage, now);
        }
        self.admit_wanted(now);
    }

    /// Opens wanted connections while the budget has room.
    fn admit_wanted(&mut self, now: Micros) {
        while (self.counters.open_now as usize) < self.cfg.max_open {
            let Some(p) = self.wanted.pop_front() else {
                break;
            };
            if let State::Wanted(cause) = self.peer(p).state {
                self.start_open(p, cause, now);
            }
        }
        if !self.wanted.is_empty() && !self.any_closing() {
            let first = self.wanted[0];
            // Still no room: make some by closing the least recently used (adaptive: one not
            // in use; else the wanted peers stay on datagrams until `hold_max`).
            let cold_at = (self.cfg.kind == Kind::Adaptive).then_some(now);
            if let Some(q) = self.lru(first, cold_at) {
                self.close(q, CloseCause::Eviction);
            }
        }
    }

    /// Opens connections that waited `hold_max` for room over budget (the close that was to
    /// make room needs the peer, which may not make progress now, e.g. busy computing outside
    /// MPI); closes connections idle for `idle` (adaptive).
    pub fn handle_timeout(&mut self, now: Micros) {
        let hold = self.cfg.hold_max;
        let overdue: Vec<Proc> = self
            .wanted
            .iter()
            .copied()
            .filter(|q| self.peers[q].wanted_at + hold <= now)
            .collect();
        for q in overdue {
            self.wanted.retain(|&x| x != q);
            if let State::Wanted(cause) = self.peer(q).state {
                if self.cfg.kind == Kind::Adaptive {
                    // The datagrams carry its traffic: no need to go over the budget.
                    self.keep_on_datagrams(q);
                    continue;
                }
                self.counters.over_budget += 1;
                self.start_open(q, cause, now);
            }
        }
        if self.cfg.kind != Kind::Adaptive || self.cfg.idle == 0 {
            return;
        }
        let idle = self.cfg.idle;
        let due: Vec<Proc> = self
            .peers
            .iter()
            .filter(|(_, s)| s.may_idle() && s.last_used + idle <= now)
            .map(|(&q, _)| q)
            .collect();
        for q in due {
            self.close(q, CloseCause::Idle);
        }
    }

    /// When [`Policy::handle_timeout`] must next run.
    pub fn poll_timeout(&self) -> Option<Micros> {
        let overdue = self
            .wanted
            .iter()
            .map(|q| self.peers[q].wanted_at + self.cfg.hold_max)
            .min();
        if self.cfg.kind != Kind::Adaptive || self.cfg.idle == 0 {
            return overdue;
        }
        let idle = self
            .peers
            .values()
            .filter(|s| s.may_idle())
            .map(|s| s.last_used + self.cfg.idle)
            .min();
        overdue.into_iter().chain(idle).min()
    }

    pub fn poll_action(&mut self) -> Option<Action<M>> {
        self.actions.pop_front()
    }

    /// Whether a connection to `peer` is being set up (by us or, its slot reserved, the peer).
    pub fn opening(&self, peer: Proc) -> bool {
        self.peers
            .get(&peer)
            .is_some_and(|p| matches!(p.state, State::Opening(_)))
    }

    /// Whether messages to `peer` go over its connection now.
    pub fn is_open(&self, peer: Proc) -> bool {
        self.peers
            .get(&peer)
            .is_some_and(|p| p.state == State::Open { switched: true })
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: Kind) -> Config {
        Config {
            kind,
            threshold_msgs: 16,
            threshold_bytes: 0,
            max_open: 100,
            idle: 1_000_000,
            hold_max: 1_000_000,
            residency: 0,
        }
    }

    fn actions(p: &mut Policy<u32>) -> Vec<Action<u32>> {
        std::iter::from_fn(|| p.poll_action()).collect()
    }

    #[test]
    fn knob_values_parse() {
        use crate::runtime::config::knob;
        assert_eq!(
            knob("FERRITE_CONN_SETUP").default.parse(),
            Ok(Mechanism::Cm)
        );
        for k in [
            "FERRITE_CONN_THRESHOLD",
            "FERRITE_CONN_IDLE_MS",
            "FERRITE_CONN_MAX",
        ] {
            assert!(knob(k).default.parse::<u64>().is_ok(), "{k}");
        }
        let live = crate::runtime::config::knob("FERRITE_CONN").default;
        assert_eq!(live.parse(), Ok(Kind::OnDemand));
        let e = "sometimes".parse::<Kind>().unwrap_err();
        assert!(e.contains("\"sometimes\"") && e.contains("adaptive"), "{e}");
        assert!("CM".parse::<Mechanism>().is_ok() && "tcp".parse::<Mechanism>().is_err());
        let c = Config::from_knobs("adaptive", 16, 0, 30_000, 1024).unwrap();
        assert_eq!((c.max_open, c.idle), (480, 30_000_000));
        let residency_ms: u64 = knob("FERRITE_CONN_RESIDENCY_MS").default.parse().unwrap();
        assert_eq!(residency_ms * 1000, RESIDENCY);
        assert_eq!(max_from_fd_limit(10), 1);
    }

    #[test]
    fn static_and_partial_choose_their_init_peers() {
        let st: Policy<u32> = Policy::new(3, 6, cfg(Kind::Static));
        assert_eq!(st.init_peers(), vec![0, 1, 2, 4, 5]);
        let pa: Policy<u32> = Policy::new(0, 16, cfg(Kind::Partial));
        assert_eq!(pa.init_peers(), vec![1, 2, 4, 8, 12, 14, 15]);
        let pa: Policy<u32> = Policy::new(5, 1024, cfg(Kind::Partial));
        assert!(pa.init_peers().len() <= 2 * 10);
        let od: Policy<u32> = Policy::new(0, 16, cfg(Kind::OnDemand));
        assert!(od.init_peers().is_empty());
        let mut st: Policy<u32> = Policy::new(0, 4, cfg(Kind::Static));
        st.init(0);
        assert_eq!(actions(&mut st).len(), 3);
        assert_eq!(st.counters().requested(OpenCause::Init), 3);
    }

    #[test]
    fn ondemand_queues_fifo_until_up_and_receiving_opens_nothing() {
        let mut p: Policy<u32> = Policy::new(0, 4, cfg(Kind::OnDemand));
        p.received(2, 0);
        assert!(actions(&mut p).is_empty());
        assert_eq!(p.send(1, 10, 8, 0), Route::Queued);
        assert_eq!(p.send(1, 11, 8, 0), Route::Queued);
        assert_eq!(
            actions(&mut p),
            vec![Action::Open {
                peer: 1,
                cause: OpenCause::FirstMessage
            }]
        );
        p.connected(1, 0, 5);
        assert_eq!(
            actions(&mut p),
            vec![Action::Flush {
                peer: 1,
                via: Via::Connection,
                msgs: vec![10, 11]
            }]
        );
        assert_eq!(p.send(1, 12, 8, 6), Route::Connection(12));
        assert_eq!(p.counters().opened(OpenCause::FirstMessage), 1);
        // A peer-opened connection is counted as such.
        p.connected(3, 0, 7);
        assert_eq!(p.counters().opened(OpenCause::Peer), 1);
        assert_eq!(p.counters().open_now, 2);
    }

    #[test]
    fn adaptive_opens_at_the_threshold_and_switches_only_after_the_datagrams_drain() {
        let mut p: Policy<u32> = Policy::new(0, 4, cfg(Kind::Adaptive));
        for m in 0..15 {
            assert_eq!(p.send(1, m, 100, m as u64), Route::Datagram(m));
        }
        assert!(
            actions(&mut p).is_empty(),
            "15 messages stay below the threshold of 16"
        );
        assert_eq!(p.send(1, 15, 100, 15), Route::Datagram(15));
        assert_eq!(
            actions(&mut p),
            vec![Action::Open {
                peer: 1,
                cause: OpenCause::Threshold
            }]
        );
        // Until it is up, traffic keeps flowing over datagrams.
        assert_eq!(p.send(1, 16, 100, 16), Route::Datagram(16));
        // Up, but 3 datagrams are unacknowledged: new messages wait for them.
        p.connected(1, 3, 20);
        assert!(actions(&mut p).is_empty());
        assert_eq!(p.send(1, 17, 100, 21), Route::Queued);
        assert_eq!(p.send(1, 18, 100, 22), Route::Queued);
        p.datagrams_drained(1);
        assert_eq!(
            actions(&mut p),
            vec![Action::Flush {
                peer: 1,
                via: Via::Connection,
                msgs: vec![17, 18]
            }]
        );
        assert_eq!(p.send(1, 19, 100, 23), Route::Connection(19));
        let c = p.counters();
        assert_eq!((c.datagram_msgs, c.queued, c.connection_msgs), (17, 2, 1));
        assert_eq!(c.opened(OpenCause::Threshold), 1);
        // A byte threshold opens too.
        let mut b: Policy<u32> = Policy::new(
            0,
            4,
            Config {
                threshold_bytes: 1000,
                ..cfg(Kind::Adaptive)
            },
        );
        assert_eq!(b.send(2, 0, 999, 0), Route::Datagram(0));
        assert!(actions(&mut b).is_empty());
        assert_eq!(b.send(2, 1, 1, 0), Route::Datagram(1));
        assert_eq!(actions(&mut b).len(), 1);
    }

    #[test]
    fn adaptive_closes_idle_connections_and_returns_to_datagrams_in_order() {
        let mut p: Policy<u32> = Policy::new(0, 4, cfg(Kind::Adaptive));
        p.connected(2, 0, 0); // opened by the peer
        p.connected(3, 0, 0);
        p.received(3, 600_000);
        assert_eq!(p.poll_timeout(), Some(1_000_000));
        p.handle_timeout(999_999);
        assert!(actions(&mut p).is_empty());
        p.handle_timeout(1_000_000);
        assert_eq!(
            actions(&mut p),
            vec![Action::Close {
                peer: 2,
                cause: CloseCause::Idle
            }]
        );
        // While it closes, messages wait; then they go by datagram, in order.
        assert_eq!(p.send(2, 7, 1, 1_000_001), Route::Queued);
        p.closed(2, 1_000_002);
        assert_eq!(
            actions(&mut p),
            vec![Action::Flush {
                peer: 2,
                via: Via::Datagram,
                msgs: vec![7]
            }]
        );
        assert_eq!(p.send(2, 8, 1, 1_000_003), Route::Datagram(8));
        assert_eq!(p.poll_timeout(), Some(1_600_000)); // peer 3 was used later
        let c = p.counters();
        assert_eq!((c.closed(CloseCause::Idle), c.open_now), (1, 1));
    }

    #[test]
    fn a_budget_evicts_the_least_recently_used_connection() {
        let mut p: Policy<u32> = Policy::new(
            0,
            8,
            Config {
                max_open: 2,
                ..cfg(Kind::OnDemand)
            },
        );
        for (t, peer) in [(0, 1), (1, 2)] {
            assert_eq!(p.send(peer, peer, 1, t), Route::Queued);
            p.connected(peer, 0, t);
        }
        actions(&mut p);
        assert_eq!(p.send(1, 10, 1, 5), Route::Connection(10)); // 1 is now the most recent
        assert_eq!(p.send(3, 30, 1, 6), Route::Queued);
        assert_eq!(
            actions(&mut p),
            vec![Action::Close {
                peer: 2,
                cause: CloseCause::Eviction
            }]
        );
        assert_eq!(p.counters().open_now, 2, "3 waits for 2's slot");
        p.closed(2, 7);
        assert_eq!(
            actions(&mut p),
            vec![Action::Open {
                peer: 3,
                cause: OpenCause::FirstMessage
            }]
        );
        p.connected(3, 0, 8);
        assert_eq!(
            actions(&mut p),
            vec![Action::Flush {
                peer: 3,
                via: Via::Connection,
                msgs: vec![30]
            }]
        );
        let c = p.counters();
        assert_eq!((c.closed(CloseCause::Eviction), c.open_peak), (1, 2));
        // A connection the peer opens over budget evicts too.
        p.connected(5, 0, 9);
        assert_eq!(
            actions(&mut p),
            vec![Action::Close {
                peer: 1,
                cause: CloseCause::Eviction
            }]
        );
    }

    /// Adaptive under a budget: a peer crossing the threshold while every open connection is
    /// in use stays on datagrams (no eviction, no thrash); once one has been unused for the
    /// residency, it is evicted for the next crossing.
    #[test]
    fn adaptive_keeps_busy_connections_and_sends_the_extra_peer_over_datagrams() {
        let mut p: Policy<u32> = Policy::new(
            0,
            8,
            Config {
                max_open: 2,
                threshold_msgs: 2,
                residency: 100,
                ..cfg(Kind::Adaptive)
            },
        );
        p.connected(1, 0, 0);
        p.connected(2, 0, 0);
        let mut t = 10;
        // Peers 1 and 2 busy, peer 3 crossing its threshold again and again.
        for round in 0..10 {
            for peer in [1, 2] {
                assert_eq!(p.send(peer, round, 4, t), Route::Connection(round));
            }
            assert_eq!(p.send(3, round, 4, t), Route::Datagram(round));
            t += 10;
        }
        assert!(
            actions(&mut p).is_empty(),
            "nothing evicted, nothing opened"
        );
        let c = p.counters();
        assert_eq!(
            (c.kept_on_datagrams, c.closed(CloseCause::Eviction)),
            (5, 0)
        );
        assert_eq!(c.open_now, 2);
        // Peer 2 falls silent for the residency: 3's next crossing evicts it.
        t += 100;
        p.send(1, 99, 4, t);
        p.send(3, 99, 4, t);
        assert_eq!(p.send(3, 100, 4, t), Route::Datagram(100));
        assert_eq!(
            actions(&mut p),
            vec![Action::Close {
                peer: 2,
                cause: CloseCause::Eviction
            }]
        );
        // 3 waits for that slot, its traffic still on datagrams.
        assert_eq!(p.send(3, 101, 4, t), Route::Datagram(101));
        p.closed(2, t + 1);
        assert_eq!(
            actions(&mut p),
            vec![Action::Open {
                peer: 3,
                cause: OpenCause::Threshold
            }]
        );
        // With plain LRU (residency 0) the first crossing evicts a busy connection.
        let mut lru: Policy<u32> = Policy::new(
            0,
            8,
            Config {
                max_open: 2,
                threshold_msgs: 2,
                ..cfg(Kind::Adaptive)
            },
        );
        lru.connected(1, 0, 0);
        lru.connected(2, 0, 0);
        lru.send(1, 0, 4, 1);
        lru.send(3, 0, 4, 2);
        lru.send(3, 1, 4, 3);
        assert_eq!(
            actions(&mut lru),
            vec![Action::Close {
                peer: 2,
                cause: CloseCause::Eviction
            }]
        );
    }

    /// Adaptive: a peer waiting for room that does not come within `hold_max` goes back to
    /// datagrams instead of opening over the budget.
    #[test]
    fn adaptive_wanted_peers_fall_back_to_datagrams_not_over_budget() {
        let mut p: Policy<u32> = Policy::new(
            0,
            8,
            Config {
                max_open: 1,
                threshold_msgs: 1,
                hold_max: 50,
                ..cfg(Kind::Adaptive)
            },
        );
        p.connected(1, 0, 0);
        p.send(1, 0, 4, 1);
        assert_eq!(p.send(2, 0, 4, 2), Route::Datagram(0));
        // Residency 0: 1 is evicted; its close does not come (the peer is busy elsewhere).
        assert_eq!(actions(&mut p).len(), 1);
        assert_eq!(p.send(2, 1, 4, 3), Route::Datagram(1));
        p.handle_timeout(60);
        assert!(actions(&mut p).is_empty());
        let c = p.counters();
        assert_eq!((c.over_budget, c.kept_on_datagrams, c.open_now), (0, 1, 1));
        assert_eq!(p.send(2, 2, 4, 61), Route::Datagram(2));
    }

    #[test]
    fn requests_are_held_back_for_room_but_not_for_ever() {
        let mut p: Policy<u32> = Policy::new(
            0,
            8,
            Config {
                max_open: 1,
                hold_max: 100,
                ..cfg(Kind::OnDemand)
            },
        );
        p.connected(1, 0, 0);
        assert!(!p.may_accept(2, 10), "full: hold back and make room");
        assert_eq!(
            actions(&mut p),
            vec![Action::Close {
                peer: 1,
                cause: CloseCause::Eviction
            }]
        );
        assert!(!p.may_accept(2, 20), "room is on its way");
        assert!(actions(&mut p).is_empty());
        p.closed(1, 30);
        assert!(p.may_accept(2, 40), "room: the slot is reserved");
        assert_eq!(p.counters().open_now, 1);
        // The request was stale after all: the slot goes back.
        p.release(2, 41);
        assert_eq!(p.counters().open_now, 0);
        // Our own attempt to 3 uses the budget and nothing can be evicted: a request from a
        // lower rank than 3 waits (at most hold_max), one from a higher rank is taken.
        p.send(3, 30, 1, 50);
        actions(&mut p);
        assert!(!p.may_accept(2, 60));
        assert!(p.may_accept(4, 61));
        assert!(!p.may_accept(2, 159));
        assert!(p.may_accept(2, 160));
        let c = p.counters();
        assert_eq!((c.open_now, c.over_budget), (3, 2));
        // A reserved slot whose handshake fails while our messages wait asks for ours.
        assert_eq!(p.send(2, 20, 1, 170), Route::Queued);
        p.failed(2, 180);
        assert_eq!(p.counters().failed, 1);
        assert!(actions(&mut p)
            .iter()
            .all(|a| !matches!(a, Action::Failed { .. })));
        assert_eq!(p.counters().requested(OpenCause::FirstMessage), 2);
    }

    #[test]
    fn a_failed_setup_returns_the_waiting_messages() {
        let mut p: Policy<u32> = Policy::new(0, 4, cfg(Kind::OnDemand));
        p.send(1, 1, 1, 0);
        p.send(1, 2, 1, 0);
        actions(&mut p);
        p.failed(1, 1);
        assert_eq!(
            actions(&mut p),
            vec![Action::Failed {
                peer: 1,
                msgs: vec![1, 2]
            }]
        );
        assert_eq!((p.counters().failed, p.counters().open_now), (1, 0));
    }

    /// All-to-all among 16 processes, each with a budget of 4 connections and connections that
    /// come up and close at once: every message arrives, in order per pair, and no process
    /// ever holds more than 4 (the `FERRITE_CONN_MAX=4` all-to-all case).
    #[test]
    fn all_to_all_under_a_budget_of_four_delivers_everything_in_order() {
        const N: u32 = 16;
        for kind in [Kind::OnDemand, Kind::Adaptive] {
            let mut ps: Vec<Policy<u32>> = (0..N)
                .map(|r| {
                    Policy::new(
                        r,
                        N,
                        Config {
                            max_open: 4,
                            threshold_msgs: 2,
                            ..cfg(kind)
                        },
                    )
                })
                .collect();
            let mut got: BTreeMap<(Proc, Proc), Vec<u32>> = BTreeMap::new();
            let mut pending: VecDeque<(Proc, Action<u32>)> = VecDeque::new();
            let mut now = 0;
            for round in 0..5u32 {
                for a in 0..N {
                    for b in (0..N).filter(|&b| b != a) {
                        now += 1;
                        match ps[a as usize].send(b, round, 4, now) {
                            Route::Datagram(m) | Route::Connection(m) => {
                                got.entry((a, b)).or_default().push(m)
                            }
                            Route::Queued => {}
                        }
                        while let Some(x) = ps[a as usize].poll_action() {
                            pending.push_back((a, x));
                        }
                        // The "network": connections come up (both ends) and close at once.
                        while let Some((who, act)) = pending.pop_front() {
                            match act {
                                Action::Open { peer, .. } => {
                                    ps[who as usize].connected(peer, 0, now);
                                    ps[peer as usize].connected(who, 0, now);
                                }
                                Action::Close { peer, .. } => {
                                    ps[who as usize].closed(peer, now);
                                    ps[peer as usize].closed(who, now);
                                }
                                Action::Flush { peer, msgs, .. } => {
                                    got.entry((who, peer)).or_default().extend(msgs)
                                }
                                Action::Failed { .. } => unreachable!(),
                            }
                            for (i, p) in ps.iter_mut().enumerate() {
                                while let Some(x) = p.poll_action() {
                                    pending.push_back((i as Proc, x));
                                }
                                assert!(p.counters().open_now <= 5, "{kind:?}: budget");
                            }
                        }
                    }
                }
            }
            for a in 0..N {
                for b in (0..N).filter(|&b| b != a) {
                    assert_eq!(
                        got.get(&(a, b)),
                        Some(&(0..5).collect()),
                        "{kind:?} {a}->{b}"
                    );
                }
                assert!(ps[a as usize].counters().open_peak <= 5);
            }
            let ev: u64 = ps
                .iter()
                .map(|p| p.counters().closed(CloseCause::Eviction))
                .sum();
            assert!(ev > 0, "{kind:?}: the budget was never exercised");
        }
    }
}
