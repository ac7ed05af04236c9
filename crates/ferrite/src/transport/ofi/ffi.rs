//! libfabric, loaded at run time with dlopen (Ferrite builds and runs without it), and the
//! subset of its ABI the ofi transport uses: the `#[repr(C)]` structs and ops tables of
//! libfabric 1.17's headers (`rdma/fabric.h`, `fi_domain.h`, `fi_endpoint.h`, `fi_cm.h`,
//! `fi_eq.h`, `fi_rma.h`). Most `fi_*` calls are static inline functions in those headers
//! that call through the ops tables of the objects; the wrappers here do the same. Every
//! `unsafe` block of the transport is in this file; the types here own their objects and
//! close them when dropped.

pub mod dgram;
mod kallsyms;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

/// The API version we ask for (libfabric 1.17's structs are what we declare below).
pub const API_VERSION: u32 = (1 << 16) | 17;

pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;
pub const FI_READ: u64 = 1 << 8;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_TRANSMIT: u64 = FI_SEND;
pub const FI_REMOTE_READ: u64 = 1 << 12;

pub const FI_MR_LOCAL: c_int = 1 << 2;
pub const FI_MR_VIRT_ADDR: c_int = 1 << 4;
pub const FI_MR_ALLOCATED: c_int = 1 << 5;
pub const FI_MR_PROV_KEY: c_int = 1 << 6;

const FI_EP_MSG: u32 = 1;
const FI_WAIT_FD: u32 = 3;
const FI_CQ_FORMAT_MSG: u32 = 2;
const FI_GETWAIT: c_int = 5;
const FI_ENABLE: c_int = 6;
/// rx_ctx_cnt of an endpoint that shares a receive context (SIZE_MAX).
const FI_SHARED_CONTEXT: usize = usize::MAX;
const FI_ENOSYS: c_int = libc::ENOSYS;

// EQ events.
const FI_CONNREQ: u32 = 1;
const FI_CONNECTED: u32 = 2;
const FI_SHUTDOWN: u32 = 3;

pub const FI_EAGAIN: isize = libc::EAGAIN as isize;
const FI_EAVAIL: isize = 259;
pub const FI_ECANCELED: c_int = libc::ECANCELED;

type FiAddr = u64;

#[repr(C)]
pub struct Fid {
    fclass: usize,
    context: *mut c_void,
    ops: *mut FiOps,
}

#[repr(C)]
struct FiOps {
    size: usize,
    close: unsafe extern "C" fn(*mut Fid) -> c_int,
    bind: unsafe extern "C" fn(*mut Fid, *mut Fid, u64) -> c_int,
    control: unsafe extern "C" fn(*mut Fid, c_int, *mut c_void) -> c_int,
    ops_open: *const c_void,
    tostr: *const c_void,
    ops_set: *const c_void,
}

#[repr(C)]
struct FiTxAttr {
    caps: u64,
    mode: u64,
    op_flags: u64,
    msg_order: u64,
    comp_order: u64,
    inject_size: usize,
    size: usize,
    iov_limit: usize,
    rma_iov_limit: usize,
    tclass: u32,
}

#[repr(C)]
struct FiRxAttr {
    caps: u64,
    mode: u64,
    op_flags: u64,
    msg_order: u64,
    comp_order: u64,
    total_buffered_recv: usize,
    size: usize,
    iov_limit: usize,
}

#[repr(C)]
struct FiEpAttr {
    type_: u32,
    protocol: u32,
    protocol_version: u32,
    max_msg_size: usize,
    msg_prefix_size: usize,
    max_order_raw_size: usize,
    max_order_war_size: usize,
    max_order_waw_size: usize,
    mem_tag_format: u64,
    tx_ctx_cnt: usize,
    rx_ctx_cnt: usize,
    auth_key_size: usize,
    auth_key: *mut u8,
}

#[repr(C)]
struct FiDomainAttr {
    domain: *mut c_void,
    name: *mut c_char,
    threading: u32,
    control_progress: u32,
    data_progress: u32,
    resource_mgmt: u32,
    av_type: u32,
    mr_mode: c_int,
    mr_key_size: usize,
    cq_data_size: usize,
    cq_cnt: usize,
    ep_cnt: usize,
    tx_ctx_cnt: usize,
    rx_ctx_cnt: usize,
    max_ep_tx_ctx: usize,
    max_ep_rx_ctx: usize,
    max_ep_stx_ctx: usize,
    max_ep_srx_ctx: usize,
    cntr_cnt: usize,
    mr_iov_limit: usize,
    caps: u64,
    mode: u64,
    auth_key: *mut u8,
    auth_key_size: usize,
    max_err_data: usize,
    mr_cnt: usize,
    tclass: u32,
}

#[repr(C)]
struct FiFabricAttr {
    fabric: *mut c_void,
    name: *mut c_char,
    prov_name: *mut c_char,
    prov_version: u32,
    api_version: u32,
}

#[repr(C)]
struct FiInfo {
    next: *mut FiInfo,
    caps: u64,
    mode: u64,
    addr_format: u32,
    src_addrlen: usize,
    dest_addrlen: usize,
    src_addr: *mut c_void,
    dest_addr: *mut c_void,
    handle: *mut Fid,
    tx_attr: *mut FiTxAttr,
    rx_attr: *mut FiRxAttr,
    ep_attr: *mut FiEpAttr,
    domain_attr: *mut FiDomainAttr,
    fabric_attr: *mut FiFabricAttr,
    nic: *mut c_void,
}

