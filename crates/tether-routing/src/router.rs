//! [`Router`]: the router's state machine.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::frame::{
    Advertise, Announce, Data, Frame, FrameType, Hello, HostRoute, LINK_VERSION, LinkState,
    Unicast, Withdraw,
};
use crate::rib::{LinkEntry, Origin, RefChange, Rib, Small};
use crate::topology::{Offer, Topology};
use crate::{LinkId, MAX_HOPS, NodeId, ParticipantId, Role, RouteKey};

mod forward;
mod graph;
mod hosts;
mod types;

pub use types::{Config, DropReason, Drops, LinkError, RouteSummary, Stats};

/// One link that is up.
#[derive(Debug)]
struct Link {
    id: LinkId,
    role: Role,
    node: u64,
    /// Route entries naming this link: a link down scans the table only if some do.
    refs: u64,
    /// Where the table sync for a new router neighbour has got to (a slab position).
    sync: Option<u32>,
    /// Who stands behind the link (the serial of its credential), if the caller said.
    owner: Option<u64>,
}

/// A participant's host route.
#[derive(Debug, Default)]
struct Host {
    origins: Small<Origin, 1>,
    /// The session link it was announced on, at this router.
    local: Option<u16>,
}

/// Most participants one session link may announce (a session has one participant).
pub const MAX_PARTICIPANTS_PER_SESSION: usize = 16;

/// Most route entries (keys it publishes or subscribes) one session link may hold.
pub const MAX_ROUTES_PER_SESSION: u64 = 65_536;

/// The router's state machine, **sans-IO**.
///
/// Inputs: [`Router::link_up`] when a link's HELLO arrived (or pass the HELLO to
/// [`Router::handle_frame`]), [`Router::handle_frame`] for every later frame,
/// [`Router::link_down`] when a link is lost, [`Router::handle_timeout`] at
/// [`Router::poll_timeout`]. Outputs: [`Router::poll_transmit`]. Send [`Router::hello`] first
/// on every link, before anything the router gives.
///
/// Polling order for a driver, after every input: send every `poll_transmit` (each frame on
/// its link, in order), then sleep until `poll_timeout` or the next input.
///
/// A full table is sent to a new router neighbour lazily, a route at a time as
/// `poll_transmit` is called, so a link up costs no memory in proportion to the table.
#[derive(Debug)]
pub struct Router {
    config: Config,
    me: u64,
    /// The counter behind every sequence number this router originates.
    seq: u32,
    links: Vec<Option<Link>>,
    by_id: HashMap<LinkId, u16>,
    /// The link used to reach each neighbouring router (the lowest slot if several).
    node_slot: HashMap<u64, u16>,
    rib: Rib,
    hosts: HashMap<u64, Host>,
    topo: Topology,
    /// Keys queried, with when the query expires.
    queries: HashMap<RouteKey, Instant>,
    out: VecDeque<(LinkId, Frame)>,
    next_sweep: Option<Instant>,
    topo_dirty: bool,
    stats: Stats,
}

impl Router {
    /// A router with nothing learnt.
    pub fn new(config: Config) -> Self {
        let me = config.node.0;
        Router {
            topo: Topology::new(me, config.max_nodes),
            config,
            me,
            seq: 0,
            links: Vec::new(),
            by_id: HashMap::new(),
            node_slot: HashMap::new(),
            rib: Rib::new(),
            hosts: HashMap::new(),
            queries: HashMap::new(),
            out: VecDeque::new(),
            next_sweep: None,
            topo_dirty: false,
            stats: Stats::default(),
        }
    }

    /// This router's node id.
    pub fn node(&self) -> NodeId {
        NodeId(self.me)
    }

    /// The HELLO to send first on every link.
    pub fn hello(&self) -> Frame {
        Frame::Hello(Hello {
            version: LINK_VERSION,
            role: Role::Router,
            node: NodeId(self.me),
            domain: self.config.domain,
        })
    }

    /// Routing keys held (routes, including tombstones of withdrawn ones).
    pub fn rib_len(&self) -> usize {
        self.rib.len()
    }

