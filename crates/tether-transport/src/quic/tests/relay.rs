//! Links through a UDP relay on loopback, standing for the path: a peer that goes silent
//! (the relay stops) is noticed within the idle timeout, and what the path loses while a
//! link closes is repaired before it closes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_crypto::{CaKey, Role};

use super::*;

/// A UDP relay between one client and a server: it can drop what the client sends for a
/// while (a lossy path), or stop altogether (a crashed host, a pulled cable).
#[derive(Clone)]
struct Relay {
    drop_client: Arc<AtomicBool>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl Relay {
    /// A relay to `server`; returns the address clients dial.
    async fn start(server: SocketAddr) -> (SocketAddr, Relay) {
        let front = tokio::net::UdpSocket::bind(LOCAL).await.unwrap();
        let back = tokio::net::UdpSocket::bind(LOCAL).await.unwrap();
        back.connect(server).await.unwrap();
        let addr = front.local_addr().unwrap();
        let drop_client = Arc::new(AtomicBool::new(false));
        let dropping = drop_client.clone();
        let task = tokio::spawn(async move {
            let mut client = None;
            let (mut a, mut b) = (vec![0u8; 65536], vec![0u8; 65536]);
            loop {
                tokio::select! {
                    Ok((n, from)) = front.recv_from(&mut a) => {
                        client = Some(from);
                        if !dropping.load(Ordering::SeqCst) {
                            let _ = back.send(&a[..n]).await;
                        }
                    }
                    Ok(n) = back.recv(&mut b) => {
                        if let Some(c) = client {
                            let _ = front.send_to(&b[..n], c).await;
                        }
                    }
                }
            }
        });
        let relay = Relay {
            drop_client,
            task: Arc::new(task),
        };
        (addr, relay)
    }

    /// While `on`, what the client sends is lost.
    fn drop_client(&self, on: bool) {
        self.drop_client.store(on, Ordering::SeqCst);
    }

    /// Nothing crosses any more, either way.
    fn stop(&self) {
        self.task.abort();
    }
}

#[test]
fn a_silent_peer_is_noticed_within_the_idle_timeout() {
    bounded(Duration::from_secs(30), async {
        let ca = CaKey::generate();
        let router = node(&ca, Role::Router, "router", 1);
        let mut cfg = LinkConfig::default();
        cfg.keep_alive(Duration::from_millis(500))
            .idle_timeout(Duration::from_secs(2));
        let ep = QuicEndpoint::server(
            LOCAL.parse().unwrap(),
            &ident(&router),
            router_policy(&ca, Revocations::new()),
            &cfg,
        )
        .unwrap();
        let (via, relay) = Relay::start(ep.local_addr().unwrap()).await;
        let m = node(&ca, Role::Member, "robot", 2);
        let c = QuicEndpoint::client(LOCAL.parse().unwrap(), &ident(&m), member_policy(&ca), &cfg)
            .unwrap();
        let (client_link, server_link) = tokio::join!(c.connect(via, "router"), async {
            ep.accept().await.unwrap().establish().await
        });
        let (mut client_link, mut server_link) = (client_link.unwrap(), server_link.unwrap());
        server_link.send(Bytes::from_static(b"ping")).await.unwrap();
        assert_eq!(client_link.recv().await.unwrap(), &b"ping"[..]);
        // Quiet for three idle timeouts: keep-alives hold the link up.
        tokio::time::sleep(Duration::from_secs(3)).await;
        client_link
            .send(Bytes::from_static(b"still"))
            .await
            .unwrap();
        assert_eq!(server_link.recv().await.unwrap(), &b"still"[..]);

        relay.stop();
        let t0 = Instant::now();
        let (s, c) = tokio::join!(server_link.closed(), client_link.closed());
        eprintln!("dead peer noticed after {:?}", t0.elapsed());
        assert_eq!(s, LinkError::TimedOut);
        assert_eq!(c, LinkError::TimedOut);
        assert_eq!(
            server_link.recv().await.unwrap_err(),
            LinkError::TimedOut,
            "a receive on a dead link says why"
        );
    });
}

/// A client linked to a router through a [`Relay`], both with `cfg`: the client endpoint,
/// its sending half, the relay, and the server's task, which returns the frames it
/// received once its link ends.
async fn through_relay(
    cfg: &LinkConfig,
) -> (
    QuicEndpoint,
    LinkSender,
    Relay,
    tokio::task::JoinHandle<Vec<Bytes>>,
) {
    let ca = CaKey::generate();
    let router = node(&ca, Role::Router, "router", 1);
    let server = QuicEndpoint::server(
        LOCAL.parse().unwrap(),
        &ident(&router),
        router_policy(&ca, Revocations::new()),
        cfg,
    )
    .unwrap();
    let got = tokio::spawn({
        let server = server.clone();
        async move {
            let link = server.accept().await.unwrap().establish().await.unwrap();
            let (_s, mut r) = link.split();
            let mut got = Vec::new();
            while let Ok(f) = r.recv().await {
                got.push(f);
            }
            got
        }
    });
    let (front, relay) = Relay::start(server.local_addr().unwrap()).await;
    let m = node(&ca, Role::Member, "robot", 2);
    let c =
        QuicEndpoint::client(LOCAL.parse().unwrap(), &ident(&m), member_policy(&ca), cfg).unwrap();
    let link = c.connect(front, "router").await.unwrap();
    let (tx, _rx) = link.split();
    (c, tx, relay, got)
}

/// The last frames of a link that is closing are lost by the path (a session's goodbye and
/// its readers' last acknowledgements): `finish_delivered` returns only once the server
/// acknowledged them, QUIC having sent them again, so closing the endpoint after it loses
/// nothing. (A session closed its link right after `finish`, and the frames lost on the
/// way were gone with it: the lossy review.)
#[test]
fn the_last_frames_of_a_closing_link_are_delivered_before_it_closes() {
    bounded(Duration::from_secs(30), async {
        let (c, mut tx, relay, got) = through_relay(&LinkConfig::default()).await;
        tx.send(Bytes::from_static(b"first")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The path loses everything the client sends for 100 ms, its last frames first.
        relay.drop_client(true);
        let healed = tokio::spawn({
            let relay = relay.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                relay.drop_client(false);
            }
        });
        tx.send(Bytes::from_static(b"goodbye")).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), tx.finish_delivered())
            .await
            .expect("acknowledged within 5 s")
            .unwrap();
        c.close(0, "done");
        healed.await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), got)
            .await
            .expect("the server's link ends")
            .unwrap();
        assert_eq!(got, [&b"first"[..], &b"goodbye"[..]]);
    });
}

