//! The participant: one engine per session.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tether_wire::{
    BATCH_ENTRY_OVERHEAD, BATCH_FIXED_LEN, BatchRepr, DATA_FIXED_LEN, DATA_FRAG_FIXED_LEN,
    DATA_HEAD_MAX, DataFragRepr, DataRepr, Datagram, DatagramBuilder, EndpointKind, EndpointRepr,
    EntityId, GapRepr, HEADER_LEN, Header, HeartbeatRepr, NackFragRepr, ParticipantId,
    ParticipantRepr, SEALED_FIXED_LEN, SUBMESSAGE_HEADER_LEN, StrList, Submessage, SubmessageKind,
    batch_entry_head, encode_data_head,
};

use crate::endpoint::{
    AsyncState, Cached, EndpointInfo, FanoutKey, Reader, ReaderProxy, Writer, WriterProxy,
};
use crate::event::{DeadlineSide, Event, Guid, IncompatibleQos, Sample, Stats};
use crate::qos::{Mismatch, Qos, QosPolicy, check_compatible};
use crate::sched::{Bucket, FlowController, Priority};

/// Bytes a DATA submessage adds around its payload (datagram header included).
pub const DATA_OVERHEAD: usize = HEADER_LEN + SUBMESSAGE_HEADER_LEN + DATA_FIXED_LEN;
/// How long writers that lost a reader wait for others to leave before moving to a new
/// epoch (they move before their next seal in any case).
const REKEY_DELAY: Duration = Duration::from_millis(5);
/// Heartbeat periods between heartbeats that ask every reader to acknowledge (the others are
/// final: only readers that miss something answer them).
const ACK_EVERY_HEARTBEATS: u32 = 10;

/// How often a writer asks every reader to acknowledge, at least.
fn ack_interval(cfg: &Config) -> Duration {
    cfg.heartbeat_period.saturating_mul(ACK_EVERY_HEARTBEATS)
}

/// Sender keys a reader keeps per remote writer: its newest epochs. A writer that re-keys
/// without end (or years of readers coming and going) cannot grow every reader's memory; a
/// sample sealed that many epochs ago and still unrepaired is counted as `no_key`.
pub const KEPT_EPOCHS: usize = 8;
/// A heartbeat submessage, header included.
const HEARTBEAT_LEN: usize = SUBMESSAGE_HEADER_LEN + 28;
/// Most samples one reader reassembles at once, whatever their size.
const MAX_REASSEMBLIES: usize = 1024;
/// A reassembly that has received nothing for this long asks for every missing fragment,
/// not only the overtaken ones (the writer has finished sending it).
const FRAG_QUIET: Duration = Duration::from_millis(20);
/// Least time between two NACK_FRAGs for one sample.
const NACKFRAG_INTERVAL: Duration = Duration::from_millis(50);
/// Most NACK_FRAG windows (256 fragments each) a reader sends per sample per heartbeat.
const NACKFRAG_WINDOWS: usize = 4;

/// Longest participant lease honoured, whatever a peer announces.
pub const MAX_LEASE: Duration = Duration::from_secs(300);
/// How often leases and liveliness are checked.
const HOUSEKEEPING: Duration = Duration::from_millis(50);
/// First re-announcement after start; doubles up to the configured period.
/// A BATCH_SIG body: writer, first sequence number, count, signature.
const BATCH_SIG_LEN: usize = 4 + 8 + 4 + 64;

const FIRST_ANNOUNCE: Duration = Duration::from_millis(50);

/// Engine settings. Every field has a default that works on one machine.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Domain id: participants of other domains are ignored.
    pub domain: u16,
    /// This participant's id (random, non-zero; the driver picks it).
    pub participant: ParticipantId,
    /// A name shown to other participants.
    pub name: String,
    /// How long others keep us without hearing from us.
    pub lease: Duration,
    /// Steady-state period of participant and endpoint announcements.
    pub announce_period: Duration,
    /// Period of heartbeats while reliable readers have unacknowledged samples.
    pub heartbeat_period: Duration,
    /// Largest datagram the transport carries.
    pub max_datagram: usize,
    /// Most remote participants remembered.
    pub max_participants: usize,
    /// Most endpoints remembered per remote participant.
    pub max_endpoints_per_participant: usize,
    /// Largest sample a writer accepts and a reader reassembles. Samples larger than one
    /// datagram are fragmented.
    pub max_sample_size: usize,
    /// Most bytes each reader may hold in samples being reassembled.
    pub max_reassembly_bytes: usize,
    /// An incomplete sample with no new fragment for this long is dropped.
    pub reassembly_timeout: Duration,
    /// Membership of a secure realm; `None`: security off (every peer is trusted).
    pub security: Option<std::sync::Arc<crate::Security>>,
    /// An IPv4 multicast group and port this participant's readers also take data on
    /// (the driver must have joined it). Announced, so writers elsewhere can send one
    /// datagram for every participant there instead of one each.
    pub data_group: Option<std::net::SocketAddrV4>,
    /// A writer sends a sample once to a data group when at least this many of its matched
    /// participants take data there (else to each by unicast).
    pub multicast_min: usize,
}

impl Config {
    /// Defaults for `domain` with the given participant id.
    pub fn new(domain: u16, participant: ParticipantId) -> Self {
        Config {
            domain,
            participant,
            name: String::new(),
            lease: Duration::from_secs(10),
            announce_period: Duration::from_secs(1),
            heartbeat_period: Duration::from_millis(100),
            max_datagram: 65_000,
            max_participants: 1024,
            max_endpoints_per_participant: 1024,
            max_sample_size: 256 << 20,
            max_reassembly_bytes: 256 << 20,
            reassembly_timeout: Duration::from_secs(10),
            security: None,
            data_group: None,
            multicast_min: 2,
        }
    }
}

/// Largest head kept inline in a [`Transmit`] (datagram header, heartbeat, DATA header).
const INLINE_HEAD: usize = 80;

/// The first bytes of a transmit: inline when they are a sample's headers (no allocation per
/// sample), shared otherwise.
#[derive(Clone, PartialEq, Eq)]
pub struct Head(HeadRepr);

#[derive(Clone, PartialEq, Eq)]
enum HeadRepr {
    Inline { len: u8, buf: [u8; INLINE_HEAD] },
    Shared(Bytes),
}

impl Head {
    /// An inline head (at most 80 bytes; longer input is truncated, which the engine never
    /// produces: `DATA_HEAD_MAX` is 76).
    fn inline(s: &[u8]) -> Self {
        let n = s.len().min(INLINE_HEAD);
        let mut buf = [0u8; INLINE_HEAD];
        buf[..n].copy_from_slice(&s[..n]);
        Head(HeadRepr::Inline { len: n as u8, buf })
    }

    /// Copies `s`, inline when it is short.
    pub fn copy_from_slice(s: &[u8]) -> Self {
        if s.len() <= INLINE_HEAD {
            let mut buf = [0u8; INLINE_HEAD];
            buf[..s.len()].copy_from_slice(s);
            Head(HeadRepr::Inline {
                len: s.len() as u8,
                buf,
            })
        } else {
            Head(HeadRepr::Shared(Bytes::copy_from_slice(s)))
        }
    }

    /// The bytes as shared [`Bytes`] (copies inline heads).
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            HeadRepr::Inline { .. } => Bytes::copy_from_slice(self),
            HeadRepr::Shared(b) => b.clone(),
        }
    }
}

impl From<Bytes> for Head {
    fn from(b: Bytes) -> Self {
        Head(HeadRepr::Shared(b))
    }
}

impl std::ops::Deref for Head {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            HeadRepr::Inline { len, buf } => &buf[..*len as usize],
            HeadRepr::Shared(b) => b,
        }
    }
}

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Head({} bytes)", self.len())
    }
}

/// One datagram to send: `head` followed by `body`. The body is a sample's payload,
/// referenced rather than copied, so a transport can send both with one scatter-gather call;
/// several transmits of one sample share the same payload bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a transmit must be handed to a transport"]
pub struct Transmit {
    /// Where to.
    pub dest: SocketAddr,
    /// Headers (and every submessage when there is no body).
    pub head: Head,
    /// The payload of the datagram's last DATA submessage, or empty.
    pub body: Bytes,
}

impl Transmit {
    /// Total datagram length.
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }

    /// True if the datagram is empty (never for transmits the engine produces).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The datagram as one buffer.
    pub fn contiguous(&self) -> Bytes {
        if self.body.is_empty() {
            self.head.to_bytes()
        } else {
            let mut v = Vec::with_capacity(self.len());
            v.extend_from_slice(&self.head);
            v.extend_from_slice(&self.body);
            Bytes::from(v)
        }
    }
}

/// Why an endpoint could not be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateError {
    /// The writer's QoS names a flow controller this participant does not have.
    UnknownFlowController(String),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::UnknownFlowController(n) => {
                write!(f, "unknown flow controller '{n}' (define it first)")
            }
        }
    }
}

impl std::error::Error for CreateError {}

/// Why a write was refused. Every variant hands the payload back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteError {
    /// No such writer.
    UnknownWriter(Bytes),
    /// A keep-all writer is full of unacknowledged samples (or a local keep-all reader is
    /// full). Retry after [`Event::WriterReady`].
    WouldBlock(Bytes),
    /// The sample is larger than `max_sample_size`.
    TooLarge {
        /// The payload.
        payload: Bytes,
        /// Largest payload accepted.
        max: usize,
    },
}

impl WriteError {
    /// The payload that was not written.
    pub fn into_payload(self) -> Bytes {
        match self {
            WriteError::UnknownWriter(p)
            | WriteError::WouldBlock(p)
            | WriteError::TooLarge { payload: p, .. } => p,
        }
    }
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::UnknownWriter(_) => f.write_str("unknown writer"),
            WriteError::WouldBlock(_) => {
                f.write_str("writer history full of unacknowledged samples")
            }
            WriteError::TooLarge { payload, max } => write!(
                f,
                "sample of {} bytes exceeds max_sample_size ({max} bytes)",
                payload.len()
            ),
        }
    }
}

impl std::error::Error for WriteError {}

/// A remote endpoint as discovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEndpoint {
    /// Writer or reader.
    pub kind: EndpointKind,
    /// Topic, type, partitions, QoS.
    pub info: EndpointInfo,
}

#[derive(Debug)]
struct RemoteParticipant {
    addr: SocketAddr,
    name: String,
    lease: Duration,
    last_heard: Instant,
    endpoints: BTreeMap<EntityId, RemoteEndpoint>,
    /// With security on: what we know of its identity.
    auth: Option<crate::security::PeerAuth>,
    /// The multicast group its readers also take data on.
    group: Option<SocketAddr>,
}

/// The sans-IO protocol engine of one session.
///
/// Inputs: [`handle_datagram`](Self::handle_datagram), [`handle_timeout`](Self::handle_timeout)
/// and the application calls ([`create_writer`](Self::create_writer), [`write`](Self::write),
/// [`take`](Self::take), …). Outputs: drain [`poll_transmit`](Self::poll_transmit) and
/// [`poll_event`](Self::poll_event) after every input, then sleep until
/// [`poll_timeout`](Self::poll_timeout). Time is always a parameter; the engine never reads a
/// clock, opens a socket or spawns a thread.
#[derive(Debug)]
pub struct Participant {
    cfg: Config,
    next_entity: u32,
    writers: BTreeMap<EntityId, Writer>,
    readers: BTreeMap<EntityId, Reader>,
    /// Boxed: a remote participant is almost 2 KB (its authentication state), and inline a
    /// map node of them spans five pages, so the lookup every datagram starts with touched
    /// a cold page for the node's keys and another for the value.
    remotes: BTreeMap<ParticipantId, Box<RemoteParticipant>>,
    /// Which remote participant is at an address (pairwise mode seals by destination).
    remote_at: HashMap<SocketAddr, ParticipantId>,
    /// Remote participants that announced a data group (0: every fan-out is unicast).
    grouped: usize,
    /// Changes to remote participants' addresses and groups (and arrivals and departures):
    /// writers recompute their fan-out plans when it moves.
    fanout_gen: u64,
    /// When writers that lost a reader move to a new epoch at the latest (they do before
    /// their next seal in any case). Departures until then share one re-key.
    rekey_at: Option<Instant>,
    /// Some writer lost a reader and `rekey_at` is still to be set.
    rekey_wanted: bool,
    /// Remote writer → local readers matched with it.
    remote_writer_readers: BTreeMap<Guid, Vec<EntityId>>,
    targets: BTreeSet<SocketAddr>,
    reported: BTreeSet<(EntityId, Guid, QosPolicy)>,
    /// Pairs refused for want of a grant (reported once).
    denied: BTreeSet<(EntityId, Guid)>,
    /// Sender keys of remote writers, by writer and epoch (secure realms). Boxed: a key
    /// holds two key schedules (over a kilobyte), and inline they spread a map node over
    /// several pages that every opened sample's lookup then walks cold.
    keys: BTreeMap<(Guid, u32), Box<tether_crypto::SenderKey>>,
    /// When we last asked a remote writer for a key.
    key_asked: BTreeMap<Guid, Instant>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: Stats,
    next_announce: Instant,
    announce_step: Duration,
    next_housekeeping: Instant,
    /// Readers that owe a writer an ACKNACK, built once the whole datagram is processed.
    pending_acks: Vec<(EntityId, Guid)>,
    /// Some timer may now be due earlier than `poll_timeout` said last time.
    timers_changed: bool,
    /// Counts inputs (datagrams, writes): keep-last caches evict only earlier inputs' samples.
    input: u64,
    /// Named flow controllers (token buckets) of asynchronous writers.
    buckets: Vec<Bucket>,
    /// Asynchronous writers by priority class, and where each class's turn stands.
    classes: [Vec<EntityId>; 3],
    turn: [usize; 3],
}

