//! The QUIC link alone: what one link carries without a router and without a session at
//! either end. The same link as a session's to its router (`tether_transport::quic`,
//! mutual TLS under the benchmark realm: a member's link credential dialling a router's
//! certificate, the same frame limit), between two threads of this process on loopback,
//! each with its own single-threaded runtime as a session's link thread and a router have.
//! The sender hands it frames as a session's link thread does (all it has queued in one
//! write, `send_batch`); the receiver takes them as a router does (`recv_batch`) and counts
//! them.
//!
//! Each frame is the payload bytes of as many samples as one frame of the router path
//! carried (measured in that run: its samples over its link frames), without tether's
//! headers and tags. So it is what a direct session-to-session QUIC link could carry at
//! best (sessions link only to routers: such a link does not exist to measure), and the
//! router path over it is a lower bound of the router path over that link.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use tether_crypto::Role;
use tether_transport::quic::{
    LinkConfig, LinkError, LinkIdentity, PeerPolicy, QuicEndpoint, Revocations,
};

use crate::harness::SecureSide;

/// Frames received and the seconds from the first to the last.
pub(super) struct LinkCount {
    pub(super) frames: u64,
    pub(super) secs: f64,
}

/// Frames handed to QUIC in one write at most (the session's link thread's `BATCH_BYTES`).
const BATCH_BYTES: usize = 256 << 10;

/// Sends frames of `frame_len` bytes for `duration` seconds over one QUIC link from a
/// member to a router of `side`'s realm (router credential `router`), and counts what
/// arrives.
pub(super) fn measure(
    side: &SecureSide,
    router: &str,
    frame_len: usize,
    duration: f64,
) -> anyhow::Result<LinkCount> {
    let dir = side.realm_dir().context("the realm's directory")?;
    let rk = tether::keys::RouterKeys::load(&dir.join(format!("{router}.key")))
        .context("the router's keys")?;
    let member = tether::keys::KeyBundle::load(&side.keys().mine).context("the member's keys")?;
    let link_cred = member
        .link_credential
        .as_ref()
        .context("the member's bundle has no link credential")?;
    let server_id = LinkIdentity::new(&rk.identity, &rk.credential)?;
    let client_id = LinkIdentity::new(&member.identity, link_cred)?;
    let ca = rk.ca_public;
    let mut lc = LinkConfig::default();
    // As a router and a session set it: engine datagrams are at most 64 KiB.
    lc.max_frame((64 << 10) + 128);
    let frame_len = frame_len.clamp(1, 64 << 10);
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let server_lc = lc.clone();
    let receiver = std::thread::spawn(move || -> anyhow::Result<LinkCount> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let policy = PeerPolicy::new(ca, Revocations::new(), &[Role::Member]);
            let ep = QuicEndpoint::server(
                "127.0.0.1:0".parse().expect("a literal address"),
                &server_id,
                policy,
                &server_lc,
            )?;
            addr_tx.send(ep.local_addr()?)?;
            let incoming = tokio::time::timeout(Duration::from_secs(10), ep.accept())
                .await
                .context("no link came")?
                .context("the endpoint closed")?;
            let link = incoming.establish().await?;
            let (_send, mut recv) = link.split();
            let mut got = Vec::new();
            let (mut frames, mut first, mut last) = (0u64, None, Instant::now());
            loop {
                match recv.recv_batch(&mut got, 64).await {
                    Ok(()) => {
                        let now = Instant::now();
                        first.get_or_insert(now);
                        last = now;
                        frames += got.len() as u64;
                        got.clear();
                    }
                    Err(LinkError::Finished) => break,
                    Err(e) => bail!("the receiving end: {e}"),
                }
            }
            let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
            ep.close(0, "done");
            Ok(LinkCount { frames, secs })
        })
    });
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(10))
        .context("the receiving end did not start")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let policy = PeerPolicy::new(ca, Revocations::new(), &[Role::Router]);
        let ep = QuicEndpoint::client(
            "127.0.0.1:0".parse().expect("a literal address"),
            &client_id,
            policy,
            &lc,
        )?;
        let link = ep.connect(addr, "127.0.0.1").await?;
        let (mut send, _recv) = link.split();
        let payload = Bytes::from(vec![0x5au8; frame_len]);
        let per_write = (BATCH_BYTES / frame_len).clamp(1, 256);
        let mut batch = Vec::with_capacity(per_write);
        let end = Instant::now() + Duration::from_secs_f64(duration);
        while Instant::now() < end {
            for _ in 0..per_write {
                batch.push((payload.clone(), Bytes::new(), Bytes::new()));
            }
            send.send_batch(&mut batch)
                .await
                .map_err(|e| anyhow::anyhow!("the sending end: {e}"))?;
        }
        send.finish()?;
        // The receiver reads to the end of the stream; the endpoint waits for it.
        let r = tokio::task::spawn_blocking(move || receiver.join()).await;
        ep.close(0, "done");
        match r {
            Ok(Ok(count)) => count,
            _ => bail!("the receiving end failed"),
        }
    })
}
