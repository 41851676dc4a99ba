//! The gate: every received datagram and sample passes here before any other module sees it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tether_wire::{
    BatchRepr, Datagram, DatagramBuilder, EntityId, HEADER_LEN, ParticipantId, SEALED_FIXED_LEN,
    SUBMESSAGE_HEADER_LEN, Submessage,
};

use crate::event::{Guid, Sample};
use crate::security::control::Gate;
use crate::writer::state::Writer;

use crate::participant::Participant;

/// A received datagram the gate let in: well formed, of this domain, from another
/// participant. The dispatcher takes only these, and only the gate makes them (control-plane
/// authentication belongs here, before any other module acts on a submessage).
pub(crate) struct Admitted<'a>(Datagram<'a>);

impl<'a> Admitted<'a> {
    /// The datagram.
    pub(crate) fn datagram(&self) -> &Datagram<'a> {
        &self.0
    }
}

/// A sample the gate let through: in a secure realm opened and verified under its writer's
/// keys; with security off, taken as it came; or written by this participant itself. Only
/// this module makes one, so delivery (the reader's cache) cannot take anything else.
#[derive(Debug, Clone)]
pub(crate) struct Opened(Sample);

impl Opened {
    /// The sample.
    pub(crate) fn sample(&self) -> &Sample {
        &self.0
    }

    /// The sample, for the reader's cache.
    pub(crate) fn into_sample(self) -> Sample {
        self.0
    }
}

/// Proof that a batch's samples need no opening: this participant is in no secure realm,
/// or the gate opened the SEALED_BATCH they came in (the batch path takes many at once with
/// one check).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clear(());

impl Clear {
    /// `s`, let through.
    pub(crate) fn pass(self, s: Sample) -> Opened {
        Opened(s)
    }
}

/// A SEALED_BATCH the gate opened (`docs/wire.md#sealed_batch`): its entries, in clear,
/// authenticated under the writer's batch key. Only the gate makes one.
#[derive(Debug)]
pub(crate) struct OpenedBatch {
    writer: Guid,
    first_seq: u64,
    count: u32,
    /// The entries, or `None` when they were opened in the datagram itself, from `at` on.
    entries: Option<Bytes>,
    at: usize,
}

impl OpenedBatch {
    /// Its entries, as slices of `datagram` if it was opened there.
    pub(crate) fn entries(&self, datagram: &Bytes) -> Bytes {
        match &self.entries {
            Some(e) => e.clone(),
            None => datagram.slice(self.at.min(datagram.len())..),
        }
    }
}

/// A datagram for [`Participant::authenticate_sealed`]: shared (opened into a buffer of
/// ours) or the driver's own (opened where it lies).
pub(crate) enum SealedIn<'a> {
    /// Received as shared bytes.
    Shared(&'a [u8]),
    /// Owned by the driver, handed over mutable.
    Owned(&'a mut [u8]),
}

impl SealedIn<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            SealedIn::Shared(d) => d,
            SealedIn::Owned(d) => d,
        }
    }
}

/// Sealed samples waiting for their writer's key (see `KeyStore::held`), per writer and
/// epoch, oldest first, with the bytes they hold in all.
#[derive(Debug, Default)]
pub(crate) struct HeldForKey {
    waiting: std::collections::BTreeMap<(Guid, u32), std::collections::VecDeque<Held>>,
    /// Bytes of unverified datagrams held (within `HELD_FOR_KEY_BYTES`), and of samples
    /// (within the reassembly budget).
    bytes: usize,
    sample_bytes: usize,
    /// Per writer, counted as items come and go (never summed per arrival).
    per_writer: std::collections::BTreeMap<Guid, Tally>,
}

/// What one writer's held items take.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    /// Datagrams whose seal could not be checked: bytes and how many.
    bytes: usize,
    items: usize,
    /// Samples that came in authenticated datagrams: bytes and how many.
    sample_bytes: usize,
    samples: usize,
}

