//! Key files: a realm directory (its CA, its secret, the credentials it issued, its
//! revocation list) and a participant's key bundle. What `tether keys` writes and sessions
//! read. Secret files are created 0600 and refused when others can read them.
//!
//! ```text
//! DIR/ca.key         the CA's Ed25519 seed                       (secret, 0600)
//! DIR/realm.secret   the realm secret (topic ids)                (secret, 0600)
//! DIR/issued.toml    every credential issued: name, serial, expiry
//! DIR/revoked.toml   the revocation list, signed by the CA
//! DIR/NAME.key       NAME's bundle: its secret keys, credential, the CA's public key,
//!                    the realm secret (a member's; never a router's) (secret, 0600)
//! DIR/NAME.cred      NAME's credential alone (public)
//! ```

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tether_crypto::{
    CaKey, Credential, CredentialError, Identity, RealmSecret, RevocationList, Role, from_hex,
    to_hex,
};

/// Why a key operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A file could not be read or written.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        cause: std::io::Error,
    },
    /// A file is not what it should be.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A secret file others can read.
    #[error("{path} is readable by others (mode {mode:o}); run `chmod 600 {path}`")]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// Refusing to overwrite.
    #[error("{0} exists; refusing to overwrite it")]
    Exists(PathBuf),
    /// A credential problem (bad grant, expired, revoked, …).
    #[error(transparent)]
    Credential(#[from] CredentialError),
    /// No credential of that name or serial.
    #[error("no credential named or numbered '{0}' in this realm")]
    Unknown(String),
    /// The revocation list named is not there.
    #[error(
        "{0}: no such revocation list (a realm's is DIR/revoked.toml, made by `tether keys \
         init DIR` and updated by `tether keys revoke`; give its path, or leave the revocation \
         list out)"
    )]
    NoRevocationList(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KeyError + '_ {
    move |cause| KeyError::Io {
        path: path.to_path_buf(),
        cause,
    }
}

fn format(path: &Path, message: impl Into<String>) -> KeyError {
    KeyError::Format {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `2026-11-22 05:42:00 UTC`.
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn write_new(path: &Path, text: &str, secret: bool) -> Result<(), KeyError> {
    let mut o = fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(if secret { 0o600 } else { 0o644 });
    }
    let mut f = o.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            KeyError::Exists(path.to_path_buf())
        } else {
            KeyError::Io {
                path: path.to_path_buf(),
                cause: e,
            }
        }
    })?;
    f.write_all(text.as_bytes()).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// Replaces a public file atomically (write aside, rename).
fn replace(path: &Path, text: &str) -> Result<(), KeyError> {
    replace_file(path, text, false)
}

/// Replaces a file atomically (write aside, rename), secret (0600) or public. A reader
/// (a session watching a revocation list) sees the old file or the new one, never half.
fn replace_file(path: &Path, text: &str, secret: bool) -> Result<(), KeyError> {
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    write_new(&tmp, text, secret)?;
    fs::rename(&tmp, path).map_err(io(path))
}

/// A key bundle, in words, as errors ask for one.
const BUNDLE: &str = "a key bundle (DIR/NAME.key, from `tether keys issue DIR NAME`)";

/// What kind of tether file `text` is, in words, if it is one.
fn kind_of(text: &str) -> Option<&'static str> {
    let t: toml::Table = toml::from_str(text).ok()?;
    [
        (
            "tether_credential",
            "a credential (DIR/NAME.cred: public, it holds no keys)",
        ),
        ("tether_keys", "a key bundle (DIR/NAME.key)"),
        ("tether_revocations", "a revocation list (DIR/revoked.toml)"),
        ("tether_ca", "the realm's CA key (DIR/ca.key)"),
        ("tether_realm_secret", "the realm secret"),
    ]
    .into_iter()
    .find(|(k, _)| t.contains_key(*k))
    .map(|(_, what)| what)
}

/// `path` holds `text`, which should be a tether file with `field` (`tether_keys`…): if it
/// is another kind, an error that says which and what to give instead (`wanted`).
fn expect_kind(path: &Path, text: &str, field: &str, wanted: &str) -> Result<(), KeyError> {
    let Ok(t) = toml::from_str::<toml::Table>(text) else {
        return Ok(());
    };
    if t.contains_key(field) {
        return Ok(());
    }
    Err(format(
        path,
        match kind_of(text) {
            Some(kind) => format!("this is {kind}, not {wanted}"),
            None => format!("not a tether file: give {wanted}"),
        },
    ))
}

