//! `tether bench fanout`: the 000 paper's experiment. Publishers each send a 1 KB sample
//! every 0.2 s to subscribers that each run their own session with their own keys and
//! sockets, and subscribe to every topic. Three modes in turn for each subscriber count:
//! `plain` (security off), `group` (tether: each sample sealed once under its writer's sender
//! key) and `pairwise` (SROS2's way, for comparison: every datagram sealed again for each
//! destination, `docs/wire.md#sealed`). Reported: mean communication time (receive time −
//! the source timestamp stamped at put), the publisher's CPU time per sample, and the seals
//! per sample, beside the paper's Table 3.
//!
//! Two child processes per run: one holds the publishers' sessions, one the subscribers'.
//! Subscribers find the publishers as static peers (they need not discover each other), so
//! discovery costs 8 × N pairs, not (8 + N)².

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use tether::{Config, Qos, Session};

use crate::bench::{BenchCfg, Peer};

/// How the publishers protect what they send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// Security off.
    Plain,
    /// tether's sender keys: one seal per sample, whatever the number of subscribers.
    Group,
    /// SROS2-like: also one seal per datagram per destination.
    Pairwise,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Group => "group",
            Mode::Pairwise => "pairwise",
        }
    }
}

/// How samples reach the subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Fanout {
    /// One datagram per subscriber.
    Unicast,
    /// One datagram per sample to a group every subscriber joined (needs the bench's
    /// network namespaces).
    Multicast,
}

impl Fanout {
    fn name(self) -> &'static str {
        match self {
            Fanout::Unicast => "unicast",
            Fanout::Multicast => "multicast",
        }
    }
}

const PUB_IP: &str = "10.199.9.1";
const SUB_IP: &str = "10.199.9.2";

/// Two hosts for the benchmark: network namespaces joined by a veth pair, publishers on
/// one, subscribers on the other, with multicast routed over the link. Publishers are
/// pinned to CPU 0; the subscribers' processes and their receive processing (steered by
/// RPS) to CPU 1, so the kernel's per-subscriber delivery work is not charged to the
/// publishing thread and the subscribers' threads do not evict its caches, as when they
/// are other machines. Deleted on drop.
struct Lan {
    pubs: String,
    subs: String,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Lan {
    fn create() -> anyhow::Result<Lan> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("creating network namespaces needs root");
        }
        remove_stale_namespaces();
        let id = std::process::id();
        let lan = Lan {
            pubs: format!("tfp{id}"),
            subs: format!("tfs{id}"),
        };
        for ns in [&lan.pubs, &lan.subs] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .output();
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        let (vp, vs) = (format!("vfp{id}"), format!("vfs{id}"));
        let (vp, vs) = (&vp[..vp.len().min(15)], &vs[..vs.len().min(15)]);
        ip(&[
            "link", "add", vp, "netns", &lan.pubs, "type", "veth", "peer", "name", vs, "netns",
            &lan.subs,
        ])?;
        for (ns, dev, addr) in [(&lan.pubs, vp, PUB_IP), (&lan.subs, vs, SUB_IP)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up", "multicast", "on"])?;
            ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", dev])?;
        }
        if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
            let out = std::process::Command::new("ip")
                .args(["netns", "exec", &lan.subs, "sh", "-c"])
                .arg(format!("echo 2 > /sys/class/net/{vs}/queues/rx-0/rps_cpus"))
                .output()
                .context("steering receive processing")?;
            if !out.status.success() {
                bail!(
                    "steering receive processing to CPU 1: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(lan)
    }
}

/// Deletes the namespaces of earlier runs whose process is gone (killed before it could
/// clean up); deleting a namespace also deletes its end of the veth pair.
fn remove_stale_namespaces() {
    let Ok(out) = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
    else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let pid = name
            .strip_prefix("tfp")
            .or_else(|| name.strip_prefix("tfs"))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", name])
                    .output();
            }
        }
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for ns in [&self.pubs, &self.subs] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .output();
        }
    }
}

