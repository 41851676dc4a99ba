//! How an error that ends a command is printed: its causes once each (an OS error that a
//! message already quotes is not repeated), then, when the message itself does not say
//! what to do, a `hint:` line that does.

use std::io;

use tether::keys::KeyError;
use tether::{ConfigError, OpenError};

/// Prints `e` on stderr: `error: …`, and a `hint: …` line when there is one.
pub(crate) fn print(e: &anyhow::Error) {
    eprintln!("error: {}", message(e));
    if let Some(h) = hint(e) {
        eprintln!("hint: {h}");
    }
}

/// The chain of causes joined by `: `, each said once: a cause whose text the message
/// already holds (`cannot read x.toml: No such file or directory (os error 2)` and then
/// the same OS error as its source) is left out.
pub(crate) fn message(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if s.is_empty() || msg.contains(&s) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&s);
    }
    msg
}

/// What to do about `e`, for the errors whose message does not say it already.
fn hint(e: &anyhow::Error) -> Option<&'static str> {
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<ConfigError>() {
            return match c {
                ConfigError::Io { .. } => {
                    Some("give --config (or TETHER_CONFIG) a TOML file that exists and can be read")
                }
                ConfigError::MissingKeys => None,
                _ => Some(
                    "correct the file at the key named (the keys and their meaning: the \
                     documentation of tether::Config, docs/cli.md#configuration)",
                ),
            };
        }
        if let Some(o) = cause.downcast_ref::<OpenError>() {
            match o {
                OpenError::Bind { .. } => {
                    return Some(
                        "the address is in use or not on this host: choose another in \
                         [transport] listen (port 0 lets the system choose)",
                    );
                }
                OpenError::Registry { .. } => {
                    return Some(
                        "give --registry-dir (or [discovery] registry_dir) a directory this \
                         user can create and write",
                    );
                }
                OpenError::Multicast { .. } => {
                    return Some(
                        "check [discovery] interface (an interface name such as eth0, or its \
                         IPv4 address) and that the interface has multicast",
                    );
                }
                _ => {}
            }
        }
        if let Some(k) = cause.downcast_ref::<KeyError>() {
            match k {
                KeyError::Io { cause, .. } if cause.kind() == io::ErrorKind::NotFound => {
                    return Some(
                        "check the path: a key bundle comes from `tether keys issue DIR NAME` \
                         (DIR/NAME.key, for --keys or TETHER_KEYS), a realm from `tether keys \
                         init DIR`; a relative path in a config file is taken from the file's \
                         directory",
                    );
                }
                KeyError::Io { cause, .. } if cause.kind() == io::ErrorKind::IsADirectory => {
                    return Some(
                        "give a file, not a directory: DIR/NAME.key for --keys (or \
                         TETHER_KEYS), DIR/revoked.toml for --revocations",
                    );
                }
                KeyError::Unknown(_) => {
                    return Some(
                        "the realm's members are its DIR/NAME.cred files (`tether keys show \
                         DIR/NAME.cred` prints the serial)",
                    );
                }
                _ => {}
            }
        }
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            match io.kind() {
                io::ErrorKind::NotFound => return Some("check the path"),
                io::ErrorKind::PermissionDenied => {
                    return Some("check the permissions of the file or directory named");
                }
                _ => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_os_error_is_said_once() {
        let e = tether::Config::from_file("/nonexistent/tether.toml").unwrap_err();
        let e = anyhow::Error::new(e).context("loading configuration");
        let m = message(&e);
        assert_eq!(m.matches("os error 2").count(), 1, "{m}");
        assert!(
            m.starts_with("loading configuration: cannot read config file"),
            "{m}"
        );
        assert!(hint(&e).unwrap().contains("--config"));
    }
}
