//! Why nothing arrives: every refusal and mismatch a session reports, one line each on
//! stderr, once (`docs/troubleshooting.md`), and the log filter (`RUST_LOG`, `TETHER_LOG`).
//!
//! The engine reports each refusal once per peer and each mismatch once per pair of
//! endpoints; a line is also never printed twice here (a peer forgotten and found again
//! may be reported again). A line the log already shows (`TETHER_LOG=warn` and up) is not
//! printed a second time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tether::{AuthFailure, Event, QosPolicy, RefusalReason, Session};

/// Distinct lines remembered as printed; past this, lines are printed without being
/// remembered (memory stays bounded whatever peers do).
const REMEMBERED: usize = 4096;

/// Lines printed at once before the rate applies, then one per [`REFILL`]: anyone on the
/// network can make a session refuse things (an outsider invents a participant id a
/// datagram), and a terminal or a log must not grow with what it sends. What is not printed
/// is counted, said in one line, and every refusal is in `--stats`.
const BURST: f64 = 20.0;
const REFILL: Duration = Duration::from_secs(1);

/// A token bucket over printed lines.
struct Printed {
    lines: HashSet<String>,
    tokens: f64,
    last: Instant,
}

impl Printed {
    fn take(&mut self, now: Instant) -> bool {
        let gained = now.saturating_duration_since(self.last).as_secs_f64() / REFILL.as_secs_f64();
        self.tokens = (self.tokens + gained).min(BURST);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// `line` with control (and bidirectional-text) characters escaped: it may quote what a
/// peer announced.
pub(crate) fn printable(line: &str) -> String {
    tether::printable(line, usize::MAX)
}

/// Which events a command prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Refusals, mismatches and what changes a realm's membership: why nothing arrives.
    Refusals,
    /// Those, and what happens to the samples of the command's own endpoints (lost
    /// samples, readers let go of): `pub`, `echo`, `hz`, `bw`.
    All,
}

/// Reports printed (or held back) so far by this process: a command that ends without a
/// match says the reason is in them rather than "start one first".
static REPORTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether a refusal or mismatch has been reported by this process.
pub(crate) fn anything_reported() -> bool {
    REPORTED.load(std::sync::atomic::Ordering::Relaxed) > 0
}

/// Prints what `session` reports, as `scope` says, one line each on stderr, each line
/// once. Called right after `open`, as the session's only listener: the first gets the
/// events raised before it (a refusal may come within a millisecond of `open`).
pub(crate) fn report(session: &Session, scope: Scope) {
    let printed = Arc::new(Mutex::new(Printed {
        lines: HashSet::new(),
        tokens: BURST,
        last: Instant::now(),
    }));
    session.on_event(move |e| {
        let Some(line) = line(e, scope) else {
            return;
        };
        // The log shows it already (at warn, info or debug, as asked).
        if tether::event_logged(e) {
            return;
        }
        let mut p = printed.lock().unwrap_or_else(|p| p.into_inner());
        if p.lines.contains(&line) {
            return;
        }
        REPORTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !p.take(Instant::now()) {
            SUPPRESSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        if p.lines.len() < REMEMBERED {
            p.lines.insert(line.clone());
        }
        drop(p);
        say_suppressed();
        eprintln!("{}", printable(&line));
    });
}

/// Reports held back by the rate and not yet said.
static SUPPRESSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Says how many reports were held back since this was last said, if any: before the next
/// line printed, and when the command ends (so that losses held back at the end of a run
/// are not left unsaid).
pub(crate) fn say_suppressed() {
    let n = SUPPRESSED.swap(0, std::sync::atomic::Ordering::Relaxed);
    if n > 0 {
        eprintln!("{}", suppressed_line(n));
    }
}

fn suppressed_line(n: u64) -> String {
    format!(
        "warning: {n} more reports not shown (at most {BURST} at once, then one a second; \
         --stats counts every refusal and loss)"
    )
}

/// The line printed for `e`, if `scope` prints it.
pub(crate) fn line(e: &Event, scope: Scope) -> Option<String> {
    Some(match e {
        Event::IncompatibleQos(q) => match q.policy {
            QosPolicy::Protection | QosPolicy::Partition => format!("warning: {q}"),
            QosPolicy::TypeName => {
                format!("warning: {q}; they do not match (give both the same --type, or none)")
            }
            _ => format!(
                "warning: {q}; they do not match (match the subscriber's QoS flags to the \
                 publisher's: `tether info {}` shows both)",
                q.topic
            ),
        },
        Event::AuthenticationFailed {
            participant,
            reason: reason @ (AuthFailure::Revoked | AuthFailure::Expired),
        } => format!(
            "warning: participant {:016x} unmatched: {reason}",
            participant.0
        ),
        Event::AuthenticationFailed {
            participant,
            reason,
        } => format!(
            "warning: participant {:016x} refused: {reason}",
            participant.0
        ),
        Event::RefusedByPeer {
            participant,
            name,
            reason,
        } => format!(
            "error: {name} ({:016x}) refuses our credential: {reason}; nothing is exchanged \
             with it. {}",
            participant.0,
            advice(reason)
        ),
        Event::AccessDenied {
            remote,
            topic,
            reason,
            ..
        } => format!("warning: {remote} not matched on {topic}: {reason}"),
        Event::OverLimit { participant, limit } => format!(
            "warning: participant {:016x}: announcement refused: {limit}",
            participant.0
        ),
        Event::RevocationListApplied { serial, revoked } => {
            format!("revocation list {serial} in force ({revoked} credentials revoked)")
        }
        Event::RevocationListRefused { reason } => {
            format!("warning: revocation list refused, the one in force stays: {reason}")
        }
        Event::OwnCredentialRevoked { serial, list } => format!(
            "warning: our credential (serial {serial}) is revoked by revocation list {list}: \
             peers that load it refuse us (a replacement comes from `tether keys issue DIR \
             NAME --replace`)"
        ),
        Event::OwnCredentialExpired { serial, expires } => format!(
            "warning: our credential (serial {serial}) expired at {}: peers refuse us from \
             now on",
            tether::keys::utc(*expires)
        ),
        _ if scope == Scope::Refusals => return None,
        Event::SamplesLost {
            writer,
            first,
            last,
            count,
            reason,
            ..
        } => {
            format!("warning: lost {count} samples ({first}..={last}) of writer {writer}: {reason}")
        }
        Event::ReaderInactive { reader, .. } => format!(
            "warning: reader {reader} is inactive (it has acknowledged nothing for the \
             inactivity time): the other readers go on without it"
        ),
        Event::ReaderActive {
            reader, released, ..
        } => format!(
            "warning: reader {reader} answers again; {released} samples it had not \
             acknowledged were let go of meanwhile (those it did not receive are lost to it)"
        ),
        _ => return None,
    })
}

/// What to do when a peer refuses our credential for `reason`.
fn advice(reason: &RefusalReason) -> &'static str {
    match reason {
        RefusalReason::Revoked { .. } => {
            "Ask the realm's administrator for a new credential (`tether keys issue DIR NAME \
             --replace`)."
        }
        RefusalReason::Expired { .. } => {
            "Ask the realm's administrator for a new credential (`tether keys issue DIR \
             NAME --replace`), or check this host's clock."
        }
        RefusalReason::NotYetValid { .. } => "Check the clocks of both hosts.",
        RefusalReason::Other => {
            "Check that the key bundle (--keys) is this realm's, as `tether keys show` prints \
             it."
        }
    }
}

/// Sets the log up: the filter comes from `TETHER_LOG`, else `RUST_LOG` (both as
/// `tracing_subscriber`'s `EnvFilter` reads them: `debug`, `tether=debug,warn`); only
/// errors without either. Logs go to stderr. A filter that does not parse is said, and
/// errors only are logged.
///
/// A daemon (`daemon`: `tether router`) logs with time, level and source. The other
/// commands, left to the default filter, say their few lines (a router link lost or not
/// made) as the rest of their output does: `warning: router …: …; dialling again`, and
/// `note: …` for the news that clears one (a link made again). With a filter given, the
/// full form: whoever asked for `debug` wants to know where each line comes from.
pub(crate) fn init_logging(daemon: bool) {
    use tracing_subscriber::EnvFilter;
    let given = ["TETHER_LOG", "RUST_LOG"].into_iter().find_map(|var| {
        std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (var, v))
    });
    let plain = given.is_none() && !daemon;
    let filter = match given {
        // Errors, and what a user of routers must see: a router link that cannot be made
        // or was lost (the session's), and a router's links and refusals (`tether router`).
        None => EnvFilter::new("error,tether::session::router=warn,tether_router=info"),
        Some((var, spec)) => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!(
                "warning: {var}={spec:?} is not a log filter ({e}): logging errors only \
                 (try {var}=debug, or {var}=tether=debug)"
            );
            EnvFilter::new("error")
        }),
    };
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if plain {
        fmt.event_format(Plain).init();
    } else {
        fmt.init();
    }
}

