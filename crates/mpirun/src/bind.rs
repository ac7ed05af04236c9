//! Mapping ranks to CPUs and binding them there. Busy-polling ranks that share a CPU wait
//! for each other's time slices, so, like Open MPI's default, a host with no more ranks
//! than the CPUs mpirun may use gets one CPU (hwthread) per rank; an oversubscribed host is
//! left unbound (the scheduler then spreads the ranks as it sees fit). `--bind-to` and
//! `--map-by` override, with the topology read from /sys (cores, sockets, NUMA nodes).

/// The `--bind-to` choice: the domain a rank is confined to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bind {
    /// One hwthread per rank unless the host has more ranks than CPUs.
    Auto,
    HwThread,
    /// Every hwthread of the rank's core.
    Core,
    Socket,
    Numa,
    /// No binding: ranks inherit mpirun's affinity.
    None,
}

/// The `--map-by` choice: the order in which a host's ranks take its CPUs (or, for
/// `Node`, the hosts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapBy {
    /// Consecutive slots of a host; on the host, consecutive cores.
    Slot,
    Core,
    HwThread,
    /// Round the sockets: rank 0 on socket 0, rank 1 on socket 1, ...
    Socket,
    Numa,
    /// Round the hosts, one rank at a time.
    Node,
}

/// Drops Open MPI's `:modifiers` (`core:overload-allowed`, `slot:oversubscribe`, ...).
fn base(v: &str) -> String {
    v.split(':').next().unwrap_or("").to_ascii_lowercase()
}

impl Bind {
    pub fn parse(v: &str) -> Result<Bind, String> {
        match base(v).as_str() {
            "core" | "cores" => Ok(Bind::Core),
            "hwthread" | "hwthreads" | "thread" | "threads" => Ok(Bind::HwThread),
            "socket" | "sockets" | "package" => Ok(Bind::Socket),
            "numa" | "numanode" => Ok(Bind::Numa),
            "none" => Ok(Bind::None),
            _ => Err(format!(
                "--bind-to {v:?}: expected core, hwthread, socket, numa or none"
            )),
        }
    }
}

impl MapBy {
    /// The mapping and, for `ppr:N:node`, the ranks per node it asks for.
    pub fn parse(v: &str) -> Result<(MapBy, Option<u32>), String> {
        let lower = v.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("ppr:") {
            let mut parts = rest.split(':');
            let n = parts
                .next()
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|&n| n > 0);
            return match (n, parts.next()) {
                (Some(n), Some("node")) => Ok((MapBy::Slot, Some(n))),
                _ => Err(format!(
                    "--map-by {v:?}: only ppr:N:node is supported among the ppr forms"
                )),
            };
        }
        let map = match base(v).as_str() {
            "slot" | "slots" | "board" => MapBy::Slot,
            "core" | "cores" => MapBy::Core,
            "hwthread" | "hwthreads" => MapBy::HwThread,
            "socket" | "sockets" | "package" => MapBy::Socket,
            "numa" | "numanode" => MapBy::Numa,
            "node" | "nodes" => MapBy::Node,
            _ => {
                return Err(format!(
                    "--map-by {v:?}: expected slot, core, hwthread, socket, numa, node or \
                     ppr:N:node"
                ))
            }
        };
        Ok((map, None))
    }
}

/// One CPU mpirun may use, with where it sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    pub id: usize,
    /// (socket, core id): the hwthreads of one core share it.
    pub core: (usize, usize),
    pub socket: usize,
    pub numa: usize,
}

/// Parses a kernel CPU list such as "0-2,5".
pub fn parse_cpu_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

