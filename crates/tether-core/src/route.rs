//! Routed peers: participants reached through a router link (issue 19).
//!
//! A router forwards engine datagrams between sites over QUIC; it routes on 256-bit topic
//! ids and participant ids and opens nothing. To the engine, a participant behind a router
//! is an ordinary peer at a *virtual address* the driver makes up for it:
//!
//! ```text
//!   unicast  fd74:6574:6865:7200:<participant id, 64 bits>  port = link number
//!   group    fd74:6574:6865:7201::<link number>             port = link number
//!            (fd74:6574:6865:72 is "tether" in ASCII, in the unique-local range fc00::/7)
//! ```
//!
//! The driver hands the engine what arrives through link `L` from participant `P` as
//! `handle_datagram(now, virtual_addr(P, L), bytes)`, and sends a transmit whose
//! destination is a virtual unicast address as a UNICAST frame to that participant, and one
//! to a link's group as a DATA frame tagged with the route key of the transmit's writer
//! ([`Transmit::writer`](crate::Transmit::writer),
//! [`Participant::route_key`](crate::Participant::route_key)): the router forwards it to
//! every participant behind the link with a reader of that key.
//!
//! The engine treats a routed peer as any other (AUTH, per-datagram MACs: the router is not
//! trusted), except that:
//! - it is not challenged: its announcement validates it (`discovery/pending.rs` says why),
//!   so a driver must hand the engine a virtual source only for what came through a router
//!   link (a session drops UDP datagrams from these ranges);
//! - its data group is its link's group, whatever it announced: a writer sends one datagram
//!   per link for every routed participant behind it, even for one (the router copies it
//!   where it is wanted), and `multicast_min` does not apply (`writer::fanout_addrs`);
//! - its path takes the link's datagram size ([`RouteLink::datagram`]), fixed and never
//!   probed: frames are length-prefixed on a QUIC stream, not IP datagrams;
//! - a peer known at a direct address does not move to a routed one while its direct
//!   address is heard (`discovery::routed_quiet`), and a routed peer heard (authenticated)
//!   at a direct address moves there, after the usual challenge, at once.
//!
//! In pairwise mode ([`Security::with_pairwise`](crate::Security::with_pairwise)) every
//! datagram is sealed for one peer, and a datagram for a link's group could not be: routed
//! peers then get one copy each at their virtual unicast addresses, as multicast groups do.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::time::Duration;

use tether_wire::{EndpointKind, EntityId, ParticipantId};

use std::collections::BTreeMap;

use crate::Guid;
use crate::discovery::RemoteParticipant;
use crate::participant::Participant;

/// The first 64 bits of every virtual unicast address (`fd74:6574:6865:7200::/64`).
pub const UNICAST_PREFIX: u64 = 0xfd74_6574_6865_7200;

/// The first 64 bits of every link's virtual group address (`fd74:6574:6865:7201::/64`).
pub const GROUP_PREFIX: u64 = 0xfd74_6574_6865_7201;

/// A link's datagram size when the driver does not say: frames on a QUIC stream carry up
/// to 64 KiB; 60,000 bytes leaves room for the frame and datagram headers.
pub const DEFAULT_ROUTE_DATAGRAM: usize = 60_000;

/// One router link, as the driver declares it ([`Config::routes`](crate::Config::routes),
/// [`Participant::add_route_link`](crate::Participant::add_route_link)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteLink {
    /// The link's number: the port of its virtual addresses, chosen by the driver. A link
    /// that reconnects should keep its number, so its peers keep their addresses.
    pub link: u16,
    /// The largest datagram sent through it (clamped to `max_datagram`).
    pub datagram: usize,
}

impl RouteLink {
    /// Link `link`, taking datagrams of up to `datagram` bytes.
    pub fn new(link: u16, datagram: usize) -> RouteLink {
        RouteLink { link, datagram }
    }

    /// Its virtual group address ([`group_addr`]).
    pub fn group(&self) -> SocketAddr {
        group_addr(self.link)
    }
}

fn halves(addr: &SocketAddr) -> Option<(u64, u64)> {
    match addr.ip() {
        IpAddr::V6(v6) => {
            let b = v6.to_bits();
            Some(((b >> 64) as u64, b as u64))
        }
        IpAddr::V4(_) => None,
    }
}

