//! The control plane of a secure realm (`docs/wire.md#auth_tag`): one key per participant
//! that authenticates every datagram it sends (a GMAC over the datagram, one per datagram
//! whatever the number of receivers), wrapped for each verified peer like a sender key; and
//! the sealing of credentials in AUTH under a key derived from the realm secret, so that
//! only members read names and grants.

use aws_lc_rs::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
use zeroize::Zeroizing;

use crate::{Random, RealmSecret};

/// Bytes of a datagram's authentication tag.
pub const CONTROL_TAG_LEN: usize = 16;

/// Bytes of a control key (AES-128-GCM).
const CONTROL_KEY_LEN: usize = 16;

/// A participant's key for one epoch that authenticates the datagrams it sends. Members it
/// verified hold it too (wrapped for each), so one tag per datagram serves every receiver.
pub struct ControlKey {
    epoch: u32,
    raw: Zeroizing<[u8; CONTROL_KEY_LEN]>,
    key: LessSafeKey,
}

impl std::fmt::Debug for ControlKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ControlKey(epoch {})", self.epoch)
    }
}

fn nonce(epoch: u32, counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&epoch.to_be_bytes());
    n[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

impl ControlKey {
    /// A fresh random key for `epoch` (≥ 1).
    pub fn generate(epoch: u32, rng: &mut dyn Random) -> ControlKey {
        let raw: [u8; CONTROL_KEY_LEN] = crate::random_array(rng);
        ControlKey::from_bytes(epoch, &raw).expect("16 bytes make an AES-128 key")
    }

    /// The key of `epoch` from its bytes; `None` unless 16 bytes.
    pub fn from_bytes(epoch: u32, b: &[u8]) -> Option<ControlKey> {
        let raw: [u8; CONTROL_KEY_LEN] = b.try_into().ok()?;
        let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &raw).ok()?);
        Some(ControlKey {
            epoch,
            raw: Zeroizing::new(raw),
            key,
        })
    }

    /// Its epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Its bytes (secret: only to be wrapped for a verified peer).
    pub fn key_bytes(&self) -> &[u8] {
        &self.raw[..]
    }

    /// Authenticates a datagram for `to` (a participant id; 0: any receiver): AES-128-GCM
    /// under nonce `counter` (≥ 1, never repeated for two different datagrams under one key)
    /// with `covered` (every byte of the datagram before its AUTH_TAG) as associated data and
    /// `to` as the plaintext. Returns `to` sealed and the tag: a receiver that opens them
    /// knows the datagram was meant for it, so one replayed to another member is refused.
    pub fn tag(&self, counter: u64, covered: &[u8], to: u64) -> ([u8; 8], [u8; CONTROL_TAG_LEN]) {
        let mut sealed_to = to.to_le_bytes();
        let t = self
            .key
            .seal_in_place_separate_tag(
                nonce(self.epoch, counter),
                Aad::from(covered),
                &mut sealed_to,
            )
            .expect("sealing 8 bytes cannot fail");
        (
            sealed_to,
            t.as_ref().try_into().expect("a GCM tag is 16 bytes"),
        )
    }

    /// The participant a datagram was authenticated for (0: any), if `sealed_to` and `tag`
    /// verify over `covered` under `counter` (constant time).
    pub fn open(
        &self,
        counter: u64,
        covered: &[u8],
        sealed_to: &[u8; 8],
        tag: &[u8; CONTROL_TAG_LEN],
    ) -> Option<u64> {
        let mut buf = [0u8; 8 + CONTROL_TAG_LEN];
        buf[..8].copy_from_slice(sealed_to);
        buf[8..].copy_from_slice(tag);
        let to = self
            .key
            .open_in_place(nonce(self.epoch, counter), Aad::from(covered), &mut buf)
            .ok()?;
        Some(u64::from_le_bytes(to.try_into().ok()?))
    }
}

/// What a control key is bound to when wrapped for one peer: the realm, the sender, the
/// receiver and the epoch, under its own label (never confused with a sender key's).
pub fn control_wrap_context(realm: &[u8; 32], sender: u64, to: u64, epoch: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(22 + 32 + 8 + 8 + 4);
    v.extend_from_slice(b"tether control key v1");
    v.extend_from_slice(realm);
    v.extend_from_slice(&sender.to_be_bytes());
    v.extend_from_slice(&to.to_be_bytes());
    v.extend_from_slice(&epoch.to_be_bytes());
    v
}

