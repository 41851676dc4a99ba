//! Reassembly of fragmented samples on the reader side (`docs/wire.md#data_frag`).
//!
//! One [`Reassembly`] per sample in progress. Memory is bounded by the participant's
//! `max_reassembly_bytes` per reader (checked by the caller before a new one is started); a
//! fragment that disagrees with the sample it claims to belong to is refused.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tether_wire::DataFragRepr;

/// Why a fragment was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FragError {
    /// Its sample size differs from the first fragment's.
    Inconsistent,
    /// The same sample cut in fragments of another size: the writer's datagram size for us
    /// changed. The sample starts again.
    Resized,
    /// Already received.
    Duplicate,
}

/// A sample being put together from its fragments.
#[derive(Debug)]
pub(crate) struct Reassembly {
    pub(crate) sample_size: u32,
    frag_size: u16,
    buf: BytesMut,
    received: Vec<u64>,
    have: u32,
    /// Highest fragment number received.
    pub(crate) highest: u32,
    /// When the first and the last new fragment arrived.
    first: Instant,
    pub(crate) last: Instant,
    /// When fragments of this sample may be requested again (an answer to the last request
    /// could have come by then).
    pub(crate) renack_at: Option<Instant>,
}

/// Largest buffer a writer proxy keeps for its next reassembly (see [`Reassembly::new`]).
pub(crate) const SPARE_MAX: usize = 16 << 20;

impl Reassembly {
    /// Starts a sample from one of its fragments (already validated by `tether-wire`).
    ///
    /// `spare` is the buffer of this writer's previous sample: once the application has
    /// dropped that sample, its memory is taken back instead of allocating (and faulting
    /// in) fresh pages, which for samples of megabytes cost more than copying them. The
    /// buffer is filled in order, without zeroing it first; only the gaps that fragments
    /// arriving out of order leave are zero-filled.
    pub(crate) fn new(f: &DataFragRepr<'_>, now: Instant, spare: &mut BytesMut) -> Self {
        let count = f.frag_count() as usize;
        let mut buf = std::mem::take(spare);
        buf.clear();
        buf.reserve(f.sample_size as usize);
        Reassembly {
            sample_size: f.sample_size,
            frag_size: f.frag_size,
            buf,
            received: vec![0; count.div_ceil(64)],
            have: 0,
            highest: 0,
            first: now,
            last: now,
            renack_at: None,
        }
    }

    pub(crate) fn count(&self) -> u32 {
        self.sample_size.div_ceil(self.frag_size as u32)
    }

    fn has(&self, n: u32) -> bool {
        self.received[(n / 64) as usize] & (1 << (n % 64)) != 0
    }

    /// Stores one fragment. Returns the whole sample once the last missing one arrives; the
    /// emptied buffer (sharing the sample's allocation) is left in `spare` for the next.
    pub(crate) fn add(
        &mut self,
        f: &DataFragRepr<'_>,
        now: Instant,
        spare: &mut BytesMut,
    ) -> Result<Option<Bytes>, FragError> {
        if f.sample_size != self.sample_size {
            return Err(FragError::Inconsistent);
        }
        if f.frag_size != self.frag_size {
            return Err(FragError::Resized);
        }
        let n = f.frag_num;
        if self.has(n) {
            return Err(FragError::Duplicate);
        }
        // The wire layer checked that n < count and that the length fits exactly.
        let start = n as usize * self.frag_size as usize;
        let end = start + f.payload.len();
        if start >= self.buf.len() {
            // In order (or ahead: the skipped fragments' room is zero-filled for them).
            self.buf.resize(start, 0);
            self.buf.extend_from_slice(f.payload);
        } else {
            // A gap left by fragments that overtook this one.
            self.buf[start..end].copy_from_slice(f.payload);
        }
        self.received[(n / 64) as usize] |= 1 << (n % 64);
        self.have += 1;
        self.highest = self.highest.max(n);
        self.last = now;
        if self.have == self.count() {
            let whole = self.buf.split().freeze();
            if self.buf.capacity() == 0 && self.sample_size as usize <= SPARE_MAX {
                *spare = std::mem::take(&mut self.buf);
            }
            return Ok(Some(whole));
        }
        Ok(None)
    }

