//! MPI-IO's C entry points (MPI 4.1 chapter 14): argument checks and handle conversion; the
//! work is in `crate::io`. Errors raise on the file's error handler (MPI_ERRORS_RETURN
//! unless set), those of MPI_File_open and MPI_File_delete on MPI_FILE_NULL's.

use super::consts::*;
use super::out;
use super::status::store;
use super::types::MPI_Status;
use crate::error::{ErrObj, MpiError, MpiResult};
use crate::io::access::{self, Dir, From, Mem, Outcome};
use crate::io::file::{self as files, lock};
use crate::io::view::{self, View};
use crate::io::{coll, datarep, posix};
use crate::p2p::request::Request;
use crate::state;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn c_str(p: *const c_char, what: &str) -> MpiResult<String> {
    if p.is_null() {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "null pointer passed for {what}"
        ));
    }
    // SAFETY: non-null NUL-terminated string per the contract.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// How the blocking and split forms carry out an access.
fn kind(collective: bool) -> access::Kind {
    if collective {
        access::Kind::Collective
    } else {
        access::Kind::Independent
    }
}

/// A blocking data access.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`; `status` is an MPI_Status* or
/// MPI_STATUS_IGNORE.
#[allow(clippy::too_many_arguments)]
unsafe fn blocking(
    fh: MPI_File,
    buf: *mut u8,
    count: i64,
    datatype: MPI_Datatype,
    dir: Dir,
    from: From,
    collective: bool,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let f = files::get(fh as usize)?;
    let mem = Mem::new(buf, count, datatype);
    if let Outcome::Done(s) = access::access(&f, mem, dir, from, kind(collective))? {
        // SAFETY: per the contract.
        unsafe { store(status, &s) };
    }
    Ok(())
}

/// A nonblocking data access: an independent one is done at once, its request already
/// complete; a collective one completes in the background (`io::engine`).
///
/// # Safety
/// As [`blocking`]; `request` is an MPI_Request*.
#[allow(clippy::too_many_arguments)]
unsafe fn nonblocking(
    fh: MPI_File,
    buf: *mut u8,
    count: i64,
    datatype: MPI_Datatype,
    dir: Dir,
    from: From,
    collective: bool,
    request: *mut MPI_Request,
) -> MpiResult<()> {
    if request.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "null request pointer"));
    }
    let f = files::get(fh as usize)?;
    let mem = Mem::new(buf, count, datatype);
    let k = if collective {
        access::Kind::Nonblocking
    } else {
        access::Kind::Independent
    };
    let h = request_of(access::access(&f, mem, dir, from, k)?)?;
    // SAFETY: checked non-null; the caller's MPI_Request*.
    unsafe { out(request, h) }
}

/// The request of a started access: its own, or for one already over a completed request
/// carrying its status, on MPI_COMM_SELF, not the file's communicator (the request may
/// outlive the file).
fn request_of(o: Outcome) -> MpiResult<MPI_Request> {
    match o {
        Outcome::Request(h) => Ok(h),
        Outcome::Done(s) => state::with(|st| {
            let mut r = Request::new(MPI_COMM_SELF, true);
            r.done = true;
            r.status = s;
            Ok(st.p2p.reqs.insert(r))
        }),
    }
}

/// The _begin of a split collective: the access starts in the background (as a nonblocking
/// collective), and _end waits for it.
///
/// # Safety
/// As [`blocking`].
unsafe fn begin(
    fh: MPI_File,
    buf: *mut u8,
    count: i64,
    datatype: MPI_Datatype,
    dir: Dir,
    from: From,
) -> MpiResult<()> {
    let f = files::get(fh as usize)?;
    if lock(&f).split.is_some() {
        return Err(MpiError::new(
            MPI_ERR_OTHER,
            "a split collective access is already active on the file (one at a time)",
        ));
    }
    let mem = Mem::new(buf, count, datatype);
    let h = request_of(access::access(
        &f,
        mem,
        dir,
        from,
        access::Kind::Nonblocking,
    )?)?;
    lock(&f).split = Some(h);
    Ok(())
}

