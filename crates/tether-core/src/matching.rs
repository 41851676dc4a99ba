//! Matching: topic, type, partition and QoS compatibility, grants, and their events.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::time::Instant;

use bytes::Bytes;
use tether_wire::{DataRepr, EndpointKind, EntityId, HeartbeatRepr, ProtectionMode, Submessage};

use crate::discovery::RemoteEndpoint;
use crate::endpoint::EndpointInfo;
use crate::event::{AccessDenial, Right};
use crate::event::{Event, Guid, IncompatibleQos};
use crate::qos::{Mismatch, QosPolicy, check_compatible};
use crate::reader::state::WriterProxy;
use crate::writer::state::ReaderProxy;

use crate::participant::{Participant, after};
use crate::security::gate::own_history;
use crate::security::protect::wire_form;
use crate::writer::packer::Packer;

#[derive(Debug, Clone, Copy)]
pub(crate) enum Side {
    LocalWriter,
    LocalReader,
}

pub(crate) enum Compat {
    OutOfScope,
    Incompatible(Vec<Mismatch>),
    Match { reliable: bool },
}

/// Partitions as a report names them.
fn partitions_str(p: &[String]) -> String {
    match p {
        [] => "the default partition".into(),
        [one] => format!("partition {one:?}"),
        more => {
            let names: Vec<String> = more.iter().map(|x| format!("{x:?}")).collect();
            format!("partitions {}", names.join(", "))
        }
    }
}

/// Whether writer and reader on one topic are compatible: `Incompatible` with every
/// reason (no shared partition alone, or each policy that fails).
pub(crate) fn compatible(w: &EndpointInfo, r: &EndpointInfo) -> Compat {
    if w.topic != r.topic {
        return Compat::OutOfScope;
    }
    if !w.shares_partition(r) {
        // They do not meet; said once, so that a mistyped partition is seen.
        return Compat::Incompatible(vec![Mismatch {
            policy: QosPolicy::Partition,
            offered: partitions_str(&w.partitions),
            requested: partitions_str(&r.partitions),
        }]);
    }
    let mut ms = check_compatible(&w.qos, &r.qos);
    if !w.type_name.is_empty() && !r.type_name.is_empty() && w.type_name != r.type_name {
        ms.push(Mismatch {
            policy: QosPolicy::TypeName,
            offered: w.type_name.clone(),
            requested: r.type_name.clone(),
        });
    }
    if !ms.is_empty() {
        return Compat::Incompatible(ms);
    }
    Compat::Match {
        reliable: w.qos.is_reliable() && r.qos.is_reliable(),
    }
}

/// Who is matched with whom across participants, and what was reported once.
#[derive(Debug, Default)]
pub(crate) struct Matches {
    /// Remote writer → local readers matched with it.
    pub(crate) remote_writer_readers: BTreeMap<Guid, Vec<EntityId>>,
    pub(crate) reported: BTreeSet<(EntityId, Guid, QosPolicy)>,
    /// Pairs refused for want of a grant (reported once).
    pub(crate) denied: BTreeSet<(EntityId, Guid)>,
}

impl Participant {
    /// Whether a local endpoint may match a remote one: always with security off; with it,
    /// only if the remote participant proved its identity, said it verified ours (so it
    /// takes what we send it) or is routed and has our answer ahead of what we send
    /// ([`PeerAuth::early`](crate::security::PeerAuth::early)), and its credential grants
    /// what the match needs (publish for a remote writer, subscribe for a remote reader).
    /// Refusals on grants are reported once per pair and counted.
    pub(crate) fn permitted(
        &mut self,
        local: EntityId,
        remote: Guid,
        topic: &str,
        side: Side,
    ) -> bool {
        if self.cfg.security.is_none() {
            return true;
        }
        let Some(auth) = self
            .peers
            .remotes
            .get(&remote.participant)
            .and_then(|p| {
                let routed = crate::route::is_routed(&p.addr);
                p.auth.as_ref().filter(|a| a.early(routed) || a.mutual)
            })
            .filter(|a| a.verified)
        else {
            return false;
        };
        let Some(cred) = auth.credential.as_ref() else {
            return false;
        };
        let (ok, needs) = match side {
            Side::LocalWriter => (cred.may_subscribe(topic), Right::Subscribe),
            Side::LocalReader => (cred.may_publish(topic), Right::Publish),
        };
        if !ok {
            self.stats.access_denied += 1;
            if self.matches.denied.insert((local, remote)) {
                self.events.push_back(Event::AccessDenied {
                    local,
                    remote,
                    topic: topic.to_string(),
                    reason: AccessDenial::NoGrant {
                        name: cred.name.clone(),
                        serial: cred.serial,
                        needs,
                        topic: topic.to_string(),
                    },
                });
            }
            return false;
        }
        true
    }

