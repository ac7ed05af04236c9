//! User data representations (MPI_Register_datarep(_c), MPI 4.1 section 14.5.3).
//!
//! A representation registered without conversion functions is accessed as "native". One
//! with them stores each predefined type in `dtype_file_extent_fn`'s number of bytes: a
//! write packs the data stream through `write_conversion_fn`, a read converts the bytes read
//! through `read_conversion_fn`, in chunks of at most [`CHUNK`] file bytes with the
//! `position` (in data items, into the memory type tiled over the buffer) of each chunk.
//! The stream is then placed through the filetype as native bytes are (as for external32).
//! A NULL conversion function (MPI_CONVERSION_FN_NULL(_C)) makes that direction native,
//! which needs the file extents to be the native sizes.
//!
//! Ferrite converts memory types whose type signature holds one predefined type (any
//! derived type built from one); a signature mixing predefined types is refused with
//! MPI_ERR_UNSUPPORTED_OPERATION. The callbacks are user code: they run in the calling
//! thread without the state lock (`io::engine` defers a nonblocking collective read's
//! conversion until the lock is released), and a non-success return is MPI_ERR_CONVERSION.

use crate::abi::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::objects::datatype::Datatype;
use std::collections::HashMap;
use std::os::raw::c_void;
use std::sync::{Arc, Mutex};

/// File bytes converted per call of a conversion function.
pub const CHUNK: u64 = 64 << 10;

#[derive(Clone, Copy)]
pub enum Conv {
    Int(MPI_Datarep_conversion_function),
    Count(MPI_Datarep_conversion_function_c),
}

impl From<MPI_Datarep_conversion_function> for Conv {
    fn from(f: MPI_Datarep_conversion_function) -> Self {
        Conv::Int(f)
    }
}

impl From<MPI_Datarep_conversion_function_c> for Conv {
    fn from(f: MPI_Datarep_conversion_function_c) -> Self {
        Conv::Count(f)
    }
}

pub struct Datarep {
    pub name: String,
    pub read: Option<Conv>,
    pub write: Option<Conv>,
    pub extent: Option<MPI_Datarep_extent_function>,
    pub extra: usize,
    /// File extents returned so far, by predefined type.
    extents: Mutex<HashMap<MPI_Datatype, u64>>,
}

static REGISTERED: Mutex<Vec<Arc<Datarep>>> = Mutex::new(Vec::new());

fn registry() -> std::sync::MutexGuard<'static, Vec<Arc<Datarep>>> {
    REGISTERED.lock().unwrap_or_else(|e| e.into_inner())
}

/// MPI_Register_datarep(_c): MPI_ERR_DUP_DATAREP for a name already known.
pub fn register(
    name: &str,
    read: Option<Conv>,
    write: Option<Conv>,
    extent: Option<MPI_Datarep_extent_function>,
    extra: usize,
) -> MpiResult<()> {
    let mut r = registry();
    if matches!(name, "native" | "internal" | "external32") || r.iter().any(|x| x.name == name) {
        return Err(crate::mpi_err!(
            MPI_ERR_DUP_DATAREP,
            "data representation \"{name}\" is already defined"
        ));
    }
    r.push(Arc::new(Datarep {
        name: name.to_string(),
        read,
        write,
        extent,
        extra,
        extents: Mutex::new(HashMap::new()),
    }));
    Ok(())
}

/// The representation MPI_File_set_view names: None for the built-in ones and for user
/// ones without conversion functions (both accessed as native, or external32).
pub fn lookup(rep: &str) -> MpiResult<Option<Arc<Datarep>>> {
    if matches!(rep, "native" | "internal" | "external32") {
        return Ok(None);
    }
    match registry().iter().find(|x| x.name == rep) {
        Some(d) if d.read.is_none() && d.write.is_none() => Ok(None),
        Some(d) => Ok(Some(d.clone())),
        None => Err(crate::mpi_err!(
            MPI_ERR_UNSUPPORTED_DATAREP,
            "unknown data representation \"{rep}\" (native, internal, external32 or one registered with MPI_Register_datarep)"
        )),
    }
}

