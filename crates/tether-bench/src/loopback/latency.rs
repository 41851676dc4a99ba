//! `tether bench latency`: one-way latency (ping-pong RTT / 2) for each sample size,
//! tether beside raw UDP, and in a secure realm beside plain when asked (`--secure`, or
//! `--keys`), in alternating blocks.

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use serde_json::json;
use tether::{Config, Publisher, Qos, Session};

use super::{PING, PONG, receive_modes};
use crate::command::ModeArg;
use crate::harness::cpu::{cpus, pin};
use crate::harness::stats::quantile;
use crate::harness::{
    BenchCfg, Peer, SecureSide, bench_cfg, machine, secure_bench_cfg, wait_matched,
};

/// Round trips per interleaved block; raw UDP and tether alternate block by block so both
/// see the same machine conditions (the VM's noise moves whole runs by ±30 %).
const BLOCK: usize = 250;
/// Round trips dropped at the start of each block (mode switches, cold caches).
const BLOCK_WARMUP: usize = 25;

#[derive(Debug, Clone, Copy)]
struct Pct {
    p50: f64,
    p99: f64,
}

/// One-way latency percentiles in µs from round-trip times in ns.
fn one_way(rtts: &mut [u64]) -> Pct {
    rtts.sort_unstable();
    let at = |q: f64| quantile(rtts, q).unwrap_or(0) as f64 / 2.0 / 1000.0;
    Pct {
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// Where the two processes of a latency measurement run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Each process on its own CPU: every hop wakes the other CPU.
    CrossCore,
    /// Both processes on one CPU: every hop is a context switch.
    SameCore,
}

impl Placement {
    fn cpus(self) -> (usize, usize) {
        match self {
            Placement::CrossCore => (0, 1),
            Placement::SameCore => (0, 0),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Placement::CrossCore => "cross-core",
            Placement::SameCore => "same-core",
        }
    }
}

/// One row: receive mode (busy-poll or not), placement, size, tether's and raw UDP's
/// one-way latency, and tether's in a secure realm (if measured).
type Row = (bool, Placement, usize, Pct, Pct, Option<Pct>);

fn raw_block(
    sock: &UdpSocket,
    peer: SocketAddr,
    size: usize,
    n: usize,
    busy: bool,
) -> anyhow::Result<Vec<u64>> {
    sock.set_nonblocking(busy)?;
    if !busy {
        sock.set_read_timeout(Some(Duration::from_secs(2)))?;
    }
    let buf = vec![0xabu8; size];
    let mut rx = vec![0u8; 65_536];
    let mut rtts = Vec::with_capacity(n);
    for i in 0..BLOCK_WARMUP + n {
        let t0 = Instant::now();
        sock.send_to(&buf, peer)?;
        loop {
            match sock.recv_from(&mut rx) {
                Ok(_) => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    std::hint::spin_loop();
                    if t0.elapsed() > Duration::from_secs(2) {
                        bail!("raw UDP echo stopped answering");
                    }
                }
                Err(e) => return Err(e).context("raw UDP ping-pong"),
            }
        }
        if i >= BLOCK_WARMUP {
            rtts.push(t0.elapsed().as_nanos() as u64);
        }
    }
    Ok(rtts)
}

struct PingState {
    remaining: usize,
    t0: Instant,
    rtts: Vec<u64>,
    payload: Bytes,
    /// The last echo of a run.
    last: Bytes,
    done: bool,
}

type Ping = Arc<(Mutex<PingState>, Condvar)>;

/// One side of tether's ping-pong: this process's session (publishing pings, the next one
/// from the thread that received the pong) and the `pong` peer, in `bc`'s domain (and
/// realm, if secure; through routers, if `bc` has them: `bench wan`). Fields drop in order: the subscriber first, while `publisher` still
/// holds the publisher its callback shares (the last handle of a publisher must not go
/// with a subscriber's callback: the subscriber drops it under the session's lock, which
/// the publisher's drop takes).
pub(crate) struct PingPong {
    _sub: tether::Subscriber,
    publisher: Arc<Publisher>,
    session: Session,
    pong: Peer,
    st: Ping,
}

impl PingPong {
    /// Opens both sides, the peer pinned to CPU `theirs` if given, and waits until they
    /// match.
    pub(crate) fn open(bc: &BenchCfg, theirs: Option<usize>) -> anyhow::Result<PingPong> {
        let pong = Peer::spawn(bc, "pong", false, theirs)?;
        PingPong::with_pong(bc, bc.base.clone(), pong)
    }

