//! The ofi transport: libfabric's connection-oriented endpoints (FI_EP_MSG, the RC queue
//! pair / VI of the papers), loaded at run time (`ffi.rs`), with the provider chosen by
//! FERRITE_OFI_PROVIDER (tcp by default; verbs, efa, ... on real fabrics).
//!
//! - Connections: every decision (when, to whom, set-up, the close protocol, the budget,
//!   failures) is the connection manager's (`conn/manager.rs`), driven as tcp drives it.
//!   Each process opens a passive endpoint during MPI_Init and publishes its name
//!   (fi_getname, hex) through PMI under `ofi-<rank>`. The manager's dial is fi_connect with
//!   our rank and the job secret as connection data; the peer checks both before it lets the
//!   manager accept (FI_CONNREQ -> fi_accept); FI_CONNECTED and FI_SHUTDOWN are the
//!   manager's connected and closed events, and its hello, CLOSE, CLOSE_ACK and BYE travel
//!   as messages of their own kinds. Packets wait in a per-peer FIFO until the manager says
//!   which endpoint carries them. Adaptive traffic and the ud set-up go over a datagram
//!   channel on a libfabric FI_EP_DGRAM endpoint (`dgram.rs`), as tcp's over udp.
//! - Eager: packets are copied into pre-registered bounce buffers and sent with fi_send
//!   into receive buffers the peer posted: one shared receive context per process with
//!   K * ceil(log2 n) + B buffers where the provider has them, else 2R per connection
//!   (`srq.rs`). Credits (`srq::Credits`) keep every sender within what its receiver lent
//!   it, so nothing waits for a buffer and nothing is dropped. Every message's header names
//!   its connection (the dialer's rank and endpoint id), since a shared context's
//!   completions do not say which endpoint a message came on.
//! - Rendezvous: the sender's RTS carries its key to the buffer (`rndv_key`: a registration
//!   from the registration cache, `regcache.rs`), and the receiver fi_reads it at once (RDMA
//!   read, `read_keyed`); without a key the protocol falls back to fragments.
//! - Blocking: the event and completion queues' wait fds (fi_control FI_GETWAIT) are in an
//!   epoll set of ours, the transport's wake fd; `arm` is fi_trywait.
//! - Finalize: queued packets go, a BYE on every connection, the peers' BYE awaited; a
//!   connection that ends without one is a failed peer.

pub mod dgram;
pub mod ffi;
pub mod memhooks;
pub mod regcache;
pub mod srq;

use super::timer::Timer;
use super::udp::Datagrams;
use super::{tcp, KeyedRead, Proc, RndvKey, Transport, TransportStats};
use crate::conn::handshake;
use crate::conn::manager::{
    self, Action, EpId, EpView, FailKind, Failure, Manager, Phase, HELLO_LEN,
};
use crate::conn::{policy, Micros};
use crate::consts::{MPI_ERR_ARG, MPI_ERR_OTHER, MPI_ERR_PROC_ABORTED};
use crate::error::{MpiError, MpiResult};
use crate::fxhash::FxHashMap;
use crate::mpi_err;
use crate::runtime::{self, config, pmi};
use ffi::{CqEntry, Domain, Ep, Eq, EqEvent, Fabric, Info, Mr, Pep, ProvInfo};
use regcache::RegCache;
use srq::{Credits, Grant, Pool};
use std::collections::VecDeque;
use std::os::unix::io::RawFd;
use std::time::Instant;

/// The transport's settings, from the FERRITE_OFI_* knobs.
#[derive(Clone, Debug)]
pub struct OfiConfig {
    pub provider: String,
    /// Domain (interface) to use; empty: the provider's first.
    pub iface: String,
    /// Bytes per bounce buffer (the largest packet, header included).
    pub buffer: usize,
    /// Most packets in flight per connection (R) when receive buffers are not shared (2R
    /// receive buffers per connection); a shared pool's credits are lent by use instead.
    pub credits: u32,
    /// One shared receive context per process where the provider has them
    /// (FERRITE_OFI_SRQ), with K * ceil(log2 n) + B buffers (FERRITE_OFI_SRQ_K, _B).
    pub srq: bool,
    pub srq_k: u32,
    pub srq_b: u32,
    /// Rendezvous by RDMA read (else the protocol copies through packets).
    pub rdma_read: bool,
    pub cache_entries: usize,
    pub cache_bytes: u64,
    /// Which peers get a connection when (FERRITE_CONN, as tcp).
    pub policy: policy::Kind,
    /// Most connections open at once (FERRITE_CONN_MAX; 0 there: from the open-file limit).
    pub max_conns: usize,
    /// Connection attempts to a peer before it counts as failed (FERRITE_TCP_CONNECT_RETRIES).
    pub connect_retries: u32,
    /// How long MPI_Finalize waits for peers to take the last packets (FERRITE_TCP_LINGER_MS).
    pub linger_ms: u64,
    /// How connections are set up (FERRITE_CONN_SETUP): `ud` settles attempts over the
    /// datagram channel first.
    pub setup: policy::Mechanism,
    /// Adaptive: messages to a peer over datagrams before its connection (FERRITE_CONN_THRESHOLD).
    pub threshold: u64,
    /// Adaptive: a connection unused this long closes; 0: never (FERRITE_CONN_IDLE_MS).
    pub idle_ms: u64,
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
            srq: config::get::<u32>("FERRITE_OFI_SRQ") != 0,
            srq_k: config::get("FERRITE_OFI_SRQ_K"),
            srq_b: config::get("FERRITE_OFI_SRQ_B"),
            rdma_read: config::get::<u32>("FERRITE_OFI_RDMA_READ") != 0,
            cache_entries: config::get("FERRITE_OFI_MR_CACHE_ENTRIES"),
            cache_bytes: config::get::<u64>("FERRITE_OFI_MR_CACHE_MB") << 20,
            policy: tcp::conn_policy()?,
            max_conns: tcp::conn_max(),
            connect_retries: config::get("FERRITE_TCP_CONNECT_RETRIES"),
            linger_ms: config::get("FERRITE_TCP_LINGER_MS"),
            setup: tcp::conn_setup()?,
            threshold: config::get::<u64>("FERRITE_CONN_THRESHOLD").max(1),
            idle_ms: config::get("FERRITE_CONN_IDLE_MS"),
        })
    }

    pub fn test_default() -> OfiConfig {
        OfiConfig {
            provider: "tcp".into(),
            iface: String::new(),
            buffer: 16448,
            credits: 8,
            srq: true,
            srq_k: 16,
            srq_b: 64,
            rdma_read: true,
            cache_entries: 64,
            cache_bytes: 64 << 20,
            policy: policy::Kind::OnDemand,
            max_conns: 64,
            connect_retries: 3,
            linger_ms: 5000,
            setup: policy::Mechanism::Cm,
            threshold: 16,
            idle_ms: 30_000,
        }
    }
}

/// Where business cards are published: PMI, or in unit tests an in-process map.
/// Cards are named `<kind>-<rank>`: `ofi` the passive endpoint, `ofid` the datagram one.
pub trait Board: Send {
    fn put_as(&mut self, kind: &str, rank: Proc, card: &[u8]) -> MpiResult<()>;
    fn get_as(&mut self, kind: &str, rank: Proc) -> MpiResult<Option<Vec<u8>>>;
    fn secret(&mut self) -> MpiResult<u64>;
    fn put(&mut self, rank: Proc, card: &[u8]) -> MpiResult<()> {
        self.put_as("ofi", rank, card)
    }
    fn get(&mut self, rank: Proc) -> MpiResult<Option<Vec<u8>>> {
        self.get_as("ofi", rank)
    }
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
    fn put_as(&mut self, kind: &str, rank: Proc, card: &[u8]) -> MpiResult<()> {
        Ok(pmi::put(&format!("{kind}-{rank}"), &hex(card))?)
    }

