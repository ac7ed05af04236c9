//! The buffer attached with MPI_Buffer_attach: a first-fit allocator over the user's memory.
//! Each buffered send takes `packed size + MPI_BSEND_OVERHEAD` bytes until its data has left
//! (for eager messages: at once; for rendezvous: when the receiver has it).
//!
//! Also the buffers of MPI 4.1 section 3.6 the send protocol does not know about: those
//! attached to a communicator (MPI_Comm_attach_buffer), used by Bsend on that communicator
//! before the process's buffer, and MPI_BUFFER_AUTOMATIC attached to the process. A
//! buffered send through one of them (`OwnBuffers`) packs its data into the buffer and
//! sends it from there with a standard-mode internal send, whose block is freed when that
//! send completes (`reap`). The process's user buffer stays in `P2p::attached`.

use super::request::Ptr;
use crate::consts::{MPI_Comm, MPI_Request, MPI_BSEND_OVERHEAD};

pub struct Attached {
    pub base: Ptr,
    pub size: usize,
    /// Blocks in use: (offset, length), sorted by offset.
    used: Vec<(usize, usize)>,
}

impl Attached {
    pub fn new(base: Ptr, size: usize) -> Attached {
        Attached {
            base,
            size,
            used: Vec::new(),
        }
    }

    /// Reserves room for a message of `len` bytes; returns the offset of its data.
    pub fn alloc(&mut self, len: usize) -> Option<usize> {
        let (pos, at, need) = self.find(len)?;
        self.used.insert(pos, (at, need));
        Some(at)
    }

    /// Whether `alloc(len)` would succeed now.
    pub fn fits(&self, len: usize) -> bool {
        self.find(len).is_some()
    }

    /// Blocks in use.
    pub fn blocks(&self) -> usize {
        self.used.len()
    }

    /// First fit for `len` bytes plus the overhead: (index in `used`, offset, block length).
    fn find(&self, len: usize) -> Option<(usize, usize, usize)> {
        let need = len.checked_add(MPI_BSEND_OVERHEAD as usize)?;
        let mut at = 0usize;
        for (i, &(off, l)) in self.used.iter().enumerate() {
            if off - at >= need {
                return Some((i, at, need));
            }
            at = off + l;
        }
        (self.size.checked_sub(at)? >= need).then_some((self.used.len(), at, need))
    }

    pub fn free(&mut self, off: usize) {
        if let Some(i) = self.used.iter().position(|&(o, _)| o == off) {
            self.used.remove(i);
        }
    }

    pub fn in_use(&self) -> bool {
        !self.used.is_empty()
    }
}

/// A buffer of MPI 4.1 section 3.6 other than the process's user buffer.
pub enum OwnBuffer {
    /// User memory attached to a communicator.
    Region(Attached),
    /// MPI_BUFFER_AUTOMATIC: the library copies each message into memory of its own.
    Automatic,
}

/// Whose buffer: a communicator's, or (None) the process's automatic buffer.
pub type Owner = Option<MPI_Comm>;

struct Entry {
    owner: Owner,
    buf: OwnBuffer,
    /// Internal sends still using the buffer: (request, block offset for a region).
    sends: Vec<(MPI_Request, Option<usize>)>,
}

/// The attached communicator buffers and the automatic process buffer.
#[derive(Default)]
pub struct OwnBuffers {
    entries: Vec<Entry>,
}

/// What a buffered send through an own buffer sends: a block of a region, or a copy.
pub enum Placed {
    Block { ptr: Ptr, off: usize },
    Copy,
}

impl OwnBuffers {
    pub const fn new() -> OwnBuffers {
        OwnBuffers {
            entries: Vec::new(),
        }
    }

    fn find(&self, owner: Owner) -> Option<&Entry> {
        self.entries.iter().find(|e| e.owner == owner)
    }

