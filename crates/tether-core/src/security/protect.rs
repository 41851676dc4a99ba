//! Protecting samples on the way out: sealed (and signed) once per sample, whatever the
//! number of readers, under the writer's sender key (`docs/wire.md#protected-samples`).

use bytes::Bytes;
use tether_wire::{DatagramBuilder, EntityId, HEADER_LEN, SEALED_FIXED_LEN, SUBMESSAGE_HEADER_LEN};

/// Bytes before the sealed bytes of a pairwise-sealed datagram (its associated data):
/// header, SEALED submessage header, `to` and `counter`.
const SEALED_PREFIX_LEN: usize = HEADER_LEN + SUBMESSAGE_HEADER_LEN + SEALED_FIXED_LEN;

/// Bytes sealing a datagram for one peer adds to it.
pub(crate) const SEAL_OVERHEAD: usize = SEALED_PREFIX_LEN - HEADER_LEN + tether_crypto::TAG_LEN;

use crate::error::WriteError;
use crate::event::Stats;
use crate::participant::{Config, Participant};
use crate::security::keys::rekey_needed;
use crate::transmit::{Head, Tail, Transmit};
use crate::writer::state::Cached;

/// A written sample after the protect step.
pub(crate) struct Protected {
    /// Its sequence number.
    pub(crate) seq: u64,
    /// What goes on the wire and into the history (sealed in a secure realm).
    pub(crate) wire: Bytes,
    /// What this participant's own readers get, when it differs from `wire`.
    pub(crate) plain: Option<Bytes>,
    /// `wire` is the application's bytes, kept clear: the writer seals them with their
    /// batch (`docs/wire.md#sealed_batch`).
    pub(crate) clear: bool,
}

impl Participant {
    /// Pairwise mode ([`Security::with_pairwise`](crate::Security::with_pairwise)): seals a
    /// datagram once more for the one peer it goes to, if both sides have verified each other
    /// (`docs/wire.md#sealed`). Otherwise (the normal case) returns it as it is.
    pub(crate) fn seal_for_peer(&mut self, t: Transmit) -> Transmit {
        let Some(sec) = self.cfg.security.as_deref().filter(|s| s.pairwise) else {
            return t;
        };
        let Some(&pid) = self.peers.remote_at.get(&t.dest) else {
            return t;
        };
        let hdr = self.header();
        let me = self.cfg.participant;
        let Some(auth) = self
            .peers
            .remotes
            .get_mut(&pid)
            .and_then(|r| r.auth.as_mut())
        else {
            return t;
        };
        let Some(cred) = auth
            .credential
            .as_ref()
            .filter(|_| auth.verified && auth.verified_us)
        else {
            return t;
        };
        if auth.pair_tx.is_none() {
            auth.pair_tx = tether_crypto::pair_key(
                &sec.identity,
                &cred.kx_public,
                &sec.ca_public,
                me.0,
                pid.0,
                sec.suite,
            )
            .map(|k| (k, 0));
        }
        let Some((key, counter)) = auth.pair_tx.as_mut() else {
            return t;
        };
        let head: &[u8] = &t.head;
        let inner = head.len() - HEADER_LEN + t.body.len() + t.tail.len();
        *counter += 1;
        let c = *counter;
        // header ‖ SEALED(to, counter, seal(submessages) ‖ tag); AAD: everything before the
        // sealed bytes.
        let mut v = Vec::with_capacity(SEALED_PREFIX_LEN + inner + tether_crypto::TAG_LEN);
        if DatagramBuilder::new(&mut v, hdr)
            .push_sealed_head(pid, c, inner + tether_crypto::TAG_LEN)
            .is_err()
        {
            return t; // never: datagrams are at most 65,000 bytes
        }
        v.extend_from_slice(&head[HEADER_LEN..]);
        v.extend_from_slice(&t.body);
        v.extend_from_slice(&t.tail);
        let (aad, rest) = v.split_at_mut(SEALED_PREFIX_LEN);
        let Ok(tag) = key.seal_in_place(c, aad, rest) else {
            return t;
        };
        v.extend_from_slice(&tag);
        self.stats.datagrams_pair_sealed += 1;
        let added = (v.len() - t.len()) as u64;
        self.stats.bytes_sent += added;
        Transmit {
            dest: t.dest,
            head: Head::from(Bytes::from(v)),
            body: Bytes::new(),
            tail: Tail::NONE,
            writer: t.writer,
            announces: t.announces,
        }
    }

