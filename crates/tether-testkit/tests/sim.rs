//! Whole-protocol tests of tether-core in the deterministic simulator.

use std::time::Duration;

use bytes::Bytes;
use tether_core::{
    DeadlineSide, EndpointInfo, EntityId, Event, History, Qos, QosPolicy, WriteError,
};
use tether_testkit::{Link, Sim};

fn info(topic: &str, qos: Qos) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "std_msgs/String".into(),
        partitions: vec![],
        qos,
    }
}

fn payload(i: u64) -> Bytes {
    Bytes::from(format!("sample-{i}").into_bytes())
}

/// Creates a writer on node 0 and a reader on each other node; runs until all matched.
fn setup(sim: &mut Sim, wq: Qos, rq: Qos, readers: usize) -> (EntityId, Vec<EntityId>) {
    for _ in 0..=readers {
        sim.add_node(0);
    }
    let now = sim.now;
    let w = sim.p(0).create_writer(now, info("/t", wq)).unwrap();
    let mut rs = Vec::new();
    for i in 1..=readers {
        let now = sim.now;
        rs.push(sim.p(i).create_reader(now, info("/t", rq)));
        sim.pump(i);
    }
    sim.pump(0);
    let ok = sim.run_until(Duration::from_secs(60), |s| {
        s.nodes[0].participant.matched_count(w) == readers
            && (1..=readers).all(|i| s.nodes[i].participant.matched_count(rs[i - 1]) == 1)
    });
    assert!(ok, "endpoints did not match within 60 s of virtual time");
    (w, rs)
}

/// Writes `n` samples as fast as the writer accepts them, stepping the network whenever it
/// refuses (keep-all flow control). Returns the largest history ever held, and checks at
/// every step that no reader holds more than its cache plus its bounded reorder buffer.
fn write_all(sim: &mut Sim, w: EntityId, n: u64, rs: &[EntityId]) -> usize {
    // Reader k lives on node k + 1 (see `setup`).
    let readers: Vec<(usize, EntityId)> = rs.iter().enumerate().map(|(k, r)| (k + 1, *r)).collect();
    assert!(!readers.is_empty());
    let mut max_hist = 0;
    let mut i = 1;
    let deadline = sim.now + Duration::from_secs(600);
    while i <= n {
        let now = sim.now;
        match sim.p(0).write(now, w, i, payload(i)) {
            Ok(seq) => {
                assert_eq!(seq, i);
                i += 1;
            }
            Err(WriteError::WouldBlock(_)) => {
                assert!(sim.step(), "writer blocked with nothing in flight");
                assert!(
                    sim.now < deadline,
                    "writer blocked for 600 s of virtual time"
                );
            }
            Err(e) => panic!("write failed: {e}"),
        }
        sim.pump(0);
        max_hist = max_hist.max(sim.nodes[0].participant.history_len(w));
        for (i, r) in &readers {
            let backlog = sim.nodes[*i].participant.reader_backlog(*r);
            // Cache (max_samples) plus the reorder buffer (at least 256 samples).
            assert!(
                backlog <= 64 + 256,
                "reader {r:?} on node {i} holds {backlog} samples"
            );
        }
    }
    max_hist
}

/// Every reliable sample reaches every matched reader exactly once, in order, whatever the
/// loss (up to 30 %), duplication and reordering; the writer's history never exceeds its
/// resource limit.
#[test]
fn reliable_keep_all_exactly_once_in_order() {
    for seed in 0..40u64 {
        let loss = [0.0, 0.05, 0.1, 0.2, 0.3][(seed % 5) as usize];
        let mut sim = Sim::new(seed, Link::lossy(loss));
        let qos = Qos::new().keep_all().max_samples(64);
        let (w, rs) = setup(&mut sim, qos, qos, 2);
        let n = 300;
        let max_hist = write_all(&mut sim, w, n, &rs);
        assert!(max_hist <= 64, "history {max_hist} exceeded max_samples 64");
        let done = sim.run_until(Duration::from_secs(300), |s| {
            (1..=2).all(|i| s.seqs(i, rs[i - 1]).len() as u64 >= n)
        });
        for i in 1..=2 {
            let got = sim.seqs(i, rs[i - 1]);
            let want: Vec<u64> = (1..=n).collect();
            assert_eq!(
                got, want,
                "seed {seed} loss {loss}: reader {i} got wrong sequence"
            );
            let p = sim.payloads(i, rs[i - 1]);
            assert!(
                p.iter()
                    .enumerate()
                    .all(|(k, b)| *b == payload(k as u64 + 1))
            );
        }
        assert!(done);
        // Once all is acknowledged, a keep-all writer holds nothing.
        sim.run_for(Duration::from_secs(5));
        assert_eq!(sim.nodes[0].participant.history_len(w), 0, "seed {seed}");
        assert!(sim.nodes[1].participant.reader_backlog(rs[0]) == 0);
    }
}

