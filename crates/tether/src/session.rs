//! The driver: pumps `tether-core` over `tether-transport`.
//!
//! Threads: one receive thread per session blocks on (or, in busy-poll mode, spins on) the
//! unicast socket; it hands each datagram to the engine and runs subscriber callbacks itself,
//! so a sample crosses no thread between the socket and the callback. A `put` runs the
//! engine and sends on the caller's thread. A discovery thread scans the registry directory
//! and receives multicast announcements; it is off the data path.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use tether_core::{
    EndpointInfo, EndpointKind, EntityId, Event, FlowController, Participant, ParticipantId,
    Priority, Qos, RemoteEndpoint, Sample, Stats, WriteError,
};
use tether_transport::{
    MulticastReceiver, Registry, Transport, UdpOptions, UdpTransport, default_registry_dir,
    interface_ipv4,
};

use crate::config::Config;

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The unicast socket could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// The registry directory could not be used.
    #[error("cannot use registry directory {dir}: {source}")]
    Registry {
        /// The directory.
        dir: std::path::PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Multicast discovery could not start.
    #[error("cannot join multicast group {group}:{port} on interface {interface}: {source}")]
    Multicast {
        /// The group.
        group: std::net::Ipv4Addr,
        /// The port.
        port: u16,
        /// The interface as configured.
        interface: String,
        /// The cause.
        source: io::Error,
    },
    /// A thread could not be spawned.
    #[error("cannot start session thread: {0}")]
    Thread(io::Error),
    /// The configuration is unusable (e.g. a bad flow controller).
    #[error(transparent)]
    Config(#[from] crate::ConfigError),
    /// The session's keys could not be used.
    #[error("security")]
    Keys(#[from] crate::keys::KeyError),
    /// The session's credential is not valid now.
    #[error("security: our own credential is not usable: {0}")]
    Credential(tether_crypto::CredentialError),
    /// The session's credential does not grant this endpoint.
    #[error(
        "our credential ({name}) grants no {kind} on {topic}; ask the realm for a credential that does (tether keys issue … --{flag} PATTERN)"
    )]
    NotGranted {
        /// Whose credential.
        name: String,
        /// `publish` or `subscribe`.
        kind: &'static str,
        /// The `tether keys issue` flag that grants it.
        flag: &'static str,
        /// The topic.
        topic: String,
    },
    /// A publisher's QoS names a flow controller the session does not have.
    #[error(
        "unknown flow controller '{0}': define it under [flow_controllers.{0}] or with Session::set_flow_controller"
    )]
    UnknownFlowController(String),
}

/// Why a `put` failed. Every variant hands the payload back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PutError {
    /// A keep-all writer stayed full for the whole `max_blocking_time`: some reliable reader
    /// is too slow. Nothing was sent; nothing was silently dropped.
    #[error(
        "put timed out after {waited:?}: the writer's history is full of samples a reliable reader has not acknowledged"
    )]
    Timeout {
        /// The payload.
        payload: Bytes,
        /// How long it waited.
        waited: Duration,
    },
    /// The sample is larger than `transport.max_sample_size`.
    #[error("sample of {} bytes exceeds max_sample_size ({max} bytes)", payload.len())]
    TooLarge {
        /// The payload.
        payload: Bytes,
        /// Largest accepted.
        max: usize,
    },
    /// The session is closed.
    #[error("session closed")]
    Closed(Bytes),
}

impl PutError {
    /// The payload that was not sent.
    pub fn into_payload(self) -> Bytes {
        match self {
            PutError::Timeout { payload, .. }
            | PutError::TooLarge { payload, .. }
            | PutError::Closed(payload) => payload,
        }
    }
}

/// Why a receive returned no sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// Nothing arrived in time.
    #[error("timed out")]
    Timeout,
    /// The session is closed.
    #[error("session closed")]
    Closed,
    /// This subscriber delivers through its callback.
    #[error("subscriber delivers through a callback")]
    CallbackMode,
}

/// A topic and what scopes matching on it besides QoS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    name: String,
    type_name: String,
    partitions: Vec<String>,
}

impl Topic {
    /// A topic name such as `/chatter`.
    pub fn new(name: impl Into<String>) -> Self {
        Topic {
            name: name.into(),
            type_name: String::new(),
            partitions: Vec::new(),
        }
    }
    /// The type name (empty matches any type).
    pub fn type_name(mut self, t: impl Into<String>) -> Self {
        self.type_name = t.into();
        self
    }
    /// Adds a partition (communication group); endpoints meet only within a shared one.
    pub fn partition(mut self, p: impl Into<String>) -> Self {
        self.partitions.push(p.into());
        self
    }
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
    fn info(&self, qos: Qos) -> EndpointInfo {
        EndpointInfo {
            topic: self.name.clone(),
            type_name: self.type_name.clone(),
            partitions: self.partitions.clone(),
            qos,
        }
    }
}

impl From<&str> for Topic {
    fn from(s: &str) -> Self {
        Topic::new(s)
    }
}

