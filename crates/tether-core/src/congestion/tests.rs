use super::*;

/// A path in a few lines: every millisecond the sender sends `per_ms` bytes (if the window
/// has room) and a probe; each probe is answered `rtt(k)` later, reporting `delivered` of
/// what was sent before it (`loss`: the share that never arrives). Returns the controller
/// after `ms` milliseconds.
fn run(
    ms: u64,
    per_ms: u64,
    loss: f64,
    rtt: impl Fn(u64) -> Duration,
    windowed: bool,
) -> (Congestion, Instant) {
    run_with(ms, per_ms, |_| loss, rtt, windowed)
}

/// [`run`] with the share lost depending on the millisecond: what is sent in millisecond
/// `k` loses `loss(k)`.
fn run_with(
    ms: u64,
    per_ms: u64,
    loss: impl Fn(u64) -> f64,
    rtt: impl Fn(u64) -> Duration,
    windowed: bool,
) -> (Congestion, Instant) {
    let t0 = Instant::now();
    let mut cc = Congestion::new(t0);
    // (answer time, id, received)
    let mut answers: Vec<(Instant, u64, u64)> = Vec::new();
    let mut total = 0u64;
    let mut received = 0.0f64;
    for k in 0..ms {
        let now = t0 + Duration::from_millis(k);
        answers.sort_by_key(|a| a.0);
        while answers.first().is_some_and(|a| a.0 <= now) {
            let (at, id, received) = answers.remove(0);
            cc.on_answer(at, id, Some(received), total);
        }
        if !windowed || cc.has_room(total, now) {
            cc.on_sent(per_ms as usize);
            total += per_ms;
            received += per_ms as f64 * (1.0 - loss(k));
        }
        cc.queue_probe(now, k + 1, total);
        cc.passed(k + 1, total);
        answers.push((now + rtt(k), k + 1, received as u64));
    }
    (cc, t0 + Duration::from_millis(ms))
}

#[test]
fn round_trip_rate_and_window_come_from_the_answers() {
    // 10 KB per ms: 10 MB/s, 2 ms round trip.
    let (cc, now) = run(200, 10_000, 0.0, |_| Duration::from_millis(2), false);
    let st = cc.stats(0, now);
    assert_eq!(st.min_rtt, Some(Duration::from_millis(2)));
    let srtt = st.srtt.unwrap();
    assert!(srtt >= Duration::from_micros(1900) && srtt <= Duration::from_micros(2100));
    assert!(
        (9.0e6..=11.0e6).contains(&st.delivery_rate),
        "{}",
        st.delivery_rate
    );
    // 2 × 10 MB/s × (2 ms + the 1 ms probe spacing) = 60 KB.
    let w = st.window.unwrap();
    assert!((50_000..=70_000).contains(&w), "window {w}");
    assert_eq!(st.congestion_events, 0);
}

/// Random loss: a fifth of the bytes lost while the round trip stays put is no congestion,
/// and the rate the path carries is measured as without loss (what arrived, plus what was
/// lost on the way), so the window is the lossless one: not a fifth smaller (the rate could
/// never grow again: paced at 1.25 times what arrives, a fifth lost, the same arrives), and
/// not halved as TCP's would be.
#[test]
fn random_loss_is_not_congestion() {
    let (lossless, now) = run(300, 10_000, 0.0, |_| Duration::from_millis(2), false);
    let (lossy, _) = run(300, 10_000, 0.2, |_| Duration::from_millis(2), false);
    let (a, b) = (lossless.stats(0, now), lossy.stats(0, now));
    assert_eq!(b.congestion_events, 0);
    let ratio = b.window.unwrap() as f64 / a.window.unwrap() as f64;
    assert!((0.95..=1.05).contains(&ratio), "window ratio {ratio}");
    assert!(b.lost > 0, "the loss is seen");
}

