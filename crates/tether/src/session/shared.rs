//! The state every thread of a session shares: the engine behind one lock, the socket, and
//! the rule for driving the engine.
//!
//! Every path that runs the engine (a put, a take, the receive thread, the timers, the
//! senders, a drop) does so in two halves. Under the lock it calls into the engine, then
//! [`Shared::drive`] moves the engine's output into a [`Deferred`]: the datagrams to send,
//! the subscriber callbacks and event listeners to call. After the lock is released,
//! [`Deferred::run`] sends the datagrams, in the order the engine produced them, then calls
//! the callbacks. No socket call and no user code runs under the lock, so one thread's
//! `sendmsg` never holds up another's use of the engine. Datagrams keep the engine's order
//! across threads too: a `Deferred` that takes datagrams takes a ticket under the lock, and
//! sends them only once every earlier ticket's have gone (a receive thread's repair, or a
//! path's queued samples it released, cannot be overtaken by a put's newer sample and look
//! lost to the reader). The datagrams of one run go to the
//! transport as one batch: consecutive ones to one destination leave as one GSO message,
//! and up to 64 messages per `sendmmsg`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use tether_core::{EntityId, Event, Participant, Sample, Transmit};
use tether_transport::{Outgoing, Transport, UdpTransport};

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
    /// Events raised before the first listener was registered (at most [`BACKLOG`], the
    /// latest), for that listener: `None` once it was.
    pub(super) backlog: Option<std::collections::VecDeque<Event>>,
    /// When the receive thread will wake on its own (it sleeps in recv until then).
    pub(super) armed: Option<Instant>,
    /// The next send ticket (see [`Deferred`]).
    pub(super) next_ticket: u64,
    /// The engine's generation of local route keys last told to the router links.
    pub(super) route_gen: u64,
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
    /// UDP datagrams dropped for a source in the virtual ranges of routed peers.
    pub(super) virtual_source: AtomicU64,
    /// Datagrams refused as larger than the path allows (EMSGSIZE).
    pub(super) too_large: AtomicU64,
    /// When the last warning about a too-large datagram was logged (at most one a second).
    pub(super) too_large_warned: Mutex<Option<Instant>>,
    /// The send ticket whose datagrams may go now; how many threads wait for their turn,
    /// and where they wait (a send whose turn it is touches neither lock nor condvar).
    pub(super) serving: AtomicU64,
    pub(super) serving_waiters: AtomicU64,
    pub(super) serving_lock: Mutex<()>,
    pub(super) serving_cv: Condvar,
    /// The router links, if the session has any (`[routers] connect`).
    pub(super) routers: Option<std::sync::Arc<super::router::Routers>>,
}

/// Most events kept for the first listener, raised before it was registered.
pub(super) const BACKLOG: usize = 1024;

impl Inner {
    /// `e` for every listener, or (none registered yet) for the first one to come.
    pub(super) fn raise(&mut self, e: Event, out: &mut Vec<(Listener, Event)>) {
        if self.listeners.is_empty() {
            if let Some(b) = self.backlog.as_mut() {
                if b.len() >= BACKLOG {
                    b.pop_front();
                }
                b.push_back(e);
            }
            return;
        }
        for l in &self.listeners {
            out.push((l.clone(), e.clone()));
        }
    }
}

/// How long a send waits for an earlier ticket's before it goes anyway (a thread that took
/// a ticket and died would otherwise hold every later send up).
const TICKET_WAIT: Duration = Duration::from_millis(50);

/// An engine [`Transmit`] as the transport takes it (head and shared body, not joined),
/// with its writer's routing key when it goes to a router link's group (looked up under
/// the lock, where the engine is at hand).
pub(super) struct Out(pub(super) Transmit, pub(super) Option<super::router::Tag>);

