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

use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod engine;
mod routers;

pub use routers::{RoutersConfig, parse_router};
mod security;
pub(crate) use engine::{EngineSettings, SecurityPolicy};
pub use security::{SecurityConfig, SecurityMode, SuiteChoice, UnknownWord};

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

/// `[flow_controllers.NAME]`: a token bucket. Give `rate`, or `tokens_per_period` with
/// `period_ms` and `bytes_per_token`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FlowControllerConfig {
    /// A rate such as `"10MB/s"` or `"unlimited"`.
    pub rate: Option<String>,
    /// Tokens added per period: a number or `"unlimited"`.
    pub tokens_per_period: Option<TokenCount>,
    /// The period in ms (default 10).
    pub period_ms: Option<u64>,
    /// Bytes per token (default 1 with `rate`, 8192 with `tokens_per_period`).
    pub bytes_per_token: Option<u64>,
    /// The largest burst in tokens (default `tokens_per_period`).
    pub max_tokens: Option<u64>,
}

/// A token count or `"unlimited"`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum TokenCount {
    /// This many.
    Count(u64),
    /// The word `unlimited`.
    Word(UnlimitedWord),
}

/// The word `unlimited`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnlimitedWord {
    /// `"unlimited"`.
    Unlimited,
}

impl FlowControllerConfig {
    /// The token bucket it describes; `key` names it in errors.
    pub fn to_spec(&self, key: &str) -> Result<tether_core::FlowController, ConfigError> {
        use tether_core::FlowController;
        let bad = |m: String| ConfigError::invalid(format!("flow_controllers.{key}"), m);
        let period_ms = self.period_ms.unwrap_or(10);
        if !(1..=24 * 3600 * 1000).contains(&period_ms) {
            return Err(bad(format!(
                "period_ms = {period_ms} is outside 1..=86400000"
            )));
        }
        let period = Duration::from_millis(period_ms);
        let mut spec = match (&self.rate, self.tokens_per_period) {
            (Some(_), Some(_)) => {
                return Err(bad("give rate or tokens_per_period, not both".into()));
            }
            (None, None) => return Err(bad("give rate or tokens_per_period".into())),
            (Some(r), None) if r.trim() == "unlimited" => FlowController::UNLIMITED,
            (Some(r), None) => {
                let bps = tether_core::parse_rate(r).map_err(|e| bad(e.to_string()))?;
                let bpt = self.bytes_per_token.unwrap_or(1).max(1);
                let per_period = (bps as f64 * period.as_secs_f64() / bpt as f64).round();
                if per_period < 1.0 {
                    return Err(bad(format!(
                        "rate {r} is less than one token of {bpt} B per {period_ms} ms"
                    )));
                }
                FlowController::tokens(per_period as u64, period, bpt)
            }
            (None, Some(TokenCount::Word(_))) => FlowController::UNLIMITED,
            (None, Some(TokenCount::Count(n))) => {
                let bpt = self.bytes_per_token.unwrap_or(8192);
                if bpt == 0 {
                    return Err(bad("bytes_per_token must be at least 1".into()));
                }
                FlowController::tokens(n, period, bpt)
            }
        };
        if let Some(m) = self.max_tokens {
            if m == 0 {
                return Err(bad("max_tokens must be at least 1".into()));
            }
            spec = spec.with_max_tokens(m);
        }
        Ok(spec)
    }
}

/// `discovery.range`: how far automatic discovery reaches, as ROS 2's
/// `ROS_AUTOMATIC_DISCOVERY_RANGE`. Static peers (`discovery.peers`) are used in every
/// range. In TOML, `TETHER_DISCOVERY` and `--discovery`: `"subnet"`, `"localhost"` or
/// `"off"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub enum DiscoveryRange {
    /// `"subnet"` (default): sessions of this host through the registry directory, other
    /// hosts of the LAN by multicast on `discovery.interface`; the session listens on
    /// every interface (`0.0.0.0:0`), so that hosts that discover it can reach it.
    #[default]
    Subnet,
    /// `"localhost"`: this host only, through the registry directory; the session listens
    /// on `127.0.0.1` (unless static peers or `transport.multicast_data` need more).
    Localhost,
    /// `"off"`: no automatic discovery; only static peers (and those that have this
    /// session as theirs). Listens on every interface.
    Off,
}

impl DiscoveryRange {
    /// Every range, in the order the error message lists them.
    pub const ALL: [DiscoveryRange; 3] = [
        DiscoveryRange::Subnet,
        DiscoveryRange::Localhost,
        DiscoveryRange::Off,
    ];

    /// Its word in TOML, `TETHER_DISCOVERY` and `--discovery`.
    pub fn name(self) -> &'static str {
        match self {
            DiscoveryRange::Subnet => "subnet",
            DiscoveryRange::Localhost => "localhost",
            DiscoveryRange::Off => "off",
        }
    }
}