/// The _end of a split collective: waits for the access _begin started.
///
/// # Safety
/// `status` is an MPI_Status* or MPI_STATUS_IGNORE.
unsafe fn end(fh: MPI_File, status: *mut MPI_Status) -> MpiResult<()> {
    let f = files::get(fh as usize)?;
    let mut h = lock(&f).split.take().ok_or_else(|| {
        MpiError::new(
            MPI_ERR_OTHER,
            "no split collective access was begun on the file",
        )
    })?;
    // SAFETY: `h` is a local request; `status` per the contract. The request is on the
    // file's communicator, whose errors return.
    match unsafe { super::request::PMPI_Wait(&mut h, status) } {
        MPI_SUCCESS => Ok(()),
        rc => Err(MpiError::from_code(rc)),
    }
}

mpi_fn! {
    fn MPI_File_open(comm: MPI_Comm, filename: *const c_char, amode: c_int, info: MPI_Info,
        fh: *mut MPI_File) on ErrObj::File(0) => {
        if fh.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for fh"));
        }
        state::with(|st| {
            let c = st.objects.comms.get(comm)?;
            if c.inter.is_some() {
                return Err(MpiError::new(MPI_ERR_COMM, "an intercommunicator cannot open files"));
            }
            Ok(())
        })?;
        // SAFETY: the caller's NUL-terminated file name.
        let name = unsafe { c_str(filename, "filename") }?;
        let hints = crate::objects::info::hints(info)?;
        let h = files::open(comm, &name, amode, &hints)?;
        // SAFETY: checked non-null; the caller's MPI_File*.
        unsafe { *fh = files::to_c(h) };
        Ok(())
    }
}

mpi_fn! {
    fn MPI_File_close(fh: *mut MPI_File)
        // SAFETY: read only when non-null (the caller's MPI_File*).
        on ErrObj::File(if fh.is_null() { 0 } else { (unsafe { *fh }) as usize }) => {
        if fh.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for fh"));
        }
        // SAFETY: checked non-null.
        files::close(unsafe { *fh } as usize)?;
        // SAFETY: checked non-null.
        unsafe { *fh = std::ptr::null_mut() };
        Ok(())
    }
}

mpi_fn! {
    fn MPI_File_delete(filename: *const c_char, info: MPI_Info) on ErrObj::File(0) => {
        let _ = crate::objects::info::hints(info)?;
        // SAFETY: the caller's NUL-terminated file name.
        let name = unsafe { c_str(filename, "filename") }?;
        files::delete(&name)
    }
}

/// Runs `f` on rank 0 of the file's communicator and gives every rank its outcome (the
/// collective size-changing calls).
fn on_rank0(fh: MPI_File, f: impl FnOnce(&files::FileObj) -> MpiResult<()>) -> MpiResult<()> {
    let r = files::get(fh as usize)?;
    let g = lock(&r);
    let mut res = Ok(());
    let mut class = [0u8; 4];
    if g.rank == 0 {
        res = f(&g);
        if let Err(e) = &res {
            class = e.class.to_le_bytes();
        }
    }
    coll::bcast(g.comm, &mut class, 0)?;
    res?;
    match i32::from_le_bytes(class) {
        0 => Ok(()),
        c => Err(crate::mpi_err!(c, "the operation failed on rank 0")),
    }
}

fn writable(f: &files::FileObj) -> MpiResult<()> {
    if f.amode & MPI_MODE_RDONLY != 0 {
        return Err(MpiError::new(
            MPI_ERR_READ_ONLY,
            "the file was opened MPI_MODE_RDONLY",
        ));
    }
    Ok(())
}

mpi_fn! {
    fn MPI_File_set_size(fh: MPI_File, size: MPI_Offset) on ErrObj::File(fh as usize) => {
        if size < 0 {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "negative size {size}"));
        }
        writable(&lock(&files::get(fh as usize)?))?;
        on_rank0(fh, |f| f.fd.set_len(size as u64).map_err(|e| posix::io_err("ftruncate", e)))
    }
}

