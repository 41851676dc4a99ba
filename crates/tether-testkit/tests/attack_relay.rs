//! An outsider without keys who relays the members' datagrams between addresses, the way the
//! outsider review took over two members' addresses with a plain UDP relay and no sniffing:
//! it announces invented ids to a member, which challenges it; that challenge, relayed to the
//! other member, looked like an authenticated datagram of the first from a new address, and
//! the rest followed (the challenge of the new address and its answer, relayed in turn).
//! After it, both members sent everything to the relay, which could drop it.
//!
//! What must hold: no member's address moves to the relay; the stream is delivered whole.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tether_core::{ParticipantId, Qos};
use tether_testkit::realm::{Realm, forged, info, inject};
use tether_testkit::{Link, Sim};
use tether_wire::{ParticipantRepr, Submessage};

fn relay() -> SocketAddr {
    "10.66.6.6:7400".parse().unwrap()
}

/// A writer (node 0) and a reader (node 1) of one realm, matched, on a LAN-like link.
fn members(seed: u64) -> (Sim, tether_core::EntityId, tether_core::EntityId) {
    let mut sim = Sim::new(seed, Link::lan(1500, 0.0));
    sim.sniffed = Some(Vec::new());
    let realm = Realm::new();
    let a = realm.member(&mut sim, 1, "robot");
    let b = realm.member(&mut sim, 2, "viewer");
    let now = sim.now;
    let wid = sim
        .p(a)
        .create_writer(now, info("/cmd", Qos::new().keep_all()))
        .unwrap();
    let rid = sim
        .p(b)
        .create_reader(now, info("/cmd", Qos::new().keep_all()));
    sim.pump(a);
    sim.pump(b);
    assert!(sim.run_until(Duration::from_secs(10), |s| {
        s.nodes[a].participant.matched_count(wid) == 1
            && s.nodes[b].participant.matched_count(rid) == 1
    }));
    (sim, wid, rid)
}

/// Where node `i` believes participant `pid` is.
fn address_of(sim: &Sim, i: usize, pid: ParticipantId) -> Option<SocketAddr> {
    sim.nodes[i]
        .participant
        .remote_participants()
        .into_iter()
        .find(|(p, _, _)| *p == pid)
        .map(|(_, _, a)| a)
}

/// The relay's turn: every datagram a member sent to the relay's address goes on to the
/// other member, from the relay's address; and, every `announce` calls, a PARTICIPANT under
/// a fresh invented id to each member, from the relay, which makes them challenge it.
struct Relay {
    next_id: u64,
    turns: u64,
    relayed: u64,
}

impl Relay {
    fn turn(&mut self, sim: &mut Sim) {
        self.turns += 1;
        if self.turns % 20 == 1 {
            for to in [0, 1] {
                self.next_id += 1;
                let d = forged(
                    ParticipantId(0xbad0_0000 + self.next_id),
                    &[Submessage::Participant(ParticipantRepr {
                        lease_ms: 10_000,
                        name: "",
                        data_group: None,
                    })],
                );
                inject(sim, to, relay(), &d);
            }
        }
        loop {
            let seen = std::mem::take(sim.sniffed.as_mut().unwrap());
            if seen.is_empty() {
                return;
            }
            for d in seen.into_iter().filter(|d| d.to == relay()) {
                let other = if d.from == sim.nodes[0].addr { 1 } else { 0 };
                self.relayed += 1;
                inject(sim, other, relay(), &d.payload);
            }
        }
    }
}

/// The off-path relay, while the writer streams: no address moves, every sample arrives.
#[test]
fn address_takeover_a_relay_of_challenges_moves_no_one() {
    for seed in [61u64, 62] {
        let (mut sim, wid, rid) = members(seed);
        let (a_id, b_id) = (sim.nodes[0].participant.id(), sim.nodes[1].participant.id());
        let (a_addr, b_addr) = (sim.nodes[0].addr, sim.nodes[1].addr);
        let mut r = Relay {
            next_id: seed << 20,
            turns: 0,
            relayed: 0,
        };
        let n = 200u64;
        for k in 0..n {
            let now = sim.now;
            sim.p(0)
                .write(now, wid, k, Bytes::from(k.to_le_bytes().to_vec()))
                .unwrap();
            sim.pump(0);
            let until = sim.now + Duration::from_millis(10);
            while sim.now < until {
                r.turn(&mut sim);
                if !sim.step() {
                    break;
                }
            }
        }
        // And quiet for a while: a peer that says nothing for more than a second.
        let until = sim.now + Duration::from_secs(3);
        while sim.now < until {
            r.turn(&mut sim);
            if !sim.step() {
                break;
            }
        }
        assert!(
            r.relayed > 0,
            "seed {seed}: the members sent the relay nothing"
        );
        assert_eq!(address_of(&sim, 1, a_id), Some(a_addr), "seed {seed}");
        assert_eq!(address_of(&sim, 0, b_id), Some(b_addr), "seed {seed}");
        for i in [0, 1] {
            assert_eq!(
                sim.nodes[i].participant.stats().addresses_moved,
                0,
                "seed {seed}: node {i} moved a peer"
            );
        }
        assert!(
            sim.run_until(Duration::from_secs(10), |s| s.seqs(1, rid).len()
                == n as usize)
        );
        assert_eq!(sim.seqs(1, rid), (1..=n).collect::<Vec<_>>());
    }
}

