//! Forwarding DATA, UNICAST and ANNOUNCE: source checks, the key's tree, one copy per link.

use super::*;

impl Router {
    // ---- forwarding -----------------------------------------------------------------

    pub(super) fn is_local_src(&mut self, src: ParticipantId, slot: u16) -> bool {
        let ok = self
            .hosts
            .get(&src.0)
            .is_some_and(|h| h.local == Some(slot));
        if !ok {
            self.stats.drops.add(DropReason::SpoofedSource);
        }
        ok
    }

    /// The children of this router in `origin`'s tree (node ids), if `from` passes the
    /// reverse-path check: a session link for our own origin, a link to the parent
    /// otherwise (any link to it: two routers may be joined by more than one).
    pub(super) fn tree_step(
        &mut self,
        origin: u64,
        from: u16,
        from_session: bool,
    ) -> Option<Vec<u64>> {
        let from_node = self.links[from as usize].as_ref().map(|l| l.node);
        let tree = self.topo.tree(origin)?;
        let ok = if from_session {
            origin == self.me
        } else {
            tree.parent.is_some() && tree.parent == from_node
        };
        ok.then(|| tree.children.clone())
    }

    pub(super) fn forward_data(&mut self, from: u16, from_session: bool, mut d: Data) {
        if from_session {
            d.origin = NodeId(self.me);
            d.hops = 0;
        } else if d.hops >= MAX_HOPS {
            return self.stats.drops.add(DropReason::HopLimit);
        } else {
            d.hops += 1;
        }
        let Some(i) = self.rib.find(&d.key) else {
            return self.stats.drops.add(DropReason::NoRoute);
        };
        if from_session
            && self
                .rib
                .get(i)
                .is_none_or(|r| r.flags(from) & LinkEntry::PUB == 0)
        {
            return self.stats.drops.add(DropReason::NotPublisher);
        }
        let Some(route) = self.rib.get(i) else { return };
        let origins: Vec<u64> = live_origins(route).collect();
        let Some(tree) = shared_root(&mut self.topo, &origins).and_then(|r| self.topo.tree(r))
        else {
            return self.stats.drops.add(DropReason::NoRoute);
        };
        let mut tree_nodes: Vec<u64> = tree.children.clone();
        tree_nodes.extend(tree.parent);
        let from_node = self.links[from as usize].as_ref().map(|l| l.node);
        //= docs/wire.md#router-links
        //# A router accepts DATA from a router only over an edge of the key's tree.
        if !from_session && !from_node.is_some_and(|n| tree_nodes.contains(&n)) {
            return self.stats.drops.add(DropReason::NotOnTree);
        }
        //= docs/wire.md#router-links
        //# A router sends DATA to each subscribed session link and each subscribed tree
        //# neighbour, one copy per link, never back on the link it came from.
        let mut targets: Vec<u16> = Vec::new();
        let mut reached: Vec<u64> = from_node.into_iter().collect();
        for e in route.links.as_slice() {
            if e.flags & LinkEntry::DOWN == 0 || e.slot == from {
                continue;
            }
            match &self.links[e.slot as usize] {
                Some(l) if l.role == Role::Session => targets.push(e.slot),
                // A tree neighbour, once even if it subscribed on two links to us.
                Some(l) if tree_nodes.contains(&l.node) && !reached.contains(&l.node) => {
                    reached.push(l.node);
                    targets.push(e.slot);
                }
                _ => {}
            }
        }
        if targets.is_empty() {
            return self.stats.drops.add(DropReason::NoSubscriber);
        }
        for s in targets {
            self.stats.data_forwarded += 1;
            self.stats.data_bytes_forwarded += d.datagram.len() as u64;
            self.send(s, Frame::Data(d.clone()));
        }
    }

    pub(super) fn forward_unicast(&mut self, from: u16, mut u: Unicast) {
        let from_router = self.links[from as usize]
            .as_ref()
            .is_some_and(|l| l.role == Role::Router);
        if from_router {
            if u.hops >= MAX_HOPS {
                return self.stats.drops.add(DropReason::HopLimit);
            }
            u.hops += 1;
        } else {
            u.hops = 0;
        }
        let Some(h) = self.hosts.get(&u.dst.0) else {
            return self.stats.drops.add(DropReason::NoRoute);
        };
        let next = if let Some(s) = h.local {
            Some(s)
        } else {
            // The nearest live origin; ties to the lowest node id.
            let origins: Vec<u64> = h
                .origins
                .as_slice()
                .iter()
                .filter(|o| !o.withdrawn() && o.node != self.me)
                .map(|o| o.node)
                .collect();
            let mut best: Option<(u32, u64, u64)> = None;
            for o in origins {
                if let Some(t) = self.topo.tree(o)
                    && let Some(p) = t.parent
                    && best.is_none_or(|b| (t.depth, o) < (b.0, b.1))
                {
                    best = Some((t.depth, o, p));
                }
            }
            best.and_then(|(_, _, p)| self.node_slot.get(&p).copied())
        };
        match next {
            Some(s) if s != from => {
                self.stats.unicast_forwarded += 1;
                self.send(s, Frame::Unicast(u));
            }
            _ => self.stats.drops.add(DropReason::NoRoute),
        }
    }

    pub(super) fn forward_announce(&mut self, from: u16, from_session: bool, mut a: Announce) {
        if from_session {
            a.origin = NodeId(self.me);
            a.hops = 0;
        } else if a.hops >= MAX_HOPS {
            return self.stats.drops.add(DropReason::HopLimit);
        } else {
            a.hops += 1;
        }
        let Some(children) = self.tree_step(a.origin.0, from, from_session) else {
            return self.stats.drops.add(DropReason::NotOnTree);
        };
        let children: Vec<u16> = children
            .iter()
            .filter_map(|c| self.node_slot.get(c).copied())
            .collect();
        //= docs/wire.md#router-links
        //# ANNOUNCE goes to every session link and to each child in the origin's tree.
        let targets: Vec<u16> = self
            .links
            .iter()
            .enumerate()
            .filter_map(|(s, l)| {
                let l = l.as_ref()?;
                let s = s as u16;
                let yes = s != from
                    && match l.role {
                        Role::Session => true,
                        Role::Router => children.contains(&s),
                    };
                yes.then_some(s)
            })
            .collect();
        for s in targets {
            self.stats.announce_forwarded += 1;
            self.send(s, Frame::Announce(a.clone()));
        }
    }
}
