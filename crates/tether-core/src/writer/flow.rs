//! Asynchronous writers: priority classes and token-bucket flow controllers.
//!
//! A synchronous writer's datagrams leave on the caller's thread, at once, ahead of
//! everything queued. An asynchronous writer's `write` only stores the sample; a sender (the
//! driver's thread, calling [`Participant::poll_scheduled`](crate::Participant::poll_scheduled))
//! takes its datagrams one at a time: the highest [`Priority`] class first, writers of one
//! class in turn, each only while its [`FlowController`] has tokens. Nothing is copied into a
//! queue: a writer keeps a cursor into its history, so a queue is as big as the history the
//! QoS already bounds.

use std::fmt;
use std::time::{Duration, Instant};

/// The class of an asynchronous writer: the sender drains `Realtime` before `Default`
/// before `Bulk`, so bulk data waits whenever anything more urgent is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Priority {
    /// Drained first.
    Realtime,
    /// Drained after realtime.
    #[default]
    Default,
    /// Drained last.
    Bulk,
}

impl Priority {
    /// All classes, most urgent first.
    pub const ALL: [Priority; 3] = [Priority::Realtime, Priority::Default, Priority::Bulk];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Its name in configuration (`realtime`, `default`, `bulk`).
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Realtime => "realtime",
            Priority::Default => "default",
            Priority::Bulk => "bulk",
        }
    }
}

/// A priority name that is not `realtime`, `default` or `bulk`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPriority(pub String);

impl std::fmt::Display for UnknownPriority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown priority '{}' (expected realtime, default or bulk)",
            self.0
        )
    }
}

impl std::error::Error for UnknownPriority {}

impl std::str::FromStr for Priority {
    type Err = UnknownPriority;
    fn from_str(s: &str) -> Result<Self, UnknownPriority> {
        match s {
            "realtime" => Ok(Priority::Realtime),
            "default" => Ok(Priority::Default),
            "bulk" => Ok(Priority::Bulk),
            _ => Err(UnknownPriority(s.to_string())),
        }
    }
}

/// A token bucket, as DDS's flow controllers: every `period`, `tokens_per_period` tokens are
/// added, up to `max_tokens`; a datagram of `n` bytes costs `n / bytes_per_token` tokens
/// (counted in bytes, so fractions are not rounded away) and may leave while the bucket
/// holds anything (it may go into debt, so the long-run rate is exact whatever the datagram
/// size). The rate is `tokens_per_period × bytes_per_token / period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowController {
    /// Tokens added per period; `None` is unlimited.
    pub tokens_per_period: Option<u64>,
    /// The refill period (at least 1 µs).
    pub period: Duration,
    /// Bytes one token pays for (at least 1).
    pub bytes_per_token: u64,
    /// Most tokens the bucket holds (the largest burst); `None` is `tokens_per_period`.
    pub max_tokens: Option<u64>,
}

impl FlowController {
    /// No limit: the writers' datagrams leave as fast as the sender takes them.
    pub const UNLIMITED: FlowController = FlowController {
        tokens_per_period: None,
        period: Duration::from_millis(10),
        bytes_per_token: 1,
        max_tokens: None,
    };

    /// `tokens` per `period` of `bytes_per_token` bytes each.
    pub fn tokens(tokens: u64, period: Duration, bytes_per_token: u64) -> Self {
        FlowController {
            tokens_per_period: Some(tokens),
            period: period.max(Duration::from_micros(1)),
            bytes_per_token: bytes_per_token.max(1),
            max_tokens: None,
        }
    }

    /// A rate in bytes per second (one-byte tokens, refilled every 10 ms, or every second
    /// below 100 B/s).
    pub fn rate(bytes_per_second: u64) -> Self {
        let bps = bytes_per_second.max(1);
        if bps < 100 {
            Self::tokens(bps, Duration::from_secs(1), 1)
        } else {
            Self::tokens(bps.div_ceil(100), Duration::from_millis(10), 1)
        }
    }

