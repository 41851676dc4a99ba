//! Helpers shared by the CLI integration tests (each test crate uses some of them).
#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Waits for a child with a hard limit, killing it if it overruns (a test never hangs).
/// Its output is read as it comes, so a child that prints more than a pipe holds does not
/// block on a full pipe.
pub(crate) fn finish(mut child: Child, limit: Duration) -> Output {
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let end = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Some(status) => Output {
            status,
            stdout,
            stderr,
        },
        None => panic!(
            "process overran {limit:?}\nstdout: {}\nstderr: {}",
            tail(&stdout),
            tail(&stderr)
        ),
    }
}

/// The last 4 KB of some output, as text.
fn tail(b: &[u8]) -> String {
    let from = b.len().saturating_sub(4096);
    String::from_utf8_lossy(&b[from..]).into_owned()
}

/// Output bytes as text.
pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
