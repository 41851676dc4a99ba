//! Datagrams sized to the path (`docs/wire.md#probe`).
//!
//! Peers on this host (loopback, or one of this host's addresses) take datagrams of up to
//! `max_datagram`. Peers across a link start at what a 1,500-byte MTU carries without IP
//! fragmentation (1,472 bytes of UDP payload over IPv4, 1,452 over IPv6; `path_mtu` sets the
//! MTU assumed), because a datagram that IP splits into n frames is lost when any one of them
//! is: at 20 % frame loss a 65,000-byte datagram (45 frames) arrives 4 times in 100,000.
//!
//! Each such path is then probed as QUIC's DPLPMTUD does (RFC 8899), simplified: a PROBE
//! padded to the size under test, sent with the don't-fragment bit set (the transport's job),
//! proves the size when its PROBE_ACK comes back. The current size is confirmed first; if it
//! fails [`CONFIRM_PROBES`] times in a row the path is lowered to [`MIN_DATAGRAM`] (a black
//! hole: a tunnel or a smaller link on the way) and searched upward again; a larger size
//! fails after [`MAX_PROBES`] lost tries; larger sizes are tried from
//! a table of common MTUs, and below the starting size by halving. A send the kernel refuses
//! as too large (`EMSGSIZE`) fails its size at once.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tether_wire::{
    DatagramBuilder, HEADER_LEN, PROBE_ACK_LEN, PROBE_FIXED_LEN, ParticipantId, ProbeAckRepr,
    ProbeRepr, SUBMESSAGE_HEADER_LEN, Submessage,
};

use crate::discovery::Peers;
use crate::participant::{Config, Participant};

/// How long a probe waits for its acknowledgment before it counts as lost.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Probes of one size lost in a row before the size is taken as not carried.
pub const MAX_PROBES: u8 = 4;

/// Probes of the size in use lost in a row before it is taken as not carried: more than
/// for a larger size, since lowering a path that works costs every datagram on it. At 30 %
/// frame loss each way a try fails half the time, and four tries in a row one time in 15;
/// eight, one time in 220.
pub const CONFIRM_PROBES: u8 = 8;

/// How often a path's size is confirmed again (a route may change).
pub const CONFIRM_EVERY: Duration = Duration::from_secs(30);

/// How long sizes found too large stay so before the search tries them again (RFC 8899's
/// PMTU_RAISE_TIMER).
pub const RAISE_AFTER: Duration = Duration::from_secs(600);

/// The smallest datagram a path is lowered to (QUIC's minimum; IPv6 carries 1,232 bytes of
/// UDP payload on any link).
pub const MIN_DATAGRAM: usize = 1200;

/// Link MTUs tried above the starting size, smallest first.
const MTUS: [usize; 4] = [1500, 9000, 16384, 65535];

/// Below the starting size, the search stops when the bounds are this close.
const REFINE: usize = 64;

/// Bytes of IP and UDP headers in front of a datagram to `addr`.
pub fn ip_udp_overhead(addr: &SocketAddr) -> usize {
    match addr.ip() {
        IpAddr::V4(_) => 20 + 8,
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => 20 + 8,
        IpAddr::V6(_) => 40 + 8,
    }
}

/// True if datagrams to `addr` stay on this host: a loopback address, or one of `local` (this
/// host's own addresses, which the kernel also routes through loopback).
pub fn is_local(addr: &SocketAddr, local: &[IpAddr]) -> bool {
    let ip = match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        ip => ip,
    };
    ip.is_loopback() || local.contains(&ip)
}

/// The largest datagram to `addr` before anything is learnt of its path: `max_datagram` on this
/// host, else what an MTU of `path_mtu` carries (never more than `max_datagram`).
pub fn starting_size(addr: &SocketAddr, local: &[IpAddr], path_mtu: usize, max: usize) -> usize {
    if is_local(addr, local) {
        max
    } else {
        path_mtu
            .saturating_sub(ip_udp_overhead(addr))
            .clamp(MIN_DATAGRAM.min(max), max)
    }
}

/// The largest datagram that crosses any link of `path_mtu` (IPv4 or IPv6) unfragmented,
/// for datagrams sent alike to every participant (announcements).
pub fn link_size(path_mtu: usize, max: usize) -> usize {
    path_mtu
        .saturating_sub(40 + 8)
        .clamp(MIN_DATAGRAM.min(max), max)
}