/// The settings of one run, as the parent passes them to its children.
#[derive(Args, Debug, Clone)]
pub(crate) struct FanoutPeerArgs {
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

/// `tether bench fanout`.
#[derive(Args, Debug, Clone)]
pub(crate) struct FanoutArgs {
    /// Subscriber counts.
    #[arg(long, value_delimiter = ',', default_value = "2,4,6,8,10,20,50,100")]
    pub(crate) subs: Vec<usize>,
    /// Modes, run in turn for each subscriber count.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "plain,group,pairwise"
    )]
    pub(crate) modes: Vec<Mode>,
    /// Publishers (one topic and one session each).
    #[arg(long, default_value_t = 8)]
    pub(crate) publishers: usize,
    /// Samples per publisher.
    #[arg(long, default_value_t = 100)]
    pub(crate) samples: usize,
    /// Milliseconds between a publisher's samples.
    #[arg(long, default_value_t = 200)]
    pub(crate) period_ms: u64,
    /// Sample size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub(crate) size: usize,
    /// Repetitions; each runs every subscriber count in every mode, interleaved, so the
    /// summaries can pair runs by repetition.
    #[arg(long, default_value_t = 3)]
    pub(crate) reps: usize,
    /// How publishers reach subscribers, in turn: `multicast` (one datagram per sample to
    /// a group every subscriber joined) and `unicast` (one per subscriber). With root,
    /// publishers and subscribers run in two network namespaces joined by veth (this
    /// bench creates and deletes them); without, on loopback and unicast only. Default:
    /// both when root, else unicast.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) fanout: Vec<Fanout>,
    /// Keep idle CPUs polling instead of halting while the bench runs, by holding
    /// `/dev/cpu_dma_latency` at 0 µs (as cyclictest and tuned's latency-performance profile
    /// do; needs root). On a VM, waking a halted vCPU is a trip through the hypervisor that
    /// the waker pays for: the publisher's put, which wakes the subscribers' CPU, is then
    /// dearer the idler that CPU is, so without this it falls as subscribers are added.
    #[arg(long)]
    pub(crate) poll_idle: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A PM QoS request that idle CPUs wake within 0 µs, which makes the kernel's idle loop
/// poll rather than halt. It holds while the file stays open.
struct PollIdle {
    _request: std::fs::File,
}

/// Reading it gives the latency every CPU is held to now; writing adds a request.
const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";

impl PollIdle {
    fn hold() -> anyhow::Result<PollIdle> {
        use std::io::Write;
        const PATH: &str = CPU_DMA_LATENCY;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(PATH)
            .with_context(|| format!("--poll-idle: opening {PATH} (needs root)"))?;
        f.write_all(&0i32.to_ne_bytes())
            .with_context(|| format!("--poll-idle: writing {PATH}"))?;
        Ok(PollIdle { _request: f })
    }
}

fn topic(i: usize) -> String {
    format!("/fanout/{i}")
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
    c.discovery.registry = false;
    c.discovery.multicast = false;
    c.discovery.peers = peers.to_vec();
    c.transport.listen = Some(std::net::SocketAddr::from((a.ip, 0)));
    // Subscribers take data on the group over the namespace's loopback; publishers need no
    // socket on it (they would receive every other publisher's samples).
    c.transport.multicast_data = a.multicast && a.role == "sub";
    c.discovery.interface = a.ip.to_string();
    if a.mode != Mode::Plain {
        c.security.keys = Some(a.realm.join(format!("{keys}.key")));
        c.security.mode = Some(tether::SecurityMode::Encrypt);
        c.security.pairwise = a.mode == Mode::Pairwise;
    }
    c
}

/// CPU time of `clock` (this thread's or this process's), in ns.
fn cpu_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn thread_cpu_ns() -> u64 {
    cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn process_cpu_ns() -> u64 {
    cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn read_line() -> anyhow::Result<Option<String>> {
    let mut s = String::new();
    if std::io::stdin().read_line(&mut s)? == 0 {
        return Ok(None);
    }
    Ok(Some(s.trim().to_string()))
}

fn say(s: &str) -> anyhow::Result<()> {
    let mut o = std::io::stdout().lock();
    writeln!(o, "{s}")?;
    o.flush()?;
    Ok(())
}

/// The child side: `tether bench-fanout pub|sub …`.
pub(crate) fn peer(base: Config, a: FanoutPeerArgs) -> anyhow::Result<ExitCode> {
    if a.cpu.is_some() {
        crate::bench::pin(a.cpu);
    }
    match a.role.as_str() {
        "pub" => publishers(base, a),
        "sub" => subscribers(base, a),
        r => bail!("unknown role '{r}'"),
    }
}

fn publishers(base: Config, a: FanoutPeerArgs) -> anyhow::Result<ExitCode> {
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
        return Ok(ExitCode::SUCCESS);
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
            crate::bench::quantile(&v, 0.5)
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
    Ok(ExitCode::SUCCESS)
}

fn subscribers(base: Config, a: FanoutPeerArgs) -> anyhow::Result<ExitCode> {
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
            let pct = |q: f64| crate::bench::quantile(&v, q);
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
    Ok(ExitCode::SUCCESS)
}

/// The paper's Table 3 (seconds): subscribers, plain, cipher.
const PAPER: [(usize, f64, f64); 5] = [
    (2, 0.0024, 0.0023),
    (4, 0.0036, 0.0041),
    (6, 0.0054, 0.0075),
    (8, 0.0077, 0.0104),
    (10, 0.0116, 0.0274),
];

#[allow(clippy::too_many_arguments)]
fn spawn(
    lan: Option<&Lan>,
    fanout: Fanout,
    bc: &BenchCfg,
    a: &FanoutArgs,
    realm: &Path,
    role: &str,
    count: usize,
    mode: Mode,
    extra: &[String],
) -> anyhow::Result<Peer> {
    let mut args = vec![
        role.to_string(),
        "--count".into(),
        count.to_string(),
        "--publishers".into(),
        a.publishers.to_string(),
        "--mode".into(),
        mode.name().into(),
        "--realm".into(),
        realm.display().to_string(),
        "--domain".into(),
        bc.domain().to_string(),
        "--samples".into(),
        a.samples.to_string(),
        "--period-ms".into(),
        a.period_ms.to_string(),
        "--size".into(),
        a.size.to_string(),
    ];
    args.extend_from_slice(extra);
    if fanout == Fanout::Multicast {
        args.push("--multicast".into());
    }
    let ns = lan.map(|l| {
        if role == "pub" {
            args.extend(["--ip".into(), PUB_IP.into()]);
            if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
                args.extend(["--cpu".into(), "0".into()]);
            }
            l.pubs.as_str()
        } else {
            // The other CPU, as the other machines they stand for: their threads do not
            // evict the publisher's caches between samples.
            args.extend(["--ip".into(), SUB_IP.into()]);
            if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
                args.extend(["--cpu".into(), "1".into()]);
            }
            l.subs.as_str()
        }
    });
    Peer::spawn_with(ns, "bench-fanout", &args)
}

