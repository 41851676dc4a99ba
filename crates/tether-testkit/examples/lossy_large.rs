//! Secure 1 MiB reliable samples across a 20 %-lossy LAN, seed after seed: the longest gap
//! between deliveries, and what the reader counted, for stalls.
//! `cargo run --release -p tether-testkit --example lossy_large -- SEEDS [plain]`
use std::time::Duration;

use bytes::Bytes;
use tether_core::Qos;
use tether_testkit::realm::{Realm, info};
use tether_testkit::{Link, Sim};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seeds: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(20);
    let secure = args.get(1).is_none_or(|a| a != "plain");
    for seed in 1..=seeds {
        let mut sim = Sim::new(seed, Link::lan(1500, 0.2));
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
        assert!(sim.run_until(Duration::from_secs(60), |s| {
            s.nodes[a].participant.matched_count(wid) == 1
        }));
        let n = 20u64;
        let t0 = sim.now;
        let mut k = 0u64;
        let mut last = sim.now;
        let mut gap = Duration::ZERO;
        let mut seen = 0;
        let end = sim.now + Duration::from_secs(120);
        while sim.now < end && sim.seqs(b, rid).len() < n as usize {
            if k < n {
                let now = sim.now;
                match sim
                    .p(a)
                    .write(now, wid, k, Bytes::from(vec![k as u8; 1 << 20]))
                {
                    Ok(_) => {
                        k += 1;
                        sim.pump(a);
                    }
                    Err(tether_core::WriteError::WouldBlock(_)) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            if !sim.step() {
                break;
            }
            let got = sim.seqs(b, rid).len();
            if got > seen {
                gap = gap.max(sim.now - last);
                last = sim.now;
                seen = got;
            }
        }
        let st = sim.nodes[b].participant.stats();
        println!(
            "seed {seed:3}: {}/{n} in {:6.2} s, longest gap {:5.2} s; reader no_key {} held {} open_failed {} over_cap {} expired {} nackfrags {}",
            sim.seqs(b, rid).len(),
            (sim.now - t0).as_secs_f64(),
            gap.as_secs_f64(),
            st.no_key,
            st.held_for_key,
            st.open_failed,
            st.reassembly_over_cap,
            st.reassembly_expired,
            st.nackfrags_sent,
        );
    }
}
