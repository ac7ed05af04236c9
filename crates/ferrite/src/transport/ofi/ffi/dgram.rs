//! The part of libfabric's ABI the datagram channel uses (`ofi/dgram.rs`): connectionless
//! FI_EP_DGRAM endpoints, their address vector (fi_av_open, fi_av_insert), and sends and
//! receives addressed by `fi_addr_t`. Same rules as the rest of `ffi`: `#[repr(C)]` copies
//! of libfabric 1.17's structs, calls through the objects' ops tables, owning wrappers.

use super::{
    check, close_fid, post, strerror, Cq, Domain, Ep, Fabric, FiAddr, Fid, Info, Query, FI_MSG,
    FI_RECV, FI_SEND, FI_TRANSMIT,
};
use std::ffi::{c_int, c_void};
use std::ptr::{null, null_mut};

const FI_EP_DGRAM: u32 = 2;
const FI_AV_TABLE: u32 = 2;
/// Receive from any source.
const FI_ADDR_UNSPEC: FiAddr = u64::MAX;

#[repr(C)]
struct FiAvAttr {
    type_: u32,
    rx_ctx_bits: c_int,
    count: usize,
    ep_per_node: usize,
    name: *const std::ffi::c_char,
    map_addr: *mut c_void,
    flags: u64,
}

#[repr(C)]
struct FiOpsAv {
    size: usize,
    insert: unsafe extern "C" fn(
        *mut FidAv,
        *const c_void,
        usize,
        *mut FiAddr,
        u64,
        *mut c_void,
    ) -> c_int,
    // insertsvc, insertsym, remove, lookup, straddr, av_set follow; unused.
}

#[repr(C)]
struct FidAv {
    fid: Fid,
    ops: *mut FiOpsAv,
}

type AvOpenFn = unsafe extern "C" fn(
    *mut super::FidDomain,
    *mut FiAvAttr,
    *mut *mut FidAv,
    *mut c_void,
) -> c_int;

/// fi_getinfo for connectionless (FI_EP_DGRAM) endpoints with messages, of `provider` (e.g.
/// "udp", "verbs", "efa"); `iface`: a domain name to prefer, or empty for the provider's
/// first.
pub fn info(provider: &str, iface: &str) -> Result<Info, String> {
    Info::query(
        Query {
            caps: FI_MSG | FI_SEND | FI_RECV,
            ep_type: FI_EP_DGRAM,
            knob: "FERRITE_OFI_DGRAM_PROVIDER",
            what: "datagram endpoints (FI_EP_DGRAM)",
            fi_info: " -t FI_EP_DGRAM",
        },
        provider,
        iface,
    )
}

/// An address vector (FI_AV_TABLE: peers are numbered in the order inserted).
pub struct Av(*mut FidAv);
// SAFETY: see Fabric.
unsafe impl Send for Av {}

impl Av {
    pub fn open(domain: &Domain, count: usize) -> Result<Av, String> {
        let mut attr = FiAvAttr {
            type_: FI_AV_TABLE,
            rx_ctx_bits: 0,
            count,
            ep_per_node: 0,
            name: null(),
            map_addr: null_mut(),
            flags: 0,
        };
        let mut a = null_mut();
        // SAFETY: fi_av_open: domain->ops->av_open, whose C prototype AvOpenFn spells (the
        // ops table declares it untyped); attr is valid for the call.
        let rc = unsafe {
            let f: AvOpenFn = std::mem::transmute((*(*domain.0).ops).av_open);
            f(domain.0, &mut attr, &mut a, null_mut())
        };
        check("fi_av_open", rc)?;
        Ok(Av(a))
    }

    /// fi_av_insert of one address (as fi_getname gave it): the peer's `fi_addr_t`.
    pub fn insert(&self, addr: &[u8]) -> Result<u64, String> {
        let mut out: FiAddr = FI_ADDR_UNSPEC;
        // SAFETY: fi_av_insert: av->ops->insert of one address of the provider's format,
        // read during the call (a shorter buffer than the format's is refused above).
        let rc = unsafe {
            ((*(*self.0).ops).insert)(self.0, addr.as_ptr().cast(), 1, &mut out, 0, null_mut())
        };
        if rc != 1 || out == FI_ADDR_UNSPEC {
            return Err(format!(
                "fi_av_insert failed: {} ({rc})",
                strerror(if rc < 0 { rc as isize } else { 0 })
            ));
        }
        Ok(out)
    }
}

impl Drop for Av {
    fn drop(&mut self) {
        // SAFETY: self.0 is live.
        close_fid(unsafe { &mut (*self.0).fid });
    }
}

impl Ep {
    /// A datagram endpoint's set-up: binds the address vector and the completion queue (for
    /// sends and receives), enables it, and returns its name (fi_getname) for peers' AVs.
    pub fn bind_av_enable(&self, av: &Av, cq: &Cq) -> Result<Vec<u8>, String> {
        // SAFETY: the addresses of live objects' fids (their wrappers own the AV and queue).
        let (avf, cqf) = unsafe {
            (
                std::ptr::addr_of_mut!((*av.0).fid),
                std::ptr::addr_of_mut!((*cq.0).fid),
            )
        };
        self.bind("fi_ep_bind(av)", avf, 0)?;
        self.bind("fi_ep_bind(cq)", cqf, FI_TRANSMIT | FI_RECV)?;
        self.enable()?;
        self.name()
    }

    /// Posts a receive from any source into `len` bytes at `buf`. Ok(false): queue full.
    ///
    /// # Safety
    /// The buffer must stay valid and untouched until its completion (or the endpoint's
    /// close).
    pub unsafe fn recv_any(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        ctx: usize,
    ) -> Result<bool, String> {
        // SAFETY: fi_recv: ep->msg->recv; the caller keeps buf valid.
        let rc = unsafe {
            ((*(*self.0).msg).recv)(
                self.0,
                buf.cast(),
                len,
                desc,
                FI_ADDR_UNSPEC,
                ctx as *mut c_void,
            )
        };
        post("fi_recv", rc)
    }

    /// Sends `len` bytes at `buf` to `dest`. Ok(false): queue full, try again after progress.
    ///
    /// # Safety
    /// The buffer must stay valid and untouched until its completion.
    pub unsafe fn send_to(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        ctx: usize,
    ) -> Result<bool, String> {
        // SAFETY: fi_send: ep->msg->send; the caller keeps buf valid.
        let rc = unsafe {
            ((*(*self.0).msg).send)(self.0, buf.cast(), len, desc, dest, ctx as *mut c_void)
        };
        post("fi_send", rc)
    }

    /// Sends a small datagram to `dest`, copied at once (no completion). Ok(false): no room.
    pub fn inject_to(&self, bytes: &[u8], dest: u64) -> Result<bool, String> {
        // SAFETY: fi_inject: ep->msg->inject; the bytes are copied before it returns.
        let rc =
            unsafe { ((*(*self.0).msg).inject)(self.0, bytes.as_ptr().cast(), bytes.len(), dest) };
        post("fi_inject", rc)
    }
}

impl Fabric {
    /// fi_trywait on one completion queue: true when it is safe to block on its fd.
    pub fn trywait_cq(&self, cq: &Cq) -> bool {
        // SAFETY: the queue is live and belongs to this fabric.
        let mut fids: [*mut Fid; 1] = unsafe { [&mut (*cq.0).fid] };
        // SAFETY: fi_trywait: fabric->ops->trywait with an array of 1 fid.
        unsafe { ((*(*self.0).ops).trywait)(self.0, fids.as_mut_ptr(), 1) == 0 }
    }
}
