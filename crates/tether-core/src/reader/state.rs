//! A local reader's state: its cache, and its view of each writer it is matched with
//! (order, gaps, reorder buffer, fragments being reassembled, acknowledgements).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use tether_wire::{AckNackRepr, EntityId, MAX_ACKNACK_BITS, SkippedRepr};

use crate::endpoint::EndpointInfo;
use crate::event::{Guid, LossReason, Sample, Stats};
use crate::qos::{History, Qos};
use crate::reader::lost::Losses;

/// A reader's cache: what the application takes from.
#[derive(Debug)]
pub(crate) struct Cache {
    /// Samples with their arrival and the engine input (datagram or write) that brought them.
    pub(crate) samples: VecDeque<(Sample, Instant, u64)>,
    pub(crate) bytes: u64,
    pub(crate) qos: Qos,
}

impl Cache {
    pub(crate) fn has_room(&self, len: usize) -> bool {
        self.samples.len() < self.qos.capacity()
            && (self.samples.is_empty() || self.bytes + len as u64 <= self.qos.max_bytes_limit())
    }

    /// Inserts a sample that input `input` brought. Keep-all refuses when full (false).
    /// Keep-last evicts the oldest samples, but only those of earlier inputs: the samples of
    /// one datagram (a batch) all stay until the application has had a chance to take them,
    /// so a depth smaller than a batch loses nothing to the batching itself. The cache thus
    /// holds at most the depth plus one datagram's samples. Evicted samples are lost: the
    /// application never had them.
    pub(crate) fn push(
        &mut self,
        s: Sample,
        now: Instant,
        input: u64,
        losses: &mut Losses<'_>,
    ) -> bool {
        let len = s.payload.len();
        if !self.has_room(len) {
            if self.qos.history() == History::KeepAll {
                return false;
            }
            while !self.has_room(len) {
                match self.samples.front() {
                    Some((_, _, i)) if *i < input => {}
                    _ => break,
                }
                if let Some((old, _, _)) = self.samples.pop_front() {
                    self.bytes -= old.payload.len() as u64;
                    losses.report(old.writer, old.seq, old.seq, LossReason::Overwritten);
                }
            }
        }
        self.bytes += len as u64;
        self.samples.push_back((s, now, input));
        true
    }

    pub(crate) fn pop(&mut self) -> Option<(Sample, Instant)> {
        let (s, at, _) = self.samples.pop_front()?;
        self.bytes -= s.payload.len() as u64;
        Some((s, at))
    }
}

