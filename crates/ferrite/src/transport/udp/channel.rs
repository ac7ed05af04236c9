//! The datagram channel: one datagram port per process driving one [`Reliable`] machine,
//! reused by the `udp` transport and (embedded in tcp and ofi) by the adaptive policy and the
//! `ud` handshake. The port is a UDP socket ([`UdpPort`]) or a libfabric FI_EP_DGRAM
//! endpoint (`ofi::dgram::OfiPort`); everything else here is the same for both.
//!
//! - The UDP socket binds on the tcp address rule (FERRITE_TCP_IF; loopback on one host, a
//!   reachable address across hosts) and its address is published as the card `udp-<rank>`;
//!   a peer's card is fetched on first send to it (or its address is learned from a datagram
//!   of ours that it sent, once the job secret checked out).
//! - `Data`/`Ack` datagrams feed the machine; handshake kinds (`Req`, `Reply`, `Confirm`) are
//!   handed to the caller's `control` whole (`Ud` checks them); anything else is counted as a
//!   stranger and dropped.
//! - The machine's timers fire without the caller asking: a timerfd armed at
//!   `Reliable::poll_timeout` sits in the channel's epoll set with the socket, and that epoll
//!   fd is the wake fd, so a rank blocked in the progress engine still acknowledges and
//!   retransmits.
//!
//! CONTRACT (what the adaptive policy relies on): an acknowledgement never leaves this process
//! before every message it covers has been handed to `deliver`. The machine only queues
//! datagrams; they are written to the socket by [`Channel::flush`], and every path that feeds
//! the machine input hands all its `Delivered` events to `deliver` before flushing. So a
//! sender that saw all its datagrams acknowledged may continue on another channel without
//! being overtaken.

use super::super::tcp::card::Board;
use super::super::timer::Timer;
use super::super::Proc;
use super::port::{Port, UdpPort};
use crate::conn::reliable::{self, Event, Reliable};
use crate::conn::wire::{self, Kind};
use crate::conn::Micros;
use crate::terr;
use crate::transport::error::{Error, TResult};
use crate::transport::TransportStats;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::io::RawFd;
use std::time::Instant;

/// Largest datagram we can receive (the UDP payload limit over IPv4).
pub const MAX_UDP: usize = 65507;

/// Test-only fault injection on the send path (FERRITE_UDP_DROP_PERMILLE sets `drop`): the
/// real socket and timers then have to recover.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inject {
    pub drop_permille: u32,
    pub dup_permille: u32,
    /// Hold a datagram back and send it after the next one.
    pub reorder_permille: u32,
    pub seed: u64,
}

#[derive(Clone, Debug)]
pub struct ChannelConfig {
    pub ip: IpAddr,
    /// The reliability machine's parameters (job size, datagram size, window, timers).
    pub rel: reliable::Config,
    /// Receive buffer asked of the kernel (bytes; forced when permitted).
    pub rcvbuf: usize,
    pub inject: Inject,
}

/// The channel's counters (the machine's are in `reliable`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelStats {
    pub reliable: reliable::Stats,
    /// Datagrams that are not ours at all (not version 1, unknown kind), or that arrived
    /// before the job secret could be known. The machine's `drops` holds the rest.
    pub strangers: u64,
    pub control_sent: u64,
    pub control_received: u64,
    /// sendto failures other than a full socket buffer (the machine retransmits).
    pub send_errors: u64,
    pub injected_drops: u64,
}

