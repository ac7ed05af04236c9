//! Datatypes: the layout of one element and how to pack/unpack `count` of them.
//!
//! A type is kept as the list of data blocks of one element, `(displacement, length)` in
//! type-map order with adjacent blocks merged, plus its bounds. That serves every constructor
//! (contiguous, vector, hvector, indexed, hindexed, struct, resized) with one pack/unpack loop;
//! a long vector costs one entry per block (a compact repeated form is later work).
//!
//! The protocols use only `Datatypes::get` and `Datatype::{size, is_contiguous, true_lb,
//! pack, unpack}`.

use super::handles::{kind, HandleTable};
use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq)]
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
    /// Size of each basic element when they all have the same size (MPI_Get_elements).
    pub basic_size: Option<usize>,
    /// Data of one element: (displacement from the buffer, length), adjacent blocks merged.
    blocks: Vec<(isize, usize)>,
}

impl Datatype {
    /// A predefined type of `size` bytes (one basic element).
    pub fn basic(size: usize) -> Self {
        Datatype {
            size,
            lb: 0,
            extent: size as isize,
            true_lb: 0,
            true_extent: size as isize,
            contiguous: true,
            committed: true,
            basic_size: Some(size),
            blocks: if size > 0 { vec![(0, size)] } else { vec![] },
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn is_contiguous(&self) -> bool {
        self.contiguous
    }

    pub fn true_lb(&self) -> isize {
        self.true_lb
    }

    /// Basic elements in `bytes` of packed data of this type (MPI_Get_elements), or None
    /// (MPI_UNDEFINED) when that is not a whole number of basic elements.
    pub fn elements_in(&self, bytes: u64) -> Option<u64> {
        match self.basic_size {
            Some(0) => Some(0),
            Some(b) if bytes.is_multiple_of(b as u64) => Some(bytes / b as u64),
            _ => None,
        }
    }

    /// Appends the data of `count` elements at `buf` to `out`.
    ///
    /// # Safety
    /// `buf` with this type's layout and `count` elements is readable memory.
    pub unsafe fn pack(&self, buf: *const u8, count: usize, out: &mut Vec<u8>) {
        if self.contiguous {
            let len = self.size * count;
            // SAFETY: per the contract the `len` bytes at buf + true_lb are readable.
            let src = unsafe { std::slice::from_raw_parts(buf.offset(self.true_lb), len) };
            out.extend_from_slice(src);
            return;
        }
        out.reserve(self.size * count);
        for i in 0..count as isize {
            for &(disp, len) in &self.blocks {
                // SAFETY: element i's block lies inside the buffer described by the contract.
                let src =
                    unsafe { std::slice::from_raw_parts(buf.offset(i * self.extent + disp), len) };
                out.extend_from_slice(src);
            }
        }
    }

    /// Scatters packed `data` (at most `count` elements' worth; may end mid-element) into
    /// `buf` with this type's layout. Never writes past what `count` elements cover.
    ///
    /// # Safety
    /// `buf` with this type's layout and `count` elements is writable memory that does not
    /// overlap `data`.
    pub unsafe fn unpack(&self, data: &[u8], buf: *mut u8, count: usize) {
        let total = data.len().min(self.size * count);
        if self.contiguous {
            // SAFETY: per the contract `total` <= size*count bytes at buf + true_lb are
            // writable, and they cannot overlap `data`.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), buf.offset(self.true_lb), total)
            };
            return;
        }
        let mut done = 0usize;
        'outer: for i in 0..count as isize {
            for &(disp, len) in &self.blocks {
                if done >= total {
                    break 'outer;
                }
                let n = len.min(total - done);
                // SAFETY: element i's block is writable per the contract; `n` <= block length.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr().add(done),
                        buf.offset(i * self.extent + disp),
                        n,
                    )
                };
                done += n;
            }
        }
    }

    /// The type made of `copies` of `old`, copy k placed at byte displacement `disps[k]`
    /// (struct-like: each entry may have its own old type). The common core of every
    /// constructor: computes bounds by MPI's rules and merges adjacent blocks.
    pub fn from_parts(parts: &[(isize, &Datatype)]) -> Datatype {
        let mut blocks: Vec<(isize, usize)> = Vec::new();
        let mut size = 0usize;
        let (mut lb, mut ub) = (isize::MAX, isize::MIN);
        let (mut tlb, mut tub) = (isize::MAX, isize::MIN);
        let mut basic: Option<Option<usize>> = None;
        for &(disp, old) in parts {
            lb = lb.min(disp + old.lb);
            ub = ub.max(disp + old.lb + old.extent);
            if old.size > 0 {
                tlb = tlb.min(disp + old.true_lb);
                tub = tub.max(disp + old.true_lb + old.true_extent);
                basic = match basic {
                    None => Some(old.basic_size),
                    Some(b) if b == old.basic_size => Some(b),
                    Some(_) => Some(None),
                };
            }
            size += old.size;
            for &(d, len) in &old.blocks {
                let d = disp + d;
                match blocks.last_mut() {
                    Some((pd, pl)) if *pd + *pl as isize == d => *pl += len,
                    _ => blocks.push((d, len)),
                }
            }
        }
        if parts.is_empty() {
            (lb, ub) = (0, 0);
        }
        if tlb > tub {
            (tlb, tub) = (lb, lb);
        }
        let extent = ub - lb;
        let contiguous = blocks.len() <= 1 && extent == size as isize && {
            blocks.first().is_none_or(|&(d, _)| d == tlb)
        };
        Datatype {
            size,
            lb,
            extent,
            true_lb: tlb,
            true_extent: tub - tlb,
            contiguous,
            committed: false,
            basic_size: basic.unwrap_or(Some(0)),
            blocks,
        }
    }

    /// `count` blocks of `blocklen` elements of `old`, block i starting at byte `stride * i`.
    pub fn hvector(count: usize, blocklen: usize, stride: isize, old: &Datatype) -> Datatype {
        let mut parts = Vec::with_capacity(count * blocklen);
        for i in 0..count as isize {
            for j in 0..blocklen as isize {
                parts.push((i * stride + j * old.extent, old));
            }
        }
        Self::from_parts(&parts)
    }

    /// Blocks of `old` at byte displacements: (displacement, block length in elements).
    pub fn hindexed(blocks: &[(isize, usize)], old: &Datatype) -> Datatype {
        let mut parts = Vec::new();
        for &(disp, len) in blocks {
            for j in 0..len as isize {
                parts.push((disp + j * old.extent, old));
            }
        }
        Self::from_parts(&parts)
    }

    /// MPI_Type_create_struct: (displacement, block length, type) per block.
    pub fn structure(blocks: &[(isize, usize, &Datatype)]) -> Datatype {
        let mut parts = Vec::new();
        for &(disp, len, old) in blocks {
            for j in 0..len as isize {
                parts.push((disp + j * old.extent, old));
            }
        }
        Self::from_parts(&parts)
    }

    /// MPI_Type_create_resized: same data, new lower bound and extent.
    pub fn resized(old: &Datatype, lb: isize, extent: isize) -> Datatype {
        let mut t = old.clone();
        t.lb = lb;
        t.extent = extent;
        t.contiguous = old.contiguous && extent == old.size as isize && old.true_lb == lb;
        t.committed = false;
        t
    }
}

