//! Datatypes: the layout of one element and how to pack/unpack `count` of them.
//!
//! A type's data is a short tree: a list of nodes in type-map order, each either a run of
//! bytes (all basic elements of one kind) or `count` repetitions of a shared sub-list at a
//! stride. A vector of 1,000,000 blocks is one `Repeat` node over one `Bytes` node; the
//! tree is walked (flattened lazily) on pack/unpack, never expanded. Constructors compute
//! bounds arithmetically, so building a type costs the size of its arguments, not of its
//! type map.
//!
//! The protocols use only `Datatypes::get` and `Datatype::{size, is_contiguous, true_lb,
//! pack, unpack, elements_in}`.

use super::handles::{kind, HandleTable};
use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use std::ops::ControlFlow;
use std::sync::Arc;

/// One kind of basic element: its size (MPI_Get_elements counts these), the unit its
/// bytes are reversed in for "external32" (half the size for complex numbers) and how
/// external32 writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Basic {
    pub size: u32,
    pub swap: u32,
    pub ext: Ext,
}

mod external32;
pub use external32::Ext;

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// `len` bytes at `disp`, made of basic elements of kind `basic`.
    Bytes {
        disp: isize,
        len: usize,
        basic: Basic,
    },
    /// `count` copies of `body`, copy k displaced by `disp + k * stride`.
    Repeat {
        disp: isize,
        count: usize,
        stride: isize,
        body: Arc<[Node]>,
        /// Data bytes of one copy of `body`.
        body_size: usize,
    },
}

impl Node {
    fn size(&self) -> usize {
        match self {
            Node::Bytes { len, .. } => *len,
            Node::Repeat {
                count, body_size, ..
            } => count * body_size,
        }
    }

    fn shifted(&self, by: isize) -> Node {
        let mut n = self.clone();
        match &mut n {
            Node::Bytes { disp, .. } | Node::Repeat { disp, .. } => *disp += by,
        }
        n
    }
}

/// Calls `f(offset, len, basic)` for every byte run of `nodes` placed at `base`, in type-map
/// order, until `f` breaks.
fn walk<F>(nodes: &[Node], base: isize, f: &mut F) -> ControlFlow<()>
where
    F: FnMut(isize, usize, Basic) -> ControlFlow<()>,
{
    for n in nodes {
        match n {
            Node::Bytes { disp, len, basic } => f(base + disp, *len, *basic)?,
            Node::Repeat {
                disp,
                count,
                stride,
                body,
                ..
            } => {
                for k in 0..*count as isize {
                    walk(body, base + disp + k * stride, f)?;
                }
            }
        }
    }
    ControlFlow::Continue(())
}

/// If `nodes` in order cover one gap-free byte range, that range as (start, len); a list
/// with no data is `Some((0, 0))`.
fn dense_run(nodes: &[Node]) -> Option<(isize, usize)> {
    let mut acc: Option<(isize, usize)> = None;
    for n in nodes {
        let (s, l) = match n {
            Node::Bytes { disp, len, .. } => (*disp, *len),
            Node::Repeat {
                disp,
                count,
                stride,
                body,
                body_size,
            } => {
                if *count == 0 || *body_size == 0 {
                    continue;
                }
                let (bs, bl) = dense_run(body)?;
                if *count > 1 && *stride != bl as isize {
                    return None;
                }
                (disp + bs, count * bl)
            }
        };
        if l == 0 {
            continue;
        }
        acc = match acc {
            None => Some((s, l)),
            Some((as_, al)) if as_ + al as isize == s => Some((as_, al + l)),
            Some(_) => return None,
        };
    }
    Some(acc.unwrap_or((0, 0)))
}

