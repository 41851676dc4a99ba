//! Secure realms with the `tether` binary: `--keys`, grants, revocation, and peers without
//! credentials, as real processes on loopback.

mod common;
use common::{finish, text};

use std::path::Path;
use std::process::{Child, Command, Stdio};
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

fn realm(dir: &Path) {
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_tether"))
            .arg("keys")
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    };
    let d = dir.to_str().unwrap();
    run(&["init", d]);
    run(&["issue", d, "robot", "--pub", "/robot/**"]);
    run(&["issue", d, "viewer", "--sub", "/robot/*"]);
    run(&["issue", d, "nosy", "--sub", "/other"]);
}

/// Publishes 3 samples with `robot`'s keys (and `extra` flags) while `echo` runs.
fn publish(
    reg: &Path,
    dir: &Path,
    extra: &[&str],
    echo: Command,
) -> (std::process::Output, std::process::Output) {
    let e = spawn(echo);
    std::thread::sleep(Duration::from_millis(300));
    let mut p = tether(reg);
    p.arg("--keys")
        .arg(dir.join("robot.key"))
        .args(extra)
        .args([
            "pub",
            "/robot/odom",
            "pose",
            "--count",
            "6",
            "--rate",
            "5",
            "--linger",
            "2",
        ]);
    let pub_out = finish(spawn(p), Duration::from_secs(60));
    let echo_out = finish(e, Duration::from_secs(60));
    (pub_out, echo_out)
}

#[test]
fn granted_peers_exchange_and_others_get_nothing() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    realm(&dir);
    let reg = t.path().join("reg");

    // A member with a subscribe grant receives.
    let mut e = tether(&reg);
    e.arg("--keys").arg(dir.join("viewer.key")).args([
        "echo",
        "/robot/odom",
        "--count",
        "6",
        "--timeout",
        "20",
    ]);
    let (p, e) = publish(&reg, &dir, &[], e);
    assert!(p.status.success(), "{}", text(&p.stderr));
    assert!(e.status.success(), "{}", text(&e.stderr));
    assert_eq!(text(&e.stdout).lines().count(), 6);

    // A peer without credentials receives nothing.
    let mut e = tether(&reg);
    e.args(["echo", "/robot/odom", "--count", "1", "--timeout", "4"]);
    let (_, e) = publish(&reg, &dir, &[], e);
    assert_eq!(e.status.code(), Some(1), "{}", text(&e.stdout));
    assert_eq!(text(&e.stdout), "");

    // A member without the grant is told so at once.
    let mut e = tether(&reg);
    e.arg("--keys").arg(dir.join("nosy.key")).args([
        "echo",
        "/robot/odom",
        "--count",
        "1",
        "--timeout",
        "4",
    ]);
    let o = finish(spawn(e), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("grants no subscribe on /robot/odom"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn revoked_members_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    realm(&dir);
    let reg = t.path().join("reg");
    let o = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["keys", "revoke"])
        .arg(&dir)
        .arg("viewer")
        .output()
        .unwrap();
    assert!(o.status.success());
    let rl = dir.join("revoked.toml");
    // The publisher, holding the revocation list, refuses the revoked viewer.
    let mut e = tether(&reg);
    e.arg("--keys").arg(dir.join("viewer.key")).args([
        "echo",
        "/robot/odom",
        "--count",
        "1",
        "--timeout",
        "5",
    ]);
    let (p, e) = publish(&reg, &dir, &["--revocations", rl.to_str().unwrap()], e);
    // Nobody it may write for matched: it says so, publishes nothing and exits 1.
    assert_eq!(p.status.code(), Some(1), "{}", text(&p.stderr));
    assert!(
        text(&p.stderr).contains("serial 2 is revoked")
            && text(&p.stderr).contains("no subscriber matched on /robot/odom"),
        "{}",
        text(&p.stderr)
    );
    assert_eq!(
        e.status.code(),
        Some(1),
        "revoked viewer got: {}",
        text(&e.stdout)
    );
    // A revoked member that loads the list itself cannot even start.
    let mut e = tether(&reg);
    e.arg("--keys")
        .arg(dir.join("viewer.key"))
        .arg("--revocations")
        .arg(&rl)
        .args(["echo", "/robot/odom", "--count", "1", "--timeout", "2"]);
    let o = finish(spawn(e), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("revoked"), "{}", text(&o.stderr));
}

