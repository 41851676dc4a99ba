//! Peer processes: the parent re-runs its own executable (the `tether` binary) with a
//! hidden subcommand, and the two talk in lines over the child's stdin and stdout.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;
use tether_testkit::netns::Namespace;

use super::BenchCfg;

/// A child process running `tether SUBCOMMAND …`, killed on drop if it has not exited
/// within 2 s of its stdin closing.
pub(crate) struct Peer {
    child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Peer {
    /// `tether SUBCOMMAND ARGS…` with piped stdin and stdout, in network namespace `ns`
    /// if given.
    pub(crate) fn spawn_with(
        ns: Option<&Namespace>,
        subcommand: &str,
        args: &[String],
    ) -> anyhow::Result<Peer> {
        let exe = std::env::current_exe().context("locating the tether binary")?;
        let mut cmd = match ns {
            Some(ns) => ns.command(exe),
            None => Command::new(exe),
        };
        cmd.arg(subcommand).args(args);
        Peer::start(cmd, "starting a benchmark process")
    }

    /// `tether bench-peer ROLE` in `cfg`'s private domain and registry (and its realm, if
    /// secure; through its peers' routers, if any), with its discovery range, busy-polling if `busy`, pinned to `cpu` if given.
    pub(crate) fn spawn(
        cfg: &BenchCfg,
        role: &str,
        busy: bool,
        cpu: Option<usize>,
    ) -> anyhow::Result<Peer> {
        Peer::spawn_in(None, cfg, role, busy, cpu, &[])
    }

    /// [`spawn`](Self::spawn) in namespace `ns` (if given), with `extra` flags after the
    /// others (`--listen`, `--peer`: later flags win).
    pub(crate) fn spawn_in(
        ns: Option<&Namespace>,
        cfg: &BenchCfg,
        role: &str,
        busy: bool,
        cpu: Option<usize>,
        extra: &[String],
    ) -> anyhow::Result<Peer> {
        let exe = std::env::current_exe().context("locating the tether binary")?;
        let mut cmd = match ns {
            Some(ns) => ns.command(exe),
            None => Command::new(exe),
        };
        cmd.arg(crate::PEER_SUBCOMMAND)
            .arg(role)
            .arg("--domain")
            .arg(cfg.domain().to_string())
            .arg("--registry-dir")
            .arg(cfg.dir())
            .args(["--discovery", cfg.base.discovery.range.name()])
            .args(cfg.peer_args());
        if busy {
            cmd.arg("--busy-poll");
        }
        if let Some(c) = cpu {
            cmd.arg("--cpu").arg(c.to_string());
        }
        cmd.args(extra);
        Peer::start(cmd, "starting the benchmark peer")
    }

    fn start(mut cmd: Command, what: &'static str) -> anyhow::Result<Peer> {
        // A peer's keys come from its flags alone: a plain run's peer stays plain.
        // Nor does it discover beyond what the benchmark configures.
        cmd.env_remove("TETHER_KEYS")
            .env_remove("TETHER_DOMAIN")
            .env_remove("TETHER_DISCOVERY")
            .env_remove("TETHER_PEERS");
        // Killed with the bench, however it ends (a bench killed by SIGPIPE left its
        // router running).
        end_with_parent(&mut cmd, libc::SIGKILL);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context(what)?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().context("peer stdout")?);
        Ok(Peer {
            child,
            stdin,
            stdout,
        })
    }

    /// The peer's next line, trimmed.
    pub(crate) fn line(&mut self) -> anyhow::Result<String> {
        let mut s = String::new();
        if self.stdout.read_line(&mut s)? == 0 {
            bail!("benchmark peer exited early");
        }
        Ok(s.trim().to_string())
    }

    /// Waits for the peer to exit (its stdin closed first): how it ended.
    pub(crate) fn wait(mut self) -> anyhow::Result<std::process::ExitStatus> {
        self.stdin.take();
        Ok(self.child.wait()?)
    }

