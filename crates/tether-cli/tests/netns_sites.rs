//! Issue 19's tests across NATs, in network namespaces: two robot sites, each behind a NAT
//! (nftables masquerade, only replies let in), and a cloud at 198.18.0.100
//! (`tether_testkit::netns::sites`). The sites cannot reach each other; every session dials
//! out to a router (`--discovery off --router quic/…`), as a robot behind NAT does. Data
//! flows both ways through a cloud router; a site router's export list lets only its topics
//! leave; a reliable keep-all stream survives the cloud router killed and restarted, with
//! loss on both uplinks; a 13 MB sample crosses two routers with loss on every link; a
//! site's address changes under a running stream; a revoked member
//! and a router of another realm are refused. The same on loopback, without NATs, is in `router.rs`.
//!
//! Needs root, `ip` and `nft`; without them each test says why it skips and passes. Each
//! test runs within 60 s (every wait is bounded by what is left of that), ends its
//! processes before its namespaces go (locals drop in reverse order), and the tests of
//! this file take turns: each makes five namespaces and runs a few processes on shared
//! CPUs.
#![cfg(target_os = "linux")]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::realm::Realm;
use common::{Live, finish, spawn, text, wait_until};
use tether_testkit::netns::sites::{CLOUD_ADDR, Direction, Link, Site, Sites};
use tether_testkit::netns::{self, Host, Namespace};

/// The cloud router's QUIC port.
const CLOUD_PORT: u16 = 7447;
/// A site router's QUIC port.
const SITE_PORT: u16 = 7448;
/// A router's metrics port (each router has its own namespace).
const METRICS_PORT: u16 = 9464;
/// What each test may take.
const BUDGET: Duration = Duration::from_secs(60);

/// One test at a time (see the module's docs).
static TURN: Mutex<()> = Mutex::new(());

/// Whether the tests can run here; says why not.
fn ready(test: &str) -> bool {
    if !netns::is_root() {
        eprintln!("skipping {test}: creating network namespaces needs root");
        return false;
    }
    if !netns::have_nft() {
        eprintln!("skipping {test}: nft (nftables) is not installed; the NATs need it");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("skipping {test}: ip (iproute2) is not installed");
        return false;
    }
    true
}

/// The sites, or `None` after saying why the test skips.
fn sites(test: &str, make: impl FnOnce() -> Result<Sites, netns::NetnsError>) -> Option<Sites> {
    match make() {
        Ok(s) => Some(s),
        Err(why) => {
            eprintln!("skipping {test}: cannot create the sites: {why}");
            None
        }
    }
}

/// What is left of a test's 60 s.
struct Clock(Instant);

impl Clock {
    fn start() -> Clock {
        Clock(Instant::now())
    }

    /// What is left, at least a second (a wait that overruns then fails the test).
    fn left(&self) -> Duration {
        BUDGET
            .saturating_sub(self.0.elapsed())
            .max(Duration::from_secs(1))
    }

    /// `d`, or what is left if less.
    fn up_to(&self, d: Duration) -> Duration {
        d.min(self.left())
    }
}

/// The routers and members of a test realm (`common::realm`) in the sites' namespaces.
trait InSites {
    /// Router `name` in namespace `ns` with router.toml `body` (its metrics on `metrics`).
    fn router(&self, ns: &Namespace, name: &str, metrics: SocketAddr, body: &str) -> Live;
    /// The cloud router, in the cloud, with `extra` lines of router.toml.
    fn cloud_router(&self, sites: &Sites, extra: &str) -> Live;
    /// `tether ARGS…` as member `who` on `host`, meeting others only through the router at
    /// `router` (`HOST:PORT`); each host has its own registry directory.
    fn member(&self, host: &Host, who: &str, router: &str, args: &[&str]) -> Command;
    /// [`InSites::member`] dialling the cloud router.
    fn via_cloud(&self, host: &Host, who: &str, args: &[&str]) -> Command;
}

