//! Two-level collectives on communicators that span hosts (Open MPI's han, MPICH's SMP-aware
//! collectives): blocking Barrier, Bcast, Reduce, Allreduce and Allgather as collectives
//! within each host (shared memory, coll/shm.rs, when they fit its slots) plus collectives
//! among one leader per host, so that only leaders send between hosts and each host's data
//! crosses the network once.
//!
//! **Levels.** On a communicator's first two-level collective its members exchange their
//! host key (`Ferrite::host_key`: the launcher's node, as MPI_COMM_TYPE_SHARED uses) and
//! split it twice: `node`, the members on this rank's host (in the parent's rank order, so
//! the lowest parent rank is local rank 0, the host's leader), and `leaders`, the leaders in
//! parent rank order (host h is leader rank h). Both are ordinary communicators, freed with
//! the parent. The steps are ordinary blocking collectives on them (each picks its own
//! algorithm: shm within a host, messages among leaders), run without the state lock. A
//! communicator qualifies when the launcher's map puts its members on at least two hosts
//! and two of them on one host, so that neither level is the parent again.
//!
//! **Algorithms** (l = the host's leader, h(r) = rank r's host):
//! - Barrier: node barrier, leaders' barrier, node barrier (no rank leaves before every
//!   leader entered the leaders' barrier, which each did after its whole host arrived).
//! - Bcast from r: on h(r), a node bcast from r when r does not lead; leaders' bcast from
//!   h(r); on the other hosts (and h(r) when r leads), a node bcast from l.
//! - Reduce to r: node reduce to l; leaders' reduce to h(r); when r does not lead, a node
//!   bcast from l on h(r) hands it the result. Predefined operations only (commutative).
//! - Allreduce: node reduce to l, leaders' allreduce in place, node bcast from l: every rank
//!   gets the same bits.
//! - Allgather: node gather to l, leaders' allgatherv of whole hosts, node bcast of all; each
//!   rank then places block k of parent rank k (hosts need not hold consecutive ranks).

use super::plans;
use super::shm::Mem;
use super::{Kind, Mode, PlanKey};
use crate::consts::*;
use crate::error::MpiResult;
use crate::fxhash::FxHashMap;
use crate::state::{Ferrite, Held};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// A communicator's two levels, from this rank's point of view.
pub struct Levels {
    /// The members on this rank's host (local rank 0 leads it).
    pub node: MPI_Comm,
    /// One leader per host (host h is rank h); MPI_COMM_NULL on the other ranks.
    pub leaders: MPI_Comm,
    /// Per parent rank: its host's index and its rank on that host.
    pub host: Vec<u32>,
    pub local: Vec<u32>,
    /// Members per host.
    pub sizes: Vec<u32>,
    /// This rank in the parent.
    pub me: usize,
}

impl Levels {
    fn leads(&self) -> bool {
        self.local[self.me] == 0
    }
    fn my_host(&self) -> u32 {
        self.host[self.me]
    }
}

/// A communicator's two-level state.
pub enum Slot {
    On(Arc<Levels>),
    /// The members' host keys did not show two levels (then the flat algorithms run).
    Off,
}

/// The process's two-level state (in [`super::Coll`]), by context id.
#[derive(Default)]
pub struct State {
    pub comms: FxHashMap<u32, Slot>,
}

/// Which collective, with its arguments (raw user addresses), kept in its plan.
#[derive(Clone)]
pub enum Call {
    Barrier,
    Bcast {
        buf: usize,
        count: i64,
        dt: MPI_Datatype,
        root: usize,
    },
    /// `len`, `lb`: the vector's bytes and the datatype's true lower bound (contiguous
    /// types only), for a leader's scratch buffer.
    Reduce {
        sb: usize,
        rb: usize,
        count: i64,
        dt: MPI_Datatype,
        op: MPI_Op,
        root: usize,
        len: usize,
        lb: isize,
    },
    Allreduce {
        sb: usize,
        rb: usize,
        count: i64,
        dt: MPI_Datatype,
        op: MPI_Op,
    },
    /// `out[k]`: where rank k's `len` bytes go; `input` None: MPI_IN_PLACE.
    Allgather {
        input: Option<Mem>,
        out: Vec<Mem>,
        len: usize,
    },
}

