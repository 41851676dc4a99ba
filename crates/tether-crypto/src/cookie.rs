//! Address-validation cookies: 64 bits of HMAC-SHA-256 under a secret that never leaves the
//! participant that made it. A participant challenges an address with a cookie bound to what
//! it was told there (a participant id, the address, a time period); only whoever receives at
//! that address can echo it, and the participant checks the echo without having kept
//! anything per challenge (`docs/wire.md#validation`).

use std::fmt;

use aws_lc_rs::hmac;

/// The key cookies are made under (random, per participant, never sent).
pub struct CookieKey(hmac::Key);

impl fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CookieKey(..)")
    }
}

impl CookieKey {
    /// A key from 32 secret random bytes.
    pub fn new(secret: &[u8; 32]) -> CookieKey {
        CookieKey(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// The cookie of `input`: the first 8 bytes of its HMAC-SHA-256, little-endian. The
    /// caller lays `input` out so that no two different inputs encode alike (fixed-size
    /// fields).
    pub fn cookie(&self, input: &[u8]) -> u64 {
        let tag = hmac::sign(&self.0, input);
        let mut b = [0u8; 8];
        b.copy_from_slice(&tag.as_ref()[..8]);
        u64::from_le_bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_depend_on_key_and_input() {
        let a = CookieKey::new(&[1; 32]);
        let b = CookieKey::new(&[2; 32]);
        assert_eq!(a.cookie(b"x"), a.cookie(b"x"));
        assert_ne!(a.cookie(b"x"), a.cookie(b"y"));
        assert_ne!(a.cookie(b"x"), b.cookie(b"x"));
        assert!(!format!("{a:?}").contains('1'));
    }
}
