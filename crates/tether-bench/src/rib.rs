//! `tether bench rib`: the 004 paper's routing-table experiment and its start-up time.
//!
//! - Advertise and subscribe at each table size, in process and without I/O: the sans-IO
//!   router of `tether-routing` set up as `tether_routing::bench::RibFixture` (a table of
//!   `n` routes learnt from a router neighbour; a session advertising new keys and
//!   subscribing to keys of the table). Each batch of operations is timed as a whole; the
//!   figure is the median over the batches of the mean per operation. Memory per route is
//!   the table's heap (`Router::rib_heap_bytes`) over its routes, with this process's
//!   resident-set growth over the fill beside it.
//! - Start to first message: a `tether router` process and a publisher behind it (a peer
//!   process, `tether bench-peer ticker`, publishing every millisecond, transient-local); then,
//!   in this process, `Session::open` with `[routers]` (discovery off) to the first sample of
//!   a new subscriber, each time with a new session. Security on (a throwaway realm).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use serde_json::{Value, json};
use tether::{Config, Qos, Session};
use tether_routing::bench::RibFixture;

use crate::harness::cpu::rss_bytes;
use crate::harness::process::read_line;
use crate::harness::realm::plain_config;
use crate::harness::routers::{self, RouterProc};
use crate::harness::stats::{median, quantile};
use crate::harness::{Peer, machine, secure_bench_cfg};

/// The ticker's topic.
pub(crate) const TICK: &str = "/bench/tick";

/// The 004 paper's figures: a RIB of 10,000 records, publish (advertise) and subscribe, and
/// program start to first message, in ms.
const PAPER_ADVERTISE_MS: f64 = 4.0;
const PAPER_SUBSCRIBE_MS: f64 = 2.0;
const PAPER_FIRST_MESSAGE_MS: f64 = 2.4;

/// `tether bench rib`.
#[derive(Args, Debug, Clone)]
pub(crate) struct RibArgs {
    /// Table sizes (routes).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    routes: Vec<usize>,
    /// Operations per timed batch.
    #[arg(long, default_value_t = 2000)]
    ops: usize,
    /// Timed batches of each operation per size (the median is reported).
    #[arg(long, default_value_t = 9)]
    batches: usize,
    /// Sessions opened for start to first message through a router (0: not measured);
    /// as many `tether echo` processes are started after them, at most 10.
    #[arg(long, default_value_t = 20)]
    starts: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// One table size's figures.
struct Size {
    routes: usize,
    advertise_us: f64,
    subscribe_us: f64,
    fill_us: f64,
    heap_per_route: f64,
    rss_per_route: Option<f64>,
}

/// Start to first message through a router, in ms.
struct Starts {
    open_p50: f64,
    /// When the session's router link was first up (polled every 100 µs).
    linked_p50: f64,
    /// When the subscriber first reported a match (polled every 100 µs).
    matched_p50: f64,
    first_p50: f64,
    first_p90: f64,
    first_max: f64,
    n: usize,
    /// A new `tether echo` process, from its spawn to the first sample it prints, in ms
    /// (what a user who runs a command waits): p50 and max.
    process_p50: f64,
    process_max: f64,
    processes: usize,
}

pub(crate) fn run(cfg: Config, a: RibArgs) -> anyhow::Result<()> {
    if a.ops == 0 || a.batches == 0 {
        anyhow::bail!("--ops and --batches must be at least 1");
    }
    let sizes: Vec<Size> = a
        .routes
        .iter()
        .map(|&n| rib_size(n, a.ops, a.batches))
        .collect();
    let starts = match a.starts {
        0 => None,
        n => Some(start_to_first(&cfg, n)?),
    };
    let machine = machine();
    if a.json {
        let v: Vec<Value> = sizes
            .iter()
            .map(|s| {
                json!({
                    "routes": s.routes, "advertise_us": s.advertise_us,
                    "subscribe_us": s.subscribe_us, "fill_us_per_route": s.fill_us,
                    "heap_bytes_per_route": s.heap_per_route,
                    "rss_bytes_per_route": s.rss_per_route,
                })
            })
            .collect();
        let st = starts.as_ref().map(|s| {
            json!({
                "sessions": s.n, "open_p50_ms": s.open_p50, "linked_p50_ms": s.linked_p50,
                "matched_p50_ms": s.matched_p50,
                "first_message_p50_ms": s.first_p50, "first_message_p90_ms": s.first_p90,
                "first_message_max_ms": s.first_max,
                "processes": s.processes, "process_first_message_p50_ms": s.process_p50,
                "process_first_message_max_ms": s.process_max,
            })
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "bench": "rib", "machine": machine, "ops_per_batch": a.ops,
                "batches": a.batches, "results": v, "start_to_first_message": st,
                "paper": {
                    "routes": 10_000, "advertise_ms": PAPER_ADVERTISE_MS,
                    "subscribe_ms": PAPER_SUBSCRIBE_MS,
                    "start_to_first_message_ms": PAPER_FIRST_MESSAGE_MS,
                },
            }))?
        );
        return Ok(());
    }
    println!(
        "tether bench rib — sans-IO router in process, median of {} batches of {} operations, \
         {machine}",
        a.batches, a.ops
    );
    println!(
        "paper (004, 10,000 records): advertise {PAPER_ADVERTISE_MS} ms, subscribe \
         {PAPER_SUBSCRIBE_MS} ms; bars: ≤ 10 µs each and ≤ 200 B/route at 1,000,000"
    );
    println!(
        "{:>9} {:>13} {:>13} {:>13} {:>13} {:>13} {:>13}",
        "routes", "advertise", "×paper", "subscribe", "×paper", "heap B/route", "RSS B/route"
    );
    for s in &sizes {
        let rss = s
            .rss_per_route
            .map_or_else(|| "-".to_string(), |r| format!("{r:.0}"));
        println!(
            "{:>9} {:>11.2}µs {:>13.5} {:>11.2}µs {:>13.5} {:>13.0} {:>13}",
            s.routes,
            s.advertise_us,
            s.advertise_us / (PAPER_ADVERTISE_MS * 1e3),
            s.subscribe_us,
            s.subscribe_us / (PAPER_SUBSCRIBE_MS * 1e3),
            s.heap_per_route,
            rss
        );
    }
    if let Some(s) = starts {
        println!(
            "start to first message through one router (loopback, security on, {} sessions): \
             p50 {:.2} ms (Session::open returned at {:.2} ms, router link up at {:.2} ms, matched at {:.2} ms), p90 {:.2} \
             ms, max {:.2} ms; paper {PAPER_FIRST_MESSAGE_MS} ms, bar ≤ 2 ms",
            s.n, s.first_p50, s.open_p50, s.linked_p50, s.matched_p50, s.first_p90, s.first_max
        );
        println!(
            "the same as a user runs it: a new `tether echo` process through the router \
             (security on), from its spawn to the first sample it prints ({} processes): p50 \
             {:.2} ms, max {:.2} ms",
            s.processes, s.process_p50, s.process_max
        );
    }
    Ok(())
}

