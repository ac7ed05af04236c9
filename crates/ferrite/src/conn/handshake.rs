//! Connection set-up, as two pure machines: [`Ud`] (request / reply / confirm over the datagram
//! channel) and [`Cm`] (client/server connect/accept; the new socket first carries a hello).
//!
//! Both name an attempt by [`AttemptId`] `(gen, initiator)`. `gen` is a per-pair generation:
//! a new attempt takes one more than the highest generation either side has seen for the pair.
//! Attempts are ordered by `(gen, initiator rank)`, and of two live attempts for one pair the
//! greater survives. When both peers start at once from the same state they pick the same
//! `gen`, so the higher rank's attempt survives and the lower rank answers it and drops its
//! own (the race rule); a newer generation always beats a stale one. Both sides apply the same
//! total order, so they always agree on the survivor.
//!
//! Per peer each machine also keeps a `floor`: the greatest attempt that is over (connected and
//! since closed, failed, or superseded). Messages of attempts at or below the floor are stale
//! and ignored, so a late duplicate can never reopen a finished attempt.

use super::wire::{self, Drop, DropCounts, Kind};
use super::Micros;
use super::Proc;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// One attempt to connect a pair, ordered for the race rule (generation, then rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptId {
    pub gen: u32,
    pub initiator: Proc,
}

/// Timers and retry limits of a handshake.
#[derive(Clone, Debug)]
pub struct Config {
    pub job_size: u32,
    pub rto_initial: Micros,
    pub rto_max: Micros,
    /// cm: how long an accepted socket may stay silent before its hello, and how long a
    /// refused dialer waits for the winning attempt's hello before dialing again. On a host
    /// with many ranks per CPU a peer may take seconds to get to writing its hello.
    pub hello_wait: Micros,
    /// Retransmissions (ud) or reconnections (cm) before giving up on a peer.
    pub max_retries: u32,
}

impl Config {
    pub fn new(job_size: u32) -> Config {
        Config {
            job_size,
            rto_initial: 50_000,
            rto_max: 2_000_000,
            hello_wait: 2_000_000,
            max_retries: 10,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Connected to `peer` by `attempt`; `addr` is the endpoint address the peer sent (ud) or
    /// empty (cm: the socket is the connection).
    Connected {
        peer: Proc,
        attempt: AttemptId,
        addr: Vec<u8>,
    },
    /// Gave up on `peer` after `retries` retransmissions or reconnections.
    Failed { peer: Proc, retries: u32 },
    /// cm only: the connection's socket closed (the peer closed it, or it broke).
    Closed { peer: Proc, attempt: AttemptId },
    /// The peer started a newer attempt while we were connected by `old`: it considers `old`
    /// gone. A `Connected` for the new attempt follows once it completes.
    Superseded { peer: Proc, old: AttemptId },
}

/// Counters of one handshake machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub attempts: u64,
    pub sent: u64,
    pub retries: u64,
    pub connected: u64,
    pub failed: u64,
    /// Our attempt dropped for the peer's greater one.
    pub races_lost: u64,
    /// The peer's attempt refused for our greater one.
    pub races_won: u64,
    pub superseded: u64,
    /// Duplicates and messages of finished or unknown attempts, ignored.
    pub stale: u64,
    /// cm: accepted sockets closed because no hello came in time (strangers, or worse).
    pub silent: u64,
    pub drops: DropCounts,
}

/// What a peer looks like from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerState {
    Idle,
    Connecting,
    Connected(AttemptId),
}

// ---------------------------------------------------------------------------------------------
// ud: request / reply / confirm over datagrams
// ---------------------------------------------------------------------------------------------

/// Body of `Req`, `Reply` and `Confirm` after the 16-byte prefix ([`super::wire`]):
/// ```text
///  16 u32 destination rank
///  20 u32 gen            (the initiator is the source for Req and Confirm, the destination
///                         for Reply)
///  24 u16 address length (at most MAX_ADDR; 0 for Confirm)
///  26     address        (the sender's endpoint address for the connection)
/// ```
pub const UD_HEADER_LEN: usize = 26;
pub const MAX_ADDR: usize = 512;

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub to: Proc,
    pub bytes: Vec<u8>,
}

/// Per-peer ud state.
///
/// Invariants: `Requesting.gen == gen` (we started the newest attempt we know); in `Replied`
/// and `Connected`, `id > floor`; `deadline` is `Some` exactly in `Requesting` and `Replied`
/// and is then in the timer set.
enum UdState {
    Idle,
    /// We sent `Req` (gen, us) and wait for the `Reply`.
    Requesting {
        sends: u32,
        rto: Micros,
    },
    /// We answered the peer's `Req` `id` and wait for its `Confirm`.
    Replied {
        id: AttemptId,
        addr: Vec<u8>,
        sends: u32,
        rto: Micros,
    },
    Connected {
        id: AttemptId,
    },
}

struct UdPeer {
    gen: u32,
    floor: Option<AttemptId>,
    state: UdState,
    deadline: Option<Micros>,
}

/// The `ud` mechanism for all peers of one process.
pub struct Ud {
    rank: Proc,
    secret: u64,
    addr: Vec<u8>,
    cfg: Config,
    peers: BTreeMap<Proc, UdPeer>,
    timers: BTreeSet<(Micros, Proc)>,
    out: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: Stats,
}

