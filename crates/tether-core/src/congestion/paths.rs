//! Congestion control at the participant: which paths are controlled, probes leaving and
//! their answers, the per-path queues a keep-all writer's datagrams wait in for room, and
//! the waits readers and writers time repairs by. The controller of one path is
//! [`Congestion`](super::Congestion).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tether_wire::{
    DatagramBuilder, EntityId, HEADER_LEN, PROBE_FIXED_LEN, ParticipantId, ProbeAckRepr, ProbeRepr,
    SUBMESSAGE_HEADER_LEN, Submessage, counts_as_received, leading_probe_id, writer_stream,
};

use super::{Congestion, PathStats};
use crate::discovery::{Peers, group_sent};
use crate::event::{Event, Guid};
use crate::participant::Participant;
use crate::path::is_local;
use crate::transmit::Transmit;
use crate::writer::state::Writer;

/// True if writer `w` has a reliable reader at participant `p` whose acknowledgements its
/// history waits for (not inactive).
pub(crate) fn waits_for(w: &Writer, p: ParticipantId) -> bool {
    let lo = Guid {
        participant: p,
        entity: EntityId(0),
    };
    let hi = Guid {
        participant: p,
        entity: EntityId(u32::MAX),
    };
    w.readers
        .range(lo..=hi)
        .any(|(_, rp)| rp.reliable && !rp.inactive && !rp.local)
}

/// True if the path to participant `p` has room in its window at `now` (or is not
/// controlled); for callers holding other parts of the participant.
pub(crate) fn room(peers: &Peers, p: ParticipantId, now: Instant) -> bool {
    if !peers.controlled {
        return true;
    }
    peers.remotes.get(&p).is_none_or(|r| {
        r.cc.as_ref()
            .is_none_or(|cc| cc.has_room(cc.total(group_sent(&peers.group_sent, r.group)), now))
    })
}

/// How long a writer waits before it answers a reader's repeated request for a sample it
/// re-sent to participant `p`: the path's round trip and the time its queue takes to
/// drain at the pacing rate (the repair may still wait there); before the round trip is
/// measured, what a reader waits. For a routed peer, what a reader waits, plus `backlog`
/// (the time what the driver holds for that link takes to leave), plus the path queue's
/// drain. Zero for a path on this host or with control off (every request is answered).
pub(crate) fn resend_wait(
    peers: &Peers,
    p: ParticipantId,
    now: Instant,
    heartbeat_period: Duration,
    backlog: Duration,
) -> Duration {
    let Some(r) = peers.remotes.get(&p) else {
        return Duration::ZERO;
    };
    // What waits in the path's own queue (congestion control) leaves at the pacing rate.
    let drain = r.cc.as_ref().map_or(Duration::ZERO, |cc| {
        let secs = cc
            .pacing_rate(now)
            .map_or(0.0, |rate| cc.queued as f64 / rate);
        Duration::from_secs_f64(secs.min(1.0))
    });
    // A repair through a router is lost only where a router or our driver drops it (QUIC
    // repairs each hop): re-sending it on every request while the link's queue still
    // holds the last copy multiplied a backlog after an outage into a livelock (the lossy
    // review: 11.6 GB sent for 100 MB, 252 samples never repaired).
    if crate::route::is_routed(&r.addr) {
        return crate::reader::state::renack_interval(r.path.rtt, heartbeat_period)
            + backlog
            + drain;
    }
    let Some(cc) = r.cc.as_ref() else {
        return Duration::ZERO;
    };
    let Some(rtt) = cc.srtt else {
        // Not measured yet (or never answered): as long as a reader would wait.
        return crate::reader::state::renack_interval(r.path.rtt, heartbeat_period);
    };
    rtt + drain
}

/// Bytes of repairs a path's queue holds at least (more with a larger window): a large
/// sample's lost fragments are repaired a megabyte per round at worst.
const REPAIR_QUEUE: u64 = 1 << 20;

/// How often a sender whose writer waits for room on a path looks again, besides being
/// told (`Event::WriterReady`) when an answer opens the window.
pub(crate) const ROOM_RECHECK: Duration = Duration::from_millis(2);

