//! What the engine tells its driver, and the counters it keeps.

use std::fmt;
use std::net::SocketAddr;

use bytes::Bytes;
use tether_wire::{EndpointKind, EntityId, ParticipantId};

use crate::qos::QosPolicy;

/// Globally unique endpoint identity: participant and entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Guid {
    /// The participant that owns the endpoint.
    pub participant: ParticipantId,
    /// The endpoint inside it.
    pub entity: EntityId,
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}.{}", self.participant.0, self.entity.0)
    }
}

/// One delivered sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The writer that published it.
    pub writer: Guid,
    /// Its sequence number in that writer.
    pub seq: u64,
    /// Source timestamp, ns since the UNIX epoch.
    pub timestamp_ns: u64,
    /// The payload; a reference into the received datagram, not a copy.
    pub payload: Bytes,
}

/// Which side noticed a missed deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineSide {
    /// A writer did not write within its offered deadline.
    Offered,
    /// A reader did not receive within its requested deadline.
    Requested,
}

/// A writer and a reader on the same topic that cannot match, and why. Both sides raise it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncompatibleQos {
    /// The topic.
    pub topic: String,
    /// The local endpoint.
    pub local: Guid,
    /// Whether the local endpoint is the writer or the reader.
    pub local_kind: EndpointKind,
    /// The remote endpoint.
    pub remote: Guid,
    /// The failing policy.
    pub policy: QosPolicy,
    /// The writer's value.
    pub offered: String,
    /// The reader's value.
    pub requested: String,
}

impl fmt::Display for IncompatibleQos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (w, r) = match self.local_kind {
            EndpointKind::Writer => (self.local, self.remote),
            EndpointKind::Reader => (self.remote, self.local),
        };
        let topic = &self.topic;
        let (offered, requested) = (&self.offered, &self.requested);
        match self.policy {
            QosPolicy::Protection => write!(
                f,
                "protection modes differ on {topic}: writer {w} protects samples as \
                 {offered}, reader {r} requires {requested}; they do not match (give the \
                 topic one mode in every member's [security.topics])"
            ),
            QosPolicy::Partition => write!(
                f,
                "no shared partition on {topic}: writer {w} is in {offered}, reader {r} in \
                 {requested}; they do not meet"
            ),
            p => write!(
                f,
                "incompatible QoS on {topic}: writer {w} offers {p}={offered}, reader {r} \
                 requests {p}={requested}"
            ),
        }
    }
}

/// Samples a reliable reader has not acknowledged
/// ([`Participant::unacknowledged`](crate::Participant::unacknowledged)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// The reader.
    pub reader: Guid,
    /// The name its participant announced.
    pub name: String,
    /// Samples written while it was matched that it has not acknowledged, and those the
    /// writer let go of before it did (while it was inactive).
    pub samples: u64,
    /// It is no longer matched (it left, or its lease expired): these will never be.
    pub departed: bool,
    /// Why it is no longer matched (`None` while it is).
    pub why: Option<Departure>,
    /// The name its credential certifies, in a secure realm (the CA vouches for it; the
    /// announced `name` is whatever the peer chose, and empty by default).
    pub certified_name: Option<String>,
    /// It is matched but inactive ([`Event::ReaderInactive`]): it has acknowledged
    /// nothing for the writer's inactivity time.
    pub inactive: bool,
}

/// Why a matched remote endpoint is no longer matched ([`Shortfall::why`]); its `Display`
/// says it in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Departure {
    /// It withdrew the endpoint, or its session closed (it said goodbye).
    Left,
    /// Its participant's lease ran out: it was killed, or is out of reach.
    LeaseExpired,
    /// Its participant's credential was revoked (a revocation list put in force here).
    Revoked,
    /// Its participant's credential expired.
    Expired,
    /// Its participant was forgotten for another: a process restarted at its address
    /// (security off), or room made for a newer one.
    Replaced,
}

impl fmt::Display for Departure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Departure::Left => "it left",
            Departure::LeaseExpired => "its lease ran out: killed, or out of reach",
            Departure::Revoked => "its credential was revoked",
            Departure::Expired => "its credential expired",
            Departure::Replaced => "another participant took its place",
        })
    }
}

