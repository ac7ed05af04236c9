//! The ofi transport's datagram channel: a libfabric FI_EP_DGRAM endpoint as the [`Port`] of
//! the same reliable datagram [`Channel`] tcp embeds (udp/channel.rs: `conn::reliable`'s
//! sequence numbers, acknowledgements, retransmission and segmentation, and the routing of
//! `ud` handshake datagrams), for FERRITE_CONN=adaptive traffic and FERRITE_CONN_SETUP=ud.
//!
//! Why FI_EP_DGRAM and not FI_EP_RDM: the channel already makes datagrams reliable, and the
//! adaptive switch needs its contract (a datagram is acknowledged only once delivered to the
//! MPI layer above, so the connection never overtakes it) — RDM's own acknowledgements say
//! nothing about that. And RDM over a connection-oriented provider (tcp;ofi_rxm) opens
//! connections underneath, which is what adaptive exists to avoid; over udp;ofi_rxd it would
//! be a second reliability protocol under ours. FI_EP_DGRAM is the UD queue pair of the
//! papers (verbs, efa offer it; udp on this machine).
//!
//! - Provider: FERRITE_OFI_DGRAM_PROVIDER; empty: the transport's provider if it has
//!   FI_EP_DGRAM endpoints, else `udp`. Domain: FERRITE_OFI_IFACE (as the MSG side).
//! - The endpoint's name (fi_getname) is published as `ofid-<rank>`; a peer's is inserted
//!   into the address vector (FI_AV_TABLE) on first need.
//! - Receives: RX_SLOTS buffers of the provider's largest message posted from any source,
//!   reposted once their datagram is copied out. Sends: fi_inject up to the provider's inject
//!   size, else from one of TX_SLOTS send buffers; -FI_EAGAIN is "no room" (the channel keeps
//!   the datagram and tries again).
//! - The completion queue's wait fd is the port's fd; `may_block` is fi_trywait. Once
//!   fi_trywait said the fd will signal what comes next (`quiet`), the transport's progress
//!   skips the channel until the fd is readable, a timer is due or a send waits (`idle`):
//!   reading the queue costs the udp provider a recvmsg, the channel a timerfd read.
//! - What is not ours (garbage, another job's secret) is dropped by the channel and counted
//!   (`strangers_dropped` in the report); the first one also prints a warning on stderr.

use super::ffi::{self, dgram::Av, CqEntry, Domain, Ep, Fabric, Info, Mr, ProvInfo};
use super::{Board, Deliver, Ofi, OfiConfig, DATA, QUEUE_MAX};
use crate::conn::{policy, reliable};
use crate::consts::MPI_ERR_UNSUPPORTED_OPERATION;
use crate::error::MpiResult;
use crate::mpi_err;
use crate::runtime::config;
use crate::transport::error::TResult;
use crate::transport::udp::{self, Channel, Datagrams, Inject, Port};
use crate::transport::{Proc, TransportStats};
use std::collections::VecDeque;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// Receive buffers posted (about one window of datagrams from one peer).
const RX_SLOTS: usize = 256;
/// Send buffers for datagrams larger than the provider's inject size.
const TX_SLOTS: usize = 64;
const CTX_RECV: usize = 1 << 32;
const CTX_SEND: usize = 2 << 32;

/// A libfabric FI_EP_DGRAM endpoint as a datagram port (see the module's text).
pub struct OfiPort {
    // Fields drop in this order: the endpoint and registrations before the queue, address
    // vector, domain and fabric they belong to.
    ep: Ep,
    rx_mr: Option<Mr>,
    tx_mr: Option<Mr>,
    rx: Vec<u8>,
    tx: Vec<u8>,
    av: Av,
    cq: ffi::Cq,
    _domain: Domain,
    fabric: Fabric,
    _info: Info,
    prov: ProvInfo,
    /// The largest datagram (the provider's max_msg_size).
    mtu: usize,
    tx_free: Vec<usize>,
    /// Receive buffers holding a datagram not yet taken: (slot, length).
    ready: VecDeque<(usize, usize)>,
    cq_fd: RawFd,
    /// fi_trywait succeeded and the queue has not been read since: the fd signals the next
    /// completion.
    quiet: bool,
    board: Box<dyn Board>,
    /// Completion errors (failed sends, receives), counted.
    pub errors: u64,
}

