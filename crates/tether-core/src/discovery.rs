//! Discovery: the participant table, announcements, endpoints coming and going, leases.
//! Participants not yet validated wait in [`pending`].

mod departure;
pub(crate) mod pending;

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_wire::{
    DatagramBuilder, Encoding, EndpointKind, EndpointRepr, EntityId, HEADER_LEN, ParticipantId,
    ParticipantRepr, ProtectionMode, StrList, Submessage,
};

use crate::endpoint::EndpointInfo;
use crate::event::{Departure, Event, Guid};
use crate::qos::Qos;

use crate::matching::Side;
use crate::participant::{MAX_LEASE, Participant};

pub(crate) const FIRST_ANNOUNCE: Duration = Duration::from_millis(50);

/// A remote endpoint as discovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEndpoint {
    /// Writer or reader.
    pub kind: EndpointKind,
    /// Topic, type, partitions, QoS (with its encoding label) as announced. In a secure
    /// realm the topic is its id (`#` and 64 hex digits) and the type is empty: the name
    /// and type are in [`described`](Self::described), for members.
    pub info: EndpointInfo,
    /// How it protects samples (a writer) or requires them protected (a reader), in a
    /// secure realm.
    pub protection: ProtectionMode,
    /// In a secure realm: the topic's name and type, read from the description its
    /// ENDPOINT carries sealed for the realm's members (`docs/wire.md#endpoint`). `None`
    /// outside one, or if it carried none that opened here.
    pub described: Option<Described>,
}

impl RemoteEndpoint {
    /// Its topic's name: as described (secure realms), else as announced.
    pub fn topic_name(&self) -> &str {
        self.described
            .as_ref()
            .map_or(&self.info.topic, |d| &d.topic)
    }

    /// Its type's name: as described (secure realms), else as announced (empty: any).
    pub fn type_name(&self) -> &str {
        self.described
            .as_ref()
            .map_or(&self.info.type_name, |d| &d.type_name)
    }
}

/// A topic's name and type as a member of a secure realm reads them from a remote
/// endpoint's description (they derive the topic id it was announced under).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// The topic name.
    pub topic: String,
    /// The type name (may be empty).
    pub type_name: String,
}

#[derive(Debug)]
pub(crate) struct RemoteParticipant {
    pub(crate) addr: SocketAddr,
    pub(crate) name: String,
    pub(crate) lease: Duration,
    pub(crate) last_heard: Instant,
    pub(crate) endpoints: BTreeMap<EntityId, RemoteEndpoint>,
    /// With security on: what we know of its identity.
    pub(crate) auth: Option<crate::security::PeerAuth>,
    /// Where a writer sends it data with others': the multicast group its readers also
    /// take data on, or, routed, its link's group (`route::effective_group`).
    pub(crate) group: Option<SocketAddr>,
    /// The data group it announced (ours to use only while it is at a direct address).
    pub(crate) announced_group: Option<SocketAddr>,
    /// The path to it: how large a datagram crosses it.
    pub(crate) path: crate::path::PathMtu,
    /// The largest datagram sent to it (its path, or its data group's smallest).
    pub(crate) datagram: usize,
    /// How much may be in flight to it (`None`: a path on this host, or control off).
    pub(crate) cc: Option<Box<crate::congestion::Congestion>>,
    /// Counted bytes received from it (`docs/wire.md#received`), reported in PROBE_ACKs.
    pub(crate) received: u64,
    /// Bytes stored for what it announced, within `max_peer_metadata_bytes` (`limits.rs`).
    pub(crate) metadata: u64,
    /// Security off here: it sent AUTH (it is in a secure realm), and that was reported.
    pub(crate) secure_noted: bool,
    /// When its address answered our challenge (`pending`): in a secure realm it must
    /// authenticate within `UNVERIFIED_LIFETIME` of it.
    pub(crate) validated: Instant,
    /// A new address it was heard from, challenged at this time (`pending`).
    pub(crate) moving: Option<(SocketAddr, Instant)>,
    /// When it last got our whole announcement because it challenged us (`pending`).
    pub(crate) reannounced: Option<Instant>,
    /// When an authenticated datagram (with security off: any) last came from `addr`: a
    /// peer still heard at its address is not followed to another (`heard_from`).
    pub(crate) addr_heard: Instant,
    /// The address it moved from, and when: a datagram of it from there, authenticated,
    /// moves it back at once (it had not moved: someone relayed its datagrams).
    pub(crate) prev: Option<(SocketAddr, Instant)>,
    /// When a copy of one of its datagrams (a replay) was last checked for its tag: at
    /// most every [`COPY_CHECK`], so replays cost at most that many opens.
    pub(crate) copy_checked: Option<Instant>,
    /// The last LINK_EPOCH it announced (`None`: none yet): how many times its router
    /// links were made again ([`Participant::route_link_reset`]).
    pub(crate) link_epoch: Option<u32>,
}