fn v6(high: u64, low: u64, port: u16) -> SocketAddr {
    let ip = Ipv6Addr::from_bits((u128::from(high) << 64) | u128::from(low));
    SocketAddr::V6(SocketAddrV6::new(ip, port, 0, 0))
}

/// The virtual address of participant `p` reached through link `link`.
pub fn virtual_addr(p: ParticipantId, link: u16) -> SocketAddr {
    v6(UNICAST_PREFIX, p.0, link)
}

/// The participant and link a virtual unicast address stands for (`None`: not one).
pub fn routed_participant(addr: &SocketAddr) -> Option<(ParticipantId, u16)> {
    match halves(addr)? {
        (UNICAST_PREFIX, low) => Some((ParticipantId(low), addr.port())),
        _ => None,
    }
}

/// The virtual group address of link `link`: where a writer sends one datagram for every
/// routed participant behind the link.
pub fn group_addr(link: u16) -> SocketAddr {
    v6(GROUP_PREFIX, u64::from(link), link)
}

/// The link whose group address `addr` is (`None`: not one).
pub fn group_link(addr: &SocketAddr) -> Option<u16> {
    match halves(addr)? {
        (GROUP_PREFIX, low) if low == u64::from(addr.port()) => Some(addr.port()),
        _ => None,
    }
}

/// True if `addr` is a routed peer's virtual address (traffic to it goes through link
/// `addr.port()`).
pub fn is_routed(addr: &SocketAddr) -> bool {
    routed_participant(addr).is_some()
}

/// True if `addr` is a link's virtual group address.
pub fn is_route_group(addr: &SocketAddr) -> bool {
    group_link(addr).is_some()
}

/// The link a virtual address (unicast or group) goes through (`None`: a real address).
pub fn link_of(addr: &SocketAddr) -> Option<u16> {
    routed_participant(addr)
        .map(|(_, l)| l)
        .or_else(|| group_link(addr))
}

/// The longest a peer's direct address must have gone unheard before the peer is followed
/// to a routed address ([`routed_quiet`]): two announcement periods at the default (1 s),
/// and well under [`DEFAULT_INACTIVE_AFTER`](crate::DEFAULT_INACTIVE_AFTER) (3 s), so that
/// keep-all writers do not give up on readers that a LAN parted from them while they
/// move to the router.
pub const ROUTED_QUIET_MAX: Duration = Duration::from_secs(2);

/// How long a peer's direct address must have gone unheard (no authenticated datagram)
/// before the peer is followed to a routed address it is heard at: two thirds of its lease
/// (it announces at least every third of it), at most [`ROUTED_QUIET_MAX`], and never less
/// than a move between direct addresses waits. A direct path that lives is heard more
/// often; the lease is kept meanwhile by what comes through the router. Should a lossy
/// LAN be taken for gone, the peer comes back to it at its next authenticated datagram
/// there.
pub(crate) fn routed_quiet(lease: Duration) -> Duration {
    (lease * 2 / 3)
        .min(ROUTED_QUIET_MAX)
        .max(crate::discovery::MOVE_QUIET)
}

impl Participant {
    /// Declares router link `link`, whose frames carry datagrams of up to `datagram` bytes
    /// (clamped to `max_datagram`; [`DEFAULT_ROUTE_DATAGRAM`] suits QUIC streams).
    /// Participants already known behind it (the link came back) take its size again.
    /// Declaring a link twice updates its size.
    pub fn add_route_link(&mut self, link: u16, datagram: usize) {
        self.timers_changed = true;
        match self.cfg.routes.iter_mut().find(|r| r.link == link) {
            Some(r) => r.datagram = datagram,
            None => self.cfg.routes.push(RouteLink::new(link, datagram)),
        }
        let size = self.route_datagram(link);
        let now = self.clock;
        let mut changed = false;
        for r in self.peers.remotes.values_mut() {
            if routed_participant(&r.addr).is_some_and(|(_, l)| l == link) && r.path.size != size {
                r.path = crate::path::PathMtu::fixed(size, now);
                changed = true;
            }
        }
        if changed {
            self.resize_paths();
        }
    }

    /// The driver lost router link `link`. Participants behind it are not dropped: it may
    /// reconnect (under the same number, they keep their addresses), or they may be heard
    /// elsewhere; their leases decide. Meanwhile what is sent to them is lost, and reliable
    /// writers repair it once they are heard again, end to end.
    pub fn remove_route_link(&mut self, link: u16) {
        self.cfg.routes.retain(|r| r.link != link);
    }

