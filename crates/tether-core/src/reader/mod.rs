//! The reader's incoming path: samples into caches, in order, and out to the application.

pub(crate) mod lost;
pub(crate) mod reassembly;
pub(crate) mod state;

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use tether_wire::{BatchRepr, DataFragRepr, EntityId, ParticipantId};

use crate::event::{Event, Guid, LossReason, Sample, Stats};
use crate::qos::Qos;
use crate::reader::lost::Losses;
use crate::reader::state::{Reader, WriterProxy};
use crate::reliability::repair_wait;
use crate::security::gate::{Clear, Opened};

use crate::participant::{Participant, after};

/// Most samples one reader reassembles at once, whatever their size.
pub(crate) const MAX_REASSEMBLIES: usize = 1024;

/// Most samples one reader reassembles at once from one writer: a quarter of
/// [`MAX_REASSEMBLIES`], so no writer takes them all.
pub(crate) const MAX_REASSEMBLIES_PER_WRITER: usize = MAX_REASSEMBLIES / 4;

/// After samples entered a reader's cache: count them, restart its deadline, and signal it
/// once until the application has taken everything.
pub(crate) fn note_delivered(
    r: &mut Reader,
    delivered: u64,
    now: Instant,
    stats: &mut Stats,
    events: &mut VecDeque<Event>,
) {
    if delivered == 0 {
        return;
    }
    stats.samples_delivered += delivered;
    if let Some(d) = r.info.qos.deadline_period() {
        r.deadline_at = Some(after(now, d));
    }
    if !r.signalled {
        r.signalled = true;
        events.push_back(Event::DataAvailable { reader: r.id });
    }
}

/// A writer proxy heard from: alive again if it was not.
pub(crate) fn heard(
    wp: &mut WriterProxy,
    reader: EntityId,
    writer: Guid,
    now: Instant,
    events: &mut VecDeque<Event>,
) {
    if !wp.alive {
        wp.alive = true;
        events.push_back(Event::LivelinessChanged {
            reader,
            writer,
            alive: true,
        });
    }
    wp.last_heard = now;
}

/// One sample from `wp` into a reader's cache (best effort: newest only; reliable: in
/// order, through the reorder buffer). Returns how many samples reached the cache. What
/// will never be delivered goes to `losses` (whose counters take the duplicates too).
pub(crate) fn accept(
    cache: &mut crate::reader::state::Cache,
    qos: &Qos,
    wp: &mut WriterProxy,
    s: Opened,
    now: Instant,
    input: u64,
    losses: &mut Losses<'_>,
) -> u64 {
    let s = s.into_sample();
    if !wp.reliable {
        if s.seq <= wp.last_delivered {
            losses.stats.duplicates += 1;
            return 0;
        }
        let (writer, seq) = (s.writer, s.seq);
        // Skipped numbers never come: best effort repairs nothing. After a match made again,
        // those written while the two had lost each other.
        let reason = match wp.resume.take() {
            Some(_) => LossReason::Disconnected,
            None => LossReason::NotReceived,
        };
        if wp.last_delivered > 0 {
            losses.report(writer, wp.last_delivered + 1, seq - 1, reason);
        }
        wp.last_delivered = seq;
        if cache.push(s, now, input, losses) {
            1
        } else {
            losses.stats.rejected_full += 1;
            losses.report(writer, seq, seq, LossReason::CacheFull);
            0
        }
    } else if wp.expected == Some(s.seq)
        && wp.pending.is_empty()
        && wp.gaps.is_empty()
        && cache.has_room(s.payload.len())
    {
        // In order, nothing waiting: straight into the cache.
        wp.arrivals += 1;
        wp.expected = Some(s.seq + 1);
        cache.push(s, now, input, losses);
        1
    } else {
        let writer = s.writer;
        wp.buffer(s, qos, losses.stats);
        wp.drain(cache, now, input, writer, losses)
    }
}

/// Samples beyond the newest one requested before a reader asks for the holes among them
/// (a repair request per 64 samples that arrive past what it asked, while it misses any).
const ASK_AHEAD: u64 = 64;

