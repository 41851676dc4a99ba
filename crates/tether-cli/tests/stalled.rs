//! A stopped reader among three, as real processes on loopback (`kill -STOP`): it cannot
//! stall the other two, the publisher hears that it was let go of, and when it is
//! continued it reports what it lost. With `--inactive-after strict` it holds everyone, as
//! DDS's strict reliability does. Each test uses its own registry directory.

mod common;
use common::{Live, lost_ranges, numbers, wait_until};

use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn tether(reg: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    // This host only, in the test's own registry directory: tests never meet.
    c.arg("--registry-dir").arg(reg);
    c.args(["--discovery", "localhost"]);
    c.env_remove("TETHER_DOMAIN").env_remove("TETHER_PEERS");
    c.env_remove("TETHER_CONFIG");
    c
}

/// Three keep-all `echo`s of `/stall` (the third with a small receive buffer, so that what
/// it misses while stopped is really lost) and a keep-all `pub` of `n` numbered samples at
/// 2,000 a second, with `pub_args` added. Leases are 30 s, so only inactivity, not the
/// lease, can let the stopped reader go. The publisher's `max_blocking_time` is 200 ms, far
/// below the 3 s after which a silent reader is let go of: a put blocked by the stopped
/// reader alone waits for that instead of failing.
fn start(dir: &Path, n: u64, pub_args: &[&str]) -> (Vec<Live>, Live) {
    let reg = dir.join("reg");
    let long = dir.join("long.toml");
    let lease = "[discovery]\nlease_ms = 30000\n";
    std::fs::write(&long, lease).unwrap();
    let pub_cfg = dir.join("pub.toml");
    std::fs::write(
        &pub_cfg,
        format!("{lease}[reliability]\nmax_blocking_time_ms = 200\n"),
    )
    .unwrap();
    // The third reader is named, so the publisher's report can be told apart (sessions
    // announce no name by default).
    let small = dir.join("small.toml");
    std::fs::write(
        &small,
        format!("name = \"third\"\n{lease}[transport]\nrecv_buffer = 200000\n"),
    )
    .unwrap();
    let echoes: Vec<Live> = (0..3)
        .map(|i| {
            let mut e = tether(&reg);
            e.arg("--config").arg(if i == 2 { &small } else { &long });
            e.args([
                "echo",
                "/stall",
                "--keep-all",
                "--count",
                &n.to_string(),
                "--timeout",
                "120",
            ]);
            Live::spawn(e)
        })
        .collect();
    let mut p = tether(&reg);
    p.arg("--config")
        .arg(&pub_cfg)
        .args([
            "pub",
            "/stall",
            "x",
            "--numbered",
            "--keep-all",
            "--count",
            &n.to_string(),
            "--rate",
            "2000",
            "--wait-matched",
            "3",
            "--linger",
            "60",
            "-q",
        ])
        .args(pub_args);
    (echoes, Live::spawn(p))
}

/// One of three readers is stopped mid-stream. The publisher lets it go after 3 s of
/// silence and says so; the other two get every sample, in order. Continued, the stopped
/// one resumes: every sample is either printed (in order, once) or reported lost with its
/// range, and the publisher exits 1 naming it, for samples it never acknowledged. (Before,
/// the stopped reader froze the others, and the publisher failed after its
/// max_blocking_time.)
#[test]
fn a_stopped_reader_does_not_stall_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let n = 16_000u64;
    let (mut echoes, mut publisher) = start(dir.path(), n, &[]);
    assert!(
        wait_until(Duration::from_secs(60), || echoes[2].lines() >= 1000),
        "the third reader got {} samples: {}",
        echoes[2].lines(),
        echoes[2].stderr()
    );
    echoes[2].signal("STOP");
    let stopped_at = echoes[2].lines() as u64;

    for e in &mut echoes[..2] {
        let code = e.wait(Duration::from_secs(90));
        assert_eq!(code, Some(0), "{}", e.stderr());
        let got = numbers(&e.out.lock().unwrap());
        assert_eq!(got, (1..=n).collect::<Vec<_>>());
    }
    assert!(
        wait_until(Duration::from_secs(30), || publisher
            .stderr()
            .contains("is inactive")),
        "the publisher was not told: {}",
        publisher.stderr()
    );

    echoes[2].signal("CONT");
    let code = publisher.wait(Duration::from_secs(90));
    let perr = publisher.stderr();
    assert_eq!(code, Some(1), "{perr}");
    assert!(perr.contains("of third has not acknowledged"), "{perr}");
    assert!(perr.contains("answers again"), "{perr}");

    // Every sample is printed or reported lost, once.
    let third = &echoes[2];
    let settled = || {
        let lost: u64 = lost_ranges(&third.stderr())
            .iter()
            .map(|(a, b)| b - a + 1)
            .sum();
        third.lines() as u64 + lost >= n
    };
    assert!(
        wait_until(Duration::from_secs(60), settled),
        "{} printed, stderr: {}",
        third.lines(),
        third.stderr()
    );
    let got = numbers(&third.out.lock().unwrap());
    assert!(got.windows(2).all(|p| p[0] < p[1]), "out of order or twice");
    let mut all: Vec<u64> = got.clone();
    let ranges = lost_ranges(&third.stderr());
    for (a, b) in &ranges {
        all.extend(*a..=*b);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=n).collect::<Vec<_>>(), "lost: {ranges:?}");
    assert!(!ranges.is_empty(), "the stopped reader lost nothing");
    assert!(got.len() as u64 > stopped_at);
    // Both sides count the same: the publisher owes the third what it lost, not every
    // sample it let go of (some waited in the third's socket and were printed).
    let owed = owed_to(&perr, "third", n);
    assert_eq!(owed, Some(n - got.len() as u64), "{perr}");
    eprintln!(
        "stopped after {stopped_at} samples; then printed {}, lost {} in {} runs",
        got.len() as u64 - stopped_at,
        n - got.len() as u64,
        ranges.len()
    );
}

