//! Reliability: heartbeats, ACKNACKs, GAPs and NACK_FRAGs, on both sides.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tether_wire::{
    AckNackRepr, DataRepr, DatagramBuilder, EntityId, GapRepr, Header, HeartbeatRepr, NackFragRepr,
    ParticipantId, SkippedRepr, Submessage,
};

use crate::event::Shortfall;
use crate::event::{Guid, LossReason, Stats};
use crate::reader::lost::Losses;
use crate::writer::state::{FanoutKey, Writer};

use crate::discovery::{Peers, RemoteParticipant};
use crate::participant::{Config, Participant};
use crate::reader::note_delivered;
use crate::reader::state::renack_interval;
use crate::security::protect::wire_form;
use crate::transmit::{Tail, Transmit};
use crate::writer::fanout_addrs;
use crate::writer::packer::Packer;

/// A reader's final ACKNACK as it leaves, where it goes, and the SKIPPED beside it.
pub(crate) type Farewell = (SocketAddr, AckNackRepr, Option<SkippedRepr>);

/// Heartbeat periods between heartbeats that ask every reader to acknowledge (the others are
/// final: only readers that miss something answer them).
pub(crate) const ACK_EVERY_HEARTBEATS: u32 = 10;

/// How often a writer asks every reader to acknowledge, at least.
pub(crate) fn ack_interval(cfg: &Config) -> Duration {
    cfg.heartbeat_period.saturating_mul(ACK_EVERY_HEARTBEATS)
}

/// A reassembly that has received nothing for this long (or for half the repair wait, if
/// less) asks for every missing fragment of a sample its writer has announced, not only the
/// overtaken ones: the writer has finished sending it.
pub(crate) const FRAG_QUIET: Duration = Duration::from_millis(20);

/// Most NACK_FRAG windows (256 fragments each) a reader sends per sample per request: 16
/// name up to 4,096 fragments (6 MB in path-sized datagrams) and fill a fifth of one.
pub(crate) const NACKFRAG_WINDOWS: usize = 16;

/// Requests in a row after which nothing arrived before the repair wait starts doubling:
/// on a lossy link a repair, and its repeat, may well be lost (at 20 % loss three in a row
/// one time in 125), and a writer whose window waits for that repair sends nothing else.
pub(crate) const BACKOFF_AFTER: u8 = 3;

/// The longest a reader waits between requests to a writer it has heard nothing from for
/// two heartbeat periods (killed, or out of reach): until its lease runs out it is asked
/// about once a second, not once a heartbeat period. Anything it sends (a heartbeat) is
/// answered at once, so a writer that comes back loses no time.
pub(crate) const SILENT_REPAIR_WAIT: Duration = Duration::from_secs(1);

/// The shortest time a reader waits for a repair before asking again, when the round
/// trip is measured.
pub(crate) const MIN_REPAIR_WAIT: Duration = Duration::from_millis(1);

/// How long a reader waits for what it asked participant `p` for before it asks again:
/// what its path's congestion controller says an answer takes (round trip and its
/// variation), at least [`MIN_REPAIR_WAIT`]; without that measurement, [`renack_interval`]
/// from path-size probes. Never over the heartbeat period.
pub(crate) fn repair_wait(peers: &Peers, cfg: &Config, p: ParticipantId) -> Duration {
    let period = cfg.heartbeat_period.max(MIN_REPAIR_WAIT);
    let r = peers.remotes.get(&p);
    match r
        .and_then(|r| r.cc.as_ref())
        .and_then(|cc| cc.answer_within())
    {
        Some(d) => d.clamp(MIN_REPAIR_WAIT, period),
        None => renack_interval(r.and_then(|r| r.path.rtt), cfg.heartbeat_period),
    }
}

/// Records `count` from a HEARTBEAT, ACKNACK or NACK_FRAG if it is newer than the last one
/// seen (serial-number order, so the counter may wrap); false for a stale or repeated one.
pub(crate) fn newer(last: &mut Option<u32>, count: u32) -> bool {
    // Serial-number order (RFC 1982): newer iff count is 1..2^31 steps ahead of the last.
    if last.is_some_and(|c| count.wrapping_sub(c) as i32 <= 0) {
        return false;
    }
    *last = Some(count);
    true
}

