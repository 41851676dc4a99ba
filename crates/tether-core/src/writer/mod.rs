//! The writer's outgoing path: history → protect → batch → fragment → schedule → transmit.

mod batch;
pub(crate) mod flow;
mod inactive;
pub(crate) mod packer;
pub(crate) mod schedule;
pub(crate) mod state;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_wire::{
    BATCH_ENTRY_OVERHEAD, DATA_FRAG_FIXED_LEN, DATA_HEAD_MAX, DataRepr, EntityId, HEADER_LEN,
    Header, HeartbeatRepr, ParticipantId, SEALED_BATCH_FIXED_LEN, SUBMESSAGE_HEADER_LEN,
    batch_entry_head, encode_data_head,
};

use crate::writer::state::Cached;

use crate::discovery::RemoteParticipant;
use crate::error::WriteError;
use crate::participant::{Config, HEARTBEAT_LEN, Participant, after};
use crate::reliability::{ack_interval, heartbeat_all};
use crate::security::protect::{seal_datagram, wire_form};
use crate::transmit::{Head, Tail, Transmit};
use crate::writer::batch::Batched;
use crate::writer::packer::Outgoing;

/// Which way a kept sample leaves its writer.
enum Path {
    /// The sender's queue of an asynchronous writer (`poll_scheduled`).
    Scheduled,
    /// The writer's batch.
    Batch(crate::qos::Batching),
    /// At once, to every matched participant.
    Direct,
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
/// to the group (`true`). `grouped`: how many remotes have a group (0: all unicast).
///
/// A router link's group takes even one participant (`route`): a datagram there crosses
/// the link once and the router copies it where it is wanted, so `min`, which weighs a
/// multicast datagram's cost to every host on a LAN against unicast copies, does not apply.
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
    groups.retain(|(g, n)| *n >= min.max(1) || crate::route::is_route_group(g));
    let mut out: Vec<(SocketAddr, bool)> = groups.iter().map(|(g, _)| (*g, true)).collect();
    out.extend(
        peers
            .filter(|r| r.group.is_none_or(|g| !groups.iter().any(|(a, _)| *a == g)))
            .map(|r| (r.addr, false)),
    );
    out
}

/// Bytes of sample in each fragment (all but the last) of datagrams of `datagram` bytes.
pub(crate) fn frag_size(datagram: usize) -> u16 {
    let room = datagram
        .saturating_sub(HEADER_LEN + HEARTBEAT_LEN + SUBMESSAGE_HEADER_LEN + DATA_FRAG_FIXED_LEN);
    room.clamp(1, u16::MAX as usize) as u16
}

/// Largest payload sent whole, with a heartbeat, in one DATA of a `datagram`-byte datagram.
pub(crate) fn single_payload(datagram: usize) -> usize {
    datagram.saturating_sub(crate::participant::DATA_OVERHEAD + HEARTBEAT_LEN)
}

