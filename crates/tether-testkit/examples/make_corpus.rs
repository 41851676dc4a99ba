//! Writes the seed corpus for the fuzz targets (`fuzz/corpus/{datagram,participant}`):
//! a valid datagram of every kind, and a framed conversation with a peer whose endpoints
//! match the participant target's.
use std::path::Path;

use tether_core::Qos;
use tether_wire::*;

fn dg(msgs: &[Submessage<'_>]) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut b = DatagramBuilder::new(
        &mut buf,
        Header {
            domain: 0,
            participant: ParticipantId(0x77),
        },
    );
    for m in msgs {
        b.push(m).unwrap();
    }
    buf
}

/// One conversation between two participants, a datagram per element: discovery, data,
/// heartbeats, acknowledgements, gaps, fragments, a batch, departures.
fn conversation() -> Vec<Vec<u8>> {
    let qos = Qos::new().keep_all().max_samples(32).to_repr();
    let part = Submessage::Participant(ParticipantRepr {
        lease_ms: 10_000,
        name: "peer",
        data_group: None,
    });
    let ep = |entity, kind| {
        Submessage::Endpoint(EndpointRepr {
            entity: EntityId(entity),
            kind,
            qos,
            protection: ProtectionMode::Unannounced,
            encoding: Encoding::Json,
            topic: "/fuzz",
            type_name: "",
            partitions: StrList::Slice(&["a", "b"]),
            description: None,
        })
    };
    let data = |seq| {
        Submessage::Data(DataRepr {
            writer: EntityId(1),
            reader: EntityId(0),
            seq,
            timestamp_ns: 9,
            payload: b"payload",
        })
    };
    let hb = Submessage::Heartbeat(HeartbeatRepr {
        writer: EntityId(1),
        reader: EntityId(0),
        first: 1,
        last: 3,
        count: 1,
        final_: false,
    });
    let mut bitmap = [0u32; 8];
    bitmap[0] = 0b101;
    let an = Submessage::AckNack(AckNackRepr {
        reader: EntityId(2),
        writer: EntityId(1),
        base: 1,
        num_bits: 3,
        bitmap,
        count: 1,
        start_unknown: false,
    });
    let gap = Submessage::Gap(GapRepr {
        writer: EntityId(1),
        reader: EntityId(0),
        start: 2,
        end: 3,
    });
    let frag_bytes = [5u8; 100];
    let frag = |n: u32| {
        Submessage::DataFrag(DataFragRepr {
            writer: EntityId(1),
            reader: EntityId(0),
            seq: 4,
            timestamp_ns: 9,
            sample_size: 250,
            frag_size: 100,
            frag_num: n,
            payload: if n == 2 {
                &frag_bytes[..50]
            } else {
                &frag_bytes
            },
        })
    };
    let mut fb = [0u32; 8];
    fb[0] = 0b11;
    let nack_frag = Submessage::NackFrag(NackFragRepr {
        reader: EntityId(2),
        writer: EntityId(1),
        seq: 1,
        base: 0,
        num_bits: 2,
        bitmap: fb,
        count: 1,
    });
    let mut entries = Vec::new();
    push_batch_entry(&mut entries, 11, b"first");
    push_batch_entry(&mut entries, 12, b"second");
    push_batch_entry(&mut entries, 13, b"");
    let batch = Submessage::Batch(BatchRepr {
        writer: EntityId(1),
        reader: EntityId(0),
        first_seq: 5,
        count: 3,
        entries: &entries,
    });
    vec![
        dg(&[
            part,
            ep(1, EndpointKind::Writer),
            ep(2, EndpointKind::Reader),
        ]),
        dg(&[hb]),
        dg(&[data(1)]),
        dg(&[data(3), gap]),
        dg(&[an]),
        dg(&[frag(0)]),
        dg(&[frag(2)]),
        dg(&[hb, frag(1)]),
        dg(&[nack_frag]),
        dg(&[batch]),
        dg(&[Submessage::EndpointBye(EntityId(1))]),
        dg(&[Submessage::ParticipantBye]),
    ]
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let conversation = conversation();
    let d = root.join("datagram");
    std::fs::create_dir_all(&d).unwrap();
    for (i, c) in conversation.iter().enumerate() {
        std::fs::write(d.join(format!("seed-{i}")), c).unwrap();
    }
    // A sealed batch (secure realms), behind a heartbeat, as a writer sends it.
    let tag = [7u8; 16];
    let sealed = [3u8; 40];
    let sealed_batch = dg(&[
        Submessage::Heartbeat(HeartbeatRepr {
            writer: EntityId(1),
            reader: EntityId(0),
            first: 1,
            last: 3,
            count: 2,
            final_: false,
        }),
        Submessage::SealedBatch(SealedBatchRepr {
            writer: EntityId(1),
            reader: EntityId(0),
            first_seq: 1,
            count: 3,
            epoch: 1,
            tag: &tag,
            ciphertext: &sealed,
        }),
    ]);
    std::fs::write(d.join("seed-sealed-batch"), sealed_batch).unwrap();
    // An endpoint of a secure realm: its topic id, its protection mode, and its name and
    // type sealed for members (`docs/wire.md#endpoint`).
    let id = format!("#{}", "ab".repeat(32));
    let description = [5u8; 60];
    let secure_endpoint = dg(&[Submessage::Endpoint(EndpointRepr {
        entity: EntityId(3),
        kind: EndpointKind::Writer,
        qos: Qos::new().to_repr(),
        protection: ProtectionMode::EncryptSign,
        encoding: Encoding::Cbor,
        topic: &id,
        type_name: "",
        partitions: StrList::Slice(&[]),
        description: Some(&description),
    })]);
    std::fs::write(d.join("seed-secure-endpoint"), secure_endpoint).unwrap();
    // A REFUSAL (secure realms): a peer's credential refused, and why
    // (`docs/wire.md#refusal`).
    let signature = [6u8; 64];
    let refusal = dg(&[Submessage::Refusal(RefusalRepr {
        to: ParticipantId(0x1234),
        challenge: [8u8; 32],
        reason: RefusalReason::Revoked { serial: 4, list: 2 },
        signature: &signature,
    })]);
    std::fs::write(d.join("seed-refusal"), refusal).unwrap();
    // An endpoint description's plaintext, for the layouts target.
    let plain = description_plaintext("/cmd_vel", "geometry_msgs/Twist").unwrap();
    std::fs::write(root.join("layouts").join("seed-description"), plain).unwrap();
    let p = root.join("participant");
    std::fs::create_dir_all(&p).unwrap();
    let mut framed = Vec::new();
    for c in &conversation {
        assert!(c.len() < 256);
        framed.push(c.len() as u8);
        framed.extend_from_slice(c);
    }
    std::fs::write(p.join("seed-conversation"), &framed).unwrap();
    println!("wrote seeds to {}", root.display());
}
