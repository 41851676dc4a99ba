//! Loss reported honestly: every sample a reader will never deliver is counted in `lost`
//! and raised as `SamplesLost` with its writer, its sequence numbers and why; a reader
//! learns where it starts from the writer.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use tether_core::{Config, EndpointInfo, EntityId, Event, LossReason, Qos};
use tether_testkit::{Link, Sim};

fn info(qos: Qos) -> EndpointInfo {
    EndpointInfo {
        topic: "/t".into(),
        type_name: "t".into(),
        partitions: vec![],
        qos,
    }
}

fn payload(k: u64) -> Bytes {
    Bytes::from(format!("sample-{k}").into_bytes())
}

/// The runs node `i`'s reader `r` was told it lost: (first, last, reason), in order, each
/// event checked for a count that matches its range.
fn losses(sim: &Sim, i: usize, r: EntityId) -> Vec<(u64, u64, LossReason)> {
    sim.nodes[i]
        .events
        .iter()
        .filter_map(|e| match e {
            Event::SamplesLost {
                reader,
                first,
                last,
                count,
                reason,
                ..
            } if *reader == r => {
                assert_eq!(*count, last - first + 1, "{e:?}");
                Some((*first, *last, *reason))
            }
            _ => None,
        })
        .collect()
}

/// Every sequence number of `1..=n` is either delivered (once, in order) or reported lost
/// (once), never both, never neither; and the reader's counters agree. Returns the lost.
fn accounted(sim: &Sim, i: usize, r: EntityId, n: u64, what: &str) -> BTreeSet<u64> {
    let got = sim.seqs(i, r);
    assert!(
        got.windows(2).all(|p| p[0] < p[1]),
        "{what}: delivered out of order or twice: {got:?}"
    );
    let mut lost = BTreeSet::new();
    for (a, b, _) in losses(sim, i, r) {
        for s in a..=b {
            assert!(lost.insert(s), "{what}: {s} reported lost twice");
        }
    }
    let delivered: BTreeSet<u64> = got.iter().copied().collect();
    assert!(
        delivered.is_disjoint(&lost),
        "{what}: delivered and lost: {:?}",
        delivered.intersection(&lost).collect::<Vec<_>>()
    );
    let all: BTreeSet<u64> = delivered.union(&lost).copied().collect();
    assert_eq!(
        all,
        (1..=n).collect(),
        "{what}: neither delivered nor reported lost: {:?}",
        (1..=n).filter(|s| !all.contains(s)).collect::<Vec<_>>()
    );
    assert_eq!(
        sim.nodes[i].participant.stats().lost,
        lost.len() as u64,
        "{what}"
    );
    assert_eq!(
        sim.nodes[i].participant.reader_lost(r),
        lost.len() as u64,
        "{what}"
    );
    lost
}

/// Delivered plus reported lost, for run_until.
fn settled(sim: &Sim, i: usize, r: EntityId) -> u64 {
    sim.seqs(i, r).len() as u64 + sim.nodes[i].participant.reader_lost(r)
}

/// A keep-last reader whose application does not take: every sample its cache replaced is
/// lost, counted and reported (before, 15 samples overwritten in a row left `lost` at 0).
#[test]
fn a_keep_last_overflow_is_counted() {
    let mut sim = Sim::new(1, Link::perfect());
    let (w, r) = (sim.add_node(0), sim.add_node(0));
    let now = sim.now;
    let wid = sim
        .p(w)
        .create_writer(now, info(Qos::new().keep_all()))
        .unwrap();
    let rid = sim.p(r).create_reader(now, info(Qos::new().keep_last(5)));
    sim.pump(w);
    sim.pump(r);
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        s.nodes[w].participant.matched_count(wid) == 1
            && s.nodes[r].participant.matched_count(rid) == 1
    }));
    sim.nodes[r].auto_take = false;
    for k in 1..=20 {
        let now = sim.now;
        sim.p(w).write(now, wid, k, payload(k)).unwrap();
        sim.pump(w);
        sim.run_for(Duration::from_millis(5));
    }
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.p(r).stats().lost, 15);
    let l = losses(&sim, r, rid);
    assert!(
        l.iter().all(|&(_, _, why)| why == LossReason::Overwritten),
        "{l:?}"
    );
    assert_eq!(sim.take_all(r, rid), 5);
    assert_eq!(sim.seqs(r, rid), (16..=20).collect::<Vec<_>>());
    let lost = accounted(&sim, r, rid, 20, "keep-last overflow");
    assert_eq!(lost, (1..=15).collect());
}

