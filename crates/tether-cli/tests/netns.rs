//! Two hosts on a LAN: network namespaces joined by a veth pair, which this test creates
//! (and deletes). Discovery is by UDP multicast on the veth interface only (the registry is
//! off), data crosses the veth by unicast, and an nftables rule drops 20 % of one side's
//! packets for the reliability test. Needs root, `ip` and `nft`; without them each test says
//! why it skips and passes.

mod common;
use common::{finish, text};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Lan {
    a: String,
    b: String,
    dir: tempfile::TempDir,
}

impl Drop for Lan {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Creates the two-host LAN, or says why it cannot.
fn lan(tag: &str) -> Result<Lan, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        return Err("not root".into());
    }
    let id = format!("{}{}", tag, std::process::id() % 100_000);
    let lan = Lan {
        a: format!("tta{id}"),
        b: format!("ttb{id}"),
        dir: tempfile::tempdir().map_err(|e| e.to_string())?,
    };
    sh(&["ip", "netns", "add", &lan.a])?;
    sh(&["ip", "netns", "add", &lan.b])?;
    sh(&[
        "ip", "link", "add", "vta", "netns", &lan.a, "type", "veth", "peer", "name", "vtb",
        "netns", &lan.b,
    ])?;
    for (ns, dev, ip) in [
        (&lan.a, "vta", "10.199.7.1/24"),
        (&lan.b, "vtb", "10.199.7.2/24"),
    ] {
        sh(&["ip", "-n", ns, "addr", "add", ip, "dev", dev])?;
        sh(&["ip", "-n", ns, "link", "set", dev, "up", "multicast", "on"])?;
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        sh(&["ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", dev])?;
        let cfg = format!(
            "[discovery]\nregistry = false\nmulticast = true\ninterface = \"{dev}\"\nannounce_period_ms = 200\n"
        );
        std::fs::write(lan.dir.path().join(format!("{dev}.toml")), cfg)
            .map_err(|e| e.to_string())?;
    }
    Ok(lan)
}

/// A LAN whose `b` side drops 20 % of what it sends (counted, for the test to check), or
/// `None` after saying why the test skips (not root, no `ip`, no `nft`).
fn lossy_lan(tag: &str, test: &str) -> Option<Lan> {
    let lan = match lan(tag) {
        Ok(l) => l,
        Err(why) => {
            eprintln!("skipping {test}: {why}");
            return None;
        }
    };
    if Command::new("nft").arg("--version").output().is_err() {
        eprintln!("skipping {test}: nft is not installed");
        return None;
    }
    let rules = "table inet loss {\n  chain out {\n    type filter hook output priority 0;\n    oifname \"vtb\" numgen random mod 100 < 20 counter drop\n  }\n}\n";
    nft(&lan.b, rules).expect("installing the loss rule");
    Some(lan)
}

fn nft(ns: &str, rules: &str) -> Result<(), String> {
    use std::io::Write;
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    c.stdin
        .take()
        .ok_or("nft stdin")?
        .write_all(rules.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = c.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

impl Lan {
    fn cfg(&self, dev: &str) -> PathBuf {
        self.dir.path().join(format!("{dev}.toml"))
    }

    fn tether(&self, ns: &str, cfg: &Path, args: &[&str]) -> Child {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                env!("CARGO_BIN_EXE_tether"),
                "--config",
            ])
            .arg(cfg)
            .args(args)
            .env_remove("TETHER_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tether in namespace")
    }
}

