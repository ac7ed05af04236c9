//! MPI collectives as plans: argument checks, the choice of algorithm (by size, or forced by
//! `FERRITE_COLL_<NAME>_ALGO`), and where user data enters and leaves the schedule.
//!
//! Counts are per the C API; buffers are raw user pointers. MPI_IN_PLACE is handled by
//! taking the input from the receive buffer: inputs are packed when a schedule starts, so a
//! schedule never reads a user buffer it also writes.

use super::algo;
use super::hier;
use super::reduce::Reducer;
use super::sched::{sl, Plan, Slice, UserBuf};
use super::shm;
use super::Mode;
use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::objects::datatype::Datatype;
use crate::runtime::config;
use crate::state::Ferrite;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub fn in_place(p: *const c_void) -> bool {
    p as usize == MPI_IN_PLACE
}

/// MPI_ERR_BUFFER when the send and receive buffers are the same memory without
/// MPI_IN_PLACE: MPI forbids aliased arguments (MPI 4.1 2.3), the schedule would read what
/// it writes, and MPICH reports it the same way. `elems`: elements this rank sends to
/// itself; with none, nothing is read and written both (empty buffers of a language binding
/// may share one address: mpi4py's zero-length arrays do).
fn not_aliased(sb: *const c_void, rb: *const c_void, elems: i64) -> MpiResult<()> {
    if elems != 0 && !sb.is_null() && sb == rb && !in_place(sb) {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            "the send and receive buffers are the same (use MPI_IN_PLACE)",
        ));
    }
    Ok(())
}

/// Where this rank's own block of a gathered (scattered) buffer starts: sending from there
/// is the in-place case without MPI_IN_PLACE, which MPICH reports as aliasing (and so must
/// every rank, or the others wait for one that returned an error). Null when unknown (the
/// datatype's errors are reported later).
#[allow(clippy::too_many_arguments)]
fn own_block(
    st: &mut Ferrite,
    base: *const c_void,
    c: i64,
    dt: MPI_Datatype,
    me: usize,
    n: usize,
    displs: Option<Arr>,
) -> MpiResult<*const c_void> {
    let size = match st.objects.datatypes.get(dt) {
        Ok(d) if !base.is_null() && !in_place(base) => d.size() as i64,
        _ => return Ok(std::ptr::null()),
    };
    let off = match displs {
        None => me as i64 * c,
        // SAFETY: the caller's displacement array has one entry per rank (read checks null).
        Some(d) => unsafe { d.read(n, "displs") }?[me],
    };
    Ok(base.wrapping_byte_offset((off * size) as isize))
}

/// A user buffer with its datatype.
#[derive(Clone)]
pub struct Buf {
    pub ptr: *mut u8,
    pub dt: Arc<Datatype>,
}

impl Buf {
    /// `count` elements starting `index` elements of `stride` elements each into the buffer.
    fn at(&self, elems: usize) -> usize {
        self.ptr.wrapping_offset(elems as isize * self.dt.extent) as usize
    }
    pub(super) fn user(&self, slice: Slice, elems_off: usize, count: usize) -> UserBuf {
        UserBuf {
            slice,
            ptr: self.at(elems_off),
            count,
            dt: self.dt.clone(),
        }
    }
    /// At a byte displacement (Alltoallw).
    pub(super) fn user_bytes(&self, slice: Slice, disp: isize, count: usize) -> UserBuf {
        UserBuf {
            slice,
            ptr: self.ptr.wrapping_offset(disp) as usize,
            count,
            dt: self.dt.clone(),
        }
    }
}

/// Rank and size of `comm`.
fn me_n(st: &Ferrite, comm: MPI_Comm) -> MpiResult<(usize, usize)> {
    let c = st.objects.comms.get(comm)?;
    if c.inter.is_some() {
        return Err(MpiError::new(
            MPI_ERR_COMM,
            "Scan, Exscan and neighborhood collectives are not defined on intercommunicators",
        ));
    }
    Ok((c.rank as usize, c.size() as usize))
}

/// A C array of counts or displacements: `int` (classic calls), `MPI_Count` or `MPI_Aint`
/// (the large-count `_c` calls).
#[derive(Clone, Copy)]
pub enum Arr {
    Int(*const c_int),
    /// MPI_Count or MPI_Aint (the same type).
    Count(*const MPI_Count),
}

impl From<*const c_int> for Arr {
    fn from(p: *const c_int) -> Arr {
        Arr::Int(p)
    }
}

impl From<*const MPI_Count> for Arr {
    fn from(p: *const MPI_Count) -> Arr {
        Arr::Count(p)
    }
}

impl Arr {
    /// The first `n` entries.
    ///
    /// # Safety
    /// The array has `n` entries (checked for null).
    pub unsafe fn read(self, n: usize, what: &str) -> MpiResult<Vec<i64>> {
        fn get<T: Copy + Into<i64>>(p: *const T, n: usize, what: &str) -> MpiResult<Vec<i64>> {
            if p.is_null() {
                return Err(crate::mpi_err!(MPI_ERR_ARG, "null array of {what}"));
            }
            // SAFETY: per the contract, n entries.
            Ok(unsafe { std::slice::from_raw_parts(p, n) }
                .iter()
                .map(|&x| x.into())
                .collect())
        }
        match self {
            Arr::Int(p) => get(p, n, what),
            Arr::Count(p) => get(p, n, what),
        }
    }
}

pub(super) fn count(c: i64) -> MpiResult<usize> {
    if c < 0 {
        return Err(crate::mpi_err!(MPI_ERR_COUNT, "negative count {c}"));
    }
    Ok(c as usize)
}

fn root(r: c_int, n: usize) -> MpiResult<usize> {
    if r < 0 || r as usize >= n {
        return Err(crate::mpi_err!(
            MPI_ERR_ROOT,
            "invalid root {r} in a communicator of size {n}"
        ));
    }
    Ok(r as usize)
}

pub(super) fn buf(st: &mut Ferrite, p: *const c_void, dt: MPI_Datatype) -> MpiResult<Buf> {
    Ok(Buf {
        ptr: p as *mut u8,
        dt: st.comm_datatype(dt)?,
    })
}

/// The FERRITE_COLL_* knobs read so far: each is read from the environment at its first use
/// and kept (getenv at every call was a quarter of a small collective's instructions).
/// [`reload_knobs`] (FERRITE_Coll_reload_knobs) forgets them, for programs that change the
/// environment between collectives.
static KNOB_CACHE: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());

/// The value of knob `name` (cached, see [`KNOB_CACHE`]; `read` reads it the first time),
/// given to `f`.
fn knob<T>(name: &'static str, read: fn(&str) -> String, f: impl FnOnce(&str) -> T) -> T {
    let mut c = KNOB_CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, v)) = c.iter().find(|(k, _)| *k == name) {
        return f(v);
    }
    let v = read(name);
    let out = f(&v);
    c.push((name, v));
    out
}

