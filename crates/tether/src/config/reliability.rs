//! `[reliability]`: heartbeats, blocking puts, and when an inactive reader is let go of.

use std::time::Duration;

use serde::Deserialize;

use super::DEFAULT_MAX_BLOCKING_MS;

/// `[reliability]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ReliabilityConfig {
    /// Heartbeat period in ms.
    pub heartbeat_period_ms: u64,
    /// How long `put` waits for room in a full keep-all history (longer if only readers
    /// that went silent hold it: until they are marked inactive).
    pub max_blocking_time_ms: u64,
    /// A reliable reader of a keep-all writer that owes acknowledgements and sends none
    /// for this long is marked inactive: the writer stops keeping its history for it, so it
    /// cannot hold up the other readers. Publishers whose QoS says otherwise
    /// (`Qos::inactive_after`) keep theirs. `0` or `"strict"`: DDS's strict behaviour (a
    /// stalled reader blocks the writer until its lease ends).
    pub inactive_reader_ms: InactiveAfter,
}

/// `reliability.inactive_reader_ms`: milliseconds, or the word `strict` (as 0).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum InactiveAfter {
    /// This many ms (0: strict).
    Ms(u64),
    /// The word `strict`.
    Word(StrictWord),
}

/// The word `strict`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StrictWord {
    /// `"strict"`.
    Strict,
}

impl InactiveAfter {
    /// The engine's setting: `None` for strict.
    pub fn duration(self) -> Option<Duration> {
        match self {
            InactiveAfter::Ms(0) | InactiveAfter::Word(StrictWord::Strict) => None,
            InactiveAfter::Ms(ms) => Some(Duration::from_millis(ms)),
        }
    }
}

impl Default for ReliabilityConfig {
    fn default() -> Self {
        ReliabilityConfig {
            heartbeat_period_ms: 100,
            max_blocking_time_ms: DEFAULT_MAX_BLOCKING_MS,
            inactive_reader_ms: InactiveAfter::Ms(
                tether_core::DEFAULT_INACTIVE_AFTER.as_millis() as u64
            ),
        }
    }
}
