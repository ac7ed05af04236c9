//! The PMI-1 server as a pure state machine: no sockets, no clocks.
//!
//! The launcher feeds it `(client, message)` pairs and carries out what comes back: replies
//! to write to clients, and [`Event`]s (a barrier completed, a rank aborted, finalized, or
//! broke the protocol). Clients connected over a pre-made socket are registered with their
//! rank; clients that connect by address (`PMI_PORT`) are registered unbound and learn
//! their rank from `cmd=initack pmiid=N`.
//!
//! KVS semantics: a put is visible at once to the rank that made it and to everyone once
//! the next barrier completes (PMI-1's commit + barrier rule), so nothing depends on luck.

use crate::wire::Message;
use std::collections::{BTreeMap, HashMap};

/// The launcher's name for a connection.
pub type ClientId = usize;

/// Limits advertised in `cmd=maxes` (MPICH's Hydra uses the same).
pub const KVSNAME_MAX: usize = 256;
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;

/// What the launcher must act on besides replies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A rank sent `cmd=init`.
    Initialized { rank: u32 },
    /// Every rank entered barrier number `round` (counting from 0); all were released.
    BarrierReleased { round: u64 },
    /// A rank asked to end the job.
    Abort {
        rank: Option<u32>,
        code: i32,
        message: String,
    },
    /// A rank finalized; it may now exit.
    Finalized { rank: u32 },
    /// A client broke the protocol; the launcher should end the job.
    ProtocolError {
        client: ClientId,
        rank: Option<u32>,
        reason: String,
    },
}

/// What one input produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Output {
    pub replies: Vec<(ClientId, Message)>,
    pub events: Vec<Event>,
}

impl Output {
    fn reply(&mut self, to: ClientId, m: Message) {
        self.replies.push((to, m));
    }
}

#[derive(Debug, Default)]
struct Client {
    rank: Option<u32>,
    initialized: bool,
    finalized: bool,
    in_barrier: bool,
}

/// The job-wide PMI state.
#[derive(Debug)]
pub struct Server {
    kvsname: String,
    size: u32,
    /// MPI_APPNUM per rank (the program of an MPMD job it runs); 0 unless set.
    appnums: Vec<u32>,
    universe_size: u32,
    clients: HashMap<ClientId, Client>,
    /// Committed (visible to all) key-values.
    kvs: HashMap<String, String>,
    /// Puts since the last barrier, per rank (visible to their putter only).
    pending: BTreeMap<u32, HashMap<String, String>>,
    in_barrier: u32,
    round: u64,
}

impl Server {
    /// A job of `size` ranks on one node sharing the KVS `kvsname`.
    pub fn new(kvsname: &str, size: u32) -> Self {
        let mut kvs = HashMap::new();
        // All ranks share one node: (node 0, 1 node, `size` ranks per node).
        kvs.insert(
            "PMI_process_mapping".to_string(),
            format!("(vector,(0,1,{size}))"),
        );
        Server {
            kvsname: kvsname.into(),
            size,
            appnums: vec![0; size as usize],
            universe_size: size,
            clients: HashMap::new(),
            kvs,
            pending: BTreeMap::new(),
            in_barrier: 0,
            round: 0,
        }
    }

    /// A value the launcher publishes itself (e.g. `PMI_process_mapping` for a job across
    /// hosts), visible to every rank at once.
    pub fn set_job_value(&mut self, key: &str, value: &str) {
        self.kvs.insert(key.to_string(), value.to_string());
    }

    /// Tells rank `rank` it runs program number `appnum` of an MPMD job (MPI_APPNUM).
    pub fn set_appnum(&mut self, rank: u32, appnum: u32) {
        if let Some(a) = self.appnums.get_mut(rank as usize) {
            *a = appnum;
        }
    }

    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// Registers a connection; `rank` is `None` for a `PMI_PORT` client not yet identified.
    pub fn add_client(&mut self, id: ClientId, rank: Option<u32>) {
        self.clients.insert(
            id,
            Client {
                rank,
                ..Client::default()
            },
        );
    }

    pub fn rank_of(&self, id: ClientId) -> Option<u32> {
        self.clients.get(&id).and_then(|c| c.rank)
    }

