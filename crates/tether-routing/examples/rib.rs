//! Times ADVERTISE and SUBSCRIBE at 10,000, 100,000 and 1,000,000 routes and measures the
//! routing table's memory per route: the shape of the 004 paper's RIB experiment (publish
//! 4 ms and subscribe 2 ms at 10,000 records) and of issue 19's bars (≤ 10 µs each and
//! ≤ 200 B a route at 1,000,000). `tether bench rib` times the same steps.
//!
//! ```text
//! cargo run --release -p tether-routing --example rib            # 10k, 100k, 1M
//! cargo run --release -p tether-routing --example rib -- 10000   # one size
//! ```
//!
//! The set-up and the two operations are `tether_routing::bench::RibFixture`'s: a router
//! whose table holds `n` routes learnt from a router neighbour, then a session advertising
//! new keys and subscribing to keys of the table, timed one by one and averaged over 10,000
//! operations each. Memory is what the global allocator holds after the fill, less what it
//! held before, divided by `n`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tether_routing::bench::RibFixture;

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

const OPS: usize = 10_000;

fn run(n: usize) {
    let mut f = RibFixture::new(Instant::now(), n, 2 * OPS);
    let before = LIVE.load(Ordering::Relaxed);
    let fill = Instant::now();
    f.fill();
    let fill = fill.elapsed();
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(f.router().rib_len(), n);

    let mut adv = Duration::ZERO;
    for _ in 0..OPS {
        let s = Instant::now();
        f.advertise_next();
        adv += s.elapsed();
    }
    let mut sub = Duration::ZERO;
    let stride = (n / OPS).max(1) as u64;
    for _ in 0..OPS {
        let s = Instant::now();
        f.subscribe_next(stride);
        sub += s.elapsed();
    }
    let r = f.router();
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
