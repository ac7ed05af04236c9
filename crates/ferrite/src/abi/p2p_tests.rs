//! The chapter 3 entry points in one process: messages are injected as arrived packets
//! (the transports are not needed), everything else goes through the PMPI_ functions.

use super::super::request::*;
use super::super::types::MPI_Status;
use super::*;
use crate::error::class_of;
use crate::p2p::packet::{Header, Kind};
use std::ptr::{null, null_mut};

const IGNORE: *mut MPI_Status = std::ptr::without_provenance_mut(1);

/// A message from world rank 0 (this process) on MPI_COMM_WORLD arrives.
fn arrive(tag: i32, data: &[u8]) {
    let h = Header {
        kind: Kind::Eager,
        context: 0,
        src: 0,
        tag,
        len: data.len() as u64,
        sreq: 0,
        rreq: 0,
        arg: 0,
    };
    let mut pkt = h.encode().to_vec();
    pkt.extend_from_slice(data);
    state::with(|st| {
        st.p2p.on_packet(0, &pkt);
        Ok(())
    })
    .unwrap();
}

fn ints(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn class(rc: c_int) -> c_int {
    class_of(rc)
}

#[test]
fn receives_probes_and_statuses() {
    let _g = state::for_tests();
    // SAFETY: (whole test) every pointer passed is a live local of the right type.
    unsafe {
        // Irecv posted first, then the message.
        let mut buf = [0i32; 4];
        let mut req = MPI_REQUEST_NULL;
        let rc = PMPI_Irecv(
            buf.as_mut_ptr().cast(),
            4,
            MPI_INT,
            0,
            7,
            MPI_COMM_WORLD,
            &mut req,
        );
        assert_eq!(rc, MPI_SUCCESS);
        let mut flag = 1;
        let mut st = MPI_Status::default();
        assert_eq!(PMPI_Test(&mut req, &mut flag, &mut st), MPI_SUCCESS);
        assert_eq!(flag, 0, "nothing arrived yet");
        arrive(7, &ints(&[1, 2, 3]));
        assert_eq!(PMPI_Wait(&mut req, &mut st), MPI_SUCCESS);
        assert_eq!(req, MPI_REQUEST_NULL);
        assert_eq!((st.MPI_SOURCE, st.MPI_TAG), (0, 7));
        let mut n = 0;
        PMPI_Get_count(&st, MPI_INT, &mut n);
        assert_eq!(n, 3);
        PMPI_Get_count(&st, MPI_BYTE, &mut n);
        assert_eq!(n, 12);
        assert_eq!(buf, [1, 2, 3, 0]);

        // Probe then receive the same message; Mprobe takes a message out of matching.
        arrive(1, &ints(&[10]));
        arrive(2, &ints(&[20, 21]));
        let mut flag = 0;
        PMPI_Iprobe(
            MPI_ANY_SOURCE,
            MPI_ANY_TAG,
            MPI_COMM_WORLD,
            &mut flag,
            &mut st,
        );
        assert_eq!((flag, st.MPI_TAG), (1, 1));
        let mut msg = MPI_MESSAGE_NULL;
        assert_eq!(
            PMPI_Mprobe(0, 2, MPI_COMM_WORLD, &mut msg, &mut st),
            MPI_SUCCESS
        );
        PMPI_Get_count(&st, MPI_INT, &mut n);
        assert_eq!(n, 2);
        let mut b2 = [0i32; 2];
        PMPI_Iprobe(0, 2, MPI_COMM_WORLD, &mut flag, IGNORE);
        assert_eq!(flag, 0, "a matched message is not seen by probes");
        assert_eq!(
            PMPI_Mrecv(b2.as_mut_ptr().cast(), 2, MPI_INT, &mut msg, &mut st),
            0
        );
        assert_eq!((b2, msg), ([20, 21], MPI_MESSAGE_NULL));
        let mut b1 = [0i32; 1];
        PMPI_Recv(
            b1.as_mut_ptr().cast(),
            1,
            MPI_INT,
            MPI_ANY_SOURCE,
            MPI_ANY_TAG,
            MPI_COMM_WORLD,
            &mut st,
        );
        assert_eq!((b1[0], st.MPI_TAG), (10, 1));

        // Truncation: error code, status, nothing past the buffer.
        arrive(3, &ints(&[5, 6, 7]));
        let mut big = [-1i32; 3];
        let rc = PMPI_Recv(
            big.as_mut_ptr().cast(),
            2,
            MPI_INT,
            0,
            3,
            MPI_COMM_WORLD,
            &mut st,
        );
        assert_eq!(class(rc), MPI_ERR_TRUNCATE);
        assert_eq!(class(st.MPI_ERROR), MPI_ERR_TRUNCATE);
        assert_eq!(big, [5, 6, -1]);
        PMPI_Get_count(&st, MPI_INT, &mut n);
        assert_eq!(n, 2);

        // Elements and status setters.
        let mut x: MPI_Count = 0;
        PMPI_Status_set_elements(&mut st, MPI_INT, 5);
        PMPI_Get_elements_x(&st, MPI_BYTE, &mut x);
        assert_eq!(x, 20);
        PMPI_Status_set_elements_x(&mut st, MPI_BYTE, 6);
        PMPI_Get_elements(&st, MPI_INT, &mut n);
        assert_eq!(n, MPI_UNDEFINED, "6 bytes are not whole ints");
        PMPI_Status_set_cancelled(&mut st, 1);
        PMPI_Test_cancelled(&st, &mut flag);
        assert_eq!(flag, 1);
    }
}

#[test]
fn proc_null_everywhere() {
    let _g = state::for_tests();
    // SAFETY: (whole test) every pointer passed is a live local of the right type.
    unsafe {
        let mut st = MPI_Status::default();
        let mut b = [0i32; 1];
        assert_eq!(
            PMPI_Send(
                b.as_ptr().cast(),
                1,
                MPI_INT,
                MPI_PROC_NULL,
                0,
                MPI_COMM_WORLD
            ),
            0
        );
        assert_eq!(
            PMPI_Ssend(
                b.as_ptr().cast(),
                1,
                MPI_INT,
                MPI_PROC_NULL,
                0,
                MPI_COMM_WORLD
            ),
            0
        );
        PMPI_Recv(
            b.as_mut_ptr().cast(),
            1,
            MPI_INT,
            MPI_PROC_NULL,
            4,
            MPI_COMM_WORLD,
            &mut st,
        );
        assert_eq!((st.MPI_SOURCE, st.MPI_TAG), (MPI_PROC_NULL, MPI_ANY_TAG));
        let mut n = -1;
        PMPI_Get_count(&st, MPI_INT, &mut n);
        assert_eq!(n, 0);
        let mut flag = 0;
        PMPI_Iprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &mut flag, &mut st);
        assert_eq!((flag, st.MPI_SOURCE), (1, MPI_PROC_NULL));
        let mut msg = MPI_MESSAGE_NULL;
        PMPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &mut msg, &mut st);
        assert_eq!(msg, MPI_MESSAGE_NO_PROC);
        st.MPI_SOURCE = 99;
        assert_eq!(
            PMPI_Mrecv(b.as_mut_ptr().cast(), 1, MPI_INT, &mut msg, &mut st),
            0
        );
        assert_eq!((st.MPI_SOURCE, msg), (MPI_PROC_NULL, MPI_MESSAGE_NULL));
        let mut st2 = MPI_Status::default();
        let rc = PMPI_Sendrecv(
            b.as_ptr().cast(),
            1,
            MPI_INT,
            MPI_PROC_NULL,
            1,
            b.as_mut_ptr().cast(),
            1,
            MPI_INT,
            MPI_PROC_NULL,
            1,
            MPI_COMM_WORLD,
            &mut st2,
        );
        assert_eq!((rc, st2.MPI_SOURCE), (0, MPI_PROC_NULL));
    }
}