    /// The driver holds datagrams for router link `link` that take `backlog` to leave (what
    /// it queued ahead of the link, at the rate the link has been taking them). A writer
    /// does not re-send a sample to a peer behind that link before the last copy could have
    /// left and been answered: a reader asking again meanwhile would only queue it twice.
    /// Zero when the queue is empty.
    pub fn set_route_backlog(&mut self, link: u16, backlog: Duration) {
        match self.route_backlog.iter_mut().find(|(l, _)| *l == link) {
            Some(e) => e.1 = backlog,
            None if backlog > Duration::ZERO => self.route_backlog.push((link, backlog)),
            None => {}
        }
    }

    /// The driver's queue for router link `link` has been draining at `bytes_per_sec`:
    /// repairs a writer queues behind one another are judged to leave one after the other
    /// at that rate (a hundred samples re-sent at once do not all arrive after the first's
    /// wait). Zero: not known.
    pub fn set_route_drain_rate(&mut self, link: u16, bytes_per_sec: u64) {
        match self.route_rate.iter_mut().find(|(l, _)| *l == link) {
            Some(e) => e.1 = bytes_per_sec,
            None => self.route_rate.push((link, bytes_per_sec)),
        }
    }

    /// Router link `link` was made again: what its driver had queued, and QUIC held, for
    /// the link before is gone. Writers forget that they re-sent samples to readers behind
    /// it, and answer their next requests at once rather than wait for copies that will
    /// never arrive.
    ///
    /// Our peers' writers lost the same for our readers: the router's queue for the link
    /// is gone too. Our LINK_EPOCH goes up, and our announcements (the driver announces
    /// through a link as it comes up) tell them (`docs/wire.md#link_epoch`).
    pub fn route_link_reset(&mut self, link: u16) {
        self.link_epoch = self.link_epoch.wrapping_add(1).max(1);
        for w in self.writers.values_mut() {
            for (g, rp) in w.readers.iter_mut() {
                let behind = self
                    .peers
                    .remotes
                    .get(&g.participant)
                    .and_then(|r| routed_participant(&r.addr))
                    .is_some_and(|(_, l)| l == link);
                if behind {
                    rp.resent.clear();
                }
            }
        }
    }

    /// Peer `pid` announced LINK_EPOCH `epoch`, in a datagram from `from`: if it is newer
    /// than the last one, its router links were made again, and what was on its way to it
    /// through them is gone. Our writers forget the copies they re-sent to its readers that
    /// had left our queue, and answer the next requests for those at once.
    ///
    /// Only a newer epoch (serial-number order) counts, and only through the router link
    /// we reach the peer by: an announcement is tagged for any receiver, so a copy of an
    /// older one that a router lost, captured on the peer's LAN and replayed within the
    /// replay window, must not count as a change (the outsider review).
    pub(crate) fn on_link_epoch(&mut self, from: SocketAddr, pid: ParticipantId, epoch: u32) {
        let Some(p) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        // Taken only from where we reach the peer (through another router link, it would
        // be recorded without counting, and the copy through ours then found not newer).
        if from != p.addr {
            return;
        }
        let newer = p
            .link_epoch
            .is_none_or(|e| (epoch.wrapping_sub(e) as i32) > 0);
        if !newer {
            return;
        }
        // Only what went through a router was lost: a peer we reach directly got it.
        let changed = p.link_epoch.is_some() && is_routed(&p.addr);
        p.link_epoch = Some(epoch);
        if !changed {
            return;
        }
        self.stats.peer_links_remade += 1;
        // Copies still in our queue for our own link cross the peer's new one; those that
        // had left may have been lost with its old one.
        let now = self.clock;
        let queue_empty = backlog_of(&self.route_backlog, p.addr).is_zero();
        let its = Guid {
            participant: pid,
            entity: EntityId(0),
        }..=Guid {
            participant: pid,
            entity: EntityId(u32::MAX),
        };
        for w in self.writers.values_mut() {
            for (_, rp) in w.readers.range_mut(its.clone()) {
                rp.forget_departed(now, queue_empty);
            }
        }
    }

    /// The router links declared now.
    pub fn route_links(&self) -> &[RouteLink] {
        &self.cfg.routes
    }

