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

pub const HEADER_LEN: usize = 40;

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

    /// Splits a packet into header and payload; None if it is not a p2p packet.
    pub fn decode(pkt: &[u8]) -> Option<(Header, &[u8])> {
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
}