impl Participant {
    /// The smallest datagram writer `w`'s matched participants take, before sealing is
    /// taken off (see [`datagram_size`](Self::datagram_size)).
    pub(crate) fn writer_datagram(&mut self, writer: EntityId) -> usize {
        let overhead = self.seal_overhead();
        let remotes = &self.peers.remotes;
        let generation = self.peers.fanout_gen;
        let Some(w) = self.writers.get_mut(&writer) else {
            return self.cfg.max_datagram;
        };
        w.smallest_datagram(generation, |p| {
            remotes.get(&p).map_or(usize::MAX, |r| r.datagram)
        })
        .min(self.cfg.max_datagram)
        .saturating_sub(overhead)
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
        let size = self.datagram_size(dest);
        let o = Outgoing {
            hdr: self.header(),
            single: single_payload(size),
            frag_size: frag_size(size),
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
    ///
    /// The pipeline: room in the history (back-pressure) → protect (a new epoch first if the
    /// key is spent or a reader left; then seal or sign, once, whatever the number of readers) → history → then one of: the sender's queue
    /// (asynchronous writers), the batch, or fragment and transmit → local readers.
    pub fn write(
        &mut self,
        now: Instant,
        writer: EntityId,
        timestamp_ns: u64,
        payload: Bytes,
    ) -> Result<u64, WriteError> {
        self.input += 1;
        // Probes that are due leave first: a writer waiting for room needs their answers.
        self.congestion_tick(now);
        let payload = self.make_room(now, writer, payload)?;
        let p = self.protect(writer, timestamp_ns, payload)?;
        let seq = p.seq;
        let kept = Cached {
            seq,
            timestamp_ns,
            payload: p.wire,
            written: now,
            clear: p.clear,
        };
        let path = self.keep(now, writer, kept.clone());
        let wire = kept.payload.clone();
        let wire = match path {
            Path::Scheduled => wire,
            Path::Batch(b) => {
                match self.write_batched(now, writer, b, seq, timestamp_ns, &wire) {
                    Batched::Joined => wire,
                    // Too large for a batch: it travels alone, with its own signature, or
                    // sealed alone if its batch would have sealed it.
                    Batched::TooLarge => {
                        let Some(w) = self.writers.get_mut(&writer) else {
                            return Ok(seq);
                        };
                        if kept.clear {
                            self.stats.samples_sealed += 1;
                            w.seals += 1;
                        }
                        let alone =
                            wire_form(&self.cfg, &mut self.stats, writer, w.key.as_deref(), &kept);
                        if let Some(alone) = &alone {
                            self.transmit(now, writer, seq, timestamp_ns, alone);
                        }
                        wire
                    }
                }
            }
            Path::Direct => {
                if kept.clear {
                    self.transmit_clear(now, writer, &kept);
                } else {
                    self.transmit(now, writer, seq, timestamp_ns, &wire);
                }
                wire
            }
        };
        // This participant's own readers get the plain bytes.
        self.deliver_local(now, writer, seq, timestamp_ns, p.plain.unwrap_or(wire));
        Ok(seq)
    }

    /// Back-pressure: a writer whose history (or local keep-all reader) has no room for
    /// `payload` refuses it, and asks its readers where they stand.
    fn make_room(
        &mut self,
        now: Instant,
        writer: EntityId,
        payload: Bytes,
    ) -> Result<Bytes, WriteError> {
        let max = self.cfg.max_sample_size;
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
        if !local_full && w.make_room(payload.len() as u64) {
            // A keep-all reliable writer also waits while the paths to its readers hold a
            // window's worth of its datagrams waiting (congestion control); keep-last and
            // best-effort writers never wait.
            if !self.peers.controlled || !w.paced() {
                w.blocked = false;
                return Ok(payload);
            }
            if self.paths_have_room(writer) {
                if let Some(w) = self.writers.get_mut(&writer) {
                    w.blocked = false;
                }
                return Ok(payload);
            }
            self.stats.window_full += 1;
            if let Some(w) = self.writers.get_mut(&writer) {
                w.blocked = true;
            }
            return Err(WriteError::WouldBlock(payload));
        }
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
                participant: self.cfg.participant,
            };
            let fanout = (
                self.peers.fanout_gen,
                multicast_peers(&self.cfg, self.peers.grouped),
                self.cfg.multicast_min,
            );
            let (first, last) = (w.first_available(), w.last_sent());
            let hb = w.asking_heartbeat(now, first, last);
            heartbeat_all(
                w,
                hb,
                hdr,
                &self.peers.remotes,
                fanout,
                &mut self.transmits,
                &mut self.stats,
            );
        }
        Err(WriteError::WouldBlock(payload))
    }

    /// Keeps a protected (or, batch-sealed, clear) sample in its writer's history and says
    /// which way it leaves. An asynchronous writer with no one to send to releases it at once.
    fn keep(&mut self, now: Instant, writer: EntityId, kept: Cached) -> Path {
        let Some(w) = self.writers.get_mut(&writer) else {
            return Path::Scheduled;
        };
        let seq = kept.seq;
        w.push_history(kept);
        w.unheard += u64::from(w.readers.is_empty());
        if let Some(d) = w.info.qos.deadline_period() {
            w.deadline_at = Some(after(now, d));
        }
        self.stats.samples_written += 1;
        // Asynchronous: the sender releases it (`poll_scheduled`).
        if let Some(a) = &mut w.asyncw {
            if w.dests.is_empty() && a.seq == seq {
                a.seq = seq + 1;
                a.released = seq;
                w.forget_released();
            }
            return Path::Scheduled;
        }
        match w.info.qos.batch() {
            Some(b) if !w.dests.is_empty() => Path::Batch(b),
            _ => Path::Direct,
        }
    }

