//! AUTH, KEY, KEY_REQUEST, SEALED and BATCH_SIG: security (`docs/wire.md` sections 3.10 to
//! 3.13).

use crate::{Cursor, EntityId, Error};

/// Largest credential an AUTH carries.
pub const MAX_CREDENTIAL_LEN: usize = 4096;

/// Mutual authentication in a secure realm (`docs/wire.md#auth`): the sender's credential,
/// a fresh challenge it sets the addressee, and its signature over the addressee's last
/// challenge, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthRepr<'a> {
    /// The participant addressed.
    pub to: crate::ParticipantId,
    /// The sender's challenge for `to` (random, fresh per peer).
    pub challenge: [u8; 32],
    /// Ed25519 signature by the sender over `"tether auth v1" | to's challenge | sender id |
    /// to id`, once it has received a challenge from `to`.
    pub response: Option<[u8; 64]>,
    /// The sender has verified the addressee (a valid credential and response): once both
    /// sides say so, they stop sending AUTH.
    pub verified_you: bool,
    /// The sender has heard that `to` verified it (so `to` need not say it again).
    pub you_verified_me: bool,
    /// The sender's credential (tether-crypto's canonical form, 1 to 4,096 bytes).
    pub credential: &'a [u8],
}

/// The bytes an AUTH response signs: the domain separator, the challenge being answered,
/// the answering participant and the one that set the challenge.
pub fn auth_signed_bytes(
    challenge: &[u8; 32],
    signer: crate::ParticipantId,
    challenger: crate::ParticipantId,
) -> [u8; 14 + 32 + 16] {
    let mut b = [0u8; 62];
    b[..14].copy_from_slice(b"tether auth v1");
    b[14..46].copy_from_slice(challenge);
    b[46..54].copy_from_slice(&signer.0.to_le_bytes());
    b[54..].copy_from_slice(&challenger.0.to_le_bytes());
    b
}

/// A writer's sender key for one epoch, wrapped for one reader (`docs/wire.md#key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The reader it is for (non-zero).
    pub reader: EntityId,
    /// The key's epoch (≥ 1).
    pub epoch: u32,
    /// The AEAD suite's code.
    pub suite: u8,
    /// The wrapped key (1 to 255 bytes).
    pub wrapped: &'a [u8],
}

/// A reader asks a writer for its key of an epoch it holds sealed samples of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRequestRepr {
    /// The reader (non-zero).
    pub reader: EntityId,
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The epoch (≥ 1).
    pub epoch: u32,
}

/// The submessages that followed, sealed under a key shared by the sending participant and
/// one receiving participant alone (`docs/wire.md#sealed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedRepr<'a> {
    /// The participant it is sealed for.
    pub to: crate::ParticipantId,
    /// The sender's counter for this peer (the nonce; ≥ 1, never repeated).
    pub counter: u64,
    /// Ciphertext and tag (at least the 16-byte tag).
    pub sealed: &'a [u8],
}

/// The writer's signature over the BATCH right after it in the same datagram
/// (`docs/wire.md#batch_sig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSigRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The batch's first sequence number (≥ 1).
    pub first_seq: u64,
    /// The batch's count (≥ 1).
    pub count: u32,
    /// Ed25519 signature.
    pub signature: &'a [u8; 64],
}

/// Bytes of a SEALED body before the sealed bytes: `to` and `counter`.
pub const SEALED_FIXED_LEN: usize = 16;

impl<'a> AuthRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#auth
        let to = crate::ParticipantId(c.u64()?);
        if to.0 == 0 {
            return Err(Error::BadValue("to"));
        }
        let challenge: [u8; 32] = c.take(32)?.try_into().map_err(|_| Error::BadLength)?;
        let flags = c.u8()?;
        if flags & !0b111 != 0 {
            return Err(Error::BadValue("auth flags"));
        }
        let response = match flags & 1 {
            0 => None,
            _ => Some(c.take(64)?.try_into().map_err(|_| Error::BadLength)?),
        };
        let verified_you = flags & 2 != 0;
        let you_verified_me = flags & 4 != 0;
        let n = c.u16()? as usize;
        if n == 0 || n > MAX_CREDENTIAL_LEN {
            return Err(Error::BadValue("credential length"));
        }
        let credential = c.take(n)?;
        Ok(AuthRepr {
            to,
            challenge,
            response,
            verified_you,
            you_verified_me,
            credential,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.credential.is_empty() || self.credential.len() > MAX_CREDENTIAL_LEN {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.to.0.to_le_bytes());
        out.extend_from_slice(&self.challenge);
        let flags = self.response.is_some() as u8
            | (self.verified_you as u8) << 1
            | (self.you_verified_me as u8) << 2;
        out.push(flags);
        if let Some(r) = &self.response {
            out.extend_from_slice(r);
        }
        out.extend_from_slice(&(self.credential.len() as u16).to_le_bytes());
        out.extend_from_slice(self.credential);
        Ok(())
    }
}

impl<'a> KeyRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#key
        let writer = c.entity("writer")?;
        let reader = c.entity("reader")?;
        let epoch = c.u32()?;
        if epoch == 0 {
            return Err(Error::BadValue("epoch"));
        }
        let suite = c.u8()?;
        let n = c.u8()? as usize;
        if n == 0 {
            return Err(Error::BadValue("wrapped length"));
        }
        let wrapped = c.take(n)?;
        Ok(KeyRepr {
            writer,
            reader,
            epoch,
            suite,
            wrapped,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.wrapped.is_empty() || self.wrapped.len() > 255 {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.push(self.suite);
        out.push(self.wrapped.len() as u8);
        out.extend_from_slice(self.wrapped);
        Ok(())
    }
}

impl KeyRequestRepr {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'_>) -> Result<Self, Error> {
        let reader = c.entity("reader")?;
        let writer = c.entity("writer")?;
        let epoch = c.u32()?;
        if epoch == 0 {
            return Err(Error::BadValue("epoch"));
        }
        Ok(KeyRequestRepr {
            reader,
            writer,
            epoch,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        Ok(())
    }
}

impl<'a> SealedRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#sealed
        let to = crate::ParticipantId(c.u64()?);
        let counter = c.u64()?;
        if counter == 0 {
            return Err(Error::BadValue("counter"));
        }
        let sealed = c.rest();
        if sealed.len() < 16 {
            return Err(Error::BadValue("sealed length"));
        }
        Ok(SealedRepr {
            to,
            counter,
            sealed,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.counter == 0 || self.sealed.len() < 16 {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.to.0.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
        out.extend_from_slice(self.sealed);
        Ok(())
    }
}

impl<'a> BatchSigRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#batch_sig
        let writer = c.entity("writer")?;
        let first_seq = c.u64()?;
        if first_seq == 0 {
            return Err(Error::BadValue("first_seq"));
        }
        let count = c.u32()?;
        if count == 0 {
            return Err(Error::BadValue("count"));
        }
        let signature: &[u8; 64] = c.take(64)?.try_into().map_err(|_| Error::BadLength)?;
        Ok(BatchSigRepr {
            writer,
            first_seq,
            count,
            signature,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.writer.0 == 0 || self.first_seq == 0 || self.count == 0 {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.first_seq.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(self.signature);
        Ok(())
    }
}
