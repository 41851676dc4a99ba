//! Authentication: AUTH exchange, credentials, revocations, and topic ids on the wire.

use std::time::Instant;

use bytes::Bytes;
use tether_crypto::CredentialError;
use tether_wire::{
    DatagramBuilder, EntityId, ParticipantId, RefusalReason, RefusalRepr, Submessage,
    refusal_signed_bytes,
};

use crate::endpoint::EndpointInfo;
use crate::event::Event;
use crate::event::{AuthFailure, RevocationRefusal};

use crate::participant::Participant;

impl Participant {
    /// A BATCH: its samples for every addressed local reader, each reader and writer proxy
    /// looked up once per batch rather than once per sample.
    /// The credential of a peer that proved it holds it (answered our challenge).
    pub(crate) fn verified_credential(
        &self,
        pid: ParticipantId,
    ) -> Option<&tether_crypto::Credential> {
        self.peers
            .remotes
            .get(&pid)
            .and_then(|p| p.auth.as_ref())
            .filter(|a| a.verified)
            .and_then(|a| a.credential.as_ref())
    }

    /// A local endpoint as it appears on the wire: with security on, its topic is the
    /// topic's id and its type is folded into it (and so not announced).
    pub(crate) fn wire_info(&self, info: &EndpointInfo) -> EndpointInfo {
        match &self.cfg.security {
            Some(sec) => EndpointInfo {
                topic: sec.wire_topic(&info.topic, &info.type_name),
                type_name: String::new(),
                partitions: info.partitions.clone(),
                qos: info.qos,
            },
            None => info.clone(),
        }
    }

    /// In a secure realm: seals local endpoint `id`'s topic name and type for the realm's
    /// members, once, for its announcements to carry (`docs/wire.md#endpoint`).
    pub(crate) fn describe(&mut self, id: EntityId, info: &EndpointInfo) {
        let Some(sec) = self.cfg.security.clone() else {
            return;
        };
        if let Some(d) = sec.describe(&info.topic, &info.type_name, self.random.get()) {
            self.keystore.descriptions.insert(id, d);
        }
    }

    /// Sends our AUTH to `pid`: credential (sealed for members), our challenge, our answer to
    /// its challenge with our control key wrapped for it, and the epoch of its control key we
    /// hold; after our PARTICIPANT, so a peer that missed our announcement learns us from it.
    pub(crate) fn send_auth(&mut self, now: Instant, pid: ParticipantId) {
        self.send_auth_with(now, pid, None, None);
    }

