//! The ofi transport: libfabric's connection-oriented endpoints (FI_EP_MSG, the RC queue
//! pair / VI of the papers), loaded at run time (`ffi.rs`), with the provider chosen by
//! FERRITE_OFI_PROVIDER (tcp by default; verbs, efa, ... on real fabrics).
//!
//! - Set-up: each process opens a passive endpoint during MPI_Init and publishes its name
//!   (fi_getname, hex) through PMI under `ofi-<rank>`, as tcp publishes its listening
//!   address. The first packet to a peer dials it (fi_connect with our rank and the job
//!   secret as connection data); the peer checks both and accepts (FI_CONNREQ ->
//!   fi_accept); both see FI_CONNECTED on the event queue. Packets sent meanwhile wait in
//!   FIFO order. A process sends all its packets to a peer over one connection (the first
//!   it dialed or accepted), so they arrive in order even when both sides dialed at once;
//!   it receives on every connection.
//! - Eager: packets are copied into pre-registered bounce buffers and sent with fi_send
//!   into receive buffers the peer posted (2R per connection). Credits: a sender sends at
//!   most R packets the peer has not reported reposting; reposts are reported on the
//!   peer's packets, or in a credit message (sent when R/2 are owed, or before blocking)
//!   which itself uses one of the R spare buffers and returns none, so nothing is dropped.
//! - Rendezvous: `read_remote` asks the sender for a key to the buffer (a registration from
//!   the registration cache, `regcache.rs`) and fi_reads it (RDMA read).
//! - Blocking: the event and completion queues' wait fds (fi_control FI_GETWAIT) are in an
//!   epoll set of ours, the transport's wake fd; `arm` is fi_trywait.
//! - Close: MPI_Finalize sends a close message on every connection; a connection that
//!   ends (FI_SHUTDOWN) without one is a failed peer.

pub mod ffi;
pub mod regcache;

use super::{Proc, Transport, TransportStats};
use crate::conn::policy::{CloseCause, OpenCause};
use crate::consts::{MPI_ERR_OTHER, MPI_ERR_PROC_ABORTED};
use crate::error::MpiResult;
use crate::mpi_err;
use crate::runtime::{self, config, pmi};
use ffi::{CqEntry, Domain, Ep, Eq, EqEvent, Fabric, Info, Mr, Pep, ProvInfo};
use regcache::RegCache;
use std::collections::{HashMap, VecDeque};
use std::os::unix::io::RawFd;

/// The transport's settings, from the FERRITE_OFI_* knobs.
#[derive(Clone, Debug)]
pub struct OfiConfig {
    pub provider: String,
    /// Domain (interface) to use; empty: the provider's first.
    pub iface: String,
    /// Bytes per bounce buffer (the largest packet, header included).
    pub buffer: usize,
    /// Packets in flight per connection (R): 2R receive buffers posted.
    pub credits: u32,
    /// Rendezvous by RDMA read (else the protocol copies through packets).
    pub rdma_read: bool,
    pub cache_entries: usize,
    pub cache_bytes: u64,
}

impl OfiConfig {
    pub fn from_knobs() -> MpiResult<OfiConfig> {
        let buffer: usize = config::get("FERRITE_OFI_BUFFER");
        let credits: u32 = config::get("FERRITE_OFI_CREDITS");
        if buffer < 1024 || credits < 2 {
            return Err(mpi_err!(
                MPI_ERR_OTHER,
                "ofi transport: FERRITE_OFI_BUFFER={buffer} (at least 1024) and \
                 FERRITE_OFI_CREDITS={credits} (at least 2) are too small"
            ));
        }
        Ok(OfiConfig {
            provider: config::get::<String>("FERRITE_OFI_PROVIDER")
                .trim()
                .to_string(),
            iface: config::get::<String>("FERRITE_OFI_IFACE")
                .trim()
                .to_string(),
            buffer,
            credits,
            rdma_read: config::get::<u32>("FERRITE_OFI_RDMA_READ") != 0,
            cache_entries: config::get("FERRITE_OFI_MR_CACHE_ENTRIES"),
            cache_bytes: config::get::<u64>("FERRITE_OFI_MR_CACHE_MB") << 20,
        })
    }

    pub fn test_default() -> OfiConfig {
        OfiConfig {
            provider: "tcp".into(),
            iface: String::new(),
            buffer: 16448,
            credits: 8,
            rdma_read: true,
            cache_entries: 64,
            cache_bytes: 64 << 20,
        }
    }
}

/// Where business cards are published: PMI, or in unit tests an in-process map.
pub trait Board: Send {
    fn put(&mut self, rank: Proc, card: &[u8]) -> MpiResult<()>;
    fn get(&mut self, rank: Proc) -> MpiResult<Option<Vec<u8>>>;
    fn secret(&mut self) -> MpiResult<u64>;
}

