//! An outsider without keys on the realm's network, in the simulator: it knows (it sniffed)
//! every participant id, entity id and address, and forges any submessage under them. The
//! control plane is authenticated (`docs/wire.md#auth_tag`), so none of it changes what the
//! members do: streams keep delivering every sample, peers keep their addresses and matches.
//! Each test asserts the property (delivery, matches, addresses), not a counter or a log.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tether_core::{EndpointInfo, EntityId, Event, Qos, Security};
use tether_crypto::{CaKey, Credential, Identity, RealmSecret};
use tether_testkit::{Link, Sim};
use tether_wire::{DatagramBuilder, Header, ParticipantId, Submessage};

const NOW: u64 = 1_800_000_000;

fn info(topic: &str) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "t".into(),
        partitions: vec![],
        qos: Qos::new().keep_all(),
    }
}

/// A node of the realm of `ca`, named `name`, granted everything.
fn member(sim: &mut Sim, ca: &CaKey, serial: u64, name: &str) -> usize {
    let identity = Identity::generate();
    let credential = Credential::issue(
        ca,
        name,
        serial,
        NOW - 100,
        NOW + 86_400,
        identity.sign_public(),
        identity.kx_public(),
        vec!["/**".into()],
        vec!["/**".into()],
    )
    .unwrap();
    let now = sim.now;
    let ca_public = ca.public();
    let rs = RealmSecret::from_bytes(ca.public());
    sim.add_node_with(move |c| {
        c.security = Some(Arc::new(Security::new(
            identity, credential, ca_public, rs, None, now, NOW,
        )));
    })
}

/// A reliable keep-all writer on node 0 and its reader on node 1, matched and keyed.
fn realm(seed: u64) -> (Sim, EntityId, EntityId) {
    let mut sim = Sim::new(seed, Link::perfect());
    let ca = CaKey::generate();
    let w = member(&mut sim, &ca, 1, "robot");
    let r = member(&mut sim, &ca, 2, "viewer");
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info("/cmd")).unwrap();
    let rid = sim.p(r).create_reader(now, info("/cmd"));
    sim.pump(w);
    sim.pump(r);
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        s.nodes[w].participant.matched_count(wid) == 1
            && s.nodes[r].participant.matched_count(rid) == 1
    }));
    (sim, wid, rid)
}

fn write(sim: &mut Sim, wid: EntityId, seqs: std::ops::RangeInclusive<u64>) {
    for k in seqs {
        let now = sim.now;
        sim.p(0)
            .write(now, wid, k, Bytes::from(format!("sample {k}")))
            .unwrap();
        sim.pump(0);
        sim.run_for(Duration::from_millis(5));
    }
}

/// A datagram under `pid`'s header holding `subs`, as anyone can build it.
fn forged(pid: ParticipantId, subs: &[Submessage<'_>]) -> Bytes {
    let mut out = Vec::new();
    let mut b = DatagramBuilder::new(
        &mut out,
        Header {
            domain: 0,
            participant: pid,
        },
    );
    for m in subs {
        b.push(m).unwrap();
    }
    Bytes::from(out)
}

/// The outsider's own address.
fn attacker() -> SocketAddr {
    "10.66.6.6:7400".parse().unwrap()
}

/// Hands `dg` to node `to` as if it came from `from`, and lets the node act on it.
fn inject(sim: &mut Sim, to: usize, from: SocketAddr, dg: &Bytes) {
    let now = sim.now;
    sim.p(to).handle_datagram(now, from, dg);
    sim.pump(to);
}

/// A GAP and a HEARTBEAT forged under the writer's id would move the reader past every
/// future sequence number: the stream would stop for good. They are not acted on: the next
/// samples are delivered, all of them, in order.
#[test]
fn forged_control_gap_and_heartbeat_do_not_stop_a_reliable_stream() {
    let (mut sim, wid, rid) = realm(71);
    write(&mut sim, wid, 1..=5);
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.seqs(1, rid), (1..=5).collect::<Vec<_>>());
    let wpid = sim.nodes[0].participant.id();
    let waddr = sim.nodes[0].addr;
    for from in [waddr, attacker()] {
        let gap = forged(
            wpid,
            &[Submessage::Gap(tether_wire::GapRepr {
                writer: wid,
                reader: EntityId::ALL,
                start: 6,
                end: 1 << 40,
            })],
        );
        inject(&mut sim, 1, from, &gap);
        let hb = forged(
            wpid,
            &[Submessage::Heartbeat(tether_wire::HeartbeatRepr {
                writer: wid,
                reader: EntityId::ALL,
                first: 1 << 40,
                last: 1 << 40,
                count: 1_000_000,
                final_: false,
            })],
        );
        inject(&mut sim, 1, from, &hb);
    }
    write(&mut sim, wid, 6..=20);
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.seqs(1, rid), (1..=20).collect::<Vec<_>>());
}

