//! What one delivery costs a subscriber's engine, with no sockets and no other thread: a
//! writer's sample handed to N readers' participants in turn (each its own session, with
//! its own keys in `group`), timing `handle_datagram` plus `take` for each. This is the
//! part of `tether bench fanout`'s subscriber CPU per delivery that the engine owns, and
//! `group` minus `plain` is what the sender keys add on the subscriber side.
//!
//! It also times the writer's side of each sample: `write` plus taking every datagram it
//! produced, which is the engine's part of the bench's put. With `multicast`, readers take
//! data from a group (one datagram per sample whatever their number), as in the bench's
//! multicast fan-out; that put should cost the same at 2 readers as at 100.
//!
//! `cargo run --release -p tether-testkit --example delivery_cost -- [READERS] [SLEEP_MS]
//! [multicast]` (default 20 readers, 25 ms between samples, the bench's rhythm at each
//! subscriber; READERS may be a list, `2,100`, run in turn within each round).
use std::net::{SocketAddr, SocketAddrV4};
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

const GROUP: &str = "239.255.0.1:7400";

/// A node in the realm of `ca` (None: security off); readers in `group` take data there.
fn node(
    sim: &mut Sim,
    ca: Option<&CaKey>,
    serial: u64,
    publish: bool,
    group: Option<SocketAddrV4>,
) -> usize {
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
    let i = sim.add_node_with(move |c| {
        c.security = sec;
        c.data_group = group;
    });
    sim.nodes[i].groups.extend(group.map(SocketAddr::V4));
    i
}

struct Cost {
    write_ns: Vec<f64>,
    deliver_ns: Vec<f64>,
    datagrams: usize,
}

fn run(secure: bool, readers: usize, sleep: Duration, samples: u64, multicast: bool) -> Cost {
    let mut sim = Sim::new(1, Link::perfect());
    let ca = CaKey::generate();
    let ca = secure.then_some(&ca);
    let group: Option<SocketAddrV4> = multicast.then(|| GROUP.parse().expect("group"));
    let w = node(&mut sim, ca, 1, true, None);
    let rs: Vec<usize> = (0..readers)
        .map(|k| node(&mut sim, ca, 2 + k as u64, false, group))
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
        datagrams: 0,
    };
    let payload = vec![7u8; 1024];
    let mut delivered = 0u64;
    for k in 0..samples {
        std::thread::sleep(sleep);
        sim.run_for(Duration::from_millis(25));
        let now = sim.now;
        let mut out = Vec::with_capacity(readers + 1);
        let t = Instant::now();
        sim.p(w)
            .write(now, wid, k, Bytes::from(payload.clone()))
            .expect("write");
        while let Some(t) = sim.p(w).poll_transmit() {
            out.push(t);
        }
        cost.write_ns.push(t.elapsed().as_nanos() as f64);
        cost.datagrams += out.len();
        for t in out {
            let bytes = t.contiguous();
            for &i in &rs {
                let n = &mut sim.nodes[i];
                if n.addr != t.dest && !n.groups.contains(&t.dest) {
                    continue;
                }
                let p = &mut n.participant;
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
    let counts: Vec<usize> = args
        .next()
        .map(|a| a.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![20]);
    let sleep = Duration::from_millis(args.next().and_then(|a| a.parse().ok()).unwrap_or(25));
    let multicast = args.next().as_deref() == Some("multicast");
    let samples = 200;
    println!(
        "1 KB samples, {} ms between samples, {samples} samples, {}; ns",
        sleep.as_millis(),
        if multicast { "multicast" } else { "unicast" }
    );
    for round in 0..2 {
        for &readers in &counts {
            for secure in [false, true] {
                let mut c = run(secure, readers, sleep, samples, multicast);
                let (wm, wp) = stats(&mut c.write_ns);
                let (dm, dp) = stats(&mut c.deliver_ns);
                println!(
                    "round {round} {readers:>3} readers {:>5}: put mean {wm:7.0} p50 {wp:7.0} ({:.0} datagrams); delivery mean {dm:6.0} p50 {dp:6.0}",
                    if secure { "group" } else { "plain" },
                    c.datagrams as f64 / samples as f64,
                );
            }
        }
    }
}
