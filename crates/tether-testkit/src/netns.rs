//! Two hosts on one machine: Linux network namespaces joined by a veth pair.
//!
//! The integration tests and the benchmarks that need a real link (multicast on an
//! interface, a lossy, duplicating or reordering path, a second host's CPU) build it here.
//! Nothing else in this crate touches the operating system: this module shells out to `ip`
//! (iproute2), `nft` (nftables) and `iptables`, every command bounded by a time limit, and
//! deletes what it made on drop (deleting a namespace also deletes its end of the veth
//! pair). Its only system calls of its own are those of [`Host::delay_incoming`], whose
//! thread enters a namespace ([`Namespace::enter`]) and serves a netfilter queue there.
//!
//! [`sites`] builds a larger topology on the same pieces: two robot sites, each behind a
//! NAT, and a cloud.
//!
//! Creating namespaces needs root; [`Lan::builder`]'s [`LanBuilder::create`] says so with
//! [`NetnsError::NotRoot`] so a test can skip with the reason.
//!
//! ```no_run
//! use std::net::Ipv4Addr;
//! use tether_testkit::netns::Lan;
//!
//! let lan = Lan::builder(["tta1", "ttb1"], ["vta", "vtb"])
//!     .addrs([Ipv4Addr::new(10, 199, 7, 1), Ipv4Addr::new(10, 199, 7, 2)], 24)
//!     .create()?;
//! lan.b().drop_outgoing(20)?;
//! let child = lan.a().command("ping").args(["-c", "1", "10.199.7.2"]).status();
//! # Ok::<(), tether_testkit::netns::NetnsError>(())
//! ```

use std::fmt;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
mod delay;
#[cfg(target_os = "linux")]
pub use delay::{Delay, DelayStats, MAX_HELD, have_iptables};
#[cfg(target_os = "linux")]
pub mod sites;

/// How long one `ip` or `nft` command may take before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a namespace operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum NetnsError {
    /// Creating network namespaces needs root (effective uid 0).
    NotRoot,
    /// An interface name longer than the kernel's 15 bytes.
    NameTooLong(String),
    /// A program could not be started (usually: not installed).
    Spawn {
        /// The program.
        program: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A command ran and failed.
    Failed {
        /// The command line.
        command: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A command did not finish within its time limit and was killed.
    TimedOut {
        /// The command line.
        command: String,
        /// The limit it overran.
        after: Duration,
    },
    /// A system call of this process failed (entering a namespace, a netfilter queue).
    Os {
        /// What was being done.
        what: String,
        /// What the operating system said.
        source: std::io::Error,
    },
}

impl fmt::Display for NetnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetnsError::NotRoot => f.write_str("creating network namespaces needs root"),
            NetnsError::NameTooLong(n) => write!(f, "interface name '{n}' exceeds 15 bytes"),
            NetnsError::Spawn { program, source } => write!(f, "running {program}: {source}"),
            NetnsError::Failed { command, stderr } => write!(f, "`{command}` failed: {stderr}"),
            NetnsError::TimedOut { command, after } => {
                write!(f, "`{command}` did not finish within {after:?}")
            }
            NetnsError::Os { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for NetnsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NetnsError::Spawn { source, .. } | NetnsError::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Whether this process runs as root (effective uid 0), from `/proc/self/status`.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let uids = s.lines().find(|l| l.starts_with("Uid:"))?.to_string();
            uids.split_whitespace().nth(2).map(|e| e == "0")
        })
        .unwrap_or(false)
}

