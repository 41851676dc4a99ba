//! What a router refuses after the TLS handshake (the QUIC layer's own refusals are tested
//! in tether-transport): a member showing a credential with grants, which would tell the
//! router topic names, and more links from one credential than it may hold; and what it
//! does while many handshakes are in progress: clients prove their address first (QUIC
//! Retry), a handshake that does not finish in time ends, and a newcomer takes the place of
//! the oldest handshake still in progress, so stalled handshakes cannot lock members out.
//! And whose link a participant id follows when a member dials again.

use std::time::Duration;

use tether::keys::{KeyBundle, Realm, RouterKeys};
use tether_crypto::{Credential, Role};
use tether_router::{RouterConfig, run::MAX_LINKS_PER_CREDENTIAL};
use tether_transport::quic::{LinkConfig, LinkIdentity, PeerPolicy, QuicEndpoint, Revocations};

/// A realm with member `a` (grants on /x) and router `cloud`, and the configuration of a
/// router from it listening on `port`, with `extra` lines of router.toml.
fn realm_with(dir: &std::path::Path, port: u16, extra: &str) -> RouterConfig {
    let r = Realm::init(&dir.join("realm")).unwrap();
    r.issue("a", vec!["/x".into()], vec!["/x".into()], 1)
        .unwrap();
    r.issue_router("cloud", 1).unwrap();
    let path = dir.join("r.toml");
    let text = format!("listen = \"127.0.0.1:{port}\"\nkeys = \"realm/cloud.key\"\n{extra}\n");
    std::fs::write(&path, &text).unwrap();
    RouterConfig::parse(&text, &path).unwrap()
}

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A client of realm `dir` showing `credential` with member `a`'s keys.
fn client(dir: &std::path::Path, credential: &Credential) -> QuicEndpoint {
    endpoint(
        &KeyBundle::load(&dir.join("realm/a.key")).unwrap(),
        credential,
    )
}

/// A client with `b`'s keys showing `credential`.
fn endpoint(b: &KeyBundle, credential: &Credential) -> QuicEndpoint {
    let me = LinkIdentity::new(&b.identity, credential).unwrap();
    let servers = PeerPolicy::new(b.ca_public, Revocations::new(), &[Role::Router]);
    QuicEndpoint::client(
        "127.0.0.1:0".parse().unwrap(),
        &me,
        servers,
        &LinkConfig::default(),
    )
    .unwrap()
}

/// Whether the router keeps a link (`Ok`), or why it closed it (`Err`). A link that is
/// kept answers nothing after the router's HELLO, so the wait runs out.
async fn kept(ep: &QuicEndpoint, port: u16) -> Result<(), String> {
    let link = ep
        .connect(format!("127.0.0.1:{port}").parse().unwrap(), "cloud")
        .await
        .map_err(|e| e.to_string())?;
    let (mut tx, mut rx) = link.split();
    let hello = tether_routing::Leaf::new(tether_routing::NodeId(42), 0)
        .hello()
        .to_bytes()
        .unwrap();
    let _ = tx.send(hello).await;
    // The router's HELLO comes first either way.
    let _ = rx.recv().await;
    let r = tokio::time::timeout(Duration::from_millis(800), rx.recv()).await;
    // Keep the link open while counting it.
    std::mem::forget((tx, rx));
    match r {
        Err(_) => Ok(()),
        Ok(Ok(_)) => Err("an unexpected frame".into()),
        Ok(Err(e)) => Err(e.to_string()),
    }
}

#[test]
fn a_member_showing_grants_and_a_ninth_link_are_refused() {
    with_router("", |dir, port, _| async move {
        let b = KeyBundle::load(&dir.join("realm/a.key")).unwrap();
        // Its full credential names /x: refused (closed after HELLO).
        let full = client(&dir, &b.credential);
        let why = kept(&full, port).await.unwrap_err();
        assert!(why.contains("grants"), "{why}");
        // Its grantless link credential: kept, up to the limit of links per credential.
        let link = b.link_credential.clone().unwrap();
        let ep = client(&dir, &link);
        for i in 0..MAX_LINKS_PER_CREDENTIAL {
            if let Err(e) = kept(&ep, port).await {
                panic!("link {i} of one credential refused: {e}");
            }
        }
        let why = kept(&ep, port).await.unwrap_err();
        assert!(why.contains("too many links"), "{why}");
        // The router's own keys are a router's.
        assert!(RouterKeys::load(&dir.join("realm/cloud.key")).is_ok());
    });
}

