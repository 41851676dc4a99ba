//! Engine events in the log (`tracing`): refusals and mismatches at `warn`, what changes a
//! realm's membership at `info`, discovery, matching and re-keying at `debug`. A program
//! sees them with any `tracing` subscriber; the `tether` command's honours `RUST_LOG` and
//! `TETHER_LOG` (`TETHER_LOG=debug`).
//!
//! Peers are named by the name their credential certifies in a secure realm (the CA vouches
//! for it), else by the name they announce, else by their id alone.

use tether_core::{Event, Guid, Participant, ParticipantId, QosPolicy};
use tracing::Level;

/// The level the session logs event `e` at: refusals and mismatches `warn`; membership,
/// lost samples and inactive readers `info`; discovery, authentication, matching and
/// re-keying `debug`; anything else `trace`.
pub(super) fn level(e: &Event) -> Level {
    match e {
        Event::IncompatibleQos(q) if q.policy == QosPolicy::Partition => Level::INFO,
        Event::IncompatibleQos(_)
        | Event::AuthenticationFailed { .. }
        | Event::AccessDenied { .. }
        | Event::OverLimit { .. }
        | Event::RevocationListRefused { .. }
        | Event::OwnCredentialExpired { .. }
        | Event::OwnCredentialRevoked { .. }
        | Event::RefusedByPeer { .. } => Level::WARN,
        Event::RevocationListApplied { .. }
        | Event::SamplesLost { .. }
        | Event::ReaderInactive { .. }
        | Event::ReaderActive { .. } => Level::INFO,
        Event::ParticipantDiscovered { .. }
        | Event::ParticipantAuthenticated { .. }
        | Event::ParticipantLost { .. }
        | Event::Matched { .. }
        | Event::Unmatched { .. }
        | Event::Rekeyed { .. }
        | Event::LivelinessChanged { .. }
        | Event::DeadlineMissed { .. } => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// Whether the log shows event `e` under the `tracing` subscriber in force (its filter:
/// `RUST_LOG`, `TETHER_LOG` for the `tether` command). A program that prints events
/// itself, as the `tether` command does, can leave out those the log already shows.
pub fn shown(e: &Event) -> bool {
    match level(e) {
        Level::WARN => tracing::enabled!(Level::WARN),
        Level::INFO => tracing::enabled!(Level::INFO),
        Level::DEBUG => tracing::enabled!(Level::DEBUG),
        _ => tracing::enabled!(Level::TRACE),
    }
}

/// How a peer is named in the log: `robot1 (5f2e8c1a9b3d4e70)`, or the id alone.
pub(super) fn peer(core: &Participant, pid: ParticipantId) -> String {
    let certified = core.certified_name(pid).map(str::to_string);
    let announced = || {
        core.remote_participants()
            .into_iter()
            .find(|(id, name, _)| *id == pid && !name.is_empty())
            .map(|(_, name, _)| name)
    };
    match certified.or_else(announced) {
        Some(name) => format!("{name} ({:016x})", pid.0),
        None => format!("{:016x}", pid.0),
    }
}

fn endpoint(core: &Participant, g: Guid) -> String {
    match core.certified_name(g.participant) {
        Some(name) => format!("{g} ({name})"),
        None => g.to_string(),
    }
}

/// Logs `e`, raised by `core`, at its [`level`] (nothing is formatted unless it is shown).
pub(super) fn event(core: &Participant, e: &Event) {
    if !shown(e) {
        return;
    }
    match e {
        Event::ParticipantDiscovered {
            participant,
            name,
            addr,
        } => tracing::debug!(
            "discovered participant {:016x} at {addr}{}",
            participant.0,
            if name.is_empty() {
                String::new()
            } else {
                format!(", named {name:?}")
            }
        ),
        Event::ParticipantAuthenticated { participant, name } => {
            tracing::debug!("participant {:016x} authenticated as {name}", participant.0)
        }
        Event::ParticipantLost { participant } => {
            tracing::debug!(
                "participant {:016x} left (or its lease ran out)",
                participant.0
            )
        }
        Event::Matched {
            local,
            remote,
            topic,
        } => tracing::debug!(
            "matched on {topic}: local endpoint {} with {}",
            local.0,
            endpoint(core, *remote)
        ),
        Event::Unmatched {
            local,
            remote,
            topic,
        } => tracing::debug!(
            "unmatched on {topic}: local endpoint {} and {}",
            local.0,
            endpoint(core, *remote)
        ),
        Event::Rekeyed {
            writer: Some(w),
            epoch,
        } => tracing::debug!("writer {} re-keyed: epoch {epoch}", w.0),
        Event::Rekeyed {
            writer: None,
            epoch,
        } => tracing::debug!("control key re-keyed: epoch {epoch}"),
        Event::IncompatibleQos(q) if q.policy == QosPolicy::Partition => {
            tracing::info!("{q}")
        }
        Event::IncompatibleQos(q) => tracing::warn!("{q}"),
        Event::AuthenticationFailed {
            participant,
            reason,
        } => tracing::warn!("participant {} refused: {reason}", peer(core, *participant)),
        Event::AccessDenied {
            remote,
            topic,
            reason,
            ..
        } => tracing::warn!("{remote} not matched on {topic}: {reason}"),
        Event::RefusedByPeer {
            participant,
            name,
            reason,
        } => tracing::warn!(
            "{name} ({:016x}) refuses our credential: {reason}",
            participant.0
        ),
        Event::OverLimit { participant, limit } => tracing::warn!(
            "participant {}: announcement refused: {limit}",
            peer(core, *participant)
        ),
        Event::RevocationListApplied { serial, revoked } => {
            tracing::info!("revocation list {serial} in force ({revoked} credentials revoked)")
        }
        Event::RevocationListRefused { reason } => {
            tracing::warn!("revocation list refused, the one in force stays: {reason}")
        }
        Event::OwnCredentialExpired { serial, .. } => {
            tracing::warn!("our credential (serial {serial}) expired: peers refuse us")
        }
        Event::OwnCredentialRevoked { serial, list } => {
            tracing::warn!("our credential (serial {serial}) is revoked by revocation list {list}")
        }
        Event::SamplesLost {
            writer,
            first,
            last,
            count,
            reason,
            ..
        } => tracing::info!("lost {count} samples ({first}..={last}) of writer {writer}: {reason}"),
        Event::ReaderInactive { writer, reader } => tracing::info!(
            "writer {}: reader {} inactive",
            writer.0,
            endpoint(core, *reader)
        ),
        Event::ReaderActive { writer, reader, .. } => tracing::info!(
            "writer {}: reader {} active again",
            writer.0,
            endpoint(core, *reader)
        ),
        Event::LivelinessChanged {
            reader,
            writer,
            alive,
        } => tracing::debug!(
            "reader {}: writer {writer} {}",
            reader.0,
            if *alive { "alive" } else { "not alive" }
        ),
        Event::DeadlineMissed {
            endpoint,
            topic,
            side,
            ..
        } => tracing::debug!(topic, ?side, "endpoint {}: deadline missed", endpoint.0),
        _ => tracing::trace!(?e),
    }
}
