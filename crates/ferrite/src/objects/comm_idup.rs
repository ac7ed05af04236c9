//! MPI_Comm_idup: the new communicator's context id is agreed in the background, so the call
//! returns at once and the dup completes once every member has started it (MPI 4.1 section
//! 7.4.2; MPICH's comm_idup test has rank 0 start it last, after messages the others send
//! once they have started theirs).
//!
//! Nonblocking dups of overlapping communicators may be pending together in one process
//! (comm_idup_overlap), so the blocking constructors' rule (every member proposes its
//! `next_context`, the maximum wins) would let two of them take the same id. They draw ids
//! from a range of their own instead ([`NB_FIRST`] up; blocking constructors never overlap
//! one another in a process, so theirs stay as they are), agreed in rounds of two
//! allgathers on the parent's collective context:
//! 1. propose: each member reserves the lowest block of ids above the round's floor that is
//!    free here (not below `next`, not reserved by another pending dup); the largest
//!    proposal is the candidate;
//! 2. vote: each member says whether the candidate is free here, and reserves it if so.
//!    All yes: it is the id. Otherwise everyone releases it and proposes again above it.
//!
//! A process reserves an id for at most one pending dup at a time, and a completed dup moves
//! `next` past its id, so no two of a process's communicators ever share an id.

use super::comm::{Comm, Inter};
use crate::coll::Gather;
use crate::consts::*;
use crate::error::MpiResult;
use crate::state::Ferrite;

/// The first id nonblocking dups may take (blocking constructors stay far below).
pub const NB_FIRST: u32 = 1 << 30;
/// Ids one dup takes: enough for an intercommunicator and its helpers.
const BLOCK: u32 = super::comm_create::INTER_IDS;
/// The context id of a communicator whose idup has not completed (never matched).
pub const PENDING_CONTEXT: u32 = u32::MAX - BLOCK;

/// The nonblocking dups of a process.
pub struct NbDups {
    /// Ids below this were taken by completed dups (or skipped).
    next: u32,
    /// (first id, request) of the block each pending dup holds here.
    reserved: Vec<(u32, MPI_Request)>,
    pending: Vec<Pending>,
}

impl Default for NbDups {
    fn default() -> Self {
        NbDups {
            next: NB_FIRST,
            reserved: Vec::new(),
            pending: Vec::new(),
        }
    }
}

impl NbDups {
    fn clashes(&self, id: u32, req: MPI_Request) -> bool {
        self.reserved
            .iter()
            .any(|&(r, q)| q != req && id.abs_diff(r) < BLOCK)
    }

    /// The lowest block at or above `floor` that `req` may reserve here.
    fn lowest_free(&self, floor: u32, req: MPI_Request) -> u32 {
        let mut id = floor.max(self.next);
        while let Some(&(r, _)) = self
            .reserved
            .iter()
            .find(|&&(r, q)| q != req && id.abs_diff(r) < BLOCK)
        {
            id = r + BLOCK;
        }
        id
    }

    fn reserve(&mut self, id: u32, req: MPI_Request) {
        self.release(req);
        self.reserved.push((id, req));
    }

    fn release(&mut self, req: MPI_Request) {
        self.reserved.retain(|&(_, q)| q != req);
    }

    /// True if `req` may take `id` here: free, or the block it holds already.
    fn may_take(&self, id: u32, req: MPI_Request) -> bool {
        let own = self.reserved.contains(&(id, req));
        (own || id >= self.next) && !self.clashes(id, req)
    }
}

/// One pending dup.
struct Pending {
    req: MPI_Request,
    /// The new communicator (its handle is the caller's from the start; its context id is
    /// [`PENDING_CONTEXT`] until the agreement ends).
    newcomm: MPI_Comm,
    /// The communicator the agreement runs on: the parent, or an intercommunicator's
    /// union helper (both sides take part).
    on: MPI_Comm,
    /// An intercommunicator's remote group, and whether the local group comes first in
    /// the union.
    inter: Option<(std::sync::Arc<[u32]>, bool)>,
    tag: i32,
    floor: u32,
    /// The candidate being voted on, if the round is at its vote.
    candidate: Option<u32>,
    gather: Gather,
}

fn word(all: &[u8], i: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&all[4 * i..4 * i + 4]);
    u32::from_le_bytes(b)
}