/// A reader's view of one matched writer.
#[derive(Debug)]
pub(crate) struct WriterProxy {
    pub(crate) reliable: bool,
    /// Reliable: the next sequence number to deliver (None until the writer has said where
    /// this reader starts, in a heartbeat addressed to it: nothing is delivered or skipped
    /// before).
    pub(crate) expected: Option<u64>,
    /// Where this reader stood with the writer before they lost each other (the next
    /// sequence number it would have delivered), until the match made again starts.
    pub(crate) resume: Option<u64>,
    /// Best effort: the highest sequence number delivered.
    pub(crate) last_delivered: u64,
    /// Reliable: samples received ahead of `expected`.
    pub(crate) pending: BTreeMap<u64, Sample>,
    pub(crate) pending_bytes: u64,
    /// Ranges `[start, end)` ahead of `expected` that will never come, and why.
    pub(crate) gaps: Vec<(u64, u64, LossReason)>,
    pub(crate) hb_count: Option<u32>,
    pub(crate) hb_last: u64,
    pub(crate) acknack_count: u32,
    pub(crate) lease: Option<Duration>,
    pub(crate) last_heard: Instant,
    pub(crate) alive: bool,
    pub(crate) local: bool,
    /// Fragmented samples being reassembled, by sequence number.
    pub(crate) frags: BTreeMap<u64, crate::reader::reassembly::Reassembly>,
    /// The last reassembled sample, whose memory the next takes back once it is free.
    pub(crate) spare: Option<bytes::Bytes>,
    pub(crate) nackfrag_count: u32,
    /// When this reader asks the writer again for what it still misses, without waiting
    /// for a heartbeat (on a lossy link heartbeats are lost too): once an answer to its last
    /// request could have come (`None`: it misses nothing it asked for).
    pub(crate) renack_at: Option<Instant>,
    /// Every missing sample below this one was requested at `asked_at`: until a repair
    /// could have come back, later ACKNACKs request only what is missing from here on, so
    /// a reader answering many heartbeats does not have each lost sample re-sent once per
    /// heartbeat.
    pub(crate) asked_below: u64,
    pub(crate) asked_at: Option<Instant>,
    /// Requests of everything missing in a row after which no sample arrived, up to
    /// [`MAX_BACKOFF`]: past a few, the repair wait doubles with each (a writer gone quiet,
    /// or a forged heartbeat announcing what was never written, is not asked every few
    /// milliseconds).
    pub(crate) backoff: u8,
    /// Samples and fragments taken from this writer (new or repaired), and their count at
    /// the last request of everything missing.
    pub(crate) arrivals: u64,
    progress_at: u64,
    /// Sequence numbers of this writer skipped as gone (a GAP, or a heartbeat that no
    /// longer has them, before they came), since the reader met it: sent in a SKIPPED
    /// after every ACKNACK, so the writer can tell what it let go of from what the reader
    /// lacks.
    pub(crate) skipped: u64,
    /// Of `skipped`, those this reader gave up on by itself ([`LossReason::WriterLeft`]:
    /// the writer's lease ran out, or it said goodbye, before it repaired them). The writer
    /// never said they were gone; met again, it learns from this that an acknowledgement
    /// past them does not mean they arrived.
    pub(crate) abandoned: u64,
}

/// Most requests in a row counted that brought nothing: the repair wait doubles for each
/// beyond `reliability::BACKOFF_AFTER`, up to 1,024 times (what caps the wait is
/// `reliability::SILENT_REPAIR_WAIT` or the heartbeat period).
pub(crate) const MAX_BACKOFF: u8 = 3 + 10;

impl WriterProxy {
    /// True if this reader knows of samples or fragments of the writer it does not have, or
    /// holds samples but does not know where it starts:
    /// announced by a heartbeat or overtaken by later samples (and neither received, in
    /// reassembly, nor declared gone), or fragments overtaken by later ones, or any missing
    /// fragment of a sample the writer has finished sending (its heartbeat announced it).
    pub(crate) fn misses(&self) -> bool {
        let Some(e) = self.expected.filter(|_| self.reliable) else {
            // Samples came but the writer has not yet said where this reader starts (that
            // heartbeat was lost): ask it (a START_UNKNOWN ACKNACK).
            return self.reliable && (!self.pending.is_empty() || !self.frags.is_empty());
        };
        let last = self
            .hb_last
            .max(self.pending.keys().next_back().copied().unwrap_or(0));
        let uncovered = (e..=last).take(MAX_ACKNACK_BITS as usize).any(|seq| {
            !self.pending.contains_key(&seq)
                && !self.frags.contains_key(&seq)
                && !self.gaps.iter().any(|(a, b, _)| *a <= seq && seq < *b)
        });
        uncovered
            || self
                .frags
                .iter()
                .any(|(&seq, ra)| ra.missing(0, self.hb_last >= seq).next().is_some())
    }

    /// Whether sample `seq` would be a duplicate here: delivered already, or waiting in the
    /// reorder buffer (the same test `accept` applies).
    pub(crate) fn holds(&self, seq: u64) -> bool {
        if self.reliable {
            self.expected.is_some_and(|e| seq < e) || self.pending.contains_key(&seq)
        } else {
            seq <= self.last_delivered
        }
    }
}

/// How long a reader waits for what it asked a writer for before it asks again, when the
/// congestion controller has not measured the round trip (`answer_within`): twice the
/// round trip of path-size probes when they have measured it, else a quarter of the
/// heartbeat period but at most 100 ms; never under 5 ms nor over the heartbeat period.
pub(crate) fn renack_interval(rtt: Option<Duration>, heartbeat_period: Duration) -> Duration {
    let floor = Duration::from_millis(5);
    let want = rtt.map_or(
        (heartbeat_period / 4).min(Duration::from_millis(100)),
        |r| r * 2,
    );
    want.clamp(floor, heartbeat_period.max(floor))
}

