//! Command-line parsing: the options Open MPI's and MPICH's launchers share, so scripts
//! written for either run unchanged.

pub const USAGE: &str = "\
Usage: mpirun [options] <program> [<args>...]
       mpiexec [options] <program> [<args>...]

Starts N copies (ranks) of <program> on this host and serves them PMI-1.

Options:
  -n, -np, --np N      number of ranks to start (default 1)
  -x VAR               pass VAR with its value from mpirun's environment (Open MPI style)
  -x VAR=VALUE         set VAR=VALUE in every rank
  -genv VAR VALUE      set VAR=VALUE in every rank (MPICH style; also -env)
  --report[=PATH]      at MPI_Finalize rank 0 prints each rank's connection, traffic and
                       peak-RSS counters (or writes them as JSON to PATH): FERRITE_REPORT
  --tag-output         prefix each output line with [rank]<stdout>: or [rank]<stderr>:
  --oversubscribe      accepted; more ranks than cores is always allowed
  --allow-run-as-root  accepted; running as root is always allowed
  -h, --help           show this help
  -V, --version        show the version
  --                   end of options

Ranks inherit mpirun's environment plus PMI_FD, PMI_RANK, PMI_SIZE, MPI_LOCALRANKID and
MPI_LOCALNRANKS. Rank 0 reads mpirun's standard input; the others read /dev/null.
mpirun exits 0 when every rank exits 0; otherwise with the first failing rank's exit code
(128+N for a rank killed by signal N), or with the code a rank passed to MPI_Abort.
";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub np: u32,
    /// Variables to set in every rank, in command-line order.
    pub env: Vec<(String, String)>,
    pub tag_output: bool,
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
    Ok(Command::Run(Options {
        np: np.unwrap_or(1),
        env,
        tag_output,
        program,
        args: args[i + 1..].to_vec(),
    }))
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
