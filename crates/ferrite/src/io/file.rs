//! File objects: the table behind MPI_File handles, MPI_File_open/close/delete and the
//! per-file state (view, file pointers, hints, atomicity, error handler).
//!
//! MPI_File is a pointer in MPICH's ABI; Ferrite's handles are table handles (as for the
//! other objects, kind FILE) carried in the pointer's bits, so MPI_File_c2f/f2c are casts.

use super::coll;
use super::hints::Hints;
use super::posix::io_err;
use super::shared::{self, SharedPtr};
use super::view::View;
use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::objects::handles::{kind, HandleTable};
use crate::objects::info::Info;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

pub struct FileObj {
    /// The C handle (MPI_File) of this file, for errors raised after the call.
    pub handle: usize,
    /// Shared with the collective accesses in progress ([`Io`]).
    pub fd: Arc<std::fs::File>,
    pub path: PathBuf,
    /// Private duplicate of the communicator the file was opened on.
    pub comm: MPI_Comm,
    pub rank: usize,
    pub size: usize,
    pub amode: i32,
    pub view: View,
    /// The individual file pointer, in etypes of the view.
    pub ind: u64,
    pub shared: SharedPtr,
    pub atomic: bool,
    pub hints: Hints,
    pub errhandler: MPI_Errhandler,
    /// The result of a split collective begun and not yet ended.
    pub split: Option<MPI_Request>,
    /// The `fd` may be read (a MPI_MODE_WRONLY file is opened read-write when it can, so
    /// data sieving and two-phase can read-modify-write).
    pub readable: bool,
}

pub type FileRef = Arc<Mutex<FileObj>>;

/// What an access needs of its file once it has started: collective accesses advance in
/// the progress engine, which never takes a file's mutex (an MPI-IO call holds it while
/// it waits in the engine).
#[derive(Clone)]
pub struct Io {
    pub fd: Arc<std::fs::File>,
    pub comm: MPI_Comm,
    pub rank: usize,
    pub size: usize,
    pub hints: Hints,
    pub atomic: bool,
    pub readable: bool,
}

static FILES: Mutex<HandleTable<FileRef>> = Mutex::new(HandleTable::new(kind::FILE));

fn table() -> MutexGuard<'static, HandleTable<FileRef>> {
    FILES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The C handle of table handle `h`.
pub fn to_c(h: i32) -> MPI_File {
    h as u32 as usize as MPI_File
}

/// The table handle in C handle `f` (None for values no table handle can have).
pub fn from_c(f: usize) -> Option<i32> {
    u32::try_from(f).ok().map(|x| x as i32)
}

/// The file behind C handle `f`, or MPI_ERR_FILE.
pub fn get(f: usize) -> MpiResult<FileRef> {
    if f == 0 {
        return Err(MpiError::new(
            MPI_ERR_FILE,
            "null file handle (MPI_FILE_NULL)",
        ));
    }
    from_c(f)
        .and_then(|h| table().get(h).cloned())
        .ok_or_else(|| crate::mpi_err!(MPI_ERR_FILE, "invalid file handle {f:#x}"))
}

pub fn lock(f: &FileRef) -> MutexGuard<'_, FileObj> {
    f.lock().unwrap_or_else(|e| e.into_inner())
}

/// The error handler of file `f` (None for MPI_FILE_NULL or a handle that is no file).
pub fn errhandler_of(f: usize) -> Option<MPI_Errhandler> {
    let h = from_c(f)?;
    let r = table().get(h).cloned()?;
    let e = lock(&r).errhandler;
    Some(e)
}

pub fn set_errhandler(f: usize, e: MPI_Errhandler) -> MpiResult<()> {
    lock(&get(f)?).errhandler = e;
    Ok(())
}

const ACCESS_MODES: i32 = MPI_MODE_RDONLY | MPI_MODE_WRONLY | MPI_MODE_RDWR;
const ALL_MODES: i32 = ACCESS_MODES
    | MPI_MODE_CREATE
    | MPI_MODE_EXCL
    | MPI_MODE_DELETE_ON_CLOSE
    | MPI_MODE_UNIQUE_OPEN
    | MPI_MODE_APPEND
    | MPI_MODE_SEQUENTIAL;

