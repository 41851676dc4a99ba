//! DATA, DATA_FRAG and BATCH: samples (`docs/wire.md` sections 3.3, 3.7 and 3.9).

use crate::{Cursor, EntityId, Error};

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// The sample's sequence number (≥ 1).
    pub seq: u64,
    /// Source timestamp, ns since the UNIX epoch.
    pub timestamp_ns: u64,
    /// The payload.
    pub payload: &'a [u8],
}

impl<'a> DataRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#data
        let writer = c.entity("writer")?;
        let reader = EntityId(c.u32()?);
        let seq = c.seq("seq")?;
        let timestamp_ns = c.u64()?;
        let payload = c.rest();
        Ok(DataRepr {
            writer,
            reader,
            seq,
            timestamp_ns,
            payload,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        self.emit_fixed(out);
        out.extend_from_slice(self.payload);
        Ok(())
    }
}

impl DataRepr<'_> {
    /// Appends the fixed part of a DATA body (everything but the payload), so a caller can
    /// send the payload from its own buffer (scatter-gather) without copying it here.
    pub fn emit_fixed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.timestamp_ns.to_le_bytes());
    }
}

/// One fragment of a sample. Every fragment but the last carries exactly `frag_size` bytes;
/// fragment `n` starts at byte `n × frag_size` of the sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataFragRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// The sample's sequence number (≥ 1).
    pub seq: u64,
    /// Source timestamp, ns since the UNIX epoch.
    pub timestamp_ns: u64,
    /// The whole sample's size in bytes (> `frag_size`).
    pub sample_size: u32,
    /// Size of every fragment but the last (≥ 1).
    pub frag_size: u16,
    /// This fragment's number (< ⌈sample_size / frag_size⌉).
    pub frag_num: u32,
    /// The fragment's bytes.
    pub payload: &'a [u8],
}

impl DataFragRepr<'_> {
    /// Number of fragments of the sample.
    pub fn frag_count(&self) -> u32 {
        self.sample_size.div_ceil(self.frag_size as u32)
    }

    /// Appends the fixed part (everything but the fragment's bytes).
    pub fn emit_fixed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.timestamp_ns.to_le_bytes());
        out.extend_from_slice(&self.sample_size.to_le_bytes());
        out.extend_from_slice(&self.frag_size.to_le_bytes());
        out.extend_from_slice(&self.frag_num.to_le_bytes());
    }
}

/// Fixed part of a DATA_FRAG body before the fragment's bytes.
pub const DATA_FRAG_FIXED_LEN: usize = 34;

impl<'a> DataFragRepr<'a> {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#data_frag
        let writer = c.entity("writer")?;
        let reader = EntityId(c.u32()?);
        let seq = c.seq("seq")?;
        let timestamp_ns = c.u64()?;
        let sample_size = c.u32()?;
        let frag_size = c.u16()?;
        let frag_num = c.u32()?;
        if frag_size == 0 || sample_size <= frag_size as u32 {
            return Err(Error::BadValue("frag_size"));
        }
        let count = sample_size.div_ceil(frag_size as u32);
        if frag_num >= count {
            return Err(Error::BadValue("frag_num"));
        }
        let payload = c.rest();
        let start = frag_num as u64 * frag_size as u64;
        let want = (sample_size as u64 - start).min(frag_size as u64);
        if payload.len() as u64 != want {
            return Err(Error::BadLength);
        }
        Ok(DataFragRepr {
            writer,
            reader,
            seq,
            timestamp_ns,
            sample_size,
            frag_size,
            frag_num,
            payload,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        self.emit_fixed(out);
        out.extend_from_slice(self.payload);
        Ok(())
    }
}

/// Consecutive samples of one writer: entry `i` is sequence number `first_seq + i`. Each
/// entry is `timestamp (u64) | length (u32) | bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRepr<'a> {
    /// The writer (non-zero).
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// Sequence number of the first entry (≥ 1).
    pub first_seq: u64,
    /// Number of entries (≥ 1).
    pub count: u32,
    /// The encoded entries, validated.
    pub entries: &'a [u8],
}