    /// The most tokens held.
    pub fn with_max_tokens(mut self, max: u64) -> Self {
        self.max_tokens = Some(max.max(1));
        self
    }

    /// Bytes per second it allows, `None` if unlimited.
    pub fn bytes_per_second(&self) -> Option<f64> {
        let t = self.tokens_per_period?;
        Some(t as f64 * self.bytes_per_token as f64 / self.period.as_secs_f64())
    }

    fn cap(&self) -> u64 {
        self.max_tokens
            .or(self.tokens_per_period)
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

impl fmt::Display for FlowController {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.bytes_per_second() {
            None => write!(f, "unlimited"),
            Some(r) => write!(
                f,
                "{} tokens of {} B per {:?} ({})",
                self.tokens_per_period.unwrap_or(0),
                self.bytes_per_token,
                self.period,
                format_rate(r)
            ),
        }
    }
}

/// `12.3 MB/s` (decimal units, as `parse_rate` reads them).
pub fn format_rate(bytes_per_second: f64) -> String {
    let r = bytes_per_second;
    if r >= 1e9 {
        format!("{:.2} GB/s", r / 1e9)
    } else if r >= 1e6 {
        format!("{:.2} MB/s", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.2} KB/s", r / 1e3)
    } else {
        format!("{r:.0} B/s")
    }
}

/// Why [`parse_rate`] refused a rate; each variant holds the text it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateError {
    /// Not a number, a unit (B, KB, MB, GB, KiB, MiB, GiB) and `/s`.
    Malformed(String),
    /// Below 1 B/s or above 1000 GB/s.
    OutOfRange(String),
}

impl std::fmt::Display for RateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (RateError::Malformed(s) | RateError::OutOfRange(s)) = self;
        write!(
            f,
            "bad rate '{s}' (expected e.g. 10MB/s, 512KiB/s or 800B/s)"
        )?;
        if let RateError::OutOfRange(_) = self {
            f.write_str(" (between 1 B/s and 1000 GB/s)")?;
        }
        Ok(())
    }
}

impl std::error::Error for RateError {}

/// Reads a rate such as `10MB/s`, `512KiB/s`, `1.5GB/s` or `800B/s` (K, M, G are powers of
/// 1000; Ki, Mi, Gi of 1024; the `/s` is required).
pub fn parse_rate(s: &str) -> Result<u64, RateError> {
    let err = || RateError::Malformed(s.to_string());
    let t = s.trim();
    let body = t.strip_suffix("/s").ok_or_else(err)?.trim();
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, unit) = body.split_at(split);
    let n: f64 = num.parse().map_err(|_| err())?;
    let mult: f64 = match unit.trim() {
        "B" | "" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(err()),
    };
    let v = n * mult;
    if !v.is_finite() || !(1.0..=1e12).contains(&v) {
        return Err(RateError::OutOfRange(s.to_string()));
    }
    Ok(v.round() as u64)
}

/// A flow controller's state.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    pub(crate) name: String,
    pub(crate) spec: FlowController,
    /// In bytes (tokens × bytes per token). May be negative: the last datagram cost more
    /// than was left.
    tokens: i128,
    /// The last period boundary at which tokens were added; `None` before first use.
    filled: Option<Instant>,
    /// Bytes let through (for stats).
    pub(crate) bytes: u64,
}

impl Bucket {
    pub(crate) fn new(name: String, spec: FlowController) -> Self {
        Bucket {
            name,
            spec,
            tokens: spec.cap() as i128 * spec.bytes_per_token as i128,
            filled: None,
            bytes: 0,
        }
    }

