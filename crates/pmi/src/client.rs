//! A blocking PMI-1 client, as an MPI process uses it to join its job.
//!
//! The launcher hands over a connected socket in `PMI_FD` (with `PMI_RANK` and `PMI_SIZE`),
//! or an address in `PMI_PORT` (`host:port`) and an id in `PMI_ID`, in which case the
//! client connects, sends `cmd=initack pmiid=ID` and learns its rank and size from the
//! `cmd=set` lines that follow. When `FERRITE_PMI_SECRET` is set (Ferrite's mpirun sets it
//! for ranks on other hosts), the initack carries it as `secret=...`, so that a listener
//! open to the network can tell its own ranks from strangers; other launchers never see it.
//!
//! Requests and responses alternate strictly, with one exception: between
//! [`Client::barrier_enter`] and the [`Client::barrier_poll`] that sees the barrier end, other
//! requests may be made (MPI_Finalize makes progress while it waits, and progress may look up
//! a peer's business card). The launcher then answers them before or after `barrier_out`, as
//! the barrier happens to end; a `barrier_out` read while waiting for another answer is kept
//! for `barrier_poll`.

use crate::wire::{Message, WireError, MAX_LINE};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

#[derive(Debug)]
pub enum PmiError {
    /// The environment names no launcher, or names one badly.
    Env(String),
    Io {
        during: String,
        err: io::Error,
    },
    Wire(WireError),
    /// The server answered something other than what the protocol says.
    Protocol(String),
    /// The server refused a request (`rc` != 0).
    Refused {
        cmd: String,
        rc: i64,
        msg: String,
    },
}

impl fmt::Display for PmiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PmiError::Env(s) => write!(f, "{s}"),
            PmiError::Io { during, err } => write!(f, "PMI I/O error during {during}: {err}"),
            PmiError::Wire(e) => write!(f, "PMI message error: {e}"),
            PmiError::Protocol(s) => write!(f, "PMI protocol error: {s}"),
            PmiError::Refused { cmd, rc, msg } => {
                write!(f, "the launcher refused PMI '{cmd}' (rc={rc}): {msg}")
            }
        }
    }
}

impl std::error::Error for PmiError {}

impl From<WireError> for PmiError {
    fn from(e: WireError) -> Self {
        PmiError::Wire(e)
    }
}

pub type PmiResult<T> = Result<T, PmiError>;

/// The job as the launcher described it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub rank: u32,
    pub size: u32,
    pub kvsname: String,
    /// MPI_APPNUM; `None` when the launcher says -1 (no application number).
    pub appnum: Option<u32>,
    /// MPI_UNIVERSE_SIZE; `None` when the launcher says -1 (unknown).
    pub universe_size: Option<u32>,
    pub keylen_max: usize,
    pub vallen_max: usize,
}

pub struct Client {
    reader: BufReader<File>,
    writer: File,
    rank: u32,
    size: u32,
    info: Option<JobInfo>,
    barrier: Barrier,
}

/// Where a split barrier ([`Client::barrier_enter`]) stands.
#[derive(Debug)]
enum Barrier {
    /// None entered, or the last one's end was reported.
    Idle,
    /// `barrier_in` sent; `barrier_out` not read yet.
    Entered,
    /// `barrier_out` read while waiting for the answer to another request; `barrier_poll`
    /// reports it.
    Ended(Message),
}

fn env_u32(name: &str) -> PmiResult<u32> {
    let v = std::env::var(name).map_err(|_| PmiError::Env(format!("{name} is not set")))?;
    v.trim()
        .parse()
        .map_err(|_| PmiError::Env(format!("{name}={v:?} is not a non-negative integer")))
}

/// The abort request, ready to write; control characters in `msg` become spaces and it is
/// shortened to fit a line. Usable without a `Client` (e.g. from a signal-safe path).
pub fn abort_line(code: i32, msg: &str) -> String {
    let clean: String = msg
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_LINE / 4)
        .collect();
    Message::new("abort")
        .arg("exitcode", code)
        .arg("message", clean)
        .format()
        .unwrap_or_else(|_| format!("cmd=abort exitcode={code}\n"))
}

