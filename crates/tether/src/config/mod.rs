//! The session configuration: one TOML file, every field defaulted.
//!
//! ```toml
//! domain = 0                 # sessions of other domains never meet
//! name = "robot1"            # shown by `tether info`; announced in clear (default: none)
//!
//! [discovery]
//! range = "subnet"           # how far automatic discovery reaches: "subnet" (default: this
//!                            # host by the registry, the LAN by multicast), "localhost"
//!                            # (this host only, listening on 127.0.0.1), "off" (static
//!                            # peers only). Env TETHER_DISCOVERY, flag --discovery
//! registry = true            # same-host discovery through a directory (default: on
//!                            # unless range is "off")
//! registry_dir = "/tmp/x"    # default: /tmp/tether, shared by all users of the host
//! multicast = true           # LAN discovery by UDP multicast (default: on with "subnet")
//! multicast_group = "239.255.0.1"
//! multicast_port = 7400      # the domain id is added
//! interface = "0.0.0.0"      # interface name (eth0) or IPv4 address for multicast
//! peers = ["192.0.2.10:7411"] # static unicast peers (their transport.listen), in any
//!                            # range. Env TETHER_PEERS (comma-separated), flag --peer
//! announce_period_ms = 1000
//! lease_ms = 10000           # 30000 by default with [routers]
//! max_endpoints_per_participant = 1024  # more endpoints of one peer are refused
//! max_string_bytes = 512     # a longer name, topic, type or partition is refused
//! max_partitions = 16        # per endpoint (the wire carries at most 16)
//! max_peer_metadata_bytes = 524288  # stored per peer: its name and endpoints, with
//!                            # the table's overhead; an endpoint past it is refused
//! max_pending_participants = 64 # participants heard from but not yet known (address not
//!                            # validated; secure: not authenticated), oldest out; at
//!                            # most 4 per address (MAX_IDS_PER_ADDRESS), a 5th refused
//!
//! [transport]
//! listen = "0.0.0.0:7411"    # default: 0.0.0.0:0 (any port, every interface); with range
//!                            # "localhost" 127.0.0.1:0 unless peers or multicast need more
//! max_datagram = 65000      # largest datagram: to peers on this host, and what probes
//!                            # may raise a path to
//! path_mtu = 1500            # MTU assumed of links to other hosts: datagrams to them start
//!                            # at 1472 B (IPv4) / 1452 B (IPv6), never IP-fragmented
//! probe_paths = true         # probe each path for larger datagrams (jumbo frames) and
//!                            # lower it when probes are lost (tunnels)
//! recv_buffer = 16777216
//! send_buffer = 4194304
//! busy_poll = false          # spin on the socket for the lowest latency (costs a core)
//! multicast_data = false     # readers also take data on the discovery multicast group
//!                            # (group, port, interface from [discovery]), so a writer
//!                            # sends one datagram for all of them
//! batch_io = "offload"       # system calls: "offload" (sendmmsg/recvmmsg with UDP GSO
//!                            # and GRO where the kernel has them), "mmsg" (without GSO
//!                            # and GRO), "single" (one call per datagram)
//! dont_fragment = true       # DF on every datagram, never IP-fragmented (path probing
//!                            # needs it; false: no probing, paths stay at path_mtu)
//! congestion_control = true  # reliable writers keep in flight to another host what its
//!                            # path delivers (measured), not what loss suggests
//! max_sample_size = 268435456       # larger samples are refused; above one datagram, fragmented
//! max_reassembly_bytes = 570425344  # per reader, in samples being reassembled (what
//!                                   # their fragments brought, never what they claim)
//! max_reassembly_bytes_per_writer = 285212672  # one writer's share of it: a sample of
//!                                   # max_sample_size and a sixteenth
//! reassembly_timeout_ms = 10000     # an incomplete sample quiet this long is dropped
//!
//! [reliability]
//! heartbeat_period_ms = 100
//! max_blocking_time_ms = 1000  # how long put() waits for room before failing (10000 by
//!                              # default with [routers])
//! inactive_reader_ms = 3000    # a reader of a keep-all writer that owes acknowledgements and
//!                              # sends none this long is let go of (0 or "strict": never);
//!                              # 20000 by default with [routers] (a router restart, a new
//!                              # address: a link takes seconds to come back)
//!
//! [security]                 # relative paths: from this file's directory
//! keys = "realm/robot1.key"  # from `tether keys issue`; turns authentication on
//! revocations = "realm/revoked.toml"   # the realm's signed revocation list (watched)
//! mode = "encrypt"           # "off" (default without keys), "encrypt" (default with),
//!                            # "sign" or "encrypt+sign"
//! suite = "auto"             # "aes128-gcm", "aes256-gcm", "chacha20-poly1305"
//! pairwise = false           # also seal each datagram per peer, as SROS2 does (for comparison)
//! [security.topics]          # per-topic modes, by pattern (first match wins)
//! "/cmd/**" = "encrypt+sign"
//!
//! [routers]                  # routers this session dials (QUIC, mutual TLS under the
//!                            # realm's CA: needs [security] keys); it works behind NAT
//! connect = ["quic/cloud.example.org:7447"]   # env TETHER_ROUTERS, flag --router
//! datagram = 60000           # largest engine datagram on a router link
//! idle_timeout_ms = 4000     # a link hearing nothing this long is dialled again (the
//!                            # router's limits.link_idle_timeout_ms too: the lower applies)
//! congestion = "cubic"       # or "bbr" on links that lose packets at random, only if
//!                            # the router runs bbr too (docs/routing.md, "Lossy links")
//!
//! # Named token buckets for asynchronous writers (`Qos::flow_controller("bulk")`). Give
//! # either a rate, or tokens per period (rate = tokens × bytes_per_token / period).
//! [flow_controllers.bulk]
//! rate = "10MB/s"            # K, M, G = 1000^n; Ki, Mi, Gi = 1024^n
//! [flow_controllers.paper]
//! tokens_per_period = 10     # or "unlimited"
//! period_ms = 10
//! bytes_per_token = 8192
//! max_tokens = 10            # the largest burst; default tokens_per_period
//! ```
//!
//! [`Config::from_env`] then applies the environment, which overrides the file (and the
//! `tether` command's flags override both): `TETHER_DOMAIN` (the domain id),
//! `TETHER_DISCOVERY` (`subnet`, `localhost` or `off`: the range, replacing the file's
//! `range`, `registry` and `multicast`), `TETHER_PEERS` (comma-separated `host:port`
//! static peers, replacing the file's `peers`) and `TETHER_ROUTERS` (comma-separated
//! `quic/host:port`, replacing `routers.connect`). Empty variables are ignored.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod discovery;
mod engine;
mod env;
mod flow_controllers;
mod reliability;
mod routers;
mod security;
mod transport;
mod validate;

