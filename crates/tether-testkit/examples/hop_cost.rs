//! Measures the engine's CPU cost per sample hop (write → datagram → handle → take), with
//! no sockets: what tether adds on top of the kernel's UDP path.
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_core::{Config, EndpointInfo, Event, Participant, ParticipantId, Qos};

fn main() {
    let t0 = Instant::now();
    let (a_addr, b_addr): (SocketAddr, SocketAddr) = (
        "127.0.0.1:1".parse().unwrap(),
        "127.0.0.1:2".parse().unwrap(),
    );
    let mut a = Participant::new(Config::new(0, ParticipantId(1)), t0);
    let mut b = Participant::new(Config::new(0, ParticipantId(2)), t0);
    a.add_target(b_addr);
    b.add_target(a_addr);
    let info = |q| EndpointInfo {
        topic: "/t".into(),
        type_name: String::new(),
        partitions: vec![],
        qos: q,
    };
    let w = a.create_writer(t0, info(Qos::new())).unwrap();
    let r = b.create_reader(t0, info(Qos::new()));
    let mut now = t0;
    for _ in 0..50 {
        now += Duration::from_millis(20);
        a.handle_timeout(now);
        b.handle_timeout(now);
        while let Some(t) = a.poll_transmit() {
            b.handle_datagram(now, a_addr, &t.contiguous());
        }
        while let Some(t) = b.poll_transmit() {
            a.handle_datagram(now, b_addr, &t.contiguous());
        }
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
    }
    assert_eq!(a.matched_count(w), 1);
    for size in [64usize, 1024, 64_000] {
        let payload = Bytes::from(vec![7u8; size]);
        let n = 200_000;
        let start = Instant::now();
        let mut got = 0;
        for i in 0..n {
            a.write(now, w, i, payload.clone()).unwrap();
            while let Some(t) = a.poll_transmit() {
                b.handle_datagram(now, a_addr, &t.contiguous());
            }
            while let Some(e) = b.poll_event() {
                if let Event::DataAvailable { reader } = e {
                    while b.take(now, reader).is_some() {
                        got += 1;
                    }
                }
            }
            while let Some(t) = b.poll_transmit() {
                a.handle_datagram(now, b_addr, &t.contiguous());
            }
            while a.poll_event().is_some() {}
            let _ = r;
        }
        let per = start.elapsed().as_nanos() as f64 / n as f64;
        println!("{size:>6} B: {per:7.0} ns per hop (write+handle+take), delivered {got}");
    }
}
