//! Local writers and readers, and their views of the remote endpoints they are matched with.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_wire::{AckNackRepr, EntityId, MAX_ACKNACK_BITS, ParticipantId};

use crate::event::{Guid, Sample, Stats};
use crate::qos::{History, Qos};

/// What makes two endpoints meet: topic, type, partitions, QoS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointInfo {
    /// Topic name.
    pub topic: String,
    /// Type name (empty: any).
    pub type_name: String,
    /// Partitions (empty: the default partition).
    pub partitions: Vec<String>,
    /// Offered or requested QoS.
    pub qos: Qos,
}

impl EndpointInfo {
    /// True if the two share a partition (no partitions = the default partition "").
    pub(crate) fn shares_partition(&self, other: &EndpointInfo) -> bool {
        let default = [String::new()];
        let a: &[String] = if self.partitions.is_empty() {
            &default
        } else {
            &self.partitions
        };
        let b: &[String] = if other.partitions.is_empty() {
            &default
        } else {
            &other.partitions
        };
        a.iter().any(|x| b.contains(x))
    }
}

/// A sample held in a writer's history.
#[derive(Debug, Clone)]
pub(crate) struct Cached {
    pub(crate) seq: u64,
    pub(crate) timestamp_ns: u64,
    pub(crate) payload: Bytes,
    pub(crate) written: Instant,
}

/// A writer's view of one matched reader.
#[derive(Debug, Clone)]
pub(crate) struct ReaderProxy {
    /// Reliable delivery to this reader (both sides reliable).
    pub(crate) reliable: bool,
    /// First sequence number this reader should get.
    pub(crate) start: u64,
    /// Every sequence number below this one is acknowledged.
    pub(crate) acked: u64,
    /// Count of the last ACKNACK processed.
    pub(crate) last_count: Option<u32>,
    /// Count of the last NACK_FRAG processed.
    pub(crate) last_nackfrag: Option<u32>,
    /// The reader lives in this participant.
    pub(crate) local: bool,
    /// The writer's key as last wrapped for this reader, with its epoch: a KEY_REQUEST is
    /// answered from here, so a reader asking again and again costs no key agreement.
    pub(crate) wrapped: Option<(u32, Vec<u8>)>,
}

