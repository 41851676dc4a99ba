//! Batched sends and receives on real sockets: `sendmmsg` with GSO, `recvmmsg` with GRO,
//! and the one-call-per-datagram fallback, over loopback; don't-fragment, `EMSGSIZE`,
//! GSO refused by a device, and multicast in network namespaces (root only).

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tether_transport::{
    BatchIo, MulticastReceiver, SendReport, Transport, UdpOptions, UdpTransport,
};

/// A datagram to send: destination and bytes (split into head and body when sent).
struct Dgram {
    dest: SocketAddr,
    bytes: Vec<u8>,
}

impl tether_transport::Outgoing for Dgram {
    fn dest(&self) -> SocketAddr {
        self.dest
    }
    fn head(&self) -> &[u8] {
        &self.bytes[..self.bytes.len().min(16)]
    }
    fn body(&self) -> &[u8] {
        &self.bytes[self.bytes.len().min(16)..]
    }
}

/// `len` bytes that say which datagram they are: its number, then a pattern of it.
fn payload(n: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u32 ^ n.wrapping_mul(31)) as u8)
        .collect();
    v[..4].copy_from_slice(&n.to_be_bytes());
    v
}

fn bind(mode: BatchIo, ip: &str) -> UdpTransport {
    let t = UdpTransport::bind(&UdpOptions {
        bind: format!("{ip}:0").parse().unwrap(),
        batch_io: mode,
        ..UdpOptions::default()
    })
    .unwrap();
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    t
}

/// Receives until `n` datagrams have come (or 10 s pass), with `recv_batch`.
fn recv_n(t: &UdpTransport, n: usize) -> Vec<(Bytes, SocketAddr)> {
    let mut chunk = BytesMut::new();
    let mut out = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while out.len() < n && Instant::now() < end {
        let _ = t.recv_batch(&mut chunk, &mut out);
    }
    out.into_iter().map(|(d, a)| (d.freeze(), a)).collect()
}

fn all_sent(r: &SendReport, n: usize) {
    assert_eq!(
        (r.sent, r.failed, r.too_large.len()),
        (n, 0, 0),
        "report: {r:?}"
    );
}

/// 100 datagrams of 1,200 B and a shorter last one arrive intact, in order, with their
/// sizes, whichever way each side batches; batched modes use far fewer calls than
/// datagrams.
#[test]
fn a_batch_arrives_intact_and_in_order() {
    for (tx_mode, rx_mode) in [
        (BatchIo::Offload, BatchIo::Offload),
        (BatchIo::Offload, BatchIo::Mmsg),
        (BatchIo::Mmsg, BatchIo::Mmsg),
        (BatchIo::Single, BatchIo::Single),
        (BatchIo::Mmsg, BatchIo::Single),
    ] {
        let (a, b) = (bind(tx_mode, "127.0.0.1"), bind(rx_mode, "127.0.0.1"));
        let mut batch: Vec<Dgram> = (0..100)
            .map(|i| Dgram {
                dest: b.local_addr(),
                bytes: payload(i, 1200),
            })
            .collect();
        batch.push(Dgram {
            dest: b.local_addr(),
            bytes: payload(100, 500),
        });
        all_sent(&a.send_batch(&batch), 101);
        let got = recv_n(&b, 101);
        assert_eq!(got.len(), 101, "{tx_mode:?} → {rx_mode:?}");
        for (i, (d, from)) in got.iter().enumerate() {
            assert_eq!(*from, a.local_addr());
            assert_eq!(
                &d[..],
                &batch[i].bytes[..],
                "datagram {i}, {tx_mode:?} → {rx_mode:?}"
            );
        }
        let (tx, rx) = (a.io_stats(), b.io_stats());
        match tx_mode {
            BatchIo::Single => assert_eq!(tx.send_calls, 101),
            // 64 messages per sendmmsg; GSO joins up to 54 datagrams of 1,200 B in one.
            _ => assert!(tx.send_calls <= 2, "{tx_mode:?}: {tx:?}"),
        }
        if a.gso() {
            assert_eq!(tx.gso_messages, 2, "{tx:?}");
        } else {
            assert_eq!(tx.gso_messages, 0, "{tx:?}");
        }
        match rx_mode {
            BatchIo::Single => assert_eq!(rx.recv_calls, 101),
            _ => assert!(rx.recv_calls < 101, "{rx_mode:?}: {rx:?}"),
        }
    }
}

