//! The QoS of the reader of `echo`, `hz` and `bw`, taken from the publishers they find, as
//! `ros2 topic echo` does (ros2cli #613): the reader is created once the topic's writers
//! are discovered, reliable if all of them are, transient-local if all of them are, so
//! that it matches every one and gets what each offers. A flag given (`--reliable`,
//! `--best-effort`, `--volatile`, `--transient-local`) wins over what is found.

use std::time::{Duration, Instant};

use tether::{Durability, Qos, Session, Topic};

use crate::QosArgs;

/// How long to go on looking once a first writer is found: the other writers of a
/// participant come in the same announcement, those of others on this host within one
/// registry scan.
const SETTLE: Duration = Duration::from_millis(150);

/// How often discovery is looked at (stop is asked as often).
const POLL: Duration = Duration::from_millis(20);

/// How long to wait for a first writer before saying so (unless quiet).
const SAY_AFTER: Duration = Duration::from_secs(1);

/// The reader's QoS for `topic`: the flags' if they fix both reliability and durability,
/// else what the writers found offer. Waits for a first writer, calling `stop` every 20 ms;
/// returns what `stop` returned if it said to stop first.
pub(crate) fn reader_qos<E>(
    session: &Session,
    topic: &Topic,
    args: &QosArgs,
    quiet: bool,
    mut stop: impl FnMut() -> Option<E>,
) -> Result<Qos, E> {
    let mut qos = args.reader_qos();
    let fixed_reliability = args.best_effort || args.reliable;
    let fixed_durability = args.transient_local || args.volatile;
    if fixed_reliability && fixed_durability {
        return Ok(qos);
    }
    let start = Instant::now();
    let mut said = quiet;
    let mut first_found: Option<Instant> = None;
    let writers = loop {
        let w = session.discovered_writers(topic.clone());
        if !w.is_empty() {
            let at = *first_found.get_or_insert_with(Instant::now);
            if at.elapsed() >= SETTLE {
                break w;
            }
        }
        if let Some(e) = stop() {
            return Err(e);
        }
        if !said && start.elapsed() >= SAY_AFTER {
            said = true;
            eprintln!(
                "waiting for a publisher on {}: the subscription takes its reliability and \
                 durability (to subscribe now, give them: --reliable or --best-effort, and \
                 --volatile or --transient-local)",
                topic.name()
            );
        }
        std::thread::sleep(POLL);
    };
    let n = writers.len();
    let reliable = writers
        .iter()
        .filter(|d| d.endpoint.info.qos.is_reliable())
        .count();
    let lasting = writers
        .iter()
        .filter(|d| d.endpoint.info.qos.durability_kind() == Durability::TransientLocal)
        .count();
    let name = topic.name();
    if !fixed_reliability {
        if reliable == n {
            qos = qos.reliable();
        } else {
            qos = qos.best_effort();
            if reliable > 0 && !quiet {
                eprintln!(
                    "note: {reliable} of the {n} publishers on {name} are reliable: \
                     subscribing best-effort to hear all of them (--reliable: only those, \
                     without loss)"
                );
            }
        }
    }
    if !fixed_durability {
        if lasting == n {
            qos = qos.transient_local();
        } else {
            qos = qos.volatile();
            if lasting > 0 && !quiet {
                eprintln!(
                    "note: {lasting} of the {n} publishers on {name} are transient-local: \
                     subscribing volatile to hear all of them, without their earlier \
                     samples (--transient-local: those, from those publishers only)"
                );
            }
        }
    }
    Ok(qos)
}