impl Participant {
    /// The congestion controller of a path to `addr`: none on this host or with control
    /// off. A path through a router link is controlled end to end too: QUIC's congestion
    /// control paces each hop and pushes back on the first, but a router's link onward
    /// that is slower than ours overflows the router's queue, whose drops nobody is told
    /// of. Without a controller here a keep-all writer outran it and re-sent what the
    /// router dropped again and again (the BBR review: 3.6–7.7 GB sent for 100 MB; in the
    /// simulator 97 times what was written). A link dialled again is no collapsed path:
    /// unanswered probes halve the window while it is down, as for any silent path, and
    /// the answers open it again once it is back (measured in the simulator: a fresh
    /// controller at each link made again recovered no sooner). Its window has a floor,
    /// [`ROUTED_FLOOR_TIME`](crate::congestion::ROUTED_FLOOR_TIME).
    pub(crate) fn new_congestion(
        &self,
        addr: &SocketAddr,
        now: Instant,
    ) -> Option<Box<Congestion>> {
        if !self.cfg.congestion_control || is_local(addr, &self.cfg.local_addrs) {
            return None;
        }
        Some(Box::new(if crate::route::is_routed(addr) {
            Congestion::routed(now)
        } else {
            Congestion::new(now)
        }))
    }

    /// After the participant table changed: each controlled path counts its participant's
    /// data group, and whether any path is controlled.
    pub(crate) fn sync_congestion_groups(&mut self) {
        let mut controlled = false;
        for r in self.peers.remotes.values_mut() {
            let Some(cc) = r.cc.as_mut() else { continue };
            controlled = true;
            if cc.group() != r.group {
                if let Some(g) = r.group {
                    if !self.peers.group_sent.iter().any(|(a, _)| *a == g) {
                        self.peers.group_sent.push((g, 0));
                    }
                }
                let old = group_sent(&self.peers.group_sent, cc.group());
                let now = group_sent(&self.peers.group_sent, r.group);
                cc.set_group(r.group.map(|g| (g, now)), old);
            }
        }
        self.peers.controlled = controlled;
        if !controlled {
            // Nothing left to probe or hold: no timer may stay due (a stale probe time kept
            // the receive thread waking without pause once the last peer elsewhere left).
            self.next_cc_probe = None;
            self.queued_paths.clear();
        }
    }

    /// Counts a datagram leaving (as built, before pairwise sealing) toward its destination's
    /// path: its bytes if it counts (`docs/wire.md#received`), or, for a probe, what was
    /// sent before it.
    pub(crate) fn count_sent(&mut self, t: &Transmit) {
        if !self.peers.controlled {
            return;
        }
        let head: &[u8] = &t.head;
        let probe = leading_probe_id(head);
        if probe.is_none() && !counts_as_received(head) {
            return;
        }
        let Some(pid) = self.controlled_at(t.dest) else {
            if probe.is_none() {
                if let Some((_, n)) = self.peers.group_sent.iter_mut().find(|(g, _)| *g == t.dest) {
                    *n = n.wrapping_add((head.len() + t.body.len()) as u64);
                    // New bytes to a group are new bytes to its participants' paths: with no
                    // probe due (the last found nothing new to ask about), one is now. (A
                    // writer whose readers all took data on a router link's group sent its
                    // first window, no probe followed it, and it waited for room for good.)
                    if self.next_cc_probe.is_none()
                        && (self.paced_writers > 0 || self.reliable_readers > 0)
                    {
                        self.next_cc_probe = Some(self.clock);
                        self.timers_changed = true;
                    }
                }
            }
            return;
        };
        let Some(r) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        let group = group_sent(&self.peers.group_sent, r.group);
        let Some(cc) = r.cc.as_mut() else { return };
        match probe {
            Some(id) => cc.passed(id, cc.total(group)),
            None => {
                cc.on_sent(head.len() + t.body.len());
                // Probes serve keep-all writers (their window) and reliable readers (their
                // repair wait): best effort alone sends none.
                if self.paced_writers == 0 && self.reliable_readers == 0 {
                    return;
                }
                // New bytes may make a probe due sooner than the timer says.
                if let Some(at) = cc.probe_at(cc.total(group)) {
                    if self.next_cc_probe.is_none_or(|t| at < t) {
                        self.next_cc_probe = Some(at);
                        self.timers_changed = true;
                    }
                }
            }
        }
    }

