//! Two hosts for a benchmark: network namespaces joined by a veth pair (built by
//! `tether_testkit::netns`), the first for the sending side, the second for the receiving
//! side, with multicast routed over the link. With two CPUs or more the second host's
//! receive processing is steered (RPS) to CPU 1, so the kernel's per-receiver delivery
//! work is not charged to a sender pinned to CPU 0, as when the receivers are other
//! machines. Deleted on drop.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context, bail};
use tether_testkit::netns::{self, Namespace};

use super::cpu::{cpus, is_root};
use super::{BenchCfg, Peer};

/// The senders' address.
pub(crate) const SENDER_IP: Ipv4Addr = Ipv4Addr::new(10, 199, 9, 1);
/// The receivers' address.
pub(crate) const RECEIVER_IP: Ipv4Addr = Ipv4Addr::new(10, 199, 9, 2);

/// Namespace name prefixes: sender host, receiver host; the process id follows.
const PREFIXES: [&str; 2] = ["tfp", "tfs"];

/// The two hosts.
pub(crate) struct Lan {
    net: netns::Lan,
}

impl Lan {
    /// Creates the hosts (root only), first deleting those of earlier runs that were
    /// killed before they could. The veth passes GSO super-packets whole, as the
    /// throughput figures were measured.
    pub(crate) fn create() -> anyhow::Result<Lan> {
        Self::create_with(false)
    }

    /// [`create`](Self::create), with every datagram (and TCP segment) crossing as its own
    /// frame if `one_frame_per_datagram`, so a loss rule drops frames as a wire loses
    /// them (see `tether_testkit::netns::LanBuilder::one_frame_per_datagram`).
    pub(crate) fn create_with(one_frame_per_datagram: bool) -> anyhow::Result<Lan> {
        if !is_root() {
            bail!("creating network namespaces needs root");
        }
        netns::remove_stale(&PREFIXES);
        let id = std::process::id();
        let (vp, vs) = (format!("vfp{id}"), format!("vfs{id}"));
        let (vp, vs) = (&vp[..vp.len().min(15)], &vs[..vs.len().min(15)]);
        let mut builder = netns::Lan::builder(
            [
                &format!("{}{id}", PREFIXES[0]),
                &format!("{}{id}", PREFIXES[1]),
            ],
            [vp, vs],
        )
        .addrs([SENDER_IP, RECEIVER_IP], 24)
        .multicast(true);
        if one_frame_per_datagram {
            builder = builder.one_frame_per_datagram();
        }
        let net = builder.create()?;
        cleanup_on_signal([
            format!("{}{id}", PREFIXES[0]),
            format!("{}{id}", PREFIXES[1]),
        ]);
        if cpus() >= 2 {
            net.b()
                .ns()
                .run(
                    "sh",
                    &[
                        "-c",
                        &format!("echo 2 > /sys/class/net/{vs}/queues/rx-0/rps_cpus"),
                    ],
                )
                .context("steering receive processing to CPU 1")?;
        }
        Ok(Lan { net })
    }

    /// The senders' namespace.
    pub(crate) fn senders(&self) -> &Namespace {
        self.net.a().ns()
    }

    /// The receivers' namespace.
    pub(crate) fn receivers(&self) -> &Namespace {
        self.net.b().ns()
    }

    /// Drops `percent` % of the frames arriving at the receivers' host (0: none), at its
    /// veth's ingress, replacing the rule set before.
    pub(crate) fn set_receiver_loss(&self, percent: u8) -> anyhow::Result<()> {
        self.net
            .b()
            .set_incoming_loss(percent)
            .with_context(|| format!("setting {percent} % loss at the receivers' ingress"))
    }

    /// Holds every IPv4 packet each host receives for `delay` (NFQUEUE, needs
    /// `iptables`): the round trip between them takes `2 × delay` more. The delays last
    /// as long as the guards.
    pub(crate) fn delay_both(&self, delay: Duration) -> anyhow::Result<[netns::Delay; 2]> {
        if !netns::have_iptables() {
            bail!("a link delay needs iptables (the NFQUEUE target): apt-get install iptables");
        }
        let hold = |h: &netns::Host| {
            h.delay_incoming(delay, Duration::ZERO, 100)
                .with_context(|| format!("delaying what {} receives", h.name()))
        };
        Ok([hold(self.net.a())?, hold(self.net.b())?])
    }

    /// Frames the receivers' loss rule has dropped since it was set.
    pub(crate) fn receiver_dropped(&self) -> u64 {
        self.net.b().dropped_incoming().unwrap_or(0)
    }
}

/// Deletes namespaces `names` and ends the process (status 128 + the signal, as a shell
/// reports it) on SIGINT or SIGTERM: a bench stopped with Ctrl-C leaves no hosts behind.
/// Best effort: without the handler (it cannot be installed), the next run's
/// `remove_stale` deletes them.
fn cleanup_on_signal(names: [String; 2]) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            for n in &names {
                let _ = netns::ip(&["netns", "del", n]);
            }
            std::process::exit(128 + sig);
        }
    });
}

/// Runs `f` on a thread inside namespace `ns` (threads it starts are there too), and
/// returns what it returns.
pub(crate) fn in_namespace<R: Send>(
    ns: &Namespace,
    f: impl FnOnce() -> anyhow::Result<R> + Send,
) -> anyhow::Result<R> {
    use std::os::fd::AsRawFd;
    let path = format!("/run/netns/{}", ns.name());
    let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns on a valid namespace file descriptor; it moves only the calling
            // thread, which this closure owns until it returns.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("entering network namespace {}", ns.name()));
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| bail!("the thread in namespace {} panicked", ns.name()))
    })
}

/// A session for this process on the senders' host (call it from a thread in that
/// namespace, see [`in_namespace`]), and a `tether bench-peer ROLE` on the receivers' host
/// with that session as its static peer and the same `max_datagram`, pinned to CPU 1 if
/// `cpu1`. The sink's configuration file lives in `bc`'s directory.
pub(crate) fn sender_and_sink(
    lan: &Lan,
    bc: &BenchCfg,
    role: &str,
    busy: bool,
    cpu1: bool,
) -> anyhow::Result<(tether::Session, Peer)> {
    let mut mine = bc.base.clone();
    mine.transport.listen = Some(std::net::SocketAddr::new(SENDER_IP.into(), 0));
    mine.discovery.range = tether::DiscoveryRange::Off;
    let session = tether::Session::open(mine)?;
    let path = bc.dir().join("sink.toml");
    std::fs::write(
        &path,
        format!(
            "[transport]\nlisten = \"{RECEIVER_IP}:0\"\nmax_datagram = {}\n\
             [discovery]\nrange = \"off\"\npeers = [\"{}\"]\n",
            bc.base.transport.max_datagram,
            session.local_addr()
        ),
    )?;
    let mut args = vec![
        role.to_string(),
        "--domain".into(),
        bc.domain().to_string(),
        "--config".into(),
        path.display().to_string(),
    ];
    args.extend(bc.peer_args());
    if busy {
        args.push("--busy-poll".into());
    }
    if cpu1 {
        args.extend(["--cpu".into(), "1".into()]);
    }
    let peer = Peer::spawn_with(Some(lan.receivers()), crate::PEER_SUBCOMMAND, &args)?;
    Ok((session, peer))
}
