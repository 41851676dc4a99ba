//! Security submessages: AUTH, KEY, SEALED, BATCH_SIG, SEALED_BATCH, REFUSAL: layouts,
//! round trips and the values they refuse.

use super::*;
use crate::tests::{header, roundtrip};
use proptest::prelude::*;

#[test]
fn auth_bad_values() {
    let cred = [5u8; 10];
    let ok = AuthRepr {
        to: ParticipantId(9),
        challenge: [1; 32],
        response: None,
        verified_you: false,
        you_verified_me: false,
        control_key: None,
        have_epoch: 0,
        credential: &cred,
    };
    let mut body = Vec::new();
    Submessage::Auth(ok).emit_body(&mut body).unwrap();
    // to = 0
    let mut b = body.clone();
    b[..8].copy_from_slice(&0u64.to_le_bytes());
    assert!(Submessage::parse(0x0C, &b).is_err());
    // unknown flag bits
    let mut b = body.clone();
    b[40] = 16;
    assert!(Submessage::parse(0x0C, &b).is_err());
    // credential length 0, or longer than the limit
    let empty = AuthRepr {
        credential: &[],
        ..ok
    };
    assert!(Submessage::Auth(empty).emit_body(&mut Vec::new()).is_err());
    let mut b = body.clone();
    b[45..47].copy_from_slice(&5000u16.to_le_bytes());
    assert!(Submessage::parse(0x0C, &b).is_err());
    // trailing bytes
    let mut b = body.clone();
    b.push(0);
    assert!(Submessage::parse(0x0C, &b).is_err());
    // the signed bytes bind the challenge and both ids, in order
    let x = auth_signed_bytes(&[1; 32], ParticipantId(1), ParticipantId(2));
    assert_ne!(
        x,
        auth_signed_bytes(&[1; 32], ParticipantId(2), ParticipantId(1))
    );
    assert_ne!(
        x,
        auth_signed_bytes(&[2; 32], ParticipantId(1), ParticipantId(2))
    );
}

proptest! {
    #[test]
    fn key_roundtrip(
        w in 1u32.., r in 1u32.., epoch in 1u32.., suite in any::<u8>(),
        wrapped in proptest::collection::vec(any::<u8>(), 1..256),
    ) {
        let k = KeyRepr { writer: EntityId(w), reader: EntityId(r), epoch, suite, wrapped: &wrapped };
        let q = KeyRequestRepr { reader: EntityId(r), writer: EntityId(w), epoch };
        roundtrip(&[Submessage::Key(k), Submessage::KeyRequest(q)]);
    }
}

#[test]
fn key_bad_values() {
    let k = KeyRepr {
        writer: EntityId(1),
        reader: EntityId(2),
        epoch: 1,
        suite: 1,
        wrapped: &[9; 60],
    };
    let mut body = Vec::new();
    Submessage::Key(k).emit_body(&mut body).unwrap();
    for cut in 0..body.len() {
        assert!(Submessage::parse(0x0D, &body[..cut]).is_err(), "cut {cut}");
    }
    let mut b = body.clone();
    b[8..12].copy_from_slice(&0u32.to_le_bytes());
    assert!(Submessage::parse(0x0D, &b).is_err(), "epoch 0");
    assert!(
        Submessage::Key(KeyRepr { wrapped: &[], ..k })
            .emit_body(&mut Vec::new())
            .is_err()
    );
    assert!(
        Submessage::Key(KeyRepr {
            wrapped: &[0; 256],
            ..k
        })
        .emit_body(&mut Vec::new())
        .is_err()
    );
}

proptest! {
    #[test]
    fn sealed_roundtrip(
        to in any::<u64>(), counter in 1u64..,
        sealed in proptest::collection::vec(any::<u8>(), 16..2000),
    ) {
        let x = SealedRepr { to: ParticipantId(to), counter, sealed: &sealed };
        roundtrip(&[Submessage::Sealed(x)]);
    }
}

