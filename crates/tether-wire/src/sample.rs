//! The protected sample (`docs/wire.md#key`): what DATA, DATA_FRAG and each BATCH entry carry
//! in a secure realm, and the byte strings its seal and signatures bind (nonce, associated
//! data, signed bytes). `tether-crypto` seals, opens, signs and verifies; the bytes are laid
//! out and parsed here.
//!
//! ```text
//! +------------+-------------------------------------------+-----------------+
//! | protection | sealed: epoch (u32 LE) | ciphertext | tag  | signature (64)  |
//! |    (1)     | or the plain sample                      | if signed alone |
//! +------------+-------------------------------------------+-----------------+
//! ```

use crate::{Cursor, EntityId, Error, ParticipantId};

/// Bytes of the AEAD tag that ends a sealed body.
pub const SAMPLE_TAG_LEN: usize = 16;
/// Bytes of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;
/// Bytes of a sealed body before the ciphertext: the epoch.
pub const SEALED_EPOCH_LEN: usize = 4;

/// The protection byte: how the writer protected the sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SampleProtection {
    /// Bit 0: sealed under the writer's sender key.
    pub sealed: bool,
    /// Bit 1: signed by the writer.
    pub signed: bool,
    /// Bit 2: signed by the BATCH that carries it (its BATCH_SIG), not by a signature of
    /// its own. Only with `signed`.
    pub batch_signed: bool,
}

impl SampleProtection {
    /// Bit 0 of the protection byte.
    pub const SEALED: u8 = 1;
    /// Bit 1 of the protection byte.
    pub const SIGNED: u8 = 2;
    /// Bit 2 of the protection byte.
    pub const BATCH_SIGNED: u8 = 4;

    /// The wire byte.
    pub fn byte(self) -> u8 {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        bit(self.sealed, Self::SEALED)
            | bit(self.signed, Self::SIGNED)
            | bit(self.batch_signed, Self::BATCH_SIGNED)
    }

    /// From the wire byte: other bits must be zero, and bit 2 needs bit 1.
    pub fn from_byte(b: u8) -> Result<Self, Error> {
        let p = SampleProtection {
            sealed: b & Self::SEALED != 0,
            signed: b & Self::SIGNED != 0,
            batch_signed: b & Self::BATCH_SIGNED != 0,
        };
        if b & !7 != 0 || (p.batch_signed && !p.signed) {
            return Err(Error::BadValue("protection"));
        }
        Ok(p)
    }

    /// Whether the sample ends with a signature of its own.
    pub fn signed_alone(self) -> bool {
        self.signed && !self.batch_signed
    }
}

/// A sealed body: `epoch (u32 LE) ‖ ciphertext ‖ tag (16)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedBody<'a> {
    /// The sender key's epoch.
    pub epoch: u32,
    /// The ciphertext, then the tag (at least [`SAMPLE_TAG_LEN`] bytes).
    pub sealed: &'a [u8],
}

impl<'a> SealedBody<'a> {
    /// Parses a sealed body; it must hold at least the epoch and a tag.
    pub fn parse(body: &'a [u8]) -> Result<Self, Error> {
        let mut c = Cursor::new(body);
        let epoch = c.u32()?;
        let sealed = c.rest();
        if sealed.len() < SAMPLE_TAG_LEN {
            return Err(Error::Truncated);
        }
        Ok(SealedBody { epoch, sealed })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn len(&self) -> usize {
        SEALED_EPOCH_LEN + self.sealed.len()
    }

    /// Never true: a sealed body holds at least its epoch.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Appends the body.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(self.sealed);
    }
}

/// The body of a protected sample, between the protection byte and the signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleBody<'a> {
    /// The sample in clear (protection bit 0 clear).
    Plain(&'a [u8]),
    /// The sample sealed (protection bit 0 set).
    Sealed(SealedBody<'a>),
}

impl SampleBody<'_> {
    /// Bytes it takes on the wire.
    pub fn len(&self) -> usize {
        match self {
            SampleBody::Plain(p) => p.len(),
            SampleBody::Sealed(s) => s.len(),
        }
    }

    /// True if it takes no bytes (an empty plain sample).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A checked view of a protected sample: the layout is valid; the accessors give slices of
/// the bytes it was parsed from (what a signature covers, what a seal opens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtectedSample<'a> {
    bytes: &'a [u8],
    protection: SampleProtection,
    head_len: usize,
}

