//! Endpoint descriptions (`docs/wire.md#endpoint`): in a secure realm an ENDPOINT names its
//! topic by id only, and carries the topic's name and type sealed under a key derived from
//! the realm secret, so members can show them (`tether topics`, `tether info`) and outsiders
//! and routers, who hold no realm secret, see the id alone.
//!
//! The seal is AES-256-GCM under HKDF-SHA-256(salt `"tether endpoint description v1"`, the
//! realm secret, info `"describe"`), with a random nonce, and it binds the topic id
//! (associated data `"tether endpoint v1" ‖ id`): a description opens only beside the id
//! it was sealed for, so it cannot be moved to an endpoint of another topic. A member that
//! opens one also checks that the name and type derive that id.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};

use crate::{Random, RealmSecret, TopicId};

/// Bytes a description adds to its plaintext: a nonce (12) and a tag (16).
pub use tether_wire::DESCRIPTION_OVERHEAD;

const SALT: &[u8] = b"tether endpoint description v1";

fn key(secret: &RealmSecret) -> LessSafeKey {
    let prk = Salt::new(HKDF_SHA256, SALT).extract(secret.as_bytes());
    let okm = prk
        .expand(&[b"describe"], &AES_256_GCM)
        .expect("one block of output");
    LessSafeKey::new(UnboundKey::from(okm))
}

/// Topic `name` of type `type_name`, whose id in the realm of `secret` is `id`, sealed for
/// the realm's members: `nonce (12) ‖ ciphertext ‖ tag (16)`. `None` if a string is longer
/// than 65,535 bytes.
pub fn seal_description(
    secret: &RealmSecret,
    id: &TopicId,
    name: &str,
    type_name: &str,
    rng: &mut dyn Random,
) -> Option<Vec<u8>> {
    let plain = tether_wire::description_plaintext(name, type_name).ok()?;
    let n: [u8; 12] = crate::random_array(rng);
    let mut out = Vec::with_capacity(DESCRIPTION_OVERHEAD + plain.len());
    out.extend_from_slice(&n);
    out.extend_from_slice(&plain);
    let tag = key(secret)
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(n),
            Aad::from(tether_wire::description_aad(&id.0)),
            &mut out[12..],
        )
        .ok()?;
    out.extend_from_slice(tag.as_ref());
    Some(out)
}

/// The topic name and type of a description sealed for topic `id` in the realm of
/// `secret`; `None` if it does not open (another realm, another id, altered) or its name
/// and type do not derive `id`.
pub fn open_description(
    secret: &RealmSecret,
    id: &TopicId,
    sealed: &[u8],
) -> Option<(String, String)> {
    if sealed.len() < DESCRIPTION_OVERHEAD {
        return None;
    }
    let n: [u8; 12] = sealed[..12].try_into().ok()?;
    let mut body = sealed[12..].to_vec();
    let plain = key(secret)
        .open_in_place(
            Nonce::assume_unique_for_key(n),
            Aad::from(tether_wire::description_aad(&id.0)),
            &mut body,
        )
        .ok()?;
    let (name, type_name) = tether_wire::parse_description(plain).ok()?;
    (TopicId::derive(secret, name, type_name, "") == *id)
        .then(|| (name.to_string(), type_name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OsRandom;

    #[test]
    fn members_open_what_outsiders_and_other_ids_cannot() {
        let s = RealmSecret::from_bytes([3; 32]);
        let id = TopicId::derive(&s, "/cmd_vel", "Twist", "");
        let sealed = seal_description(&s, &id, "/cmd_vel", "Twist", &mut OsRandom).unwrap();
        assert_eq!(sealed.len(), DESCRIPTION_OVERHEAD + 4 + 8 + 5);
        assert!(
            !sealed.windows(3).any(|w| w == b"cmd"),
            "the name is not in clear"
        );
        assert_eq!(
            open_description(&s, &id, &sealed),
            Some(("/cmd_vel".into(), "Twist".into()))
        );
        // Random nonces: two seals of one description differ.
        let again = seal_description(&s, &id, "/cmd_vel", "Twist", &mut OsRandom).unwrap();
        assert_ne!(sealed, again);
        // Another realm's secret, another topic's id, a flipped byte, a cut one: refused.
        let other = RealmSecret::from_bytes([4; 32]);
        assert_eq!(open_description(&other, &id, &sealed), None);
        let id2 = TopicId::derive(&s, "/odom", "Twist", "");
        assert_eq!(open_description(&s, &id2, &sealed), None);
        for i in 0..sealed.len() {
            let mut t = sealed.clone();
            t[i] ^= 1;
            assert_eq!(open_description(&s, &id, &t), None, "byte {i}");
        }
        assert_eq!(open_description(&s, &id, &sealed[..27]), None);
        // A member that seals a name under an id it does not derive is not believed.
        let lie = seal_description(&s, &id2, "/cmd_vel", "Twist", &mut OsRandom).unwrap();
        assert_eq!(open_description(&s, &id2, &lie), None);
    }
}
