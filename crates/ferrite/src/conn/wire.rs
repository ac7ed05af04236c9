//! The datagram channel's wire format, version 1, shared by reliability (`Data`, `Ack`), the
//! `ud` handshake (`Req`, `Reply`, `Confirm`) and the `cm` hello (`Hello`, `HelloAck`, sent on
//! a new stream socket). All integers little-endian.
//!
//! ```text
//! common prefix (16 bytes)
//!   0  u8   version        1
//!   1  u8   kind           1 Data, 2 Ack, 3 Req, 4 Reply, 5 Confirm, 6 Hello, 7 HelloAck
//!   2  u8   flags          Data: bit 0 first segment of a message, bit 1 last; others 0
//!   3  u8   reserved       0
//!   4  u32  source rank
//!   8  u64  job secret
//! ```
//! The body of each kind is described where it is used ([`super::reliable`],
//! [`super::handshake`]).
//!
//! Invariant: nothing is acted on before [`decode_prefix`] has checked version, kind, reserved
//! byte and secret; every rejected datagram is counted in [`DropCounts`] by reason, and no input
//! (truncated, random, foreign) can make a decoder panic.

use super::Proc;

pub const VERSION: u8 = 1;
pub const PREFIX_LEN: usize = 16;

/// What a datagram (or a stream's first message) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    Data = 1,
    Ack = 2,
    Req = 3,
    Reply = 4,
    Confirm = 5,
    Hello = 6,
    HelloAck = 7,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Data,
            2 => Kind::Ack,
            3 => Kind::Req,
            4 => Kind::Reply,
            5 => Kind::Confirm,
            6 => Kind::Hello,
            7 => Kind::HelloAck,
            _ => return None,
        })
    }
}

/// The checked common prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    pub kind: Kind,
    pub flags: u8,
    pub src: Proc,
}

/// Why a datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop {
    /// Shorter than its kind's header, or a length field points past the end.
    Truncated,
    /// Not version 1.
    Version,
    /// Unknown kind, or a kind this machine does not handle.
    Kind,
    /// Without the job secret: another job, a stranger, or noise.
    Secret,
    /// A field out of range: reserved bits, flags, trailing bytes, a length.
    Field,
    /// Source rank not in the job (or ourselves), or addressed to another rank.
    Rank,
}

/// Dropped datagrams by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    pub truncated: u64,
    pub version: u64,
    pub kind: u64,
    pub secret: u64,
    pub field: u64,
    pub rank: u64,
}

impl DropCounts {
    pub fn count(&mut self, d: Drop) {
        let c = match d {
            Drop::Truncated => &mut self.truncated,
            Drop::Version => &mut self.version,
            Drop::Kind => &mut self.kind,
            Drop::Secret => &mut self.secret,
            Drop::Field => &mut self.field,
            Drop::Rank => &mut self.rank,
        };
        *c += 1;
    }

    pub fn total(&self) -> u64 {
        self.truncated + self.version + self.kind + self.secret + self.field + self.rank
    }
}

/// Appends the common prefix.
pub fn encode_prefix(out: &mut Vec<u8>, kind: Kind, flags: u8, src: Proc, secret: u64) {
    out.extend_from_slice(&[VERSION, kind as u8, flags, 0]);
    out.extend_from_slice(&src.to_le_bytes());
    out.extend_from_slice(&secret.to_le_bytes());
}

/// Checks the common prefix against our secret and the job size (`src < job_size`, `src !=
/// me`). Flags are returned unchecked: their meaning depends on the kind.
pub fn decode_prefix(b: &[u8], secret: u64, me: Proc, job_size: u32) -> Result<Prefix, Drop> {
    if b.len() < PREFIX_LEN {
        return Err(Drop::Truncated);
    }
    if b[0] != VERSION {
        return Err(Drop::Version);
    }
    let kind = Kind::from_u8(b[1]).ok_or(Drop::Kind)?;
    if u64_at(b, 8) != secret {
        return Err(Drop::Secret);
    }
    if b[3] != 0 {
        return Err(Drop::Field);
    }
    let src = u32_at(b, 4);
    if src >= job_size || src == me {
        return Err(Drop::Rank);
    }
    Ok(Prefix {
        kind,
        flags: b[2],
        src,
    })
}

/// The kind of a datagram, for routing it to the machine that handles it (which then checks
/// everything). `None`: not ours at all (count it as [`Drop::Version`] or [`Drop::Kind`]).
pub fn kind_of(b: &[u8]) -> Option<Kind> {
    if b.len() < 2 || b[0] != VERSION {
        return None;
    }
    Kind::from_u8(b[1])
}

/// Little-endian u32 at `at`; the caller has checked the length.
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The full 64-bit sequence number nearest to `expected` whose low 32 bits are `wire`
/// (the packet-number decoding of QUIC, RFC 9000 A.3). Sound while both ends stay within
/// 2^31 of each other, which bounded windows guarantee.
pub fn unwrap_seq(expected: u64, wire: u32) -> u64 {
    const WIN: u64 = 1 << 32;
    const HALF: u64 = WIN / 2;
    let candidate = (expected & !(WIN - 1)) | wire as u64;
    if candidate + HALF <= expected && candidate < u64::MAX - WIN {
        candidate + WIN
    } else if candidate > expected.saturating_add(HALF) && candidate >= WIN {
        candidate - WIN
    } else {
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_round_trips_and_is_checked() {
        let mut b = Vec::new();
        encode_prefix(&mut b, Kind::Reply, 3, 7, 0xfeed_beef);
        assert_eq!(b.len(), PREFIX_LEN);
        let p = decode_prefix(&b, 0xfeed_beef, 0, 8).unwrap();
        assert_eq!((p.kind, p.flags, p.src), (Kind::Reply, 3, 7));
        assert_eq!(kind_of(&b), Some(Kind::Reply));
        assert_eq!(decode_prefix(&b, 1, 0, 8), Err(Drop::Secret));
        assert_eq!(decode_prefix(&b, 0xfeed_beef, 7, 8), Err(Drop::Rank));
        assert_eq!(decode_prefix(&b, 0xfeed_beef, 0, 7), Err(Drop::Rank));
        assert_eq!(
            decode_prefix(&b[..15], 0xfeed_beef, 0, 8),
            Err(Drop::Truncated)
        );
        let mut v = b.clone();
        v[0] = 2;
        assert_eq!(decode_prefix(&v, 0xfeed_beef, 0, 8), Err(Drop::Version));
        let mut k = b.clone();
        k[1] = 99;
        assert_eq!(decode_prefix(&k, 0xfeed_beef, 0, 8), Err(Drop::Kind));
        let mut r = b;
        r[3] = 1;
        assert_eq!(decode_prefix(&r, 0xfeed_beef, 0, 8), Err(Drop::Field));
    }

    #[test]
    fn sequence_numbers_unwrap_across_the_32_bit_boundary() {
        assert_eq!(unwrap_seq(0, 0), 0);
        assert_eq!(unwrap_seq(5, 3), 3);
        assert_eq!(unwrap_seq(5, 70), 70);
        let e = (1u64 << 32) - 2; // just below the wrap
        assert_eq!(unwrap_seq(e, 1), (1 << 32) + 1);
        assert_eq!(unwrap_seq(e, u32::MAX), (1 << 32) - 1);
        let e = (1u64 << 32) + 2; // just above it
        assert_eq!(unwrap_seq(e, u32::MAX - 1), (1 << 32) - 2);
        assert_eq!(unwrap_seq(e, 9), (1 << 32) + 9);
    }
}