    /// Heap bytes held by the routing table (not counting host routes and the graph): what
    /// "memory per route" divides.
    pub fn rib_heap_bytes(&self) -> usize {
        self.rib.heap_bytes()
    }

    /// Says who stands behind a link that is up: the serial of the credential it
    /// presented. A session that dials again while this router still holds its old link
    /// (its side noticed the silence first) announces its participant on the new link; a
    /// link of the same owner may take that id over, a link of another may not.
    pub fn set_link_owner(&mut self, link: LinkId, owner: u64) {
        if let Some(&slot) = self.by_id.get(&link) {
            if let Some(l) = self.links[slot as usize].as_mut() {
                l.owner = Some(owner);
            }
        }
    }

    /// Links up.
    pub fn link_count(&self) -> usize {
        self.by_id.len()
    }

    /// Routers in the graph, this one included.
    pub fn node_count(&self) -> usize {
        self.topo.nodes()
    }

    /// The router graph as this router knows it: each router's node id, sequence number and
    /// neighbours, sorted by node id (for diagnostics).
    pub fn graph(&self) -> Vec<(NodeId, u32, Vec<NodeId>)> {
        let mut g: Vec<(NodeId, u32, Vec<NodeId>)> = self
            .topo
            .all()
            .map(|(o, seq, n)| (NodeId(o), seq, n.iter().map(|&x| NodeId(x)).collect()))
            .collect();
        g.sort_by_key(|e| e.0);
        g
    }

