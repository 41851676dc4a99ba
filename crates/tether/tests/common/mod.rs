//! What the session tests share: a configuration that keeps a test on this host and in
//! its own registry, and a bounded wait.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use tether::Config;

/// This host only, in a registry directory of the test's: tests running at once never
/// meet each other or the network.
pub(crate) fn local_cfg(dir: &std::path::Path) -> Config {
    let mut c = Config::default();
    c.discovery.range = tether::DiscoveryRange::Localhost;
    c.discovery.registry_dir = Some(dir.to_path_buf());
    c
}

/// Polls `f` every 5 ms until it holds or `limit` passes; whether it held.
pub(crate) fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}