mpi_fn! {
    fn MPI_File_preallocate(fh: MPI_File, size: MPI_Offset) on ErrObj::File(fh as usize) => {
        if size < 0 {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "negative size {size}"));
        }
        writable(&lock(&files::get(fh as usize)?))?;
        on_rank0(fh, |f| {
            if f.size_bytes()? >= size as u64 {
                return Ok(());
            }
            use std::os::fd::AsRawFd;
            // SAFETY: posix_fallocate on an open descriptor.
            let rc = unsafe { libc::posix_fallocate(f.fd.as_raw_fd(), 0, size as libc::off_t) };
            if rc == 0 {
                return Ok(());
            }
            // A file system without fallocate: extending the size is the best it can do.
            f.fd.set_len(size as u64).map_err(|e| posix::io_err("ftruncate", e))
        })
    }
}

mpi_fn! {
    fn MPI_File_get_size(fh: MPI_File, size: *mut MPI_Offset) on ErrObj::File(fh as usize) => {
        let s = lock(&files::get(fh as usize)?).size_bytes()?;
        // SAFETY: the caller's MPI_Offset* output.
        unsafe { out(size, s as MPI_Offset) }
    }
}

mpi_fn! {
    fn MPI_File_get_amode(fh: MPI_File, amode: *mut c_int) on ErrObj::File(fh as usize) => {
        let a = lock(&files::get(fh as usize)?).amode;
        // SAFETY: the caller's int* output.
        unsafe { out(amode, a) }
    }
}

mpi_fn! {
    fn MPI_File_get_group(fh: MPI_File, group: *mut MPI_Group) on ErrObj::File(fh as usize) => {
        let comm = lock(&files::get(fh as usize)?).comm;
        super::out_given(group)?;
        // SAFETY: the caller's MPI_Group* output (checked non-null).
        let rc = unsafe { super::group::PMPI_Comm_group(comm, group) };
        if rc != MPI_SUCCESS {
            return Err(MpiError::from_code(rc));
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_File_set_info(fh: MPI_File, info: MPI_Info) on ErrObj::File(fh as usize) => {
        let hints = crate::objects::info::hints(info)?;
        let f = files::get(fh as usize)?;
        let mut g = lock(&f);
        let size = g.size;
        g.hints.apply(&hints, size);
        Ok(())
    }
}

mpi_fn! {
    fn MPI_File_get_info(fh: MPI_File, info_used: *mut MPI_Info) on ErrObj::File(fh as usize) => {
        let i = lock(&files::get(fh as usize)?).hints.to_info();
        super::out_given(info_used)?;
        let h = crate::objects::info::with(|t| Ok(t.user.insert(i)))?;
        // SAFETY: the caller's MPI_Info* output.
        unsafe { out(info_used, h) }
    }
}

mpi_fn! {
    fn MPI_File_set_view(fh: MPI_File, disp: MPI_Offset, etype: MPI_Datatype,
        filetype: MPI_Datatype, datarep: *const c_char, info: MPI_Info)
        on ErrObj::File(fh as usize) => {
        let f = files::get(fh as usize)?;
        // SAFETY: the caller's NUL-terminated string.
        let rep = unsafe { c_str(datarep, "datarep") }?;
        let user_rep = datarep::lookup(&rep)?;
        let hints = crate::objects::info::hints(info)?;
        let (et, ft) = state::with(|st| {
            let d = &mut st.objects.datatypes;
            Ok((d.get(etype)?, d.get(filetype)?))
        })?;
        view::check_types(&et, &ft)?;
        let mut g = lock(&f);
        if g.split.is_some() {
            return Err(MpiError::new(MPI_ERR_OTHER, "a split collective access is active on the file"));
        }
        let disp = if disp == MPI_DISPLACEMENT_CURRENT as MPI_Offset {
            if g.amode & MPI_MODE_SEQUENTIAL == 0 {
                return Err(MpiError::new(MPI_ERR_ARG,
                    "MPI_DISPLACEMENT_CURRENT is for files opened MPI_MODE_SEQUENTIAL"));
            }
            // The shared pointer's byte position in the current view.
            let pos = g.shared.get()?;
            g.view.byte_offset(pos)
        } else if disp < 0 {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "negative displacement {disp}"));
        } else {
            disp as u64
        };
        let (comm, rank, size) = (g.comm, g.rank, g.size);
        let mut v = View::new(disp, et, etype, ft, filetype, rep);
        if let Some(r) = user_rep {
            v.set_rep(r)?;
        }
        g.view = v;
        g.ind = 0;
        g.hints.apply(&hints, size);
        // Both pointers restart at 0 (MPI 4.1 section 14.3); the shared one once everyone
        // has stopped using the old view.
        coll::barrier(comm)?;
        if rank == 0 {
            g.shared.reset()?;
        }
        coll::barrier(comm)
    }
}

