//! What the control plane's tag costs per datagram (`docs/wire.md#auth_tag`): GMAC over a
//! datagram of each size, with aws-lc-rs (the tag tether computes) and ring, warm.
//! `cargo run --release -p tether-crypto --example tag_cost`

use std::time::Instant;

fn main() {
    let key = tether_crypto::ControlKey::generate(1, &mut tether_crypto::OsRandom);
    let raw: [u8; 16] = key.key_bytes().try_into().unwrap();
    let ring_key = ring::aead::LessSafeKey::new(
        ring::aead::UnboundKey::new(&ring::aead::AES_128_GCM, &raw).unwrap(),
    );
    for size in [100usize, 1_100, 8_000, 64_000] {
        let data = vec![7u8; size];
        let n = 2_000_000 / (size / 100 + 1);
        let t = Instant::now();
        let mut x = 0u8;
        for c in 1..=n as u64 {
            x ^= key.tag(c, &data, 0).1[0];
        }
        let aws = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now();
        for c in 1..=n as u64 {
            let mut nonce = [0u8; 12];
            nonce[4..].copy_from_slice(&c.to_be_bytes());
            let tag = ring_key
                .seal_in_place_separate_tag(
                    ring::aead::Nonce::assume_unique_for_key(nonce),
                    ring::aead::Aad::from(&data[..]),
                    &mut [],
                )
                .unwrap();
            x ^= tag.as_ref()[0];
        }
        let ring_ns = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now();
        let (to, tag) = key.tag(1, &data, 0);
        let mut ok = 0;
        for _ in 0..n {
            ok += key.open(1, &data, &to, &tag).is_some() as u32;
        }
        let verify = t.elapsed().as_nanos() as f64 / n as f64;
        println!(
            "{size:>6} B: tag aws-lc-rs {aws:7.0} ns, ring {ring_ns:7.0} ns; verify {verify:7.0} ns ({x}{ok})"
        );
    }
}
