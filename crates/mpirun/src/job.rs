//! One job: start the ranks, serve PMI, forward I/O, and end everything when a rank fails.
//!
//! Ranks on this host are children with a PMI socketpair. A rank on another host is a child
//! too: the launcher agent (`ssh host ...`), whose stdout/stderr are the rank's and whose
//! exit is the rank's; it reaches PMI over TCP (PMI_PORT/PMI_ID) on a listener mpirun opens
//! only for such jobs, and its connection is matched to the rank by its `initack`.
//!
//! Everything happens in one poll loop over a signalfd (child exits, Ctrl-C, SIGTERM), each
//! rank's PMI socket, stdout and stderr pipes, mpirun's stdin and rank 0's stdin pipe. It
//! blocks in poll when nothing happens; the only timers are the SIGTERM-to-SIGKILL grace
//! while tearing down and a bounded wait for output after the last rank exited.

use crate::bind::{self, MapBy};
use crate::cli::{self, EnvMode, Options};
use crate::hosts::{self, Placement};
use crate::output::{self, LineForwarder};
use crate::sys::{self, Exit};
use ferrite_pmi::{Event, LineBuffer, Message, Server};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// SIGTERM first; ranks still alive after this get SIGKILL.
const KILL_GRACE: Duration = Duration::from_millis(500);
/// Accepted PMI_PORT connections kept while they have not said which rank they are.
const MAX_UNCLAIMED: usize = 64;
/// After the last rank exited, how long to keep forwarding output its children still write.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);
/// How long a failure waits for ranks still dying to become reapable (see `reap_all_but`).
const DYING_WAIT: Duration = Duration::from_millis(500);

/// Where a rank's stdout or stderr goes.
#[derive(Clone)]
enum Sink {
    Stdout,
    Stderr,
    /// --output-filename, -outfile-pattern, -errfile-pattern (shared by the ranks whose
    /// pattern names the same file).
    File(Rc<File>),
}

/// A rank's stdout and stderr files, each with whether other ranks write to it too.
type RankFiles = [Option<(Rc<File>, bool)>; 2];

struct Stream {
    fd: OwnedFd,
    fwd: LineForwarder,
    sink: Sink,
}

struct Rank {
    pid: libc::pid_t,
    /// Index into the placement's hosts.
    host: usize,
    pmi: Option<OwnedFd>,
    pmi_in: LineBuffer,
    pmi_out: Vec<u8>,
    stdout: Option<Stream>,
    stderr: Option<Stream>,
    exited: bool,
}

/// What ended the job early; the first one wins.
struct Failure {
    code: i32,
}

/// An accepted PMI_PORT connection that has not yet said which rank it is.
struct Unclaimed {
    fd: OwnedFd,
    buf: LineBuffer,
}

pub struct Job {
    opts: Options,
    place: Placement,
    /// Remote ranks' PMI: the listener and the address they are told (PMI_PORT).
    pmi_listener: Option<TcpListener>,
    pmi_port: String,
    /// What remote ranks' initack must carry (FERRITE_PMI_SECRET).
    pmi_secret: String,
    unclaimed: Vec<Unclaimed>,
    /// mpirun's own CPUs and where they sit, which ranks are bound to (see bind.rs).
    topo: Vec<bind::Cpu>,
    /// Per rank: the files its stdout and stderr go to (None: mpirun's own).
    out_files: Vec<RankFiles>,
    ranks: Vec<Rank>,
    server: Server,
    sigfd: OwnedFd,
    stdin_open: bool,
    rank0_stdin: Option<OwnedFd>,
    stdin_buf: Vec<u8>,
    failure: Option<Failure>,
    kill_at: Option<Instant>,
    killed_hard: bool,
    last_exit: Option<Instant>,
    /// When the job's time limit (--timeout, MPIEXEC_TIMEOUT) runs out.
    time_limit: Option<Instant>,
}

fn report(msg: &str) {
    let _ = writeln!(io::stderr(), "mpirun: {msg}");
}

fn write_out(sink: &Sink, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    // A closed stdout (e.g. `mpirun ... | head`) must not stop the job: drop what can't go.
    match sink {
        Sink::Stderr => {
            let mut e = io::stderr().lock();
            let _ = e.write_all(bytes).and_then(|_| e.flush());
        }
        Sink::Stdout => {
            let mut o = io::stdout().lock();
            let _ = o.write_all(bytes).and_then(|_| o.flush());
        }
        // Opened with O_APPEND: whole lines from ranks sharing the file do not mix.
        Sink::File(f) => {
            let _ = (&**f).write_all(bytes);
        }
    }
}

