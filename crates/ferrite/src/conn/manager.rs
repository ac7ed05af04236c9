//! The connection manager: one sans-IO composition of the machines (policy, `cm`/`ud` set-up,
//! the hello gate, the close protocol, adaptive's drain, failures) that every
//! connection-oriented transport drives. The driver owns the endpoints (sockets, fabric
//! endpoints), the framing and the per-peer packet queues; it tells the manager what happened
//! (`accepted`, `endpoint_connected`, `hello`, `close_frame`, `endpoint_closed`, ...) with the
//! current time and carries out the [`Action`]s it takes from [`Manager::poll_action`], in
//! order. See docs/architecture.md ("The connection manager") for the whole interface.

use super::handshake::{self, AttemptId, Cm, Event, PeerState, Ud};
use super::policy::{self, Policy, Via};
use super::{wire, Micros, Proc};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// An endpoint as the manager names it (the `cm` machine allocates the ids).
pub use super::handshake::SockId as EpId;
pub use super::handshake::HELLO_LEN;

/// What the manager is set up with.
#[derive(Clone, Debug)]
pub struct Config {
    pub policy: policy::Config,
    /// `cm` alone, or `ud` settling each attempt over the datagram channel first.
    pub setup: policy::Mechanism,
    /// Timers and retries of both set-up machines (`job_size` is the job's).
    pub handshake: handshake::Config,
    /// The driver has a datagram channel (required for adaptive and for `ud`).
    pub datagrams: bool,
}

/// Why sends to a peer fail; the transport maps it to an MPI error class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailKind {
    /// The peer is gone (lost without BYE, or never reachable): receives from it fail too.
    Aborted,
    /// The peer closed its connections in MPI_Finalize.
    Finalized,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailKind,
    pub why: String,
}

/// What the driver must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Open an endpoint to `peer` (at `addr` when `ud` learned it, else from its card);
    /// report [`Manager::endpoint_connected`] or [`Manager::endpoint_closed`].
    Dial {
        ep: EpId,
        peer: Proc,
        addr: Option<Vec<u8>>,
    },
    /// Write these handshake bytes on `ep` (before any frame).
    Write { ep: EpId, bytes: Vec<u8> },
    /// Close `ep` and forget it: pending handshake bytes, then a BYE if `bye`, best effort.
    Close { ep: EpId, bye: bool },
    /// Send one `ud` handshake datagram (unreliably).
    Datagram { to: Proc, bytes: Vec<u8> },
    /// `peer`'s queued packets go now, in order: on [`Manager::sendable`]'s endpoint, or over
    /// the datagram channel.
    Flush { peer: Proc, via: Via },
    /// Move `peer`'s queue onto `ep` if `carry` (else the queue waits: adaptive, the
    /// connection never carried packets because datagrams to the peer were still in flight,
    /// and the queue follows them), then queue CLOSE_ACK (if `answer`) and CLOSE; write.
    /// Packets sent from now wait in the peer's queue for a new connection.
    StartClose {
        peer: Proc,
        ep: EpId,
        answer: bool,
        carry: bool,
    },
    /// Queue a CLOSE_ACK on the closing `ep` (both sides closed at once).
    CloseAck { ep: EpId },
    /// `ep` was held back behind an older connection's close: read what it buffered.
    Resume { ep: EpId },
    /// `ep`'s state changed: write what may go and recompute what to wait for.
    Poke { ep: EpId },
    /// Sends to `peer` fail from now: drop its queue (and report `Aborted` peers as failed).
    Fail { peer: Proc, failure: Failure },
}

/// Where an endpoint is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Our dial is under way.
    Connecting,
    /// Waiting for the hello (accepted) or its answer (ours).
    Hello,
    /// Carries the connection to its peer.
    Up,
}

/// An endpoint as the driver's I/O needs to see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpView {
    pub peer: Option<Proc>,
    pub outgoing: bool,
    pub phase: Phase,
    /// Being closed: only its close queue is written.
    pub closing: bool,
    /// A new connection waiting (unread, unwritten) for the old one's close.
    pub blocked: bool,
}

/// Close progress of a connection. Each side sends CLOSE after its last frame, and answers the
/// peer's CLOSE with CLOSE_ACK; a side is done when it has both (everything the peer sent has
/// arrived, and the peer has read everything we sent) and its own frames are out. Then it
/// closes the endpoint without losing anything, and a new connection may carry later packets.
#[derive(Clone, Copy, Debug, Default)]
struct Closing {
    got_close: bool,
    got_ack: bool,
    /// The driver wrote everything queued on it (`flushed`) since the last CLOSE_ACK.
    flushed: bool,
}

