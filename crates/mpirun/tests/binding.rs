//! CPU binding as the ranks see it (their Cpus_allowed_list), against the CPUs this test
//! process may use, which mpirun inherits.

use std::process::Command;

const MPIRUN: &str = env!("CARGO_BIN_EXE_mpirun");
const SHOW: &str = "echo $PMI_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)";

/// Parses a kernel CPU list such as "0-2,5".
fn parse_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

fn own_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    parse_list(line)
}

/// The CPUs each rank may run on, by rank.
fn rank_cpus(args: &[&str]) -> Vec<Vec<usize>> {
    let out = Command::new(MPIRUN)
        .args(args)
        .args(["sh", "-c", SHOW])
        .output()
        .expect("run mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ranks: Vec<(usize, Vec<usize>)> = stdout
        .lines()
        .map(|l| {
            let (r, list) = l.split_once(' ').expect("rank and list");
            (r.parse().unwrap(), parse_list(list))
        })
        .collect();
    ranks.sort();
    ranks.into_iter().map(|(_, c)| c).collect()
}

#[test]
fn a_rank_per_cpu_is_bound_to_its_own_cpu() {
    let cpus = own_cpus();
    assert_eq!(rank_cpus(&["-n", "1"]), [vec![cpus[0]]]);
    let n = cpus.len().to_string();
    let expected: Vec<Vec<usize>> = cpus.iter().map(|&c| vec![c]).collect();
    assert_eq!(rank_cpus(&["-n", &n]), expected);
}

#[test]
fn an_oversubscribed_job_is_not_bound() {
    let cpus = own_cpus();
    let n = cpus.len() + 1;
    assert_eq!(rank_cpus(&["-n", &n.to_string()]), vec![cpus.clone(); n]);
}

#[test]
fn bind_to_overrides_the_default() {
    let cpus = own_cpus();
    assert_eq!(
        rank_cpus(&["--bind-to", "none", "-n", "1"]),
        vec![cpus.clone()]
    );
    let n = cpus.len() + 1;
    let expected: Vec<Vec<usize>> = (0..n).map(|r| vec![cpus[r % cpus.len()]]).collect();
    assert_eq!(
        rank_cpus(&["--bind-to", "core", "-n", &n.to_string()]),
        expected
    );
}

/// The CPUs of `cpus` that /sys puts in the same domain as `cpu` (`key` reads a CPU's
/// domain id from its topology directory).
fn same_domain(cpus: &[usize], cpu: usize, key: impl Fn(usize) -> String) -> Vec<usize> {
    cpus.iter()
        .copied()
        .filter(|&c| key(c) == key(cpu))
        .collect()
}

fn package(c: usize) -> String {
    std::fs::read_to_string(format!(
        "/sys/devices/system/cpu/cpu{c}/topology/physical_package_id"
    ))
    .unwrap_or_default()
}

#[test]
fn bind_to_socket_numa_and_hwthread() {
    let cpus = own_cpus();
    let n = cpus.len().min(2).to_string();
    // A socket-bound rank may use every CPU of its socket (of mpirun's set).
    for (r, set) in rank_cpus(&["--bind-to", "socket", "-n", &n])
        .iter()
        .enumerate()
    {
        assert_eq!(*set, same_domain(&cpus, set[0], package), "rank {r}");
    }
    let node_of = |c: usize| -> String {
        let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") else {
            return String::new();
        };
        for e in dir.flatten() {
            let list = std::fs::read_to_string(e.path().join("cpulist")).unwrap_or_default();
            if parse_list(&list).contains(&c) {
                return e.file_name().to_string_lossy().into_owned();
            }
        }
        String::new()
    };
    for (r, set) in rank_cpus(&["--bind-to", "numa", "--map-by", "numa", "-n", &n])
        .iter()
        .enumerate()
    {
        assert_eq!(*set, same_domain(&cpus, set[0], node_of), "rank {r}");
    }
    let expected: Vec<Vec<usize>> = cpus.iter().take(2).map(|&c| vec![c]).collect();
    assert_eq!(rank_cpus(&["--bind-to", "hwthread", "-n", &n]), expected);
}
