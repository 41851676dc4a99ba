//! SIGINT (Ctrl-C) and SIGTERM for `pub`, `echo`, `hz` and `bw`: the first ends the
//! command the way a normal end does (what `pub` wrote is flushed and acknowledged, the
//! summary and `--stats` are printed) with the shell's status for the signal (130, 143);
//! a second one ends the process at once, with the same status. A second one within
//! [`SAME_REQUEST`] of the first is the same request sent twice, not a second one: GNU
//! `timeout` (without `--foreground`) signals the command and then its whole process
//! group, so the command gets each signal twice within microseconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};

/// Signals this close to the first are taken as the same request.
const SAME_REQUEST: Duration = Duration::from_millis(100);

/// CLOCK_MONOTONIC in nanoseconds, at least 1; async-signal-safe (clock_gettime is).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, and is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
        .max(1)
}

/// How often a command that waits looks up: for a signal, a closed standard output, or
/// its deadline.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// The signals caught so far.
pub(crate) struct Interrupt {
    /// The number of the signal caught (0: none).
    first: Arc<AtomicUsize>,
    /// A second request came while the command said it would handle one ([`Self::handle_again`]).
    again: Arc<AtomicBool>,
    /// The command handles a second request itself now (it ends at once, with its summary).
    handles_again: Arc<AtomicBool>,
}

/// True if `sig` is ignored as this process was started: a shell starts a background job
/// of a script with SIGINT ignored, so that the script's Ctrl-C does not reach it.
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

impl Interrupt {
    /// Catches SIGINT and SIGTERM from now on.
    pub(crate) fn catch() -> anyhow::Result<Interrupt> {
        let first = Arc::new(AtomicUsize::new(0));
        let again = Arc::new(AtomicBool::new(false));
        let handles_again = Arc::new(AtomicBool::new(false));
        // When the first signal came (CLOCK_MONOTONIC, ns; 0: none yet).
        let at = Arc::new(AtomicU64::new(0));
        for sig in [SIGINT, SIGTERM] {
            if ignored(sig) {
                // Left ignored, as whoever started this process asked.
                continue;
            }
            let (first, at) = (first.clone(), at.clone());
            let (again, handles_again) = (again.clone(), handles_again.clone());
            let action = move || {
                let now = monotonic_ns();
                match at.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => first.store(sig as usize, Ordering::SeqCst),
                    // A second request: the command ends at once, by itself if it said it
                    // would (it prints what it did first), else here (a stuck wait for
                    // acknowledgements is never a trap).
                    Err(t) if now.saturating_sub(t) >= SAME_REQUEST.as_nanos() as u64 => {
                        if handles_again.load(Ordering::SeqCst) {
                            again.store(true, Ordering::SeqCst);
                        } else {
                            signal_hook::low_level::exit(128 + sig)
                        }
                    }
                    Err(_) => {}
                }
            };
            // SAFETY: the action only reads the clock, uses atomics and may call _exit, all
            // async-signal-safe; it allocates nothing and takes no lock.
            unsafe { signal_hook::low_level::register(sig, action) }?;
        }
        Ok(Interrupt {
            first,
            again,
            handles_again,
        })
    }

    /// From now on (`on`) a second request sets [`Self::again`] instead of ending the
    /// process: the command polls it and ends at once by itself, saying what it did. Only
    /// while it polls often (a wait in short steps).
    pub(crate) fn handle_again(&self, on: bool) {
        self.handles_again.store(on, Ordering::SeqCst);
    }

    /// True if a second request came while [`Self::handle_again`] was on.
    pub(crate) fn again(&self) -> bool {
        self.again.load(Ordering::SeqCst)
    }

    /// The signal caught, if one was: its name and the shell's exit status for it.
    pub(crate) fn caught(&self) -> Option<Signal> {
        match self.first.load(Ordering::SeqCst) {
            0 => None,
            n if n == SIGTERM as usize => Some(Signal {
                name: "SIGTERM",
                status: 143,
            }),
            _ => Some(Signal {
                name: "SIGINT",
                status: 130,
            }),
        }
    }

    /// Sleeps until `until`, or less if a signal comes; the signal if one did.
    pub(crate) fn sleep_until(&self, until: Instant) -> Option<Signal> {
        loop {
            if let Some(s) = self.caught() {
                return Some(s);
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            std::thread::sleep((until - now).min(TICK));
        }
    }
}

/// A signal that ended a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Signal {
    /// `SIGINT` or `SIGTERM`.
    pub(crate) name: &'static str,
    /// The exit status that tells it: 128 + its number.
    pub(crate) status: u8,
}

/// Why a command that waits stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// It did what it was asked (`--count` samples).
    Done,
    /// Its deadline came (`--timeout`, `--duration`).
    Deadline,
    /// A signal came.
    Signal(Signal),
    /// The reader of its standard output went away.
    Closed,
}

/// What ends a command that waits, looked at often: a signal and the deadline at every
/// call (cheap), the reader of standard output once per [`TICK`] (a system call).
pub(crate) struct Watch<'a> {
    interrupt: &'a Interrupt,
    deadline: Option<Instant>,
    pipe_checked: Instant,
}

impl<'a> Watch<'a> {
    pub(crate) fn new(interrupt: &'a Interrupt, deadline: Option<Instant>) -> Watch<'a> {
        Watch {
            interrupt,
            deadline,
            pipe_checked: Instant::now(),
        }
    }

    /// Why to stop now, if there is a reason.
    pub(crate) fn check(&mut self) -> Option<End> {
        if let Some(s) = self.interrupt.caught() {
            return Some(End::Signal(s));
        }
        let now = Instant::now();
        if self.deadline.is_some_and(|d| now >= d) {
            return Some(End::Deadline);
        }
        if now.duration_since(self.pipe_checked) >= TICK {
            self.pipe_checked = now;
            if crate::out::reader_gone() {
                return Some(End::Closed);
            }
        }
        None
    }

    /// How long to wait for something at most before looking again.
    pub(crate) fn wait(&self) -> Duration {
        match self.deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(TICK),
            None => TICK,
        }
    }
}