struct Ep {
    /// Known from the start for ours; from the hello for accepted ones.
    peer: Option<Proc>,
    outgoing: bool,
    phase: Phase,
    /// The peer sent BYE: its EOF is a clean close.
    bye: bool,
    closing: Option<Closing>,
}

#[derive(Default)]
struct Peer {
    /// The endpoint carrying the connection, once up. While an old connection still closes
    /// (`closing`), a new one the peer opened waits here, neither read nor written.
    ep: Option<EpId>,
    closing: Option<EpId>,
    failed: Option<Failure>,
    /// The last dial problem, for the message if the peer is given up.
    last_error: Option<String>,
}

/// Connection counters for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections we dialed that came up.
    pub opened: u64,
    /// Connections peers dialed that came up.
    pub accepted: u64,
    pub closed: u64,
    /// Malformed or foreign handshakes (hellos, ud datagrams), dropped.
    pub strangers: u64,
}

pub struct Manager {
    rank: Proc,
    cfg: Config,
    policy: Policy<()>,
    /// Made by `start`: the job secret is known only after MPI_Init's barrier.
    cm: Option<Cm>,
    ud: Option<Ud>,
    secret: Option<u64>,
    /// Addresses peers sent in their ud request or reply (no card lookup then).
    addrs: HashMap<Proc, Vec<u8>>,
    /// Peers whose dials we wait for, until when, and why they would not come: ud, peers that
    /// settled an attempt for which they dial us (their dials may all fail: out of file
    /// descriptors); peers whose connections the driver refused for want of descriptors
    /// ([`Manager::refused`]: they may give up, and then never tell us).
    awaiting: BTreeMap<Proc, (Micros, String)>,
    /// Peers MPI_Init connects to and waits for, until each has been up.
    init_peers: Vec<Proc>,
    eps: HashMap<EpId, Ep>,
    peers: HashMap<Proc, Peer>,
    /// Accepted endpoints whose hello waits for room under the budget.
    held: Vec<EpId>,
    /// Adaptive: peers whose connection is up but waits for their datagrams' acknowledgement.
    draining: BTreeSet<Proc>,
    actions: VecDeque<Action>,
    stats: Stats,
}

