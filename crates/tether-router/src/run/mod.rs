//! The router process: QUIC links around the sans-IO [`tether_routing::Router`].
//!
//! One lock guards the routing state; every input (a frame, a link up or down, a timer)
//! takes it, feeds the router, and moves what the router gives onto the links' queues, in
//! order. Each link has a task that writes its queue to the QUIC stream and one that reads
//! frames from it. A link's queue is bounded in bytes (`limits.link_queue_bytes`): a slow
//! link loses frames (counted) rather than holding up the others or growing without bound,
//! and the sessions' end-to-end reliability repairs what reliable topics lose. With
//! `limits.link_rate_bytes_per_sec` a token bucket (the engine's flow controllers' own,
//! `tether_core::Pacer`) paces each link, so bulk traffic to one
//! site does not take what another's needs.
//!
//! Who may link: the QUIC layer accepts only certificates carrying a credential of the
//! realm (not expired, not revoked) with the role the side expects; a session's link must
//! then say HELLO as a session and a router's as a router. When the revocation list file
//! changes it is reloaded, and links whose credential it revokes, or whose credential has
//! expired, are closed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use tether_crypto::{Credential, OsRandom, Role as CredRole};
use tether_routing::{Frame, LinkId, NodeId, Role, Router};
use tether_transport::quic::{
    Backoff, Link, LinkConfig, LinkIdentity, PeerPolicy, QuicEndpoint, Revocations,
};
use tokio::sync::{Notify, mpsc};

use crate::config::RouterConfig;
use crate::handshakes::{Admitted, Handshakes};

mod forward;
mod metrics_page;

/// The largest frame a link takes: a 64 KiB engine datagram and the largest frame header.
pub const MAX_LINK_FRAME: usize = (64 << 10) + 128;

/// Links one credential may hold at once (a session reconnecting overlaps its old link
/// for a moment; a member opening hundreds would lock others out of `max_links`).
pub const MAX_LINKS_PER_CREDENTIAL: usize = 8;

/// Why the router could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Its keys.
    #[error("keys: {0}")]
    Keys(#[from] tether::keys::KeyError),
    /// Its own credential is not valid now.
    #[error("its own credential is not usable: {0}")]
    Credential(tether_crypto::CredentialError),
    /// The QUIC endpoint.
    #[error("{0}")]
    Link(String),
    /// The metrics address.
    #[error("{0}")]
    Metrics(std::io::Error),
}

/// Counters the driver keeps beside the router's own.
#[derive(Debug, Default)]
struct Counters {
    /// Frames dropped because their link's queue was full.
    queue_full: AtomicU64,
    /// DATA denied by the export list, and routing frames held back by it.
    export_denied: AtomicU64,
    /// Links refused after the handshake (HELLO role not the certificate's, protocol errors).
    links_refused: AtomicU64,

