//! `tether`: the command-line tool, shaped like `ros2 topic`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use tether::{Config, Qos, Topic};

mod adapt;
mod cbor;
mod demo;
mod errors;
mod file;
mod interrupt;
mod keys;
mod listing;
mod names;
mod out;
mod payload;
mod receipt;
mod router;
mod stats;
mod topic;
mod why;
mod window;

#[derive(Parser, Debug)]
#[command(
    name = "tether",
    version,
    about = "Secure publish/subscribe for robots"
)]
struct Cli {
    /// Configuration file (TOML); also taken from TETHER_CONFIG.
    #[arg(long, global = true, env = "TETHER_CONFIG")]
    config: Option<PathBuf>,
    /// Domain id (overrides TETHER_DOMAIN and the config file): sessions of other domains
    /// never meet.
    #[arg(long, global = true)]
    domain: Option<u16>,
    /// How far discovery reaches: subnet (this host and the LAN, by multicast; the
    /// default), localhost (this host only), off (only --peer). Overrides TETHER_DISCOVERY
    /// and the config file's range, registry and multicast.
    #[arg(long, global = true, value_name = "RANGE", value_parser = parse_range)]
    discovery: Option<tether::DiscoveryRange>,
    /// A static peer, HOST:PORT (where the peer listens: give it --listen with a fixed
    /// port); repeatable. Replaces TETHER_PEERS (comma-separated) and the config's peers.
    #[arg(long, global = true, value_name = "HOST:PORT", value_parser = Config::parse_peer)]
    peer: Vec<std::net::SocketAddr>,
    /// A router to dial, quic/HOST:PORT (repeatable; needs --keys): the session meets the
    /// sessions of other sites through it, from behind NAT. Replaces TETHER_ROUTERS
    /// (comma-separated) and the config's routers.connect.
    #[arg(long, global = true, value_name = "quic/HOST:PORT", value_parser = parse_router_arg)]
    router: Vec<String>,
    /// The address to listen on: IP:PORT, a port alone (every interface) or an IP alone
    /// (default: 0.0.0.0:0, with --discovery localhost 127.0.0.1:0).
    #[arg(long, global = true, value_name = "ADDR", value_parser = Config::parse_listen)]
    listen: Option<std::net::SocketAddr>,
    /// Same-host registry directory (overrides the config file).
    #[arg(long, global = true)]
    registry_dir: Option<PathBuf>,
    /// Take part in a secure realm with this key bundle (from `tether keys issue`):
    /// peers must authenticate, and grants decide what matches.
    #[arg(long, global = true, value_name = "FILE", env = "TETHER_KEYS")]
    keys: Option<PathBuf>,
    /// The realm's revocation list (with --keys). Watched while the command runs: when the
    /// file changes it is reloaded, and members it revokes are dropped at once; a list
    /// older than the one in force (lower list serial) is refused with a warning.
    #[arg(long, global = true, value_name = "FILE", requires = "keys")]
    revocations: Option<PathBuf>,
    /// With --stats: every counter as one JSON object (zeros included) instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Publish samples on a topic.
    Pub(topic::PubArgs),
    /// Print the samples of a topic.
    Echo(topic::EchoArgs),
    /// List the topics in the domain.
    Topics(topic::TopicsArgs),
    /// Show a topic's publishers and subscribers with their QoS.
    Info(topic::InfoArgs),
    /// Print the rate of a topic.
    Hz(topic::RateArgs),
    /// Print the bandwidth of a topic.
    Bw(topic::RateArgs),
    /// Send a file reliably as a bulk transfer, optionally rate-limited; succeeds only
    /// when every receiver has confirmed it.
    Send(file::SendArgs),
    /// Receive files sent with `tether send` into a directory (SHA-256 checked, and
    /// confirmed to the sender).
    Recv(file::RecvArgs),
    /// Realm keys: a CA, credentials with topic grants, revocation.
    Keys(keys::KeysArgs),
    /// Measure tether against raw UDP on this machine.
    Bench(tether_bench::BenchArgs),
    /// Two sites and a cloud router on loopback, in a secure realm made for the demo: a
    /// robot's camera and telemetry, an operator's commands, with live rates and latency
    /// (--local: several processes on this host meeting by discovery).
    Demo(demo::DemoArgs),
    /// Run a router: joins sites over QUIC, routing sealed samples on topic keys only.
    Router(router::RouterArgs),
    /// (internal) The far side of a benchmark.
    #[command(name = tether_bench::PEER_SUBCOMMAND, hide = true)]
    BenchPeer(tether_bench::PeerArgs),
    /// (internal) Publishers or subscribers of `bench fanout`.
    #[command(name = tether_bench::FANOUT_SUBCOMMAND, hide = true)]
    BenchFanout(tether_bench::FanoutPeerArgs),
}

