//! The credential's and the revocation list's canonical binary forms (`docs/wire.md#credential`):
//! what the realm's CA signs, what AUTH carries, what a bundle stores. Unlike the datagram,
//! their integers are big-endian.
//!
//! ```text
//! credential:  "TCR2" | realm CA key (32) | serial u64 | issued u64 | expires u64
//!              | role u8 (0 member, 1 router) | Ed25519 key (32) | X25519 key (32) | name str16 | publish list | subscribe list
//!              | CA signature (64)
//! list:        count u16 | count × str16          (str16: length u16 | UTF-8)
//! revocations: "TRV2" | realm CA key (32) | list serial u64 | issued u64 | count u32
//!              | count × serial u64 | CA signature (64)
//! ```

use crate::{Cursor, Error};

/// The magic a credential starts with (`TCR1`, without the role, is no longer read).
pub const CREDENTIAL_MAGIC: [u8; 4] = *b"TCR2";
/// The magic of the credential layout before roles: recognised only to say it is too old.
pub const CREDENTIAL_MAGIC_V1: [u8; 4] = *b"TCR1";
/// The magic a revocation list starts with (`TRV1`, without the list's serial, is no
/// longer read).
pub const REVOCATION_MAGIC: [u8; 4] = *b"TRV2";
/// Longest participant name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Most patterns in one grant list.
pub const MAX_PATTERNS: usize = 64;
/// Longest grant pattern, in bytes.
pub const MAX_PATTERN_LEN: usize = 1024;
/// Most serials in a revocation list.
pub const MAX_REVOKED: usize = 1 << 20;

/// A credential's grant list: borrowed from the bytes it was parsed from, or from the
/// caller to emit.
#[derive(Debug, Clone, Copy)]
pub enum PatternList<'a> {
    /// As found in the bytes: `count` strings, each `u16 BE length | UTF-8`, validated.
    Encoded {
        /// Number of patterns.
        count: u16,
        /// The encoded patterns.
        bytes: &'a [u8],
    },
    /// A caller's patterns.
    Slice(&'a [String]),
}

impl<'a> PatternList<'a> {
    /// Iterates the patterns.
    pub fn iter(&self) -> impl Iterator<Item = &'a str> + 'a {
        let (mut count, mut c, slice) = match *self {
            PatternList::Encoded { count, bytes } => (count as usize, Cursor::new(bytes), None),
            PatternList::Slice(s) => (s.len(), Cursor::new(&[]), Some(s)),
        };
        let mut idx = 0usize;
        core::iter::from_fn(move || {
            if count == 0 {
                return None;
            }
            count -= 1;
            if let Some(s) = slice {
                idx += 1;
                return s.get(idx - 1).map(String::as_str);
            }
            // Validated when parsed, so this cannot fail; stop rather than panic if it did.
            c.str16_be(MAX_PATTERN_LEN).ok()
        })
    }

    /// Number of patterns.
    pub fn len(&self) -> usize {
        match self {
            PatternList::Encoded { count, .. } => *count as usize,
            PatternList::Slice(s) => s.len(),
        }
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        let count = c.u16_be()?;
        if count as usize > MAX_PATTERNS {
            return Err(Error::BadValue("pattern count"));
        }
        let mut check = c.clone();
        for _ in 0..count {
            check.str16_be(MAX_PATTERN_LEN)?;
        }
        let bytes = c.take(c.remaining() - check.remaining())?;
        Ok(PatternList::Encoded { count, bytes })
    }

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.len() as u16).to_be_bytes());
        for p in self.iter() {
            put_str16_be(out, p);
        }
    }
}

impl PartialEq for PatternList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

/// Appends `u16 BE length | bytes`. The length is cut to 16 bits as it always was: callers
/// check lengths before (names at issue; patterns are far below the limit).
fn put_str16_be(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// What a credential's holder is in the realm: part of the signed bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// A session: a participant that publishes and subscribes under its grants, holds the
    /// realm secret, and authenticates to other members in AUTH.
    Member = 0,
    /// A router: relays sealed datagrams between sites over QUIC links (mutual TLS). It has
    /// no grants, no realm secret and no sender keys; members refuse it as a peer in AUTH.
    Router = 1,
}

impl Role {
    /// The role of its wire value, if any.
    pub fn from_u8(v: u8) -> Option<Role> {
        match v {
            0 => Some(Role::Member),
            1 => Some(Role::Router),
            _ => None,
        }
    }

    /// Its name in files and messages: `member` or `router`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Member => "member",
            Role::Router => "router",
        }
    }
}

impl core::fmt::Display for Role {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A credential's fields: what the realm's CA certifies about one participant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CredentialRepr<'a> {
    /// The CA's public key: the realm.
    pub realm: [u8; 32],
    /// Unique per credential in the realm; what revocation names.
    pub serial: u64,
    /// Issue time, unix seconds.
    pub issued: u64,
    /// Expiry, unix seconds.
    pub expires: u64,
    /// What its holder is: a member, or a router (which has no grants).
    pub role: Role,
    /// Ed25519 public key.
    pub sign_public: [u8; 32],
    /// X25519 public key.
    pub kx_public: [u8; 32],
    /// The participant's name (at most [`MAX_NAME_LEN`] bytes).
    pub name: &'a str,
    /// Topic patterns it may publish.
    pub publish: PatternList<'a>,
    /// Topic patterns it may subscribe to.
    pub subscribe: PatternList<'a>,
    /// The CA's Ed25519 signature over everything above.
    pub signature: [u8; 64],
}

