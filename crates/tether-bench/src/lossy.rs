//! `tether bench lossy`: reliable delivery across a real link that loses frames. Two hosts
//! (network namespaces joined by a veth pair, MTU 1500, every datagram its own frame), the
//! receivers' host dropping a share of the frames that arrive (an nftables rule at its
//! veth's ingress, per frame, as Wi-Fi loses them). For each loss rate:
//!
//! - **goodput**: a reliable keep-all writer publishing numbered samples as fast as it is
//!   allowed (a full history blocks `put`) for `--duration` seconds, unbatched and batched;
//!   the figure is the samples delivered, in order, divided by the time from the first
//!   `put` until every sample was acknowledged (the repair tail included);
//! - **large**: one sample of `--large` bytes (4 MiB), from `put` to its arrival at the
//!   reader, repeated.
//!
//! The sink checks that samples arrive exactly once and in order (each payload starts with
//! its number) and says so; the report puts each loss rate beside the lossless figure of
//! the same run, with issue 16's bars: goodput at 20 % loss at least half the lossless one,
//! a 4 MiB sample at 20 % loss in at most three times its lossless time.
//!
//! With the cargo feature `zenoh`, Zenoh's TCP transport crosses the same link under the
//! same loss rule beside tether, measured the same way (`zenoh_peer`), and each loss rate
//! says how tether's goodput compares with Zenoh's in the same run. Without it the report
//! says the Zenoh rows were skipped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::{BufMut, Bytes, BytesMut};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use tether::{Config, Qos, Session};

use crate::harness::cpu::{cpus, pin};
use crate::harness::lan::{Lan, in_namespace, sender_and_sink};
use crate::harness::process::{Peer, read_line, say};
use crate::harness::stats::median;
use crate::harness::{bench_cfg, machine, secs, wait_matched, wall_ns};

#[cfg(feature = "zenoh")]
mod zenoh_peer;

#[cfg(feature = "zenoh")]
pub(crate) use zenoh_peer::sink as zenoh_sink;

/// `zenoh-sink` in a build without the feature `zenoh`: there is no Zenoh to run.
#[cfg(not(feature = "zenoh"))]
pub(crate) fn zenoh_sink(_ip: Option<std::net::IpAddr>) -> anyhow::Result<()> {
    bail!("this tether was built without the feature `zenoh`")
}

/// What the report says in a build without Zenoh.
#[cfg(not(feature = "zenoh"))]
const ZENOH_SKIPPED: &str = "zenoh rows skipped: this tether was built without the `zenoh` \
     feature (cargo run --release --features zenoh --bin tether -- bench lossy)";

/// The topic of the lossy rows.
const TOPIC: &str = "/bench/lossy";

/// How long the writer waits for every sample to be acknowledged after it stops putting.
const DRAIN: Duration = Duration::from_secs(120);

/// `tether bench lossy`.
#[derive(Args, Debug, Clone)]
pub(crate) struct LossyArgs {
    /// Frame loss at the receivers' ingress, in percent, one row set each.
    #[arg(long, value_delimiter = ',', default_value = "0,1,5,20")]
    loss: Vec<u8>,
    /// Bytes per sample of the goodput rows.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Seconds of publishing per goodput row.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// The goodput rows to measure.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "unbatched,batched"
    )]
    shapes: Vec<Shape>,
    /// Samples the writer may hold unacknowledged (its keep-all history's `max_samples`;
    /// default the QoS default).
    #[arg(long)]
    window: Option<u32>,
    /// Bytes of the large sample (0: no large rows).
    #[arg(long, default_value_t = 4 << 20)]
    large: usize,
    /// Large samples timed per loss rate (after one untimed).
    #[arg(long, default_value_t = 5)]
    large_reps: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// A goodput row's writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Shape {
    /// One datagram per sample.
    Unbatched,
    /// `Qos::batching` with its defaults.
    Batched,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Unbatched => "reliable keep_all",
            Shape::Batched => "reliable keep_all batched",
        }
    }
}

/// What the sink saw, from its `report`.
#[derive(Debug, Default, Clone, Copy)]
struct SinkReport {
    count: u64,
    /// Samples that did not carry the next number (a duplicate, a gap or a reordering).
    disorder: u64,
    /// Wall-clock time of the last arrival (ns since the Unix epoch).
    last_ns: u64,
    /// The sink session's repair counters: ACKNACKs, NACK_FRAGs, duplicates received.
    acknacks: u64,
    nackfrags: u64,
    duplicates: u64,
}

