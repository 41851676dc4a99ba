//! AEAD suites and sender keys.

use std::fmt;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};

/// Bytes of authentication tag every sealed message carries.
pub const TAG_LEN: usize = 16;

/// Messages shorter than this many bytes of plaintext are sealed and opened with ring;
/// longer ones with aws-lc-rs. Both implement the same standard AEADs, so either opens what
/// the other sealed. aws-lc-rs's AES-GCM is the faster one on long messages (AVX-512 code,
/// 1.5x ring's at 8 KB on a Xeon with VAES), but that code is over 300 KB: after the
/// thread has slept, a 1 KB open pays for fetching it and takes about twice as long as
/// ring's compact one, whose speed warm is the same at 1 KB (docs/benchmarks.md, "Cold
/// seals and opens"). A sample every few milliseconds is the common case for small ones.
pub const SMALL_MESSAGE: usize = 4096;

/// The AEAD suites tether ships (aws-lc-rs and ring on the data path, by message size:
/// see [`SMALL_MESSAGE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suite {
    /// AES-128-GCM.
    Aes128Gcm,
    /// AES-256-GCM.
    Aes256Gcm,
    /// ChaCha20-Poly1305.
    ChaCha20Poly1305,
}

impl Suite {
    /// Every suite.
    pub const ALL: [Suite; 3] = [Suite::Aes128Gcm, Suite::Aes256Gcm, Suite::ChaCha20Poly1305];

    /// AES-128-GCM where the CPU has AES and carry-less multiply instructions (AES-NI, ARMv8
    /// crypto extensions), ChaCha20-Poly1305 elsewhere (the 003 paper: without AES
    /// instructions ChaCha is several times faster).
    pub fn auto() -> Suite {
        if has_aes_instructions() {
            Suite::Aes128Gcm
        } else {
            Suite::ChaCha20Poly1305
        }
    }

    /// Its name in configuration.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Aes128Gcm => "aes128-gcm",
            Suite::Aes256Gcm => "aes256-gcm",
            Suite::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }

    /// Its code on the wire.
    pub fn code(self) -> u8 {
        match self {
            Suite::Aes128Gcm => 1,
            Suite::Aes256Gcm => 2,
            Suite::ChaCha20Poly1305 => 3,
        }
    }

    /// From its code on the wire.
    pub fn from_code(c: u8) -> Option<Suite> {
        Suite::ALL.into_iter().find(|s| s.code() == c)
    }

    /// Key length in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Suite::Aes128Gcm => 16,
            Suite::Aes256Gcm | Suite::ChaCha20Poly1305 => 32,
        }
    }

    /// Seals one key may make before the writer moves to a new epoch. For AES-GCM, 2^24
    /// messages keeps the confidentiality advantage below 2^-57 for messages up to 64 KiB
    /// (the bound TLS 1.3 uses, scaled to tether's datagram); ChaCha20-Poly1305's bound is
    /// far beyond any writer's life, capped at 2^48 here.
    pub fn usage_limit(self) -> u64 {
        match self {
            Suite::Aes128Gcm | Suite::Aes256Gcm => 1 << 24,
            Suite::ChaCha20Poly1305 => 1 << 48,
        }
    }

    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            Suite::Aes128Gcm => &aead::AES_128_GCM,
            Suite::Aes256Gcm => &aead::AES_256_GCM,
            Suite::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }

    fn ring_algorithm(self) -> &'static ring::aead::Algorithm {
        match self {
            Suite::Aes128Gcm => &ring::aead::AES_128_GCM,
            Suite::Aes256Gcm => &ring::aead::AES_256_GCM,
            Suite::ChaCha20Poly1305 => &ring::aead::CHACHA20_POLY1305,
        }
    }
}

/// A suite name that is not `auto`, `aes128-gcm`, `aes256-gcm` or `chacha20-poly1305`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown suite '{0}' (expected auto, aes128-gcm, aes256-gcm or chacha20-poly1305)")]
pub struct UnknownSuite(pub String);