    fn find_mut(&mut self, owner: Owner) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.owner == owner)
    }

    pub fn attached(&self, owner: Owner) -> bool {
        self.find(owner).is_some()
    }

    /// Attaches `buf` for `owner`; false if it already has one.
    pub fn attach(&mut self, owner: Owner, buf: OwnBuffer) -> bool {
        if self.attached(owner) {
            return false;
        }
        self.entries.push(Entry {
            owner,
            buf,
            sends: Vec::new(),
        });
        true
    }

    /// Detaches the buffer of `owner` (the caller has flushed it first).
    pub fn detach(&mut self, owner: Owner) -> Option<OwnBuffer> {
        let i = self.entries.iter().position(|e| e.owner == owner)?;
        Some(self.entries.remove(i).buf)
    }

    /// The buffer a buffered send on `comm` uses, if it is not the process's user buffer:
    /// the communicator's, else the process's automatic one.
    pub fn for_send(&self, comm: MPI_Comm) -> Option<Owner> {
        [Some(comm), None].into_iter().find(|&o| self.attached(o))
    }

    /// Reserves room for `len` bytes in `owner`'s buffer. Err: (buffer size) when it is full.
    pub fn place(&mut self, owner: Owner, len: usize) -> Result<Placed, usize> {
        let e = self.find_mut(owner).ok_or(0usize)?;
        match &mut e.buf {
            OwnBuffer::Automatic => Ok(Placed::Copy),
            OwnBuffer::Region(a) => {
                let off = a.alloc(len).ok_or(a.size)?;
                Ok(Placed::Block {
                    ptr: Ptr(a.base.0.wrapping_add(off)),
                    off,
                })
            }
        }
    }

    /// Gives back a block `place` reserved (the send could not start).
    pub fn unplace(&mut self, owner: Owner, off: usize) {
        if let Some(OwnBuffer::Region(a)) = self.find_mut(owner).map(|e| &mut e.buf) {
            a.free(off);
        }
    }

    /// Records the internal send `h` that uses `owner`'s buffer (block `off`).
    pub fn track(&mut self, owner: Owner, h: MPI_Request, off: Option<usize>) {
        if let Some(e) = self.find_mut(owner) {
            e.sends.push((h, off));
        }
    }

    /// Frees the blocks of internal sends `done` says have completed; returns those
    /// requests for the caller to release.
    pub fn reap(&mut self, mut done: impl FnMut(MPI_Request) -> bool) -> Vec<MPI_Request> {
        let mut finished = Vec::new();
        for e in &mut self.entries {
            e.sends.retain(|&(h, off)| {
                if !done(h) {
                    return true;
                }
                if let (Some(off), OwnBuffer::Region(a)) = (off, &mut e.buf) {
                    a.free(off);
                }
                finished.push(h);
                false
            });
        }
        finished
    }

    /// True while buffered sends still use `owner`'s buffer.
    pub fn busy(&self, owner: Owner) -> bool {
        self.sends(owner) > 0
    }

    /// How many buffered sends still use `owner`'s buffer.
    pub fn sends(&self, owner: Owner) -> usize {
        self.find(owner).map_or(0, |e| e.sends.len())
    }

    /// The region attached for `owner`: (address, size); None for none or automatic.
    pub fn region(&self, owner: Owner) -> Option<(Ptr, usize)> {
        match self.find(owner).map(|e| &e.buf) {
            Some(OwnBuffer::Region(a)) => Some((a.base, a.size)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_with_overhead_and_reuse() {
        let ov = MPI_BSEND_OVERHEAD as usize;
        let mut a = Attached::new(Ptr(std::ptr::null_mut()), 2 * (100 + ov) + 10);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(100).unwrap();
        assert_eq!((x, y), (0, 100 + ov));
        assert_eq!(a.alloc(11), None, "only 10 bytes left");
        assert_eq!(a.alloc(0), None, "the overhead alone does not fit");
        a.free(x);
        assert_eq!(a.alloc(101), None, "a freed block too small is skipped");
        assert_eq!(a.alloc(50), Some(0));
        assert!(a.in_use());
        a.free(0);
        a.free(y);
        assert!(!a.in_use());
    }

    #[test]
    fn own_buffers_prefer_the_communicator_and_free_on_completion() {
        let ov = MPI_BSEND_OVERHEAD as usize;
        let mut mem = vec![0u8; 100 + ov];
        let mut b = OwnBuffers::default();
        assert_eq!(b.for_send(5), None);
        assert!(b.attach(None, OwnBuffer::Automatic));
        assert_eq!(b.for_send(5), Some(None));
        let region = Attached::new(Ptr(mem.as_mut_ptr()), mem.len());
        assert!(b.attach(Some(5), OwnBuffer::Region(region)));
        assert!(
            !b.attach(Some(5), OwnBuffer::Automatic),
            "one buffer per communicator"
        );
        assert_eq!(b.for_send(5), Some(Some(5)));
        assert_eq!(b.for_send(6), Some(None));
        let Ok(Placed::Block { off, .. }) = b.place(Some(5), 100) else {
            panic!("100 bytes fit")
        };
        assert_eq!(b.place(Some(5), 1).err(), Some(100 + ov), "full");
        b.track(Some(5), 42, Some(off));
        assert!(b.busy(Some(5)));
        assert_eq!(b.reap(|_| false), Vec::<MPI_Request>::new());
        assert_eq!(b.reap(|h| h == 42), vec![42]);
        assert!(!b.busy(Some(5)));
        assert!(matches!(
            b.place(Some(5), 100),
            Ok(Placed::Block { off: 0, .. })
        ));
        assert!(matches!(b.place(None, 1 << 30), Ok(Placed::Copy)));
        assert!(b.detach(Some(5)).is_some() && b.detach(Some(5)).is_none());
    }
}
