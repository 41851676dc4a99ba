//! Router unit tests: one router, frames in, frames out.

use super::*;
use crate::frame::{Data, Unicast};
use bytes::Bytes;

const S: LinkId = LinkId(10);
const N: LinkId = LinkId(20);

fn key(b: u8) -> RouteKey {
    RouteKey([b; 32])
}

fn drain(r: &mut Router) -> Vec<(LinkId, Frame)> {
    core::iter::from_fn(|| r.poll_transmit()).collect()
}

/// A router (node 1) with a session (node 100, participant 1000) and a router neighbour
/// (node 2) that lists it back.
fn router(now: Instant) -> Router {
    let mut r = Router::new(Config::new(NodeId(1), 0));
    r.link_up(now, S, Role::Session, NodeId(100)).unwrap();
    r.handle_frame(
        now,
        S,
        Frame::Participant(HostRoute {
            participant: ParticipantId(1000),
            origin: NodeId(100),
            seq: 1,
        }),
    )
    .unwrap();
    r.link_up(now, N, Role::Router, NodeId(2)).unwrap();
    r.handle_frame(
        now,
        N,
        Frame::LinkState(LinkState::new(NodeId(2), 1, &[NodeId(1)])),
    )
    .unwrap();
    drain(&mut r);
    r
}

fn data(k: RouteKey, origin: u64, hops: u8) -> Frame {
    Frame::Data(Data {
        key: k,
        origin: NodeId(origin),
        src: ParticipantId(1000),
        hops,
        datagram: Bytes::from_static(b"d"),
    })
}

#[test]
fn hello_checks_domain_version_and_node() {
    let t = Instant::now();
    let mut r = Router::new(Config::new(NodeId(1), 5));
    let hello = |domain, node| {
        Frame::Hello(Hello {
            version: LINK_VERSION,
            role: Role::Router,
            node: NodeId(node),
            domain,
        })
    };
    assert_eq!(
        r.handle_frame(t, N, hello(6, 2)),
        Err(LinkError::WrongDomain { ours: 5, theirs: 6 })
    );
    assert_eq!(r.handle_frame(t, N, hello(5, 1)), Err(LinkError::OwnNode));
    assert_eq!(
        r.handle_frame(t, N, Frame::Subscribe(key(1))),
        Err(LinkError::NotUp)
    );
    assert_eq!(r.handle_frame(t, N, hello(5, 2)), Ok(()));
    assert_eq!(r.link_count(), 1);
    assert_eq!(
        r.handle_frame(t, N, hello(5, 2)),
        Err(LinkError::Unexpected(FrameType::Hello))
    );
    assert_eq!(
        r.link_up(t, N, Role::Router, NodeId(3)),
        Err(LinkError::AlreadyUp)
    );
}

#[test]
fn sessions_cannot_speak_for_others() {
    let t = Instant::now();
    let mut r = router(t);
    let adv = Frame::Advertise(Advertise {
        key: key(1),
        origin: NodeId(99),
        seq: 1,
        hops: 0,
    });
    assert_eq!(r.handle_frame(t, S, adv), Err(LinkError::SpoofedOrigin));
    assert_eq!(
        r.handle_frame(t, S, Frame::Query(key(1))),
        Err(LinkError::Unexpected(FrameType::Query))
    );
    // DATA for a key the session did not advertise, or from a participant it did not
    // announce: dropped and counted, the link stays.
    r.handle_frame(t, S, data(key(1), 100, 0)).unwrap();
    assert_eq!(r.stats().drops.get(DropReason::NoRoute), 1);
    let own = Frame::Advertise(Advertise {
        key: key(1),
        origin: NodeId(100),
        seq: 1,
        hops: 0,
    });
    r.handle_frame(t, N, Frame::Subscribe(key(2))).unwrap();
    r.handle_frame(t, S, data(key(2), 100, 0)).unwrap();
    assert_eq!(r.stats().drops.get(DropReason::NotPublisher), 1);
    r.handle_frame(t, S, own).unwrap();
    let forged = Frame::Data(Data {
        key: key(1),
        origin: NodeId(100),
        src: ParticipantId(4242),
        hops: 0,
        datagram: Bytes::new(),
    });
    r.handle_frame(t, S, forged).unwrap();
    assert_eq!(r.stats().drops.get(DropReason::SpoofedSource), 1);
}

