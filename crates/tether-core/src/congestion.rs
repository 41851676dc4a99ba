//! Congestion control for paths to other hosts (`docs/wire.md#received`): how many bytes
//! may be in flight to one participant, from the rate at which it receives them.
//!
//! Random loss (Wi-Fi, a lossy cable) is not congestion, so the window does not shrink when
//! datagrams are lost, as TCP's does; it follows what the path delivers, as BBR does:
//!
//! - While it sends to a participant, a sender asks it every *probe interval* (a quarter of
//!   the smallest round trip seen, 1 to 50 ms) with a small PROBE how many bytes it has
//!   received from it; the PROBE_ACK says (`received`), and its round trip is measured.
//! - Each answer gives a **delivery rate** (bytes received since an earlier answer at least
//!   two probe intervals and a round trip before, over the time between them), scaled up by
//!   the share lost in the lower rounds while no queue stands or was seen by its loss in
//!   the last 3 s, and loss stays under 60 % (random loss: the path carried those bytes
//!   too);
//!   the *bottleneck rate* is the largest of the last [`RATE_SAMPLES`]. Each gives a **round trip**; the smallest of the last 10 s is the
//!   path's propagation time.
//! - The **window** is [`GAIN`] × bottleneck rate × (smallest round trip + the time between
//!   probes, as they really went), at least [`MIN_WINDOW`]: enough to keep the path busy
//!   while the answers come, and at most about as much again standing in a queue. Bytes *in flight* are those sent since
//!   the last answered probe was sent: everything before it has arrived or is lost.
//!   Reliable keep-all writers and asynchronous reliable writers wait while a path to one
//!   of their readers is full; repairs, heartbeats and acknowledgements always go.
//! - Growth needs no separate start-up: the window lets twice the measured rate through,
//!   so the measured rate, and the window, double every round until the path is full.
//! - **Congestion** is loss together with a queue: when the answers of the last two rounds
//!   show more than 2 % of the bytes lost *and* a queue stands (the smallest of the last
//!   [`RECENT_RTTS`] round trips exceeds the smallest of 10 s by half of it, and by at
//!   least 2 ms: a late answer raises one round trip, a queue raises them all, so a flow
//!   that keeps the queue nearly full since before this one measured the path is still
//!   seen when the queue fills and drops), or the rounds whose round trip is in the upper
//!   half of the last second's span of round trips lose clearly more than those in the
//!   lower half (a tail-drop queue drops only while full, random loss whatever the round
//!   trip: this sees a queue that another flow keeps nearly full, making the smallest round
//!   trip partly queue; compared only while both kinds of rounds come and alternate within
//!   the last second), or the loss
//!   is above 60 % (more than a lossy link's), the window is capped at 70 % of what was
//!   in flight
//!   (as TCP CUBIC backs off), once per round trip; the cap rises again by an eighth per
//!   round trip without congestion. Losses on a path whose round trip stays low change
//!   nothing.
//! - Every 10 s without a new smallest round trip, the window drops to [`MIN_WINDOW`] for
//!   two round trips (at least 10 ms) so any standing queue drains and the propagation time
//!   is measured again (BBR's PROBE_RTT); it rises by a quarter at most each time, so a
//!   queue another flow keeps full does not become the propagation time.
//!
//! - A path through a router link is controlled the same way, end to end (the probes
//!   cross the routers): QUIC paces each hop and repairs its losses, but only the first
//!   hop pushes back, and a router's queue for a slower link onward drops silently. Its
//!   window is at least what the bottleneck rate carries in [`ROUTED_FLOOR_TIME`] (at
//!   most [`ROUTED_FLOOR_MAX`]): the round trips through a lossy hop include QUIC's
//!   repair waits, which are no queue.
//!
//! A sender whose probes go unanswered for a while, with bytes in flight, sends probes
//! anyway and halves its window once per timeout, taking what was in flight for lost (so
//! the window opens again, as after TCP's retransmission timeout): everything is being
//! lost (a full queue drops probes too). A peer that answers without `received` (an older version) leaves its
//! path uncontrolled.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::transmit::Transmit;

mod pacing;
mod paths;
use pacing::MIN_BURST;
pub(crate) use paths::{ROOM_RECHECK, resend_wait, room};

/// Gain on the bottleneck rate × round trip that makes the window.
pub const GAIN: f64 = 2.0;

/// The smallest window, in bytes (about 8 path-sized datagrams: 5 ms of a 20 Mbit/s link,
/// where 24 KB kept 10 ms of its queue to itself whatever else shared it).
pub const MIN_WINDOW: u64 = 12 * 1024;

/// The window before any answer has come.
pub const INITIAL_WINDOW: u64 = 64 * 1024;

