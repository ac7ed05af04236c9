//! Binding ranks to CPUs. Busy-polling ranks that share a CPU wait for each other's time
//! slices, so, like Open MPI's default, a job with no more ranks than the CPUs mpirun may
//! use gets one CPU per rank; an oversubscribed job is left unbound (the scheduler then
//! spreads the ranks as it sees fit). `--bind-to core|none` overrides.

/// The `--bind-to` choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bind {
    /// One CPU per rank unless the job has more ranks than CPUs.
    Auto,
    /// Rank i on CPU (i mod n) of mpirun's set, oversubscribed or not.
    Core,
    /// No binding: ranks inherit mpirun's affinity.
    None,
}

impl Bind {
    pub fn parse(v: &str) -> Result<Bind, String> {
        match v {
            "core" | "cores" => Ok(Bind::Core),
            "none" => Ok(Bind::None),
            _ => Err(format!("--bind-to {v:?}: expected core or none")),
        }
    }
}

/// The CPU rank `rank` of `np` is bound to, given mpirun's own CPUs (`cpus`, ascending).
pub fn cpu_for(bind: Bind, rank: u32, np: u32, cpus: &[usize]) -> Option<usize> {
    if cpus.is_empty() {
        return None;
    }
    match bind {
        Bind::None => None,
        Bind::Auto if np as usize > cpus.len() => None,
        Bind::Auto | Bind::Core => Some(cpus[rank as usize % cpus.len()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cpu_per_rank_unless_oversubscribed() {
        let cpus = [2, 3, 5];
        let all = |bind, np| {
            (0..np)
                .map(|r| cpu_for(bind, r, np, &cpus))
                .collect::<Vec<_>>()
        };
        assert_eq!(all(Bind::Auto, 1), [Some(2)]);
        assert_eq!(all(Bind::Auto, 3), [Some(2), Some(3), Some(5)]);
        assert_eq!(all(Bind::Auto, 4), [None; 4]);
        assert_eq!(all(Bind::Core, 4), [Some(2), Some(3), Some(5), Some(2)]);
        assert_eq!(all(Bind::None, 2), [None; 2]);
        assert_eq!(cpu_for(Bind::Core, 0, 1, &[]), None);
    }

    #[test]
    fn parse_values() {
        assert_eq!(Bind::parse("core"), Ok(Bind::Core));
        assert_eq!(Bind::parse("none"), Ok(Bind::None));
        assert!(Bind::parse("socket").unwrap_err().contains("core or none"));
    }
}