    fn get_as(&mut self, kind: &str, rank: Proc) -> MpiResult<Option<Vec<u8>>> {
        pmi::get(&format!("{kind}-{rank}"))?
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
    use std::collections::HashMap;
    use std::sync::Mutex;

    type Cards = HashMap<(String, Proc), Vec<u8>>;
    static CARDS: Mutex<Option<Cards>> = Mutex::new(None);

    /// The cards of one test job, in this test process.
    pub struct TestBoard(pub String);

    impl Board for TestBoard {
        fn put_as(&mut self, kind: &str, rank: Proc, card: &[u8]) -> MpiResult<()> {
            let mut g = CARDS.lock().unwrap_or_else(|e| e.into_inner());
            g.get_or_insert_with(HashMap::new)
                .insert((format!("{}/{kind}", self.0), rank), card.to_vec());
            Ok(())
        }

        fn get_as(&mut self, kind: &str, rank: Proc) -> MpiResult<Option<Vec<u8>>> {
            let g = CARDS.lock().unwrap_or_else(|e| e.into_inner());
            Ok(g.as_ref()
                .and_then(|m| m.get(&(format!("{}/{kind}", self.0), rank)).cloned()))
        }

        fn secret(&mut self) -> MpiResult<u64> {
            Ok(super::super::tcp::card::secret_u64(&self.0))
        }
    }
}

// Message kinds (first byte of the header, `header`).
const DATA: u8 = 1;
const CREDIT: u8 = 2;
/// The connection manager's close protocol (see `conn/manager.rs`).
const CLOSE: u8 = 3;
// 4 and 5 were key requests and answers, before the key travelled in the RTS.
/// Handshake bytes of the connection manager (a hello, or its answer).
const HELLO: u8 = 6;
const CLOSE_ACK: u8 = 7;
/// The peer finalized: the end of this connection is no failure.
const BYE: u8 = 8;
const HDR: usize = 24;

/// Where `progress` hands data packets (None: into `arrived`).
type Deliver<'a> = &'a mut dyn FnMut(Proc, &[u8]);

/// A message's header: kind, the sender's ask for acknowledgements, credits lent, our
/// messages acknowledged (the grant, `srq.rs`), and the connection it belongs to: the rank
/// and endpoint id of its dialer (a shared receive context does not say which endpoint a
/// message came on).
fn header(kind: u8, g: Grant, wire: (Proc, u64)) -> [u8; HDR] {
    let mut h = [0u8; HDR];
    h[0] = kind;
    h[1] = u8::from(g.ask);
    h[4..8].copy_from_slice(&g.credits.to_le_bytes());
    h[8..12].copy_from_slice(&g.acks.to_le_bytes());
    h[12..16].copy_from_slice(&wire.0.to_le_bytes());
    h[16..24].copy_from_slice(&wire.1.to_le_bytes());
    h
}

/// The kind, grant and connection of a header.
fn parse_header(h: &[u8]) -> (u8, Grant, (Proc, u64)) {
    let u = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let g = Grant {
        credits: u(4),
        acks: u(8),
        ask: h[1] != 0,
    };
    let ep = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
    (h[0], g, (u(12), ep))
}

// Completion contexts: the operation's kind in the top bits; for sends and receives the
// endpoint (the manager's id) and the buffer below it.
const CTX_RECV: usize = 1 << 60;
const CTX_SEND: usize = 2 << 60;
const CTX_READ: usize = 3 << 60;
/// A receive posted to the shared receive context (the buffer's index below).
const CTX_SRX: usize = 4 << 60;
const CTX_KIND: usize = 0xf << 60;
const CTX_BUF_BITS: u32 = 20;
const CTX_BUF: usize = (1 << CTX_BUF_BITS) - 1;

fn ctx(kind: usize, ep: EpId, buf: usize) -> usize {
    kind | ((ep.0 as usize) << CTX_BUF_BITS) | buf
}

fn ctx_ep(c: usize) -> EpId {
    EpId(((c & !CTX_KIND) >> CTX_BUF_BITS) as u64)
}

/// Bounce buffers for sends.
const TX_SLOTS: usize = 64;
/// Our packets a peer's queue may hold (not yet sendable) before try_send says no room.
const QUEUE_MAX: usize = 256;
/// How often a hello held back for the budget is offered again.
const HELD_RECHECK: Micros = 10_000;

/// One endpoint: its receive buffers, credits and messages. Where it is in its life
/// (dialing, hello, up, closing) is the connection manager's.
struct Conn {
    ep: Ep,
    /// Its own receive buffers (None: the process's shared context has them).
    rx: Option<(Mr, Vec<u8>)>,
    /// The connection's name in headers: its dialer's rank and endpoint id.
    wire: (Proc, u64),
    /// FI_CONNECTED came: messages may be posted.
    up: bool,
    /// Handshake bytes to send (before anything else).
    ctl: VecDeque<Vec<u8>>,
    /// Once closing: what still goes on it (the peer's queue moved here), ending with our
    /// CLOSE (and CLOSE_ACK).
    closeq: VecDeque<(u8, Vec<u8>)>,
    /// Our bounce buffers with a send posted on it, not yet complete.
    sending: Vec<usize>,
    /// Handshake bytes received, not yet taken by the manager (a held hello stays here).
    hs: Vec<u8>,
    /// Messages that came while the manager does not read it (a new connection waiting for
    /// the old one's close), handled in order on `Resume`.
    stash: VecDeque<(u8, Vec<u8>)>,
    /// The peer's BYE came (MPI_Finalize waits for it).
    bye: bool,
}

#[derive(Default)]
struct Peer {
    /// Packets waiting for the connection, credits or a bounce buffer: (kind, body).
    queue: VecDeque<(u8, Vec<u8>)>,
    /// A packet went to or came from this peer (the report's utilization).
    used: bool,
}

/// Counters of the registration cache and rendezvous reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct OfiStats {
    pub cache: regcache::CacheStats,
    /// Keys put in RTS packets (`rndv_key`).
    pub keys_sent: u64,
    /// Most rendezvous reads in flight at once (`read_keyed_many`'s batches).
    pub read_batch_peak: u64,
}