async fn run_router(cfg: RouterConfig, stop: std::sync::Arc<tokio::sync::Notify>) {
    tether_router::run(cfg, async move { stop.notified().await })
        .await
        .unwrap();
}

/// The metrics page of a router serving it on `addr`.
fn metrics(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut s = String::new();
    let _ = c.read_to_string(&mut s);
    s
}

/// Asserts that the metrics `page` shows counter `name` at `value`.
#[track_caller]
fn assert_counter(page: &str, name: &str, value: f64) {
    assert_eq!(counter(page, name), value, "{name} in {page}");
}

/// A counter's value on a metrics page (-1 if absent).
fn counter(page: &str, name: &str) -> f64 {
    page.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

/// Runs `f` against a router of `extra` limits (and metrics) on a runtime of its own.
fn with_router<F: std::future::Future<Output = ()>>(
    extra: &str,
    f: impl FnOnce(std::path::PathBuf, u16, std::net::SocketAddr) -> F,
) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let m: std::net::SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let cfg = realm_with(dir.path(), port, &format!("metrics = \"{m}\"\n{extra}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let stop = std::sync::Arc::new(tokio::sync::Notify::new());
        let router = tokio::spawn(run_router(cfg, stop.clone()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        f(dir.path().to_path_buf(), port, m).await;
        stop.notify_one();
        let _ = tokio::time::timeout(Duration::from_secs(5), router).await;
    });
}

/// With `handshakes_before_retry = 0` every client is sent a QUIC Retry first: it comes
/// back with the token from its address and links as any other.
#[test]
fn a_client_asked_to_prove_its_address_still_links() {
    with_router(
        "[limits]\nhandshakes_before_retry = 0",
        |dir, port, m| async move {
            let b = KeyBundle::load(&dir.join("realm/a.key")).unwrap();
            let ep = client(&dir, &b.link_credential.clone().unwrap());
            for i in 0..3 {
                if let Err(e) = kept(&ep, port).await {
                    panic!("link {i} after a Retry refused: {e}");
                }
            }
            let page = metrics_of(m).await;
            assert_counter(&page, "tether_router_handshakes_retried_total", 3.0);
            assert_counter(&page, "tether_router_links_made_total", 3.0);
        },
    );
}

/// A handshake begun and never finished: a real client's first datagram (its Initial,
/// caught on a socket that never answers) sent to the router at `router` from a socket of
/// its own, which then stays silent. Returns that socket (kept open while the handshake
/// should stay pending).
async fn stalled_handshake(
    ep: &QuicEndpoint,
    router: std::net::SocketAddr,
) -> tokio::net::UdpSocket {
    let trap = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let at = trap.local_addr().unwrap();
    let dialer = ep.clone();
    let dial = tokio::spawn(async move {
        let _ = dialer.connect(at, "cloud").await;
    });
    let mut buf = vec![0u8; 4096];
    let (n, _) = trap.recv_from(&mut buf).await.unwrap();
    dial.abort();
    let s = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.send_to(&buf[..n], router).await.unwrap();
    s
}

/// `n` handshakes begun at the router on `port` and never finished (see
/// [`stalled_handshake`]), with their sockets.
async fn stalled_handshakes(ep: &QuicEndpoint, port: u16, n: usize) -> Vec<tokio::net::UdpSocket> {
    let router: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(stalled_handshake(ep, router).await);
    }
    held
}

/// A client of realm `dir` showing member `a`'s grantless link credential, as a session
/// does.
fn member(dir: &std::path::Path) -> QuicEndpoint {
    let b = KeyBundle::load(&dir.join("realm/a.key")).unwrap();
    client(dir, &b.link_credential.clone().unwrap())
}

/// The metrics page at `m`, read off the runtime's threads.
async fn metrics_of(m: std::net::SocketAddr) -> String {
    tokio::task::spawn_blocking(move || metrics(m))
        .await
        .unwrap()
}

/// Handshakes that never finish hold no member out: with room for two, each newcomer takes
/// the place of the oldest, so a member dialling after four stalled ones links (and its
/// own handshake ended one more of them).
#[test]
fn stalled_handshakes_cannot_lock_a_member_out() {
    with_router(
        "[limits]\nhandshakes_before_retry = 1000\nmax_handshakes = 2\nhandshake_timeout_ms = 60000",
        |dir, port, m| async move {
            let ep = member(&dir);
            let held = stalled_handshakes(&ep, port, 4).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let page = metrics_of(m).await;
            assert_counter(&page, "tether_router_handshakes_in_progress", 2.0);
            assert_counter(&page, "tether_router_handshakes_evicted_total", 2.0);
            kept(&ep, port)
                .await
                .expect("the member links past stalled handshakes");
            let page = metrics_of(m).await;
            assert_counter(&page, "tether_router_handshakes_evicted_total", 3.0);
            assert_counter(&page, "tether_router_links_made_total", 1.0);
            drop(held);
        },
    );
}

/// One address holds at most `max_handshakes_per_address` handshakes in progress: its
/// newer ones take the place of its older ones, not of other addresses'.
#[test]
fn one_address_holds_at_most_its_share_of_handshakes() {
    with_router(
        "[limits]\nhandshakes_before_retry = 1000\nmax_handshakes_per_address = 2\nhandshake_timeout_ms = 60000",
        |dir, port, m| async move {
            let ep = member(&dir);
            let held = stalled_handshakes(&ep, port, 5).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let page = metrics_of(m).await;
            assert_counter(&page, "tether_router_handshakes_in_progress", 2.0);
            assert_counter(&page, "tether_router_handshakes_evicted_total", 3.0);
            drop(held);
        },
    );
}

/// A handshake that does not finish within `handshake_timeout_ms` ends, counted as failed,
/// and gives its place back.
#[test]
fn a_handshake_that_does_not_finish_in_time_ends() {
    with_router(
        "[limits]\nhandshakes_before_retry = 1000\nhandshake_timeout_ms = 300",
        |dir, port, m| async move {
            let ep = member(&dir);
            let held = stalled_handshakes(&ep, port, 1).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let page = metrics_of(m).await;
            assert_counter(&page, "tether_router_handshakes_in_progress", 1.0);
            tokio::time::sleep(Duration::from_millis(700)).await;
            let page = metrics_of(m).await;
            assert_counter(&page, "tether_router_handshakes_in_progress", 0.0);
            assert_counter(&page, "tether_router_handshakes_failed_total", 1.0);
            drop(held);
        },
    );
}

/// A member that sends a malformed frame (a UNICAST with an unknown flag) loses its link,
/// is told why (close code 2, the reason) and is counted.
#[test]
fn a_malformed_frame_closes_the_link_with_a_reason() {
    with_router("", |dir, port, m| async move {
        let ep = member(&dir);
        let link = ep
            .connect(format!("127.0.0.1:{port}").parse().unwrap(), "cloud")
            .await
            .unwrap();
        let (mut tx, mut rx) = link.split();
        let leaf = tether_routing::Leaf::new(tether_routing::NodeId(42), 0);
        tx.send(leaf.hello().to_bytes().unwrap()).await.unwrap();
        let _ = rx.recv().await; // the router's HELLO
        let mut bad = leaf
            .unicast(
                tether_routing::ParticipantId(7),
                tether_routing::ParticipantId(42),
                tether_routing::RouteKey([1; 32]),
                bytes::Bytes::from_static(b"x"),
            )
            .to_bytes()
            .unwrap()
            .to_vec();
        bad[5 + 8 + 8 + 1 + 32] = 0x80;
        tx.send(bad.into()).await.unwrap();
        let why = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Err(e) = rx.recv().await {
                    return e;
                }
            }
        })
        .await
        .expect("the link was closed");
        let said = why.to_string();
        assert!(
            said.contains("code 2") && said.contains("malformed"),
            "{said}"
        );
        let page = metrics_of(m).await;
        assert_eq!(
            counter(
                &page,
                "tether_router_links_dropped_total{router=\"cloud\",reason=\"malformed_frame\"}"
            ),
            1.0,
            "{page}"
        );
    });
}

