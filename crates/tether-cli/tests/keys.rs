//! `tether keys` as a real process: a realm, credentials, revocation, and `show`.

mod common;
use common::text;

use std::path::Path;
use std::process::{Command, Output};

fn keys(args: &[&str], dir: &Path) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.arg("keys");
    for a in args {
        c.arg(a.replace("DIR", dir.to_str().unwrap()));
    }
    c.output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn realm_issue_show_revoke() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    let out = ok(&keys(&["init", "DIR"], &dir));
    assert!(out.contains("CA public key"), "{out}");
    #[cfg(unix)]
    {
        assert_eq!(mode(&dir.join("ca.key")), 0o600);
        assert_eq!(mode(&dir.join("realm.secret")), 0o600);
    }
    // A second init refuses to overwrite the CA.
    let o = keys(&["init", "DIR"], &dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("refusing to overwrite"));

    let out = ok(&keys(
        &[
            "issue",
            "DIR",
            "robot1",
            "--pub",
            "/robot1/**",
            "--sub",
            "/cmd/*",
            "/map",
            "--expires",
            "10",
        ],
        &dir,
    ));
    assert!(out.contains("issued robot1 serial 1"), "{out}");
    assert!(
        out.contains("grants: publish /robot1/**; subscribe /cmd/* /map"),
        "{out}"
    );
    ok(&keys(&["issue", "DIR", "viewer", "--sub", "/**"], &dir));
    // A replacement given grants has those only, and says which it dropped; one given
    // none keeps them all and has nothing to say.
    let o = keys(
        &["issue", "DIR", "viewer", "--replace", "--pub", "/note"],
        &dir,
    );
    let out = ok(&o);
    assert!(
        out.contains("grants: publish /note; subscribe nothing"),
        "{out}"
    );
    assert!(
        text(&o.stderr).contains("note: viewer no longer has --sub /**"),
        "{}",
        text(&o.stderr)
    );
    // No grants at all: said.
    let o = keys(&["issue", "DIR", "nobody"], &dir);
    ok(&o);
    assert!(
        text(&o.stderr).contains("note: nobody has no grants"),
        "{}",
        text(&o.stderr)
    );
    let o = keys(&["issue", "DIR", "viewer", "--replace"], &dir);
    assert!(ok(&o).contains("grants: publish /note;"));
    assert!(
        !text(&o.stderr).contains("no longer has"),
        "{}",
        text(&o.stderr)
    );
    #[cfg(unix)]
    {
        assert_eq!(mode(&dir.join("robot1.key")), 0o600);
        assert_eq!(mode(&dir.join("robot1.cred")), 0o644);
    }

    let show = ok(&keys(&["show", "DIR/robot1.cred"], &dir));
    for want in [
        "credential   robot1",
        "serial       1",
        "publish      /robot1/**",
        "subscribe    /cmd/* /map",
        "signature    valid",
    ] {
        assert!(show.contains(want), "missing {want:?} in\n{show}");
    }
    // The library reads what the command wrote, and the grants mean what they say.
    let b = tether::keys::KeyBundle::load(&dir.join("robot1.key")).unwrap();
    assert!(b.credential.may_publish("/robot1/odom"));
    assert!(!b.credential.may_publish("/robot2/odom"));
    assert!(b.credential.may_subscribe("/map"));
    assert_eq!(b.credential.expires - b.credential.issued, 10 * 86_400);

    // Secrets are never printed.
    let ca_key = std::fs::read_to_string(dir.join("ca.key")).unwrap();
    let seed = ca_key
        .lines()
        .find(|l| l.starts_with("seed"))
        .unwrap()
        .split('"')
        .nth(1)
        .unwrap()
        .to_string();
    let bundle = std::fs::read_to_string(dir.join("viewer.key")).unwrap();
    let secrets: Vec<String> = bundle
        .lines()
        .filter(|l| {
            l.starts_with("sign_seed")
                || l.starts_with("kx_secret")
                || l.starts_with("realm_secret")
        })
        .map(|l| l.split('"').nth(1).unwrap().to_string())
        .chain([seed])
        .collect();
    for f in ["DIR/ca.key", "DIR/viewer.key", "DIR/realm.secret"] {
        let s = ok(&keys(&["show", f], &dir));
        for secret in &secrets {
            assert!(!s.contains(secret.as_str()), "{f} printed a secret:\n{s}");
        }
    }

    // Revocation by name, then by serial; the list is signed and lists both.
    let out = ok(&keys(&["revoke", "DIR", "robot1"], &dir));
    assert!(out.contains("revoked serial 1"), "{out}");
    ok(&keys(&["revoke", "DIR", "2"], &dir));
    let show = ok(&keys(&["show", "DIR/revoked.toml"], &dir));
    assert!(
        show.contains("revoked      1 2") && show.contains("signature    valid"),
        "{show}"
    );
    let ca = b.ca_public;
    let rl = tether::keys::load_revocations(&dir.join("revoked.toml"), &ca).unwrap();
    assert!(rl.contains(1) && rl.contains(2));
    assert!(matches!(
        b.credential
            .verify(&ca, tether::keys::unix_now(), Some(&rl)),
        Err(tether_crypto::CredentialError::Revoked(1))
    ));
}

