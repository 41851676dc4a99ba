//! HEARTBEAT, ACKNACK, GAP and NACK_FRAG: reliability (`docs/wire.md` sections 3.4 to 3.6
//! and 3.8).

use super::{emit_bitmap, set_bits};
use crate::{Cursor, EntityId, Error, MAX_ACKNACK_BITS};

/// A writer's statement of what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatRepr {
    /// The writer.
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// First sequence number still available (≥ 1).
    pub first: u64,
    /// Last sequence number written (`first - 1` when nothing is available).
    pub last: u64,
    /// Increases with every heartbeat of this writer.
    pub count: u32,
    /// Final (RTPS's FinalFlag): readers answer only if they miss something. A writer asks
    /// for acknowledgements only when it needs them, so in steady state its readers do
    /// not each answer every heartbeat. Submessage flag [`HEARTBEAT_FINAL`].
    pub final_: bool,
}

/// The HEARTBEAT submessage flag that makes it final.
pub const HEARTBEAT_FINAL: u8 = 0x01;

/// The ACKNACK submessage flag of a reader that does not know where it starts with the
/// writer: it acknowledges nothing, and asks for a heartbeat addressed to it.
pub const ACKNACK_START_UNKNOWN: u8 = 0x01;

/// A reader's acknowledgement: all below `base` received; bit `i` set = `base + i` missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckNackRepr {
    /// The reader.
    pub reader: EntityId,
    /// The writer.
    pub writer: EntityId,
    /// Every sequence number below this one has been received (≥ 1).
    pub base: u64,
    /// How many bits of `bitmap` are meaningful (≤ 256).
    pub num_bits: u16,
    /// Bit `i` (word `i / 32`, bit `i % 32`) set: `base + i` is requested.
    pub bitmap: [u32; 8],
    /// Increases with every ACKNACK of this reader.
    pub count: u32,
    /// The reader does not know where it starts with this writer (it has not yet had a
    /// heartbeat addressed to it): it acknowledges nothing (`base` and the bitmap say
    /// nothing) and asks the writer to tell it. Submessage flag [`ACKNACK_START_UNKNOWN`].
    pub start_unknown: bool,
}

impl AckNackRepr {
    /// Iterates the requested sequence numbers.
    pub fn missing(&self) -> impl Iterator<Item = u64> + '_ {
        set_bits(&self.bitmap, self.num_bits).map(|i| self.base + i as u64)
    }
}

/// How many sequence numbers of a writer a reader skipped as gone (a GAP, or a heartbeat
/// that no longer had them, came before they did), counted since it met the writer: sent
/// right after each of its ACKNACKs, numbered as that ACKNACK, and counting what lies below
/// its `base`. It lets a writer that let samples go for the reader tell those it received
/// from those it lacks (`docs/wire.md#skipped`). A kind of its own, so that a receiver of an
/// earlier version skips it and still takes the ACKNACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedRepr {
    /// The reader.
    pub reader: EntityId,
    /// The writer.
    pub writer: EntityId,
    /// The `count` of the ACKNACK it goes with.
    pub count: u32,
    /// Sequence numbers skipped below that ACKNACK's `base`.
    pub skipped: u64,
    /// Of those, the ones the reader gave up on by itself: the writer's lease ran out
    /// (or it said goodbye) before it repaired them. The writer never said they were gone,
    /// so an acknowledgement past them does not mean the reader has them.
    pub abandoned: u64,
}

impl SkippedRepr {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'_>) -> Result<Self, Error> {
        //= docs/wire.md#skipped
        let reader = c.entity("reader")?;
        let writer = c.entity("writer")?;
        let count = c.u32()?;
        let skipped = c.u64()?;
        let abandoned = c.u64()?;
        Ok(SkippedRepr {
            reader,
            writer,
            count,
            skipped,
            abandoned,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.skipped.to_le_bytes());
        out.extend_from_slice(&self.abandoned.to_le_bytes());
        Ok(())
    }
}

/// A writer's statement that `[start, end)` will never be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapRepr {
    /// The writer.
    pub writer: EntityId,
    /// The reader addressed, or [`EntityId::ALL`].
    pub reader: EntityId,
    /// First irrelevant sequence number (≥ 1).
    pub start: u64,
    /// One past the last irrelevant sequence number (> `start`).
    pub end: u64,
}

