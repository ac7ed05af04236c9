//! Communicators: a context id for matching, a group (comm rank -> world rank), an error
//! handler. MPI_COMM_WORLD and MPI_COMM_SELF are builtins; the rest live in a handle table.

use super::handles::{kind, HandleTable};
use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use std::sync::Arc;

pub struct Comm {
    /// Point-to-point traffic matches on this id; collectives use `context_id + 1`.
    pub context_id: u32,
    /// This process's rank in the communicator.
    pub rank: u32,
    /// World rank of each communicator rank.
    pub group: Arc<[u32]>,
    pub errhandler: MPI_Errhandler,
    pub name: String,
}

impl Comm {
    pub fn size(&self) -> u32 {
        self.group.len() as u32
    }
}

/// The largest tag a message may carry (the MPI_TAG_UB attribute).
pub const TAG_UB: i32 = i32::MAX;

/// Context ids of the builtins; user communicators get ids from 4 upwards.
pub const WORLD_CONTEXT: u32 = 0;
pub const SELF_CONTEXT: u32 = 2;

pub struct Comms {
    pub world: Comm,
    pub self_: Comm,
    pub user: HandleTable<Comm>,
}

impl Comms {
    pub fn new(world_rank: u32, world_size: u32) -> Self {
        Comms {
            world: Comm {
                context_id: WORLD_CONTEXT,
                rank: world_rank,
                group: (0..world_size).collect(),
                errhandler: MPI_ERRORS_ARE_FATAL,
                name: "MPI_COMM_WORLD".into(),
            },
            self_: Comm {
                context_id: SELF_CONTEXT,
                rank: 0,
                group: Arc::from([world_rank]),
                errhandler: MPI_ERRORS_ARE_FATAL,
                name: "MPI_COMM_SELF".into(),
            },
            user: HandleTable::new(kind::COMM),
        }
    }

    pub fn get(&self, h: MPI_Comm) -> MpiResult<&Comm> {
        match h {
            MPI_COMM_WORLD => Ok(&self.world),
            MPI_COMM_SELF => Ok(&self.self_),
            _ => self.user.get(h).ok_or_else(|| invalid(h)),
        }
    }

    pub fn get_mut(&mut self, h: MPI_Comm) -> MpiResult<&mut Comm> {
        match h {
            MPI_COMM_WORLD => Ok(&mut self.world),
            MPI_COMM_SELF => Ok(&mut self.self_),
            _ => self.user.get_mut(h).ok_or_else(|| invalid(h)),
        }
    }
}

fn invalid(h: MPI_Comm) -> MpiError {
    if h == MPI_COMM_NULL {
        MpiError::new(MPI_ERR_COMM, "null communicator (MPI_COMM_NULL)")
    } else {
        MpiError::new(
            MPI_ERR_COMM,
            format!("invalid communicator handle {:#x}", h as u32),
        )
    }
}
