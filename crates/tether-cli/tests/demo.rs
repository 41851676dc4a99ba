//! `tether demo` as a user runs it.
//!
//! The two-site demo (the default): two sites and a cloud router on loopback in a realm of
//! its own; every topic reaches the other site, the table says so, and it leaves no process
//! and no temporary directory behind, whether its time runs out or it is interrupted. Each
//! runs with a `TMPDIR` of its own.
//!
//! The single-host demo (`--local`): its processes take its settings (keys, domain,
//! discovery), another terminal can watch it with the command it prints, and it leaves no
//! process and no registry entry behind, whether its time runs out, one of its processes
//! fails, or it is stopped by SIGINT, SIGTERM, SIGHUP or SIGKILL. A demo whose discovery is
//! off is refused. Each demo here runs in its own registry directory and domain, on this
//! host only.

mod common;
use common::{Live, children_of, finish, text, wait_until};

use std::os::unix::process::CommandExt;
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

/// The arguments process `pid` was started with.
fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `args` holds `flag` followed by `value`.
fn has(args: &[String], flag: &str, value: &str) -> bool {
    args.windows(2).any(|w| w[0] == flag && w[1] == value)
}

/// Asserts that none of `pids` runs any more.
fn assert_ended(pids: &[u32]) {
    for p in pids {
        let alive = std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        });
        assert!(!alive, "demo process {p} is still running");
    }
}

/// Asserts that none of `pids` runs any more and that the registry's domain directory
/// holds no entry.
fn assert_nothing_left(pids: &[u32], reg: &Path, domain: u16) {
    assert_ended(pids);
    let entries: Vec<String> = std::fs::read_dir(reg.join(format!("domain-{domain}")))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(entries.is_empty(), "left in the registry: {entries:?}");
}

/// `tether --keys K --domain N --discovery R --peer P … demo`: the processes it starts
/// take the keys, the domain and the discovery settings (before, they ran without keys and
/// the demo saw 0 msg/s), and the echo command it prints for a second terminal, run as
/// printed, receives the demo's samples.
#[test]
fn demo_runs_with_its_keys_and_domain_and_can_be_watched() {
    let dir = tempfile::tempdir().unwrap();
    let key = member(
        &dir.path().join("realm"),
        &["--pub", "/demo/**", "--sub", "/demo/**"],
    );
    let reg = dir.path().join("reg");
    // A static peer where nothing listens (a port this test holds): announced to, harmless.
    let hold = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let peer = hold.local_addr().unwrap().to_string();
    let mut c = tether(&reg, 41);
    c.arg("--keys")
        .arg(&key)
        .args(["--peer", &peer, "demo", "--local", "--duration", "6"]);
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
    assert!(
        words[0] == "tether" || words[0].ends_with("/tether"),
        "{line}"
    );
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
    // Each runs with the demo's settings, paths made absolute.
    for k in &kids {
        let args = cmdline(*k);
        for (flag, value) in [
            ("--keys", key.to_str().unwrap()),
            ("--registry-dir", reg.to_str().unwrap()),
            ("--domain", "41"),
            ("--discovery", "localhost"),
            ("--peer", &peer),
        ] {
            assert!(has(&args, flag, value), "{flag} {value} missing: {args:?}");
        }
    }
    assert_eq!(
        demo.wait(Duration::from_secs(60)),
        Some(0),
        "{}",
        demo.stderr()
    );
    let out = demo.out.lock().unwrap().join("\n");
    assert!(out.contains("domain 41"), "{out}");
    assert!(out.contains("sessions: 4"), "{out}");
    // The live lines fit an 80-column terminal (they were ~190 wide).
    for l in out
        .lines()
        .filter(|l| l.starts_with('[') || l.contains("msg/s"))
    {
        assert!(
            l.chars().count() <= 80,
            "{} columns: {l}",
            l.chars().count()
        );
    }
    assert!(
        out.contains("/demo/chatter") && out.contains("msg/s"),
        "{out}"
    );
    assert_nothing_left(&kids, &reg, 41);
}

