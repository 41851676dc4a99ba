//! The far sides of `tether bench fanout`: one process holding every publisher's session,
//! one holding every subscriber's (`tether bench-fanout pub|sub`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use tether::{Config, Qos, Session};

use super::{Mode, topic};
use crate::harness::cpu::{pin, process_cpu_ns, thread_cpu_ns};
use crate::harness::process::{read_line, say};
use crate::harness::realm::member_config;
use crate::harness::stats::quantile;
use crate::harness::wall_ns;

/// `tether bench-fanout`: the settings of one run, as `tether bench fanout` passes them
/// to its children.
#[derive(Args, Debug, Clone)]
pub struct FanoutPeerArgs {
    /// `pub` or `sub`.
    role: String,
    /// Sessions in this process (publishers, or subscribers).
    #[arg(long)]
    count: usize,
    /// Publishers (topics).
    #[arg(long)]
    publishers: usize,
    #[arg(long, value_enum)]
    mode: Mode,
    /// The realm directory holding `pubI.key` and `subJ.key`.
    #[arg(long)]
    realm: PathBuf,
    #[arg(long)]
    domain: u16,
    /// Publishers' addresses (subscribers only).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<std::net::SocketAddr>,
    /// Subscribers each publisher waits for (publishers only).
    #[arg(long, default_value_t = 0)]
    subscribers: usize,
    #[arg(long, default_value_t = 100)]
    samples: usize,
    #[arg(long, default_value_t = 200)]
    period_ms: u64,
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Subscribers take data by multicast.
    #[arg(long)]
    multicast: bool,
    /// The address to listen on (default 127.0.0.1).
    #[arg(long, default_value = "127.0.0.1")]
    ip: std::net::Ipv4Addr,
    /// Pin the process to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
}

/// One session of the benchmark: no registry, loopback, the realm's keys unless plain.
fn session_config(
    base: &Config,
    a: &FanoutPeerArgs,
    keys: &str,
    peers: &[std::net::SocketAddr],
) -> Config {
    let mut c = base.clone();
    c.domain = a.domain;
    c.discovery.range = tether::DiscoveryRange::Off;
    c.discovery.peers = peers.to_vec();
    c.transport.listen = Some(std::net::SocketAddr::from((a.ip, 0)));
    // Subscribers take data on the group over the namespace's loopback; publishers need no
    // socket on it (they would receive every other publisher's samples).
    c.transport.multicast_data = a.multicast && a.role == "sub";
    c.discovery.interface = a.ip.to_string();
    if a.mode == Mode::Plain {
        return c;
    }
    let mut c = member_config(&c, &a.realm.join(format!("{keys}.key")));
    c.security.pairwise = a.mode == Mode::Pairwise;
    c
}

/// The child side: `tether bench-fanout pub|sub …`.
/// Publishers' sessions (`pub`) or subscribers' (`sub`) for one run of `tether bench
/// fanout`, each driven over stdin (see [`crate::FANOUT_SUBCOMMAND`]).
pub fn peer(base: Config, a: FanoutPeerArgs) -> anyhow::Result<()> {
    if a.cpu.is_some() {
        pin(a.cpu);
    }
    match a.role.as_str() {
        "pub" => publishers(base, a),
        "sub" => subscribers(base, a),
        r => bail!("unknown role '{r}'"),
    }
}