/// Bumped by [`reload_knobs`]: plans cached under an older generation are not reused.
static KNOB_GEN: AtomicU64 = AtomicU64::new(0);

/// Makes the next collectives read the FERRITE_COLL_* knobs from the environment again.
pub fn reload_knobs() {
    KNOB_CACHE.lock().unwrap_or_else(|e| e.into_inner()).clear();
    KNOB_GEN.fetch_add(1, Ordering::Relaxed);
}

/// The knobs' generation (part of a cached plan's key).
pub fn knobs_generation() -> u64 {
    KNOB_GEN.load(Ordering::Relaxed)
}

/// Each collective's algorithm knob and what it accepts (MPI_T lists these as the knobs'
/// enumerations, tool/cvars.rs).
pub const ALGORITHMS: &[(&str, &[&str])] = &[
    (
        "FERRITE_COLL_BARRIER_ALGO",
        &[
            "auto",
            "dissemination",
            "shm",
            "shm_flat",
            "shm_release",
            "shm_last",
            "hier",
        ],
    ),
    (
        "FERRITE_COLL_BCAST_ALGO",
        &["auto", "binomial", "scatter_allgather", "shm", "hier"],
    ),
    (
        "FERRITE_COLL_ALLREDUCE_ALGO",
        &["auto", "recursive_doubling", "rabenseifner", "shm", "hier"],
    ),
    (
        "FERRITE_COLL_REDUCE_ALGO",
        &["auto", "binomial", "rabenseifner", "shm", "hier"],
    ),
    ("FERRITE_COLL_GATHER_ALGO", &["auto", "binomial", "shm"]),
    ("FERRITE_COLL_SCATTER_ALGO", &["auto", "binomial", "shm"]),
    (
        "FERRITE_COLL_ALLGATHER_ALGO",
        &["auto", "bruck", "ring", "shm", "hier"],
    ),
    (
        "FERRITE_COLL_ALLTOALL_ALGO",
        &["auto", "bruck", "pairwise", "shm"],
    ),
    ("FERRITE_COLL_ALLTOALLV_ALGO", &["auto", "pairwise"]),
];

/// The algorithm forced by `FERRITE_COLL_<NAME>_ALGO`, or `auto`.
fn forced(knob_name: &'static str) -> MpiResult<&'static str> {
    let valid = ALGORITHMS
        .iter()
        .find(|(k, _)| *k == knob_name)
        .map_or(&[][..], |(_, a)| *a);
    knob(knob_name, config::get::<String>, |v| {
        if let Some(a) = valid.iter().find(|a| **a == v) {
            return Ok(*a);
        }
        Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "{knob_name}={v} is not an algorithm of this collective (valid: {})",
            valid.join(", ")
        ))
    })
}

/// A size threshold knob (`FERRITE_COLL_<NAME>_LARGE`), cached like the algorithms.
fn large(knob_name: &'static str) -> usize {
    // Read as a number (config::get reports an invalid value once and uses the default),
    // so the cached text always parses.
    knob(
        knob_name,
        |k| config::get::<usize>(k).to_string(),
        |v| v.parse().unwrap_or(usize::MAX),
    )
}

/// FERRITE_COLL_SHM_MAX: bytes per contribution up to which blocking collectives run in
/// shared memory (coll/shm.rs; also the size of its slots); 0: never.
pub fn shm_max() -> usize {
    large("FERRITE_COLL_SHM_MAX")
}

/// Whether a blocking collective with algorithm choice `algo` (`auto`, `shm` or another
/// forced one) and `len` bytes per contribution runs in shared memory on `comm`. Every
/// member decides the same (same knobs, sizes and communicator).
fn use_shm(st: &mut Ferrite, comm: MPI_Comm, mode: Mode, algo: &str, len: usize) -> bool {
    mode == Mode::Blocking
        && matches!(algo, "auto" | "shm")
        && (1..=shm_max()).contains(&len.max(1))
        && st.shm_coll_possible(comm)
}

/// The shared-memory Barrier form FERRITE_COLL_BARRIER_ALGO asks for (shm_flat,
/// shm_release, shm_last), or None (pick by ranks per CPU). An invalid value is reported by
/// the Barrier that reads it.
pub fn barrier_form() -> Option<&'static str> {
    forced("FERRITE_COLL_BARRIER_ALGO")
        .ok()
        .filter(|a| a.starts_with("shm_"))
}

/// FERRITE_COLL_HIER_MAX: bytes (Allgather: received in all) up to which auto runs
/// blocking collectives in two levels (coll/hier.rs); 0: only when forced.
pub fn hier_max() -> usize {
    large("FERRITE_COLL_HIER_MAX")
}

/// Which collective asks [`use_hier`] (auto weighs them differently).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hier {
    Barrier,
    Bcast,
    /// Reduce, Allreduce, Allgather.
    Gathering,
}

/// Whether a blocking collective with algorithm choice `algo` and `len` bytes runs in two
/// levels on `comm`: forced by `hier`, or auto up to FERRITE_COLL_HIER_MAX where it measured
/// faster across two network namespaces (docs/performance.md, "Two levels"): reductions
/// and Allgather with 3 ranks or more per host on average (at 2, the extra step cost more
/// than the inter-host messages it saved), Bcast from FERRITE_COLL_BCAST_LARGE bytes (below,
/// a flat tree's root returns after its sends), Barrier never. Empty messages other than
/// Barrier's stay flat. Every member decides the same.
fn use_hier(
    st: &mut Ferrite,
    comm: MPI_Comm,
    mode: Mode,
    algo: &str,
    len: usize,
    kind: Hier,
) -> bool {
    if mode != Mode::Blocking
        || (len == 0 && kind != Hier::Barrier)
        || !matches!(algo, "auto" | "hier")
    {
        return false;
    }
    let Some((hosts, n)) = st.hier_shape(comm) else {
        return false;
    };
    algo == "hier"
        || (len <= hier_max()
            && match kind {
                Hier::Barrier => false,
                Hier::Bcast => len >= large("FERRITE_COLL_BCAST_LARGE"),
                Hier::Gathering => n >= 3 * hosts,
            })
}

pub fn barrier(st: &mut Ferrite, comm: MPI_Comm, mode: Mode) -> MpiResult<Plan> {
    // Intercommunicator: every process of both groups takes part, so a barrier over the
    // union of the groups (the hidden intracommunicator) is exactly the intercomm barrier.
    let union = st
        .objects
        .comms
        .get(comm)?
        .inter
        .as_ref()
        .map(|i| i.union_comm);
    let on = union.unwrap_or(comm);
    let (me, n) = me_n(st, on)?;
    // (The shm forms are fixed per communicator when its segment is made: barrier_form.)
    let algo = match forced("FERRITE_COLL_BARRIER_ALGO")? {
        a if a.starts_with("shm") => "shm",
        a => a,
    };
    let mut p = Plan {
        comm: union,
        ..Plan::default()
    };
    if union.is_none() && use_shm(st, comm, mode, algo, 0) {
        p.shm = Some(shm::Call {
            op: shm::Op::Barrier,
            len: 0,
        });
    }
    if union.is_none() && use_hier(st, comm, mode, algo, 0, Hier::Barrier) {
        p.hier = Some(hier::Call::Barrier);
    }
    algo::barrier(&mut p, me, n);
    Ok(p)
}