/// Datagrams to two destinations, interleaved in runs of different lengths and sizes, each
/// reach their destination in order; GSO joins only runs to one destination.
#[test]
fn a_mixed_destination_batch_is_sorted_out() {
    let a = bind(BatchIo::Offload, "127.0.0.1");
    let (b, c) = (
        bind(BatchIo::Offload, "127.0.0.1"),
        bind(BatchIo::Mmsg, "127.0.0.1"),
    );
    // (destination, count, size) runs.
    let runs = [
        (&b, 3, 1000),
        (&c, 2, 1000),
        (&b, 1, 700),
        (&c, 5, 300),
        (&b, 4, 1400),
        (&b, 2, 900),
    ];
    let mut batch = Vec::new();
    let mut n = 0u32;
    for (t, count, size) in runs {
        for _ in 0..count {
            batch.push(Dgram {
                dest: t.local_addr(),
                bytes: payload(n, size),
            });
            n += 1;
        }
    }
    all_sent(&a.send_batch(&batch), batch.len());
    assert_eq!(a.io_stats().send_calls, 1);
    if a.gso() {
        // b×3, c×2, c×5 and b×4+b×1 (the 900 B ends the 1,400 B run), b×1: four GSO.
        assert_eq!(a.io_stats().gso_messages, 4, "{:?}", a.io_stats());
    }
    for t in [&b, &c] {
        let want: Vec<&Dgram> = batch.iter().filter(|d| d.dest == t.local_addr()).collect();
        let got = recv_n(t, want.len());
        let got: Vec<&[u8]> = got.iter().map(|(d, _)| &d[..]).collect();
        let want: Vec<&[u8]> = want.iter().map(|d| &d.bytes[..]).collect();
        assert_eq!(got, want);
    }
}

/// A GSO message to a socket with GRO arrives as one GRO message, which the transport
/// splits back into the datagrams sent.
#[test]
fn gro_messages_are_split_into_their_datagrams() {
    let (a, b) = (
        bind(BatchIo::Offload, "127.0.0.1"),
        bind(BatchIo::Offload, "127.0.0.1"),
    );
    if !a.gso() || !b.gro() {
        tether_testkit::skip!("skipped: this kernel has no UDP GSO/GRO");
        return;
    }
    let batch: Vec<Dgram> = (0..20)
        .map(|i| Dgram {
            dest: b.local_addr(),
            bytes: payload(i, if i == 19 { 333 } else { 1000 }),
        })
        .collect();
    all_sent(&a.send_batch(&batch), 20);
    let got = recv_n(&b, 20);
    let sizes: Vec<usize> = got.iter().map(|(d, _)| d.len()).collect();
    let mut want = vec![1000; 19];
    want.push(333);
    assert_eq!(sizes, want);
    for (i, (d, _)) in got.iter().enumerate() {
        assert_eq!(&d[..], &batch[i].bytes[..]);
    }
    let rx = b.io_stats();
    assert!(rx.gro_messages >= 1, "{rx:?}");
    assert!(rx.recv_calls < 20, "{rx:?}");
}

/// A socket that refuses GSO (here: UDP checksums off, `SO_NO_CHECK`, which GSO needs;
/// on other hosts, a device that cannot segment) makes the batch go one datagram at a
/// time, none lost, and GSO stays off for that socket.
#[test]
fn gso_refused_falls_back_to_single_datagrams() {
    use std::os::fd::{AsFd, AsRawFd};
    let (a, b) = (
        bind(BatchIo::Offload, "127.0.0.1"),
        bind(BatchIo::Mmsg, "127.0.0.1"),
    );
    if !a.gso() {
        tether_testkit::skip!("skipped: this kernel has no UDP GSO");
        return;
    }
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on a live socket with a pointer to a c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            a.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    let batch: Vec<Dgram> = (0..10)
        .map(|i| Dgram {
            dest: b.local_addr(),
            bytes: payload(i, 1000),
        })
        .collect();
    all_sent(&a.send_batch(&batch), 10);
    assert!(!a.gso(), "GSO should be off once the socket refused it");
    assert_eq!(a.io_stats().gso_messages, 0);
    all_sent(&a.send_batch(&batch), 10);
    let got = recv_n(&b, 20);
    let got: Vec<&[u8]> = got.iter().map(|(d, _)| &d[..]).collect();
    let want: Vec<&[u8]> = batch.iter().chain(&batch).map(|d| &d.bytes[..]).collect();
    assert_eq!(got, want);
}

