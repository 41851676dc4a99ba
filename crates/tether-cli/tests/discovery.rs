//! How sessions find each other, with the real binary: the discovery flags and environment
//! variables, their precedence and their errors, and two Unix users of one host meeting in
//! the shared registry (root only: it runs one side as `nobody` with `setpriv`, on a host
//! of a two-host LAN in network namespaces this test creates, so that the default range's
//! multicast stays there; skipped, saying why, otherwise). The LAN cases are in `netns.rs`.

mod common;
use common::{finish, text};

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tether_testkit::netns;

/// The variables a user may have set, none of which a test wants unless it says so.
const VARS: [&str; 5] = [
    "TETHER_CONFIG",
    "TETHER_DOMAIN",
    "TETHER_DISCOVERY",
    "TETHER_PEERS",
    "TETHER_KEYS",
];

fn bare() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    for v in VARS {
        c.env_remove(v);
    }
    c
}

/// This host only, in the test's own registry directory.
fn local(dir: &Path) -> Command {
    let mut c = bare();
    c.arg("--registry-dir")
        .arg(dir)
        .args(["--discovery", "localhost"]);
    c
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn pub_args<'a>(topic: &'a str, payload: &'a str, matched: &'a str) -> Vec<&'a str> {
    vec![
        "pub",
        topic,
        payload,
        "--count",
        "3",
        "--rate",
        "10",
        "--wait-matched",
        matched,
        "--linger",
        "20",
        "-q",
    ]
}

fn echo_args(topic: &str) -> Vec<&str> {
    vec!["echo", topic, "--count", "3", "--timeout", "30"]
}

fn assert_got(who: &str, child: Child, payload: &str) {
    let out = finish(child, Duration::from_secs(40));
    assert!(out.status.success(), "{who}: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        vec![payload; 3],
        "{who}"
    );
}

/// `--discovery off`: no registry, no multicast; `--listen` on one side and `--peer` on the
/// other still meet (here on loopback, so that it runs without root). `--peer` is
/// repeatable: the one that listens is neither the first nor the last given.
#[test]
fn static_peer_with_discovery_off() {
    let port = free_udp_port();
    let listen = format!("127.0.0.1:{port}");
    // Peers where nothing of tether listens (ports this test holds).
    let held: Vec<std::net::UdpSocket> = (0..2)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let other = |i: usize| held[i].local_addr().unwrap().to_string();
    let mut p = bare();
    p.args(["--discovery", "off", "--listen", &listen])
        .args(pub_args("/peer", "static", "1"));
    let publisher = spawn(p);
    let mut e = bare();
    e.args(["--discovery", "off"])
        .args(["--peer", &other(0), "--peer", &listen, "--peer", &other(1)])
        .args(echo_args("/peer"));
    assert_got("echo", spawn(e), "static");
    let pout = finish(publisher, Duration::from_secs(40));
    assert!(pout.status.success(), "pub: {}", text(&pout.stderr));
}

/// `--discovery off` leaves out the registry too: an echo with it, in the registry
/// directory where a `localhost` publisher and echo meet, receives nothing.
#[test]
fn discovery_off_leaves_out_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let mut on = local(dir.path());
    on.args(echo_args("/off"));
    let echo_on = spawn(on);
    let mut off = bare();
    off.arg("--registry-dir")
        .arg(dir.path())
        .args(["--discovery", "off", "echo", "/off", "--count", "1"])
        .args(["--timeout", "6"]);
    let echo_off = spawn(off);
    let mut p = local(dir.path());
    p.args(pub_args("/off", "registry", "1"));
    let publisher = spawn(p);
    assert_got("echo --discovery localhost", echo_on, "registry");
    let pout = finish(publisher, Duration::from_secs(40));
    assert!(pout.status.success(), "pub: {}", text(&pout.stderr));
    let out = finish(echo_off, Duration::from_secs(40));
    assert_eq!(
        out.status.code(),
        Some(1),
        "--discovery off found the publisher: {}",
        text(&out.stdout)
    );
}

/// The file, then the environment, then the flags: an echo whose file says domain 5 and
/// whose TETHER_DOMAIN says 6 meets a publisher whose TETHER_DOMAIN says 9 and whose
/// --domain says 6. A flag wins even over a variable that would not parse.
#[test]
fn environment_overrides_the_file_and_flags_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("five.toml");
    std::fs::write(&cfg, "domain = 5\n").unwrap();
    let mut e = local(dir.path());
    e.env("TETHER_DOMAIN", "6")
        .arg("--config")
        .arg(&cfg)
        .args(echo_args("/layers"));
    let echo = spawn(e);
    let mut p = local(dir.path());
    p.env("TETHER_DOMAIN", "9")
        .env("TETHER_DISCOVERY", "everywhere")
        .args(["--domain", "6"])
        .args(pub_args("/layers", "six", "1"));
    let publisher = spawn(p);
    assert_got("echo", echo, "six");
    let pout = finish(publisher, Duration::from_secs(40));
    assert!(pout.status.success(), "pub: {}", text(&pout.stderr));
}

