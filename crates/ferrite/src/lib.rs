//! Ferrite MPI.
