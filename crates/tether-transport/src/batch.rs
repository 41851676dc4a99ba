//! Batched UDP system calls: `sendmmsg` with UDP GSO (`UDP_SEGMENT`) on the way out,
//! `recvmmsg` with UDP GRO (`UDP_GRO`) on the way in, and a fallback to one call per
//! datagram where the kernel lacks them or a device refuses them.
//!
//! Why not quinn-udp: its send takes one contiguous buffer per call, so tether's head +
//! shared body would be copied into it, and a fan-out of one datagram to several readers
//! costs a call each (it has no `sendmmsg`); its receive wants initialised buffers, where
//! ours lands datagrams straight in the chunk the engine's samples then share. The kernel
//! takes a GSO payload from any number of iovecs (it splits the byte stream at the segment
//! size), so here each datagram stays two iovecs (head, body), and one `sendmmsg` carries
//! GSO runs and single datagrams to any mix of destinations. Measured (docs/benchmarks.md,
//! issue 16): a GSO run costs the same either way (128–151 ns per 1,472 B datagram copied
//! for quinn-udp, 145–149 ns as iovecs here), a fan-out to 8 destinations 17 % less here
//! (1.95–2.06 µs per datagram against 2.40–2.45). What
//! quinn-udp learned is kept: GSO is probed on a throw-away socket; `EIO` from a GSO send
//! (a device without checksum offload, before Linux 6.11; an IPsec route) turns GSO off
//! for the socket and the datagrams go again one by one; `EINVAL` sends that run one by
//! one, and turns GSO off if they all go (a segment larger than the route's MTU is
//! refused alone too: then GSO stays); `ENOSYS` turns the batched calls off.

use std::io;
use std::mem::{MaybeUninit, size_of};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::{Buf, BytesMut};
use socket2::{SockAddr, Socket};

/// How a [`UdpTransport`](crate::UdpTransport) groups its system calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BatchIo {
    /// `sendmmsg`/`recvmmsg`, and UDP GSO/GRO where the kernel has them (the default).
    #[default]
    Offload,
    /// `sendmmsg`/`recvmmsg` without GSO or GRO.
    Mmsg,
    /// One system call per datagram.
    Single,
}

/// One datagram to send: [`head`](Outgoing::head) followed by [`body`](Outgoing::body),
/// to [`dest`](Outgoing::dest), sent without joining the two.
pub trait Outgoing {
    /// Where to.
    fn dest(&self) -> SocketAddr;
    /// The first bytes.
    fn head(&self) -> &[u8];
    /// The rest (may be empty).
    fn body(&self) -> &[u8];
    /// What follows the body (an authentication tag; usually empty).
    fn tail(&self) -> &[u8] {
        &[]
    }
    /// The datagram's length.
    fn len(&self) -> usize {
        self.head().len() + self.body().len() + self.tail().len()
    }
    /// Whether the datagram is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Outgoing for (SocketAddr, &[u8], &[u8]) {
    fn dest(&self) -> SocketAddr {
        self.0
    }
    fn head(&self) -> &[u8] {
        self.1
    }
    fn body(&self) -> &[u8] {
        self.2
    }
}

/// What became of a batch of datagrams.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "failed sends should be counted"]
pub struct SendReport {
    /// Datagrams the kernel took.
    pub sent: usize,
    /// Datagrams refused, [`too_large`](Self::too_large) included.
    pub failed: usize,
    /// Datagrams refused as larger than the path allows (`EMSGSIZE`: with don't-fragment
    /// set, larger than the interface's MTU): destination and size.
    pub too_large: Vec<(SocketAddr, usize)>,
}

/// Counters of a socket's batched I/O (for tests and diagnosis).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IoStats {
    /// Send system calls made.
    pub send_calls: u64,
    /// GSO messages sent (each several datagrams).
    pub gso_messages: u64,
    /// Receive system calls that returned data.
    pub recv_calls: u64,
    /// Of those, the ones that asked for several messages (the others asked for one: a
    /// receive asks for several while datagrams come in bursts, and now and then to see).
    pub recv_multi_calls: u64,
    /// Received GRO messages (each several datagrams).
    pub gro_messages: u64,
    /// Datagrams dropped as truncated (larger than the receive buffer).
    pub truncated: u64,
}

