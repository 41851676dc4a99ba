//! How a writer protects each sample, once, in a secure realm (`docs/wire.md#key`): the
//! protection byte, the seal under the sender key (its AAD binding writer, epoch, sequence
//! number, timestamp and protection), the Ed25519 signature, and the reader's inverse.
//!
//! The layout (protection byte, epoch, ciphertext, tag, signature) and the byte strings the
//! seal and signatures bind are `tether-wire`'s ([`tether_wire::ProtectedSample`],
//! [`tether_wire::sample_aad`], ...); this module only seals, opens, signs and verifies.

use tether_wire::{
    EntityId, ParticipantId, ProtectedSample, SampleProtection, SealedBody, lay_out_plain,
    lay_out_sealed, sample_signed_bytes, set_protection,
};

use crate::SenderKey;

/// How a secure writer protects its samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Protection {
    /// Sealed under the writer's sender key (confidentiality and integrity toward
    /// outsiders).
    pub encrypt: bool,
    /// Signed with the writer's Ed25519 key (origin authentication, also toward other
    /// members of the realm, who hold the group key).
    pub sign: bool,
}

impl Protection {
    /// The wire byte: bit 0 sealed, bit 1 signed.
    pub fn byte(self) -> u8 {
        self.wire(false).byte()
    }

    /// The protection byte's fields, batch-signed or not.
    fn wire(self, batch_signed: bool) -> SampleProtection {
        SampleProtection {
            sealed: self.encrypt,
            signed: self.sign,
            batch_signed: batch_signed && self.sign,
        }
    }

    fn from_wire(p: SampleProtection) -> Protection {
        Protection {
            encrypt: p.sealed,
            sign: p.signed,
        }
    }
}

/// A protection mode that is not `off`, `encrypt`, `sign` or `encrypt+sign`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode '{0}' (expected off, encrypt, sign or encrypt+sign)")]
pub struct UnknownProtection(pub String);

impl std::str::FromStr for Protection {
    type Err = UnknownProtection;
    fn from_str(s: &str) -> Result<Self, UnknownProtection> {
        let (encrypt, sign) = match s {
            "off" => (false, false),
            "encrypt" => (true, false),
            "sign" => (false, true),
            "encrypt+sign" => (true, true),
            _ => return Err(UnknownProtection(s.to_string())),
        };
        Ok(Protection { encrypt, sign })
    }
}

/// A writer or reader as 12 bytes: participant id, then entity id (both little-endian; see
/// [`tether_wire::endpoint_bytes`]).
pub fn endpoint_id(participant: u64, entity: u32) -> [u8; 12] {
    tether_wire::endpoint_bytes(ParticipantId(participant), EntityId(entity))
}

/// What a sealed sample is bound to besides its bytes: writer, epoch, sequence number and
/// source timestamp. None can be changed on the wire without the sample failing to open.
fn aad(
    key: &SenderKey,
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
    prot: Protection,
) -> [u8; 33] {
    tether_wire::sample_aad(writer, key.epoch(), seq, timestamp_ns, prot.wire(false))
}

/// Protection bit 2: the sample is signed by the BATCH that carries it (its BATCH_SIG), not
/// by a signature of its own. Not part of the AAD, so the same sealed body serves both.
pub const BATCH_SIGNED: u8 = SampleProtection::BATCH_SIGNED;

/// Protects a sample once: `protection ‖ (epoch ‖ ciphertext ‖ tag, or the plaintext) ‖
/// (signature)`.
#[allow(clippy::too_many_arguments)]
pub fn protect(
    prot: Protection,
    key: Option<&SenderKey>,
    signer: &crate::Identity,
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
    plain: &[u8],
) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    protect_inner(
        &mut v,
        prot,
        key,
        Some(signer),
        writer,
        seq,
        timestamp_ns,
        plain,
    )?;
    Some(v)
}

/// [`protect`] into `out`, whatever it held: a buffer taken back from an earlier sample
/// is reused as it is (no allocation; the bytes it already has are overwritten, not
/// zeroed first). `None` (and `out` unspecified) if it cannot seal.
#[allow(clippy::too_many_arguments)]
pub fn protect_into(
    out: &mut Vec<u8>,
    prot: Protection,
    key: Option<&SenderKey>,
    signer: &crate::Identity,
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
    plain: &[u8],
) -> Option<()> {
    protect_inner(
        out,
        prot,
        key,
        Some(signer),
        writer,
        seq,
        timestamp_ns,
        plain,
    )
}

/// [`protect`] for a sample that will travel in a signed batch: in `sign` modes it gets
/// protection bit 2 and no signature of its own ([`sign_batch`] signs the batch once). Sent
/// alone (a repair, or a sample too large for a batch) it needs [`individual`] first.
pub fn protect_for_batch(
    prot: Protection,
    key: Option<&SenderKey>,
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
    plain: &[u8],
) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    protect_inner(&mut v, prot, key, None, writer, seq, timestamp_ns, plain)?;
    Some(v)
}