impl Manager {
    pub fn new(rank: Proc, cfg: Config) -> Manager {
        let size = cfg.handshake.job_size;
        Manager {
            rank,
            policy: Policy::new(rank, size, cfg.policy.clone()),
            cfg,
            cm: None,
            ud: None,
            secret: None,
            addrs: HashMap::new(),
            awaiting: BTreeMap::new(),
            init_peers: Vec::new(),
            eps: HashMap::new(),
            peers: HashMap::new(),
            held: Vec::new(),
            draining: BTreeSet::new(),
            actions: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The job secret is known: makes the set-up machines. `addr` is this process's listen
    /// address (sent in `ud` requests and replies).
    pub fn start(&mut self, secret: u64, addr: Vec<u8>) {
        if self.cm.is_some() {
            return;
        }
        self.secret = Some(secret);
        let hs = self.cfg.handshake.clone();
        if self.cfg.setup == policy::Mechanism::Ud {
            self.ud = Some(Ud::new(self.rank, secret, addr, hs.clone()));
        }
        self.cm = Some(Cm::new(self.rank, secret, hs));
    }

    pub fn started(&self) -> bool {
        self.cm.is_some()
    }

    fn adaptive(&self) -> bool {
        self.cfg.datagrams && self.cfg.policy.kind == policy::Kind::Adaptive
    }

    // -----------------------------------------------------------------------------------------
    // Events from the driver
    // -----------------------------------------------------------------------------------------

    /// MPI_Init: asks for the policy's initial connections (all peers for static, ±2^k for
    /// partial) at once; [`Manager::init_connecting`] says when they are settled. Every process
    /// dials and accepts concurrently, and the cm race rule keeps one connection per pair.
    pub fn init(&mut self, now: Micros) {
        self.init_peers = self.policy.init_peers();
        if self.init_peers.is_empty() {
            return;
        }
        self.policy.init(now);
        self.run(now);
    }

    /// The peers MPI_Init connects to (none for ondemand and adaptive).
    pub fn init_peers(&self) -> Vec<Proc> {
        self.policy.init_peers()
    }

    /// Some connection MPI_Init asked for has not been up yet and has not failed.
    pub fn init_connecting(&self) -> bool {
        self.init_peers.iter().any(|r| {
            self.peers
                .get(r)
                .is_none_or(|p| p.ep.is_none() && p.failed.is_none())
        })
    }

    /// A packet of `bytes` bytes to `peer`: over datagrams (adaptive), or on the connection
    /// ([`Manager::sendable`]; while there is none, the driver keeps it in the peer's queue
    /// until a [`Action::Flush`]). The policy keeps the LRU order and asks for the connection.
    pub fn send(&mut self, peer: Proc, bytes: usize, now: Micros) -> Via {
        let route = self.policy.send(peer, (), bytes, now);
        self.run(now);
        match route {
            policy::Route::Datagram(()) if self.cfg.datagrams => Via::Datagram,
            _ => Via::Connection,
        }
    }

    /// Packets wait in `peer`'s queue: if the attempt the policy found under way (the peer's)
    /// has since ended without a connection, dial again. (Not while it waits for room or for
    /// an old connection's close, nor under adaptive, whose datagrams carry them meanwhile.)
    pub fn packets_waiting(&mut self, peer: Proc, now: Micros) {
        if self.cfg.datagrams {
            return;
        }
        let p = self.peers.entry(peer).or_default();
        if p.ep.is_some() || p.closing.is_some() {
            return;
        }
        let opening = self.policy.opening(peer);
        if let Some(cm) = self.cm.as_mut() {
            if opening && cm.state(peer) == PeerState::Idle {
                cm.connect(peer, now);
            }
        }
        self.run(now);
    }

    /// Closes the connection to `peer` by our decision, as the policy's eviction does (tests).
    pub fn close(&mut self, peer: Proc, now: Micros) {
        self.start_close(peer, false);
        self.run(now);
    }

    /// Packets came from `peer` (on either path): the connection is in use.
    pub fn received(&mut self, peer: Proc, now: Micros) {
        self.policy.received(peer, now);
    }

    /// A passive endpoint was accepted; its first bytes go to [`Manager::hello`]. Only after
    /// [`Manager::start`] (nobody can be admitted without the secret).
    pub fn accepted(&mut self, now: Micros) -> Option<EpId> {
        let ep = self.cm.as_mut()?.accepted(now);
        self.eps.insert(
            ep,
            Ep {
                peer: None,
                outgoing: false,
                phase: Phase::Hello,
                bye: false,
                closing: None,
            },
        );
        Some(ep)
    }

    /// Our dial of `ep` completed: it says hello.
    pub fn endpoint_connected(&mut self, ep: EpId, now: Micros) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        e.phase = Phase::Hello;
        if let Some(cm) = self.cm.as_mut() {
            cm.socket_connected(ep, now);
        }
        self.run(now);
        self.actions.push_back(Action::Poke { ep });
    }

    /// The first [`HELLO_LEN`] bytes read on `ep`: a peer's hello (accepted) or the answer to
    /// ours. `false`: the hello waits for room under the budget; keep the bytes and offer them
    /// again later (see [`Manager::held`]); the peer's dial just waits for our answer.
    pub fn hello(&mut self, ep: EpId, h: &[u8], now: Micros) -> bool {
        let outgoing = self.eps.get(&ep).is_none_or(|e| e.outgoing);
        let mut asked = None;
        if let (false, Some(secret)) = (outgoing, self.secret) {
            let size = self.cfg.handshake.job_size;
            if let Ok(w) = wire::decode_prefix(h, secret, self.rank, size) {
                if w.kind == wire::Kind::Hello {
                    if !self.policy.may_accept(w.src, now) {
                        if !self.held.contains(&ep) {
                            self.held.push(ep);
                        }
                        self.run(now);
                        return false;
                    }
                    asked = Some(w.src);
                }
            }
        }
        self.held.retain(|&x| x != ep);
        if let Some(cm) = self.cm.as_mut() {
            let before = cm.stats().drops.total();
            cm.received(ep, h, now);
            self.stats.strangers += cm.stats().drops.total() - before;
            if let Some(src) = asked {
                if cm.socket_of(src) != Some(ep) {
                    // Refused (stale or a lost race): the slot is not needed.
                    self.policy.release(src, now);
                }
            }
        }
        self.run(now);
        true
    }

    /// The peer sent BYE on `ep`: the EOF that follows is a clean close.
    pub fn bye(&mut self, ep: EpId) {
        if let Some(e) = self.eps.get_mut(&ep) {
            e.bye = true;
        }
    }

    /// A CLOSE (`ack` false) or CLOSE_ACK arrived on `ep`.
    pub fn close_frame(&mut self, ep: EpId, ack: bool, now: Micros) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let Some(peer) = e.peer else { return };
        match (&mut e.closing, ack) {
            (Some(c), true) => c.got_ack = true,
            (Some(c), false) => {
                // Both sides closed at once: answer, after our CLOSE.
                if !c.got_close {
                    c.got_close = true;
                    c.flushed = false;
                    self.actions.push_back(Action::CloseAck { ep });
                }
            }
            (None, false) => {
                self.policy.peer_closing(peer);
                self.start_close(peer, true);
                self.run(now);
                return;
            }
            // An ack for a close we never started: the stream is broken.
            (None, true) => {
                self.endpoint_closed(ep, "a CLOSE_ACK without a CLOSE", now);
                return;
            }
        }
        self.actions.push_back(Action::Poke { ep });
    }

