//! `tether demo` (the default): two sites and a cloud router on loopback, in a secure realm.
//!
//! The demo creates a realm in a temporary directory (members `robot-a` and `operator-b`,
//! routers `cloud`, `site-a` and `site-b`), then starts, as processes of this binary:
//!
//! - the cloud router, listening on 127.0.0.1;
//! - site A's and site B's routers, each listening on its own 127.0.0.1 port and dialling
//!   the cloud, each with an export list (site A lets /camera and /telemetry out and /cmd
//!   in; site B the reverse) naming topics by the realm's route keys, never by name;
//! - at site A the robot's publishers: /camera (1 MB samples at 10 Hz) and /telemetry
//!   (200 B at 100 Hz); at site B the operator's /cmd publisher (10 Hz).
//!
//! This process holds the subscribing sessions: the operator's (site B: /camera and
//! /telemetry) and the robot's (site A: /cmd). Every session runs with discovery off and
//! dials its site's router only, so the sites meet through the routers and nothing else.
//! Once a second it prints, per topic and per site, samples/s, MB/s, latency (source
//! timestamp to delivery: one host, one clock) and samples lost; and per router its links
//! and the data it forwarded (scraped from its metrics page).
//!
//! Nothing is left behind, whichever way the demo ends (its time is up, a process of it
//! fails, an error, SIGINT, SIGTERM or SIGHUP): its processes are killed and waited for and
//! the temporary directory (realm, router configurations) removed. Killed itself
//! (SIGKILL), its processes are killed by the kernel (`PR_SET_PDEATHSIG`) and the next demo
//! removes the directory it left.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tether::keys::Realm;
use tether::{Config, DiscoveryRange, Qos, Session, Subscriber};

use super::{Children, DemoArgs, Signals, Window, program, quoted};
use tether_bench::end_with_parent;

/// How long the routers may take to start and link before the demo gives up.
const SETUP_LIMIT: Duration = Duration::from_secs(30);

/// Environment variables that would give the demo's processes settings of their own
/// (another realm, peers, routers, a configuration file): the demo sets each explicitly.
const SETTINGS_VARS: [&str; 6] = [
    "TETHER_CONFIG",
    "TETHER_KEYS",
    "TETHER_PEERS",
    "TETHER_ROUTERS",
    "TETHER_DISCOVERY",
    "TETHER_DOMAIN",
];

/// A directory of this demo in the system's temporary directory (`TMPDIR`), 0700, removed
/// when dropped.
struct TempDir(PathBuf);

impl TempDir {
    /// Creates `tether-demo.PID.N`, after removing those that demos no longer running (killed)
    /// left.
    fn new() -> anyhow::Result<TempDir> {
        let base = std::env::temp_dir();
        sweep(&base);
        let pid = std::process::id();
        let mut n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        loop {
            let p = base.join(format!("tether-demo.{pid}.{n}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "creating the demo's directory {} (TMPDIR names another place)",
                            p.display()
                        )
                    });
                }
            }
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the demo directories in `base` that are this user's and whose demo no longer
/// runs (it was killed: nothing of it could remove them).
fn sweep(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("tether-demo."))
            .and_then(|n| n.split('.').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let ours = e
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == uid);
        // SAFETY: kill with signal 0 sends nothing; it only asks whether `pid` exists.
        let gone = pid > 0
            && unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if ours && gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A port of 127.0.0.1 free now, for a router's QUIC listener (UDP) or metrics (TCP); the
/// router binds it a moment later (a router that cannot ends the demo, and says why).
fn free_port(udp: bool) -> anyhow::Result<u16> {
    let a = if udp {
        UdpSocket::bind("127.0.0.1:0")?.local_addr()?
    } else {
        TcpListener::bind("127.0.0.1:0")?.local_addr()?
    };
    Ok(a.port())
}

