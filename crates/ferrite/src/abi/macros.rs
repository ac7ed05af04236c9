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
#[macro_export]
macro_rules! mpi_fn {
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
