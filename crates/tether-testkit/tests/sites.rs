//! The two-site NAT network of `tether_testkit::netns::sites`, proved with plain UDP
//! sockets before any router runs on it: the NATs hide their sites and let only replies
//! in, an address change gets a new mapping, loss, cuts and delay act on the link and the
//! direction they name, and nothing is left behind. Needs root and nftables (and iptables
//! for the delay); each test says why and passes otherwise.
#![cfg(target_os = "linux")]

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tether_testkit::netns::sites::{Direction, Link, Site, Sites};
use tether_testkit::netns::{self, Namespace, have_iptables, have_nft, is_root};

const ECHO_PORT: u16 = 7000;

/// Whether the tests can run here; says why not.
fn ready() -> bool {
    if !is_root() {
        tether_testkit::skip!("skipped: creating network namespaces needs root");
        return false;
    }
    if !have_nft() {
        tether_testkit::skip!(
            "skipped: nft (nftables) is not installed; the NATs and loss rules need it"
        );
        return false;
    }
    true
}

/// A UDP socket of namespace `ns`, bound to `addr`: opened by a thread that enters the
/// namespace (a socket belongs to the namespace it was created in, whichever thread uses
/// it afterwards), so the test's own thread stays where it is.
fn socket_in(ns: &Namespace, addr: impl Into<SocketAddr>) -> UdpSocket {
    let addr = addr.into();
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter().expect("entering the namespace");
            UdpSocket::bind(addr).expect("binding")
        })
        .join()
        .expect("the binding thread")
    })
}

/// The cloud's echo: answers each datagram with its own text and the source address it
/// came from, as a STUN server tells a client its public mapping; stops when dropped.
struct Echo {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Echo {
    fn start(sites: &Sites) -> Echo {
        let addr = SocketAddr::from((sites.cloud_addr(), ECHO_PORT));
        let sock = socket_in(sites.cloud(), addr);
        // Bounds each wait, so the thread notices the stop flag.
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while !flag.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    let _ = sock.send_to(format!("{text} {from}").as_bytes(), from);
                }
            }
        });
        Echo {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Probe numbers, so that a late answer to an earlier probe is not taken for this one's.
static PROBE: AtomicU64 = AtomicU64::new(0);

/// Asks the echo at `to` from `sock` up to `tries` times, waiting `wait` for each answer:
/// the address the echo saw (the public mapping), or `None` if no answer came.
fn ask(sock: &UdpSocket, to: SocketAddr, tries: u32, wait: Duration) -> Option<SocketAddr> {
    sock.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 256];
    for _ in 0..tries {
        let n = PROBE.fetch_add(1, Ordering::Relaxed).to_string();
        sock.send_to(n.as_bytes(), to).expect("sending a probe");
        let end = Instant::now() + wait;
        while Instant::now() < end {
            let Ok(len) = sock.recv(&mut buf) else { break };
            let text = String::from_utf8_lossy(&buf[..len]);
            if let Some(seen) = text.strip_prefix(&format!("{n} ")) {
                return Some(seen.parse().expect("an address"));
            }
        }
    }
    None
}

/// [`ask`] for a path that works: ten tries of half a second.
fn public_mapping(sock: &UdpSocket, to: SocketAddr) -> SocketAddr {
    ask(sock, to, 10, Duration::from_millis(500)).expect("the echo answers")
}

/// Whether `sock` receives anything within `wait`.
fn receives(sock: &UdpSocket, wait: Duration) -> bool {
    sock.set_read_timeout(Some(wait)).unwrap();
    sock.recv(&mut [0u8; 256]).is_ok()
}

/// Drops `sites` and checks that none of its namespaces is left.
fn drop_and_check(sites: Sites) {
    let names: Vec<String> = sites.names().map(String::from).into();
    drop(sites);
    let left = netns::list().unwrap();
    assert!(!left.iter().any(|n| names.contains(n)), "left: {left:?}");
}

fn wildcard() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
}

