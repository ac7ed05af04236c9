//! Business cards: each process publishes the address of its listening socket under
//! `tcp-<rank>` (and of its datagram socket under `udp-<rank>`) through PMI during MPI_Init; a
//! peer's card is fetched only when this process first contacts it, so MPI_Init's work does
//! not grow with the job size.
//!
//! Tests run several endpoints in one process, where PMI is a single singleton KVS; for jobs
//! named `tcptest-*` or `udptest-*` the board is an in-process map keyed by job (test builds
//! only).

use crate::runtime::pmi;
use crate::terr;
use crate::transport::error::TResult;
use std::net::SocketAddr;

/// Where cards and the job secret are found.
pub trait Board: Send {
    /// Publishes `rank`'s address for the socket kind `name` (`tcp`, `udp`).
    fn put_card(&mut self, name: &str, rank: u32, addr: SocketAddr) -> TResult<()>;
    fn get_card(&mut self, name: &str, rank: u32) -> TResult<Option<SocketAddr>>;
    /// The tcp listener's card.
    fn put(&mut self, rank: u32, addr: SocketAddr) -> TResult<()> {
        self.put_card("tcp", rank, addr)
    }
    fn get(&mut self, rank: u32) -> TResult<Option<SocketAddr>> {
        self.get_card("tcp", rank)
    }
    /// The job secret as the 64-bit value hellos carry.
    fn secret(&mut self) -> TResult<u64>;
}

fn key(name: &str, rank: u32) -> String {
    format!("{name}-{rank}")
}

fn parse(name: &str, rank: u32, card: &str) -> TResult<SocketAddr> {
    card.parse().map_err(|_| {
        terr!(
            Protocol,
            "{name} transport: the business card of rank {rank} is {card:?}, not an ip:port \
             address"
        )
    })
}

/// Folds the job secret (hex, from PMI) into the 64 bits a hello carries.
pub fn secret_u64(hex: &str) -> u64 {
    // FNV-1a over the whole string: any secret, any length, maps to 64 bits.
    hex.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// The launcher's (or the singleton's) key-value space.
pub struct PmiBoard;

impl Board for PmiBoard {
    fn put_card(&mut self, name: &str, rank: u32, addr: SocketAddr) -> TResult<()> {
        Ok(pmi::put(&key(name, rank), &addr.to_string())?)
    }

    fn get_card(&mut self, name: &str, rank: u32) -> TResult<Option<SocketAddr>> {
        pmi::get(&key(name, rank))?
            .map(|c| parse(name, rank, &c))
            .transpose()
    }

    fn secret(&mut self) -> TResult<u64> {
        Ok(secret_u64(pmi::job_secret()?))
    }
}

/// The board for a job: PMI, or in tests the in-process one for `tcptest-*`/`udptest-*` jobs.
pub fn board_for(job: &str) -> Box<dyn Board> {
    #[cfg(test)]
    if job.starts_with("tcptest-") || job.starts_with("udptest-") {
        return Box::new(test_board::TestBoard(job.to_string()));
    }
    let _ = job;
    Box::new(PmiBoard)
}

#[cfg(test)]
pub mod test_board {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    static CARDS: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

    /// Cards of every test job in this test process; the secret is derived from the job.
    pub struct TestBoard(pub String);

    /// The secret every endpoint of `job` uses.
    pub fn secret_of(job: &str) -> u64 {
        secret_u64(&format!("secret of {job}"))
    }

    impl Board for TestBoard {
        fn put_card(&mut self, name: &str, rank: u32, addr: SocketAddr) -> TResult<()> {
            let mut g = CARDS.lock().unwrap_or_else(|e| e.into_inner());
            g.get_or_insert_with(HashMap::new)
                .insert(format!("{}/{}", self.0, key(name, rank)), addr.to_string());
            Ok(())
        }

        fn get_card(&mut self, name: &str, rank: u32) -> TResult<Option<SocketAddr>> {
            let g = CARDS.lock().unwrap_or_else(|e| e.into_inner());
            g.as_ref()
                .and_then(|m| m.get(&format!("{}/{}", self.0, key(name, rank))))
                .map(|c| parse(name, rank, c))
                .transpose()
        }

        fn secret(&mut self) -> TResult<u64> {
            Ok(secret_of(&self.0))
        }
    }
}