pub fn bcast(
    st: &mut Ferrite,
    comm: MPI_Comm,
    b: *mut c_void,
    c: i64,
    dt: MPI_Datatype,
    r: c_int,
    mode: Mode,
) -> MpiResult<Plan> {
    if let Some(ic) = super::inter::of(st, comm)? {
        return super::inter::bcast(st, &ic, b, c, dt, r);
    }
    let (me, n) = me_n(st, comm)?;
    let (c, r) = (count(c)?, root(r, n)?);
    let b = buf(st, b, dt)?;
    let len = c * b.dt.size();
    let mut p = Plan::default();
    // A contiguous buffer is sent from and received into in place (the input and output
    // below are then found in place and copy nothing).
    let data = if b.dt.is_contiguous() && len > 0 {
        sl(
            p.user_buf(b.ptr.wrapping_offset(b.dt.true_lb()) as usize, len),
            0,
            len,
        )
    } else {
        sl(p.buf(len), 0, len)
    };
    if me == r {
        p.inputs.push(b.user(data, 0, c));
    } else {
        p.outputs.push(b.user(data, 0, c));
    }
    let algo = forced("FERRITE_COLL_BCAST_ALGO")?;
    if use_shm(st, comm, mode, algo, len) {
        p.shm = Some(shm::Call {
            op: shm::Op::Bcast {
                root: r,
                buf: mem(&b, 0, c),
            },
            len,
        });
    }
    if use_hier(st, comm, mode, algo, len, Hier::Bcast) {
        p.hier = Some(hier::Call::Bcast {
            buf: b.ptr as usize,
            count: c as i64,
            dt,
            root: r,
        });
    }
    let algo = match algo {
        "auto" | "shm" | "hier" if len >= large("FERRITE_COLL_BCAST_LARGE") && n > 2 => {
            "scatter_allgather"
        }
        "auto" | "shm" | "hier" => "binomial",
        a => a,
    };
    if algo == "binomial" {
        algo::bcast_binomial(&mut p, me, n, r, data);
    } else {
        algo::bcast_scatter_allgather(&mut p, me, n, r, data);
    }
    Ok(p)
}

/// The parts of a reduction shared by every reduction collective.
pub(super) struct Red {
    pub(super) reducer: Reducer,
    pub(super) esize: usize,
}

pub(super) fn reducer(st: &mut Ferrite, op: MPI_Op, dt: MPI_Datatype) -> MpiResult<Red> {
    let d = st.comm_datatype(dt)?;
    let reducer = st.coll.ops.reducer(op, dt, &d)?;
    Ok(Red {
        esize: d.size(),
        reducer,
    })
}

/// Every contribution to every rank (ring), reduced afterwards in rank order: how
/// nonblocking collectives run user operations (their user code runs after the last
/// message). Returns the contribution slices (own one at `me` must be filled).
fn raw_allgather(p: &mut Plan, me: usize, n: usize, len: usize) -> Vec<Slice> {
    let a = p.buf(n * len);
    let blocks: Vec<Slice> = (0..n).map(|r| sl(a, r * len, len)).collect();
    algo::allgatherv_ring(p, me, n, &blocks);
    blocks
}

/// Reduces contributions `blocks[0..k]` into a fresh slice, in rank order.
pub(super) fn prefix(p: &mut Plan, blocks: &[Slice], k: usize) -> Slice {
    let len = blocks[0].len;
    let res = sl(p.buf(len), 0, len);
    p.round();
    p.local(super::sched::Local::Copy {
        from: blocks[0],
        to: res,
    });
    for b in &blocks[1..k] {
        p.local(super::sched::Local::ReduceIntoA { a: res, b: *b });
    }
    res
}

/// Allreduce of `len` bytes in a plan: returns the slice holding the result, after adding
/// the input (`input` builds the UserBuf for a slice). `in_user`: the address of contiguous
/// user memory of `len` bytes to reduce in (the receive buffer: no unpack pass, and no pack
/// pass when the operation is in place); `src_user`: that of the contiguous input when it
/// is elsewhere (the algorithms may read it in place instead of packing it).
#[allow(clippy::too_many_arguments)]
fn allreduce_into(
    p: &mut Plan,
    me: usize,
    n: usize,
    len: usize,
    red: &Red,
    mode: Mode,
    in_user: Option<usize>,
    src_user: Option<usize>,
    input: impl Fn(Slice) -> UserBuf,
) -> MpiResult<Slice> {
    if mode == Mode::Deferred && red.reducer.is_user() {
        let blocks = raw_allgather(p, me, n, len);
        p.inputs.push(input(blocks[me]));
        return Ok(prefix(p, &blocks, n));
    }
    let acc = match in_user {
        Some(addr) if len > 0 => sl(p.user_buf(addr, len), 0, len),
        _ => sl(p.buf(len), 0, len),
    };
    // The input read in place by the first exchange when it is contiguous user memory
    // apart from `acc` (not MPI_IN_PLACE), for power-of-two sizes (no fold step).
    let src = match src_user {
        Some(addr) if len > 0 && n >= 2 && n.is_power_of_two() && in_user.is_some() => {
            Some(sl(p.user_buf(addr, len), 0, len))
        }
        _ => {
            p.inputs.push(input(acc));
            None
        }
    };
    // Two ranks with `src` exchange once, from `src` into `acc`: no scratch.
    let tmp_len = if src.is_some() && n == 2 { 0 } else { len };
    let tmp = sl(p.buf(tmp_len), 0, tmp_len);
    let algo = match allreduce_algo()? {
        "auto" | "shm" | "hier"
            if len >= large("FERRITE_COLL_ALLREDUCE_LARGE") && len / red.esize.max(1) >= n =>
        {
            "rabenseifner"
        }
        "auto" | "shm" | "hier" => "recursive_doubling",
        a => a,
    };
    if algo == "rabenseifner" {
        algo::allreduce_rabenseifner(p, me, n, acc, tmp, red.esize, src);
    } else {
        algo::allreduce_recursive_doubling(p, me, n, acc, tmp, src);
    }
    Ok(acc)
}

fn allreduce_algo() -> MpiResult<&'static str> {
    forced("FERRITE_COLL_ALLREDUCE_ALGO")
}

