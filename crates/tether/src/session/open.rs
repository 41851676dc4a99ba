//! Opening a session: the configuration converted and checked, the sockets bound, the realm
//! joined, the engine made, discovery set up and the threads started.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tether_core::{Participant, ParticipantId, Priority, Security};
use tether_transport::{MulticastReceiver, Registry, UdpOptions, UdpTransport, interface_ipv4};

use super::revocations::RevocationWatch;
use super::router::{EarlyLinks, LinkThread, Routers};
use super::shared::{Inner, Shared};
use super::threads::{GroupRx, RegistryInfo, discovery_loop, recv_loop, sender_loop};
use super::{OpenError, Session};
use crate::config::{Config, EngineSettings, SecurityPolicy};

impl Session {
    /// Opens a session: binds its socket, registers for discovery, starts its threads.
    pub fn open(config: Config) -> Result<Session, OpenError> {
        let settings = EngineSettings::try_from(&config)?;
        let id = ParticipantId(random_id());
        // The link thread makes its QUIC endpoint while the keys load: it dials as soon as
        // they are (a few hundred microseconds sooner than after them).
        let early = match &settings.security {
            Some(_) if !config.routers.connect.is_empty() => Some(
                LinkThread::spawn(
                    Duration::from_millis(config.routers.idle_timeout_ms),
                    // Checked by `Config::validate`.
                    config.routers.congestion.parse().unwrap_or_default(),
                )
                .map_err(OpenError::Thread)?,
            ),
            _ => None,
        };
        let realm = match &settings.security {
            Some(policy) => Some(load_realm(policy)?),
            None if !config.routers.connect.is_empty() => {
                return Err(OpenError::Routers(
                    "routers take sessions of a realm only (they check each session's \
                     credential): give --keys (or security.keys) with --router"
                        .into(),
                ));
            }
            None => None,
        };
        // The router links are dialled first: their QUIC handshakes (a few round trips and
        // both credentials checked) run on the link thread while the rest of the session is
        // made, and the thread waits for the engine only once a link is up.
        let routers = match (&settings.security, &realm, early) {
            (Some(policy), Some((bundle, revocations)), Some(early)) => Some(dial_routers(
                &config,
                policy,
                bundle,
                revocations.clone(),
                id,
                early,
            )?),
            _ => None,
        };
        let (transport, multicast_if) = bind(&config)?;
        let now = Instant::now();
        let security = match (&settings.security, realm) {
            (Some(policy), Some((bundle, revocations))) => {
                Some(Arc::new(join_realm(policy, bundle, revocations, now)))
            }
            _ => None,
        };
        let mut cc = settings.engine_config(id, security);
        // Peers at this host's addresses take large datagrams; probing needs the
        // don't-fragment bit.
        cc.local_addrs = tether_transport::path::host_addresses();
        cc.probe_paths &= transport.dont_fragment();
        let mut core = Participant::new(cc, now);
        if let Some(r) = &routers {
            for n in r.routers.numbers() {
                core.add_route_link(n, config.routers.datagram);
                core.add_target(tether_core::route::group_addr(n));
            }
        }
        for (name, spec) in &settings.flow_controllers {
            core.set_flow_controller(name, *spec);
        }
        for p in &config.discovery.peers {
            core.add_target(*p);
        }
        let multicast = match multicast_if {
            Some(ifa) => join_group(&config, ifa, &mut core)?.map(|rx| GroupRx {
                rx,
                skip_registered: !config.transport.multicast_data,
                own_port: transport.host_local_addr().port(),
            }),
            None => None,
        };
        let registry = match config.discovery.uses_registry() {
            true => Some(register(&config, id, &transport, &mut core)?),
            false => None,
        };
        let scan = registry.as_ref().map(|r| {
            let dir = r.dir().to_path_buf();
            (dir, config.domain, id.0, transport.host_local_addr())
        });
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                core,
                sender_idle: false,
                bulk_idle: false,
                subs: BTreeMap::new(),
                listeners: Vec::new(),
                backlog: Some(std::collections::VecDeque::new()),
                armed: None,
                next_ticket: 0,
                route_gen: 0,
            }),
            transport,
            writer_cv: Condvar::new(),
            sender_cv: Condvar::new(),
            serving: AtomicU64::new(0),
            serving_waiters: AtomicU64::new(0),
            serving_lock: Mutex::new(()),
            serving_cv: Condvar::new(),
            closed: AtomicBool::new(false),
            max_blocking: Duration::from_millis(max_blocking_ms(&config)),
            busy_poll: AtomicBool::new(config.transport.busy_poll),
            send_errors: AtomicU64::new(0),
            recv_errors: AtomicU64::new(0),
            virtual_source: AtomicU64::new(0),
            too_large: AtomicU64::new(0),
            too_large_warned: Mutex::new(None),
            routers: routers.as_ref().map(|r| r.routers.clone()),
        });
        // The first announcements.
        shared.with_core(|_, _| ());
        let watch = settings
            .security
            .as_ref()
            .and_then(|p| p.revocations.clone())
            .map(RevocationWatch::new);
        let mut threads = start_threads(&shared, scan, multicast, watch)?;
        if let Some(r) = routers {
            // The link thread goes on with the engine (dropped unsent, when opening failed
            // before here, the thread ends).
            let _ = r.engine.send(shared.clone());
            threads.push(r.thread);
        }
        Ok(Session {
            threads,
            shared,
            _registry: registry,
        })
    }
}

