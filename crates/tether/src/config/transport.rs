//! `[transport]`: the socket, datagram sizes, and the limits on samples and their
//! reassembly.

use std::net::SocketAddr;

use serde::Deserialize;

/// `[transport]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TransportConfig {
    /// Address to bind.
    pub listen: Option<SocketAddr>,
    /// Largest datagram: the size for peers on this host, and the most path probing may
    /// raise a path to another host to.
    pub max_datagram: usize,
    /// MTU assumed of links to other hosts (datagrams to them start at this less the IP and
    /// UDP headers).
    pub path_mtu: usize,
    /// Probe each path to another host for its datagram size (DPLPMTUD).
    pub probe_paths: bool,
    /// Kernel receive buffer.
    pub recv_buffer: usize,
    /// Kernel send buffer.
    pub send_buffer: usize,
    /// Busy-poll receive mode.
    pub busy_poll: bool,
    /// Largest sample accepted (bytes); larger than one datagram means fragmented.
    pub max_sample_size: usize,
    /// Most bytes each reader holds in samples being reassembled, from all its writers:
    /// what their fragments brought (never what a first fragment claims), plus 64 bytes for
    /// each fragment kept aside because it overtook a missing one.
    pub max_reassembly_bytes: usize,
    /// One remote writer's share of `max_reassembly_bytes` (the smaller applies): its
    /// further fragments are refused until some of its samples complete or expire. Keep it
    /// above `max_sample_size` (by a sixteenth, for fragments kept aside), and
    /// `max_reassembly_bytes` at twice it, so that one writer cannot fill a reader.
    pub max_reassembly_bytes_per_writer: usize,
    /// An incomplete sample with no new fragment for this long is dropped (ms).
    pub reassembly_timeout_ms: u64,
    /// Readers of this session also take data sent to the discovery multicast group (port +
    /// domain, on `discovery.interface`), and say so in their announcement: a writer
    /// elsewhere then sends each sample once to the group for all such participants,
    /// instead of once to each. Works with or without multicast discovery.
    pub multicast_data: bool,
    /// How the socket batches its system calls.
    pub batch_io: BatchIoMode,
    /// Set don't-fragment on every datagram (the default): one larger than the interface's
    /// MTU is refused and counted ([`SessionStats::too_large`](crate::SessionStats::too_large)),
    /// and the engine lowers that path, rather than it leaving as IP fragments (which all
    /// must arrive). Path probing needs it: off, paths stay at `path_mtu`'s size.
    pub dont_fragment: bool,
    /// Congestion control on paths to other hosts (`tether_core::congestion`): a reliable
    /// keep-all or asynchronous reliable writer keeps in flight about twice what the path
    /// delivers in a round trip, measured by probes; random loss does not shrink it, loss
    /// with a growing queue does. Off: writers send as fast as samples come (the history
    /// and flow controllers still bound them).
    pub congestion_control: bool,
}

/// `transport.batch_io`: how the socket batches its system calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchIoMode {
    /// `sendmmsg`/`recvmmsg`, with UDP GSO and GRO where the kernel has them (default).
    #[default]
    Offload,
    /// `sendmmsg`/`recvmmsg` without GSO or GRO.
    Mmsg,
    /// One system call per datagram.
    Single,
}

impl From<BatchIoMode> for tether_transport::BatchIo {
    fn from(m: BatchIoMode) -> Self {
        match m {
            BatchIoMode::Offload => tether_transport::BatchIo::Offload,
            BatchIoMode::Mmsg => tether_transport::BatchIo::Mmsg,
            BatchIoMode::Single => tether_transport::BatchIo::Single,
        }
    }
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            listen: None,
            max_datagram: 65_000,
            path_mtu: 1500,
            probe_paths: true,
            recv_buffer: 16 << 20,
            send_buffer: 4 << 20,
            busy_poll: false,
            max_sample_size: tether_core::DEFAULT_MAX_SAMPLE_SIZE,
            max_reassembly_bytes: tether_core::DEFAULT_MAX_REASSEMBLY_BYTES,
            max_reassembly_bytes_per_writer: tether_core::DEFAULT_MAX_REASSEMBLY_BYTES_PER_WRITER,
            reassembly_timeout_ms: 10_000,
            multicast_data: false,
            batch_io: BatchIoMode::Offload,
            dont_fragment: true,
            congestion_control: true,
        }
    }
}