/// Most messages in one `sendmmsg`/`recvmmsg`.
const MAX_MSGS: usize = 64;
/// Most iovecs in one `sendmmsg` (all messages).
const MAX_IOVS: usize = 512;
/// Most segments in one GSO message (the kernel's `UDP_MAX_SEGMENTS` is 64 before Linux
/// 6.9, 128 since).
const MAX_SEGMENTS: usize = 64;
/// Most payload in one GSO message (an IPv4 datagram's limit; IPv6's is 20 bytes more).
const MAX_GSO_BYTES: usize = 65_507;
/// A GRO message is at most this long.
const GRO_BUF: usize = 1 << 16;
/// Receive buffer space one `recvmmsg` may use.
const RECV_BUDGET: usize = 256 << 10;
/// Room for one `UDP_SEGMENT`/`UDP_GRO` control message (a u16 or an int).
const CMSG_LEN: usize = 32;
/// Single-message receives between two that look for more (see [`Batcher::recv`]).
const PROBE_EVERY: u32 = 8;
/// [`Batcher::recv_mode`] while datagrams come in bursts.
const BURST: u32 = u32::MAX;

/// The batching state of one socket.
#[derive(Debug)]
pub(crate) struct Batcher {
    /// Batched calls (`sendmmsg`/`recvmmsg`) in use.
    mmsg: AtomicBool,
    /// GSO in use (cleared for good on `EIO`).
    gso: AtomicBool,
    /// GRO enabled on the socket.
    gro: bool,
    send_calls: AtomicU64,
    gso_messages: AtomicU64,
    recv_calls: AtomicU64,
    recv_multi_calls: AtomicU64,
    gro_messages: AtomicU64,
    truncated: AtomicU64,
    /// Receives since the last that asked for several messages, or [`BURST`].
    recv_mode: std::sync::atomic::AtomicU32,
}

/// One message of a `sendmmsg`: datagrams `start..start + n` of the batch, in `iovs`
/// iovecs, with segment size `seg` when it is a GSO message (`n > 1`).
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    n: usize,
    iovs: usize,
    seg: usize,
}

/// A received message: where it lies in the chunk, its length, its GRO segment size, its
/// source.
type Got = (usize, usize, Option<usize>, SocketAddr);

/// Scratch space for one `sendmmsg`/`recvmmsg`, kept by each thread. The headers point
/// into the other vectors, so those are filled first and never grow while the headers
/// are in use.
struct Scratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u64; CMSG_LEN / 8]>,
    spans: Vec<Span>,
    got: Vec<Got>,
}