#[test]
fn sealed_bad_values() {
    let x = SealedRepr {
        to: ParticipantId(7),
        counter: 1,
        sealed: &[5; 40],
    };
    let mut body = Vec::new();
    Submessage::Sealed(x).emit_body(&mut body).unwrap();
    // Anything shorter than the fixed part and a tag is refused.
    for cut in 0..SEALED_FIXED_LEN + 16 {
        assert!(Submessage::parse(0x0F, &body[..cut]).is_err(), "cut {cut}");
    }
    let mut b = body.clone();
    b[8..16].copy_from_slice(&0u64.to_le_bytes());
    assert!(Submessage::parse(0x0F, &b).is_err(), "counter 0");
    assert!(
        Submessage::Sealed(SealedRepr { counter: 0, ..x })
            .emit_body(&mut Vec::new())
            .is_err()
    );
    assert!(
        Submessage::Sealed(SealedRepr {
            sealed: &[0; 15],
            ..x
        })
        .emit_body(&mut Vec::new())
        .is_err()
    );
}

#[test]
fn participant_data_group_must_be_multicast_and_whole() {
    let p = ParticipantRepr {
        lease_ms: 1000,
        name: "n",
        data_group: Some("239.255.0.1:7400".parse().unwrap()),
    };
    let mut body = Vec::new();
    Submessage::Participant(p).emit_body(&mut body).unwrap();
    assert_eq!(
        Submessage::parse(0x01, &body).unwrap(),
        Submessage::Participant(p)
    );
    // A unicast address, or a cut group, is refused.
    let mut b = body.clone();
    let at = b.len() - 6;
    b[at] = 10;
    assert!(Submessage::parse(0x01, &b).is_err());
    for cut in 1..6 {
        assert!(Submessage::parse(0x01, &body[..body.len() - cut]).is_err());
    }
    assert!(
        Submessage::Participant(ParticipantRepr {
            data_group: Some("10.0.0.1:7400".parse().unwrap()),
            ..p
        })
        .emit_body(&mut Vec::new())
        .is_err()
    );
}

proptest! {
    #[test]
    fn batch_sig_roundtrip(w in 1u32.., first in 1u64.., count in 1u32.., sig in any::<[u8; 32]>()) {
        let mut signature = [0u8; 64];
        signature[..32].copy_from_slice(&sig);
        signature[32..].copy_from_slice(&sig);
        let b = BatchSigRepr { writer: EntityId(w), first_seq: first, count, signature: &signature };
        roundtrip(&[Submessage::BatchSig(b)]);
    }
}

#[test]
fn batch_sig_bad_values() {
    let b = BatchSigRepr {
        writer: EntityId(3),
        first_seq: 9,
        count: 4,
        signature: &[7; 64],
    };
    let mut body = Vec::new();
    Submessage::BatchSig(b).emit_body(&mut body).unwrap();
    assert_eq!(body.len(), 80);
    for cut in 0..body.len() {
        assert!(Submessage::parse(0x10, &body[..cut]).is_err(), "cut {cut}");
    }
    let mut long = body.clone();
    long.push(0);
    assert!(Submessage::parse(0x10, &long).is_err(), "trailing byte");
    for (at, what) in [(0usize, "writer"), (4, "first_seq"), (12, "count")] {
        let mut z = body.clone();
        let n = if at == 4 { 8 } else { 4 };
        z[at..at + n].fill(0);
        assert!(Submessage::parse(0x10, &z).is_err(), "{what} 0");
    }
}

/// SKIPPED is kind 0x17 with a 20-byte body (reader, writer, count, skipped, little
/// endian): a receiver of an earlier version skips it as an unknown kind and still takes the
/// ACKNACK before it; a short or long body is malformed.
#[test]
fn skipped_layout() {
    let x = SkippedRepr {
        reader: EntityId(2),
        writer: EntityId(1),
        count: 7,
        skipped: 0x0102_0304_0506_0708,
        abandoned: 0x0a0b,
    };
    let mut buf = Vec::new();
    DatagramBuilder::new(&mut buf, header())
        .push(&Submessage::Skipped(x))
        .unwrap();
    assert_eq!(buf[HEADER_LEN], 0x17);
    assert_eq!(buf[HEADER_LEN + 1], 0);
    assert_eq!(buf.len() - HEADER_LEN - SUBMESSAGE_HEADER_LEN, 28);
    assert_eq!(
        buf[HEADER_LEN + SUBMESSAGE_HEADER_LEN..],
        [
            2, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, 0x0b, 0x0a, 0, 0, 0, 0, 0,
            0
        ]
    );
    let body = &buf[HEADER_LEN + SUBMESSAGE_HEADER_LEN..];
    assert_eq!(
        Submessage::parse(0x17, body).unwrap(),
        Submessage::Skipped(x)
    );
    assert!(Submessage::parse(0x17, &body[..27]).is_err());
    let mut long = body.to_vec();
    long.push(0);
    assert!(Submessage::parse(0x17, &long).is_err());
}

