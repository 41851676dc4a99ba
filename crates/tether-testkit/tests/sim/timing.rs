//! Time-based QoS: deadlines, liveliness and the participant lease, lifespan, capped
//! leases, and durations too long to add to an instant.

use std::time::Duration;

use tether_core::{DeadlineSide, Event, Qos};
use tether_testkit::{Link, Sim};

use crate::helpers::{payload, setup};

/// Deadlines: a writer that stops writing and a reader that stops receiving both report.
#[test]
fn deadline_missed_events() {
    let mut sim = Sim::new(7, Link::perfect());
    let q = Qos::new().deadline(Duration::from_millis(100));
    let (w, rs) = setup(&mut sim, q, q, 1);
    for i in 1..=5 {
        let now = sim.now;
        sim.p(0).write(now, w, i, payload(i)).unwrap();
        sim.pump(0);
        sim.run_for(Duration::from_millis(50));
    }
    let before_w = count(&sim, 0, |e| {
        matches!(
            e,
            Event::DeadlineMissed {
                side: DeadlineSide::Offered,
                ..
            }
        )
    });
    let before_r = count(&sim, 1, |e| {
        matches!(
            e,
            Event::DeadlineMissed {
                side: DeadlineSide::Requested,
                ..
            }
        )
    });
    sim.run_for(Duration::from_millis(450));
    let after_w = count(&sim, 0, |e| {
        matches!(
            e,
            Event::DeadlineMissed {
                side: DeadlineSide::Offered,
                ..
            }
        )
    });
    let after_r = count(
        &sim,
        1,
        |e| matches!(e, Event::DeadlineMissed { side: DeadlineSide::Requested, endpoint, .. } if *endpoint == rs[0]),
    );
    assert!(
        after_w - before_w >= 3,
        "writer deadline misses {before_w}→{after_w}"
    );
    assert!(
        after_r - before_r >= 3,
        "reader deadline misses {before_r}→{after_r}"
    );
}

/// Liveliness: when the writer's host goes silent, the reader gets LivelinessChanged(false)
/// within the lease; when it comes back, alive again; after the participant lease, the
/// participant is lost and the match ends.
#[test]
fn liveliness_and_participant_lease() {
    let mut sim = Sim::new(8, Link::perfect());
    let q = Qos::new().liveliness(Duration::from_millis(300));
    let (_w, rs) = setup(&mut sim, q, q, 1);
    sim.run_for(Duration::from_secs(2));
    assert_eq!(
        count(&sim, 1, |e| matches!(
            e,
            Event::LivelinessChanged { alive: false, .. }
        )),
        0,
        "announcements keep the writer alive"
    );
    sim.nodes[0].up = false;
    sim.run_for(Duration::from_millis(500));
    assert_eq!(
        count(&sim, 1, |e| matches!(
            e,
            Event::LivelinessChanged { alive: false, .. }
        )),
        1
    );
    sim.nodes[0].up = true;
    sim.run_for(Duration::from_millis(500));
    assert_eq!(
        count(&sim, 1, |e| matches!(
            e,
            Event::LivelinessChanged { alive: true, .. }
        )),
        1
    );
    sim.nodes[0].up = false;
    sim.run_for(Duration::from_secs(12));
    assert!(
        sim.nodes[1]
            .events
            .iter()
            .any(|e| matches!(e, Event::ParticipantLost { .. }))
    );
    assert_eq!(sim.nodes[1].participant.matched_count(rs[0]), 0);
}

/// Lifespan: samples older than the lifespan are not retransmitted.
#[test]
fn lifespan_expires_history() {
    let mut sim = Sim::new(9, Link::perfect());
    let q = Qos::new()
        .keep_last(100)
        .lifespan(Duration::from_millis(100));
    let (w, _rs) = setup(&mut sim, q, Qos::new(), 1);
    for i in 1..=10 {
        let now = sim.now;
        sim.p(0).write(now, w, i, payload(i)).unwrap();
    }
    assert_eq!(sim.nodes[0].participant.history_len(w), 10);
    sim.pump(0);
    sim.run_for(Duration::from_millis(300));
    assert_eq!(sim.nodes[0].participant.history_len(w), 0);
}

fn count(sim: &Sim, i: usize, f: impl Fn(&Event) -> bool) -> usize {
    sim.nodes[i].events.iter().filter(|e| f(e)).count()
}

/// A peer announcing an absurd lease is still forgotten after at most MAX_LEASE of silence.
#[test]
fn announced_leases_are_capped() {
    let mut sim = Sim::new(11, Link::perfect());
    sim.add_node(0);
    sim.add_node_with(|c| c.lease = Duration::from_millis(u32::MAX as u64));
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.nodes[0].participant.remote_participants().len(), 1);
    sim.nodes[1].up = false;
    sim.run_for(tether_core::MAX_LEASE + Duration::from_secs(1));
    assert!(sim.nodes[0].participant.remote_participants().is_empty());
}

/// "Forever" durations (deadline, lifespan, lease, batch delay of Duration::MAX) neither
/// panic (Instant + Duration overflows) nor fire.
#[test]
fn huge_durations_are_forever() {
    let mut sim = Sim::new(41, Link::perfect());
    let forever = Duration::MAX;
    let q = Qos::new()
        .deadline(forever)
        .lifespan(forever)
        .liveliness(forever)
        .batching(tether_core::Batching {
            max_bytes: 60_000,
            max_samples: 3,
            max_delay: forever,
        });
    let (w, rs) = setup(
        &mut sim,
        q,
        Qos::new().deadline(forever).liveliness(forever),
        1,
    );
    for i in 1..=3 {
        let now = sim.now;
        sim.p(0).write(now, w, i, payload(i)).unwrap();
        sim.pump(0);
    }
    sim.run_for(Duration::from_secs(5));
    assert_eq!(sim.seqs(1, rs[0]), vec![1, 2, 3]);
    assert_eq!(
        count(&sim, 0, |e| matches!(e, Event::DeadlineMissed { .. })),
        0
    );
    assert_eq!(
        count(&sim, 1, |e| matches!(e, Event::DeadlineMissed { .. })),
        0
    );
}