    /// [`send_auth`](Self::send_auth), with `extra` (a REFUSAL) after the AUTH in the same
    /// datagram: the AUTH carries the credential the REFUSAL's signature is checked with.
    /// `to`: an address other than the peer's, where an AUTH of its came from before we
    /// verified it (see `on_auth`).
    fn send_auth_with(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        extra: Option<Submessage<'_>>,
        to: Option<std::net::SocketAddr>,
    ) {
        let me = self.cfg.participant;
        let hdr = self.header();
        let Some(sec) = self.cfg.security.clone() else {
            return;
        };
        let ours = self.control_tx().key.epoch();
        let ours_raw = self.control_tx().key.key_bytes().to_vec();
        let sealed = sec.sealed_credential(me, pid, self.random.get());
        let Some(rp) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        let addr = to.unwrap_or(rp.addr);
        let Some(a) = rp.auth.as_mut() else { return };
        let response = a.theirs.map(|c| sec.answer(me, pid, &c));
        a.answered = a.theirs;
        a.sent = Some(now);
        // Our control key goes with our answer, wrapped for the key its credential names
        // (cached: a key agreement per peer and epoch, not per resend).
        if response.is_some() && a.wrapped_ours.as_ref().is_none_or(|(e, _)| *e != ours) {
            if let Some(kx) = a.credential.as_ref().map(|c| c.kx_public) {
                let ctx = tether_crypto::control_wrap_context(&sec.ca_public, me.0, pid.0, ours);
                a.wrapped_ours =
                    tether_crypto::wrap_key(&sec.identity, &kx, &ctx, &ours_raw, self.random.get())
                        .map(|w| (ours, w));
                self.stats.control_keys_wrapped += 1;
            }
        }
        let wrapped = a
            .wrapped_ours
            .clone()
            .filter(|(e, _)| response.is_some() && *e == ours);
        let (challenge, verified_you, you_verified_me, have_epoch) =
            (a.mine, a.verified, a.verified_us, a.control.epoch());
        let m = tether_wire::AuthRepr {
            to: pid,
            challenge,
            response,
            verified_you,
            you_verified_me,
            control_key: wrapped.as_ref().map(|(e, w)| tether_wire::ControlKeyRepr {
                epoch: *e,
                wrapped: w,
            }),
            have_epoch,
            credential: &sealed,
        };
        let part = self.participant_repr();
        let mut dg = Vec::with_capacity(300 + m.credential.len());
        let mut b = DatagramBuilder::new(&mut dg, hdr);
        if b.push(&Submessage::Participant(part)).is_ok()
            && b.push(&Submessage::Auth(m)).is_ok()
            && extra.is_none_or(|x| b.push(&x).is_ok())
        {
            self.push_transmit(addr, Bytes::from(dg));
            // To a routed peer, our endpoints follow the AUTH that carries our control key
            // at once: the link keeps them in order, so the peer holds the key when they come
            // (rather than a crossing later, when it says it holds it).
            let early = wrapped.is_some() && crate::route::is_routed(&addr);
            if let Some(a) = self
                .peers
                .remotes
                .get_mut(&pid)
                .and_then(|p| p.auth.as_mut())
                .filter(|a| early && !a.announced_early)
            {
                a.announced_early = true;
                self.announce_to(&[addr], None);
            }
        }
    }

    /// What a REFUSAL says for a credential refused with `e`.
    fn refusal_reason(sec: &crate::Security, e: &CredentialError) -> RefusalReason {
        match *e {
            CredentialError::Revoked(serial) => RefusalReason::Revoked {
                serial,
                list: sec.revocations.as_ref().map_or(0, |r| r.serial),
            },
            CredentialError::Expired { expires, now } => RefusalReason::Expired { expires, now },
            CredentialError::NotYetValid { issued, now } => {
                RefusalReason::NotYetValid { issued, now }
            }
            _ => RefusalReason::Other,
        }
    }

    /// Tells `pid` that we refused its credential, and why (`docs/wire.md#refusal`):
    /// signed with our credential key over `challenge`, the one it set us, after our AUTH
    /// (which carries that credential). At most one a [`REFUSAL_GAP`] to each peer, however
    /// often it sends AUTH.
    ///
    /// [`REFUSAL_GAP`]: crate::security::REFUSAL_GAP
    //= docs/wire.md#refusal
    //# A participant that refuses the credential of a peer whose AUTH opened under the realm
    //# secret tells it why in a REFUSAL, at most once a second
    fn send_refusal(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        challenge: [u8; 32],
        reason: RefusalReason,
    ) {
        let me = self.cfg.participant;
        let Some(sec) = self.cfg.security.clone() else {
            return;
        };
        let Some(a) = self
            .peers
            .remotes
            .get_mut(&pid)
            .and_then(|p| p.auth.as_mut())
        else {
            return;
        };
        if a.refusal_sent
            .is_some_and(|t| now.saturating_duration_since(t) < crate::security::REFUSAL_GAP)
        {
            return;
        }
        a.refusal_sent = Some(now);
        let signature = sec
            .identity
            .sign(&refusal_signed_bytes(&challenge, me, pid, reason));
        self.stats.refusals_sent += 1;
        let r = RefusalRepr {
            to: pid,
            challenge,
            reason,
            signature: &signature,
        };
        self.send_auth_with(now, pid, Some(Submessage::Refusal(r)), None);
    }

