//! FERRITE_REPORT: at MPI_Finalize every rank takes a snapshot of its counters (connections
//! by cause, handshake retries, packets and bytes per transport, peak RSS) and rank 0 gathers
//! them over MPI_COMM_WORLD and prints them (`1`) or writes them as JSON (any other value:
//! a path). Every rank takes its snapshot after MPI_Finalize's barrier and only then sends
//! it, so the report's own messages (and the connections they open) are in no snapshot.

use crate::conn::policy::Counters;
use crate::consts::{MPI_COMM_WORLD, MPI_ERR_OTHER};
use crate::error::MpiResult;
use crate::mpi_err;
use crate::runtime::{config, pmi};
use crate::state::{Ferrite, Held};
use crate::transport::{TransportStats, KNOWN_TRANSPORTS};
use std::fmt::Write as _;

/// Tag of the gather on MPI_COMM_WORLD's collective context (communicator creation uses 1,
/// collectives 0x2000_0000 and up).
const TAG_REPORT: i32 = 2;

/// Names of the opening causes, in `Counters::opened` order (`accepted`: the peer opened it).
const OPEN_CAUSES: [&str; 4] = ["init", "first_message", "threshold", "accepted"];
/// Names of the closing causes, in `Counters::closed` order.
const CLOSE_CAUSES: [&str; 3] = ["eviction", "idle", "peer"];
/// Names of the datagram counters (udp), in `Record::datagrams` order.
const DATAGRAM_COUNTS: [&str; 4] = ["retransmits", "acks", "duplicates", "timeouts"];

/// Input the transports dropped, by reason, in `Record::dropped` order: datagrams,
/// connections and doorbells from outside the job (no job secret, unknown sender), and
/// malformed input from inside it (cells or frames that failed validation).
const DROP_REASONS: [&str; 2] = ["strangers", "malformed"];
/// Names of the registration cache counters (ofi), in `Record::mr_cache` order.
const MR_CACHE_COUNTS: [&str; 3] = ["hits", "misses", "invalidated"];
/// Names of the receive buffer figures (ofi), in `Record::recv_buffers` order.
const RECV_BUFFERS: [&str; 4] = ["shared", "buffers", "bytes", "lowest_free"];

/// One rank's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub rank: u64,
    pub open: u64,
    pub peak: u64,
    pub opened: [u64; 4],
    pub closed: [u64; 3],
    pub failed: u64,
    /// The connection budget (FERRITE_CONN_MAX; 0: no connection-oriented transport).
    pub max: u64,
    /// Connections peers opened that took us over the budget.
    pub over_budget: u64,
    pub handshake_retries: u64,
    pub race_losers: u64,
    /// Connections that carried at least one packet.
    pub used: u64,
    /// Per transport (index into KNOWN_TRANSPORTS): packets and bytes sent, received.
    pub traffic: Vec<(u64, [u64; 4])>,
    /// VmHWM in kB (0 if unknown).
    pub peak_rss_kb: u64,
    /// Datagram channels (udp; tcp and ofi under adaptive or the ud set-up): retransmissions,
    /// standalone acknowledgements, duplicates, retransmission timeouts.
    pub datagrams: [u64; 4],
    /// Input dropped, by reason (DROP_REASONS).
    pub dropped: [u64; 2],
    /// Rendezvous registrations found in the cache, made, and dropped because their memory
    /// was given back (MR_CACHE_COUNTS).
    pub mr_cache: [u64; 3],
    /// ofi's receive buffers (RECV_BUFFERS): shared or per connection, most posted, bytes,
    /// fewest left posted.
    pub recv_buffers: [u64; 4],
}

impl Record {
    /// This process's counters now.
    pub fn snapshot(st: &Ferrite) -> Record {
        let stats = st.net.stats();
        let mut r = Record {
            rank: st.world_rank as u64,
            peak_rss_kb: peak_rss_kb(),
            ..Record::default()
        };
        for (name, t) in &stats.transports {
            r.add(t);
            if let Some(i) = KNOWN_TRANSPORTS.iter().position(|k| k == name) {
                let v = [
                    t.packets_sent,
                    t.bytes_sent,
                    t.packets_received,
                    t.bytes_received,
                ];
                r.traffic.push((i as u64, v));
            }
        }
        r
    }

