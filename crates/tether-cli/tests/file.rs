//! `tether send` and `tether recv` as real processes on loopback.

mod common;
use common::{finish, text};

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tether(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    // This host only, in the test's own registry directory: tests never meet.
    c.arg("--registry-dir").arg(dir.join("reg"));
    c.args(["--discovery", "localhost"]);
    c.env_remove("TETHER_DOMAIN").env_remove("TETHER_PEERS");
    c.env_remove("TETHER_CONFIG");
    c
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Pseudo-random bytes (no pattern a chunking bug could hide behind).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `size` bytes with `flow` flags; returns (sender output, receiver output, wall time).
fn transfer(dir: &Path, size: usize, flow: &[&str]) -> (String, String, Duration) {
    let src = dir.join("scan.bin");
    std::fs::write(&src, noise(size, size as u64)).unwrap();
    let out = dir.join("out");
    let mut r = tether(dir);
    r.args(["recv", "/files"])
        .arg(&out)
        .args(["--timeout", "30"]);
    let recv = spawn(r);
    let mut s = tether(dir);
    s.args(["send"])
        .arg(&src)
        .args(["/files", "--chunk", "300000", "--timeout", "30"])
        .args(flow);
    let t0 = Instant::now();
    let send = finish(spawn(s), Duration::from_secs(120));
    let took = t0.elapsed();
    let recv = finish(recv, Duration::from_secs(60));
    let (so, ro) = (
        text(&send.stdout) + &text(&send.stderr),
        text(&recv.stdout) + &text(&recv.stderr),
    );
    assert!(send.status.success(), "send: {so}");
    assert!(recv.status.success(), "recv: {ro}");
    let got = std::fs::read(out.join("scan.bin")).unwrap();
    assert!(got == std::fs::read(&src).unwrap(), "received file differs");
    assert!(!out.join(".scan.bin.part").exists());
    (so, ro, took)
}

/// A file goes through a rate-limited flow controller: it arrives identical, its SHA-256 is
/// checked and printed by both sides, and the transfer is never faster than the limit.
#[test]
fn send_and_recv_with_a_rate() {
    let dir = tempfile::tempdir().unwrap();
    let size = 3_000_000;
    let (so, ro, took) = transfer(dir.path(), size, &["--rate", "10MB/s"]);
    assert!(so.contains("sent scan.bin (3.00 MB)"), "{so}");
    assert!(ro.contains("sha256") && ro.contains(" OK"), "{ro}");
    let sum = so.split("sha256 ").nth(1).unwrap().trim();
    assert!(ro.contains(sum), "sender {sum}, receiver {ro}");
    assert!(
        took >= Duration::from_millis(270),
        "3 MB at 10 MB/s in {took:?}"
    );
}

/// The token-bucket form of the limit, and a file that is not a whole number of chunks.
#[test]
fn send_and_recv_with_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let size = 1_234_567;
    // 20 tokens of 1000 B per 10 ms = 2 MB/s.
    let (so, _, took) = transfer(
        dir.path(),
        size,
        &[
            "--tokens",
            "20",
            "--period",
            "10",
            "--bytes-per-token",
            "1000",
        ],
    );
    assert!(so.contains("2.00 MB/s"), "{so}");
    assert!(
        took >= Duration::from_millis(550),
        "1.2 MB at 2 MB/s in {took:?}"
    );
}

/// Unlimited, an empty file, and a receiver taking two files in a row.
#[test]
fn empty_and_successive_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut r = tether(dir.path());
    r.args(["recv", "/f"])
        .arg(&out)
        .args(["--count", "2", "--timeout", "30"]);
    let recv = spawn(r);
    for (name, n) in [("empty", 0usize), ("big", 2_500_000)] {
        let p = dir.path().join(name);
        std::fs::write(&p, noise(n, 7)).unwrap();
        let mut s = tether(dir.path());
        s.arg("send").arg(&p).args(["/f", "--quiet"]);
        let o = finish(spawn(s), Duration::from_secs(60));
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let o = finish(recv, Duration::from_secs(60));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(out.join("empty")).unwrap().len(), 0);
    assert_eq!(std::fs::read(out.join("big")).unwrap(), noise(2_500_000, 7));
    assert_eq!(text(&o.stdout).matches(" OK").count(), 2);
}