impl<'a> CredentialRepr<'a> {
    /// Parses the binary form, bounds-checked. The signature is not checked here.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        //= docs/wire.md#credential
        //# Either form is malformed if a length or count exceeds its limit or the bytes present, if
        //# bytes follow the signature.
        let mut c = Cursor::new(bytes);
        if c.array()? != CREDENTIAL_MAGIC {
            return Err(Error::BadMagic);
        }
        let realm = c.array()?;
        let serial = c.u64_be()?;
        let issued = c.u64_be()?;
        let expires = c.u64_be()?;
        //= docs/wire.md#credential
        //# role: 0 member, 1 router; any other value is malformed.
        let role = Role::from_u8(c.u8()?).ok_or(Error::BadValue("role"))?;
        let sign_public = c.array()?;
        let kx_public = c.array()?;
        let name = c.str16_be(MAX_NAME_LEN)?;
        let publish = PatternList::parse(&mut c)?;
        let subscribe = PatternList::parse(&mut c)?;
        let signature = c.array()?;
        c.finish()?;
        Ok(CredentialRepr {
            realm,
            serial,
            issued,
            expires,
            role,
            sign_public,
            kx_public,
            name,
            publish,
            subscribe,
            signature,
        })
    }

    /// Appends everything but the signature: the bytes the CA signs.
    pub fn emit_signed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&CREDENTIAL_MAGIC);
        out.extend_from_slice(&self.realm);
        out.extend_from_slice(&self.serial.to_be_bytes());
        out.extend_from_slice(&self.issued.to_be_bytes());
        out.extend_from_slice(&self.expires.to_be_bytes());
        out.push(self.role as u8);
        out.extend_from_slice(&self.sign_public);
        out.extend_from_slice(&self.kx_public);
        put_str16_be(out, self.name);
        self.publish.emit(out);
        self.subscribe.emit(out);
    }

    /// Appends the canonical binary form: the signed bytes, then the signature.
    pub fn emit(&self, out: &mut Vec<u8>) {
        self.emit_signed(out);
        out.extend_from_slice(&self.signature);
    }
}

/// A revocation list's serials: borrowed from the bytes it was parsed from, or from the
/// caller to emit.
#[derive(Debug, Clone, Copy)]
pub enum SerialList<'a> {
    /// As found in the bytes: 8 bytes (u64 BE) per serial, validated (strictly increasing).
    Encoded(&'a [u8]),
    /// A caller's serials.
    Slice(&'a [u64]),
}

impl<'a> SerialList<'a> {
    /// Iterates the serials.
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        let (mut c, slice) = match *self {
            SerialList::Encoded(b) => (Cursor::new(b), None),
            SerialList::Slice(s) => (Cursor::new(&[]), Some(s.iter())),
        };
        let mut slice = slice;
        core::iter::from_fn(move || match slice.as_mut() {
            Some(s) => s.next().copied(),
            None => c.u64_be().ok(),
        })
    }

    /// Number of serials.
    pub fn len(&self) -> usize {
        match self {
            SerialList::Encoded(b) => b.len() / 8,
            SerialList::Slice(s) => s.len(),
        }
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PartialEq for SerialList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

/// A revocation list's fields: the serials the realm's CA has revoked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RevocationListRepr<'a> {
    /// The CA's public key.
    pub realm: [u8; 32],
    /// The list's own serial: its version, one more with every list the CA signs. A
    /// participant refuses a list older than the one it holds.
    pub serial: u64,
    /// When it was signed (unix seconds).
    pub issued: u64,
    /// Revoked serials, strictly increasing, at most [`MAX_REVOKED`].
    pub serials: SerialList<'a>,
    /// The CA's signature.
    pub signature: [u8; 64],
}

impl<'a> RevocationListRepr<'a> {
    /// Parses the binary form, bounds-checked; the serials must be strictly increasing. The
    /// signature is not checked here.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let mut c = Cursor::new(bytes);
        if c.array()? != REVOCATION_MAGIC {
            return Err(Error::BadMagic);
        }
        let realm = c.array()?;
        let serial = c.u64_be()?;
        let issued = c.u64_be()?;
        let n = c.u32_be()? as usize;
        if n > MAX_REVOKED || c.remaining() < n * 8 {
            return Err(Error::BadValue("serial count"));
        }
        let serials = SerialList::Encoded(c.take(n * 8)?);
        let signature = c.array()?;
        c.finish()?;
        //= docs/wire.md#credential
        //# (revocations) if the serials are not strictly increasing.
        let mut prev = None;
        for s in serials.iter() {
            if prev.is_some_and(|p| p >= s) {
                return Err(Error::BadValue("serial order"));
            }
            prev = Some(s);
        }
        Ok(RevocationListRepr {
            realm,
            serial,
            issued,
            serials,
            signature,
        })
    }

    /// Appends everything but the signature: the bytes the CA signs.
    pub fn emit_signed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&REVOCATION_MAGIC);
        out.extend_from_slice(&self.realm);
        out.extend_from_slice(&self.serial.to_be_bytes());
        out.extend_from_slice(&self.issued.to_be_bytes());
        out.extend_from_slice(&(self.serials.len() as u32).to_be_bytes());
        for s in self.serials.iter() {
            out.extend_from_slice(&s.to_be_bytes());
        }
    }

    /// Appends the canonical binary form: the signed bytes, then the signature.
    pub fn emit(&self, out: &mut Vec<u8>) {
        self.emit_signed(out);
        out.extend_from_slice(&self.signature);
    }
}