impl<'a> ProtectedSample<'a> {
    /// Checks the layout of `bytes`: a known protection byte, a sealed body of at least the
    /// epoch and a tag, and the signature if the sample is signed on its own.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        //= docs/wire.md#key
        //# A protected sample whose protection byte has bits other than 0 to 2 set, or bit 2 without
        //# bit 1, that is sealed but shorter than its epoch and tag, or that is signed on its own but
        //# shorter than its signature, is malformed.
        let mut c = Cursor::new(bytes);
        let protection = SampleProtection::from_byte(c.u8()?)?;
        let sig = if protection.signed_alone() {
            SIGNATURE_LEN
        } else {
            0
        };
        let body_len = c.remaining().checked_sub(sig).ok_or(Error::Truncated)?;
        let body = c.take(body_len)?;
        if protection.sealed {
            SealedBody::parse(body)?;
        }
        Ok(ProtectedSample {
            bytes,
            protection,
            head_len: 1 + body_len,
        })
    }

    /// The protection byte.
    pub fn protection(&self) -> SampleProtection {
        self.protection
    }

    /// The protection byte and the body: what the writer's own signature covers.
    pub fn head(&self) -> &'a [u8] {
        let (head, _) = self.bytes.split_at(self.head_len);
        head
    }

    /// The body as it travels: `epoch ‖ ciphertext ‖ tag` if sealed, else the plain sample.
    pub fn body(&self) -> &'a [u8] {
        let (_, body) = self.head().split_at(1);
        body
    }

    /// The sample's own signature, if it is signed on its own.
    pub fn signature(&self) -> Option<&'a [u8; SIGNATURE_LEN]> {
        let (_, sig) = self.bytes.split_at(self.head_len);
        sig.try_into().ok()
    }

    /// The parsed fields.
    pub fn repr(&self) -> ProtectedSampleRepr<'a> {
        let body = if self.protection.sealed {
            // Checked when parsed.
            SampleBody::Sealed(SealedBody::parse(self.body()).unwrap_or(SealedBody {
                epoch: 0,
                sealed: &[],
            }))
        } else {
            SampleBody::Plain(self.body())
        };
        ProtectedSampleRepr {
            protection: self.protection,
            body,
            signature: self.signature(),
        }
    }
}

/// A protected sample's fields (`docs/wire.md#key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtectedSampleRepr<'a> {
    /// The protection byte; `sealed` must agree with `body`.
    pub protection: SampleProtection,
    /// Sealed or plain.
    pub body: SampleBody<'a>,
    /// The signature, exactly when the sample is signed on its own
    /// ([`SampleProtection::signed_alone`]).
    pub signature: Option<&'a [u8; SIGNATURE_LEN]>,
}

impl<'a> ProtectedSampleRepr<'a> {
    /// Parses a protected sample (see [`ProtectedSample::parse`]).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        ProtectedSample::parse(bytes).map(|v| v.repr())
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn len(&self) -> usize {
        1 + self.body.len() + self.signature.map_or(0, |s| s.len())
    }

    /// Never true: a protected sample holds at least its protection byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Appends the protection byte and the body: what the writer's own signature covers
    /// (the signature itself is not checked or written).
    pub fn emit_head(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        let sealed = matches!(self.body, SampleBody::Sealed(s) if s.sealed.len() >= SAMPLE_TAG_LEN);
        let plain = matches!(self.body, SampleBody::Plain(_));
        if (self.protection.sealed && !sealed)
            || (!self.protection.sealed && !plain)
            || (self.protection.batch_signed && !self.protection.signed)
        {
            return Err(Error::BadValue("protection"));
        }
        out.push(self.protection.byte());
        match self.body {
            SampleBody::Plain(p) => out.extend_from_slice(p),
            SampleBody::Sealed(s) => s.emit(out),
        }
        Ok(())
    }

    /// Appends the whole protected sample; the signature must be present exactly when the
    /// sample is signed on its own.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.protection.signed_alone() != self.signature.is_some() {
            return Err(Error::BadValue("signature"));
        }
        self.emit_head(out)?;
        if let Some(sig) = self.signature {
            out.extend_from_slice(sig);
        }
        Ok(())
    }
}

/// Lays out a sealed sample of `plain_len` bytes in `out`, whatever it held (a buffer taken
/// back from an earlier sample is cut to length, not cleared: the seal overwrites every
/// byte), with room for `spare` more bytes (a signature), and returns the ciphertext and
/// tag regions for the seal to fill. The protection byte and epoch are written.
pub fn lay_out_sealed(
    out: &mut Vec<u8>,
    protection: SampleProtection,
    epoch: u32,
    plain_len: usize,
    spare: usize,
) -> (&mut [u8], &mut [u8; SAMPLE_TAG_LEN]) {
    let len = 1 + SEALED_EPOCH_LEN + plain_len + SAMPLE_TAG_LEN;
    out.reserve(len.saturating_sub(out.len()) + spare);
    if out.len() >= len {
        out.truncate(len);
    } else {
        out.resize(len, 0);
    }
    let (head, rest) = out.split_at_mut(1 + SEALED_EPOCH_LEN);
    let (byte, epoch_bytes) = head.split_at_mut(1);
    byte[0] = protection.byte();
    epoch_bytes.copy_from_slice(&epoch.to_le_bytes());
    let (ct, tag) = rest.split_at_mut(plain_len);
    let tag: &mut [u8; SAMPLE_TAG_LEN] = tag.try_into().expect("laid out to the tag's length");
    (ct, tag)
}

