//! Keeps libfabric's start-up from reading `/proc/kallsyms` when the verbs provider is not
//! the one asked for.
//!
//! libfabric 1.17 initializes every built-in provider on its first fi_getinfo, whatever the
//! hints or FI_PROVIDER say, and the verbs provider's init (`vrb_os_mem_support`) reads the
//! whole of /proc/kallsyms twice, looking for `ib_register_peer_memory_client` and
//! `ib_umem_dmabuf_get` (GPU peer memory and dma-buf registration support, used by verbs
//! only). The kernel formats its ~120,000 symbols for each read: 0.2-0.5 s of wall time per
//! process, about 80% of an ofi rank's start-up. No libfabric setting skips it.
//!
//! So libmpi.so exports `fopen`, which libfabric's reference binds to (as it binds to the
//! memory hooks of `memhooks.rs`). While this thread is inside fi_getinfo for a provider
//! other than verbs, opening /proc/kallsyms fails with ENOENT, which the verbs init takes as
//! "no peer memory, no dma-buf" and goes on. Every other call, and every call on another
//! thread or outside fi_getinfo, goes straight to libc's fopen. A provider named with
//! "verbs" (e.g. "verbs;ofi_rxm") keeps libfabric's behaviour. Where libmpi itself is
//! loaded with dlopen (mpi4py), libfabric binds to libc's fopen and reads the file as before.

use std::cell::Cell;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

thread_local! {
    /// This thread is in fi_getinfo for a provider that does not need the kernel's symbols.
    static HIDDEN: Cell<bool> = const { Cell::new(false) };
}

/// Whether libfabric may be kept from reading /proc/kallsyms while it looks for `provider`.
pub(super) fn may_hide(provider: &str) -> bool {
    !provider.to_ascii_lowercase().contains("verbs")
}

/// Runs `f` (a call into libfabric) with /proc/kallsyms hidden from this thread's fopen.
pub(super) fn hidden<T>(f: impl FnOnce() -> T) -> T {
    let was = HIDDEN.with(|h| h.replace(true));
    let r = f();
    HIDDEN.with(|h| h.set(was));
    r
}

static NEXT_FOPEN: AtomicUsize = AtomicUsize::new(0);

/// fopen(3); fails with ENOENT for /proc/kallsyms inside [`hidden`].
///
/// # Safety
/// As fopen(3): `path` and `mode` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    if HIDDEN.with(Cell::get)
        && !path.is_null()
        // SAFETY: fopen's caller passes a NUL-terminated path.
        && unsafe { CStr::from_ptr(path) } == c"/proc/kallsyms"
    {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::ENOENT };
        return std::ptr::null_mut();
    }
    let mut f = NEXT_FOPEN.load(Relaxed);
    if f == 0 {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only reads the link maps.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"fopen".as_ptr()) } as usize;
        if f == 0 {
            // SAFETY: as above; libc's own name for it, should fopen be missing.
            f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"fopen64".as_ptr()) } as usize;
        }
        NEXT_FOPEN.store(f, Relaxed);
    }
    if f == 0 {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return std::ptr::null_mut();
    }
    // SAFETY: f is libc's fopen, which has this signature.
    let f: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE =
        unsafe { std::mem::transmute(f) };
    // SAFETY: the caller's arguments, passed on.
    unsafe { f(path, mode) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opens(path: &CStr) -> bool {
        // SAFETY: valid C strings; a FILE we got is closed at once.
        unsafe {
            let f = fopen(path.as_ptr(), c"r".as_ptr());
            if f.is_null() {
                return false;
            }
            libc::fclose(f);
            true
        }
    }

    #[test]
    fn kallsyms_is_hidden_only_inside_hidden_and_only_it() {
        let readable = opens(c"/proc/kallsyms");
        assert!(opens(c"/proc/self/status"));
        hidden(|| {
            assert!(!opens(c"/proc/kallsyms"));
            // SAFETY: errno is this thread's.
            assert_eq!(unsafe { *libc::__errno_location() }, libc::ENOENT);
            assert!(opens(c"/proc/self/status"), "other files open as before");
            // Another thread is not affected.
            let other = std::thread::spawn(|| opens(c"/proc/kallsyms"))
                .join()
                .unwrap();
            assert_eq!(other, readable);
        });
        assert_eq!(opens(c"/proc/kallsyms"), readable, "visible again after");
    }

    #[test]
    fn verbs_keeps_the_kernel_symbols() {
        assert!(may_hide("tcp"));
        assert!(may_hide("udp"));
        assert!(!may_hide("verbs"));
        assert!(!may_hide("verbs;ofi_rxm"));
        assert!(!may_hide("VERBS"));
    }
}
