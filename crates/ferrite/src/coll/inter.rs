//! Collectives on intercommunicators (MPI 4.1 §6.2.2): plans that run on the hidden union
//! intracommunicator (both groups; `Plan::comm`), with peers named by their union rank.
//!
//! Every operation is one round of direct messages between the groups (linear: a root
//! exchanges with each remote process, all-to-all forms with every remote process),
//! followed for reductions by a local reduction of the remote group's contributions in
//! remote rank order (so non-commutative operations are right, and with a user operation
//! every user step comes after the last message, as nonblocking plans require).
//! Cost: a root sends or receives remote-size messages; Allgather/Alltoall/Allreduce/
//! Reduce_scatter send one message to each remote process.

use super::plans::{self, Arr, Buf, Side};
use super::sched::{sl, Plan, Slice, Xfer};
use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::state::Ferrite;
use std::os::raw::{c_int, c_void};

/// This process's view of an intercommunicator for collectives.
pub struct Ic {
    union: MPI_Comm,
    /// Local rank, local group size, remote group size.
    pub me: usize,
    pub ln: usize,
    pub rn: usize,
    /// Union rank of remote rank 0.
    roff: usize,
}

impl Ic {
    fn peer(&self, remote: usize) -> i32 {
        (self.roff + remote) as i32
    }
    fn plan(&self) -> Plan {
        Plan {
            comm: Some(self.union),
            ..Plan::default()
        }
    }
}

/// `Some` when `comm` is an intercommunicator.
pub fn of(st: &Ferrite, comm: MPI_Comm) -> MpiResult<Option<Ic>> {
    let c = st.objects.comms.get(comm)?;
    let Some(i) = &c.inter else {
        return Ok(None);
    };
    let (me, ln, rn) = (c.rank as usize, c.size() as usize, i.remote.len());
    let urank = st.objects.comms.get(i.union_comm)?.rank as usize;
    // The union holds the group of the lower leader first (comm_create.rs).
    let roff = if urank == me { ln } else { 0 };
    Ok(Some(Ic {
        union: i.union_comm,
        me,
        ln,
        rn,
        roff,
    }))
}

/// The part a process plays in a rooted intercommunicator collective.
enum Role {
    /// MPI_ROOT: the root, exchanging with every remote process.
    Root,
    /// MPI_PROC_NULL: the root's group, not the root: nothing to do.
    Idle,
    /// The other group: the root is this remote rank.
    Leaf(usize),
}

fn role(ic: &Ic, r: c_int) -> MpiResult<Role> {
    match r {
        MPI_ROOT => Ok(Role::Root),
        MPI_PROC_NULL => Ok(Role::Idle),
        r if r >= 0 && (r as usize) < ic.rn => Ok(Role::Leaf(r as usize)),
        r => Err(crate::mpi_err!(
            MPI_ERR_ROOT,
            "invalid root {r} on an intercommunicator with a remote group of size {} \
             (MPI_ROOT at the root, MPI_PROC_NULL in the rest of its group)",
            ic.rn
        )),
    }
}

fn no_in_place(p: *const c_void, what: &str) -> MpiResult<()> {
    if plans::in_place(p) {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "MPI_IN_PLACE is not allowed as the {what} on an intercommunicator"
        ));
    }
    Ok(())
}

fn xfer(send: bool, peer: i32, s: Slice) -> Xfer {
    Xfer {
        send,
        peer,
        parts: vec![s],
        tag: 0,
    }
}

/// A fresh schedule slice of `len` bytes.
fn fresh(p: &mut Plan, len: usize) -> Slice {
    sl(p.buf(len), 0, len)
}

pub fn bcast(
    st: &mut Ferrite,
    ic: &Ic,
    b: *mut c_void,
    c: i64,
    dt: MPI_Datatype,
    r: c_int,
) -> MpiResult<Plan> {
    let role = role(ic, r)?;
    let mut p = ic.plan();
    if let Role::Idle = role {
        return Ok(p);
    }
    let c = plans::count(c)?;
    match role {
        Role::Idle => {}
        Role::Root => {
            let b = plans::buf(st, b, dt)?;
            let data = fresh(&mut p, c * b.dt.size());
            p.inputs.push(b.user(data, 0, c));
            p.round().xfers = (0..ic.rn).map(|k| xfer(true, ic.peer(k), data)).collect();
        }
        Role::Leaf(r) => {
            let b = plans::buf(st, b, dt)?;
            let data = fresh(&mut p, c * b.dt.size());
            p.outputs.push(b.user(data, 0, c));
            p.recv(ic.peer(r), vec![data]);
        }
    }
    Ok(p)
}