impl Scratch {
    fn clear(&mut self) {
        self.hdrs.clear();
        self.iovs.clear();
        self.names.clear();
        self.cmsgs.clear();
        self.spans.clear();
        self.got.clear();
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Option<Box<Scratch>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with this thread's scratch space (a new one if a caller up the stack holds it).
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    let mut taken = SCRATCH.with(|s| s.borrow_mut().take()).unwrap_or_else(|| {
        Box::new(Scratch {
            hdrs: Vec::with_capacity(MAX_MSGS),
            iovs: Vec::with_capacity(MAX_IOVS),
            names: Vec::with_capacity(MAX_MSGS),
            cmsgs: Vec::with_capacity(MAX_MSGS),
            spans: Vec::with_capacity(MAX_MSGS),
            got: Vec::with_capacity(MAX_MSGS),
        })
    });
    taken.clear();
    let r = f(&mut taken);
    // Nothing may keep pointers into it past the call.
    taken.hdrs.clear();
    taken.iovs.clear();
    SCRATCH.with(|s| *s.borrow_mut() = Some(taken));
    r
}

/// Sets an int socket option.
fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: setsockopt with a valid fd, a pointer to a live c_int and its size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Whether this kernel takes `UDP_SEGMENT` (asked of a throw-away socket, as quinn-udp
/// does: setting it on ours would segment every send).
fn gso_supported(domain: socket2::Domain) -> bool {
    match Socket::new(domain, socket2::Type::DGRAM, None) {
        Ok(s) => setsockopt_int(s.as_raw_fd(), libc::SOL_UDP, libc::UDP_SEGMENT, 1200),
        Err(_) => false,
    }
}

impl Batcher {
    /// Sets `socket` up for `mode` and says what it got.
    pub(crate) fn new(socket: &Socket, domain: socket2::Domain, mode: BatchIo) -> Batcher {
        let offload = mode == BatchIo::Offload;
        let gso = offload && gso_supported(domain);
        let gro = offload && setsockopt_int(socket.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1);
        Batcher {
            mmsg: AtomicBool::new(mode != BatchIo::Single),
            gso: AtomicBool::new(gso),
            gro,
            send_calls: AtomicU64::new(0),
            gso_messages: AtomicU64::new(0),
            recv_calls: AtomicU64::new(0),
            recv_multi_calls: AtomicU64::new(0),
            gro_messages: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
            recv_mode: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// True if GSO is in use.
    pub(crate) fn gso(&self) -> bool {
        self.gso.load(Ordering::Relaxed)
    }

    /// True if GRO is on.
    pub(crate) fn gro(&self) -> bool {
        self.gro
    }

    /// True if batched calls are in use.
    pub(crate) fn mmsg(&self) -> bool {
        self.mmsg.load(Ordering::Relaxed)
    }

    pub(crate) fn stats(&self) -> IoStats {
        IoStats {
            send_calls: self.send_calls.load(Ordering::Relaxed),
            gso_messages: self.gso_messages.load(Ordering::Relaxed),
            recv_calls: self.recv_calls.load(Ordering::Relaxed),
            recv_multi_calls: self.recv_multi_calls.load(Ordering::Relaxed),
            gro_messages: self.gro_messages.load(Ordering::Relaxed),
            truncated: self.truncated.load(Ordering::Relaxed),
        }
    }

    /// Counts one single-datagram send call.
    pub(crate) fn count_send(&self) {
        self.send_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one single-datagram receive call.
    pub(crate) fn count_recv(&self) {
        self.recv_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Sends `batch` in as few calls as the kernel allows, in order; `one` sends a single
    /// datagram (the fallback, and a batch of one).
    pub(crate) fn send<T: Outgoing>(
        &self,
        socket: &Socket,
        batch: &[T],
        one: impl Fn(&T) -> io::Result<()>,
        report: &mut SendReport,
    ) {
        let mut i = 0;
        while i < batch.len() {
            if !self.mmsg() || batch.len() - i == 1 {
                for d in &batch[i..] {
                    self.count_send();
                    settle(one(d), d, report);
                }
                return;
            }
            i += with_scratch(|s| self.send_some(socket, &batch[i..], &one, s, report));
        }
    }

    /// Sends the first datagrams of `batch` with one `sendmmsg` (more calls if the kernel
    /// stops short); returns how many it dealt with.
    fn send_some<T: Outgoing>(
        &self,
        socket: &Socket,
        batch: &[T],
        one: &impl Fn(&T) -> io::Result<()>,
        s: &mut Scratch,
        report: &mut SendReport,
    ) -> usize {
        let taken = self.prepare(batch, s);
        self.submit(socket, batch, one, s, report).unwrap_or(taken)
    }

    /// Fills `s` with the messages for the first datagrams of `batch` (GSO runs joined);
    /// returns how many datagrams they carry.
    fn prepare<T: Outgoing>(&self, batch: &[T], s: &mut Scratch) -> usize {
        let gso = self.gso();
        let mut i = 0;
        // First the iovecs, addresses and control messages, then (below) the headers that
        // point into them.
        while i < batch.len() && s.spans.len() < MAX_MSGS && s.iovs.len() + 3 <= MAX_IOVS {
            let first = &batch[i];
            let len = first.len();
            let dest = first.dest();
            let mut n = 1;
            if gso && len > 0 {
                let mut total = len;
                while i + n < batch.len()
                    && n < MAX_SEGMENTS
                    && s.iovs.len() + 3 * (n + 1) <= MAX_IOVS
                {
                    let d = &batch[i + n];
                    let l = d.len();
                    if l == 0 || l > len || total + l > MAX_GSO_BYTES || d.dest() != dest {
                        break;
                    }
                    total += l;
                    n += 1;
                    if l < len {
                        // Only the last segment may be shorter.
                        break;
                    }
                }
            }
            let iovs_before = s.iovs.len();
            for d in &batch[i..i + n] {
                for part in [d.head(), d.body(), d.tail()] {
                    if !part.is_empty() {
                        s.iovs.push(libc::iovec {
                            iov_base: part.as_ptr() as *mut libc::c_void,
                            iov_len: part.len(),
                        });
                    }
                }
            }
            s.names.push(sockaddr(dest));
            let mut cmsg = [0u64; CMSG_LEN / 8];
            if n > 1 {
                write_segment_cmsg(&mut cmsg, len as u16);
            }
            s.cmsgs.push(cmsg);
            s.spans.push(Span {
                start: i,
                n,
                iovs: s.iovs.len() - iovs_before,
                seg: if n > 1 { len } else { 0 },
            });
            i += n;
        }
        let mut iov_at = 0;
        for (k, sp) in s.spans.iter().enumerate() {
            // SAFETY: an all-zero mmsghdr is valid (null pointers, zero lengths).
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (&mut s.names[k] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = sockaddr_len(batch[sp.start].dest());
            h.msg_hdr.msg_iov = s.iovs[iov_at..].as_mut_ptr();
            h.msg_hdr.msg_iovlen = sp.iovs as _;
            iov_at += sp.iovs;
            if sp.seg > 0 {
                h.msg_hdr.msg_control = s.cmsgs[k].as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = SEGMENT_CMSG_SPACE as _;
            }
            s.hdrs.push(h);
        }
        i
    }

    /// Sends the messages in `s` with `sendmmsg`, again from where the kernel stopped, and
    /// counts the outcome. `Some(datagram)` if it gave up at that datagram of `batch` and
    /// the caller should go on from there (GSO or `sendmmsg` just turned off).
    fn submit<T: Outgoing>(
        &self,
        socket: &Socket,
        batch: &[T],
        one: &impl Fn(&T) -> io::Result<()>,
        s: &mut Scratch,
        report: &mut SendReport,
    ) -> Option<usize> {
        let mut k = 0;
        while k < s.hdrs.len() {
            self.send_calls.fetch_add(1, Ordering::Relaxed);
            let todo = &mut s.hdrs[k..];
            // SAFETY: each header points at a live address, iovecs over the caller's
            // borrowed datagrams and (for GSO) a live control message, all in `s` or
            // `batch`, untouched until the call returns.
            let rc = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    todo.as_mut_ptr(),
                    todo.len() as libc::c_uint,
                    0,
                )
            };
            if rc > 0 {
                for sp in &s.spans[k..k + rc as usize] {
                    report.sent += sp.n;
                    if sp.n > 1 {
                        self.gso_messages.fetch_add(1, Ordering::Relaxed);
                    }
                }
                k += rc as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            let sp = s.spans[k];
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOSYS) => {
                    // No sendmmsg: one call per datagram from here on.
                    self.mmsg.store(false, Ordering::Relaxed);
                    return Some(sp.start);
                }
                Some(libc::EIO) if sp.n > 1 => {
                    // The device cannot checksum GSO segments: GSO off for this socket.
                    self.gso.store(false, Ordering::Relaxed);
                    return Some(sp.start);
                }
                code if sp.n > 1 => {
                    // EINVAL (a segment larger than the route's MTU, or a socket or device
                    // that cannot do GSO) or EMSGSIZE: this run one datagram at a time, to
                    // learn which fail.
                    let before = report.sent;
                    for d in &batch[sp.start..sp.start + sp.n] {
                        self.count_send();
                        settle(one(d), d, report);
                    }
                    if code == Some(libc::EINVAL) && report.sent - before == sp.n {
                        // Each went out alone but not joined: GSO is what fails here.
                        self.gso.store(false, Ordering::Relaxed);
                    }
                }
                _ => settle(Err(e), &batch[sp.start], report),
            }
            k += 1;
        }
        None
    }

    /// Receives what is waiting (at least one datagram, or the socket's time-out or
    /// would-block error) with one `recvmmsg` (one message, or several in bursts: see
    /// below), into `chunk`, appending each datagram and its source to `out`; a GRO
    /// message is split into its datagrams. Datagrams stay where the kernel put them but
    /// for closing the gaps between messages.
    pub(crate) fn recv(
        &self,
        socket: &Socket,
        chunk: &mut BytesMut,
        max_datagram: usize,
        out: &mut Vec<(BytesMut, SocketAddr)>,
        nowait: bool,
    ) -> io::Result<usize> {
        let slot = if self.gro {
            GRO_BUF.max(max_datagram)
        } else {
            max_datagram.max(1)
        };
        // Asking for several messages costs one more look at an empty queue when only one
        // was waiting (about half a microsecond: a tenth of a busy-polled round trip). So
        // ask for one (a GRO message still brings many datagrams), and for several while
        // they come in bursts, or every PROBE_EVERY-th receive to find out.
        let mode = self.recv_mode.load(Ordering::Relaxed);
        let many = mode == BURST || mode >= PROBE_EVERY;
        let msgs = if many {
            (RECV_BUDGET / slot).clamp(1, MAX_MSGS)
        } else {
            1
        };
        let need = slot * msgs;
        // Reclaims the whole chunk when every datagram carved from it has been dropped
        // (memory stays hot), else takes a new one.
        if chunk.capacity() - chunk.len() < need && !chunk.try_reclaim(need) {
            *chunk = BytesMut::with_capacity(crate::CHUNK.max(need * 2));
        }
        with_scratch(|s| {
            let spare = chunk.spare_capacity_mut();
            let base = spare.as_mut_ptr();
            for k in 0..msgs {
                s.iovs.push(libc::iovec {
                    // SAFETY: k * slot + slot <= need <= spare.len().
                    iov_base: unsafe { base.add(k * slot) }.cast(),
                    iov_len: slot,
                });
                // SAFETY: an all-zero sockaddr_storage is valid.
                s.names.push(unsafe { std::mem::zeroed() });
                s.cmsgs.push([0; CMSG_LEN / 8]);
            }
            for k in 0..msgs {
                // SAFETY: an all-zero mmsghdr is valid.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = (&mut s.names[k] as *mut libc::sockaddr_storage).cast();
                h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
                h.msg_hdr.msg_iov = &mut s.iovs[k];
                h.msg_hdr.msg_iovlen = 1;
                if self.gro {
                    h.msg_hdr.msg_control = s.cmsgs[k].as_mut_ptr().cast();
                    h.msg_hdr.msg_controllen = CMSG_LEN as _;
                }
                s.hdrs.push(h);
            }
            // SAFETY: the headers point at `msgs` slots inside the chunk's spare capacity,
            // live addresses and control buffers.
            let rc = unsafe {
                libc::recvmmsg(
                    socket.as_raw_fd(),
                    s.hdrs.as_mut_ptr(),
                    msgs as libc::c_uint,
                    libc::MSG_WAITFORONE | if nowait { libc::MSG_DONTWAIT } else { 0 },
                    std::ptr::null_mut(),
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ENOSYS) {
                    self.mmsg.store(false, Ordering::Relaxed);
                }
                return Err(e);
            }
            let rc = rc as usize;
            self.recv_calls.fetch_add(1, Ordering::Relaxed);
            if many {
                self.recv_multi_calls.fetch_add(1, Ordering::Relaxed);
            }
            let next = match (many, rc) {
                (true, 2..) => BURST,
                (true, _) => 0,
                (false, _) => mode.saturating_add(1),
            };
            self.recv_mode.store(next, Ordering::Relaxed);
            Ok(self.hand_out(s, chunk, slot, rc, out))
        })
    }

    /// After a `recvmmsg` of `rc` messages into `chunk`'s spare capacity, message k at
    /// k × `slot` (the caller reserved at least `rc` × `slot` bytes there): makes the bytes
    /// a run (see below), moves them into `chunk` and appends each datagram to `out`;
    /// returns how many.
    fn hand_out(
        &self,
        s: &mut Scratch,
        chunk: &mut BytesMut,
        slot: usize,
        rc: usize,
        out: &mut Vec<(BytesMut, SocketAddr)>,
    ) -> usize {
        let base = chunk.spare_capacity_mut().as_mut_ptr();
        // Message k lies at k * slot. Either it moves down to right after message k-1,
        // or the gap before it is zeroed (so every byte up to it is initialised) and
        // skipped: whichever writes fewer bytes (a small datagram moves; a large one,
        // nearly a slot long, stays).
        let mut filled = 0;
        for k in 0..rc {
            let h = &s.hdrs[k];
            let n = h.msg_len as usize;
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.truncated.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let Some(from) = from_sockaddr(&s.names[k], h.msg_hdr.msg_namelen) else {
                continue;
            };
            let src = k * slot;
            let start = if src == filled {
                src
            } else if n <= src - filled {
                // SAFETY: both ranges lie in the spare capacity; copy handles overlap.
                unsafe { std::ptr::copy(base.add(src), base.add(filled), n) };
                filled
            } else {
                // SAFETY: filled..src lies in the spare capacity.
                unsafe { std::ptr::write_bytes(base.add(filled), 0, src - filled) };
                src
            };
            let stride = if self.gro { gro_size(h) } else { None };
            s.got.push((start, n, stride, from));
            filled = start + n;
        }
        // SAFETY: the first `filled` bytes of the spare capacity were written by the
        // kernel, moved down or zeroed above.
        unsafe { chunk.set_len(chunk.len() + filled) };
        let before = out.len();
        let mut whole = chunk.split_to(filled);
        let mut at = 0;
        for &(start, n, stride, from) in &s.got {
            whole.advance(start - at);
            let mut msg = whole.split_to(n);
            at = start + n;
            match stride {
                Some(st) if st > 0 && st < n => {
                    self.gro_messages.fetch_add(1, Ordering::Relaxed);
                    while msg.len() > st {
                        out.push((msg.split_to(st), from));
                    }
                    out.push((msg, from));
                }
                _ => out.push((msg, from)),
            }
        }
        out.len() - before
    }
}

/// Room for a `UDP_SEGMENT` control message.
// SAFETY (of the call): CMSG_SPACE only computes a size.
const SEGMENT_CMSG_SPACE: usize = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;

/// Writes a `UDP_SEGMENT` control message of segment size `seg` at the start of `buf`.
fn write_segment_cmsg(buf: &mut [u64; CMSG_LEN / 8], seg: u16) {
    const { assert!(SEGMENT_CMSG_SPACE <= CMSG_LEN) };
    // SAFETY: a msghdr whose control buffer is `buf` (CMSG_LEN bytes, 8-aligned) lets
    // CMSG_FIRSTHDR return `buf`'s start; header and data fit in SEGMENT_CMSG_SPACE.
    unsafe {
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_control = buf.as_mut_ptr().cast();
        m.msg_controllen = SEGMENT_CMSG_SPACE as _;
        let c = libc::CMSG_FIRSTHDR(&m);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
    }
}

/// Counts the outcome of one datagram's send.
fn settle<T: Outgoing>(r: io::Result<()>, d: &T, report: &mut SendReport) {
    match r {
        Ok(()) => report.sent += 1,
        Err(e) => {
            report.failed += 1;
            if e.raw_os_error() == Some(libc::EMSGSIZE) {
                report.too_large.push((d.dest(), d.len()));
            }
        }
    }
}

/// The segment size of a received GRO message, if it is one.
fn gro_size(h: &libc::mmsghdr) -> Option<usize> {
    // SAFETY: the control buffer and its length were filled in by recvmmsg; the CMSG
    // macros stay within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok();
            }
            c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
        }
    }
    None
}

/// `addr` as a `sockaddr_storage`.
fn sockaddr(addr: SocketAddr) -> libc::sockaddr_storage {
    let sa = SockAddr::from(addr);
    let mut st = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    // SAFETY: SockAddr holds at most a sockaddr_storage's bytes; the rest stays zero.
    unsafe {
        std::ptr::copy_nonoverlapping(
            sa.as_ptr().cast::<u8>(),
            st.as_mut_ptr().cast::<u8>(),
            sa.len() as usize,
        );
        st.assume_init()
    }
}

fn sockaddr_len(addr: SocketAddr) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(_) => size_of::<libc::sockaddr_in>() as _,
        SocketAddr::V6(_) => size_of::<libc::sockaddr_in6>() as _,
    }
}

/// The IP address the kernel wrote into `st`, if it is one.
fn from_sockaddr(st: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match st.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: an AF_INET address of that length is a sockaddr_in.
            let a = unsafe { &*(st as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: an AF_INET6 address of that length is a sockaddr_in6.
            let a = unsafe { &*(st as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}