impl Participant {
    /// A participant that will announce itself at the first `handle_timeout`.
    pub fn new(cfg: Config, now: Instant) -> Self {
        Participant {
            cfg,
            next_entity: 1,
            writers: BTreeMap::new(),
            readers: BTreeMap::new(),
            remotes: BTreeMap::new(),
            remote_at: HashMap::new(),
            grouped: 0,
            fanout_gen: 0,
            rekey_at: None,
            rekey_wanted: false,
            remote_writer_readers: BTreeMap::new(),
            targets: BTreeSet::new(),
            reported: BTreeSet::new(),
            denied: BTreeSet::new(),
            keys: BTreeMap::new(),
            key_asked: BTreeMap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            next_announce: now,
            announce_step: FIRST_ANNOUNCE,
            next_housekeeping: after(now, HOUSEKEEPING),
            pending_acks: Vec::new(),
            timers_changed: true,
            input: 0,
            buckets: Vec::new(),
            classes: Default::default(),
            turn: [0; 3],
        }
    }

    /// This participant's id.
    pub fn id(&self) -> ParticipantId {
        self.cfg.participant
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Largest payload sent in one datagram; larger samples are fragmented.
    pub fn max_payload(&self) -> usize {
        self.cfg
            .max_datagram
            .saturating_sub(DATA_OVERHEAD + HEARTBEAT_LEN)
    }

    /// Largest sample a write accepts.
    pub fn max_sample_size(&self) -> usize {
        self.cfg.max_sample_size
    }

    /// Bytes of sample in each fragment (all but the last).
    fn frag_size(&self) -> u16 {
        let room = self.cfg.max_datagram.saturating_sub(
            HEADER_LEN + HEARTBEAT_LEN + SUBMESSAGE_HEADER_LEN + DATA_FRAG_FIXED_LEN,
        );
        room.clamp(1, u16::MAX as usize) as u16
    }

    /// Queues one sample for `dest`, addressed to `reader`: one DATA when it fits a datagram,
    /// else its fragments (`only`: just these fragment numbers). `hb` rides in front of the
    /// DATA, or of the last fragment. The payload is sliced, never copied.
    #[allow(clippy::too_many_arguments)]
    fn send_sample(
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

    fn header(&self) -> Header {
        Header {
            domain: self.cfg.domain,
            participant: self.cfg.participant,
        }
    }

    // ----- discovery targets -------------------------------------------------------------

    /// Adds an address that receives our announcements (a registry entry, a multicast group,
    /// a static peer). Announces to it at once.
    pub fn add_target(&mut self, addr: SocketAddr) {
        self.timers_changed = true;
        if self.targets.insert(addr) {
            let dgrams = self.announcement(None);
            for d in dgrams {
                self.push_transmit(addr, d);
            }
        }
    }

    /// Stops announcing to `addr`.
    pub fn remove_target(&mut self, addr: SocketAddr) {
        self.targets.remove(&addr);
    }

    /// Announcement targets.
    pub fn targets(&self) -> impl Iterator<Item = &SocketAddr> {
        self.targets.iter()
    }

    // ----- endpoints ---------------------------------------------------------------------

    /// Creates a writer and announces it. Fails if its QoS names an unknown flow controller.
    pub fn create_writer(
        &mut self,
        now: Instant,
        info: EndpointInfo,
    ) -> Result<EntityId, CreateError> {
        let asyncw = match info.qos.publish_async() {
            None => None,
            Some(a) => {
                let bucket = match a.flow {
                    None => None,
                    Some(n) => Some(
                        self.buckets
                            .iter()
                            .position(|b| !n.too_long() && b.name == n.as_str())
                            .ok_or_else(|| CreateError::UnknownFlowController(n.as_str().into()))?,
                    ),
                };
                Some(AsyncState {
                    priority: a.priority,
                    bucket,
                    seq: 1,
                    frag: 0,
                    dest: 0,
                    hb: None,
                    released: 0,
                    sending: None,
                })
            }
        };
        self.timers_changed = true;
        let id = self.alloc_entity();
        let mut w = Writer::new(id, info);
        if let Some(d) = w.info.qos.deadline_period() {
            w.deadline_at = Some(after(now, d));
        }
        if let Some(a) = &asyncw {
            self.classes[a.priority.index()].push(id);
        }
        w.asyncw = asyncw;
        if let Some(sec) = &self.cfg.security {
            let prot = sec.protection_for(&w.info.topic);
            w.prot = Some(prot);
            if prot.encrypt {
                w.key = Some(std::sync::Arc::new(tether_crypto::SenderKey::generate(
                    sec.suite,
                    1,
                    &mut tether_crypto::OsRandom,
                )));
            }
        }
        self.writers.insert(id, w);
        self.announce_endpoint(id);
        // Match against everything already known.
        let remote: Vec<(Guid, RemoteEndpoint)> = self.remote_endpoints_of(EndpointKind::Reader);
        for (g, e) in remote {
            self.try_match(now, id, g, &e.info, Side::LocalWriter);
        }
        let local: Vec<EntityId> = self.readers.keys().copied().collect();
        for r in local {
            self.try_match_local(now, id, r);
        }
        Ok(id)
    }

    /// Creates a reader and announces it.
    pub fn create_reader(&mut self, now: Instant, info: EndpointInfo) -> EntityId {
        self.timers_changed = true;
        let id = self.alloc_entity();
        self.readers.insert(id, Reader::new(id, info));
        self.announce_endpoint(id);
        let remote = self.remote_endpoints_of(EndpointKind::Writer);
        for (g, e) in remote {
            self.try_match(now, id, g, &e.info, Side::LocalReader);
        }
        let local: Vec<EntityId> = self.writers.keys().copied().collect();
        for w in local {
            self.try_match_local(now, w, id);
        }
        id
    }

    /// Withdraws a local endpoint (a writer's waiting batch is sent first).
    pub fn delete_endpoint(&mut self, now: Instant, id: EntityId) {
        self.flush_batch(now, id);
        let me = self.cfg.participant;
        let guid = Guid {
            participant: me,
            entity: id,
        };
        if let Some(w) = self.writers.remove(&id) {
            for c in &mut self.classes {
                c.retain(|x| *x != id);
            }
            for (g, rp) in &w.readers {
                if rp.local {
                    if let Some(r) = self.readers.get_mut(&g.entity) {
                        r.writers.remove(&guid);
                    }
                }
            }
        } else if let Some(r) = self.readers.remove(&id) {
            for g in r.writers.keys() {
                if g.participant == me {
                    if let Some(w) = self.writers.get_mut(&g.entity) {
                        w.readers.remove(&guid);
                        w.rebuild_dests();
                    }
                } else if let Some(v) = self.remote_writer_readers.get_mut(g) {
                    v.retain(|x| *x != id);
                }
            }
        } else {
            return;
        }
        self.reported.retain(|(l, _, _)| *l != id);
        let mut dg = Vec::new();
        if DatagramBuilder::new(&mut dg, self.header())
            .push(&Submessage::EndpointBye(id))
            .is_ok()
        {
            let dg = Bytes::from(dg);
            for a in self.all_destinations() {
                self.push_transmit(a, dg.clone());
            }
        }
    }

    /// Leaves: tells everyone we are gone. The participant should be dropped afterwards.
    pub fn close(&mut self) {
        let mut dg = Vec::new();
        if DatagramBuilder::new(&mut dg, self.header())
            .push(&Submessage::ParticipantBye)
            .is_ok()
        {
            let dg = Bytes::from(dg);
            for a in self.all_destinations() {
                self.push_transmit(a, dg.clone());
            }
        }
    }

    /// Local endpoint description.
    pub fn local_endpoint(&self, id: EntityId) -> Option<(EndpointKind, &EndpointInfo)> {
        if let Some(w) = self.writers.get(&id) {
            return Some((EndpointKind::Writer, &w.info));
        }
        self.readers
            .get(&id)
            .map(|r| (EndpointKind::Reader, &r.info))
    }

    /// Every remote endpoint known, with its participant's name.
    pub fn remote_endpoints(&self) -> Vec<(Guid, String, RemoteEndpoint)> {
        let mut v = Vec::new();
        for (pid, p) in &self.remotes {
            for (eid, e) in &p.endpoints {
                v.push((
                    Guid {
                        participant: *pid,
                        entity: *eid,
                    },
                    p.name.clone(),
                    e.clone(),
                ));
            }
        }
        v
    }

    /// Remote participants: id, name, address.
    pub fn remote_participants(&self) -> Vec<(ParticipantId, String, SocketAddr)> {
        self.remotes
            .iter()
            .map(|(id, p)| (*id, p.name.clone(), p.addr))
            .collect()
    }

    /// Remote writers' sender keys held (all writers and epochs; at most [`KEPT_EPOCHS`]
    /// per writer).
    pub fn sender_keys_held(&self) -> usize {
        self.keys.len()
    }

    /// How many endpoints a local endpoint is matched with.
    pub fn matched_count(&self, id: EntityId) -> usize {
        if let Some(w) = self.writers.get(&id) {
            return w.readers.len();
        }
        self.readers.get(&id).map_or(0, |r| r.writers.len())
    }

    /// Asks `writer`'s readers to acknowledge at once, and with every heartbeat until all
    /// have acknowledged everything: heartbeats are otherwise final (answered only by
    /// readers that miss something) but for one every ten heartbeat periods. For callers
    /// about to wait on [`Participant::all_acked`].
    pub fn request_acknowledgments(&mut self, now: Instant, writer: EntityId) {
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        if !w.info.qos.is_reliable() || !w.has_unacked() {
            return;
        }
        // The next heartbeat asks (see `Writer::asks_acks`), and goes out now.
        w.acks_wanted = true;
        if w.heartbeat_by(now) {
            self.timers_changed = true;
        }
    }

    /// When `writer`'s next periodic heartbeat is due (None: every reader has acknowledged
    /// everything, or no writer).
    pub fn heartbeat_due(&self, writer: EntityId) -> Option<Instant> {
        self.writers.get(&writer).and_then(|w| w.next_hb)
    }

    /// True when every matched reliable reader has acknowledged every sample of `writer`.
    pub fn all_acked(&self, writer: EntityId) -> bool {
        self.writers.get(&writer).is_none_or(|w| !w.has_unacked())
    }

    /// The highest sequence number of `writer` that every matched remote reliable reader has
    /// acknowledged together with all before it (the last written when none is matched).
    pub fn acknowledged(&self, writer: EntityId) -> u64 {
        self.writers.get(&writer).map_or(0, |w| {
            w.readers
                .values()
                .filter(|r| r.reliable && !r.local)
                .map(|r| r.acked.max(r.start).saturating_sub(1))
                .min()
                .unwrap_or(w.next_seq - 1)
        })
    }

    /// Samples held by a writer's history (for tests and `tether info`).
    pub fn history_len(&self, id: EntityId) -> usize {
        self.writers.get(&id).map_or(0, |w| w.history.len())
    }

    /// Bytes a reader holds in samples being reassembled.
    pub fn reassembly_bytes(&self, id: EntityId) -> u64 {
        self.readers
            .get(&id)
            .map_or(0, |r| r.writers.values().map(|w| w.frag_bytes()).sum())
    }

    /// Samples waiting in a reader (cache plus reorder buffers).
    pub fn reader_backlog(&self, id: EntityId) -> usize {
        self.readers.get(&id).map_or(0, |r| {
            r.cache.samples.len() + r.writers.values().map(|w| w.pending.len()).sum::<usize>()
        })
    }

    fn alloc_entity(&mut self) -> EntityId {
        let id = EntityId(self.next_entity);
        self.next_entity += 1;
        id
    }

    fn remote_endpoints_of(&self, kind: EndpointKind) -> Vec<(Guid, RemoteEndpoint)> {
        let mut v = Vec::new();
        for (pid, p) in &self.remotes {
            for (eid, e) in &p.endpoints {
                if e.kind == kind {
                    v.push((
                        Guid {
                            participant: *pid,
                            entity: *eid,
                        },
                        e.clone(),
                    ));
                }
            }
        }
        v
    }

    // ----- writing -----------------------------------------------------------------------

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
    fn write_batched(
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

    // ----- asynchronous writers ---------------------------------------------------------

    /// Defines (or redefines) a named flow controller for asynchronous writers. A writer
    /// names it in its QoS ([`Qos::flow_controller`]); several writers may share one.
    pub fn set_flow_controller(&mut self, name: &str, spec: FlowController) {
        match self.buckets.iter_mut().find(|b| b.name == name) {
            Some(b) => {
                // A fresh bucket under the new setting (an unlimited one holds no real
                // count of tokens), keeping the byte count.
                let bytes = b.bytes;
                *b = Bucket::new(name.to_string(), spec);
                b.bytes = bytes;
            }
            None => self.buckets.push(Bucket::new(name.to_string(), spec)),
        }
    }

    /// The flow controllers: name, settings, and bytes let through so far.
    pub fn flow_controllers(&self) -> impl Iterator<Item = (&str, FlowController, u64)> {
        self.buckets
            .iter()
            .map(|b| (b.name.as_str(), b.spec, b.bytes))
    }

    /// The next datagram of an asynchronous writer, if one may leave at `now`: the highest
    /// priority class first, the writers of a class in turn (one datagram each), each only
    /// while its flow controller holds tokens. A driver's sender calls this until it returns
    /// `None`, then waits until [`next_scheduled`](Self::next_scheduled) or a new write.
    /// Heartbeats, repairs and synchronous writers' data never wait here: they come from
    /// [`poll_transmit`](Self::poll_transmit). Once it has sent a datagram it polled, the
    /// driver says so with [`scheduled_sent`](Self::scheduled_sent).
    pub fn poll_scheduled(&mut self, now: Instant) -> Option<Transmit> {
        self.poll_scheduled_in(now, &Priority::ALL)
    }

    /// [`poll_scheduled`](Self::poll_scheduled) for the given classes only, most urgent
    /// first: a driver may drain bulk from a thread of lower OS priority than the others.
    pub fn poll_scheduled_in(&mut self, now: Instant, classes: &[Priority]) -> Option<Transmit> {
        for p in classes {
            let class = p.index();
            let n = self.classes[class].len();
            for k in 0..n {
                let i = (self.turn[class] + k) % n;
                let id = self.classes[class][i];
                if let Some(t) = self.release(now, id) {
                    self.turn[class] = (i + 1) % n;
                    return Some(self.seal_for_peer(t));
                }
            }
        }
        None
    }

    /// When [`poll_scheduled`](Self::poll_scheduled) will next have a datagram: `now` if it
    /// has one, the next token refill if every waiting writer is out of tokens, `None` if no
    /// asynchronous writer has anything to send.
    pub fn next_scheduled(&mut self, now: Instant) -> Option<Instant> {
        self.next_scheduled_in(now, &Priority::ALL)
    }

    /// [`next_scheduled`](Self::next_scheduled) for the given classes only.
    pub fn next_scheduled_in(&mut self, now: Instant, classes: &[Priority]) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        for p in classes {
            for id in &self.classes[p.index()] {
                let Some(w) = self.writers.get(id) else {
                    continue;
                };
                let Some(a) = &w.asyncw else { continue };
                if a.seq >= w.next_seq || w.dests.is_empty() {
                    continue;
                }
                let at = match a.bucket {
                    Some(b) => self.buckets[b].next_ready(now),
                    None => now,
                };
                t = Some(t.map_or(at, |x| x.min(at)));
            }
        }
        t
    }

    /// The driver has sent the datagrams it polled from
    /// [`poll_scheduled_in`](Self::poll_scheduled_in) for these classes. A sample is released
    /// (forgotten by a writer without history, announced by heartbeats) only then: a heartbeat
    /// must not announce a sample still on its way out of another thread, or readers would
    /// ask for it again. Call it before polling these classes again.
    pub fn scheduled_sent(&mut self, classes: &[Priority]) {
        for p in classes {
            for id in &self.classes[p.index()] {
                let Some(w) = self.writers.get_mut(id) else {
                    continue;
                };
                let Some(seq) = w.asyncw.as_mut().and_then(|a| a.sending.take()) else {
                    continue;
                };
                if let Some(a) = w.asyncw.as_mut() {
                    a.released = a.released.max(seq);
                }
                w.forget_released();
                if w.blocked && w.make_room(0) {
                    w.blocked = false;
                    self.events.push_back(Event::WriterReady { writer: *id });
                }
            }
        }
    }

    /// The priority class of an asynchronous writer (`None` for a synchronous one).
    pub fn writer_priority(&self, writer: EntityId) -> Option<Priority> {
        self.writers
            .get(&writer)
            .and_then(|w| w.asyncw.as_ref())
            .map(|a| a.priority)
    }

    /// True if events or immediate transmits are waiting to be polled.
    pub fn has_output(&self) -> bool {
        !self.transmits.is_empty() || !self.events.is_empty()
    }

    /// Samples an asynchronous writer has accepted but not yet released to every reader's
    /// participant (0 for a synchronous one).
    pub fn unsent(&self, writer: EntityId) -> u64 {
        self.writers.get(&writer).map_or(0, |w| {
            w.asyncw
                .as_ref()
                .map_or(0, |a| (w.next_seq - 1).saturating_sub(a.released))
        })
    }

    /// Releases one datagram of asynchronous writer `id`, if it has one and tokens allow.
    fn release(&mut self, now: Instant, id: EntityId) -> Option<Transmit> {
        let hdr = self.header();
        let single = self.max_payload();
        let frag_size = self.frag_size();
        let hb_period = self.cfg.heartbeat_period;
        let ack_iv = ack_interval(&self.cfg);
        let w = self.writers.get_mut(&id)?;
        let every = w.heartbeat_every();
        let a = w.asyncw.as_mut()?;
        if a.seq >= w.next_seq {
            return None;
        }
        if w.dests.is_empty() {
            // No one to send to (any more): everything waiting is released.
            a.seq = w.next_seq;
            a.released = w.next_seq - 1;
            a.frag = 0;
            a.dest = 0;
            a.hb = None;
            w.forget_released();
            return None;
        }
        if let Some(b) = a.bucket {
            if !self.buckets[b].ready(now) {
                return None;
            }
        }
        // The sample at the cursor, or the next one kept (keep-last may have dropped some).
        let i = w.history.partition_point(|c| c.seq < a.seq);
        let Some(c) = w.history.get(i) else {
            a.seq = w.next_seq;
            a.released = w.next_seq - 1;
            return None;
        };
        if c.seq != a.seq {
            a.released = c.seq - 1;
            a.seq = c.seq;
            a.frag = 0;
            a.dest = 0;
            a.hb = None;
        }
        if a.dest >= w.dests.len() {
            a.dest = 0;
            a.frag += 1;
        }
        let reliable = w.info.qos.is_reliable();
        let o = Outgoing {
            hdr,
            single,
            frag_size,
            dest: self.remotes.get(&w.dests[a.dest]).map(|r| r.addr)?,
            writer: id,
            reader: EntityId::ALL,
            seq: c.seq,
            timestamp_ns: c.timestamp_ns,
            payload: &c.payload,
        };
        let count = o.frag_count();
        if a.frag == 0 && a.dest == 0 {
            // A new sample: decide whether its last datagram carries a heartbeat (always
            // for fragmented samples, so readers repair them at once).
            w.since_hb += 1;
            a.hb = None;
            if reliable && (count > 1 || w.since_hb >= every) {
                w.since_hb = 0;
                let ask = crate::endpoint::asks_acks(
                    &w.info,
                    w.acks_wanted,
                    w.acks_asked,
                    &w.readers,
                    now,
                    ack_iv,
                );
                let first = w.history.front().map_or(c.seq, |f| f.seq);
                a.hb = Some(crate::endpoint::next_heartbeat(
                    id,
                    &mut w.hb_count,
                    &mut w.acks_asked,
                    now,
                    ask,
                    first,
                    c.seq,
                ));
            }
        }
        let last_frag = a.frag + 1 >= count;
        let hb = a.hb.as_ref().filter(|_| last_frag);
        if hb.is_some() {
            self.stats.heartbeats_sent += 1;
        }
        let t = o.datagram(a.frag.min(count - 1), hb, &mut self.stats);
        self.stats.datagrams_scheduled += 1;
        if let Some(b) = a.bucket {
            self.buckets[b].spend(t.len());
        }
        a.dest += 1;
        if a.dest >= w.dests.len() && last_frag {
            // Released once the driver says it has sent it (`scheduled_sent`).
            a.sending = Some(a.seq);
            a.seq += 1;
            a.frag = 0;
            a.dest = 0;
            a.hb = None;
        }
        if reliable && w.heartbeat_by(after(now, hb_period)) {
            self.timers_changed = true;
        }
        Some(t)
    }

    /// Sends `writer`'s batch now, if it holds anything.
    pub fn flush(&mut self, now: Instant, writer: EntityId) {
        self.flush_batch(now, writer);
    }

    fn flush_batch(&mut self, now: Instant, writer: EntityId) {
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
    fn deliver_local(
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

    // ----- reading -----------------------------------------------------------------------

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
            for wp in r.writers.values_mut() {
                delivered += wp.drain(&mut r.cache, now, self.input).0;
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
            for wp in r.writers.values_mut() {
                delivered += wp.drain(&mut r.cache, now, self.input).0;
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

    // ----- input -------------------------------------------------------------------------

    /// Processes one received datagram. `datagram` is kept by reference: delivered payloads
    /// are slices of it.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &Bytes) {
        self.timers_changed = true;
        self.input += 1;
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        self.process_datagram(now, from, datagram, true);
        self.schedule_rekeys(now);
    }

    /// Moves every writer that lost a reader to a new epoch now, and stops the timer.
    fn rekey_due_writers(&mut self) {
        self.rekey_at = None;
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
    fn schedule_rekeys(&mut self, now: Instant) {
        if std::mem::take(&mut self.rekey_wanted) && self.rekey_at.is_none() {
            self.rekey_at = Some(after(now, REKEY_DELAY));
        }
    }

    /// The submessages of one datagram; `outer`: as received (a SEALED one may open to
    /// another datagram, which may not be sealed again).
    fn process_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &Bytes, outer: bool) {
        let d = match Datagram::parse(datagram) {
            Ok(d) => d,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let h = d.header();
        if h.domain != self.cfg.domain {
            self.stats.wrong_domain += 1;
            return;
        }
        let pid = h.participant;
        if pid == self.cfg.participant {
            return; // our own multicast, looped back
        }
        let mut known = if let Some(p) = self.remotes.get_mut(&pid) {
            p.last_heard = now;
            if p.addr != from {
                // The peer's address changed (new IP, NAT rebinding): follow it.
                if self.remote_at.get(&p.addr) == Some(&pid) {
                    self.remote_at.remove(&p.addr);
                }
                p.addr = from;
                self.fanout_gen += 1;
                self.remote_at.insert(from, pid);
            }
            true
        } else {
            false
        };
        // A BATCH_SIG applies to the BATCH right after it, and to nothing else.
        let mut batch_sig: Option<tether_wire::BatchSigRepr<'_>> = None;
        for m in d.submessages() {
            let pending = batch_sig.take();
            let m = match m {
                Ok(m) => m,
                Err(_) => {
                    self.stats.malformed += 1;
                    break;
                }
            };
            match m {
                Submessage::Participant(p) => {
                    known = self.on_participant(now, pid, from, p);
                }
                Submessage::Unknown(_) => self.stats.unknown_kind += 1,
                _ if !known => self.stats.unknown_sender += 1,
                Submessage::ParticipantBye => {
                    self.remove_participant(pid);
                    known = false;
                }
                Submessage::Endpoint(e) => self.on_endpoint(now, pid, e),
                Submessage::Auth(a) => self.on_auth(now, pid, a),
                // The rest of the datagram, sealed for us alone (pairwise mode). Once: what
                // it opens to is handled as a datagram that may not be sealed again.
                Submessage::Sealed(x) => {
                    if outer {
                        self.on_sealed(now, from, pid, datagram, x);
                    } else {
                        self.stats.pair_open_failed += 1;
                    }
                    break;
                }
                Submessage::EndpointBye(e) => self.remove_remote_endpoint(pid, e),
                Submessage::Data(data) => {
                    let g = Guid {
                        participant: pid,
                        entity: data.writer,
                    };
                    let s = Sample {
                        writer: g,
                        seq: data.seq,
                        timestamp_ns: data.timestamp_ns,
                        payload: datagram.slice_ref(data.payload),
                    };
                    if let Some(s) = self.unseal(now, data.reader, s) {
                        self.on_remote_data(now, data.reader, s);
                    }
                }
                Submessage::Key(k) => self.on_key(pid, k),
                Submessage::KeyRequest(k) => self.on_key_request(pid, k),
                Submessage::Heartbeat(hb) => self.on_heartbeat(now, pid, hb),
                Submessage::AckNack(an) => self.on_acknack(now, pid, an),
                Submessage::Gap(g) => self.on_gap(now, pid, g),
                Submessage::DataFrag(f) => self.on_data_frag(now, pid, f),
                Submessage::NackFrag(n) => self.on_nack_frag(pid, n),
                Submessage::BatchSig(x) => batch_sig = Some(x),
                Submessage::Batch(b) => {
                    let g = Guid {
                        participant: pid,
                        entity: b.writer,
                    };
                    let signed = pending.is_some_and(|x| self.batch_signature_ok(g, &b, &x));
                    self.on_batch(now, g, b, datagram, signed);
                }
            }
        }
        self.flush_pending_acks(now);
    }

    fn on_participant(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
        p: ParticipantRepr<'_>,
    ) -> bool {
        // A peer cannot pin a table slot for longer than MAX_LEASE by claiming a huge lease.
        let lease = Duration::from_millis(p.lease_ms as u64).min(MAX_LEASE);
        let group = p.data_group.map(SocketAddr::V4);
        if let Some(rp) = self.remotes.get_mut(&pid) {
            rp.lease = lease;
            if rp.group != group {
                self.grouped =
                    self.grouped + group.is_some() as usize - rp.group.is_some() as usize;
                rp.group = group;
                self.fanout_gen += 1;
            }
            return true;
        }
        if self.remotes.len() >= self.cfg.max_participants {
            self.stats.table_full += 1;
            return false;
        }
        self.remote_at.insert(from, pid);
        self.fanout_gen += 1;
        self.remotes.insert(
            pid,
            Box::new(RemoteParticipant {
                addr: from,
                name: p.name.to_string(),
                lease,
                last_heard: now,
                endpoints: BTreeMap::new(),
                auth: self
                    .cfg
                    .security
                    .as_ref()
                    .map(|_| crate::security::PeerAuth::new()),
                group,
            }),
        );
        self.grouped += group.is_some() as usize;
        self.send_auth(now, pid);
        self.events.push_back(Event::ParticipantDiscovered {
            participant: pid,
            name: p.name.to_string(),
            addr: from,
        });
        // Answer at once, so discovery takes one round trip, not one period.
        for d in self.announcement(None) {
            self.push_transmit(from, d);
        }
        true
    }

    fn on_endpoint(&mut self, now: Instant, pid: ParticipantId, e: EndpointRepr<'_>) {
        let info = EndpointInfo {
            topic: e.topic.to_string(),
            type_name: e.type_name.to_string(),
            partitions: e.partitions.iter().map(str::to_string).collect(),
            qos: Qos::from_repr(&e.qos),
        };
        let max = self.cfg.max_endpoints_per_participant;
        let Some(rp) = self.remotes.get_mut(&pid) else {
            return;
        };
        let remote = RemoteEndpoint { kind: e.kind, info };
        match rp.endpoints.get(&e.entity) {
            Some(old) if *old == remote => return, // a periodic re-announcement
            Some(_) => self.remove_remote_endpoint(pid, e.entity),
            None => {}
        }
        let Some(rp) = self.remotes.get_mut(&pid) else {
            return;
        };
        if rp.endpoints.len() >= max {
            self.stats.table_full += 1;
            return;
        }
        rp.endpoints.insert(e.entity, remote.clone());
        let g = Guid {
            participant: pid,
            entity: e.entity,
        };
        match e.kind {
            EndpointKind::Reader => {
                let ws: Vec<EntityId> = self.writers.keys().copied().collect();
                for w in ws {
                    self.try_match(now, w, g, &remote.info, Side::LocalWriter);
                }
            }
            EndpointKind::Writer => {
                let rs: Vec<EntityId> = self.readers.keys().copied().collect();
                for r in rs {
                    self.try_match(now, r, g, &remote.info, Side::LocalReader);
                }
            }
        }
    }

    fn remove_remote_endpoint(&mut self, pid: ParticipantId, eid: EntityId) {
        let Some(rp) = self.remotes.get_mut(&pid) else {
            return;
        };
        let Some(e) = rp.endpoints.remove(&eid) else {
            return;
        };
        let gone = Guid {
            participant: pid,
            entity: eid,
        };
        self.keys.retain(|(g, _), _| *g != gone);
        self.key_asked.remove(&gone);
        let g = Guid {
            participant: pid,
            entity: eid,
        };
        self.reported.retain(|(_, r, _)| *r != g);
        match e.kind {
            EndpointKind::Reader => {
                for w in self.writers.values_mut() {
                    if w.readers.remove(&g).is_some() {
                        w.rebuild_dests();
                        w.release_acked();
                        // A reader that left must not read what is written from now on:
                        // the writer moves to a new epoch before it seals again. Readers
                        // that leave together (a host shutting down its sessions) share
                        // one new epoch, where a re-key each would cost every writer
                        // N + (N - 1) + … key wraps.
                        if w.key.is_some() {
                            w.rekey_due = true;
                            self.rekey_wanted = true;
                        }
                        self.events.push_back(Event::Unmatched {
                            local: w.id,
                            remote: g,
                            topic: w.info.topic.clone(),
                        });
                        if w.blocked {
                            self.events.push_back(Event::WriterReady { writer: w.id });
                        }
                    }
                }
            }
            EndpointKind::Writer => {
                if let Some(rs) = self.remote_writer_readers.remove(&g) {
                    for r in rs {
                        if let Some(r) = self.readers.get_mut(&r) {
                            r.writers.remove(&g);
                            self.events.push_back(Event::Unmatched {
                                local: r.id,
                                remote: g,
                                topic: r.info.topic.clone(),
                            });
                        }
                    }
                }
            }
        }
    }

    fn remove_participant(&mut self, pid: ParticipantId) {
        let Some(rp) = self.remotes.get(&pid) else {
            return;
        };
        let ids: Vec<EntityId> = rp.endpoints.keys().copied().collect();
        for e in ids {
            self.remove_remote_endpoint(pid, e);
        }
        if let Some(rp) = self.remotes.remove(&pid) {
            self.fanout_gen += 1;
            if self.remote_at.get(&rp.addr) == Some(&pid) {
                self.remote_at.remove(&rp.addr);
            }
            self.grouped -= rp.group.is_some() as usize;
        }
        self.events
            .push_back(Event::ParticipantLost { participant: pid });
    }

    fn on_remote_data(&mut self, now: Instant, to: EntityId, s: Sample) {
        let Some(rs) = self.remote_writer_readers.get(&s.writer) else {
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
                let g = s.writer;
                let many = self
                    .remote_writer_readers
                    .get_mut(&g)
                    .map(std::mem::take)
                    .unwrap_or_default();
                for r in &many {
                    self.on_data(now, *r, s.clone());
                }
                if let Some(v) = self.remote_writer_readers.get_mut(&g) {
                    *v = many;
                }
            }
        }
    }

    /// One sample for one local reader.
    fn on_data(&mut self, now: Instant, reader: EntityId, s: Sample) {
        let Some(r) = self.readers.get_mut(&reader) else {
            return;
        };
        let Some(wp) = r.writers.get_mut(&s.writer) else {
            self.stats.unmatched_writer += 1;
            return;
        };
        heard(wp, reader, s.writer, now, &mut self.events);
        let d = accept(
            &mut r.cache,
            &r.info.qos,
            wp,
            reader,
            s,
            now,
            self.input,
            &mut self.stats,
            &mut self.events,
        );
        note_delivered(r, d, now, &mut self.stats, &mut self.events);
    }

    /// A BATCH: its samples for every addressed local reader, each reader and writer proxy
    /// looked up once per batch rather than once per sample.
    /// The credential of a peer that proved it holds it (answered our challenge).
    fn verified_credential(&self, pid: ParticipantId) -> Option<&tether_crypto::Credential> {
        self.remotes
            .get(&pid)
            .and_then(|p| p.auth.as_ref())
            .filter(|a| a.verified)
            .and_then(|a| a.credential.as_ref())
    }

    /// Whether `x` is `g`'s signature over batch `b` (checked once per batch).
    fn batch_signature_ok(
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

    /// `signed`: a BATCH_SIG from the writer over exactly this batch was verified.
    fn on_batch(
        &mut self,
        now: Instant,
        g: Guid,
        b: BatchRepr<'_>,
        datagram: &Bytes,
        signed: bool,
    ) {
        if self.cfg.security.is_some() {
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
        }
        let rs = self.addressed_readers(g, b.reader);
        for reader in rs {
            let Some(r) = self.readers.get_mut(&reader) else {
                continue;
            };
            let Some(wp) = r.writers.get_mut(&g) else {
                self.stats.unmatched_writer += 1;
                continue;
            };
            heard(wp, reader, g, now, &mut self.events);
            let mut d = 0;
            for (seq, timestamp_ns, payload) in b.samples() {
                let s = Sample {
                    writer: g,
                    seq,
                    timestamp_ns,
                    payload: datagram.slice_ref(payload),
                };
                d += accept(
                    &mut r.cache,
                    &r.info.qos,
                    wp,
                    reader,
                    s,
                    now,
                    self.input,
                    &mut self.stats,
                    &mut self.events,
                );
            }
            note_delivered(r, d, now, &mut self.stats, &mut self.events);
        }
    }

    /// Local readers matched with remote writer `g` that a message addressed to `to`
    /// concerns (all of them for [`EntityId::ALL`]).
    fn addressed_readers(&mut self, g: Guid, to: EntityId) -> Vec<EntityId> {
        match self.remote_writer_readers.get(&g) {
            None => {
                self.stats.unmatched_writer += 1;
                Vec::new()
            }
            Some(rs) if to == EntityId::ALL => rs.clone(),
            Some(rs) => rs.iter().copied().filter(|r| *r == to).collect(),
        }
    }

    fn on_data_frag(&mut self, now: Instant, pid: ParticipantId, f: DataFragRepr<'_>) {
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
        let max_bytes = self.cfg.max_reassembly_bytes as u64;
        for rid in rs {
            let Some(r) = self.readers.get_mut(&rid) else {
                continue;
            };
            let in_progress: u64 = r.writers.values().map(|w| w.frag_bytes()).sum();
            let count: usize = r.writers.values().map(|w| w.frags.len()).sum();
            let Some(wp) = r.writers.get_mut(&g) else {
                continue;
            };
            wp.last_heard = now;
            let done = if wp.reliable {
                wp.expected.is_some_and(|e| f.seq < e) || wp.pending.contains_key(&f.seq)
            } else {
                f.seq <= wp.last_delivered
            };
            if done {
                self.stats.duplicates += 1;
                continue;
            }
            let complete = match wp.frags.get_mut(&f.seq) {
                Some(ra) => match ra.add(&f, now, &mut wp.spare) {
                    Ok(c) => c,
                    Err(crate::reassembly::FragError::Duplicate) => {
                        self.stats.duplicates += 1;
                        continue;
                    }
                    Err(crate::reassembly::FragError::Inconsistent) => {
                        self.stats.fragments_rejected += 1;
                        continue;
                    }
                },
                None => {
                    let charge = crate::endpoint::reassembly_charge(f.sample_size);
                    if in_progress + charge > max_bytes || count >= MAX_REASSEMBLIES {
                        // Over this reader's reassembly budget: a reliable writer repairs it
                        // later, when room is back.
                        self.stats.fragments_rejected += 1;
                        continue;
                    }
                    let mut ra = crate::reassembly::Reassembly::new(&f, now, &mut wp.spare);
                    let c = ra.add(&f, now, &mut wp.spare).ok().flatten();
                    wp.frags.insert(f.seq, ra);
                    c
                }
            };
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

    fn on_nack_frag(&mut self, pid: ParticipantId, nf: NackFragRepr) {
        let rg = Guid {
            participant: pid,
            entity: nf.reader,
        };
        let Some(w) = self.writers.get_mut(&nf.writer) else {
            self.stats.unmatched_reader += 1;
            return;
        };
        let Some(rp) = w.readers.get_mut(&rg) else {
            self.stats.unmatched_reader += 1;
            return;
        };
        if rp.local || !rp.reliable {
            return;
        }
        if !newer(&mut rp.last_nackfrag, nf.count) {
            return;
        }
        let Some(addr) = self.remotes.get(&pid).map(|p| p.addr) else {
            return;
        };
        match w.find(nf.seq).map(|c| (c.timestamp_ns, c.payload.clone())) {
            Some((ts, payload)) => {
                let payload =
                    wire_form(&self.cfg, &mut self.stats, nf.writer, nf.seq, ts, &payload);
                let frags: Vec<u32> = nf.missing().collect();
                self.stats.fragments_retransmitted += frags.len() as u64;
                let before = self.stats.bytes_sent;
                self.send_sample(
                    addr,
                    nf.writer,
                    nf.reader,
                    nf.seq,
                    ts,
                    &payload,
                    Some(&frags),
                    None,
                );
                self.charge(nf.writer, self.stats.bytes_sent - before);
            }
            None => {
                let hdr = self.header();
                let mut p = Packer::new(addr, hdr, self.cfg.max_datagram);
                p.push(
                    &Submessage::Gap(GapRepr {
                        writer: nf.writer,
                        reader: nf.reader,
                        start: nf.seq,
                        end: nf.seq + 1,
                    }),
                    &mut self.transmits,
                    &mut self.stats,
                );
                p.finish(&mut self.transmits, &mut self.stats);
                self.stats.gaps_sent += 1;
            }
        }
    }

    fn on_heartbeat(&mut self, now: Instant, pid: ParticipantId, hb: HeartbeatRepr) {
        let g = Guid {
            participant: pid,
            entity: hb.writer,
        };
        let rs = self.addressed_readers(g, hb.reader);
        for rid in rs {
            let Some(r) = self.readers.get_mut(&rid) else {
                continue;
            };
            let Some(wp) = r.writers.get_mut(&g) else {
                continue;
            };
            wp.last_heard = now;
            if !wp.reliable {
                continue;
            }
            if !newer(&mut wp.hb_count, hb.count) {
                continue; // stale or duplicated heartbeat
            }
            wp.hb_last = wp.hb_last.max(hb.last);
            if wp.expected.is_none() {
                wp.expected = Some(hb.first);
            }
            if let Some(e) = wp.expected {
                if hb.first > e {
                    // The writer no longer has [e, first): those samples are lost to us.
                    let missing = (e..hb.first)
                        .filter(|s| !wp.pending.contains_key(s))
                        .count() as u64;
                    if missing > 0 {
                        self.stats.lost += missing;
                        self.events.push_back(Event::SamplesLost {
                            reader: rid,
                            writer: g,
                            count: missing,
                        });
                    }
                    wp.gaps.push((e, hb.first));
                }
            }
            let (d, _) = wp.drain(&mut r.cache, now, self.input);
            // A final heartbeat needs no answer from a reader that has everything it
            // announces (received, or declared lost or irrelevant).
            let complete = wp.expected.is_some_and(|e| e > hb.last);
            note_delivered(r, d, now, &mut self.stats, &mut self.events);
            if hb.final_ && complete {
                self.stats.final_heartbeats_unanswered += 1;
                continue;
            }
            if !self.pending_acks.contains(&(rid, g)) {
                self.pending_acks.push((rid, g));
            }
        }
    }

    fn on_gap(&mut self, now: Instant, pid: ParticipantId, gap: GapRepr) {
        let g = Guid {
            participant: pid,
            entity: gap.writer,
        };
        let rs = self.addressed_readers(g, gap.reader);
        for rid in rs {
            let Some(r) = self.readers.get_mut(&rid) else {
                continue;
            };
            let Some(wp) = r.writers.get_mut(&g) else {
                continue;
            };
            if !wp.reliable {
                continue;
            }
            wp.add_gap(gap.start, gap.end);
            let (d, _) = wp.drain(&mut r.cache, now, self.input);
            note_delivered(r, d, now, &mut self.stats, &mut self.events);
        }
    }

    fn on_acknack(&mut self, now: Instant, pid: ParticipantId, an: tether_wire::AckNackRepr) {
        let rg = Guid {
            participant: pid,
            entity: an.reader,
        };
        let Some(w) = self.writers.get_mut(&an.writer) else {
            self.stats.unmatched_reader += 1;
            return;
        };
        let Some(rp) = w.readers.get_mut(&rg) else {
            self.stats.unmatched_reader += 1;
            return;
        };
        if rp.local || !rp.reliable {
            return;
        }
        if !newer(&mut rp.last_count, an.count) {
            return;
        }
        let start = rp.start;
        let base = an.base.min(w.next_seq);
        rp.acked = rp.acked.max(base);
        let Some(addr) = self.remotes.get(&pid).map(|p| p.addr) else {
            return;
        };
        let hdr = Header {
            domain: self.cfg.domain,
            participant: self.cfg.participant,
        };
        let before = self.stats.bytes_sent;
        let mut packer = Packer::new(addr, hdr, self.cfg.max_datagram);
        // Sequence numbers the reader should never get (before it matched) or that are gone.
        let mut gap: Option<(u64, u64)> = None;
        if an.base < start {
            gap = Some((an.base, start));
        }
        // Samples too large for one datagram are re-sent whole (every fragment) after the
        // small ones; a partly received one is repaired by NACK_FRAG instead.
        let single = self
            .cfg
            .max_datagram
            .saturating_sub(DATA_OVERHEAD + HEARTBEAT_LEN);
        let mut big: Vec<(u64, u64, Bytes)> = Vec::new();
        for seq in an.missing() {
            if seq > w.last_sent() {
                break;
            }
            let cached = if seq >= start { w.find(seq) } else { None };
            match cached {
                Some(c) if c.payload.len() > single => {
                    // A young sample's fragments may still be in flight: the reader then
                    // repairs it by NACK_FRAG, so only an old one is re-sent whole.
                    if now.saturating_duration_since(c.written) >= self.cfg.heartbeat_period {
                        let p = wire_form(
                            &self.cfg,
                            &mut self.stats,
                            an.writer,
                            seq,
                            c.timestamp_ns,
                            &c.payload,
                        );
                        big.push((seq, c.timestamp_ns, p));
                        self.stats.samples_retransmitted += 1;
                    }
                }
                Some(c) => {
                    let p = wire_form(
                        &self.cfg,
                        &mut self.stats,
                        an.writer,
                        seq,
                        c.timestamp_ns,
                        &c.payload,
                    );
                    flush_gap(
                        &mut gap,
                        &mut packer,
                        &mut self.transmits,
                        &mut self.stats,
                        an.writer,
                        an.reader,
                    );
                    packer.push(
                        &Submessage::Data(DataRepr {
                            writer: an.writer,
                            reader: an.reader,
                            seq,
                            timestamp_ns: c.timestamp_ns,
                            payload: &p,
                        }),
                        &mut self.transmits,
                        &mut self.stats,
                    );
                    self.stats.samples_retransmitted += 1;
                }
                None => match &mut gap {
                    Some((_, b)) if *b == seq => *b = seq + 1,
                    _ => {
                        flush_gap(
                            &mut gap,
                            &mut packer,
                            &mut self.transmits,
                            &mut self.stats,
                            an.writer,
                            an.reader,
                        );
                        gap = Some((seq, seq + 1));
                    }
                },
            }
        }
        flush_gap(
            &mut gap,
            &mut packer,
            &mut self.transmits,
            &mut self.stats,
            an.writer,
            an.reader,
        );
        // A heartbeat closes every repair, so the reader learns the state at once.
        if an.num_bits > 0 {
            w.hb_count = w.hb_count.wrapping_add(1);
            packer.push(
                &Submessage::Heartbeat(HeartbeatRepr {
                    writer: an.writer,
                    reader: an.reader,
                    first: w.first_available().max(start).min(w.last_sent() + 1),
                    last: w.last_sent(),
                    count: w.hb_count,
                    final_: false,
                }),
                &mut self.transmits,
                &mut self.stats,
            );
            self.stats.heartbeats_sent += 1;
        }
        packer.finish(&mut self.transmits, &mut self.stats);
        w.release_acked();
        if w.blocked && w.make_room(0) {
            w.blocked = false;
            self.events.push_back(Event::WriterReady { writer: w.id });
        }
        for (seq, ts, payload) in big {
            self.send_sample(addr, an.writer, an.reader, seq, ts, &payload, None, None);
        }
        self.charge(an.writer, self.stats.bytes_sent - before);
    }

    /// Repairs of an asynchronous writer leave at once (they are late already) but are paid
    /// for from its flow controller, so the long-run rate holds on lossy links too.
    fn charge(&mut self, writer: EntityId, bytes: u64) {
        if let Some(b) = self
            .writers
            .get(&writer)
            .and_then(|w| w.asyncw.as_ref())
            .and_then(|a| a.bucket)
        {
            self.buckets[b].spend(bytes as usize);
        }
    }

    fn flush_pending_acks(&mut self, now: Instant) {
        if self.pending_acks.is_empty() {
            return;
        }
        let acks = std::mem::take(&mut self.pending_acks);
        let hdr = self.header();
        for (rid, g) in acks {
            let Some(addr) = self.remotes.get(&g.participant).map(|p| p.addr) else {
                continue;
            };
            let Some(wp) = self
                .readers
                .get_mut(&rid)
                .and_then(|r| r.writers.get_mut(&g))
            else {
                continue;
            };
            let Some(an) = wp.acknack(rid, g.entity) else {
                continue;
            };
            // Samples in reassembly are repaired by fragment: the overtaken fragments, or all
            // missing ones once the sender has gone quiet on that sample.
            let mut nacks = Vec::new();
            for (&seq, ra) in wp.frags.iter_mut() {
                // Ask at most once per NACKFRAG_INTERVAL per sample: the writer answers
                // with a heartbeat that can overtake the fragments it re-sends.
                if ra
                    .nacked
                    .is_some_and(|t| now.saturating_duration_since(t) < NACKFRAG_INTERVAL)
                {
                    continue;
                }
                let all = now.saturating_duration_since(ra.last) >= FRAG_QUIET;
                if ra.missing(0, all).next().is_some() {
                    ra.nacked = Some(now);
                }
                let mut missing = ra.missing(0, all).peekable();
                for _ in 0..NACKFRAG_WINDOWS {
                    let Some(&base) = missing.peek() else {
                        break;
                    };
                    let mut bitmap = [0u32; 8];
                    let mut num_bits = 0u16;
                    while let Some(&n) = missing.peek() {
                        let i = n - base;
                        if i >= tether_wire::MAX_ACKNACK_BITS as u32 {
                            break;
                        }
                        bitmap[(i / 32) as usize] |= 1 << (i % 32);
                        num_bits = i as u16 + 1;
                        missing.next();
                    }
                    wp.nackfrag_count = wp.nackfrag_count.wrapping_add(1);
                    nacks.push(NackFragRepr {
                        reader: rid,
                        writer: g.entity,
                        seq,
                        base,
                        num_bits,
                        bitmap,
                        count: wp.nackfrag_count,
                    });
                }
            }
            let mut p = Packer::new(addr, hdr, self.cfg.max_datagram);
            p.push(
                &Submessage::AckNack(an),
                &mut self.transmits,
                &mut self.stats,
            );
            self.stats.acknacks_sent += 1;
            for n in nacks {
                p.push(
                    &Submessage::NackFrag(n),
                    &mut self.transmits,
                    &mut self.stats,
                );
                self.stats.nackfrags_sent += 1;
            }
            p.finish(&mut self.transmits, &mut self.stats);
        }
    }

    // ----- matching ----------------------------------------------------------------------

    // ----- security ----------------------------------------------------------------------

    /// A local endpoint as it appears on the wire: with security on, its topic is the
    /// topic's id and its type is folded into it (and so not announced).
    fn wire_info(&self, info: &EndpointInfo) -> EndpointInfo {
        match &self.cfg.security {
            Some(sec) => EndpointInfo {
                topic: sec.wire_topic(&info.topic, &info.type_name),
                type_name: String::new(),
                partitions: info.partitions.clone(),
                qos: info.qos,
            },
            None => info.clone(),
        }
    }

    /// Whether a local endpoint may match a remote one: always with security off; with it,
    /// only if the remote participant proved its identity and its credential grants what
    /// the match needs (publish for a remote writer, subscribe for a remote reader).
    /// Refusals on grants are reported once per pair and counted.
    fn permitted(&mut self, local: EntityId, remote: Guid, topic: &str, side: Side) -> bool {
        if self.cfg.security.is_none() {
            return true;
        }
        let Some(auth) = self
            .remotes
            .get(&remote.participant)
            .and_then(|p| p.auth.as_ref())
            .filter(|a| a.verified)
        else {
            return false;
        };
        let Some(cred) = auth.credential.as_ref() else {
            return false;
        };
        let (ok, needs) = match side {
            Side::LocalWriter => (cred.may_subscribe(topic), "subscribe"),
            Side::LocalReader => (cred.may_publish(topic), "publish"),
        };
        if !ok {
            self.stats.access_denied += 1;
            if self.denied.insert((local, remote)) {
                self.events.push_back(Event::AccessDenied {
                    local,
                    remote,
                    topic: topic.to_string(),
                    reason: format!(
                        "{} (serial {}) holds no grant to {needs} {topic}",
                        cred.name, cred.serial
                    ),
                });
            }
            return false;
        }
        true
    }

    /// Sends our AUTH to `pid`: credential, our challenge, our answer to its challenge.
    fn send_auth(&mut self, now: Instant, pid: ParticipantId) {
        let me = self.cfg.participant;
        let hdr = self.header();
        let Some(sec) = self.cfg.security.clone() else {
            return;
        };
        let Some(rp) = self.remotes.get_mut(&pid) else {
            return;
        };
        let addr = rp.addr;
        let Some(a) = rp.auth.as_mut() else { return };
        let response = a.theirs.map(|c| sec.answer(me, pid, &c));
        a.answered = a.theirs;
        a.sent = Some(now);
        let m = tether_wire::AuthRepr {
            to: pid,
            challenge: a.mine,
            response,
            verified_you: a.verified,
            you_verified_me: a.verified_us,
            credential: sec.credential_bytes(),
        };
        let mut dg = Vec::with_capacity(200 + m.credential.len());
        if DatagramBuilder::new(&mut dg, hdr)
            .push(&Submessage::Auth(m))
            .is_ok()
        {
            self.push_transmit(addr, Bytes::from(dg));
        }
    }

    fn on_auth(&mut self, now: Instant, pid: ParticipantId, m: tether_wire::AuthRepr<'_>) {
        let me = self.cfg.participant;
        let Some(sec) = self.cfg.security.clone() else {
            return; // security off: nothing to prove
        };
        if m.to != me {
            self.stats.auth_failed += 1;
            return;
        }
        let Some(rp) = self.remotes.get_mut(&pid) else {
            return;
        };
        let Some(a) = rp.auth.as_mut() else { return };
        let cred = match sec.check(m.credential, now) {
            Ok(c) => c,
            Err(e) => {
                self.stats.auth_failed += 1;
                if !a.reported {
                    a.reported = true;
                    self.events.push_back(Event::AuthenticationFailed {
                        participant: pid,
                        reason: format!("credential refused: {e}"),
                    });
                }
                return;
            }
        };
        if a.credential
            .as_ref()
            .is_some_and(|c| c.sign_public != cred.sign_public)
        {
            // Another identity under the same participant id: start over.
            a.verified = false;
            a.verified_us = false;
        }
        a.credential = Some(cred);
        let new_challenge = a.theirs != Some(m.challenge);
        a.theirs = Some(m.challenge);
        a.verified_us = m.verified_you;
        let mut newly = false;
        if let (Some(r), false) = (m.response, a.verified) {
            let signed = tether_wire::auth_signed_bytes(&a.mine, pid, me);
            let key = a
                .credential
                .as_ref()
                .map(|c| c.sign_public)
                .unwrap_or_default();
            if tether_crypto::Identity::verify(&key, &signed, &r) {
                a.verified = true;
                newly = true;
            } else {
                self.stats.auth_failed += 1;
                if !a.reported {
                    a.reported = true;
                    self.events.push_back(Event::AuthenticationFailed {
                        participant: pid,
                        reason:
                            "its answer to our challenge does not verify with its credential's key"
                                .into(),
                    });
                }
            }
        }
        // Answer whatever the sender still lacks: our answer to a new challenge, our
        // verdict, or word that we verified it (that word can be lost like any datagram).
        let verified = self
            .remotes
            .get(&pid)
            .and_then(|p| p.auth.as_ref())
            .is_some_and(|a| a.verified);
        if new_challenge || newly || !m.verified_you || (verified && !m.you_verified_me) {
            self.send_auth(now, pid);
        }
        if newly {
            let name = self
                .remotes
                .get(&pid)
                .and_then(|p| p.auth.as_ref())
                .and_then(|a| a.credential.as_ref())
                .map(|c| c.name.clone())
                .unwrap_or_default();
            self.events.push_back(Event::ParticipantAuthenticated {
                participant: pid,
                name,
            });
            // Match what it announced before it proved itself.
            let eps: Vec<(EntityId, RemoteEndpoint)> = self
                .remotes
                .get(&pid)
                .map(|p| p.endpoints.iter().map(|(k, v)| (*k, v.clone())).collect())
                .unwrap_or_default();
            for (eid, e) in eps {
                let g = Guid {
                    participant: pid,
                    entity: eid,
                };
                let (locals, side): (Vec<EntityId>, Side) = match e.kind {
                    EndpointKind::Reader => {
                        (self.writers.keys().copied().collect(), Side::LocalWriter)
                    }
                    EndpointKind::Writer => {
                        (self.readers.keys().copied().collect(), Side::LocalReader)
                    }
                };
                for l in locals {
                    self.try_match(now, l, g, &e.info, side);
                }
            }
        }
    }

    /// In a secure realm, opens a sample's sealed payload with its writer's key for the
    /// epoch it names. Refused samples are counted; a missing key is asked for (at most
    /// every 50 ms per writer) and the sample dropped (a reliable writer repairs it).
    /// Whether every local reader a sample of `writer` addressed to `reader` (or to all)
    /// would go to already holds number `seq`.
    fn held_everywhere(&self, writer: Guid, reader: EntityId, seq: u64) -> bool {
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

    fn unseal(&mut self, now: Instant, reader: EntityId, s: Sample) -> Option<Sample> {
        self.unseal_in(now, reader, s, false)
    }

    /// [`unseal`](Self::unseal) for a sample that arrived in a batch whose signature was
    /// verified (`batch_signed`): its own signature may then be the batch's.
    fn unseal_in(
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

    /// Moves `writer` to a new epoch: a fresh key, wrapped for every reader still matched.
    /// The old key never seals again (samples already sealed under it stay as they are, so
    /// their repairs still open for the readers that hold it).
    fn rekey(&mut self, writer: EntityId) {
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        w.rekey_due = false;
        let Some(old) = w.key.as_ref() else { return };
        let next = tether_crypto::SenderKey::generate(
            old.suite(),
            old.epoch().wrapping_add(1).max(1),
            &mut tether_crypto::OsRandom,
        );
        w.key = Some(std::sync::Arc::new(next));
        w.seals = 0;
        self.stats.rekeys += 1;
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

    /// Replaces the realm's revocation list: peers whose credentials it revokes lose their
    /// authentication and every match, and the writers they read move to a new epoch.
    pub fn set_revocations(&mut self, now: Instant, list: tether_crypto::RevocationList) {
        let Some(sec) = self.cfg.security.as_ref() else {
            return;
        };
        if list.verify(&sec.ca_public).is_err() {
            self.stats.auth_failed += 1;
            return;
        }
        let mut sec2 = (**sec).clone_for_revocations();
        sec2.revocations = Some(list);
        let sec2 = std::sync::Arc::new(sec2);
        self.cfg.security = Some(sec2.clone());
        let revoked: Vec<ParticipantId> = self
            .remotes
            .iter()
            .filter(|(_, p)| {
                p.auth
                    .as_ref()
                    .and_then(|a| a.credential.as_ref())
                    .is_some_and(|c| {
                        sec2.revocations
                            .as_ref()
                            .is_some_and(|r| r.contains(c.serial))
                    })
            })
            .map(|(id, _)| *id)
            .collect();
        for pid in revoked {
            let ids: Vec<EntityId> = self
                .remotes
                .get(&pid)
                .map(|p| p.endpoints.keys().copied().collect())
                .unwrap_or_default();
            // Forget its endpoints (unmatching them, re-keying writers it read) and its
            // identity; it stays refused, since its credential now fails every check.
            for e in ids {
                self.remove_remote_endpoint(pid, e);
            }
            if let Some(a) = self.remotes.get_mut(&pid).and_then(|p| p.auth.as_mut()) {
                a.verified = false;
                a.credential = None;
            }
            self.events.push_back(Event::AuthenticationFailed {
                participant: pid,
                reason: "its credential was revoked".into(),
            });
        }
        // Revocation is rare and urgent: the new epochs go out now.
        self.rekey_wanted = false;
        self.rekey_due_writers();
        let _ = now;
    }

    /// Sends `writer`'s current key, wrapped for remote `reader` (a matched, verified peer).
    fn send_key(&mut self, writer: EntityId, reader: Guid) {
        let me = self.cfg.participant;
        let Some(sec) = self.cfg.security.clone() else {
            return;
        };
        let Some(key) = self.writers.get(&writer).and_then(|w| w.key.clone()) else {
            return;
        };
        let Some(rp) = self.remotes.get(&reader.participant) else {
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
                    &mut tether_crypto::OsRandom,
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

    fn on_key(&mut self, pid: ParticipantId, k: tether_wire::KeyRepr<'_>) {
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
                self.keys.insert((g, k.epoch), Box::new(key));
                let held: Vec<u32> = self
                    .keys
                    .range((g, 0)..=(g, u32::MAX))
                    .map(|((_, e), _)| *e)
                    .collect();
                for e in &held[..held.len().saturating_sub(KEPT_EPOCHS)] {
                    self.keys.remove(&(g, *e));
                }
            }
            None => self.stats.open_failed += 1,
        }
    }

    fn on_key_request(&mut self, pid: ParticipantId, k: tether_wire::KeyRequestRepr) {
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

    /// Peers that have not finished authenticating get our AUTH again (lost datagrams).
    fn resend_auth(&mut self, now: Instant) {
        if self.cfg.security.is_none() {
            return;
        }
        let period = self.announce_step;
        let due: Vec<ParticipantId> = self
            .remotes
            .iter()
            .filter(|(_, p)| p.auth.as_ref().is_some_and(|a| a.resend_due(now, period)))
            .map(|(id, _)| *id)
            .collect();
        for pid in due {
            self.send_auth(now, pid);
        }
    }

    fn try_match(
        &mut self,
        now: Instant,
        local: EntityId,
        remote: Guid,
        rinfo: &EndpointInfo,
        side: Side,
    ) {
        let me = self.cfg.participant;
        let linfo = match side {
            Side::LocalWriter => self.writers.get(&local).map(|w| w.info.clone()),
            Side::LocalReader => self.readers.get(&local).map(|r| r.info.clone()),
        };
        let Some(linfo) = linfo else { return };
        if !self.permitted(local, remote, &linfo.topic, side) {
            return;
        }
        // Remote endpoints are known by their wire form (topic ids in a secure realm).
        let lwire = self.wire_info(&linfo);
        let (winfo, rinfo_) = match side {
            Side::LocalWriter => (&lwire, rinfo),
            Side::LocalReader => (rinfo, &lwire),
        };
        match compatible(winfo, rinfo_) {
            Compat::OutOfScope => {}
            Compat::Incompatible(ms) => {
                for m in ms {
                    if self.reported.insert((local, remote, m.policy)) {
                        self.events
                            .push_back(Event::IncompatibleQos(IncompatibleQos {
                                topic: linfo.topic.clone(),
                                local: Guid {
                                    participant: me,
                                    entity: local,
                                },
                                local_kind: match side {
                                    Side::LocalWriter => EndpointKind::Writer,
                                    Side::LocalReader => EndpointKind::Reader,
                                },
                                remote,
                                policy: m.policy,
                                offered: m.offered,
                                requested: m.requested,
                            }));
                    }
                }
            }
            Compat::Match { reliable } => match side {
                Side::LocalWriter => self.match_writer_reader(now, local, remote, rinfo, reliable),
                Side::LocalReader => {
                    let Some(r) = self.readers.get_mut(&local) else {
                        return;
                    };
                    if r.writers.contains_key(&remote) {
                        return;
                    }
                    r.writers.insert(
                        remote,
                        WriterProxy::new(reliable, rinfo.qos.liveliness_lease(), now, false),
                    );
                    if r.deadline_at.is_none() {
                        if let Some(d) = r.info.qos.deadline_period() {
                            r.deadline_at = Some(after(now, d));
                        }
                    }
                    self.remote_writer_readers
                        .entry(remote)
                        .or_default()
                        .push(local);
                    self.events.push_back(Event::Matched {
                        local,
                        remote,
                        topic: linfo.topic.clone(),
                    });
                }
            },
        }
    }

    /// A local writer meets a remote reader.
    fn match_writer_reader(
        &mut self,
        now: Instant,
        writer: EntityId,
        reader: Guid,
        rinfo: &EndpointInfo,
        reliable: bool,
    ) {
        let Some(addr) = self.remotes.get(&reader.participant).map(|p| p.addr) else {
            return;
        };
        let hdr = self.header();
        let max_dg = self.cfg.max_datagram;
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        if w.readers.contains_key(&reader) {
            return;
        }
        let transient = rinfo.qos.durability_kind() == tether_wire::Durability::TransientLocal;
        let start = if transient {
            w.first_available()
        } else if w.asyncw.is_some() {
            // Samples still waiting for the sender go to the new reader too.
            w.last_sent() + 1
        } else {
            w.next_seq
        };
        w.readers.insert(
            reader,
            ReaderProxy {
                reliable,
                start,
                acked: 0,
                last_count: None,
                last_nackfrag: None,
                local: false,
                wrapped: None,
            },
        );
        w.rebuild_dests();
        let secure = w.key.is_some();
        let single = max_dg.saturating_sub(DATA_OVERHEAD + HEARTBEAT_LEN);
        let mut big: Vec<(u64, u64, Bytes)> = Vec::new();
        let mut p = Packer::new(addr, hdr, max_dg);
        if transient {
            for c in w.history.iter() {
                let payload = wire_form(
                    &self.cfg,
                    &mut self.stats,
                    writer,
                    c.seq,
                    c.timestamp_ns,
                    &c.payload,
                );
                if payload.len() > single {
                    big.push((c.seq, c.timestamp_ns, payload));
                    continue;
                }
                p.push(
                    &Submessage::Data(DataRepr {
                        writer,
                        reader: reader.entity,
                        seq: c.seq,
                        timestamp_ns: c.timestamp_ns,
                        payload: &payload,
                    }),
                    &mut self.transmits,
                    &mut self.stats,
                );
            }
        }
        if reliable {
            w.hb_count = w.hb_count.wrapping_add(1);
            p.push(
                &Submessage::Heartbeat(HeartbeatRepr {
                    writer,
                    reader: reader.entity,
                    first: start,
                    last: w.last_sent(),
                    count: w.hb_count,
                    final_: false,
                }),
                &mut self.transmits,
                &mut self.stats,
            );
            self.stats.heartbeats_sent += 1;
            w.heartbeat_by(after(now, self.cfg.heartbeat_period));
        }
        let topic = w.info.topic.clone();
        if secure {
            // The key before anything sealed under it.
            self.send_key(writer, reader);
        }
        p.finish(&mut self.transmits, &mut self.stats);
        self.events.push_back(Event::Matched {
            local: writer,
            remote: reader,
            topic,
        });
        for (seq, ts, payload) in big {
            self.send_sample(addr, writer, reader.entity, seq, ts, &payload, None, None);
        }
    }

    /// A local writer meets a local reader: samples go straight into the reader's cache.
    fn try_match_local(&mut self, now: Instant, writer: EntityId, reader: EntityId) {
        let me = self.cfg.participant;
        let (Some(w), Some(r)) = (self.writers.get(&writer), self.readers.get(&reader)) else {
            return;
        };
        let wg = Guid {
            participant: me,
            entity: writer,
        };
        let rg = Guid {
            participant: me,
            entity: reader,
        };
        match compatible(&w.info, &r.info) {
            Compat::OutOfScope => {}
            Compat::Incompatible(ms) => {
                let topic = w.info.topic.clone();
                for m in ms {
                    for (local, kind, remote) in [
                        (writer, EndpointKind::Writer, rg),
                        (reader, EndpointKind::Reader, wg),
                    ] {
                        if self.reported.insert((local, remote, m.policy)) {
                            self.events
                                .push_back(Event::IncompatibleQos(IncompatibleQos {
                                    topic: topic.clone(),
                                    local: Guid {
                                        participant: me,
                                        entity: local,
                                    },
                                    local_kind: kind,
                                    remote,
                                    policy: m.policy,
                                    offered: m.offered.clone(),
                                    requested: m.requested.clone(),
                                }));
                        }
                    }
                }
            }
            Compat::Match { reliable } => {
                let transient =
                    r.info.qos.durability_kind() == tether_wire::Durability::TransientLocal;
                let lease = w.info.qos.liveliness_lease();
                let topic = w.info.topic.clone();
                let Some(w) = self.writers.get_mut(&writer) else {
                    return;
                };
                let start = if transient {
                    w.first_available()
                } else {
                    w.next_seq
                };
                w.readers.insert(
                    rg,
                    ReaderProxy {
                        reliable,
                        start,
                        acked: u64::MAX,
                        last_count: None,
                        last_nackfrag: None,
                        local: true,
                        wrapped: None,
                    },
                );
                w.rebuild_dests();
                let backlog: Vec<Sample> = if transient {
                    let key = w.key.clone();
                    let secure = w.prot.is_some();
                    let wid = tether_crypto::sample::endpoint_id(me.0, writer.0);
                    w.history
                        .iter()
                        .filter_map(|c| {
                            // History holds sealed samples in a secure realm: our own
                            // readers get them opened.
                            let payload = if secure {
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
                            Some(Sample {
                                writer: wg,
                                seq: c.seq,
                                timestamp_ns: c.timestamp_ns,
                                payload,
                            })
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let Some(r) = self.readers.get_mut(&reader) else {
                    return;
                };
                let mut wp = WriterProxy::new(reliable, lease, now, true);
                wp.expected = Some(start);
                r.writers.insert(wg, wp);
                for (local, remote) in [(writer, rg), (reader, wg)] {
                    self.events.push_back(Event::Matched {
                        local,
                        remote,
                        topic: topic.clone(),
                    });
                }
                for s in backlog {
                    self.on_data(now, reader, s);
                }
            }
        }
    }

    // ----- time --------------------------------------------------------------------------

    /// True (once) if a timer may have become due earlier than the last
    /// [`poll_timeout`](Self::poll_timeout) said: a driver that sleeps until then should
    /// re-read it. A plain `write` that arms no new timer leaves it false.
    pub fn take_timers_changed(&mut self) -> bool {
        std::mem::take(&mut self.timers_changed)
    }

    /// When `handle_timeout` wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.next_announce.min(self.next_housekeeping);
        if let Some(x) = self.rekey_at {
            t = t.min(x);
        }
        for w in self.writers.values() {
            for x in [w.next_hb, w.deadline_at, w.batch_deadline]
                .into_iter()
                .flatten()
            {
                t = t.min(x);
            }
        }
        for r in self.readers.values() {
            if let Some(x) = r.deadline_at {
                t = t.min(x);
            }
        }
        Some(t)
    }

    /// Runs every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.timers_changed = true;
        if now >= self.next_announce {
            let dgrams = self.announcement(None);
            for a in self.all_destinations() {
                for d in &dgrams {
                    self.push_transmit(a, d.clone());
                }
            }
            let period = self.announce_period();
            self.announce_step = (self.announce_step * 2).min(period);
            self.next_announce = after(now, self.announce_step);
            self.resend_auth(now);
        }
        if now >= self.next_housekeeping {
            self.housekeeping(now);
            self.next_housekeeping = after(now, HOUSEKEEPING);
        }
        self.schedule_rekeys(now);
        if self.rekey_at.is_some_and(|t| now >= t) {
            self.rekey_due_writers();
        }
        let due: Vec<EntityId> = self
            .writers
            .values()
            .filter(|w| w.batch_deadline.is_some_and(|t| now >= t))
            .map(|w| w.id)
            .collect();
        for w in due {
            self.flush_batch(now, w);
        }
        let hdr = self.header();
        let max_dg = self.cfg.max_datagram;
        let hb_period = self.cfg.heartbeat_period;
        let fanout = (
            self.fanout_gen,
            multicast_peers(&self.cfg, self.grouped),
            self.cfg.multicast_min,
        );
        let ack_iv = ack_interval(&self.cfg);
        for w in self.writers.values_mut() {
            if w.next_hb.is_some_and(|t| now >= t) {
                if w.has_unacked() {
                    // Samples not yet announced get a heartbeat (final unless it is time to
                    // ask); with nothing new, one goes out only to ask.
                    let last = w.last_sent();
                    let ask = w.asks_acks(now, ack_iv);
                    if last != w.hb_announced || ask {
                        w.hb_announced = last;
                        let first = w.first_available();
                        let hb = crate::endpoint::next_heartbeat(
                            w.id,
                            &mut w.hb_count,
                            &mut w.acks_asked,
                            now,
                            ask,
                            first,
                            last,
                        );
                        heartbeat_all(
                            w,
                            hb,
                            hdr,
                            &self.remotes,
                            fanout,
                            &mut self.transmits,
                            &mut self.stats,
                        );
                        w.next_hb = Some(after(now, hb_period));
                    } else {
                        // Nothing to announce, and not yet time to ask: sleep until it is
                        // (a write brings the heartbeat forward again).
                        let ask = w.acks_asked.map_or(now, |t| after(t, ack_iv));
                        w.next_hb = Some(ask.max(after(now, hb_period)));
                    }
                } else {
                    w.next_hb = None;
                    w.acks_wanted = false;
                }
            }
            if let (Some(t), Some(d)) = (w.deadline_at, w.info.qos.deadline_period()) {
                if now >= t {
                    self.events.push_back(Event::DeadlineMissed {
                        endpoint: w.id,
                        side: DeadlineSide::Offered,
                        topic: w.info.topic.clone(),
                    });
                    w.deadline_at = Some(after(now, d));
                }
            }
            self.stats.expired += w.expire(now);
        }
        let _ = max_dg;
        for r in self.readers.values_mut() {
            if let (Some(t), Some(d)) = (r.deadline_at, r.info.qos.deadline_period()) {
                if now >= t {
                    self.events.push_back(Event::DeadlineMissed {
                        endpoint: r.id,
                        side: DeadlineSide::Requested,
                        topic: r.info.topic.clone(),
                    });
                    r.deadline_at = Some(after(now, d));
                }
            }
        }
    }

    fn housekeeping(&mut self, now: Instant) {
        let expired: Vec<ParticipantId> = self
            .remotes
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.last_heard) > p.lease)
            .map(|(id, _)| *id)
            .collect();
        for p in expired {
            self.remove_participant(p);
        }
        let timeout = self.cfg.reassembly_timeout;
        for r in self.readers.values_mut() {
            for wp in r.writers.values_mut() {
                // Samples delivered or skipped meanwhile, and samples gone quiet, are dropped.
                let before = wp.frags.len();
                let (reliable, expected, last) = (wp.reliable, wp.expected, wp.last_delivered);
                wp.frags.retain(|seq, ra| {
                    let live = if reliable {
                        expected.is_none_or(|e| *seq >= e)
                    } else {
                        *seq > last
                    };
                    live && now.saturating_duration_since(ra.last) < timeout
                });
                self.stats.reassembly_expired += (before - wp.frags.len()) as u64;
            }
            for (g, wp) in r.writers.iter_mut() {
                if wp.local {
                    continue;
                }
                if let Some(lease) = wp.lease {
                    // Automatic liveliness: any datagram from the writer's participant counts.
                    let heard = self
                        .remotes
                        .get(&g.participant)
                        .map_or(wp.last_heard, |p| p.last_heard.max(wp.last_heard));
                    let alive = now.saturating_duration_since(heard) <= lease;
                    if alive != wp.alive {
                        wp.alive = alive;
                        self.events.push_back(Event::LivelinessChanged {
                            reader: r.id,
                            writer: *g,
                            alive,
                        });
                    }
                }
            }
        }
    }

    /// Announcements must come often enough to assert the shortest liveliness lease.
    fn announce_period(&self) -> Duration {
        let min_lease = self
            .writers
            .values()
            .filter_map(|w| w.info.qos.liveliness_lease())
            .min();
        let p = self.cfg.announce_period.min(self.cfg.lease / 3);
        match min_lease {
            Some(l) => p.min(l / 3).max(Duration::from_millis(1)),
            None => p,
        }
    }

    // ----- output ------------------------------------------------------------------------

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let t = self.transmits.pop_front()?;
        Some(self.seal_for_peer(t))
    }

    /// Pairwise mode ([`Security::with_pairwise`](crate::Security::with_pairwise)): seals a
    /// datagram once more for the one peer it goes to, if both sides have verified each other
    /// (`docs/wire.md#sealed`). Otherwise (the normal case) returns it as it is.
    fn seal_for_peer(&mut self, t: Transmit) -> Transmit {
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
            head: Head(HeadRepr::Shared(Bytes::from(v))),
            body: Bytes::new(),
        }
    }

    /// Opens a datagram sealed for us alone by `pid` (pairwise mode) and handles what it
    /// held. Anything that does not open is dropped and counted.
    fn on_sealed(
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

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn push_transmit(&mut self, dest: SocketAddr, payload: Bytes) {
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += payload.len() as u64;
        self.transmits.push_back(Transmit {
            dest,
            head: payload.into(),
            body: Bytes::new(),
        });
    }

    /// Discovery targets plus every known participant, without duplicates.
    fn all_destinations(&self) -> Vec<SocketAddr> {
        let mut s: BTreeSet<SocketAddr> = self.targets.clone();
        s.extend(self.remotes.values().map(|p| p.addr));
        s.into_iter().collect()
    }

    /// Datagrams announcing this participant and its endpoints (`only`: one endpoint).
    fn announcement(&self, only: Option<EntityId>) -> Vec<Bytes> {
        let mut out = Vec::new();
        let hdr = self.header();
        let part = Submessage::Participant(ParticipantRepr {
            lease_ms: u32::try_from(self.cfg.lease.as_millis())
                .unwrap_or(u32::MAX)
                .max(1),
            name: &self.cfg.name,
            data_group: self.cfg.data_group,
        });
        let mut buf = Vec::new();
        let mut b = DatagramBuilder::new(&mut buf, hdr);
        let _ = b.push(&part);
        let mut count = 0;
        let eps = self
            .writers
            .values()
            .map(|w| (w.id, EndpointKind::Writer, &w.info))
            .chain(
                self.readers
                    .values()
                    .map(|r| (r.id, EndpointKind::Reader, &r.info)),
            )
            .filter(|(id, _, _)| only.is_none_or(|o| o == *id));
        let mut tmp = Vec::new();
        for (id, kind, info) in eps {
            let wire = self.wire_info(info);
            let info = &wire;
            let parts: Vec<&str> = info.partitions.iter().map(String::as_str).collect();
            let e = Submessage::Endpoint(EndpointRepr {
                entity: id,
                kind,
                qos: info.qos.to_repr(),
                topic: &info.topic,
                type_name: &info.type_name,
                partitions: StrList::Slice(&parts),
            });
            // Measure, then start a new datagram if it would not fit.
            tmp.clear();
            let mut m = DatagramBuilder::new(&mut tmp, hdr);
            if m.push(&e).is_err() {
                continue;
            }
            let elen = tmp.len() - HEADER_LEN;
            if buf.len() + elen > self.cfg.max_datagram && count > 0 {
                out.push(Bytes::from(std::mem::take(&mut buf)));
                let mut nb = DatagramBuilder::new(&mut buf, hdr);
                let _ = nb.push(&part);
                count = 0;
            }
            buf.extend_from_slice(&tmp[HEADER_LEN..]);
            count += 1;
        }
        out.push(Bytes::from(buf));
        out
    }

    fn announce_endpoint(&mut self, id: EntityId) {
        let dgrams = self.announcement(Some(id));
        for a in self.all_destinations() {
            for d in &dgrams {
                self.push_transmit(a, d.clone());
            }
        }
    }
}

/// After samples entered a reader's cache: count them, restart its deadline, and signal it
/// once until the application has taken everything.
fn note_delivered(
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
fn heard(
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
/// order, through the reorder buffer). Returns how many samples reached the cache.
#[allow(clippy::too_many_arguments)]
fn accept(
    cache: &mut crate::endpoint::Cache,
    qos: &Qos,
    wp: &mut WriterProxy,
    reader: EntityId,
    s: Sample,
    now: Instant,
    input: u64,
    stats: &mut Stats,
    events: &mut VecDeque<Event>,
) -> u64 {
    if !wp.reliable {
        if s.seq <= wp.last_delivered {
            stats.duplicates += 1;
            return 0;
        }
        let lost = if wp.last_delivered > 0 {
            s.seq - wp.last_delivered - 1
        } else {
            0
        };
        if lost > 0 {
            stats.lost += lost;
            events.push_back(Event::SamplesLost {
                reader,
                writer: s.writer,
                count: lost,
            });
        }
        wp.last_delivered = s.seq;
        if cache.push(s, now, input) {
            1
        } else {
            stats.rejected_full += 1;
            0
        }
    } else if wp.expected == Some(s.seq)
        && wp.pending.is_empty()
        && wp.gaps.is_empty()
        && cache.has_room(s.payload.len())
    {
        // In order, nothing waiting: straight into the cache.
        wp.expected = Some(s.seq + 1);
        cache.push(s, now, input);
        1
    } else {
        wp.buffer(s, qos, stats);
        wp.drain(cache, now, input).0
    }
}

/// Records `count` from a HEARTBEAT, ACKNACK or NACK_FRAG if it is newer than the last one
/// seen (serial-number order, so the counter may wrap); false for a stale or repeated one.
fn newer(last: &mut Option<u32>, count: u32) -> bool {
    // Serial-number order (RFC 1982): newer iff count is 1..2^31 steps ahead of the last.
    if last.is_some_and(|c| count.wrapping_sub(c) as i32 <= 0) {
        return false;
    }
    *last = Some(count);
    true
}

/// What a sample from a writer's history goes on the wire as when it travels alone (not
/// in a batch): itself, unless it is batch-signed, in which case it gets its own signature
/// (deterministic, so every repair of it is the same bytes).
fn wire_form(
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
fn multicast_peers(cfg: &Config, grouped: usize) -> usize {
    match cfg.security.as_deref() {
        Some(s) if s.pairwise => 0,
        _ => grouped,
    }
}

/// Where a writer sends one sample for its matched participants `dests`: each one's address,
/// except that participants sharing a data group, `min` or more of them, get one datagram
/// to the group (`true`). `grouped`: how many remotes announced a group (0: all unicast).
fn fanout_addrs(
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

/// Queues a heartbeat from `w` (its current first and last sent sequence numbers) for every
/// remote participant where it has a reliable matched reader. Participants that take data
/// from a group get it where they get the data, one datagram for the group: a heartbeat
/// sent by unicast could overtake, at the reader, a sample still queued on the group's
/// socket, and the reader would ask again for a sample it is about to receive.
fn heartbeat_all(
    w: &mut Writer,
    hb: HeartbeatRepr,
    hdr: Header,
    remotes: &BTreeMap<ParticipantId, Box<RemoteParticipant>>,
    key: FanoutKey,
    transmits: &mut VecDeque<Transmit>,
    stats: &mut Stats,
) {
    let hb = Submessage::Heartbeat(hb);
    let mut dg = Vec::new();
    if DatagramBuilder::new(&mut dg, hdr).push(&hb).is_err() {
        return;
    }
    let dg = Bytes::from(dg);
    let (_, grouped, min) = key;
    let mut send = |dest: SocketAddr, group: bool| {
        stats.heartbeats_sent += 1;
        stats.datagrams_sent += 1;
        stats.heartbeats_multicast += u64::from(group);
        stats.bytes_sent += dg.len() as u64;
        transmits.push_back(Transmit {
            dest,
            head: dg.clone().into(),
            body: Bytes::new(),
        });
    };
    if w.reliable_dests.len() == w.dests.len() {
        // Every destination has a reliable reader (the usual case): the heartbeat goes
        // where the data goes, by the plan the writes keep.
        for &(dest, group) in w.fanout(key, |d| fanout_addrs(remotes, d, grouped, min)) {
            send(dest, group);
        }
    } else {
        for (dest, group) in fanout_addrs(remotes, &w.reliable_dests, grouped, min) {
            send(dest, group);
        }
    }
}

/// `now + d`, saturating a century ahead: `Instant + Duration` panics on overflow, and a
/// deadline, lease or period may be "forever".
fn after(now: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(d.min(CENTURY)).unwrap_or(now)
}

fn flush_gap(
    gap: &mut Option<(u64, u64)>,
    packer: &mut Packer,
    out: &mut VecDeque<Transmit>,
    stats: &mut Stats,
    writer: EntityId,
    reader: EntityId,
) {
    if let Some((start, end)) = gap.take() {
        packer.push(
            &Submessage::Gap(GapRepr {
                writer,
                reader,
                start,
                end,
            }),
            out,
            stats,
        );
        stats.gaps_sent += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::newer;
    use super::*;

    /// A participant in a realm of its own, allowed to publish anything (encrypt mode),
    /// with one writer on `/t` of QoS `qos`.
    fn secure_writer(now: Instant, qos: Qos) -> (Participant, EntityId) {
        let ca = tether_crypto::CaKey::generate();
        let id = tether_crypto::Identity::generate();
        let cred = tether_crypto::Credential::issue(
            &ca,
            "w",
            1,
            1_000,
            4_000_000_000,
            id.sign_public(),
            id.kx_public(),
            vec!["/**".into()],
            vec![],
        )
        .unwrap();
        let mut cfg = Config::new(0, ParticipantId(7));
        cfg.security = Some(std::sync::Arc::new(crate::Security::new(
            id,
            cred,
            ca.public(),
            tether_crypto::RealmSecret::from_bytes([3; 32]),
            None,
            now,
            2_000_000_000,
        )));
        let mut p = Participant::new(cfg, now);
        let info = EndpointInfo {
            topic: "/t".into(),
            type_name: "t".into(),
            partitions: vec![],
            qos,
        };
        let wid = p.create_writer(now, info).unwrap();
        (p, wid)
    }

    /// A secure writer seals each sample into the buffer of one its history let go of, once
    /// nothing else holds it: no allocation, no zeroing per sample in steady state.
    #[test]
    fn sealed_buffers_are_taken_back_from_the_history() {
        let now = Instant::now();
        let (mut p, wid) = secure_writer(now, Qos::new().keep_last(2));
        let ptr = |p: &Participant| p.writers[&wid].history.back().unwrap().payload.as_ptr();
        for k in 0..2u64 {
            p.write(now, wid, k, Bytes::from(vec![k as u8; 4096]))
                .unwrap();
        }
        let first = p.writers[&wid].history.front().unwrap().payload.as_ptr();
        // Room for the next sample: the oldest leaves and its buffer becomes the spare
        // (alive, so the allocator cannot hand out the same address by chance).
        let w = p.writers.get_mut(&wid).unwrap();
        assert!(w.spare.is_none());
        assert!(w.make_room(4096));
        assert_eq!(w.spare.as_ref().map(|v| v.as_ptr()), Some(first));
        p.write(now, wid, 2, Bytes::from(vec![2u8; 4096])).unwrap();
        assert_eq!(ptr(&p), first, "sealed into the buffer taken back");
        assert!(p.writers[&wid].spare.is_none());
        // A buffer something still holds is not taken back.
        let held = p.writers[&wid].history.front().unwrap().payload.clone();
        p.write(now, wid, 3, Bytes::from(vec![3u8; 4096])).unwrap();
        assert!(p.writers[&wid].spare.is_none());
        assert_ne!(ptr(&p), held.as_ptr());
        assert_eq!(held.len(), 1 + 4 + 4096 + 16, "intact while held");
    }

    /// A secure writer that keeps no history (best effort, volatile) seals each sample
    /// into the last one's buffer once no datagram holds it.
    #[test]
    fn a_writer_without_history_reuses_its_last_sealed_buffer() {
        let now = Instant::now();
        let (mut p, wid) = secure_writer(now, Qos::new().best_effort().volatile());
        p.write(now, wid, 0, Bytes::from(vec![0u8; 4096])).unwrap();
        let first = p.writers[&wid].last_sealed.as_ref().map(|b| b.as_ptr());
        assert!(first.is_some(), "the sealed sample is kept");
        assert!(p.writers[&wid].history.is_empty());
        p.write(now, wid, 1, Bytes::from(vec![1u8; 4096])).unwrap();
        let second = p.writers[&wid].last_sealed.clone().unwrap();
        assert_eq!(Some(second.as_ptr()), first, "sealed into the same buffer");
        // While a datagram (here: this clone) holds it, the next seal takes a new one and
        // leaves it intact.
        p.write(now, wid, 2, Bytes::from(vec![2u8; 4096])).unwrap();
        let third = p.writers[&wid].last_sealed.as_ref().map(|b| b.as_ptr());
        assert_ne!(third, Some(second.as_ptr()));
        assert_eq!(second.len(), 1 + 4 + 4096 + 16, "intact while held");
    }

    #[test]
    fn counts_in_serial_number_order() {
        let mut last = None;
        assert!(newer(&mut last, 5));
        assert!(!newer(&mut last, 5), "repeated");
        assert!(!newer(&mut last, 4), "stale");
        assert!(newer(&mut last, 6));
        let mut last = Some(u32::MAX);
        assert!(newer(&mut last, 0), "the counter wraps");
        assert!(!newer(&mut last, u32::MAX), "older than the wrap");
    }
}

#[derive(Debug, Clone, Copy)]
enum Side {
    LocalWriter,
    LocalReader,
}

enum Compat {
    OutOfScope,
    Incompatible(Vec<Mismatch>),
    Match { reliable: bool },
}

fn compatible(w: &EndpointInfo, r: &EndpointInfo) -> Compat {
    if w.topic != r.topic || !w.shares_partition(r) {
        return Compat::OutOfScope;
    }
    let mut ms = check_compatible(&w.qos, &r.qos);
    if !w.type_name.is_empty() && !r.type_name.is_empty() && w.type_name != r.type_name {
        ms.push(Mismatch {
            policy: QosPolicy::TypeName,
            offered: w.type_name.clone(),
            requested: r.type_name.clone(),
        });
    }
    if !ms.is_empty() {
        return Compat::Incompatible(ms);
    }
    Compat::Match {
        reliable: w.qos.is_reliable() && r.qos.is_reliable(),
    }
}

/// Packs submessages for one destination into as few datagrams as fit.
struct Packer {
    dest: SocketAddr,
    hdr: Header,
    max: usize,
    buf: Vec<u8>,
    tmp: Vec<u8>,
}

impl Packer {
    fn new(dest: SocketAddr, hdr: Header, max: usize) -> Self {
        let mut buf = Vec::new();
        DatagramBuilder::new(&mut buf, hdr);
        Packer {
            dest,
            hdr,
            max,
            buf,
            tmp: Vec::new(),
        }
    }

    fn push(&mut self, m: &Submessage<'_>, out: &mut VecDeque<Transmit>, stats: &mut Stats) {
        let mut b = DatagramBuilder::new(&mut self.tmp, self.hdr);
        if b.push(m).is_err() {
            return;
        }
        let body_len = self.tmp.len() - HEADER_LEN;
        if self.buf.len() + body_len > self.max && self.buf.len() > HEADER_LEN {
            self.flush(out, stats);
        }
        self.buf.extend_from_slice(&self.tmp[HEADER_LEN..]);
    }

    fn flush(&mut self, out: &mut VecDeque<Transmit>, stats: &mut Stats) {
        if self.buf.len() <= HEADER_LEN {
            return;
        }
        let dg = Bytes::copy_from_slice(&self.buf);
        self.buf.truncate(HEADER_LEN);
        stats.datagrams_sent += 1;
        stats.bytes_sent += dg.len() as u64;
        out.push_back(Transmit {
            dest: self.dest,
            head: dg.into(),
            body: Bytes::new(),
        });
    }

    fn finish(mut self, out: &mut VecDeque<Transmit>, stats: &mut Stats) {
        self.flush(out, stats);
    }
}

/// One sample on its way to one destination: builds its DATA, or one of its fragments.
struct Outgoing<'a> {
    hdr: Header,
    /// Largest payload sent whole in one DATA.
    single: usize,
    frag_size: u16,
    dest: SocketAddr,
    writer: EntityId,
    reader: EntityId,
    seq: u64,
    timestamp_ns: u64,
    payload: &'a Bytes,
}

impl Outgoing<'_> {
    fn frag_count(&self) -> u32 {
        if self.payload.len() <= self.single {
            1
        } else {
            (self.payload.len() as u32).div_ceil(self.frag_size as u32)
        }
    }

    /// The DATA (when the sample fits one datagram; `n` is then 0) or fragment `n`, with
    /// `hb` in front. Counted in `stats`.
    fn datagram(&self, n: u32, hb: Option<&HeartbeatRepr>, stats: &mut Stats) -> Transmit {
        let mut head = Vec::with_capacity(128);
        let mut b = DatagramBuilder::new(&mut head, self.hdr);
        if let Some(hb) = hb {
            let _ = b.push(&Submessage::Heartbeat(*hb));
        }
        let body = if self.payload.len() <= self.single {
            let data = DataRepr {
                writer: self.writer,
                reader: self.reader,
                seq: self.seq,
                timestamp_ns: self.timestamp_ns,
                payload: &[],
            };
            let _ = b.push_data_head(&data, self.payload.len());
            self.payload.clone()
        } else {
            let fs = self.frag_size as usize;
            let start = (n as usize * fs).min(self.payload.len());
            let end = (start + fs).min(self.payload.len());
            let body = self.payload.slice(start..end);
            let f = DataFragRepr {
                writer: self.writer,
                reader: self.reader,
                seq: self.seq,
                timestamp_ns: self.timestamp_ns,
                sample_size: self.payload.len() as u32,
                frag_size: self.frag_size,
                frag_num: n,
                payload: &body,
            };
            let _ = b.push_frag_head(&f);
            body
        };
        stats.datagrams_sent += 1;
        stats.bytes_sent += (head.len() + body.len()) as u64;
        Transmit {
            dest: self.dest,
            head: Head::copy_from_slice(&head),
            body,
        }
    }
}