impl std::str::FromStr for Suite {
    type Err = UnknownSuite;
    fn from_str(s: &str) -> Result<Self, UnknownSuite> {
        match s {
            "auto" => Ok(Suite::auto()),
            "aes128-gcm" => Ok(Suite::Aes128Gcm),
            "aes256-gcm" => Ok(Suite::Aes256Gcm),
            "chacha20-poly1305" => Ok(Suite::ChaCha20Poly1305),
            _ => Err(UnknownSuite(s.to_string())),
        }
    }
}

impl fmt::Display for Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn has_aes_instructions() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Why a seal or open failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The key bytes do not fit the suite.
    #[error("key length does not match the suite")]
    BadKey,
    /// Authentication failed: wrong key, tampered bytes, or wrong sequence number.
    #[error("authentication failed")]
    Forged,
    /// Shorter than a tag.
    #[error("sealed message shorter than its tag")]
    TooShort,
    /// The output buffer is not as long as the plaintext.
    #[error("output buffer length does not match the plaintext")]
    BadOutput,
}

/// One writer's key for one epoch. Every sample (or batch) is sealed once, with the nonce
/// `epoch (4 bytes) ‖ sequence number (8 bytes)`: unique, because a writer never reuses a
/// sequence number and every epoch has a fresh random key.
pub struct SenderKey {
    suite: Suite,
    epoch: u32,
    /// For messages of at least [`SMALL_MESSAGE`] bytes.
    key: LessSafeKey,
    /// The same key, for shorter messages.
    small: ring::aead::LessSafeKey,
    raw: zeroize::Zeroizing<Vec<u8>>,
    /// What whole batches are sealed with (`docs/wire.md#sealed_batch`).
    batch: BatchKey,
}

/// A sender key's second key, for sealed batches: HKDF-SHA-256 of the sender key (salt
/// `"tether batch key v1"`, info the suite's code), so a batch sealed under the nonce `epoch
/// ‖ first_seq` never shares a key and nonce with the sample of that number sealed alone.
struct BatchKey {
    key: LessSafeKey,
    small: ring::aead::LessSafeKey,
}

impl BatchKey {
    fn derive(suite: Suite, key: &[u8]) -> Result<BatchKey, SealError> {
        use aws_lc_rs::hkdf::{HKDF_SHA256, KeyType, Salt};
        struct Len(usize);
        impl KeyType for Len {
            fn len(&self) -> usize {
                self.0
            }
        }
        let prk = Salt::new(HKDF_SHA256, b"tether batch key v1").extract(key);
        let info = [suite.code()];
        let parts = [&info[..]];
        let okm = prk
            .expand(&parts, Len(suite.key_len()))
            .map_err(|_| SealError::BadKey)?;
        let mut k = zeroize::Zeroizing::new(vec![0u8; suite.key_len()]);
        okm.fill(&mut k).map_err(|_| SealError::BadKey)?;
        Ok(BatchKey {
            key: LessSafeKey::new(
                UnboundKey::new(suite.algorithm(), &k).map_err(|_| SealError::BadKey)?,
            ),
            small: ring::aead::LessSafeKey::new(
                ring::aead::UnboundKey::new(suite.ring_algorithm(), &k)
                    .map_err(|_| SealError::BadKey)?,
            ),
        })
    }
}

