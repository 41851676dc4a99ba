//! A publisher: `put` runs the engine and sends on the caller's thread.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_core::{EntityId, Guid, WriteError};

use super::shared::{Deferred, Shared};
use super::{PutError, wall_ns};

/// Publishes samples on one topic.
pub struct Publisher {
    pub(super) shared: Arc<Shared>,
    pub(super) id: EntityId,
    pub(super) topic: String,
    pub(super) asynchronous: bool,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("topic", &self.topic)
            .finish()
    }
}

impl Publisher {
    /// Publishes one sample, stamped with the current time. Returns its sequence number.
    ///
    /// A reliable keep-all publisher whose history is full of unacknowledged samples waits
    /// up to `reliability.max_blocking_time_ms` for room (time its thread was away from
    /// the wait by more than a second, its process stopped or suspended, does not count),
    /// then fails with
    /// [`PutError::Timeout`], handing the payload back. If by then only readers that have
    /// gone silent hold the room, it waits on until they are marked inactive
    /// (`reliability.inactive_reader_ms`, [`Qos::inactive_after`](crate::Qos::inactive_after))
    /// and let go of, rather than fail for their sake.
    pub fn put(&self, payload: impl Into<Bytes>) -> Result<u64, PutError> {
        self.put_inner(payload.into(), wall_ns(), &|| false)
    }

    /// [`put`](Self::put), but while it waits for room it asks `stop` every 20 ms at most,
    /// and if that says so gives up with [`PutError::Stopped`] (nothing sent): a program
    /// shutting down (a signal, an operator's stop) need not wait out
    /// `max_blocking_time_ms` behind a slow reader.
    pub fn put_unless(
        &self,
        payload: impl Into<Bytes>,
        stop: impl Fn() -> bool,
    ) -> Result<u64, PutError> {
        self.put_inner(payload.into(), wall_ns(), &stop)
    }

    /// Publishes one sample with the given source timestamp (ns since the UNIX epoch).
    pub fn put_with_timestamp(
        &self,
        payload: impl Into<Bytes>,
        timestamp_ns: u64,
    ) -> Result<u64, PutError> {
        self.put_inner(payload.into(), timestamp_ns, &|| false)
    }

