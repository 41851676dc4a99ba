//! Readers that stop acknowledging.
//!
//! A reliable keep-all writer marks a reader *inactive* once it has owed acknowledgements
//! and sent none (no ACKNACK, no NACK_FRAG) for the writer's inactivity time (its QoS's
//! [`inactive_after`](crate::Qos::inactive_after), else the participant's
//! [`Config::inactive_after`](crate::Config::inactive_after), 3 s by default). The writer
//! then keeps no history for it: it frees what only that reader held and takes new samples
//! again, so one stalled reader (a stopped process, a host gone quiet) cannot hold up the
//! others until its lease ends. The reader stays matched and is still sent what is
//! written. When it answers again it is active again ([`Event::ReaderActive`]) and resumes
//! from what the writer still has: a GAP for the rest, which it counts as lost. The writer
//! counts the samples it let go of before the reader acknowledged them in
//! [`Participant::unacknowledged`].
//!
//! A keep-all writer asks every reader to acknowledge at every heartbeat period, so a live
//! reader behind a lossy link has some thirty chances to answer first. Keep-last writers
//! never wait for a reader, so they have none to let go of. "Strict"
//! ([`Inactivity::Strict`]) keeps DDS's behaviour: a reader holds the history until it
//! acknowledges or its lease ends.

use std::time::{Duration, Instant};

use tether_wire::EntityId;

use crate::event::{Event, Guid};
use crate::participant::{HOUSEKEEPING, Participant, after};
use crate::qos::{History, Inactivity};
use crate::writer::state::{ReaderProxy, Writer};

/// The shortest inactivity time of a reader that has never acknowledged (see
/// [`Writer::limit_for`]): the default lease.
pub(crate) const NEVER_HEARD: Duration = Duration::from_secs(10);

impl Writer {
    /// This writer's inactivity time: its QoS's, else `default` (the participant's).
    /// `None`: strict, or not a reliable keep-all writer.
    /// Never under three heartbeat periods (`period`): a reader that has not been asked to
    /// acknowledge has not been silent (the last sample, and the heartbeat with it, may have
    /// been lost, and it does not know it owes anything until the next heartbeat).
    pub(crate) fn inactive_limit(
        &self,
        default: Option<Duration>,
        period: Duration,
    ) -> Option<Duration> {
        if !self.info.qos.is_reliable() || self.info.qos.history() != History::KeepAll {
            return None;
        }
        let limit = match self.info.qos.inactivity() {
            Some(Inactivity::Strict) => None,
            Some(Inactivity::After(d)) => Some(d),
            None => default,
        };
        limit.map(|d| d.max(period.saturating_mul(3)))
    }

    /// The inactivity time for reader `rp`, of this writer's `limit`: a reader that has
    /// never acknowledged anything has not matched us yet, most likely (our match can come
    /// first; under loss its side may take seconds), so it gets [`NEVER_HEARD`] at least:
    /// its history is not let go of before it could ask for it. A reader that never
    /// matches is gone with its participant's lease. Likewise a reader only `credited`
    /// with being heard when our participant found it had not run (stopped longer than a
    /// lease): it has most likely lost us, and must meet us again before it can answer.
    pub(crate) fn limit_for(limit: Duration, rp: &ReaderProxy, credited: bool) -> Duration {
        if rp.last_count.is_none() || credited {
            limit.max(NEVER_HEARD)
        } else {
            limit
        }
    }

    /// Since when reader `rp` has owed acknowledgements without a word: the later of its
    /// last ACKNACK or NACK_FRAG and the writing of the first sample it owes. `None` if it
    /// owes nothing (or is local or best effort).
    pub(crate) fn quiet_since(&self, rp: &ReaderProxy) -> Option<Instant> {
        let first = rp.settled();
        if !rp.reliable || rp.local || first > self.last_sent() {
            return None;
        }
        Some(
            self.find(first)
                .map_or(rp.heard, |c| c.written.max(rp.heard)),
        )
    }

