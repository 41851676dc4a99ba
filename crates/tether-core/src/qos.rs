//! Quality of service: the typed policies, their defaults (as ROS2's), and the DDS
//! requested-versus-offered compatibility check.

use std::fmt;
use std::time::Duration;

pub use tether_wire::{Durability, Reliability};
use tether_wire::{Encoding, HistoryKind, Liveliness, QosRepr};

/// How many samples an endpoint keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum History {
    /// The newest `n` samples (n ≥ 1).
    KeepLast(u32),
    /// Every sample, up to the resource limits.
    KeepAll,
}

/// Writer-side batching: samples wait, one header for many, until a limit is reached or the
/// writer is flushed. Local to the writer (not announced, not part of matching).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Batching {
    /// Flush once the batch holds this many bytes. A batch larger than one datagram
    /// leaves as several (whole samples in each), back to back.
    pub max_bytes: usize,
    /// Flush once the batch holds this many samples.
    pub max_samples: u32,
    /// Flush this long after the batch's first sample at the latest.
    pub max_delay: Duration,
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            max_bytes: 60_000,
            max_samples: 1024,
            max_delay: Duration::from_millis(1),
        }
    }
}

/// The name of a flow controller, held inline so [`Qos`] stays `Copy` (at most
/// [`FlowName::MAX`] bytes; a longer name never matches a controller).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowName {
    len: u8,
    buf: [u8; FlowName::MAX],
}

impl FlowName {
    /// Longest name kept.
    pub const MAX: usize = 48;

    /// The name (lossy if it was longer than [`FlowName::MAX`]).
    pub fn as_str(&self) -> &str {
        let n = (self.len as usize).min(Self::MAX);
        std::str::from_utf8(&self.buf[..n]).unwrap_or("")
    }

    /// True if the name given was longer than [`FlowName::MAX`] bytes.
    pub fn too_long(&self) -> bool {
        self.len as usize > Self::MAX
    }

    fn new(name: &str) -> Self {
        let mut buf = [0u8; Self::MAX];
        let mut n = name.len().min(Self::MAX);
        while !name.is_char_boundary(n) {
            n -= 1;
        }
        buf[..n].copy_from_slice(&name.as_bytes()[..n]);
        let len = if name.len() > Self::MAX {
            u8::MAX
        } else {
            n as u8
        };
        FlowName { len, buf }
    }
}

impl fmt::Debug for FlowName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// How a writer publishes: synchronously (the default: `write` sends at once on the caller's
/// thread) or asynchronously (`write` queues; a sender drains by priority class, through a
/// flow controller). Local to the writer (not announced, not part of matching).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AsyncPublish {
    /// The class its datagrams are drained in.
    pub priority: crate::Priority,
    /// The named flow controller it draws tokens from; `None`: unlimited.
    pub flow: Option<FlowName>,
}

/// What a reliable writer does about a reader that owes acknowledgements and sends none.
/// Local to the writer (not announced, not part of matching).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Inactivity {
    /// DDS's strict reliability: the reader holds the writer's history (a keep-all writer
    /// blocks for it) until it acknowledges or its lease ends.
    Strict,
    /// After this long without an acknowledgement while it owes some, the reader is marked
    /// inactive ([`Event::ReaderInactive`](crate::Event::ReaderInactive)): the writer no
    /// longer keeps its history for it, and it resumes from what is left when it answers.
    After(Duration),
}

