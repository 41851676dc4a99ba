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
//!
//! The modules: `peer` (the two child processes), `report` (rows, summaries, scaling);
//! the run itself is here.

mod peer;
mod report;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use tether::Config;

pub use peer::{FanoutPeerArgs, peer};
use report::{print_row, publisher_scaling, row, schedule, summarize};

use crate::harness::cpu::{CpuTicks, PollIdle, cpus, is_root};
use crate::harness::lan::{Lan, RECEIVER_IP, SENDER_IP};
use crate::harness::realm::{self, Member};
use crate::harness::{BenchCfg, Peer, bench_cfg, machine};

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

fn topic(i: usize) -> String {
    format!("/fanout/{i}")
}

/// The paper's Table 3 (seconds): subscribers, plain, cipher.
const PAPER: [(usize, f64, f64); 5] = [
    (2, 0.0024, 0.0023),
    (4, 0.0036, 0.0041),
    (6, 0.0054, 0.0075),
    (8, 0.0077, 0.0104),
    (10, 0.0116, 0.0274),
];

/// What every run of one `tether bench fanout` shares: the hosts (if namespaces), the
/// private domain, the settings and the realm.
struct Rig<'a> {
    lan: Option<&'a Lan>,
    bc: &'a BenchCfg,
    a: &'a FanoutArgs,
    realm: &'a Path,
}

impl Rig<'_> {
    /// `tether bench-fanout ROLE`: `count` publishers' or subscribers' sessions.
    fn spawn(
        &self,
        fanout: Fanout,
        role: &str,
        count: usize,
        mode: Mode,
        extra: &[String],
    ) -> anyhow::Result<Peer> {
        let Rig { lan, bc, a, realm } = *self;
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
                args.extend(["--ip".into(), SENDER_IP.to_string()]);
                if cpus() >= 2 {
                    args.extend(["--cpu".into(), "0".into()]);
                }
                l.senders()
            } else {
                // The other CPU, as the other machines they stand for: their threads do not
                // evict the publisher's caches between samples.
                args.extend(["--ip".into(), RECEIVER_IP.to_string()]);
                if cpus() >= 2 {
                    args.extend(["--cpu".into(), "1".into()]);
                }
                l.receivers()
            }
        });
        Peer::spawn_with(ns, crate::FANOUT_SUBCOMMAND, &args)
    }

    /// One run: `n` subscribers, one mode. Returns the publishers' and the subscribers' reports.
    fn run_one(&self, fanout: Fanout, n: usize, mode: Mode) -> anyhow::Result<(Value, Value)> {
        let mut p = self.spawn(
            fanout,
            "pub",
            self.a.publishers,
            mode,
            &["--subscribers".into(), n.to_string()],
        )?;
        let addrs = p.line()?;
        let addrs = addrs
            .strip_prefix("addrs ")
            .context("publishers did not report their addresses")?
            .to_string();
        let mut s = self.spawn(fanout, "sub", n, mode, &["--peers".into(), addrs])?;
        if s.line()? != "ready" {
            bail!("subscribers did not start");
        }
        if p.line()? != "matched" {
            bail!("publishers did not match");
        }
        // Let the last KEYs and acknowledgements settle.
        std::thread::sleep(Duration::from_millis(300));
        s.send("start")?;
        let st0 = CpuTicks::now();
        p.send("go")?;
        let mut pr: Value = serde_json::from_str(&p.line()?).context("publishers' report")?;
        // Time the hypervisor ran something else on this machine's vCPUs while the samples
        // flowed: it stalls publishers and subscribers alike, and it is what makes one run's
        // mean differ from the next.
        if let (Some(t0), Some(t1)) = (st0, CpuTicks::now()) {
            pr["steal_pct"] = json!(t1.steal_pct_since(t0).unwrap_or(0.0));
        }
        std::thread::sleep(Duration::from_millis(300));
        s.send("report")?;
        let sr: Value = serde_json::from_str(&s.line()?).context("subscribers' report")?;
        Ok((pr, sr))
    }

    /// Every repetition of every subscriber count in every mode with one kind of fan-out:
    /// appends each run's row, each count's summary and the publisher's scaling.
    fn sweep(
        &self,
        fanout: Fanout,
        rows: &mut Vec<Value>,
        summary: &mut Vec<Value>,
        scaling: &mut Vec<Value>,
    ) -> anyhow::Result<()> {
        let a = self.a;
        // Every subscriber count and every mode within each repetition, so drift on the
        // machine (the host's CPU steal comes and goes over minutes) falls on all alike and
        // cancels out of the paired ratios: between modes at one count, and between counts
        // in one mode. runs[count][mode] holds one row per repetition, in order.
        let mut runs: Vec<Vec<Vec<Value>>> = vec![vec![vec![]; a.modes.len()]; a.subs.len()];
        for (rep, c, k) in schedule(a.reps, a.subs.len(), a.modes.len()) {
            let (n, mode) = (a.subs[c], a.modes[k]);
            let (pr, sr) = self
                .run_one(fanout, n, mode)
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
            summary.extend(summarize(a, fanout, n, &by_mode));
        }
        scaling.extend(publisher_scaling(a, fanout, &runs));
        Ok(())
    }
}

/// `tether bench fanout`.
pub(crate) fn run(cfg: Config, mut a: FanoutArgs) -> anyhow::Result<()> {
    if a.fanout.is_empty() {
        a.fanout = if is_root() {
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
    let bc = bench_cfg(cfg)?;
    let realm = realm(&bc, &a)?;
    if !a.json {
        print_header(&a, lan.as_ref());
    }
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    let mut scaling = Vec::new();
    let rig = Rig {
        lan: lan.as_ref(),
        bc: &bc,
        a: &a,
        realm: &realm,
    };
    for &fanout in &a.fanout {
        rig.sweep(fanout, &mut rows, &mut summary, &mut scaling)?;
    }
    if a.json {
        println!(
            "{}",
            json!({
                "bench": "fanout",
                "hosts": if lan.is_some() { "two namespaces, veth" } else { "loopback" },
                "machine": machine(),
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
    Ok(())
}

/// The benchmark's realm in its private directory: a credential per publisher and per
/// subscriber, granting `/fanout/**`.
fn realm(bc: &BenchCfg, a: &FanoutArgs) -> anyhow::Result<PathBuf> {
    let dir = bc.dir().join("realm");
    let grant = vec!["/fanout/**".to_string()];
    let most = a.subs.iter().copied().max().unwrap_or(0);
    let members: Vec<Member> = (0..a.publishers)
        .map(|i| Member {
            name: format!("pub{i}"),
            publish: grant.clone(),
            subscribe: vec![],
        })
        .chain((0..most).map(|j| Member {
            name: format!("sub{j}"),
            publish: vec![],
            subscribe: grant.clone(),
        }))
        .collect();
    realm::create(&dir, &members)?;
    Ok(dir)
}

/// The table's title and column heads.
fn print_header(a: &FanoutArgs, lan: Option<&Lan>) {
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
        machine(),
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