    fn add(&mut self, t: &TransportStats) {
        let c: &Counters = &t.conn;
        self.open += c.open_now;
        self.peak += c.open_peak;
        for i in 0..4 {
            self.opened[i] += c.opened[i];
        }
        for i in 0..3 {
            self.closed[i] += c.closed[i];
        }
        self.failed += c.failed;
        self.max += c.max_open;
        self.over_budget += c.over_budget;
        self.handshake_retries += t.handshake_retries;
        self.race_losers += t.race_losers;
        self.used += t.peers_used;
        self.datagrams[0] += t.retransmits;
        self.datagrams[1] += t.acks_sent;
        self.datagrams[2] += t.duplicates;
        self.datagrams[3] += t.retransmit_timeouts;
        self.dropped[0] += t.strangers_dropped;
        self.dropped[1] += t.corrupt_dropped;
        self.mr_cache[0] += t.mr_cache_hits;
        self.mr_cache[1] += t.mr_cache_misses;
        self.mr_cache[2] += t.mr_cache_invalidations;
        if t.recv_buffers[1] > 0 {
            self.recv_buffers = t.recv_buffers;
        }
    }

    pub fn opened_total(&self) -> u64 {
        self.opened.iter().sum()
    }

    /// Little-endian u64s: the fixed fields, then (transport, 4 counters) per transport.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![self.rank, self.open, self.peak];
        v.extend(self.opened);
        v.extend(self.closed);
        v.extend([
            self.failed,
            self.max,
            self.over_budget,
            self.handshake_retries,
            self.race_losers,
            self.used,
            self.peak_rss_kb,
        ]);
        v.extend(self.datagrams);
        v.extend(self.dropped);
        v.extend(self.mr_cache);
        v.extend(self.recv_buffers);
        v.push(self.traffic.len() as u64);
        for (t, c) in &self.traffic {
            v.push(*t);
            v.extend(c);
        }
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    pub fn decode(b: &[u8]) -> Option<Record> {
        if !b.len().is_multiple_of(8) {
            return None;
        }
        let v: Vec<u64> = b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let mut it = v.into_iter();
        let mut next = || it.next();
        let mut r = Record {
            rank: next()?,
            open: next()?,
            peak: next()?,
            ..Record::default()
        };
        for x in &mut r.opened {
            *x = next()?;
        }
        for x in &mut r.closed {
            *x = next()?;
        }
        r.failed = next()?;
        r.max = next()?;
        r.over_budget = next()?;
        r.handshake_retries = next()?;
        r.race_losers = next()?;
        r.used = next()?;
        r.peak_rss_kb = next()?;
        for x in &mut r.datagrams {
            *x = next()?;
        }
        for x in &mut r.dropped {
            *x = next()?;
        }
        for x in &mut r.mr_cache {
            *x = next()?;
        }
        for x in &mut r.recv_buffers {
            *x = next()?;
        }
        let n = next()?;
        for _ in 0..n.min(KNOWN_TRANSPORTS.len() as u64) {
            let t = next()?;
            if t as usize >= KNOWN_TRANSPORTS.len() {
                return None;
            }
            r.traffic.push((t, [next()?, next()?, next()?, next()?]));
        }
        next().is_none().then_some(r)
    }

    fn text(&self) -> String {
        let max = match self.max {
            0 => "unlimited".to_string(),
            m => format!("{m}, over it {}", self.over_budget),
        };
        let mut s = format!(
            "ferrite report: rank {}: connections open {} (peak {}, max {max}); opened",
            self.rank, self.open, self.peak
        );
        for (n, v) in OPEN_CAUSES.iter().zip(self.opened) {
            let _ = write!(s, " {n} {v}");
        }
        s.push_str("; closed");
        for (n, v) in CLOSE_CAUSES.iter().zip(self.closed) {
            let _ = write!(s, " {n} {v}");
        }
        let _ = write!(
            s,
            "; used {}; failed {}; handshake retries {}",
            self.used, self.failed, self.handshake_retries
        );
        for (t, [ps, bs, pr, br]) in &self.traffic {
            let _ = write!(
                s,
                "; {}: sent {ps} msgs {bs} B, received {pr} msgs {br} B",
                KNOWN_TRANSPORTS[*t as usize]
            );
        }
        write_datagrams_text(&mut s, self.datagrams);
        write_dropped_text(&mut s, self.dropped);
        write_mr_cache_text(&mut s, self.mr_cache);
        let [shared, n, bytes, low] = self.recv_buffers;
        if n > 0 {
            let how = if shared == 1 {
                format!("shared (srx), fewest free {low}")
            } else {
                "per connection".to_string()
            };
            let _ = write!(s, "; ofi receive buffers {n} {how}, {bytes} B");
        }
        let _ = write!(s, "; peak RSS {} kB", self.peak_rss_kb);
        s
    }