    /// Whether the client sent `cmd=init` (so it must finalize before exiting).
    pub fn is_initialized(&self, id: ClientId) -> bool {
        self.clients.get(&id).is_some_and(|c| c.initialized)
    }

    pub fn is_finalized(&self, id: ClientId) -> bool {
        self.clients.get(&id).is_some_and(|c| c.finalized)
    }

    /// Whether the client is waiting in the current barrier.
    pub fn in_barrier(&self, id: ClientId) -> bool {
        self.clients.get(&id).is_some_and(|c| c.in_barrier)
    }

    /// How many clients wait in the current barrier.
    pub fn barrier_waiting(&self) -> u32 {
        self.in_barrier
    }

    /// Handles one line the client sent; malformed lines become a `ProtocolError` event.
    pub fn handle_line(&mut self, from: ClientId, line: &[u8]) -> Output {
        match Message::parse(line) {
            Ok(m) => self.handle(from, &m),
            Err(e) => self.protocol_error(from, format!("malformed PMI message: {e}")),
        }
    }

    fn protocol_error(&self, from: ClientId, reason: String) -> Output {
        Output {
            replies: Vec::new(),
            events: vec![Event::ProtocolError {
                client: from,
                rank: self.rank_of(from),
                reason,
            }],
        }
    }

    /// Handles one parsed message from client `from`.
    pub fn handle(&mut self, from: ClientId, m: &Message) -> Output {
        let mut out = Output::default();
        let Some(client) = self.clients.get(&from) else {
            return self.protocol_error(from, format!("message from unknown client {from}"));
        };
        let rank = client.rank;
        if rank.is_none() && m.cmd != "initack" {
            return self.protocol_error(
                from,
                format!("'{}' before cmd=initack identified the client", m.cmd),
            );
        }
        let ok = |cmd: &str| Message::new(cmd).arg("rc", 0);
        match m.cmd.as_str() {
            "initack" => {
                let id = m.get_int("pmiid");
                match id {
                    Some(id) if (0..self.size as i64).contains(&id) && rank.is_none() => {
                        let id = id as u32;
                        if self.clients.values().any(|c| c.rank == Some(id)) {
                            return self
                                .protocol_error(from, format!("pmiid {id} is already connected"));
                        }
                        self.client(from).rank = Some(id);
                        out.reply(from, ok("initack"));
                        out.reply(from, Message::new("set").arg("size", self.size));
                        out.reply(from, Message::new("set").arg("rank", id));
                        out.reply(from, Message::new("set").arg("debug", 0));
                    }
                    _ => {
                        return self.protocol_error(from, format!("bad initack: {m}"));
                    }
                }
            }
            "init" => {
                if m.get_int("pmi_version") != Some(1) {
                    out.reply(
                        from,
                        Message::new("response_to_init")
                            .arg("rc", -1)
                            .arg("pmi_version", 1)
                            .arg("pmi_subversion", 1),
                    );
                    out.events.push(Event::ProtocolError {
                        client: from,
                        rank,
                        reason: format!(
                            "client asked for PMI version {} (only 1 is served)",
                            m.get("pmi_version").unwrap_or("<none>")
                        ),
                    });
                    return out;
                }
                self.client(from).initialized = true;
                out.reply(
                    from,
                    ok("response_to_init")
                        .arg("pmi_version", 1)
                        .arg("pmi_subversion", 1),
                );
                out.events.push(Event::Initialized {
                    rank: rank.unwrap_or(0),
                });
            }
            "get_maxes" => out.reply(
                from,
                ok("maxes")
                    .arg("kvsname_max", KVSNAME_MAX)
                    .arg("keylen_max", KEYLEN_MAX)
                    .arg("vallen_max", VALLEN_MAX),
            ),
            "get_appnum" => {
                let appnum = rank.and_then(|r| self.appnums.get(r as usize)).copied();
                out.reply(from, ok("appnum").arg("appnum", appnum.unwrap_or(0)))
            }
            "get_my_kvsname" => out.reply(from, ok("my_kvsname").arg("kvsname", &self.kvsname)),
            "get_universe_size" => {
                out.reply(from, ok("universe_size").arg("size", self.universe_size))
            }
            "put" => {
                let reply = match self.check_kv(m, true) {
                    Err(msg) => Message::new("put_result").arg("rc", -1).arg("msg", msg),
                    Ok((key, value)) => {
                        self.pending
                            .entry(rank.unwrap_or(0))
                            .or_default()
                            .insert(key, value);
                        ok("put_result").arg("msg", "success")
                    }
                };
                out.reply(from, reply);
            }
            "get" => {
                let reply = match self.check_kv(m, false) {
                    Err(msg) => Message::new("get_result").arg("rc", -1).arg("msg", msg),
                    Ok((key, _)) => {
                        let own = self
                            .pending
                            .get(&rank.unwrap_or(0))
                            .and_then(|p| p.get(&key));
                        match own.or_else(|| self.kvs.get(&key)) {
                            Some(v) => ok("get_result").arg("msg", "success").arg("value", v),
                            None => Message::new("get_result")
                                .arg("rc", -1)
                                .arg("msg", format!("key_{key}_not_found")),
                        }
                    }
                };
                out.reply(from, reply);
            }
            "barrier_in" => {
                let c = self.client(from);
                if c.in_barrier {
                    return self.protocol_error(from, "barrier_in twice in one barrier".into());
                }
                c.in_barrier = true;
                self.in_barrier += 1;
                if self.in_barrier == self.size {
                    self.release_barrier(&mut out);
                }
            }
            "finalize" => {
                self.client(from).finalized = true;
                out.reply(from, ok("finalize_ack"));
                out.events.push(Event::Finalized {
                    rank: rank.unwrap_or(0),
                });
            }
            "abort" => {
                let code = m.get_int("exitcode").unwrap_or(1);
                let message = m
                    .get("message")
                    .or_else(|| m.get("error_msg"))
                    .or_else(|| m.get("msg"))
                    .unwrap_or("")
                    .to_string();
                out.events.push(Event::Abort {
                    rank,
                    code: code.clamp(i32::MIN as i64, i32::MAX as i64) as i32,
                    message,
                });
            }
            // Dynamic process management is not offered: answer so the client does not hang.
            "publish_name" | "unpublish_name" | "lookup_name" | "spawn" => {
                let name = m.cmd.trim_end_matches("_name");
                out.reply(
                    from,
                    Message::new(&format!("{name}_result")).arg("rc", -1).arg(
                        "msg",
                        format!("{} is not supported by this launcher", m.cmd),
                    ),
                );
            }
            other => {
                return self.protocol_error(from, format!("unknown PMI command '{other}'"));
            }
        }
        out
    }