#[repr(C)]
struct FiOpsFabric {
    size: usize,
    domain: unsafe extern "C" fn(
        *mut FidFabric,
        *mut FiInfo,
        *mut *mut FidDomain,
        *mut c_void,
    ) -> c_int,
    passive_ep:
        unsafe extern "C" fn(*mut FidFabric, *mut FiInfo, *mut *mut FidPep, *mut c_void) -> c_int,
    eq_open:
        unsafe extern "C" fn(*mut FidFabric, *mut FiEqAttr, *mut *mut FidEq, *mut c_void) -> c_int,
    wait_open: *const c_void,
    trywait: unsafe extern "C" fn(*mut FidFabric, *mut *mut Fid, c_int) -> c_int,
    domain2: *const c_void,
}

#[repr(C)]
struct FidFabric {
    fid: Fid,
    ops: *mut FiOpsFabric,
    api_version: u32,
}

#[repr(C)]
struct FiOpsDomain {
    size: usize,
    av_open: *const c_void,
    cq_open:
        unsafe extern "C" fn(*mut FidDomain, *mut FiCqAttr, *mut *mut FidCq, *mut c_void) -> c_int,
    endpoint:
        unsafe extern "C" fn(*mut FidDomain, *mut FiInfo, *mut *mut FidEp, *mut c_void) -> c_int,
    scalable_ep: *const c_void,
    cntr_open: *const c_void,
    poll_open: *const c_void,
    stx_ctx: *const c_void,
    srx_ctx:
        unsafe extern "C" fn(*mut FidDomain, *mut FiRxAttr, *mut *mut FidEp, *mut c_void) -> c_int,
    // query_atomic, query_collective, endpoint2 follow; unused.
}

#[repr(C)]
struct FiOpsMr {
    size: usize,
    reg: unsafe extern "C" fn(
        *mut Fid,
        *const c_void,
        usize,
        u64,
        u64,
        u64,
        u64,
        *mut *mut FidMr,
        *mut c_void,
    ) -> c_int,
    // regv, regattr follow; unused.
}

#[repr(C)]
struct FidDomain {
    fid: Fid,
    ops: *mut FiOpsDomain,
    mr: *mut FiOpsMr,
}

#[repr(C)]
struct FidMr {
    fid: Fid,
    mem_desc: *mut c_void,
    key: u64,
}

#[repr(C)]
struct FiEqAttr {
    size: usize,
    flags: u64,
    wait_obj: u32,
    signaling_vector: c_int,
    wait_set: *mut c_void,
}

#[repr(C)]
struct FiEqErrEntry {
    fid: *mut Fid,
    context: *mut c_void,
    data: u64,
    err: c_int,
    prov_errno: c_int,
    err_data: *mut c_void,
    err_data_size: usize,
}

#[repr(C)]
struct FiOpsEq {
    size: usize,
    read: unsafe extern "C" fn(*mut FidEq, *mut u32, *mut c_void, usize, u64) -> isize,
    readerr: unsafe extern "C" fn(*mut FidEq, *mut FiEqErrEntry, u64) -> isize,
    write: *const c_void,
    sread: *const c_void,
    strerror: *const c_void,
}

#[repr(C)]
struct FidEq {
    fid: Fid,
    ops: *mut FiOpsEq,
}

#[repr(C)]
struct FiCqAttr {
    size: usize,
    flags: u64,
    format: u32,
    wait_obj: u32,
    signaling_vector: c_int,
    wait_cond: u32,
    wait_set: *mut c_void,
}

/// A completion (FI_CQ_FORMAT_MSG).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CqEntry {
    pub context: usize,
    pub flags: u64,
    pub len: usize,
}

#[repr(C)]
struct FiCqErrEntry {
    op_context: *mut c_void,
    flags: u64,
    len: usize,
    buf: *mut c_void,
    data: u64,
    tag: u64,
    olen: usize,
    err: c_int,
    prov_errno: c_int,
    err_data: *mut c_void,
    err_data_size: usize,
}

#[repr(C)]
struct FiOpsCq {
    size: usize,
    read: unsafe extern "C" fn(*mut FidCq, *mut c_void, usize) -> isize,
    readfrom: *const c_void,
    readerr: unsafe extern "C" fn(*mut FidCq, *mut FiCqErrEntry, u64) -> isize,
    // sread, sreadfrom, signal, strerror follow; unused.
}

#[repr(C)]
struct FidCq {
    fid: Fid,
    ops: *mut FiOpsCq,
}

#[repr(C)]
struct FiOpsCm {
    size: usize,
    setname: *const c_void,
    getname: unsafe extern "C" fn(*mut Fid, *mut c_void, *mut usize) -> c_int,
    getpeer: *const c_void,
    connect: unsafe extern "C" fn(*mut FidEp, *const c_void, *const c_void, usize) -> c_int,
    listen: unsafe extern "C" fn(*mut FidPep) -> c_int,
    accept: unsafe extern "C" fn(*mut FidEp, *const c_void, usize) -> c_int,
    reject: unsafe extern "C" fn(*mut FidPep, *mut Fid, *const c_void, usize) -> c_int,
    shutdown: unsafe extern "C" fn(*mut FidEp, u64) -> c_int,
    join: *const c_void,
}

#[repr(C)]
struct FiOpsMsg {
    size: usize,
    recv: unsafe extern "C" fn(
        *mut FidEp,
        *mut c_void,
        usize,
        *mut c_void,
        FiAddr,
        *mut c_void,
    ) -> isize,
    recvv: *const c_void,
    recvmsg: *const c_void,
    send: unsafe extern "C" fn(
        *mut FidEp,
        *const c_void,
        usize,
        *mut c_void,
        FiAddr,
        *mut c_void,
    ) -> isize,
    sendv: *const c_void,
    sendmsg: *const c_void,
    inject: unsafe extern "C" fn(*mut FidEp, *const c_void, usize, FiAddr) -> isize,
    senddata: *const c_void,
    injectdata: *const c_void,
}