/// The kernel's compact form of a CPU list: "0-2,5".
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Where each of `cpus` sits, from /sys; a CPU /sys says nothing about is its own core on
/// socket 0 and NUMA node 0.
pub fn topology(cpus: &[usize]) -> Vec<Cpu> {
    let read = |p: String| std::fs::read_to_string(p).ok();
    let num = |p: String| read(p).and_then(|s| s.trim().parse::<usize>().ok());
    let mut numa_of = std::collections::HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(n) = name
                .strip_prefix("node")
                .and_then(|n| n.parse::<usize>().ok())
            {
                let list = read(format!("{}/cpulist", e.path().display())).unwrap_or_default();
                for c in parse_cpu_list(&list) {
                    numa_of.insert(c, n);
                }
            }
        }
    }
    cpus.iter()
        .map(|&id| {
            let t = format!("/sys/devices/system/cpu/cpu{id}/topology");
            let socket = num(format!("{t}/physical_package_id")).unwrap_or(0);
            Cpu {
                id,
                core: (socket, num(format!("{t}/core_id")).unwrap_or(id)),
                socket,
                numa: numa_of.get(&id).copied().unwrap_or(0),
            }
        })
        .collect()
}

/// Groups of `topo` (indices) sharing `key`, in order of first appearance.
fn groups<K: PartialEq>(topo: &[Cpu], key: impl Fn(&Cpu) -> K) -> Vec<Vec<usize>> {
    let mut keys: Vec<K> = Vec::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, c) in topo.iter().enumerate() {
        let k = key(c);
        match keys.iter().position(|x| *x == k) {
            Some(g) => out[g].push(i),
            None => {
                keys.push(k);
                out.push(vec![i]);
            }
        }
    }
    out
}