/// Opens the output files the patterns name for every rank (creating their directories,
/// truncating each file once); per rank and stream, the file and whether other ranks
/// write to it too.
fn open_output_files(opts: &Options, place: &Placement) -> io::Result<Vec<RankFiles>> {
    let mut open: HashMap<String, (Rc<File>, usize)> = HashMap::new();
    let mut paths = Vec::new();
    for r in 0..opts.np {
        let host = &place.names[place.host_of[r as usize]];
        let app = opts.app_of(r).0;
        let mut pair = [None, None];
        for (k, pat) in [&opts.stdout_pattern, &opts.stderr_pattern]
            .iter()
            .enumerate()
        {
            let Some(pat) = pat else { continue };
            let path = cli::expand_pattern(pat, r, host, app);
            if !open.contains_key(&path) {
                let p = std::path::Path::new(&path);
                if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
                }
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(true)
                    .open(p)
                    .and_then(|f| {
                        drop(f);
                        std::fs::OpenOptions::new().append(true).open(p)
                    })
                    .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
                open.insert(path.clone(), (Rc::new(f), 0));
            }
            if let Some(e) = open.get_mut(&path) {
                e.1 += 1;
            }
            pair[k] = Some(path);
        }
        paths.push(pair);
    }
    Ok(paths
        .into_iter()
        .map(|pair| {
            pair.map(|p| p.and_then(|p| open.get(&p).map(|(f, users)| (f.clone(), *users > 1))))
        })
        .collect())
}

/// Finds `program` on mpirun's PATH, for ranks whose environment has no PATH of its own.
fn on_path(program: &str) -> String {
    if program.contains('/') {
        return program.to_string();
    }
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| format!("{d}/{program}"))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .unwrap_or_else(|| program.to_string())
}

impl Job {
    /// Makes the job's name and signal handling; starts no process yet.
    pub fn new(opts: Options) -> io::Result<Job> {
        let kvsname = format!("kvs_{}_{}", std::process::id(), sys::random_hex(8));
        let sigfd = sys::signalfd()?;
        let hostname = sys::hostname();
        let place = if opts.hosts.is_empty() {
            Placement::all_local(opts.np, &hostname)
        } else {
            Placement::new(opts.np, &opts.hosts, &hostname, opts.map_by == MapBy::Node)
        };
        let mut server = Server::new(&kvsname, opts.np);
        for r in 0..opts.np {
            server.set_appnum(r, opts.app_of(r).0 as u32);
        }
        let out_files = open_output_files(&opts, &place)?;
        if place.names.len() > 1 {
            server.set_job_value("PMI_process_mapping", &place.process_mapping());
        }
        let (mut pmi_listener, mut pmi_port) = (None, String::new());
        if place.any_remote() {
            // Only on the address the job uses: the --iface one, else the address of ours
            // that others reach this host by (the one remote ranks are told). Only when
            // neither is known, every address, reached through the hostname.
            let reachable = sys::reachable_addr(&hostname);
            let ip = match (&opts.iface, reachable) {
                (Some(spec), _) => sys::iface_addr(spec)?,
                (None, Some(v4)) => IpAddr::V4(v4),
                (None, None) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            };
            let l = TcpListener::bind(SocketAddr::new(ip, 0))?;
            l.set_nonblocking(true)?;
            let port = l.local_addr()?.port();
            pmi_port = if ip.is_unspecified() {
                format!("{hostname}:{port}")
            } else {
                SocketAddr::new(ip, port).to_string()
            };
            pmi_listener = Some(l);
        }
        Ok(Job {
            server,
            opts,
            place,
            pmi_listener,
            pmi_port,
            pmi_secret: sys::random_hex(16),
            unclaimed: Vec::new(),
            topo: bind::topology(&sys::affinity()),
            out_files,
            ranks: Vec::new(),
            sigfd,
            stdin_open: false,
            rank0_stdin: None,
            stdin_buf: Vec::new(),
            failure: None,
            kill_at: None,
            killed_hard: false,
            last_exit: None,
            time_limit: None,
        })
    }

