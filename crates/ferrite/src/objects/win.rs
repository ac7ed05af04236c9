//! Windows (MPI 4.1 chapter 12) as objects: group, memory, name, info, error handler and
//! attributes, and each window's RMA state (rma/).

use super::handles::{kind, HandleTable};
use super::info::Info;
use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use std::os::raw::c_int;
use std::sync::Arc;

/// The values MPI_Win_get_attr returns pointers to (MPI_WIN_SIZE, ...): boxed so the
/// pointers stay valid while the window lives, wherever the table moves it.
#[derive(Debug)]
pub struct Predefined {
    pub size: MPI_Aint,
    pub disp_unit: c_int,
    pub flavor: c_int,
    pub model: c_int,
}

pub struct Win {
    /// A private duplicate of the communicator the window was made over: the window's
    /// group, and the context of its collective MPI_Win_free.
    pub comm: MPI_Comm,
    /// World rank of each window rank.
    pub group: Arc<[u32]>,
    /// MPI_WIN_BASE: the local memory (MPI_BOTTOM for a dynamic window).
    pub base: usize,
    pub attrs: Box<Predefined>,
    pub name: String,
    pub errhandler: MPI_Errhandler,
    pub info: Info,
    /// Memory MPI_Win_allocate made for this window (8-byte aligned), freed with it.
    pub memory: Option<Box<[u64]>>,
    /// The shared file mapping of a window made by MPI_Win_allocate_shared (every part)
    /// or MPI_Win_allocate (this process's memory, when it could be made), unmapped with it.
    pub shared: Option<crate::rma::shared::SharedMem>,
    /// Regions MPI_Win_attach added to a dynamic window: (base, size).
    pub attached: Vec<(usize, MPI_Aint)>,
    /// This process's rank in the window's group.
    pub rank: u32,
    /// Epochs, pending operations and the target side's lock queue (rma/mod.rs).
    pub rma: Option<crate::rma::WinRma>,
}

pub struct Wins {
    pub user: HandleTable<Win>,
    /// Windows whose RMA messages the progress engine serves.
    pub active: Vec<MPI_Win>,
}

impl Default for Wins {
    fn default() -> Self {
        Wins {
            user: HandleTable::new(kind::WIN),
            active: Vec::new(),
        }
    }
}

impl Wins {
    pub fn get(&self, h: MPI_Win) -> MpiResult<&Win> {
        self.user.get(h).ok_or_else(|| invalid(h))
    }

    pub fn get_mut(&mut self, h: MPI_Win) -> MpiResult<&mut Win> {
        self.user.get_mut(h).ok_or_else(|| invalid(h))
    }
}

/// The window info keys MPI 4.1 12.2.1 defines (others are ignored, as MPICH does), and
/// the defaults MPI_Win_get_info reports for those that have one.
const KEYS: [&str; 7] = [
    "no_locks",
    "accumulate_ordering",
    "accumulate_ops",
    "same_size",
    "same_disp_unit",
    "alloc_shared_noncontig",
    "mpi_accumulate_granularity",
];
const DEFAULTS: [(&str, &str); 2] = [
    ("accumulate_ordering", "rar,raw,war,waw"),
    ("accumulate_ops", "same_op_no_op"),
];

/// Merges the window hints of `given` into `into` (MPI_Win_create & co, MPI_Win_set_info).
pub fn merge_hints(into: &mut Info, given: &Info) {
    for (k, v) in &given.entries {
        if KEYS.contains(&k.as_str()) {
            into.set(k, v);
        }
    }
}

/// What MPI_Win_get_info reports: the hints in use, defaults included.
pub fn hints_in_use(w: &Win) -> Info {
    let mut info = w.info.clone();
    for (k, v) in DEFAULTS {
        if info.get(k).is_none() {
            info.set(k, v);
        }
    }
    info
}

fn invalid(h: MPI_Win) -> MpiError {
    if h == MPI_WIN_NULL {
        MpiError::new(MPI_ERR_WIN, "null window (MPI_WIN_NULL)")
    } else {
        crate::mpi_err!(MPI_ERR_WIN, "invalid window handle {:#x}", h as u32)
    }
}
