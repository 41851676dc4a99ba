//! `pub`, `echo`, `topics`, `info`, `hz`, `bw`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use tether::{Config, Qos, Session};

use crate::QosArgs;
use crate::interrupt::{End, Interrupt, Watch};
use crate::out::outln;
use crate::payload::{DEFAULT_TRUNCATE, InputArgs, OutputArgs, Printer};

#[derive(Args, Debug)]
pub(crate) struct PubArgs {
    /// Topic name, e.g. /chatter (a leading / is implied).
    #[arg(value_parser = crate::names::topic)]
    topic: String,
    #[command(flatten)]
    input: InputArgs,
    /// Samples per second (0: as fast as possible).
    #[arg(long, short = 'r', default_value_t = 1.0)]
    rate: f64,
    /// Stop after N samples (once a subscriber matched: see --wait-matched).
    #[arg(long, short = 'n', conflicts_with = "once", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Publish one sample (--count 1), once a subscriber matched.
    #[arg(long)]
    once: bool,
    /// Wait for N matched subscribers before publishing, up to --linger; exit 1 if fewer
    /// matched. Default: 1 with --count or --once (a one-shot sample reaches a running
    /// echo), 0 otherwise.
    #[arg(long, value_name = "N")]
    wait_matched: Option<usize>,
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
    /// What the payloads are: text, json, cbor, cdr or bytes. A label announced with the
    /// publisher (`echo` pretty-prints json and cbor, prints bytes and cdr in hex; `info`
    /// shows it); the payload is checked against text, json and cbor before it is sent.
    #[arg(long, value_name = "LABEL", value_parser = crate::payload::encoding_arg)]
    encoding: Option<tether::Encoding>,
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
    /// reliability.inactive_reader_ms (3 s; 20 s with routers).
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
    /// Topic name (a leading / is implied).
    #[arg(value_parser = crate::names::topic)]
    topic: String,
    /// Exit 0 after N samples.
    #[arg(long, short = 'n', conflicts_with = "once", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Exit 0 after one sample (--count 1).
    #[arg(long)]
    once: bool,
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
    output: OutputArgs,
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
    /// Topic name (a leading / is implied), or a topic id (# and 64 hex digits) as
    /// `topics` shows a topic whose name this session cannot read.
    #[arg(value_parser = crate::names::topic_or_id)]
    topic: String,
    /// Seconds to listen for announcements.
    #[arg(long, default_value_t = 1.5)]
    wait: f64,
}

