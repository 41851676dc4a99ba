use super::forward::export_allows;
use super::*;
use tether_routing::frame::{Data, Unicast};
use tether_routing::{NodeId, ParticipantId, RouteKey};

fn cfg(export: &str) -> RouterConfig {
    RouterConfig::parse(
        &format!("keys = \"k\"\nlisten = \"127.0.0.1:1\"\n{export}"),
        std::path::Path::new("r.toml"),
    )
    .unwrap()
}

fn data(k: u8) -> Frame {
    Frame::Data(Data {
        key: RouteKey([k; 32]),
        origin: NodeId(1),
        src: ParticipantId(1),
        hops: 0,
        datagram: bytes::Bytes::new(),
    })
}

fn unicast(k: u8) -> Frame {
    Frame::Unicast(Unicast {
        dst: ParticipantId(2),
        src: ParticipantId(1),
        hops: 0,
        key: RouteKey([k; 32]),
        reader: false,
        datagram: bytes::Bytes::new(),
    })
}

/// The announcement of an endpoint of key `k` (a reader's if `reader`), to one
/// participant (`unicast`) or flooded.
fn endpoint(k: u8, reader: bool, unicast: bool) -> Frame {
    let key = RouteKey([k; 32]);
    let datagram = bytes::Bytes::new();
    if unicast {
        Frame::Unicast(Unicast {
            dst: ParticipantId(2),
            src: ParticipantId(1),
            hops: 0,
            key,
            reader,
            datagram,
        })
    } else {
        Frame::Announce(tether_routing::frame::Announce {
            src: ParticipantId(1),
            origin: NodeId(1),
            hops: 0,
            key,
            reader,
            datagram,
        })
    }
}

/// Failed handshakes are said at most once a second: the rest within the second are
/// held back and counted, and said with the next line.
#[test]
fn warnings_are_said_once_a_second_with_a_count() {
    let mut said = Said::default();
    said.warn("first");
    for _ in 0..1000 {
        said.warn("flood");
    }
    assert_eq!(said.held, 1000, "held back within the second");
    said.last = Some(Instant::now() - Duration::from_secs(2));
    said.warn("a second later");
    assert_eq!(said.held, 0, "said, with the count of those held back");
}

/// A writer's announcement crosses as its data does, a reader's as a subscription
/// does: for an "out" key a local writer is announced outside and a local reader is
/// not (no data of that key may come in for it), an outside reader is announced inside
/// and an outside writer is not; unlisted keys' announcements cross neither way; a
/// participant's announcement (no key) always does.
#[test]
fn endpoint_announcements_cross_as_their_data_would() {
    let c = cfg(&format!(
        "[[export]]\nkey = \"{}\"\ndirection = \"out\"",
        "01".repeat(32)
    ));
    for unicast in [true, false] {
        assert!(export_allows(&c, &endpoint(1, false, unicast), true));
        assert!(!export_allows(&c, &endpoint(1, true, unicast), true));
        assert!(export_allows(&c, &endpoint(1, true, unicast), false));
        assert!(!export_allows(&c, &endpoint(1, false, unicast), false));
        for (reader, outward) in [(false, false), (false, true), (true, false), (true, true)] {
            assert!(!export_allows(&c, &endpoint(3, reader, unicast), outward));
        }
    }
    assert!(export_allows(&c, &endpoint(0, false, false), true));
    assert!(export_allows(&c, &endpoint(0, false, false), false));
}

/// Data of an "out" key leaves and does not enter; a subscription to it comes in (the
/// outside asks for it) and does not go out; unlisted keys cross neither way; frames
/// that are no topic's always cross; without a list everything does.
#[test]
fn export_rules_by_direction() {
    let c = cfg(&format!(
        "[[export]]\nkey = \"{}\"\ndirection = \"out\"\n[[export]]\nkey = \"{}\"\ndirection = \"in\"",
        "01".repeat(32),
        "02".repeat(32)
    ));
    assert!(export_allows(&c, &data(1), true));
    assert!(!export_allows(&c, &data(1), false));
    assert!(export_allows(&c, &unicast(1), true));
    assert!(!export_allows(&c, &unicast(2), true));
    assert!(export_allows(&c, &data(2), false));
    assert!(export_allows(
        &c,
        &Frame::Subscribe(RouteKey([1; 32])),
        false
    ));
    assert!(!export_allows(
        &c,
        &Frame::Subscribe(RouteKey([1; 32])),
        true
    ));
    assert!(export_allows(
        &c,
        &Frame::Subscribe(RouteKey([2; 32])),
        true
    ));
    assert!(!export_allows(&c, &data(3), true) && !export_allows(&c, &data(3), false));
    assert!(
        export_allows(&c, &unicast(0), true),
        "control unicast is no topic's"
    );
    let open = cfg("");
    assert!(export_allows(&open, &data(3), true) && export_allows(&open, &data(3), false));
}
