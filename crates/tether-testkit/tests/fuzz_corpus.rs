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