pub use discovery::{DiscoveryConfig, DiscoveryRange};
pub(crate) use engine::{EngineSettings, SecurityPolicy};
pub use flow_controllers::{FlowControllerConfig, TokenCount, UnlimitedWord};
pub use reliability::{InactiveAfter, ReliabilityConfig, StrictWord};
pub use routers::{DEFAULT_LINK_IDLE_MS, MIN_LINK_IDLE_MS, RoutersConfig, parse_router};
pub use security::{SecurityConfig, SecurityMode, SuiteChoice, UnknownWord};
pub use transport::{BatchIoMode, TransportConfig};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown key or a value of the wrong type. The message
    /// names the key and its line.
    #[error("invalid config{}: {message}", path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Parse {
        /// The file, if read from one.
        path: Option<PathBuf>,
        /// The parser's message, with line, column and key.
        message: String,
    },
    /// A number is outside the range the field allows.
    #[error(
        "invalid config: {field} = {value} is outside {}..={}{}",
        allowed.start(),
        allowed.end(),
        if *allowed == (1..=DAY_MS) { " (1 ms to 1 day)" } else { "" }
    )]
    OutOfRange {
        /// The field, as `table.key`.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The values allowed.
        allowed: std::ops::RangeInclusive<u64>,
    },
    /// Security is on (`security.mode` other than `off`) but no key bundle is given.
    #[error(
        "invalid config: security is on (security.mode) but security.keys is not set (a bundle from `tether keys issue`)"
    )]
    MissingKeys,
    /// An environment variable (`TETHER_DOMAIN`, `TETHER_DISCOVERY`, `TETHER_PEERS`) has
    /// a value that cannot be used.
    #[error("invalid environment variable {var}={value:?}: {reason}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A value is well-typed but unusable for another reason.
    #[error("invalid config: {field}: {reason}")]
    Invalid {
        /// The field, as `table.key` (or the table, for a bad key in it).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ConfigError {
    fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// `reliability.max_blocking_time_ms` by default.
pub(crate) const DEFAULT_MAX_BLOCKING_MS: u64 = 1000;

/// One day in milliseconds: the longest period or time-out a configuration takes.
const DAY_MS: u64 = 24 * 3600 * 1000;

/// The whole configuration of a session.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Domain id.
    pub domain: u16,
    /// Session name, announced in clear to every participant that hears this one and shown
    /// by `tether info`. Default empty: the announcement says nothing about the process. In
    /// a secure realm, peers name a session by the name its credential certifies instead.
    pub name: String,
    /// Discovery settings.
    pub discovery: DiscoveryConfig,
    /// Transport settings.
    pub transport: TransportConfig,
    /// Reliability settings.
    pub reliability: ReliabilityConfig,
    /// Named flow controllers for asynchronous writers.
    pub flow_controllers: std::collections::BTreeMap<String, FlowControllerConfig>,
    /// Membership of a secure realm.
    pub security: SecurityConfig,
    /// Routers to dial.
    pub routers: RoutersConfig,
}

