//! Two robot sites behind NATs and a cloud, in network namespaces: the network of issue
//! 19's tests (routers joining sites across NATs over QUIC).
//!
//! ```text
//!  site A host --lan 10.10.1.0/24-- NAT A --wan 198.18.0.1--+
//!    10.10.1.2            (10.10.1.1)                        cloud 198.18.0.100
//!  site B host --lan 10.10.2.0/24-- NAT B --wan 198.18.0.2--+
//!    10.10.2.2            (10.10.2.1)
//! ```
//!
//! Five namespaces and four veth pairs ("links"): each site's *inside* link (host to NAT)
//! and *uplink* (NAT to cloud). The inside addresses are private (10.0.0.0/8), the
//! "internet" is the benchmarking range 198.18.0.0/15, so nothing here can be mistaken
//! for, or leak to, a real network.
//!
//! - A site host has one address and a default route via its NAT.
//! - A NAT forwards, and masquerades what leaves on its uplink (nftables `ip` `nat`
//!   postrouting `masquerade`): the cloud sees the NAT's public address only. A forward
//!   filter lets in from the uplink only what belongs to a connection tracked as opened
//!   from inside, so nobody outside can open a flow to a site host (no port forwarding).
//!   Linux keeps the inside source port when it is free (so the mapping is in practice
//!   endpoint-independent) and lets a reply in only from the address and port the flow
//!   was sent to (address-and-port-dependent filtering): a common home or cellular NAT.
//! - The cloud has 198.18.0.100 (on its loopback, reached over either uplink) and a host
//!   route to each NAT's public address, and forwards between them, as the internet does:
//!   a NAT's public address is reachable from the other site, but only what answers a
//!   flow opened from inside gets through it (whether hole punching between the two NATs
//!   works is not tested here); nothing reaches 10.10.0.0/16, for which nobody outside
//!   has a route.
//!
//! Loss is per frame at a device's ingress (nftables `netdev` tables, one per device, so
//! a NAT's two links are set apart); delay is the NFQUEUE delay of [`Host::delay_incoming`] at IP
//! prerouting on the same device. Each [`Link`] and [`Direction`] names the receiving
//! end: [`Direction::Up`] is toward the cloud.
//!
//! Device names are fixed (`lan`, `wan`, `wana`, `wanb`): each namespace has its own set,
//! and the veth pairs are created in their namespaces directly, never in the host's.
//! Namespace names are PREFIX ROLE PID (`{prefix}sa{pid}`: roles `sa`, `sb` for the site
//! hosts, `na`, `nb` for the NATs, `c` for the cloud), so [`remove_stale`] deletes those
//! of killed runs; [`SitesBuilder::create`] does so first.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::delay::delay_on;
use super::{
    Delay, DelayStats, Host, Namespace, NetnsError, ip, is_root, mac, remove_stale, share,
};

/// The cloud's address (on its loopback; reached over either uplink).
pub const CLOUD_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 100);

/// The inside link's device, on the site host and on its NAT.
const LAN: &str = "lan";

/// The uplink's device on the NAT.
const WAN: &str = "wan";

/// The namespace roles, in the order of [`Sites::names`].
const ROLES: [&str; 5] = ["sa", "sb", "na", "nb", "c"];

/// One of the two sites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Site {
    /// Site A: 10.10.1.0/24 behind 198.18.0.1.
    A,
    /// Site B: 10.10.2.0/24 behind 198.18.0.2.
    B,
}

impl Site {
    /// Both sites.
    pub const ALL: [Site; 2] = [Site::A, Site::B];

    fn index(self) -> usize {
        match self {
            Site::A => 0,
            Site::B => 1,
        }
    }

    /// 1 for A, 2 for B: the third byte of the inside subnet, the last of the public
    /// address.
    fn number(self) -> u8 {
        self.index() as u8 + 1
    }