    /// Everything queued on the closing `ep` (its packets, CLOSE, CLOSE_ACK) is written.
    pub fn flushed(&mut self, ep: EpId, now: Micros) {
        let Some(c) = self.eps.get_mut(&ep).and_then(|e| e.closing.as_mut()) else {
            return;
        };
        c.flushed = true;
        self.check_closed(ep, now);
    }

    /// `ep` failed or closed under us (EOF, reset, a failed dial). An up connection that ends
    /// without the peer's BYE means the peer is gone.
    pub fn endpoint_closed(&mut self, ep: EpId, why: &str, now: Micros) {
        let Some(e) = self.eps.get(&ep) else {
            return;
        };
        if e.closing
            .is_some_and(|c| c.got_close && c.got_ack && c.flushed)
        {
            self.check_closed(ep, now);
            return;
        }
        let (peer, phase, clean) = (e.peer, e.phase, e.bye);
        // The peer finalized: answer with our BYE (best effort: it only tells the peer that
        // our EOF is a clean one too) in case we are not closing ourselves.
        self.forget(ep, clean);
        if let (Phase::Up, Some(peer)) = (phase, peer) {
            self.ud_close(peer);
            self.stats.closed += 1;
            self.policy.closed(peer, now);
            self.run_policy(now);
            if clean {
                let why = format!("rank {peer} has closed its connections in MPI_Finalize");
                self.fail(peer, FailKind::Finalized, why);
            } else {
                let why = format!(
                    "rank {peer} is gone: its connection was lost ({why}) before it finalized"
                );
                self.fail(peer, FailKind::Aborted, why);
            }
        } else if let Some(peer) = peer {
            self.peers.entry(peer).or_default().last_error = Some(why.to_string());
        }
        if let Some(cm) = self.cm.as_mut() {
            cm.socket_closed(ep, now);
        }
        self.run(now);
    }

    /// The driver refused a connection for want of descriptors (or memory) after reading its
    /// first bytes `h`. When they are a member's hello, that peer is trying to reach us and
    /// may give up (every retry refused here) while we wait for its messages, with nothing
    /// left to tell us (no connection ever existed): unless a connection to it comes up
    /// first, it fails here too when its retries would be over.
    pub fn refused(&mut self, h: &[u8], why: &str, now: Micros) {
        let Some(secret) = self.secret else {
            return;
        };
        let size = self.cfg.handshake.job_size;
        let Ok(w) = wire::decode_prefix(h, secret, self.rank, size) else {
            return;
        };
        let p = self.peers.entry(w.src).or_default();
        if w.kind != wire::Kind::Hello || w.src == self.rank || p.ep.is_some() || p.failed.is_some()
        {
            return;
        }
        let hs = &self.cfg.handshake;
        let wait = hs.hello_wait * u64::from(hs.max_retries + 1);
        let why = format!("it dialed, but this process could not accept its connections ({why})");
        // (Keeps an earlier deadline: ud's, or the first refusal's.)
        self.awaiting
            .entry(w.src)
            .or_insert((now + wait, String::new()))
            .1 = why;
    }

    /// A `ud` handshake datagram from the channel. A peer's request waits (dropped; the peer
    /// repeats it) while the budget has no room for it.
    pub fn datagram(&mut self, b: &[u8], now: Micros) {
        let (Some(secret), Some(ud)) = (self.secret, self.ud.as_mut()) else {
            self.stats.strangers += 1;
            return;
        };
        let size = self.cfg.handshake.job_size;
        let req = wire::decode_prefix(b, secret, self.rank, size)
            .ok()
            .filter(|w| w.kind == wire::Kind::Req)
            .map(|w| w.src);
        let fresh = req.filter(|&src| ud.state(src) == PeerState::Idle);
        if let Some(src) = fresh {
            if !self.policy.may_accept(src, now) {
                self.run(now);
                return;
            }
        }
        let ud = self.ud.as_mut().expect("checked");
        let before = ud.stats().drops.total();
        ud.handle_datagram(b, now);
        self.stats.strangers += ud.stats().drops.total() - before;
        if let Some(src) = fresh {
            if ud.state(src) == PeerState::Idle {
                self.policy.release(src, now); // not a live request after all
            }
        }
        self.run(now);
    }