/// Clear errors: no receiver, nothing to receive, a bad rate, a missing file.
#[test]
fn send_and_recv_errors() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x");
    std::fs::write(&f, b"data").unwrap();
    let mut s = tether(dir.path());
    s.arg("send").arg(&f).args(["/nobody", "--timeout", "0.5"]);
    let o = finish(spawn(s), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("no receiver on /nobody"),
        "{}",
        text(&o.stderr)
    );

    let mut r = tether(dir.path());
    r.args(["recv", "/nothing"])
        .arg(dir.path().join("out"))
        .args(["--timeout", "0.5"]);
    let o = finish(spawn(r), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("nothing received on /nothing"));

    for (flags, says) in [
        (vec!["--rate", "fast"], "bad rate 'fast'"),
        (vec!["--rate", "0B/s"], "bad rate"),
        (
            vec!["--tokens", "5", "--bytes-per-token", "0"],
            "bytes_per_token",
        ),
        (vec!["--chunk", "0"], "--chunk 0"),
    ] {
        let mut s = tether(dir.path());
        s.arg("send").arg(&f).arg("/t").args(&flags);
        let o = finish(spawn(s), Duration::from_secs(30));
        assert_eq!(o.status.code(), Some(2), "{flags:?}");
        assert!(
            text(&o.stderr).contains(says),
            "{flags:?}: {}",
            text(&o.stderr)
        );
    }
    let mut s = tether(dir.path());
    s.args(["send", "/no/such/file", "/t"]);
    let o = finish(spawn(s), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("cannot open /no/such/file"));
}

/// A transfer whose bytes do not match the SHA-256 the sender states, or whose name tries
/// to leave the directory, is refused (the first ends the receive with exit 1, the second
/// is skipped with a warning and the receiver goes on waiting); nothing is left behind.
#[test]
fn recv_refuses_bad_hash_and_unsafe_names() {
    for (name, good_hash, says) in [
        (
            "ok.bin",
            false,
            "checksum mismatch: ok.bin: received sha256",
        ),
        ("../evil", true, "refused: unsafe file name"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut r = tether(dir.path());
        r.args(["recv", "/t"]).arg(&out).args(["--timeout", "2"]);
        let recv = spawn(r);
        let mut cfg = tether::Config::default();
        cfg.discovery.range = tether::DiscoveryRange::Localhost;
        cfg.discovery.registry_dir = Some(dir.path().join("reg"));
        let s = tether::Session::open(cfg).unwrap();
        let p = s
            .publisher("/t", tether::Qos::default().keep_all())
            .unwrap();
        let end = Instant::now() + Duration::from_secs(20);
        while p.matched() == 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        let id = [9u8; 16];
        let data = b"hello world";
        let mut h = b"TFH1".to_vec();
        h.extend_from_slice(&id);
        h.extend_from_slice(&(data.len() as u64).to_le_bytes());
        h.extend_from_slice(&1000u32.to_le_bytes());
        h.extend_from_slice(&(name.len() as u16).to_le_bytes());
        h.extend_from_slice(name.as_bytes());
        p.put(h).unwrap();
        let mut d = b"TFD1".to_vec();
        d.extend_from_slice(&id);
        d.extend_from_slice(&0u64.to_le_bytes());
        d.extend_from_slice(data);
        p.put(d).unwrap();
        let mut e = b"TFE1".to_vec();
        e.extend_from_slice(&id);
        let sum = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data);
        let mut sum = sum.as_ref().to_vec();
        if !good_hash {
            sum[0] ^= 1;
        }
        e.extend_from_slice(&sum);
        p.put(e).unwrap();
        let o = finish(recv, Duration::from_secs(30));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
        assert!(left.is_empty(), "{name}: left {left:?}");
        assert!(!dir.path().join("evil").exists());
    }
}

