use super::*;
use proptest::prelude::*;

pub(crate) fn header() -> Header {
    Header {
        domain: 7,
        participant: ParticipantId(0xdead_beef),
    }
}

pub(crate) fn roundtrip(msgs: &[Submessage<'_>]) {
    let mut buf = Vec::new();
    let mut b = DatagramBuilder::new(&mut buf, header());
    for m in msgs {
        b.push(m).unwrap();
    }
    let d = Datagram::parse(&buf).unwrap();
    assert_eq!(d.header(), header());
    let parsed: Vec<_> = d.submessages().collect::<Result<_, _>>().unwrap();
    assert_eq!(parsed.as_slice(), msgs);
}

fn arb_qos() -> impl Strategy<Value = QosRepr> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        1u32..,
        any::<u32>(),
        any::<u64>(),
        (1u64.., 1u64.., 1u64..),
    )
        .prop_map(|(r, d, h, depth, ms, mb, (dl, ls, le))| QosRepr {
            reliability: if r {
                Reliability::Reliable
            } else {
                Reliability::BestEffort
            },
            durability: if d {
                Durability::TransientLocal
            } else {
                Durability::Volatile
            },
            history: if h {
                HistoryKind::KeepAll
            } else {
                HistoryKind::KeepLast
            },
            depth,
            max_samples: ms,
            max_bytes: mb,
            deadline_us: dl,
            lifespan_us: ls,
            liveliness: Liveliness::Automatic,
            lease_us: le,
        })
}

