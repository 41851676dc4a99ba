//! Signed modes: per-topic protection, `sign` and `encrypt+sign`, one signature per batch,
//! and what a forged, stripped or missing signature delivers (nothing).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tether_core::{EndpointInfo, EntityId, Protection, Qos, Security};
use tether_crypto::CaKey;
use tether_testkit::{Link, Sim};

use crate::helpers::{Member, NOW, contains, info, member, secret, untagged};

/// Per-topic modes: `sign` adds the writer's Ed25519 signature (origin authentication even
/// toward other members, who hold the group key), `encrypt+sign` both; a bad signature, or a
/// signed sample stripped of its signature to pass as merely sealed, is refused.
#[test]
fn signed_modes_and_per_topic_overrides() {
    let mut sim = Sim::new(17, Link::perfect());
    sim.wire = Some(Vec::new());
    let ca = CaKey::generate();
    let now = sim.now;
    let (ca_public, rs) = (ca.public(), secret(&ca));
    let m = member(&ca, 1, "robot", &["/**"], &[]);
    let w = sim.add_node_with(move |c| {
        let p = |s: &str| s.parse::<Protection>().unwrap();
        c.security = Some(Arc::new(
            Security::new(m.identity, m.credential, ca_public, rs, None, now, NOW).with_protection(
                p("encrypt"),
                vec![
                    ("/cmd/**".into(), p("encrypt+sign")),
                    ("/log/**".into(), p("sign")),
                ],
            ),
        ));
    });
    // The reader's policy is the realm's: the same modes per topic.
    let m = member(&ca, 2, "viewer", &[], &["/**"]);
    let (ca_public, rs) = (ca.public(), secret(&ca));
    let r = sim.add_node_with(move |c| {
        let p = |s: &str| s.parse::<Protection>().unwrap();
        c.security = Some(Arc::new(
            Security::new(m.identity, m.credential, ca_public, rs, None, now, NOW).with_protection(
                p("encrypt"),
                vec![
                    ("/cmd/**".into(), p("encrypt+sign")),
                    ("/log/**".into(), p("sign")),
                ],
            ),
        ));
    });
    let topics = ["/cmd/go", "/log/text", "/data"];
    let now = sim.now;
    let ws: Vec<EntityId> = topics
        .iter()
        .map(|t| {
            sim.p(w)
                .create_writer(
                    now,
                    EndpointInfo {
                        qos: Qos::new().best_effort(),
                        ..info(t)
                    },
                )
                .unwrap()
        })
        .collect();
    let rids: Vec<EntityId> = topics
        .iter()
        .map(|t| {
            sim.p(r).create_reader(
                now,
                EndpointInfo {
                    qos: Qos::new().best_effort(),
                    ..info(t)
                },
            )
        })
        .collect();
    sim.pump(w);
    sim.pump(r);
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        ws.iter()
            .all(|x| s.nodes[w].participant.matched_count(*x) == 1)
            && s.nodes[r].participant.stats().keys_received == 2
    }));
    for (k, x) in ws.iter().enumerate() {
        let now = sim.now;
        let body = format!("MARK-{}", topics[k]);
        sim.p(w).write(now, *x, 1, Bytes::from(body)).unwrap();
        sim.pump(w);
    }
    sim.run_for(Duration::from_secs(1));
    for (k, rid) in rids.iter().enumerate() {
        assert_eq!(
            sim.payloads(r, *rid),
            vec![Bytes::from(format!("MARK-{}", topics[k]))],
            "{}",
            topics[k]
        );
    }
    let st = sim.nodes[w].participant.stats().clone();
    assert_eq!(st.samples_signed, 2, "cmd and log are signed");
    assert_eq!(st.samples_sealed, 2, "cmd and data are sealed");
    let wire = sim.wire.take().unwrap();
    assert!(
        contains(&wire, b"MARK-/log/text"),
        "sign alone does not hide"
    );
    assert!(!contains(&wire, b"MARK-/cmd/go") && !contains(&wire, b"MARK-/data"));
    // Tamper with a signed sample: a flipped signature byte, or the signature stripped and
    // the protection byte changed to "sealed only".
    let now = sim.now;
    sim.p(w)
        .write(now, ws[0], 2, Bytes::from_static(b"turn"))
        .unwrap();
    let dg: Vec<u8> = std::iter::from_fn(|| sim.p(w).poll_transmit())
        .map(|t| untagged(&t.contiguous()))
        .max_by_key(|d| d.len())
        .unwrap();
    let from = sim.nodes[w].addr;
    // Forged as a member holding the writer's control key could (`retag`): the sample's
    // signature still refuses it.
    let mut bad_sig = dg.clone();
    let n = bad_sig.len();
    bad_sig[n - 1] ^= 1;
    let now = sim.now;
    let bad_sig = sim.p(w).retag(&bad_sig);
    sim.p(r).handle_datagram(now, from, &bad_sig);
    assert_eq!(sim.nodes[r].participant.stats().signature_failed, 1);
    // Stripped: drop the 64-byte signature, fix the submessage length, protection 1.
    let mut stripped = dg[..n - 64].to_vec();
    let payload_len = 1 + 4 + 4 + 16; // protection, epoch, "turn", tag
    let prot_at = stripped.len() - payload_len;
    assert_eq!(stripped[prot_at], 3, "encrypt+sign");
    stripped[prot_at] = 1;
    let sub_len_at = stripped.len() - payload_len - 24 - 4 + 2;
    let l = u16::from_le_bytes([stripped[sub_len_at], stripped[sub_len_at + 1]]) - 64;
    stripped[sub_len_at..sub_len_at + 2].copy_from_slice(&l.to_le_bytes());
    // Refused by the reader's policy (the topic is signed) before the seal is even tried;
    // a reader that did try would fail to open it (the protection byte is in the AAD).
    let refused = |s: &Sim| {
        let x = s.nodes[r].participant.stats();
        x.open_failed + x.under_protected
    };
    let before = refused(&sim);
    let stripped = sim.p(w).retag(&stripped);
    sim.p(r).handle_datagram(now, from, &stripped);
    assert_eq!(refused(&sim), before + 1, "downgrade not refused");
    sim.pump(r);
    assert_eq!(
        sim.payloads(r, rids[0]).len(),
        1,
        "a tampered sample was delivered"
    );
    // The genuine one is delivered.
    let dg = sim.p(w).retag(&dg);
    sim.p(r).handle_datagram(now, from, &dg);
    sim.pump(r);
    assert_eq!(sim.payloads(r, rids[0]).len(), 2);
    // Anyone able to send under the writer's id could try a plain sample (protection 0) on
    // every topic: the reader's policy asks more of each, so none is delivered.
    let before = sim.nodes[r].participant.stats().under_protected;
    let wpid = sim.nodes[w].participant.id();
    for (k, x) in ws.iter().enumerate() {
        let mut dg = Vec::new();
        tether_wire::DatagramBuilder::new(
            &mut dg,
            tether_wire::Header {
                domain: 0,
                participant: wpid,
            },
        )
        .push(&tether_wire::Submessage::Data(tether_wire::DataRepr {
            writer: *x,
            reader: EntityId::ALL,
            seq: 10,
            timestamp_ns: 1,
            payload: b"\0EVIL",
        }))
        .unwrap();
        let dg = sim.p(w).retag(&dg);
        sim.p(r).handle_datagram(now, from, &dg);
        sim.pump(r);
        assert!(
            !sim.payloads(r, rids[k]).iter().any(|p| &p[..] == b"EVIL"),
            "{}: a plain sample was delivered",
            topics[k]
        );
    }
    assert_eq!(sim.nodes[r].participant.stats().under_protected - before, 3);
}

