//! The `tether` binary, run as real processes on loopback. Each test uses its own registry
//! directory, so tests running in parallel never meet.

mod common;
use common::{finish, text};

use std::io::Read;
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tether(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    // This host only, in the test's own registry directory: tests never meet.
    c.arg("--registry-dir").arg(dir);
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

#[test]
fn pub_and_echo_exchange_exactly_n_samples() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    e.args(["echo", "/chatter", "--count", "5", "--timeout", "30"]);
    let echo = spawn(e);
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/chatter",
        "hi there",
        "--count",
        "5",
        "--rate",
        "20",
        "--wait-matched",
        "1",
    ]);
    let publisher = spawn(p);
    let out = finish(echo, Duration::from_secs(40));
    assert!(out.status.success(), "echo failed: {}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(lines, vec!["hi there"; 5]);
    let pout = finish(publisher, Duration::from_secs(40));
    assert!(pout.status.success(), "pub failed: {}", text(&pout.stderr));
    assert!(text(&pout.stdout).contains("publishing #5: hi there"));
}

#[test]
fn echo_prints_binary_as_hex_and_size_fills() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    e.args(["echo", "/sized", "--count", "1", "--timeout", "30"]);
    let echo = spawn(e);
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/sized",
        "ab",
        "--size",
        "7",
        "--count",
        "1",
        "--wait-matched",
        "1",
        "-q",
    ]);
    let publisher = spawn(p);
    let out = finish(echo, Duration::from_secs(40));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "abababa");
    finish(publisher, Duration::from_secs(40));
}

#[test]
fn echo_timeout_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    e.args(["echo", "/nobody", "--count", "1", "--timeout", "0.5"]);
    let out = finish(spawn(e), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("received 0 of 1 samples on /nobody"));
    // Without --count: nothing came, said plainly.
    let mut e = tether(dir.path());
    e.args(["echo", "/nobody", "--timeout", "0.5"]);
    let out = finish(spawn(e), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no sample on /nobody before the timeout"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn incompatible_qos_is_printed_by_both() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    // --reliable given: echo keeps it rather than take the publisher's best-effort.
    e.args([
        "echo",
        "/cmd_vel",
        "--reliable",
        "--count",
        "1",
        "--timeout",
        "3",
    ]);
    let echo = spawn(e);
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/cmd_vel",
        "--best-effort",
        "--rate",
        "10",
        "--count",
        "30",
        "-q",
    ]);
    let publisher = spawn(p);
    let eout = finish(echo, Duration::from_secs(30));
    let pout = finish(publisher, Duration::from_secs(30));
    assert_eq!(
        eout.status.code(),
        Some(1),
        "no sample may cross an incompatible pair"
    );
    for (who, err) in [("echo", text(&eout.stderr)), ("pub", text(&pout.stderr))] {
        let line = err
            .lines()
            .find(|l| l.contains("incompatible QoS"))
            .unwrap_or_else(|| panic!("{who} printed no incompatible-QoS line: {err}"));
        assert!(line.contains("/cmd_vel"), "{line}");
        assert!(line.contains("reliability=best_effort"), "{line}");
        assert!(line.contains("reliability=reliable"), "{line}");
    }
}

#[test]
fn topics_and_info_show_endpoints_and_qos() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/scan",
        "--rate",
        "5",
        "--count",
        "40",
        "--keep-last",
        "3",
        "--transient-local",
        "--partition",
        "lidar",
        "--type",
        "sensor_msgs/LaserScan",
        "-q",
    ]);
    let mut publisher = spawn(p);
    let mut t = tether(dir.path());
    t.args(["topics", "-v", "--wait", "1.5"]);
    let out = finish(spawn(t), Duration::from_secs(20));
    let s = text(&out.stdout);
    assert!(
        s.contains("/scan [sensor_msgs/LaserScan] publishers: 1"),
        "{s}"
    );
    let mut i = tether(dir.path());
    i.args(["info", "/scan", "--wait", "1.5"]);
    let out = finish(spawn(i), Duration::from_secs(20));
    let s = text(&out.stdout);
    assert!(s.contains("Publisher count: 1"), "{s}");
    assert!(s.contains("partitions: lidar"), "{s}");
    assert!(
        s.contains("reliability=reliable durability=transient_local history=keep_last(3)"),
        "{s}"
    );
    let _ = publisher.kill();
    let _ = publisher.wait();
}