#[test]
fn clear_errors() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    ok(&keys(&["init", "DIR"], &dir));
    std::fs::write(dir.join("other.toml"), "a = 1\n").unwrap();
    for (args, says) in [
        (
            vec!["issue", "DIR", "a", "--pub", "/x*"],
            "'/x*' is not a grant pattern: the level 'x*' has '*' within it",
        ),
        // A grant no topic name can match would grant nothing: refused as names are.
        (
            vec!["issue", "DIR", "a", "--pub", "bad topic"],
            "'bad topic' is not a grant pattern: it contains a space",
        ),
        (
            vec!["issue", "DIR", "a", "--sub", "/a/1b"],
            "the level '1b' starts with a digit",
        ),
        (
            vec!["issue", "DIR", "../evil", "--pub", "/x"],
            "name '../evil'",
        ),
        (vec!["issue", "DIR", "a", "--expires", "0"], "--expires 0"),
        (
            vec!["revoke", "DIR", "nobody"],
            "no credential named or numbered 'nobody'",
        ),
        (vec!["show", "DIR/other.toml"], "not a tether key file"),
        (vec!["show", "DIR/missing"], "missing"),
        (
            vec!["issue", "DIR/nowhere", "a"],
            "does not exist: give the directory",
        ),
        // A member's key file where the realm directory goes.
        (
            vec!["topic-id", "DIR/other.toml", "/x"],
            "is a file, not a realm directory",
        ),
        (vec!["topic-id", "DIR/..", "/x"], "has no ca.key"),
    ] {
        let o = keys(&args, &dir);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            text(&o.stderr).contains(says),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    ok(&keys(&["issue", "DIR", "a", "--pub", "/x"], &dir));
    let o = keys(&["issue", "DIR", "a", "--pub", "/x"], &dir);
    assert!(text(&o.stderr).contains("refusing to overwrite"));
    // A secret file others can read is refused, with the fix in the message.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join("ca.key"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let o = keys(&["issue", "DIR", "b"], &dir);
        assert_eq!(o.status.code(), Some(2));
        assert!(text(&o.stderr).contains("chmod 600"), "{}", text(&o.stderr));
    }
    // A revocation list that is not there is called one, not a key bundle.
    let o = Command::new(env!("CARGO_BIN_EXE_tether"))
        .env_remove("TETHER_CONFIG")
        .arg("--keys")
        .arg(dir.join("a.key"))
        .arg("--revocations")
        .arg(dir.join("gone.toml"))
        .args(["pub", "/x", "hi", "--wait-matched", "0", "--linger", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("gone.toml: no such revocation list"), "{err}");
    assert!(err.contains("made by `tether keys init DIR`"), "{err}");
    assert!(!err.contains("key bundle"), "{err}");
    // A file of the wrong kind, or a directory, is said to be one, with what to give.
    for (keys_arg, revs, says) in [
        (
            "a.cred",
            None,
            "this is a credential (DIR/NAME.cred: public, it holds no keys), not a key bundle",
        ),
        (
            "ca.key",
            None,
            "this is the realm's CA key (DIR/ca.key), not a key bundle",
        ),
        (
            "revoked.toml",
            None,
            "this is a revocation list (DIR/revoked.toml), not a key bundle",
        ),
        ("", None, "give a file, not a directory"),
        (
            "a.key",
            Some("a.cred"),
            "this is a credential (DIR/NAME.cred: public, it holds no keys), not a revocation list",
        ),
        (
            "a.key",
            Some("a.key"),
            "this is a key bundle (DIR/NAME.key), not a revocation list",
        ),
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
        c.env_remove("TETHER_CONFIG")
            .arg("--keys")
            .arg(dir.join(keys_arg));
        if let Some(r) = revs {
            c.arg("--revocations").arg(dir.join(r));
        }
        let o = c
            .args(["pub", "/x", "hi", "--wait-matched", "0", "--linger", "0"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{keys_arg}: {}", text(&o.stderr));
        let err = text(&o.stderr);
        assert!(err.contains(says), "{keys_arg} {revs:?}: {err}");
        assert!(!err.contains("chmod"), "{err}");
    }
    // A tampered credential shows as not valid.
    let p = dir.join("a.cred");
    let c = std::fs::read_to_string(&p)
        .unwrap()
        .replace("\"/x\"", "\"/**\"");
    std::fs::write(&p, c).unwrap();
    let s = ok(&keys(&["show", "DIR/a.cred"], &dir));
    assert!(
        s.contains("NOT VALID: the CA's signature does not verify"),
        "{s}"
    );
}

/// `--role router`: a credential without grants and a bundle without the realm secret;
/// grants with it are refused, saying why; `show` names the role; a session refuses the
/// bundle.
#[test]
fn router_credentials() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("realm");
    ok(&keys(&["init", "DIR"], &dir));
    let o = keys(
        &["issue", "DIR", "relay", "--role", "router", "--sub", "/a"],
        &dir,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("a router's credential carries no grants"),
        "{}",
        text(&o.stderr)
    );
    assert!(!dir.join("relay.key").exists());
    let out = ok(&keys(&["issue", "DIR", "relay", "--role", "router"], &dir));
    assert!(out.contains("role router"), "{out}");
    let bundle = std::fs::read_to_string(dir.join("relay.key")).unwrap();
    assert!(!bundle.contains("realm_secret"), "{bundle}");
    for f in ["DIR/relay.key", "DIR/relay.cred"] {
        let s = ok(&keys(&["show", f], &dir));
        assert!(s.contains("role         router"), "{f}: {s}");
        assert!(s.contains("publish      (nothing)"), "{f}: {s}");
    }
    let o = keys(&["issue", "--help"], &dir);
    assert!(text(&o.stdout).contains("--role"), "{}", text(&o.stdout));
    // A session does not take a router's keys.
    let o = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["pub", "/t", "x", "--count", "1", "--keys"])
        .arg(dir.join("relay.key"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("router's key bundle"),
        "{}",
        text(&o.stderr)
    );
}
