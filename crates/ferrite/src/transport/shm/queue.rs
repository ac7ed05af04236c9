//! The shared receive queue inside a segment: many senders, one receiver.
//!
//! Two bounded rings of cell indices (Vyukov's sequence-number MPMC ring) and the cells:
//! - `free`: cells the receiver has handed back. A sender pops one (that is its credit), or
//!   finds none and reports "no room": nothing is ever dropped or overwritten.
//! - `ready`: filled cells in publication order. The receiver pops them in order, delivers,
//!   and pushes the index back on `free`.
//!
//! Invariants: every cell index is in exactly one place (free ring, a sender's hands, ready
//! ring, the receiver's hands). In Vyukov's ring a push can also fail when the slot's previous
//! occupant was claimed but not yet released by a (preempted) popper:
//! - `ready` has one popper, the receiver, holding at most one claim, and the positions
//!   between its dequeue and any enqueue position hold distinct cells (< ncells), so with
//!   capacity >= 2 * ncells a sender's push always finds its slot released: never fails.
//! - `free` has many poppers (senders), and one of them may stall in the middle of a pop
//!   while the others cycle the cells; the receiver's push can then fail for a moment. It
//!   keeps such a cell in a local list and pushes it again on its next receive, so a credit
//!   is late, never lost.
//!
//! A sender publishes its packets one after another, and ready positions are
//! claimed in increasing order, so each sender's packets are delivered in its order. The
//! receiver stops at a claimed but unpublished slot instead of skipping it.
//!
//! Everything read back from shared memory (indices, the cell header) is checked, so a
//! corrupt cell is counted and dropped rather than trusted.

use super::segment::{Geometry, Header, RingPos, HEADER_BYTES, SLOT_BYTES};
use super::sleepfence;
use std::sync::atomic::{AtomicU64, Ordering};

pub const FREE: usize = 0;
pub const READY: usize = 1;

/// Bytes before a packet in its cell: sender rank (u32 LE), length (u32 LE), kind (u32 LE),
/// reserved.
pub const CELL_HEADER: usize = 16;

/// A packet for the layers above.
pub const KIND_DATA: u32 = 0;
/// The transport's own: a sender offers its fast ring (fastring.rs) to the receiver.
pub const KIND_OFFER: u32 = 1;

#[repr(C)]
struct Slot {
    seq: AtomicU64,
    val: AtomicU64,
}

/// One ring over shared memory.
pub struct Ring {
    pos: *const RingPos,
    slots: *const Slot,
    mask: u64,
}

impl Ring {
    /// # Safety
    /// `base` must be a mapping of at least `geom.total()` bytes laid out as `geom` says,
    /// alive for as long as the returned ring is used.
    pub unsafe fn at(base: *mut u8, geom: Geometry, which: usize) -> Ring {
        let slots = if which == FREE {
            geom.free_slots()
        } else {
            geom.ready_slots()
        };
        // SAFETY: offsets computed by Geometry lie inside the mapping (caller's guarantee).
        unsafe {
            Ring {
                pos: base.add(std::mem::size_of::<Header>() + which * 128) as *const RingPos,
                slots: base.add(slots) as *const Slot,
                mask: geom.ring_cap() as u64 - 1,
            }
        }
    }

    fn pos(&self) -> &RingPos {
        // SAFETY: `at` placed pos inside the live mapping; RingPos is atomics and padding.
        unsafe { &*self.pos }
    }

    fn slot(&self, pos: u64) -> &Slot {
        // SAFETY: the index is masked to the ring capacity; slots lie in the mapping.
        unsafe { &*self.slots.add((pos & self.mask) as usize) }
    }

    /// Initializes a fresh ring holding the values 0..n (only before the segment is shared).
    pub fn init_full(&self, n: u32) {
        let cap = self.mask + 1;
        for i in 0..cap {
            let s = self.slot(i);
            if i < n as u64 {
                s.val.store(i, Ordering::Relaxed);
                s.seq.store(i + 1, Ordering::Relaxed);
            } else {
                s.seq.store(i, Ordering::Relaxed);
            }
        }
        self.pos().enqueue.store(n as u64, Ordering::Relaxed);
        self.pos().dequeue.store(0, Ordering::Relaxed);
    }

