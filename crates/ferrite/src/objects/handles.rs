//! Handle tables: MPI handles are C ints laid out as MPICH lays them out.
//!
//! bits 30..32 kind (01 builtin, 10 direct: a table index), bits 26..30 object type,
//! bits 0..26 index. Builtin objects (MPI_COMM_WORLD, MPI_INT, ...) are resolved by each
//! object module; this table holds the objects users create.

use std::os::raw::c_int;

/// MPICH's object type codes (bits 26..30 of a handle).
pub mod kind {
    pub const COMM: u32 = 0x1;
    pub const GROUP: u32 = 0x2;
    pub const DATATYPE: u32 = 0x3;
    pub const FILE: u32 = 0x4;
    pub const ERRHANDLER: u32 = 0x5;
    pub const OP: u32 = 0x6;
    pub const INFO: u32 = 0x7;
    pub const WIN: u32 = 0x8;
    pub const KEYVAL: u32 = 0x9;
    pub const REQUEST: u32 = 0xb;
    pub const SESSION: u32 = 0xe;
}

const DIRECT: u32 = 0x8000_0000;
const INDEX_MASK: u32 = 0x03ff_ffff;

/// A table of user-created objects of one type, with free-slot reuse.
pub struct HandleTable<T> {
    type_code: u32,
    /// Added to every index in a handle: two tables of one type can share the type's
    /// handles (p2p's waiters take the upper half of the request indices).
    base: u32,
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> HandleTable<T> {
    pub const fn new(type_code: u32) -> Self {
        HandleTable {
            type_code,
            base: 0,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// A table whose first `n` indices are never handed out (MPICH uses some direct handles
    /// for predefined objects, e.g. MPI_FLOAT_INT is datatype index 0).
    pub fn with_reserved(type_code: u32, n: u32) -> Self {
        let mut t = Self::new(type_code);
        t.slots.resize_with(n as usize, || None);
        t
    }

    /// A table whose handles have indices from `base` on (a table of the same type with
    /// base 0 finds none of them, having no slot that far).
    pub const fn with_base(type_code: u32, base: u32) -> Self {
        let mut t = Self::new(type_code);
        t.base = base;
        t
    }

    fn handle(&self, idx: u32) -> c_int {
        (DIRECT | (self.type_code << 26) | (self.base + idx)) as c_int
    }

    #[inline]
    fn index(&self, h: c_int) -> Option<usize> {
        let h = h as u32;
        if h & !INDEX_MASK != DIRECT | (self.type_code << 26) {
            return None;
        }
        (h & INDEX_MASK).checked_sub(self.base).map(|i| i as usize)
    }

    #[inline]
    pub fn insert(&mut self, v: T) -> c_int {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(v);
                self.handle(i)
            }
            None => {
                self.slots.push(Some(v));
                self.handle(self.slots.len() as u32 - 1)
            }
        }
    }

    /// True when `h` has this table's type and kind (it may still be stale).
    pub fn owns(&self, h: c_int) -> bool {
        self.index(h).is_some()
    }

    #[inline]
    pub fn get(&self, h: c_int) -> Option<&T> {
        self.slots.get(self.index(h)?)?.as_ref()
    }

    #[inline]
    pub fn get_mut(&mut self, h: c_int) -> Option<&mut T> {
        let i = self.index(h)?;
        self.slots.get_mut(i)?.as_mut()
    }

    pub fn remove(&mut self, h: c_int) -> Option<T> {
        let i = self.index(h)?;
        let v = self.slots.get_mut(i)?.take()?;
        self.free.push(i as u32);
        Some(v)
    }

    /// [`Self::remove`] without handing the value back: dropped in place, not moved out.
    /// True if `h` was in the table.
    pub fn free(&mut self, h: c_int) -> bool {
        let Some(i) = self.index(h) else {
            return false;
        };
        match self.slots.get_mut(i) {
            Some(s @ Some(_)) => {
                *s = None;
                self.free.push(i as u32);
                true
            }
            _ => false,
        }
    }

    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = (c_int, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|v| (self.handle(i as u32), v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_reuse_slots() {
        let mut t = HandleTable::new(kind::REQUEST);
        let a = t.insert("a");
        let b = t.insert("b");
        assert_eq!(a as u32, 0xac00_0000);
        assert_eq!(t.get(b), Some(&"b"));
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.get(a), None);
        assert_eq!(t.remove(a), None);
        assert!(!t.free(a), "a freed handle is stale");
        let c = t.insert("c");
        assert!(t.free(c));
        assert_eq!(t.get(c), None);
        let c = t.insert("c");
        assert_eq!(c, a, "freed slot is reused");
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn tables_with_a_base_share_a_type_without_overlap() {
        let mut low = HandleTable::new(kind::REQUEST);
        let mut high = HandleTable::with_base(kind::REQUEST, 1 << 25);
        let a = low.insert('a');
        let b = high.insert('b');
        assert_eq!(b as u32, 0xae00_0000);
        assert_eq!((low.get(b), high.get(a)), (None, None));
        assert_eq!((low.get(a), high.get(b)), (Some(&'a'), Some(&'b')));
        assert_eq!(high.remove(b), Some('b'));
        assert_eq!(high.insert('c'), b, "freed slot is reused");
    }

    #[test]
    fn foreign_handles_are_rejected() {
        let mut t = HandleTable::new(kind::COMM);
        t.insert(1);
        assert_eq!(
            t.get(0x4400_0000),
            None,
            "builtin comm is not a table entry"
        );
        assert_eq!(
            t.get(0x8c00_0000u32 as c_int),
            None,
            "a datatype handle is not a comm"
        );
        assert_eq!(t.get(-1), None);
    }
}