    /// A REFUSAL from `pid`: it refused our credential. Believed only if it is for us, over
    /// the challenge we set `pid`, and signed by the key of the credential `pid`'s AUTH
    /// presented (checked against our CA); then reported once
    /// ([`Event::RefusedByPeer`]), and `pid` is not reported again as not authenticating in
    /// time. Anything else is counted and dropped.
    //= docs/wire.md#refusal
    //# A receiver believes a REFUSAL only if it is addressed to it, carries the challenge it
    //# set the sender, and verifies with the key of the credential the sender's AUTH presented
    pub(crate) fn on_refusal(&mut self, now: Instant, pid: ParticipantId, r: RefusalRepr<'_>) {
        let me = self.cfg.participant;
        let Some(a) = self
            .peers
            .remotes
            .get_mut(&pid)
            .and_then(|p| p.auth.as_mut())
        else {
            self.stats.refusals_unverified += 1;
            return;
        };
        // The cheap checks first; after a signature that did not verify, no other check of
        // this peer's REFUSALs for REFUSAL_CHECK_GAP (a genuine peer sends one a second).
        let due = a
            .refusal_checked
            .is_none_or(|t| now.saturating_duration_since(t) >= crate::security::REFUSAL_CHECK_GAP);
        if r.to != me || r.challenge != a.mine || !due {
            self.stats.refusals_unverified += 1;
            return;
        }
        self.stats.refusals_checked += 1;
        let signed = refusal_signed_bytes(&a.mine, pid, me, r.reason);
        let name = a
            .credential
            .as_ref()
            .filter(|c| {
                r.to == me
                    && r.challenge == a.mine
                    && tether_crypto::Identity::verify(&c.sign_public, &signed, r.signature)
            })
            .map(|c| c.name.clone());
        let Some(name) = name else {
            // A forged signature: the next check of this peer's REFUSALs waits.
            a.refusal_checked = Some(now);
            self.stats.refusals_unverified += 1;
            return;
        };
        self.stats.refusals_heard += 1;
        // Once per peer, as every failure: not again when, forgotten for not
        // authenticating, it is found again (its id is remembered as reported).
        if std::mem::replace(&mut a.refusal_heard, true) || a.reported {
            return;
        }
        a.reported = true;
        self.events.push_back(Event::RefusedByPeer {
            participant: pid,
            name,
            reason: r.reason,
        });
    }

    /// In a secure realm, sends our AUTH to `from` as well, where an AUTH of `pid` came
    /// from, when `pid` is not yet authenticated and known at another direct address, and
    /// `from` is direct too: anyone on a LAN can claim a member's id from an address of its
    /// own and hold our AUTH there, and the member, at `from`, then never gets our
    /// challenge. `fresh`: the AUTH carried a challenge not seen from `pid` lately, which
    /// only the member can make: always answered. Others (replays of what it sent) at most
    /// one every [`AUTH_ASIDE_GAP`](crate::security::AUTH_ASIDE_GAP) for the peer. No
    /// budget is shared between peers (one an outsider's inventions could spend).
    fn send_auth_aside(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: std::net::SocketAddr,
        fresh: bool,
    ) {
        //= docs/wire.md#validation
        //# an AUTH from another direct address than the one the id was validated at, before
        //# the id is authenticated, is answered there too
        if self.cfg.security.is_none() {
            return;
        }
        let due = self.peers.remotes.get_mut(&pid).is_some_and(|p| {
            let direct = p.elsewhere_on_lan(from);
            p.auth.as_mut().is_some_and(|a| {
                let spaced = a.aside_sent.is_none_or(|t| {
                    now.saturating_duration_since(t) >= crate::security::AUTH_ASIDE_GAP
                });
                let due = direct && !a.verified && (fresh || spaced);
                if due {
                    a.aside_sent = Some(now);
                }
                due
            })
        });
        if due {
            self.stats.auth_sent_aside += 1;
            self.send_auth_with(now, pid, None, Some(from));
        }
    }

