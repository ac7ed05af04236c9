//! Predefined reduction operations: `inout[i] = input[i] op inout[i]` on packed element
//! buffers, one monomorphized loop per (operation, element type) so the compiler can
//! vectorize it; no per-element dispatch through a function pointer.
//!
//! Buffers are byte slices (they may come straight from the network, unaligned); elements
//! are read and written in native byte order.

use crate::consts::*;

/// The element type a predefined datatype reduces as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
    /// Complex numbers of two f32 / two f64.
    C32,
    C64,
    /// C `bool` (one byte) and Fortran LOGICAL (a 4-byte int, nonzero is true).
    Bool8,
    Logical32,
    /// MPI_BYTE: only the bitwise operations apply.
    Byte,
    /// (value, int) pairs for MINLOC/MAXLOC: the value's type, and the int's offset in the
    /// packed pair (packing drops the C struct's padding).
    Pair(PairValue, usize),
    /// Fortran's (value, index) pairs MPI_2REAL and MPI_2DOUBLE_PRECISION: the index has the
    /// value's type (a REAL or DOUBLE PRECISION holding an integer).
    SamePair(PairValue),
    /// C long double, its complex, and (long double, int) pairs: reduced by the C kernels
    /// of longdouble.c (Rust has no 80-bit float).
    LongDouble,
    CLongDouble,
    LongDoubleInt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairValue {
    F32,
    F64,
    I64,
    I32,
    I16,
}

/// The element type of a predefined datatype, or None for derived types and types with
/// no arithmetic (MPI_PACKED, MPI_CHAR under arithmetic ops, long double for now).
pub fn elem_of(dt: MPI_Datatype) -> Option<Elem> {
    use Elem::*;
    // MPICH builtins encode the size in bits 8..16; the index below tells the kind.
    Some(match dt {
        MPI_SIGNED_CHAR | MPI_INT8_T | MPI_INTEGER1 | MPI_CHAR => I8,
        MPI_SHORT | MPI_INT16_T | MPI_INTEGER2 => I16,
        MPI_INT | MPI_INT32_T | MPI_INTEGER | MPI_INTEGER4 => I32,
        MPI_LONG | MPI_LONG_LONG_INT | MPI_INT64_T | MPI_INTEGER8 | MPI_AINT | MPI_OFFSET
        | MPI_COUNT => I64,
        MPI_UNSIGNED_CHAR | MPI_UINT8_T => U8,
        MPI_UNSIGNED_SHORT | MPI_UINT16_T => U16,
        MPI_UNSIGNED | MPI_UINT32_T | MPI_WCHAR => U32,
        MPI_UNSIGNED_LONG | MPI_UNSIGNED_LONG_LONG | MPI_UINT64_T => U64,
        MPI_FLOAT | MPI_REAL | MPI_REAL4 => F32,
        MPI_DOUBLE | MPI_DOUBLE_PRECISION | MPI_REAL8 => F64,
        MPI_C_FLOAT_COMPLEX | MPI_COMPLEX | MPI_COMPLEX8 | MPI_CXX_FLOAT_COMPLEX => C32,
        MPI_C_DOUBLE_COMPLEX | MPI_DOUBLE_COMPLEX | MPI_COMPLEX16 | MPI_CXX_DOUBLE_COMPLEX => C64,
        MPI_C_BOOL | MPI_CXX_BOOL => Bool8,
        MPI_LOGICAL => Logical32,
        MPI_BYTE => Byte,
        MPI_FLOAT_INT => Pair(PairValue::F32, 4),
        MPI_DOUBLE_INT => Pair(PairValue::F64, 8),
        MPI_LONG_INT => Pair(PairValue::I64, 8),
        MPI_2INT | MPI_2INTEGER => Pair(PairValue::I32, 4),
        MPI_SHORT_INT => Pair(PairValue::I16, 2),
        MPI_2REAL => SamePair(PairValue::F32),
        MPI_2DOUBLE_PRECISION => SamePair(PairValue::F64),
        MPI_LONG_DOUBLE => LongDouble,
        MPI_C_LONG_DOUBLE_COMPLEX | MPI_CXX_LONG_DOUBLE_COMPLEX => CLongDouble,
        MPI_LONG_DOUBLE_INT => LongDoubleInt,
        _ => return None,
    })
}

