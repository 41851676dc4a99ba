//! Replays the checked-in fuzz corpus (`fuzz/corpus/`) through the fuzz entry points, so
//! every CI run checks what the fuzzers found, without needing nightly or libFuzzer.

use std::path::Path;

fn replay(target: &str, f: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = e.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let r = std::panic::catch_unwind(|| f(&data));
        assert!(r.is_ok(), "fuzz input {} fails", path.display());
        n += 1;
    }
    n
}

#[test]
fn datagram_corpus() {
    assert!(replay("datagram", tether_testkit::fuzz::datagram) >= 7);
}

#[test]
fn participant_corpus() {
    assert!(replay("participant", tether_testkit::fuzz::participant) >= 1);
}

#[test]
fn layouts_corpus() {
    assert!(replay("layouts", tether_testkit::fuzz::layouts) >= 6);
}

/// The layouts corpus starts from inputs that parse, one per layout and protection mode, so
/// the fuzzer begins past the length checks.
#[test]
fn layouts_seeds_parse() {
    use tether_wire::{CredentialRepr, ProtectedSampleRepr, RevocationListRepr, WrappedKeyRepr};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/layouts");
    let (mut samples, mut keys, mut creds, mut lists) = (0, 0, 0, 0);
    for e in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        samples += ProtectedSampleRepr::parse(&data).is_ok() as usize;
        keys += (data.len() == 60 && WrappedKeyRepr::parse(&data).is_ok()) as usize;
        let (magic, rest) = match data.split_first() {
            Some((0, rest)) => (tether_wire::CREDENTIAL_MAGIC, rest),
            Some((_, rest)) => (tether_wire::REVOCATION_MAGIC, rest),
            None => continue,
        };
        let b = [&magic[..], rest].concat();
        creds += CredentialRepr::parse(&b).is_ok() as usize;
        lists += RevocationListRepr::parse(&b).is_ok() as usize;
    }
    assert!(samples >= 5, "{samples} protected samples");
    assert_eq!((keys, creds, lists), (1, 1, 1));
}