/// Most NACKs one request carries beyond its ACKNACK: with it, 4,096 sequence numbers.
pub(crate) const MAX_NACKS: usize = 15;

/// Most gap ranges remembered per writer; more are refused and repaired by heartbeats.
const MAX_GAPS: usize = 64;
/// Least reorder-buffer room per writer, whatever the reader's history depth.
const MIN_PENDING: usize = 256;

impl WriterProxy {
    pub(crate) fn new(reliable: bool, lease: Option<Duration>, now: Instant, local: bool) -> Self {
        WriterProxy {
            reliable,
            expected: None,
            resume: None,
            last_delivered: 0,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            gaps: Vec::new(),
            hb_count: None,
            hb_last: 0,
            acknack_count: 0,
            lease,
            last_heard: now,
            alive: true,
            local,
            frags: BTreeMap::new(),
            spare: None,
            nackfrag_count: 0,
            renack_at: None,
            asked_below: 0,
            asked_at: None,
            backoff: 0,
            arrivals: 0,
            progress_at: 0,
            skipped: 0,
            abandoned: 0,
        }
    }

    /// Bytes charged for this writer's reassemblies in progress (what their fragments
    /// brought, see `Reassembly::charge`).
    pub(crate) fn frag_bytes(&self) -> u64 {
        self.frags.values().map(|r| r.charge()).sum()
    }

    fn pending_room(&self, qos: &Qos, len: usize) -> bool {
        self.pending.len() < qos.capacity().max(MIN_PENDING)
            && (self.pending.is_empty() || self.pending_bytes + len as u64 <= qos.max_bytes_limit())
    }

    /// Accepts a reliable sample ahead of or at `expected` into the reorder buffer.
    pub(crate) fn buffer(&mut self, s: Sample, qos: &Qos, stats: &mut Stats) {
        let seq = s.seq;
        if self.expected.is_some_and(|e| seq < e) || self.pending.contains_key(&seq) {
            stats.duplicates += 1;
            return;
        }
        while !self.pending_room(qos, s.payload.len()) {
            // Full: a sample that fills a hole below the newest held one takes that one's
            // place (it is asked for again), or a buffer filled past a hole would refuse
            // the repair that drains it, and the reader would wait for it forever.
            match self.pending.last_key_value() {
                Some((&last, _)) if last > seq => {
                    if let Some((_, old)) = self.pending.pop_last() {
                        self.pending_bytes -= old.payload.len() as u64;
                    }
                    stats.rejected_full += 1;
                }
                _ => {
                    stats.rejected_full += 1;
                    return;
                }
            }
        }
        self.arrivals += 1;
        self.pending_bytes += s.payload.len() as u64;
        self.pending.insert(seq, s);
    }

    /// The writer says `[start, end)` will never come (a GAP). Applied at the next drain;
    /// beyond [`MAX_GAPS`] ranges it is refused, and repaired by a later GAP or heartbeat.
    pub(crate) fn add_gap(&mut self, start: u64, end: u64, reason: LossReason) {
        let Some(e) = self.expected else { return };
        if end <= e {
            return;
        }
        if self.gaps.len() < MAX_GAPS {
            self.gaps.push((start.max(e), end, reason));
        }
    }

    /// The writer no longer has what precedes `first` (its heartbeat said so): what this
    /// reader does not hold of it is lost, applied at the next drain. One range covering
    /// `expected` grows rather than another being added.
    pub(crate) fn gone_before(&mut self, first: u64) {
        let Some(e) = self.expected else { return };
        if first <= e {
            return;
        }
        match self.gaps.iter_mut().find(|(a, b, _)| *a <= e && e < *b) {
            Some(g) => g.1 = g.1.max(first),
            None => self.gaps.push((e, first, LossReason::Unavailable)),
        }
    }

