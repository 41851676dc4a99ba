//! `tether bench throughput`: samples per second from one process to another, best effort
//! and reliable keep-all, each unbatched and batched, beside raw UDP, and in a secure realm
//! beside plain when asked (`--secure`, or `--keys`); on loopback, or between two hosts
//! (network namespaces joined by a veth pair).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use serde_json::json;
use tether::{Config, Qos, Session};

use super::{THR, receive_modes};
use crate::command::{HostsArg, ModeArg, ShapeArg};
use crate::harness::cpu::{cpus, pin};
use crate::harness::lan::{Lan, RECEIVER_IP, SENDER_IP, in_namespace, sender_and_sink};
use crate::harness::realm::plain_config;
use crate::harness::{
    BenchCfg, Peer, SecureSide, bench_cfg, machine, secs, secure_bench_cfg, wait_matched,
};

/// The settings of one `tether bench throughput`.
pub(crate) struct ThroughputArgs {
    /// Seconds per row.
    pub(crate) duration: f64,
    /// Sample sizes.
    pub(crate) sizes: Vec<usize>,
    /// Receive modes.
    pub(crate) mode: ModeArg,
    /// The rows.
    pub(crate) shapes: Vec<ShapeArg>,
    /// Loopback or two hosts.
    pub(crate) hosts: HostsArg,
    /// Also in a throwaway secure realm.
    pub(crate) secure: bool,
    /// Measurements per tether row and side.
    pub(crate) reps: usize,
    /// Print JSON.
    pub(crate) json: bool,
}

/// Where the sender and the sink run. On two hosts with two CPUs or more, the sender
/// runs on CPU 0 and the sink on CPU 1 (counted before pinning: a pinned thread sees one).
#[derive(Clone, Copy)]
enum Place<'a> {
    Loopback,
    Veth { lan: &'a Lan, two_cpus: bool },
}

impl Place<'_> {
    /// Runs `f` where the sender lives.
    fn sender<R: Send>(self, f: impl FnOnce() -> anyhow::Result<R> + Send) -> anyhow::Result<R> {
        match self {
            Place::Loopback => f(),
            Place::Veth { lan, two_cpus } => in_namespace(lan.senders(), || {
                // The sink and the receive side's softirq work run on CPU 1 (see `Lan`):
                // the sender stands for another machine's CPU.
                if two_cpus {
                    pin(Some(0));
                }
                f()
            }),
        }
    }
}

/// What one measurement counted: sent, seconds sending, received, seconds receiving.
pub(crate) type Counts = (u64, f64, u64, f64);

/// Adds up the counts of several measurements of one row.
pub(crate) fn add(a: Counts, b: Counts) -> Counts {
    (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3)
}

/// Samples received per second.
pub(crate) fn received_rate(c: &Counts) -> f64 {
    c.2 as f64 / c.3
}