/// Queues a heartbeat from `w` (its current first and last sent sequence numbers) for every
/// remote participant where it has a reliable matched reader. Participants that take data
/// from a group get it where they get the data, one datagram for the group: a heartbeat
/// sent by unicast could overtake, at the reader, a sample still queued on the group's
/// socket, and the reader would ask again for a sample it is about to receive.
pub(crate) fn heartbeat_all(
    w: &mut Writer,
    hb: HeartbeatRepr,
    hdr: Header,
    remotes: &BTreeMap<ParticipantId, Box<RemoteParticipant>>,
    key: FanoutKey,
    transmits: &mut VecDeque<Transmit>,
    stats: &mut Stats,
) {
    let hb = Submessage::Heartbeat(hb);
    let mut dg = Vec::new();
    if DatagramBuilder::new(&mut dg, hdr).push(&hb).is_err() {
        return;
    }
    let dg = Bytes::from(dg);
    let writer = w.id;
    let (_, grouped, min) = key;
    let mut send = |dest: SocketAddr, group: bool| {
        stats.heartbeats_sent += 1;
        stats.datagrams_sent += 1;
        stats.heartbeats_multicast += u64::from(group);
        stats.bytes_sent += dg.len() as u64;
        transmits.push_back(Transmit {
            dest,
            head: dg.clone().into(),
            body: Bytes::new(),
            tail: Tail::NONE,
            writer: Some(writer),
            announces: None,
        });
    };
    if w.reliable_dests.len() == w.dests.len() {
        // Every destination has a reliable reader (the usual case): the heartbeat goes
        // where the data goes, by the plan the writes keep.
        for &(dest, group) in w.fanout(key, |d| fanout_addrs(remotes, d, grouped, min)) {
            send(dest, group);
        }
    } else {
        for (dest, group) in fanout_addrs(remotes, &w.reliable_dests, grouped, min) {
            send(dest, group);
        }
    }
}

pub(crate) fn flush_gap(
    gap: &mut Option<(u64, u64)>,
    packer: &mut Packer,
    out: &mut VecDeque<Transmit>,
    stats: &mut Stats,
    writer: EntityId,
    reader: EntityId,
) {
    if let Some((start, end)) = gap.take() {
        packer.push(
            &Submessage::Gap(GapRepr {
                writer,
                reader,
                start,
                end,
            }),
            out,
            stats,
        );
        stats.gaps_sent += 1;
    }
}

/// One ACKNACK's answer to one reader: re-sent samples and GAPs, packed into datagrams.
struct Repair<'a> {
    packer: Packer,
    /// The range of sequence numbers to announce as gone, growing while they follow.
    gap: Option<(u64, u64)>,
    out: &'a mut VecDeque<Transmit>,
    stats: &'a mut Stats,
    writer: EntityId,
    reader: EntityId,
}

impl Repair<'_> {
    /// Sends the GAP being built, if any.
    fn flush_gap(&mut self) {
        flush_gap(
            &mut self.gap,
            &mut self.packer,
            self.out,
            self.stats,
            self.writer,
            self.reader,
        );
    }

    /// Re-sends sample `seq` (after the GAP before it).
    fn resend(&mut self, seq: u64, timestamp_ns: u64, payload: &[u8]) {
        self.flush_gap();
        self.packer.push(
            &Submessage::Data(DataRepr {
                writer: self.writer,
                reader: self.reader,
                seq,
                timestamp_ns,
                payload,
            }),
            self.out,
            self.stats,
        );
        self.stats.samples_retransmitted += 1;
    }

    /// The heartbeat that closes a repair, announcing `first..=last` (count from `hb_count`).
    fn heartbeat(&mut self, hb_count: &mut u32, first: u64, last: u64) {
        *hb_count = hb_count.wrapping_add(1);
        self.packer.push(
            &Submessage::Heartbeat(HeartbeatRepr {
                writer: self.writer,
                reader: self.reader,
                first,
                last,
                count: *hb_count,
                final_: false,
            }),
            self.out,
            self.stats,
        );
        self.stats.heartbeats_sent += 1;
    }

    /// Sample `seq` is no longer available: it joins a GAP.
    fn gone(&mut self, seq: u64) {
        match &mut self.gap {
            Some((_, b)) if *b == seq => *b = seq + 1,
            _ => {
                self.flush_gap();
                self.gap = Some((seq, seq + 1));
            }
        }
    }
}

