//! The udp transport (FERRITE_TRANSPORTS=udp,self): every peer over one datagram socket, no
//! connections. Packets go through the reliable datagram [`Channel`] (sequence numbers,
//! acknowledgements, retransmission, segmentation), so they arrive whole, once and in order;
//! a full window is "no room" for the protocol above. Nothing is set up per peer beyond the
//! machine's link state on first contact, so MPI_ANY_SOURCE and large jobs cost nothing.

pub mod channel;
pub mod path;
pub mod port;

pub use channel::{Channel, ChannelConfig, ChannelStats, Inject};
pub use path::Datagrams;
pub use port::{Port, UdpPort};

use super::{Proc, Transport, TransportStats};
use crate::conn::reliable;
use crate::runtime::config;
use crate::terr;
use crate::transport::error::TResult;
use std::collections::VecDeque;
use std::os::unix::io::RawFd;
use std::time::{Duration, Instant};

/// Datagram size across hosts: UDP in a 1500-byte Ethernet frame, no IP fragmentation.
pub const DATAGRAM_ETHERNET: usize = 1472;
/// Bytes in flight per peer the default window allows.
const WINDOW_BYTES: usize = 4 << 20;

/// The channel's settings from the knobs, with the socket address chosen like tcp's:
/// FERRITE_TCP_IF, else loopback on one host or a reachable address when the job spans hosts.
/// (`spans_hosts` must be the same on every rank: the window follows from it.)
pub fn channel_config(size: u32, spans_hosts: bool) -> TResult<ChannelConfig> {
    let spec: String = config::get("FERRITE_TCP_IF");
    let ip = if spans_hosts && spec.trim().is_empty() {
        super::tcp::listener::reachable_ip()
    } else {
        super::tcp::listener::resolve_if(&spec)
            .map_err(|e| terr!(InvalidArg, "udp transport: {e}"))?
    };
    let dg: usize = config::get("FERRITE_UDP_DATAGRAM");
    let max_datagram = match dg {
        0 if spans_hosts => DATAGRAM_ETHERNET,
        0 => channel::MAX_UDP,
        d if (reliable::HEADER_LEN + 1..=channel::MAX_UDP).contains(&d) => d,
        d => {
            return Err(terr!(
                InvalidArg,
                "FERRITE_UDP_DATAGRAM={d}: must be 0 (automatic) or {}..={}",
                reliable::HEADER_LEN + 1,
                channel::MAX_UDP
            ))
        }
    };
    let w: u32 = config::get("FERRITE_UDP_WINDOW");
    let window = match w {
        0 => (WINDOW_BYTES / max_datagram).clamp(16, 256) as u32,
        w if w <= 1 << 20 => w,
        w => {
            return Err(terr!(
                InvalidArg,
                "FERRITE_UDP_WINDOW={w}: at most 1048576 datagrams"
            ))
        }
    };
    let drop: u32 = config::get("FERRITE_UDP_DROP_PERMILLE");
    Ok(ChannelConfig {
        ip,
        rel: reliable::Config {
            max_datagram,
            window,
            // Nobody acknowledges while a peer computes outside MPI: give it time.
            max_retries: config::get("FERRITE_UDP_RETRIES"),
            ..reliable::Config::new(size)
        },
        rcvbuf: config::get("FERRITE_UDP_RCVBUF"),
        inject: Inject {
            drop_permille: drop.min(1000),
            ..Inject::default()
        },
    })
}

#[derive(Clone, Debug)]
pub struct UdpConfig {
    pub chan: ChannelConfig,
    /// Largest packet (FERRITE_UDP_MAX_PACKET); the channel cuts it into datagrams.
    pub max_packet: usize,
    /// How long MPI_Finalize waits for the last acknowledgements (FERRITE_UDP_LINGER_MS).
    pub linger_ms: u64,
}

impl UdpConfig {
    pub fn from_knobs(size: u32, spans_hosts: bool) -> TResult<UdpConfig> {
        let max_packet: usize = config::get("FERRITE_UDP_MAX_PACKET");
        if !(64..(1 << 30)).contains(&max_packet) {
            return Err(terr!(
                InvalidArg,
                "FERRITE_UDP_MAX_PACKET={max_packet}: must be at least 64 and below 1 GiB"
            ));
        }
        Ok(UdpConfig {
            chan: channel_config(size, spans_hosts)?,
            max_packet,
            linger_ms: config::get("FERRITE_UDP_LINGER_MS"),
        })
    }
}

