//! Engine events in the log (`tracing`): refusals and mismatches at `warn`, what changes a
//! realm's membership at `info`, discovery, matching and re-keying at `debug`. A program
//! sees them with any `tracing` subscriber; the `tether` command's honours `RUST_LOG` and
//! `TETHER_LOG` (`TETHER_LOG=debug`).
//!
//! Peers are named by the name their credential certifies in a secure realm (the CA vouches
//! for it), else by the name they announce, else by their id alone.

use tether_core::{Event, Guid, Participant, ParticipantId, QosPolicy};

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

/// Logs `e`, raised by `core`.
pub(super) fn event(core: &Participant, e: &Event) {
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