impl Participant {
    /// Asks `writer`'s readers to acknowledge at once, and with every heartbeat until all
    /// have acknowledged everything: heartbeats are otherwise final (answered only by
    /// readers that miss something) but for one every ten heartbeat periods. For callers
    /// about to wait on [`Participant::all_acked`].
    pub fn request_acknowledgments(&mut self, now: Instant, writer: EntityId) {
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        if !w.info.qos.is_reliable() || !w.has_unacked() {
            return;
        }
        // The next heartbeat asks (see `Writer::asks_acks`), and goes out now.
        w.acks_wanted = true;
        if w.heartbeat_by(now) {
            self.timers_changed = true;
        }
    }

    /// When `writer`'s next periodic heartbeat is due (None: every reader has acknowledged
    /// everything, or no writer).
    pub fn heartbeat_due(&self, writer: EntityId) -> Option<Instant> {
        self.writers.get(&writer).and_then(|w| w.next_hb)
    }

    /// True when every matched reliable reader has acknowledged every sample of `writer`,
    /// and no reader whose lease ran out while it owed some may still come back (for one
    /// more of its lease: a reader whose process was stopped comes back with what it owes
    /// in its socket, and is taken back).
    pub fn all_acked(&self, writer: EntityId) -> bool {
        self.writers.get(&writer).is_none_or(|w| {
            !w.has_unacked() && !w.lapsed.iter().any(|l| l.awaited_until > self.clock)
        })
    }

    /// The highest sequence number of `writer` that every matched remote reliable reader has
    /// acknowledged together with all before it (the last written when none is matched).
    pub fn acknowledged(&self, writer: EntityId) -> u64 {
        self.writers.get(&writer).map_or(0, |w| {
            w.readers
                .values()
                .filter(|r| r.reliable && !r.local)
                .map(|r| r.acked.max(r.start).saturating_sub(1))
                .min()
                .unwrap_or(w.next_seq - 1)
        })
    }

    /// The reliable readers that have not acknowledged every sample `writer` wrote while
    /// they were matched: those matched now, and those that left first (they never will).
    /// A publisher that must not claim delivery it did not get reads this. Readers beyond
    /// the first 64 that left are summed in one entry with a zero reader id.
    pub fn unacknowledged(&self, writer: EntityId) -> Vec<Shortfall> {
        let Some(w) = self.writers.get(&writer) else {
            return Vec::new();
        };
        let mut v = w.departed.clone();
        if w.departed_more > 0 {
            v.push(Shortfall {
                reader: Guid {
                    participant: ParticipantId(0),
                    entity: EntityId(0),
                },
                name: String::from("(others)"),
                samples: w.departed_more,
                departed: true,
                inactive: false,
                why: None,
                certified_name: None,
            });
        }
        for (g, rp) in &w.readers {
            let samples = rp.unacknowledged(w.next_seq);
            if samples > 0 {
                let name = self
                    .peers
                    .remotes
                    .get(&g.participant)
                    .map_or_else(String::new, |p| p.name.clone());
                v.push(Shortfall {
                    reader: *g,
                    name,
                    samples,
                    departed: false,
                    inactive: rp.inactive,
                    why: None,
                    certified_name: self.certified_name(g.participant).map(str::to_string),
                });
            }
        }
        v
    }

    /// A reliable reader that leaves acknowledges what it holds first, so its writers learn
    /// what it received instead of counting it as lost: the final ACKNACK to each of its
    /// remote writers, with the address of that writer's participant. They go in front of
    /// the goodbye, in the same datagram ([`Participant::say_goodbye`]).
    pub(crate) fn acknowledge_on_leaving(
        &mut self,
        id: EntityId,
        r: &mut crate::reader::state::Reader,
    ) -> Vec<Farewell> {
        let me = self.cfg.participant;
        let mut acks = Vec::new();
        for (g, wp) in r.writers.iter_mut() {
            // One that was never told where it starts has nothing to acknowledge.
            if g.participant == me || !wp.reliable || wp.expected.is_none() {
                continue;
            }
            let Some(addr) = self.peers.remotes.get(&g.participant).map(|p| p.addr) else {
                continue;
            };
            let an = wp.acknack(id, g.entity, None, &mut Vec::new());
            acks.push((addr, an, wp.skipped_beside(&an)));
        }
        acks
    }

