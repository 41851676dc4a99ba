//! [`SeededRandom`]: the engine's randomness (sender keys, key-wrap nonces, authentication
//! challenges) from a seed, so a simulated run is determined by its seed.

use tether_crypto::Random;

use crate::Rng;

/// A deterministic [`Random`]: SplitMix64 from a seed, eight bytes per step.
///
/// **Not for production.** Anyone who knows the seed knows every key it makes; it exists so
/// the simulator can replay a run exactly. Real participants use
/// [`tether_crypto::OsRandom`].
///
/// It is a stream of its own, apart from the network model's [`Rng`]: the same seed gives
/// both, and drawing keys does not shift the losses and delays a seed produces.
#[derive(Debug, Clone)]
pub struct SeededRandom(Rng);

impl SeededRandom {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        // Another starting point than `Rng::new(seed)`'s, so the two streams differ.
        SeededRandom(Rng::new(seed ^ 0xD1B5_4A32_D192_ED03))
    }
}

impl Random for SeededRandom {
    fn fill(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let word = self.0.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_crypto::{SenderKey, Suite, random_array};

    /// The same seed gives the same bytes and the same keys; another seed, others; the
    /// stream is not the network model's.
    #[test]
    fn a_seed_determines_every_byte() {
        let a: [u8; 37] = random_array(&mut SeededRandom::new(7));
        let b: [u8; 37] = random_array(&mut SeededRandom::new(7));
        let c: [u8; 37] = random_array(&mut SeededRandom::new(8));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, [0; 37]);
        let mut net = Rng::new(7);
        assert_ne!(a[..8], net.next_u64().to_le_bytes());
        let k1 = SenderKey::generate(Suite::Aes256Gcm, 1, &mut SeededRandom::new(3));
        let k2 = SenderKey::generate(Suite::Aes256Gcm, 1, &mut SeededRandom::new(3));
        let k3 = SenderKey::generate(Suite::Aes256Gcm, 1, &mut SeededRandom::new(4));
        assert_eq!(k1.key_bytes(), k2.key_bytes());
        assert_ne!(k1.key_bytes(), k3.key_bytes());
        // Draws continue the stream: two successive fills differ.
        let mut r = SeededRandom::new(9);
        assert_ne!(random_array::<16>(&mut r), random_array::<16>(&mut r));
    }
}