extern "C" {
    fn ferrite_ld_reduce(op: i32, inout: *mut u8, input: *const u8, n: usize);
    fn ferrite_cld_reduce(op: i32, inout: *mut u8, input: *const u8, n: usize);
    fn ferrite_ldi_reduce(maxloc: i32, inout: *mut u8, input: *const u8, n: usize);
}

/// Bytes of a C long double.
const LD: usize = 16;

/// Calls one of the long double kernels on `n` whole elements of `size` bytes.
fn long_double(
    kernel: unsafe extern "C" fn(i32, *mut u8, *const u8, usize),
    code: i32,
    size: usize,
    inout: &mut [u8],
    input: &[u8],
) {
    let n = inout.len().min(input.len()) / size;
    // SAFETY: both buffers hold at least `n` elements of `size` bytes; the C kernel reads
    // and writes exactly those (with memcpy, so alignment does not matter).
    unsafe { kernel(code, inout.as_mut_ptr(), input.as_ptr(), n) }
}

/// Why an operation cannot be applied.
#[derive(Debug, PartialEq, Eq)]
pub struct NotDefined;

trait Num: Copy + PartialOrd {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    /// `f(input, inout)` into `inout`, element by element, over the whole elements of both.
    fn each(inout: &mut [u8], input: &[u8], f: impl Fn(Self, Self) -> Self);
}

macro_rules! num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b[..Self::SIZE].try_into().unwrap())
            }
            #[inline(always)]
            fn store(self, b: &mut [u8]) {
                b[..Self::SIZE].copy_from_slice(&self.to_ne_bytes())
            }
            #[inline(always)]
            fn each(inout: &mut [u8], input: &[u8], f: impl Fn(Self, Self) -> Self) {
                // Arrays of the element's size, so the loop's stride is a constant and
                // it vectorizes (over `chunks_exact` it stayed one element at a time).
                const N: usize = std::mem::size_of::<$t>();
                let (io, _) = inout.as_chunks_mut::<N>();
                let (i, _) = input.as_chunks::<N>();
                for (o, i) in io.iter_mut().zip(i) {
                    *o = f(<$t>::from_ne_bytes(*i), <$t>::from_ne_bytes(*o)).to_ne_bytes();
                }
            }
        }
    )*};
}
num!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

#[inline(always)]
fn each<T: Num>(inout: &mut [u8], input: &[u8], f: impl Fn(T, T) -> T) {
    T::each(inout, input, f)
}

macro_rules! int_ops {
    ($t:ty, $op:expr, $io:expr, $i:expr) => {
        match $op {
            MPI_MAX => each::<$t>($io, $i, |a, b| if a > b { a } else { b }),
            MPI_MIN => each::<$t>($io, $i, |a, b| if a < b { a } else { b }),
            MPI_SUM => each::<$t>($io, $i, |a, b| a.wrapping_add(b)),
            MPI_PROD => each::<$t>($io, $i, |a, b| a.wrapping_mul(b)),
            MPI_LAND => each::<$t>($io, $i, |a, b| ((a != 0) && (b != 0)) as $t),
            MPI_LOR => each::<$t>($io, $i, |a, b| ((a != 0) || (b != 0)) as $t),
            MPI_LXOR => each::<$t>($io, $i, |a, b| ((a != 0) != (b != 0)) as $t),
            MPI_BAND => each::<$t>($io, $i, |a, b| a & b),
            MPI_BOR => each::<$t>($io, $i, |a, b| a | b),
            MPI_BXOR => each::<$t>($io, $i, |a, b| a ^ b),
            _ => return Err(NotDefined),
        }
    };
}

