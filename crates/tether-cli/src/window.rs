//! The sliding window of `hz` and `bw`: the arrival times and sizes of the last N samples
//! (ROS 2's `ros2 topic hz -w`), so that a rate is measured over samples, not over one
//! print period. A topic at 0.1 Hz gets a rate from its second sample on, where a
//! per-second window would never hold two.

use std::collections::VecDeque;
use std::time::Instant;

use crate::topic::human_bytes;

/// The last samples of a topic, and how many came since the last report.
#[derive(Debug)]
pub(crate) struct Window {
    cap: usize,
    samples: VecDeque<(Instant, u64)>,
    fresh: u64,
    /// Every sample since the start, and their bytes (for the summary at the end).
    total: (u64, u64),
}

impl Window {
    /// A window of the last `cap` samples (at least 2).
    pub(crate) fn new(cap: usize) -> Window {
        let cap = cap.max(2);
        Window {
            cap,
            samples: VecDeque::with_capacity(cap.min(1 << 16)),
            fresh: 0,
            total: (0, 0),
        }
    }

    /// A sample of `size` bytes arrived at `at`.
    pub(crate) fn push(&mut self, at: Instant, size: u64) {
        if self.samples.len() == self.cap {
            self.samples.pop_front();
        }
        self.samples.push_back((at, size));
        self.fresh += 1;
        self.total.0 += 1;
        self.total.1 += size;
    }

    /// The samples since the start, and their bytes.
    pub(crate) fn total(&self) -> (u64, u64) {
        self.total
    }

    /// Whether samples came since the last report.
    pub(crate) fn has_news(&self) -> bool {
        self.fresh > 0
    }

    /// `hz`'s report at `now`, and the start of a new period. Nothing before a first
    /// sample.
    pub(crate) fn hz(&mut self, now: Instant) -> Option<String> {
        let fresh = std::mem::take(&mut self.fresh);
        let n = self.samples.len();
        let (&(first, _), &(last, _)) = (self.samples.front()?, self.samples.back()?);
        if fresh == 0 {
            return Some(self.quiet(now, last));
        }
        if n < 2 {
            return Some("1 message so far: the rate needs a second one".into());
        }
        let gaps: Vec<f64> = self
            .samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .map(|(a, b)| (b.0 - a.0).as_secs_f64())
            .collect();
        let mean = (last - first).as_secs_f64() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        let min = gaps.iter().copied().fold(f64::MAX, f64::min);
        let max = gaps.iter().copied().fold(0.0, f64::max);
        let rate = if mean > 0.0 {
            1.0 / mean
        } else {
            f64::INFINITY
        };
        Some(format!(
            "average rate: {rate:.3}\n\tmin: {min:.6}s max: {max:.6}s std dev: {:.6}s window: {n}",
            var.sqrt()
        ))
    }

    /// `bw`'s report at `now`, and the start of a new period. Nothing before a first
    /// sample.
    pub(crate) fn bw(&mut self, now: Instant) -> Option<String> {
        let fresh = std::mem::take(&mut self.fresh);
        let n = self.samples.len();
        let (&(first, first_size), &(last, _)) = (self.samples.front()?, self.samples.back()?);
        if fresh == 0 {
            return Some(self.quiet(now, last));
        }
        if n < 2 {
            return Some(format!(
                "1 message so far ({first_size} B): the bandwidth needs a second one"
            ));
        }
        let total: u64 = self.samples.iter().map(|s| s.1).sum();
        let min = self.samples.iter().map(|s| s.1).min().unwrap_or(0);
        let max = self.samples.iter().map(|s| s.1).max().unwrap_or(0);
        // The bytes that came over the span the window covers: all but the first sample's.
        let span = (last - first).as_secs_f64();
        let bps = if span > 0.0 {
            (total - first_size) as f64 / span
        } else {
            f64::INFINITY
        };
        Some(format!(
            "{}/s from {n} messages\n\tMessage size mean: {} B min: {min} B max: {max} B",
            human_bytes(bps),
            total / n as u64
        ))
    }

    /// The line of a period with no new sample.
    fn quiet(&self, now: Instant, last: Instant) -> String {
        format!(
            "no new messages (the last one {:.1} s ago)",
            now.saturating_duration_since(last).as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// One sample every 10 s: a line for the first, a rate from the second on, and the
    /// periods between say how long it has been.
    #[test]
    fn a_tenth_of_a_hertz_has_a_rate() {
        let t0 = Instant::now();
        let mut w = Window::new(10_000);
        assert_eq!(w.hz(t0), None, "nothing before a first sample");
        w.push(t0, 100);
        assert_eq!(
            w.hz(t0 + Duration::from_millis(300)).unwrap(),
            "1 message so far: the rate needs a second one"
        );
        assert_eq!(
            w.hz(t0 + Duration::from_millis(1300)).unwrap(),
            "no new messages (the last one 1.3 s ago)"
        );
        w.push(t0 + Duration::from_secs(10), 100);
        let r = w.hz(t0 + Duration::from_millis(10_300)).unwrap();
        assert!(r.starts_with("average rate: 0.100\n"), "{r}");
        assert!(r.ends_with("window: 2"), "{r}");
        let mut b = Window::new(100);
        b.push(t0, 100);
        b.push(t0 + Duration::from_secs(10), 100);
        let r = b.bw(t0 + Duration::from_millis(10_300)).unwrap();
        assert!(r.starts_with("10 B/s from 2 messages"), "{r}");
        assert!(r.contains("Message size mean: 100 B"), "{r}");
    }

    /// The window keeps the last N samples: an old burst leaves it.
    #[test]
    fn the_window_slides() {
        let t0 = Instant::now();
        let mut w = Window::new(3);
        for i in 0..10 {
            w.push(t0 + Duration::from_millis(10 * i), 1);
        }
        for i in 1..=3 {
            w.push(t0 + Duration::from_secs(i), 1);
        }
        let r = w.hz(t0 + Duration::from_secs(3)).unwrap();
        assert!(r.starts_with("average rate: 1.000\n"), "{r}");
        assert!(r.ends_with("window: 3"), "{r}");
    }
}