/// Why a remote participant's authentication failed
/// ([`Event::AuthenticationFailed`]); its `Display` says it in words.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthFailure {
    /// Its credential was refused (malformed, another realm, expired, revoked, ...).
    CredentialRefused(tether_crypto::CredentialError),
    /// Its answer to our challenge does not verify with its credential's key.
    BadAnswer,
    /// Its credential was revoked while it was a member.
    Revoked,
    /// Its AUTH's credential is not sealed with this realm's secret (another realm, or not
    /// a member).
    NotSealedForRealm,
    /// Another credential was presented under its participant id, which a verified
    /// credential holds until it leaves.
    IdentityConflict,
    /// Its credential expired while it was a member.
    Expired,
    /// It is a member of a secure realm (it sent AUTH), and this session has no keys.
    NoKeysHere,
    /// It did not authenticate within 10 s of its address being validated: it is forgotten
    /// (and found again if it announces itself again).
    NotInTime,
    /// It has sent no AUTH at all within 2 s of its address being validated, while this
    /// session (in a secure realm) sent it ours: a session without keys (security off), or
    /// of a version that does not speak AUTH. Nothing is exchanged with it. Reported once,
    /// instead of [`AuthFailure::NotInTime`] 10 s later.
    NoAuth,
    /// Its credential is valid but not a member's: a router's. Routers forward sealed
    /// datagrams between sites and are neither readers nor writers: they get no sender keys,
    /// no control keys, and match no endpoint.
    NotAMember(tether_crypto::Role),
}

impl fmt::Display for AuthFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthFailure::CredentialRefused(e) => write!(f, "credential refused: {e}"),
            AuthFailure::BadAnswer => {
                f.write_str("its answer to our challenge does not verify with its credential's key")
            }
            AuthFailure::Revoked => f.write_str("its credential was revoked"),
            AuthFailure::NotSealedForRealm => f.write_str(
                "its credential is not sealed with this realm's secret (another realm, or not a member)",
            ),
            AuthFailure::IdentityConflict => f.write_str(
                "another credential was presented under its participant id (refused: the id is bound to the credential it verified with)",
            ),
            AuthFailure::Expired => f.write_str("its credential expired"),
            AuthFailure::NoKeysHere => f.write_str(
                "it is in a secure realm and this session has no keys (--keys): nothing is exchanged with it",
            ),
            AuthFailure::NotInTime => f.write_str(
                "it began authenticating but did not finish within 10 s of being discovered \
                 (its AUTH or ours lost each time, or it cannot verify us): forgotten until \
                 it announces itself again",
            ),
            AuthFailure::NotAMember(role) => write!(
                f,
                "its credential is a {role}'s, not a member's: {role}s forward sealed data and \
                 are neither readers nor writers (refused; it gets no keys)"
            ),
            AuthFailure::NoAuth => f.write_str(
                "it sends no AUTH: it has no keys (started without --keys, or with security \
                 off), so nothing is exchanged with it; give it a key bundle of this realm",
            ),
        }
    }
}

/// Why a revocation list was not put in force
/// ([`Participant::set_revocations`](crate::Participant::set_revocations),
/// [`Event::RevocationListRefused`]): the list in force stays. Its `Display` says it in words.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RevocationRefusal {
    /// Security is off: there is no realm to revoke in.
    SecurityOff,
    /// The list could not be read or does not parse (a session reading its file).
    Unreadable(String),
    /// It is not the realm CA's: another realm's, or its signature does not verify.
    Invalid(tether_crypto::CredentialError),
    /// It is older than the list in force: a lower serial, or the same serial with other
    /// contents (the CA signs each list under a new serial).
    Stale {
        /// The serial of the list in force.
        held: u64,
        /// The serial of the list refused.
        offered: u64,
    },
}

impl fmt::Display for RevocationRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RevocationRefusal::SecurityOff => f.write_str("security is off"),
            RevocationRefusal::Unreadable(e) => write!(f, "unreadable: {e}"),
            RevocationRefusal::Invalid(e) => write!(f, "not the realm's: {e}"),
            RevocationRefusal::Stale { held, offered } if held == offered => write!(
                f,
                "list {offered} differs from the list {held} in force under the same serial"
            ),
            RevocationRefusal::Stale { held, offered } => {
                write!(f, "list {offered} is older than the list {held} in force")
            }
        }
    }
}

impl std::error::Error for RevocationRefusal {}

/// What a grant allows: the right a refused match lacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Right {
    /// Publishing on a topic.
    Publish,
    /// Subscribing to a topic.
    Subscribe,
}

