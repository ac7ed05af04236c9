//! Datatype constructors, queries, names and decoding (MPI 4.1 chapter 5).

use super::consts::*;
use super::{out, out_str, slice};
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::datatype::{builtin_name, Datatype, Envelope};
use crate::state::{self, Ferrite};
use std::os::raw::{c_char, c_int};
use std::sync::Arc;

/// A count argument as the engine's usize; negative is MPI_ERR_COUNT.
fn count_arg(n: i64, what: &str) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| crate::mpi_err!(MPI_ERR_COUNT, "negative {what} {n}"))
}

/// Which binding a constructor was called through. The engine works in 64 bits either way;
/// the form decides where the envelope records the arguments: the `_c` forms record every
/// MPI_Count argument as a large count (MPI 4.1 5.1.13).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Int,
    Large,
}

impl Form {
    /// The form of a `twins!` body (`LARGE` in the `_c` form).
    const fn of(large: bool) -> Form {
        if large {
            Form::Large
        } else {
            Form::Int
        }
    }
}

/// A constructor's arguments sorted into the envelope's arrays.
#[derive(Default)]
struct Args {
    ints: Vec<c_int>,
    aints: Vec<isize>,
    counts: Vec<i64>,
}

impl Args {
    /// Arguments that are `int` in the int form and MPI_Count in the `_c` form.
    fn count(&mut self, form: Form, v: &[i64]) {
        match form {
            Form::Int => self.ints.extend(v.iter().map(|&x| x as c_int)),
            Form::Large => self.counts.extend_from_slice(v),
        }
    }

    /// Arguments that are MPI_Aint in the int form and MPI_Count in the `_c` form.
    fn addr(&mut self, form: Form, v: &[i64]) {
        match form {
            Form::Int => self.aints.extend(v.iter().map(|&x| x as isize)),
            Form::Large => self.counts.extend_from_slice(v),
        }
    }

    /// Arguments that are `int` in both forms.
    fn int(&mut self, v: &[c_int]) {
        self.ints.extend_from_slice(v);
    }
}

/// What a constructor produced and was called with.
struct Made {
    t: Datatype,
    combiner: c_int,
    args: Args,
    types: Vec<(MPI_Datatype, Arc<Datatype>)>,
}

/// Registers a new (uncommitted) type, remembering its constructor arguments, and writes
/// its handle to `newtype`.
///
/// # Safety
/// `newtype` is null or valid for one write.
unsafe fn make(
    newtype: *mut MPI_Datatype,
    f: impl FnOnce(&mut Ferrite) -> MpiResult<Made>,
) -> MpiResult<()> {
    if newtype.is_null() {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "null pointer passed for newtype",
        ));
    }
    let h = state::with(|st| {
        let m = f(st)?;
        let mut t = m.t;
        t.envelope = Some(Arc::new(Envelope {
            combiner: m.combiner,
            ints: m.args.ints,
            aints: m.args.aints,
            counts: m.args.counts,
            types: m.types,
        }));
        Ok(st.objects.datatypes.user.insert(Arc::new(t)))
    })?;
    // SAFETY: checked non-null above; the caller passes an MPI_Datatype*.
    unsafe { out(newtype, h) }
}

fn old(st: &mut Ferrite, h: MPI_Datatype) -> MpiResult<Arc<Datatype>> {
    st.objects.datatypes.lookup(h)
}

fn made(
    t: Datatype,
    combiner: c_int,
    args: Args,
    types: Vec<(MPI_Datatype, Arc<Datatype>)>,
) -> MpiResult<Made> {
    Ok(Made {
        t,
        combiner,
        args,
        types,
    })
}

/// Bounds and sizes beyond this are refused: the engine computes them in isize/usize and a
/// type this large could never be placed in memory anyway.
const LIMIT: i128 = (isize::MAX / 4) as i128;

/// Refuses blocks whose bounds or total size the engine could not represent: each block is
/// (byte displacement, number of copies of `old`).
fn check_fit(blocks: &[(i128, i128)], old: &Datatype) -> MpiResult<()> {
    let reach = (old.lb.unsigned_abs() + old.extent.unsigned_abs()) as i128
        + (old.true_lb.unsigned_abs() + old.true_extent.unsigned_abs()) as i128;
    let mut size: i128 = 0;
    // Empty blocks place nothing: their displacement does not matter (MPICH's indexed_misc
    // puts one at the largest MPI_Aint).
    for &(disp, n) in blocks.iter().filter(|b| b.1 != 0) {
        let far = disp.abs() + n * old.extent.unsigned_abs() as i128 + reach;
        size += n * old.size as i128;
        if far > LIMIT || size > LIMIT {
            return Err(crate::mpi_err!(
                MPI_ERR_VALUE_TOO_LARGE,
                "the new datatype's bounds or size (block of {n} elements at byte {disp}) do not fit in an MPI_Aint"
            ));
        }
    }
    Ok(())
}

/// MPI_Type_contiguous(_c).
///
/// # Safety
/// `newtype` is the caller's MPI_Datatype* output.
unsafe fn contiguous(
    form: Form,
    count: i64,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count, "count")?;
    // SAFETY: per this function's contract.
    unsafe {
        make(newtype, |st| {
            let o = old(st, oldtype)?;
            check_fit(&[(0, n as i128)], &o)?;
            let mut a = Args::default();
            a.count(form, &[count]);
            made(
                Datatype::hvector(1, n, 0, &o),
                MPI_COMBINER_CONTIGUOUS,
                a,
                vec![(oldtype, o)],
            )
        })
    }
}

