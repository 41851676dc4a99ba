//! The gate: every received datagram and sample passes here before any other module sees it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tether_wire::{
    BatchRepr, DatagramBuilder, EntityId, HEADER_LEN, ParticipantId, SEALED_FIXED_LEN,
    SUBMESSAGE_HEADER_LEN, Submessage, SubmessageKind,
};

use crate::event::{Guid, Sample};

use crate::participant::Participant;
use crate::transmit::{Head, Transmit};

impl Participant {
    /// Whether `x` is `g`'s signature over batch `b` (checked once per batch).
    pub(crate) fn batch_signature_ok(
        &mut self,
        g: Guid,
        b: &BatchRepr<'_>,
        x: &tether_wire::BatchSigRepr<'_>,
    ) -> bool {
        if x.writer != b.writer || x.first_seq != b.first_seq || x.count != b.count {
            return false;
        }
        let Some(key) = self
            .verified_credential(g.participant)
            .map(|c| c.sign_public)
        else {
            return false;
        };
        let wid = tether_crypto::sample::endpoint_id(g.participant.0, g.entity.0);
        let ok = tether_crypto::sample::batch_signature_ok(
            &key,
            &wid,
            b.first_seq,
            b.count,
            b.entries,
            x.signature,
        );
        if ok {
            self.stats.signatures_verified += 1;
        }
        ok
    }

    /// In a secure realm, opens a sample's sealed payload with its writer's key for the
    /// epoch it names. Refused samples are counted; a missing key is asked for (at most
    /// every 50 ms per writer) and the sample dropped (a reliable writer repairs it).
    /// Whether every local reader a sample of `writer` addressed to `reader` (or to all)
    /// would go to already holds number `seq`.
    pub(crate) fn held_everywhere(&self, writer: Guid, reader: EntityId, seq: u64) -> bool {
        let holds = |r: &EntityId| {
            self.readers
                .get(r)
                .and_then(|x| x.writers.get(&writer))
                .is_some_and(|wp| wp.holds(seq))
        };
        if reader == EntityId::ALL {
            self.remote_writer_readers
                .get(&writer)
                .is_some_and(|v| !v.is_empty() && v.iter().all(holds))
        } else {
            holds(&reader)
        }
    }

    pub(crate) fn unseal(&mut self, now: Instant, reader: EntityId, s: Sample) -> Option<Sample> {
        self.unseal_in(now, reader, s, false)
    }