    /// Appends `v`; false if the ring is full.
    pub fn push(&self, v: u64) -> bool {
        let p = self.pos();
        let mut pos = p.enqueue.load(Ordering::Relaxed);
        loop {
            let s = self.slot(pos);
            let seq = s.seq.load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos) as i64;
            if dif == 0 {
                match p.enqueue.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        s.val.store(v, Ordering::Relaxed);
                        s.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return true;
                    }
                    Err(cur) => pos = cur,
                }
            } else if dif < 0 {
                return false;
            } else {
                pos = p.enqueue.load(Ordering::Relaxed);
            }
        }
    }

    /// Removes the oldest value; None if empty (or the oldest is claimed but not yet published).
    pub fn pop(&self) -> Option<u64> {
        let p = self.pos();
        let mut pos = p.dequeue.load(Ordering::Relaxed);
        loop {
            let s = self.slot(pos);
            let seq = s.seq.load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos.wrapping_add(1)) as i64;
            if dif == 0 {
                match p.dequeue.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let v = s.val.load(Ordering::Relaxed);
                        s.seq
                            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(v);
                    }
                    Err(cur) => pos = cur,
                }
            } else if dif < 0 {
                return None;
            } else {
                pos = p.dequeue.load(Ordering::Relaxed);
            }
        }
    }

    /// True if a published value is waiting (for the free ring: a credit, seen by a
    /// sender; for the ready ring: a packet, seen by the receiver).
    pub fn has_ready(&self) -> bool {
        let pos = self.pos().dequeue.load(Ordering::Relaxed);
        self.slot(pos).seq.load(Ordering::Acquire) == pos.wrapping_add(1)
    }
}

/// What a send did.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// No free cell: nothing was written.
    NoRoom,
    /// Published; `ring` says the receiver is asleep and its doorbell must be rung.
    Published { ring: bool },
}

/// What one receive step found.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    Empty,
    Delivered,
    /// A cell failed validation and was dropped (counted by the caller).
    Corrupt,
}

/// The queue of one segment, as seen by a sender or by the receiver (its owner).
pub struct Queue {
    hdr: *const Header,
    free: Ring,
    ready: Ring,
    cells: *mut u8,
    geom: Geometry,
}

// SAFETY: a Queue is pointers into a shared mapping that other processes use concurrently
// anyway; all access goes through atomics and the rings' hand-over protocol, so which
// thread of this process holds the Queue does not matter.
unsafe impl Send for Queue {}

impl Queue {
    /// # Safety
    /// As for [`Ring::at`]: `base` must be a live mapping laid out as `geom` says.
    pub unsafe fn at(base: *mut u8, geom: Geometry) -> Queue {
        // SAFETY: forwarded from the caller.
        unsafe {
            Queue {
                hdr: base as *const Header,
                free: Ring::at(base, geom, FREE),
                ready: Ring::at(base, geom, READY),
                cells: base.add(geom.cells()),
                geom,
            }
        }
    }

    fn header(&self) -> &Header {
        // SAFETY: the header is at the start of the live mapping.
        unsafe { &*self.hdr }
    }

    /// Largest packet a cell holds.
    pub fn max_packet(&self) -> usize {
        self.geom.cell_size as usize - CELL_HEADER
    }

    fn cell(&self, idx: u64) -> *mut u8 {
        debug_assert!(idx < self.geom.ncells as u64);
        // SAFETY: idx < ncells (checked by callers), so the cell lies inside the mapping.
        unsafe { self.cells.add(idx as usize * self.geom.cell_size as usize) }
    }

    /// Sender side: copies `parts` (total at most `max_packet`) into a free cell and
    /// publishes it. `from` is the sender's rank.
    pub fn send(&self, from: u32, parts: &[&[u8]]) -> Sent {
        self.send_kind(from, KIND_DATA, parts)
    }

