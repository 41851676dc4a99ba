//! A member of the realm going beyond its credential, in the simulator. A member holds
//! every verified peer's control key (that is how one tag serves every receiver), so it can
//! authenticate a datagram in another member's name (modelled with
//! [`Participant::retag`](tether_core::Participant::retag)); what it cannot do is make
//! another member's participant id its own.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tether_core::{AuthFailure, EndpointInfo, Event, Qos, Security};
use tether_crypto::{CaKey, Credential, Identity, OsRandom, RealmSecret};
use tether_testkit::{Link, Sim};
use tether_wire::{AuthRepr, DatagramBuilder, Header, Submessage};

const NOW: u64 = 1_800_000_000;

fn info(topic: &str) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "t".into(),
        partitions: vec![],
        qos: Qos::new().keep_all(),
    }
}

fn credential(ca: &CaKey, serial: u64, name: &str) -> (Identity, Credential) {
    let identity = Identity::generate();
    let c = Credential::issue(
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
    (identity, c)
}

fn node(sim: &mut Sim, ca: &CaKey, id: (Identity, Credential)) -> usize {
    let now = sim.now;
    let ca_public = ca.public();
    let rs = RealmSecret::from_bytes(ca.public());
    sim.add_node_with(move |c| {
        c.security = Some(Arc::new(Security::new(
            id.0, id.1, ca_public, rs, None, now, NOW,
        )));
    })
}

/// Mallory, a member, presents its own (valid) credential under the writer's participant
/// id, in datagrams authenticated in the writer's name, five times. The reader refuses it,
/// reports it once, and keeps the id bound to the writer's credential: it still names the
/// writer as before and keeps receiving its samples.
#[test]
fn identity_takeover_another_credential_under_a_verified_id_is_refused() {
    let mut sim = Sim::new(81, Link::perfect());
    let ca = CaKey::generate();
    let w = node(&mut sim, &ca, credential(&ca, 1, "robot"));
    let r = node(&mut sim, &ca, credential(&ca, 2, "viewer"));
    let mallory = credential(&ca, 3, "mallory");
    let m = node(&mut sim, &ca, credential(&ca, 3, "mallory"));
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info("/cmd")).unwrap();
    let rid = sim.p(r).create_reader(now, info("/cmd"));
    sim.pump(w);
    sim.pump(r);
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        s.nodes[w].participant.matched_count(wid) == 1
            && s.nodes[r].participant.matched_count(rid) == 1
            && s.nodes[m].participant.remote_participants().len() == 2
    }));
    let (wpid, rpid) = (sim.nodes[w].participant.id(), sim.nodes[r].participant.id());
    assert_eq!(sim.nodes[r].participant.certified_name(wpid), Some("robot"));
    let sealed = tether_crypto::seal_credential(
        &RealmSecret::from_bytes(ca.public()),
        wpid.0,
        rpid.0,
        &mallory.1.to_bytes(),
        &mut OsRandom,
    );
    let mut dg = Vec::new();
    DatagramBuilder::new(
        &mut dg,
        Header {
            domain: 0,
            participant: wpid,
        },
    )
    .push(&Submessage::Auth(AuthRepr {
        to: rpid,
        challenge: [9; 32],
        response: None,
        verified_you: true,
        you_verified_me: true,
        control_key: None,
        have_epoch: 1,
        credential: &sealed,
    }))
    .unwrap();
    let waddr = sim.nodes[w].addr;
    for _ in 0..5 {
        // Authenticated as the writer's participant: what Mallory, holding its control
        // key, can do.
        let forged = sim.p(w).retag(&dg);
        let now = sim.now;
        sim.p(r).handle_datagram(now, waddr, &forged);
        sim.pump(r);
    }
    assert_eq!(sim.nodes[r].participant.certified_name(wpid), Some("robot"));
    assert_eq!(sim.nodes[r].participant.stats().identity_conflicts, 5);
    let reports = sim.nodes[r]
        .events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::AuthenticationFailed {
                    reason: AuthFailure::IdentityConflict,
                    ..
                }
            )
        })
        .count();
    assert_eq!(reports, 1, "reported once");
    for k in 1..=10u64 {
        let now = sim.now;
        sim.p(w)
            .write(now, wid, k, Bytes::from(format!("sample {k}")))
            .unwrap();
        sim.pump(w);
    }
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.seqs(r, rid), (1..=10).collect::<Vec<_>>());
}

/// Mallory, a member, comes up under the participant id of a member that crashed (its
/// lease ran out at the reader, which remembers where it stood with its writer and holds a
/// sample past a hole), with a writer of the same entity id on the same topic. The reader
/// does not hand Mallory the departed writer's place, its held sample or its request
/// numbering: another credential means the remembered writer is gone for good (its held
/// sample delivered, its hole lost), and Mallory's writer starts afresh, none of its own
/// samples dropped. (Before: the reader delivered V1, M2, V3, M4, M5: the outsider
/// review.)
#[test]
fn a_member_under_a_departed_members_id_does_not_inherit_its_place() {
    let mut sim = Sim::new(307, Link::perfect());
    let ca = CaKey::generate();
    let v = node(&mut sim, &ca, credential(&ca, 1, "victim"));
    let r = node(&mut sim, &ca, credential(&ca, 2, "reader"));
    let mut topic = info("/cmd");
    topic.qos = Qos::new().keep_last(3);
    let now = sim.now;
    let vw = sim.p(v).create_writer(now, topic.clone()).unwrap();
    let rid = sim.p(r).create_reader(now, info("/cmd"));
    sim.pump(v);
    sim.pump(r);
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        s.nodes[v].participant.matched_count(vw) == 1
    }));
    let write = |sim: &mut Sim, i: usize, k: u64, what: &str| {
        let now = sim.now;
        sim.p(i)
            .write(now, vw, k, Bytes::from(format!("{what}{k}")))
            .unwrap();
        sim.pump(i);
    };
    write(&mut sim, v, 1, "V");
    sim.run_for(Duration::from_millis(100));
    sim.nodes[v].unplugged = true;
    write(&mut sim, v, 2, "V");
    sim.nodes[v].unplugged = false;
    write(&mut sim, v, 3, "V");
    sim.run_for(Duration::from_millis(5));
    sim.nodes[v].up = false;
    sim.run_for(Duration::from_secs(12));
    assert_eq!(sim.p(r).reader_owed(rid), 2);
    let vpid = sim.nodes[v].participant.id();
    let (identity, cred) = credential(&ca, 3, "mallory");
    let (ca_public, rs, now) = (ca.public(), RealmSecret::from_bytes(ca.public()), sim.now);
    let m = sim.add_node_with(move |c| {
        c.participant = vpid;
        c.security = Some(Arc::new(Security::new(
            identity, cred, ca_public, rs, None, now, NOW,
        )));
    });
    let now = sim.now;
    let mw = sim.p(m).create_writer(now, topic).unwrap();
    assert_eq!(mw, vw, "the same entity id");
    sim.pump(m);
    sim.run_for(Duration::from_secs(2));
    for k in 1..=5 {
        write(&mut sim, m, k, "M");
        sim.run_for(Duration::from_millis(20));
    }
    sim.run_for(Duration::from_secs(2));
    let got: Vec<String> = sim.nodes[r].delivered[&rid]
        .iter()
        .map(|s| String::from_utf8_lossy(&s.payload).into_owned())
        .collect();
    assert_eq!(got, ["V1", "V3", "M1", "M2", "M3", "M4", "M5"]);
    assert_eq!(sim.p(r).reader_owed(rid), 0);
}
