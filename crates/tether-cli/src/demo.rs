//! `tether demo`: several processes on this host, live rates.
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

use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
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

/// The demo's processes: killed, waited for and unregistered when dropped, so every way out
/// of [`run`] (a return, an error, `?`) cleans up.
struct Children {
    procs: Vec<(String, Child)>,
    /// The registry's directory for the domain (`None`: no registry).
    registry: Option<PathBuf>,
}

impl Children {
    /// The first process that has exited, with how.
    fn exited(&mut self) -> Option<(String, std::process::ExitStatus)> {
        self.procs
            .iter_mut()
            .find_map(|(what, c)| Some((what.clone(), c.try_wait().ok()??)))
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, c) in &mut self.procs {
            let _ = c.kill();
            let _ = c.wait();
            // Killed, it could not remove its entry (`PID-PARTICIPANT.addr`); the next scan
            // of any session would, but there may be none.
            if let Some(dir) = &self.registry {
                let prefix = format!("{}-", c.id());
                if let Ok(rd) = std::fs::read_dir(dir) {
                    for e in rd.flatten() {
                        let name = e.file_name();
                        let name = name.to_string_lossy();
                        if name.starts_with(&prefix) && name.ends_with(".addr") {
                            let _ = std::fs::remove_file(e.path());
                        }
                    }
                }
            }
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP (its terminal closed), caught so that the demo ends as it
/// would at the end of its time.
struct Signals {
    int: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
    hup: Arc<AtomicBool>,
}

impl Signals {
    fn catch() -> anyhow::Result<Signals> {
        let s = Signals {
            int: Arc::new(AtomicBool::new(false)),
            term: Arc::new(AtomicBool::new(false)),
            hup: Arc::new(AtomicBool::new(false)),
        };
        signal_hook::flag::register(signal_hook::consts::SIGINT, s.int.clone())?;
        signal_hook::flag::register(signal_hook::consts::SIGTERM, s.term.clone())?;
        signal_hook::flag::register(signal_hook::consts::SIGHUP, s.hup.clone())?;
        Ok(s)
    }

    /// The shell's exit code for the signal caught, if one was.
    fn caught(&self) -> Option<u8> {
        if self.int.load(Ordering::Relaxed) {
            Some(130)
        } else if self.term.load(Ordering::Relaxed) {
            Some(143)
        } else if self.hup.load(Ordering::Relaxed) {
            Some(129)
        } else {
            None
        }
    }
}

/// Makes `c`'s process receive SIGTERM when this one ends, however it ends (SIGKILL
/// included, which no handler sees), so that no demo process outlives the demo.
fn end_with_parent(c: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec; it calls only prctl and
    // getppid, which are async-signal-safe, and allocates nothing (the other threads of
    // this process may have held the allocator's lock at the fork).
    unsafe {
        c.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The demo may have ended between the fork and the prctl: then nothing would
            // send the signal.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// An argument as a shell would need it typed.
fn quoted(a: &OsStr) -> String {
    let s = a.to_string_lossy();
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:,=@+[]".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The address the demo's other processes listen on: this one's with any port, when it
/// names a port (only one process can have it).
fn child_listen(cfg: &Config) -> Option<SocketAddr> {
    cfg.transport
        .listen
        .map(|a| SocketAddr::new(a.ip(), 0))
        .filter(|_| cfg.transport.listen.is_some_and(|a| a.port() != 0))
}

pub(crate) fn run(cfg: Config, a: DemoArgs, globals: &[OsString]) -> anyhow::Result<ExitCode> {
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
        end_with_parent(&mut c);
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
        "received {} chatter and {} camera samples in {:.0} s",
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

/// How another terminal runs this binary: `tether` when that is what `PATH` finds, else its
/// full path (the README's first command runs it through cargo, before any install).
fn program() -> String {
    let me = std::env::current_exe().and_then(std::fs::canonicalize).ok();
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            std::fs::canonicalize(d.join("tether"))
                .ok()
                .is_some_and(|p| Some(&p) == me.as_ref())
        })
    });
    match (on_path, &me) {
        (false, Some(p)) if !p.to_string_lossy().contains(char::is_whitespace) => {
            p.display().to_string()
        }
        _ => "tether".into(),
    }
}