pub struct Udp {
    rank: Proc,
    size: u32,
    ch: Channel,
    max_packet: usize,
    linger_ms: u64,
    /// Packets to ourselves (when `self` is not in FERRITE_TRANSPORTS).
    own: VecDeque<Vec<u8>>,
    stats: TransportStats,
}

impl Udp {
    /// Binds the socket and publishes this process's card (before MPI_Init's barrier).
    pub fn new(
        rank: Proc,
        size: u32,
        cfg: UdpConfig,
        board: Box<dyn super::tcp::card::Board>,
    ) -> TResult<Udp> {
        Ok(Udp {
            rank,
            size,
            ch: Channel::new(rank, cfg.chan, board)?,
            max_packet: cfg.max_packet,
            linger_ms: cfg.linger_ms,
            own: VecDeque::new(),
            stats: TransportStats::default(),
        })
    }

    pub fn channel(&self) -> &Channel {
        &self.ch
    }

    /// Polls the channel; handshake datagrams are strangers here (no `ud` handshake runs).
    fn drive(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let (mut pkts, mut bytes, mut strangers) = (0u64, 0u64, 0u64);
        let n = self.ch.poll(
            &mut |from, p| {
                pkts += 1;
                bytes += p.len() as u64;
                deliver(from, p)
            },
            &mut |_| strangers += 1,
        );
        self.stats.packets_received += pkts;
        self.stats.bytes_received += bytes;
        self.stats.strangers_dropped += strangers;
        n
    }
}

impl Transport for Udp {
    fn name(&self) -> &'static str {
        "udp"
    }

    fn max_packet(&self) -> usize {
        self.max_packet
    }

    fn try_send(&mut self, to: Proc, parts: &[&[u8]]) -> TResult<bool> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_packet {
            return Err(terr!(
                InvalidArg,
                "udp transport: a packet of {len} bytes to rank {to} exceeds the {}-byte limit",
                self.max_packet
            ));
        }
        if to >= self.size {
            return Err(terr!(
                InvalidArg,
                "udp transport: rank {to} is not in a job of {} ranks",
                self.size
            ));
        }
        if to == self.rank {
            self.own.push_back(parts.concat());
        } else if !self.ch.send(to, parts)? {
            self.stats.no_room += 1;
            return Ok(false);
        }
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
        Ok(true)
    }

    fn poll(&mut self, deliver: &mut dyn FnMut(Proc, &[u8])) -> usize {
        let mut n = 0;
        for _ in 0..self.own.len() {
            let p = self.own.pop_front().expect("counted");
            self.stats.packets_received += 1;
            self.stats.bytes_received += p.len() as u64;
            deliver(self.rank, &p);
            n += 1;
        }
        n + self.drive(deliver)
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.ch.wake_fd())
    }

    fn arm(&mut self) -> bool {
        self.own.is_empty() && !self.ch.busy()
    }

    /// (A peer's retransmission, if our acknowledgement was lost, is answered while
    /// MPI_Finalize's barrier waits: it makes progress.)
    fn pending(&self) -> bool {
        self.ch.pending()
    }

    fn stats(&self) -> TransportStats {
        let mut s = TransportStats { ..self.stats };
        self.ch.add_stats(&mut s);
        s
    }

    /// Peers the channel gave up on: receives posted for them fail (MPI_ERR_PROC_ABORTED).
    fn take_failures(&mut self) -> Vec<(Proc, String)> {
        self.ch.take_failures()
    }

    /// Waits (at most FERRITE_UDP_LINGER_MS) until every datagram we sent is acknowledged and
    /// no data arrived for a while, acknowledging what peers still send meanwhile (their last
    /// datagrams, or retransmissions of them when an acknowledgement was lost). Packets
    /// arriving now are dropped: after MPI_Finalize's barrier no peer sends anything this
    /// process needs. A peer that already left is no error: its datagrams just stay
    /// unacknowledged until the linger ends.
    fn shutdown(&mut self) {
        let deadline = Instant::now() + Duration::from_millis(self.linger_ms);
        loop {
            self.drive(&mut |_, _| {});
            let now = Instant::now();
            if now >= deadline || self.ch.settled() {
                break;
            }
            let ms = deadline
                .saturating_duration_since(now)
                .as_millis()
                .clamp(1, 5) as i32;
            let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 1];
            // SAFETY: ev is valid for one event; the wake fd is the channel's epoll fd.
            unsafe { libc::epoll_wait(self.ch.wake_fd(), ev.as_mut_ptr(), 1, ms) };
        }
    }
}

#[cfg(test)]
mod tests;
