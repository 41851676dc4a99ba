//! Validated representations of each submessage, parsed from and emitted to bytes.
//!
//! Parsing goes through [`Cursor`], the only code in this crate that indexes a body; it checks
//! every read against the bytes present, so a lying length can only produce an error.

mod data;
mod discovery;
mod path;
mod reliability;
mod secure;

pub use data::{
    BATCH_ENTRY_OVERHEAD, BATCH_FIXED_LEN, BatchRepr, DATA_FRAG_FIXED_LEN, DataFragRepr, DataRepr,
    batch_entry_head, push_batch_entry,
};
pub use discovery::{Encoding, EndpointRepr, ParticipantRepr, ProtectionMode, UnknownEncoding};
pub use path::{PROBE_ACK_LEN, PROBE_FIXED_LEN, ProbeAckRepr, ProbeRepr};
pub use reliability::{
    ACKNACK_START_UNKNOWN, AckNackRepr, GapRepr, HEARTBEAT_FINAL, HeartbeatRepr, NackFragRepr,
    SkippedRepr,
};
pub use secure::{
    AUTH_TAG_LEN, AuthRepr, AuthTagRepr, BatchSigRepr, ControlKeyRepr, KeyRepr, KeyRequestRepr,
    MAX_CREDENTIAL_LEN, REFUSAL_LEN, RefusalReason, RefusalRepr, SEALED_BATCH_FIXED_LEN,
    SEALED_BATCH_TAG_AT, SEALED_FIXED_LEN, SealedBatchRepr, SealedRepr, auth_signed_bytes,
    refusal_signed_bytes, sealed_batch_ciphertext,
};

use crate::{Cursor, EntityId, Error};

/// The submessage kinds of wire version 1 (`docs/wire.md` section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SubmessageKind {
    /// A participant announces itself (discovery and liveliness).
    Participant = 0x01,
    /// A participant leaves.
    ParticipantBye = 0x02,
    /// An endpoint (writer or reader) announces itself with its topic and QoS.
    Endpoint = 0x03,
    /// An endpoint is withdrawn.
    EndpointBye = 0x04,
    /// One sample.
    Data = 0x05,
    /// A writer states which sequence numbers it has.
    Heartbeat = 0x06,
    /// A reader acknowledges and requests what it misses.
    AckNack = 0x07,
    /// A writer states that sequence numbers are gone for good.
    Gap = 0x08,
    /// One fragment of a sample too large for one datagram.
    DataFrag = 0x09,
    /// A reader requests missing fragments of one sample.
    NackFrag = 0x0A,
    /// Several consecutive samples of one writer under one header.
    Batch = 0x0B,
    /// A participant's credential, challenge and answer (secure realms).
    Auth = 0x0C,
    /// A writer's sender key, wrapped for one reader (secure realms).
    Key = 0x0D,
    /// A reader asks a writer for its key of an epoch.
    KeyRequest = 0x0E,
    /// The rest of the datagram, sealed for one peer (per-destination protection).
    Sealed = 0x0F,
    /// One Ed25519 signature for the BATCH that follows (sign modes).
    BatchSig = 0x10,
    /// A padded datagram that asks to be confirmed (path-MTU probing).
    Probe = 0x11,
    /// Confirms a PROBE arrived.
    ProbeAck = 0x12,
    /// A reader requests samples beyond its ACKNACK's bitmap; acknowledges nothing.
    Nack = 0x13,
    /// The datagram's authentication tag under its sender's control key (secure realms);
    /// always the last submessage.
    AuthTag = 0x14,
    /// Consecutive samples of one writer sealed once as a whole (secure realms).
    SealedBatch = 0x15,
    /// A participant refused the addressee's credential, and says why, signed (secure
    /// realms).
    Refusal = 0x16,
    /// What a reader skipped of a writer, beside one of its ACKNACKs.
    Skipped = 0x17,
    /// How many times the sender's router links were made again, beside its PARTICIPANT.
    LinkEpoch = 0x18,
}

impl SubmessageKind {
    /// The kind for a wire byte, if this version knows it.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x01 => Self::Participant,
            0x02 => Self::ParticipantBye,
            0x03 => Self::Endpoint,
            0x04 => Self::EndpointBye,
            0x05 => Self::Data,
            0x06 => Self::Heartbeat,
            0x07 => Self::AckNack,
            0x08 => Self::Gap,
            0x09 => Self::DataFrag,
            0x0A => Self::NackFrag,
            0x0B => Self::Batch,
            0x0C => Self::Auth,
            0x0D => Self::Key,
            0x0E => Self::KeyRequest,
            0x0F => Self::Sealed,
            0x10 => Self::BatchSig,
            0x11 => Self::Probe,
            0x12 => Self::ProbeAck,
            0x13 => Self::Nack,
            0x14 => Self::AuthTag,
            0x15 => Self::SealedBatch,
            0x16 => Self::Refusal,
            0x17 => Self::Skipped,
            0x18 => Self::LinkEpoch,
            _ => return None,
        })
    }
}