mpi_fn! {
    fn MPI_File_get_view(fh: MPI_File, disp: *mut MPI_Offset, etype: *mut MPI_Datatype,
        filetype: *mut MPI_Datatype, datarep: *mut c_char) on ErrObj::File(fh as usize) => {
        let f = files::get(fh as usize)?;
        let g = lock(&f);
        super::out_given(disp)?;
        super::out_given(etype)?;
        super::out_given(filetype)?;
        if datarep.is_null() {
            return Err(MpiError::new(MPI_ERR_ARG, "null pointer passed for datarep"));
        }
        // Derived types come back as new handles the caller frees (MPI 4.1 section 14.3).
        let handle = |st: &mut state::Ferrite, h: MPI_Datatype, t: &std::sync::Arc<crate::objects::datatype::Datatype>| {
            if st.objects.datatypes.is_builtin(h) { h } else { st.objects.datatypes.user.insert(t.clone()) }
        };
        let (e, t) = state::with(|st| {
            Ok((handle(st, g.view.etype_h, &g.view.etype), handle(st, g.view.filetype_h, &g.view.filetype)))
        })?;
        let rep = g.view.datarep.as_bytes();
        // SAFETY: the caller's outputs (checked non-null); datarep has room for
        // MPI_MAX_DATAREP_STRING characters, longer than any name we store.
        unsafe {
            *disp = g.view.disp as MPI_Offset;
            *etype = e;
            *filetype = t;
            std::ptr::copy_nonoverlapping(rep.as_ptr() as *const c_char, datarep, rep.len());
            *datarep.add(rep.len()) = 0;
        }
        Ok(())
    }
}

/// The view offset `offset` from `whence` (MPI_SEEK_SET/CUR/END) given the current one.
fn seek_target(g: &files::FileObj, offset: MPI_Offset, whence: c_int, cur: u64) -> MpiResult<u64> {
    let base = match whence {
        MPI_SEEK_SET => 0,
        MPI_SEEK_CUR => cur as i64,
        MPI_SEEK_END => g.view.offset_of_byte(g.size_bytes()?) as i64,
        _ => return Err(crate::mpi_err!(MPI_ERR_ARG, "invalid whence {whence}")),
    };
    let t = base + offset;
    if t < 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "seeking to negative offset {t}"
        ));
    }
    Ok(t as u64)
}

