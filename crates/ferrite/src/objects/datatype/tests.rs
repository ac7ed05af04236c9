use super::*;
use proptest::prelude::*;

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
    assert_eq!(c2.node_count(), 1);
    assert_eq!(c2.elements_in(240), Some(30));
    assert_eq!(c2.elements_in(7), None);
}

#[test]
fn a_million_block_vector_is_a_few_nodes() {
    let int = Datatype::basic(4);
    let v = Datatype::hvector(1_000_000, 1, 8, &int);
    assert!(v.node_count() <= 2, "{} nodes", v.node_count());
    assert_eq!((v.size, v.extent), (4_000_000, 8 * 999_999 + 4));
    let v2 = Datatype::hvector(1000, 3, v.extent + 16, &v);
    assert!(v2.node_count() <= 4);
    assert_eq!(v2.elements, 3_000_000_000);
    let idx = Datatype::hindexed(&[(0, 1_000_000), (4_000_000, 1_000_000)], &int);
    assert_eq!(idx.node_count(), 1, "adjacent runs merge");
    assert!(idx.contiguous);
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
    assert_eq!(si.elements_in(12), Some(4));
    assert_eq!(t.get(MPI_INT).unwrap().size, 4);
    assert!(t.get(MPI_DATATYPE_NULL).is_err());
}

#[test]
fn struct_extent_is_padded_to_its_most_aligned_member() {
    let (c, int, dbl, ld) = (
        Datatype::basic(1),
        Datatype::basic(4),
        Datatype::basic(8),
        Datatype::basic(16),
    );
    // struct { double d[3]; int i; }: 28 bytes of data, sizeof 32.
    let s = Datatype::structure(&[(0, 3, &dbl), (24, 1, &int)]);
    assert_eq!((s.size, s.extent, s.true_extent), (28, 32, 28));
    assert!(!s.contiguous);
    // struct { char a; double d; char b; }: sizeof 24, and nested in another struct.
    let s = Datatype::structure(&[(0, 1, &c), (8, 1, &dbl), (16, 1, &c)]);
    assert_eq!((s.extent, s.align), (24, 8));
    let n = Datatype::structure(&[(0, 1, &c), (8, 1, &s), (32, 1, &c)]);
    assert_eq!(n.extent, 40);
    assert_eq!(Datatype::structure(&[(0, 1, &ld), (16, 1, &c)]).extent, 32);
    // One type only (an hindexed type, as in MPICH): no padding.
    assert_eq!(
        Datatype::structure(&[(0, 1, &dbl), (12, 1, &dbl)]).extent,
        20
    );
    // A resized member keeps its alignment but sets the bounds when alone.
    let r = Datatype::resized(&dbl, 0, 12);
    assert_eq!(Datatype::structure(&[(0, 1, &r)]).extent, 12);
    assert_eq!(Datatype::structure(&[(0, 1, &r), (12, 1, &c)]).extent, 16);
    // Other constructors inherit the alignment without padding.
    let v = Datatype::hvector(2, 1, 3, &Datatype::basic(2));
    assert_eq!((v.extent, v.align), (5, 2));
}

#[test]
fn resized_and_struct_bounds_follow_the_standard() {
    let int = Datatype::basic(4);
    let dbl = Datatype::basic(8);
    let s = Datatype::structure(&[(0, 1, &int), (8, 1, &dbl)]);
    assert_eq!((s.size, s.lb, s.extent), (12, 0, 16));
    assert_eq!(s.elements, 2);
    // 4 bytes of int, then 6 of the double: ends inside an element.
    assert_eq!(s.elements_in(10), None);
    assert_eq!(s.elements_in(16 + 4), None);
    assert_eq!(s.elements_in(12 + 4), Some(3));
    assert_eq!(s.bytes_for_elements(3), 16);
    let r = Datatype::resized(&int, -4, 16);
    assert_eq!((r.lb, r.extent, r.true_lb, r.true_extent), (-4, 16, 0, 4));
    assert!(!r.contiguous);
}