impl RemoteParticipant {
    /// Whether `from` is another direct (LAN) address than the direct one it is known at:
    /// where, before it authenticates, a claim on its id may hold it while the member is at
    /// `from` (`docs/wire.md#validation`). Not between a LAN and a router link: the rules
    /// for routed peers apply there.
    pub(crate) fn elsewhere_on_lan(&self, from: SocketAddr) -> bool {
        self.addr != from && !crate::route::is_routed(&from) && !crate::route::is_routed(&self.addr)
    }
}

/// Least time between two checks of a copy of a peer's datagram (see `heard_copy`).
pub(crate) const COPY_CHECK: Duration = Duration::from_millis(20);

/// A known peer is followed to a new address only after this long without an authenticated
/// datagram from its current one (a peer that moved stops sending from there; one that
/// did not, whose datagrams someone relays from elsewhere, goes on).
pub(crate) const MOVE_QUIET: Duration = Duration::from_secs(1);

/// How long after a move the address a peer moved from is taken back without a challenge.
pub(crate) const PREV_KEPT: Duration = Duration::from_secs(30);

/// The AUTH_TAG `to` of a datagram for no participant the sender knows there
/// (`docs/wire.md#auth_tag`): every receiver that verified the sender refuses it.
pub(crate) const TO_NOBODY: u64 = u64::MAX;

/// The participant table and what announcing needs: remote participants by id and by address, multicast groups, and the announcement schedule.
#[derive(Debug)]
pub(crate) struct Peers {
    /// Boxed: a remote participant is almost 2 KB (its authentication state), and inline a
    /// map node of them spans five pages, so the lookup every datagram starts with touched
    /// a cold page for the node's keys and another for the value.
    pub(crate) remotes: BTreeMap<ParticipantId, Box<RemoteParticipant>>,
    /// Which remote participant datagrams to an address are for (their AUTH_TAG names it,
    /// pairwise mode seals for it, its path sizes them): of those at the address, the one
    /// that authenticated last (when it goes, another that authenticated), else the one
    /// validated first.
    pub(crate) remote_at: HashMap<SocketAddr, ParticipantId>,
    /// Every remote participant by address: one, but for a process restarted on the same
    /// port, or ids validated at the address by whoever sees its traffic, which do not take
    /// the place of a participant there (in a secure realm, at most
    /// [`pending::MAX_IDS_PER_ADDRESS`] that have not authenticated).
    pub(crate) at_addr: HashMap<SocketAddr, Vec<ParticipantId>>,
    /// Remote participants that announced a data group (0: every fan-out is unicast).
    pub(crate) grouped: usize,
    /// Changes to remote participants' addresses and groups (and arrivals and departures):
    /// writers recompute their fan-out plans when it moves.
    pub(crate) fanout_gen: u64,
    pub(crate) targets: BTreeSet<SocketAddr>,
    pub(crate) next_announce: Instant,
    pub(crate) announce_step: Duration,
    /// Data groups and the largest datagram all their members take.
    pub(crate) groups: Vec<(SocketAddr, usize)>,
    /// Counted bytes sent to each data group (its members' paths count them).
    pub(crate) group_sent: Vec<(SocketAddr, u64)>,
    /// Some remote participant's path is congestion controlled: sends are counted.
    pub(crate) controlled: bool,
    /// Peers and kinds of limit last reported over a limit (`limits.rs`), so each is
    /// reported once.
    pub(crate) limited: std::collections::VecDeque<(ParticipantId, u8)>,
    /// Participants heard from at addresses that have not answered a challenge.
    pub(crate) pending: pending::Pending,
    /// Whom datagrams to an address where no participant is known are for (a challenge to
    /// a pending participant, or to a known one's new address, or the answer to its PROBE
    /// from there): their AUTH_TAG names it. Cleared when it holds [`ADDRESSEES_MAX`].
    pub(crate) addressees: HashMap<SocketAddr, ParticipantId>,
}