    /// Reports once that `pid`'s AUTH was refused for `reason`.
    fn auth_refused(&mut self, pid: ParticipantId, reason: AuthFailure) {
        self.stats.auth_failed += 1;
        self.report_refusal(pid, reason);
    }

    pub(crate) fn on_auth(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        from: std::net::SocketAddr,
        m: tether_wire::AuthRepr<'_>,
    ) {
        let me = self.cfg.participant;
        let Some(sec) = self.cfg.security.clone() else {
            // Security off: nothing to prove, and nothing will be exchanged with it. Said
            // once, so a user without --keys learns why a secure peer stays silent.
            if let Some(rp) = self.peers.remotes.get_mut(&pid) {
                if !std::mem::replace(&mut rp.secure_noted, true) {
                    self.events.push_back(Event::AuthenticationFailed {
                        participant: pid,
                        reason: AuthFailure::NoKeysHere,
                    });
                }
            }
            return;
        };
        if let Some(a) = self
            .peers
            .remotes
            .get_mut(&pid)
            .and_then(|p| p.auth.as_mut())
        {
            a.heard = true;
        }
        if m.to != me {
            self.stats.auth_failed += 1;
            return;
        }
        if self
            .peers
            .remotes
            .get(&pid)
            .is_none_or(|p| p.auth.is_none())
        {
            return;
        }
        let Some(bytes) = sec.open_credential(pid, me, m.credential) else {
            self.auth_refused(pid, AuthFailure::NotSealedForRealm);
            return;
        };
        let cred = match sec.check(&bytes, now, &mut self.keystore.verified_credentials) {
            Ok(c) => c,
            Err(e) => {
                let reason = Self::refusal_reason(&sec, &e);
                self.auth_refused(pid, AuthFailure::CredentialRefused(e));
                self.send_refusal(now, pid, m.challenge, reason);
                return;
            }
        };
        //= docs/wire.md#credential
        //# a member refuses a router's credential in AUTH
        if cred.role != tether_crypto::Role::Member {
            self.auth_refused(pid, AuthFailure::NotAMember(cred.role));
            self.send_refusal(now, pid, m.challenge, RefusalReason::Other);
            return;
        }
        let ours = self.control_tx().key.epoch();
        let Some(a) = self
            .peers
            .remotes
            .get_mut(&pid)
            .and_then(|p| p.auth.as_mut())
        else {
            return;
        };
        if a.credential
            .as_ref()
            .is_some_and(|c| c.sign_public != cred.sign_public)
        {
            if a.verified {
                // A verified id stays bound to its credential until it leaves: another
                // credential under it (a member posing as another) is refused.
                self.stats.identity_conflicts += 1;
                if !a.conflict_reported {
                    a.conflict_reported = true;
                    self.events.push_back(Event::AuthenticationFailed {
                        participant: pid,
                        reason: AuthFailure::IdentityConflict,
                    });
                }
                return;
            }
            // Not verified yet: whoever proves a credential first binds the id.
            a.verified_us = false;
            a.wrapped_ours = None;
        }
        let kx = cred.kx_public;
        let sign_public = cred.sign_public;
        a.credential = Some(cred);
        let new_challenge = a.theirs != Some(m.challenge);
        a.theirs = Some(m.challenge);
        let fresh = !a.seen_challenges.contains(&m.challenge);
        if fresh {
            if a.seen_challenges.len() >= crate::security::SEEN_CHALLENGES {
                a.seen_challenges.remove(0);
            }
            a.seen_challenges.push(m.challenge);
        }
        a.verified_us = m.verified_you;
        let had_ours = a.has_ours == ours;
        a.has_ours = m.have_epoch;
        let holds_ours = a.has_ours == ours && !had_ours;
        // Its control key, wrapped for us by the key its credential names: authenticates
        // itself, whoever relayed the datagram.
        let theirs = m.control_key.and_then(|k| {
            let ctx = tether_crypto::control_wrap_context(&sec.ca_public, pid.0, me.0, k.epoch);
            tether_crypto::unwrap_key(&sec.identity, &kx, &ctx, k.wrapped)
                .and_then(|raw| tether_crypto::ControlKey::from_bytes(k.epoch, &raw))
        });
        let mut newly = false;
        let mut new_key = false;
        let mut bad_answer = false;
        match (m.response, a.verified) {
            (Some(r), false) => {
                let signed = tether_wire::auth_signed_bytes(&a.mine, pid, me);
                match theirs {
                    Some(k) if tether_crypto::Identity::verify(&sign_public, &signed, &r) => {
                        a.control.clear();
                        a.control.install(k);
                        a.verified = true;
                        newly = true;
                    }
                    _ => {
                        a.bad_answers = a.bad_answers.saturating_add(1);
                        bad_answer = true;
                    }
                }
            }
            (_, true) => {
                if let Some(k) = theirs {
                    new_key = a.control.install(k);
                }
            }
            _ => {}
        }
        // Both sides verified now: endpoints already known may match.
        let became_mutual = a.verified && a.verified_us && !a.mutual;
        a.mutual |= became_mutual;
        //= docs/wire.md#validation
        //# an id not yet authenticated is bound to the address its verifying AUTH came from
        // Between direct addresses only: a member heard both directly and through a router
        // moves by the rules for routed peers (`on_participant`, `heard_from`).
        if newly
            && self
                .peers
                .remotes
                .get(&pid)
                .is_some_and(|p| p.elsewhere_on_lan(from))
        {
            // Anyone on a LAN may claim an id at an address of its own (it answers the
            // cookie sent there) and hold our AUTH there; the member proves its
            // credential from where it is. Once only: a verified id moves by the rules of
            // `heard_from`, and the claim's address is not one it may move back to.
            self.stats.unverified_claims_moved += 1;
            self.move_peer(now, pid, from);
            if let Some(p) = self.peers.remotes.get_mut(&pid) {
                p.prev = None;
            }
        }
        if newly {
            // Datagrams to its address are for it now (`Peers::remote_at`): until then they
            // stayed for whoever was validated there first.
            if let Some(addr) = self.peers.remotes.get(&pid).map(|p| p.addr) {
                if self.peers.remote_at.insert(addr, pid) != Some(pid) {
                    self.peers.fanout_gen += 1;
                }
            }
        }
        if bad_answer {
            let strikes = self
                .peers
                .remotes
                .get(&pid)
                .and_then(|p| p.auth.as_ref())
                .map_or(0, |a| a.bad_answers);
            if strikes >= 3 {
                self.auth_refused(pid, AuthFailure::BadAnswer);
            } else {
                self.stats.auth_failed += 1;
            }
        }
        // Answer whatever the sender still lacks: our answer to a new challenge, our
        // verdict, word that we verified it or hold its new key, or our control key (that
        // word can be lost like any datagram).
        let (verified, sent) = self
            .peers
            .remotes
            .get(&pid)
            .and_then(|p| p.auth.as_ref())
            .map_or((false, None), |a| (a.verified, a.sent));
        // What only repeats (the same challenge, nothing new verified or keyed) is answered
        // at most once every `AUTH_ASIDE_GAP`: a replayed AUTH drew a whole AUTH, sealed
        // and signed, every time (the third outsider review).
        let repeat = !(new_challenge || newly || new_key);
        let spaced = sent
            .is_none_or(|t| now.saturating_duration_since(t) >= crate::security::AUTH_ASIDE_GAP);
        if (!repeat || spaced)
            && (new_challenge
                || newly
                || new_key
                || !m.verified_you
                || (verified && !m.you_verified_me)
                || (verified && m.have_epoch != ours))
        {
            self.send_auth(now, pid);
        }
        self.send_auth_aside(now, pid, from, fresh);
        if newly {
            let name = self
                .peers
                .remotes
                .get(&pid)
                .and_then(|p| p.auth.as_ref())
                .and_then(|a| a.credential.as_ref())
                .map(|c| c.name.clone())
                .unwrap_or_default();
            self.events.push_back(Event::ParticipantAuthenticated {
                participant: pid,
                name,
            });
        }
        // A routed peer we just verified takes what we send from now on (`PeerAuth::early`):
        // its endpoints match at once, not after its word that it verified us.
        let early = self.peers.remotes.get(&pid).is_some_and(|p| {
            p.auth
                .as_ref()
                .is_some_and(|a| a.early(crate::route::is_routed(&p.addr)))
        });
        if became_mutual || (newly && early) {
            self.match_known_endpoints(now, pid);
        }
        if holds_ours {
            // It can authenticate our datagrams now: our endpoints, at once, rather than at
            // the next announcement.
            if let Some(addr) = self.peers.remotes.get(&pid).map(|p| p.addr) {
                self.announce_to(&[addr], None);
            }
        }
    }