/// MPI_Type_vector(_c) (`bytes` false: stride in elements) and MPI_Type_create_hvector(_c).
///
/// # Safety
/// `newtype` is the caller's MPI_Datatype* output.
unsafe fn vector(
    form: Form,
    bytes: bool,
    count: i64,
    blocklength: i64,
    stride: i64,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    let n = count_arg(count, "count")?;
    let b = count_arg(blocklength, "blocklength")?;
    // SAFETY: per this function's contract.
    unsafe {
        make(newtype, |st| {
            let o = old(st, oldtype)?;
            let step = i128::from(stride) * if bytes { 1 } else { o.extent as i128 };
            let last = (n as i128 - 1).max(0) * step;
            check_fit(&[(0, b as i128), (last, b as i128)], &o)?;
            check_fit(&[(0, n as i128 * b as i128)], &o)?;
            let t = Datatype::hvector(n, b, step as isize, &o);
            let mut a = Args::default();
            let combiner = if bytes {
                a.count(form, &[count, blocklength]);
                a.addr(form, &[stride]);
                MPI_COMBINER_HVECTOR
            } else {
                a.count(form, &[count, blocklength, stride]);
                MPI_COMBINER_VECTOR
            };
            made(t, combiner, a, vec![(oldtype, o)])
        })
    }
}

/// The block arguments of the indexed and struct constructors, widened to 64 bits.
struct Blocks {
    /// Block lengths: one per block, or one shared (the _block forms).
    lens: Vec<i64>,
    same_len: bool,
    disps: Vec<i64>,
    /// Displacements are in bytes (h- forms and struct) rather than in old extents.
    bytes: bool,
}

impl Blocks {
    fn len(&self, i: usize) -> i64 {
        if self.same_len {
            self.lens[0]
        } else {
            self.lens[i]
        }
    }

    /// (byte displacement, length) per block, checked against `old` (and for a struct,
    /// each block's own type).
    fn resolve(&self, olds: &[&Datatype]) -> MpiResult<Vec<(isize, usize)>> {
        let mut out = Vec::with_capacity(self.disps.len());
        for (i, &d) in self.disps.iter().enumerate() {
            let o = olds[i.min(olds.len() - 1)];
            let l = count_arg(self.len(i), "blocklength")?;
            let disp = i128::from(d) * if self.bytes { 1 } else { o.extent as i128 };
            check_fit(&[(disp, l as i128)], o)?;
            out.push((disp as isize, l));
        }
        let total: i128 = out
            .iter()
            .enumerate()
            .map(|(i, &(_, l))| l as i128 * olds[i.min(olds.len() - 1)].size as i128)
            .sum();
        if total > LIMIT {
            return Err(crate::mpi_err!(
                MPI_ERR_VALUE_TOO_LARGE,
                "the new datatype's size {total} does not fit in an MPI_Count"
            ));
        }
        Ok(out)
    }
}

/// MPI_Type_indexed, create_hindexed, create_indexed_block, create_hindexed_block (_c).
///
/// # Safety
/// `newtype` is the caller's MPI_Datatype* output.
unsafe fn indexed(
    form: Form,
    combiner: c_int,
    b: Blocks,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    // SAFETY: per this function's contract.
    unsafe {
        make(newtype, |st| {
            let o = old(st, oldtype)?;
            let blocks = b.resolve(&[&o])?;
            let mut a = Args::default();
            a.count(form, &[b.disps.len() as i64]);
            a.count(form, &b.lens);
            if b.bytes {
                a.addr(form, &b.disps);
            } else {
                a.count(form, &b.disps);
            }
            made(
                Datatype::hindexed(&blocks, &o),
                combiner,
                a,
                vec![(oldtype, o)],
            )
        })
    }
}

/// MPI_Type_create_struct(_c).
///
/// # Safety
/// `newtype` is the caller's MPI_Datatype* output.
unsafe fn structure(
    form: Form,
    b: Blocks,
    types: &[MPI_Datatype],
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    // SAFETY: per this function's contract.
    unsafe {
        make(newtype, |st| {
            let olds = types
                .iter()
                .map(|&t| old(st, t))
                .collect::<MpiResult<Vec<_>>>()?;
            let refs: Vec<&Datatype> = olds.iter().map(|t| &**t).collect();
            let blocks = if refs.is_empty() {
                vec![]
            } else {
                b.resolve(&refs)?
            };
            // The MPI-1 markers MPI_LB and MPI_UB set the bounds explicitly: as in MPICH,
            // the struct of the other blocks is built (and padded) first, then a marker
            // overrides its lower or upper bound.
            let (mut lb_mark, mut ub_mark) = (None::<isize>, None::<isize>);
            let mut parts = Vec::with_capacity(blocks.len());
            for ((&(d, l), t), &h) in blocks.iter().zip(&refs).zip(types) {
                match h {
                    MPI_LB if l > 0 => lb_mark = Some(lb_mark.map_or(d, |m| m.min(d))),
                    MPI_UB if l > 0 => ub_mark = Some(ub_mark.map_or(d, |m| m.max(d))),
                    MPI_LB | MPI_UB => {}
                    _ => parts.push((d, l, *t)),
                }
            }
            let mut t = Datatype::structure(&parts);
            if lb_mark.is_some() || ub_mark.is_some() {
                let lb = lb_mark.unwrap_or(t.lb);
                let ub = ub_mark.unwrap_or(t.lb + t.extent);
                t = Datatype::resized(&t, lb, ub - lb);
            }
            let mut a = Args::default();
            a.count(form, &[b.disps.len() as i64]);
            a.count(form, &b.lens);
            a.addr(form, &b.disps);
            made(
                t,
                MPI_COMBINER_STRUCT,
                a,
                types.iter().copied().zip(olds.iter().cloned()).collect(),
            )
        })
    }
}

