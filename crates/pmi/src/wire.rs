//! The PMI-1 line codec: one message per line, `cmd=NAME key=value key=value ...\n`.
//!
//! Keys are `[A-Za-z0-9_/-]+`. A value runs to the next space; a backslash escapes the next
//! byte, so values may hold spaces (`hello\ world`) as MPICH's codec reads them. Lines are
//! bounded by [`MAX_LINE`]; anything else is a [`WireError`], never a panic.

use std::fmt;

/// The longest line (including its newline) either side accepts.
pub const MAX_LINE: usize = 4096;

/// A parsed message: the command and its arguments in wire order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub cmd: String,
    pub args: Vec<(String, String)>,
}

/// Why a line is not a valid PMI-1 message (or a message cannot be written as one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    TooLong(usize),
    NotUtf8,
    NoCmd,
    BadKey(String),
    BadValue { key: String, why: &'static str },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::TooLong(n) => write!(f, "line of {n} bytes exceeds the limit of {MAX_LINE}"),
            WireError::NotUtf8 => write!(f, "line is not valid UTF-8"),
            WireError::NoCmd => write!(f, "line does not start with cmd=<name>"),
            WireError::BadKey(k) => write!(f, "invalid key {k:?}"),
            WireError::BadValue { key, why } => write!(f, "invalid value for {key}: {why}"),
        }
    }
}

impl std::error::Error for WireError {}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'/')
}

impl Message {
    pub fn new(cmd: &str) -> Self {
        Message {
            cmd: cmd.into(),
            args: Vec::new(),
        }
    }

    /// Builder: appends `key=value`.
    pub fn arg(mut self, key: &str, value: impl fmt::Display) -> Self {
        self.args.push((key.into(), value.to_string()));
        self
    }

    /// The first value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `key` parsed as an integer; `None` if absent or not a number.
    pub fn get_int(&self, key: &str) -> Option<i64> {
        self.get(key)
            .and_then(|v| v.trim_start_matches('+').parse().ok())
    }

    /// The `rc` of a response (absent means success, as the protocol allows).
    pub fn rc(&self) -> i64 {
        self.get_int("rc").unwrap_or(0)
    }

    /// Parses one line, with or without its trailing newline.
    pub fn parse(line: &[u8]) -> Result<Message, WireError> {
        if line.len() > MAX_LINE {
            return Err(WireError::TooLong(line.len()));
        }
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = std::str::from_utf8(line).map_err(|_| WireError::NotUtf8)?;
        let b = line.as_bytes();
        let mut i = 0;
        let mut cmd = None;
        let mut args = Vec::new();
        loop {
            while i < b.len() && b[i] == b' ' {
                i += 1;
            }
            if i == b.len() {
                break;
            }
            let kstart = i;
            while i < b.len() && is_key_byte(b[i]) {
                i += 1;
            }
            let key = &line[kstart..i];
            if key.is_empty() || (i < b.len() && b[i] != b'=' && b[i] != b' ') {
                let end = line[kstart..].find(' ').map_or(line.len(), |e| kstart + e);
                return Err(WireError::BadKey(line[kstart..end].into()));
            }
            let mut value = String::new();
            if i < b.len() && b[i] == b'=' {
                i += 1;
                while i < b.len() && b[i] != b' ' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        i += 1;
                    }
                    // Copy one whole UTF-8 character.
                    let ch = line[i..].chars().next().unwrap_or(' ');
                    value.push(ch);
                    i += ch.len_utf8();
                }
            }
            if cmd.is_none() {
                if key != "cmd" || value.is_empty() {
                    return Err(WireError::NoCmd);
                }
                cmd = Some(value);
            } else {
                args.push((key.to_string(), value));
            }
        }
        Ok(Message {
            cmd: cmd.ok_or(WireError::NoCmd)?,
            args,
        })
    }

    /// The wire form, newline included. Spaces and backslashes in values are escaped;
    /// control characters (a newline would end the line) are refused.
    pub fn format(&self) -> Result<String, WireError> {
        let mut out = String::with_capacity(64);
        out.push_str("cmd=");
        push_value(&mut out, "cmd", &self.cmd)?;
        for (k, v) in &self.args {
            if k.is_empty() || !k.bytes().all(is_key_byte) {
                return Err(WireError::BadKey(k.clone()));
            }
            out.push(' ');
            out.push_str(k);
            out.push('=');
            push_value(&mut out, k, v)?;
        }
        out.push('\n');
        if out.len() > MAX_LINE {
            return Err(WireError::TooLong(out.len()));
        }
        Ok(out)
    }
}

fn push_value(out: &mut String, key: &str, v: &str) -> Result<(), WireError> {
    for ch in v.chars() {
        if ch.is_control() {
            return Err(WireError::BadValue {
                key: key.into(),
                why: "contains a control character",
            });
        }
        if ch == ' ' || ch == '\\' {
            out.push('\\');
        }
        out.push(ch);
    }
    Ok(())
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.format() {
            Ok(s) => f.write_str(s.trim_end_matches('\n')),
            Err(_) => write!(f, "cmd={} {:?}", self.cmd, self.args),
        }
    }
}

/// Splits a byte stream into lines, refusing any line longer than [`MAX_LINE`].
#[derive(Default, Debug)]
pub struct LineBuffer {
    buf: Vec<u8>,
}