const CREDENTIAL_SALT: &[u8] = b"tether auth credential v1";

/// Bytes sealing adds to a credential: a random nonce (12) and the tag (16).
pub const CREDENTIAL_SEAL_OVERHEAD: usize = 12 + 16;

fn credential_key(secret: &RealmSecret) -> LessSafeKey {
    let prk = Salt::new(HKDF_SHA256, CREDENTIAL_SALT).extract(secret.as_bytes());
    let okm = prk
        .expand(&[b"auth"], &AES_256_GCM)
        .expect("one block of output");
    LessSafeKey::new(UnboundKey::from(okm))
}

fn credential_aad(sender: u64, to: u64) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&sender.to_be_bytes());
    a[8..].copy_from_slice(&to.to_be_bytes());
    a
}

/// A credential as AUTH carries it (`docs/wire.md#auth`): a random nonce, then the
/// credential sealed (AES-256-GCM) under a key derived from the realm secret, bound to the
/// sender and the addressee. Outsiders see its length, not its name or grants.
pub fn seal_credential(
    secret: &RealmSecret,
    sender: u64,
    to: u64,
    credential: &[u8],
    rng: &mut dyn Random,
) -> Vec<u8> {
    let n: [u8; 12] = crate::random_array(rng);
    let mut out = Vec::with_capacity(CREDENTIAL_SEAL_OVERHEAD + credential.len());
    out.extend_from_slice(&n);
    out.extend_from_slice(credential);
    let tag = credential_key(secret)
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(n),
            Aad::from(credential_aad(sender, to)),
            &mut out[12..],
        )
        .expect("a credential is far below GCM's limit");
    out.extend_from_slice(tag.as_ref());
    out
}

/// Opens what [`seal_credential`] made; `None` if it was not made in this realm for this
/// sender and addressee.
pub fn open_credential(
    secret: &RealmSecret,
    sender: u64,
    to: u64,
    sealed: &[u8],
) -> Option<Vec<u8>> {
    if sealed.len() < CREDENTIAL_SEAL_OVERHEAD {
        return None;
    }
    let n: [u8; 12] = sealed[..12].try_into().ok()?;
    let mut body = sealed[12..].to_vec();
    let len = credential_key(secret)
        .open_in_place(
            Nonce::assume_unique_for_key(n),
            Aad::from(credential_aad(sender, to)),
            &mut body,
        )
        .ok()?
        .len();
    body.truncate(len);
    Some(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OsRandom;

    #[test]
    fn a_tag_verifies_only_for_its_bytes_counter_key_and_addressee() {
        let k = ControlKey::generate(1, &mut OsRandom);
        let (to, t) = k.tag(7, b"datagram", 42);
        assert_ne!(to, 42u64.to_le_bytes(), "the addressee is sealed");
        assert_eq!(k.open(7, b"datagram", &to, &t), Some(42));
        assert_eq!(k.open(8, b"datagram", &to, &t), None);
        assert_eq!(k.open(7, b"datagraM", &to, &t), None);
        let mut other_to = to;
        other_to[0] ^= 1;
        assert_eq!(k.open(7, b"datagram", &other_to, &t), None);
        let other = ControlKey::generate(1, &mut OsRandom);
        assert_eq!(other.open(7, b"datagram", &to, &t), None);
        // The same bytes under another epoch of the same raw key: another nonce.
        let k2 = ControlKey::from_bytes(2, k.key_bytes()).unwrap();
        assert_eq!(k2.open(7, b"datagram", &to, &t), None);
        assert!(ControlKey::from_bytes(1, &[0; 15]).is_none());
    }

    #[test]
    fn credentials_open_only_in_their_realm_for_their_pair() {
        let s = RealmSecret::from_bytes([3; 32]);
        let c = b"a credential with a name".to_vec();
        let sealed = seal_credential(&s, 1, 2, &c, &mut OsRandom);
        assert_eq!(sealed.len(), c.len() + CREDENTIAL_SEAL_OVERHEAD);
        assert!(
            !sealed.windows(4).any(|w| w == b"name"),
            "the name is not in clear"
        );
        assert_eq!(open_credential(&s, 1, 2, &sealed), Some(c));
        assert_eq!(open_credential(&s, 2, 1, &sealed), None);
        let other = RealmSecret::from_bytes([4; 32]);
        assert_eq!(open_credential(&other, 1, 2, &sealed), None);
        assert_eq!(open_credential(&s, 1, 2, &sealed[..20]), None);
    }
}