    /// Local endpoint `local` against remote endpoint `remote` (announced as `rep`): they
    /// match if they are on one topic, the peer is permitted (secure realms), they share a
    /// partition, the writer protects samples as much as the reader requires, and QoS and
    /// types are compatible. Every reason they do not is reported once per pair (an
    /// [`Event::IncompatibleQos`] naming the policy), and a refused grant as
    /// [`Event::AccessDenied`].
    pub(crate) fn try_match(
        &mut self,
        now: Instant,
        local: EntityId,
        remote: Guid,
        rep: &RemoteEndpoint,
        side: Side,
    ) {
        let linfo = match side {
            Side::LocalWriter => self.writers.get(&local).map(|w| w.info.clone()),
            Side::LocalReader => self.readers.get(&local).map(|r| r.info.clone()),
        };
        let Some(linfo) = linfo else { return };
        let rinfo = &rep.info;
        // Remote endpoints are known by their wire form (topic ids in a secure realm).
        let lwire = self.wire_info(&linfo);
        if lwire.topic != rinfo.topic {
            // Another topic, or (a member reads it from the description) the same name
            // under another type, which derives another id.
            if let Some(d) = rep
                .described
                .as_ref()
                .filter(|d| d.topic == linfo.topic && d.type_name != linfo.type_name)
            {
                if self.permitted(local, remote, &linfo.topic, side) {
                    let (offered, requested) = match side {
                        Side::LocalWriter => (linfo.type_name.clone(), d.type_name.clone()),
                        Side::LocalReader => (d.type_name.clone(), linfo.type_name.clone()),
                    };
                    let none = |t: String| if t.is_empty() { "(none)".into() } else { t };
                    let m = Mismatch {
                        policy: QosPolicy::TypeName,
                        offered: none(offered),
                        requested: none(requested),
                    };
                    self.report_mismatches(&linfo.topic, local, remote, side, vec![m]);
                }
            }
            return;
        }
        if !self.permitted(local, remote, &linfo.topic, side) {
            return;
        }
        let (winfo, rinfo_) = match side {
            Side::LocalWriter => (&lwire, rinfo),
            Side::LocalReader => (rinfo, &lwire),
        };
        let mut compat = compatible(winfo, rinfo_);
        //= docs/wire.md#endpoint
        //# A writer and a reader match only if the writer gives every protection the
        //# reader requires
        if let Some(m) = self.protection_mismatch(&linfo.topic, rep.protection, side) {
            match &mut compat {
                Compat::Match { .. } => compat = Compat::Incompatible(vec![m]),
                Compat::Incompatible(ms) if ms[0].policy != QosPolicy::Partition => ms.push(m),
                _ => {}
            }
        }
        match compat {
            Compat::OutOfScope => {}
            Compat::Incompatible(ms) => {
                self.report_mismatches(&linfo.topic, local, remote, side, ms);
            }
            Compat::Match { reliable } => match side {
                Side::LocalWriter => self.match_writer_reader(now, local, remote, rinfo, reliable),
                Side::LocalReader => {
                    let Some(r) = self.readers.get_mut(&local) else {
                        return;
                    };
                    if r.writers.contains_key(&remote) {
                        return;
                    }
                    let mut wp =
                        WriterProxy::new(reliable, rinfo.qos.liveliness_lease(), now, false);
                    let owner = self
                        .peers
                        .remotes
                        .get(&remote.participant)
                        .and_then(|p| p.auth.as_ref())
                        .and_then(|a| a.credential.as_ref())
                        .map(|c| c.serial);
                    // Met again after losing it: where this reader stood counts, not where
                    // the writer now starts it (what was written meanwhile is lost).
                    match r.recall(remote, &mut wp, owner) {
                        Ok(Some(next)) => {
                            wp.resume = Some(next);
                            if !reliable {
                                wp.last_delivered = next.saturating_sub(1);
                            }
                        }
                        Ok(None) => {}
                        // Another credential under the same id: the one it remembers is
                        // gone for good.
                        Err(mut old) => crate::reader::lost::settle(
                            r,
                            &mut old,
                            now,
                            self.input,
                            &mut self.stats,
                            &mut self.events,
                        ),
                    }
                    r.writers.insert(remote, wp);
                    if r.deadline_at.is_none() {
                        if let Some(d) = r.info.qos.deadline_period() {
                            r.deadline_at = Some(after(now, d));
                        }
                    }
                    self.matches
                        .remote_writer_readers
                        .entry(remote)
                        .or_default()
                        .push(local);
                    self.events.push_back(Event::Matched {
                        local,
                        remote,
                        topic: linfo.topic.clone(),
                    });
                }
            },
        }
    }