/// Forged goodbyes (PARTICIPANT_BYE, ENDPOINT_BYE) sent under the writer's id again and
/// again: the reader keeps its match and every sample.
#[test]
fn forged_control_byes_do_not_unmatch() {
    let (mut sim, wid, rid) = realm(72);
    let wpid = sim.nodes[0].participant.id();
    let waddr = sim.nodes[0].addr;
    for k in 1..=20u64 {
        let bye = if k % 2 == 0 {
            forged(wpid, &[Submessage::ParticipantBye])
        } else {
            forged(wpid, &[Submessage::EndpointBye(wid)])
        };
        inject(&mut sim, 1, waddr, &bye);
        write(&mut sim, wid, k..=k);
    }
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.nodes[1].participant.matched_count(rid), 1);
    assert_eq!(sim.seqs(1, rid), (1..=20).collect::<Vec<_>>());
    assert!(
        !sim.nodes[1]
            .events
            .iter()
            .any(|e| matches!(e, Event::ParticipantLost { .. })),
        "a forged goodbye made the writer's participant lost"
    );
}

/// Forged ACKNACKs under the reader's id (acknowledging everything, then asking for
/// everything again) neither make the writer drop what the reader has not received nor
/// make it resend without end.
#[test]
fn forged_control_acknacks_under_the_readers_id_change_nothing() {
    let (mut sim, wid, rid) = realm(73);
    // The reader's link goes down: what the writer sends now, only a repair brings.
    sim.nodes[1].up = false;
    write(&mut sim, wid, 1..=10);
    let rpid = sim.nodes[1].participant.id();
    let raddr = sim.nodes[1].addr;
    let ack_all = forged(
        rpid,
        &[Submessage::AckNack(tether_wire::AckNackRepr {
            reader: rid,
            writer: wid,
            base: 1 << 40,
            num_bits: 0,
            bitmap: [0; 8],
            count: 1,
            start_unknown: false,
        })],
    );
    inject(&mut sim, 0, raddr, &ack_all);
    sim.nodes[1].up = true;
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.seqs(1, rid), (1..=10).collect::<Vec<_>>());
}

/// A datagram forged under the writer's id from the outsider's address would move the
/// writer's address to the outsider's (its traffic redirected: the reader's ACKNACKs, the
/// keys the reader's own writers wrap). The address stays; the stream continues.
#[test]
fn address_takeover_a_forged_datagram_does_not_move_a_peer() {
    let (mut sim, wid, rid) = realm(74);
    let wpid = sim.nodes[0].participant.id();
    let waddr = sim.nodes[0].addr;
    let addr_of_writer = |s: &Sim| {
        s.nodes[1]
            .participant
            .remote_participants()
            .into_iter()
            .find(|(p, _, _)| *p == wpid)
            .map(|(_, _, a)| a)
    };
    assert_eq!(addr_of_writer(&sim), Some(waddr));
    let hb = forged(
        wpid,
        &[Submessage::Heartbeat(tether_wire::HeartbeatRepr {
            writer: wid,
            reader: EntityId::ALL,
            first: 1,
            last: 0,
            count: 2,
            final_: true,
        })],
    );
    let part = forged(
        wpid,
        &[Submessage::Participant(tether_wire::ParticipantRepr {
            lease_ms: 10_000,
            name: "",
            data_group: None,
        })],
    );
    for dg in [&hb, &part] {
        inject(&mut sim, 1, attacker(), dg);
        assert_eq!(addr_of_writer(&sim), Some(waddr), "the address moved");
    }
    write(&mut sim, wid, 1..=10);
    sim.run_for(Duration::from_secs(2));
    assert_eq!(addr_of_writer(&sim), Some(waddr));
    assert_eq!(sim.seqs(1, rid), (1..=10).collect::<Vec<_>>());
}

/// A genuine datagram replayed (captured from the wire, played back later from anywhere):
/// the writer's HEARTBEAT that asked for acknowledgements, played back every 20 ms, would
/// make the reader answer each time (traffic an outsider makes members generate). Refused
/// by the control plane's replay window: no answer; the stream goes on.
#[test]
fn forged_control_replayed_heartbeats_draw_no_answers() {
    let (mut sim, wid, rid) = realm(75);
    sim.wire = Some(Vec::new());
    write(&mut sim, wid, 1..=5);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.seqs(1, rid), (1..=5).collect::<Vec<_>>());
    let wpid = sim.nodes[0].participant.id();
    let asks: Vec<Bytes> = sim
        .wire
        .take()
        .unwrap()
        .into_iter()
        .filter(|d| {
            d[8..16] == wpid.0.to_le_bytes()
                && tether_wire::Datagram::parse(d).is_ok_and(|x| {
                    x.submessages()
                        .any(|m| matches!(m, Ok(Submessage::Heartbeat(h)) if !h.final_))
                })
        })
        .collect();
    assert!(!asks.is_empty(), "the writer asked for acknowledgements");
    let acks = sim.nodes[1].participant.stats().acknacks_sent;
    for _ in 0..50 {
        for d in &asks {
            inject(&mut sim, 1, attacker(), d);
        }
        sim.run_for(Duration::from_millis(20));
    }
    let answers = sim.nodes[1].participant.stats().acknacks_sent - acks;
    // The writer's own heartbeats are answered when it asks (none in this idle second).
    assert!(
        answers < 5,
        "{answers} ACKNACKs sent for replayed heartbeats"
    );
    write(&mut sim, wid, 6..=10);
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.seqs(1, rid), (1..=10).collect::<Vec<_>>());
}