/// LINK_EPOCH is kind 0x18 with a 4-byte body (the epoch, little endian, non-zero): a
/// receiver of an earlier version skips it as an unknown kind and still takes the
/// PARTICIPANT before it; a short, long or zero body is malformed.
#[test]
fn link_epoch_layout() {
    let mut buf = Vec::new();
    DatagramBuilder::new(&mut buf, header())
        .push(&Submessage::LinkEpoch(0x0102_0304))
        .unwrap();
    assert_eq!(buf[HEADER_LEN], 0x18);
    assert_eq!(buf[HEADER_LEN + 1], 0);
    let body = &buf[HEADER_LEN + SUBMESSAGE_HEADER_LEN..];
    assert_eq!(body, [4, 3, 2, 1]);
    assert_eq!(
        Submessage::parse(0x18, body).unwrap(),
        Submessage::LinkEpoch(0x0102_0304)
    );
    assert!(Submessage::parse(0x18, &body[..3]).is_err());
    assert!(Submessage::parse(0x18, &[4, 3, 2, 1, 0]).is_err());
    assert!(Submessage::parse(0x18, &[0, 0, 0, 0]).is_err());
}

/// An ACKNACK of a reader that does not know its start sets flag 0x01 in its submessage
/// header (docs/wire.md, ACKNACK); any other ACKNACK leaves the flags 0, and the flag
/// survives a round trip.
#[test]
fn acknack_start_unknown_flag() {
    for (start_unknown, flags) in [(false, 0u8), (true, ACKNACK_START_UNKNOWN)] {
        let an = AckNackRepr {
            reader: EntityId(2),
            writer: EntityId(1),
            base: 1,
            num_bits: 0,
            bitmap: [0; 8],
            count: 7,
            start_unknown,
        };
        let mut buf = Vec::new();
        DatagramBuilder::new(&mut buf, header())
            .push(&Submessage::AckNack(an))
            .unwrap();
        assert_eq!(buf[HEADER_LEN], SubmessageKind::AckNack as u8);
        assert_eq!(buf[HEADER_LEN + 1], flags);
        let d = Datagram::parse(&buf).unwrap();
        let got: Vec<_> = d.submessages().map(|m| m.unwrap()).collect();
        assert_eq!(got, vec![Submessage::AckNack(an)]);
    }
    assert_eq!(ACKNACK_START_UNKNOWN, 0x01);
}

proptest! {
    #[test]
    fn sealed_batch_roundtrip(
        writer in 1u32.., reader in any::<u32>(), first_seq in 1u64..(u64::MAX / 2),
        count in 1u32..50, epoch in 1u32.., tag in any::<[u8; 16]>(),
        extra in proptest::collection::vec(any::<u8>(), 0..2000),
    ) {
        let mut ciphertext = vec![3u8; count as usize * BATCH_ENTRY_OVERHEAD];
        ciphertext.extend_from_slice(&extra);
        let x = SealedBatchRepr {
            writer: EntityId(writer),
            reader: EntityId(reader),
            first_seq,
            count,
            epoch,
            tag: &tag,
            ciphertext: &ciphertext,
        };
        roundtrip(&[Submessage::SealedBatch(x)]);
        // Built by head and scatter-gather as the writer does: the same bytes.
        let mut whole = Vec::new();
        DatagramBuilder::new(&mut whole, header()).push(&Submessage::SealedBatch(x)).unwrap();
        let mut head = Vec::new();
        DatagramBuilder::new(&mut head, header())
            .push_sealed_batch_head(&x, ciphertext.len())
            .unwrap();
        // The ciphertext starts right after the head, seen from the head or the whole.
        prop_assert_eq!(sealed_batch_ciphertext(&head, whole.len()), Some(head.len()));
        prop_assert_eq!(sealed_batch_ciphertext(&whole, whole.len()), Some(head.len()));
        head.extend_from_slice(&ciphertext);
        prop_assert_eq!(head, whole);
    }
}

