//! Links on loopback, real sockets: mutual TLS accepted and refused for each rule, frames
//! of every size echoed, a client moving to a new port, a dead peer noticed. Each test is
//! bounded in time (`bounded`), and none asserts a speed.

use std::future::Future;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rcgen::{CertificateParams, CustomExtension, KeyPair, PKCS_ED25519};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use tether_crypto::{CaKey, Credential, Identity, OsRandom, RevocationList, Role};
use tokio::sync::mpsc;

use super::*;

const LOCAL: &str = "127.0.0.1:0";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Runs `f` on a fresh runtime, failing the test if it takes longer than `limit`.
fn bounded<F: Future<Output = ()>>(limit: Duration, f: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            tokio::time::timeout(limit, f)
                .await
                .expect("test ran past its bound")
        });
}

struct Node {
    identity: Identity,
    credential: Credential,
}

fn node_at(ca: &CaKey, role: Role, name: &str, serial: u64, issued: u64, expires: u64) -> Node {
    let identity = Identity::generate();
    let credential = Credential::issue_with_role(
        ca,
        role,
        name,
        serial,
        issued,
        expires,
        identity.sign_public(),
        identity.kx_public(),
        vec![],
        vec![],
    )
    .unwrap();
    Node {
        identity,
        credential,
    }
}

fn node(ca: &CaKey, role: Role, name: &str, serial: u64) -> Node {
    node_at(ca, role, name, serial, now() - 60, now() + 3600)
}

fn ident(n: &Node) -> LinkIdentity {
    LinkIdentity::new(&n.identity, &n.credential).unwrap()
}

/// What a test server saw: each client's credential and address, or why it was refused.
type Seen = mpsc::UnboundedReceiver<Result<(PeerCredential, SocketAddr), LinkError>>;

