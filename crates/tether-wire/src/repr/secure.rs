//! AUTH, KEY, KEY_REQUEST, SEALED, BATCH_SIG and SEALED_BATCH: security (`docs/wire.md`
//! sections 3.10 to 3.13a).

use crate::{Cursor, EntityId, Error};

/// Largest credential an AUTH carries (sealed: the credential and 28 bytes).
pub const MAX_CREDENTIAL_LEN: usize = 4096;

/// Bytes of an AUTH_TAG submessage, its header included: always the datagram's last.
pub const AUTH_TAG_LEN: usize = crate::SUBMESSAGE_HEADER_LEN + 4 + 8 + 8 + 16;

/// The authentication of a whole datagram (`docs/wire.md#auth_tag`): its sender's control
/// key epoch, a counter (the nonce; ≥ 1, never repeated under a key), the participant it is
/// for (sealed), and the AES-GCM tag over every byte before this submessage and that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthTagRepr {
    /// The control key's epoch (≥ 1).
    pub epoch: u32,
    /// The sender's counter (≥ 1).
    pub counter: u64,
    /// The participant the datagram is for (0: any receiver), sealed under the control key.
    pub to: [u8; 8],
    /// The tag.
    pub tag: [u8; 16],
}

impl AuthTagRepr {
    pub(crate) fn parse(c: &mut Cursor<'_>) -> Result<Self, Error> {
        //= docs/wire.md#auth_tag
        let epoch = c.u32()?;
        let counter = c.u64()?;
        if epoch == 0 || counter == 0 {
            return Err(Error::BadValue("auth tag"));
        }
        let to = c.take(8)?.try_into().map_err(|_| Error::BadLength)?;
        let tag = c.take(16)?.try_into().map_err(|_| Error::BadLength)?;
        Ok(AuthTagRepr {
            epoch,
            counter,
            to,
            tag,
        })
    }

    pub(crate) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
        out.extend_from_slice(&self.to);
        out.extend_from_slice(&self.tag);
    }

    /// The submessage's bytes (header included) for a tag not yet computed: what goes after
    /// the covered bytes; the last 16 bytes are then the tag.
    pub fn bytes(&self) -> [u8; AUTH_TAG_LEN] {
        let mut b = [0u8; AUTH_TAG_LEN];
        b[0] = crate::SubmessageKind::AuthTag as u8;
        b[2..4]
            .copy_from_slice(&((AUTH_TAG_LEN - crate::SUBMESSAGE_HEADER_LEN) as u16).to_le_bytes());
        b[4..8].copy_from_slice(&self.epoch.to_le_bytes());
        b[8..16].copy_from_slice(&self.counter.to_le_bytes());
        b[16..24].copy_from_slice(&self.to);
        b[24..].copy_from_slice(&self.tag);
        b
    }

    /// A datagram's tag and the bytes it covers (everything before the AUTH_TAG), if the
    /// datagram ends with a well-formed AUTH_TAG.
    pub fn split(datagram: &[u8]) -> Option<(AuthTagRepr, &[u8])> {
        let at = datagram.len().checked_sub(AUTH_TAG_LEN)?;
        if at < crate::HEADER_LEN {
            return None;
        }
        let t = &datagram[at..];
        if t[0] != crate::SubmessageKind::AuthTag as u8
            || t[1] != 0
            || u16::from_le_bytes([t[2], t[3]]) as usize
                != AUTH_TAG_LEN - crate::SUBMESSAGE_HEADER_LEN
        {
            return None;
        }
        let mut c = Cursor::new(&t[crate::SUBMESSAGE_HEADER_LEN..]);
        let r = AuthTagRepr::parse(&mut c).ok()?;
        Some((r, &datagram[..at]))
    }
}

/// A participant's control key of one epoch, wrapped for the AUTH's addressee
/// (`docs/wire.md#auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlKeyRepr<'a> {
    /// The epoch (≥ 1).
    pub epoch: u32,
    /// The wrapped key (1 to 255 bytes).
    pub wrapped: &'a [u8],
}

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
    /// The sender's control key, wrapped for `to` (it comes with the response: a peer
    /// that verifies the sender can then authenticate its datagrams).
    pub control_key: Option<ControlKeyRepr<'a>>,
    /// The epoch of `to`'s control key the sender holds (0: none).
    pub have_epoch: u32,
    /// The sender's credential, sealed under the realm's AUTH key (1 to 4,096 bytes).
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