/// Through a router link the window is at least what the measured delivery rate carries in
/// this long, at most [`ROUTED_FLOOR_MAX`]. QUIC repairs each hop's losses, so through
/// routers a datagram is lost only where a router's queue for a slower link overflows;
/// what the window must prevent is filling that queue. The round trips measured through a
/// lossy hop include the waits of QUIC's repairs (a stream's later frames held behind a
/// lost one) and a CUBIC hop's pauses, so a window from the smallest round trip starved
/// such a path. Measured 2026-11-28, 20 % loss on every hop, 1,000 × 100 kB at 50 Hz, last
/// sample after (one run each): with BBR links, 21 s with this floor, 30 s with a fixed
/// 1 MiB, 25 s without control through routers (which multiplied repairs when a router's
/// link onward was slower than the writer's); with CUBIC links, 110 s with this floor,
/// 86 s with 1 s, 94 s with 2 s, 81 s without control (58–88 s in earlier runs). Not
/// longer: what stands in a router's queue delays the heartbeats behind it, and a reader
/// silent for a writer's inactivity time (the engine's 3 s; 20 s in a session with
/// routers) is let go of with what it owes: with 3 s and a floor of 1 s, a reader behind
/// a 1 MB/s link was let go of after a 2 s outage of the writer's link. In time rather
/// than bytes for the same reason: a 4 MiB floor queued 4 s on such a link.
pub const ROUTED_FLOOR_TIME: Duration = Duration::from_millis(500);

/// The most the floor of a routed path's window holds ([`ROUTED_FLOOR_TIME`]): half a
/// router's queue for one link (`limits.link_queue_bytes`, 8 MiB by default).
pub const ROUTED_FLOOR_MAX: u64 = 4 << 20;

/// Delivery-rate samples the bottleneck rate is the largest of.
pub const RATE_SAMPLES: usize = 10;

/// How long the smallest round trip stands before it is measured again.
pub const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);

/// Probes waiting for an answer at most: no more are sent until one is answered or the
/// oldest times out (a round trip of 64 probe intervals, 16 times the smallest, is still
/// measured).
const MAX_PROBES: usize = 64;

/// Least and most time between probes.
const PROBE_MIN: Duration = Duration::from_millis(1);
const PROBE_MAX: Duration = Duration::from_millis(50);

/// The most time between probes to a peer that stopped answering.
const PROBE_SILENT: Duration = Duration::from_secs(1);

/// The least queueing delay taken for congestion (with loss).
const QUEUE_MIN: Duration = Duration::from_millis(2);

/// Round trips whose smallest tells the queue standing now: one late answer (a receive
/// thread kept from its CPU, a Wi-Fi retry) raises the smoothed round trip, but not the
/// smallest of several; a queue raises them all.
const RECENT_RTTS: usize = 8;

/// Bytes beyond what was sent that an answer may report before its peer's count is taken
/// to have started again.
const RESET_SLACK: u64 = 64 * 1024;

/// The least time without any answer, bytes in flight, before the window is halved.
const SILENCE_MIN: Duration = Duration::from_millis(20);

/// The most loss taken for random (a lossy link's) rather than a queue overflowing: above
/// it, even with no queue in sight (a flow that holds the queue full since before this one
/// measured the path's round trip hides it), loss is congestion.
const RANDOM_LOSS_MAX: f64 = 0.6;

/// A share of lost bytes above which an answer may signal congestion.
const LOSS_THRESHOLD: f64 = 0.02;

/// How much more the rounds with a queue must lose than those without (beyond half as much
/// again) for the loss to be the queue's.
const QUEUE_LOSS_MARGIN: f64 = 0.05;

/// Answers each of the loss of low and of high rounds needs before they are compared.
const LOSS_KIND_SAMPLES: u32 = 8;

/// How recent the last answer of each kind must be for them to be compared.
const LOSS_KIND_FRESH: Duration = Duration::from_secs(1);

/// The span of round trips the kinds are told by covers the last one to two of these.
const SPAN_HALF: Duration = Duration::from_millis(500);

/// The least span of round trips that kinds are told in.
const SPAN_MIN: Duration = Duration::from_millis(1);

/// How long after the loss by round trip last showed a queue no loss is made up for.
const QUEUE_HOLD: Duration = Duration::from_secs(3);

/// One probe waiting for its answer.
#[derive(Debug, Clone, Copy)]
struct RttProbe {
    id: u64,
    /// When it was queued.
    at: Instant,
    /// Bytes sent to the participant before it (set when it leaves: `passed`).
    sent: Option<u64>,
}

/// The previous answer, to measure the next against.
#[derive(Debug, Clone, Copy)]
struct Answered {
    received: u64,
    sent: u64,
    probe_at: Instant,
    at: Instant,
}

/// Why an answer changed the window, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Answer {
    /// It opened room that was not there (a waiting writer may go on).
    pub(crate) opened: bool,
    /// It showed congestion: the window was capped.
    pub(crate) congested: bool,
}