    /// Sends the peer one line.
    pub(crate) fn send(&mut self, s: &str) -> anyhow::Result<()> {
        let i = self.stdin.as_mut().context("peer stdin")?;
        writeln!(i, "{s}")?;
        i.flush()?;
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stdin.take();
        let end = Instant::now() + Duration::from_secs(2);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The peer side: the next line on stdin, trimmed; `None` at its end.
pub(crate) fn read_line() -> anyhow::Result<Option<String>> {
    let mut s = String::new();
    if std::io::stdin().read_line(&mut s)? == 0 {
        return Ok(None);
    }
    Ok(Some(s.trim().to_string()))
}

/// The peer side: one line to the parent, flushed.
pub(crate) fn say(s: &str) -> anyhow::Result<()> {
    let mut o = std::io::stdout().lock();
    writeln!(o, "{s}")?;
    o.flush()?;
    Ok(())
}

/// The peer side: reads `busy` / `block` lines from stdin, applies them and answers `ok`,
/// until EOF.
pub(crate) fn serve_commands(mut set_busy: impl FnMut(bool)) -> anyhow::Result<()> {
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "busy" => set_busy(true),
            "block" => set_busy(false),
            _ => continue,
        }
        // Let the switch take effect before the parent measures.
        std::thread::sleep(Duration::from_millis(20));
        println!("ok");
        std::io::stdout().flush()?;
    }
    Ok(())
}

/// What a counting peer has received: how many, and when the first and the last came
/// (ns after `base`, plus one: 0 is none yet). Lock-free, so the count costs the receiving
/// thread no more than a reading of the clock and two atomic writes per sample.
pub(crate) struct Counter {
    base: Instant,
    count: AtomicU64,
    first: AtomicU64,
    last: AtomicU64,
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            base: Instant::now(),
            count: AtomicU64::new(0),
            first: AtomicU64::new(0),
            last: AtomicU64::new(0),
        }
    }
}

impl Counter {
    /// Counts one arrival, now.
    pub(crate) fn hit(&self) {
        let t = self.base.elapsed().as_nanos() as u64 + 1;
        if self.count.fetch_add(1, Ordering::Relaxed) == 0 {
            self.first.store(t, Ordering::Relaxed);
        }
        self.last.store(t, Ordering::Relaxed);
    }

    /// The peer side: answers each `report` line on stdin with the count and span since
    /// the last report, as JSON, until EOF.
    pub(crate) fn report_loop(&self) -> anyhow::Result<()> {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line.trim() == "report" {
                let n = self.count.swap(0, Ordering::Relaxed);
                let f = self.first.swap(0, Ordering::Relaxed);
                let l = self.last.load(Ordering::Relaxed);
                let secs = match (f, l) {
                    (0, _) | (_, 0) => 0.0,
                    (f, l) => l.saturating_sub(f) as f64 / 1e9,
                };
                println!("{}", json!({"count": n, "secs": secs}));
                std::io::stdout().flush()?;
            }
        }
        Ok(())
    }
}

/// Makes `c`'s process receive `signal` when this one ends, however it ends (SIGKILL
/// included, which no handler sees), so that no child (a demo's processes, a bench's
/// routers and peers) outlives its parent; and puts it in a process group of its own, so
/// that a terminal's Ctrl-C (sent to the whole foreground group) reaches only the parent,
/// which ends its children itself: each of them caught it too and printed its own
/// shutdown (a router stopping, a publisher's "interrupted" and unacknowledged samples)
/// after the demo's summary. The signal comes when the *thread* that spawned the child
/// ends: spawn from a thread that lives as long as the child should.
pub fn end_with_parent(c: &mut Command, signal: libc::c_int) {
    c.process_group(0);
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec; it calls only prctl and
    // getppid, which are async-signal-safe, and allocates nothing (the other threads of
    // this process may have held the allocator's lock at the fork).
    unsafe {
        c.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
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
