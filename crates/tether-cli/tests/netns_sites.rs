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
//! this binary take turns: each makes five namespaces and runs a few processes on shared
//! CPUs.
//!
//! The tests are in `netns_sites/`: `crossing.rs` (data both ways, export lists),
//! `resilience.rs` (a router restart, loss on every link, addresses changing),
//! `refusals.rs` (a revoked member, a foreign router); `helpers.rs` has what they share.
#![cfg(target_os = "linux")]

mod common;

#[path = "netns_sites/helpers.rs"]
mod helpers;

#[path = "netns_sites/crossing.rs"]
mod crossing;
#[path = "netns_sites/refusals.rs"]
mod refusals;
#[path = "netns_sites/resilience.rs"]
mod resilience;