    fn json(&self) -> String {
        let mut s = format!(
            "{{\"rank\":{},\"connections\":{{\"open\":{},\"peak\":{},\"max\":{}}},\"over_budget\":{},\"opened\":{{",
            self.rank,
            self.open,
            self.peak,
            match self.max {
                0 => "null".to_string(),
                m => m.to_string(),
            },
            self.over_budget
        );
        join_obj(&mut s, OPEN_CAUSES.iter().copied().zip(self.opened));
        s.push_str("},\"closed\":{");
        join_obj(&mut s, CLOSE_CAUSES.iter().copied().zip(self.closed));
        let _ = write!(
            s,
            "}},\"used\":{},\"failed\":{},\"handshake_retries\":{},\"race_losers\":{},\"transports\":{{",
            self.used, self.failed, self.handshake_retries, self.race_losers
        );
        write_traffic(&mut s, &self.traffic);
        s.push_str("},\"datagrams\":{");
        join_obj(&mut s, DATAGRAM_COUNTS.iter().copied().zip(self.datagrams));
        s.push_str("},\"dropped\":{");
        join_obj(&mut s, DROP_REASONS.iter().copied().zip(self.dropped));
        s.push_str("},\"mr_cache\":{");
        join_obj(&mut s, MR_CACHE_COUNTS.iter().copied().zip(self.mr_cache));
        s.push_str("},\"recv_buffers\":{");
        join_obj(&mut s, RECV_BUFFERS.iter().copied().zip(self.recv_buffers));
        let _ = write!(s, "}},\"peak_rss_kb\":{}}}", self.peak_rss_kb);
        s
    }
}

/// `; datagrams retransmits R acks A duplicates D timeouts T`, when a datagram channel ran.
fn write_datagrams_text(s: &mut String, d: [u64; 4]) {
    if d != [0; 4] {
        s.push_str("; datagrams");
        for (n, v) in DATAGRAM_COUNTS.iter().zip(d) {
            let _ = write!(s, " {n} {v}");
        }
    }
}

/// `; registration cache hits H misses M invalidated I`, when rendezvous registrations were made (ofi).
fn write_mr_cache_text(s: &mut String, d: [u64; 3]) {
    if d != [0; 3] {
        s.push_str("; registration cache");
        for (n, v) in MR_CACHE_COUNTS.iter().zip(d) {
            let _ = write!(s, " {n} {v}");
        }
    }
}

/// `; dropped strangers S malformed M`, when anything was dropped.
fn write_dropped_text(s: &mut String, d: [u64; 2]) {
    if d != [0; 2] {
        s.push_str("; dropped");
        for (n, v) in DROP_REASONS.iter().zip(d) {
            let _ = write!(s, " {n} {v}");
        }
    }
}

fn join_obj<'a>(s: &mut String, kv: impl Iterator<Item = (&'a str, u64)>) {
    for (i, (k, v)) in kv.enumerate() {
        let _ = write!(s, "{}\"{k}\":{v}", if i > 0 { "," } else { "" });
    }
}

/// `"<transport>":{msgs_sent, bytes_sent, msgs_received, bytes_received}` entries, comma
/// separated, for a rank's record and for the summary alike.
fn write_traffic(s: &mut String, traffic: &[(u64, [u64; 4])]) {
    for (i, (t, [ps, bs, pr, br])) in traffic.iter().enumerate() {
        let _ = write!(
            s,
            "{}\"{}\":{{\"msgs_sent\":{ps},\"bytes_sent\":{bs},\"msgs_received\":{pr},\"bytes_received\":{br}}}",
            if i > 0 { "," } else { "" },
            KNOWN_TRANSPORTS[*t as usize]
        );
    }
}