/// After samples arrived for reliable writer proxy `wp`: if they overtook one still
/// missing, the reader asks for it soon rather than at the next heartbeat — after a quarter
/// of the repair wait `wait`, in case it was only reordered. Likewise when they ran
/// [`ASK_AHEAD`] past what it last asked for: the new holes among them are asked for (the
/// old ones again only once an answer could have come). Returns when, if it set a time.
fn ask_soon(
    wp: &mut WriterProxy,
    now: Instant,
    wait: impl FnOnce() -> std::time::Duration,
) -> Option<Instant> {
    if !wp.reliable || wp.local {
        return None;
    }
    // Nothing overtaken (the usual case): nothing to look up.
    let newest = *wp.pending.keys().next_back()?;
    let at = now + wait() / 4;
    let ahead = wp.asked_at.is_some() && newest >= wp.asked_below.saturating_add(ASK_AHEAD);
    match wp.renack_at {
        None => {}
        Some(t) if ahead && at < t => {}
        Some(_) => return None,
    }
    wp.renack_at = Some(at);
    Some(at)
}

impl Participant {
    /// Bytes a reader holds in samples being reassembled: what their fragments brought, and
    /// 64 bytes for each fragment kept aside because it overtook a missing one (what
    /// `max_reassembly_bytes` bounds).
    pub fn reassembly_bytes(&self, id: EntityId) -> u64 {
        self.readers
            .get(&id)
            .map_or(0, |r| r.writers.values().map(|w| w.frag_bytes()).sum())
    }

    /// The part of [`reassembly_bytes`](Self::reassembly_bytes) that writer `writer` holds
    /// in reader `id` (what `max_reassembly_bytes_per_writer` bounds).
    pub fn reassembly_bytes_from(&self, id: EntityId, writer: Guid) -> u64 {
        self.readers
            .get(&id)
            .and_then(|r| r.writers.get(&writer))
            .map_or(0, |w| w.frag_bytes())
    }

    /// Samples `id` will never deliver (its share of [`Stats::lost`]; each also raised in an
    /// [`Event::SamplesLost`]).
    pub fn reader_lost(&self, id: EntityId) -> u64 {
        self.readers.get(&id).map_or(0, |r| r.lost)
    }

    /// Samples `id` misses of writers whose lease ran out, which may still come back and
    /// repair them within one more lease; past that, those it holds past a hole are
    /// delivered and the holes lost ([`LossReason::WriterLeft`]). A program that ends
    /// meanwhile has not received them.
    pub fn reader_owed(&self, id: EntityId) -> u64 {
        self.readers.get(&id).map_or(0, |r| r.owed())
    }

    /// Samples waiting in a reader (cache plus reorder buffers).
    pub fn reader_backlog(&self, id: EntityId) -> usize {
        self.readers.get(&id).map_or(0, |r| {
            r.cache.samples.len() + r.writers.values().map(|w| w.pending.len()).sum::<usize>()
        })
    }

    /// Takes the oldest sample from a reader's cache. Samples past their lifespan are dropped.
    pub fn take(&mut self, now: Instant, reader: EntityId) -> Option<Sample> {
        let r = self.readers.get_mut(&reader)?;
        let was_full = !r.cache.has_room(0);
        let out = loop {
            let Some((s, arrived)) = r.cache.pop() else {
                break None;
            };
            if let Some(ls) = r.info.qos.lifespan_duration() {
                if now.saturating_duration_since(arrived) > ls {
                    self.stats.expired += 1;
                    continue;
                }
            }
            break Some(s);
        };
        if r.cache.samples.is_empty() {
            r.signalled = false;
        }
        if was_full {
            // Room again: pull in-order samples waiting in reorder buffers, and unblock
            // local writers that were refused for this reader's sake.
            let mut delivered = 0;
            let mut losses = Losses {
                reader,
                lost: &mut r.lost,
                stats: &mut self.stats,
                events: &mut self.events,
            };
            for (g, wp) in r.writers.iter_mut() {
                delivered += wp.drain(&mut r.cache, now, self.input, *g, &mut losses);
            }
            self.stats.samples_delivered += delivered;
            let me = self.cfg.participant;
            let blocked: Vec<EntityId> = r
                .writers
                .keys()
                .filter(|g| g.participant == me)
                .map(|g| g.entity)
                .collect();
            for w in blocked {
                if self.writers.get(&w).is_some_and(|w| w.blocked) {
                    self.events.push_back(Event::WriterReady { writer: w });
                }
            }
        }
        out
    }