/// Floating point: the arithmetic ops, and (as MPICH allows beyond the standard, and its
/// test suite checks) the logical ones, giving 1.0 or 0.0.
macro_rules! float_ops {
    ($t:ty, $op:expr, $io:expr, $i:expr) => {
        match $op {
            MPI_MAX => each::<$t>($io, $i, |a, b| if a > b { a } else { b }),
            MPI_MIN => each::<$t>($io, $i, |a, b| if a < b { a } else { b }),
            MPI_SUM => each::<$t>($io, $i, |a, b| a + b),
            MPI_PROD => each::<$t>($io, $i, |a, b| a * b),
            MPI_LAND => each::<$t>($io, $i, |a, b| ((a != 0.0) && (b != 0.0)) as u8 as $t),
            MPI_LOR => each::<$t>($io, $i, |a, b| ((a != 0.0) || (b != 0.0)) as u8 as $t),
            MPI_LXOR => each::<$t>($io, $i, |a, b| ((a != 0.0) != (b != 0.0)) as u8 as $t),
            _ => return Err(NotDefined),
        }
    };
}

fn complex<
    T: Num + std::ops::Add<Output = T> + std::ops::Mul<Output = T> + std::ops::Sub<Output = T>,
>(
    op: MPI_Op,
    inout: &mut [u8],
    input: &[u8],
) -> Result<(), NotDefined> {
    let n = T::SIZE;
    for (o, i) in inout.chunks_exact_mut(2 * n).zip(input.chunks_exact(2 * n)) {
        let (ar, ai) = (T::load(i), T::load(&i[n..]));
        let (br, bi) = (T::load(o), T::load(&o[n..]));
        let (r, im) = match op {
            MPI_SUM => (ar + br, ai + bi),
            MPI_PROD => (ar * br - ai * bi, ar * bi + ai * br),
            _ => return Err(NotDefined),
        };
        r.store(o);
        im.store(&mut o[n..]);
    }
    Ok(())
}

/// MINLOC/MAXLOC on (value, int index) pairs: the better value wins; on a tie, the smaller index.
/// MINLOC/MAXLOC on packed (value T, index I) pairs; ties keep the smaller index.
fn pair<T: Num, I: Num>(
    op: MPI_Op,
    int_at: usize,
    stride: usize,
    inout: &mut [u8],
    input: &[u8],
) -> Result<(), NotDefined> {
    let want_max = match op {
        MPI_MAXLOC => true,
        MPI_MINLOC => false,
        _ => return Err(NotDefined),
    };
    for (o, i) in inout
        .chunks_exact_mut(stride)
        .zip(input.chunks_exact(stride))
    {
        let (av, ai) = (T::load(i), I::load(&i[int_at..]));
        let (bv, bi) = (T::load(o), I::load(&o[int_at..]));
        let a_wins = if want_max { av > bv } else { av < bv };
        let (v, idx) = if a_wins {
            (av, ai)
        } else if av == bv {
            (av, if ai < bi { ai } else { bi })
        } else {
            (bv, bi)
        };
        v.store(o);
        idx.store(&mut o[int_at..]);
    }
    Ok(())
}

/// Applies `op` elementwise: `inout = input op inout`. `stride` is the element's extent for
/// pair types (packed pairs are `value + int` bytes with no padding) and ignored otherwise.
pub fn apply(op: MPI_Op, elem: Elem, inout: &mut [u8], input: &[u8]) -> Result<(), NotDefined> {
    // The loops vectorize to the baseline's 16-byte vectors; on a CPU with AVX2 the same
    // loops compiled for it do 32 bytes per instruction (Open MPI's op/avx chooses its
    // kernels the same way). Elementwise either way, so the results are the same bits.
    #[cfg(target_arch = "x86_64")]
    if inout.len() >= 32 && std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked).
        return unsafe { apply_avx2(op, elem, inout, input) };
    }
    apply_loops(op, elem, inout, input)
}

/// [`apply_loops`] compiled for AVX2.
///
/// # Safety
/// The CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn apply_avx2(
    op: MPI_Op,
    elem: Elem,
    inout: &mut [u8],
    input: &[u8],
) -> Result<(), NotDefined> {
    apply_loops(op, elem, inout, input)
}

