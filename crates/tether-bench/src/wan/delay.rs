//! `tether bench wan --delay-ms D`: round trips over a link that delays each packet D ms
//! each way, directly and through one router, in the same run (issue 19's bar: through
//! one router at most 1.1 × the direct RTT over the same delay). With D = 0 the same two
//! hosts and paths without any delay: what a router hop adds over a direct path between
//! two hosts.
//!
//! Two hosts (network namespaces joined by a veth, [`Lan`]), each holding every packet it
//! receives for D ms (NFQUEUE: this kernel has no netem), so the link between them has
//! 2·D of round trip. This process's session is on the first host (the robot); the pong
//! peer and the router on the second (an operator and the router in its cloud), so both
//! paths cross the delayed link once each way. Direct: the two sessions are each other's
//! static peers, discovery off. Through the router: both dial it, discovery off; the
//! robot's QUIC link crosses the delay, the operator's stays on its host.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, bail};
use tether::Config;

use super::{Rtt, rtt};
use crate::harness::lan::{Lan, RECEIVER_IP, SENDER_IP, in_namespace};
use crate::harness::routers::RouterProc;
use crate::harness::{Peer, SecureSide, secure_bench_cfg};
use crate::loopback::PingPong;
use crate::rib::{StartTimes, sessions_to_first};

/// Sessions opened through the router across the delayed link, timed to their first
/// sample (after one unmeasured).
const STARTS: usize = 10;

/// Round trips per block; the two paths take turns block by block.
const BLOCK: usize = 25;

/// The fixed ports of the direct path's sessions (each host is a fresh namespace).
const ROBOT_PORT: u16 = 17401;
const OPERATOR_PORT: u16 = 17402;

/// RTTs at one size over the delayed link: direct and through one router.
pub(super) struct DelayRow {
    pub(super) size: usize,
    pub(super) direct: Rtt,
    pub(super) routed: Rtt,
}

impl DelayRow {
    /// Through the router over direct, at the median.
    pub(super) fn ratio(&self) -> f64 {
        self.routed.p50 / self.direct.p50
    }

    /// What the router adds one way at the median, in µs: (router RTT − direct RTT) / 2.
    pub(super) fn added_one_way(&self) -> f64 {
        (self.routed.p50 - self.direct.p50) / 2.0
    }
}

/// Measures `samples` round trips per size over a link of `delay` each way (zero: no
/// delay added; root and iptables needed); then [`STARTS`] sessions on the robot's host,
/// each opened to the first sample of a ticker on the far host through the router: start
/// to first message across the link.
pub(super) fn measure(
    plain: &Config,
    side: &SecureSide,
    delay: Duration,
    sizes: &[usize],
    samples: usize,
) -> anyhow::Result<(Vec<DelayRow>, StartTimes)> {
    if !crate::harness::cpu::is_root() {
        bail!("--delay-ms needs root: it makes two network namespaces and delays their link");
    }
    let lan = Lan::create()?;
    // No delay: the two hosts' link as it is (a veth), no NFQUEUE hop either.
    let _delays = match delay.is_zero() {
        true => None,
        false => Some(lan.delay_both(delay)?),
    };
    let dir = side.realm_dir().context("the realm's directory")?;
    let operator_ip = IpAddr::V4(RECEIVER_IP);
    let direct_cfg = {
        let mut bc = secure_bench_cfg(plain, side)?;
        bc.base.discovery.set_range(tether::DiscoveryRange::Off);
        bc.base.transport.listen = Some(SocketAddr::new(SENDER_IP.into(), ROBOT_PORT));
        bc.base.discovery.peers = vec![SocketAddr::new(operator_ip, OPERATOR_PORT)];
        bc
    };
    let router = RouterProc::spawn_at(
        dir,
        "cloud",
        direct_cfg.domain(),
        &[],
        Some((lan.receivers(), operator_ip)),
    )?;
    let routed_cfg = {
        let r = [router.address()];
        let mut bc = secure_bench_cfg(plain, side)?.via_routers(&r, &r);
        bc.base.transport.listen = Some(SocketAddr::new(SENDER_IP.into(), 0));
        bc
    };
    let direct_pong = Peer::spawn_in(
        Some(lan.receivers()),
        &direct_cfg,
        "pong",
        false,
        None,
        &[
            "--listen".into(),
            SocketAddr::new(operator_ip, OPERATOR_PORT).to_string(),
            "--peer".into(),
            SocketAddr::new(SENDER_IP.into(), ROBOT_PORT).to_string(),
        ],
    )?;
    let routed_pong = Peer::spawn_in(Some(lan.receivers()), &routed_cfg, "pong", false, None, &[])?;
    // This process's sessions live on the robot's host: opened from a thread there, their
    // sockets (and their router link's) are that namespace's.
    let pairs = in_namespace(lan.senders(), || {
        let direct = PingPong::with_pong(&direct_cfg, direct_cfg.base.clone(), direct_pong)
            .context("the direct path")?;
        let routed = PingPong::with_pong(&routed_cfg, routed_cfg.base.clone(), routed_pong)
            .context("the path through the router")?;
        Ok([direct, routed])
    })?;
    let mut rows = Vec::new();
    for &size in sizes {
        let mut got: [Vec<u64>; 2] = Default::default();
        let blocks = samples.div_ceil(BLOCK).max(1);
        for b in 0..blocks {
            let n = BLOCK.min(samples.saturating_sub(b * BLOCK)).max(1);
            for k in 0..2 {
                // Each path leads in turn.
                let i = (b + k) % 2;
                got[i].extend(pairs[i].run(size, n).with_context(|| {
                    format!("{size} B {}", ["directly", "through the router"][i])
                })?);
            }
        }
        let [d, r] = got.each_mut().map(|v| rtt(v));
        rows.push(DelayRow {
            size,
            direct: d,
            routed: r,
        });
    }
    drop(pairs);
    let mut ticker = Peer::spawn_in(
        Some(lan.receivers()),
        &routed_cfg,
        "ticker",
        false,
        None,
        &[],
    )?;
    anyhow::ensure!(ticker.line()? == "ready", "the ticker did not start");
    let starts = in_namespace(lan.senders(), || {
        sessions_to_first(&routed_cfg.base, STARTS)
    })
    .context("start to first message through the router")?;
    drop(ticker);
    drop(router);
    Ok((rows, starts))
}