/// Reliable keep-last with a writer far ahead of a lossy network: readers may lose samples
/// the writer's history no longer has (reported as SamplesLost), but never get one twice or
/// out of order, and the last sample always arrives.
#[test]
fn reliable_keep_last_in_order_and_latest_arrives() {
    for seed in 0..30u64 {
        let mut sim = Sim::new(seed, Link::lossy(0.2));
        let (w, rs) = setup(
            &mut sim,
            Qos::new().keep_last(5),
            Qos::new().keep_last(5),
            1,
        );
        for i in 1..=200 {
            let now = sim.now;
            sim.p(0).write(now, w, i, payload(i)).unwrap();
            sim.pump(0);
            sim.run_for(Duration::from_micros(200));
        }
        sim.run_until(Duration::from_secs(30), |s| {
            s.seqs(1, rs[0]).last() == Some(&200)
        });
        let got = sim.seqs(1, rs[0]);
        assert!(got.windows(2).all(|p| p[0] < p[1]), "seed {seed}: {got:?}");
        assert_eq!(got.last(), Some(&200), "seed {seed}");
        assert!(sim.nodes[0].participant.history_len(w) <= 5);
    }
}

/// Best effort never duplicates and never goes backwards, under duplication and reordering.
#[test]
fn best_effort_never_duplicates_or_goes_backwards() {
    for seed in 0..30u64 {
        let mut sim = Sim::new(seed, Link::lossy(0.15));
        let be = Qos::new().best_effort();
        let (w, rs) = setup(&mut sim, be, be, 3);
        for i in 1..=300 {
            let now = sim.now;
            sim.p(0).write(now, w, i, payload(i)).unwrap();
            sim.pump(0);
            sim.run_for(Duration::from_micros(100));
        }
        sim.run_for(Duration::from_secs(1));
        for (k, r) in rs.iter().enumerate() {
            let got = sim.seqs(k + 1, *r);
            assert!(got.windows(2).all(|p| p[0] < p[1]), "seed {seed}: {got:?}");
            assert!(!got.is_empty());
        }
        // Best-effort volatile writers keep no history at all.
        assert_eq!(sim.nodes[0].participant.history_len(w), 0);
    }
}

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

/// Keep-all with a stalled reader: the writer refuses (WouldBlock) once max_samples are
/// unacknowledged, holds exactly that many, and resumes when the reader takes.
#[test]
fn keep_all_blocks_on_slow_reader_then_resumes() {
    let mut sim = Sim::new(6, Link::perfect());
    let q = Qos::new().keep_all().max_samples(8);
    let (w, rs) = setup(&mut sim, q, q, 1);
    sim.nodes[1].auto_take = false;
    let mut written = 0u64;
    for i in 1..=100 {
        let now = sim.now;
        match sim.p(0).write(now, w, i, payload(i)) {
            Ok(_) => written += 1,
            Err(WriteError::WouldBlock(p)) => {
                assert_eq!(p, payload(i), "the refused payload is handed back");
                break;
            }
            Err(e) => panic!("{e}"),
        }
        sim.pump(0);
        sim.run_for(Duration::from_millis(5));
    }
    // Reader cache holds 8, writer holds 8 more unacknowledged.
    assert!((8..=16).contains(&written), "written {written}");
    assert!(sim.nodes[0].participant.history_len(w) <= 8);
    // The application catches up; the writer gets WriterReady and every sample arrives.
    let mut next = written + 1;
    let ok = sim.run_until(Duration::from_secs(60), |s| {
        s.take_all(1, rs[0]);
        let now = s.now;
        while next <= 100 {
            match s.p(0).write(now, w, next, payload(next)) {
                Ok(_) => next += 1,
                Err(_) => break,
            }
        }
        s.pump(0);
        s.seqs(1, rs[0]).len() == 100
    });
    assert!(ok);
    assert_eq!(sim.seqs(1, rs[0]), (1..=100).collect::<Vec<_>>());
    assert!(
        sim.nodes[0]
            .events
            .iter()
            .any(|e| matches!(e, Event::WriterReady { writer } if *writer == w))
    );
}

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