fn publishers(base: Config, a: FanoutPeerArgs) -> anyhow::Result<()> {
    let mut sessions = Vec::new();
    let mut pubs = Vec::new();
    for i in 0..a.count {
        let s = Session::open(session_config(&base, &a, &format!("pub{i}"), &[]))
            .with_context(|| format!("opening publisher session {i}"))?;
        pubs.push(s.publisher(topic(i), Qos::new())?);
        sessions.push(s);
    }
    let addrs: Vec<String> = sessions
        .iter()
        .map(|s| s.local_addr().to_string())
        .collect();
    say(&format!("addrs {}", addrs.join(",")))?;
    // Every publisher matched with every subscriber (keys delivered in secure modes).
    let end = Instant::now() + Duration::from_secs(120);
    while pubs.iter().any(|p| p.matched() < a.subscribers) {
        if Instant::now() > end {
            let m: Vec<usize> = pubs.iter().map(|p| p.matched()).collect();
            bail!("publishers matched {m:?} of {} subscribers", a.subscribers);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    say("matched")?;
    if read_line()?.as_deref() != Some("go") {
        return Ok(());
    }
    let before: Vec<_> = sessions.iter().map(|s| s.stats().core).collect();
    let cpu0 = process_cpu_ns();
    let start = Instant::now() + Duration::from_millis(50);
    let period = Duration::from_millis(a.period_ms);
    let put_cpu = Arc::new(AtomicU64::new(0));
    // Each put's CPU time, for the median: a put the kernel interrupted to take a burst of
    // acknowledgements is charged for it, and moves the mean, not the median.
    let put_each = Arc::new(Mutex::new(Vec::with_capacity(a.count * a.samples)));
    let errors = Arc::new(AtomicU64::new(0));
    std::thread::scope(|sc| {
        for (i, p) in pubs.iter().enumerate() {
            let put_cpu = put_cpu.clone();
            let put_each = put_each.clone();
            let errors = errors.clone();
            let (samples, size, n) = (a.samples, a.size, a.count);
            sc.spawn(move || {
                // Publishers spread over the period, as independent nodes' timers are.
                let offset = period * i as u32 / n as u32;
                let mut payload = vec![i as u8; size];
                let mut each = Vec::with_capacity(samples);
                for k in 0..samples {
                    let at = start + offset + period * k as u32;
                    if let Some(d) = at.checked_duration_since(Instant::now()) {
                        std::thread::sleep(d);
                    }
                    payload[..8.min(size)]
                        .copy_from_slice(&(k as u64).to_le_bytes()[..8.min(size)]);
                    let c0 = thread_cpu_ns();
                    if p.put(payload.clone()).is_err() {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    let c = thread_cpu_ns() - c0;
                    put_cpu.fetch_add(c, Ordering::Relaxed);
                    each.push(c);
                }
                if let Ok(mut v) = put_each.lock() {
                    v.extend(each);
                }
            });
        }
    });
    let cpu = process_cpu_ns() - cpu0;
    for p in &pubs {
        p.wait_for_acknowledgments(Duration::from_secs(10));
    }
    let after: Vec<_> = sessions.iter().map(|s| s.stats().core).collect();
    let d = |f: fn(&tether::Stats) -> u64| -> u64 {
        before.iter().zip(&after).map(|(b, a)| f(a) - f(b)).sum()
    };
    let n = (a.count * a.samples) as u64;
    say(&json!({
        "samples": n,
        "put_errors": errors.load(Ordering::Relaxed),
        "put_cpu_ns": put_cpu.load(Ordering::Relaxed),
        "put_cpu_p50_ns": put_each.lock().ok().and_then(|mut v| {
            v.sort_unstable();
            quantile(&v, 0.5)
        }),
        "process_cpu_ns": cpu,
        "samples_sealed": d(|s| s.samples_sealed),
        "datagrams_pair_sealed": d(|s| s.datagrams_pair_sealed),
        "datagrams_sent": d(|s| s.datagrams_sent),
        "datagrams_multicast": d(|s| s.datagrams_multicast),
        "heartbeats_multicast": d(|s| s.heartbeats_multicast),
        "retransmitted": d(|s| s.samples_retransmitted),
        "keys_wrapped": d(|s| s.keys_wrapped),
    })
    .to_string())?;
    let _ = read_line();
    Ok(())
}

fn subscribers(base: Config, a: FanoutPeerArgs) -> anyhow::Result<()> {
    let lat: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(Vec::new()));
    let mut sessions = Vec::new();
    let mut subs = Vec::new();
    for j in 0..a.count {
        let s = Session::open(session_config(&base, &a, &format!("sub{j}"), &a.peers))
            .with_context(|| format!("opening subscriber session {j}"))?;
        for i in 0..a.publishers {
            let lat = lat.clone();
            subs.push(
                s.subscriber_with_callback(topic(i), Qos::new(), move |smp| {
                    let d = wall_ns().saturating_sub(smp.timestamp_ns);
                    lat.lock().expect("latency lock").push(d);
                })?,
            );
        }
        sessions.push(s);
    }
    say("ready")?;
    let stat =
        |f: fn(&tether::Stats) -> u64| -> u64 { sessions.iter().map(|s| f(&s.stats().core)).sum() };
    let mut cpu0 = process_cpu_ns();
    while let Some(l) = read_line()? {
        if l == "start" {
            cpu0 = process_cpu_ns();
        } else if l == "report" {
            let mut v = lat.lock().expect("latency lock").clone();
            v.sort_unstable();
            let n = v.len().max(1);
            let mean = v.iter().sum::<u64>() as f64 / n as f64;
            let pct = |q: f64| quantile(&v, q);
            say(&json!({
                "received": v.len(),
                "mean_ns": mean,
                "p50_ns": pct(0.5),
                "p99_ns": pct(0.99),
                "max_ns": v.last(),
                "process_cpu_ns": process_cpu_ns() - cpu0,
                "keys_received": stat(|s| s.keys_received),
                "no_key": stat(|s| s.no_key),
                "open_failed": stat(|s| s.open_failed),
                "duplicates": stat(|s| s.duplicates),
            })
            .to_string())?;
        }
    }
    drop(subs);
    Ok(())
}