impl Config {
    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: None,
            message: e.to_string(),
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Reads a TOML file. Relative paths in it (`security.keys`, `security.revocations`,
    /// `discovery.registry_dir`) are taken from the file's directory, not from the working
    /// directory of the process that reads it: a file and the keys beside it work from
    /// anywhere.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut c = Self::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: Some(path.to_path_buf()),
                message,
            },
            e => e,
        })?;
        c.resolve_paths(path.parent().unwrap_or(Path::new("")));
        Ok(c)
    }

    /// Makes the relative paths of a file read from directory `dir` relative to `dir`.
    fn resolve_paths(&mut self, dir: &Path) {
        let resolve = |p: &mut Option<PathBuf>| {
            if let Some(p) = p.as_mut().filter(|p| p.is_relative()) {
                *p = dir.join(&*p);
            }
        };
        resolve(&mut self.security.keys);
        resolve(&mut self.security.revocations);
        resolve(&mut self.discovery.registry_dir);
    }

    /// The flow controllers, validated.
    pub fn flow_controller_specs(
        &self,
    ) -> Result<Vec<(String, tether_core::FlowController)>, ConfigError> {
        self.flow_controllers
            .iter()
            .map(|(k, v)| {
                if k.is_empty() || k.len() > tether_core::FlowName::MAX {
                    return Err(ConfigError::invalid(
                        "flow_controllers",
                        format!(
                            "flow controller name '{k}' must be 1 to {} bytes",
                            tether_core::FlowName::MAX
                        ),
                    ));
                }
                Ok((k.clone(), v.to_spec(k)?))
            })
            .collect()
    }

    /// The address the session binds: `transport.listen`, else every interface
    /// (`0.0.0.0:0`), but for range `localhost` without static peers or multicast data,
    /// `127.0.0.1:0`.
    pub fn listen_addr(&self) -> SocketAddr {
        self.transport.listen.unwrap_or_else(|| {
            let d = &self.discovery;
            if d.range != DiscoveryRange::Localhost
                || d.uses_multicast()
                || self.transport.multicast_data
                || !d.peers.is_empty()
            {
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
            } else {
                SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
            }
        })
    }

    pub(crate) fn announce_period(&self) -> Duration {
        Duration::from_millis(self.discovery.announce_period_ms)
    }

    /// The discovery multicast port of this domain (`multicast_port` + `domain`).
    pub(crate) fn multicast_port(&self) -> u16 {
        self.discovery.multicast_port.wrapping_add(self.domain)
    }
}

#[cfg(test)]
mod tests;