/// Starts `recv` into `dir/out` and a `send` of `size` bytes at 1 MB/s (slow enough to catch
/// mid-file), with `sender_cfg` and `recv_cfg` as their configurations when given. Returns
/// both once the receiver's `.part` file exists.
fn mid_transfer(
    dir: &Path,
    size: usize,
    sender_cfg: Option<&Path>,
    recv_cfg: Option<&Path>,
) -> (Child, Child) {
    let src = dir.join("scan.bin");
    std::fs::write(&src, noise(size, 7)).unwrap();
    let mut r = tether(dir);
    if let Some(c) = recv_cfg {
        r.arg("--config").arg(c);
    }
    r.args(["recv", "/files", "--quiet"]).arg(dir.join("out"));
    let recv = spawn(r);
    let mut s = tether(dir);
    if let Some(c) = sender_cfg {
        s.arg("--config").arg(c);
    }
    s.arg("send")
        .arg(&src)
        .args(["/files", "--rate", "1MB/s", "--chunk", "65536", "--quiet"]);
    let mut send = spawn(s);
    let part = dir.join("out").join(".scan.bin.part");
    let end = Instant::now() + Duration::from_secs(20);
    while !part.exists() {
        if Instant::now() > end {
            let _ = send.kill();
            let out = finish(send, Duration::from_secs(5));
            let mut recv = recv;
            let _ = recv.kill();
            let _ = recv.wait();
            panic!("no .part file after 20 s; send: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (recv, send)
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// SIGTERM or SIGINT to `recv` mid-file: it removes the partial file, says which file it
/// did not receive, exits with the signal's code, and tells the sender, which fails at once
/// naming it.
#[test]
fn recv_stopped_by_a_signal_leaves_nothing() {
    for (sig, name, code) in [("-TERM", "SIGTERM", 143), ("-INT", "SIGINT", 130)] {
        let dir = tempfile::tempdir().unwrap();
        let alpha = named(dir.path(), "alpha");
        let (recv, send) = mid_transfer(dir.path(), 20_000_000, None, Some(&alpha));
        std::thread::sleep(Duration::from_millis(300));
        signal(&recv, sig);
        let out = finish(recv, Duration::from_secs(10));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{sig}: {err}");
        assert!(
            err.contains("interrupted") && err.contains("scan.bin"),
            "{err}"
        );
        assert!(
            !dir.path().join("out").join(".scan.bin.part").exists(),
            "{sig}: the partial file is left"
        );
        assert!(!dir.path().join("out").join("scan.bin").exists());
        // Long before the 20 s the file takes at 1 MB/s: the receipt stops the sender.
        let s = finish(send, Duration::from_secs(12));
        let serr = text(&s.stderr);
        assert_eq!(s.status.code(), Some(1), "{sig}: {serr}");
        assert!(
            serr.contains("receiver alpha (")
                && serr.contains(&format!("interrupted: recv got {name}")),
            "{serr}"
        );
    }
}

/// A sender that dies mid-file (SIGKILL: no goodbye) ends the transfer once its lease
/// expires: `recv` fails, naming the file, and removes the partial file.
#[test]
fn a_sender_that_dies_ends_the_transfer_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("sender.toml");
    std::fs::write(
        &cfg,
        "[discovery]\nlease_ms = 1500\nannounce_period_ms = 300\n",
    )
    .unwrap();
    let (recv, mut send) = mid_transfer(dir.path(), 8_000_000, Some(&cfg), None);
    send.kill().unwrap();
    let _ = send.wait();
    let t0 = Instant::now();
    let out = finish(recv, Duration::from_secs(20));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the sender left") && err.contains("scan.bin"),
        "{err}"
    );
    assert!(!dir.path().join("out").join(".scan.bin.part").exists());
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

/// A full disk: `recv` fails naming the file and the reason, and leaves no partial file
/// filling the disk. Needs root (a 1 MiB tmpfs); skipped otherwise.
#[test]
fn a_full_disk_fails_recv_and_leaves_nothing() {
    if tether_testkit::netns::is_root() {
        let dir = tempfile::tempdir().unwrap();
        let out_dir = dir.path().join("out");
        std::fs::create_dir_all(&out_dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&out_dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            tether_testkit::skip!("skipped: cannot mount a tmpfs");
            return;
        }
        let src = dir.path().join("scan.bin");
        std::fs::write(&src, noise(3_000_000, 9)).unwrap();
        let mut r = tether(dir.path());
        r.arg("--config").arg(named(dir.path(), "alpha"));
        r.args(["recv", "/files", "--quiet", "--timeout", "20"])
            .arg(&out_dir);
        let recv = spawn(r);
        let mut s = tether(dir.path());
        s.arg("send")
            .arg(&src)
            .args(["/files", "--quiet", "--timeout", "10"]);
        let send = spawn(s);
        let out = finish(recv, Duration::from_secs(40));
        let sent = finish(send, Duration::from_secs(40));
        let left: Vec<_> = std::fs::read_dir(&out_dir).unwrap().collect();
        let _ = Command::new("umount").arg(&out_dir).status();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("disk full: cannot write scan.bin") && err.contains("No space left"),
            "{err}"
        );
        assert!(left.is_empty(), "left on the full disk: {left:?}");
        // -q or not, the sender says so and fails.
        let serr = text(&sent.stderr);
        assert_eq!(sent.status.code(), Some(1), "{serr}");
        assert!(
            serr.contains("receiver alpha (")
                && serr.contains("did not confirm scan.bin: disk full: cannot write scan.bin"),
            "{serr}"
        );
    } else {
        tether_testkit::skip!("skipped: needs root for a tmpfs");
    }
}

/// A configuration naming the participant `name`, with a short lease (a killed one is gone
/// within about 1.5 s).
fn named(dir: &Path, name: &str) -> std::path::PathBuf {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(
        &p,
        format!("name = \"{name}\"\n[discovery]\nlease_ms = 1500\nannounce_period_ms = 300\n"),
    )
    .unwrap();
    p
}

/// `recv /files` as the participant `name`, into `dir/name`.
fn receiver(dir: &Path, name: &str, extra: &[&str]) -> Child {
    let mut r = tether(dir);
    r.arg("--config")
        .arg(named(dir, name))
        .args(["recv", "/files", "--quiet"])
        .arg(dir.join(name))
        .args(extra);
    spawn(r)
}

/// Waits (up to 20 s) until `path` exists.
fn wait_exists(path: &Path) {
    let end = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(Instant::now() < end, "no {} after 20 s", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two receivers: `send` exits 0 only once both have written the file and confirmed its
/// SHA-256, and says so.
#[test]
fn send_succeeds_when_every_receiver_confirms() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("scan.bin");
    std::fs::write(&src, noise(2_000_000, 3)).unwrap();
    let a = receiver(dir.path(), "alpha", &["--timeout", "30"]);
    let b = receiver(dir.path(), "beta", &["--timeout", "30"]);
    let mut s = tether(dir.path());
    s.arg("send")
        .arg(&src)
        .args(["/files", "--wait-matched", "2", "--chunk", "300000"]);
    let o = finish(spawn(s), Duration::from_secs(60));
    let so = text(&o.stdout) + &text(&o.stderr);
    assert!(o.status.success(), "{so}");
    assert!(so.contains("confirmed by 2 receivers, sha256 "), "{so}");
    for (r, name) in [(a, "alpha"), (b, "beta")] {
        let ro = finish(r, Duration::from_secs(30));
        assert!(ro.status.success(), "{name}: {}", text(&ro.stderr));
        assert!(
            std::fs::read(dir.path().join(name).join("scan.bin")).unwrap() == noise(2_000_000, 3)
        );
    }
}

/// One of two receivers is killed (SIGKILL: no goodbye, no receipt) mid-file: the other
/// still gets and confirms the file, and `send` fails naming the dead one once its lease
/// ends, -q or not.
#[test]
fn a_receiver_killed_mid_send_fails_send_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("scan.bin");
    std::fs::write(&src, noise(4_000_000, 5)).unwrap();
    let mut a = receiver(dir.path(), "alpha", &["--timeout", "60"]);
    let b = receiver(dir.path(), "beta", &["--timeout", "60"]);
    let mut s = tether(dir.path());
    s.arg("send").arg(&src).args([
        "/files",
        "--wait-matched",
        "2",
        "--rate",
        "1MB/s",
        "--chunk",
        "65536",
        "--quiet",
    ]);
    let send = spawn(s);
    wait_exists(&dir.path().join("alpha").join(".scan.bin.part"));
    a.kill().unwrap();
    let _ = a.wait();
    let o = finish(send, Duration::from_secs(60));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(text(&o.stdout), "");
    assert!(
        err.contains("receiver alpha (")
            && err.contains("did not confirm scan.bin: left before confirming"),
        "{err}"
    );
    assert!(!err.contains("receiver beta"), "{err}");
    assert!(err.contains("1 of 2 receivers did not confirm it"), "{err}");
    let bo = finish(b, Duration::from_secs(30));
    assert!(bo.status.success(), "{}", text(&bo.stderr));
    assert!(
        std::fs::read(dir.path().join("beta").join("scan.bin")).unwrap() == noise(4_000_000, 5)
    );
}

/// A receiver that joins mid-transfer is welcome but not waited for: it skips to the next
/// file, and `send` succeeds with the receiver it started with.
#[test]
fn receivers_that_join_late_are_not_required() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("scan.bin");
    std::fs::write(&src, noise(2_000_000, 8)).unwrap();
    let a = receiver(dir.path(), "alpha", &["--timeout", "30"]);
    let mut s = tether(dir.path());
    s.arg("send")
        .arg(&src)
        .args(["/files", "--rate", "1MB/s", "--chunk", "65536"]);
    let send = spawn(s);
    wait_exists(&dir.path().join("alpha").join(".scan.bin.part"));
    let late = receiver(dir.path(), "late", &["--timeout", "3"]);
    let o = finish(send, Duration::from_secs(60));
    let so = text(&o.stdout) + &text(&o.stderr);
    assert!(o.status.success(), "{so}");
    assert!(so.contains("confirmed by 1 receiver,"), "{so}");
    assert!(finish(a, Duration::from_secs(30)).status.success());
    let lo = finish(late, Duration::from_secs(30));
    assert_eq!(lo.status.code(), Some(1), "{}", text(&lo.stderr));
    assert!(!dir.path().join("late").join("scan.bin").exists());
}

/// A reader that is not `tether recv` cannot confirm: `send` fails after `--timeout`,
/// naming it and saying why.
#[test]
fn a_reader_that_sends_no_receipt_fails_send() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("x");
    std::fs::write(&src, b"data").unwrap();
    let mut cfg = tether::Config::default();
    cfg.discovery.range = tether::DiscoveryRange::Localhost;
    cfg.discovery.registry_dir = Some(dir.path().join("reg"));
    cfg.name = "watcher".into();
    let session = tether::Session::open(cfg).unwrap();
    let sub = session
        .subscriber("/files", tether::Qos::default().keep_all())
        .unwrap();
    let mut s = tether(dir.path());
    s.arg("send")
        .arg(&src)
        .args(["/files", "--timeout", "3", "-q"]);
    let o = finish(spawn(s), Duration::from_secs(60));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("receiver watcher (")
            && err.contains("did not confirm x: no receipt within 3 s"),
        "{err}"
    );
    // It did get the file; it just cannot say so.
    assert_eq!(
        &sub.recv_timeout(Duration::from_secs(5)).unwrap().payload[..4],
        b"TFH1"
    );
}

