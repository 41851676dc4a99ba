//! Batching: samples of one writer share a datagram (one BATCH submessage, or coalesced
//! DATA submessages), sent when a limit of the writer's QoS is reached or at its deadline.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use tether_wire::{
    BATCH_ENTRY_OVERHEAD, BATCH_FIXED_LEN, BatchRepr, DataRepr, DatagramBuilder, EntityId,
    HEADER_LEN, HeartbeatRepr, SEALED_BATCH_FIXED_LEN, SUBMESSAGE_HEADER_LEN, Submessage,
    batch_entry_head,
};

use crate::participant::{HEARTBEAT_LEN, Participant, after};
use crate::reliability::ack_interval;
use crate::security::keys::rekey_needed;
use crate::security::protect::{seal_datagram, seals_datagrams};
use crate::transmit::{Head, Tail, Transmit};
use crate::writer::packer::Packer;

/// A BATCH_SIG body: writer, first sequence number, count, signature.
pub(crate) const BATCH_SIG_LEN: usize = 4 + 8 + 4 + 64;

/// What became of a sample offered to its writer's batch.
pub(crate) enum Batched {
    /// It is in the batch (which may have been sent since).
    Joined,
    /// Too large for a batch: it travels alone (the batch before it has been sent, so
    /// sequence numbers stay in order).
    TooLarge,
}