/// Advertise and subscribe at `n` routes: `batches` batches of `ops` operations each.
fn rib_size(n: usize, ops: usize, batches: usize) -> Size {
    trim_heap();
    let rss0 = rss_bytes();
    let mut f = RibFixture::new(Instant::now(), n, ops * batches);
    let t = Instant::now();
    f.fill();
    let fill_us = t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
    let rss1 = rss_bytes();
    let heap_per_route = f.router().rib_heap_bytes() as f64 / f.router().rib_len().max(1) as f64;
    let rss_per_route = match (rss0, rss1) {
        (Some(a), Some(b)) if n > 0 => Some(b.saturating_sub(a) as f64 / n as f64),
        _ => None,
    };
    let stride = (n / (ops * batches)).max(1) as u64;
    let (mut adv, mut sub) = (Vec::new(), Vec::new());
    // Advertise and subscribe batches alternate, so both see the same machine.
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..ops {
            f.advertise_next();
        }
        adv.push(t.elapsed().as_secs_f64() * 1e6 / ops as f64);
        let t = Instant::now();
        for _ in 0..ops {
            f.subscribe_next(stride);
        }
        sub.push(t.elapsed().as_secs_f64() * 1e6 / ops as f64);
    }
    drop(f);
    trim_heap();
    Size {
        routes: n,
        advertise_us: median(&mut adv).unwrap_or(0.0),
        subscribe_us: median(&mut sub).unwrap_or(0.0),
        fill_us,
        heap_per_route,
        rss_per_route,
    }
}

