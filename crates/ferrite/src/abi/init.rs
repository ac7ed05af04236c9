//! MPI_Init / MPI_Finalize and the process-level calls around them.

use super::consts::*;
use super::out;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::lock_order;
use crate::objects::Objects;
use crate::p2p::P2p;
use crate::runtime::{self, pmi};
use crate::state::{self, Ferrite};
use crate::transport::Net;
use std::os::raw::{c_char, c_int};

/// The thread that called MPI_Init / MPI_Init_thread (MPI_Is_thread_main): under
/// MPI_THREAD_SERIALIZED other threads call MPI too.
static MAIN_THREAD: std::sync::OnceLock<std::thread::ThreadId> = std::sync::OnceLock::new();

/// The thread level provided to the application (what MPI_Query_thread reports). The state's
/// `thread_level` is the level the library locks for: MPI_THREAD_MULTIPLE when the progress
/// thread runs (progress_thread.rs), whatever was asked.
static PROVIDED: std::sync::atomic::AtomicI32 =
    std::sync::atomic::AtomicI32::new(MPI_THREAD_SINGLE);

fn provided_level() -> c_int {
    PROVIDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Who keeps the runtime up: the world model (MPI_Init to MPI_Finalize) and open sessions.
/// The runtime starts with the first of them and ends with the last (MPI 4.1 section 11.2).
struct Users {
    world: World,
    sessions: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum World {
    NotStarted,
    Running,
    Finalized,
}

static USERS: std::sync::Mutex<Users> = std::sync::Mutex::new(Users {
    world: World::NotStarted,
    sessions: 0,
});

fn users() -> lock_order::Tracked<Users> {
    lock_order::lock(&USERS, lock_order::USERS)
}

/// Brings the runtime up: joins the job through PMI, sets up transports and the builtin
/// objects. Returns the thread level provided (the one asked for: all are supported).
fn start(required: c_int) -> MpiResult<c_int> {
    if state::is_finalized() {
        return Err(MpiError::new(
            MPI_ERR_OTHER,
            "MPI cannot start again in a process where it has ended (after MPI_Finalize, or \
             the last MPI_Session_finalize)",
        ));
    }
    // Checked first so a policy that cannot run fails before anything is set up.
    crate::transport::tcp::conn_policy()?;
    let (rank, size, kvsname) = pmi::init()?;
    let net = Net::init(rank, size, &kvsname)?;
    runtime::publish_secret(rank)?;
    pmi::barrier()?;
    let provided = required.clamp(MPI_THREAD_SINGLE, MPI_THREAD_MULTIPLE);
    PROVIDED.store(provided, std::sync::atomic::Ordering::Relaxed);
    let async_progress = crate::progress_thread::wanted();
    crate::objects::info::with(|i| {
        i.env.set("maxprocs", &size.to_string());
        Ok(())
    })?;
    state::install(Box::new(Ferrite {
        world_rank: rank,
        world_size: size,
        thread_level: if async_progress {
            MPI_THREAD_MULTIPLE
        } else {
            provided
        },
        objects: Objects::new(rank, size),
        p2p: P2p::new(rank, size),
        net,
        coll: Default::default(),
    }))?;
    // static/partial: the policy's initial connections, all at once (see Tcp::connect_init_peers).
    state::with_held(|st| {
        st.net.connect_init()?;
        st.wait_until(|st| !st.net.init_connecting())
    })?;
    if async_progress {
        crate::progress_thread::start()?;
    }
    Ok(provided)
}

/// Takes the runtime down: everything this process sent reaches its peers and theirs
/// reaches us, the report, PMI's finalize. Goes to the end even when a step fails (and
/// returns the first error): the runtime is over either way, and a rank that left without
/// PMI's finalize would make the launcher end the job for a missing MPI_Finalize.
fn stop() -> MpiResult<()> {
    crate::progress_thread::stop();
    let gathered = state::with_held(|st| {
        let gathered = runtime::quiesce(st).and_then(|()| runtime::report::at_finalize(st));
        st.net.shutdown();
        gathered
    });
    // Dropping the state closes the sockets, which frees the descriptors the report needs.
    state::take();
    let emitted = match gathered {
        Ok(Some(g)) => g.emit(),
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    let finalized = pmi::finalize();
    emitted?;
    Ok(finalized?)
}

fn init(required: c_int) -> MpiResult<c_int> {
    let mut u = users();
    if u.world != World::NotStarted {
        return Err(MpiError::new(
            MPI_ERR_OTHER,
            "MPI_Init called more than once",
        ));
    }
    let provided = if state::is_initialized() {
        // A session started the runtime: the world model joins it.
        state::with(|_| Ok(provided_level()))?
    } else {
        start(required)?
    };
    u.world = World::Running;
    // MPI is initialized once per process, so the first value is the only one.
    let _ = MAIN_THREAD.set(std::thread::current().id());
    Ok(provided)
}

/// MPI_Session_init's part: the runtime, started if no one else has. Returns the thread
/// level provided.
pub(crate) fn session_started(required: c_int) -> MpiResult<c_int> {
    let mut u = users();
    let provided = if state::is_initialized() {
        state::with(|_| Ok(provided_level()))?
    } else {
        start(required)?
    };
    u.sessions += 1;
    Ok(provided)
}

/// MPI_Session_finalize's part: the last user takes the runtime down.
pub(crate) fn session_ended() -> MpiResult<()> {
    let mut u = users();
    u.sessions = u.sessions.saturating_sub(1);
    if u.sessions == 0 && u.world != World::Running {
        stop()?;
    }
    Ok(())
}

mpi_fn! {
    fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) on ErrObj::NoObject => {
        init(MPI_THREAD_SINGLE).map(|_| ())
    }
}

mpi_fn! {
    fn MPI_Init_thread(
        _argc: *mut c_int,
        _argv: *mut *mut *mut c_char,
        required: c_int,
        provided: *mut c_int,
    ) on ErrObj::NoObject => {
        if !(MPI_THREAD_SINGLE..=MPI_THREAD_MULTIPLE).contains(&required) {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "invalid thread level {required}"));
        }
        let level = init(required)?;
        // SAFETY: `provided` comes from the C caller as an int* output argument.
        unsafe { out(provided, level) }
    }
}