/// Reads a secret file that should hold `field` (`wanted`: what it is, in words) and
/// that others must not read.
fn read_secret(path: &Path, field: &str, wanted: &str) -> Result<String, KeyError> {
    // What it is first: a public file given where a secret one goes is said to be the
    // wrong file, not to need `chmod 600`.
    let text = fs::read_to_string(path).map_err(io(path))?;
    expect_kind(path, &text, field, wanted)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(path).map_err(io(path))?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Permissions {
                path: path.to_path_buf(),
                mode,
            });
        }
    }
    Ok(text)
}

fn hex32(path: &Path, what: &str, s: &str) -> Result<[u8; 32], KeyError> {
    from_hex(s)
        .and_then(|v| v.try_into().ok())
        .ok_or_else(|| format(path, format!("{what} is not 32 bytes of hex")))
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaFile {
    tether_ca: u32,
    public: String,
    seed: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretFile {
    tether_realm_secret: u32,
    secret: String,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct IssuedFile {
    #[serde(default)]
    issued: Vec<IssuedEntry>,
    /// The highest revocation-list serial signed: a list restored from a backup cannot
    /// make the next one reuse a serial sessions already hold.
    #[serde(default)]
    list_serial: u64,
    /// Every serial ever revoked: a restored list cannot bring one back.
    #[serde(default)]
    revoked: Vec<u64>,
}

#[derive(Serialize, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct IssuedEntry {
    name: String,
    serial: u64,
    expires: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BundleFile {
    tether_keys: u32,
    name: String,
    sign_seed: String,
    kx_secret: String,
    ca_public: String,
    /// A member's only: routers never hold the realm secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    realm_secret: Option<String>,
    credential: String,
    /// A member's only: the same credential (name, serial, keys, expiry) without grants,
    /// which it shows routers, so that routers never read topic names in its grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    link_credential: Option<String>,
}

/// A participant name `tether keys` accepts: it names files.
fn check_name(name: &str) -> Result<(), KeyError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || name.starts_with('.')
    {
        return Err(KeyError::Credential(CredentialError::Invalid(format!(
            "name '{name}' (letters, digits, '-', '_' and '.'; it names files)"
        ))));
    }
    Ok(())
}

/// A realm directory, as `tether keys init` made it.
#[derive(Debug)]
pub struct Realm {
    dir: PathBuf,
    ca: CaKey,
    secret: RealmSecret,
}

impl Realm {
    /// Creates a realm in `dir` (created if missing): a new CA and realm secret. Refuses to
    /// overwrite an existing realm.
    pub fn init(dir: &Path) -> Result<Realm, KeyError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
        }
        let ca = CaKey::generate();
        let secret = RealmSecret::generate();
        let ca_text = toml::to_string(&CaFile {
            tether_ca: 1,
            public: to_hex(&ca.public()),
            seed: to_hex(ca.seed()),
        })
        .expect("plain fields");
        write_new(&dir.join("ca.key"), &ca_text, true)?;
        let s_text = toml::to_string(&SecretFile {
            tether_realm_secret: 1,
            secret: to_hex(secret.as_bytes()),
        })
        .expect("plain fields");
        write_new(&dir.join("realm.secret"), &s_text, true)?;
        let realm = Realm {
            dir: dir.to_path_buf(),
            ca,
            secret,
        };
        realm.write_revocations(&RevocationList::issue(&realm.ca, 1, unix_now(), vec![]))?;
        Ok(realm)
    }

    /// Opens the realm in `dir`.
    pub fn open(dir: &Path) -> Result<Realm, KeyError> {
        if !dir.join("ca.key").exists() {
            let what = if dir.is_file() {
                "is a file, not a realm directory"
            } else if dir.is_dir() {
                "is not a realm directory (it has no ca.key)"
            } else {
                "does not exist"
            };
            return Err(format(
                dir,
                format!(
                    "{what}: give the directory `tether keys init DIR` made (it holds ca.key \
                     and realm.secret; a member's NAME.key is not one)"
                ),
            ));
        }
        let p = dir.join("ca.key");
        let f: CaFile = toml::from_str(&read_secret(&p, "tether_ca", "the realm's CA key")?)
            .map_err(|e| format(&p, e.to_string()))?;
        let seed = hex32(&p, "seed", &f.seed)?;
        let ca = CaKey::from_seed(&seed).ok_or_else(|| format(&p, "unusable CA seed"))?;
        if to_hex(&ca.public()) != f.public {
            return Err(format(&p, "public key does not match the seed"));
        }
        let p = dir.join("realm.secret");
        let f: SecretFile =
            toml::from_str(&read_secret(&p, "tether_realm_secret", "the realm secret")?)
                .map_err(|e| format(&p, e.to_string()))?;
        let secret = RealmSecret::from_bytes(hex32(&p, "secret", &f.secret)?);
        Ok(Realm {
            dir: dir.to_path_buf(),
            ca,
            secret,
        })
    }

    /// The routing key of `topic` in this realm: what routers route its data on
    /// (`TopicId::derive(realm secret, topic, "", "")`), and what a router's export list
    /// names it by. Members derive it from the realm secret; routers never can.
    pub fn route_key(&self, topic: &str) -> [u8; 32] {
        tether_crypto::TopicId::derive(&self.secret, topic, "", "").0
    }

    /// The CA's public key (the realm's identity).
    pub fn ca_public(&self) -> [u8; 32] {
        self.ca.public()
    }

    fn issued(&self) -> Result<IssuedFile, KeyError> {
        let p = self.dir.join("issued.toml");
        match fs::read_to_string(&p) {
            Ok(t) => toml::from_str(&t).map_err(|e| format(&p, e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(IssuedFile::default()),
            Err(e) => Err(io(&p)(e)),
        }
    }

    /// Issues a credential for `name` with fresh keys: writes `NAME.key` (0600) and
    /// `NAME.cred`. Returns the credential.
    pub fn issue(
        &self,
        name: &str,
        publish: Vec<String>,
        subscribe: Vec<String>,
        valid_days: u64,
    ) -> Result<Credential, KeyError> {
        check_name(name)?;
        let key_path = self.dir.join(format!("{name}.key"));
        if key_path.exists() {
            return Err(KeyError::Exists(key_path));
        }
        let mut issued = self.issued()?;
        let (cred, bundle) =
            self.new_credential(&issued, Role::Member, name, publish, subscribe, valid_days)?;
        self.record(&mut issued, &cred)?;
        write_new(&key_path, &bundle, true)?;
        self.write_cred(&cred)?;
        Ok(cred)
    }

    /// Issues a router's credential for `name` with fresh keys (role router, no grants):
    /// writes `NAME.key` (0600; the keys and credential, no realm secret: a router never
    /// holds it) and `NAME.cred`. Load the bundle with [`RouterKeys::load`].
    pub fn issue_router(&self, name: &str, valid_days: u64) -> Result<Credential, KeyError> {
        check_name(name)?;
        let key_path = self.dir.join(format!("{name}.key"));
        if key_path.exists() {
            return Err(KeyError::Exists(key_path));
        }
        let mut issued = self.issued()?;
        let (cred, bundle) =
            self.new_credential(&issued, Role::Router, name, vec![], vec![], valid_days)?;
        self.record(&mut issued, &cred)?;
        write_new(&key_path, &bundle, true)?;
        self.write_cred(&cred)?;
        Ok(cred)
    }

    /// The role and grants (publish, subscribe) of NAME's credential now.
    pub fn grants(&self, name: &str) -> Result<(Role, Vec<String>, Vec<String>), KeyError> {
        check_name(name)?;
        let p = self.dir.join(format!("{name}.cred"));
        match fs::read_to_string(&p) {
            Ok(text) => grants_of(&p, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(KeyError::Unknown(name.to_string()))
            }
            Err(e) => Err(io(&p)(e)),
        }
    }

    /// Replaces `name`'s credential: fresh keys and a credential under a new serial
    /// (`NAME.key` and `NAME.cred` rewritten), and every earlier serial issued to `name`
    /// revoked in the same step (the revocation list re-signed with the next list serial).
    /// The old bundle stops working wherever the new list is loaded (sessions watching it
    /// reload it while they run). Returns the new credential and the serials revoked.
    pub fn replace(
        &self,
        name: &str,
        publish: Vec<String>,
        subscribe: Vec<String>,
        valid_days: u64,
    ) -> Result<(Credential, Vec<u64>), KeyError> {
        check_name(name)?;
        let mut issued = self.issued()?;
        let old: Vec<u64> = issued
            .issued
            .iter()
            .filter(|e| e.name == name)
            .map(|e| e.serial)
            .collect();
        if old.is_empty() {
            return Err(KeyError::Unknown(name.to_string()));
        }
        // The replacement keeps the role of the credential now. No grants given: a member
        // keeps those of its credential now (a replacement is new keys, not fewer rights).
        let p = self.dir.join(format!("{name}.cred"));
        let (role, old_publish, old_subscribe) = fs::read_to_string(&p)
            .map_err(io(&p))
            .and_then(|text| grants_of(&p, &text))?;
        let (publish, subscribe) = if publish.is_empty() && subscribe.is_empty() {
            (old_publish, old_subscribe)
        } else {
            (publish, subscribe)
        };
        let (cred, bundle) =
            self.new_credential(&issued, role, name, publish, subscribe, valid_days)?;
        // The new serial is recorded first and the old ones revoked before the new keys are
        // written: a step that fails leaves the old credential revoked and the new serial
        // never handed out, not the old one still valid (run it again).
        self.record(&mut issued, &cred)?;
        self.add_revoked(&old)?;
        replace_file(&self.dir.join(format!("{name}.key")), &bundle, true)?;
        self.write_cred(&cred)?;
        Ok((cred, old))
    }

    /// A credential for `name` under the realm's next serial, with fresh keys, and its bundle
    /// (`NAME.key`'s text).
    fn new_credential(
        &self,
        issued: &IssuedFile,
        role: Role,
        name: &str,
        publish: Vec<String>,
        subscribe: Vec<String>,
        valid_days: u64,
    ) -> Result<(Credential, String), KeyError> {
        let serial = issued.issued.iter().map(|e| e.serial).max().unwrap_or(0) + 1;
        let now = unix_now();
        let id = Identity::generate();
        let cred = Credential::issue_with_role(
            &self.ca,
            role,
            name,
            serial,
            now,
            now.saturating_add(valid_days.max(1).saturating_mul(86_400)),
            id.sign_public(),
            id.kx_public(),
            publish,
            subscribe,
        )?;
        let link = match role {
            Role::Member => Some(Credential::issue_with_role(
                &self.ca,
                role,
                name,
                serial,
                cred.issued,
                cred.expires,
                id.sign_public(),
                id.kx_public(),
                Vec::new(),
                Vec::new(),
            )?),
            _ => None,
        };
        let bundle = toml::to_string(&BundleFile {
            tether_keys: 1,
            name: name.to_string(),
            sign_seed: to_hex(id.sign_seed()),
            kx_secret: to_hex(id.kx_secret()),
            ca_public: to_hex(&self.ca.public()),
            realm_secret: (role == Role::Member).then(|| to_hex(self.secret.as_bytes())),
            credential: to_hex(&cred.to_bytes()),
            link_credential: link.map(|c| to_hex(&c.to_bytes())),
        })
        .expect("plain fields");
        Ok((cred, bundle))
    }

    /// Adds `cred` to `issued.toml`.
    fn record(&self, issued: &mut IssuedFile, cred: &Credential) -> Result<(), KeyError> {
        issued.issued.push(IssuedEntry {
            name: cred.name.clone(),
            serial: cred.serial,
            expires: cred.expires,
        });
        replace(
            &self.dir.join("issued.toml"),
            &toml::to_string(&issued).expect("plain fields"),
        )
    }

    /// Writes `NAME.cred` (public).
    fn write_cred(&self, cred: &Credential) -> Result<(), KeyError> {
        replace(
            &self.dir.join(format!("{}.cred", cred.name)),
            &cred.to_toml(),
        )
    }

    /// Revokes a credential by name (every credential issued under it) or serial; rewrites
    /// the signed revocation list. Returns the serials revoked by this call.
    pub fn revoke(&self, who: &str) -> Result<Vec<u64>, KeyError> {
        let issued = self.issued()?;
        let serials: Vec<u64> = match who.parse::<u64>() {
            Ok(s) if issued.issued.iter().any(|e| e.serial == s) => vec![s],
            _ => issued
                .issued
                .iter()
                .filter(|e| e.name == who)
                .map(|e| e.serial)
                .collect(),
        };
        if serials.is_empty() {
            return Err(KeyError::Unknown(who.to_string()));
        }
        self.add_revoked(&serials)?;
        Ok(serials)
    }

    /// Re-signs the revocation list with `serials` added, under the next list serial (one
    /// more than the list's now): sessions holding the current list take the new one, and
    /// refuse any older.
    fn add_revoked(&self, serials: &[u64]) -> Result<(), KeyError> {
        let current = self.revocations()?;
        let mut issued = self.issued()?;
        // What `issued.toml` remembers counts too: `revoked.toml` may have been restored
        // from an older copy, and sessions refuse a list whose serial they have seen.
        let mut all = current.serials;
        all.extend(&issued.revoked);
        all.extend(serials);
        all.sort_unstable();
        all.dedup();
        let next = current
            .serial
            .max(issued.list_serial)
            .checked_add(1)
            .ok_or_else(|| {
                format(
                    &self.dir.join("revoked.toml"),
                    "the list serial is at its maximum",
                )
            })?;
        issued.list_serial = next;
        issued.revoked = all.clone();
        replace(
            &self.dir.join("issued.toml"),
            &toml::to_string(&issued).expect("plain fields"),
        )?;
        self.write_revocations(&RevocationList::issue(&self.ca, next, unix_now(), all))
    }

    /// The realm's current revocation list (verified).
    pub fn revocations(&self) -> Result<RevocationList, KeyError> {
        load_revocations(&self.dir.join("revoked.toml"), &self.ca.public())
    }

    fn write_revocations(&self, r: &RevocationList) -> Result<(), KeyError> {
        replace(&self.dir.join("revoked.toml"), &r.to_toml())
    }
}

/// The role and grants of a credential file in the realm's directory, for its replacement:
/// read from the text even when the credential is of a version no longer read (version 1,
/// before roles: a member), so that `--replace` renews it.
fn grants_of(path: &Path, text: &str) -> Result<(Role, Vec<String>, Vec<String>), KeyError> {
    if let Ok(c) = Credential::from_toml(text) {
        return Ok((c.role, c.publish, c.subscribe));
    }
    let t: toml::Table = toml::from_str(text).map_err(|e| format(path, e.to_string()))?;
    let list = |k: &str| -> Result<Vec<String>, KeyError> {
        match t.get(k) {
            None => Ok(vec![]),
            Some(v) => v
                .as_array()
                .and_then(|a| a.iter().map(|x| x.as_str().map(str::to_string)).collect())
                .ok_or_else(|| format(path, format!("{k} is not a list of patterns"))),
        }
    };
    let role = match t.get("role").and_then(|r| r.as_str()) {
        Some("router") => Role::Router,
        _ => Role::Member,
    };
    Ok((role, list("publish")?, list("subscribe")?))
}

/// Reads and verifies a revocation list against the realm's CA.
pub fn load_revocations(path: &Path, ca_public: &[u8; 32]) -> Result<RevocationList, KeyError> {
    let t = fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => KeyError::NoRevocationList(path.to_path_buf()),
        _ => io(path)(e),
    })?;
    expect_kind(
        path,
        &t,
        "tether_revocations",
        "a revocation list (DIR/revoked.toml)",
    )?;
    let r = RevocationList::from_toml(&t).map_err(|e| format(path, e.to_string()))?;
    r.verify(ca_public)
        .map_err(|e| format(path, e.to_string()))?;
    Ok(r)
}

