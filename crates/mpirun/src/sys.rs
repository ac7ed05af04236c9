//! The few system calls the launcher needs, wrapped once so the rest is safe code.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A connected pair of Unix stream sockets, both close-on-exec.
pub fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints for socketpair to fill.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: socketpair succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Moves `fd` to a number >= 3 (so the child's stdio set-up cannot overwrite it).
pub fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() >= 3 {
        return Ok(fd);
    }
    // SAFETY: fd is open; F_DUPFD_CLOEXEC makes a new descriptor we then own.
    let new = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) })?;
    // SAFETY: new was just created by fcntl and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on an open descriptor only change its status flags.
    unsafe {
        let fl = check(libc::fcntl(fd, libc::F_GETFL))?;
        check(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK))?;
    }
    Ok(())
}

/// read(2); `Ok(0)` is end of file.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of buf.len() bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// The signals the launcher handles through a signalfd instead of handlers.
pub const HANDLED: [libc::c_int; 5] = [
    libc::SIGCHLD,
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
];

/// Blocks [`HANDLED`] and returns a signalfd that reports them.
pub fn signalfd() -> io::Result<OwnedFd> {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid sigset_t; the launcher is single-threaded when this runs, so
    // blocking with sigprocmask affects the only thread.
    unsafe {
        libc::sigemptyset(&mut set);
        for s in HANDLED {
            libc::sigaddset(&mut set, s);
        }
        check(libc::sigprocmask(
            libc::SIG_BLOCK,
            &set,
            std::ptr::null_mut(),
        ))?;
        let fd = check(libc::signalfd(
            -1,
            &set,
            libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
        ))?;
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Signals waiting on the signalfd.
pub fn read_signals(fd: RawFd) -> Vec<libc::c_int> {
    let mut out = Vec::new();
    loop {
        // SAFETY: signalfd_siginfo is plain data.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: info is valid for writes of `size` bytes.
        let n = unsafe { libc::read(fd, (&mut info as *mut libc::signalfd_siginfo).cast(), size) };
        if n != size as isize {
            return out;
        }
        out.push(info.ssi_signo as libc::c_int);
    }
}

/// mpirun's soft open-file limit before `raise_nofile` (u64::MAX: not raised), given back to
/// the ranks so a program sees the limit it was started with.
static NOFILE_SOFT: AtomicU64 = AtomicU64::new(u64::MAX);
/// The hard open-file limit (set with NOFILE_SOFT).
static NOFILE_HARD: AtomicU64 = AtomicU64::new(u64::MAX);

/// Raises mpirun's soft open-file limit to the hard limit: it holds about three descriptors
/// per local rank (output pipes, PMI socket), so the usual 1024 ran out at 337 ranks.
pub fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 || lim.rlim_cur >= lim.rlim_max {
            return;
        }
        let soft = lim.rlim_cur;
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
            NOFILE_HARD.store(lim.rlim_max, Ordering::Relaxed);
            NOFILE_SOFT.store(soft, Ordering::Relaxed);
        }
    }
}

/// In the child between fork and exec (async-signal-safe calls only): die with the
/// launcher, unblock signals, restore SIGPIPE and the soft open-file limit mpirun started
/// with, and let `keep` (if >= 0) survive exec.
pub fn child_setup(parent: libc::pid_t, keep: RawFd) -> io::Result<()> {
    // SAFETY: only async-signal-safe calls on plain data; we are in a freshly forked child.
    unsafe {
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        // The launcher may have died before prctl took effect.
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        check(libc::sigprocmask(
            libc::SIG_SETMASK,
            &set,
            std::ptr::null_mut(),
        ))?;
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let soft = NOFILE_SOFT.load(Ordering::Relaxed);
        if soft != u64::MAX {
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: NOFILE_HARD.load(Ordering::Relaxed),
            };
            check(libc::setrlimit(libc::RLIMIT_NOFILE, &lim))?;
        }
        if keep >= 0 {
            check(libc::fcntl(keep, libc::F_SETFD, 0))?;
        }
    }
    Ok(())
}

