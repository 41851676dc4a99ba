//! A deterministic network of [`Router`]s and [`Leaf`]s joined by in-memory links.
//!
//! Each link is two FIFO queues (a reliable, ordered stream each way, as a QUIC stream);
//! which queue delivers next is drawn from a seeded xorshift, so a seed fixes the
//! interleaving. Every frame is encoded and parsed on its way, so the codec is in the loop.
//! Links fail (queues lost, both ends told) and come back (a new link id, HELLOs again);
//! routers restart with their state lost.

#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_routing::{
    Config, Delivery, Frame, Leaf, LinkId, NodeId, ParticipantId, Role, RouteKey, Router,
};

/// xorshift64*: tiny, seeded, good enough to shuffle deliveries.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

pub enum Node {
    Router(Box<Router>),
    Leaf(LeafNode),
}

pub struct LeafNode {
    pub leaf: Leaf,
    pub participant: ParticipantId,
    pub inbox: Vec<Delivery>,
}

/// One end of a link: the node index and the id that node knows the link by.
#[derive(Debug, Clone, Copy)]
struct End {
    node: usize,
    id: LinkId,
}

struct SimLink {
    ends: [End; 2],
    up: bool,
    /// `queues[0]`: from end 0 to end 1; `queues[1]`: back.
    queues: [VecDeque<Bytes>; 2],
}

pub struct Net {
    pub nodes: Vec<Node>,
    links: Vec<SimLink>,
    /// (node, link id) → link index and which end the node is.
    by_end: HashMap<(usize, LinkId), (usize, usize)>,
    next_id: u32,
    pub rng: Rng,
    pub now: Instant,
    /// Frames delivered since the start.
    pub delivered: u64,
    /// DATA frames seen per (link, direction, datagram): "one copy per link".
    pub data_copies: HashMap<(usize, usize, Bytes), u32>,
    /// Errors nodes returned from `handle_frame` (none are expected).
    pub errors: Vec<String>,
    /// The last frames delivered, for a loop's diagnosis.
    recent: VecDeque<String>,
}

impl Net {
    pub fn new(seed: u64) -> Self {
        Net {
            nodes: Vec::new(),
            links: Vec::new(),
            by_end: HashMap::new(),
            next_id: 1,
            rng: Rng::new(seed),
            now: Instant::now(),
            delivered: 0,
            data_copies: HashMap::new(),
            errors: Vec::new(),
            recent: VecDeque::new(),
        }
    }

    /// A router with node id `node`.
    pub fn router(&mut self, node: u64) -> usize {
        self.nodes
            .push(Node::Router(Box::new(Router::new(Config::new(
                NodeId(node),
                0,
            )))));
        self.nodes.len() - 1
    }

    /// A session with node id `node` hosting participant `node * 10`.
    pub fn leaf(&mut self, node: u64) -> usize {
        let mut leaf = Leaf::new(NodeId(node), 0);
        let participant = ParticipantId(node * 10);
        leaf.add_participant(participant);
        self.nodes.push(Node::Leaf(LeafNode {
            leaf,
            participant,
            inbox: Vec::new(),
        }));
        self.nodes.len() - 1
    }

    pub fn r(&mut self, i: usize) -> &mut Router {
        match &mut self.nodes[i] {
            Node::Router(r) => r,
            Node::Leaf(_) => panic!("node {i} is a leaf"),
        }
    }

    pub fn l(&mut self, i: usize) -> &mut LeafNode {
        match &mut self.nodes[i] {
            Node::Leaf(l) => l,
            Node::Router(_) => panic!("node {i} is a router"),
        }
    }

    pub fn is_router(&self, i: usize) -> bool {
        matches!(self.nodes[i], Node::Router(_))
    }

    /// Links `a` and `b` (and brings the link up); returns the link's index.
    pub fn connect(&mut self, a: usize, b: usize) -> usize {
        let ends = [
            End {
                node: a,
                id: LinkId(0),
            },
            End {
                node: b,
                id: LinkId(0),
            },
        ];
        self.links.push(SimLink {
            ends,
            up: false,
            queues: [VecDeque::new(), VecDeque::new()],
        });
        let l = self.links.len() - 1;
        self.restore(l);
        l
    }

    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    pub fn link_ends(&self, l: usize) -> (usize, usize) {
        (self.links[l].ends[0].node, self.links[l].ends[1].node)
    }

