//! A secure realm's fan-out from its first sample: a writer that starts writing the moment
//! it has matched its readers (as `tether bench fanout` and any robot do) must not need
//! repairs because the realm's handshake was not finished on the other side: a reader must
//! not drop the writer's first datagrams as from a peer it has not verified yet, nor its
//! first samples for want of the writer's key.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tether_core::Qos;
use tether_testkit::realm::{Realm, info};
use tether_testkit::{Link, Sim};

const GROUP: &str = "239.255.0.1:7400";

/// One writer and `n` readers taking data by multicast, jitter on every link; the writer
/// writes `samples` samples from the moment it has matched all `n`.
fn run(seed: u64, n: usize, samples: u64, secure: bool) -> Run {
    let mut link = Link::lossy(0.0);
    link.jitter = Duration::from_millis(5);
    let mut sim = Sim::new(seed, link);
    let realm = Realm::new();
    let group: SocketAddr = GROUP.parse().unwrap();
    let wsec = Arc::new(realm.security(sim.now, 1, "robot", &["/**"], &[]));
    let w = sim.add_node_with(move |c| {
        c.path_mtu = 65_535;
        c.security = secure.then_some(wsec);
    });
    let mut readers = Vec::new();
    for k in 0..n {
        let sec = Arc::new(realm.security(sim.now, 10 + k as u64, "viewer", &[], &["/**"]));
        let i = sim.add_node_with(move |c| {
            c.data_group = Some(GROUP.parse().unwrap());
            c.security = secure.then_some(sec);
        });
        sim.nodes[i].groups.push(group);
        let now = sim.now;
        let r = sim
            .p(i)
            .create_reader(now, info("/fan", Qos::new().keep_all()));
        readers.push((i, r));
    }
    let now = sim.now;
    let wid = sim
        .p(w)
        .create_writer(now, info("/fan", Qos::new().keep_all()))
        .unwrap();
    sim.pump(w);
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.nodes[w].participant.matched_count(wid) == n
    }));
    // What the readers had counted when the writer matched them all (the handshake's own
    // drops: announcements before verification, say).
    let at_match: Vec<tether_core::Stats> = readers
        .iter()
        .map(|&(i, _)| sim.nodes[i].participant.stats().clone())
        .collect();
    for k in 0..samples {
        let now = sim.now;
        sim.p(w)
            .write(now, wid, k, Bytes::from(vec![k as u8; 1000]))
            .unwrap();
        sim.pump(w);
        sim.run_for(Duration::from_millis(1));
    }
    assert!(
        sim.run_until(Duration::from_secs(60), |s| {
            readers
                .iter()
                .all(|&(i, r)| s.seqs(i, r).len() == samples as usize)
        }),
        "seed {seed}: not every reader got every sample"
    );
    let mut drops = (0, 0, 0);
    for (&(i, _), b) in readers.iter().zip(&at_match) {
        let s: &tether_core::Stats = sim.nodes[i].participant.stats();
        drops.0 += s.unverified_dropped - b.unverified_dropped;
        drops.1 += s.no_key - b.no_key;
        drops.2 += s.unmatched_writer - b.unmatched_writer;
    }
    Run {
        drops,
        repairs: sim.nodes[w].participant.stats().samples_retransmitted,
    }
}

/// What the readers dropped after the writer had matched them all (unverified, no key,
/// unmatched writer), and what the writer repaired.
struct Run {
    drops: (u64, u64, u64),
    repairs: u64,
}

