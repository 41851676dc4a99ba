//! What a remote participant may make this one store about it, in bytes and count
//! (`docs/wire.md` section 4): each announced string is at most `max_string_bytes`, an
//! endpoint has at most `max_partitions` partitions, and all it announced (name, endpoints'
//! strings, and the table's own overhead per endpoint and string) stays within
//! `max_peer_metadata_bytes`. Checked on the wire form, before anything is allocated.
//!
//! Refusals are counted ([`Stats::announcements_over_cap`](crate::Stats)) and reported
//! once per peer and kind of limit ([`Event::OverLimit`]).

use std::collections::VecDeque;

use tether_wire::{EndpointRepr, ParticipantId};

use crate::discovery::RemoteEndpoint;
use crate::event::{Event, Guid};
use crate::participant::Participant;
use std::fmt;
use tether_wire::EntityId;

/// What the table spends on a stored string besides its bytes (its `String`, the
/// allocation's rounding).
pub(crate) const STRING_OVERHEAD: u64 = 32;

/// What the table spends on a remote endpoint besides its strings: the entry in its
/// participant's map of endpoints.
pub(crate) const ENDPOINT_OVERHEAD: u64 = std::mem::size_of::<RemoteEndpoint>() as u64 + 32;

/// Peers (and kinds of limit) last reported: each is reported once while it is among the
/// most recent [`REPORTED`]. Bounded, so invented ids refused for their names cannot grow
/// it.
pub(crate) const REPORTED: usize = 256;

/// Bytes stored for a participant's name.
pub(crate) fn name_cost(name: &str) -> u64 {
    name.len() as u64 + STRING_OVERHEAD
}

/// Bytes stored for a remote endpoint: its strings (a member's description of it
/// included) and the table's overhead.
pub(crate) fn stored_cost(e: &RemoteEndpoint) -> u64 {
    let info = &e.info;
    let described = e
        .described
        .as_ref()
        .map(|d| [d.topic.as_str(), d.type_name.as_str()]);
    let strings = [info.topic.as_str(), info.type_name.as_str()]
        .into_iter()
        .chain(info.partitions.iter().map(String::as_str))
        .chain(described.into_iter().flatten());
    ENDPOINT_OVERHEAD
        + strings
            .map(|s| s.len() as u64 + STRING_OVERHEAD)
            .sum::<u64>()
}

/// Whether `s` holds a control character (C0, DEL or C1: escape sequences, line breaks,
/// carriage returns), which no name, topic, type or partition needs.
pub(crate) fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

impl Participant {
    /// Counts a refusal, and reports it once per peer and kind of limit.
    pub(crate) fn over_limit(&mut self, pid: ParticipantId, limit: Limit) {
        let key = (pid, limit.kind());
        let seen: &mut VecDeque<(ParticipantId, u8)> = &mut self.peers.limited;
        if seen.contains(&key) {
            return;
        }
        if seen.len() >= REPORTED {
            seen.pop_front();
        }
        seen.push_back(key);
        self.events.push_back(Event::OverLimit {
            participant: pid,
            limit,
        });
    }

    /// Whether a new remote participant's announced `name` may be stored: `Some` with what
    /// it costs its metadata budget, or `None` (counted) if it is longer than
    /// `max_string_bytes` or holds control characters. Reported only when `report`: a
    /// participant whose address is not validated yet may be anyone writing any source
    /// address, and one report per invented id would let it flood every member's log.
    pub(crate) fn admit_name(
        &mut self,
        pid: ParticipantId,
        name: &str,
        report: bool,
    ) -> Option<u64> {
        let max = self.cfg.max_string_bytes;
        let limit = if name.len() > max {
            Limit::StringBytes {
                field: "name",
                len: name.len(),
                max,
            }
        } else if has_control(name) {
            Limit::ControlCharacters { field: "name" }
        } else {
            return Some(name_cost(name));
        };
        self.stats.announcements_over_cap += 1;
        if report {
            self.over_limit(pid, limit);
        }
        None
    }

