//! `pub`, `echo`, `topics`, `info`, `hz`, `bw`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use tether::{Config, Qos, Session};

use crate::QosArgs;

#[derive(Args, Debug)]
pub(crate) struct PubArgs {
    /// Topic name, e.g. /chatter.
    topic: String,
    /// The data to publish (text). With --size, it is repeated to fill SIZE bytes.
    #[arg(default_value = "hello")]
    data: String,
    /// Samples per second (0: as fast as possible).
    #[arg(long, default_value_t = 1.0)]
    rate: f64,
    /// Stop after N samples.
    #[arg(long)]
    count: Option<u64>,
    /// Payload size in bytes.
    #[arg(long)]
    size: Option<usize>,
    /// Wait for N matched subscribers before publishing.
    #[arg(long, default_value_t = 0)]
    wait_matched: usize,
    /// Seconds to wait for --wait-matched, and for acknowledgements before exiting.
    #[arg(long, default_value_t = 10.0)]
    linger: f64,
    /// Print nothing but errors and warnings (no start line either).
    #[arg(long, short)]
    quiet: bool,
    /// Print the session's counters that are not zero (every refusal is one) to stderr on
    /// exit.
    #[arg(long)]
    stats: bool,
    /// Prefix each sample with its number ("1 DATA", "2 DATA", …).
    #[arg(long)]
    numbered: bool,
    /// Batch samples (one header for many): flushed at --batch-bytes, --batch-samples or
    /// --batch-delay-ms, whichever comes first.
    #[arg(long)]
    batch: bool,
    /// Coalesce instead of batch: the same limits, one DATA submessage per sample, several
    /// per datagram.
    #[arg(long)]
    coalesce: bool,
    /// Batch size limit in bytes (implies --batch).
    #[arg(long, value_name = "BYTES")]
    batch_bytes: Option<usize>,
    /// Batch size limit in samples (implies --batch).
    #[arg(long, value_name = "N")]
    batch_samples: Option<u32>,
    /// Longest a sample waits in a batch, in ms (implies --batch).
    #[arg(long, value_name = "MS")]
    batch_delay_ms: Option<u64>,
    /// Keep-all: a reader that owes acknowledgements and sends none for SECS is let go of
    /// (the others go on; it resumes from what is left and counts what it lost). "strict"
    /// or 0: it holds the publisher until its lease ends (DDS). Default: the config's
    /// reliability.inactive_reader_ms (3 s).
    #[arg(long, value_name = "SECS|strict", value_parser = inactive_after)]
    inactive_after: Option<Duration>,
    #[command(flatten)]
    qos: QosArgs,
}

/// `--inactive-after`: seconds, or `strict` (as 0).
fn inactive_after(v: &str) -> Result<Duration, String> {
    if v == "strict" {
        return Ok(Duration::ZERO);
    }
    let s: f64 = v
        .parse()
        .map_err(|_| format!("'{v}' is neither a number of seconds nor 'strict'"))?;
    secs("--inactive-after", s).map_err(|e| e.to_string())
}

#[derive(Args, Debug)]
pub(crate) struct EchoArgs {
    /// Topic name.
    topic: String,
    /// Exit 0 after N samples.
    #[arg(long)]
    count: Option<u64>,
    /// Exit 1 if fewer than --count samples (or none) arrived within SECS.
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Print the session's counters that are not zero (every drop and refusal is one) to
    /// stderr on exit.
    #[arg(long)]
    stats: bool,
    /// Count samples without printing them.
    #[arg(long)]
    no_print: bool,
    /// Print no start line (which realm and identity this runs as) on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    qos: QosArgs,
}

#[derive(Args, Debug)]
pub(crate) struct TopicsArgs {
    /// Seconds to listen for announcements.
    #[arg(long, default_value_t = 1.5)]
    wait: f64,
    /// Also show types and endpoint counts.
    #[arg(long, short = 'v')]
    verbose: bool,
}

#[derive(Args, Debug)]
pub(crate) struct InfoArgs {
    /// Topic name.
    topic: String,
    /// Seconds to listen for announcements.
    #[arg(long, default_value_t = 1.5)]
    wait: f64,
}

