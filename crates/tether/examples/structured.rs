//! Structured data: payloads are bytes, so a message is whatever serde makes of it. Here a
//! `Pose` goes out as JSON, labelled `json` so that `tether echo /robot/pose` prints it
//! indented, and comes back through a subscriber of the same session. docs/cli.md shows
//! the lines between the `[structured]` markers (a test of tether-cli checks that it
//! does, word for word).
//!
//! `cargo run -p tether --example structured` runs it once; with `-- --minute` it goes on
//! publishing a pose a second for a minute, for `tether echo /robot/pose` in another
//! terminal.

use std::time::Duration;

// [structured]
use serde::{Deserialize, Serialize};
use tether::{Config, Encoding, Qos, Session, Topic};

#[derive(Serialize, Deserialize, Debug, PartialEq)]
#[rustfmt::skip]
struct Pose { x: f64, y: f64, theta: f64 }
// [structured]

#[rustfmt::skip]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [structured]
    let session = Session::open(Config::from_env()?)?;
    let topic = Topic::new("/robot/pose").encoding(Encoding::Json);
    let sub = session.subscriber(topic.clone(), Qos::default())?;
    let publisher = session.publisher(topic, Qos::default())?;
    publisher.put(serde_json::to_vec(&Pose { x: 1.0, y: 2.0, theta: 0.5 })?)?;
    let pose: Pose = serde_json::from_slice(&sub.recv_timeout(Duration::from_secs(5))?.payload)?;
    // [structured]
    assert_eq!(pose, Pose { x: 1.0, y: 2.0, theta: 0.5 });
    println!("{pose:?}");
    let minute = std::env::args().any(|a| a == "--minute");
    for i in 0..if minute { 60 } else { 0 } {
        std::thread::sleep(Duration::from_secs(1));
        let theta = f64::from(i) / 10.0;
        publisher.put(serde_json::to_vec(&Pose { x: 1.0, y: 2.0, theta })?)?;
    }
    Ok(())
}
