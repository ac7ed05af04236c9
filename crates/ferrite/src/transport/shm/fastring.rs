//! The per-pair fast path: a single-producer, single-consumer ring of fixed slots from one
//! sender to one receiver, in a small anonymous shared-memory file the sender creates once
//! it has sent `FERRITE_SHM_FAST_AFTER` packets to that receiver (so memory grows with the
//! pairs that talk, not with the job).
//!
//! Why: a packet through the shared receive queue (queue.rs) costs about three cache-line
//! transfers each way (free-ring slot, compare-and-swap, ready-ring slot); a slot here
//! costs one. The producer keeps its position to itself, and the consumer finds a slot full
//! by the slot's own sequence word (written last, with release), so a small packet moves in
//! the line that also announces it. The consumer's position is shared, but the producer
//! reads it only when its cached copy says the ring is full.
//!
//! Switch and order: the sender announces the ring with an offer packet through the shared
//! queue (kind `KIND_OFFER`, the ring's [`Card`]) and from then on sends every packet to
//! that receiver through the ring, never the queue again. The receiver maps the ring when
//! it takes the offer from the queue, after every earlier packet of that sender (the queue
//! keeps each sender's order), so the pair's order holds across the switch.
//!
//! Medium packets: a packet larger than a slot's payload takes several consecutive slots
//! (one record: the header in the first, the payload running on contiguously), up to an
//! eighth of the ring and `FERRITE_SHM_FAST_RECORD` ([`TxRing::inline_max`]; default 760
//! bytes, 3 slots: a 720 B message with a full p2p header; 9 slots, up to 2 KiB, lost osu_bw
//! rate at 1-2 KiB here). Small packets keep the 256-byte
//! stride (a 1-48 B message is one cache line), while a 249-720 B one skips a queue
//! cell's compare-and-swap on the free ring, its lines and the index through the ring. The
//! hot path ([`TxRing::push_slot`]) writes a record that needs no pad; one that would run
//! past the ring's end is preceded by a pad record (`KIND_PAD`) to the end (slow path).
//! Records may fill only half the ring ([`TxRing::limit`]): a record that would go beyond
//! goes in a queue cell instead (its index in one slot), so a stream of sends still gets
//! at least 64 packets into the 128-slot ring (as many as the 64-slot ring of one-slot
//! records and cells took before), and records go when the receiver keeps up, which is
//! when their latency counts. (Records were first built with a default of one slot: in a
//! 2-core VM at load 21-41, windows of 1-4 KiB sends were slower as records, when a full
//! ring meant "no room"; docs/performance.md.) The consumer zeroes the first word of every
//! slot a record or pad covered besides its first, so a stale word there (payload bytes,
//! an old header) cannot pass for a current sequence number. A packet too large for a
//! record goes in a cell of the receiver's queue, whose index travels in the ring
//! (`KIND_CELL`) instead of the ready ring, in order with the rest.
//!
//! Flow control is unchanged: a full ring (or no free cell for a large packet) is "no
//! room", the caller keeps the packet and retries; the receiver rings senders waiting for
//! room through the same `credit_waiters` word. Sleep: the receiver's `arm` re-checks its
//! rings after setting `sleeping`, the sender fences and checks `sleeping` after publishing,
//! exactly as for the queue.
//!
//! Layout: 128-byte header (magic, version, owner pid, token, slot count; the consumer's
//! position on its own line at 64), then `nslots` slots of [`SLOT`] bytes: sequence (u32,
//! position + 1 when full), length (u16), kind (u16), payload. Everything the consumer reads
//! back is checked, so a corrupt record is counted and skipped, never trusted.

use super::segment::{anonymous_file, map, open_peer_file, Card};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const MAGIC: u64 = u64::from_le_bytes(*b"FERRFST\0");
pub const VERSION: u32 = 2;
/// Bytes per slot (four cache lines: a small packet touches only the first). 320-byte slots,
/// which carry a 256-byte message in one slot instead of a queue cell (~250 fewer
/// instructions per send), were tried: osu_bw at 1-512 B ran 1.3-2.5x slower with them in
/// interleaved runs (docs/performance.md), so four lines it stays.
pub const SLOT: usize = 256;
/// Sequence, length and kind before the payload: 8 bytes, so a message of up to 48 bytes with
/// p2p's 8-byte short eager header (16 with the full 40-byte one) fits the slot's first
/// cache line.
pub const SLOT_HEADER: usize = 8;
/// Largest packet carried in one slot.
pub const SLOT_PAYLOAD: usize = SLOT - SLOT_HEADER;
const HEADER: usize = 128;

