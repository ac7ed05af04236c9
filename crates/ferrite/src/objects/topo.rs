//! Process topologies (MPI 4.1 chapter 8): Cartesian grids, graphs and distributed graphs
//! attached to a communicator, and the pure arithmetic on them.

use crate::consts::*;
use crate::error::MpiResult;

#[derive(Clone, Debug, PartialEq)]
pub enum Topo {
    Cart {
        dims: Vec<i32>,
        periods: Vec<bool>,
    },
    /// MPI_Graph_create's arguments: node i's neighbours are edges[index[i-1]..index[i]].
    Graph {
        index: Vec<i32>,
        edges: Vec<i32>,
    },
    /// This process's in- and out-neighbours; weights are None for MPI_UNWEIGHTED.
    DistGraph {
        sources: Vec<i32>,
        source_weights: Option<Vec<i32>>,
        dests: Vec<i32>,
        dest_weights: Option<Vec<i32>>,
    },
}

/// Neighbours as neighbourhood collectives see them.
#[derive(Clone, Debug, PartialEq)]
pub struct Neighbors {
    pub sources: Vec<i32>,
    pub dests: Vec<i32>,
    /// (source weights, destination weights) of a weighted distributed graph.
    pub weights: Option<(Vec<i32>, Vec<i32>)>,
}

impl Topo {
    /// MPI_Topo_test's answer.
    pub fn kind(&self) -> i32 {
        match self {
            Topo::Cart { .. } => MPI_CART,
            Topo::Graph { .. } => MPI_GRAPH,
            Topo::DistGraph { .. } => MPI_DIST_GRAPH,
        }
    }

    /// Neighbours of `rank` in a graph topology.
    pub fn graph_neighbors(&self, rank: usize) -> Option<&[i32]> {
        match self {
            Topo::Graph { index, edges } => {
                let start = if rank == 0 {
                    0
                } else {
                    index[rank - 1] as usize
                };
                Some(&edges[start..index[rank] as usize])
            }
            _ => None,
        }
    }
}

/// MPI_Dims_create: fills the zero entries of `dims` so that the product is `nnodes`, the
/// free dimensions as close to each other as possible and in non-increasing order.
/// Splits `n` into `k` factors in non-increasing order with the smallest spread (largest
/// minus smallest), ties going to the largest smallest factor, then the largest second
/// smallest, and so on (MPICH's choice, which its dims tests check): a search over divisors,
/// each factor no larger than the previous and no smaller than the k-th root of what is
/// left.
fn balanced(n: i64, k: usize) -> Vec<i64> {
    fn divisors(n: i64) -> Vec<i64> {
        let mut small = Vec::new();
        let mut large = Vec::new();
        let mut i = 1;
        while i * i <= n {
            if n % i == 0 {
                small.push(i);
                if i * i != n {
                    large.push(n / i);
                }
            }
            i += 1;
        }
        small.extend(large.into_iter().rev());
        small
    }
    fn search(n: i64, k: usize, max: i64, acc: &mut Vec<i64>, best: &mut Option<Vec<i64>>) {
        if k == 1 {
            if n <= max {
                acc.push(n);
                let spread = |d: &[i64]| d[0] - d[d.len() - 1];
                let better = match best {
                    None => true,
                    Some(b) => {
                        spread(acc) < spread(b)
                            || (spread(acc) == spread(b) && acc.iter().rev().gt(b.iter().rev()))
                    }
                };
                if better {
                    *best = Some(acc.clone());
                }
                acc.pop();
            }
            return;
        }
        for f in divisors(n).into_iter().rev() {
            if f > max {
                continue;
            }
            // f^k (saturating: 300000^7 overflows even i128) must reach n.
            if (f as i128).saturating_pow(k as u32) < n as i128 {
                break;
            }
            acc.push(f);
            search(n / f, k - 1, f, acc, best);
            acc.pop();
        }
    }
    let mut best = None;
    search(n, k, n, &mut Vec::with_capacity(k), &mut best);
    best.unwrap_or_else(|| vec![1; k])
}

pub fn dims_create(nnodes: i32, dims: &mut [i32]) -> MpiResult<()> {
    if nnodes <= 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "nnodes {nnodes} must be positive"
        ));
    }
    if let Some(d) = dims.iter().find(|&&d| d < 0) {
        return Err(crate::mpi_err!(MPI_ERR_DIMS, "negative dimension {d}"));
    }
    let fixed: i64 = dims.iter().filter(|&&d| d > 0).map(|&d| d as i64).product();
    if nnodes as i64 % fixed != 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_DIMS,
            "{nnodes} nodes cannot fill dimensions {dims:?} (fixed product {fixed})"
        ));
    }
    let free: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] == 0).collect();
    let rest = nnodes as i64 / fixed;
    if free.is_empty() {
        if rest != 1 {
            return Err(crate::mpi_err!(
                MPI_ERR_DIMS,
                "dimensions {dims:?} multiply to {fixed}, not {nnodes}"
            ));
        }
        return Ok(());
    }
    // The most balanced split of `rest` into free.len() factors (MPI 4.1 8.5.2: "as close
    // to each other as possible"): the smallest spread between the largest and smallest
    // factor, ties as MPICH breaks them (see `balanced`).
    let mut vals = balanced(rest, free.len());
    vals.sort_unstable_by(|a, b| b.cmp(a));
    for (k, &i) in free.iter().enumerate() {
        dims[i] = vals[k] as i32;
    }
    Ok(())
}