#[test]
fn subarray_of_a_c_array_selects_the_block() {
    let int = Datatype::basic(4);
    // 4x5 array, 2x3 block starting at (1, 2).
    let s = Datatype::subarray(&[4, 5], &[2, 3], &[1, 2], true, &int);
    assert_eq!((s.size, s.lb, s.extent), (24, 0, 80));
    let src: Vec<u8> = (0..20).flat_map(|i: u32| i.to_le_bytes()).collect();
    let packed = pack_all(&s, &src, 1);
    let got: Vec<u32> = packed
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![7, 8, 9, 12, 13, 14]);
    // Fortran order: first index fastest; same block is (2..5, 1..3) of a 5x4 array.
    let f = Datatype::subarray(&[5, 4], &[3, 2], &[2, 1], false, &int);
    assert_eq!(pack_all(&f, &src, 1), packed);
}

#[test]
fn darray_block_cyclic_partitions_the_array() {
    let int = Datatype::basic(4);
    let src: Vec<u8> = (0..30).flat_map(|i: u32| i.to_le_bytes()).collect();
    let mut seen = vec![0; 30];
    // 6x5 array over a 2x2 grid: rows block, columns cyclic(2).
    for rank in 0..4 {
        let d = Datatype::darray(
            rank,
            &[6, 5],
            &[
                (MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_DFLT_DARG),
                (MPI_DISTRIBUTE_CYCLIC, 2),
            ],
            &[2, 2],
            true,
            &int,
        )
        .unwrap();
        assert_eq!(d.extent, 120);
        for c in pack_all(&d, &src, 1).chunks(4) {
            let v = u32::from_le_bytes(c.try_into().unwrap()) as usize;
            let (row, col) = (v / 5, v % 5);
            assert_eq!(row / 3, rank / 2, "row {row} on rank {rank}");
            assert_eq!((col / 2) % 2, rank % 2, "col {col} on rank {rank}");
            seen[v] += 1;
        }
    }
    assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
}

#[test]
fn external32_is_big_endian_per_basic_element() {
    let mut t = Datatypes::new();
    // struct { int32 a; double b; short c } packed: 4 + 8 + 2 bytes.
    let int = Datatype::basic(4);
    let dbl = Datatype::basic(8);
    let short = Datatype::basic(2);
    let s = Datatype::structure(&[(0, 1, &int), (8, 1, &dbl), (16, 1, &short)]);
    let mut src = Vec::new();
    src.extend_from_slice(&0x01020304i32.to_le_bytes());
    src.extend_from_slice(&[0; 4]);
    src.extend_from_slice(&1.0f64.to_le_bytes());
    src.extend_from_slice(&0x0a0bi16.to_le_bytes());
    src.extend_from_slice(&[0; 6]);
    assert_eq!(
        ext32(&s, &src, 1).unwrap(),
        vec![1, 2, 3, 4, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x0a, 0x0b],
        "hand-computed external32 bytes"
    );
    // A complex float swaps each 4-byte component.
    let c = t.get(MPI_C_FLOAT_COMPLEX).unwrap();
    assert_eq!(
        ext32(&c, &[1, 2, 3, 4, 5, 6, 7, 8], 1).unwrap(),
        [4, 3, 2, 1, 8, 7, 6, 5]
    );
    assert_eq!(c.elements_in(16), Some(2));
}

/// `count` elements of `t` at the start of `src` in external32.
fn ext32(t: &Datatype, src: &[u8], count: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    // SAFETY: the tests pass a `src` covering `count` elements at its start.
    unsafe { t.pack_external(src.as_ptr(), count, &mut out) }?;
    assert_eq!(out.len(), t.external_size() * count);
    Ok(out)
}

