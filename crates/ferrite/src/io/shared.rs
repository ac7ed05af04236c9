//! The shared file pointer: an 8-byte counter (in etypes of the current view, little endian)
//! in a hidden side file next to the data file, `.<name>.ferrite-shfp.<token>`, updated
//! under an exclusive fcntl byte-range lock.
//!
//! Why a file and not a counter kept by rank 0: every access through the shared pointer is
//! independent, so a counter on rank 0 would need rank 0 to serve requests while it computes
//! (an asynchronous progress thread); a locked file needs nobody's help, the kernel makes
//! contenders sleep, and fcntl locks reach across hosts on NFS (lockd) just as the data file
//! does. Rank 0 creates the side file at MPI_File_open and removes it at MPI_File_close. If
//! it cannot be made (a read-only directory), the file opens anyway and the shared-pointer
//! functions fail with MPI_ERR_IO naming the reason.

use super::posix::{io_err, pread, pwrite, RangeLock};
use crate::error::MpiResult;
use std::fs::File;
use std::path::{Path, PathBuf};

pub struct SharedPtr {
    pub path: PathBuf,
    pub file: Option<File>,
    /// Why `file` is None.
    pub why: String,
}

/// The side file's name for data file `path` and the open's `token`.
pub fn side_path(path: &Path, token: u64) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.ferrite-shfp.{token:x}"))
}

/// Rank 0: makes the side file holding `start`.
pub fn create(path: &Path, start: u64) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)?;
    use std::os::unix::fs::FileExt;
    f.write_all_at(&start.to_le_bytes(), 0)
}

impl SharedPtr {
    pub fn open(path: PathBuf, exists: bool) -> SharedPtr {
        if !exists {
            return SharedPtr {
                path,
                file: None,
                why: "its side file could not be created".into(),
            };
        }
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(f) => SharedPtr {
                path,
                file: Some(f),
                why: String::new(),
            },
            Err(e) => SharedPtr {
                why: format!("its side file {} cannot be opened: {e}", path.display()),
                path,
                file: None,
            },
        }
    }

    fn file(&self) -> MpiResult<&File> {
        self.file.as_ref().ok_or_else(|| {
            crate::mpi_err!(
                crate::abi::consts::MPI_ERR_IO,
                "the shared file pointer is unavailable: {}",
                self.why
            )
        })
    }

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

    /// Rank 0 at close.
    pub fn remove(&self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.path).map_err(|e| io_err("unlink", e));
        }
    }
}
