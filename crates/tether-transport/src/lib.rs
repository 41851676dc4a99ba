//! tether-transport: the only crate of tether with sockets and files.
//!
//! It moves bytes and decides nothing: which datagram goes where is `tether-core`'s call.
//! What is here:
//! - [`UdpTransport`]: one unicast UDP socket per session, used for everything the session
//!   sends (so a peer's address as seen by others is the address it can be reached at),
//!   with large kernel buffers, an optional busy-poll receive mode, zero-copy receive into
//!   shared [`bytes::Bytes`] chunks, and batched system calls ([`BatchIo`]: `sendmmsg` and
//!   `recvmmsg` with UDP GSO and GRO, so path-sized datagrams do not cost a call each);
//! - [`MulticastReceiver`]: LAN discovery on a multicast group and interface;
//! - [`Registry`]: same-host discovery without multicast, a per-domain directory of the
//!   sessions' addresses (loopback has no multicast flag on many hosts);
//! - [`quic`]: links between routers and from a session to its router over QUIC (quinn,
//!   rustls with aws-lc-rs), mutual TLS whose certificates carry the realm's credentials,
//!   moving whole frames (async, tokio).
//!
//! Later transports (shared memory) implement the same [`Transport`] trait.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use socket2::{Domain, Protocol, Socket, Type};

mod batch;
pub mod path;
pub mod quic;
mod registry;
pub mod text;
use batch::Batcher;
pub use batch::{BatchIo, IoStats, Outgoing, SendReport};
pub use registry::{MAX_ENTRIES, Registry, SHARED_REGISTRY_DIR, default_registry_dir};

/// Something that carries datagrams to addresses.
pub trait Transport: Send + Sync {
    /// Sends one datagram, `head` followed by `body`, to `dest` without joining them first.
    fn send(&self, dest: SocketAddr, head: &[u8], body: &[u8]) -> io::Result<()>;
    /// Sends `batch` in order, each datagram as [`send`](Self::send) would, in as few
    /// system calls as the transport can; says what failed.
    fn send_batch<T: Outgoing>(&self, batch: &[T]) -> SendReport
    where
        Self: Sized,
    {
        let mut r = SendReport::default();
        for d in batch {
            let joined;
            let body = if d.tail().is_empty() {
                d.body()
            } else {
                joined = [d.body(), d.tail()].concat();
                &joined[..]
            };
            match self.send(d.dest(), d.head(), body) {
                Ok(()) => r.sent += 1,
                Err(e) => {
                    r.failed += 1;
                    if e.raw_os_error() == Some(libc::EMSGSIZE) {
                        r.too_large.push((d.dest(), d.len()));
                    }
                }
            }
        }
        r
    }
    /// Largest datagram this transport carries.
    fn max_datagram(&self) -> usize;
    /// Where others reach us.
    fn local_addr(&self) -> SocketAddr;
}

/// Settings of a [`UdpTransport`].
#[derive(Debug, Clone)]
pub struct UdpOptions {
    /// Address to bind (port 0: any free port).
    pub bind: SocketAddr,
    /// Kernel receive buffer in bytes (root may exceed `rmem_max`).
    pub recv_buffer: usize,
    /// Kernel send buffer in bytes.
    pub send_buffer: usize,
    /// Largest datagram sent or received.
    pub max_datagram: usize,
    /// Interface address for multicast sends.
    pub multicast_if: Option<Ipv4Addr>,
    /// How system calls are batched.
    pub batch_io: BatchIo,
    /// Set don't-fragment on every datagram (`IP_PMTUDISC_PROBE`): a datagram larger than
    /// the interface's MTU then fails with `EMSGSIZE` ([`SendReport::too_large`]) instead
    /// of leaving as IP fragments. For path-sized datagrams.
    pub dont_fragment: bool,
}

impl Default for UdpOptions {
    fn default() -> Self {
        UdpOptions {
            bind: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
            recv_buffer: 16 << 20,
            send_buffer: 4 << 20,
            max_datagram: 65_000,
            multicast_if: None,
            batch_io: BatchIo::Offload,
            dont_fragment: true,
        }
    }
}

