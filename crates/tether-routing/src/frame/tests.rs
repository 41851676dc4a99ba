//! Byte fixtures, round trips and the stream decoder.

use super::*;
use proptest::prelude::*;

fn key(b: u8) -> RouteKey {
    RouteKey([b; 32])
}

/// One frame of every type, for round trips and for the decoder.
fn samples() -> Vec<Frame> {
    vec![
        Frame::Hello(Hello {
            version: LINK_VERSION,
            role: Role::Router,
            node: NodeId(0x0102_0304_0506_0708),
            domain: 9,
        }),
        Frame::Advertise(Advertise {
            key: key(1),
            origin: NodeId(2),
            seq: 3,
            hops: 4,
        }),
        Frame::WithdrawAdvertise(Withdraw {
            key: key(5),
            origin: NodeId(6),
            seq: 7,
        }),
        Frame::Subscribe(key(8)),
        Frame::Unsubscribe(key(9)),
        Frame::Query(key(10)),
        Frame::Participant(HostRoute {
            participant: ParticipantId(11),
            origin: NodeId(12),
            seq: 13,
        }),
        Frame::ParticipantGone(HostRoute {
            participant: ParticipantId(14),
            origin: NodeId(15),
            seq: 16,
        }),
        Frame::Data(Data {
            key: key(17),
            origin: NodeId(18),
            src: ParticipantId(19),
            hops: 20,
            datagram: Bytes::from_static(b"sealed sample"),
        }),
        Frame::Unicast(Unicast {
            dst: ParticipantId(21),
            src: ParticipantId(22),
            hops: 0,
            key: RouteKey([0xab; 32]),
            reader: true,
            datagram: Bytes::from_static(b"acknack"),
        }),
        Frame::Announce(Announce {
            src: ParticipantId(23),
            origin: NodeId(24),
            hops: 1,
            key: RouteKey::default(),
            reader: false,
            datagram: Bytes::new(),
        }),
        Frame::LinkState(LinkState::new(NodeId(25), 26, &[NodeId(27), NodeId(28)])),
        Frame::Announce(Announce {
            src: ParticipantId(23),
            origin: NodeId(24),
            hops: 1,
            key: RouteKey([0x5a; 32]),
            reader: true,
            datagram: Bytes::from_static(b"endpoint"),
        }),
    ]
}

/// The layouts of docs/wire.md, byte for byte.
#[test]
fn layouts_match_the_spec() {
    let hello = samples()[0].to_bytes().unwrap();
    assert_eq!(
        &hello[..],
        &[1, 0, 0, 0, 14, 1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 9]
    );
    let adv = samples()[1].to_bytes().unwrap();
    assert_eq!(&adv[..5], &[2, 0, 0, 0, 45]);
    assert_eq!(&adv[5..37], &[1; 32]);
    assert_eq!(&adv[37..], &[0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3, 4]);
    let data = samples()[8].to_bytes().unwrap();
    assert_eq!(&data[..5], &[9, 0, 0, 0, 49 + 13]);
    assert_eq!(&data[37..45], &18u64.to_be_bytes());
    assert_eq!(&data[45..53], &19u64.to_be_bytes());
    assert_eq!(data[53], 20);
    assert_eq!(&data[54..], b"sealed sample");
    let ls = samples()[11].to_bytes().unwrap();
    assert_eq!(&ls[..5], &[12, 0, 0, 0, 14 + 16]);
    assert_eq!(&ls[17..19], &[0, 2]);
    // UNICAST: dst, src, hops, key, flags (a reader's key), then the datagram.
    let uni = samples()[9].to_bytes().unwrap();
    assert_eq!(&uni[..5], &[10, 0, 0, 0, 50 + 7]);
    assert_eq!(&uni[22..54], &[0xab; 32]);
    assert_eq!(uni[54], 1);
    assert_eq!(&uni[55..], b"acknack");
    // ANNOUNCE: src, origin, hops, key, flags, then the datagram.
    let ann = samples()[12].to_bytes().unwrap();
    assert_eq!(&ann[..5], &[11, 0, 0, 0, 50 + 8]);
    assert_eq!(&ann[22..54], &[0x5a; 32]);
    assert_eq!(ann[54], 1);
    let plain = samples()[10].to_bytes().unwrap();
    assert_eq!(&plain[22..55], &[0; 33], "no key, no flags");
}

#[test]
fn every_sample_round_trips() {
    for f in samples() {
        let bytes = f.to_bytes().unwrap();
        assert_eq!(bytes.len(), f.encoded_len());
        assert_eq!(Frame::parse(bytes).unwrap(), f);
    }
}

/// Payloads are slices of the input: parsing copies no datagram.
#[test]
fn payloads_are_not_copied() {
    let bytes = samples()[8].to_bytes().unwrap();
    let Frame::Data(d) = Frame::parse(bytes.clone()).unwrap() else {
        panic!("not DATA")
    };
    let start = bytes.as_ptr() as usize + FRAME_HEADER_LEN + DATA_FIXED_LEN;
    assert_eq!(d.datagram.as_ptr() as usize, start);
}