    /// Host routes held.
    pub fn participant_count(&self) -> usize {
        self.hosts.len()
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// What this router holds for `key`, if anything: for diagnostics and tests.
    pub fn route(&self, key: &RouteKey) -> Option<RouteSummary> {
        let r = self.rib.get(self.rib.find(key)?)?;
        let count = |flag: u8| {
            r.links
                .as_slice()
                .iter()
                .filter(|e| e.flags & flag != 0)
                .count()
        };
        Some(RouteSummary {
            origins: r
                .origins
                .as_slice()
                .iter()
                .filter(|o| !o.withdrawn())
                .count(),
            tombstones: r
                .origins
                .as_slice()
                .iter()
                .filter(|o| o.withdrawn())
                .count(),
            subscribers: count(LinkEntry::DOWN),
            upstream: count(LinkEntry::UP),
            publishers: count(LinkEntry::PUB),
        })
    }

    /// Whether `link` carries a subscription of `key` toward a publisher (this router
    /// subscribed on it): for tests and diagnostics.
    pub fn is_subscribed_on(&self, key: &RouteKey, link: LinkId) -> bool {
        self.flags_of(key, link) & LinkEntry::UP != 0
    }

    /// Whether `link` subscribed to `key` through this router.
    pub fn has_subscriber(&self, key: &RouteKey, link: LinkId) -> bool {
        self.flags_of(key, link) & LinkEntry::DOWN != 0
    }

    fn flags_of(&self, key: &RouteKey, link: LinkId) -> u8 {
        let (Some(i), Some(&slot)) = (self.rib.find(key), self.by_id.get(&link)) else {
            return 0;
        };
        self.rib.get(i).map_or(0, |r| r.flags(slot))
    }

    /// A link is up: its HELLO said `role` and `node`. A router neighbour is sent the graph,
    /// the host routes and (lazily) the table; the graph changes, and routes move to it.
    pub fn link_up(
        &mut self,
        now: Instant,
        link: LinkId,
        role: Role,
        node: NodeId,
    ) -> Result<(), LinkError> {
        if self.by_id.contains_key(&link) {
            return Err(LinkError::AlreadyUp);
        }
        if node.0 == 0 || node.0 == self.me {
            return Err(LinkError::OwnNode);
        }
        if self.by_id.len() >= self.config.max_links {
            return Err(LinkError::TooManyLinks);
        }
        let slot = match self.links.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.links.push(None);
                self.links.len() - 1
            }
        } as u16;
        self.links[slot as usize] = Some(Link {
            id: link,
            role,
            node: node.0,
            refs: 0,
            sync: None,
            owner: None,
        });
        self.by_id.insert(link, slot);
        self.next_sweep
            .get_or_insert(now + self.config.sweep_interval);
        if role == Role::Router {
            self.update_node_slot(node.0);
            self.originate_link_state();
            // The new neighbour gets everything it may lack: the graph (its own link state
            // included: a restarted router learns its old sequence number from it), the
            // host routes now, and the table as `poll_transmit` pulls it.
            let states: Vec<Frame> = self
                .topo
                .all()
                .filter(|(o, _, _)| *o != self.me)
                .map(|(o, seq, n)| {
                    let n: Vec<NodeId> = n.iter().map(|&x| NodeId(x)).collect();
                    Frame::LinkState(LinkState::new(NodeId(o), seq, &n))
                })
                .collect();
            for f in states {
                self.send(slot, f);
            }
            let mut hosts: Vec<Frame> = Vec::new();
            for (&p, h) in &self.hosts {
                for o in h.origins.as_slice() {
                    hosts.push(host_frame(p, o));
                }
            }
            for f in hosts {
                self.send(slot, f);
            }
            if let Some(l) = self.links[slot as usize].as_mut() {
                l.sync = Some(0);
            }
        }
        self.settle(now);
        Ok(())
    }

    /// A link is lost: every route learnt over it goes (its publishers are withdrawn, its
    /// subscriptions dropped, upstream subscriptions moved or dropped), and, for a router
    /// neighbour, the graph changes. Unknown links are ignored.
    pub fn link_down(&mut self, now: Instant, link: LinkId) {
        let Some(slot) = self.by_id.remove(&link) else {
            return;
        };
        let Some(l) = self.links[slot as usize].take() else {
            return;
        };
        if l.role == Role::Router {
            // Before routes are refreshed, so that none moves to the link that went.
            self.update_node_slot(l.node);
        }
        if l.refs > 0 {
            let positions: Vec<u32> = self.rib.positions().collect();
            for i in positions {
                let Some(route) = self.rib.get_mut(i) else {
                    continue;
                };
                let flags = route.flags(slot);
                if flags == 0 {
                    continue;
                }
                route.links.retain(|e| e.slot != slot);
                let key = route.key;
                if flags & LinkEntry::PUB != 0 && !route.has_publisher_link() {
                    self.withdraw_own(i, key);
                }
                self.refresh(now, i);
                self.rib.remove_if_empty(i);
            }
        }
        let gone: Vec<u64> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.local == Some(slot))
            .map(|(&p, _)| p)
            .collect();
        for p in gone {
            self.local_host(p, slot, false);
        }
        if l.role == Role::Router {
            self.originate_link_state();
        }
        self.settle(now);
    }

    /// A frame from `link`. A HELLO on a link not yet up brings it up ([`Router::link_up`]).
    /// An error means the peer (or the caller) broke the protocol: close the link and call
    /// [`Router::link_down`].
    pub fn handle_frame(
        &mut self,
        now: Instant,
        link: LinkId,
        frame: Frame,
    ) -> Result<(), LinkError> {
        self.stats.frames_received += 1;
        let Some(&slot) = self.by_id.get(&link) else {
            if let Frame::Hello(h) = frame {
                if h.version != LINK_VERSION {
                    return Err(LinkError::UnsupportedVersion(h.version));
                }
                if h.domain != self.config.domain {
                    return Err(LinkError::WrongDomain {
                        ours: self.config.domain,
                        theirs: h.domain,
                    });
                }
                return self.link_up(now, link, h.role, h.node);
            }
            return Err(LinkError::NotUp);
        };
        let (role, peer) = match &self.links[slot as usize] {
            Some(l) => (l.role, l.node),
            None => return Err(LinkError::NotUp),
        };
        let r = match role {
            Role::Session => self.session_frame(now, slot, peer, frame),
            Role::Router => self.router_frame(now, slot, frame),
        };
        self.settle(now);
        r
    }

    /// The next frame to send, and its link.
    pub fn poll_transmit(&mut self) -> Option<(LinkId, Frame)> {
        if self.out.is_empty() {
            self.pull_sync();
        }
        let f = self.out.pop_front()?;
        self.stats.frames_sent += 1;
        Some(f)
    }

    /// When [`Router::handle_timeout`] wants to be called: the next query expiry or sweep.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let q = self.queries.values().min().copied();
        match (q, self.next_sweep) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Time has passed: unanswered queries expire (a later SUBSCRIBE may query again), and
    /// at each sweep tombstones older than an interval and routers unreachable for an
    /// interval are forgotten with their routes.
    pub fn handle_timeout(&mut self, now: Instant) {
        let before = self.queries.len();
        self.queries.retain(|_, &mut t| t > now);
        self.stats.queries_expired += (before - self.queries.len()) as u64;
        if self.next_sweep.is_some_and(|t| t <= now) {
            self.next_sweep = Some(now + self.config.sweep_interval);
            self.sweep(now);
        }
        self.settle(now);
    }

    // ---- inputs by role -------------------------------------------------------------

    fn session_frame(
        &mut self,
        now: Instant,
        slot: u16,
        peer: u64,
        frame: Frame,
    ) -> Result<(), LinkError> {
        //= docs/wire.md#router-links
        //# A session writes its own node id as the origin; a router refuses any other.
        match frame {
            Frame::Advertise(a) => {
                check_origin(a.origin, peer)?;
                if self.session_full(slot, &a.key) {
                    self.stats.drops.add(DropReason::RouteLimit);
                    return Ok(());
                }
                self.local_publish(now, slot, a.key, true);
            }
            Frame::WithdrawAdvertise(w) => {
                check_origin(w.origin, peer)?;
                self.local_publish(now, slot, w.key, false);
            }
            Frame::Subscribe(key) => {
                if self.session_full(slot, &key) {
                    self.stats.drops.add(DropReason::RouteLimit);
                    return Ok(());
                }
                self.subscribe_from(now, slot, key, true)
            }
            Frame::Unsubscribe(key) => self.subscribe_from(now, slot, key, false),
            Frame::Participant(r) => {
                check_origin(r.origin, peer)?;
                self.local_host(r.participant.0, slot, true);
            }
            Frame::ParticipantGone(r) => {
                check_origin(r.origin, peer)?;
                self.local_host(r.participant.0, slot, false);
            }
            Frame::Data(d) => {
                check_origin(d.origin, peer)?;
                self.stats.data_received += 1;
                if self.is_local_src(d.src, slot) {
                    self.forward_data(slot, true, d);
                }
            }
            Frame::Unicast(u) => {
                if self.is_local_src(u.src, slot) {
                    self.forward_unicast(slot, u);
                }
            }
            Frame::Announce(a) => {
                check_origin(a.origin, peer)?;
                if self.is_local_src(a.src, slot) {
                    self.forward_announce(slot, true, a);
                }
            }
            other => return Err(LinkError::Unexpected(other.frame_type())),
        }
        Ok(())
    }

    fn router_frame(&mut self, now: Instant, slot: u16, frame: Frame) -> Result<(), LinkError> {
        match frame {
            Frame::Advertise(a) => self.on_advertise(now, slot, a),
            Frame::WithdrawAdvertise(w) => self.on_withdraw(now, slot, w),
            Frame::Subscribe(key) => self.subscribe_from(now, slot, key, true),
            Frame::Unsubscribe(key) => self.subscribe_from(now, slot, key, false),
            Frame::Query(key) => self.on_query(slot, key),
            Frame::Participant(r) => self.on_host(slot, r, false),
            Frame::ParticipantGone(r) => self.on_host(slot, r, true),
            Frame::LinkState(ls) => self.on_link_state(slot, ls),
            Frame::Data(d) => {
                self.stats.data_received += 1;
                self.forward_data(slot, false, d)
            }
            Frame::Unicast(u) => self.forward_unicast(slot, u),
            Frame::Announce(a) => self.forward_announce(slot, false, a),
            other => return Err(LinkError::Unexpected(other.frame_type())),
        }
        Ok(())
    }

    // ---- advertisements -------------------------------------------------------------

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.saturating_add(1);
        self.seq
    }

    /// A session on `slot` advertises (`on`) or withdraws `key`. The first local publisher
    /// makes this router an origin of the key; the last one to go withdraws it.
    fn local_publish(&mut self, now: Instant, slot: u16, key: RouteKey, on: bool) {
        let i = if on {
            match self.rib.find_or_insert(&key, self.config.max_routes) {
                Some(i) => i,
                None => return self.stats.drops.add(DropReason::RouteLimit),
            }
        } else {
            match self.rib.find(&key) {
                Some(i) => i,
                None => return,
            }
        };
        self.set_flag(i, slot, LinkEntry::PUB, on);
        let Some(route) = self.rib.get(i) else { return };
        let live = route.origin(self.me).is_some_and(|o| !o.withdrawn());
        if on && !live {
            self.advertise_own(i, key);
        } else if !on && live && !route.has_publisher_link() {
            self.withdraw_own(i, key);
        }
        self.refresh(now, i);
        self.rib.remove_if_empty(i);
    }

    fn advertise_own(&mut self, i: u32, key: RouteKey) {
        let seq = self.next_seq();
        let me = self.me;
        let Some(route) = self.rib.get_mut(i) else {
            return;
        };
        let o = Origin {
            node: me,
            seq,
            hops: 0,
            flags: 0,
        };
        match route.origin_mut(me) {
            Some(x) => *x = o,
            None => route.origins.push(o),
        }
        self.flood(
            None,
            Frame::Advertise(Advertise {
                key,
                origin: NodeId(me),
                seq,
                hops: 0,
            }),
        );
    }

    fn withdraw_own(&mut self, i: u32, key: RouteKey) {
        let seq = self.next_seq();
        let me = self.me;
        let Some(route) = self.rib.get_mut(i) else {
            return;
        };
        let o = Origin {
            node: me,
            seq,
            hops: 0,
            flags: Origin::WITHDRAWN,
        };
        match route.origin_mut(me) {
            Some(x) => *x = o,
            None => route.origins.push(o),
        }
        self.flood(
            None,
            Frame::WithdrawAdvertise(Withdraw {
                key,
                origin: NodeId(me),
                seq,
            }),
        );
    }

    /// Someone holds word of this router's own origin for `key` at `seq`: unless it is what
    /// this router said last (come back around a cycle) or older, a restart made it forget
    /// what it said: say the truth again, above it.
    fn own_word(&mut self, now: Instant, slot: u16, key: RouteKey, seq: u32, advertised: bool) {
        // Whatever we said under `seq`, we say nothing under it again.
        self.seq = self.seq.max(seq);
        let mine = self
            .rib
            .find(&key)
            .and_then(|i| self.rib.get(i))
            .and_then(|r| r.origin(self.me).copied());
        let theirs = (seq, !advertised);
        match mine {
            // Our own word come back around a cycle.
            Some(m) if (m.seq, m.withdrawn()) == theirs => {
                self.stats.floods_suppressed += 1;
                return;
            }
            // The sender is behind: it gets what we said last.
            Some(m) if (m.seq, m.withdrawn()) > theirs => {
                self.stats.floods_suppressed += 1;
                return self.send(slot, adv_frame(key, &m));
            }
            None if !advertised => return,
            _ => {}
        }
        self.seq = self.seq.max(seq);
        let Some(i) = self.rib.find_or_insert(&key, self.config.max_routes) else {
            return self.stats.drops.add(DropReason::RouteLimit);
        };
        let publishes = self.rib.get(i).is_some_and(|r| r.has_publisher_link());
        if publishes {
            self.advertise_own(i, key);
        } else {
            self.withdraw_own(i, key);
        }
        self.refresh(now, i);
    }

    fn on_advertise(&mut self, now: Instant, slot: u16, a: Advertise) {
        if a.origin.0 == self.me {
            return self.own_word(now, slot, a.key, a.seq, true);
        }
        let Some(i) = self.rib.find_or_insert(&a.key, self.config.max_routes) else {
            return self.stats.drops.add(DropReason::RouteLimit);
        };
        let hops = a.hops.saturating_add(1);
        if !self.store_origin(slot, i, a.origin.0, a.seq, hops, 0) {
            return;
        }
        //= docs/wire.md#router-links
        //# A router forwards an ADVERTISE or WITHDRAW_ADVERTISE to every other router link
        //# only if it is newer than what it holds for (key, origin).
        self.flood(Some(slot), Frame::Advertise(Advertise { hops, ..a }));
        self.queries.remove(&a.key);
        self.refresh(now, i);
    }

    fn on_withdraw(&mut self, now: Instant, slot: u16, w: Withdraw) {
        if w.origin.0 == self.me {
            return self.own_word(now, slot, w.key, w.seq, false);
        }
        let Some(i) = self.rib.find_or_insert(&w.key, self.config.max_routes) else {
            return self.stats.drops.add(DropReason::RouteLimit);
        };
        if !self.store_origin(slot, i, w.origin.0, w.seq, 0, Origin::WITHDRAWN) {
            return;
        }
        self.flood(Some(slot), Frame::WithdrawAdvertise(w));
        self.refresh(now, i);
        self.rib.remove_if_empty(i);
    }

    /// Records an origin's word on route `i` if it is newer. If the sender on `slot` is
    /// behind (it sent an older word than the one held), it gets the one held back: that is
    /// how a router that restarted, or swept a tombstone early, catches up.
    fn store_origin(
        &mut self,
        slot: u16,
        i: u32,
        node: u64,
        seq: u32,
        hops: u8,
        flags: u8,
    ) -> bool {
        let max = self.config.max_origins_per_route;
        let Some(route) = self.rib.get_mut(i) else {
            return false;
        };
        let key = route.key;
        let new = Origin {
            node,
            seq,
            hops,
            flags,
        };
        let full = route.origins.len() >= max;
        // Ordered by sequence number, then a withdrawal above an advertisement (two words
        // under one number: a restarted origin reused it; every router keeps the same one).
        let theirs = (seq, flags & Origin::WITHDRAWN != 0);
        match route.origin_mut(node) {
            Some(o) if (o.seq, o.withdrawn()) > theirs => {
                let held = adv_frame(key, o);
                self.stats.floods_suppressed += 1;
                self.send(slot, held);
                false
            }
            Some(o) if (o.seq, o.withdrawn()) == theirs => {
                self.stats.floods_suppressed += 1;
                false
            }
            Some(o) => {
                *o = new;
                true
            }
            None if full => {
                self.stats.drops.add(DropReason::OriginLimit);
                self.rib.remove_if_empty(i);
                false
            }
            None => {
                route.origins.push(new);
                true
            }
        }
    }

    fn on_query(&mut self, slot: u16, key: RouteKey) {
        let Some(route) = self.rib.find(&key).and_then(|i| self.rib.get(i)) else {
            return;
        };
        let answers: Vec<Frame> = route
            .origins
            .as_slice()
            .iter()
            .filter(|o| !o.withdrawn())
            .map(|o| {
                Frame::Advertise(Advertise {
                    key,
                    origin: NodeId(o.node),
                    seq: o.seq,
                    hops: o.hops,
                })
            })
            .collect();
        if !answers.is_empty() {
            self.stats.queries_answered += 1;
        }
        for f in answers {
            self.send(slot, f);
        }
    }

    fn maybe_query(&mut self, now: Instant, key: RouteKey) {
        if self.queries.contains_key(&key) {
            return;
        }
        let routers: Vec<u16> = self.router_slots().collect();
        if routers.is_empty() {
            return;
        }
        if self.queries.len() >= self.config.max_pending_queries {
            return self.stats.drops.add(DropReason::QueryLimit);
        }
        self.queries.insert(key, now + self.config.query_timeout);
        self.stats.queries_sent += 1;
        for s in routers {
            self.send(s, Frame::Query(key));
        }
    }

    // ---- subscriptions --------------------------------------------------------------

    fn subscribe_from(&mut self, now: Instant, slot: u16, key: RouteKey, on: bool) {
        let i = if on {
            match self.rib.find_or_insert(&key, self.config.max_routes) {
                Some(i) => i,
                None => return self.stats.drops.add(DropReason::RouteLimit),
            }
        } else {
            match self.rib.find(&key) {
                Some(i) => i,
                None => return,
            }
        };
        self.set_flag(i, slot, LinkEntry::DOWN, on);
        self.refresh(now, i);
        self.rib.remove_if_empty(i);
    }

    fn set_flag(&mut self, i: u32, slot: u16, flag: u8, on: bool) {
        if on && self.links[slot as usize].is_none() {
            return;
        }
        let Some(route) = self.rib.get_mut(i) else {
            return;
        };
        let change = route.set_flag(slot, flag, on);
        if let Some(l) = self.links[slot as usize].as_mut() {
            match change {
                RefChange::Added => l.refs += 1,
                RefChange::Removed => l.refs = l.refs.saturating_sub(1),
                RefChange::None => {}
            }
        }
    }

    /// Brings route `i`'s upstream subscriptions in line with its origins and subscribers.
    ///
    /// A key's traffic follows one tree, the tree rooted at its lowest-id reachable origin
    /// (every router of a component agrees on it once floods settle). This router subscribes
    /// on the first hop along that tree toward each live origin (a local publisher session
    /// for its own origin) exactly while another link, a subscriber session or a tree
    /// neighbour, is subscribed to it. On a tree that rule is well-founded: each
    /// subscription rests on one from farther away, and in the end on a subscriber session,
    /// so subscriptions cannot keep each other alive around a cycle once the real
    /// subscribers are gone (with one tree per origin, they could).
    ///
    /// Queries if there are subscribers and no publisher is known.
    fn refresh(&mut self, now: Instant, i: u32) {
        let Some(route) = self.rib.get(i) else { return };
        let key = route.key;
        let origins: Vec<u64> = live_origins(route).collect();
        let root = shared_root(&mut self.topo, &origins);
        let mut toward: Vec<u16> = Vec::new();
        let mut tree_nodes: Vec<u64> = Vec::new();
        if let Some(r) = root {
            if let Some(t) = self.topo.tree(r) {
                tree_nodes.extend(t.parent);
                tree_nodes.extend(t.children.iter().copied());
            }
            for &o in &origins {
                if o == self.me {
                    toward.extend(
                        route
                            .links
                            .as_slice()
                            .iter()
                            .filter(|e| e.flags & LinkEntry::PUB != 0)
                            .map(|e| e.slot),
                    );
                } else if let Some(h) = self.topo.first_hop(r, o)
                    && let Some(&s) = self.node_slot.get(&h)
                {
                    toward.push(s);
                }
            }
        }
        let node_of = |s: u16| self.links[s as usize].as_ref().map(|l| (l.node, l.role));
        // Subscribed links that count: sessions, and tree neighbours (a router that is not
        // one subscribed on a view of the graph that is out of date).
        let downs: Vec<u64> = route
            .links
            .as_slice()
            .iter()
            .filter(|e| e.flags & LinkEntry::DOWN != 0)
            .filter_map(|e| node_of(e.slot))
            .filter(|(n, role)| *role == Role::Session || tree_nodes.contains(n))
            .map(|(n, _)| n)
            .collect();
        let ups: Vec<u16> = route
            .links
            .as_slice()
            .iter()
            .filter(|e| e.flags & LinkEntry::UP != 0)
            .map(|e| e.slot)
            .collect();
        let want = |u: u16| {
            let un = node_of(u).map(|(n, _)| n);
            toward.contains(&u) && downs.iter().any(|&d| Some(d) != un)
        };
        let mut wanted: Vec<u16> = toward.iter().copied().filter(|&u| want(u)).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let needs_query = route
            .links
            .as_slice()
            .iter()
            .any(|e| e.flags & LinkEntry::DOWN != 0)
            && origins.is_empty();
        for &u in ups.iter().filter(|u| !wanted.contains(u)) {
            self.set_flag(i, u, LinkEntry::UP, false);
            self.send(u, Frame::Unsubscribe(key));
        }
        for &u in wanted.iter().filter(|u| !ups.contains(u)) {
            self.set_flag(i, u, LinkEntry::UP, true);
            self.send(u, Frame::Subscribe(key));
        }
        if needs_query {
            self.maybe_query(now, key);
        }
    }

    // ---- output ---------------------------------------------------------------------

    fn send(&mut self, slot: u16, frame: Frame) {
        if let Some(l) = &self.links[slot as usize] {
            self.out.push_back((l.id, frame));
        }
    }

    fn router_slots(&self) -> impl Iterator<Item = u16> + '_ {
        self.links
            .iter()
            .enumerate()
            .filter(|(_, l)| l.as_ref().is_some_and(|l| l.role == Role::Router))
            .map(|(s, _)| s as u16)
    }

    /// Sends `frame` on every router link but `except`.
    fn flood(&mut self, except: Option<u16>, frame: Frame) {
        let slots: Vec<u16> = self.router_slots().filter(|&s| Some(s) != except).collect();
        for s in slots {
            self.send(s, frame.clone());
        }
    }

    /// Moves the next route of a pending table sync into the output queue.
    fn pull_sync(&mut self) {
        for slot in 0..self.links.len() {
            let Some(Some(l)) = self.links.get(slot) else {
                continue;
            };
            let Some(mut pos) = l.sync else { continue };
            let id = l.id;
            while (pos as usize) < self.rib.slots() {
                let here = pos;
                pos += 1;
                let Some(route) = self.rib.get(here) else {
                    continue;
                };
                let key = route.key;
                let frames: Vec<Frame> = route
                    .origins
                    .as_slice()
                    .iter()
                    .map(|o| adv_frame(key, o))
                    .collect();
                if frames.is_empty() {
                    continue;
                }
                for f in frames {
                    self.out.push_back((id, f));
                }
                break;
            }
            if let Some(Some(l)) = self.links.get_mut(slot) {
                l.sync = ((pos as usize) < self.rib.slots()).then_some(pos);
            }
            if !self.out.is_empty() {
                return;
            }
        }
    }
}

