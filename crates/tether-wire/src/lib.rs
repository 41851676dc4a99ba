//! tether's wire format, version 1.
//!
//! This crate turns bytes into validated representations and back. It does no I/O, keeps no
//! state and never allocates while decoding: every representation borrows from the datagram
//! it was parsed from, and every length and count read from the wire is checked against the
//! bytes actually present before it is used. The normative specification is `docs/wire.md`;
//! comments starting with `//=` cite it.
//!
//! A datagram is a fixed [`Header`] followed by one or more submessages, each
//! `kind | flags | length | body`:
//!
//! ```text
//!  0               4       5       6               8                              16
//! +-------+-------+-------+-------+-------+-------+-------------------------------+
//! |     magic "TTHR"              |  ver  | flags |   domain id   | participant id (u64 LE) |
//! +-------------------------------+-------+-------+---------------+---------------+
//! | kind  | flags |  body length  |  body ...                                     |
//! +-------+-------+---------------+-----------------------------------------------+
//! ```
//!
//! Non-goals: this crate does not decide what a message means for the protocol (that is
//! `tether-core`), and it does not encrypt (that is `tether-crypto`).

#![forbid(unsafe_code)]

mod error;
mod repr;
mod sealed;
mod view;

pub use error::Error;
pub use repr::{
    AckNackRepr, AuthRepr, BATCH_ENTRY_OVERHEAD, BATCH_FIXED_LEN, BatchRepr, BatchSigRepr,
    DATA_FRAG_FIXED_LEN, DataFragRepr, DataRepr, Durability, EndpointKind, EndpointRepr, GapRepr,
    HEARTBEAT_FINAL, HeartbeatRepr, HistoryKind, KeyRepr, KeyRequestRepr, Liveliness,
    MAX_CREDENTIAL_LEN, NackFragRepr, ParticipantRepr, QosRepr, Reliability, SEALED_FIXED_LEN,
    SealedRepr, StrList, Submessage, SubmessageKind, auth_signed_bytes, batch_entry_head,
    push_batch_entry,
};
pub use sealed::{SEALED_PREFIX_LEN, encode_sealed_prefix};
pub use view::{DATA_HEAD_MAX, Datagram, DatagramBuilder, Submessages, encode_data_head};

/// The four bytes every tether datagram starts with.
pub const MAGIC: [u8; 4] = *b"TTHR";
/// The wire format version this crate reads and writes.
pub const VERSION: u8 = 1;
/// Length of the datagram header in bytes.
pub const HEADER_LEN: usize = 16;
/// Length of a submessage header (kind, flags, body length) in bytes.
pub const SUBMESSAGE_HEADER_LEN: usize = 4;
/// Largest body a submessage can carry (its length field is 16 bits).
pub const MAX_BODY_LEN: usize = u16::MAX as usize;
/// Most bits an ACKNACK bitmap may carry.
pub const MAX_ACKNACK_BITS: u16 = 256;
/// Most partitions one endpoint may name.
pub const MAX_PARTITIONS: usize = 16;
/// Fixed part of a DATA body before the payload.
pub const DATA_FIXED_LEN: usize = 24;

/// Identifies a participant (one session) inside a domain. Never zero on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParticipantId(pub u64);

/// Identifies an endpoint (writer or reader) inside its participant. Zero means "every
/// matched endpoint" where a message addresses readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityId(pub u32);

impl EntityId {
    /// The wildcard: every matched reader of the destination participant.
    pub const ALL: EntityId = EntityId(0);
}

/// The fixed header at the start of every datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The domain the sender belongs to; receivers drop datagrams of other domains.
    pub domain: u16,
    /// The sending participant.
    pub participant: ParticipantId,
}

#[cfg(test)]
mod tests;