/// A receiver written with the library: it confirms with its own receipts. Malformed ones,
/// and one from another participant speaking for this receiver (a forger claiming it failed),
/// are ignored with a warning and counted; a receipt whose SHA-256 is not the file's fails
/// the transfer.
#[test]
fn receipts_are_checked() {
    for honest in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("f.bin");
        let data = noise(100_000, 4);
        std::fs::write(&src, &data).unwrap();
        let open = |name: &str| {
            let mut cfg = tether::Config::default();
            cfg.discovery.range = tether::DiscoveryRange::Localhost;
            cfg.discovery.registry_dir = Some(dir.path().join("reg"));
            cfg.name = name.into();
            tether::Session::open(cfg).unwrap()
        };
        let (session, forger) = (open("lib"), open("forger"));
        let rq = tether::Qos::default().keep_last(32).transient_local();
        let receipts = session.publisher("/files/receipts", rq).unwrap();
        let forged = forger.publisher("/files/receipts", rq).unwrap();
        let sub = session
            .subscriber("/files", tether::Qos::default().keep_all())
            .unwrap();
        let mut s = tether(dir.path());
        s.arg("send").arg(&src).args(["/files", "--timeout", "20"]);
        let send = spawn(s);
        let header = sub.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(&header.payload[..4], b"TFH1");
        let id = &header.payload[4..20];
        let me = sub.guid();
        let receipt = |outcome: u8, sum: &[u8]| {
            let mut r = b"TFR1".to_vec();
            r.extend_from_slice(id);
            r.extend_from_slice(&me.participant.0.to_le_bytes());
            r.extend_from_slice(&me.entity.0.to_le_bytes());
            r.push(outcome);
            r.extend_from_slice(&(data.len() as u64).to_le_bytes());
            r.extend_from_slice(sum);
            r.extend_from_slice(&0u16.to_le_bytes());
            r
        };
        let sum = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &data);
        let mut sum = sum.as_ref().to_vec();
        // The forger's "disk full" for our reader reaches the sender first.
        forged.put(receipt(1, &[0; 32])).unwrap();
        assert!(forged.wait_for_acknowledgments(Duration::from_secs(20)));
        let good = receipt(0, &sum);
        receipts.put(good[..good.len() - 1].to_vec()).unwrap();
        if !honest {
            sum[5] ^= 1;
        }
        receipts.put(receipt(0, &sum)).unwrap();
        let o = finish(send, Duration::from_secs(60));
        let err = text(&o.stderr);
        assert!(err.contains("warning: bad receipt from"), "{err}");
        assert!(err.contains("for a reader of another participant"), "{err}");
        assert!(err.contains("warning: 2 bad receipts ignored"), "{err}");
        if honest {
            assert!(o.status.success(), "{err}");
            assert!(text(&o.stdout).contains("confirmed by 1 receiver,"));
        } else {
            assert_eq!(o.status.code(), Some(1), "{err}");
            assert!(
                err.contains("receiver lib (")
                    && err.contains("checksum mismatch: confirmed 100000 bytes with sha256"),
                "{err}"
            );
        }
    }
}