    /// How long re-sending `frags` of this sample takes at the rate its fragments have
    /// arrived so far (none before two have).
    pub(crate) fn transfer_time(&self, frags: u32) -> std::time::Duration {
        let span = self
            .last
            .saturating_duration_since(self.first)
            .as_secs_f64();
        let bytes = self.have.saturating_sub(1) as f64 * self.frag_size as f64;
        if span <= 0.0 || bytes <= 0.0 {
            return std::time::Duration::ZERO;
        }
        let secs = frags as f64 * self.frag_size as f64 * span / bytes;
        std::time::Duration::from_secs_f64(secs.min(10.0))
    }

    /// Missing fragment numbers, from `from`, that a repair request should name: those below
    /// the highest one received (they were overtaken, so they are lost), or every missing one
    /// when `all` (the sender has finished: its heartbeat came after a quiet period).
    pub(crate) fn missing(&self, from: u32, all: bool) -> impl Iterator<Item = u32> + '_ {
        let limit = if all { self.count() } else { self.highest };
        (from..limit).filter(move |n| !self.has(*n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_wire::EntityId;

    fn frag(n: u32, data: &[u8]) -> DataFragRepr<'_> {
        DataFragRepr {
            writer: EntityId(1),
            reader: EntityId(0),
            seq: 1,
            timestamp_ns: 5,
            sample_size: 25,
            frag_size: 10,
            frag_num: n,
            payload: data,
        }
    }

    #[test]
    fn reassembles_in_any_order_and_refuses_lies() {
        let now = Instant::now();
        let sample: Vec<u8> = (0..25).collect();
        let mut spare = BytesMut::new();
        let mut r = Reassembly::new(&frag(2, &sample[20..]), now, &mut spare);
        assert_eq!(r.add(&frag(2, &sample[20..]), now, &mut spare), Ok(None));
        assert_eq!(
            r.add(&frag(2, &sample[20..]), now, &mut spare),
            Err(FragError::Duplicate)
        );
        assert_eq!(r.missing(0, false).collect::<Vec<_>>(), vec![0, 1]);
        let mut lie = frag(0, &sample[..10]);
        lie.sample_size = 30;
        assert_eq!(r.add(&lie, now, &mut spare), Err(FragError::Inconsistent));
        let mut resized = frag(0, &sample[..12]);
        resized.frag_size = 12;
        assert_eq!(r.add(&resized, now, &mut spare), Err(FragError::Resized));
        assert_eq!(r.add(&frag(0, &sample[..10]), now, &mut spare), Ok(None));
        assert_eq!(r.missing(0, true).collect::<Vec<_>>(), vec![1]);
        let done = r
            .add(&frag(1, &sample[10..20]), now, &mut spare)
            .unwrap()
            .unwrap();
        assert_eq!(&done[..], &sample[..]);
    }

    /// Once the application drops a sample, the next one reuses its memory; while it holds
    /// it, the next one gets its own.
    #[test]
    fn next_sample_reuses_the_buffer_once_free() {
        let now = Instant::now();
        let sample: Vec<u8> = (0..25).collect();
        let mut spare = BytesMut::new();
        let whole = |spare: &mut BytesMut| {
            let mut r = Reassembly::new(&frag(0, &sample[..10]), now, spare);
            for (n, part) in [(0, &sample[..10]), (1, &sample[10..20]), (2, &sample[20..])] {
                if let Some(b) = r.add(&frag(n, part), now, spare).unwrap() {
                    return b;
                }
            }
            unreachable!()
        };
        let a = whole(&mut spare);
        let pa = a.as_ptr();
        drop(a);
        let b = whole(&mut spare);
        assert_eq!(b.as_ptr(), pa, "memory taken back");
        let c = whole(&mut spare);
        assert_ne!(c.as_ptr(), b.as_ptr(), "b is still held: c has its own");
        assert_eq!(&b[..], &sample[..]);
        assert_eq!(&c[..], &sample[..]);
    }
}