/// Bad values are refused before anything starts, saying what is wrong and what is allowed.
#[test]
fn bad_discovery_settings_are_clear_errors() {
    for (env, args, says) in [
        (
            Some(("TETHER_DISCOVERY", "lan")),
            &["topics", "--wait", "0"][..],
            "invalid environment variable TETHER_DISCOVERY=\"lan\": unknown discovery range 'lan' (expected subnet, localhost or off)",
        ),
        (
            Some(("TETHER_PEERS", "10.0.0.1:7411,robot2")),
            &["topics", "--wait", "0"][..],
            "peer 'robot2' is not HOST:PORT",
        ),
        (
            Some(("TETHER_DOMAIN", "robot")),
            &["topics", "--wait", "0"][..],
            "TETHER_DOMAIN=\"robot\": a domain id is a number from 0 to 65535",
        ),
        (
            None,
            &["--discovery", "lan", "topics", "--wait", "0"][..],
            "unknown discovery range 'lan' (expected subnet, localhost or off)",
        ),
        (
            None,
            &["--peer", "10.0.0.1", "topics", "--wait", "0"][..],
            "peer '10.0.0.1' is not HOST:PORT",
        ),
        (
            None,
            &["--listen", "eth0", "topics", "--wait", "0"][..],
            "'eth0' is not an address to listen on",
        ),
    ] {
        let mut c = bare();
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        c.args(args);
        let out = finish(spawn(c), Duration::from_secs(20));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?} {args:?}: {err}");
        assert!(err.contains(says), "{env:?} {args:?}: {err}");
    }
}

/// `setpriv` arguments that run a command as `nobody`, or why this host cannot.
fn as_nobody() -> Result<Vec<String>, String> {
    if !netns::is_root() {
        return Err("running a session as another user needs root".into());
    }
    let id = |flag: &str| {
        Command::new("id")
            .args([flag, "nobody"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| text(&o.stdout).trim().to_string())
    };
    let (Some(uid), Some(gid)) = (id("-u"), id("-g")) else {
        return Err("no user nobody".into());
    };
    let prefix = vec![
        "setpriv".to_string(),
        format!("--reuid={uid}"),
        format!("--regid={gid}"),
        "--clear-groups".into(),
        "--".into(),
    ];
    let ok = Command::new(&prefix[0])
        .args(&prefix[1..])
        .arg(env!("CARGO_BIN_EXE_tether"))
        .arg("--version")
        .output()
        .map_err(|e| format!("setpriv: {e}"))?;
    if !ok.status.success() {
        return Err(format!(
            "nobody cannot run the binary: {}",
            text(&ok.stderr).trim()
        ));
    }
    Ok(prefix)
}

/// A host with a LAN interface (multicast routed there), in a namespace of its own: the
/// `a` side of a two-host LAN named after `tag` and this process.
fn lan_host(tag: &str) -> Result<netns::Lan, String> {
    let id = format!("{tag}{}", std::process::id() % 100_000);
    netns::Lan::builder([&format!("tua{id}"), &format!("tub{id}")], ["vua", "vub"])
        .addrs(
            [Ipv4Addr::new(10, 199, 21, 1), Ipv4Addr::new(10, 199, 21, 2)],
            24,
        )
        .create()
        .map_err(|e| e.to_string())
}

/// Two sessions of two Unix users of one host meet in the shared registry directory
/// (`/tmp/tether`), with `args` given to both: root publishes, `nobody` echoes. The host is
/// a network namespace with a LAN interface. (Before, each user had a directory of their
/// own and the echo received nothing.)
fn users_meet(test: &str, tag: &str, args: &[&str]) {
    let prefix = match as_nobody() {
        Ok(p) => p,
        Err(why) => {
            tether_testkit::skip!("skipping {test}: {why}");
            return;
        }
    };
    let lan = match lan_host(tag) {
        Ok(l) => l,
        Err(why) => {
            tether_testkit::skip!("skipping {test}: {why}");
            return;
        }
    };
    let host = lan.a();
    // A topic of this run alone: the default directory is shared with whatever else runs
    // on this machine (other namespaces' sessions are left out of a scan, but all the same).
    let topic = format!("/users/p{}/{test}", std::process::id());
    let mut e = host.command(&prefix[0]);
    e.args(&prefix[1..]).arg(env!("CARGO_BIN_EXE_tether"));
    for v in VARS.into_iter().chain(["XDG_RUNTIME_DIR"]) {
        e.env_remove(v);
    }
    e.args(args).args(echo_args(&topic));
    let echo = spawn(e);
    let mut p = host.command(env!("CARGO_BIN_EXE_tether"));
    for v in VARS.into_iter().chain(["XDG_RUNTIME_DIR"]) {
        p.env_remove(v);
    }
    p.args(args).args(pub_args(&topic, "across users", "1"));
    let publisher = spawn(p);
    assert_got("echo as nobody", echo, "across users");
    let pout = finish(publisher, Duration::from_secs(40));
    assert!(pout.status.success(), "pub: {}", text(&pout.stderr));
}

/// With the defaults (registry and multicast).
#[test]
fn two_users_of_one_host_meet_by_default() {
    users_meet("two_users_of_one_host_meet_by_default", "d", &[]);
}

/// With the registry alone (`--discovery localhost`: no multicast to carry it instead).
#[test]
fn two_users_of_one_host_meet_in_the_registry() {
    users_meet(
        "two_users_of_one_host_meet_in_the_registry",
        "r",
        &["--discovery", "localhost"],
    );
}
