//! Whole-protocol tests of tether-core in the deterministic simulator.
//!
//! The tests are in `sim/`, by topic: delivery, matching, time-based QoS, fragments,
//! batching; `helpers.rs` has what they share.

#[path = "sim/helpers.rs"]
mod helpers;

#[path = "sim/batching.rs"]
mod batching;
#[path = "sim/delivery.rs"]
mod delivery;
#[path = "sim/fragments.rs"]
mod fragments;
#[path = "sim/matching.rs"]
mod matching;
#[path = "sim/timing.rs"]
mod timing;