/// The packet is in the slot.
pub const KIND_INLINE: u32 = 0;
/// The packet is in the receiver's queue cell whose index is the payload (u64 LE).
pub const KIND_CELL: u32 = 1;
/// Nothing: the slots from here to the ring's end are skipped (the next record did not fit).
pub const KIND_PAD: u32 = 2;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: u32,
    pid: i32,
    token: u64,
    nslots: u32,
    _pad0: [u8; 36],
    /// Slots consumed so far (written by the consumer only).
    head: AtomicU64,
    _pad1: [u8; 56],
}

const _: () = assert!(std::mem::size_of::<Header>() == HEADER);

/// `seq` is the low 32 bits of position + 1: a slot's stale value is from the previous lap,
/// `nslots` (at most 2^16) less, so it can never look current.
#[repr(C)]
struct SlotHeader {
    seq: AtomicU32,
    len: u16,
    kind: u16,
}

const _: () = assert!(std::mem::size_of::<SlotHeader>() == SLOT_HEADER);

fn bytes(nslots: u32) -> usize {
    HEADER + nslots as usize * SLOT
}

/// Validated slot counts: a power of two in 2..=65536.
pub fn valid_slots(n: u32) -> bool {
    n.is_power_of_two() && (2..=65536).contains(&n)
}

/// Slots a record of `len` payload bytes takes.
fn slots_for(len: usize) -> u64 {
    (SLOT_HEADER + len).div_ceil(SLOT) as u64
}

/// Largest record payload in a ring of `nslots`: an eighth of the ring (at least one
/// slot), and what the u16 length holds.
fn inline_max(nslots: u64) -> usize {
    ((nslots / 8).max(1) as usize * SLOT - SLOT_HEADER).min(u16::MAX as usize)
}

/// A mapping of a ring file (either side).
struct Mapping {
    base: *mut u8,
    len: usize,
    /// The creator's descriptor of the file (peers open it through /proc); -1 for the mapper.
    fd: i32,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/len describe a mapping made by `map`, unmapped only here; fd is ours.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
            if self.fd >= 0 {
                libc::close(self.fd);
            }
        }
    }
}

impl Mapping {
    fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER bytes, page-aligned; Header is integers and
        // atomics, valid for any bits.
        unsafe { &*(self.base as *const Header) }
    }

    /// Slot `pos` (masked to the ring).
    fn slot(&self, pos: u64, mask: u64) -> *mut u8 {
        // SAFETY: (pos & mask) < nslots, and the mapping holds HEADER + nslots * SLOT bytes.
        unsafe { self.base.add(HEADER + (pos & mask) as usize * SLOT) }
    }
}

fn slot_header<'a>(slot: *mut u8) -> &'a SlotHeader {
    // SAFETY: slots are 64-byte aligned inside a live mapping; SlotHeader is integers
    // and an atomic, valid for any bits. Callers use it only while the mapping lives.
    unsafe { &*(slot as *const SlotHeader) }
}

/// The producer's side.
pub struct TxRing {
    m: Mapping,
    mask: u64,
    /// Next position to fill (only the producer knows it).
    pos: u64,
    /// Last seen consumer position: the ring has room while pos - head < nslots.
    head: u64,
    /// Largest packet a record carries (see [`inline_max`]).
    max: usize,
    card: Card,
}

// SAFETY: a TxRing is a mapping used through atomics and the slot hand-over protocol; which
// thread of the process holds it does not matter.
unsafe impl Send for TxRing {}

