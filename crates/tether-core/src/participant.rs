//! The participant: a thin engine that owns the parts and dispatches inputs to them.

mod timers;

use crate::discovery::Peers;
use crate::matching::Matches;
use crate::security::keys::KeyStore;
use crate::writer::schedule::Scheduler;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_wire::{
    DATA_FIXED_LEN, EndpointKind, EntityId, HEADER_LEN, Header, ParticipantId,
    SUBMESSAGE_HEADER_LEN, Submessage, SubmessageKind, counts_as_received,
};

use crate::endpoint::EndpointInfo;
use crate::event::{DeadlineSide, Event, Guid, Sample, Stats};
use crate::reader::state::Reader;
use crate::writer::state::{AsyncState, Writer};

use crate::discovery::RemoteEndpoint;
use crate::error::CreateError;
use crate::matching::Side;
use crate::reliability::{ack_interval, heartbeat_all};
use crate::security::control::{Gate, Origin, needs_authentication};
use crate::transmit::{Tail, Transmit};
use crate::writer::multicast_peers;

/// Bytes a DATA submessage adds around its payload (datagram header included).
pub const DATA_OVERHEAD: usize = HEADER_LEN + SUBMESSAGE_HEADER_LEN + DATA_FIXED_LEN;

/// A heartbeat submessage, header included.
pub(crate) const HEARTBEAT_LEN: usize = SUBMESSAGE_HEADER_LEN + 28;

/// Longest participant lease honoured, whatever a peer announces.
pub const MAX_LEASE: Duration = Duration::from_secs(300);

/// How often leases and liveliness are checked.
pub(crate) const HOUSEKEEPING: Duration = Duration::from_millis(50);

/// How late the timers may run before the participant takes it that it was not running
/// (its process stopped, its thread starved, its host suspended): it heard nothing then, so
/// that silence is not held against its peers ([`Stats::stalls`](crate::Stats::stalls)).
/// Housekeeping is due every [`HOUSEKEEPING`], so a driver never leaves it this long.
pub(crate) const STALL: Duration = Duration::from_secs(1);

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
    /// Largest datagram the transport carries, and the size used for peers on this host.
    /// Peers elsewhere start at what `path_mtu` carries and are probed up to this
    /// ([`path`](crate::path)).
    pub max_datagram: usize,
    /// MTU assumed of links to other hosts until probes say more (1,500: Ethernet, Wi-Fi).
    pub path_mtu: usize,
    /// Probe paths to other hosts for larger (or, on black holes, smaller) datagrams. Needs
    /// a transport that sets the don't-fragment bit; off otherwise.
    pub probe_paths: bool,
    /// This host's own addresses: peers there are on this host and take `max_datagram`.
    pub local_addrs: Vec<std::net::IpAddr>,
    /// Most remote participants remembered.
    pub max_participants: usize,
    /// Most participants held before they are known (`docs/wire.md#validation`): heard
    /// from at an address that has not yet answered our challenge (each for at most 5 s),
    /// and in a secure realm, validated but not yet authenticated (each for at most 10 s).
    /// The oldest goes when a new one comes, but never for one at its own address: an
    /// address holds at most [`MAX_IDS_PER_ADDRESS`](crate::MAX_IDS_PER_ADDRESS) of them,
    /// and a new id there is refused.
    pub max_pending_participants: usize,
    /// Most endpoints remembered per remote participant.
    pub max_endpoints_per_participant: usize,
    /// Largest sample a writer accepts and a reader reassembles. Samples larger than one
    /// datagram are fragmented.
    pub max_sample_size: usize,
    /// Most bytes each reader may hold in samples being reassembled, from all its writers
    /// together: what their fragments brought (plus 64 bytes for each kept aside because
    /// it overtook a missing one), never what a first fragment claims. Twice
    /// `max_reassembly_bytes_per_writer` by default, so one writer at its cap leaves room
    /// for a sample of `max_sample_size` from another.
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
    /// Reliable keep-all writers whose QoS does not say otherwise
    /// ([`Qos::inactive_after`](crate::Qos::inactive_after)) mark a reader inactive once it
    /// has owed acknowledgements and sent none for this long, and stop keeping their history
    /// for it (`writer/inactive.rs`). `None`: DDS's strict behaviour (a stalled reader holds
    /// the writer until its lease ends).
    pub inactive_after: Option<Duration>,
    /// Control how much is in flight on each path to another host, from what it delivers
    /// ([`congestion`](crate::congestion)); off: writers send as fast as they are given
    /// samples.
    pub congestion_control: bool,
    /// Most bytes one remote writer may hold in a reader's samples being reassembled (its
    /// share of `max_reassembly_bytes`, which bounds all writers together; the smaller of
    /// the two applies). Its further fragments are refused until some of its samples
    /// complete or expire. The default, `max_sample_size` and a sixteenth, takes one sample
    /// of `max_sample_size` even when its fragments all come out of order (64 bytes of
    /// overhead each, at least 1,024 bytes long).
    pub max_reassembly_bytes_per_writer: usize,
    /// Longest string a remote participant may announce: its name, and each endpoint's
    /// topic, type and partitions. An announcement with a longer one is refused.
    pub max_string_bytes: usize,
    /// Most partitions a remote endpoint may announce (the wire carries at most 16).
    pub max_partitions: usize,
    /// Most bytes stored for one remote participant's announcements: its name and its
    /// endpoints' strings, plus what the table spends per endpoint and per string
    /// (`limits::ENDPOINT_OVERHEAD`, `limits::STRING_OVERHEAD`). An endpoint that would pass
    /// it is refused.
    pub max_peer_metadata_bytes: usize,
    /// Router links this participant reaches other participants through
    /// ([`route`](crate::route)): each link's number and datagram size. Links come and go
    /// at run time with [`Participant::add_route_link`] and
    /// [`Participant::remove_route_link`].
    pub routes: Vec<crate::route::RouteLink>,
}