impl std::str::FromStr for DiscoveryRange {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        let w = s.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|r| r.name() == w)
            .ok_or_else(|| UnknownWord::new("discovery range", s, "subnet, localhost or off"))
    }
}

impl TryFrom<String> for DiscoveryRange {
    type Error = UnknownWord;
    fn try_from(s: String) -> Result<Self, UnknownWord> {
        s.parse()
    }
}

impl std::fmt::Display for DiscoveryRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `[discovery]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// How far automatic discovery reaches (default [`DiscoveryRange::Subnet`]); it decides
    /// `registry` and `multicast` where they are not given.
    pub range: DiscoveryRange,
    /// Same-host discovery through the registry directory (`None`: as the range says, on
    /// unless it is `off`). See [`DiscoveryConfig::uses_registry`].
    pub registry: Option<bool>,
    /// The registry directory (default: see [`tether_transport::default_registry_dir`]).
    pub registry_dir: Option<PathBuf>,
    /// LAN discovery by multicast (`None`: as the range says, on with `subnet`). See
    /// [`DiscoveryConfig::uses_multicast`].
    pub multicast: Option<bool>,
    /// Multicast group.
    pub multicast_group: Ipv4Addr,
    /// Multicast base port; the domain id is added.
    pub multicast_port: u16,
    /// Interface name or IPv4 address for multicast.
    pub interface: String,
    /// Static unicast peers.
    pub peers: Vec<SocketAddr>,
    /// Announcement period in ms.
    pub announce_period_ms: u64,
    /// Our lease in ms: peers forget us after this long without hearing from us.
    pub lease_ms: u64,
    /// Most endpoints stored per remote participant; more are refused.
    pub max_endpoints_per_participant: usize,
    /// Longest string a remote participant may announce (its name; an endpoint's topic,
    /// type, each partition), in bytes: a longer one is refused.
    pub max_string_bytes: usize,
    /// Most partitions a remote endpoint may announce (0 to 16, what the wire carries).
    pub max_partitions: usize,
    /// Most bytes stored for one remote participant's announcements: its name and its
    /// endpoints' strings, with the table's overhead per endpoint and per string. An
    /// endpoint that would pass it is refused.
    pub max_peer_metadata_bytes: usize,
    /// Most participants held before they are known: heard from at an address that has
    /// not answered our challenge yet (each for at most 5 s), and in a secure realm,
    /// validated but not yet authenticated (each for at most 10 s). The oldest goes when a
    /// new one comes (`docs/wire.md#validation`).
    pub max_pending_participants: usize,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            range: DiscoveryRange::Subnet,
            registry: None,
            registry_dir: None,
            multicast: None,
            multicast_group: Ipv4Addr::new(239, 255, 0, 1),
            multicast_port: 7400,
            interface: "0.0.0.0".into(),
            peers: Vec::new(),
            announce_period_ms: 1000,
            lease_ms: 10_000,
            max_endpoints_per_participant: 1024,
            max_string_bytes: tether_core::DEFAULT_MAX_STRING_BYTES,
            max_partitions: tether_core::DEFAULT_MAX_PARTITIONS,
            max_peer_metadata_bytes: tether_core::DEFAULT_MAX_PEER_METADATA_BYTES,
            max_pending_participants: 64,
        }
    }
}

impl DiscoveryConfig {
    /// Sets the range and forgets `registry` and `multicast` given for the earlier one: what
    /// `TETHER_DISCOVERY` and `--discovery` do to a file's settings.
    pub fn set_range(&mut self, range: DiscoveryRange) {
        self.range = range;
        self.registry = None;
        self.multicast = None;
    }

    /// The registry directory: `registry_dir`, else the one shared by every user of the
    /// host ([`tether_transport::default_registry_dir`], `/tmp/tether`). Each domain has a
    /// directory in it, `domain-N`, whose entries are `PID-PARTICIPANT.addr`.
    pub fn registry_root(&self) -> PathBuf {
        self.registry_dir
            .clone()
            .unwrap_or_else(tether_transport::default_registry_dir)
    }

    /// Whether the session uses the registry directory: `registry` if given, else unless
    /// the range is `off`.
    pub fn uses_registry(&self) -> bool {
        self.registry.unwrap_or(self.range != DiscoveryRange::Off)
    }

    /// Whether the session discovers and announces by multicast: `multicast` if given,
    /// else with range `subnet`.
    pub fn uses_multicast(&self) -> bool {
        self.multicast
            .unwrap_or(self.range == DiscoveryRange::Subnet)
    }
}

