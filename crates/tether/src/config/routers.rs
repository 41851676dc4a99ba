//! `[routers]`: the routers a session dials (`docs/routing.md`), and the address form
//! `routers.connect`, `TETHER_ROUTERS` and `--router` take.

use serde::Deserialize;

/// `[routers]`: the routers a session dials, so that it meets sessions of other sites
/// (through NATs: the session dials out). Routers authenticate it by its credential, so a
/// session with routers needs `[security] keys`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RoutersConfig {
    /// `quic/HOST:PORT` of each router (the `quic/` may be left out).
    pub connect: Vec<String>,
    /// The largest engine datagram sent on a router link (frames on a QUIC stream: larger
    /// than a path's MTU is fine; fewer, larger fragments for large samples).
    pub datagram: usize,
    /// How long a router link may hear nothing before it is taken as dead and dialled
    /// again, in ms (QUIC's idle timeout; the lower of the session's and the router's
    /// `limits.link_idle_timeout_ms` applies). Raise both on links losing a third of their
    /// packets, where QUIC's probes can go unanswered for seconds.
    pub idle_timeout_ms: u64,
    /// The congestion controller of this session's side of its router links: `cubic`
    /// (the default: fastest on clean paths) or `bbr` (keeps its rate on a path that loses
    /// packets at random, as lossy Wi-Fi and radio links do; a router sends to the session
    /// with its own `congestion`). Only with a router that runs `bbr` too: a session that
    /// outruns its router's CUBIC links overflows the router's queues.
    pub congestion: String,
}

/// The default `routers.idle_timeout_ms` (and the router's `limits.link_idle_timeout_ms`).
pub const DEFAULT_LINK_IDLE_MS: u64 = 4000;

/// The shortest idle timeout a router link takes, in ms: two of its keep-alives (1 s).
pub const MIN_LINK_IDLE_MS: u64 = 2000;

impl Default for RoutersConfig {
    fn default() -> Self {
        RoutersConfig {
            connect: Vec::new(),
            datagram: 60_000,
            idle_timeout_ms: DEFAULT_LINK_IDLE_MS,
            congestion: "cubic".into(),
        }
    }
}

/// A router address as `routers.connect`, `TETHER_ROUTERS` and `--router` take it:
/// `quic/HOST:PORT` or `HOST:PORT`; gives `HOST:PORT`.
pub fn parse_router(s: &str) -> Result<String, String> {
    let s = s.trim();
    let rest = match s.split_once('/') {
        Some(("quic", rest)) => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "router '{s}': transport '{scheme}' is not supported (only quic/HOST:PORT)"
            ));
        }
        None => s,
    };
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err(format!(
            "router '{s}': no port (write quic/HOST:PORT, the port its `listen` gives, e.g. quic/192.0.2.1:7447)"
        ));
    };
    if host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .is_empty()
    {
        return Err(format!("router '{s}': no host (write quic/HOST:PORT)"));
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(rest.to_string()),
        _ => Err(format!("router '{s}': port '{port}' is not 1 to 65535")),
    }
}
