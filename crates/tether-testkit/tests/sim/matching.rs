//! Who matches whom: QoS compatibility (reported when it fails), types, partitions,
//! domains, durability for late joiners, endpoints of one participant.

use std::time::Duration;

use tether_core::{Event, Qos, QosPolicy};
use tether_testkit::{Link, Sim};

use crate::helpers::{info, payload, setup};

/// A reliable writer serves a best-effort reader (offered ≥ requested).
#[test]
fn reliable_writer_best_effort_reader_match() {
    let mut sim = Sim::new(1, Link::perfect());
    let (w, rs) = setup(&mut sim, Qos::new(), Qos::new().best_effort(), 1);
    for i in 1..=10 {
        let now = sim.now;
        sim.p(0).write(now, w, i, payload(i)).unwrap();
        sim.pump(0);
    }
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.seqs(1, rs[0]), (1..=10).collect::<Vec<_>>());
}

/// Incompatible QoS: no match, and an event on both sides naming topic, policy and values.
#[test]
fn incompatible_qos_reported_on_both_sides() {
    let mut sim = Sim::new(2, Link::perfect());
    sim.add_node(0);
    sim.add_node(0);
    let now = sim.now;
    let w = sim
        .p(0)
        .create_writer(now, info("/cmd", Qos::new().best_effort()))
        .unwrap();
    let r = sim
        .p(1)
        .create_reader(now, info("/cmd", Qos::new().reliable()));
    sim.pump(0);
    sim.pump(1);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.nodes[0].participant.matched_count(w), 0);
    assert_eq!(sim.nodes[1].participant.matched_count(r), 0);
    for (i, local) in [(0usize, w), (1, r)] {
        let ev: Vec<_> = sim.nodes[i]
            .events
            .iter()
            .filter_map(|e| match e {
                Event::IncompatibleQos(q) => Some(q.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            ev.len(),
            1,
            "node {i}: exactly one report despite re-announcements"
        );
        let q = &ev[0];
        assert_eq!(q.topic, "/cmd");
        assert_eq!(q.local.entity, local);
        assert_eq!(q.policy, QosPolicy::Reliability);
        assert_eq!(q.offered, "best_effort");
        assert_eq!(q.requested, "reliable");
        let line = q.to_string();
        assert!(line.contains("/cmd") && line.contains("reliability=best_effort"));
        assert!(line.contains("reliability=reliable"));
    }
}

/// Type names must agree.
#[test]
fn type_mismatch_is_incompatible() {
    let mut sim = Sim::new(3, Link::perfect());
    sim.add_node(0);
    sim.add_node(0);
    let now = sim.now;
    sim.p(0).create_writer(now, info("/x", Qos::new())).unwrap();
    let mut i = info("/x", Qos::new());
    i.type_name = "geometry_msgs/Twist".into();
    sim.p(1).create_reader(now, i);
    sim.pump(0);
    sim.pump(1);
    sim.run_for(Duration::from_secs(2));
    assert!(
        sim.nodes[1]
            .events
            .iter()
            .any(|e| matches!(e, Event::IncompatibleQos(q) if q.policy == QosPolicy::TypeName))
    );
}

/// A late-joining transient-local reader gets the writer's last n samples; a volatile one
/// gets only what follows.
#[test]
fn transient_local_late_joiner() {
    for seed in 0..10 {
        let mut sim = Sim::new(seed, Link::lossy(0.1));
        sim.add_node(0);
        let now = sim.now;
        let w = sim
            .p(0)
            .create_writer(now, info("/map", Qos::new().keep_last(3).transient_local()))
            .unwrap();
        for i in 1..=10 {
            let now = sim.now;
            sim.p(0).write(now, w, i, payload(i)).unwrap();
        }
        sim.pump(0);
        let late = sim.add_node(0);
        let vol = sim.add_node(0);
        let now = sim.now;
        let r = sim
            .p(late)
            .create_reader(now, info("/map", Qos::new().keep_last(3).transient_local()));
        let rv = sim.p(vol).create_reader(now, info("/map", Qos::new()));
        sim.pump(late);
        sim.pump(vol);
        sim.run_until(Duration::from_secs(30), |s| s.seqs(late, r).len() >= 3);
        assert_eq!(sim.seqs(late, r), vec![8, 9, 10], "seed {seed}");
        // Both ends (the writer may learn of the reader after the reader of the writer).
        sim.run_until(Duration::from_secs(30), |s| {
            s.nodes[vol].participant.matched_count(rv) == 1
                && s.nodes[0].participant.matched_count(w) == 2
        });
        let now = sim.now;
        sim.p(0).write(now, w, 11, payload(11)).unwrap();
        sim.pump(0);
        sim.run_until(Duration::from_secs(30), |s| !s.seqs(vol, rv).is_empty());
        assert_eq!(sim.seqs(vol, rv), vec![11], "seed {seed}");
    }
}

/// Partitions scope matching; other partitions never meet.
#[test]
fn partitions_scope_matching() {
    let mut sim = Sim::new(4, Link::perfect());
    sim.add_node(0);
    sim.add_node(0);
    let now = sim.now;
    let mut wi = info("/p", Qos::new());
    wi.partitions = vec!["robots".into()];
    let w = sim.p(0).create_writer(now, wi).unwrap();
    let mut a = info("/p", Qos::new());
    a.partitions = vec!["robots".into(), "extra".into()];
    let ra = sim.p(1).create_reader(now, a);
    let mut b = info("/p", Qos::new());
    b.partitions = vec!["humans".into()];
    let rb = sim.p(1).create_reader(now, b);
    let rd = sim.p(1).create_reader(now, info("/p", Qos::new()));
    sim.pump(0);
    sim.pump(1);
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.nodes[0].participant.matched_count(w), 1);
    assert_eq!(sim.nodes[1].participant.matched_count(ra), 1);
    assert_eq!(sim.nodes[1].participant.matched_count(rb), 0);
    assert_eq!(sim.nodes[1].participant.matched_count(rd), 0);
}

/// Domains isolate: participants of different domains never discover each other.
#[test]
fn domains_isolate() {
    let mut sim = Sim::new(5, Link::perfect());
    sim.add_node(0);
    sim.add_node(1);
    let now = sim.now;
    sim.p(0).create_writer(now, info("/d", Qos::new())).unwrap();
    sim.p(1).create_reader(now, info("/d", Qos::new()));
    sim.pump(0);
    sim.pump(1);
    sim.run_for(Duration::from_secs(2));
    assert!(sim.nodes[0].participant.remote_participants().is_empty());
    assert!(sim.nodes[1].participant.stats().wrong_domain > 0);
}

/// A writer and reader in the same participant match and deliver without the network.
#[test]
fn same_participant_delivery() {
    let mut sim = Sim::new(10, Link::perfect());
    sim.add_node(0);
    let now = sim.now;
    let r = sim.p(0).create_reader(now, info("/loop", Qos::new()));
    let w = sim
        .p(0)
        .create_writer(now, info("/loop", Qos::new()))
        .unwrap();
    for i in 1..=5 {
        sim.p(0).write(now, w, i, payload(i)).unwrap();
    }
    sim.pump(0);
    assert_eq!(sim.seqs(0, r), vec![1, 2, 3, 4, 5]);
}