/// A user buffer for a shared-memory collective: `count` elements from element `at`.
fn mem(b: &Buf, at: usize, count: usize) -> shm::Mem {
    shm::Mem {
        ptr: b.at(at),
        count,
        dt: b.dt.clone(),
    }
}

/// The shared-memory form of a reduction: predefined operations on contiguous types
/// (user operations keep the message algorithms, whose order rules and unlocked user calls
/// they need).
fn shm_reduction(red: &Red, dt: &Datatype) -> bool {
    !red.reducer.is_user() && dt.is_contiguous()
}

#[allow(clippy::too_many_arguments)]
pub fn allreduce(
    st: &mut Ferrite,
    comm: MPI_Comm,
    sb: *const c_void,
    rb: *mut c_void,
    c: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
    mode: Mode,
) -> MpiResult<Plan> {
    if let Some(ic) = super::inter::of(st, comm)? {
        return super::inter::allreduce(st, &ic, sb, rb, count(c)?, dt, op, None);
    }
    let (me, n) = me_n(st, comm)?;
    not_aliased(sb, rb, c)?;
    let c = count(c)?;
    let red = reducer(st, op, dt)?;
    let out = buf(st, rb, dt)?;
    let inp = if in_place(sb) {
        out.clone()
    } else {
        buf(st, sb, dt)?
    };
    let len = c * red.esize;
    let mut p = Plan {
        reducer: Some(red.reducer.clone()),
        ..Plan::default()
    };
    // A contiguous receive buffer is the accumulator itself (the output below then finds
    // the result in place and copies nothing).
    let in_user = out
        .dt
        .is_contiguous()
        .then(|| out.ptr.wrapping_offset(out.dt.true_lb()) as usize);
    let src_user = (!in_place(sb) && inp.dt.is_contiguous())
        .then(|| inp.ptr.wrapping_offset(inp.dt.true_lb()) as usize);
    if shm_reduction(&red, &out.dt) && use_shm(st, comm, mode, allreduce_algo()?, len) {
        p.shm = Some(shm::Call {
            op: shm::Op::Allreduce {
                input: (!in_place(sb)).then(|| mem(&inp, 0, c)),
                out: mem(&out, 0, c),
                red: red.reducer.clone(),
            },
            len,
        });
    }
    if shm_reduction(&red, &out.dt)
        && use_hier(st, comm, mode, allreduce_algo()?, len, Hier::Gathering)
    {
        p.hier = Some(hier::Call::Allreduce {
            sb: sb as usize,
            rb: rb as usize,
            count: c as i64,
            dt,
            op,
        });
    }
    let res = allreduce_into(&mut p, me, n, len, &red, mode, in_user, src_user, |s| {
        inp.user(s, 0, c)
    })?;
    p.outputs.push(out.user(res, 0, c));
    Ok(p)
}

#[allow(clippy::too_many_arguments)]
pub fn reduce(
    st: &mut Ferrite,
    comm: MPI_Comm,
    sb: *const c_void,
    rb: *mut c_void,
    c: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
    r: c_int,
    mode: Mode,
) -> MpiResult<Plan> {
    if let Some(ic) = super::inter::of(st, comm)? {
        return super::inter::reduce(st, &ic, sb, rb, c, dt, op, r);
    }
    let (me, n) = me_n(st, comm)?;
    if me as c_int == r {
        not_aliased(sb, rb, c)?;
    }
    let (c, r) = (count(c)?, root(r, n)?);
    let red = reducer(st, op, dt)?;
    let out = buf(st, rb, dt)?;
    let inp = if in_place(sb) && me == r {
        out.clone()
    } else {
        buf(st, sb, dt)?
    };
    let len = c * red.esize;
    let mut p = Plan {
        reducer: Some(red.reducer.clone()),
        ..Plan::default()
    };
    if mode == Mode::Deferred && red.reducer.is_user() {
        let a = p.buf(n * len);
        let blocks: Vec<Slice> = (0..n).map(|k| sl(a, k * len, len)).collect();
        p.inputs.push(inp.user(blocks[me], 0, c));
        algo::gatherv_linear(&mut p, me, n, r, &blocks, blocks[me]);
        if me == r {
            let res = prefix(&mut p, &blocks, n);
            p.outputs.push(out.user(res, 0, c));
        }
        return Ok(p);
    }
    let acc = sl(p.buf(len), 0, len);
    let tmp = sl(p.buf(len), 0, len);
    p.inputs.push(inp.user(acc, 0, c));
    let algo = forced("FERRITE_COLL_REDUCE_ALGO")?;
    if shm_reduction(&red, &inp.dt) && use_shm(st, comm, mode, algo, len) {
        p.shm = Some(shm::Call {
            op: shm::Op::Reduce {
                root: r,
                input: (!(in_place(sb) && me == r)).then(|| mem(&inp, 0, c)),
                out: mem(&out, 0, c),
                red: red.reducer.clone(),
            },
            len,
        });
    }
    if shm_reduction(&red, &inp.dt) && use_hier(st, comm, mode, algo, len, Hier::Gathering) {
        p.hier = Some(hier::Call::Reduce {
            sb: sb as usize,
            rb: rb as usize,
            count: c as i64,
            dt,
            op,
            root: r,
            len,
            lb: inp.dt.true_lb(),
        });
    }
    let algo = match algo {
        "auto" | "shm" | "hier" if len >= large("FERRITE_COLL_REDUCE_LARGE") && c >= n && n > 2 => {
            "rabenseifner"
        }
        "auto" | "shm" | "hier" => "binomial",
        a => a,
    };
    if algo == "rabenseifner" {
        // The Rabenseifner allreduce, the result kept at the root only: 2 log2 p rounds
        // moving 2m bytes per rank, against log2 n rounds of m bytes for the tree.
        algo::allreduce_rabenseifner(&mut p, me, n, acc, tmp, red.esize, None);
    } else {
        algo::reduce_binomial(&mut p, me, n, r, acc, tmp);
    }
    if me == r {
        p.outputs.push(out.user(acc, 0, c));
    }
    Ok(p)
}