/// Appends `n` to a node list, merging it into a preceding adjacent run of the same kind.
fn push(list: &mut Vec<Node>, n: Node) {
    if let (
        Some(Node::Bytes {
            disp: pd,
            len: pl,
            basic: pb,
        }),
        Node::Bytes { disp, len, basic },
    ) = (list.last_mut(), &n)
    {
        if *pd + *pl as isize == *disp && pb == basic {
            *pl += len;
            return;
        }
    }
    if n.size() > 0 {
        list.push(n);
    }
}

/// Body lists up to this long are copied when placed once; longer ones are shared.
const INLINE_NODES: usize = 8;

/// Appends `count` copies of `body` (of `body_size` data bytes), copy k at
/// `disp + k * stride`, to `list` in the most compact form.
fn push_repeat(
    list: &mut Vec<Node>,
    disp: isize,
    count: usize,
    stride: isize,
    body: &Arc<[Node]>,
    body_size: usize,
) {
    if count == 0 || body_size == 0 {
        return;
    }
    if let [Node::Bytes {
        disp: d,
        len,
        basic,
    }] = &**body
    {
        if count == 1 || stride == *len as isize {
            return push(
                list,
                Node::Bytes {
                    disp: disp + d,
                    len: len * count,
                    basic: *basic,
                },
            );
        }
    }
    if count == 1 && body.len() <= INLINE_NODES {
        for n in body.iter() {
            push(list, n.shifted(disp));
        }
        return;
    }
    // A repeat of a single repeat with a dense body whose copies abut is one longer repeat.
    list.push(Node::Repeat {
        disp,
        count,
        stride,
        body: body.clone(),
        body_size,
    });
}

/// What a constructor was called with (MPI_Type_get_envelope/contents).
#[derive(Clone, Debug)]
pub struct Envelope {
    pub combiner: i32,
    pub ints: Vec<i32>,
    pub aints: Vec<isize>,
    /// Large counts: the MPI_Count arguments of the `_c` constructors.
    pub counts: Vec<i64>,
    /// Constituent types: the handle they were given as, and the object itself (kept alive
    /// even if the user frees the handle).
    pub types: Vec<(MPI_Datatype, Arc<Datatype>)>,
}

#[derive(Clone, Debug)]
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
    /// Basic elements in one element (MPI_Get_elements).
    pub elements: u64,
    /// Alignment in bytes of the most aligned basic element (as the C compiler aligns it
    /// in a struct): MPI_Type_create_struct pads the extent to a multiple of it.
    pub align: usize,
    /// The data of one element, displacements relative to the buffer.
    nodes: Arc<[Node]>,
    /// None for predefined types (combiner MPI_COMBINER_NAMED).
    pub envelope: Option<Arc<Envelope>>,
    pub name: String,
}

impl PartialEq for Datatype {
    fn eq(&self, o: &Self) -> bool {
        (
            self.size,
            self.lb,
            self.extent,
            self.true_lb,
            self.true_extent,
        ) == (o.size, o.lb, o.extent, o.true_lb, o.true_extent)
            && self.nodes == o.nodes
    }
}

/// Bounds and size of a piece of a type being built. `any` says whether it has bounds at
/// all: with a negative extent (MPI_Type_create_resized allows one) lb > ub is legitimate,
/// so the bounds themselves cannot mark "nothing yet".
#[derive(Clone, Copy, Debug)]
struct Span {
    any: bool,
    lb: isize,
    ub: isize,
    tlb: isize,
    tub: isize,
    size: usize,
    elements: u64,
}

impl Span {
    const EMPTY: Span = Span {
        any: false,
        lb: 0,
        ub: 0,
        tlb: isize::MAX,
        tub: isize::MIN,
        size: 0,
        elements: 0,
    };

    fn of(t: &Datatype) -> Span {
        Span {
            any: true,
            lb: t.lb,
            ub: t.lb + t.extent,
            tlb: t.true_lb,
            tub: t.true_lb + t.true_extent,
            size: t.size,
            elements: t.elements,
        }
    }

