//! Structured data as the README shows it: a serde type encoded to JSON bytes by one session,
//! decoded by another, every field intact (examples/structured.rs shows it in one session).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tether::{Config, Qos, Session};

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Pose {
    frame: String,
    x: f64,
    y: f64,
    theta: f64,
    covariance: Vec<f32>,
}

#[test]
fn serde_values_cross_sessions_intact() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || {
        let mut c = Config::default();
        c.discovery.range = tether::DiscoveryRange::Localhost;
        c.discovery.registry_dir = Some(dir.path().to_path_buf());
        c
    };
    let a = Session::open(cfg()).unwrap();
    let b = Session::open(cfg()).unwrap();
    let sub = b
        .subscriber("/robot1/pose", Qos::default().keep_all())
        .unwrap();
    let poses = a
        .publisher("/robot1/pose", Qos::default().keep_all())
        .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while poses.matched() == 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(poses.matched(), 1, "the sessions did not match in 10 s");
    let sent: Vec<Pose> = (0..50)
        .map(|i| Pose {
            frame: format!("map/{i}"),
            x: f64::from(i) * 0.5,
            y: -2.25,
            theta: f64::from(i) / 8.0,
            covariance: vec![0.1; 36],
        })
        .collect();
    for p in &sent {
        poses.put(serde_json::to_vec(p).unwrap()).unwrap();
    }
    for p in &sent {
        let s = sub.recv_timeout(Duration::from_secs(5)).unwrap();
        let got: Pose = serde_json::from_slice(&s.payload).unwrap();
        assert_eq!(&got, p);
    }
}
