//! The POSIX file system under MPI-IO: positioned reads and writes of file extents, byte-range
//! locks, and data sieving for independent non-contiguous access.
//!
//! Data sieving (ROMIO's name): many small extents close together are served by one large
//! read of the span that covers them (then copied out) and, for writes, one read-modify-
//! write of that span under an exclusive byte-range lock (other processes may write the
//! holes meanwhile; the lock keeps their bytes). Spans are at most the sieve buffer size
//! (`ind_rd_buffer_size`/`ind_wr_buffer_size`).

use super::view::Seg;
use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// The MPI error class of an operating-system error.
pub fn class_of(e: &std::io::Error) -> i32 {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => MPI_ERR_NO_SUCH_FILE,
        Some(libc::EEXIST) => MPI_ERR_FILE_EXISTS,
        Some(libc::EACCES) | Some(libc::EPERM) => MPI_ERR_ACCESS,
        Some(libc::EROFS) => MPI_ERR_READ_ONLY,
        Some(libc::ENOSPC) => MPI_ERR_NO_SPACE,
        Some(libc::EDQUOT) => MPI_ERR_QUOTA,
        Some(libc::ENAMETOOLONG) | Some(libc::EISDIR) => MPI_ERR_BAD_FILE,
        _ => MPI_ERR_IO,
    }
}

pub fn io_err(what: &str, e: std::io::Error) -> MpiError {
    crate::mpi_err!(class_of(&e), "{what}: {e}")
}

/// Reads up to `buf.len()` bytes at `off`; returns how many (fewer only at end of file).
pub fn pread(f: &File, buf: &mut [u8], off: u64) -> MpiResult<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err("read", e)),
        }
    }
    Ok(done)
}

pub fn pwrite(f: &File, buf: &[u8], off: u64) -> MpiResult<()> {
    f.write_all_at(buf, off).map_err(|e| io_err("write", e))
}

/// A POSIX byte-range lock (fcntl F_SETLKW), released on drop. The kernel makes the
/// waiter sleep, and NFS forwards the lock to the server (lockd), so it also serializes
/// processes on other hosts sharing the directory.
pub struct RangeLock<'a> {
    f: &'a File,
    off: u64,
    len: u64,
}

impl<'a> RangeLock<'a> {
    pub fn new(f: &'a File, off: u64, len: u64, write: bool) -> MpiResult<RangeLock<'a>> {
        let l = RangeLock { f, off, len };
        l.fcntl(if write { libc::F_WRLCK } else { libc::F_RDLCK })?;
        Ok(l)
    }

    fn fcntl(&self, kind: i32) -> MpiResult<()> {
        // SAFETY: an all-zero flock is a valid value; the fields are set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind as _;
        fl.l_whence = libc::SEEK_SET as _;
        fl.l_start = self.off as _;
        // 0 means "to the end of the file, however far it grows".
        fl.l_len = self.len as _;
        loop {
            // SAFETY: F_SETLKW on an open descriptor with a valid flock struct.
            let rc = unsafe { libc::fcntl(self.f.as_raw_fd(), libc::F_SETLKW, &fl) };
            if rc == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                return Err(io_err("byte-range lock (fcntl)", e));
            }
        }
    }
}

impl Drop for RangeLock<'_> {
    fn drop(&mut self) {
        let _ = self.fcntl(libc::F_UNLCK);
    }
}

/// Groups of consecutive extents whose span is at most `buf` bytes (an extent longer than
/// `buf` is a group of its own), as index ranges into `segs`.
fn groups(segs: &[Seg], buf: u64) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=segs.len() {
        let end_group = i == segs.len() || {
            let lo = segs[start].off.min(segs[i].off);
            let hi = (segs[i - 1].off + segs[i - 1].len).max(segs[i].off + segs[i].len);
            // Sieve only over ascending extents (views are monotone; explicit
            // scattered extents from two-phase are too).
            segs[i].off < segs[i - 1].off + segs[i - 1].len || hi - lo > buf
        };
        if end_group {
            out.push(start..i);
            start = i;
        }
    }
    out
}

/// Writes `data` (in stream order) to the extents `segs`. With `sieve` > 0, groups of small
/// extents become one locked read-modify-write of their span of at most `sieve` bytes.
pub fn write_segs(f: &File, segs: &[Seg], data: &[u8], sieve: u64) -> MpiResult<()> {
    write_segs_with(f, segs, data, sieve, true)
}