/// Reduce_scatter and Reduce_scatter_block: an allreduce of the whole vector, each rank
/// keeping its block. `counts[k]`: elements of rank k's block.
#[allow(clippy::too_many_arguments)]
pub fn reduce_scatter(
    st: &mut Ferrite,
    comm: MPI_Comm,
    sb: *const c_void,
    rb: *mut c_void,
    counts: &[usize],
    dt: MPI_Datatype,
    op: MPI_Op,
    mode: Mode,
) -> MpiResult<Plan> {
    if let Some(ic) = super::inter::of(st, comm)? {
        return super::inter::allreduce(st, &ic, sb, rb, counts.iter().sum(), dt, op, Some(counts));
    }
    let (me, n) = me_n(st, comm)?;
    not_aliased(sb, rb, counts.iter().sum::<usize>() as i64)?;
    let red = reducer(st, op, dt)?;
    let out = buf(st, rb, dt)?;
    let inp = if in_place(sb) {
        out.clone()
    } else {
        buf(st, sb, dt)?
    };
    let total: usize = counts.iter().sum();
    let before: usize = counts[..me].iter().sum();
    let mut p = Plan {
        reducer: Some(red.reducer.clone()),
        ..Plan::default()
    };
    let res = allreduce_into(
        &mut p,
        me,
        n,
        total * red.esize,
        &red,
        mode,
        None,
        None,
        |s| inp.user(s, 0, total),
    )?;
    let mine = sl(
        res.buf,
        res.off + before * red.esize,
        counts[me] * red.esize,
    );
    p.outputs.push(out.user(mine, 0, counts[me]));
    Ok(p)
}

/// Scan (`exclusive` false) and Exscan.
#[allow(clippy::too_many_arguments)]
pub fn scan(
    st: &mut Ferrite,
    comm: MPI_Comm,
    sb: *const c_void,
    rb: *mut c_void,
    c: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
    exclusive: bool,
    mode: Mode,
) -> MpiResult<Plan> {
    let (me, n) = me_n(st, comm)?;
    not_aliased(sb, rb, c)?;
    let c = count(c)?;
    let red = reducer(st, op, dt)?;
    let out = buf(st, rb, dt)?;
    let inp = if in_place(sb) {
        out.clone()
    } else {
        buf(st, sb, dt)?
    };
    let len = c * red.esize;
    let mut p = Plan {
        reducer: Some(red.reducer.clone()),
        ..Plan::default()
    };
    if mode == Mode::Deferred && red.reducer.is_user() {
        let blocks = raw_allgather(&mut p, me, n, len);
        p.inputs.push(inp.user(blocks[me], 0, c));
        let k = if exclusive { me } else { me + 1 };
        if k > 0 {
            let res = prefix(&mut p, &blocks, k);
            p.outputs.push(out.user(res, 0, c));
        }
        return Ok(p);
    }
    let x = sl(p.buf(len), 0, len);
    let tmp = sl(p.buf(len), 0, len);
    let ex = exclusive.then(|| sl(p.buf(len), 0, len));
    p.inputs.push(inp.user(x, 0, c));
    let have_ex = algo::scan(&mut p, me, n, x, tmp, ex);
    match ex {
        None => p.outputs.push(out.user(x, 0, c)),
        Some(e) if have_ex => p.outputs.push(out.user(e, 0, c)),
        Some(_) => {}
    }
    Ok(p)
}

/// Gather: `counts`/`displs` None for the fixed form.
#[allow(clippy::too_many_arguments)]
pub fn gather(
    st: &mut Ferrite,
    comm: MPI_Comm,
    sb: *const c_void,
    sc: i64,
    sdt: MPI_Datatype,
    rb: *mut c_void,
    rc: i64,
    rdt: MPI_Datatype,
    r: c_int,
    v: Option<(Arr, Arr)>,
    mode: Mode,
) -> MpiResult<Plan> {
    if let Some(ic) = super::inter::of(st, comm)? {
        return super::inter::gather(st, &ic, sb, sc, sdt, rb, rc, rdt, r, v);
    }
    let (me, n) = me_n(st, comm)?;
    if me as c_int == r {
        not_aliased(sb, rb, sc)?;
        not_aliased(sb, own_block(st, rb, rc, rdt, me, n, v.map(|x| x.1))?, sc)?;
    }
    let r = root(r, n)?;
    let is_root = me == r;
    let inplace = is_root && in_place(sb);
    let out = if is_root {
        Some(buf(st, rb, rdt)?)
    } else {
        None
    };
    let inp = if inplace {
        None
    } else {
        Some(buf(st, sb, sdt)?)
    };
    let sc = if inplace { 0 } else { count(sc)? };
    let mut p = Plan::default();
    match v {
        None => {
            let bs = match &out {
                Some(o) => count(rc)? * o.dt.size(),
                None => sc * inp.as_ref().map_or(0, |b| b.dt.size()),
            };
            let rc = if is_root { count(rc)? } else { 0 };
            let algo = forced("FERRITE_COLL_GATHER_ALGO")?;
            if use_shm(st, comm, mode, algo, bs) {
                p.shm = Some(shm::Call {
                    op: shm::Op::Gather {
                        root: r,
                        input: inp.as_ref().map(|b| mem(b, 0, sc)),
                        out: out
                            .iter()
                            .flat_map(|o| (0..n).map(|k| mem(o, k * rc, rc)))
                            .collect(),
                    },
                    len: bs,
                });
                // With the segment there, the rounds would only be built to be dropped.
                if st.shm_coll_ready(comm, bs) {
                    if let Some(b) = &inp {
                        b.dt.check_buffer(b.ptr, sc as u64)?;
                    }
                    if let Some(o) = &out {
                        o.dt.check_buffer(o.ptr, (rc * n) as u64)?;
                    }
                    return Ok(p);
                }
            }
            let vr = (me + n - r) % n;
            let g = sl(p.buf(n * bs), 0, n * bs);
            let blk = |i: usize| sl(g.buf, i * bs, bs);
            match (&inp, &out) {
                (Some(b), _) => p.inputs.push(b.user(blk(vr), 0, sc)),
                (None, Some(o)) => p.inputs.push(o.user(blk(0), r * rc, rc)),
                _ => {}
            }
            if let Some(o) = &out {
                for i in 0..n {
                    let rank = (i + r) % n;
                    if !(inplace && rank == r) {
                        p.outputs.push(o.user(blk(i), rank * rc, rc));
                    }
                }
            }
            algo::gather_binomial(&mut p, me, n, r, g, bs);
        }
        Some((rcs, displs)) => {
            let mut blocks = vec![sl(0, 0, 0); n];
            let mine;
            if let Some(o) = &out {
                // SAFETY: the root passes n counts and n displacements.
                let (rcs, displs) = unsafe { (rcs.read(n, "counts")?, displs.read(n, "displs")?) };
                let a = p.buf(rcs.iter().map(|&c| c.max(0) as usize).sum::<usize>() * o.dt.size());
                let mut at = 0;
                for k in 0..n {
                    let len = count(rcs[k])? * o.dt.size();
                    blocks[k] = sl(a, at, len);
                    at += len;
                    if !(inplace && k == r) {
                        p.outputs.push(o.user(
                            blocks[k],
                            displs[k].max(0) as usize,
                            rcs[k] as usize,
                        ));
                    }
                }
                mine = if inplace {
                    p.inputs
                        .push(o.user(blocks[r], displs[r].max(0) as usize, rcs[r] as usize));
                    blocks[r]
                } else {
                    let b = inp.as_ref().unwrap();
                    let s = sl(p.buf(sc * b.dt.size()), 0, sc * b.dt.size());
                    p.inputs.push(b.user(s, 0, sc));
                    s
                };
            } else {
                let b = inp.as_ref().unwrap();
                mine = sl(p.buf(sc * b.dt.size()), 0, sc * b.dt.size());
                p.inputs.push(b.user(mine, 0, sc));
            }
            algo::gatherv_linear(&mut p, me, n, r, &blocks, mine);
        }
    }
    Ok(p)
}

