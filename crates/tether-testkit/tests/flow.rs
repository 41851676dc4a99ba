//! Asynchronous writers, priority classes and token-bucket flow controllers, in the
//! deterministic simulator.

use std::time::Duration;

use bytes::Bytes;
use tether_core::{CreateError, EndpointInfo, EntityId, FlowController, Priority, Qos, WriteError};
use tether_testkit::{Link, Sim};
use tether_wire::{Datagram, Submessage};

fn info(topic: &str, qos: Qos) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "bytes".into(),
        partitions: vec![],
        qos,
    }
}

fn bytes(k: u64, n: usize) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|i| (i as u64 * 7 + k * 13) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// Two nodes, with `wq` writers on node 0 (one per topic) and a reader per topic on node 1,
/// matched. `tune` defines flow controllers on node 0 first.
fn pair(
    sim: &mut Sim,
    topics: &[(&str, Qos)],
    rq: Qos,
    tune: impl FnOnce(&mut tether_core::Participant),
) -> (Vec<EntityId>, Vec<EntityId>) {
    sim.add_node(0);
    sim.add_node(0);
    tune(sim.p(0));
    let now = sim.now;
    let ws: Vec<EntityId> = topics
        .iter()
        .map(|(t, q)| sim.p(0).create_writer(now, info(t, *q)).unwrap())
        .collect();
    let rs: Vec<EntityId> = topics
        .iter()
        .map(|(t, _)| sim.p(1).create_reader(now, info(t, rq)))
        .collect();
    sim.pump(0);
    sim.pump(1);
    let ok = sim.run_until(Duration::from_secs(30), |s| {
        ws.iter()
            .all(|w| s.nodes[0].participant.matched_count(*w) == 1)
            && rs
                .iter()
                .all(|r| s.nodes[1].participant.matched_count(*r) == 1)
    });
    assert!(ok, "no match");
    (ws, rs)
}

/// Writes `n` samples of `size` bytes, stepping the simulation while the writer is full.
fn write_n(sim: &mut Sim, w: EntityId, n: u64, size: usize) {
    let mut k = 0;
    let limit = sim.now + Duration::from_secs(3600);
    while k < n {
        let now = sim.now;
        match sim.p(0).write(now, w, k, bytes(k, size)) {
            Ok(_) => k += 1,
            Err(WriteError::WouldBlock(_)) => {
                assert!(sim.step(), "blocked with nothing to do");
                assert!(sim.now < limit, "blocked for an hour");
            }
            Err(e) => panic!("{e}"),
        }
        sim.pump(0);
    }
}

fn writer_of(dg: &[u8]) -> Vec<EntityId> {
    let d = Datagram::parse(dg).expect("valid datagram");
    d.submessages()
        .filter_map(|m| match m {
            Ok(Submessage::Data(x)) => Some(x.writer),
            Ok(Submessage::DataFrag(x)) => Some(x.writer),
            _ => None,
        })
        .collect()
}

/// An asynchronous writer's write sends nothing by itself; the sender releases it.
#[test]
fn async_write_queues_and_returns() {
    let mut sim = Sim::new(1, Link::perfect());
    let q = Qos::new().asynchronous(Priority::Default);
    let (ws, rs) = pair(&mut sim, &[("/a", q)], Qos::new(), |_| {});
    let now = sim.now;
    sim.p(0).write(now, ws[0], 1, bytes(1, 100)).unwrap();
    assert!(
        std::iter::from_fn(|| sim.p(0).poll_transmit())
            .all(|t| writer_of(&t.contiguous()).is_empty()),
        "an asynchronous write sent data itself"
    );
    assert_eq!(sim.p(0).unsent(ws[0]), 1);
    assert_eq!(sim.p(0).next_scheduled(now), Some(now));
    let t = sim
        .p(0)
        .poll_scheduled(now)
        .expect("the sender has a datagram");
    assert_eq!(writer_of(&t.contiguous()), vec![ws[0]]);
    // Released (and announced by heartbeats) only once the driver says it has sent it.
    assert_eq!(sim.p(0).unsent(ws[0]), 1);
    assert!(sim.p(0).poll_scheduled(now).is_none());
    assert_eq!(sim.p(0).unsent(ws[0]), 1);
    sim.p(0).scheduled_sent(&Priority::ALL);
    assert_eq!(sim.p(0).unsent(ws[0]), 0);
    assert_eq!(sim.p(0).next_scheduled(now), None);
    // The simulator's driver sends what the sender released; it arrives.
    sim.pump(0);
    let _ = sim.run_until(Duration::from_secs(1), |s| s.seqs(1, rs[0]).len() == 1);
    // (that datagram was taken out by hand above, so reliability repaired it)
    assert_eq!(sim.seqs(1, rs[0]), vec![1]);
}