#[test]
fn hz_and_bw_report_rates() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = tether(dir.path());
    p.args([
        "pub", "/rate", "--rate", "50", "--count", "400", "--size", "100", "-q",
    ]);
    let mut publisher = spawn(p);
    let mut h = tether(dir.path());
    h.args(["hz", "/rate", "--duration", "3"]);
    let out = finish(spawn(h), Duration::from_secs(30));
    let s = text(&out.stdout);
    let rates: Vec<f64> = s
        .lines()
        .filter_map(|l| l.strip_prefix("average rate: "))
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    assert!(!rates.is_empty(), "{s}");
    let last = *rates.last().unwrap();
    assert!(
        (20.0..80.0).contains(&last),
        "measured {last} Hz for a 50 Hz publisher\n{s}"
    );
    let mut b = tether(dir.path());
    b.args(["bw", "/rate", "--duration", "2"]);
    let out = finish(spawn(b), Duration::from_secs(30));
    let s = text(&out.stdout);
    assert!(s.contains("Message size mean: 100 B"), "{s}");
    let _ = publisher.kill();
    let _ = publisher.wait();
}

#[test]
fn bad_config_names_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "domain = 3\n[transport]\nbusy_pol = true\n").unwrap();
    let mut c = tether(dir.path());
    c.arg("--config")
        .arg(&cfg)
        .args(["echo", "/x", "--timeout", "0.1"]);
    let out = finish(spawn(c), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("busy_pol") && err.contains("line 3"), "{err}");
    // The same through TETHER_CONFIG, with a wrong type.
    std::fs::write(&cfg, "domain = \"three\"\n").unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.env("TETHER_CONFIG", &cfg).args(["topics", "--wait", "0"]);
    let out = finish(spawn(c), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("domain") && err.contains("line 1"), "{err}");
}

#[test]
fn config_file_sets_domain() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("d7.toml");
    std::fs::write(&cfg, "domain = 7\nname = \"robot7\"\n").unwrap();
    let mut e = tether(dir.path());
    e.arg("--config")
        .arg(&cfg)
        .args(["echo", "/d", "--count", "1", "--timeout", "30"]);
    let echo = spawn(e);
    // Another domain never reaches it...
    let mut other = tether(dir.path());
    other.args([
        "pub",
        "/d",
        "wrong domain",
        "--rate",
        "20",
        "--count",
        "10",
        "--wait-matched",
        "0",
        "-q",
    ]);
    finish(spawn(other), Duration::from_secs(30));
    // ...the same domain does.
    let mut p = tether(dir.path());
    p.arg("--config").arg(&cfg).args([
        "pub",
        "/d",
        "right domain",
        "--count",
        "1",
        "--wait-matched",
        "1",
        "-q",
    ]);
    let publisher = spawn(p);
    let out = finish(echo, Duration::from_secs(40));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "right domain");
    finish(publisher, Duration::from_secs(30));
}