    /// This process's side, a session of `mine`, with `pong` already started (in another
    /// namespace, say: `bench wan --delay-ms`); waits until they match.
    pub(crate) fn with_pong(
        bc: &BenchCfg,
        mine: tether::Config,
        pong: Peer,
    ) -> anyhow::Result<PingPong> {
        let session = Session::open(mine)?;
        let publisher = Arc::new(session.publisher(PING, Qos::default())?);
        let st: Ping = Arc::new((
            Mutex::new(PingState {
                remaining: 0,
                t0: Instant::now(),
                rtts: Vec::new(),
                payload: Bytes::new(),
                last: Bytes::new(),
                done: true,
            }),
            Condvar::new(),
        ));
        let (st2, p2) = (st.clone(), publisher.clone());
        // The next ping leaves from the thread that received the pong: no hand-off.
        let sub = session.subscriber_with_callback(PONG, Qos::default(), move |s| {
            let now = Instant::now();
            let (m, cv) = &*st2;
            let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
            if g.done {
                return;
            }
            let rtt = (now - g.t0).as_nanos() as u64;
            g.rtts.push(rtt);
            if g.remaining == 0 {
                g.last = s.payload;
                g.done = true;
                cv.notify_all();
                return;
            }
            g.remaining -= 1;
            g.t0 = Instant::now();
            let p = g.payload.clone();
            drop(g);
            let _ = p2.put(p);
        })?;
        let secure = bc.base.security.enabled();
        wait_matched(|| publisher.matched() >= 1 && sub.matched() >= 1).with_context(|| {
            if secure {
                "in the secure realm (do its credentials grant /bench/ping and /bench/pong?)"
            } else {
                "plain"
            }
        })?;
        Ok(PingPong {
            _sub: sub,
            publisher,
            session,
            pong,
            st,
        })
    }

    /// One block of `n` round trips (after [`BLOCK_WARMUP`]); both sides busy-poll during
    /// it if `busy`.
    fn block(&mut self, size: usize, n: usize, busy: bool) -> anyhow::Result<Vec<u64>> {
        if busy {
            self.pong.send("busy")?;
            self.pong.line()?;
            self.session.set_busy_poll(true);
        }
        let rtts = self.run(size, n);
        if busy {
            self.session.set_busy_poll(false);
            self.pong.send("block")?;
            self.pong.line()?;
        }
        rtts
    }

    /// `n` round trips of `size` bytes after [`BLOCK_WARMUP`] unmeasured ones: the times in
    /// ns.
    pub(crate) fn run(&self, size: usize, n: usize) -> anyhow::Result<Vec<u64>> {
        let payload = Bytes::from(vec![0xcdu8; size]);
        Ok(self.round_trips(payload, BLOCK_WARMUP, n)?.0)
    }

    /// `n` round trips of `payload` after `warmup` unmeasured ones: the times in ns, and the
    /// last echo (to check it against `payload`).
    pub(crate) fn round_trips(
        &self,
        payload: Bytes,
        warmup: usize,
        n: usize,
    ) -> anyhow::Result<(Vec<u64>, Bytes)> {
        let st = &self.st;
        let size = payload.len();
        let n = n.max(1);
        {
            let mut g = st.0.lock().unwrap_or_else(|p| p.into_inner());
            g.remaining = warmup + n - 1;
            g.rtts = Vec::with_capacity(warmup + n);
            g.last = Bytes::new();
            g.payload = payload.clone();
            g.done = false;
            g.t0 = Instant::now();
        }
        self.publisher.put(payload)?;
        let (m, cv) = &**st;
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        let (mut g, to) = cv
            .wait_timeout_while(g, Duration::from_secs(60), |g| !g.done)
            .unwrap_or_else(|p| p.into_inner());
        if to.timed_out() {
            g.done = true;
            bail!("tether ping-pong of {size} B stalled");
        }
        let skip = warmup.min(g.rtts.len());
        Ok((g.rtts.split_off(skip), std::mem::take(&mut g.last)))
    }
}

/// `tether bench latency`: `secure` asks for a throwaway realm; with keys in `cfg`
/// (`--keys`) both processes use them. Either way plain and secure are measured in turn.
pub(crate) fn latency(
    cfg: Config,
    samples: usize,
    sizes: &[usize],
    mode: ModeArg,
    secure: bool,
    json: bool,
) -> anyhow::Result<()> {
    let machine = machine();
    let two = cpus() >= 2;
    let side = SecureSide::choose(&cfg, secure, &["/bench/**"])?;
    let (blocking, busy_poll) = receive_modes(mode);
    let mut runs: Vec<(bool, Placement)> = Vec::new();
    if blocking {
        if two {
            runs.push((false, Placement::CrossCore));
        }
        runs.push((false, Placement::SameCore));
    }
    // Busy-polling two processes on one CPU only measures the scheduler's time slice.
    if busy_poll && two {
        runs.push((true, Placement::CrossCore));
    }
    let mut rows = Vec::new();
    for &(busy, placement) in &runs {
        rows.extend(measure(
            &cfg,
            side.as_ref(),
            busy,
            placement,
            samples,
            sizes,
        )?);
    }
    pin(None);
    let realm = side.as_ref().map(SecureSide::describe);
    if json {
        print_json(&machine, samples, realm.as_deref(), &rows)
    } else {
        print_table(&machine, samples, realm.as_deref(), &rows);
        Ok(())
    }
}