fn sink_report(peer: &mut Peer) -> anyhow::Result<SinkReport> {
    peer.send("report")?;
    let v: Value = serde_json::from_str(&peer.line()?).context("lossy sink report")?;
    Ok(SinkReport {
        count: v["count"].as_u64().unwrap_or(0),
        disorder: v["disorder"].as_u64().unwrap_or(0),
        last_ns: v["last_ns"].as_u64().unwrap_or(0),
        acknacks: v["acknacks"].as_u64().unwrap_or(0),
        nackfrags: v["nackfrags"].as_u64().unwrap_or(0),
        duplicates: v["duplicates"].as_u64().unwrap_or(0),
    })
}

/// One measured row.
#[derive(Debug, Clone)]
struct Row {
    loss: u8,
    what: &'static str,
    /// Samples put (goodput rows) or timed (large rows).
    sent: u64,
    delivered: u64,
    disorder: u64,
    /// Goodput rows: samples per second delivered, first put to last acknowledgement.
    /// Large rows: the median milliseconds from put to arrival.
    figure: f64,
    /// Whether every sample was acknowledged within the drain time.
    complete: bool,
    /// Frames the loss rule dropped during the row.
    dropped: u64,
    /// The writer's datagrams, and its samples and fragments sent again.
    datagrams: u64,
    resent: u64,
    frags_resent: u64,
    /// The reader's side of the repairs.
    sink: SinkReport,
    /// What the writer's congestion controller knew of the path at the end.
    path: Option<tether::PathStats>,
}

impl Row {
    fn counters(&mut self, session: &Session, sink: SinkReport) {
        let st = session.stats().core;
        self.path = session
            .participants()
            .first()
            .and_then(|(pid, _, _)| session.path_stats(*pid));
        self.datagrams = st.datagrams_sent;
        self.resent = st.samples_retransmitted;
        self.frags_resent = st.fragments_retransmitted;
        self.sink = sink;
    }
}

/// `tether bench lossy`.
pub(crate) fn run(cfg: Config, a: LossyArgs) -> anyhow::Result<()> {
    if a.size < 8 || (a.large > 0 && a.large < 8) {
        bail!("--size and --large must be at least 8 bytes (each sample carries its number)");
    }
    if let Some(l) = a.loss.iter().find(|l| **l > 90) {
        bail!("--loss {l}: at most 90 %");
    }
    let duration = secs("--duration", a.duration)?;
    let lan = Lan::create_with(true)?;
    let two = cpus() >= 2;
    let mut rows = Vec::new();
    for &loss in &a.loss {
        lan.set_receiver_loss(loss)?;
        for &shape in &a.shapes {
            let before = lan.receiver_dropped();
            let mut r = in_namespace(lan.senders(), || {
                pin(two.then_some(0));
                goodput(&lan, &cfg, shape, (a.size, a.window), duration, two)
            })?;
            r.loss = loss;
            r.dropped = lan.receiver_dropped().saturating_sub(before);
            rows.push(r);
        }
        if a.large > 0 {
            let before = lan.receiver_dropped();
            let mut r = in_namespace(lan.senders(), || {
                pin(two.then_some(0));
                large(&lan, &cfg, a.large, a.large_reps, two)
            })?;
            r.loss = loss;
            r.dropped = lan.receiver_dropped().saturating_sub(before);
            rows.push(r);
        }
        #[cfg(feature = "zenoh")]
        zenoh_rows(&lan, &a, (loss, duration, two), &mut rows);
    }
    let machine = machine();
    if a.json {
        print_json(&machine, &a, &rows)
    } else {
        print_table(&machine, &a, &rows);
        Ok(())
    }
}