impl TxRing {
    /// A new ring of `nslots` (see [`valid_slots`]) in a fresh anonymous file, carrying
    /// packets of up to `max_record` bytes (capped at [`inline_max`]) in its own slots.
    pub fn create(nslots: u32, token: u64, max_record: usize) -> Result<TxRing, String> {
        if !valid_slots(nslots) {
            return Err(format!(
                "FERRITE_SHM_FAST_SLOTS={nslots} is not a power of two in 2..=65536"
            ));
        }
        let len = bytes(nslots);
        let fd = anonymous_file()?;
        // SAFETY: fd is an open file we own.
        let base = if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            Err(std::io::Error::last_os_error().to_string())
        } else {
            map(fd, len)
        };
        let base = match base {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: fd is ours.
                unsafe { libc::close(fd) };
                return Err(format!("cannot make a {len}-byte fast ring: {e}"));
            }
        };
        let m = Mapping { base, len, fd };
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        // SAFETY: the fresh mapping is ours alone until the card is published; Header is
        // valid for the zeroed bytes.
        let h = unsafe { &mut *(base as *mut Header) };
        h.version = VERSION;
        h.pid = pid;
        h.token = token;
        h.nslots = nslots;
        h.magic.store(MAGIC, Ordering::Release);
        Ok(TxRing {
            m,
            mask: nslots as u64 - 1,
            pos: 0,
            head: 0,
            max: inline_max(nslots as u64).min(max_record),
            card: Card { pid, fd, token },
        })
    }

    /// How the consumer finds the ring.
    pub fn card(&self) -> Card {
        self.card
    }

    /// Largest packet `push_inline` takes.
    #[inline]
    pub fn inline_max(&self) -> usize {
        self.max
    }

    /// Slots a record of `len` bytes needs from the current position: its own, and a pad
    /// to the ring's end first when it would run past it.
    fn need(&self, len: usize) -> u64 {
        let k = slots_for(len);
        let off = self.pos & self.mask;
        if off + k > self.mask + 1 {
            self.mask + 1 - off + k
        } else {
            k
        }
    }

    /// True if `need` more slots fit in the first `limit` slots of the ring (re-reads the
    /// consumer's position only when the cached one says they do not).
    #[inline(always)]
    fn fits(&mut self, need: u64, limit: u64) -> bool {
        if self.pos.wrapping_sub(self.head) + need <= limit {
            return true;
        }
        self.head = self.m.header().head.load(Ordering::Acquire);
        self.pos.wrapping_sub(self.head) + need <= limit
    }

    /// Slots of the ring a record of `k` slots may fill up to: all for one slot; half for
    /// more, so that records never leave a stream fewer slots than half the ring for
    /// one-slot packets and cell indices (a stream of sends then gets at least as many
    /// packets into a ring of twice the slots as it got into one of one-slot records and
    /// cells), and records go only when the receiver keeps up, which is when their latency
    /// counts.
    #[inline(always)]
    fn limit(&self, k: u64) -> u64 {
        if k > 1 {
            (self.mask + 1) >> 1
        } else {
            self.mask + 1
        }
    }

    /// True if a record of `len` bytes fits now.
    #[inline]
    pub fn has_room_for(&mut self, len: usize) -> bool {
        let (need, limit) = (self.need(len), self.limit(slots_for(len)));
        self.fits(need, limit)
    }

    /// True if a one-slot record fits.
    pub fn has_room(&mut self) -> bool {
        self.has_room_for(0)
    }

    /// Publishes a record of `len` bytes written by `fill` into its payload (`fill` writes
    /// at most `len`, and `len` at most `inline_max`, bytes), after a pad when it would run
    /// past the ring's end; false if the ring is too full. `len` is recorded as given: the
    /// receiver checks it (the tests forge bad ones). The caller then checks the receiver's
    /// `sleeping` flag (`Queue::must_ring`).
    pub fn push(&mut self, kind: u32, len: usize, fill: impl FnOnce(*mut u8)) -> bool {
        if !self.fits(self.need(len), self.mask + 1) {
            return false;
        }
        let k = slots_for(len);
        let off = self.pos & self.mask;
        if off + k > self.mask + 1 {
            self.publish(KIND_PAD, 0, self.mask + 1 - off, |_| {});
        }
        self.publish(kind, len, k, fill);
        true
    }

    /// Writes one record of `k` slots at the current position (room checked) and
    /// publishes it.
    fn publish(&mut self, kind: u32, len: usize, k: u64, fill: impl FnOnce(*mut u8)) {
        let slot = self.m.slot(self.pos, self.mask);
        // SAFETY: the record's k slots are free (the consumer is past them), consecutive
        // inside the mapping (the caller padded to the ring's end), and ours until
        // published; the payload area holds the `len` bytes `fill` writes.
        unsafe {
            let h = slot as *mut SlotHeader;
            std::ptr::addr_of_mut!((*h).len).write(len as u16);
            std::ptr::addr_of_mut!((*h).kind).write(kind as u16);
            fill(slot.add(SLOT_HEADER));
        }
        let seq = self.pos.wrapping_add(1) as u32;
        self.pos = self.pos.wrapping_add(k);
        slot_header(slot).seq.store(seq, Ordering::Release);
    }

    /// Largest packet of one slot: a slot's payload, unless records are limited to less.
    #[inline]
    pub fn slot_max(&self) -> usize {
        self.max.min(SLOT_PAYLOAD)
    }

    /// The hot path of every send of up to [`Self::inline_max`] bytes: `parts` (`len` bytes
    /// together) into the next record of one or more consecutive slots, with no closure;
    /// small parts are copied without a call (most packets are an 8- or 40-byte p2p header
    /// and a few bytes). False, writing nothing, if the ring lacks room for the record or the
    /// record would run past the ring's end (the caller's slow path pads, or uses a cell).
    #[inline]
    pub fn push_slot(&mut self, parts: &[&[u8]], len: usize) -> bool {
        debug_assert!(len <= self.max);
        if len <= SLOT_PAYLOAD {
            // Apart, so that with k = 1 known this is the one-slot code of old.
            return self.push_slots(parts, len, 1);
        }
        let k = slots_for(len);
        if (self.pos & self.mask) + k > self.mask + 1 {
            return false;
        }
        self.push_slots(parts, len, k)
    }

    /// `push_slot` for a record of `k` slots that does not run past the ring's end.
    #[inline(always)]
    fn push_slots(&mut self, parts: &[&[u8]], len: usize, k: u64) -> bool {
        if !self.fits(k, self.limit(k)) {
            return false;
        }
        let slot = self.m.slot(self.pos, self.mask);
        // SAFETY: the record's k slots are free (the consumer is past them), consecutive
        // inside the mapping (the caller checked that they do not run past the ring's
        // end), and ours until published; they hold the `len` <= inline_max bytes the parts
        // add up to, and our own buffers cannot overlap the ring.
        unsafe {
            let h = slot as *mut SlotHeader;
            std::ptr::addr_of_mut!((*h).len).write(len as u16);
            std::ptr::addr_of_mut!((*h).kind).write(KIND_INLINE as u16);
            let mut dst = slot.add(SLOT_HEADER);
            for p in parts {
                copy_small(p, dst);
                dst = dst.add(p.len());
            }
        }
        let seq = self.pos.wrapping_add(1) as u32;
        self.pos = self.pos.wrapping_add(k);
        slot_header(slot).seq.store(seq, Ordering::Release);
        true
    }

    /// Copies `parts` (at most `inline_max` bytes together) into the next record, after a
    /// pad when it would run past the ring's end; false if it does not fit (a record of
    /// several slots only in half the ring, see [`Self::limit`]).
    pub fn push_inline(&mut self, parts: &[&[u8]], len: usize) -> bool {
        debug_assert!(len <= self.max);
        if !self.has_room_for(len) {
            return false;
        }
        self.push(KIND_INLINE, len, |dst| {
            let mut off = 0;
            for p in parts {
                // SAFETY: the parts add up to len <= inline_max bytes of the record's
                // payload, which our own buffers cannot overlap.
                unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), dst.add(off), p.len()) };
                off += p.len();
            }
        })
    }

    /// Passes the receiver's queue cell `idx` through the ring.
    pub fn push_cell(&mut self, idx: u64) -> bool {
        self.push(KIND_CELL, 8, |dst| {
            // SAFETY: 8 bytes fit the payload.
            unsafe { std::ptr::copy_nonoverlapping(idx.to_le_bytes().as_ptr(), dst, 8) }
        })
    }
}