pub struct Channel<P: Port = UdpPort> {
    rank: Proc,
    port: P,
    cfg: reliable::Config,
    /// Made on first need: the job secret is known only after MPI_Init's barrier.
    rel: Option<Reliable>,
    secret: u64,
    addrs: HashMap<Proc, P::Addr>,
    /// Peers reported unreachable, and why.
    failed: HashMap<Proc, String>,
    /// Of those, the ones `take_failures` has not handed out yet, in order found.
    failures_new: Vec<Proc>,
    /// Peers we sent data to (for `pending`).
    sent_to: BTreeSet<Proc>,
    epoll: RawFd,
    /// Set for the machine's next deadline.
    timer: Timer,
    t0: Instant,
    inject: Inject,
    rng: u64,
    held: Option<(P::Addr, Vec<u8>)>,
    /// Datagrams the socket had no room for, in order.
    backlog: VecDeque<(P::Addr, Vec<u8>)>,
    buf: Vec<u8>,
    /// When data last arrived (shutdown waits for a quiet spell).
    last_data: Instant,
    stats: ChannelStats,
}

fn os_err(what: &str) -> Error {
    let e = io::Error::last_os_error();
    Error::os(&e, format!("udp channel: {what} failed: {e}"))
}

impl Channel<UdpPort> {
    /// Binds the socket, sets up the wake fd and publishes the card `udp-<rank>` (before
    /// MPI_Init's barrier).
    pub fn new(rank: Proc, cfg: ChannelConfig, board: Box<dyn Board>) -> TResult<Channel> {
        let port = UdpPort::bind(rank, cfg.ip, cfg.rcvbuf, board)?;
        Channel::with_port(rank, cfg.rel, cfg.inject, port)
    }

    /// The address peers send to.
    pub fn addr(&self) -> SocketAddr {
        self.port.addr
    }
}

impl<P: Port> Channel<P> {
    /// The channel over `port` (bound and published by its maker), with its wake fd.
    pub fn with_port(
        rank: Proc,
        cfg: reliable::Config,
        inject: Inject,
        port: P,
    ) -> TResult<Channel<P>> {
        // SAFETY: plain syscalls; both fds are owned by the Channel and closed in Drop.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(os_err("epoll_create1"));
        }
        let Ok(timer) = Timer::new() else {
            // SAFETY: closing the epoll fd we just made.
            unsafe { libc::close(epoll) };
            return Err(os_err("timerfd_create"));
        };
        let ch = Channel {
            rank,
            port,
            cfg,
            rel: None,
            secret: 0,
            addrs: HashMap::new(),
            failed: HashMap::new(),
            failures_new: Vec::new(),
            sent_to: BTreeSet::new(),
            epoll,
            timer,
            t0: Instant::now(),
            inject,
            rng: inject.seed ^ (u64::from(rank) << 32) ^ 0x9e37_79b9_7f4a_7c15,
            held: None,
            backlog: VecDeque::new(),
            buf: vec![0; MAX_UDP + 1],
            last_data: Instant::now(),
            stats: ChannelStats::default(),
        };
        for fd in [ch.port.fd(), ch.timer.fd()] {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: both fds are open; ev is a valid event.
            if unsafe { libc::epoll_ctl(ch.epoll, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
                return Err(os_err("epoll_ctl"));
            }
        }
        Ok(ch)
    }

    /// What the datagrams go through.
    pub fn port(&self) -> &P {
        &self.port
    }

    /// Readable when a datagram arrived or a timer is due (for the progress engine's epoll).
    pub fn wake_fd(&self) -> RawFd {
        self.epoll
    }

    fn now(&self) -> Micros {
        self.t0.elapsed().as_micros() as Micros
    }

    /// The machine, made on first need with the job secret from the board.
    fn rel(&mut self) -> TResult<&mut Reliable> {
        if self.rel.is_none() {
            self.secret = self.port.secret()?;
            self.rel = Some(Reliable::new(self.rank, self.secret, self.cfg.clone()));
        }
        Ok(self.rel.as_mut().expect("made above"))
    }

    /// The job secret (fetched on first need).
    pub fn secret(&mut self) -> TResult<u64> {
        self.rel()?;
        Ok(self.secret)
    }

    /// Why `peer` cannot be reached, as the error sends to it (and waits on it) report.
    pub fn failed(&self, peer: Proc) -> Option<Error> {
        self.failed.get(&peer).map(|why| {
            terr!(
                PeerFailed,
                "udp: communication with rank {peer} failed: {why}"
            )
        })
    }