proptest! {
    #[test]
    fn participant_roundtrip(
        lease in 1u32.., name in "[a-z0-9/_]{0,40}",
        group in proptest::option::of((224u8..240, any::<[u8; 3]>(), any::<u16>())),
    ) {
        let data_group = group.map(|(a, [b, c, d], port)| {
            core::net::SocketAddrV4::new(core::net::Ipv4Addr::new(a, b, c, d), port)
        });
        roundtrip(&[Submessage::Participant(ParticipantRepr { lease_ms: lease, name: &name, data_group })]);
        roundtrip(&[Submessage::Participant(ParticipantRepr { lease_ms: lease, name: &name, data_group }), Submessage::LinkEpoch(lease)]);
        roundtrip(&[Submessage::ParticipantBye]);
    }

    #[test]
    fn endpoint_roundtrip(
        entity in 1u32..,
        writer in any::<bool>(),
        qos in arb_qos(),
        topic in "/[a-z_/]{1,60}",
        ty in "[a-zA-Z:_]{0,40}",
        parts in proptest::collection::vec("[a-z]{0,10}", 0..MAX_PARTITIONS),
        protection in 0u8..=4,
        encoding in 0u8..=5,
        description in proptest::option::of(
            proptest::collection::vec(any::<u8>(), DESCRIPTION_OVERHEAD..400)
        ),
    ) {
        let refs: Vec<&str> = parts.iter().map(|s| s.as_str()).collect();
        let e = EndpointRepr {
            entity: EntityId(entity),
            kind: if writer { EndpointKind::Writer } else { EndpointKind::Reader },
            qos,
            protection: ProtectionMode::from_u8(protection).unwrap(),
            encoding: Encoding::from_u8(encoding),
            topic: &topic,
            type_name: &ty,
            partitions: StrList::Slice(&refs),
            description: description.as_deref(),
        };
        roundtrip(&[Submessage::Endpoint(e), Submessage::EndpointBye(EntityId(entity))]);
    }

    #[test]
    fn data_heartbeat_gap_roundtrip(
        w in 1u32.., r in any::<u32>(), seq in 1u64..u64::MAX, ts in any::<u64>(),
        payload in proptest::collection::vec(any::<u8>(), 0..2000),
        first in 1u64..1_000_000, n in 0u64..1000, count in any::<u32>(), final_ in any::<bool>(),
    ) {
        roundtrip(&[
            Submessage::Data(DataRepr { writer: EntityId(w), reader: EntityId(r), seq, timestamp_ns: ts, payload: &payload }),
            Submessage::Heartbeat(HeartbeatRepr { writer: EntityId(w), reader: EntityId(r), first, last: first + n - 1, count, final_ }),
            Submessage::Gap(GapRepr { writer: EntityId(w), reader: EntityId(r), start: first, end: first + n + 1 }),
        ]);
    }

    #[test]
    fn skipped_roundtrip(r in 1u32.., w in 1u32.., count in any::<u32>(), skipped in any::<u64>(), abandoned in any::<u64>(), base in 1u64..1_000_000) {
        // Beside the ACKNACK it goes with, in one datagram.
        let an = AckNackRepr { reader: EntityId(r), writer: EntityId(w), base, num_bits: 0, bitmap: [0; 8], count, start_unknown: false };
        let x = SkippedRepr { reader: EntityId(r), writer: EntityId(w), count, skipped, abandoned };
        roundtrip(&[Submessage::AckNack(an), Submessage::Skipped(x)]);
    }

    #[test]
    fn acknack_roundtrip(r in 1u32.., w in 1u32.., base in 1u64..1_000_000_000, bits in 0u16..=256, words in any::<[u32; 8]>(), count in any::<u32>(), start_unknown in any::<bool>()) {
        let mut bitmap = [0u32; 8];
        for i in 0..bits as usize {
            if words[i / 32] & (1 << (i % 32)) != 0 { bitmap[i / 32] |= 1 << (i % 32); }
        }
        let a = AckNackRepr { reader: EntityId(r), writer: EntityId(w), base, num_bits: bits, bitmap, count, start_unknown };
        roundtrip(&[Submessage::AckNack(a)]);
        let want: Vec<u64> = (0..bits as u64).filter(|i| bitmap[(*i / 32) as usize] & (1 << (i % 32)) != 0).map(|i| base + i).collect();
        prop_assert_eq!(a.missing().collect::<Vec<_>>(), want);
    }

    /// Arbitrary bytes never panic and yield at most one error, after which iteration stops.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(d) = Datagram::parse(&bytes) {
            let mut errors = 0;
            for m in d.submessages() {
                if m.is_err() { errors += 1; }
            }
            prop_assert!(errors <= 1);
        }
    }

    /// A valid header followed by arbitrary submessage bytes (absurd counts and lengths).
    #[test]
    fn valid_header_arbitrary_body(kind in 0u8..12, len in any::<u16>(), body in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut buf = Vec::new();
        DatagramBuilder::new(&mut buf, header());
        buf.push(kind);
        buf.push(0);
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(&body);
        let d = Datagram::parse(&buf).unwrap();
        for m in d.submessages() {
            let _ = m;
        }
    }

    /// Every truncation of a valid datagram is rejected or parses to a prefix; never panics.
    #[test]
    fn truncations(cut in 0usize..200, payload in proptest::collection::vec(any::<u8>(), 0..100)) {
        let mut buf = Vec::new();
        DatagramBuilder::new(&mut buf, header())
            .push(&Submessage::Data(DataRepr { writer: EntityId(1), reader: EntityId(0), seq: 1, timestamp_ns: 5, payload: &payload })).unwrap()
            .push(&Submessage::Heartbeat(HeartbeatRepr { writer: EntityId(1), reader: EntityId(0), first: 1, last: 1, count: 1, final_: true })).unwrap();
        let cut = cut.min(buf.len());
        if let Ok(d) = Datagram::parse(&buf[..cut]) {
            for m in d.submessages() { let _ = m; }
        }
    }
}

#[test]
fn rejects_bad_header() {
    assert_eq!(Datagram::parse(b"short").unwrap_err(), Error::Truncated);
    let mut buf = Vec::new();
    DatagramBuilder::new(&mut buf, header())
        .push(&Submessage::ParticipantBye)
        .unwrap();
    let mut bad = buf.clone();
    bad[0] = b'X';
    assert_eq!(Datagram::parse(&bad).unwrap_err(), Error::BadMagic);
    let mut bad = buf.clone();
    bad[4] = 9;
    assert_eq!(
        Datagram::parse(&bad).unwrap_err(),
        Error::UnsupportedVersion(9)
    );
    let mut bad = buf.clone();
    bad[8..16].copy_from_slice(&[0; 8]);
    assert!(Datagram::parse(&bad).is_err());
}

