//! Data access (MPI 4.1 section 14.4): where an access starts (explicit offset, individual
//! or shared file pointer, ordered), the memory side (pack/unpack with the datatype engine),
//! the file side (the view's extents), and the independent or collective path.
//!
//! Independent accesses are done when the call returns (their nonblocking forms return a
//! request that is already complete, as ROMIO's do on most file systems). Collective ones
//! run in the progress engine (`io::engine`): the nonblocking forms (MPI_File_iread_all &
//! co) complete in the background, as do split collectives between _begin and _end; the
//! blocking forms wait.

use super::coll;
use super::engine::{self, Start, Stream, Unpack};
use super::file::{lock, FileObj, FileRef, Io};
use super::posix::{self, RangeLock};
use super::view::Seg;
use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::objects::datatype::Datatype;
use crate::p2p::status::Status;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

/// Where an access starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum From {
    /// An explicit offset, in etypes of the view.
    At(i64),
    Individual,
    Shared,
    /// The shared pointer, in rank order (collective).
    Ordered,
}

/// The user's buffer: `count` elements of `dtype` at `buf`.
#[derive(Clone)]
pub struct Mem {
    pub buf: *mut u8,
    pub count: u64,
    pub dtype: Arc<Datatype>,
    /// The handle the user passed (user data representations' callbacks get it).
    pub handle: MPI_Datatype,
}

impl Mem {
    pub fn new(buf: *mut u8, count: i64, datatype: MPI_Datatype) -> MpiResult<Mem> {
        if count < 0 {
            return Err(crate::mpi_err!(MPI_ERR_COUNT, "negative count {count}"));
        }
        let dtype = crate::state::with(|st| st.objects.datatypes.get(datatype))?;
        dtype.check_buffer(buf, count as u64)?;
        Ok(Mem {
            buf,
            count: count as u64,
            dtype,
            handle: datatype,
        })
    }
}

pub fn file_status(bytes: u64) -> Status {
    Status {
        source: MPI_ANY_SOURCE,
        tag: MPI_ANY_TAG,
        bytes,
        ..Status::default()
    }
}

fn check_mode(f: &FileObj, dir: Dir, from: From) -> MpiResult<()> {
    if dir == Dir::Write && f.amode & MPI_MODE_RDONLY != 0 {
        return Err(MpiError::new(
            MPI_ERR_READ_ONLY,
            "the file was opened MPI_MODE_RDONLY",
        ));
    }
    if dir == Dir::Read && f.amode & MPI_MODE_WRONLY != 0 {
        return Err(MpiError::new(
            MPI_ERR_ACCESS,
            "the file was opened MPI_MODE_WRONLY",
        ));
    }
    if f.amode & MPI_MODE_SEQUENTIAL != 0 && matches!(from, From::At(_) | From::Individual) {
        return Err(MpiError::new(
            MPI_ERR_UNSUPPORTED_OPERATION,
            "a file opened MPI_MODE_SEQUENTIAL is accessed through the shared file pointer only",
        ));
    }
    if let From::At(o) = from {
        if o < 0 {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "negative offset {o}"));
        }
    }
    Ok(())
}

/// Where an access goes: this rank's file extents, where it starts (etypes), its length.
struct Located {
    segs: Vec<Seg>,
    start: u64,
    etypes: u64,
    bytes: u64,
}

/// The local checks and the position of an access. For an ordered access the ranks agree
/// on the shared pointer first, and a rank whose arguments failed here takes part in that
/// too (so the others are not left waiting in it).
fn locate(f: &FileObj, mem: &MpiResult<Mem>, dir: Dir, from: From) -> MpiResult<Located> {
    let sized = mem.clone().and_then(|mem| {
        check_mode(f, dir, from)?;
        let bytes = match &f.view.rep {
            Some((rep, _)) => rep.layout(mem.handle, &mem.dtype)?.file_bytes(mem.count),
            None => mem.count * f.view.type_size(&mem.dtype),
        };
        let esize = f.view.esize();
        if !bytes.is_multiple_of(esize) {
            return Err(crate::mpi_err!(
                MPI_ERR_IO,
                "{bytes} bytes of data are not a whole number of {esize}-byte etypes"
            ));
        }
        Ok((bytes, bytes / esize))
    });
    let ordered = match from {
        From::Ordered => Some(ordered_start(f, sized.as_ref().ok().map(|s| s.1))),
        _ => None,
    };
    let (bytes, etypes) = sized?;
    let start = match (from, ordered) {
        (From::At(o), _) => o as u64,
        (From::Individual, _) => f.ind,
        (From::Shared, _) => f.shared.fetch_add(etypes)?,
        (From::Ordered, o) => o.unwrap_or(Ok(0))?,
    };
    let segs = f.view.map(start * f.view.esize(), bytes);
    Ok(Located {
        segs,
        start,
        etypes,
        bytes,
    })
}

