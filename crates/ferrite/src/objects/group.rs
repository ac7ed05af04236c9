//! Groups: ordered sets of processes, kept as the world rank of each member.

use super::handles::{kind, HandleTable};
use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use std::sync::Arc;

pub type Group = Arc<[u32]>;

pub struct Groups {
    pub user: HandleTable<Group>,
    empty: Group,
}

impl Default for Groups {
    fn default() -> Self {
        Groups {
            user: HandleTable::new(kind::GROUP),
            empty: Arc::from([]),
        }
    }
}

impl Groups {
    pub fn get(&self, h: MPI_Group) -> MpiResult<Group> {
        if h == MPI_GROUP_EMPTY {
            return Ok(self.empty.clone());
        }
        self.user.get(h).cloned().ok_or_else(|| {
            if h == MPI_GROUP_NULL {
                MpiError::new(MPI_ERR_GROUP, "null group (MPI_GROUP_NULL)")
            } else {
                crate::mpi_err!(MPI_ERR_GROUP, "invalid group handle {:#x}", h as u32)
            }
        })
    }

    /// A handle for `g` (MPI_GROUP_EMPTY when it has no members).
    pub fn insert(&mut self, g: Group) -> MPI_Group {
        if g.is_empty() {
            MPI_GROUP_EMPTY
        } else {
            self.user.insert(g)
        }
    }
}

/// Rank of world rank `w` in `g`, if a member.
pub fn rank_of(g: &[u32], w: u32) -> Option<usize> {
    g.iter().position(|&x| x == w)
}

/// MPI_Group_compare's result.
pub fn compare(a: &[u32], b: &[u32]) -> i32 {
    if a == b {
        MPI_IDENT
    } else {
        let mut x = a.to_vec();
        let mut y = b.to_vec();
        x.sort_unstable();
        y.sort_unstable();
        if x == y {
            MPI_SIMILAR
        } else {
            MPI_UNEQUAL
        }
    }
}

/// Members of `a`, then members of `b` not in `a` (MPI_Group_union).
pub fn union(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut v = a.to_vec();
    v.extend(b.iter().filter(|x| !a.contains(x)));
    v
}

/// Members of `a` also in `b`, in `a`'s order.
pub fn intersection(a: &[u32], b: &[u32]) -> Vec<u32> {
    a.iter().copied().filter(|x| b.contains(x)).collect()
}

/// Members of `a` not in `b`, in `a`'s order.
pub fn difference(a: &[u32], b: &[u32]) -> Vec<u32> {
    a.iter().copied().filter(|x| !b.contains(x)).collect()
}

/// Expands MPI range triplets (first, last, stride) into ranks of a group of `n`.
pub fn ranges(n: usize, triplets: &[[i32; 3]]) -> MpiResult<Vec<usize>> {
    let mut v = Vec::new();
    for &[first, last, stride] in triplets {
        if stride == 0 {
            return Err(crate::mpi_err!(
                MPI_ERR_ARG,
                "range ({first}, {last}, 0) has stride 0"
            ));
        }
        if (stride > 0 && first > last) || (stride < 0 && first < last) {
            continue;
        }
        let mut r = first;
        while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
            if r < 0 || r as usize >= n {
                return Err(crate::mpi_err!(
                    MPI_ERR_RANK,
                    "rank {r} of range ({first}, {last}, {stride}) not in a group of size {n}"
                ));
            }
            v.push(r as usize);
            r += stride;
        }
    }
    Ok(v)
}

/// Checks ranks for incl/excl: in range and distinct.
pub fn check_ranks(n: usize, ranks: &[usize]) -> MpiResult<()> {
    let mut seen = vec![false; n];
    for &r in ranks {
        if r >= n {
            return Err(crate::mpi_err!(
                MPI_ERR_RANK,
                "rank {r} not in a group of size {n}"
            ));
        }
        if std::mem::replace(&mut seen[r], true) {
            return Err(crate::mpi_err!(MPI_ERR_RANK, "rank {r} given twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations_keep_the_first_groups_order() {
        let a = [5, 1, 3];
        let b = [3, 7, 5];
        assert_eq!(union(&a, &b), vec![5, 1, 3, 7]);
        assert_eq!(intersection(&a, &b), vec![5, 3]);
        assert_eq!(difference(&a, &b), vec![1]);
        assert_eq!(compare(&a, &[1, 3, 5]), MPI_SIMILAR);
        assert_eq!(compare(&a, &a), MPI_IDENT);
        assert_eq!(compare(&a, &b), MPI_UNEQUAL);
    }

    #[test]
    fn ranges_expand_both_directions() {
        assert_eq!(
            ranges(10, &[[0, 6, 3], [9, 7, -1]]).unwrap(),
            vec![0, 3, 6, 9, 8, 7]
        );
        assert!(ranges(4, &[[0, 4, 1]]).is_err());
        assert!(ranges(4, &[[0, 3, 0]]).is_err());
        assert!(check_ranks(4, &[1, 1]).is_err());
    }
}
