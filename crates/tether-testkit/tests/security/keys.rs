//! Sender keys and their epochs: a new epoch when readers leave or are revoked (one for
//! readers leaving together), before the usage limit; a bounded number kept by readers;
//! key requests answered without a new key agreement.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tether_core::{EntityId, Security};
use tether_crypto::{CaKey, RevocationList};
use tether_testkit::{Link, Sim};

use crate::helpers::{Member, NOW, info, member, node, secret};

/// Adds a node whose writers re-key after `limit` seals.
fn node_limited(sim: &mut Sim, m: Member, ca: &CaKey, limit: u64) -> usize {
    let now = sim.now;
    let ca_public = ca.public();
    let rs = secret(ca);
    sim.add_node_with(move |c| {
        c.security = Some(Arc::new(
            Security::new(m.identity, m.credential, ca_public, rs, None, now, NOW)
                .with_usage_limit(limit),
        ));
    })
}

/// The epoch a sealed DATA datagram's payload names, if it is one (the sample is the
/// datagram's last bytes: epoch, ciphertext of `len` bytes, tag).
fn epoch_of(dg: &[u8], len: usize) -> Option<u32> {
    // A sample in a sealed datagram of its own (`docs/wire.md#sealed_batch`).
    if let Some(ct) = tether_wire::sealed_batch_ciphertext(dg, dg.len()) {
        let x = tether_wire::SealedBatchRepr::from_body(
            &dg[ct - tether_wire::SEALED_BATCH_FIXED_LEN..],
        )
        .ok()?;
        return (x.ciphertext.len() == tether_wire::BATCH_ENTRY_OVERHEAD + len).then_some(x.epoch);
    }
    // A sealed DATA: its payload ends with the epoch, the ciphertext and the tag.
    let d = tether_wire::Datagram::parse(dg).ok()?;
    d.submessages().find_map(|m| match m {
        Ok(tether_wire::Submessage::Data(x)) => {
            let at = x.payload.len().checked_sub(4 + len + 16)?;
            Some(u32::from_le_bytes(x.payload[at..at + 4].try_into().ok()?))
        }
        _ => None,
    })
}

/// A writer ("robot", serial 1) on /t and `n` readers (serials 2, 3, …), each on its own
/// node in one realm, matched. Returns the writer's node and id and each reader's.
fn writer_and_readers(
    sim: &mut Sim,
    ca: &CaKey,
    n: u64,
) -> (usize, EntityId, Vec<(usize, EntityId)>) {
    let w = node(sim, Some(member(ca, 1, "robot", &["/**"], &[])), ca, None);
    let nodes: Vec<usize> = (0..n)
        .map(|k| {
            let m = member(ca, 2 + k, &format!("r{k}"), &[], &["/**"]);
            node(sim, Some(m), ca, None)
        })
        .collect();
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info("/t")).unwrap();
    let readers: Vec<(usize, EntityId)> = nodes
        .iter()
        .map(|&i| (i, sim.p(i).create_reader(now, info("/t"))))
        .collect();
    sim.pump(w);
    for &i in &nodes {
        sim.pump(i);
    }
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.nodes[w].participant.matched_count(wid) == n as usize
    }));
    (w, wid, readers)
}

/// Writes sample `k` (50 bytes of `k`) on writer `wid` of node `w`.
fn put50(sim: &mut Sim, w: usize, wid: EntityId, k: u64) {
    let now = sim.now;
    sim.p(w)
        .write(now, wid, k, Bytes::from(vec![k as u8; 50]))
        .unwrap();
    sim.pump(w);
}

