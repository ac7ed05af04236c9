//! Partitioned communication (MPI 4.1 chapter 4) over persistent point-to-point requests.
//!
//! MPI_Psend_init/MPI_Precv_init make persistent requests for the whole buffer (partitions x
//! count elements). MPI_Start posts the receive at once; a send waits until MPI_Pready has
//! marked every partition and then goes out as one message, so no partition's data leaves
//! before the user said it was ready. MPI_Parrived reports a partition once the whole
//! receive has completed. Sender and receiver may split the buffer differently (only the
//! total matters), as the standard allows.
//!
//! Partitioned messages match only partitioned receives: they travel on a context of their
//! own, the communicator's point-to-point context id with [`PART_CONTEXT`] set (ids are
//! allocated upwards from 0 and never reach it), so neither MPI_ANY_TAG receives nor
//! collectives can take them. They match in initialization order (MPI 4.1 section 4.2.1):
//! the k-th MPI_Psend_init to (comm, dest, tag) pairs with the k-th MPI_Precv_init from
//! (comm, source, tag), whatever order they are started or readied in, so the tag on the
//! wire names both the tag and k ([`wire_tag`]). k counts live requests (a freed request
//! gives its place back), assuming both sides free theirs in the same pattern.

use super::request::Spec;
use crate::consts::*;
use crate::error::MpiResult;
use crate::state::Ferrite;

/// The context bit of partitioned messages.
pub const PART_CONTEXT: u32 = 0x8000_0000;

/// The tag on the wire of the k-th partitioned request for `tag` between two processes:
/// the tag itself for the first (the common case), a negative value holding both for the
/// next ones (on this context no receive has MPI_ANY_TAG, the only negative tag with a
/// meaning). Tags of 2^24 and above get one partitioned request per peer, and 128 per tag
/// at most; beyond that, MPI_ERR_TAG says so.
fn wire_tag(tag: i32, k: u32) -> MpiResult<i32> {
    if k == 0 {
        return Ok(tag);
    }
    if tag >= 1 << 24 || k > 127 {
        return Err(crate::mpi_err!(
            MPI_ERR_TAG,
            "partitioned request {} for tag {tag} with the same peer: Ferrite matches only \
             one per tag of 2^24 and above, and 128 per tag below",
            k + 1
        ));
    }
    Ok(i32::MIN + (((k - 1) << 24) | tag as u32) as i32)
}

/// The partitions of a partitioned request.
pub struct Partitions {
    /// How many partitions the buffer has.
    pub count: usize,
    /// The user's tag (the wire's may differ: [`wire_tag`]).
    pub tag: i32,
    /// This request's place among the live ones for its peer and tag, and their key in
    /// `P2p::part_inits`.
    key: (u32, i64, i32, bool),
    k: u32,
    /// Send: partitions marked ready since MPI_Start.
    ready: Vec<bool>,
    nready: usize,
}

impl Partitions {
    fn check(&self, p: i64, call: &str) -> MpiResult<usize> {
        usize::try_from(p)
            .ok()
            .filter(|&p| p < self.count)
            .ok_or_else(|| {
                crate::mpi_err!(
                    MPI_ERR_ARG,
                    "{call}: partition {p} out of range (the request has {} partitions)",
                    self.count
                )
            })
    }
}

impl Ferrite {
    /// MPI_Psend_init / MPI_Precv_init: `spec` is the send or receive of the whole buffer.
    pub fn part_init(
        &mut self,
        comm: MPI_Comm,
        mut spec: Spec,
        partitions: usize,
    ) -> MpiResult<MPI_Request> {
        if let Spec::Recv { src, tag, .. } = &spec {
            if *src == MPI_ANY_SOURCE {
                return Err(crate::mpi_err!(
                    MPI_ERR_RANK,
                    "MPI_Precv_init: MPI_ANY_SOURCE is not allowed in partitioned receives"
                ));
            }
            if *tag == MPI_ANY_TAG {
                return Err(crate::mpi_err!(
                    MPI_ERR_TAG,
                    "MPI_Precv_init: MPI_ANY_TAG is not allowed in partitioned receives"
                ));
            }
        }
        // This request's place among those for the same peer and tag, which the peer counts
        // the same way.
        let (ctx, key, tag) = match &mut spec {
            Spec::Send { ctx, dest, tag, .. } => {
                let key = (*ctx, dest.map_or(-1, i64::from), *tag, true);
                (ctx, key, tag)
            }
            Spec::Recv { ctx, src, tag, .. } => {
                let key = (*ctx, i64::from(*src), *tag, false);
                (ctx, key, tag)
            }
            Spec::Coll => unreachable!("partitioned requests are point-to-point"),
        };
        let user_tag = *tag;
        // The lowest place no live request holds: both sides free theirs as they made them
        // (a program that inits and frees one pair per exchange uses place 0 each time).
        let used = self.p2p.part_inits.entry(key).or_default();
        let k = (0..).find(|k| !used.contains(k)).expect("a free place");
        *tag = wire_tag(*tag, k)?;
        *ctx |= PART_CONTEXT;
        self.p2p.part_inits.entry(key).or_default().insert(k);
        let h = self.persistent(comm, spec);
        if let Some(r) = self.p2p.reqs.get_mut(h) {
            r.part = Some(Box::new(Partitions {
                count: partitions,
                tag: user_tag,
                key,
                k,
                ready: vec![false; partitions],
                nready: 0,
            }));
        }
        Ok(h)
    }