/// `[transport]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TransportConfig {
    /// Address to bind.
    pub listen: Option<SocketAddr>,
    /// Largest datagram: the size for peers on this host, and the most path probing may
    /// raise a path to another host to.
    pub max_datagram: usize,
    /// MTU assumed of links to other hosts (datagrams to them start at this less the IP and
    /// UDP headers).
    pub path_mtu: usize,
    /// Probe each path to another host for its datagram size (DPLPMTUD).
    pub probe_paths: bool,
    /// Kernel receive buffer.
    pub recv_buffer: usize,
    /// Kernel send buffer.
    pub send_buffer: usize,
    /// Busy-poll receive mode.
    pub busy_poll: bool,
    /// Largest sample accepted (bytes); larger than one datagram means fragmented.
    pub max_sample_size: usize,
    /// Most bytes each reader holds in samples being reassembled, from all its writers:
    /// what their fragments brought (never what a first fragment claims), plus 64 bytes for
    /// each fragment kept aside because it overtook a missing one.
    pub max_reassembly_bytes: usize,
    /// One remote writer's share of `max_reassembly_bytes` (the smaller applies): its
    /// further fragments are refused until some of its samples complete or expire. Keep it
    /// above `max_sample_size` (by a sixteenth, for fragments kept aside), and
    /// `max_reassembly_bytes` at twice it, so that one writer cannot fill a reader.
    pub max_reassembly_bytes_per_writer: usize,
    /// An incomplete sample with no new fragment for this long is dropped (ms).
    pub reassembly_timeout_ms: u64,
    /// Readers of this session also take data sent to the discovery multicast group (port +
    /// domain, on `discovery.interface`), and say so in their announcement: a writer
    /// elsewhere then sends each sample once to the group for all such participants,
    /// instead of once to each. Works with or without multicast discovery.
    pub multicast_data: bool,
    /// How the socket batches its system calls.
    pub batch_io: BatchIoMode,
    /// Set don't-fragment on every datagram (the default): one larger than the interface's
    /// MTU is refused and counted ([`SessionStats::too_large`](crate::SessionStats::too_large)),
    /// and the engine lowers that path, rather than it leaving as IP fragments (which all
    /// must arrive). Path probing needs it: off, paths stay at `path_mtu`'s size.
    pub dont_fragment: bool,
    /// Congestion control on paths to other hosts (`tether_core::congestion`): a reliable
    /// keep-all or asynchronous reliable writer keeps in flight about twice what the path
    /// delivers in a round trip, measured by probes; random loss does not shrink it, loss
    /// with a growing queue does. Off: writers send as fast as samples come (the history
    /// and flow controllers still bound them).
    pub congestion_control: bool,
}

/// `transport.batch_io`: how the socket batches its system calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchIoMode {
    /// `sendmmsg`/`recvmmsg`, with UDP GSO and GRO where the kernel has them (default).
    #[default]
    Offload,
    /// `sendmmsg`/`recvmmsg` without GSO or GRO.
    Mmsg,
    /// One system call per datagram.
    Single,
}

impl From<BatchIoMode> for tether_transport::BatchIo {
    fn from(m: BatchIoMode) -> Self {
        match m {
            BatchIoMode::Offload => tether_transport::BatchIo::Offload,
            BatchIoMode::Mmsg => tether_transport::BatchIo::Mmsg,
            BatchIoMode::Single => tether_transport::BatchIo::Single,
        }
    }
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            listen: None,
            max_datagram: 65_000,
            path_mtu: 1500,
            probe_paths: true,
            recv_buffer: 16 << 20,
            send_buffer: 4 << 20,
            busy_poll: false,
            max_sample_size: tether_core::DEFAULT_MAX_SAMPLE_SIZE,
            max_reassembly_bytes: tether_core::DEFAULT_MAX_REASSEMBLY_BYTES,
            max_reassembly_bytes_per_writer: tether_core::DEFAULT_MAX_REASSEMBLY_BYTES_PER_WRITER,
            reassembly_timeout_ms: 10_000,
            multicast_data: false,
            batch_io: BatchIoMode::Offload,
            dont_fragment: true,
            congestion_control: true,
        }
    }
}

/// `[reliability]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ReliabilityConfig {
    /// Heartbeat period in ms.
    pub heartbeat_period_ms: u64,
    /// How long `put` waits for room in a full keep-all history (longer if only readers
    /// that went silent hold it: until they are marked inactive).
    pub max_blocking_time_ms: u64,
    /// A reliable reader of a keep-all writer that owes acknowledgements and sends none
    /// for this long is marked inactive: the writer stops keeping its history for it, so it
    /// cannot hold up the other readers. Publishers whose QoS says otherwise
    /// (`Qos::inactive_after`) keep theirs. `0` or `"strict"`: DDS's strict behaviour (a
    /// stalled reader blocks the writer until its lease ends).
    pub inactive_reader_ms: InactiveAfter,
}