/// Stopped by SIGTERM, SIGINT or SIGHUP (its terminal closed) while running until
/// interrupted, the demo kills and waits for its processes, removes their registry entries,
/// prints what it received and exits 143, 130 or 129. (Before, SIGTERM ended the demo alone
/// and its three processes went on publishing.)
#[test]
fn demo_stopped_by_a_signal_leaves_nothing() {
    for (sig, code, domain) in [("TERM", 143, 42), ("INT", 130, 43), ("HUP", 129, 45)] {
        let dir = tempfile::tempdir().unwrap();
        let reg = dir.path().join("reg");
        let mut c = tether(&reg, domain);
        c.args(["demo", "--local", "--duration", "0"]);
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
                .any(|l| l.starts_with(&format!("interrupted (SIG{sig}): received "))),
            "SIG{sig}: no summary that says it was interrupted"
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
    c.arg("--keys")
        .arg(&key)
        .args(["demo", "--local", "--duration", "30"]);
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

/// Killed (SIGKILL: no handler runs), the demo's processes end with it (the kernel sends
/// them SIGTERM) instead of publishing on with no one to stop them, and the next session
/// that looks at the registry removes their entries.
#[test]
fn demo_killed_takes_its_processes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let reg = dir.path().join("reg");
    let mut c = tether(&reg, 46);
    c.args(["demo", "--local", "--duration", "0"]);
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
    demo.signal("KILL");
    // Not `demo.wait`: it reads the demo's output to its end, which processes that outlive
    // the demo (they share its stderr) would hold open.
    assert!(wait_until(Duration::from_secs(10), || {
        demo.child.try_wait().unwrap().is_some()
    }));
    let running = || -> Vec<u32> {
        kids.iter()
            .copied()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                    !s.rsplit_once(')')
                        .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
                })
            })
            .collect()
    };
    // Within 5 s: the publishers do not wait out a --linger for subscribers that died with
    // the demo (they waited 10 s before: a reviewer saw one still running 4 s after).
    if !wait_until(Duration::from_secs(5), || running().is_empty()) {
        let left = running();
        for p in &left {
            let _ = Command::new("kill")
                .args(["-KILL", &p.to_string()])
                .status();
        }
        panic!("demo processes {left:?} outlived the demo");
    }
    // A later session of the domain (here `topics`) clears what the killed ones left.
    let mut t = tether(&reg, 46);
    t.args(["topics", "--wait", "1"]);
    let out = finish(
        t.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_nothing_left(&kids, &reg, 46);
}

/// With discovery off its processes could not find each other: the demo says so and what
/// to do, and starts nothing (before, it ran its time and failed with 0 msg/s).
#[test]
fn demo_refuses_discovery_off() {
    let dir = tempfile::tempdir().unwrap();
    let reg = dir.path().join("reg");
    let bare = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
        for v in [
            "TETHER_CONFIG",
            "TETHER_DISCOVERY",
            "TETHER_PEERS",
            "TETHER_KEYS",
        ] {
            c.env_remove(v);
        }
        c.arg("--registry-dir").arg(&reg).args(["--domain", "47"]);
        c
    };
    let mut by_flag = bare();
    by_flag.args(["--discovery", "off", "demo", "--local", "--duration", "3"]);
    let mut by_env = bare();
    by_env
        .env("TETHER_DISCOVERY", "off")
        .args(["demo", "--local", "--duration", "3"]);
    for (who, mut c) in [
        ("--discovery off", by_flag),
        ("TETHER_DISCOVERY=off", by_env),
    ] {
        let started = std::time::Instant::now();
        let out = finish(
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
            Duration::from_secs(20),
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{who}: {err}");
        assert!(
            err.contains("tether demo needs discovery on this host")
                && err.contains("--discovery localhost"),
            "{who}: {err}"
        );
        assert!(text(&out.stdout).is_empty(), "{who}: started anyway");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{who}: ran its time"
        );
    }
    assert!(!reg.exists(), "nothing registered");
}

/// Held by each two-site test: one such demo (six processes, 10 MB/s through three
/// routers) at a time, beside the single-host ones, on a machine of 2 vCPUs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// `tether demo` (two sites) with its temporary directory in `tmp` and no settings from
/// the environment.
fn two_sites(tmp: &Path, args: &[&str]) -> Live {
    Live::spawn(two_sites_command(tmp, args))
}

/// The command [`two_sites`] runs.
fn two_sites_command(tmp: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    for v in [
        "TETHER_CONFIG",
        "TETHER_DOMAIN",
        "TETHER_DISCOVERY",
        "TETHER_PEERS",
        "TETHER_ROUTERS",
        "TETHER_KEYS",
    ] {
        c.env_remove(v);
    }
    c.env_remove("TETHER_LOG").env_remove("RUST_LOG");
    c.env("TMPDIR", tmp).arg("demo").args(args);
    c
}

