//! Attacks on what a participant spends before (or without) authentication: memory for
//! reassembly, the participant and endpoint tables, and work sized by sequence numbers
//! from the wire (issue 17, "bounded cost before authentication"). In the simulator, in a
//! plain realm, where anyone can forge a datagram in a known participant's name: what these
//! tests bound holds whoever sent it.
//!
//! Each test asserts the property (memory under its cap, delivery continuing and complete),
//! never a log line or a duration of real time.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tether_core::{Config, EndpointInfo, EntityId, Event, Guid, Limit, ParticipantId, Qos};
use tether_testkit::{Link, Sim};
use tether_wire::{
    AckNackRepr, DataFragRepr, DatagramBuilder, GapRepr, Header, HeartbeatRepr, NackFragRepr,
    Submessage,
};

fn info(topic: &str, qos: Qos) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "t".into(),
        partitions: vec![],
        qos,
    }
}

fn sample(k: u64, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| (i as u64 * 131 + k * 17) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// One datagram in `from`'s name carrying `subs`.
fn forge(from: ParticipantId, subs: &[Submessage<'_>]) -> Bytes {
    let mut buf = Vec::new();
    let mut b = DatagramBuilder::new(
        &mut buf,
        Header {
            domain: 0,
            participant: from,
        },
    );
    for s in subs {
        b.push(s).unwrap();
    }
    Bytes::from(buf)
}

/// Fragment `frag_num` of a sample of `sample_size` bytes cut in `frag_size` pieces, in the
/// name of writer `w` of participant `from`.
fn fragment(
    from: ParticipantId,
    w: EntityId,
    seq: u64,
    sample_size: u32,
    frag_size: u16,
    frag_num: u32,
) -> Bytes {
    let start = frag_num as usize * frag_size as usize;
    let len = (sample_size as usize - start).min(frag_size as usize);
    let bytes = vec![0xee; len];
    forge(
        from,
        &[Submessage::DataFrag(DataFragRepr {
            writer: w,
            reader: EntityId(0),
            seq,
            timestamp_ns: 0,
            sample_size,
            frag_size,
            frag_num,
            payload: &bytes,
        })],
    )
}

/// Hands `dg` to node `to` as if it came from `from`'s address.
fn inject(sim: &mut Sim, to: usize, from: SocketAddr, dg: &Bytes) {
    let now = sim.now;
    sim.p(to).handle_datagram(now, from, dg);
    sim.pump(to);
}

/// Nodes with `tune`d engines; readers on node 0 and a writer on each other node, all on
/// `/t`, reliable keep-all, matched.
fn readers_and_writers(
    seed: u64,
    writers: usize,
    tune: impl Fn(&mut Config),
) -> (Sim, EntityId, Vec<EntityId>) {
    let mut sim = Sim::new(seed, Link::perfect());
    for _ in 0..=writers {
        sim.add_node_with(&tune);
    }
    let q = Qos::new().keep_all();
    let now = sim.now;
    let r = sim.p(0).create_reader(now, info("/t", q));
    sim.pump(0);
    let mut ws = Vec::new();
    for i in 1..=writers {
        let now = sim.now;
        ws.push(sim.p(i).create_writer(now, info("/t", q)).unwrap());
        sim.pump(i);
    }
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        s.nodes[0].participant.matched_count(r) == writers
            && (1..=writers).all(|i| s.nodes[i].participant.matched_count(ws[i - 1]) == 1)
    }));
    (sim, r, ws)
}