/// A path's congestion state, on the sending side; see the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct Congestion {
    /// Counted bytes sent to the participant's own address.
    sent: u64,
    /// The data group it takes data on, and that group's count when it joined.
    group: Option<(SocketAddr, u64)>,
    probes: VecDeque<RttProbe>,
    /// Sent bytes (all of them) when the last probe was queued.
    probed: u64,
    next_probe: Instant,
    /// Smoothed time between answered probes' sending: how stale the window's knowledge of
    /// what is in flight gets (at least the probe interval).
    spacing: Option<Duration>,
    srtt: Option<Duration>,
    rttvar: Duration,
    /// The smallest round trip and when it was seen.
    min_rtt: Option<(Duration, Instant)>,
    /// The last [`RECENT_RTTS`] round trips (zero: not yet measured), and where the next goes.
    recent: [Duration; RECENT_RTTS],
    recent_at: usize,
    rates: [f64; RATE_SAMPLES],
    rate_at: usize,
    /// Bytes per second: the largest of `rates`.
    bottleneck: f64,
    last: Option<Answered>,
    /// The previous round's bytes sent and (seemingly) lost.
    prev_round: Option<(u64, u64)>,
    /// Smoothed share of the bytes sent that were lost.
    loss_rate: f64,
    /// The same, of the rounds whose round trip was in the lower half of the span of the
    /// last second's round trips and of those in the upper half ([`Self::kind`]): loss a
    /// queue causes comes with the higher round trips only.
    loss_low: f64,
    loss_high: f64,
    /// The smallest and largest round trips of the current half second and of the one
    /// before: the span the kinds are told by.
    span_cur: Option<(Duration, Duration)>,
    span_prev: Option<(Duration, Duration)>,
    span_at: Instant,
    /// When the loss by round trip last showed a queue: for a while after, no loss is made
    /// up for in the rate (a queue that stays full longer than the span's second hides
    /// its low rounds).
    queue_at: Option<Instant>,
    /// How many answers each of them has taken, and when each last took one: both must be
    /// recent and well sampled to tell a queue's loss (a path whose every round trip rose,
    /// a longer route, has no recent low rounds to compare with).
    loss_low_n: u32,
    loss_high_n: u32,
    loss_low_at: Option<Instant>,
    loss_high_at: Option<Instant>,
    /// The kind of the last answer either took (true: low), and when the rounds last went
    /// from high to low and from low to high: a queue that fills and drains alternates
    /// them, a route that got longer goes from low to high once.
    loss_last_low: Option<bool>,
    went_low_at: Option<Instant>,
    went_high_at: Option<Instant>,
    /// The kind of the previous answer's round trip (true: low), if it had one.
    last_near: Option<bool>,
    /// The answer the next delivery-rate sample is measured from, when the last one was
    /// too close to measure from.
    rate_base: Option<Answered>,
    /// Sent bytes before the last answered probe: settled (arrived, or lost).
    settled: u64,
    /// A cap on the window after congestion.
    cap: Option<u64>,
    /// Until when the window is at its minimum (re-measuring the smallest round trip).
    draining: Option<Instant>,
    /// The peer reports `received`: control applies.
    reports: bool,
    /// Estimated bytes lost so far.
    pub(crate) lost: u64,
    /// Answers that showed congestion.
    pub(crate) congestion_events: u64,
    /// Answers that reported far more received than sent (see `on_answer`).
    pub(crate) resets: u64,
    /// A path through a router link: its window has a floor ([`ROUTED_FLOOR_TIME`]).
    routed: bool,
    /// Datagrams of paced writers waiting for room in the window, in order (with what
    /// follows them of those writers' streams: heartbeats and GAPs may not overtake them).
    queue: VecDeque<Transmit>,
    /// Bytes of samples in `queue`.
    queued: u64,
    /// The pacer: bytes it may send now (negative: owed), as of `paced_at`.
    tokens: f64,
    paced_at: Instant,
    /// Start-up: the rate doubles each round until it stops growing by a quarter three
    /// rounds in a row (`full`), then the gain cycles (`cycle`, since `cycle_at`).
    full: bool,
    full_rate: f64,
    full_rounds: u32,
    round_at: Instant,
    cycle: usize,
    cycle_at: Instant,
    /// When the window was last capped for congestion (once per round trip at most), and
    /// when the cap last rose.
    capped_at: Option<Instant>,
    raised_at: Option<Instant>,
}

/// What congestion leaves of the bytes in flight: TCP CUBIC's and BBRv2's 0.7, so a flow of
/// either kind sharing the path backs off as much as this one.
const BETA: f64 = 0.7;

/// What a path's controller knows, for statistics and tools.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathStats {
    /// Smoothed round trip (probes' answers), if measured.
    pub srtt: Option<Duration>,
    /// Smallest round trip of the last 10 s.
    pub min_rtt: Option<Duration>,
    /// Estimated bottleneck rate, bytes per second (0 before it is measured).
    pub delivery_rate: f64,
    /// The window, bytes (`None`: the path is not controlled).
    pub window: Option<u64>,
    /// Bytes in flight now.
    pub in_flight: u64,
    /// Bytes of samples waiting for room in the window.
    pub queued: u64,
    /// Estimated bytes lost so far.
    pub lost: u64,
    /// Answers that showed congestion (loss with a queue).
    pub congestion_events: u64,
}