/// The default [`Config::max_sample_size`]: 256 MiB.
pub const DEFAULT_MAX_SAMPLE_SIZE: usize = 256 << 20;
/// The default [`Config::max_reassembly_bytes_per_writer`]: a sample of the default
/// `max_sample_size` and a sixteenth (272 MiB).
pub const DEFAULT_MAX_REASSEMBLY_BYTES_PER_WRITER: usize =
    DEFAULT_MAX_SAMPLE_SIZE + DEFAULT_MAX_SAMPLE_SIZE / 16;
/// The default [`Config::max_reassembly_bytes`]: two writers' shares (544 MiB).
pub const DEFAULT_MAX_REASSEMBLY_BYTES: usize = 2 * DEFAULT_MAX_REASSEMBLY_BYTES_PER_WRITER;
/// The default [`Config::max_string_bytes`].
pub const DEFAULT_MAX_STRING_BYTES: usize = 512;
/// The default [`Config::max_partitions`]: what the wire carries.
pub const DEFAULT_MAX_PARTITIONS: usize = tether_wire::MAX_PARTITIONS;
/// The default [`Config::max_peer_metadata_bytes`]: 512 KiB, what 1,024 endpoints take
/// whose topic, type and partition together are about 160 bytes long (600 endpoints of 500
/// bytes), with the table's overhead (about 350 bytes an endpoint).
pub const DEFAULT_MAX_PEER_METADATA_BYTES: usize = 512 << 10;

