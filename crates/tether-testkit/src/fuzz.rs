//! Fuzz entry points, shared by the `fuzz/` targets (libFuzzer) and by the test that replays
//! the checked-in corpus on every CI run.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_core::{Config, EndpointInfo, Event, Participant, ParticipantId, Qos};
use tether_wire::{
    CredentialRepr, Datagram, DatagramBuilder, ProtectedSample, ProtectedSampleRepr,
    RevocationListRepr, SealedBody, Submessage, WrappedKeyRepr,
};

/// Parses arbitrary bytes as a datagram. Whatever parses must emit back and parse again to
/// the same value (a differential round trip), and nothing may panic.
pub fn datagram(data: &[u8]) {
    let Ok(d) = Datagram::parse(data) else {
        return;
    };
    let mut errors = 0;
    for m in d.submessages() {
        let Ok(m) = m else {
            errors += 1;
            continue;
        };
        if matches!(m, Submessage::Unknown(_)) {
            continue;
        }
        let mut buf = Vec::new();
        DatagramBuilder::new(&mut buf, d.header())
            .push(&m)
            .expect("a parsed submessage emits");
        let again = Datagram::parse(&buf).expect("emitted datagram parses");
        let parsed: Vec<_> = again.submessages().collect();
        assert_eq!(parsed, vec![Ok(m)], "round trip changed the submessage");
    }
    assert!(errors <= 1, "the iterator stops after its first error");
}

/// Parses arbitrary bytes as each layout beside the datagram: a protected sample, a sealed
/// body, a wrapped key, a credential and a revocation list (the first byte picks the magic
/// the last two are given, so the fuzzer gets past it). Whatever parses must emit back to
/// the same bytes (the forms are canonical), and nothing may panic.
pub fn layouts(data: &[u8]) {
    if let Ok(r) = ProtectedSampleRepr::parse(data) {
        let mut out = Vec::new();
        r.emit(&mut out).expect("a parsed protected sample emits");
        assert_eq!(out, data, "protected sample round trip");
        let v = ProtectedSample::parse(data).expect("parses as a view too");
        assert_eq!(v.repr(), r);
    }
    if let Ok(b) = SealedBody::parse(data) {
        let mut out = Vec::new();
        b.emit(&mut out);
        assert_eq!(out, data, "sealed body round trip");
    }
    if let Ok(w) = WrappedKeyRepr::parse(data) {
        let mut out = Vec::new();
        w.emit(&mut out).expect("a parsed wrapped key emits");
        assert_eq!(out, data, "wrapped key round trip");
    }
    if let Ok((name, type_name)) = tether_wire::parse_description(data) {
        let out = tether_wire::description_plaintext(name, type_name)
            .expect("a parsed endpoint description lays out again");
        assert_eq!(out, data, "endpoint description round trip");
    }
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let magic = if pick & 1 == 0 {
        tether_wire::CREDENTIAL_MAGIC
    } else {
        tether_wire::REVOCATION_MAGIC
    };
    let b = [&magic[..], rest].concat();
    if let Ok(c) = CredentialRepr::parse(&b) {
        let mut out = Vec::new();
        c.emit(&mut out);
        assert_eq!(out, b, "credential round trip");
    }
    if let Ok(r) = RevocationListRepr::parse(&b) {
        let mut out = Vec::new();
        r.emit(&mut out);
        assert_eq!(out, b, "revocation list round trip");
    }
}

/// Feeds arbitrary bytes to a participant that has a reliable keep-all writer and reader on
/// `/fuzz`, as datagrams from two peers, with time advancing. Nothing may panic, and the
/// engine's holdings stay within their limits.
pub fn participant(data: &[u8]) {
    let t0 = Instant::now();
    let mut cfg = Config::new(0, ParticipantId(0xabcd));
    // Small limits: the same code paths, without sanitizer-instrumented 256 MiB buffers.
    cfg.max_sample_size = 1 << 20;
    cfg.max_reassembly_bytes = 4 << 20;
    let mut p = Participant::new(cfg, t0);
    let qos = Qos::new().keep_all().max_samples(32);
    let info = |q| EndpointInfo {
        topic: "/fuzz".into(),
        type_name: String::new(),
        partitions: vec![],
        qos: q,
    };
    let w = p.create_writer(t0, info(qos)).unwrap();
    let r = p.create_reader(t0, info(qos));
    let peers: [SocketAddr; 2] = [
        "127.0.0.1:9".parse().unwrap(),
        "127.0.0.2:9".parse().unwrap(),
    ];
    let mut now = t0;
    // Chunks: a length byte, then that many bytes of datagram.
    let mut rest = data;
    let mut i = 0usize;
    while let Some((&len, tail)) = rest.split_first() {
        let n = (len as usize).min(tail.len());
        let (chunk, tail) = tail.split_at(n);
        rest = tail;
        i += 1;
        now += Duration::from_millis(u64::from(len % 64));
        p.handle_datagram(now, peers[i % 2], &Bytes::copy_from_slice(chunk));
        if i % 7 == 0 {
            let _ = p.write(now, w, i as u64, Bytes::from_static(b"fuzz"));
        }
        p.handle_timeout(now);
        while p.poll_transmit().is_some() {}
        while let Some(e) = p.poll_event() {
            if let Event::DataAvailable { reader } = e {
                while p.take(now, reader).is_some() {}
            }
        }
        assert!(p.history_len(w) <= 32);
        assert!(p.reader_backlog(r) <= 32 + 256 * 2);
        assert!(p.remote_participants().len() <= p.config().max_participants);
    }
}
