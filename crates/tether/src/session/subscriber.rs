//! A subscriber: samples taken by `recv`, `try_recv` or as a stream, or delivered to a
//! callback by the thread that received them.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tether_core::{EntityId, Guid, Sample};

use super::RecvError;
use super::shared::{Deferred, Inner, Shared, Signal};

/// Receives samples on one topic.
pub struct Subscriber {
    pub(super) shared: Arc<Shared>,
    pub(super) id: EntityId,
    pub(super) topic: String,
    pub(super) signal: Option<Arc<Signal>>,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("topic", &self.topic)
            .finish()
    }
}

impl Subscriber {
    /// A sample if one is waiting.
    pub fn try_recv(&self) -> Option<Sample> {
        self.shared.with_core(|i, now| i.core.take(now, self.id))
    }

    /// Waits for the next sample.
    pub fn recv(&self) -> Result<Sample, RecvError> {
        self.recv_deadline(None)
    }

    /// Waits up to `d` for the next sample.
    pub fn recv_timeout(&self, d: Duration) -> Result<Sample, RecvError> {
        // A timeout too large to represent waits indefinitely.
        self.recv_deadline(Instant::now().checked_add(d))
    }

    fn recv_deadline(&self, deadline: Option<Instant>) -> Result<Sample, RecvError> {
        let Some(sig) = &self.signal else {
            return Err(RecvError::CallbackMode);
        };
        let mut g = self.shared.lock();
        loop {
            let now = Instant::now();
            if let Some(s) = g.core.take(now, self.id) {
                self.after_take(g, now);
                return Ok(s);
            }
            if self.shared.closed.load(Ordering::Relaxed) {
                return Err(RecvError::Closed);
            }
            let wait = match deadline {
                Some(d) if d <= now => return Err(RecvError::Timeout),
                Some(d) => (d - now).min(Duration::from_millis(250)),
                None => Duration::from_millis(250),
            };
            g = sig
                .cv
                .wait_timeout(g, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// After a take: what it set going (room for local writers, acknowledgements) is
    /// driven, then sent with the lock released.
    fn after_take(&self, mut g: MutexGuard<'_, Inner>, now: Instant) {
        let mut deferred = Deferred::spare();
        self.shared.drive(&mut g, now, &mut deferred);
        drop(g);
        deferred.run(&self.shared);
        deferred.recycle();
    }

    /// Samples this subscriber will never receive: lost on the way (best effort), no longer
    /// available from their writer, written while a lease had run out, or replaced in a
    /// keep-last cache before they were taken. Each loss is also an
    /// [`Event::SamplesLost`](crate::Event::SamplesLost), with the writer, the sequence
    /// numbers and why, for [`Session::on_event`](crate::Session::on_event) listeners.
    pub fn lost(&self) -> u64 {
        self.shared.lock().core.reader_lost(self.id)
    }

    /// Samples this subscriber misses of writers whose lease ran out (killed, or out of
    /// reach): a writer that comes back within one more lease repairs them; past that, those
    /// that arrived past a hole are delivered and the holes are [`lost`](Self::lost). A
    /// program that ends meanwhile has not received them.
    pub fn owed(&self) -> u64 {
        self.shared.lock().core.reader_owed(self.id)
    }

    /// [`lost`](Self::lost) and [`owed`](Self::owed) read together: what a writer owes
    /// moves to lost when its time is over, and read apart it could be in neither.
    pub fn lost_and_owed(&self) -> (u64, u64) {
        let g = self.shared.lock();
        (g.core.reader_lost(self.id), g.core.reader_owed(self.id))
    }

    /// How many writers this subscriber is matched with.
    pub fn matched(&self) -> usize {
        self.shared.lock().core.matched_count(self.id)
    }

    /// This subscriber's endpoint identity, as writers see it (e.g. in
    /// [`Publisher::matched_readers`](super::Publisher::matched_readers)).
    pub fn guid(&self) -> Guid {
        let g = self.shared.lock();
        Guid {
            participant: g.core.id(),
            entity: self.id,
        }
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The encoding label `writer` (a sample's [`Sample::writer`]) announced for its
    /// payloads ([`Topic::encoding`](crate::Topic::encoding)): a writer of this session or
    /// of another. A writer that has left keeps its label for the samples it wrote that
    /// still wait here (the last 64 writers this subscriber lost are remembered).
    /// [`Encoding::Unset`] if it gave none or is not known.
    pub fn writer_encoding(&self, writer: Guid) -> tether_core::Encoding {
        self.shared.lock().core.writer_encoding(self.id, writer)
    }
}

impl futures_core::Stream for Subscriber {
    type Item = Sample;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Sample>> {
        let Some(sig) = &self.signal else {
            return Poll::Ready(None);
        };
        let mut g = self.shared.lock();
        let now = Instant::now();
        if let Some(s) = g.core.take(now, self.id) {
            self.after_take(g, now);
            return Poll::Ready(Some(s));
        }
        if self.shared.closed.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        *sig.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.shared.with_core(|i, now| {
            i.subs.remove(&self.id);
            i.core.delete_endpoint(now, self.id);
        });
    }
}
