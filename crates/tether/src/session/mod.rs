//! The driver: pumps `tether-core` over `tether-transport`.
//!
//! Threads: one receive thread per session blocks on (or, in busy-poll mode, spins on) the
//! unicast socket; it takes what is waiting with one call (`recvmmsg`: several datagrams
//! per call in bursts, GRO messages split into their datagrams), hands each to the engine
//! under one lock, and runs
//! subscriber callbacks itself, so a sample crosses no thread between the socket and the
//! callback. A `put` runs the
//! engine and sends on the caller's thread. A discovery thread scans the registry directory
//! and receives multicast announcements; it is off the data path.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tether_core::{
    Encoding, EndpointInfo, EndpointKind, Event, FlowController, ParticipantId, Qos,
    RemoteEndpoint, RevocationRefusal, Sample, Stats,
};
use tether_transport::{Registry, Transport};

mod error;
mod graph;
mod log;
pub use log::shown as event_logged;
mod open;
mod publisher;
mod revocations;
mod router;
mod shared;
mod subscriber;
mod threads;

pub use error::{OpenError, PutError, RecvError};
pub use publisher::Publisher;
use shared::{Shared, Signal, Slot};
pub use subscriber::Subscriber;

type Callback = Arc<dyn Fn(Sample) + Send + Sync>;
type Listener = Arc<dyn Fn(&Event) + Send + Sync>;

/// A topic and what scopes matching on it besides QoS, and the label of its payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    name: String,
    type_name: String,
    partitions: Vec<String>,
    encoding: Encoding,
}

impl Topic {
    /// A topic name such as `/chatter`. As in ROS 2, a name is taken from the root: a
    /// leading `/` is implied, so `chatter` and `/chatter` are the same topic (the CLI
    /// also checks names against ROS 2's rules: `docs/cli.md#topic-names`).
    ///
    /// ```
    /// use tether::Topic;
    /// assert_eq!(Topic::new("chatter").name(), "/chatter");
    /// assert_eq!(Topic::new("robot1/odom"), Topic::new("/robot1/odom"));
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        let mut name = name.into();
        if !name.starts_with('/') {
            name.insert(0, '/');
        }
        Topic {
            name,
            type_name: String::new(),
            partitions: Vec::new(),
            encoding: Encoding::Unset,
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
    /// Labels what the payloads are (`json`, `cbor`, `cdr`, `text`, `bytes`): announced
    /// with the endpoint, so that `tether echo` can pretty-print JSON and CBOR, `tether
    /// info` and `tether topics -v` show it, and subscribers can ask
    /// ([`Subscriber::writer_encoding`]). A label only: payloads are bytes, never checked
    /// against it, and it plays no part in matching. Overrides [`Qos::encoding`].
    ///
    /// ```
    /// use tether::{Encoding, Topic};
    /// let t = Topic::new("/pose").encoding(Encoding::Json);
    /// assert_eq!(t.encoding_label(), Encoding::Json);
    /// ```
    pub fn encoding(mut self, e: Encoding) -> Self {
        self.encoding = e;
        self
    }
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The payloads' label ([`Topic::encoding`]; unset by default).
    pub fn encoding_label(&self) -> Encoding {
        self.encoding
    }
    fn info(&self, qos: Qos) -> EndpointInfo {
        let qos = if self.encoding == Encoding::Unset {
            qos
        } else {
            qos.encoding(self.encoding)
        };
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
    /// The name of its session (as it announces it: empty by default).
    pub participant_name: String,
    /// In a secure realm, the name its session's credential certifies (the realm's CA
    /// vouches for it), once the session has authenticated.
    pub certified_name: Option<String>,
    /// Writer or reader, topic, type, partitions, QoS (with the payloads' encoding label),
    /// protection mode. In a secure realm the topic is announced by id: members read its
    /// name and type from its description ([`topic_name`](Self::topic_name)).
    pub endpoint: RemoteEndpoint,
}

impl DiscoveredEndpoint {
    /// Its topic's name: in a secure realm, as its description gives it to members (the
    /// topic id, `#` and 64 hex digits, to a session that could not read it).
    pub fn topic_name(&self) -> &str {
        self.endpoint.topic_name()
    }

    /// Its type's name (empty: any, or not known).
    pub fn type_name(&self) -> &str {
        self.endpoint.type_name()
    }

    /// The label of its payloads.
    pub fn encoding(&self) -> Encoding {
        self.endpoint.info.qos.encoding_label()
    }

    /// Its session's name for people: the certified name in a secure realm, else the one
    /// it announces (`None`: unnamed).
    pub fn session_name(&self) -> Option<&str> {
        self.certified_name
            .as_deref()
            .or((!self.participant_name.is_empty()).then_some(self.participant_name.as_str()))
    }
}

/// Counters of a session: the engine's plus the transport's.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SessionStats {
    /// The engine's counters (drops of malformed input included).
    pub core: Stats,
    /// Datagrams the socket refused to send, other than those refused for their size
    /// ([`too_large`](Self::too_large): a path probe larger than the interface is, by design).
    pub send_errors: u64,
    /// Datagrams refused as larger than the path allows (`EMSGSIZE` with
    /// `transport.dont_fragment`: larger than the interface's MTU); each is also logged
    /// (a warning at most once a second) and told to the engine.
    pub too_large: u64,
    /// Receive errors other than time-outs.
    pub recv_errors: u64,
    /// UDP datagrams dropped because their source claimed a virtual address of a peer
    /// behind a router (`fd74:6574:6865:7200::/63`, [`tether_core::route`]): forged.
    pub virtual_source: u64,
    /// Send system calls made (several datagrams each when batched: `transport.batch_io`).
    pub send_calls: u64,
    /// Receive system calls that returned datagrams.
    pub recv_calls: u64,
    /// Routers this session dials (`[routers] connect`).
    pub routers: u64,
    /// Router links up now.
    pub routers_up: u64,
    /// Router links made (dialled again after a failure included).
    pub router_connects: u64,
    /// Frames sent to and received from routers.
    pub router_frames_sent: u64,
    /// Frames received from routers.
    pub router_frames_received: u64,
    /// Frames for a router link dropped because it was down (the engine repairs what a
    /// reliable topic loses) or its queue was full.
    pub router_frames_dropped: u64,
    /// Frames a router sent that were malformed or out of protocol (the link was closed).
    pub router_bad_frames: u64,
}

impl SessionStats {
    /// Every counter by name: the engine's ([`Stats::counters`]), then the transport's.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = self.core.counters();
        v.extend([
            ("send_errors", self.send_errors),
            ("too_large", self.too_large),
            ("recv_errors", self.recv_errors),
            ("virtual_source", self.virtual_source),
            ("send_calls", self.send_calls),
            ("recv_calls", self.recv_calls),
            ("routers", self.routers),
            ("routers_up", self.routers_up),
            ("router_connects", self.router_connects),
            ("router_frames_sent", self.router_frames_sent),
            ("router_frames_received", self.router_frames_received),
            ("router_frames_dropped", self.router_frames_dropped),
            ("router_bad_frames", self.router_bad_frames),
        ]);
        v
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

