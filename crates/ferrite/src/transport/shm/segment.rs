//! One process's receive segment: an anonymous shared-memory file (memfd) holding a header,
//! two rings of cell indices (free and ready) and the cells.
//!
//! The file never has a name, so nothing can be left behind however the job ends (a rank
//! or the launcher SIGKILLed, any launcher): it lives as long as some process has it open
//! or mapped. Peers open it as `/proc/<owner pid>/fd/<fd>` (see [`Card`]), which the
//! kernel allows to processes of the same user (Yama's ptrace scope restricts attaching,
//! not this).
//!
//! Layout (all offsets fixed by [`Geometry`], which peers re-derive and check from the header):
//!
//! ```text
//! 0      Header: magic, version, owner's rank and pid, geometry, doorbell token, whether
//!        the owner fences with membarrier
//! 64     `sleeping` flag (own cache line: written by the owner, read by every sender),
//!        `credit_waiters` at 72 (set by senders about to sleep for lack of credits)
//! 128    free ring positions (enqueue, dequeue on separate cache lines)
//! 256    ready ring positions
//! 384    free ring slots, ring_cap * 16 bytes
//!        ready ring slots, ring_cap * 16 bytes
//!        cells, ncells * cell_size bytes (64-byte aligned)
//! ```
//!
//! No job secret is stored: only processes of the same user can open the file, and those
//! could ptrace us anyway.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const MAGIC: u64 = u64::from_le_bytes(*b"FERRSHM\0");
pub const VERSION: u32 = 2;
/// Bytes before the ring slots.
pub const HEADER_BYTES: usize = 384;
/// One ring slot: sequence number and value.
pub const SLOT_BYTES: usize = 16;
/// Smallest cell accepted (cell header plus a useful payload).
pub const MIN_CELL: usize = 64;

/// The fixed part at offset 0. Fields other than `magic`, `sleeping` and `credit_waiters`
/// are written once by the owner before `magic` is published (release), and peers copy and
/// validate them once.
#[repr(C)]
pub struct Header {
    pub magic: AtomicU64,
    pub version: u32,
    pub owner_rank: u32,
    pub pid: i32,
    pub ncells: u32,
    pub cell_size: u32,
    pub ring_cap: u32,
    pub token: u64,
    /// Non-zero: the owner calls membarrier before sleeping, so senders registered for it
    /// need only a compiler fence after publishing (sleepfence.rs).
    pub membarrier: u32,
    _pad0: [u8; 20],
    /// Non-zero while the owner is (about to be) asleep on its doorbell.
    pub sleeping: AtomicU32,
    _pad1: u32,
    /// Senders that found no free cell and are (about to be) asleep: bit `rank % 64` of
    /// each. The owner clears it and rings their doorbells when it frees cells.
    pub credit_waiters: AtomicU64,
    _pad2: [u8; 48],
}

const _: () = assert!(std::mem::size_of::<Header>() == 128);

/// Positions of one ring, each on its own cache line (they are written by different sides).
#[repr(C)]
pub struct RingPos {
    pub enqueue: AtomicU64,
    _pad0: [u8; 56],
    pub dequeue: AtomicU64,
    _pad1: [u8; 56],
}

const _: () = assert!(std::mem::size_of::<RingPos>() == 128);

/// Sizes that determine the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub ncells: u32,
    pub cell_size: u32,
}

impl Geometry {
    /// Checks the sizes and rounds the cell size up to a multiple of 64 (cache lines).
    pub fn new(ncells: u32, cell_size: usize) -> Result<Geometry, String> {
        if !(2..=(1 << 20)).contains(&ncells) {
            return Err(format!(
                "{ncells} shared-memory cells (FERRITE_SHM_CELLS_K/_B) is not in 2..=1048576"
            ));
        }
        if !(MIN_CELL..=(1 << 24)).contains(&cell_size) {
            return Err(format!(
                "FERRITE_SHM_CELL_SIZE={cell_size} is not in {MIN_CELL}..=16777216"
            ));
        }
        Ok(Geometry {
            ncells,
            cell_size: cell_size.next_multiple_of(64) as u32,
        })
    }
    /// Ring capacity: a power of two of at least twice the cell count. At most ncells
    /// indices exist, but a slot is reusable only once the side that claimed its previous
    /// position has released it; the slack means a push to `ready` can never find its slot
    /// still held (see queue.rs).
    pub fn ring_cap(&self) -> usize {
        (self.ncells as usize).next_power_of_two() * 2
    }
    pub fn free_slots(&self) -> usize {
        HEADER_BYTES
    }
    pub fn ready_slots(&self) -> usize {
        HEADER_BYTES + self.ring_cap() * SLOT_BYTES
    }
    pub fn cells(&self) -> usize {
        (self.ready_slots() + self.ring_cap() * SLOT_BYTES).next_multiple_of(64)
    }
    pub fn total(&self) -> usize {
        self.cells() + self.ncells as usize * self.cell_size as usize
    }
}

