//! A router in the simulator: what `tether-routing` and the driver's QUIC links do for
//! `tether-core`, reduced to what the engine sees (`tether_core::route`).
//!
//! Each attached node has a link to the router, with its own link number. The router
//! forwards, as a real one does, without opening anything:
//! - a datagram to a virtual unicast address (`virtual_addr(P, L)`) to P, which receives it
//!   from the sender's virtual address on P's own link (a UNICAST frame);
//! - a datagram to the sender's link group to every other attached node that has a reader
//!   whose route key is the key of the datagram's writer (`Transmit::writer`,
//!   `Participant::route_key`): one copy per link, whatever the number of readers there (a
//!   DATA frame down the subscription tree);
//! - a datagram to the announce address (the driver's discovery group) to every other
//!   attached node (an ANNOUNCE frame, flooded), besides what the LAN does with it.
//!
//! Nodes of different [`site`](crate::Node::site)s reach each other only this way. The
//! router's path has its own delay, jitter and frame loss ([`SimRouter::path`]), and may
//! have a bottleneck: a queue of its own in front of each node's link, dropping when full
//! ([`Link::bottleneck`]); a link
//! can go down and come back ([`Sim::router_link_down`], [`Sim::router_link_up`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_core::route::{self, DEFAULT_ROUTE_DATAGRAM};
use tether_core::{EndpointKind, EntityId, Transmit};

use crate::{Flight, Link, Sim};

/// The default announce address: a discovery multicast group whose datagrams the driver
/// also floods through its router links.
pub const ANNOUNCE: &str = "239.255.74.1:7400";

/// What kind of frame a routed datagram travelled as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// To one participant (its virtual address).
    Unicast,
    /// To a link's group, under a writer's route key.
    Data,
    /// To the announce address, flooded.
    Announce,
}

/// One datagram a node handed the router (before loss).
#[derive(Debug, Clone)]
pub struct Frame {
    /// The sending node.
    pub from: usize,
    /// Where the engine sent it.
    pub dest: SocketAddr,
    /// As what.
    pub kind: FrameKind,
    /// The writer it names ([`Transmit::writer`]).
    pub writer: Option<EntityId>,
    /// Whether it carries sample bytes (a DATA, DATA_FRAG or batch body).
    pub has_body: bool,
    /// Its length.
    pub len: usize,
    /// Nodes it was forwarded to (before loss).
    pub copies: usize,
}

/// One node's link to the router.
#[derive(Debug, Clone, Copy)]
pub struct Attachment {
    /// Its link number at that node.
    pub link: u16,
    /// False while the link is down: nothing crosses it either way.
    pub up: bool,
}

/// The router and what crossed it.
#[derive(Debug)]
pub struct SimRouter {
    /// Delay, jitter and loss of a frame from one node to another through the router.
    pub path: Link,
    /// The attached nodes.
    pub attached: BTreeMap<usize, Attachment>,
    /// The announce address ([`ANNOUNCE`]).
    pub announce: SocketAddr,
    /// Every datagram handed to the router, in order.
    pub log: Vec<Frame>,
    /// Datagrams to a link group that named no writer: a driver could not route them.
    pub untagged: u64,
    /// Datagrams for a participant or a link the router does not know, or over a link
    /// that is down.
    pub unroutable: u64,
    /// Frames the router path lost.
    pub lost: u64,
    /// With a bottleneck on the router's path ([`Link::rate`]): when the router's link to
    /// each node is free again. Frames wait in the router's queue for that link, in
    /// arrival order, as in a real router's; `queue` bytes at most.
    pub link_free_at: BTreeMap<usize, Instant>,
    /// Frames the router dropped because its queue for a link was full (a real router's
    /// `queue_full`): nobody is told.
    pub queue_drops: u64,
    /// Most bytes ever waiting in the router's queue for one link.
    pub max_queue: usize,
}

impl SimRouter {
    /// A router whose path is `path`.
    pub fn new(path: Link) -> SimRouter {
        SimRouter {
            path,
            attached: BTreeMap::new(),
            announce: ANNOUNCE.parse().expect("an address"),
            log: Vec::new(),
            untagged: 0,
            unroutable: 0,
            lost: 0,
            link_free_at: BTreeMap::new(),
            queue_drops: 0,
            max_queue: 0,
        }
    }

    /// Datagrams node `from` sent to its link group that carry sample bytes.
    pub fn data_frames_from(&self, from: usize) -> usize {
        self.log
            .iter()
            .filter(|f| f.from == from && f.kind == FrameKind::Data && f.has_body)
            .count()
    }

    /// Datagrams node `from` sent to virtual unicast addresses that carry sample bytes.
    pub fn unicast_data_from(&self, from: usize) -> usize {
        self.log
            .iter()
            .filter(|f| f.from == from && f.kind == FrameKind::Unicast && f.has_body)
            .count()
    }
}

impl Sim {
    /// Adds a router whose path is `path` (replacing any).
    pub fn add_router(&mut self, path: Link) {
        self.router = Some(SimRouter::new(path));
    }

    /// The router (panics without one).
    pub fn router(&self) -> &SimRouter {
        self.router.as_ref().expect("a router")
    }

    /// Links node `i` to the router as its link `link`: the engine is told
    /// (`add_route_link`) and announces through it.
    pub fn attach(&mut self, i: usize, link: u16) {
        let announce = {
            let r = self.router.as_mut().expect("a router");
            r.attached.insert(i, Attachment { link, up: true });
            r.announce
        };
        let p = self.p(i);
        p.add_route_link(link, DEFAULT_ROUTE_DATAGRAM);
        // As the session's driver does at each link up.
        p.route_link_reset(link);
        p.add_target(announce);
        self.pump(i);
    }