/// A local writer.
#[derive(Debug)]
pub(crate) struct Writer {
    pub(crate) id: EntityId,
    pub(crate) info: EndpointInfo,
    pub(crate) next_seq: u64,
    pub(crate) history: VecDeque<Cached>,
    pub(crate) history_bytes: u64,
    pub(crate) readers: BTreeMap<Guid, ReaderProxy>,
    /// Remote participants with at least one matched reader, for fan-out.
    pub(crate) dests: Vec<ParticipantId>,
    /// The `dests` where at least one matched reader is reliable: where periodic
    /// heartbeats go (kept with `dests`, so a heartbeat costs no scan of every reader).
    pub(crate) reliable_dests: Vec<ParticipantId>,
    /// Matched readers in this participant (delivered to directly).
    pub(crate) locals: Vec<EntityId>,
    pub(crate) hb_count: u32,
    pub(crate) next_hb: Option<Instant>,
    pub(crate) since_hb: u32,
    /// The last sequence number a periodic heartbeat announced.
    pub(crate) hb_announced: u64,
    /// When a heartbeat last asked every reader to acknowledge (not final).
    pub(crate) acks_asked: Option<Instant>,
    /// Someone waits for acknowledgements: heartbeats ask until every reader has given one.
    pub(crate) acks_wanted: bool,
    pub(crate) deadline_at: Option<Instant>,
    pub(crate) blocked: bool,
    /// When a refused write last sent a heartbeat.
    pub(crate) last_block_hb: Option<Instant>,
    /// Encoded entries of the batch being filled (see `docs/wire.md#batch`).
    pub(crate) batch_buf: bytes::BytesMut,
    /// Samples in it, and the first one's sequence number.
    pub(crate) batch_count: u32,
    pub(crate) batch_first: u64,
    /// When it must be sent at the latest.
    pub(crate) batch_deadline: Option<Instant>,
    /// Asynchronous publishing: where the sender stands in the history.
    pub(crate) asyncw: Option<AsyncState>,
    /// In a secure realm: the key its samples are sealed under (history holds them
    /// sealed, so every retransmission sends the same sealed bytes).
    pub(crate) key: Option<std::sync::Arc<tether_crypto::SenderKey>>,
    /// Samples sealed under the current key (re-keyed before the suite's usage limit).
    pub(crate) seals: u64,
    /// In a secure realm: how its samples are protected.
    pub(crate) prot: Option<tether_crypto::Protection>,
    /// A protected sample's buffer taken back from the history once nothing else held it:
    /// the next sample is sealed into it (no allocation, no zeroing).
    pub(crate) spare: Option<Vec<u8>>,
    /// A protected writer that keeps no history (best effort, volatile): the last sample it
    /// sealed, whose buffer becomes the next seal's once no datagram holds it any more.
    pub(crate) last_sealed: Option<bytes::Bytes>,
    /// Where a sample goes (`participant::fanout_addrs` over `dests`), kept with what it
    /// was computed from, so a write does not walk every remote participant: 100 matched
    /// subscribers made that most of a multicast write's cost.
    pub(crate) fanout: Option<(FanoutKey, Vec<(std::net::SocketAddr, bool)>)>,
    /// A remote reader left: the writer moves to a new epoch before it seals again (or when
    /// the participant's re-key timer fires, whichever comes first).
    pub(crate) rekey_due: bool,
}

/// What a writer's fan-out plan depends on besides its `dests`: the participant's count
/// of changes to its remote participants' addresses and groups, how many remotes announced
/// a group, and the fewest participants in a group worth a multicast datagram.
pub(crate) type FanoutKey = (u64, usize, usize);

/// An asynchronous writer's sender cursor: the next datagram to release is fragment `frag`
/// of sample `seq` for the `dest`-th matched participant.
#[derive(Debug)]
pub(crate) struct AsyncState {
    pub(crate) priority: crate::Priority,
    /// Index into the participant's flow controllers; `None`: unlimited.
    pub(crate) bucket: Option<usize>,
    pub(crate) seq: u64,
    pub(crate) frag: u32,
    pub(crate) dest: usize,
    /// The heartbeat riding on the current sample's last datagram.
    pub(crate) hb: Option<tether_wire::HeartbeatRepr>,
    /// Every sample up to this one has been released for every destination.
    pub(crate) released: u64,
    /// A sample whose last datagram was handed to the driver, released at its next poll.
    pub(crate) sending: Option<u64>,
}

/// Largest sealed buffer a writer keeps for its next sample.
const SPARE_MAX: usize = 1 << 20;

impl Writer {
    pub(crate) fn new(id: EntityId, info: EndpointInfo) -> Self {
        Writer {
            id,
            info,
            next_seq: 1,
            history: VecDeque::new(),
            history_bytes: 0,
            readers: BTreeMap::new(),
            dests: Vec::new(),
            reliable_dests: Vec::new(),
            locals: Vec::new(),
            hb_count: 0,
            next_hb: None,
            since_hb: 0,
            hb_announced: 0,
            acks_asked: None,
            acks_wanted: false,
            deadline_at: None,
            blocked: false,
            last_block_hb: None,
            batch_buf: bytes::BytesMut::new(),
            batch_count: 0,
            batch_first: 0,
            batch_deadline: None,
            asyncw: None,
            key: None,
            seals: 0,
            prot: None,
            spare: None,
            last_sealed: None,
            fanout: None,
            rekey_due: false,
        }
    }

