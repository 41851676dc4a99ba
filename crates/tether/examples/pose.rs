//! Structured data with serde: `cargo run --example pose -- pub` in one terminal,
//! `cargo run --example pose -- echo` in another (or `tether echo /robot1/pose`).
//! A payload is bytes; the two sides agree on its encoding (JSON here).
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tether::{Config, Qos, Session};

#[derive(Serialize, Deserialize, Debug)]
struct Pose {
    x: f64,
    y: f64,
    theta: f64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let session = Session::open(Config::from_env()?)?;
    let count: u32 = std::env::args().nth(2).map_or(Ok(5), |n| n.parse())?;
    match std::env::args().nth(1).as_deref() {
        Some("pub") => {
            let poses = session.publisher("/robot1/pose", Qos::default().keep_all())?;
            while poses.matched() == 0 {
                std::thread::sleep(Duration::from_millis(10));
            }
            for i in 0..count {
                let pose = Pose { x: f64::from(i), y: 2.0, theta: 0.5 };
                poses.put(serde_json::to_vec(&pose)?)?;
            }
            if !poses.wait_for_acknowledgments(Duration::from_secs(5)) {
                return Err("the reader did not acknowledge every pose".into());
            }
        }
        Some("echo") => {
            let sub = session.subscriber("/robot1/pose", Qos::default().keep_all())?;
            for _ in 0..count {
                let pose: Pose = serde_json::from_slice(&sub.recv()?.payload)?;
                println!("{pose:?}");
            }
        }
        _ => return Err("usage: pose pub|echo [COUNT]".into()),
    }
    Ok(())
}
