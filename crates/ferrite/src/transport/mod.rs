//! Transports move bytes between processes and know nothing of MPI (no tags, communicators or
//! datatypes). `Net` routes each peer to one transport and is what the layers above use.

pub mod error;
pub mod loopback;
pub mod nodes;
pub mod ofi;
pub mod shm;
pub mod tcp;
pub mod timer;
pub mod udp;

use crate::runtime::config;
use crate::runtime::pmi;
use crate::terr;
pub use error::{Error, Kind, TResult};
use nodes::NodeMap;
use std::os::unix::io::RawFd;

/// A process of the job, by its rank in MPI_COMM_WORLD.
pub use crate::types::Proc;

/// One way of moving packets. A packet is what `try_send` got as `parts`, concatenated; it
/// arrives whole, once, and in order with respect to other packets between the same two
/// processes over the same transport.
pub trait Transport {
    fn name(&self) -> &'static str;

    /// Largest packet `try_send` accepts (header and payload together).
    fn max_packet(&self) -> usize;

    /// Largest packet (header included) to carry a whole message eagerly; larger messages go
    /// by rendezvous in `max_packet` fragments. A transport whose fragments are large (tcp)
    /// keeps its eager limit lower.
    fn eager_packet(&self) -> usize {
        self.max_packet()
    }

    /// Sends one packet. `Ok(false)` means no room (credits exhausted) and nothing was sent:
    /// the caller keeps it, in order, and tries again after making progress. Never drops.
    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> TResult<bool>;

    /// Hands every packet that has arrived to `deliver(from, packet)`; returns how many.
    /// The slice is only valid during the call.
    fn poll(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize;

    /// Single-copy read of `dst.len()` bytes at address `addr` in `from`'s memory.
    /// `Ok(false)` when this transport cannot do that for this peer (the protocol then
    /// falls back to copying through packets).
    fn read_remote(&mut self, _from: Proc, _addr: u64, _dst: &mut [u8]) -> TResult<bool> {
        Ok(false)
    }

    /// What a reader of `len` bytes at `addr` of ours needs besides the address, sent to
    /// `to` in the rendezvous announcement (ofi: the registration's key), so its read needs
    /// no round trip first. Empty: nothing (shm and tcp need nothing).
    fn rndv_key(&mut self, _to: Proc, _addr: u64, _len: usize) -> RndvKey {
        RndvKey::default()
    }

    /// `read_remote` with the key the sender put in its announcement (`rndv_key`).
    fn read_keyed(
        &mut self,
        from: Proc,
        addr: u64,
        _key: &RndvKey,
        dst: &mut [u8],
    ) -> TResult<bool> {
        self.read_remote(from, addr, dst)
    }

    /// Several `read_keyed`s at once: a transport that can keeps them all in flight before
    /// waiting for any (ofi: a window of rendezvous reads costs the sender one wake-up, not
    /// one each). Sets each read's `done` (false: the protocol falls back to packets).
    fn read_keyed_many(&mut self, reads: &mut [KeyedRead]) {
        for r in reads {
            // SAFETY: KeyedRead::new's contract: dst is valid for len bytes during this call.
            let dst = unsafe { std::slice::from_raw_parts_mut(r.dst, r.len) };
            r.done = self
                .read_keyed(r.from, r.addr, &r.key, dst)
                .unwrap_or(false);
        }
    }

    /// A file descriptor that becomes readable when packets may have arrived, for the
    /// progress engine's epoll set, if this transport has one.
    fn wake_fd(&self) -> Option<RawFd> {
        None
    }

    /// About to block: ask senders to ring the doorbell. Returns false when a packet is
    /// already waiting (then the caller must not block).
    fn arm(&mut self) -> bool {
        true
    }

    /// Woke up (or decided not to block): senders may stop ringing.
    fn disarm(&mut self) {}

    /// Counters so far (fields a transport does not have stay 0).
    fn stats(&self) -> TransportStats {
        TransportStats::default()
    }

    /// Packets accepted by `try_send` still wait inside the transport (e.g. for a connection
    /// or socket space); MPI_Finalize makes progress until there are none.
    fn pending(&self) -> bool {
        false
    }

    /// Peers found dead since the last call (a connection lost without the peer's clean
    /// close), with the reason naming the rank.
    fn take_failures(&mut self) -> Vec<(Proc, String)> {
        Vec::new()
    }

    /// False if `take_failures` can never report anything (then the progress engine does
    /// not ask on every pass).
    fn reports_failures(&self) -> bool {
        true
    }

    /// MPI_Finalize: release what peers can find by name (e.g. unlink a segment), and let
    /// peers take the last bytes of connections before they close.
    fn shutdown(&mut self) {}

    /// MPI_Init, after its barrier: ask for the connections the policy opens at start.
    fn connect_init(&mut self) -> TResult<()> {
        Ok(())
    }

    /// A connection asked for by `connect_init` is still being set up.
    fn init_connecting(&self) -> bool {
        false
    }
}

/// A transport's key to a rendezvous buffer (`Transport::rndv_key`), opaque to the
/// protocols, which carry it in the announcement; at most [`RndvKey::MAX`] bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RndvKey {
    len: u8,
    bytes: [u8; RndvKey::MAX],
}