    /// The participant at `dest` (its unicast address), remembering the last one asked
    /// for: a writer's datagrams mostly go to one address after another, and this runs for
    /// every datagram leaving on a controlled path.
    fn controlled_at(&mut self, dest: SocketAddr) -> Option<ParticipantId> {
        let generation = self.peers.fanout_gen;
        if let Some((g, a, p)) = self.last_dest {
            if g == generation && a == dest {
                return Some(p);
            }
        }
        let pid = self.peers.remote_at.get(&dest).copied()?;
        self.last_dest = Some((generation, dest, pid));
        Some(pid)
    }

    /// Keeps the latest time given: `poll_transmit` (which takes none) paces by it, and
    /// the work a datagram or a timer sets going reads it (a departed writer's hand-over,
    /// the spacing of key unwraps). (It once advanced only with a controlled path: a peer
    /// on the same host or behind a router then read the time the participant started.)
    #[inline]
    pub(crate) fn note_time(&mut self, now: Instant) {
        if now > self.clock {
            self.clock = now;
        }
    }

    /// Sends the congestion controllers' probes that are due, and sets the next one's time.
    /// Costs a branch when no path is controlled (every peer on this host).
    #[inline(always)]
    pub(crate) fn congestion_tick(&mut self, now: Instant) {
        if !self.peers.controlled {
            return;
        }
        self.note_time(now);
        if self.next_cc_probe.is_none_or(|t| now < t) {
            return;
        }
        self.send_due_probes(now);
    }

    fn send_due_probes(&mut self, now: Instant) {
        let hdr = self.header();
        let mut next: Option<Instant> = None;
        let mut due = Vec::new();
        let mut reopened = false;
        for (pid, r) in &self.peers.remotes {
            let Some(cc) = r.cc.as_ref() else { continue };
            let total = cc.total(group_sent(&self.peers.group_sent, r.group));
            match cc.probe_at(total) {
                Some(at) if at <= now => due.push(*pid),
                Some(at) => next = Some(next.map_or(at, |t| t.min(at))),
                None => {}
            }
        }
        for pid in due {
            let mut b = [0u8; 8];
            self.random.get().fill(&mut b);
            let id = u64::from_le_bytes(b);
            let Some(r) = self.peers.remotes.get_mut(&pid) else {
                continue;
            };
            let total = r.cc.as_ref().map_or(0, |cc| {
                cc.total(group_sent(&self.peers.group_sent, r.group))
            });
            let Some(cc) = r.cc.as_mut() else { continue };
            if cc.check_silence(now, total) {
                self.stats.congestion_events += 1;
                reopened = true;
            }
            cc.queue_probe(now, id, total);
            if let Some(at) = cc.probe_at(total) {
                next = Some(next.map_or(at, |t| t.min(at)));
            }
            let addr = r.addr;
            let mut buf = Vec::with_capacity(HEADER_LEN + SUBMESSAGE_HEADER_LEN + PROBE_FIXED_LEN);
            if DatagramBuilder::new(&mut buf, hdr)
                .push(&Submessage::Probe(ProbeRepr { id, padding: 0 }))
                .is_ok()
            {
                self.stats.rtt_probes_sent += 1;
                self.push_transmit(addr, buf.into());
            }
        }
        self.next_cc_probe = next;
        if reopened {
            self.unblock_writers();
        }
    }

    /// A PROBE_ACK answering a congestion controller's probe: the path's round trip and
    /// delivery rate. False if it answers none (a path-size probe's, or unknown).
    pub(crate) fn on_rtt_probe_ack(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        a: &ProbeAckRepr,
    ) -> bool {
        let Some(r) = self.peers.remotes.get_mut(&pid) else {
            return false;
        };
        let group = group_sent(&self.peers.group_sent, r.group);
        let Some(cc) = r.cc.as_mut() else {
            return false;
        };
        let total = cc.total(group);
        let Some(answer) = cc.on_answer(now, a.id, a.received, total) else {
            return false;
        };
        self.stats.rtt_probes_answered += 1;
        if answer.congested {
            self.stats.congestion_events += 1;
        }
        if let Some(at) = cc.probe_at(total) {
            if self.next_cc_probe.is_none_or(|t| at < t) {
                self.next_cc_probe = Some(at);
                self.timers_changed = true;
            }
        }
        if answer.opened {
            self.unblock_writers();
        }
        true
    }

