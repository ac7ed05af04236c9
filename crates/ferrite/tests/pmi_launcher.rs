//! The library's PMI glue (runtime::pmi) against a real PMI-1 server over PMI_FD, in a
//! process of its own (the glue is process-global).

use ferrite::runtime::pmi;
use ferrite_pmi::{Event, LineBuffer, Server};
use std::io::{Read, Write};
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn the_library_joins_a_launcher_job_through_pmi_fd() {
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    let (tx, events) = mpsc::channel();
    std::thread::spawn(move || {
        let mut server = Server::new("kvs_lib_test", 1);
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
                let out = server.handle_line(0, &line);
                for (_, m) in out.replies {
                    writer.write_all(m.format().unwrap().as_bytes()).unwrap();
                }
                for e in out.events {
                    tx.send(e).unwrap();
                }
            }
        }
    });
    std::env::remove_var("PMI_PORT");
    std::env::set_var("PMI_FD", theirs.into_raw_fd().to_string());
    std::env::set_var("PMI_RANK", "0");
    std::env::set_var("PMI_SIZE", "1");

    assert_eq!(pmi::init().unwrap(), (0, 1, "kvs_lib_test".to_string()));
    assert_eq!(pmi::appnum().unwrap(), Some(0));
    assert_eq!(pmi::universe_size().unwrap(), Some(1));
    pmi::put("card", "tcp://10.0.0.1:5000 shm").unwrap();
    pmi::barrier().unwrap();
    assert_eq!(
        pmi::get("card").unwrap().as_deref(),
        Some("tcp://10.0.0.1:5000 shm")
    );
    assert_eq!(pmi::get("missing").unwrap(), None);
    let too_long = "v".repeat(5000);
    let e = pmi::put("big", &too_long).unwrap_err();
    assert!(e.0.contains("exceeds the launcher's limits"), "{}", e.0);
    pmi::finalize().unwrap();
    pmi::abort(5, "rank 0 is done\nfor good");

    let mut seen = Vec::new();
    while !matches!(seen.last(), Some(Event::Abort { .. })) {
        seen.push(events.recv_timeout(Duration::from_secs(10)).unwrap());
    }
    assert_eq!(
        seen,
        [
            Event::Initialized { rank: 0 },
            Event::BarrierReleased { round: 0 },
            Event::Finalized { rank: 0 },
            Event::Abort {
                rank: Some(0),
                code: 5,
                message: "rank 0 is done for good".into()
            }
        ]
    );
}
