//! Validated representations of each submessage, parsed from and emitted to bytes.
//!
//! Parsing goes through [`Cursor`], the only code in this crate that indexes a body; it checks
//! every read against the bytes present, so a lying length can only produce an error.

use crate::{Cursor, EntityId, Error, MAX_ACKNACK_BITS, MAX_PARTITIONS};

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

/// A participant announcement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParticipantRepr<'a> {
    /// How long receivers consider the participant alive without hearing from it, in ms.
    pub lease_ms: u32,
    /// Human-readable name (may be empty).
    pub name: &'a str,
    /// The IPv4 multicast group and port its readers also take data on, if any
    /// (`docs/wire.md#participant`).
    pub data_group: Option<core::net::SocketAddrV4>,
}

/// An endpoint announcement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndpointRepr<'a> {
    /// The endpoint inside its participant (non-zero).
    pub entity: EntityId,
    /// Writer or reader.
    pub kind: EndpointKind,
    /// Offered (writer) or requested (reader) QoS.
    pub qos: QosRepr,
    /// Topic name.
    pub topic: &'a str,
    /// Type name.
    pub type_name: &'a str,
    /// Partitions (empty: the default partition).
    pub partitions: StrList<'a>,
}

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// The sample's sequence number (≥ 1).
    pub seq: u64,
    /// Source timestamp, ns since the UNIX epoch.
    pub timestamp_ns: u64,
    /// The payload.
    pub payload: &'a [u8],
}

/// A writer's statement of what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatRepr {
    /// The writer.
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// First sequence number still available (≥ 1).
    pub first: u64,
    /// Last sequence number written (`first - 1` when nothing is available).
    pub last: u64,
    /// Increases with every heartbeat of this writer.
    pub count: u32,
    /// Final (RTPS's FinalFlag): readers answer only if they miss something. A writer asks
    /// for acknowledgements only when it needs them, so in steady state its readers do
    /// not each answer every heartbeat. Submessage flag [`HEARTBEAT_FINAL`].
    pub final_: bool,
}

/// The HEARTBEAT submessage flag that makes it final.
pub const HEARTBEAT_FINAL: u8 = 0x01;

/// A reader's acknowledgement: all below `base` received; bit `i` set = `base + i` missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckNackRepr {
    /// The reader.
    pub reader: EntityId,
    /// The writer.
    pub writer: EntityId,
    /// Every sequence number below this one has been received (≥ 1).
    pub base: u64,
    /// How many bits of `bitmap` are meaningful (≤ 256).
    pub num_bits: u16,
    /// Bit `i` (word `i / 32`, bit `i % 32`) set: `base + i` is requested.
    pub bitmap: [u32; 8],
    /// Increases with every ACKNACK of this reader.
    pub count: u32,
}

impl AckNackRepr {
    /// Iterates the requested sequence numbers.
    pub fn missing(&self) -> impl Iterator<Item = u64> + '_ {
        set_bits(&self.bitmap, self.num_bits).map(|i| self.base + i as u64)
    }
}

/// A writer's statement that `[start, end)` will never be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapRepr {
    /// The writer.
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// First irrelevant sequence number (≥ 1).
    pub start: u64,
    /// One past the last irrelevant sequence number (> `start`).
    pub end: u64,
}

/// One fragment of a sample. Every fragment but the last carries exactly `frag_size` bytes;
/// fragment `n` starts at byte `n × frag_size` of the sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataFragRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// The sample's sequence number (≥ 1).
    pub seq: u64,
    /// Source timestamp, ns since the UNIX epoch.
    pub timestamp_ns: u64,
    /// The whole sample's size in bytes (> `frag_size`).
    pub sample_size: u32,
    /// Size of every fragment but the last (≥ 1).
    pub frag_size: u16,
    /// This fragment's number (< ⌈sample_size / frag_size⌉).
    pub frag_num: u32,
    /// The fragment's bytes.
    pub payload: &'a [u8],
}

