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
        // The port is chosen free and released before the router binds it, so another
        // socket on this host (a parallel test's client, say) can take it in between: the
        // router then exits at start saying so, and it is started again on another port.
        let mut tries = 0;
        loop {
            tries += 1;
            match RouterProc::try_spawn_at(realm_dir, name, domain, connect, at)? {
                Ok(r) => return Ok(r),
                Err(e) if tries < 5 => {
                    eprintln!("note: {e}; starting it again on another port");
                }
                Err(e) => bail!("{e} ({tries} ports tried)"),
            }
        }
    }

    /// One try of [`spawn_at`](Self::spawn_at): `Ok(Err(why))` when the router exited at
    /// start (its port taken, most likely), an error for anything else.
    fn try_spawn_at(
        realm_dir: &Path,
        name: &str,
        domain: u16,
        connect: &[u16],
        at: Option<(&Namespace, IpAddr)>,
    ) -> anyhow::Result<Result<RouterProc, String>> {
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
        // Bound: a UDP socket of that namespace holds the port. Looked up in the kernel's
        // table, not by binding the port to see whether it is free: that bind would hold
        // it for a moment, and a router binding then would find it taken.
        let bound = || udp_port_bound(port);
        while !match at {
            Some((ns, _)) => in_namespace(ns, bound)?,
            None => bound()?,
        } {
            if let Ok(Some(st)) = r.child.try_wait() {
                return Ok(Err(format!("router {name} exited at start: {st}")));
            }
            if Instant::now() > end {
                bail!("router {name} did not bind {ip}:{port} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(Ok(r))
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

/// Whether a UDP socket of the calling thread's network namespace is bound to local port
/// `port` (on any address), from the kernel's socket tables.
fn udp_port_bound(port: u16) -> anyhow::Result<bool> {
    let mut any = false;
    for table in ["udp", "udp6"] {
        let path = format!("/proc/thread-self/net/{table}");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // No IPv6 in this kernel: no udp6 table.
            Err(e) if table == "udp6" && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {path}")),
        };
        any |= holds_port(&text, port);
    }
    Ok(any)
}

/// Whether a `/proc/net/udp` table lists a socket whose local address has port `port`
/// (each row's second column is `ADDRESS:PORT`, both in hex).
fn holds_port(table: &str, port: u16) -> bool {
    table.lines().skip(1).any(|row| {
        row.split_whitespace()
            .nth(1)
            .and_then(|local| local.rsplit_once(':'))
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            == Some(port)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_socket_is_found_in_the_kernel_table_and_a_released_one_is_not() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        assert!(udp_port_bound(port).unwrap());
        drop(s);
        assert!(!udp_port_bound(port).unwrap());
    }

    #[test]
    fn the_port_is_read_from_the_local_address_column() {
        let table = "  sl  local_address rem_address   st\n\
                     \x20  1: 0100007F:8A3C 0100007F:0035 07\n";
        assert!(holds_port(table, 0x8a3c));
        // The remote address's port is not a local one.
        assert!(!holds_port(table, 0x35));
        assert!(!holds_port(table, 1));
    }
}
