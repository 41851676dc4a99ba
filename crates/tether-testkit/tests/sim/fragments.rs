//! Samples larger than a datagram: fragmented, reassembled and repaired fragment by
//! fragment, incomplete ones expired, forged floods kept within their bounds.

use std::time::Duration;

use bytes::Bytes;
use tether_core::{EntityId, Qos};
use tether_testkit::{Link, Sim};

use crate::helpers::{info, payload, sample_bytes};

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