    /// The variables rank `r` gets besides what it inherits: the job-wide and its program's
    /// settings, then where it stands in the job (PMI_*, MPI_LOCAL*, OMPI_COMM_WORLD_*).
    /// `inherited`: mpirun's own variables that the environment options pass on.
    fn rank_vars(&self, r: u32, remote: bool) -> Vec<(String, String)> {
        let (_, app) = self.opts.app_of(r);
        let (local_rank, local_n) = self.place.local_rank(r as usize);
        let mut vars: Vec<(String, String)> = Vec::new();
        let mode = self.opts.env_mode_of(app);
        // A rank on this host inherits all of mpirun's variables unless a mode says
        // otherwise; a remote one gets the listed ones. FERRITE_* always pass.
        if remote || *mode != EnvMode::All {
            let mut own: Vec<(String, String)> = std::env::vars()
                .filter(|(k, _)| {
                    (k.starts_with("FERRITE_") && k != "FERRITE_PMI_SECRET")
                        || matches!(mode, EnvMode::List(names) if names.contains(k))
                })
                .collect();
            own.sort();
            vars.extend(own);
        }
        vars.extend(self.opts.env.iter().cloned());
        vars.extend(app.env.iter().cloned());
        if let Some(i) = &self.opts.iface {
            vars.push(("FERRITE_TCP_IF".into(), i.clone()));
        }
        let n = self.opts.np.to_string();
        let (rank, lr, ln) = (r.to_string(), local_rank.to_string(), local_n.to_string());
        for (k, v) in [
            ("PMI_RANK", &rank),
            ("PMI_SIZE", &n),
            ("MPI_LOCALRANKID", &lr),
            ("MPI_LOCALNRANKS", &ln),
            // Scripts written for Open MPI's mpirun read these.
            ("OMPI_COMM_WORLD_RANK", &rank),
            ("OMPI_COMM_WORLD_SIZE", &n),
            ("OMPI_COMM_WORLD_LOCAL_RANK", &lr),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", &ln),
            ("OMPI_COMM_WORLD_NODE_RANK", &lr),
        ] {
            vars.push((k.to_string(), v.clone()));
        }
        if remote {
            vars.push(("PMI_PORT".into(), self.pmi_port.clone()));
            vars.push(("PMI_ID".into(), rank));
        }
        vars
    }

    /// The agent command for remote rank `r`: `CMD host sh -c READ sh env VAR=VALUE...
    /// program args`, where READ reads the job's PMI secret from the first line of standard
    /// input into FERRITE_PMI_SECRET and execs the rest: the secret never appears on a
    /// command line, where any user of either host could read it with `ps`. mpirun writes
    /// that line first on every remote rank's standard input (see `spawn`). With a working
    /// directory, READ also changes to it (passed as the script's $0). For srun, the host
    /// goes in `--nodelist=host --nodes=1 --ntasks=1`.
    fn remote_command(&self, r: u32) -> Command {
        let host = &self.place.names[self.place.host_of[r as usize]];
        let (_, app) = self.opts.app_of(r);
        let cd = if app.wdir.is_some() {
            "cd -- \"$0\" && "
        } else {
            ""
        };
        let mut words = vec![
            "sh".to_string(),
            "-c".to_string(),
            format!(
                "IFS= read -r FERRITE_PMI_SECRET && export FERRITE_PMI_SECRET && {cd}exec \"$@\""
            ),
            app.wdir.clone().unwrap_or_else(|| "sh".to_string()),
            "env".to_string(),
        ];
        let vars = self.rank_vars(r, true);
        words.extend(vars.into_iter().map(|(k, v)| format!("{k}={v}")));
        words.push(app.program.clone());
        words.extend(app.args.iter().cloned());
        let mut agent = self.opts.launcher.split_whitespace();
        let prog = agent.next().unwrap_or("ssh");
        // ssh and rsh hand the command to the remote user's shell: quote every word.
        let base = prog.rsplit('/').next().unwrap_or(prog);
        if matches!(base, "ssh" | "rsh") {
            words = words.iter().map(|w| hosts::shell_quote(w)).collect();
        }
        let mut cmd = Command::new(prog);
        cmd.args(agent);
        if base == "srun" {
            // One task on that node, as a step that may share the allocation's CPUs with
            // the others; srun's own MPI plugin stays out (the rank speaks PMI to us).
            cmd.args([
                format!("--nodelist={host}"),
                "--nodes=1".into(),
                "--ntasks=1".into(),
                "--overlap".into(),
                "--mpi=none".into(),
                "--kill-on-bad-exit=1".into(),
            ]);
        } else {
            cmd.arg(host);
        }
        cmd.args(words)
            // The agent must not find a PMI connection of mpirun's own launcher.
            .env_remove("PMI_FD")
            .env_remove("PMI_PORT")
            .env_remove("PMI_ID");
        cmd
    }