/// A unicast UDP socket.
#[derive(Debug)]
pub struct UdpTransport {
    socket: Socket,
    local: SocketAddr,
    max_datagram: usize,
    dont_fragment: bool,
    batch: Batcher,
}

/// Datagrams up to this size are copied into one buffer before sending; above it, two iovecs
/// let the kernel copy the payload once, straight from where it lies.
const SMALL: usize = 256;

/// Size of the chunks received datagrams are carved from.
pub(crate) const CHUNK: usize = 1 << 20;

impl UdpTransport {
    /// Binds a socket with the given options.
    pub fn bind(opts: &UdpOptions) -> io::Result<Self> {
        let domain = if opts.bind.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        set_buffer(&socket, libc::SO_RCVBUFFORCE, opts.recv_buffer, |s, n| {
            s.set_recv_buffer_size(n)
        });
        set_buffer(&socket, libc::SO_SNDBUFFORCE, opts.send_buffer, |s, n| {
            s.set_send_buffer_size(n)
        });
        socket.bind(&opts.bind.into())?;
        let dont_fragment =
            opts.dont_fragment && path::set_dont_fragment(&socket, opts.bind.is_ipv6());
        let batch = Batcher::new(&socket, domain, opts.batch_io);
        if let Some(ifa) = opts.multicast_if {
            socket.set_multicast_if_v4(&ifa)?;
            socket.set_multicast_loop_v4(true)?;
            socket.set_multicast_ttl_v4(1)?;
        }
        let local = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("bound socket has no IP address"))?;
        Ok(UdpTransport {
            socket,
            local,
            max_datagram: opts.max_datagram,
            dont_fragment,
            batch,
        })
    }

    /// True if datagrams leave with the don't-fragment bit and are never fragmented by this
    /// host ([`path::set_dont_fragment`]): what path-MTU probing needs.
    pub fn dont_fragment(&self) -> bool {
        self.dont_fragment
    }

    /// The address other sessions on this host should use: loopback when bound to the
    /// unspecified address.
    pub fn host_local_addr(&self) -> SocketAddr {
        let ip = match self.local.ip() {
            IpAddr::V4(v) if v.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(v) if v.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        SocketAddr::new(ip, self.local.port())
    }

    /// Blocking receives wait at most this long (None: forever).
    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.socket.set_read_timeout(d)
    }

    /// Waits until a datagram can be received or `timeout` has passed (true: readable).
    /// Unlike a socket's receive time-out, which the kernel counts in scheduler ticks (4 ms
    /// at HZ=250), this wakes on time to the microsecond: for timers a few milliseconds
    /// away, such as repair requests on a fast link.
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        use std::os::fd::AsRawFd;
        let mut fd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        let rc = unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
        match rc {
            0 => Ok(false),
            n if n > 0 => Ok(true),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Switches between blocking and non-blocking receives (busy-poll mode).
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.socket.set_nonblocking(on)
    }

    /// Receives one datagram into `chunk` and splits it off as shared bytes: no copy, and
    /// one allocation per megabyte received rather than one per datagram.
    pub fn recv(&self, chunk: &mut BytesMut) -> io::Result<(Bytes, SocketAddr)> {
        let r = recv_into(&self.socket, chunk, self.max_datagram, 0);
        if r.is_ok() {
            self.batch.count_recv();
        }
        r.map(|(d, from)| (d.freeze(), from))
    }

    /// Receives what is waiting (at least one datagram; blocking as [`recv`](Self::recv)
    /// does) into `chunk`, appending each with its source to `out`, in the order they
    /// arrived: one `recvmmsg` for one message while datagrams come one at a time, for up
    /// to 64 while they come in bursts; each GRO message split into the datagrams it
    /// joined. Returns how many were appended (0 if every one was dropped as truncated).
    pub fn recv_batch(
        &self,
        chunk: &mut BytesMut,
        out: &mut Vec<(BytesMut, SocketAddr)>,
    ) -> io::Result<usize> {
        self.recv_batch_with(chunk, out, false)
    }

    /// [`recv_batch`](Self::recv_batch) without waiting: `WouldBlock` if nothing is there.
    /// With [`wait_readable`](Self::wait_readable) after it, a receive that waits
    /// precisely, at no extra system call while datagrams keep coming.
    pub fn try_recv_batch(
        &self,
        chunk: &mut BytesMut,
        out: &mut Vec<(BytesMut, SocketAddr)>,
    ) -> io::Result<usize> {
        self.recv_batch_with(chunk, out, true)
    }

    fn recv_batch_with(
        &self,
        chunk: &mut BytesMut,
        out: &mut Vec<(BytesMut, SocketAddr)>,
        nowait: bool,
    ) -> io::Result<usize> {
        if self.batch.mmsg() {
            match self
                .batch
                .recv(&self.socket, chunk, self.max_datagram, out, nowait)
            {
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
                r => return r,
            }
        }
        let flags = if nowait { libc::MSG_DONTWAIT } else { 0 };
        let r = recv_into(&self.socket, chunk, self.max_datagram, flags);
        if r.is_ok() {
            self.batch.count_recv();
        }
        out.push(r?);
        Ok(1)
    }

    /// Counters of this socket's system calls.
    pub fn io_stats(&self) -> IoStats {
        self.batch.stats()
    }

    /// True while sends use UDP GSO (off with [`BatchIo`] other than `Offload`, on kernels
    /// without it, and after a device refused it).
    pub fn gso(&self) -> bool {
        self.batch.gso()
    }

    /// True if receives use UDP GRO.
    pub fn gro(&self) -> bool {
        self.batch.gro()
    }

    /// Wakes a thread blocked in [`recv`](Self::recv) on this socket (an empty datagram to
    /// ourselves, which receivers skip).
    pub fn wake(&self) {
        let _ = self.socket.send_to(&[], &self.host_local_addr().into());
    }
}