/// The data stream of an access of `mem` (`bytes` long) and, for a read that does not land
/// in place, where it is unpacked to. A contiguous memory type in the native
/// representation is used in place, not copied. A user data representation's write
/// conversion runs here (user code: the state lock is not held).
fn stream(
    mem: &Mem,
    dir: Dir,
    bytes: u64,
    view: &super::view::View,
) -> MpiResult<(Stream, Option<Unpack>)> {
    let ext32 = view.external32;
    let mut conv = None;
    if let Some((rep, _)) = &view.rep {
        let l = rep.layout(mem.handle, &mem.dtype)?;
        match dir {
            Dir::Write if rep.writes_convert(&l)? => {
                // SAFETY: the user's buffer holds `count` elements of `dtype`.
                let data = unsafe { rep.to_file(&l, mem.buf, mem.count) }?;
                return Ok((Stream::Owned(data), None));
            }
            Dir::Read if rep.reads_convert(&l)? => conv = Some((rep.clone(), l)),
            _ => {}
        }
    }
    if mem.dtype.is_contiguous() && !ext32 && conv.is_none() && bytes > 0 {
        // A contiguous type's `count` elements are `bytes` bytes at buf + true_lb.
        let addr = mem.buf.wrapping_offset(mem.dtype.true_lb()) as usize;
        let len = bytes as usize;
        return Ok((Stream::User { addr, len }, None));
    }
    if dir == Dir::Read {
        let u = Unpack {
            addr: mem.buf as usize,
            count: mem.count as usize,
            dtype: mem.dtype.clone(),
            ext32,
            conv,
        };
        return Ok((Stream::Owned(vec![0; bytes as usize]), Some(u)));
    }
    let mut packed = Vec::with_capacity(bytes as usize);
    // SAFETY: the user's buffer holds `count` elements of `dtype` (MPI's contract; a null
    // buffer with data was refused by Mem::new).
    unsafe {
        if ext32 {
            mem.dtype
                .pack_external(mem.buf, mem.count as usize, &mut packed)
                .map_err(|m| crate::mpi_err!(MPI_ERR_CONVERSION, "external32: {m}"))?;
        } else {
            mem.dtype.pack(mem.buf, mem.count as usize, &mut packed)
        }
    };
    Ok((Stream::Owned(packed), None))
}

/// How an access is carried out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Independent,
    /// Collective, done when the call returns.
    Collective,
    /// Collective, returning a request at once (MPI_File_iread_all & co).
    Nonblocking,
}

/// What a started access gives its caller.
pub enum Outcome {
    Done(Status),
    Request(MPI_Request),
}