/// The live (not withdrawn) origins of a route.
fn live_origins(route: &crate::rib::Route) -> impl Iterator<Item = u64> + '_ {
    route
        .origins
        .as_slice()
        .iter()
        .filter(|o| !o.withdrawn())
        .map(|o| o.node)
}

/// The root of a key's tree: its lowest-id origin this router can reach. Every router of a
/// component reaches the same origins, so they all pick the same root.
fn shared_root(topo: &mut Topology, origins: &[u64]) -> Option<u64> {
    let mut best: Option<u64> = None;
    for &o in origins {
        if best.is_none_or(|b| o < b) && topo.tree(o).is_some() {
            best = Some(o);
        }
    }
    best
}

fn check_origin(origin: NodeId, peer: u64) -> Result<(), LinkError> {
    if origin.0 == peer {
        Ok(())
    } else {
        Err(LinkError::SpoofedOrigin)
    }
}

fn adv_frame(key: RouteKey, o: &Origin) -> Frame {
    if o.withdrawn() {
        Frame::WithdrawAdvertise(Withdraw {
            key,
            origin: NodeId(o.node),
            seq: o.seq,
        })
    } else {
        Frame::Advertise(Advertise {
            key,
            origin: NodeId(o.node),
            seq: o.seq,
            hops: o.hops,
        })
    }
}

fn host_frame(p: u64, o: &Origin) -> Frame {
    let r = HostRoute {
        participant: ParticipantId(p),
        origin: NodeId(o.node),
        seq: o.seq,
    };
    if o.withdrawn() {
        Frame::ParticipantGone(r)
    } else {
        Frame::Participant(r)
    }
}

#[cfg(test)]
mod tests;