#[repr(C)]
struct FiOpsRma {
    size: usize,
    read: unsafe extern "C" fn(
        *mut FidEp,
        *mut c_void,
        usize,
        *mut c_void,
        FiAddr,
        u64,
        u64,
        *mut c_void,
    ) -> isize,
    // readv, readmsg, write, writev, writemsg, inject, writedata, injectdata follow; unused.
}

#[repr(C)]
struct FidEp {
    fid: Fid,
    ops: *mut c_void,
    cm: *mut FiOpsCm,
    msg: *mut FiOpsMsg,
    rma: *mut FiOpsRma,
    tagged: *mut c_void,
    atomic: *mut c_void,
    collective: *mut c_void,
}

#[repr(C)]
struct FidPep {
    fid: Fid,
    ops: *mut c_void,
    cm: *mut FiOpsCm,
}

type GetinfoFn = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const FiInfo,
    *mut *mut FiInfo,
) -> c_int;
type FreeinfoFn = unsafe extern "C" fn(*mut FiInfo);
type DupinfoFn = unsafe extern "C" fn(*const FiInfo) -> *mut FiInfo;
type FabricFn = unsafe extern "C" fn(*mut FiFabricAttr, *mut *mut FidFabric, *mut c_void) -> c_int;
type StrerrorFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// The library's exported (non-inline) functions we call.
struct Lib {
    getinfo: GetinfoFn,
    freeinfo: FreeinfoFn,
    dupinfo: DupinfoFn,
    fabric: FabricFn,
    strerror: StrerrorFn,
}

/// The names dlopen tries, most specific first.
const LIB_NAMES: &[&str] = &["libfabric.so.1", "libfabric.so"];

fn load() -> Result<Lib, String> {
    // Debian's libfabric links its psm provider, whose libinfinipath installs a signal
    // handler that writes "<program>.80s-<pid>,<host>.btr" backtrace files into the working
    // directory when a rank aborts (MPI_Abort raises SIGABRT). It reads this variable when
    // loaded, so it is set before dlopen; a user's own setting wins. Set during MPI_Init,
    // before the library starts threads of its own.
    if std::env::var_os("IPATH_NO_BACKTRACE").is_none() {
        std::env::set_var("IPATH_NO_BACKTRACE", "1");
    }
    let mut handle = null_mut();
    for name in LIB_NAMES {
        let c = CString::new(*name).expect("no NUL in library names");
        // SAFETY: dlopen with a valid C string; the handle is never closed (the library
        // stays loaded for the life of the process, as its objects may).
        handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !handle.is_null() {
            break;
        }
    }
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string or NULL.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                String::new()
            } else {
                CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(format!(
            "libfabric is not installed (dlopen of {} failed: {why}); install libfabric1 \
             (Debian/Ubuntu) or libfabric (RPM), or leave ofi out of FERRITE_TRANSPORTS",
            LIB_NAMES.join(" / ")
        ));
    }
    let sym = |name: &str| -> Result<*mut c_void, String> {
        let c = CString::new(name).expect("no NUL in symbol names");
        // SAFETY: handle is a live dlopen handle; c a valid C string.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        if p.is_null() {
            Err(format!(
                "libfabric has no symbol {name} (too old a libfabric?)"
            ))
        } else {
            Ok(p)
        }
    };
    // SAFETY: each symbol is the libfabric function of that name, whose C prototype the
    // fn type spells (rdma/fabric.h, rdma/fi_errno.h).
    unsafe {
        Ok(Lib {
            getinfo: std::mem::transmute::<*mut c_void, GetinfoFn>(sym("fi_getinfo")?),
            freeinfo: std::mem::transmute::<*mut c_void, FreeinfoFn>(sym("fi_freeinfo")?),
            dupinfo: std::mem::transmute::<*mut c_void, DupinfoFn>(sym("fi_dupinfo")?),
            fabric: std::mem::transmute::<*mut c_void, FabricFn>(sym("fi_fabric")?),
            strerror: std::mem::transmute::<*mut c_void, StrerrorFn>(sym("fi_strerror")?),
        })
    }
}

fn lib() -> Result<&'static Lib, String> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Whether libfabric can be loaded, or why not.
pub fn available() -> Result<(), String> {
    lib().map(|_| ())
}

/// libfabric's text for a (positive or negative) error number.
pub fn strerror(code: isize) -> String {
    let Ok(l) = lib() else {
        return format!("error {code}");
    };
    // SAFETY: fi_strerror returns a static C string for any number.
    let s = unsafe { (l.strerror)(code.unsigned_abs() as c_int) };
    if s.is_null() {
        return format!("error {code}");
    }
    // SAFETY: non-NULL static C string.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

fn check(what: &str, rc: c_int) -> Result<(), String> {
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed: {} ({rc})", strerror(rc as isize)))
    }
}

/// What the chosen provider is and needs, copied out of its fi_info.
#[derive(Clone, Debug)]
pub struct ProvInfo {
    pub provider: String,
    pub domain: String,
    pub mr_mode: c_int,
    pub inject_size: usize,
    pub max_msg_size: usize,
    /// Shared receive contexts an endpoint may use (domain attribute max_ep_srx_ctx; 0:
    /// the provider has none, each endpoint posts its own receives).
    pub max_ep_srx_ctx: usize,
}

/// The list fi_getinfo returned; `head` is the entry we use.
pub struct Info {
    head: *mut FiInfo,
    /// The list to free (a CONNREQ's info is its own list).
    owned: bool,
}

// SAFETY: an fi_info list is plain memory owned by this value; libfabric objects are used
// from one thread at a time (the transport is behind the progress engine's lock).
unsafe impl Send for Info {}

