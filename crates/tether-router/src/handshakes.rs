//! Handshakes in progress, and who may start one: what keeps a flood of QUIC handshakes
//! from locking sessions out of a router.
//!
//! - While `limits.handshakes_before_retry` handshakes or more are in progress, a client
//!   that has not proved its address gets a stateless Retry (RFC 9000 section 8.1.2): a flood
//!   of Initials from forged addresses costs a datagram each, no state and no crypto.
//! - A handshake has `limits.handshake_timeout_ms` to finish (certificates, preamble): a
//!   client that proved its address and then went silent holds its place that long, not the
//!   idle timeout.
//! - Places are bounded (`limits.max_handshakes` in all, `limits.max_handshakes_per_address`
//!   from one IP address), and a newcomer takes the place of the oldest handshake still in
//!   progress (of its own address first) rather than being refused: a legitimate client
//!   finishes in a few round trips, so to push it out before then a flood must start
//!   `max_handshakes` handshakes within them, each after a Retry's round trip.

use std::collections::{BTreeSet, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tether_transport::quic::IncomingLink;
use tokio::task::AbortHandle;

use crate::config::Limits;

/// One handshake in progress.
struct InProgress {
    id: u64,
    ip: IpAddr,
    task: AbortHandle,
}

#[derive(Default)]
struct Table {
    /// Oldest first.
    open: VecDeque<InProgress>,
    /// Handshakes that ended before they were registered (their task ran first).
    ended: BTreeSet<u64>,
    next: u64,
}

/// The router's handshakes in progress and their counters.
#[derive(Default)]
pub(crate) struct Handshakes {
    table: Mutex<Table>,
    /// Clients sent a Retry.
    pub(crate) retried: AtomicU64,
    /// Handshakes ended to make room for a newer one.
    pub(crate) evicted: AtomicU64,
    /// Handshakes that failed or did not finish in time.
    pub(crate) failed: AtomicU64,
}

/// A client let in: start its handshake with [`Handshakes::begin`].
pub(crate) struct Admitted {
    pub(crate) incoming: IncomingLink,
    pub(crate) id: u64,
}

impl Handshakes {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Handshakes in progress now.
    pub(crate) fn in_progress(&self) -> usize {
        self.table().open.len()
    }

    /// What becomes of a client knocking: sent a Retry (`None`), or let in, having ended
    /// the oldest handshake of its address, or the oldest of all, if there was no room.
    pub(crate) fn admit(&self, limits: &Limits, incoming: IncomingLink) -> Option<Admitted> {
        let incoming = if self.in_progress() >= limits.handshakes_before_retry
            && !incoming.address_validated()
        {
            match incoming.retry() {
                None => {
                    self.retried.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                // Handed back: it cannot be retried (it was already).
                Some(back) => back,
            }
        } else {
            incoming
        };
        let mut t = self.table();
        Self::make_room(
            &mut t,
            limits,
            incoming.remote_address().ip(),
            &self.evicted,
        );
        t.next += 1;
        Some(Admitted {
            incoming,
            id: t.next,
        })
    }

    /// Ends the oldest handshake of `ip` if it holds its share, else the oldest of all if
    /// every place is taken.
    fn make_room(t: &mut Table, limits: &Limits, ip: IpAddr, evicted: &AtomicU64) {
        let mine = t.open.iter().filter(|h| h.ip == ip).count();
        let victim = if mine >= limits.max_handshakes_per_address.max(1) {
            t.open.iter().position(|h| h.ip == ip)
        } else if t.open.len() >= limits.max_handshakes.max(1) {
            Some(0)
        } else {
            None
        };
        if let Some(h) = victim.and_then(|i| t.open.remove(i)) {
            h.task.abort();
            evicted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Registers admitted handshake `id` from `ip`, running as `task`.
    pub(crate) fn begin(&self, id: u64, ip: IpAddr, task: AbortHandle) {
        let mut t = self.table();
        if t.ended.remove(&id) {
            return;
        }
        t.open.push_back(InProgress { id, ip, task });
    }

    /// Handshake `id` is over (made a link, failed, or timed out).
    pub(crate) fn end(&self, id: u64) {
        let mut t = self.table();
        match t.open.iter().position(|h| h.id == id) {
            Some(i) => {
                t.open.remove(i);
            }
            None => {
                // Not registered yet (its task ran first), or ended to make room: forget
                // ids far behind the newest, so that this set stays small.
                t.ended.insert(id);
                let old = t.next.saturating_sub(1024);
                t.ended.retain(|&e| e >= old);
            }
        }
    }
}