/// Most entries of [`Peers::addressees`].
const ADDRESSEES_MAX: usize = 1024;

impl Peers {
    /// `secret`: the key of this participant's address-validation cookies (random).
    pub(crate) fn new(now: Instant, secret: &[u8; 32]) -> Self {
        Peers {
            remotes: BTreeMap::new(),
            remote_at: HashMap::new(),
            at_addr: HashMap::new(),
            grouped: 0,
            fanout_gen: 0,
            targets: BTreeSet::new(),
            next_announce: now,
            announce_step: FIRST_ANNOUNCE,
            groups: Vec::new(),
            group_sent: Vec::new(),
            controlled: false,
            limited: std::collections::VecDeque::new(),
            pending: pending::Pending::new(now, secret),
            addressees: HashMap::new(),
        }
    }
}

/// Counted bytes sent to data group `g` so far, from `counts` (0 for none).
pub(crate) fn group_sent(counts: &[(SocketAddr, u64)], g: Option<SocketAddr>) -> u64 {
    g.and_then(|g| counts.iter().find(|(a, _)| *a == g))
        .map_or(0, |(_, n)| *n)
}

/// How long after a match a silent reliable reader gets its writer announced again
/// ([`Participant::reannounce_to_silent_readers`]).
pub(crate) const REANNOUNCE_AFTER: Duration = Duration::from_millis(200);

/// Most times a silent reader gets a writer announced again (at 200, 400, 800 and
/// 1,600 ms); the periodic announcements go on after.
pub(crate) const REANNOUNCE_TIMES: u8 = 4;

impl Participant {
    /// A datagram from `pid` arrived from `from`: if `authenticated` (security off, or its
    /// AUTH_TAG verified), a known participant's lease is renewed, its address follows it,
    /// and `counted` bytes are added to what we report having
    /// received from it (`docs/wire.md#received`). False if `pid` is unknown.
    pub(crate) fn heard_from(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
        counted: usize,
        authenticated: bool,
    ) -> bool {
        if let Some(p) = self.peers.remotes.get_mut(&pid) {
            p.last_heard = now;
            if !authenticated {
                // In a secure realm, from a peer not yet verified: it may talk (PARTICIPANT
                // and AUTH), not move its address or count towards what we report received.
                return true;
            }
            p.received = p.received.wrapping_add(counted as u64);
            let (cur, lease, addr_heard) = (p.addr, p.lease, p.addr_heard);
            if cur == from {
                p.addr_heard = now;
            } else if p.prev.is_some_and(|(a, t)| {
                a == from
                    && now.saturating_duration_since(t) < PREV_KEPT
                    && crate::route::may_return(cur, from)
            }) {
                //= docs/wire.md#validation
                //# a datagram from the address a peer moved from, authenticated, moves it
                //# back at once
                p.prev = None;
                self.stats.addresses_moved += 1;
                self.move_peer(now, pid, from);
                if let Some(p) = self.peers.remotes.get_mut(&pid) {
                    p.prev = None;
                }
            } else if now.saturating_duration_since(addr_heard) >= self.move_quiet(cur, from, lease)
            {
                // The peer's address changed (new IP, NAT rebinding, a router link that
                // came or went): the new address is challenged, and followed (`move_peer`)
                // once it answers (`discovery/pending.rs`).
                self.challenge_new_address(now, pid, from);
            } else if crate::route::is_routed(&from) {
                // Heard directly and through a router: it stays where it is heard directly.
                self.stats.routed_not_followed += 1;
            } else {
                // Still heard at its address: someone relays its datagrams from elsewhere.
                self.stats.moves_refused += 1;
            }
            true
        } else {
            false
        }
    }

    /// A genuine copy of a datagram of `pid` already taken came from `from` (a relay raced
    /// it there first, or the network duplicated it): if `from` is its address, the address
    /// is alive; if `from` is the address it moved from, it had not moved: back there.
    /// Whether a copy of a datagram of `pid` from `from` is worth checking now: it could
    /// change where `pid` is (or keep it), and no copy was checked in the last
    /// [`COPY_CHECK`].
    pub(crate) fn check_copy(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
    ) -> bool {
        let Some(p) = self.peers.remotes.get_mut(&pid) else {
            return false;
        };
        let relevant = p.addr == from || p.prev.is_some_and(|(a, _)| a == from);
        if !relevant
            || p.copy_checked
                .is_some_and(|t| now.saturating_duration_since(t) < COPY_CHECK)
        {
            return false;
        }
        p.copy_checked = Some(now);
        true
    }

