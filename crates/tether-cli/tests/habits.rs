//! Issue 18, point 2: the habits of `ros2 topic` — a one-shot `pub` waits for a
//! subscriber, `-r`/`-n`, `echo`/`hz`/`bw` take the publishers' QoS, and `hz`/`bw` measure
//! over a sliding window of samples. Real processes on loopback, each test with its own
//! registry directory.

mod common;
use common::{Live, finish, spawn, tether, text, wait_until};

use std::time::{Duration, Instant};

/// Twenty one-shot publishers, one after the other, each a new process started while
/// `echo` runs: every sample arrives, and every `pub` exits 0 (it waited for the
/// subscriber, and for its acknowledgement).
#[test]
fn a_one_shot_pub_reaches_a_running_echo_20_times_in_20() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    e.args(["echo", "/once", "--count", "20", "--timeout", "120"]);
    let echo = Live::spawn(e);
    for i in 1..=20 {
        let mut p = tether(dir.path());
        // The short names of --rate and --count, as ros2 topic pub has them.
        let msg = format!("one-shot {i}");
        p.args(["pub", "once", &msg, "-n", "1", "-r", "1"]);
        let out = finish(spawn(p), Duration::from_secs(30));
        assert!(
            out.status.success(),
            "pub {i} failed: {}",
            text(&out.stderr)
        );
        // Its end says what the exit status means.
        assert!(
            text(&out.stderr).contains("published 1 sample on /once, every one acknowledged"),
            "pub {i}: {}",
            text(&out.stderr)
        );
        assert!(
            wait_until(Duration::from_secs(10), || echo.lines() >= i),
            "sample {i} did not reach echo: {:?}\n{}",
            echo.out.lock().unwrap(),
            echo.stderr()
        );
    }
    let mut echo = echo;
    assert_eq!(
        echo.wait(Duration::from_secs(10)),
        Some(0),
        "{}",
        echo.stderr()
    );
    let want: Vec<String> = (1..=20).map(|i| format!("one-shot {i}")).collect();
    assert_eq!(*echo.out.lock().unwrap(), want);
}

/// `--once` is `--count 1`: it too waits for the subscriber.
#[test]
fn once_waits_for_the_subscriber() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = tether(dir.path());
    p.args(["pub", "/late", "early bird", "--once", "-q"]);
    let publisher = spawn(p);
    // The subscriber comes a second after the publisher: the sample is not lost.
    std::thread::sleep(Duration::from_secs(1));
    let mut e = tether(dir.path());
    e.args(["echo", "/late", "--once", "--timeout", "30"]);
    let out = finish(spawn(e), Duration::from_secs(40));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "early bird\n");
    let out = finish(publisher, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// With `--rate 0` (as fast as it can) every sample of `--count 5` is delivered.
#[test]
fn rate_0_count_5_delivers_all_5() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    e.args(["echo", "/burst", "--count", "5", "--timeout", "30"]);
    let echo = spawn(e);
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/burst",
        "--numbered",
        "--rate",
        "0",
        "--count",
        "5",
        "-q",
    ]);
    let pout = finish(spawn(p), Duration::from_secs(30));
    assert!(pout.status.success(), "{}", text(&pout.stderr));
    let out = finish(echo, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(
        lines,
        ["1 hello", "2 hello", "3 hello", "4 hello", "5 hello"],
        "{}",
        text(&out.stderr)
    );
}

