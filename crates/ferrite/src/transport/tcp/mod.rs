//! The tcp transport: one nonblocking socket per connected pair, opened on demand.
//!
//! This file is sockets, epoll and framing; every decision about connections is the
//! connection manager's (`crate::conn::manager::Manager`), which it drives with socket events
//! and whose actions it carries out. Each process listens on one socket (FERRITE_TCP_IF) and
//! publishes its address as a business card (`card.rs`). The first packet to a peer starts a
//! connection through the manager's `cm` machine: the dialer sends a hello (job secret,
//! rank, attempt), the acceptor answers; when both dial at once the higher rank's attempt
//! survives. Packets wait in a per-peer FIFO until the connection is up and only go out on a
//! socket whose hello was answered, so nothing sent on a losing socket can be lost or reordered.
//! Packets are length-prefixed frames written with vectored sends from a bounded queue, so
//! `try_send` never blocks. The transport's own epoll set (listener and sockets) is its wake fd.
//!
//! Connections close and reopen (FERRITE_CONN_MAX evicts the least recently used; adaptive
//! closes idle ones): each side sends CLOSE after its last frame and answers the peer's CLOSE
//! with CLOSE_ACK; the socket goes once both sides have both, so nothing in flight is lost, and
//! packets posted meanwhile wait for a new connection, which is read only after the old one
//! ended. FERRITE_CONN=adaptive sends over a udp `Channel` until a peer got
//! FERRITE_CONN_THRESHOLD messages, then switches to a connection once every datagram to it is
//! acknowledged (the channel acknowledges only what it delivered), so nothing is reordered.

pub mod card;
pub mod conn;
pub mod listener;

use super::timer::Timer;
use super::{Proc, Transport, TransportStats};
use crate::conn::handshake;
use crate::conn::manager::{self, Action, EpId, FailKind, Failure, Manager, Phase, HELLO_LEN};
use crate::conn::policy;
use crate::conn::Micros;
use crate::runtime::config;
use crate::terr;
use crate::transport::error::{Error, Kind, TResult};
use crate::transport::udp::{Channel, Datagrams};
use card::Board;
use conn::{Filled, Frame, RecvBuf, SendQueue};
use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Address to listen on (FERRITE_TCP_IF).
    pub ip: IpAddr,
    /// Largest packet (FERRITE_TCP_MAX_PACKET): a rendezvous fragment.
    pub max_packet: usize,
    /// Largest eager packet (FERRITE_TCP_EAGER_PACKET, at most `max_packet`).
    pub eager_packet: usize,
    /// Unwritten bytes queued per peer before `try_send` says "no room" (FERRITE_TCP_SENDQ).
    pub sendq_bytes: usize,
    /// How long MPI_Finalize waits for peers to take the last bytes (FERRITE_TCP_LINGER_MS).
    pub linger_ms: u64,
    /// Connection attempts to a peer before it counts as failed (FERRITE_TCP_CONNECT_RETRIES).
    pub connect_retries: u32,
    /// Which peers get a connection when (FERRITE_CONN; adaptive is refused: it needs udp).
    pub policy: policy::Kind,
    /// Most connections open at once (FERRITE_CONN_MAX; 0 there: from the open-file limit).
    pub max_conns: usize,
    /// Adaptive: messages to a peer over datagrams before its connection (FERRITE_CONN_THRESHOLD).
    pub threshold: u64,
    /// Adaptive: a connection unused this long closes; 0: never (FERRITE_CONN_IDLE_MS).
    pub idle_ms: u64,
    /// How connections are set up (FERRITE_CONN_SETUP): `cm` alone, or `ud` deciding the
    /// attempt over the datagram channel first.
    pub setup: policy::Mechanism,
}

impl TcpConfig {
    pub fn from_knobs() -> TResult<TcpConfig> {
        let spec: String = config::get("FERRITE_TCP_IF");
        let ip =
            listener::resolve_if(&spec).map_err(|e| terr!(InvalidArg, "tcp transport: {e}"))?;
        let max_packet: usize = config::get("FERRITE_TCP_MAX_PACKET");
        if !(64..(1 << 30)).contains(&max_packet) {
            return Err(terr!(
                InvalidArg,
                "FERRITE_TCP_MAX_PACKET={max_packet}: must be at least 64 and below 1 GiB"
            ));
        }
        let eager_packet = config::get::<usize>("FERRITE_TCP_EAGER_PACKET").clamp(64, max_packet);
        Ok(TcpConfig {
            ip,
            max_packet,
            eager_packet,
            sendq_bytes: config::get("FERRITE_TCP_SENDQ"),
            linger_ms: config::get("FERRITE_TCP_LINGER_MS"),
            connect_retries: config::get("FERRITE_TCP_CONNECT_RETRIES"),
            policy: conn_policy()?,
            max_conns: conn_max(),
            threshold: config::get::<u64>("FERRITE_CONN_THRESHOLD").max(1),
            idle_ms: config::get("FERRITE_CONN_IDLE_MS"),
            setup: conn_setup()?,
        })
    }
}