impl DataFragRepr<'_> {
    /// Number of fragments of the sample.
    pub fn frag_count(&self) -> u32 {
        self.sample_size.div_ceil(self.frag_size as u32)
    }

    /// Appends the fixed part (everything but the fragment's bytes).
    pub fn emit_fixed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.timestamp_ns.to_le_bytes());
        out.extend_from_slice(&self.sample_size.to_le_bytes());
        out.extend_from_slice(&self.frag_size.to_le_bytes());
        out.extend_from_slice(&self.frag_num.to_le_bytes());
    }
}

/// Fixed part of a DATA_FRAG body before the fragment's bytes.
pub const DATA_FRAG_FIXED_LEN: usize = 34;

/// A reader's request for fragments of one sample: bit `i` set = fragment `base + i` missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NackFragRepr {
    /// The reader.
    pub reader: EntityId,
    /// The writer.
    pub writer: EntityId,
    /// The sample.
    pub seq: u64,
    /// First fragment number the bitmap describes.
    pub base: u32,
    /// Meaningful bits (1..=256).
    pub num_bits: u16,
    /// Bit `i` (word `i / 32`, bit `i % 32`) set: fragment `base + i` is requested.
    pub bitmap: [u32; 8],
    /// Increases with every NACK_FRAG of this reader.
    pub count: u32,
}

impl NackFragRepr {
    /// Iterates the requested fragment numbers.
    pub fn missing(&self) -> impl Iterator<Item = u32> + '_ {
        set_bits(&self.bitmap, self.num_bits).map(|i| self.base + i)
    }
}

/// Consecutive samples of one writer: entry `i` is sequence number `first_seq + i`. Each
/// entry is `timestamp (u64) | length (u32) | bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// Sequence number of the first entry (≥ 1).
    pub first_seq: u64,
    /// Number of entries (≥ 1).
    pub count: u32,
    /// The encoded entries, validated.
    pub entries: &'a [u8],
}

/// Fixed part of a BATCH body before its entries.
pub const BATCH_FIXED_LEN: usize = 20;
/// Bytes an entry adds to its sample in a BATCH.
pub const BATCH_ENTRY_OVERHEAD: usize = 12;

impl<'a> BatchRepr<'a> {
    /// Iterates `(seq, timestamp_ns, payload)`.
    pub fn samples(&self) -> impl Iterator<Item = (u64, u64, &'a [u8])> + 'a {
        let mut c = Cursor::new(self.entries);
        let first = self.first_seq;
        let mut i = 0u64;
        core::iter::from_fn(move || {
            // Validated when parsed: a failure here only ends the iteration.
            let ts = c.u64().ok()?;
            let len = c.u32().ok()? as usize;
            let bytes = c.take(len).ok()?;
            let seq = first + i;
            i += 1;
            Some((seq, ts, bytes))
        })
    }

    /// Appends the fixed part; the entries follow (built with [`push_batch_entry`]).
    pub fn emit_fixed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.first_seq.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
    }
}

/// Appends one BATCH entry to `out`.
pub fn push_batch_entry(out: &mut Vec<u8>, timestamp_ns: u64, payload: &[u8]) {
    out.extend_from_slice(&batch_entry_head(timestamp_ns, payload.len()));
    out.extend_from_slice(payload);
}

/// The bytes in front of one batch entry's payload (timestamp, length), for writers that
/// build entries in their own buffer type.
pub fn batch_entry_head(timestamp_ns: u64, len: usize) -> [u8; BATCH_ENTRY_OVERHEAD] {
    let mut h = [0u8; BATCH_ENTRY_OVERHEAD];
    h[..8].copy_from_slice(&timestamp_ns.to_le_bytes());
    h[8..].copy_from_slice(&(len as u32).to_le_bytes());
    h
}

/// Largest credential an AUTH carries.
pub const MAX_CREDENTIAL_LEN: usize = 4096;

/// Mutual authentication in a secure realm (`docs/wire.md#auth`): the sender's credential,
/// a fresh challenge it sets the addressee, and its signature over the addressee's last
/// challenge, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthRepr<'a> {
    /// The participant addressed.
    pub to: crate::ParticipantId,
    /// The sender's challenge for `to` (random, fresh per peer).
    pub challenge: [u8; 32],
    /// Ed25519 signature by the sender over `"tether auth v1" | to's challenge | sender id |
    /// to id`, once it has received a challenge from `to`.
    pub response: Option<[u8; 64]>,
    /// The sender has verified the addressee (a valid credential and response): once both
    /// sides say so, they stop sending AUTH.
    pub verified_you: bool,
    /// The sender has heard that `to` verified it (so `to` need not say it again).
    pub you_verified_me: bool,
    /// The sender's credential (tether-crypto's canonical form, 1 to 4,096 bytes).
    pub credential: &'a [u8],
}