    /// Node `i`'s router link goes down (the driver lost its QUIC connection).
    pub fn router_link_down(&mut self, i: usize) {
        let r = self.router.as_mut().expect("a router");
        let a = r.attached.get_mut(&i).expect("attached");
        a.up = false;
        let link = a.link;
        self.p(i).remove_route_link(link);
        self.pump(i);
    }

    /// Node `i`'s router link is back, with the same number: as the session's driver
    /// does, what was queued for the link is taken as gone (`route_link_reset`) and the
    /// node announces itself through it at once.
    pub fn router_link_up(&mut self, i: usize) {
        let r = self.router.as_mut().expect("a router");
        let a = r.attached.get_mut(&i).expect("attached");
        a.up = true;
        let link = a.link;
        let announce = r.announce;
        let p = self.p(i);
        p.add_route_link(link, DEFAULT_ROUTE_DATAGRAM);
        p.route_link_reset(link);
        p.remove_target(announce);
        p.add_target(announce);
        self.pump(i);
    }

    /// Forwards what node `i` sends through the router. True if it was for the router
    /// alone (a virtual address); false for what the LAN handles too (or instead).
    pub(crate) fn route(&mut self, i: usize, t: &Transmit) -> bool {
        let Some(r) = self.router.as_ref() else {
            return false;
        };
        let kind = if route::is_routed(&t.dest) {
            FrameKind::Unicast
        } else if route::is_route_group(&t.dest) {
            FrameKind::Data
        } else if t.dest == r.announce {
            FrameKind::Announce
        } else {
            return false;
        };
        let me = self.nodes[i].participant.id();
        let Some(mine) = r.attached.get(&i).copied().filter(|a| a.up) else {
            let r = self.router.as_mut().expect("a router");
            r.unroutable += u64::from(kind != FrameKind::Announce);
            return kind != FrameKind::Announce;
        };
        // Where it goes: attached nodes (up), by what kind of frame it is.
        let to: Vec<usize> = match kind {
            FrameKind::Unicast => {
                let (dst, link) = route::routed_participant(&t.dest).expect("routed");
                r.attached
                    .iter()
                    .filter(|(k, a)| {
                        a.up && link == mine.link && self.nodes[**k].participant.id() == dst
                    })
                    .map(|(k, _)| *k)
                    .collect()
            }
            FrameKind::Data => {
                let key = t
                    .writer
                    .filter(|_| route::group_link(&t.dest) == Some(mine.link))
                    .and_then(|w| self.nodes[i].participant.route_key(w));
                match key {
                    None => Vec::new(),
                    Some(key) => r
                        .attached
                        .iter()
                        .filter(|(k, a)| {
                            **k != i
                                && a.up
                                && self.nodes[**k].participant.local_route_keys().iter().any(
                                    |(_, kind, k2)| *kind == EndpointKind::Reader && *k2 == key,
                                )
                        })
                        .map(|(k, _)| *k)
                        .collect(),
                }
            }
            FrameKind::Announce => r
                .attached
                .iter()
                .filter(|(k, a)| **k != i && a.up)
                .map(|(k, _)| *k)
                .collect(),
        };
        let path = r.path;
        let links: Vec<u16> = to.iter().map(|k| r.attached[k].link).collect();
        let r = self.router.as_mut().expect("a router");
        if kind == FrameKind::Data && t.writer.is_none() {
            r.untagged += 1;
        }
        if to.is_empty() && kind == FrameKind::Unicast {
            r.unroutable += 1;
        }
        r.log.push(Frame {
            from: i,
            dest: t.dest,
            kind,
            writer: t.writer,
            has_body: !t.body.is_empty(),
            len: t.len(),
            copies: to.len(),
        });
        let payload: Bytes = t.contiguous();
        for (k, link) in to.into_iter().zip(links) {
            if self.rng.chance(path.loss) {
                self.router.as_mut().expect("a router").lost += 1;
                continue;
            }
            // Through the router's queue for the node's link, when its path has a bottleneck.
            let mut departs = self.now;
            if let Some(rate) = path.rate {
                let r = self.router.as_mut().expect("a router");
                let free = r.link_free_at.entry(k).or_insert(self.now);
                let start = (*free).max(self.now);
                let queued = (start - self.now).as_secs_f64() * rate as f64;
                if queued as usize + payload.len() > path.queue.max(payload.len()) {
                    r.queue_drops += 1;
                    continue;
                }
                r.max_queue = r.max_queue.max(queued as usize + payload.len());
                *free = start + Duration::from_secs_f64(payload.len() as f64 / rate as f64);
                departs = *free;
            }
            let at = departs + path.delay + self.rng.upto(path.jitter);
            self.order += 1;
            self.flights.push(std::cmp::Reverse(Flight {
                at,
                order: self.order,
                to: k,
                from: route::virtual_addr(me, link),
                payload: payload.clone(),
            }));
        }
        kind != FrameKind::Announce
    }

    /// Whether node `i`'s link to the router is up (false when not attached).
    pub fn router_link_is_up(&self, i: usize) -> bool {
        self.router
            .as_ref()
            .and_then(|r| r.attached.get(&i))
            .is_some_and(|a| a.up)
    }
}