impl Congestion {
    pub(crate) fn new(now: Instant) -> Self {
        Congestion {
            sent: 0,
            group: None,
            probes: VecDeque::new(),
            probed: 0,
            next_probe: now,
            spacing: None,
            srtt: None,
            rttvar: Duration::ZERO,
            min_rtt: None,
            recent: [Duration::ZERO; RECENT_RTTS],
            recent_at: 0,
            rates: [0.0; RATE_SAMPLES],
            rate_at: 0,
            bottleneck: 0.0,
            last: None,
            prev_round: None,
            loss_rate: 0.0,
            loss_low: 0.0,
            loss_high: 0.0,
            span_cur: None,
            span_prev: None,
            span_at: now,
            queue_at: None,
            loss_low_n: 0,
            loss_high_n: 0,
            loss_low_at: None,
            loss_high_at: None,
            loss_last_low: None,
            went_low_at: None,
            went_high_at: None,
            last_near: None,
            rate_base: None,
            settled: 0,
            cap: None,
            draining: None,
            reports: true,
            lost: 0,
            congestion_events: 0,
            resets: 0,
            routed: false,
            queue: VecDeque::new(),
            queued: 0,
            tokens: MIN_BURST,
            paced_at: now,
            full: false,
            full_rate: 0.0,
            full_rounds: 0,
            round_at: now,
            cycle: 0,
            cycle_at: now,
            capped_at: None,
            raised_at: None,
        }
    }

    /// A controller for a path through a router link ([`ROUTED_FLOOR_TIME`]).
    pub(crate) fn routed(now: Instant) -> Self {
        Congestion {
            routed: true,
            ..Congestion::new(now)
        }
    }

    /// Bytes of samples waiting in the queue for room in the window.
    pub(crate) fn queued(&self) -> u64 {
        self.queued
    }

    /// True if paced writers may give this path more: less than a window's worth of their
    /// datagrams waits in its queue.
    pub(crate) fn accepts(&self, now: Instant) -> bool {
        self.window(now).is_none_or(|w| self.queued < w)
    }

    /// Counts `len` bytes sent to the participant's own address.
    pub(crate) fn on_sent(&mut self, len: usize) {
        self.sent = self.sent.wrapping_add(len as u64);
    }

    /// Sends to `group` from now on count for this participant (`group_sent`: the group's
    /// count now); `None`: it left its group.
    pub(crate) fn set_group(&mut self, group: Option<(SocketAddr, u64)>, old: u64) {
        // What the old group carried so far stays counted.
        if let Some((_, base)) = self.group {
            self.sent = self.sent.wrapping_add(old.wrapping_sub(base));
        }
        self.group = group;
    }

    /// The data group this path's participant takes data on, if any.
    pub(crate) fn group(&self) -> Option<SocketAddr> {
        self.group.map(|(g, _)| g)
    }

    /// Every counted byte sent to the participant: to its address and to its group
    /// (`group_sent`: the group's count now, 0 without one).
    pub(crate) fn total(&self, group_sent: u64) -> u64 {
        let g = self
            .group
            .map_or(0, |(_, base)| group_sent.wrapping_sub(base));
        self.sent.wrapping_add(g)
    }

    /// The time between probes: a quarter of the smallest round trip, 1 to 50 ms.
    pub(crate) fn probe_interval(&self) -> Duration {
        self.min_rtt
            .map_or(PROBE_MIN, |(r, _)| r / 4)
            .clamp(PROBE_MIN, PROBE_MAX)
    }

    /// How long an unanswered probe is waited for before another goes without new data.
    fn answer_timeout(&self) -> Duration {
        let rtt = self.srtt.unwrap_or(Duration::from_millis(10));
        (rtt * 2 + self.rttvar * 4).clamp(Duration::from_millis(2), Duration::from_millis(500))
    }

    /// When a probe is due (`total`: bytes sent so far): every probe interval while new
    /// bytes leave; while bytes are in flight and no answer comes, after the answer
    /// timeout; once the oldest probe waiting has gone unanswered for an answer timeout,
    /// a quarter of the silence after the newest (at least the timeout), up to
    /// [`PROBE_SILENT`]. `None`: nothing to ask.
    pub(crate) fn probe_at(&self, total: u64) -> Option<Instant> {
        if !self.reports {
            return None;
        }
        // A peer that has not answered for an answer timeout may be gone (killed, its link
        // down) or the path may be losing everything: probes back off, spaced by a quarter
        // of the silence so far, up to [`PROBE_SILENT`] (without this a reader whose writer
        // died probed it 14,000 times a second until the lease ran out).
        if let (Some(oldest), Some(newest)) = (self.probes.front(), self.probes.back()) {
            let timeout = self.answer_timeout();
            let silent_from = oldest.at + timeout;
            if newest.at >= silent_from {
                // A quarter of the time without an answer so far: a path that loses half
                // of everything answers one probe in four, and keeps its clock.
                let silence = newest.at.saturating_duration_since(oldest.at);
                let spacing = (silence / 4).clamp(timeout.max(self.probe_interval()), PROBE_SILENT);
                return Some(newest.at + spacing);
            }
        }
        if self.probes.len() >= MAX_PROBES {
            // Enough on their way: the next once the oldest is given up.
            return self
                .probes
                .front()
                .map(|p| p.at + self.answer_timeout() * 2);
        }
        if total != self.probed {
            return Some(self.next_probe);
        }
        let waiting = total != self.settled;
        let newest = self.probes.back().map(|p| p.at);
        match (waiting, newest) {
            (true, Some(at)) => Some(at + self.answer_timeout()),
            (true, None) => Some(self.next_probe),
            _ => None,
        }
    }

