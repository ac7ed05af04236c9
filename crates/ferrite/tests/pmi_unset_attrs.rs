//! A launcher that answers appnum -1 and universe size -1 (as Hydra may): the library then
//! reports neither (MPI_APPNUM and MPI_UNIVERSE_SIZE stay unset, as in MPICH). In a process
//! of its own, since the PMI glue is process-global.

use ferrite::runtime::pmi;
use ferrite_pmi::{LineBuffer, Server};
use std::io::{Read, Write};
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;

#[test]
fn appnum_and_universe_size_of_minus_one_are_unset() {
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    std::thread::spawn(move || {
        let mut server = Server::new("kvs_unset", 1);
        server.add_client(0, Some(0));
        let mut lines = LineBuffer::new();
        let mut buf = [0u8; 512];
        let mut writer = ours.try_clone().unwrap();
        while let Ok(n) = ours.read(&mut buf) {
            if n == 0 {
                return;
            }
            lines.push(&buf[..n]);
            while let Ok(Some(line)) = lines.next_line() {
                let text = String::from_utf8_lossy(&line).into_owned();
                let reply = if text.starts_with("cmd=get_appnum") {
                    "cmd=appnum rc=0 appnum=-1\n".to_string()
                } else if text.starts_with("cmd=get_universe_size") {
                    "cmd=universe_size rc=0 size=-1\n".to_string()
                } else {
                    let out = server.handle_line(0, &line);
                    out.replies
                        .iter()
                        .map(|(_, m)| m.format().unwrap())
                        .collect()
                };
                writer.write_all(reply.as_bytes()).unwrap();
            }
        }
    });
    std::env::remove_var("PMI_PORT");
    std::env::set_var("PMI_FD", theirs.into_raw_fd().to_string());
    std::env::set_var("PMI_RANK", "0");
    std::env::set_var("PMI_SIZE", "1");
    assert_eq!(pmi::init().unwrap(), (0, 1, "kvs_unset".to_string()));
    assert_eq!(pmi::appnum().unwrap(), None);
    assert_eq!(pmi::universe_size().unwrap(), None);
    pmi::finalize().unwrap();
}