    /// `n` copies of self, copy k shifted by `disp + k * step`.
    fn repeat(self, disp: isize, n: usize, step: isize) -> Span {
        if n == 0 || !self.any {
            return Span::EMPTY;
        }
        let reach = (n as isize - 1) * step;
        let (lo, hi) = (reach.min(0), reach.max(0));
        let data = self.size > 0;
        Span {
            any: true,
            lb: disp + self.lb + lo,
            ub: disp + self.ub + hi,
            tlb: if data {
                disp + self.tlb + lo
            } else {
                isize::MAX
            },
            tub: if data {
                disp + self.tub + hi
            } else {
                isize::MIN
            },
            size: self.size * n,
            elements: self.elements * n as u64,
        }
    }

    fn union(self, o: Span) -> Span {
        if !self.any {
            return o;
        }
        if !o.any {
            return self;
        }
        Span {
            any: true,
            lb: self.lb.min(o.lb),
            ub: self.ub.max(o.ub),
            tlb: self.tlb.min(o.tlb),
            tub: self.tub.max(o.tub),
            size: self.size + o.size,
            elements: self.elements + o.elements,
        }
    }
}

impl Datatype {
    /// A predefined type of `size` bytes (one basic element).
    pub fn basic(size: usize) -> Self {
        Self::basic_of(Basic {
            size: size as u32,
            swap: size as u32,
            ext: Ext::Same,
        })
    }

