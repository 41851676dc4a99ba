//! Attacks on discovery (issue 17), in the simulator, in a plain and in a secure realm: a
//! flood of invented participant ids must not keep real participants from finding each
//! other, and nothing that arrives from an address tether has not validated may bring back
//! more than 3 × its size to that address (tether must not be a reflector).
//!
//! The attacker has no key and needs none: it writes any participant id into a header and
//! any source address on a datagram (the simulator takes the source as given, as a network
//! without source-address filtering does). The `identity_takeover_…` tests give it more: it
//! sees every datagram (`Sim::sniffed`), as a host on the same Wi-Fi does, so it can echo the
//! cookies sent to a real peer's address; ids it validates there must not take that peer's
//! place.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tether_core::{EndpointInfo, EntityId, Event, ParticipantId, Qos, Security};
use tether_crypto::{CaKey, Credential, Identity, RealmSecret};
use tether_testkit::{Link, Sim, Sniffed};
use tether_wire::{DatagramBuilder, Header, ParticipantRepr, ProbeRepr, Submessage};

/// Unix time the simulated realm lives at.
const NOW: u64 = 1_800_000_000;

fn info(topic: &str) -> EndpointInfo {
    EndpointInfo {
        topic: topic.into(),
        type_name: "t".into(),
        partitions: vec![],
        qos: Qos::new().keep_all(),
    }
}

/// A small deterministic generator for the attacker (ids, addresses).
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// An address somewhere on the internet (never a node's: those are on 127.0.0.1).
    fn addr(&mut self) -> SocketAddr {
        let r = self.next();
        SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::new(10 + (r % 200) as u8, (r >> 8) as u8, (r >> 16) as u8, 1),
            1024 + (r >> 24) as u16 % 60_000,
        ))
    }
}