/// Zenoh's rows at `loss` % (goodput, and large unless `--large 0`), measured as tether's
/// from a thread in the senders' namespace pinned to CPU 0 (with `two` CPUs), pushed to
/// `rows`. A row that fails is left out with a note on stderr: the tether rows stand.
#[cfg(feature = "zenoh")]
fn zenoh_rows(
    lan: &Lan,
    a: &LossyArgs,
    (loss, duration, two): (u8, Duration, bool),
    rows: &mut Vec<Row>,
) {
    let mut measure = |what: &str, f: &(dyn Fn() -> anyhow::Result<Row> + Sync)| {
        let before = lan.receiver_dropped();
        match in_namespace(lan.senders(), || {
            pin(two.then_some(0));
            f()
        }) {
            Ok(mut r) => {
                r.loss = loss;
                r.dropped = lan.receiver_dropped().saturating_sub(before);
                rows.push(r);
            }
            Err(e) => eprintln!("{what} at {loss} % loss not measured: {e:#}"),
        }
    };
    measure(zenoh_peer::GOODPUT, &|| {
        zenoh_peer::goodput(lan, a.size, duration, two)
    });
    if a.large > 0 {
        measure(zenoh_peer::LARGE, &|| {
            zenoh_peer::large(lan, a.large, a.large_reps, two)
        });
    }
}

/// A sample of `size` bytes that starts with its number.
fn numbered(n: u64, size: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(size);
    b.put_u64(n);
    b.resize(size, 0x5a);
    b.freeze()
}

fn goodput(
    lan: &Lan,
    cfg: &Config,
    shape: Shape,
    (size, window): (usize, Option<u32>),
    duration: Duration,
    cpu1: bool,
) -> anyhow::Result<Row> {
    let bc = bench_cfg(cfg.clone())?;
    let (session, mut peer) = sender_and_sink(lan, &bc, "lossy-sink", false, cpu1)?;
    let mut qos = Qos::default().keep_all();
    if let Some(w) = window {
        qos = qos.max_samples(w);
    }
    if shape == Shape::Batched {
        qos = qos.batching(tether::Batching::default());
    }
    let p = session.publisher(TOPIC, qos)?;
    wait_matched(|| p.matched() >= 1)?;
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < duration {
        p.put(numbered(sent, size))
            .map_err(|e| anyhow::anyhow!("put: {e}"))?;
        sent += 1;
    }
    p.flush();
    let complete = p.wait_for_acknowledgments(DRAIN);
    let secs = t0.elapsed().as_secs_f64();
    let s = sink_report(&mut peer)?;
    let mut r = Row {
        loss: 0,
        what: shape.name(),
        sent,
        delivered: s.count,
        disorder: s.disorder,
        figure: s.count as f64 / secs,
        complete,
        dropped: 0,
        datagrams: 0,
        resent: 0,
        frags_resent: 0,
        sink: s,
        path: None,
    };
    r.counters(&session, s);
    Ok(r)
}

fn large(lan: &Lan, cfg: &Config, bytes: usize, reps: usize, cpu1: bool) -> anyhow::Result<Row> {
    let bc = bench_cfg(cfg.clone())?;
    let (session, mut peer) = sender_and_sink(lan, &bc, "lossy-sink", false, cpu1)?;
    let p = session.publisher(TOPIC, Qos::default().keep_all())?;
    wait_matched(|| p.matched() >= 1)?;
    let mut times = Vec::new();
    let mut complete = true;
    let mut delivered = 0;
    let mut disorder = 0;
    let mut last = SinkReport::default();
    for n in 0..=reps as u64 {
        let payload = numbered(n, bytes);
        let put_ns = wall_ns();
        p.put(payload).map_err(|e| anyhow::anyhow!("put: {e}"))?;
        complete &= p.wait_for_acknowledgments(DRAIN);
        let s = sink_report(&mut peer)?;
        delivered += s.count;
        disorder += s.disorder;
        last = s;
        if n > 0 && s.count == 1 {
            times.push(s.last_ns.saturating_sub(put_ns) as f64 / 1e6);
        }
    }
    let mut r = Row {
        loss: 0,
        what: "large sample",
        sent: reps as u64 + 1,
        delivered,
        disorder,
        figure: median(&mut times).unwrap_or(f64::NAN),
        complete,
        dropped: 0,
        datagrams: 0,
        resent: 0,
        frags_resent: 0,
        sink: last,
        path: None,
    };
    r.counters(&session, last);
    Ok(r)
}

