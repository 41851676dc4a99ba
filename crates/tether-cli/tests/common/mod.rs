//! Helpers shared by the CLI integration tests (each test crate uses some of them).
#![allow(dead_code)]

use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Waits for a child with a hard limit, killing it if it overruns (a test never hangs).
pub(crate) fn finish(mut child: Child, limit: Duration) -> Output {
    let end = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > end {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "process overran {limit:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Output bytes as text.
pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