/// The body of [`apply`], inlined into each instruction-set variant.
#[inline(always)]
fn apply_loops(op: MPI_Op, elem: Elem, inout: &mut [u8], input: &[u8]) -> Result<(), NotDefined> {
    use Elem::*;
    match elem {
        I8 => int_ops!(i8, op, inout, input),
        I16 => int_ops!(i16, op, inout, input),
        I32 => int_ops!(i32, op, inout, input),
        I64 => int_ops!(i64, op, inout, input),
        U8 => int_ops!(u8, op, inout, input),
        Byte if matches!(op, MPI_BAND | MPI_BOR | MPI_BXOR) => int_ops!(u8, op, inout, input),
        U16 => int_ops!(u16, op, inout, input),
        U32 => int_ops!(u32, op, inout, input),
        U64 => int_ops!(u64, op, inout, input),
        F32 => float_ops!(f32, op, inout, input),
        F64 => float_ops!(f64, op, inout, input),
        C32 => complex::<f32>(op, inout, input)?,
        C64 => complex::<f64>(op, inout, input)?,
        Bool8 | Logical32 => {
            let mut logical = |f: fn(bool, bool) -> bool| -> Result<(), NotDefined> {
                match elem {
                    Bool8 => each::<u8>(inout, input, |a, b| f(a != 0, b != 0) as u8),
                    _ => each::<i32>(inout, input, |a, b| f(a != 0, b != 0) as i32),
                }
                Ok(())
            };
            match op {
                MPI_LAND => logical(|a, b| a && b)?,
                MPI_LOR => logical(|a, b| a || b)?,
                MPI_LXOR => logical(|a, b| a != b)?,
                _ => return Err(NotDefined),
            }
        }
        Byte => return Err(NotDefined),
        LongDouble => {
            let code = match op {
                MPI_MAX => 0,
                MPI_MIN => 1,
                MPI_SUM => 2,
                MPI_PROD => 3,
                MPI_LAND => 4,
                MPI_LOR => 5,
                MPI_LXOR => 6,
                _ => return Err(NotDefined),
            };
            long_double(ferrite_ld_reduce, code, LD, inout, input);
        }
        CLongDouble => {
            let code = match op {
                MPI_SUM => 2,
                MPI_PROD => 3,
                _ => return Err(NotDefined),
            };
            long_double(ferrite_cld_reduce, code, 2 * LD, inout, input);
        }
        LongDoubleInt => {
            let code = match op {
                MPI_MINLOC => 0,
                MPI_MAXLOC => 1,
                _ => return Err(NotDefined),
            };
            long_double(ferrite_ldi_reduce, code, LD + 4, inout, input);
        }
        Pair(v, int_at) => {
            let stride = int_at + 4;
            match v {
                PairValue::F32 => pair::<f32, i32>(op, int_at, stride, inout, input)?,
                PairValue::F64 => pair::<f64, i32>(op, int_at, stride, inout, input)?,
                PairValue::I64 => pair::<i64, i32>(op, int_at, stride, inout, input)?,
                PairValue::I32 => pair::<i32, i32>(op, int_at, stride, inout, input)?,
                PairValue::I16 => pair::<i16, i32>(op, int_at, stride, inout, input)?,
            }
        }
        SamePair(PairValue::F32) => pair::<f32, f32>(op, 4, 8, inout, input)?,
        SamePair(PairValue::F64) => pair::<f64, f64>(op, 8, 16, inout, input)?,
        SamePair(_) => return Err(NotDefined),
    }
    Ok(())
}

/// True for the predefined operations (all of them are commutative).
pub fn is_predefined(op: MPI_Op) -> bool {
    (MPI_MAX..=MPI_NO_OP).contains(&op)
}

/// The name of a predefined operation, for error messages.
pub fn name(op: MPI_Op) -> &'static str {
    const NAMES: [&str; 14] = [
        "MPI_MAX",
        "MPI_MIN",
        "MPI_SUM",
        "MPI_PROD",
        "MPI_LAND",
        "MPI_BAND",
        "MPI_LOR",
        "MPI_BOR",
        "MPI_LXOR",
        "MPI_BXOR",
        "MPI_MINLOC",
        "MPI_MAXLOC",
        "MPI_REPLACE",
        "MPI_NO_OP",
    ];
    let i = (op - MPI_MAX) as usize;
    if is_predefined(op) {
        NAMES[i]
    } else {
        "a user operation"
    }
}