fn set_buffer(
    socket: &Socket,
    force_opt: libc::c_int,
    size: usize,
    fallback: impl Fn(&Socket, usize) -> io::Result<()>,
) {
    use std::os::fd::AsRawFd;
    let v = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt with a valid fd, a pointer to a live c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            force_opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        // Not root: the kernel caps at rmem_max/wmem_max, which is fine.
        let _ = fallback(socket, size);
    }
}

fn recv_into(
    socket: &Socket,
    chunk: &mut BytesMut,
    max: usize,
    flags: libc::c_int,
) -> io::Result<(BytesMut, SocketAddr)> {
    if chunk.capacity() == 0 {
        *chunk = BytesMut::with_capacity(CHUNK.max(max * 2));
    } else if chunk.capacity() - chunk.len() < max {
        // Reclaims the whole chunk when every datagram carved from it has been dropped
        // (memory stays hot: no page faults), else allocates a new one.
        chunk.reserve(max);
    }
    let spare = chunk.spare_capacity_mut();
    let (n, from) = socket.recv_from_with_flags(spare, flags)?;
    // SAFETY: recv_from initialised the first `n` bytes of the spare capacity.
    unsafe { chunk.set_len(chunk.len() + n) };
    let from = from
        .as_socket()
        .ok_or_else(|| io::Error::other("datagram from a non-IP address"))?;
    Ok((chunk.split(), from))
}

impl UdpTransport {
    /// One datagram, one system call.
    fn send_one(&self, dest: SocketAddr, head: &[u8], body: &[u8], tail: &[u8]) -> io::Result<()> {
        let addr = dest.into();
        let n = head.len() + body.len() + tail.len();
        if body.is_empty() && tail.is_empty() {
            self.socket.send_to(head, &addr).map(|_| ())
        } else if n <= SMALL {
            // For tiny datagrams one contiguous copy is cheaper than the kernel's iovec path.
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); SMALL];
            // SAFETY: head, body and tail fit in `buf` (n <= SMALL) and do not overlap it;
            // the first n bytes are initialised before the slice over them is made.
            let data = unsafe {
                let p = buf.as_mut_ptr().cast::<u8>();
                std::ptr::copy_nonoverlapping(head.as_ptr(), p, head.len());
                std::ptr::copy_nonoverlapping(body.as_ptr(), p.add(head.len()), body.len());
                std::ptr::copy_nonoverlapping(
                    tail.as_ptr(),
                    p.add(head.len() + body.len()),
                    tail.len(),
                );
                std::slice::from_raw_parts(p.cast_const(), n)
            };
            self.socket.send_to(data, &addr).map(|_| ())
        } else {
            let iov = [
                io::IoSlice::new(head),
                io::IoSlice::new(body),
                io::IoSlice::new(tail),
            ];
            self.socket.send_to_vectored(&iov, &addr).map(|_| ())
        }
    }
}