/// Nobody subscribes: `pub --count` waits --linger, publishes nothing, exits 1 and says
/// what to do.
#[test]
fn pub_count_with_nobody_exits_1_after_linger() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = tether(dir.path());
    p.args(["pub", "/nobody", "--count", "3", "--linger", "1"]);
    let t0 = Instant::now();
    let out = finish(spawn(p), Duration::from_secs(20));
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("no subscriber matched on /nobody within 1 s (--linger)")
            && err.contains("nothing was published")
            && err.contains("tether echo /nobody")
            && err.contains("--wait-matched 0"),
        "{err}"
    );
    assert!(
        !text(&out.stdout).contains("publishing"),
        "{}",
        text(&out.stdout)
    );
    assert!(took >= Duration::from_millis(900), "gave up after {took:?}");
    // Publishing regardless is still possible, and succeeds with nobody to owe anything.
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/nobody",
        "-n",
        "2",
        "-r",
        "0",
        "--wait-matched",
        "0",
        "-q",
    ]);
    let out = finish(spawn(p), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("2 of 2 samples were written while no subscriber"),
        "{}",
        text(&out.stderr)
    );
}

/// The subscriber leaves after its first sample: the four samples written after reached
/// nobody, and `pub` says so and exits 1 (before: exit 0, nothing said).
#[test]
fn samples_written_to_nobody_make_pub_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    e.args(["echo", "/left", "--count", "1", "--timeout", "20"]);
    let echo = spawn(e);
    let mut p = tether(dir.path());
    p.args(["pub", "/left", "hi", "-n", "5", "-r", "2", "-q"]);
    let out = finish(spawn(p), Duration::from_secs(30));
    let e = finish(echo, Duration::from_secs(30));
    assert_eq!(e.status.code(), Some(0), "{}", text(&e.stderr));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("samples were written while no subscriber was matched on /left"),
        "{err}"
    );
}

/// A transient-local keep-all publisher keeps what it wrote before anyone subscribed: a
/// late joiner takes it from the history and acknowledges it, so `pub` neither says that
/// nobody received those samples nor fails. With nobody joining it says they were kept and
/// nobody took them (before: "nobody received them" in both cases).
#[test]
fn samples_kept_for_a_late_joiner_are_not_called_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/kept",
        "hi",
        "-n",
        "8",
        "-r",
        "4",
        "--wait-matched",
        "0",
        "--transient-local",
        "--keep-all",
        "--linger",
        "15",
        "-q",
    ]);
    let publisher = spawn(p);
    std::thread::sleep(Duration::from_millis(900));
    let mut e = tether(dir.path());
    e.args([
        "echo",
        "/kept",
        "--count",
        "8",
        "--transient-local",
        "--reliable",
        "--timeout",
        "20",
    ]);
    let e = finish(spawn(e), Duration::from_secs(30));
    let out = finish(publisher, Duration::from_secs(30));
    assert_eq!(e.status.code(), Some(0), "{}", text(&e.stderr));
    assert_eq!(text(&e.stdout), "hi\n".repeat(8));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("nobody received"), "{err}");
    // Nobody joins: the samples were kept, and nobody took them.
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/alone",
        "hi",
        "-n",
        "2",
        "-r",
        "0",
        "--wait-matched",
        "0",
        "--transient-local",
        "--keep-all",
        "-q",
    ]);
    let out = finish(spawn(p), Duration::from_secs(20));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "2 of 2 samples were written while no subscriber was matched on /alone: \
             they are kept for late joiners"
        ),
        "{err}"
    );
}

