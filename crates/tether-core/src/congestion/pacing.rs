//! The pacer of a path's controller: the rate datagrams of samples leave at (a gain on
//! the bottleneck rate, by phase) and the token bucket that spaces them.

use std::time::{Duration, Instant};

use super::{Congestion, MIN_WINDOW, PROBE_MIN};

/// Pacing gains once the path is full, one phase per smallest round trip: probe for more
/// (1.25), drain what that queued (0.75), then cruise (BBR's PROBE_BW cycle).
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];

/// The pacing gain while starting up (BBR's is 2/ln 2 ≈ 2.89; 2 doubles the rate each
/// round, as the window does).
const STARTUP_GAIN: f64 = 2.0;

/// The pacer's largest burst: what the driver's timers can keep up with (its wake-ups are
/// a millisecond apart at best), at least a few datagrams.
const BURST: Duration = Duration::from_millis(2);
pub(super) const MIN_BURST: f64 = 16.0 * 1024.0;

/// What a wake-up of a waiting pacer lets go at least: half a millisecond at the rate,
/// at least a few datagrams.
const QUANTUM: Duration = Duration::from_micros(500);
const MIN_QUANTUM: f64 = 4.0 * 1500.0;

impl Congestion {
    /// The pacing rate at `now`, bytes per second: the gain of the phase times the
    /// bottleneck rate. `None` before a rate is measured (the window alone limits).
    pub(crate) fn pacing_rate(&self, now: Instant) -> Option<f64> {
        if !self.reports || self.bottleneck <= 0.0 {
            return None;
        }
        let gain = if !self.full {
            STARTUP_GAIN
        } else if self.draining.is_some_and(|t| now < t) {
            1.0
        } else {
            let phase = self.phase_length();
            let k = (now.saturating_duration_since(self.cycle_at).as_nanos()
                / phase.as_nanos().max(1)) as usize;
            CYCLE[(self.cycle + k) % CYCLE.len()]
        };
        // Never slower than the smallest window per round trip: a rate measured while the
        // window was small must not keep it small (loss taken for congestion would spiral
        // down to nothing).
        let rtt = self.srtt.unwrap_or(PROBE_MIN).max(PROBE_MIN).as_secs_f64();
        Some((gain * self.bottleneck).max(MIN_WINDOW as f64 / rtt))
    }

    /// One phase of the pacing cycle: the smallest round trip (at least a millisecond).
    pub(super) fn phase_length(&self) -> Duration {
        self.min_rtt.map_or(PROBE_MIN, |(r, _)| r).max(PROBE_MIN)
    }

    /// Bytes the pacer lets go now (may be negative).
    fn tokens_at(&self, now: Instant) -> f64 {
        match self.pacing_rate(now) {
            None => f64::MAX,
            Some(rate) => {
                let dt = now.saturating_duration_since(self.paced_at).as_secs_f64();
                (self.tokens + rate * dt).min(Self::burst(rate))
            }
        }
    }

    /// The largest burst the pacer lets go at `rate`.
    pub(super) fn burst(rate: f64) -> f64 {
        (rate * BURST.as_secs_f64()).max(MIN_BURST)
    }

    /// True if a datagram of samples may leave now: the window has room and the pacer
    /// allows (`total`: bytes sent so far).
    pub(crate) fn may_send(&self, total: u64, now: Instant) -> bool {
        self.has_room(total, now) && self.tokens_at(now) > 0.0
    }

    /// A datagram of `len` bytes of samples leaves now: the pacer is charged.
    pub(crate) fn spend(&mut self, len: usize, now: Instant) {
        if self.pacing_rate(now).is_some() {
            self.tokens = self.tokens_at(now) - len as f64;
            self.paced_at = now;
        }
    }

    /// When the pacer next lets a datagram go, if the window has room (`None`: not until an
    /// answer opens it).
    pub(crate) fn next_send(&self, total: u64, now: Instant) -> Option<Instant> {
        if !self.has_room(total, now) {
            return None;
        }
        let t = self.tokens_at(now);
        if t > 0.0 {
            return Some(now);
        }
        // Not as soon as one byte is earned but a quantum: each wake-up of the driver (a
        // millisecond apart at best) lets a burst go, not one datagram.
        let rate = self.pacing_rate(now)?;
        let quantum = (rate * QUANTUM.as_secs_f64()).clamp(MIN_QUANTUM, Self::burst(rate));
        Some(now + Duration::from_secs_f64((quantum - t) / rate))
    }
}
