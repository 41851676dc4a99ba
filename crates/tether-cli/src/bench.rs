//! `tether bench`: tether against raw UDP, two processes on loopback, same run.

use std::io::{BufRead, BufReader, Write};
use std::net::UdpSocket;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use tether::{Config, Publisher, Qos, Session};

#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand, Debug)]
enum Which {
    /// Paper 001, Table 2: n reliable samples as fast as allowed, time until the reader's
    /// echo after the n-th: unbatched, coalescing and batching, interleaved.
    Batch {
        /// Sample counts.
        #[arg(long, value_delimiter = ',', default_value = "3000,10000")]
        counts: Vec<usize>,
        /// Sample sizes in bytes.
        #[arg(long, value_delimiter = ',', default_value = "256,512,1024")]
        sizes: Vec<usize>,
        /// Repetitions per row (after one warm-up).
        #[arg(long, default_value_t = 20)]
        reps: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Paper 001, Table 3: a 5 MB payload as chunks of each size, and as one sample that
    /// tether fragments; time until the reader's echo.
    Large {
        /// Total bytes.
        #[arg(long, default_value_t = 5 << 20)]
        total: usize,
        /// Chunk sizes in bytes (the total itself: one fragmented sample).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "512,1024,262144,524288,1048576,5242880"
        )]
        chunks: Vec<usize>,
        /// Repetitions per row (after one warm-up).
        #[arg(long, default_value_t = 20)]
        reps: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Paper 001, Table 4: a bulk transfer in 32 KB samples through a token-bucket flow
    /// controller at each setting, with a 1 kHz 64 B reliable realtime topic on the same
    /// session; completion time, rate, and the realtime latency with and without the bulk.
    Bulk {
        /// Bytes to transfer per setting.
        #[arg(long, default_value_t = 100 << 20)]
        total: u64,
        /// Bytes per bulk sample.
        #[arg(long, default_value_t = 32 << 10)]
        sample: usize,
        /// Tokens added per period, for each row (`unlimited` or a number).
        #[arg(long, value_delimiter = ',', default_value = "unlimited,30,20,10,5,1")]
        tokens: Vec<String>,
        /// The flow controller's period in ms.
        #[arg(long, default_value_t = 10)]
        period_ms: u64,
        /// Bytes per token.
        #[arg(long, default_value_t = 8192)]
        bytes_per_token: u64,
        /// Bulk samples in flight (the writer's keep-all history).
        #[arg(long, default_value_t = 8)]
        window: u32,
        /// Seconds of realtime traffic alone, before each transfer.
        #[arg(long, default_value_t = 2.0)]
        idle: f64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Paper 003: encryption and decryption speed of tether's suites and comparison ciphers
    /// in buffers of 1,024 … 10,240 bytes, with cycles per byte; tether's seal path against
    /// the raw primitive at 8 KB; openssl speed when installed.
    Cipher {
        /// Buffer sizes in bytes.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "1024,2048,3072,4096,5120,6144,7168,8192,9216,10240"
        )]
        sizes: Vec<usize>,
        /// Milliseconds per measurement (best of three).
        #[arg(long, default_value_t = 200)]
        millis: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Paper 000, Table 3: publishers each sending a 1 KB sample every 0.2 s to N
    /// subscribers (each its own session and keys), with security off (`plain`), tether's
    /// sender keys (`group`) and SROS2-like per-destination sealing (`pairwise`);
    /// communication time and the publisher's CPU per sample.
    Fanout(crate::fanout::FanoutArgs),
    /// One-way latency (ping-pong RTT / 2) for 64 B, 1 KB and 64 KB samples, beside raw UDP.
    Latency {
        /// Round trips measured per size (after 200 warm-up ones).
        #[arg(long, default_value_t = 5000)]
        samples: usize,
        /// Sample sizes in bytes.
        #[arg(long, value_delimiter = ',', default_value = "64,1024,64000")]
        sizes: Vec<usize>,
        /// Receive modes to measure.
        #[arg(long, value_enum, default_value = "both")]
        mode: ModeArg,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Samples per second from one process to another: best effort and reliable keep-all,
    /// each unbatched and batched, beside raw UDP.
    Throughput {
        /// Seconds per measurement.
        #[arg(long, default_value_t = 3.0)]
        duration: f64,
        /// Sample sizes in bytes.
        #[arg(long, value_delimiter = ',', default_value = "256,1024")]
        sizes: Vec<usize>,
        /// Receiver modes to measure.
        #[arg(long, value_enum, default_value = "both")]
        mode: ModeArg,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum ModeArg {
    Blocking,
    BusyPoll,
    Both,
}

#[derive(Args, Debug)]
pub(crate) struct PeerArgs {
    #[arg(value_enum)]
    role: Role,
    /// Busy-poll receive.
    #[arg(long)]
    busy_poll: bool,
    /// Pin the process to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Role {
    /// Echo /bench/ping to /bench/pong.
    Pong,
    /// Echo raw UDP datagrams; prints its port.
    UdpEcho,
    /// Count /bench/thr (best effort); report on a stdin line.
    Sink,
    /// Count /bench/thr (reliable keep-all); report on a stdin line.
    SinkReliable,
    /// Count raw UDP datagrams; prints its port; report on a stdin line.
    UdpSink,
    /// Acknowledge every announced count of samples (the 001 paper's echo).
    Ack,
    /// Count bulk bytes and time the realtime topic (`bench bulk`).
    BulkSink,
}

const PING: &str = "/bench/ping";
const PONG: &str = "/bench/pong";
const THR: &str = "/bench/thr";

/// A child process running `tether bench-peer`, killed on drop.
pub(crate) struct Peer {
    child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Peer {
    /// `tether SUBCOMMAND ARGS…` with piped stdin and stdout, in network namespace
    /// `netns` if given.
    pub(crate) fn spawn_with(
        netns: Option<&str>,
        subcommand: &str,
        args: &[String],
    ) -> anyhow::Result<Peer> {
        let exe = std::env::current_exe().context("locating the tether binary")?;
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = cmd
            .arg(subcommand)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a benchmark process")?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().context("peer stdout")?);
        Ok(Peer {
            child,
            stdin,
            stdout,
        })
    }

    pub(crate) fn spawn(
        cfg: &BenchCfg,
        role: &str,
        busy: bool,
        cpu: Option<usize>,
    ) -> anyhow::Result<Peer> {
        let exe = std::env::current_exe().context("locating the tether binary")?;
        let mut cmd = Command::new(exe);
        cmd.arg("bench-peer")
            .arg(role)
            .arg("--domain")
            .arg(cfg.domain.to_string())
            .arg("--registry-dir")
            .arg(&cfg.registry)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if busy {
            cmd.arg("--busy-poll");
        }
        if let Some(c) = cpu {
            cmd.arg("--cpu").arg(c.to_string());
        }
        let mut child = cmd.spawn().context("starting the benchmark peer")?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().context("peer stdout")?);
        Ok(Peer {
            child,
            stdin,
            stdout,
        })
    }

    pub(crate) fn line(&mut self) -> anyhow::Result<String> {
        let mut s = String::new();
        if self.stdout.read_line(&mut s)? == 0 {
            bail!("benchmark peer exited early");
        }
        Ok(s.trim().to_string())
    }

    pub(crate) fn send(&mut self, s: &str) -> anyhow::Result<()> {
        let i = self.stdin.as_mut().context("peer stdin")?;
        writeln!(i, "{s}")?;
        i.flush()?;
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stdin.take();
        let end = Instant::now() + Duration::from_secs(2);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) struct BenchCfg {
    pub(crate) base: Config,
    domain: u16,
    registry: std::path::PathBuf,
    _dir: TempDir,
}

/// A private registry directory so benchmarks never meet other sessions.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl BenchCfg {
    /// The private domain of this benchmark.
    pub(crate) fn domain(&self) -> u16 {
        self.domain
    }

    /// Its private directory (removed at the end).
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.registry
    }
}

pub(crate) fn bench_cfg(mut base: Config) -> anyhow::Result<BenchCfg> {
    let dir = std::env::temp_dir().join(format!(
        "tether-bench-{}-{}",
        std::process::id(),
        tether_now_ns() % 1_000_000
    ));
    std::fs::create_dir_all(&dir)?;
    let domain = 200 + (std::process::id() % 50) as u16;
    base.domain = domain;
    base.discovery.registry_dir = Some(dir.clone());
    Ok(BenchCfg {
        base,
        domain,
        registry: dir.clone(),
        _dir: TempDir(dir),
    })
}

fn tether_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub(crate) fn run(cfg: Config, a: BenchArgs) -> anyhow::Result<ExitCode> {
    match a.which {
        Which::Batch {
            counts,
            sizes,
            reps,
            json,
        } => crate::paper::batch(cfg, &counts, &sizes, reps, json),
        Which::Large {
            total,
            chunks,
            reps,
            json,
        } => crate::paper::large(cfg, total, &chunks, reps, json),
        Which::Bulk {
            total,
            sample,
            tokens,
            period_ms,
            bytes_per_token,
            window,
            idle,
            json,
        } => {
            let tokens = tokens
                .iter()
                .map(|t| match t.trim() {
                    "unlimited" => Ok(None),
                    n => n.parse::<u64>().map(Some).map_err(|_| {
                        anyhow::anyhow!("--tokens: '{n}' is neither a number nor unlimited")
                    }),
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            if period_ms == 0 || bytes_per_token == 0 {
                bail!("--period-ms and --bytes-per-token must be at least 1");
            }
            crate::bulk::run(
                cfg,
                crate::bulk::BulkArgs {
                    total,
                    sample,
                    tokens,
                    period_ms,
                    bytes_per_token,
                    window,
                    idle_secs: crate::topic::secs("--idle", idle)?.as_secs_f64(),
                    json,
                },
            )
        }
        Which::Cipher {
            sizes,
            millis,
            json,
        } => crate::cipher::run(&sizes, millis, json),
        Which::Fanout(a) => crate::fanout::run(cfg, a),
        Which::Latency {
            samples,
            sizes,
            mode,
            json,
        } => latency(cfg, samples, &sizes, mode, json),
        Which::Throughput {
            duration,
            sizes,
            json,
            mode,
        } => throughput(cfg, duration, &sizes, mode, json),
    }
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{cpu}, {n} vCPU")
}

#[derive(Debug, Clone, Copy)]
struct Pct {
    p50: f64,
    p99: f64,
}

/// The `q` quantile (0 to 1) of `sorted` by nearest rank: the element at `q` of the way
/// from the first to the last. None when empty. Every bench's percentiles go through it.
pub(crate) fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    let last = sorted.len().checked_sub(1)?;
    sorted
        .get(((last as f64 * q.clamp(0.0, 1.0)).round() as usize).min(last))
        .copied()
}

/// One-way latency percentiles in µs from round-trip times in ns.
fn one_way(rtts: &mut [u64]) -> Pct {
    rtts.sort_unstable();
    let at = |q: f64| quantile(rtts, q).unwrap_or(0) as f64 / 2.0 / 1000.0;
    Pct {
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// Round trips per interleaved block; raw UDP and tether alternate block by block so both
/// see the same machine conditions (the VM's noise moves whole runs by ±30 %).
const BLOCK: usize = 250;
/// Round trips dropped at the start of each block (mode switches, cold caches).
const BLOCK_WARMUP: usize = 25;

fn raw_block(
    sock: &UdpSocket,
    peer: std::net::SocketAddr,
    size: usize,
    n: usize,
    busy: bool,
) -> anyhow::Result<Vec<u64>> {
    sock.set_nonblocking(busy)?;
    if !busy {
        sock.set_read_timeout(Some(Duration::from_secs(2)))?;
    }
    let buf = vec![0xabu8; size];
    let mut rx = vec![0u8; 65_536];
    let mut rtts = Vec::with_capacity(n);
    for i in 0..BLOCK_WARMUP + n {
        let t0 = Instant::now();
        sock.send_to(&buf, peer)?;
        loop {
            match sock.recv_from(&mut rx) {
                Ok(_) => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    std::hint::spin_loop();
                    if t0.elapsed() > Duration::from_secs(2) {
                        bail!("raw UDP echo stopped answering");
                    }
                }
                Err(e) => return Err(e).context("raw UDP ping-pong"),
            }
        }
        if i >= BLOCK_WARMUP {
            rtts.push(t0.elapsed().as_nanos() as u64);
        }
    }
    Ok(rtts)
}

struct PingState {
    remaining: usize,
    t0: Instant,
    rtts: Vec<u64>,
    payload: Bytes,
    done: bool,
}

type Ping = Arc<(Mutex<PingState>, Condvar)>;

fn tether_block(
    st: &Ping,
    publisher: &Publisher,
    size: usize,
    n: usize,
) -> anyhow::Result<Vec<u64>> {
    let payload = Bytes::from(vec![0xcdu8; size]);
    {
        let mut g = st.0.lock().unwrap_or_else(|p| p.into_inner());
        g.remaining = BLOCK_WARMUP + n - 1;
        g.rtts = Vec::with_capacity(BLOCK_WARMUP + n);
        g.payload = payload.clone();
        g.done = false;
        g.t0 = Instant::now();
    }
    publisher.put(payload)?;
    let (m, cv) = &**st;
    let g = m.lock().unwrap_or_else(|p| p.into_inner());
    let (mut g, to) = cv
        .wait_timeout_while(g, Duration::from_secs(60), |g| !g.done)
        .unwrap_or_else(|p| p.into_inner());
    if to.timed_out() {
        g.done = true;
        bail!("tether ping-pong of {size} B stalled");
    }
    let skip = BLOCK_WARMUP.min(g.rtts.len());
    Ok(g.rtts.split_off(skip))
}

fn latency(
    cfg: Config,
    samples: usize,
    sizes: &[usize],
    mode: ModeArg,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let machine = machine();
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let mut runs: Vec<(bool, Placement)> = Vec::new();
    if mode != ModeArg::BusyPoll {
        if two {
            runs.push((false, Placement::CrossCore));
        }
        runs.push((false, Placement::SameCore));
    }
    // Busy-polling two processes on one CPU only measures the scheduler's time slice.
    if mode != ModeArg::Blocking && two {
        runs.push((true, Placement::CrossCore));
    }
    let blocks = samples.div_ceil(BLOCK).max(1);
    let mut rows = Vec::new();
    for &(busy, placement) in &runs {
        let bc = bench_cfg(cfg.clone())?;
        let (mine, theirs) = placement.cpus();
        pin(Some(mine));
        let mut udp_peer = Peer::spawn(&bc, "udp-echo", false, Some(theirs))?;
        let port: u16 = udp_peer.line()?.parse().context("udp-echo port")?;
        // Unconnected, like tether's socket (one socket talks to many peers): a connected
        // socket skips the route lookup per datagram, which no middleware socket can.
        let sock = UdpSocket::bind("127.0.0.1:0")?;
        let udp_addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let mut pong = Peer::spawn(&bc, "pong", false, Some(theirs))?;
        let session = Session::open(bc.base.clone())?;
        let publisher = Arc::new(session.publisher(PING, Qos::default())?);
        let st: Ping = Arc::new((
            Mutex::new(PingState {
                remaining: 0,
                t0: Instant::now(),
                rtts: Vec::new(),
                payload: Bytes::new(),
                done: true,
            }),
            Condvar::new(),
        ));
        let (st2, p2) = (st.clone(), publisher.clone());
        // The next ping leaves from the thread that received the pong: no hand-off.
        let sub = session.subscriber_with_callback(PONG, Qos::default(), move |_s| {
            let now = Instant::now();
            let (m, cv) = &*st2;
            let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
            if g.done {
                return;
            }
            let rtt = (now - g.t0).as_nanos() as u64;
            g.rtts.push(rtt);
            if g.remaining == 0 {
                g.done = true;
                cv.notify_all();
                return;
            }
            g.remaining -= 1;
            g.t0 = Instant::now();
            let p = g.payload.clone();
            drop(g);
            let _ = p2.put(p);
        })?;
        wait_matched(|| publisher.matched() >= 1 && sub.matched() >= 1)?;
        for &size in sizes {
            let (mut raw, mut ours) = (Vec::new(), Vec::new());
            for b in 0..blocks {
                let n = BLOCK.min(samples - b * BLOCK);
                // Only the side being measured spins; two spinners on one CPU would
                // measure the scheduler.
                if busy {
                    udp_peer.send("busy")?;
                    udp_peer.line()?;
                }
                raw.extend(raw_block(&sock, udp_addr, size, n, busy)?);
                if busy {
                    udp_peer.send("block")?;
                    udp_peer.line()?;
                    pong.send("busy")?;
                    pong.line()?;
                    session.set_busy_poll(true);
                }
                ours.extend(tether_block(&st, &publisher, size, n)?);
                if busy {
                    session.set_busy_poll(false);
                    pong.send("block")?;
                    pong.line()?;
                }
            }
            rows.push((busy, placement, size, one_way(&mut ours), one_way(&mut raw)));
        }
    }
    pin(None);
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(busy, pl, size, o, r)| {
                json!({
                    "mode": if *busy { "busy-poll" } else { "blocking" },
                    "placement": pl.name(),
                    "size": size,
                    "tether_p50_us": o.p50, "tether_p99_us": o.p99,
                    "udp_p50_us": r.p50, "udp_p99_us": r.p99,
                    "ratio_p50": o.p50 / r.p50,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"bench": "latency", "machine": machine, "samples": samples, "results": v})
            )?
        );
    } else {
        println!(
            "tether bench latency — one-way = RTT/2, {samples} round trips per row in blocks of {BLOCK} alternating with raw UDP, {machine}"
        );
        println!(
            "{:<10} {:<11} {:>7} {:>12} {:>12} {:>12} {:>12} {:>8}",
            "mode",
            "placement",
            "size",
            "tether p50",
            "tether p99",
            "UDP p50",
            "UDP p99",
            "p50 ×UDP"
        );
        for (busy, pl, size, o, r) in &rows {
            println!(
                "{:<10} {:<11} {:>7} {:>10.1}µs {:>10.1}µs {:>10.1}µs {:>10.1}µs {:>8.2}",
                if *busy { "busy-poll" } else { "blocking" },
                pl.name(),
                size,
                o.p50,
                o.p99,
                r.p50,
                r.p99,
                o.p50 / r.p50
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The kernel's ceiling: a raw UDP sendto loop to a counting process, same sizes.
fn raw_udp_throughput(
    cfg: &Config,
    duration: f64,
    size: usize,
    busy: bool,
) -> anyhow::Result<(u64, f64, u64, f64)> {
    let bc = bench_cfg(cfg.clone())?;
    let mut peer = Peer::spawn(&bc, "udp-sink", busy, busy.then_some(1))?;
    let port: u16 = peer.line()?.parse().context("udp-sink port")?;
    // Unconnected, like tether's socket.
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    let dest: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let buf = vec![0x5au8; size];
    let t0 = Instant::now();
    let d = crate::topic::secs("--duration", duration)?;
    let mut sent = 0u64;
    while t0.elapsed() < d {
        for _ in 0..64 {
            if sock.send_to(&buf, dest).is_ok() {
                sent += 1;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    peer.send("report")?;
    let v: serde_json::Value = serde_json::from_str(&peer.line()?).context("sink report")?;
    Ok((
        sent,
        secs,
        v["count"].as_u64().unwrap_or(0),
        v["secs"].as_f64().unwrap_or(0.0).max(1e-9),
    ))
}

fn throughput(
    cfg: Config,
    duration: f64,
    sizes: &[usize],
    mode: ModeArg,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let machine = machine();
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let mut modes = Vec::new();
    if mode != ModeArg::BusyPoll {
        modes.push(false);
    }
    if mode != ModeArg::Blocking && two {
        modes.push(true);
    }
    let mut rows = Vec::new();
    for &busy in &modes {
        // A spinning receiver must not share the sender's CPU.
        pin(busy.then_some(0));
        for &size in sizes {
            let (sent, ss, count, secs) = raw_udp_throughput(&cfg, duration, size, busy)?;
            rows.push((busy, "raw UDP", size, sent, ss, count, secs));
        }
        for (reliable, batched) in [(false, false), (true, false), (false, true), (true, true)] {
            for &size in sizes {
                let bc = bench_cfg(cfg.clone())?;
                let mut peer = Peer::spawn(
                    &bc,
                    if reliable { "sink-reliable" } else { "sink" },
                    busy,
                    busy.then_some(1),
                )?;
                let session = Session::open(bc.base.clone())?;
                let mut qos = if reliable {
                    Qos::default().keep_all()
                } else {
                    Qos::default().best_effort().keep_last(1)
                };
                if batched {
                    qos = qos.batching(tether::Batching::default());
                }
                let p = session.publisher(THR, qos)?;
                wait_matched(|| p.matched() >= 1)?;
                let payload = Bytes::from(vec![0x5au8; size]);
                let t0 = Instant::now();
                let d = crate::topic::secs("--duration", duration)?;
                let mut sent = 0u64;
                while t0.elapsed() < d {
                    for _ in 0..64 {
                        p.put(payload.clone())?;
                    }
                    sent += 64;
                }
                p.flush();
                let send_secs = t0.elapsed().as_secs_f64();
                if reliable {
                    p.wait_for_acknowledgments(Duration::from_secs(30));
                } else {
                    std::thread::sleep(Duration::from_millis(300));
                }
                peer.send("report")?;
                let line = peer.line()?;
                let v: serde_json::Value = serde_json::from_str(&line).context("sink report")?;
                let count = v["count"].as_u64().unwrap_or(0);
                let secs = v["secs"].as_f64().unwrap_or(0.0).max(1e-9);
                rows.push((
                    busy,
                    match (reliable, batched) {
                        (false, false) => "best_effort",
                        (true, false) => "reliable keep_all",
                        (false, true) => "best_effort batched",
                        (true, true) => "reliable batched",
                    },
                    size,
                    sent,
                    send_secs,
                    count,
                    secs,
                ));
            }
        }
    }
    pin(None);
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(busy, qos, size, sent, ss, count, secs)| {
                json!({
                    "receiver": if *busy { "busy-poll" } else { "blocking" },
                    "qos": qos,
                    "size": size, "sent": sent, "sent_per_s": *sent as f64 / ss,
                    "received": count, "received_per_s": *count as f64 / secs,
                    "delivered_fraction": *count as f64 / *sent as f64,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"bench": "throughput", "machine": machine, "results": v})
            )?
        );
    } else {
        println!(
            "tether bench throughput — two processes on loopback, {duration} s per row, {machine}"
        );
        println!(
            "{:<10} {:<18} {:>6} {:>12} {:>12} {:>10}",
            "receiver", "qos", "size", "sent/s", "received/s", "delivered"
        );
        for (busy, qos, size, sent, ss, count, secs) in &rows {
            println!(
                "{:<10} {:<18} {:>6} {:>12.0} {:>12.0} {:>9.1}%",
                if *busy { "busy-poll" } else { "blocking" },
                qos,
                size,
                *sent as f64 / ss,
                *count as f64 / secs,
                100.0 * *count as f64 / *sent as f64
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `tether bench-peer ROLE`: exits when its stdin closes.
pub(crate) fn peer(mut cfg: Config, a: PeerArgs) -> anyhow::Result<ExitCode> {
    cfg.transport.busy_poll = a.busy_poll;
    if let Some(c) = a.cpu {
        pin(Some(c));
    }
    match a.role {
        Role::UdpEcho => {
            let sock = UdpSocket::bind("127.0.0.1:0")?;
            println!("{}", sock.local_addr()?.port());
            std::io::stdout().flush()?;
            let busy = Arc::new(std::sync::atomic::AtomicBool::new(a.busy_poll));
            let b2 = busy.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65_536];
                let mut cur = None;
                loop {
                    let want = b2.load(Ordering::Relaxed);
                    if cur != Some(want) {
                        let _ = sock.set_nonblocking(want);
                        let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
                        cur = Some(want);
                    }
                    match sock.recv_from(&mut buf) {
                        Ok((n, from)) => {
                            let _ = sock.send_to(&buf[..n], from);
                        }
                        Err(_) => std::hint::spin_loop(),
                    }
                }
            });
            serve_commands(|on| busy.store(on, Ordering::SeqCst))?;
        }
        Role::Pong => {
            let session = Session::open(cfg)?;
            let p: Arc<Publisher> = Arc::new(session.publisher(PONG, Qos::default())?);
            let p2 = p.clone();
            let _s = session.subscriber_with_callback(PING, Qos::default(), move |s| {
                let _ = p2.put(s.payload);
            })?;
            serve_commands(|on| session.set_busy_poll(on))?;
        }
        Role::UdpSink => {
            let sock = UdpSocket::bind("127.0.0.1:0")?;
            socket_rcvbuf(&sock, 16 << 20);
            println!("{}", sock.local_addr()?.port());
            std::io::stdout().flush()?;
            let count = Arc::new(AtomicU64::new(0));
            let first = Arc::new(Mutex::new(None::<Instant>));
            let last = Arc::new(Mutex::new(Instant::now()));
            let (c2, f2, l2) = (count.clone(), first.clone(), last.clone());
            let busy = a.busy_poll;
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65_536];
                let _ = sock.set_nonblocking(busy);
                loop {
                    if sock.recv(&mut buf).is_err() {
                        std::hint::spin_loop();
                        continue;
                    }
                    if c2.fetch_add(1, Ordering::Relaxed) == 0 {
                        *f2.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                    }
                    *l2.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                }
            });
            report_loop(&count, &first, &last)?;
        }
        Role::Ack => crate::paper::ack_peer(cfg)?,
        Role::BulkSink => crate::bulk::sink(cfg)?,
        Role::Sink | Role::SinkReliable => {
            let session = Session::open(cfg)?;
            let qos = if matches!(a.role, Role::SinkReliable) {
                Qos::default().keep_all()
            } else {
                Qos::default().best_effort().keep_last(1)
            };
            let count = Arc::new(AtomicU64::new(0));
            let first = Arc::new(Mutex::new(None::<Instant>));
            let last = Arc::new(Mutex::new(Instant::now()));
            let (c2, f2, l2) = (count.clone(), first.clone(), last.clone());
            let _s = session.subscriber_with_callback(THR, qos, move |_s| {
                if c2.fetch_add(1, Ordering::Relaxed) == 0 {
                    *f2.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                }
                *l2.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            })?;
            report_loop(&count, &first, &last)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Waits up to 20 s for the benchmark's endpoints to match, then lets discovery settle.
fn wait_matched(matched: impl Fn() -> bool) -> anyhow::Result<()> {
    let end = Instant::now() + Duration::from_secs(20);
    while !matched() {
        if Instant::now() > end {
            bail!("the benchmark peer did not match within 20 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    Ok(())
}

/// Answers each `report` line on stdin with the count and span since the last report.
fn report_loop(
    count: &AtomicU64,
    first: &Mutex<Option<Instant>>,
    last: &Mutex<Instant>,
) -> anyhow::Result<()> {
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "report" {
            let n = count.swap(0, Ordering::Relaxed);
            let f = first.lock().unwrap_or_else(|p| p.into_inner()).take();
            let l = *last.lock().unwrap_or_else(|p| p.into_inner());
            let secs = f.map_or(0.0, |f| (l - f).as_secs_f64());
            println!("{}", json!({"count": n, "secs": secs}));
            std::io::stdout().flush()?;
        }
    }
    Ok(())
}

/// The same receive buffer as tether's own sockets (16 MiB), so the comparison is fair.
fn socket_rcvbuf(sock: &UdpSocket, size: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt on a valid fd with a pointer to a live c_int and its size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Pins the calling thread (and threads it creates afterwards) to `cpu`, or unpins it.
pub(crate) fn pin(cpu: Option<usize>) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it;
    // sched_setaffinity reads it for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        match cpu {
            Some(c) => libc::CPU_SET(c, &mut set),
            None => {
                for c in 0..std::thread::available_parallelism().map_or(1, |n| n.get()) {
                    libc::CPU_SET(c, &mut set);
                }
            }
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Where the two processes of a latency measurement run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Each process on its own CPU: every hop wakes the other CPU.
    CrossCore,
    /// Both processes on one CPU: every hop is a context switch.
    SameCore,
}

impl Placement {
    fn cpus(self) -> (usize, usize) {
        match self {
            Placement::CrossCore => (0, 1),
            Placement::SameCore => (0, 0),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Placement::CrossCore => "cross-core",
            Placement::SameCore => "same-core",
        }
    }
}

/// Reads `busy` / `block` lines from stdin, applies them and answers `ok`, until EOF.
fn serve_commands(mut set_busy: impl FnMut(bool)) -> anyhow::Result<()> {
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "busy" => set_busy(true),
            "block" => set_busy(false),
            _ => continue,
        }
        // Let the switch take effect before the parent measures.
        std::thread::sleep(Duration::from_millis(20));
        println!("ok");
        std::io::stdout().flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::quantile;

    /// Nearest rank from the first element to the last: the median of an even count is
    /// the upper middle, the ends are the extremes, an out-of-range quantile is clamped,
    /// and nothing comes of nothing.
    #[test]
    fn quantile_takes_the_nearest_rank() {
        let v = [10, 20, 30, 40];
        assert_eq!(quantile(&v, 0.0), Some(10));
        assert_eq!(quantile(&v, 0.5), Some(30));
        assert_eq!(quantile(&v, 1.0), Some(40));
        assert_eq!(quantile(&v, 2.0), Some(40));
        assert_eq!(quantile(&[7], 0.99), Some(7));
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&hundred, 0.99), Some(99));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