    /// Sends `bye` (an ENDPOINT_BYE or PARTICIPANT_BYE) to every known participant, each
    /// copy after the final ACKNACKs of `acks` addressed to that participant, in the same
    /// datagram as far as they fit (the goodbye last). A path that reorders datagrams
    /// (Wi-Fi retries, several queues) could otherwise deliver the goodbye first: the writer
    /// would drop the reader, ignore the ACKNACK that follows, and count every sample the
    /// reader received but had not yet acknowledged as owed by a reader that left.
    pub(crate) fn say_goodbye(&mut self, bye: &Submessage<'_>, acks: &[Farewell]) {
        let hdr = self.header();
        for dest in self.known_destinations() {
            let mut p = Packer::new(dest, hdr, self.datagram_size(dest));
            for (_, an, sk) in acks.iter().filter(|(a, _, _)| *a == dest) {
                match sk {
                    Some(x) => p.push_together(
                        &[Submessage::AckNack(*an), Submessage::Skipped(*x)],
                        &mut self.transmits,
                        &mut self.stats,
                    ),
                    None => p.push(
                        &Submessage::AckNack(*an),
                        &mut self.transmits,
                        &mut self.stats,
                    ),
                }
                self.stats.acknacks_sent += 1;
            }
            p.push(bye, &mut self.transmits, &mut self.stats);
            p.finish(&mut self.transmits, &mut self.stats);
        }
    }

    /// A SKIPPED: what reader `x.reader` of participant `pid` skipped of our writer, below
    /// the base of its ACKNACK numbered `x.count`, taken only if that is the last ACKNACK
    /// of it we took (a SKIPPED of a stale, or not yet seen, ACKNACK says nothing).
    pub(crate) fn on_skipped(&mut self, pid: ParticipantId, x: SkippedRepr) {
        let rg = Guid {
            participant: pid,
            entity: x.reader,
        };
        let Some(rp) = self
            .writers
            .get_mut(&x.writer)
            .and_then(|w| w.readers.get_mut(&rg))
        else {
            self.stats.unmatched_reader += 1;
            return;
        };
        let taken = rp.reliable
            && !rp.local
            && rp.last_count == Some(x.count)
            && rp.heard_skips(crate::writer::state::Skips {
                skipped: x.skipped,
                abandoned: x.abandoned,
            });
        if !taken {
            self.stats.skipped_ignored += 1;
        }
    }

    pub(crate) fn on_nack_frag(&mut self, now: Instant, pid: ParticipantId, nf: NackFragRepr) {
        let rg = Guid {
            participant: pid,
            entity: nf.reader,
        };
        let Some(w) = self.writers.get_mut(&nf.writer) else {
            self.stats.unmatched_reader += 1;
            return;
        };
        let Some(rp) = w.readers.get_mut(&rg) else {
            self.stats.unmatched_reader += 1;
            return;
        };
        if rp.local || !rp.reliable {
            return;
        }
        if !newer(&mut rp.last_nackfrag, nf.count) {
            return;
        }
        // (Fragment repairs are not suppressed per sample on a direct path: successive
        // requests name other fragments. What bounds them on a controlled path is its
        // queue, which holds at most a window's worth of repairs. Through a router, where a
        // repair is lost only where it is dropped, a sample re-sent is not re-sent again
        // before the copy queued could have left and been answered.)
        if let Some(addr) = self.peers.remotes.get(&pid).map(|p| p.addr) {
            if crate::route::is_routed(&addr) {
                let wait = crate::congestion::resend_wait(
                    &self.peers,
                    pid,
                    now,
                    self.cfg.heartbeat_period,
                    crate::route::backlog_of(&self.route_backlog, addr),
                );
                let queued = crate::route::backlog_of(&self.route_backlog, addr);
                if !rp.may_resend(nf.seq, now, wait, queued) {
                    self.stats.resends_suppressed += 1;
                    return;
                }
            }
        }
        let start = rp.start;
        if let Some(e) = w.heard_from(rg, now) {
            self.events.push_back(e);
        }
        let Some(addr) = self.peers.remotes.get(&pid).map(|p| p.addr) else {
            return;
        };
        let found = w.find(nf.seq).cloned().and_then(|c| {
            Some((
                c.timestamp_ns,
                wire_form(&self.cfg, &mut self.stats, nf.writer, w.key.as_deref(), &c)?,
            ))
        });
        match found {
            Some((ts, payload)) => {
                // The repair ends with a heartbeat to the reader, on its last fragment: it
                // learns the sample is all sent (if the original last fragment, which carried
                // one, was lost) and asks for what is still missing.
                w.hb_count = w.hb_count.wrapping_add(1);
                let hb = HeartbeatRepr {
                    writer: nf.writer,
                    reader: nf.reader,
                    first: w.first_available().max(start).min(w.last_sent() + 1),
                    last: w.last_sent(),
                    count: w.hb_count,
                    final_: true,
                };
                let frags: Vec<u32> = nf.missing().collect();
                self.stats.fragments_retransmitted += frags.len() as u64;
                self.stats.heartbeats_sent += 1;
                let before = self.stats.bytes_sent;
                self.send_sample(
                    addr,
                    nf.writer,
                    nf.reader,
                    nf.seq,
                    ts,
                    &payload,
                    Some(&frags),
                    Some(hb),
                );
                self.charge(nf.writer, self.stats.bytes_sent - before);
            }
            None => {
                let hdr = self.header();
                let mut p = Packer::for_writer(addr, hdr, self.datagram_size(addr), nf.writer);
                p.push(
                    &Submessage::Gap(GapRepr {
                        writer: nf.writer,
                        reader: nf.reader,
                        start: nf.seq,
                        end: nf.seq + 1,
                    }),
                    &mut self.transmits,
                    &mut self.stats,
                );
                p.finish(&mut self.transmits, &mut self.stats);
                self.stats.gaps_sent += 1;
            }
        }
    }

