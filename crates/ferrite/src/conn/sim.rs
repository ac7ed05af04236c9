//! A simulated network for the connection manager's machines (tests only): a virtual clock, a
//! seeded random generator, datagrams that are dropped, duplicated, delayed and so reordered,
//! and stream sockets (in order, delayed, sometimes refused) for `cm`. Every run is a pure
//! function of its seed.

use super::handshake::{self, Action, AttemptId, Cm, Event as HsEvent, PeerState, SockId, Ud};
use super::reliable::{self, Reliable};
use super::wire::{self, Kind};
use super::Micros;
use super::Proc;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

/// SplitMix64: small, seedable, good enough to pick faults.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// What the network does to each datagram.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub loss: f64,
    pub dup: f64,
    pub delay_min: Micros,
    pub delay_max: Micros,
}

impl Faults {
    pub const LOSSY: Faults = Faults {
        loss: 0.3,
        dup: 0.1,
        delay_min: 100,
        delay_max: 20_000,
    };
    pub const CLEAN: Faults = Faults {
        loss: 0.0,
        dup: 0.0,
        delay_min: 1_000,
        delay_max: 1_000,
    };
}

/// First byte of what travels on a simulated connection (a tcp socket, say) instead of the
/// datagram channel: not a wire version, so never mistaken for a datagram.
pub const PIPE: u8 = 0xee;
pub const PIPE_DELAY: Micros = 3_000;

/// A datagram in flight: (arrival time, sending order, destination, bytes).
type InFlight = Reverse<(Micros, u64, Proc, Vec<u8>)>;

/// Datagrams in flight, by arrival time (ties in sending order).
pub struct DatagramNet {
    pub rng: Rng,
    pub faults: Faults,
    queue: BinaryHeap<InFlight>,
    next: u64,
    pub sent: u64,
    pub lost: u64,
    pub duplicated: u64,
}

impl DatagramNet {
    pub fn new(seed: u64, faults: Faults) -> DatagramNet {
        DatagramNet {
            rng: Rng::new(seed),
            faults,
            queue: BinaryHeap::new(),
            next: 0,
            sent: 0,
            lost: 0,
            duplicated: 0,
        }
    }

    fn delay(&mut self) -> Micros {
        let f = self.faults;
        f.delay_min + self.rng.below(f.delay_max - f.delay_min + 1)
    }

    pub fn send(&mut self, to: Proc, bytes: Vec<u8>, now: Micros) {
        if bytes.first() == Some(&PIPE) {
            // A simulated connection: never lost, fixed delay, so in order.
            self.queue
                .push(Reverse((now + PIPE_DELAY, self.next, to, bytes)));
            self.next += 1;
            return;
        }
        self.sent += 1;
        if self.rng.chance(self.faults.loss) {
            self.lost += 1;
            return;
        }
        if self.rng.chance(self.faults.dup) {
            self.duplicated += 1;
            let t = now + self.delay();
            self.queue.push(Reverse((t, self.next, to, bytes.clone())));
            self.next += 1;
        }
        let t = now + self.delay();
        self.queue.push(Reverse((t, self.next, to, bytes)));
        self.next += 1;
    }
}

/// A process in the datagram world.
pub trait Node {
    fn on_datagram(&mut self, b: &[u8], now: Micros);
    fn on_timeout(&mut self, now: Micros);
    fn next_timeout(&self) -> Option<Micros>;
    fn take_transmits(&mut self, out: &mut Vec<(Proc, Vec<u8>)>);
}

/// Nodes plus the network, driven in virtual time.
pub struct World<N: Node> {
    pub nodes: Vec<N>,
    pub net: DatagramNet,
    pub now: Micros,
    timers: BTreeSet<(Micros, usize)>,
    deadlines: Vec<Option<Micros>>,
    /// Steps taken without time advancing (a livelock guard).
    same_time: u64,
}

impl<N: Node> World<N> {
    pub fn new(nodes: Vec<N>, net: DatagramNet) -> World<N> {
        let n = nodes.len();
        let mut w = World {
            nodes,
            net,
            now: 0,
            timers: BTreeSet::new(),
            deadlines: vec![None; n],
            same_time: 0,
        };
        for i in 0..n {
            w.touched(i);
        }
        w
    }

    /// After node `i` was handed something: send what it queued, re-index its timer.
    pub fn touched(&mut self, i: usize) {
        let mut out = Vec::new();
        self.nodes[i].take_transmits(&mut out);
        for (to, b) in out {
            self.net.send(to, b, self.now);
        }
        let d = self.nodes[i].next_timeout();
        if let Some(old) = std::mem::replace(&mut self.deadlines[i], d) {
            self.timers.remove(&(old, i));
        }
        if let Some(t) = d {
            self.timers.insert((t.max(self.now), i));
            self.deadlines[i] = Some(t.max(self.now));
        }
    }

