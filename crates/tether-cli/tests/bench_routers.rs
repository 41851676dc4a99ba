//! `tether bench rib` and `tether bench wan` (issue 19) run with tiny parameters and print
//! JSON with every row they promise. No timing is asserted: these only show the benches
//! work (routers start, sessions meet through them, samples come back intact).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{children_of, finish, is_running, spawn, text, wait_until};

fn bench(args: &[&str]) -> serde_json::Value {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.env_remove("TETHER_CONFIG")
        .env_remove("TETHER_KEYS")
        .arg("bench")
        .args(args)
        .arg("--json");
    let out = finish(spawn(c), Duration::from_secs(180));
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn rib_bench_times_the_table_and_a_start_through_a_router() {
    let v = bench(&[
        "rib",
        "--routes",
        "1000,5000",
        "--ops",
        "50",
        "--batches",
        "3",
        "--starts",
        "2",
    ]);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    for r in rows {
        assert!(r["advertise_us"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["subscribe_us"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["heap_bytes_per_route"].as_f64().unwrap() > 0.0, "{r}");
    }
    let s = &v["start_to_first_message"];
    assert_eq!(s["sessions"], 2, "{v}");
    assert!(s["first_message_p50_ms"].as_f64().unwrap() > 0.0, "{v}");
    // And as a user runs it: `tether echo` processes, each of which printed a sample.
    assert_eq!(s["processes"], 2, "{v}");
    assert!(
        s["process_first_message_p50_ms"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert_eq!(v["paper"]["start_to_first_message_ms"], 2.4);
}

#[test]
fn wan_bench_measures_direct_one_and_two_routers() {
    let v = bench(&[
        "wan",
        "--sizes",
        "64,8000",
        "--samples",
        "20",
        "--large",
        "300000",
        "--large-reps",
        "1",
        "--duration",
        "0.3",
        "--qos",
        "reliable-batched",
    ]);
    let rtt = v["rtt"].as_array().unwrap();
    assert_eq!(rtt.len(), 6, "two sizes × three paths: {v}");
    let paths: Vec<&str> = rtt.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths[..3], ["direct", "1 router", "2 routers"]);
    for r in rtt {
        assert!(r["rtt_p50_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    let large = v["large"].as_array().unwrap();
    assert_eq!(large.len(), 3, "{v}");
    for l in large {
        assert_eq!(l["intact"], true, "{l}");
        assert_eq!(l["rtt_ms"].as_array().unwrap().len(), 1, "{l}");
    }
    let thr = v["throughput"].as_array().unwrap();
    assert_eq!(thr.len(), 1, "{v}");
    assert!(thr[0]["direct_received_per_s"].as_f64().unwrap() > 0.0);
    assert!(thr[0]["router_received_per_s"].as_f64().unwrap() > 0.0);
    // The QUIC link alone, beside the router path: a rate, and the ratio to it.
    let link = thr[0]["quic_link_alone_per_s"].as_f64().unwrap();
    assert!(link > 0.0 && link.is_finite(), "{v}");
    let ratio = thr[0]["router_over_quic_link_alone"].as_f64().unwrap();
    assert!(ratio > 0.0 && ratio.is_finite(), "{v}");
    assert_eq!(v["paper"]["throughput_1000_per_s"]["SGC"], 320.0);
}

/// `--delay-ms`: the RTT over a delayed link between two namespaces, direct and through a
/// router on the far host; both take at least the link's round trip; and new sessions'
/// start to first message through the router across it. Needs root and iptables (says why
/// and skips otherwise).
#[test]
fn wan_bench_measures_a_delayed_link_direct_and_through_a_router() {
    if unsafe { libc::geteuid() } != 0 {
        tether_testkit::skip!("skipping: --delay-ms makes network namespaces, which needs root");
        return;
    }
    if Command::new("iptables").arg("--version").output().is_err() {
        tether_testkit::skip!("skipping: --delay-ms needs iptables (NFQUEUE)");
        return;
    }
    let v = bench(&[
        "wan",
        "--sizes",
        "64",
        "--samples",
        "10",
        "--large",
        "0",
        "--duration",
        "0",
        "--delay-ms",
        "5",
        "--delay-samples",
        "10",
    ]);
    let d = v["delayed_link"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{v}");
    for key in ["direct_rtt_p50_us", "router_rtt_p50_us"] {
        let us = d[0][key].as_f64().unwrap();
        assert!(
            us >= 10_000.0,
            "{key}: {us} µs, less than the link's 10 ms round trip"
        );
    }
    assert_eq!(d[0]["delay_ms_each_way"], 5.0);
    assert!(
        v["rtt"][2]["added_one_way_by_second_router_p50_us"].is_number(),
        "{v}"
    );
    // New sessions across the link: their router link's handshake takes its round trip
    // at least, and the first sample comes after.
    let s = &v["delayed_link_start_to_first_ms"];
    let (link, first) = (
        s["link_up_p50"].as_f64().unwrap(),
        s["first_p50"].as_f64().unwrap(),
    );
    assert!(link >= 10.0, "link up at {link} ms: {v}");
    assert!(first >= link, "{v}");
    assert_eq!(s["starts"], 10, "{v}");
}

/// `--delay-ms 0`: the same two hosts with no delay added (no NFQUEUE: iptables is not
/// needed), direct and through the router on the far host, and what the router adds one
/// way reported per size. Needs root (says why and skips otherwise).
#[test]
fn wan_bench_measures_two_hosts_without_delay() {
    if unsafe { libc::geteuid() } != 0 {
        tether_testkit::skip!("skipping: --delay-ms makes network namespaces, which needs root");
        return;
    }
    let v = bench(&[
        "wan",
        "--sizes",
        "64",
        "--samples",
        "10",
        "--large",
        "0",
        "--duration",
        "0",
        "--delay-ms",
        "0",
        "--delay-samples",
        "50",
    ]);
    let d = v["delayed_link"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{v}");
    assert_eq!(d[0]["delay_ms_each_way"], 0.0);
    let (direct, routed) = (
        d[0]["direct_rtt_p50_us"].as_f64().unwrap(),
        d[0]["router_rtt_p50_us"].as_f64().unwrap(),
    );
    // No speed is asserted: only that both paths were measured.
    assert!(direct > 0.0 && routed > 0.0, "{v}");
    let added = d[0]["added_one_way_by_the_router_p50_us"].as_f64().unwrap();
    assert!((added - (routed - direct) / 2.0).abs() < 1e-6, "{v}");
}

/// A bench killed (SIGKILL: no handler runs) takes its router and peer processes with it:
/// the kernel kills them (before, a bench killed by SIGPIPE left its router running).
#[test]
fn a_killed_bench_leaves_no_process_behind() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.env_remove("TETHER_CONFIG")
        .env_remove("TETHER_KEYS")
        .args([
            "bench",
            "rib",
            "--routes",
            "1000",
            "--ops",
            "50",
            "--batches",
            "3",
        ])
        .args(["--starts", "200", "--json"]);
    let mut bench = spawn(c);
    let pid = bench.id();
    // Its router comes first, then the start loop's processes.
    let cmdline = |k: u32| std::fs::read(format!("/proc/{k}/cmdline")).unwrap_or_default();
    let mut kids = Vec::new();
    assert!(
        wait_until(Duration::from_secs(60), || {
            kids = children_of(pid);
            kids.iter()
                .any(|&k| cmdline(k).split(|&b| b == 0).any(|a| a == b"router"))
        }),
        "the bench started no router"
    );
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    let _ = bench.wait();
    let gone = wait_until(Duration::from_secs(5), || {
        kids.iter().all(|&k| !is_running(k))
    });
    let left: Vec<u32> = kids.iter().copied().filter(|&k| is_running(k)).collect();
    for k in &left {
        let _ = Command::new("kill")
            .args(["-KILL", &k.to_string()])
            .status();
    }
    assert!(gone, "processes {left:?} outlived the killed bench");
}
