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
//! Besides datagrams, it lays out and parses the other byte strings `docs/wire.md` specifies:
//! the protected sample and what its seal and signatures bind ([`ProtectedSample`]), the
//! credential's and revocation list's binary forms ([`CredentialRepr`],
//! [`RevocationListRepr`]), and the key-distribution strings ([`WrappedKeyRepr`],
//! [`key_wrap_context`]). All parsing goes through one bounds-checked reader, [`Cursor`].
//!
//! Non-goals: this crate does not decide what a message means for the protocol (that is
//! `tether-core`), and it does not encrypt (that is `tether-crypto`).

#![forbid(unsafe_code)]

mod credential;
mod cursor;
mod error;
mod keys;
mod repr;
mod sample;
mod view;

pub use credential::{
    CREDENTIAL_MAGIC, CREDENTIAL_MAGIC_V1, CredentialRepr, MAX_NAME_LEN, MAX_PATTERN_LEN,
    MAX_PATTERNS, MAX_REVOKED, PatternList, REVOCATION_MAGIC, RevocationListRepr, Role, SerialList,
};
pub use cursor::Cursor;
pub use error::Error;
pub use keys::{
    DESCRIPTION_OVERHEAD, WRAP_CONTEXT_LEN, WRAP_NONCE_LEN, WRAP_TAG_LEN, WrappedKeyRepr,
    description_aad, description_plaintext, key_wrap_context, pair_key_info, parse_description,
    topic_id_input,
};
pub use repr::{
    ACKNACK_START_UNKNOWN, AUTH_TAG_LEN, AckNackRepr, AuthRepr, AuthTagRepr, BATCH_ENTRY_OVERHEAD,
    BATCH_FIXED_LEN, BatchRepr, BatchSigRepr, ControlKeyRepr, DATA_FRAG_FIXED_LEN, DataFragRepr,
    DataRepr, Durability, Encoding, EndpointKind, EndpointRepr, GapRepr, HEARTBEAT_FINAL,
    HeartbeatRepr, HistoryKind, KeyRepr, KeyRequestRepr, Liveliness, MAX_CREDENTIAL_LEN,
    NackFragRepr, PROBE_ACK_LEN, PROBE_FIXED_LEN, ParticipantRepr, ProbeAckRepr, ProbeRepr,
    ProtectionMode, QosRepr, REFUSAL_LEN, RefusalReason, RefusalRepr, Reliability,
    SEALED_BATCH_FIXED_LEN, SEALED_BATCH_TAG_AT, SEALED_FIXED_LEN, SealedBatchRepr, SealedRepr,
    SkippedRepr, StrList, Submessage, SubmessageKind, UnknownEncoding, auth_signed_bytes,
    batch_entry_head, push_batch_entry, refusal_signed_bytes, sealed_batch_ciphertext,
};
pub use sample::{
    ProtectedSample, ProtectedSampleRepr, SAMPLE_TAG_LEN, SEALED_EPOCH_LEN, SIGNATURE_LEN,
    SampleBody, SampleProtection, SealedBody, batch_signed_bytes, endpoint_bytes, lay_out_plain,
    lay_out_sealed, sample_aad, sample_signed_bytes, sender_key_aad, sender_key_nonce,
    set_protection,
};
pub use view::{
    DATA_HEAD_MAX, Datagram, DatagramBuilder, Submessages, WriterStream, counts_as_received,
    encode_data_head, leading_probe_id, writer_stream,
};

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
#[cfg(test)]
mod tests_layouts;
#[cfg(test)]
mod tests_security;
