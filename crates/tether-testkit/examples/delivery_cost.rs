//! What one delivery costs a subscriber's engine, with no sockets and no other thread: a
//! writer's sample handed to N readers' participants in turn (each its own session, with
//! its own keys in `group`), timing `handle_datagram` plus `take` for each. This is the
//! part of `tether bench fanout`'s subscriber CPU per delivery that the engine owns, and
//! `group` minus `plain` is what the sender keys add on the subscriber side.
//!
//! `cargo run --release -p tether-testkit --example delivery_cost -- [READERS] [SLEEP_MS]`
//! (default 20 readers, 25 ms between samples, the bench's rhythm at each subscriber).
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_core::{EndpointInfo, Event, Qos, Security};
use tether_crypto::{CaKey, Credential, Identity, RealmSecret};
use tether_testkit::{Link, Sim};

const NOW: u64 = 1_800_000_000;

fn info() -> EndpointInfo {
    EndpointInfo {
        topic: "/fanout/0".into(),
        type_name: "t".into(),
        partitions: vec![],
        qos: Qos::new().keep_all(),
    }
}

/// A node in the realm of `ca` (None: security off).
fn node(sim: &mut Sim, ca: Option<&CaKey>, serial: u64, publish: bool) -> usize {
    let now = sim.now;
    let sec = ca.map(|ca| {
        let id = Identity::generate();
        let (p, s): (Vec<String>, Vec<String>) = if publish {
            (vec!["/**".into()], vec![])
        } else {
            (vec![], vec!["/**".into()])
        };
        let cred = Credential::issue(
            ca,
            &format!("n{serial}"),
            serial,
            NOW - 100,
            NOW + 86_400,
            id.sign_public(),
            id.kx_public(),
            p,
            s,
        )
        .expect("credential");
        Arc::new(Security::new(
            id,
            cred,
            ca.public(),
            RealmSecret::from_bytes(ca.public()),
            None,
            now,
            NOW,
        ))
    });
    sim.add_node_with(move |c| c.security = sec)
}

struct Cost {
    write_ns: Vec<f64>,
    deliver_ns: Vec<f64>,
}

fn run(secure: bool, readers: usize, sleep: Duration, samples: u64) -> Cost {
    let mut sim = Sim::new(1, Link::perfect());
    let ca = CaKey::generate();
    let ca = secure.then_some(&ca);
    let w = node(&mut sim, ca, 1, true);
    let rs: Vec<usize> = (0..readers)
        .map(|k| node(&mut sim, ca, 2 + k as u64, false))
        .collect();
    let now = sim.now;
    let wid = sim.p(w).create_writer(now, info()).expect("writer");
    for &i in &rs {
        sim.p(i).create_reader(now, info());
    }
    for i in 0..=readers {
        sim.pump(i);
    }
    assert!(
        sim.run_until(Duration::from_secs(30), |s| s.nodes[w]
            .participant
            .matched_count(wid)
            == readers),
        "not every reader matched"
    );
    sim.run_for(Duration::from_secs(1));
    let waddr = sim.nodes[w].addr;
    let mut cost = Cost {
        write_ns: Vec::new(),
        deliver_ns: Vec::new(),
    };
    let payload = vec![7u8; 1024];
    let mut delivered = 0u64;
    for k in 0..samples {
        std::thread::sleep(sleep);
        sim.run_for(Duration::from_millis(25));
        let now = sim.now;
        let t = Instant::now();
        sim.p(w)
            .write(now, wid, k, Bytes::from(payload.clone()))
            .expect("write");
        cost.write_ns.push(t.elapsed().as_nanos() as f64);
        let mut out = Vec::new();
        while let Some(t) = sim.p(w).poll_transmit() {
            out.push(t);
        }
        for t in out {
            let Some(r) = rs.iter().position(|&i| sim.nodes[i].addr == t.dest) else {
                continue;
            };
            let bytes = t.contiguous();
            let p = &mut sim.nodes[rs[r]].participant;
            let start = Instant::now();
            p.handle_datagram(now, waddr, &bytes);
            while let Some(e) = p.poll_event() {
                if let Event::DataAvailable { reader } = e {
                    while p.take(now, reader).is_some() {
                        delivered += 1;
                    }
                }
            }
            cost.deliver_ns.push(start.elapsed().as_nanos() as f64);
        }
        for i in 0..=readers {
            sim.pump(i);
        }
    }
    assert_eq!(delivered, samples * readers as u64, "samples lost");
    cost
}

fn stats(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v.iter().sum::<f64>() / v.len() as f64, v[v.len() / 2])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let readers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let sleep = Duration::from_millis(args.next().and_then(|a| a.parse().ok()).unwrap_or(25));
    let samples = 200;
    println!(
        "{readers} readers, 1 KB samples, {} ms between samples, {samples} samples; ns",
        sleep.as_millis()
    );
    for round in 0..2 {
        for secure in [false, true] {
            let mut c = run(secure, readers, sleep, samples);
            let (wm, wp) = stats(&mut c.write_ns);
            let (dm, dp) = stats(&mut c.deliver_ns);
            println!(
                "round {round} {:>5}: write mean {wm:7.0} p50 {wp:7.0}; delivery mean {dm:6.0} p50 {dp:6.0}",
                if secure { "group" } else { "plain" }
            );
        }
    }
}