/// Reads `n` values of a C array as i64.
///
/// # Safety
/// `p` holds `n` values.
unsafe fn arr<T: Copy + Into<i64>>(p: *const T, n: i64, what: &str) -> MpiResult<Vec<i64>> {
    if n < 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_COUNT,
            "negative count {n} for {what}"
        ));
    }
    if n == 0 {
        return Ok(vec![]);
    }
    if p.is_null() {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "null pointer passed for {what}"
        ));
    }
    // SAFETY: non-null, and per this function's contract `n` values are readable.
    let s = unsafe { std::slice::from_raw_parts(p, n as usize) };
    Ok(s.iter().map(|&x| x.into()).collect())
}

/// The block arguments of an indexed/struct constructor: `count` lengths (one when
/// `same_len`) and displacements, of either width.
///
/// # Safety
/// `lens` (unless `same_len`) and `disps` hold `count` entries.
unsafe fn blocks<L: Copy + Into<i64>, D: Copy + Into<i64>>(
    count: i64,
    lens: *const L,
    same_len: Option<i64>,
    disps: *const D,
    bytes: bool,
) -> MpiResult<Blocks> {
    // SAFETY: per this function's contract.
    unsafe {
        Ok(Blocks {
            lens: match same_len {
                Some(l) => vec![l],
                None => arr(lens, count, "array_of_blocklengths")?,
            },
            same_len: same_len.is_some(),
            disps: arr(disps, count, "array_of_displacements")?,
            bytes,
        })
    }
}

// The constructors' int and large-count (`_c`) forms (MPI 4.1 section 5.1) build the same
// 64-bit types; only the envelope records the `_c` forms' arguments as large counts.

mpi_fn! {
    fn MPI_Type_contiguous, fn MPI_Type_contiguous_c(count: Count, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe { contiguous(Form::of(LARGE), count.into(), oldtype, newtype) }
    }
}

mpi_fn! {
    fn MPI_Type_vector, fn MPI_Type_vector_c(count: Count, blocklength: Count, stride: Count,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe {
            vector(Form::of(LARGE), false, count.into(), blocklength.into(), stride.into(), oldtype,
                newtype)
        }
    }
}

mpi_fn! {
    // stride: MPI_Aint in the int form, MPI_Count in the _c form (the same type).
    fn MPI_Type_create_hvector, fn MPI_Type_create_hvector_c(count: Count, blocklength: Count,
        stride: MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe { vector(Form::of(LARGE), true, count.into(), blocklength.into(), stride, oldtype, newtype) }
    }
}