impl LineBuffer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete line (without its newline), `Ok(None)` if none is complete yet.
    pub fn next_line(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        match self.buf.iter().position(|&b| b == b'\n') {
            Some(n) if n < MAX_LINE => {
                let mut line: Vec<u8> = self.buf.drain(..=n).collect();
                line.pop();
                Ok(Some(line))
            }
            Some(n) => Err(WireError::TooLong(n + 1)),
            None if self.buf.len() >= MAX_LINE => Err(WireError::TooLong(self.buf.len())),
            None => Ok(None),
        }
    }

    /// Bytes received after the last complete line.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_request() {
        let m = Message::parse(b"cmd=put kvsname=kvs_1 key=k value=v1\n").unwrap();
        assert_eq!(m.cmd, "put");
        assert_eq!(m.get("kvsname"), Some("kvs_1"));
        assert_eq!(m.get("key"), Some("k"));
        assert_eq!(m.get("value"), Some("v1"));
        assert_eq!(m.get("missing"), None);
    }

    #[test]
    fn tolerates_extra_spaces_and_crlf_and_bare_keys() {
        let m = Message::parse(b"  cmd=barrier_in   flag  x=1 \r\n").unwrap();
        assert_eq!(m.cmd, "barrier_in");
        assert_eq!(
            m.args,
            vec![("flag".into(), "".into()), ("x".into(), "1".into())]
        );
    }

    #[test]
    fn values_may_hold_equals_signs_and_escaped_spaces() {
        let m = Message::parse(br"cmd=put key=a value=x=y\ z\\w").unwrap();
        assert_eq!(m.get("value"), Some(r"x=y z\w"));
    }

    #[test]
    fn format_round_trips_spaces_backslashes_and_empty_values() {
        let m = Message::new("abort")
            .arg("exitcode", -3)
            .arg("message", r"rank 2: bad \ thing")
            .arg("empty", "");
        let line = m.format().unwrap();
        assert_eq!(
            line,
            "cmd=abort exitcode=-3 message=rank\\ 2:\\ bad\\ \\\\\\ thing empty=\n"
        );
        assert_eq!(Message::parse(line.as_bytes()).unwrap(), m);
        assert_eq!(m.get_int("exitcode"), Some(-3));
    }

    #[test]
    fn malformed_lines_are_errors() {
        assert_eq!(Message::parse(b""), Err(WireError::NoCmd));
        assert_eq!(Message::parse(b"   \n"), Err(WireError::NoCmd));
        assert_eq!(Message::parse(b"key=v cmd=put"), Err(WireError::NoCmd));
        assert_eq!(Message::parse(b"cmd="), Err(WireError::NoCmd));
        assert_eq!(
            Message::parse(b"cmd=put =v"),
            Err(WireError::BadKey("=v".into()))
        );
        assert_eq!(
            Message::parse(b"cmd=put k!y=v"),
            Err(WireError::BadKey("k!y=v".into()))
        );
        assert_eq!(Message::parse(b"cmd=put k=\xff"), Err(WireError::NotUtf8));
        let long = vec![b'a'; MAX_LINE + 1];
        assert_eq!(Message::parse(&long), Err(WireError::TooLong(MAX_LINE + 1)));
        // A trailing lone backslash is kept, not an out-of-bounds read.
        assert_eq!(
            Message::parse(br"cmd=x v=a\").unwrap().get("v"),
            Some(r"a\")
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic fuzz: every prefix of mixed garbage, and byte soup.
        let seeds: [&[u8]; 4] = [
            b"cmd=put kvsname=a key=b value=c\\",
            b"cmd=\\ \\\\==  = =x \xe2\x82\xac\\\xe2\x82\xac",
            b"\0\n\r\t cmd=get",
            b"cmd=get key=\xc3",
        ];
        for s in seeds {
            for n in 0..=s.len() {
                let _ = Message::parse(&s[..n]);
            }
        }
        let mut x: u32 = 12345;
        for _ in 0..2000 {
            let mut line = b"cmd=".to_vec();
            for _ in 0..(x % 40) {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                let soup = b" =\\ab\xc3\xa9\n";
                line.push(soup[(x >> 16) as usize % soup.len()]);
            }
            let _ = Message::parse(&line);
        }
    }

    #[test]
    fn format_refuses_what_cannot_be_sent() {
        let e = Message::new("put").arg("value", "a\nb").format();
        assert!(matches!(e, Err(WireError::BadValue { .. })), "{e:?}");
        let e = Message::new("put").arg("bad key", "v").format();
        assert_eq!(e, Err(WireError::BadKey("bad key".into())));
        let e = Message::new("put")
            .arg("value", "x".repeat(MAX_LINE))
            .format();
        assert!(matches!(e, Err(WireError::TooLong(_))), "{e:?}");
    }

    #[test]
    fn line_buffer_splits_and_bounds() {
        let mut lb = LineBuffer::new();
        lb.push(b"cmd=a\ncmd=");
        assert_eq!(lb.next_line().unwrap(), Some(b"cmd=a".to_vec()));
        assert_eq!(lb.next_line().unwrap(), None);
        lb.push(b"b\n");
        assert_eq!(lb.next_line().unwrap(), Some(b"cmd=b".to_vec()));
        assert_eq!(lb.pending(), 0);
        lb.push(&vec![b'x'; MAX_LINE]);
        assert_eq!(lb.next_line(), Err(WireError::TooLong(MAX_LINE)));
    }
}