/// The CPUs (ids, ascending) the rank with place `local_rank` among its host's `local_n`
/// ranks is bound to, given the CPUs mpirun may use; `None`: not bound.
pub fn cpus_for(
    bind: Bind,
    map: MapBy,
    local_rank: u32,
    local_n: u32,
    topo: &[Cpu],
) -> Option<Vec<usize>> {
    if topo.is_empty() {
        return None;
    }
    let level = match bind {
        Bind::None => return None,
        Bind::Auto if local_n as usize > topo.len() => return None,
        Bind::Auto => Bind::HwThread,
        b => b,
    };
    // The order the host's ranks take its cores (or hwthreads): a representative CPU each.
    let per_thread = map == MapBy::HwThread || level == Bind::HwThread;
    let units: Vec<usize> = if per_thread {
        (0..topo.len()).collect()
    } else {
        groups(topo, |c| c.core).iter().map(|g| g[0]).collect()
    };
    let spread_over = match map {
        MapBy::Socket => Some(groups(topo, |c| c.socket)),
        MapBy::Numa => Some(groups(topo, |c| c.numa)),
        _ => None,
    };
    let order: Vec<usize> = match spread_over {
        None => units,
        Some(domains) => {
            // Round the domains: the first unit of each, then the second of each, ...
            let lists: Vec<Vec<usize>> = domains
                .iter()
                .map(|d| units.iter().copied().filter(|u| d.contains(u)).collect())
                .collect();
            let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
            (0..longest)
                .flat_map(|k| lists.iter().filter_map(move |l| l.get(k).copied()))
                .collect()
        }
    };
    let at = topo[order[local_rank as usize % order.len()]];
    let mut set: Vec<usize> = topo
        .iter()
        .filter(|c| match level {
            Bind::HwThread => c.id == at.id,
            Bind::Core => c.core == at.core,
            Bind::Socket => c.socket == at.socket,
            _ => c.numa == at.numa,
        })
        .map(|c| c.id)
        .collect();
    set.sort_unstable();
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sockets` sockets of `cores` cores of `threads` hwthreads, numbered as Linux does
    /// (first every core's first hwthread, then the second ones); one NUMA node per socket.
    fn machine(sockets: usize, cores: usize, threads: usize) -> Vec<Cpu> {
        let per_thread = sockets * cores;
        let mut v = Vec::new();
        for t in 0..threads {
            for s in 0..sockets {
                for c in 0..cores {
                    v.push(Cpu {
                        id: t * per_thread + s * cores + c,
                        core: (s, c),
                        socket: s,
                        numa: s,
                    });
                }
            }
        }
        v.sort_by_key(|c| c.id);
        v
    }

    fn all(bind: Bind, map: MapBy, np: u32, topo: &[Cpu]) -> Vec<Option<Vec<usize>>> {
        (0..np).map(|r| cpus_for(bind, map, r, np, topo)).collect()
    }

    #[test]
    fn one_cpu_per_rank_unless_oversubscribed() {
        let topo: Vec<Cpu> = [2, 3, 5]
            .iter()
            .map(|&id| Cpu {
                id,
                core: (0, id),
                socket: 0,
                numa: 0,
            })
            .collect();
        let s = |v: &[usize]| Some(v.to_vec());
        assert_eq!(all(Bind::Auto, MapBy::Slot, 1, &topo), [s(&[2])]);
        assert_eq!(
            all(Bind::Auto, MapBy::Slot, 3, &topo),
            [s(&[2]), s(&[3]), s(&[5])]
        );
        assert_eq!(
            all(Bind::Auto, MapBy::Slot, 4, &topo),
            [None, None, None, None]
        );
        assert_eq!(
            all(Bind::Core, MapBy::Slot, 4, &topo),
            [s(&[2]), s(&[3]), s(&[5]), s(&[2])]
        );
        assert_eq!(all(Bind::None, MapBy::Slot, 2, &topo), [None, None]);
        assert_eq!(cpus_for(Bind::Core, MapBy::Slot, 0, 1, &[]), None);
    }

    #[test]
    fn domains_and_mappings_on_two_sockets_with_smt() {
        // 2 sockets x 2 cores x 2 hwthreads: core (0,0) = cpus 0 and 4, socket 1 = 2,3,6,7.
        let m = machine(2, 2, 2);
        let s = |v: &[usize]| Some(v.to_vec());
        assert_eq!(
            all(Bind::Core, MapBy::Core, 3, &m),
            [s(&[0, 4]), s(&[1, 5]), s(&[2, 6])]
        );
        assert_eq!(all(Bind::HwThread, MapBy::Core, 2, &m), [s(&[0]), s(&[1])]);
        assert_eq!(
            all(Bind::Socket, MapBy::Core, 3, &m),
            [s(&[0, 1, 4, 5]), s(&[0, 1, 4, 5]), s(&[2, 3, 6, 7])]
        );
        // Round the sockets: ranks alternate.
        assert_eq!(
            all(Bind::Core, MapBy::Socket, 3, &m),
            [s(&[0, 4]), s(&[2, 6]), s(&[1, 5])]
        );
        assert_eq!(
            all(Bind::Numa, MapBy::Numa, 2, &m),
            [s(&[0, 1, 4, 5]), s(&[2, 3, 6, 7])]
        );
        assert_eq!(
            all(Bind::HwThread, MapBy::HwThread, 2, &m),
            [s(&[0]), s(&[1])]
        );
    }

    #[test]
    fn parse_values() {
        assert_eq!(Bind::parse("core"), Ok(Bind::Core));
        assert_eq!(Bind::parse("none"), Ok(Bind::None));
        assert_eq!(Bind::parse("socket"), Ok(Bind::Socket));
        assert_eq!(Bind::parse("hwthread"), Ok(Bind::HwThread));
        assert_eq!(Bind::parse("numa"), Ok(Bind::Numa));
        assert_eq!(Bind::parse("core:overload-allowed"), Ok(Bind::Core));
        assert!(Bind::parse("board").unwrap_err().contains("expected core"));
        assert_eq!(MapBy::parse("node"), Ok((MapBy::Node, None)));
        assert_eq!(MapBy::parse("slot:oversubscribe"), Ok((MapBy::Slot, None)));
        assert_eq!(MapBy::parse("ppr:2:node"), Ok((MapBy::Slot, Some(2))));
        assert!(MapBy::parse("ppr:2:socket")
            .unwrap_err()
            .contains("ppr:N:node"));
        assert!(MapBy::parse("dist").unwrap_err().contains("expected slot"));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-2,5\n"), [0, 1, 2, 5]);
        assert_eq!(format_cpu_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(format_cpu_list(&[3]), "3");
    }
}
