//! Sender-side cost of `put`, isolated: the only matched reader is a raw UDP socket that
//! announced itself with valid wire messages and discards what it receives. Prints put()
//! rate beside a raw send_to loop to the same socket.
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use tether::{Config, Qos, Session};
use tether_wire::*;

fn main() {
    let size: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let mut c = Config::default();
    c.discovery.range = tether::DiscoveryRange::Off;
    let s = Session::open(c).unwrap();
    let mut q = Qos::default().best_effort();
    if std::env::var_os("BATCH").is_some() {
        q = q.batching(tether::Batching::default());
    }
    let p = s.publisher("/rate", q).unwrap();
    let sink = announce_sink(&s);
    let end = Instant::now() + Duration::from_secs(5);
    while p.matched() == 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(p.matched(), 1);
    let drain = sink.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut b = vec![0u8; 70000];
        while drain.recv(&mut b).is_ok() {}
    });
    let payload = bytes::Bytes::from(vec![1u8; size]);
    match std::env::args().nth(2).as_deref() {
        Some("contend") => contend(&sink, &payload),
        Some("raw-only") => raw_only(&sink, size),
        Some("put-only") => put_only(&p, &payload),
        _ => rounds(&p, &sink, &payload, size),
    }
}

/// A UDP socket that announces one best-effort reader of `/rate` to `s` with valid wire
/// messages, and discards what it receives.
fn announce_sink(s: &Session) -> UdpSocket {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let hdr = Header {
        domain: 0,
        participant: ParticipantId(0xfeed),
    };
    let mut buf = Vec::new();
    let qos = Qos::default().best_effort().to_repr();
    DatagramBuilder::new(&mut buf, hdr)
        .push(&Submessage::Participant(ParticipantRepr {
            lease_ms: 60_000,
            name: "sink",
            data_group: None,
        }))
        .unwrap()
        .push(&Submessage::Endpoint(EndpointRepr {
            entity: EntityId(1),
            kind: EndpointKind::Reader,
            qos,
            protection: ProtectionMode::Unannounced,
            encoding: Encoding::Unset,
            topic: "/rate",
            type_name: "",
            partitions: StrList::Slice(&[]),
            description: None,
        }))
        .unwrap();
    sink.send_to(&buf, s.local_addr()).unwrap();
    sink
}

/// The transport's send alone, with and without a reader blocked in `recv` on the socket.
fn contend(sink: &UdpSocket, payload: &bytes::Bytes) {
    use tether_transport::Transport;
    let dest = sink.local_addr().unwrap();
    let n: u64 = 1_000_000;
    for blocked_reader in [false, true, false, true] {
        let tr = std::sync::Arc::new(
            tether_transport::UdpTransport::bind(&tether_transport::UdpOptions::default()).unwrap(),
        );
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let h = blocked_reader.then(|| {
            let (tr, stop) = (tr.clone(), stop.clone());
            tr.set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            std::thread::spawn(move || {
                let mut chunk = bytes::BytesMut::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = tr.recv(&mut chunk);
                }
            })
        });
        let head = vec![1u8; 44];
        let t = Instant::now();
        for _ in 0..n {
            tr.send(dest, &head, payload).unwrap();
        }
        println!(
            "blocked reader {blocked_reader}: {:.0}/s",
            n as f64 / t.elapsed().as_secs_f64()
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = h {
            h.join().unwrap();
        }
    }
}

/// A raw `send_to` loop alone.
fn raw_only(sink: &UdpSocket, size: usize) {
    let raw_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dest = sink.local_addr().unwrap();
    let data = vec![1u8; size + 44];
    let t = Instant::now();
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    for _ in 0..n {
        raw_sock.send_to(&data, dest).unwrap();
    }
    println!("raw only: {:.0}/s", n as f64 / t.elapsed().as_secs_f64());
}

/// `put` alone.
fn put_only(p: &tether::Publisher, payload: &bytes::Bytes) {
    let t = Instant::now();
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    for _ in 0..n {
        p.put(payload.clone()).unwrap();
    }
    println!("put only: {:.0}/s", n as f64 / t.elapsed().as_secs_f64());
}

/// `put`, the transport's send and raw `send_to`, three rounds.
fn rounds(p: &tether::Publisher, sink: &UdpSocket, payload: &bytes::Bytes, size: usize) {
    for round in 0..3 {
        let n = 300_000;
        let t = Instant::now();
        for _ in 0..n {
            p.put(payload.clone()).unwrap();
        }
        let tether = n as f64 / t.elapsed().as_secs_f64();
        let raw_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dest = sink.local_addr().unwrap();
        let data = vec![1u8; size + 44];
        let t = Instant::now();
        for _ in 0..n {
            raw_sock.send_to(&data, dest).unwrap();
        }
        let raw = n as f64 / t.elapsed().as_secs_f64();
        use tether_transport::Transport;
        let tr =
            tether_transport::UdpTransport::bind(&tether_transport::UdpOptions::default()).unwrap();
        let head = vec![1u8; 44];
        let t = Instant::now();
        for _ in 0..n {
            tr.send(dest, &head, payload).unwrap();
        }
        let trs = n as f64 / t.elapsed().as_secs_f64();
        println!(
            "round {round}: {size} B put {tether:>9.0}/s  transport.send {trs:>9.0}/s  raw send_to {raw:>9.0}/s  put/raw {:.2}",
            tether / raw
        );
    }
}