/// Many seeds, many readers, heavy loss: memory stays bounded (in-flight datagrams) and
/// keep-all still delivers everything.
#[test]
fn many_readers_heavy_loss() {
    for seed in 100..106u64 {
        let mut sim = Sim::new(seed, Link::lossy(0.3));
        let q = Qos::new().keep_all().max_samples(32);
        let (w, rs) = setup(&mut sim, q, q, 5);
        write_all(&mut sim, w, 150, &rs);
        sim.run_until(Duration::from_secs(300), |s| {
            (1..=5).all(|i| s.seqs(i, rs[i - 1]).len() >= 150)
        });
        for i in 1..=5 {
            assert_eq!(
                sim.seqs(i, rs[i - 1]),
                (1..=150).collect::<Vec<_>>(),
                "seed {seed}"
            );
        }
        assert!(sim.max_in_flight < 10_000);
        assert!(matches!(
            sim.nodes[0]
                .participant
                .local_endpoint(w)
                .map(|x| x.1.qos.history()),
            Some(History::KeepAll)
        ));
    }
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

fn sample_bytes(k: u64, n: usize) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|i| (i as u64 * 131 + k * 17) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// Samples larger than a datagram are fragmented, reassembled, and repaired fragment by
/// fragment under loss, duplication and reordering: every byte arrives, in order, and the
/// writer does not resend whole samples for a lost fragment.
#[test]
fn fragmented_reliable_under_loss() {
    for seed in 0..12u64 {
        let loss = [0.02, 0.05, 0.1][(seed % 3) as usize];
        let mut sim = Sim::new(seed, Link::lossy(loss));
        for _ in 0..2 {
            sim.add_node_with(|c| c.max_datagram = 1400);
        }
        let q = Qos::new().keep_all().max_samples(8).max_bytes(16 << 20);
        let now = sim.now;
        let w = sim.p(0).create_writer(now, info("/img", q)).unwrap();
        let r = sim.p(1).create_reader(now, info("/img", q));
        sim.pump(0);
        sim.pump(1);
        assert!(sim.run_until(Duration::from_secs(30), |s| {
            s.nodes[0].participant.matched_count(w) == 1
                && s.nodes[1].participant.matched_count(r) == 1
        }));
        let sizes = [100_000usize, 1401, 250_000, 3000, 64_000];
        for (k, n) in sizes.iter().enumerate() {
            let now = sim.now;
            sim.p(0)
                .write(now, w, k as u64, sample_bytes(k as u64, *n))
                .unwrap();
            sim.pump(0);
        }
        let ok = sim.run_until(Duration::from_secs(120), |s| {
            s.seqs(1, r).len() == sizes.len()
        });
        assert!(ok, "seed {seed}: got {:?}", sim.seqs(1, r));
        for (k, p) in sim.payloads(1, r).iter().enumerate() {
            assert!(
                *p == sample_bytes(k as u64, sizes[k]),
                "seed {seed}: sample {k} corrupted"
            );
        }
        let st = sim.nodes[0].participant.stats().clone();
        let volume: usize = sizes.iter().sum();
        assert!(
            st.fragments_retransmitted > 0,
            "seed {seed}: loss {loss} needed no repair?"
        );
        assert!(
            st.bytes_sent < 2 * volume as u64 + 200_000,
            "seed {seed}: sent {} bytes for {volume} bytes of samples",
            st.bytes_sent
        );
        assert_eq!(sim.nodes[1].participant.reassembly_bytes(r), 0);
    }
}

/// A 64 MiB reliable sample over a link losing 5 % of datagrams arrives intact.
#[test]
fn sixty_four_mib_over_five_percent_loss() {
    let mut sim = Sim::new(64, Link::lossy(0.05));
    sim.add_node(0);
    sim.add_node(0);
    let q = Qos::new().keep_all().max_samples(2).max_bytes(128 << 20);
    let now = sim.now;
    let w = sim.p(0).create_writer(now, info("/map", q)).unwrap();
    let r = sim.p(1).create_reader(now, info("/map", q));
    sim.pump(0);
    sim.pump(1);
    assert!(sim.run_until(
        Duration::from_secs(30),
        |s| s.nodes[0].participant.matched_count(w) == 1
    ));
    let big = sample_bytes(9, 64 << 20);
    let now = sim.now;
    sim.p(0).write(now, w, 1, big.clone()).unwrap();
    sim.pump(0);
    assert!(sim.run_until(Duration::from_secs(120), |s| s.seqs(1, r).len() == 1));
    assert!(sim.payloads(1, r)[0] == big, "64 MiB sample corrupted");
}

/// Best effort: a sample missing a fragment is never delivered, expires after the timeout
/// (counted), and later samples still arrive.
#[test]
fn fragmented_best_effort_expires_incomplete() {
    let mut sim = Sim::new(3, Link::perfect());
    for _ in 0..2 {
        sim.add_node_with(|c| {
            c.max_datagram = 1400;
            c.reassembly_timeout = Duration::from_millis(500);
        });
    }
    let be = Qos::new().best_effort();
    let now = sim.now;
    let w = sim.p(0).create_writer(now, info("/cam", be)).unwrap();
    let r = sim.p(1).create_reader(now, info("/cam", be));
    sim.pump(0);
    sim.pump(1);
    assert!(sim.run_until(
        Duration::from_secs(30),
        |s| s.nodes[0].participant.matched_count(w) == 1
            && s.nodes[1].participant.matched_count(r) == 1
    ));
    // Sample 1: drop its third datagram on the way.
    let now = sim.now;
    sim.p(0).write(now, w, 1, sample_bytes(1, 10_000)).unwrap();
    let mut k = 0;
    while let Some(t) = sim.p(0).poll_transmit() {
        k += 1;
        if k != 3 {
            let now = sim.now;
            let from = sim.nodes[0].addr;
            sim.p(1).handle_datagram(now, from, &t.contiguous());
        }
    }
    sim.pump(1);
    // What arrived is held (all but the third fragment, those after it kept aside at 64
    // bytes each), not the 10,000 bytes the sample claims.
    let held = sim.nodes[1].participant.reassembly_bytes(r);
    assert!((5_000..10_000).contains(&held), "{held}");
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.nodes[1].participant.reassembly_bytes(r), 0);
    assert!(sim.nodes[1].participant.stats().reassembly_expired >= 1);
    let now = sim.now;
    sim.p(0).write(now, w, 2, sample_bytes(2, 10_000)).unwrap();
    sim.pump(0);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.seqs(1, r), vec![2]);
    assert_eq!(sim.payloads(1, r)[0], sample_bytes(2, 10_000));
}