    /// Links closed because a credential was revoked or expired.
    links_revoked: AtomicU64,
    /// ANNOUNCE frames of a session over `limits.announce_bytes_per_sec`, dropped.
    announce_limited: AtomicU64,
    /// Links closed because the peer sent a malformed frame.
    dropped_malformed: AtomicU64,
    /// Links closed because the peer broke the link protocol (a frame out of place, a
    /// forged source, a wrong domain…).
    dropped_protocol: AtomicU64,
    /// Links made, ever.
    links_made: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// One link's outgoing side.
struct LinkOut {
    /// Frames as head and payload: one datagram forwarded on many links is referenced by
    /// each, not copied (`Frame::encode_head`, `LinkSender::send_parts`).
    tx: mpsc::UnboundedSender<(Bytes, Bytes)>,
    /// Bytes queued and not yet written to the stream.
    queued: Arc<AtomicUsize>,
    role: Role,
    peer: String,
    serial: u64,
    expires: u64,
    remote: SocketAddr,
    close: Arc<Notify>,
}

/// The most a link's sender hands QUIC in one write (frames queued meanwhile go together).
const BATCH_BYTES: usize = 256 << 10;

/// The most frames a link's receiver handles under one lock.
const RECV_BATCH: usize = 64;

struct State {
    router: Router,
    links: HashMap<LinkId, LinkOut>,
}

/// The router: its state and everything its tasks share.
struct Shared {
    state: Mutex<State>,
    cfg: RouterConfig,
    counters: Counters,
    next_link: AtomicU64,
    timers: Notify,
    started: Instant,
    handshakes: Handshakes,
    denials: Mutex<forward::Denials>,
    /// The router is stopping: links that end are not dialled again (nor said to be).
    stopping: AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs a router as `cfg` says until `stop` completes.
pub async fn run(
    mut cfg: RouterConfig,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    let keys = tether::keys::RouterKeys::load(&cfg.keys)?;
    // Without a name of its own, the router goes by its credential's in logs and metrics.
    if cfg.name.is_empty() {
        cfg.name = keys.credential.name.clone();
    }
    let unix = tether::keys::unix_now();
    let revocations = Revocations::new();
    let mut revocations_seen = None;
    if let Some(p) = &cfg.revocations {
        let list = tether::keys::load_revocations(p, &keys.ca_public)?;
        revocations_seen = modified(p);
        let _ = revocations.replace(&keys.ca_public, list);
    }
    keys.credential
        .verify(&keys.ca_public, unix, revocations.current().as_deref())
        .map_err(RunError::Credential)?;
    let identity = LinkIdentity::new(&keys.identity, &keys.credential)
        .map_err(|e| RunError::Link(e.to_string()))?;
    let policy = PeerPolicy::new(
        keys.ca_public,
        revocations.clone(),
        &[CredRole::Member, CredRole::Router],
    );
    let mut lc = LinkConfig::default();
    // Frames carry engine datagrams (at most 64 KiB): nothing larger is accepted, so a peer
    // cannot make a link buffer 16 MiB.
    lc.max_frame(MAX_LINK_FRAME);
    lc.idle_timeout(Duration::from_millis(cfg.limits.link_idle_timeout_ms));
    lc.congestion(cfg.congestion);
    // A restarted router resets its old connections at once (the sessions dial again at
    // their next packet) instead of leaving them to the idle timeout.
    lc.reset_secret(keys.identity.derived_secret(b"quic stateless reset"));
    let endpoint = match cfg.listen {
        Some(addr) => QuicEndpoint::server(addr, &identity, policy, &lc),
        None => QuicEndpoint::client(
            "0.0.0.0:0".parse().expect("a literal address"),
            &identity,
            policy.with_roles(&[CredRole::Router]),
            &lc,
        ),
    }
    .map_err(|e| {
        let at = cfg
            .listen
            .map_or_else(|| "an ephemeral port".to_string(), |a| a.to_string());
        RunError::Link(format!(
            "cannot listen for QUIC on {at}: {e} (another router on that port? change listen)"
        ))
    })?;
    let endpoint = Arc::new(endpoint);
    let node = node_id(&keys.credential);
    let mut rc = tether_routing::Config::new(NodeId(node), u32::from(cfg.domain));
    rc.max_routes(cfg.limits.max_routes)
        .max_links(cfg.limits.max_links);
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            router: Router::new(rc),
            links: HashMap::new(),
        }),
        cfg: cfg.clone(),
        counters: Counters::default(),
        next_link: AtomicU64::new(1),
        timers: Notify::new(),
        started: Instant::now(),
        handshakes: Handshakes::default(),
        denials: Mutex::default(),
        stopping: AtomicBool::new(false),
    });
    if let Some(addr) = cfg.listen {
        // Its credential's name too when it differs from the name it goes by.
        let also = if cfg.name == keys.credential.name {
            String::new()
        } else {
            format!(" (credential '{}')", keys.credential.name)
        };
        tracing::info!(
            "router '{}'{also} listening on quic/{}",
            cfg.name,
            endpoint.local_addr().unwrap_or(addr)
        );
    }
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(addr) = cfg.metrics {
        let l = crate::metrics::bind(addr)
            .await
            .map_err(RunError::Metrics)?;
        tracing::info!(
            "metrics at http://{}/metrics",
            l.local_addr().unwrap_or(addr)
        );
        let s = shared.clone();
        tasks.spawn(crate::metrics::serve(l, Arc::new(move || s.render())));
    }
    if cfg.listen.is_some() {
        let (s, e) = (shared.clone(), endpoint.clone());
        tasks.spawn(async move {
            let said = Arc::new(Mutex::new(Said::default()));
            let deadline = Duration::from_millis(s.cfg.limits.handshake_timeout_ms);
            while let Some(incoming) = e.accept().await {
                let Some(Admitted { incoming, id }) = s.handshakes.admit(&s.cfg.limits, incoming)
                else {
                    continue;
                };
                let from = incoming.remote_address();
                let (s2, said) = (s.clone(), said.clone());
                // Each handshake in a task of its own: a slow client holds up no other.
                let task = tokio::spawn(async move {
                    let r = tokio::time::timeout(deadline, incoming.establish()).await;
                    s2.handshakes.end(id);
                    let why = match r {
                        Ok(Ok(link)) => return serve_link(s2, link).await,
                        Ok(Err(err)) => err.to_string(),
                        Err(_) => format!("the handshake took longer than {deadline:?}"),
                    };
                    s2.handshakes.failed.fetch_add(1, Ordering::Relaxed);
                    said.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .warn(&format!("link from {from} refused: {why}"));
                });
                s.handshakes.begin(id, from.ip(), task.abort_handle());
            }
        });
    }
    for target in cfg.connect.clone() {
        let (s, e) = (shared.clone(), endpoint.clone());
        tasks.spawn(dial(s, e, target));
    }
    tasks.spawn(timers(shared.clone()));
    {
        let (s, e, ca) = (shared.clone(), endpoint.clone(), keys.ca_public);
        let path = cfg.revocations.clone();
        tasks.spawn(credentials(s, e, ca, path, revocations, revocations_seen));
    }
    stop.await;
    tracing::info!("router '{}' stopping", cfg.name);
    shared.stopping.store(true, Ordering::SeqCst);
    endpoint.close(0, "the router is stopping");
    let _ = tokio::time::timeout(Duration::from_millis(500), endpoint.wait_idle()).await;
    tasks.abort_all();
    Ok(())
}