/// A write whose future is dropped half way (a session closing while a batch waits for the
/// window) leaves the rest of its frame to the next write, which writes it first: the peer
/// reads both frames whole. (Before, the next frame went into the middle of the first; the
/// router read a length of 463 MB, closed the link and lost the goodbyes: the lossy review.)
#[test]
fn a_write_dropped_half_way_is_finished_by_the_next() {
    bounded(Duration::from_secs(30), async {
        // A small window: a 2 MB frame cannot be taken whole while the path is down.
        let mut cfg = LinkConfig::default();
        cfg.stream_window(64 << 10);
        let (c, mut tx, relay, got) = through_relay(&cfg).await;
        tx.send(Bytes::from_static(b"first")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The path delivers nothing: a frame larger than the send window cannot be taken
        // whole, and its write is dropped.
        relay.drop_client(true);
        let big: Bytes = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut batch = vec![(big.clone(), Bytes::new(), Bytes::new())];
        let dropped =
            tokio::time::timeout(Duration::from_millis(300), tx.send_batch(&mut batch)).await;
        assert!(dropped.is_err(), "the write waited for the window");
        relay.drop_client(false);
        tx.send(Bytes::from_static(b"after")).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), tx.finish_delivered())
            .await
            .expect("acknowledged within 10 s")
            .unwrap();
        c.close(0, "done");
        let got = tokio::time::timeout(Duration::from_secs(10), got)
            .await
            .expect("the frames arrive")
            .unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], &b"first"[..]);
        assert!(got[1] == big, "the large frame whole");
        assert_eq!(got[2], &b"after"[..]);
    });
}