    /// Before a probe is queued: if bytes are in flight and the oldest probe waiting has
    /// had no answer for twice the answer timeout (at least 20 ms), everything is being lost
    /// (a full queue drops probes too, a link went down): the window is halved, once per
    /// timeout, and what was in flight is taken for lost, so the window has room again.
    /// True if so.
    pub(crate) fn check_silence(&mut self, now: Instant, total: u64) -> bool {
        let Some(oldest) = self.probes.front().map(|p| p.at) else {
            return false;
        };
        // Generous: an answer that has arrived may wait in this host's socket while its
        // receive thread shares a CPU with a busy writer. And no sooner than what is in
        // flight could have drained at the measured rate: a probe waits behind it in the
        // path's queue (through a router, up to a window's floor, [`ROUTED_FLOOR_TIME`],
        // which outlasts the round trips measured before the queue filled; taken for
        // silence, what was in flight was taken for lost and as much again sent behind
        // it, and the router's queue overflowed).
        let drain = if self.bottleneck > 0.0 {
            Duration::from_secs_f64((self.in_flight(total) as f64 / self.bottleneck).min(10.0))
        } else {
            Duration::ZERO
        };
        let timeout = (self.answer_timeout() * 2).max(SILENCE_MIN).max(drain * 2);
        if total == self.settled || now < oldest + timeout {
            return false;
        }
        if self.capped_at.is_some_and(|t| now < t + timeout) {
            return false;
        }
        let w = self.window(now).unwrap_or(INITIAL_WINDOW);
        let cap = (w / 2).max(MIN_WINDOW);
        self.cap = Some(self.cap.map_or(cap, |c| c.min(cap)));
        self.capped_at = Some(now);
        self.congestion_events += 1;
        self.full = true;
        // What was in flight is taken for lost (as TCP's retransmission timeout does): the
        // halved window opens again, so a path whose answers were all lost (a start-up in
        // a burst of loss) is not shut until one gets through; repairs ask for the rest.
        // Through a router, not before a delivery rate is measured: QUIC repairs each hop,
        // so silence there is a queue or a link down, and the first answer waits behind
        // the first window at the router, for as long as the link onward takes to carry
        // it, which nothing measured yet says (a writer that took that wait for loss sent
        // as much again, each time: 11 s of a 1 MB/s link queued at a router in the first
        // second, a new user's runs). Once a rate is measured, the timeout above covers
        // the drain, and a link down must not hold the writer for good: its samples wait
        // in its history, repaired once the link is back.
        if !self.routed || self.bottleneck > 0.0 {
            self.settled = total;
        }
        true
    }

    /// A probe `id` is queued at `now` (`total`: bytes sent so far).
    pub(crate) fn queue_probe(&mut self, now: Instant, id: u64, total: u64) {
        if self.probes.len() >= MAX_PROBES {
            self.probes.pop_front();
        }
        self.probes.push_back(RttProbe {
            id,
            at: now,
            sent: None,
        });
        self.probed = total;
        self.next_probe = now + self.probe_interval();
    }

    /// Probe `id` leaves now, after `total` counted bytes.
    pub(crate) fn passed(&mut self, id: u64, total: u64) {
        if let Some(p) = self.probes.iter_mut().find(|p| p.id == id) {
            p.sent = Some(total);
        }
    }