    /// A predefined type of one basic element of kind `b`.
    pub fn basic_of(b: Basic) -> Self {
        let size = b.size as usize;
        Datatype {
            size,
            lb: 0,
            extent: size as isize,
            true_lb: 0,
            true_extent: size as isize,
            contiguous: true,
            committed: true,
            elements: u64::from(size > 0),
            // The unit a complex number swaps in is its component, the C alignment of the
            // type; no basic type on the C ABIs we serve is aligned beyond 16.
            align: (b.swap as usize).clamp(1, 16),
            nodes: if size > 0 {
                Arc::from(vec![Node::Bytes {
                    disp: 0,
                    len: size,
                    basic: b,
                }])
            } else {
                Arc::from(vec![])
            },
            envelope: None,
            name: String::new(),
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

    /// MPI_ERR_BUFFER for a null buffer holding `count` > 0 elements of data: the one null
    /// buffer that is legal is MPI_BOTTOM with a type of absolute addresses (data not at
    /// the type's origin).
    pub fn check_buffer(&self, buf: *const u8, count: u64) -> MpiResult<()> {
        if buf.is_null() && count > 0 && self.size > 0 && self.true_lb == 0 {
            return Err(crate::mpi_err!(
                MPI_ERR_BUFFER,
                "null buffer with count {count}"
            ));
        }
        Ok(())
    }

    /// Number of nodes of the internal representation (tests check it stays small).
    pub fn node_count(&self) -> usize {
        fn count(nodes: &[Node]) -> usize {
            nodes
                .iter()
                .map(|n| match n {
                    Node::Bytes { .. } => 1,
                    Node::Repeat { body, .. } => 1 + count(body),
                })
                .sum()
        }
        count(&self.nodes)
    }

    /// Basic elements in `bytes` of packed data of this type (MPI_Get_elements), or None
    /// (MPI_UNDEFINED) when the bytes end inside a basic element.
    pub fn elements_in(&self, bytes: u64) -> Option<u64> {
        if self.size == 0 {
            return Some(0);
        }
        let whole = bytes / self.size as u64;
        let mut rem = (bytes % self.size as u64) as usize;
        let mut n = whole * self.elements;
        let mut partial = false;
        let _ = walk(&self.nodes, 0, &mut |_, len, b| {
            if rem == 0 {
                return ControlFlow::Break(());
            }
            let take = len.min(rem);
            n += (take / b.size as usize) as u64;
            partial = take % b.size as usize != 0;
            rem -= take;
            ControlFlow::Continue(())
        });
        (!partial).then_some(n)
    }

    /// Bytes of packed data holding `n` basic elements (MPI_Status_set_elements): whole
    /// elements first, then the prefix of one more.
    pub fn bytes_for_elements(&self, n: u64) -> u64 {
        if self.elements == 0 {
            return 0;
        }
        let whole = n / self.elements;
        let mut rem = n % self.elements;
        let mut bytes = whole * self.size as u64;
        let _ = walk(&self.nodes, 0, &mut |_, len, b| {
            if rem == 0 {
                return ControlFlow::Break(());
            }
            let here = (len / b.size as usize) as u64;
            let take = here.min(rem);
            bytes += take * b.size as u64;
            rem -= take;
            ControlFlow::Continue(())
        });
        bytes
    }

    /// Calls `f(offset from buf, len, basic)` for each byte run of `count` elements.
    fn runs<F>(&self, count: usize, mut f: F)
    where
        F: FnMut(isize, usize, Basic) -> ControlFlow<()>,
    {
        for i in 0..count as isize {
            if walk(&self.nodes, i * self.extent, &mut f).is_break() {
                return;
            }
        }
    }

    /// The byte runs `(offset, len)` of `count` elements in type-map order, adjacent runs
    /// merged: how RMA describes a target layout to the process that owns the memory, and
    /// how MPI-IO lays a file view's filetype over the file.
    pub fn flatten(&self, count: usize) -> Vec<(isize, usize)> {
        if self.contiguous {
            let len = self.size * count;
            return if len == 0 {
                Vec::new()
            } else {
                vec![(self.true_lb, len)]
            };
        }
        let mut out: Vec<(isize, usize)> = Vec::new();
        self.runs(count, |off, len, _| {
            match out.last_mut() {
                Some(last) if last.0 + last.1 as isize == off => last.1 += len,
                _ if len > 0 => out.push((off, len)),
                _ => {}
            }
            ControlFlow::Continue(())
        });
        out
    }

    /// Appends the data of `count` elements at `buf` to `out`. `buf` may be MPI_BOTTOM (null)
    /// when the type holds absolute addresses.
    ///
    /// # Safety
    /// `buf` with this type's layout and `count` elements is readable memory.
    pub unsafe fn pack(&self, buf: *const u8, count: usize, out: &mut Vec<u8>) {
        if self.contiguous {
            let len = self.size * count;
            // SAFETY: per the contract the `len` bytes at buf + true_lb are readable.
            let src = unsafe { std::slice::from_raw_parts(buf.wrapping_offset(self.true_lb), len) };
            out.extend_from_slice(src);
            return;
        }
        out.reserve(self.size * count);
        self.runs(count, |off, len, _| {
            // SAFETY: each run lies inside the buffer described by the contract.
            let src = unsafe { std::slice::from_raw_parts(buf.wrapping_offset(off), len) };
            out.extend_from_slice(src);
            ControlFlow::Continue(())
        });
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
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    buf.wrapping_offset(self.true_lb),
                    total,
                )
            };
            return;
        }
        let mut done = 0usize;
        self.runs(count, |off, len, _| {
            if done >= total {
                return ControlFlow::Break(());
            }
            let n = len.min(total - done);
            // SAFETY: the run is writable per the contract; `n` <= its length.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr().add(done), buf.wrapping_offset(off), n)
            };
            done += n;
            ControlFlow::Continue(())
        });
    }

    /// The common core of the constructors: blocks of `n` copies of a type (stride its
    /// extent) at byte displacements, in order. Bounds follow MPI's rules.
    pub fn from_blocks(blocks: &[(isize, usize, &Datatype)]) -> Datatype {
        let mut nodes = Vec::new();
        let mut span = Span::EMPTY;
        for &(disp, n, old) in blocks {
            span = span.union(Span::of(old).repeat(disp, n, old.extent));
            push_repeat(&mut nodes, disp, n, old.extent, &old.nodes, old.size);
        }
        // As in MPICH, empty blocks do not count towards the alignment.
        let align = blocks.iter().filter(|b| b.1 > 0).map(|b| b.2.align).max();
        let align = align.unwrap_or(1);
        Self::finish(nodes, span, align)
    }

    fn finish(nodes: Vec<Node>, span: Span, align: usize) -> Datatype {
        let (lb, ub) = (span.lb, span.ub);
        let (tlb, tub) = if span.tlb > span.tub {
            (lb, lb)
        } else {
            (span.tlb, span.tub)
        };
        let extent = ub - lb;
        let contiguous = extent == span.size as isize
            && match dense_run(&nodes) {
                Some((start, len)) => len == span.size && (len == 0 || start == tlb),
                None => false,
            };
        Datatype {
            size: span.size,
            lb,
            extent,
            true_lb: tlb,
            true_extent: tub - tlb,
            contiguous,
            committed: false,
            elements: span.elements,
            align,
            nodes: Arc::from(nodes),
            envelope: None,
            name: String::new(),
        }
    }

    /// `count` blocks of `blocklen` elements of `old`, block i starting at byte `stride * i`.
    pub fn hvector(count: usize, blocklen: usize, stride: isize, old: &Datatype) -> Datatype {
        let block = Self::from_blocks(&[(0, blocklen, old)]);
        let mut nodes = Vec::new();
        push_repeat(&mut nodes, 0, count, stride, &block.nodes, block.size);
        let block_span = Span::of(old).repeat(0, blocklen, old.extent);
        Self::finish(nodes, block_span.repeat(0, count, stride), old.align)
    }

    /// Blocks of `old` at byte displacements: (displacement, block length in elements).
    pub fn hindexed(blocks: &[(isize, usize)], old: &Datatype) -> Datatype {
        let b: Vec<_> = blocks.iter().map(|&(d, n)| (d, n, old)).collect();
        Self::from_blocks(&b)
    }

    /// MPI_Type_create_struct: (displacement, block length, type) per block.
    ///
    /// Like a C struct, a struct of different types gets its extent padded to a multiple
    /// of its most aligned member's alignment, so that `count` > 1 of a type describing
    /// `struct { double d[3]; int i; }` steps by sizeof (32), not 28. As in MPICH (4.0's
    /// yaksa), a struct whose blocks are all of one type is an hindexed type and is not
    /// padded.
    pub fn structure(blocks: &[(isize, usize, &Datatype)]) -> Datatype {
        let mut t = Self::from_blocks(blocks);
        let one_type = blocks.windows(2).all(|w| std::ptr::eq(w[0].2, w[1].2));
        let rem = if t.extent > 0 {
            t.extent % t.align as isize
        } else {
            0
        };
        if !one_type && t.size > 0 && rem != 0 {
            t.extent += t.align as isize - rem;
            t.contiguous = false;
        }
        t
    }

    /// MPI_Type_create_resized: same data, new lower bound and extent.
    pub fn resized(old: &Datatype, lb: isize, extent: isize) -> Datatype {
        let mut t = old.clone();
        t.lb = lb;
        t.extent = extent;
        t.contiguous = old.contiguous && extent == old.size as isize && old.true_lb == lb;
        t.committed = false;
        t.envelope = None;
        t.name = String::new();
        t
    }

    /// MPI_Type_create_subarray. `order_c`: the last dimension varies fastest.
    pub fn subarray(
        sizes: &[usize],
        subsizes: &[usize],
        starts: &[usize],
        order_c: bool,
        old: &Datatype,
    ) -> Datatype {
        let runs: Vec<Runs> = subsizes
            .iter()
            .zip(starts)
            .map(|(&n, &s)| Runs {
                start: s,
                len: n,
                step: 0,
                count: 1,
                tail: 0,
            })
            .collect();
        Self::grid(sizes, &runs, order_c, old)
    }

    /// A type selecting, in each dimension d of an array of `sizes`, the index runs
    /// `runs[d]`. The result has lb 0 and the whole array as its extent.
    fn grid(sizes: &[usize], runs: &[Runs], order_c: bool, old: &Datatype) -> Datatype {
        let dims: Vec<usize> = if order_c {
            (0..sizes.len()).rev().collect()
        } else {
            (0..sizes.len()).collect()
        };
        // `t` covers the dimensions faster than d, with lb 0 and extent = stride of d.
        let mut t = Self::resized(old, 0, old.extent);
        let mut stride = old.extent;
        for d in dims {
            // `count` runs of `len` at `start + k * step`, then one of `tail` elements.
            let r = runs[d];
            let regular = Self::hvector(r.count, r.len, r.step as isize * stride, &t);
            let tail_at = r.start + r.count * r.step;
            let mut parts = vec![(r.start as isize * stride, 1, &regular)];
            if r.tail > 0 {
                parts.push((tail_at as isize * stride, r.tail, &t));
            }
            let picked = Self::from_blocks(&parts);
            let next = stride * sizes[d] as isize;
            t = Self::resized(&picked, 0, next);
            stride = next;
        }
        t
    }

    /// MPI_Type_create_darray: the part of a `gsizes` array that process `rank` of a
    /// `psizes` grid (row-major ranks) owns under each dimension's distribution.
    /// `distribs[d]` is (MPI_DISTRIBUTE_*, darg).
    pub fn darray(
        rank: usize,
        gsizes: &[usize],
        distribs: &[(i32, i32)],
        psizes: &[usize],
        order_c: bool,
        old: &Datatype,
    ) -> MpiResult<Datatype> {
        let nd = gsizes.len();
        let mut coords = vec![0usize; nd];
        let mut r = rank;
        for d in (0..nd).rev() {
            coords[d] = r % psizes[d];
            r /= psizes[d];
        }
        let mut runs = Vec::with_capacity(nd);
        for d in 0..nd {
            let (g, p, c) = (gsizes[d], psizes[d], coords[d]);
            let (dist, darg) = distribs[d];
            let mine = match dist {
                MPI_DISTRIBUTE_NONE => Runs::one(0, g),
                MPI_DISTRIBUTE_BLOCK => {
                    let b = if darg == MPI_DISTRIBUTE_DFLT_DARG {
                        g.div_ceil(p)
                    } else {
                        darg as usize
                    };
                    if b * p < g {
                        return Err(crate::mpi_err!(
                            MPI_ERR_ARG,
                            "block size {b} too small for {g} elements on {p} processes in dimension {d}"
                        ));
                    }
                    let s = (c * b).min(g);
                    Runs::one(s, b.min(g - s))
                }
                MPI_DISTRIBUTE_CYCLIC => {
                    let b = if darg == MPI_DISTRIBUTE_DFLT_DARG {
                        1
                    } else {
                        darg as usize
                    };
                    // Blocks of b at c*b + k*b*p while they fit whole, then a partial one:
                    // a regular pattern, kept as one vector however long the dimension.
                    let (start, step) = (c * b, b * p);
                    let whole = if start + b <= g {
                        (g - start - b) / step + 1
                    } else {
                        0
                    };
                    let next = start + whole * step;
                    Runs {
                        start,
                        len: b,
                        step,
                        count: whole,
                        tail: g.saturating_sub(next).min(b),
                    }
                }
                _ => {
                    return Err(crate::mpi_err!(
                        MPI_ERR_ARG,
                        "invalid distribution {dist} in dimension {d}"
                    ))
                }
            };
            runs.push(mine);
        }
        Ok(Self::grid(gsizes, &runs, order_c, old))
    }
}

