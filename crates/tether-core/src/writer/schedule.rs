//! Asynchronous writers: the sender's turns by priority class and flow controller.

use std::time::Instant;

use tether_wire::EntityId;

use crate::congestion::{ROOM_RECHECK, room};
use crate::event::Event;
use crate::writer::flow::{Bucket, FlowController, Priority};

use crate::participant::{Participant, after};
use crate::reliability::ack_interval;
use crate::transmit::Transmit;
use crate::writer::packer::Outgoing;
use crate::writer::{frag_size, single_payload};

/// The asynchronous writers' sender: flow controllers and turns by priority class.
#[derive(Debug, Default)]
pub(crate) struct Scheduler {
    /// Named flow controllers (token buckets) of asynchronous writers.
    pub(crate) buckets: Vec<Bucket>,
    /// Asynchronous writers by priority class, and where each class's turn stands.
    pub(crate) classes: [Vec<EntityId>; 3],
    pub(crate) turn: [usize; 3],
}

impl Participant {
    /// Defines (or redefines) a named flow controller for asynchronous writers. A writer
    /// names it in its QoS ([`Qos::flow_controller`](crate::Qos::flow_controller)); several writers may share one.
    pub fn set_flow_controller(&mut self, name: &str, spec: FlowController) {
        match self.sched.buckets.iter_mut().find(|b| b.name == name) {
            Some(b) => {
                // A fresh bucket under the new setting (an unlimited one holds no real
                // count of tokens), keeping the byte count.
                let bytes = b.bytes;
                *b = Bucket::new(name.to_string(), spec);
                b.bytes = bytes;
            }
            None => self.sched.buckets.push(Bucket::new(name.to_string(), spec)),
        }
    }

    /// The flow controllers: name, settings, and bytes let through so far.
    pub fn flow_controllers(&self) -> impl Iterator<Item = (&str, FlowController, u64)> {
        self.sched
            .buckets
            .iter()
            .map(|b| (b.name.as_str(), b.spec, b.bytes))
    }

    /// The next datagram of an asynchronous writer, if one may leave at `now`: the highest
    /// priority class first, the writers of a class in turn (one datagram each), each only
    /// while its flow controller holds tokens. A driver's sender calls this until it returns
    /// `None`, then waits until [`next_scheduled`](Self::next_scheduled) or a new write.
    /// Heartbeats, repairs and synchronous writers' data never wait here: they come from
    /// [`poll_transmit`](Self::poll_transmit). Once it has sent a datagram it polled, the
    /// driver says so with [`scheduled_sent`](Self::scheduled_sent).
    pub fn poll_scheduled(&mut self, now: Instant) -> Option<Transmit> {
        self.poll_scheduled_in(now, &Priority::ALL)
    }

    /// [`poll_scheduled`](Self::poll_scheduled) for the given classes only, most urgent
    /// first: a driver may drain bulk from a thread of lower OS priority than the others.
    pub fn poll_scheduled_in(&mut self, now: Instant, classes: &[Priority]) -> Option<Transmit> {
        for p in classes {
            let class = p.index();
            let n = self.sched.classes[class].len();
            for k in 0..n {
                let i = (self.sched.turn[class] + k) % n;
                let id = self.sched.classes[class][i];
                if let Some(t) = self.release(now, id) {
                    self.sched.turn[class] = (i + 1) % n;
                    return Some(self.seal_for_peer(t));
                }
            }
        }
        None
    }

    /// When [`poll_scheduled`](Self::poll_scheduled) will next have a datagram: `now` if it
    /// has one, the next token refill if every waiting writer is out of tokens, `None` if no
    /// asynchronous writer has anything to send.
    pub fn next_scheduled(&mut self, now: Instant) -> Option<Instant> {
        self.next_scheduled_in(now, &Priority::ALL)
    }