/// `signer`: `None` for a batch-signed sample.
#[allow(clippy::too_many_arguments)]
fn protect_inner(
    v: &mut Vec<u8>,
    prot: Protection,
    key: Option<&SenderKey>,
    signer: Option<&crate::Identity>,
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
    plain: &[u8],
) -> Option<()> {
    let spare = if prot.sign {
        tether_wire::SIGNATURE_LEN
    } else {
        0
    };
    match (prot.encrypt, key) {
        (true, Some(k)) => {
            // Sealed straight from the application's bytes into the buffer (no copy
            // first); the signature, if any, is appended after.
            let (ct, tag) = lay_out_sealed(v, prot.wire(false), k.epoch(), plain.len(), spare);
            k.seal_into(
                seq,
                &aad(k, writer, seq, timestamp_ns, prot),
                plain,
                ct,
                tag,
            )
            .ok()?;
        }
        (true, None) => return None,
        (false, _) => lay_out_plain(v, prot.wire(false), plain, tether_wire::SIGNATURE_LEN),
    }
    match (prot.sign, signer) {
        (true, Some(signer)) => {
            let sig = signer.sign(&sample_signed_bytes(writer, seq, timestamp_ns, v));
            v.extend_from_slice(&sig);
        }
        (true, None) => set_protection(v, prot.wire(true)),
        (false, _) => {}
    }
    Some(())
}

/// A batch-signed sample (protection bit 2) made to travel alone: bit 2 cleared and its own
/// signature appended. `None` if `p` is not a batch-signed sample. Ed25519 is deterministic,
/// so the same sample always gives the same bytes (fragment repairs stay consistent).
pub fn individual(
    p: &[u8],
    signer: &crate::Identity,
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
) -> Option<Vec<u8>> {
    let mut repr = ProtectedSample::parse(p).ok()?.repr();
    if !repr.protection.batch_signed {
        return None;
    }
    repr.protection.batch_signed = false;
    let mut v = Vec::with_capacity(p.len() + tether_wire::SIGNATURE_LEN);
    repr.emit_head(&mut v).ok()?;
    let sig = signer.sign(&sample_signed_bytes(writer, seq, timestamp_ns, &v));
    v.extend_from_slice(&sig);
    Some(v)
}

/// What a batch signature covers: a domain separator, the writer, the first sequence
/// number, the count, and the SHA-256 of the entries exactly as the BATCH carries them.
fn batch_signed_bytes(writer: &[u8; 12], first_seq: u64, count: u32, entries: &[u8]) -> [u8; 71] {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, entries);
    let digest: &[u8; 32] = digest.as_ref().try_into().expect("SHA-256 is 32 bytes");
    tether_wire::batch_signed_bytes(writer, first_seq, count, digest)
}

/// One signature for a whole batch of batch-signed samples.
pub fn sign_batch(
    signer: &crate::Identity,
    writer: &[u8; 12],
    first_seq: u64,
    count: u32,
    entries: &[u8],
) -> [u8; 64] {
    signer.sign(&batch_signed_bytes(writer, first_seq, count, entries))
}

/// Whether `sig` is the writer's signature over this batch.
pub fn batch_signature_ok(
    public: &[u8; 32],
    writer: &[u8; 12],
    first_seq: u64,
    count: u32,
    entries: &[u8],
    sig: &[u8],
) -> bool {
    crate::Identity::verify(
        public,
        &batch_signed_bytes(writer, first_seq, count, entries),
        sig,
    )
}

/// A protected payload taken apart (a [`ProtectedSample`] view, in the terms the engine
/// uses): its protection, the signature if any, and the body (sealed or plain) between them.
#[derive(Debug, Clone, Copy)]
pub struct Parts<'a> {
    /// Sealed, signed, or both.
    pub prot: Protection,
    /// Everything the signature covers (the protection byte and the body).
    pub head: &'a [u8],
    /// `epoch ‖ ciphertext ‖ tag` if sealed, else the plain sample.
    pub body: &'a [u8],
    /// The signature, if signed on its own.
    pub sig: Option<&'a [u8]>,
    /// Signed by the batch that carries it (protection bit 2), not on its own.
    pub batch_signed: bool,
}

/// Takes a protected payload apart; `None` if malformed (unknown protection bits, too
/// short for its signature or its seal).
pub fn parts(p: &[u8]) -> Option<Parts<'_>> {
    let v = ProtectedSample::parse(p).ok()?;
    Some(Parts {
        prot: Protection::from_wire(v.protection()),
        head: v.head(),
        body: v.body(),
        sig: v.signature().map(|s| s.as_slice()),
        batch_signed: v.protection().batch_signed,
    })
}

/// Whether a signed payload's signature is the writer's.
pub fn signature_ok(
    parts: &Parts<'_>,
    public: &[u8; 32],
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
) -> bool {
    parts.sig.is_some_and(|sig| {
        crate::Identity::verify(
            public,
            &sample_signed_bytes(writer, seq, timestamp_ns, parts.head),
            sig,
        )
    })
}

/// The epoch a sealed body names.
pub fn sealed_epoch(body: &[u8]) -> Option<u32> {
    SealedBody::parse(body).ok().map(|b| b.epoch)
}

