//! Command-line parsing: the options Open MPI's and MPICH's launchers share, so scripts
//! written for either run unchanged.

use crate::bind::Bind;
use crate::hosts::{self, HostSpec};

pub const USAGE: &str = "\
Usage: mpirun [options] <program> [<args>...]
       mpiexec [options] <program> [<args>...]

Starts N copies (ranks) of <program> on this host, or on the hosts given, and serves
them PMI-1.

Options:
  -n, -np, --np N      number of ranks to start (default 1)
  -x VAR               pass VAR with its value from mpirun's environment (Open MPI style)
  -x VAR=VALUE         set VAR=VALUE in every rank
  -genv VAR VALUE      set VAR=VALUE in every rank (MPICH style; also -env)
  --host H[:S],...     run on these hosts (S slots each, default 1; repeatable); ranks
                       fill the slots in order and wrap around; -n defaults to the slots
  --hostfile FILE      hosts from FILE, one `host [slots=N]` per line (also -machinefile)
  --launcher CMD       how to start a rank on another host: `CMD <host> <command...>`
                       (default ssh; CMD may have arguments, split at blanks)
  --iface NAME         network interface for the job: PMI listens on its address and
                       every rank gets FERRITE_TCP_IF=NAME (an IP address only suits
                       ranks on this host); default: a non-loopback address of each host
  --report[=PATH]      at MPI_Finalize rank 0 prints each rank's connection, traffic and
                       peak-RSS counters (or writes them as JSON to PATH): FERRITE_REPORT
  --tag-output         prefix each output line with [rank]<stdout>: or [rank]<stderr>:
  --bind-to core|none  core: bind rank i to CPU (i mod n) of mpirun's own CPU set;
                       none: do not bind. Default: core when the job has no more ranks
                       than mpirun's CPUs, none when it is oversubscribed
  --timeout SECONDS    end the job (exit code 255) if it runs longer; default: the
                       MPIEXEC_TIMEOUT environment variable (as MPICH's mpiexec), else none
  --oversubscribe      accepted; more ranks than cores is always allowed
  --allow-run-as-root  accepted; running as root is always allowed
  -h, --help           show this help
  -V, --version        show the version
  --                   end of options

Ranks inherit mpirun's environment plus PMI_FD, PMI_RANK, PMI_SIZE, MPI_LOCALRANKID and
MPI_LOCALNRANKS. Ranks on other hosts start as `CMD <host> sh -c <read the secret> sh env
VAR=VALUE... <program>` with PMI_PORT=<mpirun's address>:<port>, PMI_ID=<rank>,
FERRITE_TCP_IF (with --iface), the -x/-genv variables and every FERRITE_* variable of
mpirun's environment (words quoted for the remote shell when CMD is ssh or rsh); the job's
PMI password (FERRITE_PMI_SECRET) goes to the remote shell as the first line of its
standard input, never on a command line. Names of this machine (its hostname, localhost, 127.0.0.1) start directly.
Rank 0 reads mpirun's standard input; the others read /dev/null.
mpirun exits 0 when every rank exits 0; otherwise with the first failing rank's exit code
(128+N for a rank killed by signal N), or with the code a rank passed to MPI_Abort.
";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub np: u32,
    /// Variables to set in every rank, in command-line order.
    pub env: Vec<(String, String)>,
    pub tag_output: bool,
    /// -n was given (otherwise a host list sets the number of ranks).
    pub np_given: bool,
    /// --host entries, in order.
    pub hosts: Vec<HostSpec>,
    pub hostfile: Option<String>,
    pub launcher: String,
    pub iface: Option<String>,
    pub bind: Bind,
    /// Seconds the job may run (--timeout, MPIEXEC_TIMEOUT).
    pub timeout: Option<u64>,
    pub program: String,
    pub args: Vec<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Run(Options),
    Help,
    Version,
}

