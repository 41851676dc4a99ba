//! What one 1 KB seal, and a reader's open of a 1 KB sample, cost when the thread has just
//! slept (5 ms, or the milliseconds given as the first argument: the fanout bench's
//! subscribers see a sample every 25 ms), against a scalar loop over the same bytes, median
//! of 200. Run it under different `OPENSSL_ia32cap` masks to see which instruction set the
//! cold cost comes from.
use std::hint::black_box;
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{AES_128_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};

/// What the engine does with an opened sample: hand it on as shared bytes.
fn bytes_of(v: Vec<u8>) -> bytes::Bytes {
    bytes::Bytes::from(v)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn probe(sleep: Option<Duration>, mut op: impl FnMut(u64)) -> f64 {
    let mut t = Vec::new();
    for i in 0..200u64 {
        if let Some(d) = sleep {
            std::thread::sleep(d);
        }
        let s = Instant::now();
        op(i);
        t.push(s.elapsed().as_secs_f64() * 1e6);
    }
    median(t)
}

fn main() {
    let aes = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &[3u8; 16]).unwrap());
    let cha = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &[3u8; 32]).unwrap());
    let mut buf = vec![5u8; 1024];
    let nonce = |i: u64| {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&i.to_be_bytes());
        Nonce::assume_unique_for_key(n)
    };
    // The sleep, in milliseconds, from the first argument (5 by default; the fanout bench's
    // subscribers see a sample every 25 ms).
    let ms: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let sleep = Some(Duration::from_millis(ms));
    let after = format!("after {ms} ms");
    for (name, cold) in [("warm", None), (after.as_str(), sleep)] {
        let a = probe(cold, |i| {
            let _ = black_box(aes.seal_in_place_separate_tag(nonce(i), Aad::empty(), &mut buf));
        });
        let mut buf2 = vec![5u8; 1024];
        let c = probe(cold, |i| {
            let _ = black_box(cha.seal_in_place_separate_tag(nonce(i), Aad::empty(), &mut buf2));
        });
        let data = vec![7u8; 1024];
        let s = probe(cold, |_| {
            let mut x = 0u64;
            for b in black_box(&data) {
                x = x.wrapping_mul(31).wrapping_add(u64::from(*b));
            }
            black_box(x);
        });
        // A reader's open of a received 1 KB sample, handing on owned bytes: a copy and an
        // open in place (before) against one open into an exactly sized buffer (now).
        let key = tether_crypto::SenderKey::generate(tether_crypto::Suite::Aes128Gcm, 1);
        let mut sealed = vec![1u8; 1024];
        let tag = key.seal_in_place(9, b"aad", &mut sealed).expect("seal");
        sealed.extend_from_slice(&tag);
        let copy = probe(cold, |_| {
            let mut v = sealed.clone();
            let n = key.open_in_place(9, b"aad", &mut v).expect("open").len();
            v.truncate(n);
            black_box(bytes_of(v));
        });
        let into = probe(cold, |_| {
            let mut v = vec![0u8; sealed.len() - tether_crypto::TAG_LEN];
            key.open_into(9, b"aad", &sealed, &mut v).expect("open");
            black_box(bytes_of(v));
        });
        println!(
            "{name}: AES-128-GCM {a:.2} µs, ChaCha20-Poly1305 {c:.2} µs, scalar loop {s:.2} µs; \
             reader open copy+in place {copy:.2} µs, into {into:.2} µs"
        );
    }
}
