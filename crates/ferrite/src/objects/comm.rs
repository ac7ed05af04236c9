//! Communicators: a context id for matching, a group (comm rank -> world rank), an error
//! handler. MPI_COMM_WORLD and MPI_COMM_SELF are builtins; the rest live in a handle table.

use super::handles::{kind, HandleTable};
use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::state::Ferrite;
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

/// Context ids of the builtins; user communicators get ids from 4 upwards.
pub const WORLD_CONTEXT: u32 = 0;
pub const SELF_CONTEXT: u32 = 2;
const FIRST_USER_CONTEXT: u32 = 4;

pub struct Comms {
    pub world: Comm,
    pub self_: Comm,
    pub user: HandleTable<Comm>,
    /// The lowest context id this process may give a new communicator. Creation agrees on
    /// the maximum over the members, and every member moves past it, so an id is never
    /// reused by a process while communicators are live (ids are not recycled at all).
    pub next_context: u32,
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
            next_context: FIRST_USER_CONTEXT,
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

impl Ferrite {
    /// MPI_Comm_split: collective over `comm`. Members with the same `color` form a new
    /// communicator ordered by (`key`, rank in `comm`); MPI_UNDEFINED gets MPI_COMM_NULL.
    /// MPI_Comm_dup is a split with one color and the rank as key.
    pub fn comm_split(&mut self, comm: MPI_Comm, color: i32, key: i32) -> MpiResult<MPI_Comm> {
        if color < 0 && color != MPI_UNDEFINED {
            return Err(crate::mpi_err!(
                MPI_ERR_ARG,
                "invalid color {color} (must be non-negative or MPI_UNDEFINED)"
            ));
        }
        let (parent, my_rank, errhandler) = {
            let c = self.objects.comms.get(comm)?;
            (c.group.clone(), c.rank as usize, c.errhandler)
        };
        let mut mine = Vec::with_capacity(12);
        mine.extend_from_slice(&color.to_le_bytes());
        mine.extend_from_slice(&key.to_le_bytes());
        mine.extend_from_slice(&self.objects.comms.next_context.to_le_bytes());
        let all = self.allgather_fixed(comm, &mine)?;
        let field =
            |r: &[u8], i: usize| u32::from_le_bytes(r[4 * i..4 * i + 4].try_into().unwrap());
        let records: Vec<&[u8]> = all.chunks_exact(12).collect();
        let context = records.iter().map(|r| field(r, 2)).max().unwrap_or(0);
        self.objects.comms.next_context = context + 2;
        if color == MPI_UNDEFINED {
            return Ok(MPI_COMM_NULL);
        }
        let mut members: Vec<(i32, usize)> = records
            .iter()
            .enumerate()
            .filter(|(_, r)| field(r, 0) as i32 == color)
            .map(|(i, r)| (field(r, 1) as i32, i))
            .collect();
        members.sort_unstable();
        let rank = members.iter().position(|&(_, i)| i == my_rank).unwrap_or(0) as u32;
        let comm = Comm {
            context_id: context,
            rank,
            group: members.iter().map(|&(_, i)| parent[i]).collect(),
            errhandler,
            name: String::new(),
        };
        Ok(self.objects.comms.user.insert(comm))
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
