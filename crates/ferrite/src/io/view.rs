//! File views (MPI 4.1 section 14.3): which bytes of the file a process sees.
//!
//! A view is a displacement, an etype and a filetype tiled from the displacement every
//! filetype extent. The data bytes of one filetype copy are flattened once, at
//! MPI_File_set_view, into sorted runs with prefix sums; an access of `n` bytes starting
//! at byte `p` of the view's data stream then maps to file extents by a binary search for
//! the first run and a walk from there.

use super::datarep::Datarep;
use crate::abi::consts::*;
use crate::error::MpiResult;
use crate::objects::datatype::Datatype;
use std::sync::Arc;

/// An extent of the file: `len` bytes at absolute byte offset `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    pub off: u64,
    pub len: u64,
}

pub struct View {
    pub disp: u64,
    pub etype: Arc<Datatype>,
    pub etype_h: MPI_Datatype,
    pub filetype: Arc<Datatype>,
    pub filetype_h: MPI_Datatype,
    pub datarep: String,
    /// The file holds "external32" data: the data stream is the buffer packed with
    /// MPI_Pack_external, placed through the filetype like native bytes (as ROMIO does).
    pub external32: bool,
    /// A user data representation with conversion functions (`io::datarep`), and the file
    /// bytes of one etype in it.
    pub rep: Option<(Arc<Datarep>, u64)>,
    /// Data runs of one filetype copy: (offset from the copy's origin, length), merged
    /// where adjacent.
    runs: Vec<(i64, u64)>,
    /// Data bytes before each run.
    before: Vec<u64>,
}

impl View {
    /// The default view: displacement 0, etype and filetype MPI_BYTE, "native".
    pub fn bytes() -> View {
        let t = Arc::new(Datatype::basic(1));
        View::new(0, t.clone(), MPI_BYTE, t, MPI_BYTE, "native".into())
    }

    pub fn new(
        disp: u64,
        etype: Arc<Datatype>,
        etype_h: MPI_Datatype,
        filetype: Arc<Datatype>,
        filetype_h: MPI_Datatype,
        datarep: String,
    ) -> View {
        let runs: Vec<(i64, u64)> = filetype
            .flatten(1)
            .into_iter()
            .map(|(off, len)| (off as i64, len as u64))
            .collect();
        let mut before = Vec::with_capacity(runs.len());
        let mut acc = 0;
        for r in &runs {
            before.push(acc);
            acc += r.1;
        }
        View {
            disp,
            etype,
            etype_h,
            filetype,
            filetype_h,
            external32: datarep == "external32",
            rep: None,
            datarep,
            runs,
            before,
        }
    }

    /// Bytes of one etype.
    pub fn esize(&self) -> u64 {
        match &self.rep {
            Some((_, e)) => *e,
            None => self.type_size(&self.etype),
        }
    }

    /// Makes the view's representation user data representation `rep` (calls its extent
    /// function: user code).
    pub fn set_rep(&mut self, rep: Arc<Datarep>) -> MpiResult<()> {
        let e = rep.layout(self.etype_h, &self.etype)?.file_bytes(1);
        self.rep = Some((rep, e));
        Ok(())
    }

    /// Bytes of one element of `t` in the file's data representation.
    pub fn type_size(&self, t: &Datatype) -> u64 {
        if self.external32 {
            t.external_size() as u64
        } else {
            t.size as u64
        }
    }

    /// Data bytes of one filetype copy.
    fn tile_data(&self) -> u64 {
        self.filetype.size as u64
    }

