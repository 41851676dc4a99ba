//! A participant's part in a secure realm: its keys and credential, the realm's CA and
//! revocation list, and each peer's authentication state (`docs/wire.md#auth`).

mod auth;
pub(crate) mod control;
pub(crate) mod expiry;
pub(crate) mod gate;
pub(crate) mod keys;
pub(crate) mod protect;

use std::fmt;
use std::time::{Duration, Instant};

pub use tether_crypto::Protection;
use tether_crypto::{
    Credential, CredentialError, Identity, RealmSecret, RevocationList, Suite, TopicId,
    VerifiedCredentials,
};
use tether_wire::{ParticipantId, auth_signed_bytes};

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
    /// Also seal every datagram to a verified peer under a key shared with that peer alone
    /// (SROS2's per-destination protection; a comparison mode, see [`Security::with_pairwise`]).
    pub pairwise: bool,
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
            pairwise: false,
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
            pairwise: self.pairwise,
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

    /// Seals every datagram to a peer once more, for that peer alone (`docs/wire.md#sealed`):
    /// what SROS2's default governance does with RTPS messages. Samples stay sealed once under
    /// the sender key as well, so this only adds one seal and one copy per destination. It
    /// exists to measure that cost (`tether bench fanout --mode pairwise`); tether's own model
    /// does not need it.
    pub fn with_pairwise(mut self, on: bool) -> Security {
        self.pairwise = on;
        self
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

    /// What a sender key for `writer` and epoch is bound to when wrapped for `reader`.
    pub(crate) fn wrap_context(
        &self,
        writer: &[u8; 12],
        reader: &[u8; 12],
        epoch: u32,
        suite: Suite,
    ) -> Vec<u8> {
        tether_crypto::wrap_context(&self.ca_public, writer, reader, epoch, suite)
    }

    /// What a topic is called on the wire: `#` and its 256-bit id (HMAC-SHA-256 of name and
    /// type under the realm secret), so names and types never leave the realm's members.
    pub fn wire_topic(&self, name: &str, type_name: &str) -> String {
        format!(
            "#{}",
            TopicId::derive(&self.realm_secret, name, type_name, "")
        )
    }

    /// The key routers route topic `name` by (`route`): its id under the realm secret with
    /// the type and scope left out, so that a reader of any type meets typed writers (the
    /// engines still match types and partitions end to end). Routers see only this.
    pub fn route_key(&self, name: &str) -> [u8; 32] {
        TopicId::derive(&self.realm_secret, name, "", "").0
    }

    /// How samples of `topic` are protected, as an ENDPOINT announces it.
    pub(crate) fn mode_for(&self, topic: &str) -> tether_wire::ProtectionMode {
        let p = self.protection_for(topic);
        tether_wire::ProtectionMode::from_bits(p.encrypt, p.sign)
    }

    /// Topic `name` of type `type_name` sealed for the realm's members, bound to its id
    /// (`docs/wire.md#endpoint`): what our ENDPOINTs carry so that members can show names
    /// and types, which outsiders never see.
    pub(crate) fn describe(
        &self,
        name: &str,
        type_name: &str,
        rng: &mut dyn tether_crypto::Random,
    ) -> Option<Vec<u8>> {
        let id = TopicId::derive(&self.realm_secret, name, type_name, "");
        tether_crypto::seal_description(&self.realm_secret, &id, name, type_name, rng)
    }

    /// The topic name and type an endpoint announced as `wire_topic` (`#` and its id)
    /// carries in `sealed`; `None` unless it opens in this realm for that id, and the name
    /// and type derive it.
    pub(crate) fn read_description(
        &self,
        wire_topic: &str,
        sealed: &[u8],
    ) -> Option<(String, String)> {
        let hex = wire_topic.strip_prefix('#')?;
        let id: [u8; 32] = tether_crypto::from_hex(hex)?.try_into().ok()?;
        tether_crypto::open_description(&self.realm_secret, &TopicId(id), sealed)
    }

    /// Wall-clock unix seconds at engine instant `now`.
    pub fn unix_at(&self, now: Instant) -> u64 {
        let (base, unix) = self.wall;
        unix + now.saturating_duration_since(base).as_secs()
    }

    /// Our credential as an AUTH from `me` to `to` carries it: sealed under the realm's AUTH
    /// key, so only members read it (`docs/wire.md#auth`).
    pub(crate) fn sealed_credential(
        &self,
        me: ParticipantId,
        to: ParticipantId,
        rng: &mut dyn tether_crypto::Random,
    ) -> Vec<u8> {
        tether_crypto::seal_credential(&self.realm_secret, me.0, to.0, &self.credential_bytes, rng)
    }

    /// A peer's credential from its AUTH to us; `None` if not sealed in this realm for us.
    pub(crate) fn open_credential(
        &self,
        from: ParticipantId,
        me: ParticipantId,
        sealed: &[u8],
    ) -> Option<Vec<u8>> {
        tether_crypto::open_credential(&self.realm_secret, from.0, me.0, sealed)
    }

    /// Checks a peer's credential bytes at `now`; the CA's signature only if `verified`
    /// has not kept these exact bytes ([`VerifiedCredentials`]).
    pub(crate) fn check(
        &self,
        bytes: &[u8],
        now: Instant,
        verified: &mut VerifiedCredentials,
    ) -> Result<Credential, CredentialError> {
        verified.check(
            bytes,
            &self.ca_public,
            self.unix_at(now),
            self.revocations.as_ref(),
        )
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

/// The least time between two REFUSALs to one peer (`docs/wire.md#refusal`): a refused
/// peer resends its AUTH, and each is answered at most this often.
pub(crate) const REFUSAL_GAP: Duration = Duration::from_secs(1);

/// At most one REFUSAL's signature is checked from a peer in this time (`on_refusal`).
pub(crate) const REFUSAL_CHECK_GAP: Duration = Duration::from_millis(100);

/// The first wait before an unanswered AUTH is sent again (`PeerAuth::resend_gap`).
pub(crate) const AUTH_RESEND_FIRST: Duration = Duration::from_millis(50);

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
    /// Both sides verified each other: we verified it, and it said it verified us. Only
    /// then do endpoints match: a side that has not yet verified the other drops all it
    /// sends (its KEY among it), so a writer that matched earlier would need repairs for
    /// its first samples. Kept once set (an old AUTH of its, replayed, cannot undo it)
    /// until it loses its authentication.
    pub(crate) mutual: bool,
    /// A routed peer has been sent our endpoints right after the AUTH that carried our
    /// control key (see [`PeerAuth::early`]).
    pub(crate) announced_early: bool,
    /// A failure was reported (once per peer).
    pub(crate) reported: bool,
    /// It has sent us an AUTH (any): it has keys. One that never does is reported as
    /// having none ([`crate::AuthFailure::NoAuth`]).
    pub(crate) heard: bool,
    /// When we last sent it an AUTH.
    pub(crate) sent: Option<Instant>,
    /// How long after an AUTH unanswered to send it again: 50 ms, then twice as long each
    /// time, up to the announcement period (a lost AUTH under loss cost a whole period).
    pub(crate) resend_gap: Duration,
    /// Pairwise mode: the key we seal datagrams to it with, and the last counter used.
    pub(crate) pair_tx: Option<(tether_crypto::SenderKey, u64)>,
    /// The key it seals datagrams to us with, and the counters seen.
    pub(crate) pair_rx: Option<(tether_crypto::SenderKey, tether_crypto::ReplayWindow)>,
    /// Its control keys: its datagrams are authenticated under them
    /// (`docs/wire.md#auth_tag`).
    pub(crate) control: control::ControlRx,
    /// The epoch of our control key it says it holds.
    pub(crate) has_ours: u32,
    /// Our control key wrapped for it (epoch and bytes): wrapping costs a key agreement,
    /// and AUTH is resent until it holds the key.
    pub(crate) wrapped_ours: Option<(u32, Vec<u8>)>,
    /// It tried another credential under its verified id (reported once).
    pub(crate) conflict_reported: bool,
    /// When we last sent it a REFUSAL (at most one a second: [`REFUSAL_GAP`]).
    pub(crate) refusal_sent: Option<Instant>,
    /// When a REFUSAL's signature from it last failed: no other is checked for
    /// [`REFUSAL_CHECK_GAP`], so REFUSALs with a valid challenge and a forged signature
    /// (a sniffer's) cost one signature check each 100 ms, not one each.
    pub(crate) refusal_checked: Option<Instant>,
    /// It refused our credential and said why, in a REFUSAL that verified (reported once).
    pub(crate) refusal_heard: bool,
    /// Answers to our challenge that did not verify. One or two are a session that left or
    /// restarted mid-handshake (its answer to an earlier challenge, arriving late); only a
    /// third is reported.
    pub(crate) bad_answers: u8,
    /// When we last sent our AUTH to an address other than the peer's, where an AUTH of
    /// its came from before we verified it (at most one per [`AUTH_ASIDE_GAP`] for an AUTH
    /// whose challenge we had seen).
    pub(crate) aside_sent: Option<Instant>,
    /// The last challenges its AUTHs carried (at most [`SEEN_CHALLENGES`]): an AUTH with
    /// one not among them is the member's own, fresh, which no outsider can make.
    pub(crate) seen_challenges: Vec<[u8; 32]>,
}

/// The least time between two AUTHs sent aside to a peer not yet verified
/// ([`PeerAuth::aside_sent`]): the AUTH it answers is as large as what it sent, and a
/// replayed AUTH from a forged address can draw no more than this.
pub(crate) const AUTH_ASIDE_GAP: Duration = Duration::from_millis(50);

/// Challenges remembered per peer ([`PeerAuth::seen_challenges`]).
pub(crate) const SEEN_CHALLENGES: usize = 4;

impl PeerAuth {
    /// Whether, with a routed peer, what we send may go before its verdict on us: it
    /// proved its credential to us, and we have answered its challenge with our control
    /// key. A router link is one ordered stream each way, so our answer reaches it before
    /// anything we send after it: it verifies us, and holds our control key, before our
    /// endpoints, KEYs and samples arrive. Waiting for its word that it verified us cost
    /// a crossing of the routers each way at every meeting. Not on a direct path, where
    /// datagrams may be reordered or lost one without the other (`mutual` there). Across
    /// several routers the AUTH (along the participant's host route) and samples to a
    /// link's group (along the topic's tree) may take different ways: what overtakes the
    /// AUTH is dropped and repaired as a loss would be. Only timing depends on the order:
    /// nothing goes before we verified the peer and its grants.
    pub(crate) fn early(&self, routed: bool) -> bool {
        routed
            && self.verified
            && self.theirs.is_some()
            && self.answered == self.theirs
            && self.wrapped_ours.is_some()
    }

    pub(crate) fn new(random: &mut dyn tether_crypto::Random) -> PeerAuth {
        PeerAuth {
            mine: tether_crypto::random_array(random),
            theirs: None,
            answered: None,
            credential: None,
            verified: false,
            verified_us: false,
            mutual: false,
            reported: false,
            heard: false,
            sent: None,
            resend_gap: AUTH_RESEND_FIRST,
            pair_tx: None,
            pair_rx: None,
            control: control::ControlRx::default(),
            has_ours: 0,
            wrapped_ours: None,
            conflict_reported: false,
            announced_early: false,
            refusal_sent: None,
            refusal_checked: None,
            refusal_heard: false,
            bad_answers: 0,
            aside_sent: None,
            seen_challenges: Vec::new(),
        }
    }

    /// Whether the periodic resend is due: until both sides have verified each other and it
    /// holds our control key of epoch `ours`.
    pub(crate) fn resend_due(&self, now: Instant, period: Duration, ours: u32) -> bool {
        !(self.verified && self.verified_us && self.has_ours == ours)
            && self
                .sent
                .is_none_or(|t| now.saturating_duration_since(t) >= self.resend_gap.min(period))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(ca: &tether_crypto::CaKey, serial: u64, expires: u64) -> Credential {
        let id = Identity::generate();
        Credential::issue(
            ca,
            "peer",
            serial,
            1_000,
            expires,
            id.sign_public(),
            id.kx_public(),
            vec!["/**".into()],
            vec![],
        )
        .unwrap()
    }

    /// A credential verified once is not signature-checked again, but its terms are: one
    /// that expired or was revoked since is refused; other bytes (a forged signature) are
    /// checked in full.
    #[test]
    fn remembered_credentials_still_expire_and_can_be_revoked() {
        let ca = tether_crypto::CaKey::generate();
        let now = Instant::now();
        let sec = Security::new(
            Identity::generate(),
            issue(&ca, 1, 4_000_000_000),
            ca.public(),
            RealmSecret::from_bytes([3; 32]),
            None,
            now,
            2_000_000_000,
        );
        let mut seen = VerifiedCredentials::default();
        let peer = issue(&ca, 2, 2_000_000_100).to_bytes();
        assert!(sec.check(&peer, now, &mut seen).is_ok());
        assert_eq!(seen.len(), 1);
        assert!(sec.check(&peer, now, &mut seen).is_ok());
        assert_eq!(seen.len(), 1, "checked again, not remembered twice");
        // Later than its expiry: refused although remembered.
        let later = now + Duration::from_secs(200);
        assert!(matches!(
            sec.check(&peer, later, &mut seen),
            Err(CredentialError::Expired { .. })
        ));
        // Revoked since: refused although remembered.
        let mut revoked = sec.clone_for_revocations();
        revoked.revocations = Some(RevocationList::issue(&ca, 1, 1_000, vec![2]));
        assert!(matches!(
            revoked.check(&peer, now, &mut seen),
            Err(CredentialError::Revoked(2))
        ));
        // The same credential with its signature's last byte changed: checked in full.
        let mut forged = peer.clone();
        *forged.last_mut().unwrap() ^= 1;
        assert!(matches!(
            sec.check(&forged, now, &mut seen),
            Err(CredentialError::BadSignature)
        ));
        // Room for KEPT: the least recently used makes room; a credential checked again is
        // used again.
        let first = issue(&ca, 9, 4_000_000_000).to_bytes();
        assert!(sec.check(&first, now, &mut seen).is_ok());
        for serial in 10..10 + VerifiedCredentials::KEPT as u64 {
            let c = issue(&ca, serial, 4_000_000_000).to_bytes();
            assert!(sec.check(&c, now, &mut seen).is_ok());
            assert!(sec.check(&first, now, &mut seen).is_ok());
        }
        assert_eq!(seen.len(), VerifiedCredentials::KEPT);
        assert!(seen.contains(&first), "used all along, kept");
        assert!(!seen.contains(&peer), "least recently used, gone");
    }
}
