//! Routers for benchmarks: a throwaway realm whose two members may use `/bench/**` and
//! whose routers are `cloud` and `site`, and `tether router` processes (this executable's
//! `router` subcommand) in it, on loopback.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use tether_testkit::netns::Namespace;

use super::SecureSide;
use super::lan::in_namespace;
use super::setup::TempDir;

/// The routers' names in a benchmark realm.
pub(crate) const ROUTERS: [&str; 2] = ["cloud", "site"];

/// A throwaway realm (members `bench-a` here and `bench-b` in the peer, granted `patterns`)
/// with router credentials for [`ROUTERS`].
pub(crate) fn realm(patterns: &[&str]) -> anyhow::Result<SecureSide> {
    let side = SecureSide::choose(&tether::Config::default(), true, patterns)?
        .context("a throwaway realm")?;
    let dir = side
        .realm_dir()
        .context("the throwaway realm's directory")?;
    let r = tether::keys::Realm::open(dir).context("opening the benchmark realm")?;
    for name in ROUTERS {
        r.issue_router(name, 1)
            .with_context(|| format!("issuing router {name}'s credential"))?;
    }
    Ok(side)
}

/// A `tether router` process on loopback, killed on drop.
pub(crate) struct RouterProc {
    child: Child,
    ip: IpAddr,
    port: u16,
    _cfg: TempDir,
}

impl RouterProc {
    /// Router `name` of the realm in `realm_dir`, serving `domain`, listening on a free
    /// loopback port and dialling the routers at `connect` (ports on loopback). Returns once
    /// it holds its port.
    pub(crate) fn spawn(
        realm_dir: &Path,
        name: &str,
        domain: u16,
        connect: &[u16],
    ) -> anyhow::Result<RouterProc> {
        RouterProc::spawn_at(realm_dir, name, domain, connect, None)
    }

    /// [`spawn`](Self::spawn), in namespace `ns` listening on `ip` if given (a port
    /// chosen in that namespace), on loopback otherwise.
    pub(crate) fn spawn_at(
        realm_dir: &Path,
        name: &str,
        domain: u16,
        connect: &[u16],
        at: Option<(&Namespace, IpAddr)>,
    ) -> anyhow::Result<RouterProc> {
        let ip = at.map_or(IpAddr::from([127, 0, 0, 1]), |(_, ip)| ip);
        let free = || free_udp_port(ip);
        let port = match at {
            Some((ns, _)) => in_namespace(ns, free)?,
            None => free()?,
        };
        let dir = realm_dir.join(format!("router-{name}-{port}"));
        std::fs::create_dir_all(&dir)?;
        let guard = TempDir(dir.clone());
        let cfg = dir.join("router.toml");
        let dials: Vec<String> = connect
            .iter()
            .map(|p| format!("\"quic/127.0.0.1:{p}\""))
            .collect();
        std::fs::write(
            &cfg,
            format!(
                "name = \"{name}\"\ndomain = {domain}\nlisten = \"{}\"\n\
                 keys = \"{}\"\nconnect = [{}]\n",
                SocketAddr::new(ip, port),
                realm_dir.join(format!("{name}.key")).display(),
                dials.join(", ")
            ),
        )?;
        let exe = std::env::current_exe().context("locating the tether binary")?;
        let mut cmd = match at {
            Some((ns, _)) => ns.command(exe),
            None => Command::new(exe),
        };
        if std::env::var_os("TETHER_LOG").is_none() {
            // Warnings only: a router's INFO lines (links up and down) would run through the
            // bench's table. TETHER_LOG, if given, is passed on.
            cmd.env("TETHER_LOG", "warn");
        }
        crate::harness::process::end_with_parent(&mut cmd, libc::SIGKILL);
        let child = cmd
            .env_remove("TETHER_CONFIG")
            .arg("router")
            .arg("--config")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a router")?;
        let mut r = RouterProc {
            child,
            ip,
            port,
            _cfg: guard,
        };
        let end = Instant::now() + Duration::from_secs(10);
        let free = || Ok(UdpSocket::bind((ip, port)).is_ok());
        // Bound: its port is taken.
        while match at {
            Some((ns, _)) => in_namespace(ns, free)?,
            None => free()?,
        } {
            if let Ok(Some(st)) = r.child.try_wait() {
                bail!("router {name} exited at start: {st}");
            }
            if Instant::now() > end {
                bail!("router {name} did not bind {ip}:{port} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(r)
    }

    /// Its UDP port on loopback.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// How a session dials it: `quic/127.0.0.1:PORT`.
    pub(crate) fn address(&self) -> String {
        format!("quic/{}", SocketAddr::new(self.ip, self.port))
    }
}

impl Drop for RouterProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A UDP port free on `ip` now (the router binds it a moment later).
fn free_udp_port(ip: IpAddr) -> anyhow::Result<u16> {
    Ok(UdpSocket::bind((ip, 0))?.local_addr()?.port())
}