/// Each site reaches the cloud through its NAT, which the cloud sees as the sender (the
/// inside port kept) and can answer; the links have the MTU asked for. The cloud cannot
/// reach a site host: no route to it, and with one added the NAT refuses to forward; an
/// answer from another port than the one the site wrote to is not let in either; and site
/// A cannot reach site B's host.
#[test]
fn sites_reach_the_cloud_through_their_nats_and_nobody_reaches_in() {
    if !ready() {
        return;
    }
    let t0 = Instant::now();
    let sites = Sites::builder("tsn").mtu(1400).create().unwrap();
    for (ns, dev) in [(sites.site(Site::A).ns(), "lan"), (sites.cloud(), "wanb")] {
        let link = ns.ip(&["link", "show", dev]).unwrap();
        assert!(String::from_utf8_lossy(&link.stdout).contains("mtu 1400"));
    }
    let echo = Echo::start(&sites);
    let a = socket_in(sites.site(Site::A).ns(), wildcard());
    let b = socket_in(sites.site(Site::B).ns(), wildcard());
    let seen_a = public_mapping(&a, echo.addr);
    let seen_b = public_mapping(&b, echo.addr);
    assert_eq!(seen_a.ip(), Site::A.public_addr());
    assert_eq!(seen_b.ip(), Site::B.public_addr());
    assert_eq!(seen_a.port(), a.local_addr().unwrap().port(), "port kept");

    // Only the address and port the site wrote to may answer.
    let other = socket_in(sites.cloud(), (sites.cloud_addr(), 0));
    other.send_to(b"unasked", seen_a).unwrap();
    assert!(
        !receives(&a, Duration::from_millis(300)),
        "an unasked sender got in"
    );

    // No route to the inside: the send fails at once.
    let inside_a = SocketAddr::from((sites.site(Site::A).addr(), seen_a.port()));
    let e = other.send_to(b"in", inside_a).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NetworkUnreachable, "{e}");
    // With one, the NAT refuses what no inside flow asked for.
    let via = Site::A.public_addr().to_string();
    sites
        .cloud()
        .ip(&["route", "add", "10.10.0.0/16", "via", &via, "dev", "wana"])
        .unwrap();
    other.send_to(b"in", inside_a).unwrap();
    assert!(
        !receives(&a, Duration::from_millis(300)),
        "the cloud got in"
    );
    assert!(sites.refused(Site::A).unwrap() >= 1);

    // Site A cannot reach site B's host, by its inside or its public address.
    let b_port = b.local_addr().unwrap().port();
    let to_b = SocketAddr::from((sites.site(Site::B).addr(), b_port));
    a.send_to(b"across", to_b).unwrap();
    a.send_to(b"across", seen_b).unwrap();
    assert!(
        !receives(&b, Duration::from_millis(300)),
        "site A reached site B"
    );

    drop(echo);
    drop_and_check(sites);
    eprintln!("done in {:?}", t0.elapsed());
}