impl HeldForKey {
    /// Counts item `h` in (`more`) or out for `writer`.
    fn count(&mut self, writer: Guid, h: &Held, more: bool) {
        let len = h.len();
        let sample = matches!(h.what, HeldKind::Sample { .. });
        let e = self.per_writer.entry(writer).or_default();
        match (sample, more) {
            (true, true) => {
                self.sample_bytes += len;
                e.sample_bytes += len;
                e.samples += 1;
            }
            (true, false) => {
                self.sample_bytes -= len;
                e.sample_bytes -= len;
                e.samples -= 1;
            }
            (false, true) => {
                self.bytes += len;
                e.bytes += len;
                e.items += 1;
            }
            (false, false) => {
                self.bytes -= len;
                e.bytes -= len;
                e.items -= 1;
            }
        }
        if e.items == 0 && e.samples == 0 {
            self.per_writer.remove(&writer);
        }
    }
}

/// Most items (samples or datagrams) held for one writer's key.
const HELD_ITEMS_PER_WRITER: usize = 1024;

/// One sealed sample, or one sealed batch, that came before its key.
#[derive(Debug)]
struct Held {
    at: Instant,
    reader: EntityId,
    what: HeldKind,
}

#[derive(Debug)]
enum HeldKind {
    Sample {
        s: Sample,
        batch_signed: bool,
    },
    /// A datagram that ends with a SEALED_BATCH: it is authenticated by that batch, so
    /// nothing in it is acted on before the key comes.
    Datagram {
        from: SocketAddr,
        bytes: Bytes,
        /// As received (not what a SEALED datagram opened to).
        outer: bool,
    },
}

impl Held {
    fn len(&self) -> usize {
        match &self.what {
            HeldKind::Sample { s, .. } => s.payload.len(),
            HeldKind::Datagram { bytes, .. } => bytes.len(),
        }
    }

    /// The samples it holds.
    fn samples(&self) -> u64 {
        match &self.what {
            HeldKind::Sample { .. } => 1,
            HeldKind::Datagram { bytes, .. } => sealed_batch_count(bytes),
        }
    }
}

/// The number of samples in the SEALED_BATCH that ends `datagram` (0 if none).
fn sealed_batch_count(datagram: &[u8]) -> u64 {
    tether_wire::sealed_batch_ciphertext(datagram, datagram.len())
        .and_then(|ct| {
            tether_wire::SealedBatchRepr::from_body(
                &datagram[ct - tether_wire::SEALED_BATCH_FIXED_LEN..],
            )
            .ok()
        })
        .map_or(0, |x| x.count as u64)
}

/// Opened batches smaller than this get a buffer of their own, larger ones a slice of a
/// shared chunk (see `authenticate_sealed`).
const OPENED_SMALL: usize = 4096;

/// Where SEALED_BATCHes are opened: a fresh allocation of this many bytes when the last
/// one is still held (by samples not yet taken), so that one serves many batches.
const OPENED_CHUNK: usize = 256 * 1024;

/// A local writer's history for a late-joining local reader (transient local): in a secure
/// realm the history holds sealed samples, which our own readers get opened.
pub(crate) fn own_history(me: ParticipantId, w: &Writer) -> Vec<Opened> {
    let key = w.key.clone();
    let secure = w.prot.is_some();
    let wid = tether_crypto::sample::endpoint_id(me.0, w.id.0);
    let wg = Guid {
        participant: me,
        entity: w.id,
    };
    w.history
        .iter()
        .filter_map(|c| {
            let payload = if secure && !c.clear {
                let parts = tether_crypto::sample::parts(&c.payload)?;
                match (parts.prot.encrypt, key.as_deref()) {
                    (true, Some(k)) => Bytes::from(tether_crypto::sample::open(
                        k,
                        &wid,
                        c.seq,
                        c.timestamp_ns,
                        parts.prot,
                        parts.body,
                    )?),
                    (true, None) => return None,
                    (false, _) => c.payload.slice_ref(parts.body),
                }
            } else {
                c.payload.clone()
            };
            Some(Opened(Sample {
                writer: wg,
                seq: c.seq,
                timestamp_ns: c.timestamp_ns,
                payload,
            }))
        })
        .collect()
}

