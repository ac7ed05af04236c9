//! Making communicators: split, create, create_group, split_type, intercommunicators,
//! topologies. Every constructor is collective over its members and agrees on context ids
//! through `Held::agree_context` (context_ids.rs), its first round carried by the
//! constructor's own exchange, so a process below MPI_THREAD_MULTIPLE pays no extra round.
//!
//! Exchanges use the point-to-point layer's internal sends and receives on the parent's
//! collective context (`coll_send`/`coll_recv`).

use super::comm::{Comm, Inter};
use super::context_ids::{max_words, Words};
use super::group::rank_of;
use super::topo::Topo;
use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::state::{Ferrite, Held};
use std::sync::Arc;

/// (neighbour rank, weight) of one distributed-graph edge.
pub type Edge = (i32, i32);

/// Internal tags on a parent's collective context.
const TAG_BCAST: i32 = 2;
const TAG_INTERCOMM_LEADERS: i32 = 0x2000_0000;
const TAG_CREATE_GROUP: i32 = 0x4000_0000;

/// Context ids one intercommunicator takes: its own, its local and its union helper.
pub(super) const INTER_IDS: u32 = 6;

fn u32s(v: &[u8]) -> Vec<u32> {
    v.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect()
}

/// A tag (below 2^28) for the exchanges of a creation named by a string tag (FNV-1a).
fn string_tag(s: &str) -> i32 {
    let h = s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    (h & 0x0fff_ffff) as i32
}

