//! A session whose open fails after its router link began to dial leaves nothing behind. In
//! a test binary of its own: it counts the process's threads and sockets, which other
//! tests running beside it would change.
#![cfg(target_os = "linux")]

mod common;
use common::{local_cfg, wait_for};

use std::net::UdpSocket;
use std::time::Duration;

use tether::Session;

/// The tests of this binary count threads: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Threads of this process (Linux: /proc/self/task): a thread is there from the moment it
/// is spawned, before it has run or named itself.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Sockets this process holds (Linux: /proc/self/fd).
fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|f| std::fs::read_link(f.ok()?.path()).ok())
                .filter(|l| l.to_string_lossy().starts_with("socket:"))
                .count()
        })
        .unwrap_or(0)
}

/// A session dials its routers first, while the rest of it is made: when opening then fails
/// (here its listen port is taken), the open says why and the link thread, which was
/// dialling already, ends and lets its QUIC socket go instead of dialling on for a session
/// that does not exist.
#[test]
fn a_failed_open_leaves_no_router_link_behind() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let realm = tether::keys::Realm::init(&dir.path().join("realm")).unwrap();
    realm.issue("robot", vec![], vec![], 30).unwrap();
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    // A router that never answers: a bound socket of this test's.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let before = (threads(), sockets());
    let mut c = local_cfg(dir.path());
    c.security.keys = Some(dir.path().join("realm").join("robot.key"));
    c.transport.listen = Some(taken.local_addr().unwrap());
    c.routers.connect = vec![format!("quic/{}", silent.local_addr().unwrap())];
    let Err(e) = Session::open(c) else {
        panic!("opened although its listen port is taken")
    };
    assert!(e.to_string().contains("bind"), "{e}");
    let now = || (threads(), sockets());
    assert!(
        wait_for(Duration::from_secs(5), || now() == before),
        "the link thread of the failed session is still running, or its socket is open: \
         (threads, sockets) {:?} before, {:?} after",
        before,
        now()
    );
}

/// A session's own credential is checked before its router links are dialled: revoked, it
/// is refused with that reason, and nothing was shown to a router with it: the router's
/// port received not one datagram, and the link thread (which makes its QUIC endpoint
/// while the keys load) ended without dialling before `open` returned.
#[test]
fn a_revoked_session_does_not_dial_its_routers() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let realm_dir = dir.path().join("realm");
    let realm = tether::keys::Realm::init(&realm_dir).unwrap();
    realm.issue("robot", vec![], vec![], 30).unwrap();
    realm.revoke("robot").unwrap();
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let before = threads();
    let mut c = local_cfg(dir.path());
    c.security.keys = Some(realm_dir.join("robot.key"));
    c.security.revocations = Some(realm_dir.join("revoked.toml"));
    c.routers.connect = vec![format!("quic/{}", silent.local_addr().unwrap())];
    let Err(e) = Session::open(c) else {
        panic!("opened with a revoked credential")
    };
    assert!(e.to_string().contains("revoked"), "{e}");
    // The open that failed waited for it: not one thread is left when it returns.
    assert_eq!(
        threads(),
        before,
        "the link thread of the revoked session is still running"
    );
    silent
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 2048];
    let got = silent.recv_from(&mut buf);
    assert!(
        got.is_err(),
        "the revoked session dialled its router: {got:?}"
    );
}