/// The sender drains realtime before default before bulk: whatever bulk has queued, a
/// realtime sample is the very next datagram, and a synchronous writer's sample does not
/// wait for the sender at all.
#[test]
fn realtime_overtakes_queued_bulk() {
    let mut sim = Sim::new(2, Link::perfect());
    let bulk = Qos::new().keep_all().asynchronous(Priority::Bulk);
    let def = Qos::new().keep_all().asynchronous(Priority::Default);
    let rt = Qos::new().asynchronous(Priority::Realtime);
    let (ws, _) = pair(
        &mut sim,
        &[
            ("/bulk", bulk),
            ("/def", def),
            ("/rt", rt),
            ("/sync", Qos::new()),
        ],
        Qos::new().keep_all(),
        |_| {},
    );
    let now = sim.now;
    for k in 0..20 {
        sim.p(0).write(now, ws[0], k, bytes(k, 200_000)).unwrap();
    }
    let first = sim.p(0).poll_scheduled(now).unwrap();
    assert_eq!(writer_of(&first.contiguous()), vec![ws[0]]);
    sim.p(0).write(now, ws[1], 0, bytes(0, 64)).unwrap();
    sim.p(0).write(now, ws[2], 0, bytes(0, 64)).unwrap();
    sim.p(0).write(now, ws[3], 0, bytes(0, 64)).unwrap();
    let sync: Vec<_> = std::iter::from_fn(|| sim.p(0).poll_transmit())
        .flat_map(|t| writer_of(&t.contiguous()))
        .collect();
    assert_eq!(sync, vec![ws[3]], "the synchronous write went out at once");
    let next = sim.p(0).poll_scheduled(now).unwrap();
    assert_eq!(writer_of(&next.contiguous()), vec![ws[2]], "realtime next");
    let next = sim.p(0).poll_scheduled(now).unwrap();
    assert_eq!(
        writer_of(&next.contiguous()),
        vec![ws[1]],
        "default after it"
    );
    let next = sim.p(0).poll_scheduled(now).unwrap();
    assert_eq!(writer_of(&next.contiguous()), vec![ws[0]], "bulk resumes");
}

/// Writers of one class share the sender in turn, datagram by datagram.
#[test]
fn one_class_takes_turns() {
    let mut sim = Sim::new(3, Link::perfect());
    let q = Qos::new().keep_all().asynchronous(Priority::Bulk);
    let (ws, _) = pair(
        &mut sim,
        &[("/x", q), ("/y", q)],
        Qos::new().keep_all(),
        |_| {},
    );
    let now = sim.now;
    for k in 0..3 {
        sim.p(0).write(now, ws[0], k, bytes(k, 150_000)).unwrap();
        sim.p(0).write(now, ws[1], k, bytes(k, 150_000)).unwrap();
    }
    let order: Vec<EntityId> = (0..8)
        .map(|_| writer_of(&sim.p(0).poll_scheduled(now).unwrap().contiguous())[0])
        .collect();
    for pair in order.chunks(2) {
        assert_ne!(pair[0], pair[1], "not in turn: {order:?}");
    }
}