/// What `tmp` holds.
fn entries(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Waits for the two-site demo's first table; its six processes (three routers, three
/// publishers), each checked for what it runs.
fn running_two_sites(demo: &Live) -> Vec<u32> {
    assert!(
        wait_until(Duration::from_secs(60), || {
            demo.out
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.starts_with("[  1s]"))
        }),
        "no table: {:?}\n{}",
        demo.out.lock().unwrap(),
        demo.stderr()
    );
    let kids = children_of(demo.child.id());
    let args: Vec<Vec<String>> = kids.iter().map(|k| cmdline(*k)).collect();
    let routers = args.iter().filter(|a| a.contains(&"router".into())).count();
    assert_eq!(routers, 3, "{args:?}");
    let pubs: Vec<&Vec<String>> = args.iter().filter(|a| a.contains(&"pub".into())).collect();
    assert_eq!(pubs.len(), 3, "{args:?}");
    for a in pubs {
        // Sessions of a site meet the other site only through their site's router.
        assert!(has(a, "--discovery", "off"), "{a:?}");
        assert!(a.iter().any(|x| x.starts_with("quic/127.0.0.1:")), "{a:?}");
        assert!(a.iter().any(|x| x.ends_with(".key")), "{a:?}");
    }
    kids
}

/// The samples/s of `topic` received at site `site` in each table printed.
fn rates(out: &[String], topic: &str, site: &str) -> Vec<u64> {
    out.iter()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            // "/camera site A → site B 10 10.00 4.1 9.8 0"
            (w.len() == 11 && w[0] == topic && w[5] == site).then(|| w[6].parse().unwrap())
        })
        .collect()
}

/// The default demo: two sites and a cloud router in a realm of the demo's own. /camera
/// and /telemetry published at site A reach site B, /cmd published at site B reaches site A,
/// the table says so each second with the routers' links, and the demo exits 0 leaving no
/// process and no temporary directory (realm, router configurations).
#[test]
fn two_site_demo_carries_every_topic_across_and_leaves_nothing() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let mut demo = two_sites(tmp.path(), &["--duration", "5"]);
    let kids = running_two_sites(&demo);
    let dirs = entries(tmp.path());
    assert!(
        dirs.len() == 1 && dirs[0].starts_with("tether-demo."),
        "{dirs:?}"
    );
    assert_eq!(
        demo.wait(Duration::from_secs(60)),
        Some(0),
        "{}",
        demo.stderr()
    );
    let out = demo.out.lock().unwrap().clone();
    let text = out.join("\n");
    assert!(text.contains("security on"), "{text}");
    for (topic, site) in [("/camera", "B"), ("/telemetry", "B"), ("/cmd", "A")] {
        let r = rates(&out, topic, site);
        assert!(r.len() >= 4, "{topic} at site {site}: {text}");
        assert!(
            r.iter().any(|n| *n > 0),
            "{topic} at site {site}: nothing\n{text}"
        );
    }
    // Once running, a whole camera frame rate (10 Hz) gets across.
    assert!(
        rates(&out, "/camera", "B").iter().any(|n| *n >= 5),
        "{text}"
    );
    // The routers: the cloud holds both sites' routers, each site its sessions.
    assert!(
        out.iter()
            .any(|l| l.trim_start().starts_with("cloud") && l.contains("2 routers, 0 sess.")),
        "{text}"
    );
    assert!(
        out.iter()
            .any(|l| l.trim_start().starts_with("site-a") && l.contains("1 router, 3 sess.")),
        "{text}"
    );
    assert!(
        out.iter()
            .any(|l| l.trim_start().starts_with("site-b") && l.contains("1 router, 2 sess.")),
        "{text}"
    );
    assert!(
        out.iter().any(|l| l.starts_with("received ")),
        "no summary: {text}"
    );
    // The routers' INFO lines (links up and down) do not land in the live table.
    let err = demo.stderr();
    assert!(!err.contains("INFO"), "{err}");
    assert_ended(&kids);
    assert!(entries(tmp.path()).is_empty(), "{:?}", entries(tmp.path()));
}

