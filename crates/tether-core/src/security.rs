//! A participant's part in a secure realm: its keys and credential, the realm's CA and
//! revocation list, and each peer's authentication state (`docs/wire.md#auth`).

use std::fmt;
use std::time::{Duration, Instant};

use tether_crypto::{
    Credential, CredentialError, Identity, RealmSecret, RevocationList, SenderKey, Suite, TopicId,
};
use tether_wire::{ParticipantId, auth_signed_bytes};

/// How a secure writer protects its samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Protection {
    /// Sealed under the writer's sender key (confidentiality and integrity toward
    /// outsiders).
    pub encrypt: bool,
    /// Signed with the writer's Ed25519 key (origin authentication, also toward other
    /// members of the realm, who hold the group key).
    pub sign: bool,
}

impl Protection {
    /// The wire byte: bit 0 sealed, bit 1 signed.
    pub(crate) fn byte(self) -> u8 {
        self.encrypt as u8 | (self.sign as u8) << 1
    }
}

impl std::str::FromStr for Protection {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (encrypt, sign) = match s {
            "off" => (false, false),
            "encrypt" => (true, false),
            "sign" => (false, true),
            "encrypt+sign" => (true, true),
            _ => {
                return Err(format!(
                    "unknown mode '{s}' (expected off, encrypt, sign or encrypt+sign)"
                ));
            }
        };
        Ok(Protection { encrypt, sign })
    }
}

/// What a participant needs to take part in a secure realm. Deny by default: with it, a
/// participant matches only peers that proved they hold a valid credential of the same realm,
/// and only on topics their grants cover.
pub struct Security {
    /// Its secret keys.
    pub identity: Identity,
    /// Its credential.
    pub credential: Credential,
    credential_bytes: Vec<u8>,
    /// The realm's CA public key.
    pub ca_public: [u8; 32],
    /// The realm's revocation list, if loaded.
    pub revocations: Option<RevocationList>,
    /// The realm secret: topic ids.
    realm_secret: RealmSecret,
    /// The AEAD suite of this participant's writers.
    pub suite: Suite,
    /// Seals per key before a new epoch; `None`: the suite's limit.
    pub usage_limit: Option<u64>,
    /// How writers protect samples: the default, and per topic pattern (first match wins).
    pub protection: Protection,
    /// Per-topic overrides of `protection`.
    pub overrides: Vec<(String, Protection)>,
    /// Unix seconds at an engine instant: credentials expire in wall-clock time, the engine
    /// counts in `Instant`s.
    wall: (Instant, u64),
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Security")
            .field("name", &self.credential.name)
            .field("serial", &self.credential.serial)
            .finish_non_exhaustive()
    }
}