/// Consecutive samples of one writer sealed as one message under the writer's batch key
/// (`docs/wire.md#sealed_batch`): the BATCH layout's fields, the epoch, the AEAD tag, then
/// the ciphertext of the entries exactly as a BATCH would carry them. Always the last
/// submessage before the datagram's AUTH_TAG, which covers everything but `ciphertext`.
///
/// ```text
/// 0               4               8                              16
/// +---------------+---------------+-------------------------------+
/// |    writer     |    reader     |           first_seq           |
/// +---------------+---------------+-------------------------------+
/// |     count     |     epoch     |        tag (16 bytes) ...     |
/// +---------------+---------------+-------------------------------+
/// |   ... tag     |  ciphertext of the entries (rest of the body) |
/// +---------------+-----------------------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedBatchRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// Sequence number of the first entry (≥ 1).
    pub first_seq: u64,
    /// Number of entries (≥ 1; `first_seq + count` does not overflow).
    pub count: u32,
    /// The epoch of the writer's key it is sealed under (≥ 1).
    pub epoch: u32,
    /// The AEAD tag.
    pub tag: &'a [u8; 16],
    /// The entries' ciphertext: at least `count` × 12 bytes.
    pub ciphertext: &'a [u8],
}

/// Bytes of a SEALED_BATCH body before its ciphertext.
pub const SEALED_BATCH_FIXED_LEN: usize = 40;

impl<'a> SealedBatchRepr<'a> {
    /// Parses a SEALED_BATCH body (what follows its submessage header).
    pub fn from_body(body: &'a [u8]) -> Result<Self, Error> {
        Self::parse(&mut Cursor::new(body))
    }

    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#sealed_batch
        let writer = c.entity("writer")?;
        let reader = EntityId(c.u32()?);
        let first_seq = c.seq("first_seq")?;
        let count = c.u32()?;
        if count == 0 || first_seq.checked_add(count as u64).is_none() {
            return Err(Error::BadValue("count"));
        }
        let epoch = c.u32()?;
        if epoch == 0 {
            return Err(Error::BadValue("epoch"));
        }
        let tag: &[u8; 16] = c.take(16)?.try_into().map_err(|_| Error::BadLength)?;
        let ciphertext = c.rest();
        if (count as usize).saturating_mul(crate::BATCH_ENTRY_OVERHEAD) > ciphertext.len() {
            return Err(Error::BadLength);
        }
        Ok(SealedBatchRepr {
            writer,
            reader,
            first_seq,
            count,
            epoch,
            tag,
            ciphertext,
        })
    }

    /// Appends the fields before the ciphertext.
    pub fn emit_fixed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.first_seq.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(self.tag);
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.writer.0 == 0
            || self.first_seq == 0
            || self.count == 0
            || self.epoch == 0
            || (self.count as usize).saturating_mul(crate::BATCH_ENTRY_OVERHEAD)
                > self.ciphertext.len()
        {
            return Err(Error::BadLength);
        }
        self.emit_fixed(out);
        out.extend_from_slice(self.ciphertext);
        Ok(())
    }
}

/// Where a SEALED_BATCH's tag sits in its body: after writer, reader, first_seq, count and
/// epoch. What it authenticates besides the ciphertext is every byte of its datagram before
/// the tag (`docs/wire.md#sealed_batch`).
pub const SEALED_BATCH_TAG_AT: usize = 24;

/// Where the ciphertext of a SEALED_BATCH begins, if it is the last submessage of the
/// datagram whose first bytes are `prefix` and which is `total` bytes long: such a datagram
/// carries no AUTH_TAG, the batch's own AEAD authenticates it (`docs/wire.md#sealed_batch`).
/// `prefix` holds at least everything before that ciphertext (a writer's head, say, or the
/// whole datagram). `None` when the datagram does not end with one. Reads only submessage
/// headers.
pub fn sealed_batch_ciphertext(prefix: &[u8], total: usize) -> Option<usize> {
    let mut i = crate::HEADER_LEN;
    while let Some(h) = prefix.get(i..i + crate::SUBMESSAGE_HEADER_LEN) {
        let len = u16::from_le_bytes([h[2], h[3]]) as usize;
        let next = i + crate::SUBMESSAGE_HEADER_LEN + len;
        if next >= total {
            let ct = i + crate::SUBMESSAGE_HEADER_LEN + SEALED_BATCH_FIXED_LEN;
            return (next == total
                && h[0] == crate::SubmessageKind::SealedBatch as u8
                && len >= SEALED_BATCH_FIXED_LEN
                && ct <= prefix.len())
            .then_some(ct);
        }
        i = next;
    }
    None
}

