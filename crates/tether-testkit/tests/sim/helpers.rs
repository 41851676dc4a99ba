//! What the simulator tests share: endpoint descriptions, payloads, and a writer matched
//! with readers on other nodes.

use std::time::Duration;

use bytes::Bytes;
use tether_core::{EndpointInfo, EntityId, Qos};
use tether_testkit::Sim;

pub(crate) fn info(topic: &str, qos: Qos) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "std_msgs/String".into(),
        partitions: vec![],
        qos,
    }
}

pub(crate) fn payload(i: u64) -> Bytes {
    Bytes::from(format!("sample-{i}").into_bytes())
}

/// Creates a writer on node 0 and a reader on each other node; runs until all matched.
pub(crate) fn setup(sim: &mut Sim, wq: Qos, rq: Qos, readers: usize) -> (EntityId, Vec<EntityId>) {
    for _ in 0..=readers {
        sim.add_node(0);
    }
    let now = sim.now;
    let w = sim.p(0).create_writer(now, info("/t", wq)).unwrap();
    let mut rs = Vec::new();
    for i in 1..=readers {
        let now = sim.now;
        rs.push(sim.p(i).create_reader(now, info("/t", rq)));
        sim.pump(i);
    }
    sim.pump(0);
    let ok = sim.run_until(Duration::from_secs(60), |s| {
        s.nodes[0].participant.matched_count(w) == readers
            && (1..=readers).all(|i| s.nodes[i].participant.matched_count(rs[i - 1]) == 1)
    });
    assert!(ok, "endpoints did not match within 60 s of virtual time");
    (w, rs)
}

pub(crate) fn sample_bytes(k: u64, n: usize) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|i| (i as u64 * 131 + k * 17) as u8)
            .collect::<Vec<u8>>(),
    )
}
