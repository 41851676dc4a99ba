//! A session's links to routers (`[routers] connect`): how it meets sessions of other sites.
//!
//! The session dials each router over QUIC (so it works behind NAT: it only ever connects
//! out), presenting its realm credential in a certificate ([`tether_transport::quic`]); the
//! router presents one with the router role. Over the link go link frames
//! ([`tether_routing::frame`]): what the session publishes and subscribes, as 256-bit
//! routing keys, never names ([`Leaf`]); and the engine's own datagrams, untouched and still
//! sealed and authenticated end to end, as DATA (a writer's data, routed to every
//! subscriber of its key, one copy per link), UNICAST (to one participant) and ANNOUNCE
//! (discovery, flooded).
//!
//! To the engine a participant behind a router is a peer at a virtual address
//! ([`tether_core::route`]): what arrives from participant `P` on link `L` is handed to
//! `handle_datagram` from `virtual_addr(P, L)`, and a datagram the engine sends to such an
//! address, or to the link's group address, leaves here as a frame instead of a UDP
//! datagram ([`Routers::send`], called by `Shared::send_all`).
//!
//! A link that fails is dialled again with backoff (100 ms doubling to 2 s, jittered); on
//! every new link the session says again everything it publishes and subscribes, so a
//! restarted router gets all its routes back. The engine keeps its peers meanwhile (their
//! virtual addresses stay: a link keeps its number), and its end-to-end reliability repairs
//! what was lost while the link was down. A change of the host's address needs nothing: the
//! QUIC socket is bound to the wildcard address, so the next datagram leaves from the new
//! address and the router follows the connection to it (QUIC connection migration); if it
//! cannot, the link times out and is dialled again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_core::route;
use tether_routing::{Delivery, Frame, Leaf, LinkId, NodeId, ParticipantId, RouteKey};
use tether_transport::quic::{Backoff, LinkConfig, LinkIdentity, PeerPolicy, QuicEndpoint};
use tokio::sync::{Notify, mpsc, oneshot, watch};

use super::shared::Shared;

/// Frames waiting to go out on one link; beyond, frames are dropped and counted (the
/// engine's reliability repairs what a reliable topic loses).
const QUEUE: usize = 4096;

/// The least rate a link is taken to drain its queue at, before it has been measured and
/// when it is stalled (bytes a second): what the queue holds then waits at most this long
/// in the engine's reckoning ([`Routers::backlog`]).
const MIN_DRAIN_RATE: u64 = 1 << 20;

/// The longest a link's backlog is said to take. A writer re-sends a sample to a reader
/// behind the link only once the copy it queued could have left, so this is how long a
/// repair dropped on the way (by a router's full queue) can wait to be sent again. (At 1 s,
/// when every repeated request was answered once the backlog said then had passed, a link
/// with seconds of repairs queued after an outage took a copy of each missing sample about
/// every second: 557 MB sent for 76 MB delivered at 20 % loss.) A link made again forgets
/// the waits at once (`Participant::route_link_reset`): what its queue held then is gone.
const MAX_BACKLOG: Duration = Duration::from_secs(30);

/// The most the link thread hands QUIC in one write (frames queued meanwhile go together).
const BATCH_BYTES: usize = 256 << 10;

/// The most frames the link thread hands the engine under one lock.
const RECV_BATCH: usize = 64;

/// How long a router has to confirm a link (its preamble, once it accepted our
/// certificate) after our side of the handshake is done.
const CONFIRM_WITHIN: Duration = Duration::from_secs(10);

/// How long the link thread waits for goodbyes to be acknowledged by the router when the
/// session closes (a few of QUIC's probe timeouts on a lossy path).
const CLOSE_FLUSH: Duration = Duration::from_millis(500);

/// How long the link thread then lets its closed endpoint drain.
const CLOSE_IDLE: Duration = Duration::from_millis(200);

/// A frame as it waits to go: its head, the payload (referenced, not copied) and the
/// tag, written one after the other (`LinkSender::send_parts`).
type Parts = (Bytes, Bytes, Bytes);

/// A whole frame as [`Parts`].
fn whole(b: Bytes) -> Parts {
    (b, Bytes::new(), Bytes::new())
}

/// What an engine datagram to a router link is, for its frame: a writer's (its samples,
/// heartbeats, repairs: DATA to a link's group, UNICAST to one participant, under the
/// writer's routing key), or the announcement of one endpoint (ANNOUNCE or UNICAST under its
/// key, flagged if a reader's). Anything else goes untagged. A site's export list decides
/// tagged frames by their key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tag {
    /// A writer's datagram, under its routing key.
    Data([u8; 32]),
    /// The announcement of one local endpoint.
    Endpoint {
        /// Its routing key.
        key: [u8; 32],
        /// It is a reader.
        reader: bool,
    },
}