/// One probe in flight: each try has its own id, so an answer says which try it answers
/// (and so the round trip) even after losses.
#[derive(Debug, Clone, Copy)]
struct Probe {
    /// Ids and send times of the tries so far (the last is the newest).
    tries_sent: [(u64, Instant); CONFIRM_PROBES as usize],
    size: usize,
    sent: Instant,
    tries: u8,
}

impl Probe {
    fn id(&self) -> u64 {
        self.tries_sent[self.tries as usize - 1].0
    }

    /// When the try `id` answers was sent, if it is one of this probe's.
    fn sent_at(&self, id: u64) -> Option<Instant> {
        self.tries_sent[..self.tries as usize]
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, t)| *t)
    }
}

/// What a path's state asks of its participant now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathStep {
    /// Send a probe of `size` bytes with this id.
    Probe { id: u64, size: usize },
    /// The path's datagram size changed (lowered after lost probes).
    Resized,
}

/// The datagram size of the path to one remote participant, and its probing.
#[derive(Debug, Clone)]
pub(crate) struct PathMtu {
    /// The largest datagram sent to the participant.
    pub(crate) size: usize,
    /// Where the search started (sizes below it are refined by halving).
    start: usize,
    /// Largest size known to arrive (0: none yet).
    lo: usize,
    /// Smallest size known not to (or one past the largest allowed).
    hi: usize,
    /// One past the largest size ever tried (`max_datagram` + 1).
    cap: usize,
    probe: Option<Probe>,
    /// When the next probe goes out (`None`: this path is not probed).
    next: Option<Instant>,
    /// When `hi` is forgotten, so larger sizes are tried again.
    raise_at: Instant,
    /// IP and UDP header bytes (MTUs of the table less this are datagram sizes).
    overhead: usize,
    /// Smoothed round trip of answered probes.
    pub(crate) rtt: Option<Duration>,
}

impl PathMtu {
    /// A path that is not probed: `size` is final (same host, or probing off).
    pub(crate) fn fixed(size: usize, now: Instant) -> Self {
        PathMtu {
            size,
            start: size,
            lo: size,
            hi: size + 1,
            cap: size + 1,
            probe: None,
            next: None,
            raise_at: now,
            overhead: 28,
            rtt: None,
        }
    }

    /// A path that starts at `size` and is probed between [`MIN_DATAGRAM`] and `max`, from
    /// `now`; `overhead`: IP and UDP header bytes on it.
    pub(crate) fn probed(size: usize, max: usize, overhead: usize, now: Instant) -> Self {
        PathMtu {
            size,
            start: size,
            lo: 0,
            hi: max + 1,
            cap: max + 1,
            probe: None,
            next: Some(now),
            raise_at: now + RAISE_AFTER,
            overhead,
            rtt: None,
        }
    }

    /// When [`step`](Self::step) wants to run.
    pub(crate) fn due(&self) -> Option<Instant> {
        match self.probe {
            Some(p) => Some(p.sent + PROBE_TIMEOUT),
            None => self.next,
        }
    }

    /// Advances the search at `now`: a lost probe is sent again or its size fails; a new
    /// probe is chosen when one is due. `id` makes a fresh probe id.
    pub(crate) fn step(&mut self, now: Instant, id: impl FnOnce() -> u64) -> Option<PathStep> {
        let mut id = Some(id);
        if let Some(mut p) = self.probe {
            if now < p.sent + PROBE_TIMEOUT {
                return None;
            }
            let limit = if p.size <= self.size {
                CONFIRM_PROBES
            } else {
                MAX_PROBES
            };
            if p.tries < limit {
                p.tries_sent[p.tries as usize] = (id.take().map_or(0, |f| f()), now);
                p.tries += 1;
                p.sent = now;
                self.probe = Some(p);
                return Some(PathStep::Probe {
                    id: p.id(),
                    size: p.size,
                });
            }
            self.probe = None;
            if self.too_big(p.size, now) {
                return Some(PathStep::Resized);
            }
        }
        if self.next.is_none_or(|t| now < t) {
            return None;
        }
        if now >= self.raise_at {
            self.hi = self.cap;
            self.raise_at = now + RAISE_AFTER;
        }
        let Some(size) = self.candidate() else {
            // Nothing left to try: confirm the size later.
            self.lo = 0;
            self.next = Some(now + CONFIRM_EVERY);
            return None;
        };
        let id = id.take().map_or(0, |f| f());
        self.probe = Some(Probe {
            tries_sent: [(id, now); CONFIRM_PROBES as usize],
            size,
            sent: now,
            tries: 1,
        });
        Some(PathStep::Probe { id, size })
    }

