//! The shared file pointer: an 8-byte counter (in etypes of the current view, little endian)
//! in a hidden side file next to the data file, `.<name>.ferrite-shfp.<token>`, updated
//! under an exclusive fcntl byte-range lock.
//!
//! Why a file and not a counter kept by rank 0: every access through the shared pointer is
//! independent, so a counter on rank 0 would need rank 0 to serve requests while it computes
//! (an asynchronous progress thread); a locked file needs nobody's help, the kernel makes
//! contenders sleep, and fcntl locks reach across hosts on NFS (lockd) just as the data file
//! does. The name is agreed at MPI_File_open (rank 0's token); the first process that uses
//! the pointer creates the file (absent or empty means 0), and rank 0 removes it at
//! MPI_File_close. If it cannot be made (a read-only directory), the shared-pointer
//! functions fail with MPI_ERR_IO naming the reason.

use super::posix::{pread, pwrite, RangeLock};
use crate::error::MpiResult;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub struct SharedPtr {
    pub path: PathBuf,
    /// Opened (and created, by whichever process needs it first) on first use: files whose
    /// shared pointer is never used leave nothing behind even if the job dies.
    file: OnceLock<File>,
}

/// The side file's name for data file `path` and the open's `token`.
pub fn side_path(path: &Path, token: u64) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.ferrite-shfp.{token:x}"))
}

impl SharedPtr {
    pub fn new(path: PathBuf) -> SharedPtr {
        SharedPtr {
            path,
            file: OnceLock::new(),
        }
    }

    fn file(&self) -> MpiResult<&File> {
        if let Some(f) = self.file.get() {
            return Ok(f);
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(|e| {
                crate::mpi_err!(
                    crate::abi::consts::MPI_ERR_IO,
                    "the shared file pointer's side file {} cannot be opened: {e}",
                    self.path.display()
                )
            })?;
        Ok(self.file.get_or_init(|| f))
    }

    /// The counter; an empty (just created) side file holds 0.
    fn read(f: &File) -> MpiResult<u64> {
        let mut b = [0u8; 8];
        pread(f, &mut b, 0)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Atomically adds `n` and returns the value before.
    pub fn fetch_add(&self, n: u64) -> MpiResult<u64> {
        let f = self.file()?;
        let _l = RangeLock::new(f, 0, 8, true)?;
        let v = Self::read(f)?;
        pwrite(f, &(v + n).to_le_bytes(), 0)?;
        Ok(v)
    }

    pub fn get(&self) -> MpiResult<u64> {
        let f = self.file()?;
        let _l = RangeLock::new(f, 0, 8, false)?;
        Self::read(f)
    }

    pub fn set(&self, v: u64) -> MpiResult<()> {
        let f = self.file()?;
        let _l = RangeLock::new(f, 0, 8, true)?;
        pwrite(f, &v.to_le_bytes(), 0)
    }

    /// Rank 0 at close, once every process is done with it: a reset pointer with no side
    /// file yet needs none.
    pub fn reset(&self) -> MpiResult<()> {
        if self.file.get().is_none() && !self.path.exists() {
            return Ok(());
        }
        self.set(0)
    }

    /// Rank 0 at close, after every process is done with it.
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