pub struct Ofi {
    rank: Proc,
    cfg: OfiConfig,
    prov: ProvInfo,
    // Fields drop in this order: endpoints and registrations before the queues, the domain
    // and the fabric they belong to.
    conns: FxHashMap<EpId, Conn>,
    /// The shared receive context and its buffers (None: per-connection buffers).
    pool: Option<Pool>,
    cache: RegCache<Mr>,
    /// Memory the program gave back (munmap, ...), read before each cache lookup.
    released: memhooks::Reader,
    tx_mr: Mr,
    tx: Vec<u8>,
    pep: Pep,
    cq: ffi::Cq,
    eq: Eq,
    domain: Domain,
    fabric: Fabric,
    info: Info,
    /// Every decision about connections: when they open and close, set-up, the close
    /// protocol, the budget, failures (the same manager as tcp's).
    mgr: Manager,
    /// Credits of every connection, and the receive buffers lent from the pool.
    credits: Credits,
    /// Accepted connections by their name in headers (dialer's rank and endpoint id).
    wires: FxHashMap<(Proc, u64), EpId>,
    /// Most receive buffers posted at once (per-connection buffers; the pool's are fixed).
    rx_peak: usize,
    /// Our passive endpoint's name (the manager's listen address).
    name: Vec<u8>,
    tx_free: Vec<usize>,
    peers: FxHashMap<Proc, Peer>,
    /// Packets taken off the completion queue while no one delivered them (delivered first).
    arrived: VecDeque<(Proc, Vec<u8>)>,
    /// Peers found dead, not yet reported (`take_failures`).
    dead: Vec<(Proc, String)>,
    /// New connections whose old one finished closing: handle what they stashed meanwhile.
    resume: Vec<EpId>,
    /// Reads in flight: id -> (chunks outstanding, failed).
    reads: FxHashMap<u64, (usize, bool)>,
    next_id: u64,
    next_key: u64,
    board: Box<dyn Board>,
    /// The job secret (read from PMI when first needed, after MPI_Init's barrier).
    secret: Option<u64>,
    epoll: RawFd,
    /// Readable (in `epoll`) when the manager's next timer is due.
    timer: Timer,
    t0: Instant,
    closing: bool,
    /// Adaptive and ud: the datagram channel over an FI_EP_DGRAM endpoint (`dgram.rs`).
    chan: Option<Datagrams<dgram::OfiPort>>,
    stats: TransportStats,
    pub ofi_stats: OfiStats,
}

fn err(msg: String) -> crate::error::MpiError {
    mpi_err!(MPI_ERR_OTHER, "ofi transport: {msg}")
}

/// The transport's error for a peer the manager gave up on.
fn failure_err(f: &Failure) -> MpiError {
    let class = match f.kind {
        FailKind::Aborted => MPI_ERR_PROC_ABORTED,
        FailKind::Finalized => MPI_ERR_OTHER,
    };
    mpi_err!(class, "ofi transport: {}", f.why)
}