    /// Puts a newer revocation list of the realm in force: peers whose credentials it
    /// revokes lose their authentication and every match, and the writers they read move to
    /// a new epoch at once.
    ///
    /// Refused, with the list in force kept: a list that is not the realm CA's, and one
    /// older than the list in force (a lower serial, or the same serial with other
    /// contents), so an old list cannot bring a revoked member back. Each refusal is counted
    /// and raised as [`Event::RevocationListRefused`]. The list in force given again changes
    /// nothing.
    pub fn set_revocations(
        &mut self,
        now: Instant,
        list: tether_crypto::RevocationList,
    ) -> Result<(), RevocationRefusal> {
        //= docs/wire.md#credential
        //# A participant puts a revocation list in force only if the realm's CA signed it and its
        //# list serial is higher than that of the list in force; the list in force given again
        //# changes nothing
        let refused = match self.cfg.security.as_ref() {
            None => Some(RevocationRefusal::SecurityOff),
            Some(sec) => match (list.verify(&sec.ca_public), &sec.revocations) {
                (Err(e), _) => {
                    self.stats.invalid_revocation_lists += 1;
                    Some(RevocationRefusal::Invalid(e))
                }
                (Ok(()), Some(held)) if *held == list => return Ok(()),
                (Ok(()), Some(held)) if list.serial <= held.serial => {
                    self.stats.stale_revocation_lists += 1;
                    Some(RevocationRefusal::Stale {
                        held: held.serial,
                        offered: list.serial,
                    })
                }
                (Ok(()), _) => None,
            },
        };
        if let Some(reason) = refused {
            self.events.push_back(Event::RevocationListRefused {
                reason: reason.clone(),
            });
            return Err(reason);
        }
        let Some(sec) = self.cfg.security.as_ref() else {
            return Err(RevocationRefusal::SecurityOff);
        };
        let mut sec2 = (**sec).clone_for_revocations();
        let (serial, count) = (list.serial, list.serials.len());
        sec2.revocations = Some(list);
        let sec2 = std::sync::Arc::new(sec2);
        self.cfg.security = Some(sec2.clone());
        let revoked: Vec<ParticipantId> = self
            .peers
            .remotes
            .iter()
            .filter(|(_, p)| {
                p.auth
                    .as_ref()
                    .and_then(|a| a.credential.as_ref())
                    .is_some_and(|c| {
                        sec2.revocations
                            .as_ref()
                            .is_some_and(|r| r.contains(c.serial))
                    })
            })
            .map(|(id, _)| *id)
            .collect();
        self.events.push_back(Event::RevocationListApplied {
            serial,
            revoked: count,
        });
        if let Some(own) = self
            .cfg
            .security
            .as_deref()
            .map(|s| s.credential.serial)
            .filter(|own| {
                self.cfg
                    .security
                    .as_deref()
                    .and_then(|s| s.revocations.as_ref())
                    .is_some_and(|r| r.contains(*own))
            })
        {
            self.events.push_back(Event::OwnCredentialRevoked {
                serial: own,
                list: serial,
            });
        }
        // It stays refused, since its credential now fails every check.
        self.forget_authentication(&revoked, AuthFailure::Revoked);
        let _ = now;
        Ok(())
    }