/// Site A's host gets a new address under a running socket. The socket bound to the
/// wildcard address goes on: its next datagram leaves from the new address and gets a new
/// mapping at the NAT, the same public address with another port (the old mapping holds
/// the old one), and the answer reaches it; what the cloud sends to the old mapping is
/// lost. A socket bound to the old address, and a connected one, fail with "network
/// unreachable". The same holds for an address outside the site's subnet.
#[test]
fn a_new_site_address_gets_a_new_mapping_and_old_sockets_fail() {
    if !ready() {
        return;
    }
    let t0 = Instant::now();
    let mut sites = Sites::builder("tsc").create().unwrap();
    let echo = Echo::start(&sites);
    let host = sites.site(Site::A);
    let old = host.addr();
    let wild = socket_in(host.ns(), wildcard());
    let bound = socket_in(host.ns(), (old, 0));
    let connected = socket_in(host.ns(), wildcard());
    connected.connect(echo.addr).unwrap();
    let before = public_mapping(&wild, echo.addr);
    assert_eq!(before.ip(), Site::A.public_addr());
    public_mapping(&bound, echo.addr);
    connected.send(b"hello").unwrap();

    let new = Ipv4Addr::new(10, 10, 1, 77);
    sites.change_site_address(Site::A, new).unwrap();
    let host = sites.site(Site::A);
    assert_eq!(host.addr(), new);
    let addrs = host.ns().ip(&["-4", "addr", "show", "lan"]).unwrap();
    let addrs = String::from_utf8_lossy(&addrs.stdout);
    assert!(addrs.contains("10.10.1.77/24") && !addrs.contains(&format!("{old}/")));
    let after = public_mapping(&wild, echo.addr);
    assert_eq!(after.ip(), Site::A.public_addr());
    assert_ne!(
        after.port(),
        before.port(),
        "the old mapping still holds its port"
    );
    let table = sites.nat_table(Site::A).unwrap();
    assert!(
        table.contains(&format!("src={old} ")) && table.contains("src=10.10.1.77 "),
        "{table}"
    );

    let e = bound.send_to(b"old", echo.addr).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NetworkUnreachable, "{e}");
    let e = connected.send(b"old").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NetworkUnreachable, "{e}");
    let cloud = socket_in(sites.cloud(), (sites.cloud_addr(), 0));
    cloud.send_to(b"to the old mapping", before).unwrap();
    assert!(
        !receives(&wild, Duration::from_millis(300)),
        "the old mapping still led in"
    );

    // Another subnet behind the same NAT.
    let far = Ipv4Addr::new(10, 10, 9, 5);
    sites.change_site_address(Site::A, far).unwrap();
    let again = public_mapping(&wild, echo.addr);
    assert_eq!(again.ip(), Site::A.public_addr());

    drop(echo);
    drop_and_check(sites);
    eprintln!("done in {:?}", t0.elapsed());
}

/// 100 % loss on any link, in either direction, stops the echo of the site behind it and
/// counts the frames it dropped; 0 % lets it through again. One loss is set when the sites
/// are built.
#[test]
fn loss_on_each_link_and_direction_drops_everything_until_cleared() {
    if !ready() {
        return;
    }
    let t0 = Instant::now();
    let up_b = (Link::Uplink(Site::B), Direction::Up);
    let sites = Sites::builder("tsl")
        .loss(up_b.0, up_b.1, 100)
        .create()
        .unwrap();
    let echo = Echo::start(&sites);
    let socks = Site::ALL.map(|s| socket_in(sites.site(s).ns(), wildcard()));
    let quick = |s: Site| ask(&socks[s as usize], echo.addr, 3, Duration::from_millis(150));
    assert_eq!(
        quick(Site::B),
        None,
        "the loss set at creation let a probe through"
    );
    assert!(sites.dropped(up_b.0, up_b.1).unwrap() >= 3);
    sites.set_loss(up_b.0, up_b.1, 0).unwrap();
    assert!(quick(Site::B).is_some());
    for site in Site::ALL {
        for link in [Link::Inside(site), Link::Uplink(site)] {
            for dir in [Direction::Up, Direction::Down] {
                sites.set_loss(link, dir, 100).unwrap();
                assert_eq!(quick(site), None, "{link:?} {dir:?} let a probe through");
                let dropped = sites.dropped(link, dir).unwrap();
                assert!(dropped >= 3, "{link:?} {dir:?}: {dropped} dropped");
                sites.set_loss(link, dir, 0).unwrap();
                assert!(
                    ask(
                        &socks[site as usize],
                        echo.addr,
                        10,
                        Duration::from_millis(300)
                    )
                    .is_some(),
                    "{link:?} {dir:?} still dropping at 0 %"
                );
            }
        }
    }
    drop(echo);
    drop_and_check(sites);
    eprintln!("done in {:?}", t0.elapsed());
}