/// QoS flags shared by `pub`, `echo`, `hz` and `bw`; absent flags give the defaults
/// (reliable, keep_last 10, volatile), except that `echo`, `hz` and `bw` take reliability
/// and durability from the publishers they find unless given (`adapt.rs`).
#[derive(Args, Debug, Clone)]
pub(crate) struct QosArgs {
    /// Best-effort instead of reliable.
    #[arg(long, conflicts_with = "reliable")]
    best_effort: bool,
    /// Reliable (the default of `pub`; `echo`, `hz` and `bw` otherwise follow the
    /// publishers they find).
    #[arg(long)]
    reliable: bool,
    /// Volatile: no samples written before this endpoint matched (the default of `pub`;
    /// `echo`, `hz` and `bw` otherwise follow the publishers they find).
    #[arg(long, conflicts_with = "transient_local")]
    volatile: bool,
    /// Keep every sample (up to resource limits) instead of the last N.
    #[arg(long, conflicts_with = "keep_last")]
    keep_all: bool,
    /// Keep the last N samples (default 10).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    keep_last: Option<u32>,
    /// Transient-local durability: late joiners get the retained samples.
    #[arg(long)]
    transient_local: bool,
    /// Partition (communication group); repeatable.
    #[arg(long, value_name = "P")]
    partition: Vec<String>,
    /// Type name of the topic.
    #[arg(long = "type", value_name = "TYPE", default_value = "")]
    type_name: String,
}

impl QosArgs {
    pub(crate) fn qos(&self) -> Qos {
        let mut q = Qos::default();
        if self.best_effort {
            q = q.best_effort();
        }
        if self.reliable {
            q = q.reliable();
        }
        if self.keep_all {
            q = q.keep_all();
        }
        if let Some(n) = self.keep_last {
            q = q.keep_last(n);
        }
        if self.transient_local {
            q = q.transient_local();
        }
        if self.volatile {
            q = q.volatile();
        }
        q
    }

    /// A reader's QoS: without a history flag it keeps every sample received until the
    /// command takes it (up to 1,000 samples and 64 MiB; a reliable writer then waits), so
    /// that a burst of repairs arriving at once is not replaced in the cache before it is
    /// printed, while a slow terminal cannot make it hold a camera stream's gigabytes.
    pub(crate) fn reader_qos(&self) -> Qos {
        let q = self.qos();
        if self.history_given() {
            q
        } else {
            q.keep_all().max_samples(1000).max_bytes(64 << 20)
        }
    }

    /// Whether a history flag was given (`--keep-all`, `--keep-last N`).
    pub(crate) fn history_given(&self) -> bool {
        self.keep_all || self.keep_last.is_some()
    }

    pub(crate) fn topic(&self, name: &str) -> Topic {
        let mut t = Topic::new(name).type_name(self.type_name.clone());
        for p in &self.partition {
            t = t.partition(p.clone());
        }
        t
    }
}

/// A path made absolute, so that it means the same from another directory (another
/// terminal's).
fn absolute(p: &std::path::Path) -> std::ffi::OsString {
    std::path::absolute(p).map_or_else(|_| p.as_os_str().to_owned(), |a| a.into_os_string())
}

fn parse_range(s: &str) -> Result<tether::DiscoveryRange, String> {
    s.parse().map_err(|e: tether::UnknownWord| e.to_string())
}