/// A reader that leaves, or is revoked, makes its writers move to a new epoch: the readers
/// that stay get the new key and keep reading; the one that left cannot open what follows,
/// even holding every datagram sent to the others.
#[test]
fn leaving_and_revoked_readers_cause_a_new_epoch() {
    for revoke in [false, true] {
        let mut sim = Sim::new(15, Link::perfect());
        let ca = CaKey::generate();
        // Reader a stays; reader b (serial 3) leaves or is revoked.
        let (w, wid, rs) = writer_and_readers(&mut sim, &ca, 2);
        let [(a, ra), (b, rb)] = [rs[0], rs[1]];
        let put = |sim: &mut Sim, k: u64| {
            put50(sim, w, wid, k);
            sim.run_for(Duration::from_millis(20));
        };
        for k in 0..3 {
            put(&mut sim, k);
        }
        assert_eq!(sim.seqs(b, rb).len(), 3);
        if revoke {
            let now = sim.now;
            sim.p(w)
                .set_revocations(now, RevocationList::issue(&ca, 1, NOW, vec![3]))
                .unwrap();
        } else {
            let now = sim.now;
            sim.p(b).delete_endpoint(now, rb);
            sim.pump(b);
        }
        sim.run_for(Duration::from_secs(2));
        assert_eq!(
            sim.nodes[w].participant.stats().rekeys,
            1,
            "revoke {revoke}"
        );
        assert_eq!(sim.nodes[w].participant.matched_count(wid), 1);
        sim.wire = Some(Vec::new());
        for k in 3..6 {
            put(&mut sim, k);
        }
        sim.run_for(Duration::from_secs(2));
        assert_eq!(
            sim.seqs(a, ra),
            (1..=6).collect::<Vec<_>>(),
            "revoke {revoke}"
        );
        assert_eq!(sim.nodes[a].participant.stats().keys_received, 2);
        // What was sent to the reader that stayed is sealed under epoch 2, and the one that
        // left cannot open it.
        let wire = sim.wire.take().unwrap();
        let sealed: Vec<&Bytes> = wire.iter().filter(|d| epoch_of(d, 50) == Some(2)).collect();
        assert!(
            sealed.len() >= 3,
            "revoke {revoke}: {} epoch-2 samples",
            sealed.len()
        );
        let from = sim.nodes[w].addr;
        let before = sim.seqs(b, rb).len();
        for d in sealed {
            let now = sim.now;
            sim.p(b).handle_datagram(now, from, d);
        }
        sim.pump(b);
        if !revoke {
            // b deleted its reader: nothing to deliver to anyway; its node holds no key for
            // epoch 2 either.
            assert_eq!(sim.nodes[b].participant.stats().keys_received, 1);
        } else {
            assert_eq!(
                sim.seqs(b, rb).len(),
                before,
                "the revoked reader read epoch 2"
            );
            assert_eq!(sim.nodes[b].participant.stats().keys_received, 1);
        }
    }
}

/// A writer whose key re-keys after `limit` seals, a reader, matched, and `n` samples
/// written 5 ms apart, every one read. Returns the sim and the writer's and reader's nodes.
fn read_through_rekeys(seed: u64, link: Link, limit: u64, n: u64) -> (Sim, usize, usize) {
    let mut sim = Sim::new(seed, link);
    let ca = CaKey::generate();
    let w = node_limited(&mut sim, member(&ca, 1, "robot", &["/**"], &[]), &ca, limit);
    let r = node(
        &mut sim,
        Some(member(&ca, 2, "viewer", &[], &["/**"])),
        &ca,
        None,
    );
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info("/t")).unwrap();
    let rid = sim.p(r).create_reader(now, info("/t"));
    sim.pump(w);
    sim.pump(r);
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.nodes[w].participant.matched_count(wid) == 1
    }));
    for k in 0..n {
        let now = sim.now;
        sim.p(w)
            .write(now, wid, k, Bytes::from(vec![k as u8; 40]))
            .unwrap();
        sim.pump(w);
        sim.run_for(Duration::from_millis(5));
    }
    assert!(
        sim.run_until(Duration::from_secs(60), |s| s.seqs(r, rid).len()
            == n as usize)
    );
    (sim, w, r)
}

/// Writers move to a new epoch before their suite's usage limit (here lowered to 5 seals),
/// and readers follow without losing a sample.
#[test]
fn keys_rotate_before_their_usage_limit() {
    let (sim, w, r) = read_through_rekeys(16, Link::lossy(0.05), 5, 17);
    assert_eq!(sim.nodes[w].participant.stats().rekeys, 3);
    assert!(sim.nodes[r].participant.stats().keys_received >= 4);
}

/// A reader keeps only its writers' newest epochs: a writer re-keying every other sample
/// (usage limit 2) for 40 samples moves through 20 epochs, and the reader, which reads every
/// sample, holds no more than `KEPT_EPOCHS` keys for it.
#[test]
fn readers_keep_a_bounded_number_of_epochs() {
    let (sim, w, r) = read_through_rekeys(18, Link::perfect(), 2, 40);
    assert!(sim.nodes[w].participant.stats().rekeys >= 19);
    assert!(sim.nodes[r].participant.stats().keys_received >= 20);
    let held = sim.nodes[r].participant.sender_keys_held();
    assert!(
        (1..=tether_core::KEPT_EPOCHS).contains(&held),
        "{held} keys held"
    );
}