    /// The writer said where this reader starts: `first`, unless the reader stood further
    /// on before they lost each other (it has those samples already). Whatever was written
    /// between where it stood and `first` is lost.
    pub(crate) fn start_at(&mut self, first: u64) {
        let e = match self.resume.take() {
            Some(r) if r < first => {
                self.gaps.push((r, first, LossReason::Disconnected));
                r
            }
            Some(r) => r,
            None => first,
        };
        self.expected = Some(e);
    }

    /// Moves in-order samples from writer `writer` into the cache, and skips what will
    /// never come (reported to `losses`). Returns how many entered the cache.
    pub(crate) fn drain(
        &mut self,
        cache: &mut Cache,
        now: Instant,
        input: u64,
        writer: Guid,
        losses: &mut Losses<'_>,
    ) -> u64 {
        let Some(mut e) = self.expected else {
            return 0;
        };
        let mut delivered = 0;
        loop {
            while let Some((&s, _)) = self.pending.first_key_value() {
                if s >= e {
                    break;
                }
                if let Some((_, old)) = self.pending.pop_first() {
                    self.pending_bytes -= old.payload.len() as u64;
                }
            }
            let next_pending = self.pending.first_key_value().map(|(&s, _)| s);
            if next_pending == Some(e) {
                let len = self
                    .pending
                    .first_key_value()
                    .map_or(0, |(_, s)| s.payload.len());
                if cache.qos.history() == History::KeepAll && !cache.has_room(len) {
                    break;
                }
                if let Some((_, s)) = self.pending.pop_first() {
                    self.pending_bytes -= s.payload.len() as u64;
                    cache.push(s, now, input, losses);
                    delivered += 1;
                }
                e += 1;
                continue;
            }
            if let Some(&(_, end, why)) = self.gaps.iter().find(|(a, b, _)| *a <= e && e < *b) {
                let next = end.min(next_pending.unwrap_or(u64::MAX));
                losses.report(writer, e, next - 1, why);
                self.skipped = self.skipped.saturating_add(next - e);
                if why == LossReason::WriterLeft {
                    self.abandoned = self.abandoned.saturating_add(next - e);
                }
                e = next;
                continue;
            }
            break;
        }
        self.gaps.retain(|&(_, end, _)| end > e);
        self.expected = Some(e);
        delivered
    }

    /// The writer left: what this reader holds of it past a hole is delivered, and every
    /// hole up to the last sample the writer said it had (its heartbeats) or the last one
    /// held is lost ([`LossReason::WriterLeft`]); what a full keep-all cache cannot take
    /// is lost with it. Returns how many entered the cache. (Before, all of it vanished
    /// uncounted with the proxy.)
    pub(crate) fn writer_left(
        &mut self,
        cache: &mut Cache,
        now: Instant,
        input: u64,
        writer: Guid,
        losses: &mut Losses<'_>,
    ) -> u64 {
        let Some(e) = self.expected else {
            return 0;
        };
        if !self.reliable {
            return 0;
        }
        let held = self.pending.last_key_value().map_or(0, |(&s, _)| s);
        let top = self.hb_last.max(held);
        if top >= e {
            self.gaps
                .insert(0, (e, top.saturating_add(1), LossReason::WriterLeft));
        }
        let delivered = self.drain(cache, now, input, writer, losses);
        if let (Some(e), Some((&last, _))) = (self.expected, self.pending.last_key_value()) {
            losses.report(writer, e, last, LossReason::WriterLeft);
            if last >= e {
                let n = (last - e).saturating_add(1);
                self.skipped = self.skipped.saturating_add(n);
                self.abandoned = self.abandoned.saturating_add(n);
            }
            self.expected = Some(last.saturating_add(1));
        }
        self.pending.clear();
        self.pending_bytes = 0;
        self.frags.clear();
        delivered
    }