#[test]
fn bad_frames_are_refused_with_a_reason() {
    assert_eq!(
        Frame::parse(Bytes::from_static(&[1, 0])),
        Err(FrameError::Truncated)
    );
    assert_eq!(
        Frame::parse(Bytes::from_static(&[0x7f, 0, 0, 0, 0])),
        Err(FrameError::UnknownType(0x7f))
    );
    // SUBSCRIBE must be exactly 32 bytes.
    let mut sub = vec![4, 0, 0, 0, 31];
    sub.extend_from_slice(&[0; 31]);
    assert_eq!(
        Frame::parse(sub.into()),
        Err(FrameError::BadLength {
            frame: FrameType::Subscribe,
            len: 31
        })
    );
    // A length past 16 MiB is refused from the header alone.
    assert_eq!(
        Frame::parse(Bytes::from_static(&[9, 1, 0, 0, 1])),
        Err(FrameError::TooLarge(0x0100_0001))
    );
    // Zero node id, wrong version, bad role.
    let mut hello = samples()[0].to_bytes().unwrap().to_vec();
    hello[5] = 2;
    assert_eq!(
        Frame::parse(hello.clone().into()),
        Err(FrameError::UnsupportedVersion(2))
    );
    hello[5] = 1;
    hello[6] = 3;
    assert_eq!(
        Frame::parse(hello.into()),
        Err(FrameError::BadValue("role"))
    );
    let mut adv = samples()[1].to_bytes().unwrap().to_vec();
    adv[37..45].fill(0);
    assert_eq!(
        Frame::parse(adv.into()),
        Err(FrameError::BadValue("origin"))
    );
    // LINK_STATE whose count disagrees with its length.
    let mut ls = samples()[11].to_bytes().unwrap().to_vec();
    ls[18] = 3;
    assert!(matches!(
        Frame::parse(ls.into()),
        Err(FrameError::BadLength { .. })
    ));
    // Flags: only the reader bit, and only with a key.
    let mut uni = samples()[9].to_bytes().unwrap().to_vec();
    uni[54] = 2;
    assert_eq!(Frame::parse(uni.into()), Err(FrameError::BadValue("flags")));
    let mut ann = samples()[10].to_bytes().unwrap().to_vec();
    ann[54] = 1;
    assert_eq!(Frame::parse(ann.into()), Err(FrameError::BadValue("flags")));
    // Trailing bytes after one frame.
    let mut two = samples()[3].to_bytes().unwrap().to_vec();
    two.push(0);
    assert!(Frame::parse(two.into()).is_err());
}

/// A stream cut at every possible point gives back the same frames.
#[test]
fn decoder_reassembles_split_frames() {
    let mut stream = Vec::new();
    for f in samples() {
        f.encode(&mut stream).unwrap();
    }
    for cut in 0..stream.len() {
        let mut d = Decoder::new();
        let mut got = Vec::new();
        d.push(&stream[..cut]);
        while let Some(f) = d.next_frame().unwrap() {
            got.push(f);
        }
        d.push_bytes(Bytes::copy_from_slice(&stream[cut..]));
        while let Some(f) = d.next_frame().unwrap() {
            got.push(f);
        }
        assert_eq!(got, samples(), "cut at {cut}");
        assert_eq!(d.buffered(), 0);
    }
}