/// The indices a dimension of a subarray or darray selects: `count` runs of `len` starting
/// at `start + k * step`, then a run of `tail` right after the last step.
#[derive(Clone, Copy, Debug)]
struct Runs {
    start: usize,
    len: usize,
    step: usize,
    count: usize,
    tail: usize,
}

impl Runs {
    fn one(start: usize, len: usize) -> Runs {
        Runs {
            start,
            len,
            step: 0,
            count: usize::from(len > 0),
            tail: 0,
        }
    }
}

/// The MPICH pair types (MPI_FLOAT_INT ...) are direct handles at the start of the datatype
/// table; user types get indices from here on so they never collide.
const RESERVED_DIRECT: u32 = 8;

pub struct Datatypes {
    pub user: HandleTable<Arc<Datatype>>,
    f90: std::collections::HashMap<(i32, i32, i32), MPI_Datatype>,
    builtin: Vec<Option<Arc<Datatype>>>,
    pairs: Vec<Arc<Datatype>>,
}

impl Default for Datatypes {
    fn default() -> Self {
        Self::new()
    }
}

/// A value type followed by an int, laid out as the C struct `{ T v; int i; }`.
fn pair(value: usize, align: usize, ext: Ext) -> Datatype {
    let int = Datatype::basic(4);
    let v = Datatype::basic_of(Basic {
        size: value as u32,
        swap: value as u32,
        ext,
    });
    let int_at = value.next_multiple_of(4) as isize;
    let t = Datatype::from_blocks(&[(0, 1, &v), (int_at, 1, &int)]);
    let end = (int_at + 4) as usize;
    let mut t = Datatype::resized(&t, 0, end.next_multiple_of(align) as isize);
    t.committed = true;
    t
}

