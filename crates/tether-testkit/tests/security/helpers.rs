//! What the tests of the secure realm share: members and routers of a realm, a node holding
//! one, and a writer and a reader exchanging a few samples.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tether_core::{EndpointInfo, EntityId, Event, Qos, Security};
use tether_crypto::{CaKey, Credential, Identity, RealmSecret, RevocationList};
use tether_testkit::Sim;

/// Unix time the simulated realm lives at.
pub(crate) const NOW: u64 = 1_800_000_000;

pub(crate) fn info(topic: &str) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "t".into(),
        partitions: vec![],
        qos: Qos::new().keep_all(),
    }
}

pub(crate) struct Member {
    pub(crate) identity: Identity,
    pub(crate) credential: Credential,
}

pub(crate) fn member(
    ca: &CaKey,
    serial: u64,
    name: &str,
    publish: &[&str],
    subscribe: &[&str],
) -> Member {
    member_at(
        ca,
        serial,
        name,
        publish,
        subscribe,
        NOW - 100,
        NOW + 86_400,
    )
}

pub(crate) fn member_at(
    ca: &CaKey,
    serial: u64,
    name: &str,
    publish: &[&str],
    subscribe: &[&str],
    issued: u64,
    expires: u64,
) -> Member {
    let identity = Identity::generate();
    let credential = Credential::issue(
        ca,
        name,
        serial,
        issued,
        expires,
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
}

/// A router's keys and credential (no grants).
pub(crate) fn router(ca: &CaKey, serial: u64, name: &str) -> Member {
    let identity = Identity::generate();
    let credential = Credential::issue_with_role(
        ca,
        tether_crypto::Role::Router,
        name,
        serial,
        NOW - 100,
        NOW + 86_400,
        identity.sign_public(),
        identity.kx_public(),
        vec![],
        vec![],
    )
    .unwrap();
    Member {
        identity,
        credential,
    }
}

/// The realm secret of CA `ca` in these tests (derived, so every member of one realm has
/// the same one and other realms another).
pub(crate) fn secret(ca: &CaKey) -> RealmSecret {
    RealmSecret::from_bytes(ca.public())
}

/// Adds a node holding `m` in the realm of `ca` (None: security off).
pub(crate) fn node(
    sim: &mut Sim,
    m: Option<Member>,
    ca: &CaKey,
    revoked: Option<RevocationList>,
) -> usize {
    let now = sim.now;
    let ca_public = ca.public();
    let rs = secret(ca);
    sim.add_node_with(move |c| {
        c.security = m.map(|m| {
            Arc::new(Security::new(
                m.identity,
                m.credential,
                ca_public,
                rs,
                revoked,
                now,
                NOW,
            ))
        });
    })
}

/// A writer on node `w` and a reader on node `r`, both on `topic`; runs 10 s of virtual
/// time, writes 5 samples, runs 5 s more. Returns (writer, reader, samples delivered).
pub(crate) fn exchange(
    sim: &mut Sim,
    w: usize,
    r: usize,
    topic: &str,
) -> (EntityId, EntityId, usize) {
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info(topic)).unwrap();
    let rid = sim.p(r).create_reader(now, info(topic));
    sim.pump(w);
    sim.pump(r);
    sim.run_for(Duration::from_secs(10));
    for k in 0..5u64 {
        let now = sim.now;
        let _ = sim.p(w).write(now, wid, k, Bytes::from(vec![k as u8; 100]));
        sim.pump(w);
    }
    sim.run_for(Duration::from_secs(5));
    let n = sim.seqs(r, rid).len();
    (wid, rid, n)
}

pub(crate) fn events(sim: &Sim, i: usize) -> &[Event] {
    &sim.nodes[i].events
}

pub(crate) fn contains(hay: &[Bytes], needle: &[u8]) -> bool {
    hay.iter()
        .any(|d| d.windows(needle.len()).any(|x| x == needle))
}

/// `dg` without its AUTH_TAG.
pub(crate) fn untagged(dg: &[u8]) -> Vec<u8> {
    tether_wire::AuthTagRepr::split(dg)
        .map_or(dg, |(_, c)| c)
        .to_vec()
}