/// The MPICH pair types (MPI_FLOAT_INT ...) are direct handles at the start of the datatype
/// table; user types get indices from here on so they never collide.
const RESERVED_DIRECT: u32 = 8;

pub struct Datatypes {
    pub user: HandleTable<Arc<Datatype>>,
    builtin: Vec<Option<Arc<Datatype>>>,
    pairs: Vec<Arc<Datatype>>,
}

impl Default for Datatypes {
    fn default() -> Self {
        Self::new()
    }
}

/// A value type followed by an int, laid out as the C struct `{ T v; int i; }`.
fn pair(value: usize, align: usize) -> Datatype {
    let int = Datatype::basic(4);
    let v = Datatype::basic(value);
    let int_at = value.next_multiple_of(4) as isize;
    let mut t = Datatype::from_parts(&[(0, &v), (int_at, &int)]);
    let end = (int_at + 4) as usize;
    t = Datatype::resized(&t, 0, end.next_multiple_of(align) as isize);
    t.basic_size = None;
    t.committed = true;
    t
}

impl Datatypes {
    pub fn new() -> Self {
        Datatypes {
            user: HandleTable::with_reserved(kind::DATATYPE, RESERVED_DIRECT),
            builtin: vec![None; 256],
            // In handle order: FLOAT_INT, DOUBLE_INT, LONG_INT, SHORT_INT, LONG_DOUBLE_INT.
            pairs: vec![
                Arc::new(pair(4, 4)),
                Arc::new(pair(8, 8)),
                Arc::new(pair(8, 8)),
                Arc::new(pair(2, 4)),
                Arc::new(pair(16, 16)),
            ],
        }
    }

    /// Resolves a handle, builtin or user-made (committed or not).
    pub fn lookup(&mut self, h: MPI_Datatype) -> MpiResult<Arc<Datatype>> {
        let u = h as u32;
        // MPICH builtins: 0x4c00SSII, SS = size in bytes, II = index.
        if u & 0xffff_0000 == 0x4c00_0000 && (u >> 8) & 0xff != 0 {
            let size = ((u >> 8) & 0xff) as usize;
            let slot = &mut self.builtin[(u & 0xff) as usize];
            return Ok(slot
                .get_or_insert_with(|| Arc::new(Datatype::basic(size)))
                .clone());
        }
        if (MPI_FLOAT_INT as u32..MPI_FLOAT_INT as u32 + self.pairs.len() as u32).contains(&u) {
            return Ok(self.pairs[(u - MPI_FLOAT_INT as u32) as usize].clone());
        }
        self.user.get(h).cloned().ok_or_else(|| {
            if h == MPI_DATATYPE_NULL {
                MpiError::new(MPI_ERR_TYPE, "null datatype (MPI_DATATYPE_NULL)")
            } else {
                MpiError::new(
                    MPI_ERR_TYPE,
                    format!("invalid datatype handle {:#x}", h as u32),
                )
            }
        })
    }