/// Heavy random loss is still not congestion: 40 % lost with the round trip steady (a bad
/// radio link) leaves the window alone (at 30 % and more it was taken for congestion, and
/// 35 % random loss cost 98 % of goodput); over 60 % lost is congestion even without a
/// queue in sight.
#[test]
fn heavy_random_loss_is_congestion_only_past_sixty_percent() {
    let (cc, now) = run(300, 10_000, 0.4, |_| Duration::from_millis(2), false);
    assert_eq!(cc.stats(0, now).congestion_events, 0);
    let (cc, now) = run(300, 10_000, 0.7, |_| Duration::from_millis(2), false);
    assert!(cc.stats(0, now).congestion_events >= 1);
}

/// Loss with a standing queue is not made up for: the rate is what arrives.
#[test]
fn congestion_loss_is_not_added_back() {
    let (cc, now) = run(
        300,
        10_000,
        0.2,
        |k| Duration::from_millis(2 + (k / 10).min(20)),
        false,
    );
    let st = cc.stats(0, now);
    assert!(
        st.delivery_rate < 9.0e6,
        "a congested path's rate taken as {}",
        st.delivery_rate
    );
}

/// Loss while the round trip grows (a queue fills, then overflows): congestion, and the
/// window is capped below what was in flight, once per round trip, not once per answer.
#[test]
fn loss_with_a_growing_queue_caps_the_window() {
    let (cc, now) = run(
        300,
        10_000,
        0.05,
        |k| Duration::from_millis(2 + (k / 10).min(20)),
        false,
    );
    let st = cc.stats(0, now);
    assert!(st.congestion_events >= 1, "{st:?}");
    // Answers come every millisecond over some 280 ms with a round trip up to 22 ms: one
    // cut per round trip at most.
    assert!(st.congestion_events <= 40, "{st:?}");
    assert!(cc.cap.is_some());
}

/// A queue another flow has held nearly full since before this path was measured (the
/// smallest round trip seen, 6 ms, is already mostly queue), filling to 12 ms and dropping
/// a sixth while full (a tail-drop queue beside TCP, as CI measured it): the smoothed
/// round trip never reaches twice the smallest, but the recent ones all stand above it
/// while the loss comes, and that is congestion.
#[test]
fn a_queue_held_since_before_measuring_is_congestion() {
    let (cc, now) = run(
        400,
        10_000,
        0.16,
        |k| Duration::from_millis(if k < 20 { 6 } else { 11 + k % 2 }),
        false,
    );
    let st = cc.stats(0, now);
    assert_eq!(st.min_rtt, Some(Duration::from_millis(6)));
    assert!(st.congestion_events >= 1, "{st:?}");
    assert!(cc.cap.is_some());
}

/// A tail-drop queue another flow keeps nearly full since before this path was measured
/// (the smallest round trip seen, 8 ms, is mostly queue; the queue holds 13 ms), which it
/// drains a little for 3 ms in 12: loss comes only while the queue is full, half of what
/// is sent then, never while it is lower. The smallest of the recent round trips stays under
/// one and a half times the smallest, so the queue is not seen standing, and less than
/// 60 % is lost: taken for random loss, the loss was added back to the rate, the window
/// grew with every probe for more, and the TCP flow beside it was starved (CI: TCP 0 %,
/// 40 MB lost in 8 s on a 5 MB/s link). Loss that comes with the higher round trips and
/// not with the lower is a queue's, whatever the smallest round trip.
#[test]
fn loss_only_while_a_queue_is_full_is_congestion() {
    let full = |k: u64| k >= 20 && k % 12 < 9;
    let (cc, now) = run_with(
        400,
        10_000,
        |k| if full(k) { 0.5 } else { 0.0 },
        |k| {
            Duration::from_millis(if k < 20 {
                8
            } else if full(k) {
                13
            } else {
                10
            })
        },
        false,
    );
    let st = cc.stats(0, now);
    assert_eq!(st.min_rtt, Some(Duration::from_millis(8)));
    assert!(st.congestion_events >= 1, "{st:?}");
    assert!(cc.cap.is_some(), "{st:?}");
    // What arrives is 6.25 MB/s: not made up for.
    assert!(
        st.delivery_rate < 7.0e6,
        "the queue's loss added back: {}",
        st.delivery_rate
    );
}