fn bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl Held {
    fn comm_info(&self, comm: MPI_Comm) -> MpiResult<(Arc<[u32]>, usize, MPI_Errhandler)> {
        let c = self.objects.comms.get(comm)?;
        Ok((c.group.clone(), c.rank as usize, c.errhandler))
    }

    fn intra_only(&self, comm: MPI_Comm, what: &str) -> MpiResult<()> {
        if self.objects.comms.get(comm)?.inter.is_some() {
            return Err(crate::mpi_err!(
                MPI_ERR_COMM,
                "{what} on an intercommunicator is not supported"
            ));
        }
        Ok(())
    }

    /// Members `members` (ranks in `comm`, the first is the root) exchange `mine` (the same
    /// length everywhere): everyone gets all contributions in `members` order.
    fn allgather_among(
        &mut self,
        comm: MPI_Comm,
        members: &[i32],
        tag: i32,
        mine: &[u8],
    ) -> MpiResult<Vec<u8>> {
        let me = self.objects.comms.get(comm)?.rank as i32;
        let root = members[0];
        if me != root {
            self.coll_send(comm, root, tag, mine)?;
            return self.coll_recv(comm, root, tag);
        }
        let mut all = mine.to_vec();
        for &r in &members[1..] {
            all.extend(self.coll_recv(comm, r, tag)?);
        }
        for &r in &members[1..] {
            self.coll_send(comm, r, tag, &all)?;
        }
        Ok(all)
    }

    /// MPI_Comm_split: members with the same `color` form a new communicator ordered by
    /// (`key`, rank in `comm`); MPI_UNDEFINED gets MPI_COMM_NULL.
    pub fn comm_split(&mut self, comm: MPI_Comm, color: i32, key: i32) -> MpiResult<MPI_Comm> {
        if color < 0 && color != MPI_UNDEFINED {
            return Err(crate::mpi_err!(
                MPI_ERR_ARG,
                "invalid color {color} (must be non-negative or MPI_UNDEFINED)"
            ));
        }
        if let Some(i) = self.objects.comms.get(comm)?.inter.clone() {
            return self.inter_split(comm, &i, color, key);
        }
        let (parent, my_rank, errhandler) = self.comm_info(comm)?;
        let (context, all) = self.agree_context(2, |st, w| {
            let mine = bytes(&[color as u32, key as u32, w[0], w[1]]);
            let all = u32s(&st.allgather_fixed(comm, &mine)?);
            Ok((max_words(&all, 4, 2), all))
        })?;
        let records: Vec<&[u32]> = all.chunks_exact(4).collect();
        if color == MPI_UNDEFINED {
            return Ok(MPI_COMM_NULL);
        }
        let mut members: Vec<(i32, usize)> = records
            .iter()
            .enumerate()
            .filter(|(_, r)| r[0] as i32 == color)
            .map(|(i, r)| (r[1] as i32, i))
            .collect();
        members.sort_unstable();
        let rank = members.iter().position(|&(_, i)| i == my_rank).unwrap_or(0) as u32;
        let group: Arc<[u32]> = members.iter().map(|&(_, i)| parent[i]).collect();
        Ok(self
            .objects
            .comms
            .user
            .insert(Comm::new(context, rank, group, errhandler)))
    }

    /// MPI_Comm_dup: same group, new context; keeps the error handler, topology and hints
    /// (attributes are copied by the caller, outside the state lock). It is MPI_Comm_idup,
    /// waited for.
    pub fn comm_dup(&mut self, comm: MPI_Comm) -> MpiResult<MPI_Comm> {
        let (h, r) = self.comm_idup_start(comm)?;
        let waited = self.wait_until(|st| st.p2p.is_done(r));
        let (status, _, _) = self.release(r);
        if let Err(e) = waited.and(match status.error {
            MPI_SUCCESS => Ok(()),
            code => Err(MpiError::from_code(code)),
        }) {
            self.comm_remove(h);
            return Err(e);
        }
        Ok(h)
    }

    /// MPI_Comm_create: collective over `comm`; members of `group` (a subset of its group)
    /// get a communicator in the group's order, the others MPI_COMM_NULL. Processes may pass
    /// different, disjoint groups (MPI-2.2): each group is one split color, named by its
    /// lowest member's rank in `comm` (e.g. the local groups of a merged intercommunicator).
    ///
    /// On an intercommunicator `group` is a subgroup of the local group, and each side's
    /// members of its group get an intercommunicator with the other side's as remote group
    /// (MPI 4.1 section 7.4.2): a split with one color, keyed by the rank in `group`, so
    /// both sides keep their group's order; MPI_COMM_NULL where either side is empty.
    pub fn comm_create(&mut self, comm: MPI_Comm, group: &[u32]) -> MpiResult<MPI_Comm> {
        let (parent, _, _) = self.comm_info(comm)?;
        if let Some(w) = group.iter().find(|w| !parent.contains(w)) {
            return Err(crate::mpi_err!(
                MPI_ERR_GROUP,
                "group member (world rank {w}) is not in the {}communicator's group",
                if self.objects.comms.get(comm)?.inter.is_some() {
                    "inter"
                } else {
                    ""
                }
            ));
        }
        if let Some(i) = self.objects.comms.get(comm)?.inter.clone() {
            return match rank_of(group, self.world_rank) {
                Some(r) => self.inter_split(comm, &i, 0, r as i32),
                None => self.inter_split(comm, &i, MPI_UNDEFINED, 0),
            };
        }
        match rank_of(group, self.world_rank) {
            Some(r) => {
                let color = group
                    .iter()
                    .filter_map(|w| rank_of(&parent, *w))
                    .min()
                    .unwrap_or(0);
                self.comm_split(comm, color as i32, r as i32)
            }
            None => self.comm_split(comm, MPI_UNDEFINED, 0),
        }
    }

    /// MPI_Comm_create_group: collective over the members of `group` only.
    pub fn comm_create_group(
        &mut self,
        comm: MPI_Comm,
        group: &[u32],
        tag: i32,
    ) -> MpiResult<MPI_Comm> {
        self.intra_only(comm, "MPI_Comm_create_group")?;
        let (parent, _, errhandler) = self.comm_info(comm)?;
        let Some(rank) = rank_of(group, self.world_rank) else {
            return Ok(MPI_COMM_NULL);
        };
        let members = group
            .iter()
            .map(|w| {
                rank_of(&parent, *w).map(|r| r as i32).ok_or_else(|| {
                    crate::mpi_err!(
                        MPI_ERR_GROUP,
                        "group member (world rank {w}) is not in the communicator"
                    )
                })
            })
            .collect::<MpiResult<Vec<i32>>>()?;
        let tag = TAG_CREATE_GROUP | (tag & 0x3fff_ffff);
        let (context, ()) = self.agree_context(2, |st, w| {
            let all = u32s(&st.allgather_among(comm, &members, tag, &bytes(&w))?);
            Ok((max_words(&all, 2, 0), ()))
        })?;
        Ok(self.objects.comms.user.insert(Comm::new(
            context,
            rank as u32,
            Arc::from(group),
            errhandler,
        )))
    }

    /// MPI_Comm_split_type by shared memory: `shared` members get a communicator of the
    /// processes on their host, the others MPI_COMM_NULL (collective over `comm` either way).
    pub fn comm_split_type(
        &mut self,
        comm: MPI_Comm,
        shared: bool,
        key: i32,
    ) -> MpiResult<MPI_Comm> {
        // On an intercommunicator the hosts are compared across both groups.
        let exchange = match &self.objects.comms.get(comm)?.inter {
            Some(i) => i.union_comm,
            None => comm,
        };
        let host = self.host_key().to_le_bytes();
        let all = self.allgather_fixed(exchange, &host)?;
        // Color: the lowest rank on my host.
        let color = all
            .chunks_exact(host.len())
            .position(|h| h == host)
            .unwrap_or(0) as i32;
        let color = if shared { color } else { MPI_UNDEFINED };
        self.comm_split(comm, color, key)
    }

    /// This process's host as MPI_COMM_TYPE_SHARED and the two-level collectives
    /// (coll/hier.rs) group processes: the launcher's node (PMI_process_mapping), which is
    /// also what decides the peers shm reaches (transport/nodes.rs), as in MPICH; within the
    /// host's identity (name and boot id), which alone tells hosts apart when the launcher
    /// gives no map. (Host names cannot: network namespaces, containers, share one.)
    pub fn host_key(&self) -> u64 {
        let host = crate::rma::shared::host_id();
        match self.net.node_of(self.net.rank) {
            Some(node) => (host ^ (u64::from(node) + 1)).wrapping_mul(0x100_0000_01b3),
            None => host,
        }
    }

    /// MPI_Intercomm_create: `local_comm`'s group and the group led by `remote_leader` (a
    /// rank in `peer_comm`, meaningful at the local leader only) form an intercommunicator.
    pub fn intercomm_create(
        &mut self,
        local_comm: MPI_Comm,
        local_leader: i32,
        peer_comm: MPI_Comm,
        remote_leader: i32,
        tag: i32,
    ) -> MpiResult<MPI_Comm> {
        self.intra_only(local_comm, "MPI_Intercomm_create")?;
        let (lgroup, lrank, errhandler) = self.comm_info(local_comm)?;
        if local_leader < 0 || local_leader as usize >= lgroup.len() {
            return Err(crate::mpi_err!(
                MPI_ERR_RANK,
                "local_leader {local_leader} not in a communicator of size {}",
                lgroup.len()
            ));
        }
        let leader = lrank == local_leader as usize;
        if leader {
            let n = self.objects.comms.get(peer_comm)?.peers().len();
            if remote_leader < 0 || remote_leader as usize >= n {
                return Err(crate::mpi_err!(
                    MPI_ERR_RANK,
                    "remote_leader {remote_leader} not in peer_comm of size {n}"
                ));
            }
        }
        let tag = TAG_INTERCOMM_LEADERS | (tag & 0x1fff_ffff);
        // Each round: an allgather in the local group, the leaders' exchange, the leader's
        // broadcast of [words, remote leader's world rank, remote group...].
        let (context, plan) = self.agree_context(INTER_IDS, |st, w| {
            let local_max = max_words(&u32s(&st.allgather_fixed(local_comm, &bytes(&w))?), 2, 0);
            let plan = if leader {
                let mut msg = vec![local_max[0], local_max[1], st.world_rank];
                msg.extend(lgroup.iter());
                let theirs =
                    u32s(&st.leaders_exchange(peer_comm, remote_leader, tag, &bytes(&msg))?);
                let mut plan = vec![local_max[0].max(theirs[0]), local_max[1].max(theirs[1])];
                plan.extend(&theirs[2..]);
                for r in 0..lgroup.len() as i32 {
                    if r != local_leader {
                        st.coll_send(local_comm, r, TAG_BCAST, &bytes(&plan))?;
                    }
                }
                plan
            } else {
                u32s(&st.coll_recv(local_comm, local_leader, TAG_BCAST)?)
            };
            Ok(([plan[0], plan[1]], plan))
        })?;
        let remote: Arc<[u32]> = Arc::from(&plan[3..]);
        let local_first = lgroup[local_leader as usize] < plan[2];
        Ok(self.make_inter(
            context,
            InterParts {
                lrank,
                local: lgroup,
                remote,
                local_first,
            },
            errhandler,
        ))
    }

    /// Leaders of two groups swap `msg` on `comm` (where the other is rank `other`): the
    /// one with the lower world rank sends first, so blocking sends of any size cannot
    /// wait on each other.
    fn leaders_exchange(
        &mut self,
        comm: MPI_Comm,
        other: i32,
        tag: i32,
        msg: &[u8],
    ) -> MpiResult<Vec<u8>> {
        let theirs = self.objects.comms.get(comm)?.peers()[other as usize];
        if self.world_rank < theirs {
            self.coll_send(comm, other, tag, msg)?;
            self.coll_recv(comm, other, tag)
        } else {
            let t = self.coll_recv(comm, other, tag)?;
            self.coll_send(comm, other, tag, msg)?;
            Ok(t)
        }
    }

    /// Registers an intercommunicator with ids `context..context + INTER_IDS`.
    fn make_inter(
        &mut self,
        context: u32,
        parts: InterParts,
        errhandler: MPI_Errhandler,
    ) -> MPI_Comm {
        let inter = self.inter_helpers(context, &parts, errhandler);
        let mut c = Comm::new(context, parts.lrank as u32, parts.local, errhandler);
        c.inter = Some(inter);
        self.objects.comms.user.insert(c)
    }

    /// MPI_Comm_split on an intercommunicator: each side's members of one color, with the
    /// other side's members of that color as remote group (MPI_COMM_NULL if either is empty).
    fn inter_split(
        &mut self,
        comm: MPI_Comm,
        i: &Inter,
        color: i32,
        key: i32,
    ) -> MpiResult<MPI_Comm> {
        let (_, lrank, errhandler) = self.comm_info(comm)?;
        let (union, urank) = {
            let u = self.objects.comms.get(i.union_comm)?;
            (u.group.clone(), u.rank as usize)
        };
        let local_first = urank == lrank;
        let n_first = if local_first {
            union.len() - i.remote.len()
        } else {
            i.remote.len()
        };
        let (context, all) = self.agree_context(INTER_IDS, |st, w| {
            let mine = bytes(&[color as u32, key as u32, w[0], w[1]]);
            let all = u32s(&st.allgather_fixed(i.union_comm, &mine)?);
            Ok((max_words(&all, 4, 2), all))
        })?;
        let records: Vec<&[u32]> = all.chunks_exact(4).collect();
        if color == MPI_UNDEFINED {
            return Ok(MPI_COMM_NULL);
        }
        let side = |first: bool| -> Vec<usize> {
            let range = if first {
                0..n_first
            } else {
                n_first..union.len()
            };
            let mut v: Vec<(i32, usize)> = range
                .filter(|&k| records[k][0] as i32 == color)
                .map(|k| (records[k][1] as i32, k))
                .collect();
            v.sort_unstable();
            v.into_iter().map(|(_, k)| k).collect()
        };
        let (mine_side, other_side) = (side(local_first), side(!local_first));
        if other_side.is_empty() {
            return Ok(MPI_COMM_NULL);
        }
        let rank = mine_side.iter().position(|&k| k == urank).unwrap_or(0);
        let local: Arc<[u32]> = mine_side.iter().map(|&k| union[k]).collect();
        let remote: Arc<[u32]> = other_side.iter().map(|&k| union[k]).collect();
        Ok(self.make_inter(
            context,
            InterParts {
                lrank: rank,
                local,
                remote,
                local_first,
            },
            errhandler,
        ))
    }

    /// MPI_Comm_create_from_group: like MPI_Comm_create_group over MPI_COMM_WORLD, the
    /// string tag telling concurrent creations apart.
    pub fn comm_from_group(&mut self, group: &[u32], stringtag: &str) -> MpiResult<MPI_Comm> {
        self.comm_create_group(MPI_COMM_WORLD, group, string_tag(stringtag))
    }

    /// MPI_Intercomm_create_from_groups: both groups are known to every member, so only
    /// the context id has to be agreed: within each group (through its leader), then
    /// between the leaders; all traffic is on MPI_COMM_WORLD's collective context.
    pub fn intercomm_from_groups(
        &mut self,
        local: &[u32],
        local_leader: i32,
        remote: &[u32],
        remote_leader: i32,
        stringtag: &str,
        errhandler: MPI_Errhandler,
    ) -> MpiResult<MPI_Comm> {
        let lrank = rank_of(local, self.world_rank).ok_or_else(|| {
            MpiError::new(MPI_ERR_GROUP, "the calling process is not in local_group")
        })?;
        let leader_ok = |l: i32, g: &[u32]| l >= 0 && (l as usize) < g.len();
        if !leader_ok(local_leader, local) || !leader_ok(remote_leader, remote) {
            return Err(crate::mpi_err!(
                MPI_ERR_RANK,
                "leaders {local_leader}/{remote_leader} not in groups of sizes {}/{}",
                local.len(),
                remote.len()
            ));
        }
        let tag = TAG_INTERCOMM_LEADERS | string_tag(stringtag);
        let leader = local[local_leader as usize];
        let theirs = remote[remote_leader as usize];
        let mut members = vec![leader as i32];
        members.extend(local.iter().filter(|&&w| w != leader).map(|&w| w as i32));
        let (context, ()) = self.agree_context(INTER_IDS, |st, w| {
            let all = u32s(&st.allgather_among(MPI_COMM_WORLD, &members, tag, &bytes(&w))?);
            let local_max = max_words(&all, 2, 0);
            let got: Words = if st.world_rank == leader {
                let other = u32s(&st.leaders_exchange(
                    MPI_COMM_WORLD,
                    theirs as i32,
                    tag,
                    &bytes(&local_max),
                )?);
                let got = [local_max[0].max(other[0]), local_max[1].max(other[1])];
                for &m in &members[1..] {
                    st.coll_send(MPI_COMM_WORLD, m, tag, &bytes(&got))?;
                }
                got
            } else {
                let g = u32s(&st.coll_recv(MPI_COMM_WORLD, leader as i32, tag)?);
                [g[0], g[1]]
            };
            Ok((got, ()))
        })?;
        Ok(self.make_inter(
            context,
            InterParts {
                lrank,
                local: Arc::from(local),
                remote: Arc::from(remote),
                local_first: leader < theirs,
            },
            errhandler,
        ))
    }

    /// MPI_Intercomm_merge: an intracommunicator over both groups, the `high == false`
    /// group first (ties: the group whose leader has the lower world rank).
    pub fn intercomm_merge(&mut self, comm: MPI_Comm, high: bool) -> MpiResult<MPI_Comm> {
        let (i, lrank, errhandler) = {
            let c = self.objects.comms.get(comm)?;
            let i = c.inter.clone().ok_or_else(|| {
                MpiError::new(
                    MPI_ERR_COMM,
                    "MPI_Intercomm_merge needs an intercommunicator",
                )
            })?;
            (i, c.rank as usize, c.errhandler)
        };
        let (union, urank) = {
            let u = self.objects.comms.get(i.union_comm)?;
            (u.group.clone(), u.rank as usize)
        };
        let local_first = urank == lrank;
        let first_len = if local_first {
            union.len() - i.remote.len()
        } else {
            i.remote.len()
        };
        let (context, all) = self.agree_context(2, |st, w| {
            let all = u32s(&st.allgather_fixed(i.union_comm, &bytes(&[high as u32, w[0], w[1]]))?);
            Ok((max_words(&all, 3, 1), all))
        })?;
        let records: Vec<&[u32]> = all.chunks_exact(3).collect();
        let (high_first, high_second) = (records[0][0] != 0, records[first_len][0] != 0);
        let swap = high_first && !high_second;
        let order: Vec<usize> = if swap {
            (first_len..union.len()).chain(0..first_len).collect()
        } else {
            (0..union.len()).collect()
        };
        let group: Arc<[u32]> = order.iter().map(|&k| union[k]).collect();
        let rank = order.iter().position(|&k| k == urank).unwrap_or(0) as u32;
        Ok(self
            .objects
            .comms
            .user
            .insert(Comm::new(context, rank, group, errhandler)))
    }

    /// Removes a communicator and, for an intercommunicator, its helpers.
    pub fn comm_remove(&mut self, comm: MPI_Comm) {
        if let Some(c) = self.objects.comms.user.remove(comm) {
            self.shm_coll_forget(c.context_id);
            self.hier_forget(c.context_id);
            if let Some(i) = c.inter {
                self.objects.comms.user.remove(i.local_comm);
                self.objects.comms.user.remove(i.union_comm);
            }
        }
    }

    /// The first `n` ranks of `comm` (in order) form a new communicator with topology
    /// `topo`; the others get MPI_COMM_NULL (MPI_Cart_create, MPI_Graph_create).
    pub fn comm_with_topo(&mut self, comm: MPI_Comm, n: usize, topo: Topo) -> MpiResult<MPI_Comm> {
        self.intra_only(comm, "creating a topology")?;
        let (group, rank, _) = self.comm_info(comm)?;
        if n > group.len() {
            return Err(crate::mpi_err!(
                MPI_ERR_TOPOLOGY,
                "topology of {n} processes on a communicator of {}",
                group.len()
            ));
        }
        let color = if rank < n { 0 } else { MPI_UNDEFINED };
        let h = self.comm_split(comm, color, rank as i32)?;
        if h != MPI_COMM_NULL {
            self.objects.comms.get_mut(h)?.topo = Some(Arc::new(topo));
        }
        Ok(h)
    }

    /// MPI_Dist_graph_create: every process gives some edges (source, dest, weight); each
    /// learns its own in- and out-edges. Edges are exchanged with two allgathers (counts,
    /// then edge lists padded to the longest).
    pub fn dist_graph_gather(
        &mut self,
        comm: MPI_Comm,
        edges: &[(i32, i32, i32)],
    ) -> MpiResult<(Vec<Edge>, Vec<Edge>)> {
        let me = self.objects.comms.get(comm)?.rank as i32;
        let counts = u32s(&self.allgather_fixed(comm, &(edges.len() as u32).to_le_bytes())?);
        let longest = counts.iter().copied().max().unwrap_or(0) as usize;
        let mut mine: Vec<u32> = edges
            .iter()
            .flat_map(|&(s, d, w)| [s as u32, d as u32, w as u32])
            .collect();
        mine.resize(3 * longest, 0);
        let all = u32s(&self.allgather_fixed(comm, &bytes(&mine))?);
        let (mut ins, mut outs) = (Vec::new(), Vec::new());
        for (p, chunk) in all.chunks(3 * longest.max(1)).enumerate() {
            for e in chunk.chunks_exact(3).take(counts[p] as usize) {
                let (s, d, w) = (e[0] as i32, e[1] as i32, e[2] as i32);
                if d == me {
                    ins.push((s, w));
                }
                if s == me {
                    outs.push((d, w));
                }
            }
        }
        Ok((ins, outs))
    }
}

