//! The process's PMI client: the launcher's ferrite-pmi client when `PMI_FD` or `PMI_PORT`
//! is set, otherwise a singleton (rank 0 of 1 with a local KVS), unless the environment
//! shows another launcher started this process as one of several ranks (see
//! [`foreign_launcher`]): that one refuses to run, rather than become one of N independent
//! singletons. Global, so abort paths can reach the launcher without the state lock.

use ferrite_pmi::{Client, PmiError};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::Mutex;

enum Backend {
    Launcher(Client),
    Singleton(HashMap<String, String>),
}

struct Pmi {
    rank: u32,
    size: u32,
    kvsname: String,
    appnum: Option<u32>,
    universe_size: Option<u32>,
    backend: Backend,
}

static PMI: Mutex<Option<Pmi>> = Mutex::new(None);
/// The launcher connection's descriptor, for [`abort`] when another thread holds [`PMI`].
static ABORT_FD: AtomicI32 = AtomicI32::new(-1);
/// This process's rank once [`init`] knew it (-1 before), for error reports made without
/// the state (after MPI_Finalize dropped it) and without taking [`PMI`]'s lock.
static RANK: AtomicI64 = AtomicI64::new(-1);

/// This process's rank in the job, once PMI init gave it.
pub fn known_rank() -> Option<u32> {
    u32::try_from(RANK.load(Ordering::Relaxed)).ok()
}

fn lock() -> crate::lock_order::Tracked<Option<Pmi>> {
    crate::lock_order::lock(&PMI, crate::lock_order::PMI)
}

/// What went wrong talking to the launcher, said in full (the layers above give it the MPI
/// class MPI_ERR_OTHER; transports their own kind).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

fn err(what: &str, e: PmiError) -> Error {
    Error(format!("{what}: {e}"))
}

fn with<T>(what: &str, f: impl FnOnce(&mut Pmi) -> std::result::Result<T, PmiError>) -> Result<T> {
    match lock().as_mut() {
        Some(p) => f(p).map_err(|e| err(what, e)),
        None => Err(Error(format!("{what}: PMI is not initialized"))),
    }
}

/// Connects to the launcher (or becomes a singleton); returns (rank, size, kvsname).
/// Calling it again returns the same values without reconnecting.
pub fn init() -> Result<(u32, u32, String)> {
    let mut guard = lock();
    if let Some(p) = guard.as_ref() {
        return Ok((p.rank, p.size, p.kvsname.clone()));
    }
    let pmi = match Client::from_env().map_err(|e| err("cannot join the job through PMI", e))? {
        Some(mut client) => {
            let info = client
                .init()
                .map_err(|e| err("PMI init with the launcher failed", e))?;
            if info.size == 0 || info.rank >= info.size {
                return Err(Error(format!(
                    "the launcher gave rank {} in a job of size {}",
                    info.rank, info.size
                )));
            }
            ABORT_FD.store(client.raw_fd(), Ordering::Release);
            Pmi {
                rank: info.rank,
                size: info.size,
                kvsname: info.kvsname,
                appnum: info.appnum,
                universe_size: info.universe_size,
                backend: Backend::Launcher(client),
            }
        }
        None => {
            let getenv = |k: &str| std::env::var(k).ok();
            if getenv("FERRITE_SINGLETON").as_deref() != Some("1") {
                if let Some(msg) = foreign_launcher(getenv) {
                    return Err(Error(msg));
                }
            }
            Pmi {
                rank: 0,
                size: 1,
                kvsname: format!("singleton_{}", std::process::id()),
                appnum: Some(0),
                universe_size: Some(1),
                backend: Backend::Singleton(HashMap::new()),
            }
        }
    };
    let out = (pmi.rank, pmi.size, pmi.kvsname.clone());
    RANK.store(i64::from(pmi.rank), Ordering::Relaxed);
    *guard = Some(pmi);
    Ok(out)
}