/// Counts and element displacements of a v-form (`rn` entries), or `c` at k*c.
///
/// # Safety
/// With `v`, the arrays have `rn` entries.
unsafe fn layout(c: i64, v: Option<(Arr, Arr)>, rn: usize) -> MpiResult<Vec<(usize, usize)>> {
    match v {
        None => {
            let c = plans::count(c)?;
            Ok((0..rn).map(|k| (c, k * c)).collect())
        }
        Some((cs, ds)) => {
            // SAFETY: per the contract.
            let (cs, ds) = unsafe { (cs.read(rn, "counts")?, ds.read(rn, "displs")?) };
            cs.iter()
                .zip(&ds)
                .map(|(&c, &d)| Ok((plans::count(c)?, d.max(0) as usize)))
                .collect()
        }
    }
}

/// Receives one block from each remote process into `out` at `lay`; returns the slices.
fn recv_blocks(p: &mut Plan, ic: &Ic, out: &Buf, lay: &[(usize, usize)]) -> Vec<Slice> {
    let mut blocks = Vec::with_capacity(ic.rn);
    for (k, &(c, d)) in lay.iter().enumerate() {
        let s = fresh(p, c * out.dt.size());
        p.outputs.push(out.user(s, d, c));
        blocks.push(xfer(false, ic.peer(k), s));
    }
    let slices = blocks.iter().map(|x| x.parts[0]).collect();
    p.round().xfers = blocks;
    slices
}

/// Gather and Gatherv (`v`: the root's counts and displacements).
#[allow(clippy::too_many_arguments)]
pub fn gather(
    st: &mut Ferrite,
    ic: &Ic,
    sb: *const c_void,
    sc: i64,
    sdt: MPI_Datatype,
    rb: *mut c_void,
    rc: i64,
    rdt: MPI_Datatype,
    r: c_int,
    v: Option<(Arr, Arr)>,
) -> MpiResult<Plan> {
    let role = role(ic, r)?;
    let mut p = ic.plan();
    match role {
        Role::Idle => {}
        Role::Root => {
            no_in_place(rb, "receive buffer")?;
            let out = plans::buf(st, rb, rdt)?;
            // SAFETY: the root passes remote-size arrays (MPI contract).
            let lay = unsafe { layout(rc, v, ic.rn) }?;
            recv_blocks(&mut p, ic, &out, &lay);
        }
        Role::Leaf(r) => {
            no_in_place(sb, "send buffer")?;
            let inp = plans::buf(st, sb, sdt)?;
            let sc = plans::count(sc)?;
            let s = fresh(&mut p, sc * inp.dt.size());
            p.inputs.push(inp.user(s, 0, sc));
            p.send(ic.peer(r), vec![s]);
        }
    }
    Ok(p)
}

/// Scatter and Scatterv (`v`: the root's counts and displacements).
#[allow(clippy::too_many_arguments)]
pub fn scatter(
    st: &mut Ferrite,
    ic: &Ic,
    sb: *const c_void,
    sc: i64,
    sdt: MPI_Datatype,
    rb: *mut c_void,
    rc: i64,
    rdt: MPI_Datatype,
    r: c_int,
    v: Option<(Arr, Arr)>,
) -> MpiResult<Plan> {
    let role = role(ic, r)?;
    let mut p = ic.plan();
    match role {
        Role::Idle => {}
        Role::Root => {
            no_in_place(sb, "send buffer")?;
            let src = plans::buf(st, sb, sdt)?;
            // SAFETY: the root passes remote-size arrays (MPI contract).
            let lay = unsafe { layout(sc, v, ic.rn) }?;
            let mut xs = Vec::with_capacity(ic.rn);
            for (k, &(c, d)) in lay.iter().enumerate() {
                let s = fresh(&mut p, c * src.dt.size());
                p.inputs.push(src.user(s, d, c));
                xs.push(xfer(true, ic.peer(k), s));
            }
            p.round().xfers = xs;
        }
        Role::Leaf(r) => {
            no_in_place(rb, "receive buffer")?;
            let out = plans::buf(st, rb, rdt)?;
            let rc = plans::count(rc)?;
            let s = fresh(&mut p, rc * out.dt.size());
            p.outputs.push(out.user(s, 0, rc));
            p.recv(ic.peer(r), vec![s]);
        }
    }
    Ok(p)
}

/// Allgather and Allgatherv: every process sends its block to every remote process and
/// receives one block from each (counts and displacements per remote rank).
#[allow(clippy::too_many_arguments)]
pub fn allgather(
    st: &mut Ferrite,
    ic: &Ic,
    sb: *const c_void,
    sc: i64,
    sdt: MPI_Datatype,
    rb: *mut c_void,
    rc: i64,
    rdt: MPI_Datatype,
    v: Option<(Arr, Arr)>,
) -> MpiResult<Plan> {
    no_in_place(sb, "send buffer")?;
    let inp = plans::buf(st, sb, sdt)?;
    let out = plans::buf(st, rb, rdt)?;
    let sc = plans::count(sc)?;
    // SAFETY: every process passes remote-size arrays (MPI contract).
    let lay = unsafe { layout(rc, v, ic.rn) }?;
    let mut p = ic.plan();
    let mine = fresh(&mut p, sc * inp.dt.size());
    p.inputs.push(inp.user(mine, 0, sc));
    recv_blocks(&mut p, ic, &out, &lay);
    let sends: Vec<Xfer> = (0..ic.rn).map(|k| xfer(true, ic.peer(k), mine)).collect();
    p.rounds.last_mut().unwrap().xfers.extend(sends);
    Ok(p)
}

