//! What a session learns of the endpoints it discovers (issue 18, points 4 and 6), over
//! real loopback sockets: the encoding label a publisher gives its topic, for the samples of
//! its writer and in `discovered()`; in a secure realm, the topic's name and type for
//! members (an outsider sees the id alone) and the certified name of the session.

mod common;
use common::{local_cfg, wait_for};

use std::time::Duration;

use tether::{Encoding, ProtectionMode, Qos, Session, Topic};

/// A subscriber tells a sample's writer's label, remote and local alike; `discovered()` and
/// `endpoint()` give it too.
#[test]
fn encoding_label_reaches_subscribers() {
    let dir = tempfile::tempdir().unwrap();
    let a = Session::open(local_cfg(dir.path())).unwrap();
    let b = Session::open(local_cfg(dir.path())).unwrap();
    let sub = b.subscriber("/pose", Qos::default()).unwrap();
    let p = a
        .publisher(Topic::new("/pose").encoding(Encoding::Json), Qos::default())
        .unwrap();
    let local = b
        .publisher("/pose", Qos::default().encoding("cbor".parse().unwrap()))
        .unwrap();
    // Both ways: a writer that has not matched the reader yet writes for nobody.
    assert!(wait_for(Duration::from_secs(10), || sub.matched() == 2
        && p.matched() == 1));
    p.put(&b"{\"x\":1}"[..]).unwrap();
    let s = sub.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(sub.writer_encoding(s.writer), Encoding::Json);
    local.put(&b"\xa1ax\x01"[..]).unwrap();
    let s = sub.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(sub.writer_encoding(s.writer), Encoding::Cbor);
    let d = b
        .discovered()
        .into_iter()
        .find(|d| d.endpoint.kind == tether::EndpointKind::Writer)
        .unwrap();
    assert_eq!(d.encoding(), Encoding::Json);
    assert_eq!(d.topic_name(), "/pose");
    assert_eq!(d.endpoint.protection, ProtectionMode::Unannounced);
    assert_eq!(b.endpoint(d.guid).unwrap().encoding(), Encoding::Json);
}

/// A writer that leaves before its samples are taken (a one-shot `tether pub` exits at
/// once) keeps its label for them: remote (its session closed) and local (dropped).
#[test]
fn a_departed_writers_samples_keep_its_label() {
    let dir = tempfile::tempdir().unwrap();
    let a = Session::open(local_cfg(dir.path())).unwrap();
    let b = Session::open(local_cfg(dir.path())).unwrap();
    let sub = b.subscriber("/pose", Qos::default().keep_all()).unwrap();
    let p = a
        .publisher(Topic::new("/pose").encoding(Encoding::Json), Qos::default())
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || sub.matched() == 1
        && p.matched() == 1));
    p.put(&b"{\"x\":1}"[..]).unwrap();
    assert!(p.wait_for_acknowledgments(Duration::from_secs(10)));
    drop(p);
    drop(a);
    // Gone from the subscriber's session, its sample still waiting.
    assert!(wait_for(Duration::from_secs(10), || sub.matched() == 0));
    let local = b
        .publisher(Topic::new("/pose").encoding(Encoding::Cbor), Qos::default())
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || sub.matched() == 1));
    local.put(&b"\xa1ax\x01"[..]).unwrap();
    drop(local);
    assert!(wait_for(Duration::from_secs(10), || sub.matched() == 0));
    let s = sub.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(s.payload, &b"{\"x\":1}"[..]);
    assert_eq!(sub.writer_encoding(s.writer), Encoding::Json);
    let s = sub.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(sub.writer_encoding(s.writer), Encoding::Cbor);
}

/// In a secure realm members read a publisher's topic and type and its session's certified
/// name; a session without keys sees the topic's id alone.
#[test]
fn members_see_names_outsiders_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let realm = tether::keys::Realm::init(&dir.path().join("realm")).unwrap();
    realm
        .issue("robot", vec!["/robot/**".into()], vec![], 30)
        .unwrap();
    realm
        .issue("viewer", vec![], vec!["/none".into()], 30)
        .unwrap();
    let secure = |name: &str| {
        let mut c = local_cfg(dir.path());
        c.security.keys = Some(dir.path().join("realm").join(format!("{name}.key")));
        c
    };
    let a = Session::open(secure("robot")).unwrap();
    let b = Session::open(secure("viewer")).unwrap();
    let plain = Session::open(local_cfg(dir.path())).unwrap();
    let _p = a
        .publisher(
            Topic::new("/robot/odom")
                .type_name("nav_msgs/Odometry")
                .encoding(Encoding::Cdr),
            Qos::default(),
        )
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || !b
        .discovered()
        .is_empty()));
    let d = &b.discovered()[0];
    assert_eq!(d.topic_name(), "/robot/odom");
    assert_eq!(d.type_name(), "nav_msgs/Odometry");
    assert!(d.endpoint.info.topic.starts_with('#'));
    assert_eq!(d.encoding(), Encoding::Cdr);
    assert_eq!(d.endpoint.protection, ProtectionMode::Encrypt);
    assert_eq!(d.session_name(), Some("robot"));
    // The outsider hears the announcement, and learns the topic's id alone.
    assert!(wait_for(Duration::from_secs(10), || !plain
        .discovered()
        .is_empty()));
    let o = &plain.discovered()[0];
    assert_eq!(o.topic_name(), d.endpoint.info.topic);
    assert_eq!(o.type_name(), "");
    assert_eq!(o.session_name(), None);
}