/// Garbage sent to a running `tether echo` process: random bytes, truncated datagrams and
/// valid headers with absurd counts. It keeps delivering, counts the drops, exits cleanly.
#[test]
fn echo_process_survives_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    e.args([
        "echo",
        "/ok",
        "--count",
        "20",
        "--timeout",
        "60",
        "--stats",
        "--keep-all",
    ]);
    let echo = spawn(e);
    // Find the echo's socket in the registry.
    let domain_dir = dir.path().join("domain-0");
    let end = Instant::now() + Duration::from_secs(10);
    let addr = loop {
        let found = std::fs::read_dir(&domain_dir).ok().and_then(|rd| {
            rd.flatten()
                .find(|e| e.path().extension().is_some_and(|x| x == "addr"))
                .and_then(|e| std::fs::read_to_string(e.path()).ok())
        });
        // "ADDR net=N": the address, then the network namespace.
        let first = found.and_then(|s| s.split_whitespace().next().map(str::to_string));
        if let Some(a) = first.and_then(|s| s.parse::<std::net::SocketAddr>().ok()) {
            break a;
        }
        assert!(Instant::now() < end, "echo never registered");
        std::thread::sleep(Duration::from_millis(20));
    };
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..30_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 1400) as usize + 1;
        let mut d: Vec<u8> = (0..len).map(|k| (x >> (k % 56)) as u8).collect();
        if i % 3 == 0 {
            // A valid header, so the body's absurd lengths and counts get parsed.
            d.splice(
                0..0,
                b"TTHR\x01\x00\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08"
                    .iter()
                    .copied(),
            );
        }
        let _ = attacker.send_to(&d, addr);
    }
    let mut p = tether(dir.path());
    p.args([
        "pub",
        "/ok",
        "--count",
        "20",
        "--rate",
        "0",
        "--keep-all",
        "--wait-matched",
        "1",
        "-q",
    ]);
    let publisher = spawn(p);
    let mut out = finish(echo, Duration::from_secs(70));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 20);
    let mut err = String::new();
    let _ = out.stderr.as_slice().read_to_string(&mut err);
    // The --stats table's row: `    malformed   1234`.
    let malformed: u64 = err
        .lines()
        .find_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            ["malformed", v] => v.parse().ok(),
            _ => None,
        })
        .unwrap_or(0);
    assert!(malformed > 1000, "malformed drops not counted: {err}");
    out.stdout.clear();
    finish(publisher, Duration::from_secs(30));
}

#[test]
fn demo_runs_and_reports_rates() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = tether(dir.path());
    // The single-host demo (the two-site one is tested in demo.rs).
    c.args(["--domain", "40", "demo", "--local", "--duration", "3"]);
    let out = finish(spawn(c), Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("/demo/chatter") && s.contains("msg/s"), "{s}");
    assert!(s.contains("sessions: 4"), "{s}");
    assert!(s.contains("received"), "{s}");
}

#[test]
fn bench_runs_and_prints_json() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    // Blocking only: busy-poll rows would spin both CPUs under the tests running beside it.
    c.args([
        "bench",
        "latency",
        "--samples",
        "100",
        "--sizes",
        "64",
        "--mode",
        "blocking",
        "--json",
    ]);
    let out = finish(spawn(c), Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        assert!(r["tether_p50_us"].as_f64().unwrap() > 0.0);
        assert!(r["udp_p50_us"].as_f64().unwrap() > 0.0);
    }
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.args([
        "bench",
        "throughput",
        "--duration",
        "0.3",
        "--sizes",
        "256",
        "--mode",
        "blocking",
        "--json",
    ]);
    let out = finish(spawn(c), Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        5,
        "raw UDP, and tether best effort / reliable, unbatched / batched"
    );
    for r in rows {
        assert!(r["received"].as_u64().unwrap() > 0, "{r}");
    }
}

#[test]
fn paper_benches_run_and_print_json() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.args([
        "bench", "batch", "--counts", "200", "--sizes", "256", "--reps", "2", "--json",
    ]);
    let out = finish(spawn(c), Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "unbatched, coalescing and batching");
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["unbatched", "coalescing", "batching"]);
    for r in rows {
        assert!(r["mean_ms"].as_f64().unwrap() > 0.0, "{r}");
    }
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.args([
        "bench",
        "large",
        "--total",
        "300000",
        "--chunks",
        "1000,300000",
        "--reps",
        "2",
        "--json",
    ]);
    let out = finish(spawn(c), Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["samples"], 300);
    assert_eq!(
        rows[1]["samples"], 1,
        "the whole payload as one fragmented sample"
    );
}