    /// The SKIPPED that goes right after ACKNACK `an` (`docs/wire.md#skipped`): what this
    /// reader skipped of the writer, below `an`'s base. None for one that acknowledges
    /// nothing (it does not know where it starts).
    pub(crate) fn skipped_beside(&self, an: &AckNackRepr) -> Option<SkippedRepr> {
        (!an.start_unknown).then_some(SkippedRepr {
            reader: an.reader,
            writer: an.writer,
            count: an.count,
            skipped: self.skipped,
            abandoned: self.abandoned,
        })
    }

    /// The ACKNACK answering what this reader knows of the writer; one that asks where it
    /// starts if the writer has not told it yet. Missing samples beyond its 256 bits are
    /// requested by NACKs pushed to `nacks` (up to [`MAX_NACKS`] of them, each 256 bits from
    /// its first missing sample). `repeat`: the time now and how long a request takes to be
    /// answered; samples requested less than that long ago are not requested again
    /// (`None`: every missing sample is, in the ACKNACK's range only).
    pub(crate) fn acknack(
        &mut self,
        reader: EntityId,
        writer: EntityId,
        repeat: Option<(Instant, Duration)>,
        nacks: &mut Vec<AckNackRepr>,
    ) -> AckNackRepr {
        self.acknack_count = self.acknack_count.wrapping_add(1);
        let mut an = AckNackRepr {
            reader,
            writer,
            base: 1,
            num_bits: 0,
            bitmap: [0; 8],
            count: self.acknack_count,
            start_unknown: true,
        };
        let Some(base) = self.expected else {
            // One that met the writer before says where it stood: a writer that kept its
            // place while it was out of reach takes it back only then (`confirm_lapsed`).
            an.base = self.resume.unwrap_or(1);
            return an;
        };
        an.base = base;
        an.start_unknown = false;
        // What the writer announced, or what later samples that arrived prove it sent.
        let last = self
            .hb_last
            .max(self.pending.keys().next_back().map_or(0, |s| s - 1));
        if last < base {
            return an;
        }
        // Everything is requested again once an answer had time to come; until then only
        // what was not requested before.
        let from = match repeat {
            Some((now, wait)) if self.asked_at.is_some_and(|t| now < t + wait) => {
                self.asked_below.max(base)
            }
            Some((now, _)) => {
                self.asked_at = Some(now);
                self.backoff = if self.arrivals == self.progress_at {
                    (self.backoff + 1).min(MAX_BACKOFF)
                } else {
                    0
                };
                self.progress_at = self.arrivals;
                base
            }
            None => base,
        };
        // Saturating: a heartbeat or GAP may have moved `base` to within 256 of 2^64.
        let first_span = base.saturating_add(MAX_ACKNACK_BITS as u64);
        // NACKs only when the caller knows when requests are answered (it can tell a repair
        // on its way from one lost), and at most MAX_NACKS windows ahead.
        // NACKs name only holes below the newest sample held: what a heartbeat announces
        // beyond it (a forged one may announce 2^63) is asked for 256 at a time by the
        // ACKNACK, as before NACKs existed.
        let held = self.pending.keys().next_back().copied().unwrap_or(0);
        let horizon = if repeat.is_some() {
            last.min((first_span - 1).saturating_add(MAX_NACKS as u64 * MAX_ACKNACK_BITS as u64))
                .min(held.max(first_span - 1))
        } else {
            last.min(first_span - 1)
        };
        let mut covered_to = from.max(base);
        let mut nack: Option<AckNackRepr> = None;
        let mut stopped = false;
        let holes: Vec<u64> = self.holes(from, horizon).collect();
        for seq in holes {
            if seq < first_span {
                let i = (seq - base) as u16;
                an.bitmap[(i / 32) as usize] |= 1 << (i % 32);
                an.num_bits = i + 1;
            } else {
                if nack
                    .as_ref()
                    .is_some_and(|n| seq >= n.base.saturating_add(MAX_ACKNACK_BITS as u64))
                {
                    nacks.extend(nack.take());
                    if nacks.len() >= MAX_NACKS {
                        stopped = true;
                        break;
                    }
                }
                let n = nack.get_or_insert_with(|| {
                    self.acknack_count = self.acknack_count.wrapping_add(1);
                    AckNackRepr {
                        reader,
                        writer,
                        base: seq,
                        num_bits: 0,
                        bitmap: [0; 8],
                        count: self.acknack_count,
                        start_unknown: false,
                    }
                });
                let i = (seq - n.base) as u16;
                n.bitmap[(i / 32) as usize] |= 1 << (i % 32);
                n.num_bits = i + 1;
            }
            covered_to = seq + 1;
        }
        nacks.extend(nack);
        // Every hole up to where the walk stopped is now asked for.
        let walked = if stopped { covered_to } else { horizon + 1 };
        self.asked_below = self.asked_below.max(walked);
        an
    }