/// Datagrams that come one at a time are received with single-message calls (asking for
/// several would cost one more look at an empty queue each time), bar a look every few;
/// a burst that queues up is then taken several per call.
#[test]
fn lone_datagrams_single_calls_bursts_batched() {
    let (a, b) = (
        bind(BatchIo::Mmsg, "127.0.0.1"),
        bind(BatchIo::Mmsg, "127.0.0.1"),
    );
    let one = |i| Dgram {
        dest: b.local_addr(),
        bytes: payload(i, 100),
    };
    for i in 0..20 {
        all_sent(&a.send_batch(&[one(i)]), 1);
        let got = recv_n(&b, 1);
        assert_eq!(&got[0].0[..], &one(i).bytes[..]);
    }
    let lone = b.io_stats();
    assert_eq!(lone.recv_calls, 20);
    assert!(
        (1..=3).contains(&lone.recv_multi_calls),
        "{lone:?}: single-message calls, bar a look every 8"
    );
    let burst: Vec<Dgram> = (100..200).map(one).collect();
    all_sent(&a.send_batch(&burst), 100);
    let got = recv_n(&b, 100);
    assert_eq!(got.len(), 100);
    let st = b.io_stats();
    let calls = st.recv_calls - lone.recv_calls;
    assert!(calls <= 45, "{calls} calls for a burst of 100: {st:?}");
}

/// Several messages per call, large and small mixed: small ones move down to close the
/// gap before them, large ones stay where the kernel put them; every datagram comes out
/// whole and in order.
#[test]
fn large_and_small_datagrams_in_one_receive() {
    let (a, b) = (
        bind(BatchIo::Mmsg, "127.0.0.1"),
        bind(BatchIo::Mmsg, "127.0.0.1"),
    );
    let sizes = |i: u32| match i % 3 {
        0 => 40_000,
        1 => 500,
        _ => 64_000,
    };
    let batch: Vec<Dgram> = (0..60)
        .map(|i| Dgram {
            dest: b.local_addr(),
            bytes: payload(i, sizes(i)),
        })
        .collect();
    all_sent(&a.send_batch(&batch), 60);
    let got = recv_n(&b, 60);
    assert_eq!(got.len(), 60);
    for (i, (d, _)) in got.iter().enumerate() {
        assert!(d[..] == batch[i].bytes[..], "datagram {i} ({} B)", d.len());
    }
    assert!(b.io_stats().recv_multi_calls >= 5, "{:?}", b.io_stats());
}

/// IPv6 batches work the same way.
#[test]
fn ipv6_batches() {
    let Ok(probe) = std::net::UdpSocket::bind("[::1]:0") else {
        tether_testkit::skip!("skipped: no IPv6 loopback");
        return;
    };
    drop(probe);
    let (a, b) = (
        bind(BatchIo::Offload, "[::1]"),
        bind(BatchIo::Offload, "[::1]"),
    );
    let batch: Vec<Dgram> = (0..30)
        .map(|i| Dgram {
            dest: b.local_addr(),
            bytes: payload(i, 1200),
        })
        .collect();
    all_sent(&a.send_batch(&batch), 30);
    let got = recv_n(&b, 30);
    assert_eq!(got.len(), 30);
    for (i, (d, from)) in got.iter().enumerate() {
        assert_eq!(*from, a.local_addr());
        assert_eq!(&d[..], &batch[i].bytes[..]);
    }
}

/// A wake-up (an empty datagram) comes out of `recv_batch` as an empty datagram.
#[test]
fn wake_is_an_empty_datagram() {
    let b = bind(BatchIo::Offload, "127.0.0.1");
    b.wake();
    let got = recv_n(&b, 1);
    assert_eq!(got.len(), 1);
    assert!(got[0].0.is_empty());
}

mod netns {
    use super::*;
    use tether_testkit::netns::{Lan, Namespace, is_root};

    /// A fresh pair of namespaces joined by a veth pair with MTU 1500, or `None` (with
    /// the reason printed) when this process cannot make them.
    fn lan(tag: &str, subnet: u8) -> Option<Lan> {
        if !is_root() {
            tether_testkit::skip!("skipped: network namespaces need root");
            return None;
        }
        let id = std::process::id() % 100_000;
        let l = Lan::builder(
            [&format!("tb{tag}a{id}"), &format!("tb{tag}b{id}")],
            [&format!("vb{tag}a{id}"), &format!("vb{tag}b{id}")],
        )
        .addrs(
            [
                Ipv4Addr::new(10, 198, subnet, 1),
                Ipv4Addr::new(10, 198, subnet, 2),
            ],
            24,
        )
        .mtu(1500)
        .create();
        match l {
            Ok(l) => Some(l),
            Err(e) => {
                tether_testkit::skip!("skipped: cannot build the namespaces: {e}");
                None
            }
        }
    }