    /// The site host's address when created: 10.10.N.2 (N = 1 for A, 2 for B), in
    /// 10.10.N.0/24.
    pub fn first_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(10, 10, self.number(), 2)
    }

    /// The NAT's inside address, the site host's default gateway: 10.10.N.1.
    pub fn gateway(self) -> Ipv4Addr {
        Ipv4Addr::new(10, 10, self.number(), 1)
    }

    /// The NAT's public address, the source the cloud sees: 198.18.0.N.
    pub fn public_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 0, self.number())
    }

    /// The cloud's end of this site's uplink.
    fn cloud_dev(self) -> &'static str {
        match self {
            Site::A => "wana",
            Site::B => "wanb",
        }
    }
}

/// A link of the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// Between a site's host and its NAT (the robot's Wi-Fi).
    Inside(Site),
    /// Between a site's NAT and the cloud (the site's internet access).
    Uplink(Site),
}

/// Which way along a [`Link`]: a rule for one direction sits at the ingress of the
/// receiving end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Toward the cloud: received by the NAT (inside link) or the cloud (uplink).
    Up,
    /// Toward the site host: received by the host (inside link) or the NAT (uplink).
    Down,
}

/// Two sites behind NATs and a cloud; every namespace (so every device and rule in it)
/// is deleted on drop, after the delays' handler threads have stopped.
///
/// A process spawned in a namespace ([`Host::command`], [`Namespace::command`]) keeps
/// that namespace alive, nameless, until it exits: end children before dropping.
#[derive(Debug)]
pub struct Sites {
    // First, so that it drops first: its rules and threads go before their namespaces.
    delays: Vec<(Link, Direction, Delay)>,
    hosts: [Host; 2],
    nats: [Namespace; 2],
    cloud: Namespace,
    static_neighbours: bool,
}

impl Sites {
    /// A topology whose namespaces are named after `prefix` (unique per test within a
    /// process, as the names also carry the process id): MTU 1,500, no loss, no delay.
    pub fn builder(prefix: &str) -> SitesBuilder {
        SitesBuilder {
            prefix: prefix.to_string(),
            mtu: None,
            one_frame_per_datagram: false,
            static_neighbours: false,
            loss: Vec::new(),
            delay: Vec::new(),
        }
    }

    /// The host of `site`: its namespace, its device (`lan`) and its current address.
    pub fn site(&self, site: Site) -> &Host {
        &self.hosts[site.index()]
    }

    /// The NAT of `site`.
    pub fn nat(&self, site: Site) -> &Namespace {
        &self.nats[site.index()]
    }

    /// The cloud, where a router listens.
    pub fn cloud(&self) -> &Namespace {
        &self.cloud
    }

    /// The cloud's address, [`CLOUD_ADDR`].
    pub fn cloud_addr(&self) -> Ipv4Addr {
        CLOUD_ADDR
    }

    /// The names of the five namespaces: site A's and B's hosts, NAT A's and B's, the
    /// cloud's.
    pub fn names(&self) -> [&str; 5] {
        [
            self.hosts[0].name(),
            self.hosts[1].name(),
            self.nats[0].name(),
            self.nats[1].name(),
            self.cloud.name(),
        ]
    }

    /// The namespace and device where a rule for `link` in `direction` goes: the
    /// receiving end's ingress.
    fn ingress(&self, link: Link, direction: Direction) -> (&Namespace, &'static str) {
        match (link, direction) {
            (Link::Inside(s), Direction::Up) => (self.nat(s), LAN),
            (Link::Inside(s), Direction::Down) => (self.site(s).ns(), LAN),
            (Link::Uplink(s), Direction::Up) => (&self.cloud, s.cloud_dev()),
            (Link::Uplink(s), Direction::Down) => (self.nat(s), WAN),
        }
    }