/// MPI 4.1 section 14.2.1's rules on amode.
pub fn check_amode(amode: i32) -> MpiResult<()> {
    let bad = |why: &str| Err(crate::mpi_err!(MPI_ERR_AMODE, "amode {amode:#x}: {why}"));
    if amode & !ALL_MODES != 0 {
        return bad("unknown bits");
    }
    if (amode & ACCESS_MODES).count_ones() != 1 {
        return bad(
            "exactly one of MPI_MODE_RDONLY, MPI_MODE_WRONLY and MPI_MODE_RDWR is required",
        );
    }
    if amode & MPI_MODE_RDONLY != 0 && amode & (MPI_MODE_CREATE | MPI_MODE_EXCL) != 0 {
        return bad("MPI_MODE_RDONLY cannot go with MPI_MODE_CREATE or MPI_MODE_EXCL");
    }
    if amode & MPI_MODE_RDWR != 0 && amode & MPI_MODE_SEQUENTIAL != 0 {
        return bad("MPI_MODE_RDWR cannot go with MPI_MODE_SEQUENTIAL");
    }
    Ok(())
}

/// The path in a file name, without a ROMIO file-system prefix ("ufs:", "nfs:" ...).
pub fn strip_prefix(name: &str) -> &str {
    for p in [
        "ufs:", "nfs:", "lustre:", "gpfs:", "pvfs2:", "xfs:", "testfs:", "panfs:",
    ] {
        if let Some(rest) = name.strip_prefix(p) {
            return rest;
        }
    }
    name
}

fn os_open(path: &PathBuf, amode: i32, creator: bool) -> std::io::Result<(std::fs::File, bool)> {
    let mut o = std::fs::OpenOptions::new();
    let write = amode & (MPI_MODE_WRONLY | MPI_MODE_RDWR) != 0;
    o.read(amode & MPI_MODE_WRONLY == 0).write(write);
    if creator && amode & MPI_MODE_CREATE != 0 {
        if amode & MPI_MODE_EXCL != 0 {
            o.create_new(true);
        } else {
            o.create(true);
        }
    }
    if amode & MPI_MODE_WRONLY != 0 {
        // Read-write when allowed, for read-modify-write; write-only otherwise.
        let mut rw = o.clone();
        rw.read(true);
        if let Ok(f) = rw.open(path) {
            return Ok((f, true));
        }
    }
    let f = o.open(path)?;
    Ok((f, amode & MPI_MODE_WRONLY == 0))
}

/// MPI_File_open: collective over `comm`. Rank 0 creates the file (so MPI_MODE_EXCL has one
/// winner) and the shared-pointer side file; the others open after it; every rank fails
/// with the same class when any rank fails.
pub fn open(comm: MPI_Comm, name: &str, amode: i32, info: &Info) -> MpiResult<i32> {
    let fcomm = coll::dup(comm)?;
    let r = open_on(fcomm, name, amode, info);
    if r.is_err() {
        coll::free(fcomm);
    }
    r
}

