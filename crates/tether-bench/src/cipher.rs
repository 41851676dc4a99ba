//! `tether bench cipher`: the 003 paper's table on this machine. 1 MB is encrypted and
//! decrypted in buffers of 1,024 … 10,240 bytes by the suites tether ships (aws-lc-rs) and,
//! for comparison only, ChaCha20, ChaCha12 and LEA-128/192/256 without AEAD (RustCrypto
//! crates; LEA in CTR mode). Every cipher is first checked against known test vectors.
//! Reported: KB/s (1 KB = 1,000 B, as `openssl speed`) and cycles per byte against the
//! nominal clock and against a measured one; beside them tether's own seal path against
//! the raw provider primitive at 8 KB, and `openssl speed -evp` when openssl is installed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::bail;
use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use serde_json::json;
use tether_crypto::{SenderKey, Suite, from_hex, to_hex};

use crate::harness::machine;

/// Paper 003 (Raspberry Pi 4, Cortex-A72 at 1.8 GHz, no AES instructions): best KB/s.
const PAPER: &[(&str, f64, f64)] = &[
    ("chacha12", 649_000.0, 2.8),
    ("chacha20", 415_000.0, 4.3),
    ("lea-192", 130_000.0, 13.8),
    ("lea-256", 115_000.0, 15.6),
    ("aes-256 (no AES instructions)", 49_000.0, 36.5),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cipher {
    Suite(Suite),
    ChaCha20,
    ChaCha12,
    Lea(usize),
}

impl Cipher {
    const ALL: [Cipher; 8] = [
        Cipher::Suite(Suite::Aes128Gcm),
        Cipher::Suite(Suite::Aes256Gcm),
        Cipher::Suite(Suite::ChaCha20Poly1305),
        Cipher::ChaCha20,
        Cipher::ChaCha12,
        Cipher::Lea(128),
        Cipher::Lea(192),
        Cipher::Lea(256),
    ];

    fn name(self) -> String {
        match self {
            Cipher::Suite(s) => s.name().to_string(),
            Cipher::ChaCha20 => "chacha20".into(),
            Cipher::ChaCha12 => "chacha12".into(),
            Cipher::Lea(b) => format!("lea-{b}"),
        }
    }

    fn shipped(self) -> bool {
        matches!(self, Cipher::Suite(_))
    }

    fn openssl_name(self) -> Option<&'static str> {
        match self {
            Cipher::Suite(Suite::Aes128Gcm) => Some("aes-128-gcm"),
            Cipher::Suite(Suite::Aes256Gcm) => Some("aes-256-gcm"),
            Cipher::Suite(Suite::ChaCha20Poly1305) => Some("chacha20-poly1305"),
            Cipher::ChaCha20 => Some("chacha20"),
            _ => None,
        }
    }
}

/// One cipher keyed and ready: encrypts or decrypts a buffer in place.
enum Engine {
    Aead(Box<SenderKey>),
    ChaCha20([u8; 32]),
    ChaCha12([u8; 32]),
    Lea128([u8; 16]),
    Lea192([u8; 24]),
    Lea256([u8; 32]),
}

const WRITER: [u8; 12] = [7; 12];

impl Engine {
    fn new(c: Cipher) -> Engine {
        let k: [u8; 32] = tether_crypto::random_bytes();
        match c {
            Cipher::Suite(s) => Engine::Aead(Box::new(SenderKey::generate(
                s,
                1,
                &mut tether_crypto::OsRandom,
            ))),
            Cipher::ChaCha20 => Engine::ChaCha20(k),
            Cipher::ChaCha12 => Engine::ChaCha12(k),
            Cipher::Lea(128) => Engine::Lea128(k[..16].try_into().expect("16")),
            Cipher::Lea(192) => Engine::Lea192(k[..24].try_into().expect("24")),
            Cipher::Lea(_) => Engine::Lea256(k),
        }
    }

    /// Encrypts `buf` (AEAD: seals it, appending the tag) as message number `seq`.
    fn encrypt(&mut self, seq: u64, buf: &mut Vec<u8>) {
        match self {
            Engine::Aead(k) => {
                k.seal_sample(&WRITER, seq, buf).expect("sealing works");
            }
            _ => self.stream(seq, buf),
        }
    }

