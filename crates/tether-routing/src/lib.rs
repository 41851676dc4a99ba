//! tether-routing: the logic of tether's routers, **sans-IO**.
//!
//! Sessions on different sites meet through routers linked by QUIC. Routers route on 256-bit
//! routing keys (topic ids) only: they never see a topic name and cannot open a sample; the
//! engine's datagrams pass through them untouched. This crate holds everything a router
//! decides, and the small part a session runs on its side of a link:
//!
//! - [`frame`]: the link frames and their codec, and a [`Decoder`] that cuts a stream into
//!   frames (`docs/wire.md`, "Router links").
//! - [`Router`]: the routing information base (key → origins, subscribed links), flooding with
//!   loop suppression, the subscription tree, withdrawals, queries, host routes for unicast,
//!   and forwarding with one copy per link.
//! - [`Leaf`]: what a session advertised, subscribed and announced, sent again on every link
//!   up so that a restarted router gets every route back.
//!
//! It contains no networking code, reads no clock and spawns no thread: time is an input
//! (`now`), frames come in through `handle_*` and go out through `poll_transmit`. The same
//! inputs give the same outputs, which is what the simulator in `tests/` relies on.
//!
//! # How routes are found
//!
//! Routers flood two kinds of state, each stamped by its origin with a sequence number (newer
//! wins, older or equal is dropped without forwarding, so a flood crosses each link at most
//! once per change and ends even on a graph with cycles):
//!
//! - LINK_STATE: a router's neighbours. Every router keeps every router's list and so knows
//!   the whole router graph (an edge counts only if both ends list it, so a stale list cannot
//!   invent a link). From it, every router computes the *same* shortest-path tree rooted at
//!   each router (breadth first, ties to the lowest node id); its parent in origin O's tree is
//!   its next hop toward O and its children are where O's traffic goes next.
//! - ADVERTISE / WITHDRAW_ADVERTISE per (key, origin router) and PARTICIPANT /
//!   PARTICIPANT_GONE per (participant, origin router). A session's router is the origin of
//!   its publishers and participants: sessions are leaves, they tell their router and the
//!   router floods for them. A withdrawal leaves a tombstone (the origin and its sequence
//!   number) so a late copy of the advertisement it withdrew cannot bring the route back.
//!
//! Because next hops come from the graph and not from the path an advertisement took, a link
//! that fails does not invalidate any advertisement: the routers at its ends flood a new
//! LINK_STATE, every router recomputes its trees, and subscriptions move to the new tree
//! (routes heal on a ring; with no path left, nothing is subscribed and nothing is sent).
//! Words older than the one held are answered with the one held, and two words under one
//! sequence number (a restarted router reused it) are ordered, so all routers keep the same.
//!
//! A key's traffic follows one tree: the tree rooted at its lowest-id reachable origin, which
//! every router of a component picks alike. A router subscribes toward each of the key's
//! origins along that tree (and to the local publisher sessions, for its own origin) exactly
//! while some other link is subscribed to it, whatever the number of subscribers behind that
//! link. On a tree, every subscription rests on one from farther away and in the end on a
//! subscriber session, so subscriptions cannot hold each other up around a cycle once the
//! subscribers are gone (with a tree per origin they could: the property test found it). A
//! router accepts DATA only over an edge of the key's tree and forwards one copy to each
//! subscribed session link and each subscribed tree neighbour, never back. Once the routers
//! agree on the graph, every subscriber connected to a publisher gets each datagram exactly
//! once and no datagram loops; while they do not yet agree, a `hops` limit in DATA, UNICAST
//! and ANNOUNCE ends any loop. ANNOUNCE (discovery) and UNICAST follow the origin's own tree
//! (the sender's router, and the destination's), without subscriptions.
//!
//! A router that gets a SUBSCRIBE for a key it knows no publisher of QUERYs its router
//! neighbours, which answer with the advertisements they hold; the subscription goes up as
//! soon as one arrives. A router restarted with its state lost learns its own old sequence
//! numbers back from its neighbours and re-originates above them (as OSPF does).
//!
//! Non-goals: no I/O, no timers of its own, no authentication (links are mutually
//! authenticated TLS below this crate, and samples are sealed end to end above it), no
//! per-link flow control (a driver paces what `poll_transmit` gives).

#![forbid(unsafe_code)]

pub mod bench;
pub mod frame;
mod leaf;
mod rib;
mod router;
mod topology;

use core::fmt;

pub use frame::{Decoder, Frame, FrameError, FrameType};
pub use leaf::{Delivery, Leaf};
pub use router::{
    Config, DropReason, Drops, LinkError, MAX_PARTICIPANTS_PER_SESSION, MAX_ROUTES_PER_SESSION,
    RouteSummary, Router, Stats,
};

/// Most router hops a DATA, UNICAST or ANNOUNCE may travel; a frame that has travelled this
/// many is dropped (a backstop for loops while routes converge, as IP's TTL).
pub const MAX_HOPS: u8 = 64;

/// A 256-bit routing key: a topic id (`docs/wire.md`, routing key), all a router knows of a
/// topic.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RouteKey(pub [u8; 32]);

impl fmt::Debug for RouteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The first 8 bytes are enough to tell keys apart in logs.
        write!(f, "RouteKey(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

/// A router's or a session's node id (non-zero on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u64);

/// A participant id (tether's 64-bit participant id; non-zero on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParticipantId(pub u64);

/// A link, named by the driver (for example a connection counter). Opaque to this crate; a
/// driver must not reuse a link id while it is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u32);

/// What the other end of a link is, from its HELLO (and its certificate's role).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Role {
    /// A session: a leaf that publishes, subscribes and announces participants.
    Session = 0,
    /// A router: floods, routes and forwards.
    Router = 1,
}