#[allow(dead_code)]
const _OPS_ARE_CONTIGUOUS: () = assert!(MPI_NO_OP - MPI_MAX == 13);

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::raw::c_int;

    fn bytes<T: Num>(v: &[T]) -> Vec<u8> {
        let mut out = vec![0u8; v.len() * T::SIZE];
        for (x, o) in v.iter().zip(out.chunks_exact_mut(T::SIZE)) {
            x.store(o);
        }
        out
    }

    fn vals<T: Num>(b: &[u8]) -> Vec<T> {
        b.chunks_exact(T::SIZE).map(T::load).collect()
    }

    #[test]
    fn integer_ops_match_scalar_arithmetic() {
        let a = [3i32, -5, 0, i32::MAX];
        let b = [4i32, -7, 9, 1];
        type Case = (c_int, fn(i32, i32) -> i32);
        let cases: [Case; 6] = [
            (MPI_SUM, |x, y| x.wrapping_add(y)),
            (MPI_PROD, |x, y| x.wrapping_mul(y)),
            (MPI_MAX, |x, y| x.max(y)),
            (MPI_MIN, |x, y| x.min(y)),
            (MPI_BXOR, |x, y| x ^ y),
            (MPI_LAND, |x, y| (x != 0 && y != 0) as i32),
        ];
        for (op, f) in cases {
            let mut io = bytes(&b);
            apply(op, elem_of(MPI_INT).unwrap(), &mut io, &bytes(&a)).unwrap();
            let want: Vec<i32> = a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect();
            assert_eq!(vals::<i32>(&io), want, "{}", name(op));
        }
    }

    /// Long buffers take the AVX2 build of the loops where the CPU has it, single elements
    /// the baseline's: the same bits for every integer and float type and operation, at
    /// lengths around the vector widths, with NaNs, signed zeros and extremes among the data.
    #[test]
    fn long_runs_match_element_by_element() {
        use Elem::*;
        let types = [
            (I8, 1),
            (I16, 2),
            (I32, 4),
            (I64, 8),
            (U8, 1),
            (U16, 2),
            (U32, 4),
            (U64, 8),
            (F32, 4),
            (F64, 8),
        ];
        let ops = [
            MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR,
            MPI_BXOR,
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for (elem, s) in types {
            for n in [
                1usize, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 129, 1000,
            ] {
                let mut gen = |k: usize| -> Vec<u8> {
                    let r = next();
                    match (elem, k % 11) {
                        (F64, 0) => f64::NAN.to_ne_bytes().to_vec(),
                        (F64, 1) => (-0.0f64).to_ne_bytes().to_vec(),
                        (F64, _) => ((r % 2001) as f64 - 1000.0).to_ne_bytes().to_vec(),
                        (F32, 0) => f32::NAN.to_ne_bytes().to_vec(),
                        (F32, 1) => (-0.0f32).to_ne_bytes().to_vec(),
                        (F32, _) => ((r % 2001) as f32 - 1000.0).to_ne_bytes().to_vec(),
                        (_, 2) => vec![0xff; s],
                        (_, 3) => vec![0; s],
                        _ => r.to_ne_bytes()[..s].to_vec(),
                    }
                };
                let input: Vec<u8> = (0..n).flat_map(&mut gen).collect();
                let start: Vec<u8> = (0..n).flat_map(|k| gen(k + 5)).collect();
                for op in ops {
                    let mut got = start.clone();
                    let r = apply(op, elem, &mut got, &input);
                    let mut want = start.clone();
                    for k in 0..n {
                        let e = k * s..(k + 1) * s;
                        let one = apply(op, elem, &mut want[e.clone()], &input[e]);
                        assert_eq!(one, r, "{} on {elem:?}", name(op));
                    }
                    assert_eq!(got, want, "{} on {elem:?}, {n} elements", name(op));
                }
            }
        }
    }

    #[test]
    fn floats_complex_and_logicals() {
        let mut io = bytes(&[1.5f64, 2.0]);
        apply(MPI_PROD, Elem::F64, &mut io, &bytes(&[2.0f64, -3.0])).unwrap();
        assert_eq!(vals::<f64>(&io), vec![3.0, -6.0]);
        // (1+2i)(3+4i) = -5+10i
        let mut io = bytes(&[3.0f32, 4.0]);
        apply(MPI_PROD, Elem::C32, &mut io, &bytes(&[1.0f32, 2.0])).unwrap();
        assert_eq!(vals::<f32>(&io), vec![-5.0, 10.0]);
        let mut io = vec![1u8, 0, 1, 0];
        apply(MPI_LXOR, Elem::Bool8, &mut io, &[1, 1, 0, 0]).unwrap();
        assert_eq!(io, vec![0, 1, 1, 0]);
        assert_eq!(
            apply(MPI_BAND, Elem::F64, &mut [0u8; 8], &[0u8; 8]),
            Err(NotDefined)
        );
        assert_eq!(
            apply(MPI_SUM, Elem::Byte, &mut [0u8; 1], &[0u8; 1]),
            Err(NotDefined)
        );
        let mut io = vec![0b1100u8];
        apply(MPI_BAND, Elem::Byte, &mut io, &[0b1010]).unwrap();
        assert_eq!(io, vec![0b1000]);
    }

    #[test]
    fn minloc_maxloc_prefer_the_smaller_index_on_ties() {
        // MPI_DOUBLE_INT packed: 8-byte value then 4-byte int.
        let pack = |v: f64, i: i32| {
            let mut b = v.to_ne_bytes().to_vec();
            b.extend_from_slice(&i.to_ne_bytes());
            b
        };
        let e = elem_of(MPI_DOUBLE_INT).unwrap();
        let mut io = [pack(2.0, 5), pack(1.0, 1)].concat();
        apply(
            MPI_MAXLOC,
            e,
            &mut io,
            &[pack(2.0, 3), pack(7.0, 9)].concat(),
        )
        .unwrap();
        assert_eq!(io, [pack(2.0, 3), pack(7.0, 9)].concat());
        let mut io = pack(1.0, 4);
        apply(MPI_MINLOC, e, &mut io, &pack(3.0, 0)).unwrap();
        assert_eq!(io, pack(1.0, 4));
    }

    #[test]
    fn fortran_pairs_have_indices_of_the_value_type() {
        // MPI_2DOUBLE_PRECISION: two doubles; MPI_2REAL: two floats (16 and 8 bytes).
        let e = elem_of(MPI_2DOUBLE_PRECISION).unwrap();
        let mut io = bytes(&[1.0f64, 0.0, 0.0, 2.0]);
        apply(MPI_MAXLOC, e, &mut io, &bytes(&[2.0f64, 1.0, 0.0, 1.0])).unwrap();
        assert_eq!(vals::<f64>(&io), vec![2.0, 1.0, 0.0, 1.0]);
        let e = elem_of(MPI_2REAL).unwrap();
        let mut io = bytes(&[-1.0f32, 3.0, 5.0, 3.0]);
        apply(MPI_MINLOC, e, &mut io, &bytes(&[-2.0f32, 4.0, 5.0, 1.0])).unwrap();
        assert_eq!(vals::<f32>(&io), vec![-2.0, 4.0, 5.0, 1.0]);
    }

    /// x87 80-bit extended value m * 2^(e - 16383) with explicit integer bit, in 16 bytes.
    fn ld(mantissa: u64, exp: u16) -> Vec<u8> {
        let mut v = mantissa.to_le_bytes().to_vec();
        v.extend_from_slice(&exp.to_le_bytes());
        v.resize(16, 0);
        v
    }

    #[test]
    fn long_double_kernels_are_linked_and_compute() {
        let one = ld(1 << 63, 0x3fff);
        let two = ld(1 << 63, 0x4000);
        let mut io = one.clone();
        apply(MPI_SUM, Elem::LongDouble, &mut io, &one).unwrap();
        assert_eq!(io[..10], two[..10]);
        apply(MPI_MAX, Elem::LongDouble, &mut io, &one).unwrap();
        assert_eq!(io[..10], two[..10]);
        assert_eq!(
            apply(MPI_BAND, Elem::LongDouble, &mut io, &one),
            Err(NotDefined)
        );
    }
}