/// FERRITE_CONN_MAX, or half the soft open-file limit (less a reserve) when it is 0.
pub fn conn_max() -> usize {
    let max: usize = config::get("FERRITE_CONN_MAX");
    if max > 0 {
        return max;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscall writing into `lim`.
    let nofile = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    policy::max_from_fd_limit(nofile)
}

/// FERRITE_CONN, checked (adaptive embeds a udp `Channel`, see `Tcp::with_channel`).
pub fn conn_policy() -> TResult<policy::Kind> {
    let v: String = config::get("FERRITE_CONN");
    v.parse().map_err(|e: String| terr!(InvalidArg, "{e}"))
}

/// FERRITE_CONN_SETUP, checked (`ud` also embeds a udp `Channel`).
pub fn conn_setup() -> TResult<policy::Mechanism> {
    let v: String = config::get("FERRITE_CONN_SETUP");
    v.parse().map_err(|e: String| terr!(InvalidArg, "{e}"))
}

/// How long cm waits for a hello: 2 s, longer with many ranks per CPU (a rank among 128 per
/// CPU, dialing 255 peers at once under static, took over 2 s to write some hellos, and every
/// such socket closed and was dialed again: thousands of retries at 256 ranks on 2 CPUs).
pub fn hello_wait(job_size: u32) -> Micros {
    // SAFETY: plain query.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u64;
    2_000_000 * (u64::from(job_size) / (16 * cpus)).clamp(1, 15)
}

/// One socket: the stream and its bytes. Where it is in its life (dialing, hello, up,
/// closing) is the connection manager's.
struct Sock {
    stream: TcpStream,
    /// Handshake bytes not yet written (they precede any frame).
    ctl: Vec<u8>,
    rbuf: RecvBuf,
    /// Current epoll interest.
    events: u32,
    /// Once closing: the frames still to go on this connection (the peer's queue moved here),
    /// ending with our CLOSE (and CLOSE_ACK).
    cq: SendQueue,
}

#[derive(Default)]
struct Peer {
    q: SendQueue,
    /// A packet went to or came from this peer over a connection (for the report's
    /// utilization: connections used / opened).
    used: bool,
}

pub struct Tcp {
    rank: Proc,
    size: u32,
    cfg: TcpConfig,
    listener: listener::Listener,
    epoll: RawFd,
    board: Box<dyn Board>,
    /// Every decision about connections: when they open and close, set-up, the close
    /// protocol, adaptive's switch, the budget, failures.
    mgr: Manager,
    socks: HashMap<EpId, Sock>,
    peers: HashMap<Proc, Peer>,
    /// Packets to ourselves (when `self` is not in FERRITE_TRANSPORTS).
    own: VecDeque<Vec<u8>>,
    /// New connections whose old one finished closing: read what they buffered meanwhile.
    resume: Vec<EpId>,
    /// Peers found dead (connection lost without BYE), not yet reported (`take_failures`).
    dead: Vec<(Proc, String)>,
    /// Adaptive and ud: the datagram channel (traffic to peers without a connection,
    /// handshakes) and what waits for its window.
    chan: Option<Datagrams>,
    /// Fires (readable in the epoll set) when the manager's next timer is due, so a process
    /// blocked in the progress engine redials and gives up on time.
    timer: Timer,
    /// Accepting failed (out of resources): the listener is out of the epoll set until then.
    accept_paused: Option<Micros>,
    /// Accept ran out of descriptors and paused REFUSE_DELAY: refuse what waits now.
    refuse_now: bool,
    t0: Instant,
    stats: TransportStats,
}

const LISTENER: u64 = u64::MAX;
/// How long the connections waiting in the backlog get to show their hellos before a process
/// out of descriptors refuses them (their dialers write it as soon as their connect completed).
const REFUSE_DELAY: Micros = 50_000;
/// The epoll token of the adaptive policy's datagram channel.
const CHANNEL: u64 = u64::MAX - 1;
/// The epoll token of the timerfd (the manager's timers).
const TIMER: u64 = u64::MAX - 2;
/// How often a hello held back for the budget is offered again.
const HELD_RECHECK: Micros = 10_000;
/// Accepted connections that may wait for their hellos at once, at least (else the budget):
/// a small budget must not refuse its own peers' dials while they say hello.
const MIN_HELLO_SLOTS: usize = 16;
/// How long accepting pauses after it failed for want of descriptors or memory.
const ACCEPT_PAUSE: Micros = 20_000;
/// A connection's receive buffer starts small (idle connections stay cheap) and grows to the
/// largest frame it has had to hold.
const RECV_BUF_INITIAL: usize = 8 << 10;

/// The transport's error for a peer the manager gave up on.
fn failure_err(f: &Failure) -> Error {
    let kind = match f.kind {
        FailKind::Aborted => Kind::PeerFailed,
        FailKind::Finalized => Kind::PeerClosed,
    };
    Error::new(kind, format!("tcp transport: {}", f.why))
}

impl Tcp {
    /// Listens and publishes this process's card (before MPI_Init's barrier).
    pub fn new(rank: Proc, size: u32, cfg: TcpConfig, board: Box<dyn Board>) -> TResult<Tcp> {
        let listener = listener::Listener::bind(cfg.ip).map_err(|e| {
            let msg = format!(
                "tcp transport: rank {rank} cannot listen on {}: {e}",
                cfg.ip
            );
            Error::os(&e, msg)
        })?;
        let timer = Timer::new()
            .map_err(|e| Error::os(&e, format!("tcp transport: timerfd_create failed: {e}")))?;
        // SAFETY: plain syscall; the fd is owned by the Tcp and closed in Drop.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::os(
                &e,
                format!("tcp transport: epoll_create1 failed: {e}"),
            ));
        }
        let mut hs = handshake::Config::new(size);
        hs.max_retries = cfg.connect_retries;
        hs.hello_wait = hello_wait(size);
        let mcfg = manager::Config {
            policy: policy::Config {
                kind: cfg.policy,
                threshold_msgs: cfg.threshold,
                threshold_bytes: 0,
                max_open: cfg.max_conns.max(1),
                idle: cfg.idle_ms.saturating_mul(1000),
                // Under the cm machine's 2 s for an accepted socket's hello.
                hold_max: 1_000_000,
                residency: config::get::<u64>("FERRITE_CONN_RESIDENCY_MS").saturating_mul(1000),
            },
            setup: cfg.setup,
            handshake: hs,
            datagrams: cfg.policy == policy::Kind::Adaptive || cfg.setup == policy::Mechanism::Ud,
        };
        let mut tcp = Tcp {
            rank,
            size,
            cfg,
            listener,
            epoll,
            board,
            mgr: Manager::new(rank, mcfg),
            socks: HashMap::new(),
            peers: HashMap::new(),
            own: VecDeque::new(),
            resume: Vec::new(),
            dead: Vec::new(),
            chan: None,
            timer,
            accept_paused: None,
            refuse_now: false,
            t0: Instant::now(),
            stats: TransportStats::default(),
        };
        let fd = tcp.listener.sock.as_raw_fd();
        tcp.epoll_ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32, LISTENER)
            .map_err(|e| terr!(Other, "tcp transport: epoll_ctl: {e}"))?;
        tcp.epoll_ctl(
            libc::EPOLL_CTL_ADD,
            tcp.timer.fd(),
            libc::EPOLLIN as u32,
            TIMER,
        )
        .map_err(|e| terr!(Other, "tcp transport: epoll_ctl: {e}"))?;
        let addr = tcp.listener.addr;
        tcp.board.put(rank, addr)?;
        Ok(tcp)
    }

    /// Adaptive: traffic to peers without a connection goes over `chan` (required then).
    pub fn with_channel(mut self, chan: Option<Channel>) -> TResult<Tcp> {
        if self.needs_channel() && chan.is_none() {
            return Err(terr!(
                InvalidArg,
                "tcp transport: FERRITE_CONN=adaptive and FERRITE_CONN_SETUP=ud need a datagram \
                 channel"
            ));
        }
        if let Some(c) = &chan {
            self.epoll_ctl(
                libc::EPOLL_CTL_ADD,
                c.wake_fd(),
                libc::EPOLLIN as u32,
                CHANNEL,
            )
            .map_err(|e| terr!(Other, "tcp transport: epoll_ctl: {e}"))?;
        }
        self.chan = chan.map(Datagrams::new);
        Ok(self)
    }

    /// Whether this configuration runs a datagram channel (adaptive traffic, ud set-up).
    pub fn needs_channel(&self) -> bool {
        self.cfg.policy == policy::Kind::Adaptive || self.cfg.setup == policy::Mechanism::Ud
    }

    /// The manager is started once the job secret is known (after MPI_Init's barrier).
    fn start(&mut self) -> TResult<()> {
        if !self.mgr.started() {
            let secret = self.board.secret()?;
            let addr = self.listener.addr.to_string().into_bytes();
            self.mgr.start(secret, addr);
        }
        Ok(())
    }

    /// Carries out the manager's actions, then lets adaptive connections whose peers have
    /// every datagram take over.
    fn run_mgr(&mut self) {
        loop {
            while let Some(a) = self.mgr.poll_action() {
                self.do_action(a);
            }
            if !self.mgr.is_draining() {
                return;
            }
            let drained = match &self.chan {
                Some(d) => d.drained(&self.mgr),
                None => self.mgr.draining(),
            };
            if drained.is_empty() {
                return;
            }
            let now = self.now();
            for peer in drained {
                self.mgr.datagrams_drained(peer, now);
            }
        }
    }

    fn do_action(&mut self, a: Action) {
        match a {
            Action::Dial { ep, peer, addr } => self.dial(ep, peer, addr),
            Action::Write { ep, bytes } => {
                if let Some(s) = self.socks.get_mut(&ep) {
                    s.ctl.extend_from_slice(&bytes);
                    self.flush_sock(ep);
                }
            }
            Action::Close { ep, bye } => {
                // A refusal's answer is written before closing (best effort: a hello answer
                // always fits an empty socket buffer), and the BYE answering a peer's.
                if let Some(s) = self.socks.get(&ep) {
                    let fd = s.stream.as_raw_fd();
                    if !s.ctl.is_empty() {
                        let _ = conn::sendv(fd, &[IoSlice::new(&s.ctl)]);
                    }
                    if bye {
                        let _ = conn::sendv(fd, &[IoSlice::new(&conn::BYE.to_le_bytes())]);
                    }
                }
                self.drop_sock(ep);
            }
            Action::Datagram { to, bytes } => {
                if let Some(d) = self.chan.as_mut() {
                    // A failure is the channel's to report (`take_failures`); ud retransmits.
                    let _ = d.chan.send_control(to, &bytes);
                }
            }
            Action::Flush {
                peer,
                via: policy::Via::Datagram,
            } => self.queue_to_datagrams(peer),
            Action::Flush {
                peer,
                via: policy::Via::Connection,
            } => {
                if let Some(ep) = self.mgr.sendable(peer) {
                    self.flush_sock(ep);
                }
            }
            Action::StartClose {
                peer,
                ep,
                answer,
                carry,
            } => {
                let p = self.peers.entry(peer).or_default();
                let q = if carry {
                    std::mem::take(&mut p.q)
                } else {
                    SendQueue::default()
                };
                if let Some(s) = self.socks.get_mut(&ep) {
                    s.cq = q;
                    if answer {
                        s.cq.push(conn::CLOSE_ACK.to_le_bytes().to_vec());
                    }
                    s.cq.push(conn::CLOSE.to_le_bytes().to_vec());
                }
                self.flush_sock(ep);
            }
            Action::CloseAck { ep } => {
                if let Some(s) = self.socks.get_mut(&ep) {
                    s.cq.push(conn::CLOSE_ACK.to_le_bytes().to_vec());
                }
            }
            Action::Resume { ep } => self.resume.push(ep),
            Action::Poke { ep } => self.flush_sock(ep),
            Action::Fail { peer, failure } => {
                if failure.kind == FailKind::Aborted {
                    self.dead.push((peer, failure.why));
                }
                self.peers.entry(peer).or_default().q.clear();
            }
        }
    }

    /// Opens a socket for the manager's dial: to the address ud learned, else the peer's card.
    fn dial(&mut self, ep: EpId, peer: Proc, addr: Option<Vec<u8>>) {
        let known = addr
            .and_then(|a| String::from_utf8(a).ok())
            .and_then(|a| a.parse::<SocketAddr>().ok())
            .map(|a| Ok(Some(a)));
        let res = match known.unwrap_or_else(|| self.board.get(peer)) {
            Ok(Some(addr)) => {
                listener::connect(addr).map_err(|e| match listener::out_of_resources(&e) {
                    Some(hint) => format!("connect to {addr}: {e} ({hint})"),
                    None => format!("connect to {addr}: {e}"),
                })
            }
            Ok(None) => Err(format!("rank {peer} published no tcp business card")),
            Err(e) => Err(e.msg),
        };
        match res {
            Ok(stream) => {
                let s = Sock {
                    stream,
                    ctl: Vec::new(),
                    rbuf: RecvBuf::new(RECV_BUF_INITIAL),
                    events: (libc::EPOLLIN | libc::EPOLLOUT) as u32,
                    cq: SendQueue::default(),
                };
                self.add_sock(ep, s);
            }
            Err(why) => {
                let now = self.now();
                self.mgr.endpoint_closed(ep, &why, now);
            }
        }
    }

    /// Adaptive: the packets waiting in `peer`'s queue go over datagrams instead, in order.
    fn queue_to_datagrams(&mut self, peer: Proc) {
        let (Some(d), Some(p)) = (self.chan.as_mut(), self.peers.get_mut(&peer)) else {
            return;
        };
        d.push(
            peer,
            p.q.take_frames()
                .into_iter()
                .map(|f| f[conn::HEADER..].to_vec()),
        );
    }

    /// The address peers connect to.
    pub fn addr(&self) -> SocketAddr {
        self.listener.addr
    }

    fn now(&self) -> Micros {
        self.t0.elapsed().as_micros() as Micros
    }

    fn epoll_ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> std::io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: both fds are open; ev is a valid event.
        if unsafe { libc::epoll_ctl(self.epoll, op, fd, &mut ev) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The error for a send to a failed peer.
    fn failed_err(&self, to: Proc) -> Option<Error> {
        self.mgr.failure(to).map(failure_err)
    }

    /// Registers a new socket with epoll.
    fn add_sock(&mut self, ep: EpId, sock: Sock) {
        let fd = sock.stream.as_raw_fd();
        let ev = sock.events;
        self.socks.insert(ep, sock);
        if let Err(e) = self.epoll_ctl(libc::EPOLL_CTL_ADD, fd, ev, ep.0) {
            // Without epoll the socket would never make progress: treat it as broken.
            let now = self.now();
            self.mgr
                .endpoint_closed(ep, &format!("epoll_ctl: {e}"), now);
        }
    }

    /// Forgets and closes a socket (after the manager's `Close`).
    fn drop_sock(&mut self, ep: EpId) {
        if let Some(s) = self.socks.remove(&ep) {
            self.resume_accepting();
            let fd = s.stream.as_raw_fd();
            // Deregistering cannot fail for a registered fd; closing would remove it anyway.
            let _ = self.epoll_ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
        }
    }

    fn set_interest(&mut self, ep: EpId) {
        let (Some(s), Some(v)) = (self.socks.get(&ep), self.mgr.endpoint(ep)) else {
            return;
        };
        let queued = if v.closing {
            !s.cq.is_empty()
        } else {
            let peer = v.peer.filter(|_| v.phase == Phase::Up && !v.blocked);
            peer.is_some_and(|p| {
                self.mgr.sendable(p).is_some()
                    && self.peers.get(&p).is_some_and(|q| !q.q.is_empty())
            })
        };
        let want_out = v.phase == Phase::Connecting || !s.ctl.is_empty() || queued;
        // A new connection waits (unread, unwritten) until the old one has closed.
        let ev = if v.blocked {
            0
        } else {
            libc::EPOLLIN as u32 | if want_out { libc::EPOLLOUT as u32 } else { 0 }
        };
        if ev != s.events {
            let fd = s.stream.as_raw_fd();
            if self.epoll_ctl(libc::EPOLL_CTL_MOD, fd, ev, ep.0).is_ok() {
                self.socks.get_mut(&ep).expect("present").events = ev;
            }
        }
    }

    /// Writes pending handshake bytes, then (when up) the peer's frames, or (closing) what
    /// is left of the connection.
    fn flush_sock(&mut self, ep: EpId) {
        let (Some(s), Some(v)) = (self.socks.get_mut(&ep), self.mgr.endpoint(ep)) else {
            return;
        };
        let fd = s.stream.as_raw_fd();
        let mut broken = None;
        if !s.ctl.is_empty() {
            match conn::sendv(fd, &[IoSlice::new(&s.ctl)]) {
                Ok(n) => {
                    s.ctl.drain(..n);
                }
                Err(e) => broken = Some(e),
            }
        }
        let mut flushed = false;
        if broken.is_none() && s.ctl.is_empty() && v.closing {
            match s.cq.flush(fd) {
                Ok(_) => flushed = s.cq.is_empty(),
                Err(e) => broken = Some(e),
            }
        } else if broken.is_none() && s.ctl.is_empty() && v.phase == Phase::Up {
            let peer = v.peer.filter(|&p| self.mgr.sendable(p) == Some(ep));
            if let Some(p) = peer.and_then(|p| self.peers.get_mut(&p)) {
                if let Err(e) = p.q.flush(fd) {
                    broken = Some(e);
                }
            }
        }
        let now = self.now();
        if let Some(e) = broken {
            self.mgr
                .endpoint_closed(ep, &format!("send failed: {e}"), now);
            self.run_mgr();
            return;
        }
        if flushed {
            self.mgr.flushed(ep, now);
            self.run_mgr();
        }
        self.set_interest(ep);
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok(Some(stream)) => {
                    // Connections that never say hello (a stranger's flood, a port scan)
                    // must not take every descriptor the program may open: past as many
                    // waiting as the budget allows connections, refuse (a dialer of ours
                    // retries with backoff).
                    if self.mgr.accepted_in_hello() >= self.cfg.max_conns.max(MIN_HELLO_SLOTS) {
                        self.refuse(stream, "too many accepted connections wait for a hello");
                        continue;
                    }
                    let now = self.now();
                    // No secret to check a hello against: nobody can be admitted.
                    let ep = match self.start() {
                        Ok(()) => self.mgr.accepted(now),
                        Err(_) => None,
                    };
                    let Some(ep) = ep else {
                        self.stats.strangers_dropped += 1;
                        continue;
                    };
                    let s = Sock {
                        stream,
                        ctl: Vec::new(),
                        rbuf: RecvBuf::new(RECV_BUF_INITIAL),
                        events: libc::EPOLLIN as u32,
                        cq: SendQueue::default(),
                    };
                    self.add_sock(ep, s);
                    self.run_mgr();
                }
                Ok(None) => {
                    self.refuse_now = false;
                    return;
                }
                // Out of descriptors or socket memory: refuse what waits (its dialer
                // retries later), after a pause that lets the hellos arrive, each read first
                // so the manager knows who could not reach us.
                Err(e) if listener::out_of_resources(&e).is_some() => {
                    if !std::mem::replace(&mut self.refuse_now, true) {
                        self.pause_accepting(REFUSE_DELAY);
                        return;
                    }
                    let hint = listener::out_of_resources(&e).unwrap_or_default();
                    let why = format!("accept: {e} ({hint})");
                    if !self.refuse_one(&why) {
                        self.pause_accepting(ACCEPT_PAUSE);
                        return;
                    }
                }
                // Otherwise (another error): the connection stays in the backlog, its
                // dialer's hello unanswered (it retries, then gives up).
                Err(_) => {
                    self.pause_accepting(ACCEPT_PAUSE);
                    return;
                }
            }
        }
    }

    /// Takes the listener out of the epoll set for `pause` (it would stay readable: a busy
    /// loop); it comes back when a socket of ours closes or after the pause.
    fn pause_accepting(&mut self, pause: Micros) {
        let fd = self.listener.sock.as_raw_fd();
        if self.epoll_ctl(libc::EPOLL_CTL_MOD, fd, 0, LISTENER).is_ok() {
            self.accept_paused = Some(self.now() + pause);
        }
    }

    /// Takes the oldest waiting connection on the listener's spare descriptor, reads what
    /// it has of its hello (without waiting: a flood of silent strangers must not slow the
    /// refusals), closes it, and tells the manager. False when even that accept failed.
    fn refuse_one(&mut self, why: &str) -> bool {
        let Some(stream) = self.listener.refuse_one() else {
            return false;
        };
        self.refuse(stream, why);
        self.listener.restore_spare();
        true
    }

    /// Reads what an accepted `stream` has of its hello (without waiting), closes it, and
    /// tells the manager who could not reach us.
    fn refuse(&mut self, mut stream: TcpStream, why: &str) {
        self.stats.refused_no_fd += 1;
        let mut h = [0u8; HELLO_LEN];
        let mut got = 0;
        while got < HELLO_LEN {
            match std::io::Read::read(&mut stream, &mut h[got..]) {
                Ok(k) if k > 0 => got += k,
                _ => break,
            }
        }
        drop(stream);
        // (The manager checks the hello against the job secret.)
        if got == HELLO_LEN && self.start().is_ok() {
            let now = self.now();
            self.mgr.refused(&h, why, now);
            self.run_mgr();
        }
    }

    /// Reads what `ep` has, feeding hellos and close frames to the manager and delivering
    /// packets.
    fn read_sock(&mut self, ep: EpId, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let mut delivered = 0;
        // Bounded so one busy peer cannot hold the progress engine.
        let mut budget = 4 * self.cfg.max_packet.max(1 << 16);
        let max = self.cfg.max_packet;
        loop {
            let now = self.now();
            let (Some(s), Some(v)) = (self.socks.get_mut(&ep), self.mgr.endpoint(ep)) else {
                return delivered;
            };
            match (v.phase, v.peer) {
                (Phase::Connecting, _) => return delivered,
                (Phase::Hello, _) => {
                    // The manager may hold a peer's hello back while the budget has no room
                    // (the peer's dial just waits for our answer); it is offered again.
                    if let Some(h) = s.rbuf.peek(HELLO_LEN) {
                        if !self.mgr.hello(ep, h, now) {
                            self.run_mgr();
                            return delivered;
                        }
                        s.rbuf.take(HELLO_LEN);
                        self.run_mgr();
                        continue;
                    }
                }
                // A new connection waits for the old one's close.
                (Phase::Up, _) if v.blocked => return delivered,
                (Phase::Up, None) => return delivered,
                (Phase::Up, Some(peer)) => {
                    let mut bad = None;
                    let mut control = None;
                    let mut got = 0;
                    loop {
                        match s.rbuf.next_frame(max) {
                            Ok(Some(Frame::Packet(p))) => {
                                self.stats.packets_received += 1;
                                self.stats.bytes_received += p.len() as u64;
                                delivered += 1;
                                got += 1;
                                if !self.peers.get(&peer).is_some_and(|q| q.used) {
                                    self.peers.entry(peer).or_default().used = true;
                                }
                                deliver(peer, p);
                            }
                            Ok(Some(Frame::Bye)) => self.mgr.bye(ep),
                            Ok(Some(Frame::Close)) => {
                                control = Some(false);
                                break;
                            }
                            Ok(Some(Frame::CloseAck)) => {
                                control = Some(true);
                                break;
                            }
                            Ok(None) => break,
                            Err(len) => {
                                bad = Some(len);
                                break;
                            }
                        }
                    }
                    if got > 0 {
                        self.mgr.received(peer, now);
                    }
                    if let Some(ack) = control {
                        self.mgr.close_frame(ep, ack, now);
                        self.run_mgr();
                        continue;
                    }
                    if let Some(len) = bad {
                        self.stats.corrupt_dropped += 1;
                        let why = format!(
                            "a frame of {len} bytes exceeds FERRITE_TCP_MAX_PACKET={max} \
                             (set it the same for every rank)"
                        );
                        self.mgr.endpoint_closed(ep, &why, now);
                        self.run_mgr();
                        return delivered;
                    }
                    s.rbuf.compact();
                }
            }
            if budget == 0 {
                return delivered;
            }
            // A hello is read whole before anything else is parsed, so garbage from a
            // stranger never sizes the buffer; frame lengths were checked by next_frame.
            let need = match v.phase {
                Phase::Up => s.rbuf.need().min(conn::HEADER + max),
                _ => HELLO_LEN,
            };
            let why = match s.rbuf.fill(s.stream.as_raw_fd(), need) {
                Ok(Filled::Bytes(n)) => {
                    budget = budget.saturating_sub(n);
                    continue;
                }
                Ok(Filled::WouldBlock) => return delivered,
                Ok(Filled::Eof) => "closed by the peer".to_string(),
                Err(e) => format!("receive failed: {e}"),
            };
            self.mgr.endpoint_closed(ep, &why, now);
            self.run_mgr();
            return delivered;
        }
    }

    /// Our connect finished (or failed).
    fn connected(&mut self, ep: EpId) {
        let now = self.now();
        let Some(s) = self.socks.get_mut(&ep) else {
            return;
        };
        match s.stream.take_error() {
            Ok(None) => self.mgr.endpoint_connected(ep, now),
            Ok(Some(e)) | Err(e) => {
                self.mgr
                    .endpoint_closed(ep, &format!("connect failed: {e}"), now)
            }
        }
        self.run_mgr();
    }

    /// MPI_Init, after its barrier: asks for the policy's initial connections (all peers for
    /// static, ±2^k for partial) at once; `init_peers_connecting` says when they are settled.
    pub fn connect_init_peers(&mut self) -> TResult<()> {
        if self.mgr.init_peers().is_empty() {
            return Ok(());
        }
        self.start()?;
        let now = self.now();
        self.mgr.init(now);
        self.run_mgr();
        self.rearm();
        Ok(())
    }

    /// Some connection MPI_Init asked for has not been up yet and has not failed.
    pub fn init_peers_connecting(&self) -> bool {
        self.mgr.init_connecting()
    }

    /// Fires the manager's timers that are due (and the listener's pause).
    fn timers(&mut self) {
        let now = self.now();
        if self.accept_paused.is_some_and(|t| t <= now) {
            self.resume_accepting();
        }
        if self.mgr.poll_timeout().is_some_and(|t| t <= now) {
            self.mgr.handle_timeout(now);
            self.run_mgr();
        }
    }

    /// Sets the timerfd for the manager's next deadline (and a held hello's next offer).
    fn rearm(&mut self) {
        let now = self.now();
        let held = (!self.mgr.held().is_empty()).then_some(now + HELD_RECHECK);
        let next = self
            .mgr
            .poll_timeout()
            .into_iter()
            .chain(held)
            .chain(self.accept_paused)
            .min();
        self.timer.set(next, now);
    }

    /// Puts the listener back into the epoll set after a pause (`accept_all`).
    fn resume_accepting(&mut self) {
        if self.accept_paused.take().is_some() {
            let fd = self.listener.sock.as_raw_fd();
            // If this fails the listener stays paused; the next pause attempt retries.
            let _ = self.epoll_ctl(libc::EPOLL_CTL_MOD, fd, libc::EPOLLIN as u32, LISTENER);
        }
    }

    /// Unwritten bytes to peers (MPI_Finalize waits for none).
    pub fn pending_bytes(&self) -> usize {
        self.peers.values().map(|p| p.q.bytes()).sum::<usize>()
            + self.chan.as_ref().map_or(0, |d| d.backlog_bytes(None))
            + self.socks.values().map(|s| s.cq.bytes()).sum::<usize>()
    }

    /// Adaptive: datagrams are unacknowledged, acknowledgements owed, or data arrived lately.
    fn chan_pending(&self) -> bool {
        self.chan.as_ref().is_some_and(|d| !d.chan.settled())
    }

    /// Adaptive: delivers what came over datagrams and moves datagram traffic along.
    fn poll_channel(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let Some(d) = self.chan.as_mut() else {
            return 0;
        };
        let got = d.poll(deliver);
        self.stats.packets_received += got.packets;
        self.stats.bytes_received += got.bytes;
        for b in got.control {
            // The manager is made on first need (a peer's request may come before we sent).
            let _ = self.start();
            let now = self.now();
            self.mgr.datagram(&b, now);
            self.run_mgr();
        }
        let now = self.now();
        for p in got.from {
            self.mgr.received(p, now);
        }
        // Connections waiting for their datagrams' acknowledgement may take over.
        self.run_mgr();
        got.packets as usize
    }

    /// Drives every socket (accept, connect, handshakes, reads, writes), waiting up to
    /// `timeout_ms` for activity; returns the packets delivered.
    fn drive(&mut self, deliver: &mut dyn FnMut(Proc, &[u8]), timeout_ms: i32) -> usize {
        self.timers();
        // Adaptive: the channel's socket and timerfd are in our epoll set (CHANNEL below), so
        // it needs a pass here only for work no fd signals (its send backlog, a due timer);
        // polling it on every call cost a recvfrom and a timerfd read per progress call.
        let mut n = if self.chan.as_ref().is_some_and(|d| d.chan.busy()) {
            self.poll_channel(deliver)
        } else {
            0
        };
        for ep in std::mem::take(&mut self.resume) {
            n += self.read_sock(ep, deliver);
        }
        for ep in self.mgr.held().to_vec() {
            n += self.read_sock(ep, deliver);
        }
        // Sleep only when nothing waits on us (a held hello is offered again soon).
        let timeout_ms = if self.mgr.held().is_empty() || timeout_ms == 0 {
            timeout_ms
        } else {
            timeout_ms.clamp(0, 10)
        };
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: evs is valid for 64 events.
        let k = unsafe { libc::epoll_wait(self.epoll, evs.as_mut_ptr(), 64, timeout_ms) };
        for ev in evs.iter().take(k.max(0) as usize) {
            let (events, token) = (ev.events, ev.u64);
            if token == LISTENER {
                self.accept_all();
                continue;
            }
            if token == CHANNEL {
                n += self.poll_channel(deliver);
                continue;
            }
            if token == TIMER {
                // Its expirations cleared; the timers themselves run in `timers`.
                self.timer.drain();
                self.timers();
                for ep in self.mgr.held().to_vec() {
                    n += self.read_sock(ep, deliver);
                }
                continue;
            }
            let ep = EpId(token);
            let Some(v) = self
                .mgr
                .endpoint(ep)
                .filter(|_| self.socks.contains_key(&ep))
            else {
                continue;
            };
            if v.phase == Phase::Connecting {
                // Writable when the connect finished; ERR/HUP alone when it was refused.
                self.connected(ep);
            } else if events & libc::EPOLLOUT as u32 != 0 {
                self.flush_sock(ep);
            }
            if events & (libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
                n += self.read_sock(ep, deliver);
            }
        }
        self.rearm();
        n
    }
}

