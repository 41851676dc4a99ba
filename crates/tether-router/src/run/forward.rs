//! What the router gives, onto the links' queues, through the export list: what may
//! cross the site's boundary, and which way.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tether_routing::{Frame, Role, RouteKey};

use super::{Shared, State};
use crate::config::RouterConfig;

impl Shared {
    /// Moves what the router gives onto the links' queues, through the export list.
    pub(super) fn drain(&self, st: &mut State) {
        // The frames' heads are written into one buffer and handed out as slices of it: an
        // allocation per few dozen forwarded frames, not one per frame and link.
        let mut scratch = Vec::with_capacity(64);
        let mut heads = BytesMut::new();
        while let Some((link, frame)) = st.router.poll_transmit() {
            let Some(out) = st.links.get(&link) else {
                continue;
            };
            if out.role == Role::Router && !self.may_cross(&frame, true) {
                continue;
            }
            scratch.clear();
            if frame.encode_head(&mut scratch).is_err() {
                continue;
            }
            if heads.capacity() < scratch.len() {
                heads.reserve(2048);
            }
            heads.extend_from_slice(&scratch);
            let head = heads.split().freeze();
            let body = frame.payload().cloned().unwrap_or_default();
            let n = head.len() + body.len();
            let limit = self.cfg.limits.link_queue_bytes;
            if out.queued.load(Ordering::Relaxed) + n > limit {
                self.counters.queue_full.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            out.queued.fetch_add(n, Ordering::Relaxed);
            let _ = out.tx.send((head, body));
        }
    }

    /// Whether `frame` may cross the site's boundary: to another router (`outward`) or
    /// from one. Without an export list everything may. With one, a frame that carries data
    /// of a key, or says a key has a publisher (DATA, a writer's UNICAST, ADVERTISE,
    /// WITHDRAW), crosses the way the data goes (out: the key may leave; in: it may enter);
    /// one that asks for a key's data (SUBSCRIBE, UNSUBSCRIBE, QUERY) crosses the other way
    /// (a subscription going out asks for data to come in). Other frames (HELLO, LINK_STATE,
    /// host routes, ANNOUNCE, control UNICAST) are not a topic's and cross. Data held back
    /// is counted, and the first time a key is held back one way the log says so.
    pub(super) fn may_cross(&self, frame: &Frame, outward: bool) -> bool {
        let ok = export_allows(&self.cfg, frame, outward);
        if !ok
            && (!outward
                || matches!(
                    frame,
                    Frame::Data(_) | Frame::Unicast(_) | Frame::Announce(_)
                ))
        {
            self.counters.export_denied.fetch_add(1, Ordering::Relaxed);
            if let Some((key, carries_data)) = topic_of(frame) {
                let mut d = self.denials.lock().unwrap_or_else(|p| p.into_inner());
                // Which way the key's data would have gone: a subscription coming in asks
                // for data to leave.
                d.note(&self.cfg.name, key, carries_data == outward, Instant::now());
            }
        }
        ok
    }
}

/// The most (key, way) pairs the log names; past them it says once that it stops naming,
/// until [`DENIALS_FORGET`] has passed.
const DENIALS_NAMED: usize = 1024;

/// How long a full list of named keys stands before it is forgotten and keys are named
/// again: a member sending frames under 1,024 made-up keys silences the log for this long,
/// not for good (routers do not know grants), and the log says at most 1,025 lines in it.
const DENIALS_FORGET: Duration = Duration::from_secs(600);

/// The keys the export list held back, each way, that the log has named.
#[derive(Debug, Default)]
pub(super) struct Denials {
    named: HashSet<([u8; 32], bool)>,
    /// When the list filled.
    full: Option<Instant>,
}

impl Denials {
    /// Says, once per key and way, that the export list held `key` back, its data going out
    /// of the site (`leaving`) or into it. A name never reaches a router: members print a
    /// topic's key with `tether keys topic-id`.
    /// True if the log named it now.
    fn note(&mut self, router: &str, key: RouteKey, leaving: bool, now: Instant) -> bool {
        if self.named.contains(&(key.0, leaving)) {
            return false;
        }
        if self
            .full
            .is_some_and(|t| now.saturating_duration_since(t) >= DENIALS_FORGET)
        {
            self.named.clear();
            self.full = None;
        }
        if self.named.len() >= DENIALS_NAMED {
            if self.full.is_none() {
                self.full = Some(now);
                tracing::info!(
                    "router '{router}': export list: {DENIALS_NAMED} topic keys held back; \
                     more are counted (tether_router_drops_total{{reason=\"export_denied\"}}), \
                     not named for {} minutes",
                    DENIALS_FORGET.as_secs() / 60
                );
            }
            return false;
        }
        self.named.insert((key.0, leaving));
        let hex = tether_crypto::to_hex(&key.0);
        let way = if leaving {
            "out of the site"
        } else {
            "into the site"
        };
        tracing::info!(
            "router '{router}': export list held back topic key {hex}: its data may not go {way} \
             (said once per key and way; all counted in \
             tether_router_drops_total{{reason=\"export_denied\"}})"
        );
        true
    }
}

/// The topic key a frame is about and whether it carries (or announces) the key's data;
/// `None`: not a topic's frame.
fn topic_of(frame: &Frame) -> Option<(RouteKey, bool)> {
    Some(match frame {
        Frame::Data(d) => (d.key, true),
        // A writer's datagram or announcement goes where its data goes; a reader's
        // announcement asks for data, as a subscription does.
        Frame::Unicast(u) if u.key != RouteKey::default() => (u.key, !u.reader),
        Frame::Announce(a) if a.key != RouteKey::default() => (a.key, !a.reader),
        Frame::Advertise(a) => (a.key, true),
        Frame::WithdrawAdvertise(w) => (w.key, true),
        Frame::Subscribe(k) | Frame::Unsubscribe(k) | Frame::Query(k) => (*k, false),
        _ => return None,
    })
}

/// The rule of [`Shared::may_cross`], without the counting.
pub(super) fn export_allows(cfg: &RouterConfig, frame: &Frame, outward: bool) -> bool {
    let Some((key, carries_data)) = topic_of(frame) else {
        return true;
    };
    match cfg.export_rule(&key.0) {
        None => true,
        Some(None) => false,
        // Data going out, or a request for data coming in from outside: the key leaves.
        Some(Some(d)) if carries_data == outward => d.leaves(),
        Some(Some(d)) => d.enters(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key is named once a way; past [`DENIALS_NAMED`] keys none is, until
    /// [`DENIALS_FORGET`] has passed (made-up keys silence the log for a while, not for good).
    #[test]
    fn denials_are_named_once_and_bounded_for_a_while() {
        let mut d = Denials::default();
        let t0 = Instant::now();
        let key = |i: u32| {
            let mut k = [0u8; 32];
            k[..4].copy_from_slice(&i.to_be_bytes());
            RouteKey(k)
        };
        assert!(d.note("r", key(0), true, t0));
        assert!(!d.note("r", key(0), true, t0));
        assert!(d.note("r", key(0), false, t0), "the other way is named too");
        for i in 1..DENIALS_NAMED as u32 - 1 {
            assert!(d.note("r", key(i), true, t0));
        }
        assert_eq!(d.named.len(), DENIALS_NAMED);
        let real = key(u32::MAX);
        assert!(!d.note("r", real, true, t0), "past the bound, not named");
        assert!(!d.note("r", real, true, t0 + DENIALS_FORGET / 2));
        assert!(d.note("r", real, true, t0 + DENIALS_FORGET));
        assert_eq!(d.named.len(), 1);
    }
}