/// Under heavy loss, a reader learns where it starts from the writer, not from whatever
/// heartbeat reaches it first. The writer starts writing as soon as it has matched the
/// reader (`pub --wait-matched 1`); the reader may not know the writer yet, and its first
/// heartbeat may be a periodic one announcing a history that has already moved on. A
/// keep-all stream is then delivered whole, its first sample included; a keep-last one
/// loses only what its writer no longer had, and says so. (Before, the reader started at
/// the first heartbeat's `first`, and silently skipped what preceded it.)
#[test]
fn a_reader_starts_where_its_writer_says_under_loss() {
    let mut skipped_runs = 0;
    for seed in 0..80u64 {
        let loss = [0.2, 0.3][(seed % 2) as usize];
        let keep_all = seed % 4 < 2;
        let mut sim = Sim::new(seed, Link::lossy(loss));
        let (w, r) = (sim.add_node(0), sim.add_node(0));
        let now = sim.now;
        let rid = sim.p(r).create_reader(now, info(Qos::new().keep_all()));
        sim.pump(r);
        sim.run_for(Duration::from_millis(100));
        let wq = if keep_all {
            Qos::new().keep_all()
        } else {
            Qos::new().keep_last(2)
        };
        let now = sim.now;
        let wid = sim.p(w).create_writer(now, info(wq)).unwrap();
        sim.pump(w);
        assert!(sim.run_until(Duration::from_secs(60), |s| {
            s.nodes[w].participant.matched_count(wid) == 1
        }));
        let n = 12;
        for k in 1..=n {
            let now = sim.now;
            sim.p(w).write(now, wid, k, payload(k)).unwrap();
            sim.pump(w);
            sim.run_for(Duration::from_millis(2));
        }
        let what = format!("seed {seed}, loss {loss}, keep-all {keep_all}");
        assert!(
            sim.run_until(Duration::from_secs(120), |s| settled(s, r, rid) == n),
            "{what}: {:?} delivered, {} lost",
            sim.seqs(r, rid),
            sim.nodes[r].participant.reader_lost(rid)
        );
        let lost = accounted(&sim, r, rid, n, &what);
        if keep_all {
            assert!(lost.is_empty(), "{what}: lost {lost:?}");
            assert_eq!(sim.seqs(r, rid).first(), Some(&1), "{what}");
        } else {
            skipped_runs += usize::from(!lost.is_empty());
            assert!(
                losses(&sim, r, rid)
                    .iter()
                    .all(|&(_, _, why)| why == LossReason::Unavailable),
                "{what}"
            );
        }
    }
    // Some keep-last runs really lost samples to the writer's history (else the test
    // proves nothing about them).
    assert!(skipped_runs > 0, "no keep-last run lost anything");
}

/// The link between writer and reader goes down for longer than the lease: each side drops
/// the other, and they meet again when it comes back. The reader remembers where it stood,
/// so what was written meanwhile is lost and reported (as written while out of reach),
/// not skipped in silence; the writer reports the reader as having left owing samples.
#[test]
fn a_link_down_longer_than_the_lease_is_counted() {
    let mut sim = Sim::new(3, Link::perfect());
    let tune = |c: &mut Config| {
        c.lease = Duration::from_secs(3);
        c.announce_period = Duration::from_millis(500);
    };
    let w = sim.add_node_with(tune);
    let r = sim.add_node_with(tune);
    let q = Qos::new().keep_all();
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info(q)).unwrap();
    let rid = sim.p(r).create_reader(now, info(q));
    sim.pump(w);
    sim.pump(r);
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        s.nodes[w].participant.matched_count(wid) == 1
            && s.nodes[r].participant.matched_count(rid) == 1
    }));
    let mut k = 0;
    let mut write_for = |sim: &mut Sim, d: Duration| {
        let end = sim.now + d;
        while sim.now < end {
            k += 1;
            let now = sim.now;
            sim.p(w).write(now, wid, k, payload(k)).unwrap();
            sim.pump(w);
            sim.run_for(Duration::from_millis(10));
        }
        k
    };
    write_for(&mut sim, Duration::from_secs(2));
    sim.nodes[r].unplugged = true;
    write_for(&mut sim, Duration::from_secs(5));
    sim.nodes[r].unplugged = false;
    let n = write_for(&mut sim, Duration::from_secs(3));
    assert!(sim.run_until(Duration::from_secs(30), |s| settled(s, r, rid) == n));
    // Both leases ran out, and they matched again.
    for (i, other) in [(w, r), (r, w)] {
        let pid = sim.nodes[other].participant.id();
        assert!(
            sim.nodes[i].events.iter().any(
                |e| matches!(e, Event::ParticipantLost { participant } if *participant == pid)
            ),
            "node {i} never lost node {other}"
        );
    }
    assert_eq!(sim.p(w).matched_count(wid), 1);
    let lost = accounted(&sim, r, rid, n, "link down");
    assert!(!lost.is_empty());
    // One run, in the middle, written while the link was down.
    let l = losses(&sim, r, rid);
    assert!(
        l.iter().all(|&(_, _, why)| why == LossReason::Disconnected),
        "{l:?}"
    );
    let (lo, hi) = (*lost.first().unwrap(), *lost.last().unwrap());
    assert_eq!(lost.len() as u64, hi - lo + 1, "one run: {l:?}");
    assert!(lo > 150 && hi < n - 150, "{lo}..={hi} of {n}");
    // The writer says the reader left owing samples.
    let owed = sim.p(w).unacknowledged(wid);
    assert!(
        owed.iter()
            .any(|s| s.departed && s.name == "node1" && s.samples > 0),
        "{owed:?}"
    );
}