impl From<String> for Topic {
    fn from(s: String) -> Self {
        Topic::new(s)
    }
}

/// An endpoint seen on the network.
#[derive(Debug, Clone)]
pub struct DiscoveredEndpoint {
    /// Its identity.
    pub guid: tether_core::Guid,
    /// The name of its session.
    pub participant_name: String,
    /// Writer or reader, topic, type, partitions, QoS.
    pub endpoint: RemoteEndpoint,
}

/// Counters of a session: the engine's plus the transport's.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SessionStats {
    /// The engine's counters (drops of malformed input included).
    pub core: Stats,
    /// Datagrams the socket refused to send.
    pub send_errors: u64,
    /// Receive errors other than time-outs.
    pub recv_errors: u64,
}

type Callback = Arc<dyn Fn(Sample) + Send + Sync>;
type Listener = Arc<dyn Fn(&Event) + Send + Sync>;

#[derive(Default)]
struct Signal {
    cv: Condvar,
    waker: Mutex<Option<Waker>>,
}

enum Slot {
    Callback(Callback),
    Queue(Arc<Signal>),
}

struct Inner {
    core: Participant,
    /// The sender threads are waiting for asynchronous writers' data (notify on a write).
    sender_idle: bool,
    bulk_idle: bool,
    subs: BTreeMap<EntityId, Slot>,
    listeners: Vec<Listener>,
    /// When the receive thread will wake on its own (it sleeps in recv until then).
    armed: Option<Instant>,
}

struct Shared {
    inner: Mutex<Inner>,
    transport: UdpTransport,
    writer_cv: Condvar,
    /// Wakes the sender thread.
    sender_cv: Condvar,
    closed: AtomicBool,
    max_blocking: Duration,
    busy_poll: AtomicBool,
    send_errors: AtomicU64,
    recv_errors: AtomicU64,
}

/// Work to do after the engine's lock is released: callbacks and event listeners.
#[derive(Default)]
struct Deferred {
    callbacks: Vec<Callback>,
    /// Samples for `callbacks[i]`.
    calls: Vec<(u32, Sample)>,
    events: Vec<(Listener, Event)>,
}

