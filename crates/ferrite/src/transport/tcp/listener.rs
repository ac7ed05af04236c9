//! The listening socket: its address comes from FERRITE_TCP_IF (an interface name or an IP
//! address; empty: loopback). Loopback is right for a job on one host; a job across hosts
//! needs an interface the other hosts reach: FERRITE_TCP_IF (`mpirun --iface NAME` sets it
//! for every rank) or, when it is unset, [`reachable_ip`].

use crate::runtime::config;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::{AsRawFd, RawFd};

/// The address to listen on for a FERRITE_TCP_IF value.
pub fn resolve_if(spec: &str) -> io::Result<IpAddr> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    if let Ok(ip) = spec.parse::<IpAddr>() {
        return Ok(ip);
    }
    interface_addr(spec)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("FERRITE_TCP_IF={spec:?}: no such interface with an IPv4 address"),
        )
    })
}

/// The first IPv4 address of the interface `name`.
fn interface_addr(name: &str) -> io::Result<Option<IpAddr>> {
    Ok(ipv4_addrs()?
        .into_iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, ip, _)| IpAddr::V4(ip)))
}

/// This machine's IPv4 addresses: (interface, address, interface is up).
fn ipv4_addrs() -> io::Result<Vec<(String, Ipv4Addr, bool)>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        // SAFETY: ifa_addr, when set, points to a sockaddr whose family tells its real type.
        if !ifa.ifa_addr.is_null() && unsafe { (*ifa.ifa_addr).sa_family } as i32 == libc::AF_INET {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            out.push((
                name.to_string_lossy().into_owned(),
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                ifa.ifa_flags & libc::IFF_UP as libc::c_uint != 0,
            ));
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(out)
}

/// For a job across hosts with FERRITE_TCP_IF unset: the hostname's address if it is one of
/// ours and not loopback, else the first non-loopback address of an interface that is up,
/// else loopback (then only peers on this host can connect).
pub fn reachable_ip() -> IpAddr {
    use std::net::ToSocketAddrs;
    let ours: Vec<Ipv4Addr> = ipv4_addrs()
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, ip, up)| *up && !ip.is_loopback())
        .map(|(_, ip, _)| ip)
        .collect();
    let named = (crate::runtime::host::hostname().as_str(), 0)
        .to_socket_addrs()
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|a| match a.ip() {
            IpAddr::V4(ip) => Some(ip),
            IpAddr::V6(_) => None,
        })
        .find(|ip| ours.contains(ip));
    IpAddr::V4(
        named
            .or_else(|| ours.first().copied())
            .unwrap_or(Ipv4Addr::LOCALHOST),
    )
}

pub struct Listener {
    pub sock: TcpListener,
    pub addr: SocketAddr,
    /// A descriptor kept in reserve (/dev/null) so that a connection can still be taken
    /// from the backlog and refused when the process is out of descriptors (see
    /// [`Listener::refuse_one`]).
    spare: Option<std::fs::File>,
}

fn open_spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

impl Listener {
    /// Binds a nonblocking listening socket on `ip`, any free port.
    pub fn bind(ip: IpAddr) -> io::Result<Listener> {
        let sock = TcpListener::bind(SocketAddr::new(ip, 0))?;
        sock.set_nonblocking(true)?;
        // Accepted sockets inherit the buffer sizes (the receive window is set up from them).
        set_bufs(sock.as_raw_fd());
        let addr = sock.local_addr()?;
        Ok(Listener {
            sock,
            addr,
            spare: open_spare(),
        })
    }

    /// Out of resources (accept gave an error [`out_of_resources`] knows): takes the oldest
    /// waiting connection with the spare descriptor, to be closed at once (after reading
    /// what it has of its hello: `Tcp::refuse_one`), so its dialer sees it closed and tries
    /// again later (with backoff, within its retries) instead of waiting forever for an
    /// answer from a connection nobody can accept. None when the spare is in use or even
    /// that accept failed (short of memory, not of descriptors); call
    /// [`Listener::restore_spare`] once the refused socket is closed.
    pub fn refuse_one(&mut self) -> Option<TcpStream> {
        self.spare.take()?;
        let refused = self.sock.accept().ok().map(|(s, _)| s);
        match refused {
            Some(s) if s.set_nonblocking(true).is_ok() => Some(s),
            _ => {
                self.restore_spare();
                None
            }
        }
    }

    /// The refused socket is closed: its descriptor is the spare again.
    pub fn restore_spare(&mut self) {
        if self.spare.is_none() {
            self.spare = open_spare();
        }
    }