/// A receiver that may not write where it is told (a read-only file system as root, a
/// directory without write permission otherwise) refuses the file with a receipt: `send`
/// fails at once with its name and the reason, and nothing is left behind.
#[test]
fn a_receiver_that_may_not_write_fails_send() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("alpha");
    std::fs::create_dir_all(&out).unwrap();
    let root = tether_testkit::netns::is_root();
    let says = if root {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
            .arg(&out)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            tether_testkit::skip!("skipped: cannot mount a tmpfs");
            return;
        }
        "Read-only file system"
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o555)).unwrap();
        "Permission denied"
    };
    let src = dir.path().join("scan.bin");
    std::fs::write(&src, noise(500_000, 2)).unwrap();
    let r = receiver(dir.path(), "alpha", &["--timeout", "3"]);
    let mut s = tether(dir.path());
    s.arg("send")
        .arg(&src)
        .args(["/files", "--timeout", "30", "-q"]);
    let o = finish(spawn(s), Duration::from_secs(60));
    let ro = finish(r, Duration::from_secs(30));
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
    if root {
        let _ = Command::new("umount").arg(&out).status();
    }
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("receiver alpha (")
            && err.contains("did not confirm scan.bin: permission denied: cannot create")
            && err.contains(says),
        "{err}"
    );
    let rerr = text(&ro.stderr);
    assert!(
        rerr.contains("transfer skipped: permission denied"),
        "{rerr}"
    );
    assert!(left.is_empty(), "{left:?}");
}