fn avg(v: &[Value], k: &str) -> f64 {
    v.iter()
        .map(|r| r[k].as_f64().unwrap_or(f64::NAN))
        .sum::<f64>()
        / v.len().max(1) as f64
}

fn fold(v: &[Value], k: &str, f: fn(f64, f64) -> f64) -> f64 {
    v.iter()
        .map(|r| r[k].as_f64().unwrap_or(f64::NAN))
        .reduce(f)
        .unwrap_or(f64::NAN)
}

/// Runs against base runs, paired by repetition (each repetition runs every mode and every
/// subscriber count back to back, so what drifts on the host between repetitions, often
/// more than the runs differ, cancels out of each pair): the geometric mean of the
/// per-repetition ratios of field `k` (mean communication time, publisher CPU per sample),
/// with its 95 % confidence interval (Student's t on the logs; None for the interval below
/// two pairs). None without a pair.
fn paired_ratio(base: &[Value], other: &[Value], k: &str) -> Option<(f64, Option<(f64, f64)>)> {
    let logs: Vec<f64> = base
        .iter()
        .zip(other)
        .filter_map(|(p, o)| Some((o[k].as_f64()? / p[k].as_f64()?).ln()))
        .filter(|l| l.is_finite())
        .collect();
    let n = logs.len();
    if n == 0 {
        return None;
    }
    let m = logs.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return Some((m.exp(), None));
    }
    let var = logs.iter().map(|l| (l - m).powi(2)).sum::<f64>() / (n - 1) as f64;
    // Two-sided 97.5 % quantiles of Student's t for 1..=30 degrees of freedom, then normal.
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    let t = T.get(n - 2).copied().unwrap_or(1.96);
    let half = t * (var / n as f64).sqrt();
    Some((m.exp(), Some(((m - half).exp(), (m + half).exp()))))
}