    fn refill(&mut self, now: Instant) {
        let Some(add) = self.spec.tokens_per_period else {
            return;
        };
        let Some(last) = self.filled else {
            self.filled = Some(now);
            return;
        };
        let el = now.saturating_duration_since(last);
        let p = self.spec.period.as_nanos().max(1);
        let periods = el.as_nanos() / p;
        if periods == 0 {
            return;
        }
        let bpt = self.spec.bytes_per_token as i128;
        let cap = self.spec.cap() as i128 * bpt;
        let added = (periods.min(u64::MAX as u128) as i128).saturating_mul(add as i128 * bpt);
        self.tokens = self.tokens.saturating_add(added).min(cap);
        // Advance by whole periods, so the rate does not drift with the caller's timing.
        let step = (periods * p).min(u64::MAX as u128) as u64;
        self.filled = Some(last + Duration::from_nanos(step));
    }

    /// Whether a datagram may leave at `now`.
    pub(crate) fn ready(&mut self, now: Instant) -> bool {
        if self.spec.tokens_per_period.is_none() {
            return true;
        }
        self.refill(now);
        self.tokens > 0
    }

    /// Pays for a datagram of `len` bytes.
    pub(crate) fn spend(&mut self, len: usize) {
        self.bytes += len as u64;
        if self.spec.tokens_per_period.is_some() {
            self.tokens -= len as i128;
        }
    }

    /// When the bucket will next hold a token (`now` if it does).
    pub(crate) fn next_ready(&mut self, now: Instant) -> Instant {
        if self.ready(now) {
            return now;
        }
        let (Some(add), Some(last)) = (self.spec.tokens_per_period, self.filled) else {
            return now;
        };
        if add == 0 {
            // Never refills: a zero rate holds the writers until reconfigured.
            return now + Duration::from_secs(3600);
        }
        let need = (1 - self.tokens) as u128;
        let per = add as u128 * self.spec.bytes_per_token as u128;
        let periods = need.div_ceil(per).min(u32::MAX as u128) as u32;
        last + self.spec.period * periods
    }
}

/// A flow controller's bucket on its own, for a driver that paces something the engine
/// does not send (a router's link): the engine's rule, so both pace alike (whole periods,
/// debt for a datagram larger than what is left, the long-run rate exact).
#[derive(Debug, Clone)]
pub struct Pacer(Bucket);

impl Pacer {
    /// A bucket as `spec` says, full.
    pub fn new(spec: FlowController) -> Pacer {
        Pacer(Bucket::new(String::new(), spec))
    }

    /// When `len` bytes may leave (`now` if at once); call [`Pacer::spend`] when they do.
    pub fn next_ready(&mut self, now: Instant) -> Instant {
        self.0.next_ready(now)
    }