    fn put_inner(
        &self,
        payload: Bytes,
        timestamp_ns: u64,
        stop: &dyn Fn() -> bool,
    ) -> Result<u64, PutError> {
        let mut payload = payload;
        // When the wait began, moved on by any time this process did not run (stopped,
        // suspended): only time it could have heard its readers counts as blocking.
        let mut start = Instant::now();
        let mut now = start;
        // The clock as this thread last read it while blocked, and how long it meant to
        // wait from there: a process may be stopped anywhere in the loop (writing, sending,
        // waiting for the lock), not only while it waits, so the whole gap is judged.
        let mut mark = start;
        let mut asked = Duration::ZERO;
        // This thread's spare buffers: no allocation for the datagrams in steady state.
        let mut deferred = Deferred::spare();
        let mut g = self.shared.lock();
        let r = loop {
            if self.shared.closed.load(Ordering::Relaxed) {
                break Err(PutError::Closed(payload));
            }
            let r = g.core.write(now, self.id, timestamp_ns, payload);
            if g.core.has_output() {
                self.shared.drive(&mut g, now, &mut deferred);
            } else {
                // Most batched puts produce nothing: only the timers may have moved.
                self.shared.rearm(&mut g, &mut deferred);
            }
            if self.asynchronous && (g.sender_idle || g.bulk_idle) {
                // Both senders wait on one condvar; each re-checks its own classes.
                g.sender_idle = false;
                g.bulk_idle = false;
                self.shared.sender_cv.notify_all();
            }
            match r {
                Ok(seq) => break Ok(seq),
                Err(WriteError::WouldBlock(p)) => {
                    let seen = Instant::now();
                    start += not_running(seen.saturating_duration_since(mark), asked);
                    mark = seen;
                    let waited = seen.saturating_duration_since(start);
                    let mut until = start + self.shared.max_blocking;
                    if waited >= self.shared.max_blocking {
                        // Readers that went silent are let go of soon: wait for that.
                        match g.core.room_expected(Instant::now(), self.id) {
                            Some(t) if t > Instant::now() => until = t,
                            // Room came while the session ran (a reader let go of, an
                            // acknowledgement): write again.
                            _ if !g.core.writer_blocked(self.id) => until = Instant::now(),
                            _ if g.core.waits_for_paths(self.id) => {
                                break Err(PutError::PathFull { payload: p, waited });
                            }
                            _ => break Err(PutError::Timeout { payload: p, waited }),
                        }
                    }
                    payload = p;
                    drop(g);
                    deferred.run(&self.shared);
                    // Asked without the session's lock: `stop` may call into the session.
                    if stop() {
                        deferred.recycle();
                        return Err(PutError::Stopped { payload, waited });
                    }
                    let g2 = self.shared.lock();
                    let slice = until
                        .saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(20));
                    asked = slice;
                    let (g3, _) = self
                        .shared
                        .writer_cv
                        .wait_timeout(g2, slice)
                        .unwrap_or_else(|p| p.into_inner());
                    g = g3;
                    now = Instant::now();
                }
                Err(WriteError::TooLarge { payload, max }) => {
                    break Err(PutError::TooLarge { payload, max });
                }
                Err(e) => break Err(PutError::Closed(e.into_payload())),
            }
        };
        drop(g);
        deferred.run(&self.shared);
        deferred.recycle();
        r
    }

    /// Waits until every matched reliable reader has acknowledged every sample, up to
    /// `timeout`. True if they all did.
    pub fn wait_for_acknowledgments(&self, timeout: Duration) -> bool {
        let end = Instant::now().checked_add(timeout);
        // Heartbeats ask readers to acknowledge only now and then; ask now.
        self.shared
            .with_core(|i, now| i.core.request_acknowledgments(now, self.id));
        loop {
            if self.shared.lock().core.all_acked(self.id) {
                return true;
            }
            if end.is_some_and(|e| Instant::now() >= e)
                || self.shared.closed.load(Ordering::Relaxed)
            {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Samples an asynchronous publisher has accepted but its sender has not yet sent to
    /// every matched participant (0 for a synchronous one).
    pub fn unsent(&self) -> u64 {
        self.shared.lock().core.unsent(self.id)
    }

    /// The highest sequence number every matched reliable reader has acknowledged, with
    /// every one before it (0 if none; the last written if no reliable reader is matched).
    pub fn acknowledged(&self) -> u64 {
        self.shared.lock().core.acknowledged(self.id)
    }

    /// The reliable readers that have not acknowledged every sample written while they
    /// were matched: those matched now, and those that left first (`departed`: their
    /// samples will never be acknowledged). Empty when everything written was acknowledged
    /// by every reader it was written for. A program that must not claim delivery it did
    /// not get checks this after [`wait_for_acknowledgments`](Self::wait_for_acknowledgments).
    pub fn unacknowledged(&self) -> Vec<tether_core::Shortfall> {
        self.shared.lock().core.unacknowledged(self.id)
    }

    /// Sends this publisher's waiting batch now (with `Qos::batching`; otherwise a no-op).
    pub fn flush(&self) {
        self.shared.with_core(|i, now| i.core.flush(now, self.id));
    }

    /// Samples this publisher wrote while no reader was matched: nobody received them (a
    /// subscriber that left early, or one never there). Counted by the engine as it writes,
    /// so asking costs nothing per sample.
    pub fn written_unmatched(&self) -> u64 {
        self.shared.lock().core.written_unmatched(self.id)
    }

    /// How many readers this publisher is matched with.
    pub fn matched(&self) -> usize {
        self.shared.lock().core.matched_count(self.id)
    }

    /// The readers this publisher is matched with now (those of this session included).
    /// With [`Session::participants`](super::Session::participants) they name who is
    /// listening; a reader that leaves, or whose lease ends, drops out of the list.
    pub fn matched_readers(&self) -> Vec<Guid> {
        self.shared.lock().core.matched_readers(self.id)
    }

    /// This publisher's endpoint identity, as readers see it in [`Sample::writer`](tether_core::Sample::writer).
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

    /// Samples held in this publisher's history.
    pub fn history_len(&self) -> usize {
        self.shared.lock().core.history_len(self.id)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.shared
            .with_core(|i, now| i.core.delete_endpoint(now, self.id));
    }
}

/// How late a thread may wake before it is taken that its process did not run meanwhile
/// (as the engine takes a timer over a second late: `Stats::stalls`).
const STALL: Duration = Duration::from_secs(1);

/// Of a wait of `slept` that was asked to last `asked`, the time the process did not run:
/// all past `asked` when it overran by more than [`STALL`] (a SIGSTOP, a suspended host),
/// else none (being scheduled late is part of waiting).
fn not_running(slept: Duration, asked: Duration) -> Duration {
    let over = slept.saturating_sub(asked);
    if over > STALL { over } else { Duration::ZERO }
}
