//! The tcp transport: one nonblocking socket per connected pair, opened on demand.
//!
//! Each process listens on one socket (FERRITE_TCP_IF) and publishes its address as a business
//! card (`card.rs`). The first packet to a peer starts a connection through the connection
//! manager's `cm` machine (`crate::conn::handshake::Cm`): the dialer sends a hello (job secret,
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

use super::{Proc, Transport, TransportStats};
use crate::abi::consts::{MPI_ERR_OTHER, MPI_ERR_PROC_ABORTED};
use crate::conn::handshake::{self, Action, Cm, Event, SockId, Ud, HELLO_LEN};
use crate::conn::policy::{self, Policy};
use crate::conn::{wire, Micros};
use crate::error::MpiResult;
use crate::mpi_err;
use crate::runtime::config;
use crate::transport::udp::Channel;
use card::Board;
use conn::{Filled, Frame, RecvBuf, SendQueue};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
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
    pub fn from_knobs() -> MpiResult<TcpConfig> {
        let spec: String = config::get("FERRITE_TCP_IF");
        let ip = listener::resolve_if(&spec)
            .map_err(|e| mpi_err!(MPI_ERR_OTHER, "tcp transport: {e}"))?;
        let max_packet: usize = config::get("FERRITE_TCP_MAX_PACKET");
        if !(64..(1 << 30)).contains(&max_packet) {
            return Err(mpi_err!(
                MPI_ERR_OTHER,
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
pub fn conn_policy() -> MpiResult<policy::Kind> {
    let v: String = config::get("FERRITE_CONN");
    v.parse()
        .map_err(|e: String| mpi_err!(crate::abi::consts::MPI_ERR_ARG, "{e}"))
}

/// FERRITE_CONN_SETUP, checked (`ud` also embeds a udp `Channel`).
pub fn conn_setup() -> MpiResult<policy::Mechanism> {
    let v: String = config::get("FERRITE_CONN_SETUP");
    v.parse()
        .map_err(|e: String| mpi_err!(crate::abi::consts::MPI_ERR_ARG, "{e}"))
}

/// How long cm waits for a hello: 2 s, longer with many ranks per CPU (a rank among 128 per
/// CPU, dialing 255 peers at once under static, took over 2 s to write some hellos, and every
/// such socket closed and was dialed again: thousands of retries at 256 ranks on 2 CPUs).
fn hello_wait(job_size: u32) -> Micros {
    // SAFETY: plain query.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u64;
    2_000_000 * (u64::from(job_size) / (16 * cpus)).clamp(1, 15)
}

/// Where a socket is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Our nonblocking connect is under way.
    Connecting,
    /// Waiting for the hello (accepted) or its answer (ours).
    Hello,
    /// Carries the connection to `peer`.
    Up,
}

struct Sock {
    stream: TcpStream,
    /// Known from the start for ours; from the hello for accepted ones.
    peer: Option<Proc>,
    outgoing: bool,
    phase: Phase,
    /// Handshake bytes not yet written (they precede any frame).
    ctl: Vec<u8>,
    rbuf: RecvBuf,
    /// The peer sent BYE: its EOF is a clean close.
    bye: bool,
    /// Current epoll interest.
    events: u32,
    /// The connection is being closed (see `start_close`).
    closing: Option<Closing>,
    /// Once closing: the frames still to go on this connection (the peer's queue moved here),
    /// ending with our CLOSE (and CLOSE_ACK).
    cq: SendQueue,
}

/// Close progress of a connection. Each side sends CLOSE after its last frame, and answers the
/// peer's CLOSE with CLOSE_ACK; a side is done when it has both (everything the peer sent has
/// arrived, and the peer has read everything we sent) and its own frames are out. Then it
/// closes the socket without losing anything, and a new connection may carry later packets.
#[derive(Clone, Copy, Debug, Default)]
struct Closing {
    got_close: bool,
    got_ack: bool,
}

#[derive(Default)]
struct Peer {
    q: SendQueue,
    /// The socket carrying the connection, once up. While an old connection still closes
    /// (`closing`), a new one the peer opened waits here, neither read nor written.
    sock: Option<SockId>,
    /// The old connection being closed.
    closing: Option<SockId>,
    /// Why sends to this peer fail now: the error class and message.
    failed: Option<(i32, String)>,
    /// The last dial problem, for the message if the peer is given up.
    last_error: Option<String>,
    /// A packet went to or came from this peer over a connection (for the report's
    /// utilization: connections used / opened).
    used: bool,
    /// Adaptive: packets for the datagram channel that its window has not taken yet, in order.
    dq: VecDeque<Vec<u8>>,
    dq_bytes: usize,
}

pub struct Tcp {
    rank: Proc,
    size: u32,
    cfg: TcpConfig,
    listener: listener::Listener,
    epoll: RawFd,
    board: Box<dyn Board>,
    /// Made on first need: the job secret is known only after MPI_Init's barrier.
    cm: Option<Cm>,
    /// FERRITE_CONN_SETUP=ud: settles each attempt over the channel first (made with `cm`).
    ud: Option<Ud>,
    /// Listen addresses peers sent in their ud request or reply (no card lookup then).
    ud_addrs: HashMap<Proc, SocketAddr>,
    /// ud: peers that settled an attempt for which they dial us, and until when we wait for
    /// their connection (their dials may all fail: out of file descriptors).
    awaiting: BTreeMap<Proc, Micros>,
    /// When connections are asked for (static/partial: at init; then on the first packet).
    /// It holds no packets: they wait in the peer's `SendQueue`, in order.
    policy: Policy<()>,
    /// Peers MPI_Init connects to and waits for (`connect_init`), until each has been up.
    init_peers: Vec<Proc>,
    socks: HashMap<SockId, Sock>,
    peers: HashMap<Proc, Peer>,
    /// Packets to ourselves (when `self` is not in FERRITE_TRANSPORTS).
    own: VecDeque<Vec<u8>>,
    /// Known with the cm machine: checks hellos held back for the budget.
    secret: Option<u64>,
    /// Accepted sockets whose hello waits for room under the budget (`Policy::may_accept`).
    held: Vec<SockId>,
    /// New connections whose old one finished closing: read what they buffered meanwhile.
    resume: Vec<SockId>,
    /// Peers found dead (connection lost without BYE), not yet reported (`take_failures`).
    dead: Vec<(Proc, String)>,
    /// Adaptive: the datagram channel carrying traffic to peers without a connection.
    chan: Option<Channel>,
    /// Adaptive: peers whose connection is up but waits for their datagrams' acknowledgement.
    draining: BTreeSet<Proc>,
    /// Fires (readable in the epoll set) when the machines' next timer is due, so a process
    /// blocked in the progress engine redials and gives up on time.
    timer: RawFd,
    /// The deadline `timer` is set for.
    timer_at: Option<Micros>,
    /// Accepting failed (out of resources): the listener is out of the epoll set until then.
    accept_paused: Option<Micros>,
    t0: Instant,
    stats: TransportStats,
}

const LISTENER: u64 = u64::MAX;
/// The epoll token of the adaptive policy's datagram channel.
const CHANNEL: u64 = u64::MAX - 1;
/// The epoll token of the timerfd (the cm machine's and the policy's timers).
const TIMER: u64 = u64::MAX - 2;
/// How often a hello held back for the budget is asked about again.
const HELD_RECHECK: Micros = 10_000;
/// How long accepting pauses after it failed for want of descriptors or memory.
const ACCEPT_PAUSE: Micros = 20_000;
/// A connection's receive buffer starts small (idle connections stay cheap) and grows to the
/// largest frame it has had to hold.
const RECV_BUF_INITIAL: usize = 8 << 10;

impl Tcp {
    /// Listens and publishes this process's card (before MPI_Init's barrier).
    pub fn new(rank: Proc, size: u32, cfg: TcpConfig, board: Box<dyn Board>) -> MpiResult<Tcp> {
        let listener = listener::Listener::bind(cfg.ip).map_err(|e| {
            mpi_err!(
                MPI_ERR_OTHER,
                "tcp transport: rank {rank} cannot listen on {}: {e}",
                cfg.ip
            )
        })?;
        // SAFETY: plain syscall; the fd is owned by the Tcp and closed in Drop.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(mpi_err!(
                MPI_ERR_OTHER,
                "tcp transport: epoll_create1 failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        let kind = cfg.policy;
        let (max_open, threshold, idle_ms) = (cfg.max_conns, cfg.threshold, cfg.idle_ms);
        let mut tcp = Tcp {
            rank,
            size,
            cfg,
            listener,
            epoll,
            board,
            cm: None,
            ud: None,
            ud_addrs: HashMap::new(),
            awaiting: BTreeMap::new(),
            policy: Policy::new(
                rank,
                size,
                policy::Config {
                    kind,
                    threshold_msgs: threshold,
                    threshold_bytes: 0,
                    max_open: max_open.max(1),
                    idle: idle_ms.saturating_mul(1000),
                    // Under the cm machine's 2 s for an accepted socket's hello.
                    hold_max: 1_000_000,
                },
            ),
            init_peers: Vec::new(),
            socks: HashMap::new(),
            peers: HashMap::new(),
            own: VecDeque::new(),
            secret: None,
            held: Vec::new(),
            resume: Vec::new(),
            dead: Vec::new(),
            chan: None,
            draining: BTreeSet::new(),
            timer: -1,
            timer_at: None,
            accept_paused: None,
            t0: Instant::now(),
            stats: TransportStats::default(),
        };
        let fd = tcp.listener.sock.as_raw_fd();
        tcp.epoll_ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32, LISTENER)
            .map_err(|e| mpi_err!(MPI_ERR_OTHER, "tcp transport: epoll_ctl: {e}"))?;
        // SAFETY: plain syscall; the fd is owned by the Tcp and closed in Drop.
        tcp.timer = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if tcp.timer < 0 {
            return Err(mpi_err!(
                MPI_ERR_OTHER,
                "tcp transport: timerfd_create failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        tcp.epoll_ctl(libc::EPOLL_CTL_ADD, tcp.timer, libc::EPOLLIN as u32, TIMER)
            .map_err(|e| mpi_err!(MPI_ERR_OTHER, "tcp transport: epoll_ctl: {e}"))?;
        let addr = tcp.listener.addr;
        tcp.board.put(rank, addr)?;
        Ok(tcp)
    }

    /// Adaptive: traffic to peers without a connection goes over `chan` (required then).
    pub fn with_channel(mut self, chan: Option<Channel>) -> MpiResult<Tcp> {
        if self.needs_channel() && chan.is_none() {
            return Err(mpi_err!(
                MPI_ERR_OTHER,
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
            .map_err(|e| mpi_err!(MPI_ERR_OTHER, "tcp transport: epoll_ctl: {e}"))?;
        }
        self.chan = chan;
        Ok(self)
    }

    /// Whether this configuration runs a datagram channel (adaptive traffic, ud set-up).
    pub fn needs_channel(&self) -> bool {
        self.cfg.policy == policy::Kind::Adaptive || self.cfg.setup == policy::Mechanism::Ud
    }

    /// Starts setting up a connection to `peer`: through ud (which settles the attempt, then
    /// its initiator dials), or cm directly.
    fn open(&mut self, peer: Proc) {
        let now = self.now();
        if let Some(ud) = self.ud.as_mut() {
            let cm_idle = self
                .cm
                .as_ref()
                .is_some_and(|c| c.state(peer) == handshake::PeerState::Idle);
            if ud.state(peer) == handshake::PeerState::Idle && cm_idle {
                ud.connect(peer, now);
                self.run_ud();
            }
            return;
        }
        if let Some(cm) = self.cm.as_mut() {
            if cm.state(peer) == handshake::PeerState::Idle {
                cm.connect(peer, now);
            }
        }
        self.run_cm();
    }

    /// The connection to `peer` is over for the ud machine too (closed or lost).
    fn ud_close(&mut self, peer: Proc) {
        if let Some(ud) = self.ud.as_mut() {
            ud.close(peer);
        }
    }

    /// Carries out what the ud machine asks for: its datagrams, and (as the initiator of a
    /// settled attempt) the dial whose hello names it.
    fn run_ud(&mut self) {
        loop {
            let Some(ud) = self.ud.as_mut() else { return };
            if let Some(t) = ud.poll_transmit() {
                if let Some(chan) = self.chan.as_mut() {
                    // A failure is the channel's to report (`take_failures`); ud retransmits.
                    let _ = chan.send_control(t.to, &t.bytes);
                }
                continue;
            }
            let Some(ev) = ud.poll_event() else { return };
            match ev {
                Event::Connected {
                    peer,
                    attempt,
                    addr,
                } => {
                    if let Some(a) = std::str::from_utf8(&addr)
                        .ok()
                        .and_then(|a| a.parse::<SocketAddr>().ok())
                    {
                        self.ud_addrs.insert(peer, a);
                    }
                    if attempt.initiator == self.rank {
                        if let Some(cm) = self.cm.as_mut() {
                            cm.connect_attempt(peer, attempt.gen);
                        }
                        self.run_cm();
                    } else {
                        // The peer dials (with its retries); give it as long as those take.
                        let wait = hello_wait(self.size) * u64::from(self.cfg.connect_retries + 1);
                        let at = self.now() + wait;
                        self.awaiting.insert(peer, at);
                    }
                }
                Event::Failed { peer, retries } => self.setup_failed(peer, retries),
                // The connection ends through the close protocol (or breaks) on its own.
                Event::Closed { .. } | Event::Superseded { .. } => {}
            }
        }
    }

    /// Handshake datagrams from the channel (ud set-up). A peer's request waits (dropped; the
    /// peer repeats it) while the budget has no room for it.
    fn on_control(&mut self, b: &[u8]) {
        // The machines are made on first need (a peer's request may come before we sent).
        let _ = self.cm();
        let (Some(secret), true) = (self.secret, self.ud.is_some()) else {
            self.stats.strangers_dropped += 1;
            return;
        };
        let now = self.now();
        let req = wire::decode_prefix(b, secret, self.rank, self.size)
            .ok()
            .filter(|w| w.kind == wire::Kind::Req)
            .map(|w| w.src);
        let ud = self.ud.as_mut().expect("checked");
        let fresh = req.filter(|&src| ud.state(src) == handshake::PeerState::Idle);
        if let Some(src) = fresh {
            if !self.policy.may_accept(src, now) {
                self.run_policy();
                return;
            }
        }
        let ud = self.ud.as_mut().expect("checked");
        let before = ud.stats().drops.total();
        ud.handle_datagram(b, now);
        self.stats.strangers_dropped += ud.stats().drops.total() - before;
        if let Some(src) = fresh {
            if ud.state(src) == handshake::PeerState::Idle {
                self.policy.release(src, now); // not a live request after all
            }
        }
        self.run_policy();
        self.run_ud();
    }

    /// Setting up a connection to `peer` failed for good.
    fn setup_failed(&mut self, peer: Proc, retries: u32) {
        let now = self.now();
        self.policy.failed(peer, now);
        self.run_policy();
        if self.chan.is_some() && self.cfg.policy == policy::Kind::Adaptive {
            // Adaptive: the datagrams still reach the peer; no connection then.
            self.queue_to_datagrams(peer);
            return;
        }
        let p = self.peers.entry(peer).or_default();
        let last = p.last_error.clone().unwrap_or_else(|| "no answer".into());
        // As a peer found dead: sends to it and receives from it fail (as udp does for a
        // peer that never answers).
        self.fail(
            peer,
            MPI_ERR_PROC_ABORTED,
            format!("cannot connect to rank {peer} after {retries} retries: {last}"),
        );
    }

    /// Frames in the peer's queue may go on its connection: it is up, not waiting for an old
    /// one's close, and (adaptive) its datagrams are all acknowledged.
    fn sendable(&self, peer: Proc) -> Option<SockId> {
        let p = self.peers.get(&peer)?;
        let sid = p.sock.filter(|_| p.closing.is_none())?;
        (self.chan.is_none() || self.policy.is_open(peer)).then_some(sid)
    }

    /// Adaptive: sends (or keeps, in order) one packet over the datagram channel.
    fn send_datagram(&mut self, to: Proc, parts: &[&[u8]]) -> MpiResult<()> {
        let chan = self.chan.as_mut().expect("adaptive has a channel");
        let p = self.peers.entry(to).or_default();
        if p.dq.is_empty() && chan.send(to, parts)? {
            return Ok(());
        }
        let b = parts.concat();
        p.dq_bytes += b.len();
        p.dq.push_back(b);
        Ok(())
    }

    /// Adaptive: offers the datagram backlogs to the channel again.
    fn drain_datagrams(&mut self) {
        let Some(chan) = self.chan.as_mut() else {
            return;
        };
        for (&to, p) in self.peers.iter_mut() {
            while let Some(b) = p.dq.front() {
                match chan.send(to, &[b]) {
                    Ok(true) => {
                        p.dq_bytes -= b.len();
                        p.dq.pop_front();
                    }
                    Ok(false) => break,
                    Err(_) => {
                        // The channel gave up on the peer: `take_failures` reports it.
                        p.dq.clear();
                        p.dq_bytes = 0;
                    }
                }
            }
        }
    }

    /// Adaptive: datagrams to `peer` not yet acknowledged (its connection waits for 0).
    fn datagrams_in_flight(&self, peer: Proc) -> usize {
        let backlog = self.peers.get(&peer).map_or(0, |p| p.dq.len());
        backlog + self.chan.as_ref().map_or(0, |c| c.in_flight(peer))
    }

    /// Adaptive: a connection whose peer has every datagram takes over.
    fn check_drained(&mut self) {
        let done: Vec<Proc> = self
            .draining
            .iter()
            .copied()
            .filter(|&p| self.datagrams_in_flight(p) == 0)
            .collect();
        for peer in done {
            self.draining.remove(&peer);
            self.policy.datagrams_drained(peer);
            self.run_policy();
            if let Some(sid) = self.peers.get(&peer).and_then(|p| p.sock) {
                self.flush_sock(sid);
            }
        }
    }

    /// Adaptive: the packets waiting in `peer`'s queue go over datagrams instead, in order.
    fn queue_to_datagrams(&mut self, peer: Proc) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        for f in p.q.take_frames() {
            let b = f[conn::HEADER..].to_vec();
            p.dq_bytes += b.len();
            p.dq.push_back(b);
        }
        self.drain_datagrams();
    }

    /// The policy's view of a new connection: adaptive waits for the peer's datagrams.
    fn policy_connected(&mut self, peer: Proc, replaced: bool) {
        let now = self.now();
        let in_flight = self.datagrams_in_flight(peer);
        if replaced {
            self.policy.replaced(peer, in_flight, now);
        } else {
            self.policy.connected(peer, in_flight, now);
        }
        if self.chan.is_some() && !self.policy.is_open(peer) {
            self.draining.insert(peer);
        }
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

    fn cm(&mut self) -> MpiResult<&mut Cm> {
        if self.cm.is_none() {
            let secret = self.board.secret()?;
            self.secret = Some(secret);
            let mut hs = handshake::Config::new(self.size);
            hs.max_retries = self.cfg.connect_retries;
            hs.hello_wait = hello_wait(self.size);
            if self.cfg.setup == policy::Mechanism::Ud {
                let addr = self.listener.addr.to_string().into_bytes();
                self.ud = Some(Ud::new(self.rank, secret, addr, hs.clone()));
            }
            self.cm = Some(Cm::new(self.rank, secret, hs));
        }
        Ok(self.cm.as_mut().expect("just made"))
    }

    fn fail(&mut self, peer: Proc, class: i32, why: String) {
        let p = self.peers.entry(peer).or_default();
        if p.failed.is_none() {
            if class == MPI_ERR_PROC_ABORTED {
                self.dead.push((peer, why.clone()));
            }
            p.failed = Some((class, why));
        }
        p.q.clear();
    }

    /// The error for a send to a failed peer.
    fn failed_err(&self, to: Proc) -> Option<crate::error::MpiError> {
        let (class, why) = self.peers.get(&to)?.failed.as_ref()?;
        Some(mpi_err!(*class, "tcp transport: {why}"))
    }

    /// Registers a new socket with epoll.
    fn add_sock(&mut self, sid: SockId, sock: Sock) {
        let fd = sock.stream.as_raw_fd();
        let ev = sock.events;
        self.socks.insert(sid, sock);
        if self.epoll_ctl(libc::EPOLL_CTL_ADD, fd, ev, sid.0).is_err() {
            // Without epoll the socket would never make progress: treat it as broken.
            self.drop_sock(sid);
            if let Some(cm) = self.cm.as_mut() {
                cm.socket_closed(sid, self.t0.elapsed().as_micros() as Micros);
            }
        }
    }

    /// Forgets and closes a socket (the cm machine is told by the caller, if it must be).
    fn drop_sock(&mut self, sid: SockId) {
        if let Some(s) = self.socks.remove(&sid) {
            self.resume_accepting();
            let fd = s.stream.as_raw_fd();
            // Deregistering cannot fail for a registered fd; closing would remove it anyway.
            let _ = self.epoll_ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
            if let Some(peer) = s.peer {
                if let Some(p) = self.peers.get_mut(&peer) {
                    if p.sock == Some(sid) {
                        p.sock = None;
                    }
                    if p.closing == Some(sid) {
                        p.closing = None;
                    }
                }
            }
        }
    }

    fn set_interest(&mut self, sid: SockId) {
        let Some(s) = self.socks.get(&sid) else {
            return;
        };
        let peer = s.peer.and_then(|p| self.peers.get(&p));
        // A new connection waits (unread, unwritten) until the old one has closed.
        let blocked = s.phase == Phase::Up
            && s.closing.is_none()
            && peer.is_some_and(|p| p.closing.is_some());
        let may_send = s
            .peer
            .is_some_and(|p| self.chan.is_none() || self.policy.is_open(p));
        let queued = match (s.phase, peer) {
            _ if s.closing.is_some() => !s.cq.is_empty(),
            (Phase::Up, Some(p)) => !blocked && may_send && !p.q.is_empty(),
            _ => false,
        };
        let want_out = s.phase == Phase::Connecting || !s.ctl.is_empty() || queued;
        let ev = if blocked {
            0
        } else {
            libc::EPOLLIN as u32 | if want_out { libc::EPOLLOUT as u32 } else { 0 }
        };
        if ev != s.events {
            let fd = s.stream.as_raw_fd();
            if self.epoll_ctl(libc::EPOLL_CTL_MOD, fd, ev, sid.0).is_ok() {
                self.socks.get_mut(&sid).expect("present").events = ev;
            }
        }
    }

    /// Writes pending handshake bytes, then (when up) the peer's frames.
    fn flush_sock(&mut self, sid: SockId) {
        let Some(s) = self.socks.get_mut(&sid) else {
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
        let closing = s.closing.is_some();
        if broken.is_none() && s.ctl.is_empty() && closing {
            if let Err(e) = s.cq.flush(fd) {
                broken = Some(e);
            }
        } else if broken.is_none() && s.ctl.is_empty() && s.phase == Phase::Up {
            let may_send = s
                .peer
                .is_some_and(|p| self.chan.is_none() || self.policy.is_open(p));
            if let Some(p) = s.peer.and_then(|p| self.peers.get_mut(&p)) {
                if p.sock == Some(sid) && p.closing.is_none() && may_send {
                    if let Err(e) = p.q.flush(fd) {
                        broken = Some(e);
                    }
                }
            }
        }
        if let Some(e) = broken {
            self.sock_broken(sid, &format!("send failed: {e}"));
            return;
        }
        if closing {
            self.check_closed(sid);
        }
        self.set_interest(sid);
    }

    /// Starts closing the connection to `peer`: by our decision (the policy's `Close`), or
    /// answering the peer's CLOSE (`answer`). What is queued for the peer goes first, then
    /// CLOSE_ACK (when answering) and CLOSE; later packets wait for a new connection. The cm
    /// machine lets go of the connection at once, so a new attempt from either side may start
    /// while this one drains.
    fn start_close(&mut self, peer: Proc, answer: bool) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        let (Some(sid), None) = (p.sock, p.closing) else {
            return;
        };
        p.sock = None;
        p.closing = Some(sid);
        let mut cq = std::mem::take(&mut p.q);
        if answer {
            cq.push(conn::CLOSE_ACK.to_le_bytes().to_vec());
        }
        cq.push(conn::CLOSE.to_le_bytes().to_vec());
        if let Some(cm) = self.cm.as_mut() {
            cm.detach(peer);
        }
        self.ud_close(peer);
        let s = self
            .socks
            .get_mut(&sid)
            .expect("a peer's socket is registered");
        s.cq = cq;
        s.closing = Some(Closing {
            got_close: answer,
            got_ack: false,
        });
        self.flush_sock(sid);
    }

    /// A CLOSE or CLOSE_ACK arrived on `sid`.
    fn on_close_frame(&mut self, sid: SockId, ack: bool) {
        let Some(s) = self.socks.get_mut(&sid) else {
            return;
        };
        let Some(peer) = s.peer else { return };
        match (&mut s.closing, ack) {
            (Some(c), true) => c.got_ack = true,
            (Some(c), false) => {
                // Both sides closed at once: answer, after our CLOSE.
                if !c.got_close {
                    c.got_close = true;
                    s.cq.push(conn::CLOSE_ACK.to_le_bytes().to_vec());
                }
            }
            (None, false) => {
                self.policy.peer_closing(peer);
                self.start_close(peer, true);
                self.run_policy();
                return;
            }
            // An ack for a close we never started: the stream is broken.
            (None, true) => {
                self.sock_broken(sid, "a CLOSE_ACK without a CLOSE");
                return;
            }
        }
        self.flush_sock(sid);
    }

    /// Finishes the close of `sid` once both sides are done with it.
    fn check_closed(&mut self, sid: SockId) {
        let Some(s) = self.socks.get(&sid) else {
            return;
        };
        let done = s
            .closing
            .is_some_and(|c| c.got_close && c.got_ack && s.cq.is_empty() && s.ctl.is_empty());
        let Some(peer) = s.peer.filter(|_| done) else {
            return;
        };
        self.drop_sock(sid);
        self.stats.conns_closed += 1;
        let now = self.now();
        match self.peers.get(&peer).and_then(|p| p.sock) {
            Some(next) => {
                // The peer's new connection takes over the old one's slot, and what it
                // brought meanwhile is read now, after everything the old one carried.
                self.policy_connected(peer, true);
                self.resume.push(next);
                self.flush_sock(next);
            }
            None => self.policy.closed(peer, now),
        }
        self.run_policy();
        self.run_cm();
    }

    /// A socket failed or closed under us. An up connection that ends without the peer's BYE
    /// means the peer is gone.
    fn sock_broken(&mut self, sid: SockId, why: &str) {
        let Some(s) = self.socks.get(&sid) else {
            return;
        };
        let (peer, phase, clean) = (s.peer, s.phase, s.bye);
        if s.closing.is_some_and(|c| c.got_close && c.got_ack) && s.cq.is_empty() {
            self.check_closed(sid);
            return;
        }
        if clean {
            // The peer finalized. Answer with our BYE (best effort: it only tells the peer
            // that our EOF is a clean one too) in case we are not closing ourselves.
            let _ = conn::sendv(
                s.stream.as_raw_fd(),
                &[IoSlice::new(&conn::BYE.to_le_bytes())],
            );
        }
        self.drop_sock(sid);
        if let (Phase::Up, Some(peer)) = (phase, peer) {
            self.ud_close(peer);
            self.stats.conns_closed += 1;
            let now = self.now();
            self.policy.closed(peer, now);
            self.run_policy();
            if clean {
                let why = format!("rank {peer} has closed its connections in MPI_Finalize");
                self.fail(peer, MPI_ERR_OTHER, why);
            } else {
                let why = format!(
                    "rank {peer} is gone: its connection was lost ({why}) before it finalized"
                );
                self.fail(peer, MPI_ERR_PROC_ABORTED, why);
            }
        } else if let Some(peer) = peer {
            self.peers.entry(peer).or_default().last_error = Some(why.to_string());
        }
        let now = self.now();
        if let Some(cm) = self.cm.as_mut() {
            cm.socket_closed(sid, now);
        }
        self.run_cm();
    }

    /// Carries out what the cm machine asks for and reacts to its events.
    fn run_cm(&mut self) {
        loop {
            let Some(cm) = self.cm.as_mut() else { return };
            if let Some(a) = cm.poll_action() {
                self.do_action(a);
                continue;
            }
            let Some(ev) = cm.poll_event() else { return };
            match ev {
                Event::Connected { peer, attempt, .. } => {
                    if let Some(ud) = self.ud.as_mut() {
                        // The connection itself shows the initiator had our reply.
                        ud.confirm_by_traffic(peer, attempt);
                    }
                    let Some(sid) = self.cm.as_ref().and_then(|c| c.socket_of(peer)) else {
                        continue;
                    };
                    if self.peers.get(&peer).is_some_and(|p| p.failed.is_some()) {
                        // We gave up on this peer (its operations failed here): no connection
                        // now, so it loses this one and gives up on us too, instead of waiting
                        // for messages we will never send.
                        if let Some(cm) = self.cm.as_mut() {
                            cm.close(peer);
                        }
                        continue;
                    }
                    let Some(s) = self.socks.get_mut(&sid) else {
                        continue;
                    };
                    s.phase = Phase::Up;
                    s.peer = Some(peer);
                    if s.outgoing {
                        self.stats.conns_opened_first_message += 1;
                    } else {
                        self.stats.conns_accepted += 1;
                    }
                    let p = self.peers.entry(peer).or_default();
                    p.sock = Some(sid);
                    // Up once is settled for MPI_Init: under a budget smaller than the
                    // peers (a low `ulimit -n`) the policy may close it again at once.
                    self.init_peers.retain(|&q| q != peer);
                    if p.closing.is_some() {
                        // The old connection still drains: this one waits (`check_closed`).
                        self.set_interest(sid);
                        continue;
                    }
                    self.policy_connected(peer, false);
                    self.run_policy();
                    self.flush_sock(sid);
                }
                Event::Failed { peer, retries } => {
                    self.ud_close(peer);
                    self.setup_failed(peer, retries);
                }
                // The socket is already gone (sock_broken); failure was decided there.
                Event::Closed { .. } | Event::Superseded { .. } => {}
            }
        }
    }

    fn do_action(&mut self, a: Action) {
        match a {
            Action::Connect { sock, peer } => {
                let known = self.ud_addrs.get(&peer).copied().map(|a| Ok(Some(a)));
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
                            peer: Some(peer),
                            outgoing: true,
                            phase: Phase::Connecting,
                            ctl: Vec::new(),
                            rbuf: RecvBuf::new(RECV_BUF_INITIAL),
                            bye: false,
                            events: (libc::EPOLLIN | libc::EPOLLOUT) as u32,
                            closing: None,
                            cq: SendQueue::default(),
                        };
                        self.add_sock(sock, s);
                    }
                    Err(why) => {
                        self.peers.entry(peer).or_default().last_error = Some(why);
                        let now = self.now();
                        if let Some(cm) = self.cm.as_mut() {
                            cm.socket_closed(sock, now);
                        }
                    }
                }
            }
            Action::Send { sock, bytes } => {
                if let Some(s) = self.socks.get_mut(&sock) {
                    s.ctl.extend_from_slice(&bytes);
                    self.flush_sock(sock);
                }
            }
            Action::Close { sock } => {
                // A refusal's answer is written before closing (best effort: a hello answer
                // always fits an empty socket buffer). Only handshake bytes ever go on a
                // socket the machine closes before it is up.
                if let Some(s) = self.socks.get(&sock) {
                    if !s.ctl.is_empty() {
                        let _ = conn::sendv(s.stream.as_raw_fd(), &[IoSlice::new(&s.ctl)]);
                    }
                }
                self.drop_sock(sock);
            }
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok(Some(stream)) => {
                    let now = self.now();
                    let Ok(cm) = self.cm() else {
                        // No secret to check a hello against: nobody can be admitted.
                        self.stats.strangers_dropped += 1;
                        continue;
                    };
                    let sid = cm.accepted(now);
                    let s = Sock {
                        stream,
                        peer: None,
                        outgoing: false,
                        phase: Phase::Hello,
                        ctl: Vec::new(),
                        rbuf: RecvBuf::new(RECV_BUF_INITIAL),
                        bye: false,
                        events: libc::EPOLLIN as u32,
                        closing: None,
                        cq: SendQueue::default(),
                    };
                    self.add_sock(sid, s);
                }
                Ok(None) => return,
                // Out of descriptors or socket memory: refuse what waits (its dialer
                // retries later).
                Err(e)
                    if listener::out_of_resources(&e).is_some() && self.listener.refuse_one() =>
                {
                    self.stats.refused_no_fd += 1;
                }
                // Otherwise (not even the refusal's accept worked, or another error): the
                // connection stays in the backlog, its dialer's hello unanswered (it retries,
                // then gives up). The listener leaves the epoll set for a while (it would
                // stay readable: a busy loop) and comes back when a socket of ours closes or
                // after ACCEPT_PAUSE.
                Err(_) => {
                    let fd = self.listener.sock.as_raw_fd();
                    if self.epoll_ctl(libc::EPOLL_CTL_MOD, fd, 0, LISTENER).is_ok() {
                        self.accept_paused = Some(self.now() + ACCEPT_PAUSE);
                    }
                    return;
                }
            }
        }
    }

    /// Reads what `sid` has, feeding hellos to the cm machine and delivering frames.
    fn read_sock(&mut self, sid: SockId, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let mut delivered = 0;
        // Bounded so one busy peer cannot hold the progress engine.
        let mut budget = 4 * self.cfg.max_packet.max(1 << 16);
        let max = self.cfg.max_packet;
        loop {
            let now = self.now();
            let Some(s) = self.socks.get_mut(&sid) else {
                return delivered;
            };
            if s.phase == Phase::Connecting {
                return delivered;
            }
            // Consume what is buffered.
            if s.phase == Phase::Hello {
                // A peer's hello waits while the budget has no room for it (the peer's dial
                // just waits for our answer); the hello is read again on every poll.
                let mut asked = None;
                if let (false, Some(h), Some(secret)) =
                    (s.outgoing, s.rbuf.peek(HELLO_LEN), self.secret)
                {
                    if let Ok(w) = wire::decode_prefix(h, secret, self.rank, self.size) {
                        if w.kind == wire::Kind::Hello {
                            let ok = self.policy.may_accept(w.src, now);
                            if !ok {
                                if !self.held.contains(&sid) {
                                    self.held.push(sid);
                                }
                                self.run_policy();
                                return delivered;
                            }
                            asked = Some(w.src);
                        }
                    }
                }
                if let Some(h) = s.rbuf.take(HELLO_LEN) {
                    let h = h.to_vec();
                    self.held.retain(|&x| x != sid);
                    if let Some(cm) = self.cm.as_mut() {
                        let before = cm.stats().drops.total();
                        cm.received(sid, &h, now);
                        self.stats.strangers_dropped += cm.stats().drops.total() - before;
                        if let Some(src) = asked {
                            if cm.socket_of(src) != Some(sid) {
                                // Refused (stale or a lost race): the slot is not needed.
                                self.policy.release(src, now);
                            }
                        }
                    }
                    self.run_policy();
                    self.run_cm();
                    continue;
                }
            } else if let Some(peer) = s.peer {
                if s.closing.is_none() && self.peers.get(&peer).is_some_and(|p| p.closing.is_some())
                {
                    return delivered; // a new connection waits for the old one's close
                }
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
                        Ok(Some(Frame::Bye)) => s.bye = true,
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
                    self.policy.received(peer, now);
                }
                if let Some(ack) = control {
                    self.on_close_frame(sid, ack);
                    continue;
                }
                if let Some(len) = bad {
                    self.stats.corrupt_dropped += 1;
                    self.sock_broken(
                        sid,
                        &format!(
                            "a frame of {len} bytes exceeds FERRITE_TCP_MAX_PACKET={max} \
                             (set it the same for every rank)"
                        ),
                    );
                    return delivered;
                }
                s.rbuf.compact();
            }
            if budget == 0 {
                return delivered;
            }
            // A hello is read whole before anything else is parsed, so garbage from a
            // stranger never sizes the buffer; frame lengths were checked by next_frame.
            let need = match s.phase {
                Phase::Up => s.rbuf.need().min(conn::HEADER + max),
                _ => HELLO_LEN,
            };
            match s.rbuf.fill(s.stream.as_raw_fd(), need) {
                Ok(Filled::Bytes(n)) => budget = budget.saturating_sub(n),
                Ok(Filled::WouldBlock) => return delivered,
                Ok(Filled::Eof) => {
                    self.sock_broken(sid, "closed by the peer");
                    return delivered;
                }
                Err(e) => {
                    self.sock_broken(sid, &format!("receive failed: {e}"));
                    return delivered;
                }
            }
        }
    }

    /// Our connect finished (or failed).
    fn connected(&mut self, sid: SockId) {
        let Some(s) = self.socks.get_mut(&sid) else {
            return;
        };
        match s.stream.take_error() {
            Ok(None) => {
                s.phase = Phase::Hello;
                let now = self.now();
                if let Some(cm) = self.cm.as_mut() {
                    cm.socket_connected(sid, now);
                }
                self.run_cm();
                self.set_interest(sid);
            }
            Ok(Some(e)) | Err(e) => self.sock_broken(sid, &format!("connect failed: {e}")),
        }
    }

    /// Carries out the policy's actions (and the cm machine's, for the dials they started).
    /// Packets never leave the peer's `SendQueue` (the policy holds placeholders): a `Flush`
    /// over the connection writes the queue once it may go, one over datagrams (adaptive)
    /// moves it to the channel; `Failed` needs nothing (the queue is dropped with the peer).
    fn run_policy(&mut self) {
        let mut opens = Vec::new();
        while let Some(a) = self.policy.poll_action() {
            match a {
                // The cm machine exists: every caller made it (it needs the job secret).
                policy::Action::Open { peer, .. } => opens.push(peer),
                policy::Action::Close { peer, .. } => {
                    if self.peers.get(&peer).is_some_and(|p| p.sock.is_some()) {
                        self.start_close(peer, false);
                    } else {
                        // Nothing to close after all (it broke meanwhile): let the policy know.
                        let now = self.now();
                        self.policy.closed(peer, now);
                    }
                }
                policy::Action::Flush {
                    peer,
                    via: policy::Via::Datagram,
                    ..
                } if self.chan.is_some() => self.queue_to_datagrams(peer),
                policy::Action::Flush { peer, .. } => {
                    if let Some(sid) = self.sendable(peer) {
                        self.flush_sock(sid);
                    }
                }
                policy::Action::Failed { .. } => {}
            }
        }
        for peer in opens {
            self.open(peer);
        }
    }

    /// MPI_Init, after its barrier: asks for the policy's initial connections (all peers for
    /// static, ±2^k for partial) at once; `init_peers_connecting` says when they are settled.
    /// Every process dials and accepts concurrently from its progress engine, and the cm
    /// machine's race rule keeps one connection per pair, so no order can deadlock.
    pub fn connect_init_peers(&mut self) -> MpiResult<()> {
        self.init_peers = self.policy.init_peers();
        if self.init_peers.is_empty() {
            return Ok(());
        }
        self.cm()?;
        let now = self.now();
        self.policy.init(now);
        self.run_policy();
        self.run_cm();
        self.rearm();
        Ok(())
    }

    /// Some connection MPI_Init asked for has not been up yet and has not failed.
    pub fn init_peers_connecting(&self) -> bool {
        self.init_peers.iter().any(|r| {
            self.peers
                .get(r)
                .is_none_or(|p| p.sock.is_none() && p.failed.is_none())
        })
    }

    /// Fires the cm machine's and the policy's timers that are due.
    fn timers(&mut self) {
        let now = self.now();
        if self.accept_paused.is_some_and(|t| t <= now) {
            self.resume_accepting();
        }
        let due: Vec<Proc> = self
            .awaiting
            .iter()
            .filter(|&(_, &t)| t <= now)
            .map(|(&p, _)| p)
            .collect();
        for peer in due {
            self.awaiting.remove(&peer);
            let up = self
                .cm
                .as_ref()
                .is_some_and(|c| matches!(c.state(peer), handshake::PeerState::Connected(_)));
            if !up {
                self.peers.entry(peer).or_default().last_error =
                    Some("it agreed to connect over datagrams but never dialed".into());
                self.ud_close(peer);
                self.setup_failed(peer, self.cfg.connect_retries);
            }
        }
        if let Some(cm) = self.cm.as_mut() {
            if cm.poll_timeout().is_some_and(|t| t <= now) {
                cm.handle_timeout(now);
                self.run_cm();
            }
        }
        if self.policy.poll_timeout().is_some_and(|t| t <= now) {
            self.policy.handle_timeout(now);
            self.run_policy();
            self.run_cm();
        }
        if let Some(ud) = self.ud.as_mut() {
            if ud.poll_timeout().is_some_and(|t| t <= now) {
                ud.handle_timeout(now);
                self.run_ud();
            }
        }
    }

    /// Sets the timerfd for the machines' next deadline (and a held hello's next check).
    fn rearm(&mut self) {
        let now = self.now();
        let held = (!self.held.is_empty()).then_some(now + HELD_RECHECK);
        let next = self
            .cm
            .as_ref()
            .and_then(|c| c.poll_timeout())
            .into_iter()
            .chain(self.policy.poll_timeout())
            .chain(self.ud.as_ref().and_then(|u| u.poll_timeout()))
            .chain(held)
            .chain(self.accept_paused)
            .chain(self.awaiting.values().min().copied())
            .min();
        if next == self.timer_at && next.is_none_or(|t| t > now) {
            return;
        }
        // A later deadline keeps the earlier one armed: it only costs a wake-up that finds
        // nothing due (and re-arms then), where moving it cost a timerfd_settime per message
        // (adaptive's idle timer moves with every packet).
        if let (Some(armed), Some(t)) = (self.timer_at, next) {
            if armed > now && armed <= t {
                return;
            }
        }
        self.timer_at = next;
        // A due deadline fires at once (1 µs: a zero value would disarm the timer).
        let us = next.map_or(0, |t| t.saturating_sub(now).max(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (us / 1_000_000) as libc::time_t,
                tv_nsec: ((us % 1_000_000) * 1000) as libc::c_long,
            },
        };
        // SAFETY: the timerfd is ours; spec is valid; the old value is not asked for.
        unsafe { libc::timerfd_settime(self.timer, 0, &spec, std::ptr::null_mut()) };
    }

    /// Puts the listener back into the epoll set after a pause (`accept_all`).
    fn resume_accepting(&mut self) {
        if self.accept_paused.take().is_some() {
            let fd = self.listener.sock.as_raw_fd();
            // If this fails the listener stays paused; the next pause attempt retries.
            let _ = self.epoll_ctl(libc::EPOLL_CTL_MOD, fd, libc::EPOLLIN as u32, LISTENER);
        }
    }

    /// Clears the timerfd's expirations (the timers themselves run in `timers`).
    fn drain_timer(&mut self) {
        let mut buf = [0u8; 8];
        // SAFETY: reading 8 bytes into a valid buffer from our nonblocking timerfd.
        unsafe { libc::read(self.timer, buf.as_mut_ptr().cast(), 8) };
        self.timer_at = None;
    }

    /// Unwritten bytes to peers (MPI_Finalize waits for none).
    pub fn pending_bytes(&self) -> usize {
        self.peers
            .values()
            .map(|p| p.q.bytes() + p.dq_bytes)
            .sum::<usize>()
            + self.socks.values().map(|s| s.cq.bytes()).sum::<usize>()
    }

    /// Adaptive: datagrams are unacknowledged, acknowledgements owed, or data arrived lately.
    fn chan_pending(&self) -> bool {
        self.chan.as_ref().is_some_and(|c| !c.settled())
    }

    /// Adaptive: delivers what came over datagrams and moves datagram traffic along.
    fn poll_channel(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let Some(chan) = self.chan.as_mut() else {
            return 0;
        };
        let (mut pkts, mut bytes) = (0u64, 0u64);
        let mut from_peers: Vec<Proc> = Vec::new();
        let mut control: Vec<Vec<u8>> = Vec::new();
        let n = chan.poll(
            &mut |from, p| {
                pkts += 1;
                bytes += p.len() as u64;
                if from_peers.last() != Some(&from) {
                    from_peers.push(from);
                }
                deliver(from, p)
            },
            &mut |b| control.push(b.to_vec()),
        );
        self.stats.packets_received += pkts;
        self.stats.bytes_received += bytes;
        for b in control {
            self.on_control(&b);
        }
        let now = self.now();
        for p in from_peers {
            self.policy.received(p, now);
        }
        self.drain_datagrams();
        self.check_drained();
        n
    }

    /// Some connection is still being closed.
    fn closing(&self) -> bool {
        self.peers.values().any(|p| p.closing.is_some())
    }

    /// Drives every socket (accept, connect, handshakes, reads, writes), waiting up to
    /// `timeout_ms` for activity; returns the packets delivered.
    fn drive(&mut self, deliver: &mut dyn FnMut(Proc, &[u8]), timeout_ms: i32) -> usize {
        self.timers();
        // Adaptive: the channel's socket and timerfd are in our epoll set (CHANNEL below), so
        // it needs a pass here only for work no fd signals (its send backlog, a due timer);
        // polling it on every call cost a recvfrom and a timerfd read per progress call.
        let mut n = if self.chan.as_ref().is_some_and(|c| c.busy()) {
            self.poll_channel(deliver)
        } else {
            0
        };
        for sid in std::mem::take(&mut self.resume) {
            n += self.read_sock(sid, deliver);
        }
        for sid in self.held.clone() {
            n += self.read_sock(sid, deliver);
        }
        // Sleep only when nothing waits on us (a held hello is asked about again soon).
        let timeout_ms = if self.held.is_empty() || timeout_ms == 0 {
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
                self.drain_timer();
                self.timers();
                for sid in self.held.clone() {
                    n += self.read_sock(sid, deliver);
                }
                continue;
            }
            let sid = SockId(token);
            let Some(s) = self.socks.get(&sid) else {
                continue;
            };
            if s.phase == Phase::Connecting {
                // Writable when the connect finished; ERR/HUP alone when it was refused.
                self.connected(sid);
            } else if events & libc::EPOLLOUT as u32 != 0 {
                self.flush_sock(sid);
            }
            if events & (libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
                n += self.read_sock(sid, deliver);
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

    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> MpiResult<bool> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.cfg.max_packet {
            return Err(mpi_err!(
                MPI_ERR_OTHER,
                "tcp transport: a packet of {len} bytes to rank {to} exceeds the {}-byte limit",
                self.cfg.max_packet
            ));
        }
        if to >= self.size {
            return Err(mpi_err!(
                MPI_ERR_OTHER,
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
        let waiting = p.q.bytes() + p.dq_bytes;
        if waiting > 0 && waiting + conn::HEADER + len > self.cfg.sendq_bytes {
            self.stats.no_room += 1;
            return Ok(false);
        }
        // The policy keeps the LRU order and asks for the connection (making room under the
        // budget first); the packets themselves wait in the peer's queue, in order.
        let now = self.now();
        self.cm()?;
        let route = self.policy.send(to, (), len, now);
        self.run_policy();
        if let Some(e) = self.failed_err(to) {
            return Err(e);
        }
        if matches!(route, policy::Route::Datagram(())) && self.chan.is_some() {
            self.send_datagram(to, parts)?;
            self.stats.packets_sent += 1;
            self.stats.bytes_sent += len as u64;
            self.rearm();
            return Ok(true);
        }
        let usable = self.sendable(to);
        let p = self.peers.entry(to).or_default();
        p.used = true;
        let hdr = conn::header(len);
        let mut written = 0;
        if let (Some(sid), true) = (usable, p.q.is_empty()) {
            // Up and nothing waiting: straight from the caller's buffers.
            let s = &self.socks[&sid];
            if s.ctl.is_empty() {
                let mut iov = Vec::with_capacity(parts.len() + 1);
                iov.push(IoSlice::new(&hdr));
                iov.extend(parts.iter().map(|b| IoSlice::new(b)));
                match conn::sendv(s.stream.as_raw_fd(), &iov) {
                    Ok(n) => written = n,
                    Err(e) => {
                        self.sock_broken(sid, &format!("send failed: {e}"));
                        return Err(self.failed_err(to).unwrap_or_else(|| {
                            mpi_err!(MPI_ERR_OTHER, "tcp transport: send to rank {to}: {e}")
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
            let p = self.peers.get_mut(&to).expect("present");
            p.q.push(frame);
            match (p.sock, p.closing) {
                (Some(sid), None) => self.set_interest(sid),
                (None, None) if self.chan.is_none() => {
                    // The policy asked once; if the attempt it found under way (the peer's)
                    // has since ended without a connection, packets still wait: dial again.
                    // (Not while it waits for room or for an old connection's close.)
                    let opening = self.policy.opening(to);
                    let cm = self.cm()?;
                    if opening && cm.state(to) == handshake::PeerState::Idle {
                        cm.connect(to, now);
                    }
                    self.run_cm();
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
        let timer_due = self
            .cm
            .as_ref()
            .and_then(|c| c.poll_timeout())
            .into_iter()
            .chain(self.policy.poll_timeout())
            .any(|t| t <= now);
        let chan_busy = self.chan.as_ref().is_some_and(|c| c.busy());
        self.own.is_empty() && !timer_due && self.resume.is_empty() && !chan_busy
    }

    /// (Adaptive: no quiet spell here, unlike `shutdown`: MPI_Finalize's barrier makes
    /// progress, so a peer's retransmission is answered while it waits.)
    fn pending(&self) -> bool {
        self.pending_bytes() > 0 || self.chan.as_ref().is_some_and(|c| c.pending())
    }

    fn take_failures(&mut self) -> Vec<(Proc, String)> {
        if let Some(c) = self.chan.as_mut() {
            let lost = c.take_failures();
            self.dead.extend(lost);
        }
        std::mem::take(&mut self.dead)
    }

    fn connect_init(&mut self) -> MpiResult<()> {
        self.connect_init_peers()
    }

    fn init_connecting(&self) -> bool {
        self.init_peers_connecting()
    }

    fn stats(&self) -> TransportStats {
        let cm = self.cm.as_ref().map(|c| c.stats()).unwrap_or_default();
        TransportStats {
            strangers_dropped: self.stats.strangers_dropped + cm.silent,
            handshake_retries: cm.retries,
            race_losers: cm.races_lost,
            conn: self.policy.counters(),
            peers_used: self.peers.values().filter(|p| p.used).count() as u64,
            ..self.stats
        }
    }

    /// Lets every peer take the last bytes (connecting first if packets still wait for a
    /// connection), says BYE (so the EOF that follows is a clean close), and waits for the
    /// peers' BYE and EOF, at most FERRITE_TCP_LINGER_MS in all. Packets arriving now are
    /// dropped: after MPI_Finalize's barrier no peer sends anything this process needs.
    fn shutdown(&mut self) {
        let deadline = Instant::now() + std::time::Duration::from_millis(self.cfg.linger_ms);
        let left = |d: Instant| d.saturating_duration_since(Instant::now()).as_millis() as i32;
        while (self.pending_bytes() > 0 || self.closing() || self.chan_pending())
            && left(deadline) > 0
        {
            self.drive(&mut |_, _| {}, left(deadline).min(10));
        }
        let up: Vec<(Proc, SockId)> = self
            .peers
            .iter()
            .filter(|(_, p)| p.failed.is_none() && p.closing.is_none())
            .filter_map(|(&r, p)| p.sock.map(|s| (r, s)))
            .collect();
        for &(r, sid) in &up {
            self.peers
                .get_mut(&r)
                .expect("listed")
                .q
                .push(conn::BYE.to_le_bytes().to_vec());
            self.flush_sock(sid);
        }
        let mut shut: Vec<SockId> = Vec::new();
        while left(deadline) > 0 {
            for &(r, sid) in &up {
                let flushed = self.peers.get(&r).is_some_and(|p| p.q.is_empty());
                if flushed && !shut.contains(&sid) {
                    if let Some(s) = self.socks.get(&sid) {
                        let _ = s.stream.shutdown(std::net::Shutdown::Write);
                    }
                    shut.push(sid);
                }
            }
            // Done when every connection we said BYE on has been closed by its peer too.
            if up.iter().all(|(_, sid)| !self.socks.contains_key(sid)) {
                break;
            }
            self.drive(&mut |_, _| {}, left(deadline).min(10));
        }
        let all: Vec<SockId> = self.socks.keys().copied().collect();
        for sid in all {
            self.drop_sock(sid);
        }
    }
}

impl Drop for Tcp {
    fn drop(&mut self) {
        // Sockets close with their streams; the epoll and timer fds are ours.
        // SAFETY: both fds are owned by this Tcp and closed once.
        unsafe {
            libc::close(self.epoll);
            libc::close(self.timer);
        }
    }
}

#[cfg(test)]
mod tests;
