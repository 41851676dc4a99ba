//! The realm's revocation list as a file that changes while the session runs: loading it
//! ([`Session::set_revocations`](super::Session::set_revocations)), and watching the file
//! the configuration names (`security.revocations`, `--revocations`) to load it again when
//! it changes, from the discovery thread.
//!
//! A list the engine refuses (not the realm's, older than the one in force) or a file that
//! cannot be read leaves the list in force as it is, and is reported once as
//! [`Event::RevocationListRefused`] to the session's listeners (and logged).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use tether_core::{Event, RevocationRefusal};
use tether_crypto::RevocationList;

use super::shared::Shared;

/// How often the watched file's metadata is looked at.
pub(super) const WATCH_PERIOD: Duration = Duration::from_secs(1);

/// Reads a revocation list file (its signature is the engine's to check).
pub(super) fn read_list(path: &Path) -> Result<RevocationList, RevocationRefusal> {
    let unreadable = |e: &dyn std::fmt::Display| {
        RevocationRefusal::Unreadable(format!("{}: {e}", path.display()))
    };
    let text = std::fs::read_to_string(path).map_err(|e| unreadable(&e))?;
    RevocationList::from_toml(&text).map_err(|e| unreadable(&e))
}

/// Reads `path` and hands the list to the engine (which reports a refusal itself).
pub(super) fn load(shared: &Shared, path: &Path) -> Result<(), RevocationRefusal> {
    if shared.lock().core.config().security.is_none() {
        return Err(RevocationRefusal::SecurityOff);
    }
    let list = read_list(path)?;
    let copy = list.clone();
    shared.with_core(|i, now| i.core.set_revocations(now, list))?;
    routers_take(shared, copy);
    Ok(())
}

/// The router links check their routers against the list the engine took.
fn routers_take(shared: &Shared, list: RevocationList) {
    if let Some(r) = &shared.routers {
        r.set_revocations(list);
    }
}

/// What identifies a version of the file without reading it: modification time, length
/// and (on Unix) inode, which an atomic replace changes. `None`: it cannot be looked at.
type Fingerprint = Option<(SystemTime, u64, u64)>;

fn fingerprint(path: &Path) -> Fingerprint {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let ino = 0;
    Some((m.modified().ok()?, m.len(), ino))
}

/// Watches the revocation list file: when its metadata changes, reads it and hands it to
/// the engine. A file that does not read (half written, say) is looked at again at the next
/// period, and reported only if it has not changed since: a writer that replaces the file
/// atomically (as `tether keys` does) is never caught half way, and one that writes in
/// place is reported at most once per version.
pub(super) struct RevocationWatch {
    path: PathBuf,
    next: Instant,
    /// What the last look saw.
    seen: Option<Fingerprint>,
    /// The version last loaded or reported.
    done: Option<Fingerprint>,
}

impl RevocationWatch {
    /// Watches `path`; the first look (at once) reads it, so a change between the session
    /// opening and the watcher starting is not missed (the list opened with is in force
    /// already: loading it again changes nothing).
    pub(super) fn new(path: PathBuf) -> RevocationWatch {
        RevocationWatch {
            path,
            next: Instant::now(),
            seen: None,
            done: None,
        }
    }

    /// Looks at the file if a period has passed since the last look.
    pub(super) fn poll(&mut self, shared: &Shared, now: Instant) {
        if now < self.next {
            return;
        }
        self.next = now + WATCH_PERIOD;
        let fp = fingerprint(&self.path);
        if self.done == Some(fp) {
            return;
        }
        let stable = self.seen == Some(fp);
        self.seen = Some(fp);
        let list = match read_list(&self.path) {
            Ok(list) => list,
            // Perhaps half written: look again next period.
            Err(_) if !stable => return,
            Err(reason) => {
                self.done = Some(fp);
                tracing::warn!("revocation list not reloaded: {reason}");
                let e = Event::RevocationListRefused { reason };
                let mut calls = Vec::new();
                shared.lock().raise(e, &mut calls);
                for (l, e) in calls {
                    l(&e);
                }
                return;
            }
        };
        self.done = Some(fp);
        let copy = list.clone();
        match shared.with_core(|i, now| i.core.set_revocations(now, list)) {
            Ok(()) => routers_take(shared, copy),
            // The engine raised the event to the listeners itself.
            Err(e) => tracing::warn!("revocation list {} refused: {e}", self.path.display()),
        }
    }
}