/// What an intercommunicator is made of: this process's rank in its local group, both
/// groups (world ranks), and whether the local group comes first in their union.
pub(super) struct InterParts {
    pub lrank: usize,
    pub local: Arc<[u32]>,
    pub remote: Arc<[u32]>,
    pub local_first: bool,
}

impl Ferrite {
    /// The helper communicators of an intercommunicator with ids `context..context + 6`:
    /// its local group (`context + 2`) and the union of both (`context + 4`).
    pub(super) fn inter_helpers(
        &mut self,
        context: u32,
        parts: &InterParts,
        errhandler: MPI_Errhandler,
    ) -> Inter {
        let InterParts {
            lrank,
            ref local,
            ref remote,
            local_first,
        } = *parts;
        let union: Arc<[u32]> = if local_first {
            local.iter().chain(remote.iter()).copied().collect()
        } else {
            remote.iter().chain(local.iter()).copied().collect()
        };
        let urank = if local_first {
            lrank
        } else {
            remote.len() + lrank
        };
        let comms = &mut self.objects.comms;
        let local_comm = comms.user.insert(Comm::new(
            context + 2,
            lrank as u32,
            local.clone(),
            errhandler,
        ));
        let union_comm = comms
            .user
            .insert(Comm::new(context + 4, urank as u32, union, errhandler));
        Inter {
            remote: remote.clone(),
            local_comm,
            union_comm,
        }
    }
}