    /// The file extents holding `len` bytes of the view's data stream from byte `pos`, in
    /// stream order, adjacent extents merged.
    pub fn map(&self, pos: u64, len: u64) -> Vec<Seg> {
        let mut out: Vec<Seg> = Vec::new();
        let s = self.tile_data();
        if len == 0 || s == 0 {
            return out;
        }
        let ext = self.filetype.extent as i64;
        let (mut tile, mut r) = (pos / s, pos % s);
        let mut left = len;
        let mut i = self.before.partition_point(|&b| b <= r) - 1;
        while left > 0 {
            let (off, rl) = self.runs[i];
            let into = r - self.before[i];
            let take = (rl - into).min(left);
            let at = (self.disp as i64 + tile as i64 * ext + off + into as i64) as u64;
            match out.last_mut() {
                Some(l) if l.off + l.len == at => l.len += take,
                _ => out.push(Seg { off: at, len: take }),
            }
            left -= take;
            r += take;
            i += 1;
            if i == self.runs.len() {
                i = 0;
                r = 0;
                tile += 1;
            }
        }
        out
    }

    /// The absolute byte offset of etype `offset` of the view (MPI_File_get_byte_offset).
    pub fn byte_offset(&self, offset: u64) -> u64 {
        let pos = offset * self.esize();
        match self.map(pos, 1).first() {
            Some(s) => s.off,
            None => self.disp,
        }
    }

    /// The view offset (in etypes) of the first etype at or after absolute byte `abs`:
    /// where MPI_SEEK_END and MPI_File_get_size's end land in the view.
    pub fn offset_of_byte(&self, abs: u64) -> u64 {
        let s = self.tile_data();
        if abs <= self.disp || s == 0 || self.esize() == 0 {
            return 0;
        }
        let rel = (abs - self.disp) as i64;
        let ext = self.filetype.extent.max(1) as i64;
        let tile = rel / ext;
        let within = rel % ext;
        // Data bytes of this tile that lie before `within`.
        let mut data = 0u64;
        for (k, &(off, l)) in self.runs.iter().enumerate() {
            if within <= off {
                break;
            }
            data = self.before[k] + l.min((within - off) as u64);
        }
        (tile as u64 * s + data).div_ceil(self.esize())
    }
}

/// MPI_File_set_view's checks on the types: the filetype's data is whole etypes, and
/// displacements do not go backwards (MPI 4.1 section 14.3). MPI_ERR_ARG, as ROMIO.
pub fn check_types(etype: &Datatype, filetype: &Datatype) -> MpiResult<()> {
    if etype.size == 0 {
        return Err(crate::mpi_err!(MPI_ERR_ARG, "the etype holds no data"));
    }
    if !filetype.size.is_multiple_of(etype.size) {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "the filetype's {} data bytes are not a whole number of {}-byte etypes",
            filetype.size,
            etype.size
        ));
    }
    if filetype.true_lb < 0 || filetype.lb < 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "the filetype has a negative displacement"
        ));
    }
    if filetype.extent <= 0 && filetype.size > 0 {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "the filetype's extent {} is not positive",
            filetype.extent
        ));
    }
    let mut last = 0isize;
    let mut ok = true;
    for (off, len) in filetype.flatten(1) {
        ok &= off >= last;
        last = off + len as isize;
    }
    if !ok || last > filetype.lb + filetype.extent {
        return Err(crate::mpi_err!(
            MPI_ERR_ARG,
            "the filetype's displacements must be non-decreasing and inside its extent"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_view_maps_to_blocks() {
        let int = Datatype::basic(4);
        // 2 ints every 5 ints.
        let ft = Datatype::hvector(2, 2, 20, &int);
        let ft = Datatype::resized(&ft, 0, 40);
        let v = View::new(
            100,
            Arc::new(int.clone()),
            MPI_INT,
            Arc::new(ft),
            MPI_INT,
            "native".into(),
        );
        assert_eq!(
            v.map(0, 16),
            vec![Seg { off: 100, len: 8 }, Seg { off: 120, len: 8 }]
        );
        assert_eq!(
            v.map(12, 12),
            vec![Seg { off: 124, len: 4 }, Seg { off: 140, len: 8 }]
        );
        assert_eq!(v.byte_offset(4), 140);
        assert_eq!(v.offset_of_byte(140), 4);
        assert_eq!(v.offset_of_byte(130), 4);
        assert_eq!(v.offset_of_byte(104), 1);
    }
}
