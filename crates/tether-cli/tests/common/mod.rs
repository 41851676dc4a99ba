//! Helpers shared by the CLI integration tests (each test crate uses some of them).
#![allow(dead_code)]

pub(crate) mod realm;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `tether` with this test's own registry directory `dir`, on this host only (tests never
/// meet each other or the network), and no configuration or keys from the environment.
pub(crate) fn tether(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tether"));
    c.arg("--registry-dir").arg(dir);
    // This host only: tests never meet each other or the network.
    c.args(["--discovery", "localhost"]);
    c.env_remove("TETHER_CONFIG").env_remove("TETHER_KEYS");
    c
}

/// Starts `c` with its output piped and no input.
pub(crate) fn spawn(mut c: Command) -> Child {
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child with a hard limit, killing it if it overruns (a test never hangs).
/// Its output is read as it comes, so a child that prints more than a pipe holds does not
/// block on a full pipe.
pub(crate) fn finish(mut child: Child, limit: Duration) -> Output {
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let end = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Some(status) => Output {
            status,
            stdout,
            stderr,
        },
        None => panic!(
            "process overran {limit:?}\nstdout: {}\nstderr: {}",
            tail(&stdout),
            tail(&stderr)
        ),
    }
}

/// The last 4 KB of some output, as text.
fn tail(b: &[u8]) -> String {
    let from = b.len().saturating_sub(4096);
    String::from_utf8_lossy(&b[from..]).into_owned()
}

/// Output bytes as text.
pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A child whose stdout and stderr are read as they come.
pub(crate) struct Live {
    pub(crate) child: Child,
    pub(crate) out: Arc<Mutex<Vec<String>>>,
    err: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Live {
    pub(crate) fn spawn(mut c: Command) -> Live {
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tether");
        let out = Arc::new(Mutex::new(Vec::new()));
        let err = Arc::new(Mutex::new(String::new()));
        let (o, e) = (out.clone(), err.clone());
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let r1 = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                o.lock().unwrap().push(line);
            }
        });
        let r2 = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                e.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Live {
            child,
            out,
            err,
            readers: vec![r1, r2],
        }
    }

    pub(crate) fn lines(&self) -> usize {
        self.out.lock().unwrap().len()
    }

    pub(crate) fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Sends a signal by name (`STOP`, `CONT`) to the child.
    pub(crate) fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{sig} failed");
    }

    /// Waits for the child to exit (killing it after `limit`); its exit code.
    pub(crate) fn wait(&mut self, limit: Duration) -> Option<i32> {
        let end = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                // Everything it wrote is read once the pipes close.
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                return s.code();
            }
            if Instant::now() > end {
                self.kill();
                panic!(
                    "process overran {limit:?}\nstderr: {}\nlast lines: {:?}",
                    self.stderr(),
                    self.out
                        .lock()
                        .unwrap()
                        .iter()
                        .rev()
                        .take(3)
                        .collect::<Vec<_>>()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // A failed test leaves no process behind (a stopped one is continued first).
        let _ = Command::new("kill")
            .arg("-CONT")
            .arg(self.child.id().to_string())
            .stderr(Stdio::null())
            .status();
        self.kill();
    }
}

/// Waits until `f` holds, up to `limit`; false if it never did.
pub(crate) fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// The sample numbers of `--numbered` lines ("17 x").
pub(crate) fn numbers(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .map(|l| {
            l.split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("not a numbered sample: {l}"))
        })
        .collect()
}

/// The ranges an echo reported lost on stderr ("warning: lost 5 samples (11..=15) of …").
pub(crate) fn lost_ranges(stderr: &str) -> Vec<(u64, u64)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("warning: lost "))
        .map(|l| {
            let r = l
                .split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .map(|(r, _)| r)
                .unwrap_or_else(|| panic!("no range in: {l}"));
            let (a, b) = r.split_once("..=").unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

/// The processes whose parent is `pid`.
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // "PID (COMM) STATE PPID ...": COMM may hold spaces, so count from its ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            v.push(p);
        }
    }
    v
}

/// Whether process `pid` runs (exists and is not a zombie).
pub(crate) fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    })
}
