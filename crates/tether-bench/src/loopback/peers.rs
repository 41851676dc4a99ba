//! The far sides of the loopback benches, each run as `tether bench-peer ROLE` and driven
//! over its stdin (see `harness::process`).

use std::io::Write;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tether::{Config, Publisher, Qos, Session};

use super::{PING, PONG, THR};
use crate::harness::process::{Counter, serve_commands};

/// `udp-echo`: echoes raw UDP datagrams; prints its port, then switches between blocking
/// and busy-polling receive on `busy` / `block` lines.
pub(crate) fn udp_echo(busy_poll: bool) -> anyhow::Result<()> {
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    println!("{}", sock.local_addr()?.port());
    std::io::stdout().flush()?;
    let busy = Arc::new(AtomicBool::new(busy_poll));
    let b2 = busy.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        let mut cur = None;
        loop {
            let want = b2.load(Ordering::Relaxed);
            if cur != Some(want) {
                let _ = sock.set_nonblocking(want);
                let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
                cur = Some(want);
            }
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    let _ = sock.send_to(&buf[..n], from);
                }
                Err(_) => std::hint::spin_loop(),
            }
        }
    });
    serve_commands(|on| busy.store(on, Ordering::SeqCst))
}

/// `pong`: echoes each sample of the ping topic on the pong topic; switches the session
/// between blocking and busy-polling receive on `busy` / `block` lines.
pub(crate) fn pong(cfg: Config) -> anyhow::Result<()> {
    let session = Session::open(cfg)?;
    let p: Arc<Publisher> = Arc::new(session.publisher(PONG, Qos::default())?);
    let p2 = p.clone();
    let _s = session.subscriber_with_callback(PING, Qos::default(), move |s| {
        let _ = p2.put(s.payload);
    })?;
    serve_commands(|on| session.set_busy_poll(on))
}

/// `udp-sink`: counts raw UDP datagrams on `ip` (default loopback); prints its port;
/// answers `report` lines.
pub(crate) fn udp_sink(busy: bool, ip: Option<std::net::IpAddr>) -> anyhow::Result<()> {
    let ip = ip.unwrap_or(std::net::Ipv4Addr::LOCALHOST.into());
    let sock = UdpSocket::bind((ip, 0))?;
    socket_rcvbuf(&sock, 16 << 20);
    println!("{}", sock.local_addr()?.port());
    std::io::stdout().flush()?;
    let counter = Arc::new(Counter::default());
    let c2 = counter.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        let _ = sock.set_nonblocking(busy);
        loop {
            if sock.recv(&mut buf).is_err() {
                std::hint::spin_loop();
                continue;
            }
            c2.hit();
        }
    });
    counter.report_loop()
}

/// `sink` and `sink-reliable`: counts the throughput topic (best effort, or reliable
/// keep-all); answers `report` lines.
pub(crate) fn sink(cfg: Config, reliable: bool) -> anyhow::Result<()> {
    let session = Session::open(cfg)?;
    let qos = if reliable {
        Qos::default().keep_all()
    } else {
        Qos::default().best_effort().keep_last(1)
    };
    let counter = Arc::new(Counter::default());
    let c2 = counter.clone();
    let _s = session.subscriber_with_callback(THR, qos, move |_s| c2.hit())?;
    counter.report_loop()
}

/// The same receive buffer as tether's own sockets (16 MiB), so the comparison is fair.
fn socket_rcvbuf(sock: &UdpSocket, size: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt on a valid fd with a pointer to a live c_int and its size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}
