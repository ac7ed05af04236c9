//! MPI-IO (MPI 4.1 chapter 14) on POSIX file systems, local or shared between hosts (NFS).
//!
//! - `file`: the file table, open/close/delete, per-file state;
//! - `view`: file views and the mapping of the view's data stream to file extents;
//! - `access`: where an access starts, pack/unpack, independent vs collective;
//! - `posix`: pread/pwrite, byte-range locks, data sieving;
//! - `twophase`: collective accesses (collective buffering with aggregators) as state
//!   machines of nonblocking steps;
//! - `engine`: the collective accesses in progress, advanced by the progress engine;
//! - `shared`: the shared file pointer (a locked side file);
//! - `hints`: the info keys honoured and their defaults;
//! - `datarep`: user data representations and their conversion functions;
//! - `coll`: the collectives MPI-IO runs on a file's private communicator.
//!
//! The C edge is `abi/file.rs`. Files live in their own table, outside the state lock: an
//! MPI-IO call takes the file's mutex and calls collectives through the public entry points.

pub mod access;
pub mod coll;
pub mod datarep;
pub mod engine;
pub mod file;
pub mod hints;
pub mod posix;
pub mod shared;
pub mod twophase;
pub mod view;