/// Key agreement is pairwise work once per reader and epoch: a reader asking for the key
/// again and again is answered from the wrapped copy.
#[test]
fn key_requests_do_not_repeat_key_agreement() {
    let mut sim = Sim::new(18, Link::perfect());
    let ca = CaKey::generate();
    let w = node(
        &mut sim,
        Some(member(&ca, 1, "robot", &["/**"], &[])),
        &ca,
        None,
    );
    let r = node(
        &mut sim,
        Some(member(&ca, 2, "viewer", &[], &["/**"])),
        &ca,
        None,
    );
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info("/t")).unwrap();
    let rid = sim.p(r).create_reader(now, info("/t"));
    sim.pump(w);
    sim.pump(r);
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.nodes[r].participant.stats().keys_received == 1
    }));
    assert_eq!(sim.nodes[w].participant.stats().keys_wrapped, 1);
    let mut req = Vec::new();
    tether_wire::DatagramBuilder::new(
        &mut req,
        tether_wire::Header {
            domain: 0,
            participant: sim.nodes[r].participant.id(),
        },
    )
    .push(&tether_wire::Submessage::KeyRequest(
        tether_wire::KeyRequestRepr {
            reader: rid,
            writer: wid,
            epoch: 1,
        },
    ))
    .unwrap();
    let from = sim.nodes[r].addr;
    for _ in 0..100 {
        let now = sim.now;
        let req = sim.p(r).retag(&req);
        sim.p(w).handle_datagram(now, from, &req);
    }
    sim.pump(w);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.nodes[w].participant.stats().keys_wrapped, 1);
    assert_eq!(sim.nodes[r].participant.stats().keys_received, 101);
}

/// Readers that leave together (a host shutting its sessions down) share one new epoch: a
/// re-key each would cost every writer N + (N - 1) + … key wraps. A sample written right
/// after a departure, before the re-key timer, is still sealed under the new epoch.
#[test]
fn readers_leaving_together_share_one_new_epoch() {
    let mut sim = Sim::new(16, Link::perfect());
    let ca = CaKey::generate();
    let (w, wid, rs) = writer_and_readers(&mut sim, &ca, 5);
    let readers: Vec<usize> = rs.iter().map(|r| r.0).collect();
    let rids: Vec<EntityId> = rs.iter().map(|r| r.1).collect();
    let put = |sim: &mut Sim, k: u64| put50(sim, w, wid, k);
    put(&mut sim, 0);
    sim.run_for(Duration::from_millis(50));
    // Four readers leave in the same instant.
    for k in 1..5 {
        let now = sim.now;
        let (i, r) = (readers[k], rids[k]);
        sim.p(i).delete_endpoint(now, r);
        sim.pump(i);
    }
    assert!(sim.run_until(Duration::from_secs(1), |s| {
        s.nodes[w].participant.matched_count(wid) == 1
    }));
    // Their departures wait for the re-key timer...
    assert_eq!(sim.nodes[w].participant.stats().rekeys, 0);
    // ...but a sample written now is sealed under the new epoch, not one they hold.
    sim.wire = Some(Vec::new());
    put(&mut sim, 1);
    assert_eq!(sim.nodes[w].participant.stats().rekeys, 1);
    sim.run_for(Duration::from_secs(2));
    let wire = sim.wire.take().unwrap();
    assert!(wire.iter().any(|d| epoch_of(d, 50) == Some(2)));
    assert!(!wire.iter().any(|d| epoch_of(d, 50) == Some(1)));
    // One new epoch for all four, and the reader that stayed reads on.
    assert_eq!(sim.nodes[w].participant.stats().rekeys, 1);
    assert_eq!(sim.seqs(readers[0], rids[0]), vec![1, 2]);
    assert_eq!(sim.nodes[readers[0]].participant.stats().keys_received, 2);

    // With no write, the timer re-keys: one more departure, one more epoch.
    let now = sim.now;
    sim.p(readers[0]).delete_endpoint(now, rids[0]);
    sim.pump(readers[0]);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.nodes[w].participant.matched_count(wid), 0);
    assert_eq!(sim.nodes[w].participant.stats().rekeys, 2);
}