    /// Whether endpoint `e` of `pid` is within the per-string and per-endpoint limits;
    /// counted and reported if not.
    pub(crate) fn endpoint_within_limits(
        &mut self,
        pid: ParticipantId,
        e: &EndpointRepr<'_>,
    ) -> bool {
        let max = self.cfg.max_string_bytes;
        let strings = || {
            [("topic", e.topic), ("type", e.type_name)]
                .into_iter()
                .chain(e.partitions.iter().map(|p| ("partition", p)))
        };
        let long = strings().find(|(_, s)| s.len() > max);
        let controlled = strings().find(|(_, s)| has_control(s));
        let limit = if let Some((field, s)) = long {
            Limit::StringBytes {
                field,
                len: s.len(),
                max,
            }
        } else if let Some((field, _)) = controlled {
            Limit::ControlCharacters { field }
        } else if e.partitions.len() > self.cfg.max_partitions {
            Limit::Partitions {
                count: e.partitions.len(),
                max: self.cfg.max_partitions,
            }
        } else {
            return true;
        };
        self.stats.announcements_over_cap += 1;
        self.over_limit(pid, limit);
        false
    }
}

/// A limit on what a remote participant can make this one store ([`Event::OverLimit`]);
/// its `Display` says it in words.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// A string it announced (its name, or an endpoint's topic, type or partition) is
    /// longer than `Config::max_string_bytes`: the announcement is refused.
    StringBytes {
        /// `name`, `topic`, `type` or `partition`.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A string it announced (its name, or an endpoint's topic, type or partition) holds
    /// control characters (escape sequences, line breaks), which would rewrite the terminal
    /// or log of whoever prints it: the announcement is refused.
    ControlCharacters {
        /// `name`, `topic`, `type` or `partition`.
        field: &'static str,
    },
    /// An endpoint with more partitions than `Config::max_partitions`: refused.
    Partitions {
        /// How many it announced.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Its endpoints would take what is stored for it past
    /// `Config::max_peer_metadata_bytes`: the endpoint is refused.
    MetadataBytes {
        /// The limit.
        max: usize,
    },
    /// It announced more than `Config::max_endpoints_per_participant` endpoints: the
    /// further ones are refused (also counted in `Stats::table_full`).
    Endpoints {
        /// The limit.
        max: usize,
    },
    /// One of its writers holds `Config::max_reassembly_bytes_per_writer` in a reader's
    /// samples being reassembled (or 256 samples): its further fragments are refused
    /// until some complete or expire.
    WriterReassembly {
        /// The writer.
        writer: Guid,
        /// The limit in bytes.
        max: usize,
    },
    /// A local reader holds `Config::max_reassembly_bytes` in samples being reassembled
    /// (or 1,024 samples): this peer's fragment was refused.
    ReaderReassembly {
        /// The reader.
        reader: EntityId,
        /// The limit in bytes.
        max: usize,
    },
}

impl Limit {
    /// Which kind of limit (a peer is reported once per kind).
    pub(crate) fn kind(&self) -> u8 {
        match self {
            Limit::StringBytes { .. } => 0,
            Limit::Partitions { .. } => 1,
            Limit::MetadataBytes { .. } => 2,
            Limit::WriterReassembly { .. } => 3,
            Limit::ReaderReassembly { .. } => 4,
            Limit::Endpoints { .. } => 5,
            Limit::ControlCharacters { .. } => 6,
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::StringBytes { field, len, max } => write!(
                f,
                "an announced {field} of {len} bytes is longer than max_string_bytes ({max})"
            ),
            Limit::ControlCharacters { field } => write!(
                f,
                "an announced {field} holds control characters (escape sequences or line breaks)"
            ),
            Limit::Partitions { count, max } => write!(
                f,
                "an endpoint with {count} partitions has more than max_partitions ({max})"
            ),
            Limit::MetadataBytes { max } => write!(
                f,
                "its endpoints would take more than max_peer_metadata_bytes ({max} bytes)"
            ),
            Limit::Endpoints { max } => {
                write!(
                    f,
                    "it announced more than max_endpoints_per_participant ({max})"
                )
            }
            Limit::WriterReassembly { writer, max } => write!(
                f,
                "writer {writer} holds max_reassembly_bytes_per_writer ({max} bytes) in samples being reassembled"
            ),
            Limit::ReaderReassembly { reader, max } => write!(
                f,
                "reader {} holds max_reassembly_bytes ({max} bytes) in samples being reassembled",
                reader.0
            ),
        }
    }
}
