//! Which ranks share a host, from the launcher's `PMI_process_mapping` (MPICH's format,
//! which mpirun and Hydra both publish): `(vector,(node,nodes,ranks-per-node),...)`.
//! Each block gives `ranks-per-node` consecutive ranks to each of `nodes` nodes starting at
//! `node`; when the blocks cover fewer ranks than the job has, the pattern repeats. Kept as
//! runs, so the map costs memory per block, not per rank.

/// Host (node) of every rank; `None` from [`NodeMap::parse`] means "could not tell".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMap {
    /// (first rank, node) of each run of consecutive ranks on one node, ascending.
    runs: Vec<(u32, u32)>,
    /// Ranks the runs cover; rank r is placed like r mod covered.
    covered: u32,
}

impl NodeMap {
    /// Parses a mapping; `None` if it is malformed or empty (the caller then assumes one host).
    pub fn parse(s: &str) -> Option<NodeMap> {
        let body = s.trim().strip_prefix('(')?.strip_suffix(')')?;
        let rest = body.trim_start().strip_prefix("vector")?.trim_start();
        let mut runs: Vec<(u32, u32)> = Vec::new();
        let mut covered: u32 = 0;
        let mut rest = rest;
        while let Some(r) = rest.strip_prefix(',') {
            let r = r.trim_start().strip_prefix('(')?;
            let (block, after) = r.split_once(')')?;
            rest = after.trim_start();
            let nums: Vec<u32> = block
                .split(',')
                .map(|x| x.trim().parse().ok())
                .collect::<Option<_>>()?;
            let &[node, nodes, per] = nums.as_slice() else {
                return None;
            };
            for k in 0..nodes {
                if per == 0 {
                    break;
                }
                let node = node.checked_add(k)?;
                if runs.last().map(|&(_, n)| n) != Some(node) {
                    runs.push((covered, node));
                }
                covered = covered.checked_add(per)?;
            }
        }
        if !rest.is_empty() || covered == 0 {
            return None;
        }
        Some(NodeMap { runs, covered })
    }

    /// The node rank `r` runs on.
    pub fn node_of(&self, r: u32) -> u32 {
        let r = r % self.covered;
        let i = self.runs.partition_point(|&(first, _)| first <= r);
        self.runs[i - 1].1
    }

    /// Whether the ranks of a job of `size` are on more than one node.
    pub fn spans_nodes(&self, size: u32) -> bool {
        let first = self.node_of(0);
        (1..size.min(self.covered)).any(|r| self.node_of(r) != first)
    }

    /// How many of a job's `size` ranks run on `node`.
    pub fn ranks_on(&self, node: u32, size: u32) -> u32 {
        if !self.runs.iter().any(|&(_, n)| n == node) {
            return 0;
        }
        (0..size).filter(|&r| self.node_of(r) == node).count() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_runs_and_wrapping() {
        let m = NodeMap::parse("(vector,(0,2,2),(2,1,1))").unwrap();
        let nodes: Vec<u32> = (0..7).map(|r| m.node_of(r)).collect();
        assert_eq!(
            nodes,
            [0, 0, 1, 1, 2, 0, 0],
            "5 ranks covered, then it repeats"
        );
        assert!(m.spans_nodes(3) && !m.spans_nodes(2));
        assert_eq!(
            (m.ranks_on(0, 7), m.ranks_on(2, 7), m.ranks_on(9, 7)),
            (4, 1, 0)
        );
        let one = NodeMap::parse(" (vector, (0,1,16) ) ").unwrap();
        assert!(!one.spans_nodes(16));
        assert_eq!(one.node_of(15), 0);
        let rr = NodeMap::parse("(vector,(0,3,1))").unwrap();
        assert_eq!(
            (0..4).map(|r| rr.node_of(r)).collect::<Vec<_>>(),
            [0, 1, 2, 0]
        );
    }

    #[test]
    fn malformed_mappings_are_refused() {
        for bad in [
            "",
            "(vector)",
            "(vector,(0,1))",
            "(vector,(0,1,x))",
            "(vector,(0,1,2)",
            "(list,(0,1,2))",
            "(vector,(0,1,0))",
            "(vector,(0,1,2))junk",
        ] {
            assert_eq!(NodeMap::parse(bad), None, "{bad:?}");
        }
    }
}