    pub fn is_up(&self, l: usize) -> bool {
        self.links[l].up
    }

    /// The link fails: frames in flight are lost and both ends are told.
    pub fn fail(&mut self, l: usize) {
        if !self.links[l].up {
            return;
        }
        self.pump_out();
        let link = &mut self.links[l];
        link.up = false;
        link.queues = [VecDeque::new(), VecDeque::new()];
        let ends = link.ends;
        for e in ends {
            self.by_end.remove(&(e.node, e.id));
            let now = self.now;
            match &mut self.nodes[e.node] {
                Node::Router(r) => r.link_down(now, e.id),
                Node::Leaf(x) => x.leaf.link_down(e.id),
            }
        }
    }

    /// The link comes back (a new connection: new ids, HELLOs first).
    pub fn restore(&mut self, l: usize) {
        if self.links[l].up {
            return;
        }
        self.pump_out();
        for side in 0..2 {
            let id = LinkId(self.next_id);
            self.next_id += 1;
            let node = self.links[l].ends[side].node;
            self.links[l].ends[side].id = id;
            self.by_end.insert((node, id), (l, side));
        }
        self.links[l].up = true;
        for side in 0..2 {
            let e = self.links[l].ends[side];
            match &mut self.nodes[e.node] {
                Node::Router(r) => {
                    let hello = r.hello().to_bytes().unwrap();
                    self.links[l].queues[side].push_back(hello);
                }
                Node::Leaf(x) => x.leaf.link_up(e.id),
            }
        }
    }

    /// The router restarts with its state lost: its links fail and come back.
    pub fn restart(&mut self, i: usize) {
        let mine: Vec<usize> = (0..self.links.len())
            .filter(|&l| self.links[l].up && self.links[l].ends.iter().any(|e| e.node == i))
            .collect();
        for &l in &mine {
            self.fail(l);
        }
        let node = self.r(i).node();
        self.nodes[i] = Node::Router(Box::new(Router::new(Config::new(node, 0))));
        for &l in &mine {
            self.restore(l);
        }
    }

    /// Moves every frame the nodes want to send into their links' queues.
    fn pump_out(&mut self) {
        for n in 0..self.nodes.len() {
            loop {
                let out = match &mut self.nodes[n] {
                    Node::Router(r) => r.poll_transmit(),
                    Node::Leaf(x) => x.leaf.poll_transmit(),
                };
                let Some((id, frame)) = out else { break };
                let Some(&(l, side)) = self.by_end.get(&(n, id)) else {
                    continue; // a link that went down
                };
                if let Frame::Data(d) = &frame {
                    *self
                        .data_copies
                        .entry((l, side, d.datagram.clone()))
                        .or_default() += 1;
                }
                let bytes = frame.to_bytes().expect("frames the nodes make encode");
                self.links[l].queues[side].push_back(bytes);
            }
        }
    }

    /// Delivers one frame from a random non-empty queue; false if all are empty.
    pub fn step(&mut self) -> bool {
        self.pump_out();
        let busy: Vec<(usize, usize)> = (0..self.links.len())
            .flat_map(|l| (0..2).map(move |s| (l, s)))
            .filter(|&(l, s)| !self.links[l].queues[s].is_empty())
            .collect();
        if busy.is_empty() {
            return false;
        }
        let (l, side) = busy[self.rng.below(busy.len())];
        let bytes = self.links[l].queues[side].pop_front().expect("busy");
        let frame = Frame::parse(bytes).expect("frames parse");
        let to = self.links[l].ends[1 - side];
        self.delivered += 1;
        if self.recent.len() >= 40 {
            self.recent.pop_front();
        }
        let from = self.links[l].ends[side].node;
        self.recent
            .push_back(format!("{from}->{}: {frame:?}", to.node));
        let now = self.now;
        match &mut self.nodes[to.node] {
            Node::Router(r) => {
                if let Err(e) = r.handle_frame(now, to.id, frame) {
                    self.errors.push(format!("router {}: {e}", to.node));
                }
            }
            Node::Leaf(x) => match x.leaf.handle_frame(to.id, frame) {
                Ok(Some(d)) => x.inbox.push(d),
                Ok(None) => {}
                Err(e) => self.errors.push(format!("leaf {}: {e}", to.node)),
            },
        }
        true
    }