impl Ferrite {
    /// Starts duplicating `comm`: returns the new communicator's handle (usable once the
    /// request completes) and the request. Error handler, topology and hints are the
    /// parent's; the caller copies attributes.
    pub fn comm_idup_start(&mut self, comm: MPI_Comm) -> MpiResult<(MPI_Comm, MPI_Request)> {
        let (group, rank, errhandler, topo, info, inter) = {
            let c = self.objects.comms.get(comm)?;
            (
                c.group.clone(),
                c.rank,
                c.errhandler,
                c.topo.clone(),
                c.info.clone(),
                c.inter.clone(),
            )
        };
        let (on, inter) = match inter {
            Some(Inter {
                remote, union_comm, ..
            }) => {
                let local_first = self.objects.comms.get(union_comm)?.rank == rank;
                (union_comm, Some((remote, local_first)))
            }
            None => (comm, None),
        };
        let mut placeholder = Comm::new(PENDING_CONTEXT, rank, group, errhandler);
        placeholder.topo = topo;
        placeholder.info = info;
        let newcomm = self.objects.comms.user.insert(placeholder);
        let req = self.p2p.new_request(comm, false);
        let tag = self.coll_tag_nonblocking(on)?;
        let nb = &mut self.objects.comms.nb;
        let mine = nb.lowest_free(NB_FIRST, req);
        nb.reserve(mine, req);
        let gather = self.start_gather(on, &mine.to_le_bytes(), tag)?;
        self.objects.comms.nb.pending.push(Pending {
            req,
            newcomm,
            on,
            inter,
            tag,
            floor: NB_FIRST,
            candidate: None,
            gather,
        });
        self.idup_progress();
        Ok((newcomm, req))
    }

    /// Progress hook: advances the pending dups' agreements. True if any step completed.
    pub fn idup_progress(&mut self) -> bool {
        if self.objects.comms.nb.pending.is_empty() {
            return false;
        }
        let mut list = std::mem::take(&mut self.objects.comms.nb.pending);
        let mut changed = false;
        let mut keep = Vec::with_capacity(list.len());
        for mut p in list.drain(..) {
            match self.idup_step(&mut p) {
                Ok(None) => keep.push(p),
                Ok(Some(true)) => {
                    changed = true;
                    keep.push(p);
                }
                Ok(Some(false)) => {
                    changed = true;
                    self.coll_complete(p.req, MPI_SUCCESS);
                }
                Err(e) => {
                    changed = true;
                    self.objects.comms.nb.release(p.req);
                    self.coll_complete(p.req, e.class);
                }
            }
        }
        keep.append(&mut self.objects.comms.nb.pending);
        self.objects.comms.nb.pending = keep;
        changed
    }

    /// One step of `p`: None if its exchange has not finished, Some(true) if the next
    /// exchange started, Some(false) if the dup is complete.
    fn idup_step(&mut self, p: &mut Pending) -> MpiResult<Option<bool>> {
        let Some(all) = p.gather.poll(self)? else {
            return Ok(None);
        };
        let n = all.len() / 4;
        let nb = &mut self.objects.comms.nb;
        let msg = match p.candidate {
            None => {
                let c = (0..n).map(|i| word(&all, i)).max().unwrap_or(p.floor);
                let ok = nb.may_take(c, p.req);
                if ok {
                    nb.reserve(c, p.req);
                } else {
                    nb.release(p.req);
                }
                p.candidate = Some(c);
                ok as u32
            }
            Some(c) if (0..n).all(|i| word(&all, i) == 1) => {
                nb.release(p.req);
                nb.next = nb.next.max(c + BLOCK);
                self.idup_finish(p, c)?;
                return Ok(Some(false));
            }
            Some(c) => {
                p.floor = c + BLOCK;
                p.candidate = None;
                let mine = nb.lowest_free(p.floor, p.req);
                nb.reserve(mine, p.req);
                mine
            }
        };
        p.gather = self.start_gather(p.on, &msg.to_le_bytes(), p.tag)?;
        Ok(Some(true))
    }

    /// Gives the new communicator its context id (and an intercommunicator its helpers).
    fn idup_finish(&mut self, p: &Pending, context: u32) -> MpiResult<()> {
        let (rank, local, errhandler) = {
            let c = self.objects.comms.get(p.newcomm)?;
            (c.rank as usize, c.group.clone(), c.errhandler)
        };
        let inter = p.inter.as_ref().map(|(remote, local_first)| {
            self.inter_helpers(
                context,
                rank,
                local,
                remote.clone(),
                *local_first,
                errhandler,
            )
        });
        let c = self.objects.comms.get_mut(p.newcomm)?;
        c.context_id = context;
        c.inter = inter;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_never_overlap_between_pending_dups() {
        let mut nb = NbDups::default();
        let a = nb.lowest_free(NB_FIRST, 1);
        nb.reserve(a, 1);
        let b = nb.lowest_free(NB_FIRST, 2);
        nb.reserve(b, 2);
        assert_eq!((a, b), (NB_FIRST, NB_FIRST + BLOCK));
        // A candidate overlapping another dup's block is refused; its own is taken.
        assert!(!nb.may_take(b, 1) && !nb.may_take(b + 1, 1));
        assert!(nb.may_take(a, 1) && nb.may_take(b, 2));
        // Free blocks above: fine; a floor inside another's block skips past it.
        assert!(nb.may_take(b + BLOCK, 1));
        assert_eq!(nb.lowest_free(b - 1, 1), b + BLOCK);
        // Once dup 1 completes with `a`, ids up to it are gone for everyone else.
        nb.release(1);
        nb.next = a + BLOCK;
        assert!(!nb.may_take(a, 2) && nb.may_take(b, 2));
        assert_eq!(nb.lowest_free(NB_FIRST, 3), b + BLOCK);
    }
}