    /// Decrypts what `encrypt` made (AEAD: opens and checks the tag, dropping it).
    fn decrypt(&mut self, seq: u64, buf: &mut Vec<u8>) {
        match self {
            Engine::Aead(k) => {
                let n = k
                    .open_sample(&WRITER, seq, buf)
                    .expect("what was sealed opens")
                    .len();
                buf.truncate(n);
            }
            _ => self.stream(seq, buf),
        }
    }

    fn stream(&mut self, seq: u64, buf: &mut [u8]) {
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&seq.to_be_bytes());
        match self {
            Engine::Aead(_) => {}
            Engine::ChaCha20(k) => {
                use chacha20::cipher::{KeyIvInit, StreamCipher};
                let mut c = chacha20::ChaCha20::new(k[..].into(), nonce[..12].into());
                c.apply_keystream(buf);
            }
            Engine::ChaCha12(k) => {
                use chacha20::cipher::{KeyIvInit, StreamCipher};
                let mut c = chacha20::ChaCha12::new(k[..].into(), nonce[..12].into());
                c.apply_keystream(buf);
            }
            Engine::Lea128(k) => {
                use lea::ctr::cipher::{NewCipher, StreamCipher};
                let mut c = lea::Lea128Ctr::new(k[..].into(), nonce[..].into());
                c.apply_keystream(buf);
            }
            Engine::Lea192(k) => {
                use lea::ctr::cipher::{NewCipher, StreamCipher};
                let mut c = lea::Lea192Ctr::new(k[..].into(), nonce[..].into());
                c.apply_keystream(buf);
            }
            Engine::Lea256(k) => {
                use lea::ctr::cipher::{NewCipher, StreamCipher};
                let mut c = lea::Lea256Ctr::new(k[..].into(), nonce[..].into());
                c.apply_keystream(buf);
            }
        }
    }
}