    /// True if every path `writer` sends on takes more of its samples now: less than a
    /// window's worth of paced datagrams waits in each one's queue, and, for a participant
    /// that takes data on a group (a router link's, a multicast group), less than a window
    /// is in flight to it. What goes to a group is not queued per path (one datagram
    /// serves every participant there), so without the second check nothing would hold a
    /// writer whose readers are all behind a router: a router's queue for a slower link
    /// overflowed, told nobody, and the writer's repairs multiplied (the BBR review: 3.6–7.7
    /// GB sent for 100 MB).
    pub(crate) fn paths_have_room(&self, writer: EntityId) -> bool {
        if !self.peers.controlled {
            return true;
        }
        let Some(w) = self.writers.get(&writer) else {
            return true;
        };
        let now = self.clock;
        // Only paths to readers whose acknowledgements the history waits for: a best-effort
        // reader's path, or an inactive reader's (one that stopped answering, a host that
        // froze), must not hold the writer back for the others.
        w.dests.iter().filter(|p| waits_for(w, **p)).all(|p| {
            self.peers.remotes.get(p).is_none_or(|r| {
                r.cc.as_ref().is_none_or(|cc| {
                    cc.accepts(now)
                        && (r.group.is_none()
                            || cc.has_room(
                                cc.total(group_sent(&self.peers.group_sent, r.group)),
                                now,
                            ))
                })
            })
        })
    }

    /// True if `writer` waits for room on the paths to its readers (congestion control),
    /// not for room in its history: for a driver telling its user why a write waited.
    pub fn waits_for_paths(&self, writer: EntityId) -> bool {
        self.writers.get(&writer).is_some_and(|w| w.blocked) && !self.paths_have_room(writer)
    }

    /// Where a datagram leaving goes: on (`Some`), or into its path's queue (`None`) when
    /// it is a paced writer's and must wait — it carries samples and the window has no
    /// room, or earlier datagrams of the path wait (order is kept).
    pub(crate) fn route(&mut self, t: Transmit) -> Option<Transmit> {
        if !self.peers.controlled {
            return Some(t);
        }
        // Best-effort and keep-last writers are never held: without a keep-all reliable
        // writer there is nothing to look at.
        if self.paced_writers == 0 {
            return Some(t);
        }
        let Some(ws) = writer_stream(&t.head) else {
            return Some(t);
        };
        if !self.writers.get(&ws.writer).is_some_and(|w| w.paced()) {
            return Some(t);
        }
        let Some(pid) = self.controlled_at(t.dest) else {
            return Some(t);
        };
        let now = self.clock;
        let Some(r) = self.peers.remotes.get_mut(&pid) else {
            return Some(t);
        };
        let group = group_sent(&self.peers.group_sent, r.group);
        let Some(cc) = r.cc.as_mut() else {
            return Some(t);
        };
        if cc.queue.is_empty() && (!ws.samples || cc.may_send(cc.total(group), now)) {
            if ws.samples {
                cc.spend(t.len(), now);
            }
            return Some(t);
        }
        // Samples nobody's acknowledgement is waited for there (its readers are best
        // effort, or inactive) are not held for room: without room they are dropped, as a
        // congested link would. Nor are repairs held beyond a window's worth (at least
        // REPAIR_QUEUE): the reader asks again. So a path's queue holds what a put let in,
        // and a bounded amount of repairs (a reader, or a forged one, asking again and
        // again cannot grow it).
        let waits = self
            .writers
            .get(&ws.writer)
            .is_some_and(|w| waits_for(w, pid));
        if ws.samples
            && (!waits
                || (ws.addressed
                    && cc
                        .window(now)
                        .is_some_and(|w| cc.queued >= w.max(REPAIR_QUEUE))))
        {
            self.stats.datagrams_dropped_for_room += 1;
            return None;
        }
        if ws.samples {
            cc.queued += t.len() as u64;
        }
        cc.queue.push_back(t);
        if !self.queued_paths.contains(&pid) {
            self.queued_paths.push(pid);
        }
        self.stats.datagrams_queued += 1;
        None
    }

