//! Performance variables: counters the library keeps anyway (point-to-point's message
//! counts and queues, the transports' and connection manager's statistics, the ones
//! FERRITE_REPORT prints), read under the state lock when a tool asks. Nothing here runs on
//! the communication path; the only additions there are four adds per message
//! (`p2p::protocol::MessageCounts`) and a max per unexpected message.

use crate::consts::*;
use crate::state::Ferrite;
use std::os::raw::c_int;

/// One variable's description; every one is an MPI_UNSIGNED_LONG_LONG bound to no object.
pub struct Pvar {
    pub name: &'static str,
    pub class: c_int,
    /// Its category (tool/mod.rs).
    pub area: &'static str,
    pub desc: &'static str,
    value: fn(&Sample) -> u64,
}

impl Pvar {
    /// COUNTER variables are started and stopped per handle, and a handle may be written
    /// or reset (its own value: sessions are independent). LEVEL and HIGHWATERMARK ones are
    /// the library's current value or peak since MPI_Init: continuous and read-only.
    pub fn continuous(&self) -> bool {
        self.class != MPI_T_PVAR_CLASS_COUNTER
    }
    pub fn readonly(&self) -> bool {
        self.continuous()
    }
    /// Read-and-reset happens under the tool's lock: atomic for every variable that can be
    /// reset.
    pub fn atomic(&self) -> bool {
        !self.readonly()
    }
}

/// What one look at the state gathers.
#[derive(Default)]
struct Sample {
    p2p: crate::p2p::protocol::MessageCounts,
    posted: u64,
    unexpected: u64,
    unexpected_peak: u64,
    requests: u64,
    /// Over every transport.
    net: crate::transport::TransportStats,
    /// Packets sent by the transports that reach other hosts (all but self and shm).
    offhost_sent: u64,
    open: u64,
    open_peak: u64,
    opened: u64,
    closed: u64,
    failed: u64,
    blocks: u64,
    rss_kb: u64,
}

impl Sample {
    fn take(st: &Ferrite) -> Sample {
        let stats = st.net.stats();
        let mut s = Sample {
            p2p: st.p2p.counts,
            posted: st.p2p.posted_len() as u64,
            unexpected: st.p2p.matching.unexpected_len() as u64,
            unexpected_peak: st.p2p.matching.unexpected_peak() as u64,
            requests: st.p2p.requests_len() as u64,
            blocks: stats.blocks,
            rss_kb: crate::runtime::report::peak_rss_kb(),
            ..Sample::default()
        };
        for (name, t) in &stats.transports {
            if !matches!(*name, "self" | "shm") {
                s.offhost_sent += t.packets_sent;
            }
            let n = &mut s.net;
            n.packets_sent += t.packets_sent;
            n.bytes_sent += t.bytes_sent;
            n.packets_received += t.packets_received;
            n.bytes_received += t.bytes_received;
            n.no_room += t.no_room;
            n.remote_reads += t.remote_reads;
            n.remote_read_bytes += t.remote_read_bytes;
            n.handshake_retries += t.handshake_retries;
            n.retransmits += t.retransmits;
            n.acks_sent += t.acks_sent;
            n.duplicates += t.duplicates;
            n.strangers_dropped += t.strangers_dropped;
            n.corrupt_dropped += t.corrupt_dropped;
            n.mr_cache_hits += t.mr_cache_hits;
            n.mr_cache_misses += t.mr_cache_misses;
            n.mr_cache_invalidations += t.mr_cache_invalidations;
            s.open += t.conn.open_now;
            s.open_peak += t.conn.open_peak;
            s.opened += t.conn.opened.iter().sum::<u64>();
            s.closed += t.conn.closed.iter().sum::<u64>();
            s.failed += t.conn.failed;
        }
        s
    }
}

const C: c_int = MPI_T_PVAR_CLASS_COUNTER;
const L: c_int = MPI_T_PVAR_CLASS_LEVEL;
const H: c_int = MPI_T_PVAR_CLASS_HIGHWATERMARK;