    /// Sends a sample to every matched participant: one datagram, one copy per participant
    /// (or per multicast group), or the fragments of one larger than a datagram.
    fn transmit(
        &mut self,
        now: Instant,
        writer: EntityId,
        seq: u64,
        timestamp_ns: u64,
        payload: &Bytes,
    ) {
        let single = single_payload(self.writer_datagram(writer));
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        if w.dests.is_empty() {
            return;
        }
        if payload.len() > single {
            self.transmit_fragmented(now, writer, seq, timestamp_ns, payload);
            return;
        }
        w.since_hb += 1;
        let piggyback = w.info.qos.is_reliable() && w.since_hb >= w.heartbeat_every();
        let hdr = Header {
            domain: self.cfg.domain,
            participant: self.cfg.participant,
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
        let n = encode_data_head(&hdr, hb.as_ref(), &data, payload.len(), &mut arr).unwrap_or(0);
        self.fan_out(now, writer, Head::inline(&arr[..n]), payload.clone());
    }

    /// Sends one datagram (`head`, then `body`) of `writer` to every matched participant:
    /// once to each, or once to each multicast group its readers share.
    fn fan_out(&mut self, now: Instant, writer: EntityId, head: Head, body: Bytes) {
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        let dg_len = (head.len() + body.len()) as u64;
        let grouped = multicast_peers(&self.cfg, self.peers.grouped);
        if grouped == 0 {
            for p in &w.dests {
                if let Some(rp) = self.peers.remotes.get(p) {
                    self.stats.datagrams_sent += 1;
                    self.stats.bytes_sent += dg_len;
                    self.transmits.push_back(Transmit {
                        dest: rp.addr,
                        head: head.clone(),
                        body: body.clone(),
                        tail: Tail::NONE,
                        writer: Some(writer),
                        announces: None,
                    });
                }
            }
        } else {
            // Some readers take data by multicast: one datagram per group.
            let min = self.cfg.multicast_min;
            let remotes = &self.peers.remotes;
            let addrs = w.fanout((self.peers.fanout_gen, grouped, min), |d| {
                fanout_addrs(remotes, d, grouped, min)
            });
            for &(dest, group) in addrs {
                self.stats.datagrams_sent += 1;
                self.stats.datagrams_multicast += group as u64;
                self.stats.bytes_sent += dg_len;
                self.transmits.push_back(Transmit {
                    dest,
                    head: head.clone(),
                    body: body.clone(),
                    tail: Tail::NONE,
                    writer: Some(writer),
                    announces: None,
                });
            }
        }
        if w.info.qos.is_reliable() && w.heartbeat_by(after(now, self.cfg.heartbeat_period)) {
            self.timers_changed = true;
        }
    }

    /// Sends a sample a writer kept clear (`docs/wire.md#sealed_batch`): in a datagram of its
    /// own that ends with a SEALED_BATCH of one, sealed once for every reader; or, too large
    /// for one datagram, sealed alone and fragmented.
    fn transmit_clear(&mut self, now: Instant, writer: EntityId, kept: &Cached) {
        let room = self.writer_datagram(writer);
        let hdr = self.header();
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        if w.dests.is_empty() {
            return;
        }
        let Some(key) = w.key.clone() else {
            return;
        };
        let (seq, timestamp_ns) = (kept.seq, kept.timestamp_ns);
        let need = HEADER_LEN
            + HEARTBEAT_LEN
            + SUBMESSAGE_HEADER_LEN
            + SEALED_BATCH_FIXED_LEN
            + BATCH_ENTRY_OVERHEAD
            + kept.payload.len();
        if need > room {
            self.stats.samples_sealed += 1;
            w.seals += 1;
            if let Some(alone) = wire_form(&self.cfg, &mut self.stats, writer, Some(&key), kept) {
                self.transmit(now, writer, seq, timestamp_ns, &alone);
            }
            return;
        }
        w.since_hb += 1;
        let piggyback = w.info.qos.is_reliable() && w.since_hb >= w.heartbeat_every();
        let hb = piggyback.then(|| {
            w.since_hb = 0;
            let first = w.first_available();
            w.heartbeat(now, ack_interval(&self.cfg), first, seq)
        });
        if hb.is_some() {
            self.stats.heartbeats_sent += w.dests.len() as u64;
        }
        // Into the buffer of a sealed datagram no transmit holds any more, if any.
        let mut buf = w.take_spare();
        buf.clear();
        buf.extend_from_slice(&batch_entry_head(timestamp_ns, kept.payload.len()));
        buf.extend_from_slice(&kept.payload);
        let mut scratch = std::mem::take(&mut self.keystore.seal_scratch);
        let head = seal_datagram(
            &mut scratch,
            hdr,
            writer,
            seq,
            1,
            &key,
            hb.as_ref(),
            &mut buf,
        );
        self.keystore.seal_scratch = scratch;
        let Some(head) = head else {
            return; // never with a key; the history repairs it, sealed alone
        };
        w.seals += 1;
        self.stats.samples_sealed += 1;
        self.stats.batches_sealed += 1;
        let body = Bytes::from(buf);
        // Its history holds the clear sample, never this: once the transmits are gone, the
        // next datagram is sealed into it.
        w.last_sealed = Some(body.clone());
        self.fan_out(now, writer, head, body);
    }

    /// Remote fan-out of a sample larger than one datagram: its fragments, once per
    /// participant, with a heartbeat on the last so readers can repair at once.
    fn transmit_fragmented(
        &mut self,
        now: Instant,
        writer: EntityId,
        seq: u64,
        timestamp_ns: u64,
        payload: &Bytes,
    ) {
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        let hb = w.info.qos.is_reliable().then(|| {
            w.since_hb = 0;
            let first = w.first_available();
            w.heartbeat(now, ack_interval(&self.cfg), first, seq)
        });
        if w.info.qos.is_reliable() && w.heartbeat_by(after(now, self.cfg.heartbeat_period)) {
            self.timers_changed = true;
        }
        let grouped = multicast_peers(&self.cfg, self.peers.grouped);
        let min = self.cfg.multicast_min;
        let remotes = &self.peers.remotes;
        let addrs = w
            .fanout((self.peers.fanout_gen, grouped, min), |d| {
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
                payload,
                None,
                hb,
            );
            if group {
                self.stats.datagrams_multicast += (self.transmits.len() - queued) as u64;
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
        let s = self.own_sample(writer, seq, timestamp_ns, payload);
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