/// Whether `nft` (nftables) is installed.
pub fn have_nft() -> bool {
    Command::new("nft")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Runs `cmd` with `stdin` as its input, killing it after `limit`; an exit status other
/// than success is [`NetnsError::Failed`].
pub fn run(cmd: &mut Command, stdin: Option<&[u8]>, limit: Duration) -> Result<Output, NetnsError> {
    let line = command_line(cmd);
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| NetnsError::Spawn {
            program: cmd.get_program().to_string_lossy().into_owned(),
            source,
        })?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A command that exits without reading its input is judged by its status.
        let _ = pipe.write_all(input);
    }
    // Drain the pipes on their own threads so a chatty command cannot block on a full one.
    let drain = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let end = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(NetnsError::TimedOut {
                    command: line,
                    after: limit,
                });
            }
        }
    };
    let output = Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    if !output.status.success() {
        return Err(NetnsError::Failed {
            command: line,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(output)
}

fn command_line(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `ip ARGS…`, bounded by [`COMMAND_TIMEOUT`].
pub fn ip(args: &[&str]) -> Result<Output, NetnsError> {
    run(Command::new("ip").args(args), None, COMMAND_TIMEOUT)
}

/// The names of the network namespaces that exist now.
pub fn list() -> Result<Vec<String>, NetnsError> {
    let out = ip(&["netns", "list"])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect())
}

/// Deletes the namespaces named PREFIX followed by the id of a process that no longer
/// exists, for each of `prefixes`: those of earlier runs killed before they could clean
/// up. Best effort: failures are ignored.
pub fn remove_stale(prefixes: &[&str]) {
    let Ok(names) = list() else { return };
    for name in names {
        let pid = prefixes
            .iter()
            .find_map(|p| name.strip_prefix(p))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = ip(&["netns", "del", &name]);
            }
        }
    }
}

/// Moves the calling thread (only it) into network namespace `name`: sockets it opens
/// afterwards are that namespace's.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn enter(name: &str) -> Result<(), NetnsError> {
    use std::os::fd::AsRawFd;
    let path = format!("/run/netns/{name}");
    let file = std::fs::File::open(&path).map_err(|source| NetnsError::Os {
        what: format!("opening {path}"),
        source,
    })?;
    // SAFETY: setns with a descriptor this function owns, open for the call; it changes
    // only the calling thread's network namespace.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(NetnsError::Os {
            what: format!("entering network namespace {name}"),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The MAC address of interface `dev` of namespace `ns` (`link/ether` of `ip -o link
/// show`).
fn mac(ns: &Namespace, dev: &str) -> Result<String, NetnsError> {
    let out = ns.ip(&["-o", "link", "show", dev])?;
    let listing = String::from_utf8_lossy(&out.stdout);
    listing
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .map(str::to_string)
        .ok_or_else(|| NetnsError::Failed {
            command: format!("ip -n {} -o link show {dev}", ns.name),
            stderr: format!("no link/ether in: {}", listing.trim()),
        })
}

/// The nftables match for `percent` % of packets chosen at random, before the statement
/// it guards: none for 100 % or more, as `numgen random mod 100` yields 0 to 99 and nft
/// refuses the comparison `< 100` as out of range.
fn share(percent: u8) -> String {
    if percent >= 100 {
        String::new()
    } else {
        format!("numgen random mod 100 < {percent} ")
    }
}

/// A network namespace, deleted on drop.
#[derive(Debug)]
pub struct Namespace {
    name: String,
}

