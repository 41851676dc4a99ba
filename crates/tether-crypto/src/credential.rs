//! Credentials (a participant's name, public keys and grants, signed by the realm's CA) and
//! revocation lists, with their canonical binary form (what is signed, and what travels on
//! the wire) and a TOML text form for files.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::grant::{pattern_matches, valid_pattern};
use crate::identity::verify;
use crate::{CaKey, from_hex, hex_array, to_hex};

use tether_wire::{
    CREDENTIAL_MAGIC_V1, CredentialRepr, MAX_NAME_LEN as MAX_NAME, MAX_PATTERNS, MAX_REVOKED,
    PatternList, RevocationListRepr, Role, SerialList,
};

/// How far in the future an issue time may be (clock skew between hosts).
const SKEW_S: u64 = 300;

/// Why a credential or revocation list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The bytes or text do not parse.
    #[error("malformed: {0}")]
    Malformed(String),
    /// Signed by another realm's CA.
    #[error("issued by another realm (CA {0})")]
    OtherRealm(String),
    /// The CA's signature does not verify.
    #[error("the CA's signature does not verify")]
    BadSignature,
    /// Expired.
    #[error("expired at {expires} (now {now}, unix seconds)")]
    Expired {
        /// When it expired.
        expires: u64,
        /// Now.
        now: u64,
    },
    /// Issued in the future (beyond the allowed clock skew).
    #[error("issued in the future ({issued}, now {now})")]
    NotYetValid {
        /// When it was issued.
        issued: u64,
        /// Now.
        now: u64,
    },
    /// Its serial is in the realm's revocation list.
    #[error("serial {0} is revoked")]
    Revoked(u64),
    /// A value is unusable (e.g. a grant pattern).
    #[error("invalid: {0}")]
    Invalid(String),
}

/// What the CA certifies about one participant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The CA's public key: the realm.
    pub realm: [u8; 32],
    /// The participant's name.
    pub name: String,
    /// Unique per credential in the realm; what revocation names.
    pub serial: u64,
    /// Issue time, unix seconds.
    pub issued: u64,
    /// Expiry, unix seconds.
    pub expires: u64,
    /// What its holder is: a member (a session, with grants) or a router (no grants).
    pub role: Role,
    /// Ed25519 public key (authentication, signatures).
    pub sign_public: [u8; 32],
    /// X25519 public key (key wrapping).
    pub kx_public: [u8; 32],
    /// Topic patterns it may publish.
    pub publish: Vec<String>,
    /// Topic patterns it may subscribe to.
    pub subscribe: Vec<String>,
    /// The CA's Ed25519 signature over everything above.
    pub signature: [u8; 64],
}

/// Why a credential of the layout before roles is refused.
const OLD_LAYOUT: &str = "a credential of version 1 (TCR1, issued before credentials had a role) \
     is no longer read: issue a new one (`tether keys issue DIR NAME --replace`)";

/// What a malformed binary form is refused with: the layout error, in the terms of `what`.
fn malformed(what: &str, e: tether_wire::Error) -> CredentialError {
    CredentialError::Malformed(match e {
        tether_wire::Error::BadMagic => format!("not a tether {what}"),
        tether_wire::Error::Truncated => "truncated".into(),
        tether_wire::Error::BadUtf8 => "not UTF-8".into(),
        tether_wire::Error::BadLength => {
            "a length does not fit (string too long or trailing bytes)".into()
        }
        tether_wire::Error::BadValue(field) => format!("bad {field}"),
        e => e.to_string(),
    })
}

fn check_patterns(what: &str, v: &[String]) -> Result<(), CredentialError> {
    if v.len() > MAX_PATTERNS {
        return Err(CredentialError::Invalid(format!(
            "more than {MAX_PATTERNS} {what} patterns"
        )));
    }
    for p in v {
        if !valid_pattern(p) {
            return Err(CredentialError::Invalid(format!(
                "{what} pattern '{p}' (levels separated by '/', wildcards '*' and '**' only as whole levels)"
            )));
        }
    }
    Ok(())
}