/// Every size in one receive mode and placement: a raw UDP echo, a tether pong peer and,
/// with `side`, a tether pong peer in a secure realm, measured block by block in turn.
fn measure(
    cfg: &Config,
    side: Option<&SecureSide>,
    busy: bool,
    placement: Placement,
    samples: usize,
    sizes: &[usize],
) -> anyhow::Result<Vec<Row>> {
    let blocks = samples.div_ceil(BLOCK).max(1);
    let plain_cfg = crate::harness::realm::plain_config(cfg);
    let bc = bench_cfg(plain_cfg.clone())?;
    let (mine, theirs) = placement.cpus();
    pin(Some(mine));
    let mut udp_peer = Peer::spawn(&bc, "udp-echo", false, Some(theirs))?;
    let port: u16 = udp_peer.line()?.parse().context("udp-echo port")?;
    // Unconnected, like tether's socket (one socket talks to many peers): a connected
    // socket skips the route lookup per datagram, which no middleware socket can.
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    let udp_addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut plain = PingPong::open(&bc, Some(theirs))?;
    let sbc = side.map(|s| secure_bench_cfg(&plain_cfg, s)).transpose()?;
    let mut secure = sbc
        .as_ref()
        .map(|b| PingPong::open(b, Some(theirs)))
        .transpose()?;
    let mut rows = Vec::new();
    for &size in sizes {
        let (mut raw, mut ours, mut sealed) = (Vec::new(), Vec::new(), Vec::new());
        for b in 0..blocks {
            let n = BLOCK.min(samples - b * BLOCK);
            // Only the side being measured spins; two spinners on one CPU would
            // measure the scheduler.
            if busy {
                udp_peer.send("busy")?;
                udp_peer.line()?;
            }
            raw.extend(raw_block(&sock, udp_addr, size, n, busy)?);
            if busy {
                udp_peer.send("block")?;
                udp_peer.line()?;
            }
            // Plain and secure take turns leading, so neither always follows raw UDP.
            match secure.as_mut() {
                Some(sec) if b % 2 == 1 => {
                    sealed.extend(sec.block(size, n, busy)?);
                    ours.extend(plain.block(size, n, busy)?);
                }
                Some(sec) => {
                    ours.extend(plain.block(size, n, busy)?);
                    sealed.extend(sec.block(size, n, busy)?);
                }
                None => ours.extend(plain.block(size, n, busy)?),
            }
        }
        let sealed = secure.is_some().then(|| one_way(&mut sealed));
        rows.push((
            busy,
            placement,
            size,
            one_way(&mut ours),
            one_way(&mut raw),
            sealed,
        ));
    }
    Ok(rows)
}

fn print_json(
    machine: &str,
    samples: usize,
    realm: Option<&str>,
    rows: &[Row],
) -> anyhow::Result<()> {
    let v: Vec<_> = rows
        .iter()
        .map(|(busy, pl, size, o, r, sec)| {
            let mut row = json!({
                "mode": if *busy { "busy-poll" } else { "blocking" },
                "placement": pl.name(),
                "size": size,
                "tether_p50_us": o.p50, "tether_p99_us": o.p99,
                "udp_p50_us": r.p50, "udp_p99_us": r.p99,
                "ratio_p50": o.p50 / r.p50,
            });
            if let Some(s) = sec {
                row["secure_p50_us"] = json!(s.p50);
                row["secure_p99_us"] = json!(s.p99);
                row["secure_over_plain_p50"] = json!(s.p50 / o.p50);
                row["secure_over_plain_p99"] = json!(s.p99 / o.p99);
            }
            row
        })
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "bench": "latency", "machine": machine, "samples": samples,
            "secure_realm": realm, "results": v
        }))?
    );
    Ok(())
}

fn print_table(machine: &str, samples: usize, realm: Option<&str>, rows: &[Row]) {
    let others = if realm.is_some() {
        "raw UDP and tether in a secure realm"
    } else {
        "raw UDP"
    };
    println!(
        "tether bench latency — one-way = RTT/2, {samples} round trips per row in blocks of {BLOCK} alternating with {others}, {machine}"
    );
    if let Some(r) = realm {
        println!("secure: {r}; \"sec ×plain\" is the secure p50 over the plain p50");
    }
    print!(
        "{:<10} {:<11} {:>7} {:>12} {:>12} {:>12} {:>12} {:>8}",
        "mode", "placement", "size", "tether p50", "tether p99", "UDP p50", "UDP p99", "p50 ×UDP"
    );
    if realm.is_some() {
        print!(
            " {:>12} {:>12} {:>10}",
            "secure p50", "secure p99", "sec ×plain"
        );
    }
    println!();
    for (busy, pl, size, o, r, sec) in rows {
        print!(
            "{:<10} {:<11} {:>7} {:>10.1}µs {:>10.1}µs {:>10.1}µs {:>10.1}µs {:>8.2}",
            if *busy { "busy-poll" } else { "blocking" },
            pl.name(),
            size,
            o.p50,
            o.p99,
            r.p50,
            r.p99,
            o.p50 / r.p50
        );
        if let Some(s) = sec {
            print!(
                " {:>10.1}µs {:>10.1}µs {:>10.2}",
                s.p50,
                s.p99,
                s.p50 / o.p50
            );
        }
        println!();
    }
}