/// A host that sees the traffic (on Wi-Fi, say) copies a member's datagram to the other
/// member from its own address, ahead of the genuine one, then relays whatever comes back:
/// while the member is heard at its own address it is not followed; when it has been quiet
/// for over a second, the challenge of the new address is answered only from the member's
/// real address, so it never moves there either.
#[test]
fn address_takeover_a_sniffer_racing_copies_moves_no_one() {
    let (mut sim, wid, rid) = members(63);
    let a_id = sim.nodes[0].participant.id();
    let a_addr = sim.nodes[0].addr;
    let mut relayed = 0u64;
    let mut race = |sim: &mut Sim| loop {
        let seen = std::mem::take(sim.sniffed.as_mut().unwrap());
        if seen.is_empty() {
            return;
        }
        for d in seen {
            if d.from == sim.nodes[0].addr && d.to == sim.nodes[1].addr {
                // A's datagram to B: B gets a copy from the sniffer's address first.
                inject(sim, 1, relay(), &d.payload);
            } else if d.to == relay() {
                let other = if d.from == sim.nodes[0].addr { 1 } else { 0 };
                relayed += 1;
                inject(sim, other, relay(), &d.payload);
            }
        }
    };
    let mut k = 0u64;
    for round in 0..4 {
        // A stream, then (from the second round) over a second of silence.
        for _ in 0..20 {
            let now = sim.now;
            sim.p(0)
                .write(now, wid, k, Bytes::from(k.to_le_bytes().to_vec()))
                .unwrap();
            k += 1;
            sim.pump(0);
            let until = sim.now + Duration::from_millis(5);
            while sim.now < until {
                race(&mut sim);
                if !sim.step() {
                    break;
                }
            }
        }
        if round > 0 {
            let until = sim.now + Duration::from_millis(1500);
            while sim.now < until {
                race(&mut sim);
                if !sim.step() {
                    break;
                }
            }
        }
    }
    assert_eq!(address_of(&sim, 1, a_id), Some(a_addr));
    assert_eq!(sim.nodes[1].participant.stats().addresses_moved, 0);
    assert!(
        sim.nodes[1].participant.stats().moves_refused > 0,
        "the racing copies were not even seen"
    );
    assert!(
        sim.run_until(Duration::from_secs(10), |s| s.seqs(1, rid).len()
            == k as usize)
    );
    let _ = relayed;
}

/// Before two members first speak, a forger fills each one's address, at the other, with
/// invented ids (spoofed from it), so neither can validate the other until those expire.
/// Each member's answer to the other's challenge used to carry a new challenge of its own:
/// they challenged each other without end (400,000 challenges each, 10 MB/s, in the outsider
/// review). Now an id its address has no room for is not challenged: a few datagrams, then
/// they meet once the invented ids expire.
#[test]
fn table_exhaustion_filled_addresses_do_not_make_members_challenge_each_other_forever() {
    let mut sim = Sim::new(64, Link::lan(1500, 0.0));
    let realm = Realm::new();
    let a = realm.member(&mut sim, 1, "robot");
    let b = realm.member(&mut sim, 2, "viewer");
    let (a_addr, b_addr) = (sim.nodes[a].addr, sim.nodes[b].addr);
    let mut id = 0xfa4e_0000u64;
    for _ in 0..tether_core::MAX_IDS_PER_ADDRESS {
        for (to, spoofed) in [(b, a_addr), (a, b_addr)] {
            id += 1;
            let d = forged(
                ParticipantId(id),
                &[Submessage::Participant(ParticipantRepr {
                    lease_ms: 10_000,
                    name: "",
                    data_group: None,
                })],
            );
            inject(&mut sim, to, spoofed, &d);
        }
    }
    let now = sim.now;
    let wid = sim
        .p(a)
        .create_writer(now, info("/cmd", Qos::new().keep_all()))
        .unwrap();
    let rid = sim
        .p(b)
        .create_reader(now, info("/cmd", Qos::new().keep_all()));
    sim.pump(a);
    sim.pump(b);
    sim.run_for(Duration::from_secs(3));
    for i in [a, b] {
        let c = sim.nodes[i].participant.stats().challenges_sent;
        assert!(c < 200, "node {i} sent {c} challenges in 3 s");
    }
    // Once the invented ids expire (5 s after they were heard), the members meet.
    assert!(sim.run_until(Duration::from_secs(15), |s| {
        s.nodes[a].participant.matched_count(wid) == 1
            && s.nodes[b].participant.matched_count(rid) == 1
    }));
}

