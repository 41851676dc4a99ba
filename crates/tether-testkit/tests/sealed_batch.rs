//! Sealed batches (`docs/wire.md#sealed_batch`): a batching writer in an `encrypt` realm
//! seals each batch datagram once, whatever its number of samples, and its readers open it
//! once. What it must keep: every sample delivered, in order, intact; nothing in clear on
//! the wire; repairs and late joiners served with samples sealed alone; and an outsider who
//! alters, replays or reorders a sealed batch changes nothing a member does.

use std::time::Duration;

use bytes::Bytes;
use tether_core::{Batching, EntityId, Qos, Security};
use tether_testkit::realm::{Realm, info};
use tether_testkit::{Link, Sim};
use tether_wire::{Datagram, Submessage, SubmessageKind};

fn batching(q: Qos, max_samples: u32) -> Qos {
    q.batching(Batching {
        max_bytes: 60_000,
        max_samples,
        max_delay: Duration::from_millis(2),
    })
}

/// Sample `k`: `len` bytes of a marker that must never be seen on the wire.
fn sample(k: u64, len: usize) -> Bytes {
    let mut v = b"PLAINTEXT-MARKER".repeat(len / 16 + 1);
    v.truncate(len);
    v[..8].copy_from_slice(&k.to_le_bytes());
    Bytes::from(v)
}

fn plaintext_on(wire: &[Bytes]) -> bool {
    wire.iter()
        .any(|d| d.windows(16).any(|x| x == b"PLAINTEXT-MARKER"))
}

/// The kinds of every submessage on the wire.
fn kinds(wire: &[Bytes]) -> Vec<u8> {
    wire.iter()
        .filter_map(|d| Datagram::parse(d).ok())
        .flat_map(|d| {
            d.submessages()
                .filter_map(Result::ok)
                .map(|m| m.kind())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A batching writer on node 0 and `readers` readers, one per node after it, matched.
fn realm(
    seed: u64,
    link: Link,
    readers: usize,
    wq: Qos,
    rq: Qos,
    tune: impl Fn(Security) -> Security,
) -> (Sim, Realm, EntityId, Vec<(usize, EntityId)>) {
    let mut sim = Sim::new(seed, link);
    sim.wire = Some(Vec::new());
    let realm = Realm::new();
    let sec = tune(realm.security(sim.now, 1, "robot", &["/**"], &[]));
    let w = sim.add_node_with(move |c| c.security = Some(std::sync::Arc::new(sec)));
    let rs: Vec<usize> = (0..readers)
        .map(|i| realm.member_with(&mut sim, 10 + i as u64, "viewer", &[], &["/**"]))
        .collect();
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info("/cam", wq)).unwrap();
    let rids: Vec<(usize, EntityId)> = rs
        .iter()
        .map(|&r| {
            let now = sim.now;
            (r, sim.p(r).create_reader(now, info("/cam", rq)))
        })
        .collect();
    sim.pump(w);
    for &(r, _) in &rids {
        sim.pump(r);
    }
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.nodes[w].participant.matched_count(wid) == readers
            && rids
                .iter()
                .all(|&(r, rid)| s.nodes[r].participant.matched_count(rid) == 1)
    }));
    // Every reader holds the key before the first sample (the KEY leaves at the match).
    sim.run_for(Duration::from_millis(50));
    (sim, realm, wid, rids)
}

fn delivered_in_order(sim: &Sim, rids: &[(usize, EntityId)], n: u64, len: usize) -> bool {
    rids.iter().all(|&(r, rid)| {
        let got = sim.payloads(r, rid);
        got.len() == n as usize
            && got
                .iter()
                .enumerate()
                .all(|(k, p)| *p == sample(k as u64, len))
    })
}

/// On a perfect link: one seal per batch datagram at the writer, one open per batch at
/// each reader, each sample counted once as sealed; only SEALED_BATCHes carry samples.
#[test]
fn batches_are_sealed_once_and_opened_once() {
    let q = batching(Qos::new().keep_all(), 8);
    let (mut sim, _, wid, rids) = realm(1, Link::perfect(), 3, q, Qos::new().keep_all(), |s| s);
    sim.wire = Some(Vec::new());
    let n = 64u64;
    for k in 0..n {
        sim.write(0, wid, k, sample(k, 300), Duration::from_secs(5));
    }
    assert!(
        sim.run_until(Duration::from_secs(10), |s| delivered_in_order(
            s, &rids, n, 300
        ))
    );
    let ws = sim.nodes[0].participant.stats().clone();
    assert_eq!((ws.batches_sealed, ws.samples_sealed), (n / 8, n));
    assert_eq!(ws.samples_resealed, 0, "nothing was repaired");
    for &(r, _) in &rids {
        let rs = sim.nodes[r].participant.stats();
        assert_eq!((rs.batches_opened, rs.samples_opened), (n / 8, n));
        assert_eq!((rs.open_failed, rs.unauthenticated, rs.no_key), (0, 0, 0));
    }
    let wire = sim.wire.take().unwrap();
    assert!(!plaintext_on(&wire), "plaintext on the wire");
    let k = kinds(&wire);
    assert!(k.contains(&(SubmessageKind::SealedBatch as u8)));
    assert!(
        !k.iter()
            .any(|&x| x == SubmessageKind::Batch as u8 || x == SubmessageKind::Data as u8),
        "a sample left outside a sealed batch"
    );
}