/// The job-wide view of the records.
#[derive(Debug, PartialEq)]
pub struct Summary {
    pub ranks: u64,
    pub open_avg: f64,
    pub peak_avg: f64,
    pub peak_min: u64,
    pub peak_max: u64,
    pub opened_avg: f64,
    pub opened: [u64; 4],
    pub closed: [u64; 3],
    pub used_avg: f64,
    /// Connections used / opened (1 when none were opened).
    pub utilization: f64,
    pub handshake_retries: u64,
    pub failed: u64,
    /// Per transport: totals of packets and bytes sent, received.
    pub traffic: Vec<(u64, [u64; 4])>,
    pub rss_max_kb: u64,
    pub rss_avg_kb: f64,
    pub datagrams: [u64; 4],
    pub dropped: [u64; 2],
    /// Rendezvous registrations found in the cache, made, and dropped because their memory
    /// was given back (MR_CACHE_COUNTS).
    pub mr_cache: [u64; 3],
}

pub fn summarize(recs: &[Record]) -> Summary {
    let n = recs.len().max(1) as f64;
    let sum = |f: &dyn Fn(&Record) -> u64| recs.iter().map(f).sum::<u64>();
    let opened_total = sum(&|r| r.opened_total());
    let used = sum(&|r| r.used);
    let mut s = Summary {
        ranks: recs.len() as u64,
        open_avg: sum(&|r| r.open) as f64 / n,
        peak_avg: sum(&|r| r.peak) as f64 / n,
        peak_min: recs.iter().map(|r| r.peak).min().unwrap_or(0),
        peak_max: recs.iter().map(|r| r.peak).max().unwrap_or(0),
        opened_avg: opened_total as f64 / n,
        opened: [0; 4],
        closed: [0; 3],
        used_avg: used as f64 / n,
        utilization: if opened_total == 0 {
            1.0
        } else {
            used as f64 / opened_total as f64
        },
        handshake_retries: sum(&|r| r.handshake_retries),
        failed: sum(&|r| r.failed),
        traffic: Vec::new(),
        rss_max_kb: recs.iter().map(|r| r.peak_rss_kb).max().unwrap_or(0),
        rss_avg_kb: sum(&|r| r.peak_rss_kb) as f64 / n,
        datagrams: [0; 4],
        dropped: [0; 2],
        mr_cache: [0; 3],
    };
    for r in recs {
        for i in 0..4 {
            s.opened[i] += r.opened[i];
        }
        for i in 0..3 {
            s.closed[i] += r.closed[i];
        }
        for i in 0..4 {
            s.datagrams[i] += r.datagrams[i];
        }
        for i in 0..2 {
            s.dropped[i] += r.dropped[i];
        }
        for i in 0..3 {
            s.mr_cache[i] += r.mr_cache[i];
        }
        for (t, c) in &r.traffic {
            match s.traffic.iter_mut().find(|(u, _)| u == t) {
                Some((_, acc)) => acc.iter_mut().zip(c).for_each(|(a, b)| *a += b),
                None => s.traffic.push((*t, *c)),
            }
        }
    }
    s
}

impl Summary {
    fn text(&self, policy: &str) -> String {
        let mut s = format!(
            "ferrite report: {} ranks, FERRITE_CONN={policy}: connections per rank {:.2} \
             (min {}, max {}), open at finalize {:.2}; opened",
            self.ranks, self.peak_avg, self.peak_min, self.peak_max, self.open_avg
        );
        for (n, v) in OPEN_CAUSES.iter().zip(self.opened) {
            let _ = write!(s, " {n} {v}");
        }
        s.push_str("; closed");
        for (n, v) in CLOSE_CAUSES.iter().zip(self.closed) {
            let _ = write!(s, " {n} {v}");
        }
        let _ = write!(
            s,
            "; used per rank {:.2}, utilization (used/opened) {:.2}; failed {}; handshake retries {}",
            self.used_avg, self.utilization, self.failed, self.handshake_retries
        );
        for (t, [ps, bs, pr, br]) in &self.traffic {
            let _ = write!(
                s,
                "; {}: sent {ps} msgs {bs} B, received {pr} msgs {br} B",
                KNOWN_TRANSPORTS[*t as usize]
            );
        }
        write_datagrams_text(&mut s, self.datagrams);
        write_dropped_text(&mut s, self.dropped);
        write_mr_cache_text(&mut s, self.mr_cache);
        let _ = write!(
            s,
            "; peak RSS max {} kB, avg {:.0} kB",
            self.rss_max_kb, self.rss_avg_kb
        );
        s
    }