    pub(crate) fn on_heartbeat(&mut self, now: Instant, pid: ParticipantId, hb: HeartbeatRepr) {
        let g = Guid {
            participant: pid,
            entity: hb.writer,
        };
        let rs = self.addressed_readers(g, hb.reader);
        for rid in rs {
            let Some(r) = self.readers.get_mut(&rid) else {
                continue;
            };
            let Some(wp) = r.writers.get_mut(&g) else {
                continue;
            };
            wp.last_heard = now;
            if !wp.reliable {
                continue;
            }
            if !newer(&mut wp.hb_count, hb.count) {
                continue; // stale or duplicated heartbeat
            }
            wp.hb_last = wp.hb_last.max(hb.last);
            if wp.expected.is_none() {
                if hb.reader != rid {
                    // The writer has not told this reader where it starts (its heartbeat
                    // on matching was lost, or came before this reader knew the writer):
                    // ask. Nothing is delivered or skipped before it knows.
                    if !self.pending_acks.contains(&(rid, g)) {
                        self.pending_acks.push((rid, g));
                    }
                    continue;
                }
                wp.start_at(hb.first);
            }
            // The writer no longer has what precedes `first`: what this reader does not
            // hold of it is lost.
            wp.gone_before(hb.first);
            let mut losses = Losses {
                reader: rid,
                stats: &mut self.stats,
                lost: &mut r.lost,
                events: &mut self.events,
            };
            let d = wp.drain(&mut r.cache, now, self.input, g, &mut losses);
            // A final heartbeat needs no answer from a reader that has everything it
            // announces (received, or declared lost or irrelevant).
            let complete = wp.expected.is_some_and(|e| e > hb.last);
            note_delivered(r, d, now, &mut self.stats, &mut self.events);
            if hb.final_ && complete {
                self.stats.final_heartbeats_unanswered += 1;
                continue;
            }
            if !self.pending_acks.contains(&(rid, g)) {
                self.pending_acks.push((rid, g));
            }
        }
    }

    pub(crate) fn on_gap(&mut self, now: Instant, pid: ParticipantId, gap: GapRepr) {
        let g = Guid {
            participant: pid,
            entity: gap.writer,
        };
        let rs = self.addressed_readers(g, gap.reader);
        for rid in rs {
            let Some(r) = self.readers.get_mut(&rid) else {
                continue;
            };
            let Some(wp) = r.writers.get_mut(&g) else {
                continue;
            };
            if !wp.reliable {
                continue;
            }
            wp.add_gap(gap.start, gap.end, LossReason::Unavailable);
            let mut losses = Losses {
                reader: rid,
                stats: &mut self.stats,
                lost: &mut r.lost,
                events: &mut self.events,
            };
            let d = wp.drain(&mut r.cache, now, self.input, g, &mut losses);
            note_delivered(r, d, now, &mut self.stats, &mut self.events);
        }
    }