    fn client(&mut self, id: ClientId) -> &mut Client {
        self.clients.get_mut(&id).expect("client checked by handle")
    }

    fn release_barrier(&mut self, out: &mut Output) {
        for (_, puts) in std::mem::take(&mut self.pending) {
            self.kvs.extend(puts);
        }
        let mut ids: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.in_barrier)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            self.client(id).in_barrier = false;
            out.reply(id, Message::new("barrier_out").arg("rc", 0));
        }
        self.in_barrier = 0;
        out.events
            .push(Event::BarrierReleased { round: self.round });
        self.round += 1;
    }

    /// Validates kvsname/key (and value for a put); returns (key, value).
    fn check_kv(&self, m: &Message, put: bool) -> Result<(String, String), String> {
        let kvs = m.get("kvsname").unwrap_or("");
        if kvs != self.kvsname {
            return Err(format!("unknown_kvsname_{kvs}"));
        }
        let key = m.get("key").unwrap_or("");
        if key.is_empty() || key.len() > KEYLEN_MAX {
            return Err(format!("key_length_must_be_1_to_{KEYLEN_MAX}"));
        }
        let value = if put {
            let v = m.get("value").ok_or("missing_value")?;
            if v.len() > VALLEN_MAX {
                return Err(format!("value_longer_than_{VALLEN_MAX}"));
            }
            v.to_string()
        } else {
            String::new()
        };
        Ok((key.to_string(), value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> Message {
        Message::parse(s.as_bytes()).unwrap()
    }

    fn one_reply(out: &Output, to: ClientId) -> &Message {
        assert_eq!(out.replies.len(), 1, "{out:?}");
        assert_eq!(out.replies[0].0, to);
        &out.replies[0].1
    }

    fn job(n: u32) -> Server {
        let mut s = Server::new("kvs_1_ab", n);
        for r in 0..n {
            s.add_client(100 + r as usize, Some(r));
        }
        s
    }

    #[test]
    fn init_and_queries() {
        let mut s = job(3);
        let out = s.handle(101, &line("cmd=init pmi_version=1 pmi_subversion=1"));
        let r = one_reply(&out, 101);
        assert_eq!((r.cmd.as_str(), r.rc()), ("response_to_init", 0));
        assert_eq!(out.events, vec![Event::Initialized { rank: 1 }]);
        assert!(s.is_initialized(101) && !s.is_initialized(100));

        let out = s.handle(101, &line("cmd=get_maxes"));
        assert_eq!(one_reply(&out, 101).get_int("vallen_max"), Some(1024));
        let out = s.handle(101, &line("cmd=get_appnum"));
        assert_eq!(one_reply(&out, 101).get_int("appnum"), Some(0));
        s.set_appnum(1, 2);
        let out = s.handle(101, &line("cmd=get_appnum"));
        assert_eq!(one_reply(&out, 101).get_int("appnum"), Some(2));
        let out = s.handle(100, &line("cmd=get_appnum"));
        assert_eq!(one_reply(&out, 100).get_int("appnum"), Some(0));
        let out = s.handle(101, &line("cmd=get_my_kvsname"));
        assert_eq!(one_reply(&out, 101).get("kvsname"), Some("kvs_1_ab"));
        let out = s.handle(101, &line("cmd=get_universe_size"));
        assert_eq!(one_reply(&out, 101).get_int("size"), Some(3));
        let out = s.handle(
            101,
            &line("cmd=get kvsname=kvs_1_ab key=PMI_process_mapping"),
        );
        assert_eq!(one_reply(&out, 101).get("value"), Some("(vector,(0,1,3))"));
        s.set_job_value("PMI_process_mapping", "(vector,(0,2,1),(0,1,1))");
        let out = s.handle(
            100,
            &line("cmd=get kvsname=kvs_1_ab key=PMI_process_mapping"),
        );
        assert_eq!(
            one_reply(&out, 100).get("value"),
            Some("(vector,(0,2,1),(0,1,1))"),
            "the launcher's own values are visible at once"
        );
    }

    #[test]
    fn wrong_version_is_refused() {
        let mut s = job(1);
        let out = s.handle(100, &line("cmd=init pmi_version=2 pmi_subversion=0"));
        assert_eq!(one_reply(&out, 100).rc(), -1);
        assert!(matches!(
            out.events[0],
            Event::ProtocolError { rank: Some(0), .. }
        ));
    }

    #[test]
    fn barrier_across_many_clients_publishes_puts() {
        let n = 64;
        let mut s = job(n);
        for r in 0..n {
            let id = 100 + r as usize;
            let out = s.handle(
                id,
                &line(&format!(
                    "cmd=put kvsname=kvs_1_ab key=card{r} value=addr-of-{r}"
                )),
            );
            assert_eq!(one_reply(&out, id).rc(), 0);
            // The putter sees its own value at once, the others only after the barrier.
            let own = s.handle(id, &line(&format!("cmd=get kvsname=kvs_1_ab key=card{r}")));
            assert_eq!(
                one_reply(&own, id).get("value"),
                Some(format!("addr-of-{r}").as_str())
            );
            let other = s.handle(
                100 + ((r + 1) % n) as usize,
                &line(&format!("cmd=get kvsname=kvs_1_ab key=card{r}")),
            );
            assert_eq!(other.replies[0].1.rc(), -1);
        }
        for round in 0..2u64 {
            for r in 0..n - 1 {
                let out = s.handle(100 + r as usize, &line("cmd=barrier_in"));
                assert_eq!(
                    out,
                    Output::default(),
                    "nobody leaves before the last arrives"
                );
            }
            let out = s.handle(100 + n as usize - 1, &line("cmd=barrier_in"));
            assert_eq!(out.replies.len(), n as usize);
            let mut to: Vec<ClientId> = out.replies.iter().map(|(c, _)| *c).collect();
            to.sort_unstable();
            assert_eq!(to, (100..100 + n as usize).collect::<Vec<_>>());
            assert!(out.replies.iter().all(|(_, m)| m.cmd == "barrier_out"));
            assert_eq!(out.events, vec![Event::BarrierReleased { round }]);
            assert_eq!(s.barrier_waiting(), 0);
        }
        for r in 0..n {
            let peer = (r * 7 + 3) % n;
            let out = s.handle(
                100 + r as usize,
                &line(&format!("cmd=get kvsname=kvs_1_ab key=card{peer}")),
            );
            let m = one_reply(&out, 100 + r as usize);
            assert_eq!(m.get("value"), Some(format!("addr-of-{peer}").as_str()));
        }
    }

    #[test]
    fn double_barrier_in_is_a_protocol_error() {
        let mut s = job(2);
        s.handle(100, &line("cmd=barrier_in"));
        let out = s.handle(100, &line("cmd=barrier_in"));
        assert!(matches!(
            out.events[0],
            Event::ProtocolError { rank: Some(0), .. }
        ));
    }

    #[test]
    fn abort_and_finalize_events() {
        let mut s = job(2);
        let out = s.handle(
            101,
            &line(r"cmd=abort exitcode=7 message=rank\ 1\ gave\ up"),
        );
        assert!(out.replies.is_empty());
        assert_eq!(
            out.events,
            vec![Event::Abort {
                rank: Some(1),
                code: 7,
                message: "rank 1 gave up".into()
            }]
        );
        let out = s.handle(100, &line("cmd=finalize"));
        assert_eq!(one_reply(&out, 100).cmd, "finalize_ack");
        assert_eq!(out.events, vec![Event::Finalized { rank: 0 }]);
        assert!(s.is_finalized(100) && !s.is_finalized(101));
    }

    #[test]
    fn bad_requests_get_error_replies_or_protocol_errors() {
        let mut s = job(2);
        let out = s.handle(100, &line("cmd=put kvsname=other key=k value=v"));
        assert_eq!(one_reply(&out, 100).rc(), -1);
        let out = s.handle(100, &line("cmd=put kvsname=kvs_1_ab key=k"));
        assert_eq!(one_reply(&out, 100).rc(), -1);
        let long_key = "k".repeat(KEYLEN_MAX + 1);
        let out = s.handle(
            100,
            &line(&format!("cmd=get kvsname=kvs_1_ab key={long_key}")),
        );
        assert_eq!(one_reply(&out, 100).rc(), -1);
        let out = s.handle(100, &line("cmd=get kvsname=kvs_1_ab key=nothing"));
        assert_eq!(
            one_reply(&out, 100).get("msg"),
            Some("key_nothing_not_found")
        );
        let out = s.handle(100, &line("cmd=lookup_name service=x"));
        assert_eq!(one_reply(&out, 100).cmd, "lookup_result");
        let out = s.handle(100, &line("cmd=frobnicate"));
        assert!(out.replies.is_empty());
        assert!(matches!(
            out.events[0],
            Event::ProtocolError { client: 100, .. }
        ));
        let out = s.handle_line(101, b"this is not pmi");
        assert!(matches!(
            out.events[0],
            Event::ProtocolError {
                client: 101,
                rank: Some(1),
                ..
            }
        ));
        let out = s.handle_line(999, b"cmd=get_maxes");
        assert!(matches!(
            out.events[0],
            Event::ProtocolError {
                client: 999,
                rank: None,
                ..
            }
        ));
    }

    #[test]
    fn port_clients_identify_with_initack() {
        let mut s = Server::new("kvs_2_cd", 2);
        s.add_client(7, None);
        let out = s.handle(7, &line("cmd=get_maxes"));
        assert!(matches!(out.events[0], Event::ProtocolError { .. }));
        let out = s.handle(7, &line("cmd=initack pmiid=1"));
        let cmds: Vec<String> = out.replies.iter().map(|(_, m)| m.to_string()).collect();
        assert_eq!(
            cmds,
            [
                "cmd=initack rc=0",
                "cmd=set size=2",
                "cmd=set rank=1",
                "cmd=set debug=0"
            ]
        );
        assert_eq!(s.rank_of(7), Some(1));
        s.add_client(8, None);
        let out = s.handle(8, &line("cmd=initack pmiid=1"));
        assert!(
            matches!(out.events[0], Event::ProtocolError { .. }),
            "rank 1 is taken"
        );
        let out = s.handle(8, &line("cmd=initack pmiid=5"));
        assert!(
            matches!(out.events[0], Event::ProtocolError { .. }),
            "out of range"
        );
    }
}
