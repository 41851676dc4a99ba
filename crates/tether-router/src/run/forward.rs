//! What the router gives, onto the links' queues, through the export list: what may
//! cross the site's boundary, and which way.

use std::sync::atomic::Ordering;

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
    /// is counted.
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
        }
        ok
    }
}

/// The rule of [`Shared::may_cross`], without the counting.
pub(super) fn export_allows(cfg: &RouterConfig, frame: &Frame, outward: bool) -> bool {
    let (key, carries_data) = match frame {
        Frame::Data(d) => (d.key, true),
        // A writer's datagram or announcement goes where its data goes; a reader's
        // announcement asks for data, as a subscription does.
        Frame::Unicast(u) if u.key != RouteKey::default() => (u.key, !u.reader),
        Frame::Announce(a) if a.key != RouteKey::default() => (a.key, !a.reader),
        Frame::Advertise(a) => (a.key, true),
        Frame::WithdrawAdvertise(w) => (w.key, true),
        Frame::Subscribe(k) | Frame::Unsubscribe(k) | Frame::Query(k) => (*k, false),
        _ => return true,
    };
    match cfg.export_rule(&key.0) {
        None => true,
        Some(None) => false,
        // Data going out, or a request for data coming in from outside: the key leaves.
        Some(Some(d)) if carries_data == outward => d.leaves(),
        Some(Some(d)) => d.enters(),
    }
}