impl Ofi {
    /// Opens the fabric, domain, queues and the passive endpoint, and publishes its name.
    pub fn new(rank: Proc, size: u32, cfg: OfiConfig, mut board: Box<dyn Board>) -> MpiResult<Ofi> {
        ffi::available().map_err(|e| err(format!("FERRITE_TRANSPORTS lists ofi but {e}")))?;
        let mut info = Info::get(&cfg.provider, &cfg.iface).map_err(err)?;
        let prov = info.prov();
        let fabric = Fabric::open(&info).map_err(err)?;
        let domain = fabric.domain(&info).map_err(err)?;
        let eq = fabric.eq(64).map_err(err)?;
        let shared = cfg.srq && prov.max_ep_srx_ctx > 0;
        let pool_n = srq::pool_size(size, cfg.srq_k, cfg.srq_b) as usize;
        if shared && !(8..=CTX_BUF).contains(&pool_n) {
            return Err(mpi_err!(
                MPI_ERR_ARG,
                "ofi transport: FERRITE_OFI_SRQ_K={} and FERRITE_OFI_SRQ_B={} give {pool_n} \
                 shared receive buffers for {size} ranks; at least 8 and at most {CTX_BUF}",
                cfg.srq_k,
                cfg.srq_b
            ));
        }
        let cq = domain
            .cq(4 * TX_SLOTS + 1024 + if shared { pool_n } else { 0 })
            .map_err(err)?;
        let pool = if shared {
            info.share_rx();
            let p =
                Pool::new(&domain, &cq, pool_n, cfg.buffer, 2, |i| CTX_SRX | i).map_err(|e| {
                    err(format!(
                        "{e} (the provider offers shared receive contexts; FERRITE_OFI_SRQ=0 \
                     posts receive buffers per connection instead)"
                    ))
                })?;
            Some(p)
        } else {
            None
        };
        // A shared pool lends a busy connection up to all of its lendable part (the
        // credits share it out); per-connection buffers hold R each.
        let cap = if shared { u32::MAX } else { cfg.credits };
        let credits = Credits::new(shared.then_some(pool_n as u32), cap);
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
        let timer = Timer::new().map_err(|e| err(format!("timerfd_create: {e}")))?;
        let fds = [eq.fd().map_err(err)?, cq.fd().map_err(err)?, timer.fd()];
        // SAFETY: plain syscall; the epoll fd is ours, closed in Drop.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(err(format!(
                "epoll_create1: {}",
                std::io::Error::last_os_error()
            )));
        }
        for fd in fds {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: the fds are open; ev is valid.
            if unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
                let e = std::io::Error::last_os_error();
                // SAFETY: ours, closed once.
                unsafe { libc::close(epoll) };
                return Err(err(format!("epoll_ctl(ADD, wait fd or timerfd): {e}")));
            }
        }
        let mut hs = handshake::Config::new(size);
        hs.max_retries = cfg.connect_retries;
        hs.hello_wait = tcp::hello_wait(size);
        let mcfg = manager::Config {
            policy: policy::Config {
                kind: cfg.policy,
                threshold_msgs: cfg.threshold,
                threshold_bytes: 0,
                max_open: cfg.max_conns.max(1),
                idle: cfg.idle_ms.saturating_mul(1000),
                hold_max: 1_000_000,
                residency: config::get::<u64>("FERRITE_CONN_RESIDENCY_MS").saturating_mul(1000),
            },
            setup: cfg.setup,
            handshake: hs,
            datagrams: cfg.needs_channel(),
        };
        Ok(Ofi {
            rank,
            cache: RegCache::new(cfg.cache_entries, cfg.cache_bytes),
            released: {
                memhooks::watch();
                memhooks::Reader::new()
            },
            cfg,
            prov,
            conns: FxHashMap::default(),
            pool,
            credits,
            wires: FxHashMap::default(),
            rx_peak: 0,
            tx_mr,
            tx,
            pep,
            cq,
            eq,
            domain,
            fabric,
            info,
            mgr: Manager::new(rank, mcfg),
            name,
            tx_free: (0..TX_SLOTS).rev().collect(),
            peers: FxHashMap::default(),
            arrived: VecDeque::new(),
            dead: Vec::new(),
            resume: Vec::new(),
            reads: FxHashMap::default(),
            next_id: 1,
            next_key: 3,
            board,
            secret: None,
            epoll,
            timer,
            t0: Instant::now(),
            closing: false,
            chan: None,
            stats: TransportStats::default(),
            ofi_stats: OfiStats::default(),
        })
    }

    /// The provider and domain in use.
    pub fn provider(&self) -> &ProvInfo {
        &self.prov
    }

    fn now(&self) -> Micros {
        self.t0.elapsed().as_micros() as Micros
    }

    fn recv_len(&self) -> usize {
        self.cfg.buffer
    }

    fn rx_count(&self) -> usize {
        2 * self.cfg.credits as usize
    }

    fn secret(&mut self) -> MpiResult<u64> {
        if self.secret.is_none() {
            self.secret = Some(self.board.secret()?);
        }
        Ok(self.secret.expect("set above"))
    }

    /// The manager starts once the job secret is known (after MPI_Init's barrier).
    fn start(&mut self) -> MpiResult<()> {
        if !self.mgr.started() {
            let secret = self.secret()?;
            self.mgr.start(secret, self.name.clone());
        }
        Ok(())
    }

    /// A new endpoint for the manager's `ep`, bound, enabled, with its receive buffers
    /// posted (or bound to the shared receive context). `req`: a connection request's info
    /// (accepting), None: the base info (dialing). `wire`: its name in headers.
    fn new_conn(
        &mut self,
        req: Option<&mut Info>,
        ep: EpId,
        wire: (Proc, u64),
    ) -> Result<(), String> {
        let fep = match req {
            Some(info) => {
                if self.pool.is_some() {
                    info.share_rx();
                }
                self.domain.endpoint(info, ep.0 as usize)?
            }
            None => self.domain.endpoint(&self.info, ep.0 as usize)?,
        };
        fep.bind_enable(&self.eq, &self.cq, self.pool.as_ref().map(Pool::srx))?;
        let n = self.rx_count();
        let rx = if self.pool.is_none() {
            let mut rx = vec![0u8; n * self.recv_len()];
            let key = self.new_key();
            // SAFETY: rx lives in the Conn with this registration, and the Conn drops its
            // endpoint before both (field order).
            let rx_mr = unsafe {
                self.domain
                    .mr_reg(rx.as_mut_ptr() as u64, rx.len(), ffi::FI_RECV, key)
            }?;
            Some((rx_mr, rx))
        } else {
            None
        };
        let own = rx.is_some();
        self.conns.insert(
            ep,
            Conn {
                ep: fep,
                rx,
                wire,
                up: false,
                ctl: VecDeque::new(),
                closeq: VecDeque::new(),
                sending: Vec::new(),
                hs: Vec::new(),
                stash: VecDeque::new(),
                bye: false,
            },
        );
        if wire.0 != self.rank {
            self.wires.insert(wire, ep);
        }
        if own {
            for b in 0..n {
                self.repost(ep, b)?;
            }
            let posted = n * self.conns.values().filter(|c| c.rx.is_some()).count();
            self.rx_peak = self.rx_peak.max(posted);
        }
        Ok(())
    }

    /// Forgets an endpoint: its credits and its name in headers go with it.
    fn forget(&mut self, ep: EpId) -> Option<Conn> {
        let c = self.conns.remove(&ep)?;
        self.credits.close(ep);
        if self.wires.get(&c.wire) == Some(&ep) {
            self.wires.remove(&c.wire);
        }
        Some(c)
    }

    /// Posts receive buffer `b` again: of the shared context (`ep` None) or of `ep`'s own.
    fn repost_rx(&mut self, ep: Option<EpId>, b: usize) -> Result<(), String> {
        match (ep, self.pool.as_mut()) {
            (None, Some(p)) => p.repost(b, CTX_SRX | b),
            (Some(ep), _) => self.repost(ep, b),
            (None, None) => Ok(()),
        }
    }

    fn repost(&mut self, ep: EpId, b: usize) -> Result<(), String> {
        let len = self.recv_len();
        let Some(c) = self.conns.get_mut(&ep) else {
            return Ok(());
        };
        let Some((rx_mr, rx)) = c.rx.as_mut() else {
            return Ok(());
        };
        // SAFETY: buffer b of the connection's receive area, which lives as long as the
        // endpoint; it is not touched until its completion.
        let ok = unsafe {
            c.ep.recv(
                rx.as_mut_ptr().add(b * len),
                len,
                rx_mr.desc(),
                ctx(CTX_RECV, ep, b),
            )
        }?;
        if !ok {
            return Err("fi_recv: receive queue full".into());
        }
        Ok(())
    }

    /// A key no registration of ours has (used where the provider lets us choose keys).
    fn new_key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    // -----------------------------------------------------------------------------------------
    // The manager's actions
    // -----------------------------------------------------------------------------------------

    /// Carries out the manager's actions, then lets adaptive connections whose peers have
    /// every datagram acknowledged take over.
    fn run_mgr(&mut self) {
        loop {
            while let Some(a) = self.mgr.poll_action() {
                self.do_action(a);
            }
            let drained = match &self.chan {
                Some(d) => d.drained(&self.mgr),
                None => Vec::new(),
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
                if let Some(c) = self.conns.get_mut(&ep) {
                    c.ctl.push_back(bytes);
                    self.pump(ep);
                }
            }
            Action::Close { ep, bye } => self.drop_conn(ep, bye),
            Action::Datagram { to, bytes } => self.send_control(to, &bytes),
            Action::Flush {
                peer,
                via: policy::Via::Datagram,
            } => self.queue_to_datagrams(peer),
            Action::Flush { peer, .. } => {
                if let Some(ep) = self.mgr.sendable(peer) {
                    self.pump(ep);
                }
            }
            Action::StartClose {
                peer,
                ep,
                answer,
                carry,
            } => {
                let p = self.peers.entry(peer).or_default();
                let mut q = if carry {
                    std::mem::take(&mut p.queue)
                } else {
                    VecDeque::new()
                };
                if answer {
                    q.push_back((CLOSE_ACK, Vec::new()));
                }
                q.push_back((CLOSE, Vec::new()));
                if let Some(c) = self.conns.get_mut(&ep) {
                    c.closeq = q;
                }
                self.pump(ep);
            }
            Action::CloseAck { ep } => {
                if let Some(c) = self.conns.get_mut(&ep) {
                    c.closeq.push_back((CLOSE_ACK, Vec::new()));
                }
            }
            Action::Resume { ep } => self.resume.push(ep),
            Action::Poke { ep } => self.pump(ep),
            Action::Fail { peer, failure } => {
                if failure.kind == FailKind::Aborted {
                    self.dead.push((peer, failure.why));
                }
                self.peers.entry(peer).or_default().queue.clear();
            }
        }
    }

    /// Opens an endpoint for the manager's dial and connects it to the peer's passive
    /// endpoint (fi_connect with our rank and the job secret as connection data).
    fn dial(&mut self, ep: EpId, peer: Proc, addr: Option<Vec<u8>>) {
        let res = (|| {
            let card = match addr {
                Some(a) => a,
                None => self
                    .board
                    .get(peer)
                    .map_err(|e| e.into_data().msg)?
                    .ok_or_else(|| format!("rank {peer} published no ofi address"))?,
            };
            let mut param = self.rank.to_le_bytes().to_vec();
            param.extend(self.secret().map_err(|e| e.into_data().msg)?.to_le_bytes());
            param.extend(ep.0.to_le_bytes());
            self.new_conn(None, ep, (self.rank, ep.0))?;
            self.conns[&ep].ep.connect(&card, &param)
        })();
        if let Err(why) = res {
            self.forget(ep);
            let now = self.now();
            self.mgr
                .endpoint_closed(ep, &format!("connecting to rank {peer}: {why}"), now);
        }
    }

    /// Closes and forgets an endpoint (the manager's `Close`): its handshake bytes and a
    /// BYE first, best effort. Its bounce buffers come back once the endpoint is closed.
    fn drop_conn(&mut self, ep: EpId, bye: bool) {
        if let Some(c) = self.conns.get(&ep) {
            if c.up {
                // Without credit: the pool keeps a few buffers for these (srq.rs).
                for b in &c.ctl {
                    let mut m = header(HELLO, Grant::default(), c.wire).to_vec();
                    m.extend_from_slice(b);
                    let _ = c.ep.inject(&m);
                }
                if bye {
                    let _ = c.ep.inject(&header(BYE, Grant::default(), c.wire));
                }
                c.ep.shutdown();
            }
        }
        if let Some(c) = self.forget(ep) {
            let slots = c.sending.clone();
            drop(c);
            self.tx_free.extend(slots);
        }
    }

    /// Sends what may go on `ep`: handshake bytes first; then, closing, what is left of the
    /// connection (reporting `flushed` once all of it has completed), or, when it carries the
    /// connection to its peer, the peer's queue.
    fn pump(&mut self, ep: EpId) {
        let Some(v) = self.mgr.endpoint(ep) else {
            return;
        };
        if !self.conns.get(&ep).is_some_and(|c| c.up) {
            return;
        }
        loop {
            let c = self.conns.get_mut(&ep).expect("checked");
            let Some(b) = c.ctl.front() else { break };
            let b = b.clone();
            match self.post(ep, HELLO, &[&b]) {
                Ok(true) => {
                    self.conns.get_mut(&ep).expect("checked").ctl.pop_front();
                }
                Ok(false) => return,
                Err(e) => return self.broken(ep, e),
            }
        }
        if v.closing {
            loop {
                let c = self.conns.get_mut(&ep).expect("checked");
                let Some((kind, body)) = c.closeq.pop_front() else {
                    break;
                };
                match self.post(ep, kind, &[&body]) {
                    Ok(true) => {}
                    Ok(false) => {
                        let c = self.conns.get_mut(&ep).expect("checked");
                        c.closeq.push_front((kind, body));
                        return;
                    }
                    Err(e) => return self.broken(ep, e),
                }
            }
            if self.conns[&ep].sending.is_empty() {
                let now = self.now();
                self.mgr.flushed(ep, now);
                self.run_mgr();
            }
            return;
        }
        let Some(peer) = v.peer.filter(|&p| self.mgr.sendable(p) == Some(ep)) else {
            return;
        };
        loop {
            let Some(p) = self.peers.get_mut(&peer) else {
                return;
            };
            let Some((kind, body)) = p.queue.pop_front() else {
                return;
            };
            match self.post(ep, kind, &[&body]) {
                Ok(true) => {}
                Ok(false) => {
                    self.peers
                        .get_mut(&peer)
                        .expect("above")
                        .queue
                        .push_front((kind, body));
                    return;
                }
                Err(e) => return self.broken(ep, e),
            }
        }
    }

    /// A send on `ep` failed: the manager decides what that means for its peer.
    fn broken(&mut self, ep: EpId, why: String) {
        let now = self.now();
        self.mgr.endpoint_closed(ep, &why, now);
        self.run_mgr();
    }

    /// Copies header and parts into a bounce buffer and sends it on `ep` (one credit).
    /// Ok(false): no credit, no bounce buffer or the endpoint's queue is full.
    fn post(&mut self, ep: EpId, kind: u8, parts: &[&[u8]]) -> Result<bool, String> {
        if !self.conns.get(&ep).is_some_and(|c| c.up) || !self.credits.can_send(ep) {
            return Ok(false);
        }
        if self.tx_free.is_empty() {
            self.take_completions(&mut None);
        }
        let Some(slot) = self.tx_free.pop() else {
            return Ok(false);
        };
        let size = self.cfg.buffer;
        let Some(c) = self.conns.get_mut(&ep) else {
            self.tx_free.push(slot);
            return Ok(false);
        };
        let buf = &mut self.tx[slot * size..(slot + 1) * size];
        let g = self.credits.sent(ep);
        buf[..HDR].copy_from_slice(&header(kind, g, c.wire));
        let mut n = HDR;
        for p in parts {
            buf[n..n + p.len()].copy_from_slice(p);
            n += p.len();
        }
        // SAFETY: the slot is ours until its completion returns it to tx_free (or the
        // endpoint is closed, `drop_conn`).
        let ok = unsafe {
            c.ep.send(buf.as_ptr(), n, self.tx_mr.desc(), ctx(CTX_SEND, ep, slot))
        };
        match ok {
            Ok(true) => {
                c.sending.push(slot);
                if kind == DATA {
                    self.stats.packets_sent += 1;
                    self.stats.bytes_sent += (n - HDR) as u64;
                }
                Ok(true)
            }
            Ok(false) => {
                self.credits.unsent(ep, g);
                self.tx_free.push(slot);
                Ok(false)
            }
            Err(e) => {
                self.credits.unsent(ep, g);
                self.tx_free.push(slot);
                Err(format!("send failed: {e}"))
            }
        }
    }

    /// Lends the peers' used buffers again in credit messages where due (`all`: any).
    fn return_credits(&mut self, all: bool) {
        for ep in self.credits.links() {
            let Some(c) = self.conns.get(&ep).filter(|c| c.up) else {
                continue;
            };
            let Some(g) = self.credits.credit_message(ep, all) else {
                continue;
            };
            // The message uses a buffer of the peer's reserve and returns no credit.
            match c.ep.inject(&header(CREDIT, g, c.wire)) {
                Ok(true) => {}
                // Err: the connection's end shows up on the event queue.
                Ok(false) | Err(_) => self.credits.restore(ep, g),
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Progress
    // -----------------------------------------------------------------------------------------

    /// Takes events and completions; data for `deliver` (or, without one, into `arrived`).
    fn progress(&mut self, mut deliver: Option<Deliver<'_>>) -> usize {
        self.timers();
        let mut got = 0;
        for ep in std::mem::take(&mut self.resume) {
            got += self.replay(ep, &mut deliver);
        }
        for ep in self.mgr.held().to_vec() {
            self.offer_hello(ep);
        }
        got += self.take_completions(&mut deliver);
        got += self.poll_channel(&mut deliver);
        while let Some(ev) = self.eq.read() {
            self.event(ev);
        }
        let mut eps: Vec<EpId> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.queue.is_empty())
            .filter_map(|(&r, _)| self.mgr.sendable(r))
            .collect();
        // Handshake bytes and a closing connection's last messages may have waited for a
        // credit (or for the window) too.
        eps.extend(
            self.conns
                .iter()
                .filter(|(_, c)| c.up && !(c.ctl.is_empty() && c.closeq.is_empty()))
                .map(|(&ep, _)| ep),
        );
        for ep in eps {
            self.pump(ep);
        }
        self.return_credits(false);
        self.rearm();
        got
    }

    /// Fires the manager's timers that are due.
    fn timers(&mut self) {
        let now = self.now();
        if self.timer.armed().is_some_and(|t| t <= now) {
            self.timer.drain();
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
        let next = self.mgr.poll_timeout().into_iter().chain(held).min();
        self.timer.set(next, now);
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

    fn completion(&mut self, e: &CqEntry, deliver: &mut Option<Deliver<'_>>) -> usize {
        match e.context & CTX_KIND {
            CTX_SEND => {
                self.sent(ctx_ep(e.context), e.context & CTX_BUF);
                0
            }
            CTX_READ => {
                let id = (e.context & !CTX_KIND) as u64;
                if let Some(r) = self.reads.get_mut(&id) {
                    r.0 -= 1;
                }
                0
            }
            CTX_RECV => self.received(Some(ctx_ep(e.context)), e.context & CTX_BUF, e.len, deliver),
            CTX_SRX => self.received(None, e.context & CTX_BUF, e.len, deliver),
            _ => 0,
        }
    }

    /// A send on `ep` completed: its bounce buffer is free (if the endpoint still has it:
    /// a closed endpoint's buffers came back when it closed).
    fn sent(&mut self, ep: EpId, slot: usize) {
        let Some(c) = self.conns.get_mut(&ep) else {
            return;
        };
        let Some(i) = c.sending.iter().position(|&s| s == slot) else {
            return;
        };
        c.sending.swap_remove(i);
        self.tx_free.push(slot);
        if c.sending.is_empty() && self.mgr.endpoint(ep).is_some_and(|v| v.closing) {
            self.pump(ep);
        }
    }

    /// A message arrived in receive buffer `b`: of the shared context (`own` None, its
    /// connection named in the header) or of endpoint `own`.
    fn received(
        &mut self,
        own: Option<EpId>,
        b: usize,
        len: usize,
        deliver: &mut Option<Deliver<'_>>,
    ) -> usize {
        let size = self.recv_len();
        let bytes: &[u8] = match (own, self.pool.as_mut()) {
            (None, Some(p)) => p.take(b, len),
            (Some(ep), _) => match self.conns.get(&ep).and_then(|c| c.rx.as_ref()) {
                Some((_, rx)) => &rx[b * size..b * size + len.min(size)],
                None => return 0,
            },
            (None, None) => return 0,
        };
        if bytes.len() < HDR {
            self.stats.corrupt_dropped += 1;
            if let Err(e) = self.repost_rx(own, b) {
                self.rx_failed(own, e);
            }
            return 0;
        }
        let (kind, g, wire) = parse_header(bytes);
        // The connection: the endpoint's own, or the one the header names (ours if we
        // dialed it, else an accepted one by its dialer's name).
        let ep = own.or_else(|| {
            if wire.0 == self.rank {
                Some(EpId(wire.1))
            } else {
                self.wires.get(&wire).copied()
            }
        });
        let Some(ep) = ep.filter(|ep| self.conns.contains_key(ep)) else {
            // A closed connection's last message: nothing to do but post the buffer again.
            if let Err(e) = self.repost_rx(own, b) {
                self.rx_failed(own, e);
            }
            return 0;
        };
        self.credits.received(ep, g, kind != CREDIT);
        let body = &bytes[HDR..];
        let view = self.mgr.endpoint(ep);
        let readable = view.is_some_and(|v| !v.blocked) && self.conns[&ep].stash.is_empty();
        let mut got = 0;
        let mut later = None;
        let mut stash = None;
        match (kind, view) {
            (CREDIT, _) | (_, None) => {}
            (
                DATA,
                Some(EpView {
                    phase: Phase::Up,
                    peer: Some(peer),
                    ..
                }),
            ) if readable => {
                self.stats.packets_received += 1;
                self.stats.bytes_received += body.len() as u64;
                got = 1;
                match deliver {
                    Some(d) if self.arrived.is_empty() => d(peer, body),
                    _ => self.arrived.push_back((peer, body.to_vec())),
                }
                self.peers.entry(peer).or_default().used = true;
                let now = self.now();
                self.mgr.received(peer, now);
            }
            _ if readable => later = Some(body.to_vec()),
            // Not read now (it waits for an older connection's close): kept in order.
            _ => stash = Some(body.to_vec()),
        }
        if let (Some(m), Some(c)) = (stash, self.conns.get_mut(&ep)) {
            c.stash.push_back((kind, m));
        }
        if let Err(e) = self.repost_rx(own, b) {
            self.rx_failed(own, e);
            return got;
        }
        if let Some(m) = later {
            self.message(ep, kind, m, deliver);
        }
        got
    }

    /// A receive buffer could not be posted again: its endpoint is broken, or (shared)
    /// the process's receive resources are, which no connection survives.
    fn rx_failed(&mut self, own: Option<EpId>, e: String) {
        match own {
            Some(ep) => self.broken(ep, e),
            None => {
                for ep in self.conns.keys().copied().collect::<Vec<_>>() {
                    self.broken(ep, format!("shared receive context: {e}"));
                }
            }
        }
    }

    /// A message other than a directly delivered packet: handshake, close protocol, keys.
    fn message(
        &mut self,
        ep: EpId,
        kind: u8,
        m: Vec<u8>,
        deliver: &mut Option<Deliver<'_>>,
    ) -> usize {
        let now = self.now();
        let peer = self.mgr.endpoint(ep).and_then(|v| v.peer);
        match (kind, peer) {
            (HELLO, _) => {
                if let Some(c) = self.conns.get_mut(&ep) {
                    c.hs.extend_from_slice(&m);
                }
                self.offer_hello(ep);
            }
            (DATA, Some(peer)) => {
                self.stats.packets_received += 1;
                self.stats.bytes_received += m.len() as u64;
                match deliver {
                    Some(d) if self.arrived.is_empty() => d(peer, &m),
                    _ => self.arrived.push_back((peer, m)),
                }
                self.peers.entry(peer).or_default().used = true;
                self.mgr.received(peer, now);
                return 1;
            }
            (CLOSE | CLOSE_ACK, Some(_)) => {
                self.mgr.close_frame(ep, kind == CLOSE_ACK, now);
                self.run_mgr();
            }
            (BYE, _) => {
                if let Some(c) = self.conns.get_mut(&ep) {
                    c.bye = true;
                }
                self.mgr.bye(ep);
            }
            _ => self.stats.corrupt_dropped += 1,
        }
        0
    }

    /// Handles what a connection stashed while it waited for an older one's close.
    fn replay(&mut self, ep: EpId, deliver: &mut Option<Deliver<'_>>) -> usize {
        let mut got = 0;
        while self.mgr.endpoint(ep).is_some_and(|v| !v.blocked) {
            let Some((kind, m)) = self.conns.get_mut(&ep).and_then(|c| c.stash.pop_front()) else {
                break;
            };
            got += self.message(ep, kind, m, deliver);
        }
        got
    }

    /// Offers the handshake bytes `ep` received to the manager (a held hello again later).
    fn offer_hello(&mut self, ep: EpId) {
        loop {
            let now = self.now();
            let phase = self.mgr.endpoint(ep).map(|v| v.phase);
            let Some(c) = self.conns.get_mut(&ep) else {
                return;
            };
            if phase != Some(Phase::Hello) || c.hs.len() < HELLO_LEN {
                return;
            }
            if !self.mgr.hello(ep, &c.hs[..HELLO_LEN], now) {
                self.run_mgr();
                return;
            }
            if let Some(c) = self.conns.get_mut(&ep) {
                c.hs.drain(..HELLO_LEN);
            }
            self.run_mgr();
        }
    }

    fn completion_error(&mut self, e: ffi::CqError) {
        let kind = e.context & CTX_KIND;
        let ep = ctx_ep(e.context);
        match kind {
            CTX_SEND => self.sent(ep, e.context & CTX_BUF),
            CTX_READ => {
                if let Some(r) = self.reads.get_mut(&((e.context & !CTX_KIND) as u64)) {
                    r.0 -= 1;
                    r.1 = true;
                }
                return;
            }
            CTX_SRX => {
                // Cancelled as the context closes, or a message that did not fit: the
                // buffer is ours again.
                if e.err == ffi::FI_ECANCELED || self.closing {
                    return;
                }
                self.stats.corrupt_dropped += 1;
                let b = e.context & CTX_BUF;
                if let Some(p) = self.pool.as_mut() {
                    p.take(b, 0);
                }
                if let Err(e) = self.repost_rx(None, b) {
                    self.rx_failed(None, e);
                }
                return;
            }
            _ => {}
        }
        if e.err == ffi::FI_ECANCELED || self.closing || !self.conns.contains_key(&ep) {
            return; // receives flushed as an endpoint closes
        }
        let what = if kind == CTX_SEND { "send" } else { "receive" };
        self.broken(ep, format!("{what} failed: {}", e.why));
    }

    fn event(&mut self, ev: EqEvent) {
        if self.closing {
            return;
        }
        let now = self.now();
        match ev {
            EqEvent::ConnReq { mut info, data } => {
                // A first filter (the manager's hello checks again): strangers are refused
                // before they cost an endpoint. Data: rank, secret, the dialer's endpoint id.
                let secret = self.secret().ok();
                let ok = data.len() >= 20
                    && Some(u64::from_le_bytes(data[4..12].try_into().expect("8"))) == secret;
                let ep = if ok && self.start().is_ok() {
                    self.mgr.accepted(now)
                } else {
                    None
                };
                let Some(ep) = ep else {
                    self.stats.strangers_dropped += 1;
                    self.pep.reject(&info);
                    return;
                };
                let wire = (
                    Proc::from_le_bytes(data[0..4].try_into().expect("4")),
                    u64::from_le_bytes(data[12..20].try_into().expect("8")),
                );
                let res = self
                    .new_conn(Some(&mut info), ep, wire)
                    .and_then(|()| self.conns[&ep].ep.accept());
                if let Err(e) = res {
                    self.forget(ep);
                    self.pep.reject(&info);
                    self.mgr
                        .endpoint_closed(ep, &format!("accepting: {e}"), now);
                }
                self.run_mgr();
            }
            EqEvent::Connected(c) => {
                let ep = EpId(c as u64);
                let Some(c) = self.conns.get_mut(&ep) else {
                    return;
                };
                c.up = true;
                self.credits.open(ep);
                if self.mgr.endpoint(ep).is_some_and(|v| v.outgoing) {
                    self.mgr.endpoint_connected(ep, now);
                }
                self.run_mgr();
                self.pump(ep);
            }
            EqEvent::Shutdown(c) => {
                let ep = EpId(c as u64);
                if !self.conns.contains_key(&ep) {
                    return;
                }
                // What came before the end is on the completion queue.
                self.take_completions(&mut None);
                self.mgr.endpoint_closed(ep, "closed by the peer", now);
                self.run_mgr();
                // (The manager's Close dropped it, unless it forgot it before.)
                self.forget(ep);
            }
            EqEvent::Error { ctx, why, .. } => {
                let ep = EpId(ctx as u64);
                if !self.conns.contains_key(&ep) {
                    return;
                }
                self.mgr.endpoint_closed(ep, &why, now);
                self.run_mgr();
                self.forget(ep);
            }
            EqEvent::Other => {}
        }
    }

    /// The key and remote address under which peers read `[addr, addr+len)`: a cached
    /// registration or a new one (pages whole, so neighbours hit too).
    fn key_for(&mut self, addr: u64, len: u64) -> Option<(u64, u64)> {
        let page = 4096u64;
        // Registrations of memory given back since are stale: drop them first.
        let cache = &mut self.cache;
        self.released.take(|r| match r {
            memhooks::Released::Range(a, l) => drop(cache.invalidate(a, l)),
            memhooks::Released::All => drop(cache.invalidate(0, u64::MAX)),
        });
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

    /// Whether the queues' wait fds may be slept on (fi_trywait, which libfabric requires
    /// before blocking on them: -FI_EAGAIN means poll the queues again). The tcp provider's
    /// hook also asks for POLLOUT on sockets with bytes still to send there, and refuses
    /// while a socket's user-space buffer holds unread bytes.
    /// The datagram channel's queue too (adaptive, ud), and its due timers or backlog.
    fn may_block(&mut self) -> bool {
        self.fabric.trywait(&self.eq, &self.cq)
            && self.chan.as_mut().is_none_or(|d| d.chan.may_block())
    }

    /// Blocks in the kernel until the queues may have something (at most `ms`).
    fn wait(&mut self, ms: i32) {
        if !self.may_block() {
            return;
        }
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: evs is valid for 4 events.
        unsafe { libc::epoll_wait(self.epoll, evs.as_mut_ptr(), 4, ms) };
    }

    /// Rendezvous reads (RDMA read of the sender's registration, its key and remote
    /// address from the RTS): every read is posted before waiting for any, so a window of
    /// them is answered in one run of each sender's process; then waits in the kernel for
    /// their completions. Sets each read's `done`.
    fn rdma_reads(&mut self, reads: &mut [KeyedRead]) {
        // Per read: its endpoint, id and local registration (FI_MR_LOCAL), once posted.
        let mut posted: Vec<Option<(EpId, u64, Option<Mr>)>> = Vec::with_capacity(reads.len());
        for r in reads.iter() {
            let p = self.post_read(r);
            if p.is_none() {
                self.stats.remote_read_fallbacks += 1;
            }
            posted.push(p);
        }
        let n = posted.iter().filter(|p| p.is_some()).count() as u64;
        self.ofi_stats.read_batch_peak = self.ofi_stats.read_batch_peak.max(n);
        // An endpoint may close under its read (the peer gone): then no completion comes.
        let done = |t: &Ofi, r: &KeyedRead, p: &Option<(EpId, u64, Option<Mr>)>| {
            p.as_ref().is_none_or(|(cid, rid, _)| {
                t.reads[rid].0 == 0 || !t.conns.contains_key(cid) || t.mgr.failure(r.from).is_some()
            })
        };
        loop {
            self.progress(None);
            if reads.iter().zip(&posted).all(|(r, p)| done(self, r, p)) {
                break;
            }
            self.return_credits(true);
            // A wake-up comes with the completion (`may_block`); the limit is a safety net.
            self.wait(100);
        }
        for (r, p) in reads.iter_mut().zip(posted) {
            let Some((cid, rid, local)) = p else { continue };
            let (left, failed) = self.reads.remove(&rid).expect("inserted");
            drop(local);
            r.done = !failed && left == 0 && self.conns.contains_key(&cid);
            if r.done {
                self.stats.remote_reads += 1;
                self.stats.remote_read_bytes += r.len() as u64;
            } else {
                self.stats.remote_read_fallbacks += 1;
            }
        }
    }

    /// Posts the read `r` (in chunks of the provider's largest message): its endpoint,
    /// read id and local registration, or None (no key, no connection, or the post failed
    /// before any chunk went: the protocol falls back to fragments).
    fn post_read(&mut self, r: &KeyedRead) -> Option<(EpId, u64, Option<Mr>)> {
        let k = r.key.as_bytes();
        if !self.cfg.rdma_read || k.len() != 16 {
            // No key (the sender could not register its buffer).
            return None;
        }
        let u = |i: usize| u64::from_le_bytes(k[i..i + 8].try_into().expect("8"));
        let (key, raddr) = (u(0), u(8));
        let cid = self.mgr.sendable(r.from)?;
        // Memory the provider writes into must be registered where it says so.
        let local = if self.prov.mr_mode & ffi::FI_MR_LOCAL != 0 {
            let lkey = self.new_key();
            // SAFETY: KeyedRead's contract: dst is ours for the whole batch, which waits
            // for the read (`rdma_reads`) before the registration is dropped.
            Some(
                unsafe {
                    self.domain
                        .mr_reg(r.dst() as u64, r.len(), ffi::FI_READ, lkey)
                }
                .ok()?,
            )
        } else {
            None
        };
        let desc = local.as_ref().map_or(std::ptr::null_mut(), |m| m.desc());
        let chunk = self.prov.max_msg_size.clamp(1, 1 << 30);
        let rid = self.next_id;
        self.next_id += 1;
        self.reads.insert(rid, (0, false));
        let mut off = 0;
        while off < r.len() {
            let n = chunk.min(r.len() - off);
            let Some(c) = self.conns.get(&cid) else {
                self.reads.get_mut(&rid).expect("inserted").1 = true;
                break;
            };
            // SAFETY: KeyedRead's contract: dst is valid for len bytes until the batch
            // returns, which is after this read's completion (`rdma_reads`).
            match unsafe {
                c.ep.read(
                    r.dst().add(off),
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
                // The endpoint's queue is full: let completions free it.
                Ok(false) => {
                    self.progress(None);
                }
                Err(_) => {
                    self.reads.get_mut(&rid).expect("inserted").1 = true;
                    break;
                }
            }
        }
        if off == 0 && !r.is_empty() {
            self.reads.remove(&rid);
            return None;
        }
        Some((cid, rid, local))
    }

    /// Packets accepted by `try_send` that have not left.
    fn queued(&self) -> bool {
        self.tx_free.len() < TX_SLOTS
            || self.peers.values().any(|p| !p.queue.is_empty())
            || self.conns.values().any(|c| !c.closeq.is_empty())
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
        if let Some(f) = self.mgr.failure(to) {
            return Err(failure_err(f).into());
        }
        if self
            .peers
            .get(&to)
            .is_some_and(|p| p.queue.len() >= QUEUE_MAX)
        {
            self.stats.no_room += 1;
            return Ok(false);
        }
        // The manager keeps the LRU order and asks for the connection (making room under the
        // budget first); the packets wait in the peer's queue, in order, until it is up.
        let now = self.now();
        self.start()?;
        let via = self.mgr.send(to, len, now);
        self.run_mgr();
        if let Some(f) = self.mgr.failure(to) {
            return Err(failure_err(f).into());
        }
        if via == policy::Via::Datagram && self.chan.is_some() {
            return self.send_datagram(to, parts);
        }
        let usable = self.mgr.sendable(to);
        let p = self.peers.entry(to).or_default();
        p.used = true;
        if let (Some(ep), true) = (usable, p.queue.is_empty()) {
            match self.post(ep, DATA, parts) {
                Ok(true) => {
                    self.rearm();
                    return Ok(true);
                }
                Ok(false) => {}
                Err(e) => {
                    self.broken(ep, e);
                    if let Some(f) = self.mgr.failure(to) {
                        return Err(failure_err(f).into());
                    }
                }
            }
        }
        self.peers
            .entry(to)
            .or_default()
            .queue
            .push_back((DATA, parts.concat()));
        if self.mgr.connection(to).is_none() && self.mgr.closing_of(to).is_none() {
            self.mgr.packets_waiting(to, now);
            self.run_mgr();
        }
        self.rearm();
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

    fn rndv_key(&mut self, _to: Proc, addr: u64, len: usize) -> RndvKey {
        if !self.cfg.rdma_read || len == 0 {
            return RndvKey::default();
        }
        let Some((key, raddr)) = self.key_for(addr, len as u64) else {
            return RndvKey::default();
        };
        self.ofi_stats.keys_sent += 1;
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&key.to_le_bytes());
        b[8..].copy_from_slice(&raddr.to_le_bytes());
        RndvKey::new(&b).expect("16 bytes fit")
    }

    fn read_keyed(
        &mut self,
        from: Proc,
        addr: u64,
        key: &RndvKey,
        dst: &mut [u8],
    ) -> super::TResult<bool> {
        if dst.is_empty() {
            return Ok(true);
        }
        // SAFETY: dst is borrowed mutably for this whole call, which the read ends within.
        let mut r = [unsafe { KeyedRead::new(from, addr, *key, dst.as_mut_ptr(), dst.len()) }];
        self.rdma_reads(&mut r);
        if !r[0].done {
            if let Some(f) = self.mgr.failure(from) {
                return Err(failure_err(f).into());
            }
        }
        Ok(r[0].done)
    }

    fn read_keyed_many(&mut self, reads: &mut [KeyedRead]) {
        self.rdma_reads(reads);
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.epoll)
    }

    fn arm(&mut self) -> bool {
        // Owed credits go now: the peer may be waiting for them.
        self.return_credits(true);
        let now = self.now();
        let timer_due = self.mgr.poll_timeout().is_some_and(|t| t <= now);
        self.arrived.is_empty() && self.resume.is_empty() && !timer_due && self.may_block()
    }

    fn pending(&self) -> bool {
        self.queued()
            || self
                .chan
                .as_ref()
                .is_some_and(|d| d.chan.pending() || d.backlog_bytes(None) > 0)
    }

    fn take_failures(&mut self) -> Vec<(Proc, String)> {
        if let Some(d) = self.chan.as_mut() {
            let lost = d.chan.take_failures();
            self.dead.extend(lost);
        }
        std::mem::take(&mut self.dead)
    }

    fn connect_init(&mut self) -> super::TResult<()> {
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

    fn init_connecting(&self) -> bool {
        self.mgr.init_connecting()
    }

    /// Lets every peer take the last packets (connecting first if some still wait for a
    /// connection), says BYE on every connection (so its end is a clean close) and waits for
    /// the peers' BYE, at most FERRITE_TCP_LINGER_MS in all.
    fn shutdown(&mut self) {
        let deadline = Instant::now() + std::time::Duration::from_millis(self.cfg.linger_ms);
        let left = |d: Instant| d.saturating_duration_since(Instant::now()).as_millis() as i32;
        while (self.queued() || self.mgr.closing() || self.chan_pending()) && left(deadline) > 0 {
            self.progress(None);
            if self.queued() || self.mgr.closing() || self.chan_pending() {
                self.wait(left(deadline).min(10));
            }
        }
        let up = self.mgr.up();
        for &(r, ep) in &up {
            self.peers
                .entry(r)
                .or_default()
                .queue
                .push_back((BYE, Vec::new()));
            self.pump(ep);
        }
        while left(deadline) > 0 {
            self.progress(None);
            let done = up.iter().all(|&(r, ep)| {
                self.peers.get(&r).is_none_or(|p| p.queue.is_empty())
                    && self
                        .conns
                        .get(&ep)
                        .is_none_or(|c| c.bye && c.sending.is_empty())
            });
            if done {
                break;
            }
            self.wait(left(deadline).min(10));
        }
        self.closing = true;
        for c in self.conns.values() {
            c.ep.shutdown();
        }
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
            ..self.stats
        };
        s.peers_used = self.peers.values().filter(|p| p.used).count() as u64;
        self.channel_stats(&mut s);
        s.mr_cache_hits = self.ofi_stats.cache.hits;
        s.mr_cache_misses = self.ofi_stats.cache.misses;
        s.mr_cache_invalidations = self.ofi_stats.cache.invalidations;
        s.recv_buffers = match &self.pool {
            Some(p) => [1, p.count() as u64, p.bytes() as u64, p.lowest as u64],
            None => [
                0,
                self.rx_peak as u64,
                (self.rx_peak * self.recv_len()) as u64,
                0,
            ],
        };
        s
    }
}

impl Drop for Ofi {
    fn drop(&mut self) {
        self.closing = true;
        for c in self.conns.values() {
            c.ep.shutdown();
        }
        self.conns.clear();
        drop(self.cache.drain());
        // SAFETY: the epoll fd is ours, closed once (the timer closes with its Timer).
        unsafe { libc::close(self.epoll) };
    }
}

#[cfg(test)]
mod tests;