    /// Adaptive: every datagram to `peer` is acknowledged (the driver checks the peers of
    /// [`Manager::draining`]); its connection takes over.
    pub fn datagrams_drained(&mut self, peer: Proc, now: Micros) {
        if !self.draining.remove(&peer) {
            return;
        }
        self.policy.datagrams_drained(peer);
        self.run(now);
        if let Some(ep) = self.peers.get(&peer).and_then(|p| p.ep) {
            self.actions.push_back(Action::Poke { ep });
        }
    }

    /// Fires the timers that are due.
    pub fn handle_timeout(&mut self, now: Micros) {
        let due: Vec<Proc> = self
            .awaiting
            .iter()
            .filter(|&(_, &(t, _))| t <= now)
            .map(|(&p, _)| p)
            .collect();
        for peer in due {
            let Some((_, why)) = self.awaiting.remove(&peer) else {
                continue;
            };
            let up = self
                .cm
                .as_ref()
                .is_some_and(|c| matches!(c.state(peer), PeerState::Connected(_)));
            if !up {
                self.peers.entry(peer).or_default().last_error = Some(why);
                self.ud_close(peer);
                self.setup_failed(peer, self.cfg.handshake.max_retries, now);
            }
        }
        if let Some(cm) = self.cm.as_mut() {
            if cm.poll_timeout().is_some_and(|t| t <= now) {
                cm.handle_timeout(now);
            }
        }
        if self.policy.poll_timeout().is_some_and(|t| t <= now) {
            self.policy.handle_timeout(now);
        }
        if let Some(ud) = self.ud.as_mut() {
            if ud.poll_timeout().is_some_and(|t| t <= now) {
                ud.handle_timeout(now);
            }
        }
        self.run(now);
    }

    /// When [`Manager::handle_timeout`] must next run. (Held hellos are the driver's to offer
    /// again; they have no deadline of their own.)
    pub fn poll_timeout(&self) -> Option<Micros> {
        self.cm
            .as_ref()
            .and_then(|c| c.poll_timeout())
            .into_iter()
            .chain(self.policy.poll_timeout())
            .chain(self.ud.as_ref().and_then(|u| u.poll_timeout()))
            .chain(self.awaiting.values().map(|&(t, _)| t).min())
            .min()
    }

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    // -----------------------------------------------------------------------------------------
    // Queries
    // -----------------------------------------------------------------------------------------

    /// The endpoint `peer`'s packets may be written on now: up, not waiting for an old one's
    /// close, and (adaptive) its datagrams all acknowledged.
    pub fn sendable(&self, peer: Proc) -> Option<EpId> {
        let p = self.peers.get(&peer)?;
        let ep = p.ep.filter(|_| p.closing.is_none())?;
        self.may_send(peer).then_some(ep)
    }

    fn may_send(&self, peer: Proc) -> bool {
        !self.cfg.datagrams || self.policy.is_open(peer)
    }

    pub fn endpoint(&self, ep: EpId) -> Option<EpView> {
        let e = self.eps.get(&ep)?;
        let peer_closing = e
            .peer
            .and_then(|p| self.peers.get(&p))
            .is_some_and(|p| p.closing.is_some());
        Some(EpView {
            peer: e.peer,
            outgoing: e.outgoing,
            phase: e.phase,
            closing: e.closing.is_some(),
            blocked: e.phase == Phase::Up && e.closing.is_none() && peer_closing,
        })
    }

    /// Why sends to `peer` fail, if they do.
    pub fn failure(&self, peer: Proc) -> Option<&Failure> {
        self.peers.get(&peer)?.failed.as_ref()
    }

    /// The connection to `peer` (up, or new and waiting for an old one's close).
    pub fn connection(&self, peer: Proc) -> Option<EpId> {
        self.peers.get(&peer)?.ep
    }

    /// The connection to `peer` being closed.
    pub fn closing_of(&self, peer: Proc) -> Option<EpId> {
        self.peers.get(&peer)?.closing
    }

    /// Some connection is still being closed.
    pub fn closing(&self) -> bool {
        self.peers.values().any(|p| p.closing.is_some())
    }

