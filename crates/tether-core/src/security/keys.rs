//! Sender keys: epochs, re-keying on departures, wrapping keys for readers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_wire::{DatagramBuilder, EntityId, ParticipantId, Submessage};

use crate::event::{Event, Guid};

use crate::participant::{Participant, after};
use crate::writer::state::Writer;

/// How long writers that lost a reader wait for others to leave before moving to a new
/// epoch (they move before their next seal in any case).
pub(crate) const REKEY_DELAY: Duration = Duration::from_millis(5);

/// Sender keys a reader keeps per remote writer: its newest epochs. A writer that re-keys
/// without end (or years of readers coming and going) cannot grow every reader's memory; a
/// sample sealed that many epochs ago and still unrepaired is counted as `no_key`.
pub const KEPT_EPOCHS: usize = 8;

/// Sender keys of remote writers, and when writers re-key.
#[derive(Debug, Default)]
pub(crate) struct KeyStore {
    /// Sender keys of remote writers, by writer and epoch (secure realms). Boxed: a key
    /// holds two key schedules (over a kilobyte), and inline they spread a map node over
    /// several pages that every opened sample's lookup then walks cold.
    pub(crate) keys: BTreeMap<(Guid, u32), Box<tether_crypto::SenderKey>>,
    /// When we last asked a remote writer for a key.
    pub(crate) key_asked: BTreeMap<Guid, Instant>,
    /// When writers that lost a reader move to a new epoch at the latest (they do before
    /// their next seal in any case). Departures until then share one re-key.
    pub(crate) rekey_at: Option<Instant>,
    /// Some writer lost a reader and `rekey_at` is still to be set.
    pub(crate) rekey_wanted: bool,
    /// Our control key (secure realms; made at first use).
    pub(crate) control: Option<crate::security::control::ControlTx>,
    /// Peer credentials whose CA signature verified (`Security::check`).
    pub(crate) verified_credentials: tether_crypto::VerifiedCredentials,
    /// Where SEALED_BATCHes are opened: one allocation serves many batches, each handed on
    /// as a slice of it (and its samples as slices of that).
    pub(crate) opened_buf: bytes::BytesMut,
    /// The SEALED_BATCH of the datagram in hand, opened by the gate before anything in the
    /// datagram was acted on.
    pub(crate) gate_opened: Option<crate::security::gate::OpenedBatch>,
    /// Sealed samples of matched writers that came before the key for their epoch (the
    /// KEY goes by unicast, samples often by multicast, and either may overtake the
    /// other): opened when the key comes, dropped after [`HELD_FOR_KEY_TIME`].
    pub(crate) held: crate::security::gate::HeldForKey,
    /// The first sequence numbers of the SEALED_BATCHes taken from each remote writer, per
    /// epoch (their replay window: a sealed datagram has no AUTH_TAG counter). Kept for
    /// exactly the keys kept.
    pub(crate) batch_windows: BTreeMap<(Guid, u32), tether_crypto::BatchWindow>,
    /// Where the heads of sealed datagrams are built (no allocation per datagram).
    pub(crate) seal_scratch: Vec<u8>,
    /// Our endpoints' topic names and types sealed for the realm's members
    /// (`docs/wire.md#endpoint`): once each, when the endpoint is made, so that every
    /// announcement of it carries the same bytes (a receiver opens it once).
    pub(crate) descriptions: BTreeMap<EntityId, Vec<u8>>,
}

/// Bytes of sealed samples a participant holds, for all writers together, while their keys
/// are on their way (`docs/wire.md#key`); a quarter of it for any one writer, and only for
/// its first key or the epoch after its newest. Beyond it they are dropped (`no_key`), and a
/// reliable writer repairs them.
pub const HELD_FOR_KEY_BYTES: usize = 4 << 20;

/// How long a sealed sample waits for its key before it is dropped (`no_key`).
pub const HELD_FOR_KEY_TIME: Duration = Duration::from_millis(500);

/// Whether writer `w` must move to a new epoch before it seals again: a reader left it, or
/// its key has sealed as much as its suite (or the realm's setting) allows.
pub(crate) fn rekey_needed(sec: Option<&crate::Security>, w: &Writer) -> bool {
    w.rekey_due
        || w.key.as_ref().is_some_and(|k| {
            let limit = sec.map_or(k.suite().usage_limit(), |s| s.limit(k.suite()));
            w.seals >= limit
        })
}

impl Participant {
    /// Remote writers' sender keys held (all writers and epochs; at most [`KEPT_EPOCHS`]
    /// per writer).
    pub fn sender_keys_held(&self) -> usize {
        self.keystore.keys.len()
    }

    /// Moves every writer that lost a reader to a new epoch now, and stops the timer.
    pub(crate) fn rekey_due_writers(&mut self) {
        self.keystore.rekey_at = None;
        let due: Vec<EntityId> = self
            .writers
            .values()
            .filter(|w| w.rekey_due)
            .map(|w| w.id)
            .collect();
        for w in due {
            self.rekey(w);
        }
    }

    /// After readers left: the writers that lost one move to a new epoch within
    /// `REKEY_DELAY` (or before their next seal).
    pub(crate) fn schedule_rekeys(&mut self, now: Instant) {
        if std::mem::take(&mut self.keystore.rekey_wanted) && self.keystore.rekey_at.is_none() {
            self.keystore.rekey_at = Some(after(now, REKEY_DELAY));
        }
    }

