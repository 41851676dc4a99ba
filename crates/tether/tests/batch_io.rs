//! The driver's batched I/O between real sessions: path-sized datagrams in every
//! `transport.batch_io` mode over loopback, and a datagram too large for a real link
//! (don't-fragment, a 1500-MTU veth between network namespaces; root only) counted and told
//! to the engine.

mod common;
use common::wait_for;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use tether::{BatchIoMode, Config, Qos, Session};

/// With 1,472 B datagrams, a 1 MB sample (~720 fragments) and 500 small reliable samples
/// arrive intact and in order whichever way the sockets batch; batched sessions send the
/// fragments in far fewer calls than datagrams, and with GRO receive them so too.
#[test]
fn path_sized_datagrams_in_every_batch_mode() {
    for mode in [BatchIoMode::Offload, BatchIoMode::Mmsg, BatchIoMode::Single] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = || {
            let mut c = Config::default();
            c.discovery.range = tether::DiscoveryRange::Localhost;
            c.discovery.registry_dir = Some(dir.path().to_path_buf());
            c.transport.max_datagram = 1472;
            c.transport.batch_io = mode;
            c
        };
        let a = Session::open(cfg()).unwrap();
        let b = Session::open(cfg()).unwrap();
        let q = Qos::default()
            .keep_all()
            .max_samples(1000)
            .max_bytes(8 << 20);
        let sub = b.subscriber("/io", q).unwrap();
        let p = a.publisher("/io", q).unwrap();
        assert!(wait_for(Duration::from_secs(10), || p.matched() == 1
            && sub.matched() == 1));
        let big: Vec<u8> = (0..1_000_000usize).map(|i| (i * 31 + 7) as u8).collect();
        let (a0, b0) = (a.stats(), b.stats());
        p.put(big.clone()).unwrap();
        let got = sub.recv_timeout(Duration::from_secs(30)).unwrap();
        assert!(
            got.payload[..] == big[..],
            "{mode:?}: 1 MB sample corrupted"
        );
        let (a1, b1) = (a.stats(), b.stats());
        let sent = a1.core.datagrams_sent - a0.core.datagrams_sent;
        let calls = a1.send_calls - a0.send_calls;
        let received = b1.core.datagrams_received - b0.core.datagrams_received;
        let rcalls = b1.recv_calls - b0.recv_calls;
        assert!(sent >= 680, "{mode:?}: {sent} datagrams for 1 MB");
        match mode {
            BatchIoMode::Single => assert!(calls >= sent, "{mode:?}: {calls} calls, {sent}"),
            _ => assert!(
                calls * 4 < sent,
                "{mode:?}: {calls} calls for {sent} datagrams"
            ),
        }
        if mode == BatchIoMode::Offload {
            assert!(
                rcalls * 2 < received,
                "{mode:?}: {rcalls} receive calls for {received} datagrams"
            );
        }
        for i in 0..500u32 {
            p.put(Bytes::from(i.to_le_bytes().to_vec())).unwrap();
        }
        for i in 0..500u32 {
            let s = sub.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(&s.payload[..], &i.to_le_bytes(), "{mode:?}");
            assert_eq!(s.seq, i as u64 + 2, "{mode:?}");
        }
        assert!(p.wait_for_acknowledgments(Duration::from_secs(10)));
        assert_eq!(a.stats().send_errors, 0, "{mode:?}");
    }
}