/// What `Info::query` asks libfabric for.
pub(super) struct Query {
    pub caps: u64,
    pub ep_type: u32,
    /// The knob naming the provider (for messages).
    pub knob: &'static str,
    /// The endpoints asked for, in words (for messages).
    pub what: &'static str,
    /// Extra fi_info options that list such endpoints (for messages).
    pub fi_info: &'static str,
}

impl Info {
    /// fi_getinfo for connection-oriented (FI_EP_MSG) endpoints with messages and RDMA read,
    /// of `provider` (e.g. "tcp", "verbs"); `iface`: a domain name (e.g. "lo", "eth0") to
    /// prefer, or empty for the provider's first.
    pub fn get(provider: &str, iface: &str) -> Result<Info, String> {
        Info::query(
            Query {
                caps: FI_MSG | FI_RMA | FI_READ | FI_REMOTE_READ | FI_SEND | FI_RECV,
                ep_type: FI_EP_MSG,
                knob: "FERRITE_OFI_PROVIDER",
                what: "connection-oriented endpoints (FI_EP_MSG) and RDMA read",
                fi_info: "",
            },
            provider,
            iface,
        )
    }

    /// fi_getinfo for `q`'s kind of endpoint, of `provider`, preferring domain `iface` (all
    /// domains when empty). No mode bits are accepted (so no FI_MSG_PREFIX: providers that
    /// need one are not offered).
    pub(super) fn query(q: Query, provider: &str, iface: &str) -> Result<Info, String> {
        let l = lib()?;
        // SAFETY: fi_dupinfo(NULL) is fi_allocinfo: a zeroed fi_info with its attribute
        // structs allocated; we fill fields of those structs only, and strings with
        // malloc'd copies (fi_freeinfo frees them).
        let hints = unsafe { (l.dupinfo)(null()) };
        if hints.is_null() {
            return Err("fi_allocinfo failed (out of memory)".into());
        }
        let prov = CString::new(provider).map_err(|_| format!("{} contains a NUL byte", q.knob))?;
        let mut out: *mut FiInfo = null_mut();
        // SAFETY: hints is a valid fi_info from fi_allocinfo (all attribute pointers set).
        let rc = unsafe {
            (*hints).caps = q.caps;
            (*hints).mode = 0;
            (*(*hints).ep_attr).type_ = q.ep_type;
            (*(*hints).domain_attr).mr_mode =
                FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
            (*(*hints).fabric_attr).prov_name = libc::strdup(prov.as_ptr());
            // The first call initializes every built-in provider (see kallsyms.rs).
            let mut getinfo = || (l.getinfo)(API_VERSION, null(), null(), 0, hints, &mut out);
            let rc = if kallsyms::may_hide(provider) {
                kallsyms::hidden(getinfo)
            } else {
                getinfo()
            };
            (l.freeinfo)(hints);
            rc
        };
        if rc != 0 || out.is_null() {
            return Err(format!(
                "no libfabric provider {provider:?} with {}: fi_getinfo said {} (see fi_info \
                 -l{})",
                q.what,
                strerror(rc as isize),
                q.fi_info
            ));
        }
        let mut info = Info {
            head: out,
            owned: true,
        };
        if iface.is_empty() {
            return Ok(info);
        }
        let mut p = out;
        while !p.is_null() {
            // SAFETY: walking the list fi_getinfo returned; domain names are C strings.
            let name = unsafe {
                let n = (*(*p).domain_attr).name;
                if n.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(n).to_string_lossy().into_owned()
                }
            };
            if name == iface {
                info.head = p;
                return Ok(info);
            }
            // SAFETY: as above.
            p = unsafe { (*p).next };
        }
        Err(format!(
            "libfabric provider {provider:?} has no domain {iface:?} for {} \
             (FERRITE_OFI_IFACE; see fi_info -p {provider}{})",
            q.what, q.fi_info
        ))
    }

    pub fn prov(&self) -> ProvInfo {
        // SAFETY: head is a valid fi_info with its attribute structs (from fi_getinfo).
        unsafe {
            let h = &*self.head;
            let s = |p: *const c_char| {
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            };
            ProvInfo {
                provider: s((*h.fabric_attr).prov_name),
                domain: s((*h.domain_attr).name),
                mr_mode: (*h.domain_attr).mr_mode,
                inject_size: (*h.tx_attr).inject_size,
                max_msg_size: (*h.ep_attr).max_msg_size,
                max_ep_srx_ctx: (*h.domain_attr).max_ep_srx_ctx,
            }
        }
    }
}

impl Info {
    /// Endpoints opened from this info take their receives from a shared receive context
    /// (ep_attr.rx_ctx_cnt = FI_SHARED_CONTEXT), bound with `Ep::bind_enable`.
    pub fn share_rx(&mut self) {
        // SAFETY: head is a valid fi_info with its attribute structs (fi_getinfo's or a
        // CONNREQ's); we change one field of memory the list owns.
        unsafe { (*(*self.head).ep_attr).rx_ctx_cnt = FI_SHARED_CONTEXT };
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        if self.owned {
            if let Ok(l) = lib() {
                // SAFETY: we own this list; freed once. A CONNREQ's info is a single entry.
                unsafe { (l.freeinfo)(self.head) };
            }
        }
    }
}

fn close_fid(fid: *mut Fid) {
    if fid.is_null() {
        return;
    }
    // SAFETY: fid is a live libfabric object owned by the caller, closed once.
    unsafe { ((*(*fid).ops).close)(fid) };
}

