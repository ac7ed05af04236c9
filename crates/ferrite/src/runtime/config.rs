//! The configuration registry: every knob Ferrite reads from the environment, in one list.
//! Each has a name `FERRITE_<AREA>_<NAME>`, a default and one line of documentation;
//! `ferrite-info` prints them all.

use crate::lock_order;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

pub struct Knob {
    pub name: &'static str,
    pub default: &'static str,
    pub doc: &'static str,
}

pub const KNOBS: &[Knob] = &[
    Knob {
        name: "FERRITE_TRANSPORTS",
        default: "self,shm,tcp",
        doc: "Comma list of transports Ferrite may use; shm serves peers on the same host, tcp those on other hosts (and all, without shm).",
    },
    Knob {
        name: "FERRITE_PROGRESS_SPIN",
        default: "2000",
        doc: "Most idle progress passes to spin before yielding, then blocking in the kernel (the limit adapts below it).",
    },
    Knob {
        name: "FERRITE_PROGRESS_ADAPT",
        default: "auto",
        doc: "Shorten the spin when waits end only after yielding (ranks sharing a CPU): yes, no, or auto (no when bound to one CPU with no more ranks on the node than CPUs).",
    },
    Knob {
        name: "FERRITE_ASYNC_PROGRESS",
        default: "0",
        doc: "1: a progress thread serves RMA requests and advances messages while the application computes outside MPI (passive targets that never call MPI); the library then locks as under MPI_THREAD_MULTIPLE.",
    },
    Knob {
        name: "FERRITE_SHM_CELL_SIZE",
        default: "16448",
        doc: "Bytes per shared-memory receive cell (rounded up to 64; a packet gets 16 less): the default sends 16 KiB messages eagerly.",
    },
    Knob {
        name: "FERRITE_SHM_CELLS_K",
        default: "16",
        doc: "Receive cells per process = K * log2(ranks) + B: the K.",
    },
    Knob {
        name: "FERRITE_SHM_CELLS_B",
        default: "64",
        doc: "Receive cells per process = K * log2(ranks) + B: the B.",
    },
    Knob {
        name: "FERRITE_SHM_CMA",
        default: "1",
        doc:
            "Use single-copy reads (process_vm_readv) for large messages when permitted; 0: never.",
    },
    Knob {
        name: "FERRITE_SHM_FAST_AFTER",
        default: "16",
        doc: "Packets to one peer through its shared queue before that pair switches to a single-producer ring of its own; 0: never.",
    },
    Knob {
        name: "FERRITE_SHM_FAST_SLOTS",
        default: "128",
        doc: "Slots (256 bytes each) per fast ring: a power of two in 2..=65536.",
    },
    Knob {
        name: "FERRITE_SHM_FAST_RECORD",
        default: "760",
        doc: "Largest packet (bytes) a fast ring carries in its own consecutive slots (at most an eighth of the ring); larger ones, and records that would fill more than half the ring, go in a queue cell. 248: one slot (docs/performance.md).",
    },
    Knob {
        name: "FERRITE_SHM_MEMBARRIER",
        default: "1",
        doc: "1: a rank about to sleep fences every sender with membarrier(2), so a send needs no full fence; 0: a full fence on every send (also where the kernel has no membarrier).",
    },
    Knob {
        name: "FERRITE_TCP_IF",
        default: "",
        doc: "Interface name or IP address tcp listens on; empty: loopback, or in a job across hosts this host's non-loopback address.",
    },
    Knob {
        name: "FERRITE_TCP_MAX_PACKET",
        default: "1048576",
        doc: "Largest tcp packet in bytes (rendezvous fragment); same on every rank.",
    },
    Knob {
        name: "FERRITE_TCP_EAGER_PACKET",
        default: "65536",
        doc: "Largest tcp packet carrying a whole message eagerly (at most FERRITE_TCP_MAX_PACKET).",
    },
    Knob {
        name: "FERRITE_TCP_SOCKBUF",
        default: "0",
        doc: "SO_SNDBUF and SO_RCVBUF asked for tcp sockets; 0: the kernel's autotuning.",
    },
    Knob {
        name: "FERRITE_TCP_SENDQ",
        default: "4194304",
        doc: "Unwritten bytes queued per tcp peer before sends wait for the socket to drain.",
    },
    Knob {
        name: "FERRITE_TCP_LINGER_MS",
        default: "5000",
        doc: "At MPI_Finalize, how long tcp waits for peers to take the last bytes and close.",
    },
    Knob {
        name: "FERRITE_TCP_CONNECT_RETRIES",
        default: "10",
        doc: "Connection attempts (with backoff) to a tcp peer before sends to it fail.",
    },
    Knob {
        name: "FERRITE_UDP_DATAGRAM",
        default: "0",
        doc: "Largest udp datagram in bytes (at most 65507); 0: 65507 on one host, 1472 (Ethernet MTU) across hosts.",
    },
    Knob {
        name: "FERRITE_UDP_WINDOW",
        default: "0",
        doc: "Unacknowledged udp datagrams per peer (same on every rank); 0: as many as fill 4 MiB, at most 256.",
    },
    Knob {
        name: "FERRITE_UDP_MAX_PACKET",
        default: "262144",
        doc: "Largest udp transport packet in bytes (eager limit, rendezvous fragment), cut into datagrams.",
    },
    Knob {
        name: "FERRITE_UDP_RCVBUF",
        default: "8388608",
        doc: "Socket receive/send buffer asked for the udp socket (forced when permitted).",
    },
    Knob {
        name: "FERRITE_UDP_LINGER_MS",
        default: "5000",
        doc: "At MPI_Finalize, how long udp waits for peers to acknowledge the last datagrams.",
    },
    Knob {
        name: "FERRITE_UDP_RETRIES",
        default: "60",
        doc: "Retransmission timeouts in a row with nothing acknowledged (each resends the oldest datagram; backoff up to 1 s) before a datagram peer counts as failed; a peer busy outside MPI that long is given up.",
    },
    Knob {
        name: "FERRITE_OFI_PROVIDER",
        default: "tcp",
        doc: "libfabric provider the ofi transport uses (tcp, verbs, efa, ...; see fi_info -l); its connection-oriented (FI_EP_MSG) endpoints carry the traffic.",
    },
    Knob {
        name: "FERRITE_OFI_DGRAM_PROVIDER",
        default: "",
        doc: "libfabric provider of the ofi transport's datagram channel (FI_EP_DGRAM; FERRITE_CONN=adaptive, FERRITE_CONN_SETUP=ud); empty: FERRITE_OFI_PROVIDER's if it has FI_EP_DGRAM endpoints, else udp.",
    },
    Knob {
        name: "FERRITE_OFI_IFACE",
        default: "",
        doc: "libfabric domain (interface, e.g. lo, eth0, mlx5_0) ofi uses; empty: the provider's first.",
    },
    Knob {
        name: "FERRITE_OFI_BUFFER",
        default: "16448",
        doc: "Bytes per ofi bounce buffer (the largest packet): the default sends 16 KiB messages eagerly; same on every rank.",
    },
    Knob {
        name: "FERRITE_OFI_CREDITS",
        default: "16",
        doc: "Most packets in flight per ofi connection without a shared receive context (twice as many receive buffers are posted per connection); with one, busy connections are lent up to the pool's lendable part; same on every rank.",
    },
    Knob {
        name: "FERRITE_OFI_SRQ",
        default: "1",
        doc: "ofi: one shared receive context per process (fi_srx_context) where the provider has them; 0: receive buffers per connection.",
    },
    Knob {
        name: "FERRITE_OFI_SRQ_K",
        default: "16",
        doc: "ofi shared receive buffers per process = K * log2(ranks) + B: the K; same on every rank.",
    },
    Knob {
        name: "FERRITE_OFI_SRQ_B",
        default: "64",
        doc: "ofi shared receive buffers per process = K * log2(ranks) + B: the B; same on every rank.",
    },
    Knob {
        name: "FERRITE_OFI_RDMA_READ",
        default: "1",
        doc: "ofi: large messages by RDMA read (fi_read) of the sender's buffer; 0: copied through packets.",
    },
    Knob {
        name: "FERRITE_OFI_MR_CACHE_ENTRIES",
        default: "512",
        doc: "ofi registration cache: most registrations kept (least recently used go first).",
    },
    Knob {
        name: "FERRITE_OFI_MR_CACHE_MB",
        default: "1024",
        doc: "ofi registration cache: most MiB registered at once.",
    },
    Knob {
        name: "FERRITE_UDP_DROP_PERMILLE",
        default: "0",
        doc: "For tests only: drop this many of every 1000 udp datagrams sent (retransmission then recovers).",
    },
    Knob {
        name: "FERRITE_CONN",
        default: "ondemand",
        doc: "tcp connection policy: static (all at MPI_Init), ondemand, partial (±2^k at init), adaptive (udp datagrams first).",
    },
    Knob {
        name: "FERRITE_CONN_MAX",
        default: "0",
        doc: "Most tcp connections open at once (LRU eviction beyond); 0: half the open-file limit.",
    },
    Knob {
        name: "FERRITE_CONN_SETUP",
        default: "cm",
        doc: "tcp connection set-up: cm (connect/accept with a hello), ud (attempt settled over udp first).",
    },
    Knob {
        name: "FERRITE_CONN_THRESHOLD",
        default: "16",
        doc: "FERRITE_CONN=adaptive: messages to a peer over datagrams before its connection.",
    },
    Knob {
        name: "FERRITE_CONN_IDLE_MS",
        default: "30000",
        doc: "FERRITE_CONN=adaptive: close a connection unused this many ms; 0: never.",
    },
    Knob {
        name: "FERRITE_CONN_RESIDENCY_MS",
        default: "100",
        doc: "FERRITE_CONN=adaptive under FERRITE_CONN_MAX: a connection used this recently is not evicted for another peer, which stays on datagrams; 0: plain LRU.",
    },
    Knob {
        name: "FERRITE_REPORT",
        default: "0",
        doc: "At MPI_Finalize rank 0 prints connection/traffic/RSS counters (1) or writes JSON (a path).",
    },
    Knob {
        name: "FERRITE_EAGER_LIMIT",
        default: "0",
        doc: "Largest message sent eagerly; 0 means what fits in one packet of the transport.",
    },
    Knob {
        name: "FERRITE_COLL_BARRIER_ALGO",
        default: "auto",
        doc: "Barrier algorithm: auto, dissemination, shm, shm_flat, shm_release, shm_last or hier (shm picks its form by ranks per CPU; the forms are fixed per communicator by its rank 0 when its shared segment is made).",
    },
    Knob {
        name: "FERRITE_COLL_BCAST_ALGO",
        default: "auto",
        doc: "Bcast algorithm: auto, binomial, scatter_allgather, shm or hier.",
    },
    Knob {
        name: "FERRITE_COLL_BCAST_LARGE",
        default: "12288",
        doc: "Bcast: bytes from which auto picks scatter_allgather (more than 2 ranks).",
    },
    Knob {
        name: "FERRITE_COLL_ALLREDUCE_ALGO",
        default: "auto",
        doc: "Allreduce (and Reduce_scatter) algorithm: auto, recursive_doubling, rabenseifner, shm or hier (shm, hier: Allreduce only).",
    },
    Knob {
        name: "FERRITE_COLL_ALLREDUCE_LARGE",
        default: "8192",
        doc: "Allreduce: bytes from which auto picks rabenseifner (if count >= ranks).",
    },
    Knob {
        name: "FERRITE_COLL_REDUCE_ALGO",
        default: "auto",
        doc: "Reduce algorithm: auto, binomial, rabenseifner, shm or hier.",
    },
    Knob {
        name: "FERRITE_COLL_REDUCE_LARGE",
        default: "65536",
        doc:
            "Reduce: bytes from which auto picks rabenseifner (more than 2 ranks, count >= ranks).",
    },
    Knob {
        name: "FERRITE_COLL_GATHER_ALGO",
        default: "auto",
        doc: "Gather algorithm: auto, binomial or shm (Gatherv is always linear).",
    },
    Knob {
        name: "FERRITE_COLL_SCATTER_ALGO",
        default: "auto",
        doc: "Scatter algorithm: auto, binomial or shm (Scatterv is always linear).",
    },
    Knob {
        name: "FERRITE_COLL_ALLGATHER_ALGO",
        default: "auto",
        doc: "Allgather algorithm: auto, bruck, ring, shm or hier (Allgatherv is always ring).",
    },
    Knob {
        name: "FERRITE_COLL_ALLGATHER_LARGE",
        default: "81920",
        doc: "Allgather: total received bytes from which auto picks ring.",
    },
    Knob {
        name: "FERRITE_COLL_SHM_MAX",
        default: "4096",
        doc: "Blocking Barrier, Bcast, Reduce, Allreduce, Allgather, Gather, Scatter, Alltoall of at most this many bytes per contribution (per block for the last four) run in shared memory on one-host communicators (auto or the algorithm shm); also the segment's slot size.",
    },
    Knob {
        name: "FERRITE_COLL_HIER_MAX",
        default: "65536",
        doc: "Bytes (Allgather: in all) up to which auto runs blocking collectives in two levels (per host, then among one leader per host) on communicators spanning hosts: Reduce, Allreduce, Allgather at 3+ ranks per host on average, Bcast from FERRITE_COLL_BCAST_LARGE; 0 turns auto off (the algorithm hier still forces it).",
    },
    Knob {
        name: "FERRITE_COLL_SHM_YIELD_US",
        default: "-1",
        doc: "Shared-memory collectives: microseconds a waiting rank yields the CPU before sleeping (-1: 200 with a CPU per rank, 30 with two ranks per CPU, 0 with more).",
    },
    Knob {
        name: "FERRITE_COLL_ALLTOALL_ALGO",
        default: "auto",
        doc: "Alltoall algorithm: auto, bruck, pairwise or shm.",
    },
    Knob {
        name: "FERRITE_COLL_ALLTOALL_LARGE",
        default: "256",
        doc: "Alltoall: bytes per block from which auto picks pairwise.",
    },
    Knob {
        name: "FERRITE_COLL_ALLTOALLV_ALGO",
        default: "auto",
        doc: "Alltoallv/Alltoallw algorithm: auto or pairwise.",
    },
    Knob {
        name: "FERRITE_RMA_DIRECT",
        default: "1",
        doc: "RMA between ranks of one host by direct access (window memory mapped by every rank of the host, cross-memory attach for MPI_Win_create memory); 0 sends every operation as a message.",
    },
];