/// Checks every cipher against published vectors before any figure is taken.
pub(crate) fn known_answers() -> anyhow::Result<()> {
    let h = |s: &str| from_hex(s).expect("literal hex");
    // ChaCha20: RFC 8439 section 2.4.2 (counter 1: skip the first 64-byte block).
    {
        use chacha20::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
        let key = h("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
        let nonce = h("000000000000004a00000000");
        let mut c = chacha20::ChaCha20::new(key[..].into(), nonce[..].into());
        c.seek(64u32);
        let mut buf = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".to_vec();
        c.apply_keystream(&mut buf);
        if to_hex(&buf[..16]) != "6e2e359a2568f98041ba0728dd0d6981" {
            bail!("ChaCha20 fails RFC 8439's test vector");
        }
    }
    // ChaCha12: no RFC vector; checked against tether's own reference ChaCha block function,
    // itself checked against RFC 8439's ChaCha20 block vector (section 2.3.2).
    {
        use chacha20::cipher::{KeyIvInit, StreamCipher};
        let key: [u8; 32] = std::array::from_fn(|i| i as u8);
        let nonce = h("000000090000004a00000000");
        let block20 = reference_block(&key, 1, &nonce, 20);
        if to_hex(&block20[..16]) != "10f1e7e4d13b5915500fdd1fa32071c4" {
            bail!("the reference ChaCha block function fails RFC 8439");
        }
        let mut want = reference_block(&key, 0, &nonce, 12).to_vec();
        want.extend_from_slice(&reference_block(&key, 1, &nonce, 12));
        let mut got = vec![0u8; 128];
        chacha20::ChaCha12::new(key[..].into(), nonce[..].into()).apply_keystream(&mut got);
        if got != want {
            bail!("ChaCha12 disagrees with the reference 12-round ChaCha");
        }
    }
    // LEA: the KISA/ISO 29192-2 block vectors, through the CTR keystream of a zero block.
    for (bits, key, pt, ct) in [
        (
            128,
            "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
            "101112131415161718191a1b1c1d1e1f",
            "9fc84e3528c6c6185532c7a704648bfd",
        ),
        (
            192,
            "0f1e2d3c4b5a69788796a5b4c3d2e1f0f0e1d2c3b4a59687",
            "202122232425262728292a2b2c2d2e2f",
            "6fb95e325aad1b878cdcf5357674c6f2",
        ),
        (
            256,
            "0f1e2d3c4b5a69788796a5b4c3d2e1f0f0e1d2c3b4a5968778695a4b3c2d1e0f",
            "303132333435363738393a3b3c3d3e3f",
            "d651aff647b189c13a8900ca27f9e197",
        ),
    ] {
        use lea::ctr::cipher::{NewCipher, StreamCipher};
        // CTR with the plaintext as counter block: keystream block 0 = E(pt).
        let k = h(key);
        let p = h(pt);
        let mut block = vec![0u8; 16];
        match bits {
            128 => lea::Lea128Ctr::new(k[..].into(), p[..].into()).apply_keystream(&mut block),
            192 => lea::Lea192Ctr::new(k[..].into(), p[..].into()).apply_keystream(&mut block),
            _ => lea::Lea256Ctr::new(k[..].into(), p[..].into()).apply_keystream(&mut block),
        }
        if to_hex(&block) != ct {
            bail!("LEA-{bits} fails its test vector");
        }
    }
    // The AEAD suites: RFC 8439 and NIST GCM vectors (as tether-crypto's tests), and a
    // seal/open round trip through tether's own path.
    let k = LessSafeKey::new(
        UnboundKey::new(
            &aead::AES_256_GCM,
            &h("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308"),
        )
        .map_err(|_| anyhow::anyhow!("AES-256 key"))?,
    );
    let mut buf = h(
        "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255",
    );
    let tag = k
        .seal_in_place_separate_tag(
            Nonce::try_assume_unique_for_key(&h("cafebabefacedbaddecaf888"))
                .map_err(|_| anyhow::anyhow!("nonce"))?,
            Aad::empty(),
            &mut buf,
        )
        .map_err(|_| anyhow::anyhow!("seal"))?;
    if to_hex(tag.as_ref()) != "b094dac5d93471bdec1a502270e3cc6c" {
        bail!("AES-256-GCM fails NIST GCM test case 15");
    }
    for s in Suite::ALL {
        let mut e = Engine::new(Cipher::Suite(s));
        let mut b = b"known answer".to_vec();
        e.encrypt(1, &mut b);
        e.decrypt(1, &mut b);
        if b != b"known answer" {
            bail!("{s} does not round-trip");
        }
    }
    Ok(())
}

/// The ChaCha block function (RFC 8439 section 2.3) with `rounds` rounds.
fn reference_block(key: &[u8; 32], counter: u32, nonce: &[u8], rounds: usize) -> [u8; 64] {
    let mut s = [0u32; 16];
    s[..4].copy_from_slice(&[0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]);
    for i in 0..8 {
        s[4 + i] = u32::from_le_bytes(key[4 * i..4 * i + 4].try_into().expect("4"));
    }
    s[12] = counter;
    for i in 0..3 {
        s[13 + i] = u32::from_le_bytes(nonce[4 * i..4 * i + 4].try_into().expect("4"));
    }
    let mut x = s;
    let qr = |x: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize| {
        x[a] = x[a].wrapping_add(x[b]);
        x[d] = (x[d] ^ x[a]).rotate_left(16);
        x[c] = x[c].wrapping_add(x[d]);
        x[b] = (x[b] ^ x[c]).rotate_left(12);
        x[a] = x[a].wrapping_add(x[b]);
        x[d] = (x[d] ^ x[a]).rotate_left(8);
        x[c] = x[c].wrapping_add(x[d]);
        x[b] = (x[b] ^ x[c]).rotate_left(7);
    };
    for _ in 0..rounds / 2 {
        qr(&mut x, 0, 4, 8, 12);
        qr(&mut x, 1, 5, 9, 13);
        qr(&mut x, 2, 6, 10, 14);
        qr(&mut x, 3, 7, 11, 15);
        qr(&mut x, 0, 5, 10, 15);
        qr(&mut x, 1, 6, 11, 12);
        qr(&mut x, 2, 7, 8, 13);
        qr(&mut x, 3, 4, 9, 14);
    }
    let mut out = [0u8; 64];
    for i in 0..16 {
        out[4 * i..4 * i + 4].copy_from_slice(&x[i].wrapping_add(s[i]).to_le_bytes());
    }
    out
}

/// The core's clock, measured: a chain of dependent 64-bit multiplies completes one per
/// three cycles on every x86-64 core of the last fifteen years (Intel and AMD alike), so
/// timing a known number of them gives the frequency the core really runs at (turbo,
/// power saving and the hypervisor included). A chain of `add reg, imm` would not do:
/// Golden Cove and later cores fold those at rename and retire several per cycle (it read
/// 19 GHz here). x86-64 only; elsewhere, or if the figure is implausible, `None`.
fn measured_ghz() -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        let iters: u64 = 10_000_000;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            let mut x: u64 = 3;
            let mut n = iters;
            // SAFETY: register-only arithmetic and a counted loop; no memory is touched.
            unsafe {
                std::arch::asm!(
                    "2:",
                    "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}",
                    "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}", "imul {x}, {x}",
                    "imul {x}, {x}", "imul {x}, {x}",
                    "dec {n}",
                    "jnz 2b",
                    x = inout(reg) x,
                    n = inout(reg) n,
                    options(nomem, nostack),
                );
            }
            black_box((x, n));
            best = best.min(t.elapsed().as_secs_f64());
        }
        let ghz = iters as f64 * 10.0 * 3.0 / best / 1e9;
        (0.2..8.0).contains(&ghz).then_some(ghz)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// The rated clock in the CPU's model name ("… @ 2.80GHz"), if it gives one.
