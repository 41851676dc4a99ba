//! The state every thread of a session shares: the engine behind one lock, the socket, and
//! the rule for driving the engine.
//!
//! Every path that runs the engine (a put, a take, the receive thread, the timers, the
//! senders, a drop) does so in two halves. Under the lock it calls into the engine, then
//! [`Shared::drive`] moves the engine's output into a [`Deferred`]: the datagrams to send,
//! the subscriber callbacks and event listeners to call. After the lock is released,
//! [`Deferred::run`] sends the datagrams, in the order the engine produced them, then calls
//! the callbacks. No socket call and no user code runs under the lock, so one thread's
//! `sendmsg` never holds up another's use of the engine.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use tether_core::{EntityId, Event, Participant, Sample, Transmit};
use tether_transport::{Transport, UdpTransport};

use super::{Callback, Listener};

/// Wakes a queue-mode subscriber: a blocked `recv` or a pending stream.
#[derive(Default)]
pub(super) struct Signal {
    pub(super) cv: Condvar,
    pub(super) waker: Mutex<Option<Waker>>,
}

impl Signal {
    pub(super) fn notify(&self) {
        self.cv.notify_all();
        if let Some(w) = self.waker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            w.wake();
        }
    }
}

/// How a subscriber takes its samples.
pub(super) enum Slot {
    Callback(Callback),
    Queue(std::sync::Arc<Signal>),
}

/// What the lock guards: the engine and the driver's bookkeeping around it.
pub(super) struct Inner {
    pub(super) core: Participant,
    /// The sender threads are waiting for asynchronous writers' data (notify on a write).
    pub(super) sender_idle: bool,
    pub(super) bulk_idle: bool,
    pub(super) subs: BTreeMap<EntityId, Slot>,
    pub(super) listeners: Vec<Listener>,
    /// When the receive thread will wake on its own (it sleeps in recv until then).
    pub(super) armed: Option<Instant>,
}

pub(super) struct Shared {
    pub(super) inner: Mutex<Inner>,
    pub(super) transport: UdpTransport,
    pub(super) writer_cv: Condvar,
    /// Wakes the sender thread.
    pub(super) sender_cv: Condvar,
    pub(super) closed: AtomicBool,
    pub(super) max_blocking: Duration,
    pub(super) busy_poll: AtomicBool,
    pub(super) send_errors: AtomicU64,
    pub(super) recv_errors: AtomicU64,
}

/// Work to do after the engine's lock is released: datagrams to send, then callbacks and
/// event listeners to call.
///
/// The threads of a session keep theirs for their lifetime; a caller's thread takes a spare
/// one ([`Deferred::spare`]) and gives it back ([`Deferred::recycle`]), so a `put` allocates
/// nothing for its datagrams in steady state.
#[derive(Default)]
pub(super) struct Deferred {
    /// Datagrams in the order the engine produced them.
    transmits: Vec<Transmit>,
    /// The receive thread must re-read the engine's timers.
    wake: bool,
    callbacks: Vec<Callback>,
    /// Samples for `callbacks[i]`.
    calls: Vec<(u32, Sample)>,
    events: Vec<(Listener, Event)>,
}

thread_local! {
    /// This thread's spare [`Deferred`], with the capacity earlier calls gave it.
    static SPARE: Cell<Option<Deferred>> = const { Cell::new(None) };
}

impl Deferred {
    /// This thread's spare buffers (new ones if a call on this thread already holds them,
    /// e.g. a put from inside a subscriber callback).
    pub(super) fn spare() -> Deferred {
        SPARE.with(|s| s.take()).unwrap_or_default()
    }

    /// Keeps these (run, so empty) buffers for this thread's next call.
    pub(super) fn recycle(self) {
        debug_assert!(self.is_empty(), "recycled before run");
        SPARE.with(|s| s.set(Some(self)));
    }

    /// True if there is nothing to do.
    pub(super) fn is_empty(&self) -> bool {
        self.transmits.is_empty() && !self.wake && self.calls.is_empty() && self.events.is_empty()
    }