/// A router's server on loopback that echoes every frame; a frame `addr?` is answered with
/// the client's address as the server sees it.
fn echo_server(me: &Node, clients: PeerPolicy, cfg: &LinkConfig) -> (QuicEndpoint, Seen) {
    let ep = QuicEndpoint::server(LOCAL.parse().unwrap(), &ident(me), clients, cfg).unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let server = ep.clone();
    tokio::spawn(async move {
        while let Some(inc) = server.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let link = match inc.establish().await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let _ = tx.send(Ok((link.peer().clone(), link.remote_address())));
                let (mut s, mut r) = link.split();
                while let Ok(f) = r.recv().await {
                    let reply = if &f[..] == b"addr?" {
                        Bytes::from(s.remote_address().to_string())
                    } else {
                        f
                    };
                    if s.send(reply).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (ep, rx)
}

fn member_policy(ca: &CaKey) -> PeerPolicy {
    PeerPolicy::new(ca.public(), Revocations::new(), &[Role::Router])
}

fn router_policy(ca: &CaKey, revocations: Revocations) -> PeerPolicy {
    PeerPolicy::new(ca.public(), revocations, &[Role::Member, Role::Router])
}

fn client(me: &Node, servers: PeerPolicy) -> QuicEndpoint {
    QuicEndpoint::client(
        LOCAL.parse().unwrap(),
        &ident(me),
        servers,
        &LinkConfig::default(),
    )
    .unwrap()
}

async fn echo(link: &mut Link, frame: Bytes) {
    link.send(frame.clone()).await.unwrap();
    let back = link.recv().await.unwrap();
    assert!(back == frame, "echo of {} bytes differs", frame.len());
}

#[test]
fn mutual_tls_both_ways_and_frames_echoed() {
    bounded(Duration::from_secs(60), async {
        let ca = CaKey::generate();
        let router = node(&ca, Role::Router, "router-a", 1);
        let (server, mut seen) = echo_server(
            &router,
            router_policy(&ca, Revocations::new()),
            &LinkConfig::default(),
        );
        let addr = server.local_addr().unwrap();

        // A session (member) dials the router.
        let session = node(&ca, Role::Member, "robot1", 2);
        let c = client(&session, member_policy(&ca));
        let link = c.connect(addr, "router-a").await.unwrap();
        assert_eq!(link.peer().name(), "router-a");
        assert_eq!(link.peer().role(), Role::Router);
        assert_eq!(link.peer().serial(), 1);
        assert_eq!(link.peer().realm(), ca.public());
        assert_eq!(link.remote_address(), addr);
        let (peer, from) = seen.recv().await.unwrap().unwrap();
        assert_eq!(
            (peer.name(), peer.role(), peer.serial()),
            ("robot1", Role::Member, 2)
        );
        assert_eq!(from, c.local_addr().unwrap());

        // Many small frames, pipelined, then echoed in order.
        let (mut tx, mut rx) = link.split();
        let writer = tokio::spawn(async move {
            for i in 0..2000u32 {
                let f = Bytes::from([&i.to_be_bytes()[..], &[7u8; 96][..]].concat());
                tx.send(f).await.unwrap();
            }
            tx.send(Bytes::new()).await.unwrap(); // an empty frame is a frame
            tx
        });
        for i in 0..2000u32 {
            let f = rx.recv().await.unwrap();
            assert_eq!(f.len(), 100);
            assert_eq!(&f[..4], &i.to_be_bytes());
        }
        assert!(rx.recv().await.unwrap().is_empty());
        let mut tx = writer.await.unwrap();

        // A 10 MiB frame (many QUIC packets and reads), and the largest frame allowed.
        for len in [10 << 20, MAX_FRAME] {
            let big: Bytes = (0..len)
                .map(|i| (i * 31 % 251) as u8)
                .collect::<Vec<_>>()
                .into();
            let sent = big.clone();
            let w = tokio::spawn(async move {
                tx.send(sent).await.unwrap();
                tx
            });
            let back = rx.recv().await.unwrap();
            assert_eq!(back.len(), len);
            assert!(back == big, "{len}-byte frame came back different");
            tx = w.await.unwrap();
        }
        let st = tx.stats();
        assert_eq!(st.frames_sent, 2003);
        assert_eq!(st.frames_received, 2003);
        assert!(st.udp_bytes_sent > st.bytes_sent);

        // One byte over the limit is refused here, and the frame handed back.
        let e = tx
            .send(Bytes::from(vec![0; MAX_FRAME + 1]))
            .await
            .unwrap_err();
        assert_eq!(e.frame.len(), MAX_FRAME + 1);
        assert!(matches!(e.error, LinkError::FrameTooLarge { .. }));

        // A router dials the router (router-to-router: both sides need role router).
        let router_b = node(&ca, Role::Router, "router-b", 3);
        let (b, _seen_b) = echo_server(
            &router_b,
            router_policy(&ca, Revocations::new()),
            &LinkConfig::default(),
        );
        let mut l = b.connect(addr, "router-a").await.unwrap();
        assert_eq!(l.peer().name(), "router-a");
        echo(&mut l, Bytes::from_static(b"hello")).await;
        let (peer, _) = seen.recv().await.unwrap().unwrap();
        assert_eq!((peer.name(), peer.role()), ("router-b", Role::Router));
    });
}

/// Links whose sides run BBR carry frames as CUBIC's do, both ways, large and small; the
/// names parse and print as the configuration files write them.
#[test]
fn links_run_either_congestion_controller() {
    assert_eq!("bbr".parse::<Congestion>(), Ok(Congestion::Bbr));
    assert_eq!("cubic".parse::<Congestion>(), Ok(Congestion::Cubic));
    assert_eq!(Congestion::default(), Congestion::Cubic);
    assert_eq!(Congestion::Bbr.to_string(), "bbr");
    assert!(
        "reno"
            .parse::<Congestion>()
            .unwrap_err()
            .contains("cubic or bbr")
    );
    bounded(Duration::from_secs(60), async {
        let ca = CaKey::generate();
        let router = node(&ca, Role::Router, "router-a", 1);
        let mut bbr = LinkConfig::default();
        bbr.congestion(Congestion::Bbr);
        let (server, _seen) = echo_server(&router, router_policy(&ca, Revocations::new()), &bbr);
        let addr = server.local_addr().unwrap();
        let session = node(&ca, Role::Member, "robot1", 2);
        let c = QuicEndpoint::client(
            LOCAL.parse().unwrap(),
            &ident(&session),
            member_policy(&ca),
            &bbr,
        )
        .unwrap();
        let mut link = c.connect(addr, "router-a").await.unwrap();
        for len in [1, 1000, 4 << 20] {
            let f: Bytes = (0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>().into();
            echo(&mut link, f).await;
        }
    });
}

/// Connects `who` to a router of `server_realm` whose server accepts `roles`, expecting a
/// refusal; returns (the server's reason, the client's error).
async fn refused(
    server_realm: &CaKey,
    revocations: Revocations,
    roles: &[Role],
    me: LinkIdentity,
) -> (String, LinkError) {
    let router = node(server_realm, Role::Router, "router", 1);
    let policy = PeerPolicy::new(server_realm.public(), revocations, roles);
    let (server, mut seen) = echo_server(&router, policy, &LinkConfig::default());
    let c = QuicEndpoint::client(
        LOCAL.parse().unwrap(),
        &me,
        member_policy(server_realm),
        &LinkConfig::default(),
    )
    .unwrap();
    let e = c
        .connect(server.local_addr().unwrap(), "router")
        .await
        .expect_err("the server accepted");
    let server_side = seen.recv().await.unwrap().expect_err("the server accepted");
    match server_side {
        LinkError::PeerRefused { reason } => (reason, e),
        other => panic!("server side: {other:?}"),
    }
}

fn assert_refused(case: &str, (server, client): (String, LinkError), says: &str) {
    eprintln!("{case}: server: {server}\n{case}: client: {client}");
    assert!(server.contains(says), "{case}: server said {server:?}");
    match client {
        LinkError::RefusedByPeer { reason } => {
            assert!(reason.contains(says), "{case}: client told {reason:?}")
        }
        other => panic!("{case}: client: {other:?}"),
    }
}

#[test]
fn clients_are_refused_with_a_reason() {
    bounded(Duration::from_secs(60), async {
        let ca = CaKey::generate();
        let member_roles = &[Role::Member, Role::Router][..];

        let stranger = node(&CaKey::generate(), Role::Member, "stranger", 9);
        assert_refused(
            "other realm",
            refused(&ca, Revocations::new(), member_roles, ident(&stranger)).await,
            "issued by another realm",
        );

        let old = node_at(&ca, Role::Member, "old", 4, now() - 1000, now() - 10);
        assert_refused(
            "expired",
            refused(&ca, Revocations::new(), member_roles, ident(&old)).await,
            "expired at",
        );

        // A member where routers only are accepted (a router-to-router port).
        let m = node(&ca, Role::Member, "robot", 5);
        assert_refused(
            "wrong role",
            refused(&ca, Revocations::new(), &[Role::Router], ident(&m)).await,
            "wrong role: 'robot' is a member",
        );

        // A router's credential in a certificate of another key.
        let r = node(&ca, Role::Router, "impostor", 6);
        let thief = Identity::generate();
        let mut forged = LinkIdentity::new(
            &thief,
            &Credential {
                sign_public: thief.sign_public(),
                ..r.credential.clone()
            },
        )
        .unwrap();
        forged.credential = r.credential.clone();
        forged.cert = cert_with(&thief, Some(&r.credential));
        assert_refused(
            "key mismatch",
            refused(&ca, Revocations::new(), member_roles, forged).await,
            "key mismatch",
        );

        // A certificate without the credential extension.
        let mut bare = ident(&m);
        bare.cert = cert_with(&m.identity, None);
        assert_refused(
            "no extension",
            refused(&ca, Revocations::new(), member_roles, bare).await,
            "carries no tether credential",
        );
    });
}

/// A self-signed certificate of `id`'s key with `credential` in the extension (or none).
fn cert_with(id: &Identity, credential: Option<&Credential>) -> CertificateDer<'static> {
    let pkcs8 = [
        &[
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ][..],
        id.sign_seed(),
    ]
    .concat();
    let kp = KeyPair::from_pkcs8_der_and_sign_algo(&PrivatePkcs8KeyDer::from(pkcs8), &PKCS_ED25519)
        .unwrap();
    let mut p = CertificateParams::new(vec!["router.invalid".into()]).unwrap();
    if let Some(c) = credential {
        let v = super::cert::octet_string(&c.to_bytes());
        p.custom_extensions
            .push(CustomExtension::from_oid_content(CREDENTIAL_OID, v));
    }
    p.self_signed(&kp).unwrap().der().clone()
}

#[test]
fn a_session_refuses_a_server_that_is_not_a_router() {
    bounded(Duration::from_secs(30), async {
        let ca = CaKey::generate();
        // A member's credential on a server: the session wants a router.
        let fake = node(&ca, Role::Member, "not-a-router", 1);
        let (server, mut seen) = echo_server(
            &fake,
            router_policy(&ca, Revocations::new()),
            &LinkConfig::default(),
        );
        let session = node(&ca, Role::Member, "robot", 2);
        let c = client(&session, member_policy(&ca));
        let e = c
            .connect(server.local_addr().unwrap(), "x")
            .await
            .unwrap_err();
        eprintln!("client: {e}");
        match e {
            LinkError::PeerRefused { reason } => assert!(
                reason
                    .contains("wrong role: 'not-a-router' is a member, this side accepts routers"),
                "{reason}"
            ),
            other => panic!("{other:?}"),
        }
        let s = seen.recv().await.unwrap().unwrap_err();
        eprintln!("server: {s}");
        assert!(
            matches!(&s, LinkError::RefusedByPeer { reason } if reason.contains("wrong role")),
            "{s:?}"
        );
    });
}

/// An echo server of router "router" (serial 1) whose revocation list can be replaced at
/// run time, and a client of member "robot" (serial 7), both of `ca`'s realm.
struct RevocableRouter {
    server: QuicEndpoint,
    seen: Seen,
    revocations: Revocations,
    addr: SocketAddr,
    client: QuicEndpoint,
}

fn revocable_router(ca: &CaKey) -> RevocableRouter {
    let revocations = Revocations::new();
    let router = node(ca, Role::Router, "router", 1);
    let (server, seen) = echo_server(
        &router,
        router_policy(ca, revocations.clone()),
        &LinkConfig::default(),
    );
    let addr = server.local_addr().unwrap();
    let m = node(ca, Role::Member, "robot", 7);
    RevocableRouter {
        server,
        seen,
        revocations,
        addr,
        client: client(&m, member_policy(ca)),
    }
}

#[test]
fn a_revocation_list_replaced_at_run_time_refuses_new_connections() {
    bounded(Duration::from_secs(30), async {
        let ca = CaKey::generate();
        // The server lives as long as its binding.
        let RevocableRouter {
            server: _server,
            mut seen,
            revocations,
            addr,
            client: c,
        } = revocable_router(&ca);
        let mut first = c.connect(addr, "router").await.unwrap();
        seen.recv().await.unwrap().unwrap();
        echo(&mut first, Bytes::from_static(b"before")).await;

        // Another realm's list, and an older list, are not put in place.
        let other = CaKey::generate();
        assert!(
            revocations
                .replace(
                    &ca.public(),
                    RevocationList::issue(&other, 9, now(), vec![7])
                )
                .is_err()
        );
        revocations
            .replace(&ca.public(), RevocationList::issue(&ca, 2, now(), vec![3]))
            .unwrap();
        assert!(matches!(
            revocations.replace(&ca.public(), RevocationList::issue(&ca, 1, now(), vec![7])),
            Err(RevocationsError::Stale { .. })
        ));
        revocations
            .replace(
                &ca.public(),
                RevocationList::issue(&ca, 3, now(), vec![3, 7]),
            )
            .unwrap();
        let e = c.connect(addr, "router").await.unwrap_err();
        assert!(
            matches!(&e, LinkError::RefusedByPeer { reason } if reason.contains("serial 7 is revoked")),
            "{e:?}"
        );
        let s = seen.recv().await.unwrap().unwrap_err();
        assert!(
            matches!(&s, LinkError::PeerRefused { reason } if reason.contains("serial 7 is revoked")),
            "{s:?}"
        );
        // The link made before stays up: its owner decides (it knows whose it is).
        echo(&mut first, Bytes::from_static(b"after")).await;
    });
}

#[test]
fn a_client_that_moves_to_a_new_port_keeps_its_link() {
    bounded(Duration::from_secs(30), async {
        let ca = CaKey::generate();
        let router = node(&ca, Role::Router, "router", 1);
        let (server, _seen) = echo_server(
            &router,
            router_policy(&ca, Revocations::new()),
            &LinkConfig::default(),
        );
        let m = node(&ca, Role::Member, "robot", 2);
        let c = client(&m, member_policy(&ca));
        let link = c
            .connect(server.local_addr().unwrap(), "router")
            .await
            .unwrap();
        let old = c.local_addr().unwrap();
        let (mut tx, mut rx) = link.split();
        tx.send(Bytes::from_static(b"addr?")).await.unwrap();
        assert_eq!(rx.recv().await.unwrap(), old.to_string().as_bytes());

        // Frames flow while the client moves: a writer keeps sending throughout.
        let writer = tokio::spawn(async move {
            for i in 0..400u32 {
                tx.send(Bytes::from(i.to_be_bytes().to_vec()))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            tx
        });
        for i in 0..100u32 {
            assert_eq!(rx.recv().await.unwrap(), &i.to_be_bytes()[..]);
        }
        let new = c.rebind_to(LOCAL.parse().unwrap()).unwrap();
        assert_eq!(new, c.local_addr().unwrap());
        assert_ne!(new.port(), old.port());
        for i in 100..400u32 {
            assert_eq!(rx.recv().await.unwrap(), &i.to_be_bytes()[..]);
        }
        let mut tx = writer.await.unwrap();
        tx.send(Bytes::from_static(b"addr?")).await.unwrap();
        assert_eq!(
            rx.recv().await.unwrap(),
            new.to_string().as_bytes(),
            "the server follows the client to its new address"
        );
    });
}

#[test]
fn a_frame_over_the_receivers_limit_closes_the_link() {
    bounded(Duration::from_secs(30), async {
        let ca = CaKey::generate();
        let router = node(&ca, Role::Router, "router", 1);
        let mut small = LinkConfig::default();
        small.max_frame(1000);
        let ep = QuicEndpoint::server(
            LOCAL.parse().unwrap(),
            &ident(&router),
            router_policy(&ca, Revocations::new()),
            &small,
        )
        .unwrap();
        let m = node(&ca, Role::Member, "robot", 2);
        let c = client(&m, member_policy(&ca));
        let (cl, sl) = tokio::join!(c.connect(ep.local_addr().unwrap(), "router"), async {
            ep.accept().await.unwrap().establish().await
        });
        let (mut cl, mut sl) = (cl.unwrap(), sl.unwrap());
        cl.send(Bytes::from(vec![1; 1000])).await.unwrap();
        assert_eq!(sl.recv().await.unwrap().len(), 1000);
        cl.send(Bytes::from(vec![1; 1001])).await.unwrap();
        assert_eq!(
            sl.recv().await.unwrap_err(),
            LinkError::FrameTooLarge {
                len: 1001,
                max: 1000
            }
        );
        match cl.closed().await {
            LinkError::ClosedByPeer { code: 1, reason } => assert_eq!(reason, "frame too large"),
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn reconnect_with_backoff_reaches_a_server_that_starts_late() {
    bounded(Duration::from_secs(30), async {
        let ca = CaKey::generate();
        let router = node(&ca, Role::Router, "router", 1);
        // A free port, where the server starts 1.5 s later.
        let port = UdpSocket::bind(LOCAL).unwrap().local_addr().unwrap().port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let m = node(&ca, Role::Member, "robot", 2);
        let mut cfg = LinkConfig::default();
        cfg.idle_timeout(Duration::from_millis(300));
        let c = QuicEndpoint::client(LOCAL.parse().unwrap(), &ident(&m), member_policy(&ca), &cfg)
            .unwrap();
        let start = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let ep = QuicEndpoint::server(
                addr,
                &ident(&router),
                router_policy(&ca, Revocations::new()),
                &LinkConfig::default(),
            )
            .unwrap();
            let l = ep.accept().await.unwrap().establish().await.unwrap();
            (ep, l)
        });
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(400));
        // Bounded attempts fail while nobody listens.
        let e = c
            .reconnect(addr, "router", &mut backoff.clone(), &mut OsRandom, Some(1))
            .await
            .unwrap_err();
        eprintln!("one attempt: {e}");
        let mut link = c
            .reconnect(addr, "router", &mut backoff, &mut OsRandom, None)
            .await
            .unwrap();
        assert_eq!(backoff.attempts(), 0, "reset on success");
        let (_ep, mut server_link) = start.await.unwrap();
        link.send(Bytes::from_static(b"hi")).await.unwrap();
        assert_eq!(server_link.recv().await.unwrap(), &b"hi"[..]);
    });
}

/// Throughput of one loopback link, one direction, for the report (run in release:
/// `cargo test -p tether-transport --release --lib quic::tests::throughput -- --ignored
/// --nocapture`). Reports; asserts nothing about speed.
#[test]
#[ignore]
fn throughput() {
    bounded(Duration::from_secs(60), async {
        let ca = CaKey::generate();
        let router = node(&ca, Role::Router, "router", 1);
        let ep = QuicEndpoint::server(
            LOCAL.parse().unwrap(),
            &ident(&router),
            router_policy(&ca, Revocations::new()),
            &LinkConfig::default(),
        )
        .unwrap();
        let m = node(&ca, Role::Member, "robot", 2);
        let c = client(&m, member_policy(&ca));
        for size in [1000usize, 64 * 1024] {
            let (cl, sl) = tokio::join!(c.connect(ep.local_addr().unwrap(), "router"), async {
                ep.accept().await.unwrap().establish().await
            });
            let (mut tx, _) = cl.unwrap().split();
            let (_, mut rx) = sl.unwrap().split();
            let frame = Bytes::from(vec![0xa5; size]);
            let secs = Duration::from_secs(3);
            let reader = tokio::spawn(async move {
                let mut n = 0u64;
                let mut t0 = None;
                while let Ok(f) = rx.recv().await {
                    t0.get_or_insert_with(Instant::now);
                    if f.is_empty() {
                        break;
                    }
                    n += 1;
                }
                (n, t0.unwrap().elapsed())
            });
            let t0 = Instant::now();
            while t0.elapsed() < secs {
                for _ in 0..64 {
                    tx.send(frame.clone()).await.unwrap();
                }
            }
            tx.send(Bytes::new()).await.unwrap();
            let (n, took) = reader.await.unwrap();
            let st = tx.stats();
            println!(
                "{size:>6}-byte frames: {n} in {took:.2?}: {:.0} frames/s, {:.1} MB/s (lost packets {}, rtt {:?})",
                n as f64 / took.as_secs_f64(),
                (n as f64 * size as f64) / took.as_secs_f64() / 1e6,
                st.lost_packets,
                st.rtt,
            );
        }
    });
}

#[test]
fn a_link_identity_needs_the_credentials_key() {
    let ca = CaKey::generate();
    let n = node(&ca, Role::Router, "r", 1);
    let other = Identity::generate();
    assert_eq!(
        LinkIdentity::new(&other, &n.credential).unwrap_err(),
        CertificateError::KeyMismatch
    );
    let id = ident(&n);
    assert_eq!(id.credential(), &n.credential);
}

/// A server restarted on the same port with the same reset secret (a router's, from its
/// identity) answers its earlier connections' packets with a stateless reset: the client's
/// link ends as reset, at its next packet, not after the idle timeout. Without the secret
/// (a new random key) the same client would wait for the time-out.
#[test]
fn a_restarted_server_resets_its_earlier_connections() {
    bounded(Duration::from_secs(30), async {
        let ca = CaKey::generate();
        let router = node(&ca, Role::Router, "router", 1);
        let mut cfg = LinkConfig::default();
        cfg.keep_alive(Duration::from_millis(300))
            .idle_timeout(Duration::from_secs(20))
            .reset_secret([7; 32]);
        // The first server runs on a runtime of its own, on its own thread, so that it can
        // end without a word (as a process killed with SIGKILL does): its runtime is dropped
        // with its tasks, and nothing sends a CONNECTION_CLOSE.
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (die_tx, die_rx) = std::sync::mpsc::channel::<()>();
        let (r, p, cfg1) = (
            Node {
                identity: Identity::from_secrets(
                    router.identity.sign_seed(),
                    router.identity.kx_secret(),
                )
                .unwrap(),
                credential: router.credential.clone(),
            },
            router_policy(&ca, Revocations::new()),
            cfg.clone(),
        );
        let first = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let ep = rt.block_on(async { echo_server(&r, p, &cfg1).0 });
            addr_tx.send(ep.local_addr().unwrap()).unwrap();
            let handle = rt.spawn(async {});
            rt.block_on(async {
                while die_rx.try_recv().is_err() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
            drop(handle);
            drop(ep);
            rt.shutdown_background();
        });
        let at = addr_rx.recv().unwrap();
        let m = node(&ca, Role::Member, "robot", 2);
        let c = client(&m, member_policy(&ca));
        let mut link = c.connect(at, "router").await.unwrap();
        echo(&mut link, Bytes::from_static(b"before")).await;
        die_tx.send(()).unwrap();
        first.join().unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let again = QuicEndpoint::server(
            at,
            &ident(&router),
            router_policy(&ca, Revocations::new()),
            &cfg,
        );
        let again = again.unwrap();
        let why = tokio::time::timeout(Duration::from_secs(10), link.closed())
            .await
            .expect("the old link was reset well before its 20 s idle timeout");
        assert_ne!(why, LinkError::TimedOut);
        assert!(why.to_string().contains("reset"), "{why}");
        drop(again);
    });
}

/// A member's link to an echoing router, both with frames of at most `max_frame` bytes;
/// the endpoints are kept alive with it.
async fn echo_link(max_frame: usize) -> ((QuicEndpoint, QuicEndpoint), Link) {
    let ca = CaKey::generate();
    let router = node(&ca, Role::Router, "router", 1);
    let mut cfg = LinkConfig::default();
    cfg.max_frame(max_frame);
    let (server, _seen) = echo_server(&router, router_policy(&ca, Revocations::new()), &cfg);
    let m = node(&ca, Role::Member, "robot", 2);
    let c =
        QuicEndpoint::client(LOCAL.parse().unwrap(), &ident(&m), member_policy(&ca), &cfg).unwrap();
    let link = c
        .connect(server.local_addr().unwrap(), "router")
        .await
        .unwrap();
    ((server, c), link)
}

/// A frame sent as head and body arrives as one frame, the two joined; one over the limit
/// is handed back whole.
#[test]
fn a_frame_in_two_parts_arrives_whole() {
    bounded(Duration::from_secs(30), async {
        let (_ends, link) = echo_link(1000).await;
        let (mut tx, mut rx) = link.split();
        let body = Bytes::from(vec![9u8; 500]);
        tx.send_parts(
            Bytes::from_static(b"head:"),
            body.clone(),
            Bytes::from_static(b":tail"),
        )
        .await
        .unwrap();
        let got = rx.recv().await.unwrap();
        assert_eq!(&got[..5], b"head:");
        assert_eq!(&got[5..505], &body[..]);
        assert_eq!(&got[505..], b":tail");
        let err = tx
            .send_parts(
                Bytes::from(vec![1u8; 600]),
                Bytes::from(vec![2u8; 600]),
                Bytes::new(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.frame.len(), 1200);
        assert!(matches!(
            err.error,
            LinkError::FrameTooLarge { len: 1200, .. }
        ));
    });
}

/// Frames sent in one batch (parts of any length, empty ones too) arrive whole, in order,
/// and a receiver taking them in batches gets each once; a batch holding a frame over the
/// limit is refused before any of it is written.
#[test]
fn a_batch_of_frames_arrives_whole_and_in_order() {
    bounded(Duration::from_secs(30), async {
        let (_ends, link) = echo_link(20_000).await;
        let (mut tx, mut rx) = link.split();
        let frame = |k: usize| -> (Bytes, Bytes, Bytes) {
            let head = Bytes::from(format!("{k}:"));
            let body = Bytes::from(vec![k as u8; (k * 37) % 9000]);
            let tail = if k % 3 == 0 {
                Bytes::new()
            } else {
                Bytes::from_static(b"!")
            };
            (head, body, tail)
        };
        let joined = |(h, b, t): (Bytes, Bytes, Bytes)| [&h[..], &b[..], &t[..]].concat();
        let mut batch: Vec<_> = (0..300).map(frame).collect();
        tx.send_batch(&mut batch).await.unwrap();
        assert!(batch.is_empty(), "the batch is taken");
        let mut got = Vec::new();
        while got.len() < 300 {
            rx.recv_batch(&mut got, 64).await.unwrap();
            assert!(got.len() <= 300, "no frame twice");
        }
        assert_eq!(got.len(), 300, "each frame once");
        for (k, f) in got.iter().enumerate() {
            assert_eq!(
                &f[..],
                &joined(frame(k))[..],
                "frame {k} whole and in order"
            );
        }
        let mut bad = vec![
            frame(1),
            (Bytes::from(vec![0u8; 20_001]), Bytes::new(), Bytes::new()),
        ];
        let err = tx.send_batch(&mut bad).await.unwrap_err();
        assert!(matches!(
            err.error,
            LinkError::FrameTooLarge { len: 20_001, .. }
        ));
        // Nothing of the refused batch went: the next frame is the next one echoed.
        tx.send(Bytes::from_static(b"after")).await.unwrap();
        assert_eq!(&rx.recv().await.unwrap()[..], b"after");
    });
}

/// A link dialled early carries frames before the server's preamble came back (they reach
/// the server with our last handshake flight), and is confirmed by that preamble; a server
/// that refuses our certificate makes the confirmation fail with its reason, and what we
/// sent is lost with the link.
#[test]
fn an_early_link_sends_at_once_and_is_confirmed_or_refused() {
    bounded(Duration::from_secs(30), async {
        let ca = CaKey::generate();
        // The server lives as long as its binding.
        let RevocableRouter {
            server: _server,
            mut seen,
            revocations,
            addr,
            client: c,
        } = revocable_router(&ca);
        let link = c.connect_early(addr, "router").await.unwrap();
        let (mut tx, mut rx) = link.split();
        tx.send(Bytes::from_static(b"early")).await.unwrap();
        rx.confirm().await.unwrap();
        assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"early"));
        seen.recv().await.unwrap().unwrap();

        revocations
            .replace(&ca.public(), RevocationList::issue(&ca, 2, now(), vec![7]))
            .unwrap();
        // Our side's handshake is done before the server sees our certificate, so the dial
        // returns a link whose confirmation fails; unless the server's refusal came first
        // (it can, with this side's task slow to run: CI under load), when the dial fails
        // with the same reason.
        let revoked = |e: &LinkError| matches!(e, LinkError::RefusedByPeer { reason } if reason.contains("serial 7 is revoked"));
        match c.connect_early(addr, "router").await {
            Ok(link) => {
                let (mut tx, mut rx) = link.split();
                let _ = tx.send(Bytes::from_static(b"lost")).await;
                let e = rx.confirm().await.unwrap_err();
                assert!(revoked(&e), "{e:?}");
                // recv says the same, and no frame came.
                assert!(rx.recv().await.is_err());
            }
            Err(e) => assert!(revoked(&e), "{e:?}"),
        }
        let s = seen.recv().await.unwrap().unwrap_err();
        assert!(matches!(&s, LinkError::PeerRefused { .. }), "{s:?}");
    });
}

/// A dial to a server that does not answer (a router that is down) gives up after the
/// handshake timeout, not the idle timeout: links on lossy paths raise the idle timeout,
/// and a dial should still be tried afresh soon (QUIC's own retransmissions of its first
/// packet back off). (Before: the idle timeout bounded the dial; with 120 s on both ends a
/// session met a router 16 s after it came up instead of 0.8 s: the outsider review.)
#[test]
fn a_dial_nobody_answers_ends_at_the_handshake_timeout() {
    bounded(Duration::from_secs(20), async {
        let ca = CaKey::generate();
        // A port nobody answers on: bound, never read.
        let silent = std::net::UdpSocket::bind(LOCAL).unwrap();
        let m = node(&ca, Role::Member, "robot", 2);
        let mut cfg = LinkConfig::default();
        cfg.idle_timeout(Duration::from_secs(60))
            .handshake_timeout(Duration::from_millis(700));
        let c = QuicEndpoint::client(LOCAL.parse().unwrap(), &ident(&m), member_policy(&ca), &cfg)
            .unwrap();
        let t0 = Instant::now();
        let r = c.connect(silent.local_addr().unwrap(), "router").await;
        let took = t0.elapsed();
        let e = r.err().unwrap();
        assert_eq!(e, LinkError::NoAnswer(Duration::from_millis(700)));
        assert!(e.to_string().starts_with("no answer"), "{e}");
        assert!(took < Duration::from_secs(5), "the dial took {took:?}");
    });
}

mod relay;