fn rated_ghz() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let model = info.lines().find(|l| l.starts_with("model name"))?;
    let at = model.split('@').nth(1)?;
    at.trim().trim_end_matches("GHz").trim().parse::<f64>().ok()
}

/// The rated clock, else the one the kernel reports now (a VM's is fixed; on a machine
/// that scales its clock it may be far below the turbo clock).
fn nominal_ghz() -> Option<f64> {
    if let Some(g) = rated_ghz() {
        return Some(g);
    }
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz = info.lines().find(|l| l.starts_with("cpu MHz"))?;
    mhz.split(':')
        .nth(1)?
        .trim()
        .parse::<f64>()
        .ok()
        .map(|m| m / 1e3)
}

/// Bytes per second for 1 MB through `op` in buffers of `size`, best of several runs of at
/// least `min` each.
fn rate(size: usize, min: Duration, mut op: impl FnMut(u64, &mut Vec<u8>)) -> f64 {
    const TOTAL: usize = 1_000_000;
    let per = TOTAL.div_ceil(size);
    let mut bufs: Vec<Vec<u8>> = (0..per)
        .map(|_| {
            let mut v = Vec::with_capacity(size + 16);
            v.resize(size, 0x5a);
            v
        })
        .collect();
    let mut best: f64 = 0.0;
    let mut seq = 0u64;
    for _ in 0..3 {
        let t = Instant::now();
        let mut bytes = 0usize;
        while t.elapsed() < min {
            for b in bufs.iter_mut() {
                seq += 1;
                op(seq, b);
                bytes += size;
            }
        }
        best = best.max(bytes as f64 / t.elapsed().as_secs_f64());
    }
    best
}

struct Row {
    cipher: Cipher,
    size: usize,
    enc: f64,
    dec: f64,
}