    fn spawn(&mut self, r: u32) -> io::Result<Rank> {
        let n = self.opts.np;
        let host = self.place.host_of[r as usize];
        let remote = !self.place.local[host];
        let (local_rank, local_n) = self.place.local_rank(r as usize);
        let (mut cmd, ours, theirs) = if remote {
            (self.remote_command(r), None, None)
        } else {
            let (ours, theirs) = sys::socketpair()?;
            let theirs = sys::above_stdio(theirs)?;
            let (_, app) = self.opts.app_of(r);
            let clear = *self.opts.env_mode_of(app) != EnvMode::All;
            let mut cmd = Command::new(if clear {
                on_path(&app.program)
            } else {
                app.program.clone()
            });
            if clear {
                cmd.env_clear();
            }
            if let Some(w) = &app.wdir {
                cmd.current_dir(w);
            }
            cmd.args(&app.args)
                .envs(self.rank_vars(r, false))
                .env("PMI_FD", theirs.as_raw_fd().to_string());
            (cmd, Some(ours), Some(theirs))
        };
        let child_fd = theirs.as_ref().map_or(-1, |t| t.as_raw_fd());
        cmd.stdin(if r == 0 || remote {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a teardown also reaches the rank's children.
        .process_group(0);
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // Binding counts the ranks of this host only; remote agents are not bound here.
        let cpus = if remote {
            None
        } else {
            bind::cpus_for(
                self.opts.bind,
                self.opts.map_by,
                local_rank,
                local_n,
                &self.topo,
            )
        };
        if self.opts.report_bindings {
            let name = &self.place.names[host];
            report(&match (&cpus, remote) {
                (_, true) => format!("rank {r} on {name}: not bound by this mpirun (remote)"),
                (Some(c), _) => {
                    format!(
                        "rank {r} on {name}: bound to CPUs {}",
                        bind::format_cpu_list(c)
                    )
                }
                (None, _) => format!("rank {r} on {name}: not bound"),
            });
        }
        let cpu = cpus.as_deref().map(sys::cpu_set);
        // SAFETY: the closure only makes async-signal-safe calls (see sys::child_setup).
        unsafe {
            cmd.pre_exec(move || {
                if let Some(set) = &cpu {
                    sys::bind_child(set);
                }
                sys::child_setup(parent, child_fd)
            })
        };
        let mut child = cmd.spawn()?;
        drop(theirs);
        if let Some(ours) = &ours {
            sys::set_nonblocking(ours.as_raw_fd())?;
        }
        let files = self.out_files[r as usize].clone();
        let (tag, prepend) = (self.opts.tag_output, self.opts.prepend_rank);
        let pipe = |p: Option<OwnedFd>, k: usize| -> io::Result<Stream> {
            let fd = p.ok_or_else(|| io::Error::other("missing pipe"))?;
            sys::set_nonblocking(fd.as_raw_fd())?;
            let stream = ["stdout", "stderr"][k];
            let (sink, shared) = match &files[k] {
                Some((f, shared)) => (Sink::File(f.clone()), *shared),
                None if k == 0 => (Sink::Stdout, n > 1),
                None => (Sink::Stderr, n > 1),
            };
            Ok(Stream {
                fd,
                fwd: LineForwarder::new(output::prefix(r, stream, tag, prepend), shared),
                sink,
            })
        };
        let stdout = pipe(child.stdout.take().map(OwnedFd::from), 0)?;
        let stderr = pipe(child.stderr.take().map(OwnedFd::from), 1)?;
        if let Some(mut stdin) = child.stdin.take() {
            if remote {
                // The secret's line, written while the pipe is still blocking (it fits in
                // the pipe's buffer). Other ranks then see end of file, as from /dev/null.
                stdin.write_all(format!("{}\n", self.pmi_secret).as_bytes())?;
            }
            if r == 0 {
                let fd = OwnedFd::from(stdin);
                sys::set_nonblocking(fd.as_raw_fd())?;
                self.rank0_stdin = Some(fd);
            }
        }
        if !remote {
            // A remote rank becomes a client when its connection says who it is.
            self.server.add_client(r as usize, Some(r));
        }
        Ok(Rank {
            pid: child.id() as libc::pid_t,
            host,
            pmi: ours,
            pmi_in: LineBuffer::new(),
            pmi_out: Vec::new(),
            stdout: Some(stdout),
            stderr: Some(stderr),
            exited: false,
        })
    }

    fn who(&self, r: usize) -> String {
        let rank = &self.ranks[r];
        if self.place.local[rank.host] {
            format!(
                "rank {r} (pid {}) on {}",
                rank.pid, self.place.names[rank.host]
            )
        } else {
            format!(
                "rank {r} on {} (launcher agent pid {})",
                self.place.names[rank.host], rank.pid
            )
        }
    }

    /// Records the first failure and starts tearing the job down.
    fn fail(&mut self, code: i32, msg: &str) {
        if self.failure.is_none() {
            report(msg);
            self.failure = Some(Failure { code });
        }
        self.teardown();
    }

    fn teardown(&mut self) {
        if self.kill_at.is_some() {
            return;
        }
        self.kill_at = Some(Instant::now() + KILL_GRACE);
        // A finalize already sent but not yet read counts: read what the ranks sent.
        let mut buf = vec![0u8; 4096];
        for r in 0..self.ranks.len() {
            while !self.ranks[r].exited && self.read_pmi(r, &mut buf) {}
        }
        // Ranks that have finalized are left to finish what they do after MPI_Finalize (as
        // Hydra, srun and Open MPI do): killing them would lose their output.
        for (r, rank) in self.ranks.iter().enumerate() {
            if !rank.exited && !self.server.is_finalized(r) {
                sys::kill_rank(rank.pid, libc::SIGTERM, true);
            }
        }
        self.stdin_open = false;
        self.rank0_stdin = None;
    }

    fn kill_hard(&mut self) {
        self.killed_hard = true;
        // Exited ranks too: their process groups may still hold their children. Finalized
        // ranks still running are spared (see `teardown`).
        for (r, rank) in self.ranks.iter().enumerate() {
            if rank.exited || !self.server.is_finalized(r) {
                sys::kill_rank(rank.pid, libc::SIGKILL, !rank.exited);
            }
        }
    }

    /// Runs the job to its end; returns mpirun's exit code.
    pub fn run(mut self) -> i32 {
        self.time_limit = self
            .opts
            .timeout
            .map(|s| Instant::now() + Duration::from_secs(s));
        for r in 0..self.opts.np {
            match self.spawn(r) {
                Ok(rank) => self.ranks.push(rank),
                Err(e) => {
                    let code = match e.kind() {
                        io::ErrorKind::NotFound => 127,
                        io::ErrorKind::PermissionDenied => 126,
                        _ => 1,
                    };
                    let host = self.place.host_of[r as usize];
                    let app = self.opts.app_of(r).1;
                    let msg = if self.place.local[host] {
                        match &app.wdir {
                            Some(w) if !std::path::Path::new(w).is_dir() => {
                                format!("cannot start rank {r}: working directory {w:?}: {e}")
                            }
                            _ => format!("cannot start rank {r}: {:?}: {e}", app.program),
                        }
                    } else {
                        format!(
                            "cannot start rank {r} on {}: launcher {:?}: {e}",
                            self.place.names[host], self.opts.launcher
                        )
                    };
                    self.fail(code, &msg);
                    break;
                }
            }
        }
        self.stdin_open = self.rank0_stdin.is_some() && sys::stdin_usable();
        if !self.stdin_open {
            self.rank0_stdin = None;
        }
        self.event_loop();
        for r in 0..self.ranks.len() {
            for mut s in [self.ranks[r].stdout.take(), self.ranks[r].stderr.take()]
                .into_iter()
                .flatten()
            {
                write_out(&s.sink, &s.fwd.finish());
            }
        }
        if self.failure.is_some() || self.ranks.iter().any(|r| !r.exited) {
            self.kill_hard();
        }
        self.failure.map_or(0, |f| f.code)
    }

    fn done(&self) -> bool {
        if !self.ranks.iter().all(|r| r.exited) {
            return false;
        }
        let open = self
            .ranks
            .iter()
            .any(|r| r.stdout.is_some() || r.stderr.is_some());
        !open
            || self
                .last_exit
                .is_some_and(|t| t.elapsed() >= DRAIN_AFTER_EXIT)
    }

    fn event_loop(&mut self) {
        #[derive(Clone, Copy)]
        enum Src {
            Signals,
            Pmi(usize),
            Out(usize, bool),
            Stdin,
            Rank0Stdin,
            PmiListener,
            Unclaimed(usize),
        }
        let mut buf = vec![0u8; 64 * 1024];
        while !self.done() {
            let mut fds = Vec::new();
            let mut srcs = Vec::new();
            let mut add = |fd: RawFd, events: i16, src: Src| {
                fds.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                });
                srcs.push(src);
            };
            add(self.sigfd.as_raw_fd(), libc::POLLIN, Src::Signals);
            for (r, rank) in self.ranks.iter().enumerate() {
                if let Some(p) = &rank.pmi {
                    let ev = if rank.pmi_out.is_empty() {
                        libc::POLLIN
                    } else {
                        libc::POLLIN | libc::POLLOUT
                    };
                    add(p.as_raw_fd(), ev, Src::Pmi(r));
                }
                if let Some(s) = &rank.stdout {
                    add(s.fd.as_raw_fd(), libc::POLLIN, Src::Out(r, false));
                }
                if let Some(s) = &rank.stderr {
                    add(s.fd.as_raw_fd(), libc::POLLIN, Src::Out(r, true));
                }
            }
            if let Some(l) = &self.pmi_listener {
                add(l.as_raw_fd(), libc::POLLIN, Src::PmiListener);
            }
            for (i, u) in self.unclaimed.iter().enumerate() {
                add(u.fd.as_raw_fd(), libc::POLLIN, Src::Unclaimed(i));
            }
            if self.stdin_open && self.stdin_buf.len() < 64 * 1024 {
                add(0, libc::POLLIN, Src::Stdin);
            }
            if let (Some(fd), false) = (&self.rank0_stdin, self.stdin_buf.is_empty()) {
                add(fd.as_raw_fd(), libc::POLLOUT, Src::Rank0Stdin);
            }
            let now = Instant::now();
            let mut deadline = None;
            if let (Some(t), false) = (self.kill_at, self.killed_hard) {
                deadline = Some(t);
            }
            if let (Some(t), true) = (self.last_exit, self.ranks.iter().all(|r| r.exited)) {
                let t = t + DRAIN_AFTER_EXIT;
                deadline = Some(deadline.map_or(t, |d: Instant| d.min(t)));
            }
            if let (Some(t), None) = (self.time_limit, self.kill_at) {
                deadline = Some(deadline.map_or(t, |d: Instant| d.min(t)));
            }
            let timeout = deadline.map_or(-1, |d| {
                d.saturating_duration_since(now).as_millis().min(60_000) as i32 + 1
            });
            if let Err(e) = sys::poll(&mut fds, timeout) {
                report(&format!("poll failed: {e}"));
                self.fail(1, "ending the job");
                self.kill_hard();
                return;
            }
            if let (Some(t), false) = (self.kill_at, self.killed_hard) {
                if Instant::now() >= t {
                    self.kill_hard();
                }
            }
            if let (Some(t), None) = (self.time_limit, self.kill_at) {
                if Instant::now() >= t {
                    let secs = self.opts.timeout.unwrap_or(0);
                    self.fail(
                        255,
                        &format!(
                            "the job ran past its time limit of {secs} s (--timeout or \
                             MPIEXEC_TIMEOUT), ending it (ranks get SIGTERM, then SIGKILL)"
                        ),
                    );
                }
            }
            let mut claims = Vec::new();
            for (pfd, src) in fds.iter().zip(srcs) {
                if pfd.revents == 0 {
                    continue;
                }
                match src {
                    Src::PmiListener => self.accept_pmi(),
                    Src::Unclaimed(i) => claims.push(i),
                    Src::Signals => self.on_signals(),
                    Src::Pmi(r) => {
                        if pfd.revents & libc::POLLOUT != 0 {
                            self.flush_pmi(r);
                        }
                        if pfd.revents & !libc::POLLOUT != 0 {
                            self.read_pmi(r, &mut buf);
                        }
                    }
                    Src::Out(r, err) => self.read_output(r, err, &mut buf),
                    Src::Stdin => self.read_stdin(&mut buf),
                    Src::Rank0Stdin => self.flush_stdin(),
                }
            }
            // Highest index first: a claimed or dropped connection leaves the list.
            for i in claims.into_iter().rev() {
                self.read_unclaimed(i, &mut buf);
            }
        }
    }