/// Two hosts find each other by multicast on the configured interface and exchange
/// samples; a third session in another domain on the same LAN receives nothing.
#[test]
fn lan_discovery_by_multicast() {
    let lan = match lan("m") {
        Ok(l) => l,
        Err(why) => {
            eprintln!("skipping lan_discovery_by_multicast: {why}");
            return;
        }
    };
    let (ca, cb) = (lan.cfg("vta"), lan.cfg("vtb"));
    let echo = lan.tether(
        &lan.a,
        &ca,
        &["echo", "/lan", "--count", "3", "--timeout", "30"],
    );
    let other = lan.tether(
        &lan.a,
        &ca,
        &[
            "--domain",
            "3",
            "echo",
            "/lan",
            "--count",
            "1",
            "--timeout",
            "5",
        ],
    );
    let publisher = lan.tether(
        &lan.b,
        &cb,
        &[
            "pub",
            "/lan",
            "over the LAN",
            "--count",
            "3",
            "--rate",
            "10",
            "--wait-matched",
            "1",
        ],
    );
    let out = finish(echo, Duration::from_secs(40));
    assert!(out.status.success(), "echo: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        vec!["over the LAN"; 3]
    );
    let pout = finish(publisher, Duration::from_secs(40));
    assert!(pout.status.success(), "pub: {}", text(&pout.stderr));
    let oout = finish(other, Duration::from_secs(40));
    assert_eq!(
        oout.status.code(),
        Some(1),
        "another domain must receive nothing"
    );
}

/// Reliable keep-all across a real link that drops 20 % of one direction's packets: every
/// sample arrives, once, in order.
#[test]
fn lan_reliable_under_real_loss() {
    let Some(lan) = lossy_lan("l", "lan_reliable_under_real_loss") else {
        return;
    };
    let (ca, cb) = (lan.cfg("vta"), lan.cfg("vtb"));
    let n = 300;
    let echo = lan.tether(
        &lan.a,
        &ca,
        &[
            "echo",
            "/bulk",
            "--keep-all",
            "--count",
            &n.to_string(),
            "--timeout",
            "60",
        ],
    );
    let publisher = lan.tether(
        &lan.b,
        &cb,
        &[
            "pub",
            "/bulk",
            "x",
            "--numbered",
            "--keep-all",
            "--count",
            &n.to_string(),
            "--rate",
            "0",
            "--wait-matched",
            "1",
            "--linger",
            "60",
            "-q",
        ],
    );
    let out = finish(echo, Duration::from_secs(90));
    assert!(out.status.success(), "echo: {}", text(&out.stderr));
    // Each payload carries its number: complete, once, in order.
    let want: Vec<String> = (1..=n).map(|i| format!("{i} x")).collect();
    assert_eq!(text(&out.stdout).lines().collect::<Vec<_>>(), want);
    let pout = finish(publisher, Duration::from_secs(90));
    assert!(pout.status.success(), "pub: {}", text(&pout.stderr));
    // The link really lost packets.
    let list = Command::new("ip")
        .args([
            "netns", "exec", &lan.b, "nft", "list", "table", "inet", "loss",
        ])
        .output()
        .unwrap();
    let listing = text(&list.stdout);
    let dropped: u64 = listing
        .split("counter packets ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        dropped >= 20,
        "the loss rule dropped only {dropped} packets: {listing}"
    );
    eprintln!("loss rule dropped {dropped} packets; all {n} samples arrived in order");
}

/// A 16 MiB reliable sample (258 fragments) across a link that drops 20 % of the sender's
/// packets: repaired fragment by fragment, it arrives.
#[test]
fn lan_large_sample_under_real_loss() {
    let Some(lan) = lossy_lan("g", "lan_large_sample_under_real_loss") else {
        return;
    };
    let (ca, cb) = (lan.cfg("vta"), lan.cfg("vtb"));
    let echo = lan.tether(
        &lan.a,
        &ca,
        &[
            "echo",
            "/map",
            "--keep-all",
            "--count",
            "1",
            "--timeout",
            "60",
            "--no-print",
            "--stats",
        ],
    );
    let publisher = lan.tether(
        &lan.b,
        &cb,
        &[
            "pub",
            "/map",
            "m",
            "--size",
            "16777216",
            "--keep-all",
            "--count",
            "1",
            "--wait-matched",
            "1",
            "--linger",
            "60",
            "-q",
        ],
    );
    let out = finish(echo, Duration::from_secs(90));
    let err = text(&out.stderr);
    assert!(out.status.success(), "echo: {err}");
    assert!(err.contains("received 1 samples"), "{err}");
    let pout = finish(publisher, Duration::from_secs(90));
    assert!(pout.status.success(), "pub: {}", text(&pout.stderr));
    let repaired: u64 = err
        .lines()
        .find_map(|l| l.trim().strip_prefix("nackfrags_sent: "))
        .and_then(|v| v.trim_end_matches(',').parse().ok())
        .unwrap_or(0);
    assert!(
        repaired > 0,
        "no fragment was repaired despite the loss rule: {err}"
    );
}