/// FERRITE_COLL_HIER_MAX: bytes (Allgather: total) up to which auto runs two levels.
pub fn max_bytes() -> usize {
    plans::hier_max()
}

impl Ferrite {
    /// (hosts, members) when `comm` may run two-level collectives: an intracommunicator
    /// whose members the launcher placed on at least two hosts, with two on one host. Every
    /// member decides the same (one map for the job).
    pub fn hier_shape(&mut self, comm: MPI_Comm) -> Option<(usize, usize)> {
        let c = self.objects.comms.get(comm).ok()?;
        match self.coll.hier.comms.get(&c.context_id) {
            Some(Slot::On(lv)) => return Some((lv.sizes.len(), lv.host.len())),
            Some(Slot::Off) => return None,
            None => {}
        }
        if c.inter.is_some() || c.group.len() < 3 {
            return None;
        }
        let mut nodes = Vec::with_capacity(c.group.len());
        for &w in c.group.iter() {
            nodes.push(self.net.node_of(w)?);
        }
        nodes.sort_unstable();
        nodes.dedup();
        (nodes.len() >= 2 && nodes.len() < c.group.len()).then_some((nodes.len(), c.group.len()))
    }
}

impl Held {
    /// Frees a freed communicator's two levels.
    pub fn hier_forget(&mut self, context_id: u32) {
        if let Some(Slot::On(lv)) = self.coll.hier.comms.remove(&context_id) {
            for c in [lv.node, lv.leaders] {
                if c != MPI_COMM_NULL {
                    self.comm_remove(c);
                }
            }
        }
    }

    /// `comm`'s levels, made on first use (collective over `comm`); None when they do not
    /// exist (every member decides the same).
    pub fn hier_levels(&mut self, comm: MPI_Comm) -> MpiResult<Option<Arc<Levels>>> {
        let (ctx, me) = {
            let c = self.objects.comms.get(comm)?;
            (c.context_id, c.rank as usize)
        };
        match self.coll.hier.comms.get(&ctx) {
            Some(Slot::On(lv)) => return Ok(Some(lv.clone())),
            Some(Slot::Off) => return Ok(None),
            None => {}
        }
        let key = self.host_key();
        let all = self.allgather_fixed(comm, &key.to_le_bytes())?;
        let (host, local, sizes) = hosts_of(&all);
        if sizes.len() < 2 || sizes.len() == host.len() {
            self.coll.hier.comms.insert(ctx, Slot::Off);
            return Ok(None);
        }
        let node = self.comm_split(comm, host[me] as i32, me as i32)?;
        let lead = if local[me] == 0 { 0 } else { MPI_UNDEFINED };
        let leaders = self.comm_split(comm, lead, me as i32)?;
        let lv = Arc::new(Levels {
            node,
            leaders,
            host,
            local,
            sizes,
            me,
        });
        self.coll.hier.comms.insert(ctx, Slot::On(lv.clone()));
        Ok(Some(lv))
    }
}

/// From every member's 8-byte host key in rank order: each member's host (numbered in the
/// order of their first members), its rank on that host, and each host's member count.
fn hosts_of(keys: &[u8]) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let (mut firsts, mut host, mut local, mut sizes) = (vec![], vec![], vec![], vec![]);
    for k in keys.chunks_exact(8) {
        let h = match firsts.iter().position(|f| *f == k) {
            Some(h) => h,
            None => {
                firsts.push(k);
                sizes.push(0u32);
                firsts.len() - 1
            }
        };
        host.push(h as u32);
        local.push(sizes[h]);
        sizes[h] += 1;
    }
    (host, local, sizes)
}

