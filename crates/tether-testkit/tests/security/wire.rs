//! What a secure realm puts on the wire: topic ids, never names; bytes its seed decides;
//! datagrams that fit the path with their AUTH_TAG.

use std::time::Duration;

use bytes::Bytes;
use tether_core::{EndpointInfo, Qos};
use tether_crypto::{CaKey, Credential, Identity};
use tether_testkit::{Link, Sim};

use crate::helpers::{Member, NOW, exchange, info, member, node};

/// In a secure realm, topic names and types never appear on the wire, only ids; members of
/// the realm still match on them, and members of another realm (another secret) do not.
#[test]
fn names_never_appear_on_the_wire() {
    let ca = CaKey::generate();
    let mut sim = Sim::new(9, Link::perfect());
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
    let wid = sim
        .p(w)
        .create_writer(
            now,
            EndpointInfo {
                topic: "/secret/plans".into(),
                type_name: "nav_msgs/Path".into(),
                partitions: vec![],
                qos: Qos::new().keep_all(),
            },
        )
        .unwrap();
    let rid = sim.p(r).create_reader(
        now,
        EndpointInfo {
            topic: "/secret/plans".into(),
            type_name: "nav_msgs/Path".into(),
            partitions: vec![],
            qos: Qos::new().keep_all(),
        },
    );
    // Every datagram either side sends, over the whole exchange, is inspected.
    let mut wire: Vec<Bytes> = Vec::new();
    let deadline = sim.now + Duration::from_secs(10);
    let mut wrote = false;
    while sim.now < deadline {
        for i in [w, r] {
            while let Some(t) = sim.p(i).poll_transmit() {
                let d = t.contiguous();
                wire.push(d.clone());
                let to = if i == w { r } else { w };
                let from = sim.nodes[i].addr;
                let now = sim.now;
                sim.p(to).handle_datagram(now, from, &d);
            }
        }
        if !wrote && sim.nodes[w].participant.matched_count(wid) == 1 {
            let now = sim.now;
            sim.p(w)
                .write(now, wid, 1, Bytes::from_static(b"go left"))
                .unwrap();
            wrote = true;
        }
        sim.now += Duration::from_millis(10);
        for i in [w, r] {
            let now = sim.now;
            sim.p(i).handle_timeout(now);
        }
    }
    assert!(wrote, "never matched");
    assert_eq!(sim.nodes[r].participant.matched_count(rid), 1);
    let all: Vec<u8> = wire.iter().flat_map(|d| d.iter().copied()).collect();
    for needle in [&b"/secret/plans"[..], b"nav_msgs/Path", b"secret"] {
        assert!(
            !all.windows(needle.len()).any(|x| x == needle),
            "{} on the wire",
            String::from_utf8_lossy(needle)
        );
    }
    // Another realm's members derive other ids: they never match, even with valid keys of
    // their own realm and the same topic.
    let other = CaKey::generate();
    let mut sim = Sim::new(10, Link::perfect());
    let w = node(
        &mut sim,
        Some(member(&ca, 1, "robot", &["/**"], &[])),
        &ca,
        None,
    );
    let r = node(
        &mut sim,
        Some(member(&other, 1, "spy", &[], &["/**"])),
        &other,
        None,
    );
    let (wid, rid, n) = exchange(&mut sim, w, r, "/t");
    assert_eq!((n, sim.nodes[w].participant.matched_count(wid)), (0, 0));
    assert_eq!(sim.nodes[r].participant.matched_count(rid), 0);
}

/// Randomness is an input: two runs of a secure realm from the same seed put the same bytes
/// on the wire (authentication challenges, sender keys, key-wrap nonces, sealed samples),
/// and another seed puts other bytes there. The members' keys are fixed inputs here, as a
/// key store on disk would be.
#[test]
fn a_secure_run_is_determined_by_its_seed() {
    let run = |seed: u64| -> Vec<Bytes> {
        let mut sim = Sim::new(seed, Link::lossy(0.1));
        sim.wire = Some(Vec::new());
        let ca = CaKey::from_seed(&[7; 32]).unwrap();
        let fixed = |serial: u64, name: &str, publish: &[&str], subscribe: &[&str]| {
            let identity =
                Identity::from_secrets(&[serial as u8; 32], &[serial as u8 + 100; 32]).unwrap();
            let credential = Credential::issue(
                &ca,
                name,
                serial,
                NOW - 100,
                NOW + 86_400,
                identity.sign_public(),
                identity.kx_public(),
                publish.iter().map(|s| s.to_string()).collect(),
                subscribe.iter().map(|s| s.to_string()).collect(),
            )
            .unwrap();
            Member {
                identity,
                credential,
            }
        };
        let w = node(&mut sim, Some(fixed(1, "w", &["/t"], &[])), &ca, None);
        let r = node(&mut sim, Some(fixed(2, "r", &[], &["/t"])), &ca, None);
        let (_, _, n) = exchange(&mut sim, w, r, "/t");
        assert_eq!(n, 5, "seed {seed}: delivered");
        assert!(sim.nodes[w].participant.stats().samples_sealed >= 5);
        sim.wire.take().unwrap()
    };
    let a = run(11);
    let b = run(11);
    assert!(a.len() > 20, "{} datagrams", a.len());
    assert!(a == b, "the same seed gave different bytes on the wire");
    assert!(run(12) != a, "another seed gave the same bytes");
}

/// In a secure realm every datagram leaves with its AUTH_TAG: the sizes the engine builds
/// to leave room for it, so across a 1,500-byte LAN losing 20 % of frames nothing exceeds
/// the path (only each host's first probe above it), no path is lowered, and reliable
/// samples of 1 KB and 1 MiB all arrive, each once and in order.
#[test]
fn secure_datagrams_fit_the_path_with_their_tag() {
    for (seed, len, n) in [(91u64, 1024usize, 300u64), (92, 1 << 20, 5)] {
        let mut sim = Sim::new(seed, Link::lan(1500, 0.2));
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
            s.nodes[w].participant.matched_count(wid) == 1
                && s.nodes[r].participant.matched_count(rid) == 1
        }));
        for k in 0..n {
            let body = Bytes::from(vec![(k % 251) as u8; len]);
            sim.write(w, wid, k, body, Duration::from_secs(60));
            sim.run_for(Duration::from_micros(200));
        }
        let ok = sim.run_until(Duration::from_secs(120), |s| {
            s.seqs(r, rid).len() == n as usize
        });
        assert!(ok, "seed {seed}: {} of {n} arrived", sim.seqs(r, rid).len());
        assert_eq!(sim.seqs(r, rid), (1..=n).collect::<Vec<_>>());
        for (w_, name) in [(w, "writer"), (r, "reader")] {
            let st = sim.nodes[w_].participant.stats();
            assert_eq!(
                st.paths_lowered, 0,
                "seed {seed}: the {name}'s path was lowered"
            );
        }
        assert!(
            sim.too_big <= 2,
            "seed {seed}: {} datagrams exceeded the path",
            sim.too_big
        );
    }
}