#[test]
fn security_config_errors_are_clear() {
    let t = tempfile::tempdir().unwrap();
    for (toml, says) in [
        (
            "[security]\nmode = \"sometimes\"\n",
            "unknown mode 'sometimes'",
        ),
        (
            "[security]\nmode = \"encrypt\"\n",
            "security.keys is not set",
        ),
        (
            "[security]\nkeys = \"x\"\n[security.topics]\n\"/a*\" = \"sign\"\n",
            "not a topic pattern",
        ),
        (
            "[security]\nkeys = \"x\"\n[security.topics]\n\"/a\" = \"loud\"\n",
            "unknown mode 'loud'",
        ),
        (
            "[security]\nkeys = \"x\"\nsuite = \"des\"\n",
            "unknown suite 'des'",
        ),
        ("[security]\nkeys = \"/no/such.key\"\n", "/no/such.key"),
    ] {
        let cfg = t.path().join("c.toml");
        std::fs::write(&cfg, toml).unwrap();
        let mut c = tether(&t.path().join("reg"));
        c.arg("--config")
            .arg(&cfg)
            .args(["topics", "--wait", "0.1"]);
        let o = finish(spawn(c), Duration::from_secs(30));
        assert_eq!(o.status.code(), Some(2), "{toml}");
        assert!(
            text(&o.stderr).contains(says),
            "{toml}: {}",
            text(&o.stderr)
        );
    }
}

/// `send` and `recv` in a realm. Receipts travel on `/files/receipts`, which grants cover
/// like any topic: the receiver needs `--pub` there, the sender `--sub`. With them the
/// transfer is confirmed, and the receiver named by its credential; without them each side
/// refuses to start, saying which grant it lacks.
#[test]
fn send_and_recv_in_a_realm_confirm_with_granted_receipts() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_tether"))
            .arg("keys")
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    };
    let d = dir.to_str().unwrap();
    run(&["init", d]);
    run(&[
        "issue",
        d,
        "station",
        "--pub",
        "/files",
        "--sub",
        "/files/receipts",
    ]);
    run(&[
        "issue",
        d,
        "rover",
        "--sub",
        "/files",
        "--pub",
        "/files/receipts",
    ]);
    run(&["issue", d, "mute", "--sub", "/files"]);
    run(&["issue", d, "deaf", "--pub", "/files"]);
    let reg = t.path().join("reg");
    let src = t.path().join("map.bin");
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();

    let mut r = tether(&reg);
    r.arg("--keys")
        .arg(dir.join("rover.key"))
        .args(["recv", "/files", "--quiet", "--timeout", "30"])
        .arg(t.path().join("in"));
    let recv = spawn(r);
    let mut s = tether(&reg);
    s.arg("--keys")
        .arg(dir.join("station.key"))
        .arg("send")
        .arg(&src)
        .args(["/files", "--timeout", "30"]);
    let so = finish(spawn(s), Duration::from_secs(60));
    let ro = finish(recv, Duration::from_secs(30));
    assert!(ro.status.success(), "{}", text(&ro.stderr));
    assert!(so.status.success(), "{}", text(&so.stderr));
    assert!(
        text(&so.stdout).contains("confirmed by 1 receiver,"),
        "{}",
        text(&so.stdout)
    );
    assert!(std::fs::read(t.path().join("in").join("map.bin")).unwrap() == data);

    // Named by its credential when it fails: rover, stopped mid-file.
    let mut r = tether(&reg);
    r.arg("--keys")
        .arg(dir.join("rover.key"))
        .args(["recv", "/files", "--quiet"])
        .arg(t.path().join("in2"));
    let recv = spawn(r);
    let mut s = tether(&reg);
    s.arg("--keys")
        .arg(dir.join("station.key"))
        .arg("send")
        .arg(&src)
        .args(["/files", "--rate", "200KB/s", "--chunk", "65536", "-q"]);
    let send = spawn(s);
    let part = t.path().join("in2").join(".map.bin.part");
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while !part.exists() {
        assert!(std::time::Instant::now() < end, "no partial file");
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &recv.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let ro = finish(recv, Duration::from_secs(30));
    assert_eq!(ro.status.code(), Some(143), "{}", text(&ro.stderr));
    let so = finish(send, Duration::from_secs(30));
    let err = text(&so.stderr);
    assert_eq!(so.status.code(), Some(1), "{err}");
    assert!(
        err.contains("receiver rover (") && err.contains("interrupted: recv got SIGTERM"),
        "{err}"
    );

    for (who, cmd, says) in [
        (
            "mute",
            "recv",
            "recv confirms each file to its sender on /files/receipts, and cannot: our credential (mute) grants no publish on /files/receipts",
        ),
        (
            "deaf",
            "send",
            "our credential (deaf) grants no subscribe on /files/receipts",
        ),
    ] {
        let mut c = tether(&reg);
        c.arg("--keys").arg(dir.join(format!("{who}.key")));
        if cmd == "recv" {
            c.args(["recv", "/files"]).arg(t.path().join("x"));
        } else {
            c.arg("send").arg(&src).arg("/files");
        }
        let o = finish(spawn(c), Duration::from_secs(30));
        assert_eq!(o.status.code(), Some(2), "{who}");
        assert!(text(&o.stderr).contains(says), "{who}: {}", text(&o.stderr));
    }
}
