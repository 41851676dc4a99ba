//! Participants heard from but not yet known: the pending table, address validation by
//! cookie, and the anti-amplification budget (`docs/wire.md#validation`).
//!
//! A PARTICIPANT from an unknown participant id creates no remote participant. Its sender
//! goes into a small pending table (each entry forgotten [`PENDING_LIFETIME`] after it was
//! first heard, whatever it sends meanwhile) and its address is challenged: a PROBE whose
//! id is a cookie, 64 bits of HMAC-SHA-256 under this participant's own random secret over
//! (participant id, address, time period). Only whoever receives at that address can echo
//! the cookie in a PROBE_ACK; when the echo comes back from that address, under that
//! participant id, the participant is validated and joins the participant table, and only
//! then gets our whole announcement (and, in a secure realm, our AUTH). The cookie verifies
//! without the pending entry, so a participant whose entry a flood of invented ids evicted
//! is still validated when its answer comes.
//!
//! One address holds at most [`MAX_IDS_PER_ADDRESS`] ids that are pending or (in a secure
//! realm) validated but not yet authenticated; a new id at an address that holds as many is
//! refused, and never takes the place of one already there. Anyone who writes an address
//! on its datagrams, and sees what is sent there, can validate ids at that address: had a
//! new id replaced an old one, a host on the same Wi-Fi could have evicted a real peer,
//! not yet authenticated, by validating an invented id at its address during its
//! handshake, and again at each of its announcements.
//!
//! Until an address is validated, everything sent to it in reply to what came from it (the
//! challenge, our answer to its challenge) counts against 3 × the bytes received from it,
//! as QUIC does (RFC 9000, section 8): over that, nothing more goes until more arrives.
//! Discovery targets (the registry, configured peers, multicast groups) are not replies and
//! are not limited: this participant chose to announce there.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_wire::{
    DatagramBuilder, HEADER_LEN, ParticipantId, ParticipantRepr, ProbeAckRepr, ProbeRepr,
    Submessage,
};

use crate::event::{AuthFailure, Event};
use crate::participant::{MAX_LEASE, Participant};

/// How long a pending participant is kept after it was first heard from its address. Its
/// announcements do not extend it.
pub const PENDING_LIFETIME: Duration = Duration::from_secs(5);

/// In a secure realm, how long a validated participant stays without authenticating.
pub const UNVERIFIED_LIFETIME: Duration = Duration::from_secs(10);

/// Bytes sent to an address that has not answered a challenge, per byte received from it.
pub const AMPLIFICATION_FACTOR: u64 = 3;

/// A PARTICIPANT_BYE's datagram (header and the bare submessage): what an answer to a
/// challenge leaves of the address's budget, security off (`say_goodbye_to_pending`).
const GOODBYE_ROOM: usize = HEADER_LEN + tether_wire::SUBMESSAGE_HEADER_LEN;

/// Most routed participants not yet authenticated that join without a challenge
/// ([`Participant::on_unknown_participant`]); more are challenged.
pub(crate) const MAX_UNCHALLENGED: usize = 16;

/// Most participant ids one address holds at once pending validation or, in a secure realm,
/// validated but not yet authenticated (`docs/wire.md#validation`): a new id at an address
/// that holds as many is refused (`Stats::address_full`), never one already there evicted.
/// One socket is one participant, so a real address needs one; a few more leave room for a
/// process restarted on the same port, or a NAT that reuses a mapping, while its
/// predecessor is still held.
pub const MAX_IDS_PER_ADDRESS: usize = 4;

/// A cookie stays valid in the period it was made in and the next one (so for 2.5 to 5 s).
pub(crate) const COOKIE_PERIOD: Duration = Duration::from_millis(2500);

/// A pending participant's announcements bring a new challenge at most this often (its
/// first ones come in a burst); unanswered challenges are repeated on a timer
/// ([`CHALLENGE_RETRY`]).
const RECHALLENGE: Duration = Duration::from_millis(25);