    /// Peers found unreachable since the last call, each once, with the reason (for
    /// `Transport::take_failures`: receives waiting on them then fail).
    pub fn take_failures(&mut self) -> Vec<(Proc, String)> {
        std::mem::take(&mut self.failures_new)
            .into_iter()
            .map(|p| (p, self.failed(p).map(|e| e.msg).unwrap_or_default()))
            .collect()
    }

    /// Records that `peer` is unreachable (the first reason stays). Takes the two fields, not
    /// `self`, so it can run while the reliability machine is borrowed.
    fn give_up(
        failed: &mut HashMap<Proc, String>,
        failures_new: &mut Vec<Proc>,
        peer: Proc,
        why: String,
    ) {
        if let std::collections::hash_map::Entry::Vacant(e) = failed.entry(peer) {
            e.insert(why);
            failures_new.push(peer);
        }
    }

    /// `peer`'s address: learned, or from its card.
    fn addr_of(&mut self, peer: Proc) -> TResult<P::Addr> {
        if let Some(a) = self.addrs.get(&peer) {
            return Ok(*a);
        }
        let a = self.port.lookup(peer)?;
        self.addrs.insert(peer, a);
        Ok(a)
    }

    /// Takes one whole message (the parts concatenated) for `to`, reliably and in order.
    /// `Ok(false)`: the window is full, nothing taken; try again after `poll`.
    pub fn send(&mut self, to: Proc, parts: &[&[u8]]) -> TResult<bool> {
        if let Some(e) = self.failed(to) {
            return Err(e);
        }
        if to == self.rank || to >= self.cfg.job_size {
            return Err(terr!(
                InvalidArg,
                "udp channel: cannot send to rank {to} (this is rank {} of {})",
                self.rank,
                self.cfg.job_size
            ));
        }
        self.addr_of(to)?;
        let now = self.now();
        let joined;
        let msg: &[u8] = if parts.len() == 1 {
            parts[0]
        } else {
            joined = parts.concat();
            &joined
        };
        match self.rel()?.send(to, msg, now) {
            Ok(true) => {
                self.sent_to.insert(to);
                self.flush();
                self.rearm();
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(reliable::PeerUnreachable(p)) => Err(self
                .failed(p)
                .unwrap_or_else(|| terr!(PeerFailed, "udp: rank {p} is unreachable"))),
        }
    }

    /// Sends one handshake datagram (a `Req`, `Reply` or `Confirm` made by `Ud`) to `to`,
    /// unreliably: `Ud` retransmits on its own timers.
    pub fn send_control(&mut self, to: Proc, bytes: &[u8]) -> TResult<()> {
        let a = self.addr_of(to)?;
        self.stats.control_sent += 1;
        self.transmit(a, bytes.to_vec());
        Ok(())
    }

    /// Datagrams to `peer` unacknowledged or waiting for the window (0: all it was sent has
    /// been handed to its `deliver`).
    pub fn in_flight(&self, peer: Proc) -> usize {
        self.rel.as_ref().map_or(0, |r| r.in_flight(peer))
    }

    /// Anything sent is still unacknowledged or waits for socket room, or we owe a peer an
    /// acknowledgement. (MPI_Finalize progresses until none is true before its PMI barrier,
    /// where nobody polls: a peer waiting there for our delayed acknowledgement would wait
    /// until it gave us up.)
    pub fn pending(&self) -> bool {
        !self.backlog.is_empty() || self.next_timeout().is_some()
    }

    /// Anything sent is still unacknowledged (acknowledgements we owe aside).
    pub fn unacknowledged(&self) -> bool {
        !self.backlog.is_empty() || self.sent_to.iter().any(|&p| self.in_flight(p) > 0)
    }

    /// When the machine next needs `handle_timeout` (µs on the channel's clock), if ever.
    pub fn next_timeout(&self) -> Option<Micros> {
        self.rel.as_ref().and_then(|r| r.poll_timeout())
    }

    /// Something is due or waiting now: the caller must not sleep.
    pub fn busy(&self) -> bool {
        !self.backlog.is_empty() || self.next_timeout().is_some_and(|t| t <= self.now())
    }

    /// Nothing is due or waiting and the port lets us sleep on the wake fd (libfabric
    /// requires fi_trywait before blocking on its wait fds).
    pub fn may_block(&mut self) -> bool {
        !self.busy() && self.port.may_block()
    }

    /// Reads every datagram that arrived and fires due timers: whole messages go to
    /// `deliver(from, msg)` in order, handshake datagrams to `control(bytes)`. Returns the
    /// messages delivered.
    pub fn poll(
        &mut self,
        deliver: &mut dyn FnMut(Proc, &[u8]),
        control: &mut dyn FnMut(&[u8]),
    ) -> usize {
        self.timer.drain();
        self.retry_backlog();
        // What arrived first, timers after: a process that was descheduled past its RTO
        // would otherwise resend before reading the acknowledgements waiting for it.
        let mut n = 0;
        for _ in 0..1024 {
            let (len, from) = match self.port.recv_from(&mut self.buf) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ICMP errors and the like: the machine's timers deal with lost peers.
                Err(_) => continue,
            };
            if len > MAX_UDP {
                self.stats.strangers += 1;
                continue;
            }
            n += self.receive(len, from, deliver, control);
        }
        n += self.timers(deliver);
        self.flush();
        self.rearm();
        n
    }

