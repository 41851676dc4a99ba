//! Departures: a remote endpoint or participant that is gone (a goodbye, a lease that ran
//! out, a revocation, a replacement) is unmatched, what it owed our writers is recorded,
//! and a writer gone for good hands over what our readers hold of it.

use tether_wire::{EndpointKind, EntityId, ParticipantId};

use crate::event::{Departure, Event, Guid, Shortfall};
use crate::participant::{Participant, after};
use crate::writer::state::MAX_DEPARTED;

impl Participant {
    /// Remote endpoint `eid` of `pid` is gone, for `why`: it is unmatched, and what it
    /// owed our writers is recorded as never to come.
    pub(crate) fn remove_remote_endpoint(
        &mut self,
        pid: ParticipantId,
        eid: EntityId,
        why: Departure,
    ) {
        // A writer whose lease ran out may only be out of reach: the reader resumes where
        // it stood when they meet again, and the writer repairs what it still has.
        self.remove_remote_endpoint_with(pid, eid, why, why != Departure::LeaseExpired);
    }

    /// [`remove_remote_endpoint`](Self::remove_remote_endpoint); `for_good`: the endpoint will
    /// not come back (a writer hands over what its readers hold of it, holes counted lost),
    /// false for one that may (a lease that ran out, an endpoint announced anew with
    /// another description).
    pub(crate) fn remove_remote_endpoint_with(
        &mut self,
        pid: ParticipantId,
        eid: EntityId,
        why: Departure,
        for_good: bool,
    ) {
        let Some(rp) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        let Some(e) = rp.endpoints.remove(&eid) else {
            return;
        };
        rp.metadata = rp.metadata.saturating_sub(crate::limits::stored_cost(&e));
        let lease = rp.lease;
        let name = rp.name.clone();
        let credential = rp.auth.as_ref().and_then(|a| a.credential.as_ref());
        let certified = credential.map(|c| c.name.clone());
        let owner = credential.map(|c| c.serial);
        let gone = Guid {
            participant: pid,
            entity: eid,
        };
        self.keystore.keys.retain(|(g, _), _| *g != gone);
        self.keystore.batch_windows.retain(|(g, _), _| *g != gone);
        self.keystore.key_asked.remove(&gone);
        let g = Guid {
            participant: pid,
            entity: eid,
        };
        self.matches.reported.retain(|(_, r, _)| *r != g);
        match e.kind {
            EndpointKind::Reader => {
                for w in self.writers.values_mut() {
                    if let Some(proxy) = w.readers.remove(&g) {
                        w.inactive -= usize::from(proxy.inactive);
                        // What it never acknowledged will never be: the writer says so.
                        let samples = proxy.unacknowledged(w.next_seq);
                        if samples > 0 && w.departed.len() < MAX_DEPARTED {
                            if why == Departure::LeaseExpired {
                                w.lapsed.push(crate::writer::state::Lapsed {
                                    reader: g,
                                    owner,
                                    proxy: proxy.clone(),
                                    unheard: w.unheard,
                                    samples,
                                    awaited_until: after(self.clock, lease),
                                });
                            }
                            w.departed.push(Shortfall {
                                reader: g,
                                name: name.clone(),
                                samples,
                                departed: true,
                                inactive: false,
                                why: Some(why),
                                certified_name: certified.clone(),
                            });
                        } else {
                            w.departed_more = w.departed_more.saturating_add(samples);
                        }
                        w.rebuild_dests();
                        w.release_acked();
                        // A reader that left must not read what is written from now on:
                        // the writer moves to a new epoch before it seals again. Readers
                        // that leave together (a host shutting down its sessions) share
                        // one new epoch, where a re-key each would cost every writer
                        // N + (N - 1) + … key wraps.
                        if w.key.is_some() {
                            w.rekey_due = true;
                            self.keystore.rekey_wanted = true;
                        }
                        self.events.push_back(Event::Unmatched {
                            local: w.id,
                            remote: g,
                            topic: w.info.topic.clone(),
                        });
                        if w.blocked {
                            self.events.push_back(Event::WriterReady { writer: w.id });
                        }
                    }
                }
            }
            EndpointKind::Writer => {
                if let Some(rs) = self.matches.remote_writer_readers.remove(&g) {
                    let now = self.clock;
                    for r in rs {
                        if let Some(r) = self.readers.get_mut(&r) {
                            if let Some(mut wp) = r.writers.remove(&g) {
                                if for_good {
                                    let mut losses = crate::reader::lost::Losses {
                                        reader: r.id,
                                        stats: &mut self.stats,
                                        lost: &mut r.lost,
                                        events: &mut self.events,
                                    };
                                    let d = wp.writer_left(
                                        &mut r.cache,
                                        now,
                                        self.input,
                                        g,
                                        &mut losses,
                                    );
                                    crate::reader::note_delivered(
                                        r,
                                        d,
                                        now,
                                        &mut self.stats,
                                        &mut self.events,
                                    );
                                }
                                // One that may come back owes what this reader misses
                                // of it for one more lease; then it is taken as gone.
                                let owed_until = (!for_good).then(|| (after(now, lease), lease));
                                if let Some(mut old) = r.remember(g, &mut wp, owed_until, owner) {
                                    crate::reader::lost::settle(
                                        r,
                                        &mut old,
                                        now,
                                        self.input,
                                        &mut self.stats,
                                        &mut self.events,
                                    );
                                }
                            }
                            r.remember_label(g, e.info.qos.encoding_label());
                            self.events.push_back(Event::Unmatched {
                                local: r.id,
                                remote: g,
                                topic: r.info.topic.clone(),
                            });
                        }
                    }
                }
            }
        }
    }

    /// Participant `pid` is gone, for `why`, and its endpoints with it.
    pub(crate) fn remove_participant(&mut self, pid: ParticipantId, why: Departure) {
        let Some(rp) = self.peers.remotes.get(&pid) else {
            return;
        };
        let ids: Vec<EntityId> = rp.endpoints.keys().copied().collect();
        for e in ids {
            self.remove_remote_endpoint(pid, e, why);
        }
        if let Some(rp) = self.peers.remotes.remove(&pid) {
            self.peers.fanout_gen += 1;
            self.left_address(pid, rp.addr);
            self.peers.grouped -= rp.group.is_some() as usize;
            self.resize_paths();
        }
        self.events
            .push_back(Event::ParticipantLost { participant: pid });
    }
}