/// `reliability.inactive_reader_ms`: milliseconds, or the word `strict` (as 0).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum InactiveAfter {
    /// This many ms (0: strict).
    Ms(u64),
    /// The word `strict`.
    Word(StrictWord),
}

/// The word `strict`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StrictWord {
    /// `"strict"`.
    Strict,
}

impl InactiveAfter {
    /// The engine's setting: `None` for strict.
    pub fn duration(self) -> Option<Duration> {
        match self {
            InactiveAfter::Ms(0) | InactiveAfter::Word(StrictWord::Strict) => None,
            InactiveAfter::Ms(ms) => Some(Duration::from_millis(ms)),
        }
    }
}

impl Default for ReliabilityConfig {
    fn default() -> Self {
        ReliabilityConfig {
            heartbeat_period_ms: 100,
            max_blocking_time_ms: DEFAULT_MAX_BLOCKING_MS,
            inactive_reader_ms: InactiveAfter::Ms(
                tether_core::DEFAULT_INACTIVE_AFTER.as_millis() as u64
            ),
        }
    }
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

    /// The file named by `TETHER_CONFIG` (or the defaults if it is unset), then the
    /// environment's overrides ([`Config::apply_env`]).
    pub fn from_env() -> Result<Self, ConfigError> {
        let mut c = match std::env::var_os("TETHER_CONFIG") {
            Some(p) if !p.is_empty() => Self::from_file(p)?,
            _ => Self::default(),
        };
        c.apply_env()?;
        Ok(c)
    }

    /// Applies `TETHER_DOMAIN`, `TETHER_DISCOVERY`, `TETHER_PEERS` and `TETHER_ROUTERS`
    /// (each replaces what
    /// it names; an empty or unset variable changes nothing).
    pub fn apply_env(&mut self) -> Result<(), ConfigError> {
        self.apply_vars(|k| std::env::var(k).ok())
    }