/// One forged DATA_FRAG in a matched writer's name claiming a sample of 256 MiB (the
/// default `max_sample_size`), and another claiming the same whose only fragment is the
/// last one: the reader holds what they brought (about 60 KB each), not what they claim
/// (before: 256 MiB charged for the first, and the reader's whole budget with it, so the
/// writer's real fragmented sample that follows was refused; the second's room was zeroed).
#[test]
fn preauth_memory_forged_fragment_reserves_nothing() {
    let (mut sim, r, ws) = readers_and_writers(171, 1, |_| {});
    let w = ws[0];
    let (writer_id, writer_addr) = (sim.nodes[1].participant.id(), sim.nodes[1].addr);
    let claim: u32 = 256 << 20;
    let frag: u16 = 60_000;
    let last = claim.div_ceil(frag as u32) - 1;
    inject(
        &mut sim,
        0,
        writer_addr,
        &fragment(writer_id, w, 1_000_000, claim, frag, 0),
    );
    inject(
        &mut sim,
        0,
        writer_addr,
        &fragment(writer_id, w, 1_000_001, claim, frag, last),
    );
    let held = sim.nodes[0].participant.reassembly_bytes(r);
    assert!(
        held <= 2 * (frag as u64 + 1024),
        "two forged fragments hold {held} bytes of reassembly"
    );
    // The writer's real fragmented sample still comes through at once.
    let big = sample(1, 1 << 20);
    sim.write(1, w, 1, big.clone(), Duration::from_secs(5));
    assert!(
        sim.run_until(Duration::from_secs(2), |s| !s.seqs(0, r).is_empty()),
        "a real 1 MiB sample was not delivered within 2 s (stats {:?})",
        sim.nodes[0].participant.stats()
    );
    assert!(sim.payloads(0, r)[0] == big);
    let held = sim.nodes[0].participant.reassembly_bytes(r);
    assert!(held <= 2 * (frag as u64 + 1024), "{held}");
}

/// A greedy (or forged) writer opening sample after sample, each with real bytes, stops at
/// its share of the reader's reassembly budget; another writer's real fragmented sample
/// still completes at once while it sits there. Scaled down (4 MiB samples) from the
/// defaults, which keep the same proportions: the writer's share is `max_sample_size` and a
/// sixteenth, the reader's twice that. (Before: the reader's budget was charged what first
/// fragments claimed, so two of them filled it, and the other writer's sample was refused
/// until they expired.)
#[test]
fn preauth_memory_one_writer_cannot_fill_a_reader() {
    let max_sample = 4usize << 20;
    let per_writer = max_sample + max_sample / 16;
    let (mut sim, r, ws) = readers_and_writers(172, 2, |c| {
        c.max_sample_size = max_sample;
        c.max_reassembly_bytes_per_writer = per_writer;
        c.max_reassembly_bytes = 2 * per_writer;
    });
    let (greedy, honest) = (ws[0], ws[1]);
    let (greedy_id, greedy_addr) = (sim.nodes[1].participant.id(), sim.nodes[1].addr);
    let greedy_guid = Guid {
        participant: greedy_id,
        entity: greedy,
    };
    let frag: u16 = 60_000;
    let mut seq = 1_000;
    let mut flood = |sim: &mut Sim, n: usize| {
        for _ in 0..n {
            seq += 1;
            let dg = fragment(greedy_id, greedy, seq, max_sample as u32, frag, 0);
            inject(sim, 0, greedy_addr, &dg);
        }
    };
    // 12 MB of first fragments: three times what the reader may hold in all.
    flood(&mut sim, 200);
    let p = &sim.nodes[0].participant;
    let held = p.reassembly_bytes_from(r, greedy_guid);
    assert!(held <= per_writer as u64, "the greedy writer holds {held}");
    assert!(p.reassembly_bytes(r) <= 2 * per_writer as u64);
    // The honest writer's 3 MiB sample, while the greedy one keeps at it.
    let big = sample(7, 3 << 20);
    sim.write(2, honest, 7, big.clone(), Duration::from_secs(5));
    let delivered = sim.run_until(Duration::from_secs(2), |s| {
        flood(s, 1);
        !s.seqs(0, r).is_empty()
    });
    assert!(
        delivered,
        "the honest writer's sample was not delivered within 2 s while another writer \
         filled its share (stats {:?})",
        sim.nodes[0].participant.stats()
    );
    assert!(sim.payloads(0, r)[0] == big);
    let p = &sim.nodes[0].participant;
    assert!(p.reassembly_bytes_from(r, greedy_guid) <= per_writer as u64);
    assert!(p.stats().reassembly_over_cap > 0);
    let reported = sim.nodes[0]
        .events
        .iter()
        .filter(|e| {
            matches!(e, Event::OverLimit { participant, limit: Limit::WriterReassembly { .. } }
                if *participant == greedy_id)
        })
        .count();
    assert_eq!(reported, 1, "the greedy writer's peer is reported once");
}