/// The provider for datagrams: FERRITE_OFI_DGRAM_PROVIDER, else the transport's own if it
/// has FI_EP_DGRAM endpoints, else udp.
fn open_info(cfg: &OfiConfig) -> MpiResult<Info> {
    let want: String = config::get::<String>("FERRITE_OFI_DGRAM_PROVIDER")
        .trim()
        .to_string();
    let tries: Vec<&str> = if !want.is_empty() {
        vec![want.as_str()]
    } else if cfg.provider == "udp" {
        vec!["udp"]
    } else {
        vec![cfg.provider.as_str(), "udp"]
    };
    let mut why = Vec::new();
    for p in &tries {
        match ffi::dgram::info(p, &cfg.iface) {
            Ok(i) => return Ok(i),
            Err(e) => why.push(e),
        }
    }
    Err(mpi_err!(
        MPI_ERR_UNSUPPORTED_OPERATION,
        "ofi transport: FERRITE_CONN=adaptive and FERRITE_CONN_SETUP=ud need a libfabric \
         datagram endpoint (FI_EP_DGRAM) and none was found: {} (set \
         FERRITE_OFI_DGRAM_PROVIDER, or use FERRITE_CONN=ondemand/static/partial with \
         FERRITE_CONN_SETUP=cm)",
        why.join("; ")
    ))
}

impl OfiPort {
    /// Opens the endpoint, posts its receives and publishes its name (before MPI_Init's
    /// barrier).
    pub fn open(rank: Proc, cfg: &OfiConfig, board: Box<dyn Board>) -> MpiResult<OfiPort> {
        let e = |m: String| mpi_err!(crate::consts::MPI_ERR_OTHER, "ofi datagram channel: {m}");
        let info = open_info(cfg)?;
        let prov = info.prov();
        let mtu = prov.max_msg_size.min(udp::channel::MAX_UDP);
        if mtu <= reliable::HEADER_LEN {
            return Err(e(format!(
                "provider {} offers datagrams of {mtu} bytes, too small for the channel's \
                 {}-byte header",
                prov.provider,
                reliable::HEADER_LEN
            )));
        }
        let fabric = Fabric::open(&info).map_err(e)?;
        let domain = fabric.domain(&info).map_err(e)?;
        let cq = domain.cq(RX_SLOTS + TX_SLOTS + 64).map_err(e)?;
        let av = Av::open(&domain, 64).map_err(e)?;
        let ep = domain.endpoint(&info, 0).map_err(e)?;
        let name = ep.bind_av_enable(&av, &cq).map_err(e)?;
        if let Some(fd) = provider_socket(&name) {
            udp::port::set_buffers(fd, config::get("FERRITE_UDP_RCVBUF"));
        }
        let cq_fd = cq.fd().map_err(e)?;
        let mut rx = vec![0u8; RX_SLOTS * mtu];
        let mut tx = vec![0u8; TX_SLOTS * mtu];
        let (rx_mr, tx_mr) = if prov.mr_mode & ffi::FI_MR_LOCAL != 0 {
            // SAFETY: rx and tx are owned by the port and outlive their registrations
            // (field order).
            unsafe {
                (
                    Some(
                        domain
                            .mr_reg(rx.as_mut_ptr() as u64, rx.len(), ffi::FI_RECV, 1)
                            .map_err(e)?,
                    ),
                    Some(
                        domain
                            .mr_reg(tx.as_mut_ptr() as u64, tx.len(), ffi::FI_SEND, 2)
                            .map_err(e)?,
                    ),
                )
            }
        } else {
            (None, None)
        };
        let mut port = OfiPort {
            ep,
            rx_mr,
            tx_mr,
            rx,
            tx,
            av,
            cq,
            _domain: domain,
            fabric,
            _info: info,
            prov,
            mtu,
            tx_free: (0..TX_SLOTS).rev().collect(),
            ready: VecDeque::new(),
            cq_fd,
            quiet: false,
            board,
            errors: 0,
        };
        for slot in 0..RX_SLOTS {
            port.repost(slot).map_err(e)?;
        }
        port.board.put_as("ofid", rank, &name)?;
        Ok(port)
    }

    /// The provider and domain in use.
    pub fn provider(&self) -> &ProvInfo {
        &self.prov
    }

