//! Times ADVERTISE and SUBSCRIBE at 10,000, 100,000 and 1,000,000 routes and measures the
//! routing table's memory per route: the shape of the 004 paper's RIB experiment (publish
//! 4 ms and subscribe 2 ms at 10,000 records) and of issue 19's bars (≤ 10 µs each and
//! ≤ 200 B a route at 1,000,000). `tether bench rib` can call the same steps.
//!
//! ```text
//! cargo run --release -p tether-routing --example rib            # 10k, 100k, 1M
//! cargo run --release -p tether-routing --example rib -- 10000   # one size
//! ```
//!
//! One router with a router neighbour (node 2) and a session (node 100). The table is
//! filled with `n` routes learnt from the neighbour (a transit router's typical route: one
//! origin, no subscriber). Then, timed one by one and averaged over 10,000 operations:
//! - advertise: the session advertises a new key (the router becomes an origin and floods
//!   one ADVERTISE to its neighbour);
//! - subscribe: the session subscribes to a key of the table (the router subscribes toward
//!   the origin: one SUBSCRIBE out).
//!
//! Each operation includes draining `poll_transmit`. Memory is what the global allocator
//! holds after the fill, less what it held before, divided by `n`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tether_routing::frame::{Advertise, HostRoute, LinkState};
use tether_routing::{Config, Frame, LinkId, NodeId, ParticipantId, Role, RouteKey, Router};

/// Counts the bytes live on the heap.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller upholds `dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const NEIGHBOUR: LinkId = LinkId(1);
const SESSION: LinkId = LinkId(2);
const OPS: usize = 10_000;

/// A key from a counter, spread like a hash (routing keys are HMAC outputs).
fn key(i: u64, salt: u64) -> RouteKey {
    let mut k = [0u8; 32];
    let mut x = i.wrapping_add(salt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for chunk in k.chunks_mut(8) {
        x ^= x >> 31;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    RouteKey(k)
}

fn drain(r: &mut Router) {
    while r.poll_transmit().is_some() {}
}

fn run(n: usize) {
    let t = Instant::now();
    let mut config = Config::new(NodeId(1), 0);
    config.max_routes(n + 2 * OPS);
    let mut r = Router::new(config);
    r.link_up(t, NEIGHBOUR, Role::Router, NodeId(2)).unwrap();
    r.handle_frame(
        t,
        NEIGHBOUR,
        Frame::LinkState(LinkState::new(NodeId(2), 1, &[NodeId(1)])),
    )
    .unwrap();
    r.link_up(t, SESSION, Role::Session, NodeId(100)).unwrap();
    r.handle_frame(
        t,
        SESSION,
        Frame::Participant(HostRoute {
            participant: ParticipantId(1000),
            origin: NodeId(100),
            seq: 1,
        }),
    )
    .unwrap();
    drain(&mut r);

    let before = LIVE.load(Ordering::Relaxed);
    let fill = Instant::now();
    for i in 0..n as u64 {
        let f = Frame::Advertise(Advertise {
            key: key(i, 0),
            origin: NodeId(2),
            seq: 1,
            hops: 0,
        });
        r.handle_frame(t, NEIGHBOUR, f).unwrap();
        drain(&mut r);
    }
    let fill = fill.elapsed();
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(r.rib_len(), n);

    let mut adv = Duration::ZERO;
    for i in 0..OPS as u64 {
        let f = Frame::Advertise(Advertise {
            key: key(i, 1 << 40),
            origin: NodeId(100),
            seq: 1,
            hops: 0,
        });
        let s = Instant::now();
        r.handle_frame(t, SESSION, f).unwrap();
        drain(&mut r);
        adv += s.elapsed();
    }
    let mut sub = Duration::ZERO;
    let stride = (n / OPS).max(1) as u64;
    for i in 0..OPS as u64 {
        let f = Frame::Subscribe(key((i * stride) % n as u64, 0));
        let s = Instant::now();
        r.handle_frame(t, SESSION, f).unwrap();
        drain(&mut r);
        sub += s.elapsed();
    }
    assert!(r.stats().drops.total() == 0, "{:?}", r.stats().drops);
    println!(
        "{n:>9} routes: advertise {:>6.2} µs, subscribe {:>6.2} µs, fill {:>6.2} µs/route; \
         memory {:>6.1} B/route (heap), table {:>6.1} B/route",
        adv.as_secs_f64() * 1e6 / OPS as f64,
        sub.as_secs_f64() * 1e6 / OPS as f64,
        fill.as_secs_f64() * 1e6 / n as f64,
        bytes as f64 / n as f64,
        r.rib_heap_bytes() as f64 / r.rib_len() as f64,
    );
}

fn main() {
    let sizes: Vec<usize> = match std::env::args().nth(1) {
        Some(n) => vec![n.parse().expect("a number of routes")],
        None => vec![10_000, 100_000, 1_000_000],
    };
    for n in sizes {
        run(n);
    }
}