    /// The last sequence number sent (samples waiting in a batch, or for an asynchronous
    /// writer's sender, are not).
    pub(crate) fn last_sent(&self) -> u64 {
        if let Some(a) = &self.asyncw {
            a.released
        } else if self.batch_count > 0 {
            self.batch_first - 1
        } else {
            self.next_seq - 1
        }
    }

    /// Whether samples are kept after sending (someone may ask for them again).
    pub(crate) fn keeps_history(&self) -> bool {
        self.asyncw.is_some()
            || self.info.qos.is_reliable()
            || self.info.qos.durability_kind() == tether_wire::Durability::TransientLocal
    }

    pub(crate) fn first_available(&self) -> u64 {
        self.history.front().map_or(self.next_seq, |c| c.seq)
    }

    pub(crate) fn find(&self, seq: u64) -> Option<&Cached> {
        let i = self.history.binary_search_by_key(&seq, |c| c.seq).ok()?;
        self.history.get(i)
    }

    /// Lowest sequence number some reliable reader, or the asynchronous sender, still needs.
    fn min_acked(&self) -> u64 {
        let unsent = self.asyncw.as_ref().map_or(u64::MAX, |a| a.released + 1);
        self.readers
            .values()
            .filter(|r| r.reliable && !r.local)
            .map(|r| r.acked.max(r.start))
            .min()
            .unwrap_or(u64::MAX)
            .min(unsent)
    }

    /// Drops released samples no one will ask for again.
    pub(crate) fn forget_released(&mut self) {
        let Some(r) = self.asyncw.as_ref().map(|a| a.released) else {
            return;
        };
        if self.forgets_released() {
            while self.history.front().is_some_and(|c| c.seq <= r) {
                self.pop_front();
            }
        }
    }

    /// Whether released samples may be dropped at once (no one will ask for them again).
    pub(crate) fn forgets_released(&self) -> bool {
        !self.info.qos.is_reliable()
            && self.info.qos.durability_kind() != tether_wire::Durability::TransientLocal
    }

    pub(crate) fn has_unacked(&self) -> bool {
        self.readers.values().any(|r| {
            r.reliable
                && !r.local
                && (r.acked.max(r.start) < self.next_seq || r.last_count.is_none())
        })
    }

    /// A buffer to seal the next sample into: one the history let go of, or the last
    /// sealed sample's when this writer keeps no history and nothing holds it any more;
    /// else a new one.
    pub(crate) fn take_spare(&mut self) -> Vec<u8> {
        if let Some(v) = self.spare.take() {
            return v;
        }
        self.last_sealed
            .take()
            .and_then(|b| b.try_into_mut().ok())
            .map(Vec::from)
            .unwrap_or_default()
    }

    fn pop_front(&mut self) {
        if let Some(c) = self.history.pop_front() {
            self.history_bytes -= c.payload.len() as u64;
            // A secure writer's history holds buffers it sealed; one no datagram still
            // refers to comes back for the next seal.
            if self.prot.is_some() && self.spare.is_none() && c.payload.len() <= SPARE_MAX {
                if let Ok(m) = c.payload.try_into_mut() {
                    self.spare = Some(Vec::from(m));
                }
            }
        }
    }

    /// Drops samples whose lifespan ran out. Returns how many.
    pub(crate) fn expire(&mut self, now: Instant) -> u64 {
        let Some(ls) = self.info.qos.lifespan_duration() else {
            return 0;
        };
        let mut n = 0;
        while self
            .history
            .front()
            .is_some_and(|c| now.saturating_duration_since(c.written) > ls)
        {
            self.pop_front();
            n += 1;
        }
        n
    }

