//! mpirun end to end, with shell commands and a small PMI client program as ranks (no MPI
//! library needed). Every run has a deadline, so a hung launcher fails a test instead of
//! hanging it.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MPIRUN: &str = env!("CARGO_BIN_EXE_mpirun");
const RANK: &str = env!("CARGO_BIN_EXE_pmi-test-rank");
const DEADLINE: Duration = Duration::from_secs(20);

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn lines(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.stdout.lines().collect();
        v.sort_unstable();
        v
    }
}

fn start(args: &[&str], stdin: Stdio) -> Child {
    Command::new(MPIRUN)
        .args(args)
        // Not under a Slurm allocation, even when the tests run inside one.
        .env_remove("SLURM_JOB_ID")
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mpirun")
}

/// Waits for mpirun with a deadline (killing it if it hangs) and collects its output.
fn finish(mut child: Child) -> Outcome {
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > DEADLINE {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("mpirun did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Outcome {
        code: status.code(),
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

fn run(args: &[&str]) -> Outcome {
    finish(start(args, Stdio::null()))
}

/// Processes whose command line contains `needle` (as NUL-separated argv).
fn processes_running(needle: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) && !cmd.contains("sh -c") {
                n += 1;
            }
        }
    }
    n
}

fn wait_for_processes(needle: &str, count: usize) {
    let start = Instant::now();
    while processes_running(needle) < count {
        assert!(
            start.elapsed() < DEADLINE,
            "{count} x {needle:?} never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (with a deadline) until no process runs `needle`: killed processes may take a
/// moment to die after the launcher returned.
fn assert_all_gone(needle: &str) {
    let start = Instant::now();
    while processes_running(needle) > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{needle:?} survived the job"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn hostname() -> String {
    let out = Command::new("hostname").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn forwards_output_with_tags() {
    let o = run(&[
        "-n",
        "3",
        "--tag-output",
        "sh",
        "-c",
        "echo out $PMI_RANK of $PMI_SIZE; echo err $PMI_RANK >&2; printf 'no newline'",
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(
        o.lines(),
        [
            "[0]<stdout>: no newline",
            "[0]<stdout>: out 0 of 3",
            "[1]<stdout>: no newline",
            "[1]<stdout>: out 1 of 3",
            "[2]<stdout>: no newline",
            "[2]<stdout>: out 2 of 3",
        ]
    );
    let mut err: Vec<&str> = o.stderr.lines().collect();
    err.sort_unstable();
    assert_eq!(
        err,
        [
            "[0]<stderr>: err 0",
            "[1]<stderr>: err 1",
            "[2]<stderr>: err 2"
        ]
    );
}

#[test]
fn untagged_output_keeps_lines_whole() {
    // Each line is written in two pieces while the other ranks write too; the unterminated
    // last line of each rank gets a newline so it cannot run into another rank's line.
    let script = "i=0; while [ $i -lt 300 ]; do printf \"$PMI_RANK-$i-\"; \
                  printf 'abcdefghijklmnopqrstuvwxyz\\n'; i=$((i+1)); done; printf \"end-$PMI_RANK\"";
    let o = run(&["-np", "4", "sh", "-c", script]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let mut count = [0usize; 4];
    let mut ends = Vec::new();
    for line in o.stdout.lines() {
        if let Some(r) = line.strip_prefix("end-") {
            ends.push(r.to_string());
            continue;
        }
        let parts: Vec<&str> = line.split('-').collect();
        assert_eq!(parts.len(), 3, "interleaved line {line:?}");
        assert_eq!(
            parts[2], "abcdefghijklmnopqrstuvwxyz",
            "interleaved line {line:?}"
        );
        count[parts[0].parse::<usize>().unwrap()] += 1;
    }
    assert_eq!(count, [300; 4]);
    ends.sort();
    assert_eq!(ends, ["0", "1", "2", "3"]);
}

#[test]
fn a_single_untagged_rank_is_forwarded_byte_exact() {
    let o = run(&["sh", "-c", "printf 'a\\nno newline'"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(o.stdout, "a\nno newline");
}

#[test]
fn stdin_goes_to_rank_0_only() {
    let mut child = start(
        &[
            "-n",
            "3",
            "sh",
            "-c",
            "while read l; do echo \"$PMI_RANK:$l\"; done",
        ],
        Stdio::piped(),
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"first\nsecond\n").unwrap();
    drop(stdin);
    let o = finish(child);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(o.lines(), ["0:first", "0:second"]);
}

#[test]
fn environment_options_reach_every_rank() {
    let o = run(&[
        "-n",
        "2",
        "-x",
        "FERRITE_T_A=one",
        "-genv",
        "FERRITE_T_B",
        "two words",
        "--oversubscribe",
        "sh",
        "-c",
        "echo \"$PMI_RANK $FERRITE_T_A $FERRITE_T_B $MPI_LOCALNRANKS\"",
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(o.lines(), ["0 one two words 2", "1 one two words 2"]);
}

#[test]
fn exit_codes() {
    assert_eq!(run(&["-n", "2", "true"]).code, Some(0));
    let o = run(&["-n", "1", "sh", "-c", "exit 0"]);
    assert_eq!((o.code, o.stderr.as_str()), (Some(0), ""));
    // A failing rank ends a job whose other ranks would run forever.
    let o = run(&[
        "-n",
        "3",
        "sh",
        "-c",
        "[ $PMI_RANK = 2 ] && exit 5; exec sleep 9731.5",
    ]);
    assert_eq!(o.code, Some(5));
    assert!(
        o.stderr.contains("rank 2 (pid ") && o.stderr.contains("exited with code 5"),
        "{}",
        o.stderr
    );
    assert_all_gone("sleep 9731.5");
    let o = run(&["-n", "2", "/nonexistent/program"]);
    assert_eq!(o.code, Some(127));
    assert!(o.stderr.contains("cannot start rank 0"), "{}", o.stderr);
    let o = run(&["-n", "2"]);
    assert_eq!(o.code, Some(2));
    assert!(o.stderr.contains("no program"), "{}", o.stderr);
}

/// A rank failing after MPI_Finalize still fails the job, but ranks that have finalized
/// are left to finish (as Hydra, srun and Open MPI do): their output is not lost.
#[test]
fn finalized_ranks_are_not_killed() {
    let o = run(&["-n", "3", RANK, "fail-after-finalize"]);
    assert_eq!(o.code, Some(4), "{}", o.stderr);
    for r in 0..2 {
        let line = format!("rank {r} finished its work after finalize");
        assert!(
            o.stdout.contains(&line),
            "missing {line:?}: {}\n{}",
            o.stdout,
            o.stderr
        );
    }
}

#[test]
fn help_and_version() {
    let o = run(&["--help"]);
    assert_eq!(o.code, Some(0));
    assert!(o.stdout.contains("-genv VAR VALUE") && o.stdout.contains("--tag-output"));
    let o = run(&["--version"]);
    assert!(
        o.stdout.starts_with("mpirun (Ferrite MPI) "),
        "{}",
        o.stdout
    );
}

#[test]
fn a_rank_killed_by_a_signal_ends_the_job() {
    let o = run(&[
        "-n",
        "4",
        "sh",
        "-c",
        "if [ $PMI_RANK = 1 ]; then kill -9 $$; fi; exec sleep 9732.5",
    ]);
    assert_eq!(o.code, Some(128 + 9), "{}", o.stderr);
    let report: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("mpirun:"))
        .collect();
    assert_eq!(report.len(), 1, "one report line: {}", o.stderr);
    assert!(report[0].contains("rank 1 (pid "), "{}", report[0]);
    assert!(
        report[0].contains(&format!("on {}", hostname())),
        "{}",
        report[0]
    );
    assert!(report[0].contains("SIGKILL"), "{}", report[0]);
    assert_all_gone("sleep 9732.5");
}

/// Signals mpirun while its ranks (and their children) run; nothing may survive.
fn signal_mpirun(sig: i32, name: &str, marker: &str) {
    // `sh -c` forks sleep (no exec), so the rank's own children must go too.
    let script = format!("{marker}; echo done");
    let child = start(&["-n", "3", "sh", "-c", &script], Stdio::null());
    wait_for_processes(marker, 3);
    // SAFETY: kill only sends a signal to the mpirun we started.
    unsafe { libc::kill(child.id() as i32, sig) };
    let o = finish(child);
    assert_eq!(o.code, Some(128 + sig));
    assert!(
        o.stderr.contains(&format!("received {name}")),
        "{}",
        o.stderr
    );
    assert_all_gone(marker);
}

#[test]
fn sigterm_to_mpirun_leaves_no_children() {
    signal_mpirun(libc::SIGTERM, "SIGTERM", "sleep 9733.5");
}

#[test]
fn sigint_to_mpirun_leaves_no_children() {
    signal_mpirun(libc::SIGINT, "SIGINT", "sleep 9735.5");
}

#[test]
fn ranks_die_with_a_killed_mpirun() {
    let mut child = start(&["-n", "2", "sh", "-c", "exec sleep 9734.5"], Stdio::null());
    wait_for_processes("sleep 9734.5", 2);
    child.kill().unwrap(); // SIGKILL: mpirun cannot clean up; PDEATHSIG must.
    child.wait().unwrap();
    assert_all_gone("sleep 9734.5");
}

#[test]
fn a_rank_leaving_others_in_a_barrier_ends_the_job() {
    let o = run(&["-n", "3", RANK, "early-exit"]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("rank 2 (pid ") && o.stderr.contains("wait for it in a PMI barrier"),
        "{}",
        o.stderr
    );
}

#[test]
fn pmi_ranks_exchange_values() {
    let o = run(&["-n", "4", RANK, "exchange"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let lines = o.lines();
    assert_eq!(lines.len(), 4, "{}", o.stdout);
    let kvs = lines[0]
        .split(" kvs ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let parts: Vec<&str> = kvs.split('_').collect();
    assert_eq!(parts.len(), 3, "kvs_<pid>_<hex>: {kvs}");
    assert_eq!(parts[0], "kvs");
    assert!(
        parts[2].len() == 16 && parts[2].chars().all(|c| c.is_ascii_hexdigit()),
        "{kvs}"
    );
    for (r, line) in lines.iter().enumerate() {
        let peer = (r + 1) % 4;
        assert_eq!(
            *line,
            format!(
                "rank {r}/4 appnum 0 universe 4 kvs {kvs} got Some(\"hello from {peer}\") from {peer}"
            )
        );
    }
}

#[test]
fn init_without_finalize_fails_the_job() {
    let o = run(&["-n", "3", RANK, "no-finalize"]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("rank 2 (pid ") && o.stderr.contains("without PMI finalize"),
        "{}",
        o.stderr
    );
}

#[test]
fn pmi_abort_ends_the_job_with_its_code() {
    let o = run(&["-n", "3", RANK, "abort"]);
    assert_eq!(o.code, Some(7), "{}", o.stderr);
    assert!(
        o.stderr.contains("rank 2 (pid ") && o.stderr.contains("with code 7: rank 2 gives up"),
        "{}",
        o.stderr
    );
}

#[test]
fn malformed_pmi_ends_the_job() {
    let o = run(&["-n", "2", RANK, "garbage"]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("rank 0 (pid ") && o.stderr.contains("broke the PMI protocol"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_job_past_its_time_limit_is_ended_with_255() {
    // --timeout, and MPIEXEC_TIMEOUT as MPICH's mpiexec reads it.
    let t = Instant::now();
    let o = run(&["--timeout", "1", "-n", "2", "sleep", "60"]);
    assert_eq!(o.code, Some(255), "{}", o.stderr);
    assert!(o.stderr.contains("time limit of 1 s"), "{}", o.stderr);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    let child = Command::new(MPIRUN)
        .args(["-n", "1", "sleep", "60"])
        .env("MPIEXEC_TIMEOUT", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = finish(child);
    assert_eq!(o.code, Some(255), "{}", o.stderr);
    let o = run(&["--timeout", "soon", "true"]);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(
        o.stderr.contains("positive number of seconds"),
        "{}",
        o.stderr
    );
}

/// A scratch directory removed at the end of the test.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("mpirun-launch-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    fn path(&self, rel: &str) -> String {
        self.0.join(rel).display().to_string()
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.0.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn mpmd_programs_share_one_job_with_their_own_appnum() {
    let o = run(&[
        "-n", "1", RANK, "exchange", ":", "-n", "2", RANK, "exchange",
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let lines = o.lines();
    assert_eq!(lines.len(), 3, "{}", o.stdout);
    for (r, line) in lines.iter().enumerate() {
        let app = if r == 0 { 0 } else { 1 };
        let peer = (r + 1) % 3;
        assert!(
            line.starts_with(&format!("rank {r}/3 appnum {app} universe 3 "))
                && line.ends_with(&format!("got Some(\"hello from {peer}\") from {peer}")),
            "{line}"
        );
    }
    // Each program its arguments, in rank order.
    let o = run(&[
        "-n",
        "1",
        "sh",
        "-c",
        "echo a$PMI_RANK",
        ":",
        "-n",
        "2",
        "sh",
        "-c",
        "echo b$PMI_RANK",
    ]);
    assert_eq!(o.lines(), ["a0", "b1", "b2"]);
}

#[test]
fn ranks_get_open_mpi_and_pmi_variables() {
    let o = run(&[
        "-n",
        "2",
        "sh",
        "-c",
        "echo $OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_SIZE $OMPI_COMM_WORLD_LOCAL_RANK \
         $OMPI_COMM_WORLD_LOCAL_SIZE $OMPI_COMM_WORLD_NODE_RANK $PMI_RANK $PMI_SIZE",
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(o.lines(), ["0 2 0 2 0 0 2", "1 2 1 2 1 1 2"]);
}

#[test]
fn environment_modes_choose_what_ranks_inherit() {
    let show = "echo \"${T_KEEP-unset} ${T_DROP-unset} ${FERRITE_T_CFG-unset} ${T_SET-unset}\"";
    let run_with = |args: &[&str]| {
        let child = Command::new(MPIRUN)
            .args(args)
            .env("T_KEEP", "keep")
            .env("T_DROP", "drop")
            .env("FERRITE_T_CFG", "cfg")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        finish(child)
    };
    let o = run_with(&["sh", "-c", show]);
    assert_eq!(o.stdout, "keep drop cfg unset\n", "{}", o.stderr);
    let o = run_with(&["-genvall", "sh", "-c", show]);
    assert_eq!(o.stdout, "keep drop cfg unset\n", "{}", o.stderr);
    let o = run_with(&["-genvnone", "-genv", "T_SET", "s", "sh", "-c", show]);
    assert_eq!(o.stdout, "unset unset cfg s\n", "{}", o.stderr);
    let o = run_with(&["-genvlist", "T_KEEP,PATH", "sh", "-c", show]);
    assert_eq!(o.stdout, "keep unset cfg unset\n", "{}", o.stderr);
    // Per program: the first keeps the job's mode, the second has its own.
    let o = run_with(&[
        "-genvnone",
        "-n",
        "1",
        "sh",
        "-c",
        show,
        ":",
        "-envlist",
        "T_DROP",
        "-env",
        "T_SET",
        "x",
        "sh",
        "-c",
        show,
    ]);
    assert_eq!(
        o.lines(),
        ["unset drop cfg x", "unset unset cfg unset"],
        "{}",
        o.stderr
    );
}

#[test]
fn working_directory_and_its_errors() {
    let d = Scratch::new("wdir");
    let dir = d.path("");
    let dir = dir.trim_end_matches('/');
    let o = run(&["-n", "2", "-wdir", dir, "sh", "-c", "pwd"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(o.lines(), [dir, dir]);
    let o = run(&["--wdir=/", "sh", "-c", "pwd"]);
    assert_eq!(o.stdout, "/\n", "{}", o.stderr);
    let missing = d.path("no/such/dir");
    let o = run(&["-wdir", &missing, "true"]);
    assert_ne!(o.code, Some(0));
    assert!(
        o.stderr.contains("working directory") && o.stderr.contains(&missing),
        "{}",
        o.stderr
    );
}

#[test]
fn output_goes_to_files_by_rank() {
    let d = Scratch::new("outfiles");
    let prog = "echo out $PMI_RANK; echo err $PMI_RANK >&2; printf tail";
    let dir = d.path("of");
    let o = run(&["-n", "2", "--output-filename", &dir, "sh", "-c", prog]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!((o.stdout.as_str(), o.stderr.as_str()), ("", ""));
    for r in 0..2 {
        assert_eq!(
            d.read(&format!("of/1/rank.{r}/stdout")),
            format!("out {r}\ntail")
        );
        assert_eq!(
            d.read(&format!("of/1/rank.{r}/stderr")),
            format!("err {r}\n")
        );
    }
    // MPICH's patterns; one file for every rank's stderr, with the -l prefix.
    let out = d.path("o.%r.txt");
    let err = d.path("all-err.txt");
    let o = run(&[
        "-n",
        "3",
        "-l",
        "-outfile-pattern",
        &out,
        "-errfile-pattern",
        &err,
        "sh",
        "-c",
        prog,
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    for r in 0..3 {
        assert_eq!(
            d.read(&format!("o.{r}.txt")),
            format!("[{r}] out {r}\n[{r}] tail\n")
        );
    }
    let mut errs: Vec<String> = d.read("all-err.txt").lines().map(String::from).collect();
    errs.sort();
    assert_eq!(errs, ["[0] err 0", "[1] err 1", "[2] err 2"]);
}

#[test]
fn prepend_rank_and_ignored_mca() {
    let o = run(&[
        "-n",
        "2",
        "-l",
        "--mca",
        "btl",
        "self,tcp",
        "sh",
        "-c",
        "echo hi; echo oops >&2",
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(o.lines(), ["[0] hi", "[1] hi"]);
    assert!(
        o.stderr.contains("warning: ignoring --mca btl self,tcp"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("[0] oops") && o.stderr.contains("[1] oops"));
}

#[test]
fn unknown_options_are_refused_and_nothing_runs() {
    let d = Scratch::new("unknown");
    let marker = d.path("ran");
    for bad in ["--frobnicate", "-genvx", "--map-by=diagonal"] {
        let o = run(&["-n", "2", bad, "sh", "-c", &format!("touch {marker}")]);
        assert_eq!(o.code, Some(2), "{bad}: {}", o.stderr);
        assert!(
            o.stderr.contains(bad.split('=').next().unwrap()),
            "{}",
            o.stderr
        );
        assert!(
            !std::path::Path::new(&marker).exists(),
            "{bad}: the program ran"
        );
    }
}

#[test]
fn ranks_per_host_and_bindings_report() {
    let o = run(&[
        "--host",
        "localhost",
        "-ppn",
        "3",
        "--report-bindings",
        "sh",
        "-c",
        "echo $PMI_RANK",
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(o.lines(), ["0", "1", "2"]);
    let reports = o.stderr.lines().filter(|l| l.contains(": rank ")).count();
    assert_eq!(reports, 3, "{}", o.stderr);
    let o = run(&["--bind-to", "none", "--report-bindings", "-n", "1", "true"]);
    assert!(
        o.stderr.contains("rank 0 on ") && o.stderr.contains("not bound"),
        "{}",
        o.stderr
    );
}