#[test]
fn sealed_batch_bad_values() {
    let tag = [9u8; 16];
    let x = SealedBatchRepr {
        writer: EntityId(3),
        reader: EntityId::ALL,
        first_seq: 10,
        count: 2,
        epoch: 4,
        tag: &tag,
        ciphertext: &[1; 30],
    };
    let mut body = Vec::new();
    Submessage::SealedBatch(x).emit_body(&mut body).unwrap();
    assert!(Submessage::parse(0x15, &body).is_ok());
    // Shorter than the fixed part and `count` entry heads: refused.
    for cut in 0..SEALED_BATCH_FIXED_LEN + 24 {
        assert!(Submessage::parse(0x15, &body[..cut]).is_err(), "cut {cut}");
    }
    let set = |at: usize, v: &[u8]| {
        let mut b = body.clone();
        b[at..at + v.len()].copy_from_slice(v);
        b
    };
    for (what, b) in [
        ("writer 0", set(0, &0u32.to_le_bytes())),
        ("first_seq 0", set(8, &0u64.to_le_bytes())),
        ("count 0", set(16, &0u32.to_le_bytes())),
        ("count overflows", set(8, &(u64::MAX - 1).to_le_bytes())),
        ("count beyond the bytes", set(16, &3u32.to_le_bytes())),
        ("epoch 0", set(20, &0u32.to_le_bytes())),
    ] {
        assert!(Submessage::parse(0x15, &b).is_err(), "{what}");
    }
    for bad in [
        SealedBatchRepr { epoch: 0, ..x },
        SealedBatchRepr { count: 0, ..x },
        SealedBatchRepr {
            ciphertext: &[0; 23],
            ..x
        },
    ] {
        assert!(
            Submessage::SealedBatch(bad)
                .emit_body(&mut Vec::new())
                .is_err()
        );
    }
}

/// Only a datagram whose last submessage is a SEALED_BATCH authenticates itself (and has no
/// AUTH_TAG): one followed by anything, or any other last submessage, does not.
#[test]
fn only_a_datagram_ending_with_a_sealed_batch_authenticates_itself() {
    let tag = [9u8; 16];
    let ct = [1u8; 40];
    let x = SealedBatchRepr {
        writer: EntityId(3),
        reader: EntityId::ALL,
        first_seq: 10,
        count: 2,
        epoch: 4,
        tag: &tag,
        ciphertext: &ct,
    };
    let hb = Submessage::Heartbeat(HeartbeatRepr {
        writer: EntityId(3),
        reader: EntityId::ALL,
        first: 1,
        last: 11,
        count: 1,
        final_: false,
    });
    let mut last = Vec::new();
    DatagramBuilder::new(&mut last, header())
        .push(&hb)
        .unwrap()
        .push(&Submessage::SealedBatch(x))
        .unwrap();
    let start = last.len() - ct.len();
    assert_eq!(sealed_batch_ciphertext(&last, last.len()), Some(start));
    let mut not_last = Vec::new();
    DatagramBuilder::new(&mut not_last, header())
        .push(&Submessage::SealedBatch(x))
        .unwrap()
        .push(&hb)
        .unwrap();
    assert_eq!(sealed_batch_ciphertext(&not_last, not_last.len()), None);
    let mut plain = Vec::new();
    DatagramBuilder::new(&mut plain, header())
        .push(&hb)
        .unwrap();
    assert_eq!(sealed_batch_ciphertext(&plain, plain.len()), None);
    // A length that runs past the covered bytes, or a header cut short: covered whole.
    assert_eq!(sealed_batch_ciphertext(&last, last.len() - 1), None);
    assert_eq!(
        sealed_batch_ciphertext(&last[..HEADER_LEN + 2], last.len()),
        None
    );
    // A prefix that stops before the ciphertext cannot name it.
    assert_eq!(
        sealed_batch_ciphertext(&last[..start - 1], last.len()),
        None
    );
}