    /// Runs `f` on a thread inside `ns`; sockets it makes stay in `ns`.
    fn enter<R: Send>(ns: &Namespace, f: impl FnOnce() -> R + Send) -> R {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(format!("/run/netns/{}", ns.name())).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: setns with a valid namespace descriptor moves only this thread.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap()
        })
    }

    fn bind_in(ns: &Namespace, ip: Ipv4Addr, mode: BatchIo, df: bool) -> UdpTransport {
        enter(ns, || {
            let t = UdpTransport::bind(&UdpOptions {
                bind: SocketAddr::new(ip.into(), 0),
                batch_io: mode,
                dont_fragment: df,
                multicast_if: Some(ip),
                ..UdpOptions::default()
            })
            .unwrap();
            t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            t
        })
    }

    /// Across a 1500-MTU link with don't-fragment set, a datagram larger than the MTU is
    /// refused and reported with its destination and size, alone or in a GSO run, and the
    /// others arrive; without don't-fragment it leaves as fragments and arrives too.
    #[test]
    fn too_large_for_the_link_is_reported() {
        let Some(lan) = lan("m", 61) else { return };
        for mode in [BatchIo::Offload, BatchIo::Mmsg, BatchIo::Single] {
            let a = bind_in(lan.a().ns(), lan.a().addr(), mode, true);
            let b = bind_in(lan.b().ns(), lan.b().addr(), BatchIo::Offload, false);
            let to = |n, len| Dgram {
                dest: b.local_addr(),
                bytes: payload(n, len),
            };
            let batch = vec![
                to(0, 1400),
                to(1, 3000),
                to(2, 1400),
                to(3, 1400),
                to(4, 1472),
                // A GSO run of segments larger than the MTU.
                to(5, 2000),
                to(6, 2000),
            ];
            let gso = a.gso();
            let r = a.send_batch(&batch);
            // Refused for size alone too: GSO stays on.
            assert_eq!(a.gso(), gso, "{mode:?}");
            assert_eq!(r.sent, 4, "{mode:?}: {r:?}");
            assert_eq!(r.failed, 3, "{mode:?}: {r:?}");
            let b_addr = b.local_addr();
            assert_eq!(
                r.too_large,
                vec![(b_addr, 3000), (b_addr, 2000), (b_addr, 2000)],
                "{mode:?}"
            );
            let got = recv_n(&b, 4);
            let got: Vec<&[u8]> = got.iter().map(|(d, _)| &d[..]).collect();
            let want: Vec<&[u8]> = [0, 2, 3, 4].iter().map(|&i| &batch[i].bytes[..]).collect();
            assert_eq!(got, want, "{mode:?}");
            // A single send says so too.
            let e = a
                .send(b_addr, &payload(9, 16)[..], &payload(9, 4000))
                .unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE));
        }
        let a = bind_in(lan.a().ns(), lan.a().addr(), BatchIo::Offload, false);
        let b = bind_in(lan.b().ns(), lan.b().addr(), BatchIo::Offload, false);
        let batch = vec![Dgram {
            dest: b.local_addr(),
            bytes: payload(0, 3000),
        }];
        all_sent(&a.send_batch(&batch), 1);
        let got = recv_n(&b, 1);
        assert_eq!(&got[0].0[..], &batch[0].bytes[..]);
    }

    /// Batches to a multicast group reach a `MulticastReceiver` on the other host, which
    /// takes them in batches too.
    #[test]
    fn multicast_batches() {
        let Some(lan) = lan("c", 63) else { return };
        let group = Ipv4Addr::new(239, 255, 63, 1);
        let port = 17_463;
        let rx = enter(lan.b().ns(), || {
            MulticastReceiver::join(group, port, lan.b().addr()).unwrap()
        });
        let a = bind_in(lan.a().ns(), lan.a().addr(), BatchIo::Offload, true);
        let batch: Vec<Dgram> = (0..10)
            .map(|i| Dgram {
                dest: SocketAddr::new(group.into(), port),
                bytes: payload(i, 1200),
            })
            .collect();
        all_sent(&a.send_batch(&batch), 10);
        let mut chunk = BytesMut::new();
        let mut out = Vec::new();
        let end = Instant::now() + Duration::from_secs(10);
        while out.len() < 10 && Instant::now() < end {
            let _ = rx.recv_batch(&mut chunk, &mut out);
        }
        let got: Vec<&[u8]> = out.iter().map(|(d, _)| &d[..]).collect();
        let want: Vec<&[u8]> = batch.iter().map(|d| &d.bytes[..]).collect();
        assert_eq!(got, want);
        assert!(out.iter().all(|(_, from)| *from == a.local_addr()));
    }
}
