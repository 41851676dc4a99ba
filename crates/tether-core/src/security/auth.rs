//! Authentication: AUTH exchange, credentials, revocations, and topic ids on the wire.

use std::time::Instant;

use bytes::Bytes;
use tether_wire::{DatagramBuilder, EndpointKind, EntityId, ParticipantId, Submessage};

use crate::endpoint::EndpointInfo;
use crate::event::{AuthFailure, RevocationRefusal};
use crate::event::{Event, Guid};

use crate::discovery::RemoteEndpoint;
use crate::matching::Side;
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

    /// Sends our AUTH to `pid`: credential, our challenge, our answer to its challenge.
    pub(crate) fn send_auth(&mut self, now: Instant, pid: ParticipantId) {
        let me = self.cfg.participant;
        let hdr = self.header();
        let Some(sec) = self.cfg.security.clone() else {
            return;
        };
        let Some(rp) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        let addr = rp.addr;
        let Some(a) = rp.auth.as_mut() else { return };
        let response = a.theirs.map(|c| sec.answer(me, pid, &c));
        a.answered = a.theirs;
        a.sent = Some(now);
        let m = tether_wire::AuthRepr {
            to: pid,
            challenge: a.mine,
            response,
            verified_you: a.verified,
            you_verified_me: a.verified_us,
            credential: sec.credential_bytes(),
        };
        let mut dg = Vec::with_capacity(200 + m.credential.len());
        if DatagramBuilder::new(&mut dg, hdr)
            .push(&Submessage::Auth(m))
            .is_ok()
        {
            self.push_transmit(addr, Bytes::from(dg));
        }
    }

    pub(crate) fn on_auth(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        m: tether_wire::AuthRepr<'_>,
    ) {
        let me = self.cfg.participant;
        let Some(sec) = self.cfg.security.clone() else {
            return; // security off: nothing to prove
        };
        if m.to != me {
            self.stats.auth_failed += 1;
            return;
        }
        let Some(rp) = self.peers.remotes.get_mut(&pid) else {
            return;
        };
        let Some(a) = rp.auth.as_mut() else { return };
        let cred = match sec.check(m.credential, now) {
            Ok(c) => c,
            Err(e) => {
                self.stats.auth_failed += 1;
                if !a.reported {
                    a.reported = true;
                    self.events.push_back(Event::AuthenticationFailed {
                        participant: pid,
                        reason: AuthFailure::CredentialRefused(e),
                    });
                }
                return;
            }
        };
        if a.credential
            .as_ref()
            .is_some_and(|c| c.sign_public != cred.sign_public)
        {
            // Another identity under the same participant id: start over.
            a.verified = false;
            a.verified_us = false;
        }
        a.credential = Some(cred);
        let new_challenge = a.theirs != Some(m.challenge);
        a.theirs = Some(m.challenge);
        a.verified_us = m.verified_you;
        let mut newly = false;
        if let (Some(r), false) = (m.response, a.verified) {
            let signed = tether_wire::auth_signed_bytes(&a.mine, pid, me);
            let key = a
                .credential
                .as_ref()
                .map(|c| c.sign_public)
                .unwrap_or_default();
            if tether_crypto::Identity::verify(&key, &signed, &r) {
                a.verified = true;
                newly = true;
            } else {
                self.stats.auth_failed += 1;
                if !a.reported {
                    a.reported = true;
                    self.events.push_back(Event::AuthenticationFailed {
                        participant: pid,
                        reason: AuthFailure::BadAnswer,
                    });
                }
            }
        }
        // Answer whatever the sender still lacks: our answer to a new challenge, our
        // verdict, or word that we verified it (that word can be lost like any datagram).
        let verified = self
            .peers
            .remotes
            .get(&pid)
            .and_then(|p| p.auth.as_ref())
            .is_some_and(|a| a.verified);
        if new_challenge || newly || !m.verified_you || (verified && !m.you_verified_me) {
            self.send_auth(now, pid);
        }
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
            // Match what it announced before it proved itself.
            let eps: Vec<(EntityId, RemoteEndpoint)> = self
                .peers
                .remotes
                .get(&pid)
                .map(|p| p.endpoints.iter().map(|(k, v)| (*k, v.clone())).collect())
                .unwrap_or_default();
            for (eid, e) in eps {
                let g = Guid {
                    participant: pid,
                    entity: eid,
                };
                let (locals, side): (Vec<EntityId>, Side) = match e.kind {
                    EndpointKind::Reader => {
                        (self.writers.keys().copied().collect(), Side::LocalWriter)
                    }
                    EndpointKind::Writer => {
                        (self.readers.keys().copied().collect(), Side::LocalReader)
                    }
                };
                for l in locals {
                    self.try_match(now, l, g, &e.info, side);
                }
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
                self.remove_remote_endpoint(pid, e);
            }
            if let Some(a) = self
                .peers
                .remotes
                .get_mut(&pid)
                .and_then(|p| p.auth.as_mut())
            {
                a.verified = false;
                a.credential = None;
                // What it sends under that credential from now on is refused silently.
                a.reported = true;
            }
            self.events.push_back(Event::AuthenticationFailed {
                participant: pid,
                reason: reason.clone(),
            });
        }
        // Rare and urgent: the new epochs go out now.
        self.keystore.rekey_wanted = false;
        self.rekey_due_writers();
    }

    /// Peers that have not finished authenticating get our AUTH again (lost datagrams).
    pub(crate) fn resend_auth(&mut self, now: Instant) {
        if self.cfg.security.is_none() {
            return;
        }
        let period = self.peers.announce_step;
        let due: Vec<ParticipantId> = self
            .peers
            .remotes
            .iter()
            .filter(|(_, p)| p.auth.as_ref().is_some_and(|a| a.resend_due(now, period)))
            .map(|(id, _)| *id)
            .collect();
        for pid in due {
            self.send_auth(now, pid);
        }
    }
}
