//! Tests of `bench fanout`'s analysis.

use serde_json::{Value, json};

use super::report::{avg, publisher_scaling, schedule, steal_adjusted};
use super::{Fanout, FanoutArgs, Mode};

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