/// Copies `src` to `dst` (which holds `src.len()` bytes and does not overlap it). Up to 64
/// bytes by two possibly overlapping loads and stores of the widest size that fits, not
/// through a call to memcpy (which costs more than the copy at these sizes).
///
/// # Safety
/// `dst` is valid for `src.len()` bytes of writes.
#[inline(always)]
unsafe fn copy_small(src: &[u8], dst: *mut u8) {
    let (n, s) = (src.len(), src.as_ptr());
    // SAFETY: every access below lies in [0, n) of both buffers (the second of each pair
    // ends at n); unaligned reads and writes of plain integers.
    unsafe {
        macro_rules! two {
            ($t:ty) => {{
                let w = std::mem::size_of::<$t>();
                let (a, b) = (
                    (s as *const $t).read_unaligned(),
                    (s.add(n - w) as *const $t).read_unaligned(),
                );
                (dst as *mut $t).write_unaligned(a);
                (dst.add(n - w) as *mut $t).write_unaligned(b);
            }};
        }
        // Largest first: the header part (40 bytes) takes two tests.
        if n >= 16 {
            if n > 64 {
                std::ptr::copy_nonoverlapping(s, dst, n)
            } else if n > 32 {
                two!([u128; 2])
            } else {
                two!(u128)
            }
        } else if n >= 8 {
            two!(u64)
        } else if n >= 4 {
            two!(u32)
        } else if n >= 2 {
            two!(u16)
        } else if n == 1 {
            *dst = *s
        }
    }
}

/// One record the consumer took.
pub enum Record<'a> {
    Inline(&'a [u8]),
    Cell(u64),
    /// Slots skipped to the ring's end (never handed to `take`).
    Pad,
    /// Length or kind out of range: skipped.
    Corrupt,
}

