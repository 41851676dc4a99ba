//! How a writer protects each sample, once, in a secure realm (`docs/wire.md#key`): the
//! protection byte, the seal under the sender key (its AAD binding writer, epoch, sequence
//! number, timestamp and protection), the Ed25519 signature, and the reader's inverse.

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
        self.encrypt as u8 | (self.sign as u8) << 1
    }
}

impl std::str::FromStr for Protection {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (encrypt, sign) = match s {
            "off" => (false, false),
            "encrypt" => (true, false),
            "sign" => (false, true),
            "encrypt+sign" => (true, true),
            _ => {
                return Err(format!(
                    "unknown mode '{s}' (expected off, encrypt, sign or encrypt+sign)"
                ));
            }
        };
        Ok(Protection { encrypt, sign })
    }
}

/// A writer or reader as 12 bytes: participant id, then entity id (both little-endian).
pub fn endpoint_id(participant: u64, entity: u32) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&participant.to_le_bytes());
    b[8..].copy_from_slice(&entity.to_le_bytes());
    b
}

/// What a sealed sample is bound to besides its bytes: writer, epoch, sequence number and
/// source timestamp. None can be changed on the wire without the sample failing to open.
fn aad(key: &SenderKey, writer: &[u8; 12], seq: u64, timestamp_ns: u64, prot: u8) -> [u8; 33] {
    let mut a = [0u8; 33];
    a[..24].copy_from_slice(&key.sample_aad(writer, seq));
    a[24..32].copy_from_slice(&timestamp_ns.to_be_bytes());
    a[32] = prot;
    a
}

/// What a writer signs: a domain separator, the writer, sequence number, timestamp, and
/// the protected bytes before the signature (protection byte included).
fn signed_bytes(writer: &[u8; 12], seq: u64, timestamp_ns: u64, head: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + 12 + 16 + head.len());
    v.extend_from_slice(b"tether sample v1");
    v.extend_from_slice(writer);
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(&timestamp_ns.to_be_bytes());
    v.extend_from_slice(head);
    v
}

/// Protection bit 2: the sample is signed by the BATCH that carries it (its BATCH_SIG), not
/// by a signature of its own. Not part of the AAD, so the same sealed body serves both.
pub const BATCH_SIGNED: u8 = 4;

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
    let b = prot.byte();
    match (prot.encrypt, key) {
        (true, Some(k)) => {
            // Sealed straight from the application's bytes into the buffer (no copy
            // first); the signature, if any, is appended after. A reused buffer long
            // enough is cut to length, not cleared: the seal overwrites every byte.
            let len = 1 + 4 + plain.len() + crate::TAG_LEN;
            v.reserve(len.saturating_sub(v.len()) + if prot.sign { 64 } else { 0 });
            if v.len() >= len {
                v.truncate(len);
            } else {
                v.resize(len, 0);
            }
            v[0] = b;
            v[1..5].copy_from_slice(&k.epoch().to_le_bytes());
            let (ct, tag) = v[5..].split_at_mut(plain.len());
            let tag: &mut [u8; crate::TAG_LEN] = tag.try_into().ok()?;
            k.seal_into(seq, &aad(k, writer, seq, timestamp_ns, b), plain, ct, tag)
                .ok()?;
        }
        (true, None) => return None,
        (false, _) => {
            v.clear();
            v.reserve(1 + plain.len() + 64);
            v.push(b);
            v.extend_from_slice(plain);
        }
    }
    match (prot.sign, signer) {
        (true, Some(signer)) => {
            let sig = signer.sign(&signed_bytes(writer, seq, timestamp_ns, v));
            v.extend_from_slice(&sig);
        }
        (true, None) => v[0] |= BATCH_SIGNED,
        (false, _) => {}
    }
    Some(())
}

/// A batch-signed sample (protection bit 2) made to travel alone: bit 2 cleared and its own
/// signature appended. `None` if `p` is not batch-signed. Ed25519 is deterministic, so the
/// same sample always gives the same bytes (fragment repairs stay consistent).
pub fn individual(
    p: &[u8],
    signer: &crate::Identity,
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
) -> Option<Vec<u8>> {
    if p.first()? & BATCH_SIGNED == 0 {
        return None;
    }
    let mut v = Vec::with_capacity(p.len() + 64);
    v.extend_from_slice(p);
    v[0] &= !BATCH_SIGNED;
    let sig = signer.sign(&signed_bytes(writer, seq, timestamp_ns, &v));
    v.extend_from_slice(&sig);
    Some(v)
}

/// What a batch signature covers: a domain separator, the writer, the first sequence
/// number, the count, and the SHA-256 of the entries exactly as the BATCH carries them.
fn batch_signed_bytes(writer: &[u8; 12], first_seq: u64, count: u32, entries: &[u8]) -> Vec<u8> {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, entries);
    let mut v = Vec::with_capacity(15 + 12 + 12 + 32);
    v.extend_from_slice(b"tether batch v1");
    v.extend_from_slice(writer);
    v.extend_from_slice(&first_seq.to_be_bytes());
    v.extend_from_slice(&count.to_be_bytes());
    v.extend_from_slice(digest.as_ref());
    v
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

/// A protected payload taken apart: its protection, the signature if any, and the body
/// (sealed or plain) between them.
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
    let b = *p.first()?;
    let batch_signed = b & BATCH_SIGNED != 0;
    if b & !7 != 0 || (batch_signed && b & 2 == 0) {
        return None;
    }
    let prot = Protection {
        encrypt: b & 1 != 0,
        sign: b & 2 != 0,
    };
    let (head, sig) = if prot.sign && !batch_signed {
        let at = p.len().checked_sub(64)?;
        (&p[..at], Some(&p[at..]))
    } else {
        (p, None)
    };
    let body = head.get(1..)?;
    if prot.encrypt && body.len() < 4 + crate::TAG_LEN {
        return None;
    }
    Some(Parts {
        prot,
        head,
        body,
        sig,
        batch_signed,
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
            &signed_bytes(writer, seq, timestamp_ns, parts.head),
            sig,
        )
    })
}

/// The epoch a sealed body names.
pub fn sealed_epoch(body: &[u8]) -> Option<u32> {
    (body.len() >= 4 + crate::TAG_LEN)
        .then(|| u32::from_le_bytes(body[..4].try_into().expect("4 bytes")))
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
    let sealed = body.get(4..)?;
    let mut v = vec![0u8; sealed.len().checked_sub(crate::TAG_LEN)?];
    key.open_into(
        seq,
        &aad(key, writer, seq, timestamp_ns, prot.byte()),
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
        let key = SenderKey::generate(Suite::Aes128Gcm, 1);
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
        let key = SenderKey::generate(Suite::Aes128Gcm, 2);
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
    }
}