    pub(crate) fn heard_copy(&mut self, now: Instant, pid: ParticipantId, from: SocketAddr) {
        let Some(p) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        let cur = p.addr;
        if cur == from {
            p.addr_heard = now;
        } else if p.prev.is_some_and(|(a, t)| {
            a == from
                && now.saturating_duration_since(t) < PREV_KEPT
                && crate::route::may_return(cur, from)
        }) {
            p.prev = None;
            self.stats.addresses_moved += 1;
            self.move_peer(now, pid, from);
            if let Some(p) = self.peers.remotes.get_mut(&pid) {
                p.prev = None;
            }
        }
    }

    /// Participant `pid` moves to `from` (its new address answered our challenge).
    pub(crate) fn move_peer(&mut self, now: Instant, pid: ParticipantId, from: SocketAddr) {
        let Some(p) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        p.moving = None;
        if p.addr == from {
            return;
        }
        let old = std::mem::replace(&mut p.addr, from);
        p.prev = Some((old, now));
        p.addr_heard = now;
        self.left_address(pid, old);
        self.peers.remote_at.insert(from, pid);
        self.peers.at_addr.entry(from).or_default().push(pid);
        // Another address is another path, and maybe another group (a router link's).
        let path = self.new_path(&from, now);
        let cc = self.new_congestion(&from, now);
        if let Some(p) = self.peers.remotes.get_mut(&pid) {
            p.path = path;
            p.cc = cc;
            let group = crate::route::effective_group(from, p.announced_group);
            if p.group != group {
                self.peers.grouped =
                    self.peers.grouped + group.is_some() as usize - p.group.is_some() as usize;
                p.group = group;
            }
        }
        self.resize_paths();
    }

    /// Datagrams about to go to `addr`, where no participant is known, are for `pid`.
    pub(crate) fn address_for(&mut self, addr: SocketAddr, pid: ParticipantId) {
        let a = &mut self.peers.addressees;
        if a.len() >= ADDRESSEES_MAX && !a.contains_key(&addr) {
            a.clear();
        }
        a.insert(addr, pid);
    }

    /// Participant `pid` is no longer at `addr` (it left, or moved): datagrams to the
    /// address are for another participant there, if any (`Peers::remote_at`).
    fn left_address(&mut self, pid: ParticipantId, addr: SocketAddr) {
        if let Some(ids) = self.peers.at_addr.get_mut(&addr) {
            ids.retain(|p| *p != pid);
            if ids.is_empty() {
                self.peers.at_addr.remove(&addr);
            }
        }
        if self.peers.remote_at.get(&addr) != Some(&pid) {
            return;
        }
        self.peers.remote_at.remove(&addr);
        let next = self.peers.at_addr.get(&addr).and_then(|ids| {
            ids.iter()
                .filter_map(|p| self.peers.remotes.get(p).map(|r| (p, r)))
                .min_by_key(|(_, r)| {
                    let verified = r.auth.as_ref().is_some_and(|a| a.verified);
                    (!verified, r.validated)
                })
                .map(|(p, _)| *p)
        });
        if let Some(next) = next {
            self.peers.remote_at.insert(addr, next);
        }
    }

    /// Adds an address that receives our announcements (a registry entry, a multicast group,
    /// a static peer). Announces to it at once.
    pub fn add_target(&mut self, addr: SocketAddr) {
        self.timers_changed = true;
        if self.peers.targets.insert(addr) {
            self.announce_to(&[addr], None);
        }
    }

    /// Stops announcing to `addr`.
    pub fn remove_target(&mut self, addr: SocketAddr) {
        self.peers.targets.remove(&addr);
    }

    /// Announcement targets.
    pub fn targets(&self) -> impl Iterator<Item = &SocketAddr> {
        self.peers.targets.iter()
    }

