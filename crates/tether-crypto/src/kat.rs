//! Known answers for the bytes tether-crypto puts on the wire, computed by an independent
//! implementation of `docs/wire.md` (Python's `cryptography`: AES-GCM, Ed25519, X25519,
//! HKDF), so moving the layouts into tether-wire cannot have changed a byte.

use crate::sample::{Protection, endpoint_id, open, parts, protect, signature_ok};
use crate::{
    Identity, Random, SenderKey, Suite, from_hex, pair_key, to_hex, unwrap_key, wrap_context,
    wrap_key,
};

/// A "generator" that repeats one byte: a known nonce.
struct Repeat(u8);

impl Random for Repeat {
    fn fill(&mut self, dest: &mut [u8]) {
        dest.fill(self.0);
    }
}

fn hex32(s: &str) -> [u8; 32] {
    from_hex(s).unwrap().try_into().unwrap()
}

/// RFC 8032 test 1's seed and RFC 7748's Alice and Bob, as in `identity.rs`.
fn alice_and_bob() -> (Identity, Identity) {
    let seed = hex32("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
    let a = hex32("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
    let b = hex32("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb");
    (
        Identity::from_secrets(&seed, &a).unwrap(),
        Identity::from_secrets(&seed, &b).unwrap(),
    )
}

/// An `encrypt+sign` sample: protection byte, epoch (LE), AES-128-GCM under the nonce and
/// AAD of section 3.11, then the Ed25519 signature.
#[test]
fn protected_sample_bytes() {
    let (alice, _) = alice_and_bob();
    let key_bytes: Vec<u8> = (1..=16).collect();
    let key = SenderKey::from_bytes(Suite::Aes128Gcm, 2, &key_bytes).unwrap();
    let w = endpoint_id(7, 3);
    let prot: Protection = "encrypt+sign".parse().unwrap();
    let p = protect(prot, Some(&key), &alice, &w, 9, 1234, b"payload").unwrap();
    assert_eq!(
        to_hex(&p),
        "030200000005843a1106595872291e6b942933279b1cf54710fc7bc7ac8830966cf21ad0b217ce3f26d78f14c38fa74a6520afb97a7c191f116af7baf4b52b7cbd99afb510c7d03307d1824b7c9cbafcce60a44b5fb8ad60c1f1d20d"
    );
    let parts = parts(&p).unwrap();
    assert!(signature_ok(&parts, &alice.sign_public(), &w, 9, 1234));
    assert_eq!(
        open(&key, &w, 9, 1234, parts.prot, parts.body).unwrap(),
        b"payload"
    );
}

/// A sender key wrapped for a reader (section 3.11's KEY), with a known nonce, and the
/// pairwise key of section 3.12.
#[test]
fn wrapped_key_and_pair_key_bytes() {
    let (alice, bob) = alice_and_bob();
    let key: Vec<u8> = (1..=16).collect();
    let ctx = wrap_context(
        &[7; 32],
        &endpoint_id(7, 3),
        &endpoint_id(9, 1),
        2,
        Suite::Aes128Gcm,
    );
    let w = wrap_key(&alice, &bob.kx_public(), &ctx, &key, &mut Repeat(0xAA)).unwrap();
    assert_eq!(
        to_hex(&w),
        "aaaaaaaaaaaaaaaaaaaaaaaae4128edcbe8fafebf9f3533291be3a32b1f4d16c91dbbcf77bb2724a7e8bc7a9"
    );
    assert_eq!(
        unwrap_key(&bob, &alice.kx_public(), &ctx, &w)
            .unwrap()
            .as_slice(),
        &key[..]
    );
    let pk = pair_key(&alice, &bob.kx_public(), &[7; 32], 1, 2, Suite::Aes128Gcm).unwrap();
    assert_eq!(to_hex(pk.key_bytes()), "b5a41618b9009cc5c793d5851d5e9b99");
}
