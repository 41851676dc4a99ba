//! `tether bench wan`: the 004 paper's Figure 7 and Table I on loopback, security on.
//!
//! Three paths between this process and a peer process, all members of one throwaway realm:
//! `direct` (discovery on localhost, no router), `1 router` (both sessions dial one
//! `tether router` process, discovery off) and `2 routers` (this session dials a site router
//! that dials a cloud router, which the peer dials). Measured on each:
//!
//! - RTT: `bench latency`'s ping-pong (the peer echoes every sample back), blocking receive,
//!   for each size, in blocks that rotate over the paths so all see the same machine; and
//!   one large reliable sample (13 MB by default) a few times, its round trip and whether
//!   the echo is byte for byte what was sent.
//! - Throughput: `bench throughput`'s put loop of 1,000 B samples into a counting peer,
//!   direct and through one router, in turn; and the QUIC link alone ([`link`]) carrying the
//!   same payload in frames as large as the router path's, what a direct session-to-session
//!   QUIC link could carry at best.
//!
//! Loopback has no link delay (no netem here): what the RTTs show is what a router hop
//! costs, not a WAN.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use serde_json::{Value, json};
use tether::{Config, Session};

use crate::command::ShapeArg;
use crate::harness::realm::plain_config;
use crate::harness::routers::{self, RouterProc};
use crate::harness::stats::quantile;
use crate::harness::{BenchCfg, Peer, SecureSide, machine, secure_bench_cfg};
use crate::loopback::{Counts, PingPong, add, put_loop, received_rate};

mod delay;
mod link;
use delay::DelayRow;

use crate::rib::StartTimes;

/// Round trips per block; the paths take turns block by block.
const BLOCK: usize = 200;

/// The 004 paper's Figure 7 (robot → cloud RTT, s) and Table I (1,000 B messages on a LAN,
/// msg/s).
const PAPER_RTT_SMALL_S: f64 = 0.076;
const PAPER_RTT_8000_S: f64 = 0.088;
const PAPER_RTT_VPN_S: f64 = 0.097;
const PAPER_RTT_ROSBRIDGE_S: f64 = 1.67;
const PAPER_THROUGHPUT: [(&str, f64); 5] = [
    ("ROS2", 330.0),
    ("SROS2", 320.0),
    ("rosbridge", 153.0),
    ("SGC-TCP", 268.0),
    ("SGC", 320.0),
];

/// `tether bench wan`.
#[derive(Args, Debug, Clone)]
pub(crate) struct WanArgs {
    /// Sample sizes of the RTT rows, in bytes.
    #[arg(long, value_delimiter = ',', default_value = "64,1000,8000")]
    sizes: Vec<usize>,
    /// Round trips per size and path.
    #[arg(long, default_value_t = 2000)]
    samples: usize,
    /// The large sample's size in bytes (0: not measured); the paper's SGC failed at 13 MB.
    #[arg(long, default_value_t = 13_000_000)]
    large: usize,
    /// Round trips of the large sample per path.
    #[arg(long, default_value_t = 3)]
    large_reps: usize,
    /// Seconds per throughput measurement (0: no throughput rows).
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Throughput: the writer's QoS (rows), each direct and through one router.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "reliable,reliable-batched"
    )]
    qos: Vec<ShapeArg>,
    /// Throughput measurements per row and path (direct and router alternate).
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Also measure the RTT between two hosts (two network namespaces joined by a veth;
    /// needs root and iptables), directly and through one router beside the far host, over
    /// a link delaying each packet this many ms each way (NFQUEUE). 0: the same two hosts
    /// with no delay added, where the difference is what the router hop adds over a
    /// direct path between hosts. Not given: not measured.
    #[arg(long)]
    delay_ms: Option<f64>,
    /// Round trips per size and path over the delayed link.
    #[arg(long, default_value_t = 200)]
    delay_samples: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// A path between the two sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Direct,
    OneRouter,
    TwoRouters,
}

