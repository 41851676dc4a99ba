//! Issue 18, point 5: a robust command line — Ctrl-C (a real SIGINT) ends with the
//! summary and the counters, a closed pipe (a real one) ends a command quietly with status
//! 0, `--keys`/TETHER_KEYS and a config file's security mode go together, a config file's
//! relative paths are taken from its directory, `--size` is checked before anything is
//! allocated, topic names follow ROS 2's rules, and errors say their OS error once and
//! what to do.

mod common;
use common::{Live, finish, spawn, tether, text, wait_until};

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A publisher of `topic` at 20 Hz that runs until killed.
fn steady(dir: &Path, topic: &str) -> Live {
    let mut p = tether(dir);
    p.args(["pub", topic, "-r", "20", "--wait-matched", "0", "-q"]);
    Live::spawn(p)
}

/// The first number after `key` on its line of `s` (`samples_delivered: 12` → 12, and so
/// in a table: `samples_delivered │ 12`).
fn number_after(s: &str, key: &str) -> Option<u64> {
    let at = s.find(key)? + key.len();
    let line = s[at..].lines().next()?;
    line.trim_start_matches(|c: char| !c.is_ascii_digit())
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// SIGINT to `echo --stats`: status 130, the summary (how many samples came and how many
/// were lost) and the session's counters, which agree with what was printed.
#[test]
fn sigint_to_echo_prints_the_summary_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let mut publisher = steady(dir.path(), "/ctrlc");
    let mut e = tether(dir.path());
    e.args(["echo", "/ctrlc", "--stats"]);
    let mut echo = Live::spawn(e);
    assert!(
        wait_until(Duration::from_secs(20), || echo.lines() >= 5),
        "{}",
        echo.stderr()
    );
    // The publisher goes first, so that nothing arrives between the signal and the count.
    publisher.kill();
    std::thread::sleep(Duration::from_millis(300));
    echo.signal("INT");
    assert_eq!(
        echo.wait(Duration::from_secs(10)),
        Some(130),
        "{}",
        echo.stderr()
    );
    let err = echo.stderr();
    let printed = echo.lines() as u64;
    let line = err
        .lines()
        .find(|l| l.starts_with("interrupted (SIGINT): received "))
        .unwrap_or_else(|| panic!("no summary: {err}"));
    assert_eq!(
        line,
        format!("interrupted (SIGINT): received {printed} samples on /ctrlc, lost 0")
    );
    assert!(err.contains("session counters"), "{err}");
    assert_eq!(
        number_after(&err, "samples_delivered"),
        Some(printed),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// SIGINT to `pub --stats` and to `hz`: each says what it did before it was stopped.
#[test]
fn sigint_to_pub_and_hz_prints_what_they_did() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/ctrlc2",
        "-r",
        "20",
        "--wait-matched",
        "0",
        "--stats",
        "-q",
    ]);
    let mut publisher = Live::spawn(p);
    let mut h = tether(dir.path());
    h.args(["hz", "/ctrlc2"]);
    let mut hz = Live::spawn(h);
    assert!(
        wait_until(Duration::from_secs(20), || hz.lines() >= 2),
        "{}",
        hz.stderr()
    );
    hz.signal("INT");
    assert_eq!(
        hz.wait(Duration::from_secs(10)),
        Some(130),
        "{}",
        hz.stderr()
    );
    let err = hz.stderr();
    let line = err
        .lines()
        .find(|l| l.starts_with("interrupted (SIGINT) after "))
        .unwrap_or_else(|| panic!("no summary from hz: {err}"));
    let n = number_after(line, "s: ").unwrap_or_else(|| panic!("{line}"));
    assert!(n >= 2 && line.ends_with("on /ctrlc2"), "{line}");

    publisher.signal("INT");
    assert_eq!(
        publisher.wait(Duration::from_secs(20)),
        Some(130),
        "{}",
        publisher.stderr()
    );
    let err = publisher.stderr();
    let sent = number_after(&err, "interrupted (SIGINT) after ")
        .unwrap_or_else(|| panic!("no summary from pub: {err}"));
    assert!(sent >= 2, "{err}");
    assert!(err.contains("samples on /ctrlc2"), "{err}");
    assert!(err.contains("session counters"), "{err}");
    assert!(
        number_after(&err, "samples_written").is_some_and(|w| w == sent),
        "{err}"
    );
}