/// A route that gets longer for good (10 ms to 14 ms, under one and a half times the
/// smallest: no queue is seen standing) and loses 10 % at random from then on: every round
/// is a "high" one, with none near the smallest to compare its loss with, so none of it is
/// a queue's (a review found 207 congestion events in 3 s, one per round trip, until the
/// smallest round trip was measured again 10 s later).
#[test]
fn a_longer_lossy_route_is_not_congestion() {
    let (cc, now) = run_with(
        4_000,
        10_000,
        |k| if k < 1_000 { 0.0 } else { 0.1 },
        |k| Duration::from_millis(if k < 1_000 { 10 } else { 14 }),
        false,
    );
    let st = cc.stats(0, now);
    assert_eq!(st.congestion_events, 0, "{st:?}");
    assert!(cc.cap.is_none());
}

/// After a queue's loss (as in [`loss_only_while_a_queue_is_full_is_congestion`]) the
/// path goes quiet at its smallest round trip with 10 % random loss: the loss of the high
/// rounds, no longer measured, stops counting within a second (a review saw the queue's
/// 50 % stand for seconds), nothing more is cut, and once the queue has not been seen for
/// [`QUEUE_HOLD`] the random loss is made up for in the rate again.
#[test]
fn a_queues_old_loss_does_not_stand_for_a_quiet_path() {
    let full = |k: u64| (20..400).contains(&k) && k % 12 < 9;
    let loss = |k: u64| {
        if k >= 400 {
            0.1
        } else if full(k) {
            0.5
        } else {
            0.0
        }
    };
    let rtt = |k: u64| {
        Duration::from_millis(if !(20..400).contains(&k) {
            8
        } else if full(k) {
            13
        } else {
            10
        })
    };
    let (during, t) = run_with(400, 10_000, loss, rtt, false);
    assert!(during.queue_loss(t), "the queue's loss is seen first");
    let (quiet, t) = run_with(1_500, 10_000, loss, rtt, false);
    assert!(!quiet.queue_loss(t), "stale after a second");
    let (cc, now) = run_with(5_000, 10_000, loss, rtt, false);
    assert!(!cc.queue_loss(now));
    let st = cc.stats(0, now);
    assert!(
        st.congestion_events <= during.stats(0, t).congestion_events + 1,
        "{st:?}"
    );
    // 9 MB/s arrive of the 10 sent: the path carries 10.
    assert!(st.delivery_rate > 9.6e6, "{st:?}");
}

/// The CI case held for 25 s, past the re-measurement of the smallest round trip at 10 s
/// (which rises to 10 ms, the level the other flow's queue drains to, making its 12 ms full
/// queue "near" a smallest that is queue), and with the queue draining to 10.5 ms, half a
/// millisecond above what the first version's "near the smallest" took for low (a review:
/// both missed, the 50 % loss added back, 11 MB/s estimated where 6.25 arrive). The kinds
/// are told by the path's own recent span of round trips, whatever the smallest.
#[test]
fn a_queue_held_past_the_remeasurement_stays_congestion() {
    for drain_to in [10.0, 10.5] {
        let full = |k: u64| k >= 20 && k % 12 < 9;
        let queue = |ms| {
            run_with(
                ms,
                10_000,
                |k| if full(k) { 0.5 } else { 0.0 },
                |k| {
                    Duration::from_secs_f64(if k < 20 {
                        0.008
                    } else if full(k) {
                        0.012
                    } else {
                        drain_to / 1e3
                    })
                },
                false,
            )
        };
        let (cc, now) = queue(25_000);
        let (early, t) = queue(20_000);
        let st = cc.stats(0, now);
        assert!(
            st.congestion_events > early.stats(0, t).congestion_events,
            "drain to {drain_to} ms: no cut in the last 5 s: {st:?}"
        );
        // 6.25 MB/s arrive: not made up for.
        assert!(st.delivery_rate < 7.0e6, "drain to {drain_to} ms: {st:?}");
    }
}