    /// Moves `writer` to a new epoch: a fresh key, wrapped for every reader still matched.
    /// The old key never seals again (samples already sealed under it stay as they are, so
    /// their repairs still open for the readers that hold it).
    pub(crate) fn rekey(&mut self, writer: EntityId) {
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        w.rekey_due = false;
        let Some(old) = w.key.as_ref() else { return };
        let next = tether_crypto::SenderKey::generate(
            old.suite(),
            old.epoch().wrapping_add(1).max(1),
            self.random.get(),
        );
        let epoch = next.epoch();
        w.key = Some(std::sync::Arc::new(next));
        w.seals = 0;
        self.stats.rekeys += 1;
        self.events.push_back(Event::Rekeyed {
            writer: Some(writer),
            epoch,
        });
        let readers: Vec<Guid> = w
            .readers
            .iter()
            .filter(|(_, r)| !r.local)
            .map(|(g, _)| *g)
            .collect();
        for r in readers {
            self.send_key(writer, r);
        }
    }

    /// Sends `writer`'s current key, wrapped for remote `reader` (a matched, verified peer).
    pub(crate) fn send_key(&mut self, writer: EntityId, reader: Guid) {
        let me = self.cfg.participant;
        let Some(sec) = self.cfg.security.clone() else {
            return;
        };
        let Some(key) = self.writers.get(&writer).and_then(|w| w.key.clone()) else {
            return;
        };
        let Some(rp) = self.peers.remotes.get(&reader.participant) else {
            return;
        };
        let Some(kx) = rp
            .auth
            .as_ref()
            .filter(|a| a.verified)
            .and_then(|a| a.credential.as_ref())
            .map(|c| c.kx_public)
        else {
            return;
        };
        let addr = rp.addr;
        let cached = self
            .writers
            .get(&writer)
            .and_then(|w| w.readers.get(&reader))
            .and_then(|rp| rp.wrapped.as_ref())
            .filter(|(e, _)| *e == key.epoch())
            .map(|(_, w)| w.clone());
        let wrapped = match cached {
            Some(w) => w,
            None => {
                let ctx = sec.wrap_context(
                    &tether_crypto::sample::endpoint_id(me.0, writer.0),
                    &tether_crypto::sample::endpoint_id(reader.participant.0, reader.entity.0),
                    key.epoch(),
                    key.suite(),
                );
                let Some(w) = tether_crypto::wrap_key(
                    &sec.identity,
                    &kx,
                    &ctx,
                    key.key_bytes(),
                    self.random.get(),
                ) else {
                    return;
                };
                self.stats.keys_wrapped += 1;
                if let Some(rp) = self
                    .writers
                    .get_mut(&writer)
                    .and_then(|w| w.readers.get_mut(&reader))
                {
                    rp.wrapped = Some((key.epoch(), w.clone()));
                }
                w
            }
        };
        let mut dg = Vec::new();
        if DatagramBuilder::new(&mut dg, self.header())
            .push(&Submessage::Key(tether_wire::KeyRepr {
                writer,
                reader: reader.entity,
                epoch: key.epoch(),
                suite: key.suite().code(),
                wrapped: &wrapped,
            }))
            .is_ok()
        {
            self.push_transmit(addr, Bytes::from(dg));
        }
    }

    pub(crate) fn on_key(&mut self, now: Instant, pid: ParticipantId, k: tether_wire::KeyRepr<'_>) {
        let me = self.cfg.participant;
        let Some(sec) = self.cfg.security.clone() else {
            return;
        };
        let g = Guid {
            participant: pid,
            entity: k.writer,
        };
        // Only for a local reader matched with that writer, from a verified peer.
        let matched = self
            .matches
            .remote_writer_readers
            .get(&g)
            .is_some_and(|v| v.contains(&k.reader));
        let kx = self.verified_credential(pid).map(|c| c.kx_public);
        let (Some(kx), true, Some(suite)) = (kx, matched, tether_crypto::Suite::from_code(k.suite))
        else {
            self.stats.unmatched_writer += 1;
            return;
        };
        let ctx = sec.wrap_context(
            &tether_crypto::sample::endpoint_id(pid.0, k.writer.0),
            &tether_crypto::sample::endpoint_id(me.0, k.reader.0),
            k.epoch,
            suite,
        );
        match tether_crypto::unwrap_key(&sec.identity, &kx, &ctx, k.wrapped)
            .and_then(|raw| tether_crypto::SenderKey::from_bytes(suite, k.epoch, &raw).ok())
        {
            Some(key) => {
                self.stats.keys_received += 1;
                self.keystore.keys.insert((g, k.epoch), Box::new(key));
                let held: Vec<u32> = self
                    .keystore
                    .keys
                    .range((g, 0)..=(g, u32::MAX))
                    .map(|((_, e), _)| *e)
                    .collect();
                for e in &held[..held.len().saturating_sub(KEPT_EPOCHS)] {
                    self.keystore.keys.remove(&(g, *e));
                    self.keystore.batch_windows.remove(&(g, *e));
                }
                // What came before it opens now.
                self.release_held(now, g, k.epoch);
            }
            None => self.stats.open_failed += 1,
        }
    }

    pub(crate) fn on_key_request(&mut self, pid: ParticipantId, k: tether_wire::KeyRequestRepr) {
        let rg = Guid {
            participant: pid,
            entity: k.reader,
        };
        let ok = self.writers.get(&k.writer).is_some_and(|w| {
            w.readers.contains_key(&rg) && w.key.as_ref().is_some_and(|key| key.epoch() == k.epoch)
        });
        if ok {
            self.send_key(k.writer, rg);
        } else {
            self.stats.unmatched_reader += 1;
        }
    }
}
