//! Memory of MPI_Win_allocate_shared: one anonymous shared-memory file (memfd) per window,
//! made by the communicator's rank 0 and mapped by every member through
//! `/proc/<pid>/fd/<fd>` (as shm segments are, transport/shm/segment.rs). Ranks' parts
//! follow each other in rank order with no gap (MPI 4.1 12.2.3: contiguous unless
//! `alloc_shared_noncontig`), so loads and stores reach any member's memory directly.
//! Members must share a host: checked with the host name and the kernel's boot id.
//! After the parts, one accumulate lock word per rank (rma/direct.rs).
//!
//! MPI_Win_allocate's memory is such a file too, of one part (`SharedMem::single`), which
//! same-host members map when they first access it (rma/direct.rs).

use super::direct::{align_slot, LOCK_SLOT};
use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::state::Held;
use crate::transport::shm::segment::{anonymous_file, map, open_peer_file};

/// A mapping of a shared window's whole file; unmapped (and closed) with the window.
pub struct SharedMem {
    pub base: usize,
    pub len: usize,
    /// Rank 0's descriptor (kept open so members can open the file); -1 elsewhere.
    fd: i32,
    /// (offset in the mapping, size, disp_unit) of every rank's part.
    pub parts: Vec<(usize, i64, i64)>,
    /// Offset of rank 0's accumulate lock word; rank r's is `LOCK_SLOT` bytes further each.
    pub locks: usize,
}

impl SharedMem {
    /// MPI_Win_allocate's memory: `size` zeroed bytes and a lock word in a new anonymous
    /// shared file whose descriptor stays open (peers open it through /proc) until freed.
    pub fn single(size: usize, disp_unit: i64) -> Result<SharedMem, String> {
        let fd = anonymous_file()?;
        let locks = align_slot(size);
        let len = locks + LOCK_SLOT;
        // SAFETY: `fd` is our open descriptor of the new file.
        let rc = unsafe { libc::ftruncate(fd, len as libc::off_t) };
        let base = if rc != 0 {
            Err(std::io::Error::last_os_error().to_string())
        } else {
            map(fd, len)
        };
        match base {
            Ok(p) => Ok(SharedMem {
                base: p as usize,
                len,
                fd,
                parts: vec![(0, size as i64, disp_unit)],
                locks,
            }),
            Err(e) => {
                // SAFETY: our own descriptor.
                unsafe { libc::close(fd) };
                Err(e)
            }
        }
    }

    /// The descriptor peers open (-1 in members that opened rank 0's file).
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Address of part `r`'s accumulate lock word in this mapping.
    pub fn lock_of(&self, r: usize) -> usize {
        self.base + self.locks + r * LOCK_SLOT
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are our own mapping, which nothing uses after the window is
        // freed; `fd` is ours when set.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
            if self.fd >= 0 {
                libc::close(self.fd);
            }
        }
    }
}

/// This host's identity: a hash of its name and boot id.
pub(crate) fn host_id() -> u64 {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let mut name = [0u8; 256];
    // SAFETY: the buffer is valid for its length.
    unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in boot.bytes().chain(name.iter().copied()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn word(b: &[u8], i: usize) -> i64 {
    i64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

impl Held {
    /// Collective over `comm` (rank `me`): maps the shared memory of a new window in
    /// which this process has `size` bytes with unit `disp_unit`.
    pub fn shared_alloc(
        &mut self,
        comm: MPI_Comm,
        me: usize,
        size: i64,
        disp_unit: i64,
    ) -> MpiResult<SharedMem> {
        // Rank 0 makes the file first, so its (pid, fd) travel in the one exchange.
        let mut fd = -1;
        let mut err = String::new();
        if me == 0 {
            match anonymous_file() {
                Ok(f) => fd = f,
                Err(e) => err = e,
            }
        }
        // SAFETY: getpid has no preconditions.
        let pid = i64::from(unsafe { libc::getpid() });
        let mine = [size, disp_unit, host_id() as i64, pid, i64::from(fd)];
        let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let all = self.allgather_fixed(comm, &bytes)?;
        let rows: Vec<&[u8]> = all.chunks_exact(bytes.len()).collect();
        let close_own = |fd: i32| {
            if fd >= 0 {
                // SAFETY: our own descriptor.
                unsafe { libc::close(fd) };
            }
        };
        if rows.iter().any(|r| word(r, 2) != word(rows[0], 2)) {
            close_own(fd);
            return Err(MpiError::new(
                MPI_ERR_RMA_SHARED,
                "MPI_Win_allocate_shared needs every process of the communicator on one host",
            ));
        }
        if word(rows[0], 4) < 0 {
            return Err(MpiError::new(
                MPI_ERR_NO_MEM,
                format!("shared window memory could not be made at rank 0 {err}"),
            ));
        }
        let mut parts = Vec::with_capacity(rows.len());
        let mut total = 0usize;
        for r in &rows {
            let s = word(r, 0);
            parts.push((total, s, word(r, 1)));
            total = total
                .checked_add(usize::try_from(s).unwrap_or(0))
                .ok_or_else(|| MpiError::new(MPI_ERR_SIZE, "shared window too large"))?;
        }
        let locks = align_slot(total);
        let len = locks + rows.len() * LOCK_SLOT;
        let own = if me == 0 {
            fd
        } else {
            // The values rank 0 sent are its own pid_t and descriptor.
            let (pid, rfd) = (word(rows[0], 3) as i32, word(rows[0], 4) as i32);
            match open_peer_file(pid, rfd) {
                Ok(Some(f)) => f,
                Ok(None) => {
                    return Err(MpiError::new(
                        MPI_ERR_RMA_SHARED,
                        "rank 0 exited before its shared window memory was opened",
                    ))
                }
                Err(e) => {
                    return Err(crate::mpi_err!(
                        MPI_ERR_RMA_SHARED,
                        "cannot open rank 0's shared window memory: {e}"
                    ))
                }
            }
        };
        // Every member sizes the file (the same size): no one maps it before it is big
        // enough, whatever the order.
        // SAFETY: `own` is an open descriptor of the file.
        let rc = unsafe { libc::ftruncate(own, len as libc::off_t) };
        let base = if rc != 0 {
            Err(std::io::Error::last_os_error().to_string())
        } else {
            map(own, len).map(|p| p as usize)
        };
        if me != 0 {
            close_own(own);
        }
        let base = base.map_err(|e| {
            close_own(fd);
            crate::mpi_err!(
                MPI_ERR_NO_MEM,
                "cannot map {len} bytes of shared window memory: {e}"
            )
        })?;
        Ok(SharedMem {
            base,
            len,
            fd,
            parts,
            locks,
        })
    }
}