/// `--router`: checked now, kept as given.
fn parse_router_arg(s: &str) -> Result<String, String> {
    tether::parse_router(s).map(|_| s.to_string())
}

impl Cli {
    /// The global flags given, but --listen (an address one process alone may take): what
    /// runs another `tether` with the same settings (`tether demo`'s processes, and the
    /// commands it tells the user to watch it with). Paths are made absolute.
    fn global_args(&self) -> Vec<std::ffi::OsString> {
        let mut v: Vec<std::ffi::OsString> = Vec::new();
        let mut path = |flag: &str, p: &Option<PathBuf>| {
            if let Some(p) = p {
                v.extend([flag.into(), absolute(p)]);
            }
        };
        path("--config", &self.config);
        path("--registry-dir", &self.registry_dir);
        path("--keys", &self.keys);
        path("--revocations", &self.revocations);
        if let Some(d) = self.domain {
            v.extend(["--domain".into(), d.to_string().into()]);
        }
        if let Some(r) = self.discovery {
            v.extend(["--discovery".into(), r.name().into()]);
        }
        for p in &self.peer {
            v.extend(["--peer".into(), p.to_string().into()]);
        }
        for r in &self.router {
            v.extend(["--router".into(), r.into()]);
        }
        v
    }

    /// The config file (or the defaults), then the environment (TETHER_DOMAIN,
    /// TETHER_DISCOVERY, TETHER_PEERS), then the flags: each overrides what came before.
    fn load_config(&self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(p) => Config::from_file(p)?,
            None => Config::default(),
        };
        // A variable whose flag is given is not even read: the flag wins.
        let overridden = |k: &str| match k {
            "TETHER_DOMAIN" => self.domain.is_some(),
            "TETHER_DISCOVERY" => self.discovery.is_some(),
            "TETHER_PEERS" => !self.peer.is_empty(),
            "TETHER_ROUTERS" => !self.router.is_empty(),
            _ => false,
        };
        c.apply_vars(|k| std::env::var(k).ok().filter(|_| !overridden(k)))?;
        if let Some(d) = self.domain {
            c.domain = d;
        }
        if let Some(r) = self.discovery {
            c.discovery.set_range(r);
        }
        if !self.peer.is_empty() {
            c.discovery.peers = self.peer.clone();
        }
        if !self.router.is_empty() {
            c.routers.connect = self.router.clone();
        }
        if let Some(l) = self.listen {
            c.transport.listen = Some(l);
        }
        if let Some(r) = &self.registry_dir {
            c.discovery.registry_dir = Some(r.clone());
        }
        if let Some(k) = &self.keys {
            c.security.keys = Some(k.clone());
            if c.security.mode == Some(tether::SecurityMode::Off) {
                c.security.mode = None;
            }
        }
        if let Some(r) = &self.revocations {
            c.security.revocations = Some(r.clone());
        }
        Ok(c)
    }
}

fn main() -> ExitCode {
    let m = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&m).unwrap_or_else(|e| e.exit());
    why::init_logging(matches!(cli.cmd, Cmd::Router(_)));
    let result = refuse_session_flags(&cli.cmd, &m).and_then(|()| run(cli));
    // Reports held back by the rate at the end of the run are said, not left out.
    why::say_suppressed();
    match result {
        Ok(code) => code,
        // The reader of our output went away: the end it asked for (`| head -3`).
        Err(e) if out::is_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            errors::print(&e);
            ExitCode::from(2)
        }
    }
}

/// The global flags that shape a session, by their ids: a command that opens none (`keys`,
/// `router`) refuses them when given on its command line rather than ignore them. (Their
/// environment variables, TETHER_KEYS and the like, may stay set for other commands.)
const SESSION_FLAGS: [&str; 9] = [
    "domain",
    "discovery",
    "peer",
    "router",
    "listen",
    "registry_dir",
    "keys",
    "revocations",
    "json",
];