    /// The largest datagram.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    fn repost(&mut self, slot: usize) -> Result<(), String> {
        let desc = self
            .rx_mr
            .as_ref()
            .map_or(std::ptr::null_mut(), |m| m.desc());
        // SAFETY: the slot lies inside `rx`, which outlives the endpoint (field order) and
        // is not touched until this receive completes.
        let ok = unsafe {
            self.ep.recv_any(
                self.rx.as_mut_ptr().add(slot * self.mtu),
                self.mtu,
                desc,
                CTX_RECV | slot,
            )
        }?;
        if !ok {
            return Err("fi_recv: the receive queue is full".into());
        }
        Ok(())
    }

    /// fi_trywait succeeded since the queue was last read and nothing read waits: the fd
    /// signals the next completion.
    pub fn quiet(&self) -> bool {
        self.quiet && self.ready.is_empty()
    }

    /// Takes completions: received datagrams into `ready`, finished sends free their slot.
    fn reap(&mut self) {
        self.quiet = false;
        loop {
            let mut ents = [CqEntry {
                context: 0,
                flags: 0,
                len: 0,
            }; 32];
            match self.cq.read(&mut ents) {
                Ok(0) => return,
                Ok(n) => {
                    for c in &ents[..n] {
                        let slot = c.context & 0xffff_ffff;
                        if c.context & CTX_RECV != 0 {
                            self.ready.push_back((slot, c.len.min(self.mtu)));
                        } else if c.context & CTX_SEND != 0 {
                            self.tx_free.push(slot);
                        }
                    }
                }
                Err(err) => {
                    // A failed operation: its buffer comes back (a receive is posted again;
                    // the channel's retransmission covers a lost send).
                    self.errors += 1;
                    let slot = err.context & 0xffff_ffff;
                    if err.context & CTX_RECV != 0 {
                        if err.err != ffi::FI_ECANCELED {
                            let _ = self.repost(slot);
                        }
                    } else if err.context & CTX_SEND != 0 {
                        self.tx_free.push(slot);
                    } else if err.context == 0 {
                        return;
                    }
                }
            }
        }
    }
}

impl Port for OfiPort {
    type Addr = u64;

    fn fd(&self) -> RawFd {
        self.cq_fd
    }

    fn secret(&mut self) -> TResult<u64> {
        Ok(self.board.secret()?)
    }

    fn lookup(&mut self, peer: Proc) -> TResult<u64> {
        let card = self.board.get_as("ofid", peer)?.ok_or_else(|| {
            crate::terr!(
                Other,
                "ofi datagram channel: rank {peer} published no datagram endpoint (is it \
                 running the ofi transport with FERRITE_CONN=adaptive or FERRITE_CONN_SETUP=ud?)"
            )
        })?;
        self.av
            .insert(&card)
            .map_err(|e| crate::terr!(Other, "ofi datagram channel: rank {peer}: {e}"))
    }

