//! Honest outcomes: what a writer can tell its application about delivery it did not get.

use std::time::Duration;

use bytes::Bytes;
use tether_core::{Config, EndpointInfo, EntityId, Qos};
use tether_testkit::{Link, Sim};

fn info(topic: &str) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "t".into(),
        partitions: vec![],
        qos: Qos::new().keep_all(),
    }
}

/// Writes samples `ks` on node 0's writer `wid`.
fn write(sim: &mut Sim, wid: EntityId, ks: std::ops::Range<u64>) {
    for k in ks {
        let now = sim.now;
        sim.p(0)
            .write(now, wid, k, Bytes::from(vec![1; 100]))
            .unwrap();
        sim.pump(0);
    }
}

/// A reliable writer on node 0 and a reliable reader on node 1 (its engine tuned by
/// `tune`), matched, and samples 1–5 written. Returns (sim, writer, reader).
fn matched_pair(seed: u64, tune: impl FnOnce(&mut Config)) -> (Sim, EntityId, EntityId) {
    let mut sim = Sim::new(seed, Link::perfect());
    let w = sim.add_node(0);
    let r = sim.add_node_with(tune);
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info("/t")).unwrap();
    let rid = sim.p(r).create_reader(now, info("/t"));
    sim.pump(w);
    sim.pump(r);
    sim.run_for(Duration::from_secs(2));
    write(&mut sim, wid, 0..5);
    (sim, wid, rid)
}

/// A reliable reader that stops answering keeps being owed its samples while it is matched,
/// and when its lease ends the writer still reports what it never acknowledged (before,
/// the writer counted only the readers matched at the end, and so called this delivered).
#[test]
fn a_reader_that_leaves_unacknowledged_samples_is_reported() {
    let (mut sim, wid, _) = matched_pair(5, |c| {
        c.lease = Duration::from_secs(3);
        c.announce_period = Duration::from_millis(500);
    });
    let (w, r) = (0, 1);
    sim.run_for(Duration::from_secs(1));
    assert!(sim.p(w).all_acked(wid));
    assert_eq!(sim.p(w).unacknowledged(wid), vec![]);

    // The reader's host goes silent: five more samples are never acknowledged.
    sim.nodes[r].up = false;
    write(&mut sim, wid, 5..10);
    sim.run_for(Duration::from_secs(1));
    let owed = sim.p(w).unacknowledged(wid);
    assert_eq!(owed.len(), 1, "{owed:?}");
    assert_eq!((owed[0].samples, owed[0].departed), (5, false));
    assert_eq!(owed[0].name, "node1");

    // Its lease ends: no reader is left, yet the five are still reported, now as lost.
    sim.run_for(Duration::from_secs(5));
    assert_eq!(sim.p(w).matched_count(wid), 0);
    assert!(sim.p(w).all_acked(wid), "no matched reader owes anything");
    let owed = sim.p(w).unacknowledged(wid);
    assert_eq!(owed.len(), 1, "{owed:?}");
    assert_eq!((owed[0].samples, owed[0].departed), (5, true));
}

/// A reader that leaves acknowledges what it received first, so its writer does not count
/// delivered samples as unacknowledged (heartbeats are mostly final: a reader that misses
/// nothing does not answer them, so its last samples are often not yet acknowledged when
/// it goes).
#[test]
fn a_reader_that_leaves_acknowledges_what_it_received() {
    let (mut sim, wid, rid) = matched_pair(6, |_| {});
    let (w, r) = (0, 1);
    sim.run_for(Duration::from_millis(30));
    assert_eq!(sim.seqs(r, rid), vec![1, 2, 3, 4, 5]);
    let owed = sim.p(w).unacknowledged(wid);
    assert!(
        owed.iter().all(|s| !s.departed) && owed.iter().map(|s| s.samples).sum::<u64>() > 0,
        "the test needs samples received but not yet acknowledged: {owed:?}"
    );
    let now = sim.now;
    sim.p(r).delete_endpoint(now, rid);
    sim.pump(r);
    sim.run_for(Duration::from_millis(30));
    assert_eq!(sim.p(w).matched_count(wid), 0);
    assert_eq!(sim.p(w).unacknowledged(wid), vec![]);
}

/// The same over a link that reorders (1 ms plus up to 5 ms each way), the reader's host
/// closing its participant right after (as a process that exits does: ENDPOINT_BYE, then
/// PARTICIPANT_BYE): whichever of its datagrams arrives first, the writer learns what it
/// received before it learns that it left. (Before, the final ACKNACK went in a datagram of
/// its own, and a BYE that overtook it made the writer report every sample the reader had
/// not yet acknowledged as owed by a reader that left: seed 2, for one.)
#[test]
fn a_reader_that_leaves_over_a_reordering_link_acknowledges_first() {
    let link = Link {
        loss: 0.0,
        duplicate: 0.0,
        delay: Duration::from_millis(1),
        jitter: Duration::from_millis(5),
        ..Link::perfect()
    };
    let mut failed = Vec::new();
    for seed in 0..64 {
        let mut sim = Sim::new(seed, link);
        let w = sim.add_node(0);
        let r = sim.add_node(0);
        let now = sim.now;
        let wid = sim.p(w).create_writer(now, info("/t")).unwrap();
        let rid = sim.p(r).create_reader(now, info("/t"));
        sim.pump(w);
        sim.pump(r);
        sim.run_for(Duration::from_secs(2));
        write(&mut sim, wid, 0..5);
        let ok = sim.run_until(Duration::from_secs(1), |s| s.seqs(r, rid).len() == 5);
        assert!(ok, "seed {seed}: the reader got {:?}", sim.seqs(r, rid));
        let now = sim.now;
        sim.p(r).delete_endpoint(now, rid);
        sim.p(r).close();
        sim.pump(r);
        // The host is gone: what it sent is still in flight.
        sim.nodes[r].up = false;
        sim.run_for(Duration::from_millis(100));
        assert_eq!(sim.p(w).matched_count(wid), 0, "seed {seed}");
        let owed = sim.p(w).unacknowledged(wid);
        if !owed.is_empty() {
            failed.push((seed, owed[0].samples));
        }
    }
    assert!(failed.is_empty(), "(seed, samples owed): {failed:?}");
}
