//! A secure realm in the simulator: a CA, members with the grants a test gives them, and
//! what an outsider on their network can do (inject a datagram under any address). The
//! attack and security tests build their realms here rather than each its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tether_core::{EndpointInfo, Qos, Security};
use tether_crypto::{CaKey, Credential, Identity, RealmSecret};
use tether_wire::{DatagramBuilder, Header, ParticipantId, Submessage};

use crate::Sim;

/// The wall-clock second credentials are checked at: they are valid from a little before it
/// for a day.
pub const NOW: u64 = 1_800_000_000;

/// A realm: its CA (and so its secret, derived from the CA's public key for tests).
#[derive(Debug)]
pub struct Realm {
    /// The CA that issues members' credentials.
    pub ca: CaKey,
}

impl Default for Realm {
    fn default() -> Self {
        Self::new()
    }
}

impl Realm {
    /// A realm with a fresh CA.
    pub fn new() -> Self {
        Realm {
            ca: CaKey::generate(),
        }
    }

    /// The engine settings of a member `name` with `serial`, granted to publish on
    /// `publish` and subscribe to `subscribe` (topic patterns).
    pub fn security(
        &self,
        now: Instant,
        serial: u64,
        name: &str,
        publish: &[&str],
        subscribe: &[&str],
    ) -> Security {
        let identity = Identity::generate();
        let credential = Credential::issue(
            &self.ca,
            name,
            serial,
            NOW - 100,
            NOW + 86_400,
            identity.sign_public(),
            identity.kx_public(),
            publish.iter().map(|s| s.to_string()).collect(),
            subscribe.iter().map(|s| s.to_string()).collect(),
        )
        .expect("a valid credential");
        let ca_public = self.ca.public();
        Security::new(
            identity,
            credential,
            ca_public,
            RealmSecret::from_bytes(ca_public),
            None,
            now,
            NOW,
        )
    }

    /// Adds a member granted everything; returns its node.
    pub fn member(&self, sim: &mut Sim, serial: u64, name: &str) -> usize {
        self.member_with(sim, serial, name, &["/**"], &["/**"])
    }

    /// Adds a member with these grants; returns its node.
    pub fn member_with(
        &self,
        sim: &mut Sim,
        serial: u64,
        name: &str,
        publish: &[&str],
        subscribe: &[&str],
    ) -> usize {
        let sec = Arc::new(self.security(sim.now, serial, name, publish, subscribe));
        sim.add_node_with(move |c| c.security = Some(sec))
    }
}

/// An endpoint on `topic` with `qos` (type "t", no partitions).
pub fn info(topic: &str, qos: Qos) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "t".into(),
        partitions: vec![],
        qos,
    }
}

/// A datagram under `pid`'s header (domain 0) holding `subs`, as anyone can build it.
pub fn forged(pid: ParticipantId, subs: &[Submessage<'_>]) -> Bytes {
    let mut out = Vec::new();
    let mut b = DatagramBuilder::new(
        &mut out,
        Header {
            domain: 0,
            participant: pid,
        },
    );
    for m in subs {
        b.push(m).expect("a submessage that fits");
    }
    Bytes::from(out)
}

/// An outsider's own address.
pub fn attacker() -> SocketAddr {
    "10.66.6.6:7400".parse().expect("an address")
}

/// Hands `dg` to node `to` as if it came from `from`, and lets the node act on it.
pub fn inject(sim: &mut Sim, to: usize, from: SocketAddr, dg: &Bytes) {
    let now = sim.now;
    sim.p(to).handle_datagram(now, from, dg);
    sim.pump(to);
}
