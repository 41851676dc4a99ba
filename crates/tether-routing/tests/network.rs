//! Whole networks of routers and sessions in the deterministic simulator.

mod sim;

use std::time::Duration;

use sim::{Net, key};
use tether_routing::{DropReason, ParticipantId};

const SETTLE: u64 = 100_000;

/// A publisher and a subscriber on either side of a chain of `routers` routers.
fn chain(routers: usize, seed: u64) -> (Net, usize, usize, Vec<usize>) {
    let mut net = Net::new(seed);
    let rs: Vec<usize> = (0..routers).map(|i| net.router(i as u64 + 1)).collect();
    for w in rs.windows(2) {
        net.connect(w[0], w[1]);
    }
    let publisher = net.leaf(100);
    let subscriber = net.leaf(200);
    net.connect(publisher, rs[0]);
    net.connect(subscriber, rs[routers - 1]);
    (net, publisher, subscriber, rs)
}

#[test]
fn data_crosses_one_two_and_three_routers() {
    for routers in 1..=3 {
        for order in 0..2 {
            let (mut net, p, s, rs) = chain(routers, 7 + order);
            // Either order: advertise first, or subscribe first (then the subscription
            // waits for the advertisement).
            if order == 0 {
                net.l(p).leaf.advertise(key(1));
                net.settle(SETTLE);
                net.l(s).leaf.subscribe(key(1));
            } else {
                net.l(s).leaf.subscribe(key(1));
                net.settle(SETTLE);
                net.l(p).leaf.advertise(key(1));
            }
            net.settle(SETTLE);
            net.send_data(p, key(1), b"hello");
            net.settle(SETTLE);
            assert_eq!(
                net.received(s, b"hello"),
                1,
                "{routers} routers, order {order}"
            );
            assert_eq!(net.max_copies(b"hello"), 1);
            // The publisher's leaf was told someone wants the key.
            let pl = net.l(p).leaf.links()[0];
            assert!(net.l(p).leaf.is_wanted(pl, &key(1)));
            // Every router on the way holds the route.
            for &r in &rs {
                assert_eq!(net.r(r).rib_len(), 1);
            }
            // Withdraw: the subscriber gets nothing more, and the publisher is told.
            net.l(p).leaf.withdraw(key(1));
            net.settle(SETTLE);
            assert!(!net.l(p).leaf.is_wanted(pl, &key(1)));
            net.send_data(p, key(1), b"after");
            net.settle(SETTLE);
            assert_eq!(net.received(s, b"after"), 0);
        }
    }
}

/// Many subscribers behind one router: one copy on each link toward them, one DATA each.
#[test]
fn one_copy_per_link_whatever_the_subscribers_behind_it() {
    let mut net = Net::new(3);
    let core = net.router(1);
    let edge = net.router(2);
    let far = net.router(3);
    let trunk = net.connect(core, edge);
    net.connect(core, far);
    let p = net.leaf(100);
    net.connect(p, core);
    let subs: Vec<usize> = (0..5).map(|i| net.leaf(200 + i)).collect();
    for &s in &subs {
        net.connect(s, edge);
        // Two readers in each session: refcounted, one SUBSCRIBE.
        net.l(s).leaf.subscribe(key(9));
        net.l(s).leaf.subscribe(key(9));
    }
    net.l(p).leaf.advertise(key(9));
    net.settle(SETTLE);
    net.send_data(p, key(9), b"x");
    net.settle(SETTLE);
    for &s in &subs {
        assert_eq!(net.received(s, b"x"), 1);
    }
    assert_eq!(net.max_copies(b"x"), 1);
    // The core sent one copy toward the edge and none to the router with no subscriber.
    assert_eq!(net.r(core).stats().data_forwarded, 1);
    assert_eq!(net.r(edge).stats().data_forwarded, 5);
    let _ = trunk;
    // The edge subscribed upstream once.
    let subscribe_frames = net.r(edge).stats().frames_sent;
    assert!(subscribe_frames > 0);
}

