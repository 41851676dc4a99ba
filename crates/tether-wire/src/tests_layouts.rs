//! Tests of the layouts beside the datagram: the protected sample, the credential and the
//! revocation list, the key-distribution strings, and the cursor they are all read with.

use super::*;
use proptest::prelude::*;

fn arb_protection() -> impl Strategy<Value = SampleProtection> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(sealed, signed, batch)| {
        SampleProtection {
            sealed,
            signed,
            batch_signed: batch && signed,
        }
    })
}

fn pattern() -> impl Strategy<Value = String> {
    "[a-z/*]{0,40}"
}

proptest! {
    /// parse(emit(x)) == x for every valid protected sample, and the view's slices are the
    /// bytes: head then signature.
    #[test]
    fn protected_sample_roundtrip(
        protection in arb_protection(),
        epoch in any::<u32>(),
        body in proptest::collection::vec(any::<u8>(), 0..300),
        sig in any::<[u8; 32]>(),
    ) {
        let sig = [sig, sig].concat().try_into().unwrap();
        let sealed_len = body.len().max(SAMPLE_TAG_LEN);
        let body = if protection.sealed {
            SampleBody::Sealed(SealedBody { epoch, sealed: &body[..body.len().min(sealed_len)] })
        } else {
            SampleBody::Plain(&body)
        };
        let r = ProtectedSampleRepr {
            protection,
            body,
            signature: protection.signed_alone().then_some(&sig),
        };
        let mut out = Vec::new();
        if protection.sealed && body.len() < SEALED_EPOCH_LEN + SAMPLE_TAG_LEN {
            prop_assert!(r.emit(&mut out).is_err());
            return Ok(());
        }
        r.emit(&mut out).unwrap();
        prop_assert_eq!(out.len(), r.len());
        let v = ProtectedSample::parse(&out).unwrap();
        prop_assert_eq!(v.repr(), r);
        prop_assert_eq!(ProtectedSampleRepr::parse(&out).unwrap(), r);
        prop_assert_eq!([v.head(), v.signature().map_or(&[][..], |s| &s[..])].concat(), out.clone());
        prop_assert_eq!(&v.head()[1..], v.body());
        // A signature present where none belongs, or missing where one does, is refused.
        let wrong = ProtectedSampleRepr {
            signature: if r.signature.is_some() { None } else { Some(&sig) },
            ..r
        };
        prop_assert!(wrong.emit(&mut Vec::new()).is_err());
    }

    /// Arbitrary bytes never panic any parser here, and whatever parses emits back to the
    /// same bytes (the forms are canonical).
    #[test]
    fn arbitrary_layout_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
        if let Ok(r) = ProtectedSampleRepr::parse(&bytes) {
            let mut out = Vec::new();
            r.emit(&mut out).unwrap();
            prop_assert_eq!(&out, &bytes);
        }
        if let Ok(b) = SealedBody::parse(&bytes) {
            let mut out = Vec::new();
            b.emit(&mut out);
            prop_assert_eq!(&out, &bytes);
        }
        if let Ok(w) = WrappedKeyRepr::parse(&bytes) {
            let mut out = Vec::new();
            w.emit(&mut out).unwrap();
            prop_assert_eq!(&out, &bytes);
        }
        // Give the credential parsers their magic, so they get past the first check.
        for magic in [CREDENTIAL_MAGIC, REVOCATION_MAGIC] {
            let b = [&magic[..], &bytes].concat();
            if let Ok(c) = CredentialRepr::parse(&b) {
                let mut out = Vec::new();
                c.emit(&mut out);
                prop_assert_eq!(&out, &b);
            }
            if let Ok(r) = RevocationListRepr::parse(&b) {
                let mut out = Vec::new();
                r.emit(&mut out);
                prop_assert_eq!(&out, &b);
            }
        }
    }

    /// A sealed sample laid out in a buffer of any previous content parses as that sample.
    #[test]
    fn laid_out_sealed_sample_parses(
        old in proptest::collection::vec(any::<u8>(), 0..400),
        plain_len in 0usize..300,
        epoch in any::<u32>(),
        signed in any::<bool>(),
    ) {
        let mut v = old;
        let p = SampleProtection { sealed: true, signed, batch_signed: signed };
        let (ct, tag) = lay_out_sealed(&mut v, p, epoch, plain_len, 64);
        ct.fill(0xAB);
        tag.fill(0xCD);
        let r = ProtectedSampleRepr::parse(&v).unwrap();
        prop_assert_eq!(r.protection, p);
        let SampleBody::Sealed(b) = r.body else { panic!("sealed") };
        prop_assert_eq!(b.epoch, epoch);
        prop_assert_eq!(b.sealed.len(), plain_len + SAMPLE_TAG_LEN);
        prop_assert!(b.sealed[..plain_len].iter().all(|x| *x == 0xAB));
        let plain = vec![7u8; plain_len];
        lay_out_plain(&mut v, SampleProtection::default(), &plain, 0);
        prop_assert_eq!(ProtectedSampleRepr::parse(&v).unwrap().body, SampleBody::Plain(&plain));
    }

    /// Credentials round-trip; truncations are refused.
    #[test]
    fn credential_roundtrip(
        realm in any::<[u8; 32]>(),
        (serial, issued, expires) in (any::<u64>(), any::<u64>(), any::<u64>()),
        keys in any::<([u8; 32], [u8; 32])>(),
        router in any::<bool>(),
        name in "[ -~]{0,255}",
        publish in proptest::collection::vec(pattern(), 0..=MAX_PATTERNS),
        subscribe in proptest::collection::vec(pattern(), 0..8),
        sig in any::<[u8; 32]>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let c = CredentialRepr {
            realm,
            serial,
            issued,
            expires,
            role: if router { Role::Router } else { Role::Member },
            sign_public: keys.0,
            kx_public: keys.1,
            name: &name,
            publish: PatternList::Slice(&publish),
            subscribe: PatternList::Slice(&subscribe),
            signature: [sig, sig].concat().try_into().unwrap(),
        };
        let mut out = Vec::new();
        c.emit(&mut out);
        let p = CredentialRepr::parse(&out).unwrap();
        prop_assert_eq!(p, c);
        prop_assert_eq!(p.publish.iter().collect::<Vec<_>>(), publish.iter().map(String::as_str).collect::<Vec<_>>());
        let mut signed = Vec::new();
        c.emit_signed(&mut signed);
        prop_assert_eq!(&out[..signed.len()], &signed[..]);
        prop_assert_eq!(out.len(), signed.len() + 64);
        let at = cut.index(out.len());
        prop_assert!(CredentialRepr::parse(&out[..at]).is_err());
    }

    /// Revocation lists round-trip; serials out of order are refused.
    #[test]
    fn revocation_list_roundtrip(
        realm in any::<[u8; 32]>(),
        serial in any::<u64>(),
        issued in any::<u64>(),
        serials in proptest::collection::btree_set(any::<u64>(), 0..50),
        sig in any::<[u8; 32]>(),
    ) {
        let serials: Vec<u64> = serials.into_iter().collect();
        let r = RevocationListRepr {
            realm,
            serial,
            issued,
            serials: SerialList::Slice(&serials),
            signature: [sig, sig].concat().try_into().unwrap(),
        };
        let mut out = Vec::new();
        r.emit(&mut out);
        let p = RevocationListRepr::parse(&out).unwrap();
        prop_assert_eq!(p, r);
        prop_assert_eq!(p.serials.iter().collect::<Vec<_>>(), serials.clone());
        if serials.len() >= 2 {
            let mut rev = serials.clone();
            rev.reverse();
            let mut out = Vec::new();
            RevocationListRepr { serials: SerialList::Slice(&rev), ..r }.emit(&mut out);
            prop_assert_eq!(RevocationListRepr::parse(&out), Err(Error::BadValue("serial order")));
        }
    }

    /// Wrapped keys round-trip; fewer bytes than a nonce and a tag are refused.
    #[test]
    fn wrapped_key_roundtrip(nonce in any::<[u8; 12]>(), sealed in proptest::collection::vec(any::<u8>(), 0..100)) {
        let w = WrappedKeyRepr { nonce, sealed: &sealed };
        let mut out = Vec::new();
        if sealed.len() < WRAP_TAG_LEN {
            prop_assert!(w.emit(&mut out).is_err());
            prop_assert!(WrappedKeyRepr::parse(&[&nonce[..], &sealed].concat()).is_err());
        } else {
            w.emit(&mut out).unwrap();
            prop_assert_eq!(out.len(), w.len());
            prop_assert_eq!(WrappedKeyRepr::parse(&out).unwrap(), w);
        }
    }
}