pub struct PmiBoard;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Board for PmiBoard {
    fn put(&mut self, rank: Proc, card: &[u8]) -> MpiResult<()> {
        Ok(pmi::put(&format!("ofi-{rank}"), &hex(card))?)
    }

    fn get(&mut self, rank: Proc) -> MpiResult<Option<Vec<u8>>> {
        pmi::get(&format!("ofi-{rank}"))?
            .map(|c| {
                unhex(&c).ok_or_else(|| {
                    mpi_err!(
                        MPI_ERR_OTHER,
                        "ofi transport: the business card of rank {rank} is {c:?}, not hex"
                    )
                })
            })
            .transpose()
    }

    fn secret(&mut self) -> MpiResult<u64> {
        Ok(super::tcp::card::secret_u64(runtime::job_secret()?))
    }
}

#[cfg(test)]
pub mod test_board {
    use super::*;
    use std::sync::Mutex;

    type Cards = HashMap<(String, Proc), Vec<u8>>;
    static CARDS: Mutex<Option<Cards>> = Mutex::new(None);

    /// The cards of one test job, in this test process.
    pub struct TestBoard(pub String);

    impl Board for TestBoard {
        fn put(&mut self, rank: Proc, card: &[u8]) -> MpiResult<()> {
            let mut g = CARDS.lock().unwrap_or_else(|e| e.into_inner());
            g.get_or_insert_with(HashMap::new)
                .insert((self.0.clone(), rank), card.to_vec());
            Ok(())
        }

        fn get(&mut self, rank: Proc) -> MpiResult<Option<Vec<u8>>> {
            let g = CARDS.lock().unwrap_or_else(|e| e.into_inner());
            Ok(g.as_ref()
                .and_then(|m| m.get(&(self.0.clone(), rank)).cloned()))
        }

        fn secret(&mut self) -> MpiResult<u64> {
            Ok(super::super::tcp::card::secret_u64(&self.0))
        }
    }
}

// Message kinds (first byte of the 8-byte header; bytes 4..8: credits returned).
const DATA: u8 = 1;
const CREDIT: u8 = 2;
const CLOSE: u8 = 3;
const KEYREQ: u8 = 4;
const KEYREP: u8 = 5;
const HDR: usize = 8;

/// Where `progress` hands data packets (None: into `arrived`).
type Deliver<'a> = &'a mut dyn FnMut(Proc, &[u8]);

fn header(kind: u8, credits: u32) -> [u8; HDR] {
    let c = credits.to_le_bytes();
    [kind, 0, 0, 0, c[0], c[1], c[2], c[3]]
}

// Completion contexts: the operation's kind in the top bits.
const CTX_RECV: usize = 1 << 60;
const CTX_SEND: usize = 2 << 60;
const CTX_READ: usize = 3 << 60;
const CTX_KIND: usize = 0xf << 60;
const CTX_BUF_BITS: u32 = 20;

/// Bounce buffers for sends.
const TX_SLOTS: usize = 64;
/// Our packets a peer's queue may hold (not yet sendable) before try_send says no room.
const QUEUE_MAX: usize = 256;

struct Conn {
    ep: Ep,
    rx_mr: Mr,
    rx: Vec<u8>,
    peer: Proc,
    up: bool,
    /// We dialed it (else accepted).
    dialed: bool,
    /// The peer sent its close message: the end of the connection is no failure.
    peer_closing: bool,
    /// Receive buffers the peer has posted for our packets, not yet used.
    credits: u32,
    /// Receive buffers we reposted and not yet reported to the peer.
    owed: u32,
}

#[derive(Default)]
struct Peer {
    /// The connection our packets go over (dialing or up).
    send: Option<usize>,
    /// Packets waiting for the connection, credits or a bounce buffer: (kind, body).
    queue: VecDeque<(u8, Vec<u8>)>,
    failed: Option<String>,
    used: bool,
}

/// Counters of the registration cache and rendezvous reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct OfiStats {
    pub cache: regcache::CacheStats,
    pub keys_served: u64,
}

pub struct Ofi {
    rank: Proc,
    cfg: OfiConfig,
    prov: ProvInfo,
    // Fields drop in this order: endpoints and registrations before the queues, the domain
    // and the fabric they belong to.
    conns: Vec<Option<Conn>>,
    cache: RegCache<Mr>,
    tx_mr: Mr,
    tx: Vec<u8>,
    pep: Pep,
    cq: ffi::Cq,
    eq: Eq,
    domain: Domain,
    fabric: Fabric,
    info: Info,
    tx_free: Vec<usize>,
    peers: HashMap<Proc, Peer>,
    /// Packets taken off the completion queue while `read_remote` waited (delivered first).
    arrived: VecDeque<(Proc, Vec<u8>)>,
    failures: Vec<(Proc, String)>,
    /// Answers to our key requests: id -> (key, remote address), None: refused.
    keys: HashMap<u64, Option<(u64, u64)>>,
    /// Reads in flight: id -> (chunks outstanding, failed).
    reads: HashMap<u64, (usize, bool)>,
    next_id: u64,
    next_key: u64,
    board: Box<dyn Board>,
    /// The job secret hellos carry (read from PMI when first needed, after MPI_Init's
    /// barrier).
    secret: Option<u64>,
    epoll: RawFd,
    closing: bool,
    stats: TransportStats,
    pub ofi_stats: OfiStats,
}