    /// [`unseal`](Self::unseal) for a sample that arrived in a batch whose signature was
    /// verified (`batch_signed`): its own signature may then be the batch's.
    pub(crate) fn unseal_in(
        &mut self,
        now: Instant,
        reader: EntityId,
        s: Sample,
        batch_signed: bool,
    ) -> Option<Sample> {
        if self.cfg.security.is_none() {
            return Some(s);
        }
        // Only writers we are matched with get their samples opened (and keys asked
        // for): forged writers cost a lookup, never memory.
        if !self.remote_writer_readers.contains_key(&s.writer) {
            self.stats.unmatched_writer += 1;
            return None;
        }
        // A sample every reader it is for already holds (a repair nobody needed, a replay)
        // is dropped before it costs a decryption.
        if self.held_everywhere(s.writer, reader, s.seq) {
            self.stats.duplicates += 1;
            return None;
        }
        let wid = tether_crypto::sample::endpoint_id(s.writer.participant.0, s.writer.entity.0);
        let Some(parts) = tether_crypto::sample::parts(&s.payload) else {
            self.stats.open_failed += 1;
            return None;
        };
        // At least the protection this session's policy asks for the topic: otherwise anyone
        // able to send a datagram under the writer's id could inject a plain sample (or strip
        // a signature from a sign-only one) and have it delivered.
        let local = if reader == EntityId::ALL {
            self.remote_writer_readers
                .get(&s.writer)
                .and_then(|v| v.first().copied())
        } else {
            Some(reader)
        };
        let required = match (local.and_then(|r| self.readers.get(&r)), &self.cfg.security) {
            (Some(r), Some(sec)) => sec.protection_for(&r.info.topic),
            _ => tether_crypto::Protection {
                encrypt: true,
                sign: false,
            },
        };
        if (required.encrypt && !parts.prot.encrypt) || (required.sign && !parts.prot.sign) {
            self.stats.under_protected += 1;
            return None;
        }
        if parts.batch_signed {
            // Signed by its batch: only inside a batch whose signature verified.
            if !batch_signed {
                self.stats.signature_failed += 1;
                return None;
            }
        } else if parts.prot.sign {
            let key = self
                .verified_credential(s.writer.participant)
                .map(|c| c.sign_public);
            if !key.is_some_and(|k| {
                tether_crypto::sample::signature_ok(&parts, &k, &wid, s.seq, s.timestamp_ns)
            }) {
                self.stats.signature_failed += 1;
                return None;
            }
        }
        if !parts.prot.encrypt {
            let plain = s.payload.slice_ref(parts.body);
            return Some(Sample {
                payload: plain,
                ..s
            });
        }
        let Some(epoch) = tether_crypto::sample::sealed_epoch(parts.body) else {
            self.stats.open_failed += 1;
            return None;
        };
        match self.keys.get(&(s.writer, epoch)) {
            Some(k) => {
                match tether_crypto::sample::open(
                    k,
                    &wid,
                    s.seq,
                    s.timestamp_ns,
                    parts.prot,
                    parts.body,
                ) {
                    Some(plain) => {
                        self.stats.samples_opened += 1;
                        Some(Sample {
                            payload: Bytes::from(plain),
                            ..s
                        })
                    }
                    None => {
                        self.stats.open_failed += 1;
                        None
                    }
                }
            }
            None => {
                self.stats.no_key += 1;
                let asked = self.key_asked.get(&s.writer).copied();
                if asked
                    .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_millis(50))
                {
                    self.key_asked.insert(s.writer, now);
                    let to = if reader == EntityId::ALL {
                        self.remote_writer_readers
                            .get(&s.writer)
                            .and_then(|v| v.first().copied())
                    } else {
                        Some(reader)
                    };
                    if let (Some(to), Some(addr)) =
                        (to, self.remotes.get(&s.writer.participant).map(|p| p.addr))
                    {
                        let mut dg = Vec::new();
                        if DatagramBuilder::new(&mut dg, self.header())
                            .push(&Submessage::KeyRequest(tether_wire::KeyRequestRepr {
                                reader: to,
                                writer: s.writer.entity,
                                epoch,
                            }))
                            .is_ok()
                        {
                            self.push_transmit(addr, Bytes::from(dg));
                        }
                    }
                }
                None
            }
        }
    }

    /// Pairwise mode ([`Security::with_pairwise`](crate::Security::with_pairwise)): seals a
    /// datagram once more for the one peer it goes to, if both sides have verified each other
    /// (`docs/wire.md#sealed`). Otherwise (the normal case) returns it as it is.
    pub(crate) fn seal_for_peer(&mut self, t: Transmit) -> Transmit {
        let Some(sec) = self.cfg.security.as_deref().filter(|s| s.pairwise) else {
            return t;
        };
        let Some(&pid) = self.remote_at.get(&t.dest) else {
            return t;
        };
        let me = self.cfg.participant;
        let Some(auth) = self.remotes.get_mut(&pid).and_then(|r| r.auth.as_mut()) else {
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
        let inner = head.len() - HEADER_LEN + t.body.len();
        let body_len = SEALED_FIXED_LEN + inner + tether_crypto::TAG_LEN;
        let Ok(body_len16) = u16::try_from(body_len) else {
            return t; // never: datagrams are at most 65,000 bytes
        };
        *counter += 1;
        let c = *counter;
        // header ‖ SEALED(to, counter, seal(submessages) ‖ tag); AAD: everything before the
        // sealed bytes.
        let aad_len = HEADER_LEN + SUBMESSAGE_HEADER_LEN + SEALED_FIXED_LEN;
        let mut v = Vec::with_capacity(aad_len + inner + tether_crypto::TAG_LEN);
        v.extend_from_slice(&head[..HEADER_LEN]);
        v.push(SubmessageKind::Sealed as u8);
        v.push(0);
        v.extend_from_slice(&body_len16.to_le_bytes());
        v.extend_from_slice(&pid.0.to_le_bytes());
        v.extend_from_slice(&c.to_le_bytes());
        v.extend_from_slice(&head[HEADER_LEN..]);
        v.extend_from_slice(&t.body);
        let (aad, rest) = v.split_at_mut(aad_len);
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
        }
    }

    /// Opens a datagram sealed for us alone by `pid` (pairwise mode) and handles what it
    /// held. Anything that does not open is dropped and counted.
    pub(crate) fn on_sealed(
        &mut self,
        now: Instant,
        from: SocketAddr,
        pid: ParticipantId,
        datagram: &Bytes,
        x: tether_wire::SealedRepr<'_>,
    ) {
        let me = self.cfg.participant;
        let Some(sec) = self.cfg.security.as_deref() else {
            self.stats.pair_open_failed += 1;
            return;
        };
        let Some(auth) = self.remotes.get_mut(&pid).and_then(|r| r.auth.as_mut()) else {
            self.stats.pair_open_failed += 1;
            return;
        };
        let Some(cred) = auth.credential.as_ref().filter(|_| x.to == me) else {
            self.stats.pair_open_failed += 1;
            return;
        };
        if auth.pair_rx.is_none() {
            auth.pair_rx = tether_crypto::pair_key(
                &sec.identity,
                &cred.kx_public,
                &sec.ca_public,
                pid.0,
                me.0,
                sec.suite,
            )
            .map(|k| (k, tether_crypto::ReplayWindow::new()));
        }
        let Some((key, window)) = auth.pair_rx.as_mut() else {
            self.stats.pair_open_failed += 1;
            return;
        };
        if !window.check(x.counter) {
            self.stats.replayed += 1;
            return;
        }
        let aad_len = HEADER_LEN + SUBMESSAGE_HEADER_LEN + SEALED_FIXED_LEN;
        let mut plain = BytesMut::with_capacity(HEADER_LEN + x.sealed.len());
        plain.extend_from_slice(&datagram[..HEADER_LEN]);
        plain.extend_from_slice(x.sealed);
        let n = match key.open_in_place(x.counter, &datagram[..aad_len], &mut plain[HEADER_LEN..]) {
            Ok(p) => p.len(),
            Err(_) => {
                self.stats.pair_open_failed += 1;
                return;
            }
        };
        window.accept(x.counter);
        self.stats.datagrams_pair_opened += 1;
        plain.truncate(HEADER_LEN + n);
        self.process_datagram(now, from, &plain.freeze(), false);
    }
}
