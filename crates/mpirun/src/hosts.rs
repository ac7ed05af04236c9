//! Hosts: `--host a,b:2`, `--hostfile FILE` (`host [slots=N]` lines), where each rank runs,
//! and the PMI_process_mapping value that tells the ranks which of them share a host.

/// One host entry as given: a name and its slots (ranks it takes per pass).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSpec {
    pub name: String,
    pub slots: u32,
}

fn slots_value(v: &str, what: &str) -> Result<u32, String> {
    v.parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{what}: {v:?} is not a positive number of slots"))
}

/// `a,b:2,c`: each name with an optional `:slots` (default 1).
pub fn parse_host_list(list: &str) -> Result<Vec<HostSpec>, String> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(format!("--host {list:?}: empty host name"));
        }
        let (name, slots) = match item.rsplit_once(':') {
            // An IPv6 address has colons of its own: only `name:digits` is a slot count.
            Some((n, s)) if !n.contains(':') => (n, slots_value(s, &format!("--host {item}"))?),
            _ => (item, 1),
        };
        out.push(HostSpec {
            name: name.to_string(),
            slots,
        });
    }
    Ok(out)
}

/// A hostfile: one `host [slots=N]` per line (Open MPI's form; `host:N` also accepted);
/// `#` starts a comment, blank lines are ignored.
pub fn parse_hostfile(text: &str, file: &str) -> Result<Vec<HostSpec>, String> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = format!("{file}:{}", i + 1);
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        let mut spec = match parse_host_list(first) {
            Ok(mut v) if v.len() == 1 => v.remove(0),
            _ => return Err(format!("{at}: {first:?} is not a host name")),
        };
        for w in words {
            match w.split_once('=') {
                Some(("slots", v)) | Some(("cpu", v)) => spec.slots = slots_value(v, &at)?,
                Some(("max_slots", _)) => {}
                _ => return Err(format!("{at}: unknown word {w:?} (expected slots=N)")),
            }
        }
        out.push(spec);
    }
    if out.is_empty() {
        return Err(format!("{file}: no hosts in the hostfile"));
    }
    Ok(out)
}

/// Whether `name` is this machine (started directly, not through the launcher).
pub fn is_local(name: &str, hostname: &str) -> bool {
    let short = hostname.split('.').next().unwrap_or(hostname);
    matches!(name, "localhost" | "127.0.0.1" | "::1") || name == hostname || name == short
}

/// Where each rank runs: distinct hosts (entries naming the same host merge, all names of
/// this machine are one host) and, per rank, the index of its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Host names, in order of first appearance; `local[i]` tells whether host i is us.
    pub names: Vec<String>,
    pub local: Vec<bool>,
    pub host_of: Vec<usize>,
}

impl Placement {
    /// Every rank on this machine (no --host / --hostfile).
    pub fn all_local(np: u32, hostname: &str) -> Placement {
        Placement {
            names: vec![hostname.to_string()],
            local: vec![true],
            host_of: vec![0; np as usize],
        }
    }

    /// Ranks fill the slots in the order given (by slot, like Open MPI), or with `by_node`
    /// go round the entries one rank at a time (each taking at most its slots per pass);
    /// when there are more ranks than slots, placement starts over from the first entry.
    pub fn new(np: u32, specs: &[HostSpec], hostname: &str, by_node: bool) -> Placement {
        let mut names: Vec<String> = Vec::new();
        let mut local = Vec::new();
        let mut entry_host = Vec::new();
        for s in specs {
            let is_us = is_local(&s.name, hostname);
            let i = match names
                .iter()
                .zip(&local)
                .position(|(n, &l)| (l && is_us) || *n == s.name)
            {
                Some(i) => i,
                None => {
                    names.push(if is_us {
                        hostname.to_string()
                    } else {
                        s.name.clone()
                    });
                    local.push(is_us);
                    names.len() - 1
                }
            };
            entry_host.push(i);
        }
        let mut host_of = Vec::with_capacity(np as usize);
        // One pass: each entry's slots in turn (by slot) or turn about (by node).
        let mut pass = Vec::new();
        if by_node {
            let most = specs.iter().map(|s| s.slots).max().unwrap_or(0);
            for k in 0..most {
                for (s, &h) in specs.iter().zip(&entry_host) {
                    if k < s.slots {
                        pass.push(h);
                    }
                }
            }
        } else {
            for (s, &h) in specs.iter().zip(&entry_host) {
                pass.extend(std::iter::repeat_n(h, s.slots as usize));
            }
        }
        if !pass.is_empty() {
            host_of.extend(pass.iter().copied().cycle().take(np as usize));
        }
        Placement {
            names,
            local,
            host_of,
        }
    }