/// Cells per receiver for a job of `size` ranks: K * ceil(log2(size)) + B.
pub fn cell_count(size: u32, k: u32, b: u32) -> u32 {
    let log = if size <= 1 {
        0
    } else {
        32 - (size - 1).leading_zeros()
    };
    k.saturating_mul(log).saturating_add(b)
}

/// Where a peer finds a rank's segment: the owner's pid, its descriptor of the file, and the
/// random token in the header (a reused pid cannot pass for the owner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Card {
    pub pid: i32,
    pub fd: i32,
    pub token: u64,
}

impl Card {
    /// `<pid>:<fd>:<token in hex>`, as published through PMI.
    pub fn encode(&self) -> String {
        format!("{}:{}:{:x}", self.pid, self.fd, self.token)
    }

    pub fn decode(s: &str) -> Option<Card> {
        let mut it = s.split(':');
        let card = Card {
            pid: it.next()?.parse().ok()?,
            fd: it.next()?.parse().ok()?,
            token: u64::from_str_radix(it.next()?, 16).ok()?,
        };
        it.next().is_none().then_some(card)
    }
}

/// A mapped segment. The owner keeps the file open (peers open it through /proc).
pub struct Segment {
    base: *mut u8,
    len: usize,
    geom: Geometry,
    /// The owner's descriptor of the file; -1 in peers (they close theirs once mapped).
    fd: i32,
    /// Validated copies of the header fields.
    pub owner_rank: u32,
    pub pid: i32,
    pub token: u64,
    /// The owner fences with membarrier before sleeping (header `membarrier`).
    pub membarrier: bool,
}

// SAFETY: the mapping is only accessed through atomics (header flag, rings) and through cells
// whose ownership is handed over by the rings' acquire/release protocol, so sharing the
// mapping between threads is as sound as sharing it between processes.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

fn errno_msg() -> String {
    std::io::Error::last_os_error().to_string()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A new anonymous shared-memory file: a memfd; where the kernel has none (before Linux
/// 3.17), a POSIX shared-memory object removed the moment it is made. Also the memory of
/// shared RMA windows (rma/shared.rs).
pub(crate) fn anonymous_file() -> Result<i32, String> {
    // SAFETY: a valid NUL-terminated name and a plain flag.
    let fd = unsafe { libc::memfd_create(c"ferrite-shm".as_ptr(), libc::MFD_CLOEXEC) };
    if fd >= 0 {
        return Ok(fd);
    }
    if errno() != libc::ENOSYS {
        return Err(format!("memfd_create failed: {}", errno_msg()));
    }
    let mut t = [0u8; 8];
    // SAFETY: t is valid for 8 bytes.
    unsafe { libc::getrandom(t.as_mut_ptr().cast(), 8, 0) };
    let name = format!(
        "/ferrite-{}-{:x}",
        std::process::id(),
        u64::from_le_bytes(t)
    );
    let cname = std::ffi::CString::new(name.clone()).map_err(|e| e.to_string())?;
    // SAFETY: cname is a valid NUL-terminated string.
    let fd = unsafe {
        libc::shm_open(
            cname.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cannot create shared memory /dev/shm{name}: {}",
            errno_msg()
        ));
    }
    // SAFETY: as above; the open descriptor keeps the object alive.
    unsafe { libc::shm_unlink(cname.as_ptr()) };
    Ok(fd)
}

impl Segment {
    /// Creates and initializes this process's segment.
    /// `membarrier`: the owner is registered for membarrier and uses it before sleeping.
    pub fn create(
        geom: Geometry,
        owner_rank: u32,
        token: u64,
        membarrier: bool,
    ) -> Result<Self, String> {
        let len = geom.total();
        let fd = anonymous_file()?;
        // SAFETY: fd is an open file we own.
        let rc = unsafe { libc::ftruncate(fd, len as libc::off_t) };
        let mut err = if rc != 0 { Some(errno_msg()) } else { None };
        if err.is_none() {
            // Reserve the pages now: running out of memory is then an error here, not a
            // SIGBUS when a cell is first touched.
            // SAFETY: fd is an open file we own.
            let rc = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
            if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
                err = Some(format!(
                    "{} (FERRITE_SHM_CELL_SIZE and FERRITE_SHM_CELLS_K/_B set the size)",
                    std::io::Error::from_raw_os_error(rc)
                ));
            }
        }
        let base = match err {
            None => map(fd, len),
            Some(e) => Err(e),
        };
        let base = match base {
            Ok(b) => b,
            Err(why) => {
                // SAFETY: fd is ours.
                unsafe { libc::close(fd) };
                return Err(format!(
                    "cannot size or map {len} bytes of shared memory: {why}"
                ));
            }
        };
        // SAFETY: base points at `len` fresh zero-filled bytes of a mapping we own.
        unsafe { init(base, geom, owner_rank, token, membarrier) };
        Ok(Segment {
            base,
            len,
            geom,
            fd,
            owner_rank,
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
            token,
            membarrier,
        })
    }

    /// How peers find this segment.
    pub fn card(&self) -> Card {
        Card {
            pid: self.pid,
            fd: self.fd,
            token: self.token,
        }
    }

    /// Maps a peer's segment and validates its header. `Ok(None)`: the owner has exited.
    pub fn open(card: Card) -> Result<Option<Self>, String> {
        let path = peer_path(card.pid, card.fd);
        let Some(fd) = open_peer_file(card.pid, card.fd)? else {
            return Ok(None);
        };
        // SAFETY: an all-zero stat is a valid value to be overwritten by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open; st is a valid out-pointer.
        let rc = unsafe { libc::fstat(fd, &mut st) };
        let len = st.st_size as usize;
        let mapped = if rc != 0 {
            Err(errno_msg())
        } else if len < HEADER_BYTES {
            Err(format!("it is only {len} bytes"))
        } else {
            map(fd, len)
        };
        // SAFETY: fd is ours; the mapping stays valid after close.
        unsafe { libc::close(fd) };
        let base = mapped.map_err(|e| format!("cannot map {path}: {e}"))?;
        let mut seg = Segment {
            base,
            len,
            geom: Geometry {
                ncells: 0,
                cell_size: 0,
            },
            fd: -1,
            owner_rank: 0,
            pid: 0,
            token: 0,
            membarrier: false,
        };
        let h = seg.header();
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(format!("{path} is not a Ferrite segment"));
        }
        if h.version != VERSION {
            return Err(format!(
                "{path} has layout version {}, this library {VERSION}",
                h.version
            ));
        }
        if h.pid != card.pid || h.token != card.token {
            return Err(format!(
                "{path} belongs to another process (pid {} token {:x}), not the published one",
                h.pid, h.token
            ));
        }
        let geom = Geometry::new(h.ncells, h.cell_size as usize)
            .ok()
            .filter(|g| g.cell_size == h.cell_size && g.ring_cap() == h.ring_cap as usize)
            .filter(|g| g.total() == len && h.pid > 0)
            .ok_or_else(|| format!("{path} has an inconsistent header"))?;
        let (owner_rank, pid, token, mb) = (h.owner_rank, h.pid, h.token, h.membarrier != 0);
        seg.geom = geom;
        seg.membarrier = mb;
        seg.owner_rank = owner_rank;
        seg.pid = pid;
        seg.token = token;
        Ok(Some(seg))
    }

    pub fn geometry(&self) -> Geometry {
        self.geom
    }

    pub fn base(&self) -> *mut u8 {
        self.base
    }

    pub fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_BYTES long and page-aligned; Header is
        // repr(C) of plain integers and atomics, valid for any bit pattern.
        unsafe { &*(self.base as *const Header) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: base/len describe a mapping made by `map` and not unmapped before; fd
        // (if any) is the owner's own descriptor.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
            if self.fd >= 0 {
                libc::close(self.fd);
            }
        }
    }
}

