//! `tether demo` as a user runs it: its processes take its settings (keys, domain,
//! discovery), another terminal can watch it with the command it prints, and it leaves no
//! process and no registry entry behind, whether its time runs out, one of its processes
//! fails, or it is stopped by SIGINT or SIGTERM. Each demo here runs in its own registry
//! directory and domain, on this host only.

mod common;
use common::{Live, finish, text, wait_until};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `tether` with the flags that keep a demo to itself.
fn tether(reg: &Path, domain: u16) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    for v in [
        "TETHER_CONFIG",
        "TETHER_DOMAIN",
        "TETHER_DISCOVERY",
        "TETHER_PEERS",
        "TETHER_KEYS",
    ] {
        c.env_remove(v);
    }
    c.arg("--registry-dir").arg(reg).args([
        "--discovery",
        "localhost",
        "--domain",
        &domain.to_string(),
    ]);
    c
}

/// A realm in `dir` with member `demo` granted `grants`; its key bundle.
fn member(dir: &Path, grants: &[&str]) -> std::path::PathBuf {
    let keys = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_tether"))
            .arg("keys")
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    };
    let d = dir.to_str().unwrap();
    keys(&["init", d]);
    keys(&[&["issue", d, "demo"][..], grants].concat());
    dir.join("demo.key")
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // "PID (COMM) STATE PPID ...": COMM may hold spaces, so count from its ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            v.push(p);
        }
    }
    v
}

/// Asserts that none of `pids` runs any more and that the registry's domain directory
/// holds no entry.
fn assert_nothing_left(pids: &[u32], reg: &Path, domain: u16) {
    for p in pids {
        let alive = std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        });
        assert!(!alive, "demo process {p} is still running");
    }
    let entries: Vec<String> = std::fs::read_dir(reg.join(format!("domain-{domain}")))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(entries.is_empty(), "left in the registry: {entries:?}");
}

/// `tether --keys K --domain N … demo`: the processes it starts take the keys and the
/// domain (before, they ran without keys and the demo saw 0 msg/s), and the echo command
/// it prints for a second terminal, run as printed, receives the demo's samples.
#[test]
fn demo_runs_with_its_keys_and_domain_and_can_be_watched() {
    let dir = tempfile::tempdir().unwrap();
    let key = member(
        &dir.path().join("realm"),
        &["--pub", "/demo/**", "--sub", "/demo/**"],
    );
    let reg = dir.path().join("reg");
    let mut c = tether(&reg, 41);
    c.arg("--keys").arg(&key).args(["demo", "--duration", "6"]);
    let mut demo = Live::spawn(c);
    let hint = "watch it from another terminal: ";
    let line = || {
        demo.out
            .lock()
            .unwrap()
            .iter()
            .find_map(|l| l.strip_prefix(hint).map(str::to_string))
    };
    assert!(
        wait_until(Duration::from_secs(20), || line().is_some()),
        "no line saying how to watch: {:?} {}",
        demo.out.lock().unwrap(),
        demo.stderr()
    );
    let line = line().unwrap();
    let (topics, echo) = line.split_once("   ").expect("two commands");
    assert!(topics.ends_with(" topics -v"), "{line}");
    assert!(echo.ends_with(" echo /demo/chatter"), "{line}");
    for flag in [
        "--domain 41",
        "--keys",
        "--registry-dir",
        "--discovery localhost",
    ] {
        assert!(echo.contains(flag), "{flag} missing: {line}");
    }
    // The watcher, typed as printed (the paths hold no spaces).
    let words: Vec<&str> = echo.split_whitespace().collect();
    assert_eq!(words[0], "tether");
    let watch = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(&words[1..])
        .args(["--count", "3", "--timeout", "20"])
        .env_remove("TETHER_KEYS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(watch, Duration::from_secs(40));
    assert!(out.status.success(), "watcher: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 3);
    let pid = demo.child.id();
    let kids = children_of(pid);
    assert_eq!(kids.len(), 3, "three demo processes");
    assert_eq!(
        demo.wait(Duration::from_secs(60)),
        Some(0),
        "{}",
        demo.stderr()
    );
    let out = demo.out.lock().unwrap().join("\n");
    assert!(out.contains("domain 41"), "{out}");
    assert!(out.contains("sessions: 4"), "{out}");
    assert_nothing_left(&kids, &reg, 41);
}

/// Stopped by SIGTERM or SIGINT while running until interrupted, the demo kills and waits
/// for its processes, removes their registry entries, prints what it received and exits
/// 143 or 130. (Before, SIGTERM ended the demo alone and its three processes went on
/// publishing.)
#[test]
fn demo_stopped_by_a_signal_leaves_nothing() {
    for (sig, code, domain) in [("TERM", 143, 42), ("INT", 130, 43)] {
        let dir = tempfile::tempdir().unwrap();
        let reg = dir.path().join("reg");
        let mut c = tether(&reg, domain);
        c.args(["demo", "--duration", "0"]);
        let mut demo = Live::spawn(c);
        assert!(
            wait_until(Duration::from_secs(20), || {
                demo.out
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|l| l.starts_with("[  1s]"))
            }),
            "{}",
            demo.stderr()
        );
        let kids = children_of(demo.child.id());
        assert_eq!(kids.len(), 3, "three demo processes");
        demo.signal(sig);
        assert_eq!(
            demo.wait(Duration::from_secs(20)),
            Some(code),
            "SIG{sig}: {}",
            demo.stderr()
        );
        assert!(
            demo.out
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.starts_with("received ")),
            "SIG{sig}: no summary"
        );
        assert_nothing_left(&kids, &reg, domain);
    }
}

/// A demo process that fails (here: the credential grants no publishing, so both
/// publishers refuse to start) ends the demo at once with status 1 and the reason, and
/// nothing is left behind.
#[test]
fn demo_ends_when_one_of_its_processes_fails() {
    let dir = tempfile::tempdir().unwrap();
    let key = member(&dir.path().join("realm"), &["--sub", "/demo/**"]);
    let reg = dir.path().join("reg");
    let mut c = tether(&reg, 44);
    c.arg("--keys").arg(&key).args(["demo", "--duration", "30"]);
    let mut demo = Live::spawn(c);
    assert!(wait_until(Duration::from_secs(20), || demo.lines() >= 2));
    let kids = children_of(demo.child.id());
    assert_eq!(
        demo.wait(Duration::from_secs(20)),
        Some(1),
        "{}",
        demo.stderr()
    );
    let err = demo.stderr();
    assert!(
        err.contains("error: a demo process ended early") && err.contains("tether pub /demo/"),
        "{err}"
    );
    assert_nothing_left(&kids, &reg, 44);
}