/// A log line as the CLI's own: `error: `, `warning: ` or `note: ` (an event with a `news`
/// field: good news said at the level of the bad it clears), then the message.
struct Plain;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Plain
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut v = Message::default();
        event.record(&mut v);
        let level = *event.metadata().level();
        let prefix = if v.news {
            "note"
        } else if level == tracing::Level::ERROR {
            "error"
        } else if level == tracing::Level::WARN {
            "warning"
        } else {
            "note"
        };
        writeln!(w, "{prefix}: {}", v.message)
    }
}

/// An event's message, and whether it is news that clears a warning.
#[derive(Default)]
struct Message {
    message: String,
    news: bool,
}

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "news" => self.news = true,
            _ => {}
        }
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        match field.name() {
            "news" => self.news = value,
            _ => self.record_debug(field, &value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether::{EndpointKind, Guid, IncompatibleQos, ParticipantId};

    fn mismatch(policy: QosPolicy, offered: &str, requested: &str) -> Event {
        let g = |p, e| Guid {
            participant: ParticipantId(p),
            entity: tether::EntityId(e),
        };
        Event::IncompatibleQos(IncompatibleQos {
            topic: "/cmd".into(),
            local: g(1, 2),
            local_kind: EndpointKind::Reader,
            remote: g(3, 4),
            policy,
            offered: offered.into(),
            requested: requested.into(),
        })
    }

    /// Each kind of refusal and mismatch has a line, in every scope; what happens to
    /// samples only in `All`.
    #[test]
    fn refusals_and_mismatches_have_lines_in_every_scope() {
        let events = [
            mismatch(QosPolicy::Protection, "encrypt", "encrypt+sign"),
            mismatch(QosPolicy::Partition, "partition \"a\"", "partition \"b\""),
            mismatch(QosPolicy::TypeName, "A", "B"),
            mismatch(QosPolicy::Reliability, "best_effort", "reliable"),
            Event::AuthenticationFailed {
                participant: ParticipantId(5),
                reason: AuthFailure::NoAuth,
            },
            Event::RefusedByPeer {
                participant: ParticipantId(6),
                name: "robot".into(),
                reason: RefusalReason::Revoked { serial: 4, list: 2 },
            },
        ];
        for e in &events {
            for scope in [Scope::Refusals, Scope::All] {
                assert!(line(e, scope).is_some(), "{e:?}");
            }
        }
        let p = line(&events[0], Scope::Refusals).unwrap();
        assert!(
            p.contains("encrypt+sign") && p.contains("as encrypt") && p.contains("/cmd"),
            "{p}"
        );
        let r = line(&events[5], Scope::Refusals).unwrap();
        assert!(
            r.contains("robot (0000000000000006) refuses our credential")
                && r.contains("serial 4 is revoked")
                && r.contains("--replace"),
            "{r}"
        );
        let lost = Event::ReaderInactive {
            writer: tether::EntityId(1),
            reader: Guid {
                participant: ParticipantId(2),
                entity: tether::EntityId(3),
            },
        };
        assert!(line(&lost, Scope::Refusals).is_none());
        assert!(line(&lost, Scope::All).is_some());
    }

    /// Twenty lines at once, then one a second: what an outsider inventing an id a datagram
    /// can make a member print.
    #[test]
    fn lines_are_limited_to_a_burst_then_one_a_second() {
        let t0 = Instant::now();
        let mut p = Printed {
            lines: HashSet::new(),
            tokens: BURST,
            last: t0,
        };
        let printed = (0..10_000).filter(|_| p.take(t0)).count();
        assert_eq!(printed, 20);
        let later = (0..100)
            .filter(|_| p.take(t0 + Duration::from_millis(1_500)))
            .count();
        assert_eq!(later, 1);
        let after_a_minute = (0..100)
            .filter(|_| p.take(t0 + Duration::from_secs(62)))
            .count();
        assert_eq!(after_a_minute, 20, "the burst comes back, no more");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            printable("warning: \u{1b}[2J\nerror: fake\r"),
            "warning: \\u{1b}[2J\\nerror: fake\\r"
        );
        assert_eq!(printable("/robot1/pose é"), "/robot1/pose é");
    }
}