/// Scatter: `v` Some((counts, displs)) for Scatterv.
#[allow(clippy::too_many_arguments)]
pub fn scatter(
    st: &mut Ferrite,
    comm: MPI_Comm,
    sb: *const c_void,
    sc: i64,
    sdt: MPI_Datatype,
    rb: *mut c_void,
    rc: i64,
    rdt: MPI_Datatype,
    r: c_int,
    v: Option<(Arr, Arr)>,
    mode: Mode,
) -> MpiResult<Plan> {
    if let Some(ic) = super::inter::of(st, comm)? {
        return super::inter::scatter(st, &ic, sb, sc, sdt, rb, rc, rdt, r, v);
    }
    let (me, n) = me_n(st, comm)?;
    if me as c_int == r {
        not_aliased(sb, rb, rc)?;
        not_aliased(rb, own_block(st, sb, sc, sdt, me, n, v.map(|x| x.1))?, rc)?;
    }
    let r = root(r, n)?;
    let is_root = me == r;
    let inplace = is_root && in_place(rb);
    let src = if is_root {
        Some(buf(st, sb, sdt)?)
    } else {
        None
    };
    let out = if inplace {
        None
    } else {
        Some(buf(st, rb, rdt)?)
    };
    let rc = if inplace { 0 } else { count(rc)? };
    let mut p = Plan::default();
    match v {
        None => {
            let bs = match &src {
                Some(s) => count(sc)? * s.dt.size(),
                None => rc * out.as_ref().map_or(0, |b| b.dt.size()),
            };
            let sc = if is_root { count(sc)? } else { 0 };
            let algo = forced("FERRITE_COLL_SCATTER_ALGO")?;
            if use_shm(st, comm, mode, algo, bs) {
                p.shm = Some(shm::Call {
                    op: shm::Op::Scatter {
                        root: r,
                        input: src
                            .iter()
                            .flat_map(|s| (0..n).map(|k| mem(s, k * sc, sc)))
                            .collect(),
                        out: out.as_ref().map(|o| mem(o, 0, rc)),
                    },
                    len: bs,
                });
                if st.shm_coll_ready(comm, bs) {
                    if let Some(s) = &src {
                        s.dt.check_buffer(s.ptr, (sc * n) as u64)?;
                    }
                    if let Some(o) = &out {
                        o.dt.check_buffer(o.ptr, rc as u64)?;
                    }
                    return Ok(p);
                }
            }
            let vr = (me + n - r) % n;
            let g = sl(p.buf(n * bs), 0, n * bs);
            let blk = |i: usize| sl(g.buf, i * bs, bs);
            if let Some(s) = &src {
                for i in 0..n {
                    p.inputs.push(s.user(blk(i), ((i + r) % n) * sc, sc));
                }
            }
            if let Some(o) = &out {
                p.outputs.push(o.user(blk(vr), 0, rc));
            }
            algo::scatter_binomial(&mut p, me, n, r, g, bs);
        }
        Some((scs, displs)) => {
            let mut blocks = vec![sl(0, 0, 0); n];
            let mine = match &out {
                Some(o) => sl(p.buf(rc * o.dt.size()), 0, rc * o.dt.size()),
                None => sl(0, 0, 0),
            };
            if let Some(s) = &src {
                // SAFETY: the root passes n counts and n displacements.
                let (scs, displs) = unsafe { (scs.read(n, "counts")?, displs.read(n, "displs")?) };
                let a = p.buf(scs.iter().map(|&c| c.max(0) as usize).sum::<usize>() * s.dt.size());
                let mut at = 0;
                for k in 0..n {
                    let len = count(scs[k])? * s.dt.size();
                    blocks[k] = sl(a, at, len);
                    at += len;
                    if !(inplace && k == r) {
                        p.inputs.push(s.user(
                            blocks[k],
                            displs[k].max(0) as usize,
                            scs[k] as usize,
                        ));
                    }
                }
            }
            let mine = if inplace { blocks[r] } else { mine };
            if let Some(o) = &out {
                p.outputs.push(o.user(mine, 0, rc));
            }
            algo::scatterv_linear(&mut p, me, n, r, &blocks, mine);
        }
    }
    Ok(p)
}