/// A type as the representation sees it: `items` data items of predefined type `pred`
/// (`native` bytes each here, `file` bytes each in the file) per element.
#[derive(Clone)]
pub struct Layout {
    pub handle: MPI_Datatype,
    pub pred: MPI_Datatype,
    pub items: u64,
    pub native: u64,
    pub file: u64,
}

impl Layout {
    /// File bytes of `count` elements.
    pub fn file_bytes(&self, count: u64) -> u64 {
        count * self.items * self.file
    }
}

/// The one predefined type (handle and object) in the signature of `t` (given as `h`),
/// or None if it mixes several.
fn predefined(h: MPI_Datatype, t: &Arc<Datatype>) -> Option<(MPI_Datatype, Arc<Datatype>)> {
    let Some(env) = &t.envelope else {
        return Some((h, t.clone()));
    };
    let mut found: Option<(MPI_Datatype, Arc<Datatype>)> = None;
    for (ch, ct) in &env.types {
        if ct.size == 0 {
            continue;
        }
        let p = predefined(*ch, ct)?;
        match &found {
            Some(f) if f.0 != p.0 => return None,
            _ => found = Some(p),
        }
    }
    found
}

fn conversion_error(what: &str, name: &str, rc: i32) -> MpiError {
    crate::mpi_err!(
        MPI_ERR_CONVERSION,
        "the {what} of data representation \"{name}\" returned error {rc}"
    )
}

