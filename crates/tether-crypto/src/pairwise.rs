//! Per-destination protection, the way SROS2's defaults protect RTPS messages: every datagram
//! to a peer sealed again under a key that the two participants alone share. tether does not
//! need it (samples are sealed once under the writer's sender key); it exists so `tether bench
//! fanout` can measure what that costs, in the same engine (`docs/wire.md#sealed`).

use aws_lc_rs::hkdf::{HKDF_SHA256, KeyType, Salt};
use zeroize::Zeroizing;

use crate::{Identity, SenderKey, Suite};

const SALT: &[u8] = b"tether pairwise v1";

struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// The key participant `from` seals datagrams to participant `to` with (one per direction):
/// X25519 between `me` and the peer's key-agreement key, HKDF-SHA-256 bound to the realm (its
/// CA key), both participant ids in order and the suite. Both ends derive the same key;
/// `None` if the peer's key is unusable.
pub fn pair_key(
    me: &Identity,
    peer: &[u8; 32],
    realm: &[u8; 32],
    from: u64,
    to: u64,
    suite: Suite,
) -> Option<SenderKey> {
    let info = tether_wire::pair_key_info(
        realm,
        tether_wire::ParticipantId(from),
        tether_wire::ParticipantId(to),
        suite.code(),
    );
    let bytes = me
        .agree(peer, |shared| {
            let prk = Salt::new(HKDF_SHA256, SALT).extract(shared);
            let parts = [info.as_slice()];
            let okm = prk.expand(&parts, Len(suite.key_len())).ok()?;
            let mut k = Zeroizing::new(vec![0u8; suite.key_len()]);
            okm.fill(&mut k).ok()?;
            Some(k)
        })
        .flatten()?;
    SenderKey::from_bytes(suite, 0, &bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ends_agree_per_direction_and_no_one_else_does() {
        let a = Identity::generate();
        let b = Identity::generate();
        let c = Identity::generate();
        let realm = [7u8; 32];
        let s = Suite::Aes128Gcm;
        let ab = pair_key(&a, &b.kx_public(), &realm, 1, 2, s).unwrap();
        let ab2 = pair_key(&b, &a.kx_public(), &realm, 1, 2, s).unwrap();
        let ba = pair_key(&b, &a.kx_public(), &realm, 2, 1, s).unwrap();
        let cb = pair_key(&c, &b.kx_public(), &realm, 1, 2, s).unwrap();
        let other_realm = pair_key(&a, &b.kx_public(), &[8u8; 32], 1, 2, s).unwrap();
        assert_eq!(ab.key_bytes(), ab2.key_bytes());
        assert_ne!(ab.key_bytes(), ba.key_bytes());
        assert_ne!(ab.key_bytes(), cb.key_bytes());
        assert_ne!(ab.key_bytes(), other_realm.key_bytes());
        for s in Suite::ALL {
            let k = pair_key(&a, &b.kx_public(), &realm, 1, 2, s).unwrap();
            assert_eq!(k.key_bytes().len(), s.key_len());
            let mut buf = b"datagram".to_vec();
            let tag = k.seal_in_place(1, b"aad", &mut buf).unwrap();
            buf.extend_from_slice(&tag);
            let k2 = pair_key(&b, &a.kx_public(), &realm, 1, 2, s).unwrap();
            assert_eq!(k2.open_in_place(1, b"aad", &mut buf).unwrap(), b"datagram");
        }
    }
}
