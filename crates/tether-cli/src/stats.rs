//! `--stats`: a session's counters on stderr at exit, as a table of those that are not
//! zero, grouped (traffic, samples and repairs, security, drops and refusals), or with the
//! global `--json` as one JSON object holding every counter, zeros included, for programs
//! (`docs/troubleshooting.md#counters`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use tether::Session;

/// The global `--json` flag: `--stats` prints JSON.
static JSON: AtomicBool = AtomicBool::new(false);

/// Sets whether `--stats` prints JSON (the global `--json` flag).
pub(crate) fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

/// Counters that say how much went through.
const TRAFFIC: &[&str] = &[
    "datagrams_received",
    "bytes_received",
    "datagrams_sent",
    "bytes_sent",
    "datagrams_queued",
    "datagrams_scheduled",
    "datagrams_multicast",
    "heartbeats_multicast",
    "send_calls",
    "recv_calls",
    "probes_sent",
    "probes_answered",
    "rtt_probes_sent",
    "rtt_probes_answered",
    "paths_raised",
    "paths_lowered",
    "congestion_events",
    "participants_validated",
    "challenges_sent",
    "addresses_moved",
    "routed_not_followed",
    "peer_links_remade",
    "reannounced",
    "stalls",
    "routers",
    "routers_up",
    "router_connects",
    "router_frames_sent",
    "router_frames_received",
];

/// Counters of samples and of the reliability protocol.
const SAMPLES: &[&str] = &[
    "samples_written",
    "samples_delivered",
    "samples_retransmitted",
    "duplicates",
    "lost",
    "expired",
    "heartbeats_sent",
    "acknacks_sent",
    "nacks_sent",
    "gaps_sent",
    "renacks",
    "nackfrags_sent",
    "fragments_retransmitted",
    "final_heartbeats_unanswered",
    "window_full",
    "resends_suppressed",
    "reassemblies_restarted",
];

/// Counters of the security layer's ordinary work.
const SECURITY: &[&str] = &[
    "samples_sealed",
    "samples_opened",
    "keys_received",
    "keys_wrapped",
    "rekeys",
    "samples_signed",
    "signatures_made",
    "signatures_verified",
    "datagrams_pair_sealed",
    "datagrams_pair_opened",
    "datagrams_tagged",
    "datagrams_authenticated",
    "control_rekeys",
    "control_keys_wrapped",
    "batches_sealed",
    "batches_opened",
    "samples_resealed",
    "held_for_key",
    "refusals_sent",
    "unverified_claims_moved",
    "auth_sent_aside",
];

/// The section a counter is shown in: one of the lists above, else "drops, refusals and
/// errors" (every other counter counts something refused or lost, and a new one is shown
/// there until it is placed).
fn section(name: &str) -> usize {
    [TRAFFIC, SAMPLES, SECURITY]
        .iter()
        .position(|s| s.contains(&name))
        .unwrap_or(3)
}

const TITLES: [&str; 4] = [
    "traffic",
    "samples and repairs",
    "security",
    "drops, refusals and errors (docs/troubleshooting.md#counters)",
];

/// The table: counters that are not zero, by section, names left and values right
/// aligned.
pub(crate) fn table(counters: &[(&str, u64)]) -> String {
    let shown: Vec<&(&str, u64)> = counters.iter().filter(|(_, v)| *v != 0).collect();
    let mut out = String::from("session counters (zeros omitted):\n");
    if shown.is_empty() {
        out.push_str("  (all zero)\n");
        return out;
    }
    let name_w = shown.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let value_w = shown
        .iter()
        .map(|(_, v)| v.to_string().len())
        .max()
        .unwrap_or(0);
    for (i, title) in TITLES.iter().enumerate() {
        let rows: Vec<_> = shown.iter().filter(|(n, _)| section(n) == i).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(out, "  {title}");
        for (n, v) in rows {
            let _ = writeln!(out, "    {n:<name_w$}  {v:>value_w$}");
        }
    }
    out
}

/// One JSON object: every counter by name, zeros included (names are identifiers: no
/// escaping is needed).
pub(crate) fn json(counters: &[(&str, u64)]) -> String {
    let mut out = String::from("{");
    for (i, (n, v)) in counters.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "\"{n}\":{v}");
    }
    out.push('}');
    out
}

/// Prints `session`'s counters on stderr, as a table or (`--json`) as JSON.
pub(crate) fn print(session: &Session) {
    let counters = session.stats().counters();
    if JSON.load(Ordering::Relaxed) {
        eprintln!("{}", json(&counters));
    } else {
        eprint!("{}", table(&counters));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_groups_aligns_and_omits_zeros() {
        let c = [
            ("datagrams_sent", 1234),
            ("bytes_sent", 0),
            ("samples_delivered", 7),
            ("auth_failed", 2),
            ("a_counter_not_yet_placed", 1),
        ];
        let t = table(&c);
        assert_eq!(
            t,
            "session counters (zeros omitted):\n  traffic\n    datagrams_sent            1234\n  \
             samples and repairs\n    samples_delivered            7\n  drops, refusals and \
             errors (docs/troubleshooting.md#counters)\n    auth_failed                  2\n    \
             a_counter_not_yet_placed     1\n"
        );
        assert!(table(&[("lost", 0)]).contains("(all zero)"));
    }

    /// What went through the router links is traffic; what they dropped or refused is
    /// among the drops. (Before, every router counter was listed among the drops.)
    #[test]
    fn router_link_counters_are_traffic_but_their_drops_are_drops() {
        for n in [
            "routers",
            "routers_up",
            "router_connects",
            "router_frames_sent",
            "router_frames_received",
        ] {
            assert_eq!(section(n), 0, "{n}");
        }
        for n in ["router_frames_dropped", "router_bad_frames"] {
            assert_eq!(section(n), 3, "{n}");
        }
    }

    #[test]
    fn json_holds_every_counter() {
        assert_eq!(
            json(&[("datagrams_sent", 3), ("lost", 0)]),
            r#"{"datagrams_sent":3,"lost":0}"#
        );
        assert_eq!(json(&[]), "{}");
    }

    /// Every counter a session has is named in a section or falls in the last, and the
    /// lists name no counter that does not exist.
    #[test]
    fn sections_name_real_counters() {
        let names: Vec<&str> = tether::SessionStats::default()
            .counters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        for list in [TRAFFIC, SAMPLES, SECURITY] {
            for n in list {
                assert!(names.contains(n), "{n} is not a counter");
            }
        }
    }
}
