//! [internal] A deterministic simulator for `tether-core`.
//!
//! Several [`Participant`]s exchange datagrams over a simulated network in virtual time: a
//! seeded RNG decides loss, duplication, reordering and delay, so a failing seed replays
//! exactly. No sockets, no threads, no sleeps: [`Sim::step`] jumps the clock to the next
//! delivery or timer.

// One `unsafe` block, allowed where it is: `setns` in `netns`, for the NFQUEUE delay
// handler's thread.
#![deny(unsafe_code)]

pub mod fuzz;
pub mod netns;
mod random;
pub mod realm;
pub mod router;
mod skips;

pub use random::SeededRandom;
pub use skips::{SKIPS_ENV, note_skip};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_core::{Config, EntityId, Event, Participant, ParticipantId, Priority, Sample};

/// SplitMix64: small, fast, seeded; good enough to drive a network model.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A float in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    /// A duration in [0, max].
    pub fn upto(&mut self, max: Duration) -> Duration {
        Duration::from_nanos((self.unit() * max.as_nanos() as f64) as u64)
    }
}

/// What the simulated network does to each datagram.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Base one-way delay.
    pub delay: Duration,
    /// Extra random delay in [0, jitter]; jitter larger than the gap between datagrams
    /// reorders them.
    pub jitter: Duration,
    /// Extra delay for datagrams sent to a multicast group: a host that serves its group
    /// socket after its unicast one (another thread, another queue) sees group datagrams
    /// late relative to unicast ones sent after them.
    pub group_delay: Duration,
    /// `Some(mtu)`: the hosts are on a LAN of this MTU, not one host. They get LAN addresses
    /// (10.0.0.x, so engines size datagrams to the path and probe it), `loss` applies to
    /// each Ethernet frame, and a datagram larger than a frame is IP-fragmented and lost if
    /// any of its frames is, or, when `dont_fragment`, refused at the sender as the kernel
    /// does (`EMSGSIZE`, reported to its engine). `None`: one host, loss per datagram.
    pub mtu: Option<usize>,
    /// The hosts' sockets set the don't-fragment bit (as tether's transport does).
    pub dont_fragment: bool,
    /// `Some(bytes per second)`: each host receives through a bottleneck of this rate (its
    /// downlink), datagrams queueing in front of it in arrival order; `queue` bytes at most
    /// wait there, and a datagram that finds it full is dropped (a congested router's tail
    /// drop). `None`: no bottleneck.
    pub rate: Option<u64>,
    /// Bytes the bottleneck queue holds (with `rate`).
    pub queue: usize,
}

impl Link {
    /// A perfect link with 1 ms delay.
    pub fn perfect() -> Self {
        Link {
            loss: 0.0,
            duplicate: 0.0,
            delay: Duration::from_millis(1),
            jitter: Duration::ZERO,
            group_delay: Duration::ZERO,
            mtu: None,
            dont_fragment: true,
            rate: None,
            queue: 0,
        }
    }
    /// A hostile link: the given loss, 5 % duplication, delay 1–6 ms (reordering).
    pub fn lossy(loss: f64) -> Self {
        Link {
            loss,
            duplicate: 0.05,
            delay: Duration::from_millis(1),
            jitter: Duration::from_millis(5),
            group_delay: Duration::ZERO,
            mtu: None,
            dont_fragment: true,
            rate: None,
            queue: 0,
        }
    }

    /// A LAN of `mtu` whose frames are lost with probability `loss` (see [`Link::mtu`]),
    /// delay 1–2 ms.
    pub fn lan(mtu: usize, loss: f64) -> Self {
        Link {
            loss,
            duplicate: 0.0,
            delay: Duration::from_millis(1),
            jitter: Duration::from_millis(1),
            group_delay: Duration::ZERO,
            mtu: Some(mtu),
            dont_fragment: true,
            rate: None,
            queue: 0,
        }
    }

    /// This link with a bottleneck of `rate` bytes per second in front of each receiver,
    /// and a queue of `queue` bytes before it (see [`Link::rate`]).
    pub fn bottleneck(self, rate: u64, queue: usize) -> Self {
        Link {
            rate: Some(rate.max(1)),
            queue,
            ..self
        }
    }

    /// Ethernet frames (IPv4) a UDP datagram of `len` bytes takes on this link.
    pub fn frames(&self, len: usize) -> usize {
        match self.mtu {
            None => 1,
            // Each IP fragment carries a multiple of 8 bytes of the UDP datagram (its
            // 8-byte header included) after a 20-byte IP header.
            Some(mtu) => (len + 8).div_ceil((mtu - 20) / 8 * 8).max(1),
        }
    }
}