    /// Takes the remote ranks' PMI connections waiting on the listener.
    fn accept_pmi(&mut self) {
        let Some(l) = &self.pmi_listener else { return };
        while let Ok((stream, _)) = l.accept() {
            // Connections that never say who they are must not pile up: the oldest goes.
            if self.unclaimed.len() >= MAX_UNCLAIMED {
                self.unclaimed.remove(0);
            }
            let _ = stream.set_nodelay(true);
            if stream.set_nonblocking(true).is_ok() {
                self.unclaimed.push(Unclaimed {
                    fd: OwnedFd::from(stream),
                    buf: LineBuffer::new(),
                });
            }
        }
    }

    /// Reads an unclaimed connection's first line: `cmd=initack pmiid=R secret=S` from
    /// remote rank R (not yet connected) with the job's secret makes it R's PMI connection;
    /// anything else closes it.
    fn read_unclaimed(&mut self, i: usize, buf: &mut [u8]) {
        let u = &mut self.unclaimed[i];
        match sys::read(u.fd.as_raw_fd(), buf) {
            Ok(0) => {
                self.unclaimed.remove(i);
                return;
            }
            Ok(n) => u.buf.push(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                return
            }
            Err(_) => {
                self.unclaimed.remove(i);
                return;
            }
        }
        let line = match u.buf.next_line() {
            Ok(None) if u.buf.pending() < 1024 => return,
            Ok(Some(line)) => line,
            _ => {
                self.unclaimed.remove(i);
                return;
            }
        };
        let claimed = Message::parse(&line)
            .ok()
            .filter(|m| m.cmd == "initack" && m.get("secret") == Some(&self.pmi_secret))
            .and_then(|m| m.get_int("pmiid"))
            .and_then(|id| usize::try_from(id).ok())
            .filter(|&r| {
                self.ranks
                    .get(r)
                    .is_some_and(|k| !self.place.local[k.host] && k.pmi.is_none() && !k.exited)
                    && self.server.rank_of(r).is_none()
            });
        let u = self.unclaimed.remove(i);
        let Some(r) = claimed else {
            return; // not one of ours: dropped
        };
        self.ranks[r].pmi = Some(u.fd);
        self.ranks[r].pmi_in = u.buf;
        self.server.add_client(r, None);
        self.serve_line(r, &line);
        self.serve_lines(r);
    }

