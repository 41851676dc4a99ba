//! The router graph: link states, next hops, settling routes after a change, sweeps.

use super::*;

impl Router {
    // ---- the graph ------------------------------------------------------------------

    pub(super) fn on_link_state(&mut self, slot: u16, ls: LinkState) {
        // No router has more router neighbours than there are routers: a longer list is
        // refused, so the graph stays within max_nodes² entries.
        if ls.len() > self.config.max_nodes {
            return self.stats.drops.add(DropReason::NodeLimit);
        }
        match self
            .topo
            .offer(ls.origin.0, ls.seq, ls.neighbours().map(|n| n.0))
        {
            Offer::Newer => {
                self.topo_dirty = true;
                self.flood(Some(slot), Frame::LinkState(ls));
            }
            Offer::Stale => self.stats.floods_suppressed += 1,
            Offer::Older => {
                self.stats.floods_suppressed += 1;
                if let Some((seq, n)) = self.topo.get(ls.origin.0) {
                    let n: Vec<NodeId> = n.iter().map(|&x| NodeId(x)).collect();
                    self.send(slot, Frame::LinkState(LinkState::new(ls.origin, seq, &n)));
                }
            }
            Offer::OwnNewer(seq) => {
                self.seq = self.seq.max(seq);
                self.originate_link_state();
            }
            Offer::Full => self.stats.drops.add(DropReason::NodeLimit),
        }
    }

    /// Floods this router's neighbours under a new sequence number.
    pub(super) fn originate_link_state(&mut self) {
        let mut n: Vec<u64> = self
            .links
            .iter()
            .flatten()
            .filter(|l| l.role == Role::Router)
            .map(|l| l.node)
            .collect();
        n.sort_unstable();
        n.dedup();
        let seq = self.next_seq();
        let ids: Vec<NodeId> = n.iter().map(|&x| NodeId(x)).collect();
        self.topo.set_own(seq, n);
        self.topo_dirty = true;
        self.flood(
            None,
            Frame::LinkState(LinkState::new(NodeId(self.me), seq, &ids)),
        );
    }

    pub(super) fn update_node_slot(&mut self, node: u64) {
        let best = self
            .links
            .iter()
            .enumerate()
            .filter_map(|(s, l)| l.as_ref().map(|l| (s, l)))
            .find(|(_, l)| l.role == Role::Router && l.node == node)
            .map(|(s, _)| s as u16);
        match best {
            Some(s) => self.node_slot.insert(node, s),
            None => self.node_slot.remove(&node),
        };
    }

    /// After each input: if the graph changed, routes naming an origin whose tree changed
    /// (or that became reachable or unreachable) move their subscriptions.
    pub(super) fn settle(&mut self, now: Instant) {
        if !self.topo_dirty {
            return;
        }
        self.topo_dirty = false;
        let changed = self.topo.changed_trees();
        if changed.is_empty() {
            return;
        }
        let positions: Vec<u32> = self.rib.positions().collect();
        for i in positions {
            let hit = self.rib.get(i).is_some_and(|r| {
                r.origins
                    .as_slice()
                    .iter()
                    .any(|o| changed.binary_search(&o.node).is_ok())
            });
            if hit {
                self.refresh(now, i);
            }
        }
    }

    pub(super) fn sweep(&mut self, now: Instant) {
        let purged = self.topo.sweep();
        if !purged.is_empty() {
            self.topo_dirty = true;
        }
        let me = self.me;
        let positions: Vec<u32> = self.rib.positions().collect();
        for i in positions {
            let Some(route) = self.rib.get_mut(i) else {
                continue;
            };
            let mut lost_live = false;
            route.origins.retain(|o| {
                let purge = purged.contains(&o.node) && o.node != me;
                let expired = o.withdrawn() && o.flags & Origin::OLD != 0;
                lost_live |= purge && !o.withdrawn();
                !(purge || expired)
            });
            for o in route.origins.as_mut_slice() {
                if o.withdrawn() {
                    o.flags |= Origin::OLD;
                }
            }
            if lost_live {
                self.refresh(now, i);
            }
            self.rib.remove_if_empty(i);
        }
        self.rib.compact();
        self.hosts.retain(|_, h| {
            h.origins.retain(|o| {
                let purge = purged.contains(&o.node) && o.node != me;
                !(purge || (o.withdrawn() && o.flags & Origin::OLD != 0))
            });
            for o in h.origins.as_mut_slice() {
                if o.withdrawn() {
                    o.flags |= Origin::OLD;
                }
            }
            !h.origins.is_empty() || h.local.is_some()
        });
    }
}