    /// Why a remote endpoint announcing `remote` cannot match our endpoint on `topic` for
    /// protection (secure realms): the writer must give every protection the reader
    /// requires, or the reader refuses every sample (`under_protected`) and the writer
    /// repairs them forever. A mode not announced (security off, an older peer) is not
    /// judged.
    fn protection_mismatch(
        &self,
        topic: &str,
        remote: ProtectionMode,
        side: Side,
    ) -> Option<Mismatch> {
        let sec = self.cfg.security.as_deref()?;
        let theirs = remote.bits()?;
        let mine = sec.protection_for(topic);
        let mine = (mine.encrypt, mine.sign);
        let (w, r) = match side {
            Side::LocalWriter => (mine, theirs),
            Side::LocalReader => (theirs, mine),
        };
        let covers = (w.0 || !r.0) && (w.1 || !r.1);
        (!covers).then(|| Mismatch {
            policy: QosPolicy::Protection,
            offered: ProtectionMode::from_bits(w.0, w.1).as_str().into(),
            requested: ProtectionMode::from_bits(r.0, r.1).as_str().into(),
        })
    }

    /// Reports each of `ms` once for the pair of `local` and `remote`.
    fn report_mismatches(
        &mut self,
        topic: &str,
        local: EntityId,
        remote: Guid,
        side: Side,
        ms: Vec<Mismatch>,
    ) {
        let me = self.cfg.participant;
        for m in ms {
            if self.matches.reported.insert((local, remote, m.policy)) {
                self.events
                    .push_back(Event::IncompatibleQos(IncompatibleQos {
                        topic: topic.to_string(),
                        local: Guid {
                            participant: me,
                            entity: local,
                        },
                        local_kind: match side {
                            Side::LocalWriter => EndpointKind::Writer,
                            Side::LocalReader => EndpointKind::Reader,
                        },
                        remote,
                        policy: m.policy,
                        offered: m.offered,
                        requested: m.requested,
                    }));
            }
        }
    }