impl Outgoing for &Out {
    fn dest(&self) -> SocketAddr {
        self.0.dest
    }
    fn head(&self) -> &[u8] {
        &self.0.head
    }
    fn body(&self) -> &[u8] {
        &self.0.body
    }
    fn tail(&self) -> &[u8] {
        &self.0.tail
    }
}

impl Outgoing for Out {
    fn dest(&self) -> SocketAddr {
        self.0.dest
    }
    fn head(&self) -> &[u8] {
        &self.0.head
    }
    fn body(&self) -> &[u8] {
        &self.0.body
    }
    fn tail(&self) -> &[u8] {
        &self.0.tail
    }
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
    transmits: Vec<Out>,
    /// Its place in the order of sends, taken under the lock with its first datagram.
    ticket: Option<u64>,
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

    /// Adds a datagram polled under the lock (`inner`), after those already taken.
    pub(super) fn push(&mut self, inner: &mut Inner, t: Transmit) {
        self.take_ticket(inner);
        // A writer's datagram through a router carries its routing key: DATA to a link's
        // group is routed by it, and a site's export list decides both DATA and a unicast
        // repair by it.
        let routed =
            tether_core::route::is_route_group(&t.dest) || tether_core::route::is_routed(&t.dest);
        let tag = match (t.writer, t.announces) {
            _ if !routed => None,
            (Some(w), _) => inner.core.route_key(w).map(super::router::Tag::Data),
            (None, Some(e)) => {
                inner
                    .core
                    .route_endpoint(e)
                    .map(|(kind, key)| super::router::Tag::Endpoint {
                        key,
                        reader: kind == tether_core::EndpointKind::Reader,
                    })
            }
            (None, None) => None,
        };
        self.transmits.push(Out(t, tag));
    }

    /// Takes this run's place in the order of sends, once (under the lock).
    fn take_ticket(&mut self, inner: &mut Inner) {
        if self.ticket.is_none() {
            self.ticket = Some(inner.next_ticket);
            inner.next_ticket += 1;
        }
    }