/// Gives freed heap back to the system, so the next size's resident-set growth is its own.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of glibc's allocator.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Start to first message through a router, `n` times (after one unmeasured start).
fn start_to_first(cfg: &Config, n: usize) -> anyhow::Result<Starts> {
    let side = routers::realm(&["/bench/**"])?;
    let bc = secure_bench_cfg(&plain_config(cfg), &side)?;
    let dir = side.realm_dir().context("realm directory")?;
    let router = RouterProc::spawn(dir, "cloud", bc.domain(), &[])?;
    let addr = [router.address()];
    let bc = bc.via_routers(&addr, &addr);
    let mut ticker = Peer::spawn(&bc, "ticker", false, None)?;
    anyhow::ensure!(ticker.line()? == "ready", "the ticker did not start");
    let t = sessions_to_first(&bc.base, n)?;
    // The same through a process of its own: what running `tether echo` costs before its
    // session opens (exec, loading its keys, the crypto library's first random numbers).
    let processes = n.clamp(1, 10);
    let keys = bc.base.security.keys.clone().context("the member's keys")?;
    let mut spawned = Vec::new();
    for i in 0..=processes {
        let t0 = Instant::now();
        // The ticker's QoS, given: echo need not wait to see what the publishers offer.
        let args: Vec<String> = [
            TICK,
            "--count",
            "1",
            "--timeout",
            "30",
            "--discovery",
            "off",
            "--reliable",
            "--transient-local",
            "--quiet",
            "--domain",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([
            bc.domain().to_string(),
            "--keys".into(),
            keys.display().to_string(),
        ])
        .chain(["--router".into(), addr[0].clone()])
        .collect();
        let mut echo = Peer::spawn_with(None, "echo", &args)?;
        let got = echo.line();
        let at = t0.elapsed();
        let status = echo.wait()?;
        if got.is_err() || !status.success() {
            bail!("tether echo printed no sample through the router ({status})");
        }
        if i > 0 {
            spawned.push(at.as_nanos() as u64);
        }
    }
    spawned.sort_unstable();
    drop(ticker);
    drop(router);
    let ms = |v: &[u64], q: f64| quantile(v, q).unwrap_or(0) as f64 / 1e6;
    Ok(Starts {
        open_p50: t.ms(&t.open, 0.5),
        linked_p50: t.ms(&t.linked, 0.5),
        matched_p50: t.ms(&t.matched, 0.5),
        first_p50: t.ms(&t.first, 0.5),
        first_p90: t.ms(&t.first, 0.9),
        first_max: t.ms(&t.first, 1.0),
        n,
        process_p50: ms(&spawned, 0.5),
        process_max: ms(&spawned, 1.0),
        processes,
    })
}

/// Times of `n` sessions, each opened with `cfg` (its routers configured, a ticker behind
/// them), from `Session::open` to the first sample of a new subscriber of the ticker's
/// topic, in ns, sorted; after one unmeasured start.
pub(crate) struct StartTimes {
    /// When `Session::open` returned.
    pub(crate) open: Vec<u64>,
    /// When the session's router link was first up (polled every 100 µs).
    pub(crate) linked: Vec<u64>,
    /// When the subscriber first reported a match (polled every 100 µs).
    pub(crate) matched: Vec<u64>,
    /// When the first sample came.
    pub(crate) first: Vec<u64>,
}

impl StartTimes {
    /// Quantile `q` of `v`, in ms.
    pub(crate) fn ms(&self, v: &[u64], q: f64) -> f64 {
        quantile(v, q).unwrap_or(0) as f64 / 1e6
    }
}

/// See [`StartTimes`]. Sessions opened from a thread in a network namespace live there.
pub(crate) fn sessions_to_first(cfg: &Config, n: usize) -> anyhow::Result<StartTimes> {
    let (mut open, mut linked, mut matched, mut first) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..=n {
        let (tx, rx) = mpsc::sync_channel::<()>(1);
        let t0 = Instant::now();
        let session = Session::open(cfg.clone())?;
        let opened = t0.elapsed();
        let qos = Qos::default().transient_local().keep_last(1);
        let sub = session.subscriber_with_callback(TICK, qos, move |_s| {
            let _ = tx.try_send(());
        })?;
        let (mut linked_at, mut matched_at) = (None, None);
        let got = loop {
            match rx.recv_timeout(Duration::from_micros(100)) {
                Ok(()) => break t0.elapsed(),
                Err(mpsc::RecvTimeoutError::Timeout) if t0.elapsed() < Duration::from_secs(30) => {
                    if linked_at.is_none() && session.stats().router_connects > 0 {
                        linked_at = Some(t0.elapsed());
                    }
                    if matched_at.is_none() && sub.matched() > 0 {
                        matched_at = Some(t0.elapsed());
                    }
                }
                Err(_) => bail!("no sample from the publisher behind the router within 30 s"),
            }
        };
        if i > 0 {
            open.push(opened.as_nanos() as u64);
            linked.push(linked_at.or(matched_at).unwrap_or(got).as_nanos() as u64);
            matched.push(matched_at.unwrap_or(got).as_nanos() as u64);
            first.push(got.as_nanos() as u64);
        }
        drop(sub);
        drop(session);
    }
    for v in [&mut open, &mut linked, &mut matched, &mut first] {
        v.sort_unstable();
    }
    Ok(StartTimes {
        open,
        linked,
        matched,
        first,
    })
}

/// `tether bench-peer ticker`: publishes a 64-byte sample on the ticker topic every
/// millisecond (reliable, transient-local, keep last 1); says `ready` once it publishes,
/// then runs until its stdin closes.
pub(crate) fn ticker(cfg: Config) -> anyhow::Result<()> {
    let session = Session::open(cfg)?;
    let p = session.publisher(TICK, Qos::default().transient_local().keep_last(1))?;
    let payload = Bytes::from(vec![0x7au8; 64]);
    p.put(payload.clone())?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let t = std::thread::spawn(move || -> anyhow::Result<()> {
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            p.put(payload.clone())?;
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    });
    crate::harness::process::say("ready")?;
    while read_line()?.is_some() {}
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    t.join().map_err(|_| anyhow::anyhow!("ticker thread"))??;
    drop(session);
    Ok(())
}