    fn json(&self) -> String {
        let mut s = format!(
            "{{\"ranks\":{},\"connections_per_rank\":{:.4},\"connections_min\":{},\
             \"connections_max\":{},\"open_at_finalize_per_rank\":{:.4},\"opened_per_rank\":{:.4},\"opened\":{{",
            self.ranks, self.peak_avg, self.peak_min, self.peak_max, self.open_avg, self.opened_avg
        );
        join_obj(&mut s, OPEN_CAUSES.iter().copied().zip(self.opened));
        s.push_str("},\"closed\":{");
        join_obj(&mut s, CLOSE_CAUSES.iter().copied().zip(self.closed));
        let _ = write!(
            s,
            "}},\"used_per_rank\":{:.4},\"utilization\":{:.4},\"failed\":{},\"handshake_retries\":{},\"transports\":{{",
            self.used_avg, self.utilization, self.failed, self.handshake_retries
        );
        write_traffic(&mut s, &self.traffic);
        s.push_str("},\"datagrams\":{");
        join_obj(&mut s, DATAGRAM_COUNTS.iter().copied().zip(self.datagrams));
        s.push_str("},\"dropped\":{");
        join_obj(&mut s, DROP_REASONS.iter().copied().zip(self.dropped));
        s.push_str("},\"mr_cache\":{");
        join_obj(&mut s, MR_CACHE_COUNTS.iter().copied().zip(self.mr_cache));
        let _ = write!(
            s,
            "}},\"peak_rss_max_kb\":{},\"peak_rss_avg_kb\":{:.0}}}",
            self.rss_max_kb, self.rss_avg_kb
        );
        s
    }
}

/// The whole JSON document: job, per-rank array, summary.
pub fn to_json(policy: &str, recs: &[Record]) -> String {
    let mut s = format!("{{\"ferrite_report\":1,\"policy\":\"{policy}\",\"ranks\":[\n");
    for (i, r) in recs.iter().enumerate() {
        s.push_str(&r.json());
        s.push_str(if i + 1 < recs.len() { ",\n" } else { "\n" });
    }
    let _ = write!(s, "],\n\"summary\":{}\n}}\n", summarize(recs).json());
    s
}

/// Peak resident set (VmHWM) of this process in kB; 0 if /proc does not say.
pub fn peak_rss_kb() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// What FERRITE_REPORT asks for.
enum Want {
    Off,
    Text,
    Json(String),
}

fn want() -> Want {
    let v: String = config::get("FERRITE_REPORT");
    match v.trim() {
        "" | "0" => Want::Off,
        "1" => Want::Text,
        path => Want::Json(path.to_string()),
    }
}

/// The report rank 0 gathered, to be written once the transports are gone.
pub struct Gathered {
    want: Want,
    policy: String,
    recs: Vec<Record>,
}

impl Gathered {
    /// Prints or writes the report. Called after the runtime's sockets are closed: a
    /// stranger flooding the listener can hold every descriptor the process may open until
    /// then, and the report file needs one.
    pub fn emit(self) -> MpiResult<()> {
        match self.want {
            Want::Off => {}
            Want::Text => {
                let mut out = String::new();
                for r in &self.recs {
                    out.push_str(&r.text());
                    out.push('\n');
                }
                out.push_str(&summarize(&self.recs).text(&self.policy));
                eprintln!("{out}");
            }
            Want::Json(path) => {
                std::fs::write(&path, to_json(&self.policy, &self.recs)).map_err(|e| {
                    mpi_err!(
                        MPI_ERR_OTHER,
                        "FERRITE_REPORT={path}: cannot write the report: {e}"
                    )
                })?;
            }
        }
        Ok(())
    }
}