    /// The next size to try: the current one until it is confirmed, then the next common MTU
    /// between what arrived and what did not, then (below the starting size) halfway.
    fn candidate(&self) -> Option<usize> {
        if self.lo < self.size {
            return Some(self.size);
        }
        let table = MTUS
            .iter()
            .map(|m| m.saturating_sub(self.overhead).min(self.cap - 1))
            .find(|&s| s > self.lo && s < self.hi);
        if let Some(s) = table {
            return Some(s);
        }
        if self.lo < self.start && self.hi > self.lo + REFINE {
            return Some((self.lo + self.hi) / 2);
        }
        None
    }

    /// A probe's acknowledgment. True if the path's size grew.
    pub(crate) fn acked(&mut self, id: u64, now: Instant) -> bool {
        let Some((p, sent)) = self.probe.and_then(|p| Some((p, p.sent_at(id)?))) else {
            return false;
        };
        self.probe = None;
        let sample = now.saturating_duration_since(sent);
        self.rtt = Some(self.rtt.map_or(sample, |r| (r * 7 + sample) / 8));
        self.lo = self.lo.max(p.size);
        self.next = Some(now);
        if p.size > self.size {
            self.size = p.size;
            return true;
        }
        false
    }

    /// `size` does not cross the path (its probes were lost, or the kernel refused it). True
    /// if the path's size went down.
    pub(crate) fn too_big(&mut self, size: usize, now: Instant) -> bool {
        if self.next.is_none() {
            // Not probed: the size is what the user asked for.
            return false;
        }
        if self.probe.is_some_and(|p| p.size == size) {
            self.probe = None;
        }
        self.hi = self.hi.min(size);
        self.next = Some(now);
        if size <= self.size {
            // The size in use is not carried: start again from the smallest.
            let floor = MIN_DATAGRAM.min(self.size);
            self.lo = 0;
            self.start = self.start.min(size);
            let lowered = self.size != floor;
            self.size = floor;
            return lowered;
        }
        false
    }

    /// The probe in flight, if any (id and size).
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> Option<(u64, usize)> {
        self.probe.map(|p| (p.id(), p.size))
    }
}

/// Bytes security adds to every datagram as it leaves the engine: the AUTH_TAG in a secure
/// realm (`docs/wire.md#auth_tag`), and in pairwise mode the SEALED wrapping too. Sizes the
/// engine builds to (paths, probes, announcements) leave room for them.
pub(crate) fn security_overhead(cfg: &Config) -> usize {
    match cfg.security.as_deref() {
        Some(s) if s.pairwise => {
            tether_wire::AUTH_TAG_LEN + crate::security::protect::SEAL_OVERHEAD
        }
        Some(_) => tether_wire::AUTH_TAG_LEN,
        None => 0,
    }
}

/// [`Participant::datagram_size`], for callers holding other parts of the participant.
pub(crate) fn datagram_size(peers: &Peers, cfg: &Config, dest: SocketAddr) -> usize {
    let size = match peers.remote_at.get(&dest) {
        Some(pid) => peers.remotes.get(pid).map(|r| r.datagram),
        None => peers
            .groups
            .iter()
            .find(|(g, _)| *g == dest)
            .map(|(_, s)| *s),
    };
    let overhead = security_overhead(cfg);
    size.unwrap_or_else(|| starting_size(&dest, &cfg.local_addrs, cfg.path_mtu, cfg.max_datagram))
        .saturating_sub(overhead)
}

