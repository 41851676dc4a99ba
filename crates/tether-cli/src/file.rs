//! `tether send FILE TOPIC` and `tether recv TOPIC DIR`: a reliable bulk transfer through
//! an asynchronous bulk-class writer and a flow controller, checked end to end by SHA-256.
//!
//! On the topic, one transfer is three kinds of sample (integers little-endian):
//!
//! | sample | layout |
//! |---|---|
//! | header | `TFH1`, id (16 B), size u64, chunk u32, name length u16, name (UTF-8) |
//! | chunk  | `TFD1`, id (16 B), offset u64, bytes |
//! | end    | `TFE1`, id (16 B), SHA-256 of the file (32 B) |
//!
//! Samples are reliable and in order, so chunks arrive at increasing offsets; a receiver that
//! joins mid-transfer skips to the next header.
//!
//! Every receiver answers each transfer it ends, written or not, with a receipt on the
//! topic's receipt topic (`crate::receipt`). `send` succeeds only when every receiver that
//! was matched when it began has confirmed the file's SHA-256; one that fails, leaves or
//! falls silent makes it fail, naming the receiver and why.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use aws_lc_rs::digest;
use bytes::{BufMut, Bytes, BytesMut};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tether::{
    Config, FlowControllerConfig, Priority, Publisher, Qos, Session, Subscriber, TokenCount,
    format_rate,
};

use crate::receipt::{self, Confirmations, Outcome, Tally};
use crate::topic::{human_bytes, secs};

const HEADER: &[u8; 4] = b"TFH1";
const CHUNK: &[u8; 4] = b"TFD1";
const END: &[u8; 4] = b"TFE1";
/// The flow controller `send` defines for its writer.
const FLOW: &str = "tether-send";