/// The MPI_Finalize hook, called by every rank after Finalize's barrier (so every rank's
/// program traffic is over and no record can arrive before rank 0's snapshot) and before the
/// transports shut down: gathers the records to rank 0, which returns them to be emitted
/// ([`Gathered::emit`]). Does nothing unless FERRITE_REPORT is set.
pub fn at_finalize(st: &mut Held) -> MpiResult<Option<Gathered>> {
    let want = want();
    if matches!(want, Want::Off) {
        return Ok(None);
    }
    let policy: String = config::get("FERRITE_CONN");
    let mine = Record::snapshot(st);
    // A rank leaving MPI_Finalize's barrier first may already close its connections (BYE)
    // while this one has not seen the barrier end: that must not count in this record. Once
    // every rank took its snapshot the ranks go on; nothing is in flight between them after
    // Finalize's barrier, so this one need not make progress.
    pmi::barrier()?;
    if st.world_rank != 0 {
        st.coll_send(MPI_COMM_WORLD, 0, TAG_REPORT, &mine.encode())?;
        // Out of the transports before they shut down, and acknowledged (a lost
        // acknowledgement is answered again while rank 0 waits there).
        return super::quiesce(st).map(|()| None);
    }
    let mut recs = vec![mine];
    for r in 1..st.world_size as i32 {
        let b = st.coll_recv(MPI_COMM_WORLD, r, TAG_REPORT)?;
        let rec = Record::decode(&b).ok_or_else(|| {
            mpi_err!(
                MPI_ERR_OTHER,
                "FERRITE_REPORT: malformed record from rank {r}"
            )
        })?;
        recs.push(rec);
    }
    super::quiesce(st)?;
    Ok(Some(Gathered { want, policy, recs }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(rank: u64, opened: [u64; 4], used: u64) -> Record {
        Record {
            rank,
            open: opened.iter().sum(),
            peak: opened.iter().sum(),
            opened,
            used,
            traffic: vec![(2, [3, 300, 4, 400]), (0, [1, 10, 1, 10])],
            peak_rss_kb: 1000 + rank,
            datagrams: [rank, 2, 3, 1],
            dropped: [rank + 1, 7],
            ..Record::default()
        }
    }

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let r = rec(5, [0, 1, 0, 1], 2);
        assert_eq!(Record::decode(&r.encode()), Some(r.clone()));
        let b = r.encode();
        assert_eq!(Record::decode(&b[..b.len() - 8]), None);
        assert_eq!(Record::decode(&b[..b.len() - 1]), None);
        let mut long = b.clone();
        long.extend([0; 8]);
        assert_eq!(Record::decode(&long), None);
    }

    #[test]
    fn summary_and_json_carry_the_counts() {
        let recs = [rec(0, [15, 0, 0, 0], 2), rec(1, [15, 0, 0, 0], 4)];
        let s = summarize(&recs);
        assert_eq!((s.peak_min, s.peak_max, s.peak_avg), (15, 15, 15.0));
        assert_eq!(s.opened, [30, 0, 0, 0]);
        assert!((s.utilization - 0.2).abs() < 1e-9);
        assert_eq!(s.traffic, vec![(2, [6, 600, 8, 800]), (0, [2, 20, 2, 20])]);
        let j = to_json("static", &recs);
        assert!(j.contains("\"rank\":1,\"connections\":{\"open\":15,\"peak\":15,\"max\":null}"));
        assert!(j.contains("\"opened\":{\"init\":15,\"first_message\":0"));
        assert!(j.contains("\"tcp\":{\"msgs_sent\":3,\"bytes_sent\":300"));
        assert!(j.contains("\"utilization\":0.2000"));
        assert_eq!(s.datagrams, [1, 4, 6, 2]);
        assert!(j.contains(
            "\"datagrams\":{\"retransmits\":1,\"acks\":4,\"duplicates\":6,\"timeouts\":2}"
        ));
        // Dropped input by reason, per rank and summed.
        assert_eq!(s.dropped, [3, 14]);
        assert!(j.contains("\"dropped\":{\"strangers\":2,\"malformed\":7}"));
        assert!(j.contains("\"dropped\":{\"strangers\":3,\"malformed\":14}"));
        // Balanced braces and brackets: a minimal well-formedness check.
        let depth = j.chars().fold(0i64, |d, c| match c {
            '{' | '[' => d + 1,
            '}' | ']' => d - 1,
            _ => d,
        });
        assert_eq!(depth, 0);
    }

    #[test]
    fn peak_rss_is_read() {
        assert!(peak_rss_kb() > 0);
    }
}