/// With 10 % frame loss on 1,500-byte frames: batches go as path-sized SEALED_BATCHes, what
/// was lost is repaired sealed alone, every reader gets everything, in order, intact, and
/// nothing goes in clear.
#[test]
fn sealed_batches_under_loss_are_repaired_sealed_alone() {
    for seed in [2u64, 3] {
        let q = batching(Qos::new().keep_all(), 64);
        let (mut sim, _, wid, rids) = realm(
            seed,
            Link::lan(1500, 0.1),
            2,
            q,
            Qos::new().keep_all(),
            |s| s,
        );
        sim.wire = Some(Vec::new());
        let n = 300u64;
        for k in 0..n {
            sim.write(0, wid, k, sample(k, 200), Duration::from_secs(30));
            if k % 16 == 0 {
                sim.run_for(Duration::from_millis(1));
            }
        }
        assert!(
            sim.run_until(Duration::from_secs(120), |s| delivered_in_order(
                s, &rids, n, 200
            )),
            "seed {seed}: not every sample delivered in order"
        );
        let ws = sim.nodes[0].participant.stats().clone();
        assert!(ws.batches_sealed > 0 && ws.samples_resealed > 0, "{ws:?}");
        let wire = sim.wire.take().unwrap();
        assert!(!plaintext_on(&wire), "seed {seed}: plaintext on the wire");
        // (PROBEs try larger sizes, and the link refuses them: don't-fragment.)
        for d in wire
            .iter()
            .filter(|d| !kinds(std::slice::from_ref(*d)).contains(&17))
        {
            assert!(
                d.len() <= 1472,
                "seed {seed}: {} bytes: {:?}",
                d.len(),
                kinds(std::slice::from_ref(d))
            );
        }
    }
}

/// The writer's datagrams for one flushed batch, taken from it before the network sees
/// them: (destination, bytes).
fn intercept(sim: &mut Sim, wid: EntityId, from: u64, n: u64) -> Vec<Bytes> {
    for k in from..from + n {
        let now = sim.now;
        sim.p(0).write(now, wid, k, sample(k, 300)).unwrap();
    }
    let now = sim.now;
    sim.p(0).flush(now, wid);
    let mut out = Vec::new();
    while let Some(t) = sim.p(0).poll_transmit() {
        out.push(t.contiguous());
    }
    out
}

/// Where in `d` the SEALED_BATCH's body starts.
fn sealed_batch_body(d: &[u8]) -> usize {
    let parsed = Datagram::parse(d).unwrap();
    let x = parsed
        .submessages()
        .find_map(|m| match m {
            Ok(Submessage::SealedBatch(x)) => Some(x),
            _ => None,
        })
        .expect("a sealed batch");
    x.ciphertext.as_ptr() as usize - d.as_ptr() as usize - tether_wire::SEALED_BATCH_FIXED_LEN
}