impl fmt::Display for Right {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Right::Publish => "publish",
            Right::Subscribe => "subscribe",
        })
    }
}

/// Why a match was refused ([`Event::AccessDenied`]); its `Display` says it in words.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccessDenial {
    /// The remote participant's credential holds no grant for the topic.
    NoGrant {
        /// The name its credential certifies.
        name: String,
        /// Its credential's serial.
        serial: u64,
        /// The right it lacks.
        needs: Right,
        /// The topic.
        topic: String,
    },
}

impl fmt::Display for AccessDenial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessDenial::NoGrant {
                name,
                serial,
                needs,
                topic,
            } => write!(
                f,
                "{name} (serial {serial}) holds no grant to {needs} {topic}"
            ),
        }
    }
}

/// Something the driver or the application should know. Drain with
/// [`Participant::poll_event`](crate::Participant::poll_event).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A remote participant proved it holds a valid credential of our realm.
    ParticipantAuthenticated {
        /// Its id.
        participant: ParticipantId,
        /// The name its credential certifies.
        name: String,
    },
    /// A remote participant's credential or answer was refused (reported once per peer).
    AuthenticationFailed {
        /// Its id.
        participant: ParticipantId,
        /// Why.
        reason: AuthFailure,
    },
    /// A match was refused: the remote participant's credential does not grant the topic.
    AccessDenied {
        /// The local endpoint.
        local: EntityId,
        /// The remote endpoint.
        remote: Guid,
        /// The topic.
        topic: String,
        /// Why.
        reason: AccessDenial,
    },
    /// A remote participant was heard for the first time.
    ParticipantDiscovered {
        /// Its id.
        participant: ParticipantId,
        /// Its name.
        name: String,
        /// Where it was heard from.
        addr: SocketAddr,
    },
    /// A remote participant left or its lease expired; its endpoints are gone.
    ParticipantLost {
        /// Its id.
        participant: ParticipantId,
    },
    /// A local endpoint matched a remote (or local) one.
    Matched {
        /// The local endpoint.
        local: EntityId,
        /// The other endpoint.
        remote: Guid,
        /// The topic.
        topic: String,
    },
    /// A match ended.
    Unmatched {
        /// The local endpoint.
        local: EntityId,
        /// The other endpoint.
        remote: Guid,
        /// The topic.
        topic: String,
    },
    /// A writer and reader on one topic cannot match. Raised once per pair and policy.
    IncompatibleQos(IncompatibleQos),
    /// A reader has samples to take.
    DataAvailable {
        /// The reader.
        reader: EntityId,
    },
    /// A writer that refused a write for lack of room has room again.
    WriterReady {
        /// The writer.
        writer: EntityId,
    },
    /// A deadline was missed.
    DeadlineMissed {
        /// The local endpoint.
        endpoint: EntityId,
        /// Offered (writer) or requested (reader).
        side: DeadlineSide,
        /// The topic.
        topic: String,
    },
    /// A matched writer's liveliness changed as seen by a local reader.
    LivelinessChanged {
        /// The reader.
        reader: EntityId,
        /// The writer.
        writer: Guid,
        /// True when alive again, false when its lease ran out.
        alive: bool,
    },
    /// Samples a reader will never deliver to its application: sequence numbers
    /// `first..=last` of `writer`, and why. Every one is also counted in [`Stats::lost`].
    /// Consecutive runs of one writer lost for the same reason between two polls come as
    /// one event.
    SamplesLost {
        /// The reader.
        reader: EntityId,
        /// The writer.
        writer: Guid,
        /// The first sequence number lost.
        first: u64,
        /// The last sequence number lost (inclusive).
        last: u64,
        /// How many: `last - first + 1`.
        count: u64,
        /// Why.
        reason: LossReason,
    },
    /// A reliable reader owed acknowledgements and sent none (no ACKNACK, no NACK_FRAG)
    /// for the writer's inactivity time ([`Qos::inactive_after`](crate::Qos::inactive_after)):
    /// the writer no longer keeps its history for it, so it cannot hold up the others. It
    /// is still matched; when it answers again it resumes from what the writer still has
    /// ([`Event::ReaderActive`]), and counts what it missed as lost.
    ReaderInactive {
        /// The writer.
        writer: EntityId,
        /// The reader.
        reader: Guid,
    },
    /// A newer revocation list of the realm is in force
    /// ([`Participant::set_revocations`](crate::Participant::set_revocations)); members it
    /// revokes were reported as [`AuthFailure::Revoked`].
    RevocationListApplied {
        /// The list's serial.
        serial: u64,
        /// How many credential serials it revokes.
        revoked: usize,
    },
    /// A revocation list was refused; the list in force stays. Raised by
    /// [`Participant::set_revocations`](crate::Participant::set_revocations) (which also
    /// returns the refusal), and by a session for a list file it cannot read.
    RevocationListRefused {
        /// Why.
        reason: RevocationRefusal,
    },
    /// This participant's own credential expired: peers refuse it from now on (each
    /// unmatches it when it notices). Raised once.
    OwnCredentialExpired {
        /// Its serial.
        serial: u64,
        /// When it expired (unix seconds).
        expires: u64,
    },
    /// A revocation list taken by this participant revokes its own credential: peers that
    /// load the list refuse it from now on.
    OwnCredentialRevoked {
        /// Its serial.
        serial: u64,
        /// The list's serial.
        list: u64,
    },
    /// An inactive reader answered again.
    ReaderActive {
        /// The writer.
        writer: EntityId,
        /// The reader.
        reader: Guid,
        /// Samples the writer let go of, while the reader was inactive, before it had
        /// acknowledged them (in all, since it matched).
        released: u64,
    },
    /// Something a remote participant sent was refused because it would pass one of the
    /// limits that bound what a peer can make this participant store (`docs/wire.md`
    /// section 4). Counted every time; reported once per peer and kind of limit.
    OverLimit {
        /// The remote participant.
        participant: ParticipantId,
        /// Which limit.
        limit: Limit,
    },
    /// A peer refused this participant's credential and said why, in a REFUSAL signed
    /// with the credential it presented over the challenge we set it
    /// (`docs/wire.md#refusal`): our credential is revoked by its revocation list, expired
    /// or not yet valid by its clock, or refused otherwise. Nothing is exchanged with it
    /// until that changes. Reported once per peer.
    RefusedByPeer {
        /// The peer that refused us.
        participant: ParticipantId,
        /// The name its credential certifies.
        name: String,
        /// Why.
        reason: tether_wire::RefusalReason,
    },
    /// A key moved to a new epoch (secure realms): a local writer's sender key (`writer`;
    /// a reader left or was revoked, or the key neared its usage limit), or this
    /// participant's control key (`writer` is `None`; a member that held it was revoked or
    /// expired). For logs: nothing needs doing.
    Rekeyed {
        /// The writer whose sender key changed, or `None` for the control key.
        writer: Option<EntityId>,
        /// The new epoch.
        epoch: u32,
    },
}

