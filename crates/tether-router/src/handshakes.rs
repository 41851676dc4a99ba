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
//!   progress rather than being refused: of its own address first, then (all places taken)
//!   of its own network or of the busiest ([`victim`]). A legitimate client finishes in a
//!   few round trips; a flood from one network, answering every Retry, ends only its own
//!   handshakes.

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

    /// Ends the handshake [`victim`] names, if any, to make room for one from `ip`.
    fn make_room(t: &mut Table, limits: &Limits, ip: IpAddr, evicted: &AtomicU64) {
        let ips: Vec<IpAddr> = t.open.iter().map(|h| h.ip).collect();
        if let Some(h) = victim(&ips, limits, ip).and_then(|i| t.open.remove(i)) {
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

/// The network an address is in, for sharing places: its /24 (IPv4) or /64 (IPv6). A host
/// on a LAN can take as many addresses of its subnet as it likes, and answer the Retry sent
/// to each.
fn network(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            IpAddr::from([o[0], o[1], o[2], 0])
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            IpAddr::from([s[0], s[1], s[2], s[3], 0, 0, 0, 0])
        }
    }
}

/// Which handshake in progress (by its place in `open`, oldest first, their addresses)
/// ends so that one from `ip` may start, if one must:
/// - the oldest of `ip`'s own when it holds its share (`max_handshakes_per_address`);
/// - else, every place taken: the oldest of `ip`'s network when that holds half the places
///   or more, else the oldest of the network holding the most.
///
/// So a flood from one network, however many of its addresses it uses, ends only its own
/// handshakes once the table is full: a member dialling from elsewhere keeps its place
/// while it finishes. (Before, the oldest of all went: the outsider review
/// flooded from 32 addresses of the router's LAN, answering each Retry, and a member 200 ms
/// away was pushed out of every handshake it began for 10 s.)
fn victim(open: &[IpAddr], limits: &Limits, ip: IpAddr) -> Option<usize> {
    let max = limits.max_handshakes.max(1);
    if open.iter().filter(|&&h| h == ip).count() >= limits.max_handshakes_per_address.max(1) {
        return open.iter().position(|&h| h == ip);
    }
    if open.len() < max {
        return None;
    }
    let net = network(ip);
    let in_net = |n: IpAddr| open.iter().filter(|&&h| network(h) == n).count();
    if in_net(net) >= (max / 2).max(1) {
        return open.iter().position(|&h| network(h) == net);
    }
    // The oldest of the networks holding the most (O(n²) for at most `max_handshakes`).
    let most = open.iter().map(|&h| in_net(network(h))).max()?;
    open.iter().position(|&h| in_net(network(h)) == most)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_address: usize) -> Limits {
        Limits {
            max_handshakes: max,
            max_handshakes_per_address: per_address,
            ..Limits::default()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Admits one from `ip` into `open` as `Handshakes::admit` does.
    fn admit(open: &mut Vec<IpAddr>, l: &Limits, from: &str) {
        if let Some(i) = victim(open, l, ip(from)) {
            open.remove(i);
        }
        open.push(ip(from));
    }

    #[test]
    fn a_flood_from_one_network_ends_only_its_own_handshakes() {
        let l = limits(8, 4);
        let mut open = Vec::new();
        // Two members dialling from elsewhere, then a flood from 32 addresses of one /24.
        admit(&mut open, &l, "192.0.2.10");
        admit(&mut open, &l, "2001:db8:1::7");
        for round in 0..10 {
            for k in 1..=32 {
                admit(&mut open, &l, &format!("10.0.0.{k}"));
            }
            assert!(open.contains(&ip("192.0.2.10")), "round {round}: {open:?}");
            assert!(open.contains(&ip("2001:db8:1::7")), "round {round}");
            let flood = open
                .iter()
                .filter(|h| network(**h) == ip("10.0.0.0"))
                .count();
            assert_eq!(flood, 6, "the rest of the places");
        }
        // Room is still there for a third member.
        admit(&mut open, &l, "198.51.100.1");
        assert!(open.contains(&ip("198.51.100.1")));
        assert!(open.contains(&ip("192.0.2.10")));
    }

    #[test]
    fn one_address_and_a_full_table_end_the_oldest_as_before() {
        let l = limits(4, 2);
        let mut open = Vec::new();
        for _ in 0..3 {
            admit(&mut open, &l, "192.0.2.1");
        }
        assert_eq!(open, [ip("192.0.2.1"); 2], "an address's share");
        // Four networks, one place each: the table is full, the busiest (a tie) gives up
        // its oldest.
        let mut open = Vec::new();
        for a in ["192.0.2.1", "198.51.100.1", "203.0.113.1", "10.1.1.1"] {
            admit(&mut open, &l, a);
        }
        admit(&mut open, &l, "172.16.0.1");
        assert_eq!(open.len(), 4);
        assert!(!open.contains(&ip("192.0.2.1")), "{open:?}");
    }
}