/// Runs `call` in two levels (called without the lock: each step is a blocking collective).
pub fn run(lv: &Levels, call: &Call) -> MpiResult<()> {
    let (node, leaders, leads) = (lv.node, lv.leaders, lv.leads());
    match call {
        Call::Barrier => {
            barrier(node)?;
            if leads {
                barrier(leaders)?;
            }
            barrier(node)
        }
        &Call::Bcast {
            buf,
            count,
            dt,
            root,
        } => {
            let (rh, rl) = (lv.host[root], lv.local[root]);
            let root_host = lv.my_host() == rh;
            if root_host && rl != 0 {
                bcast(node, buf, count, dt, rl)?;
            }
            if leads {
                bcast(leaders, buf, count, dt, rh)?;
            }
            if !root_host || rl == 0 {
                bcast(node, buf, count, dt, 0)?;
            }
            Ok(())
        }
        &Call::Reduce {
            sb,
            rb,
            count,
            dt,
            op,
            root,
            len,
            lb,
        } => {
            let (rh, rl) = (lv.host[root], lv.local[root]);
            let (root_host, is_root) = (lv.my_host() == rh, lv.me == root);
            // The host's partial result: the root's buffer when it leads, else scratch of
            // the (contiguous) type's layout at leaders and, on the root's host, the others.
            let mut tmp = Vec::new();
            let mut scratch = || {
                tmp = vec![0u8; len];
                tmp.as_mut_ptr().wrapping_offset(-lb) as usize
            };
            let part = if is_root {
                rb
            } else if leads || (root_host && rl != 0) {
                scratch()
            } else {
                rb
            };
            // MPI_IN_PLACE is the root's: its input is then in `rb`.
            let input = match (plans::in_place(sb as *const c_void), is_root && leads) {
                (true, true) => MPI_IN_PLACE,
                (true, false) => rb,
                (false, _) => sb,
            };
            reduce(node, input, part, count, dt, op, 0)?;
            if leads {
                let input = if root_host { MPI_IN_PLACE } else { part };
                reduce(leaders, input, part, count, dt, op, rh)?;
            }
            if root_host && rl != 0 {
                bcast(node, part, count, dt, 0)?;
            }
            Ok(())
        }
        &Call::Allreduce {
            sb,
            rb,
            count,
            dt,
            op,
        } => {
            let input = match (plans::in_place(sb as *const c_void), leads) {
                (true, true) => MPI_IN_PLACE,
                (true, false) => rb,
                (false, _) => sb,
            };
            reduce(node, input, rb, count, dt, op, 0)?;
            if leads {
                allreduce(leaders, MPI_IN_PLACE, rb, count, dt, op)?;
            }
            bcast(node, rb, count, dt, 0)
        }
        Call::Allgather { input, out, len } => allgather(lv, input.as_ref(), out, *len),
    }
}

fn allgather(lv: &Levels, input: Option<&Mem>, out: &[Mem], bs: usize) -> MpiResult<()> {
    let n = lv.host.len();
    let mut mine = vec![0u8; bs];
    // SAFETY: the user's block holds `bs` packed bytes (the plan checked the buffers).
    unsafe { input.unwrap_or(&out[lv.me]).pack_to(mine.as_mut_ptr(), bs) };
    let on_host = lv.sizes[lv.my_host() as usize] as usize;
    let mut host_blocks = vec![0u8; if lv.leads() { on_host * bs } else { 0 }];
    gather(lv.node, &mine, &mut host_blocks)?;
    // Every block, host by host, each host's in its local rank order.
    let mut all = vec![0u8; n * bs];
    let starts: Vec<usize> = lv
        .sizes
        .iter()
        .scan(0, |at, &s| {
            let here = *at;
            *at += s as usize;
            Some(here)
        })
        .collect();
    if lv.leads() {
        let counts: Vec<c_int> = lv
            .sizes
            .iter()
            .map(|&s| (s as usize * bs) as c_int)
            .collect();
        let displs: Vec<c_int> = starts.iter().map(|&s| (s * bs) as c_int).collect();
        allgatherv(lv.leaders, &host_blocks, &mut all, &counts, &displs)?;
    }
    bcast(
        lv.node,
        all.as_mut_ptr() as usize,
        all.len() as i64,
        MPI_BYTE,
        0,
    )?;
    for (k, o) in out.iter().enumerate() {
        if k == lv.me && input.is_none() {
            continue;
        }
        let at = (starts[lv.host[k] as usize] + lv.local[k] as usize) * bs;
        // SAFETY: `all` holds n blocks of bs bytes; block k of the user's buffer holds bs.
        unsafe { o.unpack_from(all[at..].as_ptr(), bs) };
    }
    Ok(())
}