/// Counters of the router links, for [`SessionStats`](super::SessionStats).
#[derive(Debug, Default)]
pub(super) struct RouterCounters {
    pub(super) frames_sent: AtomicU64,
    pub(super) frames_received: AtomicU64,
    /// Frames dropped because their link was down.
    pub(super) dropped_link_down: AtomicU64,
    /// Frames dropped because their link's queue was full.
    pub(super) dropped_queue_full: AtomicU64,
    /// Frames a router sent that were malformed or unexpected (the link is closed).
    pub(super) bad_frames: AtomicU64,
    /// Links made (first and again).
    pub(super) connects: AtomicU64,
}

/// One configured router.
struct LinkOut {
    /// Its number: the port of its peers' virtual addresses.
    number: u16,
    /// `host:port` as configured.
    target: String,
    /// Frames may go (our side of the handshake is done).
    up: AtomicBool,
    /// The router confirmed the link (its preamble came): what `routers_up` counts.
    confirmed: AtomicBool,
    /// The link was up once: frames for it before then are not counted as dropped (the
    /// engine's first announcements, made again when it comes up).
    was_up: AtomicBool,
    tx: mpsc::Sender<Parts>,
    /// Bytes in `tx`'s queue.
    queued: AtomicU64,
    /// The rate (bytes a second) QUIC has been taking the queue's frames at, while it
    /// had some: 0 until measured.
    rate: AtomicU64,
}

fn parts_len(p: &Parts) -> u64 {
    (p.0.len() + p.1.len() + p.2.len()) as u64
}

impl LinkOut {
    /// Queues `p` for the link, counting its bytes: false, nothing queued, if the queue is
    /// full or closed. (A bound in bytes too, 16 or 64 MiB, dropped samples a link at 20 %
    /// loss would have carried a moment later, and its reader was lost: the second lossy
    /// review.)
    fn offer(&self, p: Parts) -> bool {
        let n = parts_len(&p);
        self.queued.fetch_add(n, Ordering::Relaxed);
        if self.tx.try_send(p).is_err() {
            self.took(n);
            return false;
        }
        true
    }

    /// `n` bytes left the queue.
    fn took(&self, n: u64) {
        let _ = self
            .queued
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
                Some(q.saturating_sub(n))
            });
    }

    /// QUIC took `bytes` of the queue's frames in `busy` (time it spent taking them): the
    /// drain rate moves a quarter of the way to that.
    fn drained(&self, bytes: u64, busy: Duration) {
        let r = (bytes as f64 / busy.as_secs_f64().max(1e-6)) as u64;
        let old = self.rate.load(Ordering::Relaxed);
        let ewma = if old == 0 { r } else { (old * 3 + r) / 4 };
        self.rate.store(ewma, Ordering::Relaxed);
    }

    /// How long what the queue holds takes to leave, at the rate measured (or the least).
    fn backlog(&self) -> Duration {
        let q = self.queued.load(Ordering::Relaxed);
        if q == 0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(q as f64 / self.drain_rate() as f64).min(MAX_BACKLOG)
    }

    /// The rate the queue is taken to drain at: as measured, at least `MIN_DRAIN_RATE`.
    fn drain_rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed).max(MIN_DRAIN_RATE)
    }
}

/// The session's side of its router links, shared by the engine's threads (which send
/// through it) and the link thread (which runs the QUIC links).
pub(super) struct Routers {
    links: Vec<LinkOut>,
    leaf: Mutex<Leaf>,
    /// The engine's local endpoints changed: what is advertised and subscribed is redone.
    pub(super) changed: Notify,
    shutdown: Notify,
    closing: AtomicBool,
    me: ParticipantId,
    pub(super) counters: RouterCounters,
    /// The revocation list the routers' certificates are checked against (shared with the
    /// links' verifier): replaced when the session's list is.
    revocations: tether_transport::quic::Revocations,
    ca_public: [u8; 32],
    /// The list was replaced: each link looks whether its router is revoked now.
    revoked: Notify,
}

/// What the link thread takes with it.
pub(super) struct LinkThread {
    routers: Arc<Routers>,
    receivers: Vec<mpsc::Receiver<Parts>>,
    endpoint_identity: LinkIdentity,
}