impl<'a> AuthRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#auth
        let to = crate::ParticipantId(c.u64()?);
        if to.0 == 0 {
            return Err(Error::BadValue("to"));
        }
        let challenge: [u8; 32] = c.take(32)?.try_into().map_err(|_| Error::BadLength)?;
        let flags = c.u8()?;
        if flags & !0b1111 != 0 {
            return Err(Error::BadValue("auth flags"));
        }
        let response = match flags & 1 {
            0 => None,
            _ => Some(c.take(64)?.try_into().map_err(|_| Error::BadLength)?),
        };
        let verified_you = flags & 2 != 0;
        let you_verified_me = flags & 4 != 0;
        let control_key = match flags & 8 {
            0 => None,
            _ => {
                let epoch = c.u32()?;
                let n = c.u8()? as usize;
                if epoch == 0 || n == 0 {
                    return Err(Error::BadValue("control key"));
                }
                Some(ControlKeyRepr {
                    epoch,
                    wrapped: c.take(n)?,
                })
            }
        };
        let have_epoch = c.u32()?;
        let n = c.u16()? as usize;
        if n == 0 || n > MAX_CREDENTIAL_LEN {
            return Err(Error::BadValue("credential length"));
        }
        let credential = c.take(n)?;
        Ok(AuthRepr {
            to,
            challenge,
            response,
            verified_you,
            you_verified_me,
            control_key,
            have_epoch,
            credential,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.credential.is_empty() || self.credential.len() > MAX_CREDENTIAL_LEN {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.to.0.to_le_bytes());
        out.extend_from_slice(&self.challenge);
        if let Some(k) = &self.control_key {
            if k.epoch == 0 || k.wrapped.is_empty() || k.wrapped.len() > 255 {
                return Err(Error::BadLength);
            }
        }
        let flags = self.response.is_some() as u8
            | (self.verified_you as u8) << 1
            | (self.you_verified_me as u8) << 2
            | (self.control_key.is_some() as u8) << 3;
        out.push(flags);
        if let Some(r) = &self.response {
            out.extend_from_slice(r);
        }
        if let Some(k) = &self.control_key {
            out.extend_from_slice(&k.epoch.to_le_bytes());
            out.push(k.wrapped.len() as u8);
            out.extend_from_slice(k.wrapped);
        }
        out.extend_from_slice(&self.have_epoch.to_le_bytes());
        out.extend_from_slice(&(self.credential.len() as u16).to_le_bytes());
        out.extend_from_slice(self.credential);
        Ok(())
    }
}

impl<'a> KeyRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#key
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
        Ok(KeyRepr {
            writer,
            reader,
            epoch,
            suite,
            wrapped,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.wrapped.is_empty() || self.wrapped.len() > 255 {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.push(self.suite);
        out.push(self.wrapped.len() as u8);
        out.extend_from_slice(self.wrapped);
        Ok(())
    }
}

impl KeyRequestRepr {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'_>) -> Result<Self, Error> {
        let reader = c.entity("reader")?;
        let writer = c.entity("writer")?;
        let epoch = c.u32()?;
        if epoch == 0 {
            return Err(Error::BadValue("epoch"));
        }
        Ok(KeyRequestRepr {
            reader,
            writer,
            epoch,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        Ok(())
    }
}

impl<'a> SealedRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#sealed
        let to = crate::ParticipantId(c.u64()?);
        let counter = c.u64()?;
        if counter == 0 {
            return Err(Error::BadValue("counter"));
        }
        let sealed = c.rest();
        if sealed.len() < 16 {
            return Err(Error::BadValue("sealed length"));
        }
        Ok(SealedRepr {
            to,
            counter,
            sealed,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.counter == 0 || self.sealed.len() < 16 {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.to.0.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
        out.extend_from_slice(self.sealed);
        Ok(())
    }
}

impl<'a> BatchSigRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#batch_sig
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
        Ok(BatchSigRepr {
            writer,
            first_seq,
            count,
            signature,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.writer.0 == 0 || self.first_seq == 0 || self.count == 0 {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.first_seq.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(self.signature);
        Ok(())
    }
}

/// Why a participant refused a peer's credential, as a REFUSAL says it
/// (`docs/wire.md#refusal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// Code 1: credential `serial` is revoked by the sender's revocation list `list`.
    Revoked {
        /// The refused credential's serial.
        serial: u64,
        /// The serial of the revocation list the sender holds.
        list: u64,
    },
    /// Code 2: the credential expired at `expires` (unix seconds; the sender's clock said
    /// `now`).
    Expired {
        /// When it expired.
        expires: u64,
        /// The sender's clock.
        now: u64,
    },
    /// Code 3: the credential is issued in the future by the sender's clock (`now`).
    NotYetValid {
        /// When it was issued.
        issued: u64,
        /// The sender's clock.
        now: u64,
    },
    /// Code 4, and any code this version does not define: refused for another reason
    /// (malformed, not the realm CA's signature).
    Other,
}

impl core::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            RefusalReason::Revoked { serial, list } => write!(
                f,
                "credential serial {serial} is revoked (its revocation list {list})"
            ),
            RefusalReason::Expired { expires, now } => write!(
                f,
                "credential expired at {expires} (its clock {now}, unix seconds)"
            ),
            RefusalReason::NotYetValid { issued, now } => write!(
                f,
                "credential issued at {issued}, in the future by its clock ({now}, unix \
                 seconds): a clock is wrong"
            ),
            RefusalReason::Other => {
                f.write_str("credential refused (malformed, or not signed by the realm's CA)")
            }
        }
    }
}