/// A reliable `echo` (with `echo_args`) and a `pub` (`pub_args`) of it, once the echo has
/// printed `lines`; then the echo is stopped (SIGSTOP): it acknowledges nothing more.
fn pub_with_a_stopped_reader(
    dir: &Path,
    echo_args: &[&str],
    pub_args: &[&str],
    lines: usize,
) -> (Live, Live) {
    let mut e = tether(dir);
    e.arg("echo").args(echo_args);
    let echo = Live::spawn(e);
    let mut p = tether(dir);
    p.arg("pub").args(pub_args);
    let publisher = Live::spawn(p);
    assert!(
        wait_until(Duration::from_secs(20), || echo.lines() >= lines),
        "{}\n{}",
        echo.stderr(),
        publisher.stderr()
    );
    echo.signal("STOP");
    (echo, publisher)
}

/// SIGINT to `publisher`: it ends with 130 within 5 s; its stderr.
fn sigint_ends_at_once(publisher: &mut Live) -> String {
    let t0 = Instant::now();
    publisher.signal("INT");
    assert_eq!(
        publisher.wait(Duration::from_secs(20)),
        Some(130),
        "{}",
        publisher.stderr()
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    publisher.stderr()
}

/// A signal sent twice at once (GNU `timeout -s INT` without `--foreground` signals the
/// command, then its whole group) is one request: `pub` still waits for its stopped
/// reader's acknowledgements, as after one Ctrl-C; a signal later is a second request and
/// ends it at once.
#[test]
fn a_signal_sent_twice_at_once_is_one_request() {
    let dir = tempfile::tempdir().unwrap();
    // The reader stops acknowledging; the writer has samples it owes.
    let (mut echo, mut publisher) = pub_with_a_stopped_reader(
        dir.path(),
        &["/twice", "--reliable"],
        &[
            "/twice",
            "-r",
            "20",
            "--reliable",
            "--linger",
            "30",
            "--wait-matched",
            "1",
        ],
        2,
    );
    std::thread::sleep(Duration::from_millis(300));
    // Two signals 20 ms apart: far enough for the first to be handled before the second
    // comes (two pending at once would be one), close enough to be one request.
    let pid = publisher.child.id() as libc::pid_t;
    for _ in 0..2 {
        // SAFETY: kill sends a signal to the publisher this test started; nothing else.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        wait_until(Duration::from_secs(10), || publisher
            .stderr()
            .contains("interrupt again to quit now")),
        "{}",
        publisher.stderr()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        publisher.child.try_wait().unwrap().is_none(),
        "the doubled signal ended pub: {}",
        publisher.stderr()
    );
    // Quitting early, it still says what it wrote and what was not acknowledged.
    let err = sigint_ends_at_once(&mut publisher);
    assert!(
        err.contains("interrupted again: not waiting any longer"),
        "{err}"
    );
    assert!(err.contains("interrupted (SIGINT) after "), "{err}");
    assert!(err.contains("has not acknowledged"), "{err}");
    echo.signal("CONT");
    echo.kill();
}

/// Started with SIGINT ignored (as a shell starts a script's background job, so the
/// script's Ctrl-C does not reach it), `pub` leaves it ignored; SIGTERM still ends it.
#[test]
fn an_ignored_sigint_stays_ignored() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let mut p = tether(dir.path());
    p.args(["pub", "/ignored", "-r", "20", "--wait-matched", "0"]);
    // SAFETY: between fork and exec only signal(2), which is async-signal-safe.
    unsafe {
        p.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut publisher = Live::spawn(p);
    assert!(
        wait_until(Duration::from_secs(20), || publisher.lines() >= 2),
        "{}",
        publisher.stderr()
    );
    publisher.signal("INT");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        publisher.child.try_wait().unwrap().is_none(),
        "an ignored SIGINT ended pub: {}",
        publisher.stderr()
    );
    publisher.signal("TERM");
    assert_eq!(
        publisher.wait(Duration::from_secs(10)),
        Some(143),
        "{}",
        publisher.stderr()
    );
}