/// The kind of basic element of a predefined type from its MPICH handle: complex numbers
/// swap per component; MPI_2INT and the Fortran pairs are two elements each.
fn builtin_basic(h: u32) -> Basic {
    let size = (h >> 8) & 0xff;
    let ext = match h & 0xff {
        0x07 => Ext::Long,
        0x08 => Ext::ULong,
        0x0e => Ext::Wchar,
        // LONG_DOUBLE, CXX_LONG_DOUBLE_COMPLEX, C_LONG_DOUBLE_COMPLEX
        0x0c | 0x36 | 0x42 => external32::LONG_DOUBLE,
        _ => Ext::Same,
    };
    match h & 0xff {
        // COMPLEX, DOUBLE_COMPLEX, COMPLEX8/16/32, CXX_*_COMPLEX, C_*_COMPLEX
        0x1e | 0x22 | 0x28 | 0x2a | 0x2c | 0x34 | 0x35 | 0x36 | 0x40 | 0x41 | 0x42 => Basic {
            size,
            swap: size / 2,
            ext,
        },
        // 2INT, 2INTEGER, 2REAL, 2DOUBLE_PRECISION
        0x16 | 0x20 | 0x21 | 0x23 => Basic {
            size: size / 2,
            swap: size / 2,
            ext,
        },
        _ => Basic {
            size,
            swap: size,
            ext,
        },
    }
}