/// The default [`Config::inactive_after`]: well under the lease (10 s), so a stalled reader
/// stops holding its keep-all writers long before it is forgotten, and long enough that a
/// live reader is not taken for a stalled one under heavy loss. A keep-all writer asks for
/// acknowledgements every heartbeat period (100 ms), so a live reader has some thirty
/// chances to answer first: at 30 % loss each way (a round trip fails 51 % of the time)
/// all of them fail with a probability of 2·10⁻⁹; at 20 % each way, 10⁻¹³.
pub const DEFAULT_INACTIVE_AFTER: Duration = Duration::from_secs(3);

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
            path_mtu: 1500,
            probe_paths: true,
            local_addrs: Vec::new(),
            max_participants: 1024,
            max_pending_participants: 64,
            max_endpoints_per_participant: 1024,
            max_sample_size: DEFAULT_MAX_SAMPLE_SIZE,
            max_reassembly_bytes: DEFAULT_MAX_REASSEMBLY_BYTES,
            reassembly_timeout: Duration::from_secs(10),
            security: None,
            data_group: None,
            multicast_min: 2,
            inactive_after: Some(DEFAULT_INACTIVE_AFTER),
            congestion_control: true,
            max_reassembly_bytes_per_writer: DEFAULT_MAX_REASSEMBLY_BYTES_PER_WRITER,
            max_string_bytes: DEFAULT_MAX_STRING_BYTES,
            max_partitions: DEFAULT_MAX_PARTITIONS,
            max_peer_metadata_bytes: DEFAULT_MAX_PEER_METADATA_BYTES,
            routes: Vec::new(),
        }
    }
}

/// The engine's source of randomness.
pub(crate) struct Randomness(Box<dyn tether_crypto::Random + Send>);

impl Randomness {
    /// The generator.
    pub(crate) fn get(&mut self) -> &mut dyn tether_crypto::Random {
        &mut *self.0
    }
}

impl std::fmt::Debug for Randomness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Randomness")
    }
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
    /// Where sender keys, nonces and challenges come from (an input, like time).
    pub(crate) random: Randomness,
    pub(crate) cfg: Config,
    pub(crate) next_entity: u32,
    /// `close` was called: input and timers are ignored from then on, so a participant
    /// that said goodbye does not validate, answer or announce itself again.
    pub(crate) closed: bool,
    pub(crate) writers: BTreeMap<EntityId, Writer>,
    pub(crate) readers: BTreeMap<EntityId, Reader>,
    /// The participant table and what announcing needs: remote participants by id and by address, multicast groups, and the announcement schedule.
    pub(crate) peers: Peers,
    /// Sender keys of remote writers, and when writers re-key.
    pub(crate) keystore: KeyStore,
    /// Who is matched with whom across participants, and what was reported once.
    pub(crate) matches: Matches,
    pub(crate) transmits: VecDeque<Transmit>,
    pub(crate) events: VecDeque<Event>,
    pub(crate) stats: Stats,
    pub(crate) next_housekeeping: Instant,
    /// Readers that owe a writer an ACKNACK, built once the whole datagram is processed.
    pub(crate) pending_acks: Vec<(EntityId, Guid)>,
    /// Some timer may now be due earlier than `poll_timeout` said last time.
    pub(crate) timers_changed: bool,
    /// Counts inputs (datagrams, writes): keep-last caches evict only earlier inputs' samples.
    pub(crate) input: u64,
    /// The asynchronous writers' sender: flow controllers and turns by priority class.
    pub(crate) sched: Scheduler,
    /// When a reader next asks a writer again for what it misses.
    pub(crate) next_renack: Option<Instant>,
    /// When a path's congestion controller next wants to probe (`None`: none does).
    pub(crate) next_cc_probe: Option<Instant>,
    /// Remote participants whose path holds datagrams waiting for room in its window.
    pub(crate) queued_paths: Vec<ParticipantId>,
    /// The latest time the engine was given (`poll_transmit` takes none).
    pub(crate) clock: Instant,
    /// When the participant last found it had not run ([`STALL`]): peers were counted as
    /// heard then without a word from them.
    pub(crate) stalled_at: Option<Instant>,
    /// Router links whose driver holds datagrams not yet handed to the link, as the time
    /// they take to leave ([`set_route_backlog`](Participant::set_route_backlog)).
    pub(crate) route_backlog: Vec<(u16, Duration)>,
    /// The rate (bytes a second) each router link has been draining its queue at
    /// ([`set_route_drain_rate`](Participant::set_route_drain_rate)).
    pub(crate) route_rate: Vec<(u16, u64)>,
    /// How many times our router links were made again (LINK_EPOCH, announced beside our
    /// PARTICIPANT once non-zero): peers' writers then forget what they re-sent to our
    /// readers, which was lost with the link's queues.
    pub(crate) link_epoch: u32,
    /// Keep-all reliable writers (whose datagrams congestion control may hold back), and
    /// reliable readers (which time their repair requests by the round trip): without
    /// either, paths are not probed.
    pub(crate) paced_writers: usize,
    pub(crate) reliable_readers: usize,
    /// The last destination looked up by address, with the participant-table generation.
    pub(crate) last_dest: Option<(u64, SocketAddr, ParticipantId)>,
    /// The final ACKNACKs of readers deleted lately (when, and where they went), sent again
    /// in front of the PARTICIPANT_BYE: at most [`MAX_FAREWELLS`], none older than
    /// [`FAREWELL_KEEP`].
    pub(crate) farewells: VecDeque<(Instant, crate::reliability::Farewell)>,
    /// When credentials (peers' and our own) are next checked for expiry.
    pub(crate) expiry: crate::security::expiry::ExpiryTimer,
    /// The route key of every local endpoint (`route`), computed once at its creation:
    /// the driver looks one up for every datagram it sends to a link's group.
    pub(crate) route_keys: BTreeMap<EntityId, (EndpointKind, [u8; 32])>,
    /// Changes whenever a local endpoint comes or goes (`route_keys_generation`).
    pub(crate) route_gen: u64,
}

