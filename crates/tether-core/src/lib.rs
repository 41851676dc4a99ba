//! tether-core: the protocol engine of tether, **sans-IO**.
//!
//! A [`Participant`] is one session's engine. It turns inputs — received datagrams, the
//! passage of time, application writes and takes — into outputs: datagrams to send
//! ([`Transmit`]), [`Event`]s, and the next instant it wants to be woken at. It contains
//! discovery and matching (topic, type, partitions, QoS compatibility), the QoS policies
//! (reliability, history and resource limits, durability, deadline, lifespan, liveliness),
//! and reliability (heartbeat, ack-nack, retransmission, gap).
//!
//! It contains no networking code, reads no clock and spawns no thread: `now` is always a
//! parameter, and the same inputs give the same outputs. The `tether` crate drives it over
//! real sockets; `tether-testkit` drives it over a simulated, lossy network in virtual time.
//!
//! Polling order for a driver, after every input:
//! 1. send every [`Participant::poll_transmit`] (and, from a sender thread or here, every
//!    [`Participant::poll_scheduled`]: asynchronous writers' datagrams, by priority and
//!    flow controller),
//! 2. handle every [`Participant::poll_event`] (take samples on `DataAvailable`),
//! 3. sleep until [`Participant::poll_timeout`] or the next datagram, then call
//!    [`Participant::handle_timeout`] or [`Participant::handle_datagram`].
//!
//! One module per concern (docs/architecture.md draws the map): `participant` owns the parts
//! and dispatches inputs; `discovery`, `matching`, `writer/` (history → protect → batch →
//! fragment → schedule → transmit), `reader/` (cache, order, reassembly), `reliability`
//! (heartbeat, ACKNACK, GAP, NACK_FRAG) and `security/` (authentication, sender keys, the
//! gate every received datagram passes, and the protect step).

#![forbid(unsafe_code)]

pub mod congestion;
mod discovery;
mod endpoint;
mod error;
mod event;
mod limits;
mod matching;
mod participant;
pub mod path;
pub mod qos;
mod reader;
mod reliability;
pub mod route;
mod security;
mod transmit;
mod writer;

pub use discovery::pending::{
    AMPLIFICATION_FACTOR, MAX_IDS_PER_ADDRESS, NO_AUTH_AFTER, PENDING_LIFETIME, UNVERIFIED_LIFETIME,
};
pub use discovery::{Described, RemoteEndpoint};
pub use endpoint::EndpointInfo;
pub use error::{CreateError, WriteError};
pub use event::{
    AccessDenial, AuthFailure, DeadlineSide, Departure, Event, Guid, IncompatibleQos, Limit,
    LossReason, RevocationRefusal, Right, Sample, Shortfall, Stats,
};
pub use participant::{
    Config, DATA_OVERHEAD, DEFAULT_INACTIVE_AFTER, DEFAULT_MAX_PARTITIONS,
    DEFAULT_MAX_PEER_METADATA_BYTES, DEFAULT_MAX_REASSEMBLY_BYTES,
    DEFAULT_MAX_REASSEMBLY_BYTES_PER_WRITER, DEFAULT_MAX_SAMPLE_SIZE, DEFAULT_MAX_STRING_BYTES,
    MAX_LEASE, Participant,
};
pub use qos::{AsyncPublish, Batching, FlowName, History, Inactivity, Qos, QosPolicy};
pub use route::RouteLink;
pub use security::keys::{HELD_FOR_KEY_BYTES, HELD_FOR_KEY_TIME, KEPT_EPOCHS};
pub use security::{Protection, Security};
pub use tether_wire::{
    Durability, Encoding, EndpointKind, EntityId, ParticipantId, ProtectionMode, RefusalReason,
    Reliability, UnknownEncoding,
};
pub use transmit::{Head, Tail, Transmit};
pub use writer::flow::{
    FlowController, Pacer, Priority, RateError, UnknownPriority, format_rate, parse_rate,
};
