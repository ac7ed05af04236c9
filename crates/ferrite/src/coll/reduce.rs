//! Reduction operations as collectives use them: the table of user operations
//! (MPI_Op_create), and [`Reducer`], which combines two packed buffers with either a
//! predefined kernel (coll/op.rs) or a user function.
//!
//! A user function is user code: it must run without the state lock held (it may call MPI,
//! e.g. MPI_Type_size). [`Reducer::combine`] therefore works on buffers the collective owns
//! and is only called by code that holds no lock: the blocking driver between progress
//! calls, or the tail of a nonblocking collective run after the lock is released.

use super::op::{self, Elem};
use crate::consts::*;
use crate::error::{MpiError, MpiResult};
use crate::objects::datatype::Datatype;
use crate::objects::handles::HandleTable;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// `MPI_User_function`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype);
/// `MPI_User_function_c` (MPI_Count length).
pub type UserFnC =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut MPI_Count, *mut MPI_Datatype);

/// MPICH's C++ trampoline for user ops (MPII_Op_set_cxx):
/// `void (const void *in, void *inout, int len, MPI_Datatype, MPI_User_function *user)`.
pub type CxxOpCall = unsafe extern "C" fn(*const c_void, *mut c_void, c_int, MPI_Datatype, UserFn);

#[derive(Clone, Copy)]
pub enum UserKind {
    Int(UserFn),
    Big(UserFnC),
    /// A C++ op: its function is called through MPICH's C++ library's trampoline.
    Cxx(UserFn, CxxOpCall),
}

impl From<UserFn> for UserKind {
    fn from(f: UserFn) -> Self {
        UserKind::Int(f)
    }
}

impl From<UserFnC> for UserKind {
    fn from(f: UserFnC) -> Self {
        UserKind::Big(f)
    }
}

#[derive(Clone, Copy)]
pub struct UserOp {
    pub f: UserKind,
    pub commute: bool,
}

/// Type code of MPI_Op handles (MPICH: MPI_OP_NULL is 0x18000000).
const OP_KIND: u32 = 0x6;

pub struct Ops {
    pub user: HandleTable<UserOp>,
}

impl Default for Ops {
    fn default() -> Self {
        Ops {
            user: HandleTable::new(OP_KIND),
        }
    }
}

impl Ops {
    pub fn commutative(&self, op: MPI_Op) -> MpiResult<bool> {
        if op::is_predefined(op) {
            return Ok(true);
        }
        Ok(self.user_op(op)?.commute)
    }

    fn user_op(&self, op: MPI_Op) -> MpiResult<UserOp> {
        self.user.get(op).copied().ok_or_else(|| {
            if op == MPI_OP_NULL {
                MpiError::new(MPI_ERR_OP, "MPI_OP_NULL is not a valid operation")
            } else {
                crate::mpi_err!(MPI_ERR_OP, "invalid operation handle {:#x}", op as u32)
            }
        })
    }

    /// Resolves (op, datatype) into something that can reduce packed buffers, checking that
    /// the operation is defined on the type.
    pub fn reducer(&self, op: MPI_Op, dt: MPI_Datatype, d: &Arc<Datatype>) -> MpiResult<Reducer> {
        if op::is_predefined(op) {
            if matches!(op, MPI_REPLACE | MPI_NO_OP) {
                return Err(crate::mpi_err!(
                    MPI_ERR_OP,
                    "{} is only for one-sided accumulate operations",
                    op::name(op)
                ));
            }
            let Some(elem) = op::elem_of(dt) else {
                return Err(crate::mpi_err!(
                    MPI_ERR_OP,
                    "{} is not defined on datatype {:#x} (predefined operations need a \
                     predefined datatype in Ferrite)",
                    op::name(op),
                    dt as u32
                ));
            };
            // Probe the kernel on empty buffers: it reports undefined (op, type) pairs.
            if op::apply(op, elem, &mut [], &[]).is_err() || undefined_on(op, elem) {
                return Err(crate::mpi_err!(
                    MPI_ERR_OP,
                    "{} is not defined on datatype {:#x}",
                    op::name(op),
                    dt as u32
                ));
            }
            return Ok(Reducer::Predef {
                op,
                elem,
                esize: d.size(),
            });
        }
        let u = self.user_op(op)?;
        Ok(Reducer::User {
            f: u.f,
            commute: u.commute,
            dt,
            d: d.clone(),
        })
    }
}

