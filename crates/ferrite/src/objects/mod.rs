//! MPI objects: communicators, groups, datatypes, error handlers, attributes.

pub mod comm;
pub mod datatype;
pub mod errhandler;
pub mod handles;

use comm::Comms;
use datatype::Datatypes;
use errhandler::Errhandlers;

/// Every object table of the process.
pub struct Objects {
    pub comms: Comms,
    pub errhandlers: Errhandlers,
    pub datatypes: Datatypes,
}

impl Objects {
    pub fn new(world_rank: u32, world_size: u32) -> Self {
        Objects {
            comms: Comms::new(world_rank, world_size),
            errhandlers: Errhandlers::new(),
            datatypes: Datatypes::new(),
        }
    }
}