/// The CPUs this process may run on, ascending (empty if the kernel will not say).
pub fn affinity() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET only reads the set, for indices below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// A CPU set holding `cpus`, made before fork so the child only has to apply it.
pub fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; an all-zero set is empty.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu` came from `affinity`, so it is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    set
}

/// In the child between fork and exec: binds the calling process to `set`. A failure (the
/// CPU left our cpuset meanwhile) is ignored: binding only helps performance.
pub fn bind_child(set: &libc::cpu_set_t) {
    // SAFETY: sched_setaffinity is a plain system call (async-signal-safe) reading `set`.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
}

pub enum Exit {
    Code(i32),
    Signal(i32),
}

/// Whether `pid` is in the middle of exiting (the kernel's PF_EXITING in /proc/PID/stat's
/// flags): it has died but cannot be reaped yet. Its sockets close during that time, so a
/// peer can report its death before it is a zombie.
pub fn is_exiting(pid: libc::pid_t) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // After "pid (comm) ": state ppid pgrp session tty_nr tpgid flags ...
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    rest.split_whitespace()
        .nth(6)
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|f| f & PF_EXITING != 0)
}

/// Reaps one exited child, if any has exited.
pub fn reap() -> Option<(libc::pid_t, Exit)> {
    let mut status = 0;
    // SAFETY: status is a valid int for waitpid to fill.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    if pid <= 0 {
        return None;
    }
    let exit = if libc::WIFSIGNALED(status) {
        Exit::Signal(libc::WTERMSIG(status))
    } else {
        Exit::Code(libc::WEXITSTATUS(status))
    };
    Some((pid, exit))
}

/// Sends `sig` to the process group a rank leads (its children included) and, if it has
/// not been reaped (so its pid cannot have been reused), to the rank itself.
pub fn kill_rank(pid: libc::pid_t, sig: libc::c_int, alive: bool) {
    // SAFETY: kill has no memory effects; a group with no members left just yields ESRCH
    // (the kernel does not reuse a pid while it names a live process group).
    unsafe {
        libc::kill(-pid, sig);
        if alive {
            libc::kill(pid, sig);
        }
    }
}

pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    loop {
        // SAFETY: fds is a valid array of fds.len() pollfd structures.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether reading our stdin would not stop us: not a terminal, or we are its foreground.
pub fn stdin_usable() -> bool {
    // SAFETY: isatty/tcgetpgrp/getpgrp only query process and terminal state.
    unsafe {
        if libc::fcntl(0, libc::F_GETFD) < 0 {
            return false;
        }
        libc::isatty(0) == 0 || libc::tcgetpgrp(0) == libc::getpgrp()
    }
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into a valid, owned buffer.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.into()
}

/// `n` random bytes as hex, from the kernel.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    let mut got = 0;
    while got < n {
        // SAFETY: the buffer tail is valid for writes of n - got bytes.
        let r = unsafe { libc::getrandom(bytes[got..].as_mut_ptr().cast(), n - got, 0) };
        if r <= 0 {
            // No entropy source: fall back on time and pid, still unique enough per host.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            return format!("{:0width$x}", t ^ std::process::id() as u128, width = 2 * n)[..2 * n]
                .to_string();
        }
        got += r as usize;
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// This machine's IPv4 addresses: (interface, address, interface is up).
pub fn ipv4_addrs() -> io::Result<Vec<(String, std::net::Ipv4Addr, bool)>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    check(unsafe { libc::getifaddrs(&mut list) })?;
    let mut out = Vec::new();
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        // SAFETY: ifa_addr, when set, points to a sockaddr whose family tells its type.
        if !ifa.ifa_addr.is_null() && unsafe { (*ifa.ifa_addr).sa_family } as i32 == libc::AF_INET {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            out.push((
                name.to_string_lossy().into_owned(),
                std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                ifa.ifa_flags & libc::IFF_UP as libc::c_uint != 0,
            ));
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(out)
}

/// The address for an `--iface` value: an IP address as is, or the first IPv4 address of
/// the interface of that name.
pub fn iface_addr(spec: &str) -> io::Result<std::net::IpAddr> {
    let spec = spec.trim();
    if let Ok(ip) = spec.parse::<std::net::IpAddr>() {
        return Ok(ip);
    }
    ipv4_addrs()?
        .into_iter()
        .find(|(name, _, _)| name == spec)
        .map(|(_, ip, _)| std::net::IpAddr::V4(ip))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("--iface {spec:?}: no such interface with an IPv4 address"),
            )
        })
}

/// An address of this machine other hosts may reach, for a job across hosts without
/// --iface: the hostname's address if it is one of ours and not loopback, else the first
/// non-loopback address of an interface that is up; None if there is none.
pub fn reachable_addr(hostname: &str) -> Option<std::net::Ipv4Addr> {
    use std::net::ToSocketAddrs;
    let ours: Vec<std::net::Ipv4Addr> = ipv4_addrs()
        .ok()?
        .into_iter()
        .filter(|(_, ip, up)| *up && !ip.is_loopback())
        .map(|(_, ip, _)| ip)
        .collect();
    let named = (hostname, 0)
        .to_socket_addrs()
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|a| match a.ip() {
            std::net::IpAddr::V4(ip) => Some(ip),
            _ => None,
        })
        .find(|ip| ours.contains(ip));
    named.or_else(|| ours.first().copied())
}
