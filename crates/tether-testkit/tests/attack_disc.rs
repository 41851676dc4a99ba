//! Attacks on discovery (issue 17), in the simulator, in a plain and in a secure realm: a
//! flood of invented participant ids must not keep real participants from finding each
//! other, and nothing that arrives from an address tether has not validated may bring back
//! more than 3 × its size to that address (tether must not be a reflector).
//!
//! The attacker has no key and needs none: it writes any participant id into a header and
//! any source address on a datagram (the simulator takes the source as given, as a network
//! without source-address filtering does).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tether_core::{EndpointInfo, EntityId, ParticipantId, Qos, Security};
use tether_crypto::{CaKey, Credential, Identity, RealmSecret};
use tether_testkit::{Link, Sim};
use tether_wire::{DatagramBuilder, Header, ParticipantRepr, ProbeRepr, Submessage};

/// Unix time the simulated realm lives at.
const NOW: u64 = 1_800_000_000;

fn info(topic: &str) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "t".into(),
        partitions: vec![],
        qos: Qos::new().keep_all(),
    }
}

/// A small deterministic generator for the attacker (ids, addresses).
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// An address somewhere on the internet (never a node's: those are on 127.0.0.1).
    fn addr(&mut self) -> SocketAddr {
        let r = self.next();
        SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::new(10 + (r % 200) as u8, (r >> 8) as u8, (r >> 16) as u8, 1),
            1024 + (r >> 24) as u16 % 60_000,
        ))
    }
}