/// [`write_segs`] for a caller that holds an exclusive lock over the whole span already
/// (atomic mode): fcntl locks do not nest within a process, so an inner unlock would
/// release part of the caller's.
pub fn write_segs_locked(f: &File, segs: &[Seg], data: &[u8], sieve: u64) -> MpiResult<()> {
    write_segs_with(f, segs, data, sieve, false)
}

fn write_segs_with(f: &File, segs: &[Seg], data: &[u8], sieve: u64, lock: bool) -> MpiResult<()> {
    let mut at = 0usize;
    for g in groups(segs, if sieve > 0 { sieve } else { 0 }) {
        let gs = &segs[g];
        if gs.len() == 1 || sieve == 0 {
            for s in gs {
                pwrite(f, &data[at..at + s.len as usize], s.off)?;
                at += s.len as usize;
            }
            continue;
        }
        let lo = gs[0].off;
        let hi = gs[gs.len() - 1].off + gs[gs.len() - 1].len;
        let _lock = if lock {
            Some(RangeLock::new(f, lo, hi - lo, true)?)
        } else {
            None
        };
        let mut buf = vec![0u8; (hi - lo) as usize];
        pread(f, &mut buf, lo)?;
        for s in gs {
            let b = (s.off - lo) as usize;
            buf[b..b + s.len as usize].copy_from_slice(&data[at..at + s.len as usize]);
            at += s.len as usize;
        }
        pwrite(f, &buf, lo)?;
    }
    Ok(())
}

/// Reads the extents `segs` into `data` (stream order); returns the bytes read before the
/// first one that ended early (end of file). With `sieve` > 0, groups of small extents are
/// read as one span of at most `sieve` bytes.
pub fn read_segs(f: &File, segs: &[Seg], data: &mut [u8], sieve: u64) -> MpiResult<usize> {
    let mut at = 0usize;
    for g in groups(segs, if sieve > 0 { sieve } else { 0 }) {
        let gs = &segs[g];
        if gs.len() == 1 || sieve == 0 {
            for s in gs {
                let n = pread(f, &mut data[at..at + s.len as usize], s.off)?;
                at += n;
                if n < s.len as usize {
                    return Ok(at);
                }
            }
            continue;
        }
        let lo = gs[0].off;
        let hi = gs[gs.len() - 1].off + gs[gs.len() - 1].len;
        let mut buf = vec![0u8; (hi - lo) as usize];
        let got = pread(f, &mut buf, lo)? as u64;
        for s in gs {
            let b = s.off - lo;
            let n = s.len.min(got.saturating_sub(b)) as usize;
            data[at..at + n].copy_from_slice(&buf[b as usize..b as usize + n]);
            at += n;
            if n < s.len as usize {
                return Ok(at);
            }
        }
    }
    Ok(at)
}

/// The span [lo, hi) that `segs` touch, or None when empty.
pub fn span(segs: &[Seg]) -> Option<(u64, u64)> {
    let lo = segs.iter().map(|s| s.off).min()?;
    let hi = segs.iter().map(|s| s.off + s.len).max()?;
    Some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sieved_and_plain_access_agree() {
        let dir = std::env::temp_dir().join(format!("ferrite-posix-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&dir)
            .unwrap();
        pwrite(&f, &[9u8; 64], 0).unwrap();
        let segs: Vec<Seg> = (0..8).map(|k| Seg { off: k * 8, len: 3 }).collect();
        let data: Vec<u8> = (0..24).collect();
        write_segs(&f, &segs, &data, 1 << 20).unwrap();
        let mut all = [0u8; 64];
        pread(&f, &mut all, 0).unwrap();
        assert_eq!(&all[0..8], &[0, 1, 2, 9, 9, 9, 9, 9]);
        assert_eq!(&all[56..64], &[21, 22, 23, 9, 9, 9, 9, 9]);
        let mut back = vec![0u8; 24];
        assert_eq!(read_segs(&f, &segs, &mut back, 1 << 20).unwrap(), 24);
        assert_eq!(back, data);
        let mut back2 = vec![0u8; 24];
        assert_eq!(read_segs(&f, &segs, &mut back2, 0).unwrap(), 24);
        assert_eq!(back2, data);
        // Past the end: a short read.
        let tail = [Seg { off: 60, len: 8 }];
        let mut t = [0u8; 8];
        assert_eq!(read_segs(&f, &tail, &mut t, 0).unwrap(), 4);
        std::fs::remove_file(&dir).unwrap();
    }
}