/// Reliability of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reliability {
    /// Samples may be lost; never duplicated, never delivered out of order.
    BestEffort,
    /// Lost samples are repaired by retransmission.
    Reliable,
}

/// Durability of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Durability {
    /// Only samples written after a reader matched reach it.
    Volatile,
    /// A late-joining reader gets the writer's retained history.
    TransientLocal,
}

/// History kind of an endpoint; the depth travels beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HistoryKind {
    /// Keep the newest `depth` samples.
    KeepLast,
    /// Keep every sample until resource limits are reached.
    KeepAll,
}

/// Liveliness kind of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveliness {
    /// The participant asserts liveliness on behalf of all its endpoints.
    Automatic,
}

/// Kind of endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndpointKind {
    /// Publishes samples.
    Writer,
    /// Receives samples.
    Reader,
}

/// QoS fields as they travel on the wire. Durations are microseconds; `u64::MAX` is infinite.
/// Limits of zero mean unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QosRepr {
    /// Reliability.
    pub reliability: Reliability,
    /// Durability.
    pub durability: Durability,
    /// History kind.
    pub history: HistoryKind,
    /// History depth for keep-last.
    pub depth: u32,
    /// Resource limit: most samples held.
    pub max_samples: u32,
    /// Resource limit: most payload bytes held.
    pub max_bytes: u64,
    /// Deadline period in µs.
    pub deadline_us: u64,
    /// Lifespan in µs.
    pub lifespan_us: u64,
    /// Liveliness kind.
    pub liveliness: Liveliness,
    /// Liveliness lease in µs.
    pub lease_us: u64,
}

/// A list of strings: borrowed from a datagram after parsing, or from the caller to emit.
#[derive(Debug, Clone, Copy)]
pub enum StrList<'a> {
    /// As found on the wire: `count` strings, each `u16 length | UTF-8`, validated.
    Encoded {
        /// Number of strings.
        count: u8,
        /// The encoded strings.
        bytes: &'a [u8],
    },
    /// A caller's strings.
    Slice(&'a [&'a str]),
}

impl<'a> StrList<'a> {
    /// Iterates the strings.
    pub fn iter(&self) -> impl Iterator<Item = &'a str> + 'a {
        let (enc, slice) = match *self {
            StrList::Encoded { count, bytes } => (Some((count, bytes)), None),
            StrList::Slice(s) => (None, Some(s)),
        };
        let mut cur = enc.map(|(c, b)| (c, Cursor::new(b)));
        let mut idx = 0usize;
        core::iter::from_fn(move || {
            if let Some(s) = slice {
                let r = s.get(idx).copied();
                idx += 1;
                return r;
            }
            let (count, c) = cur.as_mut()?;
            if *count == 0 {
                return None;
            }
            *count -= 1;
            // Validated when parsed, so this cannot fail; stop rather than panic if it did.
            c.str16().ok()
        })
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        match self {
            StrList::Encoded { count, .. } => *count as usize,
            StrList::Slice(s) => s.len(),
        }
    }