impl std::os::fd::AsFd for UdpTransport {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl Transport for UdpTransport {
    fn send(&self, dest: SocketAddr, head: &[u8], body: &[u8]) -> io::Result<()> {
        self.batch.count_send();
        self.send_one(dest, head, body, &[])
    }
    /// Groups consecutive datagrams to one destination into GSO messages (equal sizes, the
    /// last may be shorter) and sends up to 64 messages per `sendmmsg`; falls back to one
    /// call per datagram as [`BatchIo`] and the kernel say.
    fn send_batch<T: Outgoing>(&self, batch: &[T]) -> SendReport {
        let mut r = SendReport::default();
        self.batch.send(
            &self.socket,
            batch,
            |d| self.send_one(d.dest(), d.head(), d.body(), d.tail()),
            &mut r,
        );
        r
    }
    fn max_datagram(&self) -> usize {
        self.max_datagram
    }
    fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// Receives a multicast group on one interface (LAN discovery). Several sessions on one host
/// share the port.
#[derive(Debug)]
pub struct MulticastReceiver {
    socket: Socket,
    max_datagram: usize,
    batch: Batcher,
}

impl MulticastReceiver {
    /// Joins `group:port` on the interface with address `iface` (unspecified: the default).
    pub fn join(group: Ipv4Addr, port: u16, iface: Ipv4Addr) -> io::Result<Self> {
        if !group.is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{group} is not a multicast address"),
            ));
        }
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)).into())?;
        socket.join_multicast_v4(&group, &iface)?;
        socket.set_read_timeout(Some(Duration::from_millis(200)))?;
        let batch = Batcher::new(&socket, Domain::IPV4, BatchIo::Mmsg);
        Ok(MulticastReceiver {
            socket,
            max_datagram: 65_507,
            batch,
        })
    }

    /// Receives one datagram (times out after 200 ms with `WouldBlock`/`TimedOut`).
    pub fn recv(&self, chunk: &mut BytesMut) -> io::Result<(Bytes, SocketAddr)> {
        let r = recv_into(&self.socket, chunk, self.max_datagram, 0);
        if r.is_ok() {
            self.batch.count_recv();
        }
        r.map(|(d, from)| (d.freeze(), from))
    }

    /// Receives what is waiting (at least one datagram; blocking as [`recv`](Self::recv)
    /// does) into `chunk`, appending each with its source to `out`, in the order they
    /// arrived: one `recvmmsg` for one message while datagrams come one at a time, for up
    /// to 64 while they come in bursts; each GRO message split into the datagrams it
    /// joined. Returns how many were appended (0 if every one was dropped as truncated).
    pub fn recv_batch(
        &self,
        chunk: &mut BytesMut,
        out: &mut Vec<(BytesMut, SocketAddr)>,
    ) -> io::Result<usize> {
        if self.batch.mmsg() {
            match self
                .batch
                .recv(&self.socket, chunk, self.max_datagram, out, false)
            {
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
                r => return r,
            }
        }
        let r = recv_into(&self.socket, chunk, self.max_datagram, 0);
        if r.is_ok() {
            self.batch.count_recv();
        }
        out.push(r?);
        Ok(1)
    }

    /// Counters of this socket's system calls.
    pub fn io_stats(&self) -> IoStats {
        self.batch.stats()
    }

    /// True while sends use UDP GSO (off with [`BatchIo`] other than `Offload`, on kernels
    /// without it, and after a device refused it).
    pub fn gso(&self) -> bool {
        self.batch.gso()
    }

    /// True if receives use UDP GRO.
    pub fn gro(&self) -> bool {
        self.batch.gro()
    }
}

