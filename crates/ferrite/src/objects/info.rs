//! Info objects: ordered (key, value) string pairs.

use super::handles::{kind, HandleTable};
use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use std::sync::Mutex;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Info {
    pub entries: Vec<(String, String)>,
}

impl Info {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.0 == key)
            .map(|e| e.1.as_str())
    }

    pub fn set(&mut self, key: &str, value: &str) {
        match self.entries.iter_mut().find(|e| e.0 == key) {
            Some(e) => e.1 = value.to_string(),
            None => self.entries.push((key.to_string(), value.to_string())),
        }
    }

    pub fn delete(&mut self, key: &str) -> bool {
        let n = self.entries.len();
        self.entries.retain(|e| e.0 != key);
        self.entries.len() != n
    }
}

pub struct Infos {
    pub user: HandleTable<Info>,
    /// MPI_INFO_ENV: how this process was started.
    pub env: Info,
}

/// The info objects of the process. They live outside the MPI state, behind a lock of their
/// own, because MPI 4.1 (section 10.1) lets the MPI_Info functions run before MPI_Init and
/// after MPI_Finalize. The lock is a leaf: taken inside the state lock, never around it.
static INFOS: Mutex<Option<Infos>> = Mutex::new(None);

/// Runs `f` on the process's info objects.
pub fn with<R>(f: impl FnOnce(&mut Infos) -> MpiResult<R>) -> MpiResult<R> {
    let mut g = crate::lock_order::lock(&INFOS, crate::lock_order::INFO);
    f(g.get_or_insert_with(Infos::new))
}

/// A copy of the hints of `h` (none for MPI_INFO_NULL), to keep on an object.
pub fn hints(h: MPI_Info) -> MpiResult<Info> {
    if h == MPI_INFO_NULL {
        return Ok(Info::default());
    }
    with(|i| i.get(h).cloned())
}

/// A new info object holding `info` (MPI_*_get_info).
pub fn insert(info: Info) -> MPI_Info {
    with(|i| Ok(i.user.insert(info))).unwrap_or(MPI_INFO_NULL)
}

impl Infos {
    fn new() -> Self {
        let mut env = Info::default();
        // The launcher's process count until MPI_Init knows the world's size.
        if let Ok(n) = std::env::var("PMI_SIZE") {
            env.set("maxprocs", &n);
        }
        env.set("host", &crate::runtime::hostname());
        if let Ok(d) = std::env::current_dir() {
            env.set("wdir", &d.to_string_lossy());
        }
        if let Some(cmd) = std::env::args().next() {
            env.set("command", &cmd);
        }
        env.set("thread_level", "MPI_THREAD_MULTIPLE");
        Infos {
            user: HandleTable::new(kind::INFO),
            env,
        }
    }

    pub fn get(&self, h: MPI_Info) -> MpiResult<&Info> {
        if h == MPI_INFO_ENV {
            return Ok(&self.env);
        }
        self.user.get(h).ok_or_else(|| invalid(h))
    }

    pub fn get_mut(&mut self, h: MPI_Info) -> MpiResult<&mut Info> {
        if h == MPI_INFO_ENV {
            return Err(MpiError::new(
                MPI_ERR_INFO,
                "MPI_INFO_ENV cannot be modified",
            ));
        }
        self.user.get_mut(h).ok_or_else(|| invalid(h))
    }
}

fn invalid(h: MPI_Info) -> MpiError {
    if h == MPI_INFO_NULL {
        MpiError::new(MPI_ERR_INFO, "null info (MPI_INFO_NULL)")
    } else {
        crate::mpi_err!(MPI_ERR_INFO, "invalid info handle {:#x}", h as u32)
    }
}
