//! The pending table: participants heard from addresses that have not answered our
//! challenge yet, the cookie key that makes the challenges, and what may still be sent to
//! each such address (`docs/wire.md#validation`).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tether_wire::{ParticipantId, ParticipantRepr};

use super::{
    AMPLIFICATION_FACTOR, CHALLENGE_RETRY, CHALLENGE_RETRY_MAX, COOKIE_PERIOD, MAX_IDS_PER_ADDRESS,
    MAX_LEASE, PENDING_LIFETIME, RECHALLENGE, cut,
};

/// What may still be sent to an unvalidated address.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Allowance {
    pub(super) received: u64,
    pub(super) sent: u64,
}

impl Allowance {
    pub(super) fn left(&self) -> usize {
        usize::try_from(
            (self.received.saturating_mul(AMPLIFICATION_FACTOR)).saturating_sub(self.sent),
        )
        .unwrap_or(usize::MAX)
    }
}

/// One participant heard from an address that has not answered our challenge.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(super) pid: ParticipantId,
    pub(super) first_seen: Instant,
    pub(super) name: String,
    pub(super) lease: Duration,
    pub(super) group: Option<SocketAddr>,
    /// When it was last challenged.
    pub(super) challenged: Option<Instant>,
    /// When it is challenged again (`None`: not yet challenged).
    pub(super) retry_at: Option<Instant>,
    /// Challenges sent to it so far.
    pub(super) tries: u32,
}

/// The participants pending at one address, and what may still be sent there.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(super) allowance: Allowance,
    /// At most [`MAX_IDS_PER_ADDRESS`], in the order they were first heard.
    pub(super) ids: Vec<Entry>,
}

/// What [`Pending::note`] did with a participant's announcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Noted {
    /// It was pending there already: what it announces is refreshed.
    Refreshed,
    /// It is pending there now; `evicted` entries (0 or 1) of other addresses went to make
    /// room in the full table.
    Added { evicted: u64 },
    /// Its address holds [`MAX_IDS_PER_ADDRESS`] ids already: nothing is kept of it.
    Refused,
}

/// The pending table, the cookie key, and what replies to unvalidated addresses may send.
#[derive(Debug)]
pub(crate) struct Pending {
    /// By source address: the participants pending there.
    pub(super) entries: BTreeMap<SocketAddr, Slot>,
    pub(super) key: tether_crypto::CookieKey,
    /// Time periods of cookies count from here.
    pub(super) epoch: Instant,
    /// The datagram being handled, when it came from an address with no entry: what may be
    /// sent back to it (3 × its own length).
    pub(super) current: Option<(SocketAddr, Allowance)>,
    /// The last challenge: in which input, to which address, for which participant (one
    /// challenge per datagram received is enough).
    pub(super) last_challenge: Option<(u64, SocketAddr, ParticipantId)>,
    /// Participants validated while handling the current datagram: they get our whole
    /// announcement (and AUTH) once that datagram is handled, after what answers it.
    pub(crate) promoted: Vec<ParticipantId>,
    /// Participants forgotten for not authenticating, whose failure was reported.
    pub(super) reported: std::collections::VecDeque<ParticipantId>,
    /// A known participant's PROBE handled in this input: if its PARTICIPANT follows in the
    /// same datagram, that is a challenge, and it does not know us yet.
    pub(crate) probed: Option<(u64, ParticipantId)>,
    /// Validated participants not heard announcing themselves since (what they sent before
    /// was dropped): when to ask again, and how many times we did.
    pub(crate) unannounced: BTreeMap<ParticipantId, (Instant, u32)>,
    /// PROBE_ACKs answering known participants' PROBEs in the current datagram (whose
    /// participant, to where, the datagram): sent once it is handled.
    pub(crate) answers: Vec<(ParticipantId, SocketAddr, Vec<u8>)>,
}

impl Pending {
    pub(crate) fn new(now: Instant, secret: &[u8; 32]) -> Pending {
        Pending {
            entries: BTreeMap::new(),
            key: tether_crypto::CookieKey::new(secret),
            epoch: now,
            current: None,
            last_challenge: None,
            promoted: Vec::new(),
            reported: std::collections::VecDeque::new(),
            probed: None,
            unannounced: BTreeMap::new(),
            answers: Vec::new(),
        }
    }

    /// Pending participants.
    pub(crate) fn len(&self) -> usize {
        self.entries.values().map(|s| s.ids.len()).sum()
    }

