//! Data access (MPI 4.1 section 14.4): where an access starts (explicit offset, individual
//! or shared file pointer, ordered), the memory side (pack/unpack with the datatype engine),
//! the file side (the view's extents), and the independent or collective path.
//!
//! Every access is done when the call returns: the nonblocking forms return a request that is
//! already complete, and the split collectives do the work at _begin and hand the status
//! over at _end (both allowed by MPI 4.1 sections 14.4.5 and 14.6.2; ROMIO does the same for
//! most file systems).

use super::file::{lock, FileObj, FileRef};
use super::posix::{self, RangeLock};
use super::{coll, twophase};
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
pub struct Mem {
    pub buf: *mut u8,
    pub count: u64,
    pub dtype: Arc<Datatype>,
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

/// One access of `mem` to file `fr`; `collective` for the _all/_ordered forms (every rank of
/// the file's communicator calls it). Returns the status to report.
pub fn access(
    fr: &FileRef,
    mem: &Mem,
    dir: Dir,
    from: From,
    collective: bool,
) -> MpiResult<Status> {
    let mut f = lock(fr);
    // A collective call must reach the collectives below on every rank, so its local
    // errors are agreed on first... except that MPI lets a failing collective I/O call
    // fail everywhere; ranks check the same conditions (same amode, same view kinds).
    check_mode(&f, dir, from)?;
    let ext32 = f.view.external32;
    let bytes = mem.count * f.view.type_size(&mem.dtype);
    let esize = f.view.esize();
    if !bytes.is_multiple_of(esize) {
        return Err(crate::mpi_err!(
            MPI_ERR_IO,
            "{bytes} bytes of data are not a whole number of {esize}-byte etypes"
        ));
    }
    let etypes = bytes / esize;
    let start = match from {
        From::At(o) => o as u64,
        From::Individual => f.ind,
        From::Shared => f.shared.fetch_add(etypes)?,
        From::Ordered => ordered_start(&f, etypes)?,
    };
    let segs = f.view.map(start * esize, bytes);
    // A contiguous memory type in the native representation is used in place, not copied.
    let direct = mem.dtype.is_contiguous() && !ext32 && bytes > 0;
    let done = match dir {
        Dir::Write => {
            let mut packed = Vec::new();
            let data: &[u8] = if direct {
                // SAFETY: a contiguous type's `count` elements are `bytes` readable bytes
                // at buf + true_lb (MPI's contract; a null buffer with data was refused).
                unsafe {
                    std::slice::from_raw_parts(
                        mem.buf.wrapping_offset(mem.dtype.true_lb()),
                        bytes as usize,
                    )
                }
            } else {
                packed.reserve(bytes as usize);
                // SAFETY: the user's buffer holds `count` elements of `dtype`.
                unsafe {
                    if ext32 {
                        mem.dtype
                            .pack_external(mem.buf, mem.count as usize, &mut packed)
                            .map_err(|m| crate::mpi_err!(MPI_ERR_CONVERSION, "external32: {m}"))?;
                    } else {
                        mem.dtype.pack(mem.buf, mem.count as usize, &mut packed)
                    }
                };
                &packed
            };
            if collective {
                twophase::write(&f, &segs, data)?;
            } else {
                write_indep(&f, &segs, data)?;
            }
            bytes
        }
        Dir::Read => {
            let mut packed = Vec::new();
            let data: &mut [u8] = if direct {
                // SAFETY: as for writes, `bytes` writable bytes at buf + true_lb.
                unsafe {
                    std::slice::from_raw_parts_mut(
                        mem.buf.wrapping_offset(mem.dtype.true_lb()),
                        bytes as usize,
                    )
                }
            } else {
                packed.resize(bytes as usize, 0);
                &mut packed
            };
            let n = if collective {
                twophase::read(&f, &segs, data)?
            } else {
                read_indep(&f, &segs, data)?
            };
            if !direct {
                // SAFETY: the buffer is writable for `count` elements; `n` bytes of packed
                // data never reach past them.
                unsafe {
                    if ext32 {
                        mem.dtype
                            .unpack_external(&packed[..n], mem.buf, mem.count as usize)
                    } else {
                        mem.dtype.unpack(&packed[..n], mem.buf, mem.count as usize)
                    }
                };
            }
            n as u64
        }
    };
    if from == From::Individual {
        f.ind = start + etypes;
    }
    Ok(file_status(done))
}

/// An independent write: in atomic mode under one exclusive lock over its span.
pub fn write_indep(f: &FileObj, segs: &[super::view::Seg], data: &[u8]) -> MpiResult<()> {
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
pub fn read_indep(f: &FileObj, segs: &[super::view::Seg], data: &mut [u8]) -> MpiResult<usize> {
    let sieve = f.hints.sieve(false);
    let _l = match (f.atomic, posix::span(segs)) {
        (true, Some((lo, hi))) => Some(RangeLock::new(&f.fd, lo, hi - lo, false)?),
        _ => None,
    };
    posix::read_segs(&f.fd, segs, data, sieve)
}

/// The start of this rank's part of an ordered access of `etypes` etypes: the ranks' parts
/// follow each other in rank order from the shared pointer, which moves past all of them.
fn ordered_start(f: &FileObj, etypes: u64) -> MpiResult<u64> {
    let counts = coll::allgather_u64(f.comm, &[etypes], f.size)?;
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