/// An outsider alters a sealed batch on the way and gets its copy in first: its
/// ciphertext, its tag, its first sequence number, its epoch. None of the copies delivers
/// anything or is acted on; the genuine datagram, arriving after them, still counts (its
/// counter was not used up) and delivers the batch once; replayed, it is refused.
#[test]
fn an_altered_sealed_batch_changes_nothing_and_the_genuine_copy_counts() {
    let q = batching(Qos::new().keep_all(), 8);
    let (mut sim, _, wid, rids) = realm(4, Link::perfect(), 1, q, Qos::new().keep_all(), |s| s);
    let (r, rid) = rids[0];
    let from = sim.nodes[0].addr;
    let dgs = intercept(&mut sim, wid, 0, 8);
    let genuine = dgs
        .iter()
        .find(|d| {
            Datagram::parse(d)
                .unwrap()
                .submessages()
                .any(|m| matches!(m, Ok(Submessage::SealedBatch(_))))
        })
        .expect("the batch")
        .clone();
    let body = sealed_batch_body(&genuine);
    let ct = body + tether_wire::SEALED_BATCH_FIXED_LEN;
    let flip = |at: usize, bit: u8| {
        let mut v = genuine.to_vec();
        v[at] ^= bit;
        Bytes::from(v)
    };
    let before = sim.nodes[r].participant.stats().clone();
    // The seal covers every byte before its tag as associated data, and the ciphertext:
    // (the altered copy, the counter that must rise).
    let mut altered = vec![
        (flip(ct + 5, 1), "open_failed"),    // the ciphertext
        (flip(body + 24, 1), "open_failed"), // the tag
        (flip(body + 8, 4), "open_failed"),  // first_seq (the nonce)
        (flip(body + 4, 1), "open_failed"),  // reader
        // The next epoch, whose key it does not hold yet: kept a while, never opened.
        (flip(body + 20, 3), "held_for_key"),
        // An epoch further ahead: no key on its way could explain it, dropped at once.
        (flip(body + 20, 4), "no_key"),
    ];
    // A heartbeat in front, if the writer put one there: covered too.
    if body > tether_wire::HEADER_LEN + tether_wire::SUBMESSAGE_HEADER_LEN {
        altered.push((flip(tether_wire::HEADER_LEN + 12, 1), "open_failed"));
    }
    for (i, (d, counter)) in altered.iter().enumerate() {
        let was = sim.nodes[r].participant.stats().counters();
        tether_testkit::realm::inject(&mut sim, r, from, d);
        let now = sim.nodes[r].participant.stats().counters();
        let get = |c: &[(&str, u64)]| c.iter().find(|(n, _)| n == counter).unwrap().1;
        assert!(get(&now) > get(&was), "copy {i}: {counter} did not rise");
        assert!(
            sim.payloads(r, rid).is_empty(),
            "an altered batch delivered"
        );
    }
    let after = sim.nodes[r].participant.stats();
    assert_eq!(
        after.datagrams_authenticated,
        before.datagrams_authenticated
    );
    assert_eq!(after.batches_opened, before.batches_opened);
    tether_testkit::realm::inject(&mut sim, r, from, &genuine);
    assert_eq!(
        sim.payloads(r, rid).len(),
        8,
        "the genuine batch was refused"
    );
    assert!(delivered_in_order(&sim, &rids, 8, 300));
    tether_testkit::realm::inject(&mut sim, r, from, &genuine);
    assert_eq!(
        sim.nodes[r].participant.stats().replayed,
        before.replayed + 1
    );
    assert_eq!(sim.payloads(r, rid).len(), 8);
    // The stream goes on: the rest of the writer's datagrams, then more samples.
    for d in dgs.iter().filter(|d| **d != genuine) {
        tether_testkit::realm::inject(&mut sim, r, from, d);
    }
    for k in 8..40 {
        sim.write(0, wid, k, sample(k, 300), Duration::from_secs(5));
    }
    assert!(
        sim.run_until(Duration::from_secs(10), |s| delivered_in_order(
            s, &rids, 40, 300
        ))
    );
}

/// A transient-local reader that joins after the writer's samples went out in sealed
/// batches gets the history, each sample sealed alone, and opens every one.
#[test]
fn a_late_joiner_gets_a_batch_sealing_writers_history_sealed() {
    let q = batching(Qos::new().keep_all().transient_local(), 8);
    let rq = Qos::new().keep_all().transient_local();
    let (mut sim, realm, wid, mut rids) = realm(5, Link::perfect(), 1, q, rq, |s| s);
    let n = 24u64;
    for k in 0..n {
        sim.write(0, wid, k, sample(k, 300), Duration::from_secs(5));
    }
    assert!(
        sim.run_until(Duration::from_secs(10), |s| delivered_in_order(
            s, &rids, n, 300
        ))
    );
    assert_eq!(sim.nodes[0].participant.stats().samples_resealed, 0);
    sim.wire = Some(Vec::new());
    let late = realm.member_with(&mut sim, 99, "late", &[], &["/**"]);
    let now = sim.now;
    let lid = sim.p(late).create_reader(now, info("/cam", rq));
    sim.pump(late);
    rids.push((late, lid));
    assert!(
        sim.run_until(Duration::from_secs(10), |s| delivered_in_order(
            s, &rids, n, 300
        )),
        "the late joiner did not get the history: {:?}",
        sim.seqs(late, lid)
    );
    assert!(sim.nodes[0].participant.stats().samples_resealed >= n);
    assert!(!plaintext_on(&sim.wire.take().unwrap()));
}

