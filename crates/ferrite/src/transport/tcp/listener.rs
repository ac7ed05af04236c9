//! The listening socket: its address comes from FERRITE_TCP_IF (an interface name or an IP
//! address; empty: loopback). Loopback is right for a job on one host; a job across hosts
//! needs FERRITE_TCP_IF set to an address the other hosts reach (or, later, the launcher
//! telling each rank which interface faces its peers).

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};

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
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let ifname = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if !ifa.ifa_addr.is_null() && ifname.to_bytes() == name.as_bytes() {
            // SAFETY: ifa_addr points to a sockaddr whose family tells its real type.
            let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                found = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))));
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(found)
}

pub struct Listener {
    pub sock: TcpListener,
    pub addr: SocketAddr,
}

impl Listener {
    /// Binds a nonblocking listening socket on `ip`, any free port.
    pub fn bind(ip: IpAddr) -> io::Result<Listener> {
        let sock = TcpListener::bind(SocketAddr::new(ip, 0))?;
        sock.set_nonblocking(true)?;
        let addr = sock.local_addr()?;
        Ok(Listener { sock, addr })
    }

    /// The next pending connection, nonblocking with TCP_NODELAY; None when there is none.
    pub fn accept(&self) -> io::Result<Option<TcpStream>> {
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

/// Starts a nonblocking connect to `addr` (TCP_NODELAY on). The socket becomes writable when
/// the connect finished; `take_error` then says whether it succeeded.
pub fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
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
