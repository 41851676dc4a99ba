//! The writer's outgoing path: history → protect → batch → fragment → schedule → transmit.

pub(crate) mod flow;
pub(crate) mod packer;
mod schedule;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_wire::{
    BATCH_ENTRY_OVERHEAD, BATCH_FIXED_LEN, BatchRepr, DATA_FRAG_FIXED_LEN, DATA_HEAD_MAX, DataRepr,
    DatagramBuilder, EntityId, HEADER_LEN, Header, HeartbeatRepr, ParticipantId,
    SUBMESSAGE_HEADER_LEN, Submessage, batch_entry_head, encode_data_head,
};

use crate::endpoint::Cached;
use crate::event::{Guid, Sample, Stats};

use crate::discovery::RemoteParticipant;
use crate::error::WriteError;
use crate::participant::{Config, HEARTBEAT_LEN, Participant, after};
use crate::reliability::{ack_interval, heartbeat_all};
use crate::transmit::{Head, Transmit};
use crate::writer::packer::{Outgoing, Packer};

/// First re-announcement after start; doubles up to the configured period.
/// A BATCH_SIG body: writer, first sequence number, count, signature.
pub(crate) const BATCH_SIG_LEN: usize = 4 + 8 + 4 + 64;

/// What a sample from a writer's history goes on the wire as when it travels alone (not
/// in a batch): itself, unless it is batch-signed, in which case it gets its own signature
/// (deterministic, so every repair of it is the same bytes).
pub(crate) fn wire_form(
    cfg: &Config,
    stats: &mut Stats,
    writer: EntityId,
    seq: u64,
    timestamp_ns: u64,
    payload: &Bytes,
) -> Bytes {
    let Some(sec) = cfg.security.as_deref() else {
        return payload.clone();
    };
    if payload
        .first()
        .is_none_or(|b| b & tether_crypto::sample::BATCH_SIGNED == 0)
    {
        return payload.clone();
    }
    let wid = tether_crypto::sample::endpoint_id(cfg.participant.0, writer.0);
    match tether_crypto::sample::individual(payload, &sec.identity, &wid, seq, timestamp_ns) {
        Some(v) => {
            stats.signatures_made += 1;
            Bytes::from(v)
        }
        None => payload.clone(),
    }
}

/// How many remote participants a sample may reach by multicast: those that announced a
/// data group (`grouped`), unless datagrams are sealed per destination (pairwise mode
/// cannot multicast).
pub(crate) fn multicast_peers(cfg: &Config, grouped: usize) -> usize {
    match cfg.security.as_deref() {
        Some(s) if s.pairwise => 0,
        _ => grouped,
    }
}

/// Where a writer sends one sample for its matched participants `dests`: each one's address,
/// except that participants sharing a data group, `min` or more of them, get one datagram
/// to the group (`true`). `grouped`: how many remotes announced a group (0: all unicast).
pub(crate) fn fanout_addrs(
    remotes: &BTreeMap<ParticipantId, Box<RemoteParticipant>>,
    dests: &[ParticipantId],
    grouped: usize,
    min: usize,
) -> Vec<(SocketAddr, bool)> {
    let peers = dests.iter().filter_map(|p| remotes.get(p));
    if grouped == 0 {
        return peers.map(|r| (r.addr, false)).collect();
    }
    let mut groups: Vec<(SocketAddr, usize)> = Vec::new();
    for r in peers.clone() {
        if let Some(g) = r.group {
            match groups.iter_mut().find(|(a, _)| *a == g) {
                Some((_, n)) => *n += 1,
                None => groups.push((g, 1)),
            }
        }
    }
    groups.retain(|(_, n)| *n >= min.max(1));
    let mut out: Vec<(SocketAddr, bool)> = groups.iter().map(|(g, _)| (*g, true)).collect();
    out.extend(
        peers
            .filter(|r| r.group.is_none_or(|g| !groups.iter().any(|(a, _)| *a == g)))
            .map(|r| (r.addr, false)),
    );
    out
}