    /// Drops `percent` % of the frames crossing `link` in `direction` (none for 0), at
    /// random, counted, replacing the rule set before and starting its count again. Per
    /// frame at the receiver's ingress, as [`Host::drop_incoming`]; what the loss hits is
    /// one datagram per frame only with [`SitesBuilder::one_frame_per_datagram`], and ARP
    /// only without [`SitesBuilder::static_neighbours`].
    pub fn set_loss(
        &self,
        link: Link,
        direction: Direction,
        percent: u8,
    ) -> Result<(), NetnsError> {
        let (ns, dev) = self.ingress(link, direction);
        let table = format!("loss_{dev}");
        // Absent the first time: nothing to delete.
        let _ = ns.run("nft", &["delete", "table", "netdev", &table]);
        if percent == 0 {
            return Ok(());
        }
        ns.nft(&format!(
            "table netdev {table} {{\n  chain in {{\n    type filter hook ingress device \"{dev}\" priority 0;\n    {}counter drop\n  }}\n}}\n",
            share(percent)
        ))
    }

    /// Frames dropped on `link` in `direction` since [`Sites::set_loss`] set its rule (an
    /// error when none is set).
    pub fn dropped(&self, link: Link, direction: Direction) -> Result<u64, NetnsError> {
        let (ns, dev) = self.ingress(link, direction);
        let listing = ns.nft_list_family("netdev", &format!("loss_{dev}"))?;
        Ok(first_counter(&listing))
    }

    /// Holds every IPv4 packet crossing `link` in `direction` for `delay` plus a uniformly
    /// random part of `jitter` ([`Host::delay_incoming`], at the receiver's IP prerouting:
    /// after a loss rule of the same link and direction has let it through), replacing
    /// the delay set before; zero and zero removes it. Needs `iptables`
    /// ([`super::have_iptables`]); a thread of this process holds the packets until the
    /// delay is replaced or the sites drop.
    pub fn set_delay(
        &mut self,
        link: Link,
        direction: Direction,
        delay: Duration,
        jitter: Duration,
    ) -> Result<(), NetnsError> {
        // The old guard drops here: its rule goes and what it held is let go.
        self.delays
            .retain(|(l, d, _)| (*l, *d) != (link, direction));
        if delay.is_zero() && jitter.is_zero() {
            return Ok(());
        }
        let (ns, dev) = self.ingress(link, direction);
        let guard = delay_on(ns.name(), dev, delay, jitter, 100)?;
        self.delays.push((link, direction, guard));
        Ok(())
    }

    /// The counts of the delay on `link` in `direction`, if one is set.
    pub fn delay_stats(&self, link: Link, direction: Direction) -> Option<DelayStats> {
        self.delays
            .iter()
            .find(|(l, d, _)| (*l, *d) == (link, direction))
            .map(|(_, _, g)| g.stats())
    }

    /// Cuts `site`'s uplink (`false`) or restores it: the cloud's end of the veth pair
    /// goes down, so nothing crosses either way, as when the site's internet access
    /// fails somewhere past its NAT. The NAT's own end stays up (it only loses carrier),
    /// so the NAT keeps its mappings (connection-tracking entries, which Linux deletes
    /// when the masquerading device itself goes down) as long as their timeouts allow
    /// (30 s for a UDP flow that has had no reply, 120 s for one that has): a flow that
    /// resumes within them keeps its public port. While cut, the NAT drops what it sends
    /// up without a word, and the cloud has no route to the NAT (a send there fails with
    /// "network unreachable"). Restoring puts back the cloud's route (the kernel deletes a
    /// down device's routes) and its neighbour entry.
    pub fn set_link(&self, site: Site, up: bool) -> Result<(), NetnsError> {
        let dev = site.cloud_dev();
        self.cloud
            .ip(&["link", "set", "dev", dev, if up { "up" } else { "down" }])?;
        if up {
            self.cloud_route(site)?;
            if self.static_neighbours {
                pin(&self.cloud, dev, site.public_addr(), self.nat(site), WAN)?;
            }
        }
        Ok(())
    }

