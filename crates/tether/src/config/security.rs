//! `[security]`: realm membership, and how this session's writers protect their samples.
//!
//! The mode and the suite are typed here, when the file is read: a session opens with
//! values that cannot be wrong, and a bad word is reported with its key and line, and the
//! words allowed.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::Deserialize;

/// `[security]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SecurityConfig {
    /// The participant's key bundle (`tether keys issue` writes `NAME.key`).
    pub keys: Option<PathBuf>,
    /// The realm's revocation list (`revoked.toml`). The session watches the file and
    /// reloads it when it changes (a list older than the one in force is refused).
    pub revocations: Option<PathBuf>,
    /// How writers protect their samples; [`SecurityMode::Off`] turns security off. Default:
    /// [`SecurityMode::Encrypt`] with keys, off without.
    pub mode: Option<SecurityMode>,
    /// The AEAD suite of this session's writers (default [`SuiteChoice::Auto`]).
    pub suite: SuiteChoice,
    /// Per-topic modes: topic pattern → mode (first match wins).
    pub topics: BTreeMap<String, SecurityMode>,
    /// Also seal every datagram to a peer under a key shared with that peer alone, the way
    /// SROS2's defaults protect RTPS messages (`docs/wire.md#sealed`). A comparison mode:
    /// it adds a seal and a copy per destination. Default false.
    pub pairwise: bool,
}

impl SecurityConfig {
    /// Whether authentication is on: a mode other than `off`, or keys without a mode.
    pub fn enabled(&self) -> bool {
        match self.mode {
            Some(SecurityMode::Off) => false,
            Some(_) => true,
            None => self.keys.is_some(),
        }
    }

    /// How this session's writers protect samples of topics no `[security.topics]` pattern
    /// names: the mode, or `encrypt` when none is given.
    pub(crate) fn default_protection(&self) -> tether_core::Protection {
        match self.mode {
            None | Some(SecurityMode::Off) => SecurityMode::Encrypt.into(),
            Some(m) => m.into(),
        }
    }
}

/// `security.mode` and the values of `[security.topics]`: how a writer protects a sample.
/// In TOML: `"off"`, `"encrypt"`, `"sign"` or `"encrypt+sign"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub enum SecurityMode {
    /// `"off"`: as the session's mode, security off; for a topic, samples in the clear.
    Off,
    /// `"encrypt"`: sealed under the writer's sender key.
    Encrypt,
    /// `"sign"`: signed with the writer's Ed25519 key, in the clear.
    Sign,
    /// `"encrypt+sign"`: sealed and signed.
    EncryptSign,
}

impl SecurityMode {
    /// Every mode, in the order the error message lists them.
    pub const ALL: [SecurityMode; 4] = [
        SecurityMode::Off,
        SecurityMode::Encrypt,
        SecurityMode::Sign,
        SecurityMode::EncryptSign,
    ];

    /// Its word in TOML.
    pub fn name(self) -> &'static str {
        match self {
            SecurityMode::Off => "off",
            SecurityMode::Encrypt => "encrypt",
            SecurityMode::Sign => "sign",
            SecurityMode::EncryptSign => "encrypt+sign",
        }
    }
}

impl From<SecurityMode> for tether_core::Protection {
    fn from(m: SecurityMode) -> Self {
        let (encrypt, sign) = match m {
            SecurityMode::Off => (false, false),
            SecurityMode::Encrypt => (true, false),
            SecurityMode::Sign => (false, true),
            SecurityMode::EncryptSign => (true, true),
        };
        tether_core::Protection { encrypt, sign }
    }
}

impl FromStr for SecurityMode {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownWord::new("mode", s, "off, encrypt, sign or encrypt+sign"))
    }
}

impl TryFrom<String> for SecurityMode {
    type Error = UnknownWord;
    fn try_from(s: String) -> Result<Self, UnknownWord> {
        s.parse()
    }
}

impl fmt::Display for SecurityMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `security.suite`: the AEAD suite of this session's writers. In TOML: `"auto"`,
/// `"aes128-gcm"`, `"aes256-gcm"` or `"chacha20-poly1305"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub enum SuiteChoice {
    /// `"auto"`: AES-128-GCM where the CPU has AES instructions, ChaCha20-Poly1305
    /// elsewhere ([`tether_crypto::Suite::auto`]), decided when the session opens.
    #[default]
    Auto,
    /// `"aes128-gcm"`.
    Aes128Gcm,
    /// `"aes256-gcm"`.
    Aes256Gcm,
    /// `"chacha20-poly1305"`.
    ChaCha20Poly1305,
}

impl SuiteChoice {
    /// Every choice, in the order the error message lists them.
    pub const ALL: [SuiteChoice; 4] = [
        SuiteChoice::Auto,
        SuiteChoice::Aes128Gcm,
        SuiteChoice::Aes256Gcm,
        SuiteChoice::ChaCha20Poly1305,
    ];

    /// Its word in TOML.
    pub fn name(self) -> &'static str {
        match self {
            SuiteChoice::Auto => "auto",
            SuiteChoice::Aes128Gcm => "aes128-gcm",
            SuiteChoice::Aes256Gcm => "aes256-gcm",
            SuiteChoice::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }

    /// The suite it names on this machine.
    pub fn suite(self) -> tether_crypto::Suite {
        match self {
            SuiteChoice::Auto => tether_crypto::Suite::auto(),
            SuiteChoice::Aes128Gcm => tether_crypto::Suite::Aes128Gcm,
            SuiteChoice::Aes256Gcm => tether_crypto::Suite::Aes256Gcm,
            SuiteChoice::ChaCha20Poly1305 => tether_crypto::Suite::ChaCha20Poly1305,
        }
    }
}

impl FromStr for SuiteChoice {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                UnknownWord::new(
                    "suite",
                    s,
                    "auto, aes128-gcm, aes256-gcm or chacha20-poly1305",
                )
            })
    }
}

impl TryFrom<String> for SuiteChoice {
    type Error = UnknownWord;
    fn try_from(s: String) -> Result<Self, UnknownWord> {
        s.parse()
    }
}

impl fmt::Display for SuiteChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A word that is not one of a field's values, e.g. `unknown mode 'sometimes' (expected
/// off, encrypt, sign or encrypt+sign)`. In a file, the parser's message around it names
/// the key and its line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{given}' (expected {expected})")]
pub struct UnknownWord {
    what: &'static str,
    given: String,
    expected: &'static str,
}

impl UnknownWord {
    pub(crate) fn new(what: &'static str, given: &str, expected: &'static str) -> Self {
        UnknownWord {
            what,
            given: given.to_string(),
            expected,
        }
    }

    /// The word given.
    pub fn given(&self) -> &str {
        &self.given
    }
}