impl Node {
    fn next_wake(&self) -> Option<Instant> {
        if self.stopped.is_some() {
            return None;
        }
        match (self.participant.poll_timeout(), self.sched_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// One simulated host with its participant, and everything it received.
#[derive(Debug)]
pub struct Node {
    /// Its simulated address.
    pub addr: SocketAddr,
    /// The engine.
    pub participant: Participant,
    /// Every event it raised, in order.
    pub events: Vec<Event>,
    /// Samples taken from each reader, in delivery order.
    pub delivered: BTreeMap<EntityId, Vec<Sample>>,
    /// Take samples as soon as they are available (false: a stalled application).
    pub auto_take: bool,
    /// While false the node neither sends nor receives, nor runs its timers (a crashed or
    /// stopped host).
    pub up: bool,
    /// While true the node runs, but nothing it sends and nothing sent to it gets through
    /// (its cable pulled, its link down): each side's leases run out.
    pub unplugged: bool,
    /// While `Some`, the node is stopped (SIGSTOP, a paused VM): its timers do not run and
    /// what is sent to it waits here, as in its socket, until [`Sim::resume`].
    pub stopped: Option<Vec<(SocketAddr, Bytes)>>,
    /// When its asynchronous writers may next send (tokens permitting).
    sched_at: Option<Instant>,
    /// Multicast groups it has joined: it receives datagrams sent there too (each node's
    /// copy lost independently, as on a real LAN).
    pub groups: Vec<SocketAddr>,
    /// With a bottleneck ([`Link::rate`]): when its downlink is free again.
    free_at: Instant,
    /// Datagrams its bottleneck queue dropped (full).
    pub queue_drops: u64,
    /// Most bytes ever waiting in its bottleneck queue.
    pub max_queue: usize,
    /// Its site: datagrams to real addresses reach only nodes of the same site (sites meet
    /// through a [`router`](crate::router)). 0 for every node unless a test says otherwise.
    pub site: u32,
}

/// A datagram as a host that sees the traffic observes it ([`Sim::sniffed`]).
#[derive(Debug, Clone)]
pub struct Sniffed {
    /// The sender's address.
    pub from: SocketAddr,
    /// Where it was sent (a node's address, a group, or an address no node holds).
    pub to: SocketAddr,
    /// The datagram.
    pub payload: Bytes,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Flight {
    at: Instant,
    order: u64,
    to: usize,
    from: SocketAddr,
    payload: Bytes,
}

/// The simulator.
#[derive(Debug)]
pub struct Sim {
    /// Virtual now.
    pub now: Instant,
    start: Instant,
    rng: Rng,
    /// The run's seed: the network model's and every node's randomness come from it.
    seed: u64,
    /// The hosts.
    pub nodes: Vec<Node>,
    link: Link,
    flights: BinaryHeap<Reverse<Flight>>,
    order: u64,
    /// Datagrams the network dropped.
    pub dropped: u64,
    /// Datagrams refused at their sender as larger than the link's MTU (don't-fragment).
    pub too_big: u64,
    /// Most datagrams ever in flight at once.
    pub max_in_flight: usize,
    /// When `Some`, every datagram any node sends is recorded here (before loss).
    pub wire: Option<Vec<Bytes>>,
    /// When `Some`, every datagram any node sends is recorded here with its source and
    /// destination (before loss): what a host that sees all the traffic (the same Wi-Fi, a
    /// mirrored port) learns. Tests that model such a host drain it and act on it.
    pub sniffed: Option<Vec<Sniffed>>,
    /// Datagrams sent to addresses no node holds (a spoofed source's true owner, say), by
    /// destination: how many, and their bytes.
    pub unrouted: BTreeMap<SocketAddr, (u64, u64)>,
    /// Datagrams to a real address of another site (dropped: only a router joins sites).
    pub other_site: u64,
    /// The router joining sites, if any ([`router`](crate::router)).
    pub router: Option<router::SimRouter>,
    /// When `Some`, every datagram is passed through it as it reaches node `to` (`to`,
    /// the datagram; what it returns is delivered): a peer of another version, or a
    /// middlebox, in tests.
    pub rewrite: Option<fn(usize, &Bytes) -> Bytes>,
}

impl Sim {
    /// A network whose every link behaves as `link`, randomised by `seed`.
    pub fn new(seed: u64, link: Link) -> Self {
        let now = Instant::now();
        Sim {
            now,
            start: now,
            rng: Rng::new(seed),
            seed,
            nodes: Vec::new(),
            link,
            flights: BinaryHeap::new(),
            order: 0,
            dropped: 0,
            too_big: 0,
            max_in_flight: 0,
            wire: None,
            sniffed: None,
            unrouted: BTreeMap::new(),
            other_site: 0,
            router: None,
            rewrite: None,
        }
    }

    /// Virtual time elapsed since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Adds a host in `domain` with default engine settings; every host announces to every
    /// other (as the same-host registry does).
    pub fn add_node(&mut self, domain: u16) -> usize {
        self.add_node_with(|c| c.domain = domain)
    }

    /// Two new nodes (domain 0), a writer `writer` on the first and a reader `reader` on
    /// the second, run until the writer has matched the reader (at most 10 s; panics
    /// otherwise). Returns (writer node, writer, reader node, reader).
    pub fn writer_and_reader(
        &mut self,
        writer: tether_core::EndpointInfo,
        reader: tether_core::EndpointInfo,
    ) -> (usize, EntityId, usize, EntityId) {
        let (w, r) = (self.add_node(0), self.add_node(0));
        let (wid, rid) = self.writer_and_reader_on(w, r, writer, reader);
        (w, wid, r, rid)
    }

    /// [`writer_and_reader`](Self::writer_and_reader) on nodes `w` and `r` already added
    /// (with their own settings). Returns (writer, reader).
    pub fn writer_and_reader_on(
        &mut self,
        w: usize,
        r: usize,
        writer: tether_core::EndpointInfo,
        reader: tether_core::EndpointInfo,
    ) -> (EntityId, EntityId) {
        let now = self.now;
        let wid = self.p(w).create_writer(now, writer).expect("a writer");
        let rid = self.p(r).create_reader(now, reader);
        self.pump(w);
        self.pump(r);
        let matched = self.run_until(Duration::from_secs(10), |s| s.p(w).matched_count(wid) == 1);
        assert!(matched, "the writer never matched the reader");
        (wid, rid)
    }

    /// Adds a host whose participant announces a lease of `lease` and announces itself
    /// every 500 ms (a lease of 2 s runs out in a few seconds of virtual time).
    pub fn add_node_leased(&mut self, lease: Duration) -> usize {
        self.add_node_with(|c| {
            c.lease = lease;
            c.announce_period = Duration::from_millis(500);
        })
    }

    /// Adds a host, letting `tune` adjust its engine settings.
    pub fn add_node_with(&mut self, tune: impl FnOnce(&mut Config)) -> usize {
        let i = self.add_node_alone(tune);
        let addr = self.nodes[i].addr;
        for j in 0..i {
            self.nodes[j].participant.add_target(addr);
            let other = self.nodes[j].addr;
            self.nodes[i].participant.add_target(other);
        }
        self.pump(i);
        for j in 0..i {
            self.pump(j);
        }
        i
    }

    /// Adds a host that announces to no one and that no one announces to (yet): it learns
    /// others, and they learn it, when a test calls `add_target`, or from what they send
    /// (as a session meets others through the same-host registry, each when its scan finds
    /// the other's entry).
    pub fn add_node_alone(&mut self, tune: impl FnOnce(&mut Config)) -> usize {
        let i = self.nodes.len();
        let addr = match self.link.mtu {
            Some(_) => SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::new(10, 0, (i / 250) as u8, (i % 250) as u8 + 1),
                7400,
            )),
            None => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 20_000 + i as u16)),
        };
        let mut cfg = Config::new(0, ParticipantId(0x1000 + i as u64 * 7919));
        cfg.name = format!("node{i}");
        tune(&mut cfg);
        // Its randomness from the run's seed, a stream per node.
        let seed = self.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let p = Participant::with_random(cfg, self.now, Box::new(SeededRandom::new(seed)));
        self.nodes.push(Node {
            addr,
            participant: p,
            events: Vec::new(),
            delivered: BTreeMap::new(),
            auto_take: true,
            up: true,
            unplugged: false,
            stopped: None,
            sched_at: None,
            groups: Vec::new(),
            free_at: self.now,
            queue_drops: 0,
            max_queue: 0,
            site: 0,
        });
        self.pump(i);
        i
    }

