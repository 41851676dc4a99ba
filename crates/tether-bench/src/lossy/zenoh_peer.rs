//! Zenoh beside tether in `tether bench lossy` (cargo feature `zenoh`): the same two hosts,
//! the same veth and the same loss rule, with Zenoh's TCP transport carrying the samples.
//!
//! - **Publisher** (this process, on a thread in the senders' namespace, pinned as the
//!   tether rows are): a Zenoh session in peer mode that connects to the sink and listens on
//!   nothing, and a publisher with congestion control `Block` (a full queue blocks `put`,
//!   as a full keep-all history blocks tether's). Reliability is Zenoh's default,
//!   `Reliable`, which TCP provides.
//! - **Sink** (`tether bench-peer zenoh-sink --ip ADDR`, in the receivers' namespace): a
//!   session in peer mode listening on `tcp/ADDR:PORT`, a free port it prints as its first
//!   line, with a callback subscriber that checks each sample carries the next number and
//!   answers `report` lines with its totals as JSON.
//!
//! Both have multicast and gossip scouting off, so they meet only each other. One setting
//! differs from Zenoh's defaults: a `put` blocked on a full queue closes the transport after
//! 5 s by default (`…/congestion_control/block/wait_before_close`); here it waits as long as
//! the rows' drain limit, as tether's writer never gives up on a reader within a row, so a
//! slow link costs time rather than the session.
//!
//! The rows are measured as tether's: goodput is the samples delivered in order divided by
//! the time from the first `put` to the last arrival (the sink's wall clock, on the same
//! machine), waiting at most the drain limit after the last `put`; the large row is the
//! median time from `put` to arrival of `--large-reps` samples after one untimed.