/// A receiver that stops (SIGSTOP) mid-file, still within its lease: once no receiver has
/// made progress for `--timeout`, `send` fails naming it as the one that stopped
/// acknowledging.
#[test]
fn a_stalled_receiver_fails_send_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("scan.bin");
    std::fs::write(&src, noise(4_000_000, 6)).unwrap();
    // The default lease (10 s), longer than the sender's --timeout.
    let cfg = dir.path().join("stuck.toml");
    std::fs::write(&cfg, "name = \"stuck\"\n").unwrap();
    let mut r = tether(dir.path());
    r.arg("--config")
        .arg(&cfg)
        .args(["recv", "/files", "--quiet"])
        .arg(dir.path().join("stuck"));
    let mut stuck = spawn(r);
    let mut s = tether(dir.path());
    s.arg("send").arg(&src).args([
        "/files",
        "--rate",
        "1MB/s",
        "--chunk",
        "65536",
        "--timeout",
        "3",
        "-q",
    ]);
    let send = spawn(s);
    wait_exists(&dir.path().join("stuck").join(".scan.bin.part"));
    signal(&stuck, "-STOP");
    let o = finish(send, Duration::from_secs(60));
    signal(&stuck, "-CONT");
    let _ = stuck.kill();
    let _ = stuck.wait();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("receiver stuck (")
            && err.contains("did not confirm scan.bin: stopped acknowledging for 3 s ("),
        "{err}"
    );
}

/// `recv` given a file where its directory goes says that, not "File exists".
#[test]
fn recv_into_a_file_says_it_is_not_a_directory() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("maps");
    std::fs::write(&f, b"x").unwrap();
    let mut c = tether(t.path());
    c.args(["recv", "/maps"]).arg(&f);
    let o = finish(spawn(c), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("is not a directory"),
        "{}",
        text(&o.stderr)
    );
}