    /// Reader `g` sent an ACKNACK or a NACK_FRAG at `now`: it is alive. Returns the event
    /// to raise if it was inactive (it is active again).
    pub(crate) fn heard_from(&mut self, g: Guid, now: Instant) -> Option<Event> {
        let rp = self.readers.get_mut(&g)?;
        rp.heard = now;
        rp.answered = true;
        if !rp.inactive {
            return None;
        }
        rp.inactive = false;
        self.inactive -= 1;
        Some(Event::ReaderActive {
            writer: self.id,
            reader: g,
            released: rp.released,
        })
    }
}

impl Participant {
    /// Marks the readers inactive that have owed acknowledgements without a word for their
    /// writer's inactivity time, and frees what they alone held. Runs with the
    /// housekeeping timer.
    pub(crate) fn check_inactive(&mut self, now: Instant) {
        let default = self.cfg.inactive_after;
        let period = self.cfg.heartbeat_period;
        let stalled_at = self.stalled_at;
        for w in self.writers.values_mut() {
            let Some(limit) = w.inactive_limit(default, period) else {
                continue;
            };
            let stalled: Vec<Guid> = w
                .readers
                .iter()
                .filter(|(_, rp)| !rp.inactive)
                .filter(|(_, rp)| {
                    w.quiet_since(rp).is_some_and(|t| {
                        let credited = Some(rp.heard) == stalled_at;
                        now.saturating_duration_since(t) >= Writer::limit_for(limit, rp, credited)
                    })
                })
                .map(|(g, _)| *g)
                .collect();
            if stalled.is_empty() {
                continue;
            }
            for g in stalled {
                if let Some(rp) = w.readers.get_mut(&g) {
                    rp.inactive = true;
                    w.inactive += 1;
                    self.events.push_back(Event::ReaderInactive {
                        writer: w.id,
                        reader: g,
                    });
                }
            }
            // What only they held is free now.
            if let Some(e) = w.release_acked_and_unblock() {
                self.events.push_back(e);
            }
        }
    }

    /// Whether `writer`'s last write was refused for lack of room (in its history or on
    /// its readers' paths) and no room has come since. A driver whose refused write finds
    /// it false has room now: it writes again rather than fail.
    pub fn writer_blocked(&self, writer: EntityId) -> bool {
        self.writers.get(&writer).is_some_and(|w| w.blocked)
    }

    /// When a keep-all `writer` refused for lack of room can expect room, if only readers
    /// that have gone silent hold it: by the time they are marked inactive. `None` if the
    /// writer is not blocked, is strict, or a reader holding its history still answers (a
    /// slow reader, not a stalled one). A driver whose write waited its
    /// `max_blocking_time` waits until then rather than fail for a reader about to be
    /// let go of.
    pub fn room_expected(&self, now: Instant, writer: EntityId) -> Option<Instant> {
        let w = self.writers.get(&writer)?;
        if !w.blocked {
            return None;
        }
        let limit = w.inactive_limit(self.cfg.inactive_after, self.cfg.heartbeat_period)?;
        let front = w.history.front()?.seq;
        // A reader that answered within two heartbeat periods is alive: a keep-all writer
        // asks at every period.
        let alive = self.cfg.heartbeat_period.saturating_mul(2);
        let mut at: Option<Instant> = None;
        for rp in w.readers.values() {
            if !rp.reliable || rp.local || rp.inactive || rp.settled() > front {
                continue;
            }
            // Counted as heard when this participant found it had not run, it has not
            // answered since: it may be a reader about to be let go of.
            let credited = Some(rp.heard) == self.stalled_at;
            if now.saturating_duration_since(rp.heard) < alive && !credited {
                return None;
            }
            let since = w.quiet_since(rp)?;
            // Marked at a housekeeping after its time is up (with room for a driver's
            // timer running late).
            let t = after(
                after(since, Writer::limit_for(limit, rp, credited)),
                HOUSEKEEPING.saturating_mul(4),
            );
            at = Some(at.map_or(t, |a| a.max(t)));
        }
        at
    }
}