    /// The answer to probe `id`, at `now`: `received` as the peer reports it. `None` if `id`
    /// is not one of this path's probes (it may be a path-size probe's).
    pub(crate) fn on_answer(
        &mut self,
        now: Instant,
        id: u64,
        received: Option<u64>,
        total: u64,
    ) -> Option<Answer> {
        let i = self.probes.iter().position(|p| p.id == id)?;
        let probe = self.probes[i];
        // Older probes were lost (or their answers were): they will not be waited for.
        self.probes.drain(..=i);
        let Some(received) = received else {
            // A peer that does not report: no control.
            self.reports = false;
            return Some(Answer {
                opened: true,
                congested: false,
            });
        };
        let full_before = !self.has_room(total, now);
        let sample = now.saturating_duration_since(probe.at);
        self.on_rtt(now, sample);
        let sent = probe.sent.unwrap_or(total);
        let mut congested = false;
        if let Some(last) = self.last {
            let sent_d = sent.wrapping_sub(last.sent).min(1 << 62);
            let recv_d = received.wrapping_sub(last.received).min(1 << 62);
            // More arrived than was sent, by far: the peer's count started again (it forgot
            // us and met us again), or datagrams were forged in our name. Measure from here.
            if recv_d > sent_d.saturating_mul(2).max(sent_d + RESET_SLACK) {
                self.last = Some(Answered {
                    received,
                    sent,
                    probe_at: probe.at,
                    at: now,
                });
                self.rate_base = None;
                self.prev_round = None;
                self.settled = sent;
                self.resets += 1;
                return Some(Answer {
                    opened: full_before && self.has_room(total, now),
                    congested: false,
                });
            }
            // A probe may overtake bytes sent just before it, which then count in the next
            // round; no more than that (and what the last round seemed to lose) can arrive.
            let recv_d = recv_d.min(sent_d + self.prev_round.map_or(0, |(_, l)| l));
            // A probe can overtake data sent just before it from another thread: the bytes
            // missing at one answer may arrive by the next. Loss is judged over the last two
            // rounds, where that cancels out.
            let round = (sent_d, sent_d.saturating_sub(recv_d));
            let (prev_sent, prev_lost) = self.prev_round.unwrap_or((0, 0));
            let (two_sent, two_lost) = (sent_d + prev_sent, (round.1 + prev_lost).min(1 << 62));
            let recovered = recv_d.saturating_sub(sent_d);
            let two_lost = two_lost.saturating_sub(recovered);
            self.prev_round = Some(round);
            self.lost = self.lost.wrapping_add(round.1).saturating_sub(recovered);
            if two_sent > 0 {
                let f = (two_lost as f64 / two_sent as f64).min(1.0);
                self.loss_rate = self.loss_rate * 0.75 + f * 0.25;
                // The loss is judged over two rounds: it is one kind's only if both were.
                match (self.last_near, self.kind(sample)) {
                    (Some(true), Some(true)) => {
                        self.loss_low = self.loss_low * 0.875 + f * 0.125;
                        self.loss_low_n = self.loss_low_n.saturating_add(1);
                        self.loss_low_at = Some(now);
                        if self.loss_last_low == Some(false) {
                            self.went_low_at = Some(now);
                        }
                        self.loss_last_low = Some(true);
                    }
                    (Some(false), Some(false)) => {
                        self.loss_high = self.loss_high * 0.875 + f * 0.125;
                        self.loss_high_n = self.loss_high_n.saturating_add(1);
                        self.loss_high_at = Some(now);
                        if self.loss_last_low == Some(true) {
                            self.went_high_at = Some(now);
                        }
                        self.loss_last_low = Some(false);
                    }
                    _ => {}
                }
            }
            let gap = probe.at.saturating_duration_since(last.probe_at);
            self.spacing = Some(self.spacing.map_or(gap, |s| (s * 7 + gap) / 8));
            // The rate over at least two probe intervals and a round trip: a receiver takes
            // datagrams in bursts, and two answers close together would measure one.
            let base = self.rate_base.unwrap_or(last);
            let span = now
                .saturating_duration_since(base.at)
                .max(probe.at.saturating_duration_since(base.probe_at));
            let least = (self.probe_interval() * 2).max(self.min_rtt.map_or(PROBE_MIN, |(m, _)| m));
            if span >= least {
                let delivered = received.wrapping_sub(base.received).min(1 << 62);
                self.on_rate(now, delivered as f64 / span.as_secs_f64());
                self.rate_base = None;
            } else if self.rate_base.is_none() {
                self.rate_base = Some(last);
            }
            congested = two_sent > 0
                && two_lost as f64 > LOSS_THRESHOLD * two_sent as f64
                && (self.standing_queue()
                    || self.loss_rate > RANDOM_LOSS_MAX
                    || (self.kind(sample) == Some(false) && self.queue_loss(now)));
            if self.queue_loss(now) {
                self.queue_at = Some(now);
            }
        }
        self.last = Some(Answered {
            received,
            sent,
            probe_at: probe.at,
            at: now,
        });
        self.last_near = self.kind(sample);
        // One cut per round trip: the answers of one round all see the same queue.
        let round = self.srtt.unwrap_or(PROBE_MIN);
        if congested && self.capped_at.is_some_and(|t| now < t + round) {
            congested = false;
        }
        if congested {
            let in_flight = total.wrapping_sub(self.settled).min(1 << 62);
            let cap = ((in_flight as f64 * BETA) as u64).max(MIN_WINDOW);
            self.cap = Some(self.cap.map_or(cap, |c| c.min(cap)));
            self.capped_at = Some(now);
            self.congestion_events += 1;
            // A queue stood: leave start-up, and drain it.
            self.full = true;
        } else if let Some(c) = self.cap {
            // The cap rises again by an eighth per round trip without congestion, as a
            // loss-based flow sharing the path would grow: not per answer (several a round).
            let last = self.raised_at.or(self.capped_at).unwrap_or(now);
            if now >= last + round {
                let c = c + c / 8;
                self.cap = (c < self.raw_window()).then_some(c);
                self.raised_at = Some(now);
            }
        }
        self.settled = sent;
        Some(Answer {
            opened: full_before && self.has_room(total, now),
            congested,
        })
    }