/// A node whose writers protect samples as `mode` on every topic.
fn node_mode(sim: &mut Sim, m: Member, ca: &CaKey, mode: &str) -> usize {
    let now = sim.now;
    let (ca_public, rs) = (ca.public(), secret(ca));
    let prot: Protection = mode.parse().unwrap();
    sim.add_node_with(move |c| {
        c.security = Some(Arc::new(
            Security::new(m.identity, m.credential, ca_public, rs, None, now, NOW)
                .with_protection(prot, vec![]),
        ));
    })
}

fn batching(max_samples: u32) -> Qos {
    Qos::new().keep_all().batching(tether_core::Batching {
        max_bytes: 8000,
        max_samples,
        max_delay: Duration::from_millis(2),
    })
}

/// In `sign` modes a batching writer signs each batch once (one BATCH_SIG), not each
/// sample; a sample too large for a batch, and every sample repaired alone, carries its own
/// signature. Under loss every reader still gets every sample, intact.
#[test]
fn batches_are_signed_once_in_sign_modes() {
    for (seed, mode, loss) in [
        (51u64, "sign", 0.0),
        (52, "encrypt+sign", 0.0),
        (53, "sign", 0.1),
        (54, "encrypt+sign", 0.1),
    ] {
        let link = if loss == 0.0 {
            Link::perfect()
        } else {
            Link::lossy(loss)
        };
        let mut sim = Sim::new(seed, link);
        let ca = CaKey::generate();
        let w = node_mode(&mut sim, member(&ca, 1, "robot", &["/**"], &[]), &ca, mode);
        let rs: Vec<usize> = (0..2)
            .map(|k| node_mode(&mut sim, member(&ca, 10 + k, "v", &[], &["/**"]), &ca, mode))
            .collect();
        let now = sim.now;
        let wid = sim
            .p(w)
            .create_writer(
                now,
                EndpointInfo {
                    qos: batching(8),
                    ..info("/b")
                },
            )
            .unwrap();
        let rids: Vec<EntityId> = rs
            .iter()
            .map(|&r| {
                let now = sim.now;
                sim.p(r).create_reader(now, info("/b"))
            })
            .collect();
        sim.pump(w);
        // Both ends matched. (A reader's first key may be lost on the way: it asks for it
        // when the first sealed sample comes.)
        assert!(sim.run_until(Duration::from_secs(30), |s| {
            s.nodes[w].participant.matched_count(wid) == 2
                && rs
                    .iter()
                    .zip(&rids)
                    .all(|(&r, &rid)| s.nodes[r].participant.matched_count(rid) == 1)
        }));
        let sample = |k: u64| -> Bytes {
            let n = if k == 17 { 100_000 } else { 200 };
            let mut v = vec![(k % 250) as u8; n];
            v[..8].copy_from_slice(&k.to_le_bytes());
            Bytes::from(v)
        };
        let n = 40u64;
        for k in 0..n {
            let now = sim.now;
            sim.p(w).write(now, wid, k, sample(k)).unwrap();
            sim.pump(w);
        }
        let ok = sim.run_until(Duration::from_secs(120), |s| {
            rs.iter()
                .zip(&rids)
                .all(|(&r, &rid)| s.seqs(r, rid).len() == n as usize)
        });
        assert!(ok, "seed {seed} {mode}: not every sample arrived");
        for (&r, &rid) in rs.iter().zip(&rids) {
            for (k, p) in sim.payloads(r, rid).iter().enumerate() {
                assert!(*p == sample(k as u64), "seed {seed}: sample {k} differs");
            }
            assert!(sim.nodes[r].participant.stats().signatures_verified >= 1);
        }
        let st = sim.nodes[w].participant.stats();
        assert_eq!(st.samples_signed, n, "seed {seed}");
        if loss == 0.0 {
            // 39 small samples in batches of at most 8 (the large one ends the batch
            // before it early), plus the large one's own signature.
            assert!(
                st.signatures_made <= 8,
                "seed {seed} {mode}: {} signatures for {n} samples",
                st.signatures_made
            );
            for &r in &rs {
                assert_eq!(sim.nodes[r].participant.stats().signature_failed, 0);
            }
        }
    }
}