/// `lossy-sink`: counts the lossy topic (reliable keep-all), checking that each sample
/// carries the next number; answers `report` lines with what came since the last one.
pub(crate) fn sink(cfg: Config) -> anyhow::Result<()> {
    let session = Session::open(cfg)?;
    let next = Arc::new(AtomicU64::new(0));
    let count = Arc::new(AtomicU64::new(0));
    let disorder = Arc::new(AtomicU64::new(0));
    let last = Arc::new(AtomicU64::new(0));
    let (n2, c2, d2, l2) = (next.clone(), count.clone(), disorder.clone(), last.clone());
    let _s = session.subscriber_with_callback(TOPIC, Qos::default().keep_all(), move |s| {
        let n = s.payload.get(..8).map_or(u64::MAX, |b| {
            u64::from_be_bytes(b.try_into().unwrap_or([0xff; 8]))
        });
        // One receive thread calls this: plain loads and stores suffice.
        if n != n2.load(Ordering::Relaxed) {
            d2.fetch_add(1, Ordering::Relaxed);
        }
        n2.store(n.wrapping_add(1), Ordering::Relaxed);
        c2.fetch_add(1, Ordering::Relaxed);
        l2.store(wall_ns(), Ordering::Relaxed);
    })?;
    while let Some(line) = read_line()? {
        if line == "report" {
            let st = session.stats().core;
            say(&json!({
                "count": count.swap(0, Ordering::Relaxed),
                "disorder": disorder.swap(0, Ordering::Relaxed),
                "last_ns": last.load(Ordering::Relaxed),
                "acknacks": st.acknacks_sent,
                "nackfrags": st.nackfrags_sent,
                "duplicates": st.duplicates,
            })
            .to_string())?;
        }
    }
    Ok(())
}

impl Row {
    /// Whether the row times large samples (tether's or Zenoh's) rather than goodput.
    fn is_large(&self) -> bool {
        self.what.ends_with("large sample")
    }

    /// Whether the row is Zenoh's.
    fn is_zenoh(&self) -> bool {
        self.what.starts_with("zenoh")
    }
}

/// Each of tether's rows at `loss` % beside Zenoh's of the same kind in the same run:
/// goodput as tether's over Zenoh's, and the large sample's time as tether's over Zenoh's.
fn vs_zenoh(rows: &[Row], loss: u8) -> Vec<(&'static str, f64)> {
    let at = |large: bool| {
        rows.iter()
            .find(|r| r.loss == loss && r.is_zenoh() && r.is_large() == large)
    };
    rows.iter()
        .filter(|r| r.loss == loss && !r.is_zenoh())
        .filter_map(|r| {
            let z = at(r.is_large())?;
            (z.figure > 0.0 && r.figure.is_finite()).then(|| (r.what, r.figure / z.figure))
        })
        .collect()
}

/// The loss rates of the run, in its order, each once.
fn losses(rows: &[Row]) -> Vec<u8> {
    let mut v: Vec<u8> = Vec::new();
    for r in rows {
        if !v.contains(&r.loss) {
            v.push(r.loss);
        }
    }
    v
}

/// The lossless figure of `r`'s kind in the same run.
fn lossless<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter().find(|x| x.loss == 0 && x.what == r.what)
}

/// `r` against its lossless figure: goodput as a fraction of it, large samples as a
/// multiple of its time.
fn ratio(rows: &[Row], r: &Row) -> Option<f64> {
    let base = lossless(rows, r)?;
    (base.figure > 0.0).then(|| r.figure / base.figure)
}

