//! The shape of the 004 paper's RIB experiment, shared by `examples/rib.rs` and
//! `tether bench rib`: one router with a router neighbour (node 2) and a session (node 100),
//! its table filled with `n` routes learnt from the neighbour (a transit router's typical
//! route: one origin, no subscriber), and the two operations the paper times:
//!
//! - advertise ([`RibFixture::advertise_next`]): the session advertises a new key (the router
//!   becomes an origin and floods one ADVERTISE to its neighbour);
//! - subscribe ([`RibFixture::subscribe_next`]): the session subscribes to a key of the table
//!   (the router subscribes toward the origin: one SUBSCRIBE out).
//!
//! Each operation includes draining `poll_transmit`. Like the rest of the crate this reads no
//! clock: the caller times the operations (one by one, or in batches) and gives `now`.

use std::time::Instant;

use crate::frame::{Advertise, HostRoute, LinkState};
use crate::{Config, Frame, LinkId, NodeId, ParticipantId, Role, RouteKey, Router};

const NEIGHBOUR: LinkId = LinkId(1);
const SESSION: LinkId = LinkId(2);
/// The salt of the keys the session advertises (never one of the fill's).
const SESSION_SALT: u64 = 1 << 40;

/// A key from a counter, spread like a hash (routing keys are HMAC outputs).
pub fn key(i: u64, salt: u64) -> RouteKey {
    let mut k = [0u8; 32];
    let mut x = i.wrapping_add(salt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for chunk in k.chunks_mut(8) {
        x ^= x >> 31;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    RouteKey(k)
}

/// A router set up for the RIB experiment (see the module's documentation).
pub struct RibFixture {
    router: Router,
    now: Instant,
    n: usize,
    advertised: u64,
    subscribed: u64,
}

impl RibFixture {
    /// A router with its neighbour and session linked, its table empty, room for `n` routes
    /// and `spare` more (the keys the session will advertise).
    pub fn new(now: Instant, n: usize, spare: usize) -> RibFixture {
        let mut config = Config::new(NodeId(1), 0);
        config.max_routes(n + spare);
        let mut r = Router::new(config);
        r.link_up(now, NEIGHBOUR, Role::Router, NodeId(2))
            .expect("a first link");
        r.handle_frame(
            now,
            NEIGHBOUR,
            Frame::LinkState(LinkState::new(NodeId(2), 1, &[NodeId(1)])),
        )
        .expect("the neighbour's link state");
        r.link_up(now, SESSION, Role::Session, NodeId(100))
            .expect("a second link");
        r.handle_frame(
            now,
            SESSION,
            Frame::Participant(HostRoute {
                participant: ParticipantId(1000),
                origin: NodeId(100),
                seq: 1,
            }),
        )
        .expect("the session's participant");
        drain(&mut r);
        RibFixture {
            router: r,
            now,
            n,
            advertised: 0,
            subscribed: 0,
        }
    }

    /// Fills the table with its `n` routes, learnt from the neighbour.
    pub fn fill(&mut self) {
        for i in 0..self.n as u64 {
            let f = Frame::Advertise(Advertise {
                key: key(i, 0),
                origin: NodeId(2),
                seq: 1,
                hops: 0,
            });
            self.router
                .handle_frame(self.now, NEIGHBOUR, f)
                .expect("a fill advertisement");
            drain(&mut self.router);
        }
    }

    /// The session advertises a key never seen before.
    pub fn advertise_next(&mut self) {
        let f = Frame::Advertise(Advertise {
            key: key(self.advertised, SESSION_SALT),
            origin: NodeId(100),
            seq: 1,
            hops: 0,
        });
        self.advertised += 1;
        let _ = self.router.handle_frame(self.now, SESSION, f);
        drain(&mut self.router);
    }

    /// The session subscribes to the next key of the table, spread over the table by
    /// `stride` (e.g. `n / operations`), wrapping around.
    pub fn subscribe_next(&mut self, stride: u64) {
        let n = self.n.max(1) as u64;
        // Each pass over the table starts one key later, so keys repeat only after n.
        let s = self.subscribed * stride.max(1);
        let i = (s + s / n) % n;
        self.subscribed += 1;
        let _ = self
            .router
            .handle_frame(self.now, SESSION, Frame::Subscribe(key(i, 0)));
        drain(&mut self.router);
    }

    /// The router.
    pub fn router(&self) -> &Router {
        &self.router
    }
}

fn drain(r: &mut Router) {
    while r.poll_transmit().is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filled table holds its routes, each operation adds one route or subscribes without
    /// a drop, and the heap per route is counted.
    #[test]
    fn the_fixture_fills_advertises_and_subscribes() {
        let mut f = RibFixture::new(Instant::now(), 1000, 10);
        f.fill();
        assert_eq!(f.router().rib_len(), 1000);
        for _ in 0..10 {
            f.advertise_next();
            f.subscribe_next(100);
        }
        assert_eq!(f.router().rib_len(), 1010);
        assert_eq!(f.router().stats().drops.total(), 0);
        assert!(f.router().rib_heap_bytes() > 0);
    }
}