    /// Makes room for a sample of `len` bytes. False if a keep-all writer is full of
    /// samples some reliable reader has not acknowledged yet.
    pub(crate) fn make_room(&mut self, len: u64) -> bool {
        if !self.keeps_history() {
            return true;
        }
        let qos = self.info.qos;
        match qos.history() {
            History::KeepLast(n) => {
                let n = n.min(qos.max_samples_limit()) as usize;
                while self.history.len() >= n
                    || (!self.history.is_empty()
                        && self.history_bytes + len > qos.max_bytes_limit())
                {
                    self.pop_front();
                }
                true
            }
            History::KeepAll => {
                let full = |w: &Self| {
                    w.history.len() >= qos.max_samples_limit() as usize
                        || (!w.history.is_empty() && w.history_bytes + len > qos.max_bytes_limit())
                };
                if !full(self) {
                    return true;
                }
                let min_acked = self.min_acked();
                while full(self) {
                    match self.history.front() {
                        Some(c) if c.seq < min_acked => self.pop_front(),
                        _ => return false,
                    }
                }
                true
            }
        }
    }

    /// After acknowledgements: frees acknowledged samples of a keep-all writer so memory
    /// follows the slowest reader, not the limit.
    pub(crate) fn release_acked(&mut self) {
        if self.info.qos.history() != History::KeepAll
            || self.info.qos.durability_kind() == tether_wire::Durability::TransientLocal
        {
            return;
        }
        let min_acked = self.min_acked();
        while self.history.front().is_some_and(|c| c.seq < min_acked) {
            self.pop_front();
        }
    }

    pub(crate) fn push_history(&mut self, c: Cached) {
        if !self.keeps_history() {
            if self.prot.is_some() && c.payload.len() <= SPARE_MAX {
                self.last_sealed = Some(c.payload);
            }
            return;
        }
        self.history_bytes += c.payload.len() as u64;
        self.history.push_back(c);
    }

    /// Recomputes the fan-out lists; called whenever `readers` changes.
    pub(crate) fn rebuild_dests(&mut self) {
        let mut d: Vec<ParticipantId> = self
            .readers
            .iter()
            .filter(|(_, r)| !r.local)
            .map(|(g, _)| g.participant)
            .collect();
        d.dedup();
        // `readers` is ordered by participant first, so each participant's readers are
        // adjacent and one pass finds those with a reliable one.
        let mut rel: Vec<ParticipantId> = Vec::new();
        for (g, r) in &self.readers {
            if !r.local && r.reliable && rel.last() != Some(&g.participant) {
                rel.push(g.participant);
            }
        }
        self.dests = d;
        self.reliable_dests = rel;
        self.fanout = None;
        self.locals = self
            .readers
            .iter()
            .filter(|(_, r)| r.local)
            .map(|(g, _)| g.entity)
            .collect();
    }

    /// Where a sample goes: the plan kept from an earlier write if `key` (and `dests`)
    /// are unchanged, else `plan(dests)`, kept for the next.
    pub(crate) fn fanout(
        &mut self,
        key: FanoutKey,
        plan: impl FnOnce(&[ParticipantId]) -> Vec<(std::net::SocketAddr, bool)>,
    ) -> &[(std::net::SocketAddr, bool)] {
        if !matches!(&self.fanout, Some((k, _)) if *k == key) {
            self.fanout = Some((key, plan(&self.dests)));
        }
        self.fanout.as_ref().map_or(&[], |(_, p)| p.as_slice())
    }

    /// Whether a heartbeat sent now must ask every reader to acknowledge, rather than be
    /// final (answered only by readers that miss something). A keep-all writer frees its
    /// history by acknowledgements, so it always asks; others ask when someone waits for
    /// acknowledgements, while a reader has never acknowledged, and at least every
    /// `interval`, so what [`Writer::has_unacked`] knows is never older than that. Without
    /// this every reader would answer every sample's heartbeat: with 100 readers, 100
    /// ACKNACKs for the writer to take per sample.
    pub(crate) fn asks_acks(&self, now: Instant, interval: Duration) -> bool {
        asks_acks(
            &self.info,
            self.acks_wanted,
            self.acks_asked,
            &self.readers,
            now,
            interval,
        )
    }