#[test]
fn argument_errors_have_the_right_class() {
    let _g = state::for_tests();
    // SAFETY: (whole test) every pointer passed is a live local of the right type.
    unsafe {
        let b = [0i32; 2];
        let p = b.as_ptr().cast();
        let w = MPI_COMM_WORLD;
        assert_eq!(class(PMPI_Send(p, 1, MPI_INT, 1, 0, w)), MPI_ERR_RANK);
        assert_eq!(
            class(PMPI_Send(p, 1, MPI_INT, MPI_ANY_SOURCE, 0, w)),
            MPI_ERR_RANK
        );
        assert_eq!(class(PMPI_Send(p, 1, MPI_INT, 0, -3, w)), MPI_ERR_TAG);
        assert_eq!(
            class(PMPI_Send(p, 1, MPI_INT, 0, MPI_ANY_TAG, w)),
            MPI_ERR_TAG
        );
        assert_eq!(class(PMPI_Send(p, -1, MPI_INT, 0, 0, w)), MPI_ERR_COUNT);
        assert_eq!(class(PMPI_Send(p, 1, 0x0c000000, 0, 0, w)), MPI_ERR_TYPE);
        assert_eq!(
            class(PMPI_Send(p, 1, MPI_INT, 0, 0, MPI_COMM_NULL)),
            MPI_ERR_COMM
        );
        assert_eq!(
            class(PMPI_Send(null(), 1, MPI_INT, 0, 0, w)),
            MPI_ERR_BUFFER
        );
        let mut st = MPI_Status::default();
        let q = b.as_ptr() as *mut c_void;
        assert_eq!(
            class(PMPI_Recv(q, 1, MPI_INT, 3, 0, w, &mut st)),
            MPI_ERR_RANK
        );
        assert_eq!(
            class(PMPI_Recv(q, 1, MPI_INT, 0, -7, w, &mut st)),
            MPI_ERR_TAG
        );
        let mut bogus = 0xac00_0777u32 as MPI_Request;
        assert_eq!(class(PMPI_Wait(&mut bogus, &mut st)), MPI_ERR_REQUEST);
        let mut n = 0;
        assert_eq!(class(PMPI_Request_free(&mut bogus)), MPI_ERR_REQUEST);
        assert_eq!(class(PMPI_Get_count(IGNORE, MPI_INT, &mut n)), MPI_ERR_ARG);
        let mut none = MPI_REQUEST_NULL;
        assert_eq!(class(PMPI_Start(&mut none)), MPI_ERR_REQUEST);
    }
}

