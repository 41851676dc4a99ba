//! What every experiment shares: peer processes and their line protocol ([`process`]), a
//! private domain and registry per run ([`setup`]), CPU pinning, CPU time and the
//! hypervisor's steal ([`cpu`]), quantiles, summaries and confidence intervals ([`stats`]),
//! secure realms made for a run ([`realm`]), router processes in them ([`routers`]), and two hosts in network namespaces
//! ([`lan`]). Nothing here knows an experiment.

pub(crate) mod cpu;
pub(crate) mod lan;
pub(crate) mod process;
pub(crate) mod realm;
pub(crate) mod routers;
pub(crate) mod setup;
pub(crate) mod stats;

pub(crate) use process::Peer;
pub(crate) use realm::SecureSide;
pub(crate) use setup::{
    BenchCfg, bench_cfg, machine, secs, secure_bench_cfg, wait_matched, wall_ns,
};
