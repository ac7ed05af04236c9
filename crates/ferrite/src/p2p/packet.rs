//! The point-to-point wire header. Every p2p packet is a fixed 40-byte header, little endian,
//! followed by payload (EAGER, EAGER_SYNC and DATA: message bytes; RTS: the sender's
//! transport's key to its buffer, `transport::RndvKey`, often empty):
//!
//! | offset | size | field   | meaning                                                         |
//! |--------|------|---------|-----------------------------------------------------------------|
//! | 0      | 1    | kind    | EAGER, EAGER_SYNC, RTS, CTS, DATA, FIN, ACK (below)             |
//! | 1      | 3    | -       | zero                                                            |
//! | 4      | 4    | context | context id (p2p: comm's id; collectives: id + 1)                |
//! | 8      | 4    | src     | sender's rank in the communicator                               |
//! | 12     | 4    | tag     | message tag                                                     |
//! | 16     | 8    | len     | total message length in bytes                                   |
//! | 24     | 4    | sreq    | sender's request id (echoed in CTS, FIN, ACK)                   |
//! | 28     | 4    | rreq    | receiver's request id (CTS, DATA)                               |
//! | 32     | 8    | arg     | RTS: sender's buffer address; DATA: byte offset of the payload  |
//!
//! A standard-mode eager message whose context and source rank fit 16 bits and whose tag fits
//! 24 (nearly all: context ids are handed out from 0 up, see objects/context_ids.rs) travels
//! with the 8-byte short header instead (one little-endian u64; its length is the payload's):
//!
//! | bits  | field                     |
//! |-------|---------------------------|
//! | 0-7   | kind byte `SHORT_EAGER`   |
//! | 8-31  | tag                       |
//! | 32-47 | context                   |
//! | 48-63 | sender's rank in the comm |
//!
//! Why: the shm fast ring's slot header is 8 bytes, so with the short header a message of up
//! to 48 bytes shares the slot's first cache line with both headers (16 with the full one),
//! and one 64-bit load decodes it.

pub const HEADER_LEN: usize = 40;
/// Length of the short eager header.
pub const SHORT_LEN: usize = 8;
/// Its kind byte (never a [`Kind`]).
const SHORT_EAGER: u8 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Whole message inline.
    Eager = 1,
    /// Whole message inline; the receiver answers ACK on match (MPI_Ssend).
    EagerSync = 2,
    /// Ready to send: a large message, `arg` = where the receiver may read it from.
    Rts = 3,
    /// Clear to send: the receiver matched an RTS but cannot read; send DATA fragments.
    Cts = 4,
    /// A fragment of a rendezvous message at byte offset `arg`.
    Data = 5,
    /// The receiver has read the message: the sender's request completes.
    Fin = 6,
    /// A synchronous eager message matched.
    Ack = 7,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Eager,
            2 => Kind::EagerSync,
            3 => Kind::Rts,
            4 => Kind::Cts,
            5 => Kind::Data,
            6 => Kind::Fin,
            7 => Kind::Ack,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub context: u32,
    pub src: i32,
    pub tag: i32,
    pub len: u64,
    pub sreq: u32,
    pub rreq: u32,
    pub arg: u64,
}