/// A session's advertisement is flooded as this router's; a neighbour's subscription
/// reaches the publisher session as SUBSCRIBE; DATA goes to the neighbour once.
#[test]
fn local_publisher_and_remote_subscriber() {
    let t = Instant::now();
    let mut r = router(t);
    r.handle_frame(
        t,
        S,
        Frame::Advertise(Advertise {
            key: key(1),
            origin: NodeId(100),
            seq: 7,
            hops: 0,
        }),
    )
    .unwrap();
    let out = drain(&mut r);
    assert!(matches!(
        &out[..],
        [(N, Frame::Advertise(a))] if a.origin == NodeId(1) && a.hops == 0
    ));
    r.handle_frame(t, N, Frame::Subscribe(key(1))).unwrap();
    assert_eq!(drain(&mut r), vec![(S, Frame::Subscribe(key(1)))]);
    assert!(r.has_subscriber(&key(1), N));
    assert!(r.is_subscribed_on(&key(1), S));
    r.handle_frame(t, S, data(key(1), 100, 0)).unwrap();
    let out = drain(&mut r);
    assert_eq!(out.len(), 1);
    assert!(matches!(&out[0], (N, Frame::Data(d)) if d.origin == NodeId(1) && d.hops == 0));
    assert_eq!(r.stats().data_forwarded, 1);
    // The neighbour leaves: the publisher is told nobody wants the key any more.
    r.link_down(t, N);
    assert_eq!(drain(&mut r), vec![(S, Frame::Unsubscribe(key(1)))]);
}

/// DATA from a router over a link that is not an edge of the key's tree is dropped, and so
/// is DATA that has travelled too far.
#[test]
fn data_checks_tree_and_hops() {
    let t = Instant::now();
    let mut r = router(t);
    // Node 2 advertises key 1 and our session subscribes: we subscribe toward node 2.
    r.handle_frame(
        t,
        N,
        Frame::Advertise(Advertise {
            key: key(1),
            origin: NodeId(2),
            seq: 1,
            hops: 0,
        }),
    )
    .unwrap();
    r.handle_frame(t, S, Frame::Subscribe(key(1))).unwrap();
    assert_eq!(drain(&mut r), vec![(N, Frame::Subscribe(key(1)))]);
    r.handle_frame(t, N, data(key(1), 2, 0)).unwrap();
    let out = drain(&mut r);
    assert!(matches!(&out[..], [(S, Frame::Data(d))] if d.hops == 1));
    r.handle_frame(t, N, data(key(1), 2, MAX_HOPS)).unwrap();
    assert_eq!(r.stats().drops.get(DropReason::HopLimit), 1);
    // A second router neighbour that is not in the graph yet is not a tree edge.
    r.link_up(t, LinkId(30), Role::Router, NodeId(3)).unwrap();
    drain(&mut r);
    r.handle_frame(t, LinkId(30), data(key(1), 2, 0)).unwrap();
    assert_eq!(r.stats().drops.get(DropReason::NotOnTree), 1);
}

/// A new router neighbour gets the table lazily, one route per poll, and gets all of it.
#[test]
fn table_sync_is_lazy_and_complete() {
    let t = Instant::now();
    let mut r = router(t);
    for i in 0..50u8 {
        r.handle_frame(
            t,
            N,
            Frame::Advertise(Advertise {
                key: key(i),
                origin: NodeId(2),
                seq: 1,
                hops: 0,
            }),
        )
        .unwrap();
    }
    drain(&mut r);
    r.link_up(t, LinkId(30), Role::Router, NodeId(3)).unwrap();
    let out = drain(&mut r);
    let adverts = out
        .iter()
        .filter(|(l, f)| *l == LinkId(30) && matches!(f, Frame::Advertise(_)))
        .count();
    assert_eq!(adverts, 50);
}

/// Limits refuse and count; nothing grows past them.
#[test]
fn limits_are_enforced() {
    let t = Instant::now();
    let mut config = Config::new(NodeId(1), 0);
    config.max_routes(3).max_links(2).max_participants(1);
    let mut r = Router::new(config);
    r.link_up(t, S, Role::Session, NodeId(100)).unwrap();
    r.link_up(t, N, Role::Router, NodeId(2)).unwrap();
    assert_eq!(
        r.link_up(t, LinkId(3), Role::Router, NodeId(3)),
        Err(LinkError::TooManyLinks)
    );
    for i in 0..5u8 {
        r.handle_frame(t, S, Frame::Subscribe(key(i))).unwrap();
    }
    assert_eq!(r.rib_len(), 3);
    assert_eq!(r.stats().drops.get(DropReason::RouteLimit), 2);
    for p in [1000, 1001] {
        r.handle_frame(
            t,
            S,
            Frame::Participant(HostRoute {
                participant: ParticipantId(p),
                origin: NodeId(100),
                seq: 1,
            }),
        )
        .unwrap();
    }
    assert_eq!(r.participant_count(), 1);
    assert_eq!(r.stats().drops.get(DropReason::ParticipantLimit), 1);
    // UNICAST to nobody.
    r.handle_frame(
        t,
        S,
        Frame::Unicast(Unicast {
            dst: ParticipantId(5),
            src: ParticipantId(1000),
            hops: 0,
            key: RouteKey::default(),
            reader: false,
            datagram: Bytes::new(),
        }),
    )
    .unwrap();
    assert_eq!(r.stats().drops.get(DropReason::NoRoute), 1);
}