/// Forged fragments from a matched writer: 4 GiB announcements, thousands of samples that
/// never complete, fragments that contradict their sample. Reassembly memory stays within
/// max_reassembly_bytes, everything is counted, incomplete samples expire, and another
/// topic keeps delivering throughout.
#[test]
fn fragment_floods_stay_bounded() {
    use tether_wire::{DataFragRepr, DatagramBuilder, Header, Submessage};
    let mut sim = Sim::new(4, Link::perfect());
    sim.add_node_with(|c| {
        c.max_reassembly_bytes = 16 << 20;
        c.reassembly_timeout = Duration::from_secs(2);
    });
    sim.add_node(0);
    let q = Qos::new().keep_all();
    let now = sim.now;
    let r = sim.p(0).create_reader(now, info("/t", q));
    let rok = sim.p(0).create_reader(now, info("/ok", q));
    let w = sim.p(1).create_writer(now, info("/t", q)).unwrap();
    let wok = sim.p(1).create_writer(now, info("/ok", q)).unwrap();
    sim.pump(0);
    sim.pump(1);
    assert!(sim.run_until(
        Duration::from_secs(30),
        |s| s.nodes[0].participant.matched_count(r) == 1
            && s.nodes[0].participant.matched_count(rok) == 1
            && s.nodes[1].participant.matched_count(wok) == 1
    ));
    let attacker = sim.nodes[1].participant.id();
    let from = sim.nodes[1].addr;
    let forge = |seq: u64, sample_size: u32, frag_size: u16, frag_num: u32| {
        let start = frag_num as usize * frag_size as usize;
        let len = (sample_size as usize - start).min(frag_size as usize);
        let bytes = vec![0xeeu8; len];
        let mut buf = Vec::new();
        DatagramBuilder::new(
            &mut buf,
            Header {
                domain: 0,
                participant: attacker,
            },
        )
        .push(&Submessage::DataFrag(DataFragRepr {
            writer: w,
            reader: EntityId(0),
            seq,
            timestamp_ns: 0,
            sample_size,
            frag_size,
            frag_num,
            payload: &bytes,
        }))
        .unwrap();
        Bytes::from(buf)
    };
    let before = sim.nodes[0].participant.stats().fragments_rejected;
    for i in 0..3000u64 {
        let now = sim.now;
        // A 4 GiB sample.
        sim.p(0)
            .handle_datagram(now, from, &forge(1_000_000 + i, u32::MAX, 60_000, 0));
        // A 1 MiB sample that never completes.
        sim.p(0)
            .handle_datagram(now, from, &forge(10 + i, 1 << 20, 1000, 0));
        // A fragment contradicting the first fragment of sample 10.
        sim.p(0)
            .handle_datagram(now, from, &forge(10, 2 << 20, 1000, 5));
        assert!(sim.nodes[0].participant.reassembly_bytes(r) <= 16 << 20);
        if i % 100 == 0 {
            let now = sim.now;
            sim.p(1).write(now, wok, i, payload(i)).unwrap();
            sim.pump(1);
            sim.run_for(Duration::from_millis(5));
        }
    }
    let st = sim.nodes[0].participant.stats().clone();
    assert!(st.fragments_rejected - before >= 6000, "{st:?}");
    assert!(sim.nodes[0].participant.reassembly_bytes(r) > 0);
    assert_eq!(
        sim.seqs(0, rok).len(),
        30,
        "the other topic kept delivering"
    );
    sim.run_for(Duration::from_secs(3));
    assert_eq!(
        sim.nodes[0].participant.reassembly_bytes(r),
        0,
        "incomplete samples expire"
    );
    assert!(sim.nodes[0].participant.stats().reassembly_expired >= 16);
}