mpi_fn! {
    fn MPI_Type_indexed, fn MPI_Type_indexed_c(count: Count, array_of_blocklengths: *const Count,
        array_of_displacements: *const Count, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the arrays hold `count` entries; newtype is the caller's output.
        unsafe {
            let b = blocks(count.into(), array_of_blocklengths, None, array_of_displacements, false)?;
            indexed(Form::of(LARGE), MPI_COMBINER_INDEXED, b, oldtype, newtype)
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_hindexed, fn MPI_Type_create_hindexed_c(count: Count,
        array_of_blocklengths: *const Count, array_of_displacements: *const MPI_Aint,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the arrays hold `count` entries; newtype is the caller's output.
        unsafe {
            let b = blocks(count.into(), array_of_blocklengths, None, array_of_displacements, true)?;
            indexed(Form::of(LARGE), MPI_COMBINER_HINDEXED, b, oldtype, newtype)
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_indexed_block, fn MPI_Type_create_indexed_block_c(count: Count,
        blocklength: Count, array_of_displacements: *const Count, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the array holds `count` entries; newtype is the caller's output.
        unsafe {
            let b = blocks(count.into(), std::ptr::null::<Count>(), Some(blocklength.into()),
                array_of_displacements, false)?;
            indexed(Form::of(LARGE), MPI_COMBINER_INDEXED_BLOCK, b, oldtype, newtype)
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_hindexed_block, fn MPI_Type_create_hindexed_block_c(count: Count,
        blocklength: Count, array_of_displacements: *const MPI_Aint, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the array holds `count` entries; newtype is the caller's output.
        unsafe {
            let b = blocks(count.into(), std::ptr::null::<Count>(), Some(blocklength.into()),
                array_of_displacements, true)?;
            indexed(Form::of(LARGE), MPI_COMBINER_HINDEXED_BLOCK, b, oldtype, newtype)
        }
    }
}

mpi_fn! {
    fn MPI_Type_create_struct, fn MPI_Type_create_struct_c(count: Count,
        array_of_blocklengths: *const Count, array_of_displacements: *const MPI_Aint,
        array_of_types: *const MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the arrays hold `count` entries; newtype is the caller's output.
        unsafe {
            let b = blocks(count.into(), array_of_blocklengths, None, array_of_displacements, true)?;
            let n = c_int::try_from(count).map_err(|_| crate::mpi_err!(MPI_ERR_VALUE_TOO_LARGE,
                "struct of {count} blocks: more blocks than an int counts"))?;
            let types = slice(array_of_types, n, "array_of_types")?;
            structure(Form::of(LARGE), b, types, newtype)
        }
    }
}

/// MPI_Type_create_resized(_c).
///
/// # Safety
/// `newtype` is the caller's MPI_Datatype* output.
unsafe fn resized(
    form: Form,
    oldtype: MPI_Datatype,
    lb: i64,
    extent: i64,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    // SAFETY: per this function's contract.
    unsafe {
        make(newtype, |st| {
            let o = old(st, oldtype)?;
            if (lb as i128).abs() + (extent as i128).abs() > LIMIT {
                return Err(crate::mpi_err!(
                    MPI_ERR_VALUE_TOO_LARGE,
                    "lower bound {lb} and extent {extent} do not fit in an MPI_Aint"
                ));
            }
            let t = Datatype::resized(&o, lb as isize, extent as isize);
            let mut a = Args::default();
            a.addr(form, &[lb, extent]);
            made(t, MPI_COMBINER_RESIZED, a, vec![(oldtype, o)])
        })
    }
}

mpi_fn! {
    // lb, extent: MPI_Aint in the int form, MPI_Count in the _c form (the same type).
    fn MPI_Type_create_resized, fn MPI_Type_create_resized_c(oldtype: MPI_Datatype, lb: MPI_Aint,
        extent: MPI_Aint, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe { resized(Form::of(LARGE), oldtype, lb, extent, newtype) }
    }
}

/// Checks the array-shape arguments shared by subarray and darray.
fn order_c(order: c_int) -> MpiResult<bool> {
    match order {
        MPI_ORDER_C => Ok(true),
        MPI_ORDER_FORTRAN => Ok(false),
        _ => Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "invalid order {order} (MPI_ORDER_C or MPI_ORDER_FORTRAN)"
        )),
    }
}

/// Refuses an array of `sizes` elements of `old` whose extent the engine cannot represent.
fn check_array(sizes: &[i64], old: &Datatype) -> MpiResult<()> {
    let n = sizes.iter().try_fold(1i128, |acc, &s| {
        let v = acc * s as i128;
        (v <= LIMIT).then_some(v)
    });
    match n {
        Some(n) => check_fit(&[(0, n)], old),
        None => Err(crate::mpi_err!(
            MPI_ERR_VALUE_TOO_LARGE,
            "an array of sizes {sizes:?} does not fit in an MPI_Aint"
        )),
    }
}

/// MPI_Type_create_subarray(_c).
///
/// # Safety
/// `newtype` is the caller's MPI_Datatype* output.
unsafe fn subarray(
    form: Form,
    sizes: Vec<i64>,
    subs: Vec<i64>,
    starts: Vec<i64>,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    for d in 0..sizes.len() {
        if sizes[d] <= 0 || subs[d] <= 0 || starts[d] < 0 || starts[d] + subs[d] > sizes[d] {
            return Err(crate::mpi_err!(
                MPI_ERR_ARG,
                "dimension {d}: size {}, subsize {} and start {} do not describe a subarray",
                sizes[d],
                subs[d],
                starts[d]
            ));
        }
    }
    let c = order_c(order)?;
    let u = |v: &[i64]| v.iter().map(|&x| x as usize).collect::<Vec<_>>();
    // SAFETY: per this function's contract.
    unsafe {
        make(newtype, |st| {
            let o = old(st, oldtype)?;
            check_array(&sizes, &o)?;
            let t = Datatype::subarray(&u(&sizes), &u(&subs), &u(&starts), c, &o);
            let mut a = Args::default();
            a.int(&[sizes.len() as c_int]);
            a.count(form, &sizes);
            a.count(form, &subs);
            a.count(form, &starts);
            a.int(&[order]);
            made(t, MPI_COMBINER_SUBARRAY, a, vec![(oldtype, o)])
        })
    }
}

mpi_fn! {
    fn MPI_Type_create_subarray, fn MPI_Type_create_subarray_c(ndims: c_int,
        array_of_sizes: *const Count, array_of_subsizes: *const Count,
        array_of_starts: *const Count, order: c_int,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        if ndims <= 0 {
            return Err(crate::mpi_err!(MPI_ERR_DIMS, "ndims {ndims} must be positive"));
        }
        let n = ndims.into();
        // SAFETY: the arrays hold `ndims` entries each; newtype is the caller's output.
        unsafe {
            subarray(Form::of(LARGE), arr(array_of_sizes, n, "array_of_sizes")?,
                arr(array_of_subsizes, n, "array_of_subsizes")?,
                arr(array_of_starts, n, "array_of_starts")?, order, oldtype, newtype)
        }
    }
}

/// MPI_Type_create_darray(_c); `g` holds the global sizes.
///
/// # Safety
/// The int arrays hold `ndims` entries each; `newtype` is the caller's output.
#[allow(clippy::too_many_arguments)]
unsafe fn darray(
    form: Form,
    size: c_int,
    rank: c_int,
    ndims: c_int,
    g: Vec<i64>,
    array_of_distribs: *const c_int,
    array_of_dargs: *const c_int,
    array_of_psizes: *const c_int,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> MpiResult<()> {
    // SAFETY: the arrays hold `ndims` entries each.
    let (dist, darg, p) = unsafe {
        (
            slice(array_of_distribs, ndims, "array_of_distribs")?,
            slice(array_of_dargs, ndims, "array_of_dargs")?,
            slice(array_of_psizes, ndims, "array_of_psizes")?,
        )
    };
    let procs: i64 = p.iter().map(|&x| x as i64).product();
    if p.iter().any(|&x| x <= 0) || procs != size as i64 || g.iter().any(|&x| x <= 0) {
        return Err(crate::mpi_err!(MPI_ERR_ARG,
            "process grid {p:?} does not match size {size}, or a global size in {g:?} is not positive"));
    }
    if rank < 0 || rank >= size {
        return Err(crate::mpi_err!(
            MPI_ERR_RANK,
            "rank {rank} not in a grid of {size} processes"
        ));
    }
    let c = order_c(order)?;
    let gs: Vec<usize> = g.iter().map(|&x| x as usize).collect();
    let ps: Vec<usize> = p.iter().map(|&x| x as usize).collect();
    let distribs: Vec<(i32, i32)> = dist.iter().copied().zip(darg.iter().copied()).collect();
    // SAFETY: per this function's contract.
    unsafe {
        make(newtype, |st| {
            let o = old(st, oldtype)?;
            check_array(&g, &o)?;
            let t = Datatype::darray(rank as usize, &gs, &distribs, &ps, c, &o)?;
            let mut a = Args::default();
            a.int(&[size, rank, ndims]);
            a.count(form, &g);
            a.int(dist);
            a.int(darg);
            a.int(p);
            a.int(&[order]);
            made(t, MPI_COMBINER_DARRAY, a, vec![(oldtype, o)])
        })
    }
}

mpi_fn! {
    fn MPI_Type_create_darray, fn MPI_Type_create_darray_c(size: c_int, rank: c_int, ndims: c_int,
        array_of_gsizes: *const Count, array_of_distribs: *const c_int,
        array_of_dargs: *const c_int, array_of_psizes: *const c_int, order: c_int,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        if ndims <= 0 {
            return Err(crate::mpi_err!(MPI_ERR_DIMS, "ndims {ndims} must be positive"));
        }
        // SAFETY: the arrays hold `ndims` entries each; newtype is the caller's output.
        unsafe {
            let g = arr(array_of_gsizes, ndims.into(), "array_of_gsizes")?;
            darray(Form::of(LARGE), size, rank, ndims, g, array_of_distribs, array_of_dargs,
                array_of_psizes, order, oldtype, newtype)
        }
    }
}

mpi_fn! {
    fn MPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        let h = unsafe {
            make(newtype, |st| {
                let o = old(st, oldtype)?;
                // A duplicate keeps the committed state of the original.
                let mut t = (*o).clone();
                t.name = String::new();
                made(t, MPI_COMBINER_DUP, Args::default(), vec![(oldtype, o)])
            })
        };
        h?;
        // SAFETY: `make` wrote the new handle.
        let new = unsafe { *newtype };
        let copied = crate::objects::attr::copy_all(crate::objects::attr::Owner::Type, oldtype, new);
        if copied.is_err() {
            // A failed copy callback fails the dup: no new type, *newtype is
            // MPI_DATATYPE_NULL (MPI 4.1 7.7.2).
            let _ = crate::objects::attr::delete_all(crate::objects::attr::Owner::Type, new);
            state::with(|st| {
                st.objects.datatypes.user.remove(new);
                Ok(())
            })?;
            // SAFETY: as above.
            unsafe { out(newtype, MPI_DATATYPE_NULL)? };
        }
        copied
    }
}

mpi_fn! {
    fn MPI_Type_get_envelope(datatype: MPI_Datatype, num_integers: *mut c_int,
        num_addresses: *mut c_int, num_datatypes: *mut c_int, combiner: *mut c_int)
        on ErrObj::NoObject => {
        let env = envelope(datatype)?;
        let (ni, na, nd, c) = match &env {
            Some(e) if !e.counts.is_empty() => return Err(crate::mpi_err!(
                MPI_ERR_VALUE_TOO_LARGE,
                "datatype {:#x} was built by a large-count constructor: its {} large counts need MPI_Type_get_envelope_c",
                datatype as u32, e.counts.len())),
            Some(e) => (e.ints.len(), e.aints.len(), e.types.len(), e.combiner),
            None => (0, 0, 0, MPI_COMBINER_NAMED),
        };
        // SAFETY: the caller passes int* outputs.
        unsafe {
            out(num_integers, ni as c_int)?;
            out(num_addresses, na as c_int)?;
            out(num_datatypes, nd as c_int)?;
            out(combiner, c)
        }
    }
}

/// Writes a type's constructor arguments to the caller's arrays (capacities `max`: ints,
/// addresses, large counts, types; `counts` null for the int form).
///
/// # Safety
/// Each array holds at least its `max` entries.
unsafe fn contents(
    datatype: MPI_Datatype,
    max: [MPI_Count; 4],
    ints: *mut c_int,
    aints: *mut MPI_Aint,
    counts: *mut MPI_Count,
    types: *mut MPI_Datatype,
) -> MpiResult<()> {
    let hs = state::with(|st| {
        let t = st.objects.datatypes.lookup(datatype)?;
        let e = t.envelope.clone().ok_or_else(|| {
            MpiError::new(
                MPI_ERR_ARG,
                "MPI_Type_get_contents of a predefined datatype (combiner MPI_COMBINER_NAMED)",
            )
        })?;
        if counts.is_null() && !e.counts.is_empty() {
            return Err(crate::mpi_err!(MPI_ERR_VALUE_TOO_LARGE,
                "datatype {:#x} was built by a large-count constructor: its {} large counts need MPI_Type_get_contents_c",
                datatype as u32, e.counts.len()));
        }
        let have = [e.ints.len(), e.aints.len(), e.counts.len(), e.types.len()];
        if max
            .iter()
            .zip(&have)
            .any(|(&m, &h)| m < 0 || (m as u64) < h as u64)
        {
            return Err(crate::mpi_err!(MPI_ERR_ARG,
                "arrays too small: the envelope has {} integers, {} addresses, {} large counts, {} datatypes",
                have[0], have[1], have[2], have[3]));
        }
        // SAFETY: the caller's arrays hold at least as many entries as checked above.
        unsafe {
            for (i, v) in e.ints.iter().enumerate() {
                ints.add(i).write(*v);
            }
            for (i, v) in e.aints.iter().enumerate() {
                aints.add(i).write(*v as MPI_Aint);
            }
            for (i, v) in e.counts.iter().enumerate() {
                counts.add(i).write(*v);
            }
        }
        // Derived constituents come back as new handles the caller frees.
        let hs: Vec<MPI_Datatype> = e
            .types
            .iter()
            .map(|(h, t)| {
                if st.objects.datatypes.is_builtin(*h) && st.objects.datatypes.lookup(*h).is_ok() {
                    *h
                } else {
                    st.objects.datatypes.user.insert(t.clone())
                }
            })
            .collect();
        Ok(hs)
    })?;
    for (i, h) in hs.iter().enumerate() {
        // SAFETY: checked capacity above.
        unsafe { types.add(i).write(*h) };
    }
    Ok(())
}

mpi_fn! {
    fn MPI_Type_get_contents(datatype: MPI_Datatype, max_integers: c_int,
        max_addresses: c_int, max_datatypes: c_int, array_of_integers: *mut c_int,
        array_of_addresses: *mut MPI_Aint, array_of_datatypes: *mut MPI_Datatype)
        on ErrObj::NoObject => {
        let max = [max_integers.into(), max_addresses.into(), 0, max_datatypes.into()];
        // SAFETY: the caller's arrays hold the max_* entries it passes.
        unsafe {
            contents(datatype, max, array_of_integers, array_of_addresses, std::ptr::null_mut(),
                array_of_datatypes)
        }
    }
}

mpi_fn! {
    fn MPI_Type_set_name(datatype: MPI_Datatype, type_name: *const c_char) on ErrObj::NoObject => {
        if type_name.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for type_name"));
        }
        // SAFETY: non-null NUL-terminated string from the caller.
        let name = unsafe { std::ffi::CStr::from_ptr(type_name) }.to_string_lossy();
        let name: String = name.chars().take(MPI_MAX_OBJECT_NAME as usize - 1).collect();
        state::with(|st| {
            let dts = &mut st.objects.datatypes;
            let t = dts.lookup(datatype)?;
            let mut t = (*t).clone();
            t.name = name;
            dts.set(datatype, Arc::new(t));
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Type_get_name(datatype: MPI_Datatype, type_name: *mut c_char, resultlen: *mut c_int)
        on ErrObj::NoObject => {
        let name = if datatype == MPI_DATATYPE_NULL {
            "MPI_DATATYPE_NULL".to_string()
        } else {
            state::with(|st| Ok(st.objects.datatypes.lookup(datatype)?.name.clone()))?
        };
        let name = if name.is_empty() { builtin_name(datatype).unwrap_or("").to_string() } else { name };
        // SAFETY: the caller passes a buffer of MPI_MAX_OBJECT_NAME chars and an int*.
        unsafe { out_str(type_name, MPI_MAX_OBJECT_NAME, resultlen, &name) }
    }
}

mpi_fn! {
    fn MPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut MPI_Datatype)
        on ErrObj::NoObject => {
        let choices: &[MPI_Datatype] = match typeclass {
            MPI_TYPECLASS_INTEGER => &[MPI_INTEGER1, MPI_INTEGER2, MPI_INTEGER4, MPI_INTEGER8],
            MPI_TYPECLASS_REAL => &[MPI_REAL4, MPI_REAL8, MPI_REAL16],
            MPI_TYPECLASS_COMPLEX => &[MPI_COMPLEX8, MPI_COMPLEX16, MPI_COMPLEX32],
            _ => return Err(crate::mpi_err!(MPI_ERR_ARG, "invalid typeclass {typeclass}")),
        };
        let found = choices.iter().copied().find(|&h| (h as u32 >> 8) & 0xff == size as u32)
            .ok_or_else(|| crate::mpi_err!(MPI_ERR_ARG,
                "no predefined type of typeclass {typeclass} has size {size}"))?;
        // SAFETY: the caller passes an MPI_Datatype* output.
        unsafe { out(datatype, found) }
    }
}

mpi_fn! {
    fn MPI_Type_commit(datatype: *mut MPI_Datatype) on ErrObj::NoObject => {
        if datatype.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for datatype"));
        }
        // SAFETY: non-null; the caller passes an MPI_Datatype*.
        let h = unsafe { *datatype };
        state::with(|st| {
            let t = st.objects.datatypes.lookup(h)?;
            if !t.committed {
                let mut committed = (*t).clone();
                committed.committed = true;
                if let Some(slot) = st.objects.datatypes.user.get_mut(h) {
                    *slot = Arc::new(committed);
                }
            }
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Type_free(datatype: *mut MPI_Datatype) on ErrObj::NoObject => {
        if datatype.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for datatype"));
        }
        // SAFETY: non-null; the caller passes an MPI_Datatype*.
        let h = unsafe { *datatype };
        state::with(|st| {
            st.objects.datatypes.lookup(h)?;
            if st.objects.datatypes.is_builtin(h) {
                return Err(crate::mpi_err!(
                    MPI_ERR_TYPE,
                    "cannot free predefined datatype {:#x}",
                    h as u32
                ));
            }
            Ok(())
        })?;
        crate::objects::attr::delete_all(crate::objects::attr::Owner::Type, h)?;
        state::with(|st| {
            // Requests in flight hold their own Arc, so freeing here is safe.
            st.objects.datatypes.user.remove(h);
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { out(datatype, MPI_DATATYPE_NULL) }
    }
}

fn query<R>(h: MPI_Datatype, f: impl FnOnce(&Datatype) -> R) -> MpiResult<R> {
    state::with(|st| Ok(f(&*st.objects.datatypes.lookup(h)?)))
}

mpi_fn! {
    fn MPI_Type_size, fn MPI_Type_size_c, fn MPI_Type_size_x(datatype: MPI_Datatype, size: *mut Count)
        on ErrObj::NoObject => {
        let s = query(datatype, |t| t.size)?;
        let v = Count::try_from(s).unwrap_or(MPI_UNDEFINED.into());
        // SAFETY: the caller passes an int*/MPI_Count* output.
        unsafe { out(size, v) }
    }
}

mpi_fn! {
    // MPI_Aint* in the int form, MPI_Count* in the _c and _x forms (the same type).
    fn MPI_Type_get_extent, fn MPI_Type_get_extent_c, fn MPI_Type_get_extent_x(datatype: MPI_Datatype, lb: *mut MPI_Aint,
        extent: *mut MPI_Aint) on ErrObj::NoObject => {
        let (l, e) = query(datatype, |t| (t.lb, t.extent))?;
        // SAFETY: the caller passes MPI_Aint* outputs.
        unsafe { out(lb, l as MPI_Aint)?; out(extent, e as MPI_Aint) }
    }
}

mpi_fn! {
    // MPI_Aint* in the int form, MPI_Count* in the _c and _x forms (the same type).
    fn MPI_Type_get_true_extent, fn MPI_Type_get_true_extent_c, fn MPI_Type_get_true_extent_x(
        datatype: MPI_Datatype,
        true_lb: *mut MPI_Aint, true_extent: *mut MPI_Aint) on ErrObj::NoObject => {
        let (l, e) = query(datatype, |t| (t.true_lb, t.true_extent))?;
        // SAFETY: the caller passes MPI_Aint* outputs.
        unsafe { out(true_lb, l as MPI_Aint)?; out(true_extent, e as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_Get_address(location: *const std::ffi::c_void, address: *mut MPI_Aint)
        on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(address, location as MPI_Aint) }
    }
}

// MPI-1 names removed from the standard in MPI-3 that MPICH still exports.

mpi_fn! {
    fn MPI_Address(location: *mut std::ffi::c_void, address: *mut MPI_Aint) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(address, location as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_Type_extent(datatype: MPI_Datatype, extent: *mut MPI_Aint) on ErrObj::NoObject => {
        let e = query(datatype, |t| t.extent)?;
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(extent, e as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_Type_lb(datatype: MPI_Datatype, displacement: *mut MPI_Aint) on ErrObj::NoObject => {
        let l = query(datatype, |t| t.lb)?;
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(displacement, l as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_Type_ub(datatype: MPI_Datatype, displacement: *mut MPI_Aint) on ErrObj::NoObject => {
        let u = query(datatype, |t| t.lb + t.extent)?;
        // SAFETY: the caller passes an MPI_Aint* output.
        unsafe { out(displacement, u as MPI_Aint) }
    }
}

// The MPI-1 constructors run the same code as their MPI-2 names (not through the PMPI_
// entry points, which would run the error handler a second time).

mpi_fn! {
    fn MPI_Type_hvector(count: c_int, blocklength: c_int, stride: MPI_Aint,
        oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: newtype is the caller's MPI_Datatype* output.
        unsafe { vector(Form::Int, true, count.into(), blocklength.into(), stride, oldtype, newtype) }
    }
}

mpi_fn! {
    fn MPI_Type_hindexed(count: c_int, array_of_blocklengths: *mut c_int,
        array_of_displacements: *mut MPI_Aint, oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the arrays hold `count` entries; newtype is the caller's output.
        unsafe {
            let b = Blocks { lens: arr(array_of_blocklengths.cast_const(), count.into(), "array_of_blocklengths")?,
                same_len: false, disps: arr(array_of_displacements.cast_const(), count.into(), "array_of_displacements")?,
                bytes: true };
            indexed(Form::Int, MPI_COMBINER_HINDEXED, b, oldtype, newtype)
        }
    }
}

mpi_fn! {
    fn MPI_Type_struct(count: c_int, array_of_blocklengths: *mut c_int,
        array_of_displacements: *mut MPI_Aint, array_of_types: *mut MPI_Datatype,
        newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the arrays hold `count` entries; newtype is the caller's output.
        unsafe {
            let b = Blocks { lens: arr(array_of_blocklengths.cast_const(), count.into(), "array_of_blocklengths")?,
                same_len: false, disps: arr(array_of_displacements.cast_const(), count.into(), "array_of_displacements")?,
                bytes: true };
            let types = slice(array_of_types.cast_const(), count, "array_of_types")?;
            structure(Form::Int, b, types, newtype)
        }
    }
}

/// A type's envelope, None for a predefined type.
fn envelope(h: MPI_Datatype) -> MpiResult<Option<Arc<Envelope>>> {
    state::with(|st| Ok(st.objects.datatypes.lookup(h)?.envelope.clone()))
}

mpi_fn! {
    fn MPI_Type_get_envelope_c(datatype: MPI_Datatype, num_integers: *mut MPI_Count,
        num_addresses: *mut MPI_Count, num_large_counts: *mut MPI_Count,
        num_datatypes: *mut MPI_Count, combiner: *mut c_int) on ErrObj::NoObject => {
        let env = envelope(datatype)?;
        let (ni, na, nc, nd, c) = match &env {
            Some(e) => (e.ints.len(), e.aints.len(), e.counts.len(), e.types.len(), e.combiner),
            None => (0, 0, 0, 0, MPI_COMBINER_NAMED),
        };
        // SAFETY: the caller passes the outputs.
        unsafe {
            out(num_integers, ni as MPI_Count)?;
            out(num_addresses, na as MPI_Count)?;
            out(num_large_counts, nc as MPI_Count)?;
            out(num_datatypes, nd as MPI_Count)?;
            out(combiner, c)
        }
    }
}

mpi_fn! {
    fn MPI_Type_get_contents_c(datatype: MPI_Datatype, max_integers: MPI_Count,
        max_addresses: MPI_Count, max_large_counts: MPI_Count, max_datatypes: MPI_Count,
        array_of_integers: *mut c_int, array_of_addresses: *mut MPI_Aint,
        array_of_large_counts: *mut MPI_Count, array_of_datatypes: *mut MPI_Datatype)
        on ErrObj::NoObject => {
        // SAFETY: the caller's arrays hold the max_* entries it passes.
        unsafe {
            contents(datatype, [max_integers, max_addresses, max_large_counts, max_datatypes],
                array_of_integers, array_of_addresses, array_of_large_counts, array_of_datatypes)
        }
    }
}

/// The predefined Fortran type of `class` that has at least decimal precision `p` and
/// exponent range `r` (MPI_UNDEFINED: any), as gfortran's kinds.
fn f90_base(combiner: c_int, p: c_int, r: c_int) -> MpiResult<MPI_Datatype> {
    let ok = |v: c_int, max: c_int| v == MPI_UNDEFINED || (0..=max).contains(&v);
    let found = match combiner {
        MPI_COMBINER_F90_INTEGER => [
            (2, MPI_INTEGER1),
            (4, MPI_INTEGER2),
            (9, MPI_INTEGER4),
            (18, MPI_INTEGER8),
        ]
        .into_iter()
        .find(|&(max, _)| ok(r, max))
        .map(|x| x.1),
        _ => {
            let kinds = if combiner == MPI_COMBINER_F90_REAL {
                [
                    (6, 37, MPI_REAL4),
                    (15, 307, MPI_REAL8),
                    (33, 4931, MPI_REAL16),
                ]
            } else {
                [
                    (6, 37, MPI_COMPLEX8),
                    (15, 307, MPI_COMPLEX16),
                    (33, 4931, MPI_COMPLEX32),
                ]
            };
            kinds
                .into_iter()
                .find(|&(mp, mr, _)| ok(p, mp) && ok(r, mr))
                .map(|x| x.2)
        }
    };
    found.ok_or_else(|| {
        crate::mpi_err!(
            MPI_ERR_ARG,
            "no Fortran type has precision {p} and range {r}"
        )
    })
}

/// # Safety
/// `newtype` is the caller's MPI_Datatype* output.
unsafe fn f90(combiner: c_int, p: c_int, r: c_int, newtype: *mut MPI_Datatype) -> MpiResult<()> {
    let base = f90_base(combiner, p, r)?;
    let h = state::with(|st| st.objects.datatypes.f90(combiner, p, r, base))?;
    // SAFETY: per this function's contract.
    unsafe { out(newtype, h) }
}

mpi_fn! {
    fn MPI_Type_create_f90_real(p: c_int, r: c_int, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Datatype* output.
        unsafe { f90(MPI_COMBINER_F90_REAL, p, r, newtype) }
    }
}

mpi_fn! {
    fn MPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Datatype* output.
        unsafe { f90(MPI_COMBINER_F90_COMPLEX, p, r, newtype) }
    }
}

mpi_fn! {
    fn MPI_Type_create_f90_integer(r: c_int, newtype: *mut MPI_Datatype) on ErrObj::NoObject => {
        // SAFETY: the caller passes an MPI_Datatype* output.
        unsafe { f90(MPI_COMBINER_F90_INTEGER, MPI_UNDEFINED, r, newtype) }
    }
}

mpi_fn! {
    /// The predefined (value, index) pair type, or MPI_DATATYPE_NULL when there is none.
    fn MPI_Type_get_value_index(value_type: MPI_Datatype, index_type: MPI_Datatype,
        pair_type: *mut MPI_Datatype) on ErrObj::NoObject => {
        state::with(|st| { st.objects.datatypes.lookup(value_type)?; st.objects.datatypes.lookup(index_type).map(|_| ()) })?;
        let pairs = [
            (MPI_FLOAT, MPI_INT, MPI_FLOAT_INT), (MPI_DOUBLE, MPI_INT, MPI_DOUBLE_INT),
            (MPI_LONG, MPI_INT, MPI_LONG_INT), (MPI_SHORT, MPI_INT, MPI_SHORT_INT),
            (MPI_LONG_DOUBLE, MPI_INT, MPI_LONG_DOUBLE_INT), (MPI_INT, MPI_INT, MPI_2INT),
            (MPI_REAL, MPI_REAL, MPI_2REAL), (MPI_INTEGER, MPI_INTEGER, MPI_2INTEGER),
            (MPI_DOUBLE_PRECISION, MPI_DOUBLE_PRECISION, MPI_2DOUBLE_PRECISION),
        ];
        let h = pairs.iter().find(|p| p.0 == value_type && p.1 == index_type)
            .map_or(MPI_DATATYPE_NULL, |p| p.2);
        // SAFETY: the caller passes an MPI_Datatype* output.
        unsafe { out(pair_type, h) }
    }
}