impl Routers {
    /// Router links for `targets` (`host:port` each, numbered from 1), for participant
    /// `me` in `domain`, and what the link thread runs for them
    /// ([`LinkThread::spawn`], whose idle timeout the links take).
    pub(super) fn new(
        targets: &[String],
        me: u64,
        domain: u16,
        identity: LinkIdentity,
        ca_public: [u8; 32],
        revocations: Option<tether_crypto::RevocationList>,
    ) -> (Arc<Routers>, LinkThread) {
        let mut links = Vec::new();
        let mut receivers = Vec::new();
        for (i, t) in targets.iter().enumerate() {
            let (tx, rx) = mpsc::channel(QUEUE);
            links.push(LinkOut {
                number: i as u16 + 1,
                target: t.clone(),
                up: AtomicBool::new(false),
                confirmed: AtomicBool::new(false),
                was_up: AtomicBool::new(false),
                tx,
                queued: AtomicU64::new(0),
                rate: AtomicU64::new(0),
            });
            receivers.push(rx);
        }
        let mut leaf = Leaf::new(NodeId(me), u32::from(domain));
        leaf.add_participant(ParticipantId(me));
        let revs = tether_transport::quic::Revocations::new();
        if let Some(list) = revocations {
            if let Err(e) = revs.replace(&ca_public, list) {
                tracing::warn!("router links: the revocation list is not used: {e}");
            }
        }
        let routers = Arc::new(Routers {
            links,
            leaf: Mutex::new(leaf),
            changed: Notify::new(),
            shutdown: Notify::new(),
            closing: AtomicBool::new(false),
            me: ParticipantId(me),
            counters: RouterCounters::default(),
            revocations: revs,
            ca_public,
            revoked: Notify::new(),
        });
        let thread = LinkThread {
            routers: routers.clone(),
            receivers,
            endpoint_identity: identity,
        };
        (routers, thread)
    }