    /// A local writer meets a remote reader.
    pub(crate) fn match_writer_reader(
        &mut self,
        now: Instant,
        writer: EntityId,
        reader: Guid,
        rinfo: &EndpointInfo,
        reliable: bool,
    ) {
        let Some(remote) = self.peers.remotes.get(&reader.participant) else {
            return;
        };
        let addr = remote.addr;
        let owner = remote
            .auth
            .as_ref()
            .and_then(|a| a.credential.as_ref())
            .map(|c| c.serial);
        let hdr = self.header();
        let max_dg = self.datagram_size(addr);
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        if w.readers.contains_key(&reader) {
            return;
        }

        let transient = rinfo.qos.durability_kind() == tether_wire::Durability::TransientLocal;
        let start = if transient {
            w.first_available()
        } else if w.asyncw.is_some() {
            // Samples still waiting for the sender go to the new reader too.
            w.last_sent() + 1
        } else {
            w.next_seq
        };
        let mut rp = ReaderProxy::new(reliable, start, false, now);
        // A reader whose lease ran out while it owed acknowledgements, met again (it was
        // out of reach, or its process stopped): whether it goes on where it stood or starts
        // here is decided at its first ACKNACK (`confirm_lapsed`), so it is not told where
        // it starts yet: a heartbeat to all its writer's readers makes it ask.
        rp.lapsed = pending_lapsed(w, reader, owner, reliable);
        let pending = rp.lapsed.is_some();
        w.readers.insert(reader, rp);
        w.rebuild_dests();
        let secure = w.key.is_some();
        let single = crate::writer::single_payload(max_dg);
        let mut big: Vec<(u64, u64, Bytes)> = Vec::new();
        let mut p = Packer::for_writer(addr, hdr, max_dg, writer);
        if transient && !pending {
            for c in w.history.iter() {
                let Some(payload) =
                    wire_form(&self.cfg, &mut self.stats, writer, w.key.as_deref(), c)
                else {
                    continue;
                };
                if payload.len() > single {
                    big.push((c.seq, c.timestamp_ns, payload));
                    continue;
                }
                p.push(
                    &Submessage::Data(DataRepr {
                        writer,
                        reader: reader.entity,
                        seq: c.seq,
                        timestamp_ns: c.timestamp_ns,
                        payload: &payload,
                    }),
                    &mut self.transmits,
                    &mut self.stats,
                );
            }
        }
        if reliable {
            w.hb_count = w.hb_count.wrapping_add(1);
            let (to, first) = if pending {
                (EntityId::ALL, w.first_available())
            } else {
                (reader.entity, start)
            };
            p.push(
                &Submessage::Heartbeat(HeartbeatRepr {
                    writer,
                    reader: to,
                    first,
                    // Nothing before its start is for it (a batch may hold what precedes).
                    last: w.last_sent().max(first - 1),
                    count: w.hb_count,
                    final_: false,
                }),
                &mut self.transmits,
                &mut self.stats,
            );
            self.stats.heartbeats_sent += 1;
            w.heartbeat_by(after(now, self.cfg.heartbeat_period));
        }
        let topic = w.info.topic.clone();
        if secure {
            // The key before anything sealed under it.
            self.send_key(writer, reader);
        }
        p.finish(&mut self.transmits, &mut self.stats);
        self.events.push_back(Event::Matched {
            local: writer,
            remote: reader,
            topic,
        });
        for (seq, ts, payload) in big {
            self.send_sample(addr, writer, reader.entity, seq, ts, &payload, None, None);
        }
    }

    /// A local writer meets a local reader: samples go straight into the reader's cache.
    pub(crate) fn try_match_local(&mut self, now: Instant, writer: EntityId, reader: EntityId) {
        let me = self.cfg.participant;
        let (Some(w), Some(r)) = (self.writers.get(&writer), self.readers.get(&reader)) else {
            return;
        };
        let wg = Guid {
            participant: me,
            entity: writer,
        };
        let rg = Guid {
            participant: me,
            entity: reader,
        };
        match compatible(&w.info, &r.info) {
            Compat::OutOfScope => {}
            Compat::Incompatible(ms) => {
                let topic = w.info.topic.clone();
                for m in ms {
                    for (local, kind, remote) in [
                        (writer, EndpointKind::Writer, rg),
                        (reader, EndpointKind::Reader, wg),
                    ] {
                        if self.matches.reported.insert((local, remote, m.policy)) {
                            self.events
                                .push_back(Event::IncompatibleQos(IncompatibleQos {
                                    topic: topic.clone(),
                                    local: Guid {
                                        participant: me,
                                        entity: local,
                                    },
                                    local_kind: kind,
                                    remote,
                                    policy: m.policy,
                                    offered: m.offered.clone(),
                                    requested: m.requested.clone(),
                                }));
                        }
                    }
                }
            }
            Compat::Match { reliable } => {
                let transient =
                    r.info.qos.durability_kind() == tether_wire::Durability::TransientLocal;
                let lease = w.info.qos.liveliness_lease();
                let topic = w.info.topic.clone();
                let Some(w) = self.writers.get_mut(&writer) else {
                    return;
                };
                let start = if transient {
                    w.first_available()
                } else {
                    w.next_seq
                };
                w.readers
                    .insert(rg, ReaderProxy::new(reliable, start, true, now));
                w.rebuild_dests();
                let backlog = if transient {
                    own_history(me, w)
                } else {
                    Vec::new()
                };
                let Some(r) = self.readers.get_mut(&reader) else {
                    return;
                };
                let mut wp = WriterProxy::new(reliable, lease, now, true);
                wp.expected = Some(start);
                r.writers.insert(wg, wp);
                for (local, remote) in [(writer, rg), (reader, wg)] {
                    self.events.push_back(Event::Matched {
                        local,
                        remote,
                        topic: topic.clone(),
                    });
                }
                for s in backlog {
                    self.on_data(now, reader, s);
                }
            }
        }
    }
}