/// Warnings said at most once a second, with how many were held back: a flood of failed
/// handshakes is not a flood of log lines.
#[derive(Debug, Default)]
struct Said {
    last: Option<Instant>,
    held: u64,
}

impl Said {
    fn warn(&mut self, what: &str) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.held += 1;
            return;
        }
        if self.held > 0 {
            tracing::warn!("{what} ({} more in the last second not shown)", self.held);
        } else {
            tracing::warn!("{what}");
        }
        self.held = 0;
        self.last = Some(now);
    }
}

/// A router's node id: from its identity key, so a restarted router is the same node to
/// the others, as its sequence numbers expect.
fn node_id(c: &Credential) -> u64 {
    tether_crypto::key_id(&c.sign_public)
}

fn modified(p: &PathBuf) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Dials a configured router, again with backoff whenever the link ends.
async fn dial(shared: Arc<Shared>, endpoint: Arc<QuicEndpoint>, target: String) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let mut rng = OsRandom;
    let host = target
        .rsplit_once(':')
        .map_or(target.as_str(), |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let mut said: Option<String> = None;
    loop {
        let addr = match tokio::net::lookup_host(&target).await {
            Ok(mut a) => a.next(),
            Err(_) => None,
        };
        let r = match addr {
            Some(a) => endpoint.connect(a, &host).await.map_err(|e| e.to_string()),
            None => Err(format!("cannot resolve {target}")),
        };
        match r {
            Ok(link) => {
                backoff.reset();
                said = None;
                serve_link(shared.clone(), link).await;
            }
            Err(_) if shared.stopping.load(Ordering::SeqCst) => return,
            Err(e) => {
                if said.as_ref() != Some(&e) {
                    tracing::warn!("router {target}: {e}; dialling again");
                    said = Some(e);
                }
            }
        }
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(backoff.next_delay(&mut rng)).await;
    }
}

