//! Issue 18, point 4 (secure introspection) with the `tether` binary: in a secure realm
//! members see topic names and types in `tether topics` and `tether info`, with the right
//! publisher and subscriber counts; a session without keys sees the topic's id alone, and
//! one of another realm sees nothing of it and is told why.

mod common;
use common::{Live, finish, text, wait_until};

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn tether(reg: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.arg("--registry-dir").arg(reg);
    // This host only: tests never meet each other or the network.
    c.args(["--discovery", "localhost"]);
    for v in ["TETHER_CONFIG", "TETHER_KEYS", "TETHER_LOG", "RUST_LOG"] {
        c.env_remove(v);
    }
    c
}

fn keys(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_tether"))
        .arg("keys")
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
}

fn run(mut c: Command) -> Output {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let o = finish(c.spawn().unwrap(), Duration::from_secs(60));
    assert!(o.status.success(), "{}", text(&o.stderr));
    o
}

#[test]
fn members_see_names_and_counts_outsiders_only_ids() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    let d = dir.to_str().unwrap();
    keys(&["init", d]);
    keys(&["issue", d, "robot", "--pub", "/robot/**"]);
    keys(&["issue", d, "viewer", "--sub", "/robot/**"]);
    let far = t.path().join("far");
    let f = far.to_str().unwrap();
    keys(&["init", f]);
    keys(&["issue", f, "stranger", "--sub", "/**"]);
    let reg = t.path().join("reg");

    // One publisher and two subscribers of /robot/odom, all members.
    let mut p = tether(&reg);
    p.arg("--keys").arg(dir.join("robot.key")).args([
        "pub",
        "/robot/odom",
        "pose",
        "--type",
        "nav_msgs/Odometry",
        "--rate",
        "5",
        "--wait-matched",
        "0",
    ]);
    let mut publisher = Live::spawn(p);
    let mut echoes: Vec<Live> = (0..2)
        .map(|_| {
            let mut e = tether(&reg);
            e.arg("--keys").arg(dir.join("viewer.key")).args([
                "echo",
                "/robot/odom",
                "--type",
                "nav_msgs/Odometry",
            ]);
            Live::spawn(e)
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(20), || echoes
            .iter()
            .all(|e| e.lines() > 0)),
        "the subscribers receive"
    );

    // A member: names, types, counts.
    let mut c = tether(&reg);
    c.arg("--keys")
        .arg(dir.join("viewer.key"))
        .args(["topics", "-v", "--wait", "2"]);
    let o = run(c);
    assert_eq!(
        text(&o.stdout),
        "/robot/odom [nav_msgs/Odometry] publishers: 1, subscribers: 2\n"
    );
    let mut c = tether(&reg);
    c.arg("--keys")
        .arg(dir.join("viewer.key"))
        .args(["topics", "--wait", "2"]);
    assert_eq!(text(&run(c).stdout), "/robot/odom\n");
    let mut c = tether(&reg);
    c.arg("--keys")
        .arg(dir.join("viewer.key"))
        .args(["info", "/robot/odom", "--wait", "2"]);
    let info = text(&run(c).stdout);
    for want in [
        "Topic: /robot/odom\n",
        "Publisher count: 1\n",
        "Subscriber count: 2\n",
        "(session robot)",
        "(session viewer)",
        "type: nav_msgs/Odometry",
        "protection: encrypt (as it sends)",
        "protection: encrypt (as it requires)",
    ] {
        assert!(info.contains(want), "missing {want:?} in\n{info}");
    }

    // Without keys: the topic's id alone, the same counts, and a note saying why.
    let mut c = tether(&reg);
    c.args(["topics", "-v", "--wait", "2"]);
    let o = run(c);
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let (id, rest) = lines[0].split_once(' ').unwrap();
    assert!(
        id.len() == 65 && id.starts_with('#') && id[1..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{out}"
    );
    assert_eq!(rest, "[-] publishers: 1, subscribers: 2");
    for secret in ["robot", "odom", "nav_msgs", "Odometry"] {
        assert!(
            !out.contains(secret),
            "{secret} shown to an outsider: {out}"
        );
    }
    assert!(
        text(&o.stderr).contains("shown by topic id only: they are in a secure realm"),
        "{}",
        text(&o.stderr)
    );
    let mut c = tether(&reg);
    c.args(["info", id, "--wait", "2"]);
    let info = text(&run(c).stdout);
    assert!(
        info.contains("Publisher count: 1\n") && info.contains("Subscriber count: 2\n"),
        "{info}"
    );
    assert!(
        !info.contains("odom") && !info.contains("nav_msgs"),
        "{info}"
    );
    let mut c = tether(&reg);
    c.args(["info", "/robot/odom", "--wait", "2"]);
    let info = text(&run(c).stdout);
    assert!(info.contains("Publisher count: 0\n"), "{info}");

    // A member of another realm: nothing of the topic, and why.
    let mut c = tether(&reg);
    c.arg("--keys")
        .arg(far.join("stranger.key"))
        .args(["topics", "-v", "--wait", "2"]);
    let o = run(c);
    assert_eq!(text(&o.stdout), "");
    assert!(
        text(&o.stderr).contains("refused: its credential is not sealed with this realm's secret"),
        "{}",
        text(&o.stderr)
    );

    publisher.kill();
    for e in &mut echoes {
        e.kill();
    }
}