/// A writer's share does not starve the writer itself: a reliable writer's sample that
/// misses its last fragment, and the next sample that filled the rest of the writer's share
/// meanwhile. When the missing fragment is repaired, the later sample gives way (it is
/// delivered after the first anyway), the first completes, then the later one is repaired
/// too. (Without giving way, neither could progress until the later one expired.) Scaled down
/// from the defaults: 1 MiB samples, a share of a sample and a sixteenth.
#[test]
fn fragmented_writer_at_its_share_still_completes_in_order() {
    let max_sample = 1usize << 20;
    let per_writer = max_sample + max_sample / 16;
    let mut sim = Sim::new(175, Link::perfect());
    for _ in 0..2 {
        sim.add_node_with(|c| {
            c.max_sample_size = max_sample;
            c.max_reassembly_bytes_per_writer = per_writer;
            c.max_reassembly_bytes = 2 * per_writer;
        });
    }
    let q = Qos::new().keep_all();
    let now = sim.now;
    let r = sim.p(0).create_reader(now, info("/t", q));
    let w = sim.p(1).create_writer(now, info("/t", q)).unwrap();
    sim.pump(0);
    sim.pump(1);
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.nodes[1].participant.matched_count(w) == 1 && s.nodes[0].participant.matched_count(r) == 1
    }));
    let from = sim.nodes[1].addr;
    let (a, b) = (sample_bytes(1, max_sample), sample_bytes(2, max_sample));
    // Sample 1 without its last datagram, then all of sample 2, straight to the reader.
    for (ts, payload, drop_last) in [(1, &a, true), (2, &b, false)] {
        let now = sim.now;
        sim.p(1).write(now, w, ts, payload.clone()).unwrap();
        let mut dgs = Vec::new();
        while let Some(t) = sim.p(1).poll_transmit() {
            dgs.push(t.contiguous());
        }
        if drop_last {
            dgs.pop();
        }
        for dg in &dgs {
            let now = sim.now;
            sim.p(0).handle_datagram(now, from, dg);
        }
        sim.pump(0);
    }
    let guid = tether_core::Guid {
        participant: sim.nodes[1].participant.id(),
        entity: w,
    };
    assert!(sim.nodes[0].participant.reassembly_bytes_from(r, guid) <= per_writer as u64);
    assert!(
        sim.run_until(Duration::from_secs(2), |s| s.seqs(0, r).len() == 2),
        "delivered {:?} (stats {:?})",
        sim.seqs(0, r),
        sim.nodes[0].participant.stats()
    );
    assert!(sim.payloads(0, r) == [a, b]);
    assert!(sim.nodes[0].participant.stats().reassemblies_evicted >= 1);
}

fn batched(q: Qos, max_bytes: usize, max_samples: u32, delay_ms: u64) -> Qos {
    q.batching(tether_core::Batching {
        max_bytes,
        max_samples,
        max_delay: Duration::from_millis(delay_ms),
    })
}