/// `tether echo /x | head -3`: once the reader of its output has gone, `echo` ends with
/// status 0 and no panic, even when no sample comes after to find the pipe closed.
#[test]
fn echo_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    e.args(["echo", "/pipe"]);
    let mut echo = spawn(e);
    let mut p = tether(dir.path());
    p.args(["pub", "/pipe", "-n", "3", "-r", "20", "-q"]);
    let publisher = spawn(p);
    let mut lines = BufReader::new(echo.stdout.take().unwrap()).lines();
    for _ in 0..3 {
        assert_eq!(lines.next().unwrap().unwrap(), "hello");
    }
    // The publisher is done: nothing more will come for echo to write.
    let pout = finish(publisher, Duration::from_secs(30));
    assert!(pout.status.success(), "{}", text(&pout.stderr));
    // head exits: the pipe's only reading end closes.
    drop(lines);
    let t0 = Instant::now();
    let out = finish(echo, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let err = text(&out.stderr);
    assert!(!err.contains("panicked") && !err.contains("error"), "{err}");
}

/// `tether hz /x | head -2`: the next report meets a closed pipe; `hz` ends with status 0.
#[test]
fn hz_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut publisher = steady(dir.path(), "/hzpipe");
    let mut h = tether(dir.path());
    h.args(["hz", "/hzpipe", "--period", "0.3"]);
    let mut hz = spawn(h);
    let mut lines = BufReader::new(hz.stdout.take().unwrap()).lines();
    for _ in 0..2 {
        lines.next().unwrap().unwrap();
    }
    drop(lines);
    let out = finish(hz, Duration::from_secs(10));
    publisher.kill();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(!err.contains("panicked") && !err.contains("error"), "{err}");
}

/// `tether keys revoke … | tether keys show …`: `show` reads no input, so `revoke` writes
/// into a pipe whose reader has gone. It still revokes, and exits 0 without a panic; so
/// does `show` into a closed pipe.
#[test]
fn keys_into_a_closed_pipe_end_quietly() {
    let t = tempfile::tempdir().unwrap();
    let realm = t.path().join("realm");
    let keys = |args: &[&str], closed: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
        c.arg("keys").args(args).stderr(Stdio::piped());
        if closed {
            let (reader, writer) = std::io::pipe().unwrap();
            drop(reader);
            c.stdout(writer);
        } else {
            c.stdout(Stdio::piped());
        }
        let out = finish(c.spawn().unwrap(), Duration::from_secs(20));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        text(&out.stdout)
    };
    let r = realm.to_str().unwrap();
    keys(&["init", r], true);
    keys(&["issue", r, "robot1", "--pub", "/x"], true);
    keys(&["revoke", r, "robot1"], true);
    let list = realm.join("revoked.toml");
    keys(&["show", list.to_str().unwrap()], true);
    // It was revoked all the same.
    let shown = keys(&["show", list.to_str().unwrap()], false);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("revoked") && l.split_whitespace().nth(1) == Some("1")),
        "{shown}"
    );
}

/// A realm with a publisher `robot` and a subscriber `viewer` of /sec/**.
fn realm(dir: &Path) {
    for args in [
        vec!["init"],
        vec!["issue", "robot", "--pub", "/sec/**"],
        vec!["issue", "viewer", "--sub", "/sec/**"],
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
        c.arg("keys").arg(args[0]).arg(dir).args(&args[1..]);
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
}

/// A config file that sets a security mode, with the keys from `--keys` on one side and
/// from TETHER_KEYS on the other: both open, and the sample crosses, authenticated and
/// signed.
#[test]
fn keys_flag_and_env_apply_before_the_config_is_checked() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    realm(&dir);
    let reg = t.path().join("reg");
    let cfg = t.path().join("secure.toml");
    std::fs::write(&cfg, "[security]\nmode = \"encrypt+sign\"\n").unwrap();
    let mut e = tether(&reg);
    e.env("TETHER_KEYS", dir.join("viewer.key"))
        .arg("--config")
        .arg(&cfg)
        .args(["echo", "/sec/odom", "--once", "--timeout", "30"]);
    let echo = spawn(e);
    let mut p = tether(&reg);
    p.arg("--config")
        .arg(&cfg)
        .arg("--keys")
        .arg(dir.join("robot.key"))
        .args(["pub", "/sec/odom", "signed", "--once"]);
    let pout = finish(spawn(p), Duration::from_secs(40));
    let eout = finish(echo, Duration::from_secs(40));
    assert!(pout.status.success(), "{}", text(&pout.stderr));
    assert!(eout.status.success(), "{}", text(&eout.stderr));
    assert_eq!(text(&eout.stdout), "signed\n");
    for err in [text(&pout.stderr), text(&eout.stderr)] {
        assert!(err.contains("secure realm"), "{err}");
    }
    // The same file without keys: refused when the session opens, saying how to give them.
    let mut c = tether(&reg);
    c.arg("--config")
        .arg(&cfg)
        .args(["echo", "/sec/odom", "--timeout", "1"]);
    let out = finish(spawn(c), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("security.keys"), "{err}");
}