/// The router links of a session being opened: the link thread, dialling already, and the
/// way to hand it the engine.
struct Dialling {
    routers: Arc<Routers>,
    thread: JoinHandle<()>,
    engine: tokio::sync::oneshot::Sender<Arc<Shared>>,
}

/// The key bundle and revocation list of the session's realm, loaded once, and our own
/// credential checked now (before anything is dialled with it).
fn load_realm(
    policy: &SecurityPolicy,
) -> Result<
    (
        crate::keys::KeyBundle,
        Option<tether_crypto::RevocationList>,
    ),
    OpenError,
> {
    let b = crate::keys::KeyBundle::load(&policy.keys)?;
    let revocations = match &policy.revocations {
        Some(p) => Some(crate::keys::load_revocations(p, &b.ca_public)?),
        None => None,
    };
    b.credential
        .verify(&b.ca_public, crate::keys::unix_now(), revocations.as_ref())
        .map_err(OpenError::Credential)?;
    Ok((b, revocations))
}

/// Starts the router links of `config.routers` on `early`, the link thread: the
/// certificate made from the session's key bundle `b`, with which it dials at once. The
/// engine declares each link (a route link, and its group as an announcement target) once
/// it exists.
fn dial_routers(
    config: &Config,
    policy: &SecurityPolicy,
    b: &crate::keys::KeyBundle,
    revocations: Option<tether_crypto::RevocationList>,
    id: ParticipantId,
    early: EarlyLinks,
) -> Result<Dialling, OpenError> {
    let targets = config
        .routers
        .connect
        .iter()
        .map(|r| crate::config::parse_router(r).map_err(OpenError::Routers))
        .collect::<Result<Vec<_>, _>>()?;
    // Routers are shown the credential without grants: they never read topic names.
    let link = b.link_credential.as_ref().ok_or_else(|| {
        OpenError::Routers(format!(
            "{} was issued before router links: it has no credential to show routers \
             without its grants; issue it again (`tether keys issue DIR {} --replace ...`)",
            policy.keys.display(),
            b.credential.name
        ))
    })?;
    let identity = tether_transport::quic::LinkIdentity::new(&b.identity, link)
        .map_err(|e| OpenError::Routers(e.to_string()))?;
    let (routers, thread) = Routers::new(
        &targets,
        id.0,
        config.domain,
        identity,
        b.ca_public,
        revocations,
    );
    let (thread, engine) = early.start(thread);
    Ok(Dialling {
        routers,
        thread,
        engine,
    })
}

/// `reliability.max_blocking_time_ms`, except that a session with routers waits 10 s by
/// default rather than 1: while a router link is dialled again (a router restarted, a new
/// address) a keep-all writer's path takes nothing for seconds, and its puts wait for the
/// link rather than fail.
fn max_blocking_ms(config: &Config) -> u64 {
    let ms = config.reliability.max_blocking_time_ms;
    if ms == crate::config::DEFAULT_MAX_BLOCKING_MS && !config.routers.connect.is_empty() {
        10_000
    } else {
        ms
    }
}

/// Whether multicast is on only because the discovery range says so (not asked for by
/// `discovery.multicast` or `transport.multicast_data`): then a host where it cannot start
/// (no interface or route for the group) opens without it, with a warning, and still finds
/// the sessions of its own host through the registry.
fn multicast_by_default(config: &Config) -> bool {
    config.discovery.multicast.is_none() && !config.transport.multicast_data
}