/// Forged sealed datagrams under a writer's id naming its next epoch (whose key a reader
/// would hold them for): at most a quarter of the budget and 1,024 of them are held for that
/// writer, whatever comes, and all of them go after 500 ms.
#[test]
fn preauth_memory_forged_next_epoch_datagrams_are_held_within_bounds() {
    let (mut sim, wid, rid) = members(65);
    let a_id = sim.nodes[0].participant.id();
    let a_addr = sim.nodes[0].addr;
    let tag = [7u8; 16];
    let ct = [1u8; 12 + 16];
    let n = 5_000u64;
    for k in 0..n {
        let d = forged(
            a_id,
            &[Submessage::SealedBatch(tether_wire::SealedBatchRepr {
                writer: wid,
                reader: tether_core::EntityId::ALL,
                first_seq: 1_000 + k,
                count: 1,
                epoch: 2,
                tag: &tag,
                ciphertext: &ct,
            })],
        );
        inject(&mut sim, 1, if k % 2 == 0 { a_addr } else { relay() }, &d);
    }
    let st = sim.nodes[1].participant.stats().clone();
    assert!(st.held_for_key <= 1024, "{} held", st.held_for_key);
    assert_eq!(st.held_for_key + st.no_key, n);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.nodes[1].participant.stats().no_key, n);
    // The writer's stream goes on.
    let now = sim.now;
    sim.p(0)
        .write(now, wid, 1, Bytes::from_static(b"after"))
        .unwrap();
    sim.pump(0);
    assert!(sim.run_until(Duration::from_secs(5), |s| s.seqs(1, rid).len() == 1));
}

/// Both members change address at the same moment (two robots roaming to a new network
/// together, no router), or an outsider that held both members' ids at addresses of its
/// own, as their relay, stops relaying (the third outsider review). Each hears the other
/// from a new address and challenges it; the answer to a challenge goes where the
/// challenged member knows the other, which is gone, unless it is itself challenging the
/// other at the address the challenge came from: then it answers there too. They find
/// each other again and the stream goes on. (Before: each answered into the void, for as
/// long as both ran, while the other's announcements kept its lease alive.)
#[test]
fn two_members_that_move_at_once_find_each_other() {
    for seed in [71u64, 72] {
        let (mut sim, wid, rid) = members(seed);
        let (a_id, b_id) = (sim.nodes[0].participant.id(), sim.nodes[1].participant.id());
        let write = |sim: &mut Sim, ks: std::ops::Range<u64>| {
            for k in ks {
                let now = sim.now;
                sim.p(0)
                    .write(now, wid, k, Bytes::from(k.to_le_bytes().to_vec()))
                    .unwrap();
                sim.pump(0);
                sim.run_for(Duration::from_millis(10));
            }
        };
        write(&mut sim, 0..20);
        let (a2, b2): (SocketAddr, SocketAddr) = (
            "10.70.0.1:7400".parse().unwrap(),
            "10.70.0.2:7400".parse().unwrap(),
        );
        sim.nodes[0].addr = a2;
        sim.nodes[1].addr = b2;
        // Each one's announcements reach the other through the LAN's discovery group, from
        // its new address (a datagram to an address where no participant is known is
        // tagged for nobody: only a group's reach both).
        let group: SocketAddr = "239.255.0.1:7400".parse().unwrap();
        for i in [0, 1] {
            sim.nodes[i].groups.push(group);
            sim.p(i).add_target(group);
        }
        write(&mut sim, 20..40);
        assert!(
            sim.run_until(Duration::from_secs(15), |s| s.seqs(1, rid).len() == 40),
            "seed {seed}: {} of 40 delivered",
            sim.seqs(1, rid).len()
        );
        assert_eq!(sim.seqs(1, rid), (1..=40).collect::<Vec<_>>());
        assert_eq!(address_of(&sim, 1, a_id), Some(a2), "seed {seed}");
        assert_eq!(address_of(&sim, 0, b_id), Some(b2), "seed {seed}");
    }
}