/// Relative paths in a config file are taken from the file's directory: the file and the
/// realm beside it work from any working directory.
#[test]
fn config_paths_are_relative_to_the_file() {
    let t = tempfile::tempdir().unwrap();
    let robot = t.path().join("robot");
    std::fs::create_dir(&robot).unwrap();
    realm(&robot.join("realm"));
    let write = |name: &str, key: &str| {
        let p = robot.join(name);
        let text = format!(
            "[discovery]\nrange = \"localhost\"\nregistry_dir = \"reg\"\n[security]\nkeys = \"realm/{key}.key\"\n\
             revocations = \"realm/revoked.toml\"\n"
        );
        std::fs::write(&p, text).unwrap();
        p
    };
    let (pcfg, ecfg) = (write("robot.toml", "robot"), write("viewer.toml", "viewer"));
    // Revocations need a list: revoke nobody's serial but create it.
    let elsewhere = tempfile::tempdir().unwrap();
    let run = |cfg: &Path, args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
        c.env_remove("TETHER_CONFIG")
            .env_remove("TETHER_KEYS")
            .current_dir(elsewhere.path())
            .arg("--config")
            .arg(cfg)
            .args(args);
        spawn(c)
    };
    // The realm's list: issuing and revoking a third member writes it.
    for args in [
        vec!["issue", "spare", "--sub", "/x"],
        vec!["revoke", "spare"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_tether"))
            .arg("keys")
            .arg(args[0])
            .arg(robot.join("realm"))
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let echo = run(&ecfg, &["echo", "/sec/rel", "--once", "--timeout", "30"]);
    let pout = finish(
        run(&pcfg, &["pub", "/sec/rel", "from the file's dir", "--once"]),
        Duration::from_secs(40),
    );
    let eout = finish(echo, Duration::from_secs(40));
    assert!(pout.status.success(), "{}", text(&pout.stderr));
    assert!(eout.status.success(), "{}", text(&eout.stderr));
    assert_eq!(text(&eout.stdout), "from the file's dir\n");
    // The registry directory too was made beside the file, not in the working directory.
    assert!(robot.join("reg").is_dir());
    assert!(!elsewhere.path().join("reg").exists());
    let err = text(&eout.stderr);
    assert!(
        err.contains(&format!(
            "revocations from {}",
            robot.join("realm/revoked.toml").display()
        )),
        "{err}"
    );
}

/// `--size` larger than a sample can be: a clear error naming the limit, at once, not a
/// panic or an abort from an allocation.
#[test]
fn huge_sizes_are_refused_before_allocation() {
    let dir = tempfile::tempdir().unwrap();
    for size in ["18446744073709551615", "100000000000", "268435457"] {
        let mut c = tether(dir.path());
        c.args(["pub", "/big", "--size", size, "--once"]);
        let t0 = Instant::now();
        let out = finish(spawn(c), Duration::from_secs(20));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{size}: {err}");
        assert!(
            err.contains(&format!("--size {size} is more than the largest sample"))
                && err.contains("max_sample_size = 268435456")
                && err.contains("raise max_sample_size in a config file"),
            "{size}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
    // Beyond u64: refused by the argument parser, as clearly.
    let mut c = tether(dir.path());
    c.args(["pub", "/big", "--size", "99999999999999999999999"]);
    let out = finish(spawn(c), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("more than any sample can hold"));
    // A smaller limit in a config file is the one checked.
    let cfg = dir.path().join("small.toml");
    std::fs::write(&cfg, "[transport]\nmax_sample_size = 1000\n").unwrap();
    let mut c = tether(dir.path());
    c.arg("--config")
        .arg(&cfg)
        .args(["pub", "/big", "--size", "1001", "--once"]);
    let out = finish(spawn(c), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("max_sample_size = 1000 bytes"),
        "{}",
        text(&out.stderr)
    );
}

/// `chatter` is `/chatter` (a leading `/` is implied, as in ROS 2), both ways round.
#[test]
fn relative_and_absolute_topic_names_meet() {
    let dir = tempfile::tempdir().unwrap();
    for (sub, publ) in [("/chatter", "chatter"), ("talk/back", "/talk/back")] {
        let mut e = tether(dir.path());
        e.args(["echo", sub, "--once", "--timeout", "30"]);
        let echo = spawn(e);
        let mut p = tether(dir.path());
        p.args(["pub", publ, "met", "--once", "-q"]);
        let pout = finish(spawn(p), Duration::from_secs(40));
        assert!(pout.status.success(), "{publ}: {}", text(&pout.stderr));
        let out = finish(echo, Duration::from_secs(40));
        assert_eq!(text(&out.stdout), "met\n", "{sub}: {}", text(&out.stderr));
    }
}

/// Names that break ROS 2's rules are refused by every command that takes one, saying
/// what is wrong and what would do.
#[test]
fn bad_topic_names_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    for (name, why, fix) in [
        ("/my topic", "it contains a space", Some("/my_topic")),
        ("/a//b/", "empty level ('//')", Some("/a/b")),
        ("/a/b/", "ends with '/'", Some("/a/b")),
        ("/2d/scan", "starts with a digit", Some("/_2d/scan")),
        ("", "it is empty", None),
    ] {
        for cmd in [
            vec!["pub", name, "--once"],
            vec!["echo", name, "--timeout", "1"],
            vec!["hz", name, "--duration", "1"],
            vec!["info", name, "--wait", "0"],
        ] {
            let mut c = tether(dir.path());
            c.args(&cmd);
            let out = finish(spawn(c), Duration::from_secs(20));
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
            assert!(
                err.contains(&format!("'{name}' is not a topic name: ")) && err.contains(why),
                "{cmd:?}: {err}"
            );
            if let Some(f) = fix {
                assert!(err.contains(&format!("try '{f}'")), "{cmd:?}: {err}");
            }
            assert!(err.contains("docs/cli.md#topic-names"), "{err}");
        }
    }
}

/// An error from the operating system is said once, with what to do about it.
#[test]
fn os_errors_are_said_once_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    for (args, hint) in [
        (
            vec![
                "--config".into(),
                missing.join("tether.toml").display().to_string(),
                "echo".into(),
                "/x".into(),
            ],
            "give --config (or TETHER_CONFIG) a TOML file that exists",
        ),
        (
            vec![
                "pub".into(),
                "/x".into(),
                "--file".into(),
                missing.join("scan.bin").display().to_string(),
            ],
            "check the path",
        ),
        (
            vec![
                "--keys".into(),
                missing.join("robot.key").display().to_string(),
                "echo".into(),
                "/x".into(),
            ],
            "tether keys issue DIR NAME",
        ),
    ] {
        let mut c = tether(dir.path());
        c.args(&args);
        let out = finish(spawn(c), Duration::from_secs(20));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.matches("os error 2").count(), 1, "{args:?}: {err}");
        assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
        let h = err
            .lines()
            .find(|l| l.starts_with("hint: "))
            .unwrap_or_else(|| panic!("{args:?}: no hint: {err}"));
        assert!(h.contains(hint), "{args:?}: {err}");
    }
}