/// An unanswered challenge is repeated after this, then after twice as long each time
/// (within the address's allowance), up to [`CHALLENGE_RETRY_MAX`].
const CHALLENGE_RETRY: Duration = Duration::from_millis(10);

/// The longest wait between two challenges of one pending participant.
const CHALLENGE_RETRY_MAX: Duration = Duration::from_secs(1);

/// A validated participant not yet heard announcing itself is asked again this many times
/// (after [`CHALLENGE_RETRY`], then twice as long each time: some 600 ms in all); then its
/// periodic announcements bring it.
const MAX_ASKS: u32 = 6;

/// A participant that challenges us although we know it gets our whole announcement again
/// at most this often (anyone can write its id on a small datagram from its address).
pub(crate) const REANNOUNCE_MIN: Duration = Duration::from_millis(50);

/// A known participant heard from a new address has it challenged at most this often.
const MOVE_RETRY: Duration = Duration::from_millis(50);

/// Fewer bytes than any ENDPOINT takes (its fixed fields and QoS).
const MIN_ENDPOINT: usize = 32;

/// Longest name a pending entry keeps (bytes; longer ones are cut at a character).
const NAME_MAX: usize = 255;

/// How long after its address is validated a participant that has sent no AUTH at all is
/// reported as having no keys ([`AuthFailure::NoAuth`]): a member answers our AUTH within a
/// round trip, and resends its own from 50 ms on, doubling, so 2 s covers several losses
/// in a row; a session without keys never sends one.
pub const NO_AUTH_AFTER: Duration = Duration::from_secs(2);

/// Participants forgotten for not authenticating whose failure was already reported: found
/// again, they are not reported again.
const REPORTED_MEMORY: usize = 256;

mod table;
pub(crate) use table::{Noted, Pending};

