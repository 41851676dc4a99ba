//! `tether bench bulk`: the 001 paper's background transfer (its Table 4). A bulk file of
//! `total` bytes goes in 32 KB samples through an asynchronous bulk-class writer and a
//! token-bucket flow controller, while a 1 kHz, 64 B reliable realtime topic runs on the same
//! session; the realtime topic's one-way latency is measured by the receiving process
//! (receive time − source timestamp, one host clock) with and without the bulk transfer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use serde_json::json;
use tether::{Config, FlowController, Priority, Qos, Session, format_rate};

use crate::harness::cpu::{CpuTicks, steal_pct};
use crate::harness::stats::quantile;
use crate::harness::{Peer, bench_cfg, machine, wall_ns};

const DATA: &str = "/bench/bulk/data";
const RT: &str = "/bench/bulk/rt";
const FLOW: &str = "bench-bulk";

/// Paper 001, Table 4 (RTI Connext 5.0, 1 GbE): tokens per period, ms for 100 MB, network
/// use in %.
const PAPER_BULK: &[(Option<u64>, f64, f64)] = &[
    (None, 5918.0, 12.0),
    (Some(30), 5916.0, 12.0),
    (Some(20), 6005.0, 10.0),
    (Some(10), 12107.0, 6.0),
    (Some(5), 23564.0, 3.5),
    (Some(1), 116765.0, 0.4),
];

/// The bench's settings.
pub(crate) struct BulkArgs {
    pub(crate) total: u64,
    pub(crate) sample: usize,
    pub(crate) tokens: Vec<Option<u64>>,
    pub(crate) period_ms: u64,
    pub(crate) bytes_per_token: u64,
    pub(crate) window: u32,
    pub(crate) idle_secs: f64,
    pub(crate) json: bool,
}

#[derive(Debug, Clone, Copy)]
struct Lat {
    p50: f64,
    p99: f64,
    n: u64,
}

fn parse_lat(line: &str) -> anyhow::Result<Lat> {
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse::<f64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("bad latency line from peer: {line}"))?;
    if v.len() != 3 {
        bail!("bad latency line from peer: {line}");
    }
    Ok(Lat {
        p50: v[0],
        p99: v[1],
        n: v[2] as u64,
    })
}

