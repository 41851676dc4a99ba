//! What `tether pub` and `tether echo` tell their user about security: the line they start
//! with (the realm and identity they run as, or that security is off), the counters
//! `--stats` prints (refusals included), and the name a session announces by default
//! (none: nothing about the process). Real processes on loopback, each test with its own
//! registry directory.

mod common;
use common::{finish, text};

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn tether(reg: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    // This host only, in the test's own registry directory: tests never meet.
    c.arg("--registry-dir").arg(reg);
    c.args(["--discovery", "localhost"]);
    c.env_remove("TETHER_DOMAIN").env_remove("TETHER_PEERS");
    c.env_remove("TETHER_CONFIG").env_remove("TETHER_KEYS");
    c
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `tether keys ARGS…`, which must succeed; its stdout.
fn keys(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("keys")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
}

/// A realm in `dir` with members `(name, pub pattern, sub pattern)`: the CA's public key
/// in hex, and each member's expiry as `tether keys issue` printed it.
fn realm(dir: &Path, members: &[(&str, &str, &str)]) -> (String, Vec<String>) {
    let d = dir.to_str().unwrap();
    let out = keys(&["init", d]);
    let ca = out
        .lines()
        .find_map(|l| l.strip_prefix("CA public key "))
        .expect("keys init prints the CA's public key")
        .trim()
        .to_string();
    let expiries = members
        .iter()
        .map(|(name, p, s)| {
            let out = keys(&["issue", d, name, "--pub", p, "--sub", s]);
            let first = out.lines().next().unwrap_or("");
            first
                .split_once(", expires ")
                .map(|(_, e)| e.to_string())
                .expect("keys issue prints the expiry")
        })
        .collect();
    (ca, expiries)
}

/// The first line on stderr.
fn first_err_line(o: &Output) -> String {
    text(&o.stderr).lines().next().unwrap_or("").to_string()
}

const OFF: &str = "security off (no --keys): anyone on the network can read and write";

/// Without keys, `pub` and `echo` say first that security is off and what that means;
/// `-q` silences the line.
#[test]
fn start_line_says_security_is_off() {
    let t = tempfile::tempdir().unwrap();
    let reg = t.path().join("reg");
    let mut e = tether(&reg);
    e.args(["echo", "/open", "--count", "1", "--timeout", "30"]);
    let echo = spawn(e);
    let mut p = tether(&reg);
    p.args(["pub", "/open", "hi", "--count", "1", "--wait-matched", "1"]);
    let pout = finish(spawn(p), Duration::from_secs(40));
    let eout = finish(echo, Duration::from_secs(40));
    assert!(pout.status.success(), "{}", text(&pout.stderr));
    assert!(eout.status.success(), "{}", text(&eout.stderr));
    assert_eq!(first_err_line(&pout), OFF);
    assert_eq!(first_err_line(&eout), OFF);
    assert_eq!(text(&eout.stdout).trim(), "hi");

    for cmd in [
        &["echo", "/open", "-q", "--timeout", "0.2"][..],
        &["pub", "/open", "-q", "--count", "1", "--linger", "0"][..],
    ] {
        let mut c = tether(&reg);
        c.args(cmd);
        let o = finish(spawn(c), Duration::from_secs(30));
        assert!(!text(&o.stderr).contains("security off"), "{cmd:?}");
    }
}

/// With keys, the line names the realm (the start of its CA's public key, as `tether keys
/// init` and `tether keys show` print it), the member's name and serial, and when its
/// credential expires.
#[test]
fn start_line_names_realm_and_identity() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    let (ca, expires) = realm(
        &dir,
        &[
            ("robot1", "/robot/**", "/none"),
            ("viewer", "/none", "/robot/*"),
        ],
    );
    let reg = t.path().join("reg");
    let mut e = tether(&reg);
    e.arg("--keys").arg(dir.join("viewer.key")).args([
        "echo",
        "/robot/odom",
        "--count",
        "1",
        "--timeout",
        "30",
    ]);
    let echo = spawn(e);
    let mut p = tether(&reg);
    p.arg("--keys").arg(dir.join("robot1.key")).args([
        "pub",
        "/robot/odom",
        "pose",
        "--count",
        "1",
        "--wait-matched",
        "1",
        "--linger",
        "20",
    ]);
    let pout = finish(spawn(p), Duration::from_secs(40));
    let eout = finish(echo, Duration::from_secs(40));
    assert!(pout.status.success(), "{}", text(&pout.stderr));
    assert!(eout.status.success(), "{}", text(&eout.stderr));
    assert_eq!(
        first_err_line(&pout),
        format!(
            "secure realm {}, as robot1 (serial 1), credential expires {}; no revocation \
             list (--revocations FILE: revoked members are refused only where their list is \
             loaded)",
            &ca[..16],
            expires[0]
        )
    );
    assert_eq!(
        first_err_line(&eout),
        format!(
            "secure realm {}, as viewer (serial 2), credential expires {}; no revocation \
             list (--revocations FILE: revoked members are refused only where their list is \
             loaded)",
            &ca[..16],
            expires[1]
        )
    );
    assert!(!text(&pout.stderr).contains("security off"));
}