/// Without a PMI connection of ours (no `PMI_FD`/`PMI_PORT`): whether the environment shows
/// a launcher that started this process as one of several ranks and that Ferrite cannot
/// serve. Then the process must not run as a singleton (N copies would each compute alone
/// as rank 0 of 1): the message says what to use instead.
pub fn foreign_launcher(getenv: impl Fn(&str) -> Option<String>) -> Option<String> {
    let num = |k: &str| getenv(k).and_then(|v| v.trim().parse::<u64>().ok());
    let use_instead = "start it with Ferrite's mpirun (also inside a Slurm allocation: \
                 `salloc -n N mpirun ./prog`), with `srun --mpi=pmi2`, or with MPICH's \
                 mpiexec (Hydra); FERRITE_SINGLETON=1 runs it as a singleton anyway";
    // Under srun the step's task count is known; under Open MPI's mpirun its own.
    let slurm_tasks = num("SLURM_STEP_NUM_TASKS").or_else(|| num("SLURM_NTASKS"));
    let ompi_size = num("OMPI_COMM_WORLD_SIZE");
    let size = ompi_size.or(slurm_tasks);
    if let Some(ns) =
        getenv("PMIX_NAMESPACE").or_else(|| getenv("PMIX_RANK").map(|_| String::new()))
    {
        if size != Some(1) {
            let by = if getenv("SLURM_STEP_ID").is_some() {
                "srun --mpi=pmix"
            } else {
                "a PMIx launcher (Open MPI's mpirun/prterun, or srun --mpi=pmix)"
            };
            return Some(format!(
                "this process was started by {by} (PMIX_NAMESPACE={ns:?}), which speaks \
                 PMIx; Ferrite speaks PMI-1 and cannot join that job: {use_instead}"
            ));
        }
    }
    if ompi_size.is_some_and(|n| n > 1) {
        return Some(format!(
            "this process was started by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE={}), which \
                 Ferrite cannot join: {use_instead}",
            ompi_size.map_or("?".to_string(), |n| n.to_string())
        ));
    }
    if getenv("SLURM_PROCID").is_some() && slurm_tasks.is_some_and(|n| n > 1) {
        return Some(format!(
            "this process is task {} of {} started by srun with no PMI that Ferrite \
                 speaks (srun --mpi=none, often the default): {use_instead}",
            getenv("SLURM_PROCID").unwrap_or_default(),
            slurm_tasks.unwrap_or(0)
        ));
    }
    None
}

/// Publishes `key=value` to the job; visible to every rank after the next [`barrier`].
pub fn put(key: &str, value: &str) -> Result<()> {
    with(&format!("PMI put of {key:?}"), |p| match &mut p.backend {
        Backend::Launcher(c) => c.put(key, value),
        Backend::Singleton(kvs) => {
            kvs.insert(key.into(), value.into());
            Ok(())
        }
    })
}

/// The value some rank put under `key` (before the last barrier), if any.
pub fn get(key: &str) -> Result<Option<String>> {
    with(&format!("PMI get of {key:?}"), |p| match &mut p.backend {
        Backend::Launcher(c) => c.get(key),
        Backend::Singleton(kvs) => Ok(kvs.get(key).cloned()),
    })
}

/// Commit + barrier: returns when every rank arrived; all earlier puts are then visible.
pub fn barrier() -> Result<()> {
    with("PMI barrier", |p| match &mut p.backend {
        Backend::Launcher(c) => c.barrier(),
        Backend::Singleton(_) => Ok(()),
    })
}

/// [`barrier`] in two halves, for a caller that makes progress while it waits (MPI_Finalize):
/// announces this rank's arrival; returns the launcher connection's descriptor, readable
/// when [`barrier_done`] may have news (`None` for a singleton, whose barrier is done).
pub fn barrier_enter() -> Result<Option<RawFd>> {
    with("PMI barrier", |p| match &mut p.backend {
        Backend::Launcher(c) => c.barrier_enter().map(|_| Some(c.raw_fd())),
        Backend::Singleton(_) => Ok(None),
    })
}

/// After [`barrier_enter`]: whether every rank arrived. Does not wait.
pub fn barrier_done() -> Result<bool> {
    with("PMI barrier", |p| match &mut p.backend {
        Backend::Launcher(c) => c.barrier_poll(),
        Backend::Singleton(_) => Ok(true),
    })
}

/// Tells the launcher this rank is done (it may now exit without failing the job).
pub fn finalize() -> Result<()> {
    with("PMI finalize", |p| match &mut p.backend {
        Backend::Launcher(c) => c.finalize(),
        Backend::Singleton(_) => Ok(()),
    })
}

/// MPI_APPNUM: which application of a multi-program launch this process belongs to.
/// `None` when the launcher gives none (MPI_APPNUM is then not set).
pub fn appnum() -> Result<Option<u32>> {
    with("PMI appnum", |p| Ok(p.appnum))
}

