//! Secure realms with the `tether` binary: `--keys`, grants, revocation, and peers without
//! credentials, as real processes on loopback.

mod common;
use common::{finish, text};

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn tether(reg: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.arg("--registry-dir").arg(reg);
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
        "3",
        "--timeout",
        "20",
    ]);
    let (p, e) = publish(&reg, &dir, &[], e);
    assert!(p.status.success(), "{}", text(&p.stderr));
    assert!(e.status.success(), "{}", text(&e.stderr));
    assert_eq!(text(&e.stdout).lines().count(), 3);

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
    assert!(p.status.success(), "{}", text(&p.stderr));
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