    fn receive(
        &mut self,
        len: usize,
        from: Option<P::Addr>,
        deliver: &mut dyn FnMut(Proc, &[u8]),
        control: &mut dyn FnMut(&[u8]),
    ) -> usize {
        match wire::kind_of(&self.buf[..len]) {
            Some(Kind::Data | Kind::Ack) => {}
            Some(Kind::Req | Kind::Reply | Kind::Confirm) => {
                self.learn(len, from);
                self.stats.control_received += 1;
                control(&self.buf[..len]);
                return 0;
            }
            _ => {
                self.stats.strangers += 1;
                return 0;
            }
        }
        if self.rel().is_err() {
            self.stats.strangers += 1; // no secret to check it against
            return 0;
        }
        self.learn(len, from);
        if self.buf[1] == Kind::Data as u8 {
            self.last_data = Instant::now();
        }
        let now = self.now();
        let rel = self.rel.as_mut().expect("made above");
        rel.handle_datagram(&self.buf[..len], now);
        self.events(deliver)
    }

    /// Remembers where a datagram carrying the job secret came from (saves a card lookup
    /// for the acknowledgements we owe it).
    fn learn(&mut self, len: usize, from: Option<P::Addr>) {
        let Some(from) = from else {
            return;
        };
        if self.rel.is_none() {
            return;
        }
        let size = self.cfg.job_size;
        if let Ok(p) = wire::decode_prefix(&self.buf[..len], self.secret, self.rank, size) {
            self.addrs.entry(p.src).or_insert(from);
        }
    }

    /// Fires the machine's due timers.
    fn timers(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let now = self.now();
        if let Some(rel) = self.rel.as_mut() {
            if rel.poll_timeout().is_some_and(|t| t <= now) {
                rel.handle_timeout(now);
                return self.events(deliver);
            }
        }
        0
    }

    /// Hands the machine's events out: messages to `deliver`, unreachable peers to `failed`.
    fn events(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let mut n = 0;
        let Some(rel) = self.rel.as_mut() else {
            return 0;
        };
        while let Some(ev) = rel.poll_event() {
            match ev {
                Event::Delivered { from, msg } => {
                    deliver(from, &msg);
                    n += 1;
                }
                Event::Unreachable { peer } => {
                    let why = format!(
                        "a datagram to it went unacknowledged through {} retransmissions",
                        self.cfg.max_retries
                    );
                    Self::give_up(&mut self.failed, &mut self.failures_new, peer, why);
                }
            }
        }
        n
    }