    /// MPI_Request_free on `h`: a partitioned request gives its place back.
    pub fn part_free(&mut self, h: MPI_Request) {
        let Some(part) = self.p2p.reqs.get(h).and_then(|r| r.part.as_ref()) else {
            return;
        };
        let (key, k) = (part.key, part.k);
        if let Some(used) = self.p2p.part_inits.get_mut(&key) {
            used.remove(&k);
            if used.is_empty() {
                self.p2p.part_inits.remove(&key);
            }
        }
    }

    /// MPI_Start on a request: true if it is a partitioned send, which is now active with no
    /// partition ready (the message goes out with the last MPI_Pready).
    pub fn part_start(&mut self, h: MPI_Request) -> bool {
        let Some(r) = self.p2p.reqs.get_mut(h) else {
            return false;
        };
        let Some(part) = r.part.as_mut().filter(|_| !r.is_recv) else {
            return false;
        };
        part.ready.iter_mut().for_each(|b| *b = false);
        part.nready = 0;
        r.done = false;
        true
    }

    /// MPI_Pready(_range, _list): marks `partitions` of send request `h` ready; the message
    /// starts when all are.
    pub fn pready(
        &mut self,
        h: MPI_Request,
        partitions: impl IntoIterator<Item = i64>,
        call: &str,
    ) -> MpiResult<()> {
        let r = self
            .p2p
            .reqs
            .get_mut(h)
            .ok_or_else(|| super::ops::invalid_request(h))?;
        let (Some(part), false) = (r.part.as_mut(), r.is_recv) else {
            return Err(crate::mpi_err!(
                MPI_ERR_REQUEST,
                "{call}: request {:#x} is not a partitioned send (MPI_Psend_init)",
                h as u32
            ));
        };
        if !r.active {
            return Err(crate::mpi_err!(
                MPI_ERR_REQUEST,
                "{call}: partitioned send {:#x} is not active (call MPI_Start first)",
                h as u32
            ));
        }
        // Check everything before marking anything.
        let list = partitions
            .into_iter()
            .map(|p| part.check(p, call))
            .collect::<MpiResult<Vec<usize>>>()?;
        for p in list {
            if std::mem::replace(&mut part.ready[p], true) {
                return Err(crate::mpi_err!(
                    MPI_ERR_ARG,
                    "{call}: partition {p} is already marked ready since MPI_Start"
                ));
            }
            part.nready += 1;
        }
        if part.nready < part.count {
            return Ok(());
        }
        let spec = r
            .persistent
            .clone()
            .expect("partitioned requests are persistent");
        let res = self.start_spec(h, &spec);
        if res.is_err() {
            if let Some(r) = self.p2p.reqs.get_mut(h) {
                r.done = true;
            }
        }
        res
    }

    /// MPI_Parrived: whether `partition` of receive request `h` has arrived (all of the
    /// message has, as it arrives whole). An inactive request has nothing pending: true.
    pub fn parrived(&mut self, h: MPI_Request, partition: i64) -> MpiResult<bool> {
        let r = self
            .p2p
            .reqs
            .get(h)
            .ok_or_else(|| super::ops::invalid_request(h))?;
        let (Some(part), true) = (r.part.as_ref(), r.is_recv) else {
            return Err(crate::mpi_err!(
                MPI_ERR_REQUEST,
                "MPI_Parrived: request {:#x} is not a partitioned receive (MPI_Precv_init)",
                h as u32
            ));
        };
        part.check(partition, "MPI_Parrived")?;
        if !r.active || r.done {
            return Ok(true);
        }
        self.progress();
        Ok(self.p2p.is_done(h))
    }
}