/// A session flooding announcements (which go to every other session) has them dropped
/// beyond `limits.announce_bytes_per_sec`, counted, and keeps its link.
#[test]
fn a_session_flooding_announcements_is_held_to_its_rate() {
    with_router(
        "[limits]\nannounce_bytes_per_sec = 1000000",
        |dir, port, m| async move {
            let b = KeyBundle::load(&dir.join("realm/a.key")).unwrap();
            let ep = client(&dir, &b.link_credential.clone().unwrap());
            let link = ep
                .connect(format!("127.0.0.1:{port}").parse().unwrap(), "cloud")
                .await
                .unwrap();
            let (mut tx, mut rx) = link.split();
            let leaf = tether_routing::Leaf::new(tether_routing::NodeId(42), 0);
            tx.send(leaf.hello().to_bytes().unwrap()).await.unwrap();
            let _ = rx.recv().await; // the router's HELLO
            let big = bytes::Bytes::from(vec![7u8; 60_000]);
            for _ in 0..100 {
                let f = leaf.announce(tether_routing::ParticipantId(42), big.clone());
                tx.send(f.to_bytes().unwrap()).await.unwrap();
            }
            // The link stays: nothing but silence comes back.
            let r = tokio::time::timeout(Duration::from_millis(800), rx.recv()).await;
            assert!(r.is_err(), "the link was closed or answered: {r:?}");
            let page = metrics_of(m).await;
            let dropped = counter(
                &page,
                "tether_router_drops_total{router=\"cloud\",reason=\"announce_rate\"}",
            );
            assert!(
                (70.0..=100.0).contains(&dropped),
                "{dropped} of 100 dropped (6 MB offered at once, 1 MB/s allowed): {page}"
            );
            std::mem::forget((tx, rx));
        },
    );
}

