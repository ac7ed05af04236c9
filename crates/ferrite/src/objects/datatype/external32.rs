//! The "external32" data representation (MPI 4.1 section 15.5.2): big-endian, with the
//! standard's sizes, which differ from this platform's for C long / unsigned long (4 bytes,
//! 8 here), wchar_t (2 bytes, 4 here) and long double (IEEE binary128; x87 80-bit extended
//! in 16 bytes here). A value the external type cannot hold (a long above 2^31) is a
//! conversion error, never silently truncated.

use super::{Basic, Datatype, Node};
use std::ops::ControlFlow;

/// How a basic element is written in external32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ext {
    /// Same size: bytes reversed in units of `Basic::swap`.
    Same,
    /// C long: 8 bytes here, a 4-byte two's complement integer in external32.
    Long,
    /// C unsigned long: 8 bytes here, 4 in external32.
    ULong,
    /// wchar_t: a 4-byte code point here, 2 bytes in external32.
    Wchar,
    /// long double (each `swap`-sized component): x87 extended here, binary128 there.
    LongDouble,
}

/// What `Ext` long double has on this platform: x86-64's long double is the x87 format;
/// elsewhere (aarch64 Linux) it already is binary128.
#[cfg(target_arch = "x86_64")]
pub const LONG_DOUBLE: Ext = Ext::LongDouble;
#[cfg(not(target_arch = "x86_64"))]
pub const LONG_DOUBLE: Ext = Ext::Same;

impl Basic {
    /// Bytes of one element of this kind in external32.
    pub fn external_size(&self) -> usize {
        match self.ext {
            Ext::Same | Ext::LongDouble => self.size as usize,
            Ext::Long | Ext::ULong => 4,
            Ext::Wchar => 2,
        }
    }

    /// Appends one element (`native`, `size` bytes) in external32.
    fn write_external(&self, native: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let word = || i64::from_le_bytes(native[..8].try_into().expect("8-byte long"));
        match self.ext {
            Ext::Same => {
                let at = out.len();
                out.extend_from_slice(native);
                if self.swap > 1 {
                    for unit in out[at..].chunks_exact_mut(self.swap as usize) {
                        unit.reverse();
                    }
                }
            }
            Ext::Long => {
                let v = word();
                let v = i32::try_from(v).map_err(|_| {
                    format!("long value {v} does not fit the 4 bytes of external32's MPI_LONG")
                })?;
                out.extend_from_slice(&v.to_be_bytes());
            }
            Ext::ULong => {
                let v = word() as u64;
                let v = u32::try_from(v).map_err(|_| {
                    format!("unsigned long value {v} does not fit the 4 bytes of external32's MPI_UNSIGNED_LONG")
                })?;
                out.extend_from_slice(&v.to_be_bytes());
            }
            Ext::Wchar => {
                let v = i32::from_le_bytes(native[..4].try_into().expect("4-byte wchar_t"));
                let v = u16::try_from(v).map_err(|_| {
                    format!(
                        "wide character {v:#x} does not fit the 2 bytes of external32's MPI_WCHAR"
                    )
                })?;
                out.extend_from_slice(&v.to_be_bytes());
            }
            Ext::LongDouble => {
                for c in native.chunks_exact(self.swap as usize) {
                    out.extend_from_slice(&x87_to_binary128(c[..10].try_into().expect("x87")));
                }
            }
        }
        Ok(())
    }