#[test]
fn null_and_inactive_requests_in_completion_calls() {
    let _g = state::for_tests();
    // SAFETY: (whole test) every pointer passed is a live local of the right type.
    unsafe {
        let mut buf = [0i32; 2];
        let mut pr = MPI_REQUEST_NULL;
        PMPI_Recv_init(
            buf.as_mut_ptr().cast(),
            2,
            MPI_INT,
            0,
            9,
            MPI_COMM_WORLD,
            &mut pr,
        );
        let mut reqs = [MPI_REQUEST_NULL, pr];
        let mut idx = 0;
        let mut st = MPI_Status::default();
        assert_eq!(PMPI_Waitany(2, reqs.as_mut_ptr(), &mut idx, &mut st), 0);
        assert_eq!(idx, MPI_UNDEFINED);
        assert_eq!((st.MPI_SOURCE, st.MPI_TAG), (MPI_ANY_SOURCE, MPI_ANY_TAG));
        let mut out = 0;
        let mut ind = [0; 2];
        PMPI_Waitsome(2, reqs.as_mut_ptr(), &mut out, ind.as_mut_ptr(), IGNORE);
        assert_eq!(out, MPI_UNDEFINED);
        let mut flag = 0;
        PMPI_Testall(2, reqs.as_mut_ptr(), &mut flag, IGNORE);
        assert_eq!(flag, 1);
        assert_eq!(
            PMPI_Wait(&mut pr, &mut st),
            0,
            "an inactive request completes at once"
        );
        assert_eq!(pr, reqs[1], "and stays allocated");

        // Started twice, each time completed by a different call; the handle survives.
        for round in 0..2 {
            assert_eq!(PMPI_Start(&mut pr), 0);
            assert_eq!(
                class(PMPI_Start(&mut pr)),
                MPI_ERR_REQUEST,
                "already active"
            );
            let mut r2 = [MPI_REQUEST_NULL, pr];
            PMPI_Testany(2, r2.as_mut_ptr(), &mut idx, &mut flag, &mut st);
            assert_eq!((flag, idx), (0, MPI_UNDEFINED));
            arrive(9, &ints(&[round, round + 1]));
            if round == 0 {
                PMPI_Waitany(2, r2.as_mut_ptr(), &mut idx, &mut st);
                assert_eq!(idx, 1);
            } else {
                PMPI_Testsome(2, r2.as_mut_ptr(), &mut out, ind.as_mut_ptr(), &mut st);
                assert_eq!((out, ind[0]), (1, 1));
            }
            assert_eq!(r2[1], pr);
            assert_eq!(buf, [round, round + 1]);
        }
        assert_eq!(PMPI_Request_free(&mut pr), 0);
        assert_eq!(pr, MPI_REQUEST_NULL);
    }
}