/// An oversized frame is refused as soon as its header is in, and the decoder stays failed.
#[test]
fn decoder_refuses_oversize_early() {
    let mut d = Decoder::new();
    d.push(&[9, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(d.next_frame(), Err(FrameError::TooLarge(0xffff_ffff)));
    d.push(&samples()[3].to_bytes().unwrap());
    assert!(d.next_frame().is_err(), "a failed stream stays failed");
    assert_eq!(d.buffered(), 0, "nothing buffered after the error");
    // The largest allowed frame is accepted.
    let big = Frame::Data(Data {
        key: key(1),
        origin: NodeId(1),
        src: ParticipantId(1),
        hops: 0,
        datagram: vec![7u8; MAX_FRAME_BODY - DATA_FIXED_LEN].into(),
    });
    let bytes = big.to_bytes().unwrap();
    assert_eq!(bytes.len(), MAX_FRAME_LEN);
    let mut d = Decoder::new();
    d.push_bytes(bytes);
    assert_eq!(d.next_frame().unwrap(), Some(big));
    let too_big = Frame::Unicast(Unicast {
        dst: ParticipantId(1),
        src: ParticipantId(1),
        hops: 0,
        key: RouteKey([0xab; 32]),
        reader: false,
        datagram: vec![0u8; MAX_FRAME_BODY].into(),
    });
    assert_eq!(
        too_big.to_bytes(),
        Err(FrameError::TooLarge(MAX_FRAME_BODY + UNICAST_FIXED_LEN))
    );
}

fn arb_key() -> impl Strategy<Value = RouteKey> {
    any::<[u8; 32]>().prop_map(RouteKey)
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    let nz = 1u64..;
    let seq = 1u32..;
    let bytes = proptest::collection::vec(any::<u8>(), 0..300).prop_map(Bytes::from);
    prop_oneof![
        (any::<bool>(), nz.clone(), any::<u32>()).prop_map(|(r, n, d)| Frame::Hello(Hello {
            version: LINK_VERSION,
            role: if r { Role::Router } else { Role::Session },
            node: NodeId(n),
            domain: d,
        })),
        (arb_key(), nz.clone(), seq.clone(), any::<u8>()).prop_map(|(key, o, seq, hops)| {
            Frame::Advertise(Advertise {
                key,
                origin: NodeId(o),
                seq,
                hops,
            })
        }),
        (arb_key(), nz.clone(), seq.clone()).prop_map(|(key, o, seq)| {
            Frame::WithdrawAdvertise(Withdraw {
                key,
                origin: NodeId(o),
                seq,
            })
        }),
        arb_key().prop_map(Frame::Subscribe),
        arb_key().prop_map(Frame::Unsubscribe),
        arb_key().prop_map(Frame::Query),
        (nz.clone(), nz.clone(), seq.clone(), any::<bool>()).prop_map(|(p, o, seq, gone)| {
            let r = HostRoute {
                participant: ParticipantId(p),
                origin: NodeId(o),
                seq,
            };
            if gone {
                Frame::ParticipantGone(r)
            } else {
                Frame::Participant(r)
            }
        }),
        (
            arb_key(),
            nz.clone(),
            nz.clone(),
            any::<u8>(),
            bytes.clone()
        )
            .prop_map(|(key, o, s, hops, datagram)| Frame::Data(Data {
                key,
                origin: NodeId(o),
                src: ParticipantId(s),
                hops,
                datagram,
            })),
        (nz.clone(), nz.clone(), any::<u8>(), bytes.clone()).prop_map(|(d, s, hops, datagram)| {
            Frame::Unicast(Unicast {
                dst: ParticipantId(d),
                src: ParticipantId(s),
                hops,
                key: RouteKey([0xab; 32]),
                reader: hops % 2 == 1,
                datagram,
            })
        }),
        (nz.clone(), nz.clone(), any::<u8>(), bytes).prop_map(|(s, o, hops, datagram)| {
            Frame::Announce(Announce {
                src: ParticipantId(s),
                origin: NodeId(o),
                hops,
                key: RouteKey([hops; 32]),
                reader: hops != 0 && hops % 3 == 0,
                datagram,
            })
        }),
        (nz.clone(), seq, proptest::collection::vec(nz, 0..40)).prop_map(|(o, seq, n)| {
            let n: Vec<NodeId> = n.into_iter().map(NodeId).collect();
            Frame::LinkState(LinkState::new(NodeId(o), seq, &n))
        }),
    ]
}

proptest! {
    /// encode → parse is the identity, whole and through the decoder in random cuts.
    #[test]
    fn round_trip(frames in proptest::collection::vec(arb_frame(), 1..8), cuts in proptest::collection::vec(1usize..64, 0..20)) {
        let mut stream = Vec::new();
        for f in &frames {
            let b = f.to_bytes().unwrap();
            prop_assert_eq!(&Frame::parse(b.clone()).unwrap(), f);
            stream.extend_from_slice(&b);
        }
        let mut d = Decoder::new();
        let mut got = Vec::new();
        let mut rest = &stream[..];
        for c in cuts {
            let c = c.min(rest.len());
            d.push(&rest[..c]);
            rest = &rest[c..];
            while let Some(f) = d.next_frame().unwrap() { got.push(f); }
        }
        d.push_bytes(Bytes::copy_from_slice(rest));
        while let Some(f) = d.next_frame().unwrap() { got.push(f); }
        prop_assert_eq!(got, frames);
    }

    /// Arbitrary bytes never panic, as one frame or as a stream; whatever parses re-encodes
    /// to the same bytes.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), ty in 0u8..16) {
        let b = Bytes::from(bytes.clone());
        if let Ok(f) = Frame::parse(b.clone()) {
            prop_assert_eq!(f.to_bytes().unwrap(), b);
        }
        // With a valid-looking header in front, to reach the body checks.
        let mut framed = vec![ty];
        framed.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        framed.extend_from_slice(&bytes);
        let framed = Bytes::from(framed);
        if let Ok(f) = Frame::parse(framed.clone()) {
            prop_assert_eq!(f.to_bytes().unwrap(), framed.clone());
        }
        let mut d = Decoder::new();
        d.push(&framed);
        d.push(&bytes);
        for _ in 0..64 {
            match d.next_frame() {
                Ok(Some(_)) => continue,
                _ => break,
            }
        }
    }
}