/// The protection byte: every valid value round-trips, the rest are refused.
#[test]
fn protection_bytes() {
    for b in 0..=255u8 {
        match SampleProtection::from_byte(b) {
            Ok(p) => assert_eq!(p.byte(), b),
            Err(e) => {
                assert_eq!(e, Error::BadValue("protection"));
                assert!(b > 7 || b & 6 == 4, "{b} refused");
            }
        }
    }
    assert!(ProtectedSample::parse(&[]).is_err());
    // Signed alone but shorter than a signature; sealed but shorter than epoch and tag.
    assert!(ProtectedSample::parse(&[2; 64]).is_err());
    assert!(ProtectedSample::parse(&[2; 65]).is_ok());
    assert!(ProtectedSample::parse(&[1; 20]).is_err());
    assert!(ProtectedSample::parse(&[1; 21]).is_ok());
}

/// The byte strings the seal, the signatures and the key derivations bind, as
/// `docs/wire.md` sections 3.10 to 3.13 spell them out.
#[test]
fn bound_strings_known_answers() {
    let w = endpoint_bytes(ParticipantId(0x0102_0304_0506_0708), EntityId(0x0a0b_0c0d));
    assert_eq!(w, [8, 7, 6, 5, 4, 3, 2, 1, 0x0d, 0x0c, 0x0b, 0x0a]);
    assert_eq!(
        sender_key_nonce(0x1122_3344, 0x0102_0304_0506_0708),
        [0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8]
    );
    let p = SampleProtection {
        sealed: true,
        signed: true,
        batch_signed: true,
    };
    let aad = sample_aad(&w, 2, 3, 4, p);
    let mut want = w.to_vec();
    want.extend_from_slice(&[
        0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 3,
    ]);
    assert_eq!(aad[..], want[..], "bit 2 is not bound");
    assert_eq!(sender_key_aad(&w, 2, 3)[..], want[..24]);
    let s = sample_signed_bytes(&w, 3, 4, b"head");
    assert_eq!(
        s,
        [&b"tether sample v1"[..], &w, &want[16..32], b"head"].concat()
    );
    let b = batch_signed_bytes(&w, 5, 6, &[9; 32]);
    assert_eq!(
        b[..],
        [
            &b"tether batch v1"[..],
            &w,
            &[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 6],
            &[9; 32]
        ]
        .concat()[..]
    );
    let r = endpoint_bytes(ParticipantId(9), EntityId(1));
    let c = key_wrap_context(&[7; 32], &w, &r, 0x0102_0304, 3);
    assert_eq!(
        c[..],
        [&b"tether key v1"[..], &[7; 32], &w, &r, &[1, 2, 3, 4, 3]].concat()[..]
    );
    let i = pair_key_info(&[7; 32], ParticipantId(1), ParticipantId(2), 1);
    assert_eq!(
        i[..],
        [
            &[7; 32][..],
            &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 1]
        ]
        .concat()[..]
    );
    let mut t = Vec::new();
    topic_id_input("/a", "T", "", |p| t.extend_from_slice(p));
    assert_eq!(
        t,
        [
            &b"tether topic v1"[..],
            &[0, 0, 0, 0, 0, 0, 0, 2],
            b"/a",
            &[0, 0, 0, 0, 0, 0, 0, 1],
            b"T",
            &[0; 8]
        ]
        .concat()
    );
}