/// Publishes the realtime topic at 1 kHz until `stop`.
fn realtime(p: tether::Publisher, stop: Arc<AtomicBool>) -> tether::Publisher {
    let period = Duration::from_millis(1);
    let mut next = Instant::now();
    let payload = Bytes::from(vec![0x5au8; 64]);
    while !stop.load(Ordering::Relaxed) {
        let _ = p.put_with_timestamp(payload.clone(), wall_ns());
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    p
}

/// Stops the realtime thread and asks the sink for the latency of what it sent since the
/// last reset. Hands the realtime publisher back for the next phase.
fn end_phase(
    stop: &AtomicBool,
    h: std::thread::JoinHandle<tether::Publisher>,
    peer: &mut Peer,
) -> anyhow::Result<(tether::Publisher, Lat)> {
    stop.store(true, Ordering::Relaxed);
    let p = h
        .join()
        .map_err(|_| anyhow::anyhow!("realtime thread panicked"))?;
    std::thread::sleep(Duration::from_millis(50));
    peer.send("lat")?;
    Ok((p, parse_lat(&peer.line()?)?))
}

struct Row {
    tokens: Option<u64>,
    limit: Option<f64>,
    ms: f64,
    reps: usize,
    rate: f64,
    idle: Lat,
    busy: Lat,
    /// CPU time stolen by the hypervisor during each phase (%).
    idle_steal: Option<f64>,
    busy_steal: Option<f64>,
}

pub(crate) fn run(cfg: Config, a: BulkArgs) -> anyhow::Result<()> {
    if a.sample == 0 || a.total == 0 {
        bail!("--total and --sample must be positive");
    }
    let bc = bench_cfg(cfg)?;
    let mut peer = Peer::spawn(&bc, "bulk-sink", false, None)?;
    let session = Session::open(bc.base.clone())?;
    session.set_flow_controller(FLOW, FlowController::UNLIMITED);
    let bulk = session.publisher(
        DATA,
        Qos::default()
            .keep_all()
            .max_samples(a.window.max(2))
            .asynchronous(Priority::Bulk)
            .flow_controller(FLOW),
    )?;
    let mut rt = Some(session.publisher(RT, Qos::default().keep_all())?);
    let end = Instant::now() + Duration::from_secs(20);
    while bulk.matched() < 1 || rt.as_ref().is_some_and(|r| r.matched() < 1) {
        if Instant::now() > end {
            bail!("the bulk sink did not match within 20 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut rig = Rig {
        a: &a,
        session: &session,
        bulk: &bulk,
        rt: &mut rt,
        peer: &mut peer,
        chunk: Bytes::from(vec![0xb0u8; a.sample]),
    };
    let mut rows = Vec::new();
    for &tokens in &a.tokens {
        rows.push(rig.setting(tokens)?);
    }
    print(&a, &rows)
}

/// What one setting needs: the bench's sessions and the sink.
struct Rig<'a> {
    a: &'a BulkArgs,
    session: &'a Session,
    bulk: &'a tether::Publisher,
    /// The realtime publisher, lent to its thread during each phase.
    rt: &'a mut Option<tether::Publisher>,
    peer: &'a mut Peer,
    chunk: Bytes,
}

impl Rig<'_> {
    /// One row: the realtime topic alone, then beside the transfer at `tokens` per period.
    fn setting(&mut self, tokens: Option<u64>) -> anyhow::Result<Row> {
        let a = self.a;
        let n = a.total.div_ceil(a.sample as u64);
        let idle = Duration::from_secs_f64(a.idle_secs);
        let spec = match tokens {
            None => FlowController::UNLIMITED,
            Some(t) => {
                FlowController::tokens(t, Duration::from_millis(a.period_ms), a.bytes_per_token)
            }
        };
        self.session.set_flow_controller(FLOW, spec);
        // Realtime alone.
        self.peer.send("reset")?;
        self.peer.line()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s2) = (self.rt.take().context("rt")?, stop.clone());
        let h = std::thread::spawn(move || realtime(p, s2));
        let c0 = CpuTicks::now();
        std::thread::sleep(idle);
        let idle_steal = steal_pct(c0, CpuTicks::now());
        let (p, idle_lat) = end_phase(&stop, h, self.peer)?;
        *self.rt = Some(p);
        // Realtime with the bulk transfer.
        self.peer.send("reset")?;
        self.peer.line()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s2) = (self.rt.take().context("rt")?, stop.clone());
        let h = std::thread::spawn(move || realtime(p, s2));
        std::thread::sleep(Duration::from_millis(20));
        // Fast settings repeat the transfer until the realtime topic has run beside bulk
        // traffic for a second (1,000 samples), so its p99 means something.
        let started = Instant::now();
        let c0 = CpuTicks::now();
        let mut times = Vec::new();
        while times.is_empty() || (started.elapsed() < Duration::from_secs(1) && times.len() < 100)
        {
            self.peer.send(&format!("expect {}", n * a.sample as u64))?;
            let t0 = Instant::now();
            let mut last_ack = (self.bulk.acknowledged(), Instant::now());
            for _ in 0..n {
                let mut b = self.chunk.clone();
                loop {
                    match self.bulk.put(b) {
                        Ok(_) => break,
                        Err(
                            tether::PutError::Timeout { payload, .. }
                            | tether::PutError::PathFull { payload, .. },
                        ) => {
                            let ack = self.bulk.acknowledged();
                            if ack != last_ack.0 {
                                last_ack = (ack, Instant::now());
                            } else if last_ack.1.elapsed() > Duration::from_secs(30) {
                                bail!("the bulk sink stopped acknowledging");
                            }
                            b = payload;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            let done = self.peer.line()?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
            if done != "done" {
                bail!("unexpected line from the bulk sink: {done}");
            }
            self.peer.send("reset-bytes")?;
            self.peer.line()?;
        }
        let ms = times.iter().sum::<f64>() / times.len() as f64;
        let busy_steal = steal_pct(c0, CpuTicks::now());
        let (p, busy_lat) = end_phase(&stop, h, self.peer)?;
        *self.rt = Some(p);
        let rate = (n * a.sample as u64) as f64 / (ms / 1e3);
        let row = Row {
            tokens,
            limit: spec.bytes_per_second(),
            ms,
            reps: times.len(),
            rate,
            idle: idle_lat,
            busy: busy_lat,
            idle_steal,
            busy_steal,
        };
        if !a.json {
            eprintln!(
                "  tokens {:>9}: {:>10.0} ms, {:>11}, realtime p99 {:.0} → {:.0} µs, steal {:.0} → {:.0} %",
                tokens.map_or("unlimited".into(), |t| t.to_string()),
                row.ms,
                format_rate(row.rate),
                row.idle.p99,
                row.busy.p99,
                row.idle_steal.unwrap_or(0.0),
                row.busy_steal.unwrap_or(0.0)
            );
        }
        Ok(row)
    }
}

fn print(a: &BulkArgs, rows: &[Row]) -> anyhow::Result<()> {
    let machine = machine();
    let paper = |t: Option<u64>| PAPER_BULK.iter().find(|p| p.0 == t).map(|p| (p.1, p.2));
    let tok = |t: Option<u64>| t.map_or("unlimited".to_string(), |t| t.to_string());
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({"tokens_per_period": r.tokens, "limit_bytes_per_s": r.limit,
                       "ms": r.ms, "transfers": r.reps, "bytes_per_s": r.rate,
                       "rate_error": r.limit.map(|l| r.rate / l - 1.0),
                       "rt_idle_p50_us": r.idle.p50, "rt_idle_p99_us": r.idle.p99,
                       "rt_idle_samples": r.idle.n,
                       "rt_bulk_p50_us": r.busy.p50, "rt_bulk_p99_us": r.busy.p99,
                       "rt_bulk_samples": r.busy.n,
                       "steal_idle_pct": r.idle_steal, "steal_bulk_pct": r.busy_steal,
                       "paper_ms": paper(r.tokens).map(|p| p.0),
                       "paper_network_pct": paper(r.tokens).map(|p| p.1)})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "bench": "bulk", "machine": machine, "total": a.total, "sample": a.sample,
                "period_ms": a.period_ms, "bytes_per_token": a.bytes_per_token,
                "window": a.window, "results": v}))?
        );
        return Ok(());
    }
    println!(
        "tether bench bulk — {} bytes in {} B samples through a flow controller ({} B tokens, {} ms period), with a 1 kHz 64 B reliable realtime topic on the same session; {machine}",
        a.total, a.sample, a.bytes_per_token, a.period_ms
    );
    println!(
        "{:>9} {:>11} {:>10} {:>11} {:>7}   {:>15} {:>15} {:>11}   {:>9} {:>7}",
        "tokens",
        "limit",
        "ms",
        "rate",
        "error",
        "rt idle p50/p99",
        "rt bulk p50/p99",
        "steal i/b %",
        "paper ms",
        "paper %"
    );
    for r in rows {
        let (pm, pp) = paper(r.tokens).map_or(("-".into(), "-".into()), |p| {
            (format!("{:.0}", p.0), format!("{:.1}", p.1))
        });
        let st = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.0}"));
        println!(
            "{:>9} {:>11} {:>10.0} {:>11} {:>7}   {:>15} {:>15} {:>11}   {:>9} {:>7}",
            tok(r.tokens),
            r.limit.map_or("-".into(), format_rate),
            r.ms,
            format_rate(r.rate),
            r.limit.map_or("-".into(), |l| format!(
                "{:+.1}%",
                (r.rate / l - 1.0) * 100.0
            )),
            format!("{:.0}/{:.0} µs", r.idle.p50, r.idle.p99),
            format!("{:.0}/{:.0} µs", r.busy.p50, r.busy.p99),
            format!("{}/{}", st(r.idle_steal), st(r.busy_steal)),
            pm,
            pp
        );
    }
    Ok(())
}

