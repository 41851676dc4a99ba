//! The router's configuration, counters, route summaries and link errors.

use super::*;

/// A router's configuration: who it is and how much it may hold.
///
/// ```
/// use tether_routing::{Config, NodeId, Router};
/// let mut config = Config::new(NodeId(7), 0);
/// config.max_routes(100_000).max_links(256);
/// let router = Router::new(config);
/// assert_eq!(router.rib_len(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) node: NodeId,
    pub(crate) domain: u32,
    pub(crate) max_routes: usize,
    pub(crate) max_links: usize,
    pub(crate) max_pending_queries: usize,
    pub(crate) max_participants: usize,
    pub(crate) max_origins_per_route: usize,
    pub(crate) max_nodes: usize,
    pub(crate) query_timeout: Duration,
    pub(crate) sweep_interval: Duration,
}

impl Config {
    /// A configuration for router `node` (non-zero, unique among routers and sessions) in
    /// `domain`, with the default limits.
    pub fn new(node: NodeId, domain: u32) -> Self {
        Config {
            node,
            domain,
            max_routes: 2_000_000,
            max_links: 4_096,
            max_pending_queries: 4_096,
            max_participants: 65_536,
            max_origins_per_route: 64,
            max_nodes: 4_096,
            query_timeout: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(30),
        }
    }

    /// Most routing keys held, tombstones included (default 2,000,000). New keys past it are
    /// refused and counted ([`DropReason::RouteLimit`]).
    pub fn max_routes(&mut self, value: usize) -> &mut Self {
        self.max_routes = value;
        self
    }

    /// Most links up at once (default 4,096; at most 65,535).
    pub fn max_links(&mut self, value: usize) -> &mut Self {
        self.max_links = value.min(u16::MAX as usize);
        self
    }

    /// Most QUERYs waiting for an answer (default 4,096).
    pub fn max_pending_queries(&mut self, value: usize) -> &mut Self {
        self.max_pending_queries = value;
        self
    }

    /// Most host routes (participants) held (default 65,536).
    pub fn max_participants(&mut self, value: usize) -> &mut Self {
        self.max_participants = value;
        self
    }

    /// Most origin routers one key may have (default 64).
    pub fn max_origins_per_route(&mut self, value: usize) -> &mut Self {
        self.max_origins_per_route = value.max(1);
        self
    }

    /// Most routers in the graph (default 4,096); a LINK_STATE listing more neighbours is
    /// refused too.
    pub fn max_nodes(&mut self, value: usize) -> &mut Self {
        self.max_nodes = value.max(1);
        self
    }

    /// How long a QUERY waits for an answer before another may be sent (default 5 s).
    pub fn query_timeout(&mut self, value: Duration) -> &mut Self {
        self.query_timeout = value;
        self
    }

    /// How often tombstones and unreachable routers are swept (default 30 s). A tombstone
    /// lives between one and two intervals: long enough for every late copy of what it
    /// withdrew to arrive on reliable links.
    pub fn sweep_interval(&mut self, value: Duration) -> &mut Self {
        self.sweep_interval = value;
        self
    }
}

/// Why a frame or a datagram was dropped (counted in [`Stats::drops`]). None of these closes
/// the link: they are routing outcomes, not protocol violations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// DATA of a key with no route, or UNICAST to a participant with no host route.
    NoRoute,
    /// DATA of a key nobody beyond the sender subscribed to.
    NoSubscriber,
    /// DATA that did not come over an edge of its key's tree, or ANNOUNCE that did not come
    /// from the parent in its origin's tree (a late copy while routes converge, or an origin
    /// this router cannot reach).
    NotOnTree,
    /// DATA from a session for a key it did not advertise.
    NotPublisher,
    /// DATA, UNICAST or ANNOUNCE from a session whose `src` it did not announce.
    SpoofedSource,
    /// A frame that travelled [`MAX_HOPS`] router hops.
    HopLimit,
    /// A new routing key past [`Config::max_routes`].
    RouteLimit,
    /// A new origin of a key past [`Config::max_origins_per_route`].
    OriginLimit,
    /// A new host route past [`Config::max_participants`].
    ParticipantLimit,
    /// A new router past [`Config::max_nodes`].
    NodeLimit,
    /// A QUERY not sent: [`Config::max_pending_queries`] are waiting.
    QueryLimit,
}

impl DropReason {
    /// Every reason, in a fixed order (for metrics).
    pub const ALL: [DropReason; 11] = [
        DropReason::NoRoute,
        DropReason::NoSubscriber,
        DropReason::NotOnTree,
        DropReason::NotPublisher,
        DropReason::SpoofedSource,
        DropReason::HopLimit,
        DropReason::RouteLimit,
        DropReason::OriginLimit,
        DropReason::ParticipantLimit,
        DropReason::NodeLimit,
        DropReason::QueryLimit,
    ];

