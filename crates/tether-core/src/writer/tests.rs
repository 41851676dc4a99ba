//! Unit tests of the writer's buffers in a secure realm.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::{Config, EndpointInfo, EntityId, Participant, ParticipantId, Qos};

/// Participant `id` of the realm of `ca`, allowed to publish and subscribe to anything
/// (encrypt mode).
fn member(ca: &tether_crypto::CaKey, id: u64, now: Instant) -> Participant {
    let identity = tether_crypto::Identity::generate();
    let cred = tether_crypto::Credential::issue(
        ca,
        "m",
        id,
        1_000,
        4_000_000_000,
        identity.sign_public(),
        identity.kx_public(),
        vec!["/**".into()],
        vec!["/**".into()],
    )
    .unwrap();
    let mut cfg = Config::new(0, ParticipantId(id));
    cfg.security = Some(std::sync::Arc::new(crate::Security::new(
        identity,
        cred,
        ca.public(),
        tether_crypto::RealmSecret::from_bytes([3; 32]),
        None,
        now,
        2_000_000_000,
    )));
    Participant::new(cfg, now)
}

fn info(qos: Qos) -> EndpointInfo {
    EndpointInfo {
        topic: "/t".into(),
        type_name: "t".into(),
        partitions: vec![],
        qos,
    }
}

/// A writer on participant 7 and a reader on participant 8, matched (keys exchanged).
fn pair(qos: Qos) -> (Participant, Participant, EntityId, Instant) {
    let mut now = Instant::now();
    let ca = tether_crypto::CaKey::generate();
    let (mut a, mut b) = (member(&ca, 7, now), member(&ca, 8, now));
    let (aa, ba): (SocketAddr, SocketAddr) = (
        "127.0.0.1:1".parse().unwrap(),
        "127.0.0.1:2".parse().unwrap(),
    );
    a.add_target(ba);
    b.add_target(aa);
    let wid = a.create_writer(now, info(qos)).unwrap();
    b.create_reader(now, info(qos));
    for _ in 0..100 {
        now += Duration::from_millis(20);
        a.handle_timeout(now);
        b.handle_timeout(now);
        exchange(&mut a, &mut b, now);
    }
    assert_eq!(a.matched_count(wid), 1, "never matched");
    (a, b, wid, now)
}

/// Hands each side's datagrams to the other, dropping what they deliver.
fn exchange(a: &mut Participant, b: &mut Participant, now: Instant) {
    let (aa, ba): (SocketAddr, SocketAddr) = (
        "127.0.0.1:1".parse().unwrap(),
        "127.0.0.1:2".parse().unwrap(),
    );
    while let Some(t) = a.poll_transmit() {
        b.handle_datagram(now, aa, &t.contiguous());
    }
    while let Some(t) = b.poll_transmit() {
        a.handle_datagram(now, ba, &t.contiguous());
    }
    while a.poll_event().is_some() {}
    while let Some(e) = b.poll_event() {
        if let crate::Event::DataAvailable { reader } = e {
            while b.take(now, reader).is_some() {}
        }
    }
}

/// A writer that seals datagrams keeps the application's bytes in its history as they
/// came (no copy), and seals each datagram into the last one's buffer once no transmit
/// holds it: no allocation per sample in steady state.
#[test]
fn sealed_datagrams_reuse_their_buffer_and_the_history_holds_the_application_bytes() {
    for qos in [Qos::new().keep_last(2), Qos::new().best_effort().volatile()] {
        let (mut a, mut b, wid, now) = pair(qos);
        let app = Bytes::from(vec![0u8; 4096]);
        a.write(now, wid, 0, app.clone()).unwrap();
        if let Some(c) = a.writers[&wid].history.back() {
            assert_eq!(c.payload.as_ptr(), app.as_ptr(), "the history copied it");
            assert!(c.clear);
        }
        let first = a.writers[&wid].last_sealed.as_ref().map(|b| b.as_ptr());
        assert!(first.is_some(), "the sealed datagram's buffer is kept");
        exchange(&mut a, &mut b, now);
        a.write(now, wid, 1, Bytes::from(vec![1u8; 4096])).unwrap();
        let second = a.writers[&wid].last_sealed.clone().unwrap();
        assert_eq!(Some(second.as_ptr()), first, "sealed into the same buffer");
        // While a transmit (here: this clone) holds it, the next seal takes a new one and
        // leaves it intact.
        exchange(&mut a, &mut b, now);
        let sealed = second.to_vec();
        a.write(now, wid, 2, Bytes::from(vec![2u8; 4096])).unwrap();
        let third = a.writers[&wid].last_sealed.as_ref().map(|b| b.as_ptr());
        assert_ne!(third, Some(second.as_ptr()));
        assert_eq!(second.to_vec(), sealed, "intact while held");
        assert_eq!(second.len(), tether_wire::BATCH_ENTRY_OVERHEAD + 4096);
    }
}
