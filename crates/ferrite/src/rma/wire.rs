//! RMA messages: what an origin asks of a target and what the target answers. One message
//! is a fixed 32-byte header, the target layout as byte runs, then data.
//!
//! The target layout travels flattened (`(offset, len)` runs relative to the target
//! address, from `Datatype::flatten`), so the target needs no copy of the origin's derived
//! datatype; accumulate also names the predefined basic type, which is the same handle in
//! every process.
//!
//! Small Puts and Accumulates to one target travel together: a Batch message's data is a
//! sequence of whole request messages, each prefixed by its length (`push_entry`,
//! `entries`), applied in order and answered by one Reply. Large Gets, Puts and
//! Accumulates stream: their data is a separate point-to-point message on a tag of its own
//! (`stream_tag`), received straight into the user's buffer or the window's memory (an
//! accumulate's into a buffer the target reuses).

/// What a message asks for (requests) or is (answers and notifications).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Data for the runs.
    Put = 1,
    /// Answer with the runs' data.
    Get,
    /// `target = data op target` over the runs (`op` may be MPI_REPLACE, MPI_NO_OP).
    Acc,
    /// As Acc, answering with the runs' data from before.
    GetAcc,
    /// Data is (new value, compare value): one element, swapped if equal; answers the old.
    Cas,
    /// Lock request (`op` is MPI_LOCK_SHARED or MPI_LOCK_EXCLUSIVE), answered when granted.
    Lock,
    /// Lock release, answered when released.
    Unlock,
    /// The answer to any request with an id: `op` is the error class (0: success), data
    /// the bytes a Get, GetAcc or Cas fetched.
    Reply,
    /// PSCW: the target posted an exposure epoch that includes the receiver.
    Post,
    /// PSCW: the origin completed its access epoch to the receiver.
    Complete,
    /// Several Put/Acc requests (data: entries), answered by one Reply. An Unlock entry
    /// (last) releases the origin's lock.
    Batch,
    /// As Acc, with the data apart on `stream_tag(id, false)`; later requests of its origin
    /// wait at the target until it is applied (accumulate ordering).
    AccStream,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        use Kind::*;
        Some(match v {
            1 => Put,
            2 => Get,
            3 => Acc,
            4 => GetAcc,
            5 => Cas,
            6 => Lock,
            7 => Unlock,
            8 => Reply,
            9 => Post,
            10 => Complete,
            11 => Batch,
            12 => AccStream,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub kind: Kind,
    /// MPI_Op for accumulates, lock type for Lock, error class for Reply; for Get and Put,
    /// 0 (data in the messages) or the stream tag the data travels on.
    pub op: i32,
    /// The predefined basic type of accumulate elements (MPI_DATATYPE_NULL otherwise).
    pub basic: i32,
    /// The origin's id for the answer.
    pub id: u64,
    /// Target displacement (in the target's units), or an address in a dynamic window.
    pub disp: i64,
}

pub const HEAD_LEN: usize = 32;
const RUN_LEN: usize = 16;

/// Encodes a message.
pub fn encode(h: &Head, runs: &[(isize, usize)], data_len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len(runs.len(), data_len));
    encode_into(&mut v, h, runs);
    v
}

/// The length of a message with `nruns` runs and `data_len` bytes of data.
pub fn len(nruns: usize, data_len: usize) -> usize {
    HEAD_LEN + nruns * RUN_LEN + data_len
}

/// Appends a message's header and runs to `v` (its data follows).
pub fn encode_into(v: &mut Vec<u8>, h: &Head, runs: &[(isize, usize)]) {
    let mut head = [0u8; HEAD_LEN];
    head[0] = h.kind as u8;
    head[4..8].copy_from_slice(&h.op.to_ne_bytes());
    head[8..12].copy_from_slice(&h.basic.to_ne_bytes());
    head[12..16].copy_from_slice(&(runs.len() as u32).to_ne_bytes());
    head[16..24].copy_from_slice(&h.id.to_ne_bytes());
    head[24..32].copy_from_slice(&h.disp.to_ne_bytes());
    v.extend_from_slice(&head);
    for &(off, len) in runs {
        let mut run = [0u8; RUN_LEN];
        run[..8].copy_from_slice(&(off as i64).to_ne_bytes());
        run[8..].copy_from_slice(&(len as u64).to_ne_bytes());
        v.extend_from_slice(&run);
    }
}