impl Transport for Tcp {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn max_packet(&self) -> usize {
        self.cfg.max_packet
    }

    fn eager_packet(&self) -> usize {
        self.cfg.eager_packet
    }

    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> TResult<bool> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.cfg.max_packet {
            return Err(terr!(
                InvalidArg,
                "tcp transport: a packet of {len} bytes to rank {to} exceeds the {}-byte limit",
                self.cfg.max_packet
            ));
        }
        if to >= self.size {
            return Err(terr!(
                InvalidArg,
                "tcp transport: rank {to} is not in a job of {} ranks",
                self.size
            ));
        }
        if to == self.rank {
            self.own.push_back(parts.concat());
            self.stats.packets_sent += 1;
            self.stats.bytes_sent += len as u64;
            return Ok(true);
        }
        if let Some(e) = self.failed_err(to) {
            return Err(e);
        }
        let p = self.peers.entry(to).or_default();
        let waiting = p.q.bytes() + self.chan.as_ref().map_or(0, |d| d.backlog_bytes(Some(to)));
        if waiting > 0 && waiting + conn::HEADER + len > self.cfg.sendq_bytes {
            self.stats.no_room += 1;
            return Ok(false);
        }
        // The manager keeps the LRU order and asks for the connection (making room under the
        // budget first); the packets themselves wait in the peer's queue, in order.
        let now = self.now();
        self.start()?;
        let via = self.mgr.send(to, len, now);
        self.run_mgr();
        if let Some(e) = self.failed_err(to) {
            return Err(e);
        }
        if let (policy::Via::Datagram, Some(d)) = (via, self.chan.as_mut()) {
            d.send(to, parts)?;
            self.stats.packets_sent += 1;
            self.stats.bytes_sent += len as u64;
            self.rearm();
            return Ok(true);
        }
        let usable = self.mgr.sendable(to);
        let p = self.peers.entry(to).or_default();
        p.used = true;
        let hdr = conn::header(len);
        let mut written = 0;
        if let (Some(ep), true) = (usable, p.q.is_empty()) {
            // Up and nothing waiting: straight from the caller's buffers.
            let s = &self.socks[&ep];
            if s.ctl.is_empty() {
                let mut iov = Vec::with_capacity(parts.len() + 1);
                iov.push(IoSlice::new(&hdr));
                iov.extend(parts.iter().map(|b| IoSlice::new(b)));
                match conn::sendv(s.stream.as_raw_fd(), &iov) {
                    Ok(n) => written = n,
                    Err(e) => {
                        self.mgr
                            .endpoint_closed(ep, &format!("send failed: {e}"), now);
                        self.run_mgr();
                        return Err(self.failed_err(to).unwrap_or_else(|| {
                            Error::os(&e, format!("tcp transport: send to rank {to}: {e}"))
                        }));
                    }
                }
            }
        }
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
        let total = conn::HEADER + len;
        if written < total {
            // Keep the unwritten rest (a copy: the caller's buffers are only borrowed).
            let mut frame = Vec::with_capacity(total - written);
            let mut skip = written;
            for b in std::iter::once(&hdr[..]).chain(parts.iter().copied()) {
                if skip >= b.len() {
                    skip -= b.len();
                } else {
                    frame.extend_from_slice(&b[skip..]);
                    skip = 0;
                }
            }
            self.peers.get_mut(&to).expect("present").q.push(frame);
            match (self.mgr.connection(to), self.mgr.closing_of(to)) {
                (Some(ep), None) => self.set_interest(ep),
                (None, None) => {
                    self.mgr.packets_waiting(to, now);
                    self.run_mgr();
                }
                _ => {}
            }
        }
        self.rearm();
        Ok(true)
    }

    fn poll(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let mut n = 0;
        for _ in 0..self.own.len() {
            let p = self.own.pop_front().expect("counted");
            self.stats.packets_received += 1;
            self.stats.bytes_received += p.len() as u64;
            deliver(self.rank, &p);
            n += 1;
        }
        n + self.drive(deliver, 0)
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.epoll)
    }

    fn arm(&mut self) -> bool {
        let now = self.now();
        let timer_due = self.mgr.poll_timeout().is_some_and(|t| t <= now);
        let chan_busy = self.chan.as_ref().is_some_and(|d| d.chan.busy());
        self.own.is_empty() && !timer_due && self.resume.is_empty() && !chan_busy
    }

    /// (Adaptive: no quiet spell here, unlike `shutdown`: MPI_Finalize's barrier makes
    /// progress, so a peer's retransmission is answered while it waits.)
    fn pending(&self) -> bool {
        self.pending_bytes() > 0 || self.chan.as_ref().is_some_and(|d| d.chan.pending())
    }

    fn take_failures(&mut self) -> Vec<(Proc, String)> {
        if let Some(d) = self.chan.as_mut() {
            let lost = d.chan.take_failures();
            self.dead.extend(lost);
        }
        std::mem::take(&mut self.dead)
    }

    fn connect_init(&mut self) -> TResult<()> {
        self.connect_init_peers()
    }

    fn init_connecting(&self) -> bool {
        self.init_peers_connecting()
    }

    fn stats(&self) -> TransportStats {
        let cm = self.mgr.cm_stats();
        let m = self.mgr.stats();
        let mut s = TransportStats {
            strangers_dropped: self.stats.strangers_dropped + m.strangers + cm.silent,
            handshake_retries: cm.retries,
            race_losers: cm.races_lost,
            conns_opened_first_message: m.opened,
            conns_accepted: m.accepted,
            conns_closed: m.closed,
            conn: self.mgr.counters(),
            peers_used: self.peers.values().filter(|p| p.used).count() as u64,
            ..self.stats
        };
        // The datagram channel's (adaptive, ud set-up).
        if let Some(d) = &self.chan {
            d.chan.add_stats(&mut s);
        }
        s
    }

    /// Lets every peer take the last bytes (connecting first if packets still wait for a
    /// connection), says BYE (so the EOF that follows is a clean close), and waits for the
    /// peers' BYE and EOF, at most FERRITE_TCP_LINGER_MS in all. Packets arriving now are
    /// dropped: after MPI_Finalize's barrier no peer sends anything this process needs.
    fn shutdown(&mut self) {
        let deadline = Instant::now() + std::time::Duration::from_millis(self.cfg.linger_ms);
        let left = |d: Instant| d.saturating_duration_since(Instant::now()).as_millis() as i32;
        while (self.pending_bytes() > 0 || self.mgr.closing() || self.chan_pending())
            && left(deadline) > 0
        {
            self.drive(&mut |_, _| {}, left(deadline).min(10));
        }
        let up = self.mgr.up();
        for &(r, ep) in &up {
            self.peers
                .entry(r)
                .or_default()
                .q
                .push(conn::BYE.to_le_bytes().to_vec());
            self.flush_sock(ep);
        }
        let mut shut: Vec<EpId> = Vec::new();
        while left(deadline) > 0 {
            for &(r, ep) in &up {
                let flushed = self.peers.get(&r).is_some_and(|p| p.q.is_empty());
                if flushed && !shut.contains(&ep) {
                    if let Some(s) = self.socks.get(&ep) {
                        let _ = s.stream.shutdown(std::net::Shutdown::Write);
                    }
                    shut.push(ep);
                }
            }
            // Done when every connection we said BYE on has been closed by its peer too.
            if up.iter().all(|(_, ep)| !self.socks.contains_key(ep)) {
                break;
            }
            self.drive(&mut |_, _| {}, left(deadline).min(10));
        }
        let all: Vec<EpId> = self.socks.keys().copied().collect();
        for ep in all {
            self.drop_sock(ep);
        }
    }
}

impl Drop for Tcp {
    fn drop(&mut self) {
        // Sockets close with their streams, the timer with its Timer; the epoll fd is ours.
        // SAFETY: owned by this Tcp and closed once.
        unsafe { libc::close(self.epoll) };
    }
}

#[cfg(test)]
mod tests;
