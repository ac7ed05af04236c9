//! Cross-memory attach: single-copy reads from a peer's address space (`process_vm_readv`),
//! the shared-memory counterpart of an RDMA read.

use std::io;

/// Lets any process of ours read our memory despite Yama's ptrace_scope=1 (which otherwise
/// allows only ancestors). Failure is harmless: reads then fail with EPERM and fall back.
pub fn allow_readers() {
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(
            libc::PR_SET_PTRACER,
            libc::PR_SET_PTRACER_ANY as libc::c_ulong,
            0,
            0,
            0,
        )
    };
}

/// Reads `dst.len()` bytes at `addr` in process `pid`.
pub fn read(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<()> {
    let mut done = 0usize;
    while done < dst.len() {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: dst.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: dst.len() - done,
        };
        // SAFETY: `local` describes memory we own and may write; the kernel checks `remote`
        // against the other process's mappings (EFAULT if invalid), never touching ours.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        done += n as usize;
    }
    Ok(())
}

/// True for errors meaning "this kind of access is not allowed here" (not "bad address").
pub fn is_unavailable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::ENOSYS | libc::EACCES)
    )
}