fn word<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b[at..at + N].try_into().expect("length checked")
}

/// A decoded message: header, target runs, data.
pub type Message<'a> = (Head, Vec<(isize, usize)>, &'a [u8]);

/// Decodes a message; None if malformed.
pub fn decode(b: &[u8]) -> Option<Message<'_>> {
    if b.len() < HEAD_LEN {
        return None;
    }
    let kind = Kind::from_u8(b[0])?;
    let op = i32::from_ne_bytes(word(b, 4));
    let basic = i32::from_ne_bytes(word(b, 8));
    let nruns = u32::from_ne_bytes(word(b, 12)) as usize;
    let id = u64::from_ne_bytes(word(b, 16));
    let disp = i64::from_ne_bytes(word(b, 24));
    let end = nruns.checked_mul(RUN_LEN)?.checked_add(HEAD_LEN)?;
    if b.len() < end {
        return None;
    }
    let runs = (0..nruns)
        .map(|i| {
            let at = HEAD_LEN + i * RUN_LEN;
            (
                i64::from_ne_bytes(word(b, at)) as isize,
                u64::from_ne_bytes(word(b, at + 8)) as usize,
            )
        })
        .collect();
    let h = Head {
        kind,
        op,
        basic,
        id,
        disp,
    };
    Some((h, runs, &b[end..]))
}

/// The tag of the data of streamed request `id`: a Get's data comes from the target, a
/// Put's goes to it. Odd for gets, even for puts, never 0 (the channel's tag), below 2^30:
/// the two directions between a pair of processes use ids of different origins, so their
/// tags never meet; ids of one origin are unique while outstanding.
pub fn stream_tag(id: u64, get: bool) -> i32 {
    2 + 2 * (id % ((1 << 29) - 2)) as i32 + i32::from(get)
}

/// Whether message `b` is a Reply (an answer, never held back behind a stream).
pub fn is_reply(b: &[u8]) -> bool {
    b.first() == Some(&(Kind::Reply as u8))
}

/// Marks request message `m` as carrying its origin's lock of type `ty` (taken before the
/// request is served; a lock sent lazily), or clears the mark (`ty` 0). Header byte 1.
pub fn set_lock(m: &mut [u8], ty: i32) {
    use crate::consts::{MPI_LOCK_EXCLUSIVE, MPI_LOCK_SHARED};
    m[1] = match ty {
        MPI_LOCK_SHARED => 1,
        MPI_LOCK_EXCLUSIVE => 2,
        _ => 0,
    };
}

/// The lock request message `m` carries (`set_lock`), if any.
pub fn lock_of(m: &[u8]) -> Option<i32> {
    use crate::consts::{MPI_LOCK_EXCLUSIVE, MPI_LOCK_SHARED};
    match m.get(1) {
        Some(1) => Some(MPI_LOCK_SHARED),
        Some(2) => Some(MPI_LOCK_EXCLUSIVE),
        _ => None,
    }
}

/// Whether request message `b` has its data travel apart (a streamed Get, Put or
/// Accumulate): the target may still be moving that data after it served the request.
pub fn streamed(b: &[u8]) -> bool {
    if b.len() < HEAD_LEN {
        return false;
    }
    match Kind::from_u8(b[0]) {
        Some(Kind::Get | Kind::Put) => i32::from_ne_bytes(word(b, 4)) != 0,
        Some(Kind::AccStream) => true,
        _ => false,
    }
}

/// Appends request message `m` to a Batch message's data.
pub fn push_entry(batch: &mut Vec<u8>, m: &[u8]) {
    batch.extend_from_slice(&(m.len() as u64).to_ne_bytes());
    batch.extend_from_slice(m);
}

