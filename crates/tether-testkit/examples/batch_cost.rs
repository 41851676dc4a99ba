//! Engine CPU per sample with batching, reliable vs best effort, no sockets: writer side
//! (write + flush) and reader side (handle + take) timed separately.
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_core::{Batching, Config, EndpointInfo, Event, Participant, ParticipantId, Qos};

fn main() {
    for (name, q) in [
        ("best effort", Qos::new().best_effort()),
        ("reliable keep_all", Qos::new().keep_all()),
    ] {
        let t0 = Instant::now();
        let (a_addr, b_addr): (SocketAddr, SocketAddr) = (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        );
        let mut a = Participant::new(Config::new(0, ParticipantId(1)), t0);
        let mut b = Participant::new(Config::new(0, ParticipantId(2)), t0);
        a.add_target(b_addr);
        b.add_target(a_addr);
        let info = |q: Qos| EndpointInfo {
            topic: "/t".into(),
            type_name: String::new(),
            partitions: vec![],
            qos: q,
        };
        let w = a
            .create_writer(t0, info(q.batching(Batching::default())))
            .unwrap();
        let _r = b.create_reader(t0, info(q));
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
        let payload = Bytes::from(vec![7u8; 1024]);
        let n = 500_000u64;
        let (mut tw, mut tr) = (Duration::ZERO, Duration::ZERO);
        let mut got = 0u64;
        for i in 0..n {
            let s = Instant::now();
            a.write(now, w, i, payload.clone()).unwrap();
            let dgs: Vec<Bytes> = std::iter::from_fn(|| a.poll_transmit())
                .map(|t| t.contiguous())
                .collect();
            tw += s.elapsed();
            let s = Instant::now();
            for d in dgs {
                b.handle_datagram(now, a_addr, &d);
            }
            while let Some(e) = b.poll_event() {
                if let Event::DataAvailable { reader } = e {
                    while b.take(now, reader).is_some() {
                        got += 1;
                    }
                }
            }
            let acks: Vec<Bytes> = std::iter::from_fn(|| b.poll_transmit())
                .map(|t| t.contiguous())
                .collect();
            tr += s.elapsed();
            let s = Instant::now();
            for d in acks {
                a.handle_datagram(now, b_addr, &d);
            }
            while a.poll_event().is_some() {}
            tw += s.elapsed();
        }
        println!(
            "{name:>18}: writer {:6.0} ns/sample, reader {:6.0} ns/sample, delivered {got}",
            tw.as_nanos() as f64 / n as f64,
            tr.as_nanos() as f64 / n as f64
        );
    }
}
