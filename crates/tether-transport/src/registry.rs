//! Same-host discovery without multicast: a directory per domain where each session writes
//! one small file naming its address. Sessions scan it and announce themselves to every
//! address found. Entries of processes that died (even by SIGKILL) are removed by whoever
//! scans next (and may: in the shared default directory, only their owner or root can).
//!
//! The default directory, `/tmp/tether`, is shared by every user of the host, so that
//! sessions of different users meet as they would across a LAN. It is world-writable with
//! the sticky bit (mode 1777, as `/tmp`), its entries readable by all (0644): any user can
//! add entries and remove their own, none can remove another's. What a local user can do
//! with it is what they could do on the network anyway: list the sessions' ports, and point
//! sessions at addresses of this host (which then receive announcements; an entry naming
//! another host's address is left out, so the directory cannot aim sessions at a victim). Whom a
//! session trusts is decided by the engine (addresses are challenged, and in a secure realm
//! peers authenticate), never by this directory. Reading it is bounded: only regular files,
//! never followed through a link, opened without blocking, at most 64 bytes each, at most
//! [`MAX_ENTRIES`] entries a scan.

use std::fs;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The registry directory used when the configuration names none, shared by every user of
/// the host.
pub const SHARED_REGISTRY_DIR: &str = "/tmp/tether";

/// Most entries one scan reads: a directory filled by someone else costs a bounded time.
pub const MAX_ENTRIES: usize = 4096;

/// The registry directory used when the configuration names none: [`SHARED_REGISTRY_DIR`],
/// the same for every user of the host (same-host discovery works across users).
pub fn default_registry_dir() -> PathBuf {
    PathBuf::from(SHARED_REGISTRY_DIR)
}

/// Creates `dir` (and its parents) if missing and makes sure it is a real directory, not a
/// link to one elsewhere (its parents may be links: `/var/run`). Created by us: mode 1777 (world-writable, sticky), whatever the
/// umask, so that other users' sessions can register in it too.
fn shared_dir(dir: &Path) -> io::Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => {}
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a directory", dir.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                if !parent.as_os_str().is_empty() {
                    fs::create_dir_all(parent)?;
                }
            }
            match fs::create_dir(dir) {
                Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(0o1777))?,
                // Another session created it between our look and now.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            return shared_dir(dir);
        }
        Err(e) => return Err(e),
    }
    Ok(())
}

/// One session's entry in a domain's registry directory; removed on drop.
#[derive(Debug)]
pub struct Registry {
    dir: PathBuf,
    entry: PathBuf,
}

impl Registry {
    /// Registers `addr` for `participant` under `root/domain-<domain>/`, creating the
    /// directories shared (mode 1777) if they are missing. The entry is readable by all.
    pub fn register(
        root: &Path,
        domain: u16,
        participant: u64,
        addr: SocketAddr,
    ) -> io::Result<Self> {
        let dir = root.join(format!("domain-{domain}"));
        shared_dir(root)?;
        shared_dir(&dir)?;
        let pid = std::process::id();
        let entry = dir.join(format!("{pid}-{participant:016x}.addr"));
        let tmp = dir.join(format!(".{pid}-{participant:016x}.tmp"));
        // A new file, never one someone else put there (nor a link to one).
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.set_permissions(fs::Permissions::from_mode(0o644))?;
        let line = match netns_id() {
            Some(ns) => format!("{addr} net={ns}"),
            None => addr.to_string(),
        };
        let written = f.write_all(line.as_bytes());
        drop(f);
        if let Err(e) = written.and_then(|()| fs::rename(&tmp, &entry)) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
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
    let ns = netns_id();
    let mut local = Vec::new();
    for e in rd.flatten().take(MAX_ENTRIES) {
        let path = e.path();
        if Some(path.as_path()) == skip || path.extension().is_none_or(|x| x != "addr") {
            continue;
        }
        if let (Some(m), Some(n)) = (&mine, path.file_name().and_then(|n| n.to_str())) {
            if n.ends_with(m.as_str()) {
                continue;
            }
        }
        // Only plain files (a FIFO would block the read, a link lead elsewhere).
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
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
            // Fails for another user's entry in a sticky directory: theirs to remove.
            let _ = fs::remove_file(&path);
            continue;
        }
        match read_entry(&path) {
            // A session of another network namespace: its loopback is not ours.
            Some((_, Some(theirs))) if ns.is_some_and(|n| n != theirs) => {}
            // Only addresses of this host: an entry naming another host's address is a local
            // user pointing sessions' announcements at a victim.
            Some((a, _)) if !host_local(a.ip(), &mut local) => {}
            Some((a, _)) => out.push(a),
            None => {}
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether `ip` is an address of this host: loopback, or one a socket can be bound to
/// (the kernel refuses to bind another host's address). Answers are kept in `seen` for the
/// rest of a scan.
fn host_local(ip: std::net::IpAddr, seen: &mut Vec<(std::net::IpAddr, bool)>) -> bool {
    if ip.is_loopback() {
        return true;
    }
    if let Some((_, ok)) = seen.iter().find(|(a, _)| *a == ip) {
        return *ok;
    }
    let ok = !ip.is_unspecified()
        && !ip.is_multicast()
        && std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok();
    seen.push((ip, ok));
    ok
}

/// The network namespace this process is in (the inode of `/proc/self/ns/net`), written
/// in each entry: sessions of other namespaces that share the directory (`ip netns exec`,
/// containers with a shared `/tmp`) are left out of a scan, since the addresses they
/// registered are of their own loopback.
fn netns_id() -> Option<u64> {
    fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino())
}

/// The address in an entry and the network namespace it names, if any: a regular file of at
/// most 64 bytes (`ADDR` or `ADDR net=N`), opened without following a link and without
/// blocking.
fn read_entry(path: &Path) -> Option<(SocketAddr, Option<u64>)> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let m = f.metadata().ok()?;
    if !m.file_type().is_file() || m.size() > 64 {
        return None;
    }
    let mut s = String::new();
    f.take(64).read_to_string(&mut s).ok()?;
    let mut words = s.split_whitespace();
    let addr = words.next()?.parse().ok()?;
    let ns = match words.next() {
        Some(w) => Some(w.strip_prefix("net=")?.parse().ok()?),
        None => None,
    };
    Some((addr, ns))
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.entry);
    }
}