/// A batch goes out when max_samples is reached, when max_delay expires, when the writer is
/// flushed, or when the next sample would overflow max_bytes; never earlier.
#[test]
fn batching_flush_triggers() {
    let mut sim = Sim::new(21, Link::perfect());
    let wq = batched(Qos::new().keep_all(), 1000, 4, 50);
    let (w, rs) = setup(&mut sim, wq, Qos::new().keep_all(), 1);
    let r = rs[0];
    let sent = |sim: &Sim| sim.nodes[0].participant.stats().datagrams_sent;
    let write = |sim: &mut Sim, i: u64, n: usize| {
        let now = sim.now;
        sim.p(0).write(now, w, i, sample_bytes(i, n)).unwrap();
        sim.pump(0);
    };
    // Three samples wait; the fourth fills max_samples.
    for i in 1..=3 {
        write(&mut sim, i, 10);
    }
    sim.run_for(Duration::from_millis(20));
    assert!(sim.seqs(1, r).is_empty(), "a batch left before any limit");
    write(&mut sim, 4, 10);
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.seqs(1, r), vec![1, 2, 3, 4]);
    // One sample waits for max_delay.
    write(&mut sim, 5, 10);
    sim.run_for(Duration::from_millis(30));
    assert_eq!(sim.seqs(1, r).len(), 4);
    sim.run_for(Duration::from_millis(30));
    assert_eq!(sim.seqs(1, r).len(), 5, "max_delay did not flush");
    // flush() sends at once.
    write(&mut sim, 6, 10);
    let now = sim.now;
    sim.p(0).flush(now, w);
    sim.pump(0);
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.seqs(1, r).len(), 6);
    // max_bytes: two 400-byte samples fit 1000, the third does not and flushes the first two.
    let before = sent(&sim);
    write(&mut sim, 7, 400);
    write(&mut sim, 8, 400);
    assert_eq!(sent(&sim), before);
    write(&mut sim, 9, 400);
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.seqs(1, r).len(), 8);
    sim.run_for(Duration::from_millis(60));
    assert_eq!(sim.seqs(1, r), (1..=9).collect::<Vec<_>>());
    // Readers see each sample with its own sequence number, timestamp and payload.
    let got = &sim.nodes[1].delivered[&r];
    for (k, s) in got.iter().enumerate() {
        let i = k as u64 + 1;
        assert_eq!(s.timestamp_ns, i);
        let n = if i >= 7 { 400 } else { 10 };
        assert_eq!(s.payload, sample_bytes(i, n));
    }
}

/// Reliable batching under loss, duplication and reordering, mixed with samples too big for
/// a batch and with fragmented ones: every sample once, in order, intact, in far fewer
/// datagrams than samples.
#[test]
fn batching_reliable_under_loss() {
    // Both packet shapes: one BATCH per datagram, and coalesced DATA submessages.
    for seed in 0..16u64 {
        let loss = [0.0, 0.05, 0.15][(seed % 3) as usize];
        let coalesce = seed >= 8;
        let mut sim = Sim::new(seed, Link::lossy(loss));
        let mut wq = batched(Qos::new().keep_all().max_samples(256), 8000, 64, 2);
        if coalesce {
            wq = wq.coalescing(wq.batch().unwrap());
            assert!(wq.coalesces());
        }
        let (w, rs) = setup(&mut sim, wq, Qos::new().keep_all().max_samples(256), 2);
        let n = 600u64;
        let size = |i: u64| match i % 97 {
            0 => 9000,     // larger than a batch: sent alone
            50 => 150_000, // larger than a datagram: fragmented
            _ => 20 + (i as usize * 7) % 300,
        };
        let mut i = 1;
        let deadline = sim.now + Duration::from_secs(600);
        while i <= n {
            let now = sim.now;
            match sim.p(0).write(now, w, i, sample_bytes(i, size(i))) {
                Ok(_) => i += 1,
                Err(WriteError::WouldBlock(_)) => {
                    assert!(sim.step());
                    assert!(sim.now < deadline);
                }
                Err(e) => panic!("{e}"),
            }
            sim.pump(0);
        }
        let ok = sim.run_until(Duration::from_secs(300), |s| {
            (1..=2).all(|k| s.seqs(k, rs[k - 1]).len() as u64 == n)
        });
        assert!(ok, "seed {seed}: incomplete");
        for k in 1..=2 {
            assert_eq!(
                sim.seqs(k, rs[k - 1]),
                (1..=n).collect::<Vec<_>>(),
                "seed {seed}"
            );
            for s in &sim.nodes[k].delivered[&rs[k - 1]] {
                assert_eq!(s.payload, sample_bytes(s.seq, size(s.seq)), "seed {seed}");
                assert_eq!(s.timestamp_ns, s.seq);
            }
        }
        if loss == 0.0 {
            let dg = sim.nodes[0].participant.stats().datagrams_sent;
            assert!(
                dg < n * 2 / 4,
                "seed {seed} (coalesce {coalesce}): {dg} datagrams for {n} samples to 2 readers"
            );
        }
    }
}

