//! A rank for mpirun's integration tests: joins the job with the ferrite-pmi client and
//! does what its first argument says.
//!
//! - `exchange`: put a value, barrier, read the next rank's value, finalize.
//! - `no-finalize`: the last rank inits and exits 0 without finalize; the others wait in
//!   a barrier that can never complete.
//! - `abort`: the last rank aborts with code 7; the others wait in a barrier.
//! - `garbage`: rank 0 sends a line that is not PMI.
//! - `early-exit`: the last rank inits, finalizes and exits while the others enter a
//!   barrier it will never join.
//! - `fail-after-finalize`: every rank finalizes; then the last one exits with code 4 at
//!   once while the others print a line after 500 ms and exit 0.

use ferrite_pmi::Client;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut c = Client::from_env()
        .expect("PMI environment")
        .expect("started by a PMI launcher");
    let info = c.init().expect("PMI init");
    let (rank, size) = (info.rank, info.size);
    let last = rank == size - 1;
    match args.first().map(String::as_str) {
        Some("fail-after-finalize") => {
            // As MPI_Finalize: a barrier first, so every rank has finalized before the last
            // one exits (without it, a slow rank was still running MPI and rightly killed).
            c.barrier().unwrap();
            c.finalize().unwrap();
            if last {
                std::process::exit(4);
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
            println!("rank {rank} finished its work after finalize");
        }
        Some("exchange") => {
            c.put(&format!("card-{rank}"), &format!("hello from {rank}"))
                .unwrap();
            c.barrier().unwrap();
            let peer = (rank + 1) % size;
            let v = c.get(&format!("card-{peer}")).unwrap();
            println!(
                "rank {rank}/{size} appnum {} universe {} kvs {} got {:?} from {peer}",
                info.appnum.map_or(-1, i64::from),
                info.universe_size.map_or(-1, i64::from),
                info.kvsname,
                v
            );
            c.finalize().unwrap();
        }
        Some("no-finalize") => {
            if !last {
                c.barrier().unwrap();
            }
        }
        Some("abort") => {
            if last {
                c.abort(7, &format!("rank {rank} gives up")).unwrap();
                std::thread::sleep(std::time::Duration::from_secs(1000));
            }
            c.barrier().unwrap();
        }
        Some("garbage") => {
            if rank == 0 {
                let line = b"this is not PMI\n";
                // SAFETY: raw_fd is the client's open socket; line is valid for its length.
                let n = unsafe { libc::write(c.raw_fd(), line.as_ptr().cast(), line.len()) };
                assert_eq!(n, line.len() as isize);
            }
            c.barrier().unwrap();
        }
        Some("early-exit") => {
            if last {
                c.finalize().unwrap();
            } else {
                c.barrier().unwrap();
            }
        }
        other => panic!("unknown mode {other:?}"),
    }
}
