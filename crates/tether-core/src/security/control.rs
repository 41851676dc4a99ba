//! The authenticated control plane of a secure realm (`docs/wire.md#auth_tag`).
//!
//! Every datagram a participant in a secure realm sends ends with an AUTH_TAG: a GMAC, under
//! the participant's control key, over every byte before it. Verified peers receive that key
//! wrapped in AUTH (like sender keys), so one tag serves every receiver of a datagram:
//! multicast, or the same datagram sent to each reader by unicast (tagged once). A peer that
//! verified the sender acts on nothing in a datagram of it whose tag does not verify, or
//! whose counter it has seen (a window of 1,024 per sender and epoch): forged BYEs, GAPs,
//! HEARTBEATs, ACKNACKs, fragments, keys and addresses are dropped and counted before any
//! other module sees them. From a peer not yet verified only PARTICIPANT, AUTH and the
//! PROBE/PROBE_ACK of address validation are taken.

use std::collections::HashSet;
use std::net::SocketAddr;

use tether_crypto::{ControlKey, ControlWindow};
use tether_wire::{AUTH_TAG_LEN, AuthTagRepr, ParticipantId, Submessage};

use crate::event::{AuthFailure, Event};
use crate::participant::Participant;
use crate::transmit::{Head, Tail, Transmit};

/// Datagrams tagged under one control key before the next epoch (GCM with 96-bit nonces
/// made of epoch and counter allows far more; a new epoch also follows any member's
/// revocation or expiry, since it held the key).
pub(crate) const CONTROL_KEY_LIMIT: u64 = 1 << 40;

/// This participant's side: its control key, the counter, and the last datagram tagged.
pub(crate) struct ControlTx {
    pub(crate) key: ControlKey,
    counter: u64,
    last: Option<LastTagged>,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for ControlTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ControlTx(epoch {}, {})", self.key.epoch(), self.counter)
    }
}

/// The last datagram tagged: the same bytes to another destination take the same tag (a
/// unicast fan-out costs one MAC), never to the same destination twice (its receiver would
/// take the second for a replay).
struct LastTagged {
    /// The participant it was tagged for (0: any; only those are shared).
    to: u64,
    head: Head,
    /// Kept, so its address cannot be another payload's while it is compared.
    body: bytes::Bytes,
    tail: Tail,
    dests: Dests,
}

/// The destinations a tag went to: a few, searched in a list (most datagrams go to one or
/// a handful), and a hash set once there are many (a unicast fan-out to 100 readers).
#[derive(Default)]
struct Dests {
    few: Vec<SocketAddr>,
    many: HashSet<SocketAddr>,
}

impl Dests {
    const FEW: usize = 16;

    /// Adds `a`; false if it was there.
    fn insert(&mut self, a: SocketAddr) -> bool {
        if self.few.contains(&a) || self.many.contains(&a) {
            return false;
        }
        if self.few.len() < Self::FEW {
            self.few.push(a);
        } else {
            self.many.insert(a);
        }
        true
    }

    fn clear(&mut self) {
        self.few.clear();
        self.many.clear();
    }
}

/// A peer's control keys as we hold them: at most two epochs, newest last.
#[derive(Debug, Default)]
pub(crate) struct ControlRx {
    keys: Vec<(ControlKey, ControlWindow)>,
}

impl ControlRx {
    /// The newest epoch held (0: none).
    pub(crate) fn epoch(&self) -> u32 {
        self.keys.last().map_or(0, |(k, _)| k.epoch())
    }

    /// Takes key `k` if it is newer than every key held; keeps the one before it too (for
    /// datagrams still on their way), not older ones.
    pub(crate) fn install(&mut self, k: ControlKey) -> bool {
        if k.epoch() <= self.epoch() {
            return false;
        }
        self.keys.push((k, ControlWindow::new()));
        if self.keys.len() > 2 {
            self.keys.remove(0);
        }
        true
    }

    /// Forgets every key (the peer is no longer verified).
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
    }
}

/// What the gate found a datagram to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Security off: everything is taken as it came.
    Plain,
    /// Its sender is verified and its tag verifies: act on all of it.
    Authenticated,
    /// Its sender is verified and the SEALED_BATCH it ends with opened: act on that and the
    /// heartbeats of its writer, `.0`, and nothing else (`docs/wire.md#sealed_batch`).
    Sealed(tether_wire::EntityId),
    /// Its sender is not (yet) verified: only PARTICIPANT, AUTH and REFUSAL are taken.
    Unverified,
}