/// With path-sized datagrams a batch larger than one datagram leaves as several, back to
/// back, each with whole samples (a BATCH of its own), the heartbeat in the last: reliable
/// keep-all under loss delivers every sample once, in order, intact.
#[test]
fn batch_spans_path_sized_datagrams() {
    for seed in 0..6u64 {
        let loss = [0.0, 0.1][(seed % 2) as usize];
        let mut sim = Sim::new(seed, Link::lossy(loss));
        for _ in 0..2 {
            sim.add_node_with(|c| c.max_datagram = 1472);
        }
        let wq = batched(Qos::new().keep_all().max_samples(512), 60_000, 1024, 5);
        let now = sim.now;
        let w = sim.p(0).create_writer(now, info("/t", wq)).unwrap();
        let r = sim
            .p(1)
            .create_reader(now, info("/t", Qos::new().keep_all().max_samples(512)));
        sim.pump(0);
        sim.pump(1);
        assert!(sim.run_until(Duration::from_secs(30), |s| {
            s.nodes[0].participant.matched_count(w) == 1
                && s.nodes[1].participant.matched_count(r) == 1
        }));
        // 1 KB samples: one per datagram; 300 B ones: four.
        let size = |i: u64| if i <= 50 { 1000 } else { 300 };
        let before = sim.nodes[0].participant.stats().datagrams_sent;
        for i in 1..=100u64 {
            let now = sim.now;
            sim.p(0).write(now, w, i, sample_bytes(i, size(i))).unwrap();
        }
        // The batch holds 60 KB, not one datagram: the 81st sample overflowed it and sent
        // the first 80 (50 datagrams of one 1 KB sample, 8 of up to four 300 B ones).
        let waiting = sim.nodes[0].participant.stats().datagrams_sent - before;
        assert_eq!(waiting, 58, "seed {seed}");
        let now = sim.now;
        sim.p(0).flush(now, w);
        let flushed = sim.nodes[0].participant.stats().datagrams_sent - before;
        assert_eq!(flushed, 63, "seed {seed}");
        sim.pump(0);
        assert!(
            sim.run_until(Duration::from_secs(120), |s| s.seqs(1, r).len() == 100),
            "seed {seed}: {} of 100",
            sim.seqs(1, r).len()
        );
        assert_eq!(sim.seqs(1, r), (1..=100).collect::<Vec<_>>(), "seed {seed}");
        for s in &sim.nodes[1].delivered[&r] {
            assert_eq!(s.payload, sample_bytes(s.seq, size(s.seq)), "seed {seed}");
        }
    }
}

/// Best-effort batching over duplication and reordering never duplicates or goes backwards.
#[test]
fn batching_best_effort_order() {
    for seed in 0..10u64 {
        // Little reordering: a best-effort reader rightly drops a batch overtaken by the next.
        let link = Link {
            loss: 0.1,
            duplicate: 0.05,
            delay: Duration::from_millis(1),
            jitter: Duration::from_micros(100),
            group_delay: Duration::ZERO,
            ..Link::perfect()
        };
        let mut sim = Sim::new(seed, link);
        let wq = batched(Qos::new().best_effort(), 2000, 16, 1);
        let (w, rs) = setup(&mut sim, wq, Qos::new().best_effort(), 1);
        for i in 1..=400 {
            let now = sim.now;
            sim.p(0).write(now, w, i, payload(i)).unwrap();
            sim.pump(0);
            sim.run_for(Duration::from_micros(50));
        }
        sim.run_for(Duration::from_secs(1));
        let got = sim.seqs(1, rs[0]);
        assert!(got.windows(2).all(|p| p[0] < p[1]), "seed {seed}");
        assert!(got.len() > 280, "seed {seed}: {} of 400", got.len());
    }
}

