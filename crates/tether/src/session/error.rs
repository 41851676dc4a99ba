//! The errors of a session's operations: opening (a session or an endpoint), putting and
//! receiving.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The unicast socket could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// The registry directory could not be used.
    #[error("cannot use registry directory {dir}: {source}")]
    Registry {
        /// The directory.
        dir: std::path::PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Multicast discovery could not start.
    #[error("cannot join multicast group {group}:{port} on interface {interface}: {source}")]
    Multicast {
        /// The group.
        group: std::net::Ipv4Addr,
        /// The port.
        port: u16,
        /// The interface as configured.
        interface: String,
        /// The cause.
        source: io::Error,
    },
    /// A thread could not be spawned.
    #[error("cannot start session thread: {0}")]
    Thread(io::Error),
    /// The configuration is unusable (e.g. a bad flow controller).
    #[error(transparent)]
    Config(#[from] crate::ConfigError),
    /// The session's keys could not be used.
    #[error("security")]
    Keys(#[from] crate::keys::KeyError),
    /// The session's credential is not valid now.
    #[error("security: our own credential is not usable: {0}")]
    Credential(tether_crypto::CredentialError),
    /// The session's credential does not grant this endpoint.
    #[error(
        "our credential ({name}) grants no {kind} on {topic}; ask the realm for a credential that does (tether keys issue … --{flag} PATTERN)"
    )]
    NotGranted {
        /// Whose credential.
        name: String,
        /// `publish` or `subscribe`.
        kind: &'static str,
        /// The `tether keys issue` flag that grants it.
        flag: &'static str,
        /// The topic.
        topic: String,
    },
    /// The router links (`[routers] connect`) could not be set up.
    #[error("router links: {0}")]
    Routers(String),
    /// A publisher's QoS names a flow controller the session does not have.
    #[error(
        "unknown flow controller '{0}': define it under [flow_controllers.{0}] or with Session::set_flow_controller"
    )]
    UnknownFlowController(String),
}

/// Why a `put` failed. Every variant hands the payload back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PutError {
    /// A keep-all writer stayed full for the whole `max_blocking_time`: some reliable reader
    /// is too slow. Nothing was sent; nothing was silently dropped.
    #[error(
        "put timed out after {:.2} s: the writer's history is full of samples a reliable reader has not acknowledged", waited.as_secs_f64()
    )]
    Timeout {
        /// The payload.
        payload: Bytes,
        /// How long it waited.
        waited: Duration,
    },
    /// A keep-all writer's paths to its reliable readers stayed full for the whole
    /// `max_blocking_time`: they deliver less than it publishes, or a reader's host stopped
    /// answering (it is let go of once inactive). Nothing was sent; nothing was dropped.
    #[error(
        "put timed out after {:.2} s: the paths to the writer's reliable readers took no more (they deliver less than it publishes, or a reader's host stopped answering)", waited.as_secs_f64()
    )]
    PathFull {
        /// The payload.
        payload: Bytes,
        /// How long it waited.
        waited: Duration,
    },
    /// The sample is larger than `transport.max_sample_size`.
    #[error("sample of {} bytes exceeds max_sample_size ({max} bytes)", payload.len())]
    TooLarge {
        /// The payload.
        payload: Bytes,
        /// Largest accepted.
        max: usize,
    },
    /// The session is closed.
    #[error("session closed")]
    Closed(Bytes),
    /// [`Publisher::put_unless`](crate::Publisher::put_unless) was told to stop while it
    /// waited for room. Nothing was sent.
    #[error("put stopped while waiting for room in the writer's history")]
    Stopped {
        /// The payload.
        payload: Bytes,
        /// How long it waited.
        waited: Duration,
    },
}

impl PutError {
    /// The payload that was not sent.
    pub fn into_payload(self) -> Bytes {
        match self {
            PutError::Timeout { payload, .. }
            | PutError::PathFull { payload, .. }
            | PutError::TooLarge { payload, .. }
            | PutError::Stopped { payload, .. }
            | PutError::Closed(payload) => payload,
        }
    }
}

/// Why a receive returned no sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// Nothing arrived in time.
    #[error("timed out")]
    Timeout,
    /// The session is closed.
    #[error("session closed")]
    Closed,
    /// This subscriber delivers through its callback.
    #[error("subscriber delivers through a callback")]
    CallbackMode,
}