// Each step: a blocking collective on one level, as the C entry points run it.

fn barrier(comm: MPI_Comm) -> MpiResult<()> {
    let nul = std::ptr::null();
    super::blocking_cached(
        comm,
        |st| {
            PlanKey::of(
                st,
                Kind::Barrier,
                comm,
                nul,
                nul,
                0,
                MPI_DATATYPE_NULL,
                MPI_OP_NULL,
                0,
            )
        },
        |st| plans::barrier(st, comm, Mode::Blocking),
    )
}

fn bcast(comm: MPI_Comm, buf: usize, count: i64, dt: MPI_Datatype, root: u32) -> MpiResult<()> {
    let (b, r) = (buf as *mut c_void, root as c_int);
    super::blocking_cached(
        comm,
        |st| {
            PlanKey::of(
                st,
                Kind::Bcast,
                comm,
                std::ptr::null(),
                b,
                count,
                dt,
                MPI_OP_NULL,
                r,
            )
        },
        |st| plans::bcast(st, comm, b, count, dt, r, Mode::Blocking),
    )
}

#[allow(clippy::too_many_arguments)]
fn reduce(
    comm: MPI_Comm,
    sb: usize,
    rb: usize,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: u32,
) -> MpiResult<()> {
    let (s, r, root) = (sb as *const c_void, rb as *mut c_void, root as c_int);
    super::blocking_cached(
        comm,
        |st| PlanKey::of(st, Kind::Reduce, comm, s, r, count, dt, op, root),
        |st| plans::reduce(st, comm, s, r, count, dt, op, root, Mode::Blocking),
    )
}

fn allreduce(
    comm: MPI_Comm,
    sb: usize,
    rb: usize,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> MpiResult<()> {
    let (s, r) = (sb as *const c_void, rb as *mut c_void);
    super::blocking_cached(
        comm,
        |st| PlanKey::of(st, Kind::Allreduce, comm, s, r, count, dt, op, 0),
        |st| plans::allreduce(st, comm, s, r, count, dt, op, Mode::Blocking),
    )
}

/// Gathers every member's `mine` (of one length) into rank 0's `into`.
fn gather(comm: MPI_Comm, mine: &[u8], into: &mut [u8]) -> MpiResult<()> {
    let (s, r, c) = (
        mine.as_ptr().cast(),
        into.as_mut_ptr().cast(),
        mine.len() as i64,
    );
    super::blocking(comm, |st| {
        plans::gather(
            st,
            comm,
            s,
            c,
            MPI_BYTE,
            r,
            c,
            MPI_BYTE,
            0,
            None,
            Mode::Blocking,
        )
    })
}

fn allgatherv(
    comm: MPI_Comm,
    mine: &[u8],
    into: &mut [u8],
    counts: &[c_int],
    displs: &[c_int],
) -> MpiResult<()> {
    let (s, r) = (mine.as_ptr().cast(), into.as_mut_ptr().cast());
    let v = Some((
        plans::Arr::from(counts.as_ptr()),
        plans::Arr::from(displs.as_ptr()),
    ));
    super::blocking(comm, |st| {
        plans::allgather(
            st,
            comm,
            s,
            mine.len() as i64,
            MPI_BYTE,
            r,
            0,
            MPI_BYTE,
            v,
            Mode::Blocking,
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn hosts_in_first_member_order_with_local_ranks() {
        let keys: Vec<u8> = [7u64, 9, 7, 3, 9, 7]
            .iter()
            .flat_map(|k| k.to_le_bytes())
            .collect();
        let (host, local, sizes) = super::hosts_of(&keys);
        assert_eq!(host, [0, 1, 0, 2, 1, 0]);
        assert_eq!(local, [0, 0, 1, 0, 1, 2]);
        assert_eq!(sizes, [3, 2, 1]);
    }
}
