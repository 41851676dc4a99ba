//! The command line of `tether bench` and its hidden peer, and the thin dispatch from it to
//! the experiments.

use clap::{Args, Subcommand, ValueEnum};
use tether::Config;

use crate::harness::{cpu, secs};
use crate::{bulk, cipher, fanout, loopback, lossy, paper, rib, wan};

/// `tether bench`: which experiment, and its settings.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand, Debug)]
enum Which {
    /// Paper 001, Table 2: n reliable samples as fast as allowed, time until the reader's
    /// echo after the n-th: unbatched, coalescing and batching, interleaved.
    Batch {
        /// Sample counts.
        #[arg(long, value_delimiter = ',', default_value = "3000,10000")]
        counts: Vec<usize>,
        /// Sample sizes in bytes.
        #[arg(long, value_delimiter = ',', default_value = "256,512,1024")]
        sizes: Vec<usize>,
        /// Repetitions per row (after one warm-up).
        #[arg(long, default_value_t = 20)]
        reps: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Paper 001, Table 3: a 5 MB payload as chunks of each size, and as one sample that
    /// tether fragments; time until the reader's echo.
    Large {
        /// Total bytes.
        #[arg(long, default_value_t = 5 << 20)]
        total: usize,
        /// Chunk sizes in bytes (the total itself: one fragmented sample).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "512,1024,262144,524288,1048576,5242880"
        )]
        chunks: Vec<usize>,
        /// Repetitions per row (after one warm-up).
        #[arg(long, default_value_t = 20)]
        reps: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Paper 001, Table 4: a bulk transfer in 32 KB samples through a token-bucket flow
    /// controller at each setting, with a 1 kHz 64 B reliable realtime topic on the same
    /// session; completion time, rate, and the realtime latency with and without the bulk.
    Bulk {
        /// Bytes to transfer per setting.
        #[arg(long, default_value_t = 100 << 20)]
        total: u64,
        /// Bytes per bulk sample.
        #[arg(long, default_value_t = 32 << 10)]
        sample: usize,
        /// Tokens added per period, for each row (`unlimited` or a number).
        #[arg(long, value_delimiter = ',', default_value = "unlimited,30,20,10,5,1")]
        tokens: Vec<String>,
        /// The flow controller's period in ms.
        #[arg(long, default_value_t = 10)]
        period_ms: u64,
        /// Bytes per token.
        #[arg(long, default_value_t = 8192)]
        bytes_per_token: u64,
        /// Bulk samples in flight (the writer's keep-all history).
        #[arg(long, default_value_t = 8)]
        window: u32,
        /// Seconds of realtime traffic alone, before each transfer.
        #[arg(long, default_value_t = 2.0)]
        idle: f64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Paper 003: encryption and decryption speed of tether's suites and comparison ciphers
    /// in buffers of 1,024 … 10,240 bytes, with cycles per byte; tether's seal path against
    /// the raw primitive at 8 KB; openssl speed when installed.
    Cipher {
        /// Buffer sizes in bytes.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "1024,2048,3072,4096,5120,6144,7168,8192,9216,10240"
        )]
        sizes: Vec<usize>,
        /// Milliseconds per measurement (best of three).
        #[arg(long, default_value_t = 200)]
        millis: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Paper 000, Table 3: publishers each sending a 1 KB sample every 0.2 s to N
    /// subscribers (each its own session and keys), with security off (`plain`), tether's
    /// sender keys (`group`) and SROS2-like per-destination sealing (`pairwise`);
    /// communication time and the publisher's CPU per sample.
    Fanout(fanout::FanoutArgs),
    /// Reliable delivery across a link that loses frames (two network namespaces, veth, MTU
    /// 1500, loss at the receiver's ingress; root only): goodput of a reliable keep-all
    /// writer publishing as fast as allowed, and the time a 4 MiB sample takes, at each
    /// loss rate beside the lossless figure; with the cargo feature `zenoh`, Zenoh over TCP
    /// measured the same way beside it.
    Lossy(lossy::LossyArgs),
    /// Paper 004, its RIB experiment: advertise and subscribe time at 10,000 … 1,000,000
    /// routes (sans-IO router, in process), memory per route, and a session's start to its
    /// first message through a `tether router` process (security on).
    Rib(rib::RibArgs),
    /// Paper 004, Figure 7 and Table I: ping-pong RTT through one router and two chained
    /// routers beside direct, 64 B … 8,000 B and one 13 MB sample; throughput of 1,000 B
    /// samples through a router beside direct (loopback, security on).
    Wan(wan::WanArgs),
    /// Draws a bench's `--json` output (latency, throughput, fanout, cipher) as an SVG
    /// figure, with the papers' figures beside where they have one (docs/benchmarks.md).
    Plot {
        /// A file holding what a bench printed with `--json`.
        input: std::path::PathBuf,
        /// The SVG to write.
        #[arg(long, short)]
        out: std::path::PathBuf,
    },
    /// One-way latency (ping-pong RTT / 2) for 64 B, 1 KB and 64 KB samples, beside raw UDP
    /// (and in a secure realm beside plain, with `--secure` or `--keys`).
    Latency {
        /// Round trips measured per size (after 200 warm-up ones).
        #[arg(long, default_value_t = 5000)]
        samples: usize,
        /// Sample sizes in bytes.
        #[arg(long, value_delimiter = ',', default_value = "64,1024,64000")]
        sizes: Vec<usize>,
        /// Receive modes to measure.
        #[arg(long, value_enum, default_value = "both")]
        mode: ModeArg,
        /// Also measure in a secure realm, in turn with plain block by block, with the
        /// secure/plain ratio: a throwaway realm made for the run (a CA, a realm secret, two
        /// members granted /bench/**). With `--keys` instead, both processes use that bundle.
        #[arg(long)]
        secure: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Samples per second from one process to another: best effort and reliable keep-all,
    /// each unbatched and batched, beside raw UDP (and in a secure realm beside plain, with
    /// `--secure` or `--keys`).
    Throughput {
        /// Seconds per measurement.
        #[arg(long, default_value_t = 3.0)]
        duration: f64,
        /// Sample sizes in bytes.
        #[arg(long, value_delimiter = ',', default_value = "256,1024")]
        sizes: Vec<usize>,
        /// Receiver modes to measure.
        #[arg(long, value_enum, default_value = "both")]
        mode: ModeArg,
        /// The rows to measure (default: all five).
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "raw,best-effort,reliable,best-effort-batched,reliable-batched"
        )]
        qos: Vec<ShapeArg>,
        /// Where the two processes run: on loopback, or on two hosts (network namespaces
        /// joined by a veth pair, MTU 1500; root only).
        #[arg(long, value_enum, default_value = "loopback")]
        hosts: HostsArg,
        /// `transport.max_datagram` of both sessions (default: the configuration's).
        #[arg(long)]
        max_datagram: Option<usize>,
        /// Also measure in a secure realm, in turn with plain row by row, with the
        /// secure/plain ratio: a throwaway realm made for the run (a CA, a realm secret, two
        /// members granted /bench/**). With `--keys` instead, both processes use that bundle.
        #[arg(long)]
        secure: bool,
        /// Measurements of each tether row (plain and secure alternate, each leading in turn);
        /// the rates are over all of them.
        #[arg(long, default_value_t = 1)]
        reps: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// A row of `tether bench throughput`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum ShapeArg {
    /// Raw UDP `send_to`, one datagram per sample.
    Raw,
    /// Best effort, one datagram per sample.
    BestEffort,
    /// Reliable keep-all, one datagram per sample.
    Reliable,
    /// Best effort with `Qos::batching`.
    BestEffortBatched,
    /// Reliable keep-all with `Qos::batching`.
    ReliableBatched,
}