/// The request messages in a Batch's data; stops at a malformed length.
pub fn entries(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let len = usize::try_from(u64::from_ne_bytes(data.get(..8)?.try_into().ok()?)).ok()?;
        let m = data.get(8..8usize.checked_add(len)?)?;
        data = &data[8 + len..];
        Some(m)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = Head {
            kind: Kind::GetAcc,
            op: 0x5800_0003,
            basic: 0x4c00_0405,
            id: 77,
            disp: -5,
        };
        let runs = [(0isize, 8usize), (-16, 4), (1 << 40, 3)];
        let mut m = encode(&h, &runs, 3);
        m.extend_from_slice(&[1, 2, 3]);
        let (h2, r2, d) = decode(&m).unwrap();
        assert_eq!(h2, h);
        assert_eq!(r2, runs);
        assert_eq!(d, &[1, 2, 3]);
    }

    #[test]
    fn kinds_and_replies() {
        for kind in [Kind::AccStream, Kind::Reply, Kind::Batch] {
            let h = Head {
                kind,
                op: 3,
                basic: 4,
                id: 9,
                disp: 0,
            };
            let m = encode(&h, &[(0, 8)], 0);
            assert_eq!(decode(&m).unwrap().0.kind, kind);
            assert_eq!(is_reply(&m), kind == Kind::Reply);
        }
        assert!(!is_reply(&[]));
    }

    #[test]
    fn streamed_requests() {
        let m = |kind, op| {
            let h = Head {
                kind,
                op,
                basic: 0,
                id: 3,
                disp: 0,
            };
            encode(&h, &[(0, 8)], 0)
        };
        assert!(streamed(&m(Kind::Get, stream_tag(3, true))));
        assert!(streamed(&m(Kind::Put, stream_tag(3, false))));
        assert!(streamed(&m(Kind::AccStream, 0x5800_0003)));
        assert!(!streamed(&m(Kind::Get, 0)));
        assert!(!streamed(&m(Kind::Put, 0)));
        // A Batch's op is never a stream tag (a lazily sent lock rides in byte 1).
        assert!(!streamed(&m(
            Kind::Batch,
            crate::consts::MPI_LOCK_EXCLUSIVE
        )));
        assert!(!streamed(&m(Kind::Acc, 0x5800_0003)));
        assert!(!streamed(&[1, 2]));
    }

    #[test]
    fn carried_locks() {
        use crate::consts::{MPI_LOCK_EXCLUSIVE, MPI_LOCK_SHARED};
        let h = Head {
            kind: Kind::Get,
            op: 0,
            basic: 0,
            id: 3,
            disp: -2,
        };
        let mut m = encode(&h, &[(0, 8)], 0);
        assert_eq!(lock_of(&m), None);
        for ty in [MPI_LOCK_SHARED, MPI_LOCK_EXCLUSIVE] {
            set_lock(&mut m, ty);
            assert_eq!(lock_of(&m), Some(ty));
            // The request itself reads the same.
            assert_eq!(decode(&m).unwrap().0, h);
        }
        set_lock(&mut m, 0);
        assert_eq!(lock_of(&m), None);
        assert_eq!(lock_of(&[]), None);
    }

    #[test]
    fn batch_entries() {
        let mut b = Vec::new();
        push_entry(&mut b, &[1, 2, 3]);
        push_entry(&mut b, &[]);
        push_entry(&mut b, &[4]);
        let all: Vec<&[u8]> = entries(&b).collect();
        assert_eq!(all, [&[1u8, 2, 3][..], &[], &[4]]);
        // A truncated entry ends the sequence.
        assert_eq!(entries(&b[..b.len() - 1]).count(), 2);
        let mut bad = b.clone();
        bad[..8].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert_eq!(entries(&bad).count(), 0);
    }

    #[test]
    fn stream_tags() {
        for id in [1u64, 2, 1 << 29, u64::MAX] {
            for get in [false, true] {
                let t = stream_tag(id, get);
                assert!(t > 0 && t < 1 << 30, "{t}");
                assert_eq!(t % 2 == 1, get);
            }
        }
        assert_ne!(stream_tag(5, true), stream_tag(6, true));
    }

    #[test]
    fn malformed_is_refused() {
        let h = Head {
            kind: Kind::Put,
            op: 0,
            basic: 0,
            id: 1,
            disp: 0,
        };
        let m = encode(&h, &[(0, 1), (2, 1)], 0);
        assert!(decode(&m[..m.len() - 1]).is_none());
        assert!(decode(&m[..10]).is_none());
        let mut bad = m.clone();
        bad[0] = 99;
        assert!(decode(&bad).is_none());
        // A run count that would overflow the length computation.
        let mut huge = m;
        huge[12..16].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(decode(&huge).is_none());
    }
}
