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
    let b = prot.byte();
    let mut v = match (prot.encrypt, key) {
        (true, Some(k)) => {
            // Sealed straight from the application's bytes into the new buffer (no copy
            // first); the signature, if any, is appended after.
            let len = 1 + 4 + plain.len() + crate::TAG_LEN;
            let mut v = Vec::with_capacity(len + if prot.sign { 64 } else { 0 });
            v.resize(len, 0);
            v[0] = b;
            v[1..5].copy_from_slice(&k.epoch().to_le_bytes());
            let (ct, tag) = v[5..].split_at_mut(plain.len());
            let tag: &mut [u8; crate::TAG_LEN] = tag.try_into().ok()?;
            k.seal_into(seq, &aad(k, writer, seq, timestamp_ns, b), plain, ct, tag)
                .ok()?;
            v
        }
        (true, None) => return None,
        (false, _) => {
            let mut v = Vec::with_capacity(1 + plain.len() + 64);
            v.push(b);
            v.extend_from_slice(plain);
            v
        }
    };
    if prot.sign {
        let sig = signer.sign(&signed_bytes(writer, seq, timestamp_ns, &v));
        v.extend_from_slice(&sig);
    }
    Some(v)
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
    /// The signature, if signed.
    pub sig: Option<&'a [u8]>,
}

/// Takes a protected payload apart; `None` if malformed (unknown protection bits, too
/// short for its signature or its seal).
pub fn parts(p: &[u8]) -> Option<Parts<'_>> {
    let b = *p.first()?;
    if b & !3 != 0 {
        return None;
    }
    let prot = Protection {
        encrypt: b & 1 != 0,
        sign: b & 2 != 0,
    };
    let (head, sig) = if prot.sign {
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
    let mut v = body.get(4..)?.to_vec();
    let n = key
        .open_in_place(
            seq,
            &aad(key, writer, seq, timestamp_ns, prot.byte()),
            &mut v,
        )
        .ok()?
        .len();
    v.truncate(n);
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Identity, Suite};

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
        assert!(parts(&[4, 0, 0]).is_none());
        assert!("loud".parse::<Protection>().is_err());
    }
}