/// `--stats` on `pub` (new) and `echo` prints the counters that are not zero, refusals
/// among them: a member of another realm is refused (auth_failed) by both.
#[test]
fn stats_show_refusals() {
    let t = tempfile::tempdir().unwrap();
    let (ours, theirs) = (t.path().join("ours"), t.path().join("theirs"));
    realm(&ours, &[("robot", "/robot/**", "/none")]);
    realm(&theirs, &[("stranger", "/none", "/robot/**")]);
    let reg = t.path().join("reg");
    let mut e = tether(&reg);
    e.arg("--keys").arg(theirs.join("stranger.key")).args([
        "echo",
        "/robot/odom",
        "--timeout",
        "4",
        "--stats",
    ]);
    let echo = spawn(e);
    let mut p = tether(&reg);
    p.arg("--keys").arg(ours.join("robot.key")).args([
        "pub",
        "/robot/odom",
        "pose",
        "--count",
        "20",
        "--rate",
        "10",
        "--linger",
        "0.5",
        // Nobody it can write for matches: publish regardless, to count what was written.
        "--wait-matched",
        "0",
        "--stats",
        "-q",
    ]);
    let pout = finish(spawn(p), Duration::from_secs(40));
    let eout = finish(echo, Duration::from_secs(40));
    // A row of the --stats table: `    auth_failed   2`.
    let counter = |o: &Output, name: &str| -> Option<u64> {
        text(&o.stderr)
            .lines()
            .find_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [n, v] if n == name => v.parse().ok(),
                _ => None,
            })
    };
    let (perr, eerr) = (text(&pout.stderr), text(&eout.stderr));
    assert!(pout.status.success(), "{perr}");
    assert_eq!(counter(&pout, "samples_written"), Some(20), "{perr}");
    assert!(
        counter(&pout, "auth_failed").is_some_and(|n| n >= 1),
        "{perr}"
    );
    assert!(
        counter(&eout, "auth_failed").is_some_and(|n| n >= 1),
        "{eerr}"
    );
    // Zeros are left out.
    assert_eq!(counter(&pout, "samples_delivered"), None, "{perr}");
    assert!(eerr.contains("received 0 samples"), "{eerr}");
}

/// A session announces no name unless the configuration gives one: `tether info` shows
/// the echo's session as unnamed, not by its process id; with `name` it shows that.
#[test]
fn default_name_reveals_nothing() {
    let t = tempfile::tempdir().unwrap();
    let reg = t.path().join("reg");
    let named = t.path().join("named.toml");
    std::fs::write(&named, "name = \"robot1\"\n").unwrap();
    for (k, config) in [None, Some(&named)].into_iter().enumerate() {
        let topic = format!("/who{k}");
        let mut e = tether(&reg);
        if let Some(c) = config {
            e.arg("--config").arg(c);
        }
        // Both QoS flags: the subscription is made at once, not when a publisher shows up
        // (whose QoS it would otherwise take).
        e.args([
            "echo",
            &topic,
            "--reliable",
            "--volatile",
            "--timeout",
            "4",
            "-q",
        ]);
        let echo = spawn(e);
        let pid = echo.id();
        let mut i = tether(&reg);
        i.args(["info", &topic, "--wait", "2"]);
        let out = finish(spawn(i), Duration::from_secs(30));
        let info = text(&out.stdout);
        let session = info
            .lines()
            .find_map(|l| {
                l.split_once("(session ")
                    .and_then(|(_, s)| s.strip_suffix(')'))
            })
            .unwrap_or_else(|| panic!("no subscriber listed: {info}"))
            .to_string();
        match config {
            None => assert_eq!(session, "unnamed", "{info}"),
            Some(_) => assert_eq!(session, "robot1", "{info}"),
        }
        assert!(!session.contains(&pid.to_string()), "{info}");
        finish(echo, Duration::from_secs(30));
    }
}

/// Nothing arrives, and each side says why: an `echo` without keys beside a secure `pub`
/// learns the peer is in a secure realm and it has no keys; an `echo` of another realm
/// learns the peer's credential is not sealed for its realm. All three start at once.
///
/// (An `echo` started with the `pub` once never said it had no keys: the refusal is raised
/// once per peer, a millisecond or two after `open`, and went only to listeners registered
/// by then; `echo` registers its own just after `open`. The first listener now gets what
/// was raised before it: `first_listener_gets_events_raised_before_it` in
/// `crates/tether/tests/session.rs`.)
#[test]
fn refusals_say_why_nothing_arrives() {
    let t = tempfile::tempdir().unwrap();
    let reg = t.path().join("reg");
    let (r1, r2) = (t.path().join("r1"), t.path().join("r2"));
    realm(&r1, &[("talker", "/chatter", "/none")]);
    realm(&r2, &[("listener", "/none", "/chatter")]);
    let mut p = tether(&reg);
    p.arg("--keys").arg(r1.join("talker.key")).args([
        "pub", "/chatter", "hi", "--rate", "20", "--count", "200", "-q",
    ]);
    let publisher = spawn(p);
    let mut plain = tether(&reg);
    // Generous timeouts: the suite runs many processes at once, and the message is what
    // is checked, not how soon it comes.
    plain.args(["echo", "/chatter", "--count", "1", "--timeout", "12"]);
    let plain = spawn(plain);
    let mut other = tether(&reg);
    other.arg("--keys").arg(r2.join("listener.key")).args([
        "echo",
        "/chatter",
        "--count",
        "1",
        "--timeout",
        "4",
    ]);
    let other = spawn(other);
    let plain = finish(plain, Duration::from_secs(30));
    let other = finish(other, Duration::from_secs(30));
    let _ = finish(publisher, Duration::from_secs(30));
    assert_eq!(plain.status.code(), Some(1), "{}", text(&plain.stderr));
    assert!(
        text(&plain.stderr).contains("is in a secure realm and this session has no keys"),
        "{}",
        text(&plain.stderr)
    );
    assert_eq!(other.status.code(), Some(1), "{}", text(&other.stderr));
    assert!(
        text(&other.stderr).contains("not sealed with this realm's secret"),
        "{}",
        text(&other.stderr)
    );
}