    /// An ACKNACK (`acknowledges`: everything below its base is received), or a NACK (it
    /// only requests): re-sends what it requests, and GAPs for what is gone.
    pub(crate) fn on_acknack(
        &mut self,
        now: Instant,
        pid: ParticipantId,
        an: tether_wire::AckNackRepr,
        acknowledges: bool,
    ) {
        let rg = Guid {
            participant: pid,
            entity: an.reader,
        };
        let Some(w) = self.writers.get_mut(&an.writer) else {
            self.stats.unmatched_reader += 1;
            return;
        };
        let Some(mut rp) = w.readers.get_mut(&rg) else {
            self.stats.unmatched_reader += 1;
            return;
        };
        if acknowledges && rp.lapsed.is_some() {
            // Matched again after its lease ran out: this first ACKNACK decides whether the
            // proxy kept then is taken up (rarely: one more lookup then, none otherwise).
            crate::matching::confirm_lapsed(w, rg, &an, now);
            let Some(taken) = w.readers.get_mut(&rg) else {
                return;
            };
            rp = taken;
        }
        if rp.local || !rp.reliable {
            return;
        }
        let Some(addr) = self.peers.remotes.get(&pid).map(|p| p.addr) else {
            return;
        };
        if an.start_unknown && acknowledges {
            self.tell_start(now, an.writer, rg, addr);
            return;
        }
        let hdr = Header {
            domain: self.cfg.domain,
            participant: self.cfg.participant,
        };
        if acknowledges {
            if !newer(&mut rp.last_count, an.count) {
                return;
            }
        } else {
            // A NACK rides behind its reader's ACKNACK, numbered right after it: only counts
            // up to MAX_NACKS past the last ACKNACK's are taken, and they move nothing (a
            // forged NACK numbered far ahead cannot make the reader's ACKNACKs look stale).
            let Some(c) = rp.last_count else { return };
            let d = an.count.wrapping_sub(c);
            if d == 0 || d > crate::reader::state::MAX_NACKS as u32 {
                return;
            }
        }
        let start = rp.start;
        if acknowledges {
            let base = an.base.min(w.next_seq);
            rp.acked = rp.acked.max(base);
            // Its SKIPPED comes right after, numbered as this ACKNACK: until it does (a
            // reader of an earlier version sends none), nothing says what it skipped.
            rp.skipped_heard = None;
            rp.prune_resent();
        }
        if let Some(e) = w.heard_from(rg, now) {
            self.events.push_back(e);
        }
        let before = self.stats.bytes_sent;
        let size = crate::path::datagram_size(&self.peers, &self.cfg, addr);
        let backlog = crate::route::backlog_of(&self.route_backlog, addr);
        let resend_wait = crate::congestion::resend_wait(
            &self.peers,
            pid,
            now,
            self.cfg.heartbeat_period,
            backlog,
        );
        // What the reader should never get (before it matched) or is gone becomes one GAP,
        // from its base to the first sample the writer still has for it, however far that
        // is (an inactive reader coming back, a keep-last writer far ahead); the rest of
        // what it asks for is re-sent.
        let kept = w.first_available().max(start).min(w.last_sent() + 1);
        // Through a router link, the repairs of this answer leave one after the other at
        // the link's drain rate: each is judged to arrive after those ahead of it.
        let rate = crate::route::drain_rate_of(&self.route_rate, addr);
        let mut ahead = 0u64;
        let mut r = Repair {
            packer: Packer::for_writer(addr, hdr, size, an.writer),
            gap: (an.base < kept).then_some((an.base, kept)),
            out: &mut self.transmits,
            stats: &mut self.stats,
            writer: an.writer,
            reader: an.reader,
        };
        // Samples too large for one datagram are re-sent whole (every fragment) after the
        // small ones; a partly received one is repaired by NACK_FRAG instead.
        let single = crate::writer::single_payload(size);
        let mut big: Vec<(u64, u64, Bytes)> = Vec::new();
        for seq in an.missing() {
            if seq > w.last_sent() {
                break;
            }
            if seq < kept {
                continue; // in the GAP
            }
            // Asked again before the last repair could have arrived: it is on its way.
            let Some(rp) = w.readers.get_mut(&rg) else {
                break;
            };
            let queued_ahead = rate.map_or(Duration::ZERO, |b| {
                Duration::from_secs_f64(ahead as f64 / b as f64)
            });
            if !rp.may_resend(seq, now, resend_wait + queued_ahead, backlog + queued_ahead) {
                r.stats.resends_suppressed += 1;
                continue;
            }
            let found = w.find(seq);
            ahead += found.map_or(0, |c| c.payload.len() as u64);
            match found {
                Some(c) if c.payload.len() > single => {
                    // A young sample's fragments may still be in flight: the reader then
                    // repairs it by NACK_FRAG, so only an old one is re-sent whole.
                    if now.saturating_duration_since(c.written) >= self.cfg.heartbeat_period {
                        if let Some(p) =
                            wire_form(&self.cfg, r.stats, an.writer, w.key.as_deref(), c)
                        {
                            big.push((seq, c.timestamp_ns, p));
                            r.stats.samples_retransmitted += 1;
                        }
                    }
                }
                Some(c) => {
                    if let Some(p) = wire_form(&self.cfg, r.stats, an.writer, w.key.as_deref(), c) {
                        r.resend(seq, c.timestamp_ns, &p);
                    }
                }
                None => r.gone(seq),
            }
        }
        r.flush_gap();
        // A heartbeat closes every repair, so the reader learns the state at once (a
        // NACK's repair follows its ACKNACK's, which has one).
        if an.num_bits > 0 && acknowledges {
            let last = w.last_sent();
            r.heartbeat(&mut w.hb_count, kept, last);
        }
        r.packer.finish(r.out, r.stats);
        if let Some(e) = w.release_acked_and_unblock() {
            self.events.push_back(e);
        }
        for (seq, ts, payload) in big {
            self.send_sample(addr, an.writer, an.reader, seq, ts, &payload, None, None);
        }
        self.charge(an.writer, self.stats.bytes_sent - before);
    }

