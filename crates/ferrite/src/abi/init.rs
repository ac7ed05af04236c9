//! MPI_Init / MPI_Finalize and the process-level calls around them.

use super::consts::*;
use super::out;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::objects::Objects;
use crate::p2p::P2p;
use crate::runtime::{self, pmi};
use crate::state::{self, Ferrite};
use crate::transport::Net;
use std::os::raw::{c_char, c_int};

/// Brings MPI up: joins the job through PMI, sets up transports and the builtin objects.
/// Returns the thread level provided (at most MPI_THREAD_SERIALIZED).
/// The thread that called MPI_Init / MPI_Init_thread (MPI_Is_thread_main): under
/// MPI_THREAD_SERIALIZED other threads call MPI too.
static MAIN_THREAD: std::sync::OnceLock<std::thread::ThreadId> = std::sync::OnceLock::new();

fn init(required: c_int) -> MpiResult<c_int> {
    if state::is_initialized() {
        return Err(MpiError::new(
            MPI_ERR_OTHER,
            "MPI_Init called more than once",
        ));
    }
    // Checked first so a policy that cannot run fails before anything is set up.
    crate::transport::tcp::conn_policy()?;
    let (rank, size, kvsname) = pmi::init()?;
    let net = Net::init(rank, size, &kvsname)?;
    runtime::publish_secret(rank)?;
    pmi::barrier()?;
    let provided = required.clamp(MPI_THREAD_SINGLE, MPI_THREAD_SERIALIZED);
    // MPI is initialized once per process, so the first value is the only one.
    let _ = MAIN_THREAD.set(std::thread::current().id());
    crate::objects::info::with(|i| {
        i.env.set("maxprocs", &size.to_string());
        Ok(())
    })?;
    state::install(Box::new(Ferrite {
        world_rank: rank,
        world_size: size,
        thread_level: provided,
        objects: Objects::new(rank, size),
        p2p: P2p::new(rank, size),
        net,
        coll: Default::default(),
    }))?;
    // static/partial: the policy's initial connections, all at once (see Tcp::connect_init_peers).
    state::with(|st| {
        st.net.connect_init()?;
        st.wait_until(|st| !st.net.init_connecting())
    })?;
    Ok(provided)
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
        // MPI_COMM_SELF is "freed" first, so its attributes' delete callbacks run while
        // MPI is fully usable (MPI 4.1 11.2.4); then those of MPI_COMM_WORLD.
        crate::objects::attr::delete_all(crate::objects::attr::Owner::Comm, MPI_COMM_SELF)?;
        crate::objects::attr::delete_all(crate::objects::attr::Owner::Comm, MPI_COMM_WORLD)?;
        state::with(|st| {
            // Everything this process sent reaches its peers, and every peer's reaches us.
            runtime::quiesce(st)?;
            runtime::report::at_finalize(st)?;
            st.net.shutdown();
            Ok(())
        })?;
        state::take();
        pmi::finalize()
    }
}

mpi_fn! {
    fn MPI_Initialized(flag: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: `flag` comes from the C caller as an int* output argument.
        unsafe { out(flag, state::is_initialized() as c_int) }
    }
}

mpi_fn! {
    fn MPI_Finalized(flag: *mut c_int) on ErrObj::NoObject => {
        // SAFETY: `flag` comes from the C caller as an int* output argument.
        unsafe { out(flag, state::is_finalized() as c_int) }
    }
}

mpi_fn! {
    fn MPI_Query_thread(provided: *mut c_int) on ErrObj::NoObject => {
        let level = state::with(|st| Ok(st.thread_level))?;
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
