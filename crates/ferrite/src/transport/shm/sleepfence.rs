//! Asymmetric fences for the two sleep handshakes of the shared-memory transport.
//!
//! Both are Dekker's: a receiver about to sleep sets `sleeping`, then re-checks for packets,
//! while a sender publishes a packet, then reads `sleeping`; a sender about to sleep for
//! room sets its `credit_waiters` bit, then re-checks for room, while a receiver frees room,
//! then reads `credit_waiters`. Each side needs a full fence between its store and its load.
//! A full fence (x86 `mfence`) waits until the store buffer drains, and the store just made
//! is a slot whose line sits in the other core's cache: a cross-core round trip on every
//! packet, which serialises a window of Isends.
//!
//! The per-packet sides (publishing, freeing) run millions of times, the sleeping sides
//! rarely, so the per-packet side takes a compiler fence only ([`light`]) and the side about
//! to sleep calls membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) ([`heavy`]): every running
//! thread of every process registered for it executes a full fence before it returns, and a
//! thread not running has passed one when it was switched out. That is the fence the light
//! side left out, placed where it is needed (a few microseconds, once per sleep).
//!
//! Only packets of the per-pair fast rings (fastring.rs: the busy pairs) are published
//! with the light fence; queue packets keep the full one, so a receiver without a fast ring
//! sleeps with a full fence only, and the membarrier (a few microseconds here) is paid by
//! ranks with busy pairs. A process registers in `Shm::new` (`FERRITE_SHM_MEMBARRIER=0`:
//! never) and says so in its segment header; a sender takes the light fence towards a
//! receiver only when both are registered. A receiver frees room with the light fence when it is registered; a sender
//! that could not register sleeps for room with a full fence only, and may then miss its
//! ring, which costs at most the 1 ms a sleep with a send backlog lasts (progress.rs). No
//! kernel we run on lets one process of a job register and another not.

use std::sync::atomic::{compiler_fence, fence, Ordering};
use std::sync::OnceLock;

const CMD_QUERY: libc::c_int = 0;
const CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

fn membarrier(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes a command and two integer flags; no memory is passed.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) }
}

/// Registers this process for global expedited membarriers (once); true when the kernel
/// supports them and the registration succeeded.
pub fn register() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        let cmds = membarrier(CMD_QUERY);
        cmds >= 0
            && cmds & CMD_GLOBAL_EXPEDITED as libc::c_long != 0
            && membarrier(CMD_REGISTER_GLOBAL_EXPEDITED) == 0
    })
}

/// The per-packet side: a compiler fence when the other side fences for us (`asym`),
/// else a full fence.
#[inline]
pub fn light(asym: bool) {
    if asym {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The side about to sleep: a full fence here and, when `asym`, in every running thread
/// of every registered process. False when the membarrier call failed: the caller must not
/// sleep (a light side may not have fenced).
pub fn heavy(asym: bool) -> bool {
    fence(Ordering::SeqCst);
    !asym || membarrier(CMD_GLOBAL_EXPEDITED) == 0
}