/// One access of `mem` to file `fr`. A collective one (every rank of the file's
/// communicator calls it) runs in the progress engine (`io::engine`); when this rank's
/// arguments fail, it still takes part, so that every rank fails with the error instead
/// of waiting for this one.
pub fn access(
    fr: &FileRef,
    mem: MpiResult<Mem>,
    dir: Dir,
    from: From,
    kind: Kind,
) -> MpiResult<Outcome> {
    let mut f = lock(fr);
    let ready = locate(&f, &mem, dir, from).and_then(|loc| {
        let m = mem.as_ref().map_err(|e| e.clone())?;
        let (data, unpack) = stream(m, dir, loc.bytes, &f.view)?;
        Ok((loc, data, unpack))
    });
    if kind == Kind::Independent {
        let (loc, mut data, unpack) = ready?;
        let done = match dir {
            Dir::Write => {
                write_indep(&f.io(), &loc.segs, data.src())?;
                loc.bytes
            }
            Dir::Read => {
                let n = read_indep(&f.io(), &loc.segs, data.dst())?;
                if let Some(u) = unpack {
                    engine::unpack(&u, &mut data.dst()[..n])?;
                }
                n as u64
            }
        };
        if from == From::Individual {
            f.ind = loc.start + loc.etypes;
        }
        return Ok(Outcome::Done(file_status(done)));
    }
    let write = dir == Dir::Write;
    let (loc, data, unpack, pre) = match ready {
        Ok((loc, data, unpack)) => (Some(loc), data, unpack, None),
        Err(e) => (None, Stream::Owned(Vec::new()), None, Some(e)),
    };
    // A blocking read unpacks here, after the engine (and without the file's mutex).
    let (unpack, unpack_of) = match kind {
        Kind::Nonblocking => (unpack, None),
        _ => (None, unpack),
    };
    let start = Start {
        io: f.io(),
        segs: loc.as_ref().map_or_else(Vec::new, |l| l.segs.clone()),
        write,
        data,
        unpack,
        pre: pre.clone(),
    };
    if let Some(e) = pre {
        if kind == Kind::Nonblocking {
            // No request for the caller: the access runs only for the other ranks' sake.
            engine::start_detached(start)?;
            return Err(e);
        }
        engine::run(start)?;
        return Err(e);
    }
    let loc = loc.expect("set when there is no error");
    // The individual pointer moves at the call, for nonblocking accesses too.
    if kind == Kind::Nonblocking {
        let h = engine::start(start, f.handle)?;
        if from == From::Individual {
            f.ind = loc.start + loc.etypes;
        }
        return Ok(Outcome::Request(h));
    }
    let (n, mut data) = engine::run(start)?;
    if from == From::Individual {
        f.ind = loc.start + loc.etypes;
    }
    drop(f);
    if let Some(u) = unpack_of {
        engine::unpack(&u, &mut data.dst()[..n as usize])?;
    }
    Ok(Outcome::Done(file_status(n)))
}

/// An independent write: in atomic mode under one exclusive lock over its span.
pub fn write_indep(f: &Io, segs: &[Seg], data: &[u8]) -> MpiResult<()> {
    let sieve = if f.readable { f.hints.sieve(true) } else { 0 };
    if f.atomic {
        if let Some((lo, hi)) = posix::span(segs) {
            let _l = RangeLock::new(&f.fd, lo, hi - lo, true)?;
            // The span is locked already: sieve without a nested lock.
            return posix::write_segs_locked(&f.fd, segs, data, sieve);
        }
    }
    posix::write_segs(&f.fd, segs, data, sieve)
}

/// An independent read: in atomic mode under one shared lock over its span.
pub fn read_indep(f: &Io, segs: &[Seg], data: &mut [u8]) -> MpiResult<usize> {
    let sieve = f.hints.sieve(false);
    let _l = match (f.atomic, posix::span(segs)) {
        (true, Some((lo, hi))) => Some(RangeLock::new(&f.fd, lo, hi - lo, false)?),
        _ => None,
    };
    posix::read_segs(&f.fd, segs, data, sieve)
}

/// The start of this rank's part of an ordered access of `etypes` etypes: the ranks' parts
/// follow each other in rank order from the shared pointer, which moves past all of them.
/// None: this rank's arguments failed; every rank then fails.
fn ordered_start(f: &FileObj, etypes: Option<u64>) -> MpiResult<u64> {
    let counts = coll::allgather_u64(f.comm, &[etypes.unwrap_or(u64::MAX)], f.size)?;
    if let Some(k) = counts.iter().position(|&c| c == u64::MAX) {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "the ordered access failed on rank {k}"
        ));
    }
    let total: u64 = counts.iter().sum();
    let mut base = [0u8; 8];
    let mut failed = None;
    if f.rank == 0 {
        // u64::MAX tells the others that rank 0 could not move the pointer.
        base = match f.shared.fetch_add(total) {
            Ok(b) => b.to_le_bytes(),
            Err(e) => {
                failed = Some(e);
                u64::MAX.to_le_bytes()
            }
        };
    }
    coll::bcast(f.comm, &mut base, 0)?;
    if let Some(e) = failed {
        return Err(e);
    }
    let base = u64::from_le_bytes(base);
    if base == u64::MAX {
        return Err(MpiError::new(
            MPI_ERR_IO,
            "rank 0 could not move the shared file pointer",
        ));
    }
    Ok(base + counts[..f.rank].iter().sum::<u64>())
}