    /// Connections up to live peers, not closing (for the BYE at shutdown).
    pub fn up(&self) -> Vec<(Proc, EpId)> {
        self.peers
            .iter()
            .filter(|(_, p)| p.failed.is_none() && p.closing.is_none())
            .filter_map(|(&r, p)| p.ep.map(|e| (r, e)))
            .collect()
    }

    /// Accepted endpoints whose hello has not come, or waits for room: descriptors a flood
    /// of connections that never say hello could hold (the driver caps them).
    pub fn accepted_in_hello(&self) -> usize {
        self.eps
            .values()
            .filter(|e| !e.outgoing && e.phase == Phase::Hello)
            .count()
    }

    /// Accepted endpoints whose hello waits for room: offer their hellos again soon.
    pub fn held(&self) -> &[EpId] {
        &self.held
    }

    /// Adaptive: some connection waits for its peer's datagrams to be acknowledged.
    pub fn is_draining(&self) -> bool {
        !self.draining.is_empty()
    }

    /// Adaptive: peers whose connection waits for their datagrams to be acknowledged.
    pub fn draining(&self) -> Vec<Proc> {
        self.draining.iter().copied().collect()
    }

    /// Peers whose listen address came in a ud handshake (no card lookup for them).
    pub fn addrs_learned(&self) -> usize {
        self.addrs.len()
    }

