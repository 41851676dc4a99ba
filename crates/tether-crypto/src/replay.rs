//! A sliding replay window over sequence numbers (per writer and epoch).

/// Accepts each sequence number once: anything newer than the highest seen, or within the
/// last [`Window::SIZE`] and not seen yet. Older or repeated numbers are refused.
/// Constant memory whatever arrives, and constant time per number: the bitmap is a ring of
/// `W` words indexed by the number itself (as WireGuard's), so moving the window ahead by
/// one clears at most one word instead of shifting all of them. One word is the slack that
/// makes this exact: `SIZE` is `64 × (W − 1)`.
#[derive(Debug, Clone)]
pub struct Window<const W: usize> {
    /// Highest accepted, 0 before the first.
    top: u64,
    /// Bit `n % 64` of word `(n / 64) % W`: number `n` was accepted (for `n` within the
    /// window).
    bits: [u64; W],
}

/// The window of samples: 256 behind the newest.
pub type ReplayWindow = Window<5>;

/// The window of authenticated control datagrams (`docs/wire.md#auth_tag`): 1,024 behind the
/// newest, since a sender's datagrams reach a receiver through two sockets (unicast and its
/// multicast group) whose queues it drains in batches, one after the other.
pub type ControlWindow = Window<17>;

/// The window of sealed batches' first sequence numbers (`docs/wire.md#sealed_batch`):
/// 4,096 sequence numbers behind the newest, several batches of any size.
pub type BatchWindow = Window<65>;

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
    pub const SIZE: u64 = 64 * (W as u64 - 1);

    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    fn word(n: u64) -> usize {
        ((n / 64) % W as u64) as usize
    }

    fn get(&self, n: u64) -> bool {
        self.bits[Self::word(n)] & (1 << (n % 64)) != 0
    }

    fn set(&mut self, n: u64) {
        self.bits[Self::word(n)] |= 1 << (n % 64);
    }

    /// Moves the top to `to`: the words of the numbers now ahead of the old top are
    /// cleared (they held numbers a whole ring behind).
    fn advance(&mut self, to: u64) {
        let (from, to_word) = (self.top / 64, to / 64);
        if to_word - from >= W as u64 {
            self.bits = [0; W];
        } else {
            for w in from + 1..=to_word {
                self.bits[(w % W as u64) as usize] = 0;
            }
        }
        self.top = to;
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
        self.top - seq < Self::SIZE && !self.get(seq)
    }

    /// Whether `seq` was accepted already (and is still within the window): a copy of a
    /// message taken before, as opposed to one too old to tell.
    pub fn seen(&self, seq: u64) -> bool {
        seq != 0 && seq <= self.top && self.top - seq < Self::SIZE && self.get(seq)
    }

    /// Records `seq`; false (and no change) if it is a replay or too old.
    pub fn accept(&mut self, seq: u64) -> bool {
        if !self.check(seq) {
            return false;
        }
        if seq > self.top {
            self.advance(seq);
        }
        self.set(seq);
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

        /// The control window too, with jumps of any size (a ring is easy to get wrong at
        /// its wrap and on jumps of a whole ring or more).
        #[test]
        fn the_control_window_matches_a_set_model(
            steps in proptest::collection::vec((0u64..3000, any::<bool>()), 1..600),
        ) {
            let mut w = ControlWindow::new();
            let mut seen = std::collections::BTreeSet::new();
            let mut top = 0u64;
            for (d, ahead) in steps {
                let s = if ahead { top + d % 1500 + 1 } else { top.saturating_sub(d % 1200) };
                let want = s != 0 && !seen.contains(&s) && (s > top || top - s < ControlWindow::SIZE);
                prop_assert_eq!(w.check(s), want, "seq {} top {}", s, top);
                prop_assert_eq!(w.accept(s), want, "seq {} top {}", s, top);
                if want {
                    seen.insert(s);
                    top = top.max(s);
                }
            }
        }
    }
}