    fn send_to(&mut self, bytes: &[u8], to: u64) -> io::Result<()> {
        if bytes.len() > self.mtu {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let res = if bytes.len() <= self.prov.inject_size {
            self.ep.inject_to(bytes, to)
        } else {
            let Some(slot) = self.tx_free.pop() else {
                self.reap();
                return Err(io::ErrorKind::WouldBlock.into());
            };
            let buf = &mut self.tx[slot * self.mtu..slot * self.mtu + bytes.len()];
            buf.copy_from_slice(bytes);
            let desc = self
                .tx_mr
                .as_ref()
                .map_or(std::ptr::null_mut(), |m| m.desc());
            // SAFETY: the slot is ours until its completion frees it (`reap`); `tx` outlives
            // the endpoint (field order).
            let r = unsafe {
                self.ep
                    .send_to(buf.as_ptr(), bytes.len(), desc, to, CTX_SEND | slot)
            };
            if matches!(r, Ok(true)) {
                // Its completion is in the queue now, perhaps unsignalled: read it next pass.
                self.quiet = false;
            } else {
                self.tx_free.push(slot);
            }
            r
        };
        match res {
            Ok(true) => Ok(()),
            Ok(false) => {
                // The provider's queue is full: completions free it.
                self.reap();
                Err(io::ErrorKind::WouldBlock.into())
            }
            Err(e) => Err(io::Error::other(e)),
        }
    }

    fn recv_from(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
        if self.ready.is_empty() {
            self.reap();
        }
        let Some((slot, len)) = self.ready.pop_front() else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        let n = len.min(buf.len());
        buf[..n].copy_from_slice(&self.rx[slot * self.mtu..slot * self.mtu + n]);
        if let Err(e) = self.repost(slot) {
            self.errors += 1;
            return Err(io::Error::other(e));
        }
        Ok((n, None))
    }

    fn may_block(&mut self) -> bool {
        if !self.ready.is_empty() {
            return false;
        }
        if !self.quiet {
            self.quiet = self.fabric.trywait_cq(&self.cq);
        }
        self.quiet
    }
}

/// The channel's settings: FERRITE_UDP_WINDOW and FERRITE_UDP_RETRIES as for udp, datagrams
/// of the provider's largest message (FERRITE_UDP_DATAGRAM caps them when set).
pub fn channel_config(size: u32, mtu: usize) -> reliable::Config {
    let cap: usize = config::get("FERRITE_UDP_DATAGRAM");
    let max_datagram = if cap > reliable::HEADER_LEN {
        cap.min(mtu)
    } else {
        mtu
    };
    let w: u32 = config::get("FERRITE_UDP_WINDOW");
    let window = if w == 0 {
        ((4usize << 20) / max_datagram).clamp(16, RX_SLOTS) as u32
    } else {
        w
    };
    reliable::Config {
        max_datagram,
        window,
        max_retries: config::get("FERRITE_UDP_RETRIES"),
        ..reliable::Config::new(size)
    }
}

/// The datagram channel over a new FI_EP_DGRAM endpoint (FERRITE_CONN=adaptive and
/// FERRITE_CONN_SETUP=ud), published before MPI_Init's barrier.
pub fn channel(
    rank: Proc,
    size: u32,
    cfg: &OfiConfig,
    board: Box<dyn Board>,
) -> MpiResult<Channel<OfiPort>> {
    let port = OfiPort::open(rank, cfg, board)?;
    let rel = channel_config(size, port.mtu());
    let drop: u32 = config::get("FERRITE_UDP_DROP_PERMILLE");
    let inject = Inject {
        drop_permille: drop.min(1000),
        ..Inject::default()
    };
    Ok(Channel::with_port(rank, rel, inject, port)?)
}

// -------------------------------------------------------------------------------------------
// The transport's side: how `Ofi` drives the channel (the manager decides what goes on it).
// -------------------------------------------------------------------------------------------

impl OfiConfig {
    /// Whether this configuration runs a datagram channel (adaptive traffic, ud set-up).
    pub fn needs_channel(&self) -> bool {
        self.policy == policy::Kind::Adaptive || self.setup == policy::Mechanism::Ud
    }
}

/// The socket under a socket-based provider's endpoint (udp's: the one bound to the
/// endpoint's name, a sockaddr), if any. `open` gives it the buffers udp's own socket gets
/// (FERRITE_UDP_RCVBUF): libfabric has no knob for them, and with the kernel's default
/// (rmem_default, 208 KiB here) the channel's window of 1472-byte datagrams overran it
/// whenever the receiver was not running (p2p_windows -n 2 under adaptive at load 40: 1,700
/// retransmissions of 2,432 messages, 21,000 RcvbufErrors). A provider whose name is no
/// bound socket's is left alone.
fn provider_socket(name: &[u8]) -> Option<RawFd> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    for fd in dir
        .flatten()
        .filter_map(|d| d.file_name().to_str()?.parse::<RawFd>().ok())
    {
        // SAFETY: sockaddr_storage is plain data, valid zeroed.
        let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: getsockname writes at most `len` bytes into `sa`; on a descriptor that is
        // not a socket (or was closed meanwhile) it fails and touches nothing.
        if unsafe {
            libc::getsockname(
                fd,
                (&mut sa as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        } != 0
        {
            continue;
        }
        let len = len as usize;
        // SAFETY: getsockname filled `len` bytes (at most the storage's size) of `sa`.
        let got = unsafe {
            std::slice::from_raw_parts((&sa as *const libc::sockaddr_storage).cast::<u8>(), len)
        };
        let ours = len == name.len()
            && got == name
            && matches!(sa.ss_family as i32, libc::AF_INET | libc::AF_INET6);
        if ours {
            return Some(fd);
        }
    }
    None
}

/// Whether `fd` is readable now.
fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: p is one valid pollfd; poll(2) with no timeout only reads the fd's state.
    unsafe { libc::poll(&mut p, 1, 0) != 0 }
}

/// Warns once per process about datagrams that are not this job's (they are counted too).
fn warn_strangers(n: u64) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if n > 0 && !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "ferrite: warning: the ofi datagram endpoint dropped a datagram that is not this \
             job's (garbage, or another job's secret); further ones are only counted \
             (FERRITE_REPORT: dropped strangers)"
        );
    }
}