/// One row: receive mode (busy-poll or not), QoS, size, its [`Counts`], and those in a
/// secure realm (if measured).
type Row = (bool, &'static str, usize, Counts, Option<Counts>);

/// The sink's answer to `report`: its count and the seconds from its first to its last.
fn sink_report(peer: &mut Peer) -> anyhow::Result<(u64, f64)> {
    peer.send("report")?;
    let v: serde_json::Value = serde_json::from_str(&peer.line()?).context("sink report")?;
    Ok((
        v["count"].as_u64().unwrap_or(0),
        v["secs"].as_f64().unwrap_or(0.0).max(1e-9),
    ))
}

/// The sender's session and the sink peer of a tether row: on loopback, both in a private
/// domain and registry; on two hosts, the sink in the receivers' namespace with the
/// sender's address as its static peer; plain (`cfg` has security off), or both members of
/// `side`'s realm. The directory lives as long as the returned [`BenchCfg`].
fn open_pair(
    place: Place<'_>,
    cfg: &Config,
    side: Option<&SecureSide>,
    role: &str,
    busy: bool,
) -> anyhow::Result<(Session, Peer, BenchCfg)> {
    let bc = match side {
        None => bench_cfg(cfg.clone())?,
        Some(s) => secure_bench_cfg(cfg, s)?,
    };
    match place {
        Place::Loopback => {
            let peer = Peer::spawn(&bc, role, busy, busy.then_some(1))?;
            Ok((Session::open(bc.base.clone())?, peer, bc))
        }
        Place::Veth { lan, two_cpus } => {
            let (session, peer) = sender_and_sink(lan, &bc, role, busy, two_cpus)?;
            Ok((session, peer, bc))
        }
    }
}

/// The kernel's ceiling: a raw UDP sendto loop to a counting process, same sizes.
fn raw_udp_throughput(
    place: Place<'_>,
    duration: f64,
    size: usize,
    busy: bool,
) -> anyhow::Result<Counts> {
    let (ip, mut peer): (IpAddr, Peer) = match place {
        Place::Loopback => {
            let bc = bench_cfg(Config::default())?;
            (
                [127, 0, 0, 1].into(),
                Peer::spawn(&bc, "udp-sink", busy, busy.then_some(1))?,
            )
        }
        Place::Veth { lan, two_cpus } => {
            let mut args = vec![
                "udp-sink".to_string(),
                "--ip".into(),
                RECEIVER_IP.to_string(),
            ];
            if busy {
                args.push("--busy-poll".into());
            }
            if two_cpus {
                args.extend(["--cpu".into(), "1".into()]);
            }
            let p = Peer::spawn_with(Some(lan.receivers()), crate::PEER_SUBCOMMAND, &args)?;
            (RECEIVER_IP.into(), p)
        }
    };
    let port: u16 = peer.line()?.parse().context("udp-sink port")?;
    let (sent, secs) = place.sender(|| raw_send(ip, port, duration, size))?;
    std::thread::sleep(Duration::from_millis(300));
    let (count, rsecs) = sink_report(&mut peer)?;
    Ok((sent, secs, count, rsecs))
}

/// A `send_to` loop for `duration` seconds: datagrams sent, seconds.
fn raw_send(ip: IpAddr, port: u16, duration: f64, size: usize) -> anyhow::Result<(u64, f64)> {
    // Unconnected, like tether's socket.
    let local: IpAddr = if ip.is_loopback() {
        ip
    } else {
        SENDER_IP.into()
    };
    let sock = UdpSocket::bind((local, 0))?;
    let dest = SocketAddr::new(ip, port);
    let buf = vec![0x5au8; size];
    let t0 = Instant::now();
    let d = secs("--duration", duration)?;
    let mut sent = 0u64;
    while t0.elapsed() < d {
        for _ in 0..64 {
            if sock.send_to(&buf, dest).is_ok() {
                sent += 1;
            }
        }
    }
    Ok((sent, t0.elapsed().as_secs_f64()))
}

/// tether from this process to a sink peer, for `duration` seconds; plain, or in `side`'s
/// realm.
fn tether_throughput(
    place: Place<'_>,
    cfg: &Config,
    side: Option<&SecureSide>,
    duration: f64,
    size: usize,
    busy: bool,
    shape: (bool, bool),
) -> anyhow::Result<Counts> {
    place.sender(|| {
        let role = if shape.0 { "sink-reliable" } else { "sink" };
        let (session, mut peer, _bc) = open_pair(place, cfg, side, role, busy)?;
        put_loop(&session, side.is_some(), &mut peer, duration, size, shape)
    })
}

/// Puts for `duration` seconds, then asks the sink what arrived.
pub(crate) fn put_loop(
    session: &Session,
    secure: bool,
    peer: &mut Peer,
    duration: f64,
    size: usize,
    (reliable, batched): (bool, bool),
) -> anyhow::Result<Counts> {
    let mut qos = if reliable {
        Qos::default().keep_all()
    } else {
        Qos::default().best_effort().keep_last(1)
    };
    if batched {
        qos = qos.batching(tether::Batching::default());
    }
    let p = session.publisher(THR, qos)?;
    wait_matched(|| p.matched() >= 1).with_context(|| {
        if secure {
            "in the secure realm (do its credentials grant /bench/thr?)"
        } else {
            "plain"
        }
    })?;
    let payload = Bytes::from(vec![0x5au8; size]);
    let t0 = Instant::now();
    let d = secs("--duration", duration)?;
    let mut sent = 0u64;
    while t0.elapsed() < d {
        for _ in 0..64 {
            p.put(payload.clone())?;
        }
        sent += 64;
    }
    p.flush();
    let send_secs = t0.elapsed().as_secs_f64();
    if reliable {
        p.wait_for_acknowledgments(Duration::from_secs(30));
    } else {
        std::thread::sleep(Duration::from_millis(300));
    }
    let (count, secs) = sink_report(peer)?;
    Ok((sent, send_secs, count, secs))
}

/// `tether bench throughput`: with `a.secure` or keys in `cfg` (`--keys`), every tether
/// row is measured plain and in a secure realm, in turn.
pub(crate) fn throughput(cfg: Config, a: ThroughputArgs) -> anyhow::Result<()> {
    let machine = machine();
    let two = cpus() >= 2;
    let side = SecureSide::choose(&cfg, a.secure, &["/bench/**"])?;
    let plain = plain_config(&cfg);
    let lan = match a.hosts {
        HostsArg::Loopback => None,
        HostsArg::Veth => Some(Lan::create()?),
    };
    let place = lan
        .as_ref()
        .map_or(Place::Loopback, |lan| Place::Veth { lan, two_cpus: two });
    let (blocking, busy_poll) = receive_modes(a.mode);
    let mut modes = Vec::new();
    if blocking {
        modes.push(false);
    }
    if busy_poll && two {
        modes.push(true);
    }
    let mut rows: Vec<Row> = Vec::new();
    for &busy in &modes {
        // A spinning receiver must not share the sender's CPU.
        pin(busy.then_some(0));
        if a.shapes.contains(&ShapeArg::Raw) {
            for &size in &a.sizes {
                let c = raw_udp_throughput(place, a.duration, size, busy)?;
                rows.push((busy, "raw UDP", size, c, None));
            }
        }
        for shape in &a.shapes {
            let (qos, flags) = match shape {
                ShapeArg::Raw => continue,
                ShapeArg::BestEffort => ("best_effort", (false, false)),
                ShapeArg::Reliable => ("reliable keep_all", (true, false)),
                ShapeArg::BestEffortBatched => ("best_effort batched", (false, true)),
                ShapeArg::ReliableBatched => ("reliable batched", (true, true)),
            };
            for &size in &a.sizes {
                let mut ours = (0, 0.0, 0, 0.0);
                let mut sealed = (0, 0.0, 0, 0.0);
                for r in 0..a.reps {
                    let measure = |s: Option<&SecureSide>| {
                        tether_throughput(place, &plain, s, a.duration, size, busy, flags)
                    };
                    // Plain and secure take turns leading, from row to row and rep to rep.
                    match side.as_ref() {
                        Some(s) if (rows.len() + r) % 2 == 1 => {
                            sealed = add(sealed, measure(Some(s))?);
                            ours = add(ours, measure(None)?);
                        }
                        Some(s) => {
                            ours = add(ours, measure(None)?);
                            sealed = add(sealed, measure(Some(s))?);
                        }
                        None => ours = add(ours, measure(None)?),
                    }
                }
                rows.push((busy, qos, size, ours, side.is_some().then_some(sealed)));
            }
        }
    }
    pin(None);
    let hosts = match a.hosts {
        HostsArg::Loopback => "two processes on loopback",
        HostsArg::Veth => "two hosts (network namespaces, veth, MTU 1500)",
    };
    let report = Report {
        machine: &machine,
        hosts,
        max_datagram: cfg.transport.max_datagram,
        duration: a.duration,
        reps: a.reps,
        realm: side.as_ref().map(SecureSide::describe),
    };
    if a.json {
        report.json(&rows)
    } else {
        report.table(&rows);
        Ok(())
    }
}

/// What a throughput report says of its run.
struct Report<'a> {
    machine: &'a str,
    hosts: &'a str,
    max_datagram: usize,
    duration: f64,
    reps: usize,
    realm: Option<String>,
}

