//! `router.toml`: what a router listens on, which routers it dials, its keys, its export
//! list and its limits. Every field but `keys` has a default; unknown fields are refused,
//! so a misspelt setting is an error rather than silently ignored. Paths are relative to
//! the file.
//!
//! ```toml
//! name = "site-a"                      # in logs and metrics
//! domain = 0                           # sessions and routers of other domains are refused
//! listen = "0.0.0.0:7447"              # QUIC (UDP) for sessions and routers; omit: dial only
//! keys = "site-a.key"                  # `tether keys issue DIR site-a --role router`
//! revocations = "revoked.toml"         # optional, reloaded when the file changes
//! connect = ["quic/cloud.example.org:7447"]
//! metrics = "127.0.0.1:9464"           # Prometheus text format at /metrics; omit: off
//! congestion = "cubic"                 # or "bbr" on links that lose packets at random
//!
//! [limits]
//! max_links = 1024
//! max_routes = 1000000
//! link_queue_bytes = 8388608           # per link: what waits beyond this is dropped, counted
//! link_rate_bytes_per_sec = 0          # per link token bucket; 0: the link's own pace
//! announce_bytes_per_sec = 2097152    # what one session may flood to all; more is dropped
//! handshakes_before_retry = 8         # then clients prove their address (QUIC Retry)
//! max_handshakes = 64                  # at once; a newcomer ends the oldest of the busiest
//!                                      # network (/24, /64), counted
//! max_handshakes_per_address = 16      # from one IP address (a NAT's robots share one)
//! handshake_timeout_ms = 3000          # to finish a handshake
//! link_idle_timeout_ms = 4000          # a link hearing nothing this long is dead (the
//!                                      # sessions' routers.idle_timeout_ms: the lower applies)
//!
//! # With an export list (even empty) the router is a site's gateway: only these topic keys
//! # cross between the site's sessions and other routers, in the direction given. Without
//! # one, everything crosses (a cloud router). Keys, never names: `tether keys topic-id`.
//! [[export]]
//! key = "5f1c…"                        # 64 hex digits
//! direction = "out"                    # out (leave the site), in (enter it), both
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
pub use tether_transport::quic::Congestion;

/// Why a router configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        cause: std::io::Error,
    },
    /// Not TOML, or a field unknown or of the wrong type.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the TOML reader said.
        message: String,
    },
    /// A value that parses but cannot be used.
    #[error("{path}: {field}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The setting.
        field: String,
        /// Why, and what to do.
        reason: String,
    },
    /// More than one value that parses but cannot be used: all of them, one a line, so
    /// that a file is put right in one pass.
    #[error("{}", several(path, problems))]
    Several {
        /// The file.
        path: PathBuf,
        /// Each setting and why, in the file's order of checks.
        problems: Vec<(String, String)>,
    },
}

fn several(path: &Path, problems: &[(String, String)]) -> String {
    let mut s = format!("{}: {} problems", path.display(), problems.len());
    for (field, reason) in problems {
        s.push_str(&format!("\n  {field}: {reason}"));
    }
    s
}

/// Which way an exported topic may cross a site's router.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Published in the site, subscribed elsewhere: data leaves the site.
    Out,
    /// Published elsewhere, subscribed in the site: data enters the site.
    In,
    /// Both ways.
    Both,
}

impl Direction {
    /// True if data published inside the site may leave it.
    pub fn leaves(self) -> bool {
        matches!(self, Direction::Out | Direction::Both)
    }

    /// True if data published outside the site may enter it.
    pub fn enters(self) -> bool {
        matches!(self, Direction::In | Direction::Both)
    }
}

/// One topic a site lets cross its router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRule {
    /// The topic's routing key (never its name).
    pub key: [u8; 32],
    /// Which way.
    pub direction: Direction,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExport {
    key: String,
    direction: Direction,
}