/// Whether process `pid` exists and has not ended: a zombie (ended, not yet reaped, as the
/// orphans of a container whose first process does not reap them may stay for good) has no
/// session any more.
fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    let exists = rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !zombie(pid)
}

/// Whether `/proc/PID/stat` says the process is a zombie (state `Z`); false if it cannot
/// be read.
fn zombie(pid: i32) -> bool {
    // "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so read after the last ')'.
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
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

    /// An entry naming an address that is not this host's (a local user aiming sessions'
    /// announcements at a victim elsewhere) is left out of a scan; loopback stays.
    #[test]
    fn entries_of_other_hosts_addresses_are_left_out() {
        let root = tempfile::tempdir().unwrap();
        let a = Registry::register(root.path(), 3, 1, "127.0.0.1:1111".parse().unwrap()).unwrap();
        let pid = std::process::id();
        for (k, addr) in [
            "192.0.2.7:7400",
            "198.51.100.1:9",
            "0.0.0.0:5",
            "224.0.0.1:7",
        ]
        .iter()
        .enumerate()
        {
            let entry = a.dir().join(format!("{pid}-00000000000000{k:02x}.addr"));
            fs::write(&entry, addr).unwrap();
        }
        fs::write(
            a.dir().join(format!("{pid}-00000000000000aa.addr")),
            "127.0.0.1:4444",
        )
        .unwrap();
        assert_eq!(a.scan(), vec!["127.0.0.1:4444".parse().unwrap()]);
    }

    /// A process that has ended but is not reaped yet (a zombie) has no session: its entry
    /// is removed like a dead process's.
    #[test]
    fn entries_of_zombies_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let a = Registry::register(root.path(), 0, 1, "127.0.0.1:1111".parse().unwrap()).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !zombie(pid) {
            assert!(std::time::Instant::now() < end, "`true` never ended");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let entry = a.dir().join(format!("{pid}-00000000000000ff.addr"));
        fs::write(&entry, "127.0.0.1:4444").unwrap();
        let scanned = a.scan();
        child.wait().unwrap();
        assert!(scanned.is_empty(), "{scanned:?}");
        assert!(!entry.exists());
        assert!(process_alive(std::process::id() as i32));
    }

    /// The directories a session creates are shared (1777) whatever the umask, its entry
    /// readable by all; what is not a plain small file is skipped without blocking; a link
    /// in place of the directory is refused.
    #[test]
    fn shared_directories_and_hostile_entries() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join("shared");
        // SAFETY: umask only changes this process's file creation mask.
        let old = unsafe { libc::umask(0o077) };
        let a = Registry::register(&base, 0, 1, "127.0.0.1:1111".parse().unwrap());
        // SAFETY: as above, restoring the mask.
        unsafe { libc::umask(old) };
        let a = a.unwrap();
        let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&base), 0o1777);
        assert_eq!(mode(a.dir()), 0o1777);
        assert_eq!(mode(&a.entry), 0o644);
        // A FIFO named as a live entry (this process) would block a plain read forever.
        let pid = std::process::id();
        let fifo = a.dir().join(format!("{pid}-00000000000000aa.addr"));
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        // Too long to be an address, and a link to an entry elsewhere.
        fs::write(
            a.dir().join(format!("{pid}-00000000000000bb.addr")),
            format!("127.0.0.1:2222{}", " ".repeat(100)),
        )
        .unwrap();
        let elsewhere = root.path().join("x.addr");
        fs::write(&elsewhere, "127.0.0.1:3333").unwrap();
        std::os::unix::fs::symlink(
            &elsewhere,
            a.dir().join(format!("{pid}-00000000000000cc.addr")),
        )
        .unwrap();
        fs::write(
            a.dir().join(format!("{pid}-00000000000000dd.addr")),
            "127.0.0.1:4444\n",
        )
        .unwrap();
        // One of another network namespace (its loopback is not ours), one of ours.
        let ns = netns_id().unwrap();
        fs::write(
            a.dir().join(format!("{pid}-00000000000000ee.addr")),
            format!("127.0.0.1:5555 net={}", ns + 1),
        )
        .unwrap();
        fs::write(
            a.dir().join(format!("{pid}-00000000000000ff.addr")),
            format!("127.0.0.1:6666 net={ns}"),
        )
        .unwrap();
        assert_eq!(
            Registry::scan_dir(&base, 0, 1),
            vec![
                "127.0.0.1:4444".parse().unwrap(),
                "127.0.0.1:6666".parse().unwrap()
            ]
        );
        let linked = root.path().join("linked");
        std::os::unix::fs::symlink(root.path(), &linked).unwrap();
        assert!(Registry::register(&linked, 0, 2, "127.0.0.1:1".parse().unwrap()).is_err());
    }

    #[test]
    fn the_default_is_shared_by_all_users() {
        assert_eq!(default_registry_dir(), Path::new("/tmp/tether"));
    }
}
