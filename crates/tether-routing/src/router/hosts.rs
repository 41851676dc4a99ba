//! Host routes: the participants sessions announce, flooded so UNICAST finds them.

use super::*;

impl Router {
    // ---- host routes ----------------------------------------------------------------

    /// A session on `slot` announces (`on`) or withdraws participant `p`.
    /// True if session link `slot` already names [`MAX_ROUTES_PER_SESSION`] route entries
    /// and `key` would be a new one: one session cannot fill the table others need.
    pub(super) fn session_full(&self, slot: u16, key: &RouteKey) -> bool {
        let Some(l) = self.links.get(slot as usize).and_then(Option::as_ref) else {
            return false;
        };
        l.refs >= MAX_ROUTES_PER_SESSION && self.flags_of(key, l.id) == 0
    }

    pub(super) fn local_host(&mut self, p: u64, slot: u16, on: bool) {
        if on && !self.hosts.contains_key(&p) && self.hosts.len() >= self.config.max_participants {
            return self.stats.drops.add(DropReason::ParticipantLimit);
        }
        if on {
            // First come, first served: a participant id attached on a live session link
            // is not taken over by another (a member claiming another's id would otherwise
            // receive its unicast and have its own traffic refused as spoofed). Only a
            // link of the same owner may: the session dialled again before this router
            // saw its old link go, and refusing it would leave its id with no route once
            // the old link times out.
            if let Some(other) = self.hosts.get(&p).and_then(|h| h.local) {
                let owner = |s: u16| {
                    self.links
                        .get(s as usize)
                        .and_then(Option::as_ref)
                        .map(|l| l.owner)
                };
                if other != slot {
                    match (owner(other), owner(slot)) {
                        (Some(Some(a)), Some(Some(b))) if a == b => {
                            self.stats.hosts_taken_over += 1;
                        }
                        (Some(_), _) => return self.stats.drops.add(DropReason::SpoofedSource),
                        (None, _) => {}
                    }
                }
            }
            let mine = self
                .hosts
                .values()
                .filter(|h| h.local == Some(slot))
                .count();
            if self.hosts.get(&p).is_none_or(|h| h.local != Some(slot))
                && mine >= MAX_PARTICIPANTS_PER_SESSION
            {
                return self.stats.drops.add(DropReason::ParticipantLimit);
            }
        }
        let me = self.me;
        if !on && self.hosts.get(&p).is_none_or(|h| h.local != Some(slot)) {
            return;
        }
        let seq = self.next_seq();
        let h = self.hosts.entry(p).or_default();
        h.local = on.then_some(slot);
        let o = Origin {
            node: me,
            seq,
            hops: 0,
            flags: if on { 0 } else { Origin::WITHDRAWN },
        };
        match h.origins.as_mut_slice().iter_mut().find(|o| o.node == me) {
            Some(x) => *x = o,
            None => h.origins.push(o),
        }
        self.flood(None, host_frame(p, &o));
    }

    pub(super) fn on_host(&mut self, slot: u16, r: HostRoute, gone: bool) {
        let p = r.participant.0;
        if r.origin.0 == self.me {
            // Word of our own host route: a restart forgot it; say the truth above it.
            self.seq = self.seq.max(r.seq);
            let mine = self
                .hosts
                .get(&p)
                .and_then(|h| h.origins.as_slice().iter().find(|o| o.node == self.me))
                .copied();
            let theirs = (r.seq, gone);
            if let Some(m) = mine {
                if (m.seq, m.withdrawn()) == theirs {
                    self.stats.floods_suppressed += 1;
                    return;
                }
                if (m.seq, m.withdrawn()) > theirs {
                    self.stats.floods_suppressed += 1;
                    return self.send(slot, host_frame(p, &m));
                }
            } else if gone {
                return;
            }
            self.seq = self.seq.max(r.seq);
            let seq = self.next_seq();
            let me = self.me;
            let h = self.hosts.entry(p).or_default();
            let o = Origin {
                node: me,
                seq,
                hops: 0,
                flags: if h.local.is_some() {
                    0
                } else {
                    Origin::WITHDRAWN
                },
            };
            match h.origins.as_mut_slice().iter_mut().find(|o| o.node == me) {
                Some(x) => *x = o,
                None => h.origins.push(o),
            }
            return self.flood(None, host_frame(p, &o));
        }
        if !self.hosts.contains_key(&p) && self.hosts.len() >= self.config.max_participants {
            return self.stats.drops.add(DropReason::ParticipantLimit);
        }
        let max = self.config.max_origins_per_route;
        let h = self.hosts.entry(p).or_default();
        let new = Origin {
            node: r.origin.0,
            seq: r.seq,
            hops: 0,
            flags: if gone { Origin::WITHDRAWN } else { 0 },
        };
        let full = h.origins.len() >= max;
        match h
            .origins
            .as_mut_slice()
            .iter_mut()
            .find(|o| o.node == r.origin.0)
        {
            Some(o) if (o.seq, o.withdrawn()) > (r.seq, gone) => {
                // The sender is behind: it gets the word held.
                let held = host_frame(p, o);
                self.stats.floods_suppressed += 1;
                return self.send(slot, held);
            }
            Some(o) if (o.seq, o.withdrawn()) == (r.seq, gone) => {
                self.stats.floods_suppressed += 1;
                return;
            }
            Some(o) => *o = new,
            None if full => {
                return self.stats.drops.add(DropReason::OriginLimit);
            }
            None => h.origins.push(new),
        }
        let f = if gone {
            Frame::ParticipantGone(r)
        } else {
            Frame::Participant(r)
        };
        self.flood(Some(slot), f);
    }
}