    /// Takes every available sample of `reader`, oldest first, handing each to `f` (one
    /// lookup for all of them; otherwise as [`take`](Self::take) in a loop). Returns how many.
    pub fn take_all(&mut self, now: Instant, reader: EntityId, mut f: impl FnMut(Sample)) -> usize {
        let mut n = 0;
        let Some(r) = self.readers.get_mut(&reader) else {
            return 0;
        };
        let lifespan = r.info.qos.lifespan_duration();
        let mut was_full = !r.cache.has_room(0);
        loop {
            while let Some((s, arrived)) = r.cache.pop() {
                if lifespan.is_some_and(|ls| now.saturating_duration_since(arrived) > ls) {
                    self.stats.expired += 1;
                    continue;
                }
                n += 1;
                f(s);
            }
            if !was_full {
                break;
            }
            // Room again: pull in-order samples waiting in reorder buffers (and take them
            // too), and unblock local writers refused for this reader's sake.
            let mut delivered = 0;
            let mut losses = Losses {
                reader,
                lost: &mut r.lost,
                stats: &mut self.stats,
                events: &mut self.events,
            };
            for (g, wp) in r.writers.iter_mut() {
                delivered += wp.drain(&mut r.cache, now, self.input, *g, &mut losses);
            }
            self.stats.samples_delivered += delivered;
            let me = self.cfg.participant;
            for g in r.writers.keys().filter(|g| g.participant == me) {
                if self.writers.get(&g.entity).is_some_and(|w| w.blocked) {
                    self.events
                        .push_back(Event::WriterReady { writer: g.entity });
                }
            }
            if delivered == 0 {
                break;
            }
            was_full = !r.cache.has_room(0);
        }
        r.signalled = false;
        n
    }

    pub(crate) fn on_remote_data(&mut self, now: Instant, to: EntityId, s: Opened) {
        let Some(rs) = self.matches.remote_writer_readers.get(&s.sample().writer) else {
            self.stats.unmatched_writer += 1;
            return;
        };
        if to != EntityId::ALL {
            if rs.contains(&to) {
                self.on_data(now, to, s);
            } else {
                self.stats.unmatched_writer += 1;
            }
            return;
        }
        match rs.as_slice() {
            [one] => {
                let one = *one;
                self.on_data(now, one, s);
            }
            _ => {
                // Borrowed out and back rather than cloned, as in deliver_local.
                let g = s.sample().writer;
                let many = self
                    .matches
                    .remote_writer_readers
                    .get_mut(&g)
                    .map(std::mem::take)
                    .unwrap_or_default();
                for r in &many {
                    self.on_data(now, *r, s.clone());
                }
                if let Some(v) = self.matches.remote_writer_readers.get_mut(&g) {
                    *v = many;
                }
            }
        }
    }

    /// One sample for one local reader.
    pub(crate) fn on_data(&mut self, now: Instant, reader: EntityId, s: Opened) {
        let Some(r) = self.readers.get_mut(&reader) else {
            return;
        };
        let writer = s.sample().writer;
        let Some(wp) = r.writers.get_mut(&writer) else {
            self.stats.unmatched_writer += 1;
            return;
        };
        heard(wp, reader, writer, now, &mut self.events);
        let mut losses = Losses {
            reader,
            lost: &mut r.lost,
            stats: &mut self.stats,
            events: &mut self.events,
        };
        let d = accept(
            &mut r.cache,
            &r.info.qos,
            wp,
            s,
            now,
            self.input,
            &mut losses,
        );
        let (peers, cfg) = (&self.peers, &self.cfg);
        if let Some(at) = ask_soon(wp, now, || repair_wait(peers, cfg, writer.participant)) {
            self.next_renack = Some(self.next_renack.map_or(at, |t| t.min(at)));
            self.timers_changed = true;
        }
        note_delivered(r, d, now, &mut self.stats, &mut self.events);
    }