    fn on_signals(&mut self) {
        for sig in sys::read_signals(self.sigfd.as_raw_fd()) {
            if sig == libc::SIGCHLD {
                self.reap_all();
            } else if self.kill_at.is_some() && sig != libc::SIGHUP {
                // Asked twice: no more grace.
                self.kill_hard();
            } else {
                self.fail(
                    128 + sig,
                    &format!(
                        "received {}, ending the job (ranks get SIGTERM, then SIGKILL)",
                        sys::signal_name(sig)
                    ),
                );
            }
        }
    }

    /// Every rank that has exited and can be reaped, with how it ended.
    fn reap_exits(&mut self) -> Vec<(usize, Exit)> {
        let mut exits = Vec::new();
        while let Some((pid, exit)) = sys::reap() {
            if let Some(r) = self.ranks.iter().position(|k| k.pid == pid) {
                exits.push((r, exit));
            }
        }
        exits
    }

    fn reap_all(&mut self) {
        self.reap_all_but(None);
    }

    /// Reaps every rank that has exited. Several at once: those killed by a signal count
    /// first, as the cause the others' failures (a survivor's error exit, its abort about
    /// the dead peer) follow from. `aborting` (a rank whose abort is being handled) is only
    /// marked exited: its abort, not its exit, is what it reported.
    fn reap_all_but(&mut self, aborting: Option<usize>) {
        let mut exits = self.reap_exits();
        let failing = aborting.is_some() || exits.iter().any(|(_, e)| !matches!(e, Exit::Code(0)));
        if failing && self.failure.is_none() && self.kill_at.is_none() {
            // About to name a cause: a rank still dying (killed, its sockets already closed,
            // not yet reapable) died before the failure at hand was reported. Wait for it
            // (briefly: exiting takes milliseconds) so that it is the one named.
            // (Reaped ones leave /proc, so the wait ends as soon as none is left dying. A
            // remote rank's process here is its agent, which exits when the rank did.)
            let t0 = Instant::now();
            loop {
                exits.extend(self.reap_exits());
                let dying = self
                    .ranks
                    .iter()
                    .enumerate()
                    .any(|(r, k)| !k.exited && Some(r) != aborting && sys::is_exiting(k.pid));
                if !dying || t0.elapsed() >= DYING_WAIT {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        exits.sort_by_key(|(_, exit)| !matches!(exit, Exit::Signal(_)));
        for (r, exit) in exits {
            // Whatever it told PMI before exiting (an abort, a finalize) counts first.
            let mut buf = vec![0u8; 4096];
            if Some(r) != aborting {
                while self.ranks[r].pmi.is_some() && self.read_pmi(r, &mut buf) {}
            }
            self.ranks[r].exited = true;
            self.last_exit = Some(Instant::now());
            if self.kill_at.is_some() || Some(r) == aborting {
                continue; // tearing down: exits are expected
            }
            let inited = self.server.is_initialized(r);
            let finalized = self.server.is_finalized(r);
            match exit {
                Exit::Signal(sig) => self.fail(
                    128 + sig,
                    &format!(
                        "{} was killed by {} (signal {sig}); ending the job",
                        self.who(r),
                        sys::signal_name(sig)
                    ),
                ),
                Exit::Code(code) if code != 0 => self.fail(
                    code,
                    &format!("{} exited with code {code}; ending the job", self.who(r)),
                ),
                Exit::Code(_) if inited && !finalized => self.fail(
                    1,
                    &format!(
                        "{} exited with code 0 after PMI init without PMI finalize \
                         (MPI_Finalize not called?); ending the job",
                        self.who(r)
                    ),
                ),
                Exit::Code(_) => {}
            }
        }
        self.check_barrier_deadlock();
    }

    /// A PMI barrier that waits for a rank which already exited can never complete: end
    /// the job instead of hanging.
    fn check_barrier_deadlock(&mut self) {
        if self.kill_at.is_some() || self.server.barrier_waiting() == 0 {
            return;
        }
        let gone =
            (0..self.ranks.len()).find(|&r| self.ranks[r].exited && !self.server.in_barrier(r));
        if let Some(r) = gone {
            let msg = format!(
                "{} exited while {} rank(s) wait for it in a PMI barrier; ending the job",
                self.who(r),
                self.server.barrier_waiting()
            );
            self.fail(1, &msg);
        }
    }

    /// Reads what the rank's PMI socket holds and serves it; false when nothing more is
    /// there for now (or the socket closed).
    fn read_pmi(&mut self, r: usize, buf: &mut [u8]) -> bool {
        let Some(fd) = self.ranks[r].pmi.as_ref().map(|f| f.as_raw_fd()) else {
            return false;
        };
        let n = match sys::read(fd, buf) {
            Ok(0) => {
                self.ranks[r].pmi = None;
                return false;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(_) => {
                self.ranks[r].pmi = None;
                return false;
            }
        };
        self.ranks[r].pmi_in.push(&buf[..n]);
        self.serve_lines(r)
    }

    /// Serves every complete line rank `r` sent; false when its connection was dropped.
    fn serve_lines(&mut self, r: usize) -> bool {
        loop {
            let line = match self.ranks[r].pmi_in.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => {
                    self.ranks[r].pmi = None;
                    let msg = format!(
                        "{} broke the PMI protocol: {e}; ending the job",
                        self.who(r)
                    );
                    self.fail(1, &msg);
                    return false;
                }
            };
            self.serve_line(r, &line);
        }
        self.check_barrier_deadlock();
        true
    }

    fn serve_line(&mut self, r: usize, line: &[u8]) {
        let out = self.server.handle_line(r, line);
        for (to, m) in out.replies {
            if let Ok(s) = m.format() {
                self.ranks[to].pmi_out.extend_from_slice(s.as_bytes());
                self.flush_pmi(to);
            }
        }
        for ev in out.events {
            self.on_event(r, ev);
        }
    }

    fn on_event(&mut self, from: usize, ev: Event) {
        match ev {
            Event::Abort { code, message, .. } => {
                // A rank that already died is the cause, not a survivor's abort about it
                // (a survivor can report before its SIGCHLD is read).
                if self.failure.is_none() {
                    self.reap_all_but(Some(from));
                }
                let code = if code & 0xff == 0 { 1 } else { code & 0xff };
                let msg = format!(
                    "{} aborted the job with code {code}: {}",
                    self.who(from),
                    if message.is_empty() {
                        "(no message)"
                    } else {
                        &message
                    }
                );
                self.fail(code, &msg);
            }
            Event::ProtocolError { reason, .. } => {
                let msg = format!(
                    "{} broke the PMI protocol: {reason}; ending the job",
                    self.who(from)
                );
                self.fail(1, &msg);
            }
            Event::Initialized { .. } | Event::BarrierReleased { .. } | Event::Finalized { .. } => {
            }
        }
    }

    fn flush_pmi(&mut self, r: usize) {
        let rank = &mut self.ranks[r];
        let Some(fd) = rank.pmi.as_ref().map(|f| f.as_raw_fd()) else {
            rank.pmi_out.clear();
            return;
        };
        while !rank.pmi_out.is_empty() {
            match sys::write(fd, &rank.pmi_out) {
                Ok(n) => {
                    rank.pmi_out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    rank.pmi_out.clear();
                    rank.pmi = None;
                    return;
                }
            }
        }
    }

    fn read_output(&mut self, r: usize, err: bool, buf: &mut [u8]) {
        let rank = &mut self.ranks[r];
        let slot = if err {
            &mut rank.stderr
        } else {
            &mut rank.stdout
        };
        let Some(s) = slot else { return };
        match sys::read(s.fd.as_raw_fd(), buf) {
            Ok(0) => {
                write_out(&s.sink, &s.fwd.finish());
                *slot = None;
            }
            Ok(n) => write_out(&s.sink, &s.fwd.feed(&buf[..n])),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => {
                write_out(&s.sink, &s.fwd.finish());
                *slot = None;
            }
        }
    }

    fn read_stdin(&mut self, buf: &mut [u8]) {
        let room = 64 * 1024 - self.stdin_buf.len();
        let want = room.min(buf.len());
        match sys::read(0, &mut buf[..want]) {
            Ok(0) | Err(_) => {
                self.stdin_open = false;
                if self.stdin_buf.is_empty() {
                    self.rank0_stdin = None; // EOF for rank 0
                }
            }
            Ok(n) => {
                self.stdin_buf.extend_from_slice(&buf[..n]);
                self.flush_stdin();
            }
        }
    }

    fn flush_stdin(&mut self) {
        let Some(fd) = self.rank0_stdin.as_ref().map(|f| f.as_raw_fd()) else {
            self.stdin_buf.clear();
            self.stdin_open = false;
            return;
        };
        while !self.stdin_buf.is_empty() {
            match sys::write(fd, &self.stdin_buf) {
                Ok(n) => {
                    self.stdin_buf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    // Rank 0 closed its stdin or exited: stop reading ours.
                    self.stdin_buf.clear();
                    self.rank0_stdin = None;
                    self.stdin_open = false;
                    return;
                }
            }
        }
        if !self.stdin_open {
            self.rank0_stdin = None;
        }
    }
}
