//! Collective operations over the communicator's collective context (`context_id + 1`),
//! built on the point-to-point layer's internal sends and receives.
//!
//! For now this holds only what communicator creation needs; the collectives work adds the
//! MPI collectives and their scalable algorithms here.

use crate::abi::consts::MPI_Comm;
use crate::error::MpiResult;
use crate::state::Ferrite;

/// Tag of the internal exchanges made by communicator creation.
const TAG_COMM_CREATE: i32 = 1;

impl Ferrite {
    /// Every member's `mine` (all of the same length), concatenated in rank order.
    ///
    /// Gather at rank 0, then rank 0 sends the whole to each member: 2(N-1) messages and
    /// no deadlock whichever protocol carries them (rank 0 posts every receive it needs).
    pub fn allgather_fixed(&mut self, comm: MPI_Comm, mine: &[u8]) -> MpiResult<Vec<u8>> {
        let (rank, size) = {
            let c = self.objects.comms.get(comm)?;
            (c.rank as i32, c.size() as i32)
        };
        if rank != 0 {
            self.coll_send(comm, 0, TAG_COMM_CREATE, mine)?;
            return self.coll_recv(comm, 0, TAG_COMM_CREATE);
        }
        let mut all = Vec::with_capacity(mine.len() * size as usize);
        all.extend_from_slice(mine);
        for r in 1..size {
            let part = self.coll_recv(comm, r, TAG_COMM_CREATE)?;
            debug_assert_eq!(part.len(), mine.len());
            all.extend_from_slice(&part);
        }
        for r in 1..size {
            self.coll_send(comm, r, TAG_COMM_CREATE, &all)?;
        }
        Ok(all)
    }
}
