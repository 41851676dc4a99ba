//! Sender keys sealed for one reader: X25519 between the writer's and the reader's
//! key-agreement keys, HKDF-SHA-256 to a wrapping key bound to the context (realm, writer,
//! reader, epoch, suite), AES-256-GCM over the sender key. Done once per reader and epoch.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
use zeroize::Zeroizing;

use tether_wire::WrappedKeyRepr;

use crate::{Identity, Random};

/// Bytes a wrapped key adds to the key: the nonce and the tag.
pub const WRAP_OVERHEAD: usize = tether_wire::WRAP_NONCE_LEN + tether_wire::WRAP_TAG_LEN;

const SALT: &[u8] = b"tether key wrap v1";

fn wrapping_key(me: &Identity, peer: &[u8; 32], context: &[u8]) -> Option<LessSafeKey> {
    me.agree(peer, |shared| {
        let prk = Salt::new(HKDF_SHA256, SALT).extract(shared);
        let info = [context];
        let okm = prk.expand(&info, &AES_256_GCM).ok()?;
        let k = UnboundKey::from(okm);
        Some(LessSafeKey::new(k))
    })
    .flatten()
}

/// What a writer's sender key is bound to when wrapped for one reader: the realm (its CA
/// key), the writer and the reader (participant and entity, 12 bytes each), the epoch and
/// the suite (laid out by [`tether_wire::key_wrap_context`]).
pub fn wrap_context(
    realm: &[u8; 32],
    writer: &[u8; 12],
    reader: &[u8; 12],
    epoch: u32,
    suite: crate::Suite,
) -> Vec<u8> {
    tether_wire::key_wrap_context(realm, writer, reader, epoch, suite.code()).to_vec()
}

/// Seals `key` for the holder of the X25519 public key `peer`. `context` must name
/// everything the key is for (both sides build it the same way); a key unwrapped under any
/// other context fails. The nonce comes from `rng`.
pub fn wrap_key(
    me: &Identity,
    peer: &[u8; 32],
    context: &[u8],
    key: &[u8],
    rng: &mut dyn Random,
) -> Option<Vec<u8>> {
    let wk = wrapping_key(me, peer, context)?;
    let nonce = crate::random_array(rng);
    let mut sealed = Zeroizing::new(key.to_vec());
    wk.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(context),
        &mut *sealed,
    )
    .ok()?;
    let mut out = Vec::with_capacity(WRAP_OVERHEAD + key.len());
    WrappedKeyRepr {
        nonce,
        sealed: &sealed,
    }
    .emit(&mut out)
    .ok()?;
    Some(out)
}

/// Opens a key wrapped by the holder of `peer` for us. `None` if it was not (wrong keys,
/// wrong context, tampered bytes).
pub fn unwrap_key(
    me: &Identity,
    peer: &[u8; 32],
    context: &[u8],
    wrapped: &[u8],
) -> Option<Zeroizing<Vec<u8>>> {
    let w = WrappedKeyRepr::parse(wrapped).ok()?;
    let wk = wrapping_key(me, peer, context)?;
    let mut body = Zeroizing::new(w.sealed.to_vec());
    let n = wk
        .open_in_place(
            Nonce::assume_unique_for_key(w.nonce),
            Aad::from(context),
            body.as_mut_slice(),
        )
        .ok()?
        .len();
    body.truncate(n);
    Some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_reader_unwraps_and_only_in_context() {
        let writer = Identity::generate();
        let reader = Identity::generate();
        let other = Identity::generate();
        let key = crate::random_bytes::<32>();
        let ctx = b"realm|w|r|epoch 1|aes128-gcm";
        let w = wrap_key(
            &writer,
            &reader.kx_public(),
            ctx,
            &key,
            &mut crate::OsRandom,
        )
        .unwrap();
        assert_eq!(w.len(), 32 + WRAP_OVERHEAD);
        let got = unwrap_key(&reader, &writer.kx_public(), ctx, &w).unwrap();
        assert_eq!(got.as_slice(), &key);
        // Another participant, another claimed writer, another context, a flipped bit.
        assert!(unwrap_key(&other, &writer.kx_public(), ctx, &w).is_none());
        assert!(unwrap_key(&reader, &other.kx_public(), ctx, &w).is_none());
        assert!(unwrap_key(&reader, &writer.kx_public(), b"epoch 2", &w).is_none());
        for i in 0..w.len() {
            let mut t = w.clone();
            t[i] ^= 1;
            assert!(unwrap_key(&reader, &writer.kx_public(), ctx, &t).is_none());
        }
        assert!(unwrap_key(&reader, &writer.kx_public(), ctx, &w[..20]).is_none());
        // Two wraps of one key differ (fresh nonce), both open.
        let w2 = wrap_key(
            &writer,
            &reader.kx_public(),
            ctx,
            &key,
            &mut crate::OsRandom,
        )
        .unwrap();
        assert_ne!(w, w2);
        assert!(unwrap_key(&reader, &writer.kx_public(), ctx, &w2).is_some());
    }
}