fn valid_var(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses the arguments after the program name; `getenv` resolves `-x VAR`.
pub fn parse(args: &[String], getenv: impl Fn(&str) -> Option<String>) -> Result<Command, String> {
    let mut np: Option<u32> = None;
    let mut env = Vec::new();
    let mut tag_output = false;
    let mut hosts = Vec::new();
    let mut hostfile = None;
    let mut launcher = "ssh".to_string();
    let mut iface = None;
    let mut bind = Bind::Auto;
    let mut timeout = None;
    let seconds = |v: &str, what: &str| -> Result<u64, String> {
        v.trim()
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{what} needs a positive number of seconds, not {v:?}"))
    };
    let mut i = 0;
    let value = |i: &mut usize, opt: &str| -> Result<String, String> {
        *i += 1;
        args.get(*i)
            .cloned()
            .ok_or_else(|| format!("option {opt} needs a value"))
    };
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "--" => {
                i += 1;
                break;
            }
            "-h" | "--help" | "-help" => return Ok(Command::Help),
            "-V" | "--version" | "-version" => return Ok(Command::Version),
            "-n" | "-np" | "--np" | "--n" | "-c" => {
                let v = value(&mut i, a)?;
                let n: u32 =
                    v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        format!("{a} needs a positive number of ranks, not {v:?}")
                    })?;
                np = Some(n);
            }
            "-x" => {
                let v = value(&mut i, a)?;
                match v.split_once('=') {
                    Some((name, val)) if valid_var(name) => env.push((name.into(), val.into())),
                    None if valid_var(&v) => {
                        if let Some(val) = getenv(&v) {
                            env.push((v, val));
                        }
                    }
                    _ => return Err(format!("-x {v:?}: not a variable name (or NAME=VALUE)")),
                }
            }
            "-genv" | "-env" | "--genv" => {
                let name = value(&mut i, a)?;
                let val = value(&mut i, a)?;
                if !valid_var(&name) {
                    return Err(format!("{a} {name:?}: not a variable name"));
                }
                env.push((name, val));
            }
            "--tag-output" | "-tag-output" => tag_output = true,
            "--host" | "-host" | "-H" | "--hosts" | "-hosts" => {
                hosts.extend(hosts::parse_host_list(&value(&mut i, a)?)?);
            }
            "--hostfile" | "-hostfile" | "--machinefile" | "-machinefile" | "-f" => {
                hostfile = Some(value(&mut i, a)?);
            }
            "--launcher" | "-launcher" | "--launcher-exec" | "-launcher-exec" => {
                let v = value(&mut i, a)?;
                if v.split_whitespace().next().is_none() {
                    return Err(format!("{a} needs a command, not {v:?}"));
                }
                launcher = v;
            }
            "--iface" | "-iface" => {
                let v = value(&mut i, a)?;
                if v.trim().is_empty() {
                    return Err(format!("{a} needs an interface name or address"));
                }
                iface = Some(v);
            }
            "--bind-to" | "-bind-to" => bind = Bind::parse(&value(&mut i, a)?)?,
            "--timeout" | "-timeout" => timeout = Some(seconds(&value(&mut i, a)?, a)?),
            "--report" | "-report" => env.push(("FERRITE_REPORT".into(), "1".into())),
            _ if a.starts_with("--report=") => {
                let path = &a["--report=".len()..];
                if path.is_empty() {
                    return Err("--report= needs a path (or use --report)".into());
                }
                env.push(("FERRITE_REPORT".into(), path.into()));
            }
            "--oversubscribe" | "-oversubscribe" | "--allow-run-as-root" => {}
            _ if a.starts_with('-') && a.len() > 1 => {
                return Err(format!("unknown option {a:?} (see mpirun --help)"));
            }
            _ => break,
        }
        i += 1;
    }
    let Some(program) = args.get(i).cloned() else {
        return Err("no program to run (see mpirun --help)".into());
    };
    if timeout.is_none() {
        if let Some(v) = getenv("MPIEXEC_TIMEOUT").filter(|v| !v.trim().is_empty()) {
            timeout = Some(seconds(&v, "MPIEXEC_TIMEOUT")?);
        }
    }
    Ok(Command::Run(Options {
        np: np.unwrap_or(1),
        np_given: np.is_some(),
        env,
        tag_output,
        hosts,
        hostfile,
        launcher,
        iface,
        bind,
        timeout,
        program,
        args: args[i + 1..].to_vec(),
    }))
}

/// Reads the hostfile (if any) into `opts.hosts` and, when -n was not given, sets the
/// number of ranks to the hosts' slots.
pub fn resolve_hosts(
    opts: &mut Options,
    read: impl Fn(&str) -> Result<String, String>,
) -> Result<(), String> {
    if let Some(file) = &opts.hostfile {
        let text = read(file)?;
        opts.hosts.extend(hosts::parse_hostfile(&text, file)?);
    }
    if !opts.np_given && !opts.hosts.is_empty() {
        opts.np = opts.hosts.iter().map(|h| h.slots).sum();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command, String> {
        let args: Vec<String> = s.split_whitespace().map(String::from).collect();
        parse(&args, |v| (v == "HOME").then(|| "/home/me".to_string()))
    }

    fn run(s: &str) -> Options {
        match p(s) {
            Ok(Command::Run(o)) => o,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn program_and_its_arguments_stop_option_parsing() {
        let o = run("-n 4 --tag-output ./a.out -n 2 --help");
        assert_eq!(o.np, 4);
        assert!(o.tag_output);
        assert_eq!(o.program, "./a.out");
        assert_eq!(o.args, ["-n", "2", "--help"]);
        assert_eq!(o.bind, Bind::Auto);
        assert_eq!(run("--bind-to none -n 2 prog").bind, Bind::None);
        assert_eq!(run("-bind-to core prog").bind, Bind::Core);
        assert!(p("--bind-to socket prog")
            .unwrap_err()
            .contains("core or none"));
        let o = run("-- -weird-name x");
        assert_eq!((o.np, o.program.as_str()), (1, "-weird-name"));
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
    }

    #[test]
    fn host_options() {
        let o = run("--host a,b:2 -H c --launcher ./agent --iface veth0 prog");
        let names: Vec<(&str, u32)> = o.hosts.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(names, [("a", 1), ("b", 2), ("c", 1)]);
        assert_eq!(o.launcher, "./agent");
        assert_eq!(o.iface.as_deref(), Some("veth0"));
        assert!(!o.np_given);
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
        let mut o = run("--hostfile nope prog");
        assert!(resolve_hosts(&mut o, read).unwrap_err().contains("no such"));
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
        assert!(p("--frobnicate prog")
            .unwrap_err()
            .contains("unknown option"));
        assert!(p("-n 2").unwrap_err().contains("no program"));
    }
}