    /// Every remote endpoint known, with its participant's name.
    pub fn remote_endpoints(&self) -> Vec<(Guid, String, RemoteEndpoint)> {
        let mut v = Vec::new();
        for (pid, p) in &self.peers.remotes {
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

    /// Remote endpoint `g` as discovered, with its participant's announced name.
    pub fn remote_endpoint(&self, g: Guid) -> Option<(&str, &RemoteEndpoint)> {
        let p = self.peers.remotes.get(&g.participant)?;
        Some((p.name.as_str(), p.endpoints.get(&g.entity)?))
    }

    /// The encoding label of writer `writer` as reader `reader` knows it: the writer's
    /// own (local or remote, while it is known), or the one it had when it left this reader
    /// (its samples may still wait to be taken). `Unset` when there is none.
    pub fn writer_encoding(&self, reader: EntityId, writer: Guid) -> Encoding {
        if writer.participant == self.id() {
            if let Some(w) = self.writers.get(&writer.entity) {
                return w.info.qos.encoding_label();
            }
        } else if let Some((_, e)) = self.remote_endpoint(writer) {
            return e.info.qos.encoding_label();
        }
        self.readers
            .get(&reader)
            .and_then(|r| r.left_label(writer))
            .unwrap_or(Encoding::Unset)
    }

    /// Remote participants: id, name, address.
    pub fn remote_participants(&self) -> Vec<(ParticipantId, String, SocketAddr)> {
        self.peers
            .remotes
            .iter()
            .map(|(id, p)| (*id, p.name.clone(), p.addr))
            .collect()
    }

    /// The name a remote participant's credential certifies, once it has proved it holds
    /// that credential (None with security off, or before). Unlike the name it announces,
    /// which it chooses, this one the realm's CA vouches for.
    pub fn certified_name(&self, pid: ParticipantId) -> Option<&str> {
        let auth = self.peers.remotes.get(&pid)?.auth.as_ref()?;
        auth.verified
            .then_some(auth.credential.as_ref())
            .flatten()
            .map(|c| c.name.as_str())
    }

    pub(crate) fn remote_endpoints_of(&self, kind: EndpointKind) -> Vec<(Guid, RemoteEndpoint)> {
        let mut v = Vec::new();
        for (pid, p) in &self.peers.remotes {
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

    pub(crate) fn on_participant(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
        p: ParticipantRepr<'_>,
    ) -> bool {
        // A peer cannot pin a table slot for longer than MAX_LEASE by claiming a huge lease.
        let lease = Duration::from_millis(p.lease_ms as u64).min(MAX_LEASE);
        let group = p.data_group.map(SocketAddr::V4);
        if let Some(rp) = self.peers.remotes.get_mut(&pid) {
            rp.lease = lease;
            if rp.name.is_empty() && !p.name.is_empty() {
                // Validated without its pending entry (evicted, or refused for a name over
                // `max_string_bytes`): its name comes now, if within the cap.
                if self.admit_name(pid, p.name, true).is_some() {
                    if let Some(rp) = self.peers.remotes.get_mut(&pid) {
                        rp.name = pending::cut(p.name);
                        rp.metadata = crate::limits::name_cost(&rp.name);
                    }
                }
            }
            let Some(rp) = self.peers.remotes.get_mut(&pid) else {
                return false;
            };
            if !self.peers.pending.unannounced.is_empty() {
                self.peers.pending.unannounced.remove(&pid);
            }
            //= docs/wire.md#validation
            //# an id that only a cookie validated at a direct address, not yet
            //# authenticated, moves at once to the same id announced through a router link
            if crate::route::is_routed(&from)
                && !crate::route::is_routed(&rp.addr)
                && self.cfg.security.is_some()
                && !rp.auth.as_ref().is_some_and(|a| a.verified)
            {
                // Anyone on a LAN may claim an id at an address of its own (it answers the
                // cookie sent there); only members and routers hold router links, and a
                // router forwards a session's frames only under the ids it registered. The
                // claim held our AUTH at its address, where the member behind the router
                // never got it: it goes again, the member's way (the outsider review's F1).
                self.stats.unverified_claims_moved += 1;
                self.move_peer(now, pid, from);
                if !self.peers.pending.promoted.contains(&pid) {
                    self.peers.pending.promoted.push(pid);
                }
            }
            let Some(rp) = self.peers.remotes.get_mut(&pid) else {
                return false;
            };
            // After a PROBE in the same datagram, this is a challenge: it does not know us
            // (`discovery/pending.rs`). After our answer, it gets what a newly validated
            // participant gets: our announcement (and AUTH).
            if self.peers.pending.probed == Some((self.input, pid))
                && rp.addr == from
                && rp
                    .reannounced
                    .is_none_or(|t| now.saturating_duration_since(t) >= pending::REANNOUNCE_MIN)
                && !self.peers.pending.promoted.contains(&pid)
            {
                rp.reannounced = Some(now);
                self.peers.pending.promoted.push(pid);
            }
            rp.announced_group = group;
            let group = crate::route::effective_group(rp.addr, group);
            if rp.group != group {
                self.peers.grouped =
                    self.peers.grouped + group.is_some() as usize - rp.group.is_some() as usize;
                rp.group = group;
                self.resize_paths();
            }
            return true;
        }
        // Unknown: it waits in the pending table while its address is challenged; what it
        // announces is taken once it answers (`discovery/pending.rs`). A name over the cap
        // is refused first (`limits.rs`).
        if self.admit_name(pid, p.name, false).is_none() {
            return false;
        }
        self.on_unknown_participant(now, pid, from, &p)
    }

    pub(crate) fn on_endpoint(&mut self, now: Instant, pid: ParticipantId, e: EndpointRepr<'_>) {
        if !self.peers.remotes.contains_key(&pid) {
            return;
        }
        // Sizes are checked on the wire form: nothing is allocated for what is refused.
        if !self.endpoint_within_limits(pid, &e) {
            return;
        }
        let info = EndpointInfo {
            topic: e.topic.to_string(),
            type_name: e.type_name.to_string(),
            partitions: e.partitions.iter().map(str::to_string).collect(),
            qos: Qos::from_repr(&e.qos).encoding(e.encoding),
        };
        let max = self.cfg.max_endpoints_per_participant;
        let Some(rp) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        // A re-announcement of what we hold (our peers seal each description once, so
        // its bytes repeat) changes nothing and is not opened again.
        if let Some(old) = rp.endpoints.get(&e.entity) {
            if old.kind == e.kind
                && old.info == info
                && old.protection == e.protection
                && (old.described.is_some() || e.description.is_none())
            {
                return;
            }
        }
        //= docs/wire.md#endpoint
        //# A member opens the description, and shows the name and type only if they derive
        //# the id the endpoint is announced under
        //= docs/wire.md#endpoint
        //# A description longer than a name and a type within `max_string_bytes` is not
        //# opened; the endpoint is taken without it
        let cap = self.cfg.max_string_bytes;
        let described = match (e.description, self.cfg.security.as_deref()) {
            (Some(d), Some(sec)) if d.len() <= 2 * cap + 4 + tether_wire::DESCRIPTION_OVERHEAD => {
                sec.read_description(e.topic, d)
                    .filter(|(t, ty)| t.len() <= cap && ty.len() <= cap)
                    .map(|(topic, type_name)| Described { topic, type_name })
            }
            _ => None,
        };
        let remote = RemoteEndpoint {
            kind: e.kind,
            info,
            protection: e.protection,
            described,
        };
        let cost = crate::limits::stored_cost(&remote);
        let Some(rp) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        match rp.endpoints.get(&e.entity) {
            Some(old) if *old == remote => return, // a periodic re-announcement
            Some(_) => self.remove_remote_endpoint_with(pid, e.entity, Departure::Left, false),
            None => {}
        }
        let Some(rp) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        if rp.endpoints.len() >= max {
            self.stats.table_full += 1;
            self.over_limit(pid, crate::event::Limit::Endpoints { max });
            return;
        }
        let max_meta = self.cfg.max_peer_metadata_bytes;
        if rp.metadata.saturating_add(cost) > max_meta as u64 {
            self.stats.announcements_over_cap += 1;
            let limit = crate::event::Limit::MetadataBytes { max: max_meta };
            self.over_limit(pid, limit);
            return;
        }
        rp.metadata += cost;
        rp.endpoints.insert(e.entity, remote.clone());
        let g = Guid {
            participant: pid,
            entity: e.entity,
        };
        self.match_remote(now, g, &remote);
    }

    /// Remote endpoint `g` against every local endpoint of the other kind.
    fn match_remote(&mut self, now: Instant, g: Guid, remote: &RemoteEndpoint) {
        match remote.kind {
            EndpointKind::Reader => {
                let ws: Vec<EntityId> = self.writers.keys().copied().collect();
                for w in ws {
                    self.try_match(now, w, g, remote, Side::LocalWriter);
                }
            }
            EndpointKind::Writer => {
                let rs: Vec<EntityId> = self.readers.keys().copied().collect();
                for r in rs {
                    self.try_match(now, r, g, remote, Side::LocalReader);
                }
            }
        }
    }

    /// Every endpoint `pid` announced, against ours: once both sides of a secure realm have
    /// verified each other, endpoints that arrived before then match.
    pub(crate) fn match_known_endpoints(&mut self, now: Instant, pid: ParticipantId) {
        let known: Vec<(EntityId, RemoteEndpoint)> = self
            .peers
            .remotes
            .get(&pid)
            .map(|p| p.endpoints.iter().map(|(e, r)| (*e, r.clone())).collect())
            .unwrap_or_default();
        for (entity, remote) in known {
            let g = Guid {
                participant: pid,
                entity,
            };
            self.match_remote(now, g, &remote);
        }
    }

    pub(crate) fn housekeeping(&mut self, now: Instant) {
        self.probe_paths(now);
        self.expire_unknown(now);
        let expired: Vec<ParticipantId> = self
            .peers
            .remotes
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.last_heard) > p.lease)
            .map(|(id, _)| *id)
            .collect();
        for p in expired {
            self.remove_participant(p, Departure::LeaseExpired);
        }
        self.settle_owed(now);
        self.expire_credentials(now);
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
                        .peers
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
    pub(crate) fn announce_period(&self) -> Duration {
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

    /// This participant as a PARTICIPANT submessage announces it.
    pub(crate) fn participant_repr(&self) -> ParticipantRepr<'_> {
        ParticipantRepr {
            lease_ms: u32::try_from(self.cfg.lease.as_millis())
                .unwrap_or(u32::MAX)
                .max(1),
            name: &self.cfg.name,
            data_group: self.cfg.data_group,
        }
    }

    /// Our LINK_EPOCH, announced beside our PARTICIPANT once a router link was made
    /// (`docs/wire.md#link_epoch`).
    fn link_epoch_submessage(&self) -> Option<Submessage<'static>> {
        (self.link_epoch > 0).then_some(Submessage::LinkEpoch(self.link_epoch))
    }

    /// Datagrams announcing this participant and its endpoints (`only`: one endpoint).
    pub(crate) fn announcement(&self, only: Option<EntityId>) -> Vec<Bytes> {
        let mut out = Vec::new();
        let hdr = self.header();
        let part = Submessage::Participant(self.participant_repr());
        let mut buf = Vec::new();
        let mut b = DatagramBuilder::new(&mut buf, hdr);
        let _ = b.push(&part);
        let epoch = self.link_epoch_submessage();
        if let Some(e) = &epoch {
            let _ = b.push(e);
        }
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
        // Announcements go to every participant and discovery target alike: sized for a link.
        let limit = crate::path::link_size(self.cfg.path_mtu, self.cfg.max_datagram)
            .saturating_sub(crate::path::security_overhead(&self.cfg));
        let sec = self.cfg.security.as_deref();
        for (id, kind, info) in eps {
            let protection = sec.map_or(ProtectionMode::Unannounced, |s| s.mode_for(&info.topic));
            let wire = self.wire_info(info);
            let info = &wire;
            let parts: Vec<&str> = info.partitions.iter().map(String::as_str).collect();
            let e = Submessage::Endpoint(EndpointRepr {
                entity: id,
                kind,
                qos: info.qos.to_repr(),
                protection,
                encoding: info.qos.encoding_label(),
                topic: &info.topic,
                type_name: &info.type_name,
                partitions: StrList::Slice(&parts),
                description: self.keystore.descriptions.get(&id).map(Vec::as_slice),
            });
            // Measure, then start a new datagram if it would not fit.
            tmp.clear();
            let mut m = DatagramBuilder::new(&mut tmp, hdr);
            if m.push(&e).is_err() {
                continue;
            }
            let elen = tmp.len() - HEADER_LEN;
            if buf.len() + elen > limit && count > 0 {
                out.push(Bytes::from(std::mem::take(&mut buf)));
                let mut nb = DatagramBuilder::new(&mut buf, hdr);
                let _ = nb.push(&part);
                if let Some(e) = &epoch {
                    let _ = nb.push(e);
                }
                count = 0;
            }
            buf.extend_from_slice(&tmp[HEADER_LEN..]);
            count += 1;
        }
        out.push(Bytes::from(buf));
        out
    }

    pub(crate) fn announce_endpoint(&mut self, id: EntityId) {
        self.announce_to(&self.all_destinations(), Some(id));
    }

    /// Announces us (our endpoints, or `only` that one) to each of `dests`: as
    /// [`announcement`](Self::announcement) to a real address, one endpoint a datagram to a
    /// routed one ([`routed_announcement`](Self::routed_announcement)).
    /// A reliable remote reader matched to one of our writers that has not said a word to
    /// it ([`REANNOUNCE_AFTER`] after the match, then twice, four and eight times that)
    /// may not know the writer: the ENDPOINT that told its participant was lost. The
    /// writer is announced to it again, alone, rather than at the next period (1 s): a
    /// reader that does not know its writer drops its samples and heartbeats, and the
    /// writer's acknowledgements wait. (The lossy review saw a bounded `tether pub` time
    /// out at 35 % loss each way while its subscriber took 1.5 s to learn the writer.)
    pub(crate) fn reannounce_to_silent_readers(&mut self, now: Instant) {
        let mut due: Vec<(SocketAddr, EntityId)> = Vec::new();
        for w in self.writers.values_mut() {
            for (g, rp) in w.readers.iter_mut() {
                if !rp.reliable || rp.local || rp.answered || rp.reannounced >= REANNOUNCE_TIMES {
                    continue;
                }
                // `heard` is still the time of the match.
                let wait = REANNOUNCE_AFTER.saturating_mul(1 << rp.reannounced);
                if now.saturating_duration_since(rp.heard) < wait {
                    continue;
                }
                rp.reannounced += 1;
                if let Some(p) = self.peers.remotes.get(&g.participant) {
                    if !due.contains(&(p.addr, w.id)) {
                        due.push((p.addr, w.id));
                    }
                }
            }
        }
        for (addr, id) in due {
            self.stats.reannounced += 1;
            self.announce_to(&[addr], Some(id));
        }
    }

    pub(crate) fn announce_to(&mut self, dests: &[SocketAddr], only: Option<EntityId>) {
        let (mut plain, mut routed) = (None, None);
        for &a in dests {
            if crate::route::is_routed(&a) || crate::route::is_route_group(&a) {
                let r = routed.get_or_insert_with(|| self.routed_announcement(only));
                for (d, e) in r.clone() {
                    self.push_announcement(a, d, e);
                }
            } else {
                let p = plain.get_or_insert_with(|| self.announcement(only));
                for d in p.clone() {
                    self.push_transmit(a, d);
                }
            }
        }
    }

    /// Our announcement for a routed peer or a router link's group: our PARTICIPANT alone
    /// (unless `only` one endpoint is announced), then each endpoint in a datagram of its
    /// own, after our PARTICIPANT, with the endpoint's id, which the driver turns into the
    /// frame's routing key and kind: a site's export list then holds back the announcements
    /// of the topics it does not export, as it holds back their data, so that no writer
    /// matches a reader beyond a boundary its samples cannot cross.
    pub(crate) fn routed_announcement(
        &self,
        only: Option<EntityId>,
    ) -> Vec<(Bytes, Option<EntityId>)> {
        let ids: Vec<EntityId> = self
            .writers
            .keys()
            .chain(self.readers.keys())
            .copied()
            .filter(|id| only.is_none_or(|o| o == *id))
            .collect();
        let mut out = Vec::new();
        if only.is_none() {
            let mut buf = Vec::new();
            let mut b = DatagramBuilder::new(&mut buf, self.header());
            let _ = b.push(&Submessage::Participant(self.participant_repr()));
            if let Some(e) = self.link_epoch_submessage() {
                let _ = b.push(&e);
            }
            out.push((Bytes::from(buf), None));
        }
        for id in ids {
            // The announcement of this endpoint alone: PARTICIPANT and its ENDPOINT.
            for d in self.announcement(Some(id)) {
                out.push((d, Some(id)));
            }
        }
        out
    }

    /// Queues an announcement datagram to `dest`, naming the endpoint it announces.
    fn push_announcement(&mut self, dest: SocketAddr, d: Bytes, announces: Option<EntityId>) {
        self.push_transmit(dest, d);
        if let Some(t) = self.transmits.back_mut() {
            t.announces = announces;
        }
    }
}