impl Participant {
    /// Adds a written sample to its writer's batch, flushing as the limits say. [`Batched::TooLarge`] if the
    /// sample is too big for a batch (the batch waiting before it has then been sent, so
    /// sequence numbers stay in order). `payload` is what goes on the wire (sealed in a
    /// secure realm).
    pub(crate) fn write_batched(
        &mut self,
        now: Instant,
        writer: EntityId,
        b: crate::qos::Batching,
        seq: u64,
        timestamp_ns: u64,
        payload: &Bytes,
    ) -> Batched {
        // The batch holds up to `max_bytes`; it leaves as datagrams of whole entries, each
        // within one datagram's room (see `flush_batch`).
        let room = self.batch_room(writer);
        let cap = b.max_bytes.max(1);
        let entry = BATCH_ENTRY_OVERHEAD + payload.len();
        let Some(w) = self.writers.get_mut(&writer) else {
            return Batched::Joined;
        };
        if entry > cap.min(room) {
            if w.batch_count > 0 {
                self.flush_batch(now, writer);
            }
            return Batched::TooLarge;
        }
        if w.batch_count > 0 && w.batch_buf.len() + entry > cap {
            self.flush_batch(now, writer);
        }
        let Some(w) = self.writers.get_mut(&writer) else {
            return Batched::Joined;
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
        if full {
            self.flush_batch(now, writer);
        }
        Batched::Joined
    }

    /// Bytes of entries one batch datagram carries: a datagram less its header, a
    /// heartbeat, the BATCH head and a BATCH_SIG (sign modes).
    /// Room for entries in one datagram of `writer`'s batch: it goes to every matched
    /// participant, so it fits the smallest datagram any of them takes.
    fn batch_room(&mut self, writer: EntityId) -> usize {
        // A SEALED_BATCH's fields take no more than a BATCH's with its BATCH_SIG.
        const _: () = assert!(SEALED_BATCH_FIXED_LEN <= BATCH_FIXED_LEN + 4 + BATCH_SIG_LEN);
        self.writer_datagram(writer)
            .saturating_sub(HEADER_LEN + HEARTBEAT_LEN + SUBMESSAGE_HEADER_LEN + BATCH_FIXED_LEN)
            .saturating_sub(SUBMESSAGE_HEADER_LEN + BATCH_SIG_LEN)
            .min(u16::MAX as usize - BATCH_FIXED_LEN)
    }

    /// Sends `writer`'s batch now, if it holds anything.
    pub fn flush(&mut self, now: Instant, writer: EntityId) {
        self.flush_batch(now, writer);
    }

    pub(crate) fn flush_batch(&mut self, now: Instant, writer: EntityId) {
        let hdr = self.header();
        let Some(w) = self.writers.get(&writer) else {
            return;
        };
        if w.batch_count == 0 {
            return;
        }
        // A batch-sealing writer's entries are clear until now: they are sealed as they
        // leave, under a new epoch first if a reader left or the key is spent.
        let sealing = seals_datagrams(w);
        if sealing && rekey_needed(self.cfg.security.as_deref(), w) {
            self.rekey(writer);
        }
        let room = self.batch_room(writer);
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        let count = w.batch_count;
        let first_seq = w.batch_first;
        let mut entries = w.batch_buf.split();
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
            let entries = entries.freeze();
            self.send_coalesced(writer, hb, first_seq, count, &entries);
            return;
        }
        // Whole entries, as many per datagram as fit: one BATCH (or SEALED_BATCH) each (a
        // batch of path-sized datagrams leaves as several, to one destination after
        // another, which the driver sends as one GSO message per destination).
        let mut spans: Vec<(usize, usize, u64, u32)> = Vec::new();
        let (mut start, mut seq) = (0, first_seq);
        while start < entries.len() {
            let (end, n) = entries_within(&entries, start, room);
            if n > 0 {
                spans.push((start, end, seq, n));
            }
            seq += n as u64;
            start = end;
        }
        // Each datagram's entries sealed in place, one AEAD for them and for the datagram
        // (`docs/wire.md#sealed_batch`); otherwise a BATCH each.
        let key = w.key.clone().filter(|_| sealing);
        let mut parts: Vec<(Head, Bytes)> = Vec::with_capacity(spans.len());
        let mut heads: Vec<Option<Head>> = Vec::with_capacity(spans.len());
        // One buffer for every head of this batch (each is copied into its Head).
        let mut scratch = Vec::with_capacity(96 + SUBMESSAGE_HEADER_LEN + BATCH_SIG_LEN);
        let last = spans.len().saturating_sub(1);
        if let Some(key) = &key {
            for (i, &(a, b, seq, n)) in spans.iter().enumerate() {
                let hb = hb.filter(|_| i == last);
                let head = seal_datagram(
                    &mut scratch,
                    hdr,
                    writer,
                    seq,
                    n,
                    key,
                    hb.as_ref(),
                    &mut entries[a..b],
                );
                if head.is_some() {
                    w.seals += 1;
                    self.stats.batches_sealed += 1;
                    self.stats.samples_sealed += n as u64;
                }
                // Not sealed (never: the writer has a key): not sent in clear; the history
                // repairs it, sealed alone.
                heads.push(head);
            }
        }
        let entries = entries.freeze();
        for (i, &(a, b, seq, n)) in spans.iter().enumerate() {
            let body = entries.slice(a..b);
            let head = match heads.get_mut(i) {
                Some(h) => h.take(),
                None => {
                    let hb = hb.filter(|_| i == last);
                    self.batch_head(&mut scratch, hdr, writer, seq, n, &body, hb)
                }
            };
            if let Some(head) = head {
                parts.push((head, body));
            }
        }
        let Some(w) = self.writers.get(&writer) else {
            return;
        };
        if hb.is_some() {
            self.stats.heartbeats_sent += w.dests.len() as u64;
        }
        let pairwise = crate::writer::multicast_peers(&self.cfg, 1) == 0;
        for dest in crate::route::batch_dests(&self.peers.remotes, &w.dests, pairwise) {
            for (head, body) in &parts {
                self.stats.datagrams_sent += 1;
                self.stats.bytes_sent += (head.len() + body.len()) as u64;
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
    }

    /// The head of one batch datagram: header, BATCH_SIG over its entries (sign modes),
    /// the BATCH head; the heartbeat first when `hb`.
    #[allow(clippy::too_many_arguments)]
    fn batch_head(
        &mut self,
        head: &mut Vec<u8>,
        hdr: tether_wire::Header,
        writer: EntityId,
        first_seq: u64,
        count: u32,
        entries: &Bytes,
        hb: Option<HeartbeatRepr>,
    ) -> Option<Head> {
        // Batch-signed entries (sign modes): one signature for the entries of this
        // datagram, in a BATCH_SIG right before them.
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
                    entries,
                ))
            }
            _ => None,
        };
        head.clear();
        let mut b = DatagramBuilder::new(head, hdr);
        if let Some(hb) = &hb {
            let _ = b.push(&Submessage::Heartbeat(*hb));
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
        b.push_batch_head(&batch, entries.len()).ok()?;
        Some(Head::copy_from_slice(head))
    }

    /// A coalescing writer's batch: one DATA per sample, as many per datagram as fit, the
    /// heartbeat last; built once and sent to every participant.
    fn send_coalesced(
        &mut self,
        writer: EntityId,
        hb: Option<HeartbeatRepr>,
        first_seq: u64,
        count: u32,
        entries: &Bytes,
    ) {
        let hdr = self.header();
        let size = self.writer_datagram(writer);
        let Some(w) = self.writers.get(&writer) else {
            return;
        };
        let Some(first) = w.dests.iter().find_map(|p| self.peers.remotes.get(p)) else {
            return;
        };
        let mut out = VecDeque::new();
        let mut p = Packer::for_writer(first.addr, hdr, size, writer);
        let batch = BatchRepr {
            writer,
            reader: EntityId::ALL,
            first_seq,
            count,
            entries,
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
        let pairwise = crate::writer::multicast_peers(&self.cfg, 1) == 0;
        let dests = crate::route::batch_dests(&self.peers.remotes, &w.dests, pairwise);
        for (i, dest) in dests.into_iter().enumerate() {
            for t in &out {
                if i > 0 {
                    self.stats.datagrams_sent += 1;
                    self.stats.bytes_sent += t.len() as u64;
                }
                self.transmits.push_back(Transmit { dest, ..t.clone() });
            }
        }
    }
}

/// The end of the entries from `start` that fit in `room` bytes (at least one entry), and
/// how many they are. Entries are `timestamp (8) | length (4, LE) | payload`.
fn entries_within(entries: &[u8], start: usize, room: usize) -> (usize, u32) {
    let mut end = start;
    let mut n = 0u32;
    while end + BATCH_ENTRY_OVERHEAD <= entries.len() {
        let len = u32::from_le_bytes(
            entries[end + 8..end + BATCH_ENTRY_OVERHEAD]
                .try_into()
                .expect("4 bytes"),
        ) as usize;
        let next = end + BATCH_ENTRY_OVERHEAD + len;
        if next > entries.len() || (n > 0 && next - start > room) {
            break;
        }
        end = next;
        n += 1;
    }
    if n == 0 {
        // Not an entry (never: the writer wrote them): nothing more to send.
        return (entries.len(), 0);
    }
    (end, n)
}
