//! What a 1 KB seal and a reader's 1 KB open cost when the thread has just slept (the
//! milliseconds given as the first argument, 25 by default: the fanout bench's subscribers
//! see a sample every 25 ms), and warm, for each provider: aws-lc-rs (AVX-512 AES-GCM code
//! of over 300 KB on CPUs with VAES), ring (a compact VAES-AVX2 one) and tether's sender key
//! (ring below `SMALL_MESSAGE` bytes, aws-lc-rs above). Median and mean of 300, the
//! operations interleaved so that a slower period of the host hits them all alike. Run it
//! under different `OPENSSL_ia32cap` masks to see which instruction set aws-lc's cold cost
//! comes from.
use std::hint::black_box;
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};

type Op<'a> = (&'static str, Box<dyn FnMut(u64) + 'a>);

fn nonce(i: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&i.to_be_bytes());
    n
}

fn main() {
    let ms: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(25);
    let raw = [3u8; 16];
    let lc = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &raw).expect("key"));
    let rg = ring::aead::LessSafeKey::new(
        ring::aead::UnboundKey::new(&ring::aead::AES_128_GCM, &raw).expect("key"),
    );
    let key = tether_crypto::SenderKey::from_bytes(tether_crypto::Suite::Aes128Gcm, 0, &raw)
        .expect("key");
    // One received sample, sealed under sequence number 9 (every provider opens it).
    let mut sealed = vec![1u8; 1024];
    let tag = key.seal_in_place(9, &[], &mut sealed).expect("seal");
    sealed.extend_from_slice(&tag);
    let (ct, tg) = sealed.split_at(1024);
    let (mut b1, mut b2, mut b3) = (vec![5u8; 1024], vec![5u8; 1024], vec![5u8; 1024]);
    let mut ops: Vec<Op<'_>> = vec![
        (
            "aws-lc-rs seal",
            Box::new(|i| {
                let _ = black_box(lc.seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce(i)),
                    Aad::empty(),
                    &mut b1,
                ));
            }),
        ),
        (
            "ring seal",
            Box::new(|i| {
                let _ = black_box(rg.seal_in_place_separate_tag(
                    ring::aead::Nonce::assume_unique_for_key(nonce(i)),
                    ring::aead::Aad::empty(),
                    &mut b2,
                ));
            }),
        ),
        (
            "sender key seal",
            Box::new(|i| {
                let _ = black_box(key.seal_in_place(i, &[], &mut b3));
            }),
        ),
        (
            "aws-lc-rs open",
            Box::new(|_| {
                let mut v = vec![0u8; 1024];
                lc.open_separate_gather(
                    Nonce::assume_unique_for_key(nonce(9)),
                    Aad::empty(),
                    ct,
                    tg,
                    &mut v,
                )
                .expect("open");
                black_box(bytes::Bytes::from(v));
            }),
        ),
        (
            "ring open",
            Box::new(|_| {
                let mut v = sealed.clone();
                let n = rg
                    .open_in_place(
                        ring::aead::Nonce::assume_unique_for_key(nonce(9)),
                        ring::aead::Aad::empty(),
                        &mut v,
                    )
                    .expect("open")
                    .len();
                v.truncate(n);
                black_box(bytes::Bytes::from(v));
            }),
        ),
        (
            "sender key open",
            Box::new(|_| {
                let mut v = vec![0u8; 1024];
                key.open_into(9, &[], &sealed, &mut v).expect("open");
                black_box(bytes::Bytes::from(v));
            }),
        ),
    ];
    for (label, sleep) in [("warm", None), ("cold", Some(Duration::from_millis(ms)))] {
        let mut t: Vec<Vec<f64>> = vec![Vec::new(); ops.len()];
        for i in 0..300u64 {
            for (k, (_, op)) in ops.iter_mut().enumerate() {
                if let Some(d) = sleep {
                    std::thread::sleep(d);
                }
                let s = Instant::now();
                op(1000 + i * 8 + k as u64);
                t[k].push(s.elapsed().as_secs_f64() * 1e6);
            }
        }
        let what = match sleep {
            Some(_) => format!("{label} (after {ms} ms)"),
            None => label.to_string(),
        };
        println!("{what}, 1 KB AES-128-GCM, µs (median / mean):");
        for ((name, _), mut v) in ops.iter().zip(t) {
            v.sort_by(f64::total_cmp);
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            println!("  {name:<16} {:6.2} / {mean:6.2}", v[v.len() / 2]);
        }
    }
}
