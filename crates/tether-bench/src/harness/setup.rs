//! One benchmark run's private world, and the facts every report prints.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use tether::Config;

use super::realm::{PairKeys, SecureSide};

/// The configuration of a benchmark's sessions: a private domain and registry directory,
/// so benchmarks never meet other sessions. The directory is removed on drop.
pub(crate) struct BenchCfg {
    pub(crate) base: Config,
    domain: u16,
    registry: PathBuf,
    /// The keys of the peer processes in a secure realm (none: security off).
    peer_keys: Option<PairKeys>,
    /// The routers the peer processes dial (`quic/HOST:PORT`; none: they meet by
    /// discovery).
    peer_routers: Vec<String>,
    _dir: TempDir,
}

/// A private directory, removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl BenchCfg {
    /// The private domain of this benchmark.
    pub(crate) fn domain(&self) -> u16 {
        self.domain
    }

    /// Its private directory (removed at the end).
    pub(crate) fn dir(&self) -> &Path {
        &self.registry
    }

    /// The flags that make a peer process a member of this run's realm (none when
    /// security is off).
    pub(crate) fn peer_args(&self) -> Vec<String> {
        let mut v = self
            .peer_keys
            .as_ref()
            .map_or_else(Vec::new, PairKeys::peer_args);
        for r in &self.peer_routers {
            v.extend(["--router".into(), r.clone()]);
        }
        v
    }

    /// This run's sessions meeting only through routers: this process's dials `mine`, the
    /// peer processes dial `theirs` (each `quic/HOST:PORT`), and discovery is off, so
    /// nothing goes from session to session directly. Routers take members of a realm
    /// only: `self` must be secure.
    pub(crate) fn via_routers(mut self, mine: &[String], theirs: &[String]) -> BenchCfg {
        self.base.routers.connect = mine.to_vec();
        self.base.discovery.set_range(tether::DiscoveryRange::Off);
        self.peer_routers = theirs.to_vec();
        self
    }
}

/// `base` moved to a private domain and registry directory. If `base` takes part in a
/// secure realm (`--keys`), the peer processes take part with the same key bundle.
pub(crate) fn bench_cfg(base: Config) -> anyhow::Result<BenchCfg> {
    let peer_keys = match &base.security.keys {
        Some(k) if base.security.enabled() => Some(PairKeys {
            mine: k.clone(),
            theirs: k.clone(),
            revocations: base.security.revocations.clone(),
        }),
        _ => None,
    };
    private(base, 0, peer_keys)
}

/// The secure side of a secure/plain comparison: `plain` as a member of `side`'s realm,
/// in a private domain of its own (50 above the plain side's, so the two never meet) and
/// a private registry directory.
pub(crate) fn secure_bench_cfg(plain: &Config, side: &SecureSide) -> anyhow::Result<BenchCfg> {
    private(side.config(plain), 50, Some(side.keys().clone()))
}

fn private(
    mut base: Config,
    domain_offset: u16,
    peer_keys: Option<PairKeys>,
) -> anyhow::Result<BenchCfg> {
    let dir = std::env::temp_dir().join(format!(
        "tether-bench-{}-{}",
        std::process::id(),
        wall_ns() % 1_000_000
    ));
    std::fs::create_dir_all(&dir)?;
    let domain = 200 + (std::process::id() % 50) as u16 + domain_offset;
    base.domain = domain;
    // This host only: measured on loopback, never meeting another run.
    base.discovery.set_range(tether::DiscoveryRange::Localhost);
    base.discovery.registry_dir = Some(dir.clone());
    Ok(BenchCfg {
        base,
        domain,
        registry: dir.clone(),
        peer_keys,
        peer_routers: Vec::new(),
        _dir: TempDir(dir),
    })
}

/// Nanoseconds since the Unix epoch: the clock samples are stamped with, so one host's
/// processes can take one-way times.
pub(crate) fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The CPU model and the number of vCPUs, for the reports.
pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{cpu}, {n} vCPU")
}

/// Waits up to 20 s for the benchmark's endpoints to match, then lets discovery settle.
pub(crate) fn wait_matched(matched: impl Fn() -> bool) -> anyhow::Result<()> {
    let end = Instant::now() + Duration::from_secs(20);
    while !matched() {
        if Instant::now() > end {
            bail!("the benchmark peer did not match within 20 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    Ok(())
}

/// A command-line number of seconds as a duration, with a clear error naming `flag` (the
/// same check as the user commands').
pub(crate) fn secs(flag: &str, v: f64) -> anyhow::Result<Duration> {
    if !(0.0..=1e9).contains(&v) {
        bail!("{flag} must be between 0 and 1e9 seconds, not {v}");
    }
    Duration::try_from_secs_f64(v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}
