//! [`Cursor`], the one bounds-checked reader tether parses bytes with.

use crate::{EntityId, Error};

/// A bounds-checked reader over a byte slice: every read is checked against the bytes left,
/// so a lying length or count can only produce [`Error::Truncated`], never a panic or a read
/// past the end. Integers are little-endian (the datagram's byte order, `docs/wire.md`
/// section 1); the `_be` reads are for the big-endian layouts (the credential's and the
/// revocation list's binary forms, section 3.10).
///
/// It is the only code in tether that indexes bytes being parsed: `tether-wire`'s
/// representations use it, and so does anything else that reads a layout of `docs/wire.md`.
#[derive(Clone)]
pub struct Cursor<'a> {
    buf: &'a [u8],
}

impl core::fmt::Debug for Cursor<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cursor")
            .field("remaining", &self.buf.len())
            .finish()
    }
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.buf.len() < n {
            return Err(Error::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// The next `N` bytes, as a reference to an array.
    pub fn array_ref<const N: usize>(&mut self) -> Result<&'a [u8; N], Error> {
        self.take(N)?.try_into().map_err(|_| Error::Truncated)
    }

    /// The next `N` bytes, copied.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        self.array_ref().copied()
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.array::<1>()?[0])
    }

    /// A little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, Error> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A big-endian `u16`.
    pub fn u16_be(&mut self) -> Result<u16, Error> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// A big-endian `u32`.
    pub fn u32_be(&mut self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// A big-endian `u64`.
    pub fn u64_be(&mut self) -> Result<u64, Error> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// A string: `u16` length (little-endian), then that many bytes of UTF-8.
    pub fn str16(&mut self) -> Result<&'a str, Error> {
        let n = self.u16()? as usize;
        core::str::from_utf8(self.take(n)?).map_err(|_| Error::BadUtf8)
    }

    /// A string of at most `max` bytes: `u16` length (big-endian), then UTF-8.
    pub fn str16_be(&mut self, max: usize) -> Result<&'a str, Error> {
        let n = self.u16_be()? as usize;
        if n > max {
            return Err(Error::BadLength);
        }
        core::str::from_utf8(self.take(n)?).map_err(|_| Error::BadUtf8)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.buf)
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// True if every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// `Ok` if every byte has been read ([`Error::BadLength`] otherwise: fields must fill a
    /// body exactly).
    pub fn finish(&self) -> Result<(), Error> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(Error::BadLength)
        }
    }

    /// The ⌈num_bits/32⌉ words of an ACKNACK or NACK_FRAG bitmap (`num_bits` ≤ 256, checked
    /// by the caller); bits beyond `num_bits` must be zero.
    pub(crate) fn bitmap(&mut self, num_bits: u16) -> Result<[u32; 8], Error> {
        let mut bitmap = [0u32; 8];
        for w in bitmap.iter_mut().take(num_bits.div_ceil(32) as usize) {
            *w = self.u32()?;
        }
        if num_bits % 32 != 0 && bitmap[(num_bits / 32) as usize] >> (num_bits % 32) != 0 {
            return Err(Error::BadValue("bitmap"));
        }
        Ok(bitmap)
    }

    /// A non-zero entity id.
    pub(crate) fn entity(&mut self, field: &'static str) -> Result<EntityId, Error> {
        let v = self.u32()?;
        if v == 0 {
            return Err(Error::BadValue(field));
        }
        Ok(EntityId(v))
    }

    /// A valid sequence number (neither 0 nor `u64::MAX`).
    pub(crate) fn seq(&mut self, field: &'static str) -> Result<u64, Error> {
        let v = self.u64()?;
        if v == 0 || v == u64::MAX {
            return Err(Error::BadValue(field));
        }
        Ok(v)
    }
}