#[test]
fn absurd_counts_are_rejected() {
    // An ACKNACK claiming 60000 bitmap bits.
    let mut buf = Vec::new();
    DatagramBuilder::new(&mut buf, header());
    buf.extend_from_slice(&[0x07, 0, 22, 0]);
    buf.extend_from_slice(&1u32.to_le_bytes());
    buf.extend_from_slice(&1u32.to_le_bytes());
    buf.extend_from_slice(&1u64.to_le_bytes());
    buf.extend_from_slice(&60000u16.to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    let d = Datagram::parse(&buf).unwrap();
    let r: Vec<_> = d.submessages().collect();
    assert_eq!(r, vec![Err(Error::BadLength)]);

    // An endpoint claiming 255 partitions.
    let mut buf = Vec::new();
    let qos = QosRepr {
        reliability: Reliability::Reliable,
        durability: Durability::Volatile,
        history: HistoryKind::KeepLast,
        depth: 1,
        max_samples: 0,
        max_bytes: 0,
        deadline_us: u64::MAX,
        lifespan_us: u64::MAX,
        liveliness: Liveliness::Automatic,
        lease_us: u64::MAX,
    };
    DatagramBuilder::new(&mut buf, header())
        .push(&Submessage::Endpoint(EndpointRepr {
            entity: EntityId(1),
            kind: EndpointKind::Writer,
            qos,
            protection: ProtectionMode::Unannounced,
            encoding: Encoding::Unset,
            topic: "/t",
            type_name: "",
            partitions: StrList::Slice(&[]),
            description: None,
        }))
        .unwrap();
    *buf.last_mut().unwrap() = 255;
    let d = Datagram::parse(&buf).unwrap();
    assert_eq!(
        d.submessages().next().unwrap().unwrap_err(),
        Error::BadLength
    );
    // A submessage length running past the datagram.
    let mut buf = Vec::new();
    DatagramBuilder::new(&mut buf, header());
    buf.extend_from_slice(&[0x05, 0, 0xff, 0xff, 1, 2, 3]);
    let d = Datagram::parse(&buf).unwrap();
    assert_eq!(
        d.submessages().next().unwrap().unwrap_err(),
        Error::Truncated
    );
}

/// The ENDPOINT bytes that were reserved: the protection mode (body offset 9) and the
/// encoding label (10). Zeros, as senders before them wrote, read as "unannounced" and
/// "unset"; an undefined mode is malformed, an undefined label reads as unset; a
/// description follows the partitions, length-prefixed, and is at least a nonce and a tag.
#[test]
fn endpoint_mode_label_and_description_bytes() {
    let qos = QosRepr {
        reliability: Reliability::Reliable,
        durability: Durability::Volatile,
        history: HistoryKind::KeepLast,
        depth: 1,
        max_samples: 0,
        max_bytes: 0,
        deadline_us: u64::MAX,
        lifespan_us: u64::MAX,
        liveliness: Liveliness::Automatic,
        lease_us: u64::MAX,
    };
    let desc = [7u8; DESCRIPTION_OVERHEAD + 5];
    let e = EndpointRepr {
        entity: EntityId(1),
        kind: EndpointKind::Reader,
        qos,
        protection: ProtectionMode::EncryptSign,
        encoding: Encoding::Cbor,
        topic: "/t",
        type_name: "",
        partitions: StrList::Slice(&["p"]),
        description: Some(&desc),
    };
    let mut buf = Vec::new();
    DatagramBuilder::new(&mut buf, header())
        .push(&Submessage::Endpoint(e))
        .unwrap();
    let body = HEADER_LEN + SUBMESSAGE_HEADER_LEN;
    assert_eq!(buf[body + 9], 4, "encrypt+sign");
    assert_eq!(buf[body + 10], 3, "cbor");
    assert_eq!(&buf[buf.len() - desc.len()..], &desc);
    let parse = |b: &[u8]| {
        Datagram::parse(b)
            .unwrap()
            .submessages()
            .next()
            .unwrap()
            .map(|m| match m {
                Submessage::Endpoint(e) => (e.protection, e.encoding, e.description.is_some()),
                _ => unreachable!(),
            })
    };
    assert_eq!(
        parse(&buf),
        Ok((ProtectionMode::EncryptSign, Encoding::Cbor, true))
    );
    let mut old = buf.clone();
    (old[body + 9], old[body + 10]) = (0, 0);
    assert_eq!(
        parse(&old),
        Ok((ProtectionMode::Unannounced, Encoding::Unset, true))
    );
    let mut bad = buf.clone();
    bad[body + 9] = 5;
    assert_eq!(parse(&bad), Err(Error::BadValue("protection")));
    let mut later = buf.clone();
    later[body + 10] = 200;
    assert_eq!(
        parse(&later),
        Ok((ProtectionMode::EncryptSign, Encoding::Unset, true))
    );
    // A description shorter than a nonce and a tag, or one byte left after it.
    let mut short = Vec::new();
    let d = [0u8; DESCRIPTION_OVERHEAD - 1];
    let mut b = DatagramBuilder::new(&mut short, header());
    let r = b.push(&Submessage::Endpoint(EndpointRepr {
        description: Some(&d),
        ..e
    }));
    assert!(r.is_err());
    let at = buf.len() - desc.len() - 2;
    buf[at..at + 2].copy_from_slice(&((DESCRIPTION_OVERHEAD - 1) as u16).to_le_bytes());
    assert_eq!(parse(&buf), Err(Error::BadLength));
}

#[test]
fn description_plaintext_round_trip() {
    let p = description_plaintext("/cmd_vel", "geometry_msgs/Twist").unwrap();
    assert_eq!(&p[..2], &8u16.to_be_bytes());
    assert_eq!(
        parse_description(&p),
        Ok(("/cmd_vel", "geometry_msgs/Twist"))
    );
    assert_eq!(parse_description(&p[..p.len() - 1]), Err(Error::Truncated));
    let mut more = p.clone();
    more.push(0);
    assert_eq!(parse_description(&more), Err(Error::BadLength));
    assert_eq!(
        parse_description(&description_plaintext("", "t").unwrap()),
        Err(Error::BadValue("topic"))
    );
    let aad = description_aad(&[9; 32]);
    assert!(aad.starts_with(b"tether endpoint v1") && aad.ends_with(&[9; 32]));
}

#[test]
fn unknown_kinds_are_skipped() {
    let mut buf = Vec::new();
    DatagramBuilder::new(&mut buf, header());
    buf.extend_from_slice(&[0x7f, 0, 2, 0, 9, 9]);
    DatagramBuilder::new(&mut Vec::new(), header());
    let mut tail = Vec::new();
    DatagramBuilder::new(&mut tail, header())
        .push(&Submessage::ParticipantBye)
        .unwrap();
    buf.extend_from_slice(&tail[HEADER_LEN..]);
    let d = Datagram::parse(&buf).unwrap();
    let r: Vec<_> = d.submessages().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        r,
        vec![Submessage::Unknown(0x7f), Submessage::ParticipantBye]
    );
}

