//! The typed conversion from a [`Config`] to what the engine is configured with.
//!
//! [`EngineSettings`] is everything of `tether_core::Config` but two things a session
//! supplies when it opens: the participant id (random, drawn at open) and the realm's key
//! material (files read and a credential checked against the clock, [`SecurityPolicy`] says
//! which). Converting checks what a `Config` built in code, not read from a file, may still
//! get wrong.

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tether_core::{FlowController, ParticipantId, Protection};

use super::{Config, ConfigError, InactiveAfter};

/// `reliability.inactive_reader_ms` by default (the engine's).
const DEFAULT_INACTIVE_MS: u64 = tether_core::DEFAULT_INACTIVE_AFTER.as_millis() as u64;

/// Its default for a session with routers (`[routers] connect`).
const ROUTED_INACTIVE_MS: u64 = 20_000;

/// `discovery.lease_ms` by default, and with routers.
const DEFAULT_LEASE_MS: u64 = 10_000;
const ROUTED_LEASE_MS: u64 = 30_000;

/// What a [`Config`] asks of the engine, checked.
#[derive(Debug, Clone)]
pub(crate) struct EngineSettings {
    domain: u16,
    name: String,
    lease: Duration,
    announce_period: Duration,
    heartbeat_period: Duration,
    inactive_after: Option<Duration>,
    max_datagram: usize,
    path_mtu: usize,
    probe_paths: bool,
    congestion_control: bool,
    max_sample_size: usize,
    max_reassembly_bytes: usize,
    max_reassembly_bytes_per_writer: usize,
    reassembly_timeout: Duration,
    max_endpoints_per_participant: usize,
    max_string_bytes: usize,
    max_partitions: usize,
    max_peer_metadata_bytes: usize,
    max_pending_participants: usize,
    data_group: Option<SocketAddrV4>,
    /// The named flow controllers, to install in the engine.
    pub(crate) flow_controllers: Vec<(String, FlowController)>,
    /// How to join the realm; `None`: security off.
    pub(crate) security: Option<SecurityPolicy>,
}

/// Realm membership as configured: where the keys are, and how writers protect samples.
#[derive(Debug, Clone)]
pub(crate) struct SecurityPolicy {
    /// The participant's key bundle.
    pub(crate) keys: PathBuf,
    /// The realm's revocation list.
    pub(crate) revocations: Option<PathBuf>,
    /// The AEAD suite of this session's writers, resolved for this machine.
    pub(crate) suite: tether_crypto::Suite,
    /// Also seal each datagram per peer.
    pub(crate) pairwise: bool,
    /// Protection of topics no override names.
    pub(crate) protection: Protection,
    /// Per-topic protection, by pattern, first match wins.
    pub(crate) topics: Vec<(String, Protection)>,
}

impl TryFrom<&Config> for EngineSettings {
    type Error = ConfigError;

    fn try_from(c: &Config) -> Result<Self, ConfigError> {
        let security = if c.security.enabled() {
            let sec = &c.security;
            Some(SecurityPolicy {
                keys: sec.keys.clone().ok_or(ConfigError::MissingKeys)?,
                revocations: sec.revocations.clone(),
                suite: sec.suite.suite(),
                pairwise: sec.pairwise,
                protection: sec.default_protection(),
                topics: sec
                    .topics
                    .iter()
                    .map(|(p, m)| (p.clone(), (*m).into()))
                    .collect(),
            })
        } else {
            None
        };
        // The discovery thread's socket joins the group; what arrives there is handled like
        // anything else.
        let data_group = c
            .transport
            .multicast_data
            .then(|| SocketAddrV4::new(c.discovery.multicast_group, c.multicast_port()));
        Ok(EngineSettings {
            domain: c.domain,
            // Announced in clear: nothing about the process unless the user names it.
            name: c.name.clone(),
            // Through routers, a link that is cut and dialled again must not end the match
            // (a lease run out drops the peer and what it was owed): 30 s by default there.
            lease: Duration::from_millis(
                if c.discovery.lease_ms == DEFAULT_LEASE_MS && !c.routers.connect.is_empty() {
                    ROUTED_LEASE_MS
                } else {
                    c.discovery.lease_ms
                },
            ),
            announce_period: c.announce_period(),
            heartbeat_period: Duration::from_millis(c.reliability.heartbeat_period_ms),
            inactive_after: match c.reliability.inactive_reader_ms {
                // Through routers a reader can go quiet for seconds and come back (a router
                // restarts, a robot's address changes, a link times out and is dialled
                // again): the default gives it 20 s rather than 3.
                InactiveAfter::Ms(DEFAULT_INACTIVE_MS) if !c.routers.connect.is_empty() => {
                    Some(Duration::from_millis(ROUTED_INACTIVE_MS))
                }
                ref i => i.duration(),
            },
            max_datagram: c.transport.max_datagram,
            path_mtu: c.transport.path_mtu,
            probe_paths: c.transport.probe_paths,
            congestion_control: c.transport.congestion_control,
            max_sample_size: c.transport.max_sample_size,
            max_reassembly_bytes: c.transport.max_reassembly_bytes,
            max_reassembly_bytes_per_writer: c.transport.max_reassembly_bytes_per_writer,
            reassembly_timeout: Duration::from_millis(c.transport.reassembly_timeout_ms),
            max_endpoints_per_participant: c.discovery.max_endpoints_per_participant,
            max_string_bytes: c.discovery.max_string_bytes,
            max_partitions: c.discovery.max_partitions,
            max_peer_metadata_bytes: c.discovery.max_peer_metadata_bytes,
            max_pending_participants: c.discovery.max_pending_participants,
            data_group,
            flow_controllers: c.flow_controller_specs()?,
            security,
        })
    }
}

