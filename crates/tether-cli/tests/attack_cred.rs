//! Credentials over time with real processes (issue 17, point 4): a running `tether echo`
//! that holds the realm's revocation list (`--revocations FILE`) follows the file while it
//! runs. A member revoked there (by `tether keys revoke`, or by `tether keys issue
//! --replace` replacing its credential) stops being heard without a restart, and an older
//! list written back does not bring it back. Every assertion is on delivery.

mod common;
use common::{Live, text, wait_until};

use std::path::Path;
use std::process::Command;
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

/// Runs `tether keys ARGS`; its stdout.
fn keys(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("keys")
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tether keys {args:?}: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// A realm in `dir` with a publisher `robot` (serial 1) and a subscriber `viewer` (serial 2).
fn realm(dir: &Path) -> String {
    let d = dir.to_str().unwrap().to_string();
    keys(&["init", &d]);
    keys(&["issue", &d, "robot", "--pub", "/robot/**"]);
    keys(&["issue", &d, "viewer", "--sub", "/robot/*"]);
    d
}

/// `echo /robot/odom` as `viewer`, watching `list`, running until killed.
fn echo(reg: &Path, dir: &Path, list: &Path) -> Live {
    let mut c = tether(reg);
    c.arg("--keys")
        .arg(dir.join("viewer.key"))
        .arg("--revocations")
        .arg(list)
        .args(["echo", "/robot/odom"]);
    Live::spawn(c)
}

/// `pub /robot/odom WORD` 20 times a second with the key bundle `key`, until killed.
fn publish(reg: &Path, key: &Path, word: &str) -> Live {
    let mut c = tether(reg);
    c.arg("--keys")
        .arg(key)
        .args(["pub", "/robot/odom", word, "--rate", "20"]);
    Live::spawn(c)
}

/// Lines `echo` printed that are `word`.
fn heard(e: &Live, word: &str) -> usize {
    e.out.lock().unwrap().iter().filter(|l| *l == word).count()
}

/// Waits (up to 30 s) until `echo` hears no more `word` for 3 s, then checks that it hears
/// none for 3 s more while `publisher` keeps publishing. False if it never went quiet.
fn goes_quiet(e: &Live, publisher: &mut Live, word: &str) -> bool {
    let mut last = heard(e, word);
    let quiet = wait_until(Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_secs(3));
        let now = heard(e, word);
        std::mem::replace(&mut last, now) == now
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        publisher.child.try_wait().unwrap().is_none(),
        "the publisher stopped: {}",
        publisher.stderr()
    );
    quiet && heard(e, word) == last
}

/// `tether keys revoke` while `echo --revocations` runs: the echo stops hearing the revoked
/// publisher, which keeps publishing, within seconds and without a restart. (Before: the
/// file was read once at start, and a revoked member was heard until restart.)
#[test]
fn revocation_at_run_time_echo_stops_hearing_a_revoked_publisher() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    let d = realm(&dir);
    let reg = t.path().join("reg");
    let list = dir.join("revoked.toml");
    let e = echo(&reg, &dir, &list);
    let mut p = publish(&reg, &dir.join("robot.key"), "pose");
    assert!(
        wait_until(Duration::from_secs(30), || heard(&e, "pose") >= 5),
        "never heard the publisher: {}",
        e.stderr()
    );
    let out = keys(&["revoke", &d, "robot"]);
    assert!(out.contains("revoked serial 1"), "{out}");
    let rl = tether::keys::load_revocations(
        &list,
        &tether::keys::KeyBundle::load(&dir.join("robot.key"))
            .unwrap()
            .ca_public,
    )
    .unwrap();
    assert_eq!(rl.serial, 2, "keys revoke writes the next list serial");
    assert!(
        goes_quiet(&e, &mut p, "pose"),
        "the revoked publisher is still heard ({} samples)\n{}",
        heard(&e, "pose"),
        e.stderr()
    );
}

/// The older list written back over the watched file while `echo` runs, after the newer
/// one revoked the publisher: refused as stale, the newer one stays in force, and the
/// revoked publisher stays unheard. (Before: no reload at all; with a reload that took any
/// list, the old list brought the publisher back.)
#[test]
fn stale_revocation_list_written_back_keeps_the_publisher_out() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    let d = realm(&dir);
    let reg = t.path().join("reg");
    let list = t.path().join("watched.toml");
    let v1 = std::fs::read_to_string(dir.join("revoked.toml")).unwrap();
    keys(&["revoke", &d, "robot"]);
    let v2 = std::fs::read_to_string(dir.join("revoked.toml")).unwrap();
    // The echo starts with list 1 (nothing revoked) and hears the publisher.
    std::fs::write(&list, &v1).unwrap();
    let e = echo(&reg, &dir, &list);
    let mut p = publish(&reg, &dir.join("robot.key"), "pose");
    assert!(
        wait_until(Duration::from_secs(30), || heard(&e, "pose") >= 5),
        "never heard the publisher: {}",
        e.stderr()
    );
    // List 2 revokes it.
    std::fs::write(&list, &v2).unwrap();
    assert!(
        goes_quiet(&e, &mut p, "pose"),
        "the revoked publisher is still heard ({} samples)\n{}",
        heard(&e, "pose"),
        e.stderr()
    );
    // Then someone puts list 1 back.
    let before = heard(&e, "pose");
    std::fs::write(&list, &v1).unwrap();
    assert!(
        goes_quiet(&e, &mut p, "pose") && heard(&e, "pose") == before,
        "the older list brought the revoked publisher back ({} samples more)\n{}",
        heard(&e, "pose") - before,
        e.stderr()
    );
}

/// `tether keys issue --replace` while `echo --revocations` runs: the publisher still
/// holding the old credential stops being heard, and one holding the new credential (same
/// name, new serial) is heard by the same running echo.
#[test]
fn revocation_at_run_time_replaced_credential_old_refused_new_heard() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    let d = realm(&dir);
    let reg = t.path().join("reg");
    let old_key = t.path().join("old-robot.key");
    std::fs::copy(dir.join("robot.key"), &old_key).unwrap();
    let e = echo(&reg, &dir, &dir.join("revoked.toml"));
    let mut old = publish(&reg, &old_key, "old");
    assert!(
        wait_until(Duration::from_secs(30), || heard(&e, "old") >= 5),
        "never heard the publisher: {}",
        e.stderr()
    );
    let out = keys(&["issue", &d, "robot", "--pub", "/robot/**", "--replace"]);
    assert!(
        out.contains("issued robot serial 3") && out.contains("revoked serial 1"),
        "{out}"
    );
    assert!(
        goes_quiet(&e, &mut old, "old"),
        "the replaced credential is still heard ({} samples)\n{}",
        heard(&e, "old"),
        e.stderr()
    );
    let _new = publish(&reg, &dir.join("robot.key"), "new");
    assert!(
        wait_until(Duration::from_secs(30), || heard(&e, "new") >= 5),
        "the new credential is not heard: {}",
        e.stderr()
    );
    let before = heard(&e, "old");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        heard(&e, "old"),
        before,
        "the old credential is heard again"
    );
}