/// A participant's keys: what a session needs to take part in a secure realm.
#[derive(Debug)]
pub struct KeyBundle {
    /// Its secret keys.
    pub identity: Identity,
    /// Its credential.
    pub credential: Credential,
    /// The realm's CA public key.
    pub ca_public: [u8; 32],
    /// The realm secret.
    pub realm_secret: RealmSecret,
    /// The credential it shows routers: its own without grants (same name, serial, keys
    /// and expiry, so revoking it revokes both). `None` in bundles issued before routers.
    pub link_credential: Option<Credential>,
}

impl KeyBundle {
    /// Loads `NAME.key`. Checks that the file is private, that the credential is the CA's
    /// and names this identity's public keys. (Expiry and revocation are checked when the
    /// session uses it, against the time then.)
    pub fn load(path: &Path) -> Result<KeyBundle, KeyError> {
        let (f, k) = RouterKeys::read(path)?;
        if k.credential.role != Role::Member {
            return Err(format(
                path,
                format!(
                    "this is a {role}'s key bundle (credential role {role}): a session needs \
                     a member's (`tether keys issue DIR NAME --pub ... --sub ...`); a \
                     {role}'s bundle is for `tether router`",
                    role = k.credential.role
                ),
            ));
        }
        let realm_secret = RealmSecret::from_bytes(hex32(
            path,
            "realm_secret",
            f.realm_secret.as_deref().unwrap_or(""),
        )?);
        let link_credential = match &f.link_credential {
            None => None,
            Some(h) => {
                let bytes = tether_crypto::from_hex(h)
                    .ok_or_else(|| format(path, "link_credential is not hex".to_string()))?;
                let c = Credential::from_bytes(&bytes).map_err(|e| format(path, e.to_string()))?;
                let same = c.realm == k.credential.realm
                    && c.serial == k.credential.serial
                    && c.sign_public == k.credential.sign_public
                    && c.publish.is_empty()
                    && c.subscribe.is_empty();
                if !same {
                    return Err(format(
                        path,
                        "link_credential is not this bundle's credential without grants"
                            .to_string(),
                    ));
                }
                Some(c)
            }
        };
        Ok(KeyBundle {
            identity: k.identity,
            credential: k.credential,
            ca_public: k.ca_public,
            realm_secret,
            link_credential,
        })
    }
}