/// The bytes an AUTH response signs: the domain separator, the challenge being answered,
/// the answering participant and the one that set the challenge.
pub fn auth_signed_bytes(
    challenge: &[u8; 32],
    signer: crate::ParticipantId,
    challenger: crate::ParticipantId,
) -> [u8; 14 + 32 + 16] {
    let mut b = [0u8; 62];
    b[..14].copy_from_slice(b"tether auth v1");
    b[14..46].copy_from_slice(challenge);
    b[46..54].copy_from_slice(&signer.0.to_le_bytes());
    b[54..].copy_from_slice(&challenger.0.to_le_bytes());
    b
}

/// A writer's sender key for one epoch, wrapped for one reader (`docs/wire.md#key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The reader it is for (non-zero).
    pub reader: EntityId,
    /// The key's epoch (≥ 1).
    pub epoch: u32,
    /// The AEAD suite's code.
    pub suite: u8,
    /// The wrapped key (1 to 255 bytes).
    pub wrapped: &'a [u8],
}

/// A reader asks a writer for its key of an epoch it holds sealed samples of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRequestRepr {
    /// The reader (non-zero).
    pub reader: EntityId,
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The epoch (≥ 1).
    pub epoch: u32,
}

/// The submessages that followed, sealed under a key shared by the sending participant and
/// one receiving participant alone (`docs/wire.md#sealed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedRepr<'a> {
    /// The participant it is sealed for.
    pub to: crate::ParticipantId,
    /// The sender's counter for this peer (the nonce; ≥ 1, never repeated).
    pub counter: u64,
    /// Ciphertext and tag (at least the 16-byte tag).
    pub sealed: &'a [u8],
}

/// The writer's signature over the BATCH right after it in the same datagram
/// (`docs/wire.md#batch_sig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSigRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The batch's first sequence number (≥ 1).
    pub first_seq: u64,
    /// The batch's count (≥ 1).
    pub count: u32,
    /// Ed25519 signature.
    pub signature: &'a [u8; 64],
}