impl Header {
    /// A control header with only the request ids set.
    pub fn control(kind: Kind, sreq: u32, rreq: u32) -> Header {
        Header {
            kind,
            context: 0,
            src: 0,
            tag: 0,
            len: 0,
            sreq,
            rreq,
            arg: 0,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.kind as u8;
        b[4..8].copy_from_slice(&self.context.to_le_bytes());
        b[8..12].copy_from_slice(&self.src.to_le_bytes());
        b[12..16].copy_from_slice(&self.tag.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..28].copy_from_slice(&self.sreq.to_le_bytes());
        b[28..32].copy_from_slice(&self.rreq.to_le_bytes());
        b[32..40].copy_from_slice(&self.arg.to_le_bytes());
        b
    }

    /// The short eager header of a standard eager message, if its fields fit (see the
    /// module comment).
    #[inline]
    pub fn short_eager(context: u32, src: i32, tag: i32) -> Option<[u8; SHORT_LEN]> {
        if context > 0xffff || !(0..=0xffff).contains(&src) || !(0..=0xff_ffff).contains(&tag) {
            return None;
        }
        let w =
            SHORT_EAGER as u64 | (tag as u64) << 8 | (context as u64) << 32 | (src as u64) << 48;
        Some(w.to_le_bytes())
    }

    /// The short form of this header, if it has one: a standard eager header whose fields
    /// fit (the one place that chooses the form; see the module comment).
    #[inline]
    pub fn short_form(&self) -> Option<[u8; SHORT_LEN]> {
        if self.kind != Kind::Eager {
            return None;
        }
        Header::short_eager(self.context, self.src, self.tag)
    }

    /// The bytes that announce this header on the wire, copied out: the short form if it
    /// has one, else the full header; with the length used.
    pub fn wire(&self) -> ([u8; HEADER_LEN], usize) {
        match self.short_form() {
            Some(s) => {
                let mut b = [0u8; HEADER_LEN];
                b[..SHORT_LEN].copy_from_slice(&s);
                (b, SHORT_LEN)
            }
            None => (self.encode(), HEADER_LEN),
        }
    }

    /// Splits a packet into header and payload; None if it is not a p2p packet. A short
    /// eager header decodes as a full `Eager` one (no request ids, `len` the payload's).
    #[inline]
    pub fn decode(pkt: &[u8]) -> Option<(Header, &[u8])> {
        if pkt.len() >= SHORT_LEN && pkt[0] == SHORT_EAGER {
            let w = u64::from_le_bytes(pkt[..SHORT_LEN].try_into().unwrap());
            let payload = &pkt[SHORT_LEN..];
            let h = Header {
                kind: Kind::Eager,
                context: (w >> 32) as u32 & 0xffff,
                src: (w >> 48) as i32,
                tag: (w >> 8) as i32 & 0xff_ffff,
                len: payload.len() as u64,
                sreq: 0,
                rreq: 0,
                arg: 0,
            };
            return Some((h, payload));
        }
        if pkt.len() < HEADER_LEN {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(pkt[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(pkt[o..o + 8].try_into().unwrap());
        let h = Header {
            kind: Kind::from_u8(pkt[0])?,
            context: u32_at(4),
            src: u32_at(8) as i32,
            tag: u32_at(12) as i32,
            len: u64_at(16),
            sreq: u32_at(24),
            rreq: u32_at(28),
            arg: u64_at(32),
        };
        Some((h, &pkt[HEADER_LEN..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_every_field() {
        let h = Header {
            kind: Kind::Rts,
            context: 0xdead_beef,
            src: 12345,
            tag: i32::MAX,
            len: 16 << 20,
            sreq: 0xac00_0003,
            rreq: 7,
            arg: 0x7fff_1234_5678,
        };
        let mut pkt = h.encode().to_vec();
        pkt.extend_from_slice(b"xyz");
        let (d, payload) = Header::decode(&pkt).unwrap();
        assert_eq!(d, h);
        assert_eq!(payload, b"xyz");
        assert_eq!(Header::decode(&pkt[..39]), None);
        pkt[0] = 99;
        assert_eq!(Header::decode(&pkt), None);
    }

    #[test]
    fn short_eager_header_round_trips_at_its_limits() {
        for (ctx, src, tag) in [
            (0, 0, 0),
            (0xffff, 0xffff, 0xff_ffff),
            (4, 1, 100),
            (1, 7, 0),
        ] {
            let h = Header {
                kind: Kind::Eager,
                context: ctx,
                src,
                tag,
                len: 3,
                sreq: 9,
                rreq: 0,
                arg: 0,
            };
            let (b, n) = h.wire();
            assert_eq!(n, SHORT_LEN);
            assert_eq!(b[..n], Header::short_eager(ctx, src, tag).unwrap());
            let mut pkt = b[..n].to_vec();
            pkt.extend_from_slice(b"xyz");
            let (d, payload) = Header::decode(&pkt).unwrap();
            // The short header carries no request id (a standard eager send needs none).
            assert_eq!(d, Header { sreq: 0, ..h });
            assert_eq!(payload, b"xyz");
            // Empty payload: length 0.
            assert_eq!(Header::decode(&b[..n]).unwrap().0.len, 0);
        }
        // Fields that do not fit, and other kinds, take the full header.
        for (ctx, src, tag) in [
            (0x1_0000, 0, 0),
            (1 << 30, 0, 0),
            (0, 0x1_0000, 0),
            (0, -1, 0),
            (0, 0, 0x100_0000),
            (0, 0, -1),
            (0, 0, i32::MAX),
        ] {
            assert_eq!(Header::short_eager(ctx, src, tag), None);
            let h = Header {
                kind: Kind::Eager,
                context: ctx,
                src,
                tag,
                len: 0,
                sreq: 0,
                rreq: 0,
                arg: 0,
            };
            let (b, n) = h.wire();
            assert_eq!(n, HEADER_LEN);
            assert_eq!(Header::decode(&b).unwrap().0, h);
        }
        let sync = Header {
            kind: Kind::EagerSync,
            context: 1,
            src: 1,
            tag: 1,
            len: 0,
            sreq: 5,
            rreq: 0,
            arg: 0,
        };
        assert_eq!(sync.wire().1, HEADER_LEN);
        // A truncated short header is not a packet.
        assert_eq!(
            Header::decode(&Header::short_eager(1, 1, 1).unwrap()[..7]),
            None
        );
    }
}
