//! What the datagram [`Channel`](super::Channel) sends through: a `Port`, unreliable
//! datagrams to ranks. The channel's reliability ([`Reliable`](crate::conn::reliable)), its
//! timers and the handshake routing are the same whatever carries the datagrams: a UDP socket
//! here ([`UdpPort`], for the udp transport and tcp's adaptive/ud channel), or a libfabric
//! FI_EP_DGRAM endpoint (`ofi::dgram::OfiPort`, for the ofi transport's).

use super::super::tcp::card::Board;
use super::super::Proc;
use crate::terr;
use crate::transport::error::{Error, TResult};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::unix::io::{AsRawFd, RawFd};

/// Unreliable datagrams to and from ranks.
pub trait Port: Send {
    /// Where a datagram goes (a socket address, a libfabric address-vector index).
    type Addr: Copy + Send;
    /// Readable when a datagram may have arrived (in the channel's epoll set).
    fn fd(&self) -> RawFd;
    /// The job secret (known after MPI_Init's barrier).
    fn secret(&mut self) -> TResult<u64>;
    /// `peer`'s address, from its business card (the channel remembers it).
    fn lookup(&mut self, peer: Proc) -> TResult<Self::Addr>;
    /// Sends one datagram; `WouldBlock`: no room now, the channel keeps it and tries again.
    fn send_to(&mut self, bytes: &[u8], to: Self::Addr) -> io::Result<()>;
    /// The next datagram that arrived (`WouldBlock`: none), and where from if known.
    fn recv_from(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<Self::Addr>)>;
    /// Whether sleeping on `fd` now is safe (libfabric's fi_trywait; a socket: always).
    fn may_block(&mut self) -> bool {
        true
    }
}

/// A UDP socket bound on the tcp address rule, published as the card `udp-<rank>`.
pub struct UdpPort {
    pub(super) sock: UdpSocket,
    pub(super) addr: SocketAddr,
    board: Box<dyn Board>,
}

impl UdpPort {
    /// Binds the socket and publishes its card (before MPI_Init's barrier).
    pub fn bind(rank: Proc, ip: IpAddr, rcvbuf: usize, mut board: Box<dyn Board>) -> TResult<Self> {
        let sock = UdpSocket::bind(SocketAddr::new(ip, 0)).map_err(|e| {
            let msg = format!("udp channel: rank {rank} cannot bind a socket on {ip}: {e}");
            Error::os(&e, msg)
        })?;
        sock.set_nonblocking(true)
            .map_err(|e| terr!(Other, "udp channel: {e}"))?;
        let addr = sock
            .local_addr()
            .map_err(|e| terr!(Other, "udp channel: {e}"))?;
        set_buffers(sock.as_raw_fd(), rcvbuf);
        board.put_card("udp", rank, addr)?;
        Ok(UdpPort { sock, addr, board })
    }
}

impl Port for UdpPort {
    type Addr = SocketAddr;

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn secret(&mut self) -> TResult<u64> {
        self.board.secret()
    }

    fn lookup(&mut self, peer: Proc) -> TResult<SocketAddr> {
        self.board.get_card("udp", peer)?.ok_or_else(|| {
            terr!(
                Other,
                "udp channel: rank {peer} has published no udp business card (is it running \
                 with the udp transport?)"
            )
        })
    }

    fn send_to(&mut self, bytes: &[u8], to: SocketAddr) -> io::Result<()> {
        self.sock.send_to(bytes, to).map(|_| ())
    }

    fn recv_from(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<SocketAddr>)> {
        self.sock.recv_from(buf).map(|(n, a)| (n, Some(a)))
    }
}

/// Asks for large socket buffers: a window of datagrams must fit in the receiver's buffer or
/// bursts are dropped (and cost a retransmission timeout). Forced when permitted (root).
pub(crate) fn set_buffers(fd: RawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        for opt in [force, plain] {
            // SAFETY: setsockopt with a c_int option value of the right size.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
    }
}
