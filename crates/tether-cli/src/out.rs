//! Standard output as the start of a pipe. When the reader goes away (`tether echo /x |
//! head -3`, `tether keys issue … | head -1`), the command ends quietly with status 0: no
//! panic from `println!`, no error line, and no waiting for a next sample to find out.

use std::fmt;
use std::io::{self, Write};

/// Standard output was closed by its reader. Returned up to `main`, which ends quietly
/// with status 0.
#[derive(Debug)]
pub(crate) struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output closed by its reader")
    }
}

impl std::error::Error for Closed {}

/// A write to standard output: a broken pipe becomes [`Closed`], other errors (a full
/// disk behind a redirection) stay errors.
pub(crate) fn check<T>(r: io::Result<T>) -> anyhow::Result<T> {
    r.map_err(|e| {
        if e.kind() == io::ErrorKind::BrokenPipe {
            anyhow::Error::new(Closed)
        } else {
            anyhow::Error::new(e).context("cannot write to standard output")
        }
    })
}

/// Whether `e` (or what caused it) is [`Closed`].
pub(crate) fn is_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Closed>())
}

/// `println!` that hands a closed standard output back as [`Closed`] instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::out::check({
            use std::io::Write as _;
            writeln!(std::io::stdout().lock(), $($arg)*)
        })
    };
}
pub(crate) use outln;

/// `print!` likewise (flushed, so that the write and its error happen now).
pub(crate) fn print(s: &str) -> anyhow::Result<()> {
    let mut o = io::stdout().lock();
    check(o.write_all(s.as_bytes()).and_then(|()| o.flush()))
}

/// Whether standard output is a pipe whose reader has gone, found without writing to it:
/// a command that waits (for a sample, for the next report) looks now and then, so that
/// `tether echo /x | head -3` ends when `head` does, not at the next sample.
#[cfg(unix)]
pub(crate) fn reader_gone() -> bool {
    let mut p = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, its count, and no wait; poll writes only `revents`.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    // A pipe's writing end polls as POLLERR once no reader is left (a hung-up terminal as
    // POLLHUP); a file or an open pipe reports neither.
    n > 0 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Elsewhere the closed pipe is found at the next write.
#[cfg(not(unix))]
pub(crate) fn reader_gone() -> bool {
    false
}