#[test]
fn cancel_free_and_waitall_errors() {
    let _g = state::for_tests();
    // SAFETY: (whole test) every pointer passed is a live local of the right type.
    unsafe {
        let mut b = [0i32; 1];
        let mut r = MPI_REQUEST_NULL;
        let mut st = MPI_Status::default();
        PMPI_Irecv(
            b.as_mut_ptr().cast(),
            1,
            MPI_INT,
            0,
            11,
            MPI_COMM_WORLD,
            &mut r,
        );
        assert_eq!(PMPI_Cancel(&mut r), 0);
        assert_eq!(PMPI_Wait(&mut r, &mut st), 0);
        let mut flag = 0;
        PMPI_Test_cancelled(&st, &mut flag);
        assert_eq!(flag, 1);

        // A freed active receive still completes (in the background).
        PMPI_Irecv(
            b.as_mut_ptr().cast(),
            1,
            MPI_INT,
            0,
            11,
            MPI_COMM_WORLD,
            &mut r,
        );
        let freed = r;
        PMPI_Request_free(&mut r);
        arrive(11, &ints(&[42]));
        assert_eq!(b[0], 42);
        let mut f = freed;
        assert_eq!(
            class(PMPI_Wait(&mut f, &mut st)),
            MPI_ERR_REQUEST,
            "it is gone"
        );

        // Waitall: one truncated receive -> MPI_ERR_IN_STATUS, per-request errors.
        let mut ok = [0i32; 1];
        let mut small = [0i32; 1];
        let mut reqs = [MPI_REQUEST_NULL; 3];
        PMPI_Irecv(
            ok.as_mut_ptr().cast(),
            1,
            MPI_INT,
            0,
            12,
            MPI_COMM_WORLD,
            &mut reqs[0],
        );
        PMPI_Irecv(
            small.as_mut_ptr().cast(),
            1,
            MPI_INT,
            0,
            13,
            MPI_COMM_WORLD,
            &mut reqs[2],
        );
        arrive(12, &ints(&[1]));
        arrive(13, &ints(&[2, 3]));
        let mut sts = [MPI_Status::default(); 3];
        let rc = PMPI_Waitall(3, reqs.as_mut_ptr(), sts.as_mut_ptr());
        assert_eq!(class(rc), MPI_ERR_IN_STATUS);
        assert_eq!(sts[0].MPI_ERROR, MPI_SUCCESS);
        assert_eq!(class(sts[2].MPI_ERROR), MPI_ERR_TRUNCATE);
        assert_eq!(reqs, [MPI_REQUEST_NULL; 3]);
        assert_eq!((ok[0], small[0]), (1, 2));
    }
}

#[test]
fn buffer_attach_and_detach() {
    let _g = state::for_tests();
    // SAFETY: (whole test) every pointer passed is a live local of the right type.
    unsafe {
        let mut space = vec![0u8; 1000];
        assert_eq!(PMPI_Buffer_attach(space.as_mut_ptr().cast(), 1000), 0);
        assert_eq!(
            class(PMPI_Buffer_attach(space.as_mut_ptr().cast(), 1000)),
            MPI_ERR_BUFFER
        );
        let b = [0i32; 1];
        let mut r = MPI_REQUEST_NULL;
        PMPI_Ibsend(
            b.as_ptr().cast(),
            1,
            MPI_INT,
            MPI_PROC_NULL,
            0,
            MPI_COMM_WORLD,
            &mut r,
        );
        PMPI_Wait(&mut r, IGNORE);
        let mut addr: *mut c_void = null_mut();
        let mut size = 0;
        assert_eq!(
            PMPI_Buffer_detach((&mut addr as *mut *mut c_void).cast(), &mut size),
            0
        );
        assert_eq!((addr, size), (space.as_mut_ptr().cast(), 1000));
        assert_eq!(
            class(PMPI_Bsend(
                b.as_ptr().cast(),
                1,
                MPI_INT,
                0,
                0,
                MPI_COMM_WORLD
            )),
            MPI_ERR_BUFFER
        );
    }
}

