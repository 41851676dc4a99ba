//! A secure realm starting under heavy loss: the handshake (address validation, AUTH both
//! ways, the control keys, the endpoints, the KEY) must not take much longer than a plain
//! start. The lossy-network review measured a median of 2.1 s to the first sample at 30 %
//! frame loss both ways, against 0.14 s plain: a lost AUTH waited for the next
//! announcement period (1 s) to go again.

use std::time::Duration;

use tether_core::Qos;
use tether_testkit::realm::{Realm, info};
use tether_testkit::{Link, Sim};

/// Virtual time from start until a writer and a reader, each on its own node, have matched
/// each other, secure or plain, under `loss` both ways.
fn time_to_match(seed: u64, loss: f64, secure: bool) -> Duration {
    let mut sim = Sim::new(seed, Link::lan(1500, loss));
    let realm = Realm::new();
    let (a, b) = if secure {
        (
            realm.member(&mut sim, 1, "robot"),
            realm.member(&mut sim, 2, "viewer"),
        )
    } else {
        (sim.add_node(0), sim.add_node(0))
    };
    let now = sim.now;
    let q = Qos::new().keep_all();
    let wid = sim.p(a).create_writer(now, info("/t", q)).unwrap();
    let rid = sim.p(b).create_reader(now, info("/t", q));
    sim.pump(a);
    sim.pump(b);
    let t0 = sim.now;
    assert!(
        sim.run_until(Duration::from_secs(60), |s| {
            s.nodes[a].participant.matched_count(wid) == 1
                && s.nodes[b].participant.matched_count(rid) == 1
        }),
        "seed {seed}: no match in 60 s (secure {secure})"
    );
    sim.now - t0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// At 30 % loss both ways, over 24 seeds: the secure median under 400 ms (453 ms with AUTH
/// resent only with announcements; plain's is 15 ms: the secure handshake has five more
/// exchanges, each lost with odds of one in two), and no start over 6 s.
#[test]
fn a_secure_start_under_loss_is_not_held_up_by_the_announcement_period() {
    let secure: Vec<Duration> = (1..=24).map(|s| time_to_match(s, 0.3, true)).collect();
    let plain: Vec<Duration> = (1..=24).map(|s| time_to_match(s, 0.3, false)).collect();
    let (ms, mp) = (median(secure.clone()), median(plain.clone()));
    let worst = secure.iter().max().copied().unwrap();
    eprintln!("median to match: secure {ms:?}, plain {mp:?}; secure worst {worst:?}");
    assert!(
        ms <= Duration::from_millis(400),
        "secure median {ms:?}, plain {mp:?}"
    );
    assert!(
        worst <= Duration::from_secs(6),
        "a secure start took {worst:?}"
    );
}