    /// Readers that asked writers for what they miss and got no answer in time ask again
    /// (their ACKNACKs and NACK_FRAGs, or the repairs, were lost).
    pub(crate) fn renack(&mut self, now: Instant) {
        if self.next_renack.is_none_or(|t| now < t) {
            return;
        }
        self.next_renack = None;
        for r in self.readers.values() {
            for (g, wp) in &r.writers {
                let Some(at) = wp.renack_at else {
                    continue;
                };
                if !wp.misses() {
                    continue;
                }
                if now >= at {
                    if !self.pending_acks.contains(&(r.id, *g)) {
                        self.pending_acks.push((r.id, *g));
                    }
                } else {
                    self.next_renack = Some(self.next_renack.map_or(at, |x| x.min(at)));
                }
            }
        }
        self.stats.renacks += self.pending_acks.len() as u64;
        self.flush_pending_acks(now);
    }

    /// Reader `rg` of `writer` does not know where it starts (it missed the heartbeat that
    /// said so, or met this writer again after losing it): tells it, and nothing else. Its
    /// ACKNACK acknowledges nothing, so its count is not taken; it is alive though.
    fn tell_start(&mut self, now: Instant, writer: EntityId, rg: Guid, addr: SocketAddr) {
        let hdr = self.header();
        let Some(w) = self.writers.get_mut(&writer) else {
            return;
        };
        if let Some(e) = w.heard_from(rg, now) {
            self.events.push_back(e);
        }
        if let Some(hb) = w.addressed_heartbeat(rg) {
            let mut p = Packer::for_writer(addr, hdr, self.datagram_size(addr), writer);
            p.push(
                &Submessage::Heartbeat(hb),
                &mut self.transmits,
                &mut self.stats,
            );
            p.finish(&mut self.transmits, &mut self.stats);
            self.stats.heartbeats_sent += 1;
        }
    }

