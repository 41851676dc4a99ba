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
use tether::{Config, FlowControllerConfig, Priority, Qos, Session, TokenCount, format_rate};

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
    /// Topic name, e.g. /files.
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
    /// Give up if no receiver appears, or acknowledgements stop, for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    timeout: f64,
    /// No progress bar or summary.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Args, Debug)]
pub(crate) struct RecvArgs {
    /// Topic name, e.g. /files.
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

fn hex(b: &[u8]) -> String {
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

/// Waits until every receiver has acknowledged everything, moving the bar as they do.
/// False (with the error printed) if they stop acknowledging for `timeout`.
fn wait_acknowledged(
    publisher: &tether::Publisher,
    marks: &mut std::collections::VecDeque<(u64, u64)>,
    pb: &ProgressBar,
    timeout: Duration,
) -> bool {
    let mut last_progress = Instant::now();
    let mut last_acked = 0;
    loop {
        let acked = publisher.acknowledged();
        while marks.front().is_some_and(|(s, _)| *s <= acked) {
            let (_, o) = marks.pop_front().unwrap_or_default();
            pb.set_position(o);
        }
        if publisher.wait_for_acknowledgments(Duration::from_millis(50)) {
            return true;
        }
        if acked != last_acked {
            last_acked = acked;
            last_progress = Instant::now();
        } else if last_progress.elapsed() > timeout {
            pb.abandon();
            eprintln!(
                "error: the receiver stopped acknowledging for {:.0} s",
                timeout.as_secs_f64()
            );
            return false;
        }
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

    let mut h = BytesMut::with_capacity(64 + name.len());
    h.put_slice(HEADER);
    h.put_slice(&id);
    h.put_u64_le(size);
    h.put_u32_le(a.chunk as u32);
    h.put_u16_le(name.len().min(u16::MAX as usize) as u16);
    h.put_slice(&name.as_bytes()[..name.len().min(u16::MAX as usize)]);
    let pb = bar(size, a.quiet, &format!("send {name}"));
    let t0 = Instant::now();
    put(&publisher, h.freeze(), timeout)?;
    let mut hash = digest::Context::new(&digest::SHA256);
    // Sequence number → file bytes up to and including it, for the progress bar.
    let mut marks: std::collections::VecDeque<(u64, u64)> = Default::default();
    let mut offset = 0u64;
    loop {
        let mut buf = BytesMut::with_capacity(28 + a.chunk);
        buf.put_slice(CHUNK);
        buf.put_slice(&id);
        buf.put_u64_le(offset);
        let n = read_up_to(&mut file, &mut buf, a.chunk)
            .with_context(|| format!("reading {}", a.file.display()))?;
        if n == 0 && offset >= size {
            break;
        }
        if n == 0 {
            bail!("{} shrank while being sent", a.file.display());
        }
        hash.update(&buf[28..]);
        offset += n as u64;
        let seq = put(&publisher, buf.freeze(), timeout)?;
        marks.push_back((seq, offset));
        let acked = publisher.acknowledged();
        while marks.front().is_some_and(|(s, _)| *s <= acked) {
            let (_, o) = marks.pop_front().unwrap_or_default();
            pb.set_position(o);
        }
        if n < a.chunk {
            break;
        }
    }
    let sum = hash.finish();
    let mut e = BytesMut::with_capacity(52);
    e.put_slice(END);
    e.put_slice(&id);
    e.put_slice(sum.as_ref());
    put(&publisher, e.freeze(), timeout)?;
    // Wait for every receiver to acknowledge everything, moving the bar meanwhile.
    if !wait_acknowledged(&publisher, &mut marks, &pb, timeout) {
        return Ok(ExitCode::from(1));
    }
    pb.set_position(size);
    pb.finish_and_clear();
    let took = t0.elapsed().as_secs_f64();
    if !a.quiet {
        println!(
            "sent {name} ({}) in {took:.2} s, {} (limit {spec}), sha256 {}",
            human_bytes(size as f64),
            format_rate(size as f64 / took.max(1e-9)),
            hex(sum.as_ref())
        );
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

/// Puts, retrying while the window is full, for as long as acknowledgements keep coming.
fn put(p: &tether::Publisher, mut b: Bytes, timeout: Duration) -> anyhow::Result<u64> {
    let mut since = Instant::now();
    let mut acked = p.acknowledged();
    loop {
        match p.put(b) {
            Ok(seq) => return Ok(seq),
            Err(tether::PutError::Timeout { payload, .. }) => {
                let now = p.acknowledged();
                if now != acked {
                    acked = now;
                    since = Instant::now();
                } else if since.elapsed() > timeout {
                    bail!(
                        "the receiver stopped acknowledging for {:.0} s",
                        timeout.as_secs_f64()
                    );
                }
                b = payload;
            }
            Err(e) => return Err(e.into()),
        }
    }
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

    /// The shell's exit code for the signal caught, if one was.
    fn caught(&self) -> Option<u8> {
        if self.int.load(Ordering::Relaxed) {
            Some(130)
        } else if self.term.load(Ordering::Relaxed) {
            Some(143)
        } else {
            None
        }
    }
}

/// Why `recv` stops before its files are in.
fn abandon(c: Option<Incoming>, why: &str) {
    match c {
        Some(c) => {
            c.pb.abandon();
            eprintln!(
                "error: {why}: {} not received ({} of {} bytes; the partial file is removed)",
                c.name, c.got, c.size
            );
        }
        None => eprintln!("error: {why}"),
    }
}

pub(crate) fn recv(cfg: Config, a: RecvArgs) -> anyhow::Result<ExitCode> {
    let idle = if a.timeout == 0.0 {
        None
    } else {
        Some(secs("--timeout", a.timeout)?)
    };
    let signals = Signals::catch()?;
    std::fs::create_dir_all(&a.dir)
        .with_context(|| format!("cannot create {}", a.dir.display()))?;
    let session = Session::open(cfg)?;
    let sub = session.subscriber(a.topic.as_str(), Qos::default().keep_all())?;
    let mut cur: Option<Incoming> = None;
    let mut done = 0u64;
    let mut skipped = 0u64;
    let mut heard = Instant::now();
    loop {
        if let Some(code) = signals.caught() {
            abandon(cur.take(), "interrupted");
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
                    abandon(cur.take(), &why);
                    return Ok(ExitCode::from(1));
                }
                if let Some(c) = &cur {
                    let writer = c.writer;
                    if !session.discovered().iter().any(|e| e.guid == writer) {
                        abandon(cur.take(), "the sender left");
                        return Ok(ExitCode::from(1));
                    }
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
                c.pb.abandon();
                eprintln!(
                    "warning: transfer of {} interrupted by a new one; dropped",
                    c.name
                );
            }
            match start(&a, &id, s.writer, &p[20..]) {
                Ok(c) => cur = Some(c),
                Err(e) => eprintln!("warning: transfer skipped: {e:#}"),
            }
            continue;
        }
        let Some(c) = cur.as_mut().filter(|c| c.id == id) else {
            skipped += 1;
            continue;
        };
        if kind == CHUNK && p.len() >= 28 {
            let off = u64::from_le_bytes(p[20..28].try_into().unwrap_or_default());
            let data = &p[28..];
            if off != c.got || c.got + data.len() as u64 > c.size {
                bail!(
                    "chunk of {} at offset {off} does not follow byte {} (of {})",
                    c.name,
                    c.got,
                    c.size
                );
            }
            c.file
                .write_all(data)
                .with_context(|| format!("cannot write {} to {}", c.name, a.dir.display()))?;
            c.hash.update(data);
            c.got += data.len() as u64;
            c.pb.set_position(c.got);
        } else if kind == END && p.len() >= 52 {
            let Some(c) = cur.take() else { continue };
            let want = &p[20..52];
            let (ok, msg) = finish(&a.dir, c, want)?;
            if !ok {
                eprintln!("error: {msg}");
                return Ok(ExitCode::from(1));
            }
            if !a.quiet {
                println!("{msg}");
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

fn start(a: &RecvArgs, id: &[u8; 16], writer: tether::Guid, h: &[u8]) -> anyhow::Result<Incoming> {
    if h.len() < 14 {
        bail!("malformed transfer header");
    }
    let size = u64::from_le_bytes(h[..8].try_into()?);
    let nlen = u16::from_le_bytes(h[12..14].try_into()?) as usize;
    let raw = h.get(14..14 + nlen).context("malformed transfer header")?;
    let name = std::str::from_utf8(raw)
        .ok()
        .and_then(safe_name)
        .with_context(|| {
            format!(
                "refusing unsafe file name {:?}",
                String::from_utf8_lossy(raw)
            )
        })?
        .to_string();
    let path = a.dir.join(format!(".{name}.part"));
    let file = File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
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

/// Checks length and hash; moves the file into place if both hold (else the `.part` file
/// goes with `c`).
fn finish(dir: &Path, mut c: Incoming, want: &[u8]) -> anyhow::Result<(bool, String)> {
    let name = c.name.clone();
    c.file
        .flush()
        .with_context(|| format!("cannot write {name} to {}", dir.display()))?;
    let sum = std::mem::replace(&mut c.hash, digest::Context::new(&digest::SHA256)).finish();
    if c.got != c.size {
        c.pb.abandon();
        return Ok((false, format!("{name}: got {} of {} bytes", c.got, c.size)));
    }
    if sum.as_ref() != want {
        c.pb.abandon();
        return Ok((
            false,
            format!(
                "{name}: SHA-256 mismatch: received {}, sender says {}",
                hex(sum.as_ref()),
                hex(want)
            ),
        ));
    }
    let dest = dir.join(&name);
    std::fs::rename(&c.part.path, &dest).with_context(|| {
        format!(
            "cannot move {} to {}",
            c.part.path.display(),
            dest.display()
        )
    })?;
    c.part.kept = true;
    c.pb.finish_and_clear();
    let took = c.t0.elapsed().as_secs_f64();
    Ok((
        true,
        format!(
            "received {} ({}) in {took:.2} s, {}, sha256 {} OK",
            dest.display(),
            human_bytes(c.size as f64),
            format_rate(c.size as f64 / took.max(1e-9)),
            hex(sum.as_ref())
        ),
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