impl Path {
    const ALL: [Path; 3] = [Path::Direct, Path::OneRouter, Path::TwoRouters];

    fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::OneRouter => "1 router",
            Path::TwoRouters => "2 routers",
        }
    }

    /// Router traversals one way.
    fn hops(self) -> f64 {
        match self {
            Path::Direct => 0.0,
            Path::OneRouter => 1.0,
            Path::TwoRouters => 2.0,
        }
    }
}

/// The routers of a run: `alone` for the one-router path, and for the two-router path
/// `cloud` and `site` dialling it. The two paths' routers are not linked: the paths' sessions
/// share a domain and topics, and must not meet.
struct Routers {
    alone: RouterProc,
    cloud: RouterProc,
    site: RouterProc,
}

impl Routers {
    fn start(side: &SecureSide, domain: u16) -> anyhow::Result<Routers> {
        let dir = side.realm_dir().context("the realm's directory")?;
        let alone = RouterProc::spawn(dir, "cloud", domain, &[])?;
        let cloud = RouterProc::spawn(dir, "cloud", domain, &[])?;
        let site = RouterProc::spawn(dir, "site", domain, &[cloud.port()])?;
        Ok(Routers { alone, cloud, site })
    }

    /// The configuration of `path`'s sessions: a private registry in `side`'s realm; through
    /// routers, discovery off.
    fn cfg(&self, plain: &Config, side: &SecureSide, path: Path) -> anyhow::Result<BenchCfg> {
        let bc = secure_bench_cfg(plain, side)?;
        Ok(match path {
            Path::Direct => bc,
            Path::OneRouter => {
                let alone = [self.alone.address()];
                bc.via_routers(&alone, &alone)
            }
            Path::TwoRouters => bc.via_routers(&[self.site.address()], &[self.cloud.address()]),
        })
    }
}

/// One throughput row: the writer's QoS, direct and through one router, and the samples per
/// second the QUIC link alone carries in frames as large as the router path's.
struct ThroughputRow {
    qos: &'static str,
    direct: Counts,
    routed: Counts,
    link: f64,
}

/// RTT percentiles in µs.
#[derive(Debug, Clone, Copy)]
struct Rtt {
    p50: f64,
    p99: f64,
}

fn rtt(v: &mut [u64]) -> Rtt {
    v.sort_unstable();
    let at = |q: f64| quantile(v, q).unwrap_or(0) as f64 / 1e3;
    Rtt {
        p50: at(0.5),
        p99: at(0.99),
    }
}

/// The large sample on one path: round-trip times in ms, and whether each echo was intact
/// (or why the path failed).
struct Large {
    path: Path,
    ms: Vec<f64>,
    intact: bool,
    error: Option<String>,
}