    /// A short snake_case name, for metric labels.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::NoRoute => "no_route",
            DropReason::NoSubscriber => "no_subscriber",
            DropReason::NotOnTree => "not_on_tree",
            DropReason::NotPublisher => "not_publisher",
            DropReason::SpoofedSource => "spoofed_source",
            DropReason::HopLimit => "hop_limit",
            DropReason::RouteLimit => "route_limit",
            DropReason::OriginLimit => "origin_limit",
            DropReason::ParticipantLimit => "participant_limit",
            DropReason::NodeLimit => "node_limit",
            DropReason::QueryLimit => "query_limit",
        }
    }

    pub(crate) fn index(self) -> usize {
        DropReason::ALL
            .iter()
            .position(|&r| r == self)
            .unwrap_or_default()
    }
}

/// Drops counted by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drops([u64; DropReason::ALL.len()]);

impl Drops {
    /// Drops for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason.index()]
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Every reason with its count.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|&r| (r, self.get(r)))
    }

    pub(crate) fn add(&mut self, reason: DropReason) {
        self.0[reason.index()] += 1;
    }
}

/// Counters since the router started. Gauges (routes, links, routers) are methods of
/// [`Router`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Frames handed to [`Router::handle_frame`].
    pub frames_received: u64,
    /// Frames given out by [`Router::poll_transmit`].
    pub frames_sent: u64,
    /// DATA frames received.
    pub data_received: u64,
    /// DATA copies sent (one per link per datagram).
    pub data_forwarded: u64,
    /// Datagram bytes in those copies.
    pub data_bytes_forwarded: u64,
    /// UNICAST frames sent on.
    pub unicast_forwarded: u64,
    /// ANNOUNCE copies sent.
    pub announce_forwarded: u64,
    /// Advertisements, withdrawals, host routes and link states dropped as not newer (the
    /// loop suppression at work).
    pub floods_suppressed: u64,
    /// Participant ids moved to a newer link of the same owner (a session that dialled
    /// again before its old link was seen to go).
    pub hosts_taken_over: u64,
    /// QUERY rounds sent.
    pub queries_sent: u64,
    /// QUERYs answered with at least one advertisement.
    pub queries_answered: u64,
    /// QUERY rounds that timed out.
    pub queries_expired: u64,
    /// Drops by reason.
    pub drops: Drops,
}

/// What a router holds for one key ([`Router::route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouteSummary {
    /// Origin routers advertising the key.
    pub origins: usize,
    /// Origin routers that withdrew it (tombstones not yet swept).
    pub tombstones: usize,
    /// Links subscribed to the key through this router.
    pub subscribers: usize,
    /// Links this router subscribed on, toward publishers.
    pub upstream: usize,
    /// Session links publishing the key here.
    pub publishers: usize,
}

/// Why a link was refused or should be closed. The peer's faults (`OwnNode`,
/// `WrongDomain`, `UnsupportedVersion`, `Unexpected`, `SpoofedOrigin`) mean the peer does not
/// follow the protocol; the others are the caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkError {
    /// `link_up` for a link id that is already up (caller's fault).
    AlreadyUp,
    /// A frame for a link that is not up: send nothing but HELLO first (caller's fault, or a
    /// frame that raced a `link_down`).
    NotUp,
    /// [`Config::max_links`] links are up.
    TooManyLinks,
    /// The peer claims this router's own node id (or zero).
    OwnNode,
    /// The peer is in another domain.
    WrongDomain {
        /// This router's domain.
        ours: u32,
        /// The peer's.
        theirs: u32,
    },
    /// The peer speaks another link version.
    UnsupportedVersion(u8),
    /// A frame the peer's role must not send (for example LINK_STATE from a session, or a
    /// second HELLO).
    Unexpected(FrameType),
    /// A session named an origin other than itself.
    SpoofedOrigin,
}

impl core::fmt::Display for LinkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LinkError::AlreadyUp => f.write_str("link already up"),
            LinkError::NotUp => f.write_str("frame on a link that is not up"),
            LinkError::TooManyLinks => f.write_str("too many links"),
            LinkError::OwnNode => f.write_str("peer claims this router's node id"),
            LinkError::WrongDomain { ours, theirs } => {
                write!(
                    f,
                    "peer is in domain {theirs}, this router in {ours} (a router serves one \
                     domain: its config's `domain`)"
                )
            }
            LinkError::UnsupportedVersion(v) => write!(f, "peer speaks link version {v}"),
            LinkError::Unexpected(t) => write!(f, "unexpected {t:?} frame"),
            LinkError::SpoofedOrigin => f.write_str("session named another origin"),
        }
    }
}

impl std::error::Error for LinkError {}