    /// True if a queue stands on the path: the smallest of the last [`RECENT_RTTS`] round
    /// trips exceeds the smallest of all by half of it and by more than [`QUEUE_MIN`] (one
    /// late answer, or a receive thread kept from its CPU for a few milliseconds, does not
    /// count: the smoothed round trip would). A link that loses at random keeps its round
    /// trip.
    fn standing_queue(&self) -> bool {
        let (Some((min, _)), Some(floor)) = (self.min_rtt, self.recent_floor()) else {
            return false;
        };
        floor > min + (min / 2).max(QUEUE_MIN)
    }

    /// The kind of round trip `sample`: low (true) in the lower half of the span of the
    /// last half second to second's round trips, high (false) in the upper half; none while
    /// that span is under [`SPAN_MIN`] (nothing to tell apart: random loss on
    /// a path with a little jitter splits evenly between the kinds anyway). Told by the path's own
    /// recent round trips, not by the smallest of 10 s: a queue another flow never lets
    /// drain below some level makes that smallest partly queue, and it moves when measured
    /// again.
    fn kind(&self, sample: Duration) -> Option<bool> {
        let (lo, hi) = match (self.span_cur, self.span_prev) {
            (Some((a, b)), Some((c, d))) => (a.min(c), b.max(d)),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => return None,
        };
        if hi.saturating_sub(lo) < SPAN_MIN {
            return None;
        }
        Some(sample <= lo + (hi - lo) / 2)
    }

    /// Takes round trip `sample` into the span [`Self::kind`] tells by.
    fn note_span(&mut self, now: Instant, sample: Duration) {
        if now.saturating_duration_since(self.span_at) >= SPAN_HALF {
            self.span_prev = self.span_cur.take();
            self.span_at = now;
        }
        self.span_cur = Some(match self.span_cur {
            Some((lo, hi)) => (lo.min(sample), hi.max(sample)),
            None => (sample, sample),
        });
    }

    /// True if the rounds with the higher round trips lose clearly more than those near the
    /// smallest: a tail-drop queue drops only while it is full, where random loss takes its
    /// share whatever the round trip. This sees a queue that another flow has held since
    /// before the smallest round trip was measured, which [`Self::standing_queue`] misses
    /// when the queue drains now and then. Both kinds of rounds must have been seen lately
    /// and often enough ([`LOSS_KIND_SAMPLES`] each, the last within [`LOSS_KIND_FRESH`]),
    /// and the rounds must have gone both from low to high and from high to low within it
    /// (a queue filling and draining): a route that got longer and loses at random goes
    /// from low to high once and stays, and a queue's past loss must not stand for a path
    /// that is quiet now.
    fn queue_loss(&self, now: Instant) -> bool {
        let fresh = |at: Option<Instant>| {
            at.is_some_and(|t| now.saturating_duration_since(t) <= LOSS_KIND_FRESH)
        };
        self.loss_low_n >= LOSS_KIND_SAMPLES
            && self.loss_high_n >= LOSS_KIND_SAMPLES
            && fresh(self.loss_low_at)
            && fresh(self.loss_high_at)
            && fresh(self.went_low_at)
            && fresh(self.went_high_at)
            && self.loss_high > self.loss_low * 1.5 + QUEUE_LOSS_MARGIN
    }

    /// The smallest of the last [`RECENT_RTTS`] round trips, once that many are measured.
    fn recent_floor(&self) -> Option<Duration> {
        let floor = self.recent.iter().copied().min()?;
        (floor > Duration::ZERO).then_some(floor)
    }

    fn on_rtt(&mut self, now: Instant, sample: Duration) {
        self.note_span(now, sample);
        self.recent[self.recent_at] = sample;
        self.recent_at = (self.recent_at + 1) % RECENT_RTTS;
        match self.srtt {
            None => {
                self.srtt = Some(sample);
                self.rttvar = sample / 2;
            }
            Some(s) => {
                let d = s.abs_diff(sample);
                self.rttvar = (self.rttvar * 3 + d) / 4;
                self.srtt = Some((s * 7 + sample) / 8);
            }
        }
        match self.min_rtt {
            Some((m, at)) if sample > m && now < at + MIN_RTT_WINDOW => {}
            Some((m, _)) if sample > m => {
                // Not seen lower for 10 s: drain whatever queue stands, then measure again.
                // The smallest rises by a quarter at most per window: a queue another flow
                // holds full (a loss-based one, which never lets it drain) must not become
                // the path's propagation time, or the window would grow to hold that queue
                // too and the other flow would starve (TCP kept 8-16 % beside a writer that
                // started first). A path that really got longer is followed, more slowly.
                let d = (self.srtt.unwrap_or(m) * 2).max(Duration::from_millis(10));
                self.draining = Some(now + d);
                self.min_rtt = Some((sample.min(m + m / 4), now));
            }
            _ => self.min_rtt = Some((sample, now)),
        }
    }