    /// The next datagram a path's queue may release: one of samples while the window has
    /// room, anything else (a heartbeat, a GAP) at once.
    pub(crate) fn release_queued(&mut self) -> Option<Transmit> {
        let now = self.clock;
        let mut i = 0;
        while i < self.queued_paths.len() {
            let pid = self.queued_paths[i];
            let Some(r) = self.peers.remotes.get_mut(&pid) else {
                self.queued_paths.swap_remove(i);
                continue;
            };
            let group = group_sent(&self.peers.group_sent, r.group);
            let Some(cc) = r.cc.as_mut() else {
                self.queued_paths.swap_remove(i);
                continue;
            };
            let Some(front) = cc.queue.front() else {
                self.queued_paths.swap_remove(i);
                continue;
            };
            let ws = writer_stream(&front.head);
            let samples = ws.is_some_and(|ws| ws.samples);
            // Its writer's readers there stopped answering (inactive) or left: what waits
            // for them goes, so a stalled reader cannot hold a queue, and writers, forever.
            let stale = samples
                && ws.is_some_and(|ws| {
                    !self
                        .writers
                        .get(&ws.writer)
                        .is_some_and(|w| waits_for(w, pid))
                });
            if stale {
                let t = cc.queue.pop_front()?;
                cc.queued = cc.queued.saturating_sub(t.len() as u64);
                self.stats.datagrams_dropped_for_room += 1;
                continue;
            }
            if samples && !cc.may_send(cc.total(group), now) {
                i += 1;
                continue;
            }
            let t = cc.queue.pop_front()?;
            if samples {
                cc.spend(t.len(), now);
                let before = cc.queued;
                cc.queued = cc.queued.saturating_sub(t.len() as u64);
                // Room again for writers waiting on this path's queue.
                if cc.window(now).is_some_and(|w| before >= w && cc.queued < w) {
                    self.unblock_writers();
                }
            }
            // The next turn goes to another path.
            if let Some(p) = self.queued_paths.get(i).copied() {
                self.queued_paths.remove(i);
                self.queued_paths.push(p);
            }
            return Some(t);
        }
        None
    }

    /// When a path's queue can next release a datagram: now for one that is not samples,
    /// else when its pacer allows, if its window has room (`None`: nothing queued, or
    /// waiting for an answer to open a window).
    pub(crate) fn next_release(&self) -> Option<Instant> {
        let now = self.clock;
        self.queued_paths
            .iter()
            .filter_map(|pid| {
                let r = self.peers.remotes.get(pid)?;
                let cc = r.cc.as_ref()?;
                let f = cc.queue.front()?;
                if !writer_stream(&f.head).is_some_and(|ws| ws.samples) {
                    return Some(now);
                }
                cc.next_send(cc.total(group_sent(&self.peers.group_sent, r.group)), now)
            })
            .min()
    }

    /// True if a path's queue could release a datagram now.
    pub(crate) fn queued_releasable(&self) -> bool {
        let now = self.clock;
        self.queued_paths.iter().any(|pid| {
            self.peers.remotes.get(pid).is_some_and(|r| {
                r.cc.as_ref().is_some_and(|cc| {
                    cc.queue.front().is_some_and(|f| {
                        !writer_stream(&f.head).is_some_and(|ws| ws.samples)
                            || cc.may_send(
                                cc.total(group_sent(&self.peers.group_sent, r.group)),
                                now,
                            )
                    })
                })
            })
        })
    }

    /// Writers that waited for room may go on: each gets a `WriterReady` once it has room.
    pub(crate) fn unblock_writers(&mut self) {
        let blocked: Vec<EntityId> = self
            .writers
            .values()
            .filter(|w| w.blocked || w.asyncw.is_some())
            .map(|w| w.id)
            .collect();
        for id in blocked {
            if !self.paths_have_room(id) {
                continue;
            }
            let Some(w) = self.writers.get_mut(&id) else {
                continue;
            };
            if w.asyncw.is_some() {
                // Its sender waits for the next scheduled time: tell the driver.
                self.timers_changed = true;
                self.events.push_back(Event::WriterReady { writer: id });
            } else if w.make_room(0) {
                w.blocked = false;
                self.events.push_back(Event::WriterReady { writer: id });
            }
        }
    }

    /// What the congestion controller of the path to `participant` knows (`None`: no such
    /// participant; a path on this host has a [`PathStats`] with no window).
    pub fn path_stats(&self, participant: ParticipantId, now: Instant) -> Option<PathStats> {
        let r = self.peers.remotes.get(&participant)?;
        Some(match r.cc.as_ref() {
            Some(cc) => cc.stats(cc.total(group_sent(&self.peers.group_sent, r.group)), now),
            None => PathStats {
                srtt: r.path.rtt,
                min_rtt: None,
                delivery_rate: 0.0,
                window: None,
                in_flight: 0,
                queued: 0,
                lost: 0,
                congestion_events: 0,
            },
        })
    }
}