    /// Gives `site`'s host address `addr` in place of its current one on its inside link,
    /// as when a robot gets a new DHCP lease or joins another Wi-Fi network behind the same
    /// NAT, without touching any process: the old address is deleted, the new one added
    /// (as a /24), and the default route via the NAT put back (deleting the last address
    /// deletes it). `addr` may lie outside 10.10.N.0/24: the NAT then gets a host route to
    /// it and the host's default route is `onlink`. Processes see:
    ///
    /// - A socket bound to the wildcard address and not connected (quinn's, for a client)
    ///   sends its next datagram from the new address; the NAT has no mapping for it and
    ///   makes a new one. Its public port differs from the old mapping's whenever that one
    ///   still holds the port toward the same remote address and port (it does until it
    ///   times out: 30 s, or 120 s once replied to), so the cloud sees the same public
    ///   address with a new port: to QUIC, the peer's address changed (a NAT rebinding,
    ///   which a quinn server follows after validating the new path). Replies to the new
    ///   mapping reach the socket.
    /// - A socket bound to the old address, a connected socket whose source address the
    ///   kernel fixed at `connect`, or a send naming the old address as its source
    ///   (`IP_PKTINFO`) fails with "network unreachable" (`ENETUNREACH`): the program must
    ///   open a new socket (quinn: `Endpoint::rebind`).
    /// - What the cloud still sends to the old mapping is forwarded to the old address and
    ///   lost: nobody answers to it.
    ///
    /// The NAT's connection-tracking table is left as it is (the `conntrack` tool that
    /// could flush it is not installed here, and a new source address needs no flush to
    /// get a new mapping); [`Sites::nat_table`] shows it.
    pub fn change_site_address(&mut self, site: Site, addr: Ipv4Addr) -> Result<(), NetnsError> {
        let i = site.index();
        let old = self.hosts[i].addr;
        if addr == old {
            return Ok(());
        }
        let gateway = site.gateway();
        let host = &self.hosts[i];
        host.ns
            .ip(&["addr", "del", &format!("{old}/24"), "dev", LAN])?;
        host.ns
            .ip(&["addr", "add", &format!("{addr}/24"), "dev", LAN])?;
        host.ns.ip(&[
            "route",
            "replace",
            "default",
            "via",
            &gateway.to_string(),
            "dev",
            LAN,
            "onlink",
        ])?;
        let nat = &self.nats[i];
        // Present only if the old address was outside the subnet.
        let _ = nat.ip(&["route", "del", &format!("{old}/32"), "dev", LAN]);
        if !same_24(addr, gateway) {
            nat.ip(&[
                "route",
                "replace",
                &format!("{addr}/32"),
                "dev",
                LAN,
                "src",
                &gateway.to_string(),
            ])?;
        }
        if self.static_neighbours {
            let _ = nat.ip(&["neigh", "del", &old.to_string(), "dev", LAN]);
            pin(nat, LAN, addr, &host.ns, LAN)?;
            pin(&host.ns, LAN, gateway, nat, LAN)?;
        }
        self.hosts[i].addr = addr;
        Ok(())
    }

    /// Packets from outside that `site`'s NAT refused to forward inward (not part of a
    /// flow opened from inside).
    pub fn refused(&self, site: Site) -> Result<u64, NetnsError> {
        let listing = self.nat(site).nft_list("sites_nat_filter")?;
        Ok(first_counter(&listing))
    }

