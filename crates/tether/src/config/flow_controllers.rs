//! `[flow_controllers.NAME]`: named token buckets for asynchronous writers.

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

/// `[flow_controllers.NAME]`: a token bucket. Give `rate`, or `tokens_per_period` with
/// `period_ms` and `bytes_per_token`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FlowControllerConfig {
    /// A rate such as `"10MB/s"` or `"unlimited"`.
    pub rate: Option<String>,
    /// Tokens added per period: a number or `"unlimited"`.
    pub tokens_per_period: Option<TokenCount>,
    /// The period in ms (default 10).
    pub period_ms: Option<u64>,
    /// Bytes per token (default 1 with `rate`, 8192 with `tokens_per_period`).
    pub bytes_per_token: Option<u64>,
    /// The largest burst in tokens (default `tokens_per_period`).
    pub max_tokens: Option<u64>,
}

/// A token count or `"unlimited"`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum TokenCount {
    /// This many.
    Count(u64),
    /// The word `unlimited`.
    Word(UnlimitedWord),
}

/// The word `unlimited`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnlimitedWord {
    /// `"unlimited"`.
    Unlimited,
}

impl FlowControllerConfig {
    /// The token bucket it describes; `key` names it in errors.
    pub fn to_spec(&self, key: &str) -> Result<tether_core::FlowController, ConfigError> {
        use tether_core::FlowController;
        let bad = |m: String| ConfigError::invalid(format!("flow_controllers.{key}"), m);
        let period_ms = self.period_ms.unwrap_or(10);
        if !(1..=24 * 3600 * 1000).contains(&period_ms) {
            return Err(bad(format!(
                "period_ms = {period_ms} is outside 1..=86400000"
            )));
        }
        let period = Duration::from_millis(period_ms);
        let mut spec = match (&self.rate, self.tokens_per_period) {
            (Some(_), Some(_)) => {
                return Err(bad("give rate or tokens_per_period, not both".into()));
            }
            (None, None) => return Err(bad("give rate or tokens_per_period".into())),
            (Some(r), None) if r.trim() == "unlimited" => FlowController::UNLIMITED,
            (Some(r), None) => {
                let bps = tether_core::parse_rate(r).map_err(|e| bad(e.to_string()))?;
                let bpt = self.bytes_per_token.unwrap_or(1).max(1);
                let per_period = (bps as f64 * period.as_secs_f64() / bpt as f64).round();
                if per_period < 1.0 {
                    return Err(bad(format!(
                        "rate {r} is less than one token of {bpt} B per {period_ms} ms"
                    )));
                }
                FlowController::tokens(per_period as u64, period, bpt)
            }
            (None, Some(TokenCount::Word(_))) => FlowController::UNLIMITED,
            (None, Some(TokenCount::Count(n))) => {
                let bpt = self.bytes_per_token.unwrap_or(8192);
                if bpt == 0 {
                    return Err(bad("bytes_per_token must be at least 1".into()));
                }
                FlowController::tokens(n, period, bpt)
            }
        };
        if let Some(m) = self.max_tokens {
            if m == 0 {
                return Err(bad("max_tokens must be at least 1".into()));
            }
            spec = spec.with_max_tokens(m);
        }
        Ok(spec)
    }
}