#[test]
fn bad_durations_and_rates_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    for (args, flag) in [
        (vec!["echo", "/x", "--timeout=-1"], "--timeout"),
        (vec!["echo", "/x", "--timeout", "1e300"], "--timeout"),
        (vec!["pub", "/x", "--rate=-5", "--count", "1"], "--rate"),
        (vec!["pub", "/x", "--rate", "NaN", "--count", "1"], "--rate"),
        (
            vec!["pub", "/x", "--linger", "1e300", "--count", "1"],
            "--linger",
        ),
        (vec!["topics", "--wait=-3"], "--wait"),
        (
            vec!["pub", "/x", "--inactive-after", "never", "--count", "1"],
            "--inactive-after",
        ),
        (
            vec!["pub", "/x", "--inactive-after=-1", "--count", "1"],
            "--inactive-after",
        ),
    ] {
        let mut c = tether(dir.path());
        c.args(&args);
        let out = finish(spawn(c), Duration::from_secs(20));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(flag),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// `bench bulk` runs a flow-controlled transfer beside the realtime topic and reports both;
/// the limited row never beats its limit by more than the first burst allows.
#[test]
fn bulk_bench_runs_and_respects_the_limit() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.args([
        "bench",
        "bulk",
        "--total",
        "2000000",
        "--tokens",
        "unlimited,50",
        "--bytes-per-token",
        "4096",
        "--idle",
        "0.3",
        "--json",
    ]);
    let out = finish(spawn(c), Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows[0]["tokens_per_period"].is_null());
    assert!(rows[0]["paper_ms"].as_f64() == Some(5918.0));
    let limited = &rows[1];
    // 50 tokens of 4 KB per 10 ms = 20.48 MB/s.
    assert_eq!(limited["limit_bytes_per_s"].as_f64(), Some(20_480_000.0));
    let rate = limited["bytes_per_s"].as_f64().unwrap();
    assert!(
        rate <= 20_480_000.0 * 1.1,
        "{rate} B/s through a 20.5 MB/s limit"
    );
    for r in rows {
        assert!(r["rt_idle_samples"].as_u64().unwrap() > 100, "{r}");
        assert!(r["rt_bulk_samples"].as_u64().unwrap() > 10, "{r}");
        assert!(r["rt_bulk_p99_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.args(["bench", "bulk", "--tokens", "lots"]);
    let out = finish(spawn(c), Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("'lots' is neither a number nor unlimited"));
}

/// `pub --batch` and `pub --coalesce` deliver every sample, in order, as the unbatched path.
#[test]
fn pub_batched_and_coalesced() {
    for shape in ["--batch", "--coalesce"] {
        let dir = tempfile::tempdir().unwrap();
        let mut e = tether(dir.path());
        e.args([
            "echo",
            "/b",
            "--count",
            "300",
            "--timeout",
            "30",
            "--keep-all",
        ]);
        let echo = spawn(e);
        let mut p = tether(dir.path());
        p.args([
            "pub",
            "/b",
            "x",
            "--count",
            "300",
            "--rate",
            "0",
            "--numbered",
            "--keep-all",
            "--wait-matched",
            "1",
            "--quiet",
            shape,
            "--batch-samples",
            "32",
        ]);
        let publisher = spawn(p);
        let out = finish(echo, Duration::from_secs(40));
        assert!(out.status.success(), "{shape}: {}", text(&out.stderr));
        let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
        let want: Vec<String> = (1..=300).map(|i| format!("{i} x")).collect();
        assert_eq!(lines, want, "{shape}");
        let pout = finish(publisher, Duration::from_secs(40));
        assert!(pout.status.success(), "{shape}: {}", text(&pout.stderr));
    }
}

/// `bench cipher` checks every cipher against its test vectors, then measures them all and
/// tether's seal path against the raw primitive.
#[test]
fn cipher_bench_runs_and_prints_json() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.args([
        "bench",
        "cipher",
        "--sizes",
        "1024,8192",
        "--millis",
        "5",
        "--json",
    ]);
    let out = finish(spawn(c), Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 8 * 2);
    let names: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["cipher"].as_str().unwrap()).collect();
    for n in [
        "aes128-gcm",
        "aes256-gcm",
        "chacha20-poly1305",
        "chacha20",
        "chacha12",
        "lea-128",
        "lea-192",
        "lea-256",
    ] {
        assert!(names.contains(n), "{n} missing");
    }
    for r in rows {
        assert!(r["encrypt_kb_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["decrypt_kb_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    let paths = v["seal_path_8k"].as_array().unwrap();
    assert_eq!(paths.len(), 3);
    for p in paths {
        assert!(p["ratio"].as_f64().unwrap() > 0.0, "{p}");
    }
}

/// `bench fanout` (the 000 paper's experiment) runs every mode with subscribers in their
/// own sessions and keys: every sample reaches every subscriber, `group` seals each sample
/// exactly once whatever the number of subscribers, `pairwise` seals each datagram once per
/// subscriber, `plain` seals nothing. As root it also runs publishers and subscribers on two
/// network namespaces with multicast: one datagram per sample, except in `pairwise`.
#[test]
fn fanout_bench_seals_once_per_sample_in_group_mode() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.args([
        "bench",
        "fanout",
        "--subs",
        "2,5",
        "--publishers",
        "3",
        "--samples",
        "4",
        "--period-ms",
        "20",
        "--reps",
        "1",
        "--json",
    ]);
    // Where this process may hold the CPU latency request (root), with idle CPUs polling.
    let poll = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency")
        .is_ok();
    if poll {
        c.arg("--poll-idle");
    }
    let out = finish(spawn(c), Duration::from_secs(240));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["poll_idle"], poll);
    let runs = v["runs"].as_array().unwrap();
    let root = v["hosts"] != "loopback";
    let fanouts = if root { 2 } else { 1 };
    assert_eq!(runs.len(), fanouts * 2 * 3);
    for r in runs {
        let n = r["subscribers"].as_u64().unwrap();
        assert_eq!(r["expected"].as_u64().unwrap(), 3 * 4 * n, "{r}");
        assert_eq!(
            r["received"], r["expected"],
            "a subscriber missed samples: {r}"
        );
        let seals = r["seals_per_sample"].as_f64().unwrap();
        let dseals = r["datagram_seals_per_sample"].as_f64().unwrap();
        let mode = r["mode"].as_str().unwrap();
        match mode {
            "plain" => assert_eq!((seals, dseals), (0.0, 0.0), "{r}"),
            "group" => assert_eq!((seals, dseals), (1.0, 0.0), "{r}"),
            "pairwise" => {
                assert_eq!(seals, 1.0, "{r}");
                assert!(dseals >= n as f64, "pairwise seals per destination: {r}");
            }
            m => panic!("unknown mode {m}"),
        }
        let mc = r["multicast_per_sample"].as_f64().unwrap();
        match (r["fanout"].as_str().unwrap(), mode) {
            ("unicast", _) | ("multicast", "pairwise") => assert_eq!(mc, 0.0, "{r}"),
            ("multicast", _) => assert_eq!(mc, 1.0, "one datagram per sample: {r}"),
            (f, _) => panic!("unknown fanout {f}"),
        }
        assert!(r["mean_us"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["put_cpu_us_per_sample"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["put_cpu_p50_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(v["summary"].as_array().unwrap().len(), fanouts * 2 * 3);
    // Each mode's publisher CPU at 5 subscribers against 2, paired by repetition.
    let scaling = v["publisher_cpu_scaling"].as_array().unwrap();
    assert_eq!(scaling.len(), fanouts * 3, "{scaling:?}");
    for s in scaling {
        assert_eq!(
            (s["subscribers"].as_u64(), s["against"].as_u64()),
            (Some(5), Some(2))
        );
        for k in ["put_cpu_ratio", "put_cpu_p50_ratio", "process_cpu_ratio"] {
            assert!(s[k].as_f64().is_some_and(|r| r > 0.0), "{k}: {s}");
        }
    }
}

/// `pub` exits 1, naming the reader and the count, when reliable samples were never
/// acknowledged by a reader matched when they were written, even though that reader has
/// left by the end (it used to exit 0: only readers still matched counted), and with `-q`
/// too. A reader that received everything and left cleanly is no failure.
#[test]
fn pub_fails_when_a_reader_never_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("short-lease.toml");
    std::fs::write(
        &cfg,
        "[discovery]\nlease_ms = 1500\nannounce_period_ms = 300\n",
    )
    .unwrap();
    let reg = dir.path().join("reg");
    let mut e = tether(&reg);
    e.arg("--config")
        .arg(&cfg)
        .args(["echo", "/owed", "--timeout", "30"]);
    let mut echo = spawn(e);
    let mut p = tether(&reg);
    p.args([
        "pub",
        "/owed",
        "x",
        "--count",
        "40",
        "--rate",
        "20",
        "--wait-matched",
        "1",
        "--linger",
        "5",
        "-q",
    ]);
    let publisher = spawn(p);
    std::thread::sleep(Duration::from_millis(800));
    echo.kill().unwrap();
    let _ = echo.wait();
    let out = finish(publisher, Duration::from_secs(30));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: reader") && err.contains("of 40 samples"),
        "{err}"
    );

    // The same exchange with a reader that stays to the end: success.
    let mut e = tether(&reg);
    e.args(["echo", "/owed2", "--count", "10", "--timeout", "30"]);
    let echo = spawn(e);
    let mut p = tether(&reg);
    p.args([
        "pub",
        "/owed2",
        "x",
        "--count",
        "10",
        "--rate",
        "50",
        "--wait-matched",
        "1",
        "-q",
    ]);
    let out = finish(spawn(p), Duration::from_secs(30));
    let echoed = finish(echo, Duration::from_secs(30));
    assert!(echoed.status.success(), "{}", text(&echoed.stderr));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// What cannot work is said before it is run: a session that can meet nobody (discovery
/// off, no peer, no router, no port to be named at) warns; counts of 0 are errors. (The
/// new-user review: `pub --discovery off --once` said only "start one first (tether echo
/// …)"; `pub -n 0` exited 0 having done nothing; `echo --count 0` waited for its timeout.)
#[test]
fn what_cannot_work_is_said_first() {
    let run = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
        for v in [
            "TETHER_DOMAIN",
            "TETHER_PEERS",
            "TETHER_CONFIG",
            "TETHER_DISCOVERY",
        ] {
            c.env_remove(v);
        }
        c.args(args);
        finish(spawn(c), Duration::from_secs(30))
    };
    let o = run(&[
        "pub",
        "/alone",
        "hi",
        "--discovery",
        "off",
        "--once",
        "--linger",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("this session can meet nobody"),
        "{}",
        text(&o.stderr)
    );
    for ok in [
        &["--peer", "127.0.0.1:9"][..],
        &["--listen", "127.0.0.1:17999"],
    ] {
        let mut args = vec![
            "pub",
            "/alone",
            "hi",
            "--discovery",
            "off",
            "--once",
            "--linger",
            "1",
        ];
        args.extend_from_slice(ok);
        let o = run(&args);
        assert!(
            !text(&o.stderr).contains("meet nobody"),
            "{ok:?}: {}",
            text(&o.stderr)
        );
    }
    for args in [
        &["pub", "/t", "hi", "-n", "0", "--discovery", "off"][..],
        &["echo", "/t", "--count", "0", "--discovery", "off"],
        &["echo", "/t", "--keep-last", "0", "--discovery", "off"],
        &["hz", "/t", "-w", "1", "--discovery", "off"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("is not in"), "{}", text(&o.stderr));
    }
}

/// `hz` and `bw` ended before any publisher came say so, as `echo` does ("no publisher was
/// found"), rather than end in silence after their "waiting" line (the new-user review).
#[test]
fn rate_commands_say_when_no_publisher_came() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["hz", "bw"] {
        let mut c = tether(dir.path());
        c.args([cmd, "/nobody_here", "--duration", "1"]);
        let o = finish(spawn(c), Duration::from_secs(30));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("no publisher of /nobody_here was found, 0 messages"),
            "{cmd}: {}",
            text(&o.stderr)
        );
    }
}

/// `topics` that hears nothing says so on stderr (its stdout stays an empty list).
#[test]
fn topics_says_when_it_heard_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = tether(dir.path());
    c.args(["topics", "-v", "--wait", "0.5"]);
    let o = finish(spawn(c), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    assert!(
        text(&o.stderr).contains("no topics seen in 0.5 s"),
        "{}",
        text(&o.stderr)
    );
}