/// Datagrams that queue up while the receive thread is busy come in one call, yet each is
/// handled as if received alone: a keep-last(1) callback subscriber gets every sample, as
/// it would one call per datagram.
#[test]
fn a_received_batch_keeps_per_datagram_delivery() {
    for mode in [BatchIoMode::Offload, BatchIoMode::Mmsg] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = || {
            let mut c = Config::default();
            c.discovery.range = tether::DiscoveryRange::Localhost;
            c.discovery.registry_dir = Some(dir.path().to_path_buf());
            c.transport.batch_io = mode;
            c
        };
        let a = Session::open(cfg()).unwrap();
        let b = Session::open(cfg()).unwrap();
        let q = Qos::default().best_effort().keep_last(1);
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let g2 = got.clone();
        let _sub = b
            .subscriber_with_callback("/kl", q, move |s| {
                let mut g = g2.lock().unwrap();
                g.push(u32::from_le_bytes(s.payload[..4].try_into().unwrap()));
                if g.len() == 1 {
                    drop(g);
                    // Hold the receive thread while the rest queue in the socket.
                    std::thread::sleep(Duration::from_millis(300));
                }
            })
            .unwrap();
        let p = a.publisher("/kl", q).unwrap();
        assert!(wait_for(Duration::from_secs(10), || p.matched() == 1));
        let r0 = b.stats().recv_calls;
        for i in 0..200u32 {
            p.put(i.to_le_bytes().to_vec()).unwrap();
        }
        assert!(wait_for(Duration::from_secs(10), || got
            .lock()
            .unwrap()
            .len()
            == 200));
        assert_eq!(
            *got.lock().unwrap(),
            (0..200).collect::<Vec<_>>(),
            "{mode:?}"
        );
        let calls = b.stats().recv_calls - r0;
        assert!(
            calls < 150,
            "{mode:?}: {calls} receive calls for 200 datagrams"
        );
    }
}

mod netns {
    use super::*;
    use tether_testkit::netns::{Lan, Namespace, is_root};

    /// Runs `f` on a thread inside `ns`: a session opened there keeps its socket and
    /// threads there.
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

    /// With don't-fragment on a 1500-byte link and `max_datagram` 4,000: samples larger than
    /// the path arrive in path-sized fragments, and the path probe of 4,000 bytes the socket
    /// refuses is counted in `too_large`, told to the engine, and does not lower the path.
    #[test]
    fn a_datagram_too_large_for_the_link_is_counted() {
        if !is_root() {
            tether_testkit::skip!("skipped: network namespaces need root");
            return;
        }
        let id = std::process::id() % 100_000;
        let lan = match Lan::builder(
            [&format!("tsa{id}"), &format!("tsb{id}")],
            [&format!("vsa{id}"), &format!("vsb{id}")],
        )
        .addrs(
            [Ipv4Addr::new(10, 198, 66, 1), Ipv4Addr::new(10, 198, 66, 2)],
            24,
        )
        .mtu(1500)
        .create()
        {
            Ok(l) => l,
            Err(e) => {
                tether_testkit::skip!("skipped: cannot build the namespaces: {e}");
                return;
            }
        };
        let cfg = |ip: Ipv4Addr, peers: Vec<SocketAddr>| {
            let mut c = Config::default();
            c.discovery.range = tether::DiscoveryRange::Off;
            c.discovery.peers = peers;
            c.transport.listen = Some(SocketAddr::new(ip.into(), 0));
            c.transport.max_datagram = 4000;
            c.transport.dont_fragment = true;
            c
        };
        let a = enter(lan.a().ns(), || {
            Session::open(cfg(lan.a().addr(), Vec::new())).unwrap()
        });
        let b = enter(lan.b().ns(), || {
            Session::open(cfg(lan.b().addr(), vec![a.local_addr()])).unwrap()
        });
        let q = Qos::default().best_effort();
        let sub = b.subscriber("/df", q).unwrap();
        let p = a.publisher("/df", q).unwrap();
        assert!(wait_for(Duration::from_secs(20), || p.matched() == 1
            && sub.matched() == 1));
        p.put(vec![1u8; 1000]).unwrap();
        assert_eq!(
            sub.recv_timeout(Duration::from_secs(10))
                .unwrap()
                .payload
                .len(),
            1000
        );
        assert_eq!(a.stats().too_large, 0);
        // A sample larger than the path leaves in fragments of the path's size (1,472
        // bytes), never as one datagram the socket would refuse.
        p.put(vec![2u8; 3000]).unwrap();
        assert_eq!(
            sub.recv_timeout(Duration::from_secs(10))
                .unwrap()
                .payload
                .len(),
            3000
        );
        // Probing tried 4,000 bytes (max_datagram) toward b: the kernel refused it
        // (EMSGSIZE) and the path stayed at 1,472.
        assert!(wait_for(Duration::from_secs(10), || a.stats().too_large >= 1));
        let st = a.stats();
        assert!(st.core.datagrams_too_big >= 1, "{st:?}");
        assert_eq!(st.core.paths_lowered, 0, "{st:?}");
    }
}
