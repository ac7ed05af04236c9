//! `mpi_fn!`: one declaration per C entry point.

/// Declares `PMPI_<name>` (the implementation) and `MPI_<name>` (forwards to it, so tools can
/// interpose `MPI_<name>`). Write it as
///
/// ```ignore
/// mpi_fn! {
///     fn MPI_Send(buf: *const c_void, ..., comm: MPI_Comm) on ErrObj::Comm(comm) => {
///         state::with(|st| st.send(...))
///     }
/// }
/// ```
///
/// The body returns `MpiResult<()>`. An error goes through the error handler of the object
/// after `on` (evaluated only on error; an `MpiError` may override it with `.on(obj)`), and a
/// panic becomes `MPI_ERR_INTERN` instead of unwinding into C. The build script scans for
/// `fn MPI_` inside these blocks to know which functions are implemented.
///
/// `fn MPI_X, fn MPI_X_c(...)` declares the int and large-count forms at once (see
/// [`twins!`](crate::twins)): write the parameters that differ as `Count` or `Disp`;
/// `fn MPI_X, fn MPI_X_c, fn MPI_X_x(...)` also gives the large-count form the MPI-3 `_x`
/// name (its signature is the `_c` form's).
#[macro_export]
macro_rules! mpi_fn {
    (fn $int:ident, fn $big:ident, fn $x:ident $($rest:tt)*) => {
        $crate::twins! { mpi_fn_each [fn $int] [fn $big, fn $x] $($rest)* }
    };
    (fn $int:ident, fn $big:ident $($rest:tt)*) => {
        $crate::twins! { mpi_fn [fn $int] [fn $big] $($rest)* }
    };
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) on $obj:expr => $body:block) => {
        paste::paste! {
            $(#[$m])*
            #[no_mangle]
            pub unsafe extern "C" fn [<P $name>]($($arg: $ty),*) -> ::std::os::raw::c_int {
                let result = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
                    || -> $crate::error::MpiResult<()> { $body },
                ));
                $crate::error::finish(stringify!($name), result, || $obj)
            }

            $(#[$m])*
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> ::std::os::raw::c_int {
                // SAFETY: the caller upholds the same contract as for the PMPI_ entry point.
                unsafe { [<P $name>]($($arg),*) }
            }
        }
    };
}

/// `mpi_fn!` once per name, the same parameters and body each time.
#[macro_export]
macro_rules! mpi_fn_each {
    (fn $name:ident $(, fn $more:ident)* ($($params:tt)*) on $obj:expr => $body:block) => {
        $crate::mpi_fn! { fn $name($($params)*) on $obj => $body }
        $crate::mpi_fn_each! { $(fn $more),* ($($params)*) on $obj => $body }
    };
    (($($params:tt)*) on $obj:expr => $body:block) => {};
}

/// Like `mpi_fn!`, for MPICH's internal entry points (`MPII_*`) that MPICH's own Fortran
/// and C++ libraries call: one symbol, no `PMPI_` twin, the same error handling.
#[macro_export]
macro_rules! mpich_internal_fn {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) on $obj:expr => $body:block) => {
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> ::std::os::raw::c_int {
            let result = ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(
                || -> $crate::error::MpiResult<()> { $body },
            ));
            $crate::error::finish(stringify!($name), result, || $obj)
        }
    };
}

/// One declaration for an entry point's int form (`MPI_X`) and large-count form
/// (`MPI_X_c`): expands `$mac! { fn <int names> <rest> }` in a module where `Count` and
/// `Disp` are `c_int`, and `$mac! { fn <_c names> <rest> }` in one where they are
/// `MPI_Count` and `MPI_Aint`, and re-exports both sets of functions here. The bodies are
/// the same code; they convert with `i64::from(count)` (exact for both widths) or
/// `Count::try_from(n)` for outputs; `LARGE` tells the forms apart where they differ. build.rs checks both signatures against mpi.h.
#[macro_export]
macro_rules! twins {
    ($mac:ident [fn $int0:ident $(, fn $int:ident)*] [fn $big0:ident $(, fn $big:ident)*]
     $($rest:tt)*) => {
        paste::paste! {
            // The shared body converts for the narrower form (`i64::from(count)`), which is
            // an identity in the wider one.
            #[allow(non_snake_case, unused_imports, dead_code)]
            #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
            mod [<$int0 _int>] {
                use super::*;
                /// Counts of the int form.
                type Count = ::std::os::raw::c_int;
                /// Displacements of the int form.
                type Disp = ::std::os::raw::c_int;
                /// Whether this is the large-count form.
                const LARGE: bool = false;
                $mac! { fn $int0 $(, fn $int)* $($rest)* }
            }
            #[allow(non_snake_case, unused_imports, dead_code)]
            #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
            mod [<$int0 _big>] {
                use super::*;
                /// Counts of the large-count form.
                type Count = $crate::abi::consts::MPI_Count;
                /// Displacements of the large-count form.
                type Disp = $crate::abi::consts::MPI_Aint;
                /// Whether this is the large-count form.
                const LARGE: bool = true;
                $mac! { fn $big0 $(, fn $big)* $($rest)* }
            }
            pub use [<$int0 _int>]::{$int0, [<P $int0>] $(, $int, [<P $int>])*};
            pub use [<$int0 _big>]::{$big0, [<P $big0>] $(, $big, [<P $big>])*};
        }
    };
}