/// A router's keys (`tether keys issue DIR NAME --role router`): its identity, its
/// credential (role router) and the realm's CA public key. No realm secret: a router sees
/// topic ids only, and forwards samples it cannot open.
#[derive(Debug)]
pub struct RouterKeys {
    /// Its secret keys (the Ed25519 seed is its TLS key).
    pub identity: Identity,
    /// Its credential.
    pub credential: Credential,
    /// The realm's CA public key.
    pub ca_public: [u8; 32],
}

impl RouterKeys {
    /// Loads a router's `NAME.key`, with the checks of [`KeyBundle::load`]; refuses a
    /// member's bundle (a router must not hold the realm secret).
    pub fn load(path: &Path) -> Result<RouterKeys, KeyError> {
        let (f, k) = Self::read(path)?;
        if k.credential.role != Role::Router || f.realm_secret.is_some() {
            return Err(format(
                path,
                format!(
                    "this is a {}'s key bundle: a router needs a router's \
                     (`tether keys issue DIR NAME --role router`), which holds no realm secret",
                    k.credential.role
                ),
            ));
        }
        Ok(k)
    }

    /// Reads any bundle: the file's fields, and its keys checked against its credential.
    fn read(path: &Path) -> Result<(BundleFile, RouterKeys), KeyError> {
        let f: BundleFile = toml::from_str(&read_secret(path, "tether_keys", BUNDLE)?)
            .map_err(|e| format(path, e.to_string()))?;
        if f.tether_keys != 1 {
            return Err(format(path, format!("key file version {}", f.tether_keys)));
        }
        let identity = Identity::from_secrets(
            &hex32(path, "sign_seed", &f.sign_seed)?,
            &hex32(path, "kx_secret", &f.kx_secret)?,
        )
        .ok_or_else(|| format(path, "unusable secret keys"))?;
        let ca_public = hex32(path, "ca_public", &f.ca_public)?;
        let bytes = from_hex(&f.credential).ok_or_else(|| format(path, "credential is not hex"))?;
        let credential = Credential::from_bytes(&bytes).map_err(|e| format(path, e.to_string()))?;
        if credential.sign_public != identity.sign_public()
            || credential.kx_public != identity.kx_public()
        {
            return Err(format(path, "the credential is for other keys"));
        }
        match credential.verify(&ca_public, credential.issued, None) {
            Ok(()) => {}
            Err(e @ (CredentialError::BadSignature | CredentialError::OtherRealm(_))) => {
                return Err(format(path, e.to_string()));
            }
            Err(_) => {}
        }
        Ok((
            f,
            RouterKeys {
                identity,
                credential,
                ca_public,
            },
        ))
    }
}