    /// The sequence numbers in `[from, to]` that are missing: not in the reorder buffer,
    /// not in reassembly (those are repaired by fragment), not announced as gone. Walks the
    /// reorder buffer, not the range.
    fn holes(&self, from: u64, to: u64) -> impl Iterator<Item = u64> + '_ {
        let mut cursor = from;
        let mut held = self
            .pending
            .range(from..)
            .map(|(k, _)| *k)
            .take_while(move |k| *k <= to);
        let mut next_held = held.next();
        std::iter::from_fn(move || {
            loop {
                if cursor > to {
                    return None;
                }
                if next_held == Some(cursor) {
                    cursor += 1;
                    next_held = held.next();
                    continue;
                }
                // A range announced as gone is stepped over whole, however long.
                if let Some(&(_, end, _)) = self
                    .gaps
                    .iter()
                    .find(|(a, b, _)| *a <= cursor && cursor < *b)
                {
                    cursor = end;
                    while next_held.is_some_and(|h| h < cursor) {
                        next_held = held.next();
                    }
                    continue;
                }
                let seq = cursor;
                cursor += 1;
                if !self.frags.contains_key(&seq) {
                    return Some(seq);
                }
            }
        })
    }
}

/// A local reader.
#[derive(Debug)]
pub(crate) struct Reader {
    pub(crate) id: EntityId,
    pub(crate) info: EndpointInfo,
    pub(crate) writers: BTreeMap<Guid, WriterProxy>,
    pub(crate) cache: Cache,
    pub(crate) signalled: bool,
    pub(crate) deadline_at: Option<Instant>,
    /// Writers this reader lost (left, or their lease ran out), with the next sequence
    /// number it would have delivered from each (see `reader/lost.rs`).
    pub(crate) left: VecDeque<crate::reader::lost::Left>,
    /// The encoding labels of writers this reader lost, newest last: samples they wrote
    /// may still wait in the cache after they left (a one-shot publisher exits at once).
    pub(crate) left_labels: VecDeque<(Guid, tether_wire::Encoding)>,
    /// Samples this reader will never deliver (its share of `Stats::lost`).
    pub(crate) lost: u64,
}

impl Reader {
    pub(crate) fn new(id: EntityId, info: EndpointInfo) -> Self {
        let qos = info.qos;
        Reader {
            id,
            info,
            writers: BTreeMap::new(),
            cache: Cache {
                samples: VecDeque::new(),
                bytes: 0,
                qos,
            },
            signalled: false,
            deadline_at: None,
            left: VecDeque::new(),
            left_labels: VecDeque::new(),
            lost: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use tether_wire::{EntityId, ParticipantId};

    use super::{Cache, WriterProxy};
    use crate::event::{Guid, Sample, Stats};
    use crate::qos::Qos;
    use crate::reader::lost::Losses;

    /// A reliable writer's proxy that expects sample 1 and holds samples `seqs` of it (one
    /// byte each).
    fn holding(writer: Guid, now: Instant, seqs: &[u64]) -> WriterProxy {
        let mut wp = WriterProxy::new(true, None, now, false);
        wp.expected = Some(1);
        for &seq in seqs {
            let s = Sample {
                writer,
                seq,
                timestamp_ns: 0,
                payload: Bytes::from_static(b"x"),
            };
            wp.pending.insert(seq, s);
            wp.pending_bytes += 1;
        }
        wp
    }

    /// A heartbeat may announce a range of 2^64 - 2 sequence numbers (a forged one does):
    /// skipping what is missing from it takes the time of what the reader holds, not of the
    /// range, and the held samples are still delivered. (Counting the range one by one
    /// wedged a reader's whole process.)
    #[test]
    fn a_huge_range_gone_is_skipped_without_walking_it() {
        let now = Instant::now();
        let writer = Guid {
            participant: ParticipantId(1),
            entity: EntityId(1),
        };
        let mut wp = holding(writer, now, &[5, 9, u64::MAX - 3]);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut cache = Cache {
                samples: VecDeque::new(),
                bytes: 0,
                qos: Qos::new().keep_last(10),
            };
            let (mut stats, mut events, mut lost) = (Stats::default(), VecDeque::new(), 0);
            let mut losses = Losses {
                reader: EntityId(2),
                lost: &mut lost,
                stats: &mut stats,
                events: &mut events,
            };
            wp.gone_before(u64::MAX);
            let delivered = wp.drain(&mut cache, now, 1, writer, &mut losses);
            let _ = tx.send((delivered, stats.lost, events.len(), wp.expected));
        });
        let (delivered, lost, events, expected) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("skipping a huge range took over 10 s");
        assert_eq!(delivered, 3);
        assert_eq!(lost, u64::MAX - 1 - 3);
        assert_eq!(events, 4, "the runs between the held samples");
        assert_eq!(expected, Some(u64::MAX));
    }