    /// Peers the manager has state for.
    #[allow(dead_code)]
    pub fn peers_known(&self) -> usize {
        self.peers.len()
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    pub fn counters(&self) -> policy::Counters {
        self.policy.counters()
    }

    pub fn cm_stats(&self) -> handshake::Stats {
        self.cm.as_ref().map(|c| c.stats()).unwrap_or_default()
    }

    pub fn ud_stats(&self) -> Option<handshake::Stats> {
        self.ud.as_ref().map(|u| u.stats())
    }

    /// The cm machine's view of `peer` (tests).
    pub fn cm_state(&self, peer: Proc) -> PeerState {
        self.cm.as_ref().map_or(PeerState::Idle, |c| c.state(peer))
    }

    // -----------------------------------------------------------------------------------------
    // Decisions
    // -----------------------------------------------------------------------------------------

    /// Carries out what the machines ask for until nothing changes.
    fn run(&mut self, now: Micros) {
        loop {
            let busy = self.run_policy(now) | self.run_cm(now) | self.run_ud(now);
            if !busy {
                return;
            }
        }
    }

    /// Starts setting up a connection to `peer`: through ud (which settles the attempt, then
    /// its initiator dials), or cm directly.
    fn open(&mut self, peer: Proc, now: Micros) {
        if let Some(ud) = self.ud.as_mut() {
            let cm_idle = self
                .cm
                .as_ref()
                .is_some_and(|c| c.state(peer) == PeerState::Idle);
            if ud.state(peer) == PeerState::Idle && cm_idle {
                ud.connect(peer, now);
            }
            return;
        }
        if let Some(cm) = self.cm.as_mut() {
            if cm.state(peer) == PeerState::Idle {
                cm.connect(peer, now);
            }
        }
    }

    /// The connection to `peer` is over for the ud machine too (closed or lost).
    fn ud_close(&mut self, peer: Proc) {
        self.awaiting.remove(&peer);
        if let Some(ud) = self.ud.as_mut() {
            ud.close(peer);
        }
    }

    /// Carries out the policy's actions. Packets never leave the driver's queue (the policy
    /// holds placeholders): a `Flush` says where the queue goes now.
    fn run_policy(&mut self, now: Micros) -> bool {
        let mut opens = Vec::new();
        let mut busy = false;
        while let Some(a) = self.policy.poll_action() {
            busy = true;
            match a {
                policy::Action::Open { peer, .. } => opens.push(peer),
                policy::Action::Close { peer, .. } => {
                    if self.peers.get(&peer).is_some_and(|p| p.ep.is_some()) {
                        self.start_close(peer, false);
                    } else {
                        // Nothing to close after all (it broke meanwhile).
                        self.policy.closed(peer, now);
                    }
                }
                policy::Action::Flush {
                    peer,
                    via: Via::Datagram,
                    ..
                } if self.cfg.datagrams => self.actions.push_back(Action::Flush {
                    peer,
                    via: Via::Datagram,
                }),
                policy::Action::Flush { peer, .. } => self.actions.push_back(Action::Flush {
                    peer,
                    via: Via::Connection,
                }),
                // The driver's queue is dropped with the peer's failure.
                policy::Action::Failed { .. } => {}
            }
        }
        for peer in opens {
            self.open(peer, now);
        }
        busy
    }

    /// Carries out what the ud machine asks for: its datagrams, and (as the initiator of a
    /// settled attempt) the dial whose hello names it.
    fn run_ud(&mut self, now: Micros) -> bool {
        let mut busy = false;
        loop {
            let Some(ud) = self.ud.as_mut() else {
                return busy;
            };
            if let Some(t) = ud.poll_transmit() {
                self.actions.push_back(Action::Datagram {
                    to: t.to,
                    bytes: t.bytes,
                });
                busy = true;
                continue;
            }
            let Some(ev) = ud.poll_event() else {
                return busy;
            };
            busy = true;
            match ev {
                Event::Connected {
                    peer,
                    attempt,
                    addr,
                } => {
                    if !addr.is_empty() {
                        self.addrs.insert(peer, addr);
                    }
                    if attempt.initiator == self.rank {
                        if let Some(cm) = self.cm.as_mut() {
                            cm.connect_attempt(peer, attempt.gen);
                        }
                    } else {
                        // The peer dials (with its retries); give it as long as those take.
                        let hs = &self.cfg.handshake;
                        let wait = hs.hello_wait * u64::from(hs.max_retries + 1);
                        let why = "it agreed to connect over datagrams but never dialed".into();
                        self.awaiting.insert(peer, (now + wait, why));
                    }
                }
                Event::Failed { peer, retries } => self.setup_failed(peer, retries, now),
                // The connection ends through the close protocol (or breaks) on its own.
                Event::Closed { .. } | Event::Superseded { .. } => {}
            }
        }
    }

    /// Carries out what the cm machine asks for and reacts to its events.
    fn run_cm(&mut self, now: Micros) -> bool {
        let mut busy = false;
        loop {
            let Some(cm) = self.cm.as_mut() else {
                return busy;
            };
            if let Some(a) = cm.poll_action() {
                busy = true;
                match a {
                    handshake::Action::Connect { sock, peer } => {
                        self.eps.insert(
                            sock,
                            Ep {
                                peer: Some(peer),
                                outgoing: true,
                                phase: Phase::Connecting,
                                bye: false,
                                closing: None,
                            },
                        );
                        let addr = self.addrs.get(&peer).cloned();
                        self.actions.push_back(Action::Dial {
                            ep: sock,
                            peer,
                            addr,
                        });
                    }
                    handshake::Action::Send { sock, bytes } => {
                        if self.eps.contains_key(&sock) {
                            self.actions.push_back(Action::Write { ep: sock, bytes });
                        }
                    }
                    // A refusal's answer goes out before the close (the driver writes pending
                    // handshake bytes first).
                    handshake::Action::Close { sock } => self.forget(sock, false),
                }
                continue;
            }
            let Some(ev) = cm.poll_event() else {
                return busy;
            };
            busy = true;
            match ev {
                Event::Connected { peer, attempt, .. } => self.cm_connected(peer, attempt, now),
                Event::Failed { peer, retries } => {
                    self.ud_close(peer);
                    self.setup_failed(peer, retries, now);
                }
                // The endpoint is already gone (endpoint_closed); failure was decided there.
                Event::Closed { .. } | Event::Superseded { .. } => {}
            }
        }
    }

    fn cm_connected(&mut self, peer: Proc, attempt: AttemptId, now: Micros) {
        if let Some(ud) = self.ud.as_mut() {
            // The connection itself shows the initiator had our reply.
            ud.confirm_by_traffic(peer, attempt);
        }
        let Some(ep) = self.cm.as_ref().and_then(|c| c.socket_of(peer)) else {
            return;
        };
        if self.peers.get(&peer).is_some_and(|p| p.failed.is_some()) {
            // We gave up on this peer (its operations failed here): no connection now, so it
            // loses this one and gives up on us too, instead of waiting for messages we will
            // never send.
            if let Some(cm) = self.cm.as_mut() {
                cm.close(peer);
            }
            return;
        }
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        e.phase = Phase::Up;
        e.peer = Some(peer);
        if e.outgoing {
            self.stats.opened += 1;
        } else {
            self.stats.accepted += 1;
        }
        // The dial we waited for (ud) came.
        self.awaiting.remove(&peer);
        let p = self.peers.entry(peer).or_default();
        p.ep = Some(ep);
        // Up once is settled for MPI_Init: under a budget smaller than the peers (a low
        // `ulimit -n`) the policy may close it again at once.
        self.init_peers.retain(|&q| q != peer);
        if p.closing.is_none() {
            self.policy_connected(peer, false, now);
        }
        // (While the old connection still drains this one waits: `check_closed`.)
        self.actions.push_back(Action::Poke { ep });
    }

    /// The policy's view of a new connection. Adaptive: it carries packets only once the
    /// peer's datagrams are all acknowledged, which the driver reports (`datagrams_drained`).
    fn policy_connected(&mut self, peer: Proc, replaced: bool, now: Micros) {
        let in_flight = usize::from(self.adaptive());
        if replaced {
            self.policy.replaced(peer, in_flight, now);
        } else {
            self.policy.connected(peer, in_flight, now);
        }
        if self.adaptive() && !self.policy.is_open(peer) {
            self.draining.insert(peer);
        }
    }

    /// Setting up a connection to `peer` failed for good.
    fn setup_failed(&mut self, peer: Proc, retries: u32, now: Micros) {
        self.policy.failed(peer, now);
        self.run_policy(now);
        if self.adaptive() {
            // The datagrams still reach the peer; no connection then.
            self.actions.push_back(Action::Flush {
                peer,
                via: Via::Datagram,
            });
            return;
        }
        let p = self.peers.entry(peer).or_default();
        let last = p.last_error.clone().unwrap_or_else(|| "no answer".into());
        // As a peer found dead: sends to it and receives from it fail (as udp does for a peer
        // that never answers).
        self.fail(
            peer,
            FailKind::Aborted,
            format!("cannot connect to rank {peer} after {retries} retries: {last}"),
        );
    }

    fn fail(&mut self, peer: Proc, kind: FailKind, why: String) {
        let p = self.peers.entry(peer).or_default();
        if p.failed.is_none() {
            let failure = Failure { kind, why };
            p.failed = Some(failure.clone());
            self.actions.push_back(Action::Fail { peer, failure });
        }
    }

    /// Starts closing the connection to `peer`: by our decision (the policy's `Close`), or
    /// answering the peer's CLOSE (`answer`). The cm machine lets go of the connection at
    /// once, so a new attempt from either side may start while this one drains.
    fn start_close(&mut self, peer: Proc, answer: bool) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        let (Some(ep), None) = (p.ep, p.closing) else {
            return;
        };
        p.ep = None;
        p.closing = Some(ep);
        if let Some(cm) = self.cm.as_mut() {
            cm.detach(peer);
        }
        self.ud_close(peer);
        let e = self.eps.get_mut(&ep).expect("a peer's endpoint is known");
        e.closing = Some(Closing {
            got_close: answer,
            got_ack: false,
            flushed: false,
        });
        // Adaptive: a connection still waiting for the peer's datagrams must not carry the
        // packets queued behind them (they would overtake them); they go the datagrams' way
        // once the close is over (`Policy::closed`).
        // (Only adaptive's: elsewhere packets the policy routed to the connection wait in the
        // driver's queue alone, and must go on it.)
        let carry = !(self.draining.remove(&peer) && self.adaptive());
        self.actions.push_back(Action::StartClose {
            peer,
            ep,
            answer,
            carry,
        });
    }