fn openssl_speed(name: &str) -> Option<f64> {
    let out = std::process::Command::new("openssl")
        .args(["speed", "-evp", name, "-bytes", "8192", "-seconds", "1"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last()?;
    let v = line.split_whitespace().last()?.trim_end_matches('k');
    v.parse::<f64>().ok().map(|k| k * 1000.0)
}

/// `tether bench cipher`.
pub(crate) fn run(sizes: &[usize], millis: u64, json: bool) -> anyhow::Result<()> {
    known_answers()?;
    if sizes.is_empty() || sizes.iter().any(|s| *s == 0 || *s > 1 << 20) {
        bail!("--sizes must be between 1 and 1048576 bytes");
    }
    let min = Duration::from_millis(millis.max(1));
    let clock = Clock {
        nominal: nominal_ghz(),
        measured: measured_ghz(),
    };
    let rows = measure(sizes, min);
    // tether's seal path against the provider's primitive, same buffer, same run, 8 KB:
    // key lookup (by writer, in a map as the engine keeps them), AAD, nonce, tag appended.
    let paths = Suite::ALL
        .into_iter()
        .map(|s| seal_path(s, min))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let comparisons: Vec<(Cipher, Option<f64>)> = [Cipher::ChaCha20]
        .into_iter()
        .map(|c| (c, c.openssl_name().and_then(openssl_speed)))
        .collect();
    if json {
        print_json(clock, &rows, &paths, &comparisons)
    } else {
        print_table(clock, &rows, &paths, &comparisons);
        Ok(())
    }
}

/// The clock in GHz: the rated or reported one, and the measured one.
#[derive(Debug, Clone, Copy)]
struct Clock {
    nominal: Option<f64>,
    measured: Option<f64>,
}

/// Cycles per byte at `bps` bytes per second on a `ghz` clock.
fn cpb(bps: f64, ghz: f64) -> f64 {
    ghz * 1e9 / bps
}

/// One suite's seal path at 8 KB: tether's and the raw primitive's bytes per second, and
/// `openssl speed`'s when installed.
type SealPath = (Suite, f64, f64, Option<f64>);

/// Every cipher at every size: encrypt, then decrypt what was encrypted (an AEAD's open
/// checks the tag).
fn measure(sizes: &[usize], min: Duration) -> Vec<Row> {
    let mut rows = Vec::new();
    for c in Cipher::ALL {
        for &size in sizes {
            let mut e = Engine::new(c);
            let enc = rate(size, min, |seq, b| {
                b.truncate(size);
                e.encrypt(seq, b);
            });
            let mut template = vec![0x5a; size];
            e.encrypt(1, &mut template);
            let dec = rate(size, min, |_, b| {
                b.clear();
                b.extend_from_slice(&template);
                e.decrypt(1, b);
            });
            rows.push(Row {
                cipher: c,
                size,
                enc,
                dec,
            });
        }
    }
    rows
}

/// tether's seal path for suite `s` against the provider's primitive.
fn seal_path(s: Suite, min: Duration) -> anyhow::Result<SealPath> {
    let size = 8192;
    let key = SenderKey::generate(s, 1, &mut tether_crypto::OsRandom);
    let mut keys = std::collections::BTreeMap::new();
    keys.insert(WRITER, key);
    keys.insert(
        [8; 12],
        SenderKey::generate(s, 1, &mut tether_crypto::OsRandom),
    );
    let raw_key = LessSafeKey::new(
        UnboundKey::new(
            match s {
                Suite::Aes128Gcm => &aead::AES_128_GCM,
                Suite::Aes256Gcm => &aead::AES_256_GCM,
                Suite::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
            },
            &tether_crypto::random_bytes::<32>()[..s.key_len()],
        )
        .map_err(|_| anyhow::anyhow!("key"))?,
    );
    // Interleaved, best of each: the VM's noise falls on both alike.
    let (mut tether, mut raw) = (0f64, 0f64);
    // The engine's own path in steady state: key lookup, then
    // tether_crypto::sample::protect_into (the protection byte and epoch, the 33-byte
    // AAD, the seal from the application's bytes into the buffer the writer's history
    // gave back, the tag).
    let signer = tether_crypto::Identity::generate();
    let enc = tether_crypto::Protection {
        encrypt: true,
        sign: false,
    };
    let mut spare: Vec<u8> = Vec::new();
    let mut seal_tether = |seq: u64, b: &mut Vec<u8>| {
        b.truncate(size);
        let k = keys.get(&WRITER).expect("present");
        tether_crypto::sample::protect_into(
            &mut spare,
            enc,
            Some(k),
            &signer,
            &WRITER,
            seq,
            seq,
            b,
        )
        .expect("seals");
        let _ = black_box(&spare);
    };
    let mut seal_raw = |seq: u64, b: &mut Vec<u8>| {
        b.truncate(size);
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&seq.to_be_bytes());
        let tag = raw_key
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(n), Aad::empty(), b)
            .expect("seals");
        let _ = black_box(tag);
    };
    // Interleaved, the order swapped every round, best of each: the VM's noise and any
    // warm-up fall on both alike.
    for round in 0..8 {
        if round % 2 == 0 {
            tether = tether.max(rate(size, min / 4, &mut seal_tether));
            raw = raw.max(rate(size, min / 4, &mut seal_raw));
        } else {
            raw = raw.max(rate(size, min / 4, &mut seal_raw));
            tether = tether.max(rate(size, min / 4, &mut seal_tether));
        }
    }
    let openssl = Cipher::Suite(s).openssl_name().and_then(openssl_speed);
    Ok((s, tether, raw, openssl))
}

