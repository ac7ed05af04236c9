//! A fast hasher for the small integer keys of hot-path maps (matching queues, peers,
//! backlogs): one rotate, xor and multiply per word, as in Firefox and rustc ("FxHash").
//! SipHash's resistance to chosen keys buys nothing here (keys are ranks, context ids and
//! tags of the program itself) and costs about a tenth of a small message's time.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const K: u64 = 0x517c_c1b7_2722_0a95;

#[derive(Clone, Copy, Default)]
pub struct FxHasher {
    hash: u64,
}

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.hash = (self.hash.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        for &b in chunks.remainder() {
            self.add(b as u64);
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.add(i as u32 as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

pub type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_small_keys_hash_apart_and_maps_work() {
        let h = |k: (u32, i32)| {
            let mut s = FxHasher::default();
            std::hash::Hash::hash(&k, &mut s);
            s.finish()
        };
        assert_ne!(h((0, 1)), h((1, 0)));
        assert_ne!(h((0, 1)), h((0, 2)));
        let mut m: FxHashMap<(u32, i32), (u32, i32)> = FxHashMap::default();
        for c in 0..50u32 {
            for s in -1..50i32 {
                m.insert((c, s), (c, s));
            }
        }
        assert_eq!(m.len(), 50 * 51);
        assert_eq!(m[&(7, -1)], (7, -1));
        assert_eq!(m.get(&(50, 0)), None);
    }
}
