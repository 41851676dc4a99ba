//! `tether demo`: a demo of tether that needs nothing set up, with live rates.
//!
//! By default two sites and a cloud router on loopback, in a secure realm the demo creates
//! ([`sites`]); with `--local` several processes on this host that meet by discovery
//! ([`local`]). What both share is here: the processes they start end with them, whichever
//! way they end.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{Child, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use clap::Args;
use tether::Config;

mod local;
mod sites;

pub(crate) fn run(cfg: Config, a: DemoArgs, globals: &[OsString]) -> anyhow::Result<ExitCode> {
    if a.local {
        local::run(cfg, a, globals)
    } else {
        sites::run(cfg, a)
    }
}

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Seconds to run (0: until interrupted).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// The single-host demo instead: four processes on this host meeting by discovery,
    /// with this command's settings (--keys, --domain, --discovery, ...).
    #[arg(long)]
    local: bool,
}

/// What a subscriber received in one second.
#[derive(Default)]
struct Window {
    n: u64,
    bytes: u64,
    lat_us: Vec<f64>,
}

impl Window {
    /// Counts a sample written at `timestamp_ns` (the source's clock: this host's).
    fn add(w: &Mutex<Window>, bytes: usize, timestamp_ns: u64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut g = w.lock().unwrap_or_else(|p| p.into_inner());
        g.n += 1;
        g.bytes += bytes as u64;
        g.lat_us
            .push(now.saturating_sub(timestamp_ns) as f64 / 1000.0);
    }

    /// The window so far, leaving an empty one, with its latencies sorted.
    fn take(w: &Mutex<Window>) -> Window {
        let mut w = std::mem::take(&mut *w.lock().unwrap_or_else(|p| p.into_inner()));
        w.lat_us.sort_by(|a, b| a.total_cmp(b));
        w
    }

    /// The latency (µs) below which a fraction `q` of the samples arrived; 0 with none.
    fn quantile(&self, q: f64) -> f64 {
        let n = self.lat_us.len();
        if n == 0 {
            return 0.0;
        }
        let i = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
        self.lat_us[i]
    }
}

/// The demo's processes: killed, waited for and unregistered when dropped, so every way out
/// of a demo (a return, an error, `?`) cleans up.
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
        // The last started first: publishers before the routers they send through.
        for (_, c) in self.procs.iter_mut().rev() {
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

/// How a demo stopped by signal `code` (its exit status) begins its summary.
fn interrupted(code: u8) -> &'static str {
    match code {
        130 => "interrupted (SIGINT): ",
        143 => "interrupted (SIGTERM): ",
        129 => "interrupted (SIGHUP): ",
        _ => "interrupted: ",
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
