//! The realm's revocation list as a file: loading it
//! ([`Session::set_revocations`](super::Session::set_revocations)). A list the engine
//! refuses (not the realm's, older than the one in force) or a file that cannot be read
//! leaves the list in force as it is.

use std::path::Path;

use tether_core::RevocationRefusal;
use tether_crypto::RevocationList;

use super::shared::Shared;

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
    shared.with_core(|i, now| i.core.set_revocations(now, list))
}