    /// Participants pending at `addr`, `except` one.
    pub(crate) fn at(&self, addr: SocketAddr, except: ParticipantId) -> usize {
        self.entries
            .get(&addr)
            .map_or(0, |s| s.ids.iter().filter(|e| e.pid != except).count())
    }

    pub(super) fn entry(&self, addr: SocketAddr, pid: ParticipantId) -> Option<&Entry> {
        self.entries.get(&addr)?.ids.iter().find(|e| e.pid == pid)
    }

    pub(super) fn entry_mut(&mut self, addr: SocketAddr, pid: ParticipantId) -> Option<&mut Entry> {
        self.entries
            .get_mut(&addr)?
            .ids
            .iter_mut()
            .find(|e| e.pid == pid)
    }

    /// A datagram of `len` bytes arrived from `from`: it adds to what may be sent back there
    /// until the address is validated.
    pub(crate) fn arrived(&mut self, from: SocketAddr, len: usize) {
        match self.entries.get_mut(&from) {
            Some(s) => {
                s.allowance.received += len as u64;
                self.current = None;
            }
            None => {
                self.current = Some((
                    from,
                    Allowance {
                        received: len as u64,
                        sent: 0,
                    },
                ))
            }
        }
    }

    /// Bytes that may still be sent to unvalidated address `to` (0: nothing).
    pub(super) fn left(&self, to: SocketAddr) -> usize {
        match self.entries.get(&to) {
            Some(s) => s.allowance.left(),
            None => match self.current {
                Some((a, al)) if a == to => al.left(),
                _ => 0,
            },
        }
    }

    /// Counts `n` bytes sent to unvalidated address `to`.
    pub(super) fn spend(&mut self, to: SocketAddr, n: usize) {
        match self.entries.get_mut(&to) {
            Some(s) => s.allowance.sent += n as u64,
            None => {
                if let Some((a, al)) = self.current.as_mut() {
                    if *a == to {
                        al.sent += n as u64;
                    }
                }
            }
        }
    }

    /// The cookie for participant `pid` at `addr` in time period `period`.
    pub(super) fn cookie_in(&self, pid: ParticipantId, addr: SocketAddr, period: u64) -> u64 {
        let ip = match addr.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        let mut input = [0u8; 8 + 16 + 2 + 8];
        input[..8].copy_from_slice(&pid.0.to_le_bytes());
        input[8..24].copy_from_slice(&ip.octets());
        input[24..26].copy_from_slice(&addr.port().to_le_bytes());
        input[26..].copy_from_slice(&period.to_le_bytes());
        self.key.cookie(&input)
    }

