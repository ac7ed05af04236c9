//! Runtime services: the PMI client, the configuration registry, process-level helpers.

pub mod config;
pub mod pmi;
pub mod report;

use crate::error::MpiResult;
use crate::state::Held;

/// This host's name (MPI_Get_processor_name, error reports, business cards).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into a valid, owned buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// MPI_Finalize's barrier: makes progress until this rank has nothing in flight (every
/// packet handed over, every datagram acknowledged, no acknowledgement owed), then waits in
/// the job-wide PMI barrier still making progress, so peers not done yet get what they need
/// from this rank (acknowledgements, closes they ask for). When it returns no rank has
/// anything in flight. See docs/architecture.md, "MPI_Finalize".
pub fn quiesce(st: &mut Held) -> MpiResult<()> {
    st.wait_until(|st| !st.p2p.has_backlog() && !st.net.has_pending())?;
    let Some(fd) = pmi::barrier_enter()? else {
        return Ok(()); // a singleton: no peers
    };
    st.net.wake_on(fd)?;
    let mut failed = None;
    st.wait_until(|_| match pmi::barrier_done() {
        Ok(done) => done,
        Err(e) => {
            failed = Some(e);
            true
        }
    })?;
    failed.map_or(Ok(()), Err)
}

/// Ends the whole job: tells the launcher (which stops every other rank) and exits.
/// Does not need the state lock, so it works from any error path.
pub fn abort_job(code: i32, msg: &str) -> ! {
    pmi::abort(code, msg);
    // Exit without running destructors or atexit handlers of a program in an unknown state.
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(if code == 0 { 1 } else { code & 0xff }) }
}

static SECRET: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Rank 0 makes a random per-job secret and publishes it through PMI; every rank reads it
/// after the init barrier ([`job_secret`]). It guards every socket Ferrite opens.
pub fn publish_secret(rank: u32) -> crate::error::MpiResult<()> {
    if rank == 0 {
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
            .map_err(|e| {
                crate::mpi_err!(
                    crate::consts::MPI_ERR_OTHER,
                    "cannot read /dev/urandom: {e}"
                )
            })?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        pmi::put("ferrite.secret", &hex)?;
    }
    Ok(())
}

/// The job's secret (fetched from PMI on first use, after MPI_Init's barrier).
pub fn job_secret() -> crate::error::MpiResult<&'static str> {
    if let Some(s) = SECRET.get() {
        return Ok(s);
    }
    let s = pmi::get("ferrite.secret")?.ok_or_else(|| {
        crate::mpi_err!(
            crate::consts::MPI_ERR_OTHER,
            "the launcher holds no job secret"
        )
    })?;
    Ok(SECRET.get_or_init(|| s))
}
