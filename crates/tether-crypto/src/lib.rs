//! tether-crypto: the security primitives of tether (DESIGN section 4), with no I/O.
//!
//! - [`Suite`]: the AEAD suites tether ships (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305,
//!   from aws-lc-rs), and [`SenderKey`]: one writer's key for one epoch, sealing each sample
//!   once under a nonce made of the epoch and the sample's sequence number.
//! - [`Identity`] (an Ed25519 signing key and an X25519 key-agreement key) and [`CaKey`], the
//!   realm's certificate authority.
//! - [`Credential`]: a participant's name, [`Role`] (member or router), public keys, grants
//!   (topic patterns it may publish and subscribe, `*` one level, `**` any depth; a router
//!   has none), serial and expiry, signed by the CA;
//!   [`RevocationList`]: revoked serials, signed by the CA.
//! - [`wrap_key`] / [`unwrap_key`]: a sender key sealed for one reader (X25519, HKDF-SHA-256,
//!   AES-256-GCM): pairwise work once per reader and epoch, never per sample.
//! - [`ReplayWindow`]: a sliding window of sequence numbers per writer and epoch.
//! - [`TopicId`]: 256-bit HMAC-SHA-256 of canonical topic metadata under the realm secret;
//!   [`seal_description`] / [`open_description`]: a topic's name and type sealed for the
//!   realm's members, bound to its id.
//! - [`CookieKey`]: 64-bit address-validation cookies (HMAC-SHA-256 under a participant's own
//!   random secret).
//!
//! Everything here is pure computation over bytes: files and sockets belong to the crates
//! above. Randomness is an input ([`Random`]; [`OsRandom`] in production), and byte layouts
//! are `tether-wire`'s: this crate seals, opens, signs, verifies and derives keys over the
//! values `tether-wire` parses and the byte strings it lays out.

#![forbid(unsafe_code)]

mod control;
mod cookie;
mod credential;
mod describe;
mod grant;
mod identity;
mod keywrap;
mod pairwise;
mod random;
mod replay;
pub mod sample;
mod suite;
mod topic;

pub use control::{
    CONTROL_TAG_LEN, CREDENTIAL_SEAL_OVERHEAD, ControlKey, control_wrap_context, open_credential,
    seal_credential,
};
pub use cookie::CookieKey;
pub use credential::{Credential, CredentialError, RevocationList, VerifiedCredentials};
pub use describe::{DESCRIPTION_OVERHEAD, open_description, seal_description};
pub use grant::{pattern_matches, valid_pattern};
pub use identity::{CaKey, Identity, RealmSecret, key_id};
pub use keywrap::{WRAP_OVERHEAD, unwrap_key, wrap_context, wrap_key};
pub use pairwise::pair_key;
pub use random::{OsRandom, Random, random_array, random_bytes};
pub use replay::{BatchWindow, ControlWindow, ReplayWindow, Window};
pub use sample::{Protection, UnknownProtection};
pub use suite::{SMALL_MESSAGE, SealError, SenderKey, Suite, TAG_LEN, UnknownSuite};
pub use tether_wire::Role;
pub use topic::TopicId;

/// Lower-case hex of `b`.
pub fn to_hex(b: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(H[(x >> 4) as usize] as char);
        s.push(H[(x & 15) as usize] as char);
    }
    s
}

/// Bytes from hex (either case); `None` if malformed.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.len() % 2 != 0 {
        return None;
    }
    let v = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(v(p[0])? << 4 | v(p[1])?))
        .collect()
}

/// Fixed-size bytes from hex.
pub(crate) fn hex_array<const N: usize>(s: &str) -> Option<[u8; N]> {
    from_hex(s)?.try_into().ok()
}

#[cfg(test)]
mod kat;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(to_hex(&b), "0001abff");
        assert_eq!(from_hex("0001ABff").unwrap(), b);
        assert!(from_hex("abc").is_none());
        assert!(from_hex("zz").is_none());
        assert_eq!(hex_array::<2>("0102"), Some([1, 2]));
        assert_eq!(hex_array::<3>("0102"), None);
    }
}