/// Opens a link from `ep` that says HELLO and announces participant 77, and keeps it.
async fn announce_77(ep: &QuicEndpoint, port: u16) {
    let link = ep
        .connect(format!("127.0.0.1:{port}").parse().unwrap(), "cloud")
        .await
        .unwrap();
    let (mut tx, mut rx) = link.split();
    let mut leaf = tether_routing::Leaf::new(tether_routing::NodeId(77), 0);
    leaf.add_participant(tether_routing::ParticipantId(77));
    leaf.link_up(tether_routing::LinkId(1));
    while let Some((_, f)) = leaf.poll_transmit() {
        tx.send(f.to_bytes().unwrap()).await.unwrap();
    }
    let _ = rx.recv().await; // the router's HELLO
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::mem::forget((tx, rx));
}

/// A session that dials again while the router still holds its old link (its own side
/// timed out first) takes its participant id to the new link: both show the same
/// credential. Another member's link still cannot take it.
#[test]
fn a_member_dialling_again_takes_its_participant_to_the_new_link() {
    with_router("", |dir, port, m| async move {
        let realm = Realm::open(&dir.join("realm")).unwrap();
        realm
            .issue("b", vec!["/x".into()], vec!["/x".into()], 1)
            .unwrap();
        let spoofed = "tether_router_drops_total{router=\"cloud\",reason=\"spoofed_source\"}";
        let moved = "tether_router_hosts_taken_over_total{router=\"cloud\"}";
        let first = member(&dir);
        announce_77(&first, port).await;
        let b = KeyBundle::load(&dir.join("realm/b.key")).unwrap();
        let other = endpoint(&b, b.link_credential.as_ref().unwrap());
        announce_77(&other, port).await;
        let page = metrics_of(m).await;
        assert_counter(&page, spoofed, 1.0);
        assert_counter(&page, moved, 0.0);
        let again = member(&dir);
        announce_77(&again, port).await;
        let page = metrics_of(m).await;
        assert_counter(&page, spoofed, 1.0);
        assert_counter(&page, moved, 1.0);
    });
}