/// Puts the calling thread in the background scheduling class (Linux `SCHED_IDLE`, falling
/// back to nice 19): it runs only when no normal thread wants the CPU. For threads that move
/// bulk data, so they never delay realtime ones on a small machine.
pub fn background_thread() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a live, initialised sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
        return Ok(());
    }
    // SAFETY: gettid has no preconditions; setpriority with PRIO_PROCESS and a thread id
    // sets that thread's nice value.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The interface to discover on when none is configured: unspecified (the kernel picks it
/// by the route to `group`) when the host has a route for the group, or else the first IPv4
/// address of an interface that is up, not loopback and multicast-capable (a robot's LAN
/// without a default gateway has no route for any multicast group), or unspecified when
/// there is none.
pub fn multicast_interface_for(group: Ipv4Addr) -> Ipv4Addr {
    let routed = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|s| s.connect((group, 9)))
        .is_ok();
    if routed {
        return Ipv4Addr::UNSPECIFIED;
    }
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `ifap` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return Ipv4Addr::UNSPECIFIED;
    }
    let mut cur = ifap;
    let mut found = Ipv4Addr::UNSPECIFIED;
    let wanted = (libc::IFF_UP | libc::IFF_MULTICAST) as libc::c_uint;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let flags = ifa.ifa_flags;
        if ifa.ifa_addr.is_null()
            || flags & wanted != wanted
            || flags & libc::IFF_LOOPBACK as libc::c_uint != 0
        {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr of family sa_family.
        if i32::from(unsafe { (*ifa.ifa_addr).sa_family }) == libc::AF_INET {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            found = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            break;
        }
    }
    // SAFETY: frees the list returned by getifaddrs exactly once.
    unsafe { libc::freeifaddrs(ifap) };
    found
}

/// The IPv4 address of interface `name` (e.g. `eth0`), or `name` itself if it is an address.
pub fn interface_ipv4(name: &str) -> io::Result<Ipv4Addr> {
    if let Ok(ip) = name.parse::<Ipv4Addr>() {
        return Ok(ip);
    }
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `ifap` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut cur = ifap;
    let mut found = None;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() && !ifa.ifa_name.is_null() {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let n = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            // SAFETY: ifa_addr is non-null and points to a sockaddr of family sa_family.
            let fam = unsafe { (*ifa.ifa_addr).sa_family } as libc::c_int;
            if n.to_bytes() == name.as_bytes() && fam == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                found = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: frees the list returned by getifaddrs exactly once.
    unsafe { libc::freeifaddrs(ifap) };
    found.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface named {name} with an IPv4 address"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_roundtrip_and_wake() {
        let a = UdpTransport::bind(&UdpOptions::default()).unwrap();
        let b = UdpTransport::bind(&UdpOptions::default()).unwrap();
        a.send(b.local_addr(), b"hel", b"lo").unwrap();
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut chunk = BytesMut::new();
        let (d, from) = b.recv(&mut chunk).unwrap();
        assert_eq!(&d[..], b"hello");
        assert_eq!(from, a.local_addr());
        b.wake();
        let (d, _) = b.recv(&mut chunk).unwrap();
        assert!(d.is_empty());
    }

    #[test]
    fn interface_lookup() {
        assert_eq!(interface_ipv4("lo").unwrap(), Ipv4Addr::LOCALHOST);
        assert_eq!(
            interface_ipv4("10.1.2.3").unwrap(),
            Ipv4Addr::new(10, 1, 2, 3)
        );
        assert!(interface_ipv4("no-such-if0").is_err());
    }

    #[test]
    fn multicast_rejects_unicast_group() {
        assert!(MulticastReceiver::join(Ipv4Addr::LOCALHOST, 7400, Ipv4Addr::UNSPECIFIED).is_err());
    }
}
