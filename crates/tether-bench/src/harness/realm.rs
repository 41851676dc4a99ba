//! Secure realms for benchmarks: a throwaway realm (a CA, a realm secret, members with
//! grants) in a private directory, the configuration of a member, and the keys of a
//! two-process bench (this process's bundle and its peer's).

use std::path::{Path, PathBuf};

use anyhow::Context;
use tether::{Config, SecurityMode};

use super::setup::{TempDir, wall_ns};

/// A member of a benchmark realm: its name (its key file is `NAME.key`), and the topic
/// patterns it may publish and subscribe to.
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) publish: Vec<String>,
    pub(crate) subscribe: Vec<String>,
}

/// Creates a realm in `dir` and issues each member a credential valid for one day.
pub(crate) fn create(dir: &Path, members: &[Member]) -> anyhow::Result<()> {
    let r = tether::keys::Realm::init(dir).context("creating the benchmark realm")?;
    for m in members {
        r.issue(&m.name, m.publish.clone(), m.subscribe.clone(), 1)
            .with_context(|| format!("issuing {}'s credential", m.name))?;
    }
    Ok(())
}

/// `base` as a member of a realm with the key bundle `keys`: every sample sealed under its
/// writer's sender key (`bench fanout`'s `group` mode).
pub(crate) fn member_config(base: &Config, keys: &Path) -> Config {
    let mut c = base.clone();
    c.security.keys = Some(keys.to_path_buf());
    c.security.mode = Some(SecurityMode::Encrypt);
    c
}

/// `base` with security off: the plain side of a secure/plain comparison.
pub(crate) fn plain_config(base: &Config) -> Config {
    let mut c = base.clone();
    c.security = Default::default();
    c
}

/// The key bundles of a two-process bench in a secure realm.
#[derive(Debug, Clone)]
pub(crate) struct PairKeys {
    /// This process's session.
    pub(crate) mine: PathBuf,
    /// The peer process's session.
    pub(crate) theirs: PathBuf,
    /// The realm's revocation list, if one is given.
    pub(crate) revocations: Option<PathBuf>,
}

impl PairKeys {
    /// The flags that make a `tether bench-peer` a member with [`PairKeys::theirs`].
    pub(crate) fn peer_args(&self) -> Vec<String> {
        let mut v = vec!["--keys".into(), self.theirs.display().to_string()];
        if let Some(r) = &self.revocations {
            v.extend(["--revocations".into(), r.display().to_string()]);
        }
        v
    }
}

/// Where the secure side of a two-process bench takes its keys from.
pub(crate) enum SecureSide {
    /// A realm made for this run, removed at its end: two members granted `patterns`.
    Throwaway {
        /// The members' bundles.
        keys: PairKeys,
        /// The realm's directory.
        _dir: TempDir,
    },
    /// The user's `--keys` (and `--revocations`), used by both processes.
    Given(PairKeys),
}

impl SecureSide {
    /// The secure side of a bench run: a throwaway realm whose two members (`bench-a` here,
    /// `bench-b` in the peer) may publish and subscribe to `patterns` when `throwaway`; else
    /// the keys `cfg` holds, if security is on in it; else none.
    pub(crate) fn choose(
        cfg: &Config,
        throwaway: bool,
        patterns: &[&str],
    ) -> anyhow::Result<Option<SecureSide>> {
        if throwaway {
            let dir = std::env::temp_dir().join(format!(
                "tether-bench-realm-{}-{}",
                std::process::id(),
                wall_ns() % 1_000_000
            ));
            let guard = TempDir(dir.clone());
            let grant: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
            let members: Vec<Member> = ["bench-a", "bench-b"]
                .into_iter()
                .map(|name| Member {
                    name: name.into(),
                    publish: grant.clone(),
                    subscribe: grant.clone(),
                })
                .collect();
            create(&dir, &members)?;
            return Ok(Some(SecureSide::Throwaway {
                keys: PairKeys {
                    mine: dir.join("bench-a.key"),
                    theirs: dir.join("bench-b.key"),
                    revocations: None,
                },
                _dir: guard,
            }));
        }
        match &cfg.security.keys {
            Some(k) if cfg.security.enabled() => Ok(Some(SecureSide::Given(PairKeys {
                mine: k.clone(),
                theirs: k.clone(),
                revocations: cfg.security.revocations.clone(),
            }))),
            _ => Ok(None),
        }
    }

    /// Both processes' bundles.
    pub(crate) fn keys(&self) -> &PairKeys {
        match self {
            SecureSide::Throwaway { keys, .. } | SecureSide::Given(keys) => keys,
        }
    }

    /// The directory of a throwaway realm (none for the user's keys).
    pub(crate) fn realm_dir(&self) -> Option<&Path> {
        match self {
            SecureSide::Throwaway { _dir, .. } => Some(&_dir.0),
            SecureSide::Given(_) => None,
        }
    }

    /// In words, for the reports.
    pub(crate) fn describe(&self) -> String {
        match self {
            SecureSide::Throwaway { .. } => "a throwaway realm (two members)".into(),
            SecureSide::Given(k) => format!("the realm of {}", k.mine.display()),
        }
    }

    /// This process's configuration on the secure side: `cfg` with security off but for its
    /// bundle (and revocation list) and encrypted samples, as its peer's (which gets only the
    /// flags of [`PairKeys::peer_args`]).
    pub(crate) fn config(&self, cfg: &Config) -> Config {
        let k = self.keys();
        let mut c = member_config(&plain_config(cfg), &k.mine);
        c.security.revocations = k.revocations.clone();
        c
    }
}