impl InSites for Realm {
    fn router(&self, ns: &Namespace, name: &str, metrics: SocketAddr, body: &str) -> Live {
        self.start_router(
            ns.command(env!("CARGO_BIN_EXE_tether")),
            &format!("{name}.toml"),
            name,
            &format!("metrics = \"{metrics}\"\n{body}"),
        )
    }

    fn cloud_router(&self, sites: &Sites, extra: &str) -> Live {
        self.router(
            sites.cloud(),
            "cloud",
            cloud_metrics(),
            &format!("listen = \"{CLOUD_ADDR}:{CLOUD_PORT}\"\n{extra}"),
        )
    }

    fn member(&self, host: &Host, who: &str, router: &str, args: &[&str]) -> Command {
        let mut c = self.member_command(
            host.command(env!("CARGO_BIN_EXE_tether")),
            &format!("registry-{}", host.name()),
            who,
            router,
        );
        c.args(args);
        c
    }

    fn via_cloud(&self, host: &Host, who: &str, args: &[&str]) -> Command {
        self.member(host, who, &cloud(), args)
    }
}

/// The cloud router's address, as sessions dial it.
fn cloud() -> String {
    format!("{CLOUD_ADDR}:{CLOUD_PORT}")
}

fn cloud_metrics() -> SocketAddr {
    SocketAddr::from((CLOUD_ADDR, METRICS_PORT))
}

/// The metrics page at `addr` in namespace `ns` (read by a thread that enters it; empty
/// if nothing answers).
fn metrics(ns: &Namespace, addr: SocketAddr) -> String {
    use std::io::{Read, Write};
    std::thread::scope(|s| {
        s.spawn(|| {
            if ns.enter().is_err() {
                return String::new();
            }
            let Ok(mut c) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            else {
                return String::new();
            };
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut s = String::new();
            let _ = c.read_to_string(&mut s);
            s
        })
        .join()
        .unwrap_or_default()
    })
}

/// A metric's value (the first sample whose line starts with `prefix`; -1 if none).
fn metric(page: &str, prefix: &str) -> f64 {
    page.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

/// Router `name`'s links of `role` (`session`, `router`) on its page.
fn links(page: &str, name: &str, role: &str) -> f64 {
    metric(
        page,
        &format!("tether_router_links{{router=\"{name}\",role=\"{role}\"}}"),
    )
}

/// Waits (up to `limit`) until the cloud router has `n` links of `role`.
fn wait_cloud_links(sites: &Sites, role: &str, n: f64, limit: Duration) -> bool {
    wait_until(limit, || {
        links(&metrics(sites.cloud(), cloud_metrics()), "cloud", role) == n
    })
}

/// Sites named `prefix` with 1 % of the frames lost on each of `lossy` (link, direction),
/// or `None` after saying why the test skips.
fn lossy_sites(test: &str, prefix: &str, lossy: &[(Link, Direction)]) -> Option<Sites> {
    let mut builder = Sites::builder(prefix);
    for &(link, dir) in lossy {
        builder = builder.loss(link, dir, 1);
    }
    sites(test, || builder.create())
}

/// Both directions of `links`, for [`lossy_sites`].
fn both_ways(links: impl IntoIterator<Item = Link>) -> Vec<(Link, Direction)> {
    links
        .into_iter()
        .flat_map(|l| [Direction::Up, Direction::Down].map(|d| (l, d)))
        .collect()
}

/// The frames the loss rules of `lossy` dropped: each, in words, and all.
fn dropped(sites: &Sites, lossy: &[(Link, Direction)]) -> (String, u64) {
    let each: Vec<(String, u64)> = lossy
        .iter()
        .map(|&(l, d)| (format!("{l:?} {d:?}"), sites.dropped(l, d).unwrap_or(0)))
        .collect();
    let words: Vec<String> = each.iter().map(|(w, n)| format!("{w}: {n}")).collect();
    (words.join(", "), each.iter().map(|(_, n)| n).sum())
}

/// Sequence numbers echoed with --meta, in order of arrival.
fn seqs(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("[seq "))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect()
}