impl EngineSettings {
    /// The engine's configuration for participant `id`, a member of the realm through
    /// `security` (loaded as [`EngineSettings::security`] says), or of none.
    pub(crate) fn engine_config(
        &self,
        id: ParticipantId,
        security: Option<Arc<tether_core::Security>>,
    ) -> tether_core::Config {
        let mut cc = tether_core::Config::new(self.domain, id);
        cc.name = self.name.clone();
        cc.lease = self.lease;
        cc.announce_period = self.announce_period;
        cc.heartbeat_period = self.heartbeat_period;
        cc.inactive_after = self.inactive_after;
        cc.max_datagram = self.max_datagram;
        cc.path_mtu = self.path_mtu;
        cc.probe_paths = self.probe_paths;
        cc.congestion_control = self.congestion_control;
        cc.max_sample_size = self.max_sample_size;
        cc.max_reassembly_bytes = self.max_reassembly_bytes;
        cc.max_reassembly_bytes_per_writer = self.max_reassembly_bytes_per_writer;
        cc.reassembly_timeout = self.reassembly_timeout;
        cc.max_endpoints_per_participant = self.max_endpoints_per_participant;
        cc.max_string_bytes = self.max_string_bytes;
        cc.max_partitions = self.max_partitions;
        cc.max_peer_metadata_bytes = self.max_peer_metadata_bytes;
        cc.max_pending_participants = self.max_pending_participants;
        cc.data_group = self.data_group;
        cc.security = security;
        cc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SecurityMode;

    #[test]
    fn maps_every_field() {
        let c = Config::from_toml(
            "domain = 3\nname = \"r\"\n[discovery]\nlease_ms = 5000\nannounce_period_ms = 200\n\
             max_endpoints_per_participant = 7\nmax_string_bytes = 100\nmax_partitions = 3\n\
             max_peer_metadata_bytes = 4242\n\
             max_pending_participants = 9\n\
             [reliability]\nheartbeat_period_ms = 7\ninactive_reader_ms = 2500\n\
             [transport]\nmax_datagram = 1400\n\
             max_sample_size = 9000\nmax_reassembly_bytes = 12345\nreassembly_timeout_ms = 50\n\
             max_reassembly_bytes_per_writer = 9999\nmulticast_data = true\n",
        )
        .unwrap();
        let s = EngineSettings::try_from(&c).unwrap();
        let cc = s.engine_config(ParticipantId(42), None);
        assert_eq!(
            (cc.domain, cc.participant, cc.name.as_str()),
            (3, ParticipantId(42), "r")
        );
        assert_eq!(cc.lease, Duration::from_secs(5));
        assert_eq!(cc.announce_period, Duration::from_millis(200));
        assert_eq!(cc.heartbeat_period, Duration::from_millis(7));
        assert_eq!(cc.inactive_after, Some(Duration::from_millis(2500)));
        assert_eq!(
            (cc.max_datagram, cc.max_sample_size, cc.max_reassembly_bytes),
            (1400, 9000, 12345)
        );
        assert_eq!(cc.max_reassembly_bytes_per_writer, 9999);
        assert_eq!(
            (
                cc.max_endpoints_per_participant,
                cc.max_string_bytes,
                cc.max_partitions,
                cc.max_peer_metadata_bytes
            ),
            (7, 100, 3, 4242)
        );
        assert_eq!(cc.reassembly_timeout, Duration::from_millis(50));
        assert_eq!(cc.max_pending_participants, 9);
        assert_eq!(cc.data_group, Some("239.255.0.1:7403".parse().unwrap()));
        assert!(s.security.is_none());
    }

    /// Without a `name` the session announces none: not the process id, nothing another
    /// host could learn about this process from.
    #[test]
    fn default_name_reveals_nothing() {
        let s = EngineSettings::try_from(&Config::default()).unwrap();
        let name = s.engine_config(ParticipantId(1), None).name;
        assert!(!name.contains(&std::process::id().to_string()), "{name}");
        assert_eq!(name, "");
    }

    /// A stalled reader is let go of after 3 s by default; 0 and "strict" keep DDS's
    /// strict behaviour; more than a day, or another word, is refused.
    #[test]
    fn with_routers_the_inactive_default_is_longer() {
        let c = Config::from_toml(
            "[routers]\nconnect = [\"quic/127.0.0.1:1\"]\n[security]\nkeys = \"k\"\n",
        )
        .unwrap();
        let s = EngineSettings::try_from(&c).unwrap();
        assert_eq!(
            s.inactive_after,
            Some(Duration::from_millis(ROUTED_INACTIVE_MS))
        );
        assert_eq!(s.lease, Duration::from_millis(ROUTED_LEASE_MS));
        let c = Config::from_toml(
            "[routers]\nconnect = [\"quic/127.0.0.1:1\"]\n[security]\nkeys = \"k\"\n\
             [reliability]\ninactive_reader_ms = 2500\n",
        )
        .unwrap();
        let s = EngineSettings::try_from(&c).unwrap();
        assert_eq!(s.inactive_after, Some(Duration::from_millis(2500)));
    }

    #[test]
    fn inactive_reader_setting() {
        let engine = |toml: &str| {
            let c = Config::from_toml(toml).unwrap();
            let s = EngineSettings::try_from(&c).unwrap();
            s.engine_config(ParticipantId(1), None).inactive_after
        };
        assert_eq!(engine(""), Some(Duration::from_secs(3)));
        assert_eq!(engine("[reliability]\ninactive_reader_ms = 0\n"), None);
        assert_eq!(
            engine("[reliability]\ninactive_reader_ms = \"strict\"\n"),
            None
        );
        assert_eq!(
            engine("[reliability]\ninactive_reader_ms = 500\n"),
            Some(Duration::from_millis(500))
        );
        let e = Config::from_toml("[reliability]\ninactive_reader_ms = 86400001\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("reliability.inactive_reader_ms"), "{e}");
        assert!(Config::from_toml("[reliability]\ninactive_reader_ms = \"never\"\n").is_err());
    }

    #[test]
    fn security_policy_is_typed() {
        let c = Config::from_toml(
            "[security]\nkeys = \"k\"\nsuite = \"chacha20-poly1305\"\n\
             [security.topics]\n\"/cmd/**\" = \"encrypt+sign\"\n\"/log\" = \"off\"\n",
        )
        .unwrap();
        let p = EngineSettings::try_from(&c).unwrap().security.unwrap();
        assert_eq!(p.suite, tether_crypto::Suite::ChaCha20Poly1305);
        assert_eq!(p.protection, SecurityMode::Encrypt.into());
        assert_eq!(
            p.topics,
            [
                ("/cmd/**".to_string(), SecurityMode::EncryptSign.into()),
                ("/log".to_string(), SecurityMode::Off.into()),
            ]
        );
    }

    #[test]
    fn unvalidated_config_is_checked() {
        let mut c = Config::default();
        c.security.mode = Some(SecurityMode::Sign);
        assert!(matches!(
            EngineSettings::try_from(&c),
            Err(ConfigError::MissingKeys)
        ));
        c.security.mode = Some(SecurityMode::Off);
        assert!(EngineSettings::try_from(&c).unwrap().security.is_none());
        c.flow_controllers.insert("x".into(), Default::default());
        let e = EngineSettings::try_from(&c).unwrap_err().to_string();
        assert!(e.contains("flow_controllers.x"), "{e}");
    }
}