impl Report<'_> {
    fn json(&self, rows: &[Row]) -> anyhow::Result<()> {
        let v: Vec<_> = rows
            .iter()
            .map(|(busy, qos, size, c, sec)| {
                let (sent, ss, count, secs) = *c;
                let mut row = json!({
                    "receiver": if *busy { "busy-poll" } else { "blocking" },
                    "qos": qos,
                    "size": size, "sent": sent, "sent_per_s": sent as f64 / ss,
                    "received": count, "received_per_s": count as f64 / secs,
                    "delivered_fraction": count as f64 / sent as f64,
                });
                if let Some(s) = sec {
                    row["secure_sent_per_s"] = json!(s.0 as f64 / s.1);
                    row["secure_received_per_s"] = json!(received_rate(s));
                    row["secure_delivered_fraction"] = json!(s.2 as f64 / s.0 as f64);
                    row["secure_over_plain"] = json!(received_rate(s) / received_rate(c));
                }
                row
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "bench": "throughput", "machine": self.machine, "hosts": self.hosts,
                "max_datagram": self.max_datagram, "duration_s": self.duration,
                "reps": self.reps, "secure_realm": self.realm, "results": v
            }))?
        );
        Ok(())
    }

    fn table(&self, rows: &[Row]) {
        let Report {
            machine,
            hosts,
            max_datagram,
            duration,
            reps,
            ..
        } = self;
        println!(
            "tether bench throughput — {hosts}, max_datagram {max_datagram}, {duration} s per \
             measurement, {reps} per row, {machine}"
        );
        if let Some(r) = &self.realm {
            println!(
                "secure: {r}, in turn with plain; \"sec/plain\" is the secure received/s over \
                 the plain"
            );
        }
        print!(
            "{:<10} {:<19} {:>6} {:>12} {:>12} {:>10}",
            "receiver", "qos", "size", "sent/s", "received/s", "delivered"
        );
        if self.realm.is_some() {
            print!(
                " {:>12} {:>10} {:>9}",
                "secure rx/s", "delivered", "sec/plain"
            );
        }
        println!();
        for (busy, qos, size, c, sec) in rows {
            let (sent, ss, count, _) = *c;
            print!(
                "{:<10} {:<19} {:>6} {:>12.0} {:>12.0} {:>9.1}%",
                if *busy { "busy-poll" } else { "blocking" },
                qos,
                size,
                sent as f64 / ss,
                received_rate(c),
                100.0 * count as f64 / sent as f64
            );
            if let Some(s) = sec {
                print!(
                    " {:>12.0} {:>9.1}% {:>9.2}",
                    received_rate(s),
                    100.0 * s.2 as f64 / s.0 as f64,
                    received_rate(s) / received_rate(c)
                );
            }
            println!();
        }
    }
}
