//! What the tests across NATs share: whether they can run here, the sites, each test's
//! 60 s, the realm's routers and members in the sites' namespaces, the routers' metrics
//! pages, and how a process ended.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tether_testkit::netns::sites::{CLOUD_ADDR, Direction, Link, Sites};
use tether_testkit::netns::{self, Host, Namespace};

use crate::common::realm::Realm;
use crate::common::{Live, wait_until};

/// The cloud router's QUIC port.
const CLOUD_PORT: u16 = 7447;
/// A site router's QUIC port.
pub(crate) const SITE_PORT: u16 = 7448;
/// A router's metrics port (each router has its own namespace).
pub(crate) const METRICS_PORT: u16 = 9464;
/// What each test may take.
const BUDGET: Duration = Duration::from_secs(60);

/// One test at a time (see the docs of `netns_sites.rs`).
pub(crate) static TURN: Mutex<()> = Mutex::new(());

/// Whether the tests can run here; says why not.
pub(crate) fn ready(test: &str) -> bool {
    if !netns::is_root() {
        tether_testkit::skip!("skipping {test}: creating network namespaces needs root");
        return false;
    }
    if !netns::have_nft() {
        tether_testkit::skip!("skipping {test}: nft (nftables) is not installed; the NATs need it");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        tether_testkit::skip!("skipping {test}: ip (iproute2) is not installed");
        return false;
    }
    true
}

/// The sites, or `None` after saying why the test skips.
pub(crate) fn sites(
    test: &str,
    make: impl FnOnce() -> Result<Sites, netns::NetnsError>,
) -> Option<Sites> {
    match make() {
        Ok(s) => Some(s),
        Err(why) => {
            tether_testkit::skip!("skipping {test}: cannot create the sites: {why}");
            None
        }
    }
}

/// What is left of a test's 60 s.
pub(crate) struct Clock(pub(crate) Instant);

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock(Instant::now())
    }

    /// What is left, at least a second (a wait that overruns then fails the test).
    pub(crate) fn left(&self) -> Duration {
        BUDGET
            .saturating_sub(self.0.elapsed())
            .max(Duration::from_secs(1))
    }

    /// `d`, or what is left if less.
    pub(crate) fn up_to(&self, d: Duration) -> Duration {
        d.min(self.left())
    }
}

/// The routers and members of a test realm (`common::realm`) in the sites' namespaces.
pub(crate) trait InSites {
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
pub(crate) fn cloud() -> String {
    format!("{CLOUD_ADDR}:{CLOUD_PORT}")
}

pub(crate) fn cloud_metrics() -> SocketAddr {
    SocketAddr::from((CLOUD_ADDR, METRICS_PORT))
}

/// The metrics page at `addr` in namespace `ns` (read by a thread that enters it; empty
/// if nothing answers).
pub(crate) fn metrics(ns: &Namespace, addr: SocketAddr) -> String {
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
pub(crate) fn metric(page: &str, prefix: &str) -> f64 {
    page.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

/// Router `name`'s links of `role` (`session`, `router`) on its page.
pub(crate) fn links(page: &str, name: &str, role: &str) -> f64 {
    metric(
        page,
        &format!("tether_router_links{{router=\"{name}\",role=\"{role}\"}}"),
    )
}

/// Waits (up to `limit`) until the cloud router has `n` links of `role`.
pub(crate) fn wait_cloud_links(sites: &Sites, role: &str, n: f64, limit: Duration) -> bool {
    wait_until(limit, || {
        links(&metrics(sites.cloud(), cloud_metrics()), "cloud", role) == n
    })
}

/// Sites named `prefix` with 1 % of the frames lost on each of `lossy` (link, direction),
/// or `None` after saying why the test skips.
pub(crate) fn lossy_sites(test: &str, prefix: &str, lossy: &[(Link, Direction)]) -> Option<Sites> {
    lossy_sites_at(test, prefix, lossy, 1)
}

/// [`lossy_sites`] losing `percent` % of the frames.
pub(crate) fn lossy_sites_at(
    test: &str,
    prefix: &str,
    lossy: &[(Link, Direction)],
    percent: u8,
) -> Option<Sites> {
    let mut builder = Sites::builder(prefix);
    for &(link, dir) in lossy {
        builder = builder.loss(link, dir, percent);
    }
    sites(test, || builder.create())
}

/// Both directions of `links`, for [`lossy_sites`].
pub(crate) fn both_ways(links: impl IntoIterator<Item = Link>) -> Vec<(Link, Direction)> {
    links
        .into_iter()
        .flat_map(|l| [Direction::Up, Direction::Down].map(|d| (l, d)))
        .collect()
}

/// The frames the loss rules of `lossy` dropped: each, in words, and all.
pub(crate) fn dropped(sites: &Sites, lossy: &[(Link, Direction)]) -> (String, u64) {
    let each: Vec<(String, u64)> = lossy
        .iter()
        .map(|&(l, d)| (format!("{l:?} {d:?}"), sites.dropped(l, d).unwrap_or(0)))
        .collect();
    let words: Vec<String> = each.iter().map(|(w, n)| format!("{w}: {n}")).collect();
    (words.join(", "), each.iter().map(|(_, n)| n).sum())
}

/// Sequence numbers echoed with --meta, in order of arrival.
pub(crate) fn seqs(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("[seq "))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect()
}

/// The router link counters of a `--stats` report, on one line.
pub(crate) fn router_counters(stats: &str) -> String {
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
pub(crate) fn longest_pause(p: &Live, lines: usize, limit: Duration) -> Duration {
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
pub(crate) struct Done {
    pub(crate) code: Option<i32>,
    pub(crate) out: String,
    pub(crate) err: String,
}

impl Done {
    pub(crate) fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Waits for `p` within what is left of the test (killed and failing the test if it
/// overruns); a process never outlives its test, whatever fails first (`Live` kills it
/// when dropped).
pub(crate) fn done(mut p: Live, clock: &Clock) -> Done {
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
