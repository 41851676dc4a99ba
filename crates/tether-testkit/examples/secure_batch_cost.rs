//! Engine CPU per sample of a batching writer and its reader, plain against a secure realm
//! (sealed batches, the authenticated control plane), no sockets: the writer's side (write,
//! and the datagrams it hands out) and the reader's (handle, take) timed apart.
//! `cargo run --release -p tether-testkit --example secure_batch_cost`
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_core::{Batching, Config, EndpointInfo, Event, Participant, ParticipantId, Qos};
use tether_testkit::realm::Realm;

fn main() {
    // `secure_batch_cost SIZE secure|plain [unbatched]`: one run of reliable samples, for a
    // profiler.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [rtt_mode, mode] = args.as_slice() {
        if rtt_mode == "rtt" {
            let t = rtt(Qos::new(), mode == "secure");
            println!("64 B round trip {mode}: {t:.0} ns");
            return;
        }
    }
    if let [size, mode, rest @ ..] = args.as_slice() {
        let size = size.parse().expect("a size in bytes");
        let batched = rest.first().is_none_or(|a| a != "unbatched");
        let (w, r) = run(size, Qos::new().keep_all(), mode == "secure", batched);
        println!("{size} B {mode}: writer {w:.0} ns a sample, reader {r:.0}");
        return;
    }
    // A round trip through two engines (what `tether bench latency` does over sockets).
    for q in [Qos::new().best_effort(), Qos::new()] {
        let plain = rtt(q, false);
        let secure = rtt(q, true);
        println!(
            "   64 B round trip, {:?}: {plain:5.0} / {secure:5.0} ns (plain / secure)",
            q.reliability_kind()
        );
    }
    // One sample a datagram (what the latency bench sends), 64 B.
    for (name, q) in [
        ("best effort", Qos::new().best_effort()),
        ("reliable", Qos::new().keep_all()),
    ] {
        let plain = run(64, q, false, false);
        let secure = run(64, q, true, false);
        println!(
            "   64 B {name:>11}, unbatched: writer {:5.0} / {:5.0} ns a sample (plain / secure), reader {:5.0} / {:5.0}",
            plain.0, secure.0, plain.1, secure.1
        );
    }
    for size in [256usize, 1024] {
        for (name, q) in [
            ("best effort", Qos::new().best_effort()),
            ("reliable", Qos::new().keep_all()),
        ] {
            let plain = run(size, q, false, true);
            let secure = run(size, q, true, true);
            println!(
                "{size:>5} B {name:>11}: writer {:5.0} / {:5.0} ns a sample (plain / secure), reader {:5.0} / {:5.0}",
                plain.0, secure.0, plain.1, secure.1
            );
        }
    }
}

/// (writer ns a sample, reader ns a sample).
fn run(size: usize, q: Qos, secure: bool, batched: bool) -> (f64, f64) {
    let t0 = Instant::now();
    let (a_addr, b_addr): (SocketAddr, SocketAddr) = (
        "127.0.0.1:1".parse().unwrap(),
        "127.0.0.1:2".parse().unwrap(),
    );
    let realm = Realm::new();
    let mut ca = Config::new(0, ParticipantId(1));
    let mut cb = Config::new(0, ParticipantId(2));
    if secure {
        ca.security = Some(Arc::new(realm.security(t0, 1, "w", &["/**"], &[])));
        cb.security = Some(Arc::new(realm.security(t0, 2, "r", &[], &["/**"])));
    }
    let mut a = Participant::new(ca, t0);
    let mut b = Participant::new(cb, t0);
    a.add_target(b_addr);
    b.add_target(a_addr);
    let info = |q: Qos| EndpointInfo {
        topic: "/t".into(),
        type_name: String::new(),
        partitions: vec![],
        qos: q,
    };
    let wq = if batched {
        q.batching(Batching::default())
    } else {
        q
    };
    let w = a.create_writer(t0, info(wq)).unwrap();
    let _r = b.create_reader(t0, info(q));
    let mut now = t0;
    for _ in 0..100 {
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
    assert_eq!(a.matched_count(w), 1, "never matched");
    let payload = Bytes::from(vec![7u8; size]);
    let n = 400_000u64 * 256 / size as u64;
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
    assert!(got + 1000 >= n, "delivered {got} of {n}");
    (
        tw.as_nanos() as f64 / n as f64,
        tr.as_nanos() as f64 / n as f64,
    )
}

/// Engine time of one 64 B round trip: A writes a ping, B takes it and writes a pong, A
/// takes it (the datagrams handed over by hand, copied once as a socket would).
fn rtt(q: Qos, secure: bool) -> f64 {
    let t0 = Instant::now();
    let (a_addr, b_addr): (SocketAddr, SocketAddr) = (
        "127.0.0.1:1".parse().unwrap(),
        "127.0.0.1:2".parse().unwrap(),
    );
    let realm = Realm::new();
    let mut ca = Config::new(0, ParticipantId(1));
    let mut cb = Config::new(0, ParticipantId(2));
    if secure {
        ca.security = Some(Arc::new(realm.security(t0, 1, "a", &["/**"], &["/**"])));
        cb.security = Some(Arc::new(realm.security(t0, 2, "b", &["/**"], &["/**"])));
    }
    let mut a = Participant::new(ca, t0);
    let mut b = Participant::new(cb, t0);
    a.add_target(b_addr);
    b.add_target(a_addr);
    let info = |t: &str| EndpointInfo {
        topic: t.into(),
        type_name: String::new(),
        partitions: vec![],
        qos: q,
    };
    let ping = a.create_writer(t0, info("/ping")).unwrap();
    let pong_r = a.create_reader(t0, info("/pong"));
    let pong = b.create_writer(t0, info("/pong")).unwrap();
    let ping_r = b.create_reader(t0, info("/ping"));
    let mut now = t0;
    let pass = |from: &mut Participant, to: &mut Participant, addr: SocketAddr, now: Instant| {
        while let Some(t) = from.poll_transmit() {
            to.handle_datagram(now, addr, &t.contiguous());
        }
    };
    for _ in 0..100 {
        now += Duration::from_millis(20);
        a.handle_timeout(now);
        b.handle_timeout(now);
        pass(&mut a, &mut b, a_addr, now);
        pass(&mut b, &mut a, b_addr, now);
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
    }
    assert_eq!(a.matched_count(ping), 1, "never matched");
    let payload = Bytes::from(vec![7u8; 64]);
    let n = 200_000u64;
    let s = Instant::now();
    for i in 0..n {
        a.write(now, ping, i, payload.clone()).unwrap();
        pass(&mut a, &mut b, a_addr, now);
        let got = b.take(now, ping_r).expect("the ping");
        b.write(now, pong, i, got.payload).unwrap();
        pass(&mut b, &mut a, b_addr, now);
        a.take(now, pong_r).expect("the pong");
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
        if i % 64 == 0 {
            // Acknowledgements, as the heartbeats ask.
            pass(&mut a, &mut b, a_addr, now);
            pass(&mut b, &mut a, b_addr, now);
        }
    }
    s.elapsed().as_nanos() as f64 / n as f64
}
