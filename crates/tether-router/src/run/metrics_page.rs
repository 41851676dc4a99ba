//! The metrics page: the router's counters and its driver's, in the Prometheus text
//! format.

use std::sync::atomic::{AtomicU64, Ordering};

use tether_routing::{DropReason, Role};

use super::Shared;
use crate::metrics::Metrics;

impl Shared {
    /// The metrics page.
    pub(super) fn render(&self) -> String {
        let st = self.lock();
        let r = &st.router;
        let s = r.stats();
        let mut m = Metrics::new();
        let name = self.cfg.name.as_str();
        m.gauge(
            "tether_router_up_seconds",
            "Seconds since the router started.",
            &[("router", name)],
            self.started.elapsed().as_secs_f64(),
        );
        for (role, label) in [(Role::Session, "session"), (Role::Router, "router")] {
            let n = st.links.values().filter(|l| l.role == role).count();
            m.gauge(
                "tether_router_links",
                "Links up, by the peer's role.",
                &[("router", name), ("role", label)],
                n as f64,
            );
        }
        m.gauge(
            "tether_router_routes",
            "Routing keys in the routing information base.",
            &[("router", name)],
            r.rib_len() as f64,
        );
        m.gauge(
            "tether_router_rib_bytes",
            "Heap bytes of the routing information base.",
            &[("router", name)],
            r.rib_heap_bytes() as f64,
        );
        m.gauge(
            "tether_router_routers_known",
            "Routers in the router graph.",
            &[("router", name)],
            r.node_count() as f64,
        );
        m.gauge(
            "tether_router_participants",
            "Participants with a host route.",
            &[("router", name)],
            r.participant_count() as f64,
        );
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (metric, help, v) in [
            (
                "tether_router_frames_received_total",
                "Link frames received.",
                s.frames_received,
            ),
            (
                "tether_router_frames_sent_total",
                "Link frames sent.",
                s.frames_sent,
            ),
            (
                "tether_router_samples_received_total",
                "DATA frames (engine datagrams of a writer) received.",
                s.data_received,
            ),
            (
                "tether_router_samples_forwarded_total",
                "DATA copies forwarded (one per link per datagram).",
                s.data_forwarded,
            ),
            (
                "tether_router_sample_bytes_forwarded_total",
                "Datagram bytes in forwarded DATA.",
                s.data_bytes_forwarded,
            ),
            (
                "tether_router_unicast_forwarded_total",
                "UNICAST frames forwarded.",
                s.unicast_forwarded,
            ),
            (
                "tether_router_announce_forwarded_total",
                "ANNOUNCE copies forwarded.",
                s.announce_forwarded,
            ),
            (
                "tether_router_floods_suppressed_total",
                "Flooded frames dropped as not newer (loop suppression).",
                s.floods_suppressed,
            ),
            (
                "tether_router_hosts_taken_over_total",
                "Participant ids moved to a newer link of the same credential (a session dialled again, or holds two links).",
                s.hosts_taken_over,
            ),
            (
                "tether_router_bytes_received_total",
                "Frame bytes received on all links.",
                c(&self.counters.bytes_in),
            ),
            (
                "tether_router_bytes_sent_total",
                "Frame bytes written to all links.",
                c(&self.counters.bytes_out),
            ),
            (
                "tether_router_links_made_total",
                "Links made.",
                c(&self.counters.links_made),
            ),
            (
                "tether_router_links_refused_total",
                "Links refused after the handshake.",
                c(&self.counters.links_refused),
            ),
            (
                "tether_router_handshakes_failed_total",
                "Handshakes that failed (certificate refused, not a tether link) or did not finish within limits.handshake_timeout_ms.",
                c(&self.handshakes.failed),
            ),
            (
                "tether_router_handshakes_retried_total",
                "Clients asked to prove their address (QUIC Retry) while many handshakes were in progress.",
                c(&self.handshakes.retried),
            ),
            (
                "tether_router_handshakes_evicted_total",
                "Handshakes ended to make room for a newer one (limits.max_handshakes, limits.max_handshakes_per_address).",
                c(&self.handshakes.evicted),
            ),
            (
                "tether_router_links_revoked_total",
                "Links closed for a revoked or expired credential.",
                c(&self.counters.links_revoked),
            ),
        ] {
            m.counter(metric, help, &[("router", name)], v);
        }
        for (reason, v) in [
            ("malformed_frame", c(&self.counters.dropped_malformed)),
            ("protocol_error", c(&self.counters.dropped_protocol)),
        ] {
            m.counter(
                "tether_router_links_dropped_total",
                "Links closed because the peer broke the link protocol, by reason.",
                &[("router", name), ("reason", reason)],
                v,
            );
        }
        m.gauge(
            "tether_router_handshakes_in_progress",
            "Handshakes in progress.",
            &[("router", name)],
            self.handshakes.in_progress() as f64,
        );
        for (reason, v) in s.drops.iter() {
            m.counter(
                "tether_router_drops_total",
                "Frames dropped, by reason.",
                &[("router", name), ("reason", reason.name())],
                v,
            );
        }
        m.counter(
            "tether_router_drops_total",
            "Frames dropped, by reason.",
            &[("router", name), ("reason", "queue_full")],
            c(&self.counters.queue_full),
        );
        m.counter(
            "tether_router_drops_total",
            "Frames dropped, by reason.",
            &[("router", name), ("reason", "export_denied")],
            c(&self.counters.export_denied),
        );
        m.counter(
            "tether_router_drops_total",
            "Frames dropped, by reason.",
            &[("router", name), ("reason", "announce_rate")],
            c(&self.counters.announce_limited),
        );
        let _ = DropReason::ALL;
        m.finish()
    }
}