/// Every way a command line can be wrong that a newcomer meets: an error that says what
/// to do (a flag to give, a value that would do, a command to run).
#[test]
fn every_error_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let bad_cfg = dir.path().join("bad.toml");
    std::fs::write(&bad_cfg, "[transport]\nmax_datagram = 10\n").unwrap();
    let bad_cfg = bad_cfg.display().to_string();
    for (args, stdin, todo) in [
        (
            vec!["pub", "/x", "--hex", "4"],
            None,
            "each byte is two digits",
        ),
        (
            vec!["pub", "/x", "--hex", "zz"],
            None,
            "give pairs of digits",
        ),
        (vec!["pub", "/x", "--size", "1k"], None, "e.g. --size 1000"),
        (
            vec!["pub", "/x", "{", "--encoding", "json"],
            None,
            "--encoding bytes for any bytes",
        ),
        (
            vec!["pub", "/x", "--encoding", "yaml"],
            None,
            "text, json, cbor, cdr, bytes",
        ),
        (
            vec!["pub", "/x", "-", "--encoding", "text"],
            Some(&b"\xff\xfe"[..]),
            "label it as what it is",
        ),
        (
            vec!["pub", "/x", "--file", "/"],
            None,
            "it is a directory; give a file",
        ),
        (
            vec!["--config", &bad_cfg, "echo", "/x"],
            None,
            "hint: correct the file at the key named",
        ),
        (
            vec!["pub", "/x", "--rate=-1"],
            None,
            "--rate must be a finite number",
        ),
    ] {
        let mut c = tether(dir.path());
        c.args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(b) = stdin {
            input.write_all(b).unwrap();
        }
        drop(input);
        let out = finish(child, Duration::from_secs(20));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(todo), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Ctrl-C while `pub`'s put waits for room (a keep-all writer whose stopped reader holds
/// its whole history, and is let go of only once silent for 30 s) ends it at once with 130
/// and its summary, not once the put is done waiting.
#[test]
fn sigint_during_a_blocked_put_ends_pub_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut echo, mut publisher) = pub_with_a_stopped_reader(
        dir.path(),
        &["/full", "--reliable", "--keep-all"],
        &[
            "/full",
            "-r",
            "0",
            "--reliable",
            "--keep-all",
            "--inactive-after",
            "30",
            "--wait-matched",
            "0",
            "--linger",
            "0",
            "-q",
        ],
        1,
    );
    // The history fills within a moment; the put then waits for room.
    std::thread::sleep(Duration::from_millis(1500));
    let err = sigint_ends_at_once(&mut publisher);
    assert!(err.contains("interrupted (SIGINT) after "), "{err}");
    assert!(!err.contains("timed out"), "{err}");
    echo.signal("CONT");
    echo.kill();
}

