//! The registration cache: memory regions registered for remote reads, kept for the next
//! rendezvous from the same buffer (registering costs a system call and, on hardware,
//! pinning pages). A sorted map by start address; a lookup hits when one registration covers
//! the whole range asked for. Bounded by count and bytes; the least recently used go first.
//!
//! Staleness: a registration names virtual addresses. Software providers (tcp, udp) read
//! those addresses when the transfer happens, so memory freed and allocated again at the same
//! address is read as it is now. Providers that pin pages would read the old pages; for them
//! `invalidate` drops registrations overlapping a range the program gave back (munmap and
//! the like, seen by `memhooks.rs`), and the transport keeps freed heap memory mapped
//! (`ffi::keep_heap_mapped`) for what those hooks cannot see (libc's own unmapping).

use std::collections::BTreeMap;

/// Counters for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub invalidations: u64,
}

struct Entry<T> {
    end: u64,
    last_use: u64,
    reg: T,
}

pub struct RegCache<T> {
    by_start: BTreeMap<u64, Entry<T>>,
    bytes: u64,
    max_entries: usize,
    max_bytes: u64,
    clock: u64,
    pub stats: CacheStats,
}

impl<T> RegCache<T> {
    pub fn new(max_entries: usize, max_bytes: u64) -> RegCache<T> {
        RegCache {
            by_start: BTreeMap::new(),
            bytes: 0,
            max_entries: max_entries.max(1),
            max_bytes,
            clock: 0,
            stats: CacheStats::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.by_start.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    /// The registration covering `[addr, addr+len)`, if any (counts a hit or a miss).
    pub fn lookup(&mut self, addr: u64, len: u64) -> Option<(u64, &T)> {
        self.clock += 1;
        let end = addr.saturating_add(len);
        // Registrations starting at or below addr, nearest first; one covering the range
        // must be among them. Bounded by max_entries.
        let found = self
            .by_start
            .range(..=addr)
            .rev()
            .find(|(_, e)| e.end >= end)
            .map(|(&s, _)| s);
        match found {
            Some(s) => {
                self.stats.hits += 1;
                let e = self.by_start.get_mut(&s).expect("found above");
                e.last_use = self.clock;
                Some((s, &e.reg))
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// Adds a registration of `[addr, addr+len)`; returns the registrations evicted to stay
    /// within the limits (and one at the same start, replaced), for the caller to release.
    pub fn insert(&mut self, addr: u64, len: u64, reg: T) -> Vec<T> {
        self.clock += 1;
        let mut out = Vec::new();
        if let Some(old) = self.by_start.remove(&addr) {
            self.bytes -= old.end - addr;
            out.push(old.reg);
        }
        self.by_start.insert(
            addr,
            Entry {
                end: addr + len,
                last_use: self.clock,
                reg,
            },
        );
        self.bytes += len;
        while self.by_start.len() > self.max_entries
            || (self.bytes > self.max_bytes && self.by_start.len() > 1)
        {
            let (&victim, _) = self
                .by_start
                .iter()
                .filter(|(&s, _)| s != addr)
                .min_by_key(|(_, e)| e.last_use)
                .expect("more than one entry");
            let e = self.by_start.remove(&victim).expect("just found");
            self.bytes -= e.end - victim;
            self.stats.evictions += 1;
            out.push(e.reg);
        }
        out
    }

    /// Drops every registration overlapping `[addr, addr+len)` (memory unmapped); returns
    /// them for the caller to release.
    pub fn invalidate(&mut self, addr: u64, len: u64) -> Vec<T> {
        let end = addr.saturating_add(len);
        let hit: Vec<u64> = self
            .by_start
            .range(..end)
            .filter(|(_, e)| e.end > addr)
            .map(|(&s, _)| s)
            .collect();
        hit.into_iter()
            .map(|s| {
                let e = self.by_start.remove(&s).expect("listed above");
                self.bytes -= e.end - s;
                self.stats.invalidations += 1;
                e.reg
            })
            .collect()
    }

    /// Every registration, emptied (at shutdown).
    pub fn drain(&mut self) -> Vec<T> {
        self.bytes = 0;
        std::mem::take(&mut self.by_start)
            .into_values()
            .map(|e| e.reg)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_when_covered_miss_otherwise() {
        let mut c = RegCache::new(8, 1 << 30);
        assert!(c.lookup(1000, 10).is_none());
        assert!(c.insert(1000, 100, "a").is_empty());
        assert_eq!(c.lookup(1000, 100).map(|(s, r)| (s, *r)), Some((1000, "a")));
        assert_eq!(c.lookup(1050, 50).map(|(s, r)| (s, *r)), Some((1000, "a")));
        assert!(c.lookup(1050, 51).is_none(), "runs past the end");
        assert!(c.lookup(999, 2).is_none(), "starts before");
        assert_eq!(
            c.stats,
            CacheStats {
                hits: 2,
                misses: 3,
                ..Default::default()
            }
        );
    }

    #[test]
    fn covering_registration_found_behind_a_nearer_one() {
        let mut c = RegCache::new(8, 1 << 30);
        c.insert(0, 10_000, 1);
        c.insert(500, 10, 2);
        assert_eq!(c.lookup(600, 100).map(|(s, r)| (s, *r)), Some((0, 1)));
        assert_eq!(c.lookup(502, 4).map(|(s, r)| (s, *r)), Some((500, 2)));
    }

    #[test]
    fn least_recently_used_evicted_by_count_and_bytes() {
        let mut c = RegCache::new(3, 1 << 30);
        c.insert(0, 10, 'a');
        c.insert(100, 10, 'b');
        c.insert(200, 10, 'c');
        assert!(c.lookup(0, 10).is_some()); // a is now newer than b
        assert_eq!(c.insert(300, 10, 'd'), vec!['b']);
        assert!(c.lookup(100, 10).is_none());
        assert_eq!(c.len(), 3);
        assert_eq!(c.stats.evictions, 1);

        let mut c = RegCache::new(100, 1000);
        c.insert(0, 600, 'x');
        c.insert(1000, 300, 'y');
        assert_eq!(c.insert(2000, 300, 'z'), vec!['x']);
        assert_eq!(c.len(), 2);
        // One registration larger than the limit still stays (it is in use).
        assert_eq!(c.insert(5000, 5000, 'w'), vec!['y', 'z']);
        assert!(c.lookup(5000, 5000).is_some());
    }

    #[test]
    fn same_start_replaces_and_invalidate_drops_overlaps() {
        let mut c = RegCache::new(8, 1 << 30);
        c.insert(100, 10, 1);
        assert_eq!(c.insert(100, 50, 2), vec![1]);
        assert_eq!(c.lookup(120, 10).map(|(_, r)| *r), Some(2));
        c.insert(300, 10, 3);
        c.insert(400, 10, 4);
        let mut gone = c.invalidate(140, 165);
        gone.sort();
        assert_eq!(gone, vec![2, 3]);
        assert!(c.lookup(120, 10).is_none());
        assert_eq!(c.lookup(400, 10).map(|(_, r)| *r), Some(4));
        assert_eq!(c.stats.invalidations, 2);
        assert_eq!(c.drain(), vec![4]);
        assert_eq!(c.len(), 0);
    }
}
