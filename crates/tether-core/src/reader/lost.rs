//! What a reader will never deliver: counted in `Stats::lost` and raised as `SamplesLost`
//! runs; and where a reader stood with writers it lost, so that meeting them again counts
//! what was written meanwhile instead of starting afresh.

use std::collections::VecDeque;

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
    pub(crate) fn remember(&mut self, g: Guid, wp: &WriterProxy) {
        let next = if wp.reliable {
            wp.expected.or(wp.resume)
        } else if wp.last_delivered > 0 {
            Some(wp.last_delivered + 1)
        } else {
            wp.resume
        };
        let Some(next) = next else { return };
        self.left.retain(|(w, _)| *w != g);
        if self.left.len() >= MAX_REMEMBERED {
            self.left.pop_front();
        }
        self.left.push_back((g, next));
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
        let i = self.left.iter().position(|(w, _)| *w == g)?;
        self.left.remove(i).map(|(_, next)| next)
    }
}