impl Ud {
    /// `addr` is this process's endpoint address, handed to every peer in `Req` and `Reply`.
    pub fn new(rank: Proc, secret: u64, addr: Vec<u8>, cfg: Config) -> Ud {
        assert!(addr.len() <= MAX_ADDR);
        Ud {
            rank,
            secret,
            addr,
            cfg,
            peers: BTreeMap::new(),
            timers: BTreeSet::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    fn peer(&mut self, p: Proc) -> &mut UdPeer {
        self.peers.entry(p).or_insert(UdPeer {
            gen: 0,
            floor: None,
            state: UdState::Idle,
            deadline: None,
        })
    }

    fn set_timer(&mut self, p: Proc, at: Option<Micros>) {
        let peer = self.peer(p);
        let old = std::mem::replace(&mut peer.deadline, at);
        if let Some(t) = old {
            self.timers.remove(&(t, p));
        }
        if let Some(t) = at {
            self.timers.insert((t, p));
        }
    }

    fn send(&mut self, to: Proc, kind: Kind, gen: u32, with_addr: bool) {
        let mut b = Vec::with_capacity(UD_HEADER_LEN + self.addr.len());
        wire::encode_prefix(&mut b, kind, 0, self.rank, self.secret);
        b.extend_from_slice(&to.to_le_bytes());
        b.extend_from_slice(&gen.to_le_bytes());
        let addr: &[u8] = if with_addr { &self.addr } else { &[] };
        b.extend_from_slice(&(addr.len() as u16).to_le_bytes());
        b.extend_from_slice(addr);
        self.stats.sent += 1;
        self.out.push_back(Transmit { to, bytes: b });
    }

    /// Starts connecting to `peer` unless connected or an attempt (ours or its) is under way.
    pub fn connect(&mut self, peer: Proc, now: Micros) {
        assert!(
            peer != self.rank && peer < self.cfg.job_size,
            "connect to {peer}"
        );
        let rto = self.cfg.rto_initial;
        let p = self.peer(peer);
        if !matches!(p.state, UdState::Idle) {
            return;
        }
        p.gen += 1;
        p.state = UdState::Requesting { sends: 1, rto };
        let gen = p.gen;
        self.stats.attempts += 1;
        self.send(peer, Kind::Req, gen, true);
        self.set_timer(peer, Some(now + rto));
    }

    /// The connection to `peer` is gone (closed by the policy, or broken), or an attempt is to
    /// be abandoned. Back to idle; the next `connect` starts a newer attempt.
    pub fn close(&mut self, peer: Proc) {
        let me = self.rank;
        let p = self.peer(peer);
        let id = match std::mem::replace(&mut p.state, UdState::Idle) {
            UdState::Idle => return,
            UdState::Requesting { .. } => AttemptId {
                gen: p.gen,
                initiator: me,
            },
            UdState::Replied { id, .. } | UdState::Connected { id } => id,
        };
        p.floor = p.floor.max(Some(id));
        self.set_timer(peer, None);
    }

    /// Traffic of attempt `id` arrived over the new connection itself: the initiator got our
    /// `Reply`, so a lost `Confirm` no longer matters. Completes the attempt if we wait for it.
    pub fn confirm_by_traffic(&mut self, peer: Proc, id: AttemptId) {
        self.complete(peer, id);
    }

    pub fn state(&self, peer: Proc) -> PeerState {
        match self.peers.get(&peer).map(|p| &p.state) {
            None | Some(UdState::Idle) => PeerState::Idle,
            Some(UdState::Connected { id }) => PeerState::Connected(*id),
            Some(_) => PeerState::Connecting,
        }
    }

    /// Feeds one datagram of kind `Req`, `Reply` or `Confirm`; anything else, malformed or
    /// without the job secret is counted in `stats().drops`.
    pub fn handle_datagram(&mut self, b: &[u8], now: Micros) {
        if let Err(d) = self.receive(b, now) {
            self.stats.drops.count(d);
        }
    }

    fn receive(&mut self, b: &[u8], now: Micros) -> Result<(), Drop> {
        let p = wire::decode_prefix(b, self.secret, self.rank, self.cfg.job_size)?;
        if !matches!(p.kind, Kind::Req | Kind::Reply | Kind::Confirm) {
            return Err(Drop::Kind);
        }
        if b.len() < UD_HEADER_LEN {
            return Err(Drop::Truncated);
        }
        if p.flags != 0 {
            return Err(Drop::Field);
        }
        if wire::u32_at(b, 16) != self.rank {
            return Err(Drop::Rank);
        }
        let gen = wire::u32_at(b, 20);
        let len = wire::u16_at(b, 24) as usize;
        if len > MAX_ADDR || (p.kind == Kind::Confirm && len != 0) {
            return Err(Drop::Field);
        }
        if b.len() < UD_HEADER_LEN + len {
            return Err(Drop::Truncated);
        }
        if b.len() > UD_HEADER_LEN + len {
            return Err(Drop::Field);
        }
        let addr = &b[UD_HEADER_LEN..];
        match p.kind {
            Kind::Req => self.on_req(p.src, gen, addr, now),
            Kind::Reply => self.on_reply(p.src, gen, addr),
            _ => self.on_confirm(p.src, gen),
        }
        Ok(())
    }

    /// A `Req` for attempt `(gen, from)`.
    fn on_req(&mut self, from: Proc, gen: u32, addr: &[u8], now: Micros) {
        let me = self.rank;
        let id = AttemptId {
            gen,
            initiator: from,
        };
        let p = self.peer(from);
        if Some(id) <= p.floor {
            self.stats.stale += 1;
            return;
        }
        // Whether `id` beats what we have; `None`: it is the attempt we already answer.
        let wins = match &p.state {
            UdState::Idle => Some(true),
            UdState::Requesting { .. } => {
                let mine = AttemptId {
                    gen: p.gen,
                    initiator: me,
                };
                if id > mine {
                    self.stats.races_lost += 1;
                } else {
                    self.stats.races_won += 1;
                }
                Some(id > mine)
            }
            UdState::Replied { id: cur, .. } if *cur == id => None,
            UdState::Replied { id: cur, .. } | UdState::Connected { id: cur } => Some(id > *cur),
        };
        match wins {
            Some(false) => self.stats.stale += 1,
            None => self.send(from, Kind::Reply, gen, true), // our Reply was lost
            Some(true) => {
                let rto = self.cfg.rto_initial;
                let p = self.peer(from);
                let old = std::mem::replace(
                    &mut p.state,
                    UdState::Replied {
                        id,
                        addr: addr.to_vec(),
                        sends: 1,
                        rto,
                    },
                );
                p.gen = p.gen.max(gen);
                let old_id = match old {
                    UdState::Replied { id, .. } | UdState::Connected { id } => Some(id),
                    _ => None,
                };
                p.floor = p.floor.max(old_id);
                if let UdState::Connected { id: old } = old {
                    self.stats.superseded += 1;
                    self.events.push_back(Event::Superseded { peer: from, old });
                }
                self.send(from, Kind::Reply, gen, true);
                self.set_timer(from, Some(now + rto));
            }
        }
    }

    /// A `Reply` to our attempt `(gen, us)`.
    fn on_reply(&mut self, from: Proc, gen: u32, addr: &[u8]) {
        let me = self.rank;
        let id = AttemptId { gen, initiator: me };
        let p = self.peer(from);
        match p.state {
            UdState::Requesting { .. } if p.gen == gen => {
                p.state = UdState::Connected { id };
                self.stats.connected += 1;
                self.send(from, Kind::Confirm, gen, false);
                self.set_timer(from, None);
                self.events.push_back(Event::Connected {
                    peer: from,
                    attempt: id,
                    addr: addr.to_vec(),
                });
            }
            // Our Confirm was lost and the peer repeats its Reply: confirm again.
            UdState::Connected { id: cur } if cur == id => {
                self.send(from, Kind::Confirm, gen, false)
            }
            _ => self.stats.stale += 1,
        }
    }

    /// A `Confirm` of the peer's attempt `(gen, from)`.
    fn on_confirm(&mut self, from: Proc, gen: u32) {
        let id = AttemptId {
            gen,
            initiator: from,
        };
        if !self.complete(from, id) {
            self.stats.stale += 1;
        }
    }

    /// Completes the peer's attempt `id` we answered; false if that is not what we wait for.
    fn complete(&mut self, peer: Proc, id: AttemptId) -> bool {
        let Some(p) = self.peers.get_mut(&peer) else {
            return false;
        };
        let UdState::Replied { id: cur, addr, .. } = &mut p.state else {
            return false;
        };
        if *cur != id {
            return false;
        }
        let addr = std::mem::take(addr);
        p.state = UdState::Connected { id };
        self.stats.connected += 1;
        self.set_timer(peer, None);
        self.events.push_back(Event::Connected {
            peer,
            attempt: id,
            addr,
        });
        true
    }

    /// Retransmits what is due at `now` (doubling each peer's timeout up to `rto_max`) and gives
    /// up on peers that used all their retries.
    pub fn handle_timeout(&mut self, now: Micros) {
        while let Some(&(t, peer)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            let (max, rto_max, me) = (self.cfg.max_retries, self.cfg.rto_max, self.rank);
            let p = self.peer(peer);
            p.deadline = None;
            let gen = p.gen;
            let (kind, gen, sends, rto, id) = match &mut p.state {
                UdState::Requesting { sends, rto } => {
                    (Kind::Req, gen, sends, rto, AttemptId { gen, initiator: me })
                }
                UdState::Replied { id, sends, rto, .. } => (Kind::Reply, id.gen, sends, rto, *id),
                _ => continue,
            };
            if *sends > max {
                let retries = *sends - 1;
                p.state = UdState::Idle;
                p.floor = p.floor.max(Some(id));
                self.stats.failed += 1;
                self.events.push_back(Event::Failed { peer, retries });
                continue;
            }
            *sends += 1;
            *rto = (*rto * 2).min(rto_max);
            let next = now + *rto;
            self.stats.retries += 1;
            self.send(peer, kind, gen, true);
            self.set_timer(peer, Some(next));
        }
    }

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

// ---------------------------------------------------------------------------------------------
// cm: client/server connect/accept with a hello
// ---------------------------------------------------------------------------------------------

/// A stream socket, as the machine names it to the driver. The machine allocates every id:
/// outgoing ones in [`Action::Connect`], accepted ones in [`Cm::accepted`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SockId(pub u64);

/// What the driver must do for the cm machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Open a socket to `peer`'s listening address; report [`Cm::socket_connected`] or
    /// [`Cm::socket_closed`] (refused, unreachable).
    Connect { sock: SockId, peer: Proc },
    /// Write these bytes (a hello or its answer) on the socket.
    Send { sock: SockId, bytes: Vec<u8> },
    /// Close the socket (report nothing more about it).
    Close { sock: SockId },
}

/// `Hello` (client to server, the first bytes on a new socket) and `HelloAck` (the server's
/// answer), both fixed-size, after the 16-byte prefix ([`super::wire`]):
/// ```text
///  16 u32 destination rank
///  20 u32 gen            (the initiator is the client)
///  24 u8  verdict        Hello: 0; HelloAck: 1 accepted, 2 refused (a greater attempt lives)
///  25 3 bytes zero
/// ```
pub const HELLO_LEN: usize = 28;
const ACCEPTED: u8 = 1;
const REFUSED: u8 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Peer(Proc),
    Sock(SockId),
}

/// Per-peer cm state.
///
/// Invariants: `Dialing.sock` is an `Out` socket of this peer in `socks`; in `Connected`,
/// `id > floor` and `sock` is in `socks`; `deadline` is `Some` exactly in `Backoff` and
/// `Yielded` and is then in the timer set.
enum CmState {
    Idle,
    /// A failed dial; dial again (a newer attempt) when the timer fires.
    Backoff {
        tries: u32,
        rto: Micros,
    },
    /// Our socket for attempt (gen, us) is opening or has sent its hello.
    Dialing {
        sock: SockId,
        tries: u32,
        rto: Micros,
    },
    /// Our attempt was refused for the peer's greater one, whose socket should arrive; if it
    /// does not before the timer, dial again.
    Yielded {
        tries: u32,
        rto: Micros,
    },
    Connected {
        sock: SockId,
        id: AttemptId,
    },
}

struct CmPeer {
    gen: u32,
    floor: Option<AttemptId>,
    state: CmState,
    deadline: Option<Micros>,
}

enum Sock {
    /// Ours, to `peer`, for attempt (gen, us).
    Out { peer: Proc, gen: u32 },
    /// Accepted; its hello has not arrived yet (closed if it does not before `deadline`).
    In { deadline: Micros },
    /// Accepted and carrying the connection to `peer`.
    Up { peer: Proc },
}

/// The `cm` mechanism for all peers of one process.
pub struct Cm {
    rank: Proc,
    secret: u64,
    cfg: Config,
    peers: BTreeMap<Proc, CmPeer>,
    socks: BTreeMap<SockId, Sock>,
    next_sock: u64,
    timers: BTreeSet<(Micros, Key)>,
    actions: VecDeque<Action>,
    events: VecDeque<Event>,
    stats: Stats,
}

impl Cm {
    pub fn new(rank: Proc, secret: u64, cfg: Config) -> Cm {
        Cm {
            rank,
            secret,
            cfg,
            peers: BTreeMap::new(),
            socks: BTreeMap::new(),
            next_sock: 0,
            timers: BTreeSet::new(),
            actions: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    fn peer(&mut self, p: Proc) -> &mut CmPeer {
        self.peers.entry(p).or_insert(CmPeer {
            gen: 0,
            floor: None,
            state: CmState::Idle,
            deadline: None,
        })
    }

    fn set_timer(&mut self, p: Proc, at: Option<Micros>) {
        let peer = self.peer(p);
        if let Some(t) = std::mem::replace(&mut peer.deadline, at) {
            self.timers.remove(&(t, Key::Peer(p)));
        }
        if let Some(t) = at {
            self.timers.insert((t, Key::Peer(p)));
        }
    }

    fn new_sock(&mut self) -> SockId {
        self.next_sock += 1;
        SockId(self.next_sock)
    }

    /// Stops tracking `sock` (the driver already knows it is closed).
    fn forget_sock(&mut self, sock: SockId) {
        if let Some(Sock::In { deadline }) = self.socks.remove(&sock) {
            self.timers.remove(&(deadline, Key::Sock(sock)));
        }
    }

    fn close_sock(&mut self, sock: SockId) {
        self.forget_sock(sock);
        self.actions.push_back(Action::Close { sock });
    }

    fn hello(&self, kind: Kind, to: Proc, gen: u32, verdict: u8) -> Vec<u8> {
        let mut b = Vec::with_capacity(HELLO_LEN);
        wire::encode_prefix(&mut b, kind, 0, self.rank, self.secret);
        b.extend_from_slice(&to.to_le_bytes());
        b.extend_from_slice(&gen.to_le_bytes());
        b.extend_from_slice(&[verdict, 0, 0, 0]);
        b
    }

    /// Opens a socket for a new attempt (gen + 1, us).
    fn dial(&mut self, peer: Proc, tries: u32, rto: Micros) {
        let sock = self.new_sock();
        let p = self.peer(peer);
        p.gen += 1;
        p.state = CmState::Dialing { sock, tries, rto };
        let gen = p.gen;
        self.socks.insert(sock, Sock::Out { peer, gen });
        self.stats.attempts += 1;
        self.actions.push_back(Action::Connect { sock, peer });
    }

    /// Starts connecting to `peer` unless connected or an attempt is under way.
    pub fn connect(&mut self, peer: Proc, _now: Micros) {
        assert!(
            peer != self.rank && peer < self.cfg.job_size,
            "connect to {peer}"
        );
        if matches!(self.peer(peer).state, CmState::Idle) {
            self.dial(peer, 0, self.cfg.rto_initial);
        }
    }

    /// Dials the attempt (gen, us) that another mechanism (`ud`) settled with `peer`, so the
    /// hello names it. When this machine has already seen `gen` for the pair, it dials its
    /// own next attempt instead (newer still, so the peer's machine takes it just the same).
    /// Nothing when an attempt is under way.
    pub fn connect_attempt(&mut self, peer: Proc, gen: u32) {
        let me = self.rank;
        let p = self.peer(peer);
        if !matches!(p.state, CmState::Idle) {
            return;
        }
        let id = AttemptId { gen, initiator: me };
        if gen > p.gen && Some(id) > p.floor {
            p.gen = gen - 1;
        }
        self.dial(peer, 0, self.cfg.rto_initial);
    }

    /// Closes the connection to `peer` (or abandons an attempt) by our decision.
    pub fn close(&mut self, peer: Proc) {
        let me = self.rank;
        let p = self.peer(peer);
        let (sock, id) = match std::mem::replace(&mut p.state, CmState::Idle) {
            CmState::Idle => return,
            CmState::Connected { sock, id } => (Some(sock), id),
            CmState::Dialing { sock, .. } => (
                Some(sock),
                AttemptId {
                    gen: p.gen,
                    initiator: me,
                },
            ),
            _ => (
                None,
                AttemptId {
                    gen: p.gen,
                    initiator: me,
                },
            ),
        };
        p.floor = p.floor.max(Some(id));
        self.set_timer(peer, None);
        if let Some(s) = sock {
            self.close_sock(s);
        }
    }

    /// Hands the connection to `peer` over to the driver, which closes it with its own close
    /// protocol (draining what is in flight both ways). The attempt is over for the machine at
    /// once: a newer attempt from either side may start while the old socket still drains.
    /// Returns the connection's socket, if connected.
    pub fn detach(&mut self, peer: Proc) -> Option<SockId> {
        let p = self.peer(peer);
        let CmState::Connected { sock, id } = p.state else {
            return None;
        };
        p.state = CmState::Idle;
        p.floor = p.floor.max(Some(id));
        self.set_timer(peer, None);
        self.socks.remove(&sock);
        Some(sock)
    }

    /// The listening socket accepted a connection: returns its id. Its first bytes must be a
    /// hello (fed to [`Cm::received`]) within `hello_wait`, or it is closed.
    pub fn accepted(&mut self, now: Micros) -> SockId {
        let sock = self.new_sock();
        let deadline = now + self.cfg.hello_wait;
        self.socks.insert(sock, Sock::In { deadline });
        self.timers.insert((deadline, Key::Sock(sock)));
        sock
    }

    /// Our outgoing socket is connected: it says hello.
    pub fn socket_connected(&mut self, sock: SockId, _now: Micros) {
        if let Some(&Sock::Out { peer, gen }) = self.socks.get(&sock) {
            let b = self.hello(Kind::Hello, peer, gen, 0);
            self.stats.sent += 1;
            self.actions.push_back(Action::Send { sock, bytes: b });
        }
    }

    /// The first `HELLO_LEN` bytes that arrived on `sock` (a hello on an accepted socket, its
    /// answer on ours). Anything malformed or foreign closes the socket and is counted.
    pub fn received(&mut self, sock: SockId, b: &[u8], now: Micros) {
        let Some(role) = self.socks.get(&sock) else {
            self.stats.stale += 1;
            return;
        };
        let want = match role {
            Sock::Out { .. } => Kind::HelloAck,
            Sock::In { .. } => Kind::Hello,
            Sock::Up { .. } => {
                self.stats.stale += 1; // connection traffic is not ours
                return;
            }
        };
        match self.decode_hello(b, want) {
            Err(d) => {
                self.stats.drops.count(d);
                match self.socks.get(&sock) {
                    Some(&Sock::Out { peer, .. }) => {
                        self.close_sock(sock);
                        self.attempt_failed(peer, sock, now);
                    }
                    _ => self.close_sock(sock),
                }
            }
            Ok((src, gen, verdict)) => match want {
                Kind::Hello => self.on_hello(sock, src, gen),
                _ => self.on_hello_ack(sock, src, gen, verdict, now),
            },
        }
    }

    fn decode_hello(&self, b: &[u8], want: Kind) -> Result<(Proc, u32, u8), Drop> {
        let p = wire::decode_prefix(b, self.secret, self.rank, self.cfg.job_size)?;
        if p.kind != want {
            return Err(Drop::Kind);
        }
        if b.len() < HELLO_LEN {
            return Err(Drop::Truncated);
        }
        let verdict = b[24];
        let verdict_ok = match want {
            Kind::Hello => verdict == 0,
            _ => verdict == ACCEPTED || verdict == REFUSED,
        };
        if b.len() != HELLO_LEN || p.flags != 0 || b[25..28] != [0, 0, 0] || !verdict_ok {
            return Err(Drop::Field);
        }
        if wire::u32_at(b, 16) != self.rank {
            return Err(Drop::Rank);
        }
        Ok((p.src, wire::u32_at(b, 20), verdict))
    }

    /// A hello for attempt (gen, from) on the accepted socket `sock`.
    fn on_hello(&mut self, sock: SockId, from: Proc, gen: u32) {
        if let Some(Sock::In { deadline }) = self.socks.get(&sock) {
            self.timers.remove(&(*deadline, Key::Sock(sock)));
        }
        let me = self.rank;
        let id = AttemptId {
            gen,
            initiator: from,
        };
        let p = self.peer(from);
        let accept = Some(id) > p.floor
            && match &p.state {
                CmState::Idle | CmState::Backoff { .. } | CmState::Yielded { .. } => true,
                CmState::Dialing { .. } => {
                    let mine = AttemptId {
                        gen: p.gen,
                        initiator: me,
                    };
                    if id > mine {
                        self.stats.races_lost += 1;
                    } else {
                        self.stats.races_won += 1;
                    }
                    id > mine
                }
                CmState::Connected { id: cur, .. } => id > *cur,
            };
        if !accept {
            self.stats.stale += 1;
            let b = self.hello(Kind::HelloAck, from, gen, REFUSED);
            self.actions.push_back(Action::Send { sock, bytes: b });
            self.close_sock(sock);
            return;
        }
        let p = self.peer(from);
        let old = std::mem::replace(&mut p.state, CmState::Connected { sock, id });
        let ours = AttemptId {
            gen: p.gen,
            initiator: me,
        };
        p.gen = p.gen.max(gen);
        let old_sock = match old {
            CmState::Dialing { sock, .. } => {
                p.floor = p.floor.max(Some(ours)); // our attempt lost to `id`
                Some(sock)
            }
            CmState::Connected { sock, id: old } => {
                p.floor = p.floor.max(Some(old));
                self.stats.superseded += 1;
                self.events.push_back(Event::Superseded { peer: from, old });
                Some(sock)
            }
            _ => None,
        };
        self.set_timer(from, None);
        if let Some(s) = old_sock {
            self.close_sock(s);
        }
        self.socks.insert(sock, Sock::Up { peer: from });
        let b = self.hello(Kind::HelloAck, from, gen, ACCEPTED);
        self.stats.sent += 1;
        self.stats.connected += 1;
        self.actions.push_back(Action::Send { sock, bytes: b });
        self.events.push_back(Event::Connected {
            peer: from,
            attempt: id,
            addr: Vec::new(),
        });
    }

    /// The server's answer on our socket `sock`.
    fn on_hello_ack(&mut self, sock: SockId, from: Proc, gen: u32, verdict: u8, now: Micros) {
        let me = self.rank;
        let is_ours = matches!(self.socks.get(&sock), Some(&Sock::Out { peer, gen: g }) if peer == from && g == gen);
        let p = self.peer(from);
        let dialing = matches!(p.state, CmState::Dialing { sock: s, .. } if s == sock);
        if !is_ours || !dialing {
            self.stats.stale += 1;
            self.close_sock(sock);
            return;
        }
        let id = AttemptId { gen, initiator: me };
        if verdict == ACCEPTED {
            p.state = CmState::Connected { sock, id };
            self.socks.insert(sock, Sock::Up { peer: from });
            self.stats.connected += 1;
            self.events.push_back(Event::Connected {
                peer: from,
                attempt: id,
                addr: Vec::new(),
            });
            return;
        }
        // Refused: the peer has a greater attempt, whose hello will reach us.
        let (tries, rto) = match p.state {
            CmState::Dialing { tries, rto, .. } => (tries, rto),
            _ => unreachable!("checked above"),
        };
        p.floor = p.floor.max(Some(id));
        p.state = CmState::Yielded { tries, rto };
        let wait = self.cfg.hello_wait;
        self.set_timer(from, Some(now + wait));
        self.close_sock(sock);
    }

    /// Our dial `sock` to `peer` failed (the socket is closed): retry later, or give up.
    fn attempt_failed(&mut self, peer: Proc, sock: SockId, now: Micros) {
        self.forget_sock(sock);
        let (max, rto_max, me) = (self.cfg.max_retries, self.cfg.rto_max, self.rank);
        let p = self.peer(peer);
        let CmState::Dialing {
            sock: s,
            tries,
            rto,
        } = p.state
        else {
            return;
        };
        if s != sock {
            return;
        }
        p.floor = p.floor.max(Some(AttemptId {
            gen: p.gen,
            initiator: me,
        }));
        if tries >= max {
            p.state = CmState::Idle;
            self.stats.failed += 1;
            self.events.push_back(Event::Failed {
                peer,
                retries: tries,
            });
            return;
        }
        p.state = CmState::Backoff {
            tries: tries + 1,
            rto: (rto * 2).min(rto_max),
        };
        // Skewed by rank: two ranks whose dials failed together (each out of descriptors
        // but for its own dial's) do not dial together again.
        let skew = rto / 4 * u64::from(me % 4);
        self.set_timer(peer, Some(now + rto + skew));
    }

    /// `sock` closed under us (refused, reset, closed by the peer).
    pub fn socket_closed(&mut self, sock: SockId, now: Micros) {
        match self.socks.get(&sock) {
            None => {}
            Some(Sock::In { .. }) => self.forget_sock(sock),
            Some(&Sock::Out { peer, .. }) => self.attempt_failed(peer, sock, now),
            Some(&Sock::Up { peer }) => {
                self.socks.remove(&sock);
                let p = self.peer(peer);
                if let CmState::Connected { sock: s, id } = p.state {
                    if s == sock {
                        p.state = CmState::Idle;
                        p.floor = p.floor.max(Some(id));
                        self.events.push_back(Event::Closed { peer, attempt: id });
                    }
                }
            }
        }
    }

    /// Fires what is due: dials again after a backoff or an unanswered yield; closes accepted
    /// sockets that never said hello.
    pub fn handle_timeout(&mut self, now: Micros) {
        while let Some(&(t, key)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            match key {
                Key::Sock(sock) => {
                    self.stats.silent += 1;
                    self.socks.remove(&sock);
                    self.actions.push_back(Action::Close { sock });
                }
                Key::Peer(peer) => {
                    let max = self.cfg.max_retries;
                    let p = self.peer(peer);
                    p.deadline = None;
                    match p.state {
                        CmState::Backoff { tries, rto } => {
                            self.stats.retries += 1;
                            self.dial(peer, tries, rto);
                        }
                        // The peer's winning attempt never came: ours again, newer.
                        CmState::Yielded { tries, .. } if tries >= max => {
                            p.state = CmState::Idle;
                            self.stats.failed += 1;
                            self.events.push_back(Event::Failed {
                                peer,
                                retries: tries,
                            });
                        }
                        CmState::Yielded { tries, rto } => {
                            self.stats.retries += 1;
                            self.dial(peer, tries + 1, rto);
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    pub fn state(&self, peer: Proc) -> PeerState {
        match self.peers.get(&peer).map(|p| &p.state) {
            None | Some(CmState::Idle) => PeerState::Idle,
            Some(CmState::Connected { id, .. }) => PeerState::Connected(*id),
            Some(_) => PeerState::Connecting,
        }
    }

    /// The socket carrying the connection to `peer`, if connected.
    pub fn socket_of(&self, peer: Proc) -> Option<SockId> {
        match self.peers.get(&peer).map(|p| &p.state) {
            Some(CmState::Connected { sock, .. }) => Some(*sock),
            _ => None,
        }
    }

    pub fn poll_timeout(&self) -> Option<Micros> {
        self.timers.first().map(|&(t, _)| t)
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: u64 = 77;

    fn ud(rank: Proc) -> Ud {
        Ud::new(rank, SECRET, vec![rank as u8; 3], Config::new(4))
    }

    fn sent(u: &mut Ud) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| u.poll_transmit().map(|t| t.bytes)).collect()
    }

    fn events(u: &mut Ud) -> Vec<Event> {
        std::iter::from_fn(|| u.poll_event()).collect()
    }

    #[test]
    fn ud_request_reply_confirm() {
        let (mut a, mut b) = (ud(0), ud(1));
        a.connect(1, 0);
        let req = sent(&mut a).remove(0);
        assert_eq!((req.len(), req[1]), (UD_HEADER_LEN + 3, Kind::Req as u8));
        b.handle_datagram(&req, 1);
        b.handle_datagram(&req, 2); // a duplicate Req: the Reply goes again, nothing else
        let replies = sent(&mut b);
        assert_eq!(replies.len(), 2);
        assert_eq!(b.state(0), PeerState::Connecting);
        a.handle_datagram(&replies[0], 3);
        a.handle_datagram(&replies[1], 3); // duplicate Reply: Confirm again
        let id = AttemptId {
            gen: 1,
            initiator: 0,
        };
        assert_eq!(
            events(&mut a),
            vec![Event::Connected {
                peer: 1,
                attempt: id,
                addr: vec![1; 3]
            }]
        );
        let confirms = sent(&mut a);
        assert_eq!(confirms.len(), 2);
        b.handle_datagram(&confirms[0], 4);
        b.handle_datagram(&confirms[1], 4);
        assert_eq!(
            events(&mut b),
            vec![Event::Connected {
                peer: 0,
                attempt: id,
                addr: vec![0; 3]
            }]
        );
        assert_eq!(b.stats().stale, 1);
        assert_eq!((a.poll_timeout(), b.poll_timeout()), (None, None));
        // After a close, the old attempt's late Req cannot reopen anything.
        b.close(0);
        b.handle_datagram(&req, 5);
        assert!(sent(&mut b).is_empty() && b.state(0) == PeerState::Idle);
        // A new attempt is newer and goes through.
        a.close(1);
        a.connect(1, 6);
        let req2 = sent(&mut a).remove(0);
        assert_eq!(wire::u32_at(&req2, 20), 2);
        b.handle_datagram(&req2, 7);
        assert_eq!(sent(&mut b).len(), 1);
    }

    #[test]
    fn ud_gives_up_after_max_retries_with_backoff() {
        let mut a = ud(2);
        a.connect(3, 0);
        let mut times = vec![0];
        while let Some(t) = a.poll_timeout() {
            a.handle_timeout(t);
            times.push(t);
        }
        assert_eq!(sent(&mut a).len(), 11); // the Req and 10 retransmissions
        let c = Config::new(4);
        assert_eq!(times[1], c.rto_initial);
        assert_eq!(times[2] - times[1], 2 * c.rto_initial);
        assert!(times.windows(2).all(|w| w[1] - w[0] <= c.rto_max));
        assert_eq!(
            events(&mut a),
            vec![Event::Failed {
                peer: 3,
                retries: 10
            }]
        );
        assert_eq!(a.stats().retries, 10);
        assert_eq!(a.state(3), PeerState::Idle);
    }

    #[test]
    fn ud_a_newer_request_supersedes_a_live_connection() {
        let (mut a, mut b) = (ud(0), ud(1));
        a.connect(1, 0);
        b.handle_datagram(&sent(&mut a)[0], 0);
        a.handle_datagram(&sent(&mut b)[0], 0);
        b.handle_datagram(&sent(&mut a)[0], 0);
        events(&mut a);
        events(&mut b);
        // a lost its connection (say the socket broke) and starts again; b has not noticed.
        a.close(1);
        a.connect(1, 10);
        b.handle_datagram(&sent(&mut a)[0], 10);
        let old = AttemptId {
            gen: 1,
            initiator: 0,
        };
        assert_eq!(events(&mut b), vec![Event::Superseded { peer: 0, old }]);
        a.handle_datagram(&sent(&mut b)[0], 11);
        b.handle_datagram(&sent(&mut a)[0], 12);
        let new = AttemptId {
            gen: 2,
            initiator: 0,
        };
        assert_eq!(b.state(0), PeerState::Connected(new));
        assert_eq!(a.state(1), PeerState::Connected(new));
    }

    #[test]
    fn ud_rejects_what_is_not_a_well_formed_handshake() {
        let (mut a, mut b) = (ud(0), ud(1));
        a.connect(1, 0);
        let req = sent(&mut a).remove(0);
        let mut to_other = req.clone();
        to_other[16] = 2; // addressed to rank 2
        let mut long_addr = req.clone();
        long_addr[24] = 200; // claims more address than there is
        let mut trailing = req.clone();
        trailing.push(0);
        let mut foreign = req.clone();
        foreign[15] ^= 0x80;
        for bad in [
            &to_other,
            &long_addr,
            &trailing,
            &foreign,
            &req[..20].to_vec(),
        ] {
            b.handle_datagram(bad, 0);
        }
        let d = b.stats().drops;
        assert_eq!((d.rank, d.truncated, d.field, d.secret), (1, 2, 1, 1));
        assert!(sent(&mut b).is_empty());
    }

    fn actions(c: &mut Cm) -> Vec<Action> {
        std::iter::from_fn(|| c.poll_action()).collect()
    }

    fn cm(rank: Proc) -> Cm {
        Cm::new(rank, SECRET, Config::new(4))
    }

    #[test]
    fn cm_hello_and_the_race_rule() {
        let (mut lo, mut hi) = (cm(1), cm(2));
        lo.connect(2, 0);
        hi.connect(1, 0);
        let (Action::Connect { sock: lo_out, .. }, Action::Connect { sock: hi_out, .. }) =
            (actions(&mut lo).remove(0), actions(&mut hi).remove(0))
        else {
            panic!("no Connect");
        };
        lo.socket_connected(lo_out, 1);
        hi.socket_connected(hi_out, 1);
        let Action::Send {
            bytes: lo_hello, ..
        } = actions(&mut lo).remove(0)
        else {
            panic!()
        };
        let Action::Send {
            bytes: hi_hello, ..
        } = actions(&mut hi).remove(0)
        else {
            panic!()
        };
        assert_eq!(lo_hello.len(), HELLO_LEN);
        // hi accepts lo's socket and refuses it: its own attempt is greater.
        let s = hi.accepted(2);
        hi.received(s, &lo_hello, 2);
        let refuse = match &actions(&mut hi)[..] {
            [Action::Send { bytes, .. }, Action::Close { sock }] if *sock == s => bytes.clone(),
            a => panic!("{a:?}"),
        };
        assert_eq!(refuse[24], REFUSED);
        // lo accepts hi's socket: hi's attempt wins, lo drops its own socket.
        let s2 = lo.accepted(2);
        lo.received(s2, &hi_hello, 2);
        let acts = actions(&mut lo);
        assert!(acts.contains(&Action::Close { sock: lo_out }), "{acts:?}");
        let Some(Action::Send { bytes: ack, .. }) = acts.last().cloned() else {
            panic!("{acts:?}")
        };
        assert_eq!(ack[24], ACCEPTED);
        hi.received(hi_out, &ack, 3);
        let id = AttemptId {
            gen: 1,
            initiator: 2,
        };
        assert_eq!(lo.state(2), PeerState::Connected(id));
        assert_eq!(hi.state(1), PeerState::Connected(id));
        assert_eq!((lo.socket_of(2), hi.socket_of(1)), (Some(s2), Some(hi_out)));
        // The refusal reaches lo on a socket it already closed: ignored.
        lo.received(lo_out, &refuse, 4);
        assert_eq!(lo.state(2), PeerState::Connected(id));
        // The connection closes under hi: reported once.
        hi.socket_closed(hi_out, 5);
        assert!(std::iter::from_fn(|| hi.poll_event()).any(|e| e
            == Event::Closed {
                peer: 1,
                attempt: id
            }));
        assert_eq!(hi.state(1), PeerState::Idle);
    }

    /// Connects `a` to `b` by `a`'s dial; returns (a's socket, b's socket).
    fn cm_connect(a: &mut Cm, b: &mut Cm, now: Micros) -> (SockId, SockId) {
        a.connect(b.rank, now);
        let Some(Action::Connect { sock: out, .. }) = actions(a).pop() else {
            panic!("no Connect")
        };
        a.socket_connected(out, now);
        let Some(Action::Send { bytes: hello, .. }) = actions(a).pop() else {
            panic!("no hello")
        };
        let inn = b.accepted(now);
        b.received(inn, &hello, now);
        let Some(Action::Send { bytes: ack, .. }) = actions(b).pop() else {
            panic!("no answer")
        };
        a.received(out, &ack, now);
        (out, inn)
    }

    #[test]
    fn cm_detached_connections_make_way_for_newer_attempts_from_either_side() {
        let (mut lo, mut hi) = (cm(1), cm(2));
        let (out, inn) = cm_connect(&mut lo, &mut hi, 0);
        let first = AttemptId {
            gen: 1,
            initiator: 1,
        };
        assert_eq!(hi.state(1), PeerState::Connected(first));
        // Both let go (the driver's close protocol owns the sockets now): no action, no event.
        assert_eq!((lo.detach(2), hi.detach(1)), (Some(out), Some(inn)));
        assert_eq!((lo.detach(2), lo.state(2)), (None, PeerState::Idle));
        assert!(actions(&mut lo).is_empty() && actions(&mut hi).is_empty());
        let (ev_lo, ev_hi): (Vec<_>, Vec<_>) = (
            std::iter::from_fn(|| lo.poll_event()).collect(),
            std::iter::from_fn(|| hi.poll_event()).collect(),
        );
        assert_eq!((ev_lo.len(), ev_hi.len()), (1, 1)); // the first Connected only
                                                        // The other side dials next: a newer generation, accepted.
        cm_connect(&mut hi, &mut lo, 1);
        let second = AttemptId {
            gen: 2,
            initiator: 2,
        };
        assert_eq!(lo.state(2), PeerState::Connected(second));
        assert_eq!(hi.state(1), PeerState::Connected(second));
        // A replayed hello of the first attempt is stale now.
        lo.detach(2);
        hi.detach(1);
        let s = hi.accepted(2);
        let old_hello = lo.hello(Kind::Hello, 2, 1, 0);
        hi.received(s, &old_hello, 2);
        assert_eq!(hi.state(1), PeerState::Idle);
        let refused = actions(&mut hi);
        assert!(
            matches!(&refused[..], [Action::Send { bytes, .. }, Action::Close { .. }] if bytes[24] == REFUSED)
        );
        // And a third attempt from the first dialer goes through.
        cm_connect(&mut lo, &mut hi, 3);
        assert_eq!(
            hi.state(1),
            PeerState::Connected(AttemptId {
                gen: 3,
                initiator: 1
            })
        );
    }

    #[test]
    fn cm_refused_dials_back_off_then_fail_and_silent_sockets_are_closed() {
        let mut c = Cm::new(
            0,
            SECRET,
            Config {
                max_retries: 2,
                ..Config::new(4)
            },
        );
        c.connect(3, 0);
        let mut dials = 0;
        loop {
            for a in actions(&mut c) {
                if let Action::Connect { sock, .. } = a {
                    dials += 1;
                    c.socket_closed(sock, 0); // refused
                }
            }
            match c.poll_timeout() {
                Some(t) => c.handle_timeout(t),
                None => break,
            }
        }
        assert_eq!(dials, 3);
        assert_eq!(
            c.poll_event(),
            Some(Event::Failed {
                peer: 3,
                retries: 2
            })
        );
        let s = c.accepted(100);
        assert_eq!(c.poll_timeout(), Some(100 + Config::new(4).hello_wait));
        c.handle_timeout(100 + Config::new(4).hello_wait);
        assert_eq!(actions(&mut c), vec![Action::Close { sock: s }]);
    }
}
