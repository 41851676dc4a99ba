//! A sliding replay window over sequence numbers (per writer and epoch).

/// Accepts each sequence number once: anything newer than the highest seen, or within the
/// last [`ReplayWindow::SIZE`] and not seen yet. Older or repeated numbers are refused.
/// Constant memory whatever arrives.
#[derive(Debug, Clone)]
pub struct Window<const W: usize> {
    /// Highest accepted, 0 before the first.
    top: u64,
    /// Bit i: `top - i` was accepted.
    bits: [u64; W],
}

/// The window of samples: 256 behind the newest.
pub type ReplayWindow = Window<4>;

/// The window of authenticated control datagrams (`docs/wire.md#auth_tag`): 1,024 behind the
/// newest, since a sender's datagrams reach a receiver through two sockets (unicast and its
/// multicast group) whose queues it drains in batches, one after the other.
pub type ControlWindow = Window<16>;

impl<const W: usize> Default for Window<W> {
    fn default() -> Self {
        Window {
            top: 0,
            bits: [0; W],
        }
    }
}

impl<const W: usize> Window<W> {
    /// How far behind the newest a number may be and still be accepted once.
    pub const SIZE: u64 = 64 * W as u64;

    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    fn get(&self, i: u64) -> bool {
        self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: u64) {
        self.bits[(i / 64) as usize] |= 1 << (i % 64);
    }

    fn shift(&mut self, by: u64) {
        if by >= Self::SIZE {
            self.bits = [0; W];
            return;
        }
        let words = (by / 64) as usize;
        let rem = by % 64;
        let mut out = [0u64; W];
        for i in (0..W).rev() {
            if i < words {
                continue;
            }
            let src = i - words;
            let mut v = self.bits[src] << rem;
            if rem > 0 && src > 0 {
                v |= self.bits[src - 1] >> (64 - rem);
            }
            out[i] = v;
        }
        self.bits = out;
    }

    /// Whether `seq` would be accepted (without recording it): check before spending work
    /// on opening a message, then [`accept`](Self::accept) once it authenticated.
    pub fn check(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.top {
            return true;
        }
        let back = self.top - seq;
        back < Self::SIZE && !self.get(back)
    }

    /// Records `seq`; false (and no change) if it is a replay or too old.
    pub fn accept(&mut self, seq: u64) -> bool {
        if !self.check(seq) {
            return false;
        }
        if seq > self.top {
            self.shift(seq - self.top);
            self.top = seq;
            self.set(0);
        } else {
            self.set(self.top - seq);
        }
        true
    }

    /// The highest number accepted.
    pub fn top(&self) -> u64 {
        self.top
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_once_within_the_window() {
        let mut w = ReplayWindow::new();
        assert!(!w.accept(0));
        assert!(w.accept(5));
        assert!(!w.accept(5));
        assert!(w.accept(3));
        assert!(!w.accept(3));
        assert!(w.accept(1000));
        assert!(!w.accept(5), "too old now");
        assert!(w.accept(1000 - 255));
        assert!(!w.accept(1000 - 256));
        assert!(w.accept(1001));
        assert!(!w.accept(1000));
    }

    #[test]
    fn the_control_window_is_wider() {
        let mut w = ControlWindow::new();
        assert!(w.accept(5000));
        assert!(w.accept(5000 - 1023));
        assert!(!w.accept(5000 - 1024));
        assert!(!w.accept(5000));
    }

    proptest! {
        /// Against a model (a set of everything accepted): a number is accepted iff it is new
        /// and not more than SIZE - 1 behind the highest accepted so far.
        #[test]
        fn matches_a_set_model(seqs in proptest::collection::vec(1u64..2000, 1..400)) {
            let mut w = ReplayWindow::new();
            let mut seen = std::collections::BTreeSet::new();
            let mut top = 0u64;
            for s in seqs {
                let want = !seen.contains(&s) && (s > top || top - s < ReplayWindow::SIZE);
                prop_assert_eq!(w.accept(s), want, "seq {} top {}", s, top);
                if want {
                    seen.insert(s);
                    top = top.max(s);
                }
            }
        }
    }
}
