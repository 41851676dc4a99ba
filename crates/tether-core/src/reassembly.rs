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
    /// Its sample size or fragment size differs from the first fragment's.
    Inconsistent,
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
    /// When the last new fragment arrived.
    pub(crate) last: Instant,
    /// When fragments of this sample were last requested.
    pub(crate) nacked: Option<Instant>,
}

impl Reassembly {
    /// Starts a sample from one of its fragments (already validated by `tether-wire`). The
    /// buffer is zero-filled lazily by the allocator, so a sample's pages are touched only
    /// as its fragments arrive.
    pub(crate) fn new(f: &DataFragRepr<'_>, now: Instant) -> Self {
        let count = f.frag_count() as usize;
        Reassembly {
            sample_size: f.sample_size,
            frag_size: f.frag_size,
            buf: BytesMut::zeroed(f.sample_size as usize),
            received: vec![0; count.div_ceil(64)],
            have: 0,
            highest: 0,
            last: now,
            nacked: None,
        }
    }

    pub(crate) fn count(&self) -> u32 {
        self.sample_size.div_ceil(self.frag_size as u32)
    }

    fn has(&self, n: u32) -> bool {
        self.received[(n / 64) as usize] & (1 << (n % 64)) != 0
    }

    /// Stores one fragment. Returns the whole sample once the last missing one arrives.
    pub(crate) fn add(
        &mut self,
        f: &DataFragRepr<'_>,
        now: Instant,
    ) -> Result<Option<Bytes>, FragError> {
        if f.sample_size != self.sample_size || f.frag_size != self.frag_size {
            return Err(FragError::Inconsistent);
        }
        let n = f.frag_num;
        if self.has(n) {
            return Err(FragError::Duplicate);
        }
        // The wire layer checked that n < count and that the length fits exactly.
        let start = n as usize * self.frag_size as usize;
        self.buf[start..start + f.payload.len()].copy_from_slice(f.payload);
        self.received[(n / 64) as usize] |= 1 << (n % 64);
        self.have += 1;
        self.highest = self.highest.max(n);
        self.last = now;
        if self.have == self.count() {
            return Ok(Some(std::mem::take(&mut self.buf).freeze()));
        }
        Ok(None)
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
        let mut r = Reassembly::new(&frag(2, &sample[20..]), now);
        assert_eq!(r.add(&frag(2, &sample[20..]), now), Ok(None));
        assert_eq!(
            r.add(&frag(2, &sample[20..]), now),
            Err(FragError::Duplicate)
        );
        assert_eq!(r.missing(0, false).collect::<Vec<_>>(), vec![0, 1]);
        let mut lie = frag(0, &sample[..10]);
        lie.sample_size = 30;
        assert_eq!(r.add(&lie, now), Err(FragError::Inconsistent));
        assert_eq!(r.add(&frag(0, &sample[..10]), now), Ok(None));
        assert_eq!(r.missing(0, true).collect::<Vec<_>>(), vec![1]);
        let done = r.add(&frag(1, &sample[10..20]), now).unwrap().unwrap();
        assert_eq!(&done[..], &sample[..]);
    }
}