/// A credential's and a revocation list's bytes, field by field.
#[test]
fn credential_known_answer() {
    let publish = ["/a/**".to_string()];
    let c = CredentialRepr {
        realm: [1; 32],
        serial: 2,
        issued: 3,
        expires: 4,
        role: Role::Router,
        sign_public: [5; 32],
        kx_public: [6; 32],
        name: "n",
        publish: PatternList::Slice(&publish),
        subscribe: PatternList::Slice(&[]),
        signature: [7; 64],
    };
    let mut out = Vec::new();
    c.emit(&mut out);
    let want = [
        &b"TCR2"[..],
        &[1; 32],
        &[
            0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4,
        ],
        &[1],
        &[5; 32],
        &[6; 32],
        &[0, 1],
        b"n",
        &[0, 1, 0, 5],
        b"/a/**",
        &[0, 0],
        &[7; 64],
    ]
    .concat();
    assert_eq!(out, want);
    assert_eq!(CredentialRepr::parse(&want), Ok(c));
    // The role byte (offset 60) takes two values; the layout before roles is not read.
    let mut bad = want.clone();
    bad[60] = 2;
    assert_eq!(CredentialRepr::parse(&bad), Err(Error::BadValue("role")));
    let mut old = want.clone();
    old[..4].copy_from_slice(&CREDENTIAL_MAGIC_V1);
    assert_eq!(CredentialRepr::parse(&old), Err(Error::BadMagic));
    let serials = [1, 0x0100];
    let r = RevocationListRepr {
        realm: [1; 32],
        serial: 9,
        issued: 2,
        serials: SerialList::Slice(&serials),
        signature: [7; 64],
    };
    let mut out = Vec::new();
    r.emit(&mut out);
    let want = [
        &b"TRV2"[..],
        &[1; 32],
        &[0, 0, 0, 0, 0, 0, 0, 9],
        &[0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2],
        &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0],
        &[7; 64],
    ]
    .concat();
    assert_eq!(out, want);
    // Limits: too many patterns, a name too long, a count past the bytes.
    let mut bad = want.clone();
    bad[52] = 0xff;
    assert_eq!(
        RevocationListRepr::parse(&bad),
        Err(Error::BadValue("serial count"))
    );
    // The first layout (no list serial) is not read as this one.
    let mut v1 = want.clone();
    v1[..4].copy_from_slice(b"TRV1");
    assert_eq!(RevocationListRepr::parse(&v1), Err(Error::BadMagic));
    assert_eq!(CredentialRepr::parse(b"TCR0"), Err(Error::BadMagic));
    let long = "x".repeat(MAX_NAME_LEN + 1);
    let mut out = Vec::new();
    CredentialRepr { name: &long, ..c }.emit(&mut out);
    assert_eq!(CredentialRepr::parse(&out), Err(Error::BadLength));
    let many = vec![String::new(); MAX_PATTERNS + 1];
    let mut out = Vec::new();
    CredentialRepr {
        publish: PatternList::Slice(&many),
        ..c
    }
    .emit(&mut out);
    assert_eq!(
        CredentialRepr::parse(&out),
        Err(Error::BadValue("pattern count"))
    );
}