/// Keep-last evicts only samples of earlier datagrams: a reader of depth 2 that has not
/// taken anything holds a whole batch of 8, and the next batch replaces it.
#[test]
fn keep_last_keeps_a_whole_batch() {
    let mut sim = Sim::new(31, Link::perfect());
    let wq = batched(Qos::new(), 60_000, 8, 50);
    let (w, rs) = setup(&mut sim, wq, Qos::new().keep_last(2), 1);
    sim.nodes[1].auto_take = false;
    for round in 0..2u64 {
        for i in 1..=8 {
            let now = sim.now;
            sim.p(0).write(now, w, round * 8 + i, payload(i)).unwrap();
            sim.pump(0);
        }
        sim.run_for(Duration::from_millis(10));
        assert_eq!(
            sim.nodes[1].participant.reader_backlog(rs[0]),
            8,
            "round {round}"
        );
    }
    sim.take_all(1, rs[0]);
    assert_eq!(sim.seqs(1, rs[0]), (9..=16).collect::<Vec<_>>());
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

/// A keep-all writer refused for lack of room asks its readers at once (a heartbeat) instead
/// of stalling until the periodic heartbeat: with that period set to 10 s, 200 samples
/// through a window of 8 over a 20 %-loss link still finish in a few seconds of virtual time.
#[test]
fn blocked_writer_heartbeats_at_once() {
    for seed in 0..6u64 {
        let mut sim = Sim::new(seed, Link::lossy(0.2));
        for _ in 0..2 {
            sim.add_node_with(|c| c.heartbeat_period = Duration::from_secs(10));
        }
        let q = Qos::new().keep_all().max_samples(8);
        let now = sim.now;
        let w = sim.p(0).create_writer(now, info("/t", q)).unwrap();
        let r = sim.p(1).create_reader(now, info("/t", q));
        sim.pump(0);
        sim.pump(1);
        assert!(sim.run_until(Duration::from_secs(30), |s| {
            s.nodes[0].participant.matched_count(w) == 1
                && s.nodes[1].participant.matched_count(r) == 1
        }));
        // Accepting all 200 needs the first 192 acknowledged: every stall of a full window
        // is broken by the blocked writer's own heartbeat, never by the 10 s period.
        let start = sim.now;
        write_all(&mut sim, w, 200, &[r]);
        let took = sim.now - start;
        assert!(
            took < Duration::from_secs(5),
            "seed {seed}: accepting 200 samples took {took:?} of virtual time"
        );
        // The tail may wait for the periodic heartbeat (lost last datagrams, no more writes).
        assert!(sim.run_until(Duration::from_secs(30), |s| s.seqs(1, r).len() == 200));
        assert_eq!(sim.seqs(1, r), (1..=200).collect::<Vec<_>>());
    }
}

/// Periodic heartbeats go once to each participant with a reliable reader of the writer
/// (however many readers it has there), never to one whose readers are all best effort;
/// the writer keeps that list with its matched readers.
#[test]
fn periodic_heartbeats_go_only_where_a_reader_is_reliable() {
    let mut sim = Sim::new(3, Link::perfect());
    for _ in 0..4 {
        sim.add_node_with(|c| c.heartbeat_period = Duration::from_millis(100));
    }
    let rel = Qos::new().keep_all();
    let be = Qos::new().best_effort();
    let now = sim.now;
    let w = sim.p(0).create_writer(now, info("/t", rel)).unwrap();
    // Node 1: a reliable and a best-effort reader; node 2: best effort only; node 3:
    // reliable.
    let readers = [(1, rel), (1, be), (2, be), (3, rel)];
    for (i, q) in readers {
        sim.p(i).create_reader(now, info("/t", q));
    }
    for i in 0..4 {
        sim.pump(i);
    }
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.nodes[0].participant.matched_count(w) == 4
    }));
    // Reliable readers that never answer keep the writer heartbeating.
    sim.nodes[1].up = false;
    sim.nodes[3].up = false;
    let now = sim.now;
    sim.p(0).write(now, w, 1, Bytes::from_static(b"x")).unwrap();
    sim.pump(0);
    let before = sim.p(0).stats().heartbeats_sent;
    sim.run_for(Duration::from_millis(1_000));
    let sent = sim.p(0).stats().heartbeats_sent - before;
    // Ten periods, two destinations each (nodes 1 and 3), give or take one period.
    assert!(
        (18..=22).contains(&sent),
        "{sent} heartbeats in 10 periods: expected 2 per period"
    );
}
