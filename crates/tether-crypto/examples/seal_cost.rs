//! Where the seal path's time goes at 8 KB: the raw primitive without and with a 24-byte
//! AAD, and `SenderKey::seal_sample`, interleaved, best of 8.
use std::time::Instant;

use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use tether_crypto::{SenderKey, Suite};

fn main() {
    let size = 8192;
    let n = 20_000u64;
    let raw = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &[3u8; 16]).unwrap());
    let k = SenderKey::from_bytes(Suite::Aes128Gcm, 1, &[3u8; 16]).unwrap();
    let mut buf = Vec::with_capacity(size + 16);
    let mut best = [f64::MAX; 3];
    for _ in 0..8 {
        for (i, b) in best.iter_mut().enumerate() {
            let t = Instant::now();
            for seq in 0..n {
                buf.clear();
                buf.resize(size, 0);
                let mut nn = [0u8; 12];
                nn[4..].copy_from_slice(&seq.to_be_bytes());
                match i {
                    0 => {
                        let _ = raw.seal_in_place_separate_tag(
                            Nonce::assume_unique_for_key(nn),
                            Aad::empty(),
                            &mut buf,
                        );
                    }
                    1 => {
                        let _ = raw.seal_in_place_separate_tag(
                            Nonce::assume_unique_for_key(nn),
                            Aad::from(&[7u8; 24][..]),
                            &mut buf,
                        );
                    }
                    _ => k.seal_sample(&[7; 12], seq, &mut buf).unwrap(),
                }
            }
            *b = b.min(t.elapsed().as_secs_f64() / n as f64 * 1e9);
        }
    }
    println!(
        "ns per 8 KB seal: raw {:.0}, raw + 24 B AAD {:.0}, seal_sample {:.0}",
        best[0], best[1], best[2]
    );
}