/// The cursor reads both byte orders, refuses to read past the end, and says what is left.
#[test]
fn cursor_reads_and_bounds() {
    let b = [1, 2, 3, 4, 5, 6, 7, 8, 9];
    let mut c = Cursor::new(&b);
    assert_eq!(c.u16(), Ok(0x0201));
    assert_eq!(c.u16_be(), Ok(0x0304));
    assert_eq!(c.remaining(), 5);
    assert_eq!(c.u64(), Err(Error::Truncated));
    assert_eq!(c.remaining(), 5, "a failed read takes nothing");
    assert_eq!(c.u32_be(), Ok(0x0506_0708));
    assert_eq!(c.finish(), Err(Error::BadLength));
    assert_eq!(c.rest(), &[9]);
    assert!(c.is_empty() && c.finish().is_ok());
    let mut c = Cursor::new(&[0, 2, b'h', b'i', 0, 3, b'x']);
    assert_eq!(c.str16_be(2), Ok("hi"));
    assert_eq!(c.clone().str16_be(2), Err(Error::BadLength));
    assert_eq!(c.str16_be(5), Err(Error::Truncated));
    let mut c = Cursor::new(&[2, 0, 0xff, 0xfe]);
    assert_eq!(c.str16(), Err(Error::BadUtf8));
    assert_eq!(Cursor::new(&b).u64_be(), Ok(0x0102_0304_0506_0708));
    assert_eq!(Cursor::new(&b).array_ref::<3>(), Ok(&[1, 2, 3]));
}

proptest! {
    /// A SEALED head written for bytes appended after it is what pushing the whole
    /// submessage writes.
    #[test]
    fn sealed_head_matches_sealed(to in 1u64.., counter in 1u64.., sealed in proptest::collection::vec(any::<u8>(), 16..200)) {
        let h = Header { domain: 3, participant: ParticipantId(5) };
        let mut whole = Vec::new();
        DatagramBuilder::new(&mut whole, h)
            .push(&Submessage::Sealed(SealedRepr { to: ParticipantId(to), counter, sealed: &sealed }))
            .unwrap();
        let mut head = Vec::new();
        DatagramBuilder::new(&mut head, h)
            .push_sealed_head(ParticipantId(to), counter, sealed.len())
            .unwrap();
        head.extend_from_slice(&sealed);
        prop_assert_eq!(head, whole);
    }
}

#[test]
fn sealed_head_refuses_what_sealed_refuses() {
    let h = Header {
        domain: 3,
        participant: ParticipantId(5),
    };
    let mut out = Vec::new();
    let mut b = DatagramBuilder::new(&mut out, h);
    assert_eq!(
        b.push_sealed_head(ParticipantId(1), 0, 16).err(),
        Some(Error::BadLength)
    );
    assert_eq!(
        b.push_sealed_head(ParticipantId(1), 1, 15).err(),
        Some(Error::BadLength)
    );
    assert_eq!(
        b.push_sealed_head(ParticipantId(1), 1, MAX_BODY_LEN).err(),
        Some(Error::TooLong)
    );
    assert!(b.is_empty());
}