/// On a ring, a failed link is routed around; with both paths gone, nothing flows; links
/// back, data flows again.
#[test]
fn routes_heal_on_a_ring_and_go_without_a_path() {
    let mut net = Net::new(11);
    let rs: Vec<usize> = (1..=4).map(|i| net.router(i)).collect();
    let ring: Vec<usize> = (0..4)
        .map(|i| net.connect(rs[i], rs[(i + 1) % 4]))
        .collect();
    let p = net.leaf(100);
    let s = net.leaf(200);
    net.connect(p, rs[0]);
    net.connect(s, rs[2]);
    net.l(p).leaf.advertise(key(2));
    net.l(s).leaf.subscribe(key(2));
    net.settle(SETTLE);
    net.send_data(p, key(2), b"1");
    net.settle(SETTLE);
    assert_eq!(net.received(s, b"1"), 1);
    // Break 1-2 (the tree from 1 reaches 3 through 2, the lower id): heal through 4.
    net.fail(ring[0]);
    net.settle(SETTLE);
    net.send_data(p, key(2), b"2");
    net.settle(SETTLE);
    assert_eq!(net.received(s, b"2"), 1);
    assert_eq!(net.max_copies(b"2"), 1);
    // Break 4-1 too: no path.
    net.fail(ring[3]);
    net.settle(SETTLE);
    net.send_data(p, key(2), b"3");
    net.settle(SETTLE);
    assert_eq!(net.received(s, b"3"), 0);
    assert!(net.r(rs[0]).stats().drops.get(DropReason::NoSubscriber) > 0);
    // Restore both: data flows once.
    net.restore(ring[0]);
    net.restore(ring[3]);
    net.settle(SETTLE);
    net.send_data(p, key(2), b"4");
    net.settle(SETTLE);
    assert_eq!(net.received(s, b"4"), 1);
    assert_eq!(net.max_copies(b"4"), 1);
}

/// A router restarts with its state lost: sessions reconnect and send everything again, the
/// neighbours tell it its old sequence numbers, and data flows again.
#[test]
fn router_restart_recovers() {
    let mut net = Net::new(5);
    let a = net.router(1);
    let b = net.router(2);
    let c = net.router(3);
    net.connect(a, b);
    net.connect(b, c);
    let p = net.leaf(100);
    let s = net.leaf(200);
    net.connect(p, a);
    net.connect(s, c);
    net.l(p).leaf.advertise(key(3));
    net.l(s).leaf.subscribe(key(3));
    net.settle(SETTLE);
    // Restart each router in turn, the publisher's, the middle one, the subscriber's.
    for (round, &r) in [a, b, c].iter().enumerate() {
        net.restart(r);
        net.settle(SETTLE);
        let msg = [b'r', round as u8];
        net.send_data(p, key(3), &msg);
        net.settle(SETTLE);
        assert_eq!(net.received(s, &msg), 1, "after restarting router {r}");
        assert_eq!(net.max_copies(&msg), 1);
    }
    // The publisher's router re-originated above the sequence numbers it had forgotten:
    // a withdrawal still reaches everyone.
    net.l(p).leaf.withdraw(key(3));
    net.settle(SETTLE);
    net.send_data(p, key(3), b"gone");
    net.settle(SETTLE);
    assert_eq!(net.received(s, b"gone"), 0);
}

/// A router with a subscriber and no advertisement queries its neighbours; an answer makes
/// the subscription go up.
#[test]
fn query_for_an_unknown_key() {
    let mut net = Net::new(9);
    let a = net.router(1);
    let b = net.router(2);
    let p = net.leaf(100);
    let s = net.leaf(200);
    net.connect(p, a);
    net.l(p).leaf.advertise(key(4));
    net.settle(SETTLE);
    // B comes up, but its link to A comes later: B has no advertisement of key 4 when the
    // subscriber arrives, so it queries once A is there ... simulate a lagging table by
    // linking B to A first and holding A's table sync back: subscribe before settling.
    net.connect(s, b);
    net.l(s).leaf.subscribe(key(4));
    net.settle(SETTLE);
    assert_eq!(
        net.r(b).stats().queries_sent,
        0,
        "no router neighbour: nobody to ask"
    );
    net.connect(a, b);
    // Deliver only the first few frames: B's HELLO exchange, then run to the end.
    net.settle(SETTLE);
    net.send_data(p, key(4), b"q");
    net.settle(SETTLE);
    assert_eq!(net.received(s, b"q"), 1);

    // A key nobody publishes: the query goes out once, expires, and may go again.
    net.l(s).leaf.subscribe(key(5));
    net.settle(SETTLE);
    let sent = net.r(b).stats().queries_sent;
    assert!(sent >= 1);
    assert_eq!(net.r(a).stats().queries_answered, 0);
    net.advance(Duration::from_secs(6));
    assert!(net.r(b).stats().queries_expired >= 1);
    // Now a publisher appears: the advertisement floods, and the subscription goes up.
    net.l(p).leaf.advertise(key(5));
    net.settle(SETTLE);
    net.send_data(p, key(5), b"late");
    net.settle(SETTLE);
    assert_eq!(net.received(s, b"late"), 1);
}