/// Refuses the session flags given to a command that opens no session: `tether router
/// --domain 5` said "ok" and listened in domain 0.
fn refuse_session_flags(cmd: &Cmd, m: &clap::ArgMatches) -> anyhow::Result<()> {
    let (name, config_too, hint) = match cmd {
        Cmd::Router(_) => (
            "router",
            false,
            "a router takes its settings from its --config file (router.toml: docs/routing.md)",
        ),
        Cmd::Keys(_) => (
            "keys",
            true,
            "key management opens no session: give the realm's directory and the command's own flags (tether keys --help)",
        ),
        _ => return Ok(()),
    };
    let given = |id: &str| m.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    let mut flags: Vec<String> = SESSION_FLAGS
        .iter()
        .chain(config_too.then_some(&"config"))
        .filter(|id| given(id))
        .map(|id| format!("--{}", id.replace('_', "-")))
        .collect();
    flags.sort();
    if flags.is_empty() {
        return Ok(());
    }
    anyhow::bail!("tether {name} does not take {}: {hint}", flags.join(", "))
}

/// Whether a session of `cfg` has no way to meet a peer: no registry, no multicast, no
/// static peer, no router, and no fixed port a peer could name.
fn meets_nobody(cfg: &Config) -> bool {
    let d = &cfg.discovery;
    !d.uses_registry()
        && !d.uses_multicast()
        && d.peers.is_empty()
        && cfg.routers.connect.is_empty()
        && cfg.transport.listen.is_none_or(|a| a.port() == 0)
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    stats::set_json(cli.json);
    if let Cmd::Keys(a) = cli.cmd {
        // Key management needs no session and no configuration.
        return keys::run(a);
    }
    if let Cmd::Router(a) = cli.cmd {
        // A router is no session: it has its own configuration (router.toml).
        return router::run(cli.config, a);
    }
    let cfg = cli.load_config().context("loading configuration")?;
    let globals = cli.global_args();
    let meets = matches!(
        cli.cmd,
        Cmd::Pub(_)
            | Cmd::Echo(_)
            | Cmd::Topics(_)
            | Cmd::Info(_)
            | Cmd::Hz(_)
            | Cmd::Bw(_)
            | Cmd::Send(_)
            | Cmd::Recv(_)
    );
    if meets && meets_nobody(&cfg) {
        eprintln!(
            "warning: discovery is off (no registry, no multicast), and no --peer, --router \
             or --listen PORT is given: this session can meet nobody (docs/discovery.md)"
        );
    }
    match cli.cmd {
        Cmd::Pub(a) => topic::publish(cfg, a),
        Cmd::Echo(a) => topic::echo(cfg, a),
        Cmd::Topics(a) => topic::topics(cfg, a),
        Cmd::Info(a) => topic::info(cfg, a),
        Cmd::Hz(a) => topic::rate(cfg, a, false),
        Cmd::Bw(a) => topic::rate(cfg, a, true),
        Cmd::Send(a) => file::send(cfg, a),
        Cmd::Recv(a) => file::recv(cfg, a),
        Cmd::Bench(a) => tether_bench::run(cfg, a).map(|()| ExitCode::SUCCESS),
        Cmd::BenchPeer(a) => tether_bench::peer(cfg, a).map(|()| ExitCode::SUCCESS),
        Cmd::BenchFanout(a) => tether_bench::fanout_peer(cfg, a).map(|()| ExitCode::SUCCESS),
        Cmd::Demo(a) => demo::run(cfg, a, &globals),
        Cmd::Keys(a) => keys::run(a),
        Cmd::Router(_) => unreachable!("handled above"),
    }
}

#[cfg(test)]
mod qos_tests {
    use super::*;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        q: QosArgs,
    }

    /// Without a history flag a command's reader keeps what it has not taken, within 1,000
    /// samples and 64 MiB; a flag given wins.
    #[test]
    fn readers_keep_what_they_have_not_taken_within_bounds() {
        let q = T::parse_from(["t"]).q.reader_qos();
        assert_eq!(q.history(), tether::History::KeepAll);
        assert_eq!(q.max_samples_limit(), 1000);
        assert_eq!(q.max_bytes_limit(), 64 << 20);
        let q = T::parse_from(["t", "--keep-last", "5"]).q.reader_qos();
        assert_eq!(q.history(), tether::History::KeepLast(5));
    }
}
