//! `tether send` and `tether recv` as real processes on loopback.

mod common;
use common::{finish, text};

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tether(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.arg("--registry-dir").arg(dir.join("reg"));
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
        ("ok.bin", false, "SHA-256 mismatch"),
        ("../evil", true, "unsafe file name"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut r = tether(dir.path());
        r.args(["recv", "/t"]).arg(&out).args(["--timeout", "2"]);
        let recv = spawn(r);
        let mut cfg = tether::Config::default();
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
/// mid-file), with `sender_cfg` as the sender's configuration when given. Returns both once
/// the receiver's `.part` file exists.
fn mid_transfer(dir: &Path, size: usize, sender_cfg: Option<&Path>) -> (Child, Child) {
    let src = dir.join("scan.bin");
    std::fs::write(&src, noise(size, 7)).unwrap();
    let mut r = tether(dir);
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
/// did not receive, and exits with the signal's code.
#[test]
fn recv_stopped_by_a_signal_leaves_nothing() {
    for (sig, code) in [("-TERM", 143), ("-INT", 130)] {
        let dir = tempfile::tempdir().unwrap();
        let (recv, mut send) = mid_transfer(dir.path(), 8_000_000, None);
        std::thread::sleep(Duration::from_millis(300));
        signal(&recv, sig);
        let out = finish(recv, Duration::from_secs(10));
        let _ = send.kill();
        let _ = send.wait();
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
    let (recv, mut send) = mid_transfer(dir.path(), 8_000_000, Some(&cfg));
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
            eprintln!("skipped: cannot mount a tmpfs");
            return;
        }
        let src = dir.path().join("scan.bin");
        std::fs::write(&src, noise(3_000_000, 9)).unwrap();
        let mut r = tether(dir.path());
        r.args(["recv", "/files", "--quiet", "--timeout", "20"])
            .arg(&out_dir);
        let recv = spawn(r);
        let mut s = tether(dir.path());
        s.arg("send")
            .arg(&src)
            .args(["/files", "--quiet", "--timeout", "10"]);
        let send = spawn(s);
        let out = finish(recv, Duration::from_secs(40));
        let _ = finish(send, Duration::from_secs(40));
        let left: Vec<_> = std::fs::read_dir(&out_dir).unwrap().collect();
        let _ = Command::new("umount").arg(&out_dir).status();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("scan.bin") && err.contains("No space left"),
            "{err}"
        );
        assert!(left.is_empty(), "left on the full disk: {left:?}");
    } else {
        eprintln!("skipped: needs root for a tmpfs");
    }
}