/// Sets errno to 0 before fi_eq_read. The tcp provider of libfabric before 2.2 (Debian's
/// 1.17: `rx_cm_data` in tcpx_conn_mgr.c) reads a connection set-up message and, when recv
/// returns 0 (the peer closed the socket mid set-up), takes errno as the reason; errno is
/// then whatever an earlier call left, often EAGAIN (the udp provider's recvmsg, a data
/// socket's recv), which it reads as "try again": the socket stays in the event queue's set,
/// readable at end of file, and every fi_eq_read calls recv on it again for the rest of the
/// job (26k-106k recvfrom in rma_passive -n 4 under adaptive), while a dialer whose peer
/// closed so never hears of it (no FI_CONNECTED, no error). With errno 0 the provider takes
/// the end as -FI_EIO: it closes a half-accepted socket, and reports a dial's failure on the
/// event queue. (Fixed upstream by libfabric commit 86ae6d745, "prov/tcp: handle the error
/// correctly".)
fn clear_errno() {
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    unsafe { *libc::__errno_location() = 0 };
}

fn wait_fd(fid: *mut Fid, what: &str) -> Result<c_int, String> {
    let mut fd: c_int = -1;
    // SAFETY: fid is live; FI_GETWAIT with an FD wait object writes an int.
    let rc = unsafe { ((*(*fid).ops).control)(fid, FI_GETWAIT, &mut fd as *mut c_int as *mut _) };
    check(&format!("fi_control(FI_GETWAIT) on the {what}"), rc)?;
    Ok(fd)
}

pub struct Fabric(*mut FidFabric);
// SAFETY: see Info; libfabric objects are used under the progress engine's lock.
unsafe impl Send for Fabric {}

impl Fabric {
    pub fn open(info: &Info) -> Result<Fabric, String> {
        let l = lib()?;
        let mut f = null_mut();
        // SAFETY: info.head's fabric_attr is valid; f receives the new fabric.
        let rc = unsafe { (l.fabric)((*info.head).fabric_attr, &mut f, null_mut()) };
        check("fi_fabric", rc)?;
        Ok(Fabric(f))
    }

    pub fn domain(&self, info: &Info) -> Result<Domain, String> {
        let mut d = null_mut();
        // SAFETY: fi_domain: fabric->ops->domain with a valid info.
        let rc = unsafe { ((*(*self.0).ops).domain)(self.0, info.head, &mut d, null_mut()) };
        check("fi_domain", rc)?;
        Ok(Domain(d))
    }

    /// An event queue with a file descriptor to wait on.
    pub fn eq(&self, size: usize) -> Result<Eq, String> {
        let mut attr = FiEqAttr {
            size,
            flags: 0,
            wait_obj: FI_WAIT_FD,
            signaling_vector: 0,
            wait_set: null_mut(),
        };
        let mut e = null_mut();
        // SAFETY: fi_eq_open: fabric->ops->eq_open with a valid attr.
        let rc = unsafe { ((*(*self.0).ops).eq_open)(self.0, &mut attr, &mut e, null_mut()) };
        check("fi_eq_open", rc)?;
        Ok(Eq(e))
    }

    pub fn passive_ep(&self, info: &Info) -> Result<Pep, String> {
        let mut p = null_mut();
        // SAFETY: fi_passive_ep: fabric->ops->passive_ep with a valid info.
        let rc = unsafe { ((*(*self.0).ops).passive_ep)(self.0, info.head, &mut p, null_mut()) };
        check("fi_passive_ep", rc)?;
        Ok(Pep(p))
    }

    /// fi_trywait on the event and completion queues: true when it is safe to block on
    /// their file descriptors (nothing is waiting to be read).
    pub fn trywait(&self, eq: &Eq, cq: &Cq) -> bool {
        // SAFETY: both objects are live and belong to this fabric.
        let mut fids: [*mut Fid; 2] = unsafe { [&mut (*eq.0).fid, &mut (*cq.0).fid] };
        // SAFETY: fi_trywait: fabric->ops->trywait with an array of 2 fids.
        unsafe { ((*(*self.0).ops).trywait)(self.0, fids.as_mut_ptr(), 2) == 0 }
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: self.0 is live.
        close_fid(unsafe { &mut (*self.0).fid });
    }
}

pub struct Domain(*mut FidDomain);
// SAFETY: see Fabric.
unsafe impl Send for Domain {}

impl Domain {
    /// A completion queue (FI_CQ_FORMAT_MSG) with a file descriptor to wait on.
    pub fn cq(&self, size: usize) -> Result<Cq, String> {
        let mut attr = FiCqAttr {
            size,
            flags: 0,
            format: FI_CQ_FORMAT_MSG,
            wait_obj: FI_WAIT_FD,
            signaling_vector: 0,
            wait_cond: 0,
            wait_set: null_mut(),
        };
        let mut c = null_mut();
        // SAFETY: fi_cq_open: domain->ops->cq_open with a valid attr.
        let rc = unsafe { ((*(*self.0).ops).cq_open)(self.0, &mut attr, &mut c, null_mut()) };
        check("fi_cq_open", rc)?;
        Ok(Cq(c))
    }

    /// An active endpoint from `info` (the base info to connect, a CONNREQ's to accept);
    /// `ctx` comes back as the context of its events.
    pub fn endpoint(&self, info: &Info, ctx: usize) -> Result<Ep, String> {
        let mut e = null_mut();
        // SAFETY: fi_endpoint: domain->ops->endpoint with a valid info.
        let rc =
            unsafe { ((*(*self.0).ops).endpoint)(self.0, info.head, &mut e, ctx as *mut c_void) };
        check("fi_endpoint", rc)?;
        Ok(Ep(e))
    }