    /// The participant of node `i`.
    pub fn p(&mut self, i: usize) -> &mut Participant {
        &mut self.nodes[i].participant
    }

    /// Moves node `i`'s output into the network and its events into its log: immediate
    /// transmits, then whatever asynchronous writers' flow controllers allow now.
    pub fn pump(&mut self, i: usize) {
        let now = self.now;
        loop {
            let t = match self.nodes[i].participant.poll_transmit() {
                Some(t) => t,
                None => match self.nodes[i].participant.poll_scheduled(now) {
                    Some(t) => {
                        self.transmit(i, t);
                        self.nodes[i].participant.scheduled_sent(&Priority::ALL);
                        continue;
                    }
                    None => break,
                },
            };
            self.transmit(i, t);
        }
        self.nodes[i].sched_at = self.nodes[i].participant.next_scheduled(now);
        self.max_in_flight = self.max_in_flight.max(self.flights.len());
        let now = self.now;
        let node = &mut self.nodes[i];
        while let Some(e) = node.participant.poll_event() {
            if let Event::DataAvailable { reader } = e {
                if node.auto_take {
                    while let Some(s) = node.participant.take(now, reader) {
                        node.delivered.entry(reader).or_default().push(s);
                    }
                }
            }
            node.events.push(e);
        }
    }

