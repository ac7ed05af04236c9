//! MPI objects: communicators, groups, datatypes, error handlers, attributes, info.

pub mod attr;
pub mod comm;
pub mod comm_create;
pub mod comm_idup;
pub mod context_ids;
pub mod datatype;
pub mod datatype_names;
pub mod errhandler;
pub mod group;
pub mod handles;
pub mod info;
pub mod session;
pub mod topo;
pub mod win;

use attr::Attrs;
use comm::Comms;
use datatype::Datatypes;
use errhandler::Errhandlers;
use group::Groups;
use win::Wins;

/// Every object table of the process.
pub struct Objects {
    pub comms: Comms,
    pub errhandlers: Errhandlers,
    pub datatypes: Datatypes,
    pub groups: Groups,
    pub attrs: Attrs,
    pub wins: Wins,
}

impl Objects {
    pub fn new(world_rank: u32, world_size: u32) -> Self {
        Objects {
            comms: Comms::new(world_rank, world_size),
            errhandlers: Errhandlers::new(),
            datatypes: Datatypes::new(),
            groups: Groups::default(),
            attrs: Attrs::default(),
            wins: Wins::default(),
        }
    }
}
