//! Key pairs: a participant's identity, the realm's CA, the realm secret.

use std::fmt;
use std::sync::Mutex;

use aws_lc_rs::agreement::{self, X25519};
use aws_lc_rs::signature::{self, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use zeroize::Zeroizing;

use crate::{Random, random_array, random_bytes};

/// Verifies an Ed25519 signature.
pub(crate) fn verify(public: &[u8; 32], msg: &[u8], sig: &[u8]) -> bool {
    UnparsedPublicKey::new(&signature::ED25519, public)
        .verify(msg, sig)
        .is_ok()
}

/// X25519 results kept per identity (see [`Identity::agree`]).
const AGREED_KEPT: usize = 64;

/// The secrets agreed with the last [`AGREED_KEPT`] peer keys.
struct Agreed {
    slots: Vec<Slot>,
    /// Counts uses: the slot used least recently makes room.
    clock: u64,
}

/// One peer key and the secret agreed with it.
struct Slot {
    peer: [u8; 32],
    secret: Zeroizing<[u8; 32]>,
    used: u64,
    /// The secret was agreed (a slot whose agreement failed holds zeros).
    valid: bool,
}

/// A participant's secret keys: Ed25519 to sign (challenges, batches), X25519 to agree on
/// key-wrapping keys. Held as seeds, zeroed when dropped.
pub struct Identity {
    sign_seed: Zeroizing<[u8; 32]>,
    kx_secret: Zeroizing<[u8; 32]>,
    signer: Ed25519KeyPair,
    kx: agreement::PrivateKey,
    kx_public: [u8; 32],
    /// The shared secrets of the last [`AGREED_KEPT`] peer keys (zeroed when replaced or
    /// dropped).
    agreed: Mutex<Agreed>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("sign_public", &crate::to_hex(&self.sign_public()))
            .field("kx_public", &crate::to_hex(&self.kx_public))
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Fresh random keys from the system's generator.
    pub fn generate() -> Identity {
        Self::generate_with(&mut crate::OsRandom)
    }

    /// Fresh random keys from `rng`.
    pub fn generate_with(rng: &mut dyn Random) -> Identity {
        let sign_seed = Zeroizing::new(random_array::<32>(rng));
        let kx_secret = Zeroizing::new(random_array::<32>(rng));
        Self::from_secrets(&sign_seed, &kx_secret).expect("random seeds are valid")
    }

    /// From the two 32-byte secrets (as stored in a key file).
    pub fn from_secrets(sign_seed: &[u8; 32], kx_secret: &[u8; 32]) -> Option<Identity> {
        let signer = Ed25519KeyPair::from_seed_unchecked(sign_seed).ok()?;
        let kx = agreement::PrivateKey::from_private_key(&X25519, kx_secret).ok()?;
        let kx_public: [u8; 32] = kx.compute_public_key().ok()?.as_ref().try_into().ok()?;
        Some(Identity {
            sign_seed: Zeroizing::new(*sign_seed),
            kx_secret: Zeroizing::new(*kx_secret),
            signer,
            kx,
            kx_public,
            agreed: Mutex::new(Agreed {
                slots: Vec::with_capacity(AGREED_KEPT),
                clock: 0,
            }),
        })
    }

    /// The Ed25519 seed (secret).
    pub fn sign_seed(&self) -> &[u8; 32] {
        &self.sign_seed
    }

    /// The X25519 private key (secret).
    pub fn kx_secret(&self) -> &[u8; 32] {
        &self.kx_secret
    }

    /// A secret derived from this identity for one purpose, named by `label` (HKDF-SHA-256
    /// over the signing seed): the same across restarts, different per label, and telling
    /// nothing of the seed. A router's QUIC stateless-reset key is one.
    pub fn derived_secret(&self, label: &[u8]) -> [u8; 32] {
        use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
        let mut out = [0u8; 32];
        let prk = Salt::new(HKDF_SHA256, b"tether identity").extract(self.sign_seed.as_slice());
        let info = [label];
        // 32 bytes of HKDF-SHA-256 are always within its output limit.
        if let Ok(okm) = prk.expand(&info, HKDF_SHA256) {
            let _ = okm.fill(&mut out);
        }
        out
    }

    /// The Ed25519 public key.
    pub fn sign_public(&self) -> [u8; 32] {
        self.signer
            .public_key()
            .as_ref()
            .try_into()
            .expect("Ed25519 public keys are 32 bytes")
    }

    /// The X25519 public key.
    pub fn kx_public(&self) -> [u8; 32] {
        self.kx_public
    }

    /// Signs `msg` (Ed25519).
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.signer
            .sign(msg)
            .as_ref()
            .try_into()
            .expect("Ed25519 signatures are 64 bytes")
    }

    /// Verifies a signature by the holder of `public`.
    pub fn verify(public: &[u8; 32], msg: &[u8], sig: &[u8]) -> bool {
        verify(public, msg, sig)
    }

    /// The X25519 shared secret with `peer`, fed to `f` (`None` for a key it cannot be
    /// agreed with: a low-order point).
    ///
    /// The secret between two static keys never changes, and a new peer asks for it three or
    /// four times in its first round trips (its control key unwrapped, ours wrapped for it,
    /// sender keys both ways), each a scalar multiplication on the path to the first sample.
    /// So the last [`AGREED_KEPT`] are kept, zeroed when they make room or the identity is
    /// dropped; they are worth what the private key is worth, and live beside it.
    ///
    /// `f` runs under the lock of the kept secrets: it must not call `agree`.
    pub(crate) fn agree<R>(&self, peer: &[u8; 32], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let mut kept = self.agreed.lock().unwrap_or_else(|p| p.into_inner());
        kept.clock += 1;
        let now = kept.clock;
        if let Some(slot) = kept.slots.iter_mut().find(|k| k.valid && &k.peer == peer) {
            slot.used = now;
            return Some(f(slot.secret.as_slice()));
        }
        let theirs = agreement::UnparsedPublicKey::new(&X25519, peer);
        // A free slot, or the least recently used one's: the secret is written into it in
        // place (the slots never move: allocated in full at the start), so no copy of a
        // secret is left anywhere but there.
        let i = if kept.slots.len() < AGREED_KEPT {
            kept.slots.push(Slot {
                peer: *peer,
                secret: Zeroizing::new([0u8; 32]),
                used: now,
                valid: false,
            });
            kept.slots.len() - 1
        } else {
            let (i, _) = kept
                .slots
                .iter()
                .enumerate()
                .min_by_key(|(_, k)| (k.valid, k.used))
                .expect("AGREED_KEPT slots");
            i
        };
        let slot = &mut kept.slots[i];
        slot.valid = false;
        slot.peer = *peer;
        slot.used = now;
        let secret = &mut slot.secret;
        let agreed = agreement::agree(&self.kx, theirs, (), |s| {
            if s.len() != 32 {
                return Err(());
            }
            secret.copy_from_slice(s);
            Ok(())
        });
        if agreed.is_err() {
            slot.secret.fill(0);
            return None;
        }
        slot.valid = true;
        Some(f(slot.secret.as_slice()))
    }
}

