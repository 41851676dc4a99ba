//! Reassembly of fragmented samples on the reader side (`docs/wire.md#data_frag`).
//!
//! One [`Reassembly`] per sample in progress. Its memory follows what arrived, never what
//! the first fragment claims (a forged one may claim any size up to `max_sample_size`):
//! fragments in order are appended to one buffer, which grows by doubling (never past the
//! sample's size) and becomes the sample without a copy; a fragment that overtakes a missing
//! one is copied aside and joins the buffer once the hole before it is filled. Nothing is
//! sized by the fragment count either: which fragments arrived is the length of the buffer
//! plus the numbers kept aside.
//!
//! A reassembly is charged ([`Reassembly::charge`]) the bytes it received plus
//! [`ENTRY_OVERHEAD`] per fragment kept aside; the caller checks what a fragment would add
//! ([`Reassembly::cost`]) against the writer's and the reader's budgets before adding it.

use std::collections::BTreeMap;
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

/// What a fragment kept aside costs besides its bytes: its map entry and its allocation.
pub(crate) const ENTRY_OVERHEAD: u64 = 64;

/// A sample being put together from its fragments.
#[derive(Debug)]
pub(crate) struct Reassembly {
    pub(crate) sample_size: u32,
    frag_size: u16,
    /// Fragments `0..prefix`, in order: the sample's first bytes.
    buf: BytesMut,
    prefix: u32,
    /// Fragments received past a missing one, by number, until the hole before them fills.
    ahead: BTreeMap<u32, Box<[u8]>>,
    ahead_bytes: u64,
    /// Highest fragment number received.
    pub(crate) highest: u32,
    /// When the first and the last new fragment arrived.
    first: Instant,
    pub(crate) last: Instant,
    /// When fragments of this sample may be requested again (an answer to the last request
    /// could have come by then).
    pub(crate) renack_at: Option<Instant>,
}

/// Largest buffer a writer proxy keeps for its next reassembly (see [`Reassembly::add`]).
pub(crate) const SPARE_MAX: usize = 16 << 20;

/// Fragments a reassembly needs before their arrival rate predicts a repair's time.
const MIN_RATE_FRAGMENTS: u32 = 8;

impl Reassembly {
    /// A sample to be put together, from one of its fragments (already validated by
    /// `tether-wire`), which is not stored yet: [`add`](Self::add) it. Allocates nothing.
    pub(crate) fn new(f: &DataFragRepr<'_>, now: Instant) -> Self {
        Reassembly {
            sample_size: f.sample_size,
            frag_size: f.frag_size,
            buf: BytesMut::new(),
            prefix: 0,
            ahead: BTreeMap::new(),
            ahead_bytes: 0,
            highest: 0,
            first: now,
            last: now,
            renack_at: None,
        }
    }

    pub(crate) fn count(&self) -> u32 {
        self.sample_size.div_ceil(self.frag_size as u32)
    }

    /// Fragments received.
    fn have(&self) -> u32 {
        self.prefix + self.ahead.len() as u32
    }

    fn has(&self, n: u32) -> bool {
        n < self.prefix || self.ahead.contains_key(&n)
    }

    /// What this reassembly counts against its writer's and its reader's budgets: the bytes
    /// received, and [`ENTRY_OVERHEAD`] for each fragment kept aside.
    pub(crate) fn charge(&self) -> u64 {
        self.buf.len() as u64 + self.ahead_bytes + self.ahead.len() as u64 * ENTRY_OVERHEAD
    }

    /// What adding `f` would do to [`charge`](Self::charge): `(adds, frees)`. A fragment
    /// that fills the hole before fragments kept aside frees their overhead. Refuses one
    /// that does not belong here.
    pub(crate) fn cost(&self, f: &DataFragRepr<'_>) -> Result<(u64, u64), FragError> {
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
        let len = f.payload.len() as u64;
        if n != self.prefix {
            return Ok((len + ENTRY_OVERHEAD, 0));
        }
        // Those kept aside right after it join the buffer: their overhead goes.
        let joining = self
            .ahead
            .range(n + 1..)
            .zip(n + 1..)
            .take_while(|((k, _), want)| **k == *want)
            .count() as u64;
        Ok((len, joining * ENTRY_OVERHEAD))
    }

