//! The session's threads: the receive thread (datagrams and timers), the two senders of
//! asynchronous writers (realtime and default; bulk) and the discovery thread.

use std::collections::BTreeSet;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tether_core::Priority;
use tether_transport::MulticastReceiver;

use super::revocations::RevocationWatch;
use super::shared::{Deferred, Inner, Shared};

/// Timers closer than this are waited for precisely (`UdpTransport::wait_readable`) rather
/// than by the socket's receive time-out, which the kernel rounds up to scheduler ticks.
const PRECISE_BELOW: Duration = Duration::from_millis(20);

/// The receive thread: takes the datagrams waiting (several per call in bursts), hands each
/// to the engine (one lock for them all) and runs the engine's timers, then sends and calls
/// back with the lock released.
pub(super) fn recv_loop(shared: &Shared) {
    let mut chunk = BytesMut::new();
    let mut batch: Vec<(BytesMut, SocketAddr)> = Vec::with_capacity(64);
    let mut deferred = Deferred::default();
    let mut next_timer = Instant::now();
    let mut armed: Option<Instant> = None;
    let mut published: Option<Instant> = None;
    let mut busy = false;
    let _ = shared.transport.set_nonblocking(false);
    while !shared.closed.load(Ordering::Relaxed) {
        let want_busy = shared.busy_poll.load(Ordering::Relaxed);
        if want_busy != busy {
            busy = want_busy;
            let _ = shared.transport.set_nonblocking(busy);
            armed = None;
        }
        let now = Instant::now();
        if now >= next_timer {
            {
                let mut g = shared.lock();
                g.core.handle_timeout(now);
                shared.drive(&mut g, now, &mut deferred);
                next_timer = g
                    .core
                    .poll_timeout()
                    .unwrap_or(now + Duration::from_millis(100));
            }
            deferred.run(shared);
        }
        if !busy {
            // Sleep in recv until the next timer, at most 200 ms, at least 1 ms.
            let wake = next_timer.clamp(
                now + Duration::from_millis(1),
                now + Duration::from_millis(200),
            );
            let differs = armed.is_none_or(|a| {
                let d = if a > wake { a - wake } else { wake - a };
                d > Duration::from_micros(500) || a <= now
            });
            if differs {
                let _ = shared.transport.set_read_timeout(Some(wake - now));
                armed = Some(wake);
            }
            if armed != published {
                shared.lock().armed = armed;
                published = armed;
            }
        }
        // A timer closer than the receive time-out's resolution (a scheduler tick): take
        // what is waiting without waiting, else wait precisely (ppoll) and handle the timer
        // first. While datagrams keep coming this costs no system call more.
        let precise = !busy && next_timer.saturating_duration_since(now) < PRECISE_BELOW;
        let got = if precise {
            match shared.transport.try_recv_batch(&mut chunk, &mut batch) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let wake = next_timer.max(now + Duration::from_micros(50));
                    match shared.transport.wait_readable(wake - now) {
                        Ok(false) => continue,
                        _ => shared.transport.try_recv_batch(&mut chunk, &mut batch),
                    }
                }
                r => r,
            }
        } else {
            shared.transport.recv_batch(&mut chunk, &mut batch)
        };
        match got {
            Ok(_) => {
                // An empty datagram is a wake-up: re-read the timers.
                let woke = batch.iter().any(|(d, _)| d.is_empty());
                if woke {
                    armed = None;
                }
                if batch.iter().all(|(d, _)| d.is_empty()) {
                    batch.clear();
                    let g = shared.lock();
                    next_timer = g.core.poll_timeout().unwrap_or(next_timer);
                    continue;
                }
                {
                    let mut g = shared.lock();
                    let now = Instant::now();
                    // Each datagram as if received alone: driven before the next, so a
                    // callback subscriber takes its samples before the next datagram
                    // could overwrite them (keep-last). The sends and callbacks run
                    // together after the lock; the batch's Bytes go once handled, so the
                    // chunk can be reclaimed.
                    for (d, from) in batch.drain(..) {
                        if !d.is_empty() && shared.socket_source_ok(&from) {
                            // Handed over: a sealed datagram is opened where it lies.
                            g.core.handle_datagram_owned(now, from, d);
                            shared.collect(&mut g, now, &mut deferred);
                        }
                    }
                    // This thread reads the timers itself: no need to wake it.
                    let _ = g.core.take_timers_changed();
                    if let Some(t) = g.core.poll_timeout() {
                        next_timer = t;
                    }
                }
                deferred.run(shared);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if busy {
                    std::hint::spin_loop();
                } else {
                    armed = None;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                // e.g. ECONNREFUSED reported for an earlier send to a closed port: harmless.
                shared.recv_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A sender: releases asynchronous writers' datagrams of `classes` one at a time, by class
/// and flow controller, and sends each with the engine's lock released. A synchronous `put`
/// (which sends on its own thread) never waits behind a bulk transfer, and an asynchronous
/// realtime sample waits at most for the one datagram being sent. Bulk has its own sender
/// in the OS's background class, so moving bulk data never takes a CPU from a realtime
/// thread of this or another process.
pub(super) fn sender_loop(
    shared: &Shared,
    classes: &[Priority],
    idle: fn(&mut Inner) -> &mut bool,
) {
    let mut deferred = Deferred::default();
    let mut g = shared.lock();
    while !shared.closed.load(Ordering::Relaxed) {
        let now = Instant::now();
        let t = g.core.poll_scheduled_in(now, classes);
        if g.core.has_output() {
            shared.drive(&mut g, now, &mut deferred);
        }
        match t {
            Some(t) => {
                // After what the engine produced before it, in the order of sends.
                deferred.push(&mut g, t);
                drop(g);
                deferred.run(shared);
                g = shared.lock();
                g.core.scheduled_sent(classes);
            }
            None => {
                let wait = match g.core.next_scheduled_in(now, classes) {
                    Some(at) => at.saturating_duration_since(now),
                    None => Duration::from_millis(200),
                };
                if !deferred.is_empty() {
                    drop(g);
                    deferred.run(shared);
                    g = shared.lock();
                    continue;
                }
                if wait.is_zero() {
                    continue;
                }
                *idle(&mut g) = true;
                let (g2, _) = shared
                    .sender_cv
                    .wait_timeout(g, wait)
                    .unwrap_or_else(|p| p.into_inner());
                g = g2;
                *idle(&mut g) = false;
            }
        }
    }
}

/// The registry to scan: directory, domain, our id, our address.
pub(super) type RegistryInfo = (std::path::PathBuf, u16, u64, SocketAddr);

/// The discovery group's socket, and whether what comes there from the sessions of this
/// host that the registry lists is left out (see [`same_host_copy`]).
pub(super) struct GroupRx {
    /// The socket.
    pub(super) rx: MulticastReceiver,
    /// True unless this session's readers take data on the group.
    pub(super) skip_registered: bool,
    /// The port of our own unicast socket (our announcements loop back to us).
    pub(super) own_port: u16,
}

/// Whether a datagram that came on the discovery group from `from` repeats what a session
/// of this host already sends us by unicast: it comes from an address of this host (from
/// the port of a session the registry lists, or our own). Such a session is heard at its
/// loopback address by unicast and at its interface's address by multicast; taking both
/// would make the engine see one peer at two addresses, and follow it back and forth. A
/// session of this host that the registry does not list (another registry directory, a
/// container sharing the host's network) is still found by multicast.
pub(super) fn same_host_copy(
    from: SocketAddr,
    host_ips: &[std::net::IpAddr],
    own_port: u16,
    registered: &BTreeSet<SocketAddr>,
) -> bool {
    host_ips.contains(&from.ip())
        && (from.port() == own_port || registered.iter().any(|a| a.port() == from.port()))
}

/// The registry's view in the discovery thread: what it lists, and when to look again.
struct Scanner {
    root: std::path::PathBuf,
    domain: u16,
    id: u64,
    known: BTreeSet<SocketAddr>,
    last_scan: Instant,
    every: Duration,
}

impl Scanner {
    /// Reads the directory again, and targets the sessions that came, untargets those gone.
    fn scan(&mut self, shared: &Shared) {
        self.last_scan = Instant::now();
        let found: BTreeSet<SocketAddr> = scan_dir(&self.root, self.domain, self.id);
        let added: Vec<SocketAddr> = found.difference(&self.known).copied().collect();
        let removed: Vec<SocketAddr> = self.known.difference(&found).copied().collect();
        if !added.is_empty() || !removed.is_empty() {
            shared.with_core(|i, _| {
                for a in &added {
                    i.core.add_target(*a);
                }
                for a in &removed {
                    i.core.remove_target(*a);
                }
            });
        }
        self.known = found;
    }
}

/// The discovery thread: scans the registry directory and takes multicast announcements
/// (and data, with `transport.multicast_data`), and watches the revocation list file.
pub(super) fn discovery_loop(
    shared: &Shared,
    registry: Option<RegistryInfo>,
    mcast: Option<GroupRx>,
    mut revocations: Option<RevocationWatch>,
) {
    let mut reg = registry.as_ref().and_then(|(dir, domain, id, _)| {
        // A second handle on the same directory, only for scanning (the session's own
        // entry is owned by the Session).
        Some(Scanner {
            root: dir.parent()?.to_path_buf(),
            domain: *domain,
            id: *id,
            known: BTreeSet::new(),
            last_scan: Instant::now() - Duration::from_secs(1),
            every: Duration::from_millis(50),
        })
    });
    let host_ips = match &mcast {
        Some(g) if g.skip_registered => tether_transport::path::host_addresses(),
        _ => Vec::new(),
    };
    let mut chunk = BytesMut::new();
    let mut batch: Vec<(BytesMut, SocketAddr)> = Vec::new();
    while !shared.closed.load(Ordering::Relaxed) {
        if let Some(w) = revocations.as_mut() {
            w.poll(shared, Instant::now());
        }
        if let Some(r) = reg.as_mut() {
            if r.last_scan.elapsed() >= r.every {
                r.every = (r.every * 2).min(Duration::from_millis(500));
                r.scan(shared);
            }
        }
        match &mcast {
            Some(g) => {
                if g.rx.recv_batch(&mut chunk, &mut batch).is_ok() {
                    for (d, from) in batch.drain(..) {
                        if d.is_empty() || !shared.socket_source_ok(&from) {
                            continue;
                        }
                        if g.skip_registered && host_ips.contains(&from.ip()) {
                            let empty = BTreeSet::new();
                            let listed = |r: &Option<Scanner>| {
                                let known = r.as_ref().map_or(&empty, |r| &r.known);
                                same_host_copy(from, &host_ips, g.own_port, known)
                            };
                            // A session of this host that registered since our last scan
                            // is looked for now, before its announcement is taken here.
                            if !listed(&reg) {
                                if let Some(r) = reg.as_mut() {
                                    r.scan(shared);
                                }
                            }
                            if listed(&reg) {
                                continue;
                            }
                        }
                        shared.with_core(|i, now| i.core.handle_datagram_owned(now, from, d));
                    }
                }
                batch.clear();
            }
            None => std::thread::park_timeout(Duration::from_millis(50)),
        }
    }
}

/// Lists the registry entries of other sessions without owning an entry.
fn scan_dir(root: &std::path::Path, domain: u16, me: u64) -> BTreeSet<SocketAddr> {
    // Registering a throw-away entry would advertise us twice; read the directory directly
    // through a Registry-compatible scan.
    tether_transport::Registry::scan_dir(root, domain, me)
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_host_copies_are_those_the_registry_lists() {
        let host: Vec<std::net::IpAddr> =
            vec!["127.0.0.1".parse().unwrap(), "192.0.2.2".parse().unwrap()];
        let listed: BTreeSet<SocketAddr> = ["127.0.0.1:5000".parse().unwrap()].into();
        let copy = |from: &str| same_host_copy(from.parse().unwrap(), &host, 6000, &listed);
        assert!(
            copy("192.0.2.2:5000"),
            "a registered session, by its interface"
        );
        assert!(copy("192.0.2.2:6000"), "our own announcement, looped back");
        assert!(
            !copy("192.0.2.2:5001"),
            "a session of this host not registered"
        );
        assert!(!copy("192.0.2.3:5000"), "another host");
    }
}