    /// A shared receive context (fi_srx_context) for `size` posted receives, its
    /// completions (errors and cancellations; a message's completion goes to the queue of
    /// the endpoint it came on) on `cq`. Receives are posted to it as to an endpoint.
    pub fn srx(&self, size: usize, cq: &Cq) -> Result<Ep, String> {
        let mut attr = FiRxAttr {
            caps: FI_MSG | FI_RECV,
            mode: 0,
            op_flags: 0,
            msg_order: 0,
            comp_order: 0,
            total_buffered_recv: 0,
            size,
            iov_limit: 1,
        };
        let mut e = null_mut();
        // SAFETY: fi_srx_context: domain->ops->srx_ctx with a valid attr (the ops table
        // of 1.17 has the member; providers without shared contexts return -FI_ENOSYS).
        let rc = unsafe { ((*(*self.0).ops).srx_ctx)(self.0, &mut attr, &mut e, null_mut()) };
        check("fi_srx_context", rc)?;
        let srx = Ep(e);
        // SAFETY: fi_ep_bind(srx, cq, FI_RECV); both live. Providers that report every
        // receive on the endpoint's own queue do not take the binding (-FI_ENOSYS).
        let rc = unsafe {
            let ops = (*srx.0).fid.ops;
            ((*ops).bind)(&mut (*srx.0).fid, &mut (*cq.0).fid, FI_RECV)
        };
        if rc != -FI_ENOSYS {
            check("fi_ep_bind(shared receive context, cq)", rc)?;
        }
        Ok(srx)
    }

    /// Registers `len` bytes at `addr` for `access` (FI_SEND|FI_RECV|FI_READ|FI_REMOTE_READ),
    /// with `key` when the provider lets us choose keys.
    ///
    /// # Safety
    /// `addr..addr+len` must stay mapped while the registration is used for local
    /// operations (remote reads of unmapped memory fail at the provider, not here).
    pub unsafe fn mr_reg(
        &self,
        addr: u64,
        len: usize,
        access: u64,
        key: u64,
    ) -> Result<Mr, String> {
        let mut m = null_mut();
        // SAFETY: fi_mr_reg: domain->mr->reg(&domain->fid, ...); the caller keeps the
        // memory valid (see above).
        let rc = unsafe {
            ((*(*self.0).mr).reg)(
                &mut (*self.0).fid,
                addr as *const c_void,
                len,
                access,
                0,
                key,
                0,
                &mut m,
                null_mut(),
            )
        };
        check("fi_mr_reg", rc)?;
        Ok(Mr(m))
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: self.0 is live.
        close_fid(unsafe { &mut (*self.0).fid });
    }
}

pub struct Mr(*mut FidMr);
// SAFETY: see Fabric.
unsafe impl Send for Mr {}

impl Mr {
    /// fi_mr_desc: the local descriptor for operations on this memory.
    pub fn desc(&self) -> *mut c_void {
        // SAFETY: self.0 is live.
        unsafe { (*self.0).mem_desc }
    }

    /// fi_mr_key: the key a peer uses to read it.
    pub fn key(&self) -> u64 {
        // SAFETY: self.0 is live.
        unsafe { (*self.0).key }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: self.0 is live.
        close_fid(unsafe { &mut (*self.0).fid });
    }
}

/// An event of the event queue.
pub enum EqEvent {
    /// A peer asks to connect; `data` is the parameter of its fi_connect.
    ConnReq { info: Info, data: Vec<u8> },
    /// The endpoint with this context is connected.
    Connected(usize),
    /// The endpoint with this context was shut down by the peer.
    Shutdown(usize),
    /// An operation on the endpoint with this context failed (e.g. connection refused).
    Error { ctx: usize, err: c_int, why: String },
    /// Some other event (ignored).
    Other,
}

pub struct Eq(*mut FidEq);
// SAFETY: see Fabric.
unsafe impl Send for Eq {}

/// Room for an fi_eq_cm_entry and the connection data it carries.
const CM_ENTRY_ROOM: usize = 256;

impl Eq {
    pub fn fd(&self) -> Result<c_int, String> {
        // SAFETY: self.0 is live.
        wait_fd(unsafe { &mut (*self.0).fid }, "event queue")
    }

    /// The next event, or None when there is none.
    pub fn read(&self) -> Option<EqEvent> {
        let mut ev: u32 = 0;
        let mut buf = [0u64; CM_ENTRY_ROOM / 8];
        clear_errno();
        // SAFETY: fi_eq_read: eq->ops->read into a buffer of CM_ENTRY_ROOM bytes.
        let n = unsafe {
            ((*(*self.0).ops).read)(self.0, &mut ev, buf.as_mut_ptr().cast(), CM_ENTRY_ROOM, 0)
        };
        if n == -FI_EAGAIN {
            return None;
        }
        if n == -FI_EAVAIL {
            // SAFETY: all-zero is a valid fi_eq_err_entry (pointers NULL).
            let mut e: FiEqErrEntry = unsafe { std::mem::zeroed() };
            // SAFETY: fi_eq_readerr: eq->ops->readerr into e.
            let r = unsafe { ((*(*self.0).ops).readerr)(self.0, &mut e, 0) };
            if r < 0 {
                return None;
            }
            let ctx = if e.fid.is_null() {
                0
            } else {
                // SAFETY: e.fid is the live object the error is about.
                unsafe { (*e.fid).context as usize }
            };
            return Some(EqEvent::Error {
                ctx,
                err: e.err,
                why: format!(
                    "{} (provider error {})",
                    strerror(e.err as isize),
                    e.prov_errno
                ),
            });
        }
        if n < 0 {
            return Some(EqEvent::Error {
                ctx: 0,
                err: -(n as c_int),
                why: format!("fi_eq_read failed: {}", strerror(n)),
            });
        }
        let n = n as usize;
        let fid = buf[0] as *mut Fid;
        let ctx = if fid.is_null() {
            0
        } else {
            // SAFETY: fid is the live object the event is about.
            unsafe { (*fid).context as usize }
        };
        match ev {
            FI_CONNREQ => {
                let info = buf[1] as *mut FiInfo;
                let start = 16;
                let bytes: &[u8] =
                    // SAFETY: buf holds n bytes written by fi_eq_read (n <= CM_ENTRY_ROOM).
                    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
                let data = bytes.get(start..n).unwrap_or(&[]).to_vec();
                Some(EqEvent::ConnReq {
                    info: Info {
                        head: info,
                        owned: true,
                    },
                    data,
                })
            }
            FI_CONNECTED => Some(EqEvent::Connected(ctx)),
            FI_SHUTDOWN => Some(EqEvent::Shutdown(ctx)),
            _ => Some(EqEvent::Other),
        }
    }
}