/// The router link counters of a `--stats` report, on one line.
fn router_counters(stats: &str) -> String {
    stats
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("router"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The longest time without a new line from `p`, watched every 10 ms from now until it
/// has `lines` lines or `limit` passes (at 20 samples/s, 50 ms when nothing pauses).
fn longest_pause(p: &Live, lines: usize, limit: Duration) -> Duration {
    let end = Instant::now() + limit;
    let mut last = (Instant::now(), p.lines());
    let mut pause = Duration::ZERO;
    while Instant::now() < end && last.1 < lines {
        std::thread::sleep(Duration::from_millis(10));
        let now = (Instant::now(), p.lines());
        if now.1 > last.1 {
            pause = pause.max(now.0 - last.0);
            last = now;
        }
    }
    if last.1 < lines {
        // Still waiting when the watch ended: that wait is a pause too.
        pause = pause.max(last.0.elapsed());
    }
    pause
}

/// How a process ended: its exit code (`None`: by a signal), stdout and stderr.
struct Done {
    code: Option<i32>,
    out: String,
    err: String,
}

impl Done {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Waits for `p` within what is left of the test (killed and failing the test if it
/// overruns); a process never outlives its test, whatever fails first (`Live` kills it
/// when dropped).
fn done(mut p: Live, clock: &Clock) -> Done {
    let code = p.wait(clock.left());
    let out = p
        .out
        .lock()
        .unwrap()
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    Done {
        code,
        out,
        err: p.stderr(),
    }
}

/// Sites A and B, both behind their NATs, meet through the cloud router only: A publishes
/// /a2b to B and B publishes /b2a to A, reliable, every sample delivered; the router saw
/// each site as its NAT's public address.
#[test]
fn two_sites_behind_nat_meet_through_a_cloud_router() {
    const TEST: &str = "two_sites_behind_nat_meet_through_a_cloud_router";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let Some(sites) = sites(TEST, || Sites::builder("tnm").create()) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    let router = realm.cloud_router(&sites, "");
    let (a, b) = (sites.site(Site::A), sites.site(Site::B));
    let n = 20;
    let count = n.to_string();
    let n_s = count.as_str();
    let echo_args = |topic| {
        [
            "echo",
            topic,
            "--count",
            n_s,
            "--reliable",
            "--timeout",
            "40",
        ]
    };
    let at_b = Live::spawn(realm.via_cloud(b, "b", &echo_args("/a2b")));
    let at_a = Live::spawn(realm.via_cloud(a, "a", &echo_args("/b2a")));
    assert!(
        wait_cloud_links(&sites, "session", 2.0, clock.up_to(Duration::from_secs(20))),
        "the echoes never linked: {}",
        router.stderr()
    );
    let pub_args = |topic, what| ["pub", topic, what, "-n", n_s, "-r", "20", "--linger", "20"];
    let from_a = Live::spawn(realm.via_cloud(a, "a", &pub_args("/a2b", "from site A")));
    let from_b = Live::spawn(realm.via_cloud(b, "b", &pub_args("/b2a", "from site B")));
    for (who, p) in [("pub at A", from_a), ("pub at B", from_b)] {
        let p = done(p, &clock);
        assert!(p.ok(), "{who}: {}", p.err);
    }
    for (who, e, want) in [
        ("echo at B", at_b, "from site A\n"),
        ("echo at A", at_a, "from site B\n"),
    ] {
        let e = done(e, &clock);
        assert!(e.ok(), "{who}: {}\nrouter: {}", e.err, router.stderr());
        assert_eq!(e.out, want.repeat(n), "{who}");
    }
    let page = metrics(sites.cloud(), cloud_metrics());
    assert!(
        metric(&page, "tether_router_samples_forwarded_total") >= 2.0 * n as f64,
        "{page}"
    );
    // The cloud saw the NATs, never a site's own address.
    let log = router.stderr();
    for site in Site::ALL {
        assert!(
            log.contains(&format!("at {}:", site.public_addr())),
            "{log}"
        );
        assert!(!log.contains(&site.first_addr().to_string()), "{log}");
    }
    eprintln!("{TEST}: done in {:?}", clock.0.elapsed());
}

/// Site A's router, in site A's namespace, lets only /telemetry leave (its export list);
/// it dials the cloud router through NAT A. Site A publishes /telemetry and /private; site
/// B's members (on the cloud router) get /telemetry and nothing of /private, and the site
/// router counts what it held back.
#[test]
fn only_exported_topics_cross() {
    const TEST: &str = "only_exported_topics_cross";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let Some(sites) = sites(TEST, || Sites::builder("tnx").create()) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    let telemetry = realm.keys(&["topic-id", "realm", "/telemetry"]);
    let (a, b) = (sites.site(Site::A), sites.site(Site::B));
    let cloud_router = realm.cloud_router(&sites, "");
    let site_metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, METRICS_PORT));
    let site_addr = format!("{}:{SITE_PORT}", a.addr());
    let site_router = realm.router(
        a.ns(),
        "site",
        site_metrics,
        &format!(
            "listen = \"{site_addr}\"\nconnect = [\"quic/{}\"]\n\
             [[export]]\nkey = \"{}\"\ndirection = \"out\"",
            cloud(),
            telemetry.trim()
        ),
    );
    assert!(
        wait_cloud_links(&sites, "router", 1.0, clock.up_to(Duration::from_secs(20))),
        "the site router never linked to the cloud across NAT A\nsite: {}\ncloud: {}",
        site_router.stderr(),
        cloud_router.stderr()
    );
    let telemetry_echo = Live::spawn(realm.via_cloud(
        b,
        "b",
        &[
            "echo",
            "/telemetry",
            "--count",
            "5",
            "--reliable",
            "--timeout",
            "30",
        ],
    ));
    // Two readers of /private at site B: a volatile one and a transient-local one (which
    // asks for what the writer holds).
    let private_echoes = [&[][..], &["--transient-local"][..]].map(|extra| {
        let mut args = vec![
            "echo",
            "/private",
            "--count",
            "1",
            "--reliable",
            "--timeout",
            "12",
        ];
        args.extend_from_slice(extra);
        Live::spawn(realm.via_cloud(b, "b", &args))
    });
    assert!(
        wait_cloud_links(&sites, "session", 3.0, clock.up_to(Duration::from_secs(20))),
        "{}",
        cloud_router.stderr()
    );
    // /private goes out at once, matched or not, for longer than /telemetry takes to cross,
    // from a volatile writer and a transient-local one (both reliable, keep-last: neither
    // waits for readers): had anything of it crossed, an echo would print it.
    let private_pubs = [&[][..], &["--transient-local"][..]].map(|extra| {
        let mut args = vec![
            "pub",
            "/private",
            "site secret",
            "-n",
            "40",
            "-r",
            "5",
            "--keep-last",
            "40",
            "--wait-matched",
            "0",
            "--stats",
        ];
        args.extend_from_slice(extra);
        Live::spawn(realm.member(a, "a", &site_addr, &args))
    });
    let telemetry_pub = Live::spawn(realm.member(
        a,
        "a",
        &site_addr,
        &[
            "pub",
            "/telemetry",
            "site data",
            "-n",
            "5",
            "-r",
            "10",
            "--linger",
            "20",
        ],
    ));
    let tp = done(telemetry_pub, &clock);
    assert!(tp.ok(), "pub /telemetry: {}", tp.err);
    let te = done(telemetry_echo, &clock);
    assert!(
        te.ok(),
        "echo /telemetry: {}\nsite: {}",
        te.err,
        site_router.stderr()
    );
    assert_eq!(te.out, "site data\n".repeat(5));
    let page = metrics(a.ns(), site_metrics);
    let denied = metric(
        &page,
        "tether_router_drops_total{router=\"site\",reason=\"export_denied\"}",
    );
    assert!(denied > 0.0, "{page}");
    let [volatile, history] = private_echoes.map(|e| done(e, &clock));
    let pubs = private_pubs.map(|p| done(p, &clock));
    let unicast = |page: &str, name: &str| {
        metric(
            page,
            &format!("tether_router_unicast_forwarded_total{{router=\"{name}\"}}"),
        )
    };
    let why = format!(
        "UNICAST frames forwarded: by the site router {}, by the cloud router {}\n\
         volatile writer: {} (exit {:?})\ntransient-local writer: {} (exit {:?})",
        unicast(&page, "site"),
        unicast(&metrics(sites.cloud(), cloud_metrics()), "cloud"),
        pubs[0]
            .err
            .lines()
            .filter(|l| !l.starts_with(' '))
            .collect::<Vec<_>>()
            .join(" | "),
        pubs[0].code,
        pubs[1]
            .err
            .lines()
            .filter(|l| !l.starts_with(' '))
            .collect::<Vec<_>>()
            .join(" | "),
        pubs[1].code,
    );
    for (reader, e) in [("volatile", &volatile), ("transient-local", &history)] {
        assert!(
            !e.ok() && e.out.is_empty(),
            "/private crossed site A's export list to a {reader} reader at site B: {:?}\n{why}",
            e.out
        );
    }
    eprintln!(
        "{TEST}: export_denied {denied} at the site router; done in {:?}",
        clock.0.elapsed()
    );
}

/// A reliable keep-all stream from site A to site B through the cloud router, with 1 %
/// of the frames lost at each end of both uplinks: the router is killed (SIGKILL) mid-stream
/// and started again 0.7 s later; the sessions dial it again through their NATs and every
/// sample arrives once and in order.
#[test]
fn a_reliable_keep_all_stream_survives_a_cloud_router_restart_across_nat() {
    const TEST: &str = "a_reliable_keep_all_stream_survives_a_cloud_router_restart_across_nat";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let lossy = both_ways(Site::ALL.map(Link::Uplink));
    let Some(sites) = lossy_sites(TEST, "tnr", &lossy) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    let (a, b) = (sites.site(Site::A), sites.site(Site::B));
    let mut router = realm.cloud_router(&sites, "");
    let n = 150u64;
    let count = n.to_string();
    let mut echo = Live::spawn(realm.via_cloud(
        b,
        "b",
        &[
            "echo",
            "/stream",
            "--count",
            &count,
            "--reliable",
            "--keep-all",
            "--meta",
            "--timeout",
            "50",
        ],
    ));
    assert!(
        wait_cloud_links(&sites, "session", 1.0, clock.up_to(Duration::from_secs(20))),
        "{}",
        router.stderr()
    );
    let publ = Live::spawn(realm.via_cloud(
        a,
        "a",
        &[
            "pub",
            "/stream",
            "sample",
            "-n",
            &count,
            "-r",
            "25",
            "--keep-all",
            "--linger",
            "30",
            "--stats",
        ],
    ));
    assert!(
        wait_until(clock.up_to(Duration::from_secs(20)), || echo.lines() >= 40),
        "echo: {}\nrouter: {}",
        echo.stderr(),
        router.stderr()
    );
    let killed_at = echo.lines();
    router.kill();
    let old_log = router.stderr();
    std::thread::sleep(Duration::from_millis(700));
    let router = realm.cloud_router(&sites, "");
    let p = done(publ, &clock);
    assert!(
        p.ok(),
        "pub: {}\necho: {}\nrouter before: {old_log}\nrouter after: {}",
        p.err,
        echo.stderr(),
        router.stderr()
    );
    let code = echo.wait(clock.left());
    let got = seqs(&echo.out.lock().unwrap());
    assert_eq!(
        code,
        Some(0),
        "echo: {}\nrouter after: {}",
        echo.stderr(),
        router.stderr()
    );
    assert_eq!(got, (1..=n).collect::<Vec<u64>>(), "{}", echo.stderr());
    eprintln!(
        "{TEST}: killed after {killed_at} samples; frames dropped: {}; pub: {}; done in {:?}",
        dropped(&sites, &lossy).0,
        router_counters(&p.err),
        clock.0.elapsed()
    );
}

/// A 13 MB reliable sample from site A reaches site B through two routers, site A's
/// gateway router (on its NAT) and the cloud router, with 1 % of the frames lost at both
/// ends of every link (both sites' inside links and uplinks): it arrives whole, byte for
/// byte (issue 19's bar; the 004 paper's SGC failed at 13 MB).
#[test]
fn a_13_mb_sample_crosses_two_routers_with_loss_on_every_link() {
    const TEST: &str = "a_13_mb_sample_crosses_two_routers_with_loss_on_every_link";
    const SIZE: usize = 13_000_000;
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let lossy = both_ways(
        Site::ALL
            .iter()
            .flat_map(|&s| [Link::Inside(s), Link::Uplink(s)]),
    );
    let Some(sites) = lossy_sites(TEST, "tnl", &lossy) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    let (a, b) = (sites.site(Site::A), sites.site(Site::B));
    let cloud_router = realm.cloud_router(&sites, "");
    let gateway = Site::A.gateway();
    let site_router = realm.router(
        sites.nat(Site::A),
        "site",
        SocketAddr::from((gateway, METRICS_PORT)),
        &format!(
            "listen = \"{gateway}:{SITE_PORT}\"\nconnect = [\"quic/{}\"]",
            cloud()
        ),
    );
    assert!(
        wait_cloud_links(&sites, "router", 1.0, clock.up_to(Duration::from_secs(20))),
        "the site router did not link to the cloud: {}\n{}",
        site_router.stderr(),
        cloud_router.stderr()
    );
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let payload: Vec<u8> = (0..SIZE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let file = realm.path("big.bin");
    std::fs::write(&file, &payload).unwrap();
    let echo = spawn(realm.via_cloud(
        b,
        "b",
        &[
            "echo",
            "/big",
            "-n",
            "1",
            "--reliable",
            "--raw",
            "len",
            "--timeout",
            "50",
        ],
    ));
    assert!(
        wait_cloud_links(&sites, "session", 1.0, clock.up_to(Duration::from_secs(20))),
        "{}",
        cloud_router.stderr()
    );
    let publ = Live::spawn(realm.member(
        a,
        "a",
        &format!("{gateway}:{SITE_PORT}"),
        &[
            "pub",
            "/big",
            "--file",
            file.to_str().unwrap(),
            "-n",
            "1",
            "--linger",
            "45",
            "--stats",
        ],
    ));
    let got = finish(echo, clock.left());
    let p = done(publ, &clock);
    assert!(
        got.status.success(),
        "echo: {}\npub: {}\nsite router: {}\ncloud router: {}",
        text(&got.stderr),
        p.err,
        site_router.stderr(),
        cloud_router.stderr()
    );
    assert_eq!(got.stdout.len(), 4 + SIZE, "one sample, length-prefixed");
    assert_eq!(&got.stdout[..4], &(SIZE as u32).to_le_bytes());
    assert!(
        got.stdout[4..] == payload[..],
        "the sample arrived byte for byte"
    );
    assert!(p.ok(), "pub: {}", p.err);
    let (words, total) = dropped(&sites, &lossy);
    assert!(total > 0, "the loss rules dropped frames: {words}");
    eprintln!(
        "{TEST}: frames dropped: {words}; pub: {}; done in {:?}",
        router_counters(&p.err),
        clock.0.elapsed()
    );
}

/// While a reliable keep-all stream flows from site A to site B, the publishing host at
/// site A gets a new address (a new DHCP lease in its subnet), then the subscribing host at
/// site B does, then site A's again (another Wi-Fi network behind the same NAT, outside the
/// subnet): no process restarts, the stream goes on and every sample arrives once and in
/// order. Prints the longest pause in arrivals after each change, and each session's router
/// connects (1: the QUIC link followed the address; more: it was dialled again).
#[test]
fn site_address_change_keeps_topics_flowing() {
    const TEST: &str = "site_address_change_keeps_topics_flowing";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let Some(mut sites) = sites(TEST, || Sites::builder("tna").create()) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    let router = realm.cloud_router(&sites, "");
    let n = 200u64;
    let count = n.to_string();
    let mut echo = Live::spawn(realm.via_cloud(
        sites.site(Site::B),
        "b",
        &[
            "echo",
            "/stream",
            "--count",
            &count,
            "--reliable",
            "--keep-all",
            "--meta",
            "--stats",
            "--timeout",
            "50",
        ],
    ));
    assert!(
        wait_cloud_links(&sites, "session", 1.0, clock.up_to(Duration::from_secs(20))),
        "{}",
        router.stderr()
    );
    let publ = Live::spawn(realm.via_cloud(
        sites.site(Site::A),
        "a",
        &[
            "pub",
            "/stream",
            "sample",
            "-n",
            &count,
            "-r",
            "20",
            "--keep-all",
            "--linger",
            "30",
            "--stats",
        ],
    ));
    assert!(
        wait_until(clock.up_to(Duration::from_secs(20)), || echo.lines() >= 40),
        "echo: {}\nrouter: {}",
        echo.stderr(),
        router.stderr()
    );
    // A new lease in the same subnet at 40 samples, then one in another subnet behind the
    // same NAT at 120.
    let mut changes = Vec::new();
    for (site, at, new, next) in [
        (Site::A, 40, Ipv4Addr::new(10, 10, 1, 77), 100),
        (Site::B, 100, Ipv4Addr::new(10, 10, 2, 66), 150),
        (Site::A, 150, Ipv4Addr::new(10, 10, 9, 5), n as usize),
    ] {
        assert!(
            wait_until(clock.up_to(Duration::from_secs(30)), || echo.lines() >= at),
            "echo: {}\nrouter: {}",
            echo.stderr(),
            router.stderr()
        );
        let old = sites.site(site).addr();
        sites.change_site_address(site, new).unwrap();
        let pause = longest_pause(&echo, next, clock.up_to(Duration::from_secs(30)));
        changes.push(format!(
            "site {site:?} {old} -> {new} after {at} samples: longest pause {pause:?}"
        ));
    }
    let p = done(publ, &clock);
    assert!(
        p.ok(),
        "pub: {}\necho: {}\nrouter: {}",
        p.err,
        echo.stderr(),
        router.stderr()
    );
    let code = echo.wait(clock.left());
    let got = seqs(&echo.out.lock().unwrap());
    assert_eq!(
        code,
        Some(0),
        "echo: {}\nrouter: {}",
        echo.stderr(),
        router.stderr()
    );
    assert_eq!(got, (1..=n).collect::<Vec<u64>>(), "{}", echo.stderr());
    let nat = sites.nat_table(Site::A).unwrap_or_default();
    for new in ["10.10.1.77", "10.10.9.5"] {
        assert!(
            nat.contains(&format!("src={new} ")),
            "{new} never crossed NAT A: {nat}"
        );
    }
    eprintln!(
        "{TEST}: {}; pub: {}; echo: {}; router: {}; done in {:?}",
        changes.join("; "),
        router_counters(&p.err),
        router_counters(&echo.stderr()),
        router
            .stderr()
            .lines()
            .filter(|l| l.contains("link "))
            .collect::<Vec<_>>()
            .join(" | "),
        clock.0.elapsed()
    );
}

/// Member `c` is revoked and the cloud router reads the revocation list: `c`'s echo at
/// site B never receives and the router says it refused a revoked credential, while `b`'s
/// echo beside it receives site A's samples over the same path.
#[test]
fn a_revoked_member_is_refused_by_the_router_across_nat() {
    const TEST: &str = "a_revoked_member_is_refused_by_the_router_across_nat";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let Some(sites) = sites(TEST, || Sites::builder("tnv").create()) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    realm.keys(&["revoke", "realm", "c"]);
    let (a, b) = (sites.site(Site::A), sites.site(Site::B));
    let router = realm.cloud_router(&sites, "revocations = \"realm/revoked.toml\"");
    let revoked = Live::spawn(realm.via_cloud(
        b,
        "c",
        &[
            "echo",
            "/x",
            "--count",
            "1",
            "--reliable",
            "--timeout",
            "10",
        ],
    ));
    let good = Live::spawn(realm.via_cloud(
        b,
        "b",
        &[
            "echo",
            "/x",
            "--count",
            "3",
            "--reliable",
            "--timeout",
            "30",
        ],
    ));
    assert!(
        wait_cloud_links(&sites, "session", 1.0, clock.up_to(Duration::from_secs(20))),
        "{}",
        router.stderr()
    );
    let _publ = Live::spawn(realm.via_cloud(
        a,
        "a",
        &[
            "pub",
            "/x",
            "for members",
            "-n",
            "60",
            "-r",
            "5",
            "--wait-matched",
            "0",
        ],
    ));
    let g = done(good, &clock);
    assert!(g.ok(), "b's echo: {}\nrouter: {}", g.err, router.stderr());
    assert_eq!(g.out, "for members\n".repeat(3));
    let r = done(revoked, &clock);
    assert!(
        !r.ok() && r.out.is_empty(),
        "a revoked member got through: {}",
        r.out
    );
    assert!(
        wait_until(clock.up_to(Duration::from_secs(5)), || router
            .stderr()
            .contains("revoked")),
        "{}",
        router.stderr()
    );
    eprintln!(
        "{TEST}: router: {}; done in {:?}",
        router
            .stderr()
            .lines()
            .filter(|l| l.contains("revoked"))
            .take(2)
            .collect::<Vec<_>>()
            .join(" | "),
        clock.0.elapsed()
    );
}

/// A router of another realm, at site A, dials the cloud router through NAT A: its
/// certificate is not the realm's, so the cloud refuses it and never links it.
#[test]
fn a_router_of_another_realm_cannot_join_across_nat() {
    const TEST: &str = "a_router_of_another_realm_cannot_join_across_nat";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    if !ready(TEST) {
        return;
    }
    let clock = Clock::start();
    let Some(sites) = sites(TEST, || Sites::builder("tnf").create()) else {
        return;
    };
    let realm = Realm::new(&["a", "b", "c"]);
    let other = Realm::new(&["a", "b", "c"]);
    let router = realm.cloud_router(&sites, "");
    let foreign = other.router(
        sites.site(Site::A).ns(),
        "site",
        SocketAddr::from((Ipv4Addr::LOCALHOST, METRICS_PORT)),
        &format!("connect = [\"quic/{}\"]", cloud()),
    );
    assert!(
        wait_until(clock.up_to(Duration::from_secs(15)), || {
            let log = router.stderr();
            log.contains(&format!("link from {}:", Site::A.public_addr()))
                && log.contains("refused")
                && log.contains("another realm")
        }),
        "cloud: {}\nforeign: {}",
        router.stderr(),
        foreign.stderr()
    );
    assert_eq!(
        links(&metrics(sites.cloud(), cloud_metrics()), "cloud", "router"),
        0.0,
        "{}",
        router.stderr()
    );
    eprintln!(
        "{TEST}: cloud: {}; done in {:?}",
        router
            .stderr()
            .lines()
            .find(|l| l.contains("refused"))
            .unwrap_or(""),
        clock.0.elapsed()
    );
}