impl Security {
    /// `unix_now` is the wall-clock time (unix seconds) at engine instant `now`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        identity: Identity,
        credential: Credential,
        ca_public: [u8; 32],
        realm_secret: RealmSecret,
        revocations: Option<RevocationList>,
        now: Instant,
        unix_now: u64,
    ) -> Security {
        let credential_bytes = credential.to_bytes();
        Security {
            identity,
            credential,
            credential_bytes,
            ca_public,
            revocations,
            realm_secret,
            suite: Suite::auto(),
            usage_limit: None,
            protection: Protection {
                encrypt: true,
                sign: false,
            },
            overrides: Vec::new(),
            wall: (now, unix_now),
        }
    }

    /// A copy to change the revocation list of (identities are not `Clone`: rebuilt from
    /// their secrets).
    pub(crate) fn clone_for_revocations(&self) -> Security {
        Security {
            identity: Identity::from_secrets(self.identity.sign_seed(), self.identity.kx_secret())
                .expect("keys that loaded once load again"),
            credential: self.credential.clone(),
            credential_bytes: self.credential_bytes.clone(),
            ca_public: self.ca_public,
            revocations: self.revocations.clone(),
            realm_secret: self.realm_secret.clone(),
            suite: self.suite,
            usage_limit: self.usage_limit,
            protection: self.protection,
            overrides: self.overrides.clone(),
            wall: self.wall,
        }
    }

    /// Protects samples as `p` by default, and as given for topics matching a pattern.
    pub fn with_protection(
        mut self,
        p: Protection,
        overrides: Vec<(String, Protection)>,
    ) -> Security {
        self.protection = p;
        self.overrides = overrides;
        self
    }

    /// How samples of `topic` are protected.
    pub fn protection_for(&self, topic: &str) -> Protection {
        self.overrides
            .iter()
            .find(|(p, _)| tether_crypto::pattern_matches(p, topic))
            .map_or(self.protection, |(_, p)| *p)
    }

    /// Moves writers to a new epoch after `n` seals (at most the suite's own limit).
    pub fn with_usage_limit(mut self, n: u64) -> Security {
        self.usage_limit = Some(n.max(1));
        self
    }

    /// Seals allowed under one key with `suite`.
    pub(crate) fn limit(&self, suite: Suite) -> u64 {
        self.usage_limit
            .unwrap_or(u64::MAX)
            .min(suite.usage_limit())
    }

    /// Seals this participant's writers' samples with `suite`.
    pub fn with_suite(mut self, suite: Suite) -> Security {
        self.suite = suite;
        self
    }

    /// What a sender key for `writer` (participant, entity) and epoch is bound to when
    /// wrapped for `reader`.
    pub(crate) fn wrap_context(
        &self,
        writer: &[u8; 12],
        reader: &[u8; 12],
        epoch: u32,
        suite: Suite,
    ) -> Vec<u8> {
        let mut c = Vec::with_capacity(80);
        c.extend_from_slice(b"tether key v1");
        c.extend_from_slice(&self.ca_public);
        c.extend_from_slice(writer);
        c.extend_from_slice(reader);
        c.extend_from_slice(&epoch.to_be_bytes());
        c.push(suite.code());
        c
    }

    /// What a topic is called on the wire: `#` and its 256-bit id (HMAC-SHA-256 of name and
    /// type under the realm secret), so names and types never leave the realm's members.
    pub fn wire_topic(&self, name: &str, type_name: &str) -> String {
        format!(
            "#{}",
            TopicId::derive(&self.realm_secret, name, type_name, "")
        )
    }

    /// Wall-clock unix seconds at engine instant `now`.
    pub fn unix_at(&self, now: Instant) -> u64 {
        let (base, unix) = self.wall;
        unix + now.saturating_duration_since(base).as_secs()
    }

    pub(crate) fn credential_bytes(&self) -> &[u8] {
        &self.credential_bytes
    }

    /// Checks a peer's credential bytes at `now`.
    pub(crate) fn check(&self, bytes: &[u8], now: Instant) -> Result<Credential, CredentialError> {
        let c = Credential::from_bytes(bytes)?;
        c.verify(
            &self.ca_public,
            self.unix_at(now),
            self.revocations.as_ref(),
        )?;
        Ok(c)
    }

    /// Our answer to `peer`'s challenge.
    pub(crate) fn answer(
        &self,
        me: ParticipantId,
        peer: ParticipantId,
        challenge: &[u8; 32],
    ) -> [u8; 64] {
        self.identity.sign(&auth_signed_bytes(challenge, me, peer))
    }
}

/// What we know of one peer's identity.
#[derive(Debug)]
pub(crate) struct PeerAuth {
    /// The challenge we set it.
    pub(crate) mine: [u8; 32],
    /// Its last challenge to us, and whether we have answered it.
    pub(crate) theirs: Option<[u8; 32]>,
    pub(crate) answered: Option<[u8; 32]>,
    /// Its credential, once valid.
    pub(crate) credential: Option<Credential>,
    /// It answered our challenge with the key its credential names.
    pub(crate) verified: bool,
    /// It says it has verified us.
    pub(crate) verified_us: bool,
    /// A failure was reported (once per peer).
    pub(crate) reported: bool,
    /// When we last sent it an AUTH.
    pub(crate) sent: Option<Instant>,
}

impl PeerAuth {
    pub(crate) fn new() -> PeerAuth {
        PeerAuth {
            mine: tether_crypto::random_bytes(),
            theirs: None,
            answered: None,
            credential: None,
            verified: false,
            verified_us: false,
            reported: false,
            sent: None,
        }
    }

    /// Whether the periodic resend is due: until both sides have verified each other.
    pub(crate) fn resend_due(&self, now: Instant, period: Duration) -> bool {
        !(self.verified && self.verified_us)
            && self
                .sent
                .is_none_or(|t| now.saturating_duration_since(t) >= period)
    }
}

/// A writer or reader as 12 bytes: participant id, then entity id (both little-endian).
pub(crate) fn endpoint_id(participant: ParticipantId, entity: u32) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&participant.0.to_le_bytes());
    b[8..].copy_from_slice(&entity.to_le_bytes());
    b
}