/// A 64-bit id for the holder of Ed25519 public key `public` (the first 8 bytes of its
/// SHA-256, never 0): a router's node id, the same across restarts.
pub fn key_id(public: &[u8; 32]) -> u64 {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, public);
    let mut b = [0u8; 8];
    b.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(b).max(1)
}

/// The realm's certificate authority: an Ed25519 key that signs credentials and revocation
/// lists. Its public key identifies the realm.
pub struct CaKey {
    seed: Zeroizing<[u8; 32]>,
    signer: Ed25519KeyPair,
}

impl fmt::Debug for CaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaKey")
            .field("public", &crate::to_hex(&self.public()))
            .finish_non_exhaustive()
    }
}

impl CaKey {
    /// A fresh CA.
    pub fn generate() -> CaKey {
        Self::from_seed(&random_bytes()).expect("random seeds are valid")
    }

    /// From its stored seed.
    pub fn from_seed(seed: &[u8; 32]) -> Option<CaKey> {
        Some(CaKey {
            seed: Zeroizing::new(*seed),
            signer: Ed25519KeyPair::from_seed_unchecked(seed).ok()?,
        })
    }

    /// The seed (secret).
    pub fn seed(&self) -> &[u8; 32] {
        &self.seed
    }

    /// The public key: the realm's identity.
    pub fn public(&self) -> [u8; 32] {
        self.signer
            .public_key()
            .as_ref()
            .try_into()
            .expect("Ed25519 public keys are 32 bytes")
    }

    /// Signs `msg`.
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.signer
            .sign(msg)
            .as_ref()
            .try_into()
            .expect("Ed25519 signatures are 64 bytes")
    }
}

/// The realm secret: the key of topic identifiers. Every member holds it; outsiders (and
/// routers) never do.
#[derive(Clone)]
pub struct RealmSecret(pub(crate) Zeroizing<[u8; 32]>);

impl fmt::Debug for RealmSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RealmSecret(..)")
    }
}

impl RealmSecret {
    /// A fresh random secret.
    pub fn generate() -> RealmSecret {
        RealmSecret(Zeroizing::new(random_bytes()))
    }

    /// From stored bytes.
    pub fn from_bytes(b: [u8; 32]) -> RealmSecret {
        RealmSecret(Zeroizing::new(b))
    }

