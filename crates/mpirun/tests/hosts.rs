//! mpirun with ranks on "other hosts": the launcher agents here are scripts that record the
//! host and run the command on this machine, so remote ranks really go through the agent and
//! join over PMI_PORT (tests/hosts/run.sh does the same across network namespaces).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MPIRUN: &str = env!("CARGO_BIN_EXE_mpirun");
const RANK: &str = env!("CARGO_BIN_EXE_pmi-test-rank");

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// A scratch directory removed at the end of the test.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("mpirun-hosts-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    /// An executable script `name` in the directory.
    fn script(&self, name: &str, body: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let p = self.0.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.to_string_lossy().into_owned()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.0.join(name)).unwrap_or_default()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str]) -> Outcome {
    run_env(args, &[])
}

fn run_env(args: &[&str], env: &[(&str, String)]) -> Outcome {
    let mut child = Command::new(MPIRUN)
        .args(args)
        // Not under a Slurm allocation unless the test fakes one.
        .env_remove("SLURM_JOB_ID")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mpirun");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("mpirun did not finish within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// An agent that logs `<host>` to `agent.log` and runs the command here.
fn local_agent(d: &Dir) -> String {
    let log = d.0.join("agent.log");
    d.script(
        "agent",
        &format!("echo \"$1\" >> '{}'; shift; exec \"$@\"", log.display()),
    )
}

#[test]
fn remote_ranks_join_over_pmi_port_through_the_agent() {
    let d = Dir::new("join");
    let agent = local_agent(&d);
    // No -n: the slots say 3 (one here, two on "far").
    let o = run(&[
        "--host",
        "localhost,far:2",
        "--launcher",
        &agent,
        "--iface",
        "127.0.0.1",
        RANK,
        "exchange",
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines.len(), 3, "{}", o.stdout);
    for (r, line) in lines.iter().enumerate() {
        let peer = (r + 1) % 3;
        assert!(
            line.starts_with(&format!("rank {r}/3 "))
                && line.ends_with(&format!("got Some(\"hello from {peer}\") from {peer}")),
            "{line}"
        );
    }
    assert_eq!(d.read("agent.log"), "far\nfar\n", "rank 0 started directly");
}

#[test]
fn remote_environment_is_passed_on_the_agent_command_line() {
    let d = Dir::new("env");
    // Named ssh: mpirun quotes every word for a remote shell, which this one runs.
    let ssh = d.script("ssh", "shift; exec sh -c \"$*\"");
    let o = run(&[
        "--host",
        "far",
        "--launcher",
        &ssh,
        "--iface",
        "lo",
        "-x",
        "GREETING=it's a b",
        "sh",
        "-c",
        "echo \"$GREETING|$PMI_ID|$PMI_PORT|$FERRITE_TCP_IF|$MPI_LOCALRANKID/$MPI_LOCALNRANKS|${PMI_FD-unset}\"",
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let f: Vec<&str> = o.stdout.trim_end().split('|').collect();
    assert_eq!(f[0], "it's a b");
    assert_eq!(f[1], "0");
    assert!(f[2].starts_with("127.0.0.1:"), "{}", f[2]);
    assert_eq!(&f[3..], ["lo", "0/1", "unset"]);
}

#[test]
fn a_remote_rank_failing_ends_the_job_naming_rank_and_host() {
    let d = Dir::new("fail");
    let agent = local_agent(&d);
    let o = run(&[
        "-n",
        "2",
        "--host",
        "localhost,far",
        "--launcher",
        &agent,
        RANK,
        "abort",
    ]);
    assert_eq!(o.code, Some(7), "{}", o.stderr);
    assert!(o.stderr.contains("rank 1 on far"), "{}", o.stderr);

    let o = run(&["--host", "far", "--launcher", &agent, "sh", "-c", "exit 5"]);
    assert_eq!(o.code, Some(5));
    assert!(
        o.stderr.contains("rank 0 on far") && o.stderr.contains("exited with code 5"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_missing_agent_or_bad_hostfile_is_reported() {
    let o = run(&["--host", "far", "--launcher", "/nonexistent/agent", "true"]);
    assert_eq!(o.code, Some(127), "{}", o.stderr);
    assert!(o.stderr.contains("cannot start rank 0"), "{}", o.stderr);
    let o = run(&["--hostfile", "/nonexistent/hosts", "true"]);
    assert_eq!(o.code, Some(2));
    assert!(o.stderr.contains("/nonexistent/hosts"), "{}", o.stderr);
}

#[test]
fn a_stranger_on_the_pmi_port_is_turned_away() {
    let d = Dir::new("stranger");
    let seen = d.0.join("stranger.out");
    // Before starting the real rank, the agent claims its id without the job's secret and
    // records whatever mpirun answers (nothing: the connection is closed).
    let agent = d.script(
        "agent",
        &format!(
            "shift; for w in \"$@\"; do case $w in PMI_PORT=*) p=${{w#PMI_PORT=}};; \
             PMI_ID=*) id=${{w#PMI_ID=}};; esac; done\n\
             bash -c 'exec 3<>/dev/tcp/'${{p%:*}}'/'${{p##*:}}'; \
             printf \"cmd=initack pmiid=%s\\n\" '$id' >&3; timeout 5 cat <&3' > '{}' 2>&1\n\
             exec \"$@\"",
            seen.display()
        ),
    );
    let o = run(&[
        "--host",
        "far",
        "--launcher",
        &agent,
        "--iface",
        "127.0.0.1",
        RANK,
        "exchange",
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stdout.starts_with("rank 0/1 "), "{}", o.stdout);
    assert_eq!(d.read("stranger.out"), "", "the stranger got an answer");
}

/// Processes whose command line contains `needle`, not counting shells that mention it.
fn running(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle) && !c.starts_with("/bin/sh") && !c.starts_with("sh "))
        .count()
}

#[test]
fn sigterm_to_mpirun_ends_remote_ranks_too() {
    let d = Dir::new("term");
    let agent = local_agent(&d);
    // A duration no other test uses marks this job's processes.
    let marker = format!("3{}.5", std::process::id() % 1000);
    let child = Command::new(MPIRUN)
        .args([
            "--host",
            "localhost,far:2",
            "--launcher",
            &agent,
            "sleep",
            &marker,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while running(&format!("sleep {marker}")) < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "ranks never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill has no memory effects; the pid is our live child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));
    let start = Instant::now();
    while running(&format!("sleep {marker}")) > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "a rank survived the job"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fake `srun` on PATH that logs its options and runs the command here.
fn fake_srun(d: &Dir) -> Vec<(&'static str, String)> {
    let log = d.0.join("srun.log");
    d.script(
        "srun",
        &format!(
            "opts=; while [ $# -gt 0 ]; do case $1 in --*) opts=\"$opts $1\"; shift ;; \
             *) break ;; esac; done; echo \"$opts\" >> '{}'; exec \"$@\"",
            log.display()
        ),
    );
    let path = format!(
        "{}:{}",
        d.0.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    vec![
        ("PATH", path),
        ("SLURM_JOB_ID", "77".into()),
        ("SLURM_NTASKS", "3".into()),
    ]
}

#[test]
fn under_slurm_the_allocation_gives_hosts_and_ranks_and_srun_starts_them() {
    let d = Dir::new("slurm");
    let mut env = fake_srun(&d);
    env.push(("SLURM_JOB_NODELIST", "node[07-08]".into()));
    env.push(("SLURM_TASKS_PER_NODE", "2,1".into()));
    // No -n, no --host: 3 ranks (SLURM_NTASKS), on node07 (2) and node08 (1), via srun.
    let o = run_env(&["--iface", "127.0.0.1", RANK, "exchange"], &env);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines.len(), 3, "{}", o.stdout);
    for (r, line) in lines.iter().enumerate() {
        let peer = (r + 1) % 3;
        assert!(
            line.starts_with(&format!("rank {r}/3 appnum 0 "))
                && line.ends_with(&format!("got Some(\"hello from {peer}\") from {peer}")),
            "{line}"
        );
    }
    let mut log: Vec<String> = d.read("srun.log").lines().map(String::from).collect();
    log.sort();
    let opts = " --nodes=1 --ntasks=1 --overlap --mpi=none --kill-on-bad-exit=1";
    assert_eq!(
        log,
        [
            format!(" --nodelist=node07{opts}"),
            format!(" --nodelist=node07{opts}"),
            format!(" --nodelist=node08{opts}")
        ]
    );
}

#[test]
fn under_slurm_ranks_of_this_node_start_directly() {
    let d = Dir::new("slurm-local");
    let mut env = fake_srun(&d);
    env.push(("SLURM_JOB_NODELIST", "localhost".into()));
    env.push(("SLURM_TASKS_PER_NODE", "3".into()));
    let o = run_env(&["sh", "-c", "echo $PMI_RANK/$PMI_SIZE"], &env);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["0/3", "1/3", "2/3"]);
    assert_eq!(d.read("srun.log"), "", "srun is only for other nodes");
    // -n and --host win over the allocation.
    let o = run_env(
        &[
            "-n",
            "2",
            "--host",
            "localhost:2",
            "sh",
            "-c",
            "echo $PMI_SIZE",
        ],
        &env,
    );
    assert_eq!(o.stdout, "2\n2\n", "{}", o.stderr);
}

#[test]
fn remote_ranks_start_in_the_working_directory_with_their_programs_settings() {
    let d = Dir::new("wdir");
    let agent = local_agent(&d);
    let dir = d.0.display().to_string();
    let o = run(&[
        "--host",
        "far",
        "--launcher",
        &agent,
        "--iface",
        "127.0.0.1",
        "-n",
        "1",
        "-wdir",
        &dir,
        "sh",
        "-c",
        "echo a $(pwd) $PMI_RANK $OMPI_COMM_WORLD_SIZE",
        ":",
        "-n",
        "1",
        "-wdir",
        "/",
        "-env",
        "ONLY_B",
        "b",
        "sh",
        "-c",
        "echo b $(pwd) $PMI_RANK ${ONLY_B}",
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, [format!("a {dir} 0 2"), "b / 1 b".to_string()]);
}