    pub(crate) fn flush_pending_acks(&mut self, now: Instant) {
        if self.pending_acks.is_empty() {
            return;
        }
        let acks = std::mem::take(&mut self.pending_acks);
        let hdr = self.header();
        for (rid, g) in acks {
            let Some(addr) = self.peers.remotes.get(&g.participant).map(|p| p.addr) else {
                continue;
            };
            let Some(wp) = self
                .readers
                .get_mut(&rid)
                .and_then(|r| r.writers.get_mut(&g))
            else {
                continue;
            };
            // Longer while requests bring nothing (a writer gone quiet, or a heartbeat that
            // announced samples that were never written): at most the heartbeat period, or
            // SILENT_REPAIR_WAIT once the writer has sent nothing for two of them.
            let period = self.cfg.heartbeat_period.max(MIN_REPAIR_WAIT);
            let cap = if now.saturating_duration_since(wp.last_heard) > period.saturating_mul(2) {
                period.max(SILENT_REPAIR_WAIT)
            } else {
                period
            };
            let wait = repair_wait(&self.peers, &self.cfg, g.participant)
                .saturating_mul(1 << wp.backoff.saturating_sub(BACKOFF_AFTER))
                .min(cap);
            let mut more = Vec::new();
            let an = wp.acknack(rid, g.entity, Some((now, wait)), &mut more);
            let skipped = wp.skipped_beside(&an);
            // Samples in reassembly are repaired by fragment: the overtaken fragments, or all
            // missing ones once the sender has gone quiet on that sample.
            let mut nacks = Vec::new();
            let announced = wp.hb_last;
            let quiet = FRAG_QUIET.min(wait / 2);
            // One that does not know where it starts asks only that.
            let frags = if an.start_unknown {
                None
            } else {
                Some(wp.frags.iter_mut())
            };
            for (&seq, ra) in frags.into_iter().flatten() {
                // Not again before the answer to the last request could have come: the
                // round trip, and the time the fragments asked for take to arrive.
                if ra.renack_at.is_some_and(|t| now < t) {
                    continue;
                }
                // Every missing fragment once the writer has announced the sample (its
                // heartbeat rides on the last fragment) and gone quiet; before, only those
                // overtaken: a paced writer is still sending the rest.
                let all = announced >= seq && now.saturating_duration_since(ra.last) >= quiet;
                let mut asked = 0u32;
                let mut missing = ra.missing(0, all).peekable();
                for _ in 0..NACKFRAG_WINDOWS {
                    let Some(&base) = missing.peek() else {
                        break;
                    };
                    let mut bitmap = [0u32; 8];
                    let mut num_bits = 0u16;
                    while let Some(&n) = missing.peek() {
                        let i = n - base;
                        if i >= tether_wire::MAX_ACKNACK_BITS as u32 {
                            break;
                        }
                        bitmap[(i / 32) as usize] |= 1 << (i % 32);
                        num_bits = i as u16 + 1;
                        asked += 1;
                        missing.next();
                    }
                    wp.nackfrag_count = wp.nackfrag_count.wrapping_add(1);
                    nacks.push(NackFragRepr {
                        reader: rid,
                        writer: g.entity,
                        seq,
                        base,
                        num_bits,
                        bitmap,
                        count: wp.nackfrag_count,
                    });
                }
                drop(missing);
                if asked > 0 {
                    ra.renack_at = Some(now + wait + ra.transfer_time(asked));
                }
            }
            // Ask again later if something is still missing (the answer, or this request,
            // may be lost), whether or not a heartbeat comes: once the answer to the last
            // request of every missing sample could have come, or to a sample's fragments.
            wp.renack_at = wp.misses().then(|| {
                let samples = wp.asked_at.map_or(now + wait, |t| t + wait);
                wp.frags
                    .values()
                    .filter_map(|ra| ra.renack_at)
                    .fold(samples, Instant::min)
                    .max(now + MIN_REPAIR_WAIT)
            });
            if let Some(at) = wp.renack_at {
                self.next_renack = Some(self.next_renack.map_or(at, |t| t.min(at)));
            }
            let mut p = Packer::new(addr, hdr, self.datagram_size(addr));
            p.push(
                &Submessage::AckNack(an),
                &mut self.transmits,
                &mut self.stats,
            );
            if let Some(x) = skipped {
                p.push(
                    &Submessage::Skipped(x),
                    &mut self.transmits,
                    &mut self.stats,
                );
            }
            self.stats.acknacks_sent += 1;
            for n in more {
                p.push(&Submessage::Nack(n), &mut self.transmits, &mut self.stats);
                self.stats.nacks_sent += 1;
            }
            for n in nacks {
                p.push(
                    &Submessage::NackFrag(n),
                    &mut self.transmits,
                    &mut self.stats,
                );
                self.stats.nackfrags_sent += 1;
            }
            p.finish(&mut self.transmits, &mut self.stats);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::newer;

    #[test]
    fn counts_in_serial_number_order() {
        let mut last = None;
        assert!(newer(&mut last, 5));
        assert!(!newer(&mut last, 5), "repeated");
        assert!(!newer(&mut last, 4), "stale");
        assert!(newer(&mut last, 6));
        let mut last = Some(u32::MAX);
        assert!(newer(&mut last, 0), "the counter wraps");
        assert!(!newer(&mut last, u32::MAX), "older than the wrap");
    }
}