/// Coordinates of `rank` in a row-major grid of `dims`.
pub fn cart_coords(dims: &[i32], mut rank: i32) -> Vec<i32> {
    let mut c = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        c[d] = rank % dims[d];
        rank /= dims[d];
    }
    c
}

/// Rank at `coords`; periodic dimensions wrap, others must be in range.
pub fn cart_rank(dims: &[i32], periods: &[bool], coords: &[i32]) -> MpiResult<i32> {
    let mut r = 0i32;
    for d in 0..dims.len() {
        let mut c = coords[d];
        if periods[d] {
            c = c.rem_euclid(dims[d]);
        } else if c < 0 || c >= dims[d] {
            return Err(crate::mpi_err!(
                MPI_ERR_ARG,
                "coordinate {c} out of range 0..{} in non-periodic dimension {d}",
                dims[d]
            ));
        }
        r = r * dims[d] + c;
    }
    Ok(r)
}

/// MPI_Cart_shift: (source, dest) of a shift by `disp` along `dir` from `rank`.
pub fn cart_shift(dims: &[i32], periods: &[bool], rank: i32, dir: usize, disp: i32) -> (i32, i32) {
    let c = cart_coords(dims, rank);
    let at = |delta: i32| {
        let mut x = c.clone();
        x[dir] += delta;
        if !periods[dir] && (x[dir] < 0 || x[dir] >= dims[dir]) {
            MPI_PROC_NULL
        } else {
            cart_rank(dims, periods, &x).unwrap_or(MPI_PROC_NULL)
        }
    };
    (at(-disp), at(disp))
}

/// Neighbours of `rank` in a Cartesian grid, in the order neighbourhood collectives use:
/// for each dimension, the negative then the positive direction (MPI_PROC_NULL off an edge).
pub fn cart_neighbors(dims: &[i32], periods: &[bool], rank: i32) -> Vec<i32> {
    let mut v = Vec::with_capacity(2 * dims.len());
    for d in 0..dims.len() {
        let (src, dst) = cart_shift(dims, periods, rank, d, 1);
        v.push(src);
        v.push(dst);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(n: i32, mut d: Vec<i32>) -> Vec<i32> {
        dims_create(n, &mut d).unwrap();
        d
    }

    #[test]
    fn dims_are_balanced_and_non_increasing() {
        assert_eq!(dims(12, vec![0, 0]), vec![4, 3]);
        assert_eq!(dims(16, vec![0, 0, 0]), vec![4, 2, 2]);
        assert_eq!(dims(36, vec![0, 0]), vec![6, 6]);
        assert_eq!(dims(7, vec![0, 0]), vec![7, 1]);
        assert_eq!(dims(12, vec![0, 3, 0]), vec![2, 3, 2]);
        assert_eq!(dims(1, vec![0, 0]), vec![1, 1]);
        // The most balanced split, not a greedy one (greedy prime placement gave 28 x 18).
        assert_eq!(dims(504, vec![0, 0]), vec![24, 21]);
        assert_eq!(dims(1323, vec![0, 0]), vec![49, 27]);
        assert_eq!(dims(95580, vec![0, 0, 0, 0]), vec![59, 15, 12, 9]);
        assert_eq!(dims(999_983, vec![0, 0, 0]), vec![999_983, 1, 1]);
        // Equal spreads: the largest smallest factor wins (as MPICH; its dims5 test).
        assert_eq!(dims(5040, vec![0, 0, 0]), vec![21, 16, 15]);
        assert_eq!(dims(10800, vec![0, 0, 0]), vec![27, 20, 20]);
        // Large sizes in many dimensions (the search's bound overflowed: all ones).
        assert_eq!(dims(300_000, vec![0; 7]), vec![10, 8, 6, 5, 5, 5, 5]);
        assert_eq!(dims(421_875, vec![0; 7]), vec![15, 9, 5, 5, 5, 5, 5]);
        assert!(dims_create(10, &mut [3, 0]).is_err());
        assert!(dims_create(6, &mut [2, 2]).is_err());
    }

    #[test]
    fn cartesian_ranks_coords_and_shifts() {
        let d = [3, 4];
        let p = [true, false];
        assert_eq!(cart_coords(&d, 7), vec![1, 3]);
        assert_eq!(cart_rank(&d, &p, &[1, 3]).unwrap(), 7);
        assert_eq!(cart_rank(&d, &p, &[-1, 3]).unwrap(), 11);
        assert!(cart_rank(&d, &p, &[0, 4]).is_err());
        assert_eq!(cart_shift(&d, &p, 7, 0, 1), (3, 11));
        assert_eq!(cart_shift(&d, &p, 7, 1, 1), (6, MPI_PROC_NULL));
        assert_eq!(cart_shift(&d, &p, 0, 0, -1), (4, 8));
        assert_eq!(cart_neighbors(&d, &p, 0), vec![8, 4, MPI_PROC_NULL, 1]);
    }
}