    /// The link numbers, for the engine's route links.
    pub(super) fn numbers(&self) -> impl Iterator<Item = u16> + '_ {
        self.links.iter().map(|l| l.number)
    }

    /// True if a transmit to `dest` goes through a router link.
    pub(super) fn is_routed(dest: &SocketAddr) -> bool {
        route::is_routed(dest) || route::is_route_group(dest)
    }

    /// Sends one engine datagram (`head`, `body`, `tail` joined) to `dest`, a virtual
    /// address, as a frame: UNICAST to a participant, DATA (a writer's, [`Tag::Data`]) or
    /// ANNOUNCE (discovery) to a link's group, under the key and kind `tag` gives. Never
    /// blocks: a link that is down or whose queue is full drops it, counted.
    pub(super) fn send(
        &self,
        dest: SocketAddr,
        tag: Option<Tag>,
        head: &[u8],
        body: &Bytes,
        tail: &[u8],
    ) {
        let (key, reader) = match tag {
            Some(Tag::Data(k)) => (RouteKey(k), false),
            Some(Tag::Endpoint { key, reader }) => (RouteKey(key), reader),
            None => (RouteKey::default(), false),
        };
        let (frame, link) = if let Some((p, link)) = route::routed_participant(&dest) {
            (
                Frame::Unicast(tether_routing::frame::Unicast {
                    dst: ParticipantId(p.0),
                    src: self.me,
                    hops: 0,
                    key,
                    reader,
                    datagram: Bytes::new(),
                }),
                link,
            )
        } else if let Some(link) = route::group_link(&dest) {
            let f = match tag {
                Some(Tag::Data(k)) => Frame::Data(tether_routing::frame::Data {
                    key: RouteKey(k),
                    origin: NodeId(self.me.0),
                    src: self.me,
                    hops: 0,
                    datagram: Bytes::new(),
                }),
                _ => Frame::Announce(tether_routing::frame::Announce {
                    src: self.me,
                    origin: NodeId(self.me.0),
                    hops: 0,
                    key,
                    reader,
                    datagram: Bytes::new(),
                }),
            };
            (f, link)
        } else {
            return;
        };
        let Some(out) = self.links.iter().find(|l| l.number == link) else {
            return;
        };
        if !out.up.load(Ordering::Acquire) {
            if out.was_up.load(Ordering::Relaxed) {
                self.counters
                    .dropped_link_down
                    .fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let len = head.len() + body.len() + tail.len();
        let mut v = Vec::with_capacity(frame.encoded_len() + head.len() + tail.len());
        // The frame's head is written with an empty payload, then its length fixed to the
        // whole; the engine's headers follow it. The payload is referenced where the engine
        // keeps it (a sample's bytes are not copied here), and the tag goes last.
        if frame.encode_head(&mut v).is_err() {
            return;
        }
        let whole = u32::from_be_bytes([v[1], v[2], v[3], v[4]]) as usize + len;
        v[1..5].copy_from_slice(&(whole as u32).to_be_bytes());
        v.extend_from_slice(head);
        // Head and tag share one allocation, as two slices of it.
        let split = v.len();
        v.extend_from_slice(tail);
        let mut front = Bytes::from(v);
        let tag = front.split_off(split);
        let parts = (front, body.clone(), tag);
        if !out.offer(parts) {
            if out.tx.is_closed() {
                self.counters
                    .dropped_link_down
                    .fetch_add(1, Ordering::Relaxed);
            } else {
                self.counters
                    .dropped_queue_full
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The session's revocation list was replaced by `list` (the engine took it): routers
    /// it revokes are refused when dialled, and a link to one that is up is closed.
    pub(super) fn set_revocations(&self, list: tether_crypto::RevocationList) {
        match self.revocations.replace(&self.ca_public, list) {
            Ok(_) => self.revoked.notify_waiters(),
            Err(e) => tracing::warn!("router links: the new revocation list is not used: {e}"),
        }
    }

    /// Whether the list in force revokes `serial`.
    fn is_revoked(&self, serial: u64) -> bool {
        self.revocations
            .current()
            .is_some_and(|l| l.contains(serial))
    }

    /// Tells the engine how far behind each link is ([`LinkOut::backlog`]): its writers
    /// re-send to peers behind a link only once what it holds could have left.
    pub(super) fn note_backlogs(&self, core: &mut tether_core::Participant) {
        for l in &self.links {
            core.set_route_backlog(l.number, l.backlog());
            core.set_route_drain_rate(l.number, l.drain_rate());
        }
    }

    /// Links up now (confirmed by their router).
    pub(super) fn links_up(&self) -> usize {
        self.links
            .iter()
            .filter(|l| l.confirmed.load(Ordering::Relaxed))
            .count()
    }

    /// The session closes: the link thread sends what is queued (the goodbyes), closes
    /// its links and ends.
    pub(super) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.shutdown.notify_waiters();
        self.changed.notify_one();
    }

    /// Queues the leaf's frames on their links' queues (links that are up).
    fn flush_leaf(&self, leaf: &mut Leaf) {
        while let Some((LinkId(n), f)) = leaf.poll_transmit() {
            let Some(out) = self.links.iter().find(|l| u32::from(l.number) == n) else {
                continue;
            };
            if !out.up.load(Ordering::Acquire) {
                continue;
            }
            if let Ok(b) = f.to_bytes() {
                if !out.offer(whole(b)) {
                    self.counters
                        .dropped_queue_full
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    fn leaf(&self) -> std::sync::MutexGuard<'_, Leaf> {
        self.leaf.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl LinkThread {
    /// Starts the link thread of a session being opened (a current-thread tokio runtime,
    /// since QUIC needs one; the engine's threads never wait on it): it makes its QUIC
    /// endpoint at once, while the session loads its keys, then takes the links to run from
    /// the returned `setup` (made once the keys are loaded) and dials, and takes the engine
    /// from `engine` once the session is open. If either sender is dropped unsent, opening
    /// failed, and the thread ends.
    pub(super) fn spawn(
        idle_timeout: Duration,
        congestion: tether_transport::quic::Congestion,
    ) -> std::io::Result<EarlyLinks> {
        let (setup, setup_rx) = oneshot::channel();
        let (engine, engine_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("tether-routers".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!("router links: cannot start their runtime: {e}");
                        return;
                    }
                };
                rt.block_on(run_links(setup_rx, engine_rx, idle_timeout, congestion));
            })?;
        Ok(EarlyLinks {
            parts: Some((thread, setup, engine)),
        })
    }
}

/// The link thread of a session being opened, making its QUIC endpoint already
/// ([`LinkThread::spawn`]). Dropped before [`start`](Self::start) (opening failed), it ends
/// the thread and waits for it: a failed open leaves no thread behind.
pub(super) struct EarlyLinks {
    /// The thread, the sender of what it runs (once the session's keys are loaded), and the
    /// sender of the engine (once the session is open).
    parts: Option<EarlyParts>,
}

/// The parts of [`EarlyLinks`].
type EarlyParts = (
    std::thread::JoinHandle<()>,
    oneshot::Sender<LinkThread>,
    oneshot::Sender<Arc<Shared>>,
);

impl EarlyLinks {
    /// Hands the thread the links to run (it dials at once); returns the thread and the
    /// sender of the engine.
    pub(super) fn start(
        mut self,
        links: LinkThread,
    ) -> (std::thread::JoinHandle<()>, oneshot::Sender<Arc<Shared>>) {
        let Some((thread, setup, engine)) = self.parts.take() else {
            unreachable!("made with its parts, which only `start` takes, by value");
        };
        // A thread that could not make its endpoint said so, and ended: the links stay
        // down (what the engine sends them is counted as dropped).
        let _ = setup.send(links);
        (thread, engine)
    }
}

impl Drop for EarlyLinks {
    fn drop(&mut self) {
        if let Some((thread, setup, engine)) = self.parts.take() {
            // Without its setup or its engine the thread closes its endpoint and ends.
            drop((setup, engine));
            let _ = thread.join();
        }
    }
}

/// The link thread's work: see [`LinkThread::spawn`].
async fn run_links(
    setup: oneshot::Receiver<LinkThread>,
    engine: oneshot::Receiver<Arc<Shared>>,
    idle_timeout: Duration,
    congestion: tether_transport::quic::Congestion,
) {
    let mut lc = LinkConfig::default();
    // Engine datagrams are at most 64 KiB: a router sending more breaks the protocol.
    lc.max_frame((64 << 10) + 128);
    lc.idle_timeout(idle_timeout);
    lc.congestion(congestion);
    let bind: SocketAddr = "[::]:0".parse().expect("a literal address");
    let endpoint = QuicEndpoint::unconfigured_client(bind, &lc).or_else(|_| {
        QuicEndpoint::unconfigured_client("0.0.0.0:0".parse().expect("a literal address"), &lc)
    });
    let mut endpoint = match endpoint {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("router links: cannot open a QUIC endpoint: {e}");
            return;
        }
    };
    let Ok(LinkThread {
        routers,
        receivers,
        endpoint_identity,
    }) = setup.await
    else {
        // Opening failed before the keys were loaded.
        return;
    };
    let policy = PeerPolicy::new(
        routers.ca_public,
        routers.revocations.clone(),
        &[tether_crypto::Role::Router],
    );
    if let Err(e) = endpoint.set_client(&endpoint_identity, policy) {
        tracing::error!("router links: cannot present the session's credential: {e}");
        return;
    }
    let endpoint = Arc::new(endpoint);
    let (engine_tx, engine_rx) = watch::channel(None);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, rx) in receivers.into_iter().enumerate() {
        tasks.spawn(link_task(
            engine_rx.clone(),
            routers.clone(),
            endpoint.clone(),
            i,
            rx,
        ));
    }
    let Ok(shared) = engine.await else {
        // The session was not opened after all.
        routers.close();
        tasks.abort_all();
        endpoint.close(0, "session not opened");
        // The close reaches a router already linked: it need not wait out its timeout.
        let _ = tokio::time::timeout(CLOSE_IDLE, endpoint.wait_idle()).await;
        return;
    };
    let _ = engine_tx.send(Some(shared.clone()));
    tasks.spawn(endpoints_task(shared, routers.clone()));
    // Until the session closes; then a moment for the goodbyes already queued.
    while !routers.closing.load(Ordering::SeqCst) {
        let wait = routers.shutdown.notified();
        if routers.closing.load(Ordering::SeqCst) {
            break;
        }
        wait.await;
    }
    let _ = tokio::time::timeout(CLOSE_FLUSH, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    endpoint.close(0, "session closed");
    let _ = tokio::time::timeout(CLOSE_IDLE, endpoint.wait_idle()).await;
}

/// Resolves `host:port` (IPv4 first, as static peers are).
async fn resolve(target: &str) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(target)
        .await
        .map_err(|e| format!("cannot resolve {target}: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{target} resolves to no address"))
}

/// One router: dials it, keeps the link, dials again when it fails. The first dial starts
/// before the engine exists (`engine` has it once the session is open).
async fn link_task(
    mut engine: watch::Receiver<Option<Arc<Shared>>>,
    routers: Arc<Routers>,
    endpoint: Arc<QuicEndpoint>,
    index: usize,
    mut rx: mpsc::Receiver<Parts>,
) {
    let out = &routers.links[index];
    let id = LinkId(u32::from(out.number));
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut rng = tether_crypto::OsRandom;
    let mut last_error: Option<(String, Instant)> = None;
    // A warning said the link was lost or could not be made: its return is said as loudly.
    let said_down = AtomicBool::new(false);
    let host = out
        .target
        .rsplit_once(':')
        .map_or(out.target.as_str(), |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    while !routers.closing.load(Ordering::SeqCst) {
        let link = match resolve(&out.target).await {
            // Frames go with our last handshake flight; the router's preamble, which says
            // it accepted our certificate, is awaited below before the link counts as up.
            Ok(addr) => endpoint
                .connect_early(addr, &host)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        // A dial that fails, or a link the router never confirms (it refused our
        // certificate), is said once, and again only if it changes or every 30 s (a router
        // that is down for an hour is not 18,000 warnings), and dialled again after the
        // backoff's delay.
        let mut dial_failed = async |e: String| {
            let now = Instant::now();
            let say = last_error
                .as_ref()
                .is_none_or(|(m, t)| *m != e || now.duration_since(*t) > Duration::from_secs(30));
            if say {
                tracing::warn!("router {}: {e}; dialling again", out.target);
                said_down.store(true, Ordering::Relaxed);
                last_error = Some((e, now));
            }
            let d = backoff.next_delay(&mut rng);
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = routers.shutdown.notified() => {}
            }
        };
        let link = match link {
            Ok(l) => l,
            Err(e) => {
                dial_failed(e).await;
                continue;
            }
        };
        let shared = match engine.wait_for(Option::is_some).await {
            Ok(s) => s.clone().expect("waited for"),
            Err(_) => break,
        };
        // An IPv4 router dialled from the dual-stack socket is shown as IPv4, not ::ffff:a.b.c.d.
        let remote = link.remote_address();
        let remote = SocketAddr::new(remote.ip().to_canonical(), remote.port());
        let name = link.peer().name().to_string();
        let confirmed = AtomicBool::new(false);
        // What queued while the link was down is stale: the engine repairs it.
        while let Ok(p) = rx.try_recv() {
            out.took(parts_len(&p));
        }
        // HELLO and everything this session publishes and subscribes go first.
        let initial: Vec<Parts> = {
            let mut leaf = routers.leaf();
            leaf.link_up(id);
            let mut mine = Vec::new();
            while let Some((l, f)) = leaf.poll_transmit() {
                if l == id {
                    if let Ok(b) = f.to_bytes() {
                        mine.push(whole(b));
                    }
                } else if let Some(o) = routers
                    .links
                    .iter()
                    .find(|o| LinkId(u32::from(o.number)) == l)
                {
                    if o.up.load(Ordering::Acquire) {
                        if let Ok(b) = f.to_bytes() {
                            let _ = o.offer(whole(b));
                        }
                    }
                }
            }
            out.up.store(true, Ordering::Release);
            out.was_up.store(true, Ordering::Relaxed);
            mine
        };
        let serial = link.peer().serial();
        let (mut send, mut recv) = link.split();
        let mut failed: Option<String> = None;
        for (h, b, t) in initial {
            if let Err(e) = send.send_parts(h, b, t).await {
                failed = Some(e.to_string());
                break;
            }
            routers.counters.frames_sent.fetch_add(1, Ordering::Relaxed);
        }
        // The engine announces now rather than at its next period: the sessions beyond
        // the router meet this one at once.
        shared.with_core(|i, _| {
            // What was queued for the link before is gone: repairs are sent again when
            // asked, not after the wait for copies that will never arrive.
            i.core.route_link_reset(out.number);
            let g = route::group_addr(out.number);
            i.core.remove_target(g);
            i.core.add_target(g);
        });
        if failed.is_none() {
            let sending = async {
                let mut batch = Vec::new();
                // The drain rate: bytes QUIC took and the time it took them, while the
                // queue was not empty, over at least `RATE_WINDOW`.
                let (mut took, mut busy) = (0u64, Duration::ZERO);
                const RATE_WINDOW: Duration = Duration::from_millis(50);
                while let Some(first) = rx.recv().await {
                    // What the engine queued meanwhile goes in the same write.
                    let mut n = 0;
                    let mut next = Some(first);
                    while let Some(p) = next {
                        n += p.0.len() + p.1.len() + p.2.len();
                        batch.push(p);
                        next = if n < BATCH_BYTES {
                            rx.try_recv().ok()
                        } else {
                            None
                        };
                    }
                    out.took(n as u64);
                    let frames = batch.len() as u64;
                    let t = Instant::now();
                    send.send_batch(&mut batch)
                        .await
                        .map_err(|e| e.to_string())?;
                    took += n as u64;
                    busy += t.elapsed();
                    if busy >= RATE_WINDOW {
                        out.drained(took, busy);
                        (took, busy) = (0, Duration::ZERO);
                    }
                    routers
                        .counters
                        .frames_sent
                        .fetch_add(frames, Ordering::Relaxed);
                }
                Ok::<(), String>(())
            };
            let receiving = async {
                // The router's preamble says it accepted us: only then is the link up
                // (what we sent meanwhile is lost if it refused us).
                tokio::time::timeout(CONFIRM_WITHIN, recv.confirm())
                    .await
                    .map_err(|_| "the router did not confirm the link".to_string())?
                    .map_err(|e| e.to_string())?;
                routers.counters.connects.fetch_add(1, Ordering::Relaxed);
                confirmed.store(true, Ordering::Relaxed);
                out.confirmed.store(true, Ordering::Release);
                if said_down.swap(false, Ordering::Relaxed) {
                    tracing::warn!(
                        news = true,
                        "router {}: linked again, to '{name}' at {remote}",
                        out.target
                    );
                } else {
                    tracing::info!("router {}: linked to '{name}' at {remote}", out.target);
                }
                let mut frames = Vec::new();
                let mut datagrams = Vec::new();
                loop {
                    // Every whole frame that has arrived is handed to the engine under one
                    // lock.
                    recv.recv_batch(&mut frames, RECV_BATCH)
                        .await
                        .map_err(|e| e.to_string())?;
                    routers
                        .counters
                        .frames_received
                        .fetch_add(frames.len() as u64, Ordering::Relaxed);
                    {
                        let mut leaf = routers.leaf();
                        for b in frames.drain(..) {
                            let frame = Frame::parse(b).map_err(|e| {
                                routers.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                                format!("malformed frame: {e}")
                            })?;
                            let d = leaf.handle_frame(id, frame).map_err(|e| {
                                routers.counters.bad_frames.fetch_add(1, Ordering::Relaxed);
                                format!("protocol error: {e}")
                            })?;
                            match d {
                                Some(Delivery::Data { src, datagram, .. })
                                | Some(Delivery::Announce { src, datagram }) => {
                                    datagrams.push((src, datagram))
                                }
                                Some(Delivery::Unicast { dst, src, datagram })
                                    if dst == routers.me =>
                                {
                                    datagrams.push((src, datagram))
                                }
                                _ => {}
                            }
                        }
                    }
                    if datagrams.is_empty() {
                        continue;
                    }
                    shared.with_core(|i, now| {
                        // What we hold for our links, before their peers' requests are
                        // answered (`Participant::set_route_backlog`).
                        routers.note_backlogs(&mut i.core);
                        for (src, datagram) in datagrams.drain(..) {
                            let from =
                                route::virtual_addr(tether_core::ParticipantId(src.0), out.number);
                            i.core.handle_datagram(now, from, &datagram);
                        }
                    });
                }
                #[allow(unreachable_code)]
                Ok::<(), String>(())
            };
            // A new revocation list that revokes this router closes the link (and the
            // verifier refuses it when dialled again).
            let revoked = async {
                loop {
                    let next = routers.revoked.notified();
                    if routers.is_revoked(serial) {
                        break;
                    }
                    next.await;
                }
            };
            let r = tokio::select! {
                r = sending => r,
                r = receiving => r,
                _ = routers.shutdown.notified() => Err("session closed".to_string()),
                _ = revoked => {
                    send.close(0, "router credential revoked");
                    Err("the router's credential is revoked".to_string())
                }
            };
            if let Err(e) = r {
                failed = Some(e);
            }
        }
        out.up.store(false, Ordering::Release);
        out.confirmed.store(false, Ordering::Release);
        routers.leaf().link_down(id);
        if routers.closing.load(Ordering::SeqCst) {
            // The goodbyes queued before the close go out, and are acknowledged by the
            // router (the readers' last ACKNACKs are among them), before the link closes:
            // closing at once dropped them whenever the path lost their packet, and a
            // writer counted what its reader had as never acknowledged (the lossy review).
            while let Ok((h, b, t)) = rx.try_recv() {
                out.took((h.len() + b.len() + t.len()) as u64);
                if send.send_parts(h, b, t).await.is_err() {
                    break;
                }
            }
            let _ = send.finish_delivered().await;
            break;
        }
        let why = failed.unwrap_or_else(|| "closed".into());
        if !confirmed.load(Ordering::Relaxed) {
            dial_failed(why).await;
            continue;
        }
        backoff.reset();
        last_error = None;
        tracing::warn!("router {}: link lost ({why}); dialling again", out.target);
        said_down.store(true, Ordering::Relaxed);
    }
}

/// Keeps what the session advertises and subscribes in step with its writers and readers.
async fn endpoints_task(shared: Arc<Shared>, routers: Arc<Routers>) {
    let mut advertised: std::collections::BTreeSet<[u8; 32]> = Default::default();
    let mut subscribed: std::collections::BTreeSet<[u8; 32]> = Default::default();
    let mut generation = None;
    while !routers.closing.load(Ordering::SeqCst) {
        let (g, keys) = {
            let i = shared.lock();
            (i.core.route_keys_generation(), i.core.local_route_keys())
        };
        if generation != Some(g) {
            generation = Some(g);
            let mut pubs = std::collections::BTreeSet::new();
            let mut subs = std::collections::BTreeSet::new();
            for (_, kind, key) in keys {
                match kind {
                    tether_core::EndpointKind::Writer => pubs.insert(key),
                    tether_core::EndpointKind::Reader => subs.insert(key),
                };
            }
            let mut leaf = routers.leaf();
            for k in advertised.difference(&pubs) {
                leaf.withdraw(RouteKey(*k));
            }
            for k in pubs.difference(&advertised) {
                leaf.advertise(RouteKey(*k));
            }
            for k in subscribed.difference(&subs) {
                leaf.unsubscribe(RouteKey(*k));
            }
            for k in subs.difference(&subscribed) {
                leaf.subscribe(RouteKey(*k));
            }
            routers.flush_leaf(&mut leaf);
            advertised = pubs;
            subscribed = subs;
        }
        tokio::select! {
            _ = routers.changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(capacity: usize) -> (LinkOut, mpsc::Receiver<Parts>) {
        let (tx, rx) = mpsc::channel(capacity);
        let l = LinkOut {
            number: 1,
            target: "h:1".into(),
            up: AtomicBool::new(true),
            confirmed: AtomicBool::new(true),
            was_up: AtomicBool::new(true),
            tx,
            queued: AtomicU64::new(0),
            rate: AtomicU64::new(0),
        };
        (l, rx)
    }

    fn frame(n: usize) -> Parts {
        (
            Bytes::from(vec![0u8; 10]),
            Bytes::from(vec![1u8; n - 10]),
            Bytes::new(),
        )
    }

    /// The queue's bytes are counted in and out, a frame refused (queue full) is not
    /// counted, and the backlog is what it holds at the rate measured: at least
    /// `MIN_DRAIN_RATE`, at most `MAX_BACKLOG`.
    #[test]
    fn the_backlog_is_the_queue_at_the_drain_rate_within_bounds() {
        let (l, mut rx) = link(2);
        assert_eq!(l.backlog(), Duration::ZERO);
        assert!(l.offer(frame(400_000)));
        assert!(l.offer(frame(100_000)));
        assert!(!l.offer(frame(5_000)), "a full queue refuses");
        assert_eq!(l.queued.load(Ordering::Relaxed), 500_000);
        // Not measured yet: at the least rate (1 MiB/s), 0.48 s.
        let b = l.backlog();
        assert!(
            b > Duration::from_millis(450) && b < Duration::from_millis(500),
            "{b:?}"
        );
        // Measured at 10 MB/s: 50 ms.
        l.drained(1_000_000, Duration::from_millis(100));
        assert_eq!(l.rate.load(Ordering::Relaxed), 10_000_000);
        assert_eq!(l.backlog(), Duration::from_millis(50));
        // A slower sample moves the rate a quarter of the way.
        l.drained(2_000_000, Duration::from_secs(1));
        assert_eq!(l.rate.load(Ordering::Relaxed), 8_000_000);
        // Taken by the link thread: counted out.
        let p = rx.try_recv().unwrap();
        l.took(parts_len(&p));
        assert_eq!(l.queued.load(Ordering::Relaxed), 100_000);
        // However much it holds, at most `MAX_BACKLOG` is said (a repair dropped on the
        // way is sent again after that at worst).
        l.queued.store(1 << 40, Ordering::Relaxed);
        assert_eq!(l.backlog(), MAX_BACKLOG);
        l.took(u64::MAX);
        assert_eq!(l.backlog(), Duration::ZERO, "never below empty");
    }
}