/// A peer with a 60,000-byte name, and a peer announcing a 60,000-byte topic and then 800
/// endpoints of 800 bytes of strings each (640 KB, plus what the table spends on each
/// entry): the first is refused, the long topic is refused, and what is stored for the
/// second stays within `max_peer_metadata_bytes`. Real peers meanwhile still meet and
/// deliver. (Before: every string was stored, up to 1,024 endpoints of up to 64 KB each per
/// peer, and names of any length.)
#[test]
fn table_exhaustion_long_strings_are_capped() {
    let mut sim = Sim::new(173, Link::perfect());
    let victim = sim.add_node(0);
    let friend = sim.add_node(0);
    let long_name = sim.add_node_with(|c| c.name = "n".repeat(60_000));
    let hoarder = sim.add_node(0);
    let q = Qos::new().keep_all();
    let now = sim.now;
    let r = sim.p(victim).create_reader(now, info("/ok", q));
    let w = sim.p(friend).create_writer(now, info("/ok", q)).unwrap();
    let now = sim.now;
    sim.p(hoarder)
        .create_writer(now, info(&"L".repeat(60_000), q))
        .unwrap();
    for k in 0..800 {
        let topic = format!("/{k:04}/{}", "t".repeat(395));
        let e = EndpointInfo {
            topic,
            type_name: "y".repeat(400),
            partitions: vec![],
            qos: q,
        };
        let now = sim.now;
        sim.p(hoarder).create_writer(now, e).unwrap();
    }
    for i in 0..4 {
        sim.pump(i);
    }
    sim.run_for(Duration::from_secs(3));
    let long_id = sim.nodes[long_name].participant.id();
    let hoarder_id = sim.nodes[hoarder].participant.id();
    let p = &sim.nodes[victim].participant;
    let peers = p.remote_participants();
    // Its name is not stored (the peer itself may be, once its address is validated: it
    // is a peer like any other, without a name).
    assert!(
        peers
            .iter()
            .all(|(id, name, _)| *id != long_id || name.is_empty()),
        "the 60,000-byte name is stored"
    );
    assert!(peers.iter().all(|(_, name, _)| name.len() <= 512));
    assert!(peers.iter().any(|(id, _, _)| *id == hoarder_id));
    let cfg_max = tether_core::DEFAULT_MAX_PEER_METADATA_BYTES;
    let eps: Vec<_> = p
        .remote_endpoints()
        .into_iter()
        .filter(|(g, _, _)| g.participant == hoarder_id)
        .collect();
    assert!(
        eps.iter()
            .all(|(_, _, e)| e.info.topic.len() <= tether_core::DEFAULT_MAX_STRING_BYTES),
        "an endpoint with a 60,000-byte topic is stored"
    );
    let stored: usize = eps
        .iter()
        .map(|(_, _, e)| e.info.topic.len() + e.info.type_name.len())
        .sum();
    assert!(
        stored <= cfg_max,
        "{stored} bytes of strings stored for one peer ({} endpoints)",
        eps.len()
    );
    assert!(!eps.is_empty(), "its endpoints within the cap are kept");
    assert!(p.stats().announcements_over_cap > 0);
    // Each refused peer reported once per kind of limit, however often it announced.
    let reports = |id: ParticipantId| {
        sim.nodes[victim]
            .events
            .iter()
            .filter(|e| matches!(e, Event::OverLimit { participant, .. } if *participant == id))
            .count()
    };
    assert_eq!(reports(long_id), 1);
    assert_eq!(reports(hoarder_id), 2, "its long topic, and its total");
    // Real peers still meet and deliver.
    assert!(sim.run_until(Duration::from_secs(5), |s| {
        s.nodes[friend].participant.matched_count(w) == 1
    }));
    for k in 1..=20u64 {
        sim.write(friend, w, k, sample(k, 100), Duration::from_secs(5));
    }
    assert!(sim.run_until(Duration::from_secs(5), |s| s.seqs(victim, r).len() == 20));
}