/// Every performance variable (the pvar index is the position).
pub const ALL: &[Pvar] = &[
    Pvar {
        name: "p2p_messages_sent",
        class: C,
        area: "p2p",
        desc: "Messages this process started sending (point-to-point, and collectives' and RMA's own messages), MPI_PROC_NULL excluded.",
        value: |s| s.p2p.messages_sent,
    },
    Pvar {
        name: "p2p_bytes_sent",
        class: C,
        area: "p2p",
        desc: "Payload bytes of the messages counted by p2p_messages_sent.",
        value: |s| s.p2p.bytes_sent,
    },
    Pvar {
        name: "p2p_messages_received",
        class: C,
        area: "p2p",
        desc: "Messages that arrived at this process, matched at once or queued as unexpected.",
        value: |s| s.p2p.messages_received,
    },
    Pvar {
        name: "p2p_bytes_received",
        class: C,
        area: "p2p",
        desc: "Payload bytes of the messages counted by p2p_messages_received.",
        value: |s| s.p2p.bytes_received,
    },
    Pvar {
        name: "p2p_posted_receives",
        class: L,
        area: "p2p",
        desc: "Receives posted and not yet matched (the posted queue's length).",
        value: |s| s.posted,
    },
    Pvar {
        name: "p2p_unexpected_messages",
        class: L,
        area: "p2p",
        desc: "Messages that arrived before a matching receive and wait for one (the unexpected queue's length).",
        value: |s| s.unexpected,
    },
    Pvar {
        name: "p2p_unexpected_messages_peak",
        class: H,
        area: "p2p",
        desc: "The longest the unexpected queue has been since MPI_Init.",
        value: |s| s.unexpected_peak,
    },
    Pvar {
        name: "p2p_active_requests",
        class: L,
        area: "p2p",
        desc: "Requests allocated (user and internal, persistent included) and not yet freed.",
        value: |s| s.requests,
    },
    Pvar {
        name: "net_packets_sent",
        class: C,
        area: "transport",
        desc: "Packets handed to the transports (protocol messages such as acknowledgements included), all transports.",
        value: |s| s.net.packets_sent,
    },
    Pvar {
        name: "net_bytes_sent",
        class: C,
        area: "transport",
        desc: "Bytes of the packets counted by net_packets_sent, headers included.",
        value: |s| s.net.bytes_sent,
    },
    Pvar {
        name: "net_packets_received",
        class: C,
        area: "transport",
        desc: "Packets the transports delivered, all transports.",
        value: |s| s.net.packets_received,
    },
    Pvar {
        name: "net_bytes_received",
        class: C,
        area: "transport",
        desc: "Bytes of the packets counted by net_packets_received, headers included.",
        value: |s| s.net.bytes_received,
    },
    Pvar {
        name: "net_offhost_packets_sent",
        class: C,
        area: "transport",
        desc: "Packets handed to the transports that can reach other hosts (tcp, udp, ofi: all but self and shm); on one host with shm, the traffic that did not use it.",
        value: |s| s.offhost_sent,
    },
    Pvar {
        name: "net_no_room",
        class: C,
        area: "transport",
        desc: "Sends a transport could not take at once (receiver out of credits or queue full).",
        value: |s| s.net.no_room,
    },
    Pvar {
        name: "net_remote_reads",
        class: C,
        area: "transport",
        desc: "Large messages read straight from the sender's memory (shm cross-memory attach, ofi RDMA read).",
        value: |s| s.net.remote_reads,
    },
    Pvar {
        name: "net_remote_read_bytes",
        class: C,
        area: "transport",
        desc: "Bytes read by the reads counted by net_remote_reads.",
        value: |s| s.net.remote_read_bytes,
    },
    Pvar {
        name: "net_dropped_strangers",
        class: C,
        area: "transport",
        desc: "Datagrams, connections and doorbells from outside the job, dropped.",
        value: |s| s.net.strangers_dropped,
    },
    Pvar {
        name: "net_dropped_malformed",
        class: C,
        area: "transport",
        desc: "Cells or frames from inside the job that failed validation, dropped.",
        value: |s| s.net.corrupt_dropped,
    },
    Pvar {
        name: "progress_blocks",
        class: C,
        area: "progress",
        desc: "Times a waiting call slept in the kernel (epoll) instead of spinning.",
        value: |s| s.blocks,
    },
    Pvar {
        name: "conn_open",
        class: L,
        area: "conn",
        desc: "Connections open now (connection-oriented transports: tcp, ofi).",
        value: |s| s.open,
    },
    Pvar {
        name: "conn_open_peak",
        class: H,
        area: "conn",
        desc: "The most connections open at once since MPI_Init.",
        value: |s| s.open_peak,
    },
    Pvar {
        name: "conn_opened",
        class: C,
        area: "conn",
        desc: "Connections that came up (opened by this process or accepted from a peer).",
        value: |s| s.opened,
    },
    Pvar {
        name: "conn_closed",
        class: C,
        area: "conn",
        desc: "Connections closed (evicted, idle, or closed by the peer).",
        value: |s| s.closed,
    },
    Pvar {
        name: "conn_failed",
        class: C,
        area: "conn",
        desc: "Connections that could not be set up.",
        value: |s| s.failed,
    },
    Pvar {
        name: "conn_handshake_retries",
        class: C,
        area: "conn",
        desc: "Connection attempts made again after a failure or a refusal.",
        value: |s| s.net.handshake_retries,
    },
    Pvar {
        name: "udp_retransmits",
        class: C,
        area: "udp",
        desc: "Datagrams sent again after a retransmission timeout.",
        value: |s| s.net.retransmits,
    },
    Pvar {
        name: "udp_acks_sent",
        class: C,
        area: "udp",
        desc: "Standalone acknowledgements sent (most ride on data).",
        value: |s| s.net.acks_sent,
    },
    Pvar {
        name: "udp_duplicates",
        class: C,
        area: "udp",
        desc: "Datagrams received more than once and dropped.",
        value: |s| s.net.duplicates,
    },
    Pvar {
        name: "ofi_mr_cache_hits",
        class: C,
        area: "ofi",
        desc: "Rendezvous buffers found already registered in the registration cache.",
        value: |s| s.net.mr_cache_hits,
    },
    Pvar {
        name: "ofi_mr_cache_misses",
        class: C,
        area: "ofi",
        desc: "Rendezvous buffers registered anew.",
        value: |s| s.net.mr_cache_misses,
    },
    Pvar {
        name: "ofi_mr_cache_invalidations",
        class: C,
        area: "ofi",
        desc: "Registrations dropped because the program gave their memory back (munmap, mremap, madvise, brk).",
        value: |s| s.net.mr_cache_invalidations,
    },
    Pvar {
        name: "peak_rss_kb",
        class: H,
        area: "runtime",
        desc: "The process's peak resident set size in KiB (VmHWM).",
        value: |s| s.rss_kb,
    },
];

/// Every variable's value now, by index; None when MPI is not running (before MPI_Init or
/// after MPI_Finalize). Takes the state lock: call it holding no other lock.
pub fn sample() -> Option<Vec<u64>> {
    crate::state::try_with(|st| {
        let s = Sample::take(st);
        ALL.iter().map(|p| (p.value)(&s)).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_classes_consistent() {
        for (i, p) in ALL.iter().enumerate() {
            assert!(ALL[..i].iter().all(|q| q.name != p.name), "{}", p.name);
            assert!(!p.desc.is_empty());
            assert_eq!(p.readonly(), p.class != C);
        }
        let s = Sample {
            open_peak: 7,
            ..Sample::default()
        };
        let i = ALL.iter().position(|p| p.name == "conn_open_peak").unwrap();
        assert_eq!((ALL[i].value)(&s), 7);
    }
}