mpi_fn! {
    fn MPI_Finalize() on ErrObj::NoObject => {
        if users().world != World::Running {
            return Err(MpiError::new(
                MPI_ERR_OTHER,
                "MPI_Finalize without MPI_Init (or called twice)",
            ));
        }
        // MPI_COMM_SELF is "freed" first, so its attributes' delete callbacks run while
        // MPI is fully usable (MPI 4.1 11.2.4); then those of MPI_COMM_WORLD.
        crate::objects::attr::delete_all(crate::objects::attr::Owner::Comm, MPI_COMM_SELF)?;
        crate::objects::attr::delete_all(crate::objects::attr::Owner::Comm, MPI_COMM_WORLD)?;
        let mut u = users();
        u.world = World::Finalized;
        if u.sessions == 0 {
            stop()?;
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Initialized(flag: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: `flag` comes from the C caller as an int* output argument.
        unsafe { out(flag, (users().world != World::NotStarted) as c_int) }
    }
}

mpi_fn! {
    fn MPI_Finalized(flag: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: `flag` comes from the C caller as an int* output argument.
        unsafe { out(flag, (users().world == World::Finalized) as c_int) }
    }
}

mpi_fn! {
    fn MPI_Query_thread(provided: *mut c_int) on ErrObj::NoObject => {
        let level = state::with(|_| Ok(provided_level()))?;
        // SAFETY: `provided` comes from the C caller as an int* output argument.
        unsafe { out(provided, level) }
    }
}

mpi_fn! {
    fn MPI_Is_thread_main(flag: *mut c_int) on ErrObj::NoObject => {
        state::with(|_| Ok(()))?;
        let main = MAIN_THREAD.get() == Some(&std::thread::current().id());
        // SAFETY: `flag` comes from the C caller as an int* output argument.
        unsafe { out(flag, main as c_int) }
    }
}

mpi_fn! {
    fn MPI_Abort(comm: MPI_Comm, errorcode: c_int) on ErrObj::Comm(comm) => {
        let rank = state::try_with(|st| st.world_rank as i64).unwrap_or(-1);
        let msg = format!("application called MPI_Abort(comm={comm:#x}, {errorcode}) - process {rank}");
        eprintln!("{msg}");
        runtime::abort_job(errorcode, &msg)
    }
}