    /// Gives the sample its sequence number and protects it as its writer's topic says.
    /// A sample bound for a batch in a `sign` mode is signed with its batch, once.
    pub(crate) fn protect(
        &mut self,
        writer: EntityId,
        timestamp_ns: u64,
        payload: Bytes,
    ) -> Result<Protected, WriteError> {
        let me = self.cfg.participant;
        let Some(mut w) = self.writers.get_mut(&writer) else {
            return Err(WriteError::UnknownWriter(payload));
        };
        // A key that a departed reader holds, or that has sealed as much as its suite
        // allows, is replaced before this seal (rare: the writer is looked up again).
        if rekey_needed(self.cfg.security.as_deref(), w) {
            self.rekey(writer);
            let Some(again) = self.writers.get_mut(&writer) else {
                return Err(WriteError::UnknownWriter(payload));
            };
            w = again;
        }
        let seq = w.next_seq;
        w.next_seq += 1;
        let (Some(prot), Some(sec)) = (w.prot, self.cfg.security.as_deref()) else {
            return Ok(Protected {
                seq,
                wire: payload,
                plain: None,
                clear: false,
            });
        };
        let in_batch = w.info.qos.batch().is_some()
            && !w.info.qos.coalesces()
            && w.asyncw.is_none()
            && !w.dests.is_empty();
        if seals_datagrams(w) {
            // Sealed with the datagram it leaves in (a SEALED_BATCH, alone or with the rest
            // of its batch), once whatever the number of readers.
            return Ok(Protected {
                seq,
                wire: payload,
                plain: None,
                clear: true,
            });
        }
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
        let Some(p) = p else {
            return Err(WriteError::UnknownWriter(payload));
        };
        if prot.encrypt {
            self.stats.samples_sealed += 1;
            w.seals += 1;
        }
        if prot.sign {
            self.stats.samples_signed += 1;
        }
        Ok(Protected {
            seq,
            wire: Bytes::from(p),
            plain: Some(payload),
            clear: false,
        })
    }
}

/// Whether `w`'s samples leave in SEALED_BATCHes (`docs/wire.md#sealed_batch`): a writer
/// whose samples are sealed and not signed, with a key, that sends each sample (or batch)
/// itself. Coalescing writers (DATA submessages, each sample sealed alone) and asynchronous
/// ones (their sender's queue) keep sealing each sample. Its samples wait in the batch, and
/// in the history, as the application wrote them; one that travels alone (a repair, a late
/// joiner, one too large for a datagram) is sealed alone then.
pub(crate) fn seals_datagrams(w: &crate::writer::state::Writer) -> bool {
    w.prot.is_some_and(|p| p.encrypt && !p.sign)
        && w.key.is_some()
        && !w.info.qos.coalesces()
        && w.asyncw.is_none()
}

/// The head of a datagram that ends with a SEALED_BATCH of `count` entries starting at
/// `first_seq` (`body`, clear on the way in, sealed in place on the way out): header, the
/// heartbeat if any, the SEALED_BATCH's fields and tag. The seal authenticates every byte
/// before the tag, so the datagram needs no AUTH_TAG. `None` if it cannot seal (never with
/// a key: then nothing is sent in clear).
#[allow(clippy::too_many_arguments)]
pub(crate) fn seal_datagram(
    scratch: &mut Vec<u8>,
    hdr: tether_wire::Header,
    writer: EntityId,
    first_seq: u64,
    count: u32,
    key: &tether_crypto::SenderKey,
    hb: Option<&tether_wire::HeartbeatRepr>,
    body: &mut [u8],
) -> Option<Head> {
    scratch.clear();
    let mut b = DatagramBuilder::new(scratch, hdr);
    if let Some(hb) = hb {
        b.push(&tether_wire::Submessage::Heartbeat(*hb)).ok()?;
    }
    let x = tether_wire::SealedBatchRepr {
        writer,
        reader: EntityId::ALL,
        first_seq,
        count,
        epoch: key.epoch(),
        tag: &[0; 16],
        ciphertext: &[],
    };
    b.push_sealed_batch_head(&x, body.len()).ok()?;
    let tag_at = scratch.len() - tether_crypto::TAG_LEN;
    let tag = key.seal_batch(first_seq, &scratch[..tag_at], body).ok()?;
    scratch[tag_at..].copy_from_slice(&tag);
    Some(Head::copy_from_slice(scratch))
}

/// What a sample from a writer's history goes on the wire as when it travels alone (not
/// in a batch): itself, unless it is batch-signed, in which case it gets its own signature,
/// or kept clear by a batch-sealing writer, in which case it is sealed alone under the
/// writer's current `key` (AES-GCM and signatures are deterministic, so every repair of it
/// under one epoch is the same bytes). `None` if a clear sample cannot be sealed (no key, or
/// no secure realm): it is then not sent at all, never in clear.
pub(crate) fn wire_form(
    cfg: &Config,
    stats: &mut Stats,
    writer: EntityId,
    key: Option<&tether_crypto::SenderKey>,
    c: &Cached,
) -> Option<Bytes> {
    let (seq, timestamp_ns, payload) = (c.seq, c.timestamp_ns, &c.payload);
    let Some(sec) = cfg.security.as_deref() else {
        return (!c.clear).then(|| payload.clone());
    };
    if c.clear {
        let wid = tether_crypto::sample::endpoint_id(cfg.participant.0, writer.0);
        let prot = tether_crypto::Protection {
            encrypt: true,
            sign: false,
        };
        let mut v = Vec::new();
        tether_crypto::sample::protect_into(
            &mut v,
            prot,
            Some(key?),
            &sec.identity,
            &wid,
            seq,
            timestamp_ns,
            payload,
        )?;
        stats.samples_resealed += 1;
        return Some(Bytes::from(v));
    }
    if payload
        .first()
        .is_none_or(|b| b & tether_crypto::sample::BATCH_SIGNED == 0)
    {
        return Some(payload.clone());
    }
    let wid = tether_crypto::sample::endpoint_id(cfg.participant.0, writer.0);
    match tether_crypto::sample::individual(payload, &sec.identity, &wid, seq, timestamp_ns) {
        Some(v) => {
            stats.signatures_made += 1;
            Some(Bytes::from(v))
        }
        None => Some(payload.clone()),
    }
}