/// One of the demo's routers.
struct Router {
    name: &'static str,
    /// Its QUIC port on 127.0.0.1.
    port: u16,
    /// Its metrics port on 127.0.0.1.
    metrics: u16,
    /// The last scrape's `(samples forwarded, bytes forwarded)` and when.
    last: Option<(f64, f64, Instant)>,
}

/// The router's metrics page, or `None` when it does not answer within half a second.
fn scrape(port: u16) -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    c.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut s = String::new();
    c.read_to_string(&mut s).ok()?;
    s.contains("200 OK").then_some(s)
}

/// The value of the sample of `family` whose labels contain `label` (`role="router"`).
fn value(page: &str, family: &str, label: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.strip_prefix(family)
                .is_some_and(|r| r.starts_with(['{', ' ']) && r.contains(label))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A topic as a site receives it.
struct Row {
    topic: &'static str,
    from: &'static str,
    to: &'static str,
    sub: Subscriber,
    window: Arc<Mutex<Window>>,
    total: u64,
}

/// A session of the realm member whose keys are `keys`, dialling its site's router only.
fn member_config(domain: u16, dir: &Path, keys: PathBuf, router: u16) -> Config {
    let mut c = Config {
        domain,
        ..Config::default()
    };
    c.discovery.set_range(DiscoveryRange::Off);
    c.discovery.registry_dir = Some(dir.join("registry"));
    c.transport.listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    c.security.keys = Some(keys);
    c.routers.connect = vec![format!("quic/127.0.0.1:{router}")];
    c
}

/// The same as flags, for a process of this binary.
fn member_flags(domain: u16, dir: &Path, keys: &Path, router: u16) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["--domain".into(), domain.to_string().into()];
    v.extend(["--discovery".into(), "off".into(), "--registry-dir".into()]);
    v.push(dir.join("registry").into());
    v.extend(["--listen".into(), "127.0.0.1:0".into(), "--keys".into()]);
    v.push(keys.into());
    v.extend(["--router".into(), format!("quic/127.0.0.1:{router}").into()]);
    v
}

/// Settings of this command that the two-site demo does not use: it makes its own realm,
/// routers and addresses.
fn ignored(cfg: &Config) -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg.security.keys.is_some() {
        v.push("keys");
    }
    if !cfg.discovery.peers.is_empty() {
        v.push("peers");
    }
    if !cfg.routers.connect.is_empty() {
        v.push("routers");
    }
    if cfg.transport.listen.is_some() {
        v.push("listen address");
    }
    v
}

/// Starts `args` of this binary as the demo process `what`.
fn start(
    children: &mut Children,
    exe: &Path,
    what: String,
    args: &[OsString],
) -> anyhow::Result<()> {
    let mut c = Command::new(exe);
    for v in SETTINGS_VARS {
        c.env_remove(v);
    }
    // The routers' links coming and going (INFO) would land in the live table; their
    // warnings still show. A filter the user gave is kept.
    let given = |v: &str| std::env::var(v).is_ok_and(|s| !s.trim().is_empty());
    if !given("TETHER_LOG") && !given("RUST_LOG") {
        c.env("TETHER_LOG", "warn");
    }
    // SIGKILL: they have nothing to clean up (no registry entry; the next demo removes
    // the directory), and a publisher told to end would first wait for acknowledgements
    // from subscribers that died with the demo.
    end_with_parent(&mut c, libc::SIGKILL);
    let child = c
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    children.procs.push((what, child));
    Ok(())
}

/// Why the demo stops before its time.
enum Stop {
    Signal(u8),
    Failed(String, std::process::ExitStatus),
}