impl RndvKey {
    pub const MAX: usize = 32;

    /// The key of these bytes; None if longer than `MAX`.
    pub fn new(b: &[u8]) -> Option<RndvKey> {
        let mut k = RndvKey::default();
        k.bytes.get_mut(..b.len())?.copy_from_slice(b);
        k.len = b.len() as u8;
        Some(k)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One read of `Transport::read_keyed_many`: `len` bytes at `addr` in `from`'s memory
/// (with the key from its announcement) into `dst`.
#[derive(Debug)]
pub struct KeyedRead {
    pub from: Proc,
    pub addr: u64,
    pub key: RndvKey,
    dst: *mut u8,
    len: usize,
    /// Set by the read: the bytes are in `dst`.
    pub done: bool,
}

impl KeyedRead {
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes, and not be read or written by anyone
    /// else, until `read_keyed_many` (Net's or a transport's) returns. Reads of one batch
    /// may overlap each other (benchmarks receive a window into one buffer): the bytes
    /// there are then those of one of them.
    pub unsafe fn new(from: Proc, addr: u64, key: RndvKey, dst: *mut u8, len: usize) -> Self {
        KeyedRead {
            from,
            addr,
            key,
            dst,
            len,
            done: false,
        }
    }

    pub fn dst(&self) -> *mut u8 {
        self.dst
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One transport's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub bytes_received: u64,
    /// try_send answered "no room" (receiver out of credits).
    pub no_room: u64,
    /// Peers' segments mapped (shm: one per peer contacted).
    pub segments_mapped: u64,
    /// Fast rings (shm: per-pair rings offered to peers plus those taken from peers).
    pub fast_rings: u64,
    pub doorbells_rung: u64,
    /// Datagrams on our doorbell that did not come from the job.
    pub strangers_dropped: u64,
    /// Cells that failed validation (bad index, rank or length) and were dropped.
    pub corrupt_dropped: u64,
    pub remote_reads: u64,
    pub remote_read_bytes: u64,
    /// Single-copy reads refused by the kernel (then the protocol copies through packets).
    pub remote_read_fallbacks: u64,
    /// Connections we opened because of a first message to the peer (tcp).
    pub conns_opened_first_message: u64,
    /// Connections a peer opened to us (tcp).
    pub conns_accepted: u64,
    /// Connections that ended (peer's clean close, or lost).
    pub conns_closed: u64,
    /// Our connection attempts dropped for the peer's simultaneous one (the race rule).
    pub race_losers: u64,
    /// Connection attempts made again after a failure or a refusal.
    pub handshake_retries: u64,
    /// Incoming connections refused because this process was out of file descriptors or
    /// the kernel out of socket memory (accept failed), or because as many accepted ones as
    /// the connection budget allows still waited for their hellos (tcp: a flood).
    pub refused_no_fd: u64,
    /// The connection policy's counters (connection-oriented transports).
    pub conn: crate::conn::policy::Counters,
    /// Peers a packet went to or came from over a connection.
    pub peers_used: u64,
    /// Datagrams sent again (udp and the adaptive/ud datagram channels of tcp and ofi).
    pub retransmits: u64,
    /// Retransmission timeouts that fired (each resent one datagram; the rest of
    /// `retransmits` were selective: fast retransmits and recovery).
    pub retransmit_timeouts: u64,
    /// Standalone acknowledgements sent (udp; most ride on data).
    pub acks_sent: u64,
    /// Datagrams received more than once and dropped (udp).
    pub duplicates: u64,
    /// Rendezvous buffers found already registered, and registered anew (ofi).
    pub mr_cache_hits: u64,
    pub mr_cache_misses: u64,
    /// Registrations dropped because their memory was given back (munmap, ...; ofi).
    pub mr_cache_invalidations: u64,
    /// Receive buffers (ofi): shared (1: one shared receive context per process, 0: per
    /// connection), most posted at once, their bytes, and (shared) the fewest left posted
    /// as a message took one.
    pub recv_buffers: [u64; 4],
}

/// Counters of the whole `Net`, per transport.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    pub transports: Vec<(&'static str, TransportStats)>,
    /// Times `block` slept in the kernel.
    pub blocks: u64,
}

/// Tags the epoll events of `Net::bell_on`'s doorbells (others carry a bare fd).
const BELL_MARK: u64 = 1 << 63;

/// Transport names FERRITE_TRANSPORTS may list.
pub const KNOWN_TRANSPORTS: &[&str] = &["self", "shm", "tcp", "udp", "ofi"];

/// Parses a FERRITE_TRANSPORTS value (comma list; blanks ignored).
pub fn parse_transports(list: &str) -> TResult<Vec<&'static str>> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let known = KNOWN_TRANSPORTS
            .iter()
            .find(|k| k.eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                terr!(
                    InvalidArg,
                    "FERRITE_TRANSPORTS={list:?}: unknown transport {name:?} (known: {})",
                    KNOWN_TRANSPORTS.join(", ")
                )
            })?;
        if !out.contains(known) {
            out.push(*known);
        }
    }
    if out.is_empty() {
        return Err(terr!(
            InvalidArg,
            "FERRITE_TRANSPORTS={list:?} names no transport (known: {})",
            KNOWN_TRANSPORTS.join(", ")
        ));
    }
    Ok(out)
}