    /// Sends the datagrams (after every earlier ticket's), then calls the callbacks and
    /// listeners. Call without the lock.
    pub(super) fn run(&mut self, shared: &Shared) {
        if let Some(t) = self.ticket.take() {
            shared.wait_turn(t);
            if !self.transmits.is_empty() {
                shared.send_all(&self.transmits);
                self.transmits.clear();
            }
            shared.end_turn(t);
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

    /// Waits until ticket `t`'s datagrams may go: every earlier ticket's have been sent
    /// (or [`TICKET_WAIT`] passed).
    fn wait_turn(&self, t: u64) {
        if self.serving.load(Ordering::SeqCst) >= t {
            return;
        }
        self.serving_waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = self.serving_lock.lock().unwrap_or_else(|p| p.into_inner());
        let end = Instant::now() + TICKET_WAIT;
        // Checked under the lock, which `end_turn` takes to notify: no wake-up is missed.
        while self.serving.load(Ordering::SeqCst) < t {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = self
                .serving_cv
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(g);
        self.serving_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Ticket `t`'s datagrams are sent: the next may go. Wakes waiters only if there are
    /// any (a put with no one waiting makes no system call here).
    fn end_turn(&self, t: u64) {
        self.serving.fetch_max(t + 1, Ordering::SeqCst);
        if self.serving_waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.serving_lock.lock().unwrap_or_else(|p| p.into_inner());
            self.serving_cv.notify_all();
        }
    }

    /// Sends datagrams in one batch (see the module's doc), counting failures. Call
    /// without the lock.
    pub(super) fn send_all(&self, ts: &[Out]) {
        if let Some(routers) = &self.routers {
            if ts
                .iter()
                .any(|t| super::router::Routers::is_routed(&t.0.dest))
            {
                let mut udp: Vec<&Out> = Vec::with_capacity(ts.len());
                for t in ts {
                    if super::router::Routers::is_routed(&t.0.dest) {
                        routers.send(t.0.dest, t.1, &t.0.head, &t.0.body, &t.0.tail);
                    } else {
                        udp.push(t);
                    }
                }
                if !udp.is_empty() {
                    self.send_udp(&udp);
                }
                return;
            }
        }
        self.send_udp(ts);
    }

    fn send_udp<T: Outgoing>(&self, ts: &[T]) {
        let r = self.transport.send_batch(ts);
        // Those refused as too large are counted apart (`too_large`): a path probe larger
        // than the interface fails so by design, and is no error.
        let errors = r.failed.saturating_sub(r.too_large.len());
        if errors > 0 {
            self.send_errors.fetch_add(errors as u64, Ordering::Relaxed);
        }
        if !r.too_large.is_empty() {
            self.refused_too_large(&r.too_large);
        }
    }

    /// Datagrams the socket refused as larger than the path allows: counted, warned about
    /// (at most once a second), and told to the engine, which owns datagram sizes.
    fn refused_too_large(&self, refused: &[(SocketAddr, usize)]) {
        self.too_large
            .fetch_add(refused.len() as u64, Ordering::Relaxed);
        let now = Instant::now();
        {
            let mut w = self
                .too_large_warned
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if w.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
                *w = Some(now);
                let (dest, size) = refused[0];
                // Path probes larger than the interface are refused by design: that is
                // how a probe fails at once. The engine lowers a path whose datagrams in
                // use are refused (`paths_lowered`).
                tracing::debug!(
                    %dest,
                    size,
                    refused = refused.len(),
                    "datagram larger than the way out carries (EMSGSIZE, don't-fragment set)"
                );
            }
        }
        let mut g = self.lock();
        for &(dest, size) in refused {
            g.core.datagram_too_big(now, dest, size);
        }
    }

    /// Moves what the engine produced into `out` (datagrams, callbacks, listener calls) and
    /// wakes the threads waiting on its events. Called with the lock held; `out` is run
    /// after it is released.
    pub(super) fn drive(&self, inner: &mut Inner, now: Instant, out: &mut Deferred) {
        self.collect(inner, now, out);
        self.rearm(inner, out);
    }

    /// [`drive`](Self::drive) without re-arming the receive thread: for the receive thread
    /// itself, which reads the engine's timers after each batch of datagrams.
    /// Whether a UDP datagram from `from` may go to the engine: not if its source is one
    /// of the virtual addresses this session makes up for peers behind routers
    /// ([`tether_core::route`]). Those come only through router links, where the engine
    /// takes them as routed (not challenged: `tether_core`'s `discovery/pending.rs`); a
    /// datagram on a socket claiming one was forged (the range is a private one of ours
    /// that no host uses), and is dropped and counted (`virtual_source`).
    pub(super) fn socket_source_ok(&self, from: &SocketAddr) -> bool {
        let virtual_source =
            tether_core::route::is_routed(from) || tether_core::route::is_route_group(from);
        if virtual_source {
            self.virtual_source.fetch_add(1, Ordering::Relaxed);
        }
        !virtual_source
    }

    pub(super) fn collect(&self, inner: &mut Inner, now: Instant, out: &mut Deferred) {
        if let Some(r) = &self.routers {
            let g = inner.core.route_keys_generation();
            if g != inner.route_gen {
                inner.route_gen = g;
                r.changed.notify_one();
            }
        }
        while let Some(t) = inner.core.poll_transmit() {
            out.push(inner, t);
        }
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
                Event::WriterReady { .. } => {
                    self.writer_cv.notify_all();
                    // An asynchronous writer's sender may wait for room on a path.
                    self.sender_cv.notify_all();
                }
                e => super::log::event(&inner.core, e),
            }
            inner.raise(e, &mut out.events);
        }
        // Taking may have freed room for local writers and produced transmits.
        while let Some(t) = inner.core.poll_transmit() {
            out.push(inner, t);
        }
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