/// A human-readable account of any tether key file (`tether keys show`). Secrets are never
/// printed.
pub fn describe(path: &Path) -> Result<String, KeyError> {
    let text = fs::read_to_string(path).map_err(io(path))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| format(path, e.to_string()))?;
    let now = unix_now();
    let cred_lines = |c: &Credential, out: &mut String| {
        let state = match c.verify(&c.realm, now, None) {
            Ok(()) => "valid".to_string(),
            Err(e) => format!("NOT VALID: {e}"),
        };
        out.push_str(&format!(
            "credential   {}\nrole         {}\nserial       {}\nrealm        {} (CA public key)\nissued       {}\nexpires      {}\nsign key     {} (Ed25519)\nkx key       {} (X25519)\npublish      {}\nsubscribe    {}\nsignature    {} (checked against the realm's CA; revocation not checked)\n",
            c.name,
            match c.role {
                Role::Router => "router (relays sealed data; no grants, no realm secret)",
                _ => "member",
            },
            c.serial,
            to_hex(&c.realm),
            utc(c.issued),
            utc(c.expires),
            to_hex(&c.sign_public),
            to_hex(&c.kx_public),
            if c.publish.is_empty() { "(nothing)".to_string() } else { c.publish.join(" ") },
            if c.subscribe.is_empty() { "(nothing)".to_string() } else { c.subscribe.join(" ") },
            state,
        ));
    };
    let mut out = String::new();
    if table.contains_key("tether_credential") {
        let c = Credential::from_toml(&text).map_err(|e| format(path, e.to_string()))?;
        cred_lines(&c, &mut out);
    } else if table.contains_key("tether_keys") {
        let (f, b) = RouterKeys::read(path)?;
        out.push_str(&format!(
            "key bundle of {} (secret keys{}: not shown)\n",
            b.credential.name,
            if f.realm_secret.is_some() {
                ", realm secret"
            } else {
                "; no realm secret"
            }
        ));
        cred_lines(&b.credential, &mut out);
    } else if table.contains_key("tether_revocations") {
        let r = RevocationList::from_toml(&text).map_err(|e| format(path, e.to_string()))?;
        let state = match r.verify(&r.realm) {
            Ok(()) => "valid".to_string(),
            Err(e) => format!("NOT VALID: {e}"),
        };
        out.push_str(&format!(
            "revocation list\nlist serial  {}\nrealm        {}\nissued       {}\nrevoked      {}\nsignature    {state}\n",
            r.serial,
            to_hex(&r.realm),
            utc(r.issued),
            if r.serials.is_empty() {
                "(none)".to_string()
            } else {
                r.serials
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            },
        ));
    } else if let Some(p) = table
        .get("public")
        .filter(|_| table.contains_key("tether_ca"))
    {
        out.push_str(&format!(
            "realm CA key (secret seed: not shown)\npublic       {}\n",
            p.as_str().unwrap_or("?")
        ));
    } else if table.contains_key("tether_realm_secret") {
        out.push_str("realm secret (not shown)\n");
    } else {
        return Err(format(path, "not a tether key file"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_336_000), "2026-11-22 08:26:40 UTC");
    }

    /// `revoked.toml` restored from an older copy: the next revocation still moves the
    /// list serial past every list signed, and keeps every serial ever revoked (sessions
    /// refuse a reused serial, and a restored list must not bring a revoked member back).
    #[test]
    fn a_restored_list_does_not_rewind_revocation() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("realm");
        let realm = Realm::init(&dir).unwrap();
        let a = realm.issue("a", vec!["/**".into()], vec![], 30).unwrap();
        let b = realm.issue("b", vec!["/**".into()], vec![], 30).unwrap();
        let c = realm.issue("c", vec!["/**".into()], vec![], 30).unwrap();
        let list = dir.join("revoked.toml");
        let old = fs::read_to_string(&list).unwrap(); // list 1, nothing revoked
        realm.revoke("a").unwrap(); // list 2
        realm.revoke("b").unwrap(); // list 3
        fs::write(&list, old).unwrap();
        assert_eq!(realm.revocations().unwrap().serial, 1);
        realm.revoke("c").unwrap();
        let r = realm.revocations().unwrap();
        assert_eq!(r.serial, 4, "a serial past every list signed");
        for x in [&a, &b, &c] {
            assert!(r.contains(x.serial), "serial {} came back", x.serial);
        }
    }

    /// A router's bundle has no realm secret; sessions refuse it, routers refuse a
    /// member's; `show` names the role; a replacement stays a router.
    #[test]
    fn router_bundles() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("realm");
        let realm = Realm::init(&dir).unwrap();
        let r = realm.issue_router("relay", 30).unwrap();
        assert_eq!(r.role, Role::Router);
        assert!(r.publish.is_empty() && r.subscribe.is_empty());
        let key = dir.join("relay.key");
        let text = fs::read_to_string(&key).unwrap();
        assert!(!text.contains("realm_secret"), "{text}");
        let e = KeyBundle::load(&key).unwrap_err().to_string();
        assert!(e.contains("router's key bundle"), "{e}");
        let k = RouterKeys::load(&key).unwrap();
        assert_eq!(k.credential, r);
        assert_eq!(k.identity.sign_public(), r.sign_public);
        realm
            .issue("arm", vec!["/arm/**".into()], vec![], 30)
            .unwrap();
        let e = RouterKeys::load(&dir.join("arm.key"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("member's key bundle"), "{e}");
        let shown = describe(&key).unwrap();
        assert!(shown.contains("role         router"), "{shown}");
        assert!(shown.contains("no realm secret"), "{shown}");
        let shown = describe(&dir.join("arm.cred")).unwrap();
        assert!(shown.contains("role         member"), "{shown}");
        let (new, old) = realm.replace("relay", vec![], vec![], 30).unwrap();
        assert_eq!((new.role, old), (Role::Router, vec![r.serial]));
        assert!(
            realm
                .replace("relay", vec!["/a".into()], vec![], 30)
                .is_err()
        );
    }

    /// A credential of version 1 (before roles) is replaced with its grants kept.
    #[test]
    fn a_version_1_credential_is_replaced() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("realm");
        let realm = Realm::init(&dir).unwrap();
        realm
            .issue("arm", vec!["/arm/**".into()], vec![], 30)
            .unwrap();
        let p = dir.join("arm.cred");
        let v1 = fs::read_to_string(&p)
            .unwrap()
            .replace("tether_credential = 2", "tether_credential = 1")
            .replace("role = \"member\"\n", "");
        fs::write(&p, v1).unwrap();
        let e = describe(&p).unwrap_err().to_string();
        assert!(e.contains("no longer read"), "{e}");
        let (new, _) = realm.replace("arm", vec![], vec![], 30).unwrap();
        assert_eq!(
            (new.role, new.publish),
            (Role::Member, vec!["/arm/**".to_string()])
        );
    }

    /// `--replace` without grants keeps the member's grants; with grants, takes them.
    #[test]
    fn a_replacement_keeps_its_grants_unless_given() {
        let t = tempfile::tempdir().unwrap();
        let realm = Realm::init(&t.path().join("realm")).unwrap();
        let old = realm
            .issue("arm", vec!["/arm/**".into()], vec!["/cmd".into()], 30)
            .unwrap();
        let (new, revoked) = realm.replace("arm", vec![], vec![], 30).unwrap();
        assert_eq!(revoked, vec![old.serial]);
        assert_eq!(
            (new.publish.clone(), new.subscribe.clone()),
            (old.publish.clone(), old.subscribe.clone())
        );
        let (narrower, _) = realm
            .replace("arm", vec![], vec!["/cmd".into()], 30)
            .unwrap();
        assert!(narrower.publish.is_empty());
        assert_eq!(narrower.subscribe, vec!["/cmd".to_string()]);
    }
}
