//! The environment's overrides of a configuration (`TETHER_CONFIG`, `TETHER_DOMAIN`,
//! `TETHER_DISCOVERY`, `TETHER_PEERS`, `TETHER_ROUTERS`), and the addresses that
//! variables and flags give.

use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};

use super::{Config, ConfigError, UnknownWord, parse_router};

impl Config {
    /// The file named by `TETHER_CONFIG` (or the defaults if it is unset), then the
    /// environment's overrides ([`Config::apply_env`]).
    pub fn from_env() -> Result<Self, ConfigError> {
        let mut c = match std::env::var_os("TETHER_CONFIG") {
            Some(p) if !p.is_empty() => Self::from_file(p)?,
            _ => Self::default(),
        };
        c.apply_env()?;
        Ok(c)
    }

    /// Applies `TETHER_DOMAIN`, `TETHER_DISCOVERY`, `TETHER_PEERS` and `TETHER_ROUTERS`
    /// (each replaces what
    /// it names; an empty or unset variable changes nothing).
    pub fn apply_env(&mut self) -> Result<(), ConfigError> {
        self.apply_vars(|k| std::env::var(k).ok())
    }

    /// [`Config::apply_env`] with the variables `get` gives (`None`: unset). A program
    /// whose own flags override some of them gives `None` for those, so that a flag wins
    /// over a variable, even one that would not parse.
    pub fn apply_vars(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let var = |k: &'static str| get(k).filter(|v| !v.trim().is_empty()).map(|v| (k, v));
        let bad = |var: &'static str, value: &str, reason: String| ConfigError::Env {
            var,
            value: value.to_string(),
            reason,
        };
        if let Some((k, v)) = var("TETHER_DOMAIN") {
            self.domain = v
                .trim()
                .parse()
                .map_err(|_| bad(k, &v, "a domain id is a number from 0 to 65535".into()))?;
        }
        if let Some((k, v)) = var("TETHER_DISCOVERY") {
            let r = v
                .parse()
                .map_err(|e: UnknownWord| bad(k, &v, e.to_string()))?;
            self.discovery.set_range(r);
        }
        if let Some((k, v)) = var("TETHER_ROUTERS") {
            self.routers.connect = v
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|r| parse_router(r).map(|_| r.to_string()))
                .collect::<Result<_, _>>()
                .map_err(|e| bad(k, &v, e))?;
        }
        if let Some((k, v)) = var("TETHER_PEERS") {
            self.discovery.peers = v
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(Self::parse_peer)
                .collect::<Result<_, _>>()
                .map_err(|e| bad(k, &v, e))?;
        }
        Ok(())
    }

    /// A static peer as `--peer` and `TETHER_PEERS` take it: `IP:PORT`, `[IPv6]:PORT` or
    /// `HOST:PORT` (resolved now; IPv4 preferred). The port is the peer's
    /// `transport.listen` port: give it a fixed one there (`--listen 0.0.0.0:7411`).
    pub fn parse_peer(s: &str) -> Result<SocketAddr, String> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(a);
        }
        if !s
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            return Err(format!(
                "peer '{s}' is not HOST:PORT (the port the peer listens on, e.g. 192.0.2.10:7411)"
            ));
        }
        let addrs: Vec<SocketAddr> = s
            .to_socket_addrs()
            .map_err(|e| format!("peer '{s}': cannot resolve: {e}"))?
            .collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| format!("peer '{s}': the name resolves to no address"))
    }

    /// An address to listen on as `--listen` takes it: `IP:PORT`, a port alone (every
    /// interface: `7411` is `0.0.0.0:7411`) or an address alone (any port).
    pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
        let s = s.trim();
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(a);
        }
        if let Ok(p) = s.parse::<u16>() {
            return Ok(SocketAddr::from((Ipv4Addr::UNSPECIFIED, p)));
        }
        if let Ok(ip) = s.parse::<std::net::IpAddr>() {
            return Ok(SocketAddr::new(ip, 0));
        }
        Err(format!(
            "'{s}' is not an address to listen on (IP:PORT, a port, or an IP; e.g. 0.0.0.0:7411)"
        ))
    }
}