pub fn knob(name: &str) -> &'static Knob {
    KNOBS
        .iter()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("configuration knob {name} is not registered in KNOBS"))
}

/// Values set through the tool interface (MPI_T_cvar_write, tool/cvars.rs): they take the
/// place of the environment's for every later read. A leaf lock (lock_order::CONFIG).
static OVERRIDES: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());
/// Whether OVERRIDES holds anything (reads skip the lock while it is empty).
static OVERRIDDEN: AtomicBool = AtomicBool::new(false);

/// Makes `value` the value of knob `name` for every later read (`get`, `text`).
pub fn set(name: &str, value: &str) {
    let k = knob(name);
    let mut o = lock_order::lock(&OVERRIDES, lock_order::CONFIG);
    match o.iter_mut().find(|(n, _)| *n == k.name) {
        Some((_, v)) => *v = value.to_string(),
        None => o.push((k.name, value.to_string())),
    }
    OVERRIDDEN.store(true, Ordering::Release);
}

/// The text of knob `name` in effect: the value set through the tool interface, else the
/// environment's, else None (the default applies).
pub fn text(name: &str) -> Option<String> {
    if OVERRIDDEN.load(Ordering::Acquire) {
        let o = lock_order::lock(&OVERRIDES, lock_order::CONFIG);
        if let Some((_, v)) = o.iter().find(|(n, _)| *n == name) {
            return Some(v.clone());
        }
    }
    std::env::var(name).ok()
}

/// The value of a registered knob: the one set through the tool interface, else the
/// environment's if set and valid, else the default. An invalid value is reported on stderr
/// and the default is used.
pub fn get<T: FromStr>(name: &str) -> T {
    let k = knob(name);
    if let Some(v) = text(name) {
        match v.trim().parse() {
            Ok(x) => return x,
            Err(_) => eprintln!(
                "ferrite: ignoring {name}={v:?} (not a valid value); using {}",
                k.default
            ),
        }
    }
    k.default
        .parse()
        .unwrap_or_else(|_| panic!("default of {name} does not parse"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_parses_and_names_are_unique() {
        for (i, k) in KNOBS.iter().enumerate() {
            assert!(k.name.starts_with("FERRITE_"), "{}", k.name);
            assert!(!k.doc.is_empty());
            assert!(
                KNOBS[..i].iter().all(|o| o.name != k.name),
                "duplicate {}",
                k.name
            );
        }
        let spin: u32 = get("FERRITE_PROGRESS_SPIN");
        assert!(spin > 0);
    }
}