/// Limits that keep a router's memory bounded whatever its peers send.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Links (sessions and routers) at once; more are refused.
    pub max_links: usize,
    /// Routes in the routing information base; more advertisements are refused, counted.
    pub max_routes: usize,
    /// Bytes waiting to go out on one link; beyond, frames are dropped and counted (the
    /// sessions' end-to-end reliability repairs what a reliable topic loses).
    pub link_queue_bytes: usize,
    /// A token bucket per link, bytes per second; 0: as fast as the link takes them.
    pub link_rate_bytes_per_sec: u64,
    /// What one session may announce (ANNOUNCE frames, flooded to every session), bytes per
    /// second, a second's worth at once; beyond, announcements are dropped and counted.
    pub announce_bytes_per_sec: u64,
    /// Handshakes in progress from which a client that has not proved its address is sent
    /// a stateless QUIC Retry first (0: every client proves its address).
    pub handshakes_before_retry: usize,
    /// Handshakes in progress at most; a client knocking beyond takes the place of the
    /// oldest still in progress of its own network (/24, IPv6 /64) if that holds half of
    /// them, else of the network holding the most; it ends (counted).
    pub max_handshakes: usize,
    /// Handshakes in progress from one IP address at most; beyond, a newcomer from it takes
    /// the place of its oldest.
    pub max_handshakes_per_address: usize,
    /// How long a handshake (certificates and the link's preamble) may take, in ms.
    pub handshake_timeout_ms: u64,
    /// How long a link may hear nothing before it is taken as dead, in ms (QUIC's idle
    /// timeout; the lower of both ends' applies: sessions' `routers.idle_timeout_ms`).
    /// Raise both on links losing a third of their packets.
    pub link_idle_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_links: 1024,
            max_routes: 1_000_000,
            link_queue_bytes: 8 << 20,
            link_rate_bytes_per_sec: 0,
            announce_bytes_per_sec: 2 << 20,
            handshakes_before_retry: 8,
            max_handshakes: 64,
            max_handshakes_per_address: 16,
            handshake_timeout_ms: 3000,
            link_idle_timeout_ms: tether::DEFAULT_LINK_IDLE_MS,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    name: String,
    #[serde(default)]
    domain: u16,
    listen: Option<String>,
    keys: Option<PathBuf>,
    revocations: Option<PathBuf>,
    #[serde(default)]
    connect: Vec<String>,
    metrics: Option<String>,
    congestion: Option<String>,
    #[serde(default)]
    limits: Limits,
    export: Option<Vec<RawExport>>,
}

/// A router's configuration, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// Its name in logs and metrics (its credential names it to peers); empty: the
    /// credential's name, once the router runs.
    pub name: String,
    /// The domain it serves.
    pub domain: u16,
    /// Where it listens for QUIC links, if it does.
    pub listen: Option<SocketAddr>,
    /// Its key bundle (a credential with the router role).
    pub keys: PathBuf,
    /// The realm's revocation list, if given.
    pub revocations: Option<PathBuf>,
    /// Routers it dials: `host:port` (the `quic/` prefix taken off).
    pub connect: Vec<String>,
    /// Where `/metrics` is served, if it is.
    pub metrics: Option<SocketAddr>,
    /// The congestion controller of its side of every link: CUBIC by default; BBR keeps
    /// its rate on paths that lose packets at random (docs/routing.md).
    pub congestion: Congestion,
    /// Its limits.
    pub limits: Limits,
    /// Its export list; `None`: everything crosses.
    pub export: Option<Vec<ExportRule>>,
}

/// Parses a `quic/host:port` address (the prefix may be left out): `host:port`. The
/// sessions' rule ([`tether::parse_router`]), so both take the same addresses.
pub fn router_address(s: &str) -> Result<String, String> {
    tether::parse_router(s)
}

/// 64 hex digits as a routing key.
fn hex32(s: &str) -> Option<[u8; 32]> {
    tether_crypto::from_hex(s)?.try_into().ok()
}

