//! A timerfd armed for the earliest deadline of a transport's machines (tcp's and ofi's
//! connection manager, udp's reliability machine). It sits in the progress engine's epoll
//! set, so a rank blocked there wakes when one of those timers is due.

use crate::types::Micros;
use std::os::unix::io::RawFd;

/// The timerfd and the deadline (on the owner's clock) it is set for.
pub struct Timer {
    fd: RawFd,
    armed: Option<Micros>,
}

impl Timer {
    pub fn new() -> std::io::Result<Timer> {
        // SAFETY: plain syscall; the fd is owned by the Timer and closed in Drop.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Timer { fd, armed: None })
    }

    /// For the epoll set: readable once the deadline passed.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// The deadline it is set for, if any (cleared by `drain` once it fired).
    pub fn armed(&self) -> Option<Micros> {
        self.armed
    }

    /// Sets the timer for `next` (None: off), `now` being the owner's clock. An earlier
    /// deadline still ahead stays armed instead: it only costs a wake-up that finds nothing
    /// due (the owner sets it again then), where moving it would cost a timerfd_settime per
    /// message (adaptive's idle timer moves with every packet).
    pub fn set(&mut self, next: Option<Micros>, now: Micros) {
        if next == self.armed && next.is_none_or(|t| t > now) {
            return;
        }
        if let (Some(armed), Some(t)) = (self.armed, next) {
            if armed > now && armed <= t {
                return;
            }
        }
        self.armed = next;
        // A due deadline fires at once (1 µs: a zero value would disarm the timer).
        let us = next.map_or(0, |t| t.saturating_sub(now).max(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (us / 1_000_000) as libc::time_t,
                tv_nsec: ((us % 1_000_000) * 1000) as libc::c_long,
            },
        };
        // SAFETY: the timerfd is ours; spec is valid; the old value is not asked for.
        unsafe { libc::timerfd_settime(self.fd, 0, &spec, std::ptr::null_mut()) };
    }

    /// Clears the timerfd's expirations; a deadline that fired is no longer armed.
    pub fn drain(&mut self) {
        let mut b = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `b` from our nonblocking timerfd.
        let r = unsafe { libc::read(self.fd, b.as_mut_ptr().cast(), 8) };
        if r == 8 {
            self.armed = None;
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: the fd is owned by this Timer and closed once.
        unsafe { libc::close(self.fd) };
    }
}