/// Runs one link until it ends: HELLO both ways, then frames into the router and the
/// link's queue onto the stream.
async fn serve_link(shared: Arc<Shared>, link: Link) {
    let id = LinkId(shared.next_link.fetch_add(1, Ordering::Relaxed) as u32);
    let peer = link.peer().clone();
    let role = match peer.role() {
        CredRole::Router => Role::Router,
        _ => Role::Session,
    };
    let remote = link.remote_address();
    let (mut send, mut recv) = link.split();
    // A member shows routers its credential without grants (topic names): one with grants
    // is refused, so that no session tells a router a name.
    let c = peer.credential();
    if role == Role::Session && !(c.publish.is_empty() && c.subscribe.is_empty()) {
        tracing::warn!(
            "link from '{}' at {remote} refused: it showed a credential with grants (topic \
             names); members show routers their grantless link credential",
            peer.name()
        );
        shared
            .counters
            .links_refused
            .fetch_add(1, Ordering::Relaxed);
        send.close(1, "credential with grants: show the link credential");
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<(Bytes, Bytes)>();
    let queued = Arc::new(AtomicUsize::new(0));
    let close = Arc::new(Notify::new());
    let hello = shared.lock().router.hello();
    if let Ok(b) = hello.to_bytes() {
        if send.send(b).await.is_err() {
            return;
        }
    }
    // The peer's HELLO must come first and say what its certificate says.
    let first = match tokio::time::timeout(Duration::from_secs(5), recv.recv()).await {
        Ok(Ok(b)) => b,
        _ => {
            shared
                .counters
                .links_refused
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let hello = match Frame::parse(first) {
        Ok(Frame::Hello(h)) if h.role == role => Frame::Hello(h),
        Ok(Frame::Hello(h)) => {
            tracing::warn!(
                "link from '{}' at {remote} refused: its HELLO says {:?}, its credential {}",
                peer.name(),
                h.role,
                peer.role()
            );
            shared
                .counters
                .links_refused
                .fetch_add(1, Ordering::Relaxed);
            send.close(1, "role mismatch");
            return;
        }
        _ => {
            shared
                .counters
                .links_refused
                .fetch_add(1, Ordering::Relaxed);
            send.close(1, "HELLO expected");
            return;
        }
    };
    {
        let mut st = shared.lock();
        let same = st
            .links
            .values()
            .filter(|l| l.serial == peer.serial())
            .count();
        if same >= MAX_LINKS_PER_CREDENTIAL {
            drop(st);
            tracing::warn!(
                "link from '{}' at {remote} refused: it holds {same} links already",
                peer.name()
            );
            shared
                .counters
                .links_refused
                .fetch_add(1, Ordering::Relaxed);
            send.close(1, "too many links for one credential");
            return;
        }
        st.links.insert(
            id,
            LinkOut {
                tx,
                queued: queued.clone(),
                role,
                peer: peer.name().to_string(),
                serial: peer.serial(),
                expires: peer.credential().expires,
                remote,
                close: close.clone(),
            },
        );
        let up = st.router.handle_frame(Instant::now(), id, hello);
        if up.is_ok() {
            st.router.set_link_owner(id, peer.serial());
        }
        if let Err(e) = up {
            st.links.remove(&id);
            drop(st);
            tracing::warn!("link from '{}' at {remote} refused: {e}", peer.name());
            shared
                .counters
                .links_refused
                .fetch_add(1, Ordering::Relaxed);
            send.close(1, &e.to_string());
            return;
        }
        shared.drain(&mut st);
    }
    shared.counters.links_made.fetch_add(1, Ordering::Relaxed);
    shared.timers.notify_one();
    tracing::info!("link up: {} '{}' at {remote}", role_name(role), peer.name());
    let rate = shared.cfg.limits.link_rate_bytes_per_sec;
    let sending = async {
        // The engine's flow-controller bucket, so a link is paced as writers are.
        let mut pacer = tether_core::Pacer::new(match rate {
            0 => tether_core::FlowController::UNLIMITED,
            r => tether_core::FlowController::rate(r),
        });
        let mut batch = Vec::new();
        while let Some(first) = rx.recv().await {
            // What queued meanwhile goes in the same write, up to a batch's worth.
            let mut n = 0;
            let mut next = Some(first);
            while let Some((head, body)) = next {
                n += head.len() + body.len();
                batch.push((head, body, Bytes::new()));
                next = if n < BATCH_BYTES {
                    rx.try_recv().ok()
                } else {
                    None
                };
            }
            let now = Instant::now();
            let at = pacer.next_ready(now);
            if at > now {
                tokio::time::sleep_until(at.into()).await;
            }
            pacer.spend(n);
            queued.fetch_sub(n, Ordering::Relaxed);
            send.send_batch(&mut batch)
                .await
                .map_err(|e| e.to_string())?;
            shared
                .counters
                .bytes_out
                .fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok::<(), String>(())
    };
    let receiving = async {
        let mut frames = Vec::new();
        let mut parsed = Vec::new();
        // What a session may flood to every other session (its announcements) is paced: a
        // second's worth may come at once, more is dropped and counted.
        let announce_rate = shared.cfg.limits.announce_bytes_per_sec;
        let mut announces = tether_core::Pacer::new(
            tether_core::FlowController::rate(announce_rate).with_max_tokens(announce_rate),
        );
        loop {
            // Every whole frame that has arrived is handled under one lock.
            recv.recv_batch(&mut frames, RECV_BATCH)
                .await
                .map_err(|e| e.to_string())?;
            for b in frames.drain(..) {
                shared
                    .counters
                    .bytes_in
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
                let frame = Frame::parse(b).map_err(|e| format!("malformed frame: {e}"))?;
                if role == Role::Router && !shared.may_cross(&frame, false) {
                    continue;
                }
                if let (Role::Session, Frame::Announce(a)) = (role, &frame) {
                    let now = Instant::now();
                    if announces.next_ready(now) > now {
                        shared
                            .counters
                            .announce_limited
                            .fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    announces.spend(a.datagram.len());
                }
                parsed.push(frame);
            }
            let mut st = shared.lock();
            let now = Instant::now();
            for frame in parsed.drain(..) {
                st.router
                    .handle_frame(now, id, frame)
                    .map_err(|e| format!("protocol error: {e}"))?;
            }
            shared.drain(&mut st);
        }
        #[allow(unreachable_code)]
        Ok::<(), String>(())
    };
    let why = tokio::select! {
        r = sending => r.err().unwrap_or_else(|| "closed".into()),
        r = receiving => r.err().unwrap_or_else(|| "closed".into()),
        _ = close.notified() => "credential revoked or expired".into(),
    };
    // A peer that broke the protocol is told why (close code 2), and it is counted.
    let broke = if why.starts_with("malformed frame") {
        Some(&shared.counters.dropped_malformed)
    } else if why.starts_with("protocol error") {
        Some(&shared.counters.dropped_protocol)
    } else {
        None
    };
    if let Some(counter) = broke {
        counter.fetch_add(1, Ordering::Relaxed);
        send.close(2, &why);
    }
    {
        let mut st = shared.lock();
        st.links.remove(&id);
        st.router.link_down(Instant::now(), id);
        shared.drain(&mut st);
    }
    shared.timers.notify_one();
    tracing::info!(
        "link down: {} '{}' at {remote}: {why}",
        role_name(role),
        peer.name()
    );
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Router => "router",
        _ => "session",
    }
}

/// The router's timers: query expiry and sweeps.
async fn timers(shared: Arc<Shared>) {
    loop {
        let next = {
            let mut st = shared.lock();
            let now = Instant::now();
            if st.router.poll_timeout().is_some_and(|t| t <= now) {
                st.router.handle_timeout(now);
                shared.drain(&mut st);
            }
            st.router.poll_timeout()
        };
        let wait = next.map_or(Duration::from_secs(1), |t| {
            t.saturating_duration_since(Instant::now())
        });
        tokio::select! {
            _ = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
            _ = shared.timers.notified() => {}
        }
    }
}

/// Once a second: reloads the revocation list when its file changed, and closes links
/// whose credential it revokes or whose credential has expired.
async fn credentials(
    shared: Arc<Shared>,
    _endpoint: Arc<QuicEndpoint>,
    ca: [u8; 32],
    path: Option<PathBuf>,
    revocations: Revocations,
    mut seen: Option<SystemTime>,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(p) = &path {
            let m = modified(p);
            if m != seen {
                seen = m;
                match tether::keys::load_revocations(p, &ca) {
                    Ok(list) => match revocations.replace(&ca, list) {
                        Ok(()) => tracing::info!("revocation list reloaded from {}", p.display()),
                        Err(e) => tracing::warn!("revocation list {} not taken: {e}", p.display()),
                    },
                    Err(e) => tracing::warn!("revocation list not reloaded: {e}"),
                }
            }
        }
        let list = revocations.current();
        let now = tether::keys::unix_now();
        let st = shared.lock();
        for l in st.links.values() {
            let revoked = list.as_ref().is_some_and(|r| r.contains(l.serial));
            if revoked || now >= l.expires {
                tracing::warn!(
                    "closing the link of '{}' at {}: its credential is {}",
                    l.peer,
                    l.remote,
                    if revoked { "revoked" } else { "expired" }
                );
                shared
                    .counters
                    .links_revoked
                    .fetch_add(1, Ordering::Relaxed);
                l.close.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests;