    /// Forgets that `peers` authenticated (their credential was revoked, or expired): their
    /// endpoints go, which unmatches them and moves the writers they read to a new epoch
    /// now; they are no longer verified and their credential is dropped (an AUTH they send
    /// again is checked afresh); `reason` is reported once for each.
    pub(crate) fn forget_authentication(&mut self, peers: &[ParticipantId], reason: AuthFailure) {
        if peers.is_empty() {
            return;
        }
        let why = match reason {
            AuthFailure::Expired => crate::event::Departure::Expired,
            _ => crate::event::Departure::Revoked,
        };
        let mut notices = Vec::new();
        for &pid in peers {
            let ids: Vec<EntityId> = self
                .peers
                .remotes
                .get(&pid)
                .map(|p| p.endpoints.keys().copied().collect())
                .unwrap_or_default();
            // Forget its endpoints (unmatching them, re-keying writers it read) and its
            // identity.
            for e in ids {
                self.remove_remote_endpoint(pid, e, why);
            }
            let now = self.clock;
            if let Some(a) = self
                .peers
                .remotes
                .get_mut(&pid)
                .and_then(|p| p.auth.as_mut())
            {
                // It is told why, over the last challenge it set us.
                notices.extend(a.theirs.zip(a.credential.as_ref()).map(|(ch, c)| {
                    let reason = match (&reason, self.cfg.security.as_deref()) {
                        (AuthFailure::Expired, Some(sec)) => RefusalReason::Expired {
                            expires: c.expires,
                            now: sec.unix_at(now),
                        },
                        (_, sec) => RefusalReason::Revoked {
                            serial: c.serial,
                            list: sec
                                .and_then(|s| s.revocations.as_ref())
                                .map_or(0, |r| r.serial),
                        },
                    };
                    (pid, ch, reason)
                }));
                a.verified = false;
                a.mutual = false;
                a.credential = None;
                a.control.clear();
                a.wrapped_ours = None;
                a.has_ours = 0;
                a.pair_tx = None;
                a.pair_rx = None;
                // What it sends under that credential from now on is refused silently.
                a.reported = true;
            }
            self.events.push_back(Event::AuthenticationFailed {
                participant: pid,
                reason: reason.clone(),
            });
        }
        // Rare and urgent: the new epochs go out now, and the departed peers' copies of our
        // control key stop authenticating anything.
        self.keystore.rekey_wanted = false;
        self.rekey_due_writers();
        let now = self.clock;
        self.rekey_control(now);
        for (pid, challenge, reason) in notices {
            self.send_refusal(now, pid, challenge, reason);
        }
    }

    /// Peers that have not finished authenticating get our AUTH again (lost datagrams).
    pub(crate) fn resend_auth(&mut self, now: Instant) {
        if self.cfg.security.is_none() {
            return;
        }
        let period = self.announce_period();
        let ours = self.control_tx().key.epoch();
        let due: Vec<ParticipantId> = self
            .peers
            .remotes
            .iter()
            .filter(|(_, p)| {
                p.auth
                    .as_ref()
                    .is_some_and(|a| a.resend_due(now, period, ours))
            })
            .map(|(id, _)| *id)
            .collect();
        for pid in due {
            self.send_auth(now, pid);
            if let Some(a) = self
                .peers
                .remotes
                .get_mut(&pid)
                .and_then(|p| p.auth.as_mut())
            {
                a.resend_gap = a.resend_gap.saturating_mul(2).min(period);
            }
        }
    }
}