    /// [`Config::apply_env`] with the variables `get` gives (`None`: unset). A program
    /// whose own flags override some of them gives `None` for those, so that a flag wins
    /// over a variable, even one that would not parse.
    pub fn apply_vars(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let var = |k: &'static str| get(k).filter(|v| !v.trim().is_empty()).map(|v| (k, v));
        let bad = |var: &'static str, value: &str, reason: String| ConfigError::Env {
            var,
            value: value.to_string(),
            reason,
        };
        if let Some((k, v)) = var("TETHER_DOMAIN") {
            self.domain = v
                .trim()
                .parse()
                .map_err(|_| bad(k, &v, "a domain id is a number from 0 to 65535".into()))?;
        }
        if let Some((k, v)) = var("TETHER_DISCOVERY") {
            let r = v
                .parse()
                .map_err(|e: UnknownWord| bad(k, &v, e.to_string()))?;
            self.discovery.set_range(r);
        }
        if let Some((k, v)) = var("TETHER_ROUTERS") {
            self.routers.connect = v
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|r| parse_router(r).map(|_| r.to_string()))
                .collect::<Result<_, _>>()
                .map_err(|e| bad(k, &v, e))?;
        }
        if let Some((k, v)) = var("TETHER_PEERS") {
            self.discovery.peers = v
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(Self::parse_peer)
                .collect::<Result<_, _>>()
                .map_err(|e| bad(k, &v, e))?;
        }
        Ok(())
    }

    /// A static peer as `--peer` and `TETHER_PEERS` take it: `IP:PORT`, `[IPv6]:PORT` or
    /// `HOST:PORT` (resolved now; IPv4 preferred). The port is the peer's
    /// `transport.listen` port: give it a fixed one there (`--listen 0.0.0.0:7411`).
    pub fn parse_peer(s: &str) -> Result<SocketAddr, String> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(a);
        }
        if !s
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            return Err(format!(
                "peer '{s}' is not HOST:PORT (the port the peer listens on, e.g. 192.0.2.10:7411)"
            ));
        }
        let addrs: Vec<SocketAddr> = s
            .to_socket_addrs()
            .map_err(|e| format!("peer '{s}': cannot resolve: {e}"))?
            .collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| format!("peer '{s}': the name resolves to no address"))
    }

    /// An address to listen on as `--listen` takes it: `IP:PORT`, a port alone (every
    /// interface: `7411` is `0.0.0.0:7411`) or an address alone (any port).
    pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
        let s = s.trim();
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(a);
        }
        if let Ok(p) = s.parse::<u16>() {
            return Ok(SocketAddr::from((Ipv4Addr::UNSPECIFIED, p)));
        }
        if let Ok(ip) = s.parse::<std::net::IpAddr>() {
            return Ok(SocketAddr::new(ip, 0));
        }
        Err(format!(
            "'{s}' is not an address to listen on (IP:PORT, a port, or an IP; e.g. 0.0.0.0:7411)"
        ))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let t = &self.transport;
        let d = &self.discovery;
        let r = &self.reliability;
        for c in &self.routers.connect {
            parse_router(c).map_err(|e| ConfigError::invalid("routers.connect", e))?;
        }
        if !self.routers.connect.is_empty() && self.security.keys.is_none() {
            return Err(ConfigError::invalid(
                "routers.connect",
                "routers take sessions of a realm only (they check each session's \
                 credential): set security.keys (a bundle from `tether keys issue`) or --keys",
            ));
        }
        if !(1024..=65_000).contains(&self.routers.datagram) {
            return Err(ConfigError::invalid(
                "routers.datagram",
                format!("{} is not 1024 to 65000", self.routers.datagram),
            ));
        }
        for (field, value, allowed) in [
            (
                "transport.max_datagram",
                t.max_datagram as u64,
                1024..=65_507,
            ),
            ("transport.path_mtu", t.path_mtu as u64, 1280..=65_535),
            (
                "discovery.max_pending_participants",
                d.max_pending_participants as u64,
                1..=65_536,
            ),
            (
                "transport.max_sample_size",
                t.max_sample_size as u64,
                1..=u64::from(u32::MAX),
            ),
            (
                "discovery.max_string_bytes",
                d.max_string_bytes as u64,
                1..=u64::from(u16::MAX),
            ),
            (
                "discovery.max_partitions",
                d.max_partitions as u64,
                0..=tether_core::DEFAULT_MAX_PARTITIONS as u64,
            ),
        ] {
            if !allowed.contains(&value) {
                return Err(ConfigError::OutOfRange {
                    field,
                    value,
                    allowed,
                });
            }
        }
        // Limits that would refuse what the rest of the configuration allows: said now,
        // rather than found as samples or peers that silently never arrive.
        for (field, value) in [
            (
                "transport.max_reassembly_bytes",
                t.max_reassembly_bytes as u64,
            ),
            (
                "transport.max_reassembly_bytes_per_writer",
                t.max_reassembly_bytes_per_writer as u64,
            ),
        ] {
            if value < t.max_sample_size as u64 {
                return Err(ConfigError::invalid(
                    field,
                    format!(
                        "{value} is below transport.max_sample_size ({}): a sample that large could never be reassembled",
                        t.max_sample_size
                    ),
                ));
            }
        }
        if d.max_endpoints_per_participant == 0 {
            return Err(ConfigError::invalid(
                "discovery.max_endpoints_per_participant",
                "0 would refuse every remote endpoint".to_string(),
            ));
        }
        let one_endpoint = 3 * d.max_string_bytes.min(256) + 1024;
        if d.max_peer_metadata_bytes < one_endpoint {
            return Err(ConfigError::invalid(
                "discovery.max_peer_metadata_bytes",
                format!(
                    "{} is below what one endpoint with strings of max_string_bytes takes (at least {one_endpoint})",
                    d.max_peer_metadata_bytes
                ),
            ));
        }
        if d.max_string_bytes < 65 {
            return Err(ConfigError::invalid(
                "discovery.max_string_bytes",
                format!(
                    "{} would refuse a topic id (65 bytes in a secure realm) and most names",
                    d.max_string_bytes
                ),
            ));
        }
        if d.announce_period_ms == 0 || d.lease_ms < 3 * d.announce_period_ms.min(1000) {
            return Err(ConfigError::invalid(
                "discovery.lease_ms",
                format!(
                    "{} must be at least 3 × min(announce_period_ms, 1000)",
                    d.lease_ms
                ),
            ));
        }
        if d.range != DiscoveryRange::Subnet && d.multicast == Some(true) {
            return Err(ConfigError::invalid(
                "discovery.multicast",
                format!(
                    "true contradicts range = \"{}\" (multicast reaches the LAN: use range = \"subnet\")",
                    d.range
                ),
            ));
        }
        if d.range == DiscoveryRange::Off && d.registry == Some(true) {
            return Err(ConfigError::invalid(
                "discovery.registry",
                "true contradicts range = \"off\" (use range = \"localhost\" for the registry alone)"
                    .to_string(),
            ));
        }
        if !d.multicast_group.is_multicast() {
            return Err(ConfigError::invalid(
                "discovery.multicast_group",
                format!("{} is not a multicast address", d.multicast_group),
            ));
        }
        self.flow_controller_specs()?;
        let sec = &self.security;
        for pattern in sec.topics.keys() {
            if !tether_crypto::valid_pattern(pattern) {
                return Err(ConfigError::invalid(
                    "security.topics",
                    format!("'{pattern}' is not a topic pattern"),
                ));
            }
        }
        // Keys may come later (`--keys`, TETHER_KEYS): a session refuses to open without
        // them (`engine.rs`), not the file.
        for (field, value) in [
            ("discovery.announce_period_ms", d.announce_period_ms),
            ("discovery.lease_ms", d.lease_ms),
            ("transport.reassembly_timeout_ms", t.reassembly_timeout_ms),
            ("reliability.heartbeat_period_ms", r.heartbeat_period_ms),
            ("reliability.max_blocking_time_ms", r.max_blocking_time_ms),
        ] {
            if !(1..=DAY_MS).contains(&value) {
                return Err(ConfigError::OutOfRange {
                    field,
                    value,
                    allowed: 1..=DAY_MS,
                });
            }
        }
        if let InactiveAfter::Ms(value) = r.inactive_reader_ms {
            if value > DAY_MS {
                return Err(ConfigError::OutOfRange {
                    field: "reliability.inactive_reader_ms",
                    value,
                    allowed: 0..=DAY_MS,
                });
            }
        }
        Ok(())
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
mod tests {
    use super::*;

