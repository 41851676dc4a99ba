//! Reliable and best-effort delivery under loss, duplication and reordering: exactly once
//! and in order, never backwards, histories within their limits, blocked writers and their
//! heartbeats.

use std::time::Duration;

use bytes::Bytes;
use tether_core::{EntityId, Event, History, Qos, WriteError};
use tether_testkit::{Link, Sim};

use crate::helpers::{info, payload, setup};

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