/// `--inactive-after strict`: the stopped reader holds the publisher's history, so the
/// publisher stalls with it and fails after its max_blocking_time (DDS's behaviour, kept
/// on request), and the other readers get no further.
#[test]
fn a_strict_publisher_waits_for_a_stopped_reader() {
    let dir = tempfile::tempdir().unwrap();
    let n = 16_000u64;
    let (echoes, mut publisher) = start(dir.path(), n, &["--inactive-after", "strict"]);
    assert!(
        wait_until(Duration::from_secs(60), || echoes[2].lines() >= 1000),
        "{}",
        echoes[2].stderr()
    );
    echoes[2].signal("STOP");
    // After the failed put it waits for acknowledgements: until the stopped reader's lease
    // (30 s) and one more have run out, or its --linger (60 s).
    let code = publisher.wait(Duration::from_secs(100));
    let perr = publisher.stderr();
    assert_eq!(code, Some(2), "{perr}");
    assert!(perr.contains("put timed out"), "{perr}");
    assert!(!perr.contains("is inactive"), "{perr}");
    // And what the readers owe of what was written: the stopped one at least.
    assert!(
        perr.contains("has not acknowledged") && perr.contains(" samples"),
        "{perr}"
    );
    for e in &echoes[..2] {
        assert!(e.lines() < n as usize, "{} samples", e.lines());
    }
}

/// How many of the `n` samples `pub` says reader `name` has not acknowledged.
fn owed_to(perr: &str, name: &str, n: u64) -> Option<u64> {
    let tail = format!(" of {n} samples");
    perr.lines()
        .find(|l| l.contains(&format!("of {name} ")) && l.ends_with(&tail))
        .and_then(|l| l.strip_suffix(&tail))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|x| x.parse().ok())
}

/// A reader's process stopped past `--inactive-after` while every sample waited in its
/// socket (a slow stream, a large buffer): the publisher lets it go, but continued it
/// prints every sample, says it lost none, and the publisher, told by its acknowledgements
/// that it skipped none, exits 0. (Before, `pub` exited 1 saying the samples it let go of
/// were not acknowledged, while `echo` said "lost 0".)
#[test]
fn a_stopped_reader_with_everything_in_its_socket_is_owed_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let reg = dir.path().join("reg");
    let n = 60u64;
    let mut echo = tether(&reg);
    echo.args([
        "echo",
        "/paused",
        "--keep-all",
        "--count",
        &n.to_string(),
        "--timeout",
        "60",
    ]);
    let mut echo = Live::spawn(echo);
    let mut p = tether(&reg);
    p.args([
        "pub",
        "/paused",
        "x",
        "--numbered",
        "--keep-all",
        "--count",
        &n.to_string(),
        "--rate",
        "20",
        "--inactive-after",
        "1",
        "--wait-matched",
        "1",
        "--linger",
        "30",
    ]);
    let mut publisher = Live::spawn(p);
    assert!(
        wait_until(Duration::from_secs(30), || echo.lines() >= 5),
        "{}",
        echo.stderr()
    );
    echo.signal("STOP");
    assert!(
        wait_until(Duration::from_secs(10), || publisher
            .stderr()
            .contains("is inactive")),
        "the publisher did not let the stopped reader go: {}",
        publisher.stderr()
    );
    // A little more is written into its socket after it was let go of.
    std::thread::sleep(Duration::from_millis(500));
    echo.signal("CONT");
    assert_eq!(
        echo.wait(Duration::from_secs(60)),
        Some(0),
        "{}",
        echo.stderr()
    );
    let got = numbers(&echo.out.lock().unwrap());
    assert_eq!(got, (1..=n).collect::<Vec<_>>(), "{}", echo.stderr());
    let code = publisher.wait(Duration::from_secs(60));
    let perr = publisher.stderr();
    assert!(perr.contains("answers again"), "{perr}");
    assert_eq!(code, Some(0), "{perr}");
}