impl RefusalReason {
    /// The wire code and its two values.
    pub fn to_parts(self) -> (u8, u64, u64) {
        match self {
            RefusalReason::Revoked { serial, list } => (1, serial, list),
            RefusalReason::Expired { expires, now } => (2, expires, now),
            RefusalReason::NotYetValid { issued, now } => (3, issued, now),
            RefusalReason::Other => (4, 0, 0),
        }
    }

    /// From the wire code and its values (an undefined code reads as `Other`: a later
    /// version may name more reasons).
    pub fn from_parts(code: u8, a: u64, b: u64) -> RefusalReason {
        match code {
            1 => RefusalReason::Revoked { serial: a, list: b },
            2 => RefusalReason::Expired { expires: a, now: b },
            3 => RefusalReason::NotYetValid { issued: a, now: b },
            _ => RefusalReason::Other,
        }
    }
}

/// A participant tells a peer that it refused the peer's credential, and why
/// (`docs/wire.md#refusal`), signed with the sender's credential key over the challenge the
/// peer set it: the peer checks it against the credential the sender's AUTH presented, and
/// it cannot be replayed to another peer or under another challenge.
///
/// ```text
/// 0               8                               40  41              49              57
/// +---------------+-------------------------------+---+---------------+---------------+
/// |      to       |     challenge (32 bytes)      |cod|    value a    |    value b    |
/// +---------------+-------------------------------+---+---------------+---------------+
/// |                     signature (64 bytes)                                          |
/// +-----------------------------------------------------------------------------------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusalRepr<'a> {
    /// The participant refused (non-zero).
    pub to: crate::ParticipantId,
    /// The challenge `to` set the sender in its AUTH.
    pub challenge: [u8; 32],
    /// Why.
    pub reason: RefusalReason,
    /// Ed25519 signature by the sender over [`refusal_signed_bytes`].
    pub signature: &'a [u8; 64],
}

/// Bytes of a REFUSAL body.
pub const REFUSAL_LEN: usize = 8 + 32 + 1 + 8 + 8 + 64;

/// The bytes a REFUSAL's signature covers: `"tether refusal v1" | challenge | sender id |
/// refused id | code | value a | value b` (ids and values little-endian).
pub fn refusal_signed_bytes(
    challenge: &[u8; 32],
    sender: crate::ParticipantId,
    refused: crate::ParticipantId,
    reason: RefusalReason,
) -> [u8; 17 + 32 + 16 + 17] {
    let (code, a, b) = reason.to_parts();
    let mut out = [0u8; 82];
    out[..17].copy_from_slice(b"tether refusal v1");
    out[17..49].copy_from_slice(challenge);
    out[49..57].copy_from_slice(&sender.0.to_le_bytes());
    out[57..65].copy_from_slice(&refused.0.to_le_bytes());
    out[65] = code;
    out[66..74].copy_from_slice(&a.to_le_bytes());
    out[74..].copy_from_slice(&b.to_le_bytes());
    out
}

impl<'a> RefusalRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#refusal
        let to = crate::ParticipantId(c.u64()?);
        if to.0 == 0 {
            return Err(Error::BadValue("to"));
        }
        let challenge = c.array()?;
        let code = c.u8()?;
        let (a, b) = (c.u64()?, c.u64()?);
        let signature = c.array_ref()?;
        Ok(RefusalRepr {
            to,
            challenge,
            reason: RefusalReason::from_parts(code, a, b),
            signature,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.to.0 == 0 {
            return Err(Error::BadValue("to"));
        }
        let (code, a, b) = self.reason.to_parts();
        out.extend_from_slice(&self.to.0.to_le_bytes());
        out.extend_from_slice(&self.challenge);
        out.push(code);
        out.extend_from_slice(&a.to_le_bytes());
        out.extend_from_slice(&b.to_le_bytes());
        out.extend_from_slice(self.signature);
        Ok(())
    }
}
