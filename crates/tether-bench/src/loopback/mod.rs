//! `tether bench latency` and `tether bench throughput`: tether against raw UDP, two
//! processes on loopback, same run; and the peers they talk to (`tether bench-peer pong`,
//! `udp-echo`, `sink`, `sink-reliable`, `udp-sink`).

mod latency;
mod peers;
mod throughput;

pub(crate) use latency::{PingPong, latency};
pub(crate) use peers::{pong, sink, udp_echo, udp_sink};
pub(crate) use throughput::{Counts, ThroughputArgs, add, put_loop, received_rate, throughput};

/// The latency bench's pings, echoed by the `pong` peer on [`PONG`].
const PING: &str = "/bench/ping";
/// The `pong` peer's echoes.
const PONG: &str = "/bench/pong";
/// The throughput bench's topic, counted by the `sink` peers.
const THR: &str = "/bench/thr";

/// The receive modes a loopback bench measures.
fn receive_modes(mode: crate::command::ModeArg) -> (bool, bool) {
    use crate::command::ModeArg;
    (mode != ModeArg::BusyPoll, mode != ModeArg::Blocking)
}