/// A reader whose policy asks for signatures on the topic does not match a writer that
/// seals batches without them (`encrypt`): each side reports the protection mismatch once,
/// and no sealed batch goes to the reader, so nothing is refused there either. Before issue
/// 18 they matched, and the reader refused every sample as under-protected. (A sample of
/// less protection than a reader requires is still refused on arrival, whoever sends it:
/// `security/signing.rs`, `signed_modes_and_per_topic_overrides`.)
#[test]
fn a_reader_asking_for_signatures_does_not_match_a_batch_sealing_writer() {
    let q = batching(Qos::new().best_effort(), 8);
    let mut sim = Sim::new(6, Link::perfect());
    let realm = Realm::new();
    let w = realm.member(&mut sim, 1, "robot");
    let strict = realm
        .security(sim.now, 2, "viewer", &[], &["/**"])
        .with_protection("encrypt+sign".parse().unwrap(), vec![]);
    let r = sim.add_node_with(move |c| c.security = Some(std::sync::Arc::new(strict)));
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info("/cam", q)).unwrap();
    let rid = sim
        .p(r)
        .create_reader(now, info("/cam", Qos::new().best_effort()));
    sim.pump(w);
    sim.pump(r);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.nodes[w].participant.matched_count(wid), 0);
    sim.wire = Some(Vec::new());
    for k in 0..16 {
        sim.write(w, wid, k, sample(k, 100), Duration::from_secs(5));
    }
    sim.run_for(Duration::from_secs(1));
    let wire = sim.wire.take().unwrap();
    assert!(
        !kinds(&wire).contains(&(SubmessageKind::SealedBatch as u8)),
        "a sealed batch went out"
    );
    assert!(sim.payloads(r, rid).is_empty());
    assert_eq!(sim.nodes[r].participant.stats().under_protected, 0);
    for i in [w, r] {
        let reported = sim.nodes[i]
            .events
            .iter()
            .filter(|e| {
                matches!(e, tether_core::Event::IncompatibleQos(q)
                    if q.policy == tether_core::QosPolicy::Protection)
            })
            .count();
        assert_eq!(reported, 1, "node {i}");
    }
}

/// A writer that does not batch sends each sample in a sealed datagram of its own (a
/// SEALED_BATCH of one): one AEAD for the sample and the datagram, no AUTH_TAG, nothing in
/// clear; its readers get every sample, in order.
#[test]
fn unbatched_samples_leave_in_sealed_datagrams_without_a_tag() {
    for q in [Qos::new().keep_all(), Qos::new().best_effort()] {
        let (mut sim, _, wid, rids) = realm(7, Link::perfect(), 2, q, q, |s| s);
        sim.wire = Some(Vec::new());
        let n = 20u64;
        for k in 0..n {
            sim.write(0, wid, k, sample(k, 64), Duration::from_secs(5));
            sim.run_for(Duration::from_millis(2));
        }
        assert!(
            sim.run_until(Duration::from_secs(10), |s| delivered_in_order(
                s, &rids, n, 64
            ))
        );
        let ws = sim.nodes[0].participant.stats();
        assert_eq!((ws.batches_sealed, ws.samples_sealed), (n, n));
        let wire = sim.wire.take().unwrap();
        assert!(!plaintext_on(&wire));
        let from_writer: Vec<&Bytes> = wire
            .iter()
            .filter(|d| {
                d[8..16]
                    == sim.nodes[0]
                        .participant
                        .config()
                        .participant
                        .0
                        .to_le_bytes()
            })
            .filter(|d| {
                kinds(std::slice::from_ref(*d)).contains(&(SubmessageKind::SealedBatch as u8))
            })
            .collect();
        assert_eq!(
            from_writer.len() as u64,
            n * 2,
            "one datagram per sample and reader"
        );
        for d in from_writer {
            assert!(
                !kinds(std::slice::from_ref(d)).contains(&(SubmessageKind::AuthTag as u8)),
                "a sealed datagram carries no AUTH_TAG"
            );
        }
    }
}