pub(crate) fn run(cfg: Config, a: WanArgs) -> anyhow::Result<()> {
    if a.qos.contains(&ShapeArg::Raw) {
        bail!("--qos: raw UDP has no router path; give tether rows only");
    }
    if a.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let machine = machine();
    let plain = plain_config(&cfg);
    let side = routers::realm(&["/bench/**"])?;
    let domain = secure_bench_cfg(&plain, &side)?.domain();
    let routers = Routers::start(&side, domain)?;

    // RTT: one ping-pong per path, open together; blocks rotate over them.
    let cfgs: Vec<BenchCfg> = Path::ALL
        .iter()
        .map(|&p| routers.cfg(&plain, &side, p))
        .collect::<anyhow::Result<_>>()?;
    let pairs: Vec<PingPong> = cfgs
        .iter()
        .zip(Path::ALL)
        .map(|(bc, p)| PingPong::open(bc, None).with_context(|| format!("path {}", p.name())))
        .collect::<anyhow::Result<_>>()?;
    let mut rtts: Vec<(usize, [Rtt; 3])> = Vec::new();
    for &size in &a.sizes {
        let mut got: [Vec<u64>; 3] = Default::default();
        let blocks = a.samples.div_ceil(BLOCK).max(1);
        for b in 0..blocks {
            let n = BLOCK.min(a.samples.saturating_sub(b * BLOCK)).max(1);
            for k in 0..3 {
                // Each path leads in turn.
                let i = (b + k) % 3;
                got[i].extend(
                    pairs[i]
                        .run(size, n)
                        .with_context(|| format!("{} B over {}", size, Path::ALL[i].name()))?,
                );
            }
        }
        rtts.push((size, got.each_mut().map(|v| rtt(v))));
    }
    let mut large = Vec::new();
    if a.large > 0 {
        let payload = pattern(a.large);
        for (pp, &path) in pairs.iter().zip(&Path::ALL) {
            large.push(large_sample(pp, path, &payload, a.large_reps));
        }
    }
    drop(pairs);
    drop(cfgs);

    // Throughput: direct and one router, in turn, then the QUIC link alone.
    let mut thr: Vec<ThroughputRow> = Vec::new();
    if a.duration > 0.0 {
        for shape in &a.qos {
            let (name, flags) = match shape {
                ShapeArg::Raw => continue,
                ShapeArg::BestEffort => ("best_effort", (false, false)),
                ShapeArg::Reliable => ("reliable keep_all", (true, false)),
                ShapeArg::BestEffortBatched => ("best_effort batched", (false, true)),
                ShapeArg::ReliableBatched => ("reliable batched", (true, true)),
            };
            let role = if flags.0 { "sink-reliable" } else { "sink" };
            let zero = (0, 0.0, 0, 0.0);
            let (mut direct, mut routed) = (zero, zero);
            let (mut link_samples, mut link_secs) = (0.0, 0.0);
            for r in 0..a.reps {
                let order = if (thr.len() + r) % 2 == 0 {
                    [Path::Direct, Path::OneRouter]
                } else {
                    [Path::OneRouter, Path::Direct]
                };
                for path in order {
                    let bc = routers.cfg(&plain, &side, path)?;
                    let mut peer = Peer::spawn(&bc, role, false, None)?;
                    let session = Session::open(bc.base.clone())?;
                    let c = put_loop(&session, true, &mut peer, a.duration, 1000, flags)
                        .with_context(|| format!("throughput over {}", path.name()))?;
                    match path {
                        Path::Direct => direct = add(direct, c),
                        _ => {
                            routed = add(routed, c);
                            // The link alone carries frames as large as this path's were.
                            let frames = session.stats().router_frames_sent.max(1);
                            let per_frame = (c.0 as f64 / frames as f64).max(1.0);
                            drop(session);
                            drop(peer);
                            let l = link::measure(
                                &side,
                                routers::ROUTERS[0],
                                (per_frame * 1000.0) as usize,
                                a.duration,
                            )
                            .context("the QUIC link alone")?;
                            link_samples += l.frames as f64 * per_frame;
                            link_secs += l.secs;
                        }
                    }
                }
            }
            thr.push(ThroughputRow {
                qos: name,
                direct,
                routed,
                link: link_samples / link_secs.max(1e-9),
            });
        }
    }
    drop(routers);
    let delayed = if let Some(ms) = a.delay_ms {
        if !(ms >= 0.0 && ms.is_finite()) {
            bail!("--delay-ms must be 0 or more");
        }
        let d = Duration::from_secs_f64(ms / 1e3);
        let (rows, starts) = delay::measure(&plain, &side, d, &a.sizes, a.delay_samples)
            .context("RTT over the delayed link")?;
        (rows, Some(starts))
    } else {
        (Vec::new(), None)
    };
    let report = Report {
        machine,
        realm: side.describe(),
        samples: a.samples,
        duration: a.duration,
        reps: a.reps,
        delay_ms: a.delay_ms.unwrap_or(0.0),
    };
    if a.json {
        report.json(&rtts, &large, &thr, &delayed)
    } else {
        report.table(&rtts, &large, &thr, &delayed);
        Ok(())
    }
}