/// Runs `n` samples of `size` bytes through writers sharing flow controller `spec`; returns
/// the virtual time until the reader has every sample, checking content.
fn timed_transfer(
    seed: u64,
    link: Link,
    spec: FlowController,
    writers: usize,
    n: u64,
    size: usize,
) -> Duration {
    let mut sim = Sim::new(seed, link);
    let q = Qos::new()
        .keep_all()
        .max_samples(64)
        .asynchronous(Priority::Bulk)
        .flow_controller("bulk");
    let topics: Vec<(String, Qos)> = (0..writers).map(|i| (format!("/f{i}"), q)).collect();
    let t: Vec<(&str, Qos)> = topics.iter().map(|(s, q)| (s.as_str(), *q)).collect();
    let (ws, rs) = pair(&mut sim, &t, Qos::new().keep_all(), |p| {
        p.set_flow_controller("bulk", spec)
    });
    let t0 = sim.now;
    // Interleave the writers' samples.
    let mut k = 0;
    let limit = t0 + Duration::from_secs(3600);
    while k < n {
        for w in &ws {
            loop {
                let now = sim.now;
                match sim.p(0).write(now, *w, k, bytes(k, size)) {
                    Ok(_) => break,
                    Err(WriteError::WouldBlock(_)) => {
                        assert!(sim.step());
                        assert!(sim.now < limit);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            sim.pump(0);
        }
        k += 1;
    }
    let ok = sim.run_until(Duration::from_secs(3600), |s| {
        rs.iter().all(|r| s.seqs(1, *r).len() == n as usize)
    });
    assert!(ok, "transfer did not complete");
    for r in &rs {
        for (k, p) in sim.payloads(1, *r).iter().enumerate() {
            assert!(*p == bytes(k as u64, size), "sample {k} corrupted");
        }
    }
    sim.now - t0
}

/// A flow controller bounds the rate of what it carries to within 5 % of its setting, for
/// one sample per datagram and for fragmented samples, and for writers sharing it.
#[test]
fn flow_controller_bounds_the_rate() {
    for (spec, writers, n, size) in [
        (FlowController::rate(1_000_000), 1, 64, 32 * 1024),
        (FlowController::rate(2_000_000), 1, 20, 200_000),
        (
            FlowController::tokens(10, Duration::from_millis(10), 8192),
            2,
            40,
            32 * 1024,
        ),
    ] {
        let took = timed_transfer(5, Link::perfect(), spec, writers, n, size);
        let volume = (writers as u64 * n * size as u64) as f64;
        let rate = volume / took.as_secs_f64();
        let want = spec.bytes_per_second().unwrap();
        // Headers are paid for too (the payload rate sits under the setting), and the
        // first burst and the last datagram's debt push it up a little on short transfers.
        let err = (rate - want) / want;
        assert!(
            (-0.05..=0.05).contains(&err),
            "{spec}: {rate:.0} B/s of payload, {:.1} % off",
            err * 100.0
        );
    }
}

/// Repairs pass through the same bucket: over a lossy link the transfer still completes,
/// intact, and the rate still does not exceed the setting.
#[test]
fn flow_controlled_reliable_transfer_survives_loss() {
    for seed in 0..4 {
        let spec = FlowController::rate(4_000_000);
        let (n, size) = (40u64, 100_000usize);
        let took = timed_transfer(seed, Link::lossy(0.05), spec, 1, n, size);
        let rate = (n * size as u64) as f64 / took.as_secs_f64();
        assert!(
            rate <= spec.bytes_per_second().unwrap() * 1.05,
            "seed {seed}: {rate:.0} B/s"
        );
    }
}

/// A keep-last asynchronous writer that is written faster than its controller allows keeps
/// only its depth queued: memory stays bounded and the newest samples get through.
#[test]
fn keep_last_async_writer_drops_the_oldest_unsent() {
    let mut sim = Sim::new(6, Link::perfect());
    let q = Qos::new()
        .best_effort()
        .keep_last(4)
        .flow_controller("slow");
    let (ws, rs) = pair(
        &mut sim,
        &[("/cam", q)],
        Qos::new().best_effort().keep_last(100),
        |p| p.set_flow_controller("slow", FlowController::rate(10_000)),
    );
    for k in 0..1000u64 {
        let now = sim.now;
        sim.p(0).write(now, ws[0], k, bytes(k, 1000)).unwrap();
        sim.pump(0);
        assert!(sim.nodes[0].participant.history_len(ws[0]) <= 4);
        sim.run_for(Duration::from_millis(1));
    }
    sim.run_for(Duration::from_secs(2));
    let got = sim.seqs(1, rs[0]);
    assert!(got.len() < 100, "{} samples at 10 KB/s in 1 s", got.len());
    assert_eq!(*got.last().unwrap(), 1000, "the newest sample arrives");
    assert!(got.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(sim.nodes[0].participant.history_len(ws[0]), 0);
}

/// Naming a flow controller that does not exist is a clear error, not a silent default.
#[test]
fn unknown_flow_controller_is_refused() {
    let mut sim = Sim::new(7, Link::perfect());
    sim.add_node(0);
    let now = sim.now;
    let e = sim
        .p(0)
        .create_writer(now, info("/x", Qos::new().flow_controller("nope")))
        .unwrap_err();
    assert_eq!(e, CreateError::UnknownFlowController("nope".into()));
    assert!(e.to_string().contains("'nope'"));
    let long = "x".repeat(200);
    sim.p(0)
        .set_flow_controller(&long, FlowController::UNLIMITED);
    assert!(
        sim.p(0)
            .create_writer(now, info("/x", Qos::new().flow_controller(&long)))
            .is_err()
    );
}

/// An asynchronous writer with no reader releases everything at once (nothing queues
/// forever), and a reader that matches later gets what is still waiting.
#[test]
fn async_writer_without_readers_does_not_queue() {
    let mut sim = Sim::new(8, Link::perfect());
    sim.add_node(0);
    sim.add_node(0);
    let now = sim.now;
    let q = Qos::new()
        .best_effort()
        .keep_all()
        .asynchronous(Priority::Bulk);
    let w = sim.p(0).create_writer(now, info("/q", q)).unwrap();
    for k in 0..100_000u64 {
        sim.p(0).write(now, w, k, bytes(k, 10)).unwrap();
    }
    assert_eq!(sim.p(0).unsent(w), 0);
    assert_eq!(sim.nodes[0].participant.history_len(w), 0);
    write_n(&mut sim, w, 10, 10);
}

/// Redefining a controller takes effect at once: switching from unlimited to a limit does
/// not let a period's worth of unlimited traffic through.
#[test]
fn redefined_flow_controller_applies_at_once() {
    let unlimited_then = |spec: FlowController| {
        let mut sim = Sim::new(9, Link::perfect());
        let q = Qos::new().keep_all().max_samples(64).flow_controller("f");
        let (ws, _) = pair(&mut sim, &[("/f", q)], Qos::new().keep_all(), |p| {
            p.set_flow_controller("f", FlowController::UNLIMITED)
        });
        let now = sim.now;
        sim.p(0).set_flow_controller("f", spec);
        for k in 0..50 {
            sim.p(0).write(now, ws[0], k, bytes(k, 32 * 1024)).unwrap();
        }
        std::iter::from_fn(|| sim.p(0).poll_scheduled(now)).count()
    };
    // 10 tokens of 8192 B: 80 KB may leave at once, that is three 32 KB samples.
    let n = unlimited_then(FlowController::tokens(10, Duration::from_millis(10), 8192));
    assert_eq!(n, 3);
}

/// The two packet shapes of the 001 paper: batching sends one BATCH submessage (one header
/// for many samples); coalescing sends the same samples as one DATA submessage each, in as
/// few datagrams.
#[test]
fn batching_and_coalescing_shapes() {
    for coalesce in [false, true] {
        let mut sim = Sim::new(10, Link::perfect());
        let b = tether_core::Batching {
            max_bytes: 60_000,
            max_samples: 1000,
            max_delay: Duration::from_secs(1),
        };
        let q = if coalesce {
            Qos::new().best_effort().coalescing(b)
        } else {
            Qos::new().best_effort().batching(b)
        };
        let (ws, rs) = pair(
            &mut sim,
            &[("/s", q)],
            Qos::new().best_effort().keep_all(),
            |_| {},
        );
        let now = sim.now;
        for k in 0..10 {
            sim.p(0).write(now, ws[0], k, bytes(k, 100)).unwrap();
        }
        sim.p(0).flush(now, ws[0]);
        let dgs: Vec<_> = std::iter::from_fn(|| sim.p(0).poll_transmit())
            .map(|t| t.contiguous())
            .collect();
        assert_eq!(dgs.len(), 1, "coalesce {coalesce}");
        let d = Datagram::parse(&dgs[0]).unwrap();
        let kinds: Vec<&str> = d
            .submessages()
            .map(|m| match m.unwrap() {
                Submessage::Data(_) => "data",
                Submessage::Batch(_) => "batch",
                _ => "other",
            })
            .collect();
        if coalesce {
            assert_eq!(kinds, vec!["data"; 10]);
        } else {
            assert_eq!(kinds, vec!["batch"]);
        }
        // Delivered the same either way.
        let from = sim.nodes[0].addr;
        sim.p(1).handle_datagram(now, from, &dgs[0]);
        sim.pump(1);
        assert_eq!(sim.seqs(1, rs[0]), (1..=10).collect::<Vec<_>>());
    }
}