    /// Pays for `len` bytes that left.
    pub fn spend(&mut self, len: usize) {
        self.0.spend(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pacer at 1 MB/s lets its burst go at once, then holds the next bytes until the
    /// bucket refills; unlimited never waits.
    #[test]
    fn a_pacer_holds_bytes_past_its_rate() {
        let t = Instant::now();
        let mut p = Pacer::new(FlowController::rate(1_000_000));
        assert_eq!(p.next_ready(t), t);
        p.spend(1_000_000);
        let at = p.next_ready(t + Duration::from_millis(1));
        assert!(at > t + Duration::from_millis(500), "{:?}", at - t);
        assert!(at <= t + Duration::from_millis(1_100), "{:?}", at - t);
        let mut u = Pacer::new(FlowController::UNLIMITED);
        u.spend(usize::MAX / 2);
        assert_eq!(u.next_ready(t), t);
    }

    #[test]
    fn rates_parse_in_decimal_and_binary_units() {
        assert_eq!(parse_rate("10MB/s"), Ok(10_000_000));
        assert_eq!(parse_rate("512KiB/s"), Ok(512 * 1024));
        assert_eq!(parse_rate("1.5GB/s"), Ok(1_500_000_000));
        assert_eq!(parse_rate("800B/s"), Ok(800));
        assert_eq!(parse_rate(" 2 MB/s "), Ok(2_000_000));
        for bad in [
            "10MB", "fast/s", "-1MB/s", "0B/s", "1TB/s", "1e20B/s", "MB/s", "",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad} accepted");
        }
    }

    /// The typed errors say what they said as strings: the text the CLI and config report.
    #[test]
    fn parse_errors_are_typed_and_keep_their_text() {
        assert_eq!(parse_rate("fast"), Err(RateError::Malformed("fast".into())));
        assert_eq!(
            parse_rate("fast").unwrap_err().to_string(),
            "bad rate 'fast' (expected e.g. 10MB/s, 512KiB/s or 800B/s)"
        );
        assert_eq!(
            parse_rate("0B/s").unwrap_err().to_string(),
            "bad rate '0B/s' (expected e.g. 10MB/s, 512KiB/s or 800B/s) (between 1 B/s and 1000 GB/s)"
        );
        assert_eq!("bulk".parse::<Priority>(), Ok(Priority::Bulk));
        assert_eq!(
            "urgent".parse::<Priority>().unwrap_err().to_string(),
            "unknown priority 'urgent' (expected realtime, default or bulk)"
        );
    }

    #[test]
    fn rate_matches_the_spec() {
        let f = FlowController::rate(10_000_000);
        assert_eq!(f.bytes_per_second(), Some(10_000_000.0));
        let f = FlowController::tokens(30, Duration::from_millis(10), 8192);
        assert_eq!(f.bytes_per_second(), Some(30.0 * 8192.0 * 100.0));
        assert_eq!(FlowController::UNLIMITED.bytes_per_second(), None);
        assert!(FlowController::rate(50).bytes_per_second().unwrap() == 50.0);
    }

    /// Drains a bucket with datagrams of `len` bytes over `secs` of virtual time, stepping
    /// the clock to each `next_ready`; returns the bytes let through.
    fn drain(spec: FlowController, len: usize, secs: u64) -> u64 {
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(secs);
        let mut b = Bucket::new("t".into(), spec);
        let mut now = t0;
        let mut sent = 0u64;
        while now < end {
            if b.ready(now) {
                b.spend(len);
                sent += len as u64;
            } else {
                now = b.next_ready(now);
            }
        }
        sent
    }

    #[test]
    fn long_run_rate_is_exact_whatever_the_datagram_size() {
        for (spec, len) in [
            (FlowController::rate(10_000_000), 65_000),
            (FlowController::rate(10_000_000), 100),
            (
                FlowController::tokens(1, Duration::from_millis(10), 8192),
                32_768,
            ),
            (
                FlowController::tokens(30, Duration::from_millis(10), 8192),
                1_400,
            ),
            (FlowController::rate(50), 10),
        ] {
            let want = spec.bytes_per_second().unwrap() * 10.0;
            let got = drain(spec, len, 10) as f64;
            let err = (got - want).abs() / want;
            assert!(
                err < 0.01,
                "{spec}: {got} B in 10 s, want {want} ({err:.3})"
            );
        }
    }

    #[test]
    fn burst_is_bounded_by_max_tokens() {
        let spec = FlowController::tokens(10, Duration::from_millis(10), 1000).with_max_tokens(20);
        let mut b = Bucket::new("t".into(), spec);
        let t0 = Instant::now();
        assert!(b.ready(t0));
        // A long idle spell fills the bucket only up to max_tokens.
        let later = t0 + Duration::from_secs(60);
        let mut n = 0;
        while b.ready(later) {
            b.spend(1000);
            n += 1;
        }
        assert_eq!(n, 20);
        assert!(b.next_ready(later) > later);
    }

    #[test]
    fn unlimited_is_always_ready() {
        let mut b = Bucket::new("u".into(), FlowController::UNLIMITED);
        let t = Instant::now();
        for _ in 0..1000 {
            assert!(b.ready(t));
            b.spend(65_000);
        }
        assert_eq!(b.next_ready(t), t);
    }
}
