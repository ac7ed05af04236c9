//! MPI_Comm_idup: the new communicator's context id is agreed in the background, so the call
//! returns at once and the dup completes once every member has started it (MPI 4.1 section
//! 7.4.2; MPICH's comm_idup test has rank 0 start it last, after messages the others send
//! once they have started theirs).
//!
//! Its context id is agreed with the protocol of every constructor (`context_ids`), always
//! with the vote: nonblocking dups of overlapping communicators may be pending together in
//! one process (comm_idup_overlap). They draw ids from a range of their own ([`NB_FIRST`]
//! up), so blocking constructors below MULTIPLE, which skip the vote, need not know about
//! them. Each round is an allgather on the parent's collective context, advanced by the
//! progress engine.

use super::comm::{Comm, Inter};
use super::comm_create::InterParts;
use super::context_ids::{max_words, Agreement, Ids, Step, Words};
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
    ids: Ids,
    pending: Vec<Pending>,
}

impl NbDups {
    pub fn new(seed: u64) -> Self {
        NbDups {
            ids: Ids::new(NB_FIRST, seed),
            pending: Vec::new(),
        }
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
    agreement: Agreement,
    gather: Gather,
}

fn bytes(w: Words) -> [u8; 8] {
    let mut b = [0; 8];
    b[..4].copy_from_slice(&w[0].to_le_bytes());
    b[4..].copy_from_slice(&w[1].to_le_bytes());
    b
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
        let (agreement, words) = self.objects.comms.nb.ids.start(BLOCK, true);
        let gather = match self.start_gather(on, &bytes(words), tag) {
            Ok(g) => g,
            Err(e) => {
                self.objects.comms.nb.ids.abandon(&agreement);
                return Err(e);
            }
        };
        self.objects.comms.nb.pending.push(Pending {
            req,
            newcomm,
            on,
            inter,
            tag,
            agreement,
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
                    self.objects.comms.nb.ids.abandon(&p.agreement);
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
        let all: Vec<u32> = all
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        match self
            .objects
            .comms
            .nb
            .ids
            .step(&mut p.agreement, max_words(&all, 2, 0))
        {
            Step::Done(id) => {
                self.idup_finish(p, id)?;
                Ok(Some(false))
            }
            Step::Send(w) => {
                p.gather = self.start_gather(p.on, &bytes(w), p.tag)?;
                Ok(Some(true))
            }
        }
    }

    /// Gives the new communicator its context id (and an intercommunicator its helpers).
    fn idup_finish(&mut self, p: &Pending, context: u32) -> MpiResult<()> {
        let (rank, local, errhandler) = {
            let c = self.objects.comms.get(p.newcomm)?;
            (c.rank as usize, c.group.clone(), c.errhandler)
        };
        let inter = p.inter.as_ref().map(|(remote, local_first)| {
            let parts = InterParts {
                lrank: rank,
                local,
                remote: remote.clone(),
                local_first: *local_first,
            };
            self.inter_helpers(context, &parts, errhandler)
        });
        let c = self.objects.comms.get_mut(p.newcomm)?;
        c.context_id = context;
        c.inter = inter;
        Ok(())
    }
}