    /// A writer that leaves while this reader holds samples past holes (35 % loss, the
    /// writer killed or gone before its repairs came): the held samples are delivered in
    /// order, and every hole up to the last sample its heartbeats announced is lost for
    /// that reason; with a keep-all cache full, what it cannot take is lost too. (Before,
    /// held samples vanished with the writer's proxy and `tether echo` said "lost 0".)
    #[test]
    fn a_writer_that_leaves_has_its_held_samples_delivered_and_its_holes_counted() {
        let now = Instant::now();
        let writer = Guid {
            participant: ParticipantId(1),
            entity: EntityId(1),
        };
        let held = |room: u32| {
            let mut wp = holding(writer, now, &[3, 4, 6]);
            wp.hb_last = 8;
            let mut cache = Cache {
                samples: VecDeque::new(),
                bytes: 0,
                qos: Qos::new().keep_all().max_samples(room),
            };
            let (mut stats, mut events, mut lost) = (Stats::default(), VecDeque::new(), 0);
            let mut losses = Losses {
                reader: EntityId(2),
                lost: &mut lost,
                stats: &mut stats,
                events: &mut events,
            };
            let delivered = wp.writer_left(&mut cache, now, 1, writer, &mut losses);
            let seqs: Vec<u64> = cache.samples.iter().map(|(s, _, _)| s.seq).collect();
            (delivered, seqs, lost, wp.pending.is_empty(), wp.expected)
        };
        // 1-2, 5 and 7-8 lost; 3, 4 and 6 delivered.
        assert_eq!(held(100), (3, vec![3, 4, 6], 5, true, Some(9)));
        // Room for one: 3 is taken, 4 and 6 go with the writer (and 1-2, 5; 7-8 beyond).
        assert_eq!(held(1), (1, vec![3], 5, true, Some(7)));
    }

    /// A forged heartbeat or GAP may leave a reader within 256 of 2^64: its ACKNACK (and
    /// the NACKs it might add) are built without overflowing, and name only what lies
    /// below the top.
    #[test]
    fn acknack_near_the_top_of_the_sequence_space() {
        let now = Instant::now();
        let mut wp = WriterProxy::new(true, None, now, false);
        wp.expected = Some(u64::MAX - 100);
        wp.hb_last = u64::MAX - 1;
        for repeat in [None, Some((now, Duration::from_millis(5)))] {
            let mut nacks = Vec::new();
            let an = wp.acknack(EntityId(2), EntityId(1), repeat, &mut nacks);
            assert_eq!(an.base, u64::MAX - 100);
            assert_eq!(an.num_bits, 100);
            assert_eq!(an.missing().last(), Some(u64::MAX - 1));
            assert!(nacks.is_empty());
        }
    }
}