/// The proxy of `reader` that writer `w` kept when its lease ran out, if it was the same
/// member's (`owner`), reliable, and had acknowledged something (a reader whose ACKNACK
/// numbering goes on from it can be told from one that starts again): taken out of the
/// list, to be taken up at the reader's first ACKNACK. Another member's record stays for
/// its own reader.
fn pending_lapsed(
    w: &mut crate::writer::state::Writer,
    reader: Guid,
    owner: Option<u64>,
    reliable: bool,
) -> Option<Box<crate::writer::state::Lapsed>> {
    let i = w.lapsed.iter().position(|l| {
        l.reader == reader && l.owner == owner && l.proxy.reliable && l.proxy.last_count.is_some()
    })?;
    let l = w.lapsed.swap_remove(i);
    reliable.then(|| Box::new(l))
}

/// The first ACKNACK `an` of reader `rg` of writer `w`, matched again after its lease ran
/// out: if it says the reader stood at least where the writer last knew it to stand (its
/// `base`, or where it stood when it does not know its start yet: a reader that forgot the
/// writer, its memory of departed writers being bounded, says 1) and its numbering goes on
/// from the last the writer took, it remembers where it stood, and the proxy kept is taken
/// up at `now` with the count of it as a reader that left withdrawn; from here its
/// acknowledgements settle that count. Otherwise it stays a new reader, and the count
/// stands.
pub(crate) fn confirm_lapsed(
    w: &mut crate::writer::state::Writer,
    rg: Guid,
    an: &tether_wire::AckNackRepr,
    now: Instant,
) {
    let first = w.first_available();
    let keep_all = w.info.qos.history() == crate::qos::History::KeepAll;
    let Some(l) = w.readers.get_mut(&rg).and_then(|rp| rp.lapsed.take()) else {
        return;
    };
    let stood = l.proxy.acked.max(l.proxy.start);
    if an.base <= 1 || an.base < stood {
        return;
    }
    let mut last = l.proxy.last_count;
    if !crate::reliability::newer(&mut last, an.count) {
        return;
    }
    let Some(j) = w.departed.iter().rposition(|s| {
        s.departed
            && s.reader == rg
            && s.why == Some(crate::event::Departure::LeaseExpired)
            && s.samples == l.samples
    }) else {
        return;
    };
    w.departed.remove(j);
    // What was written while it was gone is its, not nobody's.
    w.unheard = w.unheard.min(l.unheard);
    w.readers.insert(rg, l.proxy.resumed(first, keep_all, now));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::state::{Lapsed, Writer};
    use tether_wire::ParticipantId;

    fn acknack(count: u32, base: u64, start_unknown: bool) -> tether_wire::AckNackRepr {
        tether_wire::AckNackRepr {
            reader: EntityId(2),
            writer: EntityId(1),
            base,
            num_bits: 0,
            bitmap: [0; 8],
            count,
            start_unknown,
        }
    }

    fn lapsed_writer(owner: Option<u64>) -> (Writer, Guid) {
        let info = EndpointInfo {
            topic: "/t".into(),
            type_name: "t".into(),
            partitions: vec![],
            qos: crate::Qos::new().keep_all(),
        };
        let mut w = Writer::new(EntityId(1), info);
        w.next_seq = 21;
        let reader = Guid {
            participant: ParticipantId(7),
            entity: EntityId(2),
        };
        let mut proxy = ReaderProxy::new(true, 1, false, Instant::now());
        proxy.acked = 6;
        proxy.last_count = Some(40);
        // An entry of an earlier reader under the same id, which left for good.
        w.departed.push(crate::event::Shortfall {
            reader,
            name: String::new(),
            samples: 10,
            departed: true,
            inactive: false,
            why: Some(crate::event::Departure::Left),
            certified_name: None,
        });
        w.departed.push(crate::event::Shortfall {
            reader,
            name: String::new(),
            samples: 15,
            departed: true,
            inactive: false,
            why: Some(crate::event::Departure::LeaseExpired),
            certified_name: None,
        });
        w.lapsed.push(Lapsed {
            reader,
            owner,
            proxy,
            unheard: 0,
            samples: 15,
            awaited_until: Instant::now(),
        });
        (w, reader)
    }

    /// Matched again (`pending_lapsed` at the match, then the reader's first ACKNACK):
    /// only the member that held the proxy gets it back, another member's record stays for
    /// it; a reader whose numbering goes on takes the proxy up, the count of it as a
    /// reader that left (the right one) withdrawn and what the writer let go of counted as
    /// let go of for it; a reader numbered anew forgot the writer, and the count stands.
    #[test]
    fn a_lapsed_proxy_is_taken_up_only_by_a_reader_that_remembers() {
        let now = Instant::now();
        let (mut w, reader) = lapsed_writer(Some(3));
        assert!(pending_lapsed(&mut w, reader, Some(4), true).is_none());
        assert_eq!(
            w.lapsed.len(),
            1,
            "another member's match leaves the record"
        );
        assert!(pending_lapsed(&mut w, reader, Some(3), false).is_none());
        let (mut w, reader) = lapsed_writer(Some(3));
        let l = pending_lapsed(&mut w, reader, Some(3), true);
        let mut rp = ReaderProxy::new(true, 21, false, now);
        rp.lapsed = l;
        w.readers.insert(reader, rp);
        confirm_lapsed(&mut w, reader, &acknack(41, 6, true), now);
        let rp = &w.readers[&reader];
        assert!(rp.lapsed.is_none());
        assert_eq!(w.departed.len(), 1);
        assert_eq!(
            w.departed[0].samples, 10,
            "the entry of the one that left stays"
        );
        // Nothing in the history: all 15 it had not settled were let go of.
        assert_eq!((rp.start, rp.released, rp.released_below), (1, 15, 21));
        assert_eq!(rp.unacknowledged(21), 15);
        // Numbered on, but not knowing where it stood (it forgot the writer, and its first
        // ACKNACKs were lost), or standing before where the writer knew it: not taken back.
        for an in [acknack(41, 1, true), acknack(41, 5, false)] {
            let (mut w, reader) = lapsed_writer(Some(3));
            let l = pending_lapsed(&mut w, reader, Some(3), true);
            let mut rp = ReaderProxy::new(true, 21, false, now);
            rp.lapsed = l;
            w.readers.insert(reader, rp);
            confirm_lapsed(&mut w, reader, &an, now);
            assert_eq!(w.departed.len(), 2, "{an:?}");
            assert_eq!(w.readers[&reader].start, 21);
        }
        // Numbered anew: a new reader, and both counts stand.
        let (mut w, reader) = lapsed_writer(Some(3));
        let l = pending_lapsed(&mut w, reader, Some(3), true);
        let mut rp = ReaderProxy::new(true, 21, false, now);
        rp.lapsed = l;
        w.readers.insert(reader, rp);
        confirm_lapsed(&mut w, reader, &acknack(1, 1, true), now);
        assert_eq!(w.departed.len(), 2);
        assert_eq!(w.readers[&reader].start, 21);
        assert!(w.readers[&reader].lapsed.is_none());
    }
}
