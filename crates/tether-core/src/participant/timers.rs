//! The participant's timers: when it wants to run next, and what runs when it is due
//! (announcements, housekeeping, heartbeats, repairs, deadlines).

use std::time::Instant;

use super::*;

impl Participant {
    /// True (once) if a timer may have become due earlier than the last
    /// [`poll_timeout`](Self::poll_timeout) said: a driver that sleeps until then should
    /// re-read it. A plain `write` that arms no new timer leaves it false.
    pub fn take_timers_changed(&mut self) -> bool {
        std::mem::take(&mut self.timers_changed)
    }

    /// When `handle_timeout` wants to run next (never, once closed).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed {
            return None;
        }
        let mut t = self.peers.next_announce.min(self.next_housekeeping);
        for x in [
            self.keystore.rekey_at,
            self.next_renack,
            self.next_cc_probe,
            self.next_release(),
            self.peers.pending.next_retry(),
        ]
        .into_iter()
        .flatten()
        {
            t = t.min(x);
        }
        for w in self.writers.values() {
            for x in [w.next_hb, w.deadline_at, w.batch_deadline]
                .into_iter()
                .flatten()
            {
                t = t.min(x);
            }
        }
        for r in self.readers.values() {
            if let Some(x) = r.deadline_at {
                t = t.min(x);
            }
        }
        Some(t)
    }

    /// The timers ran over [`STALL`] late: this participant was not running (its process
    /// stopped, its thread starved, its host suspended) and heard nothing meanwhile; what
    /// its peers sent then waits in the socket, read after this or just read. Their silence
    /// until `now` is ours, not theirs: every peer counts as heard now, so none is taken for
    /// gone (lease, liveliness), no reader is let go of as inactive (and its history with
    /// it), and a writer out of reach still owes what it owed for one more lease.
    ///
    /// A peer is credited once: one not heard since the last stall is not credited again,
    /// nor is what a writer owes put off twice, so timers that are always late (a host
    /// starved for good) still let a dead peer go a lease after the first stall.
    fn stalled(&mut self, now: Instant) {
        self.stats.stalls += 1;
        let last = self.stalled_at.replace(now);
        // Heard since the last stall (or none before): credited now. One not heard since
        // was credited then, or let go of already.
        let credit = |t: &mut Instant| {
            if last.is_none_or(|l| *t > l) {
                *t = (*t).max(now);
            }
        };
        // Peers whose lease of us ran out meanwhile find us again as quickly as at start.
        self.peers.announce_step = crate::discovery::FIRST_ANNOUNCE;
        self.peers.next_announce = now;
        for p in self.peers.remotes.values_mut() {
            credit(&mut p.last_heard);
        }
        for w in self.writers.values_mut() {
            for rp in w.readers.values_mut() {
                credit(&mut rp.heard);
            }
        }
        for r in self.readers.values_mut() {
            for wp in r.writers.values_mut() {
                credit(&mut wp.last_heard);
            }
            for l in r.left.iter_mut() {
                if let Some((_, until)) = l.owed.as_mut() {
                    if !l.extended {
                        l.extended = true;
                        *until = (*until).max(after(now, l.lease));
                    }
                }
            }
        }
    }

    /// Runs every timer that is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.note_time(now);
        self.timers_changed = true;
        if self.closed {
            return;
        }
        if now.saturating_duration_since(self.next_housekeeping) > STALL {
            self.stalled(now);
        }
        if now >= self.peers.next_announce {
            self.announce_to(&self.all_destinations(), None);
            let period = self.announce_period();
            self.peers.announce_step = (self.peers.announce_step * 2).min(period);
            self.peers.next_announce = after(now, self.peers.announce_step);
            self.resend_auth(now);
        }
        if now >= self.next_housekeeping {
            self.farewells
                .retain(|(t, _)| now.saturating_duration_since(*t) < FAREWELL_KEEP);
            self.housekeeping(now);
            self.check_inactive(now);
            self.reannounce_to_silent_readers(now);
            self.expire_held(now);
            // Unanswered AUTHs go again on their own schedule (50 ms, doubling), not only
            // with announcements.
            self.resend_auth(now);
            self.next_housekeeping = after(now, HOUSEKEEPING);
        }
        self.retry_challenges(now);
        self.renack(now);
        self.congestion_tick(now);
        self.schedule_rekeys(now);
        if self.keystore.rekey_at.is_some_and(|t| now >= t) {
            self.rekey_due_writers();
        }
        let due: Vec<EntityId> = self
            .writers
            .values()
            .filter(|w| w.batch_deadline.is_some_and(|t| now >= t))
            .map(|w| w.id)
            .collect();
        for w in due {
            self.flush_batch(now, w);
        }
        let hdr = self.header();
        let hb_period = self.cfg.heartbeat_period;
        let fanout = (
            self.peers.fanout_gen,
            multicast_peers(&self.cfg, self.peers.grouped),
            self.cfg.multicast_min,
        );
        let ack_iv = ack_interval(&self.cfg);
        for w in self.writers.values_mut() {
            if w.next_hb.is_some_and(|t| now >= t) {
                if w.has_unacked() {
                    // Samples not yet announced get a heartbeat (final unless it is time to
                    // ask); with nothing new, one goes out only to ask.
                    let last = w.last_sent();
                    let ask = w.asks_acks(now, ack_iv);
                    if last != w.hb_announced || ask {
                        w.hb_announced = last;
                        let first = w.first_available();
                        let hb = crate::writer::state::next_heartbeat(
                            w.id,
                            &mut w.hb_count,
                            &mut w.acks_asked,
                            now,
                            ask,
                            first,
                            last,
                        );
                        heartbeat_all(
                            w,
                            hb,
                            hdr,
                            &self.peers.remotes,
                            fanout,
                            &mut self.transmits,
                            &mut self.stats,
                        );
                        w.next_hb = Some(after(now, hb_period));
                    } else {
                        // Nothing to announce, and not yet time to ask: sleep until it is
                        // (a write brings the heartbeat forward again).
                        let ask = w.acks_asked.map_or(now, |t| after(t, ack_iv));
                        w.next_hb = Some(ask.max(after(now, hb_period)));
                    }
                } else {
                    w.next_hb = None;
                    w.acks_wanted = false;
                }
            }
            if let (Some(t), Some(d)) = (w.deadline_at, w.info.qos.deadline_period()) {
                if now >= t {
                    self.events.push_back(Event::DeadlineMissed {
                        endpoint: w.id,
                        side: DeadlineSide::Offered,
                        topic: w.info.topic.clone(),
                    });
                    w.deadline_at = Some(after(now, d));
                }
            }
            self.stats.expired += w.expire(now);
        }
        for r in self.readers.values_mut() {
            if let (Some(t), Some(d)) = (r.deadline_at, r.info.qos.deadline_period()) {
                if now >= t {
                    self.events.push_back(Event::DeadlineMissed {
                        endpoint: r.id,
                        side: DeadlineSide::Requested,
                        topic: r.info.topic.clone(),
                    });
                    r.deadline_at = Some(after(now, d));
                }
            }
        }
    }
}