/// A datagram of participant `pid` in domain 0 holding `m`.
fn forged(pid: u64, m: &[Submessage<'_>]) -> Bytes {
    let mut buf = Vec::new();
    let mut b = DatagramBuilder::new(
        &mut buf,
        Header {
            domain: 0,
            participant: ParticipantId(pid),
        },
    );
    for s in m {
        b.push(s).unwrap();
    }
    Bytes::from(buf)
}

/// A PARTICIPANT announcing `pid` with the longest lease there is.
fn announce(pid: u64) -> Bytes {
    forged(
        pid,
        &[Submessage::Participant(ParticipantRepr {
            lease_ms: u32::MAX,
            name: "x",
            data_group: None,
        })],
    )
}

/// Adds a node; in a secure realm of `ca` (with grants for everything) when given one.
fn node(
    sim: &mut Sim,
    ca: Option<&CaKey>,
    serial: u64,
    tune: fn(&mut tether_core::Config),
) -> usize {
    let now = sim.now;
    let security = ca.map(|ca| {
        let identity = Identity::generate();
        let credential = Credential::issue(
            ca,
            &format!("member{serial}"),
            serial,
            NOW - 100,
            NOW + 86_400,
            identity.sign_public(),
            identity.kx_public(),
            vec!["/**".into()],
            vec!["/**".into()],
        )
        .unwrap();
        Arc::new(Security::new(
            identity,
            credential,
            ca.public(),
            RealmSecret::from_bytes(ca.public()),
            None,
            now,
            NOW,
        ))
    });
    sim.add_node_with(move |c| {
        c.security = security;
        tune(c);
    })
}

/// Hands `dg` to node `i` as if it came from `from`, and lets the node answer.
fn inject(sim: &mut Sim, i: usize, from: SocketAddr, dg: &Bytes) {
    let now = sim.now;
    sim.p(i).handle_datagram(now, from, dg);
    sim.pump(i);
}

/// While invented participants (random ids, from random addresses, and some from the real
/// peer's own address) announce themselves to both sides without pause, a real publisher
/// and subscriber still discover each other, match within 2 s and deliver everything; the
/// participant table holds only the real peer, and the pending table stays within its cap.
/// In a secure realm, participants that validate their address but never authenticate
/// (more than the table of such holds) do not keep them apart either.
///
/// (Before: every announcement from an unknown id made a remote participant at once, so
/// the 1,024-entry table filled with invented ids within a millisecond and the real peer
/// was refused, `table_full`, for as long as the flood went on.)
#[test]
fn table_exhaustion_flood_of_invented_ids() {
    for secure in [false, true] {
        let mut sim = Sim::new(17, Link::perfect());
        let ca = CaKey::generate();
        let ca = secure.then_some(&ca);
        let mut rng = Xorshift(0x5eed_1700 + secure as u64);
        let p = node(&mut sim, ca, 1, |c| c.max_pending_participants = 8);
        // The flood starts before the subscriber exists.
        let flood = |sim: &mut Sim, rng: &mut Xorshift, targets: &[usize], n: usize| {
            for _ in 0..n {
                for &t in targets {
                    let pid = rng.next() | 1;
                    // One in ten from the other real node's address, to take its place
                    // in the pending table.
                    let from = if rng.next() % 10 == 0 && sim.nodes.len() > 1 {
                        sim.nodes[1 - t.min(1)].addr
                    } else {
                        rng.addr()
                    };
                    inject(sim, t, from, &announce(pid));
                }
            }
        };
        flood(&mut sim, &mut rng, &[p], 2000);
        let s = node(&mut sim, ca, 2, |c| c.max_pending_participants = 8);
        // In a secure realm: participants without credentials, at addresses of their own,
        // which answer every challenge and never authenticate; more of them than the
        // table of unauthenticated participants holds.
        if secure {
            for _ in 0..12 {
                node(&mut sim, None, 0, |_| {});
            }
        }
        let now = sim.now;
        let wid = sim.p(p).create_writer(now, info("/flood")).unwrap();
        let rid = sim.p(s).create_reader(now, info("/flood"));
        sim.pump(p);
        sim.pump(s);
        let t0 = sim.now;
        let mut matched = false;
        while sim.now - t0 < Duration::from_secs(2) {
            flood(&mut sim, &mut rng, &[p, s], 20);
            sim.run_for(Duration::from_millis(1));
            if sim.nodes[p].participant.matched_count(wid) == 1
                && sim.nodes[s].participant.matched_count(rid) == 1
            {
                matched = true;
                break;
            }
        }
        let what = if secure { "secure realm" } else { "plain" };
        let st = sim.nodes[p].participant.stats().clone();
        assert!(
            matched,
            "{what}: no match within 2 s under the flood ({} remote participants, table_full {})",
            sim.nodes[p].participant.remote_participants().len(),
            st.table_full
        );
        eprintln!("{what}: matched after {:?} of flood", sim.now - t0);
        // Delivery, the flood going on.
        for k in 0..20u64 {
            let now = sim.now;
            sim.p(p)
                .write(now, wid, k, Bytes::from(k.to_le_bytes().to_vec()))
                .unwrap();
            sim.pump(p);
            flood(&mut sim, &mut rng, &[p, s], 5);
            sim.run_for(Duration::from_millis(5));
        }
        let ok = sim.run_until(Duration::from_secs(5), |x| x.seqs(s, rid).len() == 20);
        assert!(ok, "{what}: delivered {:?}", sim.seqs(s, rid));
        for &i in &[p, s] {
            let n = &sim.nodes[i].participant;
            let real = sim.nodes.len() - 1;
            assert!(
                n.remote_participants().len() <= real,
                "{what}: node {i} holds {} participants",
                n.remote_participants().len()
            );
            assert!(n.pending_participants() <= 8, "{what}: node {i}");
        }
        let st = sim.nodes[p].participant.stats();
        assert!(
            st.pending_dropped > 0 && st.challenges_sent > 0,
            "{what}: {st:?}"
        );
        if secure {
            assert!(st.unauthenticated_forgotten > 0, "{what}: {st:?}");
        }
    }
}

/// A participant whose announcement is large (many endpoints) receives, from a spoofed
/// source address (the victim's), PARTICIPANTs under new and repeated ids, PROBEs from an
/// unknown id, and announcements under the id of a real peer it knows (to take that peer's
/// address over). Over 10 s, what it sends to the victim's address stays within 3 × what
/// came from there, and the real peer keeps receiving.
///
/// (Before: each forged PARTICIPANT brought back the whole announcement, some 30 KB here,
/// and in a secure realm an AUTH too; and the real peer's address, with its data, moved
/// to the victim.)
#[test]
fn amplification_bytes_to_unvalidated_address_stay_under_3x() {
    for secure in [false, true] {
        let mut sim = Sim::new(18, Link::perfect());
        let ca = CaKey::generate();
        let ca = secure.then_some(&ca);
        let r = node(&mut sim, ca, 1, |_| {});
        let q = node(&mut sim, ca, 2, |_| {});
        let now = sim.now;
        let mut writers = Vec::new();
        for k in 0..300 {
            let topic = format!("/robot/arm/joint_{k:03}/state/with/a/rather/long/topic/name");
            writers.push(sim.p(r).create_writer(now, info(&topic)).unwrap());
        }
        let rid = sim.p(q).create_reader(
            now,
            info("/robot/arm/joint_000/state/with/a/rather/long/topic/name"),
        );
        sim.pump(r);
        sim.pump(q);
        assert!(sim.run_until(Duration::from_secs(10), |s| {
            s.nodes[r].participant.matched_count(writers[0]) == 1
                && s.nodes[q].participant.matched_count(rid) == 1
        }));
        let victim: SocketAddr = "192.0.2.7:7400".parse().unwrap();
        let qpid = sim.nodes[q].participant.id().0;
        let mut rng = Xorshift(0xa3b1);
        let mut received = 0u64;
        let fixed = rng.next() | 1;
        for ms in 0..10_000u64 {
            let mut dgs = Vec::new();
            if ms % 10 == 0 {
                dgs.push(announce(rng.next() | 1));
                dgs.push(announce(fixed));
            }
            if ms % 50 == 0 {
                dgs.push(forged(
                    rng.next() | 1,
                    &[Submessage::Probe(ProbeRepr {
                        id: rng.next(),
                        padding: 0,
                    })],
                ));
            }
            if ms % 100 == 0 {
                dgs.push(announce(qpid));
            }
            for d in &dgs {
                received += d.len() as u64;
                inject(&mut sim, r, victim, d);
            }
            if ms % 100 == 0 {
                let now = sim.now;
                let _ = sim
                    .p(r)
                    .write(now, writers[0], ms, Bytes::from(vec![7u8; 1000]));
                sim.pump(r);
            }
            sim.run_for(Duration::from_millis(1));
        }
        let what = if secure { "secure realm" } else { "plain" };
        let sent = sim.unrouted.get(&victim).map_or(0, |x| x.1);
        assert!(
            sent <= 3 * received,
            "{what}: {sent} bytes sent to the victim for {received} received from it ({:.0} ×)",
            sent as f64 / received as f64
        );
        assert!(
            sim.seqs(q, rid).len() >= 95,
            "{what}: the real peer got {} of 100 samples",
            sim.seqs(q, rid).len()
        );
        eprintln!(
            "{what}: {sent} bytes to the victim for {received} from it; {:?}",
            sim.nodes[r].participant.stats().amplification_limited
        );
        let _: &[EntityId] = &writers;
    }
}