/// A batch whose signature is altered, or that arrives without its BATCH_SIG, delivers
/// nothing; nor does an entry taken out of it and sent alone. The genuine one delivers all.
#[test]
fn a_batch_without_its_signature_delivers_nothing() {
    use tether_wire::{Datagram, DatagramBuilder, Submessage};
    let mut sim = Sim::new(55, Link::perfect());
    let ca = CaKey::generate();
    let w = node_mode(
        &mut sim,
        member(&ca, 1, "robot", &["/**"], &[]),
        &ca,
        "sign",
    );
    let r = node_mode(&mut sim, member(&ca, 2, "v", &[], &["/**"]), &ca, "sign");
    let now = sim.now;
    let wid = sim
        .p(w)
        .create_writer(
            now,
            EndpointInfo {
                qos: batching(4).best_effort(),
                ..info("/b")
            },
        )
        .unwrap();
    let rid = sim.p(r).create_reader(
        now,
        EndpointInfo {
            qos: Qos::new().best_effort(),
            ..info("/b")
        },
    );
    sim.pump(w);
    sim.pump(r);
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.nodes[w].participant.matched_count(wid) == 1
            && s.nodes[r].participant.matched_count(rid) == 1
    }));
    let now = sim.now;
    for k in 0..4u64 {
        sim.p(w)
            .write(now, wid, k, Bytes::from(format!("entry {k}")))
            .unwrap();
    }
    let dg = std::iter::from_fn(|| sim.p(w).poll_transmit())
        .map(|t| Bytes::from(untagged(&t.contiguous())))
        .find(|d| {
            Datagram::parse(d).is_ok_and(|x| {
                x.submessages()
                    .any(|m| matches!(m, Ok(Submessage::BatchSig(_))))
            })
        })
        .expect("a signed batch");
    let d = Datagram::parse(&dg).unwrap();
    let subs: Vec<Submessage<'_>> = d.submessages().map(|m| m.unwrap()).collect();
    let build = |subs: &[Submessage<'_>]| -> Bytes {
        let mut out = Vec::new();
        let mut b = DatagramBuilder::new(&mut out, d.header());
        for m in subs {
            b.push(m).unwrap();
        }
        Bytes::from(out)
    };
    let mut bad_sig = subs
        .iter()
        .find_map(|m| match m {
            Submessage::BatchSig(x) => Some(*x.signature),
            _ => None,
        })
        .unwrap();
    bad_sig[10] ^= 1;
    let forged: Vec<Submessage<'_>> = subs
        .iter()
        .map(|m| match m {
            Submessage::BatchSig(x) => Submessage::BatchSig(tether_wire::BatchSigRepr {
                signature: &bad_sig,
                ..*x
            }),
            _ => *m,
        })
        .collect();
    let stripped: Vec<Submessage<'_>> = subs
        .iter()
        .filter(|m| !matches!(m, Submessage::BatchSig(_)))
        .copied()
        .collect();
    // One entry alone, in a DATA (protection bit 2 still set).
    let alone = subs
        .iter()
        .find_map(|m| match m {
            Submessage::Batch(b) => b.samples().next().map(|(seq, ts, p)| {
                Submessage::Data(tether_wire::DataRepr {
                    writer: b.writer,
                    reader: b.reader,
                    seq,
                    timestamp_ns: ts,
                    payload: p,
                })
            }),
            _ => None,
        })
        .unwrap();
    let from = sim.nodes[w].addr;
    for bad in [build(&forged), build(&stripped), build(&[alone])] {
        let now = sim.now;
        let bad = sim.p(w).retag(&bad);
        sim.p(r).handle_datagram(now, from, &bad);
        sim.pump(r);
    }
    assert!(
        sim.seqs(r, rid).is_empty(),
        "an unsigned batch entry was delivered"
    );
    assert_eq!(sim.nodes[r].participant.stats().signature_failed, 4 + 4 + 1);
    let now = sim.now;
    let dg = sim.p(w).retag(&dg);
    sim.p(r).handle_datagram(now, from, &dg);
    sim.pump(r);
    assert_eq!(sim.seqs(r, rid), vec![1, 2, 3, 4]);
    assert_eq!(sim.nodes[r].participant.stats().signatures_verified, 1);
}