    /// The key routers route local endpoint `entity`'s topic by (`None`: no such local
    /// endpoint): in a secure realm `TopicId::derive(realm secret, name, "", "")`, else
    /// `TopicId::plain(name, "", "")`. The driver advertises its writers' keys, subscribes
    /// its readers' keys, and tags each DATA frame with the key of the transmit's
    /// [`writer`](crate::Transmit::writer). Computed once per endpoint: a lookup.
    pub fn route_key(&self, entity: EntityId) -> Option<[u8; 32]> {
        self.route_keys.get(&entity).map(|(_, k)| *k)
    }

    /// Local endpoint `entity`'s kind and route key: what a driver tags the frame of a
    /// datagram announcing it with ([`Transmit::announces`](crate::Transmit::announces)).
    pub fn route_endpoint(&self, entity: EntityId) -> Option<(EndpointKind, [u8; 32])> {
        self.route_keys.get(&entity).copied()
    }

    /// Every local endpoint with its kind and route key ([`route_key`](Self::route_key)).
    pub fn local_route_keys(&self) -> Vec<(EntityId, EndpointKind, [u8; 32])> {
        self.route_keys
            .iter()
            .map(|(e, (kind, key))| (*e, *kind, *key))
            .collect()
    }

    /// Changes whenever a local endpoint is created or deleted: a driver that last read
    /// [`local_route_keys`](Self::local_route_keys) at another generation reads them again
    /// and tells its routers what was advertised or subscribed, and what was withdrawn.
    pub fn route_keys_generation(&self) -> u64 {
        self.route_gen
    }

    /// Records local endpoint `id`'s route key.
    pub(crate) fn note_route_key(&mut self, id: EntityId, kind: EndpointKind, topic: &str) {
        let key = match self.cfg.security.as_deref() {
            Some(sec) => sec.route_key(topic),
            None => tether_crypto::TopicId::plain(topic, "", "").0,
        };
        self.route_keys.insert(id, (kind, key));
        self.route_gen += 1;
    }

    /// The datagram size of link `link`: as declared, within `max_datagram`; for a link
    /// not declared (gone, or not yet), what an Ethernet path carries.
    pub(crate) fn route_datagram(&self, link: u16) -> usize {
        let max = self.cfg.max_datagram;
        match self.cfg.routes.iter().find(|r| r.link == link) {
            Some(r) => r.datagram.clamp(crate::path::MIN_DATAGRAM.min(max), max),
            None => crate::path::link_size(self.cfg.path_mtu, max),
        }
    }

    /// How long the current address `cur` of a peer with `lease` must have been unheard
    /// before an authenticated datagram from `from` has `from` challenged as its new one:
    /// a direct address is preferred to a routed one, which it replaces at once; a routed
    /// one replaces a direct one only once that has gone quiet ([`routed_quiet`]); one whose
    /// link is gone is left at once; otherwise the usual
    /// [`MOVE_QUIET`](crate::discovery::MOVE_QUIET).
    pub(crate) fn move_quiet(
        &self,
        cur: SocketAddr,
        from: SocketAddr,
        lease: Duration,
    ) -> Duration {
        match (routed_participant(&cur), is_routed(&from)) {
            (None, true) => routed_quiet(lease),
            (Some(_), false) => Duration::ZERO,
            (Some((_, l)), true) if !self.cfg.routes.iter().any(|r| r.link == l) => Duration::ZERO,
            _ => crate::discovery::MOVE_QUIET,
        }
    }
}

/// Where a batch goes (`writer/batch.rs`): to each of `dests` at its address, except that
/// routed participants get one datagram per link, at the link's group (one copy per link,
/// as single samples go; not in `pairwise` mode, where each datagram is sealed for one
/// peer). Batches do not use multicast groups of a LAN (each host's copy there is sent as
/// one GSO message per destination).
pub(crate) fn batch_dests(
    remotes: &BTreeMap<ParticipantId, Box<RemoteParticipant>>,
    dests: &[ParticipantId],
    pairwise: bool,
) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = Vec::with_capacity(dests.len());
    for r in dests.iter().filter_map(|p| remotes.get(p)) {
        let dest = match r.group.filter(|g| !pairwise && is_route_group(g)) {
            Some(g) if out.contains(&g) => continue,
            Some(g) => g,
            None => r.addr,
        };
        out.push(dest);
    }
    out
}