/// The consumer's side.
pub struct RxRing {
    m: Mapping,
    mask: u64,
    /// Largest record payload of this ring's size.
    max: usize,
    /// Next position to read (published to the producer after each batch).
    head: u64,
    /// The sender.
    pub from: u32,
}

// SAFETY: as for TxRing.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Maps `from`'s ring described by `card`. `Ok(None)`: its process has exited.
    pub fn open(card: Card, from: u32) -> Result<Option<RxRing>, String> {
        let Some(fd) = open_peer_file(card.pid, card.fd)? else {
            return Ok(None);
        };
        // SAFETY: an all-zero stat is valid to be overwritten; fd is open.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { libc::fstat(fd, &mut st) };
        let len = st.st_size as usize;
        let base = if rc != 0 {
            Err(std::io::Error::last_os_error().to_string())
        } else if len < HEADER {
            Err(format!("it is only {len} bytes"))
        } else {
            map(fd, len)
        };
        // SAFETY: fd is ours; the mapping stays valid after close.
        unsafe { libc::close(fd) };
        let base = base.map_err(|e| format!("cannot map the fast ring of rank {from}: {e}"))?;
        let m = Mapping { base, len, fd: -1 };
        let h = m.header();
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.version != VERSION
            || h.pid != card.pid
            || h.token != card.token
            || !valid_slots(h.nslots)
            || bytes(h.nslots) != len
        {
            return Err(format!(
                "the fast ring rank {from} offered (pid {} fd {}) has a bad header",
                card.pid, card.fd
            ));
        }
        let mask = h.nslots as u64 - 1;
        Ok(Some(RxRing {
            m,
            mask,
            max: inline_max(mask + 1),
            head: 0,
            from,
        }))
    }

    /// True if a published slot is waiting.
    #[inline]
    pub fn has_ready(&self) -> bool {
        let s = slot_header(self.m.slot(self.head, self.mask));
        s.seq.load(Ordering::Acquire) == self.head.wrapping_add(1) as u32
    }

    /// Hands every waiting record (at most a ring's worth) to `take`, then tells the producer
    /// the slots are free. Returns how many were taken. Inlined: its one caller's closure
    /// (hand the packet to p2p) then needs no call per record.
    #[inline]
    pub fn consume(&mut self, take: &mut impl FnMut(Record)) -> usize {
        let (mut n, mut slots) = (0, 0);
        let nslots = self.mask + 1;
        let mut published = self.head;
        while slots < nslots {
            let slot = self.m.slot(self.head, self.mask);
            let sh = slot_header(slot);
            if sh.seq.load(Ordering::Acquire) != self.head.wrapping_add(1) as u32 {
                break;
            }
            let (len, kind) = (sh.len as usize, sh.kind as u32);
            let off = self.head & self.mask;
            // Slots this record covers (as the producer counted them; never past the ring's
            // end), whether or not its length is valid.
            let k = match kind {
                KIND_INLINE => slots_for(len).min(nslots - off),
                KIND_PAD if len == 0 => nslots - off,
                _ => 1,
            };
            let rec = match kind {
                // SAFETY: len is checked against the limit and the record's slots, which lie
                // inside the ring; they are ours until the head moves past them below, after
                // `take` returns.
                KIND_INLINE if len <= self.max && k == slots_for(len) => Record::Inline(unsafe {
                    std::slice::from_raw_parts(slot.add(SLOT_HEADER), len)
                }),
                KIND_CELL if len == 8 => {
                    let mut b = [0u8; 8];
                    // SAFETY: 8 payload bytes of our slot.
                    unsafe {
                        std::ptr::copy_nonoverlapping(slot.add(SLOT_HEADER), b.as_mut_ptr(), 8)
                    };
                    Record::Cell(u64::from_le_bytes(b))
                }
                KIND_PAD if len == 0 => Record::Pad,
                _ => Record::Corrupt,
            };
            if !matches!(rec, Record::Pad) {
                take(rec);
                n += 1;
            }
            for i in 1..k {
                // SAFETY: the slots after the first of this record are ours (the producer
                // reuses them only after the head store below) and lie in the mapping.
                let s = slot_header(self.m.slot(self.head.wrapping_add(i), self.mask));
                s.seq.store(0, Ordering::Relaxed);
            }
            self.head = self.head.wrapping_add(k);
            slots += k;
            if k > 1 {
                // A medium record: free its slots now, the producer may be waiting for them.
                self.m.header().head.store(self.head, Ordering::Release);
                published = self.head;
            }
        }
        if published != self.head {
            self.m.header().head.store(self.head, Ordering::Release);
        }
        n
    }
}