    /// A heartbeat of this writer announcing `first..=last`: the next count, final unless it
    /// must ask for acknowledgements (see [`Writer::asks_acks`]).
    pub(crate) fn heartbeat(
        &mut self,
        now: Instant,
        interval: Duration,
        first: u64,
        last: u64,
    ) -> tether_wire::HeartbeatRepr {
        let ask = self.asks_acks(now, interval);
        let (id, count, asked) = (self.id, &mut self.hb_count, &mut self.acks_asked);
        next_heartbeat(id, count, asked, now, ask, first, last)
    }

    /// A heartbeat announcing `first..=last` that every reader answers.
    pub(crate) fn asking_heartbeat(
        &mut self,
        now: Instant,
        first: u64,
        last: u64,
    ) -> tether_wire::HeartbeatRepr {
        let (id, count, asked) = (self.id, &mut self.hb_count, &mut self.acks_asked);
        next_heartbeat(id, count, asked, now, true, first, last)
    }

    /// Brings the next periodic heartbeat forward to `at` if it is later (or unset);
    /// true if it moved.
    pub(crate) fn heartbeat_by(&mut self, at: Instant) -> bool {
        if self.next_hb.is_some_and(|t| t <= at) {
            return false;
        }
        self.next_hb = Some(at);
        true
    }

    /// How many writes between piggy-backed heartbeats.
    pub(crate) fn heartbeat_every(&self) -> u32 {
        match self.info.qos.history() {
            History::KeepAll => (self.info.qos.max_samples_limit() / 4).clamp(1, 1024),
            History::KeepLast(_) => 64,
        }
    }
}

/// [`Writer::asks_acks`], from the fields it reads (for callers holding others borrowed).
pub(crate) fn asks_acks(
    info: &EndpointInfo,
    acks_wanted: bool,
    acks_asked: Option<Instant>,
    readers: &BTreeMap<Guid, ReaderProxy>,
    now: Instant,
    interval: Duration,
) -> bool {
    info.qos.history() == History::KeepAll
        || acks_wanted
        || acks_asked.is_none_or(|t| now.saturating_duration_since(t) >= interval)
        || readers
            .values()
            .any(|r| r.reliable && !r.local && r.last_count.is_none())
}

/// Writer `id`'s next heartbeat (its count bumped), announcing `first..=last`: asking every
/// reader to acknowledge (noted in `acks_asked`), or final. From the fields it changes, for
/// callers holding others of the writer borrowed.
pub(crate) fn next_heartbeat(
    id: EntityId,
    hb_count: &mut u32,
    acks_asked: &mut Option<Instant>,
    now: Instant,
    ask: bool,
    first: u64,
    last: u64,
) -> tether_wire::HeartbeatRepr {
    if ask {
        *acks_asked = Some(now);
    }
    *hb_count = hb_count.wrapping_add(1);
    tether_wire::HeartbeatRepr {
        writer: id,
        reader: EntityId::ALL,
        first,
        last,
        count: *hb_count,
        final_: !ask,
    }
}

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
    /// holds at most the depth plus one datagram's samples.
    pub(crate) fn push(&mut self, s: Sample, now: Instant, input: u64) -> bool {
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
    /// Reliable: the next sequence number to deliver (None until the first heartbeat).
    pub(crate) expected: Option<u64>,
    /// Best effort: the highest sequence number delivered.
    pub(crate) last_delivered: u64,
    /// Reliable: samples received ahead of `expected`.
    pub(crate) pending: BTreeMap<u64, Sample>,
    pub(crate) pending_bytes: u64,
    /// Ranges the writer declared irrelevant ahead of `expected`.
    pub(crate) gaps: Vec<(u64, u64)>,
    pub(crate) hb_count: Option<u32>,
    pub(crate) hb_last: u64,
    pub(crate) acknack_count: u32,
    pub(crate) lease: Option<Duration>,
    pub(crate) last_heard: Instant,
    pub(crate) alive: bool,
    pub(crate) local: bool,
    /// Fragmented samples being reassembled, by sequence number.
    pub(crate) frags: BTreeMap<u64, crate::reader::reassembly::Reassembly>,
    /// The last reassembled sample's buffer, taken back for the next once it is free.
    pub(crate) spare: bytes::BytesMut,
    pub(crate) nackfrag_count: u32,
}