    /// Writes one element read from `ext` (external32) into `native`.
    fn read_external(&self, ext: &[u8], native: &mut [u8]) {
        match self.ext {
            Ext::Same => {
                native.copy_from_slice(ext);
                if self.swap > 1 {
                    for unit in native.chunks_exact_mut(self.swap as usize) {
                        unit.reverse();
                    }
                }
            }
            Ext::Long => {
                let v = i32::from_be_bytes(ext[..4].try_into().expect("4 bytes"));
                native.copy_from_slice(&i64::from(v).to_le_bytes());
            }
            Ext::ULong => {
                let v = u32::from_be_bytes(ext[..4].try_into().expect("4 bytes"));
                native.copy_from_slice(&u64::from(v).to_le_bytes());
            }
            Ext::Wchar => {
                let v = u16::from_be_bytes(ext[..2].try_into().expect("2 bytes"));
                native.copy_from_slice(&i32::from(v).to_le_bytes());
            }
            Ext::LongDouble => {
                let unit = self.swap as usize;
                for (n, e) in native.chunks_exact_mut(unit).zip(ext.chunks_exact(16)) {
                    n.fill(0);
                    n[..10].copy_from_slice(&binary128_to_x87(e.try_into().expect("16 bytes")));
                }
            }
        }
    }
}

/// x87 extended (64-bit significand with an explicit integer bit, 15-bit exponent) to
/// big-endian binary128 (same exponent and bias; the 63 fraction bits head the 112).
pub fn x87_to_binary128(x: [u8; 10]) -> [u8; 16] {
    let mant = u64::from_le_bytes(x[..8].try_into().expect("8 bytes"));
    let se = u16::from_le_bytes([x[8], x[9]]);
    let frac = u128::from(mant & !(1 << 63)) << 49;
    ((u128::from(se) << 112) | frac).to_be_bytes()
}

/// Big-endian binary128 to x87 extended; the 49 lowest fraction bits do not fit and are
/// dropped (rounding toward zero).
pub fn binary128_to_x87(b: [u8; 16]) -> [u8; 10] {
    let v = u128::from_be_bytes(b);
    let se = (v >> 112) as u16;
    let int_bit = if se & 0x7fff != 0 { 1u64 << 63 } else { 0 };
    let mant = ((v >> 49) as u64 & !(1 << 63)) | int_bit;
    let mut x = [0u8; 10];
    x[..8].copy_from_slice(&mant.to_le_bytes());
    x[8..].copy_from_slice(&se.to_le_bytes());
    x
}

fn nodes_external_size(nodes: &[Node]) -> usize {
    nodes
        .iter()
        .map(|n| match n {
            Node::Bytes { len, basic, .. } => len / basic.size as usize * basic.external_size(),
            Node::Repeat { count, body, .. } => count * nodes_external_size(body),
        })
        .sum()
}

impl Datatype {
    /// Bytes of one element in external32 (MPI_Pack_external_size).
    pub fn external_size(&self) -> usize {
        nodes_external_size(&self.nodes)
    }

    /// Appends `count` elements at `buf` to `out` in external32, or says which value the
    /// external representation cannot hold.
    ///
    /// # Safety
    /// As `pack`: `buf` with this type's layout and `count` elements is readable memory.
    pub unsafe fn pack_external(
        &self,
        buf: *const u8,
        count: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        out.reserve(self.external_size() * count);
        let mut err = None;
        self.runs(count, |off, len, b| {
            // SAFETY: each run lies inside the buffer described by the contract.
            let src = unsafe { std::slice::from_raw_parts(buf.wrapping_offset(off), len) };
            for e in src.chunks_exact(b.size as usize) {
                if let Err(m) = b.write_external(e, out) {
                    err = Some(m);
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        });
        err.map_or(Ok(()), Err)
    }

    /// Scatters external32 `data` (exactly `count` elements' worth) into `buf`.
    ///
    /// # Safety
    /// As `unpack`: `buf` with this type's layout and `count` elements is writable memory
    /// that does not overlap `data`.
    pub unsafe fn unpack_external(&self, data: &[u8], buf: *mut u8, count: usize) {
        let mut at = 0usize;
        self.runs(count, |off, len, b| {
            let es = b.external_size();
            // SAFETY: the run is writable per the contract.
            let dst = unsafe { std::slice::from_raw_parts_mut(buf.wrapping_offset(off), len) };
            for n in dst.chunks_exact_mut(b.size as usize) {
                if at + es > data.len() {
                    return ControlFlow::Break(());
                }
                b.read_external(&data[at..at + es], n);
                at += es;
            }
            ControlFlow::Continue(())
        });
    }
}
