//! What `tether topics` and `tether info` print from the endpoints a session discovered.
//!
//! In a secure realm endpoints are announced under their topic's 256-bit id; a member reads
//! the name and type from the description each announcement carries sealed for the realm
//! (`docs/wire.md#endpoint`), so members see names and outsiders (and routers) see only
//! `#` and 64 hex digits. Topics are listed and matched by the name a session can read.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tether::{DiscoveredEndpoint, Encoding, EndpointKind, ProtectionMode, kind_str};

/// Whether `topic` is a topic id as announced in a secure realm (`#` and 64 hex digits):
/// a name this session could not read.
pub(crate) fn is_id(topic: &str) -> bool {
    topic
        .strip_prefix('#')
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[derive(Default)]
struct Row {
    type_name: String,
    publishers: usize,
    subscribers: usize,
}

/// `tether topics`: one topic a line (`verbose`: with its type and endpoint counts).
pub(crate) fn topics(found: &[DiscoveredEndpoint], verbose: bool) -> String {
    let mut map: BTreeMap<&str, Row> = BTreeMap::new();
    for d in found {
        let row = map.entry(d.topic_name()).or_default();
        if row.type_name.is_empty() {
            row.type_name = d.type_name().to_string();
        }
        match d.endpoint.kind {
            EndpointKind::Writer => row.publishers += 1,
            EndpointKind::Reader => row.subscribers += 1,
        }
    }
    let mut out = String::new();
    for (t, r) in &map {
        if verbose {
            let ty = if r.type_name.is_empty() {
                "-"
            } else {
                &r.type_name
            };
            let _ = writeln!(
                out,
                "{t} [{ty}] publishers: {}, subscribers: {}",
                r.publishers, r.subscribers
            );
        } else {
            let _ = writeln!(out, "{t}");
        }
    }
    out
}

/// The note `topics` and `info` print on stderr when some topics showed as ids only.
pub(crate) fn sealed_note(found: &[DiscoveredEndpoint], member: bool) -> Option<String> {
    let ids = found.iter().filter(|d| is_id(d.topic_name())).count();
    let (n, are) = if ids == 1 {
        ("1 endpoint".to_string(), "is")
    } else {
        (format!("{ids} endpoints"), "are")
    };
    (ids > 0).then(|| {
        if member {
            format!(
                "note: {n} {are} shown by topic id: their names are sealed for another \
                 realm, or their sessions do not describe them"
            )
        } else {
            format!(
                "note: {n} {are} shown by topic id only: they are in a secure realm, whose \
                 members alone read topic names (run with --keys)"
            )
        }
    })
}

/// `tether info TOPIC`: the endpoints on `topic` (a name, or a topic id as `topics`
/// shows it to a session outside the realm) and their QoS.
pub(crate) fn info(found: &[DiscoveredEndpoint], topic: &str) -> String {
    let eps: Vec<&DiscoveredEndpoint> = found
        .iter()
        .filter(|d| d.topic_name() == topic || d.endpoint.info.topic == topic)
        .collect();
    let pubs = eps
        .iter()
        .filter(|d| d.endpoint.kind == EndpointKind::Writer)
        .count();
    let mut out = String::new();
    let _ = writeln!(out, "Topic: {topic}");
    let _ = writeln!(out, "Publisher count: {pubs}");
    let _ = writeln!(out, "Subscriber count: {}", eps.len() - pubs);
    for d in eps {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  {} {} (session {})",
            kind_str(d.endpoint.kind),
            d.guid,
            d.session_name().unwrap_or("unnamed")
        );
        let ty = d.type_name();
        let _ = writeln!(out, "    type: {}", if ty.is_empty() { "-" } else { ty });
        let i = &d.endpoint.info;
        if !i.partitions.is_empty() {
            let _ = writeln!(out, "    partitions: {}", i.partitions.join(", "));
        }
        if d.encoding() != Encoding::Unset {
            let _ = writeln!(out, "    encoding: {}", d.encoding());
        }
        if d.endpoint.protection != ProtectionMode::Unannounced {
            let _ = writeln!(
                out,
                "    protection: {} ({})",
                d.endpoint.protection,
                match d.endpoint.kind {
                    EndpointKind::Writer => "as it sends",
                    EndpointKind::Reader => "as it requires",
                }
            );
        }
        let _ = writeln!(out, "    qos: {}", i.qos);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_told_from_names() {
        assert!(is_id(&format!("#{}", "a1".repeat(32))));
        assert!(!is_id("/chatter"));
        assert!(!is_id("#abc"));
        assert!(!is_id(&format!("#{}", "zz".repeat(32))));
    }
}