/// A cut uplink passes nothing either way (the cloud has no route to the NAT meanwhile)
/// and leaves the other site alone; restored, the flow resumes with the same public
/// mapping, and the cloud's neighbour entry is back.
#[test]
fn a_cut_uplink_passes_nothing_and_keeps_the_mapping() {
    if !ready() {
        return;
    }
    let t0 = Instant::now();
    let sites = Sites::builder("tsu").static_neighbours().create().unwrap();
    let echo = Echo::start(&sites);
    let a = socket_in(sites.site(Site::A).ns(), wildcard());
    let b = socket_in(sites.site(Site::B).ns(), wildcard());
    let before = public_mapping(&a, echo.addr);
    sites.set_link(Site::A, false).unwrap();
    assert_eq!(ask(&a, echo.addr, 3, Duration::from_millis(200)), None);
    public_mapping(&b, echo.addr);
    let cloud = socket_in(sites.cloud(), (sites.cloud_addr(), 0));
    let e = cloud.send_to(b"down", before).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NetworkUnreachable, "{e}");
    sites.set_link(Site::A, true).unwrap();
    assert_eq!(public_mapping(&a, echo.addr), before, "the mapping changed");
    let neigh = sites.cloud().ip(&["neigh", "show", "dev", "wana"]).unwrap();
    assert!(String::from_utf8_lossy(&neigh.stdout).contains("PERMANENT"));
    drop(echo);
    drop_and_check(sites);
    eprintln!("done in {:?}", t0.elapsed());
}

/// Delay on site A's uplink (up) and inside link (down) adds to its round trip and not to
/// site B's; removing one takes its part away. Needs iptables.
#[test]
fn delay_holds_the_link_and_direction_it_names() {
    if !ready() {
        return;
    }
    if !have_iptables() {
        tether_testkit::skip!("skipped: iptables is not installed; the NFQUEUE delay needs it");
        return;
    }
    let t0 = Instant::now();
    let (up, down) = (Duration::from_millis(40), Duration::from_millis(20));
    let mut sites = Sites::builder("tsd")
        .delay(Link::Uplink(Site::A), Direction::Up, up, Duration::ZERO)
        .delay(Link::Inside(Site::A), Direction::Down, down, Duration::ZERO)
        .create()
        .unwrap();
    let echo = Echo::start(&sites);
    let socks = Site::ALL.map(|s| socket_in(sites.site(s).ns(), wildcard()));
    // The least of five round trips: scheduling only ever adds.
    let rtt = |s: Site| {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                public_mapping(&socks[s as usize], echo.addr);
                t.elapsed()
            })
            .min()
            .unwrap()
    };
    let both = rtt(Site::A);
    assert!(both >= up + down, "{both:?}");
    let b = rtt(Site::B);
    assert!(b < down, "site B delayed: {b:?}");
    sites
        .set_delay(
            Link::Uplink(Site::A),
            Direction::Up,
            Duration::ZERO,
            Duration::ZERO,
        )
        .unwrap();
    assert_eq!(
        sites.delay_stats(Link::Uplink(Site::A), Direction::Up),
        None
    );
    let one = rtt(Site::A);
    assert!(one >= down && one < up + down, "{one:?}");
    let stats = sites
        .delay_stats(Link::Inside(Site::A), Direction::Down)
        .unwrap();
    // `passed` counts a packet after its verdict, which may be after the socket had it.
    assert!(stats.queued >= 10, "{stats:?}");
    eprintln!("round trips: both delays {both:?}, site B {b:?}, inside only {one:?}");
    drop(echo);
    drop_and_check(sites);
    eprintln!("done in {:?}", t0.elapsed());
}

/// A panic while the sites live still deletes their namespaces; and creating them deletes
/// those a killed run of the same prefix left (named after a process that is gone).
#[test]
fn namespaces_go_on_panic_and_stale_ones_at_creation() {
    if !ready() {
        return;
    }
    // Above the kernel's pid_max (at most 2^22): no such process can exist.
    let stale = "tspc4999999";
    netns::ip(&["netns", "add", stale]).unwrap();
    let mut names = Vec::new();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let sites = Sites::builder("tsp").create().unwrap();
        names = sites.names().map(String::from).into();
        panic!("on purpose, with the sites alive");
    }));
    let left = netns::list().unwrap();
    let _ = netns::ip(&["netns", "del", stale]);
    assert!(caught.is_err());
    assert_eq!(names.len(), 5);
    assert!(!left.iter().any(|n| names.contains(n)), "left: {left:?}");
    assert!(
        !left.iter().any(|n| n == stale),
        "the stale namespace stayed"
    );
}
