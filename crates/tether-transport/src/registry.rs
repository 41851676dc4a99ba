//! Same-host discovery without multicast: a directory per domain where each session writes
//! one small file naming its address. Sessions scan it and announce themselves to every
//! address found. Entries of processes that died (even by SIGKILL) are removed by whoever
//! scans next.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The registry directory used when the configuration names none:
/// `$XDG_RUNTIME_DIR/tether`, else `/tmp/tether-<uid>`.
pub fn default_registry_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(d).join("tether");
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/tmp/tether-{uid}"))
}

/// One session's entry in a domain's registry directory; removed on drop.
#[derive(Debug)]
pub struct Registry {
    dir: PathBuf,
    entry: PathBuf,
}

impl Registry {
    /// Registers `addr` for `participant` under `root/domain-<domain>/`.
    pub fn register(
        root: &Path,
        domain: u16,
        participant: u64,
        addr: SocketAddr,
    ) -> io::Result<Self> {
        let dir = root.join(format!("domain-{domain}"));
        fs::create_dir_all(&dir)?;
        let pid = std::process::id();
        let entry = dir.join(format!("{pid}-{participant:016x}.addr"));
        let tmp = dir.join(format!(".{pid}-{participant:016x}.tmp"));
        fs::write(&tmp, addr.to_string())?;
        fs::rename(&tmp, &entry)?;
        Ok(Registry { dir, entry })
    }

    /// The addresses of every other live session of the domain. Removes entries whose
    /// process is gone; ignores files it cannot read or parse.
    pub fn scan(&self) -> Vec<SocketAddr> {
        scan_entries(&self.dir, Some(&self.entry), None)
    }

    /// Scans `root/domain-<domain>/` without owning an entry, skipping `me`'s own entries.
    pub fn scan_dir(root: &Path, domain: u16, me: u64) -> Vec<SocketAddr> {
        let dir = root.join(format!("domain-{domain}"));
        scan_entries(&dir, None, Some(me))
    }

    /// The domain's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn scan_entries(dir: &Path, skip: Option<&Path>, me: Option<u64>) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    let mine = me.map(|m| format!("-{m:016x}.addr"));
    {
        for e in rd.flatten() {
            let path = e.path();
            if Some(path.as_path()) == skip || path.extension().is_none_or(|x| x != "addr") {
                continue;
            }
            if let (Some(m), Some(n)) = (&mine, path.file_name().and_then(|n| n.to_str())) {
                if n.ends_with(m.as_str()) {
                    continue;
                }
            }
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            if !process_alive(pid) {
                let _ = fs::remove_file(&path);
                continue;
            }
            if let Some(a) = fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse::<SocketAddr>().ok())
            {
                out.push(a);
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.entry);
    }
}

fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_scan_and_cleanup() {
        let root = tempfile::tempdir().unwrap();
        let a = Registry::register(root.path(), 3, 1, "127.0.0.1:1111".parse().unwrap()).unwrap();
        let b = Registry::register(root.path(), 3, 2, "127.0.0.1:2222".parse().unwrap()).unwrap();
        let other =
            Registry::register(root.path(), 4, 3, "127.0.0.1:3333".parse().unwrap()).unwrap();
        assert_eq!(a.scan(), vec!["127.0.0.1:2222".parse().unwrap()]);
        assert_eq!(b.scan(), vec!["127.0.0.1:1111".parse().unwrap()]);
        assert!(other.scan().is_empty(), "domains have separate directories");
        // An entry of a dead process is removed by the next scan.
        let dead = a.dir().join("999999999-00000000000000ff.addr");
        fs::write(&dead, "127.0.0.1:4444").unwrap();
        fs::write(a.dir().join("garbage.addr"), "not an address").unwrap();
        assert_eq!(a.scan(), vec!["127.0.0.1:2222".parse().unwrap()]);
        assert!(!dead.exists());
        drop(b);
        assert!(a.scan().is_empty());
    }
}