pub use crate::limits::Limit;

/// Why samples were lost ([`Event::SamplesLost`]); its `Display` says it in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// Best effort: they never arrived (nothing repairs them).
    NotReceived,
    /// The writer no longer has them, and said so (a GAP, or a heartbeat whose first
    /// available sample is past them): its keep-last history replaced them, their lifespan
    /// ended, or it let this reader go while it was inactive.
    Unavailable,
    /// This reader's keep-last cache replaced them before the application took them.
    Overwritten,
    /// They were written while the reader and the writer had lost each other (a lease
    /// ran out); found when they matched again.
    Disconnected,
    /// This reader's keep-all cache was full when they arrived (best effort: nothing
    /// repairs them).
    CacheFull,
    /// The writer left (or its lease ran out) before it repaired them: reliable samples it
    /// had written that this reader never received.
    WriterLeft,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::NotReceived => "they never arrived (best effort)",
            LossReason::Unavailable => "the writer no longer had them",
            LossReason::Overwritten => {
                "the keep-last cache replaced them before the application took them"
            }
            LossReason::Disconnected => "they were written while the writer was out of reach",
            LossReason::WriterLeft => "the writer left before it repaired them",
            LossReason::CacheFull => "the keep-all cache was full (best effort)",
        })
    }
}

/// Counters kept by the engine. Every drop of bad or unwanted input lands in one of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Datagrams handed to `handle_datagram`.
    pub datagrams_received: u64,
    /// Bytes handed to `handle_datagram`.
    pub bytes_received: u64,
    /// Datagrams produced by `poll_transmit`.
    pub datagrams_sent: u64,
    /// Bytes produced by `poll_transmit`.
    pub bytes_sent: u64,
    /// Datagrams or submessages that failed to parse (bad magic, version, lengths, values).
    pub malformed: u64,
    /// Datagrams from another domain.
    pub wrong_domain: u64,
    /// Submessages from participants not yet discovered.
    pub unknown_sender: u64,
    /// DATA, HEARTBEAT or GAP from writers no local reader is matched with.
    pub unmatched_writer: u64,
    /// ACKNACKs naming writers or readers that are not matched.
    pub unmatched_reader: u64,
    /// SKIPPEDs not taken: not numbered as the reader's last ACKNACK taken, or a second
    /// one for it (`docs/wire.md#skipped`).
    pub skipped_ignored: u64,
    /// Submessage kinds this version does not know (skipped).
    pub unknown_kind: u64,
    /// Path-MTU probes sent ([`path`](crate::path)).
    pub probes_sent: u64,
    /// Peers' probes answered.
    pub probes_answered: u64,
    /// Probes sent by congestion controllers (round trip and delivery rate).
    pub rtt_probes_sent: u64,
    /// Of those, answered.
    pub rtt_probes_answered: u64,
    /// Answers that showed congestion (loss together with a queue): a window was capped.
    pub congestion_events: u64,
    /// Datagrams of keep-all writers that waited in a path's queue for room in its window.
    pub datagrams_queued: u64,
    /// Datagrams of keep-all writers dropped for want of room on a path: samples for
    /// readers there whose acknowledgements nothing waits for (best effort, inactive), and
    /// repairs beyond a window's worth (the reader asks again).
    pub datagrams_dropped_for_room: u64,
    /// Requests for samples a writer had re-sent too recently to have arrived (they were on
    /// their way): not answered twice.
    pub resends_suppressed: u64,
    /// NACKs sent: requests for samples beyond an ACKNACK's 256 bits.
    pub nacks_sent: u64,
    /// Writes refused because a path to a reader had no room in its window (the writer
    /// waits, as for a full history).
    pub window_full: u64,
    /// Paths whose datagram size grew after a probe arrived.
    pub paths_raised: u64,
    /// Paths whose datagram size was lowered (probes lost, or a send refused as too big).
    pub paths_lowered: u64,
    /// Sends the transport refused as larger than the way out carries.
    pub datagrams_too_big: u64,
    /// Samples whose reassembly started again because their fragments changed size.
    pub reassemblies_restarted: u64,
    /// ACKNACKs (with their NACK_FRAGs) a reader sent again, unprompted, because what it
    /// asked for did not come.
    pub renacks: u64,
    /// A writer's ENDPOINT announced again to the participant of a reliable reader that had
    /// not answered it since they matched (its announcement may have been lost).
    pub reannounced: u64,
    /// Times the timers ran over a second late (a stopped process, a starved thread): the
    /// participant heard nothing meanwhile, so that silence was not held against its peers.
    pub stalls: u64,
    /// Announcements refused because the participant or endpoint tables are full.
    pub table_full: u64,
    /// Samples accepted by local writers.
    pub samples_written: u64,
    /// Samples delivered into local readers' caches.
    pub samples_delivered: u64,
    /// Samples re-sent on request.
    pub samples_retransmitted: u64,
    /// Samples received twice (dropped).
    pub duplicates: u64,
    /// Samples a reader could not hold (cache or reorder buffer full); reliable ones are
    /// repaired later.
    pub rejected_full: u64,
    /// Samples dropped because their lifespan expired.
    pub expired: u64,
    /// Samples readers will never deliver (each also raised in an [`Event::SamplesLost`]):
    /// best-effort samples that never arrived or found a keep-all cache full, reliable ones
    /// the writer no longer had (its history replaced them, or let an inactive reader go),
    /// ones written while a lease had run out, and ones a keep-last cache replaced before
    /// the application took them.
    pub lost: u64,
    /// HEARTBEATs sent.
    pub heartbeats_sent: u64,
    /// ACKNACKs sent.
    pub acknacks_sent: u64,
    /// Final HEARTBEATs left unanswered because this reader had everything they announced.
    pub final_heartbeats_unanswered: u64,
    /// GAPs sent.
    pub gaps_sent: u64,
    /// Fragments refused: sample larger than `max_sample_size`, disagreeing with the rest
    /// of their sample, or beyond `max_reassembly_bytes_per_writer` or `max_reassembly_bytes`.
    pub fragments_rejected: u64,
    /// Incomplete samples dropped after `reassembly_timeout`.
    pub reassembly_expired: u64,
    /// Fragments re-sent on request.
    pub fragments_retransmitted: u64,
    /// NACK_FRAGs sent.
    pub nackfrags_sent: u64,
    /// Datagrams of asynchronous writers released by `poll_scheduled` (also counted in
    /// `datagrams_sent`).
    pub datagrams_scheduled: u64,
    /// AUTH messages refused: a credential that is malformed, of another realm, expired or
    /// revoked, an answer that does not verify, or one addressed to someone else.
    pub auth_failed: u64,
    /// Matches refused because a peer's credential does not grant the topic.
    pub access_denied: u64,
    /// Samples sealed by local writers (once each, whatever the number of readers).
    pub samples_sealed: u64,
    /// Sealed samples opened for local readers.
    pub samples_opened: u64,
    /// Sealed samples refused: they did not authenticate (tampered, replayed under another
    /// number, or sealed under a key that is not the writer's).
    pub open_failed: u64,
    /// Sealed samples dropped because their writer's key for that epoch is not here (yet):
    /// the key is asked for, and a reliable writer repairs them.
    pub no_key: u64,
    /// Wrapped sender keys received and unwrapped.
    pub keys_received: u64,
    /// Sender keys wrapped for a reader (a key agreement each: once per reader and epoch).
    pub keys_wrapped: u64,
    /// Writers moved to a new epoch (a reader left or was revoked, or the usage limit).
    pub rekeys: u64,
    /// Samples signed by local writers (`sign` modes).
    pub samples_signed: u64,
    /// Signed samples whose signature is not their writer's (dropped).
    pub signature_failed: u64,
    /// Pairwise mode: datagrams sealed once more for the one peer they went to.
    pub datagrams_pair_sealed: u64,
    /// Datagrams sealed for us by a peer, opened.
    pub datagrams_pair_opened: u64,
    /// SEALED datagrams that did not open (unknown or unverified peer, not for us, forged),
    /// dropped.
    pub pair_open_failed: u64,
    /// SEALED datagrams whose counter was seen before (replays), dropped.
    pub replayed: u64,
    /// Samples (or fragments) sent once to a multicast data group for several participants.
    pub datagrams_multicast: u64,
    /// Periodic HEARTBEATs sent once to a multicast data group for several participants
    /// (they follow the data there, so they cannot overtake it).
    pub heartbeats_multicast: u64,
    /// Samples with less protection than this session's policy asks for their topic (a
    /// plain sample where `encrypt` is required, an unsigned one where `sign` is), dropped.
    pub under_protected: u64,
    /// Ed25519 signatures made by local writers: one per sample, or one per batch in `sign`
    /// modes with batching (plus one per sample repaired alone).
    pub signatures_made: u64,
    /// Batch signatures verified (one per batch received, whatever its size).
    pub signatures_verified: u64,

    // The authenticated control plane (`docs/wire.md#auth_tag`).
    /// Datagrams given an AUTH_TAG (one per distinct datagram, whatever its destinations).
    pub datagrams_tagged: u64,
    /// Datagrams from verified peers whose AUTH_TAG verified.
    pub datagrams_authenticated: u64,
    /// Datagrams from a verified peer without a valid AUTH_TAG (forged, altered, or under a
    /// key we do not hold), dropped whole before anything in them was acted on.
    pub unauthenticated: u64,
    /// Submessages other than PARTICIPANT and AUTH from a peer not yet verified, dropped.
    pub unverified_dropped: u64,
    /// AUTHs presenting another credential under a verified participant's id, refused.
    pub identity_conflicts: u64,
    /// New epochs of this participant's control key.
    pub control_rekeys: u64,
    /// Authenticated datagrams meant for another participant (a member's datagram replayed
    /// to us by someone else), dropped.
    pub misaddressed: u64,
    /// This participant's control key wrapped for a peer (once per peer and epoch).
    pub control_keys_wrapped: u64,

    // Bounded cost before authentication (`docs/wire.md` section 4).
    /// Fragments refused because they would take their writer's samples being reassembled
    /// in a reader past `max_reassembly_bytes_per_writer` (or 256 samples), or the reader's
    /// past `max_reassembly_bytes` (or 1,024 samples). Also counted in `fragments_rejected`.
    pub reassembly_over_cap: u64,
    /// Incomplete samples dropped to make room, within their writer's share, for one more
    /// likely to be delivered: an earlier one of a reliable writer (delivered in order), a
    /// later one of a best-effort writer (earlier ones are skipped anyway).
    pub reassemblies_evicted: u64,
    /// Announcements refused for their size: a participant name, topic, type or partition
    /// longer than `max_string_bytes`, an endpoint with more than `max_partitions`
    /// partitions, or one that would take what is stored for its participant past
    /// `max_peer_metadata_bytes`.
    pub announcements_over_cap: u64,

    // Credentials over time (issue 17).
    /// Revocation lists refused as older than the one in force (a lower serial, or the same
    /// serial with other contents).
    pub stale_revocation_lists: u64,
    /// Revocation lists refused as not the realm CA's (another realm, a bad signature).
    pub invalid_revocation_lists: u64,
    /// Verified peers unmatched because their credential expired while they were members.
    pub credentials_expired: u64,

    // Issue 17, the participant table and address validation (`docs/wire.md#validation`).
    /// Challenges sent: PROBEs carrying a cookie, to the address an unknown participant
    /// was heard from, or to a known participant's new address.
    pub challenges_sent: u64,
    /// Participants whose address echoed our cookie: moved from the pending table to the
    /// participant table.
    pub participants_validated: u64,
    /// Pending participants forgotten unvalidated: evicted for a newer one when the pending
    /// table was full, or expired 5 s after they were first heard.
    pub pending_dropped: u64,
    /// Sends withheld from an address that has not answered a challenge: they would have
    /// brought what it was sent above 3 × what it sent us.
    pub amplification_limited: u64,
    /// PROBE_ACKs from unknown participants (or from a known one's new address) whose
    /// cookie did not verify, dropped.
    pub bad_cookies: u64,
    /// Secure realm: validated participants forgotten because they had not authenticated
    /// 10 s after validation, or to make room for a newer one.
    pub unauthenticated_forgotten: u64,
    /// Known participants followed to a new address after it answered a challenge (or back
    /// to the address they moved from, heard there again).
    pub addresses_moved: u64,
    /// Authenticated datagrams of a known participant from another address while it was
    /// still heard at its own (within 1 s): someone relays its datagrams; not followed.
    pub moves_refused: u64,
    /// Participants refused at an address that held
    /// [`MAX_IDS_PER_ADDRESS`](crate::MAX_IDS_PER_ADDRESS) others pending validation or, in a
    /// secure realm, validated but not yet authenticated (none of those is evicted for it).
    pub address_full: u64,

    // Sealed batches (`docs/wire.md#sealed_batch`).
    /// SEALED_BATCHes sealed by local writers: one AEAD each, for all its samples (which
    /// `samples_sealed` counts).
    pub batches_sealed: u64,
    /// SEALED_BATCHes opened for local readers (their samples count in `samples_opened`).
    pub batches_opened: u64,
    /// Samples a batch-sealing writer kept clear and sealed alone to send them outside a
    /// batch: repairs, a late joiner's history, a sample too large for its batch.
    pub samples_resealed: u64,
    /// Sealed samples of a matched writer that came before its key for their epoch and
    /// were held until it came (opened then, or dropped as `no_key` after 500 ms or beyond
    /// 4 MiB held).
    pub held_for_key: u64,
    /// REFUSALs sent: a peer's credential was refused, and it was told why
    /// (`docs/wire.md#refusal`; at most one a second to each peer).
    pub refusals_sent: u64,
    /// REFUSALs received that verified: a peer refused our credential and said why
    /// ([`Event::RefusedByPeer`]).
    pub refusals_heard: u64,
    /// REFUSALs received that were not believed (not for us, not over our challenge, not
    /// signed by the credential the sender presented, or not checked: after a
    /// signature that failed, none from that peer for 100 ms): dropped.
    pub refusals_unverified: u64,
    /// REFUSAL signatures checked: after one that failed, none from that peer for 100 ms, so
    /// a flood of REFUSALs with forged signatures costs a bounded number of verifications.
    pub refusals_checked: u64,

    // Routed peers (`route`).
    /// Datagrams from a routed peer's virtual address under another participant's id (a
    /// router that lies, or a driver's mistake): dropped.
    pub routed_mismatched: u64,
    /// Datagrams of a peer known at a direct address that came through a router while that
    /// address was still heard: taken, but the peer stays at its direct address.
    pub routed_not_followed: u64,
    /// Peers whose router links were made again (a new LINK_EPOCH): what our writers had
    /// re-sent to their readers was lost with the links, and is sent again at the next
    /// request rather than after the wait for a copy that will not arrive.
    pub peer_links_remade: u64,
    /// Secure realm: participant ids validated only by a cookie at a direct address, not
    /// yet authenticated, that moved to the same id announced through a router link, or
    /// to the address its verifying AUTH came from (a claim on the LAN gives way to the
    /// member).
    pub unverified_claims_moved: u64,
    /// Secure realm: AUTHs sent, besides to a peer's address, to another address an AUTH
    /// of its came from before we verified it (where it is, if a claim holds its id at the
    /// address we know).
    pub auth_sent_aside: u64,
}