    /// Loads a newer revocation list of the realm from `path` (e.g. after `tether keys
    /// revoke`): peers it revokes lose every match at once, and the writers they read move to
    /// a new epoch. A session opened with a list file (`security.revocations`) does this by
    /// itself when the file changes; this is for lists elsewhere.
    ///
    /// Refused, with the list in force kept: when security is off, the file does not read,
    /// the list is not the realm CA's, or it is older than the list in force (a lower list
    /// serial): an old list never brings a revoked member back. The list in force given
    /// again changes nothing.
    pub fn set_revocations(&self, path: &std::path::Path) -> Result<(), RevocationRefusal> {
        revocations::load(&self.shared, path)
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
    /// liveliness, lost samples, refusals) on the thread that raised it.
    ///
    /// The first listener registered also gets, at once and on this thread, the events the
    /// session raised before (since it opened: at most the latest 1,024), so that `open`
    /// followed by `on_event` misses nothing. The session announces itself as it opens, and
    /// its peers answer within a millisecond: a refusal reported once per peer (a secure
    /// peer seen from a session without keys, a credential of another realm) would
    /// otherwise be lost for good when it came first. An event raised while these are
    /// handed over may reach the listener before them. Later listeners get only the events
    /// raised after they were registered.
    pub fn on_event(&self, listener: impl Fn(&Event) + Send + Sync + 'static) {
        let listener: Listener = Arc::new(listener);
        let backlog = {
            let mut inner = self.shared.lock();
            inner.listeners.push(listener.clone());
            inner.backlog.take()
        };
        for e in backlog.into_iter().flatten() {
            listener(&e);
        }
    }

    /// Endpoints of other sessions discovered so far.
    pub fn discovered(&self) -> Vec<DiscoveredEndpoint> {
        let g = self.shared.lock();
        g.core
            .remote_endpoints()
            .into_iter()
            .map(|(guid, participant_name, endpoint)| DiscoveredEndpoint {
                guid,
                certified_name: g.core.certified_name(guid.participant).map(str::to_string),
                participant_name,
                endpoint,
            })
            .collect()
    }

    /// The endpoint `guid` as discovered (`None`: not known, or one of this session's).
    /// A sample's writer is `sample.writer`: this says what it announced (its topic, its
    /// encoding label, its QoS).
    pub fn endpoint(&self, guid: tether_core::Guid) -> Option<DiscoveredEndpoint> {
        let g = self.shared.lock();
        let (participant_name, endpoint) = g.core.remote_endpoint(guid)?;
        Some(DiscoveredEndpoint {
            guid,
            certified_name: g.core.certified_name(guid.participant).map(str::to_string),
            participant_name: participant_name.to_string(),
            endpoint: endpoint.clone(),
        })
    }

    /// Other sessions discovered so far: id, name, address.
    pub fn participants(&self) -> Vec<(ParticipantId, String, SocketAddr)> {
        self.shared.lock().core.remote_participants()
    }

    /// What this session knows of its path to a remote participant: round trip, delivery
    /// rate, congestion window and bytes in flight (`None`: no such participant). Paths on
    /// this host are not congestion controlled (no window).
    pub fn path_stats(
        &self,
        participant: ParticipantId,
    ) -> Option<tether_core::congestion::PathStats> {
        self.shared
            .lock()
            .core
            .path_stats(participant, Instant::now())
    }

    /// The name a remote participant's credential certifies, once it has proved it holds it
    /// (None with security off, or before). In a secure realm, name peers by this rather than
    /// by the name they announce, which they choose themselves.
    pub fn certified_name(&self, participant: ParticipantId) -> Option<String> {
        self.shared
            .lock()
            .core
            .certified_name(participant)
            .map(str::to_string)
    }

    /// Counters, including every drop of malformed or unwanted input.
    pub fn stats(&self) -> SessionStats {
        let core = self.shared.lock().core.stats().clone();
        let io = self.shared.transport.io_stats();
        SessionStats {
            core,
            send_errors: self.shared.send_errors.load(Ordering::Relaxed),
            too_large: self.shared.too_large.load(Ordering::Relaxed),
            recv_errors: self.shared.recv_errors.load(Ordering::Relaxed),
            virtual_source: self.shared.virtual_source.load(Ordering::Relaxed),
            send_calls: io.send_calls,
            recv_calls: io.recv_calls,
            ..self.router_stats()
        }
    }

    /// The router links' counters (zero without routers).
    fn router_stats(&self) -> SessionStats {
        let Some(r) = &self.shared.routers else {
            return SessionStats::default();
        };
        let c = &r.counters;
        let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        SessionStats {
            routers: r.numbers().count() as u64,
            routers_up: r.links_up() as u64,
            router_connects: n(&c.connects),
            router_frames_sent: n(&c.frames_sent),
            router_frames_received: n(&c.frames_received),
            router_frames_dropped: n(&c.dropped_link_down) + n(&c.dropped_queue_full),
            router_bad_frames: n(&c.bad_frames),
            ..SessionStats::default()
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

/// How many times a closing session says goodbye, and how far apart: the goodbye carries
/// the final acknowledgements of its readers, and a writer that misses them counts what
/// they received as never acknowledged. At 30 % loss one copy is lost three times in ten,
/// three copies three times in a hundred (a path that loses every datagram for a while
/// defeats any number).
const GOODBYES: u32 = 3;
const GOODBYE_GAP: Duration = Duration::from_millis(15);

impl Drop for Session {
    fn drop(&mut self) {
        let peers = self.shared.with_core(|i, _| {
            i.core.close();
            !i.core.remote_participants().is_empty() || i.core.pending_participants() > 0
        });
        if peers {
            for _ in 1..GOODBYES {
                std::thread::sleep(GOODBYE_GAP);
                self.shared.with_core(|i, _| i.core.close());
            }
        }
        self.shared.closed.store(true, Ordering::SeqCst);
        if let Some(r) = &self.shared.routers {
            r.close();
        }
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
                    sig.notify();
                }
            }
        }
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// The kind of a discovered endpoint, for display.
pub fn kind_str(k: EndpointKind) -> &'static str {
    match k {
        EndpointKind::Writer => "publisher",
        EndpointKind::Reader => "subscriber",
    }
}