impl Participant {
    /// The gate every received datagram passes before any other module sees it: malformed
    /// datagrams and other domains are counted and dropped, our own multicast ignored.
    pub(crate) fn admit<'a>(&mut self, datagram: &'a Bytes) -> Option<Admitted<'a>> {
        let d = match Datagram::parse(datagram) {
            Ok(d) => d,
            Err(_) => {
                self.stats.malformed += 1;
                return None;
            }
        };
        let h = d.header();
        if h.domain != self.cfg.domain {
            self.stats.wrong_domain += 1;
            return None;
        }
        if h.participant == self.cfg.participant {
            return None; // our own multicast, looped back
        }
        Some(Admitted(d))
    }

    /// With security off, the proof that remote samples need no opening.
    pub(crate) fn plain(&self) -> Option<Clear> {
        self.cfg.security.is_none().then_some(Clear(()))
    }

    /// The gate's check of a datagram of verified peer `pid` that ends with a SEALED_BATCH
    /// whose ciphertext starts at `ct` (`docs/wire.md#sealed_batch`): the batch must be new (its first
    /// sequence number in the writer's window for the epoch) and open under the writer's
    /// batch key with every byte before its tag as associated data. Then the datagram
    /// counts (only its writer's heartbeats besides the batch: [`Origin::Sealed`]), and the
    /// opened entries wait in `keystore.gate_opened` for the dispatcher. A
    /// datagram of a writer we read whose key we do not hold yet is held until it comes.
    pub(crate) fn authenticate_sealed(
        &mut self,
        pid: ParticipantId,
        from: SocketAddr,
        input: SealedIn<'_>,
        ct: usize,
    ) -> Gate {
        let body = ct - tether_wire::SEALED_BATCH_FIXED_LEN;
        let tag_at = body + tether_wire::SEALED_BATCH_TAG_AT;
        let (writer, first_seq, count, epoch, tag) = {
            let datagram = input.bytes();
            let Ok(x) = tether_wire::SealedBatchRepr::from_body(&datagram[body..]) else {
                self.stats.malformed += 1;
                return Gate::Drop;
            };
            (x.writer, x.first_seq, x.count, x.epoch, *x.tag)
        };
        let g = Guid {
            participant: pid,
            entity: writer,
        };
        if !self.matches.remote_writer_readers.contains_key(&g) {
            // Not a writer we read: nothing in it is for us, and we could not check it.
            self.stats.unmatched_writer += 1;
            return Gate::Drop;
        }
        if !self.keystore.keys.contains_key(&(g, epoch)) {
            return Gate::Hold(g, epoch);
        }
        let window = self.keystore.batch_windows.entry((g, epoch)).or_default();
        if !window.check(first_seq) {
            self.stats.replayed += 1;
            let now = self.clock;
            if window.seen(first_seq) && self.check_copy(now, pid, from) {
                let Some(k) = self.keystore.keys.get(&(g, epoch)) else {
                    return Gate::Drop;
                };
                // A copy (checked below) of a datagram taken already: its address is alive.
                let datagram = input.bytes();
                let mut scratch = vec![0u8; datagram.len() - ct];
                if k.open_batch_into(
                    first_seq,
                    &datagram[..tag_at],
                    &datagram[ct..],
                    &tag,
                    &mut scratch,
                )
                .is_ok()
                {
                    self.heard_copy(now, pid, from);
                }
            }
            return Gate::Drop;
        }
        let Some(k) = self.keystore.keys.get(&(g, epoch)) else {
            return Gate::Drop;
        };
        let entries = match input {
            // Where it lies: the driver owns the datagram (no copy, no buffer to zero), and
            // its samples become slices of it, as a plain datagram's are.
            SealedIn::Owned(d) => {
                let (head, ciphertext) = d.split_at_mut(ct);
                k.open_batch_in_place(first_seq, &head[..tag_at], ciphertext, &tag)
                    .is_ok()
                    .then_some(None)
            }
            SealedIn::Shared(d) => {
                let n = d.len() - ct;
                let buf = &mut self.keystore.opened_buf;
                if n >= OPENED_SMALL {
                    if buf.capacity() < n {
                        buf.reserve(n.max(OPENED_CHUNK));
                    }
                } else {
                    // A few samples: a buffer of their own, so that one the application keeps
                    // does not keep a whole chunk of others alive.
                    *buf = BytesMut::with_capacity(n);
                }
                buf.resize(n, 0);
                if k.open_batch_into(first_seq, &d[..tag_at], &d[ct..], &tag, buf)
                    .is_ok()
                {
                    Some(Some(buf.split().freeze()))
                } else {
                    buf.clear();
                    None
                }
            }
        };
        let Some(entries) = entries else {
            // Altered on the way, or forged: nothing in it counts.
            self.stats.open_failed += 1;
            return Gate::Drop;
        };
        if let Some(w) = self.keystore.batch_windows.get_mut(&(g, epoch)) {
            w.accept(first_seq);
        }
        self.keystore.gate_opened = Some(OpenedBatch {
            writer: g,
            first_seq,
            count,
            entries,
            at: ct,
        });
        self.stats.datagrams_authenticated += 1;
        // (What else the datagram holds the dispatcher refuses: only heartbeats of the
        // writer may come with its SEALED_BATCH.)
        Gate::Act(crate::security::control::Origin::Sealed(writer))
    }

    /// In a secure realm, a datagram the driver owns that ends with a SEALED_BATCH from a
    /// peer we verified: checked and opened where it lies ([`authenticate_sealed`]).
    /// `None` for any other datagram (the gate checks it as usual).
    pub(crate) fn open_in_place(&mut self, from: SocketAddr, datagram: &mut [u8]) -> Option<Gate> {
        self.cfg.security.as_ref()?;
        let ct = tether_wire::sealed_batch_ciphertext(datagram, datagram.len())?;
        let h = tether_wire::Datagram::parse(datagram).ok()?.header();
        if h.domain != self.cfg.domain || h.participant == self.cfg.participant {
            return None;
        }
        let pid = h.participant;
        let verified = self
            .peers
            .remotes
            .get(&pid)
            .and_then(|p| p.auth.as_ref())
            .is_some_and(|a| a.verified);
        if !verified {
            return None;
        }
        self.keystore.gate_opened = None;
        Some(self.authenticate_sealed(pid, from, SealedIn::Owned(datagram), ct))
    }

    /// Keeps a datagram that ends with a SEALED_BATCH of `writer` under `epoch` until that
    /// key comes (`hold_for_key`), and asks for it.
    pub(crate) fn hold_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &Bytes,
        outer: bool,
        writer: Guid,
        epoch: u32,
    ) {
        let held = Held {
            at: now,
            reader: EntityId::ALL,
            what: HeldKind::Datagram {
                from,
                // A copy: a slice would keep the whole receive buffer it came in alive,
                // and the budget counts what it holds.
                bytes: Bytes::copy_from_slice(datagram),
                outer,
            },
        };
        self.hold_for_key(writer, epoch, held, datagram.len());
        self.ask_for_key(now, writer, EntityId::ALL, epoch);
    }

    /// A SEALED_BATCH of writer `g` (`docs/wire.md#sealed_batch`): its samples, if the gate
    /// opened it (`opened`); otherwise counted by why not, and the key asked for if that is
    /// what is missing.
    pub(crate) fn on_sealed_batch(
        &mut self,
        now: Instant,
        g: Guid,
        x: tether_wire::SealedBatchRepr<'_>,
        source: &Bytes,
        opened: Option<OpenedBatch>,
    ) {
        let count = x.count as u64;
        if self.cfg.security.is_none() {
            // No key could open it here: a plain session never matches a secure writer.
            self.stats.under_protected += count;
            return;
        }
        let Some(o) =
            opened.filter(|o| o.writer == g && o.first_seq == x.first_seq && o.count == x.count)
        else {
            // The gate opens the SEALED_BATCH that ends a datagram; one anywhere else (in a
            // datagram with an AUTH_TAG, say) is not the format's.
            self.stats.malformed += 1;
            return;
        };
        // A reader whose policy asks for signatures takes no sealed batch (they carry none).
        if self.required_protection(g, x.reader).sign {
            self.stats.under_protected += count;
            return;
        }
        let entries = o.entries(source);
        let Ok(b) = tether_wire::BatchRepr::from_entries(
            x.writer,
            x.reader,
            x.first_seq,
            x.count,
            &entries,
        ) else {
            // Opened, so sealed by a holder of the writer's key, but not entries.
            self.stats.open_failed += count;
            return;
        };
        self.stats.batches_opened += 1;
        self.stats.samples_opened += count;
        self.deliver_batch(now, g, b, &entries, Clear(()));
    }

    /// A sample of this participant's own writer, for its own readers.
    pub(crate) fn own_sample(
        &self,
        writer: EntityId,
        seq: u64,
        timestamp_ns: u64,
        payload: Bytes,
    ) -> Opened {
        Opened(Sample {
            writer: Guid {
                participant: self.cfg.participant,
                entity: writer,
            },
            seq,
            timestamp_ns,
            payload,
        })
    }

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
            self.matches
                .remote_writer_readers
                .get(&writer)
                .is_some_and(|v| !v.is_empty() && v.iter().all(holds))
        } else {
            holds(&reader)
        }
    }

    pub(crate) fn unseal(&mut self, now: Instant, reader: EntityId, s: Sample) -> Option<Opened> {
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
    ) -> Option<Opened> {
        if self.cfg.security.is_none() {
            return Some(Opened(s));
        }
        // Only writers we are matched with get their samples opened (and keys asked
        // for): forged writers cost a lookup, never memory.
        if !self.matches.remote_writer_readers.contains_key(&s.writer) {
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
        let required = self.required_protection(s.writer, reader);
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
            return Some(Opened(Sample {
                payload: plain,
                ..s
            }));
        }
        let Some(epoch) = tether_crypto::sample::sealed_epoch(parts.body) else {
            self.stats.open_failed += 1;
            return None;
        };
        match self.keystore.keys.get(&(s.writer, epoch)) {
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
                        Some(Opened(Sample {
                            payload: Bytes::from(plain),
                            ..s
                        }))
                    }
                    None => {
                        self.stats.open_failed += 1;
                        None
                    }
                }
            }
            None => {
                let (writer, n) = (s.writer, s.payload.len());
                let held = Held {
                    at: now,
                    reader,
                    what: HeldKind::Sample { s, batch_signed },
                };
                self.hold_for_key(writer, epoch, held, n);
                self.ask_for_key(now, writer, reader, epoch);
                None
            }
        }
    }

    /// Keeps a sealed sample (or batch) of matched writer `writer` until its key for `epoch`
    /// comes, within [`HELD_FOR_KEY_BYTES`](crate::security::keys::HELD_FOR_KEY_BYTES) for
    /// all writers; beyond it, drops it (`no_key`).
    fn hold_for_key(&mut self, writer: Guid, epoch: u32, held: Held, len: usize) {
        // Only what a key on its way explains: the writer's first key, or the epoch after
        // the newest we hold (a re-key). An epoch further ahead is no key's, and what anyone
        // can send under a writer's id must not take the room a genuine sample needs.
        let newest = self
            .keystore
            .keys
            .range((writer, 0)..=(writer, u32::MAX))
            .next_back()
            .map(|((_, e), _)| *e);
        let plausible = newest.is_none_or(|n| epoch == n.wrapping_add(1));
        let (reader_budget, writer_budget) = (
            self.cfg.max_reassembly_bytes,
            self.cfg.max_reassembly_bytes_per_writer,
        );
        let h = &mut self.keystore.held;
        let t = h.per_writer.get(&writer).copied().unwrap_or_default();
        let room = match held.what {
            // A sample that came in an authenticated datagram (its writer's, or a member's
            // acting for it): what reassembly would have kept of it, within the reassembly
            // budgets (a 1 MiB sample whose KEY was lost is held, not re-sent whole).
            HeldKind::Sample { .. } => {
                h.sample_bytes + len <= reader_budget && t.sample_bytes + len <= writer_budget
            }
            // A datagram whose seal could not be checked (anyone can send one under a
            // writer's id): 4 MiB for all writers, a quarter for one (but one item larger
            // than that), at most 1,024 per writer.
            HeldKind::Datagram { .. } => {
                h.bytes + len <= crate::security::keys::HELD_FOR_KEY_BYTES
                    && (t.items == 0
                        || t.bytes + len <= crate::security::keys::HELD_FOR_KEY_BYTES / 4)
                    && t.items < HELD_ITEMS_PER_WRITER
            }
        };
        if !plausible || !room {
            self.stats.no_key += held.samples();
            return;
        }
        h.count(writer, &held, true);
        self.stats.held_for_key += held.samples();
        h.waiting
            .entry((writer, epoch))
            .or_default()
            .push_back(held);
    }

    /// The key of `writer` for `epoch` came: what waited for it is opened and delivered.
    pub(crate) fn release_held(&mut self, now: Instant, writer: Guid, epoch: u32) {
        let Some(q) = self.keystore.held.waiting.remove(&(writer, epoch)) else {
            return;
        };
        for held in q {
            self.keystore.held.count(writer, &held, false);
            match held.what {
                HeldKind::Sample { s, batch_signed } => {
                    if let Some(s) = self.unseal_in(now, held.reader, s, batch_signed) {
                        self.on_remote_data(now, held.reader, s);
                    }
                }
                HeldKind::Datagram { from, bytes, outer } => {
                    self.process_datagram(now, from, &bytes, outer);
                }
            }
        }
    }

    /// Drops sealed samples that waited for their key longer than
    /// [`HELD_FOR_KEY_TIME`](crate::security::keys::HELD_FOR_KEY_TIME), or whose writer is
    /// no longer matched (`no_key`).
    pub(crate) fn expire_held(&mut self, now: Instant) {
        if self.keystore.held.waiting.is_empty() {
            return;
        }
        let limit = crate::security::keys::HELD_FOR_KEY_TIME;
        let matched = &self.matches.remote_writer_readers;
        let h = &mut self.keystore.held;
        let mut dropped = 0;
        let mut gone_items: Vec<(Guid, Held)> = Vec::new();
        h.waiting.retain(|(g, _), q| {
            let gone = !matched.contains_key(g);
            while let Some(f) = q.front() {
                if !gone && now.saturating_duration_since(f.at) < limit {
                    break;
                }
                dropped += f.samples();
                if let Some(f) = q.pop_front() {
                    gone_items.push((*g, f));
                }
            }
            !q.is_empty()
        });
        for (g, f) in gone_items {
            h.count(g, &f, false);
        }
        self.stats.no_key += dropped;
    }

    /// The local reader a sample of `writer` addressed to `reader` speaks for: `reader`
    /// itself, or the first local reader matched with the writer for samples addressed to all.
    fn addressee(&self, writer: Guid, reader: EntityId) -> Option<EntityId> {
        if reader == EntityId::ALL {
            self.matches
                .remote_writer_readers
                .get(&writer)
                .and_then(|v| v.first().copied())
        } else {
            Some(reader)
        }
    }

    /// The protection this session's policy asks of samples of `writer` for `reader` (the
    /// first local reader matched with it, for samples addressed to all).
    fn required_protection(&self, writer: Guid, reader: EntityId) -> tether_crypto::Protection {
        match (
            self.addressee(writer, reader)
                .and_then(|r| self.readers.get(&r)),
            &self.cfg.security,
        ) {
            (Some(r), Some(sec)) => sec.protection_for(&r.info.topic),
            _ => tether_crypto::Protection {
                encrypt: true,
                sign: false,
            },
        }
    }

    /// Asks `writer` for its key of `epoch` (at most every 50 ms per writer).
    fn ask_for_key(&mut self, now: Instant, writer: Guid, reader: EntityId, epoch: u32) {
        let asked = self.keystore.key_asked.get(&writer).copied();
        if asked.is_some_and(|t| now.saturating_duration_since(t) < Duration::from_millis(50)) {
            return;
        }
        self.keystore.key_asked.insert(writer, now);
        let to = self.addressee(writer, reader);
        let (Some(to), Some(addr)) = (
            to,
            self.peers.remotes.get(&writer.participant).map(|p| p.addr),
        ) else {
            return;
        };
        let mut dg = Vec::new();
        if DatagramBuilder::new(&mut dg, self.header())
            .push(&Submessage::KeyRequest(tether_wire::KeyRequestRepr {
                reader: to,
                writer: writer.entity,
                epoch,
            }))
            .is_ok()
        {
            self.push_transmit(addr, Bytes::from(dg));
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
        let Some(auth) = self
            .peers
            .remotes
            .get_mut(&pid)
            .and_then(|r| r.auth.as_mut())
        else {
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