impl Credential {
    /// A member's credential for `name` with `identity`'s public keys, signed by `ca`
    /// ([`issue_with_role`](Self::issue_with_role) with [`Role::Member`]).
    #[allow(clippy::too_many_arguments)]
    pub fn issue(
        ca: &CaKey,
        name: &str,
        serial: u64,
        issued: u64,
        expires: u64,
        sign_public: [u8; 32],
        kx_public: [u8; 32],
        publish: Vec<String>,
        subscribe: Vec<String>,
    ) -> Result<Credential, CredentialError> {
        Self::issue_with_role(
            ca,
            Role::Member,
            name,
            serial,
            issued,
            expires,
            sign_public,
            kx_public,
            publish,
            subscribe,
        )
    }

    /// A credential of `role` for `name`, signed by `ca`. A router's carries no grants:
    /// one asked for with grants is refused.
    #[allow(clippy::too_many_arguments)]
    pub fn issue_with_role(
        ca: &CaKey,
        role: Role,
        name: &str,
        serial: u64,
        issued: u64,
        expires: u64,
        sign_public: [u8; 32],
        kx_public: [u8; 32],
        publish: Vec<String>,
        subscribe: Vec<String>,
    ) -> Result<Credential, CredentialError> {
        if role == Role::Router && !(publish.is_empty() && subscribe.is_empty()) {
            return Err(CredentialError::Invalid(
                "a router's credential carries no publish or subscribe grants \
                 (routers forward sealed samples they cannot open)"
                    .into(),
            ));
        }
        if name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_control) {
            return Err(CredentialError::Invalid(format!(
                "name '{name}' (1 to {MAX_NAME} bytes, no control characters)"
            )));
        }
        check_patterns("publish", &publish)?;
        check_patterns("subscribe", &subscribe)?;
        if expires <= issued {
            return Err(CredentialError::Invalid(
                "expires before it is issued".into(),
            ));
        }
        let mut c = Credential {
            realm: ca.public(),
            name: name.to_string(),
            serial,
            issued,
            expires,
            role,
            sign_public,
            kx_public,
            publish,
            subscribe,
            signature: [0; 64],
        };
        c.signature = ca.sign(&c.signed_bytes());
        Ok(c)
    }

    /// Its fields as `tether-wire` lays them out.
    fn repr(&self) -> CredentialRepr<'_> {
        CredentialRepr {
            realm: self.realm,
            serial: self.serial,
            issued: self.issued,
            expires: self.expires,
            role: self.role,
            sign_public: self.sign_public,
            kx_public: self.kx_public,
            name: &self.name,
            publish: PatternList::Slice(&self.publish),
            subscribe: PatternList::Slice(&self.subscribe),
            signature: self.signature,
        }
    }

    /// The bytes the CA signs.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        self.repr().emit_signed(&mut out);
        out
    }

    /// The canonical binary form (signed bytes, then the signature).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(320);
        self.repr().emit(&mut out);
        out
    }

    /// Parses the binary form, bounds-checked (the signature is not checked here: see
    /// [`verify`](Self::verify)).
    pub fn from_bytes(b: &[u8]) -> Result<Credential, CredentialError> {
        if b.starts_with(&CREDENTIAL_MAGIC_V1) {
            return Err(CredentialError::Malformed(OLD_LAYOUT.into()));
        }
        let r = CredentialRepr::parse(b).map_err(|e| malformed("credential", e))?;
        Ok(Credential {
            realm: r.realm,
            name: r.name.to_string(),
            serial: r.serial,
            issued: r.issued,
            expires: r.expires,
            role: r.role,
            sign_public: r.sign_public,
            kx_public: r.kx_public,
            publish: r.publish.iter().map(str::to_string).collect(),
            subscribe: r.subscribe.iter().map(str::to_string).collect(),
            signature: r.signature,
        })
    }

    /// Checks it against the realm's CA at `now` (unix seconds) and the revocation list.
    pub fn verify(
        &self,
        ca_public: &[u8; 32],
        now: u64,
        revoked: Option<&RevocationList>,
    ) -> Result<(), CredentialError> {
        if &self.realm != ca_public {
            return Err(CredentialError::OtherRealm(to_hex(&self.realm[..8])));
        }
        if !verify(ca_public, &self.signed_bytes(), &self.signature) {
            return Err(CredentialError::BadSignature);
        }
        self.verify_terms(ca_public, now, revoked)
    }

    /// [`verify`](Self::verify) without the CA's signature: its realm, validity period,
    /// revocation and contents. Only for a credential whose exact bytes were verified before
    /// ([`VerifiedCredentials`]).
    fn verify_terms(
        &self,
        ca_public: &[u8; 32],
        now: u64,
        revoked: Option<&RevocationList>,
    ) -> Result<(), CredentialError> {
        if &self.realm != ca_public {
            return Err(CredentialError::OtherRealm(to_hex(&self.realm[..8])));
        }
        if self.issued > now.saturating_add(SKEW_S) {
            return Err(CredentialError::NotYetValid {
                issued: self.issued,
                now,
            });
        }
        if now >= self.expires {
            return Err(CredentialError::Expired {
                expires: self.expires,
                now,
            });
        }
        if revoked.is_some_and(|r| r.contains(self.serial)) {
            return Err(CredentialError::Revoked(self.serial));
        }
        if self.role == Role::Router && !(self.publish.is_empty() && self.subscribe.is_empty()) {
            return Err(CredentialError::Invalid(
                "a router's credential with grants".into(),
            ));
        }
        for p in self.publish.iter().chain(&self.subscribe) {
            if !valid_pattern(p) {
                return Err(CredentialError::Invalid(format!("pattern '{p}'")));
            }
        }
        Ok(())
    }

    /// Whether it grants publishing `topic`.
    pub fn may_publish(&self, topic: &str) -> bool {
        self.publish.iter().any(|p| pattern_matches(p, topic))
    }

    /// Whether it grants subscribing to `topic`.
    pub fn may_subscribe(&self, topic: &str) -> bool {
        self.subscribe.iter().any(|p| pattern_matches(p, topic))
    }

    /// The TOML text form (for files; `tether keys show` prints it).
    pub fn to_toml(&self) -> String {
        let f = CredFile {
            tether_credential: 2,
            role: self.role.as_str().to_string(),
            name: self.name.clone(),
            serial: self.serial,
            issued: self.issued,
            expires: self.expires,
            realm: to_hex(&self.realm),
            sign_public: to_hex(&self.sign_public),
            kx_public: to_hex(&self.kx_public),
            publish: self.publish.clone(),
            subscribe: self.subscribe.clone(),
            signature: to_hex(&self.signature),
        };
        toml::to_string(&f).expect("plain fields serialize")
    }

    /// From the TOML text form (the signature is checked by [`verify`](Self::verify)).
    pub fn from_toml(text: &str) -> Result<Credential, CredentialError> {
        // Version 1 had no role, and its signature covers other bytes: say so rather than
        // name a missing field.
        #[derive(Deserialize)]
        struct Version {
            tether_credential: u32,
        }
        if let Ok(Version {
            tether_credential: v,
        }) = toml::from_str(text)
        {
            if v == 1 {
                return Err(CredentialError::Malformed(OLD_LAYOUT.into()));
            }
            if v != 2 {
                return Err(CredentialError::Malformed(format!(
                    "credential version {v} (this tether reads 2)"
                )));
            }
        }
        let f: CredFile =
            toml::from_str(text).map_err(|e| CredentialError::Malformed(e.to_string()))?;
        let bad = |what: &str| CredentialError::Malformed(format!("{what} is not valid hex"));
        let role = match f.role.as_str() {
            "member" => Role::Member,
            "router" => Role::Router,
            r => {
                return Err(CredentialError::Malformed(format!(
                    "role '{r}' (member or router)"
                )));
            }
        };
        Ok(Credential {
            role,
            realm: hex_array(&f.realm).ok_or_else(|| bad("realm"))?,
            name: f.name,
            serial: f.serial,
            issued: f.issued,
            expires: f.expires,
            sign_public: hex_array(&f.sign_public).ok_or_else(|| bad("sign_public"))?,
            kx_public: hex_array(&f.kx_public).ok_or_else(|| bad("kx_public"))?,
            publish: f.publish,
            subscribe: f.subscribe,
            signature: hex_array(&f.signature).ok_or_else(|| bad("signature"))?,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredFile {
    tether_credential: u32,
    name: String,
    role: String,
    serial: u64,
    issued: u64,
    expires: u64,
    realm: String,
    sign_public: String,
    kx_public: String,
    publish: Vec<String>,
    subscribe: Vec<String>,
    signature: String,
}

/// Peer credentials whose CA signature verified: the exact bytes of the last
/// [`KEPT`](Self::KEPT), most recently used last. A peer sends its credential in each of its
/// AUTHs (three or four on the way to its first sample, and again on every resend):
/// [`check`](Self::check) verifies the signature over bytes once and, while they are
/// kept, only the credential's terms (realm, validity, revocation, contents) again; the
/// same bytes verify the same way every time.
#[derive(Debug, Default)]
pub struct VerifiedCredentials {
    kept: VecDeque<Vec<u8>>,
}

impl VerifiedCredentials {
    /// Credentials kept; the least recently used makes room.
    pub const KEPT: usize = 64;

    /// Parses `bytes` and checks the credential as [`Credential::verify`] does, the
    /// signature only if these exact bytes are not kept; bytes that pass are kept.
    pub fn check(
        &mut self,
        bytes: &[u8],
        ca_public: &[u8; 32],
        now: u64,
        revoked: Option<&RevocationList>,
    ) -> Result<Credential, CredentialError> {
        let c = Credential::from_bytes(bytes)?;
        if let Some(i) = self.kept.iter().position(|b| b.as_slice() == bytes) {
            c.verify_terms(ca_public, now, revoked)?;
            let b = self.kept.remove(i).expect("found at i");
            self.kept.push_back(b);
        } else {
            c.verify(ca_public, now, revoked)?;
            if self.kept.len() >= Self::KEPT {
                self.kept.pop_front();
            }
            self.kept.push_back(bytes.to_vec());
        }
        Ok(c)
    }

    /// Credentials kept now.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Whether these exact bytes are kept.
    pub fn contains(&self, bytes: &[u8]) -> bool {
        self.kept.iter().any(|b| b.as_slice() == bytes)
    }
}

/// The serials the realm's CA has revoked, signed by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevocationList {
    /// The CA's public key.
    pub realm: [u8; 32],
    /// The list's own serial (its version, signed with it): each list the CA signs has one
    /// more than the last. A participant refuses a list with a lower serial than the one it
    /// holds, so an old list cannot bring a revoked credential back.
    pub serial: u64,
    /// When it was signed (unix seconds; for people: the serial orders lists).
    pub issued: u64,
    /// Revoked serials, sorted.
    pub serials: Vec<u64>,
    /// The CA's signature.
    pub signature: [u8; 64],
}

impl RevocationList {
    /// List number `serial` of the realm, signed by `ca`, revoking `serials`.
    pub fn issue(ca: &CaKey, serial: u64, issued: u64, mut serials: Vec<u64>) -> RevocationList {
        serials.sort_unstable();
        serials.dedup();
        let mut r = RevocationList {
            realm: ca.public(),
            serial,
            issued,
            serials,
            signature: [0; 64],
        };
        r.signature = ca.sign(&r.signed_bytes());
        r
    }

    /// Its fields as `tether-wire` lays them out.
    fn repr(&self) -> RevocationListRepr<'_> {
        RevocationListRepr {
            realm: self.realm,
            serial: self.serial,
            issued: self.issued,
            serials: SerialList::Slice(&self.serials),
            signature: self.signature,
        }
    }

    fn signed_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(56 + 8 * self.serials.len());
        self.repr().emit_signed(&mut out);
        out
    }

    /// The canonical binary form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(120 + 8 * self.serials.len());
        self.repr().emit(&mut out);
        out
    }

    /// Parses the binary form (bounds-checked; see [`verify`](Self::verify)).
    pub fn from_bytes(b: &[u8]) -> Result<RevocationList, CredentialError> {
        let r = RevocationListRepr::parse(b).map_err(|e| malformed("revocation list", e))?;
        Ok(RevocationList {
            realm: r.realm,
            serial: r.serial,
            issued: r.issued,
            serials: r.serials.iter().collect(),
            signature: r.signature,
        })
    }

    /// Checks the CA's signature.
    pub fn verify(&self, ca_public: &[u8; 32]) -> Result<(), CredentialError> {
        if &self.realm != ca_public {
            return Err(CredentialError::OtherRealm(to_hex(&self.realm[..8])));
        }
        if !verify(ca_public, &self.signed_bytes(), &self.signature) {
            return Err(CredentialError::BadSignature);
        }
        Ok(())
    }

    /// Whether `serial` is revoked.
    pub fn contains(&self, serial: u64) -> bool {
        self.serials.binary_search(&serial).is_ok()
    }

    /// The TOML text form.
    pub fn to_toml(&self) -> String {
        let f = RevokeFile {
            tether_revocations: 2,
            realm: to_hex(&self.realm),
            serial: self.serial,
            issued: self.issued,
            serials: self.serials.clone(),
            signature: to_hex(&self.signature),
        };
        toml::to_string(&f).expect("plain fields serialize")
    }

    /// From the TOML text form.
    pub fn from_toml(text: &str) -> Result<RevocationList, CredentialError> {
        // Version 1 had no list serial, and its signature covers other bytes: say so rather
        // than name a missing field.
        #[derive(Deserialize)]
        struct Version {
            tether_revocations: u32,
        }
        if let Ok(Version {
            tether_revocations: v,
        }) = toml::from_str(text)
        {
            if v != 2 {
                return Err(CredentialError::Malformed(format!(
                    "revocation list version {v} (this tether reads 2, which carries the list's serial): \
                     sign a new one with `tether keys revoke`"
                )));
            }
        }
        let f: RevokeFile =
            toml::from_str(text).map_err(|e| CredentialError::Malformed(e.to_string()))?;
        let bad = |what: &str| CredentialError::Malformed(format!("{what} is not valid hex"));
        let mut sorted = f.serials.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted != f.serials || f.serials.len() > MAX_REVOKED {
            return Err(CredentialError::Malformed(
                "serials must be sorted and unique".into(),
            ));
        }
        Ok(RevocationList {
            realm: hex_array(&f.realm).ok_or_else(|| bad("realm"))?,
            serial: f.serial,
            issued: f.issued,
            serials: f.serials,
            signature: from_hex(&f.signature)
                .and_then(|v| v.try_into().ok())
                .ok_or_else(|| bad("signature"))?,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RevokeFile {
    tether_revocations: u32,
    realm: String,
    serial: u64,
    issued: u64,
    serials: Vec<u64>,
    signature: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Identity;
    use proptest::prelude::*;

    fn cred(ca: &CaKey, serial: u64) -> Credential {
        let id = Identity::generate();
        Credential::issue(
            ca,
            "robot1",
            serial,
            1000,
            2000,
            id.sign_public(),
            id.kx_public(),
            vec!["/robot1/**".into()],
            vec!["/cmd/*".into(), "/map".into()],
        )
        .unwrap()
    }

    #[test]
    fn issue_verify_and_grants() {
        let ca = CaKey::generate();
        let c = cred(&ca, 3);
        assert_eq!(c.verify(&ca.public(), 1500, None), Ok(()));
        assert!(c.may_publish("/robot1/odom"));
        assert!(!c.may_publish("/robot2/odom"));
        assert!(c.may_subscribe("/cmd/vel") && c.may_subscribe("/map"));
        assert!(!c.may_subscribe("/cmd/a/b"));
        // Time, realm, revocation, tampering.
        assert!(matches!(
            c.verify(&ca.public(), 2000, None),
            Err(CredentialError::Expired { .. })
        ));
        assert!(matches!(
            c.verify(&ca.public(), 100, None),
            Err(CredentialError::NotYetValid { .. })
        ));
        let other = CaKey::generate();
        assert!(matches!(
            c.verify(&other.public(), 1500, None),
            Err(CredentialError::OtherRealm(_))
        ));
        let rl = RevocationList::issue(&ca, 1, 1400, vec![9, 3]);
        assert_eq!(rl.verify(&ca.public()), Ok(()));
        assert_eq!(
            c.verify(&ca.public(), 1500, Some(&rl)),
            Err(CredentialError::Revoked(3))
        );
        let mut t = c.clone();
        t.subscribe.push("/**".into());
        assert_eq!(
            t.verify(&ca.public(), 1500, None),
            Err(CredentialError::BadSignature)
        );
        let mut t = c.clone();
        t.expires = 9999;
        assert_eq!(
            t.verify(&ca.public(), 1500, None),
            Err(CredentialError::BadSignature)
        );
        // A credential re-signed by another CA but claiming this realm.
        let mut forged = c.clone();
        forged.signature = other.sign(&forged.signed_bytes());
        assert_eq!(
            forged.verify(&ca.public(), 1500, None),
            Err(CredentialError::BadSignature)
        );
    }

    #[test]
    fn bad_grants_and_names_are_refused_at_issue() {
        let ca = CaKey::generate();
        let id = Identity::generate();
        let issue = |name: &str, p: &str| {
            Credential::issue(
                &ca,
                name,
                1,
                0,
                10,
                id.sign_public(),
                id.kx_public(),
                vec![p.into()],
                vec![],
            )
        };
        assert!(issue("ok", "/a/*").is_ok());
        assert!(issue("ok", "/a*").is_err());
        assert!(issue("", "/a").is_err());
        assert!(issue("a\nb", "/a").is_err());
    }

    #[test]
    fn binary_and_toml_round_trip() {
        let ca = CaKey::generate();
        let c = cred(&ca, 7);
        assert_eq!(Credential::from_bytes(&c.to_bytes()).unwrap(), c);
        assert_eq!(Credential::from_toml(&c.to_toml()).unwrap(), c);
        let rl = RevocationList::issue(&ca, 3, 5, vec![1, 2, 40]);
        assert_eq!(RevocationList::from_bytes(&rl.to_bytes()).unwrap(), rl);
        assert_eq!(RevocationList::from_toml(&rl.to_toml()).unwrap(), rl);
        // The list's serial is signed: changing it breaks the signature.
        let mut older = rl.clone();
        older.serial = 2;
        assert_eq!(
            older.verify(&ca.public()),
            Err(CredentialError::BadSignature)
        );
        // A version-1 file (no list serial) is refused, saying why.
        let v1 = rl
            .to_toml()
            .replace("tether_revocations = 2", "tether_revocations = 1");
        let e = RevocationList::from_toml(&v1).unwrap_err();
        assert!(e.to_string().contains("version 1"), "{e}");
        assert!(Credential::from_toml("name = 3").is_err());
        let mut b = c.to_bytes();
        b.push(0);
        assert!(Credential::from_bytes(&b).is_err());
    }

    /// A router's credential has no grants, its role is signed, and the layouts before
    /// roles are refused saying so.
    #[test]
    fn roles_are_signed_and_routers_have_no_grants() {
        let ca = CaKey::generate();
        let id = Identity::generate();
        let router = |publish: Vec<String>| {
            Credential::issue_with_role(
                &ca,
                Role::Router,
                "relay1",
                5,
                1000,
                2000,
                id.sign_public(),
                id.kx_public(),
                publish,
                vec![],
            )
        };
        let e = router(vec!["/a".into()]).unwrap_err();
        assert!(
            e.to_string().contains("no publish or subscribe grants"),
            "{e}"
        );
        let r = router(vec![]).unwrap();
        assert_eq!(r.role, Role::Router);
        assert_eq!(r.verify(&ca.public(), 1500, None), Ok(()));
        assert_eq!(Credential::from_bytes(&r.to_bytes()).unwrap(), r);
        assert_eq!(Credential::from_toml(&r.to_toml()).unwrap(), r);
        assert!(r.to_toml().contains("role = \"router\""));
        assert_eq!(cred(&ca, 1).role, Role::Member);
        // The role is signed: a member's credential relabelled router does not verify.
        let mut m = cred(&ca, 6);
        m.role = Role::Router;
        m.publish.clear();
        m.subscribe.clear();
        assert_eq!(
            m.verify(&ca.public(), 1500, None),
            Err(CredentialError::BadSignature)
        );
        // Version 1 (no role), binary and text, is refused with a reason.
        let mut v1 = r.to_bytes();
        v1[..4].copy_from_slice(b"TCR1");
        let e = Credential::from_bytes(&v1).unwrap_err();
        assert!(e.to_string().contains("no longer read"), "{e}");
        let t = r
            .to_toml()
            .replace("tether_credential = 2", "tether_credential = 1");
        let e = Credential::from_toml(&t).unwrap_err();
        assert!(e.to_string().contains("version 1"), "{e}");
        let t = r.to_toml().replace("\"router\"", "\"king\"");
        assert!(Credential::from_toml(&t).is_err());
    }

    proptest! {
        /// Arbitrary and truncated bytes never panic, and whatever parses is refused by
        /// verification unless it is exactly what the CA signed.
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..400) {
            let _ = Credential::from_bytes(&b);
            let _ = RevocationList::from_bytes(&b);
            let ca = CaKey::from_seed(&[1; 32]).unwrap();
            let c = cred(&ca, 1).to_bytes();
            let cut = cut.min(c.len());
            let _ = Credential::from_bytes(&c[..cut]);
            let mut flipped = c.clone();
            let i = cut.min(c.len() - 1);
            flipped[i] ^= 0x80;
            if let Ok(f) = Credential::from_bytes(&flipped) {
                prop_assert!(f.verify(&ca.public(), 1500, None).is_err());
            }
        }
    }
}