/// Data by multicast across the LAN: three subscribers on host `a` take data on the
/// discovery group (`transport.multicast_data`), so the publisher on `b` sends each sample
/// once to the group instead of three times by unicast. nftables counters on `b`'s link
/// tell the two apart.
#[test]
fn lan_data_by_multicast() {
    let lan = match lan("d") {
        Ok(l) => l,
        Err(why) => {
            eprintln!("skipping lan_data_by_multicast: {why}");
            return;
        }
    };
    if Command::new("nft").arg("--version").output().is_err() {
        eprintln!("skipping lan_data_by_multicast: nft is not installed");
        return;
    }
    let rules = "table inet count {\n  chain out {\n    type filter hook output priority 0;\n    oifname \"vtb\" ip daddr 239.255.0.1 udp length > 600 counter\n    oifname \"vtb\" ip daddr 10.199.7.1 udp length > 600 counter\n  }\n}\n";
    nft(&lan.b, rules).expect("installing the counters");
    let mc = |dev: &str| {
        let p = lan.dir.path().join(format!("{dev}-mc.toml"));
        let base = std::fs::read_to_string(lan.cfg(dev)).unwrap();
        std::fs::write(&p, format!("{base}\n[transport]\nmulticast_data = true\n")).unwrap();
        p
    };
    let (ca, cb) = (mc("vta"), mc("vtb"));
    let n = 40;
    let echoes: Vec<Child> = (0..3)
        .map(|_| {
            lan.tether(
                &lan.a,
                &ca,
                &[
                    "echo",
                    "/mc",
                    "--keep-all",
                    "--count",
                    &n.to_string(),
                    "--timeout",
                    "60",
                ],
            )
        })
        .collect();
    let publisher = lan.tether(
        &lan.b,
        &cb,
        &[
            "pub",
            "/mc",
            "m",
            "--numbered",
            "--keep-all",
            "--size",
            "1000",
            "--count",
            &n.to_string(),
            "--rate",
            "50",
            "--wait-matched",
            "3",
            "--linger",
            "30",
            "-q",
        ],
    );
    for e in echoes {
        let out = finish(e, Duration::from_secs(90));
        assert!(out.status.success(), "echo: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout).lines().count(), n);
    }
    let pout = finish(publisher, Duration::from_secs(90));
    assert!(pout.status.success(), "pub: {}", text(&pout.stderr));
    let list = Command::new("ip")
        .args([
            "netns", "exec", &lan.b, "nft", "list", "table", "inet", "count",
        ])
        .output()
        .unwrap();
    let listing = text(&list.stdout);
    let counts: Vec<u64> = listing
        .split("counter packets ")
        .skip(1)
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect();
    let [multicast, unicast] = counts[..] else {
        panic!("two counters expected: {listing}");
    };
    assert!(
        multicast >= n as u64 && multicast < 2 * n as u64,
        "{multicast} data datagrams to the group for {n} samples: {listing}"
    );
    assert!(
        unicast < n as u64,
        "{unicast} data datagrams by unicast (3 × {n} without multicast): {listing}"
    );
    eprintln!("{n} samples for 3 subscribers: {multicast} to the group, {unicast} by unicast");
}