/// Where the answer to a PROBE of a peer known at `known`, which came from `from`, goes:
/// to `known` (a relay elsewhere does not get it), unless one of them is a router's
/// virtual address and the other is not. Then back to `from`: the peer is moving from a
/// direct address to a routed one or back, and challenges the new one; the answer, which
/// must come from there, is carried only that way. Both sides of a pair that move
/// (parted by the LAN, or meeting on it again) see each other at the old address until
/// then, and would otherwise answer each other's challenges where they no longer arrive.
/// A relay across the kinds would have to carry a member's authenticated datagrams
/// between sites both ways; it gains what a router has: it carries, and may drop, that
/// pair's traffic, and never reads or forges any.
pub(crate) fn answer_to(known: SocketAddr, from: SocketAddr) -> SocketAddr {
    if is_routed(&known) != is_routed(&from) {
        from
    } else {
        known
    }
}

/// A peer's data group: its link's group if it is routed (whatever it announced: a group
/// on its own network is not ours), else the one it announced.
pub(crate) fn effective_group(
    addr: SocketAddr,
    announced: Option<SocketAddr>,
) -> Option<SocketAddr> {
    match routed_participant(&addr) {
        Some((_, link)) => Some(group_addr(link)),
        None => announced,
    }
}

/// Whether a peer at `cur` goes back at once to `prev`, the address it moved from, when
/// heard there again: not from a direct address to a routed one (direct is preferred; a
/// router still forwards what other participants send it that way).
pub(crate) fn may_return(cur: SocketAddr, prev: SocketAddr) -> bool {
    is_routed(&cur) || !is_routed(&prev)
}

/// The drain rate [`Participant::set_route_drain_rate`] said (`rates`) of the link `addr` is
/// behind, if it is a routed address and the rate is known.
pub(crate) fn drain_rate_of(rates: &[(u16, u64)], addr: SocketAddr) -> Option<u64> {
    routed_participant(&addr)
        .and_then(|(_, l)| rates.iter().find(|(k, _)| *k == l))
        .map(|(_, r)| *r)
        .filter(|r| *r > 0)
}

/// What [`Participant::set_route_backlog`] said (`backlogs`) of the link `addr` is behind,
/// if it is a routed address.
pub(crate) fn backlog_of(backlogs: &[(u16, Duration)], addr: SocketAddr) -> Duration {
    routed_participant(&addr)
        .and_then(|(_, l)| backlogs.iter().find(|(k, _)| *k == l))
        .map_or(Duration::ZERO, |(_, d)| *d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unicast_addresses_round_trip() {
        for (p, link) in [
            (1u64, 0u16),
            (0x1234_5678_9abc_def0, 7),
            (u64::MAX, u16::MAX),
        ] {
            let a = virtual_addr(ParticipantId(p), link);
            assert_eq!(routed_participant(&a), Some((ParticipantId(p), link)));
            assert!(is_routed(&a));
            assert!(!is_route_group(&a));
            assert_eq!(link_of(&a), Some(link));
        }
        let a = virtual_addr(ParticipantId(0x0102_0304_0506_0708), 9);
        assert_eq!(
            a.to_string(),
            "[fd74:6574:6865:7200:102:304:506:708]:9",
            "the prefix spells \"tether\" and the id is the low 64 bits"
        );
    }

    #[test]
    fn group_addresses_round_trip() {
        for link in [0u16, 1, 42, u16::MAX] {
            let g = group_addr(link);
            assert_eq!(group_link(&g), Some(link));
            assert!(is_route_group(&g));
            assert!(!is_routed(&g));
            assert_eq!(link_of(&g), Some(link));
            assert_eq!(RouteLink::new(link, 1000).group(), g);
        }
        assert_eq!(group_addr(3).to_string(), "[fd74:6574:6865:7201::3]:3");
        // Another port at a group's IP is not the group.
        let odd: SocketAddr = "[fd74:6574:6865:7201::3]:4".parse().unwrap();
        assert_eq!(group_link(&odd), None);
    }

    #[test]
    fn real_addresses_are_not_routed() {
        for a in [
            "127.0.0.1:7400",
            "10.0.0.1:7400",
            "239.255.0.1:7400",
            "[::1]:7400",
            "[fd74:6574:6865:7202::1]:1",
            "[fd74:6574:6865:72ff::1]:1",
            "[fe80::1]:7400",
        ] {
            let a: SocketAddr = a.parse().unwrap();
            assert!(!is_routed(&a), "{a}");
            assert!(!is_route_group(&a), "{a}");
            assert_eq!(link_of(&a), None, "{a}");
        }
    }
}