/// Routes peers to transports: `self` for this process; `shm` for peers on this host; `tcp`
/// (or `udp`, whichever FERRITE_TRANSPORTS lists first) for peers on other hosts, and for
/// every peer when shm is not allowed; for this process too the first of those there is when
/// `self` is not allowed. Which ranks share a host
/// comes from the launcher's PMI_process_mapping (`nodes.rs`), read once in MPI_Init; a job
/// on one host (or a launcher that does not say) creates no tcp endpoint when shm is
/// allowed, so the default `self,shm,tcp` costs single-host jobs nothing. Memory is O(1) in
/// the job size for regular layouts: routes are computed, shm maps a peer's segment and tcp
/// connects only on first contact.
pub struct Net {
    pub rank: Proc,
    pub size: u32,
    transports: Vec<Box<dyn Transport + Send>>,
    self_route: Option<usize>,
    shm_route: Option<usize>,
    tcp_route: Option<usize>,
    udp_route: Option<usize>,
    ofi_route: Option<usize>,
    /// `ofi` comes before `tcp` and `udp` in FERRITE_TRANSPORTS (then it carries remote
    /// traffic).
    ofi_first: bool,
    /// `udp` comes before `tcp` in FERRITE_TRANSPORTS (then it carries remote traffic).
    udp_first: bool,
    /// (rank, its transport, that transport's eager packet size) of the last eager send:
    /// routes are fixed after `init`, and a window of sends goes to one peer.
    eager_last: (Proc, usize, usize),
    /// Set only when the job spans hosts: then `my_node` says which peers shm reaches.
    nodes: Option<NodeMap>,
    my_node: u32,
    /// The FERRITE_TRANSPORTS value, for error messages.
    allowed: String,
    /// Every transport's wake fd; -1 when none has one.
    epoll: RawFd,
    /// Doorbells of layers above (`bell_on`), drained by `disarm`.
    bells: Vec<RawFd>,
    blocks: u64,
    /// Some transport reports failures (`Transport::reports_failures`; a one-host job over
    /// self and shm has none to ask about on each progress pass).
    may_fail: bool,
}

