//! Batching: when a batch goes out, batches under loss and across path-sized datagrams,
//! best-effort order, keep-last with whole batches.

use std::time::Duration;

use tether_core::{Qos, WriteError};
use tether_testkit::{Link, Sim};

use crate::helpers::{info, payload, sample_bytes, setup};

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