impl fmt::Debug for SenderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SenderKey")
            .field("suite", &self.suite)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl SenderKey {
    /// A fresh random key from `rng`.
    pub fn generate(suite: Suite, epoch: u32, rng: &mut dyn crate::Random) -> SenderKey {
        let mut bytes = zeroize::Zeroizing::new(vec![0u8; suite.key_len()]);
        rng.fill(&mut bytes);
        Self::from_bytes(suite, epoch, &bytes).expect("length fits the suite")
    }

    /// From key bytes (e.g. unwrapped for a reader).
    pub fn from_bytes(suite: Suite, epoch: u32, key: &[u8]) -> Result<SenderKey, SealError> {
        let k = UnboundKey::new(suite.algorithm(), key).map_err(|_| SealError::BadKey)?;
        let small = ring::aead::UnboundKey::new(suite.ring_algorithm(), key)
            .map_err(|_| SealError::BadKey)?;
        Ok(SenderKey {
            suite,
            epoch,
            key: LessSafeKey::new(k),
            small: ring::aead::LessSafeKey::new(small),
            raw: zeroize::Zeroizing::new(key.to_vec()),
            batch: BatchKey::derive(suite, key)?,
        })
    }

    /// The key bytes (secret: to wrap for readers).
    pub fn key_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// The suite.
    pub fn suite(&self) -> Suite {
        self.suite
    }

    /// The epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    fn nonce_bytes(&self, seq: u64) -> [u8; 12] {
        tether_wire::sender_key_nonce(self.epoch, seq)
    }

    fn nonce(&self, seq: u64) -> Nonce {
        Nonce::assume_unique_for_key(self.nonce_bytes(seq))
    }

    fn small_nonce(&self, seq: u64) -> ring::aead::Nonce {
        ring::aead::Nonce::assume_unique_for_key(self.nonce_bytes(seq))
    }

    /// Seals `buf` in place for sequence number `seq` and returns the tag to send after it.
    /// `aad` is authenticated, not encrypted (tether binds the writer, the epoch and the
    /// sequence numbers).
    pub fn seal_in_place(
        &self,
        seq: u64,
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; TAG_LEN], SealError> {
        let mut t = [0u8; TAG_LEN];
        if buf.len() < SMALL_MESSAGE {
            let tag = self
                .small
                .seal_in_place_separate_tag(self.small_nonce(seq), ring::aead::Aad::from(aad), buf)
                .map_err(|_| SealError::BadKey)?;
            t.copy_from_slice(tag.as_ref());
        } else {
            let tag = self
                .key
                .seal_in_place_separate_tag(self.nonce(seq), Aad::from(aad), buf)
                .map_err(|_| SealError::BadKey)?;
            t.copy_from_slice(tag.as_ref());
        }
        Ok(t)
    }

    /// Seals `plain` into `out` (exactly as long) and writes the tag into `tag`: one pass
    /// over the bytes for long messages, where a copy and then a seal in place would make
    /// two.
    pub fn seal_into(
        &self,
        seq: u64,
        aad: &[u8],
        plain: &[u8],
        out: &mut [u8],
        tag: &mut [u8; TAG_LEN],
    ) -> Result<(), SealError> {
        if out.len() != plain.len() {
            return Err(SealError::BadOutput);
        }
        if plain.len() < SMALL_MESSAGE {
            // ring has no out-of-place seal: a copy of a short message costs less than
            // aws-lc's cold start (see `SMALL_MESSAGE`).
            out.copy_from_slice(plain);
            *tag = self.seal_in_place(seq, aad, out)?;
            return Ok(());
        }
        self.key
            .seal_out_of_place_scatter(self.nonce(seq), Aad::from(aad), plain, out, &[], tag)
            .map_err(|_| SealError::BadKey)
    }

    /// The associated data tether binds to every sealed sample: the writer (participant id
    /// and entity id), the epoch and the sequence number, so a sealed sample cannot be
    /// replayed as another writer's, another epoch's or another sequence number's.
    pub fn sample_aad(&self, writer: &[u8; 12], seq: u64) -> [u8; 24] {
        tether_wire::sender_key_aad(writer, self.epoch, seq)
    }

    /// Seals a sample (or a batch, under its first sequence number) in place in `buf` and
    /// appends the tag: what a writer does once per sample, whatever the number of readers.
    pub fn seal_sample(
        &self,
        writer: &[u8; 12],
        seq: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(), SealError> {
        let aad = self.sample_aad(writer, seq);
        let tag = self.seal_in_place(seq, &aad, buf)?;
        buf.extend_from_slice(&tag);
        Ok(())
    }

    /// Opens what [`seal_sample`](Self::seal_sample) made; returns the plaintext.
    pub fn open_sample<'a>(
        &self,
        writer: &[u8; 12],
        seq: u64,
        sealed: &'a mut [u8],
    ) -> Result<&'a mut [u8], SealError> {
        let aad = self.sample_aad(writer, seq);
        self.open_in_place(seq, &aad, sealed)
    }

    /// Opens `sealed` (ciphertext followed by its tag) into `out`, which must be exactly
    /// as long as the plaintext (what a reader does with a sample it must hand on as owned
    /// bytes). Long messages are read once, where a copy and then an open in place would
    /// read and write them twice; short ones are copied first, since ring opens only in
    /// place (the copy costs less than aws-lc-rs's cold start, see [`SMALL_MESSAGE`]).
    /// `out` is unspecified when the result is an error.
    pub fn open_into(
        &self,
        seq: u64,
        aad: &[u8],
        sealed: &[u8],
        out: &mut [u8],
    ) -> Result<(), SealError> {
        let Some((ct, tag)) = sealed.split_last_chunk::<TAG_LEN>() else {
            return Err(SealError::TooShort);
        };
        let n = ct.len();
        if out.len() != n {
            return Err(SealError::BadOutput);
        }
        if n < SMALL_MESSAGE {
            let tag = ring::aead::Tag::from(*tag);
            out.copy_from_slice(ct);
            return self
                .small
                .open_in_place_separate_tag(
                    self.small_nonce(seq),
                    ring::aead::Aad::from(aad),
                    tag,
                    out,
                    0..,
                )
                .map(|_| ())
                .map_err(|_| SealError::Forged);
        }
        self.key
            .open_separate_gather(self.nonce(seq), Aad::from(aad), ct, tag.as_slice(), out)
            .map_err(|_| SealError::Forged)
    }

    /// Seals the entries of a batch (`buf`, in place) under this key's batch key and returns
    /// the tag: nonce `epoch ‖ first_seq`, `aad` authenticated with it (tether binds every
    /// byte of the datagram before the tag: `docs/wire.md#sealed_batch`). One AEAD call for
    /// every sample of the batch, and for the datagram's authentication.
    pub fn seal_batch(
        &self,
        first_seq: u64,
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; TAG_LEN], SealError> {
        let mut t = [0u8; TAG_LEN];
        if buf.len() < SMALL_MESSAGE {
            let tag = self
                .batch
                .small
                .seal_in_place_separate_tag(
                    self.small_nonce(first_seq),
                    ring::aead::Aad::from(aad),
                    buf,
                )
                .map_err(|_| SealError::BadKey)?;
            t.copy_from_slice(tag.as_ref());
        } else {
            let tag = self
                .batch
                .key
                .seal_in_place_separate_tag(self.nonce(first_seq), Aad::from(aad), buf)
                .map_err(|_| SealError::BadKey)?;
            t.copy_from_slice(tag.as_ref());
        }
        Ok(t)
    }

    /// Opens what [`seal_batch`](Self::seal_batch) made (`ciphertext`, and `tag` apart)
    /// into `out`, exactly as long as the ciphertext. `out` is unspecified on an error.
    pub fn open_batch_into(
        &self,
        first_seq: u64,
        aad: &[u8],
        ciphertext: &[u8],
        tag: &[u8; TAG_LEN],
        out: &mut [u8],
    ) -> Result<(), SealError> {
        if out.len() != ciphertext.len() {
            return Err(SealError::BadOutput);
        }
        if ciphertext.len() < SMALL_MESSAGE {
            out.copy_from_slice(ciphertext);
            return self
                .batch
                .small
                .open_in_place_separate_tag(
                    self.small_nonce(first_seq),
                    ring::aead::Aad::from(aad),
                    ring::aead::Tag::from(*tag),
                    out,
                    0..,
                )
                .map(|_| ())
                .map_err(|_| SealError::Forged);
        }
        self.batch
            .key
            .open_separate_gather(
                self.nonce(first_seq),
                Aad::from(aad),
                ciphertext,
                tag.as_slice(),
                out,
            )
            .map_err(|_| SealError::Forged)
    }

    /// Opens what [`seal_batch`](Self::seal_batch) made in place: `in_out` holds the
    /// ciphertext and holds the plaintext after (unspecified on an error). What a receiver
    /// that owns the datagram does: no copy, and no buffer to prepare.
    pub fn open_batch_in_place(
        &self,
        first_seq: u64,
        aad: &[u8],
        in_out: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), SealError> {
        if in_out.len() < SMALL_MESSAGE {
            return self
                .batch
                .small
                .open_in_place_separate_tag(
                    self.small_nonce(first_seq),
                    ring::aead::Aad::from(aad),
                    ring::aead::Tag::from(*tag),
                    in_out,
                    0..,
                )
                .map(|_| ())
                .map_err(|_| SealError::Forged);
        }
        self.batch
            .key
            .open_in_place_separate_tag(self.nonce(first_seq), Aad::from(aad), tag, in_out)
            .map(|_| ())
            .map_err(|_| SealError::Forged)
    }

    /// Opens `sealed` (ciphertext followed by its tag) in place; returns the plaintext.
    pub fn open_in_place<'a>(
        &self,
        seq: u64,
        aad: &[u8],
        sealed: &'a mut [u8],
    ) -> Result<&'a mut [u8], SealError> {
        if sealed.len() < TAG_LEN {
            return Err(SealError::TooShort);
        }
        if sealed.len() - TAG_LEN < SMALL_MESSAGE {
            return self
                .small
                .open_in_place(self.small_nonce(seq), ring::aead::Aad::from(aad), sealed)
                .map_err(|_| SealError::Forged);
        }
        self.key
            .open_in_place(self.nonce(seq), Aad::from(aad), sealed)
            .map_err(|_| SealError::Forged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_every_suite() {
        for suite in Suite::ALL {
            let k = SenderKey::generate(suite, 7, &mut crate::OsRandom);
            let mut buf = b"hello robots".to_vec();
            let tag = k.seal_in_place(42, b"aad", &mut buf).unwrap();
            assert_ne!(&buf[..], b"hello robots");
            buf.extend_from_slice(&tag);
            let mut copy = buf.clone();
            assert_eq!(
                k.open_in_place(42, b"aad", &mut copy).unwrap(),
                b"hello robots"
            );
            // Wrong sequence number, wrong AAD, a flipped bit, a truncation: all refused.
            let mut c = buf.clone();
            assert_eq!(k.open_in_place(43, b"aad", &mut c), Err(SealError::Forged));
            let mut c = buf.clone();
            assert_eq!(k.open_in_place(42, b"aaD", &mut c), Err(SealError::Forged));
            for i in 0..buf.len() {
                let mut c = buf.clone();
                c[i] ^= 0x10;
                assert_eq!(k.open_in_place(42, b"aad", &mut c), Err(SealError::Forged));
            }
            let mut c = buf[..10].to_vec();
            assert_eq!(
                k.open_in_place(42, b"aad", &mut c),
                Err(SealError::TooShort)
            );
            // Another epoch's key (same bytes would still differ by nonce) refuses it too.
            let other = SenderKey::generate(suite, 8, &mut crate::OsRandom);
            let mut c = buf.clone();
            assert!(other.open_in_place(42, b"aad", &mut c).is_err());
        }
    }

    /// Opening into a separate buffer accepts exactly what opening in place accepts, and
    /// refuses an output of the wrong length.
    #[test]
    fn open_into_matches_open_in_place() {
        for suite in Suite::ALL {
            let k = SenderKey::generate(suite, 7, &mut crate::OsRandom);
            let mut buf = vec![9u8; 1000];
            let tag = k.seal_in_place(42, b"aad", &mut buf).unwrap();
            buf.extend_from_slice(&tag);
            let mut out = vec![0u8; 1000];
            k.open_into(42, b"aad", &buf, &mut out).unwrap();
            assert_eq!(out, vec![9u8; 1000]);
            let mut copy = buf.clone();
            assert_eq!(k.open_in_place(42, b"aad", &mut copy).unwrap(), &out[..]);
            for i in (0..buf.len()).step_by(37) {
                let mut c = buf.clone();
                c[i] ^= 1;
                assert_eq!(
                    k.open_into(42, b"aad", &c, &mut out),
                    Err(SealError::Forged)
                );
            }
            assert_eq!(
                k.open_into(43, b"aad", &buf, &mut out),
                Err(SealError::Forged)
            );
            let mut short = vec![0u8; 999];
            assert_eq!(
                k.open_into(42, b"aad", &buf, &mut short),
                Err(SealError::BadOutput)
            );
            assert_eq!(
                k.open_into(42, b"aad", &buf[..10], &mut out),
                Err(SealError::TooShort)
            );
        }
    }

    /// A sealed batch opens only with its own epoch, first sequence number and associated
    /// data, and never as the sample of its first number sealed alone (another key).
    #[test]
    fn sealed_batches_open_only_as_sealed() {
        for suite in Suite::ALL {
            for len in [24usize, 5000] {
                let k = SenderKey::generate(suite, 3, &mut crate::OsRandom);
                let aad = b"the datagram before the tag";
                let plain: Vec<u8> = (0..len).map(|i| i as u8).collect();
                let mut buf = plain.clone();
                let tag = k.seal_batch(100, aad, &mut buf).unwrap();
                assert_ne!(buf, plain);
                let mut out = vec![0u8; len];
                k.open_batch_into(100, aad, &buf, &tag, &mut out).unwrap();
                assert_eq!(out, plain);
                // The same key bytes under another epoch, another first number, any other
                // associated data: refused.
                let again = SenderKey::from_bytes(suite, 4, k.key_bytes()).unwrap();
                let refused = |r: Result<(), SealError>| assert_eq!(r, Err(SealError::Forged));
                refused(again.open_batch_into(100, aad, &buf, &tag, &mut out));
                refused(k.open_batch_into(101, aad, &buf, &tag, &mut out));
                refused(k.open_batch_into(
                    100,
                    b"the datagram before the taG",
                    &buf,
                    &tag,
                    &mut out,
                ));
                for i in (0..len).step_by(len / 7) {
                    let mut c = buf.clone();
                    c[i] ^= 1;
                    refused(k.open_batch_into(100, aad, &c, &tag, &mut out));
                }
                let mut t = tag;
                t[0] ^= 1;
                refused(k.open_batch_into(100, aad, &buf, &t, &mut out));
                // In place: the same plaintext, and the same refusals.
                let mut inplace = buf.clone();
                k.open_batch_in_place(100, aad, &mut inplace, &tag).unwrap();
                assert_eq!(inplace, plain);
                let mut inplace = buf.clone();
                inplace[0] ^= 1;
                refused(k.open_batch_in_place(100, aad, &mut inplace, &tag));
                let mut inplace = buf.clone();
                refused(k.open_batch_in_place(101, aad, &mut inplace, &tag));
                // Not the sample key: the same bytes do not open as sample 100.
                let mut s = buf.clone();
                s.extend_from_slice(&tag);
                assert!(k.open_in_place(100, aad, &mut s).is_err());
                assert_eq!(
                    k.open_batch_into(100, aad, &buf, &tag, &mut out[..1]),
                    Err(SealError::BadOutput)
                );
            }
        }
    }

    /// A published AEAD test vector (hex): the first 16 bytes of ciphertext and the tag.
    struct Vector {
        suite: Suite,
        key: &'static str,
        nonce: &'static str,
        aad: &'static str,
        plain: &'static [u8],
        ct16: &'static str,
        tag: &'static str,
    }

    /// RFC 8439 section 2.8.2 (ChaCha20-Poly1305 AEAD) and NIST GCM test case 3 (AES-128,
    /// 96-bit IV, no AAD; its plaintext is hex, decoded in `plain`).
    const VECTORS: [Vector; 2] = [
        Vector {
            suite: Suite::ChaCha20Poly1305,
            key: "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f",
            nonce: "070000004041424344454647",
            aad: "50515253c0c1c2c3c4c5c6c7",
            plain: b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.",
            ct16: "d31a8d34648e60db7b86afbc53ef7ec2",
            tag: "1ae10b594f09e26a7e902ecbd0600691",
        },
        Vector {
            suite: Suite::Aes128Gcm,
            key: "feffe9928665731c6d6a8f9467308308",
            nonce: "cafebabefacedbaddecaf888",
            aad: "",
            plain: b"d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255",
            ct16: "42831ec2217774244b7221b784d0d49c",
            tag: "4d5c2af327cd64a62cf35abd2ba6fab4",
        },
    ];

    impl Vector {
        fn plain(&self) -> Vec<u8> {
            match self.suite {
                Suite::ChaCha20Poly1305 => self.plain.to_vec(),
                _ => crate::from_hex(std::str::from_utf8(self.plain).unwrap()).unwrap(),
            }
        }
    }

    /// Known-answer tests against the suites' published vectors, so a provider or
    /// configuration mistake cannot pass unnoticed (aws-lc-rs, the long-message side).
    #[test]
    fn known_answers() {
        for v in &VECTORS {
            let key = crate::from_hex(v.key).unwrap();
            let k = LessSafeKey::new(UnboundKey::new(v.suite.algorithm(), &key).unwrap());
            let mut buf = v.plain();
            let tag = k
                .seal_in_place_separate_tag(
                    Nonce::try_assume_unique_for_key(&crate::from_hex(v.nonce).unwrap()).unwrap(),
                    Aad::from(crate::from_hex(v.aad).unwrap()),
                    &mut buf,
                )
                .unwrap();
            assert_eq!(crate::to_hex(tag.as_ref()), v.tag, "{}", v.suite);
            assert_eq!(crate::to_hex(&buf[..16]), v.ct16, "{}", v.suite);
        }
    }

    /// A sender key reproduces the published vectors too: the nonce is `epoch ‖ seq`, so
    /// each vector's nonce maps to one epoch and sequence number. These messages are short,
    /// so this checks the ring side, sealing in place and into a buffer;
    /// `providers_agree_on_every_size` ties the aws-lc-rs side (checked above) to it.
    #[test]
    fn sender_keys_reproduce_known_answers() {
        for v in &VECTORS {
            let n = crate::from_hex(v.nonce).unwrap();
            let mut c = tether_wire::Cursor::new(&n);
            let (epoch, seq) = (c.u32_be().unwrap(), c.u64_be().unwrap());
            let k =
                SenderKey::from_bytes(v.suite, epoch, &crate::from_hex(v.key).unwrap()).unwrap();
            let (plain, aad) = (v.plain(), crate::from_hex(v.aad).unwrap());
            let mut buf = plain.clone();
            let tag = k.seal_in_place(seq, &aad, &mut buf).unwrap();
            assert_eq!(crate::to_hex(&tag), v.tag, "{}", v.suite);
            assert_eq!(crate::to_hex(&buf[..16]), v.ct16, "{}", v.suite);
            let (mut out, mut tag) = (vec![0u8; plain.len()], [0u8; TAG_LEN]);
            k.seal_into(seq, &aad, &plain, &mut out, &mut tag).unwrap();
            assert_eq!(crate::to_hex(&tag), v.tag, "{}", v.suite);
            assert_eq!(out, buf, "{}", v.suite);
        }
    }

    /// Short messages go through ring and long ones through aws-lc-rs: at every size
    /// around the boundary, and for every suite, what one provider seals the other opens,
    /// every seal and open path of a sender key agrees with both, and a flipped bit is
    /// refused on both sides of the boundary.
    #[test]
    fn providers_agree_on_every_size() {
        for suite in Suite::ALL {
            let k = SenderKey::generate(suite, 5, &mut crate::OsRandom);
            let lc = LessSafeKey::new(UnboundKey::new(suite.algorithm(), k.key_bytes()).unwrap());
            let rg = ring::aead::LessSafeKey::new(
                ring::aead::UnboundKey::new(suite.ring_algorithm(), k.key_bytes()).unwrap(),
            );
            for len in [
                0,
                1,
                1024,
                SMALL_MESSAGE - 1,
                SMALL_MESSAGE,
                SMALL_MESSAGE + 1,
                3 * SMALL_MESSAGE + 7,
            ] {
                let plain: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
                let seq = 77 + len as u64;
                // Sealed by the sender key (in place, and into a buffer): both identical,
                // and both providers open them.
                let mut a = plain.clone();
                let tag = k.seal_in_place(seq, b"aad", &mut a).unwrap();
                let (mut b, mut tag_b) = (vec![0u8; len], [0u8; TAG_LEN]);
                k.seal_into(seq, b"aad", &plain, &mut b, &mut tag_b)
                    .unwrap();
                assert_eq!((&a, tag), (&b, tag_b), "{suite} {len}");
                a.extend_from_slice(&tag);
                let mut c = a.clone();
                let p = lc
                    .open_in_place(k.nonce(seq), Aad::from(b"aad"), &mut c)
                    .unwrap();
                assert_eq!(p, &plain[..], "aws-lc opens {suite} {len}");
                let mut c = a.clone();
                let p = rg
                    .open_in_place(k.small_nonce(seq), ring::aead::Aad::from(b"aad"), &mut c)
                    .unwrap();
                assert_eq!(p, &plain[..], "ring opens {suite} {len}");
                // Sealed by each provider: the sender key opens both, both ways.
                let mut x = plain.clone();
                lc.seal_in_place_append_tag(k.nonce(seq), Aad::from(b"aad"), &mut x)
                    .unwrap();
                let mut y = plain.clone();
                rg.seal_in_place_append_tag(
                    k.small_nonce(seq),
                    ring::aead::Aad::from(b"aad"),
                    &mut y,
                )
                .unwrap();
                assert_eq!(x, a, "{suite} {len}");
                assert_eq!(y, a, "{suite} {len}");
                let mut out = vec![0u8; len];
                k.open_into(seq, b"aad", &x, &mut out).unwrap();
                assert_eq!(out, plain);
                assert_eq!(k.open_in_place(seq, b"aad", &mut y).unwrap(), &plain[..]);
                if len > 0 {
                    let mut bad = a.clone();
                    bad[len / 2] ^= 4;
                    assert_eq!(
                        k.open_into(seq, b"aad", &bad, &mut out),
                        Err(SealError::Forged)
                    );
                    assert_eq!(
                        k.open_in_place(seq, b"aad", &mut bad),
                        Err(SealError::Forged)
                    );
                }
                let mut wrong = vec![0u8; len + 1];
                assert_eq!(
                    k.seal_into(seq, b"aad", &plain, &mut wrong, &mut tag_b),
                    Err(SealError::BadOutput)
                );
            }
        }
    }

    #[test]
    fn samples_are_bound_to_writer_epoch_and_seq() {
        let k = SenderKey::generate(Suite::Aes128Gcm, 3, &mut crate::OsRandom);
        let w = [1u8; 12];
        let mut buf = b"sample".to_vec();
        k.seal_sample(&w, 9, &mut buf).unwrap();
        assert_eq!(buf.len(), 6 + TAG_LEN);
        assert_eq!(k.open_sample(&w, 9, &mut buf.clone()).unwrap(), b"sample");
        assert!(k.open_sample(&[2; 12], 9, &mut buf.clone()).is_err());
        assert!(k.open_sample(&w, 10, &mut buf.clone()).is_err());
        let same_bytes_other_epoch = SenderKey::from_bytes(Suite::Aes128Gcm, 4, &[0; 16]).unwrap();
        assert!(
            same_bytes_other_epoch
                .open_sample(&w, 9, &mut buf.clone())
                .is_err()
        );
    }

    #[test]
    fn names_and_codes() {
        for s in Suite::ALL {
            assert_eq!(s.name().parse::<Suite>(), Ok(s));
            assert_eq!(Suite::from_code(s.code()), Some(s));
        }
        assert!("des".parse::<Suite>().is_err());
        assert_eq!(
            "des".parse::<Suite>().unwrap_err().to_string(),
            "unknown suite 'des' (expected auto, aes128-gcm, aes256-gcm or chacha20-poly1305)"
        );
        assert_eq!("auto".parse::<Suite>(), Ok(Suite::auto()));
        assert_eq!(Suite::from_code(0), None);
    }
}