/// An outsider without keys forges sealed datagrams under the writer's id (any fields, a
/// made-up tag and ciphertext) and replays genuine ones: nothing it sends is delivered or
/// acted on, every copy is a counted drop, and the stream goes on complete.
#[test]
fn forged_and_replayed_sealed_datagrams_change_nothing() {
    let q = Qos::new().keep_all();
    let (mut sim, _, wid, rids) = realm(8, Link::perfect(), 1, q, q, |s| s);
    let (r, rid) = rids[0];
    let writer_pid = sim.nodes[0].participant.config().participant;
    let from = sim.nodes[0].addr;
    let dgs = intercept(&mut sim, wid, 0, 1);
    let genuine = dgs.last().expect("the sample's datagram").clone();
    tether_testkit::realm::inject(&mut sim, r, from, &genuine);
    assert_eq!(sim.payloads(r, rid).len(), 1);
    let before = sim.nodes[r].participant.stats().clone();
    // Replayed, from the writer's address and from the outsider's own.
    for src in [from, tether_testkit::realm::attacker()] {
        tether_testkit::realm::inject(&mut sim, r, src, &genuine);
    }
    // Forged: every epoch the writer could be at, the next sequence numbers, any tag.
    let tag = [0x5a; 16];
    let ct = [0x11u8; 12 + 64];
    for (epoch, first_seq) in [(1u32, 2u64), (1, 3), (2, 2), (u32::MAX, 2)] {
        let d = tether_testkit::realm::forged(
            writer_pid,
            &[
                Submessage::Heartbeat(tether_wire::HeartbeatRepr {
                    writer: wid,
                    reader: EntityId::ALL,
                    first: 1,
                    last: 1_000_000,
                    count: 1_000,
                    final_: false,
                }),
                Submessage::SealedBatch(tether_wire::SealedBatchRepr {
                    writer: wid,
                    reader: EntityId::ALL,
                    first_seq,
                    count: 1,
                    epoch,
                    tag: &tag,
                    ciphertext: &ct,
                }),
            ],
        );
        tether_testkit::realm::inject(&mut sim, r, tether_testkit::realm::attacker(), &d);
        tether_testkit::realm::inject(&mut sim, r, from, &d);
    }
    let after = sim.nodes[r].participant.stats().clone();
    assert_eq!(
        sim.payloads(r, rid).len(),
        1,
        "a replay or forgery delivered"
    );
    assert_eq!(
        after.datagrams_authenticated,
        before.datagrams_authenticated
    );
    assert_eq!(after.addresses_moved, before.addresses_moved);
    assert!(after.replayed >= before.replayed + 2);
    assert!(after.open_failed >= before.open_failed + 2);
    // The rest of the stream: everything, in order.
    for k in 1..30 {
        sim.write(0, wid, k, sample(k, 300), Duration::from_secs(5));
    }
    assert!(
        sim.run_until(Duration::from_secs(10), |s| delivered_in_order(
            s, &rids, 30, 300
        ))
    );
}

/// A driver that owns its datagrams hands them over (`handle_datagram_owned`): a sealed
/// one is opened where it lies. The same refusals as opened into a buffer of its own, and
/// the genuine one delivers once.
#[test]
fn a_sealed_datagram_opened_where_it_lies_is_checked_the_same() {
    let q = batching(Qos::new().keep_all(), 8);
    let (mut sim, _, wid, rids) = realm(9, Link::perfect(), 1, q, Qos::new().keep_all(), |s| s);
    let (r, rid) = rids[0];
    let from = sim.nodes[0].addr;
    let dgs = intercept(&mut sim, wid, 0, 8);
    let genuine = dgs
        .iter()
        .find(|d| {
            Datagram::parse(d)
                .unwrap()
                .submessages()
                .any(|m| matches!(m, Ok(Submessage::SealedBatch(_))))
        })
        .expect("the batch")
        .clone();
    let body = sealed_batch_body(&genuine);
    let ct = body + tether_wire::SEALED_BATCH_FIXED_LEN;
    let owned = |sim: &mut Sim, d: &[u8]| {
        let now = sim.now;
        sim.p(r)
            .handle_datagram_owned(now, from, bytes::BytesMut::from(d));
        sim.pump(r);
    };
    for at in [ct + 3, body + 24, body + 4] {
        let mut v = genuine.to_vec();
        v[at] ^= 1;
        let before = sim.nodes[r].participant.stats().open_failed;
        owned(&mut sim, &v);
        assert_eq!(sim.nodes[r].participant.stats().open_failed, before + 1);
        assert!(sim.payloads(r, rid).is_empty());
    }
    owned(&mut sim, &genuine);
    assert!(delivered_in_order(&sim, &rids, 8, 300));
    let replayed = sim.nodes[r].participant.stats().replayed;
    owned(&mut sim, &genuine);
    assert_eq!(sim.nodes[r].participant.stats().replayed, replayed + 1);
    assert_eq!(sim.payloads(r, rid).len(), 8);
}