/// Everything the realm's members send while they meet, match and exchange, as a listener
/// on the network records it: no member's name, no grant, no topic name appears (AUTH seals
/// credentials under the realm's AUTH key; topics travel as ids).
#[test]
fn metadata_on_the_wire_shows_no_names_or_grants() {
    let mut sim = Sim::new(76, Link::perfect());
    sim.wire = Some(Vec::new());
    let ca = CaKey::generate();
    let w = member(&mut sim, &ca, 1, "robot-kitchen-arm");
    let r = member(&mut sim, &ca, 2, "operator-console");
    let now = sim.now;
    let wid = sim
        .p(w)
        .create_writer(now, info("/kitchen/arm/joint_states"))
        .unwrap();
    let rid = sim
        .p(r)
        .create_reader(now, info("/kitchen/arm/joint_states"));
    sim.pump(w);
    sim.pump(r);
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        s.nodes[w].participant.matched_count(wid) == 1
            && s.nodes[r].participant.matched_count(rid) == 1
    }));
    write(&mut sim, wid, 1..=3);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.seqs(r, rid), vec![1, 2, 3]);
    let wire = sim.wire.take().unwrap();
    assert!(wire.len() > 10);
    for secret in [
        &b"robot-kitchen-arm"[..],
        b"operator-console",
        b"/**",
        b"/kitchen",
        b"joint_states",
    ] {
        assert!(
            !wire
                .iter()
                .any(|d| d.windows(secret.len()).any(|w| w == secret)),
            "{} is on the wire",
            String::from_utf8_lossy(secret)
        );
    }
}

/// A member's datagram meant for one participant, replayed by an outsider to another
/// (entity ids repeat across participants, so the reader's ACKNACK to one writer's
/// participant also names the other's writer): refused, because the tag seals whom the
/// datagram is for. Here the reader's acknowledgement of everything from the first
/// publisher would make the second drop samples the reader never got.
#[test]
fn forged_control_a_datagram_replayed_to_another_member_is_refused() {
    let mut sim = Sim::new(77, Link::perfect());
    let ca = CaKey::generate();
    let p1 = member(&mut sim, &ca, 1, "robot-1");
    let p2 = member(&mut sim, &ca, 2, "robot-2");
    let v = member(&mut sim, &ca, 3, "viewer");
    let now = sim.now;
    let w1 = sim.p(p1).create_writer(now, info("/cmd")).unwrap();
    let w2 = sim.p(p2).create_writer(now, info("/cmd")).unwrap();
    assert_eq!(w1, w2, "entity ids repeat across participants");
    let rid = sim.p(v).create_reader(now, info("/cmd"));
    for i in 0..3 {
        sim.pump(i);
    }
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        s.nodes[v].participant.matched_count(rid) == 2
            && s.nodes[p1].participant.matched_count(w1) == 1
            && s.nodes[p2].participant.matched_count(w2) == 1
    }));
    sim.wire = Some(Vec::new());
    for k in 1..=20u64 {
        let now = sim.now;
        sim.p(p1)
            .write(now, w1, k, Bytes::from(format!("a{k}")))
            .unwrap();
        sim.pump(p1);
        sim.run_for(Duration::from_millis(5));
    }
    sim.run_for(Duration::from_secs(1));
    let vpid = sim.nodes[v].participant.id();
    let acks: Vec<Bytes> = sim
        .wire
        .take()
        .unwrap()
        .into_iter()
        .filter(|d| {
            d[8..16] == vpid.0.to_le_bytes()
                && tether_wire::Datagram::parse(d).is_ok_and(|x| {
                    x.submessages()
                        .any(|m| matches!(m, Ok(Submessage::AckNack(a)) if a.base == 21))
                })
        })
        .collect();
    assert!(
        !acks.is_empty(),
        "the reader acknowledged the first publisher"
    );
    // The reader misses what the second publisher writes now; an outsider plays the
    // reader's acknowledgement to the first publisher back to the second.
    sim.nodes[v].up = false;
    for k in 1..=5u64 {
        let now = sim.now;
        sim.p(p2)
            .write(now, w2, k, Bytes::from(format!("b{k}")))
            .unwrap();
        sim.pump(p2);
    }
    sim.run_for(Duration::from_millis(50));
    let vaddr = sim.nodes[v].addr;
    for d in &acks {
        inject(&mut sim, p2, vaddr, d);
    }
    sim.nodes[v].up = true;
    sim.run_for(Duration::from_secs(3));
    let from_b: Vec<Bytes> = sim
        .payloads(v, rid)
        .into_iter()
        .filter(|p| p.starts_with(b"b"))
        .collect();
    assert_eq!(
        from_b,
        (1..=5)
            .map(|k| Bytes::from(format!("b{k}")))
            .collect::<Vec<_>>(),
        "the second publisher dropped samples the reader never got"
    );
}