#[test]
fn isendrecv_and_large_count_forms() {
    let _g = state::for_tests();
    // SAFETY: (whole test) every pointer passed is a live local of the right type.
    unsafe {
        let out_data = [5i32; 2];
        let mut inb = [0i32; 2];
        let mut req = MPI_REQUEST_NULL;
        let rc = PMPI_Isendrecv(
            out_data.as_ptr().cast(),
            2,
            MPI_INT,
            MPI_PROC_NULL,
            0,
            inb.as_mut_ptr().cast(),
            2,
            MPI_INT,
            0,
            21,
            MPI_COMM_WORLD,
            &mut req,
        );
        assert_eq!(rc, 0);
        let mut flag = 1;
        let mut st = MPI_Status::default();
        PMPI_Test(&mut req, &mut flag, &mut st);
        assert_eq!(flag, 0, "the receive half is still waiting");
        arrive(21, &ints(&[8, 9]));
        assert_eq!(PMPI_Wait(&mut req, &mut st), 0);
        assert_eq!(
            (inb, st.MPI_SOURCE, st.MPI_TAG, req),
            ([8, 9], 0, 21, MPI_REQUEST_NULL)
        );

        // Sendrecv_replace: the message that arrives replaces the buffer.
        arrive(22, &ints(&[1, 2]));
        let mut buf = [7i32; 2];
        let rc = PMPI_Sendrecv_replace(
            buf.as_mut_ptr().cast(),
            2,
            MPI_INT,
            MPI_PROC_NULL,
            0,
            0,
            22,
            MPI_COMM_WORLD,
            &mut st,
        );
        assert_eq!((rc, buf), (0, [1, 2]));

        let mut r = MPI_REQUEST_NULL;
        PMPI_Irecv_c(
            inb.as_mut_ptr().cast(),
            2,
            MPI_INT,
            0,
            23,
            MPI_COMM_WORLD,
            &mut r,
        );
        arrive(23, &ints(&[4]));
        PMPI_Wait(&mut r, &mut st);
        let mut n: MPI_Count = 0;
        PMPI_Get_count_c(&st, MPI_INT, &mut n);
        assert_eq!((n, inb[0]), (1, 4));
        assert_eq!(
            class(PMPI_Send_c(
                inb.as_ptr().cast(),
                -1,
                MPI_INT,
                0,
                0,
                MPI_COMM_WORLD
            )),
            MPI_ERR_COUNT
        );
    }
}

#[test]
fn get_status_forms_leave_requests_alone() {
    let _g = state::for_tests();
    // SAFETY: (whole test) every pointer passed is a live local of the right type.
    unsafe {
        let mut b = [0i32; 2];
        let mut reqs = [MPI_REQUEST_NULL; 2];
        PMPI_Irecv(
            b.as_mut_ptr().cast(),
            1,
            MPI_INT,
            0,
            31,
            MPI_COMM_WORLD,
            &mut reqs[0],
        );
        PMPI_Irecv(
            b.as_mut_ptr().add(1).cast(),
            1,
            MPI_INT,
            0,
            32,
            MPI_COMM_WORLD,
            &mut reqs[1],
        );
        let (mut flag, mut idx, mut out) = (1, 0, 0);
        let mut st = MPI_Status::default();
        PMPI_Request_get_status_all(2, reqs.as_mut_ptr(), &mut flag, IGNORE);
        assert_eq!(flag, 0);
        arrive(32, &ints(&[3]));
        PMPI_Request_get_status_any(2, reqs.as_mut_ptr(), &mut idx, &mut flag, &mut st);
        assert_eq!((flag, idx, st.MPI_TAG), (1, 1, 32));
        let mut ind = [9; 2];
        PMPI_Request_get_status_some(2, reqs.as_mut_ptr(), &mut out, ind.as_mut_ptr(), IGNORE);
        assert_eq!((out, ind[0]), (1, 1));
        assert_ne!(reqs[1], MPI_REQUEST_NULL, "peeking frees nothing");
        PMPI_Testsome(2, reqs.as_mut_ptr(), &mut out, ind.as_mut_ptr(), IGNORE);
        assert_eq!((out, reqs[1]), (1, MPI_REQUEST_NULL));
        arrive(31, &ints(&[2]));
        let mut sts = [MPI_Status::default(); 2];
        PMPI_Testall(2, reqs.as_mut_ptr(), &mut flag, sts.as_mut_ptr());
        assert_eq!(
            (flag, b, sts[0].MPI_TAG, sts[1].MPI_SOURCE),
            (1, [2, 3], 31, MPI_ANY_SOURCE)
        );
        let mut v = 0;
        PMPI_Status_set_tag(&mut st, 77);
        PMPI_Status_get_tag(&st, &mut v);
        assert_eq!(v, 77);
        assert_eq!(PMPI_Buffer_flush(), 0);
    }
}