    /// Rank `r`'s place among the ranks of its host, and how many ranks that host has.
    pub fn local_rank(&self, r: usize) -> (u32, u32) {
        let h = self.host_of[r];
        let before = self.host_of[..r].iter().filter(|&&x| x == h).count();
        let all = self.host_of.iter().filter(|&&x| x == h).count();
        (before as u32, all as u32)
    }

    pub fn any_remote(&self) -> bool {
        self.host_of.iter().any(|&h| !self.local[h])
    }

    /// MPICH's `PMI_process_mapping`: `(vector,(node,nodes,ranks-per-node),...)`, one
    /// block per run of consecutive ranks on one host.
    pub fn process_mapping(&self) -> String {
        let mut s = String::from("(vector");
        let mut i = 0;
        while i < self.host_of.len() {
            let h = self.host_of[i];
            let run = self.host_of[i..].iter().take_while(|&&x| x == h).count();
            s.push_str(&format!(",({h},1,{run})"));
            i += run;
        }
        s.push(')');
        s
    }
}

/// Expands a Slurm host list: `node[01-03,7],gpu5,r[1-2]n[1-2]` becomes node01, node02,
/// node03, node7, gpu5, r1n1, r1n2, r2n1, r2n2 (ranges keep their zero padding).
pub fn expand_slurm_nodelist(list: &str) -> Result<Vec<String>, String> {
    let bad = || format!("Slurm node list {list:?} is not of the form node[1-3,5],other");
    // Split at the commas outside brackets.
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(bad());
        }
    }
    items.push(&list[start..]);
    let mut out = Vec::new();
    for item in items.into_iter().map(str::trim).filter(|s| !s.is_empty()) {
        let mut names = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            let Some(open) = rest.find('[') else {
                names.iter_mut().for_each(|n| n.push_str(rest));
                break;
            };
            let close = rest.find(']').filter(|&c| c > open).ok_or_else(bad)?;
            let prefix = &rest[..open];
            let mut suffixes = Vec::new();
            for part in rest[open + 1..close].split(',') {
                let (a, b) = part.split_once('-').unwrap_or((part, part));
                let (x, y) = (a.parse::<u64>(), b.parse::<u64>());
                let (Ok(x), Ok(y)) = (x, y) else {
                    return Err(bad());
                };
                if y < x || y - x > 100_000 {
                    return Err(bad());
                }
                suffixes.extend((x..=y).map(|v| format!("{v:0width$}", width = a.len())));
            }
            names = names
                .iter()
                .flat_map(|n| suffixes.iter().map(move |s| format!("{n}{prefix}{s}")))
                .collect();
            rest = &rest[close + 1..];
        }
        out.extend(names);
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// Expands Slurm's per-node counts: `2(x3),1` becomes 2, 2, 2, 1.
pub fn expand_slurm_counts(v: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim) {
        let (n, times) = match item.split_once("(x") {
            Some((n, t)) => (n, t.strip_suffix(')').and_then(|t| t.parse::<usize>().ok())),
            None => (item, Some(1)),
        };
        match (n.parse::<u32>(), times) {
            (Ok(n), Some(t)) if t <= 100_000 => out.extend(std::iter::repeat_n(n, t)),
            _ => {
                return Err(format!(
                    "Slurm task counts {v:?} are not of the form 2(x3),1"
                ))
            }
        }
    }
    Ok(out)
}

