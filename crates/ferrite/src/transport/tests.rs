use super::shm::tests::{named_files, shm_exists, unique_job, ShmFiles};
use super::*;

fn drain(net: &mut Net) -> Vec<(Proc, Vec<u8>)> {
    let mut got = Vec::new();
    net.poll(&mut |f, p| got.push((f, p.to_vec())));
    got
}

#[test]
fn transport_list_is_checked() {
    assert_eq!(
        parse_transports(" shm, self ,shm").unwrap(),
        vec!["shm", "self"]
    );
    let err = parse_transports("self,tpc").unwrap_err();
    assert!(
        err.msg.contains("\"tpc\"") && err.msg.contains("known: self, shm"),
        "{}",
        err.msg
    );
    assert!(parse_transports(" , ").is_err());
    assert!(Net::init_with(0, 1, "x", "self,bogus").is_err());
}

#[test]
fn a_single_process_uses_self_and_creates_no_segment() {
    let job = unique_job("one");
    let _files = ShmFiles(job.clone());
    let mut net = Net::init_with(0, 1, &job, "self,shm").unwrap();
    assert!(!shm_exists(&job, 0));
    assert!(net.max_packet(0) > 0);
    assert!(net.try_send(0, &[b"ab", b"c"]).unwrap());
    assert!(net.try_send(0, &[b"d"]).unwrap());
    net.block(60_000); // a queued packet: must not sleep
    assert_eq!(net.stats().blocks, 0);
    assert_eq!(
        drain(&mut net),
        vec![(0, b"abc".to_vec()), (0, b"d".to_vec())]
    );
    let src = [7u8; 100];
    let mut dst = [0u8; 100];
    assert!(net.read_remote(0, src.as_ptr() as u64, &mut dst).unwrap());
    assert_eq!(src, dst);
    let err = net.try_send(1, &[b"x"]).unwrap_err();
    assert!(err.msg.contains("rank 1"), "{}", err.msg);
    assert_eq!(net.max_packet(1), 0);
}

#[test]
fn a_peer_no_allowed_transport_reaches_is_an_error_naming_it() {
    let job = unique_job("none");
    let _files = ShmFiles(job.clone());
    let mut net = Net::init_with(0, 1, &job, "shm").unwrap();
    let err = net.try_send(0, &[b"x"]).unwrap_err();
    assert_eq!(err.kind, super::Kind::Other);
    assert!(
        err.msg.contains("no transport reaches rank 0"),
        "{}",
        err.msg
    );
    let mut net = Net::init_with(0, 2, &job, "self").unwrap();
    let err = net.try_send(1, &[b"x"]).unwrap_err();
    assert!(
        err.msg.contains("rank 1") && err.msg.contains("\"self\""),
        "{}",
        err.msg
    );
}

#[test]
fn ranks_in_one_process_talk_over_shm_through_unnamed_segments() {
    let job = unique_job("net");
    let _files = ShmFiles(job.clone());
    let mut a = Net::init_with(0, 2, &job, "self,shm").unwrap();
    let mut b = Net::init_with(1, 2, &job, "shm").unwrap();
    assert!(shm_exists(&job, 0) && shm_exists(&job, 1));
    assert!(a.try_send(1, &[b"to b"]).unwrap());
    assert!(a.try_send(0, &[b"to a"]).unwrap());
    // Without `self`, a process reaches itself through its own queue.
    assert!(b.try_send(1, &[b"b to b"]).unwrap());
    assert!(b.try_send(0, &[b"from b"]).unwrap());
    assert_eq!(
        drain(&mut a),
        vec![(0, b"to a".to_vec()), (1, b"from b".to_vec())]
    );
    assert_eq!(
        drain(&mut b),
        vec![(0, b"to b".to_vec()), (1, b"b to b".to_vec())]
    );
    let names: Vec<_> = a.stats().transports.iter().map(|t| t.0).collect();
    assert_eq!(names, vec!["self", "shm"]);
    let shm = a.stats().transports[1].1;
    assert_eq!(
        (shm.packets_sent, shm.bytes_sent, shm.segments_mapped),
        (1, 4, 1)
    );
    assert!(named_files(&job).is_empty());
    a.shutdown();
    // Mapped peers still reach a segment after its owner shut down.
    assert!(b.try_send(0, &[b"late"]).unwrap());
    assert_eq!(drain(&mut a), vec![(1, b"late".to_vec())]);
}