impl Stats {
    /// Every counter by name, in the order of the fields: what `tether echo --stats` and
    /// `tether pub --stats` print. A new counter is listed by adding its name here (a test
    /// checks that none is missing).
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        macro_rules! named {
            ($($f:ident,)*) => {
                vec![$((stringify!($f), self.$f)),*]
            };
        }
        named!(
            datagrams_received,
            bytes_received,
            datagrams_sent,
            bytes_sent,
            malformed,
            wrong_domain,
            unknown_sender,
            unmatched_writer,
            unmatched_reader,
            skipped_ignored,
            unknown_kind,
            probes_sent,
            probes_answered,
            rtt_probes_sent,
            rtt_probes_answered,
            congestion_events,
            datagrams_queued,
            datagrams_dropped_for_room,
            resends_suppressed,
            nacks_sent,
            window_full,
            paths_raised,
            paths_lowered,
            datagrams_too_big,
            reassemblies_restarted,
            renacks,
            reannounced,
            stalls,
            table_full,
            samples_written,
            samples_delivered,
            samples_retransmitted,
            duplicates,
            rejected_full,
            expired,
            lost,
            heartbeats_sent,
            acknacks_sent,
            final_heartbeats_unanswered,
            gaps_sent,
            fragments_rejected,
            reassembly_expired,
            fragments_retransmitted,
            nackfrags_sent,
            datagrams_scheduled,
            auth_failed,
            access_denied,
            samples_sealed,
            samples_opened,
            open_failed,
            no_key,
            keys_received,
            keys_wrapped,
            rekeys,
            samples_signed,
            signature_failed,
            datagrams_pair_sealed,
            datagrams_pair_opened,
            pair_open_failed,
            replayed,
            datagrams_multicast,
            heartbeats_multicast,
            under_protected,
            signatures_made,
            signatures_verified,
            datagrams_tagged,
            datagrams_authenticated,
            unauthenticated,
            unverified_dropped,
            identity_conflicts,
            control_rekeys,
            misaddressed,
            control_keys_wrapped,
            reassembly_over_cap,
            reassemblies_evicted,
            announcements_over_cap,
            stale_revocation_lists,
            invalid_revocation_lists,
            credentials_expired,
            challenges_sent,
            participants_validated,
            pending_dropped,
            amplification_limited,
            bad_cookies,
            unauthenticated_forgotten,
            addresses_moved,
            moves_refused,
            address_full,
            batches_sealed,
            batches_opened,
            samples_resealed,
            held_for_key,
            refusals_sent,
            refusals_heard,
            refusals_unverified,
            refusals_checked,
            routed_mismatched,
            routed_not_followed,
            peer_links_remade,
            unverified_claims_moved,
            auth_sent_aside,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Stats;

    /// `counters` names every field of `Stats` (read from its `Debug` form), in order.
    #[test]
    fn counters_list_every_field() {
        let s = Stats::default();
        let debug = format!("{s:?}");
        let inner = debug
            .strip_prefix("Stats { ")
            .and_then(|d| d.strip_suffix(" }"))
            .expect("Stats { ... }");
        let fields: Vec<&str> = inner
            .split(", ")
            .map(|f| f.split(':').next().unwrap_or(""))
            .collect();
        let names: Vec<&str> = s.counters().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, fields);
        let t = Stats {
            replayed: 7,
            ..Stats::default()
        };
        assert!(t.counters().contains(&("replayed", 7)));
    }
}