    /// Advances to the next arrival or timer and handles everything due then. False when
    /// nothing is left to happen (quiescent) or the next thing is past `limit`.
    pub fn step(&mut self, limit: Micros) -> bool {
        let arrival = self.net.queue.peek().map(|Reverse(e)| e.0);
        let timer = self.timers.first().map(|&(t, _)| t);
        let next = match (arrival, timer) {
            (Some(a), Some(t)) => a.min(t),
            (a, t) => match a.or(t) {
                Some(x) => x,
                None => return false,
            },
        };
        if next > limit {
            return false;
        }
        if next == self.now {
            self.same_time += 1;
            assert!(self.same_time < 1_000_000, "livelock at {next}us");
        } else {
            self.same_time = 0;
        }
        self.now = next;
        while self
            .net
            .queue
            .peek()
            .is_some_and(|Reverse(e)| e.0 <= self.now)
        {
            let Reverse((_, _, to, b)) = self.net.queue.pop().unwrap();
            self.nodes[to as usize].on_datagram(&b, self.now);
            self.touched(to as usize);
        }
        while let Some(&(t, i)) = self.timers.first() {
            if t > self.now {
                break;
            }
            self.timers.pop_first();
            self.deadlines[i] = None;
            self.nodes[i].on_timeout(self.now);
            self.touched(i);
        }
        true
    }

    /// Runs until quiescent or past `limit`; returns the virtual time reached.
    pub fn run(&mut self, limit: Micros) -> Micros {
        while self.step(limit) {}
        self.now
    }
}

// ---------------------------------------------------------------------------------------------
// A process with a reliable datagram endpoint and a ud handshake
// ---------------------------------------------------------------------------------------------

/// One process: sends queued messages as the window allows (keeping them on "no room"),
/// records deliveries and handshake events, and starts connections at scheduled times.
pub struct SimProc {
    pub rank: Proc,
    pub rel: Reliable,
    pub ud: Ud,
    pub outbox: BTreeMap<Proc, VecDeque<Vec<u8>>>,
    pub received: BTreeMap<Proc, Vec<Vec<u8>>>,
    pub hs_events: Vec<HsEvent>,
    pub unreachable: Vec<Proc>,
    /// (time, peer): call `ud.connect(peer)` at that time.
    pub starts: BTreeSet<(Micros, Proc)>,
    pub foreign: u64,
}

pub const SECRET: u64 = 0x0123_4567_89ab_cdef;

impl SimProc {
    pub fn new(rank: Proc, size: u32, rel: reliable::Config, hs: handshake::Config) -> SimProc {
        SimProc {
            rank,
            rel: Reliable::new(
                rank,
                SECRET,
                reliable::Config {
                    job_size: size,
                    ..rel
                },
            ),
            ud: Ud::new(
                rank,
                SECRET,
                format!("addr-of-{rank}").into_bytes(),
                handshake::Config {
                    job_size: size,
                    ..hs
                },
            ),
            outbox: BTreeMap::new(),
            received: BTreeMap::new(),
            hs_events: Vec::new(),
            unreachable: Vec::new(),
            starts: BTreeSet::new(),
            foreign: 0,
        }
    }

    fn pump(&mut self, now: Micros) {
        for (&to, q) in self.outbox.iter_mut() {
            while let Some(m) = q.front() {
                match self.rel.send(to, m, now) {
                    Ok(true) => {
                        q.pop_front();
                    }
                    Ok(false) => break,
                    Err(_) => panic!("{} -> {to}: peer unreachable", self.rank),
                }
            }
        }
        while let Some(e) = self.rel.poll_event() {
            match e {
                reliable::Event::Delivered { from, msg } => {
                    self.received.entry(from).or_default().push(msg)
                }
                reliable::Event::Unreachable { peer } => self.unreachable.push(peer),
            }
        }
        while let Some(e) = self.ud.poll_event() {
            self.hs_events.push(e);
        }
    }
}

impl Node for SimProc {
    fn on_datagram(&mut self, b: &[u8], now: Micros) {
        match wire::kind_of(b) {
            Some(Kind::Data | Kind::Ack) => self.rel.handle_datagram(b, now),
            Some(Kind::Req | Kind::Reply | Kind::Confirm) => self.ud.handle_datagram(b, now),
            _ => self.foreign += 1,
        }
        self.pump(now);
    }

    fn on_timeout(&mut self, now: Micros) {
        while let Some(&(t, peer)) = self.starts.first() {
            if t > now {
                break;
            }
            self.starts.pop_first();
            self.ud.connect(peer, now);
        }
        self.rel.handle_timeout(now);
        self.ud.handle_timeout(now);
        self.pump(now);
    }