impl Drop for Eq {
    fn drop(&mut self) {
        // SAFETY: self.0 is live.
        close_fid(unsafe { &mut (*self.0).fid });
    }
}

/// A failed operation, from the completion queue's error entry.
pub struct CqError {
    pub context: usize,
    pub err: c_int,
    pub why: String,
}

pub struct Cq(*mut FidCq);
// SAFETY: see Fabric.
unsafe impl Send for Cq {}

impl Cq {
    pub fn fd(&self) -> Result<c_int, String> {
        // SAFETY: self.0 is live.
        wait_fd(unsafe { &mut (*self.0).fid }, "completion queue")
    }

    /// Completions into `out`: how many (0: none now), or the next failed operation.
    pub fn read(&self, out: &mut [CqEntry]) -> Result<usize, CqError> {
        // SAFETY: fi_cq_read: cq->ops->read of up to out.len() FI_CQ_FORMAT_MSG entries.
        let n = unsafe { ((*(*self.0).ops).read)(self.0, out.as_mut_ptr().cast(), out.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        if n == -FI_EAGAIN {
            return Ok(0);
        }
        if n == -FI_EAVAIL {
            // SAFETY: all-zero is a valid fi_cq_err_entry.
            let mut e: FiCqErrEntry = unsafe { std::mem::zeroed() };
            // SAFETY: fi_cq_readerr: cq->ops->readerr into e.
            let r = unsafe { ((*(*self.0).ops).readerr)(self.0, &mut e, 0) };
            if r >= 0 {
                return Err(CqError {
                    context: e.op_context as usize,
                    err: e.err,
                    why: format!(
                        "{} (provider error {})",
                        strerror(e.err as isize),
                        e.prov_errno
                    ),
                });
            }
            return Ok(0);
        }
        Err(CqError {
            context: 0,
            err: -(n as c_int),
            why: format!("fi_cq_read failed: {}", strerror(n)),
        })
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: self.0 is live.
        close_fid(unsafe { &mut (*self.0).fid });
    }
}

/// fi_getname of an endpoint (active or passive): the address peers reach it at.
///
/// # Safety
/// `fid` and `cm` must be a live endpoint's fid and connection-management ops.
unsafe fn getname(fid: *mut Fid, cm: *mut FiOpsCm) -> Result<Vec<u8>, String> {
    let mut name = vec![0u8; 256];
    let mut len = name.len();
    // SAFETY: fi_getname: ep->cm->getname(&ep->fid, buf, &len); len is the room.
    let rc = unsafe { ((*cm).getname)(fid, name.as_mut_ptr().cast(), &mut len) };
    check("fi_getname", rc)?;
    name.truncate(len);
    Ok(name)
}

pub struct Pep(*mut FidPep);
// SAFETY: see Fabric.
unsafe impl Send for Pep {}

impl Pep {
    /// Binds to `eq`, listens, and returns the address peers connect to (fi_getname).
    pub fn listen(&self, eq: &Eq) -> Result<Vec<u8>, String> {
        // SAFETY: fi_pep_bind: pep->fid.ops->bind(&pep->fid, &eq->fid, 0); both live.
        let rc = unsafe { ((*(*self.0).fid.ops).bind)(&mut (*self.0).fid, &mut (*eq.0).fid, 0) };
        check("fi_pep_bind", rc)?;
        // SAFETY: fi_listen: pep->cm->listen.
        let rc = unsafe { ((*(*self.0).cm).listen)(self.0) };
        check("fi_listen", rc)?;
        // SAFETY: the passive endpoint is live; its fid and cm ops come from fi_passive_ep.
        unsafe { getname(&mut (*self.0).fid, (*self.0).cm) }
    }

    /// Refuses the connection request whose info is `info`.
    pub fn reject(&self, info: &Info) {
        // SAFETY: fi_reject: pep->cm->reject with the request's handle from its info.
        unsafe { ((*(*self.0).cm).reject)(self.0, (*info.head).handle, null(), 0) };
    }
}

impl Drop for Pep {
    fn drop(&mut self) {
        // SAFETY: self.0 is live.
        close_fid(unsafe { &mut (*self.0).fid });
    }
}

pub struct Ep(*mut FidEp);
// SAFETY: see Fabric.
unsafe impl Send for Ep {}

fn post(what: &str, rc: isize) -> Result<bool, String> {
    if rc == 0 {
        Ok(true)
    } else if rc == -FI_EAGAIN {
        Ok(false)
    } else {
        Err(format!("{what} failed: {} ({rc})", strerror(rc)))
    }
}

impl Ep {
    /// Binds to the event queue, (for sends and receives) the completion queue and, if
    /// given, the shared receive context its receives come from; enables.
    pub fn bind_enable(&self, eq: &Eq, cq: &Cq, srx: Option<&Ep>) -> Result<(), String> {
        if let Some(srx) = srx {
            // SAFETY: the address of a live object's fid (its Ep owns the context).
            let fid = unsafe { std::ptr::addr_of_mut!((*srx.0).fid) };
            self.bind("fi_ep_bind(shared receive context)", fid, 0)?;
        }
        // SAFETY: the addresses of live objects' fids (their wrappers own the queues).
        let (eqf, cqf) = unsafe {
            (
                std::ptr::addr_of_mut!((*eq.0).fid),
                std::ptr::addr_of_mut!((*cq.0).fid),
            )
        };
        self.bind("fi_ep_bind(eq)", eqf, 0)?;
        self.bind("fi_ep_bind(cq)", cqf, FI_TRANSMIT | FI_RECV)?;
        self.enable()
    }

    /// fi_ep_bind of the object `fid` with `flags`; `what` names the call in errors.
    fn bind(&self, what: &str, fid: *mut Fid, flags: u64) -> Result<(), String> {
        // SAFETY: fi_ep_bind: ep->fid.ops->bind(&ep->fid, bfid, flags); the endpoint is live
        // and the caller passes a live object's fid.
        check(what, unsafe {
            ((*(*self.0).fid.ops).bind)(&mut (*self.0).fid, fid, flags)
        })
    }

    /// fi_enable, once everything is bound.
    fn enable(&self) -> Result<(), String> {
        // SAFETY: fi_enable: ep->fid.ops->control(&ep->fid, FI_ENABLE, NULL); endpoint live.
        check("fi_enable", unsafe {
            ((*(*self.0).fid.ops).control)(&mut (*self.0).fid, FI_ENABLE, null_mut())
        })
    }

    /// fi_getname: the address peers reach this endpoint at.
    fn name(&self) -> Result<Vec<u8>, String> {
        // SAFETY: the endpoint is live; its fid and cm ops come from fi_endpoint.
        unsafe { getname(&mut (*self.0).fid, (*self.0).cm) }
    }

    pub fn connect(&self, addr: &[u8], param: &[u8]) -> Result<(), String> {
        // SAFETY: fi_connect: ep->cm->connect; addr and param are valid for the call.
        let rc = unsafe {
            ((*(*self.0).cm).connect)(
                self.0,
                addr.as_ptr().cast(),
                param.as_ptr().cast(),
                param.len(),
            )
        };
        check("fi_connect", rc)
    }

    pub fn accept(&self) -> Result<(), String> {
        // SAFETY: fi_accept: ep->cm->accept with no data.
        let rc = unsafe { ((*(*self.0).cm).accept)(self.0, null(), 0) };
        check("fi_accept", rc)
    }

    /// Posts a receive into `len` bytes at `buf`. Ok(false): queue full.
    ///
    /// # Safety
    /// The buffer must stay valid and untouched until its completion (or the endpoint's
    /// close).
    pub unsafe fn recv(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        ctx: usize,
    ) -> Result<bool, String> {
        // SAFETY: fi_recv: ep->msg->recv; the caller keeps buf valid.
        let rc = unsafe {
            ((*(*self.0).msg).recv)(self.0, buf.cast(), len, desc, 0, ctx as *mut c_void)
        };
        post("fi_recv", rc)
    }

    /// Sends `len` bytes at `buf`. Ok(false): queue full, try again after progress.
    ///
    /// # Safety
    /// The buffer must stay valid and untouched until its completion.
    pub unsafe fn send(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        ctx: usize,
    ) -> Result<bool, String> {
        // SAFETY: fi_send: ep->msg->send; the caller keeps buf valid.
        let rc = unsafe {
            ((*(*self.0).msg).send)(self.0, buf.cast(), len, desc, 0, ctx as *mut c_void)
        };
        post("fi_send", rc)
    }

    /// Sends a small message copied at once (no completion). Ok(false): try again later.
    pub fn inject(&self, bytes: &[u8]) -> Result<bool, String> {
        // SAFETY: fi_inject: ep->msg->inject; the bytes are copied before it returns.
        let rc =
            unsafe { ((*(*self.0).msg).inject)(self.0, bytes.as_ptr().cast(), bytes.len(), 0) };
        post("fi_inject", rc)
    }

    /// RDMA read of `len` bytes at the peer's `raddr` (under `key`) into `buf`.
    ///
    /// # Safety
    /// The buffer must stay valid and untouched until its completion.
    pub unsafe fn read(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        raddr: u64,
        key: u64,
        ctx: usize,
    ) -> Result<bool, String> {
        // SAFETY: fi_read: ep->rma->read; the caller keeps buf valid.
        let rc = unsafe {
            ((*(*self.0).rma).read)(
                self.0,
                buf.cast(),
                len,
                desc,
                0,
                raddr,
                key,
                ctx as *mut c_void,
            )
        };
        post("fi_read", rc)
    }

    pub fn shutdown(&self) {
        // SAFETY: fi_shutdown: ep->cm->shutdown.
        unsafe { ((*(*self.0).cm).shutdown)(self.0, 0) };
    }
}

impl Drop for Ep {
    fn drop(&mut self) {
        // SAFETY: self.0 is live.
        close_fid(unsafe { &mut (*self.0).fid });
    }
}

/// Keeps freed heap memory mapped (glibc: no trimming, no mmap for large blocks), so a
/// registration of heap memory never outlives its pages: a block freed and allocated again
/// at the same address is the same pages. What Open MPI's "leave pinned" mode does for
/// providers that pin memory (verbs, efa); software providers (tcp, udp) read memory at
/// the time of the transfer and need none of it.
pub fn keep_heap_mapped() {
    // SAFETY: mallopt only changes glibc's malloc tunables.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, -1);
        libc::mallopt(libc::M_MMAP_MAX, 0);
    }
}