impl Datarep {
    /// The file extent of predefined type `pred` (asked once; user code).
    fn file_extent(&self, pred: MPI_Datatype) -> MpiResult<u64> {
        if let Some(&e) = self
            .extents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&pred)
        {
            return Ok(e);
        }
        let f = self.extent.ok_or_else(|| {
            MpiError::new(MPI_ERR_CONVERSION, "no dtype_file_extent_fn was registered")
        })?;
        let mut e: MPI_Aint = 0;
        // SAFETY: the user's extent function with a predefined type, a local output and
        // the extra_state given at registration.
        let rc = unsafe { f(pred, &mut e, self.extra as *mut c_void) };
        if rc != MPI_SUCCESS {
            return Err(conversion_error("dtype_file_extent_fn", &self.name, rc));
        }
        if e <= 0 {
            return Err(crate::mpi_err!(
                MPI_ERR_CONVERSION,
                "dtype_file_extent_fn of \"{}\" gave file extent {e}",
                self.name
            ));
        }
        let e = e as u64;
        self.extents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pred, e);
        Ok(e)
    }

    /// How `t` (handle `h`) is stored in this representation.
    pub fn layout(&self, h: MPI_Datatype, t: &Arc<Datatype>) -> MpiResult<Layout> {
        if t.size == 0 {
            return Ok(Layout {
                handle: h,
                pred: h,
                items: 0,
                native: 1,
                file: 1,
            });
        }
        let (pred, pt) = predefined(h, t).ok_or_else(|| {
            crate::mpi_err!(
                MPI_ERR_UNSUPPORTED_OPERATION,
                "data representation \"{}\": Ferrite converts types made of one predefined type only, and {} mixes several",
                self.name,
                if t.name.is_empty() { "this datatype" } else { &t.name }
            )
        })?;
        let native = pt.size as u64;
        Ok(Layout {
            handle: h,
            pred,
            items: t.size as u64 / native,
            native,
            file: self.file_extent(pred)?,
        })
    }

    /// Checks that a direction without a conversion function can copy native bytes.
    fn native_ok(&self, l: &Layout, what: &str) -> MpiResult<()> {
        if l.items == 0 || l.file == l.native {
            return Ok(());
        }
        Err(crate::mpi_err!(
            MPI_ERR_CONVERSION,
            "data representation \"{}\" has no {what} conversion function, and its file extent of a {}-byte type is {}",
            self.name,
            l.native,
            l.file
        ))
    }

    /// True if writes convert (else they are native).
    pub fn writes_convert(&self, l: &Layout) -> MpiResult<bool> {
        if self.write.is_some() {
            return Ok(true);
        }
        self.native_ok(l, "write").map(|_| false)
    }

    /// True if reads convert (else they are native).
    pub fn reads_convert(&self, l: &Layout) -> MpiResult<bool> {
        if self.read.is_some() {
            return Ok(true);
        }
        self.native_ok(l, "read").map(|_| false)
    }

    /// Calls `f` on consecutive chunks of data items: (first item, items, file bytes range).
    fn chunks(
        l: &Layout,
        total_items: u64,
        mut f: impl FnMut(u64, u64, std::ops::Range<usize>) -> MpiResult<()>,
    ) -> MpiResult<()> {
        let per = (CHUNK / l.file).max(1);
        let mut pos = 0;
        while pos < total_items {
            let n = per.min(total_items - pos);
            let at = (pos * l.file) as usize;
            f(pos, n, at..at + (n * l.file) as usize)?;
            pos += n;
        }
        Ok(())
    }

    /// Calls the write or read conversion function.
    ///
    /// # Safety
    /// `userbuf` holds the memory type tiled over the items converted; `filebuf` holds
    /// `n` items in the file representation.
    unsafe fn call(
        &self,
        write: bool,
        userbuf: *mut u8,
        l: &Layout,
        n: u64,
        filebuf: *mut u8,
        pos: u64,
    ) -> MpiResult<()> {
        let (c, what) = if write {
            (self.write, "write_conversion_fn")
        } else {
            (self.read, "read_conversion_fn")
        };
        let c = c.expect("checked by writes_convert / reads_convert");
        let extra = self.extra as *mut c_void;
        let (u, fb) = (userbuf as *mut c_void, filebuf as *mut c_void);
        let rc = match c {
            Conv::Int(f) => {
                let n = i32::try_from(n).map_err(|_| {
                    MpiError::new(MPI_ERR_CONVERSION, "a chunk of more than 2^31 items")
                })?;
                // SAFETY: per this function's contract; the user's function.
                unsafe { f(u, l.handle, n, fb, pos as MPI_Offset, extra) }
            }
            // SAFETY: as above.
            Conv::Count(f) => unsafe {
                f(u, l.handle, n as MPI_Count, fb, pos as MPI_Offset, extra)
            },
        };
        if rc != MPI_SUCCESS {
            return Err(conversion_error(what, &self.name, rc));
        }
        Ok(())
    }

    /// The file representation of `count` elements of `l` at `buf`, through the write
    /// conversion function.
    ///
    /// # Safety
    /// `buf` holds `count` elements of the memory type.
    pub unsafe fn to_file(&self, l: &Layout, buf: *const u8, count: u64) -> MpiResult<Vec<u8>> {
        let mut out = vec![0u8; l.file_bytes(count) as usize];
        Datarep::chunks(l, count * l.items, |pos, n, r| {
            // SAFETY: per this function's contract; `out[r]` holds `n` file items.
            unsafe { self.call(true, buf as *mut u8, l, n, out[r].as_mut_ptr(), pos) }
        })?;
        Ok(out)
    }

    /// Converts the whole items of `data` (file representation) into `buf`, through the
    /// read conversion function.
    ///
    /// # Safety
    /// `buf` holds the memory type tiled over the items in `data`, and is writable.
    pub unsafe fn from_file(&self, l: &Layout, data: &mut [u8], buf: *mut u8) -> MpiResult<()> {
        let items = data.len() as u64 / l.file;
        Datarep::chunks(l, items, |pos, n, r| {
            // SAFETY: per this function's contract; `data[r]` holds `n` file items.
            unsafe { self.call(false, buf, l, n, data[r].as_mut_ptr(), pos) }
        })
    }
}