/// How long a deleted reader's final ACKNACKs ride again with a PARTICIPANT_BYE: far longer
/// than a path reorders datagrams, far shorter than a session lives.
pub(crate) const FAREWELL_KEEP: Duration = Duration::from_secs(1);

/// Most final ACKNACKs kept for the PARTICIPANT_BYE (the oldest go first).
pub(crate) const MAX_FAREWELLS: usize = 256;

/// `now + d`, saturating a century ahead: `Instant + Duration` panics on overflow, and a
/// deadline, lease or period may be "forever".
pub(crate) fn after(now: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(d.min(CENTURY)).unwrap_or(now)
}

impl Participant {
    /// A participant that will announce itself at the first `handle_timeout`.
    pub fn new(cfg: Config, now: Instant) -> Self {
        Self::with_random(cfg, now, Box::new(tether_crypto::OsRandom))
    }

    /// A participant that draws its randomness (sender keys, key-wrap nonces,
    /// authentication challenges) from `random`, as it takes time from its caller: a
    /// simulator passes a seeded generator, so a run is determined by its seed.
    pub fn with_random(
        cfg: Config,
        now: Instant,
        mut random: Box<dyn tether_crypto::Random + Send>,
    ) -> Self {
        let cookie_secret: [u8; 32] = tether_crypto::random_array(&mut *random);
        Participant {
            cfg,
            random: Randomness(random),
            next_entity: 1,
            closed: false,
            writers: BTreeMap::new(),
            readers: BTreeMap::new(),
            peers: Peers::new(now, &cookie_secret),
            keystore: KeyStore::default(),
            sched: Scheduler::default(),
            matches: Matches::default(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            next_housekeeping: after(now, HOUSEKEEPING),
            pending_acks: Vec::new(),
            timers_changed: true,
            input: 0,
            next_renack: None,
            next_cc_probe: None,
            queued_paths: Vec::new(),
            clock: now,
            stalled_at: None,
            route_backlog: Vec::new(),
            route_rate: Vec::new(),
            link_epoch: 0,
            paced_writers: 0,
            reliable_readers: 0,
            last_dest: None,
            farewells: VecDeque::new(),
            expiry: Default::default(),
            route_keys: BTreeMap::new(),
            route_gen: 0,
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

    pub(crate) fn header(&self) -> Header {
        Header {
            domain: self.cfg.domain,
            participant: self.cfg.participant,
        }
    }

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
                        self.sched
                            .buckets
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
            self.sched.classes[a.priority.index()].push(id);
        }
        w.asyncw = asyncw;
        if let Some(sec) = &self.cfg.security {
            let prot = sec.protection_for(&w.info.topic);
            w.prot = Some(prot);
            if prot.encrypt {
                w.key = Some(std::sync::Arc::new(tether_crypto::SenderKey::generate(
                    sec.suite,
                    1,
                    self.random.get(),
                )));
            }
        }
        self.paced_writers += usize::from(w.paced());
        self.describe(id, &w.info);
        self.note_route_key(id, EndpointKind::Writer, &w.info.topic);
        self.writers.insert(id, w);
        self.announce_endpoint(id);
        // Match against everything already known.
        let remote: Vec<(Guid, RemoteEndpoint)> = self.remote_endpoints_of(EndpointKind::Reader);
        for (g, e) in remote {
            self.try_match(now, id, g, &e, Side::LocalWriter);
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
        self.reliable_readers += usize::from(info.qos.is_reliable());
        self.describe(id, &info);
        self.note_route_key(id, EndpointKind::Reader, &info.topic);
        self.readers.insert(id, Reader::new(id, info));
        self.announce_endpoint(id);
        let remote = self.remote_endpoints_of(EndpointKind::Writer);
        for (g, e) in remote {
            self.try_match(now, id, g, &e, Side::LocalReader);
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
        let mut acks = Vec::new();
        let me = self.cfg.participant;
        let guid = Guid {
            participant: me,
            entity: id,
        };
        if let Some(w) = self.writers.remove(&id) {
            self.paced_writers -= usize::from(w.paced());
            for c in &mut self.sched.classes {
                c.retain(|x| *x != id);
            }
            for (g, rp) in &w.readers {
                if rp.local {
                    if let Some(r) = self.readers.get_mut(&g.entity) {
                        r.writers.remove(&guid);
                        r.remember_label(guid, w.info.qos.encoding_label());
                    }
                }
            }
        } else if let Some(mut r) = self.readers.remove(&id) {
            self.reliable_readers -= usize::from(r.info.qos.is_reliable());
            acks = self.acknowledge_on_leaving(id, &mut r);
            for g in r.writers.keys() {
                if g.participant == me {
                    if let Some(w) = self.writers.get_mut(&g.entity) {
                        w.readers.remove(&guid);
                        w.rebuild_dests();
                    }
                } else if let Some(v) = self.matches.remote_writer_readers.get_mut(g) {
                    v.retain(|x| *x != id);
                }
            }
        } else {
            return;
        }
        self.matches.reported.retain(|(l, _, _)| *l != id);
        self.keystore.descriptions.remove(&id);
        if self.route_keys.remove(&id).is_some() {
            self.route_gen += 1;
        }
        self.say_goodbye(&Submessage::EndpointBye(id), &acks);
        // The PARTICIPANT_BYE of a host that shuts down next could overtake that datagram
        // too: it carries them again (see `farewells`; housekeeping forgets old ones).
        for f in acks {
            if self.farewells.len() >= MAX_FAREWELLS {
                self.farewells.pop_front();
            }
            self.farewells.push_back((now, f));
        }
    }

    /// Leaves: tells everyone we are gone, after the final ACKNACKs of readers deleted in the
    /// last [`FAREWELL_KEEP`] (in the same datagram), so that this goodbye overtaking
    /// theirs loses no acknowledgement. The participant should be dropped afterwards; a
    /// driver may call it again, a little later, in case the goodbye was lost (it is the
    /// same goodbye, with the same acknowledgements). Participants still answering our
    /// challenge get it too: they may know us already.
    pub fn close(&mut self) {
        let acks: Vec<_> = self.farewells.iter().map(|(_, f)| *f).collect();
        self.say_goodbye(&Submessage::ParticipantBye, &acks);
        self.say_goodbye_to_pending();
        self.closed = true;
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

    /// How many endpoints a local endpoint is matched with.
    pub fn matched_count(&self, id: EntityId) -> usize {
        if let Some(w) = self.writers.get(&id) {
            return w.readers.len();
        }
        self.readers.get(&id).map_or(0, |r| r.writers.len())
    }

    /// Samples local writer `id` wrote while no reader was matched (0 for an unknown writer):
    /// nobody received them.
    pub fn written_unmatched(&self, id: EntityId) -> u64 {
        self.writers.get(&id).map_or(0, |w| w.unheard)
    }

    /// The readers a local writer is matched with now, remote and local (empty for an
    /// unknown writer).
    pub fn matched_readers(&self, writer: EntityId) -> Vec<Guid> {
        self.writers
            .get(&writer)
            .map_or_else(Vec::new, |w| w.readers.keys().copied().collect())
    }

    pub(crate) fn alloc_entity(&mut self) -> EntityId {
        let id = EntityId(self.next_entity);
        self.next_entity += 1;
        id
    }

    /// True if events or immediate transmits are waiting to be polled.
    pub fn has_output(&self) -> bool {
        !self.transmits.is_empty() || !self.events.is_empty() || self.queued_releasable()
    }

    /// Processes one received datagram. `datagram` is kept by reference: delivered payloads
    /// are slices of it.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &Bytes) {
        self.receive(now, from, datagram, None);
    }

    /// [`handle_datagram`](Self::handle_datagram) for a datagram the driver owns: in a
    /// secure realm, one that ends with a SEALED_BATCH is opened where it lies
    /// (`docs/wire.md#sealed_batch`), with no copy and no buffer to prepare, and its
    /// samples are slices of it, as a plain datagram's are.
    pub fn handle_datagram_owned(
        &mut self,
        now: Instant,
        from: SocketAddr,
        mut datagram: bytes::BytesMut,
    ) {
        self.note_time(now);
        let pre = self.open_in_place(from, &mut datagram);
        self.receive(now, from, &datagram.freeze(), pre);
    }

    /// A received datagram; `pre`: what the gate found it to be, when it checked it where
    /// it lay.
    fn receive(&mut self, now: Instant, from: SocketAddr, datagram: &Bytes, pre: Option<Gate>) {
        self.note_time(now);
        self.timers_changed = true;
        self.input += 1;
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        if self.closed {
            return;
        }
        // What may be sent back to `from` while it is not validated (`discovery/pending.rs`).
        self.peers.pending.arrived(from, datagram.len());
        self.process_datagram_with(now, from, datagram, true, pre);
        self.answer_and_announce(now);
        self.schedule_rekeys(now);
        self.congestion_tick(now);
    }

    /// The submessages of one datagram; `outer`: as received (a SEALED one may open to
    /// another datagram, which may not be sealed again).
    pub(crate) fn process_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &Bytes,
        outer: bool,
    ) {
        self.process_datagram_with(now, from, datagram, outer, None);
    }

    /// [`process_datagram`](Self::process_datagram), with what the gate already found it
    /// to be, if it did (`pre`).
    fn process_datagram_with(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &Bytes,
        outer: bool,
        pre: Option<Gate>,
    ) {
        let Some(admitted) = self.admit(datagram) else {
            return;
        };
        let d = admitted.datagram();
        let pid = d.header().participant;
        // What a router brings from participant P comes from P's virtual address: a router
        // that hands us another participant's datagram under it is not believed (that
        // datagram would still fail authentication; this keeps it from costing a
        // challenge or a move).
        if outer && crate::route::routed_participant(&from).is_some_and(|(p, _)| p != pid) {
            self.stats.routed_mismatched += 1;
            return;
        }
        // A datagram sealed for us alone (pairwise mode) is authenticated by its seal, and
        // what it opens to by its own AUTH_TAG.
        let sealed = outer && datagram.get(HEADER_LEN) == Some(&(SubmessageKind::Sealed as u8));
        let gate = match pre {
            Some(g) => g,
            None if sealed => Gate::Act(Origin::Unverified),
            None => self.authenticate(pid, from, datagram),
        };
        let origin = {
            match gate {
                Gate::Act(o) => o,
                Gate::Drop => {
                    // A peer that refuses us after we verified it (our credential revoked
                    // while we were matched) tags under a control key we are no longer
                    // given: its REFUSAL, which its own signature authenticates, is still
                    // read, and nothing else (`docs/wire.md#refusal`).
                    for m in d.submessages() {
                        if let Ok(Submessage::Refusal(r)) = m {
                            self.on_refusal(now, pid, r);
                        }
                    }
                    return;
                }
                Gate::Hold(writer, epoch) => {
                    self.hold_datagram(now, from, datagram, outer, writer, epoch);
                    return;
                }
            }
        };
        // The SEALED_BATCH the gate opened, if the datagram ends with one.
        let mut opened = self.keystore.gate_opened.take();
        // What a sealed datagram opens to is counted, as its sender counted it
        // (`docs/wire.md#received`).
        let counted = if !sealed && counts_as_received(datagram) {
            datagram.len()
        } else {
            0
        };
        let mut known = if sealed {
            self.peers.remotes.contains_key(&pid)
        } else {
            self.heard_from(now, pid, from, counted, origin != Origin::Unverified)
        };
        // In a secure realm, an id validated at another direct address and not yet
        // authenticated: anyone on the LAN may claim an id from an address of its own and
        // answer the cookie sent there. Its challenges are answered here as a stranger's
        // are, and its AUTH taken (`on_auth` answers it here too), so a member the claim
        // holds our AUTH away from can still prove its credential from where it is.
        let elsewhere = known
            && origin == Origin::Unverified
            && self.peers.remotes.get(&pid).is_some_and(|p| {
                p.elsewhere_on_lan(from) && p.auth.as_ref().is_some_and(|a| !a.verified)
            });
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
                // Checked by the gate (`authenticate`) before anything else.
                Submessage::AuthTag(_) => {}
                // Sealed for us alone: opened below, then authenticated.
                Submessage::Sealed(x) if sealed => {
                    self.on_sealed(now, from, pid, datagram, x);
                    break;
                }
                // Address validation (`discovery/pending.rs`): a challenge from a participant
                // we do not know is answered, and the answer to ours validates it.
                Submessage::Probe(p) if !known || elsewhere => {
                    self.answer_challenge(now, pid, from, p, datagram.len())
                }
                Submessage::ProbeAck(a) if !known || elsewhere => {
                    known = self.on_challenge_answer(now, pid, from, a)
                }
                _ if origin == Origin::Unverified && needs_authentication(&m) => {
                    self.stats.unverified_dropped += 1;
                }
                // A datagram its SEALED_BATCH authenticated carries nothing else but its
                // writer's heartbeats (`docs/wire.md#sealed_batch`).
                Submessage::Heartbeat(h) if matches!(origin, Origin::Sealed(w) if w != h.writer) => {
                    self.stats.unauthenticated += 1;
                }
                _ if matches!(origin, Origin::Sealed(_))
                    && !matches!(m, Submessage::Heartbeat(_) | Submessage::SealedBatch(_)) =>
                {
                    self.stats.unauthenticated += 1;
                }
                _ if !known => self.stats.unknown_sender += 1,
                Submessage::ParticipantBye => {
                    self.remove_participant(pid, crate::event::Departure::Left);
                    known = false;
                }
                Submessage::Endpoint(e) => self.on_endpoint(now, pid, e),
                Submessage::Auth(a) => self.on_auth(now, pid, from, a),
                Submessage::Refusal(r) => self.on_refusal(now, pid, r),
                // A SEALED anywhere but first in an outer datagram, or in what one opened to.
                Submessage::Sealed(_) => {
                    self.stats.pair_open_failed += 1;
                    break;
                }
                Submessage::EndpointBye(e) => {
                    self.remove_remote_endpoint(pid, e, crate::event::Departure::Left)
                }
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
                Submessage::Key(k) => self.on_key(now, pid, k),
                Submessage::KeyRequest(k) => self.on_key_request(pid, k),
                Submessage::Heartbeat(hb) => self.on_heartbeat(now, pid, hb),
                Submessage::AckNack(an) => self.on_acknack(now, pid, an, true),
                Submessage::Nack(n) => self.on_acknack(now, pid, n, false),
                Submessage::Gap(g) => self.on_gap(now, pid, g),
                Submessage::DataFrag(f) => self.on_data_frag(now, pid, f),
                Submessage::NackFrag(n) => self.on_nack_frag(now, pid, n),
                Submessage::Skipped(x) => self.on_skipped(pid, x),
                Submessage::LinkEpoch(e) => self.on_link_epoch(from, pid, e),
                Submessage::BatchSig(x) => batch_sig = Some(x),
                Submessage::Probe(p) => self.on_probe(from, pid, p, datagram.len()),
                Submessage::ProbeAck(a) => self.on_probe_ack(now, pid, from, a),
                Submessage::SealedBatch(x) => {
                    let g = Guid {
                        participant: pid,
                        entity: x.writer,
                    };
                    self.on_sealed_batch(now, g, x, datagram, opened.take());
                }
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

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        if !self.peers.controlled {
            // No path is congestion controlled (every peer on this host): nothing to count
            // or hold back.
            let t = self.transmits.pop_front()?;
            let t = self.tag_transmit(t);
            return Some(self.seal_for_peer(t));
        }
        loop {
            let t = match self.transmits.pop_front() {
                // A keep-all writer's samples to a path without room in its window wait in
                // that path's queue (`congestion`).
                Some(t) => match self.route(t) {
                    Some(t) => t,
                    None => continue,
                },
                None => self.release_queued()?,
            };
            let t = self.tag_transmit(t);
            self.count_sent(&t);
            return Some(self.seal_for_peer(t));
        }
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub(crate) fn push_transmit(&mut self, dest: SocketAddr, payload: Bytes) {
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += payload.len() as u64;
        self.transmits.push_back(Transmit {
            dest,
            head: payload.into(),
            body: Bytes::new(),
            tail: Tail::NONE,
            writer: None,
            announces: None,
        });
    }

    /// Every known participant's address, without duplicates: where goodbyes go. Not the
    /// discovery targets: a multicast group reaches a peer through another socket (and
    /// thread) than its unicast address, so a goodbye sent there can overtake the final
    /// ACKNACK a leaving reader sends by unicast just before it, and its writer would count
    /// delivered samples as never acknowledged. A participant that does not know us has
    /// nothing of ours to forget.
    pub(crate) fn known_destinations(&self) -> Vec<SocketAddr> {
        let s: BTreeSet<SocketAddr> = self.peers.remotes.values().map(|p| p.addr).collect();
        s.into_iter().collect()
    }

    /// Discovery targets plus every known participant that may hear our endpoints, without
    /// duplicates.
    pub(crate) fn all_destinations(&self) -> Vec<SocketAddr> {
        let mut s: BTreeSet<SocketAddr> = self.peers.targets.clone();
        // In a secure realm a participant we have not verified takes nothing but PARTICIPANT
        // and AUTH from us (its AUTH datagrams carry our PARTICIPANT): our endpoints (topic
        // ids, QoS, partitions) go to it once it authenticated, not to anyone who answered a
        // cookie (the outsider review's F3).
        let secure = self.cfg.security.is_some();
        s.extend(
            self.peers
                .remotes
                .values()
                .filter(|p| !secure || p.auth.as_ref().is_some_and(|a| a.verified))
                .map(|p| p.addr),
        );
        s.into_iter().collect()
    }
}