impl Namespace {
    /// Creates namespace `name` (deleting a leftover of that name first) with its loopback
    /// up.
    pub fn create(name: &str) -> Result<Namespace, NetnsError> {
        if !is_root() {
            return Err(NetnsError::NotRoot);
        }
        let _ = ip(&["netns", "del", name]);
        ip(&["netns", "add", name])?;
        let ns = Namespace { name: name.into() };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Moves the calling thread (only it, for the rest of its life) into this namespace:
    /// sockets it opens afterwards are the namespace's. For a thread of the caller's own,
    /// such as a scoped one that sends or receives on a host.
    #[cfg(target_os = "linux")]
    pub fn enter(&self) -> Result<(), NetnsError> {
        enter(&self.name)
    }

    /// `ip -n NAME ARGS…`.
    pub fn ip(&self, args: &[&str]) -> Result<Output, NetnsError> {
        let mut cmd = Command::new("ip");
        cmd.arg("-n").arg(&self.name).args(args);
        run(&mut cmd, None, COMMAND_TIMEOUT)
    }

    /// `program` to run inside the namespace (`ip netns exec NAME program`); the caller
    /// adds arguments and decides how long it may run.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs `program ARGS…` inside the namespace, bounded by [`COMMAND_TIMEOUT`].
    pub fn run(&self, program: &str, args: &[&str]) -> Result<Output, NetnsError> {
        run(self.command(program).args(args), None, COMMAND_TIMEOUT)
    }

    /// Loads an nftables ruleset (`nft -f -`) inside the namespace.
    pub fn nft(&self, rules: &str) -> Result<(), NetnsError> {
        let mut cmd = self.command("nft");
        cmd.args(["-f", "-"]);
        run(&mut cmd, Some(rules.as_bytes()), COMMAND_TIMEOUT).map(drop)
    }

    /// The listing of nftables table `inet NAME` (with its counters).
    pub fn nft_list(&self, table: &str) -> Result<String, NetnsError> {
        self.nft_list_family("inet", table)
    }

    /// The listing of nftables table `FAMILY NAME` (with its counters).
    pub fn nft_list_family(&self, family: &str, table: &str) -> Result<String, NetnsError> {
        let out = self.run("nft", &["list", "table", family, table])?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// One side of a [`Lan`]: its namespace, its end of the veth pair and its address.
#[derive(Debug)]
pub struct Host {
    ns: Namespace,
    dev: String,
    addr: Ipv4Addr,
}

impl Host {
    /// The namespace.
    pub fn ns(&self) -> &Namespace {
        &self.ns
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        self.ns.name()
    }

    /// This side's veth interface.
    pub fn dev(&self) -> &str {
        &self.dev
    }

    /// This side's address.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// This side's MAC address (`link/ether` of `ip -o link show`).
    pub fn mac(&self) -> Result<String, NetnsError> {
        mac(&self.ns, &self.dev)
    }

    /// `program` to run on this host (see [`Namespace::command`]).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.ns.command(program)
    }

    /// Drops `percent` % of what this host sends on its veth, at random, counted: table
    /// `inet loss`, read back with [`Host::dropped`].
    pub fn drop_outgoing(&self, percent: u8) -> Result<(), NetnsError> {
        self.ns.nft(&format!(
            "table inet loss {{\n  chain out {{\n    type filter hook output priority 0;\n    oifname \"{}\" {}counter drop\n  }}\n}}\n",
            self.dev,
            share(percent)
        ))
    }

    /// The listing of table `inet loss` that [`Host::drop_outgoing`] installed, with the
    /// count of packets dropped so far.
    pub fn dropped(&self) -> Result<String, NetnsError> {
        self.ns.nft_list("loss")
    }

    /// Drops `percent` % of the frames arriving on this host's veth, at random, counted:
    /// table `netdev ingress_loss`, at the device's ingress hook, so each Ethernet frame (an
    /// IP fragment of a larger datagram) is lost on its own, as on Wi-Fi. Read back with
    /// [`Host::dropped_incoming`].
    pub fn drop_incoming(&self, percent: u8) -> Result<(), NetnsError> {
        self.ns.nft(&format!(
            "table netdev ingress_loss {{\n  chain in {{\n    type filter hook ingress device \"{}\" priority 0;\n    {}counter drop\n  }}\n}}\n",
            self.dev,
            share(percent)
        ))
    }

    /// Replaces the loss rule of [`Host::drop_incoming`] by one dropping `percent` % (none
    /// for 0), starting its count again: a benchmark steps through loss rates on one link.
    pub fn set_incoming_loss(&self, percent: u8) -> Result<(), NetnsError> {
        // Absent the first time: nothing to delete.
        let _ = self
            .ns
            .run("nft", &["delete", "table", "netdev", "ingress_loss"]);
        if percent == 0 {
            return Ok(());
        }
        self.drop_incoming(percent)
    }

    /// Sends `percent` % of the frames leaving this host's veth twice, at random, counted:
    /// table `netdev egress_dup`, at the device's egress hook.
    pub fn duplicate_outgoing(&self, percent: u8) -> Result<(), NetnsError> {
        self.ns.nft(&format!(
            "table netdev egress_dup {{\n  chain out {{\n    type filter hook egress device \"{0}\" priority 0;\n    {1}counter dup to \"{0}\"\n  }}\n}}\n",
            self.dev,
            share(percent)
        ))
    }

    /// Makes this host's veth a bottleneck: what it sends leaves at most at `bytes_per_sec`,
    /// through a tail-drop queue of `queue` bytes (`tc qdisc ... tbf`; the kernel has no
    /// netem, but a token bucket filter is what a slow link's router does). Deleted with the
    /// namespace.
    pub fn limit_outgoing(&self, bytes_per_sec: u64, queue: usize) -> Result<(), NetnsError> {
        let rate = format!("{}bit", bytes_per_sec * 8);
        // A burst of a few frames: the bucket releases at the rate, not in lumps.
        let burst = format!("{}", (bytes_per_sec / 250).max(3_000));
        let limit = format!("{queue}");
        let args = [
            "qdisc", "replace", "dev", &self.dev, "root", "tbf", "rate", &rate, "burst", &burst,
            "limit", &limit,
        ];
        run(self.ns.command("tc").args(args), None, COMMAND_TIMEOUT).map(drop)
    }

    /// Drops every multicast packet (224.0.0.0/4) this host sends or receives, counted:
    /// table `inet nomcast`, read back with [`Host::multicast_dropped`]. What a network
    /// whose switches do not forward multicast (or a firewall) does to discovery.
    pub fn block_multicast(&self) -> Result<(), NetnsError> {
        self.ns.nft(
            "table inet nomcast {\n  chain out {\n    type filter hook output priority 0;\n    ip daddr 224.0.0.0/4 counter drop\n  }\n  chain in {\n    type filter hook input priority 0;\n    ip daddr 224.0.0.0/4 counter drop\n  }\n}\n",
        )
    }

    /// Multicast packets [`Host::block_multicast`] has dropped so far, both ways.
    pub fn multicast_dropped(&self) -> Result<u64, NetnsError> {
        let listing = self.ns.nft_list("nomcast")?;
        Ok(listing
            .split("counter packets ")
            .skip(1)
            .filter_map(|r| r.split_whitespace().next()?.parse::<u64>().ok())
            .sum())
    }

    /// Frames [`Host::drop_incoming`] has dropped so far.
    pub fn dropped_incoming(&self) -> Result<u64, NetnsError> {
        let listing = self.ns.nft_list_family("netdev", "ingress_loss")?;
        Ok(listing
            .split("counter packets ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }

    /// Takes this host's veth down (`false`: no frame crosses, as an unplugged cable) or
    /// up again.
    pub fn set_link(&self, up: bool) -> Result<(), NetnsError> {
        self.ns
            .ip(&[
                "link",
                "set",
                "dev",
                &self.dev,
                if up { "up" } else { "down" },
            ])
            .map(drop)
    }
}

/// Two hosts joined by a veth pair; both namespaces are deleted on drop.
#[derive(Debug)]
pub struct Lan {
    a: Host,
    b: Host,
}

impl Lan {
    /// A LAN of namespaces `names` joined by veth interfaces `devs` (each at most 15
    /// bytes), with no addresses until [`LanBuilder::addrs`] gives them.
    pub fn builder(names: [&str; 2], devs: [&str; 2]) -> LanBuilder {
        LanBuilder {
            names: names.map(str::to_string),
            devs: devs.map(str::to_string),
            addrs: None,
            mtu: None,
            multicast: true,
            multicast_route: true,
            one_frame_per_datagram: false,
            static_neighbours: false,
        }
    }

    /// The first host.
    pub fn a(&self) -> &Host {
        &self.a
    }

    /// The second host.
    pub fn b(&self) -> &Host {
        &self.b
    }
}

/// How to build a [`Lan`].
#[derive(Debug, Clone)]
#[must_use = "a LanBuilder does nothing until create() is called"]
pub struct LanBuilder {
    names: [String; 2],
    devs: [String; 2],
    addrs: Option<([Ipv4Addr; 2], u8)>,
    mtu: Option<u32>,
    multicast: bool,
    multicast_route: bool,
    one_frame_per_datagram: bool,
    static_neighbours: bool,
}

impl LanBuilder {
    /// The two hosts' addresses, in a subnet of `prefix_len` bits.
    pub fn addrs(mut self, addrs: [Ipv4Addr; 2], prefix_len: u8) -> Self {
        self.addrs = Some((addrs, prefix_len));
        self
    }

    /// Every datagram (and TCP segment) crosses as its own frame, as on a wire, and is lost
    /// on its own by a loss rule: a veth otherwise passes a GSO super-packet of up to 64 KB
    /// whole (`gso_max_segs 1` on both ends makes the kernel segment it first). For loss
    /// tests; throughput benchmarks leave it off, as their figures were measured.
    pub fn one_frame_per_datagram(mut self) -> Self {
        self.one_frame_per_datagram = true;
        self
    }

    /// Each host knows the other's MAC address from the start (a permanent neighbour entry,
    /// once [`LanBuilder::addrs`] has given addresses), so no ARP exchange precedes their
    /// unicast: a loss rule drops ARP frames as well, and the kernel retries a lost exchange
    /// once a second, three times, before it drops what waited for it, so at 30 % loss
    /// both ways one direction went dark for seconds now and then (a writer rightly takes a
    /// reader silent for 3 s for a stalled one). For loss tests, which are about the
    /// datagrams that cross.
    pub fn static_neighbours(mut self) -> Self {
        self.static_neighbours = true;
        self
    }

    /// The veth pair's MTU (the kernel's default, 1,500, unless given).
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Whether the veth interfaces carry multicast, routed for 224.0.0.0/4 (default yes).
    pub fn multicast(mut self, on: bool) -> Self {
        self.multicast = on;
        self
    }

    /// Whether the hosts get a route for 224.0.0.0/4 on the veth (default yes). Without
    /// it, and with no default route, they are a robot's LAN without a gateway: the
    /// kernel has no route for a multicast group until a socket names the interface.
    pub fn multicast_route(mut self, on: bool) -> Self {
        self.multicast_route = on;
        self
    }

    /// Creates the namespaces, the veth pair and its addresses and routes. What was
    /// created before a failure is deleted again.
    pub fn create(self) -> Result<Lan, NetnsError> {
        if !is_root() {
            return Err(NetnsError::NotRoot);
        }
        if let Some(d) = self.devs.iter().find(|d| d.len() > 15) {
            return Err(NetnsError::NameTooLong(d.clone()));
        }
        let [na, nb] = &self.names;
        let (a, b) = (Namespace::create(na)?, Namespace::create(nb)?);
        let [da, db] = &self.devs;
        ip(&[
            "link", "add", da, "netns", na, "type", "veth", "peer", "name", db, "netns", nb,
        ])?;
        let addr = |i: usize| self.addrs.map_or(Ipv4Addr::UNSPECIFIED, |(a, _)| a[i]);
        let lan = Lan {
            a: Host {
                ns: a,
                dev: da.clone(),
                addr: addr(0),
            },
            b: Host {
                ns: b,
                dev: db.clone(),
                addr: addr(1),
            },
        };
        for h in [&lan.a, &lan.b] {
            self.configure(h)?;
        }
        if self.static_neighbours && self.addrs.is_some() {
            for (h, peer) in [(&lan.a, &lan.b), (&lan.b, &lan.a)] {
                let mac = peer.mac()?;
                h.ns.ip(&[
                    "neigh",
                    "replace",
                    &peer.addr.to_string(),
                    "lladdr",
                    &mac,
                    "dev",
                    &h.dev,
                    "nud",
                    "permanent",
                ])?;
            }
        }
        Ok(lan)
    }

    fn configure(&self, h: &Host) -> Result<(), NetnsError> {
        if let Some((_, len)) = self.addrs {
            h.ns.ip(&["addr", "add", &format!("{}/{len}", h.addr), "dev", &h.dev])?;
        }
        if let Some(mtu) = self.mtu {
            h.ns.ip(&["link", "set", &h.dev, "mtu", &mtu.to_string()])?;
        }
        if self.one_frame_per_datagram {
            h.ns.ip(&["link", "set", &h.dev, "gso_max_segs", "1"])?;
        }
        let mc = if self.multicast { "on" } else { "off" };
        h.ns.ip(&["link", "set", &h.dev, "up", "multicast", mc])?;
        if self.multicast && self.multicast_route {
            h.ns.ip(&["route", "add", "224.0.0.0/4", "dev", &h.dev])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command that overruns its limit is killed and says so; one that fails says how;
    /// one that is not installed says that.
    #[test]
    fn commands_are_bounded_and_their_failures_typed() {
        let t0 = Instant::now();
        let e = run(
            Command::new("sleep").arg("5"),
            None,
            Duration::from_millis(100),
        )
        .unwrap_err();
        assert!(matches!(e, NetnsError::TimedOut { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(4));
        let e = run(
            Command::new("sh").args(["-c", "echo nope >&2; exit 3"]),
            None,
            COMMAND_TIMEOUT,
        )
        .unwrap_err();
        match e {
            NetnsError::Failed { command, stderr } => {
                assert_eq!(stderr, "nope");
                assert!(command.starts_with("sh -c"), "{command}");
            }
            e => panic!("{e}"),
        }
        let e = run(
            &mut Command::new("no-such-tool-here"),
            None,
            COMMAND_TIMEOUT,
        )
        .unwrap_err();
        assert!(matches!(e, NetnsError::Spawn { .. }), "{e}");
        let out = run(&mut Command::new("cat"), Some(b"in"), COMMAND_TIMEOUT).unwrap();
        assert_eq!(out.stdout, b"in");
    }

    /// A namespace named after a process that is gone is deleted; one of a live process
    /// (this test's) is kept. Needs root to create namespaces.
    #[test]
    fn namespaces_of_dead_runs_are_removed() {
        if !is_root() {
            crate::skip!("skipped: creating network namespaces needs root");
            return;
        }
        // Above the kernel's pid_max (at most 2^22): no such process can exist.
        let dead = "tfp4999999";
        let live = format!("tfs{}", std::process::id());
        for ns in [dead, &live] {
            ip(&["netns", "add", ns]).unwrap();
        }
        remove_stale(&["tfp", "tfs"]);
        let names = list().unwrap();
        let _ = ip(&["netns", "del", &live]);
        let _ = ip(&["netns", "del", dead]);
        assert!(!names.iter().any(|n| n == dead), "{names:?}");
        assert!(names.contains(&live), "{names:?}");
    }

    /// A LAN's two hosts reach each other over the veth with the MTU asked for, each knows
    /// the other's MAC address when asked to, and its namespaces are gone once it drops.
    /// Needs root.
    #[test]
    fn lan_links_two_hosts_and_cleans_up() {
        if !is_root() {
            crate::skip!("skipped: creating network namespaces needs root");
            return;
        }
        let id = std::process::id() % 100_000;
        let names = [format!("tka{id}"), format!("tkb{id}")];
        let lan = Lan::builder([&names[0], &names[1]], ["vka", "vkb"])
            .addrs(
                [Ipv4Addr::new(10, 199, 8, 1), Ipv4Addr::new(10, 199, 8, 2)],
                24,
            )
            .mtu(1400)
            .static_neighbours()
            .create()
            .unwrap();
        let link = lan.a().ns().ip(&["link", "show", "vka"]).unwrap();
        assert!(String::from_utf8_lossy(&link.stdout).contains("mtu 1400"));
        let addr = lan.b().ns().ip(&["-4", "addr", "show", "vkb"]).unwrap();
        assert!(String::from_utf8_lossy(&addr.stdout).contains("10.199.8.2/24"));
        assert_eq!(lan.b().addr(), Ipv4Addr::new(10, 199, 8, 2));
        let neigh = lan.a().ns().ip(&["neigh", "show", "dev", "vka"]).unwrap();
        let neigh = String::from_utf8_lossy(&neigh.stdout);
        let mac = lan.b().mac().unwrap();
        assert!(
            neigh.contains(&format!("10.199.8.2 lladdr {mac} PERMANENT")),
            "{neigh}"
        );
        drop(lan);
        let left = list().unwrap();
        assert!(!left.iter().any(|n| names.contains(n)), "{left:?}");
    }

    /// 500 numbered datagrams from `a`, about 100 µs apart, each held 5 ms plus up to 5 ms
    /// at `b`'s ingress: all arrive, once, some out of order, none sooner than 5 ms after
    /// the first was sent; the handler's counts agree, and the rule is gone once the guard
    /// has dropped. Needs root and iptables.
    #[cfg(target_os = "linux")]
    #[test]
    fn delay_reorders_datagrams_and_cleans_up() {
        use std::net::{SocketAddr, UdpSocket};
        if !is_root() {
            crate::skip!("skipped: creating network namespaces needs root");
            return;
        }
        if !have_iptables() {
            crate::skip!("skipped: iptables is not installed");
            return;
        }
        const N: u32 = 500;
        let (base, jitter) = (Duration::from_millis(5), Duration::from_millis(5));
        let id = std::process::id() % 100_000;
        let names = [format!("tqa{id}"), format!("tqb{id}")];
        let lan = Lan::builder([&names[0], &names[1]], ["vqa", "vqb"])
            .addrs(
                [Ipv4Addr::new(10, 199, 9, 1), Ipv4Addr::new(10, 199, 9, 2)],
                24,
            )
            .create()
            .unwrap();
        let delay = lan.b().delay_incoming(base, jitter, 100).unwrap();
        let to = SocketAddr::from((lan.b().addr(), 40_000));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (got, first_sent) = std::thread::scope(|s| {
            let receiver = s.spawn(|| {
                lan.b().ns().enter().expect("entering b");
                let sock = UdpSocket::bind(to).expect("binding on b");
                // Bounds the wait for a datagram that does not come.
                sock.set_read_timeout(Some(Duration::from_secs(3)))
                    .expect("a read timeout");
                ready_tx.send(()).expect("the sender waits");
                let mut got = Vec::new();
                let mut buf = [0u8; 16];
                while got.len() < N as usize {
                    match sock.recv(&mut buf) {
                        Ok(4) => got.push((
                            u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]),
                            Instant::now(),
                        )),
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                got
            });
            ready_rx.recv().expect("the receiver is ready");
            let sender = s.spawn(|| {
                lan.a().ns().enter().expect("entering a");
                let sock = UdpSocket::bind((lan.a().addr(), 0)).expect("binding on a");
                let t0 = Instant::now();
                for i in 0..N {
                    sock.send_to(&i.to_be_bytes(), to).expect("sending");
                    std::thread::sleep(Duration::from_micros(100));
                }
                t0
            });
            (receiver.join().unwrap(), sender.join().unwrap())
        });
        let seqs: Vec<u32> = got.iter().map(|&(n, _)| n).collect();
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..N).collect::<Vec<_>>(), "each datagram once");
        let mut highest = 0;
        let late = seqs
            .iter()
            .filter(|&&n| {
                let overtaken = n < highest;
                highest = highest.max(n);
                overtaken
            })
            .count();
        assert!(late > 0, "no datagram arrived out of order");
        let earliest = got.iter().map(|&(_, t)| t).min().unwrap();
        assert!(
            earliest.duration_since(first_sent) >= base,
            "a datagram arrived {:?} after the first was sent",
            earliest.duration_since(first_sent)
        );
        let stats = delay.finish();
        eprintln!(
            "{late} of {N} datagrams arrived after a later one; first after {:?}; {stats:?}",
            earliest.duration_since(first_sent)
        );
        assert!(stats.queued >= u64::from(N), "{stats:?}");
        assert_eq!(stats.passed, stats.queued, "{stats:?}");
        assert!(stats.reordered > 0, "{stats:?}");
        assert_eq!(stats.errors, 0, "{stats:?}");
        let rules = lan
            .b()
            .ns()
            .run("iptables", &["-t", "mangle", "-S", "PREROUTING"])
            .unwrap();
        let rules = String::from_utf8_lossy(&rules.stdout);
        assert!(!rules.contains("NFQUEUE"), "{rules}");
        drop(lan);
        let left = list().unwrap();
        assert!(!left.iter().any(|n| names.contains(n)), "{left:?}");
    }
}