/// `name`, cut to [`NAME_MAX`] bytes at a character boundary.
pub(crate) fn cut(name: &str) -> String {
    let mut end = name.len().min(NAME_MAX);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// `m` as it is laid out in a datagram (its submessage header first, no datagram header).
fn encoded(m: &Submessage<'_>) -> Vec<u8> {
    let mut dg = Vec::new();
    let hdr = tether_wire::Header {
        domain: 0,
        participant: ParticipantId(1),
    };
    if DatagramBuilder::new(&mut dg, hdr).push(m).is_err() {
        return Vec::new();
    }
    dg.split_off(HEADER_LEN)
}

/// The submessages of a datagram laid out by `DatagramBuilder` (header skipped), each with
/// its submessage header.
fn submessages(d: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut pos = HEADER_LEN;
    std::iter::from_fn(move || {
        let h = d.get(pos..pos + 4)?;
        let end = pos + 4 + u16::from_le_bytes([h[2], h[3]]) as usize;
        let s = d.get(pos..end)?;
        pos = end;
        Some(s)
    })
}

impl Participant {
    /// Pending participants: heard from at an address that has not answered our challenge.
    pub fn pending_participants(&self) -> usize {
        self.peers.pending.len()
    }

    /// What a datagram to `to`, an address that has not answered a challenge, may hold:
    /// its allowance, less the AUTH_TAG every datagram leaves with in a secure realm.
    fn unvalidated_room(&self, to: SocketAddr) -> usize {
        self.peers
            .pending
            .left(to)
            .saturating_sub(self.auth_tag_len())
    }

    /// The AUTH_TAG's bytes on each datagram (none with security off).
    fn auth_tag_len(&self) -> usize {
        if self.cfg.security.is_some() {
            tether_wire::AUTH_TAG_LEN
        } else {
            0
        }
    }

    /// Sends `dg` to `to`, an address that has not answered a challenge, if its allowance
    /// takes it; else counts it withheld.
    fn send_unvalidated(&mut self, to: SocketAddr, dg: Vec<u8>) -> bool {
        // In a secure realm every datagram leaves with its AUTH_TAG: counted too.
        let len = dg.len() + self.auth_tag_len();
        if len > self.peers.pending.left(to) {
            self.stats.amplification_limited += 1;
            return false;
        }
        self.peers.pending.spend(to, len);
        self.push_transmit(to, Bytes::from(dg));
        true
    }

    /// Leaving: a PARTICIPANT_BYE to each address whose participant we challenged and
    /// that has not answered yet. It may know us all the same (we answered its own
    /// challenge, which validated us there; its answer to ours is what is still on its
    /// way), and would hold our endpoints until our lease ran out. Within each address's
    /// budget, as everything sent there: answers keep room for it ([`GOODBYE_ROOM`]), and
    /// challenges are padded to pay for that room. Not in a secure realm: a peer takes no
    /// endpoint of ours before our AUTH, and drops a goodbye it cannot verify yet.
    pub(crate) fn say_goodbye_to_pending(&mut self) {
        if self.cfg.security.is_some() {
            return;
        }
        for to in self.peers.pending.challenged_addresses() {
            let mut dg = Vec::new();
            let _ = DatagramBuilder::new(&mut dg, self.header()).push(&Submessage::ParticipantBye);
            self.send_unvalidated(to, dg);
        }
    }

    /// What an answer to a challenge leaves unspent of its address's budget: a goodbye's
    /// datagram, should we leave before the challenger answers ours (security off).
    fn goodbye_room(&self) -> usize {
        if self.cfg.security.is_some() {
            0
        } else {
            GOODBYE_ROOM
        }
    }

    /// A PARTICIPANT from unknown participant `pid` at `from`: it waits in the pending table
    /// while its address is challenged, with a PROBE carrying our cookie and our own
    /// PARTICIPANT (so it learns us), within what the address's allowance takes.
    ///
    /// In a secure realm a routed peer (a virtual address, [`crate::route`]) is not
    /// challenged: it joins the participant table at once (true), as a validated one does.
    /// Its datagrams came over a router link, which only a realm's members and routers hold
    /// (mutual TLS), and a router forwards a session's frames only under the participant
    /// ids that session registered on that link; our reply goes back as a frame to that
    /// participant. A cookie proves that the sender receives at its address, and whoever
    /// can send there receives there (the member behind the link, or a router on the way,
    /// which sees every frame): it would cost two crossings of the routers and prove
    /// nothing. The driver must hand the engine a virtual source only for what came
    /// through a router link (a session drops UDP datagrams from such addresses, counted
    /// in `virtual_source`).
    ///
    /// At most [`MAX_UNCHALLENGED`] routed participants that have not authenticated are
    /// held that way; past that, routed newcomers are challenged as any other until some
    /// authenticate or are forgotten. A member (or a router) announcing under invented ids
    /// would otherwise fill the places of participants still authenticating at no cost,
    /// one announcement each, and keep a real newcomer out (the outsider review); with a
    /// challenge each invented id costs it a round trip, as before.
    pub(crate) fn on_unknown_participant(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
        p: &ParticipantRepr<'_>,
    ) -> bool {
        let cap = self.cfg.max_pending_participants;
        let others = self.unverified_at(from, pid);
        match self.peers.pending.note(now, pid, from, p, cap, others) {
            Noted::Refused => {
                self.stats.address_full += 1;
                return false;
            }
            Noted::Added { evicted } => self.stats.pending_dropped += evicted,
            Noted::Refreshed => {}
        }
        if crate::route::is_routed(&from)
            && self.cfg.security.is_some()
            && self.routed_unverified() < MAX_UNCHALLENGED
        {
            let joined = self.promote(now, pid, from);
            if joined {
                // Its PARTICIPANT is this one: nothing to ask it for again.
                self.peers.pending.unannounced.remove(&pid);
            }
            return joined;
        }
        let input = self.input;
        if self.peers.pending.last_challenge == Some((input, from, pid)) {
            // Challenged in this datagram's answer, before its entry existed.
            self.peers.pending.mark_challenged(input, now, from, pid);
            return false;
        }
        if !self.peers.pending.challenged(input, now, from, pid) {
            self.challenge(now, pid, from, false);
        }
        false
    }

    /// Challenges `pid` at `to`: our cookie, and our PARTICIPANT if the allowance takes it.
    /// `retry`: a repeat from housekeeping, sent only if it fits (not counted as withheld).
    /// True if it went.
    fn challenge(&mut self, now: Instant, pid: ParticipantId, to: SocketAddr, retry: bool) -> bool {
        let from = to;
        self.address_for(to, pid);
        let cookie = self.peers.pending.cookie(pid, from, now);
        let mut dg = Vec::new();
        // Padded to pay for the room the answer keeps for a goodbye (3 x the padding).
        let padding = self.goodbye_room().div_ceil(AMPLIFICATION_FACTOR as usize) as u16;
        let _ = DatagramBuilder::new(&mut dg, self.header()).push(&Submessage::Probe(ProbeRepr {
            id: cookie,
            padding,
        }));
        let bare = dg.len();
        // A repeat keeps the room the goodbye needs (the first is paid for by its padding).
        let keep = if retry { self.goodbye_room() } else { 0 };
        let left = self.unvalidated_room(from).saturating_sub(keep);
        dg.extend(encoded(&Submessage::Participant(self.participant_repr())));
        if dg.len() > left {
            // Our name does not fit: the challenge alone (the peer learns us once it is
            // validated, from our announcement).
            dg.truncate(bare);
        }
        if retry && dg.len() > left {
            return false;
        }
        if self.send_unvalidated(from, dg) {
            self.stats.challenges_sent += 1;
            let input = self.input;
            self.peers.pending.mark_challenged(input, now, from, pid);
            true
        } else {
            false
        }
    }

    /// A PROBE from a participant we do not know: a challenge (or a path probe of a peer
    /// that knows us). Answered to where it came from with its id and, in the same
    /// datagram, our own challenge, our PARTICIPANT and as many of our ENDPOINTs as the
    /// address's allowance takes: the answer validates us there, so what follows it in the
    /// datagram is taken from a known participant.
    pub(crate) fn answer_challenge(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
        p: ProbeRepr,
        len: usize,
    ) {
        self.stats.probes_answered += 1;
        self.address_for(from, pid);
        let mut dg = Vec::new();
        let ack = Submessage::ProbeAck(ProbeAckRepr {
            id: p.id,
            size: len as u32,
            received: None,
        });
        if DatagramBuilder::new(&mut dg, self.header())
            .push(&ack)
            .is_err()
        {
            return;
        }
        let answer = dg.len();
        let left = self
            .unvalidated_room(from)
            .saturating_sub(self.goodbye_room())
            .min(
                crate::path::link_size(self.cfg.path_mtu, self.cfg.max_datagram)
                    .saturating_sub(crate::path::security_overhead(&self.cfg)),
            );
        let mut challenged = false;
        // An id its address has no room for is not challenged: it could not be validated
        // (two peers whose addresses a forger filled would otherwise challenge each other
        // without end, each answer carrying a new challenge).
        let room = self.peers.pending.entry(from, pid).is_some()
            || self.peers.pending.at(from, pid) + self.unverified_at(from, pid)
                < MAX_IDS_PER_ADDRESS;
        if !room {
            self.stats.address_full += 1;
        } else if !self.peers.pending.challenged(self.input, now, from, pid) {
            let cookie = self.peers.pending.cookie(pid, from, now);
            dg.extend(encoded(&Submessage::Probe(ProbeRepr {
                id: cookie,
                padding: 0,
            })));
            challenged = true;
        }
        let part = encoded(&Submessage::Participant(self.participant_repr()));
        if dg.len() + part.len() <= left {
            dg.extend_from_slice(&part);
            // Our endpoints, if there is room for one at least (building the announcement
            // costs what our endpoints do, not what the sender sent).
            // Not to a routed peer in a secure realm: it takes no endpoint from us before
            // our AUTH, and endpoints go to routed peers one a datagram, each tagged with
            // its topic's key for the routers' export lists (`routed_announcement`).
            let routed = crate::route::is_routed(&from) && self.cfg.security.is_some();
            if left - dg.len() >= MIN_ENDPOINT
                && !routed
                && !(self.writers.is_empty() && self.readers.is_empty())
            {
                let announcement = self.announcement(None);
                if let Some(first) = announcement.first() {
                    for s in submessages(first).skip(1) {
                        if dg.len() + s.len() > left {
                            break;
                        }
                        dg.extend_from_slice(s);
                    }
                }
            }
        }
        if dg.len() > left && challenged {
            // The answer alone, then.
            dg.truncate(answer);
            challenged = false;
        }
        if self.send_unvalidated(from, dg) && challenged {
            self.stats.challenges_sent += 1;
            let input = self.input;
            self.peers.pending.mark_challenged(input, now, from, pid);
        }
    }

    /// A PROBE_ACK from a participant we do not know: if it echoes our cookie for it at the
    /// address it came from, its address is validated and it joins the participant table.
    /// True if it did.
    pub(crate) fn on_challenge_answer(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
        a: ProbeAckRepr,
    ) -> bool {
        if !self.peers.pending.verify(pid, from, now, a.id) {
            self.stats.bad_cookies += 1;
            return false;
        }
        self.promote(now, pid, from)
    }

    /// Routed participants that have not authenticated (yet).
    fn routed_unverified(&self) -> usize {
        self.peers
            .remotes
            .values()
            .filter(|p| crate::route::is_routed(&p.addr))
            .filter(|p| !p.auth.as_ref().is_some_and(|a| a.verified))
            .count()
    }

    /// In a secure realm, participants validated at `addr`, `except` one, that have not
    /// authenticated (0 with security off: nothing authenticates there).
    pub(crate) fn unverified_at(&self, addr: SocketAddr, except: ParticipantId) -> usize {
        if self.cfg.security.is_none() {
            return 0;
        }
        self.peers.at_addr.get(&addr).map_or(0, |ids| {
            ids.iter()
                .filter(|p| **p != except)
                .filter(|p| {
                    self.peers
                        .remotes
                        .get(p)
                        .is_some_and(|r| !r.auth.as_ref().is_some_and(|a| a.verified))
                })
                .count()
        })
    }

    /// Moves validated participant `pid` at `from` into the participant table. False if
    /// the table is full, or if `from` holds [`MAX_IDS_PER_ADDRESS`] other ids pending or
    /// (in a secure realm) validated but not yet authenticated.
    fn promote(&mut self, now: Instant, pid: ParticipantId, from: SocketAddr) -> bool {
        if self.peers.remotes.contains_key(&pid) {
            return true;
        }
        // An id the address has no room for is refused, even with a cookie that verifies
        // (its pending entry expired, or it answered the challenge in our answer to its
        // PROBE).
        if self.peers.pending.at(from, pid) + self.unverified_at(from, pid) >= MAX_IDS_PER_ADDRESS {
            self.stats.address_full += 1;
            return false;
        }
        if self.cfg.security.is_some() {
            // Those already at the address stay, authenticated or not: an id validated
            // there (by anyone who sees what is sent there) takes no one's place.
            if !self.make_room_for_unverified(from) {
                self.stats.address_full += 1;
                return false;
            }
        } else {
            // Security off, nothing authenticates, and anyone who sees the traffic can
            // forge anything in a participant's name: another participant at the same
            // address (a restarted process) is gone (one socket, one participant).
            let old: Vec<ParticipantId> =
                self.peers.at_addr.get(&from).cloned().unwrap_or_default();
            for o in old {
                self.remove_participant(o, crate::event::Departure::Replaced);
            }
        }
        if self.peers.remotes.len() >= self.cfg.max_participants {
            self.stats.table_full += 1;
            return false;
        }
        let (name, lease, group) =
            self.peers
                .pending
                .take(pid, from)
                .unwrap_or((String::new(), self.cfg.lease, None));
        self.stats.participants_validated += 1;
        // Datagrams to the address stay for whoever was there first until this one
        // authenticates (`on_auth`), so one validated there by a sniffer does not take a
        // peer's datagrams (each tagged for one participant, refused by any other).
        self.peers.remote_at.entry(from).or_insert(pid);
        self.peers.at_addr.entry(from).or_default().push(pid);
        let path = self.new_path(&from, now);
        let cc = self.new_congestion(&from, now);
        let reported = self.peers.pending.reported.contains(&pid);
        let auth = self.cfg.security.as_ref().map(|_| {
            let mut a = crate::security::PeerAuth::new(self.random.get());
            a.reported = reported;
            a
        });
        self.peers.remotes.insert(
            pid,
            Box::new(super::RemoteParticipant {
                addr: from,
                name: name.clone(),
                lease,
                last_heard: now,
                endpoints: std::collections::BTreeMap::new(),
                auth,
                group: crate::route::effective_group(from, group),
                announced_group: group,
                datagram: path.size,
                path,
                cc,
                received: 0,
                metadata: crate::limits::name_cost(&name),
                secure_noted: false,
                validated: now,
                moving: None,
                reannounced: None,
                addr_heard: now,
                prev: None,
                copy_checked: None,
                link_epoch: None,
            }),
        );
        self.peers.fanout_gen += 1;
        self.peers.grouped += crate::route::effective_group(from, group).is_some() as usize;
        self.resize_paths();
        self.events.push_back(Event::ParticipantDiscovered {
            participant: pid,
            name,
            addr: from,
        });
        self.peers.pending.promoted.push(pid);
        self.peers
            .pending
            .unannounced
            .insert(pid, (crate::participant::after(now, CHALLENGE_RETRY), 0));
        true
    }

    /// Once a datagram is handled: our answers to its PROBEs go out, and participants
    /// validated while handling it (or that challenged us, not knowing us) get our whole
    /// announcement and, in a secure realm, our AUTH. The announcement's first datagram
    /// starts with the answer to their challenge when it fits: whatever the path reorders,
    /// they take it from a participant they have just validated.
    pub(crate) fn answer_and_announce(&mut self, now: Instant) {
        if self.peers.pending.promoted.is_empty() && self.peers.pending.answers.is_empty() {
            return;
        }
        let mut answers = std::mem::take(&mut self.peers.pending.answers);
        let promoted = std::mem::take(&mut self.peers.pending.promoted);
        // In a secure realm our endpoints wait until the peer holds our control key (it
        // takes nothing but PARTICIPANT and AUTH from us before): the AUTH below carries our
        // PARTICIPANT, and `on_auth` sends the endpoints.
        let dgrams = if promoted.is_empty() || self.cfg.security.is_some() {
            Vec::new()
        } else {
            self.announcement(None)
        };
        let limit = crate::path::link_size(self.cfg.path_mtu, self.cfg.max_datagram)
            .saturating_sub(crate::path::security_overhead(&self.cfg));
        for pid in promoted {
            let Some(addr) = self.peers.remotes.get(&pid).map(|p| p.addr) else {
                continue;
            };
            let mut rest = &dgrams[..];
            if let Some(k) = answers.iter().position(|(p, a, _)| *p == pid && *a == addr) {
                let (_, _, mut ack) = answers.remove(k);
                match dgrams.first() {
                    Some(first) if ack.len() + first.len() - HEADER_LEN <= limit => {
                        ack.extend_from_slice(&first[HEADER_LEN..]);
                        rest = &dgrams[1..];
                    }
                    _ => {}
                }
                self.push_transmit(addr, Bytes::from(ack));
            }
            for d in rest {
                self.push_transmit(addr, d.clone());
            }
            self.send_auth(now, pid);
        }
        for (_, to, ack) in answers {
            self.push_transmit(to, Bytes::from(ack));
        }
    }

    /// Secure realm: when as many validated participants as the pending table holds have
    /// not authenticated, the one validated first goes, but not one at `at`, the address of
    /// the one to be validated (an id never takes the place of one at its address). False
    /// if there is no room (all of them are at `at`).
    fn make_room_for_unverified(&mut self, at: SocketAddr) -> bool {
        let unverified = self
            .peers
            .remotes
            .iter()
            .filter(|(_, p)| !p.auth.as_ref().is_some_and(|a| a.verified));
        let mut n = 0;
        let mut oldest: Option<(Instant, ParticipantId)> = None;
        for (id, p) in unverified {
            n += 1;
            let x = (p.validated, *id);
            if p.addr != at && oldest.is_none_or(|o| x < o) {
                oldest = Some(x);
            }
        }
        if n < self.cfg.max_pending_participants.max(1) {
            return true;
        }
        match oldest {
            Some((_, pid)) => {
                self.stats.unauthenticated_forgotten += 1;
                self.remove_participant(pid, crate::event::Departure::Replaced);
                true
            }
            None => false,
        }
    }

    /// Pending participants whose challenge went unanswered are challenged again, after
    /// [`CHALLENGE_RETRY`] and twice as long each time, while their address's allowance
    /// lasts: a lost challenge or answer costs a retry, not a wait for the peer's next
    /// announcement.
    pub(crate) fn retry_challenges(&mut self, now: Instant) {
        if self.peers.pending.next_retry().is_none_or(|t| now < t) {
            return;
        }
        let due: Vec<(SocketAddr, ParticipantId)> = self
            .peers
            .pending
            .entries
            .iter()
            .flat_map(|(a, s)| s.ids.iter().map(move |e| (*a, e)))
            .filter(|(_, e)| e.retry_at.is_some_and(|t| now >= t))
            .map(|(a, e)| (a, e.pid))
            .collect();
        for (to, pid) in due {
            if !self.challenge(now, pid, to, true) {
                // Nothing more until more arrives from there.
                if let Some(e) = self.peers.pending.entry_mut(to, pid) {
                    e.retry_at = None;
                }
            }
        }
        // Validated participants whose announcement we dropped (it came before we knew
        // them) and have not heard since: a challenge and our PARTICIPANT tell them we do
        // not know them, and they announce themselves again after answering.
        let asks: Vec<ParticipantId> = self
            .peers
            .pending
            .unannounced
            .iter()
            .filter(|(_, (t, _))| now >= *t)
            .map(|(p, _)| *p)
            .collect();
        for pid in asks {
            let Some(addr) = self.peers.remotes.get(&pid).map(|r| r.addr) else {
                self.peers.pending.unannounced.remove(&pid);
                continue;
            };
            let Some((at, tries)) = self.peers.pending.unannounced.get_mut(&pid) else {
                continue;
            };
            *tries += 1;
            if *tries > MAX_ASKS {
                self.peers.pending.unannounced.remove(&pid);
                continue;
            }
            *at = crate::participant::after(
                now,
                CHALLENGE_RETRY.saturating_mul(1 << (*tries).min(16)),
            );
            let mut dg = Vec::new();
            let cookie = self.peers.pending.cookie(pid, addr, now);
            let _ =
                DatagramBuilder::new(&mut dg, self.header()).push(&Submessage::Probe(ProbeRepr {
                    id: cookie,
                    padding: 0,
                }));
            dg.extend(encoded(&Submessage::Participant(self.participant_repr())));
            self.push_transmit(addr, Bytes::from(dg));
        }
    }

    /// Housekeeping: pending participants expire; in a secure realm, validated
    /// participants that have not authenticated in [`UNVERIFIED_LIFETIME`] are forgotten
    /// (and reported once).
    pub(crate) fn expire_unknown(&mut self, now: Instant) {
        self.stats.pending_dropped += self.peers.pending.expire(now);
        if self.cfg.security.is_none() {
            return;
        }
        //= docs/wire.md#validation
        //# A validated participant that has sent no AUTH at all 2 s after validation is
        //# reported once as having no keys
        let silent: Vec<ParticipantId> = self
            .peers
            .remotes
            .iter()
            .filter_map(|(id, p)| {
                let a = p.auth.as_ref()?;
                // Not a routed peer: only members hold router links, so it has keys; its
                // AUTH is late (a link lost and dialled again, a lossy path), not missing.
                (!a.heard
                    && !a.verified
                    && !a.reported
                    && !crate::route::is_routed(&p.addr)
                    && now.saturating_duration_since(p.validated) > NO_AUTH_AFTER)
                    .then_some(*id)
            })
            .collect();
        for pid in silent {
            if let Some(a) = self
                .peers
                .remotes
                .get_mut(&pid)
                .and_then(|p| p.auth.as_mut())
            {
                a.reported = true;
            }
            let memory = &mut self.peers.pending.reported;
            if memory.contains(&pid) {
                continue;
            }
            if memory.len() >= REPORTED_MEMORY {
                memory.pop_front();
            }
            memory.push_back(pid);
            self.events.push_back(Event::AuthenticationFailed {
                participant: pid,
                reason: AuthFailure::NoAuth,
            });
        }
        let late: Vec<(ParticipantId, bool)> = self
            .peers
            .remotes
            .iter()
            .filter_map(|(id, p)| {
                let a = p.auth.as_ref()?;
                (!a.verified && now.saturating_duration_since(p.validated) > UNVERIFIED_LIFETIME)
                    .then_some((*id, a.reported))
            })
            .collect();
        for (pid, reported) in late {
            self.stats.unauthenticated_forgotten += 1;
            let memory = &mut self.peers.pending.reported;
            if !reported && !memory.contains(&pid) {
                self.events.push_back(Event::AuthenticationFailed {
                    participant: pid,
                    reason: AuthFailure::NotInTime,
                });
            }
            if !memory.contains(&pid) {
                if memory.len() >= REPORTED_MEMORY {
                    memory.pop_front();
                }
                memory.push_back(pid);
            }
            // Never matched (matching takes authentication): nothing is owed.
            self.remove_participant(pid, crate::event::Departure::Replaced);
        }
    }

    /// A known participant heard from `from`, not its address: the new address is
    /// challenged (within its allowance), and followed once it answers.
    pub(crate) fn challenge_new_address(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
    ) {
        let Some(p) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        if p.moving
            .is_some_and(|(a, t)| a == from && now.saturating_duration_since(t) < MOVE_RETRY)
        {
            return;
        }
        p.moving = Some((from, now));
        self.address_for(from, pid);
        let cookie = self.peers.pending.cookie(pid, from, now);
        let mut dg = Vec::new();
        let mut b = DatagramBuilder::new(&mut dg, self.header());
        if b.push(&Submessage::Probe(ProbeRepr {
            id: cookie,
            padding: 0,
        }))
        .is_ok()
            && self.send_unvalidated(from, dg)
        {
            self.stats.challenges_sent += 1;
        }
    }

    /// A PROBE_ACK from known participant `pid`, from `from`, which is not its address: if it
    /// echoes our cookie for that address, the participant has moved there. True if so.
    pub(crate) fn on_new_address_answer(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
        a: &ProbeAckRepr,
    ) -> bool {
        if !self.peers.pending.verify(pid, from, now, a.id) {
            return false;
        }
        // A late answer from a router's virtual address does not take a peer from a direct
        // address heard since (`route`): direct is preferred while it lives.
        if let Some(p) = self.peers.remotes.get(&pid) {
            if crate::route::is_routed(&from)
                && !crate::route::is_routed(&p.addr)
                && now.saturating_duration_since(p.addr_heard) < crate::route::routed_quiet(p.lease)
            {
                self.stats.routed_not_followed += 1;
                return true;
            }
        }
        self.stats.addresses_moved += 1;
        self.move_peer(now, pid, from);
        true
    }
}
