//! Two hosts for a benchmark: network namespaces joined by a veth pair (built by
//! `tether_testkit::netns`), the first for the sending side, the second for the receiving
//! side, with multicast routed over the link. With two CPUs or more the second host's
//! receive processing is steered (RPS) to CPU 1, so the kernel's per-receiver delivery
//! work is not charged to a sender pinned to CPU 0, as when the receivers are other
//! machines. Deleted on drop.

use std::net::Ipv4Addr;

use anyhow::{Context, bail};
use tether_testkit::netns::{self, Namespace};

use super::cpu::{cpus, is_root};

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
    /// killed before they could.
    pub(crate) fn create() -> anyhow::Result<Lan> {
        if !is_root() {
            bail!("creating network namespaces needs root");
        }
        netns::remove_stale(&PREFIXES);
        let id = std::process::id();
        let (vp, vs) = (format!("vfp{id}"), format!("vfs{id}"));
        let (vp, vs) = (&vp[..vp.len().min(15)], &vs[..vs.len().min(15)]);
        let net = netns::Lan::builder(
            [
                &format!("{}{id}", PREFIXES[0]),
                &format!("{}{id}", PREFIXES[1]),
            ],
            [vp, vs],
        )
        .addrs([SENDER_IP, RECEIVER_IP], 24)
        .multicast(true)
        .create()?;
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