/// A member cannot take over another session's participant id (it would receive its
/// unicast and have the victim's own traffic refused as spoofed), nor announce more than
/// a few participants or fill the table from one link.
#[test]
fn one_session_cannot_take_anothers_id_or_fill_the_tables() {
    let t = Instant::now();
    let mut r = router(t);
    let evil = LinkId(11);
    r.link_up(t, evil, Role::Session, NodeId(101)).unwrap();
    let claim = |p: u64| {
        Frame::Participant(HostRoute {
            participant: ParticipantId(p),
            origin: NodeId(101),
            seq: 1,
        })
    };
    r.handle_frame(t, evil, claim(1000)).unwrap();
    assert_eq!(r.stats().drops.get(DropReason::SpoofedSource), 1);
    // The victim's traffic still counts as its own.
    r.handle_frame(
        t,
        S,
        Frame::Advertise(Advertise {
            key: key(9),
            origin: NodeId(100),
            seq: 2,
            hops: 0,
        }),
    )
    .unwrap();
    r.handle_frame(t, S, data(key(9), 100, 0)).unwrap();
    assert_eq!(r.stats().drops.get(DropReason::SpoofedSource), 1);
    for p in 0..MAX_PARTICIPANTS_PER_SESSION as u64 + 5 {
        r.handle_frame(t, evil, claim(5000 + p)).unwrap();
    }
    assert_eq!(r.stats().drops.get(DropReason::ParticipantLimit), 5);
    assert_eq!(r.participant_count(), 1 + MAX_PARTICIPANTS_PER_SESSION);
    // Once the victim's link is gone, its id may be announced elsewhere (a reconnect).
    r.link_down(t, S);
    let again = LinkId(12);
    r.link_up(t, again, Role::Session, NodeId(100)).unwrap();
    r.handle_frame(
        t,
        again,
        Frame::Participant(HostRoute {
            participant: ParticipantId(1000),
            origin: NodeId(100),
            seq: 3,
        }),
    )
    .unwrap();
    assert_eq!(r.stats().drops.get(DropReason::SpoofedSource), 1);
}

/// A session that dials again before the router has seen its old link go (its side noticed
/// the silence first) announces its participant on the new link. With the same owner the
/// new link takes the id, and the old link's end does not take it away; another owner's
/// link still may not.
#[test]
fn a_session_dialling_again_takes_its_id_to_the_new_link() {
    let t = Instant::now();
    let mut r = router(t);
    r.set_link_owner(S, 7);
    let host = |seq| {
        Frame::Participant(HostRoute {
            participant: ParticipantId(1000),
            origin: NodeId(100),
            seq,
        })
    };
    let other = LinkId(11);
    r.link_up(t, other, Role::Session, NodeId(100)).unwrap();
    r.set_link_owner(other, 8);
    r.handle_frame(t, other, host(2)).unwrap();
    assert_eq!(r.stats().drops.get(DropReason::SpoofedSource), 1);
    let again = LinkId(12);
    r.link_up(t, again, Role::Session, NodeId(100)).unwrap();
    r.set_link_owner(again, 7);
    r.handle_frame(t, again, host(3)).unwrap();
    assert_eq!(r.stats().drops.get(DropReason::SpoofedSource), 1);
    assert_eq!(r.stats().hosts_taken_over, 1);
    r.link_down(t, S);
    drain(&mut r);
    let unicast = Frame::Unicast(Unicast {
        dst: ParticipantId(1000),
        src: ParticipantId(2000),
        hops: 0,
        key: RouteKey::default(),
        reader: false,
        datagram: Bytes::from_static(b"u"),
    });
    r.handle_frame(t, N, unicast).unwrap();
    let out = drain(&mut r);
    assert!(
        out.iter()
            .any(|(l, f)| *l == again && matches!(f, Frame::Unicast(_))),
        "unicast to the participant goes to its new link: {out:?}"
    );
    assert_eq!(r.stats().drops.get(DropReason::NoRoute), 0);
}