/// Written from the moment the writer matched: no reader drops a datagram of the writer's
/// as unverified, or a sample for want of its key; and the writer repairs no more than in
/// the same fan-out without security.
///
/// Readers may drop a few first samples as from a writer they do not read yet, where the
/// plain fan-out drops none: in a secure realm a reader takes the writer's ENDPOINT only
/// once it has verified the writer, and the writer sends it then, the moment it matches
/// that reader, so under the links' 0–5 ms of jitter a sample written in the next 5 ms
/// (one a millisecond here) can overtake it at the last reader matched; it is repaired.
/// That race is bounded: at most 8 samples in a run, and on average about one a run
/// (measured over seeds 1 to 40: 50 in all, in 16 runs, the most 8; 24 in 9 runs while a
/// challenge's answer that just filled the address's allowance was refused for its AUTH_TAG
/// and the challenge repeated 10 ms later, which spread the readers' matches out; 50 before
/// ENDPOINTs carried descriptions, whose bytes change the draws, not the race). Over 8
/// seeds the sum moved between 0 and 10 by chance, so the bound is taken per run and over
/// 16 seeds (18 there now).
#[test]
fn first_samples_of_a_secure_fanout_need_no_repair() {
    let (mut secure, mut plain) = ((0, 0), (0, 0));
    for seed in 1..=16u64 {
        let s = run(seed, 10, 30, true);
        assert_eq!(
            (s.drops.0, s.drops.1),
            (0, 0),
            "seed {seed}: readers' drops after the writer matched them: (unverified, no key)"
        );
        assert!(
            s.drops.2 <= 10,
            "seed {seed}: {} samples dropped as from an unmatched writer",
            s.drops.2
        );
        let p = run(seed, 10, 30, false);
        secure.0 += s.drops.2;
        secure.1 += s.repairs;
        plain.0 += p.drops.2;
        plain.1 += p.repairs;
    }
    eprintln!("(unmatched-writer drops, repairs): secure {secure:?}, plain {plain:?}");
    assert!(
        secure.0 <= plain.0 + 24 && secure.1 <= plain.1 + plain.1 / 4 + 5,
        "(unmatched-writer drops, repairs): secure {secure:?}, plain {plain:?}"
    );
}

/// A reader that reads a writer whose key never comes to it (the writer does not match it:
/// its credential grants it no subscription to the topic) holds what reaches it by
/// multicast at most `HELD_FOR_KEY_BYTES` and at most `HELD_FOR_KEY_TIME`: then every
/// sample is a counted drop, and nothing is delivered.
#[test]
fn samples_held_for_a_key_are_bounded_in_bytes_and_time() {
    let mut sim = Sim::new(9, Link::perfect());
    let realm = Realm::new();
    let group: SocketAddr = GROUP.parse().unwrap();
    let wsec = Arc::new(realm.security(sim.now, 1, "robot", &["/**"], &[]));
    let w = sim.add_node_with(move |c| {
        c.path_mtu = 65_535;
        c.multicast_min = 1;
        c.security = Some(wsec);
    });
    let mut readers = Vec::new();
    for (serial, grant) in [(2, "/**"), (3, "/nothing")] {
        let sec = Arc::new(realm.security(sim.now, serial, "viewer", &[], &[grant]));
        let i = sim.add_node_with(move |c| {
            c.path_mtu = 65_535;
            c.data_group = Some(GROUP.parse().unwrap());
            c.security = Some(sec);
        });
        sim.nodes[i].groups.push(group);
        let now = sim.now;
        let q = Qos::new().best_effort();
        readers.push((i, sim.p(i).create_reader(now, info("/fan", q))));
    }
    let (spy, spy_reader) = readers[1];
    let now = sim.now;
    let wid = sim
        .p(w)
        .create_writer(now, info("/fan", Qos::new().best_effort()))
        .unwrap();
    sim.pump(w);
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.nodes[w].participant.matched_count(wid) == 1
            && s.nodes[spy].participant.matched_count(spy_reader) == 1
    }));
    sim.run_for(Duration::from_millis(50));
    let (n, size) = (100u64, 60_000usize);
    for k in 0..n {
        let now = sim.now;
        sim.p(w)
            .write(now, wid, k, Bytes::from(vec![k as u8; size]))
            .unwrap();
        sim.pump(w);
    }
    sim.run_for(Duration::from_millis(50));
    let held = sim.nodes[spy].participant.stats().held_for_key;
    // A quarter of the budget for any one writer.
    let cap = (tether_core::HELD_FOR_KEY_BYTES / 4 / size) as u64;
    assert!(held > 0 && held <= cap, "held {held}, at most {cap}");
    assert_eq!(sim.nodes[spy].participant.stats().no_key, n - held);
    sim.run_for(tether_core::HELD_FOR_KEY_TIME + Duration::from_millis(100));
    let st = sim.nodes[spy].participant.stats();
    assert_eq!(
        st.no_key, n,
        "every held sample dropped once its time ran out"
    );
    assert!(sim.seqs(spy, spy_reader).is_empty());
    assert_eq!(st.samples_opened, 0);
    // The granted reader got them all (by multicast, like the spy).
    let (r, rid) = readers[0];
    assert_eq!(sim.seqs(r, rid).len(), n as usize);
}