/// Random loss on a path whose answers come late now and then (one in four 4 ms late: a
/// receive thread kept from its CPU, a Wi-Fi retry): the smoothed round trip rises, the
/// smallest of the recent ones does not, and nothing is taken for congestion.
#[test]
fn late_answers_with_random_loss_are_not_congestion() {
    let (cc, now) = run(
        400,
        10_000,
        0.2,
        |k| Duration::from_millis(if k % 4 == 0 { 5 } else { 1 }),
        false,
    );
    let st = cc.stats(0, now);
    assert_eq!(st.congestion_events, 0, "{st:?}");
}

/// Without answers while bytes are in flight (a full queue drops the probes too), the
/// window is halved once per answer timeout, and opens again.
#[test]
fn silence_halves_the_window_once_per_timeout() {
    let (mut cc, now) = run(100, 10_000, 0.0, |_| Duration::from_millis(2), false);
    let total = cc.sent;
    let w = cc.window(now).unwrap();
    // Bytes go out, a probe with them, no answer comes.
    cc.on_sent(50_000);
    let total = total + 50_000;
    cc.queue_probe(now, 9_999, total);
    assert!(!cc.check_silence(now + Duration::from_micros(500), total));
    let later = now + Duration::from_millis(50);
    assert!(cc.check_silence(later, total));
    let halved = cc.window(later).unwrap();
    assert!(
        halved <= w / 2 + 1 && halved >= MIN_WINDOW,
        "{w} -> {halved}"
    );
    assert!(!cc.check_silence(later + Duration::from_millis(1), total));
    // What was in flight is taken for lost: the halved window has room (a start-up whose
    // answers were all lost stalled until one got through, past put's time-out).
    assert_eq!(cc.in_flight(total), 0);
    assert!(cc.has_room(total, later));
}

/// A peer whose answers carry no `received` (an older version) leaves the path
/// uncontrolled rather than stuck at the first window.
#[test]
fn a_peer_that_does_not_report_is_not_controlled() {
    let t0 = Instant::now();
    let mut cc = Congestion::new(t0);
    cc.on_sent(1 << 20);
    assert!(!cc.has_room(1 << 20, t0));
    cc.queue_probe(t0, 1, 1 << 20);
    let a = cc.on_answer(t0 + Duration::from_millis(1), 1, None, 1 << 20);
    assert!(a.is_some_and(|a| a.opened));
    assert!(cc.has_room(u64::MAX / 2, t0));
    assert_eq!(cc.window(t0), None);
    assert_eq!(cc.probe_at(1 << 21), None);
    // An answer to a probe it never sent is not its.
    assert!(cc.on_answer(t0, 77, Some(0), 0).is_none());
}

/// Once the rate is known the pacer spreads a burst: after a burst's worth it lets the next
/// datagram go only when the rate has earned it.
#[test]
fn the_pacer_spreads_bursts_at_the_measured_rate() {
    let (mut cc, now) = run(300, 10_000, 0.0, |_| Duration::from_millis(2), false);
    let rate = cc.pacing_rate(now).expect("a rate");
    assert!((5.0e6..=30.0e6).contains(&rate), "{rate}");
    let total = cc.settled;
    let mut sent = 0;
    while cc.may_send(total, now) {
        cc.spend(1_500, now);
        sent += 1_500;
        assert!(sent < 1 << 20, "the pacer never stops");
    }
    assert!(sent as f64 <= Congestion::burst(rate) + 1_500.0);
    let next = cc.next_send(total, now).expect("room in the window");
    assert!(next > now);
    assert!(next - now <= Duration::from_millis(1), "{:?}", next - now);
    assert!(cc.may_send(total, next + Duration::from_micros(10)));
}