/// Alltoall(v/w): block k of each side goes to / comes from remote rank k.
pub fn alltoallw(ic: &Ic, send: Option<Side>, recv: Side) -> MpiResult<Plan> {
    let Some(send) = send else {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            "MPI_IN_PLACE is not allowed as the send buffer on an intercommunicator",
        ));
    };
    let mut p = ic.plan();
    let mut xs = Vec::with_capacity(2 * ic.rn);
    for k in 0..ic.rn {
        let (s, input) = send.stage(&mut p, k);
        let (r, output) = recv.stage(&mut p, k);
        p.inputs.push(input);
        p.outputs.push(output);
        xs.push(xfer(false, ic.peer(k), r));
        xs.push(xfer(true, ic.peer(k), s));
    }
    p.round().xfers = xs;
    Ok(p)
}

/// Reduce: the root receives every remote contribution and reduces them in remote rank
/// order.
#[allow(clippy::too_many_arguments)]
pub fn reduce(
    st: &mut Ferrite,
    ic: &Ic,
    sb: *const c_void,
    rb: *mut c_void,
    c: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
    r: c_int,
) -> MpiResult<Plan> {
    let role = role(ic, r)?;
    if let Role::Idle = role {
        // The arguments are not significant (mpi4py passes MPI_DATATYPE_NULL here).
        return Ok(ic.plan());
    }
    let c = plans::count(c)?;
    let red = plans::reducer(st, op, dt)?;
    let len = c * red.esize;
    let mut p = Plan {
        reducer: Some(red.reducer.clone()),
        ..ic.plan()
    };
    match role {
        Role::Idle => {}
        Role::Root => {
            no_in_place(rb, "receive buffer")?;
            let out = plans::buf(st, rb, dt)?;
            let blocks: Vec<Slice> = (0..ic.rn).map(|_| fresh(&mut p, len)).collect();
            p.round().xfers = (0..ic.rn)
                .map(|k| xfer(false, ic.peer(k), blocks[k]))
                .collect();
            let res = plans::prefix(&mut p, &blocks, ic.rn);
            p.outputs.push(out.user(res, 0, c));
        }
        Role::Leaf(r) => {
            no_in_place(sb, "send buffer")?;
            let inp = plans::buf(st, sb, dt)?;
            let s = fresh(&mut p, len);
            p.inputs.push(inp.user(s, 0, c));
            p.send(ic.peer(r), vec![s]);
        }
    }
    Ok(p)
}

/// Allreduce (`keep` None) and Reduce_scatter (`keep`: elements of each local rank's
/// block): each process receives the other group's vectors of `total` elements, reduces
/// them in remote rank order and keeps its part.
#[allow(clippy::too_many_arguments)]
pub fn allreduce(
    st: &mut Ferrite,
    ic: &Ic,
    sb: *const c_void,
    rb: *mut c_void,
    total: usize,
    dt: MPI_Datatype,
    op: MPI_Op,
    keep: Option<&[usize]>,
) -> MpiResult<Plan> {
    no_in_place(sb, "send buffer")?;
    let red = plans::reducer(st, op, dt)?;
    let inp = plans::buf(st, sb, dt)?;
    let out = plans::buf(st, rb, dt)?;
    let len = total * red.esize;
    let mut p = Plan {
        reducer: Some(red.reducer.clone()),
        ..ic.plan()
    };
    let mine = fresh(&mut p, len);
    p.inputs.push(inp.user(mine, 0, total));
    let blocks: Vec<Slice> = (0..ic.rn).map(|_| fresh(&mut p, len)).collect();
    let mut xs = Vec::with_capacity(2 * ic.rn);
    for (k, b) in blocks.iter().enumerate() {
        xs.push(xfer(false, ic.peer(k), *b));
        xs.push(xfer(true, ic.peer(k), mine));
    }
    p.round().xfers = xs;
    let res = plans::prefix(&mut p, &blocks, ic.rn);
    match keep {
        None => p.outputs.push(out.user(res, 0, total)),
        Some(counts) => {
            let before: usize = counts[..ic.me].iter().sum();
            let part = sl(
                res.buf,
                res.off + before * red.esize,
                counts[ic.me] * red.esize,
            );
            p.outputs.push(out.user(part, 0, counts[ic.me]));
        }
    }
    Ok(p)
}
