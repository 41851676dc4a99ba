//! Randomness as an input: protocol operations that need random bytes (sender keys, key-wrap
//! nonces, authentication challenges) take a [`Random`], as they take the time, so a
//! simulator can run them from a seed. [`OsRandom`] is the driver's default.

use aws_lc_rs::rand::{SecureRandom, SystemRandom};

/// A source of random bytes.
///
/// Production code passes [`OsRandom`]. A deterministic implementation (tether-testkit has
/// one) makes a simulated run reproducible from its seed; such a generator must never be
/// used for real keys.
pub trait Random {
    /// Fills `dest` with random bytes.
    fn fill(&mut self, dest: &mut [u8]);
}

/// The system's secure random generator (aws-lc-rs's `SystemRandom`).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsRandom;

impl Random for OsRandom {
    fn fill(&mut self, dest: &mut [u8]) {
        SystemRandom::new()
            .fill(dest)
            .expect("the system random generator works");
    }
}

/// `N` bytes from `rng`.
pub fn random_array<const N: usize>(rng: &mut dyn Random) -> [u8; N] {
    let mut b = [0u8; N];
    rng.fill(&mut b);
    b
}

/// `N` bytes from the system's secure random generator ([`OsRandom`]): a convenience for
/// key generation outside protocol operation (`tether keys`, tests, benchmarks).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    random_array(&mut OsRandom)
}