impl Net {
    /// Sets up this process's endpoints (its shared-memory receive queue, doorbell) for the
    /// transports FERRITE_TRANSPORTS allows. Peers are contacted only when first needed.
    pub fn init(rank: Proc, size: u32, kvsname: &str) -> TResult<Net> {
        let list: String = config::get("FERRITE_TRANSPORTS");
        // Which ranks share our host: shm takes only those, and tcp listens on an address
        // other hosts reach when there are other hosts.
        let nodes = if size > 1 {
            // A launcher that cannot say (or errs) gets the single-host routing.
            pmi::get("PMI_process_mapping")
                .ok()
                .flatten()
                .and_then(|m| NodeMap::parse(&m))
        } else {
            None
        };
        Net::init_with_nodes(rank, size, kvsname, &list, nodes)
    }

    /// [`Net::init`] with an explicit transport list, all ranks on one host (tests, tools).
    pub fn init_with(rank: Proc, size: u32, kvsname: &str, list: &str) -> TResult<Net> {
        Net::init_with_nodes(rank, size, kvsname, list, None)
    }

    /// [`Net::init`] with an explicit transport list and host map (`None`: one host).
    pub fn init_with_nodes(
        rank: Proc,
        size: u32,
        kvsname: &str,
        list: &str,
        nodes: Option<NodeMap>,
    ) -> TResult<Net> {
        let names = parse_transports(list)?;
        let nodes = nodes.filter(|m| m.spans_nodes(size));
        let my_node = nodes.as_ref().map_or(0, |m| m.node_of(rank));
        let mut net = Net {
            rank,
            size,
            transports: Vec::new(),
            self_route: None,
            shm_route: None,
            tcp_route: None,
            udp_route: None,
            ofi_route: None,
            ofi_first: {
                let at = |n| names.iter().position(|&x| x == n).unwrap_or(usize::MAX);
                at("ofi") < at("tcp").min(at("udp"))
            },
            udp_first: matches!(
                (
                    names.iter().position(|&n| n == "udp"),
                    names.iter().position(|&n| n == "tcp"),
                ),
                (Some(u), Some(t)) if u < t
            ),
            eager_last: (Proc::MAX, 0, 0),
            nodes,
            my_node,
            allowed: list.to_string(),
            epoll: -1,
            bells: Vec::new(),
            blocks: 0,
            may_fail: false,
        };
        if names.contains(&"self") {
            net.self_route = Some(net.transports.len());
            net.transports.push(Box::new(loopback::Loopback::new(rank)));
        }
        // A job of one process, or a rank alone on its host, creates no segment at all.
        let host_peers = match &net.nodes {
            Some(m) => m.ranks_on(my_node, size) > 1,
            None => size > 1,
        };
        if names.contains(&"shm") && host_peers {
            let cfg = shm::ShmConfig::from_knobs(size)?;
            net.shm_route = Some(net.transports.len());
            net.transports
                .push(Box::new(shm::Shm::new(rank, size, kvsname, cfg)?));
        }
        // Every rank of a job across hosts listens (its peers elsewhere may dial it).
        if names.contains(&"tcp") && size > 1 && (net.shm_route.is_none() || net.nodes.is_some()) {
            let mut cfg = tcp::TcpConfig::from_knobs()?;
            let spec: String = config::get("FERRITE_TCP_IF");
            if net.nodes.is_some() && spec.trim().is_empty() {
                // Loopback cannot be reached from other hosts.
                cfg.ip = tcp::listener::reachable_ip();
            }
            net.tcp_route = Some(net.transports.len());
            // FERRITE_CONN=adaptive (datagrams first) and FERRITE_CONN_SETUP=ud (handshakes
            // over datagrams) run a udp channel of their own.
            let chan = if cfg.policy == crate::conn::policy::Kind::Adaptive
                || cfg.setup == crate::conn::policy::Mechanism::Ud
            {
                Some(udp::Channel::new(
                    rank,
                    udp::channel_config(size, net.nodes.is_some())?,
                    tcp::card::board_for(kvsname),
                )?)
            } else {
                None
            };
            let board = tcp::card::board_for(kvsname);
            net.transports.push(Box::new(
                tcp::Tcp::new(rank, size, cfg, board)?.with_channel(chan)?,
            ));
        }
        // The same rule for udp: every rank of a job across hosts has a datagram socket.
        if names.contains(&"udp") && size > 1 && (net.shm_route.is_none() || net.nodes.is_some()) {
            let cfg = udp::UdpConfig::from_knobs(size, net.nodes.is_some())?;
            net.udp_route = Some(net.transports.len());
            let board = tcp::card::board_for(kvsname);
            net.transports
                .push(Box::new(udp::Udp::new(rank, size, cfg, board)?));
        }
        // The same rule for ofi (libfabric, loaded now: a clear error if it is missing).
        if names.contains(&"ofi") && size > 1 && (net.shm_route.is_none() || net.nodes.is_some()) {
            let cfg = ofi::OfiConfig::from_knobs()?;
            net.ofi_route = Some(net.transports.len());
            // Adaptive and ud: a datagram channel on an FI_EP_DGRAM endpoint of its own.
            let chan = if cfg.needs_channel() {
                Some(ofi::dgram::channel(
                    rank,
                    size,
                    &cfg,
                    Box::new(ofi::PmiBoard),
                )?)
            } else {
                None
            };
            net.transports.push(Box::new(
                ofi::Ofi::new(rank, size, cfg, Box::new(ofi::PmiBoard))?.with_channel(chan)?,
            ));
        }
        let fds: Vec<RawFd> = net.transports.iter().filter_map(|t| t.wake_fd()).collect();
        if !fds.is_empty() {
            // SAFETY: plain syscall; the fd is owned by `net` and closed in Drop.
            net.epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if net.epoll < 0 {
                let e = std::io::Error::last_os_error();
                return Err(Error::os(&e, format!("epoll_create1 failed: {e}")));
            }
            for fd in fds {
                let mut ev = libc::epoll_event {
                    events: libc::EPOLLIN as u32,
                    u64: fd as u64,
                };
                // SAFETY: both fds are open; ev is a valid event.
                if unsafe { libc::epoll_ctl(net.epoll, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
                    let e = std::io::Error::last_os_error();
                    return Err(Error::os(
                        &e,
                        format!("epoll_ctl(ADD, wake fd) failed: {e}"),
                    ));
                }
            }
        }
        net.may_fail = net.transports.iter().any(|t| t.reports_failures());
        Ok(net)
    }

    /// The transport for peers shm does not reach: tcp, udp or ofi, the first listed.
    fn remote_route(&self) -> Option<usize> {
        if self.ofi_first {
            self.ofi_route.or(self.tcp_route).or(self.udp_route)
        } else if self.udp_first {
            self.udp_route.or(self.tcp_route)
        } else {
            self.tcp_route.or(self.udp_route)
        }
        .or(self.ofi_route)
    }

    fn route(&self, to: Proc) -> TResult<usize> {
        if to >= self.size {
            return Err(terr!(
                InvalidArg,
                "rank {to} is not in MPI_COMM_WORLD (size {})",
                self.size
            ));
        }
        let r = if to == self.rank {
            self.self_route
                .or(self.shm_route)
                .or_else(|| self.remote_route())
        } else {
            match &self.nodes {
                Some(m) if m.node_of(to) != self.my_node => {
                    return self.remote_route().ok_or_else(|| {
                        terr!(
                            Other,
                            "rank {to} runs on another host (node {} of the launcher's \
                             PMI_process_mapping; this is rank {} on node {}) and \
                             FERRITE_TRANSPORTS={:?} has no transport across hosts (add tcp or udp)",
                            m.node_of(to),
                            self.rank,
                            self.my_node,
                            self.allowed
                        )
                    });
                }
                _ => self.shm_route.or_else(|| self.remote_route()),
            }
        };
        r.ok_or_else(|| {
            terr!(
                Other,
                "no transport reaches rank {to} (FERRITE_TRANSPORTS={:?}; this is rank {} of {})",
                self.allowed,
                self.rank,
                self.size
            )
        })
    }

    /// Whether packets to `to` (not this rank) go through shared memory: a peer on this
    /// host while shm is allowed (RMA then maps its window memory, rma/direct.rs).
    pub fn via_shm(&self, to: Proc) -> bool {
        to != self.rank && self.shm_route.is_some() && self.route(to).ok() == self.shm_route
    }

    /// Largest packet (header included) `try_send` accepts for `to`; 0 if nothing reaches it.
    pub fn max_packet(&self, to: Proc) -> usize {
        self.route(to)
            .map(|i| self.transports[i].max_packet())
            .unwrap_or(0)
    }

    /// Largest packet (header included) sent as a whole eager message to `to`.
    pub fn eager_packet(&self, to: Proc) -> usize {
        self.route(to)
            .map(|i| self.transports[i].eager_packet())
            .unwrap_or(0)
    }

    /// Sends one packet (the parts concatenated). `Ok(false)`: no room now, nothing sent; the
    /// caller keeps it in order and retries after progress. Never drops.
    pub fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> TResult<bool> {
        let i = self.route(to)?;
        self.transports[i].try_send(to, parts)
    }

    /// [`Self::try_send`] of header `hdr` and message `data` if `data` after a header of
    /// `hdr_max` bytes is within the eager size for `to` and `data` within `limit` (0: none);
    /// `Ok(false)`: not sent. One routing for MPI_Send's fast path instead of two.
    #[inline]
    pub fn try_send_eager(
        &mut self,
        to: Proc,
        hdr: &[u8],
        hdr_max: usize,
        data: &[u8],
        limit: usize,
    ) -> TResult<bool> {
        let (i, eager) = if self.eager_last.0 == to {
            (self.eager_last.1, self.eager_last.2)
        } else {
            let i = self.route(to)?;
            let eager = self.transports[i].eager_packet();
            self.eager_last = (to, i, eager);
            (i, eager)
        };
        if hdr_max + data.len() > eager || (limit != 0 && data.len() > limit) {
            return Ok(false);
        }
        self.transports[i].try_send(to, &[hdr, data])
    }

    /// Delivers every arrived packet, whole, once, in order per sender; returns how many.
    pub fn poll(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        self.transports.iter_mut().map(|t| t.poll(deliver)).sum()
    }

    /// Peers the transports found dead since the last call, with the reason.
    #[inline]
    pub fn take_failures(&mut self) -> Vec<(Proc, String)> {
        // Every progress pass asks: a plain loop, no allocation when nothing failed (a
        // flat_map/collect cost ~150 instructions per idle pass), and nothing at all when no
        // transport can fail (~80 instructions of virtual calls per idle pass).
        if !self.may_fail {
            return Vec::new();
        }
        let mut all = Vec::new();
        for t in self.transports.iter_mut() {
            let f = t.take_failures();
            if !f.is_empty() {
                all.extend(f);
            }
        }
        all
    }

    /// Single-copy read of `dst.len()` bytes at `addr` in `from`'s memory. `Ok(false)` when
    /// not possible for that peer (the protocol falls back to packets).
    pub fn read_remote(&mut self, from: Proc, addr: u64, dst: &mut [u8]) -> TResult<bool> {
        let i = self.route(from)?;
        self.transports[i].read_remote(from, addr, dst)
    }

    /// The key `to` needs to read `len` bytes at `addr` of ours (`Transport::rndv_key`).
    pub fn rndv_key(&mut self, to: Proc, addr: u64, len: usize) -> TResult<RndvKey> {
        let i = self.route(to)?;
        Ok(self.transports[i].rndv_key(to, addr, len))
    }

    /// `read_remote` with the key from the sender's announcement.
    pub fn read_keyed(
        &mut self,
        from: Proc,
        addr: u64,
        key: &RndvKey,
        dst: &mut [u8],
    ) -> TResult<bool> {
        let i = self.route(from)?;
        self.transports[i].read_keyed(from, addr, key, dst)
    }

    /// Several `read_keyed`s, in flight together where their transport can (all to peers
    /// of one transport; else one after another).
    pub fn read_keyed_many(&mut self, reads: &mut [KeyedRead]) {
        let routes: Vec<Option<usize>> = reads.iter().map(|r| self.route(r.from).ok()).collect();
        match routes[..] {
            [Some(i), ..] if routes.iter().all(|&r| r == Some(i)) => {
                self.transports[i].read_keyed_many(reads)
            }
            _ => {
                for (r, i) in reads.iter_mut().zip(routes) {
                    if let Some(i) = i {
                        self.transports[i].read_keyed_many(std::slice::from_mut(r));
                    }
                }
            }
        }
    }

    /// About to block: every transport is armed (senders start ringing) and re-checked, so
    /// a packet published just before cannot be slept through. Returns the epoll set to
    /// sleep on (`Net::sleep`, without the state lock; -1: none), or None when a packet is
    /// already waiting. Call `disarm` after, in either case.
    pub fn arm(&mut self) -> Option<RawFd> {
        let ready = !self.transports.iter_mut().all(|t| t.arm());
        if ready {
            return None;
        }
        self.blocks += 1;
        Some(self.epoll)
    }

    /// Sleeps until a packet may have arrived on the epoll set `arm` returned, or
    /// `timeout_ms` passes (-1: no limit). Returns whether a doorbell of `bell_on` is
    /// readable (then call `drain_bells` after `disarm`).
    pub fn sleep(epoll: RawFd, timeout_ms: i32) -> bool {
        if epoll >= 0 {
            let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
            // SAFETY: evs is valid for 8 events; EINTR just returns early. The epoll fd
            // outlives every sleeper (it closes with the `Net` after MPI_Finalize).
            let n = unsafe { libc::epoll_wait(epoll, evs.as_mut_ptr(), 8, timeout_ms) };
            evs[..n.max(0) as usize]
                .iter()
                .any(|e| e.u64 & BELL_MARK != 0)
        } else {
            if timeout_ms != 0 {
                // Nothing can wake us (self only): sleep the timeout (a no-limit wait with
                // nothing to wait for is a deadlock of the program; sleep in slices).
                let ms = if timeout_ms < 0 { 1000 } else { timeout_ms };
                std::thread::sleep(std::time::Duration::from_millis(ms as u64));
            }
            false
        }
    }

    /// `arm`, `sleep` and `disarm` in one (tests: no state lock to let go of).
    #[cfg(test)]
    pub fn block(&mut self, timeout_ms: i32) {
        if let Some(epoll) = self.arm() {
            Net::sleep(epoll, timeout_ms);
        }
        self.disarm();
    }

    /// Woke up (or decided not to block): senders may stop ringing.
    pub fn disarm(&mut self) {
        for t in &mut self.transports {
            t.disarm();
        }
    }

    /// Makes `sleep` return (and say so) when datagrams arrive on `fd`: the doorbell of a
    /// layer above (coll/shm.rs's, rung by processes that make a condition true in shared
    /// memory). `fd` must be a non-blocking datagram socket that stays open as long as this
    /// `Net`.
    pub fn bell_on(&mut self, fd: RawFd) -> TResult<()> {
        self.add_wake(fd, fd as u64 | BELL_MARK)?;
        if !self.bells.contains(&fd) {
            self.bells.push(fd);
        }
        Ok(())
    }

    /// Empties the doorbells of `bell_on` (after a `sleep` that said one rang).
    pub fn drain_bells(&mut self) {
        for &fd in &self.bells {
            loop {
                let mut bufs = [[0u8; 16]; 8];
                // SAFETY: all-zero iovec and mmsghdr values are valid; each header points
                // at its own 16-byte buffer below, which outlives the call.
                let mut iov: [libc::iovec; 8] = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                let mut msgs: [libc::mmsghdr; 8] = unsafe { std::mem::zeroed() };
                for ((v, b), m) in iov.iter_mut().zip(bufs.iter_mut()).zip(msgs.iter_mut()) {
                    v.iov_base = b.as_mut_ptr().cast();
                    v.iov_len = b.len();
                    m.msg_hdr.msg_iov = v;
                    m.msg_hdr.msg_iovlen = 1;
                }
                // SAFETY: msgs describes 8 valid buffers; the fd is a non-blocking
                // datagram socket (bell_on's contract). One call takes every pending ring.
                let got = unsafe {
                    libc::recvmmsg(
                        fd,
                        msgs.as_mut_ptr(),
                        8,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                    )
                };
                if got < 8 {
                    break;
                }
            }
        }
    }

    /// Whether peer `to` is reached over shared memory (shm allowed and on our host): the
    /// shared-memory collectives (coll/shm.rs) need every member so.
    pub fn on_shm(&self, to: Proc) -> bool {
        self.shm_route.is_some()
            && self
                .nodes
                .as_ref()
                .is_none_or(|m| m.node_of(to) == self.my_node)
    }

    /// The node (host) the launcher placed job rank `r` on, from PMI_process_mapping; None
    /// when the job runs on one host (or the launcher could not say). Ranks outside the job
    /// (dynamic processes) have no node here.
    pub fn node_of(&self, r: Proc) -> Option<u32> {
        self.nodes
            .as_ref()
            .filter(|_| r < self.size)
            .map(|m| m.node_of(r))
    }

    /// Makes `sleep` also return when `fd` becomes readable (MPI_Finalize: the launcher's
    /// answer to its PMI barrier), for the rest of this `Net`'s life. Adding it again is
    /// no error.
    pub fn wake_on(&mut self, fd: RawFd) -> TResult<()> {
        self.add_wake(fd, fd as u64)
    }

    /// Adds `fd` to the epoll set with `data` as its event's tag.
    fn add_wake(&mut self, fd: RawFd, data: u64) -> TResult<()> {
        if self.epoll < 0 {
            // SAFETY: plain syscall; the fd is owned by `self` and closed in Drop.
            self.epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if self.epoll < 0 {
                let e = std::io::Error::last_os_error();
                return Err(Error::os(&e, format!("epoll_create1 failed: {e}")));
            }
        }
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: data,
        };
        // SAFETY: both fds are open; ev is a valid event.
        if unsafe { libc::epoll_ctl(self.epoll, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(terr!(Other, "epoll_ctl(ADD, fd {fd}) failed: {e}"));
            }
        }
        Ok(())
    }