/// Name of a predefined datatype.
pub fn builtin_name(h: MPI_Datatype) -> Option<&'static str> {
    super::datatype_names::NAMES
        .iter()
        .find(|(v, _)| *v == h as u32)
        .map(|(_, n)| *n)
}

impl Datatypes {
    pub fn new() -> Self {
        Datatypes {
            user: HandleTable::with_reserved(kind::DATATYPE, RESERVED_DIRECT),
            f90: std::collections::HashMap::new(),
            builtin: vec![None; 256],
            // In handle order: FLOAT_INT, DOUBLE_INT, LONG_INT, SHORT_INT, LONG_DOUBLE_INT.
            pairs: vec![
                Arc::new(pair(4, 4, Ext::Same)),
                Arc::new(pair(8, 8, Ext::Same)),
                Arc::new(pair(8, 8, Ext::Long)),
                Arc::new(pair(2, 4, Ext::Same)),
                Arc::new(pair(16, 16, external32::LONG_DOUBLE)),
            ],
        }
    }

    /// Resolves a handle, builtin or user-made (committed or not).
    pub fn lookup(&mut self, h: MPI_Datatype) -> MpiResult<Arc<Datatype>> {
        let u = h as u32;
        // MPICH builtins: 0x4c00SSII, SS = size in bytes, II = index (MPI_LB/UB have size 0).
        if u & 0xffff_0000 == 0x4c00_0000 && (builtin_name(h).is_some() || (u >> 8) & 0xff != 0) {
            let slot = &mut self.builtin[(u & 0xff) as usize];
            return Ok(slot
                .get_or_insert_with(|| {
                    let b = builtin_basic(u);
                    let size = ((u >> 8) & 0xff) as usize;
                    let mut t = if b.size as usize == size {
                        Datatype::basic_of(b)
                    } else {
                        let mut t = Datatype::from_blocks(&[(0, 2, &Datatype::basic_of(b))]);
                        t.committed = true;
                        t
                    };
                    t.name = match builtin_name(h) {
                        Some(n) => n.into(),
                        // A predefined type our mpi.h does not name (a newer MPICH's).
                        None => format!("MPI datatype {u:#x}"),
                    };
                    Arc::new(t)
                })
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

    /// The size of a predefined contiguous type already resolved once, without taking a
    /// reference (RMA's fast path); None: resolve it with [`Datatypes::get`].
    pub fn builtin_size(&self, h: MPI_Datatype) -> Option<usize> {
        let u = h as u32;
        if u & 0xffff_0000 != 0x4c00_0000 {
            return None;
        }
        let t = self.builtin[(u & 0xff) as usize].as_ref()?;
        (t.committed && t.contiguous).then_some(t.size)
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

    /// Replaces the object behind a handle (MPI_Type_set_name, MPI_Type_commit).
    pub fn set(&mut self, h: MPI_Datatype, t: Arc<Datatype>) {
        let u = h as u32;
        if let Some(slot) = self.user.get_mut(h) {
            *slot = t;
        } else if (MPI_FLOAT_INT as u32..MPI_FLOAT_INT as u32 + self.pairs.len() as u32)
            .contains(&u)
        {
            self.pairs[(u - MPI_FLOAT_INT as u32) as usize] = t;
        } else if u & 0xffff_0000 == 0x4c00_0000 {
            self.builtin[(u & 0xff) as usize] = Some(t);
        }
    }

    /// True for predefined types (which cannot be freed or committed away), including the
    /// parameterized Fortran types of MPI_Type_create_f90_*.
    pub fn is_builtin(&self, h: MPI_Datatype) -> bool {
        !self.user.owns(h)
            || (h as u32 & 0x03ff_ffff) < RESERVED_DIRECT
            || self.f90.values().any(|&v| v == h)
    }

    /// The handle of the parameterized type (combiner, p, r) of MPI_Type_create_f90_*: one
    /// per set of parameters, made from `base` on first use, never freed.
    pub fn f90(
        &mut self,
        combiner: i32,
        p: i32,
        r: i32,
        base: MPI_Datatype,
    ) -> MpiResult<MPI_Datatype> {
        if let Some(&h) = self.f90.get(&(combiner, p, r)) {
            return Ok(h);
        }
        let b = self.lookup(base)?;
        let mut t = (*b).clone();
        let ints = if combiner == MPI_COMBINER_F90_INTEGER {
            vec![r]
        } else {
            vec![p, r]
        };
        t.envelope = Some(Arc::new(Envelope {
            combiner,
            ints,
            aints: vec![],
            counts: vec![],
            types: vec![],
        }));
        t.committed = true;
        let h = self.user.insert(Arc::new(t));
        self.f90.insert((combiner, p, r), h);
        Ok(h)
    }
}

#[cfg(test)]
mod tests;
