//! `tether bench throughput`: samples per second from one process to another, best effort
//! and reliable keep-all, each unbatched and batched, beside raw UDP.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use serde_json::json;
use tether::{Config, Qos, Session};

use super::{THR, receive_modes};
use crate::command::ModeArg;
use crate::harness::cpu::{cpus, pin};
use crate::harness::{Peer, bench_cfg, machine, secs, wait_matched};

/// What one measurement counted: sent, seconds sending, received, seconds receiving.
type Counts = (u64, f64, u64, f64);

/// One row: receive mode (busy-poll or not), QoS, size, and its [`Counts`].
type Row = (bool, &'static str, usize, u64, f64, u64, f64);

/// The sink's answer to `report`: its count and the seconds from its first to its last.
fn sink_report(peer: &mut Peer) -> anyhow::Result<(u64, f64)> {
    peer.send("report")?;
    let v: serde_json::Value = serde_json::from_str(&peer.line()?).context("sink report")?;
    Ok((
        v["count"].as_u64().unwrap_or(0),
        v["secs"].as_f64().unwrap_or(0.0).max(1e-9),
    ))
}

/// The kernel's ceiling: a raw UDP sendto loop to a counting process, same sizes.
fn raw_udp_throughput(
    cfg: &Config,
    duration: f64,
    size: usize,
    busy: bool,
) -> anyhow::Result<Counts> {
    let bc = bench_cfg(cfg.clone())?;
    let mut peer = Peer::spawn(&bc, "udp-sink", busy, busy.then_some(1))?;
    let port: u16 = peer.line()?.parse().context("udp-sink port")?;
    // Unconnected, like tether's socket.
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    let dest: SocketAddr = ([127, 0, 0, 1], port).into();
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
    let secs = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    let (count, rsecs) = sink_report(&mut peer)?;
    Ok((sent, secs, count, rsecs))
}

/// tether from this process to a sink peer, for `duration` seconds.
fn tether_throughput(
    cfg: &Config,
    duration: f64,
    size: usize,
    busy: bool,
    (reliable, batched): (bool, bool),
) -> anyhow::Result<Counts> {
    let bc = bench_cfg(cfg.clone())?;
    let mut peer = Peer::spawn(
        &bc,
        if reliable { "sink-reliable" } else { "sink" },
        busy,
        busy.then_some(1),
    )?;
    let session = Session::open(bc.base.clone())?;
    let mut qos = if reliable {
        Qos::default().keep_all()
    } else {
        Qos::default().best_effort().keep_last(1)
    };
    if batched {
        qos = qos.batching(tether::Batching::default());
    }
    let p = session.publisher(THR, qos)?;
    wait_matched(|| p.matched() >= 1)?;
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
    let (count, secs) = sink_report(&mut peer)?;
    Ok((sent, send_secs, count, secs))
}

/// `tether bench throughput`.
pub(crate) fn throughput(
    cfg: Config,
    duration: f64,
    sizes: &[usize],
    mode: ModeArg,
    json: bool,
) -> anyhow::Result<()> {
    let machine = machine();
    let two = cpus() >= 2;
    let (blocking, busy_poll) = receive_modes(mode);
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
        for &size in sizes {
            let (sent, ss, count, secs) = raw_udp_throughput(&cfg, duration, size, busy)?;
            rows.push((busy, "raw UDP", size, sent, ss, count, secs));
        }
        for shape in [(false, false), (true, false), (false, true), (true, true)] {
            for &size in sizes {
                let (sent, ss, count, secs) = tether_throughput(&cfg, duration, size, busy, shape)?;
                let qos = match shape {
                    (false, false) => "best_effort",
                    (true, false) => "reliable keep_all",
                    (false, true) => "best_effort batched",
                    (true, true) => "reliable batched",
                };
                rows.push((busy, qos, size, sent, ss, count, secs));
            }
        }
    }
    pin(None);
    if json {
        print_json(&machine, &rows)
    } else {
        print_table(&machine, duration, &rows);
        Ok(())
    }
}

fn print_json(machine: &str, rows: &[Row]) -> anyhow::Result<()> {
    let v: Vec<_> = rows
        .iter()
        .map(|(busy, qos, size, sent, ss, count, secs)| {
            json!({
                "receiver": if *busy { "busy-poll" } else { "blocking" },
                "qos": qos,
                "size": size, "sent": sent, "sent_per_s": *sent as f64 / ss,
                "received": count, "received_per_s": *count as f64 / secs,
                "delivered_fraction": *count as f64 / *sent as f64,
            })
        })
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(
            &json!({"bench": "throughput", "machine": machine, "results": v})
        )?
    );
    Ok(())
}

fn print_table(machine: &str, duration: f64, rows: &[Row]) {
    println!(
        "tether bench throughput — two processes on loopback, {duration} s per row, {machine}"
    );
    println!(
        "{:<10} {:<18} {:>6} {:>12} {:>12} {:>10}",
        "receiver", "qos", "size", "sent/s", "received/s", "delivered"
    );
    for (busy, qos, size, sent, ss, count, secs) in rows {
        println!(
            "{:<10} {:<18} {:>6} {:>12.0} {:>12.0} {:>9.1}%",
            if *busy { "busy-poll" } else { "blocking" },
            qos,
            size,
            *sent as f64 / ss,
            *count as f64 / secs,
            100.0 * *count as f64 / *sent as f64
        );
    }
}