/// A job on two hosts (ranks 0, 1 on node 0; rank 2 alone on node 1), all allowed: peers on
/// the same host go through shm, the others through tcp; a rank alone on its host makes no
/// segment, and with shm only, a peer on another host is an error naming it.
#[test]
fn peers_on_other_hosts_go_through_tcp_and_the_others_through_shm() {
    let job = format!("tcptest-{}", unique_job("hosts"));
    let _files = ShmFiles(job.clone());
    let map = || nodes::NodeMap::parse("(vector,(0,1,2),(1,1,1))");
    let all = "self,shm,tcp";
    let mut nets: Vec<Net> = (0..3)
        .map(|r| Net::init_with_nodes(r, 3, &job, all, map()).unwrap())
        .collect();
    let names = |n: &Net| n.stats().transports.iter().map(|t| t.0).collect::<Vec<_>>();
    assert_eq!(names(&nets[0]), ["self", "shm", "tcp"]);
    assert_eq!(names(&nets[2]), ["self", "tcp"]);
    assert!(shm_exists(&job, 0) && shm_exists(&job, 1) && !shm_exists(&job, 2));
    assert!(nets[0].try_send(1, &[b"0 to 1"]).unwrap());
    assert!(nets[0].try_send(2, &[b"0 to 2"]).unwrap());
    assert!(nets[2].try_send(1, &[b"2 to 1"]).unwrap());
    let mut got: Vec<Vec<(Proc, Vec<u8>)>> = vec![Vec::new(); 3];
    for _ in 0..100_000 {
        if got[1].len() == 2 && got[2].len() == 1 {
            break;
        }
        for (r, net) in nets.iter_mut().enumerate() {
            net.poll(&mut |f, p| got[r].push((f, p.to_vec())));
        }
    }
    got[1].sort();
    assert_eq!(got[1], [(0, b"0 to 1".to_vec()), (2, b"2 to 1".to_vec())]);
    assert_eq!(got[2], [(0, b"0 to 2".to_vec())]);
    let sent = |n: &Net, t: &str| {
        n.stats()
            .transports
            .iter()
            .find(|x| x.0 == t)
            .map_or(0, |x| x.1.packets_sent)
    };
    assert_eq!((sent(&nets[0], "shm"), sent(&nets[0], "tcp")), (1, 1));
    assert_eq!(sent(&nets[2], "tcp"), 1);
    for n in &mut nets {
        n.shutdown();
    }
    drop(nets);

    let job = unique_job("hosts-shm-only");
    let _files = ShmFiles(job.clone());
    let mut net = Net::init_with_nodes(0, 3, &job, "self,shm", map()).unwrap();
    let err = net.try_send(2, &[b"x"]).unwrap_err();
    assert!(
        err.msg.contains("rank 2 runs on another host") && err.msg.contains("add tcp"),
        "{}",
        err.msg
    );
}

#[test]
fn a_job_on_one_host_creates_no_tcp_endpoint_by_default() {
    let job = unique_job("one-host");
    let _files = ShmFiles(job.clone());
    let one = nodes::NodeMap::parse("(vector,(0,1,2))");
    let net = Net::init_with_nodes(0, 2, &job, "self,shm,tcp", one).unwrap();
    let names: Vec<_> = net.stats().transports.iter().map(|t| t.0).collect();
    assert_eq!(names, ["self", "shm"]);
    let net = Net::init_with(1, 2, &job, "self,shm,tcp").unwrap();
    let names: Vec<_> = net.stats().transports.iter().map(|t| t.0).collect();
    assert_eq!(names, ["self", "shm"]);
}