/// The gate's verdict on a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Act on it, as the origin allows.
    Act(Origin),
    /// Drop it (counted).
    Drop,
    /// It ends with a SEALED_BATCH of writer `.0`, which we read, under epoch `.1`, whose
    /// key we do not hold yet: keep it until the key comes (`docs/wire.md#key`).
    Hold(crate::event::Guid, u32),
}

/// Whether only an authenticated datagram may carry `m`: everything but PARTICIPANT, AUTH,
/// REFUSAL (signed by its sender's credential key over our challenge), the PROBE and PROBE_ACK that validate addresses before authentication
/// (`docs/wire.md#validation`), and the tag itself.
pub(crate) fn needs_authentication(m: &Submessage<'_>) -> bool {
    !matches!(
        m,
        Submessage::Participant(_)
            | Submessage::Auth(_)
            | Submessage::Refusal(_)
            | Submessage::Probe(_)
            | Submessage::ProbeAck(_)
            | Submessage::AuthTag(_)
    )
}

fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || (a.len() <= 128 && a == b)
}

impl Participant {
    /// This participant's control key (made at first use).
    pub(crate) fn control_tx(&mut self) -> &mut ControlTx {
        if self.keystore.control.is_none() {
            let key = ControlKey::generate(1, self.random.get());
            self.keystore.control = Some(ControlTx {
                key,
                counter: 0,
                last: None,
                scratch: Vec::new(),
            });
        }
        self.keystore.control.as_mut().expect("made above")
    }

    /// Moves this participant's control key to a new epoch (a member that held it was
    /// revoked or expired) and sends it at once to every verified peer.
    pub(crate) fn rekey_control(&mut self, now: std::time::Instant) {
        if self.cfg.security.is_none() {
            return;
        }
        let epoch = self.control_tx().key.epoch().wrapping_add(1).max(1);
        let key = ControlKey::generate(epoch, self.random.get());
        let tx = self.control_tx();
        tx.key = key;
        tx.counter = 0;
        tx.last = None;
        self.stats.control_rekeys += 1;
        self.events.push_back(crate::event::Event::Rekeyed {
            writer: None,
            epoch,
        });
        let verified: Vec<ParticipantId> = self
            .peers
            .remotes
            .iter()
            .filter(|(_, p)| p.auth.as_ref().is_some_and(|a| a.verified))
            .map(|(id, _)| *id)
            .collect();
        for pid in verified {
            if let Some(a) = self
                .peers
                .remotes
                .get_mut(&pid)
                .and_then(|p| p.auth.as_mut())
            {
                // Until it says it holds the new key: resent soon, then less often.
                a.resend_gap = crate::security::AUTH_RESEND_FIRST;
            }
            self.send_auth(now, pid);
        }
    }