/// Interrupted (Ctrl-C) while running until interrupted, the two-site demo kills and waits
/// for its processes, removes its temporary directory, prints what it received and exits
/// 130. Ctrl-C goes to the terminal's whole foreground process group: the demo's
/// processes do not get it (they are in groups of their own), so none prints its own
/// shutdown after the demo's summary.
#[test]
fn two_site_demo_interrupted_leaves_nothing() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let mut c = two_sites_command(tmp.path(), &["--duration", "0"]);
    // A group of its own, as a shell gives a foreground job.
    c.process_group(0);
    let mut demo = Live::spawn(c);
    let kids = running_two_sites(&demo);
    let before = demo.stderr().len();
    let ok = Command::new("kill")
        .args(["-INT", "--"])
        .arg(format!("-{}", demo.child.id()))
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -INT to the demo's group failed");
    assert_eq!(
        demo.wait(Duration::from_secs(20)),
        Some(130),
        "{}",
        demo.stderr()
    );
    let err = demo.stderr();
    let after = &err[before..];
    for child_says in ["interrupted (SIGINT)", "stopping", "dialling again"] {
        assert!(!after.contains(child_says), "{child_says}: {after}");
    }
    assert!(
        demo.out
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("interrupted (SIGINT): received ")),
        "no summary that says it was interrupted"
    );
    assert_ended(&kids);
    assert!(entries(tmp.path()).is_empty(), "{:?}", entries(tmp.path()));
}

/// Killed (SIGKILL: nothing of it runs), the two-site demo's processes end with it (the
/// kernel kills them); the temporary directory it could not remove is removed by
/// the next demo, which runs and ends cleanly.
#[test]
fn two_site_demo_killed_takes_its_processes_and_the_next_one_its_directory() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let mut demo = two_sites(tmp.path(), &["--duration", "0"]);
    let kids = running_two_sites(&demo);
    let left = entries(tmp.path());
    assert_eq!(left.len(), 1, "{left:?}");
    demo.signal("KILL");
    // Not `demo.wait`: it reads the output to its end, which processes outliving the demo
    // (they share its stderr) would hold open.
    assert!(wait_until(Duration::from_secs(10), || {
        demo.child.try_wait().unwrap().is_some()
    }));
    let running = || {
        kids.iter()
            .copied()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                    !s.rsplit_once(')')
                        .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
                })
            })
            .collect::<Vec<u32>>()
    };
    if !wait_until(Duration::from_secs(10), || running().is_empty()) {
        let left = running();
        for p in &left {
            let _ = Command::new("kill")
                .args(["-KILL", &p.to_string()])
                .status();
        }
        panic!("demo processes {left:?} outlived the demo");
    }
    assert_eq!(entries(tmp.path()), left, "killed, it removed nothing");
    let mut next = two_sites(tmp.path(), &["--duration", "0"]);
    let next_kids = running_two_sites(&next);
    let now = entries(tmp.path());
    assert!(
        now.len() == 1 && now[0] != left[0],
        "left {left:?}, now {now:?}"
    );
    next.signal("INT");
    assert_eq!(
        next.wait(Duration::from_secs(20)),
        Some(130),
        "{}",
        next.stderr()
    );
    assert_ended(&next_kids);
    assert!(entries(tmp.path()).is_empty(), "{:?}", entries(tmp.path()));
}

/// A process of the two-site demo that dies (here site A's router, killed) ends the demo
/// at once with status 1 and says which; nothing is left behind.
#[test]
fn two_site_demo_ends_when_one_of_its_processes_dies() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let mut demo = two_sites(tmp.path(), &["--duration", "60"]);
    let kids = running_two_sites(&demo);
    let site_a = kids
        .iter()
        .copied()
        .find(|k| cmdline(*k).iter().any(|a| a.ends_with("site-a.toml")))
        .expect("site A's router");
    let ok = Command::new("kill")
        .args(["-KILL", &site_a.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert_eq!(
        demo.wait(Duration::from_secs(20)),
        Some(1),
        "{}",
        demo.stderr()
    );
    let err = demo.stderr();
    assert!(
        err.contains("error: a demo process ended early") && err.contains("router site-a"),
        "{err}"
    );
    assert_ended(&kids);
    assert!(entries(tmp.path()).is_empty(), "{:?}", entries(tmp.path()));
}