impl Participant {
    /// Bytes of sample in each fragment (all but the last).
    pub(crate) fn frag_size(&self) -> u16 {
        let room = self.cfg.max_datagram.saturating_sub(
            HEADER_LEN + HEARTBEAT_LEN + SUBMESSAGE_HEADER_LEN + DATA_FRAG_FIXED_LEN,
        );
        room.clamp(1, u16::MAX as usize) as u16
    }

    /// Queues one sample for `dest`, addressed to `reader`: one DATA when it fits a datagram,
    /// else its fragments (`only`: just these fragment numbers). `hb` rides in front of the
    /// DATA, or of the last fragment. The payload is sliced, never copied.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_sample(
        &mut self,
        dest: SocketAddr,
        writer: EntityId,
        reader: EntityId,
        seq: u64,
        timestamp_ns: u64,
        payload: &Bytes,
        only: Option<&[u32]>,
        hb: Option<HeartbeatRepr>,
    ) {
        let o = Outgoing {
            hdr: self.header(),
            single: self.max_payload(),
            frag_size: self.frag_size(),
            dest,
            writer,
            reader,
            seq,
            timestamp_ns,
            payload,
        };
        if payload.len() <= o.single {
            let t = o.datagram(0, hb.as_ref(), &mut self.stats);
            self.transmits.push_back(t);
            return;
        }
        let count = o.frag_count();
        let all: Vec<u32>;
        let frags: &[u32] = match only {
            Some(o) => o,
            None => {
                all = (0..count).collect();
                &all
            }
        };
        let last = frags.last().copied();
        for &n in frags {
            if n >= count {
                continue;
            }
            let hb = hb.as_ref().filter(|_| Some(n) == last);
            let t = o.datagram(n, hb, &mut self.stats);
            self.transmits.push_back(t);
        }
    }

    /// Samples held by a writer's history (for tests and `tether info`).
    pub fn history_len(&self, id: EntityId) -> usize {
        self.writers.get(&id).map_or(0, |w| w.history.len())
    }

    /// Publishes one sample: stored in history, sent once to every matched participant,
    /// delivered to matched local readers. Returns its sequence number.
    pub fn write(
        &mut self,
        now: Instant,
        writer: EntityId,
        timestamp_ns: u64,
        payload: Bytes,
    ) -> Result<u64, WriteError> {
        self.input += 1;
        // A key that has sealed as much as its suite allows is replaced first.
        let limit = |s: tether_crypto::Suite| {
            self.cfg
                .security
                .as_ref()
                .map_or(s.usage_limit(), |sec| sec.limit(s))
        };
        // So is one a departed reader holds.
        if self.writers.get(&writer).is_some_and(|w| {
            w.rekey_due || w.key.as_ref().is_some_and(|k| w.seals >= limit(k.suite()))
        }) {
            self.rekey(writer);
        }
        let max = self.cfg.max_sample_size;
        let single = self.max_payload();
        let me = self.cfg.participant;
        let Some(w) = self.writers.get_mut(&writer) else {
            return Err(WriteError::UnknownWriter(payload));
        };
        if payload.len() > max {
            return Err(WriteError::TooLarge { payload, max });
        }
        self.stats.expired += w.expire(now);
        // Local keep-all reliable readers that are full block the writer too.
        let local_full = !w.locals.is_empty()
            && w.readers.iter().any(|(g, rp)| {
                rp.local
                    && rp.reliable
                    && self.readers.get(&g.entity).is_some_and(|r| {
                        r.info.qos.history() == crate::qos::History::KeepAll
                            && !r.cache.has_room(payload.len())
                    })
            });
        if local_full || !w.make_room(payload.len() as u64) {
            w.blocked = true;
            // Full of unacknowledged samples: ask the readers where they stand now rather
            // than at the next periodic heartbeat (a lost datagram would stall the writer
            // until then). At most once per millisecond.
            if w.info.qos.is_reliable()
                && !w.dests.is_empty()
                && w.last_block_hb
                    .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_millis(1))
            {
                w.last_block_hb = Some(now);
                let hdr = Header {
                    domain: self.cfg.domain,
                    participant: me,
                };
                let fanout = (
                    self.fanout_gen,
                    multicast_peers(&self.cfg, self.grouped),
                    self.cfg.multicast_min,
                );
                let (first, last) = (w.first_available(), w.last_sent());
                let hb = w.asking_heartbeat(now, first, last);
                heartbeat_all(
                    w,
                    hb,
                    hdr,
                    &self.remotes,
                    fanout,
                    &mut self.transmits,
                    &mut self.stats,
                );
            }
            return Err(WriteError::WouldBlock(payload));
        }
        w.blocked = false;
        let seq = w.next_seq;
        w.next_seq += 1;
        // In a secure realm the sample is sealed here, once, whatever the number of
        // readers: history, every datagram and every retransmission carry the sealed bytes;
        // this participant's own readers get the plain ones.
        // A sample bound for a batch in a `sign` mode is signed with its batch, once.
        let in_batch = w.info.qos.batch().is_some()
            && !w.info.qos.coalesces()
            && w.asyncw.is_none()
            && !w.dests.is_empty();
        let (payload, plain) = match (w.prot, self.cfg.security.as_deref()) {
            (Some(prot), Some(sec)) => {
                let wid = tether_crypto::sample::endpoint_id(me.0, writer.0);
                let p = if prot.sign && in_batch {
                    tether_crypto::sample::protect_for_batch(
                        prot,
                        w.key.as_deref(),
                        &wid,
                        seq,
                        timestamp_ns,
                        &payload,
                    )
                } else {
                    if prot.sign {
                        self.stats.signatures_made += 1;
                    }
                    // Into the buffer of a sample the history let go of, if any.
                    let mut buf = w.take_spare();
                    tether_crypto::sample::protect_into(
                        &mut buf,
                        prot,
                        w.key.as_deref(),
                        &sec.identity,
                        &wid,
                        seq,
                        timestamp_ns,
                        &payload,
                    )
                    .map(|()| buf)
                };
                match p {
                    Some(p) => {
                        if prot.encrypt {
                            self.stats.samples_sealed += 1;
                            w.seals += 1;
                        }
                        if prot.sign {
                            self.stats.samples_signed += 1;
                        }
                        (Bytes::from(p), Some(payload))
                    }
                    None => return Err(WriteError::UnknownWriter(payload)),
                }
            }
            _ => (payload, None),
        };
        w.push_history(Cached {
            seq,
            timestamp_ns,
            payload: payload.clone(),
            written: now,
        });
        if let Some(d) = w.info.qos.deadline_period() {
            w.deadline_at = Some(after(now, d));
        }
        self.stats.samples_written += 1;

        // Asynchronous: the sender releases it (`poll_scheduled`). With no one to send to,
        // it is released at once.
        if let Some(a) = &mut w.asyncw {
            if w.dests.is_empty() && a.seq == seq {
                a.seq = seq + 1;
                a.released = seq;
                w.forget_released();
            }
            self.deliver_local(now, writer, seq, timestamp_ns, plain.unwrap_or(payload));
            return Ok(seq);
        }

        // Batching: the sample joins the writer's batch, sent when a limit is reached. Only
        // writers that batch pay for this (and for looking themselves up again after it).
        let (w, payload) = match w.info.qos.batch() {
            Some(b) if !w.dests.is_empty() => {
                if self.write_batched(now, writer, b, seq, timestamp_ns, &payload, plain.as_ref()) {
                    return Ok(seq);
                }
                // Too large for a batch: it travels alone, with its own signature.
                let payload = wire_form(
                    &self.cfg,
                    &mut self.stats,
                    writer,
                    seq,
                    timestamp_ns,
                    &payload,
                );
                let Some(w) = self.writers.get_mut(&writer) else {
                    return Ok(seq);
                };
                (w, payload)
            }
            _ => (w, payload),
        };

        // Remote fan-out of a sample larger than one datagram: its fragments, once per
        // participant, with a heartbeat on the last so readers can repair at once.
        if !w.dests.is_empty() && payload.len() > single {
            let hb = w.info.qos.is_reliable().then(|| {
                w.since_hb = 0;
                let first = w.first_available();
                w.heartbeat(now, ack_interval(&self.cfg), first, seq)
            });
            if w.info.qos.is_reliable() && w.heartbeat_by(after(now, self.cfg.heartbeat_period)) {
                self.timers_changed = true;
            }
            let grouped = multicast_peers(&self.cfg, self.grouped);
            let min = self.cfg.multicast_min;
            let remotes = &self.remotes;
            let addrs = w
                .fanout((self.fanout_gen, grouped, min), |d| {
                    fanout_addrs(remotes, d, grouped, min)
                })
                .to_vec();
            for (a, group) in addrs {
                let queued = self.transmits.len();
                self.send_sample(
                    a,
                    writer,
                    EntityId::ALL,
                    seq,
                    timestamp_ns,
                    &payload,
                    None,
                    hb,
                );
                if group {
                    self.stats.datagrams_multicast += (self.transmits.len() - queued) as u64;
                }
            }
            self.deliver_local(now, writer, seq, timestamp_ns, plain.unwrap_or(payload));
            return Ok(seq);
        }

        // Remote fan-out: one datagram, one copy per participant.
        if !w.dests.is_empty() {
            w.since_hb += 1;
            let piggyback = w.info.qos.is_reliable() && w.since_hb >= w.heartbeat_every();
            let hdr = Header {
                domain: self.cfg.domain,
                participant: me,
            };
            let hb = piggyback.then(|| {
                // Before the DATA, so the payload can end the datagram; readers answer
                // heartbeats only after the whole datagram, so this asks for nothing.
                w.since_hb = 0;
                let first = w.first_available();
                w.heartbeat(now, ack_interval(&self.cfg), first, seq)
            });
            if hb.is_some() {
                self.stats.heartbeats_sent += w.dests.len() as u64;
            }
            let data = DataRepr {
                writer,
                reader: EntityId::ALL,
                seq,
                timestamp_ns,
                payload: &[],
            };
            let mut arr = [0u8; DATA_HEAD_MAX];
            let n =
                encode_data_head(&hdr, hb.as_ref(), &data, payload.len(), &mut arr).unwrap_or(0);
            let head = Head::inline(&arr[..n]);
            let dg_len = head.len() + payload.len();
            let grouped = multicast_peers(&self.cfg, self.grouped);
            if grouped == 0 {
                for p in &w.dests {
                    if let Some(rp) = self.remotes.get(p) {
                        self.stats.datagrams_sent += 1;
                        self.stats.bytes_sent += dg_len as u64;
                        self.transmits.push_back(Transmit {
                            dest: rp.addr,
                            head: head.clone(),
                            body: payload.clone(),
                        });
                    }
                }
            } else {
                // Some readers take data by multicast: one datagram per group.
                let min = self.cfg.multicast_min;
                let remotes = &self.remotes;
                let addrs = w.fanout((self.fanout_gen, grouped, min), |d| {
                    fanout_addrs(remotes, d, grouped, min)
                });
                for &(dest, group) in addrs {
                    self.stats.datagrams_sent += 1;
                    self.stats.datagrams_multicast += group as u64;
                    self.stats.bytes_sent += dg_len as u64;
                    self.transmits.push_back(Transmit {
                        dest,
                        head: head.clone(),
                        body: payload.clone(),
                    });
                }
            }
            if w.info.qos.is_reliable() && w.heartbeat_by(after(now, self.cfg.heartbeat_period)) {
                self.timers_changed = true;
            }
        }

        // Local readers.
        self.deliver_local(now, writer, seq, timestamp_ns, plain.unwrap_or(payload));
        let _ = me;
        Ok(seq)
    }

    /// Adds a written sample to its writer's batch, flushing as the limits say. False if the
    /// sample is too big for a batch (the batch waiting before it has then been sent, so
    /// sequence numbers stay in order). `payload` is what goes on the wire (sealed in a
    /// secure realm), `plain` what local readers get if it differs.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_batched(
        &mut self,
        now: Instant,
        writer: EntityId,
        b: crate::qos::Batching,
        seq: u64,
        timestamp_ns: u64,
        payload: &Bytes,
        plain: Option<&Bytes>,
    ) -> bool {
        let room = self
            .cfg
            .max_datagram
            .saturating_sub(HEADER_LEN + HEARTBEAT_LEN + SUBMESSAGE_HEADER_LEN + BATCH_FIXED_LEN)
            // Room for a BATCH_SIG in sign modes.
            .saturating_sub(SUBMESSAGE_HEADER_LEN + BATCH_SIG_LEN);
        let cap = b
            .max_bytes
            .min(room)
            .min(u16::MAX as usize - BATCH_FIXED_LEN);
        let entry = BATCH_ENTRY_OVERHEAD + payload.len();
        let Some(w) = self.writers.get_mut(&writer) else {
            return true;
        };
        if entry > cap {
            if w.batch_count > 0 {
                self.flush_batch(now, writer);
            }
            return false;
        }
        if w.batch_count > 0 && w.batch_buf.len() + entry > cap {
            self.flush_batch(now, writer);
        }
        let Some(w) = self.writers.get_mut(&writer) else {
            return true;
        };
        if w.batch_count == 0 {
            // The whole batch's room at once (growing it by doubling copied every entry
            // about once more: a fifth of the writer's instructions at 256 B). Once the
            // last batch's datagrams are gone, this takes its buffer back: no allocation.
            w.batch_buf.reserve(cap);
            w.batch_first = seq;
            w.batch_deadline = Some(after(now, b.max_delay));
            self.timers_changed = true;
        }
        w.batch_buf
            .extend_from_slice(&batch_entry_head(timestamp_ns, payload.len()));
        w.batch_buf.extend_from_slice(payload);
        w.batch_count += 1;
        let full = w.batch_count >= b.max_samples || w.batch_buf.len() + BATCH_ENTRY_OVERHEAD > cap;
        let local = !w.locals.is_empty();
        if full {
            self.flush_batch(now, writer);
        }
        if local {
            let p = plain.unwrap_or(payload).clone();
            self.deliver_local(now, writer, seq, timestamp_ns, p);
        }
        true
    }

    /// Sends `writer`'s batch now, if it holds anything.
    pub fn flush(&mut self, now: Instant, writer: EntityId) {
        self.flush_batch(now, writer);
    }

    pub(crate) fn flush_batch(&mut self, now: Instant, writer: EntityId) {
        let hdr = self.header();
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        if w.batch_count == 0 {
            return;
        }
        let count = w.batch_count;
        let first_seq = w.batch_first;
        let entries = w.batch_buf.split().freeze();
        w.batch_count = 0;
        w.batch_deadline = None;
        w.since_hb += count;
        let hb = (w.info.qos.is_reliable() && w.since_hb >= w.heartbeat_every()).then(|| {
            w.since_hb = 0;
            let first = w.first_available();
            w.heartbeat(
                now,
                ack_interval(&self.cfg),
                first,
                first_seq + count as u64 - 1,
            )
        });
        if w.info.qos.is_reliable() && w.heartbeat_by(after(now, self.cfg.heartbeat_period)) {
            self.timers_changed = true;
        }
        if w.info.qos.coalesces() {
            // One DATA per sample, as many per datagram as fit, the heartbeat last; built
            // once and sent to every participant.
            let Some(first) = w.dests.iter().find_map(|p| self.remotes.get(p)) else {
                return;
            };
            let mut out = VecDeque::new();
            let mut p = Packer::new(first.addr, hdr, self.cfg.max_datagram);
            let batch = BatchRepr {
                writer,
                reader: EntityId::ALL,
                first_seq,
                count,
                entries: &entries,
            };
            for (seq, timestamp_ns, payload) in batch.samples() {
                let d = DataRepr {
                    writer,
                    reader: EntityId::ALL,
                    seq,
                    timestamp_ns,
                    payload,
                };
                p.push(&Submessage::Data(d), &mut out, &mut self.stats);
            }
            if let Some(hb) = &hb {
                p.push(&Submessage::Heartbeat(*hb), &mut out, &mut self.stats);
                self.stats.heartbeats_sent += w.dests.len() as u64;
            }
            p.finish(&mut out, &mut self.stats);
            for (i, rp) in w
                .dests
                .iter()
                .filter_map(|p| self.remotes.get(p))
                .enumerate()
            {
                for t in &out {
                    if i > 0 {
                        self.stats.datagrams_sent += 1;
                        self.stats.bytes_sent += t.len() as u64;
                    }
                    self.transmits.push_back(Transmit {
                        dest: rp.addr,
                        ..t.clone()
                    });
                }
            }
            return;
        }
        // Batch-signed entries (sign modes): one signature for the whole batch, in a
        // BATCH_SIG right before it.
        let sig = match self.cfg.security.as_deref() {
            Some(sec)
                if entries
                    .get(BATCH_ENTRY_OVERHEAD)
                    .is_some_and(|b| b & tether_crypto::sample::BATCH_SIGNED != 0) =>
            {
                self.stats.signatures_made += 1;
                let wid = tether_crypto::sample::endpoint_id(hdr.participant.0, writer.0);
                Some(tether_crypto::sample::sign_batch(
                    &sec.identity,
                    &wid,
                    first_seq,
                    count,
                    &entries,
                ))
            }
            _ => None,
        };
        let mut head = Vec::with_capacity(96 + if sig.is_some() { 84 } else { 0 });
        let mut b = DatagramBuilder::new(&mut head, hdr);
        if let Some(hb) = &hb {
            let _ = b.push(&Submessage::Heartbeat(*hb));
            self.stats.heartbeats_sent += w.dests.len() as u64;
        }
        if let Some(signature) = &sig {
            let _ = b.push(&Submessage::BatchSig(tether_wire::BatchSigRepr {
                writer,
                first_seq,
                count,
                signature,
            }));
        }
        let batch = BatchRepr {
            writer,
            reader: EntityId::ALL,
            first_seq,
            count,
            entries: &[],
        };
        if b.push_batch_head(&batch, entries.len()).is_err() {
            return;
        }
        let head = Head::copy_from_slice(&head);
        for p in &w.dests {
            if let Some(rp) = self.remotes.get(p) {
                self.stats.datagrams_sent += 1;
                self.stats.bytes_sent += (head.len() + entries.len()) as u64;
                self.transmits.push_back(Transmit {
                    dest: rp.addr,
                    head: head.clone(),
                    body: entries.clone(),
                });
            }
        }
    }

    /// A written sample straight into the caches of matched readers of this participant.
    pub(crate) fn deliver_local(
        &mut self,
        now: Instant,
        writer: EntityId,
        seq: u64,
        timestamp_ns: u64,
        payload: Bytes,
    ) {
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        if w.locals.is_empty() {
            return;
        }
        // Borrowed out and back rather than cloned: no allocation per sample. Delivering
        // touches readers only, never a writer's list.
        let locals = std::mem::take(&mut w.locals);
        let s = Sample {
            writer: Guid {
                participant: self.cfg.participant,
                entity: writer,
            },
            seq,
            timestamp_ns,
            payload,
        };
        for r in &locals {
            self.on_data(now, *r, s.clone());
        }
        if let Some(w) = self.writers.get_mut(&writer) {
            w.locals = locals;
        }
    }
}

#[cfg(test)]
mod tests;