    /// Resolves a handle for communication: it must be committed.
    pub fn get(&mut self, h: MPI_Datatype) -> MpiResult<Arc<Datatype>> {
        let t = self.lookup(h)?;
        if !t.committed {
            return Err(MpiError::new(
                MPI_ERR_TYPE,
                format!(
                    "datatype {:#x} is not committed (call MPI_Type_commit)",
                    h as u32
                ),
            ));
        }
        Ok(t)
    }

    /// True for predefined types (which cannot be freed or committed away).
    pub fn is_builtin(&self, h: MPI_Datatype) -> bool {
        !self.user.owns(h) || (h as u32 & 0x03ff_ffff) < RESERVED_DIRECT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack_all(t: &Datatype, buf: &[u8], count: usize) -> Vec<u8> {
        let mut out = Vec::new();
        // SAFETY: the tests size `buf` to cover `count` elements of `t`.
        unsafe { t.pack(buf.as_ptr(), count, &mut out) };
        out
    }

    #[test]
    fn vector_packs_a_strided_column_and_unpacks_it_back() {
        let int = Datatype::basic(4);
        // 3 blocks of 2 ints, stride 5 ints.
        let v = Datatype::hvector(3, 2, 20, &int);
        assert_eq!(v.size, 24);
        assert_eq!(v.extent, 2 * 20 + 8);
        assert!(!v.contiguous);
        let src: Vec<u8> = (0..60u8).collect();
        let packed = pack_all(&v, &src, 1);
        let want: Vec<u8> = [0..8, 20..28, 40..48].into_iter().flatten().collect();
        assert_eq!(packed, want);
        let mut dst = vec![0xffu8; 60];
        // SAFETY: `dst` covers one element of `v`.
        unsafe { v.unpack(&packed, dst.as_mut_ptr(), 1) };
        for (i, &b) in dst.iter().enumerate() {
            let inside = (i % 20) < 8 && i < 48;
            assert_eq!(b, if inside { i as u8 } else { 0xff }, "byte {i}");
        }
    }

    #[test]
    fn partial_unpack_stops_mid_element_and_never_overruns() {
        let int = Datatype::basic(4);
        let v = Datatype::hvector(2, 1, 8, &int); // extent 12, data at 0..4 and 8..12
        let data = [1u8, 2, 3, 4, 5, 6];
        let mut dst = vec![0u8; 24];
        // SAFETY: `dst` covers two elements of `v`.
        unsafe { v.unpack(&data, dst.as_mut_ptr(), 2) };
        assert_eq!(&dst[..12], &[1, 2, 3, 4, 0, 0, 0, 0, 5, 6, 0, 0]);
        assert!(dst[12..].iter().all(|&b| b == 0));
    }

    #[test]
    fn contiguous_of_contiguous_stays_one_block() {
        let d = Datatype::basic(8);
        let c = Datatype::hvector(1, 10, 0, &d);
        assert!(c.contiguous);
        assert_eq!((c.size, c.extent), (80, 80));
        let c2 = Datatype::hvector(3, 1, c.extent, &c);
        assert!(c2.contiguous);
        assert_eq!(c2.blocks.len(), 1);
        assert_eq!(c2.elements_in(240), Some(30));
        assert_eq!(c2.elements_in(7), None);
    }

    #[test]
    fn pair_types_have_c_struct_layout() {
        let mut t = Datatypes::new();
        let di = t.get(MPI_DOUBLE_INT).unwrap();
        assert_eq!((di.size, di.extent), (12, 16));
        let si = t.get(MPI_SHORT_INT).unwrap();
        assert_eq!((si.size, si.extent), (6, 8));
        let packed = pack_all(&si, &[1, 2, 9, 9, 3, 4, 5, 6], 1);
        assert_eq!(packed, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(t.get(MPI_INT).unwrap().size, 4);
        assert!(t.get(MPI_DATATYPE_NULL).is_err());
    }

    #[test]
    fn resized_and_struct_bounds_follow_the_standard() {
        let int = Datatype::basic(4);
        let dbl = Datatype::basic(8);
        let s = Datatype::structure(&[(0, 1, &int), (8, 1, &dbl)]);
        assert_eq!((s.size, s.lb, s.extent), (12, 0, 16));
        assert_eq!(s.basic_size, None);
        let r = Datatype::resized(&int, -4, 16);
        assert_eq!((r.lb, r.extent, r.true_lb, r.true_extent), (-4, 16, 0, 4));
        assert!(!r.contiguous);
    }
}