/// A best-effort publisher: `echo`, `hz` and `bw` with no QoS flag subscribe best-effort
/// and hear it (a reliable reader would not match it); `echo --reliable` keeps its flag and
/// hears nothing, with the incompatibility said.
#[test]
fn echo_hz_and_bw_take_the_publishers_reliability() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/be",
        "--best-effort",
        "-r",
        "20",
        "--size",
        "50",
        "--wait-matched",
        "0",
        "-q",
    ]);
    let mut publisher = Live::spawn(p);
    let mut e = tether(dir.path());
    e.args(["echo", "/be", "--count", "3", "--timeout", "20"]);
    let echo = spawn(e);
    let mut h = tether(dir.path());
    h.args(["hz", "/be", "--duration", "3"]);
    let hz = spawn(h);
    let mut b = tether(dir.path());
    b.args(["bw", "/be", "--duration", "3"]);
    let bw = spawn(b);
    let mut r = tether(dir.path());
    r.args([
        "echo",
        "/be",
        "--reliable",
        "--count",
        "1",
        "--timeout",
        "3",
    ]);
    let reliable = spawn(r);

    let out = finish(echo, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 3);
    let out = finish(hz, Duration::from_secs(30));
    let s = text(&out.stdout);
    let rate: f64 = s
        .lines()
        .filter_map(|l| l.strip_prefix("average rate: "))
        .filter_map(|v| v.trim().parse().ok())
        .next_back()
        .unwrap_or_else(|| panic!("hz printed no rate: {s}\n{}", text(&out.stderr)));
    assert!((10.0..30.0).contains(&rate), "{rate} Hz for 20 Hz\n{s}");
    let out = finish(bw, Duration::from_secs(30));
    let s = text(&out.stdout);
    assert!(
        s.contains("Message size mean: 50 B"),
        "{s}\n{}",
        text(&out.stderr)
    );
    // The flag wins: no sample, and why.
    let out = finish(reliable, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("incompatible QoS") && err.contains("reliability=best_effort"),
        "{err}"
    );
    publisher.kill();
}

/// A transient-local publisher that has been publishing for a while: a plain `echo` takes
/// its durability and gets the retained samples from the first on; `--volatile` does not.
#[test]
fn echo_takes_the_publishers_durability() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/latched",
        "--transient-local",
        "--numbered",
        "-r",
        "4",
        "--wait-matched",
        "0",
        "-q",
    ]);
    let mut publisher = Live::spawn(p);
    // Samples 1.. are written before anyone subscribes.
    std::thread::sleep(Duration::from_millis(1500));
    let mut e = tether(dir.path());
    e.args(["echo", "/latched", "--count", "3", "--timeout", "20"]);
    let out = finish(spawn(e), Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(
        lines,
        ["1 hello", "2 hello", "3 hello"],
        "{}",
        text(&out.stderr)
    );
    // An explicit --volatile wins: what was written before it is not replayed.
    let mut e = tether(dir.path());
    e.args([
        "echo",
        "/latched",
        "--volatile",
        "--count",
        "1",
        "--timeout",
        "20",
    ]);
    let out = finish(spawn(e), Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first: u64 = text(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", text(&out.stdout)));
    assert!(first > 3, "a volatile echo got old sample {first}");
    publisher.kill();
}

/// A 0.1 Hz topic: `hz` and `bw` measure over their window of samples, not over one print
/// period, so the second sample, ten seconds after the first, gives a rate.
#[test]
fn hz_and_bw_work_at_a_tenth_of_a_hertz() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = tether(dir.path());
    h.args(["hz", "/slow", "--duration", "13"]);
    let hz = spawn(h);
    let mut b = tether(dir.path());
    b.args(["bw", "/slow", "--duration", "13"]);
    let bw = spawn(b);
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/slow",
        "-r",
        "0.1",
        "-n",
        "2",
        "--size",
        "100",
        "--wait-matched",
        "2",
        "-q",
    ]);
    let publisher = spawn(p);
    let out = finish(hz, Duration::from_secs(40));
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}{}", text(&out.stderr));
    assert!(s.contains("1 message so far"), "{s}");
    let rate: f64 = s
        .lines()
        .filter_map(|l| l.strip_prefix("average rate: "))
        .filter_map(|v| v.trim().parse().ok())
        .next_back()
        .unwrap_or_else(|| panic!("hz printed no rate at 0.1 Hz: {s}"));
    assert!((0.09..0.11).contains(&rate), "{rate} Hz for 0.1 Hz\n{s}");
    assert!(s.contains("window: 2"), "{s}");
    let out = finish(bw, Duration::from_secs(40));
    let s = text(&out.stdout);
    assert!(s.contains("from 2 messages"), "{s}{}", text(&out.stderr));
    assert!(s.contains("Message size mean: 100 B"), "{s}");
    let out = finish(publisher, Duration::from_secs(40));
    assert!(out.status.success(), "{}", text(&out.stderr));
}
