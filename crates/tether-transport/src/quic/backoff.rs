//! Waits between attempts to dial again: exponential, jittered, bounded.

use std::time::Duration;

use tether_crypto::Random;

/// Delays between reconnection attempts: the n-th (from 0) is drawn uniformly from
/// `[b/2, b]` where `b = min(max, initial × 2^n)` ("equal jitter": never less than half the
/// exponential step, so peers that lost a router together do not dial it again together).
/// [`reset`](Self::reset) after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
}

impl Default for Backoff {
    /// 100 ms, doubling, up to 10 s.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(10))
    }
}

impl Backoff {
    /// From `initial`, doubling, up to `max` (at least `initial`).
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max: max.max(initial),
            attempt: 0,
        }
    }

    /// Attempts since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Back to the first delay.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The delay before the next attempt, jittered with `rng`.
    pub fn next_delay(&mut self, rng: &mut dyn Random) -> Duration {
        let step = self
            .initial
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let half = step / 2;
        let mut r = [0u8; 8];
        rng.fill(&mut r);
        let span = (step - half).as_nanos() as u64;
        let jitter = if span == 0 {
            0
        } else {
            u64::from_le_bytes(r) % (span + 1)
        };
        half + Duration::from_nanos(jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_crypto::OsRandom;

    #[test]
    fn delays_grow_are_jittered_and_bounded() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut rng = OsRandom;
        let mut seen = Vec::new();
        for n in 0..12u32 {
            let d = b.next_delay(&mut rng);
            let step =
                (Duration::from_millis(100) * 2u32.pow(n.min(10))).min(Duration::from_secs(2));
            assert!(
                d >= step / 2 && d <= step,
                "attempt {n}: {d:?} outside [{:?}, {step:?}]",
                step / 2
            );
            seen.push(d);
        }
        assert_eq!(b.attempts(), 12);
        // Jittered: the capped delays are not all equal.
        seen.dedup();
        assert!(seen.len() > 6);
        b.reset();
        assert!(b.next_delay(&mut rng) <= Duration::from_millis(100));
        // Many attempts do not overflow.
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        for _ in 0..100 {
            assert!(b.next_delay(&mut rng) <= Duration::from_secs(60));
        }
    }
}