    /// `signed`: a BATCH_SIG from the writer over exactly this batch was verified.
    pub(crate) fn on_batch(
        &mut self,
        now: Instant,
        g: Guid,
        b: BatchRepr<'_>,
        datagram: &Bytes,
        signed: bool,
    ) {
        let Some(plain) = self.plain() else {
            // Sealed entries: opened one by one, then taken as single samples.
            for (seq, timestamp_ns, payload) in b.samples() {
                let s = Sample {
                    writer: g,
                    seq,
                    timestamp_ns,
                    payload: datagram.slice_ref(payload),
                };
                if let Some(s) = self.unseal_in(now, b.reader, s, signed) {
                    self.on_remote_data(now, b.reader, s);
                }
            }
            return;
        };
        self.deliver_batch(now, g, b, datagram, plain);
    }

    /// The samples of batch `b` of writer `g`, in `source` (a datagram, or what the gate
    /// opened a SEALED_BATCH to), to every local reader they are for.
    pub(crate) fn deliver_batch(
        &mut self,
        now: Instant,
        g: Guid,
        b: BatchRepr<'_>,
        source: &Bytes,
        clear: Clear,
    ) {
        // The readers borrowed out and back rather than cloned (no allocation per batch):
        // delivering touches readers only, never the match table.
        let Some(rs) = self
            .matches
            .remote_writer_readers
            .get_mut(&g)
            .map(std::mem::take)
        else {
            self.stats.unmatched_writer += 1;
            return;
        };
        for &reader in rs
            .iter()
            .filter(|r| b.reader == EntityId::ALL || **r == b.reader)
        {
            let Some(r) = self.readers.get_mut(&reader) else {
                continue;
            };
            let Some(wp) = r.writers.get_mut(&g) else {
                self.stats.unmatched_writer += 1;
                continue;
            };
            heard(wp, reader, g, now, &mut self.events);
            let mut d = 0;
            let mut losses = Losses {
                reader,
                lost: &mut r.lost,
                stats: &mut self.stats,
                events: &mut self.events,
            };
            for (seq, timestamp_ns, payload) in b.samples() {
                let s = Sample {
                    writer: g,
                    seq,
                    timestamp_ns,
                    payload: source.slice_ref(payload),
                };
                d += accept(
                    &mut r.cache,
                    &r.info.qos,
                    wp,
                    clear.pass(s),
                    now,
                    self.input,
                    &mut losses,
                );
            }
            let (peers, cfg) = (&self.peers, &self.cfg);
            if let Some(at) = ask_soon(wp, now, || repair_wait(peers, cfg, g.participant)) {
                self.next_renack = Some(self.next_renack.map_or(at, |t| t.min(at)));
                self.timers_changed = true;
            }
            note_delivered(r, d, now, &mut self.stats, &mut self.events);
        }
        if let Some(v) = self.matches.remote_writer_readers.get_mut(&g) {
            *v = rs;
        }
    }

    /// Local readers matched with remote writer `g` that a message addressed to `to`
    /// concerns (all of them for [`EntityId::ALL`]).
    pub(crate) fn addressed_readers(&mut self, g: Guid, to: EntityId) -> Vec<EntityId> {
        match self.matches.remote_writer_readers.get(&g) {
            None => {
                self.stats.unmatched_writer += 1;
                Vec::new()
            }
            Some(rs) if to == EntityId::ALL => rs.clone(),
            Some(rs) => rs.iter().copied().filter(|r| *r == to).collect(),
        }
    }