    /// True if there are no strings.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PartialEq for StrList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

/// One parsed submessage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Submessage<'a> {
    /// See [`ParticipantRepr`].
    Participant(ParticipantRepr<'a>),
    /// The sending participant leaves.
    ParticipantBye,
    /// See [`EndpointRepr`].
    Endpoint(EndpointRepr<'a>),
    /// The endpoint is withdrawn.
    EndpointBye(EntityId),
    /// See [`DataRepr`].
    Data(DataRepr<'a>),
    /// See [`HeartbeatRepr`].
    Heartbeat(HeartbeatRepr),
    /// See [`AckNackRepr`].
    AckNack(AckNackRepr),
    /// See [`GapRepr`].
    Gap(GapRepr),
    /// See [`DataFragRepr`].
    DataFrag(DataFragRepr<'a>),
    /// See [`NackFragRepr`].
    NackFrag(NackFragRepr),
    /// See [`BatchRepr`].
    Batch(BatchRepr<'a>),
    /// See [`AuthRepr`].
    Auth(AuthRepr<'a>),
    /// See [`KeyRepr`].
    Key(KeyRepr<'a>),
    /// See [`KeyRequestRepr`].
    KeyRequest(KeyRequestRepr),
    /// See [`SealedRepr`].
    Sealed(SealedRepr<'a>),
    /// See [`BatchSigRepr`].
    BatchSig(BatchSigRepr<'a>),
    /// See [`ProbeRepr`].
    Probe(ProbeRepr),
    /// See [`ProbeAckRepr`].
    ProbeAck(ProbeAckRepr),
    /// Samples requested beyond an ACKNACK's 256 bits: the ACKNACK layout, but `base`
    /// acknowledges nothing (`docs/wire.md#nack`); `start_unknown` is always false.
    Nack(AckNackRepr),
    /// See [`AuthTagRepr`].
    AuthTag(AuthTagRepr),
    /// See [`SealedBatchRepr`].
    SealedBatch(SealedBatchRepr<'a>),
    /// See [`RefusalRepr`].
    Refusal(RefusalRepr<'a>),
    /// See [`SkippedRepr`].
    Skipped(SkippedRepr),
    /// How many times the sending participant's router links were made again (`u32`,
    /// non-zero), sent beside its PARTICIPANT once it has router links: a change tells its
    /// peers that whatever was on its way to it through its routers was lost with the link
    /// (`docs/wire.md#link_epoch`). A kind of its own, so that a receiver of an earlier
    /// version skips it and still takes the PARTICIPANT.
    LinkEpoch(u32),
    /// A kind this version does not know; skipped by receivers (forward compatibility).
    Unknown(u8),
}

/// Appends the ⌈num_bits/32⌉ meaningful words of a bitmap.
fn emit_bitmap(out: &mut Vec<u8>, bitmap: &[u32; 8], num_bits: u16) {
    for w in bitmap.iter().take(num_bits.div_ceil(32) as usize) {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

/// The positions of the set bits among the first `num_bits` (bit `i`: word `i / 32`,
/// bit `i % 32`).
fn set_bits(bitmap: &[u32; 8], num_bits: u16) -> impl Iterator<Item = u32> + '_ {
    (0..u32::from(num_bits.min(crate::MAX_ACKNACK_BITS)))
        .filter(move |i| bitmap[(*i / 32) as usize] & (1 << (i % 32)) != 0)
}

fn put_str16(out: &mut Vec<u8>, s: &str) -> Result<(), Error> {
    let n = u16::try_from(s.len()).map_err(|_| Error::TooLong)?;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

impl<'a> Submessage<'a> {
    /// The wire kind byte of this submessage.
    pub fn kind(&self) -> u8 {
        match self {
            Submessage::Participant(_) => SubmessageKind::Participant as u8,
            Submessage::ParticipantBye => SubmessageKind::ParticipantBye as u8,
            Submessage::Endpoint(_) => SubmessageKind::Endpoint as u8,
            Submessage::EndpointBye(_) => SubmessageKind::EndpointBye as u8,
            Submessage::Data(_) => SubmessageKind::Data as u8,
            Submessage::Heartbeat(_) => SubmessageKind::Heartbeat as u8,
            Submessage::AckNack(_) => SubmessageKind::AckNack as u8,
            Submessage::Gap(_) => SubmessageKind::Gap as u8,
            Submessage::DataFrag(_) => SubmessageKind::DataFrag as u8,
            Submessage::NackFrag(_) => SubmessageKind::NackFrag as u8,
            Submessage::Batch(_) => SubmessageKind::Batch as u8,
            Submessage::Auth(_) => SubmessageKind::Auth as u8,
            Submessage::Key(_) => SubmessageKind::Key as u8,
            Submessage::KeyRequest(_) => SubmessageKind::KeyRequest as u8,
            Submessage::Sealed(_) => SubmessageKind::Sealed as u8,
            Submessage::BatchSig(_) => SubmessageKind::BatchSig as u8,
            Submessage::Probe(_) => SubmessageKind::Probe as u8,
            Submessage::ProbeAck(_) => SubmessageKind::ProbeAck as u8,
            Submessage::Nack(_) => SubmessageKind::Nack as u8,
            Submessage::AuthTag(_) => SubmessageKind::AuthTag as u8,
            Submessage::SealedBatch(_) => SubmessageKind::SealedBatch as u8,
            Submessage::Refusal(_) => SubmessageKind::Refusal as u8,
            Submessage::Skipped(_) => SubmessageKind::Skipped as u8,
            Submessage::LinkEpoch(_) => SubmessageKind::LinkEpoch as u8,
            Submessage::Unknown(k) => *k,
        }
    }

    /// The submessage header's flags byte for this submessage.
    pub fn flags(&self) -> u8 {
        match self {
            Submessage::Heartbeat(h) if h.final_ => HEARTBEAT_FINAL,
            Submessage::AckNack(a) if a.start_unknown => ACKNACK_START_UNKNOWN,
            _ => 0,
        }
    }

    /// Parses and validates one body with no flags set.
    #[cfg(test)]
    pub(crate) fn parse(kind: u8, body: &'a [u8]) -> Result<Self, Error> {
        Self::parse_flagged(kind, 0, body)
    }

    /// Parses and validates one body. `kind` unknown to this version gives `Unknown`;
    /// flags this version does not know are ignored.
    pub(crate) fn parse_flagged(kind: u8, flags: u8, body: &'a [u8]) -> Result<Self, Error> {
        let Some(kind) = SubmessageKind::from_u8(kind) else {
            return Ok(Submessage::Unknown(kind));
        };
        let mut c = Cursor::new(body);
        let c = &mut c;
        let msg = match kind {
            SubmessageKind::Participant => Submessage::Participant(ParticipantRepr::parse(c)?),
            SubmessageKind::ParticipantBye => Submessage::ParticipantBye,
            SubmessageKind::Endpoint => Submessage::Endpoint(EndpointRepr::parse(c)?),
            SubmessageKind::EndpointBye => Submessage::EndpointBye(c.entity("entity")?),
            SubmessageKind::Data => Submessage::Data(DataRepr::parse(c)?),
            SubmessageKind::Heartbeat => Submessage::Heartbeat(HeartbeatRepr::parse(c, flags)?),
            SubmessageKind::AckNack => Submessage::AckNack(AckNackRepr::parse(c, flags)?),
            SubmessageKind::Gap => Submessage::Gap(GapRepr::parse(c)?),
            SubmessageKind::DataFrag => Submessage::DataFrag(DataFragRepr::parse(c)?),
            SubmessageKind::NackFrag => Submessage::NackFrag(NackFragRepr::parse(c)?),
            SubmessageKind::Batch => Submessage::Batch(BatchRepr::parse(c)?),
            SubmessageKind::Auth => Submessage::Auth(AuthRepr::parse(c)?),
            SubmessageKind::Key => Submessage::Key(KeyRepr::parse(c)?),
            SubmessageKind::KeyRequest => Submessage::KeyRequest(KeyRequestRepr::parse(c)?),
            SubmessageKind::Sealed => Submessage::Sealed(SealedRepr::parse(c)?),
            SubmessageKind::BatchSig => Submessage::BatchSig(BatchSigRepr::parse(c)?),
            SubmessageKind::Probe => Submessage::Probe(ProbeRepr::parse(c)?),
            SubmessageKind::ProbeAck => Submessage::ProbeAck(ProbeAckRepr::parse(c)?),
            //= docs/wire.md#nack
            SubmessageKind::Nack => Submessage::Nack(AckNackRepr::parse(c, 0)?),
            SubmessageKind::AuthTag => Submessage::AuthTag(AuthTagRepr::parse(c)?),
            SubmessageKind::SealedBatch => Submessage::SealedBatch(SealedBatchRepr::parse(c)?),
            SubmessageKind::Refusal => Submessage::Refusal(RefusalRepr::parse(c)?),
            SubmessageKind::Skipped => Submessage::Skipped(SkippedRepr::parse(c)?),
            //= docs/wire.md#link_epoch
            SubmessageKind::LinkEpoch => match c.u32()? {
                0 => return Err(Error::BadValue("epoch")),
                e => Submessage::LinkEpoch(e),
            },
        };
        c.finish()?;
        Ok(msg)
    }

    /// Appends the body of this submessage to `out`.
    pub(crate) fn emit_body(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        match self {
            Submessage::Participant(p) => p.emit(out),
            Submessage::ParticipantBye => Ok(()),
            Submessage::Endpoint(e) => e.emit(out),
            Submessage::EndpointBye(id) => {
                out.extend_from_slice(&id.0.to_le_bytes());
                Ok(())
            }
            Submessage::Data(d) => d.emit(out),
            Submessage::Heartbeat(h) => h.emit(out),
            Submessage::AckNack(a) => a.emit(out),
            Submessage::Gap(g) => g.emit(out),
            Submessage::DataFrag(d) => d.emit(out),
            Submessage::NackFrag(n) => n.emit(out),
            Submessage::Batch(b) => b.emit(out),
            Submessage::Auth(a) => a.emit(out),
            Submessage::Key(k) => k.emit(out),
            Submessage::KeyRequest(k) => k.emit(out),
            Submessage::Sealed(x) => x.emit(out),
            Submessage::BatchSig(b) => b.emit(out),
            Submessage::Probe(p) => p.emit(out),
            Submessage::ProbeAck(p) => p.emit(out),
            Submessage::Nack(n) => n.emit(out),
            Submessage::AuthTag(t) => {
                t.emit(out);
                Ok(())
            }
            Submessage::SealedBatch(x) => x.emit(out),
            Submessage::Refusal(r) => r.emit(out),
            Submessage::Skipped(x) => x.emit(out),
            Submessage::LinkEpoch(e) => {
                out.extend_from_slice(&e.to_le_bytes());
                Ok(())
            }
            Submessage::Unknown(_) => Ok(()),
        }
    }
}
