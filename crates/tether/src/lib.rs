//! tether: secure publish/subscribe for robots.
//!
//! A [`Session`] joins a domain; [`Publisher`]s and [`Subscriber`]s on it exchange samples
//! with every matching endpoint of every session in the domain — processes on this host
//! (found through a registry directory), hosts on the LAN (UDP multicast discovery) and
//! static peers — with DDS-grade [`Qos`]: reliability, history and resource limits,
//! durability, deadline, lifespan, liveliness and partitions.
//!
//! ```no_run
//! use std::time::Duration;
//! use tether::{Config, Qos, Session};
//!
//! let session = Session::open(Config::from_env()?)?;
//! let _sub = session.subscriber_with_callback("/chatter", Qos::default(), |s| {
//!     println!("{}", String::from_utf8_lossy(&s.payload));
//! })?;
//! let publisher = session.publisher("/chatter", Qos::default().keep_last(5))?;
//! publisher.put(&b"hello"[..])?;
//! std::thread::sleep(Duration::from_millis(100));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The protocol logic lives in `tether-core` (sans-IO) and the sockets in
//! `tether-transport`; this crate is the driver that joins them, and the configuration.

mod config;
pub mod keys;
mod session;

pub use config::{
    BatchIoMode, Config, ConfigError, DEFAULT_LINK_IDLE_MS, DiscoveryConfig, DiscoveryRange,
    FlowControllerConfig, InactiveAfter, MIN_LINK_IDLE_MS, ReliabilityConfig, RoutersConfig,
    SecurityConfig, SecurityMode, StrictWord, SuiteChoice, TokenCount, TransportConfig,
    UnknownWord, UnlimitedWord, parse_router,
};
pub use session::{
    DiscoveredEndpoint, OpenError, Publisher, PutError, RecvError, Session, SessionStats,
    Subscriber, Topic, event_logged, kind_str,
};
pub use tether_core::congestion::PathStats;
pub use tether_core::{
    AccessDenial, AuthFailure, Batching, DeadlineSide, Departure, Described, Durability, Encoding,
    EndpointKind, EntityId, Event, FlowController, Guid, History, Inactivity, IncompatibleQos,
    Limit, LossReason, ParticipantId, Priority, ProtectionMode, Qos, QosPolicy, RateError,
    RefusalReason, Reliability, RemoteEndpoint, RevocationRefusal, Sample, Shortfall, Stats,
    UnknownEncoding, UnknownPriority, format_rate, parse_rate,
};
pub use tether_transport::text::printable;