    /// Sends the datagrams, then calls the callbacks and listeners. Call without the lock.
    pub(super) fn run(&mut self, shared: &Shared) {
        for t in self.transmits.drain(..) {
            shared.send(&t);
        }
        if std::mem::take(&mut self.wake) {
            shared.transport.wake();
        }
        if self.calls.is_empty() && self.events.is_empty() {
            self.callbacks.clear();
            return;
        }
        for (i, s) in self.calls.drain(..) {
            if let Some(cb) = self.callbacks.get(i as usize) {
                cb(s);
            }
        }
        self.callbacks.clear();
        for (l, e) in self.events.drain(..) {
            l(&e);
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // Dropping datagrams would lose data silently: every path runs what it drove.
        if !std::thread::panicking() {
            debug_assert!(self.transmits.is_empty(), "datagrams dropped unsent");
        }
    }
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends one datagram, counting a failure.
    pub(super) fn send(&self, t: &Transmit) {
        if let Err(e) = self.transport.send(t.dest, &t.head, &t.body) {
            self.send_errors.fetch_add(1, Ordering::Relaxed);
            if tether_transport::path::is_too_big(&e) {
                // Larger than the way out carries: the engine lowers that path.
                tracing::debug!(dest = %t.dest, len = t.len(), "datagram too big for the path");
                self.lock()
                    .core
                    .datagram_too_big(Instant::now(), t.dest, t.len());
            }
        }
    }

    /// Moves what the engine produced into `out` (datagrams, callbacks, listener calls) and
    /// wakes the threads waiting on its events. Called with the lock held; `out` is run
    /// after it is released.
    pub(super) fn drive(&self, inner: &mut Inner, now: Instant, out: &mut Deferred) {
        out.transmits
            .extend(std::iter::from_fn(|| inner.core.poll_transmit()));
        while let Some(e) = inner.core.poll_event() {
            match &e {
                Event::DataAvailable { reader } => match inner.subs.get(reader) {
                    Some(Slot::Callback(cb)) => {
                        // One clone of the callback per event, not per sample.
                        let i = out.callbacks.len() as u32;
                        out.callbacks.push(cb.clone());
                        let calls = &mut out.calls;
                        inner.core.take_all(now, *reader, |s| calls.push((i, s)));
                    }
                    Some(Slot::Queue(sig)) => sig.notify(),
                    None => {}
                },
                Event::WriterReady { .. } => self.writer_cv.notify_all(),
                Event::IncompatibleQos(q) => tracing::warn!("{q}"),
                Event::DeadlineMissed { topic, side, .. } => {
                    tracing::debug!(topic, ?side, "deadline missed")
                }
                _ => {}
            }
            for l in &inner.listeners {
                out.events.push((l.clone(), e.clone()));
            }
        }
        // Taking may have freed room for local writers and produced transmits.
        out.transmits
            .extend(std::iter::from_fn(|| inner.core.poll_transmit()));
        self.rearm(inner, out);
    }

    /// Has the receive thread woken (when `out` runs) if the engine now wants to run earlier
    /// than it will wake.
    pub(super) fn rearm(&self, inner: &mut Inner, out: &mut Deferred) {
        if !inner.core.take_timers_changed() || self.busy_poll.load(Ordering::Relaxed) {
            return;
        }
        if let (Some(t), Some(armed)) = (inner.core.poll_timeout(), inner.armed) {
            if t + Duration::from_millis(1) < armed {
                inner.armed = Some(t);
                out.wake = true;
            }
        }
    }

    /// Runs `f` on the engine, then drives it, and sends and calls back outside the lock.
    pub(super) fn with_core<R>(&self, f: impl FnOnce(&mut Inner, Instant) -> R) -> R {
        let mut d = Deferred::spare();
        let r = {
            let mut g = self.lock();
            let now = Instant::now();
            let r = f(&mut g, now);
            self.drive(&mut g, now, &mut d);
            r
        };
        d.run(self);
        d.recycle();
        r
    }
}
