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

pub mod card;
pub mod conn;
pub mod listener;

use super::{Proc, Transport, TransportStats};
use crate::abi::consts::MPI_ERR_OTHER;
use crate::conn::handshake::{self, Action, Cm, Event, SockId, HELLO_LEN};
use crate::conn::Micros;
use crate::error::MpiResult;
use crate::mpi_err;
use crate::runtime::config;
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
    /// Largest packet (FERRITE_TCP_MAX_PACKET).
    pub max_packet: usize,
    /// Unwritten bytes queued per peer before `try_send` says "no room" (FERRITE_TCP_SENDQ).
    pub sendq_bytes: usize,
    /// How long MPI_Finalize waits for peers to take the last bytes (FERRITE_TCP_LINGER_MS).
    pub linger_ms: u64,
    /// Connection attempts to a peer before it counts as failed (FERRITE_TCP_CONNECT_RETRIES).
    pub connect_retries: u32,
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
        Ok(TcpConfig {
            ip,
            max_packet,
            sendq_bytes: config::get("FERRITE_TCP_SENDQ"),
            linger_ms: config::get("FERRITE_TCP_LINGER_MS"),
            connect_retries: config::get("FERRITE_TCP_CONNECT_RETRIES"),
        })
    }
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
}

#[derive(Default)]
struct Peer {
    q: SendQueue,
    /// The socket carrying the connection, once up.
    sock: Option<SockId>,
    /// Why sends to this peer fail now.
    failed: Option<String>,
    /// The last dial problem, for the message if the peer is given up.
    last_error: Option<String>,
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
    socks: HashMap<SockId, Sock>,
    peers: HashMap<Proc, Peer>,
    /// Packets to ourselves (when `self` is not in FERRITE_TRANSPORTS).
    own: VecDeque<Vec<u8>>,
    t0: Instant,
    stats: TransportStats,
}