/// `n` bytes that differ from place to place, so that a misplaced fragment shows.
fn pattern(n: usize) -> Bytes {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// `reps` round trips of `payload` on `pp`, one at a time; a failure is reported, not
/// raised (the paper's SGC failed here).
fn large_sample(pp: &PingPong, path: Path, payload: &Bytes, reps: usize) -> Large {
    let mut out = Large {
        path,
        ms: Vec::new(),
        intact: true,
        error: None,
    };
    for _ in 0..reps.max(1) {
        match pp.round_trips(payload.clone(), 0, 1) {
            Ok((t, echo)) => {
                out.ms.extend(t.iter().map(|&ns| ns as f64 / 1e6));
                out.intact &= echo == *payload;
            }
            Err(e) => {
                out.intact = false;
                out.error = Some(format!("{e:#}"));
                break;
            }
        }
        // Let the previous sample's acknowledgements settle.
        std::thread::sleep(Duration::from_millis(50));
    }
    out
}

/// What a wan report says of its run.
struct Report {
    machine: String,
    realm: String,
    samples: usize,
    duration: f64,
    reps: usize,
    delay_ms: f64,
}

impl Report {
    fn json(
        &self,
        rtts: &[(usize, [Rtt; 3])],
        large: &[Large],
        thr: &[ThroughputRow],
        (delayed, starts): &(Vec<DelayRow>, Option<StartTimes>),
    ) -> anyhow::Result<()> {
        let rtt_rows: Vec<Value> = rtts
            .iter()
            .flat_map(|(size, r)| {
                Path::ALL.iter().zip(r).map(move |(p, x)| {
                    json!({
                        "size": size, "path": p.name(), "rtt_p50_us": x.p50,
                        "rtt_p99_us": x.p99,
                        "added_one_way_per_hop_p50_us": added_per_hop(*p, x, &r[0]),
                        "added_one_way_by_second_router_p50_us":
                            (*p == Path::TwoRouters).then(|| second_router(r)),
                    })
                })
            })
            .collect();
        let large_rows: Vec<Value> = large
            .iter()
            .map(|l| {
                json!({
                    "path": l.path.name(), "rtt_ms": l.ms, "intact": l.intact,
                    "error": l.error,
                })
            })
            .collect();
        let thr_rows: Vec<Value> = thr
            .iter()
            .map(|t| {
                let (d, r) = (&t.direct, &t.routed);
                json!({
                    "qos": t.qos, "size": 1000,
                    "direct_received_per_s": received_rate(d),
                    "direct_delivered_fraction": d.2 as f64 / d.0.max(1) as f64,
                    "router_received_per_s": received_rate(r),
                    "router_delivered_fraction": r.2 as f64 / r.0.max(1) as f64,
                    "router_over_direct": received_rate(r) / received_rate(d),
                    "quic_link_alone_per_s": t.link,
                    "router_over_quic_link_alone": received_rate(r) / t.link,
                })
            })
            .collect();
        let delay_rows: Vec<Value> = delayed
            .iter()
            .map(|d| {
                json!({
                    "size": d.size, "delay_ms_each_way": self.delay_ms,
                    "direct_rtt_p50_us": d.direct.p50, "direct_rtt_p99_us": d.direct.p99,
                    "router_rtt_p50_us": d.routed.p50, "router_rtt_p99_us": d.routed.p99,
                    "router_over_direct_p50": d.ratio(),
                    "added_one_way_by_the_router_p50_us": d.added_one_way(),
                })
            })
            .collect();
        let paper_thr: serde_json::Map<String, Value> = PAPER_THROUGHPUT
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "bench": "wan", "machine": self.machine, "hosts": "loopback (no link delay)",
                "secure_realm": self.realm, "samples": self.samples,
                "duration_s": self.duration, "reps": self.reps,
                "rtt": rtt_rows, "large": large_rows, "throughput": thr_rows,
                "delayed_link": delay_rows,
                "delayed_link_start_to_first_ms": starts.as_ref().map(|t| json!({
                    "starts": t.first.len(),
                    "open_p50": t.ms(&t.open, 0.5), "link_up_p50": t.ms(&t.linked, 0.5),
                    "matched_p50": t.ms(&t.matched, 0.5), "first_p50": t.ms(&t.first, 0.5),
                    "first_max": t.ms(&t.first, 1.0),
                })),
                "paper": {
                    "rtt_small_s": PAPER_RTT_SMALL_S, "rtt_8000_s": PAPER_RTT_8000_S,
                    "rtt_vpn_s": PAPER_RTT_VPN_S, "rtt_rosbridge_s": PAPER_RTT_ROSBRIDGE_S,
                    "throughput_1000_per_s": paper_thr,
                },
            }))?
        );
        Ok(())
    }

    fn table(
        &self,
        rtts: &[(usize, [Rtt; 3])],
        large: &[Large],
        thr: &[ThroughputRow],
        (delayed, starts): &(Vec<DelayRow>, Option<StartTimes>),
    ) {
        println!(
            "tether bench wan — loopback, no link delay (no netem here: the RTTs are a router \
             hop's cost, not a WAN's), security on ({}), {}",
            self.realm, self.machine
        );
        println!(
            "RTT (ping-pong, blocking receive), {} round trips per size and path in blocks of \
             {BLOCK} rotating over the paths; \"+hop\" is the added one-way time per router \
             hop, (RTT − direct RTT) / (2 × routers)",
            self.samples
        );
        println!(
            "paper (004, Figure 7, robot → cloud): {:.0} ms small, {:.0} ms at 8,000 B (VPN \
             {:.0} ms, rosbridge {:.0} ms); bar: one hop adds ≤ 50 µs p50",
            PAPER_RTT_SMALL_S * 1e3,
            PAPER_RTT_8000_S * 1e3,
            PAPER_RTT_VPN_S * 1e3,
            PAPER_RTT_ROSBRIDGE_S * 1e3
        );
        println!(
            "{:>7} {:<10} {:>12} {:>12} {:>10} {:>12}",
            "size", "path", "RTT p50", "RTT p99", "+hop p50", "paper"
        );
        for (size, r) in rtts {
            let paper = match size {
                8000 => format!("{:.0} ms", PAPER_RTT_8000_S * 1e3),
                s if *s < 8000 => format!("{:.0} ms", PAPER_RTT_SMALL_S * 1e3),
                _ => "-".into(),
            };
            for (p, x) in Path::ALL.iter().zip(r) {
                let hop = added_per_hop(*p, x, &r[0])
                    .map_or_else(|| "-".to_string(), |h| format!("{h:.1}µs"));
                println!(
                    "{:>7} {:<10} {:>10.1}µs {:>10.1}µs {:>10} {:>12}",
                    size,
                    p.name(),
                    x.p50,
                    x.p99,
                    hop,
                    if *p == Path::Direct { "" } else { &paper }
                );
            }
            println!(
                "{:>7} the second router adds {:.1}µs one way, (RTT 2 routers − RTT 1 router) / 2",
                "",
                second_router(r)
            );
        }
        for l in large {
            let mut ms = l.ms.clone();
            let times: Vec<String> = ms.iter().map(|t| format!("{t:.0}")).collect();
            let med = crate::harness::stats::median(&mut ms);
            println!(
                "large sample over {:<9}: RTT {} ms (median {}), {}{}",
                l.path.name(),
                times.join(", "),
                med.map_or_else(|| "-".into(), |m| format!("{m:.0}")),
                if l.intact { "intact" } else { "NOT intact" },
                l.error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(" — failed: {e}"))
            );
        }
        if !delayed.is_empty() {
            if self.delay_ms > 0.0 {
                println!(
                    "RTT over a link delaying each packet {} ms each way (two network \
                     namespaces, NFQUEUE), directly and through one router beside the far \
                     host; bar: through the router ≤ 1.1 × direct",
                    self.delay_ms
                );
            } else {
                println!(
                    "RTT between two hosts (two network namespaces joined by a veth, no delay \
                     added), directly and through one router beside the far host; \"+hop\" is \
                     what the router adds one way, (router − direct) / 2"
                );
            }
            println!(
                "{:>7} {:>12} {:>12} {:>12} {:>12} {:>8} {:>10}",
                "size",
                "direct p50",
                "direct p99",
                "router p50",
                "router p99",
                "÷direct",
                "+hop p50"
            );
            for d in delayed {
                println!(
                    "{:>7} {:>10.3}ms {:>10.3}ms {:>10.3}ms {:>10.3}ms {:>8.3} {:>8.1}µs",
                    d.size,
                    d.direct.p50 / 1e3,
                    d.direct.p99 / 1e3,
                    d.routed.p50 / 1e3,
                    d.routed.p99 / 1e3,
                    d.ratio(),
                    d.added_one_way()
                );
            }
            if let Some(t) = starts {
                println!(
                    "start to first message through the router across that link ({} new \
                     sessions on the near host, a publisher on the far one, security on): p50 \
                     {:.2} ms (Session::open returned at {:.2} ms, router link up at {:.2} ms, \
                     matched at {:.2} ms), max {:.2} ms",
                    t.first.len(),
                    t.ms(&t.first, 0.5),
                    t.ms(&t.open, 0.5),
                    t.ms(&t.linked, 0.5),
                    t.ms(&t.matched, 0.5),
                    t.ms(&t.first, 1.0)
                );
            }
        }
        if thr.is_empty() {
            return;
        }
        println!(
            "throughput of 1,000 B samples, {} s per measurement, {} per path and row; paper \
             (004, Table I, LAN): {}; bars: ≥ 250,000/s batched and ≥ 0.5 × a direct \
             session-to-session QUIC link (\"link\": the QUIC link alone, no session at either \
             end, carrying the same payload in frames as large as the router path's: the most \
             such a link could carry)",
            self.duration,
            self.reps,
            PAPER_THROUGHPUT
                .iter()
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!(
            "{:<19} {:>12} {:>10} {:>12} {:>10} {:>9} {:>10} {:>7} {:>10}",
            "qos",
            "direct rx/s",
            "delivered",
            "router rx/s",
            "delivered",
            "÷direct",
            "link /s",
            "÷link",
            "×SGC"
        );
        for t in thr {
            let (d, r) = (&t.direct, &t.routed);
            println!(
                "{:<19} {:>12.0} {:>9.1}% {:>12.0} {:>9.1}% {:>9.2} {:>10.0} {:>7.2} {:>10.0}",
                t.qos,
                received_rate(d),
                100.0 * d.2 as f64 / d.0.max(1) as f64,
                received_rate(r),
                100.0 * r.2 as f64 / r.0.max(1) as f64,
                received_rate(r) / received_rate(d),
                t.link,
                received_rate(r) / t.link,
                received_rate(r) / 320.0
            );
        }
    }
}

/// The added one-way time per router hop at the median, in µs: (RTT − direct RTT) over the
/// router traversals of a round trip. None for the direct path.
fn added_per_hop(path: Path, x: &Rtt, direct: &Rtt) -> Option<f64> {
    (path.hops() > 0.0).then(|| (x.p50 - direct.p50) / (2.0 * path.hops()))
}

/// What the second router of the two-router path adds one way at the median, in µs: the
/// cost of one more router and one more QUIC link, (RTT 2 routers − RTT 1 router) / 2.
fn second_router(r: &[Rtt; 3]) -> f64 {
    (r[2].p50 - r[1].p50) / 2.0
}