/// HEARTBEAT, GAP, ACKNACK, NACK and NACK_FRAG forged with the widest ranges the wire
/// allows (sequence numbers 1 to 2^64 - 2, a base within 256 of the top): each is handled
/// with work and state bounded by what the participants hold, nothing panics, and the stream
/// they do not skip keeps delivering every sample in order. (Before: a heartbeat moving a
/// reader to within 256 of 2^64 overflowed the ACKNACK it then built.) Whatever a forged
/// GAP or heartbeat skips in a plain realm is lost; the secure realm's authenticated control
/// plane refuses them.
#[test]
fn forged_control_huge_sequence_ranges_are_bounded() {
    let mut sim = Sim::new(174, Link::perfect());
    let wn = sim.add_node(0);
    let rn = sim.add_node(0);
    let q = Qos::new().keep_all();
    let now = sim.now;
    let wa = sim.p(wn).create_writer(now, info("/a", q)).unwrap();
    let wb = sim.p(wn).create_writer(now, info("/b", q)).unwrap();
    let wc = sim.p(wn).create_writer(now, info("/c", q)).unwrap();
    let ra = sim.p(rn).create_reader(now, info("/a", q));
    let rb = sim.p(rn).create_reader(now, info("/b", q));
    let rc = sim.p(rn).create_reader(now, info("/c", q));
    sim.pump(wn);
    sim.pump(rn);
    assert!(sim.run_until(Duration::from_secs(30), |s| {
        [wa, wb, wc]
            .iter()
            .all(|w| s.nodes[wn].participant.matched_count(*w) == 1)
    }));
    for k in 1..=50u64 {
        for w in [wa, wb, wc] {
            sim.write(wn, w, k, sample(k, 200), Duration::from_secs(5));
        }
    }
    assert!(sim.run_until(Duration::from_secs(5), |s| {
        [ra, rb, rc].iter().all(|r| s.seqs(rn, *r).len() == 50)
    }));
    let (wid, waddr) = (sim.nodes[wn].participant.id(), sim.nodes[wn].addr);
    let (rid, raddr) = (sim.nodes[rn].participant.id(), sim.nodes[rn].addr);
    let top = u64::MAX - 1;
    let events_before = sim.nodes[rn].events.len();
    let sent_before = sim.nodes[rn].participant.stats().datagrams_sent;
    // To the reader, in the writer's name.
    let hb = |writer, first, last, count| {
        Submessage::Heartbeat(HeartbeatRepr {
            writer,
            reader: EntityId(0),
            first,
            last,
            count,
            final_: false,
        })
    };
    let to_reader = [
        // /a: announces 2^64 - 2 samples, skips none.
        hb(wa, 1, top, 1 << 30),
        // /b: everything before 2^64 - 100 is gone: the reader stands near the top.
        hb(wb, u64::MAX - 100, top, 1 << 30),
        // /c: a GAP over the whole space, then a heartbeat announcing all of it.
        Submessage::Gap(GapRepr {
            writer: wc,
            reader: EntityId(0),
            start: 1,
            end: u64::MAX,
        }),
        hb(wc, 1, top, 1 << 30),
    ];
    for s in &to_reader {
        inject(&mut sim, rn, waddr, &forge(wid, std::slice::from_ref(s)));
    }
    // To the writer, in the reader's name.
    let an = |reader, writer, base, count| AckNackRepr {
        reader,
        writer,
        base,
        num_bits: 256,
        bitmap: [u32::MAX; 8],
        count,
        start_unknown: false,
    };
    let to_writer = [
        Submessage::AckNack(an(rb, wb, top - 256, 1 << 29)),
        Submessage::Nack(an(rb, wb, top - 256, (1 << 29) + 1)),
        Submessage::NackFrag(NackFragRepr {
            reader: ra,
            writer: wa,
            seq: top,
            base: u32::MAX - 256,
            num_bits: 256,
            bitmap: [u32::MAX; 8],
            count: 1 << 30,
        }),
    ];
    for s in &to_writer {
        inject(&mut sim, wn, raddr, &forge(rid, std::slice::from_ref(s)));
    }
    sim.run_for(Duration::from_secs(2));
    // The stream nothing skipped delivers every sample, in order, and then some.
    for k in 51..=100u64 {
        sim.write(wn, wa, k, sample(k, 200), Duration::from_secs(5));
    }
    assert!(sim.run_until(Duration::from_secs(5), |s| s.seqs(rn, ra).len() == 100));
    assert_eq!(sim.seqs(rn, ra), (1..=100).collect::<Vec<u64>>());
    assert!(sim.payloads(rn, ra)[99] == sample(100, 200));
    // State and work stayed bounded by what is held: no sample waits, the losses came as
    // a few events counted arithmetically, and the reader asked at a bounded rate.
    let p = &sim.nodes[rn].participant;
    for r in [ra, rb, rc] {
        assert_eq!(p.reader_backlog(r), 0);
        assert_eq!(p.reassembly_bytes(r), 0);
    }
    let new_events = sim.nodes[rn].events.len() - events_before;
    assert!(new_events < 500, "{new_events} events");
    let sent = p.stats().datagrams_sent - sent_before;
    assert!(sent < 2_000, "the reader sent {sent} datagrams in 2 s");
    assert!(sim.nodes[wn].participant.history_len(wa) <= 100);
}

