//! The byte strings of key distribution (`docs/wire.md#key`, `#sealed`, `#auth`): a wrapped
//! sender key, the context it is wrapped under, the pairwise key's HKDF info, and the input
//! of a topic id. `tether-crypto` derives, seals and opens; the bytes are laid out here.

use crate::{Cursor, Error, ParticipantId};

/// Bytes of a key-wrap nonce.
pub const WRAP_NONCE_LEN: usize = 12;
/// Bytes of a key-wrap tag.
pub const WRAP_TAG_LEN: usize = 16;

/// A wrapped sender key, what KEY's `wrapped` field holds: `nonce (12) ‖ AES-256-GCM(key) ‖
/// tag (16)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrappedKeyRepr<'a> {
    /// The nonce it was sealed with (random, fresh per wrap).
    pub nonce: [u8; WRAP_NONCE_LEN],
    /// The sealed key, then the tag (at least [`WRAP_TAG_LEN`] bytes).
    pub sealed: &'a [u8],
}

impl<'a> WrappedKeyRepr<'a> {
    /// Parses a wrapped key: a nonce and at least a tag.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let mut c = Cursor::new(bytes);
        let nonce = c.array()?;
        let sealed = c.rest();
        if sealed.len() < WRAP_TAG_LEN {
            return Err(Error::Truncated);
        }
        Ok(WrappedKeyRepr { nonce, sealed })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn len(&self) -> usize {
        WRAP_NONCE_LEN + self.sealed.len()
    }

    /// Never true: a wrapped key holds at least its nonce.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Appends the wrapped key.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.sealed.len() < WRAP_TAG_LEN {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(self.sealed);
        Ok(())
    }
}

/// Bytes of a key-wrap context.
pub const WRAP_CONTEXT_LEN: usize = 13 + 32 + 12 + 12 + 4 + 1;

/// What a sender key is bound to when wrapped for one reader (the HKDF info and the AEAD's
/// associated data): `"tether key v1" ‖ realm CA key ‖ writer (12) ‖ reader (12) ‖ epoch
/// (u32 BE) ‖ suite`.
pub fn key_wrap_context(
    realm: &[u8; 32],
    writer: &[u8; 12],
    reader: &[u8; 12],
    epoch: u32,
    suite: u8,
) -> [u8; WRAP_CONTEXT_LEN] {
    let mut c = [0u8; WRAP_CONTEXT_LEN];
    let (label, rest) = c.split_at_mut(13);
    label.copy_from_slice(b"tether key v1");
    let (r, rest) = rest.split_at_mut(32);
    r.copy_from_slice(realm);
    let (w, rest) = rest.split_at_mut(12);
    w.copy_from_slice(writer);
    let (d, rest) = rest.split_at_mut(12);
    d.copy_from_slice(reader);
    let (e, s) = rest.split_at_mut(4);
    e.copy_from_slice(&epoch.to_be_bytes());
    s[0] = suite;
    c
}

/// The HKDF info of a pairwise key (`docs/wire.md#sealed`): `realm CA key ‖ sender id (u64
/// BE) ‖ receiver id (u64 BE) ‖ suite`.
pub fn pair_key_info(
    realm: &[u8; 32],
    from: ParticipantId,
    to: ParticipantId,
    suite: u8,
) -> [u8; 32 + 8 + 8 + 1] {
    let mut info = [0u8; 49];
    let (r, rest) = info.split_at_mut(32);
    r.copy_from_slice(realm);
    let (f, rest) = rest.split_at_mut(8);
    f.copy_from_slice(&from.0.to_be_bytes());
    let (t, s) = rest.split_at_mut(8);
    t.copy_from_slice(&to.0.to_be_bytes());
    s[0] = suite;
    info
}

/// Feeds `feed`, in order, the pieces of a topic id's HMAC input (`docs/wire.md#auth`):
/// `"tether topic v1" ‖ u64 BE length ‖ name ‖ u64 BE length ‖ type ‖ u64 BE length ‖
/// scope`. Each field is length-prefixed, so no two different topics encode alike.
pub fn topic_id_input(name: &str, type_name: &str, scope: &str, mut feed: impl FnMut(&[u8])) {
    feed(b"tether topic v1");
    for field in [name, type_name, scope] {
        feed(&(field.len() as u64).to_be_bytes());
        feed(field.as_bytes());
    }
}

/// Bytes a sealed endpoint description adds to its plaintext: the nonce (12) and the tag
/// (16).
pub const DESCRIPTION_OVERHEAD: usize = 12 + 16;

/// What an endpoint's description binds besides its bytes (`docs/wire.md#endpoint`):
/// `"tether endpoint v1" ‖ topic id (32)`, so a description opens only beside the topic id
/// it was sealed for.
pub fn description_aad(topic_id: &[u8; 32]) -> [u8; 50] {
    let mut a = [0u8; 50];
    let (label, id) = a.split_at_mut(18);
    label.copy_from_slice(b"tether endpoint v1");
    id.copy_from_slice(topic_id);
    a
}

/// An endpoint description's plaintext: `u16 BE length ‖ name ‖ u16 BE length ‖ type`.
pub fn description_plaintext(name: &str, type_name: &str) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(4 + name.len() + type_name.len());
    for field in [name, type_name] {
        let n = u16::try_from(field.len()).map_err(|_| Error::TooLong)?;
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(field.as_bytes());
    }
    Ok(out)
}

/// The topic name and type of an opened description (which must hold exactly those).
pub fn parse_description(plain: &[u8]) -> Result<(&str, &str), Error> {
    let mut c = Cursor::new(plain);
    let name = c.str16_be(usize::from(u16::MAX))?;
    let type_name = c.str16_be(usize::from(u16::MAX))?;
    c.finish()?;
    if name.is_empty() {
        return Err(Error::BadValue("topic"));
    }
    Ok((name, type_name))
}
