//! Batching: samples of one writer share a datagram (one BATCH submessage, or coalesced
//! DATA submessages), sent when a limit of the writer's QoS is reached or at its deadline.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;
use tether_wire::{
    BATCH_ENTRY_OVERHEAD, BATCH_FIXED_LEN, BatchRepr, DataRepr, DatagramBuilder, EntityId,
    HEADER_LEN, HeartbeatRepr, SUBMESSAGE_HEADER_LEN, Submessage, batch_entry_head,
};

use crate::participant::{HEARTBEAT_LEN, Participant, after};
use crate::reliability::ack_interval;
use crate::transmit::{Head, Transmit};
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
        // One batch goes to every matched participant: it fits the smallest datagram.
        let room = self
            .writer_datagram(writer)
            .saturating_sub(HEADER_LEN + HEARTBEAT_LEN + SUBMESSAGE_HEADER_LEN + BATCH_FIXED_LEN)
            // Room for a BATCH_SIG in sign modes.
            .saturating_sub(SUBMESSAGE_HEADER_LEN + BATCH_SIG_LEN);
        let cap = b
            .max_bytes
            .min(room)
            .min(u16::MAX as usize - BATCH_FIXED_LEN);
        let entry = BATCH_ENTRY_OVERHEAD + payload.len();
        let Some(w) = self.writers.get_mut(&writer) else {
            return Batched::Joined;
        };
        if entry > cap {
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
            self.send_coalesced(writer, hb, first_seq, count, &entries);
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
            if let Some(rp) = self.peers.remotes.get(p) {
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
        let mut p = Packer::new(first.addr, hdr, size);
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
        for (i, rp) in w
            .dests
            .iter()
            .filter_map(|p| self.peers.remotes.get(p))
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
    }
}