/// Binds the unicast socket; also gives the interface of the discovery group when the
/// session uses it.
fn bind(config: &Config) -> Result<(UdpTransport, Option<Ipv4Addr>), OpenError> {
    let addr = config.listen_addr();
    let d = &config.discovery;
    // The discovery group's socket also takes data when readers here take data by
    // multicast, with or without multicast discovery.
    let multicast_if = if d.uses_multicast() || config.transport.multicast_data {
        match interface_ipv4(&d.interface) {
            // None named: the kernel's choice, or an interface when it has no route for the
            // group (a LAN without a gateway).
            Ok(ifa) if ifa.is_unspecified() => {
                Some(tether_transport::multicast_interface_for(d.multicast_group))
            }
            Ok(ifa) => Some(ifa),
            Err(source) if multicast_by_default(config) => {
                tracing::warn!(
                    "no multicast discovery: interface {}: {source}; set discovery.interface",
                    d.interface
                );
                None
            }
            Err(source) => {
                return Err(OpenError::Multicast {
                    group: d.multicast_group,
                    port: d.multicast_port,
                    interface: d.interface.clone(),
                    source,
                });
            }
        }
    } else {
        None
    };
    let transport = UdpTransport::bind(&UdpOptions {
        bind: addr,
        recv_buffer: config.transport.recv_buffer,
        send_buffer: config.transport.send_buffer,
        max_datagram: config.transport.max_datagram,
        multicast_if,
        batch_io: config.transport.batch_io.into(),
        dont_fragment: config.transport.dont_fragment,
    })
    .map_err(|source| OpenError::Bind { addr, source })?;
    Ok((transport, multicast_if))
}

/// Makes the engine's realm membership from the key bundle `b` (checked by
/// [`load_realm`]) with the configured protection.
fn join_realm(
    policy: &SecurityPolicy,
    b: crate::keys::KeyBundle,
    revocations: Option<tether_crypto::RevocationList>,
    now: Instant,
) -> Security {
    let unix = crate::keys::unix_now();
    Security::new(
        b.identity,
        b.credential,
        b.ca_public,
        b.realm_secret,
        revocations,
        now,
        unix,
    )
    .with_suite(policy.suite)
    .with_pairwise(policy.pairwise)
    .with_protection(policy.protection, policy.topics.clone())
}

/// Joins the discovery multicast group on interface `ifa`, and announces there with
/// multicast discovery on. `None` when multicast is on only by default and the group
/// cannot be joined (a host without a route for it: one with only a loopback interface).
fn join_group(
    config: &Config,
    ifa: Ipv4Addr,
    core: &mut Participant,
) -> Result<Option<MulticastReceiver>, OpenError> {
    let d = &config.discovery;
    let port = config.multicast_port();
    let rx = match MulticastReceiver::join(d.multicast_group, port, ifa) {
        Ok(rx) => rx,
        Err(source) if multicast_by_default(config) => {
            tracing::warn!(
                "no multicast discovery: cannot join {}:{port} on interface {}: {source}",
                d.multicast_group,
                d.interface
            );
            return Ok(None);
        }
        Err(source) => {
            return Err(OpenError::Multicast {
                group: d.multicast_group,
                port,
                interface: d.interface.clone(),
                source,
            });
        }
    };
    if d.uses_multicast() {
        core.add_target(SocketAddr::new(d.multicast_group.into(), port));
    }
    Ok(Some(rx))
}

/// Enters the session in the registry directory and targets the sessions already there.
fn register(
    config: &Config,
    id: ParticipantId,
    transport: &UdpTransport,
    core: &mut Participant,
) -> Result<Registry, OpenError> {
    let dir = config.discovery.registry_root();
    let r = Registry::register(&dir, config.domain, id.0, transport.host_local_addr())
        .map_err(|source| OpenError::Registry { dir, source })?;
    for a in r.scan() {
        core.add_target(a);
    }
    Ok(r)
}

/// Starts the receive, discovery and sender threads.
fn start_threads(
    shared: &Arc<Shared>,
    scan: Option<RegistryInfo>,
    multicast: Option<GroupRx>,
    revocations: Option<RevocationWatch>,
) -> Result<Vec<JoinHandle<()>>, OpenError> {
    let spawn = |name: &str, f: Box<dyn FnOnce(&Shared) + Send>| {
        let s = shared.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || f(&s))
            .map_err(OpenError::Thread)
    };
    Ok(vec![
        spawn("tether-recv", Box::new(recv_loop))?,
        spawn(
            "tether-discovery",
            Box::new(move |s| discovery_loop(s, scan, multicast, revocations)),
        )?,
        spawn(
            "tether-sender",
            Box::new(|s| {
                sender_loop(s, &[Priority::Realtime, Priority::Default], |i| {
                    &mut i.sender_idle
                })
            }),
        )?,
        spawn(
            "tether-bulk",
            Box::new(|s| {
                if let Err(e) = tether_transport::background_thread() {
                    tracing::debug!("bulk sender stays at normal priority: {e}");
                }
                sender_loop(s, &[Priority::Bulk], |i| &mut i.bulk_idle)
            }),
        )?,
    ])
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
