//! The blocking client against the server state machine, over real sockets: socketpairs
//! (the PMI_FD form) and TCP (the PMI_PORT form), one thread per connection.

use ferrite_pmi::{Client, Event, LineBuffer, Server};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread;

type Writers = Arc<Mutex<HashMap<usize, Box<dyn Write + Send>>>>;

/// Serves one connection until it closes; returns the events it caused.
fn serve(
    server: Arc<Mutex<Server>>,
    writers: Writers,
    id: usize,
    mut conn: impl Read,
) -> Vec<Event> {
    let mut events = Vec::new();
    let mut lines = LineBuffer::new();
    let mut buf = [0u8; 512];
    loop {
        let n = conn.read(&mut buf).unwrap_or(0);
        if n == 0 {
            return events;
        }
        lines.push(&buf[..n]);
        while let Some(line) = lines.next_line().expect("line within bounds") {
            let out = server.lock().unwrap().handle_line(id, &line);
            let mut w = writers.lock().unwrap();
            for (to, m) in out.replies {
                let s = m.format().unwrap();
                w.get_mut(&to).unwrap().write_all(s.as_bytes()).unwrap();
            }
            events.extend(out.events);
        }
    }
}

fn exchange(c: &mut Client) -> Vec<String> {
    let info = c.init().unwrap();
    c.put(
        &format!("card-{}", info.rank),
        &format!("rank {} here", info.rank),
    )
    .unwrap();
    c.barrier().unwrap();
    let got = (0..info.size)
        .map(|r| c.get(&format!("card-{r}")).unwrap().unwrap())
        .collect();
    assert_eq!(c.get("never-put").unwrap(), None);
    c.finalize().unwrap();
    got
}

#[test]
fn socketpair_clients_exchange_cards() {
    let n = 5u32;
    let server = Arc::new(Mutex::new(Server::new("kvs_test_1", n)));
    let writers: Writers = Arc::default();
    let mut handles = Vec::new();
    let mut serving = Vec::new();
    for r in 0..n {
        let (ours, theirs) = UnixStream::pair().unwrap();
        server.lock().unwrap().add_client(r as usize, Some(r));
        writers
            .lock()
            .unwrap()
            .insert(r as usize, Box::new(ours.try_clone().unwrap()));
        let (s, w) = (server.clone(), writers.clone());
        serving.push(thread::spawn(move || serve(s, w, r as usize, ours)));
        handles.push(thread::spawn(move || {
            let mut c = Client::with_fd(theirs.into(), r, n).unwrap();
            let got = exchange(&mut c);
            assert_eq!(c.info().unwrap().kvsname, "kvs_test_1");
            assert_eq!(c.info().unwrap().universe_size, Some(n));
            got
        }));
    }
    for h in handles {
        let got = h.join().unwrap();
        let want: Vec<String> = (0..n).map(|r| format!("rank {r} here")).collect();
        assert_eq!(got, want);
    }
    writers.lock().unwrap().clear();
    let mut finalized = 0;
    for s in serving {
        let ev = s.join().unwrap();
        finalized += ev
            .iter()
            .filter(|e| matches!(e, Event::Finalized { .. }))
            .count();
    }
    assert_eq!(finalized, n as usize);
}

#[test]
fn port_clients_learn_rank_from_initack() {
    let n = 3u32;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = Arc::new(Mutex::new(Server::new("kvs_port", n)));
    let writers: Writers = Arc::default();
    let (s, w) = (server.clone(), writers.clone());
    let acceptor = thread::spawn(move || {
        let mut serving = Vec::new();
        for id in 0..n as usize {
            let (conn, _) = listener.accept().unwrap();
            s.lock().unwrap().add_client(id, None);
            w.lock()
                .unwrap()
                .insert(id, Box::new(conn.try_clone().unwrap()));
            let (s, w) = (s.clone(), w.clone());
            serving.push(thread::spawn(move || serve(s, w, id, conn)));
        }
        serving
    });
    let clients: Vec<_> = (0..n)
        .map(|pmiid| {
            let addr = addr.clone();
            thread::spawn(move || {
                let mut c = Client::connect_port(&addr, pmiid).unwrap();
                assert_eq!((c.rank(), c.size()), (pmiid, n));
                exchange(&mut c)
            })
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap().len(), n as usize);
    }
    writers.lock().unwrap().clear();
    for s in acceptor.join().unwrap() {
        s.join().unwrap();
    }
}

#[test]
fn abort_reaches_the_server_with_its_message() {
    let server = Arc::new(Mutex::new(Server::new("kvs_abort", 1)));
    let writers: Writers = Arc::default();
    let (ours, theirs) = UnixStream::pair().unwrap();
    server.lock().unwrap().add_client(0, Some(0));
    writers
        .lock()
        .unwrap()
        .insert(0, Box::new(ours.try_clone().unwrap()));
    let (s, w) = (server.clone(), writers.clone());
    let serving = thread::spawn(move || serve(s, w, 0, ours));
    let mut c = Client::with_fd(theirs.into(), 0, 1).unwrap();
    c.init().unwrap();
    c.abort(42, "rank 0: it went\nwrong").unwrap();
    drop(c);
    writers.lock().unwrap().clear();
    let events = serving.join().unwrap();
    assert_eq!(
        events.last(),
        Some(&Event::Abort {
            rank: Some(0),
            code: 42,
            message: "rank 0: it went wrong".into()
        })
    );
}