/// Opens a sealed body (`epoch ‖ ciphertext ‖ tag`); `None` if it does not authenticate.
pub fn open(
    key: &SenderKey,
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
    prot: Protection,
    body: &[u8],
) -> Option<Vec<u8>> {
    // Straight from the received bytes into a buffer exactly as long as the plaintext: no
    // copy of the ciphertext first (the zero fill safe Rust needs only writes), and
    // `Bytes::from` takes a buffer whose length is its capacity without another allocation.
    let sealed = SealedBody::parse(body).ok()?.sealed;
    let mut v = vec![0u8; sealed.len().checked_sub(crate::TAG_LEN)?];
    key.open_into(
        seq,
        &aad(key, writer, seq, timestamp_ns, prot),
        sealed,
        &mut v,
    )
    .ok()?;
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Identity, Suite};

    /// A batch-signed sample opens like any other, carries no signature of its own, turns
    /// into the individually signed form on demand (the same bytes every time), and the
    /// batch signature covers every entry byte.
    #[test]
    fn batch_signatures() {
        let id = Identity::generate();
        let key = SenderKey::generate(Suite::Aes128Gcm, 1, &mut crate::OsRandom);
        let w = endpoint_id(7, 3);
        for mode in ["sign", "encrypt+sign"] {
            let prot: Protection = mode.parse().unwrap();
            let b = protect_for_batch(prot, Some(&key), &w, 5, 99, b"payload").unwrap();
            let p = parts(&b).unwrap();
            assert!(p.batch_signed && p.sig.is_none(), "{mode}");
            let alone = individual(&b, &id, &w, 5, 99).unwrap();
            assert_eq!(alone, individual(&b, &id, &w, 5, 99).unwrap());
            assert_eq!(
                alone,
                protect(prot, Some(&key), &id, &w, 5, 99, b"payload").unwrap()
            );
            let q = parts(&alone).unwrap();
            assert!(!q.batch_signed && signature_ok(&q, &id.sign_public(), &w, 5, 99));
            if prot.encrypt {
                // One sealed body for both forms: bit 2 is outside the AAD.
                assert_eq!(open(&key, &w, 5, 99, p.prot, p.body).unwrap(), b"payload");
                assert_eq!(p.body, q.body);
            }
            assert!(individual(&alone, &id, &w, 5, 99).is_none());
        }
        let entries = b"entries of a batch".to_vec();
        let sig = sign_batch(&id, &w, 10, 3, &entries);
        assert!(batch_signature_ok(
            &id.sign_public(),
            &w,
            10,
            3,
            &entries,
            &sig
        ));
        let mut e = entries.clone();
        e[4] ^= 1;
        assert!(!batch_signature_ok(&id.sign_public(), &w, 10, 3, &e, &sig));
        assert!(!batch_signature_ok(
            &id.sign_public(),
            &w,
            11,
            3,
            &entries,
            &sig
        ));
        assert!(!batch_signature_ok(
            &id.sign_public(),
            &w,
            10,
            2,
            &entries,
            &sig
        ));
        let other = Identity::generate();
        assert!(!batch_signature_ok(
            &other.sign_public(),
            &w,
            10,
            3,
            &entries,
            &sig
        ));
    }

    /// Every mode round-trips; the seal binds every field and the protection byte, and the
    /// signature covers every byte before it.
    #[test]
    fn protect_and_take_apart() {
        let id = Identity::generate();
        let key = SenderKey::generate(Suite::Aes128Gcm, 2, &mut crate::OsRandom);
        let w = endpoint_id(7, 3);
        for mode in ["off", "encrypt", "sign", "encrypt+sign"] {
            let prot: Protection = mode.parse().unwrap();
            let p = protect(prot, Some(&key), &id, &w, 9, 1234, b"payload").unwrap();
            let parts = parts(&p).unwrap();
            assert_eq!(parts.prot, prot);
            if prot.sign {
                assert!(signature_ok(&parts, &id.sign_public(), &w, 9, 1234));
                assert!(!signature_ok(&parts, &id.sign_public(), &w, 9, 1235));
            }
            let plain = if prot.encrypt {
                assert_eq!(sealed_epoch(parts.body), Some(2));
                assert!(open(&key, &w, 9, 1235, prot, parts.body).is_none());
                assert!(open(&key, &w, 10, 1234, prot, parts.body).is_none());
                open(&key, &w, 9, 1234, prot, parts.body).unwrap()
            } else {
                parts.body.to_vec()
            };
            assert_eq!(plain, b"payload", "{mode}");
        }
        // Sealing without a key is refused; unknown protection bits too.
        let enc: Protection = "encrypt".parse().unwrap();
        assert!(protect(enc, None, &id, &w, 1, 1, b"x").is_none());
        assert!(parts(&[4, 0, 0]).is_none(), "batch-signed without sign");
        assert!(parts(&[8, 0, 0]).is_none());
        assert!("loud".parse::<Protection>().is_err());
        assert_eq!(
            "loud".parse::<Protection>().unwrap_err().to_string(),
            "unknown mode 'loud' (expected off, encrypt, sign or encrypt+sign)"
        );
    }
}
