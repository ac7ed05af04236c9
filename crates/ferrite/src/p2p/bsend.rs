//! The buffer attached with MPI_Buffer_attach: a first-fit allocator over the user's memory.
//! Each buffered send takes `packed size + MPI_BSEND_OVERHEAD` bytes until its data has left
//! (for eager messages: at once; for rendezvous: when the receiver has it).

use super::request::Ptr;
use crate::abi::consts::MPI_BSEND_OVERHEAD;

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
        let need = len.checked_add(MPI_BSEND_OVERHEAD as usize)?;
        let mut at = 0usize;
        let mut pos = self.used.len();
        for (i, &(off, l)) in self.used.iter().enumerate() {
            if off - at >= need {
                pos = i;
                break;
            }
            at = off + l;
        }
        if pos == self.used.len() && self.size.checked_sub(at)? < need {
            return None;
        }
        self.used.insert(pos, (at, need));
        Some(at)
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
}