/// Longest finite duration a policy holds; longer ones are taken as this (about a century).
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Default resource limit on samples for keep-all endpoints.
pub const DEFAULT_MAX_SAMPLES: u32 = 4096;
/// Default resource limit on payload bytes held by one endpoint.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// The QoS of one writer (offered) or reader (requested). Build it with the chainable
/// setters; the default is ROS2's: reliable, keep-last 10, volatile, no deadline, infinite
/// lifespan, automatic liveliness with an infinite lease.
///
/// ```
/// use std::time::Duration;
/// use tether_core::Qos;
/// let qos = Qos::new().best_effort().keep_last(1).deadline(Duration::from_millis(100));
/// assert!(!qos.is_reliable());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Qos {
    reliability: Reliability,
    durability: Durability,
    history: History,
    max_samples: u32,
    max_bytes: u64,
    deadline: Option<Duration>,
    lifespan: Option<Duration>,
    lease: Option<Duration>,
    batch: Option<Batching>,
    /// The batch goes out as coalesced DATA submessages instead of one BATCH.
    coalesce: bool,
    publish: Option<AsyncPublish>,
    /// `None`: the participant's default (`Config::inactive_after`).
    inactivity: Option<Inactivity>,
    /// What the payloads are: a label announced with the endpoint, never checked.
    encoding: Encoding,
}

impl Default for Qos {
    fn default() -> Self {
        Qos {
            reliability: Reliability::Reliable,
            durability: Durability::Volatile,
            history: History::KeepLast(10),
            max_samples: DEFAULT_MAX_SAMPLES,
            max_bytes: DEFAULT_MAX_BYTES,
            deadline: None,
            lifespan: None,
            lease: None,
            batch: None,
            coalesce: false,
            publish: None,
            inactivity: None,
            encoding: Encoding::Unset,
        }
    }
}

