//! `tether router`: a separate process that joins sites. It accepts QUIC links from the
//! sessions of its site (robots dial out, so they work behind NAT) and from other routers,
//! dials the routers it is told to, and forwards along the routing information base of
//! `tether-routing`: by 256-bit topic keys only. It never holds the realm secret, so it
//! never learns a topic's name, and it holds no sender key, so it cannot open a sample.
//!
//! This crate is the I/O around the sans-IO router: configuration ([`config`]), metrics in
//! the Prometheus text format ([`metrics`]).

pub mod config;
mod handshakes;
pub mod metrics;
pub mod run;

pub use config::{ConfigError, Direction, ExportRule, RouterConfig};
pub use metrics::Metrics;
pub use run::{RunError, run};