impl Participant {
    /// The path to a participant newly heard from at `addr`.
    pub(crate) fn new_path(&self, addr: &SocketAddr, now: Instant) -> PathMtu {
        if let Some((_, link)) = crate::route::routed_participant(addr) {
            // Through a router: frames on a QUIC stream, the link's size, nothing to probe.
            return PathMtu::fixed(self.route_datagram(link), now);
        }
        let c = &self.cfg;
        let size = starting_size(addr, &c.local_addrs, c.path_mtu, c.max_datagram);
        if c.probe_paths && !is_local(addr, &c.local_addrs) {
            PathMtu::probed(size, c.max_datagram, ip_udp_overhead(addr), now)
        } else {
            PathMtu::fixed(size, now)
        }
    }

    /// Bytes security adds to a datagram once the engine has built it: its AUTH_TAG in a
    /// secure realm, and the SEALED wrapping in pairwise mode (0 with security off).
    pub(crate) fn seal_overhead(&self) -> usize {
        security_overhead(&self.cfg)
    }

    /// The largest datagram the engine builds for `dest`: a participant's path size (the
    /// smallest of its data group's members when it has one, so that a sample's fragments
    /// are the same whichever way they travel), a data group's smallest member, or for other
    /// addresses (discovery targets) their starting size. Less what sealing adds.
    pub(crate) fn datagram_size(&self, dest: SocketAddr) -> usize {
        datagram_size(&self.peers, &self.cfg, dest)
    }

    /// The largest datagram a participant takes (`None`: unknown participant). Each path
    /// starts at what fits its MTU (`max_datagram` on this host) and moves as probes answer.
    pub fn path_datagram(&self, participant: ParticipantId) -> Option<usize> {
        self.peers.remotes.get(&participant).map(|r| r.datagram)
    }

    /// The transport could not send `len` bytes to `dest` because they exceed what the way
    /// out carries (`EMSGSIZE` with the don't-fragment bit set): that size fails at once,
    /// and the path is lowered if it was in use.
    pub fn datagram_too_big(&mut self, now: Instant, dest: SocketAddr, len: usize) {
        self.stats.datagrams_too_big += 1;
        let Some(pid) = self.peers.remote_at.get(&dest).copied() else {
            return;
        };
        let Some(r) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        // Path sizes count what sealing adds, as `len` does.
        if r.path.too_big(len, now) {
            self.stats.paths_lowered += 1;
            self.resize_paths();
        }
        self.timers_changed = true;
    }

    /// Recomputes every participant's datagram size from the paths (after a path, an
    /// address or a data group changed): writers re-plan their fan-out.
    pub(crate) fn resize_paths(&mut self) {
        // A router link's group takes the link's size; a multicast group's datagrams leave by
        // a real interface.
        let base = |g: &SocketAddr| match crate::route::group_link(g) {
            Some(link) => self.route_datagram(link),
            None => starting_size(g, &[], self.cfg.path_mtu, self.cfg.max_datagram),
        };
        let mut groups: Vec<(SocketAddr, usize)> = Vec::new();
        for r in self.peers.remotes.values() {
            if let Some(g) = r.group {
                match groups.iter_mut().find(|(a, _)| *a == g) {
                    Some((_, s)) => *s = (*s).min(r.path.size),
                    // A multicast group's datagrams leave by a real interface: never larger
                    // than a link's starting size, whoever its members are.
                    None => groups.push((g, base(&g).min(r.path.size))),
                }
            }
        }
        for r in self.peers.remotes.values_mut() {
            r.datagram = match r.group {
                Some(g) => groups
                    .iter()
                    .find(|(a, _)| *a == g)
                    .map_or(r.path.size, |(_, s)| *s),
                None => r.path.size,
            };
        }
        self.peers.groups = groups;
        self.peers.fanout_gen += 1;
        self.sync_congestion_groups();
    }

