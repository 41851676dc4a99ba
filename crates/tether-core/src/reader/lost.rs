//! What a reader will never deliver: counted in `Stats::lost` and raised as `SamplesLost`
//! runs; and where a reader stood with writers it lost, so that meeting them again counts
//! what was written meanwhile instead of starting afresh.

use std::collections::VecDeque;
use std::time::Instant;

use tether_wire::EntityId;

use crate::event::{Event, Guid, LossReason, Stats};
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
    /// `owed_until`: a writer whose lease ran out, which may come back and repair what this
    /// reader misses of it (held samples past a hole included: they are dropped with the
    /// proxy and sent again): until then they are owed ([`Reader::owed`]); past it they are
    /// lost ([`LossReason::WriterLeft`]), as they are when this memory is forgotten for a
    /// newer one: the memory forgotten is returned, to be settled
    /// ([`Left::settle`]).
    #[must_use]
    pub(crate) fn remember(
        &mut self,
        g: Guid,
        wp: &WriterProxy,
        owed_until: Option<Instant>,
    ) -> Option<Left> {
        let next = if wp.reliable {
            wp.expected.or(wp.resume)
        } else if wp.last_delivered > 0 {
            Some(wp.last_delivered + 1)
        } else {
            wp.resume
        };
        let next = next?;
        let owed = match owed_until {
            Some(until) if wp.reliable => {
                let held = wp.pending.last_key_value().map_or(0, |(&s, _)| s);
                let top = wp.hb_last.max(held);
                (top >= next).then_some((top, until))
            }
            _ => None,
        };
        self.left.retain(|l| l.writer != g);
        let forgotten = if self.left.len() >= MAX_REMEMBERED {
            self.left.pop_front()
        } else {
            None
        };
        self.left.push_back(Left {
            writer: g,
            next,
            owed,
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

    /// Where this reader stood with writer `g` when it lost it, if it remembers (once).
    pub(crate) fn recall(&mut self, g: Guid) -> Option<u64> {
        let i = self.left.iter().position(|l| l.writer == g)?;
        self.left.remove(i).map(|l| l.next)
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
}

impl Left {
    /// What it owes is lost; the reader would resume past it.
    pub(crate) fn settle(&mut self, losses: &mut Losses<'_>) {
        if let Some((top, _)) = self.owed.take() {
            losses.report(self.writer, self.next, top, LossReason::WriterLeft);
            self.next = top.saturating_add(1);
        }
    }
}

impl crate::participant::Participant {
    /// Writers out of reach whose time to come back is over at `now`: what they owe each
    /// reader is lost, and meeting them again resumes past it.
    pub(crate) fn settle_owed(&mut self, now: Instant) {
        for r in self.readers.values_mut() {
            let mut losses = Losses {
                reader: r.id,
                lost: &mut r.lost,
                stats: &mut self.stats,
                events: &mut self.events,
            };
            for l in r.left.iter_mut() {
                if l.owed.is_some_and(|(_, until)| now >= until) {
                    l.settle(&mut losses);
                }
            }
        }
    }
}