/// Allgather: `v` Some((counts, displs)) for Allgatherv.
#[allow(clippy::too_many_arguments)]
pub fn allgather(
    st: &mut Ferrite,
    comm: MPI_Comm,
    sb: *const c_void,
    sc: i64,
    sdt: MPI_Datatype,
    rb: *mut c_void,
    rc: i64,
    rdt: MPI_Datatype,
    v: Option<(Arr, Arr)>,
    mode: Mode,
) -> MpiResult<Plan> {
    if let Some(ic) = super::inter::of(st, comm)? {
        return super::inter::allgather(st, &ic, sb, sc, sdt, rb, rc, rdt, v);
    }
    let (me, n) = me_n(st, comm)?;
    not_aliased(sb, rb, sc)?;
    not_aliased(sb, own_block(st, rb, rc, rdt, me, n, v.map(|x| x.1))?, sc)?;
    let out = buf(st, rb, rdt)?;
    let inplace = in_place(sb);
    let inp = if inplace {
        None
    } else {
        Some(buf(st, sb, sdt)?)
    };
    let sc = if inplace { 0 } else { count(sc)? };
    let mut p = Plan::default();
    let rsize = out.dt.size();
    match v {
        None => {
            let rc = count(rc)?;
            let bs = rc * rsize;
            let algo = forced("FERRITE_COLL_ALLGATHER_ALGO")?;
            let send_len = inp.as_ref().map_or(bs, |b| sc * b.dt.size());
            if send_len == bs && use_shm(st, comm, mode, algo, bs) {
                p.shm = Some(shm::Call {
                    op: shm::Op::Allgather {
                        input: inp.as_ref().map(|b| mem(b, 0, sc)),
                        out: (0..n).map(|k| mem(&out, k * rc, rc)).collect(),
                    },
                    len: bs,
                });
                // Allgather plans are not cached: when the segment is there already, the
                // rounds would only be built to be dropped (half the call's time at -n 2).
                if st.shm_coll_ready(comm, bs) {
                    if let Some(b) = &inp {
                        b.dt.check_buffer(b.ptr, sc as u64)?;
                    }
                    out.dt.check_buffer(out.ptr, (rc * n) as u64)?;
                    return Ok(p);
                }
            }
            if send_len == bs && use_hier(st, comm, mode, algo, n * bs, Hier::Gathering) {
                p.hier = Some(hier::Call::Allgather {
                    input: inp.as_ref().map(|b| mem(b, 0, sc)),
                    out: (0..n).map(|k| mem(&out, k * rc, rc)).collect(),
                    len: bs,
                });
            }
            let algo = match algo {
                "auto" | "shm" | "hier" if n * bs >= large("FERRITE_COLL_ALLGATHER_LARGE") => {
                    "ring"
                }
                "auto" | "shm" | "hier" => "bruck",
                a => a,
            };
            let a = p.buf(n * bs);
            // Block index in the buffer of rank k's data.
            let idx = |k: usize| if algo == "bruck" { (k + n - me) % n } else { k };
            let blk = |k: usize| sl(a, idx(k) * bs, bs);
            match &inp {
                Some(b) => p.inputs.push(b.user(blk(me), 0, sc)),
                None => p.inputs.push(out.user(blk(me), me * rc, rc)),
            }
            for k in 0..n {
                if !(inplace && k == me) {
                    p.outputs.push(out.user(blk(k), k * rc, rc));
                }
            }
            if algo == "bruck" {
                algo::allgather_bruck(&mut p, me, n, sl(a, 0, n * bs), bs);
            } else {
                let blocks: Vec<Slice> = (0..n).map(blk).collect();
                algo::allgatherv_ring(&mut p, me, n, &blocks);
            }
        }
        Some((rcs, displs)) => {
            // SAFETY: every rank passes n counts and n displacements.
            let (rcs, displs) = unsafe { (rcs.read(n, "counts")?, displs.read(n, "displs")?) };
            let total: usize = rcs.iter().map(|&c| c.max(0) as usize).sum();
            let a = p.buf(total * rsize);
            let mut blocks = Vec::with_capacity(n);
            let mut at = 0;
            for k in 0..n {
                let len = count(rcs[k])? * rsize;
                blocks.push(sl(a, at, len));
                at += len;
                if !(inplace && k == me) {
                    p.outputs
                        .push(out.user(blocks[k], displs[k].max(0) as usize, rcs[k] as usize));
                }
            }
            match &inp {
                Some(b) => p.inputs.push(b.user(blocks[me], 0, sc)),
                None => p.inputs.push(out.user(
                    blocks[me],
                    displs[me].max(0) as usize,
                    rcs[me] as usize,
                )),
            }
            algo::allgatherv_ring(&mut p, me, n, &blocks);
        }
    }
    Ok(p)
}

/// Alltoall.
#[allow(clippy::too_many_arguments)]
pub fn alltoall(
    st: &mut Ferrite,
    comm: MPI_Comm,
    sb: *const c_void,
    sc: i64,
    sdt: MPI_Datatype,
    rb: *mut c_void,
    rc: i64,
    rdt: MPI_Datatype,
    mode: Mode,
) -> MpiResult<Plan> {
    if let Some(ic) = super::inter::of(st, comm)? {
        let n = ic.rn;
        let send = (!in_place(sb))
            .then(|| Side::regular(st, sb, sc, sdt, n, sc))
            .transpose()?;
        let recv = Side::regular(st, rb, rc, rdt, n, rc)?;
        return super::inter::alltoallw(&ic, send, recv);
    }
    let (me, n) = me_n(st, comm)?;
    not_aliased(sb, rb, sc)?;
    let out = buf(st, rb, rdt)?;
    let rc = count(rc)?;
    let (inp, sc) = if in_place(sb) {
        (out.clone(), rc)
    } else {
        (buf(st, sb, sdt)?, count(sc)?)
    };
    let bs = rc * out.dt.size();
    let mut p = Plan::default();
    let algo = forced("FERRITE_COLL_ALLTOALL_ALGO")?;
    if sc * inp.dt.size() == bs && use_shm(st, comm, mode, algo, bs) {
        p.shm = Some(shm::Call {
            op: shm::Op::Alltoall {
                input: (0..n).map(|k| mem(&inp, k * sc, sc)).collect(),
                out: (0..n).map(|k| mem(&out, k * rc, rc)).collect(),
            },
            len: bs,
        });
        if st.shm_coll_ready(comm, bs) {
            inp.dt.check_buffer(inp.ptr, (sc * n) as u64)?;
            out.dt.check_buffer(out.ptr, (rc * n) as u64)?;
            return Ok(p);
        }
    }
    let algo = match algo {
        "auto" | "shm" if bs >= large("FERRITE_COLL_ALLTOALL_LARGE") => "pairwise",
        "auto" | "shm" => "bruck",
        a => a,
    };
    if algo == "bruck" {
        let t = p.buf(n * bs);
        let blk = |i: usize| sl(t, i * bs, bs);
        for i in 0..n {
            p.inputs.push(inp.user(blk(i), ((me + i) % n) * sc, sc));
        }
        for j in 0..n {
            p.outputs.push(out.user(blk((me + n - j) % n), j * rc, rc));
        }
        algo::alltoall_bruck(&mut p, me, n, sl(t, 0, n * bs), bs);
    } else {
        // Contiguous buffers (not in place, block sizes agreeing) are sent from and received
        // into directly: no pack or unpack pass.
        let direct = !in_place(sb)
            && bs > 0
            && sc * inp.dt.size() == bs
            && inp.dt.is_contiguous()
            && out.dt.is_contiguous();
        let (s, r) = if direct {
            let at = |b: &Buf| b.ptr.wrapping_offset(b.dt.true_lb()) as usize;
            (p.user_buf(at(&inp), n * bs), p.user_buf(at(&out), n * bs))
        } else {
            (p.buf(n * bs), p.buf(n * bs))
        };
        let sends: Vec<Slice> = (0..n).map(|k| sl(s, k * bs, bs)).collect();
        let recvs: Vec<Slice> = (0..n).map(|k| sl(r, k * bs, bs)).collect();
        if !direct {
            for k in 0..n {
                p.inputs.push(inp.user(sends[k], k * sc, sc));
                p.outputs.push(out.user(recvs[k], k * rc, rc));
            }
        }
        algo::alltoall_pairwise(&mut p, me, n, &sends, &recvs);
    }
    Ok(p)
}

/// One side of Alltoallv/Alltoallw: per-rank (count, byte displacement, datatype).
pub struct Side {
    pub ptr: *mut u8,
    pub counts: Vec<usize>,
    /// Byte displacements.
    pub displs: Vec<isize>,
    pub types: Vec<Arc<Datatype>>,
}