    #[test]
    fn empty_is_default() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn full_example_parses() {
        let text = include_str!("config.rs")
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.trim_start_matches("//!").trim_start())
            .collect::<Vec<_>>()
            .join("\n");
        let c = Config::from_toml(&text).unwrap();
        assert_eq!(c.name, "robot1");
        assert_eq!(c.discovery.peers.len(), 1);
        let f = c.flow_controller_specs().unwrap();
        assert_eq!(f[0].0, "bulk");
        assert_eq!(f[0].1.bytes_per_second(), Some(10e6));
        assert_eq!(f[1].0, "paper");
        assert_eq!(f[1].1.bytes_per_second(), Some(10.0 * 8192.0 * 100.0));
    }

    /// The limits on what a peer may make us store are taken within what the wire allows.
    #[test]
    fn peer_limits_are_checked() {
        let c = Config::from_toml("[discovery]\nmax_partitions = 0\nmax_string_bytes = 65535\n")
            .unwrap();
        assert_eq!(
            (c.discovery.max_partitions, c.discovery.max_string_bytes),
            (0, 65535)
        );
        for (t, field) in [
            ("max_partitions = 17", "discovery.max_partitions"),
            ("max_string_bytes = 0", "discovery.max_string_bytes"),
            ("max_string_bytes = 64", "discovery.max_string_bytes"),
            ("max_string_bytes = 65536", "discovery.max_string_bytes"),
            (
                "max_endpoints_per_participant = 0",
                "discovery.max_endpoints_per_participant",
            ),
            (
                "max_peer_metadata_bytes = 10",
                "discovery.max_peer_metadata_bytes",
            ),
        ] {
            let e = Config::from_toml(&format!("[discovery]\n{t}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{e}");
        }
        // Reassembly budgets below the largest sample would refuse it silently.
        for t in [
            "max_reassembly_bytes_per_writer = 100000",
            "max_reassembly_bytes = 0",
        ] {
            let e = Config::from_toml(&format!("[transport]\nmax_sample_size = 200000\n{t}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("max_sample_size"), "{e}");
        }
        // Keys may come from --keys after the file: a mode without them loads.
        assert!(Config::from_toml("[security]\nmode = \"encrypt+sign\"\n").is_ok());
    }

    #[test]
    fn flow_controllers_are_checked() {
        let f = |t: &str| Config::from_toml(&format!("[flow_controllers.x]\n{t}\n"));
        assert!(f("rate = \"unlimited\"").is_ok());
        assert!(f("tokens_per_period = \"unlimited\"").is_ok());
        let r = f("rate = \"512KiB/s\"")
            .unwrap()
            .flow_controller_specs()
            .unwrap()[0]
            .1
            .bytes_per_second()
            .unwrap();
        assert!((r / (512.0 * 1024.0) - 1.0).abs() < 1e-4, "{r}");
        for (bad, says) in [
            ("rate = \"fast\"", "bad rate"),
            ("", "give rate or tokens_per_period"),
            ("rate = \"1MB/s\"\ntokens_per_period = 3", "not both"),
            (
                "tokens_per_period = 3\nbytes_per_token = 0",
                "bytes_per_token",
            ),
            ("tokens_per_period = 3\nperiod_ms = 0", "period_ms"),
            ("tokens_per_period = 3\nmax_tokens = 0", "max_tokens"),
            (
                "rate = \"10B/s\"\nbytes_per_token = 1000",
                "less than one token",
            ),
            ("tokens_per_period = \"lots\"", "line"),
            ("tokens = 3", "tokens"),
        ] {
            let e = f(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = Config::from_toml("domain = 1\n\n[discovery]\nmulticastt = true\n").unwrap_err();
        let m = e.to_string();
        assert!(m.contains("multicastt"), "{m}");
        assert!(m.contains("line 4"), "{m}");
    }

    #[test]
    fn wrong_type_names_key_and_line() {
        let e = Config::from_toml("name = \"x\"\ndomain = \"zero\"\n").unwrap_err();
        let m = e.to_string();
        assert!(m.contains("line 2"), "{m}");
        assert!(m.contains("domain") || m.contains("invalid type"), "{m}");
        let e = Config::from_toml("[transport]\nbusy_poll = 3\n").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }

    #[test]
    fn security_words_are_typed() {
        let c = Config::from_toml(
            "[security]\nkeys = \"k\"\nmode = \"encrypt+sign\"\nsuite = \"aes256-gcm\"\n\
             [security.topics]\n\"/a/**\" = \"sign\"\n\"/b\" = \"off\"\n",
        )
        .unwrap();
        assert_eq!(c.security.mode, Some(SecurityMode::EncryptSign));
        assert_eq!(c.security.suite, SuiteChoice::Aes256Gcm);
        assert_eq!(c.security.topics["/a/**"], SecurityMode::Sign);
        assert_eq!(c.security.topics["/b"], SecurityMode::Off);
        assert_eq!(Config::default().security.suite, SuiteChoice::Auto);
        for m in SecurityMode::ALL {
            assert_eq!(m.name().parse::<SecurityMode>(), Ok(m));
        }
        for s in SuiteChoice::ALL {
            assert_eq!(s.name().parse::<SuiteChoice>(), Ok(s));
        }
        for (text, says) in [
            (
                "[security]\nmode = \"sometimes\"\n",
                "unknown mode 'sometimes' (expected off, encrypt, sign or encrypt+sign)",
            ),
            (
                "[security]\nkeys = \"k\"\nsuite = \"des\"\n",
                "unknown suite 'des' (expected auto, aes128-gcm, aes256-gcm or chacha20-poly1305)",
            ),
            (
                "[security]\nkeys = \"k\"\n[security.topics]\n\"/a\" = \"loud\"\n",
                "unknown mode 'loud'",
            ),
            ("[security]\nmode = 3\n", "line 2"),
        ] {
            let e = Config::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(e.contains("line"), "{text:?}: {e}");
        }
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(Config::from_toml("[transport]\nmax_datagram = 10\n").is_err());
        assert!(Config::from_toml("[discovery]\nmulticast_group = \"10.0.0.1\"\n").is_err());
        assert!(Config::from_toml("[transport]\nmulticast_data = true\n").is_ok());
        assert!(
            Config::from_toml(
                "[transport]\nmulticast_data = true\n[discovery]\nmulticast = true\n"
            )
            .is_ok()
        );
        assert!(Config::from_toml("[discovery]\nlease_ms = 1\n").is_err());
        let e = Config::from_toml("[reliability]\nheartbeat_period_ms = 18446744073709551615\n")
            .unwrap_err();
        assert!(e.to_string().contains("heartbeat_period_ms"), "{e}");
        assert!(Config::from_toml("[reliability]\nmax_blocking_time_ms = 0\n").is_err());
    }

    /// The range decides the registry, multicast and the address listened on; explicit keys
    /// win unless they contradict it.
    #[test]
    fn discovery_ranges() {
        let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let c = Config::default();
        assert_eq!(c.discovery.range, DiscoveryRange::Subnet);
        assert!(c.discovery.uses_registry() && c.discovery.uses_multicast());
        assert_eq!(c.listen_addr(), any, "reachable from the LAN by default");
        let c = Config::from_toml("[discovery]\nrange = \"localhost\"\n").unwrap();
        assert!(c.discovery.uses_registry() && !c.discovery.uses_multicast());
        assert_eq!(c.listen_addr(), lo);
        let c =
            Config::from_toml("[discovery]\nrange = \"localhost\"\npeers = [\"192.0.2.1:7411\"]\n")
                .unwrap();
        assert_eq!(c.listen_addr(), any, "static peers elsewhere must reach it");
        let c = Config::from_toml("[discovery]\nrange = \"OFF\"\n").unwrap();
        assert!(!c.discovery.uses_registry() && !c.discovery.uses_multicast());
        assert_eq!(c.listen_addr(), any);
        let c = Config::from_toml("[discovery]\nmulticast = false\n").unwrap();
        assert!(c.discovery.uses_registry() && !c.discovery.uses_multicast());
        let c = Config::from_toml("[transport]\nlisten = \"10.0.0.1:7411\"\n").unwrap();
        assert_eq!(c.listen_addr(), "10.0.0.1:7411".parse().unwrap());
        for (text, says) in [
            (
                "range = \"localhost\"\nmulticast = true",
                "discovery.multicast: true contradicts range = \"localhost\"",
            ),
            ("range = \"off\"\nregistry = true", "discovery.registry"),
            (
                "range = \"lan\"",
                "unknown discovery range 'lan' (expected subnet, localhost or off)",
            ),
        ] {
            let e = Config::from_toml(&format!("[discovery]\n{text}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    /// The environment overrides the file; a range from it replaces the file's registry and
    /// multicast keys; bad values are errors naming the variable.
    #[test]
    fn environment_overrides() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let mut c = Config::from_toml(
            "domain = 3\n[discovery]\nmulticast = true\npeers = [\"192.0.2.9:1\"]\n",
        )
        .unwrap();
        c.apply_vars(vars(&[
            ("TETHER_DOMAIN", " 42 "),
            ("TETHER_DISCOVERY", "localhost"),
            ("TETHER_PEERS", "192.0.2.10:7411, 127.0.0.1:7412,"),
        ]))
        .unwrap();
        assert_eq!(c.domain, 42);
        assert_eq!(c.discovery.range, DiscoveryRange::Localhost);
        assert!(
            !c.discovery.uses_multicast(),
            "the file's multicast = true is replaced"
        );
        assert_eq!(
            c.discovery.peers,
            vec![
                "192.0.2.10:7411".parse().unwrap(),
                "127.0.0.1:7412".parse().unwrap()
            ]
        );
        // Empty variables change nothing.
        let before = c.clone();
        c.apply_vars(vars(&[("TETHER_DOMAIN", ""), ("TETHER_PEERS", " ")]))
            .unwrap();
        assert_eq!(c, before);
        for (pairs, says) in [
            (
                &[("TETHER_DOMAIN", "seven")][..],
                "invalid environment variable TETHER_DOMAIN=\"seven\": a domain id",
            ),
            (&[("TETHER_DOMAIN", "70000")][..], "TETHER_DOMAIN"),
            (
                &[("TETHER_DISCOVERY", "lan")][..],
                "TETHER_DISCOVERY=\"lan\": unknown discovery range 'lan'",
            ),
            (
                &[("TETHER_PEERS", "192.0.2.10")][..],
                "TETHER_PEERS=\"192.0.2.10\": peer '192.0.2.10' is not HOST:PORT",
            ),
        ] {
            let pairs: &'static [(&'static str, &'static str)] = pairs;
            let e = Config::default()
                .apply_vars(vars(pairs))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{pairs:?}: {e}");
        }
    }

    #[test]
    fn peers_and_listen_addresses_parse() {
        assert_eq!(
            Config::parse_peer("localhost:7411").unwrap(),
            "127.0.0.1:7411".parse().unwrap()
        );
        assert_eq!(
            Config::parse_peer("[::1]:9").unwrap(),
            "[::1]:9".parse().unwrap()
        );
        assert!(Config::parse_peer(":7411").is_err());
        assert!(Config::parse_peer("host").is_err());
        assert_eq!(
            Config::parse_listen("7411").unwrap(),
            "0.0.0.0:7411".parse().unwrap()
        );
        assert_eq!(
            Config::parse_listen("10.0.0.5").unwrap(),
            "10.0.0.5:0".parse().unwrap()
        );
        assert!(
            Config::parse_listen("eth0")
                .unwrap_err()
                .contains("0.0.0.0:7411")
        );
    }

    #[test]
    fn batch_io_words_are_typed() {
        let c =
            Config::from_toml("[transport]\nbatch_io = \"mmsg\"\ndont_fragment = false\n").unwrap();
        assert_eq!(c.transport.batch_io, BatchIoMode::Mmsg);
        assert!(!c.transport.dont_fragment);
        let c = Config::from_toml("[transport]\nbatch_io = \"single\"\n").unwrap();
        assert_eq!(c.transport.batch_io, BatchIoMode::Single);
        assert_eq!(Config::default().transport.batch_io, BatchIoMode::Offload);
        assert!(Config::default().transport.dont_fragment);
        let e = Config::from_toml("[transport]\nbatch_io = \"gso\"\n").unwrap_err();
        assert!(e.to_string().contains("batch_io"), "{e}");
    }

    /// Relative paths in a file are taken from the file's directory; absolute ones and
    /// paths given in TOML text (no file) stay as they are.
    #[test]
    fn relative_paths_follow_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("robot");
        std::fs::create_dir(&sub).unwrap();
        let file = sub.join("tether.toml");
        let text = "[discovery]\nregistry_dir = \"reg\"\n[security]\nkeys = \"realm/r1.key\"\nrevocations = \"/etc/revoked.toml\"\n";
        std::fs::write(&file, text).unwrap();
        let c = Config::from_file(&file).unwrap();
        assert_eq!(c.security.keys, Some(sub.join("realm/r1.key")));
        assert_eq!(
            c.security.revocations,
            Some(PathBuf::from("/etc/revoked.toml"))
        );
        assert_eq!(c.discovery.registry_dir, Some(sub.join("reg")));
        let c = Config::from_toml(text).unwrap();
        assert_eq!(c.security.keys, Some(PathBuf::from("realm/r1.key")));
    }
}