mpi_fn! {
    fn MPI_File_seek(fh: MPI_File, offset: MPI_Offset, whence: c_int) on ErrObj::File(fh as usize) => {
        let f = files::get(fh as usize)?;
        let mut g = lock(&f);
        if g.amode & MPI_MODE_SEQUENTIAL != 0 {
            return Err(MpiError::new(MPI_ERR_UNSUPPORTED_OPERATION,
                "a file opened MPI_MODE_SEQUENTIAL has no individual file pointer"));
        }
        let cur = g.ind;
        g.ind = seek_target(&g, offset, whence, cur)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_File_seek_shared(fh: MPI_File, offset: MPI_Offset, whence: c_int)
        on ErrObj::File(fh as usize) => {
        let f = files::get(fh as usize)?;
        let g = lock(&f);
        // Rank 0 moves it (every rank passes the same arguments), between two barriers so
        // nobody uses it meanwhile.
        coll::barrier(g.comm)?;
        let cur = if whence == MPI_SEEK_CUR { g.shared.get()? } else { 0 };
        let t = seek_target(&g, offset, whence, cur)?;
        coll::barrier(g.comm)?;
        if g.rank == 0 {
            g.shared.set(t)?;
        }
        coll::barrier(g.comm)
    }
}

mpi_fn! {
    fn MPI_File_get_position(fh: MPI_File, offset: *mut MPI_Offset) on ErrObj::File(fh as usize) => {
        let p = lock(&files::get(fh as usize)?).ind;
        // SAFETY: the caller's MPI_Offset* output.
        unsafe { out(offset, p as MPI_Offset) }
    }
}

mpi_fn! {
    fn MPI_File_get_position_shared(fh: MPI_File, offset: *mut MPI_Offset)
        on ErrObj::File(fh as usize) => {
        let p = lock(&files::get(fh as usize)?).shared.get()?;
        // SAFETY: the caller's MPI_Offset* output.
        unsafe { out(offset, p as MPI_Offset) }
    }
}

mpi_fn! {
    fn MPI_File_get_byte_offset(fh: MPI_File, offset: MPI_Offset, disp: *mut MPI_Offset)
        on ErrObj::File(fh as usize) => {
        if offset < 0 {
            return Err(crate::mpi_err!(MPI_ERR_ARG, "negative offset {offset}"));
        }
        let b = lock(&files::get(fh as usize)?).view.byte_offset(offset as u64);
        // SAFETY: the caller's MPI_Offset* output.
        unsafe { out(disp, b as MPI_Offset) }
    }
}

/// The extent of `datatype` in the file: its memory extent, but in "external32" its packed
/// size plus the gaps of its memory layout.
fn type_extent(fh: MPI_File, datatype: MPI_Datatype) -> MpiResult<i64> {
    let (ext32, rep) = {
        let f = files::get(fh as usize)?;
        let g = lock(&f);
        (g.view.external32, g.view.rep.as_ref().map(|r| r.0.clone()))
    };
    let t = state::with(|st| st.objects.datatypes.lookup(datatype))?;
    if let Some(rep) = rep {
        let file = rep.layout(datatype, &t)?.file_bytes(1);
        return Ok(t.extent as i64 - t.size as i64 + file as i64);
    }
    Ok(if ext32 {
        t.extent as i64 - t.size as i64 + t.external_size() as i64
    } else {
        t.extent as i64
    })
}

mpi_fn! {
    // MPI_Aint* in the int form, MPI_Count* in the _c form: the same Rust type.
    fn MPI_File_get_type_extent, fn MPI_File_get_type_extent_c(fh: MPI_File,
        datatype: MPI_Datatype, extent: *mut MPI_Aint) on ErrObj::File(fh as usize) => {
        let e = type_extent(fh, datatype)?;
        // SAFETY: the caller's MPI_Aint*/MPI_Count* output.
        unsafe { out(extent, e as MPI_Aint) }
    }
}

mpi_fn! {
    fn MPI_File_set_atomicity(fh: MPI_File, flag: c_int) on ErrObj::File(fh as usize) => {
        let f = files::get(fh as usize)?;
        let mut g = lock(&f);
        let size = g.size;
        let all = coll::allgather_u64(g.comm, &[u64::from(flag != 0)], size)?;
        if all.iter().any(|&x| x != all[0]) {
            return Err(MpiError::new(MPI_ERR_NOT_SAME, "the processes passed different flags"));
        }
        g.atomic = flag != 0;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_File_get_atomicity(fh: MPI_File, flag: *mut c_int) on ErrObj::File(fh as usize) => {
        let a = lock(&files::get(fh as usize)?).atomic;
        // SAFETY: the caller's int* output.
        unsafe { out(flag, a as c_int) }
    }
}

mpi_fn! {
    fn MPI_File_sync(fh: MPI_File) on ErrObj::File(fh as usize) => {
        let f = files::get(fh as usize)?;
        let g = lock(&f);
        if g.amode & MPI_MODE_RDONLY == 0 {
            g.fd.sync_data().map_err(|e| posix::io_err("fsync", e))?;
        }
        coll::barrier(g.comm)
    }
}

/// MPI_Register_datarep(_c): the representation and its callbacks (`io::datarep`); a
/// second registration of a name is MPI_ERR_DUP_DATAREP.
///
/// # Safety
/// `datarep` is null or a NUL-terminated string.
unsafe fn register(
    datarep: *const c_char,
    read: Option<datarep::Conv>,
    write: Option<datarep::Conv>,
    extent_fn: Option<MPI_Datarep_extent_function>,
    extra_state: *mut c_void,
) -> MpiResult<()> {
    // SAFETY: per the contract.
    let name = unsafe { c_str(datarep, "datarep") }?;
    if name.is_empty() || name.len() >= MPI_MAX_DATAREP_STRING as usize {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "data representation name of {} characters",
            name.len()
        ));
    }
    if extent_fn.is_none() {
        return Err(MpiError::new(MPI_ERR_ARG, "null dtype_file_extent_fn"));
    }
    datarep::register(&name, read, write, extent_fn, extra_state as usize)
}