    /// Sends the probes that are due (from housekeeping).
    pub(crate) fn probe_paths(&mut self, now: Instant) {
        if !self.cfg.probe_paths {
            return;
        }
        let due: Vec<ParticipantId> = self
            .peers
            .remotes
            .iter()
            .filter(|(_, r)| r.path.due().is_some_and(|t| now >= t))
            .map(|(p, _)| *p)
            .collect();
        let hdr = self.header();
        let overhead = self.seal_overhead();
        let mut resized = false;
        for pid in due {
            let random = &mut self.random;
            let Some(r) = self.peers.remotes.get_mut(&pid) else {
                continue;
            };
            let fresh = || {
                let mut b = [0u8; 8];
                random.get().fill(&mut b);
                u64::from_le_bytes(b)
            };
            match r.path.step(now, fresh) {
                Some(PathStep::Probe { id, size }) => {
                    let addr = r.addr;
                    let fixed = HEADER_LEN + SUBMESSAGE_HEADER_LEN + PROBE_FIXED_LEN;
                    let padding = size.saturating_sub(fixed + overhead);
                    let mut buf = Vec::with_capacity(size);
                    let mut b = DatagramBuilder::new(&mut buf, hdr);
                    let probe = ProbeRepr {
                        id,
                        padding: padding.min(u16::MAX as usize - PROBE_FIXED_LEN) as u16,
                    };
                    if b.push(&Submessage::Probe(probe)).is_ok() {
                        self.stats.probes_sent += 1;
                        self.push_transmit(addr, buf.into());
                    }
                }
                Some(PathStep::Resized) => {
                    self.stats.paths_lowered += 1;
                    resized = true;
                }
                None => {}
            }
        }
        if resized {
            self.resize_paths();
        }
    }

    /// A peer's PROBE: confirm it to where it came from, with the size it arrived in and
    /// what we have received from its participant (`docs/wire.md#received`).
    pub(crate) fn on_probe(
        &mut self,
        from: SocketAddr,
        pid: ParticipantId,
        p: ProbeRepr,
        len: usize,
    ) {
        self.stats.probes_answered += 1;
        // A PARTICIPANT may follow: then it was a challenge (`discovery/pending.rs`).
        self.peers.pending.probed = Some((self.input, pid));
        let mut buf = Vec::with_capacity(HEADER_LEN + SUBMESSAGE_HEADER_LEN + PROBE_ACK_LEN);
        let mut b = DatagramBuilder::new(&mut buf, self.header());
        let ack = ProbeAckRepr {
            id: p.id,
            size: len as u32,
            received: self.peers.remotes.get(&pid).map(|r| r.received),
        };
        if b.push(&Submessage::ProbeAck(ack)).is_ok() {
            // To the participant's address, not to where its PROBE came from: a PROBE of a
            // known participant relayed from elsewhere gets its answer where that
            // participant is, not at the relay (`docs/wire.md#validation`). But back the
            // way it came when that is the other kind of way (`route`): through the router
            // while we know it at a direct address, or directly while we know it through a
            // router. The participant is reached the other way only by this answer, and it
            // challenges that way only when it is moving there.
            let to = self
                .peers
                .remotes
                .get(&pid)
                .map_or(from, |r| crate::route::answer_to(r.addr, from));
            //= docs/wire.md#validation
            //# a PROBE from the address we are challenging its sender at is answered there too
            // Both moved at once (or a relay that held both ids stopped): its challenge to
            // our new address is answered where we know it, which is gone, and ours to its
            // new address likewise, for good. We answer at the address we are challenging
            // it at as well: that address sent an authenticated datagram of its own (what
            // made us challenge it), not a relay's late copy.
            let also = self.peers.remotes.get(&pid).and_then(|r| {
                r.moving
                    .filter(|(a, _)| *a == from && *a != to && r.addr != from)
                    .map(|(a, _)| a)
            });
            if let Some(a) = also {
                self.peers.pending.answers.push((pid, a, buf.clone()));
            }
            // Sent once the datagram is handled: in front of our announcement if the PROBE
            // was a challenge (`discovery/pending.rs`).
            self.peers.pending.answers.push((pid, to, buf));
        }
    }