/// `tether bench-peer bulk-sink`: counts bulk bytes and records the realtime topic's
/// one-way latency. Commands on stdin: `reset` (answers `ok`), `expect BYTES` (answers
/// `done` once that many bulk bytes arrived since the reset), `lat` (answers
/// `lat P50_US P99_US N`).
pub(crate) fn sink(cfg: Config) -> anyhow::Result<()> {
    #[derive(Default)]
    struct St {
        bytes: u64,
        expect: Option<u64>,
        lat: Vec<u64>,
    }
    let session = Session::open(cfg)?;
    let st = Arc::new(Mutex::new(St::default()));
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let (s2, o2) = (st.clone(), out.clone());
    let _data = session.subscriber_with_callback(DATA, Qos::default().keep_all(), move |s| {
        let mut g = s2.lock().unwrap_or_else(|p| p.into_inner());
        g.bytes += s.payload.len() as u64;
        if g.expect.is_some_and(|e| g.bytes >= e) {
            g.expect = None;
            use std::io::Write;
            let mut o = o2.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(o, "done");
            let _ = o.flush();
        }
    })?;
    let s3 = st.clone();
    let _rt = session.subscriber_with_callback(RT, Qos::default().keep_all(), move |s| {
        let now = wall_ns();
        let mut g = s3.lock().unwrap_or_else(|p| p.into_inner());
        g.lat.push(now.saturating_sub(s.timestamp_ns));
    })?;
    for line in std::io::BufRead::lines(std::io::stdin().lock()) {
        let Ok(line) = line else { break };
        let reply = {
            let mut g = st.lock().unwrap_or_else(|p| p.into_inner());
            let mut w = line.split_whitespace();
            match (w.next(), w.next()) {
                (Some("reset"), _) => {
                    *g = St::default();
                    Some("ok".to_string())
                }
                (Some("reset-bytes"), _) => {
                    g.bytes = 0;
                    Some("ok".to_string())
                }
                (Some("expect"), Some(n)) => {
                    let n: u64 = n.parse().unwrap_or(0);
                    if g.bytes >= n {
                        Some("done".to_string())
                    } else {
                        g.expect = Some(n);
                        None
                    }
                }
                (Some("lat"), _) => {
                    let mut v = std::mem::take(&mut g.lat);
                    v.sort_unstable();
                    let at = |q: f64| quantile(&v, q).unwrap_or(0) as f64 / 1e3;
                    Some(format!("lat {:.1} {:.1} {}", at(0.5), at(0.99), v.len()))
                }
                _ => None,
            }
        };
        if let Some(r) = reply {
            use std::io::Write;
            let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
            writeln!(o, "{r}")?;
            o.flush()?;
        }
    }
    Ok(())
}
