//! What a reader will never deliver: counted in `Stats::lost` and raised as `SamplesLost`
//! runs; and where a reader stood with writers it lost, so that meeting them again counts
//! what was written meanwhile instead of starting afresh.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use tether_wire::EntityId;

use crate::event::{Event, Guid, LossReason, Sample, Stats};
use crate::reader::state::{Reader, WriterProxy};

/// Where one reader's losses go: its own count, the participant's counters and event queue.
pub(crate) struct Losses<'a> {
    pub(crate) reader: EntityId,
    /// The reader's own count ([`Participant::reader_lost`](crate::Participant::reader_lost)).
    pub(crate) lost: &'a mut u64,
    pub(crate) stats: &'a mut Stats,
    pub(crate) events: &'a mut VecDeque<Event>,
}

impl Losses<'_> {
    /// Sequence numbers `first..=last` of `writer` are lost for `reason`. A run that
    /// continues the last event queued (same reader, writer and reason) extends it, so a
    /// stream of losses between two polls is one event.
    pub(crate) fn report(&mut self, writer: Guid, first: u64, last: u64, reason: LossReason) {
        if last < first {
            return;
        }
        // A heartbeat or GAP may name any range (a forged one the whole space): counts
        // saturate rather than overflow.
        let count = (last - first).saturating_add(1);
        self.stats.lost = self.stats.lost.saturating_add(count);
        *self.lost = self.lost.saturating_add(count);
        if let Some(Event::SamplesLost {
            reader,
            writer: w,
            last: l,
            count: c,
            reason: r,
            ..
        }) = self.events.back_mut()
        {
            if *reader == self.reader
                && *w == writer
                && *r == reason
                && l.checked_add(1) == Some(first)
            {
                *l = last;
                *c = c.saturating_add(count);
                return;
            }
        }
        self.events.push_back(Event::SamplesLost {
            reader: self.reader,
            writer,
            first,
            last,
            count,
            reason,
        });
    }
}

/// Most writers a reader remembers where it stood with after losing them; the oldest is
/// forgotten first.
pub(crate) const MAX_REMEMBERED: usize = 64;

impl Reader {
    /// Writer `g` is gone from this reader (its endpoint or participant left, or its lease
    /// ran out): remembers the next sequence number it would have delivered from it.
    /// `owed_until` (with the lease its participant announced): a writer whose lease ran
    /// out, which may come back and repair what this reader misses of it: until then what
    /// it misses is owed ([`Reader::owed`]), and the samples it holds past a hole are kept
    /// with this memory; past it (or when this memory is forgotten for a newer one) the
    /// writer is taken as gone: what is kept is delivered and the holes are lost
    /// ([`LossReason::WriterLeft`]), as when a writer says goodbye.
    /// The memory forgotten is returned, to be settled ([`settle`]).
    #[must_use]
    pub(crate) fn remember(
        &mut self,
        g: Guid,
        wp: &mut WriterProxy,
        owed_until: Option<(Instant, Duration)>,
        owner: Option<u64>,
    ) -> Option<Left> {
        let next = if wp.reliable {
            wp.expected.or(wp.resume)
        } else if wp.last_delivered > 0 {
            Some(wp.last_delivered + 1)
        } else {
            wp.resume
        };
        let next = next?;
        let lease = owed_until.map_or(Duration::ZERO, |(_, l)| l);
        let owed = match owed_until {
            Some((until, _)) if wp.reliable => {
                let held = wp.pending.last_key_value().map_or(0, |(&s, _)| s);
                let top = wp.hb_last.max(held);
                (top >= next).then_some((top, until))
            }
            _ => None,
        };
        self.left.retain(|l| l.writer != g);
        // The oldest of those that said goodbye goes first: a writer whose lease ran out
        // may come back (a process stopped, a link down) and must find where this reader
        // stood, or it is read again from where the writer thinks it stands (duplicates)
        // and what was given up on is delivered after all.
        let forgotten = if self.left.len() >= MAX_REMEMBERED {
            match self.left.iter().position(|l| !l.may_return) {
                Some(i) => self.left.remove(i),
                None => self.left.pop_front(),
            }
        } else {
            None
        };
        let held = if owed.is_some() {
            wp.pending_bytes = 0;
            std::mem::take(&mut wp.pending)
        } else {
            BTreeMap::new()
        };
        self.left.push_back(Left {
            writer: g,
            next,
            owed,
            held,
            counts: (wp.acknack_count, wp.nackfrag_count),
            skipped: wp.skipped,
            abandoned: wp.abandoned,
            may_return: owed_until.is_some(),
            lease,
            extended: false,
            owner,
        });
        forgotten
    }

    /// Samples this reader misses of writers whose lease ran out and that may still come
    /// back to repair them (see [`remember`](Self::remember)).
    pub(crate) fn owed(&self) -> u64 {
        self.left
            .iter()
            .filter_map(|l| l.owed.map(|(top, _)| (top - l.next).saturating_add(1)))
            .fold(0, u64::saturating_add)
    }

    /// Writer `g`, gone, was labelled `label`: what it wrote before it left and this reader
    /// has not yet taken keeps its label.
    pub(crate) fn remember_label(&mut self, g: Guid, label: tether_wire::Encoding) {
        self.left_labels.retain(|(w, _)| *w != g);
        if label == tether_wire::Encoding::Unset {
            return;
        }
        if self.left_labels.len() >= MAX_REMEMBERED {
            self.left_labels.pop_front();
        }
        self.left_labels.push_back((g, label));
    }