fn peer_path(pid: i32, fd: i32) -> String {
    format!("/proc/{pid}/fd/{fd}")
}

/// Opens another process's anonymous shared-memory file through `/proc/<pid>/fd/<fd>`
/// (read-write). `Ok(None)`: that process has exited.
pub(crate) fn open_peer_file(pid: i32, fd: i32) -> Result<Option<i32>, String> {
    let path = peer_path(pid, fd);
    let cpath = std::ffi::CString::new(path.clone()).map_err(|e| e.to_string())?;
    // SAFETY: cpath is a valid NUL-terminated string.
    let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd >= 0 {
        return Ok(Some(fd));
    }
    match errno() {
        libc::ENOENT | libc::ESRCH => Ok(None),
        libc::EACCES | libc::EPERM => Err(format!(
            "cannot open {path}: {} (the process of another user, or one that made \
             itself non-dumpable?)",
            errno_msg()
        )),
        _ => Err(format!("cannot open {path}: {}", errno_msg())),
    }
}

/// Maps `len` bytes of a shared-memory file read-write (shm segments, shared windows).
pub(crate) fn map(fd: i32, len: usize) -> Result<*mut u8, String> {
    // SAFETY: mapping a shared-memory fd; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(errno_msg())
    } else {
        Ok(p.cast())
    }
}

/// Writes the header and fills the free ring with every cell index; publishes `magic` last.
///
/// # Safety
/// `base` must point at `geom.total()` writable zeroed bytes not yet visible to other users.
unsafe fn init(base: *mut u8, geom: Geometry, owner_rank: u32, token: u64, membarrier: bool) {
    // SAFETY: the caller guarantees the bytes; Header is valid for all-zero bytes.
    let h = unsafe { &mut *(base as *mut Header) };
    h.version = VERSION;
    h.owner_rank = owner_rank;
    // SAFETY: getpid has no preconditions.
    h.pid = unsafe { libc::getpid() };
    h.ncells = geom.ncells;
    h.cell_size = geom.cell_size;
    h.ring_cap = geom.ring_cap() as u32;
    h.token = token;
    h.membarrier = membarrier as u32;
    // SAFETY: the rings lie inside the mapping (Geometry computes their offsets).
    unsafe {
        super::queue::Ring::at(base, geom, super::queue::FREE).init_full(geom.ncells);
        super::queue::Ring::at(base, geom, super::queue::READY).init_full(0);
    }
    h.magic.store(MAGIC, Ordering::Release);
}