impl Qos {
    /// The default QoS (ROS2's defaults).
    pub fn new() -> Self {
        Self::default()
    }
    /// Reliable delivery: lost samples are repaired.
    pub fn reliable(mut self) -> Self {
        self.reliability = Reliability::Reliable;
        self
    }
    /// Best-effort delivery.
    pub fn best_effort(mut self) -> Self {
        self.reliability = Reliability::BestEffort;
        self
    }
    /// Volatile durability.
    pub fn volatile(mut self) -> Self {
        self.durability = Durability::Volatile;
        self
    }
    /// Transient-local durability: late joiners get the retained history.
    pub fn transient_local(mut self) -> Self {
        self.durability = Durability::TransientLocal;
        self
    }
    /// Keep the newest `n` samples (`n` of 0 is taken as 1).
    pub fn keep_last(mut self, n: u32) -> Self {
        self.history = History::KeepLast(n.max(1));
        self
    }
    /// Keep every sample up to the resource limits.
    pub fn keep_all(mut self) -> Self {
        self.history = History::KeepAll;
        self
    }
    /// Resource limit: most samples held (0 is taken as 1).
    pub fn max_samples(mut self, n: u32) -> Self {
        self.max_samples = n.max(1);
        self
    }
    /// Resource limit: most payload bytes held (0 is taken as 1).
    pub fn max_bytes(mut self, n: u64) -> Self {
        self.max_bytes = n.max(1);
        self
    }
    /// Deadline: a writer promises, a reader expects, a sample at least this often.
    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = Some(d.clamp(Duration::from_micros(1), MAX_DURATION));
        self
    }
    /// Lifespan: samples older than this are not delivered.
    pub fn lifespan(mut self, d: Duration) -> Self {
        self.lifespan = Some(d.clamp(Duration::from_micros(1), MAX_DURATION));
        self
    }
    /// Automatic liveliness with this lease.
    pub fn liveliness(mut self, lease: Duration) -> Self {
        self.lease = Some(lease.clamp(Duration::from_micros(1), MAX_DURATION));
        self
    }

    /// Batch samples on a writer (one header for many; see [`Batching`]).
    pub fn batching(mut self, b: Batching) -> Self {
        self.batch = Some(Batching {
            max_bytes: b.max_bytes.max(1),
            max_samples: b.max_samples.max(1),
            max_delay: b.max_delay.min(MAX_DURATION),
        });
        self.coalesce = false;
        self
    }

    /// Publish asynchronously in the given priority class: `write` queues the sample and
    /// returns at once; the driver's sender drains realtime before default before bulk.
    pub fn asynchronous(mut self, priority: crate::Priority) -> Self {
        let flow = self.publish.and_then(|p| p.flow);
        self.publish = Some(AsyncPublish { priority, flow });
        self
    }

    /// Draw tokens from the named flow controller (implies asynchronous publishing, in the
    /// default class unless [`asynchronous`](Self::asynchronous) chose another).
    pub fn flow_controller(mut self, name: &str) -> Self {
        let priority = self
            .publish
            .map_or(crate::Priority::Default, |p| p.priority);
        self.publish = Some(AsyncPublish {
            priority,
            flow: Some(FlowName::new(name)),
        });
        self
    }

    /// A reliable writer marks a reader inactive once it has owed acknowledgements and
    /// sent none for `d` (see [`Inactivity::After`]); [`Duration::ZERO`] keeps DDS's strict
    /// behaviour ([`Inactivity::Strict`]). Unset, the participant's default applies
    /// (`Config::inactive_after`, 3 s). Local to the writer.
    pub fn inactive_after(mut self, d: Duration) -> Self {
        self.inactivity = Some(if d.is_zero() {
            Inactivity::Strict
        } else {
            Inactivity::After(d.min(MAX_DURATION))
        });
        self
    }

    /// Labels the payloads (`docs/wire.md#endpoint`): announced with the endpoint so that
    /// tools can print them (`tether echo` pretty-prints JSON and CBOR) and remote
    /// applications can tell what a writer sends. A label only: payloads are bytes, never
    /// checked against it, and it plays no part in matching. Unset by default.
    pub fn encoding(mut self, e: Encoding) -> Self {
        self.encoding = e;
        self
    }

    /// The payloads' label ([`encoding`](Self::encoding)).
    pub fn encoding_label(&self) -> Encoding {
        self.encoding
    }

    /// The writer's inactivity policy, if set (`None`: the participant's default).
    pub fn inactivity(&self) -> Option<Inactivity> {
        self.inactivity
    }

    /// The writer's asynchronous publishing, if any.
    pub fn publish_async(&self) -> Option<AsyncPublish> {
        self.publish
    }

    /// Coalescing, the 001 paper's other packet shape: samples wait under the same limits as
    /// with [`batching`](Self::batching), then leave as one DATA submessage each (a header
    /// per sample), several per datagram. Batching is cheaper (one header for many, and no
    /// copy); coalescing exists to compare them (`tether bench batch`).
    pub fn coalescing(mut self, b: Batching) -> Self {
        self = self.batching(b);
        self.coalesce = true;
        self
    }

    /// True if the writer's batch is sent as coalesced DATA submessages.
    pub fn coalesces(&self) -> bool {
        self.coalesce && self.batch.is_some()
    }

    /// The writer's batching, if any.
    pub fn batch(&self) -> Option<Batching> {
        self.batch
    }

    /// Reliability policy.
    pub fn reliability_kind(&self) -> Reliability {
        self.reliability
    }
    /// True if reliable.
    pub fn is_reliable(&self) -> bool {
        self.reliability == Reliability::Reliable
    }
    /// Durability policy.
    pub fn durability_kind(&self) -> Durability {
        self.durability
    }
    /// History policy.
    pub fn history(&self) -> History {
        self.history
    }
    /// Resource limit on samples.
    pub fn max_samples_limit(&self) -> u32 {
        self.max_samples
    }
    /// Resource limit on bytes.
    pub fn max_bytes_limit(&self) -> u64 {
        self.max_bytes
    }
    /// Deadline period, if any.
    pub fn deadline_period(&self) -> Option<Duration> {
        self.deadline
    }
    /// Lifespan, if any.
    pub fn lifespan_duration(&self) -> Option<Duration> {
        self.lifespan
    }
    /// Liveliness lease, if finite.
    pub fn liveliness_lease(&self) -> Option<Duration> {
        self.lease
    }

    /// How many samples an endpoint with this QoS may hold.
    pub(crate) fn capacity(&self) -> usize {
        match self.history {
            History::KeepLast(n) => n.min(self.max_samples) as usize,
            History::KeepAll => self.max_samples as usize,
        }
    }

    /// The wire form.
    pub fn to_repr(&self) -> QosRepr {
        let us = |d: Option<Duration>| {
            d.map_or(u64::MAX, |d| {
                u64::try_from(d.as_micros()).unwrap_or(u64::MAX - 1).max(1)
            })
        };
        let (history, depth) = match self.history {
            History::KeepLast(n) => (HistoryKind::KeepLast, n),
            History::KeepAll => (HistoryKind::KeepAll, 0),
        };
        QosRepr {
            reliability: self.reliability,
            durability: self.durability,
            history,
            depth,
            max_samples: self.max_samples,
            max_bytes: self.max_bytes,
            deadline_us: us(self.deadline),
            lifespan_us: us(self.lifespan),
            liveliness: Liveliness::Automatic,
            lease_us: us(self.lease),
        }
    }

    /// From the wire form (already validated by `tether-wire`).
    pub fn from_repr(r: &QosRepr) -> Self {
        let d = |us: u64| (us != u64::MAX).then(|| Duration::from_micros(us).min(MAX_DURATION));
        Qos {
            reliability: r.reliability,
            durability: r.durability,
            history: match r.history {
                HistoryKind::KeepLast => History::KeepLast(r.depth.max(1)),
                HistoryKind::KeepAll => History::KeepAll,
            },
            max_samples: r.max_samples.max(1),
            max_bytes: r.max_bytes.max(1),
            deadline: d(r.deadline_us),
            lifespan: d(r.lifespan_us),
            lease: d(r.lease_us),
            batch: None,
            coalesce: false,
            publish: None,
            inactivity: None,
            encoding: Encoding::Unset,
        }
    }
}

