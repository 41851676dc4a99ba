//! The 001 paper's experiments (`tether bench batch`, `tether bench large`): a publisher sends
//! n samples as fast as it is allowed, and the time is taken from the first `put` until the
//! reader, having received the n-th sample, answers with an acknowledgement sample.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use serde_json::json;
use tether::{Batching, Config, Qos, Session};

use crate::harness::stats::{Summary, summarize};
use crate::harness::{Peer, bench_cfg, machine};

const DATA: &str = "/bench/paper/data";
const ACK: &str = "/bench/paper/ack";

/// One publisher session against one acknowledging peer process. Fields drop in order: the
/// peer's stdin closes first, so the peer exits before `Peer::drop` waits for it.
struct Rig {
    peer_cmd: Peer2,
    publisher: tether::Publisher,
    _ack_sub: tether::Subscriber,
    acked: Arc<(Mutex<u64>, Condvar)>,
    _session: Session,
    _peer: Peer,
}

/// The peer's stdin, to announce how many samples each round carries.
struct Peer2(std::process::ChildStdin);

impl Rig {
    fn new(cfg: &Config, qos: Qos) -> anyhow::Result<Rig> {
        let bc = bench_cfg(cfg.clone())?;
        let mut peer = Peer::spawn(&bc, "ack", false, None)?;
        let stdin = peer.stdin.take().context("peer stdin")?;
        let session = Session::open(bc.base.clone())?;
        let acked = Arc::new((Mutex::new(0u64), Condvar::new()));
        let a2 = acked.clone();
        let ack_sub =
            session.subscriber_with_callback(ACK, Qos::default().keep_all(), move |_| {
                let (m, cv) = &*a2;
                *m.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                cv.notify_all();
            })?;
        let publisher = session.publisher(DATA, qos)?;
        let end = Instant::now() + Duration::from_secs(20);
        while publisher.matched() < 1 {
            if Instant::now() > end {
                bail!("the acknowledging peer did not match within 20 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(200));
        Ok(Rig {
            peer_cmd: Peer2(stdin),
            publisher,
            _ack_sub: ack_sub,
            acked,
            _session: session,
            _peer: peer,
        })
    }

    /// Sends `samples` and returns ms from the first put to the acknowledgement.
    fn round(&mut self, samples: &[Bytes]) -> anyhow::Result<f64> {
        let before = *self.acked.0.lock().unwrap_or_else(|p| p.into_inner());
        writeln!(self.peer_cmd.0, "{}", samples.len())?;
        self.peer_cmd.0.flush()?;
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        for s in samples {
            self.publisher.put(s.clone())?;
        }
        self.publisher.flush();
        let (m, cv) = &*self.acked;
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        let (_g, to) = cv
            .wait_timeout_while(g, Duration::from_secs(120), |n| *n <= before)
            .unwrap_or_else(|p| p.into_inner());
        if to.timed_out() {
            bail!("no acknowledgement within 120 s");
        }
        Ok(t0.elapsed().as_secs_f64() * 1e3)
    }
}

/// `tether bench-peer ack`: counts samples on DATA; after the count announced on stdin, it
/// publishes one acknowledgement on ACK.
pub(crate) fn ack_peer(cfg: Config) -> anyhow::Result<()> {
    let session = Session::open(cfg)?;
    let ack = Arc::new(session.publisher(ACK, Qos::default().keep_all())?);
    let state = Arc::new(Mutex::new((0u64, u64::MAX)));
    let (s2, a2) = (state.clone(), ack.clone());
    let _sub = session.subscriber_with_callback(DATA, Qos::default().keep_all(), move |_| {
        let mut g = s2.lock().unwrap_or_else(|p| p.into_inner());
        g.0 += 1;
        if g.0 == g.1 {
            g.0 = 0;
            g.1 = u64::MAX;
            drop(g);
            let _ = a2.put(&b"done"[..]);
        }
    })?;
    for line in std::io::BufRead::lines(std::io::stdin().lock()) {
        let Ok(line) = line else { break };
        if let Ok(n) = line.trim().parse::<u64>() {
            let mut g = state.lock().unwrap_or_else(|p| p.into_inner());
            g.0 = 0;
            g.1 = n;
        }
    }
    Ok(())
}

/// Paper 001, Table 2 (RTI Connext 5.0, two PCs, 1 GbE): ms for n samples and the echo.
const PAPER_BATCH: &[(usize, usize, f64, f64)] = &[
    (3000, 256, 106.3, 61.9),
    (3000, 512, 159.8, 98.8),
    (3000, 1024, 274.3, 174.8),
    (10000, 256, 257.3, 146.8),
    (10000, 512, 437.1, 226.6),
    (10000, 1024, 787.4, 468.3),
];

pub(crate) fn batch(
    cfg: Config,
    counts: &[usize],
    sizes: &[usize],
    reps: usize,
    json: bool,
) -> anyhow::Result<()> {
    let machine = machine();
    let mut rows: Vec<BatchRow> = Vec::new();
    let base = Qos::default().keep_all().max_samples(16384);
    let modes = [
        ("unbatched", base),
        ("coalescing", base.coalescing(Batching::default())),
        ("batching", base.batching(Batching::default())),
    ];
    // One publisher and one acknowledging peer per mode, measured in turn within each
    // repetition, so the machine's noise falls on every mode alike.
    let mut rigs = modes
        .iter()
        .map(|(_, q)| Rig::new(&cfg, *q))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for &n in counts {
        for &size in sizes {
            let samples: Vec<Bytes> = (0..n).map(|_| Bytes::from(vec![0x42u8; size])).collect();
            let mut t = vec![Vec::with_capacity(reps); modes.len()];
            for rig in rigs.iter_mut() {
                rig.round(&samples)?; // warm-up
            }
            for _ in 0..reps {
                for (i, rig) in rigs.iter_mut().enumerate() {
                    t[i].push(rig.round(&samples)?);
                }
            }
            for (i, (mode, _)) in modes.iter().enumerate() {
                rows.push((*mode, n, size, summarize(&t[i])));
            }
        }
    }
    print_batch(&machine, counts, sizes, reps, json, &rows)
}

/// One row of `bench batch`: mode, n, size, and the times.
type BatchRow = (&'static str, usize, usize, Summary);

fn print_batch(
    machine: &str,
    counts: &[usize],
    sizes: &[usize],
    reps: usize,
    json: bool,
    rows: &[BatchRow],
) -> anyhow::Result<()> {
    let paper = |n: usize, size: usize| {
        PAPER_BATCH
            .iter()
            .find(|p| p.0 == n && p.1 == size)
            .map(|p| (p.2, p.3))
    };
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(mode, n, size, s)| {
                json!({"mode": mode, "n": n, "size": size, "mean_ms": s.mean, "min_ms": s.min,
                       "max_ms": s.max, "stddev_ms": s.stddev,
                       "paper_coalescing_ms": paper(*n, *size).map(|p| p.0),
                       "paper_batching_ms": paper(*n, *size).map(|p| p.1)})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"bench": "batch", "machine": machine, "reps": reps, "results": v})
            )?
        );
    } else {
        println!(
            "tether bench batch — n reliable samples, first put to the reader's echo, {reps} repetitions, {machine}"
        );
        println!(
            "{:<10} {:>6} {:>5} {:>10} {:>9} {:>9} {:>8}   {:>17} {:>15}",
            "mode",
            "n",
            "size",
            "mean ms",
            "min",
            "max",
            "stddev",
            "paper coalescing",
            "paper batching"
        );
        for (mode, n, size, s) in rows {
            let (pc, pb) = paper(*n, *size).map_or(("-".into(), "-".into()), |p| {
                (format!("{:.1}", p.0), format!("{:.1}", p.1))
            });
            println!(
                "{:<10} {:>6} {:>5} {:>10.2} {:>9.2} {:>9.2} {:>8.2}   {:>17} {:>15}",
                mode, n, size, s.mean, s.min, s.max, s.stddev, pc, pb
            );
        }
        for &n in counts {
            for &size in sizes {
                let get = |m: &str| {
                    rows.iter()
                        .find(|r| r.0 == m && r.1 == n && r.2 == size)
                        .map(|r| r.3.mean)
                };
                if let (Some(u), Some(c), Some(b)) =
                    (get("unbatched"), get("coalescing"), get("batching"))
                {
                    println!(
                        "n = {n}, {size} B: batching {:.1}× faster than unbatched, coalescing {:.1}×; batching {:.1}× faster than coalescing (paper: {})",
                        u / b,
                        u / c,
                        c / b,
                        paper(n, size).map_or("-".into(), |p| format!("{:.1}×", p.0 / p.1))
                    );
                }
            }
        }
    }
    Ok(())
}