use std::io::Read;
use std::net::{IpAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use serde_json::{Value, json};
use zenoh::Wait;
use zenoh::qos::CongestionControl;

use super::{DRAIN, Row, SinkReport, numbered};
use crate::harness::lan::{Lan, RECEIVER_IP};
use crate::harness::process::{Peer, read_line, say};
use crate::harness::stats::median;
use crate::harness::{wait_matched, wall_ns};

/// The key expression of the Zenoh rows.
const KEY: &str = "bench/lossy";

/// The goodput row's name.
pub(super) const GOODPUT: &str = "zenoh (TCP, Block)";

/// The large row's name.
pub(super) const LARGE: &str = "zenoh (TCP) large sample";

/// The name of the sink's `bench-peer` role.
const ROLE: &str = "zenoh-sink";

/// How often the publisher's side asks the sink how far it has got.
const POLL: Duration = Duration::from_millis(5);

/// How long a session waits to connect to the sink before `open` fails.
const CONNECT_MS: u64 = 10_000;

/// The Zenoh version these rows were built against, for the reports.
pub(super) const VERSION: &str = "1.10";

/// A Zenoh error (a boxed error) as an `anyhow` one.
fn zerr(e: zenoh::Error) -> anyhow::Error {
    anyhow!("zenoh: {e}")
}

/// A peer-mode configuration that meets no one by scouting, listening on `listen` and
/// connecting to `connect` (TCP endpoints).
fn config(listen: &[String], connect: &[String]) -> anyhow::Result<zenoh::Config> {
    let mut c = zenoh::Config::default();
    let wait_before_close_us = DRAIN.as_micros().to_string();
    let settings = [
        ("mode", "\"peer\"".to_string()),
        ("scouting/multicast/enabled", "false".into()),
        ("scouting/gossip/enabled", "false".into()),
        ("listen/endpoints", serde_json::to_string(listen)?),
        ("connect/endpoints", serde_json::to_string(connect)?),
        ("connect/timeout_ms", CONNECT_MS.to_string()),
        ("connect/exit_on_failure", "true".into()),
        (
            "transport/link/tx/queue/congestion_control/block/wait_before_close",
            wait_before_close_us,
        ),
    ];
    for (key, value) in settings {
        c.insert_json5(key, &value)
            .map_err(zerr)
            .with_context(|| format!("zenoh configuration {key} = {value}"))?;
    }
    Ok(c)
}

/// A TCP endpoint.
fn endpoint(ip: IpAddr, port: u16) -> String {
    format!("tcp/{ip}:{port}")
}

/// The publisher's side of one row: a session and publisher here, the sink there.
struct Pair {
    /// Dropped first: its stdin closes, the sink exits and its TCP connection with it, so
    /// the session here closes without a peer to wait for.
    sink: Peer,
    publisher: zenoh::pubsub::Publisher<'static>,
    session: zenoh::Session,
}

impl Pair {
    /// Starts a sink in the receivers' namespace (pinned to CPU 1 if `cpu1`), connects a
    /// session from this thread's namespace to it and waits until the publisher matches the
    /// sink's subscriber.
    fn connect(lan: &Lan, cpu1: bool) -> anyhow::Result<Pair> {
        let mut args = vec![ROLE.to_string(), "--ip".into(), RECEIVER_IP.to_string()];
        if cpu1 {
            args.extend(["--cpu".into(), "1".into()]);
        }
        let mut sink = Peer::spawn_with(Some(lan.receivers()), crate::PEER_SUBCOMMAND, &args)?;
        let port: u16 = sink
            .line()?
            .parse()
            .context("the zenoh sink's first line: its port")?;
        let cfg = config(&[], &[endpoint(RECEIVER_IP.into(), port)])?;
        let session = zenoh::open(cfg)
            .wait()
            .map_err(zerr)
            .context("opening the Zenoh publisher's session")?;
        let publisher = session
            .declare_publisher(KEY)
            .congestion_control(CongestionControl::Block)
            .wait()
            .map_err(zerr)?;
        wait_matched(|| {
            publisher
                .matching_status()
                .wait()
                .is_ok_and(|s| s.matching())
        })?;
        Ok(Pair {
            sink,
            publisher,
            session,
        })
    }

    fn put(&self, payload: bytes::Bytes) -> anyhow::Result<()> {
        self.publisher.put(payload).wait().map_err(zerr)
    }

    /// The sink's totals once it has received `want` samples, or when `limit` has passed;
    /// and whether it got them all.
    fn until(&mut self, want: u64, limit: Duration) -> anyhow::Result<(SinkReport, bool)> {
        let end = Instant::now() + limit;
        loop {
            let s = report(&mut self.sink)?;
            if s.count >= want {
                return Ok((s, true));
            }
            if Instant::now() >= end {
                return Ok((s, false));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Ends the row: the sink first (see [`Pair::sink`]), then the publisher and the session.
    fn close(self) {
        let Pair {
            sink,
            publisher,
            session,
        } = self;
        drop(sink);
        drop(publisher);
        if let Err(e) = session.close().wait() {
            eprintln!("closing the Zenoh publisher's session: {e}");
        }
    }
}

/// The sink's totals, from its `report`.
fn report(peer: &mut Peer) -> anyhow::Result<SinkReport> {
    peer.send("report")?;
    let v: Value = serde_json::from_str(&peer.line()?).context("zenoh sink report")?;
    Ok(SinkReport {
        count: v["count"].as_u64().unwrap_or(0),
        disorder: v["disorder"].as_u64().unwrap_or(0),
        last_ns: v["last_ns"].as_u64().unwrap_or(0),
        ..SinkReport::default()
    })
}

/// A row of Zenoh's with nothing of tether's repair counters.
fn row(what: &'static str, sent: u64, s: SinkReport, figure: f64, complete: bool) -> Row {
    Row {
        loss: 0,
        what,
        sent,
        delivered: s.count,
        disorder: s.disorder,
        figure,
        complete,
        dropped: 0,
        datagrams: 0,
        resent: 0,
        frags_resent: 0,
        sink: s,
        path: None,
    }
}

/// The goodput row: numbered `size`-byte samples put as fast as `put` returns for
/// `duration`, then at most [`DRAIN`] for the rest to arrive. Call it from a thread in the
/// senders' namespace.
pub(super) fn goodput(
    lan: &Lan,
    size: usize,
    duration: Duration,
    cpu1: bool,
) -> anyhow::Result<Row> {
    let mut pair = Pair::connect(lan, cpu1)?;
    let t0 = Instant::now();
    let t0_ns = wall_ns();
    let mut sent = 0u64;
    while t0.elapsed() < duration {
        pair.put(numbered(sent, size))?;
        sent += 1;
    }
    let (s, complete) = pair.until(sent, DRAIN)?;
    pair.close();
    let secs = s.last_ns.saturating_sub(t0_ns) as f64 / 1e9;
    let in_order = s.count.saturating_sub(s.disorder);
    let figure = if secs > 0.0 {
        in_order as f64 / secs
    } else {
        0.0
    };
    Ok(row(GOODPUT, sent, s, figure, complete))
}

/// The large row: `reps` + 1 samples of `bytes`, each put once the one before has
/// arrived, the first untimed; the figure is the median milliseconds from `put` to
/// arrival. A sample that has not arrived within [`DRAIN`] ends the row. Call it from a
/// thread in the senders' namespace.
pub(super) fn large(lan: &Lan, bytes: usize, reps: usize, cpu1: bool) -> anyhow::Result<Row> {
    let mut pair = Pair::connect(lan, cpu1)?;
    let mut times = Vec::new();
    let mut complete = true;
    let mut last = SinkReport::default();
    for n in 0..=reps as u64 {
        let payload = numbered(n, bytes);
        let put_ns = wall_ns();
        pair.put(payload)?;
        let (s, arrived) = pair.until(n + 1, DRAIN)?;
        last = s;
        if !arrived {
            complete = false;
            break;
        }
        if n > 0 {
            times.push(s.last_ns.saturating_sub(put_ns) as f64 / 1e6);
        }
    }
    pair.close();
    let figure = median(&mut times).unwrap_or(f64::NAN);
    Ok(row(LARGE, reps as u64 + 1, last, figure, complete))
}

/// What the sink has received since it started.
#[derive(Default)]
struct Seen {
    /// The number the next sample should carry.
    next: AtomicU64,
    count: AtomicU64,
    /// Samples that did not carry the next number.
    disorder: AtomicU64,
    /// Wall-clock time of the last arrival (ns since the Unix epoch).
    last_ns: AtomicU64,
}

impl Seen {
    /// Counts one sample. Zenoh calls this from the one task that reads the sink's TCP
    /// link, one sample after another: plain loads and stores suffice.
    fn hit(&self, payload: &zenoh::bytes::ZBytes) {
        let mut head = [0u8; 8];
        let n = match payload.reader().read_exact(&mut head) {
            Ok(()) => u64::from_be_bytes(head),
            Err(_) => u64::MAX,
        };
        if n != self.next.load(Ordering::Relaxed) {
            self.disorder.fetch_add(1, Ordering::Relaxed);
        }
        self.next.store(n.wrapping_add(1), Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.last_ns.store(wall_ns(), Ordering::Relaxed);
    }

    fn json(&self) -> Value {
        json!({
            "count": self.count.load(Ordering::Relaxed),
            "disorder": self.disorder.load(Ordering::Relaxed),
            "last_ns": self.last_ns.load(Ordering::Relaxed),
        })
    }
}

/// `zenoh-sink`: listens on `tcp/IP:PORT` (a free port, printed as the first line),
/// subscribes to the lossy key and answers each `report` line with its totals since it
/// started (count, disorder, last arrival), as JSON, until stdin closes. Unlike
/// `lossy-sink`, a report does not reset the totals: the publisher polls them while it
/// waits for the last sample.
pub(crate) fn sink(ip: Option<IpAddr>) -> anyhow::Result<()> {
    let ip = ip.context("zenoh-sink needs --ip, the address to listen on")?;
    // A free port: the namespace is this benchmark's own, so nothing takes it between
    // this listener's closing and Zenoh's.
    let port = TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .with_context(|| format!("finding a free TCP port on {ip}"))?
        .port();
    let session = zenoh::open(config(&[endpoint(ip, port)], &[])?)
        .wait()
        .map_err(zerr)
        .context("opening the Zenoh sink's session")?;
    let seen = Arc::new(Seen::default());
    let s2 = seen.clone();
    let subscriber = session
        .declare_subscriber(KEY)
        .callback(move |sample| s2.hit(sample.payload()))
        .wait()
        .map_err(zerr)?;
    say(&port.to_string())?;
    while let Some(line) = read_line()? {
        if line == "report" {
            say(&seen.json().to_string())?;
        }
    }
    drop(subscriber);
    session.close().wait().map_err(zerr)
}