fn err(msg: String) -> crate::error::MpiError {
    mpi_err!(MPI_ERR_OTHER, "ofi transport: {msg}")
}

impl Ofi {
    /// Opens the fabric, domain, queues and the passive endpoint, and publishes its name.
    pub fn new(rank: Proc, cfg: OfiConfig, mut board: Box<dyn Board>) -> MpiResult<Ofi> {
        ffi::available().map_err(|e| err(format!("FERRITE_TRANSPORTS lists ofi but {e}")))?;
        let info = Info::get(&cfg.provider, &cfg.iface).map_err(err)?;
        let prov = info.prov();
        let fabric = Fabric::open(&info).map_err(err)?;
        let domain = fabric.domain(&info).map_err(err)?;
        let eq = fabric.eq(64).map_err(err)?;
        let cq = domain.cq(4 * TX_SLOTS + 1024).map_err(err)?;
        let pep = fabric.passive_ep(&info).map_err(err)?;
        let name = pep.listen(&eq).map_err(err)?;
        board.put(rank, &name)?;
        let mut tx = vec![0u8; TX_SLOTS * cfg.buffer];
        // SAFETY: tx is owned by the transport and outlives tx_mr (field order).
        let tx_mr = unsafe { domain.mr_reg(tx.as_mut_ptr() as u64, tx.len(), ffi::FI_SEND, 1) }
            .map_err(err)?;
        if !matches!(prov.provider.as_str(), "tcp" | "udp" | "sockets" | "shm") {
            // A provider that pins pages: freed heap memory stays mapped (regcache.rs).
            ffi::keep_heap_mapped();
        }
        // SAFETY: plain syscalls; the epoll fd is ours, closed in Drop.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(err(format!(
                "epoll_create1: {}",
                std::io::Error::last_os_error()
            )));
        }
        for fd in [eq.fd().map_err(err)?, cq.fd().map_err(err)?] {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: both fds are open; ev is valid.
            if unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
                let e = std::io::Error::last_os_error();
                // SAFETY: ours, closed once.
                unsafe { libc::close(epoll) };
                return Err(err(format!("epoll_ctl(ADD, libfabric wait fd): {e}")));
            }
        }
        Ok(Ofi {
            rank,
            cache: RegCache::new(cfg.cache_entries, cfg.cache_bytes),
            cfg,
            prov,
            conns: Vec::new(),
            tx_mr,
            tx,
            pep,
            cq,
            eq,
            domain,
            fabric,
            info,
            tx_free: (0..TX_SLOTS).rev().collect(),
            peers: HashMap::new(),
            arrived: VecDeque::new(),
            failures: Vec::new(),
            keys: HashMap::new(),
            reads: HashMap::new(),
            next_id: 1,
            next_key: 2,
            board,
            secret: None,
            epoll,
            closing: false,
            stats: TransportStats::default(),
            ofi_stats: OfiStats::default(),
        })
    }

    /// The provider and domain in use.
    pub fn provider(&self) -> &ProvInfo {
        &self.prov
    }

    fn recv_len(&self) -> usize {
        self.cfg.buffer
    }

    fn rx_count(&self) -> usize {
        2 * self.cfg.credits as usize
    }

    /// A new endpoint in slot `id`, bound, enabled, with its receive buffers posted.
    /// `req`: a connection request's info (accepting), None: the base info (dialing).
    fn new_conn(&mut self, req: Option<&Info>, peer: Proc, dialed: bool) -> Result<usize, String> {
        let id = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let ep = self.domain.endpoint(req.unwrap_or(&self.info), id + 1)?;
        ep.bind_enable(&self.eq, &self.cq)?;
        let n = self.rx_count();
        let mut rx = vec![0u8; n * self.recv_len()];
        let key = self.new_key();
        // SAFETY: rx lives in the Conn with this registration, and the Conn drops its
        // endpoint before both (field order).
        let rx_mr = unsafe {
            self.domain
                .mr_reg(rx.as_mut_ptr() as u64, rx.len(), ffi::FI_RECV, key)
        }?;
        let conn = Conn {
            ep,
            rx_mr,
            rx,
            peer,
            up: false,
            dialed,
            peer_closing: false,
            credits: 0,
            owed: 0,
        };
        self.conns[id] = Some(conn);
        for b in 0..n {
            self.repost(id, b)?;
        }
        Ok(id)
    }

    fn repost(&mut self, id: usize, b: usize) -> Result<(), String> {
        let len = self.recv_len();
        let c = self.conns[id].as_mut().expect("live connection");
        // SAFETY: buffer b of the connection's receive area, which lives as long as the
        // endpoint; it is not touched until its completion.
        let ok = unsafe {
            c.ep.recv(
                c.rx.as_mut_ptr().add(b * len),
                len,
                c.rx_mr.desc(),
                CTX_RECV | (id << CTX_BUF_BITS) | b,
            )
        }?;
        if !ok {
            return Err("fi_recv: receive queue full".into());
        }
        Ok(())
    }

    /// Dials `peer` (the first packet to it).
    fn dial(&mut self, peer: Proc) -> MpiResult<usize> {
        let card = self.board.get(peer)?.ok_or_else(|| {
            err(format!(
                "rank {peer} published no ofi address (is it running with ofi in \
                 FERRITE_TRANSPORTS?)"
            ))
        })?;
        let mut param = self.rank.to_le_bytes().to_vec();
        param.extend(self.secret()?.to_le_bytes());
        let id = self
            .new_conn(None, peer, true)
            .map_err(|e| err(format!("connecting to rank {peer}: {e}")))?;
        let c = self.conns[id].as_ref().expect("just made");
        if let Err(e) = c.ep.connect(&card, &param) {
            self.conns[id] = None;
            return Err(err(format!("connecting to rank {peer}: {e}")));
        }
        self.stats.conns_opened_first_message += 1;
        self.stats.conn.requested[OpenCause::FirstMessage as usize] += 1;
        Ok(id)
    }

    /// A key no registration of ours has (used where the provider lets us choose keys).
    fn new_key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    fn secret(&mut self) -> MpiResult<u64> {
        if self.secret.is_none() {
            self.secret = Some(self.board.secret()?);
        }
        Ok(self.secret.expect("set above"))
    }

    fn fail_peer(&mut self, peer: Proc, why: String) {
        let p = self.peers.entry(peer).or_default();
        if p.failed.is_none() {
            p.failed = Some(why.clone());
            p.queue.clear();
            self.failures.push((peer, why));
        }
    }

    /// Sends what `peer`'s queue holds as far as credits and bounce buffers allow.
    fn flush(&mut self, peer: Proc) {
        loop {
            let Some(p) = self.peers.get_mut(&peer) else {
                return;
            };
            let Some(id) = p.send else { return };
            let Some(&(kind, _)) = p.queue.front() else {
                return;
            };
            let Some(c) = self.conns[id].as_ref() else {
                return;
            };
            if !c.up || c.credits == 0 {
                return;
            }
            let Some(slot) = self.tx_free.pop() else {
                return;
            };
            let body = p.queue.pop_front().expect("front above").1;
            match self.send_slot(id, slot, kind, &[&body]) {
                Ok(true) => {}
                Ok(false) => {
                    self.tx_free.push(slot);
                    let p = self.peers.get_mut(&peer).expect("above");
                    p.queue.push_front((kind, body));
                    return;
                }
                Err(e) => {
                    self.tx_free.push(slot);
                    self.fail_peer(peer, e);
                    return;
                }
            }
        }
    }

    /// Copies header and parts into bounce buffer `slot` and sends it on connection `id`
    /// (one credit). Ok(false): the endpoint's queue is full.
    fn send_slot(
        &mut self,
        id: usize,
        slot: usize,
        kind: u8,
        parts: &[&[u8]],
    ) -> Result<bool, String> {
        let size = self.cfg.buffer;
        let c = self.conns[id].as_mut().expect("live connection");
        let buf = &mut self.tx[slot * size..(slot + 1) * size];
        buf[..HDR].copy_from_slice(&header(kind, c.owed));
        let mut n = HDR;
        for p in parts {
            buf[n..n + p.len()].copy_from_slice(p);
            n += p.len();
        }
        // SAFETY: the slot is ours until its completion returns it to tx_free.
        let ok = unsafe {
            c.ep.send(buf.as_ptr(), n, self.tx_mr.desc(), CTX_SEND | slot)
        }
        .map_err(|e| format!("sending to rank {}: {e}", c.peer))?;
        if ok {
            c.owed = 0;
            c.credits -= 1;
            if kind == DATA {
                self.stats.packets_sent += 1;
                self.stats.bytes_sent += (n - HDR) as u64;
            }
        }
        Ok(ok)
    }

    /// Reports reposted receive buffers in a credit message where `all`, or R/2 are owed.
    fn return_credits(&mut self, all: bool) {
        let half = self.cfg.credits / 2;
        for c in self.conns.iter_mut().flatten() {
            if c.up && c.owed > 0 && (all || c.owed >= half) {
                // The message uses a spare buffer of the peer's and returns no credit.
                match c.ep.inject(&header(CREDIT, c.owed)) {
                    Ok(true) => c.owed = 0,
                    Ok(false) => {}
                    Err(_) => {} // the connection's end shows up on the event queue
                }
            }
        }
    }

    /// Takes events and completions; data for `deliver` (or, without one, into `arrived`).
    fn progress(&mut self, mut deliver: Option<Deliver<'_>>) -> usize {
        let got = self.take_completions(&mut deliver);
        while let Some(ev) = self.eq.read() {
            self.event(ev);
        }
        let peers: Vec<Proc> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.queue.is_empty())
            .map(|(&r, _)| r)
            .collect();
        for p in peers {
            self.flush(p);
        }
        self.return_credits(false);
        got
    }

    fn completion(&mut self, e: &CqEntry, deliver: &mut Option<Deliver<'_>>) -> usize {
        match e.context & CTX_KIND {
            CTX_SEND => {
                self.tx_free.push(e.context & !CTX_KIND);
                0
            }
            CTX_READ => {
                let id = (e.context & !CTX_KIND) as u64;
                if let Some(r) = self.reads.get_mut(&id) {
                    r.0 -= 1;
                }
                0
            }
            CTX_RECV => {
                let rest = e.context & !CTX_KIND;
                let (id, b) = (rest >> CTX_BUF_BITS, rest & ((1 << CTX_BUF_BITS) - 1));
                self.received(id, b, e.len, deliver)
            }
            _ => 0,
        }
    }

    fn received(
        &mut self,
        id: usize,
        b: usize,
        len: usize,
        deliver: &mut Option<Deliver<'_>>,
    ) -> usize {
        let size = self.recv_len();
        let Some(c) = self.conns[id].as_mut() else {
            return 0;
        };
        let peer = c.peer;
        if len < HDR {
            self.stats.corrupt_dropped += 1;
            let _ = self.repost(id, b);
            return 0;
        }
        let h = &c.rx[b * size..b * size + HDR];
        let kind = h[0];
        c.credits += u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let body_at = b * size + HDR..b * size + len;
        let mut got = 0;
        match kind {
            DATA => {
                self.stats.packets_received += 1;
                self.stats.bytes_received += (len - HDR) as u64;
                got = 1;
                match deliver {
                    Some(d) if self.arrived.is_empty() => d(peer, &c.rx[body_at]),
                    _ => self.arrived.push_back((peer, c.rx[body_at].to_vec())),
                }
            }
            KEYREQ => {
                let body = c.rx[body_at].to_vec();
                self.serve_key(peer, &body);
            }
            KEYREP => {
                let v = &c.rx[body_at];
                if v.len() >= 25 {
                    let u = |i: usize| u64::from_le_bytes(v[i..i + 8].try_into().expect("8"));
                    let ans = (v[8] != 0).then(|| (u(9), u(17)));
                    self.keys.insert(u(0), ans);
                }
            }
            CLOSE => c.peer_closing = true,
            CREDIT => {}
            _ => self.stats.corrupt_dropped += 1,
        }
        let c = self.conns[id].as_mut().expect("above");
        if kind != CREDIT {
            c.owed += 1;
        }
        if let Err(e) = self.repost(id, b) {
            self.fail_peer(peer, e);
        }
        if kind != DATA {
            self.flush(peer);
        }
        got
    }

    fn completion_error(&mut self, e: ffi::CqError) {
        let kind = e.context & CTX_KIND;
        match kind {
            CTX_SEND => self.tx_free.push(e.context & !CTX_KIND),
            CTX_READ => {
                if let Some(r) = self.reads.get_mut(&((e.context & !CTX_KIND) as u64)) {
                    r.0 -= 1;
                    r.1 = true;
                }
            }
            _ => {}
        }
        if e.err == ffi::FI_ECANCELED || self.closing {
            return; // receives flushed as an endpoint closes
        }
        let id = (e.context & !CTX_KIND) >> CTX_BUF_BITS;
        if kind == CTX_RECV {
            if let Some(peer) = self.conns.get(id).and_then(|c| c.as_ref()).map(|c| c.peer) {
                if !self.conns[id].as_ref().is_some_and(|c| c.peer_closing) {
                    self.fail_peer(peer, format!("receiving from rank {peer}: {}", e.why));
                }
            }
        }
    }

    fn conn_of(&self, ctx: usize) -> Option<usize> {
        let id = ctx.checked_sub(1)?;
        self.conns.get(id)?.as_ref().map(|_| id)
    }

    fn event(&mut self, ev: EqEvent) {
        match ev {
            EqEvent::ConnReq { info, data } => {
                let secret = self.secret().ok();
                let ok = data.len() >= 12
                    && Some(u64::from_le_bytes(data[4..12].try_into().expect("8"))) == secret;
                if !ok {
                    self.stats.strangers_dropped += 1;
                    self.pep.reject(&info);
                    return;
                }
                let peer = u32::from_le_bytes(data[..4].try_into().expect("4"));
                match self.new_conn(Some(&info), peer, false) {
                    Ok(id) => {
                        let c = self.conns[id].as_ref().expect("just made");
                        if let Err(e) = c.ep.accept() {
                            self.conns[id] = None;
                            self.fail_peer(peer, format!("accepting rank {peer}: {e}"));
                        } else {
                            self.stats.conns_accepted += 1;
                        }
                    }
                    Err(e) => {
                        self.pep.reject(&info);
                        self.fail_peer(peer, format!("accepting rank {peer}: {e}"));
                    }
                }
            }
            EqEvent::Connected(ctx) => {
                let Some(id) = self.conn_of(ctx) else { return };
                let credits = self.cfg.credits;
                let c = self.conns[id].as_mut().expect("conn_of");
                c.up = true;
                c.credits = credits;
                let peer = c.peer;
                let cause = if c.dialed {
                    OpenCause::FirstMessage
                } else {
                    OpenCause::Peer
                };
                self.stats.conn.opened[cause as usize] += 1;
                let p = self.peers.entry(peer).or_default();
                if p.send.is_none() {
                    p.send = Some(id);
                }
                self.stats.conn.open_now += 1;
                self.stats.conn.open_peak = self.stats.conn.open_peak.max(self.stats.conn.open_now);
                self.flush(peer);
            }
            EqEvent::Shutdown(ctx) => {
                let Some(id) = self.conn_of(ctx) else { return };
                // Packets that came before the end are on the completion queue.
                self.take_completions(&mut None);
                let c = self.conns[id].take().expect("conn_of");
                self.stats.conns_closed += 1;
                self.stats.conn.closed[CloseCause::Peer as usize] += 1;
                if c.up {
                    self.stats.conn.open_now = self.stats.conn.open_now.saturating_sub(1);
                }
                if !c.peer_closing && !self.closing {
                    self.fail_peer(
                        c.peer,
                        format!(
                            "the connection to rank {} was lost (the peer ended without closing)",
                            c.peer
                        ),
                    );
                }
                if let Some(p) = self.peers.get_mut(&c.peer) {
                    if p.send == Some(id) {
                        p.send = None;
                    }
                }
            }
            EqEvent::Error { ctx, why, .. } => {
                let Some(id) = self.conn_of(ctx) else { return };
                let c = self.conns[id].take().expect("conn_of");
                if !self.closing && !c.peer_closing {
                    self.fail_peer(
                        c.peer,
                        format!(
                            "connection {} rank {} failed: {why}",
                            if c.dialed { "to" } else { "from" },
                            c.peer
                        ),
                    );
                }
                if let Some(p) = self.peers.get_mut(&c.peer) {
                    if p.send == Some(id) {
                        p.send = None;
                    }
                }
            }
            EqEvent::Other => {}
        }
    }

    /// Takes every completion in the queue; data for `deliver` (or into `arrived`).
    fn take_completions(&mut self, deliver: &mut Option<Deliver<'_>>) -> usize {
        let mut got = 0;
        loop {
            let mut ents = [CqEntry {
                context: 0,
                flags: 0,
                len: 0,
            }; 32];
            match self.cq.read(&mut ents) {
                Ok(0) => break,
                Ok(n) => {
                    for e in &ents[..n] {
                        got += self.completion(e, deliver);
                    }
                }
                Err(e) => self.completion_error(e),
            }
        }
        got
    }

    /// A peer asks for a key to `len` bytes at `addr` of ours (its rendezvous read).
    fn serve_key(&mut self, peer: Proc, body: &[u8]) {
        if body.len() < 24 {
            self.stats.corrupt_dropped += 1;
            return;
        }
        let u = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("8"));
        let (id, addr, len) = (u(0), u(8), u(16));
        let ans = self.key_for(addr, len);
        let mut rep = id.to_le_bytes().to_vec();
        let (ok, key, raddr) = ans.map_or((0u8, 0, 0), |(k, a)| (1, k, a));
        rep.push(ok);
        rep.extend(key.to_le_bytes());
        rep.extend(raddr.to_le_bytes());
        self.ofi_stats.keys_served += 1;
        self.peers
            .entry(peer)
            .or_default()
            .queue
            .push_front((KEYREP, rep));
    }

    /// The key and remote address under which peers read `[addr, addr+len)`: a cached
    /// registration or a new one (pages whole, so neighbours hit too).
    fn key_for(&mut self, addr: u64, len: u64) -> Option<(u64, u64)> {
        let page = 4096u64;
        let (start, region) = match self.cache.lookup(addr, len) {
            Some((s, mr)) => (s, mr.key()),
            None => {
                let start = addr & !(page - 1);
                let end = (addr + len).div_ceil(page) * page;
                let key = self.new_key();
                // SAFETY: the sender's buffer stays valid until the peer's read is done
                // (the protocol's FIN); the registration is only used for remote reads.
                let mr = unsafe {
                    self.domain
                        .mr_reg(start, (end - start) as usize, ffi::FI_REMOTE_READ, key)
                }
                .ok()?;
                let k = mr.key();
                drop(self.cache.insert(start, end - start, mr));
                (start, k)
            }
        };
        self.ofi_stats.cache = self.cache.stats;
        let raddr = if self.prov.mr_mode & ffi::FI_MR_VIRT_ADDR != 0 {
            addr
        } else {
            addr - start
        };
        Some((region, raddr))
    }

    /// Blocks in the kernel until the queues may have something (at most `ms`). The tcp
    /// provider of libfabric 1.17 does not always make its wait fds readable when a
    /// completion is ready (measured: waits inside a rendezvous ran to their timeout), so the
    /// rendezvous waits use 1 ms slices.
    fn wait(&mut self, ms: i32) {
        if !self.fabric.trywait(&self.eq, &self.cq) {
            return;
        }
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: evs is valid for 4 events.
        unsafe { libc::epoll_wait(self.epoll, evs.as_mut_ptr(), 4, ms) };
    }

    fn up_conn(&self, peer: Proc) -> Option<usize> {
        let p = self.peers.get(&peer)?;
        p.send
            .filter(|&i| self.conns[i].as_ref().is_some_and(|c| c.up))
            .or_else(|| {
                self.conns
                    .iter()
                    .position(|c| c.as_ref().is_some_and(|c| c.up && c.peer == peer))
            })
    }

    fn rdma_read(&mut self, from: Proc, addr: u64, dst: &mut [u8]) -> MpiResult<bool> {
        if self.up_conn(from).is_none() {
            return Ok(false);
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut req = id.to_le_bytes().to_vec();
        req.extend(addr.to_le_bytes());
        req.extend((dst.len() as u64).to_le_bytes());
        self.peers
            .entry(from)
            .or_default()
            .queue
            .push_back((KEYREQ, req));
        self.flush(from);
        let ans = loop {
            if let Some(a) = self.keys.remove(&id) {
                break a;
            }
            if let Some(why) = self.peers.get(&from).and_then(|p| p.failed.clone()) {
                return Err(mpi_err!(MPI_ERR_PROC_ABORTED, "ofi transport: {why}"));
            }
            self.progress(None);
            if self.keys.contains_key(&id) {
                continue;
            }
            self.return_credits(true);
            self.wait(1);
        };
        let Some((key, raddr)) = ans else {
            self.stats.remote_read_fallbacks += 1;
            return Ok(false);
        };
        let Some(cid) = self.up_conn(from) else {
            return Ok(false);
        };
        // Memory the provider writes into must be registered where it says so.
        let local = if self.prov.mr_mode & ffi::FI_MR_LOCAL != 0 {
            let key = self.new_key();
            // SAFETY: dst is borrowed for this whole call, which waits for the read.
            match unsafe {
                self.domain
                    .mr_reg(dst.as_mut_ptr() as u64, dst.len(), ffi::FI_READ, key)
            } {
                Ok(m) => Some(m),
                Err(_) => {
                    self.stats.remote_read_fallbacks += 1;
                    return Ok(false);
                }
            }
        } else {
            None
        };
        let desc = local.as_ref().map_or(std::ptr::null_mut(), |m| m.desc());
        let chunk = self.prov.max_msg_size.clamp(1, 1 << 30);
        let rid = self.next_id;
        self.next_id += 1;
        self.reads.insert(rid, (0, false));
        let mut off = 0;
        while off < dst.len() {
            let n = chunk.min(dst.len() - off);
            let c = match self.conns[cid].as_ref() {
                Some(c) => c,
                None => break,
            };
            // SAFETY: dst outlives the read: this call waits for its completion below.
            match unsafe {
                c.ep.read(
                    dst.as_mut_ptr().add(off),
                    n,
                    desc,
                    raddr + off as u64,
                    key,
                    CTX_READ | rid as usize,
                )
            } {
                Ok(true) => {
                    off += n;
                    self.reads.get_mut(&rid).expect("inserted").0 += 1;
                }
                Ok(false) => {
                    self.progress(None);
                }
                Err(_) => {
                    self.reads.get_mut(&rid).expect("inserted").1 = true;
                    break;
                }
            }
        }
        loop {
            let (left, _) = self.reads[&rid];
            if left == 0 {
                break;
            }
            self.progress(None);
            if self.reads[&rid].0 == 0 {
                break;
            }
            self.return_credits(true);
            self.wait(1);
        }
        let (_, failed) = self.reads.remove(&rid).expect("inserted");
        drop(local);
        if failed || off < dst.len() {
            self.stats.remote_read_fallbacks += 1;
            return Ok(false);
        }
        self.stats.remote_reads += 1;
        self.stats.remote_read_bytes += dst.len() as u64;
        Ok(true)
    }
}