/// Paper 001 (5 MB sent as chunks of a given topic size), ms.
const PAPER_LARGE: &[(usize, f64)] = &[
    (5 << 20, 57.9),
    (1 << 20, 51.9),
    (512 << 10, 53.9),
    (256 << 10, 58.8),
    (1024, 155.7),
    (512, 217.2),
];

pub(crate) fn large(
    cfg: Config,
    total: usize,
    chunks: &[usize],
    reps: usize,
    json: bool,
) -> anyhow::Result<()> {
    let machine = machine();
    let mut rows = Vec::new();
    let qos = Qos::default()
        .keep_all()
        .max_samples(16384)
        .max_bytes(256 << 20);
    let mut rig = Rig::new(&cfg, qos)?;
    let sets: Vec<Vec<Bytes>> = chunks
        .iter()
        .map(|&chunk| {
            let n = total.div_ceil(chunk);
            (0..n)
                .map(|i| Bytes::from(vec![i as u8; chunk.min(total - i * chunk)]))
                .collect()
        })
        .collect();
    for s in &sets {
        rig.round(s)?; // warm-up
    }
    // Every chunk size once per repetition, in turn, so noise falls on all alike.
    let mut t = vec![Vec::with_capacity(reps); chunks.len()];
    for _ in 0..reps {
        for (i, s) in sets.iter().enumerate() {
            t[i].push(rig.round(s)?);
        }
    }
    for (i, &chunk) in chunks.iter().enumerate() {
        rows.push((chunk, sets[i].len(), summarize(&t[i])));
    }
    print_large(&machine, total, reps, json, &rows)
}