fn print_table(machine: &str, a: &LossyArgs, rows: &[Row]) {
    println!(
        "tether bench lossy — two hosts (network namespaces, veth, MTU 1500, one frame per \
         datagram), frame loss at the receiver's ingress; {} B samples for {} s; {machine}",
        a.size, a.duration
    );
    println!(
        "{:>5} {:<26} {:>8} {:>9} {:>8} {:>14} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "loss",
        "row",
        "sent",
        "received",
        "disorder",
        "figure",
        "vs 0 %",
        "dropped",
        "resent",
        "acknacks",
        "nackfrags"
    );
    for r in rows {
        let (figure, vs) = if r.is_large() {
            (
                format!("{:.1} ms", r.figure),
                ratio(rows, r).map_or("-".into(), |x| format!("{x:.2}x")),
            )
        } else {
            (
                format!("{:.0}/s", r.figure),
                ratio(rows, r).map_or("-".into(), |x| format!("{:.0} %", 100.0 * x)),
            )
        };
        // Zenoh's repairs are TCP's, which the report does not see.
        let [resent, acknacks, nackfrags] = if r.is_zenoh() {
            ["-".to_string(), "-".into(), "-".into()]
        } else {
            [
                (r.resent + r.frags_resent).to_string(),
                r.sink.acknacks.to_string(),
                r.sink.nackfrags.to_string(),
            ]
        };
        println!(
            "{:>4}% {:<26} {:>8} {:>9} {:>8} {:>14} {:>9} {:>9} {:>9} {:>9} {:>9}{}",
            r.loss,
            r.what,
            r.sent,
            r.delivered,
            r.disorder,
            figure,
            vs,
            r.dropped,
            resent,
            acknacks,
            nackfrags,
            match (r.complete, r.is_zenoh()) {
                (true, _) => "",
                (false, false) => "  (not all acknowledged)",
                (false, true) => "  (not all delivered)",
            }
        );
    }
    for loss in losses(rows) {
        let v = vs_zenoh(rows, loss);
        if v.is_empty() {
            continue;
        }
        let parts: Vec<String> = v
            .iter()
            .map(|(what, x)| {
                if what.ends_with("large sample") {
                    format!("{what} time {x:.2}x Zenoh's")
                } else {
                    format!("{what} goodput {x:.2}x Zenoh's")
                }
            })
            .collect();
        println!("tether vs Zenoh at {loss} % loss: {}", parts.join(", "));
    }
    for r in rows.iter().filter(|r| r.loss == 20 && !r.is_zenoh()) {
        let Some(x) = ratio(rows, r) else { continue };
        if r.is_large() {
            println!(
                "bar: {} B at 20 % loss in {x:.2}x its lossless time (at most 3x): {}",
                a.large,
                if x <= 3.0 { "met" } else { "NOT met" }
            );
        } else {
            println!(
                "bar: {} goodput at 20 % loss {:.1} % of lossless (at least 50 %): {}",
                r.what,
                100.0 * x,
                if x >= 0.5 { "met" } else { "NOT met" }
            );
        }
    }
    #[cfg(not(feature = "zenoh"))]
    println!("{ZENOH_SKIPPED}");
}

fn print_json(machine: &str, a: &LossyArgs, rows: &[Row]) -> anyhow::Result<()> {
    let v: Vec<Value> = rows
        .iter()
        .map(|r| {
            let tether = !r.is_zenoh();
            json!({
                "loss_percent": r.loss, "row": r.what, "sent": r.sent,
                "delivered": r.delivered, "disorder": r.disorder,
                "figure": r.figure,
                "unit": if r.is_large() { "ms (median)" } else { "samples/s" },
                "vs_lossless": ratio(rows, r), "complete": r.complete,
                "frames_dropped": r.dropped,
                "writer": tether.then(|| json!({"datagrams": r.datagrams,
                    "samples_resent": r.resent, "fragments_resent": r.frags_resent})),
                "reader": tether.then(|| json!({"acknacks": r.sink.acknacks,
                    "nackfrags": r.sink.nackfrags, "duplicates": r.sink.duplicates})),
                "path": r.path.map(|p| json!({
                    "srtt_us": p.srtt.map(|d| d.as_micros() as u64),
                    "min_rtt_us": p.min_rtt.map(|d| d.as_micros() as u64),
                    "delivery_rate": p.delivery_rate, "window": p.window,
                    "congestion_events": p.congestion_events,
                })),
            })
        })
        .collect();
    let vs: Vec<Value> = losses(rows)
        .into_iter()
        .flat_map(|loss| {
            vs_zenoh(rows, loss).into_iter().map(
                move |(what, x)| json!({"loss_percent": loss, "row": what, "tether_over_zenoh": x}),
            )
        })
        .collect();
    #[cfg(feature = "zenoh")]
    let zenoh = json!({"crate": zenoh_peer::VERSION, "transport": "tcp", "mode": "peer",
        "congestion_control": "block", "vs_zenoh": vs});
    #[cfg(not(feature = "zenoh"))]
    let zenoh = json!({"skipped": ZENOH_SKIPPED, "vs_zenoh": vs});
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "bench": "lossy", "machine": machine, "size": a.size,
            "duration_s": a.duration, "large": a.large, "results": v, "zenoh": zenoh,
        }))?
    );
    Ok(())
}