impl RouterConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<RouterConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Io {
            path: path.to_path_buf(),
            cause,
        })?;
        RouterConfig::parse(&text, path)
    }

    /// Parses and checks `text`, read from `path` (relative paths are taken from its
    /// directory).
    pub fn parse(text: &str, path: &Path) -> Result<RouterConfig, ConfigError> {
        let raw: Raw = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        // Every problem is gathered, so that `--check` names them all in one pass.
        let mut problems: Vec<(String, String)> = Vec::new();
        let mut problem = |field: &str, reason: String| problems.push((field.to_string(), reason));
        let base = path.parent().unwrap_or(Path::new("."));
        let rel = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let keys = raw.keys.map(rel);
        if keys.is_none() {
            problem(
                "keys",
                "missing: a router needs its key bundle (`tether keys issue DIR NAME --role \
                 router`)"
                    .into(),
            );
        }
        let mut address = |field: &str, s: Option<String>| {
            s.and_then(|s| match s.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(_) => {
                    problem(field, not_address(&s));
                    None
                }
            })
        };
        let listen_given = raw.listen.is_some();
        let listen = address("listen", raw.listen);
        let metrics = address("metrics", raw.metrics);
        let connect: Vec<String> = raw
            .connect
            .iter()
            .filter_map(|s| match router_address(s) {
                Ok(a) => Some(a),
                Err(r) => {
                    problem("connect", r);
                    None
                }
            })
            .collect();
        if !listen_given && raw.connect.is_empty() {
            problem(
                "listen",
                "a router that neither listens nor connects joins nothing: give listen, \
                 connect or both"
                    .into(),
            );
        }
        let congestion = match raw.congestion.as_deref().map(str::parse::<Congestion>) {
            None => Congestion::default(),
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                problem("congestion", e);
                Congestion::default()
            }
        };
        let l = &raw.limits;
        if l.max_links == 0
            || l.max_routes == 0
            || l.max_handshakes == 0
            || l.max_handshakes_per_address == 0
            || l.handshake_timeout_ms == 0
            || l.announce_bytes_per_sec == 0
        {
            problem(
                "limits",
                "max_links, max_routes, max_handshakes, max_handshakes_per_address, \
                 handshake_timeout_ms and announce_bytes_per_sec must be > 0"
                    .into(),
            );
        }
        let idle = l.link_idle_timeout_ms;
        if !(tether::MIN_LINK_IDLE_MS..=86_400_000).contains(&idle) {
            problem(
                "limits.link_idle_timeout_ms",
                format!(
                    "{idle} is not {} (two keep-alives) to 86400000",
                    tether::MIN_LINK_IDLE_MS
                ),
            );
        }
        if l.link_queue_bytes < 1 << 16 {
            problem(
                "limits.link_queue_bytes",
                "at least 65536 (one largest datagram must fit)".into(),
            );
        }
        let export = raw.export.map(|rules| {
            let mut out: Vec<ExportRule> = Vec::with_capacity(rules.len());
            for (i, r) in rules.into_iter().enumerate() {
                // Which entry: the file's [[export]] tables, counted from 1.
                let field = format!("export.key of [[export]] {}", i + 1);
                let Some(key) = hex32(&r.key) else {
                    problem(
                        &field,
                        format!(
                            "'{}' is not a topic key of 64 hex digits (`tether keys \
                             topic-id DIR TOPIC` prints one)",
                            r.key
                        ),
                    );
                    continue;
                };
                if out.iter().any(|e| e.key == key) {
                    problem(&field, format!("'{}' is listed twice", r.key));
                    continue;
                }
                out.push(ExportRule {
                    key,
                    direction: r.direction,
                });
            }
            out
        });
        let keys = match (keys, problems.len()) {
            (Some(keys), 0) => keys,
            _ => {
                let path = path.to_path_buf();
                let mut problems = problems;
                return Err(if problems.len() == 1 {
                    let (field, reason) = problems.remove(0);
                    ConfigError::Invalid {
                        path,
                        field,
                        reason,
                    }
                } else {
                    ConfigError::Several { path, problems }
                });
            }
        };
        Ok(RouterConfig {
            name: raw.name,
            domain: raw.domain,
            listen,
            keys,
            revocations: raw.revocations.map(rel),
            connect,
            metrics,
            congestion,
            limits: raw.limits,
            export,
        })
    }

    /// The export rule for `key`: `None` without an export list (everything crosses both
    /// ways), `Some(None)` when the list leaves it out (nothing crosses).
    pub fn export_rule(&self, key: &[u8; 32]) -> Option<Option<Direction>> {
        self.export
            .as_ref()
            .map(|rules| rules.iter().find(|r| &r.key == key).map(|r| r.direction))
    }
}