/// Each mode's mean communication time at the same steal: the runs' means less a common
/// slope (µs per % of steal, fitted within each mode, so differences between modes do not
/// bend it) times how far the mode's runs' steal was from all runs' (analysis of
/// covariance). The modes ran in turn, so the host stole more during some modes' runs than
/// others'; this compares them as if it had stolen alike. Returns the slope and, per mode,
/// the adjusted mean (None without steal figures).
fn steal_adjusted(by_mode: &[(Mode, Vec<Value>)]) -> Option<(f64, Vec<f64>)> {
    let pts: Vec<Vec<(f64, f64)>> = by_mode
        .iter()
        .map(|(_, v)| {
            v.iter()
                .map(|r| (r["steal_pct"].as_f64(), r["mean_us"].as_f64()))
                .map(|(x, y)| Some((x?, y?)))
                .collect::<Option<Vec<_>>>()
        })
        .collect::<Option<Vec<_>>>()?;
    let mean = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| {
        v.iter().map(f).sum::<f64>() / v.len().max(1) as f64
    };
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for v in &pts {
        let (mx, my) = (mean(v, |p| p.0), mean(v, |p| p.1));
        sxy += v.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>();
        sxx += v.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let all: Vec<(f64, f64)> = pts.iter().flatten().copied().collect();
    let grand = mean(&all, |p| p.0);
    let adj = pts
        .iter()
        .map(|v| mean(v, |p| p.1) - slope * (mean(v, |p| p.0) - grand))
        .collect();
    Some((slope, adj))
}

fn row(n: usize, mode: Mode, rep: usize, pr: &Value, sr: &Value) -> Value {
    let samples = pr["samples"].as_u64().unwrap_or(0).max(1) as f64;
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    json!({
        "subscribers": n,
        "mode": mode.name(),
        "rep": rep,
        "mean_us": f(&sr["mean_ns"]) / 1e3,
        "p50_us": f(&sr["p50_ns"]) / 1e3,
        "p99_us": f(&sr["p99_ns"]) / 1e3,
        "max_us": f(&sr["max_ns"]) / 1e3,
        "received": sr["received"],
        "expected": (samples * n as f64) as u64,
        "put_cpu_us_per_sample": f(&pr["put_cpu_ns"]) / 1e3 / samples,
        "put_cpu_p50_us": f(&pr["put_cpu_p50_ns"]) / 1e3,
        "process_cpu_us_per_sample": f(&pr["process_cpu_ns"]) / 1e3 / samples,
        // Every subscriber's processing of one sample (receive, open, deliver), on average.
        "sub_cpu_us_per_delivery": f(&sr["process_cpu_ns"]) / 1e3 / (samples * n as f64),
        "seals_per_sample": f(&pr["samples_sealed"]) / samples,
        "datagram_seals_per_sample": f(&pr["datagrams_pair_sealed"]) / samples,
        "datagrams_sent": pr["datagrams_sent"],
        "multicast_per_sample": f(&pr["datagrams_multicast"]) / samples,
        "heartbeats_multicast": pr["heartbeats_multicast"],
        "retransmitted": pr["retransmitted"],
        "steal_pct": pr["steal_pct"],
        "put_errors": pr["put_errors"],
        "keys_wrapped": pr["keys_wrapped"],
        "keys_received": sr["keys_received"],
        "no_key": sr["no_key"],
        "open_failed": sr["open_failed"],
        "duplicates": sr["duplicates"],
    })
}

fn print_row(r: &Value) {
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:>5} {:>9} {:>10.1} {:>10.1} {:>10.1} {:>8.1} {:>10.1} {:>8.1} {:>10.1} {:>9.1} {:>7.2} {:>9.2} {:>7.1}",
        f("subscribers"),
        r["mode"].as_str().unwrap_or("?"),
        f("mean_us"),
        f("p50_us"),
        f("p99_us"),
        100.0 * f("received") / f("expected"),
        f("put_cpu_us_per_sample"),
        f("put_cpu_p50_us"),
        f("process_cpu_us_per_sample"),
        f("sub_cpu_us_per_delivery"),
        f("seals_per_sample"),
        f("datagram_seals_per_sample"),
        f("steal_pct"),
    );
}

/// The machine's stolen and total CPU time so far (jiffies, all CPUs), from /proc/stat.
fn cpu_steal() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    Some((*v.get(7)?, v.iter().take(8).sum()))
}

/// One run: `n` subscribers, one mode. Returns the publishers' and the subscribers' reports.
fn run_one(
    lan: Option<&Lan>,
    fanout: Fanout,
    bc: &BenchCfg,
    a: &FanoutArgs,
    realm: &Path,
    n: usize,
    mode: Mode,
) -> anyhow::Result<(Value, Value)> {
    let mut p = spawn(
        lan,
        fanout,
        bc,
        a,
        realm,
        "pub",
        a.publishers,
        mode,
        &["--subscribers".into(), n.to_string()],
    )?;
    let addrs = p.line()?;
    let addrs = addrs
        .strip_prefix("addrs ")
        .context("publishers did not report their addresses")?
        .to_string();
    let mut s = spawn(
        lan,
        fanout,
        bc,
        a,
        realm,
        "sub",
        n,
        mode,
        &["--peers".into(), addrs],
    )?;
    if s.line()? != "ready" {
        bail!("subscribers did not start");
    }
    if p.line()? != "matched" {
        bail!("publishers did not match");
    }
    // Let the last KEYs and acknowledgements settle.
    std::thread::sleep(Duration::from_millis(300));
    s.send("start")?;
    let st0 = cpu_steal();
    p.send("go")?;
    let mut pr: Value = serde_json::from_str(&p.line()?).context("publishers' report")?;
    // Time the hypervisor ran something else on this machine's vCPUs while the samples
    // flowed: it stalls publishers and subscribers alike, and it is what makes one run's
    // mean differ from the next.
    if let (Some((s0, t0)), Some((s1, t1))) = (st0, cpu_steal()) {
        pr["steal_pct"] = json!(100.0 * (s1 - s0) as f64 / (t1 - t0).max(1) as f64);
    }
    std::thread::sleep(Duration::from_millis(300));
    s.send("report")?;
    let sr: Value = serde_json::from_str(&s.line()?).context("subscribers' report")?;
    Ok((pr, sr))
}