/// Probes are due while new bytes leave, every probe interval; with bytes in flight and no
/// answer, after the answer timeout; with nothing new and nothing in flight, never.
#[test]
fn probes_go_while_bytes_are_in_flight() {
    let t0 = Instant::now();
    let mut cc = Congestion::new(t0);
    assert_eq!(cc.probe_at(0), None);
    cc.on_sent(1000);
    assert_eq!(cc.probe_at(1000), Some(t0));
    cc.queue_probe(t0, 1, 1000);
    cc.passed(1, 1000);
    let due = cc.probe_at(1000).expect("waiting for its answer");
    assert!(due > t0);
    cc.on_answer(t0 + Duration::from_millis(1), 1, Some(1000), 1000);
    assert_eq!(cc.probe_at(1000), None, "all answered, nothing new");
}

/// The smallest round trip is measured again every 10 s, but a queue another flow keeps
/// full from then on (the round trip goes from 1 ms to 12 ms and stays) raises it by a
/// quarter per 10 s at most, so the window does not grow to hold that queue too.
#[test]
fn a_queue_that_stays_is_not_taken_for_the_path() {
    let (cc, _) = run(
        25_000,
        1_000,
        0.0,
        |k| Duration::from_millis(if k < 1_000 { 1 } else { 12 }),
        false,
    );
    let min = cc.min_rtt.unwrap().0;
    // Two re-measurements in 25 s: 1 ms x 1.25 x 1.25.
    assert!(min <= Duration::from_micros(1_600), "{min:?}");
    assert!(
        min > Duration::from_millis(1),
        "a longer path is followed: {min:?}"
    );
}

/// A peer that stops answering (killed, its link down) while bytes keep leaving for it (a
/// reader's requests, a writer's heartbeats): probes back off to one a second, where they
/// went every few milliseconds until the lease ran out (14,000 a second, measured).
#[test]
fn probes_back_off_when_the_peer_stops_answering() {
    let (mut cc, t0) = run(100, 1_000, 0.0, |_| Duration::from_millis(1), false);
    let mut total = 100 * 1_000;
    let mut now = t0;
    let mut id = 1_000;
    let mut sent = 0;
    let end = t0 + Duration::from_secs(10);
    while now < end {
        // A request leaves every millisecond; nothing answers.
        cc.on_sent(100);
        total += 100;
        if cc.probe_at(total).is_some_and(|at| at <= now) {
            cc.check_silence(now, total);
            cc.queue_probe(now, id, total);
            cc.passed(id, total);
            id += 1;
            sent += 1;
        }
        now += Duration::from_millis(1);
    }
    // Spaced by a quarter of the silence: some 40 in 10 s.
    assert!(sent <= 60, "{sent} probes in 10 s to a silent peer");
    assert!(
        sent >= 10,
        "{sent}: a silent peer is still asked, to notice it answer again"
    );
    // It answers again: probing resumes at the probe interval.
    cc.on_answer(now, id - 1, Some(total), total);
    cc.on_sent(100);
    let at = cc.probe_at(total + 100).unwrap();
    assert!(at <= now + Duration::from_millis(50), "{:?}", at - now);
}

/// An answer reporting far more received than was ever sent (the peer's count started
/// again after it forgot us, or datagrams were forged in our name) is not taken as a
/// delivery rate: the measurement starts again from it.
#[test]
fn a_count_that_jumps_is_not_a_rate() {
    let (mut cc, now) = run(100, 10_000, 0.0, |_| Duration::from_millis(2), false);
    let before = cc.stats(0, now).delivery_rate;
    let total = cc.sent;
    cc.queue_probe(now, 77_777, total);
    cc.passed(77_777, total);
    let later = now + Duration::from_millis(2);
    cc.on_answer(later, 77_777, Some(u64::MAX / 3), total);
    let after = cc.stats(0, later).delivery_rate;
    assert!(after <= before * 1.01, "{before} -> {after}");
    assert_eq!(cc.resets, 1);
}