proptest! {
    /// The scatter-gather DATA head followed by the payload is byte-for-byte a DATA submessage.
    #[test]
    fn data_head_matches_data(payload in proptest::collection::vec(any::<u8>(), 0..3000), seq in 1u64..1000) {
        let d = DataRepr { writer: EntityId(3), reader: EntityId(0), seq, timestamp_ns: 42, payload: &payload };
        let mut whole = Vec::new();
        DatagramBuilder::new(&mut whole, header()).push(&Submessage::Data(d)).unwrap();
        let mut head = Vec::new();
        DatagramBuilder::new(&mut head, header()).push_data_head(&d, payload.len()).unwrap();
        head.extend_from_slice(&payload);
        prop_assert_eq!(head, whole);
    }
}

proptest! {
    /// The fixed-buffer fast path writes exactly what the builder writes.
    #[test]
    fn encode_data_head_matches_builder(
        with_hb in any::<bool>(), seq in 1u64..u64::MAX, ts in any::<u64>(), len in 0usize..60000,
        first in 1u64..1000, count in any::<u32>(), w in 1u32.., r in any::<u32>(), final_ in any::<bool>(),
    ) {
        let hb = HeartbeatRepr { writer: EntityId(w), reader: EntityId(0), first, last: first + 5, count, final_ };
        let d = DataRepr { writer: EntityId(w), reader: EntityId(r), seq, timestamp_ns: ts, payload: &[] };
        let mut want = Vec::new();
        let mut b = DatagramBuilder::new(&mut want, header());
        if with_hb { b.push(&Submessage::Heartbeat(hb)).unwrap(); }
        b.push_data_head(&d, len).unwrap();
        let mut out = [0u8; DATA_HEAD_MAX];
        let n = encode_data_head(&header(), with_hb.then_some(&hb), &d, len, &mut out).unwrap();
        prop_assert_eq!(&out[..n], &want[..]);
    }
}