    /// Finishes the close of `ep` once both sides are done with it.
    fn check_closed(&mut self, ep: EpId, now: Micros) {
        let Some(e) = self.eps.get(&ep) else {
            return;
        };
        let done = e
            .closing
            .is_some_and(|c| c.got_close && c.got_ack && c.flushed);
        let Some(peer) = e.peer.filter(|_| done) else {
            return;
        };
        self.forget(ep, false);
        self.stats.closed += 1;
        match self.peers.get(&peer).and_then(|p| p.ep) {
            Some(next) => {
                // The peer's new connection takes over the old one's slot, and what it
                // brought meanwhile is read now, after everything the old one carried.
                self.policy_connected(peer, true, now);
                self.actions.push_back(Action::Resume { ep: next });
                self.actions.push_back(Action::Poke { ep: next });
            }
            None => self.policy.closed(peer, now),
        }
        self.run(now);
    }

    /// Forgets an endpoint and tells the driver to close it.
    fn forget(&mut self, ep: EpId, bye: bool) {
        let Some(e) = self.eps.remove(&ep) else {
            return;
        };
        self.held.retain(|&x| x != ep);
        if let Some(p) = e.peer.and_then(|peer| self.peers.get_mut(&peer)) {
            if p.ep == Some(ep) {
                p.ep = None;
            }
            if p.closing == Some(ep) {
                p.closing = None;
            }
        }
        self.actions.push_back(Action::Close { ep, bye });
    }
}