impl Ofi {
    /// Adaptive and ud: traffic to peers without a connection and the handshakes go over
    /// `chan` (required then; made by [`channel`] before MPI_Init's barrier).
    pub fn with_channel(mut self, chan: Option<Channel<OfiPort>>) -> MpiResult<Ofi> {
        let Some(chan) = chan else {
            if self.cfg.needs_channel() {
                return Err(mpi_err!(
                    crate::consts::MPI_ERR_OTHER,
                    "ofi transport: FERRITE_CONN=adaptive and FERRITE_CONN_SETUP=ud need a \
                     datagram channel"
                ));
            }
            return Ok(self);
        };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: chan.wake_fd() as u64,
        };
        // SAFETY: both fds are open (the channel's is closed when `chan` drops, after it
        // leaves this set with the transport); ev is valid.
        if unsafe { libc::epoll_ctl(self.epoll, libc::EPOLL_CTL_ADD, chan.wake_fd(), &mut ev) } != 0
        {
            let e = io::Error::last_os_error();
            return Err(mpi_err!(
                crate::consts::MPI_ERR_OTHER,
                "ofi transport: epoll_ctl(ADD, datagram channel): {e}"
            ));
        }
        self.chan = Some(Datagrams::new(chan));
        Ok(self)
    }

    /// A `ud` handshake datagram, unreliably (`Ud` retransmits; a lost peer is the
    /// channel's to report).
    pub(super) fn send_control(&mut self, to: Proc, bytes: &[u8]) {
        if let Some(d) = self.chan.as_mut() {
            let _ = d.chan.send_control(to, bytes);
        }
    }

    /// Adaptive: one packet over datagrams (kept in order behind what waits for the window).
    pub(super) fn send_datagram(&mut self, to: Proc, parts: &[&[u8]]) -> TResult<bool> {
        let d = self.chan.as_mut().expect("checked by the caller");
        if d.backlog_bytes(Some(to)) > QUEUE_MAX * self.cfg.buffer {
            self.stats.no_room += 1;
            return Ok(false);
        }
        d.send(to, parts)?;
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += parts.iter().map(|p| p.len() as u64).sum::<u64>();
        self.rearm();
        Ok(true)
    }

    /// Adaptive: `peer`'s queued packets go over datagrams instead, in order (a connection
    /// closed before they could go). Only data is queued for a peer (the rendezvous key
    /// travels inside the RTS, a data packet); control messages belong to the connection.
    pub(super) fn queue_to_datagrams(&mut self, peer: Proc) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        let data: Vec<Vec<u8>> = std::mem::take(&mut p.queue)
            .into_iter()
            .filter(|(kind, _)| *kind == DATA)
            .map(|(_, body)| body)
            .collect();
        if let Some(d) = self.chan.as_mut() {
            // Counted here: queued packets are counted when they are posted (`Ofi::post`),
            // which these now never are over the connection.
            self.stats.packets_sent += data.len() as u64;
            self.stats.bytes_sent += data.iter().map(|b| b.len() as u64).sum::<u64>();
            d.push(peer, data);
        }
    }

    /// Delivers what came over datagrams (to `deliver`, or into `arrived`), hands `ud`
    /// handshakes to the manager, and moves datagram traffic along.
    pub(super) fn poll_channel(&mut self, deliver: &mut Option<Deliver<'_>>) -> usize {
        let Some(d) = self.chan.as_mut() else {
            return 0;
        };
        // Nothing due, nothing waiting to go, nothing arrived: skip the pass (tcp likewise
        // polls its channel only when the channel's fd fires).
        // The channel's fd (its queue's and its timerfd's) is checked with one poll(2), where
        // a pass costs a timerfd read and the provider's recvmsg.
        if d.backlog_bytes(None) == 0
            && !d.chan.busy()
            && d.chan.port().quiet()
            && !readable(d.chan.wake_fd())
        {
            return 0;
        }
        let before = d.chan.stats().strangers;
        let arrived = &mut self.arrived;
        let got = match deliver {
            Some(f) => d.poll(&mut **f),
            None => d.poll(&mut |from, p| arrived.push_back((from, p.to_vec()))),
        };
        warn_strangers(d.chan.stats().strangers - before);
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
        if got.packets == 0 {
            // A pass that found nothing: let the fd say when to look again.
            if let Some(d) = self.chan.as_mut() {
                d.chan.may_block();
            }
        }
        if deliver.is_some() {
            got.packets as usize
        } else {
            0
        }
    }

    /// Datagrams wait for the window or an acknowledgement, we owe one, or data came lately.
    pub(super) fn chan_pending(&self) -> bool {
        self.chan
            .as_ref()
            .is_some_and(|d| d.backlog_bytes(None) > 0 || !d.chan.settled())
    }

    /// The channel's counters in the transport's (`Channel::add_stats`).
    pub(super) fn channel_stats(&self, s: &mut TransportStats) {
        if let Some(d) = &self.chan {
            d.chan.add_stats(s);
        }
    }
}

#[cfg(test)]
mod tests;