/// Bytes of a SEALED body before the sealed bytes: `to` and `counter`.
pub const SEALED_FIXED_LEN: usize = 16;

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
            Submessage::Unknown(k) => *k,
        }
    }

    /// The submessage header's flags byte for this submessage.
    pub fn flags(&self) -> u8 {
        match self {
            Submessage::Heartbeat(h) if h.final_ => HEARTBEAT_FINAL,
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
        let msg = match kind {
            //= docs/wire.md#participant
            SubmessageKind::Participant => {
                let lease_ms = c.u32()?;
                if lease_ms == 0 {
                    return Err(Error::BadValue("lease_ms"));
                }
                let name = c.str16()?;
                let data_group = match c.rest() {
                    [] => None,
                    &[a, b, cc, d, p0, p1] => {
                        let ip = core::net::Ipv4Addr::new(a, b, cc, d);
                        if !ip.is_multicast() {
                            return Err(Error::BadValue("data group"));
                        }
                        Some(core::net::SocketAddrV4::new(
                            ip,
                            u16::from_le_bytes([p0, p1]),
                        ))
                    }
                    _ => return Err(Error::BadValue("data group")),
                };
                Submessage::Participant(ParticipantRepr {
                    lease_ms,
                    name,
                    data_group,
                })
            }
            SubmessageKind::ParticipantBye => Submessage::ParticipantBye,
            //= docs/wire.md#endpoint
            SubmessageKind::Endpoint => {
                let entity = c.entity("entity")?;
                let kind = match c.u8()? {
                    1 => EndpointKind::Writer,
                    2 => EndpointKind::Reader,
                    _ => return Err(Error::BadValue("endpoint kind")),
                };
                let reliability = match c.u8()? {
                    0 => Reliability::BestEffort,
                    1 => Reliability::Reliable,
                    _ => return Err(Error::BadValue("reliability")),
                };
                let durability = match c.u8()? {
                    0 => Durability::Volatile,
                    1 => Durability::TransientLocal,
                    _ => return Err(Error::BadValue("durability")),
                };
                let history = match c.u8()? {
                    0 => HistoryKind::KeepLast,
                    1 => HistoryKind::KeepAll,
                    _ => return Err(Error::BadValue("history")),
                };
                let liveliness = match c.u8()? {
                    0 => Liveliness::Automatic,
                    _ => return Err(Error::BadValue("liveliness")),
                };
                let _reserved = c.u16()?;
                let depth = c.u32()?;
                if history == HistoryKind::KeepLast && depth == 0 {
                    return Err(Error::BadValue("depth"));
                }
                let max_samples = c.u32()?;
                let max_bytes = c.u64()?;
                let deadline_us = c.u64()?;
                let lifespan_us = c.u64()?;
                let lease_us = c.u64()?;
                if deadline_us == 0 || lifespan_us == 0 || lease_us == 0 {
                    return Err(Error::BadValue("duration"));
                }
                let topic = c.str16()?;
                if topic.is_empty() {
                    return Err(Error::BadValue("topic"));
                }
                let type_name = c.str16()?;
                let count = c.u8()?;
                if count as usize > MAX_PARTITIONS {
                    return Err(Error::BadLength);
                }
                let bytes = c.rest();
                let mut check = Cursor::new(bytes);
                for _ in 0..count {
                    check.str16()?;
                }
                check.finish()?;
                Submessage::Endpoint(EndpointRepr {
                    entity,
                    kind,
                    qos: QosRepr {
                        reliability,
                        durability,
                        history,
                        depth,
                        max_samples,
                        max_bytes,
                        deadline_us,
                        lifespan_us,
                        liveliness,
                        lease_us,
                    },
                    topic,
                    type_name,
                    partitions: StrList::Encoded { count, bytes },
                })
            }
            SubmessageKind::EndpointBye => Submessage::EndpointBye(c.entity("entity")?),
            //= docs/wire.md#data
            SubmessageKind::Data => {
                let writer = c.entity("writer")?;
                let reader = EntityId(c.u32()?);
                let seq = c.seq("seq")?;
                let timestamp_ns = c.u64()?;
                let payload = c.rest();
                Submessage::Data(DataRepr {
                    writer,
                    reader,
                    seq,
                    timestamp_ns,
                    payload,
                })
            }
            //= docs/wire.md#heartbeat
            SubmessageKind::Heartbeat => {
                let writer = c.entity("writer")?;
                let reader = EntityId(c.u32()?);
                let first = c.seq("first")?;
                let last = c.u64()?;
                if last == u64::MAX || last + 1 < first {
                    return Err(Error::BadValue("last"));
                }
                let count = c.u32()?;
                Submessage::Heartbeat(HeartbeatRepr {
                    writer,
                    reader,
                    first,
                    last,
                    count,
                    final_: flags & HEARTBEAT_FINAL != 0,
                })
            }
            //= docs/wire.md#acknack
            SubmessageKind::AckNack => {
                let reader = c.entity("reader")?;
                let writer = c.entity("writer")?;
                let base = c.seq("base")?;
                let num_bits = c.u16()?;
                if num_bits > MAX_ACKNACK_BITS || base.checked_add(num_bits as u64).is_none() {
                    return Err(Error::BadLength);
                }
                let count = c.u32()?;
                let bitmap = c.bitmap(num_bits)?;
                Submessage::AckNack(AckNackRepr {
                    reader,
                    writer,
                    base,
                    num_bits,
                    bitmap,
                    count,
                })
            }
            //= docs/wire.md#gap
            SubmessageKind::Gap => {
                let writer = c.entity("writer")?;
                let reader = EntityId(c.u32()?);
                let start = c.seq("start")?;
                let end = c.u64()?;
                if end <= start {
                    return Err(Error::BadValue("end"));
                }
                Submessage::Gap(GapRepr {
                    writer,
                    reader,
                    start,
                    end,
                })
            }
            //= docs/wire.md#data_frag
            SubmessageKind::DataFrag => {
                let writer = c.entity("writer")?;
                let reader = EntityId(c.u32()?);
                let seq = c.seq("seq")?;
                let timestamp_ns = c.u64()?;
                let sample_size = c.u32()?;
                let frag_size = c.u16()?;
                let frag_num = c.u32()?;
                if frag_size == 0 || sample_size <= frag_size as u32 {
                    return Err(Error::BadValue("frag_size"));
                }
                let count = sample_size.div_ceil(frag_size as u32);
                if frag_num >= count {
                    return Err(Error::BadValue("frag_num"));
                }
                let payload = c.rest();
                let start = frag_num as u64 * frag_size as u64;
                let want = (sample_size as u64 - start).min(frag_size as u64);
                if payload.len() as u64 != want {
                    return Err(Error::BadLength);
                }
                Submessage::DataFrag(DataFragRepr {
                    writer,
                    reader,
                    seq,
                    timestamp_ns,
                    sample_size,
                    frag_size,
                    frag_num,
                    payload,
                })
            }
            //= docs/wire.md#nack_frag
            SubmessageKind::NackFrag => {
                let reader = c.entity("reader")?;
                let writer = c.entity("writer")?;
                let seq = c.seq("seq")?;
                let base = c.u32()?;
                let num_bits = c.u16()?;
                if num_bits == 0
                    || num_bits > MAX_ACKNACK_BITS
                    || base.checked_add(num_bits as u32).is_none()
                {
                    return Err(Error::BadLength);
                }
                let count = c.u32()?;
                let bitmap = c.bitmap(num_bits)?;
                Submessage::NackFrag(NackFragRepr {
                    reader,
                    writer,
                    seq,
                    base,
                    num_bits,
                    bitmap,
                    count,
                })
            }
            //= docs/wire.md#batch
            SubmessageKind::Batch => {
                let writer = c.entity("writer")?;
                let reader = EntityId(c.u32()?);
                let first_seq = c.seq("first_seq")?;
                let count = c.u32()?;
                if count == 0 || first_seq.checked_add(count as u64).is_none() {
                    return Err(Error::BadValue("count"));
                }
                let entries = c.rest();
                if (count as usize).saturating_mul(BATCH_ENTRY_OVERHEAD) > entries.len() {
                    return Err(Error::BadLength);
                }
                let mut check = Cursor::new(entries);
                for _ in 0..count {
                    let _ts = check.u64()?;
                    let len = check.u32()? as usize;
                    check.take(len)?;
                }
                check.finish()?;
                Submessage::Batch(BatchRepr {
                    writer,
                    reader,
                    first_seq,
                    count,
                    entries,
                })
            }
            //= docs/wire.md#auth
            SubmessageKind::Auth => {
                let to = crate::ParticipantId(c.u64()?);
                if to.0 == 0 {
                    return Err(Error::BadValue("to"));
                }
                let challenge: [u8; 32] = c.take(32)?.try_into().map_err(|_| Error::BadLength)?;
                let flags = c.u8()?;
                if flags & !0b111 != 0 {
                    return Err(Error::BadValue("auth flags"));
                }
                let response = match flags & 1 {
                    0 => None,
                    _ => Some(c.take(64)?.try_into().map_err(|_| Error::BadLength)?),
                };
                let verified_you = flags & 2 != 0;
                let you_verified_me = flags & 4 != 0;
                let n = c.u16()? as usize;
                if n == 0 || n > MAX_CREDENTIAL_LEN {
                    return Err(Error::BadValue("credential length"));
                }
                let credential = c.take(n)?;
                Submessage::Auth(AuthRepr {
                    to,
                    challenge,
                    response,
                    verified_you,
                    you_verified_me,
                    credential,
                })
            }
            //= docs/wire.md#key
            SubmessageKind::Key => {
                let writer = c.entity("writer")?;
                let reader = c.entity("reader")?;
                let epoch = c.u32()?;
                if epoch == 0 {
                    return Err(Error::BadValue("epoch"));
                }
                let suite = c.u8()?;
                let n = c.u8()? as usize;
                if n == 0 {
                    return Err(Error::BadValue("wrapped length"));
                }
                let wrapped = c.take(n)?;
                Submessage::Key(KeyRepr {
                    writer,
                    reader,
                    epoch,
                    suite,
                    wrapped,
                })
            }
            SubmessageKind::KeyRequest => {
                let reader = c.entity("reader")?;
                let writer = c.entity("writer")?;
                let epoch = c.u32()?;
                if epoch == 0 {
                    return Err(Error::BadValue("epoch"));
                }
                Submessage::KeyRequest(KeyRequestRepr {
                    reader,
                    writer,
                    epoch,
                })
            }
            //= docs/wire.md#sealed
            SubmessageKind::Sealed => {
                let to = crate::ParticipantId(c.u64()?);
                let counter = c.u64()?;
                if counter == 0 {
                    return Err(Error::BadValue("counter"));
                }
                let sealed = c.rest();
                if sealed.len() < 16 {
                    return Err(Error::BadValue("sealed length"));
                }
                Submessage::Sealed(SealedRepr {
                    to,
                    counter,
                    sealed,
                })
            }
            //= docs/wire.md#batch_sig
            SubmessageKind::BatchSig => {
                let writer = c.entity("writer")?;
                let first_seq = c.u64()?;
                if first_seq == 0 {
                    return Err(Error::BadValue("first_seq"));
                }
                let count = c.u32()?;
                if count == 0 {
                    return Err(Error::BadValue("count"));
                }
                let signature: &[u8; 64] = c.take(64)?.try_into().map_err(|_| Error::BadLength)?;
                Submessage::BatchSig(BatchSigRepr {
                    writer,
                    first_seq,
                    count,
                    signature,
                })
            }
        };
        c.finish()?;
        Ok(msg)
    }

    /// Appends the body of this submessage to `out`.
    pub(crate) fn emit_body(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        match self {
            Submessage::Participant(p) => {
                out.extend_from_slice(&p.lease_ms.to_le_bytes());
                put_str16(out, p.name)?;
                if let Some(g) = p.data_group {
                    if !g.ip().is_multicast() {
                        return Err(Error::BadLength);
                    }
                    out.extend_from_slice(&g.ip().octets());
                    out.extend_from_slice(&g.port().to_le_bytes());
                }
            }
            Submessage::ParticipantBye => {}
            Submessage::Endpoint(e) => {
                let q = &e.qos;
                out.extend_from_slice(&e.entity.0.to_le_bytes());
                out.push(match e.kind {
                    EndpointKind::Writer => 1,
                    EndpointKind::Reader => 2,
                });
                out.push(q.reliability as u8);
                out.push(q.durability as u8);
                out.push(q.history as u8);
                out.push(q.liveliness as u8);
                out.extend_from_slice(&0u16.to_le_bytes());
                out.extend_from_slice(&q.depth.to_le_bytes());
                out.extend_from_slice(&q.max_samples.to_le_bytes());
                out.extend_from_slice(&q.max_bytes.to_le_bytes());
                out.extend_from_slice(&q.deadline_us.to_le_bytes());
                out.extend_from_slice(&q.lifespan_us.to_le_bytes());
                out.extend_from_slice(&q.lease_us.to_le_bytes());
                put_str16(out, e.topic)?;
                put_str16(out, e.type_name)?;
                if e.partitions.len() > MAX_PARTITIONS {
                    return Err(Error::BadLength);
                }
                out.push(e.partitions.len() as u8);
                for p in e.partitions.iter() {
                    put_str16(out, p)?;
                }
            }
            Submessage::EndpointBye(id) => out.extend_from_slice(&id.0.to_le_bytes()),
            Submessage::Data(d) => {
                d.emit_fixed(out);
                out.extend_from_slice(d.payload);
            }
            Submessage::Heartbeat(h) => {
                out.extend_from_slice(&h.writer.0.to_le_bytes());
                out.extend_from_slice(&h.reader.0.to_le_bytes());
                out.extend_from_slice(&h.first.to_le_bytes());
                out.extend_from_slice(&h.last.to_le_bytes());
                out.extend_from_slice(&h.count.to_le_bytes());
            }
            Submessage::AckNack(a) => {
                if a.num_bits > MAX_ACKNACK_BITS {
                    return Err(Error::BadLength);
                }
                out.extend_from_slice(&a.reader.0.to_le_bytes());
                out.extend_from_slice(&a.writer.0.to_le_bytes());
                out.extend_from_slice(&a.base.to_le_bytes());
                out.extend_from_slice(&a.num_bits.to_le_bytes());
                out.extend_from_slice(&a.count.to_le_bytes());
                emit_bitmap(out, &a.bitmap, a.num_bits);
            }
            Submessage::Gap(g) => {
                out.extend_from_slice(&g.writer.0.to_le_bytes());
                out.extend_from_slice(&g.reader.0.to_le_bytes());
                out.extend_from_slice(&g.start.to_le_bytes());
                out.extend_from_slice(&g.end.to_le_bytes());
            }
            Submessage::DataFrag(d) => {
                d.emit_fixed(out);
                out.extend_from_slice(d.payload);
            }
            Submessage::NackFrag(n) => {
                if n.num_bits == 0 || n.num_bits > MAX_ACKNACK_BITS {
                    return Err(Error::BadLength);
                }
                out.extend_from_slice(&n.reader.0.to_le_bytes());
                out.extend_from_slice(&n.writer.0.to_le_bytes());
                out.extend_from_slice(&n.seq.to_le_bytes());
                out.extend_from_slice(&n.base.to_le_bytes());
                out.extend_from_slice(&n.num_bits.to_le_bytes());
                out.extend_from_slice(&n.count.to_le_bytes());
                emit_bitmap(out, &n.bitmap, n.num_bits);
            }
            Submessage::Batch(b) => {
                b.emit_fixed(out);
                out.extend_from_slice(b.entries);
            }
            Submessage::Auth(a) => {
                if a.credential.is_empty() || a.credential.len() > MAX_CREDENTIAL_LEN {
                    return Err(Error::BadLength);
                }
                out.extend_from_slice(&a.to.0.to_le_bytes());
                out.extend_from_slice(&a.challenge);
                let flags = a.response.is_some() as u8
                    | (a.verified_you as u8) << 1
                    | (a.you_verified_me as u8) << 2;
                out.push(flags);
                if let Some(r) = &a.response {
                    out.extend_from_slice(r);
                }
                out.extend_from_slice(&(a.credential.len() as u16).to_le_bytes());
                out.extend_from_slice(a.credential);
            }
            Submessage::Key(k) => {
                if k.wrapped.is_empty() || k.wrapped.len() > 255 {
                    return Err(Error::BadLength);
                }
                out.extend_from_slice(&k.writer.0.to_le_bytes());
                out.extend_from_slice(&k.reader.0.to_le_bytes());
                out.extend_from_slice(&k.epoch.to_le_bytes());
                out.push(k.suite);
                out.push(k.wrapped.len() as u8);
                out.extend_from_slice(k.wrapped);
            }
            Submessage::KeyRequest(k) => {
                out.extend_from_slice(&k.reader.0.to_le_bytes());
                out.extend_from_slice(&k.writer.0.to_le_bytes());
                out.extend_from_slice(&k.epoch.to_le_bytes());
            }
            Submessage::BatchSig(b) => {
                if b.writer.0 == 0 || b.first_seq == 0 || b.count == 0 {
                    return Err(Error::BadLength);
                }
                out.extend_from_slice(&b.writer.0.to_le_bytes());
                out.extend_from_slice(&b.first_seq.to_le_bytes());
                out.extend_from_slice(&b.count.to_le_bytes());
                out.extend_from_slice(b.signature);
            }
            Submessage::Sealed(x) => {
                if x.counter == 0 || x.sealed.len() < 16 {
                    return Err(Error::BadLength);
                }
                out.extend_from_slice(&x.to.0.to_le_bytes());
                out.extend_from_slice(&x.counter.to_le_bytes());
                out.extend_from_slice(x.sealed);
            }
            Submessage::Unknown(_) => {}
        }
        Ok(())
    }
}

impl DataRepr<'_> {
    /// Appends the fixed part of a DATA body (everything but the payload), so a caller can
    /// send the payload from its own buffer (scatter-gather) without copying it here.
    pub fn emit_fixed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.timestamp_ns.to_le_bytes());
    }
}