fn print_json(
    clock: Clock,
    rows: &[Row],
    paths: &[SealPath],
    comparisons: &[(Cipher, Option<f64>)],
) -> anyhow::Result<()> {
    let Clock { nominal, measured } = clock;
    let v: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({"cipher": r.cipher.name(), "shipped": r.cipher.shipped(), "buffer": r.size,
                   "encrypt_kb_per_s": r.enc / 1e3, "decrypt_kb_per_s": r.dec / 1e3,
                   "encrypt_cpb_nominal": nominal.map(|g| cpb(r.enc, g)),
                   "encrypt_cpb_measured": measured.map(|g| cpb(r.enc, g)),
                   "decrypt_cpb_nominal": nominal.map(|g| cpb(r.dec, g)),
                   "decrypt_cpb_measured": measured.map(|g| cpb(r.dec, g))})
        })
        .collect();
    let p: Vec<_> = paths
        .iter()
        .map(|(s, t, r, o)| {
            json!({"suite": s.name(), "tether_seal_bytes_per_s": t, "raw_seal_bytes_per_s": r,
                   "ratio": t / r, "openssl_bytes_per_s": o})
        })
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "bench": "cipher", "machine": machine(), "nominal_ghz": nominal,
            "measured_ghz": measured, "auto_suite": Suite::auto().name(),
            "results": v, "seal_path_8k": p,
            "openssl_comparisons": comparisons.iter().map(|(c, o)| json!({"cipher": c.name(), "openssl_bytes_per_s": o})).collect::<Vec<_>>(),
        }))?
    );
    Ok(())
}

fn print_table(
    clock: Clock,
    rows: &[Row],
    paths: &[SealPath],
    comparisons: &[(Cipher, Option<f64>)],
) {
    let Clock { nominal, measured } = clock;
    println!(
        "tether bench cipher — 1 MB in buffers of each size, best of 3, {}; clock nominal {}, measured {}; auto suite here: {}",
        machine(),
        nominal.map_or("unknown".into(), |g| format!("{g:.2} GHz")),
        measured.map_or("unknown".into(), |g| format!("{g:.2} GHz")),
        Suite::auto()
    );
    println!(
        "{:<18} {:>7} {:>14} {:>14} {:>10} {:>10}   (all known-answer tests passed)",
        "cipher", "buffer", "encrypt KB/s", "decrypt KB/s", "cpb nom", "cpb meas"
    );
    for r in rows {
        println!(
            "{:<18} {:>7} {:>14.0} {:>14.0} {:>10} {:>10}",
            format!(
                "{}{}",
                r.cipher.name(),
                if r.cipher.shipped() { "" } else { " *" }
            ),
            r.size,
            r.enc / 1e3,
            r.dec / 1e3,
            nominal.map_or("-".into(), |g| format!("{:.2}", cpb(r.enc, g))),
            measured.map_or("-".into(), |g| format!("{:.2}", cpb(r.enc, g)))
        );
    }
    println!("* comparison only (no AEAD; LEA in CTR mode); cpb = cycles per byte of encryption");
    println!("\nseal path at 8 KB (bar: tether ≥ 90 % of the raw primitive, same run)");
    println!(
        "{:<18} {:>14} {:>14} {:>7} {:>16}",
        "suite", "tether KB/s", "raw KB/s", "ratio", "openssl -evp KB/s"
    );
    for (s, t, r, o) in paths {
        println!(
            "{:<18} {:>14.0} {:>14.0} {:>6.1}% {:>16}",
            s.name(),
            t / 1e3,
            r / 1e3,
            t / r * 100.0,
            o.map_or("-".into(), |o| format!("{:.0}", o / 1e3))
        );
    }
    for (c, o) in comparisons {
        if let Some(o) = o {
            println!(
                "openssl speed -evp {} at 8 KB: {:.0} KB/s",
                c.name(),
                o / 1e3
            );
        }
    }
    println!(
        "\npaper 003 (Raspberry Pi 4, Cortex-A72 at 1.8 GHz, no AES instructions), best KB/s:"
    );
    for (n, kbs, c) in PAPER {
        println!("  {n:<32} {kbs:>9.0} KB/s  {c:>5.1} cpb");
    }
}

#[cfg(test)]
mod tests {
    /// The measured clock is a clock: under 8 GHz, and never above twice the rated one
    /// when the model name gives it (turbo stays well below that; the kernel's "cpu MHz"
    /// is not compared, as on a machine that scales its clock it may be the idle one). It
    /// once read 19 GHz on a 2.6 GHz Xeon whose cores fold dependent `add reg, imm` chains
    /// at rename. Load can only make it read low, so this cannot flake.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn measured_clock_is_plausible() {
        let g = super::measured_ghz().expect("an x86-64 core's clock is measurable");
        assert!(g < 8.0, "{g} GHz");
        if let Some(n) = super::rated_ghz() {
            assert!(g <= 2.0 * n, "measured {g} GHz against nominal {n} GHz");
        }
    }
}