/// Operation/type pairs the kernel would accept on empty input but MPI forbids.
fn undefined_on(op: MPI_Op, elem: Elem) -> bool {
    use Elem::*;
    match elem {
        I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64 => matches!(op, MPI_MINLOC | MPI_MAXLOC),
        // The logical ops on floating point are MPICH's extension (its tests use them).
        F32 | F64 | LongDouble => !matches!(
            op,
            MPI_MAX | MPI_MIN | MPI_SUM | MPI_PROD | MPI_LAND | MPI_LOR | MPI_LXOR
        ),
        C32 | C64 => !matches!(op, MPI_SUM | MPI_PROD),
        Bool8 | Logical32 => !matches!(op, MPI_LAND | MPI_LOR | MPI_LXOR),
        Byte => !matches!(op, MPI_BAND | MPI_BOR | MPI_BXOR),
        Pair(..) | SamePair(_) | LongDoubleInt => !matches!(op, MPI_MINLOC | MPI_MAXLOC),
        CLongDouble => !matches!(op, MPI_SUM | MPI_PROD),
    }
}

/// How a collective combines two packed buffers of the same length.
#[derive(Clone)]
pub enum Reducer {
    Predef {
        op: MPI_Op,
        elem: Elem,
        esize: usize,
    },
    User {
        f: UserKind,
        commute: bool,
        dt: MPI_Datatype,
        d: Arc<Datatype>,
    },
}

impl Reducer {
    pub fn is_user(&self) -> bool {
        matches!(self, Reducer::User { .. })
    }

    pub fn commutative(&self) -> bool {
        match self {
            Reducer::Predef { .. } => true,
            Reducer::User { commute, .. } => *commute,
        }
    }

    /// Bytes of one element (blocks of a reduction are split on these boundaries).
    pub fn elem_size(&self) -> usize {
        match self {
            Reducer::Predef { esize, .. } => *esize,
            Reducer::User { d, .. } => d.size(),
        }
    }

    /// `b = a op b` on packed data (a holds the lower ranks' contribution). Call without the
    /// state lock for user operations.
    pub fn combine(&self, a: &[u8], b: &mut [u8]) {
        debug_assert_eq!(a.len(), b.len());
        match self {
            Reducer::Predef { op, elem, .. } => {
                // Checked when the reducer was made.
                let _ = op::apply(*op, *elem, b, a);
            }
            Reducer::User { f, dt, d, .. } => {
                if d.size() == 0 || a.is_empty() {
                    return;
                }
                let n = a.len() / d.size();
                if d.is_contiguous() {
                    // Packed data already has the type's layout (shifted by true_lb).
                    let mut ia = a.to_vec();
                    call_user(*f, ia.as_mut_ptr(), b.as_mut_ptr(), n, *dt, d.true_lb());
                    return;
                }
                // Derived layout: unpack both into the type's memory layout, call, repack.
                let span = (d.true_extent + (n as isize - 1) * d.extent).max(0) as usize;
                let mut la = vec![0u8; span];
                let mut lb = vec![0u8; span];
                let base = -d.true_lb;
                // SAFETY: la/lb hold `span` bytes, the extent of `n` elements starting at
                // true_lb; `base` shifts the buffer origin so true_lb lands at index 0.
                unsafe {
                    d.unpack(a, la.as_mut_ptr().offset(base), n);
                    d.unpack(b, lb.as_mut_ptr().offset(base), n);
                }
                call_user(*f, la.as_mut_ptr(), lb.as_mut_ptr(), n, *dt, 0);
                let mut out = Vec::with_capacity(b.len());
                // SAFETY: as above, the n elements lie in lb.
                unsafe { d.pack(lb.as_ptr().offset(base), n, &mut out) };
                b.copy_from_slice(&out);
            }
        }
    }
}

/// Calls a user function on `n` elements at `a - shift` (in) and `b - shift` (inout), where
/// `shift` is the type's true lower bound (the buffers start at the first data byte).
fn call_user(f: UserKind, a: *mut u8, b: *mut u8, n: usize, dt: MPI_Datatype, shift: isize) {
    let mut dt = dt;
    let a = a.wrapping_offset(-shift) as *mut c_void;
    let b = b.wrapping_offset(-shift) as *mut c_void;
    match f {
        UserKind::Int(f) => {
            let mut len = n as c_int;
            // SAFETY: a user MPI_User_function on buffers holding `len` elements of `dt`.
            unsafe { f(a, b, &mut len, &mut dt) }
        }
        UserKind::Big(f) => {
            let mut len = n as MPI_Count;
            // SAFETY: as above, with an MPI_Count length.
            unsafe { f(a, b, &mut len, &mut dt) }
        }
        // SAFETY: MPICH's C++ trampoline calls the C++ op `f` on the same buffers (C++ ops
        // take an int length: collectives never hand an op more than fits).
        UserKind::Cxx(f, call) => unsafe { call(a, b, n as c_int, dt, f) },
    }
}