    fn next_timeout(&self) -> Option<Micros> {
        [
            self.rel.poll_timeout(),
            self.ud.poll_timeout(),
            self.starts.first().map(|&(t, _)| t),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn take_transmits(&mut self, out: &mut Vec<(Proc, Vec<u8>)>) {
        while let Some(t) = self.rel.poll_transmit() {
            out.push((t.to, t.bytes));
        }
        while let Some(t) = self.ud.poll_transmit() {
            out.push((t.to, t.bytes));
        }
    }
}

/// Sim-friendly timers and generous retry limits: at 30% loss a handshake round succeeds about
/// half the time, so 30 retries fail with probability about 1e-9.
pub fn sim_configs(size: u32) -> (reliable::Config, handshake::Config) {
    (
        reliable::Config {
            window: 32,
            rto_initial: 30_000,
            rto_max: 400_000,
            max_retries: 30,
            ack_delay: 2_000,
            ..reliable::Config::new(size)
        },
        handshake::Config {
            rto_initial: 30_000,
            rto_max: 400_000,
            max_retries: 30,
            ..handshake::Config::new(size)
        },
    )
}

/// Checks the connection events of every node against the machines' final states: each pair
/// in `pairs` ends with exactly one live connection, and both sides agree on its attempt.
pub fn check_one_connection_per_pair(
    states: &dyn Fn(usize, Proc) -> PeerState,
    events: &dyn Fn(usize) -> Vec<HsEvent>,
    n: usize,
    pairs: &BTreeSet<(Proc, Proc)>,
) {
    // Replay each node's events: Connected adds a live connection, Superseded / Closed end one.
    let mut live: Vec<BTreeMap<Proc, AttemptId>> = vec![BTreeMap::new(); n];
    for (i, l) in live.iter_mut().enumerate() {
        for e in events(i) {
            match e {
                HsEvent::Connected { peer, attempt, .. } => {
                    let prev = l.insert(peer, attempt);
                    assert!(prev.is_none(), "{i}: two live connections to {peer}");
                }
                HsEvent::Superseded { peer, old } | HsEvent::Closed { peer, attempt: old } => {
                    assert_eq!(l.remove(&peer), Some(old), "{i}: ended {old:?} to {peer}");
                }
                HsEvent::Failed { peer, retries } => {
                    panic!("{i}: connection to {peer} failed after {retries} retries")
                }
            }
        }
    }
    for &(a, b) in pairs {
        let (sa, sb) = (states(a as usize, b), states(b as usize, a));
        let PeerState::Connected(id) = sa else {
            panic!("{a} -> {b}: {sa:?}, {b} -> {a}: {sb:?}");
        };
        assert_eq!(sb, PeerState::Connected(id), "{a} and {b} disagree");
        assert!(id.initiator == a || id.initiator == b);
        assert_eq!(live[a as usize].get(&b), Some(&id));
        assert_eq!(live[b as usize].get(&a), Some(&id));
    }
    let total: usize = live.iter().map(BTreeMap::len).sum();
    assert_eq!(
        total,
        2 * pairs.len(),
        "connections outside the pairs asked for"
    );
}

// ---------------------------------------------------------------------------------------------
// Stream sockets for cm
// ---------------------------------------------------------------------------------------------

/// One simulated stream connection between a client socket and (once accepted) a server one.
struct Conn {
    client: (usize, SockId),
    server: Option<(usize, SockId)>,
    server_node: usize,
    client_open: bool,
    server_open: bool,
    /// Last delivery time each way, so bytes and close stay in order.
    to_server: Micros,
    to_client: Micros,
}

enum StreamEv {
    Accept(usize),
    Connected(usize),
    Refused(usize),
    Bytes {
        conn: usize,
        to_server: bool,
        bytes: Vec<u8>,
    },
    Closed {
        conn: usize,
        to_server: bool,
    },
}

/// cm machines over simulated stream sockets.
pub struct CmWorld {
    pub cms: Vec<Cm>,
    pub events: Vec<Vec<HsEvent>>,
    pub rng: Rng,
    pub now: Micros,
    /// Chance that a connect is refused (the listener's backlog overflowed, say).
    pub refuse: f64,
    pub delay_max: Micros,
    conns: Vec<Conn>,
    by_sock: BTreeMap<(usize, SockId), usize>,
    queue: BinaryHeap<Reverse<(Micros, u64, usize)>>,
    evs: BTreeMap<u64, StreamEv>,
    next: u64,
    /// (time, node, peer): call `connect`.
    pub starts: BTreeSet<(Micros, usize, Proc)>,
}

impl CmWorld {
    pub fn new(n: u32, seed: u64, cfg: handshake::Config) -> CmWorld {
        CmWorld {
            cms: (0..n)
                .map(|r| {
                    Cm::new(
                        r,
                        SECRET,
                        handshake::Config {
                            job_size: n,
                            ..cfg.clone()
                        },
                    )
                })
                .collect(),
            events: vec![Vec::new(); n as usize],
            rng: Rng::new(seed),
            now: 0,
            refuse: 0.05,
            delay_max: 5_000,
            conns: Vec::new(),
            by_sock: BTreeMap::new(),
            queue: BinaryHeap::new(),
            evs: BTreeMap::new(),
            next: 0,
            starts: BTreeSet::new(),
        }
    }

    fn schedule(&mut self, at: Micros, ev: StreamEv) {
        self.next += 1;
        self.evs.insert(self.next, ev);
        self.queue.push(Reverse((at, self.next, 0)));
    }

    fn delay(&mut self) -> Micros {
        1 + self.rng.below(self.delay_max)
    }

    /// In-order time for the next thing on `conn` in one direction.
    fn ordered(&mut self, conn: usize, to_server: bool) -> Micros {
        let t = self.now + self.delay();
        let c = &mut self.conns[conn];
        let last = if to_server {
            &mut c.to_server
        } else {
            &mut c.to_client
        };
        *last = (*last).max(t);
        *last
    }

    /// Carries out what node `i` asked for.
    fn drain(&mut self, i: usize) {
        while let Some(a) = self.cms[i].poll_action() {
            match a {
                Action::Connect { sock, peer } => {
                    let conn = self.conns.len();
                    self.conns.push(Conn {
                        client: (i, sock),
                        server: None,
                        server_node: peer as usize,
                        client_open: true,
                        server_open: false,
                        to_server: 0,
                        to_client: 0,
                    });
                    self.by_sock.insert((i, sock), conn);
                    let t = self.now + self.delay();
                    if self.rng.chance(self.refuse) {
                        self.schedule(t, StreamEv::Refused(conn));
                    } else {
                        self.schedule(t, StreamEv::Accept(conn));
                    }
                }
                Action::Send { sock, bytes } => {
                    let Some(&conn) = self.by_sock.get(&(i, sock)) else {
                        continue;
                    };
                    let to_server = self.conns[conn].client == (i, sock);
                    let t = self.ordered(conn, to_server);
                    self.schedule(
                        t,
                        StreamEv::Bytes {
                            conn,
                            to_server,
                            bytes,
                        },
                    );
                }
                Action::Close { sock } => {
                    let Some(&conn) = self.by_sock.get(&(i, sock)) else {
                        continue;
                    };
                    let to_server = self.conns[conn].client == (i, sock);
                    let c = &mut self.conns[conn];
                    let was_open = if to_server {
                        std::mem::replace(&mut c.client_open, false)
                    } else {
                        std::mem::replace(&mut c.server_open, false)
                    };
                    if was_open {
                        let t = self.ordered(conn, to_server);
                        self.schedule(t, StreamEv::Closed { conn, to_server });
                    }
                }
            }
        }
        while let Some(e) = self.cms[i].poll_event() {
            self.events[i].push(e);
        }
    }

    fn handle(&mut self, ev: StreamEv) {
        let now = self.now;
        match ev {
            StreamEv::Accept(conn) => {
                let s = self.conns[conn].server_node;
                let sock = self.cms[s].accepted(now);
                self.by_sock.insert((s, sock), conn);
                let c = &mut self.conns[conn];
                c.server = Some((s, sock));
                c.server_open = true;
                if c.client_open {
                    let t = self.now + self.delay();
                    self.schedule(t, StreamEv::Connected(conn));
                } else {
                    // The client gave up before the accept: the server sees it close.
                    let t = self.ordered(conn, true);
                    self.schedule(
                        t,
                        StreamEv::Closed {
                            conn,
                            to_server: true,
                        },
                    );
                }
            }
            StreamEv::Connected(conn) => {
                let (i, sock) = self.conns[conn].client;
                if self.conns[conn].client_open {
                    self.cms[i].socket_connected(sock, now);
                    self.drain(i);
                }
            }
            StreamEv::Refused(conn) => {
                let (i, sock) = self.conns[conn].client;
                if std::mem::replace(&mut self.conns[conn].client_open, false) {
                    self.cms[i].socket_closed(sock, now);
                    self.drain(i);
                }
            }
            StreamEv::Bytes {
                conn,
                to_server,
                bytes,
            } => {
                let c = &self.conns[conn];
                let (end, open) = if to_server {
                    (c.server, c.server_open)
                } else {
                    (Some(c.client), c.client_open)
                };
                if let (Some((i, sock)), true) = (end, open) {
                    self.cms[i].received(sock, &bytes, now);
                    self.drain(i);
                }
            }
            StreamEv::Closed { conn, to_server } => {
                let c = &mut self.conns[conn];
                let end = if to_server {
                    c.server
                        .filter(|_| std::mem::replace(&mut c.server_open, false))
                } else {
                    Some(c.client).filter(|_| std::mem::replace(&mut c.client_open, false))
                };
                if let Some((i, sock)) = end {
                    self.cms[i].socket_closed(sock, now);
                    self.drain(i);
                }
            }
        }
    }

    /// Runs until nothing is left to happen or `limit`.
    pub fn run(&mut self, limit: Micros) {
        loop {
            let ev_t = self.queue.peek().map(|Reverse(e)| e.0);
            let start_t = self.starts.first().map(|&(t, _, _)| t);
            let timer_t = self.cms.iter().filter_map(Cm::poll_timeout).min();
            let Some(next) = [ev_t, start_t, timer_t].into_iter().flatten().min() else {
                return;
            };
            if next > limit {
                return;
            }
            self.now = next;
            if ev_t == Some(next) {
                let Reverse((_, id, _)) = self.queue.pop().unwrap();
                let ev = self.evs.remove(&id).unwrap();
                self.handle(ev);
            } else if start_t == Some(next) {
                let (_, i, peer) = self.starts.pop_first().unwrap();
                self.cms[i].connect(peer, next);
                self.drain(i);
            } else {
                for i in 0..self.cms.len() {
                    if self.cms[i].poll_timeout().is_some_and(|t| t <= next) {
                        self.cms[i].handle_timeout(next);
                        self.drain(i);
                    }
                }
            }
        }
    }

    /// Node `i` hands its connection to `peer` over (`Cm::detach`), as a transport does when
    /// its close protocol starts; the simulated socket at that end is closed for good (the
    /// close protocol's own traffic is the transport's, not simulated here). The end is
    /// recorded as a `Closed` event so `check_one_connection_per_pair` can replay it.
    pub fn detach(&mut self, i: usize, peer: Proc) {
        let PeerState::Connected(attempt) = self.cms[i].state(peer) else {
            return;
        };
        let sock = self.cms[i].detach(peer).expect("connected");
        if let Some(&conn) = self.by_sock.get(&(i, sock)) {
            let c = &mut self.conns[conn];
            if c.client == (i, sock) {
                c.client_open = false;
            } else {
                c.server_open = false;
            }
        }
        self.events[i].push(HsEvent::Closed { peer, attempt });
    }

    /// Connections open at both ends, between nodes a and b.
    pub fn open_conns(&self, a: usize, b: usize) -> Vec<(SockId, SockId)> {
        self.conns
            .iter()
            .filter(|c| c.client_open && c.server_open)
            .filter_map(|c| {
                let s = c.server?;
                if (c.client.0, s.0) == (a, b) {
                    Some((c.client.1, s.1))
                } else if (c.client.0, s.0) == (b, a) {
                    Some((s.1, c.client.1))
                } else {
                    None
                }
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// The shipped connection manager over reliable datagrams and simulated stream endpoints
// ---------------------------------------------------------------------------------------------

use super::manager::{self, Action as MAction, EpId, Failure, Manager, Phase};
use super::policy::{self, Via};

/// What travels on a simulated stream connection: `[PIPE, kind, from u32, conn u64, bytes]`,
/// in order (the network gives pipes a fixed delay).
const P_CONNECT: u8 = 0;
const P_ACCEPTED: u8 = 1;
const P_HELLO: u8 = 2;
const P_DATA: u8 = 3;
const P_CLOSE: u8 = 4;
const P_CLOSE_ACK: u8 = 5;
/// The end closed its endpoint: EOF at the other end.
const P_FIN: u8 = 6;
const PIPE_HEADER: usize = 14;
/// How often a hello the manager held back for the budget is offered again.
const HELD_RECHECK: Micros = 10_000;

/// A simulated stream endpoint: the connection it belongs to, and what arrived on it that
/// the manager has not taken yet (a hello held back for the budget, frames of a connection
/// waiting for an old one's close).
struct SimEp {
    peer: Proc,
    conn: u64,
    inbox: VecDeque<(u8, Vec<u8>)>,
}

/// A process driving the shipped [`Manager`] as a transport does: packets go where it says
/// (datagrams through `Reliable`, or a simulated stream connection set up by its `cm` or
/// `ud` machine, closed by its close protocol); the process keeps the packet queues, as a
/// transport keeps them, and carries out the manager's actions.
pub struct ManagedProc {
    pub rank: Proc,
    pub mgr: Manager,
    pub rel: Reliable,
    /// Packets waiting for a connection (the manager holds none).
    q: BTreeMap<Proc, VecDeque<Vec<u8>>>,
    /// Packets for the datagram path that the window has not taken yet.
    backlog: BTreeMap<Proc, VecDeque<Vec<u8>>>,
    eps: BTreeMap<EpId, SimEp>,
    by_conn: BTreeMap<u64, EpId>,
    next_conn: u64,
    /// Endpoints whose inbox may be read now.
    to_pump: BTreeSet<EpId>,
    /// When held hellos are next offered again.
    held_at: Option<Micros>,
    /// The workload: (time, order, destination) -> message.
    pub workload: BTreeMap<(Micros, u64, Proc), Vec<u8>>,
    pub received: BTreeMap<Proc, Vec<Vec<u8>>>,
    pub failures: Vec<(Proc, Failure)>,
    /// Out of descriptors: every dial fails at once, and every connection is refused once
    /// its hello has been read (as tcp does on its spare descriptor).
    pub exhausted: bool,
    /// Connections (dialer, id) refused, waiting for their hello.
    refusing: BTreeSet<(Proc, u64)>,
    out: Vec<(Proc, Vec<u8>)>,
}

impl ManagedProc {
    pub fn new(
        rank: Proc,
        size: u32,
        pcfg: policy::Config,
        setup: policy::Mechanism,
    ) -> ManagedProc {
        let (rel, hs) = sim_configs(size);
        let base = SimProc::new(rank, size, rel, hs.clone());
        let mut mgr = Manager::new(
            rank,
            manager::Config {
                policy: pcfg,
                setup,
                handshake: handshake::Config {
                    job_size: size,
                    ..hs
                },
                datagrams: true,
            },
        );
        mgr.start(SECRET, format!("addr-of-{rank}").into_bytes());
        ManagedProc {
            rank,
            mgr,
            rel: base.rel,
            q: BTreeMap::new(),
            backlog: BTreeMap::new(),
            eps: BTreeMap::new(),
            by_conn: BTreeMap::new(),
            next_conn: 0,
            to_pump: BTreeSet::new(),
            held_at: None,
            workload: BTreeMap::new(),
            received: BTreeMap::new(),
            failures: Vec::new(),
            exhausted: false,
            refusing: BTreeSet::new(),
            out: Vec::new(),
        }
    }

    /// What this process holds for `peer` (for a failing test's message).
    pub fn describe(&self, peer: Proc) -> String {
        let eps: Vec<String> = self
            .eps
            .iter()
            .filter(|(_, e)| e.peer == peer)
            .map(|(ep, e)| {
                format!(
                    "{ep:?} {:?} inbox {}",
                    self.mgr.endpoint(*ep),
                    e.inbox.len()
                )
            })
            .collect();
        format!(
            "{} about {peer}: queued {}, backlog {}, connection {:?}, closing {:?}, sendable {:?}, \
             cm {:?}, held {:?}, endpoints {eps:?}",
            self.rank,
            self.q.get(&peer).map_or(0, VecDeque::len),
            self.backlog.get(&peer).map_or(0, VecDeque::len),
            self.mgr.connection(peer),
            self.mgr.closing_of(peer),
            self.mgr.sendable(peer),
            self.mgr.cm_state(peer),
            self.mgr.held(),
        )
    }

    /// MPI_Init: the policy's initial connections.
    pub fn init(&mut self, now: Micros) {
        self.mgr.init(now);
        self.settle(now);
    }

    fn pipe(&mut self, to: Proc, kind: u8, conn: u64, payload: &[u8]) {
        let mut b = vec![PIPE, kind];
        b.extend_from_slice(&self.rank.to_le_bytes());
        b.extend_from_slice(&conn.to_le_bytes());
        b.extend_from_slice(payload);
        self.out.push((to, b));
    }

    fn pipe_ep(&mut self, ep: EpId, kind: u8, payload: &[u8]) {
        let e = &self.eps[&ep];
        let (to, conn) = (e.peer, e.conn);
        self.pipe(to, kind, conn, payload);
    }

    /// Writes `peer`'s queue on `ep`.
    fn write_queue(&mut self, peer: Proc, ep: EpId) {
        let msgs: Vec<Vec<u8>> = self
            .q
            .get_mut(&peer)
            .map_or(Vec::new(), |q| q.drain(..).collect());
        for m in msgs {
            self.pipe_ep(ep, P_DATA, &m);
        }
    }

    fn app_send(&mut self, to: Proc, msg: Vec<u8>, now: Micros) {
        let via = self.mgr.send(to, msg.len(), now);
        self.settle(now);
        assert!(
            self.mgr.failure(to).is_none(),
            "{} -> {to}: failed",
            self.rank
        );
        if via == Via::Datagram {
            self.backlog.entry(to).or_default().push_back(msg);
        } else {
            self.q.entry(to).or_default().push_back(msg);
            match (
                self.mgr.sendable(to),
                self.mgr.connection(to),
                self.mgr.closing_of(to),
            ) {
                (Some(ep), _, _) => self.write_queue(to, ep),
                (None, None, None) => self.mgr.packets_waiting(to, now),
                _ => {}
            }
        }
        self.settle(now);
    }

    fn do_action(&mut self, a: MAction, now: Micros) {
        match a {
            MAction::Dial { ep, .. } if self.exhausted => {
                let why = "connect: Too many open files (os error 24)";
                self.mgr.endpoint_closed(ep, why, now);
            }
            MAction::Dial { ep, peer, .. } => {
                let conn = (u64::from(self.rank) << 32) | self.next_conn;
                self.next_conn += 1;
                self.eps.insert(
                    ep,
                    SimEp {
                        peer,
                        conn,
                        inbox: VecDeque::new(),
                    },
                );
                self.by_conn.insert(conn, ep);
                self.pipe(peer, P_CONNECT, conn, &[]);
            }
            MAction::Write { ep, bytes } => {
                if self.eps.contains_key(&ep) {
                    self.pipe_ep(ep, P_HELLO, &bytes);
                }
            }
            MAction::Close { ep, .. } => {
                if self.eps.contains_key(&ep) {
                    self.pipe_ep(ep, P_FIN, &[]);
                    let e = self.eps.remove(&ep).expect("present");
                    self.by_conn.remove(&e.conn);
                }
            }
            MAction::Datagram { to, bytes } => self.out.push((to, bytes)),
            MAction::Flush {
                peer,
                via: Via::Datagram,
            } => {
                let msgs = self.q.remove(&peer).unwrap_or_default();
                self.backlog.entry(peer).or_default().extend(msgs);
            }
            MAction::Flush {
                peer,
                via: Via::Connection,
            } => {
                if let Some(ep) = self.mgr.sendable(peer) {
                    self.write_queue(peer, ep);
                }
            }
            MAction::StartClose {
                peer,
                ep,
                answer,
                carry,
            } => {
                if carry {
                    self.write_queue(peer, ep);
                }
                if answer {
                    self.pipe_ep(ep, P_CLOSE_ACK, &[]);
                }
                self.pipe_ep(ep, P_CLOSE, &[]);
                // A simulated pipe takes everything at once.
                self.mgr.flushed(ep, now);
            }
            MAction::CloseAck { ep } => self.pipe_ep(ep, P_CLOSE_ACK, &[]),
            MAction::Resume { ep } => {
                self.to_pump.insert(ep);
            }
            MAction::Poke { ep } => {
                let Some(v) = self.mgr.endpoint(ep) else {
                    return;
                };
                if v.closing {
                    self.mgr.flushed(ep, now);
                } else if let Some(peer) = v.peer.filter(|&p| self.mgr.sendable(p) == Some(ep)) {
                    self.write_queue(peer, ep);
                }
                self.to_pump.insert(ep);
            }
            MAction::Fail { peer, failure } => {
                self.q.remove(&peer);
                self.failures.push((peer, failure));
            }
        }
    }

    /// Hands the manager what arrived on `ep`, as far as it takes it now.
    fn pump_ep(&mut self, ep: EpId, now: Micros) {
        loop {
            let (Some(v), Some(e)) = (self.mgr.endpoint(ep), self.eps.get_mut(&ep)) else {
                return;
            };
            let Some((kind, bytes)) = e.inbox.front().cloned() else {
                return;
            };
            match (v.phase, kind) {
                (_, P_FIN) => {
                    e.inbox.clear();
                    self.mgr.endpoint_closed(ep, "closed by the peer", now);
                    return;
                }
                (Phase::Connecting, _) => return,
                (Phase::Hello, P_HELLO) => {
                    if !self.mgr.hello(ep, &bytes, now) {
                        return; // held back for the budget: offered again later
                    }
                }
                (Phase::Hello, k) => panic!("{}: frame {k} before the hello", self.rank),
                (Phase::Up, _) if v.blocked => return,
                (Phase::Up, P_DATA) => {
                    let peer = v.peer.expect("up");
                    self.mgr.received(peer, now);
                    self.received.entry(peer).or_default().push(bytes);
                }
                (Phase::Up, P_CLOSE) => self.mgr.close_frame(ep, false, now),
                (Phase::Up, P_CLOSE_ACK) => self.mgr.close_frame(ep, true, now),
                (Phase::Up, k) => panic!("{}: unexpected frame {k}", self.rank),
            }
            if let Some(e) = self.eps.get_mut(&ep) {
                e.inbox.pop_front();
            }
        }
    }

    fn on_pipe(&mut self, b: &[u8], now: Micros) {
        let (kind, from) = (b[1], wire::u32_at(b, 2));
        let conn = u64::from_le_bytes(b[6..PIPE_HEADER].try_into().expect("8 bytes"));
        let payload = b[PIPE_HEADER..].to_vec();
        match kind {
            P_CONNECT if self.exhausted => {
                // The kernel completes the connect; accept fails.
                self.refusing.insert((from, conn));
                self.pipe(from, P_ACCEPTED, conn, &[]);
            }
            P_HELLO if self.refusing.remove(&(from, conn)) => {
                let why = "accept: Too many open files (os error 24)";
                self.mgr.refused(&payload, why, now);
                self.pipe(from, P_FIN, conn, &[]);
            }
            P_CONNECT => {
                let ep = self.mgr.accepted(now).expect("started");
                self.eps.insert(
                    ep,
                    SimEp {
                        peer: from,
                        conn,
                        inbox: VecDeque::new(),
                    },
                );
                self.by_conn.insert(conn, ep);
                self.pipe(from, P_ACCEPTED, conn, &[]);
            }
            P_ACCEPTED => {
                if let Some(&ep) = self.by_conn.get(&conn) {
                    self.mgr.endpoint_connected(ep, now);
                }
            }
            _ => {
                // Nothing for an endpoint this side has closed already.
                if let Some(&ep) = self.by_conn.get(&conn) {
                    let e = self.eps.get_mut(&ep).expect("mapped");
                    e.inbox.push_back((kind, payload));
                    self.to_pump.insert(ep);
                }
            }
        }
    }

    /// Carries out everything the manager asked for, until nothing changes.
    pub fn settle(&mut self, now: Micros) {
        for round in 0.. {
            assert!(round < 100_000, "{}: the manager never settles", self.rank);
            let mut busy = false;
            while let Some(a) = self.mgr.poll_action() {
                busy = true;
                self.do_action(a, now);
            }
            for ep in std::mem::take(&mut self.to_pump) {
                busy = true;
                self.pump_ep(ep, now);
            }
            while let Some(e) = self.rel.poll_event() {
                busy = true;
                match e {
                    reliable::Event::Delivered { from, msg } => {
                        self.mgr.received(from, now);
                        self.received.entry(from).or_default().push(msg);
                    }
                    reliable::Event::Unreachable { peer } => panic!("{peer} unreachable"),
                }
            }
            for (&to, q) in self.backlog.iter_mut() {
                while let Some(m) = q.front() {
                    if !self.rel.send(to, m, now).expect("reachable") {
                        break;
                    }
                    q.pop_front();
                }
            }
            // Connections whose datagrams are all acknowledged take over.
            for p in self.mgr.draining() {
                let backlog = self.backlog.get(&p).map_or(0, VecDeque::len);
                if backlog + self.rel.in_flight(p) == 0 {
                    busy = true;
                    self.mgr.datagrams_drained(p, now);
                }
            }
            if !busy {
                break;
            }
        }
        self.held_at = (!self.mgr.held().is_empty()).then_some(now + HELD_RECHECK);
    }
}

impl Node for ManagedProc {
    fn on_datagram(&mut self, b: &[u8], now: Micros) {
        match wire::kind_of(b) {
            _ if b.first() == Some(&PIPE) => self.on_pipe(b, now),
            Some(Kind::Data | Kind::Ack) => self.rel.handle_datagram(b, now),
            Some(Kind::Req | Kind::Reply | Kind::Confirm) => self.mgr.datagram(b, now),
            _ => panic!("garbage in the simulation"),
        }
        self.settle(now);
    }

    fn on_timeout(&mut self, now: Micros) {
        while let Some(entry) = self.workload.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, _, to), msg) = entry.remove_entry();
            self.app_send(to, msg, now);
        }
        if self.held_at.is_some_and(|t| t <= now) {
            self.to_pump.extend(self.mgr.held().iter().copied());
        }
        self.rel.handle_timeout(now);
        self.mgr.handle_timeout(now);
        self.settle(now);
    }

    fn next_timeout(&self) -> Option<Micros> {
        [
            self.rel.poll_timeout(),
            self.mgr.poll_timeout(),
            self.held_at,
            self.workload.keys().next().map(|k| k.0),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn take_transmits(&mut self, out: &mut Vec<(Proc, Vec<u8>)>) {
        out.append(&mut self.out);
        while let Some(t) = self.rel.poll_transmit() {
            out.push((t.to, t.bytes));
        }
    }
}

#[cfg(test)]
mod tests;
