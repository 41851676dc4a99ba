//! What a router refuses after the TLS handshake (the QUIC layer's own refusals are tested
//! in tether-transport): a member showing a credential with grants, which would tell the
//! router topic names, and more links from one credential than it may hold.

use std::time::Duration;

use tether::keys::{KeyBundle, Realm, RouterKeys};
use tether_crypto::{Credential, Role};
use tether_router::{RouterConfig, run::MAX_LINKS_PER_CREDENTIAL};
use tether_transport::quic::{LinkConfig, LinkIdentity, PeerPolicy, QuicEndpoint, Revocations};

/// A realm with member `a` (grants on /x) and router `cloud`, and a router running on
/// `port` from it.
fn realm(dir: &std::path::Path, port: u16) -> RouterConfig {
    let r = Realm::init(&dir.join("realm")).unwrap();
    r.issue("a", vec!["/x".into()], vec!["/x".into()], 1)
        .unwrap();
    r.issue_router("cloud", 1).unwrap();
    let path = dir.join("r.toml");
    let text = format!("listen = \"127.0.0.1:{port}\"\nkeys = \"realm/cloud.key\"\n");
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
    let b = KeyBundle::load(&dir.join("realm/a.key")).unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = realm(dir.path(), port);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let stop = std::sync::Arc::new(tokio::sync::Notify::new());
        let s = stop.clone();
        let router = tokio::spawn(run_router(cfg, s));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let b = KeyBundle::load(&dir.path().join("realm/a.key")).unwrap();
        // Its full credential names /x: refused (closed after HELLO).
        let full = client(dir.path(), &b.credential);
        let why = kept(&full, port).await.unwrap_err();
        assert!(why.contains("grants"), "{why}");
        // Its grantless link credential: kept, up to the limit of links per credential.
        let link = b.link_credential.clone().unwrap();
        let ep = client(dir.path(), &link);
        for i in 0..MAX_LINKS_PER_CREDENTIAL {
            if let Err(e) = kept(&ep, port).await {
                panic!("link {i} of one credential refused: {e}");
            }
        }
        let why = kept(&ep, port).await.unwrap_err();
        assert!(why.contains("too many links"), "{why}");
        stop.notify_one();
        let _ = tokio::time::timeout(Duration::from_secs(5), router).await;
    });
    // The router's own keys are a router's.
    assert!(RouterKeys::load(&dir.path().join("realm/cloud.key")).is_ok());
}

async fn run_router(cfg: RouterConfig, stop: std::sync::Arc<tokio::sync::Notify>) {
    tether_router::run(cfg, async move { stop.notified().await })
        .await
        .unwrap();
}