#[derive(Args, Debug)]
pub(crate) struct SendArgs {
    /// The file to send.
    file: PathBuf,
    /// Topic name, e.g. /files (a leading / is implied).
    #[arg(value_parser = crate::names::topic)]
    topic: String,
    /// Limit the transfer to this rate (e.g. 10MB/s, 512KiB/s).
    #[arg(long, conflicts_with = "tokens")]
    rate: Option<String>,
    /// Limit by token bucket: N tokens added per --period.
    #[arg(long, value_name = "N")]
    tokens: Option<u64>,
    /// The token bucket's period in ms (with --tokens).
    #[arg(long, value_name = "MS", default_value_t = 10, requires = "tokens")]
    period: u64,
    /// Bytes per token (with --tokens).
    #[arg(long, value_name = "B", default_value_t = 8192, requires = "tokens")]
    bytes_per_token: u64,
    /// Bytes of file per sample (larger samples are fragmented by tether).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    chunk: usize,
    /// Samples in flight before waiting for acknowledgements.
    #[arg(long, value_name = "N", default_value_t = 16)]
    window: u32,
    /// Wait for this many receivers before sending.
    #[arg(long, value_name = "N", default_value_t = 1)]
    wait_matched: usize,
    /// Give up if no receiver appears, or the receivers stop acknowledging and confirming,
    /// for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    timeout: f64,
    /// No progress bar or summary.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args, Debug)]
pub(crate) struct RecvArgs {
    /// Topic name, e.g. /files (a leading / is implied).
    #[arg(value_parser = crate::names::topic)]
    topic: String,
    /// Directory the files are written to (created if missing).
    dir: PathBuf,
    /// Exit after this many files (0: never).
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Give up if nothing arrives for this many seconds (0: wait forever).
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    timeout: f64,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

fn bar(total: u64, quiet: bool, what: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The flow controller `send` asks for (`--rate`, or `--tokens` with their period and
/// size), and its settings in words.
fn flow_controller(a: &SendArgs) -> anyhow::Result<(FlowControllerConfig, String)> {
    let mut fc = FlowControllerConfig::default();
    match (&a.rate, a.tokens) {
        (Some(r), _) => fc.rate = Some(r.clone()),
        (None, Some(n)) => {
            fc.tokens_per_period = Some(TokenCount::Count(n));
            fc.period_ms = Some(a.period);
            fc.bytes_per_token = Some(a.bytes_per_token);
        }
        (None, None) => fc.rate = Some("unlimited".into()),
    }
    let spec = fc.to_spec(FLOW).map_err(|e| {
        anyhow::anyhow!(
            "{}",
            e.to_string().replace("flow_controllers.tether-send: ", "")
        )
    })?;
    Ok((fc, spec.to_string()))
}

/// A transfer on its way out: the file writer, the receivers it started with and what they
/// have said, and the progress bar.
struct Outgoing<'a> {
    /// The transfer's id.
    id: [u8; 16],
    publisher: &'a Publisher,
    receipts: &'a Subscriber,
    tally: Tally,
    timeout: Duration,
    /// Sequence number → file bytes up to and including it, for the progress bar.
    marks: VecDeque<(u64, u64)>,
    pb: ProgressBar,
    /// When a receiver last acknowledged, confirmed, failed or left.
    progress: Instant,
    /// Samples the pending receivers owed when last looked at.
    owed: u64,
    /// The end of the transfer is sent.
    ended: bool,
}

impl Outgoing<'_> {
    /// Notes receipts, departures and acknowledgements, and moves the bar. False when
    /// sending on is pointless: every receiver it started with has failed or left, or none
    /// has made progress for `--timeout` (each still pending is then failed, saying so).
    fn check(&mut self) -> bool {
        if self.tally.poll(self.receipts, self.publisher) {
            self.progress = Instant::now();
        }
        let acked = self.publisher.acknowledged();
        while self.marks.front().is_some_and(|(s, _)| *s <= acked) {
            let (_, o) = self.marks.pop_front().unwrap_or_default();
            self.pb.set_position(o);
        }
        let owed = self.tally.outstanding(self.publisher);
        if owed != self.owed {
            self.owed = owed;
            self.progress = Instant::now();
        }
        if self.tally.pending() == 0 {
            return !self.tally.any_failed();
        }
        if self.progress.elapsed() > self.timeout {
            let t = self.timeout.as_secs_f64();
            let topic = receipt::topic(self.publisher.topic());
            let ended = self.ended;
            self.tally.give_up(self.publisher, |n| {
                if n > 0 {
                    format!("stopped acknowledging for {t:.0} s ({n} samples unacknowledged)")
                } else if !ended {
                    format!(
                        "sending stopped before the end: the receivers stopped acknowledging \
                         for {t:.0} s"
                    )
                } else {
                    format!(
                        "no receipt within {t:.0} s (only `tether recv` confirms, and only when \
                         granted to publish {topic})"
                    )
                }
            });
            return false;
        }
        true
    }

    /// Puts, retrying while the window is full. `None` when sending on is pointless
    /// ([`check`](Self::check)).
    fn put(&mut self, mut b: Bytes) -> anyhow::Result<Option<u64>> {
        loop {
            match self.publisher.put(b) {
                Ok(seq) => {
                    self.progress = Instant::now();
                    return Ok(self.check().then_some(seq));
                }
                Err(
                    tether::PutError::Timeout { payload, .. }
                    | tether::PutError::PathFull { payload, .. },
                ) => {
                    if !self.check() {
                        return Ok(None);
                    }
                    b = payload;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// After the last sample: waits until every receiver has confirmed, failed or left.
    fn settle(&mut self) {
        while self.check() && self.tally.pending() > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends the header, the file (`path`, opened as `file`) in chunks of `chunk` bytes and
    /// the end, then waits for the receipts; stops early when sending on is pointless.
    /// Returns the file's SHA-256.
    fn transmit(
        &mut self,
        file: &mut File,
        path: &Path,
        name: &str,
        size: u64,
        chunk: usize,
    ) -> anyhow::Result<digest::Digest> {
        let id = self.id;
        let nlen = name.len().min(u16::MAX as usize);
        let mut h = BytesMut::with_capacity(34 + nlen);
        h.put_slice(HEADER);
        h.put_slice(&id);
        h.put_u64_le(size);
        h.put_u32_le(chunk as u32);
        h.put_u16_le(nlen as u16);
        h.put_slice(&name.as_bytes()[..nlen]);
        let mut hash = digest::Context::new(&digest::SHA256);
        let mut offset = 0u64;
        let mut going = self.put(h.freeze())?.is_some();
        while going {
            let mut buf = BytesMut::with_capacity(28 + chunk);
            buf.put_slice(CHUNK);
            buf.put_slice(&id);
            buf.put_u64_le(offset);
            let n = read_up_to(file, &mut buf, chunk)
                .with_context(|| format!("reading {}", path.display()))?;
            if n == 0 && offset >= size {
                break;
            }
            if n == 0 {
                bail!("{} shrank while being sent", path.display());
            }
            hash.update(&buf[28..]);
            offset += n as u64;
            match self.put(buf.freeze())? {
                Some(seq) => self.marks.push_back((seq, offset)),
                None => going = false,
            }
            if n < chunk {
                break;
            }
        }
        let sum = hash.finish();
        if going {
            let mut e = BytesMut::with_capacity(52);
            e.put_slice(END);
            e.put_slice(&id);
            e.put_slice(sum.as_ref());
            if self.put(e.freeze())?.is_some() {
                self.ended = true;
                self.settle();
            }
        }
        Ok(sum)
    }

    /// True if every receiver confirmed `size` bytes with SHA-256 `sum`; otherwise says
    /// which did not, and why.
    fn verdict(&self, name: &str, size: u64, sum: &[u8]) -> bool {
        let failed = self.tally.failures(name, size, sum);
        let bad = self.tally.bad();
        if bad > 0 {
            eprintln!(
                "warning: {bad} bad receipt{} ignored",
                if bad == 1 { "" } else { "s" }
            );
        }
        if failed.is_empty() {
            return true;
        }
        self.pb.abandon();
        for f in &failed {
            eprintln!("error: {f}");
        }
        eprintln!(
            "error: {name} not delivered: {} of {} receivers did not confirm it",
            failed.len(),
            self.tally.len()
        );
        false
    }
}

pub(crate) fn send(mut cfg: Config, a: SendArgs) -> anyhow::Result<ExitCode> {
    let timeout = secs("--timeout", a.timeout)?;
    if a.chunk == 0 || a.chunk > cfg.transport.max_sample_size - 64 {
        bail!(
            "--chunk {} is outside 1..={} (transport.max_sample_size - 64)",
            a.chunk,
            cfg.transport.max_sample_size - 64
        );
    }
    let (fc, spec) = flow_controller(&a)?;
    cfg.flow_controllers.insert(FLOW.into(), fc);

    let mut file =
        File::open(&a.file).with_context(|| format!("cannot open {}", a.file.display()))?;
    let size = file.metadata()?.len();
    let name = a
        .file
        .file_name()
        .and_then(|n| n.to_str())
        .context("the file name is not UTF-8")?
        .to_string();
    let session = Session::open(cfg)?;
    crate::topic::report_security_events(&session);
    // Before the file writer: see `receipt::subscriber`.
    let receipts = receipt::subscriber(&session, &a.topic)?;
    let qos = Qos::default()
        .keep_all()
        .max_samples(a.window.max(2))
        .max_bytes(u64::MAX)
        .asynchronous(Priority::Bulk)
        .flow_controller(FLOW);
    let publisher = session.publisher(a.topic.as_str(), qos)?;
    let start = Instant::now();
    while publisher.matched() < a.wait_matched {
        if start.elapsed() > timeout {
            eprintln!(
                "error: no receiver on {} after {:.0} s",
                a.topic,
                timeout.as_secs_f64()
            );
            return Ok(ExitCode::from(1));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    // The receivers this transfer is for: those matched now. Later ones are welcome, not
    // waited for.
    let mut out = Outgoing {
        id,
        publisher: &publisher,
        receipts: &receipts,
        tally: Tally::start(&session, &publisher, id),
        timeout,
        marks: VecDeque::new(),
        pb: bar(size, a.quiet, &format!("send {name}")),
        progress: Instant::now(),
        owed: 0,
        ended: false,
    };

    let t0 = Instant::now();
    let sum = out.transmit(&mut file, &a.file, &name, size, a.chunk)?;
    if !out.verdict(&name, size, sum.as_ref()) {
        return Ok(ExitCode::from(1));
    }
    out.pb.set_position(size);
    out.pb.finish_and_clear();
    if out.tally.len() == 0 {
        eprintln!("note: no receiver was matched when sending began; none confirmed {name}");
    }
    let took = t0.elapsed().as_secs_f64();
    if !a.quiet {
        crate::out::outln!(
            "sent {name} ({}) in {took:.2} s, {} (limit {spec}), confirmed by {} receiver{}, sha256 {}",
            human_bytes(size as f64),
            format_rate(size as f64 / took.max(1e-9)),
            out.tally.len(),
            if out.tally.len() == 1 { "" } else { "s" },
            hex(sum.as_ref())
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads until `want` bytes or the end of the file.
fn read_up_to(f: &mut File, buf: &mut BytesMut, want: usize) -> std::io::Result<usize> {
    let base = buf.len();
    buf.resize(base + want, 0);
    let mut n = 0;
    while n < want {
        match f.read(&mut buf[base + n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(base + n);
    Ok(n)
}

/// A `.part` file being written: removed when dropped, unless it was moved into place.
/// Every way out of a transfer (an error, a signal, the sender leaving, a bad hash) drops
/// it, so none leaves debris that keeps a disk full.
struct PartFile {
    path: PathBuf,
    kept: bool,
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A transfer being received.
struct Incoming {
    id: [u8; 16],
    /// The endpoint sending it.
    writer: tether::Guid,
    name: String,
    size: u64,
    got: u64,
    file: std::io::BufWriter<File>,
    /// After `file`, so the buffer is flushed (or dropped) before the file is removed.
    part: PartFile,
    hash: digest::Context,
    pb: ProgressBar,
    t0: Instant,
}

/// A file name from the wire, made safe: one path component, no `..`, no control chars.
fn safe_name(n: &str) -> Option<&str> {
    let ok = !n.is_empty()
        && n.len() <= 255
        && n != "."
        && n != ".."
        && !n.contains(['/', '\\', '\0'])
        && !n.chars().any(char::is_control);
    ok.then_some(n)
}

/// How often `recv` looks up from waiting: for signals, and for a sender that left.
const RECV_TICK: Duration = Duration::from_millis(100);

/// SIGINT and SIGTERM, caught so that `recv` can remove what it was writing.
struct Signals {
    int: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
}

impl Signals {
    fn catch() -> anyhow::Result<Signals> {
        let s = Signals {
            int: Arc::new(AtomicBool::new(false)),
            term: Arc::new(AtomicBool::new(false)),
        };
        signal_hook::flag::register(signal_hook::consts::SIGINT, s.int.clone())?;
        signal_hook::flag::register(signal_hook::consts::SIGTERM, s.term.clone())?;
        Ok(s)
    }

    /// The signal caught, if one was: its name and the shell's exit code for it.
    fn caught(&self) -> Option<(&'static str, u8)> {
        if self.int.load(Ordering::Relaxed) {
            Some(("SIGINT", 130))
        } else if self.term.load(Ordering::Relaxed) {
            Some(("SIGTERM", 143))
        } else {
            None
        }
    }
}

/// Why a transfer failed at this end: for the receipt, and in words for both ends.
#[derive(Debug)]
struct Failure {
    outcome: Outcome,
    reason: String,
}

impl Failure {
    fn new(outcome: Outcome, reason: impl Into<String>) -> Failure {
        Failure {
            outcome,
            reason: reason.into(),
        }
    }

    /// An I/O error while doing `what` (which names the file).
    fn io(e: &std::io::Error, what: impl std::fmt::Display) -> Failure {
        Failure::new(Outcome::of_io(e), format!("{what}: {e}"))
    }

    /// In words, as both ends print it (`send` from the receipt).
    fn describe(&self) -> String {
        format!("{}: {}", self.outcome.label(), self.reason)
    }
}

/// Stops receiving `c`: says why on stderr, tells its sender in a receipt, and drops it,
/// which removes its partial file.
fn abandon(c: Incoming, confirm: &mut Confirmations, f: &Failure) {
    confirm.send(&c.id, f.outcome, c.got, [0; 32], &f.reason);
    gone(c, &f.describe());
}

/// Says on stderr that `c` was not received, and why; drops it (and its partial file).
fn gone(c: Incoming, why: &str) {
    c.pb.abandon();
    eprintln!(
        "error: {why}: {} not received ({} of {} bytes; the partial file is removed)",
        c.name, c.got, c.size
    );
}

pub(crate) fn recv(cfg: Config, a: RecvArgs) -> anyhow::Result<ExitCode> {
    let idle = if a.timeout == 0.0 {
        None
    } else {
        Some(secs("--timeout", a.timeout)?)
    };
    let signals = Signals::catch()?;
    if a.dir.exists() && !a.dir.is_dir() {
        anyhow::bail!(
            "{} is not a directory: recv writes the files it receives into a directory \
             (it makes one that does not exist)",
            a.dir.display()
        );
    }
    std::fs::create_dir_all(&a.dir)
        .with_context(|| format!("cannot create {}", a.dir.display()))?;
    let session = Session::open(cfg)?;
    crate::topic::report_security_events(&session);
    // Before the file reader: see `receipt::publisher`.
    let receipts = receipt::publisher(&session, &a.topic)?;
    let sub = session.subscriber(a.topic.as_str(), Qos::default().keep_all())?;
    let mut confirm = Confirmations::new(receipts, sub.guid());
    let r = receive(&a, &session, &sub, &mut confirm, &signals, idle);
    // Whatever the outcome, the senders get their receipts before we leave.
    confirm.settle();
    r
}

/// `recv`'s loop: every transfer that ends, well or not, gets a receipt.
fn receive(
    a: &RecvArgs,
    session: &Session,
    sub: &Subscriber,
    confirm: &mut Confirmations,
    signals: &Signals,
    idle: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    let mut cur: Option<Incoming> = None;
    let mut done = 0u64;
    let mut skipped = 0u64;
    let mut heard = Instant::now();
    loop {
        if let Some((sig, code)) = signals.caught() {
            let f = Failure::new(Outcome::Interrupted, format!("recv got {sig}"));
            match cur.take() {
                Some(c) => abandon(c, confirm, &f),
                None => eprintln!("error: interrupted ({sig})"),
            }
            return Ok(ExitCode::from(code));
        }
        let s = match sub.recv_timeout(RECV_TICK) {
            Ok(s) => s,
            Err(tether::RecvError::Timeout) => {
                if let Some(d) = idle.filter(|d| heard.elapsed() >= *d) {
                    let why = format!(
                        "nothing received on {} for {:.0} s",
                        a.topic,
                        d.as_secs_f64()
                    );
                    match cur.take() {
                        Some(c) => abandon(c, confirm, &Failure::new(Outcome::TimedOut, why)),
                        None => eprintln!("error: {why}"),
                    }
                    return Ok(ExitCode::from(1));
                }
                if let Some(c) = cur.take_if(|c| {
                    let writer = c.writer;
                    !session.discovered().iter().any(|e| e.guid == writer)
                }) {
                    // Nobody left to confirm to.
                    gone(c, "the sender left");
                    return Ok(ExitCode::from(1));
                }
                continue;
            }
            Err(e) => bail!("{e}"),
        };
        heard = Instant::now();
        let p = &s.payload;
        if p.len() < 20 {
            skipped += 1;
            continue;
        }
        let (kind, id) = (&p[..4], <[u8; 16]>::try_from(&p[4..20]).unwrap_or_default());
        if kind == HEADER {
            if let Some(c) = cur.take() {
                let f = Failure::new(
                    Outcome::Superseded,
                    format!("{} began one on {}", s.writer, a.topic),
                );
                abandon(c, confirm, &f);
            }
            match start(a, &id, s.writer, &p[20..]) {
                Ok(c) => cur = Some(c),
                Err(f) => {
                    confirm.send(&id, f.outcome, 0, [0; 32], &f.reason);
                    eprintln!("warning: transfer skipped: {}", f.describe());
                }
            }
            continue;
        }
        let Some(c) = cur.as_mut().filter(|c| c.id == id) else {
            skipped += 1;
            continue;
        };
        if kind == CHUNK && p.len() >= 28 {
            let off = u64::from_le_bytes(p[20..28].try_into().unwrap_or_default());
            if let Err(f) = write_chunk(c, &a.dir, off, &p[28..]) {
                if let Some(c) = cur.take() {
                    abandon(c, confirm, &f);
                }
                return Ok(ExitCode::from(1));
            }
        } else if kind == END && p.len() >= 52 {
            let Some(mut c) = cur.take() else { continue };
            match finish(&a.dir, &mut c, &p[20..52]) {
                Ok((msg, sum)) => {
                    confirm.send(&c.id, Outcome::Written, c.got, sum, "");
                    if !a.quiet {
                        // A closed pipe ends the command quietly (`| head -1`).
                        crate::out::outln!("{msg}")?;
                    }
                }
                Err(f) => {
                    abandon(c, confirm, &f);
                    return Ok(ExitCode::from(1));
                }
            }
            done += 1;
            if a.count != 0 && done >= a.count {
                if skipped > 0 {
                    eprintln!("({skipped} samples of other or unknown transfers skipped)");
                }
                return Ok(ExitCode::SUCCESS);
            }
        } else {
            skipped += 1;
        }
    }
}

/// Writes one chunk, which must follow what came before.
fn write_chunk(c: &mut Incoming, dir: &Path, off: u64, data: &[u8]) -> Result<(), Failure> {
    if off != c.got || c.got + data.len() as u64 > c.size {
        return Err(Failure::new(
            Outcome::Incomplete,
            format!(
                "chunk of {} at offset {off} does not follow byte {} (of {})",
                c.name, c.got, c.size
            ),
        ));
    }
    c.file.write_all(data).map_err(|e| {
        Failure::io(
            &e,
            format_args!("cannot write {} to {}", c.name, dir.display()),
        )
    })?;
    c.hash.update(data);
    c.got += data.len() as u64;
    c.pb.set_position(c.got);
    Ok(())
}

fn start(a: &RecvArgs, id: &[u8; 16], writer: tether::Guid, h: &[u8]) -> Result<Incoming, Failure> {
    let malformed = || Failure::new(Outcome::Refused, "malformed transfer header");
    if h.len() < 14 {
        return Err(malformed());
    }
    let size = u64::from_le_bytes(h[..8].try_into().map_err(|_| malformed())?);
    let nlen = u16::from_le_bytes(h[12..14].try_into().map_err(|_| malformed())?) as usize;
    let raw = h.get(14..14 + nlen).ok_or_else(malformed)?;
    let name = std::str::from_utf8(raw)
        .ok()
        .and_then(safe_name)
        .ok_or_else(|| {
            Failure::new(
                Outcome::Refused,
                format!("unsafe file name {:?}", String::from_utf8_lossy(raw)),
            )
        })?
        .to_string();
    let path = a.dir.join(format!(".{name}.part"));
    let file = File::create(&path)
        .map_err(|e| Failure::io(&e, format_args!("cannot create {}", path.display())))?;
    Ok(Incoming {
        id: *id,
        writer,
        pb: bar(size, a.quiet, &format!("recv {name}")),
        name,
        size,
        got: 0,
        file: std::io::BufWriter::with_capacity(1 << 20, file),
        part: PartFile { path, kept: false },
        hash: digest::Context::new(&digest::SHA256),
        t0: Instant::now(),
    })
}

/// Flushes the file to disk, checks its length and hash, and moves it into place if both
/// hold (else the `.part` file goes when `c` is dropped). Returns the line to print and the
/// SHA-256 of what was written.
fn finish(dir: &Path, c: &mut Incoming, want: &[u8]) -> Result<(String, [u8; 32]), Failure> {
    let name = c.name.clone();
    let what = || format!("cannot write {name} to {}", dir.display());
    // Written means on the disk: a full disk may show only now, when the buffers go out.
    c.file.flush().map_err(|e| Failure::io(&e, what()))?;
    c.file
        .get_ref()
        .sync_all()
        .map_err(|e| Failure::io(&e, what()))?;
    let sum = std::mem::replace(&mut c.hash, digest::Context::new(&digest::SHA256)).finish();
    if c.got != c.size {
        return Err(Failure::new(
            Outcome::Incomplete,
            format!("{name}: got {} of {} bytes", c.got, c.size),
        ));
    }
    if sum.as_ref() != want {
        return Err(Failure::new(
            Outcome::ChecksumMismatch,
            format!(
                "{name}: received sha256 {}, the sender's is {}",
                hex(sum.as_ref()),
                hex(want)
            ),
        ));
    }
    let dest = dir.join(&name);
    std::fs::rename(&c.part.path, &dest).map_err(|e| {
        Failure::io(
            &e,
            format_args!(
                "cannot move {} to {}",
                c.part.path.display(),
                dest.display()
            ),
        )
    })?;
    c.part.kept = true;
    c.pb.finish_and_clear();
    let took = c.t0.elapsed().as_secs_f64();
    let mut out = [0u8; 32];
    out.copy_from_slice(sum.as_ref());
    Ok((
        format!(
            "received {} ({}) in {took:.2} s, {}, sha256 {} OK",
            dest.display(),
            human_bytes(c.size as f64),
            format_rate(c.size as f64 / took.max(1e-9)),
            hex(sum.as_ref())
        ),
        out,
    ))
}

#[cfg(test)]
mod tests {
    use super::safe_name;

    #[test]
    fn unsafe_names_are_refused() {
        for bad in ["", ".", "..", "a/b", "../x", "a\\b", "x\0y", "a\nb"] {
            assert!(safe_name(bad).is_none(), "{bad:?}");
        }
        for good in ["map.pcd", ".hidden", "日本.bin", "a b"] {
            assert_eq!(safe_name(good), Some(good));
        }
    }
}
