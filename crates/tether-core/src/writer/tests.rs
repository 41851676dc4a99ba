//! Unit tests of the writer's buffers in a secure realm.

use std::time::Instant;

use bytes::Bytes;

use crate::{Config, EndpointInfo, EntityId, Participant, ParticipantId, Qos};

/// A participant in a realm of its own, allowed to publish anything (encrypt mode),
/// with one writer on `/t` of QoS `qos`.
fn secure_writer(now: Instant, qos: Qos) -> (Participant, EntityId) {
    let ca = tether_crypto::CaKey::generate();
    let id = tether_crypto::Identity::generate();
    let cred = tether_crypto::Credential::issue(
        &ca,
        "w",
        1,
        1_000,
        4_000_000_000,
        id.sign_public(),
        id.kx_public(),
        vec!["/**".into()],
        vec![],
    )
    .unwrap();
    let mut cfg = Config::new(0, ParticipantId(7));
    cfg.security = Some(std::sync::Arc::new(crate::Security::new(
        id,
        cred,
        ca.public(),
        tether_crypto::RealmSecret::from_bytes([3; 32]),
        None,
        now,
        2_000_000_000,
    )));
    let mut p = Participant::new(cfg, now);
    let info = EndpointInfo {
        topic: "/t".into(),
        type_name: "t".into(),
        partitions: vec![],
        qos,
    };
    let wid = p.create_writer(now, info).unwrap();
    (p, wid)
}

/// A secure writer seals each sample into the buffer of one its history let go of, once
/// nothing else holds it: no allocation, no zeroing per sample in steady state.
#[test]
fn sealed_buffers_are_taken_back_from_the_history() {
    let now = Instant::now();
    let (mut p, wid) = secure_writer(now, Qos::new().keep_last(2));
    let ptr = |p: &Participant| p.writers[&wid].history.back().unwrap().payload.as_ptr();
    for k in 0..2u64 {
        p.write(now, wid, k, Bytes::from(vec![k as u8; 4096]))
            .unwrap();
    }
    let first = p.writers[&wid].history.front().unwrap().payload.as_ptr();
    // Room for the next sample: the oldest leaves and its buffer becomes the spare
    // (alive, so the allocator cannot hand out the same address by chance).
    let w = p.writers.get_mut(&wid).unwrap();
    assert!(w.spare.is_none());
    assert!(w.make_room(4096));
    assert_eq!(w.spare.as_ref().map(|v| v.as_ptr()), Some(first));
    p.write(now, wid, 2, Bytes::from(vec![2u8; 4096])).unwrap();
    assert_eq!(ptr(&p), first, "sealed into the buffer taken back");
    assert!(p.writers[&wid].spare.is_none());
    // A buffer something still holds is not taken back.
    let held = p.writers[&wid].history.front().unwrap().payload.clone();
    p.write(now, wid, 3, Bytes::from(vec![3u8; 4096])).unwrap();
    assert!(p.writers[&wid].spare.is_none());
    assert_ne!(ptr(&p), held.as_ptr());
    assert_eq!(held.len(), 1 + 4 + 4096 + 16, "intact while held");
}

/// A secure writer that keeps no history (best effort, volatile) seals each sample
/// into the last one's buffer once no datagram holds it.
#[test]
fn a_writer_without_history_reuses_its_last_sealed_buffer() {
    let now = Instant::now();
    let (mut p, wid) = secure_writer(now, Qos::new().best_effort().volatile());
    p.write(now, wid, 0, Bytes::from(vec![0u8; 4096])).unwrap();
    let first = p.writers[&wid].last_sealed.as_ref().map(|b| b.as_ptr());
    assert!(first.is_some(), "the sealed sample is kept");
    assert!(p.writers[&wid].history.is_empty());
    p.write(now, wid, 1, Bytes::from(vec![1u8; 4096])).unwrap();
    let second = p.writers[&wid].last_sealed.clone().unwrap();
    assert_eq!(Some(second.as_ptr()), first, "sealed into the same buffer");
    // While a datagram (here: this clone) holds it, the next seal takes a new one and
    // leaves it intact.
    p.write(now, wid, 2, Bytes::from(vec![2u8; 4096])).unwrap();
    let third = p.writers[&wid].last_sealed.as_ref().map(|b| b.as_ptr());
    assert_ne!(third, Some(second.as_ptr()));
    assert_eq!(second.len(), 1 + 4 + 4096 + 16, "intact while held");
}