impl Deferred {
    fn run(&mut self) {
        if self.calls.is_empty() && self.events.is_empty() {
            self.callbacks.clear();
            return;
        }
        for (i, s) in self.calls.drain(..) {
            if let Some(cb) = self.callbacks.get(i as usize) {
                cb(s);
            }
        }
        self.callbacks.clear();
        for (l, e) in self.events.drain(..) {
            l(&e);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends what the engine produced and dispatches its events. Called with the lock held.
    fn drive(&self, inner: &mut Inner, now: Instant, out: &mut Deferred) {
        while let Some(t) = inner.core.poll_transmit() {
            if self.transport.send(t.dest, &t.head, &t.body).is_err() {
                self.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        while let Some(e) = inner.core.poll_event() {
            match &e {
                Event::DataAvailable { reader } => match inner.subs.get(reader) {
                    Some(Slot::Callback(cb)) => {
                        // One clone of the callback per event, not per sample.
                        let i = out.callbacks.len() as u32;
                        out.callbacks.push(cb.clone());
                        let calls = &mut out.calls;
                        inner.core.take_all(now, *reader, |s| calls.push((i, s)));
                    }
                    Some(Slot::Queue(sig)) => {
                        sig.cv.notify_all();
                        if let Some(w) = sig.waker.lock().unwrap_or_else(|p| p.into_inner()).take()
                        {
                            w.wake();
                        }
                    }
                    None => {}
                },
                Event::WriterReady { .. } => self.writer_cv.notify_all(),
                Event::IncompatibleQos(q) => tracing::warn!("{q}"),
                Event::DeadlineMissed { topic, side, .. } => {
                    tracing::debug!(topic, ?side, "deadline missed")
                }
                _ => {}
            }
            for l in &inner.listeners {
                out.events.push((l.clone(), e.clone()));
            }
        }
        // Taking may have freed room for local writers and produced transmits.
        while let Some(t) = inner.core.poll_transmit() {
            if self.transport.send(t.dest, &t.head, &t.body).is_err() {
                self.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.rearm(inner);
    }

    /// Wakes the receive thread if the engine now wants to run earlier than it will wake.
    fn rearm(&self, inner: &mut Inner) {
        if !inner.core.take_timers_changed() || self.busy_poll.load(Ordering::Relaxed) {
            return;
        }
        if let (Some(t), Some(armed)) = (inner.core.poll_timeout(), inner.armed) {
            if t + Duration::from_millis(1) < armed {
                inner.armed = Some(t);
                self.transport.wake();
            }
        }
    }

    /// Runs `f` on the engine, then drives it and runs deferred work outside the lock.
    fn with_core<R>(&self, f: impl FnOnce(&mut Inner, Instant) -> R) -> R {
        let mut d = Deferred::default();
        let r = {
            let mut g = self.lock();
            let now = Instant::now();
            let r = f(&mut g, now);
            self.drive(&mut g, now, &mut d);
            r
        };
        d.run();
        r
    }
}

/// A tether session: one participant in a domain, with its sockets and threads.
///
/// ```no_run
/// use tether::{Qos, Session, Config};
/// let session = Session::open(Config::default())?;
/// let publisher = session.publisher("/chatter", Qos::default())?;
/// let subscriber = session.subscriber("/chatter", Qos::default())?;
/// publisher.put(&b"hello"[..])?;
/// let sample = subscriber.recv()?;
/// assert_eq!(&sample.payload[..], b"hello");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Session {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    _registry: Option<Registry>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("addr", &self.shared.transport.local_addr())
            .finish()
    }
}

fn random_id() -> u64 {
    loop {
        let mut b = [0u8; 8];
        if getrandom::fill(&mut b).is_err() {
            // No entropy source: fall back to time and pid, still unique enough for ids.
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
            return t ^ ((std::process::id() as u64) << 32) | 1;
        }
        let v = u64::from_le_bytes(b);
        if v != 0 {
            return v;
        }
    }
}

/// Nanoseconds since the UNIX epoch, for source timestamps.
pub(crate) fn wall_ns() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    d.as_secs()
        .wrapping_mul(1_000_000_000)
        .wrapping_add(u64::from(d.subsec_nanos()))
}

impl Session {
    /// Opens a session: binds its socket, registers for discovery, starts its threads.
    pub fn open(config: Config) -> Result<Session, OpenError> {
        let addr = config.listen_addr();
        // The discovery group's socket also takes data when readers here take data by
        // multicast, with or without multicast discovery.
        let mcast_if = if config.discovery.multicast || config.transport.multicast_data {
            Some(
                interface_ipv4(&config.discovery.interface).map_err(|source| {
                    OpenError::Multicast {
                        group: config.discovery.multicast_group,
                        port: config.discovery.multicast_port,
                        interface: config.discovery.interface.clone(),
                        source,
                    }
                })?,
            )
        } else {
            None
        };
        let transport = UdpTransport::bind(&UdpOptions {
            bind: addr,
            recv_buffer: config.transport.recv_buffer,
            send_buffer: config.transport.send_buffer,
            max_datagram: config.transport.max_datagram,
            multicast_if: mcast_if,
        })
        .map_err(|source| OpenError::Bind { addr, source })?;
        let id = random_id();
        let now = Instant::now();
        let mut cc = tether_core::Config::new(config.domain, ParticipantId(id));
        cc.name = if config.name.is_empty() {
            format!("pid{}", std::process::id())
        } else {
            config.name.clone()
        };
        cc.lease = Duration::from_millis(config.discovery.lease_ms);
        cc.announce_period = config.announce_period();
        cc.heartbeat_period = Duration::from_millis(config.reliability.heartbeat_period_ms);
        cc.max_datagram = config.transport.max_datagram;
        cc.max_sample_size = config.transport.max_sample_size;
        cc.max_reassembly_bytes = config.transport.max_reassembly_bytes;
        cc.reassembly_timeout = Duration::from_millis(config.transport.reassembly_timeout_ms);
        if config.transport.multicast_data {
            // The discovery thread's socket has joined the group; what arrives there is
            // handled like anything else.
            cc.data_group = Some(std::net::SocketAddrV4::new(
                config.discovery.multicast_group,
                config.discovery.multicast_port.wrapping_add(config.domain),
            ));
        }
        if config.security.enabled() {
            let path = config.security.keys.as_ref().ok_or_else(|| {
                OpenError::Config(crate::ConfigError::Invalid(
                    "security needs security.keys".into(),
                ))
            })?;
            let b = crate::keys::KeyBundle::load(path)?;
            let revocations = match &config.security.revocations {
                Some(p) => Some(crate::keys::load_revocations(p, &b.ca_public)?),
                None => None,
            };
            let unix = crate::keys::unix_now();
            b.credential
                .verify(&b.ca_public, unix, revocations.as_ref())
                .map_err(OpenError::Credential)?;
            let suite = match &config.security.suite {
                Some(s) => s.parse().map_err(|e: tether_crypto::UnknownSuite| {
                    OpenError::Config(crate::ConfigError::Invalid(format!("security.suite: {e}")))
                })?,
                None => tether_crypto::Suite::auto(),
            };
            cc.security = Some(Arc::new(
                tether_core::Security::new(
                    b.identity,
                    b.credential,
                    b.ca_public,
                    b.realm_secret,
                    revocations,
                    now,
                    unix,
                )
                .with_suite(suite)
                .with_pairwise(config.security.pairwise)
                .with_protection(
                    match config.security.mode.as_deref() {
                        None | Some("off") => "encrypt",
                        Some(m) => m,
                    }
                    .parse()
                    .map_err(|e: tether_crypto::UnknownProtection| {
                        OpenError::Config(crate::ConfigError::Invalid(format!(
                            "security.mode: {e}"
                        )))
                    })?,
                    config
                        .security
                        .topics
                        .iter()
                        .map(|(p, m)| {
                            m.parse().map(|m| (p.clone(), m)).map_err(
                                |e: tether_crypto::UnknownProtection| {
                                    OpenError::Config(crate::ConfigError::Invalid(format!(
                                        "security.topics: {e}"
                                    )))
                                },
                            )
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            ));
        }
        let mut core = Participant::new(cc, now);
        for (name, spec) in config.flow_controller_specs()? {
            core.set_flow_controller(&name, spec);
        }
        for p in &config.discovery.peers {
            core.add_target(*p);
        }
        let mcast = match mcast_if {
            Some(ifa) => {
                let port = config.discovery.multicast_port.wrapping_add(config.domain);
                let rx = MulticastReceiver::join(config.discovery.multicast_group, port, ifa)
                    .map_err(|source| OpenError::Multicast {
                        group: config.discovery.multicast_group,
                        port,
                        interface: config.discovery.interface.clone(),
                        source,
                    })?;
                if config.discovery.multicast {
                    core.add_target(SocketAddr::new(
                        config.discovery.multicast_group.into(),
                        port,
                    ));
                }
                Some(rx)
            }
            None => None,
        };
        let registry = if config.discovery.registry {
            let dir = config
                .discovery
                .registry_dir
                .clone()
                .unwrap_or_else(default_registry_dir);
            let r = Registry::register(&dir, config.domain, id, transport.host_local_addr())
                .map_err(|source| OpenError::Registry { dir, source })?;
            for a in r.scan() {
                core.add_target(a);
            }
            Some(r)
        } else {
            None
        };
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                core,
                sender_idle: false,
                bulk_idle: false,
                subs: BTreeMap::new(),
                listeners: Vec::new(),
                armed: None,
            }),
            transport,
            writer_cv: Condvar::new(),
            sender_cv: Condvar::new(),
            closed: AtomicBool::new(false),
            max_blocking: Duration::from_millis(config.reliability.max_blocking_time_ms),
            busy_poll: AtomicBool::new(config.transport.busy_poll),
            send_errors: AtomicU64::new(0),
            recv_errors: AtomicU64::new(0),
        });
        shared.with_core(|_, _| ());
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("tether-recv".into())
                .spawn(move || recv_loop(&s))
                .map_err(OpenError::Thread)?,
        );
        let s = shared.clone();
        let reg_dir = registry.as_ref().map(|r| {
            (
                r.dir().to_path_buf(),
                config.domain,
                id,
                s.transport.host_local_addr(),
            )
        });
        threads.push(
            std::thread::Builder::new()
                .name("tether-discovery".into())
                .spawn(move || discovery_loop(&s, reg_dir, mcast))
                .map_err(OpenError::Thread)?,
        );
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("tether-sender".into())
                .spawn(move || {
                    sender_loop(&s, &[Priority::Realtime, Priority::Default], |i| {
                        &mut i.sender_idle
                    })
                })
                .map_err(OpenError::Thread)?,
        );
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("tether-bulk".into())
                .spawn(move || {
                    if let Err(e) = tether_transport::background_thread() {
                        tracing::debug!("bulk sender stays at normal priority: {e}");
                    }
                    sender_loop(&s, &[Priority::Bulk], |i| &mut i.bulk_idle)
                })
                .map_err(OpenError::Thread)?,
        );
        Ok(Session {
            shared,
            threads,
            _registry: registry,
        })
    }

    /// This session's participant id.
    pub fn id(&self) -> ParticipantId {
        self.shared.lock().core.id()
    }

    /// The socket address of this session.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.transport.local_addr()
    }

    /// Creates a publisher.
    pub fn publisher(&self, topic: impl Into<Topic>, qos: Qos) -> Result<Publisher, OpenError> {
        let topic = topic.into();
        self.granted(&topic.name, true)?;
        let info = topic.info(qos);
        let id = self
            .shared
            .with_core(|i, now| i.core.create_writer(now, info))
            .map_err(|e| match e {
                tether_core::CreateError::UnknownFlowController(n) => {
                    OpenError::UnknownFlowController(n)
                }
            })?;
        Ok(Publisher {
            shared: self.shared.clone(),
            id,
            topic: topic.name,
            asynchronous: qos.publish_async().is_some(),
        })
    }

    /// Loads a new revocation list of the realm (e.g. after `tether keys revoke`): peers it
    /// revokes lose every match at once, and the writers they read move to a new epoch.
    /// An error if security is off or the list is not the realm CA's.
    pub fn set_revocations(&self, path: &std::path::Path) -> Result<(), OpenError> {
        let ca = {
            let g = self.shared.lock();
            match g.core.config().security.as_ref() {
                Some(sec) => sec.ca_public,
                None => {
                    return Err(OpenError::Config(crate::ConfigError::Invalid(
                        "set_revocations: security is off in this session".into(),
                    )));
                }
            }
        };
        let list = crate::keys::load_revocations(path, &ca)?;
        self.shared
            .with_core(|i, now| i.core.set_revocations(now, list));
        Ok(())
    }

    /// With security on: refuses an endpoint our own credential does not grant, with a
    /// message that says so (peers would refuse it anyway).
    fn granted(&self, topic: &str, publish: bool) -> Result<(), OpenError> {
        let g = self.shared.lock();
        let Some(sec) = g.core.config().security.as_ref() else {
            return Ok(());
        };
        let c = &sec.credential;
        let ok = if publish {
            c.may_publish(topic)
        } else {
            c.may_subscribe(topic)
        };
        if ok {
            Ok(())
        } else {
            Err(OpenError::NotGranted {
                name: c.name.clone(),
                kind: if publish { "publish" } else { "subscribe" },
                flag: if publish { "pub" } else { "sub" },
                topic: topic.to_string(),
            })
        }
    }

    /// Defines (or redefines, for the writers already using it) a named flow controller for
    /// asynchronous publishers ([`Qos::flow_controller`]).
    pub fn set_flow_controller(&self, name: &str, spec: FlowController) {
        self.shared
            .with_core(|i, _| i.core.set_flow_controller(name, spec));
        self.shared.sender_cv.notify_one();
    }

    /// The flow controllers: name, setting, and bytes let through so far.
    pub fn flow_controllers(&self) -> Vec<(String, FlowController, u64)> {
        self.shared
            .lock()
            .core
            .flow_controllers()
            .map(|(n, f, b)| (n.to_string(), f, b))
            .collect()
    }

    /// Creates a subscriber whose samples are taken with `recv`, `try_recv` or as a stream.
    pub fn subscriber(&self, topic: impl Into<Topic>, qos: Qos) -> Result<Subscriber, OpenError> {
        let topic = topic.into();
        self.granted(&topic.name, false)?;
        let info = topic.info(qos);
        let sig = Arc::new(Signal::default());
        let s2 = sig.clone();
        let id = self.shared.with_core(|i, now| {
            let id = i.core.create_reader(now, info);
            i.subs.insert(id, Slot::Queue(s2));
            id
        });
        Ok(Subscriber {
            shared: self.shared.clone(),
            id,
            topic: topic.name,
            signal: Some(sig),
        })
    }

    /// Creates a subscriber that calls `callback` for every sample, on the thread that
    /// received it (no hand-off). Keep the callback short; it delays later samples.
    pub fn subscriber_with_callback(
        &self,
        topic: impl Into<Topic>,
        qos: Qos,
        callback: impl Fn(Sample) + Send + Sync + 'static,
    ) -> Result<Subscriber, OpenError> {
        let topic = topic.into();
        self.granted(&topic.name, false)?;
        let info = topic.info(qos);
        let cb: Callback = Arc::new(callback);
        let id = self.shared.with_core(|i, now| {
            let id = i.core.create_reader(now, info);
            i.subs.insert(id, Slot::Callback(cb));
            // Samples a local transient-local writer delivered at creation.
            if let Some(Slot::Callback(cb)) = i.subs.get(&id) {
                let cb = cb.clone();
                let mut v = Vec::new();
                while let Some(s) = i.core.take(now, id) {
                    v.push(s);
                }
                (id, Some((cb, v)))
            } else {
                (id, None)
            }
        });
        let (id, backlog) = id;
        if let Some((cb, v)) = backlog {
            for s in v {
                cb(s);
            }
        }
        Ok(Subscriber {
            shared: self.shared.clone(),
            id,
            topic: topic.name,
            signal: None,
        })
    }

    /// Calls `listener` for every engine event (matches, incompatible QoS, deadlines,
    /// liveliness, lost samples) on the thread that raised it.
    pub fn on_event(&self, listener: impl Fn(&Event) + Send + Sync + 'static) {
        self.shared.lock().listeners.push(Arc::new(listener));
    }

    /// Endpoints of other sessions discovered so far.
    pub fn discovered(&self) -> Vec<DiscoveredEndpoint> {
        self.shared
            .lock()
            .core
            .remote_endpoints()
            .into_iter()
            .map(|(guid, participant_name, endpoint)| DiscoveredEndpoint {
                guid,
                participant_name,
                endpoint,
            })
            .collect()
    }

    /// Other sessions discovered so far: id, name, address.
    pub fn participants(&self) -> Vec<(ParticipantId, String, SocketAddr)> {
        self.shared.lock().core.remote_participants()
    }

    /// Counters, including every drop of malformed or unwanted input.
    pub fn stats(&self) -> SessionStats {
        let core = self.shared.lock().core.stats().clone();
        SessionStats {
            core,
            send_errors: self.shared.send_errors.load(Ordering::Relaxed),
            recv_errors: self.shared.recv_errors.load(Ordering::Relaxed),
        }
    }

    /// Switches the receive thread between blocking (sleeps between datagrams, ~20-25 µs
    /// wake-up per datagram when it runs on another CPU) and busy-polling (spins on the
    /// socket: lowest latency, one CPU kept busy).
    pub fn set_busy_poll(&self, on: bool) {
        self.shared.busy_poll.store(on, Ordering::SeqCst);
        self.shared.transport.wake();
    }

    /// Largest sample one `put` accepts (`transport.max_sample_size`).
    pub fn max_sample_size(&self) -> usize {
        self.shared.lock().core.max_sample_size()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.with_core(|i, _| i.core.close());
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.transport.wake();
        self.shared.writer_cv.notify_all();
        {
            let _g = self.shared.lock();
            self.shared.sender_cv.notify_all();
        }
        {
            let g = self.shared.lock();
            for s in g.subs.values() {
                if let Slot::Queue(sig) = s {
                    sig.cv.notify_all();
                    if let Some(w) = sig.waker.lock().unwrap_or_else(|p| p.into_inner()).take() {
                        w.wake();
                    }
                }
            }
        }
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn recv_loop(shared: &Shared) {
    let mut chunk = BytesMut::new();
    let mut deferred = Deferred::default();
    let mut next_timer = Instant::now();
    let mut armed: Option<Instant> = None;
    let mut published: Option<Instant> = None;
    let mut busy = false;
    let _ = shared.transport.set_nonblocking(false);
    while !shared.closed.load(Ordering::Relaxed) {
        let want_busy = shared.busy_poll.load(Ordering::Relaxed);
        if want_busy != busy {
            busy = want_busy;
            let _ = shared.transport.set_nonblocking(busy);
            armed = None;
        }
        let now = Instant::now();
        if now >= next_timer {
            {
                let mut g = shared.lock();
                g.core.handle_timeout(now);
                shared.drive(&mut g, now, &mut deferred);
                next_timer = g
                    .core
                    .poll_timeout()
                    .unwrap_or(now + Duration::from_millis(100));
            }
            deferred.run();
        }
        if !busy {
            // Sleep in recv until the next timer, at most 200 ms, at least 1 ms.
            let wake = next_timer.clamp(
                now + Duration::from_millis(1),
                now + Duration::from_millis(200),
            );
            let differs = armed.is_none_or(|a| {
                let d = if a > wake { a - wake } else { wake - a };
                d > Duration::from_micros(500) || a <= now
            });
            if differs {
                let _ = shared.transport.set_read_timeout(Some(wake - now));
                armed = Some(wake);
            }
            if armed != published {
                shared.lock().armed = armed;
                published = armed;
            }
        }
        match shared.transport.recv(&mut chunk) {
            Ok((d, from)) => {
                if d.is_empty() {
                    // A wake-up: re-read the timers.
                    let g = shared.lock();
                    next_timer = g.core.poll_timeout().unwrap_or(next_timer);
                    armed = None;
                    continue;
                }
                {
                    let mut g = shared.lock();
                    let now = Instant::now();
                    g.core.handle_datagram(now, from, &d);
                    shared.drive(&mut g, now, &mut deferred);
                    if let Some(t) = g.core.poll_timeout() {
                        next_timer = t;
                    }
                }
                deferred.run();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if busy {
                    std::hint::spin_loop();
                } else {
                    armed = None;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                // e.g. ECONNREFUSED reported for an earlier send to a closed port: harmless.
                shared.recv_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A sender: releases asynchronous writers' datagrams of `classes` one at a time, by class
/// and flow controller, and sends each with the engine's lock released. A synchronous `put`
/// (which sends on its own thread) never waits behind a bulk transfer, and an asynchronous
/// realtime sample waits at most for the one datagram being sent. Bulk has its own sender
/// in the OS's background class, so moving bulk data never takes a CPU from a realtime
/// thread of this or another process.
fn sender_loop(shared: &Shared, classes: &[Priority], idle: fn(&mut Inner) -> &mut bool) {
    let mut deferred = Deferred::default();
    let mut g = shared.lock();
    while !shared.closed.load(Ordering::Relaxed) {
        let now = Instant::now();
        let t = g.core.poll_scheduled_in(now, classes);
        if g.core.has_output() {
            shared.drive(&mut g, now, &mut deferred);
        }
        match t {
            Some(t) => {
                drop(g);
                deferred.run();
                if shared.transport.send(t.dest, &t.head, &t.body).is_err() {
                    shared.send_errors.fetch_add(1, Ordering::Relaxed);
                }
                g = shared.lock();
                g.core.scheduled_sent(classes);
            }
            None => {
                let wait = match g.core.next_scheduled_in(now, classes) {
                    Some(at) => at.saturating_duration_since(now),
                    None => Duration::from_millis(200),
                };
                if !deferred.calls.is_empty() || !deferred.events.is_empty() {
                    drop(g);
                    deferred.run();
                    g = shared.lock();
                    continue;
                }
                if wait.is_zero() {
                    continue;
                }
                *idle(&mut g) = true;
                let (g2, _) = shared
                    .sender_cv
                    .wait_timeout(g, wait)
                    .unwrap_or_else(|p| p.into_inner());
                g = g2;
                *idle(&mut g) = false;
            }
        }
    }
}

type RegistryInfo = (std::path::PathBuf, u16, u64, SocketAddr);

fn discovery_loop(
    shared: &Shared,
    registry: Option<RegistryInfo>,
    mcast: Option<MulticastReceiver>,
) {
    let reg = registry.as_ref().and_then(|(dir, domain, id, addr)| {
        // A second handle on the same directory, only for scanning (the session's own
        // entry is owned by the Session).
        let root = dir.parent()?.to_path_buf();
        Some((root, *domain, *id, *addr))
    });
    let mut known: BTreeSet<SocketAddr> = BTreeSet::new();
    let mut chunk = BytesMut::new();
    let mut last_scan = Instant::now() - Duration::from_secs(1);
    let mut scan_every = Duration::from_millis(50);
    while !shared.closed.load(Ordering::Relaxed) {
        if let Some((root, domain, id, _)) = &reg {
            if last_scan.elapsed() >= scan_every {
                last_scan = Instant::now();
                scan_every = (scan_every * 2).min(Duration::from_millis(500));
                let found: BTreeSet<SocketAddr> = scan_dir(root, *domain, *id);
                let added: Vec<SocketAddr> = found.difference(&known).copied().collect();
                let removed: Vec<SocketAddr> = known.difference(&found).copied().collect();
                if !added.is_empty() || !removed.is_empty() {
                    shared.with_core(|i, _| {
                        for a in &added {
                            i.core.add_target(*a);
                        }
                        for a in &removed {
                            i.core.remove_target(*a);
                        }
                    });
                }
                known = found;
            }
        }
        match &mcast {
            Some(rx) => match rx.recv(&mut chunk) {
                Ok((d, from)) if !d.is_empty() => {
                    shared.with_core(|i, now| i.core.handle_datagram(now, from, &d));
                }
                _ => {}
            },
            None => std::thread::park_timeout(Duration::from_millis(50)),
        }
    }
}

/// Lists the registry entries of other sessions without owning an entry.
fn scan_dir(root: &std::path::Path, domain: u16, me: u64) -> BTreeSet<SocketAddr> {
    // Registering a throw-away entry would advertise us twice; read the directory directly
    // through a Registry-compatible scan.
    tether_transport::Registry::scan_dir(root, domain, me)
        .into_iter()
        .collect()
}

/// Publishes samples on one topic.
pub struct Publisher {
    shared: Arc<Shared>,
    id: EntityId,
    topic: String,
    asynchronous: bool,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("topic", &self.topic)
            .finish()
    }
}

impl Publisher {
    /// Publishes one sample, stamped with the current time. Returns its sequence number.
    ///
    /// A reliable keep-all publisher whose history is full of unacknowledged samples waits
    /// up to `reliability.max_blocking_time_ms` for room, then fails with
    /// [`PutError::Timeout`], handing the payload back.
    pub fn put(&self, payload: impl Into<Bytes>) -> Result<u64, PutError> {
        self.put_with_timestamp(payload, wall_ns())
    }

    /// Publishes one sample with the given source timestamp (ns since the UNIX epoch).
    pub fn put_with_timestamp(
        &self,
        payload: impl Into<Bytes>,
        timestamp_ns: u64,
    ) -> Result<u64, PutError> {
        let mut payload: Bytes = payload.into();
        let start = Instant::now();
        let mut now = start;
        // Created only if the engine produced work (most batched puts produce none).
        let mut deferred: Option<Deferred> = None;
        let mut g = self.shared.lock();
        loop {
            if self.shared.closed.load(Ordering::Relaxed) {
                return Err(PutError::Closed(payload));
            }
            let r = g.core.write(now, self.id, timestamp_ns, payload);
            if g.core.has_output() {
                let d = deferred.get_or_insert_with(Deferred::default);
                self.shared.drive(&mut g, now, d);
            } else {
                // Most batched puts produce nothing: only the timers may have moved.
                self.shared.rearm(&mut g);
            }
            if self.asynchronous && (g.sender_idle || g.bulk_idle) {
                // Both senders wait on one condvar; each re-checks its own classes.
                g.sender_idle = false;
                g.bulk_idle = false;
                self.shared.sender_cv.notify_all();
            }
            match r {
                Ok(seq) => {
                    drop(g);
                    if let Some(d) = deferred.as_mut() {
                        d.run();
                    }
                    return Ok(seq);
                }
                Err(WriteError::WouldBlock(p)) => {
                    let waited = start.elapsed();
                    if waited >= self.shared.max_blocking {
                        return Err(PutError::Timeout { payload: p, waited });
                    }
                    payload = p;
                    drop(g);
                    if let Some(d) = deferred.as_mut() {
                        d.run();
                    }
                    let g2 = self.shared.lock();
                    let left = self.shared.max_blocking - waited;
                    let (g3, _) = self
                        .shared
                        .writer_cv
                        .wait_timeout(g2, left.min(Duration::from_millis(20)))
                        .unwrap_or_else(|p| p.into_inner());
                    g = g3;
                    now = Instant::now();
                }
                Err(WriteError::TooLarge { payload, max }) => {
                    return Err(PutError::TooLarge { payload, max });
                }
                Err(e) => return Err(PutError::Closed(e.into_payload())),
            }
        }
    }

    /// Waits until every matched reliable reader has acknowledged every sample, up to
    /// `timeout`. True if they all did.
    pub fn wait_for_acknowledgments(&self, timeout: Duration) -> bool {
        let end = Instant::now().checked_add(timeout);
        // Heartbeats ask readers to acknowledge only now and then; ask now.
        self.shared
            .with_core(|i, now| i.core.request_acknowledgments(now, self.id));
        loop {
            if self.shared.lock().core.all_acked(self.id) {
                return true;
            }
            if end.is_some_and(|e| Instant::now() >= e)
                || self.shared.closed.load(Ordering::Relaxed)
            {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Samples an asynchronous publisher has accepted but its sender has not yet sent to
    /// every matched participant (0 for a synchronous one).
    pub fn unsent(&self) -> u64 {
        self.shared.lock().core.unsent(self.id)
    }

    /// The highest sequence number every matched reliable reader has acknowledged, with
    /// every one before it (0 if none; the last written if no reliable reader is matched).
    pub fn acknowledged(&self) -> u64 {
        self.shared.lock().core.acknowledged(self.id)
    }

    /// Sends this publisher's waiting batch now (with `Qos::batching`; otherwise a no-op).
    pub fn flush(&self) {
        self.shared.with_core(|i, now| i.core.flush(now, self.id));
    }

    /// How many readers this publisher is matched with.
    pub fn matched(&self) -> usize {
        self.shared.lock().core.matched_count(self.id)
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Samples held in this publisher's history.
    pub fn history_len(&self) -> usize {
        self.shared.lock().core.history_len(self.id)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.shared
            .with_core(|i, now| i.core.delete_endpoint(now, self.id));
    }
}

/// Receives samples on one topic.
pub struct Subscriber {
    shared: Arc<Shared>,
    id: EntityId,
    topic: String,
    signal: Option<Arc<Signal>>,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("topic", &self.topic)
            .finish()
    }
}

impl Subscriber {
    /// A sample if one is waiting.
    pub fn try_recv(&self) -> Option<Sample> {
        self.shared.with_core(|i, now| i.core.take(now, self.id))
    }

    /// Waits for the next sample.
    pub fn recv(&self) -> Result<Sample, RecvError> {
        self.recv_deadline(None)
    }

    /// Waits up to `d` for the next sample.
    pub fn recv_timeout(&self, d: Duration) -> Result<Sample, RecvError> {
        // A timeout too large to represent waits indefinitely.
        self.recv_deadline(Instant::now().checked_add(d))
    }

    fn recv_deadline(&self, deadline: Option<Instant>) -> Result<Sample, RecvError> {
        let Some(sig) = &self.signal else {
            return Err(RecvError::CallbackMode);
        };
        let mut deferred = Deferred::default();
        let mut g = self.shared.lock();
        loop {
            let now = Instant::now();
            if let Some(s) = g.core.take(now, self.id) {
                self.shared.drive(&mut g, now, &mut deferred);
                drop(g);
                deferred.run();
                return Ok(s);
            }
            if self.shared.closed.load(Ordering::Relaxed) {
                return Err(RecvError::Closed);
            }
            let wait = match deadline {
                Some(d) if d <= now => return Err(RecvError::Timeout),
                Some(d) => (d - now).min(Duration::from_millis(250)),
                None => Duration::from_millis(250),
            };
            g = sig
                .cv
                .wait_timeout(g, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// How many writers this subscriber is matched with.
    pub fn matched(&self) -> usize {
        self.shared.lock().core.matched_count(self.id)
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }
}

impl futures_core::Stream for Subscriber {
    type Item = Sample;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Sample>> {
        let Some(sig) = &self.signal else {
            return Poll::Ready(None);
        };
        let mut deferred = Deferred::default();
        let mut g = self.shared.lock();
        let now = Instant::now();
        if let Some(s) = g.core.take(now, self.id) {
            self.shared.drive(&mut g, now, &mut deferred);
            drop(g);
            deferred.run();
            return Poll::Ready(Some(s));
        }
        if self.shared.closed.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        *sig.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.shared.with_core(|i, now| {
            i.subs.remove(&self.id);
            i.core.delete_endpoint(now, self.id);
        });
    }
}

/// The kind of a discovered endpoint, for display.
pub fn kind_str(k: EndpointKind) -> &'static str {
    match k {
        EndpointKind::Writer => "publisher",
        EndpointKind::Reader => "subscriber",
    }
}