/// MPI_UNIVERSE_SIZE as the launcher reports it.
/// `None` when the launcher does not know it (MPI_UNIVERSE_SIZE is then not set).
pub fn universe_size() -> Result<Option<u32>> {
    with("PMI universe size", |p| Ok(p.universe_size))
}

static SECRET: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Rank 0 makes a random per-job secret and publishes it through PMI; every rank reads it
/// after the init barrier ([`job_secret`]). It guards every socket Ferrite opens.
pub fn publish_secret(rank: u32) -> Result<()> {
    if rank == 0 {
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
            .map_err(|e| Error(format!("cannot read /dev/urandom: {e}")))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        put("ferrite.secret", &hex)?;
    }
    Ok(())
}

/// The job's secret (fetched from PMI on first use, after MPI_Init's barrier).
pub fn job_secret() -> Result<&'static str> {
    if let Some(s) = SECRET.get() {
        return Ok(s);
    }
    let s =
        get("ferrite.secret")?.ok_or_else(|| Error("the launcher holds no job secret".into()))?;
    Ok(SECRET.get_or_init(|| s))
}

/// Asks the launcher to end the job with `code`, printing `msg`. Never blocks on the PMI
/// lock: if another thread holds it (e.g. waiting in a barrier), the request is written
/// straight to the connection in one write. Does nothing for a singleton.
pub fn abort(code: i32, msg: &str) {
    if let Ok(mut guard) = PMI.try_lock() {
        if let Some(Pmi {
            backend: Backend::Launcher(c),
            ..
        }) = guard.as_mut()
        {
            let _ = c.abort(code, msg);
        }
        return;
    }
    let fd = ABORT_FD.load(Ordering::Acquire);
    if fd >= 0 {
        let line = ferrite_pmi::abort_line(code, msg);
        // SAFETY: fd is the launcher connection, open for the life of the process; write
        // reads at most line.len() bytes from a valid buffer.
        let _ = unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singleton_keeps_a_local_kvs() {
        if std::env::var_os("PMI_FD").is_some() || std::env::var_os("PMI_PORT").is_some() {
            return; // run under a launcher: not a singleton
        }
        let (rank, size, kvsname) = init().unwrap();
        assert_eq!((rank, size), (0, 1));
        assert_eq!(init().unwrap().2, kvsname, "init is idempotent");
        put("pmi-test-key", "a value with spaces").unwrap();
        barrier().unwrap();
        assert_eq!(
            get("pmi-test-key").unwrap().as_deref(),
            Some("a value with spaces")
        );
        assert_eq!(get("pmi-test-missing").unwrap(), None);
        assert_eq!(
            (appnum().unwrap(), universe_size().unwrap()),
            (Some(0), Some(1))
        );
        abort(3, "ignored by a singleton");
    }

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn foreign_launchers_of_several_ranks_are_refused() {
        let pmix = foreign_launcher(env(&[
            ("PMIX_NAMESPACE", "slurm.pmix.7.0"),
            ("PMIX_RANK", "1"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "4"),
        ]))
        .unwrap();
        assert!(
            pmix.contains("srun --mpi=pmix") && pmix.contains("--mpi=pmi2"),
            "{pmix}"
        );
        let ompi = foreign_launcher(env(&[("OMPI_COMM_WORLD_SIZE", "2")])).unwrap();
        assert!(ompi.contains("Open MPI's mpirun"), "{ompi}");
        let prte = foreign_launcher(env(&[("PMIX_RANK", "0")])).unwrap();
        assert!(prte.contains("PMIx launcher"), "{prte}");
        let srun =
            foreign_launcher(env(&[("SLURM_PROCID", "3"), ("SLURM_STEP_NUM_TASKS", "4")])).unwrap();
        assert!(srun.contains("task 3 of 4 started by srun"), "{srun}");
        // One task, or no launcher at all: a singleton is right.
        assert_eq!(foreign_launcher(env(&[])), None);
        assert_eq!(
            foreign_launcher(env(&[("SLURM_PROCID", "0"), ("SLURM_STEP_NUM_TASKS", "1")])),
            None
        );
        assert_eq!(
            foreign_launcher(env(&[("PMIX_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "1")])),
            None
        );
        // A program run by hand inside `salloc -n 4`: no task of a step.
        assert_eq!(
            foreign_launcher(env(&[("SLURM_JOB_ID", "9"), ("SLURM_NTASKS", "4")])),
            None
        );
    }
}