impl fmt::Display for Qos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reliability={} durability={} history={}",
            reliability_str(self.reliability),
            durability_str(self.durability),
            match self.history {
                History::KeepLast(n) => format!("keep_last({n})"),
                History::KeepAll => "keep_all".into(),
            }
        )?;
        if let Some(d) = self.deadline {
            write!(f, " deadline={d:?}")?;
        }
        if let Some(d) = self.lifespan {
            write!(f, " lifespan={d:?}")?;
        }
        if let Some(d) = self.lease {
            write!(f, " liveliness_lease={d:?}")?;
        }
        Ok(())
    }
}

pub(crate) fn reliability_str(r: Reliability) -> &'static str {
    match r {
        Reliability::BestEffort => "best_effort",
        Reliability::Reliable => "reliable",
    }
}

pub(crate) fn durability_str(d: Durability) -> &'static str {
    match d {
        Durability::Volatile => "volatile",
        Durability::TransientLocal => "transient_local",
    }
}

fn dur_str(d: Option<Duration>) -> String {
    d.map_or_else(|| "infinite".to_string(), |d| format!("{d:?}"))
}

/// The policy that made a writer and a reader incompatible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum QosPolicy {
    /// The writer offers best effort, the reader requests reliable.
    Reliability,
    /// The writer offers volatile, the reader requests transient-local.
    Durability,
    /// The writer's deadline is longer than the reader's.
    Deadline,
    /// The writer's liveliness lease is longer than the reader's.
    Liveliness,
    /// The endpoints name different types for the same topic.
    TypeName,
    /// They share no partition: they do not meet (partitions keep them apart by design;
    /// reported so that a mistyped partition is seen).
    Partition,
    /// In a secure realm, the writer protects samples less than the reader requires (say
    /// `encrypt` against `encrypt+sign`): the reader would refuse every sample
    /// (`under_protected`). Values are the modes (`off`, `encrypt`, `sign`,
    /// `encrypt+sign`).
    Protection,
}

