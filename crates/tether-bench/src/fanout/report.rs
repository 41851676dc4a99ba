//! What `tether bench fanout` reports: each run's row, each subscriber count's summary
//! per mode, and the publisher's CPU against the subscriber count.

use serde_json::{Value, json};

use super::{Fanout, FanoutArgs, Mode, PAPER};
use crate::harness::stats::paired_ratio;

pub(super) fn avg(v: &[Value], k: &str) -> f64 {
    v.iter()
        .map(|r| r[k].as_f64().unwrap_or(f64::NAN))
        .sum::<f64>()
        / v.len().max(1) as f64
}

pub(super) fn fold(v: &[Value], k: &str, f: fn(f64, f64) -> f64) -> f64 {
    v.iter()
        .map(|r| r[k].as_f64().unwrap_or(f64::NAN))
        .reduce(f)
        .unwrap_or(f64::NAN)
}

/// Each mode's mean communication time at the same steal: the runs' means less a common
/// slope (µs per % of steal, fitted within each mode, so differences between modes do not
/// bend it) times how far the mode's runs' steal was from all runs' (analysis of
/// covariance). The modes ran in turn, so the host stole more during some modes' runs than
/// others'; this compares them as if it had stolen alike. Returns the slope and, per mode,
/// the adjusted mean (None without steal figures).
pub(super) fn steal_adjusted(by_mode: &[(Mode, Vec<Value>)]) -> Option<(f64, Vec<f64>)> {
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

pub(super) fn row(n: usize, mode: Mode, rep: usize, pr: &Value, sr: &Value) -> Value {
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

pub(super) fn print_row(r: &Value) {
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

/// The order of the runs, as (repetition, count, mode) indices: each repetition runs every
/// count and every mode. Every other repetition runs the counts in reverse order (2 100,
/// 100 2, ...), and the modes alternate with each run of a count, so what drifts between
/// consecutive runs falls on each count and each mode alike.
pub(super) fn schedule(reps: usize, counts: usize, modes: usize) -> Vec<(usize, usize, usize)> {
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
pub(super) fn summarize(
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
pub(super) fn publisher_scaling(
    a: &FanoutArgs,
    fanout: Fanout,
    runs: &[Vec<Vec<Value>>],
) -> Vec<Value> {
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