    /// Writes the machine's queued datagrams. Every caller has handed all `Delivered` events
    /// out first (the acknowledgement contract).
    fn flush(&mut self) {
        let Some(rel) = self.rel.as_mut() else {
            return;
        };
        let out: Vec<reliable::Transmit> = std::iter::from_fn(|| rel.poll_transmit()).collect();
        for t in out {
            match self.addr_of(t.to) {
                Ok(a) => self.transmit(a, t.bytes),
                Err(e) => Self::give_up(&mut self.failed, &mut self.failures_new, t.to, e.msg),
            }
        }
    }

    fn random_permille(&mut self) -> u32 {
        // xorshift64*: test-only fault injection needs no better.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as u32 % 1000
    }

    /// Sends one datagram through the fault injector (when configured).
    fn transmit(&mut self, to: P::Addr, bytes: Vec<u8>) {
        let inj = self.inject;
        if inj
            == (Inject {
                seed: inj.seed,
                ..Inject::default()
            })
        {
            return self.sendto(to, bytes);
        }
        if self.random_permille() < inj.drop_permille {
            self.stats.injected_drops += 1;
            return;
        }
        if self.random_permille() < inj.dup_permille {
            self.sendto(to, bytes.clone());
        }
        if self.held.is_none() && self.random_permille() < inj.reorder_permille {
            self.held = Some((to, bytes));
            return;
        }
        self.sendto(to, bytes);
        if let Some((a, b)) = self.held.take() {
            self.sendto(a, b);
        }
    }

    fn sendto(&mut self, to: P::Addr, bytes: Vec<u8>) {
        if !self.backlog.is_empty() {
            self.backlog.push_back((to, bytes));
            return;
        }
        match self.port.send_to(&bytes, to) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.backlog.push_back((to, bytes)),
            Err(_) => self.stats.send_errors += 1,
        }
    }

    fn retry_backlog(&mut self) {
        while let Some((to, bytes)) = self.backlog.pop_front() {
            match self.port.send_to(&bytes, to) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.backlog.push_front((to, bytes));
                    return;
                }
                Err(_) => self.stats.send_errors += 1,
            }
        }
    }

    /// Sets the timerfd for the machine's next deadline (`Timer::set`; with none it stays as
    /// it is: a spurious wake-up at most).
    fn rearm(&mut self) {
        if let Some(want) = self.next_timeout() {
            let now = self.now();
            self.timer.set(Some(want), now);
        }
    }

    /// Nothing unacknowledged or owed, and no data for two initial retransmission timeouts
    /// (long enough for a peer's retransmission to arrive once more): a process may leave.
    pub fn settled(&self) -> bool {
        !self.pending()
            && self.last_data.elapsed()
                >= std::time::Duration::from_micros(2 * self.cfg.rto_initial)
    }

    /// Adds the channel's counters to a transport's: datagrams not ours (wrong secret,
    /// garbage, malformed) as strangers; retransmissions, timeouts, acknowledgements,
    /// duplicates.
    pub fn add_stats(&self, s: &mut TransportStats) {
        let c = self.stats();
        s.strangers_dropped += c.strangers + c.reliable.drops.total();
        s.retransmits += c.reliable.retransmits;
        s.retransmit_timeouts += c.reliable.timeouts;
        s.acks_sent += c.reliable.acks_sent;
        s.duplicates += c.reliable.duplicates;
    }

    pub fn stats(&self) -> ChannelStats {
        ChannelStats {
            reliable: self.rel.as_ref().map(|r| r.stats()).unwrap_or_default(),
            ..self.stats
        }
    }
}

impl<P: Port> Drop for Channel<P> {
    fn drop(&mut self) {
        // SAFETY: owned by this Channel and closed once (the timer closes with its Timer).
        unsafe { libc::close(self.epoll) };
    }
}
