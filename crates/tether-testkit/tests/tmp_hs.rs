//! tmp
use std::time::{Duration, Instant};
use tether_core::Qos;
use tether_testkit::realm::{Realm, info};
use tether_testkit::{Link, Sim};
#[test]
fn hs_cpu() {
    let realm = Realm::new();
    for secure in [false, true] {
        let mut sim = Sim::new(1, Link::perfect());
        let (a, b) = if secure {
            (
                realm.member(&mut sim, 1, "robot"),
                realm.member(&mut sim, 2, "viewer"),
            )
        } else {
            (sim.add_node(0), sim.add_node(0))
        };
        let t = Instant::now();
        let now = sim.now;
        let q = Qos::new().keep_all().transient_local();
        let wid = sim.p(a).create_writer(now, info("/t", q)).unwrap();
        sim.p(a)
            .write(now, wid, 1, bytes::Bytes::from_static(b"x"))
            .unwrap();
        let rid = sim.p(b).create_reader(now, info("/t", q));
        sim.pump(a);
        sim.pump(b);
        let t0 = sim.now;
        sim.sniffed = Some(Vec::new());
        let mut log = Vec::new();
        assert!(sim.run_until(Duration::from_secs(5), |s| {
            for d in s.sniffed.as_mut().unwrap().drain(..) {
                let kinds: Vec<String> = tether_wire::Datagram::parse(&d.payload)
                    .map(|dg| {
                        dg.submessages()
                            .map(|m| match m {
                                Ok(m) => format!("{:?}", m)
                                    .split(['(', ' ', '{'])
                                    .next()
                                    .unwrap()
                                    .to_string(),
                                Err(_) => "?".into(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                log.push(format!(
                    "{:?} {} -> {} {:?}",
                    s.now - t0,
                    d.from,
                    d.to,
                    kinds
                ));
            }
            s.seqs(b, rid) == vec![1]
        }));
        if secure {
            for l in &log {
                eprintln!("  {l}");
            }
        }
        eprintln!(
            "HS secure={secure} virtual {:?} cpu {:?} dgrams a {} b {}",
            sim.now - t0,
            t.elapsed(),
            sim.nodes[a].participant.stats().datagrams_sent,
            sim.nodes[b].participant.stats().datagrams_sent
        );
    }
}