impl WriterProxy {
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

/// Memory a reassembly is charged for: its sample, and at least 1 KiB of bookkeeping.
pub(crate) fn reassembly_charge(sample_size: u32) -> u64 {
    (sample_size as u64).max(1024)
}

/// Most gap ranges remembered per writer; more are refused and repaired by heartbeats.
const MAX_GAPS: usize = 64;
/// Least reorder-buffer room per writer, whatever the reader's history depth.
const MIN_PENDING: usize = 256;

impl WriterProxy {
    pub(crate) fn new(reliable: bool, lease: Option<Duration>, now: Instant, local: bool) -> Self {
        WriterProxy {
            reliable,
            expected: None,
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
            spare: bytes::BytesMut::new(),
            nackfrag_count: 0,
        }
    }

    /// Bytes charged for this writer's reassemblies in progress.
    pub(crate) fn frag_bytes(&self) -> u64 {
        self.frags
            .values()
            .map(|r| reassembly_charge(r.sample_size))
            .sum()
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
        if !self.pending_room(qos, s.payload.len()) {
            stats.rejected_full += 1;
            return;
        }
        self.pending_bytes += s.payload.len() as u64;
        self.pending.insert(seq, s);
    }

    pub(crate) fn add_gap(&mut self, start: u64, end: u64) {
        let Some(e) = self.expected else { return };
        if end <= e {
            return;
        }
        if start <= e {
            // Covers `expected` already: applied at the next drain.
        }
        if self.gaps.len() < MAX_GAPS {
            self.gaps.push((start.max(e), end));
        }
    }

    /// Moves in-order samples into the cache. Returns (delivered, skipped-as-lost).
    pub(crate) fn drain(&mut self, cache: &mut Cache, now: Instant, input: u64) -> (u64, u64) {
        let Some(mut e) = self.expected else {
            return (0, 0);
        };
        let (mut delivered, mut skipped) = (0, 0);
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
                    cache.push(s, now, input);
                    delivered += 1;
                }
                e += 1;
                continue;
            }
            if let Some(&(_, end)) = self.gaps.iter().find(|(a, b)| *a <= e && e < *b) {
                let next = end.min(next_pending.unwrap_or(u64::MAX));
                skipped += next - e;
                e = next;
                continue;
            }
            break;
        }
        self.gaps.retain(|&(_, end)| end > e);
        self.expected = Some(e);
        (delivered, skipped)
    }

    /// The ACKNACK answering what this reader knows of the writer.
    pub(crate) fn acknack(&mut self, reader: EntityId, writer: EntityId) -> Option<AckNackRepr> {
        let base = self.expected?;
        let mut bitmap = [0u32; 8];
        let mut num_bits = 0u16;
        if self.hb_last >= base {
            let span = (self.hb_last - base + 1).min(MAX_ACKNACK_BITS as u64) as u16;
            for i in 0..span {
                let seq = base + i as u64;
                // A sample in reassembly is repaired fragment by fragment (NACK_FRAG).
                let covered = self.pending.contains_key(&seq)
                    || self.frags.contains_key(&seq)
                    || self.gaps.iter().any(|(a, b)| *a <= seq && seq < *b);
                if !covered {
                    bitmap[(i / 32) as usize] |= 1 << (i % 32);
                    num_bits = i + 1;
                }
            }
        }
        self.acknack_count = self.acknack_count.wrapping_add(1);
        Some(AckNackRepr {
            reader,
            writer,
            base,
            num_bits,
            bitmap,
            count: self.acknack_count,
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
        }
    }
}
