//! Issue 18, point 4, over real sockets: what an outsider receives from a member of a
//! secure realm. A plain UDP socket puts itself in the same-host registry, so the member
//! sends it its announcements as to any session of the domain; it holds no key of the
//! realm (as a router between members holds none). It reads the topic's id, the
//! protection mode and a sealed description, and never the topic's name or type: the
//! description opens under the realm's secret alone, and only beside that topic's id.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use tether::{Config, Qos, Session, Topic};
use tether_crypto::{RealmSecret, TopicId, open_description};
use tether_wire::{Datagram, EndpointKind, ProtectionMode, Submessage};

const NAME: &str = "/secret/plan";
const TYPE: &str = "acme_msgs/Plan";

#[test]
fn an_outsider_reads_ids_not_names_from_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let realm = tether::keys::Realm::init(&dir.path().join("realm")).unwrap();
    realm
        .issue("robot", vec!["/secret/**".into()], vec![], 30)
        .unwrap();
    let key = dir.path().join("realm").join("robot.key");
    let reg = dir.path().join("reg");

    // The outsider: a socket in the registry of domain 0, under this (live) process.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let domain = reg.join("domain-0");
    std::fs::create_dir_all(&domain).unwrap();
    std::fs::write(
        domain.join(format!(
            "{}-{:016x}.addr",
            std::process::id(),
            0x0bad_cafe_u64
        )),
        sock.local_addr().unwrap().to_string(),
    )
    .unwrap();

    let mut cfg = Config::default();
    cfg.discovery.range = tether::DiscoveryRange::Localhost;
    cfg.discovery.registry_dir = Some(reg);
    cfg.security.keys = Some(key.clone());
    let s = Session::open(cfg).unwrap();
    let _p = s
        .publisher(Topic::new(NAME).type_name(TYPE), Qos::default())
        .unwrap();

    let mut heard: Vec<Vec<u8>> = Vec::new();
    let mut endpoints = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 65536];
    while endpoints.is_empty() && Instant::now() < end {
        let Ok(n) = sock.recv(&mut buf) else {
            continue;
        };
        let dg = buf[..n].to_vec();
        if let Ok(d) = Datagram::parse(&dg) {
            for m in d.submessages().flatten() {
                if let Submessage::Endpoint(e) = m {
                    endpoints.push((
                        e.kind,
                        e.topic.to_string(),
                        e.type_name.to_string(),
                        e.protection,
                        e.description.map(<[u8]>::to_vec),
                    ));
                }
            }
        }
        heard.push(dg);
    }
    assert!(
        !endpoints.is_empty(),
        "no ENDPOINT in {} datagrams",
        heard.len()
    );

    // Not a byte of the name or the type, in anything it received.
    for dg in &heard {
        for needle in [NAME.as_bytes(), TYPE.as_bytes(), b"secret", b"Plan"] {
            assert!(
                !dg.windows(needle.len()).any(|w| w == needle),
                "{:?} in clear on the wire",
                String::from_utf8_lossy(needle)
            );
        }
    }
    let (kind, topic, type_name, protection, description) = endpoints.remove(0);
    assert_eq!(kind, EndpointKind::Writer);
    assert_eq!(type_name, "", "the type is folded into the id");
    assert_eq!(protection, ProtectionMode::Encrypt);
    let hex = topic.strip_prefix('#').expect("a topic id");
    assert_eq!(hex.len(), 64);
    let id = TopicId(
        tether_crypto::from_hex(hex)
            .and_then(|b| b.try_into().ok())
            .expect("64 hex digits"),
    );
    let sealed = description.expect("a description for members");

    // Without the realm's secret it does not open (any other secret, as an outsider or a
    // router would hold); with it, it opens, and only beside this topic's id.
    for other in [
        [0u8; 32],
        [7; 32],
        tether_crypto::random_array(&mut tether_crypto::OsRandom),
    ] {
        assert_eq!(
            open_description(&RealmSecret::from_bytes(other), &id, &sealed),
            None
        );
    }
    let secret = tether::keys::KeyBundle::load(&key).unwrap().realm_secret;
    let elsewhere = TopicId::derive(&secret, "/secret/other", TYPE, "");
    assert_eq!(open_description(&secret, &elsewhere, &sealed), None);
    assert_eq!(
        open_description(&secret, &id, &sealed),
        Some((NAME.to_string(), TYPE.to_string())),
        "a member reads it"
    );
}

/// A UDP datagram whose source claims the virtual address of a peer behind a router
/// (`fd74:6574:6865:7200::/64`, `tether_core::route`) is forged: such peers reach a
/// session only through its router links, where the engine takes them without a challenge.
/// Sent from that address for real (bound on the loopback of a network namespace this test
/// makes), it is dropped before the engine and counted (`virtual_source`); another source
/// on the same socket goes through. Needs root and `ip`; skips saying why without.
#[test]
fn a_datagram_claiming_a_routed_peers_address_is_dropped() {
    use tether_testkit::netns::Namespace;
    let ns = match Namespace::create(&format!("vsrc{}", std::process::id() % 100_000)) {
        Ok(ns) => ns,
        Err(why) => {
            tether_testkit::skip!("skipping: {why}");
            return;
        }
    };
    let forged = "fd74:6574:6865:7200::1234";
    let up = ns.ip(&["link", "set", "lo", "up"]);
    let added = ns.ip(&[
        "-6",
        "addr",
        "add",
        &format!("{forged}/128"),
        "dev",
        "lo",
        "nodad",
    ]);
    if let Err(why) = up.and(added) {
        tether_testkit::skip!("skipping: no IPv6 on the namespace's loopback ({why})");
        return;
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter().expect("entering the namespace");
            let mut cfg = Config::default();
            cfg.discovery.range = tether::DiscoveryRange::Off;
            cfg.transport.listen = Some("[::1]:0".parse().unwrap());
            let session = Session::open(cfg).unwrap();
            let to = session.local_addr();
            let datagram = b"RTPS\x02\x05\x01\x0f not a real one, and never looked at";
            // From the virtual address (port 3: a link number): dropped and counted.
            let sock = UdpSocket::bind(format!("[{forged}]:3")).unwrap();
            let received = |s: &Session| s.stats().core.datagrams_received;
            for _ in 0..5 {
                sock.send_to(datagram, to).unwrap();
            }
            let end = Instant::now() + Duration::from_secs(5);
            while session.stats().virtual_source < 5 && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert_eq!(session.stats().virtual_source, 5);
            assert_eq!(received(&session), 0, "the engine saw none of them");
            // From a real address: the engine takes it (and drops it as malformed).
            let honest = UdpSocket::bind("[::1]:0").unwrap();
            honest.send_to(datagram, to).unwrap();
            let end = Instant::now() + Duration::from_secs(5);
            while received(&session) == 0 && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert_eq!(received(&session), 1);
            assert_eq!(session.stats().virtual_source, 5);
        });
    });
}