const LISTENER: u64 = u64::MAX;
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
        let mut tcp = Tcp {
            rank,
            size,
            cfg,
            listener,
            epoll,
            board,
            cm: None,
            socks: HashMap::new(),
            peers: HashMap::new(),
            own: VecDeque::new(),
            t0: Instant::now(),
            stats: TransportStats::default(),
        };
        let fd = tcp.listener.sock.as_raw_fd();
        tcp.epoll_ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32, LISTENER)
            .map_err(|e| mpi_err!(MPI_ERR_OTHER, "tcp transport: epoll_ctl: {e}"))?;
        let addr = tcp.listener.addr;
        tcp.board.put(rank, addr)?;
        Ok(tcp)
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
            let mut hs = handshake::Config::new(self.size);
            hs.max_retries = self.cfg.connect_retries;
            self.cm = Some(Cm::new(self.rank, secret, hs));
        }
        Ok(self.cm.as_mut().expect("just made"))
    }

    fn fail(&mut self, peer: Proc, why: String) {
        let p = self.peers.entry(peer).or_default();
        if p.failed.is_none() {
            p.failed = Some(why);
        }
        p.q.clear();
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
            let fd = s.stream.as_raw_fd();
            // Deregistering cannot fail for a registered fd; closing would remove it anyway.
            let _ = self.epoll_ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
            if let Some(peer) = s.peer {
                if let Some(p) = self.peers.get_mut(&peer) {
                    if p.sock == Some(sid) {
                        p.sock = None;
                    }
                }
            }
        }
    }

    fn set_interest(&mut self, sid: SockId) {
        let Some(s) = self.socks.get(&sid) else {
            return;
        };
        let queued = match (s.phase, s.peer) {
            (Phase::Up, Some(p)) => self.peers.get(&p).is_some_and(|p| !p.q.is_empty()),
            _ => false,
        };
        let want_out = s.phase == Phase::Connecting || !s.ctl.is_empty() || queued;
        let ev = libc::EPOLLIN as u32 | if want_out { libc::EPOLLOUT as u32 } else { 0 };
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
        if broken.is_none() && s.ctl.is_empty() && s.phase == Phase::Up {
            if let Some(p) = s.peer.and_then(|p| self.peers.get_mut(&p)) {
                if let Err(e) = p.q.flush(fd) {
                    broken = Some(e);
                }
            }
        }
        if let Some(e) = broken {
            self.sock_broken(sid, &format!("send failed: {e}"));
            return;
        }
        self.set_interest(sid);
    }

    /// A socket failed or closed under us. An up connection that ends without the peer's BYE
    /// means the peer is gone.
    fn sock_broken(&mut self, sid: SockId, why: &str) {
        let Some(s) = self.socks.get(&sid) else {
            return;
        };
        let (peer, phase, clean) = (s.peer, s.phase, s.bye);
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
            self.stats.conns_closed += 1;
            let why = if clean {
                format!("rank {peer} has closed its connections in MPI_Finalize")
            } else {
                format!("the connection to rank {peer} was lost ({why}) before it finalized")
            };
            self.fail(peer, why);
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
                Event::Connected { peer, .. } => {
                    let Some(sid) = self.cm.as_ref().and_then(|c| c.socket_of(peer)) else {
                        continue;
                    };
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
                    self.peers.entry(peer).or_default().sock = Some(sid);
                    self.flush_sock(sid);
                }
                Event::Failed { peer, retries } => {
                    let p = self.peers.entry(peer).or_default();
                    let last = p.last_error.clone().unwrap_or_else(|| "no answer".into());
                    self.fail(
                        peer,
                        format!("cannot connect to rank {peer} after {retries} retries: {last}"),
                    );
                }
                // The socket is already gone (sock_broken); failure was decided there.
                Event::Closed { .. } | Event::Superseded { .. } => {}
            }
        }
    }

    fn do_action(&mut self, a: Action) {
        match a {
            Action::Connect { sock, peer } => {
                let res = match self.board.get(peer) {
                    Ok(Some(addr)) => {
                        listener::connect(addr).map_err(|e| format!("connect to {addr}: {e}"))
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
                    };
                    self.add_sock(sid, s);
                }
                Ok(None) => return,
                // EMFILE and the like: the connection stays in the backlog; retried next poll.
                Err(_) => return,
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
            let Some(s) = self.socks.get_mut(&sid) else {
                return delivered;
            };
            if s.phase == Phase::Connecting {
                return delivered;
            }
            // Consume what is buffered.
            if s.phase == Phase::Hello {
                if let Some(h) = s.rbuf.take(HELLO_LEN) {
                    let h = h.to_vec();
                    let now = self.now();
                    if let Some(cm) = self.cm.as_mut() {
                        let before = cm.stats().drops.total();
                        cm.received(sid, &h, now);
                        self.stats.strangers_dropped += cm.stats().drops.total() - before;
                    }
                    self.run_cm();
                    continue;
                }
            } else if let Some(peer) = s.peer {
                let mut bad = None;
                loop {
                    match s.rbuf.next_frame(max) {
                        Ok(Some(Frame::Packet(p))) => {
                            self.stats.packets_received += 1;
                            self.stats.bytes_received += p.len() as u64;
                            delivered += 1;
                            deliver(peer, p);
                        }
                        Ok(Some(Frame::Bye)) => s.bye = true,
                        Ok(None) => break,
                        Err(len) => {
                            bad = Some(len);
                            break;
                        }
                    }
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

    /// Fires the cm machine's timers that are due.
    fn timers(&mut self) {
        let now = self.now();
        if let Some(cm) = self.cm.as_mut() {
            if cm.poll_timeout().is_some_and(|t| t <= now) {
                cm.handle_timeout(now);
                self.run_cm();
            }
        }
    }

    /// Unwritten bytes to peers (MPI_Finalize waits for none).
    pub fn pending_bytes(&self) -> usize {
        self.peers.values().map(|p| p.q.bytes()).sum()
    }

    /// Drives every socket (accept, connect, handshakes, reads, writes), waiting up to
    /// `timeout_ms` for activity; returns the packets delivered.
    fn drive(&mut self, deliver: &mut dyn FnMut(Proc, &[u8]), timeout_ms: i32) -> usize {
        self.timers();
        let mut n = 0;
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: evs is valid for 64 events.
        let k = unsafe { libc::epoll_wait(self.epoll, evs.as_mut_ptr(), 64, timeout_ms) };
        for ev in evs.iter().take(k.max(0) as usize) {
            let (events, token) = (ev.events, ev.u64);
            if token == LISTENER {
                self.accept_all();
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
        let p = self.peers.entry(to).or_default();
        if let Some(why) = &p.failed {
            return Err(mpi_err!(MPI_ERR_OTHER, "tcp transport: {why}"));
        }
        if !p.q.is_empty() && p.q.bytes() + conn::HEADER + len > self.cfg.sendq_bytes {
            self.stats.no_room += 1;
            return Ok(false);
        }
        let hdr = conn::header(len);
        let mut written = 0;
        if let (Some(sid), true) = (p.sock, p.q.is_empty()) {
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
                        let why = self.peers[&to].failed.clone().unwrap_or_default();
                        return Err(mpi_err!(MPI_ERR_OTHER, "tcp transport: {why}"));
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
            match p.sock {
                Some(sid) => self.set_interest(sid),
                None => {
                    let now = self.now();
                    let cm = self.cm()?;
                    if cm.state(to) == handshake::PeerState::Idle {
                        cm.connect(to, now);
                    }
                    self.run_cm();
                }
            }
        }
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
            .is_some_and(|t| t <= now);
        self.own.is_empty() && !timer_due
    }

    fn pending(&self) -> bool {
        self.pending_bytes() > 0
    }

    fn stats(&self) -> TransportStats {
        let cm = self.cm.as_ref().map(|c| c.stats()).unwrap_or_default();
        TransportStats {
            handshake_retries: cm.retries,
            race_losers: cm.races_lost,
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
        while self.pending_bytes() > 0 && left(deadline) > 0 {
            self.drive(&mut |_, _| {}, left(deadline).min(10));
        }
        let up: Vec<(Proc, SockId)> = self
            .peers
            .iter()
            .filter(|(_, p)| p.failed.is_none())
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
        // Sockets close with their streams; the epoll fd is ours.
        // SAFETY: the epoll fd is owned by this Tcp and closed once.
        unsafe { libc::close(self.epoll) };
    }
}

#[cfg(test)]
mod tests;