    /// The next pending connection, nonblocking with TCP_NODELAY; None when there is none.
    pub fn accept(&self) -> io::Result<Option<TcpStream>> {
        #[cfg(test)]
        if let Some(errno) = inject::take(&inject::ACCEPT) {
            return Err(io::Error::from_raw_os_error(errno));
        }
        match self.sock.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(true)?;
                s.set_nodelay(true)?;
                Ok(Some(s))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Whether `e` says the process or the system ran short of something a connection needs:
/// descriptors (EMFILE, ENFILE) or socket memory (ENOBUFS, ENOMEM). Such failures of accept
/// and of a dial take one path (refuse or retry with backoff, then fail the peer's
/// operations; see `Tcp::accept_all` and `Action::Connect`); the answer is the hint that
/// ends the error message.
pub fn out_of_resources(e: &io::Error) -> Option<&'static str> {
    match e.raw_os_error()? {
        libc::EMFILE => Some("raise the limit: ulimit -n"),
        libc::ENFILE => Some("the system's file table is full"),
        libc::ENOBUFS | libc::ENOMEM => Some("the kernel is short of socket memory"),
        _ => None,
    }
}

/// FERRITE_TCP_SOCKBUF: fixed send and receive buffer sizes (0: the kernel's autotuning).
/// Best effort: the kernel caps them at net.core.{w,r}mem_max.
fn set_bufs(fd: RawFd) {
    let bytes: usize = config::get("FERRITE_TCP_SOCKBUF");
    if bytes == 0 {
        return;
    }
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: plain setsockopt on our socket with a valid c_int.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
}

/// Starts a nonblocking connect to `addr` (TCP_NODELAY on). The socket becomes writable when
/// the connect finished; `take_error` then says whether it succeeded.
pub fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    #[cfg(test)]
    if let Some(errno) = inject::take(&inject::CONNECT) {
        return Err(io::Error::from_raw_os_error(errno));
    }
    let (family, sa, len) = sockaddr(addr);
    // SAFETY: plain socket creation.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a socket we just created and own from here on.
    let stream = unsafe { <TcpStream as std::os::unix::io::FromRawFd>::from_raw_fd(fd) };
    stream.set_nodelay(true)?;
    set_bufs(fd);
    // SAFETY: `sa` holds a sockaddr of `len` bytes for `family`.
    let rc = unsafe { libc::connect(fd, sa.as_ptr().cast(), len) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(stream)
}

/// A socket address as raw bytes for connect(2).
fn sockaddr(addr: SocketAddr) -> (i32, Vec<u8>, libc::socklen_t) {
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: an all-zero sockaddr_in is valid.
            let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            let len = std::mem::size_of::<libc::sockaddr_in>();
            // SAFETY: sin is a plain struct of `len` bytes.
            let b = unsafe {
                std::slice::from_raw_parts((&sin as *const libc::sockaddr_in).cast::<u8>(), len)
            };
            (libc::AF_INET, b.to_vec(), len as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            // SAFETY: an all-zero sockaddr_in6 is valid.
            let mut sin: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin.sin6_port = a.port().to_be();
            sin.sin6_addr.s6_addr = a.ip().octets();
            sin.sin6_scope_id = a.scope_id();
            let len = std::mem::size_of::<libc::sockaddr_in6>();
            // SAFETY: sin is a plain struct of `len` bytes.
            let b = unsafe {
                std::slice::from_raw_parts((&sin as *const libc::sockaddr_in6).cast::<u8>(), len)
            };
            (libc::AF_INET6, b.to_vec(), len as libc::socklen_t)
        }
    }
}

/// Test-only fault injection: the next `n` accepts or dials of this thread fail with `errno`
/// (conditions such as ENOBUFS that a test cannot produce on demand).
#[cfg(test)]
pub mod inject {
    use std::cell::Cell;
    thread_local! {
        pub static ACCEPT: Cell<(i32, u32)> = const { Cell::new((0, 0)) };
        pub static CONNECT: Cell<(i32, u32)> = const { Cell::new((0, 0)) };
    }
    pub fn set(which: &'static std::thread::LocalKey<Cell<(i32, u32)>>, errno: i32, n: u32) {
        which.with(|c| c.set((errno, n)));
    }
    pub fn take(which: &'static std::thread::LocalKey<Cell<(i32, u32)>>) -> Option<i32> {
        which.with(|c| {
            let (errno, n) = c.get();
            (n > 0).then(|| {
                c.set((errno, n - 1));
                errno
            })
        })
    }
}