    /// In a secure realm, gives `t` its AUTH_TAG (`docs/wire.md#auth_tag`).
    pub(crate) fn tag_transmit(&mut self, mut t: Transmit) -> Transmit {
        if self.cfg.security.is_none() || !t.tail.is_empty() {
            return t;
        }
        // A datagram that ends with a SEALED_BATCH is authenticated by its seal
        // (`docs/wire.md#sealed_batch`): no tag.
        if tether_wire::sealed_batch_ciphertext(&t.head, t.head.len() + t.body.len()).is_some() {
            return t;
        }
        if self.control_tx().counter >= CONTROL_KEY_LIMIT {
            let now = self.clock;
            self.rekey_control(now);
        }
        // Whom it is for: the one participant at its destination, unless the same bytes go
        // to several (the next transmit queued is this one to another destination: a
        // unicast fan-out) or to a group or an address no participant is known at: then any
        // receiver. A datagram for one participant, replayed to another, is refused there.
        let shared = self.transmits.front().is_some_and(|n| {
            n.dest != t.dest
                && same_bytes(&n.head, &t.head)
                && n.body.as_ptr() == t.body.as_ptr()
                && n.body.len() == t.body.len()
        });
        // Data for several readers (the same bytes to each, or to a multicast group) is
        // for any receiver; anything else names the participant at the destination, or the
        // one it is for, or nobody: a datagram to an address where we know no participant
        // (a challenge, say) must not count, relayed, at a peer that verified us.
        // (`retag` asks for any receiver with the unspecified address.)
        // A router link's group is a group too (`route`).
        let to = if shared
            || t.dest.ip().is_multicast()
            || t.dest.ip().is_unspecified()
            || crate::route::is_route_group(&t.dest)
        {
            0
        } else {
            self.peers
                .remote_at
                .get(&t.dest)
                .or_else(|| self.peers.addressees.get(&t.dest))
                .map_or(crate::discovery::TO_NOBODY, |p| p.0)
        };
        let tx = self.control_tx();
        if let Some(last) = tx.last.as_mut() {
            if last.to == 0
                && to == 0
                && same_bytes(&last.head, &t.head)
                && last.body.as_ptr() == t.body.as_ptr()
                && last.body.len() == t.body.len()
                && last.dests.insert(t.dest)
            {
                t.tail = last.tail;
                return t;
            }
        }
        tx.counter += 1;
        let counter = tx.counter;
        let (sealed_to, tag) = if t.body.is_empty() {
            tx.key.tag(counter, &t.head, to)
        } else {
            tx.scratch.clear();
            tx.scratch.extend_from_slice(&t.head);
            tx.scratch.extend_from_slice(&t.body);
            tx.key.tag(counter, &tx.scratch, to)
        };
        let tail = Tail::auth_tag(
            AuthTagRepr {
                epoch: tx.key.epoch(),
                counter,
                to: sealed_to,
                tag,
            }
            .bytes(),
        );
        // The last datagram's record is reused: no allocation per datagram.
        match tx.last.as_mut() {
            Some(last) => {
                last.to = to;
                last.head = t.head.clone();
                last.body = t.body.clone();
                last.tail = tail;
                last.dests.clear();
                last.dests.insert(t.dest);
            }
            None => {
                let mut dests = Dests::default();
                dests.insert(t.dest);
                tx.last = Some(LastTagged {
                    to,
                    head: t.head.clone(),
                    body: t.body.clone(),
                    tail,
                    dests,
                });
            }
        }
        t.tail = tail;
        self.stats.datagrams_tagged += 1;
        self.stats.bytes_sent += AUTH_TAG_LEN as u64;
        t
    }

    /// `datagram` (under this participant's header) with a fresh AUTH_TAG of this participant,
    /// in place of the one it ends with, if any: what a realm member, who holds every verified
    /// peer's control key, could forge in that peer's name. For tests and tools that model
    /// such an insider; an outsider holds no control key. Security off: `datagram` as it is.
    pub fn retag(&mut self, datagram: &[u8]) -> bytes::Bytes {
        let covered = AuthTagRepr::split(datagram).map_or(datagram, |(_, c)| c);
        let t = Transmit {
            dest: SocketAddr::from(([0, 0, 0, 0], 0)),
            head: Head::copy_from_slice(covered),
            body: bytes::Bytes::new(),
            tail: Tail::NONE,
            writer: None,
            announces: None,
        };
        self.tag_transmit(t).contiguous()
    }