impl Client {
    /// Connects as the environment says: `Ok(None)` when neither `PMI_FD` nor `PMI_PORT`
    /// is set (the process was not started by a PMI launcher).
    pub fn from_env() -> PmiResult<Option<Client>> {
        if let Ok(fd) = std::env::var("PMI_FD") {
            let fd: RawFd = fd
                .trim()
                .parse()
                .ok()
                .filter(|&fd| fd >= 0)
                .ok_or_else(|| PmiError::Env(format!("PMI_FD={fd:?} is not a file descriptor")))?;
            let (rank, size) = (env_u32("PMI_RANK")?, env_u32("PMI_SIZE")?);
            // SAFETY: F_GETFD only inspects the descriptor table; it fails harmlessly on a
            // descriptor that is not open.
            if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                return Err(PmiError::Env(format!(
                    "PMI_FD={fd} is not an open descriptor"
                )));
            }
            // SAFETY: the launcher gave this process the descriptor for its PMI connection
            // alone; nothing else in the process owns it.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            return Client::with_fd(owned, rank, size).map(Some);
        }
        if let Ok(port) = std::env::var("PMI_PORT") {
            let id = env_u32("PMI_ID")?;
            let secret = std::env::var("FERRITE_PMI_SECRET").ok();
            // Programs this process starts must not inherit the job's password (this runs
            // in MPI_Init, before the library starts threads of its own).
            std::env::remove_var("FERRITE_PMI_SECRET");
            return Client::connect_port_with(&port, id, secret.as_deref()).map(Some);
        }
        Ok(None)
    }

    /// A client over an already-connected socket; the rank and size come from the caller.
    pub fn with_fd(fd: OwnedFd, rank: u32, size: u32) -> PmiResult<Client> {
        // Programs this process starts must not inherit the job's PMI connection.
        // SAFETY: fd is a valid, owned descriptor; setting FD_CLOEXEC has no other effect.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        let file = File::from(fd);
        let writer = file.try_clone().map_err(|err| PmiError::Io {
            during: "dup of the PMI socket".into(),
            err,
        })?;
        Ok(Client {
            reader: BufReader::new(file),
            writer,
            rank,
            size,
            info: None,
            barrier: Barrier::Idle,
        })
    }

    /// Connects to `host:port` and identifies as `pmiid` (the `PMI_PORT` form).
    pub fn connect_port(addr: &str, pmiid: u32) -> PmiResult<Client> {
        Client::connect_port_with(addr, pmiid, None)
    }

    /// [`Client::connect_port`], proving membership of the job with `secret` if given.
    pub fn connect_port_with(addr: &str, pmiid: u32, secret: Option<&str>) -> PmiResult<Client> {
        let stream = TcpStream::connect(addr).map_err(|err| PmiError::Io {
            during: format!("connect to PMI_PORT {addr}"),
            err,
        })?;
        let _ = stream.set_nodelay(true);
        let mut c = Client::with_fd(OwnedFd::from(stream), 0, 0)?;
        let mut hello = Message::new("initack").arg("pmiid", pmiid);
        if let Some(s) = secret {
            hello = hello.arg("secret", s);
        }
        c.send(&hello)?;
        c.expect("initack")?;
        let (mut rank, mut size) = (None, None);
        while rank.is_none() || size.is_none() {
            let m = c.recv()?;
            if m.cmd != "set" {
                return Err(PmiError::Protocol(format!("expected cmd=set, got {m}")));
            }
            for (k, v) in &m.args {
                match k.as_str() {
                    "rank" => rank = v.parse().ok(),
                    "size" => size = v.parse().ok(),
                    _ => {}
                }
            }
        }
        c.rank = rank.unwrap_or(0);
        c.size = size.unwrap_or(0);
        // Hydra also sends `cmd=set debug=N` after rank and size.
        let m = c.recv()?;
        if m.cmd != "set" {
            return Err(PmiError::Protocol(format!(
                "expected cmd=set debug, got {m}"
            )));
        }
        Ok(c)
    }

    pub fn raw_fd(&self) -> RawFd {
        self.writer.as_raw_fd()
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    /// The job information, once [`Client::init`] ran.
    pub fn info(&self) -> Option<&JobInfo> {
        self.info.as_ref()
    }

    fn send(&mut self, m: &Message) -> PmiResult<()> {
        let line = m.format()?;
        self.writer
            .write_all(line.as_bytes())
            .map_err(|err| PmiError::Io {
                during: format!("sending cmd={}", m.cmd),
                err,
            })
    }

    fn recv(&mut self) -> PmiResult<Message> {
        let mut line = Vec::new();
        loop {
            let buf = self.reader.fill_buf().map_err(|err| PmiError::Io {
                during: "reading a PMI response".into(),
                err,
            })?;
            if buf.is_empty() {
                return Err(PmiError::Protocol(
                    "the launcher closed the PMI connection".into(),
                ));
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(n) => (n + 1, true),
                None => (buf.len(), false),
            };
            line.extend_from_slice(&buf[..take]);
            self.reader.consume(take);
            if line.len() > MAX_LINE {
                return Err(WireError::TooLong(line.len()).into());
            }
            if done {
                return Ok(Message::parse(&line)?);
            }
        }
    }

    /// Reads the answer to the request just sent. During a split barrier the launcher may
    /// send `barrier_out` first: that is kept for [`Client::barrier_poll`].
    fn recv_answer(&mut self) -> PmiResult<Message> {
        loop {
            let m = self.recv()?;
            if m.cmd == "barrier_out" && matches!(self.barrier, Barrier::Entered) {
                self.barrier = Barrier::Ended(m);
                continue;
            }
            return Ok(m);
        }
    }

    /// Reads the response to a request and checks its command and `rc`.
    fn expect(&mut self, cmd: &str) -> PmiResult<Message> {
        let m = self.recv_answer()?;
        Self::check(m, cmd)
    }

    /// `m` if it is a `cmd` with `rc=0`; otherwise what is wrong with it.
    fn check(m: Message, cmd: &str) -> PmiResult<Message> {
        if m.cmd != cmd {
            return Err(PmiError::Protocol(format!("expected cmd={cmd}, got {m}")));
        }
        if m.rc() != 0 {
            return Err(PmiError::Refused {
                cmd: cmd.into(),
                rc: m.rc(),
                msg: m.get("msg").unwrap_or("").into(),
            });
        }
        Ok(m)
    }

    fn request(&mut self, m: Message, reply: &str) -> PmiResult<Message> {
        self.send(&m)?;
        self.expect(reply)
    }

    fn int_field(m: &Message, key: &str) -> PmiResult<i64> {
        m.get_int(key)
            .ok_or_else(|| PmiError::Protocol(format!("no integer {key} in {m}")))
    }

    /// The init handshake and the job queries every MPI process makes.
    pub fn init(&mut self) -> PmiResult<JobInfo> {
        let r = self.request(
            Message::new("init")
                .arg("pmi_version", 1)
                .arg("pmi_subversion", 1),
            "response_to_init",
        )?;
        if r.get_int("pmi_version").is_some_and(|v| v != 1) {
            return Err(PmiError::Protocol(format!(
                "server speaks another version: {r}"
            )));
        }
        let maxes = self.request(Message::new("get_maxes"), "maxes")?;
        let appnum = self.request(Message::new("get_appnum"), "appnum")?;
        let kvs = self.request(Message::new("get_my_kvsname"), "my_kvsname")?;
        let universe = self.request(Message::new("get_universe_size"), "universe_size")?;
        let info = JobInfo {
            rank: self.rank,
            size: self.size,
            kvsname: kvs
                .get("kvsname")
                .ok_or_else(|| PmiError::Protocol(format!("no kvsname in {kvs}")))?
                .to_string(),
            appnum: u32::try_from(Self::int_field(&appnum, "appnum")?).ok(),
            universe_size: u32::try_from(Self::int_field(&universe, "size")?).ok(),
            keylen_max: Self::int_field(&maxes, "keylen_max")?.max(0) as usize,
            vallen_max: Self::int_field(&maxes, "vallen_max")?.max(0) as usize,
        };
        self.info = Some(info.clone());
        Ok(info)
    }

    fn kvsname(&self) -> PmiResult<String> {
        self.info
            .as_ref()
            .map(|i| i.kvsname.clone())
            .ok_or_else(|| PmiError::Protocol("PMI used before init".into()))
    }

    /// Stores `key=value` in the job's KVS; others see it after the next barrier.
    pub fn put(&mut self, key: &str, value: &str) -> PmiResult<()> {
        if let Some(i) = &self.info {
            if key.len() > i.keylen_max || value.len() > i.vallen_max {
                return Err(PmiError::Env(format!(
                    "PMI put of key {key:?} ({} bytes) with a {}-byte value exceeds the \
                     launcher's limits (key {}, value {})",
                    key.len(),
                    value.len(),
                    i.keylen_max,
                    i.vallen_max
                )));
            }
        }
        let m = Message::new("put")
            .arg("kvsname", self.kvsname()?)
            .arg("key", key)
            .arg("value", value);
        self.request(m, "put_result").map(|_| ())
    }

    /// The value of `key`, or `None` if no rank put it (before the last barrier).
    pub fn get(&mut self, key: &str) -> PmiResult<Option<String>> {
        let m = Message::new("get")
            .arg("kvsname", self.kvsname()?)
            .arg("key", key);
        self.send(&m)?;
        let r = self.recv_answer()?;
        if r.cmd != "get_result" {
            return Err(PmiError::Protocol(format!(
                "expected cmd=get_result, got {r}"
            )));
        }
        if r.rc() != 0 {
            return Ok(None);
        }
        Ok(Some(r.get("value").unwrap_or("").to_string()))
    }

    /// Waits until every rank of the job entered the barrier.
    pub fn barrier(&mut self) -> PmiResult<()> {
        self.barrier_enter()?;
        self.barrier_wait()
    }

    /// Reads until the entered barrier ends.
    fn barrier_wait(&mut self) -> PmiResult<()> {
        let m = match std::mem::replace(&mut self.barrier, Barrier::Idle) {
            Barrier::Ended(m) => m,
            Barrier::Entered => self.recv()?,
            Barrier::Idle => return Err(PmiError::Protocol("no barrier was entered".into())),
        };
        Self::check(m, "barrier_out").map(|_| ())
    }

    /// The first half of [`Client::barrier`]: announces this rank's arrival and returns at
    /// once; [`Client::barrier_poll`] then tells when every rank arrived. Other requests may
    /// be made in between (see the module's comment).
    pub fn barrier_enter(&mut self) -> PmiResult<()> {
        if !matches!(self.barrier, Barrier::Idle) {
            return Err(PmiError::Protocol(
                "a barrier was entered while the last one has not ended".into(),
            ));
        }
        self.send(&Message::new("barrier_in"))?;
        self.barrier = Barrier::Entered;
        Ok(())
    }

    /// After [`Client::barrier_enter`]: `Ok(true)` once every rank arrived (the answer is
    /// read), `Ok(false)` if the launcher has not answered yet. Never waits for a first byte;
    /// an answer partly arrived is read to its end (the launcher writes it whole).
    pub fn barrier_poll(&mut self) -> PmiResult<bool> {
        if matches!(self.barrier, Barrier::Entered) && self.reader.buffer().is_empty() {
            let mut pfd = libc::pollfd {
                fd: self.reader.get_ref().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: pfd is one valid pollfd; a zero timeout only inspects the descriptor.
            let n = unsafe { libc::poll(&mut pfd, 1, 0) };
            if n == 0 || (n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted)
            {
                return Ok(false);
            }
            if n < 0 {
                return Err(PmiError::Io {
                    during: "polling for cmd=barrier_out".into(),
                    err: io::Error::last_os_error(),
                });
            }
        }
        self.barrier_wait().map(|_| true)
    }

    pub fn finalize(&mut self) -> PmiResult<()> {
        self.request(Message::new("finalize"), "finalize_ack")
            .map(|_| ())
    }

    /// Asks the launcher to end the job with `code`; does not wait for an answer (the
    /// launcher answers by killing the job).
    pub fn abort(&mut self, code: i32, msg: &str) -> PmiResult<()> {
        self.writer
            .write_all(abort_line(code, msg).as_bytes())
            .map_err(|err| PmiError::Io {
                during: "sending cmd=abort".into(),
                err,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    #[test]
    fn barrier_in_two_halves_never_waits_for_the_answer() {
        let (ours, mut launcher) = UnixStream::pair().unwrap();
        let mut c = Client::with_fd(OwnedFd::from(ours), 0, 2).unwrap();
        c.barrier_enter().unwrap();
        let mut got = [0u8; 15];
        launcher.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"cmd=barrier_in\n");
        assert!(!c.barrier_poll().unwrap(), "no answer yet");
        // An answer arriving in two parts is read whole once its first byte is there.
        launcher.write_all(b"cmd=barrier").unwrap();
        let rest = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            launcher.write_all(b"_out rc=0\n").unwrap();
            launcher
        });
        assert!(c.barrier_poll().unwrap());
        let mut launcher = rest.join().unwrap();
        // A refusal is an error, not "done".
        c.barrier_enter().unwrap();
        launcher.read_exact(&mut got).unwrap();
        launcher
            .write_all(b"cmd=barrier_out rc=1 msg=no\n")
            .unwrap();
        assert!(c.barrier_poll().is_err());
    }

    /// A client whose KVS name is known, as after init, and the launcher's end.
    fn initialized() -> (Client, UnixStream) {
        let (ours, launcher) = UnixStream::pair().unwrap();
        let mut c = Client::with_fd(OwnedFd::from(ours), 0, 2).unwrap();
        c.info = Some(JobInfo {
            rank: 0,
            size: 2,
            kvsname: "kvs".into(),
            appnum: None,
            universe_size: None,
            keylen_max: 64,
            vallen_max: 256,
        });
        (c, launcher)
    }

    fn read_line(s: &mut UnixStream) -> String {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while b[0] != b'\n' {
            s.read_exact(&mut b).unwrap();
            line.push(b[0]);
        }
        String::from_utf8(line).unwrap()
    }

    #[test]
    fn a_get_during_a_split_barrier_keeps_a_barrier_out_that_comes_first() {
        // The CI failure this guards: MPI_Finalize entered the barrier, progress looked up a
        // card, the launcher ended the barrier before answering the get. The get must get
        // its value and barrier_poll the barrier's end, not each other's answers.
        let (mut c, mut launcher) = initialized();
        c.barrier_enter().unwrap();
        assert_eq!(read_line(&mut launcher), "cmd=barrier_in\n");
        launcher
            .write_all(b"cmd=barrier_out rc=0\ncmd=get_result rc=0 msg=success value=card1\n")
            .unwrap();
        assert_eq!(c.get("k").unwrap().as_deref(), Some("card1"));
        assert!(read_line(&mut launcher).starts_with("cmd=get "));
        assert!(
            c.barrier_poll().unwrap(),
            "the barrier_out read by get is reported"
        );
        assert!(c.barrier_poll().is_err(), "no barrier is entered any more");

        // The other order: the get's answer first, the barrier's end later.
        c.barrier_enter().unwrap();
        read_line(&mut launcher);
        launcher
            .write_all(b"cmd=get_result rc=0 msg=success value=card2\n")
            .unwrap();
        assert_eq!(c.get("k").unwrap().as_deref(), Some("card2"));
        read_line(&mut launcher);
        assert!(!c.barrier_poll().unwrap(), "the barrier has not ended");
        launcher.write_all(b"cmd=barrier_out rc=0\n").unwrap();
        assert!(c.barrier_poll().unwrap());

        // Outside a barrier, a barrier_out answering a get is the launcher's error.
        launcher.write_all(b"cmd=barrier_out rc=0\n").unwrap();
        assert!(matches!(c.get("k"), Err(PmiError::Protocol(_))));

        // A blocking barrier still works, and a refused one is an error.
        launcher.write_all(b"cmd=barrier_out rc=0\n").unwrap();
        c.barrier().unwrap();
        launcher
            .write_all(b"cmd=barrier_out rc=1 msg=no\n")
            .unwrap();
        assert!(c.barrier().is_err());
    }
}