    /// `site`'s NAT's connection-tracking table (`/proc/net/nf_conntrack` in its
    /// namespace), one flow a line: each mapping shows the inside source and, after it,
    /// the reply tuple with the public port.
    pub fn nat_table(&self, site: Site) -> Result<String, NetnsError> {
        let out = self.nat(site).run("cat", &["/proc/net/nf_conntrack"])?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The cloud's route to `site`'s NAT.
    fn cloud_route(&self, site: Site) -> Result<(), NetnsError> {
        self.cloud
            .ip(&[
                "route",
                "replace",
                &format!("{}/32", site.public_addr()),
                "dev",
                site.cloud_dev(),
                "src",
                &CLOUD_ADDR.to_string(),
            ])
            .map(drop)
    }

    /// Creates `site`'s two veth pairs and configures both ends of each.
    fn wire(&self, site: Site, b: &SitesBuilder) -> Result<(), NetnsError> {
        let (host, nat, cloud) = (&self.hosts[site.index()], self.nat(site), &self.cloud);
        let cdev = site.cloud_dev();
        ip(&[
            "link",
            "add",
            LAN,
            "netns",
            host.name(),
            "type",
            "veth",
            "peer",
            "name",
            LAN,
            "netns",
            nat.name(),
        ])?;
        ip(&[
            "link",
            "add",
            WAN,
            "netns",
            nat.name(),
            "type",
            "veth",
            "peer",
            "name",
            cdev,
            "netns",
            cloud.name(),
        ])?;
        for (ns, dev) in [(&host.ns, LAN), (nat, LAN), (nat, WAN), (cloud, cdev)] {
            b.link_up(ns, dev)?;
        }
        let (gateway, public) = (site.gateway().to_string(), site.public_addr().to_string());
        host.ns
            .ip(&["addr", "add", &format!("{}/24", host.addr), "dev", LAN])?;
        host.ns.ip(&[
            "route", "add", "default", "via", &gateway, "dev", LAN, "onlink",
        ])?;
        nat.ip(&["addr", "add", &format!("{gateway}/24"), "dev", LAN])?;
        nat.ip(&["addr", "add", &format!("{public}/32"), "dev", WAN])?;
        let cloud_addr = CLOUD_ADDR.to_string();
        nat.ip(&[
            "route",
            "add",
            &format!("{cloud_addr}/32"),
            "dev",
            WAN,
            "src",
            &public,
        ])?;
        nat.ip(&["route", "add", "default", "via", &cloud_addr, "dev", WAN])?;
        forward(nat)?;
        nat.nft(&format!(
            "table ip sites_nat {{\n  chain postrouting {{\n    type nat hook postrouting priority srcnat;\n    oifname \"{WAN}\" masquerade\n  }}\n}}\n\
             table inet sites_nat_filter {{\n  chain forward {{\n    type filter hook forward priority filter;\n    iifname \"{WAN}\" ct state established,related accept\n    iifname \"{WAN}\" counter drop\n  }}\n}}\n"
        ))?;
        self.cloud_route(site)?;
        if self.static_neighbours {
            pin(&host.ns, LAN, site.gateway(), nat, LAN)?;
            pin(nat, LAN, host.addr, &host.ns, LAN)?;
            pin(nat, WAN, CLOUD_ADDR, cloud, cdev)?;
            pin(cloud, cdev, site.public_addr(), nat, WAN)?;
        }
        Ok(())
    }
}

/// How to build [`Sites`].
#[derive(Debug, Clone)]
#[must_use = "a SitesBuilder does nothing until create() is called"]
pub struct SitesBuilder {
    prefix: String,
    mtu: Option<u32>,
    one_frame_per_datagram: bool,
    static_neighbours: bool,
    loss: Vec<(Link, Direction, u8)>,
    delay: Vec<(Link, Direction, Duration, Duration)>,
}

impl SitesBuilder {
    /// Every veth's MTU (the kernel's 1,500 unless given).
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Every datagram crosses each link as its own frame, as
    /// [`super::LanBuilder::one_frame_per_datagram`]: for loss.
    pub fn one_frame_per_datagram(mut self) -> Self {
        self.one_frame_per_datagram = true;
        self
    }

    /// Each end of each link knows the other's MAC address from the start (permanent
    /// neighbour entries, kept across [`Sites::change_site_address`] and
    /// [`Sites::set_link`]), as [`super::LanBuilder::static_neighbours`]: a loss rule then
    /// drops datagrams, not the ARP exchanges before them.
    pub fn static_neighbours(mut self) -> Self {
        self.static_neighbours = true;
        self
    }

    /// `percent` % loss on `link` in `direction` from the start ([`Sites::set_loss`]);
    /// turns on [`SitesBuilder::one_frame_per_datagram`] and
    /// [`SitesBuilder::static_neighbours`], which loss is meant with.
    pub fn loss(mut self, link: Link, direction: Direction, percent: u8) -> Self {
        self.loss.push((link, direction, percent));
        self.one_frame_per_datagram = true;
        self.static_neighbours = true;
        self
    }