    /// As `send`, for a packet of the given kind (`KIND_DATA`, or the transport's own
    /// `KIND_OFFER`). Takes a full fence before reading `sleeping`: a receiver fences for
    /// packets of its fast rings only (see `Shm::arm`).
    pub fn send_kind(&self, from: u32, kind: u32, parts: &[&[u8]]) -> Sent {
        let Some(idx) = self.fill_cell(from, kind, parts) else {
            return Sent::NoRoom;
        };
        // Capacity >= cell count, so this cannot fail unless the segment is corrupt.
        let pushed = self.ready.push(idx);
        debug_assert!(pushed, "ready ring overflow");
        Sent::Published {
            ring: self.must_ring(false),
        }
    }

    /// Sender side: takes a free cell and copies the packet into it, without publishing it;
    /// the cell's index, or None when no cell is free. (The fast path passes the index
    /// through its ring instead of the ready ring.)
    pub fn fill_cell(&self, from: u32, kind: u32, parts: &[&[u8]]) -> Option<u64> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        assert!(len <= self.max_packet(), "packet larger than a cell");
        let idx = loop {
            match self.free.pop() {
                None => return None,
                // A corrupt index is dropped (the receiver loses one credit, never memory).
                Some(i) if i >= self.geom.ncells as u64 => continue,
                Some(i) => break i,
            }
        };
        let cell = self.cell(idx);
        let mut hdr = [0u8; CELL_HEADER];
        hdr[0..4].copy_from_slice(&from.to_le_bytes());
        hdr[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        hdr[8..12].copy_from_slice(&kind.to_le_bytes());
        // SAFETY: the cell is ours (popped from the free ring) and holds CELL_HEADER + len
        // bytes; the source slices are our own memory and cannot overlap the mapping's cell.
        unsafe {
            std::ptr::copy_nonoverlapping(hdr.as_ptr(), cell, CELL_HEADER);
            let mut off = CELL_HEADER;
            for p in parts {
                std::ptr::copy_nonoverlapping(p.as_ptr(), cell.add(off), p.len());
                off += p.len();
            }
        }
        Some(idx)
    }

    /// Sender side, after publishing (here or in a fast ring): true when the receiver is
    /// asleep and its doorbell must be rung (the flag is then cleared: one ring per sleep).
    /// `asym`: both sides use membarrier (sleepfence.rs) and this packet went through a fast
    /// ring, so a compiler fence will do.
    #[inline]
    pub fn must_ring(&self, asym: bool) -> bool {
        // Pairs with the fence in `arm`: either we see `sleeping`, or the receiver sees
        // the packet when it re-checks before sleeping.
        sleepfence::light(asym);
        let h = self.header();
        h.sleeping.load(Ordering::Relaxed) != 0 && h.sleeping.swap(0, Ordering::SeqCst) != 0
    }

    /// Receiver side: delivers the oldest published data packet, if any, and frees its
    /// cell. `size` bounds valid sender ranks. `unfreed` holds cells whose return to the
    /// free ring must be retried (kept by the caller across calls; see the module comment).
    pub fn recv(
        &self,
        size: u32,
        unfreed: &mut Vec<u64>,
        deliver: &mut dyn FnMut(u32, &[u8]),
    ) -> Received {
        self.recv_kind(size, unfreed, &mut |from, kind, p| {
            if kind == KIND_DATA {
                deliver(from, p)
            }
        })
    }

    /// As `recv`, handing over packets of every kind: `deliver(from, kind, packet)`.
    pub fn recv_kind(
        &self,
        size: u32,
        unfreed: &mut Vec<u64>,
        deliver: &mut dyn FnMut(u32, u32, &[u8]),
    ) -> Received {
        self.retry_free(unfreed);
        let Some(idx) = self.ready.pop() else {
            return Received::Empty;
        };
        self.take_cell(idx, size, unfreed, deliver)
    }

