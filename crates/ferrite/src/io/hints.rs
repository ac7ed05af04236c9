//! The info hints MPI-IO honours (ROMIO's names), their defaults, and what MPI_File_get_info
//! reports.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `cb_nodes` | number of hosts | aggregators of collective buffering |
//! | `cb_buffer_size` | 16777216 | bytes an aggregator handles per two-phase round |
//! | `romio_cb_write` / `romio_cb_read` | `automatic` | two-phase for collective access: `enable`, `disable`, or `automatic` (when some rank's access is non-contiguous and the ranks' ranges interleave) |
//! | `romio_ds_write` / `romio_ds_read` | `automatic` | data sieving for independent non-contiguous access (`automatic` = `enable`) |
//! | `ind_wr_buffer_size` | 524288 | largest span of a sieved write (read-modify-write) |
//! | `ind_rd_buffer_size` | 4194304 | largest span of a sieved read |
//!
//! Other keys are accepted and ignored (MPI 4.1 section 14.2.8 lets an implementation
//! ignore hints); unknown keys are not echoed back by MPI_File_get_info.

use crate::objects::info::Info;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    Enable,
    Disable,
    Automatic,
}

impl Switch {
    fn parse(v: Option<&str>, old: Switch) -> Switch {
        match v.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
            Some("enable") | Some("true") => Switch::Enable,
            Some("disable") | Some("false") => Switch::Disable,
            Some("automatic") => Switch::Automatic,
            _ => old,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Switch::Enable => "enable",
            Switch::Disable => "disable",
            Switch::Automatic => "automatic",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Hints {
    pub cb_nodes: usize,
    pub cb_buffer_size: u64,
    pub cb_write: Switch,
    pub cb_read: Switch,
    pub ds_write: Switch,
    pub ds_read: Switch,
    pub ind_wr_buffer_size: u64,
    pub ind_rd_buffer_size: u64,
}

impl Hints {
    pub fn defaults(hosts: usize) -> Hints {
        Hints {
            cb_nodes: hosts.max(1),
            cb_buffer_size: 16 << 20,
            cb_write: Switch::Automatic,
            cb_read: Switch::Automatic,
            ds_write: Switch::Automatic,
            ds_read: Switch::Automatic,
            ind_wr_buffer_size: 512 << 10,
            ind_rd_buffer_size: 4 << 20,
        }
    }

    /// Applies the hints of `info` (unparsable values keep the current setting).
    pub fn apply(&mut self, info: &Info, size: usize) {
        let num = |k: &str| info.get(k).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(n) = num("cb_nodes") {
            self.cb_nodes = (n as usize).clamp(1, size.max(1));
        }
        if let Some(n) = num("cb_buffer_size").filter(|&n| n > 0) {
            self.cb_buffer_size = n;
        }
        if let Some(n) = num("ind_wr_buffer_size").filter(|&n| n > 0) {
            self.ind_wr_buffer_size = n;
        }
        if let Some(n) = num("ind_rd_buffer_size").filter(|&n| n > 0) {
            self.ind_rd_buffer_size = n;
        }
        self.cb_write = Switch::parse(info.get("romio_cb_write"), self.cb_write);
        self.cb_read = Switch::parse(info.get("romio_cb_read"), self.cb_read);
        self.ds_write = Switch::parse(info.get("romio_ds_write"), self.ds_write);
        self.ds_read = Switch::parse(info.get("romio_ds_read"), self.ds_read);
    }

    /// The hints in effect, as MPI_File_get_info reports them.
    pub fn to_info(&self) -> Info {
        let mut i = Info::default();
        i.set("cb_nodes", &self.cb_nodes.to_string());
        i.set("cb_buffer_size", &self.cb_buffer_size.to_string());
        i.set("romio_cb_write", self.cb_write.name());
        i.set("romio_cb_read", self.cb_read.name());
        i.set("romio_ds_write", self.ds_write.name());
        i.set("romio_ds_read", self.ds_read.name());
        i.set("ind_wr_buffer_size", &self.ind_wr_buffer_size.to_string());
        i.set("ind_rd_buffer_size", &self.ind_rd_buffer_size.to_string());
        i
    }

    /// The sieve span for an independent access (0: no sieving).
    pub fn sieve(&self, write: bool) -> u64 {
        match (write, self.ds_write, self.ds_read) {
            (true, Switch::Disable, _) | (false, _, Switch::Disable) => 0,
            (true, ..) => self.ind_wr_buffer_size,
            (false, ..) => self.ind_rd_buffer_size,
        }
    }
}