    /// Delivers up to `n` frames.
    pub fn run(&mut self, n: usize) {
        for _ in 0..n {
            if !self.step() {
                break;
            }
        }
    }

    /// Delivers until nothing is in flight; panics past `limit` frames (a loop).
    pub fn settle(&mut self, limit: u64) -> u64 {
        let start = self.delivered;
        while self.step() {
            assert!(
                self.delivered - start <= limit,
                "network did not settle within {limit} frames: a loop? last frames:\n{}",
                self.recent.iter().cloned().collect::<Vec<_>>().join("\n")
            );
        }
        assert!(self.errors.is_empty(), "protocol errors: {:?}", self.errors);
        self.delivered - start
    }

    /// Advances virtual time and fires every timer due.
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
        let now = self.now;
        for n in &mut self.nodes {
            if let Node::Router(r) = n
                && r.poll_timeout().is_some_and(|t| t <= now)
            {
                r.handle_timeout(now);
            }
        }
    }

    /// Leaf `i` sends one DATA of `key` carrying `payload`.
    pub fn send_data(&mut self, i: usize, key: RouteKey, payload: &[u8]) {
        let x = self.l(i);
        let f = x
            .leaf
            .data(key, x.participant, Bytes::copy_from_slice(payload));
        self.send_from_leaf(i, f);
    }

    /// Leaf `i` sends one UNICAST to participant `dst`.
    pub fn send_unicast(&mut self, i: usize, dst: ParticipantId, payload: &[u8]) {
        let x = self.l(i);
        let f = x.leaf.unicast(
            dst,
            x.participant,
            RouteKey::default(),
            Bytes::copy_from_slice(payload),
        );
        self.send_from_leaf(i, f);
    }

    /// Leaf `i` sends one ANNOUNCE.
    pub fn send_announce(&mut self, i: usize, payload: &[u8]) {
        let x = self.l(i);
        let f = x
            .leaf
            .announce(x.participant, Bytes::copy_from_slice(payload));
        self.send_from_leaf(i, f);
    }

    fn send_from_leaf(&mut self, i: usize, f: Frame) {
        self.pump_out();
        let ids: Vec<LinkId> = self.l(i).leaf.links().to_vec();
        for id in ids {
            if let Some(&(l, side)) = self.by_end.get(&(i, id)) {
                if let Frame::Data(d) = &f {
                    *self
                        .data_copies
                        .entry((l, side, d.datagram.clone()))
                        .or_default() += 1;
                }
                self.links[l].queues[side].push_back(f.to_bytes().unwrap());
            }
        }
    }

    /// How many deliveries of `payload` leaf `i` has had (DATA, UNICAST or ANNOUNCE).
    pub fn received(&mut self, i: usize, payload: &[u8]) -> usize {
        self.l(i)
            .inbox
            .iter()
            .filter(|d| match d {
                Delivery::Data { datagram, .. }
                | Delivery::Unicast { datagram, .. }
                | Delivery::Announce { datagram, .. } => &datagram[..] == payload,
                _ => false,
            })
            .count()
    }

    /// The most DATA copies of `payload` any link carried in one direction.
    pub fn max_copies(&self, payload: &[u8]) -> u32 {
        self.data_copies
            .iter()
            .filter(|((_, _, d), _)| &d[..] == payload)
            .map(|(_, &n)| n)
            .max()
            .unwrap_or(0)
    }

    /// Whether leaves `a` and `b` are connected through up links and routers (a leaf
    /// forwards nothing, so it is a path's end only).
    pub fn path(&self, a: usize, b: usize) -> bool {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack = vec![a];
        seen[a] = true;
        while let Some(x) = stack.pop() {
            if x == b {
                return true;
            }
            if x != a && !self.is_router(x) {
                continue;
            }
            for link in self.links.iter().filter(|l| l.up) {
                let [e0, e1] = link.ends;
                let next = if e0.node == x {
                    e1.node
                } else if e1.node == x {
                    e0.node
                } else {
                    continue;
                };
                if !seen[next] {
                    seen[next] = true;
                    stack.push(next);
                }
            }
        }
        false
    }

    pub fn role(&self, i: usize) -> Role {
        if self.is_router(i) {
            Role::Router
        } else {
            Role::Session
        }
    }
}

pub fn key(b: u8) -> RouteKey {
    RouteKey([b; 32])
}