    /// A fragment. Reassembly starts only for writers matched with a local reader (in a
    /// secure realm matching takes an authenticated peer); others count as
    /// `unmatched_writer`. Each fragment must fit within its writer's share
    /// (`max_reassembly_bytes_per_writer`, [`MAX_REASSEMBLIES_PER_WRITER`]) and the reader's
    /// budget (`max_reassembly_bytes`, [`MAX_REASSEMBLIES`]), counted in what fragments
    /// brought; to make room the writer's own sample least likely to be delivered may give
    /// way. Refused fragments of a reliable writer are repaired later.
    pub(crate) fn on_data_frag(&mut self, now: Instant, pid: ParticipantId, f: DataFragRepr<'_>) {
        use crate::reader::reassembly::{FragError, Reassembly};
        let g = Guid {
            participant: pid,
            entity: f.writer,
        };
        let rs = self.addressed_readers(g, f.reader);
        if rs.is_empty() {
            return;
        }
        if f.sample_size as usize > self.cfg.max_sample_size {
            self.stats.fragments_rejected += 1;
            return;
        }
        let per_reader = self.cfg.max_reassembly_bytes as u64;
        let per_writer = (self.cfg.max_reassembly_bytes_per_writer as u64).min(per_reader);
        for rid in rs {
            let Some(r) = self.readers.get_mut(&rid) else {
                continue;
            };
            let (mut reader_bytes, mut reader_count) = r
                .writers
                .values()
                .fold((0, 0), |(b, c), w| (b + w.frag_bytes(), c + w.frags.len()));
            let Some(wp) = r.writers.get_mut(&g) else {
                continue;
            };
            wp.last_heard = now;
            if wp.holds(f.seq) {
                self.stats.duplicates += 1;
                continue;
            }
            let cost = match wp.frags.get(&f.seq).map(|ra| ra.cost(&f)) {
                Some(Ok(c)) => Ok(c),
                Some(Err(FragError::Duplicate)) => {
                    self.stats.duplicates += 1;
                    continue;
                }
                Some(Err(FragError::Inconsistent)) => {
                    self.stats.fragments_rejected += 1;
                    continue;
                }
                Some(Err(FragError::Resized)) => {
                    // The writer's datagrams to us changed size (its path to us was probed
                    // up or down): the sample starts again from this fragment.
                    self.stats.reassemblies_restarted += 1;
                    if let Some(old) = wp.frags.remove(&f.seq) {
                        reader_bytes -= old.charge();
                        reader_count -= 1;
                    }
                    Reassembly::new(&f, now).cost(&f)
                }
                None => Reassembly::new(&f, now).cost(&f),
            };
            let Ok((adds, frees)) = cost else {
                continue;
            };
            let new = !wp.frags.contains_key(&f.seq);
            // Which budget it would pass, if any.
            let over = |wp: &WriterProxy, reader_bytes: u64, reader_count: usize| {
                let writer_bytes = wp.frag_bytes();
                if writer_bytes + adds > per_writer + frees
                    || new && wp.frags.len() >= MAX_REASSEMBLIES_PER_WRITER
                {
                    Some(true)
                } else if reader_bytes + adds > per_reader + frees
                    || new && reader_count >= MAX_REASSEMBLIES
                {
                    Some(false)
                } else {
                    None
                }
            };
            while over(wp, reader_bytes, reader_count).is_some() {
                // Room from the writer's own samples, never another writer's: the one least
                // likely to be delivered gives way. A reliable writer's are delivered in
                // order (the latest waits for this one anyway), a best-effort writer's
                // earlier ones are skipped once a later one is delivered.
                let victim = if wp.reliable {
                    wp.frags
                        .last_key_value()
                        .map(|(s, _)| *s)
                        .filter(|s| *s > f.seq)
                } else {
                    wp.frags
                        .first_key_value()
                        .map(|(s, _)| *s)
                        .filter(|s| *s < f.seq)
                };
                let Some(old) = victim.and_then(|v| wp.frags.remove(&v)) else {
                    break;
                };
                reader_bytes -= old.charge();
                reader_count -= 1;
                self.stats.reassemblies_evicted += 1;
            }
            if let Some(writers_share) = over(wp, reader_bytes, reader_count) {
                // A reliable writer repairs it later, when room is back.
                self.stats.fragments_rejected += 1;
                self.stats.reassembly_over_cap += 1;
                let limit = if writers_share {
                    crate::event::Limit::WriterReassembly {
                        writer: g,
                        max: per_writer as usize,
                    }
                } else {
                    crate::event::Limit::ReaderReassembly {
                        reader: rid,
                        max: per_reader as usize,
                    }
                };
                self.over_limit(pid, limit);
                continue;
            }
            let ra = wp
                .frags
                .entry(f.seq)
                .or_insert_with(|| Reassembly::new(&f, now));
            let complete = ra.add(&f, now, &mut wp.spare).ok().flatten();
            // A new fragment is progress: a large sample's repair must not back off while
            // its fragments keep coming (it arrives whole only at its last).
            wp.arrivals += 1;
            if let Some(payload) = complete {
                wp.frags.remove(&f.seq);
                let s = Sample {
                    writer: g,
                    seq: f.seq,
                    timestamp_ns: f.timestamp_ns,
                    payload,
                };
                if let Some(s) = self.unseal(now, rid, s) {
                    self.on_data(now, rid, s);
                }
            }
        }
    }
}