proptest! {
    #[test]
    fn data_frag_and_nack_frag_roundtrip(
        w in 1u32.., seq in 1u64..u64::MAX, frag_size in 1u16..2000, extra in 1u32..100_000,
        pick in any::<u32>(), base in 0u32..1_000_000, bits in 1u16..=256, words in any::<[u32; 8]>(),
        count in any::<u32>(),
    ) {
        let sample_size = frag_size as u32 + extra;
        let n = sample_size.div_ceil(frag_size as u32);
        let frag_num = pick % n;
        let start = frag_num as usize * frag_size as usize;
        let len = (sample_size as usize - start).min(frag_size as usize);
        let bytes = vec![7u8; len];
        let f = DataFragRepr { writer: EntityId(w), reader: EntityId(0), seq, timestamp_ns: 1, sample_size, frag_size, frag_num, payload: &bytes };
        prop_assert_eq!(f.frag_count(), n);
        let mut bitmap = [0u32; 8];
        for i in 0..bits as usize {
            if words[i / 32] & (1 << (i % 32)) != 0 { bitmap[i / 32] |= 1 << (i % 32); }
        }
        let nf = NackFragRepr { reader: EntityId(2), writer: EntityId(w), seq, base, num_bits: bits, bitmap, count };
        roundtrip(&[Submessage::DataFrag(f), Submessage::NackFrag(nf)]);
        // The scatter-gather head plus the bytes is the same datagram.
        let mut whole = Vec::new();
        DatagramBuilder::new(&mut whole, header()).push(&Submessage::DataFrag(f)).unwrap();
        let mut head = Vec::new();
        DatagramBuilder::new(&mut head, header()).push_frag_head(&f).unwrap();
        head.extend_from_slice(&bytes);
        prop_assert_eq!(head, whole);
    }
}

#[test]
fn lying_fragments_are_rejected() {
    let frag = |sample_size: u32, frag_size: u16, frag_num: u32, len: usize| {
        let mut buf = Vec::new();
        DatagramBuilder::new(&mut buf, header());
        let mut body = Vec::new();
        DataFragRepr {
            writer: EntityId(1),
            reader: EntityId(0),
            seq: 1,
            timestamp_ns: 0,
            sample_size,
            frag_size,
            frag_num,
            payload: &[],
        }
        .emit_fixed(&mut body);
        body.extend(std::iter::repeat_n(0u8, len));
        buf.push(0x09);
        buf.push(0);
        buf.extend_from_slice(&(body.len() as u16).to_le_bytes());
        buf.extend_from_slice(&body);
        let d = Datagram::parse(&buf).unwrap();
        d.submessages().next().unwrap().map(|_| ())
    };
    assert!(frag(1000, 100, 3, 100).is_ok());
    assert!(
        frag(1000, 100, 10, 100).is_err(),
        "fragment number beyond the sample"
    );
    assert!(frag(1000, 100, 3, 99).is_err(), "short fragment");
    assert!(frag(1000, 100, 3, 101).is_err(), "long fragment");
    assert!(frag(1050, 100, 10, 50).is_ok(), "short last fragment");
    assert!(
        frag(1050, 100, 10, 100).is_err(),
        "last fragment longer than the rest of the sample"
    );
    assert!(
        frag(100, 100, 0, 100).is_err(),
        "a sample that fits one fragment is not fragmented"
    );
    assert!(frag(1000, 0, 0, 0).is_err(), "zero fragment size");
}

proptest! {
    #[test]
    fn batch_roundtrip(
        w in 1u32.., first in 1u64..1_000_000_000,
        samples in proptest::collection::vec((any::<u64>(), proptest::collection::vec(any::<u8>(), 0..300)), 1..40),
    ) {
        let mut entries = Vec::new();
        for (ts, p) in &samples {
            push_batch_entry(&mut entries, *ts, p);
        }
        let b = BatchRepr { writer: EntityId(w), reader: EntityId(0), first_seq: first, count: samples.len() as u32, entries: &entries };
        roundtrip(&[Submessage::Batch(b)]);
        let got: Vec<(u64, u64, Vec<u8>)> = b.samples().map(|(s, t, p)| (s, t, p.to_vec())).collect();
        let want: Vec<(u64, u64, Vec<u8>)> = samples.iter().enumerate().map(|(i, (t, p))| (first + i as u64, *t, p.clone())).collect();
        prop_assert_eq!(got, want);
        let mut whole = Vec::new();
        DatagramBuilder::new(&mut whole, header()).push(&Submessage::Batch(b)).unwrap();
        let mut head = Vec::new();
        DatagramBuilder::new(&mut head, header()).push_batch_head(&b, entries.len()).unwrap();
        head.extend_from_slice(&entries);
        prop_assert_eq!(head, whole);
    }
}