/// A `put` blocked by a stopped reader (`--inactive-after strict`, blocking time 4 s; a
/// bounded run keeps 10 samples, so the put blocks at once) when
/// the publisher's own process is stopped for 6 s: the reader is continued first, and the
/// publisher, continued, goes on waiting for the rest of its blocking time, hears the
/// reader and finishes. The time its process did not run is not held against the put.
/// (Before: the put failed at once on SIGCONT, "put timed out", status 2: the lossy
/// review's 5.)
#[test]
fn a_put_does_not_count_its_own_stop_as_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let reg = dir.path().join("reg");
    let cfg = dir.path().join("pub.toml");
    std::fs::write(&cfg, "[reliability]\nmax_blocking_time_ms = 4000\n").unwrap();
    let n = 3000u64;
    let mut echo = tether(&reg);
    echo.args([
        "echo",
        "/own_stop",
        "--keep-all",
        "--count",
        &n.to_string(),
        "--timeout",
        "60",
    ]);
    let mut echo = Live::spawn(echo);
    let mut p = tether(&reg);
    p.arg("--config").arg(&cfg).args([
        "pub",
        "/own_stop",
        "x",
        "--numbered",
        "--count",
        &n.to_string(),
        "--rate",
        "0",
        "--inactive-after",
        "strict",
        "--wait-matched",
        "1",
        "--linger",
        "30",
        "-q",
    ]);
    let mut publisher = Live::spawn(p);
    assert!(
        wait_until(Duration::from_secs(30), || echo.lines() >= 1),
        "{}",
        echo.stderr()
    );
    echo.signal("STOP");
    // The history fills within milliseconds; the put then blocks.
    std::thread::sleep(Duration::from_millis(1500));
    publisher.signal("STOP");
    std::thread::sleep(Duration::from_secs(6));
    echo.signal("CONT");
    std::thread::sleep(Duration::from_millis(300));
    publisher.signal("CONT");
    let code = publisher.wait(Duration::from_secs(60));
    let perr = publisher.stderr();
    assert!(!perr.contains("put timed out"), "{perr}");
    assert_eq!(code, Some(0), "{perr}");
    assert_eq!(
        echo.wait(Duration::from_secs(60)),
        Some(0),
        "{}",
        echo.stderr()
    );
    let got = numbers(&echo.out.lock().unwrap());
    assert_eq!(got, (1..=n).collect::<Vec<_>>(), "{}", echo.stderr());
}

/// A subscriber's process stopped longer than its lease (4 s) while `pub` writes into its
/// socket: the publisher's lease of it runs out. `pub` waits (within `--linger`) one more
/// lease for it; continued, it takes every sample from its socket, is taken back by the
/// publisher as the same reader, and acknowledges them all: `pub` exits 0, `echo` lost 0.
/// (Before: `pub` exited 1 at once saying the reader "left before acknowledging" what it
/// then received: the lossy review.)
#[test]
fn a_reader_stopped_past_its_lease_is_taken_back() {
    let dir = tempfile::tempdir().unwrap();
    let reg = dir.path().join("reg");
    let cfg = dir.path().join("short.toml");
    std::fs::write(
        &cfg,
        "[discovery]\nlease_ms = 4000\nannounce_period_ms = 200\n",
    )
    .unwrap();
    let n = 60u64;
    let mut echo = tether(&reg);
    // A subscriber that runs on (no --count): one that ended as soon as it had its
    // samples would say goodbye before the publisher met it again, to a publisher that no
    // longer knows it.
    echo.arg("--config")
        .arg(&cfg)
        .args(["echo", "/lapsed", "--keep-all", "--timeout", "14"]);
    let mut echo = Live::spawn(echo);
    let mut p = tether(&reg);
    p.arg("--config").arg(&cfg).args([
        "pub",
        "/lapsed",
        "x",
        "--numbered",
        "--keep-all",
        "--count",
        &n.to_string(),
        "--rate",
        "20",
        "--inactive-after",
        "strict",
        "--wait-matched",
        "1",
        "--linger",
        "30",
    ]);
    let mut publisher = Live::spawn(p);
    assert!(
        wait_until(Duration::from_secs(30), || echo.lines() >= 5),
        "{}",
        echo.stderr()
    );
    echo.signal("STOP");
    // Past its lease (4 s), 3 s within the one more lease the publisher waits (meeting
    // again takes a few announcements, longer on a loaded machine).
    std::thread::sleep(Duration::from_secs(5));
    echo.signal("CONT");
    let code = publisher.wait(Duration::from_secs(60));
    let perr = publisher.stderr();
    assert_eq!(code, Some(0), "{perr}");
    assert_eq!(
        echo.wait(Duration::from_secs(60)),
        Some(0),
        "{}",
        echo.stderr()
    );
    let got = numbers(&echo.out.lock().unwrap());
    assert_eq!(got, (1..=n).collect::<Vec<_>>(), "{}", echo.stderr());
}