/// MPI_Datarep_conversion_function(_c): the count is an int or an MPI_Count.
type ConvFn<Count> = unsafe extern "C" fn(
    *mut c_void,
    MPI_Datatype,
    Count,
    *mut c_void,
    MPI_Offset,
    *mut c_void,
) -> c_int;

mpi_fn! {
    fn MPI_Register_datarep, fn MPI_Register_datarep_c(datarep: *const c_char,
        read_conversion_fn: Option<ConvFn<Count>>, write_conversion_fn: Option<ConvFn<Count>>,
        dtype_file_extent_fn: Option<MPI_Datarep_extent_function>, extra_state: *mut c_void)
        on ErrObj::File(0) => {
        let (r, w) = (read_conversion_fn.map(datarep::Conv::from), write_conversion_fn.map(datarep::Conv::from));
        // SAFETY: the caller's NUL-terminated string.
        unsafe { register(datarep, r, w, dtype_file_extent_fn, extra_state) }
    }
}

// MPI_File_c2f / MPI_File_f2c return handles, so they are written out like MPI_Wtime.

/// MPI_File_c2f: Ferrite's file handles are table handles in the pointer's bits.
#[no_mangle]
pub extern "C" fn PMPI_File_c2f(file: MPI_File) -> MPI_Fint {
    files::from_c(file as usize).unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn MPI_File_c2f(file: MPI_File) -> MPI_Fint {
    PMPI_File_c2f(file)
}

/// MPI_File_f2c.
#[no_mangle]
pub extern "C" fn PMPI_File_f2c(file: MPI_Fint) -> MPI_File {
    files::to_c(file)
}

#[no_mangle]
pub extern "C" fn MPI_File_f2c(file: MPI_Fint) -> MPI_File {
    PMPI_File_f2c(file)
}

/// One access family's read and write entry points, int and large-count forms: they differ
/// only in the buffer's constness and the direction. `blocking`, `nonblocking` and `begin`
/// rows name the four functions, the extra leading parameters and where the access starts
/// (and whether it is collective); `end` rows name the two _end functions.
macro_rules! io_access {
    (end fn $r:ident, fn $w:ident) => {
        io_access! { @end $r, *mut c_void }
        io_access! { @end $w, *const c_void }
    };
    ($how:ident fn $r:ident, fn $rc:ident, fn $w:ident, fn $wc:ident ($($a:ident: $t:ty),*)
     $($arg:expr),*) => {
        io_access! { @$how [$r, $rc] *mut c_void, Dir::Read, ($($a: $t),*) $($arg),* }
        io_access! { @$how [$w, $wc] *const c_void, Dir::Write, ($($a: $t),*) $($arg),* }
    };
    (@blocking [$n:ident, $nc:ident] $buf:ty, $dir:expr, ($($a:ident: $t:ty),*)
     $from:expr, $coll:expr) => {
        mpi_fn! {
            fn $n, fn $nc(fh: MPI_File, $($a: $t,)* buf: $buf, count: Count,
                datatype: MPI_Datatype, status: *mut MPI_Status) on ErrObj::File(fh as usize) => {
                // SAFETY: the caller's buffer, count and type follow MPI's contract; `status`
                // is an MPI_Status* or MPI_STATUS_IGNORE.
                unsafe {
                    blocking(fh, buf as *mut u8, i64::from(count), datatype, $dir, $from, $coll,
                        status)
                }
            }
        }
    };
    (@nonblocking [$n:ident, $nc:ident] $buf:ty, $dir:expr, ($($a:ident: $t:ty),*)
     $from:expr, $coll:expr) => {
        mpi_fn! {
            fn $n, fn $nc(fh: MPI_File, $($a: $t,)* buf: $buf, count: Count,
                datatype: MPI_Datatype, request: *mut MPI_Request)
                on ErrObj::File(fh as usize) => {
                // SAFETY: as for the blocking form; `request` is an MPI_Request*.
                unsafe {
                    nonblocking(fh, buf as *mut u8, i64::from(count), datatype, $dir, $from,
                        $coll, request)
                }
            }
        }
    };
    (@begin [$n:ident, $nc:ident] $buf:ty, $dir:expr, ($($a:ident: $t:ty),*) $from:expr) => {
        mpi_fn! {
            fn $n, fn $nc(fh: MPI_File, $($a: $t,)* buf: $buf, count: Count,
                datatype: MPI_Datatype) on ErrObj::File(fh as usize) => {
                // SAFETY: the caller's buffer, count and type follow MPI's contract.
                unsafe { begin(fh, buf as *mut u8, i64::from(count), datatype, $dir, $from) }
            }
        }
    };
    (@end $n:ident, $buf:ty) => {
        mpi_fn! {
            fn $n(fh: MPI_File, buf: $buf, status: *mut MPI_Status)
                on ErrObj::File(fh as usize) => {
                let _ = buf;
                // SAFETY: `status` is an MPI_Status* or MPI_STATUS_IGNORE.
                unsafe { end(fh, status) }
            }
        }
    };
}

io_access! { blocking fn MPI_File_read, fn MPI_File_read_c, fn MPI_File_write,
fn MPI_File_write_c () From::Individual, false }
io_access! { nonblocking fn MPI_File_iread, fn MPI_File_iread_c, fn MPI_File_iwrite,
fn MPI_File_iwrite_c () From::Individual, false }
io_access! { blocking fn MPI_File_read_at, fn MPI_File_read_at_c, fn MPI_File_write_at,
fn MPI_File_write_at_c (offset: MPI_Offset) From::At(offset), false }
io_access! { nonblocking fn MPI_File_iread_at, fn MPI_File_iread_at_c, fn MPI_File_iwrite_at,
fn MPI_File_iwrite_at_c (offset: MPI_Offset) From::At(offset), false }
io_access! { blocking fn MPI_File_read_all, fn MPI_File_read_all_c, fn MPI_File_write_all,
fn MPI_File_write_all_c () From::Individual, true }
io_access! { nonblocking fn MPI_File_iread_all, fn MPI_File_iread_all_c, fn MPI_File_iwrite_all,
fn MPI_File_iwrite_all_c () From::Individual, true }
io_access! { begin fn MPI_File_read_all_begin, fn MPI_File_read_all_begin_c,
fn MPI_File_write_all_begin, fn MPI_File_write_all_begin_c () From::Individual }
io_access! { end fn MPI_File_read_all_end, fn MPI_File_write_all_end }
io_access! { blocking fn MPI_File_read_at_all, fn MPI_File_read_at_all_c, fn MPI_File_write_at_all,
fn MPI_File_write_at_all_c (offset: MPI_Offset) From::At(offset), true }
io_access! { nonblocking fn MPI_File_iread_at_all, fn MPI_File_iread_at_all_c,
fn MPI_File_iwrite_at_all, fn MPI_File_iwrite_at_all_c (offset: MPI_Offset)
From::At(offset), true }
io_access! { begin fn MPI_File_read_at_all_begin, fn MPI_File_read_at_all_begin_c,
fn MPI_File_write_at_all_begin, fn MPI_File_write_at_all_begin_c (offset: MPI_Offset)
From::At(offset) }
io_access! { end fn MPI_File_read_at_all_end, fn MPI_File_write_at_all_end }
io_access! { blocking fn MPI_File_read_shared, fn MPI_File_read_shared_c, fn MPI_File_write_shared,
fn MPI_File_write_shared_c () From::Shared, false }
io_access! { nonblocking fn MPI_File_iread_shared, fn MPI_File_iread_shared_c,
fn MPI_File_iwrite_shared, fn MPI_File_iwrite_shared_c () From::Shared, false }
io_access! { blocking fn MPI_File_read_ordered, fn MPI_File_read_ordered_c,
fn MPI_File_write_ordered, fn MPI_File_write_ordered_c () From::Ordered, true }
io_access! { begin fn MPI_File_read_ordered_begin, fn MPI_File_read_ordered_begin_c,
fn MPI_File_write_ordered_begin, fn MPI_File_write_ordered_begin_c () From::Ordered }
io_access! { end fn MPI_File_read_ordered_end, fn MPI_File_write_ordered_end }