#[test]
fn batch_from_entries_checks_them_as_a_batch() {
    let mut e = Vec::new();
    push_batch_entry(&mut e, 5, b"ab");
    push_batch_entry(&mut e, 6, b"");
    let b = BatchRepr::from_entries(EntityId(1), EntityId::ALL, 7, 2, &e).unwrap();
    let got: Vec<_> = b.samples().collect();
    assert_eq!(got, vec![(7, 5, &b"ab"[..]), (8, 6, &b""[..])]);
    assert!(BatchRepr::from_entries(EntityId(1), EntityId::ALL, 7, 3, &e).is_err());
    assert!(BatchRepr::from_entries(EntityId(1), EntityId::ALL, 7, 1, &e).is_err());
    assert!(BatchRepr::from_entries(EntityId(1), EntityId::ALL, 0, 2, &e).is_err());
    assert!(BatchRepr::from_entries(EntityId(0), EntityId::ALL, 7, 2, &e).is_err());
    assert!(BatchRepr::from_entries(EntityId(1), EntityId::ALL, u64::MAX, 2, &e).is_err());
    assert!(BatchRepr::from_entries(EntityId(1), EntityId::ALL, 7, 2, &e[..e.len() - 1]).is_err());
}

proptest! {
    /// A REFUSAL round-trips for every defined reason; every truncation and any trailing
    /// byte is refused.
    #[test]
    fn refusal_roundtrip_and_truncations(
        to in 1u64..,
        challenge in any::<[u8; 32]>(),
        code in 1u8..=4,
        a in any::<u64>(),
        b in any::<u64>(),
        signature in any::<[u8; 64]>(),
        cut in 0usize..REFUSAL_LEN,
    ) {
        let reason = RefusalReason::from_parts(code, a, b);
        let r = RefusalRepr { to: ParticipantId(to), challenge, reason, signature: &signature };
        roundtrip(&[Submessage::Refusal(r)]);
        let mut body = Vec::new();
        Submessage::Refusal(r).emit_body(&mut body).unwrap();
        prop_assert_eq!(body.len(), REFUSAL_LEN);
        prop_assert!(Submessage::parse(0x16, &body[..cut]).is_err());
        body.push(0);
        prop_assert!(Submessage::parse(0x16, &body).is_err());
    }
}

/// REFUSAL's bytes: `to` 0 is malformed; a code this version does not define reads as
/// "other" (its values dropped); the signed bytes bind the challenge, both ids and the
/// reason.
#[test]
fn refusal_layout_and_signed_bytes() {
    let sig = [9u8; 64];
    let r = RefusalRepr {
        to: ParticipantId(5),
        challenge: [1; 32],
        reason: RefusalReason::Revoked { serial: 4, list: 2 },
        signature: &sig,
    };
    let mut body = Vec::new();
    Submessage::Refusal(r).emit_body(&mut body).unwrap();
    assert_eq!(&body[..8], &5u64.to_le_bytes());
    assert_eq!(body[40], 1, "code: revoked");
    assert_eq!(&body[41..49], &4u64.to_le_bytes());
    assert_eq!(&body[49..57], &2u64.to_le_bytes());
    assert_eq!(&body[57..], &sig);
    let mut b = body.clone();
    b[..8].copy_from_slice(&0u64.to_le_bytes());
    assert_eq!(Submessage::parse(0x16, &b), Err(Error::BadValue("to")));
    let mut b = body.clone();
    b[40] = 200;
    match Submessage::parse(0x16, &b) {
        Ok(Submessage::Refusal(x)) => assert_eq!(x.reason, RefusalReason::Other),
        other => panic!("{other:?}"),
    }
    let zero = RefusalRepr {
        to: ParticipantId(0),
        ..r
    };
    assert!(
        Submessage::Refusal(zero)
            .emit_body(&mut Vec::new())
            .is_err()
    );
    let s = refusal_signed_bytes(&[1; 32], ParticipantId(7), ParticipantId(5), r.reason);
    assert!(s.starts_with(b"tether refusal v1"));
    for other in [
        refusal_signed_bytes(&[2; 32], ParticipantId(7), ParticipantId(5), r.reason),
        refusal_signed_bytes(&[1; 32], ParticipantId(5), ParticipantId(7), r.reason),
        refusal_signed_bytes(
            &[1; 32],
            ParticipantId(7),
            ParticipantId(5),
            RefusalReason::Other,
        ),
        refusal_signed_bytes(
            &[1; 32],
            ParticipantId(7),
            ParticipantId(5),
            RefusalReason::Revoked { serial: 4, list: 3 },
        ),
    ] {
        assert_ne!(s, other);
    }
}