    /// A PROBE_ACK: the answer to a congestion controller's probe, or a probe's size
    /// crosses the path.
    /// From an address that is not the participant's, it may answer the challenge of a new
    /// address (`discovery/pending.rs`).
    pub(crate) fn on_probe_ack(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: SocketAddr,
        a: ProbeAckRepr,
    ) {
        if self.peers.remotes.get(&pid).is_some_and(|r| r.addr != from)
            && self.on_new_address_answer(now, pid, from, &a)
        {
            return;
        }
        if self.on_rtt_probe_ack(now, pid, &a) {
            return;
        }
        let Some(r) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        if r.path.acked(a.id, now) {
            self.stats.paths_raised += 1;
            self.resize_paths();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> impl FnMut() -> u64 {
        let mut n = 0;
        move || {
            n += 1;
            n
        }
    }

    /// Runs the search against a path that carries `mtu_payload` bytes, answering every probe
    /// that fits; returns the size it settles on.
    fn settle(start: usize, max: usize, carried: usize) -> (usize, u32) {
        let t0 = Instant::now();
        let mut p = PathMtu::probed(start, max, 28, t0);
        let mut id = ids();
        let mut now = t0;
        let mut probes = 0;
        for _ in 0..10_000 {
            match p.step(now, &mut id) {
                Some(PathStep::Probe { id, size }) => {
                    probes += 1;
                    if size <= carried {
                        p.acked(id, now);
                    }
                }
                Some(PathStep::Resized) => {}
                None => {}
            }
            if p.next.is_some_and(|t| t >= t0 + CONFIRM_EVERY) && p.probe.is_none() {
                break;
            }
            now += Duration::from_millis(50);
        }
        (p.size, probes)
    }

    #[test]
    fn an_ethernet_path_stays_at_its_starting_size() {
        let (size, probes) = settle(1472, 65_000, 1472);
        assert_eq!(size, 1472);
        // Confirm 1472, then 8972 four times.
        assert_eq!(probes, 1 + MAX_PROBES as u32);
    }

    #[test]
    fn a_jumbo_path_is_raised() {
        assert_eq!(settle(1472, 65_000, 8972).0, 8972);
        assert_eq!(settle(1472, 65_000, 65_000).0, 65_000);
        // Never above max_datagram.
        assert_eq!(settle(1472, 4000, 65_000).0, 4000);
    }

    #[test]
    fn a_narrower_path_is_lowered_then_refined() {
        // A tunnel: 1420-byte MTU, 1392 bytes of payload.
        let (size, _) = settle(1472, 65_000, 1392);
        assert!(
            (1392 - REFINE..=1392).contains(&size),
            "settled on {size}, want just under 1392"
        );
    }

    #[test]
    fn a_refused_send_fails_its_size_at_once() {
        let t0 = Instant::now();
        let mut p = PathMtu::probed(1472, 65_000, 28, t0);
        let mut id = ids();
        let Some(PathStep::Probe { id: a, size }) = p.step(t0, &mut id) else {
            panic!("no probe")
        };
        assert_eq!(size, 1472);
        p.acked(a, t0);
        let Some(PathStep::Probe { size, .. }) = p.step(t0, &mut id) else {
            panic!("no probe")
        };
        assert_eq!(size, 8972);
        assert!(!p.too_big(8972, t0), "the size in use did not change");
        assert_eq!(p.in_flight(), None);
        // Nothing more to try above: the next step only schedules a confirmation.
        assert_eq!(p.step(t0, &mut id), None);
        assert_eq!(p.size, 1472);
        assert_eq!(p.due(), Some(t0 + CONFIRM_EVERY));
    }

    #[test]
    fn fixed_paths_are_never_probed() {
        let t0 = Instant::now();
        let mut p = PathMtu::fixed(65_000, t0);
        assert_eq!(p.due(), None);
        assert_eq!(p.step(t0 + RAISE_AFTER * 2, || 1), None);
        assert!(!p.too_big(65_000, t0));
        assert_eq!(p.size, 65_000);
    }

    #[test]
    fn sizes_by_address() {
        let v4: SocketAddr = "10.0.0.2:7400".parse().unwrap();
        let v6: SocketAddr = "[fd00::2]:7400".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:7400".parse().unwrap();
        let own: SocketAddr = "192.168.1.5:7400".parse().unwrap();
        let local = ["192.168.1.5".parse().unwrap()];
        assert_eq!(starting_size(&v4, &local, 1500, 65_000), 1472);
        assert_eq!(starting_size(&v6, &local, 1500, 65_000), 1452);
        assert_eq!(starting_size(&lo, &local, 1500, 65_000), 65_000);
        assert_eq!(starting_size(&own, &local, 1500, 65_000), 65_000);
        assert_eq!(starting_size(&v4, &local, 1500, 1400), 1400);
        assert_eq!(starting_size(&v4, &local, 9000, 65_000), 8972);
    }
}