impl HeartbeatRepr {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'_>, flags: u8) -> Result<Self, Error> {
        //= docs/wire.md#heartbeat
        let writer = c.entity("writer")?;
        let reader = EntityId(c.u32()?);
        let first = c.seq("first")?;
        let last = c.u64()?;
        if last == u64::MAX || last + 1 < first {
            return Err(Error::BadValue("last"));
        }
        let count = c.u32()?;
        Ok(HeartbeatRepr {
            writer,
            reader,
            first,
            last,
            count,
            final_: flags & HEARTBEAT_FINAL != 0,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.first.to_le_bytes());
        out.extend_from_slice(&self.last.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        Ok(())
    }
}

impl AckNackRepr {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'_>, flags: u8) -> Result<Self, Error> {
        //= docs/wire.md#acknack
        let reader = c.entity("reader")?;
        let writer = c.entity("writer")?;
        let base = c.seq("base")?;
        let num_bits = c.u16()?;
        if num_bits > MAX_ACKNACK_BITS || base.checked_add(num_bits as u64).is_none() {
            return Err(Error::BadLength);
        }
        let count = c.u32()?;
        let bitmap = c.bitmap(num_bits)?;
        Ok(AckNackRepr {
            reader,
            writer,
            base,
            num_bits,
            bitmap,
            count,
            start_unknown: flags & ACKNACK_START_UNKNOWN != 0,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.num_bits > MAX_ACKNACK_BITS {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.base.to_le_bytes());
        out.extend_from_slice(&self.num_bits.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        emit_bitmap(out, &self.bitmap, self.num_bits);
        Ok(())
    }
}

impl GapRepr {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'_>) -> Result<Self, Error> {
        //= docs/wire.md#gap
        let writer = c.entity("writer")?;
        let reader = EntityId(c.u32()?);
        let start = c.seq("start")?;
        let end = c.u64()?;
        if end <= start {
            return Err(Error::BadValue("end"));
        }
        Ok(GapRepr {
            writer,
            reader,
            start,
            end,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.start.to_le_bytes());
        out.extend_from_slice(&self.end.to_le_bytes());
        Ok(())
    }
}

/// A reader's request for fragments of one sample: bit `i` set = fragment `base + i` missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NackFragRepr {
    /// The reader.
    pub reader: EntityId,
    /// The writer.
    pub writer: EntityId,
    /// The sample.
    pub seq: u64,
    /// First fragment number the bitmap describes.
    pub base: u32,
    /// Meaningful bits (1..=256).
    pub num_bits: u16,
    /// Bit `i` (word `i / 32`, bit `i % 32`) set: fragment `base + i` is requested.
    pub bitmap: [u32; 8],
    /// Increases with every NACK_FRAG of this reader.
    pub count: u32,
}

impl NackFragRepr {
    /// Iterates the requested fragment numbers.
    pub fn missing(&self) -> impl Iterator<Item = u32> + '_ {
        set_bits(&self.bitmap, self.num_bits).map(|i| self.base + i)
    }
}

impl NackFragRepr {
    /// Parses the body's fields from `c` (the caller checks that they fill the body).
    pub(crate) fn parse(c: &mut Cursor<'_>) -> Result<Self, Error> {
        //= docs/wire.md#nack_frag
        let reader = c.entity("reader")?;
        let writer = c.entity("writer")?;
        let seq = c.seq("seq")?;
        let base = c.u32()?;
        let num_bits = c.u16()?;
        if num_bits == 0
            || num_bits > MAX_ACKNACK_BITS
            || base.checked_add(num_bits as u32).is_none()
        {
            return Err(Error::BadLength);
        }
        let count = c.u32()?;
        let bitmap = c.bitmap(num_bits)?;
        Ok(NackFragRepr {
            reader,
            writer,
            seq,
            base,
            num_bits,
            bitmap,
            count,
        })
    }

    /// Appends the body.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.num_bits == 0 || self.num_bits > MAX_ACKNACK_BITS {
            return Err(Error::BadLength);
        }
        out.extend_from_slice(&self.reader.0.to_le_bytes());
        out.extend_from_slice(&self.writer.0.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.base.to_le_bytes());
        out.extend_from_slice(&self.num_bits.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        emit_bitmap(out, &self.bitmap, self.num_bits);
        Ok(())
    }
}