pub(crate) fn run(cfg: Config, mut a: FanoutArgs) -> anyhow::Result<ExitCode> {
    if a.fanout.is_empty() {
        // SAFETY: geteuid has no preconditions.
        a.fanout = if unsafe { libc::geteuid() } == 0 {
            vec![Fanout::Multicast, Fanout::Unicast]
        } else {
            vec![Fanout::Unicast]
        };
    }
    if a.publishers == 0 || a.samples == 0 || a.period_ms == 0 || a.size == 0 || a.reps == 0 {
        bail!("--publishers, --samples, --period-ms, --size and --reps must be at least 1");
    }
    if a.subs.is_empty() || a.subs.contains(&0) {
        bail!("--subs: give subscriber counts of at least 1");
    }
    // Two hosts in network namespaces when this process may create them; else loopback
    // (unicast only: the host's loopback has no multicast route).
    let lan = match Lan::create() {
        Ok(l) => Some(l),
        Err(e) if a.fanout.contains(&Fanout::Multicast) => {
            return Err(e.context("--fanout multicast needs two network namespaces"));
        }
        Err(e) => {
            eprintln!("fanout: on loopback ({e:#})");
            None
        }
    };
    let _poll = a.poll_idle.then(PollIdle::hold).transpose()?;
    let bc = crate::bench::bench_cfg(cfg)?;
    let realm = bc.dir().join("realm");
    let r = tether::keys::Realm::init(&realm).context("creating the benchmark realm")?;
    let grant = vec!["/fanout/**".to_string()];
    for i in 0..a.publishers {
        r.issue(&format!("pub{i}"), grant.clone(), vec![], 1)?;
    }
    let most = a.subs.iter().copied().max().unwrap_or(0);
    for j in 0..most {
        r.issue(&format!("sub{j}"), vec![], grant.clone(), 1)?;
    }
    if !a.json {
        println!(
            "fanout: {} publishers × {} samples of {} B every {} ms, reliable, {}; {}{}",
            a.publishers,
            a.samples,
            a.size,
            a.period_ms,
            if lan.is_some() {
                "publishers and subscribers on two network namespaces joined by veth"
            } else {
                "on loopback"
            },
            crate::bench::machine(),
            if a.poll_idle {
                "; idle CPUs poll (cpu_dma_latency 0)"
            } else {
                ""
            }
        );
        println!(
            "{:>5} {:>9} {:>10} {:>10} {:>10} {:>8} {:>10} {:>8} {:>10} {:>9} {:>7} {:>9} {:>7}",
            "subs",
            "mode",
            "mean µs",
            "p50 µs",
            "p99 µs",
            "recv %",
            "put µs/s",
            "put p50",
            "proc µs/s",
            "sub µs/d",
            "seals/s",
            "dseals/s",
            "steal %"
        );
    }
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    let mut scaling = Vec::new();
    for &fanout in &a.fanout {
        // Every subscriber count and every mode within each repetition, so drift on the
        // machine (the host's CPU steal comes and goes over minutes) falls on all alike and
        // cancels out of the paired ratios: between modes at one count, and between counts
        // in one mode. runs[count][mode] holds one row per repetition, in order.
        let mut runs: Vec<Vec<Vec<Value>>> = vec![vec![vec![]; a.modes.len()]; a.subs.len()];
        for (rep, c, k) in schedule(a.reps, a.subs.len(), a.modes.len()) {
            let (n, mode) = (a.subs[c], a.modes[k]);
            let (pr, sr) = run_one(lan.as_ref(), fanout, &bc, &a, &realm, n, mode)
                .with_context(|| format!("{n} subscribers, {}, {}", mode.name(), fanout.name()))?;
            let mut row = row(n, mode, rep, &pr, &sr);
            row["fanout"] = json!(fanout.name());
            if !a.json {
                print_row(&row);
            }
            runs[c][k].push(row.clone());
            rows.push(row);
        }
        for (c, &n) in a.subs.iter().enumerate() {
            let by_mode: Vec<(Mode, Vec<Value>)> = a
                .modes
                .iter()
                .copied()
                .zip(runs[c].iter().cloned())
                .collect();
            summary.extend(summarize(&a, fanout, n, &by_mode));
        }
        scaling.extend(publisher_scaling(&a, fanout, &runs));
    }
    if a.json {
        println!(
            "{}",
            json!({
                "bench": "fanout",
                "hosts": if lan.is_some() { "two namespaces, veth" } else { "loopback" },
                "machine": crate::bench::machine(),
                "poll_idle": a.poll_idle,
                "publishers": a.publishers,
                "samples": a.samples,
                "period_ms": a.period_ms,
                "size": a.size,
                "runs": rows,
                "summary": summary,
                "publisher_cpu_scaling": scaling,
                "paper_table3": PAPER.iter().map(|(s, p, c)| json!({"subscribers": s, "plain_s": p, "cipher_s": c})).collect::<Vec<_>>(),
            })
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The order of the runs, as (repetition, count, mode) indices: each repetition runs every
/// count and every mode. Every other repetition runs the counts in reverse order (2 100,
/// 100 2, ...), and the modes alternate with each run of a count, so what drifts between
/// consecutive runs falls on each count and each mode alike.
fn schedule(reps: usize, counts: usize, modes: usize) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::with_capacity(reps * counts * modes);
    let mut turn = 0;
    for rep in 0..reps {
        for i in 0..counts {
            let c = if rep % 2 == 0 { i } else { counts - 1 - i };
            for j in 0..modes {
                let k = if turn % 2 == 0 { j } else { modes - 1 - j };
                out.push((rep, c, k));
            }
            turn += 1;
        }
    }
    out
}

/// One subscriber count's summary per mode (printed unless `--json`): mean communication
/// time, CPU, seals, and each mode against plain, paired by repetition.
fn summarize(
    a: &FanoutArgs,
    fanout: Fanout,
    n: usize,
    by_mode: &[(Mode, Vec<Value>)],
) -> Vec<Value> {
    let mut summary = Vec::new();
    let plain = by_mode.iter().find(|(m, _)| *m == Mode::Plain);
    let plain_mean = plain.map(|(_, v)| avg(v, "mean_us"));
    let plain_p50 = plain.map(|(_, v)| avg(v, "p50_us"));
    let adjusted = steal_adjusted(by_mode);
    let plain_adj = adjusted.as_ref().and_then(|(_, a)| {
        by_mode
            .iter()
            .position(|(m, _)| *m == Mode::Plain)
            .map(|i| a[i])
    });
    for (k, (mode, v)) in by_mode.iter().enumerate() {
        let adj = adjusted.as_ref().map(|(_, a)| a[k]);
        let mean = avg(v, "mean_us");
        let p50 = avg(v, "p50_us");
        let repairs: u64 = v.iter().filter_map(|r| r["retransmitted"].as_u64()).sum();
        let paired = plain.and_then(|(_, p)| paired_ratio(p, v, "mean_us"));
        let ci = paired.and_then(|(_, c)| c);
        let s = json!({
            "fanout": fanout.name(),
            "subscribers": n,
            "mode": mode.name(),
            "reps": v.len(),
            "mean_us": mean,
            "mean_us_min": fold(v, "mean_us", f64::min),
            "mean_us_max": fold(v, "mean_us", f64::max),
            "p50_us": p50,
            "p99_us": avg(v, "p99_us"),
            "put_cpu_us_per_sample": avg(v, "put_cpu_us_per_sample"),
            "process_cpu_us_per_sample": avg(v, "process_cpu_us_per_sample"),
            "sub_cpu_us_per_delivery": avg(v, "sub_cpu_us_per_delivery"),
            "steal_pct": avg(v, "steal_pct"),
            "seals_per_sample": avg(v, "seals_per_sample"),
            "datagram_seals_per_sample": avg(v, "datagram_seals_per_sample"),
            "ratio_to_plain": plain_mean.map(|p| mean / p),
            "p50_ratio_to_plain": plain_p50.map(|p| p50 / p),
            "steal_slope_us_per_pct": adjusted.as_ref().map(|(b, _)| *b),
            "mean_us_at_equal_steal": adj,
            "ratio_to_plain_at_equal_steal": adj.zip(plain_adj).map(|(a, p)| a / p),
            "paired_ratio_to_plain": paired.map(|(r, _)| r),
            "paired_ratio_ci95": ci.map(|(lo, hi)| json!([lo, hi])),
            "retransmitted": repairs,
        });
        if !a.json {
            let paper = PAPER.iter().find(|(s, _, _)| *s == n);
            println!(
                "{:>5} {:>9}  {}: mean {:>8.1} µs ({:.1}–{:.1}) over {} runs, put {:.1} µs/sample, {} repairs{}{}",
                n,
                fanout.name(),
                mode.name(),
                mean,
                fold(v, "mean_us", f64::min),
                fold(v, "mean_us", f64::max),
                v.len(),
                avg(v, "put_cpu_us_per_sample"),
                repairs,
                match (plain_mean, plain_p50) {
                    (Some(p), Some(q)) if *mode != Mode::Plain => format!(
                        ", {:.2}× plain (median {:.2}×{}{})",
                        mean / p,
                        p50 / q,
                        match adj.zip(plain_adj) {
                            Some((a, p)) => format!(", at equal steal {:.2}×", a / p),
                            None => String::new(),
                        },
                        match (paired, ci) {
                            (Some((r, _)), Some((lo, hi))) =>
                                format!(", paired {r:.2}× (95 % CI {lo:.2}–{hi:.2})"),
                            _ => String::new(),
                        }
                    ),
                    _ => String::new(),
                },
                match (paper, mode) {
                    (Some((_, pp, _)), Mode::Plain) => {
                        format!("   paper plain {:.0} µs", pp * 1e6)
                    }
                    (Some((_, pp, pc)), Mode::Pairwise) =>
                        format!("   paper cipher {:.0} µs, {:.2}× plain", pc * 1e6, pc / pp),
                    _ => String::new(),
                }
            );
        }
        summary.push(s);
    }
    summary
}

/// Per mode, the publisher's CPU per sample at each subscriber count against the smallest
/// count, paired by repetition: the put (sealing and sending one sample; the mean and the
/// median put) and the whole publisher process (which also takes every reader's
/// acknowledgements, so grows with them). With multicast fan-out the put should not grow
/// with the count.
fn publisher_scaling(a: &FanoutArgs, fanout: Fanout, runs: &[Vec<Vec<Value>>]) -> Vec<Value> {
    let Some(base) = (0..a.subs.len()).min_by_key(|&c| a.subs[c]) else {
        return vec![];
    };
    let mut out = Vec::new();
    for (k, mode) in a.modes.iter().enumerate() {
        for (c, &n) in a.subs.iter().enumerate() {
            if a.subs[c] == a.subs[base] {
                continue;
            }
            let put = paired_ratio(&runs[base][k], &runs[c][k], "put_cpu_us_per_sample");
            let p50 = paired_ratio(&runs[base][k], &runs[c][k], "put_cpu_p50_us");
            let proc = paired_ratio(&runs[base][k], &runs[c][k], "process_cpu_us_per_sample");
            let (Some((put_r, put_ci)), Some((proc_r, proc_ci))) = (put, proc) else {
                continue;
            };
            if !a.json {
                let ci = |c: Option<(f64, f64)>| match c {
                    Some((lo, hi)) => format!(" (95 % CI {lo:.2}–{hi:.2})"),
                    None => String::new(),
                };
                println!(
                    "{:>5} {:>9}  {}: publisher CPU per sample against {} subscribers, paired over {} runs: put {:.2}×{}, median put {}, process {:.2}×{}",
                    n,
                    fanout.name(),
                    mode.name(),
                    a.subs[base],
                    runs[c][k].len().min(runs[base][k].len()),
                    put_r,
                    ci(put_ci),
                    match p50 {
                        Some((r, c)) => format!("{r:.2}×{}", ci(c)),
                        None => "—".into(),
                    },
                    proc_r,
                    ci(proc_ci),
                );
            }
            out.push(json!({
                "fanout": fanout.name(),
                "mode": mode.name(),
                "subscribers": n,
                "against": a.subs[base],
                "put_cpu_ratio": put_r,
                "put_cpu_ratio_ci95": put_ci.map(|(lo, hi)| json!([lo, hi])),
                "put_cpu_p50_ratio": p50.map(|(r, _)| r),
                "put_cpu_p50_ratio_ci95": p50.and_then(|(_, c)| c).map(|(lo, hi)| json!([lo, hi])),
                "process_cpu_ratio": proc_r,
                "process_cpu_ratio_ci95": proc_ci.map(|(lo, hi)| json!([lo, hi])),
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--poll-idle` holds the kernel's CPU latency request at 0 µs for as long as the bench
    /// runs, and lets it go after.
    #[test]
    fn poll_idle_holds_the_latency_request_while_it_lives() {
        use std::io::Read;
        let read = || -> Option<i32> {
            let mut b = [0u8; 4];
            std::fs::File::open(CPU_DMA_LATENCY)
                .ok()?
                .read_exact(&mut b)
                .ok()?;
            Some(i32::from_ne_bytes(b))
        };
        let before = read();
        match PollIdle::hold() {
            Ok(g) => {
                assert_eq!(read(), Some(0));
                drop(g);
                assert_eq!(read(), before, "the request outlived the bench");
            }
            // Not root, or a kernel without PM QoS: the error says what was needed.
            Err(e) => {
                // SAFETY: geteuid has no preconditions.
                let root = unsafe { libc::geteuid() } == 0;
                assert!(
                    !root || before.is_none(),
                    "root could not hold the request: {e:#}"
                );
                assert!(format!("{e:#}").contains(CPU_DMA_LATENCY), "{e:#}");
            }
        }
    }

    fn runs(pts: &[(f64, f64)]) -> Vec<Value> {
        pts.iter()
            .map(|(steal, mean)| json!({"steal_pct": steal, "mean_us": mean}))
            .collect()
    }

    /// Two modes on the same line (100 µs + 50 µs per % of steal), one 20 µs above the
    /// other, but the host stole more during the upper mode's runs: the raw means differ
    /// by 120 µs, the means at equal steal by the true 20.
    #[test]
    fn steal_adjusted_means_compare_modes_at_equal_steal() {
        let plain = runs(&[(0.0, 100.0), (1.0, 150.0), (2.0, 200.0)]);
        let group = runs(&[(2.0, 220.0), (3.0, 270.0), (4.0, 320.0)]);
        let (slope, adj) =
            steal_adjusted(&[(Mode::Plain, plain), (Mode::Group, group.clone())]).unwrap();
        assert!((slope - 50.0).abs() < 1e-9, "{slope}");
        assert!((adj[1] - adj[0] - 20.0).abs() < 1e-9, "{adj:?}");
        assert!((avg(&group, "mean_us") - 150.0 - 120.0).abs() < 1e-9);
        // A run without a steal figure: no adjustment at all.
        let bare = vec![json!({"mean_us": 1.0})];
        assert!(steal_adjusted(&[(Mode::Plain, bare)]).is_none());
    }

    /// Plain drifts from 100 to 200 µs over the repetitions and group sits 10 % above it in
    /// each: the ratio of the means says so only roughly, the paired ratio exactly, with an
    /// interval that closes on it; a pair that differs widens the interval, and one pair
    /// gives no interval.
    #[test]
    fn paired_ratio_cancels_drift_between_repetitions() {
        let plain = runs(&[(0.0, 100.0), (0.0, 200.0), (0.0, 150.0)]);
        let group = runs(&[(0.0, 110.0), (0.0, 220.0), (0.0, 165.0)]);
        let (r, ci) = paired_ratio(&plain, &group, "mean_us").unwrap();
        assert!((r - 1.1).abs() < 1e-9, "{r}");
        let (lo, hi) = ci.unwrap();
        assert!(
            (lo - 1.1).abs() < 1e-9 && (hi - 1.1).abs() < 1e-9,
            "{lo} {hi}"
        );
        let noisy = runs(&[(0.0, 110.0), (0.0, 260.0), (0.0, 150.0)]);
        let (r, ci) = paired_ratio(&plain, &noisy, "mean_us").unwrap();
        let (lo, hi) = ci.unwrap();
        assert!(lo < 1.0 && hi > 1.3 && lo < r && r < hi, "{lo} {r} {hi}");
        let (r, ci) = paired_ratio(&plain[..1], &group[..1], "mean_us").unwrap();
        assert!((r - 1.1).abs() < 1e-9 && ci.is_none());
        assert!(paired_ratio(&[], &group, "mean_us").is_none());
    }

    /// Each repetition runs every count and every mode once; over two repetitions each
    /// count runs first once and last once, and each mode leads as often as it trails.
    #[test]
    fn schedule_interleaves_counts_and_modes() {
        let s = schedule(2, 2, 2);
        assert_eq!(s.len(), 8);
        for rep in 0..2 {
            let mut got: Vec<_> = s
                .iter()
                .filter(|r| r.0 == rep)
                .map(|r| (r.1, r.2))
                .collect();
            got.sort();
            assert_eq!(got, vec![(0, 0), (0, 1), (1, 0), (1, 1)]);
        }
        assert_eq!(s[0].1, 0);
        assert_eq!(s[4].1, 1);
        let leads: Vec<usize> = s.chunks(2).map(|p| p[0].2).collect();
        assert_eq!(leads, vec![0, 1, 0, 1]);
        assert!(schedule(0, 3, 3).is_empty());
    }

    /// The host's drift doubles every run's CPU between repetitions; at 100 subscribers
    /// the put costs what it costs at 2 in each repetition, the whole process 1.5×: the
    /// paired ratios say exactly that.
    #[test]
    fn publisher_scaling_pairs_counts_by_repetition() {
        let cpu = |put: f64, proc: f64| json!({"put_cpu_us_per_sample": put, "process_cpu_us_per_sample": proc});
        let at2 = vec![cpu(40.0, 100.0), cpu(80.0, 200.0), cpu(60.0, 150.0)];
        let at100 = vec![cpu(40.0, 150.0), cpu(80.0, 300.0), cpu(60.0, 225.0)];
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: FanoutArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from([
            "fanout", "--subs", "100,2", "--modes", "group", "--json",
        ]);
        let a = cli.unwrap().a;
        let runs = vec![vec![at100], vec![at2]];
        let out = publisher_scaling(&a, Fanout::Multicast, &runs);
        assert_eq!(out.len(), 1, "{out:?}");
        let r = &out[0];
        assert_eq!(r["subscribers"], 100);
        assert_eq!(r["against"], 2);
        assert!(
            (r["put_cpu_ratio"].as_f64().unwrap() - 1.0).abs() < 1e-9,
            "{r}"
        );
        assert!(
            (r["process_cpu_ratio"].as_f64().unwrap() - 1.5).abs() < 1e-9,
            "{r}"
        );
        let ci = r["put_cpu_ratio_ci95"].as_array().unwrap();
        assert!((ci[0].as_f64().unwrap() - 1.0).abs() < 1e-9, "{r}");
    }

    /// A namespace named after a process that is gone is deleted; one of a live process
    /// (this test's) is kept. Needs root to create namespaces.
    #[test]
    fn namespaces_of_dead_runs_are_removed() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: creating network namespaces needs root");
            return;
        }
        // Above the kernel's pid_max (at most 2^22): no such process can exist.
        let dead = "tfp4999999";
        let live = format!("tfs{}", std::process::id());
        for ns in [dead, &live] {
            ip(&["netns", "add", ns]).unwrap();
        }
        remove_stale_namespaces();
        let list = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        let names = String::from_utf8_lossy(&list.stdout).to_string();
        let _ = ip(&["netns", "del", &live]);
        let _ = ip(&["netns", "del", dead]);
        assert!(!names.contains(dead), "{names}");
        assert!(names.contains(&live), "{names}");
    }
}
