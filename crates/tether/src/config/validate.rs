//! The checks a configuration passes before it is used: ranges, limits that would refuse
//! what the rest allows, settings that contradict each other.

use super::{Config, ConfigError, DAY_MS, DiscoveryRange, InactiveAfter, parse_router};

impl Config {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let t = &self.transport;
        let d = &self.discovery;
        let r = &self.reliability;
        for c in &self.routers.connect {
            parse_router(c).map_err(|e| ConfigError::invalid("routers.connect", e))?;
        }
        if !self.routers.connect.is_empty() && self.security.keys.is_none() {
            return Err(ConfigError::invalid(
                "routers.connect",
                "routers take sessions of a realm only (they check each session's \
                 credential): set security.keys (a bundle from `tether keys issue`) or --keys",
            ));
        }
        self.routers
            .congestion
            .parse::<tether_transport::quic::Congestion>()
            .map_err(|e| ConfigError::invalid("routers.congestion", e))?;
        let idle = self.routers.idle_timeout_ms;
        if !(super::routers::MIN_LINK_IDLE_MS..=DAY_MS).contains(&idle) {
            return Err(ConfigError::invalid(
                "routers.idle_timeout_ms",
                format!(
                    "{idle} is not {} (two keep-alives) to {DAY_MS}",
                    super::routers::MIN_LINK_IDLE_MS
                ),
            ));
        }
        if !(1024..=65_000).contains(&self.routers.datagram) {
            return Err(ConfigError::invalid(
                "routers.datagram",
                format!("{} is not 1024 to 65000", self.routers.datagram),
            ));
        }
        for (field, value, allowed) in [
            (
                "transport.max_datagram",
                t.max_datagram as u64,
                1024..=65_507,
            ),
            ("transport.path_mtu", t.path_mtu as u64, 1280..=65_535),
            (
                "discovery.max_pending_participants",
                d.max_pending_participants as u64,
                1..=65_536,
            ),
            (
                "transport.max_sample_size",
                t.max_sample_size as u64,
                1..=u64::from(u32::MAX),
            ),
            (
                "discovery.max_string_bytes",
                d.max_string_bytes as u64,
                1..=u64::from(u16::MAX),
            ),
            (
                "discovery.max_partitions",
                d.max_partitions as u64,
                0..=tether_core::DEFAULT_MAX_PARTITIONS as u64,
            ),
        ] {
            if !allowed.contains(&value) {
                return Err(ConfigError::OutOfRange {
                    field,
                    value,
                    allowed,
                });
            }
        }
        // Limits that would refuse what the rest of the configuration allows: said now,
        // rather than found as samples or peers that silently never arrive.
        for (field, value) in [
            (
                "transport.max_reassembly_bytes",
                t.max_reassembly_bytes as u64,
            ),
            (
                "transport.max_reassembly_bytes_per_writer",
                t.max_reassembly_bytes_per_writer as u64,
            ),
        ] {
            if value < t.max_sample_size as u64 {
                return Err(ConfigError::invalid(
                    field,
                    format!(
                        "{value} is below transport.max_sample_size ({}): a sample that large could never be reassembled",
                        t.max_sample_size
                    ),
                ));
            }
        }
        if d.max_endpoints_per_participant == 0 {
            return Err(ConfigError::invalid(
                "discovery.max_endpoints_per_participant",
                "0 would refuse every remote endpoint".to_string(),
            ));
        }
        let one_endpoint = 3 * d.max_string_bytes.min(256) + 1024;
        if d.max_peer_metadata_bytes < one_endpoint {
            return Err(ConfigError::invalid(
                "discovery.max_peer_metadata_bytes",
                format!(
                    "{} is below what one endpoint with strings of max_string_bytes takes (at least {one_endpoint})",
                    d.max_peer_metadata_bytes
                ),
            ));
        }
        if d.max_string_bytes < 65 {
            return Err(ConfigError::invalid(
                "discovery.max_string_bytes",
                format!(
                    "{} would refuse a topic id (65 bytes in a secure realm) and most names",
                    d.max_string_bytes
                ),
            ));
        }
        if d.announce_period_ms == 0 || d.lease_ms < 3 * d.announce_period_ms.min(1000) {
            return Err(ConfigError::invalid(
                "discovery.lease_ms",
                format!(
                    "{} must be at least 3 × min(announce_period_ms, 1000)",
                    d.lease_ms
                ),
            ));
        }
        if d.range != DiscoveryRange::Subnet && d.multicast == Some(true) {
            return Err(ConfigError::invalid(
                "discovery.multicast",
                format!(
                    "true contradicts range = \"{}\" (multicast reaches the LAN: use range = \"subnet\")",
                    d.range
                ),
            ));
        }
        if d.range == DiscoveryRange::Off && d.registry == Some(true) {
            return Err(ConfigError::invalid(
                "discovery.registry",
                "true contradicts range = \"off\" (use range = \"localhost\" for the registry alone)"
                    .to_string(),
            ));
        }
        if !d.multicast_group.is_multicast() {
            return Err(ConfigError::invalid(
                "discovery.multicast_group",
                format!("{} is not a multicast address", d.multicast_group),
            ));
        }
        self.flow_controller_specs()?;
        let sec = &self.security;
        for pattern in sec.topics.keys() {
            if !tether_crypto::valid_pattern(pattern) {
                return Err(ConfigError::invalid(
                    "security.topics",
                    format!("'{pattern}' is not a topic pattern"),
                ));
            }
        }
        // Keys may come later (`--keys`, TETHER_KEYS): a session refuses to open without
        // them (`engine.rs`), not the file.
        for (field, value) in [
            ("discovery.announce_period_ms", d.announce_period_ms),
            ("discovery.lease_ms", d.lease_ms),
            ("transport.reassembly_timeout_ms", t.reassembly_timeout_ms),
            ("reliability.heartbeat_period_ms", r.heartbeat_period_ms),
            ("reliability.max_blocking_time_ms", r.max_blocking_time_ms),
        ] {
            if !(1..=DAY_MS).contains(&value) {
                return Err(ConfigError::OutOfRange {
                    field,
                    value,
                    allowed: 1..=DAY_MS,
                });
            }
        }
        if let InactiveAfter::Ms(value) = r.inactive_reader_ms {
            if value > DAY_MS {
                return Err(ConfigError::OutOfRange {
                    field: "reliability.inactive_reader_ms",
                    value,
                    allowed: 0..=DAY_MS,
                });
            }
        }
        Ok(())
    }
}