    /// The label of a writer this reader lost, if it remembers it.
    pub(crate) fn left_label(&self, g: Guid) -> Option<tether_wire::Encoding> {
        self.left_labels
            .iter()
            .rev()
            .find(|(w, _)| *w == g)
            .map(|(_, l)| *l)
    }

    /// Writer `g`, met again: `wp`, its new proxy, takes up where this reader stood with it
    /// when it lost it, if it remembers (once): the next sample it would have delivered,
    /// the samples it held past a hole (a writer whose lease ran out, back in time to repair
    /// the holes), and the numbering of its requests. The writer may have kept its proxy of
    /// this reader (it never lost us: a writer stopped longer than a lease, a one-way
    /// outage) and takes requests numbered no higher than the last it saw for stale ones;
    /// restarting at 1 would leave this reader unheard until it passed that number, and a
    /// keep-all writer lets a reader it does not hear go. Returns the next sample.
    ///
    /// Only a writer of the same credential (`owner`, its serial in a secure realm) takes
    /// up the memory: another member that came back under a departed one's participant id
    /// would otherwise be handed its place and its samples. Then the memory is returned in
    /// `Err`, to be settled as for a writer gone for good, and the writer starts afresh.
    pub(crate) fn recall(
        &mut self,
        g: Guid,
        wp: &mut WriterProxy,
        owner: Option<u64>,
    ) -> Result<Option<u64>, Box<Left>> {
        let Some(i) = self.left.iter().position(|l| l.writer == g) else {
            return Ok(None);
        };
        let Some(l) = self.left.remove(i) else {
            return Ok(None);
        };
        if l.owner != owner {
            return Err(Box::new(l));
        }
        (wp.acknack_count, wp.nackfrag_count) = l.counts;
        wp.skipped = l.skipped;
        wp.abandoned = l.abandoned;
        if wp.reliable {
            wp.pending_bytes = l.held.values().map(|s| s.payload.len() as u64).sum();
            wp.pending = l.held;
        }
        Ok(Some(l.next))
    }
}

/// A writer a reader lost, and where the reader stood with it.
#[derive(Debug)]
pub(crate) struct Left {
    pub(crate) writer: Guid,
    /// The next sequence number the reader would have delivered from it.
    pub(crate) next: u64,
    /// A writer whose lease ran out: the last sample it said it had written (its heartbeats,
    /// or the last one the reader held), owed to the reader if it comes back before the
    /// instant given.
    pub(crate) owed: Option<(u64, Instant)>,
    /// The samples the reader held past a hole when that writer's lease ran out.
    pub(crate) held: BTreeMap<u64, Sample>,
    /// The last ACKNACK and NACK_FRAG counts the reader sent it: met again, it numbers on
    /// from them.
    pub(crate) counts: (u32, u32),
    /// The sequence numbers of it the reader skipped, and of those the ones it gave up on
    /// by itself (its SKIPPEDs go on from them).
    pub(crate) skipped: u64,
    pub(crate) abandoned: u64,
    /// Its lease ran out (it did not say goodbye): it may come back.
    pub(crate) may_return: bool,
    /// `owed`'s deadline was put off once already for a stall of this participant (it is
    /// not put off again).
    pub(crate) extended: bool,
    /// The lease its participant announced: how long a stall of this participant puts
    /// `owed`'s deadline off (the writer's time to come back, not ours).
    pub(crate) lease: Duration,
    /// The serial of the credential its participant authenticated with (secure realms).
    pub(crate) owner: Option<u64>,
}

/// Writer `l` is taken as gone from reader `r`: what it owed is settled as a goodbye would
/// ([`WriterProxy::writer_left`]): the samples held are delivered in order, the holes up to
/// the last sample it announced are lost; meeting it again resumes past them.
pub(crate) fn settle(
    r: &mut Reader,
    l: &mut Left,
    now: Instant,
    input: u64,
    stats: &mut Stats,
    events: &mut VecDeque<Event>,
) {
    let Some((top, _)) = l.owed.take() else {
        return;
    };
    let mut wp = WriterProxy::new(true, None, now, false);
    wp.expected = Some(l.next);
    // What it skips now counts with what it skipped before: its ACKNACKs go on from both.
    wp.skipped = l.skipped;
    wp.abandoned = l.abandoned;
    wp.hb_last = top;
    wp.pending = std::mem::take(&mut l.held);
    wp.pending_bytes = wp.pending.values().map(|s| s.payload.len() as u64).sum();
    let mut losses = Losses {
        reader: r.id,
        lost: &mut r.lost,
        stats: &mut *stats,
        events: &mut *events,
    };
    let delivered = wp.writer_left(&mut r.cache, now, input, l.writer, &mut losses);
    crate::reader::note_delivered(r, delivered, now, stats, events);
    l.next = wp.expected.unwrap_or(l.next).max(top.saturating_add(1));
    l.skipped = wp.skipped;
    l.abandoned = wp.abandoned;
}

impl crate::participant::Participant {
    /// Writers out of reach whose time to come back is over at `now`: each reader
    /// delivers what it held of them and counts the rest lost ([`settle`]); meeting them
    /// again resumes past it.
    pub(crate) fn settle_owed(&mut self, now: Instant) {
        let input = self.input;
        for r in self.readers.values_mut() {
            if !r.left.iter().any(|l| l.owed.is_some_and(|(_, t)| now >= t)) {
                continue;
            }
            let mut left = std::mem::take(&mut r.left);
            for l in left.iter_mut() {
                if l.owed.is_some_and(|(_, until)| now >= until) {
                    settle(r, l, now, input, &mut self.stats, &mut self.events);
                }
            }
            r.left = left;
        }
    }
}