fn print_large(
    machine: &str,
    total: usize,
    reps: usize,
    json: bool,
    rows: &[(usize, usize, Summary)],
) -> anyhow::Result<()> {
    let paper = |chunk: usize| PAPER_LARGE.iter().find(|p| p.0 == chunk).map(|p| p.1);
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(chunk, n, s)| {
                json!({"chunk": chunk, "samples": n, "mean_ms": s.mean, "min_ms": s.min,
                       "max_ms": s.max, "stddev_ms": s.stddev, "paper_ms": paper(*chunk)})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"bench": "large", "machine": machine, "total": total, "reps": reps, "results": v})
            )?
        );
    } else {
        println!(
            "tether bench large — {total} bytes as chunks, reliable, first put to the reader's echo, {reps} repetitions, {machine}"
        );
        println!(
            "{:>9} {:>7} {:>10} {:>9} {:>9} {:>8} {:>10}",
            "chunk", "samples", "mean ms", "min", "max", "stddev", "paper ms"
        );
        for (chunk, n, s) in rows {
            println!(
                "{:>9} {:>7} {:>10.2} {:>9.2} {:>9.2} {:>8.2} {:>10}",
                chunk,
                n,
                s.mean,
                s.min,
                s.max,
                s.stddev,
                paper(*chunk).map_or("-".into(), |p| format!("{p:.1}"))
            );
        }
        let whole = rows.iter().find(|r| r.0 >= total);
        let best = rows
            .iter()
            .filter(|r| r.0 < total)
            .min_by(|a, b| a.2.mean.total_cmp(&b.2.mean));
        if let (Some(w), Some(b)) = (whole, best) {
            println!(
                "one {total} B sample fragmented by tether: {:.2} ms; best chunk size ({} B): {:.2} ms; ratio {:.2}",
                w.2.mean,
                b.0,
                b.2.mean,
                w.2.mean / b.2.mean
            );
        }
    }
    Ok(())
}