/// A put that fails (its reader stopped acknowledging for longer than the writer's
/// blocking time) ends the run with status 2, but only after what was written had its
/// chance: the reader back within --linger acknowledges it, and `pub` says that nothing
/// is owed. It used to exit at once, leaving its history (and the reader's repairs) behind
/// and reporting the samples in it as not acknowledged.
#[test]
fn a_failed_put_still_delivers_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let (mut echo, mut publisher) = pub_with_a_stopped_reader(
        dir.path(),
        &["/putfail", "--reliable"],
        &[
            "/putfail",
            "-n",
            "100000",
            "-r",
            "2000",
            "-q",
            "--inactive-after",
            "strict",
        ],
        2,
    );
    assert!(
        wait_until(Duration::from_secs(20), || publisher
            .stderr()
            .contains("error: ")),
        "the put did not fail: {}",
        publisher.stderr()
    );
    echo.signal("CONT");
    assert_eq!(
        publisher.wait(Duration::from_secs(30)),
        Some(2),
        "{}",
        publisher.stderr()
    );
    let err = publisher.stderr();
    // No reader reported as owing samples (`error: reader R … has not acknowledged`).
    assert!(!err.contains("error: reader "), "{err}");
    assert!(err.contains("every one acknowledged"), "{err}");
    assert!(err.contains("hint: give a put longer"), "{err}");
    let n = number_after(&err, "published ").unwrap_or_else(|| panic!("{err}"));
    assert!(n >= 2, "{err}");
    assert!(
        wait_until(Duration::from_secs(10), || echo.lines() >= n as usize),
        "echo printed {} of {n}: {err}",
        echo.lines()
    );
    echo.kill();
}
