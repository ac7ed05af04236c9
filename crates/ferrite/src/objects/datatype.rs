//! Datatypes. MINIMAL FIRST CUT (builtin contiguous types only); the objects work replaces
//! the internals with the full engine while keeping the interface the protocols use:
//! `Datatypes::get`, `Datatype::{size, is_contiguous, true_lb, pack, unpack}`.

use super::handles::{kind, HandleTable};
use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use std::sync::Arc;

pub struct Datatype {
    /// Bytes of data in one element.
    pub size: usize,
    pub lb: isize,
    pub extent: isize,
    pub true_lb: isize,
    pub true_extent: isize,
    /// One element is `size` contiguous bytes at `true_lb`, and elements follow each other
    /// without gaps (extent == size), so `count` elements are one block.
    pub contiguous: bool,
    pub committed: bool,
}

impl Datatype {
    pub fn size(&self) -> usize {
        self.size
    }

    pub fn is_contiguous(&self) -> bool {
        self.contiguous
    }

    pub fn true_lb(&self) -> isize {
        self.true_lb
    }

    /// Appends the data of `count` elements at `buf` to `out`.
    ///
    /// # Safety
    /// `buf` with this type's layout and `count` elements is readable memory.
    pub unsafe fn pack(&self, buf: *const u8, count: usize, out: &mut Vec<u8>) {
        assert!(self.contiguous, "derived datatypes are not implemented yet");
        let len = self.size * count;
        // SAFETY: per the contract the `len` bytes at buf + true_lb are readable.
        let src = unsafe { std::slice::from_raw_parts(buf.offset(self.true_lb), len) };
        out.extend_from_slice(src);
    }

    /// Scatters packed `data` (at most `count` elements' worth; may end mid-element) into
    /// `buf` with this type's layout.
    ///
    /// # Safety
    /// `buf` with this type's layout and `count` elements is writable memory.
    pub unsafe fn unpack(&self, data: &[u8], buf: *mut u8, count: usize) {
        assert!(self.contiguous, "derived datatypes are not implemented yet");
        let len = data.len().min(self.size * count);
        // SAFETY: per the contract `len` <= size*count bytes at buf + true_lb are writable,
        // and they cannot overlap `data`, which the library owns.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.offset(self.true_lb), len) };
    }
}

pub struct Datatypes {
    pub user: HandleTable<Arc<Datatype>>,
    builtin: Vec<Option<Arc<Datatype>>>,
}

impl Default for Datatypes {
    fn default() -> Self {
        Self::new()
    }
}

impl Datatypes {
    pub fn new() -> Self {
        Datatypes {
            user: HandleTable::new(kind::DATATYPE),
            builtin: vec![None; 256],
        }
    }

    pub fn get(&mut self, h: MPI_Datatype) -> MpiResult<Arc<Datatype>> {
        let u = h as u32;
        // MPICH builtins: 0x4c00SSII, SS = size in bytes, II = index.
        if u & 0xfc00_0000 == 0x4c00_0000 && (u >> 8) & 0xff != 0 && u & 0x00ff_0000 == 0 {
            let size = ((u >> 8) & 0xff) as usize;
            let slot = &mut self.builtin[(u & 0xff) as usize];
            let dt = slot.get_or_insert_with(|| {
                Arc::new(Datatype {
                    size,
                    lb: 0,
                    extent: size as isize,
                    true_lb: 0,
                    true_extent: size as isize,
                    contiguous: true,
                    committed: true,
                })
            });
            return Ok(dt.clone());
        }
        self.user.get(h).cloned().ok_or_else(|| {
            MpiError::new(
                MPI_ERR_TYPE,
                format!("invalid datatype handle {:#x}", h as u32),
            )
        })
    }
}