impl Side {
    /// Block `k` of this side staged in a fresh plan buffer: the slice, and the copy between
    /// it and the user's buffer (packed from it on a send side, unpacked into it on a
    /// receive side).
    pub(super) fn stage(&self, p: &mut Plan, k: usize) -> (Slice, UserBuf) {
        let len = self.counts[k] * self.types[k].size();
        let slice = sl(p.buf(len), 0, len);
        let b = Buf {
            ptr: self.ptr,
            dt: self.types[k].clone(),
        };
        (slice, b.user_bytes(slice, self.displs[k], self.counts[k]))
    }

    /// Alltoallv's side: displacements in elements of one datatype.
    ///
    /// # Safety
    /// `c` and `d` point to `n` ints each.
    pub unsafe fn v(
        st: &mut Ferrite,
        p: *const c_void,
        c: Arr,
        d: Arr,
        dt: MPI_Datatype,
        n: usize,
    ) -> MpiResult<Side> {
        let t = st.comm_datatype(dt)?;
        // SAFETY: per the contract.
        let (c, d) = unsafe { (c.read(n, "counts")?, d.read(n, "displs")?) };
        Ok(Side {
            ptr: p as *mut u8,
            counts: c.iter().map(|&x| count(x)).collect::<MpiResult<_>>()?,
            displs: d.iter().map(|&x| x as isize * t.extent).collect(),
            types: vec![t; n],
        })
    }

    /// Alltoallw's side: byte displacements, one datatype per rank.
    ///
    /// # Safety
    /// `c`, `d` and `t` point to `n` elements each.
    pub unsafe fn w(
        st: &mut Ferrite,
        p: *const c_void,
        c: Arr,
        d: Arr,
        t: *const MPI_Datatype,
        n: usize,
    ) -> MpiResult<Side> {
        if t.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null array of datatypes"));
        }
        // SAFETY: per the contract.
        let (c, d, t) = unsafe {
            (
                c.read(n, "counts")?,
                d.read(n, "displs")?,
                std::slice::from_raw_parts(t, n),
            )
        };
        Ok(Side {
            ptr: p as *mut u8,
            counts: c.iter().map(|&x| count(x)).collect::<MpiResult<_>>()?,
            displs: d.iter().map(|&x| x as isize).collect(),
            types: t
                .iter()
                .map(|&x| st.comm_datatype(x))
                .collect::<MpiResult<_>>()?,
        })
    }
}

/// Alltoallv/Alltoallw (pairwise). `send` None: MPI_IN_PLACE (data from the receive side).
pub fn alltoallw(
    st: &mut Ferrite,
    comm: MPI_Comm,
    send: Option<Side>,
    recv: Side,
) -> MpiResult<Plan> {
    if let Some(ic) = super::inter::of(st, comm)? {
        return super::inter::alltoallw(&ic, send, recv);
    }
    let (me, n) = me_n(st, comm)?;
    if let Some(s) = &send {
        let elems = s.counts.iter().sum::<usize>() as i64;
        not_aliased(s.ptr as *const c_void, recv.ptr as *const c_void, elems)?;
    }
    let send_side = send.as_ref().unwrap_or(&recv);
    let mut p = Plan::default();
    let mut sends = Vec::with_capacity(n);
    let mut recvs = Vec::with_capacity(n);
    for k in 0..n {
        let (s, input) = send_side.stage(&mut p, k);
        let (r, output) = recv.stage(&mut p, k);
        p.inputs.push(input);
        p.outputs.push(output);
        sends.push(s);
        recvs.push(r);
    }
    if sends[me].len != recvs[me].len {
        return Err(MpiError::new(
            MPI_ERR_TRUNCATE,
            "alltoall: this rank's block to itself has different send and receive sizes",
        ));
    }
    forced("FERRITE_COLL_ALLTOALLV_ALGO")?;
    algo::alltoall_pairwise(&mut p, me, n, &sends, &recvs);
    Ok(p)
}

/// The neighbourhood of this rank in a topology, in MPI's order.
pub struct Ngh {
    pub sources: Vec<i32>,
    pub dests: Vec<i32>,
    /// Cartesian: neighbour k of the sources and of the destinations is the same direction
    /// (2d: negative, 2d+1: positive along dimension d).
    pub cart: bool,
}

/// Neighbourhood collectives (all forms reduce to this): one round, a message to each
/// destination j (block j of `send`) and from each source i (block i of `recv`); no message
/// to or from MPI_PROC_NULL. On Cartesian topologies each message carries its direction in
/// the tag so that when both directions of a dimension reach the same rank (a periodic
/// dimension of size 1 or 2), the block sent towards +d is the one received from -d.
pub fn neighbor(
    st: &mut Ferrite,
    comm: MPI_Comm,
    ngh: &Ngh,
    send: Side,
    recv: Side,
) -> MpiResult<Plan> {
    let _ = me_n(st, comm)?;
    let mut p = Plan::default();
    let mut xfers = Vec::new();
    for (j, &d) in ngh.dests.iter().enumerate() {
        let len = send.counts[j] * send.types[j].size();
        if d == MPI_PROC_NULL || len == 0 {
            continue;
        }
        let s = sl(p.buf(len), 0, len);
        let b = Buf {
            ptr: send.ptr,
            dt: send.types[j].clone(),
        };
        p.inputs
            .push(b.user_bytes(s, send.displs[j], send.counts[j]));
        xfers.push(super::sched::Xfer {
            send: true,
            peer: d,
            parts: vec![s],
            tag: if ngh.cart && j < 256 { j as i32 } else { 0 },
        });
    }
    for (i, &src) in ngh.sources.iter().enumerate() {
        let len = recv.counts[i] * recv.types[i].size();
        if src == MPI_PROC_NULL || len == 0 {
            continue;
        }
        let r = sl(p.buf(len), 0, len);
        let b = Buf {
            ptr: recv.ptr,
            dt: recv.types[i].clone(),
        };
        p.outputs
            .push(b.user_bytes(r, recv.displs[i], recv.counts[i]));
        xfers.push(super::sched::Xfer {
            send: false,
            peer: src,
            parts: vec![r],
            tag: if ngh.cart && i < 256 {
                (i ^ 1) as i32
            } else {
                0
            },
        });
    }
    p.round().xfers = xfers;
    Ok(p)
}

impl Side {
    /// `k` blocks of `count` elements of `dt`, block i at i * `stride` elements (or all at
    /// the start with stride 0): the regular sides of Neighbor_allgather/alltoall.
    pub fn regular(
        st: &mut Ferrite,
        p: *const c_void,
        count: i64,
        dt: MPI_Datatype,
        k: usize,
        stride: i64,
    ) -> MpiResult<Side> {
        let t = st.comm_datatype(dt)?;
        let c = count_of(count)?;
        Ok(Side {
            ptr: p as *mut u8,
            counts: vec![c; k],
            displs: (0..k)
                .map(|i| i as isize * stride as isize * t.extent)
                .collect(),
            types: vec![t; k],
        })
    }
}

fn count_of(c: i64) -> MpiResult<usize> {
    count(c)
}