/// Waits up to `limit` for `ready`, watching for a signal and for a process that ends.
fn wait_for(
    signals: &Signals,
    children: &mut Children,
    limit: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<bool, Stop> {
    let end = Instant::now() + limit;
    loop {
        if let Some(code) = signals.caught() {
            return Err(Stop::Signal(code));
        }
        if let Some((what, status)) = children.exited() {
            return Err(Stop::Failed(what, status));
        }
        if ready() {
            return Ok(true);
        }
        if Instant::now() >= end {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(super) fn run(cfg: Config, a: DemoArgs) -> anyhow::Result<ExitCode> {
    let signals = Signals::catch()?;
    let ignored = ignored(&cfg);
    if !ignored.is_empty() {
        eprintln!(
            "note: the two-site demo makes its own realm, routers and addresses and ignores \
             the {} given; `tether demo --local` runs with them",
            ignored.join(", ")
        );
    }
    let domain = cfg.domain;
    let dir = TempDir::new()?;
    let realm_dir = dir.0.join("realm");
    let (realm, mut routers) = make_realm(&realm_dir)?;
    let exe = std::env::current_exe().context("locating the tether binary")?;
    let mut children = Children {
        procs: Vec::new(),
        registry: None,
    };
    start_routers(&realm, &routers, &dir.0, domain, &exe, &mut children)?;
    let cloud_metrics = routers[0].metrics;
    let linked = wait_for(&signals, &mut children, SETUP_LIMIT, || {
        scrape(cloud_metrics).and_then(|p| value(&p, "tether_router_links", "role=\"router\""))
            == Some(2.0)
    });
    match linked {
        Ok(true) => {}
        Ok(false) => {
            anyhow::bail!(
                "the sites' routers did not link to the cloud router in {} s",
                SETUP_LIMIT.as_secs()
            )
        }
        Err(stop) => return Ok(stopped(stop, children, dir)),
    }
    let (port_a, port_b) = (routers[1].port, routers[2].port);
    let robot = realm_dir.join("robot-a.key");
    let operator = realm_dir.join("operator-b.key");
    // The subscribing sessions, in this process: the operator's at site B, the robot's
    // at site A.
    let site_b = Session::open(member_config(domain, &dir.0, operator.clone(), port_b))
        .context("opening the operator's session at site B")?;
    let site_a = Session::open(member_config(domain, &dir.0, robot.clone(), port_a))
        .context("opening the robot's session at site A")?;
    let mut rows = subscribe(&site_a, &site_b)?;
    for (who, keys, port, args) in [
        ("robot-a", &robot, port_a, &CAMERA[..]),
        ("robot-a", &robot, port_a, &TELEMETRY[..]),
        ("operator-b", &operator, port_b, &CMD[..]),
    ] {
        let mut v = member_flags(domain, &dir.0, keys, port);
        v.push("pub".into());
        v.extend(args.iter().map(OsString::from));
        v.push("--quiet".into());
        let what = format!("{who}'s tether pub {}", args.join(" "));
        start(&mut children, &exe, what, &v)?;
    }
    print_header(&routers, domain, &dir.0, &operator, port_b, a.duration);
    let start = Instant::now();
    let mut stop = None;
    'run: loop {
        let second = Instant::now() + Duration::from_secs(1);
        while Instant::now() < second {
            if let Some(code) = signals.caught() {
                stop = Some(Stop::Signal(code));
                break 'run;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        print_table(start, &mut rows, &mut routers);
        if let Some((what, status)) = children.exited() {
            stop = Some(Stop::Failed(what, status));
            break;
        }
        if a.duration > 0.0 && start.elapsed().as_secs_f64() >= a.duration {
            break;
        }
    }
    let lost: u64 = rows.iter().map(|r| r.sub.lost()).sum();
    let received: Vec<(String, u64)> = rows
        .iter()
        .map(|r| (format!("{} at {}", r.topic, r.to), r.total))
        .collect();
    drop(rows);
    drop((site_a, site_b));
    drop(children);
    drop(dir);
    Ok(finish(stop, &received, lost, start.elapsed()))
}

/// The robot's camera: 1 MB samples at 10 Hz, reliable keep-last 1 (why: [`subscribe`]).
const CAMERA: [&str; 8] = [
    "/camera",
    "frame",
    "--size",
    "1000000",
    "--rate",
    "10",
    "--keep-last",
    "1",
];

/// The robot's telemetry: 200 B at 100 Hz, reliable.
const TELEMETRY: [&str; 6] = ["/telemetry", "pose", "--size", "200", "--rate", "100"];

/// The operator's commands: 10 Hz, reliable.
const CMD: [&str; 4] = ["/cmd", "forward 0.5 m/s", "--rate", "10"];

/// The demo's realm in `dir`: its members and routers (with the ports they will take).
fn make_realm(dir: &Path) -> anyhow::Result<(Realm, Vec<Router>)> {
    let realm = Realm::init(dir).context("creating the demo's realm")?;
    let grants = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (robot_pub, robot_sub) = (grants(&["/camera", "/telemetry"]), grants(&["/cmd"]));
    realm.issue("robot-a", robot_pub.clone(), robot_sub.clone(), 1)?;
    realm.issue("operator-b", robot_sub, robot_pub, 1)?;
    let mut routers = Vec::new();
    for name in ["cloud", "site-a", "site-b"] {
        realm.issue_router(name, 1)?;
        routers.push(Router {
            name,
            port: free_port(true)?,
            metrics: free_port(false)?,
            last: None,
        });
    }
    Ok((realm, routers))
}

/// Writes the routers' configurations in `dir` and starts them: the cloud, then the sites,
/// which dial it, each with its export list (by route key: routers never learn names).
fn start_routers(
    realm: &Realm,
    routers: &[Router],
    dir: &Path,
    domain: u16,
    exe: &Path,
    children: &mut Children,
) -> anyhow::Result<()> {
    let exports = |out: &[&str], inward: &[&str]| -> String {
        let rule = |t: &&str, d: &str| {
            let key = tether_crypto::to_hex(&realm.route_key(t));
            format!("[[export]]  # {t}\nkey = \"{key}\"\ndirection = \"{d}\"\n")
        };
        out.iter()
            .map(|t| rule(t, "out"))
            .chain(inward.iter().map(|t| rule(t, "in")))
            .collect()
    };
    let dial = format!("connect = [\"quic/127.0.0.1:{}\"]\n", routers[0].port);
    for (r, extra) in routers.iter().zip([
        String::new(),
        dial.clone() + &exports(&["/camera", "/telemetry"], &["/cmd"]),
        dial.clone() + &exports(&["/cmd"], &["/camera", "/telemetry"]),
    ]) {
        let path = dir.join(format!("{}.toml", r.name));
        std::fs::write(
            &path,
            format!(
                "name = \"{}\"\ndomain = {domain}\nlisten = \"127.0.0.1:{}\"\n\
                 keys = \"realm/{}.key\"\nmetrics = \"127.0.0.1:{}\"\n{extra}",
                r.name, r.port, r.name, r.metrics
            ),
        )
        .with_context(|| format!("writing {}", path.display()))?;
        let what = format!(
            "router {} (tether router --config {})",
            r.name,
            path.display()
        );
        start(
            children,
            exe,
            what,
            &["router".into(), "--config".into(), path.into()],
        )?;
    }
    Ok(())
}

/// The subscriptions whose samples the table counts: /camera and /telemetry at site B,
/// /cmd at site A.
fn subscribe(site_a: &Session, site_b: &Session) -> anyhow::Result<Vec<Row>> {
    // The camera is reliable keep-last 1: a 1 MB sample is some 17 datagrams through the
    // routers, and best effort would lose the whole frame for any one of them; reliable,
    // the lost datagram is repaired, while keep-last 1 never queues stale frames behind
    // a slow path (a newer frame replaces an unsent one, counted as lost) so latency stays
    // that of one frame. Telemetry and commands are small and must all arrive: reliable,
    // the default keep-last 10.
    let camera_qos = Qos::default().keep_last(1);
    let mut rows = Vec::new();
    for (session, topic, from, to, qos) in [
        (site_b, "/camera", "site A", "site B", camera_qos),
        (site_b, "/telemetry", "site A", "site B", Qos::default()),
        (site_a, "/cmd", "site B", "site A", Qos::default()),
    ] {
        let window = Arc::new(Mutex::new(Window::default()));
        let w = window.clone();
        let sub = session.subscriber_with_callback(topic, qos, move |s| {
            Window::add(&w, s.payload.len(), s.timestamp_ns);
        })?;
        rows.push(Row {
            topic,
            from,
            to,
            sub,
            window,
            total: 0,
        });
    }
    Ok(rows)
}

/// The last line and the exit status: what each site received, then why the demo ended
/// early or which topic received nothing.
fn finish(stop: Option<Stop>, received: &[(String, u64)], lost: u64, ran: Duration) -> ExitCode {
    let how = match stop {
        Some(Stop::Signal(code)) => super::interrupted(code),
        _ => "",
    };
    println!(
        "{how}received {} in {:.0} s; {lost} lost",
        received
            .iter()
            .map(|(what, n)| format!("{n} {what}"))
            .collect::<Vec<_>>()
            .join(", "),
        ran.as_secs_f64()
    );
    match stop {
        Some(Stop::Signal(code)) => return ExitCode::from(code),
        Some(Stop::Failed(what, status)) => {
            eprintln!("error: a demo process ended early ({status}): {what}");
            return ExitCode::from(1);
        }
        None => {}
    }
    let silent: Vec<&str> = received
        .iter()
        .filter(|(_, n)| *n == 0)
        .map(|(what, _)| what.as_str())
        .collect();
    if !silent.is_empty() {
        eprintln!(
            "error: nothing was received on {} (the routers' metrics pages above say what \
             they forwarded)",
            silent.join(", ")
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// The end of a demo stopped while it was setting up.
fn stopped(stop: Stop, children: Children, dir: TempDir) -> ExitCode {
    drop(children);
    drop(dir);
    match stop {
        Stop::Signal(code) => ExitCode::from(code),
        Stop::Failed(what, status) => {
            eprintln!("error: a demo process ended early ({status}): {what}");
            ExitCode::from(1)
        }
    }
}

/// What runs where, and how to watch it.
fn print_header(
    routers: &[Router],
    domain: u16,
    dir: &Path,
    operator: &Path,
    port_b: u16,
    duration: f64,
) {
    println!(
        "tether demo: two sites and a cloud router on loopback, security on (a realm in {}), \
         domain {domain}",
        dir.display()
    );
    for (r, what) in routers.iter().zip([
        "",
        "  dials cloud; lets /camera /telemetry out, /cmd in",
        "  dials cloud; lets /cmd out, /camera /telemetry in",
    ]) {
        println!(
            "  router {:<7} quic/127.0.0.1:{:<5}  metrics http://127.0.0.1:{}/metrics{what}",
            r.name, r.port, r.metrics
        );
    }
    println!(
        "  site A: robot-a publishes /camera (1 MB, 10 Hz) and /telemetry (200 B, 100 Hz), \
         subscribes /cmd (3 sessions, on router site-a only)"
    );
    println!(
        "  site B: operator-b subscribes /camera and /telemetry, publishes /cmd (10 Hz) \
         (2 sessions, on router site-b only)"
    );
    let flags: String = member_flags(domain, dir, operator, port_b)
        .iter()
        .filter(|f| *f != "--listen" && *f != "127.0.0.1:0")
        .map(|f| format!("{} ", quoted(f)))
        .collect();
    println!(
        "watch site B from another terminal: {} {flags}hz /camera",
        program()
    );
    if duration > 0.0 {
        println!(
            "it runs {duration} s (--duration SECS; 0 until Ctrl-C); tether demo --local: the \
             single-host demo"
        );
    }
}

/// One second's table: the topics as each site received them, then the routers.
fn print_table(start: Instant, rows: &mut [Row], routers: &mut [Router]) {
    let mut out = format!(
        "[{:>3.0}s] {:<11} {:<16} {:>9} {:>7} {:>7} {:>7} {:>6}\n",
        start.elapsed().as_secs_f64(),
        "topic",
        "from → to",
        "samples/s",
        "MB/s",
        "p50 ms",
        "p99 ms",
        "lost"
    );
    for r in rows.iter_mut() {
        let w = Window::take(&r.window);
        r.total += w.n;
        let path = format!("{} → {}", r.from, r.to);
        out += &format!(
            "       {:<11} {path:<16} {:>9} {:>7.2} {:>7.1} {:>7.1} {:>6}\n",
            r.topic,
            w.n,
            w.bytes as f64 / 1e6,
            w.quantile(0.5) / 1000.0,
            w.quantile(0.99) / 1000.0,
            r.sub.lost()
        );
    }
    out += &format!(
        "       {:<11} {:<16} {:>9} {:>7}\n",
        "router", "links", "dgram/s", "MB/s"
    );
    for r in routers.iter_mut() {
        let page = scrape(r.metrics);
        let now = Instant::now();
        let get = |family: &str, label: &str| page.as_deref().and_then(|p| value(p, family, label));
        let links = match (
            get("tether_router_links", "role=\"router\""),
            get("tether_router_links", "role=\"session\""),
        ) {
            (Some(rt), Some(s)) => {
                format!("{rt} router{}, {s} sess.", if rt == 1.0 { "" } else { "s" })
            }
            _ => "(no metrics)".into(),
        };
        let fwd = get("tether_router_samples_forwarded_total", "");
        let bytes = get("tether_router_sample_bytes_forwarded_total", "");
        let rates = match (fwd, bytes, r.last) {
            (Some(f), Some(b), Some((f0, b0, t0))) => {
                let secs = now.duration_since(t0).as_secs_f64().max(1e-3);
                format!("{:>9.0} {:>7.2}", (f - f0) / secs, (b - b0) / secs / 1e6)
            }
            _ => format!("{:>9} {:>7}", "-", "-"),
        };
        if let (Some(f), Some(b)) = (fwd, bytes) {
            r.last = Some((f, b, now));
        }
        out += &format!("       {:<11} {links:<16} {rates}\n", r.name);
    }
    print!("{out}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table reads a router's metrics page by family and label.
    #[test]
    fn metrics_are_read_by_family_and_label() {
        let page = "HTTP/1.1 200 OK\r\n\r\n# HELP tether_router_links Links up.\n\
                    # TYPE tether_router_links gauge\n\
                    tether_router_links{router=\"cloud\",role=\"session\"} 0\n\
                    tether_router_links{router=\"cloud\",role=\"router\"} 2\n\
                    tether_router_links_made_total{router=\"cloud\"} 7\n\
                    tether_router_samples_forwarded_total{router=\"cloud\"} 3043\n";
        let v = |f, l| value(page, f, l);
        assert_eq!(v("tether_router_links", "role=\"router\""), Some(2.0));
        assert_eq!(v("tether_router_links", "role=\"session\""), Some(0.0));
        assert_eq!(v("tether_router_links_made_total", ""), Some(7.0));
        assert_eq!(v("tether_router_samples_forwarded_total", ""), Some(3043.0));
        assert_eq!(v("tether_router_routes", ""), None);
    }

    /// p50 and p99 of a second's latencies: the sample below which that share arrived.
    #[test]
    fn quantiles_of_a_window() {
        let w = Window {
            lat_us: (1..=100).map(f64::from).collect(),
            ..Window::default()
        };
        assert_eq!(w.quantile(0.5), 50.0);
        assert_eq!(w.quantile(0.99), 99.0);
        assert_eq!(w.quantile(1.0), 100.0);
        assert_eq!(Window::default().quantile(0.99), 0.0);
        let one = Window {
            lat_us: vec![7.0],
            ..Window::default()
        };
        assert_eq!(one.quantile(0.5), 7.0);
    }
}