#[derive(Args, Debug)]
pub(crate) struct RateArgs {
    /// Topic name (a leading / is implied).
    #[arg(value_parser = crate::names::topic)]
    topic: String,
    /// Seconds to run (default: until interrupted).
    #[arg(long)]
    duration: Option<f64>,
    /// Print once per this many seconds.
    #[arg(long, default_value_t = 1.0)]
    period: f64,
    /// Measure over the last N samples (default: 10000 for hz, 100 for bw, as ROS 2).
    #[arg(long, short = 'w', value_name = "N", value_parser = clap::value_parser!(u64).range(2..))]
    window: Option<u64>,
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

pub(crate) fn publish(cfg: Config, a: PubArgs) -> anyhow::Result<ExitCode> {
    // Everything the arguments can get wrong is said before the session opens: a payload
    // larger than a sample can be is refused before it is allocated.
    let data = a.input.load(cfg.transport.max_sample_size)?;
    if let Some(label) = a.encoding {
        if a.numbered && matches!(label, tether::Encoding::Json | tether::Encoding::Cbor) {
            anyhow::bail!(
                "--numbered puts a number before each payload, so it would not be {label} any \
                 more: leave out --numbered, or put a counter inside the payload"
            );
        }
        crate::payload::check_encoding(&data, label)?;
    }
    let linger = secs("--linger", a.linger)?;
    if !(a.rate >= 0.0 && a.rate.is_finite()) {
        anyhow::bail!(
            "--rate must be a finite number of samples per second ≥ 0, not {}",
            a.rate
        );
    }
    let period = if a.rate > 0.0 {
        Some(secs("--rate", 1.0 / a.rate)?)
    } else {
        None
    };
    let count = if a.once { Some(1) } else { a.count };
    // As ros2 topic pub --times: a bounded run waits for someone to hear it.
    let wait_matched = a.wait_matched.unwrap_or(usize::from(count.is_some()));
    let interrupt = Interrupt::catch()?;
    let session = open_and_say(cfg, a.quiet)?;
    report_events(&session);
    let mut qos = a.qos.qos();
    // A bounded run is there to deliver its samples. Without a history flag its reliable
    // writer keeps what its readers have not acknowledged (keep-all, 10 samples held, a put
    // waiting for room) instead of replacing it: with keep-last 10, `-n 20 -r 0` across a
    // lossy link replaced samples before they were acknowledged, the reader reported them
    // lost, and pub exited 0.
    if count.is_some() && qos.is_reliable() && !a.qos.history_given() {
        qos = qos.keep_all().max_samples(10);
    }
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
    let mut topic = a.qos.topic(&a.topic);
    if let Some(label) = a.encoding {
        topic = topic.encoding(label);
    }
    let p = session.publisher(topic, qos)?;
    if wait_matched > 0 {
        let mut watch = Watch::new(&interrupt, Some(Instant::now() + linger));
        while p.matched() < wait_matched {
            match watch.check() {
                None => std::thread::sleep(Duration::from_millis(5)),
                Some(End::Deadline) => {
                    let m = p.matched();
                    let who = if m == 0 {
                        "no subscriber".to_string()
                    } else {
                        format!("only {m} of {wait_matched} subscribers")
                    };
                    let st = session.stats();
                    if st.routers > 0 && st.routers_up == 0 {
                        eprintln!(
                            "error: {who} matched on {} within {} s (--linger): nothing was \
                             published; no router link is up (of {} dialled: is the router \
                             running and reachable? a dial that fails is said as a warning, \
                             once it has waited 4 s for an answer)",
                            a.topic, a.linger, st.routers
                        );
                    } else if st.routers > 0 && !crate::why::anything_reported() {
                        eprintln!(
                            "error: {who} matched on {} within {} s (--linger): nothing was \
                             published; through the routers ({} of {} links up), start one \
                             first (tether echo {} with --router), check that each site's \
                             export list lets the topic cross (tether keys topic-id DIR {}), \
                             or publish regardless with --wait-matched 0",
                            a.topic, a.linger, st.routers_up, st.routers, a.topic, a.topic
                        );
                    } else if crate::why::anything_reported() {
                        eprintln!(
                            "error: {who} matched on {} within {} s (--linger): nothing was \
                             published; the warnings above say why peers were refused or \
                             did not match",
                            a.topic, a.linger
                        );
                    } else {
                        eprintln!(
                            "error: {who} matched on {} within {} s (--linger): nothing was \
                             published; start one first (tether echo {}), or publish \
                             regardless with --wait-matched 0",
                            a.topic, a.linger, a.topic
                        );
                    }
                    if a.stats {
                        print_stats(&session);
                    }
                    return Ok(ExitCode::from(1));
                }
                Some(End::Signal(sig)) => {
                    eprintln!(
                        "interrupted ({}) while waiting for subscribers on {}: nothing was \
                         published",
                        sig.name, a.topic
                    );
                    if a.stats {
                        print_stats(&session);
                    }
                    return Ok(ExitCode::from(sig.status));
                }
                Some(End::Closed | End::Done) => return Ok(ExitCode::SUCCESS),
            }
        }
    }
    let start = Instant::now();
    let mut next = start;
    let mut n = 0u64;
    let mut last_report = start;
    let mut watch = Watch::new(&interrupt, None);
    let mut end = End::Done;
    let mut out = std::io::stdout().lock();
    // Whether a subscriber was ever matched after a sample went to nobody (a late joiner of
    // a transient-local writer takes those from its history).
    let mut late_joiner = false;
    // A put failed (its wait for room ran out): the run ends with status 2 once what was
    // written had its chance to be delivered.
    let mut failed = false;
    while count.is_none_or(|c| n < c) {
        late_joiner |= p.written_unmatched() > 0 && p.matched() > 0;
        if let Some(p) = period {
            if let Some(sig) = interrupt.sleep_until(next) {
                end = End::Signal(sig);
                break;
            }
            next = next_tick(next, p, Instant::now());
        }
        if let Some(e) = watch.check() {
            end = e;
            break;
        }
        let sample = if a.numbered {
            let mut v = format!("{} ", n + 1).into_bytes();
            v.extend_from_slice(&data);
            Bytes::from(v)
        } else {
            data.clone()
        };
        // A signal while the history is full ends the wait (and the run) at once.
        let seq = match p.put_unless(sample.clone(), || interrupt.caught().is_some()) {
            Ok(seq) => seq,
            Err(tether::PutError::Stopped { .. }) => {
                end = End::Signal(interrupt.caught().expect("stopped by a signal"));
                break;
            }
            Err(e) => {
                // What was written before is in the writer's history: its readers get it
                // (repairs included) while this process lingers, as at the end of a run;
                // exiting at once lost it. The status still says the put failed.
                eprintln!("error: {e}");
                eprintln!(
                    "hint: give a put longer (reliability.max_blocking_time_ms in the config), \
                     or let a reader that stops acknowledging go (--inactive-after SECS; \
                     docs/troubleshooting.md)"
                );
                failed = true;
                break;
            }
        };
        n += 1;
        if !a.quiet {
            let written = if period.is_some_and(|p| p >= Duration::from_millis(50)) {
                writeln!(
                    out,
                    "publishing #{seq}: {}",
                    crate::payload::text_line(&sample, DEFAULT_TRUNCATE)
                )
            } else if last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                writeln!(
                    out,
                    "published {n} samples ({:.0}/s), {} subscribers",
                    n as f64 / start.elapsed().as_secs_f64(),
                    p.matched()
                )
            } else {
                Ok(())
            };
            // The reader of our output left (`| head -3`): stop as at the end of --count.
            if written.is_err() {
                end = End::Closed;
                break;
            }
        }
    }
    drop(out);
    p.flush();
    late_joiner |= p.written_unmatched() > 0 && p.matched() > 0;
    if !p.wait_for_acknowledgments(Duration::from_millis(200).min(linger)) {
        if failed {
            eprintln!(
                "waiting up to {} s (--linger) for the subscribers to acknowledge the {n} \
                 samples written before the failure",
                a.linger
            );
        }
        if let End::Signal(sig) = end {
            eprintln!(
                "interrupted ({}): waiting up to {} s (--linger) for the subscribers to \
                 acknowledge what was published; interrupt again to quit now",
                sig.name, a.linger
            );
        }
        // In short steps, so that a signal ends the wait with the summary below: a first
        // one (the run had ended by itself) or a second (it was already interrupted).
        let until = Instant::now() + linger;
        interrupt.handle_again(true);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if p.wait_for_acknowledgments(left.min(crate::interrupt::TICK)) || left.is_zero() {
                break;
            }
            match (end, interrupt.caught()) {
                (End::Signal(_), _) if interrupt.again() => {
                    eprintln!("interrupted again: not waiting any longer");
                    break;
                }
                (End::Signal(_), _) | (_, None) => {}
                (_, Some(sig)) => {
                    end = End::Signal(sig);
                    eprintln!(
                        "interrupted ({}) while waiting for acknowledgements",
                        sig.name
                    );
                    break;
                }
            }
        }
        interrupt.handle_again(false);
    }
    if a.stats {
        print_stats(&session);
    }
    // Every reliable sample must be acknowledged by every reader it was written for, those
    // that left included: otherwise the exit status says so, -q or not.
    let mut delivered = report_owed(&p, n);
    // Samples written while no subscriber was matched: nobody got them, unless the writer
    // keeps them for late joiners (transient-local).
    let unheard = p.written_unmatched();
    let kept = qos.durability_kind() == tether::Durability::TransientLocal;
    let all_kept = kept && qos.history() == tether::History::KeepAll;
    // Every sample reached a subscriber that acknowledged it: said at the end of a run that
    // succeeded, as a failed one says how far it got. Only of a keep-all reliable writer,
    // whose history keeps every sample until it is acknowledged (keep-last replaces them).
    let keeps_all = qos.is_reliable() && qos.history() == tether::History::KeepAll;
    let mut all_acknowledged = keeps_all && delivered && unheard == 0 && n > 0;
    if unheard > 0 && all_kept && late_joiner && delivered {
        // A subscriber that matched later took them from the history and acknowledged them.
        all_acknowledged = keeps_all;
    } else if unheard > 0 && kept {
        let which = match qos.history() {
            tether::History::KeepLast(depth) => format!("the last {depth} are"),
            tether::History::KeepAll => "they are".into(),
        };
        eprintln!(
            "warning: {unheard} of {n} samples were written while no subscriber was matched on \
             {}: {which} kept for late joiners (transient-local) while this publisher runs, \
             and no subscriber took them",
            a.topic
        );
        delivered &= wait_matched == 0;
    } else if unheard > 0 {
        eprintln!(
            "warning: {unheard} of {n} samples were written while no subscriber was matched on \
             {}: nobody received them",
            a.topic
        );
        // Asked to wait for subscribers, the run did not deliver what it wrote.
        delivered &= wait_matched == 0;
    }
    if failed {
        let of = count.map_or(String::new(), |c| format!(" of {c}"));
        eprintln!(
            "published {n}{of} samples on {} before the failure{}",
            a.topic,
            if delivered {
                ", every one acknowledged"
            } else {
                ""
            }
        );
        return Ok(ExitCode::from(2));
    }
    if let End::Signal(sig) = end {
        match count {
            Some(c) => eprintln!(
                "interrupted ({}) after {n} of {c} samples on {}",
                sig.name, a.topic
            ),
            None => eprintln!(
                "interrupted ({}) after {n} samples on {}",
                sig.name, a.topic
            ),
        }
        return Ok(ExitCode::from(sig.status));
    }
    if delivered {
        if all_acknowledged && !a.quiet {
            let noun = if n == 1 { "sample" } else { "samples" };
            eprintln!(
                "published {n} {noun} on {}, every one acknowledged",
                a.topic
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    Ok(ExitCode::from(1))
}

/// The longest a rate-driven `pub` catches up on ticks it missed (a slow put, a busy CPU):
/// later than that (the process was stopped, the host suspended), it publishes once and
/// goes on at its rate from there. A burst of every missed tick at once (4,200 samples
/// after 14 s at 300/s) is more than a lossy path takes within a put's blocking time.
const MAX_CATCH_UP: Duration = Duration::from_millis(20);

/// When the tick after `due` (a tick just taken at `now`) is.
fn next_tick(due: Instant, period: Duration, now: Instant) -> Instant {
    let next = due + period;
    if now.saturating_duration_since(next) > MAX_CATCH_UP {
        now + period
    } else {
        next
    }
}

/// Prints, for each reliable reader, how many of the `n` samples written it has not
/// acknowledged; true if none owes any.
fn report_owed(p: &tether::Publisher, n: u64) -> bool {
    let owed = p.unacknowledged();
    for s in &owed {
        eprintln!(
            "error: reader {} {} {} of {n} samples",
            reader_named(s),
            owed_state(s),
            s.samples
        );
    }
    owed.is_empty()
}

/// A reader that owes acknowledgements, by id and by the name its credential certifies
/// (a secure realm), else the name its participant announced; the name of a participant
/// already forgotten is not known any more.
fn reader_named(s: &tether::Shortfall) -> String {
    match (&s.certified_name, s.name.is_empty()) {
        (Some(c), _) => format!("{} of {c}", s.reader),
        (None, false) => format!("{} of {}", s.reader, s.name),
        (None, true) => s.reader.to_string(),
    }
}

/// What a reader that owes acknowledgements did, in words: only one that said goodbye
/// "left"; one whose lease ran out may have been out of reach, and may come back.
fn owed_state(s: &tether::Shortfall) -> String {
    match (s.departed, s.why) {
        (true, Some(tether::Departure::Left) | None) => "left before acknowledging".into(),
        (true, Some(why)) => format!("is gone ({why}) without acknowledging"),
        (false, _) if s.inactive => "is inactive and has not acknowledged".into(),
        (false, _) => "has not acknowledged".into(),
    }
}

pub(crate) fn echo(cfg: Config, a: EchoArgs) -> anyhow::Result<ExitCode> {
    let mut printer = Printer::new(&a.output);
    let deadline = match a.timeout {
        Some(t) => Some(Instant::now() + secs("--timeout", t)?),
        None => None,
    };
    let count = if a.once { Some(1) } else { a.count };
    let interrupt = Interrupt::catch()?;
    let session = open_and_say(cfg, a.quiet)?;
    report_events(&session);
    let topic = a.qos.topic(&a.topic);
    // A grant missing is said at once, not when a publisher shows up.
    session.may_subscribe(topic.clone())?;
    let mut watch = Watch::new(&interrupt, deadline);
    let mut n = 0u64;
    let (sub, end) =
        match crate::adapt::reader_qos(&session, &topic, &a.qos, a.quiet, || watch.check()) {
            Err(end) => (None, end),
            Ok(qos) => {
                let sub = session.subscriber(topic, qos)?;
                let mut out = std::io::stdout().lock();
                let end = loop {
                    if count.is_some_and(|c| n >= c) {
                        break End::Done;
                    }
                    if let Some(e) = watch.check() {
                        break e;
                    }
                    match sub.recv_timeout(watch.wait()) {
                        Ok(s) => {
                            n += 1;
                            if !a.no_print {
                                let label = sub.writer_encoding(s.writer);
                                if let Err(e) = printer.write(&mut out, &s, label) {
                                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                                        break End::Closed;
                                    }
                                    return Err(e).context("cannot write to standard output");
                                }
                            }
                        }
                        Err(tether::RecvError::Timeout) => continue,
                        Err(e) => anyhow::bail!("{e}"),
                    }
                };
                (Some(sub), end)
            }
        };
    // Samples a writer out of reach still owes: not received, whether or not it returns.
    let lost = match sub.as_ref().map_or((0, 0), |s| s.lost_and_owed()) {
        (lost, 0) => lost.to_string(),
        (lost, owed) => format!("{lost}, {owed} more owed by a writer whose lease ran out"),
    };
    // Ctrl-C ends a run as its end would: what came, said on stderr, and the counters.
    if let End::Signal(sig) = end {
        let of = count.map(|c| format!(" of {c}")).unwrap_or_default();
        let none = if sub.is_none() {
            " (no publisher was found)"
        } else {
            ""
        };
        eprintln!(
            "interrupted ({}): received {n}{of} samples on {}, lost {lost}{none}",
            sig.name, a.topic
        );
    } else if a.stats {
        eprintln!("received {n} samples, lost {lost}");
    }
    if a.stats {
        print_stats(&session);
    }
    Ok(match end {
        End::Done | End::Closed => ExitCode::SUCCESS,
        End::Deadline if count.is_none() && n > 0 => ExitCode::SUCCESS,
        End::Deadline => {
            match count {
                Some(c) => eprintln!(
                    "error: received {n} of {c} samples on {} before the timeout",
                    a.topic
                ),
                None => eprintln!("error: no sample on {} before the timeout", a.topic),
            }
            ExitCode::from(1)
        }
        End::Signal(sig) => ExitCode::from(sig.status),
    })
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
    // A closed pipe (`| head -1`) ends the command quietly.
    crate::out::print(&crate::listing::topics(&found, a.verbose))?;
    if let Some(note) = crate::listing::sealed_note(&found, member) {
        eprintln!("{note}");
    }
    if found.is_empty() {
        // Nothing on stdout (a script reads an empty list); the person is told why.
        eprintln!(
            "no topics seen in {} s (--wait): nothing announced in this domain that this \
             session could hear",
            a.wait
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn info(cfg: Config, a: InfoArgs) -> anyhow::Result<ExitCode> {
    let member = cfg.security.enabled();
    let session = discover(cfg, a.wait)?;
    let found = session.discovered();
    crate::out::print(&crate::listing::info(&found, &a.topic))?;
    if let Some(note) = crate::listing::sealed_note(&found, member) {
        eprintln!("{note}");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn rate(cfg: Config, a: RateArgs, bandwidth: bool) -> anyhow::Result<ExitCode> {
    let period = secs("--period", a.period)?.max(Duration::from_millis(50));
    let duration = a.duration.map(|d| secs("--duration", d)).transpose()?;
    let interrupt = Interrupt::catch()?;
    let session = Session::open(cfg)?;
    report_events(&session);
    let topic = a.qos.topic(&a.topic);
    session.may_subscribe(topic.clone())?;
    let mut watch = Watch::new(&interrupt, duration.map(|d| Instant::now() + d));
    let waiting = Instant::now();
    let qos: Qos = match crate::adapt::reader_qos(&session, &topic, &a.qos, false, || watch.check())
    {
        Ok(qos) => qos,
        Err(e) => {
            // Ended while waiting for a publisher: said, as every command's end is.
            eprintln!(
                "{} after {:.1} s: no publisher of {} was found, 0 messages",
                match &e {
                    End::Signal(sig) => format!("interrupted ({})", sig.name),
                    _ => "ended".to_string(),
                },
                waiting.elapsed().as_secs_f64(),
                a.topic
            );
            return Ok(match e {
                End::Signal(sig) => ExitCode::from(sig.status),
                _ => ExitCode::SUCCESS,
            });
        }
    };
    let cap = a.window.map_or(if bandwidth { 100 } else { 10_000 }, |w| {
        usize::try_from(w).unwrap_or(usize::MAX)
    });
    let w = Arc::new(Mutex::new(crate::window::Window::new(cap)));
    let w2 = w.clone();
    let _sub = session.subscriber_with_callback(topic, qos, move |s| {
        let mut g = w2.lock().unwrap_or_else(|p| p.into_inner());
        g.push(Instant::now(), s.payload.len() as u64);
    })?;
    let report = |last: bool| -> anyhow::Result<()> {
        let now = Instant::now();
        let line = {
            let mut g = w.lock().unwrap_or_else(|p| p.into_inner());
            if last && !g.has_news() {
                return Ok(());
            }
            if bandwidth { g.bw(now) } else { g.hz(now) }
        };
        if let Some(l) = line {
            outln!("{l}")?;
        }
        Ok(())
    };
    let started = Instant::now();
    let mut next = started + period;
    let end = loop {
        if let Some(e) = watch.check() {
            break e;
        }
        let now = Instant::now();
        if now >= next {
            next += period;
            report(false)?;
            continue;
        }
        std::thread::sleep(watch.wait().min(next - now));
    };
    // The end, whatever ended it: what came since the last report.
    Ok(match end {
        End::Closed => ExitCode::SUCCESS,
        End::Signal(sig) => {
            report(true)?;
            let (n, bytes) = w.lock().unwrap_or_else(|p| p.into_inner()).total();
            eprintln!(
                "interrupted ({}) after {:.1} s: {n} messages ({}) on {}",
                sig.name,
                started.elapsed().as_secs_f64(),
                human_bytes(bytes as f64),
                a.topic
            );
            ExitCode::from(sig.status)
        }
        End::Done | End::Deadline => {
            report(true)?;
            ExitCode::SUCCESS
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader whose lease ran out is not said to have left (it may only have been out of
    /// reach); one that said goodbye is.
    #[test]
    fn a_reader_owing_samples_is_said_gone_for_its_reason() {
        let mut s = tether::Shortfall {
            reader: tether::Guid {
                participant: tether::ParticipantId(1),
                entity: tether::EntityId(2),
            },
            name: String::new(),
            samples: 3,
            departed: true,
            why: Some(tether::Departure::LeaseExpired),
            certified_name: None,
            inactive: false,
        };
        assert_eq!(
            owed_state(&s),
            "is gone (its lease ran out: killed, or out of reach) without acknowledging"
        );
        s.why = Some(tether::Departure::Left);
        assert_eq!(owed_state(&s), "left before acknowledging");
        s.departed = false;
        s.why = None;
        assert_eq!(owed_state(&s), "has not acknowledged");
        s.inactive = true;
        assert_eq!(owed_state(&s), "is inactive and has not acknowledged");
        // Named by its credential when it has one (the new-user review: an id alone).
        let id = s.reader.to_string();
        s.name = String::new();
        assert_eq!(reader_named(&s), id);
        s.name = "chosen".into();
        assert_eq!(reader_named(&s), format!("{id} of chosen"));
        s.certified_name = Some("base".into());
        assert_eq!(reader_named(&s), format!("{id} of base"));
    }

    #[test]
    fn a_rate_catches_up_on_a_late_tick_but_not_on_a_stop() {
        let t0 = Instant::now();
        let p = Duration::from_millis(10);
        // On time, and a few ms late: the cadence is kept (the next tick is due at once if
        // it already is, so the rate is kept on average).
        assert_eq!(next_tick(t0, p, t0), t0 + p);
        assert_eq!(next_tick(t0, p, t0 + Duration::from_millis(25)), t0 + p);
        // Stopped for 14 s: one sample now, then the rate from here, not 1,400 at once.
        let now = t0 + Duration::from_secs(14);
        assert_eq!(next_tick(t0, p, now), now + p);
        // A fast rate late by less than the catch-up limit still catches up.
        let fast = Duration::from_micros(100);
        let late = t0 + Duration::from_millis(15);
        assert_eq!(next_tick(t0, fast, late), t0 + fast);
        // A slow rate, back from a stop: its next sample a period after it resumed.
        let slow = Duration::from_secs(1);
        let back = t0 + Duration::from_secs(30);
        assert_eq!(next_tick(t0, slow, back), back + slow);
    }
}
