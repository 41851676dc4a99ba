//! What sizing datagrams to the path needs from the operating system: the don't-fragment bit,
//! and this host's own addresses.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use socket2::Socket;

/// Sets the don't-fragment bit on every datagram `socket` sends and stops the kernel from
/// fragmenting them (`IP_PMTUDISC_PROBE`): a datagram larger than the way out carries fails
/// with `EMSGSIZE` rather than leaving as IP fragments, and one larger than a link further on
/// is dropped there, so a path-MTU probe that arrives proves its size. The engine keeps
/// datagrams to other hosts within their path's size.
///
/// Returns whether the bit is set (false where the system has no such option; the engine
/// then does not probe).
pub fn set_dont_fragment(socket: &Socket, ipv6: bool) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use std::os::fd::AsRawFd;
        let set = |level, name, value: libc::c_int| {
            // SAFETY: setsockopt with a valid fd, a pointer to a live c_int and its size.
            unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    level,
                    name,
                    (&value as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                ) == 0
            }
        };
        let v4 = set(
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        );
        if ipv6 {
            // A dual-stack socket sends IPv4 too: both must hold.
            set(
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_PROBE,
            ) && v4
        } else {
            v4
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = (socket, ipv6);
        false
    }
}

/// True if `e` is the kernel refusing a datagram as larger than the way out carries.
pub fn is_too_big(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EMSGSIZE)
}

/// This host's own addresses (every interface's): peers there are on this host, and the
/// kernel carries datagrams to them through loopback.
pub fn host_addresses() -> Vec<IpAddr> {
    let mut out = vec![
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    #[cfg(unix)]
    {
        let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
        // SAFETY: getifaddrs fills `ifap` with a list we free below with freeifaddrs.
        if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
            return out;
        }
        let mut p = ifap;
        while !p.is_null() {
            // SAFETY: `p` is a node of the list getifaddrs returned, not yet freed.
            let ifa = unsafe { &*p };
            p = ifa.ifa_next;
            if ifa.ifa_addr.is_null() {
                continue;
            }
            // SAFETY: ifa_addr points to a sockaddr whose family says its real type.
            let ip = unsafe {
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))))
                    }
                    libc::AF_INET6 => {
                        let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        Some(IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)))
                    }
                    _ => None,
                }
            };
            if let Some(ip) = ip.filter(|ip| !out.contains(ip)) {
                out.push(ip);
            }
        }
        // SAFETY: the list getifaddrs allocated, freed once.
        unsafe { libc::freeifaddrs(ifap) };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_has_loopback_and_its_interfaces() {
        let a = host_addresses();
        assert!(a.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
        // Every address found is one this host can bind.
        for ip in a.iter().filter(|ip| ip.is_ipv4()) {
            std::net::UdpSocket::bind((*ip, 0)).unwrap_or_else(|e| panic!("bind {ip}: {e}"));
        }
    }

    #[test]
    fn dont_fragment_keeps_loopback_datagrams_whole() {
        let s = Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        s.bind(&std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
            .unwrap();
        assert!(set_dont_fragment(&s, false));
        let to = s.local_addr().unwrap();
        // Loopback's MTU is 65,536: the largest UDP datagram (65,507) fits.
        s.send_to(&vec![0u8; 65_000], &to).unwrap();
    }
}