    pub(super) fn period(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.epoch).as_millis() / COOKIE_PERIOD.as_millis()) as u64
    }

    /// The cookie that challenges `addr` for participant `pid` now.
    pub(crate) fn cookie(&self, pid: ParticipantId, addr: SocketAddr, now: Instant) -> u64 {
        self.cookie_in(pid, addr, self.period(now))
    }

    /// True if `cookie` is one this participant made for `pid` at `addr` lately.
    pub(crate) fn verify(
        &self,
        pid: ParticipantId,
        addr: SocketAddr,
        now: Instant,
        cookie: u64,
    ) -> bool {
        let p = self.period(now);
        self.cookie_in(pid, addr, p) == cookie
            || (p > 0 && self.cookie_in(pid, addr, p - 1) == cookie)
    }

    /// Records (or refreshes) participant `pid` pending at `from`, unless `from` holds
    /// [`MAX_IDS_PER_ADDRESS`] ids already: those pending there and `others` (in a secure
    /// realm, participants validated there that have not authenticated). When the table holds
    /// `cap` entries, the oldest of another address goes; an entry at `from` never does.
    pub(super) fn note(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
        p: &ParticipantRepr<'_>,
        cap: usize,
        others: usize,
    ) -> Noted {
        let lease = Duration::from_millis(p.lease_ms as u64).min(MAX_LEASE);
        let group = p.data_group.map(SocketAddr::V4);
        if let Some(e) = self.entry_mut(from, pid) {
            e.lease = lease;
            e.group = group;
            return Noted::Refreshed;
        }
        //= docs/wire.md#validation
        //# a new id at an address that holds as many already is refused
        //# (`address_full`): it never takes the place of one that is there
        if self.at(from, pid) + others >= MAX_IDS_PER_ADDRESS {
            return Noted::Refused;
        }
        let mut evicted = 0;
        if self.len() >= cap.max(1) {
            let oldest = self
                .entries
                .iter()
                .filter(|(a, _)| **a != from)
                .flat_map(|(a, s)| s.ids.iter().map(move |e| (e.first_seen, *a, e.pid)))
                .min();
            let Some((_, addr, old)) = oldest else {
                // Every entry is at this address (a table smaller than an address's share).
                return Noted::Refused;
            };
            self.remove(addr, old);
            evicted = 1;
        }
        let entry = Entry {
            pid,
            first_seen: now,
            name: cut(p.name),
            lease,
            group,
            challenged: None,
            retry_at: None,
            tries: 0,
        };
        match self.entries.get_mut(&from) {
            Some(s) => s.ids.push(entry),
            None => {
                let allowance = match self.current.take() {
                    Some((a, al)) if a == from => al,
                    other => {
                        self.current = other;
                        Allowance::default()
                    }
                };
                self.entries.insert(
                    from,
                    Slot {
                        allowance,
                        ids: vec![entry],
                    },
                );
            }
        }
        Noted::Added { evicted }
    }

    /// Removes `pid`'s entry at `addr` (and the address's, with its allowance, when it was
    /// the last one there).
    pub(super) fn remove(&mut self, addr: SocketAddr, pid: ParticipantId) -> Option<Entry> {
        let slot = self.entries.get_mut(&addr)?;
        let i = slot.ids.iter().position(|e| e.pid == pid)?;
        let e = slot.ids.remove(i);
        if slot.ids.is_empty() {
            self.entries.remove(&addr);
        }
        Some(e)
    }

    /// When the next pending participant is challenged again.
    pub(crate) fn next_retry(&self) -> Option<Instant> {
        let asks = self.unannounced.values().map(|(t, _)| *t).min();
        let challenges = self
            .entries
            .values()
            .flat_map(|s| s.ids.iter())
            .filter_map(|e| e.retry_at)
            .min();
        match (asks, challenges) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Forgets entries older than [`PENDING_LIFETIME`]; returns how many.
    pub(super) fn expire(&mut self, now: Instant) -> u64 {
        let before = self.len();
        self.entries.retain(|_, s| {
            s.ids
                .retain(|e| now.saturating_duration_since(e.first_seen) < PENDING_LIFETIME);
            !s.ids.is_empty()
        });
        (before - self.len()) as u64
    }

    /// Addresses where a participant we challenged has not answered yet: they heard from us.
    pub(super) fn challenged_addresses(&self) -> Vec<SocketAddr> {
        self.entries
            .iter()
            .filter(|(_, s)| s.ids.iter().any(|e| e.challenged.is_some()))
            .map(|(a, _)| *a)
            .collect()
    }

    /// Takes what participant `pid`'s announcement said, if `from` holds it.
    pub(super) fn take(
        &mut self,
        pid: ParticipantId,
        from: SocketAddr,
    ) -> Option<(String, Duration, Option<SocketAddr>)> {
        self.remove(from, pid).map(|e| (e.name, e.lease, e.group))
    }

    /// Whether `pid` at `to` was challenged lately: while handling input `input`, or (if it
    /// is pending there) less than [`RECHALLENGE`] ago.
    pub(super) fn challenged(
        &self,
        input: u64,
        now: Instant,
        to: SocketAddr,
        pid: ParticipantId,
    ) -> bool {
        self.last_challenge == Some((input, to, pid))
            || self.entry(to, pid).is_some_and(|e| {
                e.challenged
                    .is_some_and(|t| now.saturating_duration_since(t) < RECHALLENGE)
            })
    }

    /// Records a challenge of `pid` at `to` now.
    pub(super) fn mark_challenged(
        &mut self,
        input: u64,
        now: Instant,
        to: SocketAddr,
        pid: ParticipantId,
    ) {
        self.last_challenge = Some((input, to, pid));
        if let Some(e) = self.entry_mut(to, pid) {
            e.challenged = Some(now);
            let wait = CHALLENGE_RETRY
                .saturating_mul(1 << e.tries.min(16))
                .min(CHALLENGE_RETRY_MAX);
            e.tries += 1;
            e.retry_at = Some(crate::participant::after(now, wait));
        }
    }
}