impl fmt::Display for QosPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QosPolicy::Reliability => "reliability",
            QosPolicy::Durability => "durability",
            QosPolicy::Deadline => "deadline",
            QosPolicy::Liveliness => "liveliness",
            QosPolicy::TypeName => "type",
            QosPolicy::Partition => "partition",
            QosPolicy::Protection => "protection",
        })
    }
}

/// One reason a writer and reader cannot match, with both values as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The policy at fault.
    pub policy: QosPolicy,
    /// What the writer offers.
    pub offered: String,
    /// What the reader requests.
    pub requested: String,
}

/// The DDS rule: a writer's offer must be at least as strong as a reader's request, for
/// every policy. Returns every policy that fails (empty: compatible).
pub fn check_compatible(offered: &Qos, requested: &Qos) -> Vec<Mismatch> {
    let mut out = Vec::new();
    if offered.reliability < requested.reliability {
        out.push(Mismatch {
            policy: QosPolicy::Reliability,
            offered: reliability_str(offered.reliability).into(),
            requested: reliability_str(requested.reliability).into(),
        });
    }
    if offered.durability < requested.durability {
        out.push(Mismatch {
            policy: QosPolicy::Durability,
            offered: durability_str(offered.durability).into(),
            requested: durability_str(requested.durability).into(),
        });
    }
    let longer = |o: Option<Duration>, r: Option<Duration>| match (o, r) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(o), Some(r)) => o > r,
    };
    if longer(offered.deadline, requested.deadline) {
        out.push(Mismatch {
            policy: QosPolicy::Deadline,
            offered: dur_str(offered.deadline),
            requested: dur_str(requested.deadline),
        });
    }
    if longer(offered.lease, requested.lease) {
        out.push(Mismatch {
            policy: QosPolicy::Liveliness,
            offered: dur_str(offered.lease),
            requested: dur_str(requested.lease),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_ros2() {
        let q = Qos::default();
        assert!(q.is_reliable());
        assert_eq!(q.history(), History::KeepLast(10));
        assert_eq!(q.durability_kind(), Durability::Volatile);
    }

    #[test]
    fn compatibility_rules() {
        let be = Qos::new().best_effort();
        let rel = Qos::new();
        assert!(check_compatible(&rel, &be).is_empty());
        let m = check_compatible(&be, &rel);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].policy, QosPolicy::Reliability);
        assert_eq!(m[0].offered, "best_effort");
        assert_eq!(m[0].requested, "reliable");
        let m = check_compatible(&Qos::new(), &Qos::new().transient_local());
        assert_eq!(m[0].policy, QosPolicy::Durability);
        assert!(check_compatible(&Qos::new().transient_local(), &Qos::new()).is_empty());
        let fast = Qos::new().deadline(Duration::from_millis(10));
        let slow = Qos::new().deadline(Duration::from_millis(100));
        assert!(check_compatible(&fast, &slow).is_empty());
        assert_eq!(
            check_compatible(&slow, &fast)[0].policy,
            QosPolicy::Deadline
        );
        assert_eq!(
            check_compatible(&Qos::new(), &fast)[0].policy,
            QosPolicy::Deadline
        );
        let l = Qos::new().liveliness(Duration::from_secs(1));
        assert_eq!(
            check_compatible(&Qos::new(), &l)[0].policy,
            QosPolicy::Liveliness
        );
    }

    #[test]
    fn repr_roundtrip() {
        for q in [
            Qos::new(),
            Qos::new()
                .best_effort()
                .keep_all()
                .transient_local()
                .max_samples(7)
                .deadline(Duration::from_millis(3))
                .lifespan(Duration::from_secs(2))
                .liveliness(Duration::from_millis(500)),
        ] {
            assert_eq!(Qos::from_repr(&q.to_repr()), q);
        }
    }
}