    /// [`next_scheduled`](Self::next_scheduled) for the given classes only.
    pub fn next_scheduled_in(&mut self, now: Instant, classes: &[Priority]) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        for p in classes {
            for id in &self.sched.classes[p.index()] {
                let Some(w) = self.writers.get(id) else {
                    continue;
                };
                let Some(a) = &w.asyncw else { continue };
                if a.seq >= w.next_seq || w.dests.is_empty() {
                    continue;
                }
                let at = match a.bucket {
                    Some(b) => self.sched.buckets[b].next_ready(now),
                    None => now,
                };
                // Waiting for room on the path of its next datagram: told when an answer
                // opens it, and looking again soon in case that answer is lost.
                let next = w.dests.get(a.dest).copied();
                let at = match next {
                    Some(p) if w.info.qos.is_reliable() && !room(&self.peers, p, now) => {
                        at.max(now + ROOM_RECHECK)
                    }
                    _ => at,
                };
                t = Some(t.map_or(at, |x| x.min(at)));
            }
        }
        t
    }

    /// The driver has sent the datagrams it polled from
    /// [`poll_scheduled_in`](Self::poll_scheduled_in) for these classes. A sample is released
    /// (forgotten by a writer without history, announced by heartbeats) only then: a heartbeat
    /// must not announce a sample still on its way out of another thread, or readers would
    /// ask for it again. Call it before polling these classes again.
    pub fn scheduled_sent(&mut self, classes: &[Priority]) {
        for p in classes {
            for id in &self.sched.classes[p.index()] {
                let Some(w) = self.writers.get_mut(id) else {
                    continue;
                };
                let Some(seq) = w.asyncw.as_mut().and_then(|a| a.sending.take()) else {
                    continue;
                };
                if let Some(a) = w.asyncw.as_mut() {
                    a.released = a.released.max(seq);
                }
                w.forget_released();
                if w.blocked && w.make_room(0) {
                    w.blocked = false;
                    self.events.push_back(Event::WriterReady { writer: *id });
                }
            }
        }
    }

    /// The priority class of an asynchronous writer (`None` for a synchronous one).
    pub fn writer_priority(&self, writer: EntityId) -> Option<Priority> {
        self.writers
            .get(&writer)
            .and_then(|w| w.asyncw.as_ref())
            .map(|a| a.priority)
    }

    /// Samples an asynchronous writer has accepted but not yet released to every reader's
    /// participant (0 for a synchronous one).
    pub fn unsent(&self, writer: EntityId) -> u64 {
        self.writers.get(&writer).map_or(0, |w| {
            w.asyncw
                .as_ref()
                .map_or(0, |a| (w.next_seq - 1).saturating_sub(a.released))
        })
    }

    /// Releases one datagram of asynchronous writer `id`, if it has one and tokens allow.
    pub(crate) fn release(&mut self, now: Instant, id: EntityId) -> Option<Transmit> {
        let hdr = self.header();
        // The most fragments any destination needs: theirs are smallest.
        let smallest = self.writer_datagram(id);
        let overhead = self.seal_overhead();
        let hb_period = self.cfg.heartbeat_period;
        let ack_iv = ack_interval(&self.cfg);
        let w = self.writers.get_mut(&id)?;
        let every = w.heartbeat_every();
        let a = w.asyncw.as_mut()?;
        if a.seq >= w.next_seq {
            return None;
        }
        if w.dests.is_empty() {
            // No one to send to (any more): everything waiting is released.
            a.seq = w.next_seq;
            a.released = w.next_seq - 1;
            a.frag = 0;
            a.dest = 0;
            a.hb = None;
            w.forget_released();
            return None;
        }
        if let Some(b) = a.bucket {
            if !self.sched.buckets[b].ready(now) {
                return None;
            }
        }
        // A reliable writer's next datagram waits for room on its path (congestion
        // control); best effort goes as its flow controller allows.
        let reliable = w.info.qos.is_reliable();
        if reliable
            && w.dests
                .get(a.dest)
                .is_some_and(|p| !room(&self.peers, *p, now))
        {
            return None;
        }
        // The sample at the cursor, or the next one kept (keep-last may have dropped some).
        let i = w.history.partition_point(|c| c.seq < a.seq);
        let Some(c) = w.history.get(i) else {
            a.seq = w.next_seq;
            a.released = w.next_seq - 1;
            return None;
        };
        if c.seq != a.seq {
            a.released = c.seq - 1;
            a.seq = c.seq;
            a.frag = 0;
            a.dest = 0;
            a.hb = None;
        }
        let outgoing = |dest: usize| {
            // Each destination gets fragments of its own path's size.
            let size = self.peers.remotes.get(&w.dests[dest])?.datagram;
            let size = size.saturating_sub(overhead);
            Some(Outgoing {
                hdr,
                single: single_payload(size),
                frag_size: frag_size(size),
                dest: self.peers.remotes.get(&w.dests[dest]).map(|r| r.addr)?,
                writer: id,
                reader: EntityId::ALL,
                seq: c.seq,
                timestamp_ns: c.timestamp_ns,
                payload: &c.payload,
            })
        };
        let most = Outgoing {
            single: single_payload(smallest),
            frag_size: frag_size(smallest),
            ..outgoing(0)?
        }
        .frag_count();
        // Fragment `a.frag` for the next destination that has one (those with larger
        // datagrams have fewer fragments).
        let (o, count) = loop {
            if a.dest >= w.dests.len() {
                a.dest = 0;
                a.frag += 1;
            }
            let o = outgoing(a.dest)?;
            let count = o.frag_count();
            if a.frag < count || a.frag >= most {
                break (o, count);
            }
            a.dest += 1;
        };
        if a.frag == 0 && a.dest == 0 {
            // A new sample: decide whether its last datagram carries a heartbeat (always
            // for fragmented samples, so readers repair them at once).
            w.since_hb += 1;
            a.hb = None;
            if reliable && (most > 1 || w.since_hb >= every) {
                w.since_hb = 0;
                let ask = crate::writer::state::asks_acks(
                    &w.info,
                    w.acks_wanted,
                    w.acks_asked,
                    &w.readers,
                    now,
                    ack_iv,
                );
                let first = w.history.front().map_or(c.seq, |f| f.seq);
                a.hb = Some(crate::writer::state::next_heartbeat(
                    id,
                    &mut w.hb_count,
                    &mut w.acks_asked,
                    now,
                    ask,
                    first,
                    c.seq,
                ));
            }
        }
        let last_frag = a.frag + 1 >= count;
        let hb = a.hb.as_ref().filter(|_| last_frag);
        if hb.is_some() {
            self.stats.heartbeats_sent += 1;
        }
        let t = o.datagram(a.frag.min(count - 1), hb, &mut self.stats);
        self.stats.datagrams_scheduled += 1;
        if let Some(b) = a.bucket {
            self.sched.buckets[b].spend(t.len());
        }
        a.dest += 1;
        if a.dest >= w.dests.len() && a.frag + 1 >= most {
            // Released once the driver says it has sent it (`scheduled_sent`).
            a.sending = Some(a.seq);
            a.seq += 1;
            a.frag = 0;
            a.dest = 0;
            a.hb = None;
        }
        if reliable && w.heartbeat_by(after(now, hb_period)) {
            self.timers_changed = true;
        }
        Some(t)
    }

    /// Repairs of an asynchronous writer leave at once (they are late already) but are paid
    /// for from its flow controller, so the long-run rate holds on lossy links too.
    pub(crate) fn charge(&mut self, writer: EntityId, bytes: u64) {
        if let Some(b) = self
            .writers
            .get(&writer)
            .and_then(|w| w.asyncw.as_ref())
            .and_then(|a| a.bucket)
        {
            self.sched.buckets[b].spend(bytes as usize);
        }
    }
}
