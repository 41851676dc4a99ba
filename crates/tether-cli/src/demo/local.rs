//! `tether demo --local`: several processes on this host, live rates.
//!
//! Two publisher processes (a 1 kHz reliable 256 B "chatter" topic and a 30 Hz best-effort
//! 60 KB "camera" topic), a subscriber process, and this process subscribing to both and
//! printing what it receives every second. Every process runs with this one's settings:
//! its global flags (`--config`, `--domain`, `--keys`, `--revocations`, `--registry-dir`,
//! `--discovery`, `--peer`) and its environment, so a demo in a secure realm or another
//! domain runs there whole, and another terminal can watch it with the same flags (the
//! demo prints the commands). `--listen` with a fixed port is this process's; the others
//! listen on the same address with any port.
//!
//! Nothing is left behind, whichever way the demo ends (its time is up, a process of it
//! fails, an error, SIGINT, SIGTERM or SIGHUP): the processes it started are killed and
//! waited for, and their entries in the registry directory removed. Killed itself
//! (SIGKILL, where nothing of it runs any more), its processes are ended by the kernel
//! (`PR_SET_PDEATHSIG`), and the next session that scans the registry removes their
//! entries.
//!
//! Its processes find each other by discovery on this host: a demo whose discovery is off
//! (`--discovery off`, or a file with neither registry nor multicast) is refused before
//! anything starts.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tether::{Config, Qos, Session};

use super::{Children, DemoArgs, Signals, Window, program, quoted};
use crate::topic::human_bytes;
use tether_bench::end_with_parent;

/// The address the demo's other processes listen on: this one's with any port, when it
/// names a port (only one process can have it).
fn child_listen(cfg: &Config) -> Option<SocketAddr> {
    cfg.transport
        .listen
        .map(|a| SocketAddr::new(a.ip(), 0))
        .filter(|_| cfg.transport.listen.is_some_and(|a| a.port() != 0))
}

pub(super) fn run(cfg: Config, a: DemoArgs, globals: &[OsString]) -> anyhow::Result<ExitCode> {
    if !cfg.discovery.uses_registry() && !cfg.discovery.uses_multicast() {
        anyhow::bail!(
            "tether demo needs discovery on this host, and it is off (range \"{}\", or \
             registry and multicast both false): its processes could not find each other; \
             run it with --discovery localhost (this host only) or --discovery subnet",
            cfg.discovery.range
        );
    }
    let signals = Signals::catch()?;
    let mut globals = globals.to_vec();
    if cfg.domain != 0 && !globals.iter().any(|g| g == "--domain") {
        // From TETHER_DOMAIN (inherited by the processes, but not by another terminal).
        globals.extend(["--domain".into(), cfg.domain.to_string().into()]);
    }
    let registry = cfg.discovery.uses_registry().then(|| {
        cfg.discovery
            .registry_root()
            .join(format!("domain-{}", cfg.domain))
    });
    let domain = cfg.domain;
    let listen = child_listen(&cfg);
    // This process first: a setting that cannot work (an address taken, a credential that
    // grants no /demo topic) is said before anything starts.
    let session = Session::open(cfg)?;
    let topics = [
        ("/demo/chatter", Qos::default(), "reliable"),
        ("/demo/camera", Qos::default().best_effort(), "best effort"),
    ];
    let windows: Vec<Arc<Mutex<Window>>> = topics
        .iter()
        .map(|_| Arc::new(Mutex::new(Window::default())))
        .collect();
    let mut subs = Vec::new();
    for (i, (t, q, _)) in topics.iter().enumerate() {
        let w = windows[i].clone();
        subs.push(session.subscriber_with_callback(*t, *q, move |s| {
            Window::add(&w, s.payload.len(), s.timestamp_ns);
        })?);
    }
    let exe = std::env::current_exe().context("locating the tether binary")?;
    let mut children = Children {
        procs: Vec::new(),
        registry,
    };
    for args in [
        &[
            "pub",
            "/demo/chatter",
            "--rate",
            "1000",
            "--size",
            "256",
            // Ended with the demo (SIGTERM when it dies): its subscribers died with it, and
            // no acknowledgement will come to wait for.
            "--linger",
            "0",
            "--quiet",
        ][..],
        &[
            "pub",
            "/demo/camera",
            "--rate",
            "30",
            "--size",
            "60000",
            "--best-effort",
            "--quiet",
        ],
        &["echo", "/demo/chatter", "--no-print", "--quiet"],
    ] {
        let mut c = Command::new(&exe);
        c.args(&globals);
        if let Some(l) = listen {
            c.arg("--listen").arg(l.to_string());
        }
        // SIGTERM: each removes its registry entry as it ends.
        end_with_parent(&mut c, libc::SIGTERM);
        let child = c
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a demo process")?;
        children
            .procs
            .push((format!("tether {}", args.join(" ")), child));
    }
    println!(
        "tether demo: {} processes on this host (2 publishers, 2 subscribers), domain {domain}",
        children.procs.len() + 1
    );
    let flags: String = globals.iter().map(|g| format!("{} ", quoted(g))).collect();
    let prog = program();
    println!(
        "watch it from another terminal: {prog} {flags}topics -v   {prog} {flags}echo /demo/chatter"
    );
    if a.duration > 0.0 {
        println!("it runs {} s (--duration SECS; 0 until Ctrl-C)", a.duration);
    }
    let start = Instant::now();
    let mut totals = vec![0u64; topics.len()];
    let mut failed = None;
    let mut signal = None;
    'run: loop {
        // Wakes often enough to end soon after a signal.
        let second = Instant::now() + Duration::from_secs(1);
        while Instant::now() < second {
            if let Some(code) = signals.caught() {
                signal = Some(code);
                break 'run;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // A line for the second and one per topic: each fits 80 columns.
        println!(
            "[{:>3.0}s] sessions: {}",
            start.elapsed().as_secs_f64(),
            session.participants().len() + 1
        );
        for (i, (t, _, q)) in topics.iter().enumerate() {
            let w = Window::take(&windows[i]);
            totals[i] += w.n;
            let p50 = w.quantile(0.5);
            println!(
                "       {t:<13} {:>5} msg/s {:>10}/s p50 {:>6.0}µs ({q}, {} pub)",
                w.n,
                human_bytes(w.bytes as f64),
                p50,
                subs[i].matched()
            );
        }
        if let Some(f) = children.exited() {
            failed = Some(f);
            break;
        }
        if a.duration > 0.0 && start.elapsed().as_secs_f64() >= a.duration {
            break;
        }
    }
    drop(children);
    println!(
        "{}received {} chatter and {} camera samples in {:.0} s",
        signal.map_or("", super::interrupted),
        totals[0],
        totals[1],
        start.elapsed().as_secs_f64()
    );
    if let Some(code) = signal {
        return Ok(ExitCode::from(code));
    }
    if let Some((what, status)) = failed {
        eprintln!("error: a demo process ended early ({status}): {what}");
        return Ok(ExitCode::from(1));
    }
    if totals.contains(&0) {
        eprintln!("error: a topic delivered nothing");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
