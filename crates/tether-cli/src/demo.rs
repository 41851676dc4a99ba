//! `tether demo`: several processes on this host, live rates.
//!
//! Two publisher processes (a 1 kHz reliable 256 B "chatter" topic and a 30 Hz best-effort
//! 60 KB "camera" topic), a subscriber process, and this process subscribing to both and
//! printing what it receives every second. Everything runs in a private registry directory
//! and domain, so it never meets other tether sessions on the machine.

use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use tether::{Config, Qos, Session};

use crate::topic::human_bytes;

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Seconds to run (0: until interrupted).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
}

#[derive(Default)]
struct Window {
    n: u64,
    bytes: u64,
    lat_us: Vec<f64>,
}

struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn run(mut cfg: Config, a: DemoArgs) -> anyhow::Result<ExitCode> {
    let dir = std::env::temp_dir().join(format!("tether-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let domain = 100 + (std::process::id() % 100) as u16;
    cfg.domain = domain;
    cfg.discovery.registry_dir = Some(dir.clone());
    let exe = std::env::current_exe().context("locating the tether binary")?;
    let spawn = |args: &[&str]| -> anyhow::Result<Child> {
        Command::new(&exe)
            .args(["--domain", &domain.to_string(), "--registry-dir"])
            .arg(&dir)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a demo process")
    };
    let children = Children(vec![
        spawn(&[
            "pub",
            "/demo/chatter",
            "--rate",
            "1000",
            "--size",
            "256",
            "--quiet",
        ])?,
        spawn(&[
            "pub",
            "/demo/camera",
            "--rate",
            "30",
            "--size",
            "60000",
            "--best-effort",
            "--quiet",
        ])?,
        spawn(&["echo", "/demo/chatter", "--no-print", "--quiet"])?,
    ]);
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
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let mut g = w.lock().unwrap_or_else(|p| p.into_inner());
            g.n += 1;
            g.bytes += s.payload.len() as u64;
            g.lat_us
                .push(now.saturating_sub(s.timestamp_ns) as f64 / 1000.0);
        })?);
    }
    println!(
        "tether demo: {} processes on this host (2 publishers, 2 subscribers), domain {domain}",
        children.0.len() + 1
    );
    println!("discovery: same-host registry {}", dir.display());
    let start = Instant::now();
    let mut totals = vec![0u64; topics.len()];
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let mut line = format!("[{:>3.0}s]", start.elapsed().as_secs_f64());
        for (i, (t, _, q)) in topics.iter().enumerate() {
            let mut w = std::mem::take(&mut *windows[i].lock().unwrap_or_else(|p| p.into_inner()));
            totals[i] += w.n;
            w.lat_us.sort_by(|a, b| a.total_cmp(b));
            let p50 = w.lat_us.get(w.lat_us.len() / 2).copied().unwrap_or(0.0);
            line += &format!(
                "  {t} {:>5} msg/s {:>10}/s p50 {:>6.0}µs ({q}, {} pub)",
                w.n,
                human_bytes(w.bytes as f64),
                p50,
                subs[i].matched()
            );
        }
        line += &format!("  sessions: {}", session.participants().len() + 1);
        println!("{line}");
        if a.duration > 0.0 && start.elapsed().as_secs_f64() >= a.duration {
            break;
        }
    }
    drop(children);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "received {} chatter and {} camera samples in {:.0} s",
        totals[0],
        totals[1],
        start.elapsed().as_secs_f64()
    );
    if totals.contains(&0) {
        eprintln!("error: a topic delivered nothing");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
