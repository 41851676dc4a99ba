//! Issue 18, point 4 (secure introspection) and point 6's encoding label, in the simulator:
//! members of a realm read each other's topic names and types from the description each
//! ENDPOINT carries sealed under the realm secret, while what goes on the wire names topics
//! by id only; every endpoint announces its protection mode and the label of its payloads.

use std::time::Duration;

use tether_core::{Encoding, ProtectionMode, Qos};
use tether_crypto::{RealmSecret, TopicId};
use tether_testkit::realm::{Realm, info};
use tether_testkit::{Link, Sim};
use tether_wire::{Datagram, Submessage};

/// Every ENDPOINT in `wire`, as (topic, description) pairs.
fn endpoints(wire: &[bytes::Bytes]) -> Vec<(String, Option<Vec<u8>>)> {
    let mut v = Vec::new();
    for d in wire {
        let Ok(d) = Datagram::parse(d) else { continue };
        for m in d.submessages().flatten() {
            if let Submessage::Endpoint(e) = m {
                v.push((e.topic.to_string(), e.description.map(<[u8]>::to_vec)));
            }
        }
    }
    v
}

/// A member sees another's topic name, type, encoding label and protection mode; the wire
/// carries the topic's id and a description that opens only with the realm's secret and
/// only for that id, and never the name or the type in clear.
#[test]
fn members_read_names_and_types_outsiders_only_ids() {
    for (seed, loss) in [(1u64, 0.0), (2, 0.2)] {
        let mut sim = Sim::new(seed, Link::lossy(loss));
        sim.wire = Some(Vec::new());
        let realm = Realm::new();
        let w = realm.member(&mut sim, 1, "robot");
        let v = realm.member(&mut sim, 2, "viewer");
        let now = sim.now;
        let mut wi = info("/robot/odom", Qos::new().encoding(Encoding::Json));
        wi.type_name = "nav_msgs/Odometry".into();
        sim.p(w).create_writer(now, wi).unwrap();
        sim.pump(w);
        assert!(
            sim.run_until(Duration::from_secs(20), |s| !s.nodes[v]
                .participant
                .remote_endpoints()
                .is_empty()),
            "seed {seed}: the viewer never learnt the writer"
        );
        let eps = sim.nodes[v].participant.remote_endpoints();
        let (_, _, e) = &eps[0];
        assert!(e.info.topic.starts_with('#'), "{:?}", e.info);
        assert_eq!(e.topic_name(), "/robot/odom");
        assert_eq!(e.type_name(), "nav_msgs/Odometry");
        assert_eq!(e.info.qos.encoding_label(), Encoding::Json);
        assert_eq!(e.protection, ProtectionMode::Encrypt);

        let wire = sim.wire.take().unwrap();
        for d in &wire {
            for needle in [&b"/robot/odom"[..], b"nav_msgs", b"Odometry"] {
                assert!(
                    !d.windows(needle.len()).any(|x| x == needle),
                    "seed {seed}: {:?} in clear",
                    String::from_utf8_lossy(needle)
                );
            }
        }
        let secret = RealmSecret::from_bytes(realm.ca.public());
        let other = RealmSecret::from_bytes(Realm::new().ca.public());
        let id = TopicId::derive(&secret, "/robot/odom", "nav_msgs/Odometry", "");
        let another = TopicId::derive(&secret, "/robot/cmd", "nav_msgs/Odometry", "");
        let announced = endpoints(&wire);
        assert!(!announced.is_empty());
        for (topic, description) in announced {
            assert_eq!(topic, format!("#{id}"));
            let d = description.expect("a secure realm's ENDPOINT carries a description");
            assert_eq!(
                tether_crypto::open_description(&secret, &id, &d),
                Some(("/robot/odom".into(), "nav_msgs/Odometry".into()))
            );
            // Outsiders (another realm's secret, or none) cannot open it, and it does not
            // open beside another topic's id.
            assert_eq!(tether_crypto::open_description(&other, &id, &d), None);
            assert_eq!(tether_crypto::open_description(&secret, &another, &d), None);
        }
    }
}

/// Outside a realm the label and an unannounced mode travel too, and no description.
#[test]
fn encoding_label_travels_with_the_endpoint() {
    for enc in [
        Encoding::Cbor,
        Encoding::Text,
        Encoding::Cdr,
        Encoding::Unset,
    ] {
        let mut sim = Sim::new(3, Link::perfect());
        sim.add_node(0);
        sim.add_node(0);
        let now = sim.now;
        sim.p(0)
            .create_writer(now, info("/pose", Qos::new().encoding(enc)))
            .unwrap();
        sim.pump(0);
        sim.run_for(Duration::from_secs(2));
        let eps = sim.nodes[1].participant.remote_endpoints();
        assert_eq!(eps.len(), 1);
        let e = &eps[0].2;
        assert_eq!(e.info.qos.encoding_label(), enc);
        assert_eq!(e.protection, ProtectionMode::Unannounced);
        assert_eq!(e.described, None);
        assert_eq!(e.topic_name(), "/pose");
    }
}