/// Names, topics, types and partitions with control characters (escape sequences, line
/// breaks) are refused, reported once and never stored: `tether topics` and every warning
/// that quotes them would otherwise let a peer rewrite the user's terminal or forge lines
/// ("error: ..."). A stranger whose address is not validated yet (anyone, from any source
/// address, a new id a datagram) is counted but not reported: one report per invented id
/// let an outsider write without end to every member's stderr.
#[test]
fn announced_control_characters_are_refused_and_strangers_not_reported() {
    let mut sim = Sim::new(175, Link::perfect());
    let victim = sim.add_node(0);
    let named = sim.add_node_with(|c| c.name = "robot\u{1b}[2J\nerror: fake".into());
    let typed = sim.add_node(0);
    let q = Qos::new();
    let now = sim.now;
    sim.p(victim).create_reader(now, info("/ok", q));
    let e = EndpointInfo {
        topic: "/ok".into(),
        type_name: "t\r\u{1b}[31mfake".into(),
        partitions: vec![],
        qos: q,
    };
    let w = sim.p(typed).create_writer(now, e).unwrap();
    for i in 0..3 {
        sim.pump(i);
    }
    sim.run_for(Duration::from_secs(3));
    let (named_id, typed_id) = (
        sim.nodes[named].participant.id(),
        sim.nodes[typed].participant.id(),
    );
    let p = &sim.nodes[victim].participant;
    assert!(
        p.remote_participants()
            .iter()
            .all(|(_, name, _)| !name.chars().any(char::is_control)),
        "a name with control characters is stored"
    );
    assert!(
        p.remote_endpoints()
            .iter()
            .all(|(g, _, _)| g.participant != typed_id),
        "an endpoint with control characters in its type is stored"
    );
    assert_eq!(sim.nodes[typed].participant.matched_count(w), 0);
    let reported = |id: ParticipantId, want: &str| {
        sim.nodes[victim]
            .events
            .iter()
            .filter(|e| {
                matches!(e, Event::OverLimit { participant, limit: Limit::ControlCharacters { field } }
                    if *participant == id && *field == want)
            })
            .count()
    };
    assert_eq!(reported(named_id, "name"), 1);
    assert_eq!(reported(typed_id, "type"), 1);

    // Strangers: 500 invented ids from 500 addresses, each announcing a name over the cap
    // and never answering the challenge.
    let over_before = sim.nodes[victim].participant.stats().announcements_over_cap;
    let events_before = sim.nodes[victim].events.len();
    let long = "n".repeat(600);
    for k in 0..500u64 {
        let from: SocketAddr = format!("10.9.{}.{}:7400", k / 200, k % 200 + 1)
            .parse()
            .unwrap();
        let dg = tether_testkit::realm::forged(
            ParticipantId(0x5000 + k),
            &[Submessage::Participant(tether_wire::ParticipantRepr {
                lease_ms: 10_000,
                name: &long,
                data_group: None,
            })],
        );
        tether_testkit::realm::inject(&mut sim, victim, from, &dg);
    }
    let p = &sim.nodes[victim].participant;
    assert_eq!(p.stats().announcements_over_cap - over_before, 500);
    let new_reports = sim.nodes[victim].events[events_before..]
        .iter()
        .filter(|e| matches!(e, Event::OverLimit { .. }))
        .count();
    assert_eq!(new_reports, 0, "strangers' long names reported");
}