    /// Appends to the in-order buffer, growing it by doubling but never past the sample's
    /// size.
    fn append(&mut self, bytes: &[u8]) {
        let len = self.buf.len();
        if self.buf.capacity() - len < bytes.len() {
            let need = len + bytes.len();
            let want = need
                .max(self.buf.capacity().saturating_mul(2))
                .min(self.sample_size as usize)
                .max(need);
            self.buf.reserve(want - len);
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Stores one fragment (its [`cost`](Self::cost) checked by the caller). Returns the
    /// whole sample once the last missing one arrives; a handle on it is left in `spare`,
    /// so the writer's next sample can take its memory back once the application has let
    /// go of it.
    pub(crate) fn add(
        &mut self,
        f: &DataFragRepr<'_>,
        now: Instant,
        spare: &mut Option<Bytes>,
    ) -> Result<Option<Bytes>, FragError> {
        self.cost(f)?;
        let n = f.frag_num;
        // The wire layer checked that n < count and that the length fits exactly.
        if n == self.prefix {
            if self.prefix == 0 {
                // The writer's previous sample's memory, if the application let go of it,
                // rather than fresh pages (for samples of megabytes, faulting them in costs
                // more than copying them). Taken by a sample whose first fragment came.
                if let Some(Ok(mut m)) = spare.take().map(Bytes::try_into_mut) {
                    m.clear();
                    self.buf = m;
                }
            }
            self.append(f.payload);
            self.prefix += 1;
            while let Some(b) = self.ahead.remove(&self.prefix) {
                self.ahead_bytes -= b.len() as u64;
                self.append(&b);
                self.prefix += 1;
            }
        } else {
            self.ahead_bytes += f.payload.len() as u64;
            self.ahead.insert(n, f.payload.into());
        }
        self.highest = self.highest.max(n);
        self.last = now;
        if self.have() == self.count() {
            debug_assert!(self.ahead.is_empty() && self.buf.len() == self.sample_size as usize);
            let whole = std::mem::take(&mut self.buf).freeze();
            if whole.len() <= SPARE_MAX {
                *spare = Some(whole.clone());
            }
            return Ok(Some(whole));
        }
        Ok(None)
    }

    /// How long re-sending `frags` of this sample takes at the rate its fragments have
    /// arrived so far (none before two have).
    pub(crate) fn transfer_time(&self, frags: u32) -> std::time::Duration {
        // A rate from a few fragments is no rate: a reassembly started again by stragglers
        // of a sample received (and dropped for want of its key) saw two fragments seconds
        // apart, and put its repair request off for 10 s.
        if self.have() < MIN_RATE_FRAGMENTS {
            return std::time::Duration::ZERO;
        }
        let span = self
            .last
            .saturating_duration_since(self.first)
            .as_secs_f64();
        let bytes = self.have().saturating_sub(1) as f64 * self.frag_size as f64;
        if span <= 0.0 || bytes <= 0.0 {
            return std::time::Duration::ZERO;
        }
        let secs = frags as f64 * self.frag_size as f64 * span / bytes;
        std::time::Duration::from_secs_f64(secs.min(10.0))
    }

    /// Missing fragment numbers, from `from`, that a repair request should name: those below
    /// the highest one received (they were overtaken, so they are lost), or every missing one
    /// when `all` (the sender has finished: its heartbeat came after a quiet period). Walks
    /// the fragments kept aside, not the numbers: taking `k` of them costs `k` plus what
    /// was received among them.
    pub(crate) fn missing(&self, from: u32, all: bool) -> impl Iterator<Item = u32> + '_ {
        let limit = if all { self.count() } else { self.highest };
        let mut n = from.max(self.prefix);
        let mut held = self.ahead.range(n..).map(|(k, _)| *k).peekable();
        std::iter::from_fn(move || {
            while n < limit {
                if held.peek() == Some(&n) {
                    held.next();
                    n += 1;
                    continue;
                }
                let m = n;
                n += 1;
                return Some(m);
            }
            None
        })
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
        let mut spare = None;
        let mut r = Reassembly::new(&frag(2, &sample[20..]), now);
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
        let mut spare = None;
        let whole = |spare: &mut Option<Bytes>| {
            let mut r = Reassembly::new(&frag(0, &sample[..10]), now);
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

    fn big(n: u32, data: &[u8]) -> DataFragRepr<'_> {
        DataFragRepr {
            sample_size: 256 << 20,
            frag_size: 1000,
            ..frag(n, data)
        }
    }

    /// A first fragment claiming 256 MiB, in order or the very last one, costs its own
    /// bytes (and an entry); nothing is reserved or zeroed for the rest.
    #[test]
    fn memory_follows_what_arrived_not_the_claim() {
        let now = Instant::now();
        let mut spare = None;
        let kb = [7u8; 1000];
        let mut r = Reassembly::new(&big(0, &kb), now);
        assert_eq!(r.cost(&big(0, &kb)), Ok((1000, 0)));
        r.add(&big(0, &kb), now, &mut spare).unwrap();
        assert_eq!(r.charge(), 1000);
        assert!(r.buf.capacity() < 4096, "{}", r.buf.capacity());
        let last = (256u32 << 20).div_ceil(1000) - 1;
        let tail = [7u8; (256 << 20) % 1000];
        let mut r = Reassembly::new(&big(last, &tail), now);
        r.add(&big(last, &tail), now, &mut spare).unwrap();
        assert_eq!(r.charge(), tail.len() as u64 + ENTRY_OVERHEAD);
        assert_eq!(r.buf.capacity(), 0);
        // Asking for what is missing walks what is held, not the 268,436 numbers.
        assert_eq!(r.missing(0, false).take(3).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(r.missing(last, true).count(), 0);
    }

    /// The default budgets: a writer's share takes a sample of the default
    /// `max_sample_size` even when every fragment of it (at least 1,024 bytes, below any
    /// path's) arrives out of order, and the reader's takes two shares.
    #[test]
    fn default_budgets_take_a_largest_sample_from_two_writers() {
        let c = crate::Config::new(0, tether_wire::ParticipantId(1));
        let worst = c.max_sample_size as u64 + (c.max_sample_size as u64 / 1024) * ENTRY_OVERHEAD;
        assert!(c.max_reassembly_bytes_per_writer as u64 >= worst);
        assert!(c.max_reassembly_bytes >= 2 * c.max_reassembly_bytes_per_writer);
    }

    /// Fragments kept aside join the buffer when the hole before them fills; the cost of
    /// the fragment that fills it counts the overhead it frees.
    #[test]
    fn overtaking_fragments_join_when_the_hole_fills() {
        let now = Instant::now();
        let sample: Vec<u8> = (0..25).collect();
        let mut spare = None;
        let mut r = Reassembly::new(&frag(1, &sample[10..20]), now);
        r.add(&frag(1, &sample[10..20]), now, &mut spare).unwrap();
        assert_eq!(r.charge(), 10 + ENTRY_OVERHEAD);
        assert_eq!(r.missing(0, true).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(r.cost(&frag(0, &sample[..10])), Ok((10, ENTRY_OVERHEAD)));
        r.add(&frag(0, &sample[..10]), now, &mut spare).unwrap();
        assert_eq!(r.charge(), 20);
        assert_eq!(r.missing(0, true).collect::<Vec<_>>(), [2]);
        let done = r.add(&frag(2, &sample[20..]), now, &mut spare).unwrap();
        assert_eq!(&done.unwrap()[..], &sample[..]);
    }
}
