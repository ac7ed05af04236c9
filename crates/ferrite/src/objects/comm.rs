//! Communicators: a context id for matching, a group (comm rank -> world rank), an error
//! handler. MPI_COMM_WORLD and MPI_COMM_SELF are builtins; the rest live in a handle table.

use super::handles::{kind, HandleTable};
use super::info::Info;
use super::topo::Topo;
use crate::consts::*;
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
    /// Intercommunicators only: the remote group and the hidden helper communicators.
    pub inter: Option<Inter>,
    pub topo: Option<Arc<Topo>>,
    /// Hints given by MPI_Comm_set_info / dup_with_info (MPI_Comm_get_info returns them).
    pub info: Info,
}

/// What an intercommunicator has besides its local group.
#[derive(Clone, Debug)]
pub struct Inter {
    /// World rank of each remote rank.
    pub remote: Arc<[u32]>,
    /// Intracommunicator over the local group (internal exchanges within a side).
    pub local_comm: MPI_Comm,
    /// Intracommunicator over both groups, the group of the lower-world-rank leader first
    /// (internal exchanges across sides: merge, dup).
    pub union_comm: MPI_Comm,
}

impl Comm {
    pub fn new(context_id: u32, rank: u32, group: Arc<[u32]>, errhandler: MPI_Errhandler) -> Self {
        Comm {
            context_id,
            rank,
            group,
            errhandler,
            name: String::new(),
            inter: None,
            topo: None,
            info: Info::default(),
        }
    }

    pub fn size(&self) -> u32 {
        self.group.len() as u32
    }

    /// The processes ranks in point-to-point calls refer to: the remote group of an
    /// intercommunicator, the group otherwise.
    pub fn peers(&self) -> &Arc<[u32]> {
        match &self.inter {
            Some(i) => &i.remote,
            None => &self.group,
        }
    }
}

/// The error handler of a communicator on which the program never set one, nor on the
/// communicator it was made from: errors on it go to MPI_COMM_WORLD's handler of the
/// moment (MPI_ERRORS_ARE_FATAL until the program sets another), and
/// MPI_Comm_get_errhandler reports MPI_ERRORS_ARE_FATAL. This is MPICH's behaviour, which
/// programs written for it rely on: they set MPI_ERRORS_RETURN on MPI_COMM_WORLD after
/// making communicators (MPICH's errors/comm/*_nullarg tests). Never given to the user.
pub const DEFAULT_ERRHANDLER: MPI_Errhandler = 0x5400_00ff;

/// Context ids of the builtins; user communicators get ids from 4 upwards.
pub const WORLD_CONTEXT: u32 = 0;
pub const SELF_CONTEXT: u32 = 2;
const FIRST_USER_CONTEXT: u32 = 4;

/// A seed for context-id agreements' random skips, different in every process.
fn seed(k: u32) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (std::process::id() as u64) << 20 ^ (k as u64) << 44
}

pub struct Comms {
    pub world: Comm,
    pub self_: Comm,
    pub user: HandleTable<Comm>,
    /// The blocking constructors' context ids (agreed as in `context_ids`; ids are never
    /// reused by a process, so live communicators never share one).
    pub ids: super::context_ids::Ids,
    /// Nonblocking dups: their own range of ids and the pending agreements.
    pub nb: super::comm_idup::NbDups,
}

impl Comms {
    pub fn new(world_rank: u32, world_size: u32) -> Self {
        Comms {
            world: Comm {
                name: "MPI_COMM_WORLD".into(),
                ..Comm::new(
                    WORLD_CONTEXT,
                    world_rank,
                    (0..world_size).collect(),
                    DEFAULT_ERRHANDLER,
                )
            },
            self_: Comm {
                name: "MPI_COMM_SELF".into(),
                ..Comm::new(SELF_CONTEXT, 0, Arc::from([world_rank]), DEFAULT_ERRHANDLER)
            },
            user: HandleTable::new(kind::COMM),
            ids: super::context_ids::Ids::new(FIRST_USER_CONTEXT, seed(world_rank)),
            nb: super::comm_idup::NbDups::new(seed(world_rank + world_size)),
        }
    }

    pub fn get(&self, h: MPI_Comm) -> MpiResult<&Comm> {
        self.find(h).ok_or_else(|| invalid(h))
    }

    /// [`Self::get`] without the error, inlined (the point-to-point calls' fast paths).
    #[inline]
    pub fn find(&self, h: MPI_Comm) -> Option<&Comm> {
        match h {
            MPI_COMM_WORLD => Some(&self.world),
            MPI_COMM_SELF => Some(&self.self_),
            _ => self.user.get(h),
        }
    }

    /// The handler errors on `h` go to ([`DEFAULT_ERRHANDLER`] resolved).
    pub fn handler_of(&self, h: MPI_Comm) -> MpiResult<MPI_Errhandler> {
        let eh = self.get(h)?.errhandler;
        Ok(match (eh, self.world.errhandler) {
            (DEFAULT_ERRHANDLER, DEFAULT_ERRHANDLER) => MPI_ERRORS_ARE_FATAL,
            (DEFAULT_ERRHANDLER, w) => w,
            (e, _) => e,
        })
    }

    /// The handler MPI_Comm_get_errhandler reports for `h`.
    pub fn reported_handler(&self, h: MPI_Comm) -> MpiResult<MPI_Errhandler> {
        Ok(match self.get(h)?.errhandler {
            DEFAULT_ERRHANDLER => MPI_ERRORS_ARE_FATAL,
            e => e,
        })
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
