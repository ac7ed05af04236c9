//! Forwarding of a rank's stdout or stderr: whole lines only, so lines from different ranks
//! never mix, optionally tagged with the rank.

/// A line longer than this is forwarded in pieces rather than held without bound.
pub const MAX_HELD: usize = 64 * 1024;

/// The line prefix for rank `rank`'s `stream` (stdout or stderr): `[rank]<stream>: ` with
/// --tag-output (Open MPI's form), `[rank] ` with -l (MPICH's form), else none.
pub fn prefix(rank: u32, stream: &str, tag_output: bool, prepend_rank: bool) -> Option<String> {
    if tag_output {
        Some(format!("[{rank}]<{stream}>: "))
    } else if prepend_rank {
        Some(format!("[{rank}] "))
    } else {
        None
    }
}

pub struct LineForwarder {
    prefix: Option<Vec<u8>>,
    /// End unterminated pieces with a newline so they cannot run into another rank's line
    /// (off only for a lone untagged rank, whose output then stays byte-exact).
    terminate: bool,
    held: Vec<u8>,
}

impl LineForwarder {
    /// `prefix`: what goes before each line (see [`prefix`]); `shared`: other ranks write
    /// to the same output.
    pub fn new(prefix: Option<String>, shared: bool) -> Self {
        LineForwarder {
            terminate: prefix.is_some() || shared,
            prefix: prefix.map(String::into_bytes),
            held: Vec::new(),
        }
    }

    fn emit(&self, line: &[u8], newline: bool, out: &mut Vec<u8>) {
        if let Some(p) = &self.prefix {
            out.extend_from_slice(p);
        }
        out.extend_from_slice(line);
        if newline {
            out.push(b'\n');
        }
    }

    /// Takes bytes the rank wrote; returns what to write out now (complete lines).
    pub fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.held.extend_from_slice(data);
        let mut start = 0;
        while let Some(n) = self.held[start..].iter().position(|&b| b == b'\n') {
            let end = start + n;
            self.emit(&self.held[start..end], true, &mut out);
            start = end + 1;
        }
        self.held.drain(..start);
        while self.held.len() >= MAX_HELD {
            let piece: Vec<u8> = self.held.drain(..MAX_HELD).collect();
            self.emit(&piece, self.terminate, &mut out);
        }
        out
    }

    /// The stream ended: the unterminated last line, if any.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.held.is_empty() {
            let rest = std::mem::take(&mut self.held);
            self.emit(&rest, self.terminate, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_lines_leave() {
        let mut f = LineForwarder::new(prefix(3, "stdout", false, false), false);
        assert_eq!(f.feed(b"hel"), b"");
        assert_eq!(f.feed(b"lo\nwor"), b"hello\n");
        assert_eq!(f.feed(b"ld\n\nx"), b"world\n\n");
        assert_eq!(f.finish(), b"x");
        assert_eq!(f.finish(), b"");
    }

    #[test]
    fn tags_every_line() {
        let mut f = LineForwarder::new(prefix(12, "stderr", true, false), true);
        assert_eq!(f.feed(b"a\nb"), b"[12]<stderr>: a\n");
        assert_eq!(f.feed(b"\n"), b"[12]<stderr>: b\n");
        assert_eq!(f.feed(b"tail"), b"");
        assert_eq!(f.finish(), b"[12]<stderr>: tail\n");
    }

    #[test]
    fn prepend_rank_is_mpich_style() {
        let mut f = LineForwarder::new(prefix(5, "stdout", false, true), false);
        assert_eq!(f.feed(b"x\n"), b"[5] x\n");
        assert_eq!(prefix(5, "stderr", true, true).unwrap(), "[5]<stderr>: ");
    }

    #[test]
    fn long_lines_are_bounded() {
        let big = vec![b'z'; MAX_HELD + 10];
        let mut alone = LineForwarder::new(None, false);
        assert_eq!(alone.feed(&big).len(), MAX_HELD);
        assert_eq!(alone.finish().len(), 10);
        let mut shared = LineForwarder::new(None, true);
        assert_eq!(shared.feed(&big).len(), MAX_HELD + 1);
        assert_eq!(shared.finish(), b"zzzzzzzzzz\n");
    }
}