/// A query answered from a neighbour's table: the router that asks lost its copy (a
/// restart) while the neighbour kept it.
#[test]
fn query_is_answered_from_a_neighbours_table() {
    use tether_routing::{Frame, LinkId, NodeId, Role};
    let t = std::time::Instant::now();
    let mut a = tether_routing::Router::new(tether_routing::Config::new(NodeId(1), 0));
    // A learns key 6 from a session.
    a.link_up(t, LinkId(1), Role::Session, NodeId(100)).unwrap();
    a.handle_frame(
        t,
        LinkId(1),
        Frame::Participant(tether_routing::frame::HostRoute {
            participant: ParticipantId(1000),
            origin: NodeId(100),
            seq: 1,
        }),
    )
    .unwrap();
    a.handle_frame(
        t,
        LinkId(1),
        Frame::Advertise(tether_routing::frame::Advertise {
            key: key(6),
            origin: NodeId(100),
            seq: 1,
            hops: 0,
        }),
    )
    .unwrap();
    a.link_up(t, LinkId(2), Role::Router, NodeId(2)).unwrap();
    while a.poll_transmit().is_some() {}
    a.handle_frame(t, LinkId(2), Frame::Query(key(6))).unwrap();
    let answer = a.poll_transmit().expect("an answer");
    assert_eq!(answer.0, LinkId(2));
    assert!(matches!(answer.1, Frame::Advertise(ad) if ad.key == key(6) && ad.origin == NodeId(1)));
    assert_eq!(a.stats().queries_answered, 1);
}

/// UNICAST finds its participant through host routes; ANNOUNCE reaches every session once.
#[test]
fn unicast_and_announce() {
    let mut net = Net::new(21);
    let rs: Vec<usize> = (1..=4).map(|i| net.router(i)).collect();
    for i in 0..4 {
        net.connect(rs[i], rs[(i + 1) % 4]);
    }
    net.connect(rs[0], rs[2]); // a chord
    let leaves: Vec<usize> = (0..4).map(|i| net.leaf(100 + i as u64)).collect();
    for (i, &l) in leaves.iter().enumerate() {
        net.connect(l, rs[i]);
    }
    net.settle(SETTLE);
    net.send_unicast(leaves[0], ParticipantId(1020), b"u");
    net.send_announce(leaves[1], b"a");
    net.settle(SETTLE);
    assert_eq!(net.received(leaves[2], b"u"), 1);
    for &l in &leaves {
        if l != leaves[2] {
            assert_eq!(net.received(l, b"u"), 0);
        }
        let want = usize::from(l != leaves[1]);
        assert_eq!(net.received(l, b"a"), want);
    }
    // A participant that left has no route.
    let p = net.l(leaves[2]).participant;
    net.l(leaves[2]).leaf.remove_participant(p);
    net.settle(SETTLE);
    net.send_unicast(leaves[0], ParticipantId(1020), b"u2");
    net.settle(SETTLE);
    assert_eq!(net.received(leaves[2], b"u2"), 0);
}

/// Tombstones and unreachable routers are swept, and the table shrinks back to nothing.
#[test]
fn sweeps_forget_withdrawn_and_unreachable() {
    let mut net = Net::new(2);
    let a = net.router(1);
    let b = net.router(2);
    let ab = net.connect(a, b);
    let p = net.leaf(100);
    net.connect(p, b);
    net.l(p).leaf.advertise(key(7));
    net.l(p).leaf.advertise(key(8));
    net.settle(SETTLE);
    assert_eq!(net.r(a).rib_len(), 2);
    net.l(p).leaf.withdraw(key(7));
    net.settle(SETTLE);
    assert_eq!(net.r(a).rib_len(), 2, "a tombstone holds the withdrawn key");
    net.fail(ab);
    net.settle(SETTLE);
    for _ in 0..3 {
        net.advance(Duration::from_secs(31));
    }
    assert_eq!(
        net.r(a).rib_len(),
        0,
        "withdrawn and unreachable routes are gone"
    );
    assert_eq!(net.r(a).node_count(), 1);
    assert_eq!(net.r(b).rib_len(), 1, "B still publishes key 8");
}