/// What a sealed sample is bound to besides its bytes: writer, epoch, sequence number and
/// source timestamp. None can be changed on the wire without the sample failing to open.
fn aad(key: &SenderKey, writer: &[u8; 12], seq: u64, timestamp_ns: u64, prot: u8) -> [u8; 33] {
    let mut a = [0u8; 33];
    a[..24].copy_from_slice(&key.sample_aad(writer, seq));
    a[24..32].copy_from_slice(&timestamp_ns.to_be_bytes());
    a[32] = prot;
    a
}

/// What a writer signs: a domain separator, the writer, sequence number, timestamp, and
/// the protected bytes before the signature (protection byte included).
fn signed_bytes(writer: &[u8; 12], seq: u64, timestamp_ns: u64, head: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + 12 + 16 + head.len());
    v.extend_from_slice(b"tether sample v1");
    v.extend_from_slice(writer);
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(&timestamp_ns.to_be_bytes());
    v.extend_from_slice(head);
    v
}

/// Protects a sample once: `protection ‖ (epoch ‖ ciphertext ‖ tag, or the plaintext) ‖
/// (signature)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn protect(
    prot: Protection,
    key: Option<&SenderKey>,
    signer: &Identity,
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
    plain: &[u8],
) -> Option<Vec<u8>> {
    let b = prot.byte();
    let mut v = match (prot.encrypt, key) {
        (true, Some(k)) => {
            let mut v = Vec::with_capacity(1 + 4 + plain.len() + tether_crypto::TAG_LEN + 64);
            v.push(b);
            v.extend_from_slice(&k.epoch().to_le_bytes());
            v.extend_from_slice(plain);
            let tag = k
                .seal_in_place(seq, &aad(k, writer, seq, timestamp_ns, b), &mut v[5..])
                .ok()?;
            v.extend_from_slice(&tag);
            v
        }
        (true, None) => return None,
        (false, _) => {
            let mut v = Vec::with_capacity(1 + plain.len() + 64);
            v.push(b);
            v.extend_from_slice(plain);
            v
        }
    };
    if prot.sign {
        let sig = signer.sign(&signed_bytes(writer, seq, timestamp_ns, &v));
        v.extend_from_slice(&sig);
    }
    Some(v)
}

/// A protected payload taken apart: its protection, the signature if any, and the body
/// (sealed or plain) between them.
pub(crate) struct Parts<'a> {
    pub(crate) prot: Protection,
    pub(crate) head: &'a [u8],
    pub(crate) body: &'a [u8],
    pub(crate) sig: Option<&'a [u8]>,
}

pub(crate) fn parts(p: &[u8]) -> Option<Parts<'_>> {
    let b = *p.first()?;
    if b & !3 != 0 {
        return None;
    }
    let prot = Protection {
        encrypt: b & 1 != 0,
        sign: b & 2 != 0,
    };
    let (head, sig) = if prot.sign {
        let at = p.len().checked_sub(64)?;
        (&p[..at], Some(&p[at..]))
    } else {
        (p, None)
    };
    let body = head.get(1..)?;
    if prot.encrypt && body.len() < 4 + tether_crypto::TAG_LEN {
        return None;
    }
    Some(Parts {
        prot,
        head,
        body,
        sig,
    })
}

/// Whether a signed payload's signature is the writer's.
pub(crate) fn signature_ok(
    parts: &Parts<'_>,
    public: &[u8; 32],
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
) -> bool {
    parts.sig.is_some_and(|sig| {
        Identity::verify(
            public,
            &signed_bytes(writer, seq, timestamp_ns, parts.head),
            sig,
        )
    })
}

/// The epoch a sealed body names.
pub(crate) fn sealed_epoch(body: &[u8]) -> Option<u32> {
    (body.len() >= 4 + tether_crypto::TAG_LEN)
        .then(|| u32::from_le_bytes(body[..4].try_into().expect("4 bytes")))
}

/// Opens a sealed body (`epoch ‖ ciphertext ‖ tag`); `None` if it does not authenticate.
pub(crate) fn open(
    key: &SenderKey,
    writer: &[u8; 12],
    seq: u64,
    timestamp_ns: u64,
    prot: Protection,
    body: &[u8],
) -> Option<Vec<u8>> {
    let mut v = body.get(4..)?.to_vec();
    let n = key
        .open_in_place(
            seq,
            &aad(key, writer, seq, timestamp_ns, prot.byte()),
            &mut v,
        )
        .ok()?
        .len();
    v.truncate(n);
    Some(v)
}
