//! The doorbell: an abstract-namespace unix datagram socket per process, so a sleeping
//! receiver can sit in the same epoll set as (later) tcp sockets.
//!
//! A sender that publishes a cell while the receiver's `sleeping` flag is set sends the
//! receiver's 8-byte token (from its segment header, so only processes that can map the
//! segment know it). Anything else that arrives is a stranger's datagram: it only causes a
//! wake-up, and is drained and counted.

use std::io;
use std::os::unix::io::RawFd;

/// An address to ring.
#[derive(Clone, Copy)]
pub struct BellAddr {
    addr: libc::sockaddr_un,
    len: libc::socklen_t,
}

/// Abstract socket name for a rank of a job (long job names are hashed to fit).
pub fn bell_addr(job: &str, rank: u32) -> BellAddr {
    let mut name = format!("ferrite-{job}-{rank}");
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let room = addr.sun_path.len() - 1;
    if name.len() > room {
        name = format!("ferrite-{:016x}-{rank}", fnv1a(job.as_bytes()));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // sun_path[0] stays 0: the abstract namespace (vanishes with the process, no file).
    for (i, b) in name.bytes().enumerate() {
        addr.sun_path[i + 1] = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    BellAddr {
        addr,
        len: len as libc::socklen_t,
    }
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100000001b3)
    })
}

fn dgram_socket() -> io::Result<RawFd> {
    // SAFETY: plain socket creation.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

pub struct Doorbell {
    /// Bound to our name; readable when rung.
    rx: RawFd,
    /// Unbound; used to ring others.
    tx: RawFd,
    token: u64,
    pub strangers: u64,
    pub rings_sent: u64,
}

impl Doorbell {
    pub fn bind(addr: &BellAddr, token: u64) -> io::Result<Doorbell> {
        let rx = dgram_socket()?;
        // SAFETY: addr is a valid sockaddr_un of the given length.
        let rc = unsafe {
            libc::bind(
                rx,
                &addr.addr as *const libc::sockaddr_un as *const libc::sockaddr,
                addr.len,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: rx is ours.
            unsafe { libc::close(rx) };
            return Err(e);
        }
        let tx = match dgram_socket() {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: rx is ours.
                unsafe { libc::close(rx) };
                return Err(e);
            }
        };
        Ok(Doorbell {
            rx,
            tx,
            token,
            strangers: 0,
            rings_sent: 0,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.rx
    }

    /// Rings a peer. A full socket buffer (EAGAIN) means it has been rung already; a peer
    /// that is gone (ECONNREFUSED) cannot be woken anyway. Both are fine.
    pub fn ring(&mut self, to: &BellAddr, token: u64) {
        let msg = token.to_le_bytes();
        // SAFETY: msg and the address are valid for the given lengths.
        unsafe {
            libc::sendto(
                self.tx,
                msg.as_ptr().cast(),
                msg.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                &to.addr as *const libc::sockaddr_un as *const libc::sockaddr,
                to.len,
            )
        };
        self.rings_sent += 1;
    }

    /// Reads every pending datagram; returns how many were rings from the job.
    pub fn drain(&mut self) -> u64 {
        let mut ours = 0;
        loop {
            let mut buf = [0u8; 16];
            // SAFETY: buf is valid for its length; MSG_TRUNC reports the real length.
            let n = unsafe {
                libc::recv(
                    self.rx,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return ours;
            }
            if n == 8 && buf[..8] == self.token.to_le_bytes() {
                ours += 1;
            } else {
                self.strangers += 1;
            }
        }
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        // SAFETY: both descriptors are ours and closed once.
        unsafe {
            libc::close(self.rx);
            libc::close(self.tx);
        }
    }
}

/// Test helper: a datagram from outside the job.
#[cfg(test)]
pub fn send_stranger(to: &BellAddr, bytes: &[u8]) -> io::Result<()> {
    let fd = dgram_socket()?;
    // SAFETY: bytes and the address are valid for the given lengths.
    let rc = unsafe {
        libc::sendto(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT,
            &to.addr as *const libc::sockaddr_un as *const libc::sockaddr,
            to.len,
        )
    };
    let e = io::Error::last_os_error();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if rc < 0 {
        Err(e)
    } else {
        Ok(())
    }
}
