//! `[discovery]`: how far automatic discovery reaches, static peers, and what a peer may
//! make this session store.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::Deserialize;

use super::UnknownWord;

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