#[test]
fn lying_batches_are_rejected() {
    let batch = |count: u32, entries: &[u8]| {
        let mut buf = Vec::new();
        DatagramBuilder::new(&mut buf, header());
        let mut body = Vec::new();
        BatchRepr {
            writer: EntityId(1),
            reader: EntityId(0),
            first_seq: 1,
            count,
            entries: &[],
        }
        .emit_fixed(&mut body);
        body.extend_from_slice(entries);
        buf.push(0x0B);
        buf.push(0);
        buf.extend_from_slice(&(body.len() as u16).to_le_bytes());
        buf.extend_from_slice(&body);
        let d = Datagram::parse(&buf).unwrap();
        d.submessages().next().unwrap().map(|_| ())
    };
    let mut two = Vec::new();
    push_batch_entry(&mut two, 1, b"ab");
    push_batch_entry(&mut two, 2, b"cde");
    assert!(batch(2, &two).is_ok());
    assert!(batch(3, &two).is_err(), "count larger than the entries");
    assert!(batch(1, &two).is_err(), "entries left over");
    assert!(batch(0, &[]).is_err(), "empty batch");
    assert!(batch(4_000_000_000, &two).is_err(), "absurd count");
    let mut lie = Vec::new();
    lie.extend_from_slice(&1u64.to_le_bytes());
    lie.extend_from_slice(&1000u32.to_le_bytes());
    lie.extend_from_slice(b"short");
    assert!(batch(1, &lie).is_err(), "entry length past the end");
}

proptest! {
    #[test]
    fn auth_roundtrip(
        to in 1u64..,
        challenge in any::<[u8; 32]>(),
        response in proptest::option::of(proptest::collection::vec(any::<u8>(), 64)),
        cred in proptest::collection::vec(any::<u8>(), 1..600),
        verified_you in any::<bool>(),
        you_verified_me in any::<bool>(),
        key in proptest::option::of((1u32.., proptest::collection::vec(any::<u8>(), 1..256))),
        have_epoch in any::<u32>(),
    ) {
        let response: Option<[u8; 64]> = response.map(|r| r.try_into().unwrap());
        let control_key = key.as_ref().map(|(epoch, w)| ControlKeyRepr { epoch: *epoch, wrapped: w });
        let a = AuthRepr { to: ParticipantId(to), challenge, response, verified_you, you_verified_me, control_key, have_epoch, credential: &cred };
        roundtrip(&[Submessage::Auth(a)]);
    }

    /// A datagram's AUTH_TAG round-trips, and is found at its end with the bytes it covers.
    #[test]
    fn auth_tag_roundtrip_and_split(epoch in 1u32.., counter in 1u64.., to in any::<[u8; 8]>(), tag in any::<[u8; 16]>()) {
        let t = AuthTagRepr { epoch, counter, to, tag };
        roundtrip(&[Submessage::ParticipantBye, Submessage::AuthTag(t)]);
        let mut dg = Vec::new();
        DatagramBuilder::new(&mut dg, Header { domain: 1, participant: ParticipantId(3) })
            .push(&Submessage::ParticipantBye).unwrap();
        let covered = dg.clone();
        dg.extend_from_slice(&t.bytes());
        let (got, c) = AuthTagRepr::split(&dg).unwrap();
        prop_assert_eq!(got, t);
        prop_assert_eq!(c, &covered[..]);
        prop_assert!(Datagram::parse(&dg).is_ok());
        // Not at the end: not found.
        prop_assert!(AuthTagRepr::split(&covered).is_none());
    }

    /// Every truncation of a valid AUTH is refused, never misread.
    #[test]
    fn auth_truncations_refused(cut in 0usize..200) {
        let cred = [5u8; 100];
        let a = AuthRepr { to: ParticipantId(9), challenge: [1; 32], response: Some([2; 64]), verified_you: true, you_verified_me: false, control_key: Some(ControlKeyRepr { epoch: 1, wrapped: &[7; 60] }), have_epoch: 2, credential: &cred };
        let mut body = Vec::new();
        Submessage::Auth(a).emit_body(&mut body).unwrap();
        let cut = cut.min(body.len() - 1);
        prop_assert!(Submessage::parse(0x0C, &body[..cut]).is_err());
    }
}