/// Unpacks external32 `data` into a fresh buffer of `len` bytes.
fn from_ext32(t: &Datatype, data: &[u8], count: usize, len: usize) -> Vec<u8> {
    let mut dst = vec![0u8; len];
    // SAFETY: `dst` covers `count` elements at its start in these tests.
    unsafe { t.unpack_external(data, dst.as_mut_ptr(), count) };
    dst
}

#[test]
fn external32_uses_the_standards_sizes() {
    let mut t = Datatypes::new();
    let mut ty = |h| t.get(h).unwrap();
    // MPI 4.1 15.5.2: long and unsigned long are 4 bytes, wchar 2, long double 16
    // (binary128), C bool 1, MPI_AINT/OFFSET/COUNT 8.
    let sizes = [
        (MPI_LONG, 4),
        (MPI_UNSIGNED_LONG, 4),
        (MPI_WCHAR, 2),
        (MPI_LONG_DOUBLE, 16),
        (MPI_C_BOOL, 1),
        (MPI_AINT, 8),
        (MPI_OFFSET, 8),
        (MPI_COUNT, 8),
        (MPI_LONG_LONG, 8),
        (MPI_C_LONG_DOUBLE_COMPLEX, 32),
        (MPI_LONG_INT, 8),
        (MPI_LONG_DOUBLE_INT, 20),
    ];
    for (h, n) in sizes {
        assert_eq!(
            ty(h).external_size(),
            n,
            "external32 size of {:#x}",
            h as u32
        );
    }
    // Hand-computed vectors.
    let long = ty(MPI_LONG);
    let e = ext32(&long, &(-2i64).to_le_bytes(), 1).unwrap();
    assert_eq!(e, [0xff, 0xff, 0xff, 0xfe]);
    assert_eq!(from_ext32(&long, &e, 1, 8), (-2i64).to_le_bytes());
    let ul = ty(MPI_UNSIGNED_LONG);
    let e = ext32(&ul, &0xdead_beefu64.to_le_bytes(), 1).unwrap();
    assert_eq!(e, [0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(from_ext32(&ul, &e, 1, 8), 0xdead_beefu64.to_le_bytes());
    let wc = ty(MPI_WCHAR);
    let e = ext32(&wc, &0x20acu32.to_le_bytes(), 1).unwrap();
    assert_eq!(e, [0x20, 0xac]);
    assert_eq!(from_ext32(&wc, &e, 1, 4), 0x20acu32.to_le_bytes());
    // long double 1.0 (x87: significand 0x8000000000000000, exponent 0x3fff) and -0.75.
    let ld = ty(MPI_LONG_DOUBLE);
    let mut one = [0u8; 16];
    one[7] = 0x80;
    one[8..10].copy_from_slice(&0x3fffu16.to_le_bytes());
    let e = ext32(&ld, &one, 1).unwrap();
    assert_eq!(e, [0x3f, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(from_ext32(&ld, &e, 1, 16), one);
    let mut m = [0u8; 16];
    m[..8].copy_from_slice(&0xc000_0000_0000_0000u64.to_le_bytes());
    m[8..10].copy_from_slice(&0xbffeu16.to_le_bytes());
    let e = ext32(&ld, &m, 1).unwrap();
    assert_eq!(&e[..3], [0xbf, 0xfe, 0x80]);
    assert!(e[3..].iter().all(|&b| b == 0));
    // MPI_LONG_INT {long 5; int 7}: 4 + 4 bytes.
    let li = ty(MPI_LONG_INT);
    let mut src = [0u8; 16];
    src[..8].copy_from_slice(&5i64.to_le_bytes());
    src[8..12].copy_from_slice(&7i32.to_le_bytes());
    assert_eq!(ext32(&li, &src, 1).unwrap(), [0, 0, 0, 5, 0, 0, 0, 7]);
    // Values the 4-byte types cannot hold are conversion errors.
    assert!(ext32(&long, &(1i64 << 31).to_le_bytes(), 1).is_err());
    assert!(ext32(&long, &(-(1i64 << 31)).to_le_bytes(), 1).is_ok());
    assert!(ext32(&ul, &(1u64 << 32).to_le_bytes(), 1).is_err());
    assert!(ext32(&wc, &0x1f600u32.to_le_bytes(), 1).is_err());
}

/// A random type description, built both by the engine and by the naive reference.
#[derive(Clone, Debug)]
enum Spec {
    Basic(usize),
    /// A C long: 8 bytes here, 4 in external32.
    Long,
    Contig(usize, Box<Spec>),
    Vector(usize, usize, isize, Box<Spec>),
    Hindexed(Vec<(isize, usize)>, Box<Spec>),
    Struct(Vec<(isize, usize, Spec)>),
    Resized(isize, isize, Box<Spec>),
}

/// The naive type map: every basic element as (offset, size), plus lb and ub; `long[i]`
/// says whether element i is a C long.
struct Flat {
    map: Vec<(isize, usize)>,
    long: Vec<bool>,
    lb: isize,
    ub: isize,
    /// The most aligned basic element's alignment (create_struct pads to it).
    align: usize,
}

fn copies(parts: Vec<(isize, &Flat)>) -> Flat {
    let mut map = Vec::new();
    let mut long = Vec::new();
    let (mut lb, mut ub) = (isize::MAX, isize::MIN);
    let mut align = 1;
    for (d, f) in &parts {
        map.extend(f.map.iter().map(|&(o, s)| (o + d, s)));
        long.extend_from_slice(&f.long);
        lb = lb.min(d + f.lb);
        ub = ub.max(d + f.ub);
        align = align.max(f.align);
    }
    if parts.is_empty() {
        (lb, ub) = (0, 0);
    }
    Flat {
        map,
        long,
        lb,
        ub,
        align,
    }
}

fn flatten(s: &Spec) -> Flat {
    match s {
        Spec::Basic(n) => Flat {
            map: vec![(0, *n)],
            long: vec![false],
            lb: 0,
            ub: *n as isize,
            align: (*n).clamp(1, 16),
        },
        Spec::Long => Flat {
            map: vec![(0, 8)],
            long: vec![true],
            lb: 0,
            ub: 8,
            align: 8,
        },
        Spec::Contig(n, t) => {
            let f = flatten(t);
            let e = f.ub - f.lb;
            let align = f.align;
            Flat {
                align,
                ..copies((0..*n as isize).map(|k| (k * e, &f)).collect())
            }
        }
        Spec::Vector(count, bl, stride, t) => {
            let f = flatten(t);
            let e = f.ub - f.lb;
            let mut parts = Vec::new();
            for i in 0..*count as isize {
                for j in 0..*bl as isize {
                    parts.push((i * stride * e + j * e, &f));
                }
            }
            let align = f.align;
            Flat {
                align,
                ..copies(parts)
            }
        }
        Spec::Hindexed(blocks, t) => {
            let f = flatten(t);
            let e = f.ub - f.lb;
            let mut parts = Vec::new();
            for &(d, n) in blocks {
                for j in 0..n as isize {
                    parts.push((d + j * e, &f));
                }
            }
            copies(parts)
        }
        Spec::Struct(entries) => {
            let flats: Vec<(isize, usize, Flat)> = entries
                .iter()
                .map(|(d, n, t)| (*d, *n, flatten(t)))
                .collect();
            let mut parts = Vec::new();
            for (d, n, f) in &flats {
                let e = f.ub - f.lb;
                for j in 0..*n as isize {
                    parts.push((d + j * e, f));
                }
            }
            let mut c = copies(parts);
            // Entries are distinct type objects, so two or more make a padded struct.
            let size: usize = c.map.iter().map(|e| e.1).sum();
            let rem = (c.ub - c.lb).rem_euclid(c.align as isize);
            if entries.len() > 1 && size > 0 && c.ub > c.lb && rem != 0 {
                c.ub += c.align as isize - rem;
            }
            c
        }
        Spec::Resized(lb, ext, t) => {
            let f = flatten(t);
            Flat {
                map: f.map,
                long: f.long,
                lb: *lb,
                ub: lb + ext,
                align: f.align,
            }
        }
    }
}

fn build(s: &Spec) -> Datatype {
    match s {
        Spec::Basic(n) => Datatype::basic(*n),
        Spec::Long => Datatype::basic_of(Basic {
            size: 8,
            swap: 8,
            ext: Ext::Long,
        }),
        Spec::Contig(n, t) => Datatype::hvector(1, *n, 0, &build(t)),
        Spec::Vector(count, bl, stride, t) => {
            let o = build(t);
            Datatype::hvector(*count, *bl, stride * o.extent, &o)
        }
        Spec::Hindexed(blocks, t) => Datatype::hindexed(blocks, &build(t)),
        Spec::Struct(entries) => {
            let built: Vec<(isize, usize, Datatype)> =
                entries.iter().map(|(d, n, t)| (*d, *n, build(t))).collect();
            let refs: Vec<(isize, usize, &Datatype)> =
                built.iter().map(|(d, n, t)| (*d, *n, t)).collect();
            Datatype::structure(&refs)
        }
        Spec::Resized(lb, ext, t) => Datatype::resized(&build(t), *lb, *ext),
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    let leaf = prop_oneof![
        prop_oneof![Just(1usize), Just(2), Just(4), Just(8)].prop_map(Spec::Basic),
        Just(Spec::Long),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (0usize..4, inner.clone()).prop_map(|(n, t)| Spec::Contig(n, Box::new(t))),
            (0usize..4, 0usize..3, -3isize..4, inner.clone())
                .prop_map(|(c, b, s, t)| Spec::Vector(c, b, s, Box::new(t))),
            (
                prop::collection::vec((0isize..64, 0usize..3), 0..4),
                inner.clone()
            )
                .prop_map(|(b, t)| Spec::Hindexed(b, Box::new(t))),
            prop::collection::vec((0isize..64, 0usize..3, inner.clone()), 0..4)
                .prop_map(Spec::Struct),
            (-8isize..8, 0isize..48, inner).prop_map(|(lb, e, t)| Spec::Resized(
                lb,
                e,
                Box::new(t)
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn engine_matches_the_naive_flattening(s in spec(), count in 0usize..4, cut in 0usize..512) {
        let t = build(&s);
        let f = flatten(&s);
        let size: usize = f.map.iter().map(|e| e.1).sum();
        prop_assert_eq!(t.size, size);
        prop_assert_eq!((t.lb, t.extent), (f.lb, f.ub - f.lb));
        if size > 0 {
            let tlb = f.map.iter().filter(|e| e.1 > 0).map(|e| e.0).min().unwrap();
            let tub = f.map.iter().map(|e| e.0 + e.1 as isize).max().unwrap();
            prop_assert_eq!((t.true_lb, t.true_extent), (tlb, tub - tlb));
        }
        // Every byte the `count` elements touch, relative to the buffer.
        let ext = t.extent;
        let offs: Vec<(isize, usize)> = (0..count as isize)
            .flat_map(|i| f.map.iter().map(move |&(o, s)| (o + i * ext, s)))
            .collect();
        let lo = offs.iter().map(|e| e.0).min().unwrap_or(0).min(0);
        let hi = offs.iter().map(|e| e.0 + e.1 as isize).max().unwrap_or(0).max(0);
        let base = (-lo) as usize;
        let len = (hi - lo) as usize;
        let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let want: Vec<u8> = offs
            .iter()
            .flat_map(|&(o, s)| src[(base as isize + o) as usize..(base as isize + o) as usize + s].to_vec())
            .collect();
        let mut got = Vec::new();
        // SAFETY: `src` covers every byte of `count` elements placed at `base`.
        unsafe { t.pack(src.as_ptr().add(base), count, &mut got) };
        prop_assert_eq!(&got, &want);

        // Unpack a prefix into a fresh buffer; compare with the naive scatter.
        let cut = cut.min(want.len());
        let mut dst = vec![0xeeu8; len];
        // SAFETY: `dst` covers `count` elements at `base`; `want` is a separate vector.
        unsafe { t.unpack(&want[..cut], dst.as_mut_ptr().add(base), count) };
        let mut naive = vec![0xeeu8; len];
        let mut at = 0;
        for &(o, s) in &offs {
            for k in 0..s {
                if at < cut {
                    naive[(base as isize + o) as usize + k] = want[at];
                }
                at += 1;
            }
        }
        prop_assert_eq!(&dst, &naive);

        // Basic elements in the prefix, or None if it ends inside one.
        let mut n = 0u64;
        let mut left = cut;
        let mut partial = false;
        for &(_, s) in &offs {
            if left == 0 { break; }
            if left < s { partial = true; break; }
            left -= s;
            n += 1;
        }
        let expect = if partial { None } else { Some(n) };
        prop_assert_eq!(t.elements_in(cut as u64), expect);
        if let Some(n) = expect {
            if t.size > 0 {
                prop_assert_eq!(t.bytes_for_elements(n), cut as u64);
            }
        }

        // external32: each basic element reversed, C longs as 4 bytes. Longs get values
        // that fit 4 bytes (or, where overlapping elements spoil that, must be refused).
        let mut src = src;
        let long: Vec<bool> = (0..count).flat_map(|_| f.long.iter().copied()).collect();
        for (k, &(o, _)) in offs.iter().enumerate().filter(|(k, _)| long[*k]) {
            let at = (base as isize + o) as usize;
            src[at..at + 8].copy_from_slice(&(k as i64 * 977 - 3000).to_le_bytes());
        }
        let mut naive32: Result<Vec<u8>, ()> = Ok(Vec::new());
        for (k, &(o, s)) in offs.iter().enumerate() {
            let at = (base as isize + o) as usize;
            let bytes = &src[at..at + s];
            let Ok(v) = naive32.as_mut() else { break };
            if long[k] {
                match i32::try_from(i64::from_le_bytes(bytes.try_into().unwrap())) {
                    Ok(x) => v.extend(x.to_be_bytes()),
                    Err(_) => naive32 = Err(()),
                }
            } else {
                v.extend(bytes.iter().rev());
            }
        }
        let mut got32 = Vec::new();
        // SAFETY: as for `pack` above.
        let r = unsafe { t.pack_external(src.as_ptr().add(base), count, &mut got32) };
        match naive32 {
            Ok(want32) => {
                prop_assert!(r.is_ok(), "{:?}", r);
                prop_assert_eq!(&got32, &want32);
                prop_assert_eq!(got32.len(), t.external_size() * count);
                // Back from external32 equals unpacking the native bytes.
                let mut native = Vec::new();
                // SAFETY: as for `pack` above.
                unsafe { t.pack(src.as_ptr().add(base), count, &mut native) };
                let mut a = vec![0u8; len];
                let mut b = vec![0u8; len];
                // SAFETY: both buffers cover `count` elements at `base`.
                unsafe {
                    t.unpack_external(&got32, a.as_mut_ptr().add(base), count);
                    t.unpack(&native, b.as_mut_ptr().add(base), count);
                }
                prop_assert_eq!(a, b);
            }
            Err(()) => prop_assert!(r.is_err()),
        }
    }
}

#[test]
fn counts_beyond_an_int_are_computed_not_expanded() {
    let g = 1usize << 30;
    let int = Datatype::basic(4);
    // 2^31 + 1 blocks of 2 ints, stride 3 ints.
    let v = Datatype::hvector(2 * g + 1, 2, 12, &int);
    assert_eq!(v.size, (2 * g + 1) * 8);
    assert_eq!(v.extent as usize, (2 * g * 3 + 2) * 4);
    assert_eq!(v.elements, (2 * g as u64 + 1) * 2);
    assert!(v.node_count() <= 2, "{} nodes", v.node_count());
    // 2^32 + 3 contiguous bytes stay one run; elements in a prefix are counted arithmetically.
    let c = Datatype::hvector(1, 4 * g + 3, 0, &Datatype::basic(1));
    assert!(c.is_contiguous() && c.node_count() == 1);
    assert_eq!(c.elements_in(4 * g as u64 + 3), Some(4 * g as u64 + 3));
    // 2^30 copies of that: 2^62-ish sizes and extents are still exact (the engine's limit is
    // isize::MAX; the ABI refuses far earlier, see abi/datatype.rs LIMIT).
    let big = Datatype::hvector(g, 1, c.extent, &c);
    assert_eq!(big.size as u64, g as u64 * (4 * g as u64 + 3));
    assert_eq!(big.extent as u64, g as u64 * (4 * g as u64 + 3));
    assert_eq!(
        big.elements_in(3 * (4 * g as u64 + 3) + 1),
        Some(3 * (4 * g as u64 + 3) + 1)
    );
    assert_eq!(big.bytes_for_elements(5 * g as u64), 5 * g as u64);
    // A struct with a block 2^33 bytes away keeps exact bounds.
    let s = Datatype::structure(&[(0, 1, &int), (8 << 30, 3, &int)]);
    assert_eq!((s.lb, s.extent, s.size), (0, (8 << 30) + 12, 16));
}

#[test]
fn cyclic_darray_of_a_huge_dimension_is_a_few_nodes() {
    // 2^33 bytes dealt cyclic(3) over 4 processes: the ranks' sizes add up to the array,
    // and each type is a vector plus a tail, not 2^31 blocks.
    let g = 1usize << 33;
    let byte = Datatype::basic(1);
    let mut total = 0;
    for rank in 0..4 {
        let t =
            Datatype::darray(rank, &[g], &[(MPI_DISTRIBUTE_CYCLIC, 3)], &[4], true, &byte).unwrap();
        assert_eq!((t.lb, t.extent), (0, g as isize));
        assert!(t.node_count() <= 4, "{} nodes", t.node_count());
        total += t.size;
    }
    assert_eq!(total, g);
    // Small case against the direct enumeration: 10 elements cyclic(3) over 2 processes.
    let t = Datatype::darray(1, &[10], &[(MPI_DISTRIBUTE_CYCLIC, 3)], &[2], true, &byte).unwrap();
    let src: Vec<u8> = (0..10).collect();
    assert_eq!(pack_all(&t, &src, 1), vec![3, 4, 5, 9]);
}

#[test]
fn flatten_lists_runs_in_order_and_merges_adjacent_ones() {
    let int = Datatype::basic(4);
    // 3 blocks of 2 ints, stride 20 bytes: runs of 8 bytes at 0, 20, 40.
    let v = Datatype::hvector(3, 2, 20, &int);
    assert_eq!(v.flatten(1), vec![(0, 8), (20, 8), (40, 8)]);
    // Two elements: the second starts at the extent (48), right where the first one's
    // last run ends, so those two runs merge.
    assert_eq!(
        v.flatten(2),
        vec![(0, 8), (20, 8), (40, 16), (68, 8), (88, 8)]
    );
    // Blocks that touch merge into one run; contiguous types are one run; none for 0.
    let touching = Datatype::hvector(4, 1, 4, &int);
    assert_eq!(touching.flatten(2), vec![(0, 32)]);
    assert_eq!(int.flatten(5), vec![(0, 20)]);
    assert!(v.flatten(0).is_empty());
}