fn open_on(comm: MPI_Comm, name: &str, amode: i32, info: &Info) -> MpiResult<i32> {
    let (rank, size) = crate::state::with(|st| {
        let c = st.objects.comms.get(comm)?;
        Ok((c.rank as usize, c.size() as usize))
    })?;
    let modes = coll::allgather_u64(comm, &[amode as u32 as u64], size)?;
    if modes.iter().any(|&m| m != modes[0]) {
        return Err(crate::mpi_err!(
            MPI_ERR_NOT_SAME,
            "the processes passed different amodes"
        ));
    }
    check_amode(amode)?;
    let path = PathBuf::from(strip_prefix(name));
    // Rank 0 first: [error class, side-file token].
    let mut mine: Option<MpiResult<(std::fs::File, bool)>> = None;
    let mut head = [0u8; 16];
    if rank == 0 {
        let r = os_open(&path, amode, true).map_err(|e| io_err(&format!("open {name}"), e));
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let token = t ^ ((std::process::id() as u64) << 40);
        let class = r.as_ref().err().map_or(0, |e| e.class as u64);
        head[0..8].copy_from_slice(&class.to_le_bytes());
        head[8..16].copy_from_slice(&token.to_le_bytes());
        mine = Some(r);
    }
    coll::bcast(comm, &mut head, 0)?;
    let word = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().unwrap());
    let (class0, token) = (word(0), word(1));
    let side = shared::side_path(&path, token);
    if class0 != 0 {
        return match mine {
            Some(Err(e)) => Err(e),
            _ => Err(crate::mpi_err!(
                class0 as i32,
                "opening {name} failed on rank 0"
            )),
        };
    }
    let r = match mine {
        Some(r) => r,
        None => os_open(&path, amode, false).map_err(|e| io_err(&format!("open {name}"), e)),
    };
    let class = r.as_ref().err().map_or(0, |e| e.class as u64);
    let all = coll::allgather_u64(comm, &[class], size)?;
    let (fd, readable) = r?;
    if let Some(k) = all.iter().position(|&c| c != 0) {
        return Err(crate::mpi_err!(
            all[k] as i32,
            "opening {name} failed on rank {k}"
        ));
    }
    let hosts = coll::hosts(comm)?;
    let mut hints = Hints::defaults(hosts);
    hints.apply(info, size);
    let mut f = FileObj {
        handle: 0,
        fd: Arc::new(fd),
        path,
        comm,
        rank,
        size,
        amode,
        view: View::bytes(),
        ind: 0,
        shared: SharedPtr::new(side),
        atomic: false,
        hints,
        errhandler: crate::objects::errhandler::file_null_handler(),
        split: None,
        readable,
    };
    if amode & MPI_MODE_APPEND != 0 {
        // Both pointers start at the end of the file (MPI 4.1 section 14.2.1).
        let end = f.size_bytes()?;
        f.ind = end;
        if rank == 0 {
            f.shared.set(end)?;
        }
        coll::barrier(comm)?;
    }
    let r = Arc::new(Mutex::new(f));
    let h = table().insert(r.clone());
    lock(&r).handle = to_c(h) as usize;
    Ok(h)
}

impl FileObj {
    pub fn io(&self) -> Io {
        Io {
            fd: self.fd.clone(),
            comm: self.comm,
            rank: self.rank,
            size: self.size,
            hints: self.hints.clone(),
            atomic: self.atomic,
            readable: self.readable,
        }
    }

    pub fn size_bytes(&self) -> MpiResult<u64> {
        self.fd
            .metadata()
            .map(|m| m.len())
            .map_err(|e| io_err("fstat", e))
    }
}

/// MPI_File_close: collective; every process's writes are done before rank 0 removes the
/// side file and, with MPI_MODE_DELETE_ON_CLOSE, the file.
pub fn close(f: usize) -> MpiResult<()> {
    let r = get(f)?;
    let h = from_c(f).unwrap_or(0);
    let (comm, rank) = {
        let g = lock(&r);
        if g.split.is_some() {
            return Err(MpiError::new(
                MPI_ERR_OTHER,
                "a split collective access is still active on the file",
            ));
        }
        (g.comm, g.rank)
    };
    // Collective accesses still in progress (requests freed with MPI_Request_free, or not
    // completed as they should have been) end before the communicator goes.
    super::engine::drain(comm)?;
    coll::barrier(comm)?;
    let g = lock(&r);
    if rank == 0 {
        g.shared.remove();
        if g.amode & MPI_MODE_DELETE_ON_CLOSE != 0 {
            let _ = std::fs::remove_file(&g.path);
        }
    }
    drop(g);
    table().remove(h);
    coll::free(comm);
    Ok(())
}

/// MPI_File_delete.
pub fn delete(name: &str) -> MpiResult<()> {
    std::fs::remove_file(strip_prefix(name)).map_err(|e| io_err(&format!("delete {name}"), e))
}