    /// The bytes (secret).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Derived secrets and key ids are stable for one key, distinct across labels and
    /// keys, and not the seed itself.
    #[test]
    fn derived_secrets_and_key_ids_are_stable_and_distinct() {
        let a = Identity::from_secrets(&[1; 32], &[2; 32]).unwrap();
        let a2 = Identity::from_secrets(&[1; 32], &[2; 32]).unwrap();
        let b = Identity::from_secrets(&[3; 32], &[2; 32]).unwrap();
        assert_eq!(a.derived_secret(b"x"), a2.derived_secret(b"x"));
        assert_ne!(a.derived_secret(b"x"), a.derived_secret(b"y"));
        assert_ne!(a.derived_secret(b"x"), b.derived_secret(b"x"));
        assert_ne!(a.derived_secret(b"x"), *a.sign_seed());
        assert_eq!(key_id(&a.sign_public()), key_id(&a2.sign_public()));
        assert_ne!(key_id(&a.sign_public()), key_id(&b.sign_public()));
        assert_ne!(key_id(&a.sign_public()), 0);
    }

    #[test]
    fn identities_sign_verify_and_agree() {
        let a = Identity::generate();
        let b = Identity::generate();
        let sig = a.sign(b"challenge");
        assert!(Identity::verify(&a.sign_public(), b"challenge", &sig));
        assert!(!Identity::verify(&a.sign_public(), b"challengE", &sig));
        assert!(!Identity::verify(&b.sign_public(), b"challenge", &sig));
        let ab = a.agree(&b.kx_public(), |s| s.to_vec()).unwrap();
        let ba = b.agree(&a.kx_public(), |s| s.to_vec()).unwrap();
        assert_eq!(ab, ba);
        // Stored secrets give the same keys back.
        let a2 = Identity::from_secrets(a.sign_seed(), a.kx_secret()).unwrap();
        assert_eq!(a2.sign_public(), a.sign_public());
        assert_eq!(a2.kx_public(), a.kx_public());
        let ca = CaKey::generate();
        assert_eq!(CaKey::from_seed(ca.seed()).unwrap().public(), ca.public());
        assert!(verify(&ca.public(), b"m", &ca.sign(b"m")));
    }

    /// Kept secrets are the ones agreed afresh, for each peer, before and after others make
    /// room; the least recently used makes room; the slots never move (no copy of a secret
    /// is left in freed memory); a low-order point is refused and not kept.
    #[test]
    fn kept_agreements_are_the_fresh_ones() {
        let a = Identity::generate();
        let peers: Vec<Identity> = (0..AGREED_KEPT + 10)
            .map(|_| Identity::generate())
            .collect();
        for round in 0..2 {
            for p in &peers {
                let ours = a.agree(&p.kx_public(), |s| s.to_vec()).unwrap();
                let theirs = p.agree(&a.kx_public(), |s| s.to_vec()).unwrap();
                assert_eq!(ours, theirs, "round {round}");
            }
        }
        {
            let kept = a.agreed.lock().unwrap();
            assert_eq!(kept.slots.len(), AGREED_KEPT);
            assert_eq!(kept.slots.capacity(), AGREED_KEPT, "never reallocated");
        }
        // A peer used all along stays while others come and go.
        let regular = &peers[0];
        let fresh: Vec<Identity> = (0..AGREED_KEPT * 2).map(|_| Identity::generate()).collect();
        for p in &fresh {
            assert!(a.agree(&p.kx_public(), |_| ()).is_some());
            assert!(a.agree(&regular.kx_public(), |_| ()).is_some());
        }
        let kept_regular = |a: &Identity| {
            a.agreed
                .lock()
                .unwrap()
                .slots
                .iter()
                .any(|k| k.valid && k.peer == regular.kx_public())
        };
        assert!(kept_regular(&a));
        // A low-order point is refused, and its slot holds nothing.
        assert!(a.agree(&[0u8; 32], |_| ()).is_none());
        let kept = a.agreed.lock().unwrap();
        assert!(
            kept.slots
                .iter()
                .all(|k| k.peer != [0u8; 32] || (!k.valid && *k.secret == [0u8; 32]))
        );
    }

    /// RFC 8032 section 7.1, test 1, and RFC 7748 section 6.1: the provider computes what
    /// the standards say.
    #[test]
    fn known_answers() {
        let seed: [u8; 32] =
            crate::hex_array("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
                .unwrap();
        let ca = CaKey::from_seed(&seed).unwrap();
        assert_eq!(
            crate::to_hex(&ca.public()),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
        );
        assert_eq!(
            crate::to_hex(&ca.sign(b"")),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
        let alice: [u8; 32] =
            crate::hex_array("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
                .unwrap();
        let bob: [u8; 32] =
            crate::hex_array("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
                .unwrap();
        let a = Identity::from_secrets(&seed, &alice).unwrap();
        let b = Identity::from_secrets(&seed, &bob).unwrap();
        assert_eq!(
            crate::to_hex(&a.kx_public()),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
        );
        let shared = a.agree(&b.kx_public(), crate::to_hex).unwrap();
        assert_eq!(
            shared,
            "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
        );
    }
}