/// Lays out a plain sample in `out` (cleared first), with room for `spare` more bytes.
pub fn lay_out_plain(out: &mut Vec<u8>, protection: SampleProtection, plain: &[u8], spare: usize) {
    out.clear();
    out.reserve(1 + plain.len() + spare);
    out.push(protection.byte());
    out.extend_from_slice(plain);
}

/// Rewrites the protection byte of a laid-out sample (e.g. to mark it batch-signed).
/// Does nothing to an empty buffer.
pub fn set_protection(sample: &mut [u8], protection: SampleProtection) {
    if let Some(b) = sample.first_mut() {
        *b = protection.byte();
    }
}

/// A writer or reader as 12 bytes (`writer (12)` in `docs/wire.md#key`): participant id,
/// then entity id, both little-endian.
pub fn endpoint_bytes(participant: ParticipantId, entity: EntityId) -> [u8; 12] {
    let mut b = [0u8; 12];
    let (p, e) = b.split_at_mut(8);
    p.copy_from_slice(&participant.0.to_le_bytes());
    e.copy_from_slice(&entity.0.to_le_bytes());
    b
}

/// A sender key's nonce for sequence number `seq`: `epoch (u32 BE) ‖ seq (u64 BE)`.
pub fn sender_key_nonce(epoch: u32, seq: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    let (e, s) = n.split_at_mut(4);
    e.copy_from_slice(&epoch.to_be_bytes());
    s.copy_from_slice(&seq.to_be_bytes());
    n
}

/// What a sender key binds to a sealed message besides its bytes: `writer (12) ‖ epoch (u32
/// BE) ‖ seq (u64 BE)`.
pub fn sender_key_aad(writer: &[u8; 12], epoch: u32, seq: u64) -> [u8; 24] {
    let mut a = [0u8; 24];
    let (w, n) = a.split_at_mut(12);
    w.copy_from_slice(writer);
    n.copy_from_slice(&sender_key_nonce(epoch, seq));
    a
}

/// The associated data of a sealed sample: `writer (12) ‖ epoch (u32 BE) ‖ seq (u64 BE) ‖
/// timestamp (u64 BE) ‖ protection`, where protection bit 2 is left out (the same sealed
/// body serves a batch-signed sample and the same sample signed alone).
pub fn sample_aad(
    writer: &[u8; 12],
    epoch: u32,
    seq: u64,
    timestamp_ns: u64,
    protection: SampleProtection,
) -> [u8; 33] {
    let mut a = [0u8; 33];
    let (k, rest) = a.split_at_mut(24);
    k.copy_from_slice(&sender_key_aad(writer, epoch, seq));
    let (t, p) = rest.split_at_mut(8);
    t.copy_from_slice(&timestamp_ns.to_be_bytes());
    p[0] = protection.byte() & !SampleProtection::BATCH_SIGNED;
    a
}

/// What a writer signs for a sample signed on its own: `"tether sample v1" ‖ writer (12) ‖
/// seq (u64 BE) ‖ timestamp (u64 BE) ‖` every byte before the signature (`head`).
pub fn sample_signed_bytes(writer: &[u8; 12], seq: u64, timestamp_ns: u64, head: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + 12 + 16 + head.len());
    v.extend_from_slice(b"tether sample v1");
    v.extend_from_slice(writer);
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(&timestamp_ns.to_be_bytes());
    v.extend_from_slice(head);
    v
}

/// What a BATCH_SIG signs (`docs/wire.md#batch_sig`): `"tether batch v1" ‖ writer (12) ‖
/// first_seq (u64 BE) ‖ count (u32 BE) ‖ SHA-256(entries)`.
pub fn batch_signed_bytes(
    writer: &[u8; 12],
    first_seq: u64,
    count: u32,
    entries_digest: &[u8; 32],
) -> [u8; 15 + 12 + 12 + 32] {
    let mut v = [0u8; 71];
    let (label, rest) = v.split_at_mut(15);
    label.copy_from_slice(b"tether batch v1");
    let (w, rest) = rest.split_at_mut(12);
    w.copy_from_slice(writer);
    let (f, rest) = rest.split_at_mut(8);
    f.copy_from_slice(&first_seq.to_be_bytes());
    let (c, d) = rest.split_at_mut(4);
    c.copy_from_slice(&count.to_be_bytes());
    d.copy_from_slice(entries_digest);
    v
}