    /// `delay` plus up to `jitter` on `link` in `direction` from the start
    /// ([`Sites::set_delay`]; needs `iptables`).
    pub fn delay(
        mut self,
        link: Link,
        direction: Direction,
        delay: Duration,
        jitter: Duration,
    ) -> Self {
        self.delay.push((link, direction, delay, jitter));
        self
    }

    /// Deletes the namespaces of killed runs with this prefix ([`remove_stale`]), then
    /// creates the five namespaces, the links, addresses, routes, NAT rules, loss and
    /// delay. What was created before a failure is deleted again.
    pub fn create(self) -> Result<Sites, NetnsError> {
        if !is_root() {
            return Err(NetnsError::NotRoot);
        }
        let prefixes = ROLES.map(|r| format!("{}{r}", self.prefix));
        remove_stale(&prefixes.each_ref().map(String::as_str));
        let id = std::process::id();
        let ns = |i: usize| Namespace::create(&format!("{}{id}", prefixes[i]));
        let (sa, sb, na, nb, c) = (ns(0)?, ns(1)?, ns(2)?, ns(3)?, ns(4)?);
        let host = |ns, site: Site| Host {
            ns,
            dev: LAN.to_string(),
            addr: site.first_addr(),
        };
        // From here a failure drops `sites`, which deletes every namespace.
        let mut sites = Sites {
            delays: Vec::new(),
            hosts: [host(sa, Site::A), host(sb, Site::B)],
            nats: [na, nb],
            cloud: c,
            static_neighbours: self.static_neighbours,
        };
        sites
            .cloud
            .ip(&["addr", "add", &format!("{CLOUD_ADDR}/32"), "dev", "lo"])?;
        forward(&sites.cloud)?;
        for site in Site::ALL {
            sites.wire(site, &self)?;
        }
        for &(link, direction, percent) in &self.loss {
            sites.set_loss(link, direction, percent)?;
        }
        for &(link, direction, delay, jitter) in &self.delay {
            sites.set_delay(link, direction, delay, jitter)?;
        }
        Ok(sites)
    }

    /// Sets `dev`'s MTU and segmentation as asked, and brings it up.
    fn link_up(&self, ns: &Namespace, dev: &str) -> Result<(), NetnsError> {
        if let Some(mtu) = self.mtu {
            ns.ip(&["link", "set", dev, "mtu", &mtu.to_string()])?;
        }
        if self.one_frame_per_datagram {
            ns.ip(&["link", "set", dev, "gso_max_segs", "1"])?;
        }
        ns.ip(&["link", "set", dev, "up"]).map(drop)
    }
}

/// Turns on IPv4 forwarding in `ns` (each namespace has its own switch, off at first).
fn forward(ns: &Namespace) -> Result<(), NetnsError> {
    ns.run("sysctl", &["-qw", "net.ipv4.ip_forward=1"])
        .map(drop)
}

/// A permanent neighbour entry in `ns`: `addr` on `dev` is the MAC address of `peer_dev`
/// in `peer`.
fn pin(
    ns: &Namespace,
    dev: &str,
    addr: Ipv4Addr,
    peer: &Namespace,
    peer_dev: &str,
) -> Result<(), NetnsError> {
    let mac = mac(peer, peer_dev)?;
    ns.ip(&[
        "neigh",
        "replace",
        &addr.to_string(),
        "lladdr",
        &mac,
        "dev",
        dev,
        "nud",
        "permanent",
    ])
    .map(drop)
}

/// Whether `a` and `b` share their first 24 bits.
fn same_24(a: Ipv4Addr, b: Ipv4Addr) -> bool {
    a.octets()[..3] == b.octets()[..3]
}

/// The packet count of the first `counter` in an nftables listing (0 if none).
fn first_counter(listing: &str) -> u64 {
    listing
        .split("counter packets ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