impl Transport for Ofi {
    fn name(&self) -> &'static str {
        "ofi"
    }

    fn max_packet(&self) -> usize {
        self.cfg.buffer - HDR
    }

    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> super::TResult<bool> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_packet() {
            return Err(err(format!(
                "packet of {len} bytes is larger than the largest ({})",
                self.max_packet()
            ))
            .into());
        }
        if let Some(why) = self.peers.get(&to).and_then(|p| p.failed.clone()) {
            return Err(mpi_err!(MPI_ERR_PROC_ABORTED, "ofi transport: {why}").into());
        }
        if self.peers.get(&to).is_none_or(|p| p.send.is_none()) {
            let id = self.dial(to)?;
            self.peers.entry(to).or_default().send = Some(id);
        }
        let p = self.peers.get_mut(&to).expect("above");
        p.used = true;
        let id = p.send.expect("above");
        if p.queue.is_empty() {
            let c = self.conns[id].as_ref().expect("send connection");
            if c.up && c.credits > 0 {
                if self.tx_free.is_empty() {
                    self.take_completions(&mut None);
                }
                if let Some(slot) = self.tx_free.pop() {
                    match self.send_slot(id, slot, DATA, parts) {
                        Ok(true) => return Ok(true),
                        Ok(false) => self.tx_free.push(slot),
                        Err(e) => {
                            self.tx_free.push(slot);
                            return Err(err(e).into());
                        }
                    }
                }
            }
        }
        let p = self.peers.get_mut(&to).expect("above");
        if p.queue.len() >= QUEUE_MAX {
            self.stats.no_room += 1;
            return Ok(false);
        }
        p.queue.push_back((DATA, parts.concat()));
        Ok(true)
    }

    fn poll(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let mut n = 0;
        while let Some((from, pkt)) = self.arrived.pop_front() {
            deliver(from, &pkt);
            n += 1;
        }
        n + self.progress(Some(deliver))
    }

    fn read_remote(&mut self, from: Proc, addr: u64, dst: &mut [u8]) -> super::TResult<bool> {
        if !self.cfg.rdma_read || dst.is_empty() {
            return Ok(dst.is_empty());
        }
        Ok(self.rdma_read(from, addr, dst)?)
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.epoll)
    }

    fn arm(&mut self) -> bool {
        // Owed credits go now: the peer may be waiting for them.
        self.return_credits(true);
        self.arrived.is_empty() && self.fabric.trywait(&self.eq, &self.cq)
    }

    fn pending(&self) -> bool {
        self.tx_free.len() < TX_SLOTS || self.peers.values().any(|p| !p.queue.is_empty())
    }

    fn take_failures(&mut self) -> Vec<(Proc, String)> {
        std::mem::take(&mut self.failures)
    }

    fn shutdown(&mut self) {
        let peers: Vec<Proc> = self
            .peers
            .iter()
            .filter(|(_, p)| p.failed.is_none())
            .map(|(&r, _)| r)
            .collect();
        for &p in &peers {
            // Every connection to p says so: the one we send on carries it after our data.
            let ids: Vec<usize> = self
                .conns
                .iter()
                .enumerate()
                .filter(|(_, c)| c.as_ref().is_some_and(|c| c.up && c.peer == p))
                .map(|(i, _)| i)
                .collect();
            for id in ids {
                if Some(id) == self.peers[&p].send {
                    self.peers
                        .get_mut(&p)
                        .expect("listed")
                        .queue
                        .push_back((CLOSE, Vec::new()));
                } else if let Some(c) = self.conns[id].as_ref() {
                    let _ = c.ep.inject(&header(CLOSE, 0));
                }
            }
            self.flush(p);
        }
        // Let the last packets leave (bounded: a dead peer must not hang MPI_Finalize).
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.pending() && std::time::Instant::now() < until {
            self.progress(None);
            if self.pending() {
                self.wait(50);
            }
        }
        self.closing = true;
    }

    fn stats(&self) -> TransportStats {
        let mut s = self.stats;
        s.peers_used = self.peers.values().filter(|p| p.used).count() as u64;
        s.mr_cache_hits = self.ofi_stats.cache.hits;
        s.mr_cache_misses = self.ofi_stats.cache.misses;
        s
    }
}

impl Drop for Ofi {
    fn drop(&mut self) {
        self.closing = true;
        for c in self.conns.iter().flatten() {
            c.ep.shutdown();
        }
        self.conns.clear();
        drop(self.cache.drain());
        // SAFETY: the epoll fd is ours, closed once.
        unsafe { libc::close(self.epoll) };
    }
}

#[cfg(test)]
mod tests;