/// A datagram of participant `pid` in domain 0 holding `m`.
fn forged(pid: u64, m: &[Submessage<'_>]) -> Bytes {
    let mut buf = Vec::new();
    let mut b = DatagramBuilder::new(
        &mut buf,
        Header {
            domain: 0,
            participant: ParticipantId(pid),
        },
    );
    for s in m {
        b.push(s).unwrap();
    }
    Bytes::from(buf)
}

/// A PARTICIPANT announcing `pid` with the longest lease there is.
fn announce(pid: u64) -> Bytes {
    forged(
        pid,
        &[Submessage::Participant(ParticipantRepr {
            lease_ms: u32::MAX,
            name: "x",
            data_group: None,
        })],
    )
}

/// Adds a node; in a secure realm of `ca` (with grants for everything) when given one.
fn node(
    sim: &mut Sim,
    ca: Option<&CaKey>,
    serial: u64,
    tune: fn(&mut tether_core::Config),
) -> usize {
    let now = sim.now;
    let security = ca.map(|ca| {
        let identity = Identity::generate();
        let credential = Credential::issue(
            ca,
            &format!("member{serial}"),
            serial,
            NOW - 100,
            NOW + 86_400,
            identity.sign_public(),
            identity.kx_public(),
            vec!["/**".into()],
            vec!["/**".into()],
        )
        .unwrap();
        Arc::new(Security::new(
            identity,
            credential,
            ca.public(),
            RealmSecret::from_bytes(ca.public()),
            None,
            now,
            NOW,
        ))
    });
    sim.add_node_with(move |c| {
        c.security = security;
        tune(c);
    })
}

/// Hands `dg` to node `i` as if it came from `from`, and lets the node answer.
fn inject(sim: &mut Sim, i: usize, from: SocketAddr, dg: &Bytes) {
    let now = sim.now;
    sim.p(i).handle_datagram(now, from, dg);
    sim.pump(i);
}

/// Answers, under `pid` and from `at`, every cookie (PROBE) in `d`, a datagram node `i`
/// sent to `at`: what an outsider receiving at `at` does to validate a claim there.
/// Returns how many it answered.
fn answer_cookies(sim: &mut Sim, i: usize, at: SocketAddr, pid: u64, d: &Sniffed) -> usize {
    if d.to != at {
        return 0;
    }
    let Ok(dg) = tether_wire::Datagram::parse(&d.payload) else {
        return 0;
    };
    let cookies: Vec<u64> = dg
        .submessages()
        .flatten()
        .filter_map(|m| match m {
            Submessage::Probe(x) => Some(x.id),
            _ => None,
        })
        .collect();
    for &id in &cookies {
        let ack = forged(
            pid,
            &[Submessage::ProbeAck(tether_wire::ProbeAckRepr {
                id,
                size: d.payload.len() as u32,
                received: None,
            })],
        );
        inject(sim, i, at, &ack);
    }
    cookies.len()
}

/// While invented participants (random ids, from random addresses, and some from the real
/// peer's own address) announce themselves to both sides without pause, a real publisher
/// and subscriber still discover each other, match within 2 s and deliver everything; the
/// participant table holds only the real peer, and the pending table stays within its cap.
/// In a secure realm, participants that validate their address but never authenticate
/// (more than the table of such holds) do not keep them apart either.
///
/// (Before: every announcement from an unknown id made a remote participant at once, so
/// the 1,024-entry table filled with invented ids within a millisecond and the real peer
/// was refused, `table_full`, for as long as the flood went on.)
#[test]
fn table_exhaustion_flood_of_invented_ids() {
    for secure in [false, true] {
        let mut sim = Sim::new(17, Link::perfect());
        let ca = CaKey::generate();
        let ca = secure.then_some(&ca);
        let mut rng = Xorshift(0x5eed_1700 + secure as u64);
        let p = node(&mut sim, ca, 1, |c| c.max_pending_participants = 8);
        // The flood starts before the subscriber exists.
        let flood = |sim: &mut Sim, rng: &mut Xorshift, targets: &[usize], n: usize| {
            for _ in 0..n {
                for &t in targets {
                    let pid = rng.next() | 1;
                    // One in ten from the other real node's address, to take its place
                    // in the pending table.
                    let from = if rng.next() % 10 == 0 && sim.nodes.len() > 1 {
                        sim.nodes[1 - t.min(1)].addr
                    } else {
                        rng.addr()
                    };
                    inject(sim, t, from, &announce(pid));
                }
            }
        };
        flood(&mut sim, &mut rng, &[p], 2000);
        let s = node(&mut sim, ca, 2, |c| c.max_pending_participants = 8);
        // In a secure realm: participants without credentials, at addresses of their own,
        // which answer every challenge and never authenticate; more of them than the
        // table of unauthenticated participants holds.
        if secure {
            for _ in 0..12 {
                node(&mut sim, None, 0, |_| {});
            }
        }
        let now = sim.now;
        let wid = sim.p(p).create_writer(now, info("/flood")).unwrap();
        let rid = sim.p(s).create_reader(now, info("/flood"));
        sim.pump(p);
        sim.pump(s);
        let t0 = sim.now;
        let mut matched = false;
        while sim.now - t0 < Duration::from_secs(2) {
            flood(&mut sim, &mut rng, &[p, s], 20);
            sim.run_for(Duration::from_millis(1));
            if sim.nodes[p].participant.matched_count(wid) == 1
                && sim.nodes[s].participant.matched_count(rid) == 1
            {
                matched = true;
                break;
            }
        }
        let what = if secure { "secure realm" } else { "plain" };
        let st = sim.nodes[p].participant.stats().clone();
        assert!(
            matched,
            "{what}: no match within 2 s under the flood ({} remote participants, table_full {})",
            sim.nodes[p].participant.remote_participants().len(),
            st.table_full
        );
        eprintln!("{what}: matched after {:?} of flood", sim.now - t0);
        // Delivery, the flood going on.
        for k in 0..20u64 {
            let now = sim.now;
            sim.p(p)
                .write(now, wid, k, Bytes::from(k.to_le_bytes().to_vec()))
                .unwrap();
            sim.pump(p);
            flood(&mut sim, &mut rng, &[p, s], 5);
            sim.run_for(Duration::from_millis(5));
        }
        let ok = sim.run_until(Duration::from_secs(5), |x| x.seqs(s, rid).len() == 20);
        assert!(ok, "{what}: delivered {:?}", sim.seqs(s, rid));
        for &i in &[p, s] {
            let n = &sim.nodes[i].participant;
            let real = sim.nodes.len() - 1;
            assert!(
                n.remote_participants().len() <= real,
                "{what}: node {i} holds {} participants",
                n.remote_participants().len()
            );
            assert!(n.pending_participants() <= 8, "{what}: node {i}");
        }
        let st = sim.nodes[p].participant.stats();
        assert!(
            st.pending_dropped > 0 && st.challenges_sent > 0,
            "{what}: {st:?}"
        );
        if secure {
            assert!(st.unauthenticated_forgotten > 0, "{what}: {st:?}");
        }
    }
}

/// A participant whose announcement is large (many endpoints) receives, from a spoofed
/// source address (the victim's), PARTICIPANTs under new and repeated ids, PROBEs from an
/// unknown id, and announcements under the id of a real peer it knows (to take that peer's
/// address over). Over 10 s, what it sends to the victim's address stays within 3 × what
/// came from there, and the real peer keeps receiving.
///
/// (Before: each forged PARTICIPANT brought back the whole announcement, some 30 KB here,
/// and in a secure realm an AUTH too; and the real peer's address, with its data, moved
/// to the victim.)
#[test]
fn amplification_bytes_to_unvalidated_address_stay_under_3x() {
    for secure in [false, true] {
        let mut sim = Sim::new(18, Link::perfect());
        let ca = CaKey::generate();
        let ca = secure.then_some(&ca);
        let r = node(&mut sim, ca, 1, |_| {});
        let q = node(&mut sim, ca, 2, |_| {});
        let now = sim.now;
        let mut writers = Vec::new();
        for k in 0..300 {
            let topic = format!("/robot/arm/joint_{k:03}/state/with/a/rather/long/topic/name");
            writers.push(sim.p(r).create_writer(now, info(&topic)).unwrap());
        }
        let rid = sim.p(q).create_reader(
            now,
            info("/robot/arm/joint_000/state/with/a/rather/long/topic/name"),
        );
        sim.pump(r);
        sim.pump(q);
        assert!(sim.run_until(Duration::from_secs(10), |s| {
            s.nodes[r].participant.matched_count(writers[0]) == 1
                && s.nodes[q].participant.matched_count(rid) == 1
        }));
        let victim: SocketAddr = "192.0.2.7:7400".parse().unwrap();
        let qpid = sim.nodes[q].participant.id().0;
        let mut rng = Xorshift(0xa3b1);
        let mut received = 0u64;
        let fixed = rng.next() | 1;
        for ms in 0..10_000u64 {
            let mut dgs = Vec::new();
            if ms % 10 == 0 {
                dgs.push(announce(rng.next() | 1));
                dgs.push(announce(fixed));
            }
            if ms % 50 == 0 {
                dgs.push(forged(
                    rng.next() | 1,
                    &[Submessage::Probe(ProbeRepr {
                        id: rng.next(),
                        padding: 0,
                    })],
                ));
            }
            if ms % 100 == 0 {
                dgs.push(announce(qpid));
            }
            for d in &dgs {
                received += d.len() as u64;
                inject(&mut sim, r, victim, d);
            }
            if ms % 100 == 0 {
                let now = sim.now;
                let _ = sim
                    .p(r)
                    .write(now, writers[0], ms, Bytes::from(vec![7u8; 1000]));
                sim.pump(r);
            }
            sim.run_for(Duration::from_millis(1));
        }
        let what = if secure { "secure realm" } else { "plain" };
        let sent = sim.unrouted.get(&victim).map_or(0, |x| x.1);
        assert!(
            sent <= 3 * received,
            "{what}: {sent} bytes sent to the victim for {received} received from it ({:.0} ×)",
            sent as f64 / received as f64
        );
        assert!(
            sim.seqs(q, rid).len() >= 95,
            "{what}: the real peer got {} of 100 samples",
            sim.seqs(q, rid).len()
        );
        eprintln!(
            "{what}: {sent} bytes to the victim for {received} from it; {:?}",
            sim.nodes[r].participant.stats().amplification_limited
        );
        let _: &[EntityId] = &writers;
    }
}

/// The ids a sniffing attacker has announced at each real node's address, and how to forge
/// its datagrams: it sees every datagram on the medium ([`Sim::sniffed`]), writes any id
/// into a header and any source address on what it sends.
struct Sniffer {
    rng: Xorshift,
    /// Invented ids announced at each real node's address (at most `ids` each; they are
    /// announced again, since a refused or forgotten id may be taken later).
    fakes: std::collections::BTreeMap<SocketAddr, Vec<u64>>,
    ids: usize,
    /// When it last announced its ids to a node from an address: at most once a
    /// millisecond (the nodes' answers to its forgeries announce them too).
    announced: std::collections::BTreeMap<(SocketAddr, usize), std::time::Instant>,
    /// Datagrams forged so far.
    forged: u64,
}

impl Sniffer {
    /// Acts on everything sniffed since the last call, and on what its own forgeries make
    /// the nodes send, until the nodes have nothing more to say to it.
    fn react(&mut self, sim: &mut Sim) {
        loop {
            let seen = std::mem::take(sim.sniffed.as_mut().unwrap());
            if seen.is_empty() {
                return;
            }
            for d in seen {
                // Between two real nodes only: from `x` (its address) to node `y`.
                let Some(y) = sim.nodes.iter().position(|n| n.addr == d.to) else {
                    continue;
                };
                let Some(x) = sim.nodes.iter().position(|n| n.addr == d.from) else {
                    continue;
                };
                let Ok(dg) = tether_wire::Datagram::parse(&d.payload) else {
                    continue;
                };
                let mut probes = Vec::new();
                let mut announces = false;
                for m in dg.submessages().flatten() {
                    match m {
                        Submessage::Probe(p) => probes.push(p.id),
                        Submessage::Participant(_) => announces = true,
                        _ => {}
                    }
                }
                // A PROBE sent to `y`'s address (a cookie, maybe for one of our ids
                // there): echoed back to its sender, from `y`'s address, under every id
                // announced there.
                let here = self.fakes.get(&d.to).cloned().unwrap_or_default();
                for id in probes {
                    for &f in &here {
                        let ack = forged(
                            f,
                            &[Submessage::ProbeAck(tether_wire::ProbeAckRepr {
                                id,
                                size: d.payload.len() as u32,
                                received: None,
                            })],
                        );
                        self.forged += 1;
                        inject(sim, x, d.to, &ack);
                    }
                }
                // `x` announces itself to `y` (its handshake, its periodic announcement):
                // at once, invented ids announce themselves to `y` from `x`'s address.
                let last = self.announced.get(&(d.from, y)).copied();
                if announces && last.is_none_or(|t| sim.now - t >= Duration::from_millis(1)) {
                    self.announced.insert((d.from, y), sim.now);
                    let fakes = self.fakes.entry(d.from).or_default();
                    if fakes.len() < self.ids {
                        fakes.push(self.rng.next() | 1);
                    }
                    for f in fakes.clone() {
                        self.forged += 1;
                        inject(sim, y, d.from, &announce(f));
                    }
                }
            }
        }
    }
}

/// A host that sees every datagram (the same Wi-Fi, a mirrored port) cannot take a real
/// peer's place in a secure realm: whenever the publisher or the subscriber announces
/// itself, invented ids announce themselves to the other from its address (more of them
/// than an address may hold), and every cookie sent to that address is echoed under each of
/// them, so they validate there too. The publisher and subscriber still authenticate each
/// other, match within 3 s, and every sample is delivered, the attack going on throughout.
///
/// (Before: one pending participant per address, a new id replacing it, and a validated id
/// made any unauthenticated participant at its address go, so each invented id the sniffer
/// validated at a peer's address during its handshake evicted it; the peer, found again,
/// was evicted again at its next announcement, and the two never matched.)
#[test]
fn identity_takeover_sniffer_forges_ids_at_a_peers_address_during_its_handshake() {
    for seed in [41u64, 42, 43] {
        let mut sim = Sim::new(seed, Link::lossy(0.05));
        sim.sniffed = Some(Vec::new());
        let ca = CaKey::generate();
        let mut sniffer = Sniffer {
            rng: Xorshift(0x5eed_0017 ^ seed),
            fakes: std::collections::BTreeMap::new(),
            ids: 6,
            announced: std::collections::BTreeMap::new(),
            forged: 0,
        };
        let p = node(&mut sim, Some(&ca), 1, |_| {});
        let s = node(&mut sim, Some(&ca), 2, |_| {});
        let now = sim.now;
        let wid = sim.p(p).create_writer(now, info("/sniffed")).unwrap();
        let rid = sim.p(s).create_reader(now, info("/sniffed"));
        sim.pump(p);
        sim.pump(s);
        let t0 = sim.now;
        let mut matched = false;
        while sim.now - t0 < Duration::from_secs(3) {
            sniffer.react(&mut sim);
            if sim.nodes[p].participant.matched_count(wid) == 1
                && sim.nodes[s].participant.matched_count(rid) == 1
            {
                matched = true;
                break;
            }
            if !sim.step() {
                break;
            }
        }
        let st = |sim: &Sim, i: usize| sim.nodes[i].participant.stats().clone();
        assert!(
            matched,
            "seed {seed}: no match within 3 s ({} datagrams forged; publisher: {} remote \
             participants, {} validated, {} unauthenticated forgotten; subscriber: {} \
             remote participants, {} validated, {} unauthenticated forgotten)",
            sniffer.forged,
            sim.nodes[p].participant.remote_participants().len(),
            st(&sim, p).participants_validated,
            st(&sim, p).unauthenticated_forgotten,
            sim.nodes[s].participant.remote_participants().len(),
            st(&sim, s).participants_validated,
            st(&sim, s).unauthenticated_forgotten,
        );
        eprintln!("seed {seed}: matched after {:?}", sim.now - t0);
        // Delivery, the attack going on: every sample, in order.
        for k in 0..20u64 {
            let now = sim.now;
            sim.p(p)
                .write(now, wid, k, Bytes::from(k.to_le_bytes().to_vec()))
                .unwrap();
            sim.pump(p);
            let until = sim.now + Duration::from_millis(5);
            while sim.now < until {
                sniffer.react(&mut sim);
                if !sim.step() {
                    break;
                }
            }
        }
        let until = sim.now + Duration::from_secs(5);
        while sim.seqs(s, rid).len() < 20 && sim.now < until {
            sniffer.react(&mut sim);
            if !sim.step() {
                break;
            }
        }
        assert_eq!(
            sim.seqs(s, rid),
            (1..=20).collect::<Vec<u64>>(),
            "seed {seed}: delivered"
        );
        // The attack happened: ids validated at each peer's address, the rest refused; and
        // neither real peer was ever forgotten.
        let (sp, ss) = (st(&sim, p), st(&sim, s));
        eprintln!(
            "seed {seed}: {} datagrams forged; validated {}+{}, refused {}+{}",
            sniffer.forged,
            sp.participants_validated,
            ss.participants_validated,
            sp.address_full,
            ss.address_full
        );
        assert!(
            sp.participants_validated > 1 && ss.participants_validated > 1,
            "seed {seed}: no id validated at a peer's address ({sp:?})"
        );
        assert!(
            sp.address_full > 0 && ss.address_full > 0,
            "seed {seed}: no id refused ({sp:?})"
        );
        for (i, peer) in [(p, s), (s, p)] {
            let peer = sim.nodes[peer].participant.id();
            assert!(
                !sim.nodes[i].events.iter().any(
                    |e| matches!(e, Event::ParticipantLost { participant } if *participant == peer)
                ),
                "seed {seed}: node {i} lost its peer"
            );
        }
    }
}

/// Once the publisher and subscriber of a secure realm have authenticated each other, the
/// ids a sniffer validates at the subscriber's address (as above, at each of the peers'
/// announcements) do not take the subscriber's datagrams: each is tagged for the one
/// participant it goes to, and stays tagged for the subscriber, so every sample still
/// arrives.
///
/// (Before: a participant validated at an address became the one datagrams to that address
/// were for, authenticated or not; the publisher's samples went on to the subscriber tagged
/// for the sniffer's id, and the subscriber refused them all as `misaddressed`.)
#[test]
fn identity_takeover_sniffer_validates_ids_at_an_authenticated_peers_address() {
    for seed in [44u64, 45] {
        let mut sim = Sim::new(seed, Link::lossy(0.05));
        let ca = CaKey::generate();
        let p = node(&mut sim, Some(&ca), 1, |_| {});
        let s = node(&mut sim, Some(&ca), 2, |_| {});
        let now = sim.now;
        let wid = sim.p(p).create_writer(now, info("/sniffed")).unwrap();
        let rid = sim.p(s).create_reader(now, info("/sniffed"));
        sim.pump(p);
        sim.pump(s);
        assert!(
            sim.run_until(Duration::from_secs(5), |x| {
                x.nodes[p].participant.matched_count(wid) == 1
                    && x.nodes[s].participant.matched_count(rid) == 1
            }),
            "seed {seed}: no match without an attack"
        );
        // The sniffer starts now.
        sim.sniffed = Some(Vec::new());
        let mut sniffer = Sniffer {
            rng: Xorshift(0x5eed_0117 ^ seed),
            fakes: std::collections::BTreeMap::new(),
            ids: 6,
            announced: std::collections::BTreeMap::new(),
            forged: 0,
        };
        let run = |sim: &mut Sim, sniffer: &mut Sniffer, d: Duration| {
            let until = sim.now + d;
            while sim.now < until {
                sniffer.react(sim);
                if !sim.step() {
                    break;
                }
            }
        };
        for k in 0..60u64 {
            let now = sim.now;
            sim.p(p)
                .write(now, wid, k, Bytes::from(k.to_le_bytes().to_vec()))
                .unwrap();
            sim.pump(p);
            run(&mut sim, &mut sniffer, Duration::from_millis(50));
        }
        run(&mut sim, &mut sniffer, Duration::from_secs(1));
        let (sp, ss) = (
            sim.nodes[p].participant.stats().clone(),
            sim.nodes[s].participant.stats().clone(),
        );
        assert_eq!(
            sim.seqs(s, rid),
            (1..=60).collect::<Vec<u64>>(),
            "seed {seed}: delivered ({} refused as misaddressed)",
            ss.misaddressed
        );
        assert!(
            sp.participants_validated > 1 && ss.participants_validated > 1,
            "seed {seed}: no id validated at a peer's address ({sp:?})"
        );
        eprintln!(
            "seed {seed}: {} datagrams forged; validated {}+{}, refused {}+{}",
            sniffer.forged,
            sp.participants_validated,
            ss.participants_validated,
            sp.address_full,
            ss.address_full
        );
    }
}

/// An outsider that claims the publisher's participant id at the subscriber from an
/// address of its own, without pause (it announces the id every 2 ms and answers every
/// cookie sent there), before and while the two meet on a LAN without a router, does not
/// keep them apart. The subscriber holds the id at the outsider's address and sends its
/// AUTH there; the publisher's own challenge and AUTH, from its address, are answered
/// there too, and the AUTH that proves its credential binds the id to the address it came
/// from. (Before: the members never met while the claim went on. Following the id to any
/// direct address that answered a cookie let an outsider that also relays bounce it; here
/// the id moves once, when a credential is proved: through a router the claim gives way
/// as well, routed.rs `an_outsider_claiming_a_routed_peers_id_on_the_lan_does_not_keep_it_out`.)
#[test]
fn an_outsider_claiming_a_peers_id_from_its_own_address_does_not_keep_it_out() {
    for seed in [71u64, 72, 73] {
        let mut sim = Sim::new(seed, Link::lossy(0.05));
        let ca = CaKey::generate();
        let p = node(&mut sim, Some(&ca), 1, |_| {});
        let s = node(&mut sim, Some(&ca), 2, |_| {});
        let outsider: SocketAddr = "10.9.9.9:7400".parse().unwrap();
        let pid = sim.nodes[p].participant.id().0;
        let claim = announce(pid);
        let (pa, sa) = (sim.nodes[p].addr, sim.nodes[s].addr);
        sim.sniffed = Some(Vec::new());
        let mut claims_validated = 0;
        let t0 = sim.now;
        let mut wid = None;
        let mut rid = None;
        let mut matched = None;
        while sim.now - t0 < Duration::from_secs(10) {
            inject(&mut sim, s, outsider, &claim);
            // Every cookie sent to the outsider's address, answered under the claimed id.
            for d in sim.sniffed.replace(Vec::new()).unwrap() {
                claims_validated += answer_cookies(&mut sim, s, outsider, pid, &d);
            }
            // The claim is in first; then the two start to meet.
            if wid.is_none() && sim.now - t0 >= Duration::from_millis(5) {
                let now = sim.now;
                wid = Some(sim.p(p).create_writer(now, info("/claimed")).unwrap());
                rid = Some(sim.p(s).create_reader(now, info("/claimed")));
                sim.p(p).add_target(sa);
                sim.p(s).add_target(pa);
                sim.pump(p);
                sim.pump(s);
            }
            if let (Some(w), Some(r)) = (wid, rid) {
                if sim.nodes[p].participant.matched_count(w) == 1
                    && sim.nodes[s].participant.matched_count(r) == 1
                {
                    matched = Some(sim.now - t0);
                    break;
                }
            }
            sim.run_for(Duration::from_millis(2));
        }
        assert!(
            claims_validated > 0,
            "seed {seed}: the claim was challenged"
        );
        assert!(
            matched.is_some_and(|t| t < Duration::from_secs(2)),
            "seed {seed}: matched at {matched:?}"
        );
        let st = sim.nodes[s].participant.stats();
        assert!(
            st.unverified_claims_moved == 1 && st.auth_sent_aside >= 1,
            "seed {seed}: the id moved once, by an AUTH answered aside ({st:?})"
        );
        let (w, r) = (wid.unwrap(), rid.unwrap());
        for k in 0..10u64 {
            let now = sim.now;
            sim.p(p)
                .write(now, w, k, Bytes::from(k.to_le_bytes().to_vec()))
                .unwrap();
            sim.pump(p);
            inject(&mut sim, s, outsider, &claim);
            sim.run_for(Duration::from_millis(2));
        }
        sim.run_for(Duration::from_secs(3));
        assert_eq!(
            sim.seqs(s, r),
            (1..=10).collect::<Vec<u64>>(),
            "seed {seed}: delivered"
        );
    }
}

/// The same claim, from an outsider that also relays every datagram the publisher sends
/// the subscriber, from its own address, just after the original arrives (it sees the LAN's
/// traffic): the copies move nothing. The id is bound once, where the AUTH that proved the
/// credential came from, and stays at the publisher's address; the members meet and
/// deliver everything. (A relay that could bounce an id between addresses kept members
/// apart on real processes in the second outsider review.)
#[test]
fn an_outsider_claiming_and_relaying_a_peers_datagrams_does_not_take_its_id() {
    for seed in [91u64, 92, 93] {
        let mut sim = Sim::new(seed, Link::perfect());
        let ca = CaKey::generate();
        let p = node(&mut sim, Some(&ca), 1, |_| {});
        let s = node(&mut sim, Some(&ca), 2, |_| {});
        let outsider: SocketAddr = "10.9.9.9:7400".parse().unwrap();
        let pid = sim.nodes[p].participant.id().0;
        let claim = announce(pid);
        let (pa, sa) = (sim.nodes[p].addr, sim.nodes[s].addr);
        sim.sniffed = Some(Vec::new());
        let t0 = sim.now;
        let (mut wid, mut rid, mut matched) = (None, None, None);
        let mut relayed = 0;
        let mut held: Vec<Bytes> = Vec::new();
        let mut step = |sim: &mut Sim| {
            inject(sim, s, outsider, &claim);
            // Last round's datagrams from the publisher to the subscriber, again from here.
            for dg in held.drain(..) {
                relayed += 1;
                inject(sim, s, outsider, &dg);
            }
            for d in sim.sniffed.replace(Vec::new()).unwrap() {
                if d.from == pa && d.to == sa {
                    held.push(d.payload);
                } else {
                    // Its cookies, answered under the claimed id.
                    answer_cookies(sim, s, outsider, pid, &d);
                }
            }
            sim.run_for(Duration::from_millis(2));
        };
        while sim.now - t0 < Duration::from_secs(10) {
            step(&mut sim);
            if wid.is_none() && sim.now - t0 >= Duration::from_millis(5) {
                let now = sim.now;
                wid = Some(sim.p(p).create_writer(now, info("/claimed")).unwrap());
                rid = Some(sim.p(s).create_reader(now, info("/claimed")));
                sim.p(p).add_target(sa);
                sim.p(s).add_target(pa);
                sim.pump(p);
                sim.pump(s);
            }
            if let (Some(w), Some(r)) = (wid, rid) {
                if sim.nodes[p].participant.matched_count(w) == 1
                    && sim.nodes[s].participant.matched_count(r) == 1
                {
                    matched = Some(sim.now - t0);
                    break;
                }
            }
        }
        assert!(
            matched.is_some_and(|t| t < Duration::from_secs(2)),
            "seed {seed}: matched at {matched:?}"
        );
        let (w, r) = (wid.unwrap(), rid.unwrap());
        for k in 0..10u64 {
            let now = sim.now;
            sim.p(p)
                .write(now, w, k, Bytes::from(k.to_le_bytes().to_vec()))
                .unwrap();
            sim.pump(p);
            step(&mut sim);
        }
        for _ in 0..500 {
            step(&mut sim);
        }
        assert!(relayed > 20, "seed {seed}: {relayed} datagrams relayed");
        assert_eq!(
            sim.seqs(s, r),
            (1..=10).collect::<Vec<u64>>(),
            "seed {seed}: delivered"
        );
        let at = sim.nodes[s]
            .participant
            .remote_participants()
            .into_iter()
            .find(|(id, _, _)| id.0 == pid)
            .map(|(_, _, a)| a);
        assert_eq!(
            at,
            Some(pa),
            "seed {seed}: where the subscriber holds the id"
        );
    }
}

/// An outsider that validated an invented id at a member's (answering the cookie sent to
/// its own address) gets no ENDPOINT from it, for as long as it stays: a participant not
/// authenticated takes PARTICIPANT and AUTH only. (Before: the periodic announcement went to
/// every validated participant, so any host that could reach a session's port read its
/// topic ids, QoS and partition names once a second, even with discovery off: the
/// outsider review's F3.) The members still meet and match.
#[test]
fn an_unauthenticated_participant_hears_no_endpoints() {
    let mut sim = Sim::new(81, Link::perfect());
    let ca = CaKey::generate();
    let p = node(&mut sim, Some(&ca), 1, |_| {});
    let s = node(&mut sim, Some(&ca), 2, |_| {});
    let now = sim.now;
    let wid = sim.p(p).create_writer(now, info("/hidden")).unwrap();
    let rid = sim.p(s).create_reader(now, info("/hidden"));
    let outsider: SocketAddr = "10.9.9.9:7400".parse().unwrap();
    let invented = 0x0bad_cafe_u64;
    sim.sniffed = Some(Vec::new());
    inject(&mut sim, p, outsider, &announce(invented));
    let mut validated = false;
    let mut endpoints = 0;
    let mut to_outsider = 0;
    let t0 = sim.now;
    while sim.now - t0 < Duration::from_secs(5) {
        for d in sim.sniffed.replace(Vec::new()).unwrap() {
            if d.to != outsider {
                continue;
            }
            to_outsider += 1;
            validated |= answer_cookies(&mut sim, p, outsider, invented, &d) > 0;
            let Ok(dg) = tether_wire::Datagram::parse(&d.payload) else {
                continue;
            };
            endpoints += dg
                .submessages()
                .flatten()
                .filter(|m| matches!(m, Submessage::Endpoint(_)))
                .count();
        }
        // It keeps itself known (within the 10 s an unauthenticated one is kept).
        if (sim.now - t0).as_millis() % 500 == 0 {
            inject(&mut sim, p, outsider, &announce(invented));
        }
        sim.run_for(Duration::from_millis(10));
    }
    assert!(validated, "the invented id answered a cookie");
    assert!(
        sim.nodes[p]
            .participant
            .remote_participants()
            .iter()
            .any(|(id, _, a)| id.0 == invented && *a == outsider),
        "the invented id is known there"
    );
    assert!(
        to_outsider > 2,
        "it was told things ({to_outsider} datagrams)"
    );
    assert_eq!(
        endpoints, 0,
        "ENDPOINTs sent to an unauthenticated participant"
    );
    assert_eq!(sim.nodes[p].participant.matched_count(wid), 1);
    assert_eq!(sim.nodes[s].participant.matched_count(rid), 1);
}

/// Whether `payload` holds an AUTH.
fn has_auth(payload: &Bytes) -> bool {
    tether_wire::Datagram::parse(payload).is_ok_and(|d| {
        d.submessages()
            .flatten()
            .any(|m| matches!(m, Submessage::Auth(_)))
    })
}

/// A member's AUTH, captured before the other verified it and replayed a thousand times a
/// second (the member's process stopped, so the two do not finish meeting), draws at
/// most one AUTH every 50 ms: each answer is sealed and signed, and was sent for every copy
/// (the third outsider review: 10,183 datagrams for 9,867 replays).
#[test]
fn a_replayed_auth_draws_answers_no_faster_than_one_every_50_ms() {
    let mut sim = Sim::new(95, Link::perfect());
    let ca = CaKey::generate();
    let p = node(&mut sim, Some(&ca), 1, |_| {});
    let s = node(&mut sim, Some(&ca), 2, |_| {});
    let (pa, sa) = (sim.nodes[p].addr, sim.nodes[s].addr);
    sim.sniffed = Some(Vec::new());
    sim.p(p).add_target(sa);
    sim.p(s).add_target(pa);
    sim.pump(p);
    // The publisher's first AUTH to the subscriber, caught on the way.
    let mut caught = None;
    for _ in 0..20_000 {
        sim.run_for(Duration::from_micros(100));
        caught = sim
            .sniffed
            .replace(Vec::new())
            .unwrap()
            .into_iter()
            .find(|d| d.from == pa && d.to == sa && has_auth(&d.payload))
            .map(|d| d.payload);
        if caught.is_some() {
            break;
        }
    }
    let auth = caught.expect("an AUTH from the publisher");
    // The publisher stops before the subscriber's answer reaches it: nothing completes.
    sim.stop(p);
    sim.run_for(Duration::from_millis(50));
    assert_eq!(
        sim.nodes[s]
            .participant
            .certified_name(sim.nodes[p].participant.id()),
        None
    );
    sim.sniffed = Some(Vec::new());
    for _ in 0..1000 {
        inject(&mut sim, s, pa, &auth);
        sim.run_for(Duration::from_millis(1));
    }
    let answers = sim
        .sniffed
        .take()
        .unwrap()
        .into_iter()
        .filter(|d| d.from == sa && has_auth(&d.payload))
        .count();
    assert!(
        (1..=25).contains(&answers),
        "{answers} AUTHs for 1,000 replays in 1 s"
    );
}

/// An outsider that claimed an id at a member (validated at an address of its own) and then
/// announces that id from a victim's address, a thousand times a second, draws no AUTH to
/// the victim: only an AUTH that carries the member's credential is answered at another
/// address, never an announcement anyone can forge. (The second outsider review of the
/// first form, which answered announcements too: 6.9 times the bytes on the wire at the
/// victim, and a budget shared by every id that invented ids could spend.)
#[test]
fn announcements_of_a_claimed_id_from_a_victims_address_draw_nothing_there() {
    let mut sim = Sim::new(97, Link::perfect());
    let ca = CaKey::generate();
    let s = node(&mut sim, Some(&ca), 2, |_| {});
    let outsider: SocketAddr = "10.9.9.9:7400".parse().unwrap();
    let victim: SocketAddr = "10.9.9.10:9999".parse().unwrap();
    let pid = 0x5eed_1234_u64;
    let claim = announce(pid);
    sim.sniffed = Some(Vec::new());
    // The claim, validated at the outsider's address (every cookie answered).
    for _ in 0..50 {
        inject(&mut sim, s, outsider, &claim);
        for d in sim.sniffed.replace(Vec::new()).unwrap() {
            answer_cookies(&mut sim, s, outsider, pid, &d);
        }
        sim.run_for(Duration::from_millis(2));
    }
    assert!(
        sim.nodes[s]
            .participant
            .remote_participants()
            .iter()
            .any(|(p, _, a)| p.0 == pid && *a == outsider),
        "the claim is held at the outsider's address"
    );
    sim.sniffed = Some(Vec::new());
    for _ in 0..1000 {
        inject(&mut sim, s, victim, &claim);
        sim.run_for(Duration::from_millis(1));
    }
    let to_victim: Vec<_> = sim
        .sniffed
        .take()
        .unwrap()
        .into_iter()
        .filter(|d| d.to == victim)
        .collect();
    assert!(
        to_victim.iter().all(|d| !has_auth(&d.payload)),
        "{} AUTHs to the victim",
        to_victim.iter().filter(|d| has_auth(&d.payload)).count()
    );
    assert_eq!(sim.nodes[s].participant.stats().auth_sent_aside, 0);
}