/// Where a two-process bench runs.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum HostsArg {
    /// Both processes on this host's loopback.
    Loopback,
    /// Two network namespaces joined by a veth pair (MTU 1500).
    Veth,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum ModeArg {
    Blocking,
    BusyPoll,
    Both,
}

/// `tether bench-peer`: the far side of a loopback or paper benchmark.
#[derive(Args, Debug)]
pub struct PeerArgs {
    #[arg(value_enum)]
    role: Role,
    /// Busy-poll receive.
    #[arg(long)]
    busy_poll: bool,
    /// Pin the process to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// The address raw UDP peers bind (default 127.0.0.1).
    #[arg(long)]
    ip: Option<std::net::IpAddr>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Role {
    /// Echo /bench/ping to /bench/pong.
    Pong,
    /// Echo raw UDP datagrams; prints its port.
    UdpEcho,
    /// Count /bench/thr (best effort); report on a stdin line.
    Sink,
    /// Count /bench/thr (reliable keep-all); report on a stdin line.
    SinkReliable,
    /// Count raw UDP datagrams; prints its port; report on a stdin line.
    UdpSink,
    /// Acknowledge every announced count of samples (the 001 paper's echo).
    Ack,
    /// Count bulk bytes and time the realtime topic (`bench bulk`).
    BulkSink,
    /// Count the lossy topic, checking order (`bench lossy`).
    LossySink,
    /// Publish a transient-local sample every millisecond (`bench rib`).
    Ticker,
    /// Count the lossy key over Zenoh's TCP transport, checking order (`bench lossy`
    /// with the feature `zenoh`); listens on `--ip` and prints its port.
    ZenohSink,
}

/// Runs the experiment `args` names, printing its report (a table, or JSON with
/// `--json`) on stdout. `cfg` is the user's configuration; each experiment moves its
/// sessions to a private domain and registry.
pub fn run(cfg: Config, args: BenchArgs) -> anyhow::Result<()> {
    match args.which {
        Which::Batch {
            counts,
            sizes,
            reps,
            json,
        } => paper::batch(cfg, &counts, &sizes, reps, json),
        Which::Large {
            total,
            chunks,
            reps,
            json,
        } => paper::large(cfg, total, &chunks, reps, json),
        Which::Bulk {
            total,
            sample,
            tokens,
            period_ms,
            bytes_per_token,
            window,
            idle,
            json,
        } => {
            let tokens = tokens
                .iter()
                .map(|t| match t.trim() {
                    "unlimited" => Ok(None),
                    n => n.parse::<u64>().map(Some).map_err(|_| {
                        anyhow::anyhow!("--tokens: '{n}' is neither a number nor unlimited")
                    }),
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            if period_ms == 0 || bytes_per_token == 0 {
                anyhow::bail!("--period-ms and --bytes-per-token must be at least 1");
            }
            bulk::run(
                cfg,
                bulk::BulkArgs {
                    total,
                    sample,
                    tokens,
                    period_ms,
                    bytes_per_token,
                    window,
                    idle_secs: secs("--idle", idle)?.as_secs_f64(),
                    json,
                },
            )
        }
        Which::Cipher {
            sizes,
            millis,
            json,
        } => cipher::run(&sizes, millis, json),
        Which::Fanout(a) => fanout::run(cfg, a),
        Which::Lossy(a) => lossy::run(cfg, a),
        Which::Rib(a) => rib::run(cfg, a),
        Which::Wan(a) => wan::run(cfg, a),
        Which::Plot { input, out } => crate::plot::plot(&input, &out),
        Which::Latency {
            samples,
            sizes,
            mode,
            secure,
            json,
        } => loopback::latency(cfg, samples, &sizes, mode, secure, json),
        Which::Throughput {
            duration,
            sizes,
            json,
            mode,
            qos,
            hosts,
            max_datagram,
            secure,
            reps,
        } => {
            if reps == 0 {
                anyhow::bail!("--reps must be at least 1");
            }
            let mut cfg = cfg;
            if let Some(m) = max_datagram {
                cfg.transport.max_datagram = m;
            }
            loopback::throughput(
                cfg,
                loopback::ThroughputArgs {
                    duration,
                    sizes,
                    mode,
                    shapes: qos,
                    hosts,
                    secure,
                    reps,
                    json,
                },
            )
        }
    }
}

/// `tether bench-peer ROLE`: the far side of a benchmark, run by the benchmark itself
/// (see [`crate::PEER_SUBCOMMAND`]). Exits when its stdin closes.
pub fn peer(mut cfg: Config, args: PeerArgs) -> anyhow::Result<()> {
    cfg.transport.busy_poll = args.busy_poll;
    if let Some(c) = args.cpu {
        cpu::pin(Some(c));
    }
    match args.role {
        Role::UdpEcho => loopback::udp_echo(args.busy_poll),
        Role::Pong => loopback::pong(cfg),
        Role::UdpSink => loopback::udp_sink(args.busy_poll, args.ip),
        Role::Ack => paper::ack_peer(cfg),
        Role::BulkSink => bulk::sink(cfg),
        Role::LossySink => lossy::sink(cfg),
        Role::Ticker => rib::ticker(cfg),
        Role::ZenohSink => lossy::zenoh_sink(args.ip),
        Role::Sink => loopback::sink(cfg, false),
        Role::SinkReliable => loopback::sink(cfg, true),
    }
}