    /// Receiver side: delivers the packet in cell `idx` (popped from the ready ring, or
    /// passed through a fast ring) and frees the cell.
    pub fn take_cell(
        &self,
        idx: u64,
        size: u32,
        unfreed: &mut Vec<u64>,
        deliver: &mut dyn FnMut(u32, u32, &[u8]),
    ) -> Received {
        if idx >= self.geom.ncells as u64 {
            return Received::Corrupt;
        }
        let cell = self.cell(idx);
        let mut hdr = [0u8; CELL_HEADER];
        // SAFETY: the cell lies in the mapping and is ours until pushed back on `free`.
        unsafe { std::ptr::copy_nonoverlapping(cell, hdr.as_mut_ptr(), CELL_HEADER) };
        let from = u32::from_le_bytes(hdr[0..4].try_into().unwrap());
        let len = u32::from_le_bytes(hdr[4..8].try_into().unwrap()) as usize;
        let kind = u32::from_le_bytes(hdr[8..12].try_into().unwrap());
        let ok = from < size && len <= self.max_packet() && kind <= KIND_OFFER;
        if ok {
            // SAFETY: len was checked against the cell size; the cell is ours until it is
            // pushed back below, after `deliver` returns (so the slice does not outlive it).
            let packet = unsafe { std::slice::from_raw_parts(cell.add(CELL_HEADER), len) };
            deliver(from, kind, packet);
        }
        if !self.free.push(idx) {
            unfreed.push(idx);
        }
        if ok {
            Received::Delivered
        } else {
            Received::Corrupt
        }
    }

    /// Sender side, about to sleep after `NoRoom`: asks the receiver to ring sender `from`
    /// when it frees cells, then re-checks. Returns false when a cell is free already (the
    /// caller must not sleep; the request stays, costing at most one spurious ring).
    /// `asym`: this process is registered for membarrier (sleepfence.rs).
    pub fn want_credit(&self, from: u32, asym: bool) -> bool {
        self.ask_credit(from, asym) && !self.free.has_ready()
    }

    /// Sender side: asks the receiver to ring sender `from` when it next frees cells or
    /// fast-ring slots. The caller re-checks for room afterwards; false when it must not
    /// sleep at all (the membarrier call failed).
    pub fn ask_credit(&self, from: u32, asym: bool) -> bool {
        self.header()
            .credit_waiters
            .fetch_or(1 << (from % 64), Ordering::SeqCst);
        // Pairs with the light fence in `take_credit_waiters`: either the receiver sees
        // our bit, or we see the room it made before looking.
        sleepfence::heavy(asym)
    }

    /// Receiver side, after freeing cells: the senders asleep for want of credits, as a
    /// mask of `rank % 64` bits (cleared), or 0. `asym`: this process is registered for
    /// membarrier, so senders about to sleep fence for us.
    #[inline]
    pub fn take_credit_waiters(&self, asym: bool) -> u64 {
        sleepfence::light(asym);
        let w = &self.header().credit_waiters;
        if w.load(Ordering::Relaxed) == 0 {
            0
        } else {
            w.swap(0, Ordering::SeqCst)
        }
    }

    /// Receiver side: returns cells a stalled sender kept from being freed earlier.
    pub fn retry_free(&self, unfreed: &mut Vec<u64>) {
        unfreed.retain(|&i| !self.free.push(i));
    }

    /// Receiver side, before sleeping: sets `sleeping`, then re-checks the queue and
    /// `more` (the fast rings). Returns false (and clears the flag) when a packet is already
    /// waiting, so the caller must not sleep. `asym`: fence with membarrier for senders that
    /// publish in our fast rings with a compiler fence only (sleepfence.rs).
    pub fn arm(&self, more: impl Fn() -> bool, asym: bool) -> bool {
        let h = self.header();
        h.sleeping.store(1, Ordering::SeqCst);
        if !sleepfence::heavy(asym) || self.ready.has_ready() || more() {
            h.sleeping.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Receiver side, after waking: senders need not ring any more.
    pub fn disarm(&self) {
        self.header().sleeping.store(0, Ordering::Relaxed);
    }

    pub fn has_ready(&self) -> bool {
        self.ready.has_ready()
    }

    /// Test helper: writes raw bytes over a cell's header (to simulate corruption).
    #[cfg(test)]
    pub fn corrupt_next(&self, from: u32, len: u32) -> bool {
        let Some(idx) = self.free.pop() else {
            return false;
        };
        let cell = self.cell(idx);
        // SAFETY: the cell is ours (popped from the free ring) and at least 8 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(from.to_le_bytes().as_ptr(), cell, 4);
            std::ptr::copy_nonoverlapping(len.to_le_bytes().as_ptr(), cell.add(4), 4);
        }
        self.ready.push(idx)
    }
}

const _: () = assert!(HEADER_BYTES == 128 + 2 * 128 && SLOT_BYTES == 16);