/// Fixed part of a BATCH body before its entries.
pub const BATCH_FIXED_LEN: usize = 20;
/// Bytes an entry adds to its sample in a BATCH.
pub const BATCH_ENTRY_OVERHEAD: usize = 12;

impl<'a> BatchRepr<'a> {
    /// Iterates `(seq, timestamp_ns, payload)`.
    pub fn samples(&self) -> impl Iterator<Item = (u64, u64, &'a [u8])> + 'a {
        let mut c = Cursor::new(self.entries);
        let first = self.first_seq;
        let mut i = 0u64;
        core::iter::from_fn(move || {
            // Validated when parsed: a failure here only ends the iteration.
            let ts = c.u64().ok()?;
            let len = c.u32().ok()? as usize;
            let bytes = c.take(len).ok()?;
            let seq = first + i;
            i += 1;
            Some((seq, ts, bytes))
        })
    }

    /// Appends the fixed part; the entries follow (built with [`push_batch_entry`]).
    pub fn emit_fixed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.first_seq.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
    }
}

/// Whether `entries` is exactly `count` whole entries.
fn check_entries(count: u32, entries: &[u8]) -> Result<(), Error> {
    if (count as usize).saturating_mul(BATCH_ENTRY_OVERHEAD) > entries.len() {
        return Err(Error::BadLength);
    }
    let mut check = Cursor::new(entries);
    for _ in 0..count {
        let _ts = check.u64()?;
        let len = check.u32()? as usize;
        check.take(len)?;
    }
    check.finish()
}

/// Appends one BATCH entry to `out`.
pub fn push_batch_entry(out: &mut Vec<u8>, timestamp_ns: u64, payload: &[u8]) {
    out.extend_from_slice(&batch_entry_head(timestamp_ns, payload.len()));
    out.extend_from_slice(payload);
}

/// The bytes in front of one batch entry's payload (timestamp, length), for writers that
/// build entries in their own buffer type.
pub fn batch_entry_head(timestamp_ns: u64, len: usize) -> [u8; BATCH_ENTRY_OVERHEAD] {
    let mut h = [0u8; BATCH_ENTRY_OVERHEAD];
    h[..8].copy_from_slice(&timestamp_ns.to_le_bytes());
    h[8..].copy_from_slice(&(len as u32).to_le_bytes());
    h
}

impl<'a> BatchRepr<'a> {
    /// A batch of `count` entries in `entries` (the plaintext of a SEALED_BATCH, say),
    /// validated as a BATCH's are: exactly `count` whole entries.
    pub fn from_entries(
        writer: EntityId,
        reader: EntityId,
        first_seq: u64,
        count: u32,
        entries: &'a [u8],
    ) -> Result<Self, Error> {
        if writer.0 == 0
            || first_seq == 0
            || count == 0
            || first_seq.checked_add(count as u64).is_none()
        {
            return Err(Error::BadValue("count"));
        }
        check_entries(count, entries)?;
        Ok(BatchRepr {
            writer,
            reader,
            first_seq,
            count,
            entries,
        })
    }

    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<Self, Error> {
        //= docs/wire.md#batch
        let writer = c.entity("writer")?;
        let reader = EntityId(c.u32()?);
        let first_seq = c.seq("first_seq")?;
        let count = c.u32()?;
        if count == 0 || first_seq.checked_add(count as u64).is_none() {
            return Err(Error::BadValue("count"));
        }
        let entries = c.rest();
        check_entries(count, entries)?;
        Ok(BatchRepr {
            writer,
            reader,
            first_seq,
            count,
            entries,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        self.emit_fixed(out);
        out.extend_from_slice(self.entries);
        Ok(())
    }
}