/// Quotes a word for a POSIX shell (ssh hands the remote command to one).
pub fn shell_quote(w: &str) -> String {
    let plain = !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str, slots: u32) -> HostSpec {
        HostSpec {
            name: name.into(),
            slots,
        }
    }

    #[test]
    fn host_lists_with_slots() {
        assert_eq!(
            parse_host_list("a,b:2, c").unwrap(),
            [h("a", 1), h("b", 2), h("c", 1)]
        );
        assert_eq!(parse_host_list("fe80::1").unwrap(), [h("fe80::1", 1)]);
        assert!(parse_host_list("a,,b").unwrap_err().contains("empty"));
        assert!(parse_host_list("a:0").unwrap_err().contains("positive"));
        assert!(parse_host_list("a:x").unwrap_err().contains("positive"));
    }

    #[test]
    fn hostfiles() {
        let text =
            "# cluster\nnode1 slots=4\n\n node2   # one slot\nnode3:2\nnode4 slots=2 max_slots=8\n";
        assert_eq!(
            parse_hostfile(text, "hf").unwrap(),
            [h("node1", 4), h("node2", 1), h("node3", 2), h("node4", 2)]
        );
        assert!(parse_hostfile("a slots=0\n", "hf")
            .unwrap_err()
            .contains("hf:1"));
        assert!(parse_hostfile("a\nb colour=red\n", "hf")
            .unwrap_err()
            .contains("hf:2: unknown word"));
        assert!(parse_hostfile("# nothing\n", "hf")
            .unwrap_err()
            .contains("no hosts"));
    }

    #[test]
    fn placement_fills_slots_in_order_and_wraps() {
        let p = Placement::new(5, &[h("a", 2), h("b", 1)], "me", false);
        assert_eq!(p.names, ["a", "b"]);
        assert_eq!(p.host_of, [0, 0, 1, 0, 0]);
        assert_eq!(p.local_rank(3), (2, 4));
        assert_eq!(p.process_mapping(), "(vector,(0,1,2),(1,1,1),(0,1,2))");
        let p = Placement::new(3, &[h("a", 4)], "me", false);
        assert_eq!(p.process_mapping(), "(vector,(0,1,3))");
    }

    #[test]
    fn names_of_this_machine_are_one_local_host() {
        let p = Placement::new(
            4,
            &[h("localhost", 1), h("n1", 1), h("box", 1), h("n1", 1)],
            "box.example.org",
            false,
        );
        assert_eq!(p.names, ["box.example.org", "n1"]);
        assert_eq!(p.local, [true, false]);
        assert_eq!(p.host_of, [0, 1, 0, 1]);
        assert!(p.any_remote());
        assert!(!Placement::all_local(3, "box").any_remote());
        assert!(is_local("127.0.0.1", "box"));
        assert!(!is_local("boxer", "box"));
    }

    #[test]
    fn placement_by_node_goes_round_the_hosts() {
        let p = Placement::new(5, &[h("a", 2), h("b", 1), h("c", 2)], "me", true);
        assert_eq!(p.host_of, [0, 1, 2, 0, 2]);
        let p = Placement::new(4, &[h("a", 1), h("b", 1)], "me", true);
        assert_eq!(p.host_of, [0, 1, 0, 1]);
    }

    #[test]
    fn slurm_node_lists_and_counts() {
        assert_eq!(
            expand_slurm_nodelist("node[01-03,7],gpu5").unwrap(),
            ["node01", "node02", "node03", "node7", "gpu5"]
        );
        assert_eq!(
            expand_slurm_nodelist("r[1-2]n[1-2]").unwrap(),
            ["r1n1", "r1n2", "r2n1", "r2n2"]
        );
        assert_eq!(expand_slurm_nodelist("solo").unwrap(), ["solo"]);
        assert!(expand_slurm_nodelist("n[1-").is_err());
        assert!(expand_slurm_nodelist("n[3-1]").is_err());
        assert_eq!(expand_slurm_counts("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert_eq!(expand_slurm_counts("4").unwrap(), [4]);
        assert!(expand_slurm_counts("2(x").is_err());
    }

    #[test]
    fn quoting_for_the_remote_shell() {
        assert_eq!(shell_quote("PMI_PORT=10.0.0.1:5"), "PMI_PORT=10.0.0.1:5");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