    /// The gate's check of a datagram from `pid` in a secure realm: what it may do, or
    /// that it must be dropped (counted), or held until a writer's key comes.
    pub(crate) fn authenticate(
        &mut self,
        pid: ParticipantId,
        from: SocketAddr,
        datagram: &[u8],
    ) -> Gate {
        self.keystore.gate_opened = None;
        if self.cfg.security.is_none() {
            return Gate::Act(Origin::Plain);
        }
        let me = self.cfg.participant;
        let Some(a) = self
            .peers
            .remotes
            .get_mut(&pid)
            .and_then(|p| p.auth.as_mut())
            .filter(|a| a.verified)
        else {
            return Gate::Act(Origin::Unverified);
        };
        // A datagram that ends with a SEALED_BATCH authenticates itself: its seal covers
        // every byte before its tag (`docs/wire.md#sealed_batch`).
        if let Some(ct) = tether_wire::sealed_batch_ciphertext(datagram, datagram.len()) {
            return self.authenticate_sealed(
                pid,
                from,
                crate::security::gate::SealedIn::Shared(datagram),
                ct,
            );
        }
        let Some((t, covered)) = AuthTagRepr::split(datagram) else {
            self.stats.unauthenticated += 1;
            return Gate::Drop;
        };
        let mac = covered;
        if !a.control.keys.iter().any(|(k, _)| k.epoch() == t.epoch) {
            // A newer epoch: its key comes in an AUTH of this datagram, wrapped for us by the
            // peer's own key (so it authenticates itself); then the tag must verify under it.
            // Every such datagram is tried: the X25519 secret with a verified peer is kept
            // (`Identity::agree`), so a forgery costs an HKDF and an AEAD open, as any forged
            // tag does. (Tries were once spaced 100 ms apart per peer, when each cost a key
            // agreement: a forger then spent the genuine key's turns, and locked it out.)
            let kx = a.credential.as_ref().map(|c| c.kx_public);
            let wrapped = newer_control_key(covered, t.epoch);
            let Some(sec) = self.cfg.security.clone() else {
                return Gate::Drop;
            };
            let key = match (kx, wrapped) {
                (Some(kx), Some(w)) if t.epoch > a.control.epoch() => {
                    let ctx =
                        tether_crypto::control_wrap_context(&sec.ca_public, pid.0, me.0, t.epoch);
                    tether_crypto::unwrap_key(&sec.identity, &kx, &ctx, &w)
                        .and_then(|raw| ControlKey::from_bytes(t.epoch, &raw))
                }
                _ => None,
            };
            match key {
                Some(k) => {
                    a.control.install(k);
                }
                None => {
                    self.stats.unauthenticated += 1;
                    return Gate::Drop;
                }
            }
        }
        let Some(i) = a
            .control
            .keys
            .iter()
            .position(|(k, _)| k.epoch() == t.epoch)
        else {
            self.stats.unauthenticated += 1;
            return Gate::Drop;
        };
        let (key, window) = &mut a.control.keys[i];
        if !window.check(t.counter) {
            self.stats.replayed += 1;
            let seen = window.seen(t.counter);
            let now = self.clock;
            if seen
                && self.check_copy(now, pid, from)
                && self
                    .peers
                    .remotes
                    .get(&pid)
                    .and_then(|p| p.auth.as_ref())
                    .and_then(|a| a.control.keys.get(i))
                    .and_then(|(k, _)| k.open(t.counter, mac, &t.to, &t.tag))
                    .is_some_and(|to| to == 0 || to == me.0)
            {
                // A genuine copy of a datagram taken already: its address is alive.
                self.heard_copy(now, pid, from);
            }
            return Gate::Drop;
        }
        let Some(to) = key.open(t.counter, mac, &t.to, &t.tag) else {
            self.stats.unauthenticated += 1;
            return Gate::Drop;
        };
        if to != 0 && to != me.0 {
            // Genuine, but meant for another participant: replayed here by someone else.
            self.stats.misaddressed += 1;
            return Gate::Drop;
        }
        window.accept(t.counter);
        if i + 1 == a.control.keys.len() && i > 0 {
            // The newest epoch is in use: the one before it (which a departed member may
            // hold) is no longer accepted.
            a.control.keys.drain(..i);
        }
        self.stats.datagrams_authenticated += 1;
        Gate::Act(Origin::Authenticated)
    }

    /// Reports once that `pid` sent what its verified identity may not (`reason`).
    pub(crate) fn report_refusal(&mut self, pid: ParticipantId, reason: AuthFailure) {
        let Some(a) = self
            .peers
            .remotes
            .get_mut(&pid)
            .and_then(|p| p.auth.as_mut())
        else {
            return;
        };
        if !a.reported {
            a.reported = true;
            self.events.push_back(Event::AuthenticationFailed {
                participant: pid,
                reason,
            });
        }
    }
}

/// The wrapped control key of `epoch` in an AUTH among `covered`'s submessages, if any.
fn newer_control_key(covered: &[u8], epoch: u32) -> Option<Vec<u8>> {
    let d = tether_wire::Datagram::parse(covered).ok()?;
    d.submessages().find_map(|m| match m {
        Ok(Submessage::Auth(a)) => a
            .control_key
            .filter(|k| k.epoch == epoch)
            .map(|k| k.wrapped.to_vec()),
        _ => None,
    })
}