    /// Packets accepted by `try_send` still wait inside a transport (MPI_Finalize waits for
    /// none before its barrier, since nobody makes progress on them after it).
    pub fn has_pending(&self) -> bool {
        self.transports.iter().any(|t| t.pending())
    }

    /// Releases what MPI_Init set up that others can find (unlinks this process's segment).
    /// Sockets and mappings go when the `Net` is dropped.
    pub fn shutdown(&mut self) {
        for t in &mut self.transports {
            t.shutdown();
        }
    }

    /// MPI_Init, after its barrier: every transport asks for its initial connections (the
    /// caller then progresses until `init_connecting` is false).
    pub fn connect_init(&mut self) -> TResult<()> {
        self.transports
            .iter_mut()
            .try_for_each(|t| t.connect_init())
    }

    pub fn init_connecting(&self) -> bool {
        self.transports.iter().any(|t| t.init_connecting())
    }

    /// Counters per transport.
    pub fn stats(&self) -> NetStats {
        NetStats {
            transports: self
                .transports
                .iter()
                .map(|t| (t.name(), t.stats()))
                .collect(),
            blocks: self.blocks,
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if self.epoll >= 0 {
            // SAFETY: the epoll fd is ours and closed once.
            unsafe { libc::close(self.epoll) };
        }
    }
}

#[cfg(test)]
mod tests;
