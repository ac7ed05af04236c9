//! Command-line parsing: the options Open MPI's and MPICH's launchers share, so scripts
//! written for either run unchanged. ` : ` separates the applications of an MPMD job.

use crate::bind::{Bind, MapBy};
use crate::hosts::{self, HostSpec};

pub const USAGE: &str = "\
Usage: mpirun [options] <program> [<args>...] [: [app options] <program> [<args>...]]...
       mpiexec [options] <program> [<args>...]

Starts N copies (ranks) of <program> on this host, or on the hosts given, and serves
them PMI-1. `a : b` runs an MPMD job: the ranks of each program follow those of the one
before in MPI_COMM_WORLD, and MPI_APPNUM tells them apart (0, 1, ...).

Ranks and placement:
  -n, -np, --np N      number of ranks of this program (default 1; see --host, Slurm)
  --host H[:S],...     run on these hosts (S slots each, default 1; repeatable); ranks
                       fill the slots in order and wrap around; -n defaults to the slots
  --hostfile FILE      hosts from FILE, one `host [slots=N]` per line (also -machinefile)
  -ppn, -N, --npernode N   N ranks per host (each host's slots become N); -n defaults
                       to N per host
  --map-by slot|core|hwthread|socket|numa|node|ppr:N:node
                       node: ranks go round the hosts one at a time; socket/numa: the
                       ranks of a host go round its sockets/NUMA nodes; slot/core/
                       hwthread: consecutive cores (hwthreads) ([:modifiers] ignored)
  --bind-to core|hwthread|socket|numa|none
                       bind each rank to the core/hwthread/socket/NUMA node it is mapped
                       to, or not at all. Default: hwthread-per-rank when the host has no
                       more ranks than mpirun's CPUs, none when it is oversubscribed
  --report-bindings    print each rank's CPUs on standard error
  --launcher CMD       how to start a rank on another host: `CMD <host> <command...>`
                       (default ssh; srun: `srun --nodelist=<host> -N1 -n1 <command...>`)
  --iface NAME         network interface for the job: PMI listens on its address and
                       every rank gets FERRITE_TCP_IF=NAME (an IP address only suits
                       ranks on this host); default: a non-loopback address of each host

Environment (the -g forms apply to every program, the others to their own program):
  -x VAR               pass VAR with its value from mpirun's environment (Open MPI style)
  -x VAR=VALUE         set VAR=VALUE in every rank
  -genv VAR VALUE      set VAR=VALUE in every rank (-env: in this program's ranks)
  -genvlist A,B,...    ranks get only these of mpirun's variables (-envlist: this program)
  -genvnone            ranks get none of mpirun's variables (-envnone: this program)
  -genvall             ranks get all of mpirun's variables, the default (-envall)
                       (FERRITE_* variables always pass; these choose for ranks on this
                       host, remote ranks get the listed and set variables)

Working directory and output:
  -wdir, --wdir, -wd DIR   start the ranks in DIR (per program when after a `:`)
  --tag-output         prefix each output line with [rank]<stdout>: or [rank]<stderr>:
  -l, -prepend-rank    prefix each output line with [rank] (MPICH style)
  --output-filename DIR    rank R's output goes to DIR/1/rank.R/stdout and .../stderr
  -outfile-pattern P, -errfile-pattern P
                       rank R's stdout / stderr goes to the file P, where %r is the rank,
                       %h the host, %a the program's number (MPI_APPNUM), %g 0, %% a %

Job:
  --timeout SECONDS    end the job (exit code 255) if it runs longer; default: the
                       MPIEXEC_TIMEOUT environment variable (as MPICH's mpiexec), else none
  --report[=PATH]      at MPI_Finalize rank 0 prints each rank's connection, traffic and
                       peak-RSS counters (or writes them as JSON to PATH): FERRITE_REPORT
  --mca NAME VALUE     Open MPI parameter: accepted and ignored with a warning
  --oversubscribe      accepted; more ranks than cores is always allowed
  --allow-run-as-root  accepted; running as root is always allowed
  -h, --help           show this help
  -V, --version        show the version
  --                   end of options
Long options also take their value as --opt=value. Any other option is an error.

Under a Slurm allocation (SLURM_JOB_ID set, no --host/--hostfile), the hosts and their
slots come from SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE, -n defaults to SLURM_NTASKS,
and ranks on other nodes start through srun (--launcher overrides).

Ranks inherit mpirun's environment (see above) plus PMI_FD, PMI_RANK, PMI_SIZE,
MPI_LOCALRANKID, MPI_LOCALNRANKS, OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE and OMPI_COMM_WORLD_NODE_RANK.
Ranks on other hosts start as `CMD <host> sh -c <read the secret> sh env
VAR=VALUE... <program>` with PMI_PORT=<mpirun's address>:<port>, PMI_ID=<rank>,
FERRITE_TCP_IF (with --iface), the -x/-genv variables and every FERRITE_* variable of
mpirun's environment (words quoted for the remote shell when CMD is ssh or rsh); the job's
PMI password (FERRITE_PMI_SECRET) goes to the remote shell as the first line of its
standard input, never on a command line. Names of this machine (its hostname, localhost, 127.0.0.1) start directly.
Rank 0 reads mpirun's standard input; the others read /dev/null.
mpirun exits 0 when every rank exits 0; otherwise with the first failing rank's exit code
(128+N for a rank killed by signal N), or with the code a rank passed to MPI_Abort.
";

/// Which of mpirun's own environment variables ranks on this host inherit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvMode {
    All,
    /// Only FERRITE_* (the library's configuration).
    None,
    /// FERRITE_* and these.
    List(Vec<String>),
}

/// One program of the job (an MPMD job has several, separated by `:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct App {
    pub np: u32,
    pub np_given: bool,
    pub program: String,
    pub args: Vec<String>,
    /// -env / -envlist values for this program's ranks, after the job-wide ones.
    pub env: Vec<(String, String)>,
    /// -envall / -envnone / -envlist: overrides the job's mode for this program.
    pub env_mode: Option<EnvMode>,
    pub wdir: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Ranks in the job: the sum over `apps`.
    pub np: u32,
    pub apps: Vec<App>,
    /// Variables to set in every rank, in command-line order.
    pub env: Vec<(String, String)>,
    pub env_mode: EnvMode,
    pub tag_output: bool,
    /// -l: `[rank] ` before each line.
    pub prepend_rank: bool,
    /// --host entries, in order.
    pub hosts: Vec<HostSpec>,
    pub hostfile: Option<String>,
    pub launcher: String,
    pub launcher_given: bool,
    pub iface: Option<String>,
    pub bind: Bind,
    pub map_by: MapBy,
    /// Ranks per host (-ppn, -N, --npernode, --map-by ppr:N:node).
    pub ppn: Option<u32>,
    pub report_bindings: bool,
    /// Seconds the job may run (--timeout, MPIEXEC_TIMEOUT).
    pub timeout: Option<u64>,
    /// File patterns for the ranks' stdout and stderr (see `expand_pattern`).
    pub stdout_pattern: Option<String>,
    pub stderr_pattern: Option<String>,
    /// Things to tell the user before starting (ignored options).
    pub warnings: Vec<String>,
}

impl Options {
    /// The program rank `r` runs, and its index (MPI_APPNUM).
    pub fn app_of(&self, r: u32) -> (usize, &App) {
        let mut first = 0;
        for (i, a) in self.apps.iter().enumerate() {
            if r < first + a.np {
                return (i, a);
            }
            first += a.np;
        }
        let last = self.apps.len() - 1;
        (last, &self.apps[last])
    }

    /// The environment mode of program `app`.
    pub fn env_mode_of<'a>(&'a self, app: &'a App) -> &'a EnvMode {
        app.env_mode.as_ref().unwrap_or(&self.env_mode)
    }

    fn np_given(&self) -> bool {
        self.apps.iter().any(|a| a.np_given)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Run(Box<Options>),
    Help,
    Version,
}

fn valid_var(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn var_list(opt: &str, v: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = v
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect();
    match names.iter().find(|n| !valid_var(n)) {
        Some(bad) => Err(format!("{opt} {v:?}: {bad:?} is not a variable name")),
        None => Ok(names),
    }
}

fn positive(opt: &str, v: &str, what: &str) -> Result<u32, String> {
    v.trim()
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{opt} needs a positive number of {what}, not {v:?}"))
}

/// A file pattern with %r (rank), %h (host), %a (program number), %g (0) and %% replaced.
pub fn expand_pattern(p: &str, rank: u32, host: &str, app: usize) -> String {
    let mut out = String::new();
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('r') => out.push_str(&rank.to_string()),
            Some('h') => out.push_str(host),
            Some('a') => out.push_str(&app.to_string()),
            Some('g') => out.push('0'),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Options that take a value; `--name=value` is accepted for the long ones.
const WITH_VALUE: &[&str] = &[
    "--np",
    "--n",
    "--host",
    "--hosts",
    "--hostfile",
    "--machinefile",
    "--launcher",
    "--launcher-exec",
    "--iface",
    "--bind-to",
    "--map-by",
    "--timeout",
    "--npernode",
    "--ppn",
    "--wdir",
    "--output-filename",
    "--mca",
    "--genv",
    "--env",
    "--genvlist",
    "--envlist",
];

/// Parses the arguments after the program name; `getenv` resolves `-x VAR` and
/// MPIEXEC_TIMEOUT.
pub fn parse(args: &[String], getenv: impl Fn(&str) -> Option<String>) -> Result<Command, String> {
    let mut o = Options {
        np: 0,
        apps: Vec::new(),
        env: Vec::new(),
        env_mode: EnvMode::All,
        tag_output: false,
        prepend_rank: false,
        hosts: Vec::new(),
        hostfile: None,
        launcher: "ssh".to_string(),
        launcher_given: false,
        iface: None,
        bind: Bind::Auto,
        map_by: MapBy::Slot,
        ppn: None,
        report_bindings: false,
        timeout: None,
        stdout_pattern: None,
        stderr_pattern: None,
        warnings: Vec::new(),
    };
    let new_app = || App {
        np: 1,
        np_given: false,
        program: String::new(),
        args: Vec::new(),
        env: Vec::new(),
        env_mode: None,
        wdir: None,
    };
    let mut app = new_app();
    // The last program ended at a `:`: another must follow.
    let mut colon = false;
    let mut global_wdir: Option<String> = None;
    let seconds = |v: &str, what: &str| -> Result<u64, String> {
        v.trim()
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{what} needs a positive number of seconds, not {v:?}"))
    };
    let mut i = 0;
    while i < args.len() {
        let raw = args[i].as_str();
        // --name=value: the value travels inline.
        let (a, mut inline) = match raw.split_once('=') {
            Some((name, v)) if WITH_VALUE.contains(&name) => (name, Some(v.to_string())),
            _ => (raw, None),
        };
        let mut value = |i: &mut usize| -> Result<String, String> {
            if let Some(v) = inline.take() {
                return Ok(v);
            }
            *i += 1;
            args.get(*i)
                .filter(|v| v.as_str() != ":")
                .cloned()
                .ok_or_else(|| format!("option {a} needs a value"))
        };
        let first_app = o.apps.is_empty();
        match a {
            "--" | ":" => {
                if a == ":" {
                    return Err("`:` with no program before it (see mpirun --help)".into());
                }
                i += 1;
                colon = take_program(args, &mut i, &mut app)?;
                o.apps.push(std::mem::replace(&mut app, new_app()));
                continue;
            }
            "-h" | "--help" | "-help" => return Ok(Command::Help),
            "-V" | "--version" | "-version" => return Ok(Command::Version),
            "-n" | "-np" | "--np" | "--n" | "-c" => {
                app.np = positive(a, &value(&mut i)?, "ranks")?;
                app.np_given = true;
            }
            "-x" => {
                let v = value(&mut i)?;
                match v.split_once('=') {
                    Some((name, val)) if valid_var(name) => o.env.push((name.into(), val.into())),
                    None if valid_var(&v) => {
                        if let Some(val) = getenv(&v) {
                            o.env.push((v, val));
                        }
                    }
                    _ => return Err(format!("-x {v:?}: not a variable name (or NAME=VALUE)")),
                }
            }
            "-genv" | "--genv" | "-env" | "--env" => {
                let name = value(&mut i)?;
                let val = value(&mut i)?;
                if !valid_var(&name) {
                    return Err(format!("{a} {name:?}: not a variable name"));
                }
                if a.ends_with("genv") {
                    o.env.push((name, val));
                } else {
                    app.env.push((name, val));
                }
            }
            "-genvall" | "--genvall" => o.env_mode = EnvMode::All,
            "-genvnone" | "--genvnone" => o.env_mode = EnvMode::None,
            "-genvlist" | "--genvlist" => o.env_mode = EnvMode::List(var_list(a, &value(&mut i)?)?),
            "-envall" | "--envall" => app.env_mode = Some(EnvMode::All),
            "-envnone" | "--envnone" => app.env_mode = Some(EnvMode::None),
            "-envlist" | "--envlist" => {
                app.env_mode = Some(EnvMode::List(var_list(a, &value(&mut i)?)?))
            }
            "--tag-output" | "-tag-output" => o.tag_output = true,
            "-l" | "-prepend-rank" | "--prepend-rank" => o.prepend_rank = true,
            "--host" | "-host" | "-H" | "--hosts" | "-hosts" => {
                o.hosts.extend(hosts::parse_host_list(&value(&mut i)?)?);
            }
            "--hostfile" | "-hostfile" | "--machinefile" | "-machinefile" | "-f" => {
                o.hostfile = Some(value(&mut i)?);
            }
            "--launcher" | "-launcher" | "--launcher-exec" | "-launcher-exec" => {
                let v = value(&mut i)?;
                if v.split_whitespace().next().is_none() {
                    return Err(format!("{a} needs a command, not {v:?}"));
                }
                o.launcher = v;
                o.launcher_given = true;
            }
            "--iface" | "-iface" => {
                let v = value(&mut i)?;
                if v.trim().is_empty() {
                    return Err(format!("{a} needs an interface name or address"));
                }
                o.iface = Some(v);
            }
            "--bind-to" | "-bind-to" | "-binding" => o.bind = Bind::parse(&value(&mut i)?)?,
            "--map-by" | "-map-by" => {
                let v = value(&mut i)?;
                let (map, ppn) = MapBy::parse(&v)?;
                o.map_by = map;
                if ppn.is_some() {
                    o.ppn = ppn;
                }
            }
            "-ppn" | "--ppn" | "-N" | "--npernode" | "-npernode" | "-perhost" => {
                o.ppn = Some(positive(a, &value(&mut i)?, "ranks per host")?);
            }
            "--report-bindings" | "-report-bindings" => o.report_bindings = true,
            "-wdir" | "--wdir" | "-wd" | "--wd" => {
                let v = value(&mut i)?;
                if v.is_empty() {
                    return Err(format!("{a} needs a directory"));
                }
                if first_app {
                    global_wdir = Some(v.clone());
                }
                app.wdir = Some(v);
            }
            "--output-filename" | "-output-filename" => {
                let dir = value(&mut i)?;
                let dir = dir.trim_end_matches('/');
                o.stdout_pattern = Some(format!("{dir}/1/rank.%r/stdout"));
                o.stderr_pattern = Some(format!("{dir}/1/rank.%r/stderr"));
            }
            "-outfile-pattern" | "--outfile-pattern" => o.stdout_pattern = Some(value(&mut i)?),
            "-errfile-pattern" | "--errfile-pattern" => o.stderr_pattern = Some(value(&mut i)?),
            "--timeout" | "-timeout" => o.timeout = Some(seconds(&value(&mut i)?, a)?),
            "--report" | "-report" => o.env.push(("FERRITE_REPORT".into(), "1".into())),
            _ if a.starts_with("--report=") => {
                let path = &a["--report=".len()..];
                if path.is_empty() {
                    return Err("--report= needs a path (or use --report)".into());
                }
                o.env.push(("FERRITE_REPORT".into(), path.into()));
            }
            "--mca" | "-mca" | "--gmca" | "-gmca" => {
                let name = value(&mut i)?;
                let val = value(&mut i)?;
                o.warnings.push(format!(
                    "ignoring {a} {name} {val}: Open MPI's MCA parameters do not apply to \
                     Ferrite (see mpirun --help and FERRITE_* variables)"
                ));
            }
            "--oversubscribe" | "-oversubscribe" | "--allow-run-as-root" => {}
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(format!("unknown option {raw:?} (see mpirun --help)"));
            }
            _ => {
                colon = take_program(args, &mut i, &mut app)?;
                o.apps.push(std::mem::replace(&mut app, new_app()));
                continue;
            }
        }
        i += 1;
    }
    if o.apps.is_empty() {
        return Err("no program to run (see mpirun --help)".into());
    }
    if colon {
        return Err("options after the last `:` but no program (see mpirun --help)".into());
    }
    // -wdir before the first program is every program's unless one has its own.
    if let Some(w) = global_wdir {
        for a in &mut o.apps {
            a.wdir.get_or_insert_with(|| w.clone());
        }
    }
    if o.timeout.is_none() {
        if let Some(v) = getenv("MPIEXEC_TIMEOUT").filter(|v| !v.trim().is_empty()) {
            o.timeout = Some(seconds(&v, "MPIEXEC_TIMEOUT")?);
        }
    }
    o.np = o.apps.iter().map(|a| a.np).sum();
    Ok(Command::Run(Box::new(o)))
}

/// Takes the program at `args[*i]` and its arguments up to the next `:` (skipped) or the
/// end into `app`; leaves `*i` after them. True when they ended at a `:`.
fn take_program(args: &[String], i: &mut usize, app: &mut App) -> Result<bool, String> {
    let Some(program) = args.get(*i).filter(|p| p.as_str() != ":") else {
        return Err("no program to run (see mpirun --help)".into());
    };
    app.program = program.clone();
    *i += 1;
    while *i < args.len() && args[*i] != ":" {
        app.args.push(args[*i].clone());
        *i += 1;
    }
    if *i < args.len() {
        *i += 1; // the `:`
        if *i == args.len() {
            return Err("nothing after the last `:` (see mpirun --help)".into());
        }
        return Ok(true);
    }
    Ok(false)
}

/// Reads the hostfile (if any) into `opts.hosts`, applies -ppn to the hosts' slots and,
/// when -n was not given to a single program, sets its number of ranks to the slots.
pub fn resolve_hosts(
    opts: &mut Options,
    read: impl Fn(&str) -> Result<String, String>,
) -> Result<(), String> {
    if let Some(file) = &opts.hostfile {
        let text = read(file)?;
        opts.hosts.extend(hosts::parse_hostfile(&text, file)?);
    }
    if let Some(ppn) = opts.ppn {
        for h in &mut opts.hosts {
            h.slots = ppn;
        }
    }
    if !opts.np_given() && opts.apps.len() == 1 {
        let slots: u32 = opts.hosts.iter().map(|h| h.slots).sum();
        let np = match (opts.hosts.is_empty(), opts.ppn) {
            (false, _) => slots,
            (true, Some(ppn)) => ppn,
            (true, None) => 1,
        };
        opts.apps[0].np = np;
    }
    opts.np = opts.apps.iter().map(|a| a.np).sum();
    Ok(())
}

/// Under a Slurm allocation with no hosts given: the allocation's nodes and task slots
/// become the host list, -n defaults to SLURM_NTASKS, and remote ranks start with srun.
/// Returns whether the allocation was used.
pub fn apply_slurm(
    opts: &mut Options,
    getenv: impl Fn(&str) -> Option<String>,
) -> Result<bool, String> {
    if getenv("SLURM_JOB_ID").is_none() || !opts.hosts.is_empty() || opts.hostfile.is_some() {
        return Ok(false);
    }
    let Some(nodelist) = getenv("SLURM_JOB_NODELIST").or_else(|| getenv("SLURM_NODELIST")) else {
        return Ok(false);
    };
    let nodes = hosts::expand_slurm_nodelist(&nodelist)?;
    let per_node = getenv("SLURM_TASKS_PER_NODE")
        .or_else(|| getenv("SLURM_JOB_CPUS_PER_NODE"))
        .map(|v| hosts::expand_slurm_counts(&v))
        .transpose()?
        .unwrap_or_else(|| vec![1; nodes.len()]);
    if per_node.len() != nodes.len() {
        return Err(format!(
            "Slurm allocation: SLURM_JOB_NODELIST={nodelist:?} has {} nodes but \
             SLURM_TASKS_PER_NODE gives {} counts",
            nodes.len(),
            per_node.len()
        ));
    }
    opts.hosts = nodes
        .into_iter()
        .zip(per_node)
        .map(|(name, slots)| HostSpec {
            name,
            slots: slots.max(1),
        })
        .collect();
    if !opts.launcher_given {
        opts.launcher = "srun".into();
    }
    let ntasks = getenv("SLURM_NTASKS")
        .or_else(|| getenv("SLURM_NPROCS"))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&n| n > 0);
    if let (Some(n), false, None, 1) = (ntasks, opts.np_given(), opts.ppn, opts.apps.len()) {
        opts.apps[0].np = n;
        opts.apps[0].np_given = true;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn p(s: &str) -> Result<Command, String> {
        parse(&args(s), |v| match v {
            "HOME" => Some("/home/me".to_string()),
            _ => None,
        })
    }

    fn run(s: &str) -> Options {
        match p(s) {
            Ok(Command::Run(o)) => *o,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn program_and_its_arguments_stop_option_parsing() {
        let o = run("-n 4 --tag-output ./a.out -n 2 --help");
        assert_eq!(o.np, 4);
        assert!(o.tag_output);
        assert_eq!(o.apps.len(), 1);
        assert_eq!(o.apps[0].program, "./a.out");
        assert_eq!(o.apps[0].args, ["-n", "2", "--help"]);
        assert_eq!(o.bind, Bind::Auto);
        assert_eq!(run("--bind-to none -n 2 prog").bind, Bind::None);
        assert_eq!(run("-bind-to core prog").bind, Bind::Core);
        assert_eq!(run("--bind-to=socket prog").bind, Bind::Socket);
        assert!(p("--bind-to board prog")
            .unwrap_err()
            .contains("expected core"));
        let o = run("-- -weird-name x");
        assert_eq!((o.np, o.apps[0].program.as_str()), (1, "-weird-name"));
        assert_eq!(run("--np=3 prog").np, 3);
    }

    #[test]
    fn mpmd_programs_and_their_own_options() {
        let o = run("-genv G 1 -wdir /tmp -n 1 a x : -n 3 -env L 2 -wdir /var b y z : c");
        assert_eq!(o.np, 5);
        let progs: Vec<(&str, u32)> = o.apps.iter().map(|a| (a.program.as_str(), a.np)).collect();
        assert_eq!(progs, [("a", 1), ("b", 3), ("c", 1)]);
        assert_eq!(o.apps[0].args, ["x"]);
        assert_eq!(o.apps[1].args, ["y", "z"]);
        assert_eq!(o.env, [("G".to_string(), "1".to_string())]);
        assert_eq!(o.apps[1].env, [("L".to_string(), "2".to_string())]);
        let wdirs: Vec<Option<&str>> = o.apps.iter().map(|a| a.wdir.as_deref()).collect();
        assert_eq!(wdirs, [Some("/tmp"), Some("/var"), Some("/tmp")]);
        assert_eq!(o.app_of(0).0, 0);
        assert_eq!(o.app_of(1).0, 1);
        assert_eq!(o.app_of(3).0, 1);
        assert_eq!(o.app_of(4).0, 2);
        assert!(p("-n 1 a :").unwrap_err().contains("after the last"));
        assert!(p(": a").unwrap_err().contains("no program before"));
        assert!(p("a : -n 2").unwrap_err().contains("no program"));
        assert!(p("a : --tag-output").unwrap_err().contains("no program"));
    }

    #[test]
    fn environment_options() {
        let o = run("-np 2 -x A=1 -x HOME -x UNSET -genv B two=2 --oversubscribe prog");
        assert_eq!(
            o.env,
            [
                ("A".to_string(), "1".to_string()),
                ("HOME".into(), "/home/me".into()),
                ("B".into(), "two=2".into())
            ]
        );
        assert_eq!(o.np, 2);
        assert_eq!(o.env_mode, EnvMode::All);
        assert_eq!(run("-genvnone prog").env_mode, EnvMode::None);
        assert_eq!(
            run("-genvlist A,B prog").env_mode,
            EnvMode::List(vec!["A".into(), "B".into()])
        );
        let o = run("-genvnone -n 1 a : -envall b : -envlist X c : -envnone d");
        assert_eq!(o.env_mode, EnvMode::None);
        let modes: Vec<&EnvMode> = o.apps.iter().map(|a| o.env_mode_of(a)).collect();
        assert_eq!(
            modes,
            [
                &EnvMode::None,
                &EnvMode::All,
                &EnvMode::List(vec!["X".into()]),
                &EnvMode::None
            ]
        );
        assert!(p("-genvlist A,1B prog").unwrap_err().contains("\"1B\""));
    }

    #[test]
    fn placement_options() {
        let o = run("-ppn 2 --map-by node --report-bindings prog");
        assert_eq!(
            (o.ppn, o.map_by, o.report_bindings),
            (Some(2), MapBy::Node, true)
        );
        assert_eq!(run("-N 3 prog").ppn, Some(3));
        assert_eq!(run("--npernode 4 prog").ppn, Some(4));
        assert_eq!(run("--map-by ppr:2:node prog").ppn, Some(2));
        assert!(p("-ppn 0 prog").unwrap_err().contains("positive"));
        assert!(p("--map-by frob prog").unwrap_err().contains("--map-by"));
    }

    #[test]
    fn output_options() {
        let o = run("-l prog");
        assert!(o.prepend_rank && !o.tag_output);
        assert!(run("-prepend-rank prog").prepend_rank);
        let o = run("--output-filename out/ prog");
        assert_eq!(o.stdout_pattern.as_deref(), Some("out/1/rank.%r/stdout"));
        assert_eq!(o.stderr_pattern.as_deref(), Some("out/1/rank.%r/stderr"));
        let o = run("-outfile-pattern o.%r -errfile-pattern e.%h.%a prog");
        assert_eq!(o.stdout_pattern.as_deref(), Some("o.%r"));
        assert_eq!(
            expand_pattern(o.stderr_pattern.as_deref().unwrap(), 3, "box", 1),
            "e.box.1"
        );
        assert_eq!(expand_pattern("%r%%%g%q%", 7, "h", 0), "7%0%q%");
    }

    #[test]
    fn mca_is_ignored_with_a_warning() {
        let o = run("--mca btl self,vader -mca pml ob1 -n 2 prog");
        assert_eq!(o.np, 2);
        assert_eq!(o.warnings.len(), 2);
        assert!(o.warnings[0].contains("ignoring --mca btl self,vader"));
        assert!(p("--mca btl").unwrap_err().contains("needs a value"));
    }

    #[test]
    fn host_options() {
        let o = run("--host a,b:2 -H c --launcher ./agent --iface veth0 prog");
        let names: Vec<(&str, u32)> = o.hosts.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(names, [("a", 1), ("b", 2), ("c", 1)]);
        assert_eq!(o.launcher, "./agent");
        assert!(o.launcher_given);
        assert_eq!(o.iface.as_deref(), Some("veth0"));
        assert!(!o.np_given());
        let o = run("prog");
        assert_eq!(
            (o.launcher.as_str(), o.iface.clone(), o.hosts.len()),
            ("ssh", None, 0)
        );
        assert!(p("--host a:0 prog").unwrap_err().contains("positive"));
        assert!(p("--launcher").unwrap_err().contains("needs a value"));
    }

    #[test]
    fn hostfile_and_default_rank_count() {
        let read = |f: &str| -> Result<String, String> {
            match f {
                "hf" => Ok("n1 slots=2\nn2\n".into()),
                _ => Err(format!("{f}: no such file")),
            }
        };
        let mut o = run("--hostfile hf prog");
        resolve_hosts(&mut o, read).unwrap();
        assert_eq!(o.np, 3, "-n defaults to the slots");
        assert_eq!(o.hosts.len(), 2);
        let mut o = run("-n 5 --host x --hostfile hf prog");
        resolve_hosts(&mut o, read).unwrap();
        assert_eq!((o.np, o.hosts.len()), (5, 3));
        let mut o = run("-n 1 prog");
        resolve_hosts(&mut o, read).unwrap();
        assert_eq!((o.np, o.hosts.len()), (1, 0));
        let mut o = run("-ppn 3 --hostfile hf prog");
        resolve_hosts(&mut o, read).unwrap();
        assert_eq!(o.np, 6, "-ppn gives every host 3 slots");
        let mut o = run("-ppn 2 prog");
        resolve_hosts(&mut o, read).unwrap();
        assert_eq!(o.np, 2);
        let mut o = run("--hostfile nope prog");
        assert!(resolve_hosts(&mut o, read).unwrap_err().contains("no such"));
    }

    #[test]
    fn slurm_allocations() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let alloc: &'static [(&str, &str)] = &[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NODELIST", "n[1-2]"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
            ("SLURM_NTASKS", "3"),
        ];
        let mut o = run("prog");
        assert!(apply_slurm(&mut o, env(alloc)).unwrap());
        resolve_hosts(&mut o, |_| Err("no file".into())).unwrap();
        let names: Vec<(&str, u32)> = o.hosts.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(names, [("n1", 2), ("n2", 2)]);
        assert_eq!((o.np, o.launcher.as_str()), (3, "srun"));
        // -n, --host and --launcher win over the allocation.
        let mut o = run("-n 8 --launcher ssh prog");
        apply_slurm(&mut o, env(alloc)).unwrap();
        assert_eq!((o.np, o.launcher.as_str(), o.hosts.len()), (8, "ssh", 2));
        let mut o = run("--host a prog");
        assert!(!apply_slurm(&mut o, env(alloc)).unwrap());
        let mut o = run("prog");
        assert!(!apply_slurm(&mut o, env(&[])).unwrap());
        let mut o = run("prog");
        let bad: &'static [(&str, &str)] = &[
            ("SLURM_JOB_ID", "1"),
            ("SLURM_JOB_NODELIST", "n[1-3]"),
            ("SLURM_TASKS_PER_NODE", "2"),
        ];
        assert!(apply_slurm(&mut o, env(bad))
            .unwrap_err()
            .contains("3 nodes"));
    }

    #[test]
    fn report_sets_ferrite_report_for_every_rank() {
        let o = run("-n 2 --report prog");
        assert_eq!(o.env, [("FERRITE_REPORT".to_string(), "1".to_string())]);
        let o = run("--report=out.json prog");
        assert_eq!(
            o.env,
            [("FERRITE_REPORT".to_string(), "out.json".to_string())]
        );
        assert!(p("--report= prog").unwrap_err().contains("needs a path"));
    }

    #[test]
    fn help_version_and_errors() {
        assert_eq!(p("--help"), Ok(Command::Help));
        assert_eq!(p("-n 2 -V"), Ok(Command::Version));
        assert!(p("-n 0 prog").unwrap_err().contains("positive"));
        assert!(p("-n x prog").unwrap_err().contains("positive"));
        assert!(p("-n").unwrap_err().contains("needs a value"));
        assert!(p("-genv A").unwrap_err().contains("needs a value"));
        assert!(p("-x 1A=2 prog").unwrap_err().contains("variable"));
        let e = p("-n 2 --frobnicate prog").unwrap_err();
        assert!(e.contains("unknown option \"--frobnicate\""), "{e}");
        let e = p("--display-map=yes prog").unwrap_err();
        assert!(e.contains("\"--display-map=yes\""), "{e}");
        assert!(p("-n 2").unwrap_err().contains("no program"));
    }
}
