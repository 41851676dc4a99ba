//! Quantiles, summaries and confidence intervals: every experiment's figures go through
//! these.

use serde_json::Value;

/// The `q` quantile (0 to 1) of `sorted` by nearest rank: the element at `q` of the way
/// from the first to the last. None when empty. Every bench's percentiles go through it.
pub(crate) fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    let last = sorted.len().checked_sub(1)?;
    sorted
        .get(((last as f64 * q.clamp(0.0, 1.0)).round() as usize).min(last))
        .copied()
}

/// The median of `v` (the mean of the middle two for an even count); None when empty.
pub(crate) fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Mean, min, max and standard deviation of times in ms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Summary {
    pub(crate) mean: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) stddev: f64,
}

/// The [`Summary`] of `v` (population standard deviation).
pub(crate) fn summarize(v: &[f64]) -> Summary {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    Summary {
        mean,
        min: v.iter().cloned().fold(f64::MAX, f64::min),
        max: v.iter().cloned().fold(0.0, f64::max),
        stddev: var.sqrt(),
    }
}

/// Runs against base runs, paired by repetition (each repetition runs every mode and every
/// subscriber count back to back, so what drifts on the host between repetitions, often
/// more than the runs differ, cancels out of each pair): the geometric mean of the
/// per-repetition ratios of field `k` (mean communication time, publisher CPU per sample),
/// with its 95 % confidence interval (Student's t on the logs; None for the interval below
/// two pairs). None without a pair.
pub(crate) fn paired_ratio(
    base: &[Value],
    other: &[Value],
    k: &str,
) -> Option<(f64, Option<(f64, f64)>)> {
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
    let half = t975(n - 1) * (var / n as f64).sqrt();
    Some((m.exp(), Some(((m - half).exp(), (m + half).exp()))))
}

/// The two-sided 97.5 % quantile of Student's t with `df` degrees of freedom (the normal
/// one beyond 30).
fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    df.checked_sub(1)
        .and_then(|i| T.get(i))
        .copied()
        .unwrap_or(1.96)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    fn runs(means: &[f64]) -> Vec<Value> {
        means.iter().map(|m| json!({"mean_us": m})).collect()
    }

    /// Plain drifts from 100 to 200 µs over the repetitions and group sits 10 % above it in
    /// each: the ratio of the means says so only roughly, the paired ratio exactly, with an
    /// interval that closes on it; a pair that differs widens the interval, and one pair
    /// gives no interval.
    #[test]
    fn paired_ratio_cancels_drift_between_repetitions() {
        let plain = runs(&[100.0, 200.0, 150.0]);
        let group = runs(&[110.0, 220.0, 165.0]);
        let (r, ci) = paired_ratio(&plain, &group, "mean_us").unwrap();
        assert!((r - 1.1).abs() < 1e-9, "{r}");
        let (lo, hi) = ci.unwrap();
        assert!(
            (lo - 1.1).abs() < 1e-9 && (hi - 1.1).abs() < 1e-9,
            "{lo} {hi}"
        );
        let noisy = runs(&[110.0, 260.0, 150.0]);
        let (r, ci) = paired_ratio(&plain, &noisy, "mean_us").unwrap();
        let (lo, hi) = ci.unwrap();
        assert!(lo < 1.0 && hi > 1.3 && lo < r && r < hi, "{lo} {r} {hi}");
        let (r, ci) = paired_ratio(&plain[..1], &group[..1], "mean_us").unwrap();
        assert!((r - 1.1).abs() < 1e-9 && ci.is_none());
        assert!(paired_ratio(&[], &group, "mean_us").is_none());
    }

    /// The t quantile for 1 degree of freedom, 30, and the normal one beyond.
    #[test]
    fn t_quantiles_at_the_table_ends() {
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(30), 2.042);
        assert_eq!(t975(31), 1.96);
    }
}