/// Why `s` is not a local address to bind: an IP address and a port, no host name (a
/// name could resolve to another interface than meant).
fn not_address(s: &str) -> String {
    let hint = match s.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() && !host.is_empty() => format!(
            "; host names are not taken here: give an IP address of this host (0.0.0.0:{port} \
             for every interface, 127.0.0.1:{port} for this host only)"
        ),
        _ => String::new(),
    };
    format!("'{s}' is not ADDRESS:PORT{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RouterConfig, ConfigError> {
        RouterConfig::parse(text, Path::new("/etc/tether/router.toml"))
    }

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("config.rs");
        let example: String = doc
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.trim_start_matches("//!").trim_start())
            .map(|l| l.replace("5f1c…", &"5f1c".repeat(16)))
            .collect::<Vec<_>>()
            .join("\n");
        let c = parse(&example).unwrap();
        assert_eq!(c.name, "site-a");
        assert_eq!(c.keys, Path::new("/etc/tether/site-a.key"));
        assert_eq!(
            c.revocations.as_deref(),
            Some(Path::new("/etc/tether/revoked.toml"))
        );
        assert_eq!(c.connect, ["cloud.example.org:7447"]);
        assert_eq!(c.listen, Some("0.0.0.0:7447".parse().unwrap()));
        let key = hex32(&"5f1c".repeat(16)).unwrap();
        assert_eq!(c.export_rule(&key), Some(Some(Direction::Out)));
        assert_eq!(c.export_rule(&[0; 32]), Some(None));
        assert_eq!(c.limits.link_idle_timeout_ms, 4000);
        assert_eq!(c.congestion, Congestion::Cubic);
        let c = parse("keys = \"k\"\nlisten = \"0.0.0.0:1\"\ncongestion = \"bbr\"").unwrap();
        assert_eq!(c.congestion, Congestion::Bbr);
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = parse("listen = \"0.0.0.0:1\"").unwrap_err().to_string();
        assert!(e.contains("--role router"), "{e}");
        let e = parse("keys = \"k\"").unwrap_err().to_string();
        assert!(e.contains("neither listens nor connects"), "{e}");
        let e = parse("keys = \"k\"\nconnect = [\"tcp/h:1\"]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("only quic/HOST:PORT"), "{e}");
        let e = parse("keys = \"k\"\nconnect = [\"quic/h\"]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no port"), "{e}");
        let e = parse("keys = \"k\"\nconnect = [\"h:0\"]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 to 65535"), "{e}");
        let e = parse("keys = \"k\"\nlisten = \"x\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ADDRESS:PORT"), "{e}");
        let e = parse("keys = \"k\"\nlisten = \"localhost:7447\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("host names are not taken here"), "{e}");
        assert!(e.contains("127.0.0.1:7447"), "{e}");
        let e = parse("keys = \"k\"\nlisten = \"0.0.0.0:1\"\nlisen = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lisen"), "{e}");
        // Where in the file, as the session's configuration says it.
        let e = parse("keys = \"k\"\nlisten = \"0.0.0.0:1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2, column"), "{e}");
        let e = parse("keys = \"k\"\nlisten = 7447")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("listen"), "{e}");
        let e = parse(
            "keys = \"k\"\nlisten = \"0.0.0.0:1\"\n[[export]]\nkey = \"/camera\"\ndirection = \"out\"",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("topic-id"), "{e}");
        let e = parse("keys = \"k\"\nlisten = \"0.0.0.0:1\"\ncongestion = \"reno\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("congestion") && e.contains("cubic or bbr"),
            "{e}"
        );
        // Which [[export]] entry is wrong.
        let e = parse(&format!(
            "keys = \"k\"\nlisten = \"0.0.0.0:1\"\n[[export]]\nkey = \"{}\"\ndirection = \"out\"\n\
             [[export]]\nkey = \"/camera\"\ndirection = \"out\"",
            "5f1c".repeat(16)
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("[[export]] 2") && e.contains("/camera"), "{e}");
        let e = parse(
            "keys = \"k\"\nlisten = \"0.0.0.0:1\"\n[[export]]\nkey = \"00\"\ndirection = \"up\"",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("up"), "{e}");
        let e =
            parse("keys = \"k\"\nlisten = \"0.0.0.0:1\"\n[limits]\nlink_idle_timeout_ms = 1000")
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("link_idle_timeout_ms") && e.contains("2000"),
            "{e}"
        );
    }

    #[test]
    fn every_problem_of_a_file_is_named_at_once() {
        let e = parse(
            "listen = \"localhost:7447\"\nconnect = [\"cloud\", \"quic/b:7447\", \"tcp/c:1\"]\n\
             [limits]\nlink_queue_bytes = 10\n[[export]]\nkey = \"/camera\"\ndirection = \"out\"",
        )
        .unwrap_err();
        let ConfigError::Several { problems, .. } = &e else {
            panic!("one problem only: {e}");
        };
        let fields: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "keys",
                "listen",
                "connect",
                "connect",
                "limits.link_queue_bytes",
                "export.key of [[export]] 1"
            ]
        );
        let text = e.to_string();
        assert!(
            text.starts_with("/etc/tether/router.toml: 6 problems\n  keys: missing"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 7, "{text}");
    }

    #[test]
    fn without_an_export_list_everything_crosses_and_an_empty_one_denies_all() {
        let c = parse("keys = \"/k\"\nlisten = \"[::]:7447\"").unwrap();
        assert_eq!(c.export_rule(&[1; 32]), None);
        assert_eq!(c.keys, Path::new("/k"));
        let c = parse("keys = \"k\"\nlisten = \"[::]:7447\"\nexport = []").unwrap();
        assert_eq!(c.export_rule(&[1; 32]), Some(None));
    }

    #[test]
    fn addresses() {
        assert_eq!(router_address("quic/[::1]:7447").unwrap(), "[::1]:7447");
        assert_eq!(router_address("10.0.0.1:1").unwrap(), "10.0.0.1:1");
        assert!(router_address("quic/:1").is_err());
    }
}