    fn transmit(&mut self, i: usize, t: tether_core::Transmit) {
        if !self.nodes[i].up || self.nodes[i].unplugged {
            return;
        }
        if let Some(w) = self.wire.as_mut() {
            w.push(t.contiguous());
        }
        let from = self.nodes[i].addr;
        if let Some(w) = self.sniffed.as_mut() {
            w.push(Sniffed {
                from,
                to: t.dest,
                payload: t.contiguous(),
            });
        }
        // Through the router (virtual addresses, and announcements it floods).
        if self.route(i, &t) {
            return;
        }
        let site = self.nodes[i].site;
        let mut targets: Vec<usize> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(k, n)| n.addr == t.dest || (*k != i && n.groups.contains(&t.dest)))
            .map(|(k, _)| k)
            .collect();
        if targets.is_empty() {
            let u = self.unrouted.entry(t.dest).or_default();
            u.0 += 1;
            u.1 += t.len() as u64;
            return;
        }
        let all = targets.len();
        targets.retain(|k| self.nodes[*k].site == site);
        self.other_site += (all - targets.len()) as u64;
        if targets.is_empty() {
            return;
        }
        let payload = t.contiguous();
        if let Some(mtu) = self.link.mtu {
            if self.link.dont_fragment && payload.len() + 28 > mtu {
                // The kernel refuses it; the driver tells the engine.
                self.too_big += 1;
                let now = self.now;
                self.nodes[i]
                    .participant
                    .datagram_too_big(now, t.dest, payload.len());
                return;
            }
        }
        let frames = self.link.frames(payload.len()) as i32;
        let extra = if self.nodes.iter().any(|n| n.groups.contains(&t.dest)) {
            self.link.group_delay
        } else {
            Duration::ZERO
        };
        for to in targets {
            // Lost if any of its frames is.
            if self.rng.chance(1.0 - (1.0 - self.link.loss).powi(frames)) {
                self.dropped += 1;
                continue;
            }
            let copies = if self.rng.chance(self.link.duplicate) {
                2
            } else {
                1
            };
            // Through the receiver's bottleneck: it waits behind what is queued, or is
            // dropped when the queue is full.
            let mut departs = self.now;
            if let Some(rate) = self.link.rate {
                let node = &mut self.nodes[to];
                let start = node.free_at.max(self.now);
                let queued = (start - self.now).as_secs_f64() * rate as f64;
                if queued as usize + payload.len() > self.link.queue.max(payload.len()) {
                    node.queue_drops += 1;
                    self.dropped += 1;
                    continue;
                }
                node.max_queue = node.max_queue.max(queued as usize + payload.len());
                let serial = Duration::from_secs_f64(payload.len() as f64 / rate as f64);
                node.free_at = start + serial;
                departs = node.free_at;
            }
            for _ in 0..copies {
                let at = departs + self.link.delay + extra + self.rng.upto(self.link.jitter);
                self.order += 1;
                self.flights.push(Reverse(Flight {
                    at,
                    order: self.order,
                    to,
                    from,
                    payload: payload.clone(),
                }));
            }
        }
    }

    /// Writes one sample on node `i`'s `writer`, running the network while the writer waits
    /// for room (a full keep-all history, or a path's congestion window), at most `limit`
    /// of virtual time. Returns its sequence number; panics if it never got room.
    pub fn write(
        &mut self,
        i: usize,
        writer: EntityId,
        ts: u64,
        payload: Bytes,
        limit: Duration,
    ) -> u64 {
        let deadline = self.now + limit;
        let mut payload = payload;
        loop {
            let now = self.now;
            match self.nodes[i].participant.write(now, writer, ts, payload) {
                Ok(seq) => {
                    self.pump(i);
                    return seq;
                }
                Err(tether_core::WriteError::WouldBlock(p)) => {
                    payload = p;
                    self.pump(i);
                    assert!(self.step(), "the writer waits with nothing in flight");
                    assert!(self.now < deadline, "the writer waited for room {limit:?}");
                }
                Err(e) => panic!("write failed: {e}"),
            }
        }
    }

    /// Takes every available sample of `reader` on node `i` (for stalled applications).
    pub fn take_all(&mut self, i: usize, reader: EntityId) -> usize {
        let now = self.now;
        let node = &mut self.nodes[i];
        let mut n = 0;
        while let Some(s) = node.participant.take(now, reader) {
            node.delivered.entry(reader).or_default().push(s);
            n += 1;
        }
        self.pump(i);
        n
    }

    /// Advances to the next delivery or timer and processes it. False if nothing is left.
    pub fn step(&mut self) -> bool {
        let next_timer = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.up)
            .filter_map(|(i, n)| n.next_wake().map(|t| (t, i)))
            .min();
        let next_flight = self.flights.peek().map(|Reverse(f)| f.at);
        match (next_timer, next_flight) {
            (None, None) => false,
            (Some((t, i)), f) if f.is_none_or(|f| t < f) => {
                self.now = self.now.max(t);
                self.run_due_timers(i);
                true
            }
            _ => {
                let Some(Reverse(f)) = self.flights.pop() else {
                    return false;
                };
                self.now = self.now.max(f.at);
                let now = self.now;
                // A frame in flight on a router link that went down is lost with it.
                let link_down =
                    tether_core::route::is_routed(&f.from) && !self.router_link_is_up(f.to);
                let payload = match self.rewrite {
                    Some(rw) => rw(f.to, &f.payload),
                    None => f.payload.clone(),
                };
                if let Some(waiting) = self.nodes[f.to].stopped.as_mut() {
                    if !link_down {
                        waiting.push((f.from, payload));
                    }
                } else if self.nodes[f.to].up && !self.nodes[f.to].unplugged && !link_down {
                    self.nodes[f.to]
                        .participant
                        .handle_datagram(now, f.from, &payload);
                    self.pump(f.to);
                }
                true
            }
        }
    }

    /// Runs node `i`'s timers that are due now, and sends what they produced.
    fn run_due_timers(&mut self, i: usize) {
        let now = self.now;
        if self.nodes[i]
            .participant
            .poll_timeout()
            .is_some_and(|x| x <= now)
        {
            self.nodes[i].participant.handle_timeout(now);
        }
        self.pump(i);
    }

    /// Stops node `i` (SIGSTOP): no timer runs, and what is sent to it waits.
    pub fn stop(&mut self, i: usize) {
        self.nodes[i].stopped.get_or_insert_with(Vec::new);
    }

    /// Node `i` runs again (SIGCONT) as a session's driver would: its timers first (they
    /// are overdue), then what waited in its socket, in order.
    pub fn resume(&mut self, i: usize) {
        let Some(waiting) = self.nodes[i].stopped.take() else {
            return;
        };
        let now = self.now;
        self.run_due_timers(i);
        for (from, d) in waiting {
            self.nodes[i].participant.handle_datagram(now, from, &d);
            self.pump(i);
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until_time(until);
    }

    /// Runs until the virtual clock reaches `t`.
    pub fn run_until_time(&mut self, t: Instant) {
        while self.next_at().is_some_and(|n| n <= t) {
            self.step();
        }
        self.now = self.now.max(t);
    }

    /// Runs until `done` holds or `limit` of virtual time passes; true if `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Sim) -> bool) -> bool {
        let until = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            match self.next_at() {
                Some(n) if n <= until => {
                    self.step();
                }
                _ => return done(self),
            }
        }
    }

    fn next_at(&self) -> Option<Instant> {
        let t = self
            .nodes
            .iter()
            .filter(|n| n.up)
            .filter_map(|n| n.next_wake())
            .min();
        let f = self.flights.peek().map(|Reverse(f)| f.at);
        match (t, f) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Samples node `i`'s reader got, as sequence numbers.
    pub fn seqs(&self, i: usize, reader: EntityId) -> Vec<u64> {
        self.nodes[i]
            .delivered
            .get(&reader)
            .map(|v| v.iter().map(|s| s.seq).collect())
            .unwrap_or_default()
    }

    /// Payloads node `i`'s reader got.
    pub fn payloads(&self, i: usize, reader: EntityId) -> Vec<Bytes> {
        self.nodes[i]
            .delivered
            .get(&reader)
            .map(|v| v.iter().map(|s| s.payload.clone()).collect())
            .unwrap_or_default()
    }
}