#[derive(Args, Debug)]
pub(crate) struct RateArgs {
    /// Topic name.
    topic: String,
    /// Seconds to run (default: until interrupted).
    #[arg(long)]
    duration: Option<f64>,
    /// Print once per this many seconds.
    #[arg(long, default_value_t = 1.0)]
    period: f64,
    #[command(flatten)]
    qos: QosArgs,
}

/// A duration given in seconds on the command line: finite, not negative, at most ~31 years.
pub(crate) fn secs(flag: &str, v: f64) -> anyhow::Result<Duration> {
    if !(0.0..=1e9).contains(&v) {
        anyhow::bail!("{flag} must be between 0 and 1e9 seconds, not {v}");
    }
    Duration::try_from_secs_f64(v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

/// Prints why nothing arrives from a peer, one line each on stderr, once: refusals (with
/// their reasons), mismatches, and what changes a secure session's membership
/// (`why.rs`). Called right after `open`, as the session's only listener: the first gets
/// the events raised before it (a refusal may come within a millisecond of `open`).
pub(crate) fn report_security_events(session: &Session) {
    crate::why::report(session, crate::why::Scope::Refusals);
}

/// The line `pub` and `echo` start with (on stderr): the realm and the identity the
/// session runs as, or that security is off. Called once the session is open, so the key
/// bundle has been checked.
fn start_line(cfg: &Config) -> anyhow::Result<String> {
    let keys = match &cfg.security.keys {
        Some(k) if cfg.security.enabled() => k,
        Some(_) => {
            return Ok(
                "security off (security.mode = \"off\"): anyone on the network can \
                       read and write"
                    .into(),
            );
        }
        None => {
            return Ok("security off (no --keys): anyone on the network can read and write".into());
        }
    };
    let b = tether::keys::KeyBundle::load(keys)?;
    let ca = tether_crypto::to_hex(&b.ca_public);
    let c = &b.credential;
    // Whether revoked members are refused here: only where the list is loaded.
    let revocations = match &cfg.security.revocations {
        Some(p) => format!("revocations from {} (watched)", p.display()),
        None => "no revocation list (--revocations FILE: revoked members are refused only \
                 where their list is loaded)"
            .to_string(),
    };
    Ok(format!(
        "secure realm {}, as {} (serial {}), credential expires {}; {}",
        &ca[..16],
        c.name,
        c.serial,
        tether::keys::utc(c.expires),
        revocations
    ))
}

/// Opens the session of `pub` or `echo` and says, unless `quiet`, which realm and identity
/// it runs as.
fn open_and_say(cfg: Config, quiet: bool) -> anyhow::Result<Session> {
    let line = (!quiet).then(|| cfg.clone());
    let session = Session::open(cfg)?;
    if let Some(cfg) = line {
        eprintln!("{}", start_line(&cfg)?);
    }
    Ok(session)
}

/// `--stats`: the session's counters on stderr, as a table of those not zero, or as JSON
/// with `--json` (`stats.rs`).
fn print_stats(session: &Session) {
    crate::stats::print(session);
}

/// Prints [`report_security_events`]' lines, and lost samples and readers let go of, one
/// line each on stderr.
fn report_events(session: &Session) {
    crate::why::report(session, crate::why::Scope::All);
}

fn payload(data: &str, size: Option<usize>) -> Bytes {
    match size {
        None => Bytes::copy_from_slice(data.as_bytes()),
        Some(n) => {
            let src = if data.is_empty() { "x" } else { data };
            Bytes::from(src.bytes().cycle().take(n).collect::<Vec<u8>>())
        }
    }
}

pub(crate) fn publish(cfg: Config, a: PubArgs) -> anyhow::Result<ExitCode> {
    let session = open_and_say(cfg, a.quiet)?;
    report_events(&session);
    let mut qos = a.qos.qos();
    if a.batch
        || a.coalesce
        || a.batch_bytes.is_some()
        || a.batch_samples.is_some()
        || a.batch_delay_ms.is_some()
    {
        let d = tether::Batching::default();
        let b = tether::Batching {
            max_bytes: a.batch_bytes.unwrap_or(d.max_bytes),
            max_samples: a.batch_samples.unwrap_or(d.max_samples),
            max_delay: a.batch_delay_ms.map_or(d.max_delay, Duration::from_millis),
        };
        qos = if a.coalesce {
            qos.coalescing(b)
        } else {
            qos.batching(b)
        };
    }
    if let Some(d) = a.inactive_after {
        qos = qos.inactive_after(d);
    }
    let p = session.publisher(a.qos.topic(&a.topic), qos)?;
    let linger = secs("--linger", a.linger)?;
    if !(a.rate >= 0.0 && a.rate.is_finite()) {
        anyhow::bail!(
            "--rate must be a finite number of samples per second ≥ 0, not {}",
            a.rate
        );
    }
    if a.wait_matched > 0 {
        let end = Instant::now() + linger;
        while p.matched() < a.wait_matched {
            if Instant::now() > end {
                anyhow::bail!(
                    "only {} of {} subscribers matched on {} within {:?}",
                    p.matched(),
                    a.wait_matched,
                    a.topic,
                    linger
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let data = payload(&a.data, a.size);
    let period = if a.rate > 0.0 {
        Some(secs("--rate", 1.0 / a.rate)?)
    } else {
        None
    };
    let start = Instant::now();
    let mut next = start;
    let mut n = 0u64;
    let mut last_report = start;
    let mut out = std::io::stdout().lock();
    while a.count.is_none_or(|c| n < c) {
        if let Some(p) = period {
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            next += p;
        }
        let sample = if a.numbered {
            let mut v = format!("{} ", n + 1).into_bytes();
            v.extend_from_slice(&data);
            Bytes::from(v)
        } else {
            data.clone()
        };
        let seq = match p.put(sample.clone()) {
            Ok(seq) => seq,
            Err(e) => {
                // Say what the readers owe as well as why the put failed: the failure alone
                // does not tell how much of what was written got through.
                eprintln!("error: {e}");
                report_owed(&p, n);
                if a.stats {
                    print_stats(&session);
                }
                return Ok(ExitCode::from(2));
            }
        };
        n += 1;
        if !a.quiet {
            if period.is_some_and(|p| p >= Duration::from_millis(50)) {
                let _ = writeln!(out, "publishing #{seq}: {}", render(&sample));
            } else if last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                let _ = writeln!(
                    out,
                    "published {n} samples ({:.0}/s), {} subscribers",
                    n as f64 / start.elapsed().as_secs_f64(),
                    p.matched()
                );
            }
        }
    }
    p.flush();
    p.wait_for_acknowledgments(linger);
    if a.stats {
        print_stats(&session);
    }
    // Every reliable sample must be acknowledged by every reader it was written for, those
    // that left included: otherwise the exit status says so, -q or not.
    if report_owed(&p, n) {
        return Ok(ExitCode::SUCCESS);
    }
    Ok(ExitCode::from(1))
}

/// Prints, for each reliable reader, how many of the `n` samples written it has not
/// acknowledged; true if none owes any.
fn report_owed(p: &tether::Publisher, n: u64) -> bool {
    let owed = p.unacknowledged();
    for s in &owed {
        let name = if s.name.is_empty() { "?" } else { &s.name };
        let state = if s.departed {
            "left before acknowledging"
        } else if s.inactive {
            "is inactive and has not acknowledged"
        } else {
            "has not acknowledged"
        };
        eprintln!(
            "error: reader {} of {name} {state} {} of {n} samples",
            s.reader, s.samples
        );
    }
    owed.is_empty()
}

/// Text if printable UTF-8, else hex.
pub(crate) fn render(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) if s.chars().all(|c| !c.is_control() || c == '\n' || c == '\t') => s.to_string(),
        _ => {
            let mut h = String::with_capacity(b.len() * 2);
            for x in b {
                h.push_str(&format!("{x:02x}"));
            }
            h
        }
    }
}

pub(crate) fn echo(cfg: Config, a: EchoArgs) -> anyhow::Result<ExitCode> {
    let session = open_and_say(cfg, a.quiet)?;
    report_events(&session);
    let sub = session.subscriber(a.qos.topic(&a.topic), a.qos.qos())?;
    let deadline = match a.timeout {
        Some(t) => Some(Instant::now() + secs("--timeout", t)?),
        None => None,
    };
    let mut n = 0u64;
    let mut out = std::io::stdout().lock();
    let code = loop {
        if a.count.is_some_and(|c| n >= c) {
            break ExitCode::SUCCESS;
        }
        let wait = match deadline {
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    break if a.count.is_none() && n > 0 {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    };
                }
                d - now
            }
            None => Duration::from_secs(3600),
        };
        match sub.recv_timeout(wait) {
            Ok(s) => {
                n += 1;
                if !a.no_print {
                    let _ = writeln!(out, "{}", render(&s.payload));
                }
            }
            Err(tether::RecvError::Timeout) => continue,
            Err(e) => anyhow::bail!("{e}"),
        }
    };
    let _ = out.flush();
    if a.stats {
        eprintln!("received {n} samples, lost {}", sub.lost());
        print_stats(&session);
    }
    if code != ExitCode::SUCCESS {
        match a.count {
            Some(c) => eprintln!(
                "error: received {n} of {c} samples on {} before the timeout",
                a.topic
            ),
            None => eprintln!("error: no sample on {} before the timeout", a.topic),
        }
    }
    Ok(code)
}

fn discover(cfg: Config, wait: f64) -> anyhow::Result<Session> {
    let session = Session::open(cfg)?;
    report_security_events(&session);
    std::thread::sleep(secs("--wait", wait)?);
    Ok(session)
}

pub(crate) fn topics(cfg: Config, a: TopicsArgs) -> anyhow::Result<ExitCode> {
    let member = cfg.security.enabled();
    let session = discover(cfg, a.wait)?;
    let found = session.discovered();
    print!("{}", crate::listing::topics(&found, a.verbose));
    if let Some(note) = crate::listing::sealed_note(&found, member) {
        eprintln!("{note}");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn info(cfg: Config, a: InfoArgs) -> anyhow::Result<ExitCode> {
    let member = cfg.security.enabled();
    let session = discover(cfg, a.wait)?;
    let found = session.discovered();
    print!("{}", crate::listing::info(&found, &a.topic));
    if let Some(note) = crate::listing::sealed_note(&found, member) {
        eprintln!("{note}");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn rate(cfg: Config, a: RateArgs, bandwidth: bool) -> anyhow::Result<ExitCode> {
    let session = Session::open(cfg)?;
    report_events(&session);
    #[derive(Default)]
    struct Window {
        stamps: Vec<Instant>,
        bytes: u64,
    }
    let w = Arc::new(Mutex::new(Window::default()));
    let total = Arc::new(AtomicU64::new(0));
    let (w2, t2) = (w.clone(), total.clone());
    let qos: Qos = a.qos.qos();
    let _sub = session.subscriber_with_callback(a.qos.topic(&a.topic), qos, move |s| {
        let mut g = w2.lock().unwrap_or_else(|p| p.into_inner());
        g.stamps.push(Instant::now());
        g.bytes += s.payload.len() as u64;
        t2.fetch_add(1, Ordering::Relaxed);
    })?;
    let start = Instant::now();
    let period = secs("--period", a.period)?.max(Duration::from_millis(50));
    loop {
        std::thread::sleep(period);
        let win = std::mem::take(&mut *w.lock().unwrap_or_else(|p| p.into_inner()));
        let n = win.stamps.len();
        if bandwidth {
            let bps = win.bytes as f64 / period.as_secs_f64();
            let mean = if n > 0 { win.bytes / n as u64 } else { 0 };
            println!(
                "{}/s from {n} messages\n\tMessage size mean: {mean} B",
                human_bytes(bps)
            );
        } else if n < 2 {
            println!("no new messages");
        } else {
            let gaps: Vec<f64> = win
                .stamps
                .windows(2)
                .map(|p| (p[1] - p[0]).as_secs_f64())
                .collect();
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
            let min = gaps.iter().cloned().fold(f64::MAX, f64::min);
            let max = gaps.iter().cloned().fold(0.0, f64::max);
            println!(
                "average rate: {:.3}\n\tmin: {min:.6}s max: {max:.6}s std dev: {:.6}s window: {n}",
                1.0 / mean,
                var.sqrt()
            );
        }
        if a.duration
            .is_some_and(|d| start.elapsed().as_secs_f64() >= d)
        {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn human_bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.2} KB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}
