//! [internal] The experiments behind `tether bench`: tether against raw UDP on one machine
//! (latency, throughput), the tables of the papers it answers (batch, large, bulk, cipher,
//! fanout, rib, wan), each as a library function the `tether` binary calls.
//!
//! The crate is layered, lowest first, with no cycle:
//!
//! - `harness` (private): what every experiment shares. Peer processes
//!   and their line protocol, a private domain and registry per run, CPU pinning, CPU time
//!   and the hypervisor's steal, quantiles and confidence intervals, throwaway realms and
//!   `tether router` processes in them, and two hosts in network namespaces (built by
//!   `tether_testkit::netns`).
//! - one module per experiment: `loopback` (latency, throughput), `paper` (batch, large),
//!   `bulk`, `cipher`, `fanout`, `rib`. Each uses the harness and nothing of the others.
//! - `wan`, which runs `loopback`'s ping-pong and put loop over paths through routers.
//! - the dispatch: [`BenchArgs`] and [`run`] for `tether bench …`, [`PeerArgs`] and
//!   [`peer`], [`FanoutPeerArgs`] and [`fanout_peer`] for the hidden peers.
//!
//! **The binary's contract.** Experiments run their far sides as child processes by
//! re-running their own executable (`std::env::current_exe()`) with the hidden
//! subcommands [`PEER_SUBCOMMAND`] and [`FANOUT_SUBCOMMAND`], and the global flags
//! `--domain` and `--registry-dir`. The binary that calls [`run`] must therefore route
//! those subcommands to [`peer`] and [`fanout_peer`] with the configuration those flags
//! give, as `tether` does.
//!
//! Not a goal: a stable API. The entry points print their reports on stdout and return
//! `anyhow` errors, as the command they serve; nothing here is meant for other programs.

mod bulk;
mod cipher;
mod command;
mod fanout;
mod harness;
mod loopback;
mod lossy;
mod paper;
mod plot;
mod rib;
mod wan;

pub use command::{BenchArgs, PeerArgs, peer, run};
pub use fanout::{FanoutPeerArgs, peer as fanout_peer};
pub use harness::process::end_with_parent;

/// The hidden subcommand that runs [`peer`] (`tether bench-peer ROLE …`).
pub const PEER_SUBCOMMAND: &str = "bench-peer";

/// The hidden subcommand that runs [`fanout_peer`] (`tether bench-fanout pub|sub …`).
pub const FANOUT_SUBCOMMAND: &str = "bench-fanout";