    fn on_rate(&mut self, now: Instant, rate: f64) {
        // What the path carries, not only what arrives: on a path that loses at random
        // (no queue stands), a fifth lost means the path took a quarter more than arrived.
        // Without this the rate could never grow under random loss: paced at 1.25 times
        // what arrives, a fifth lost, the same would arrive again.
        // Only the loss of the rounds without a queue is made up for: loss that comes with
        // a queue is the path refusing more, and added back it would grow the rate with
        // every probe for more (the more sent, the more lost, the more added back).
        let queue_lately = self
            .queue_at
            .is_some_and(|t| now.saturating_duration_since(t) <= QUEUE_HOLD);
        let rate = if self.standing_queue() || self.loss_rate > RANDOM_LOSS_MAX || queue_lately {
            rate
        } else if self.loss_low_n >= LOSS_KIND_SAMPLES
            && self
                .loss_low_at
                .is_some_and(|t| now.saturating_duration_since(t) <= LOSS_KIND_FRESH)
        {
            rate / (1.0 - self.loss_rate.min(self.loss_low))
        } else {
            // No recent rounds near the smallest round trip to tell random loss by: all of
            // it counts, as before there was a queue to tell it from.
            rate / (1.0 - self.loss_rate)
        };
        self.rates[self.rate_at] = rate;
        self.rate_at = (self.rate_at + 1) % RATE_SAMPLES;
        self.bottleneck = self.rates.iter().copied().fold(0.0, f64::max);
        // Once a round: has the rate stopped growing (the path is full)?
        if !self.full && now >= self.round_at + self.phase_length() {
            self.round_at = now;
            if self.bottleneck >= self.full_rate * 1.25 {
                self.full_rate = self.bottleneck;
                self.full_rounds = 0;
            } else {
                self.full_rounds += 1;
                if self.full_rounds >= 3 {
                    self.full = true;
                    // Start the cycle draining what start-up queued.
                    self.cycle = 1;
                    self.cycle_at = now;
                }
            }
        }
    }

    /// The window before any congestion cap.
    fn raw_window(&self) -> u64 {
        match (self.min_rtt, self.last) {
            (Some((rtt, _)), Some(_)) if self.bottleneck > 0.0 => {
                // The probes' real spacing, but no more than twice the interval: answers
                // that stop coming (lost) must not widen the window.
                let p = self.probe_interval();
                let spacing = self.spacing.unwrap_or_default().clamp(p, p * 2);
                let w = GAIN * self.bottleneck * (rtt + spacing).as_secs_f64();
                (w as u64).max(MIN_WINDOW)
            }
            _ => INITIAL_WINDOW,
        }
    }

    /// The window at `now` (`None`: not controlled).
    pub(crate) fn window(&self, now: Instant) -> Option<u64> {
        if !self.reports {
            return None;
        }
        // A routed path's floor, from the measured delivery rate (none before: the probes'
        // answers wait behind what was sent, and the silence check cannot yet tell how long
        // that takes to drain).
        let floor = if self.routed {
            ((self.bottleneck * ROUTED_FLOOR_TIME.as_secs_f64()) as u64).min(ROUTED_FLOOR_MAX)
        } else {
            0
        };
        if self.draining.is_some_and(|t| now < t) {
            return Some(MIN_WINDOW.max(floor));
        }
        let w = self.raw_window();
        Some(self.cap.map_or(w, |c| c.min(w)).max(floor))
    }

    /// Bytes in flight (`total`: sent so far).
    pub(crate) fn in_flight(&self, total: u64) -> u64 {
        total.wrapping_sub(self.settled).min(1 << 62)
    }

    /// True if more may be sent now.
    pub(crate) fn has_room(&self, total: u64, now: Instant) -> bool {
        self.window(now).is_none_or(|w| self.in_flight(total) < w)
    }

    /// How long a request to the participant takes to be answered: the smoothed round trip
    /// and twice its variation, but at most twice the smoothed round trip (a first sample,
    /// taken while a process was starting, must not make repairs wait for long). `None`
    /// before a round trip is measured.
    pub(crate) fn answer_within(&self) -> Option<Duration> {
        let s = self.srtt?;
        Some(s + (self.rttvar * 2).min(s))
    }

    pub(crate) fn stats(&self, total: u64, now: Instant) -> PathStats {
        PathStats {
            srtt: self.srtt,
            min_rtt: self.min_rtt.map(|(r, _)| r),
            delivery_rate: self.bottleneck,
            window: self.window(now),
            in_flight: self.in_flight(total),
            queued: self.queued(),
            lost: self.lost,
            congestion_events: self.congestion_events,
        }
    }
}

#[cfg(test)]
mod tests;
