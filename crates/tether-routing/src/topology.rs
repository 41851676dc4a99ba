//! The router graph (every router's LINK_STATE) and the trees computed from it.
//!
//! Every router holds the same link states once floods settle, and computes from them the
//! same breadth-first tree rooted at each origin, ties broken toward the lowest node id. That
//! one rule makes the whole network agree, without talking about it, on which link each
//! origin's traffic enters a router by (its parent) and which links it leaves by (its
//! children): the reverse-path check that keeps DATA and ANNOUNCE from looping or arriving
//! twice needs exactly that agreement.
//!
//! An edge counts only if both of its routers list each other, so the link state of a router
//! that died (kept until swept) cannot route anything through it. Trees are computed when
//! first asked for and cached until the graph changes; a computation is one breadth-first
//! pass over the graph, so a change costs O(routers × links) for the origins in use.

use std::collections::HashMap;

/// One router's neighbours, as of its sequence number.
#[derive(Debug, Clone)]
struct Lsa {
    seq: u32,
    /// Sorted, without duplicates.
    neighbours: Vec<u64>,
    /// Sweeps this node was found unreachable in a row.
    unreachable_sweeps: u8,
}

/// One root's whole tree: every reachable router's parent, and this router's place in it.
#[derive(Debug, Clone)]
struct Full {
    /// Parent of every router of the tree but the root.
    parent: HashMap<u64, u64>,
    mine: Tree,
}

/// This router's place in one origin's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tree {
    /// The neighbour toward the origin (`None` at the origin itself).
    pub(crate) parent: Option<u64>,
    /// The neighbours whose parent this router is.
    pub(crate) children: Vec<u64>,
    /// Router hops to the origin.
    pub(crate) depth: u32,
}

/// What [`Topology::offer`] made of a LINK_STATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Newer than what was held: stored; flood it on.
    Newer,
    /// Not newer: dropped.
    Stale,
    /// Older than the one held: dropped, and the sender should get the one held (it is
    /// behind: a restart, or a tombstone it swept).
    Older,
    /// About this router, and at least as new as its own: re-originate above `seq`.
    OwnNewer(u32),
    /// A new router, and the table is full: dropped.
    Full,
}

#[derive(Debug)]
pub(crate) struct Topology {
    me: u64,
    lsdb: HashMap<u64, Lsa>,
    /// `None` cached for origins this router cannot reach.
    trees: HashMap<u64, Option<Full>>,
    /// Each reachable root's parent map when [`Topology::changed_trees`] last looked.
    seen: HashMap<u64, HashMap<u64, u64>>,
    max_nodes: usize,
}

impl Topology {
    pub(crate) fn new(me: u64, max_nodes: usize) -> Self {
        let mut lsdb = HashMap::new();
        lsdb.insert(
            me,
            Lsa {
                seq: 0,
                neighbours: Vec::new(),
                unreachable_sweeps: 0,
            },
        );
        Topology {
            me,
            lsdb,
            trees: HashMap::new(),
            seen: HashMap::new(),
            max_nodes,
        }
    }

    pub(crate) fn nodes(&self) -> usize {
        self.lsdb.len()
    }

    /// Sets this router's own neighbours under `seq`.
    pub(crate) fn set_own(&mut self, seq: u32, mut neighbours: Vec<u64>) {
        neighbours.sort_unstable();
        neighbours.dedup();
        let lsa = self
            .lsdb
            .get_mut(&self.me)
            .expect("own link state is always held");
        lsa.seq = seq;
        lsa.neighbours = neighbours;
        self.trees.clear();
    }

    /// A LINK_STATE received.
    pub(crate) fn offer(
        &mut self,
        origin: u64,
        seq: u32,
        neighbours: impl Iterator<Item = u64>,
    ) -> Offer {
        // Link states are ordered by sequence number, then (two link states under one
        // number: a router that restarted reused it) by their neighbour lists, so every
        // router keeps the same one of the two and the origin, told, moves above both.
        let mut n: Vec<u64> = neighbours.collect();
        n.sort_unstable();
        n.dedup();
        if origin == self.me {
            // Our own link state come back around a cycle is stale; a greater one is from
            // before a restart; a smaller one shows the sender is behind.
            let own = &self.lsdb[&self.me];
            return match (seq, &n).cmp(&(own.seq, &own.neighbours)) {
                core::cmp::Ordering::Greater => Offer::OwnNewer(seq),
                core::cmp::Ordering::Equal => Offer::Stale,
                core::cmp::Ordering::Less => Offer::Older,
            };
        }
        match self.lsdb.get(&origin) {
            Some(l) => match (seq, &n).cmp(&(l.seq, &l.neighbours)) {
                core::cmp::Ordering::Less => return Offer::Older,
                core::cmp::Ordering::Equal => return Offer::Stale,
                core::cmp::Ordering::Greater => {}
            },
            None if self.lsdb.len() >= self.max_nodes => return Offer::Full,
            None => {}
        }
        self.lsdb.insert(
            origin,
            Lsa {
                seq,
                neighbours: n,
                unreachable_sweeps: 0,
            },
        );
        self.trees.clear();
        Offer::Newer
    }

    /// The link state held for `origin`, as (seq, neighbours).
    pub(crate) fn get(&self, origin: u64) -> Option<(u32, &[u64])> {
        self.lsdb
            .get(&origin)
            .map(|l| (l.seq, l.neighbours.as_slice()))
    }

    /// Every link state held, as (origin, seq, neighbours), for a new neighbour.
    pub(crate) fn all(&self) -> impl Iterator<Item = (u64, u32, &[u64])> {
        self.lsdb
            .iter()
            .filter(|(_, l)| l.seq != 0)
            .map(|(&o, l)| (o, l.seq, l.neighbours.as_slice()))
    }

    /// This router's place in `origin`'s tree, `None` if it cannot reach `origin`.
    pub(crate) fn tree(&mut self, origin: u64) -> Option<&Tree> {
        self.full(origin).map(|f| &f.mine)
    }

    fn full(&mut self, root: u64) -> Option<&Full> {
        if !self.trees.contains_key(&root) {
            let t = self.compute(root);
            self.trees.insert(root, t);
        }
        self.trees.get(&root).and_then(Option::as_ref)
    }

    /// The neighbour to take from this router toward `target` along `root`'s tree (not the
    /// shortest path: the tree's, which every router agrees on). `None` if `target` is this
    /// router or either is unreachable.
    pub(crate) fn first_hop(&mut self, root: u64, target: u64) -> Option<u64> {
        let me = self.me;
        if target == me {
            return None;
        }
        let full = self.full(root)?;
        if target != root && !full.parent.contains_key(&target) {
            return None;
        }
        // Up from the target: through this router (then the hop is the child just below
        // it), or to the root without it (then the hop is this router's parent).
        let (mut x, mut below) = (target, None);
        loop {
            if x == me {
                return below;
            }
            if x == root {
                return full.mine.parent;
            }
            below = Some(x);
            x = *full.parent.get(&x)?;
        }
    }

    /// The routers whose tree changed (or that became reachable or unreachable) since the
    /// last call: routes naming them must re-route their subscriptions.
    pub(crate) fn changed_trees(&mut self) -> Vec<u64> {
        let mut roots: Vec<u64> = self.lsdb.keys().copied().collect();
        roots.extend(self.seen.keys().copied());
        roots.sort_unstable();
        roots.dedup();
        let mut changed = Vec::new();
        for r in roots {
            let now = if self.lsdb.contains_key(&r) {
                self.full(r).map(|f| f.parent.clone())
            } else {
                None
            };
            if self.seen.get(&r) != now.as_ref() {
                changed.push(r);
                match now {
                    Some(p) => self.seen.insert(r, p),
                    None => self.seen.remove(&r),
                };
            }
        }
        changed
    }

    /// Marks unreachable routers; returns those unreachable at two sweeps in a row, after
    /// forgetting their link state (the caller forgets their routes).
    pub(crate) fn sweep(&mut self) -> Vec<u64> {
        let mut nodes: Vec<u64> = self
            .lsdb
            .keys()
            .copied()
            .filter(|&n| n != self.me)
            .collect();
        nodes.sort_unstable();
        let mut purged = Vec::new();
        for n in nodes {
            let reachable = self.tree(n).is_some();
            let lsa = self.lsdb.get_mut(&n).expect("listed above");
            if reachable {
                lsa.unreachable_sweeps = 0;
            } else if lsa.unreachable_sweeps >= 1 {
                self.lsdb.remove(&n);
                self.trees.clear();
                purged.push(n);
            } else {
                lsa.unreachable_sweeps += 1;
            }
        }
        purged
    }

    /// Whether `a` and `b` list each other.
    fn edge(&self, a: u64, b: u64) -> bool {
        let has = |x: u64, y: u64| {
            self.lsdb
                .get(&x)
                .is_some_and(|l| l.neighbours.binary_search(&y).is_ok())
        };
        has(a, b) && has(b, a)
    }

    /// Neighbours of `x` over two-way edges, lowest id first.
    fn two_way(&self, x: u64) -> impl Iterator<Item = u64> + '_ {
        self.lsdb
            .get(&x)
            .map(|l| l.neighbours.as_slice())
            .unwrap_or(&[])
            .iter()
            .copied()
            .filter(move |&y| self.edge(x, y))
    }

    /// Breadth first from `root` over two-way edges; the parent of a router at depth k is
    /// its lowest-id neighbour at depth k - 1.
    fn compute(&self, root: u64) -> Option<Full> {
        if !self.lsdb.contains_key(&root) {
            return None;
        }
        let mut dist: HashMap<u64, u32> = HashMap::new();
        dist.insert(root, 0);
        let mut frontier = vec![root];
        let mut d = 0;
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for &x in &frontier {
                for y in self.two_way(x) {
                    if let std::collections::hash_map::Entry::Vacant(e) = dist.entry(y) {
                        e.insert(d + 1);
                        next.push(y);
                    }
                }
            }
            frontier = next;
            d += 1;
        }
        let depth = *dist.get(&self.me)?;
        let mut parent = HashMap::with_capacity(dist.len());
        for (&x, &kx) in &dist {
            if kx > 0
                && let Some(p) = self.two_way(x).find(|y| dist.get(y) == Some(&(kx - 1)))
            {
                parent.insert(x, p);
            }
        }
        let children = self
            .two_way(self.me)
            .filter(|c| parent.get(c) == Some(&self.me))
            .collect();
        let mine = Tree {
            parent: parent.get(&self.me).copied(),
            children,
            depth,
        };
        Some(Full { parent, mine })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The graph of `edges` as seen from `me`, every link state at seq 1.
    fn graph(me: u64, edges: &[(u64, u64)]) -> Topology {
        let mut t = Topology::new(me, 100);
        let mut nodes: Vec<u64> = edges.iter().flat_map(|&(a, b)| [a, b]).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for n in nodes {
            let nb = edges
                .iter()
                .filter_map(|&(a, b)| (a == n).then_some(b).or((b == n).then_some(a)));
            if n == me {
                t.set_own(1, nb.collect());
            } else {
                assert_eq!(t.offer(n, 1, nb), Offer::Newer);
            }
        }
        t
    }

    /// On a ring, the tree from an origin splits at the far side, the same way at every node.
    #[test]
    fn ring_trees_agree() {
        let ring = [(1, 2), (2, 3), (3, 4), (4, 1)];
        // Rooted at 1: 2 and 4 at depth 1; 3 at depth 2 with parent min(2, 4) = 2.
        let mut t3 = graph(3, &ring);
        let tree = t3.tree(1).unwrap().clone();
        assert_eq!((tree.parent, tree.depth), (Some(2), 2));
        assert!(tree.children.is_empty());
        let mut t2 = graph(2, &ring);
        assert_eq!(t2.tree(1).unwrap().children, vec![3]);
        let mut t4 = graph(4, &ring);
        assert!(
            t4.tree(1).unwrap().children.is_empty(),
            "3 hangs off 2, not 4"
        );
        let mut t1 = graph(1, &ring);
        assert_eq!(t1.tree(1).unwrap().children, vec![2, 4]);
    }

    /// The hop toward a target along a root's tree, which is not always the shortest path.
    #[test]
    fn first_hop_follows_the_roots_tree() {
        // A ring of 5 rooted at 1: 1-2-3 and 1-5-4; 3 and 4 are neighbours but not in the
        // tree together. From 3, the way to 4 in 1's tree goes round through 2, 1 and 5.
        let ring = [(1, 2), (2, 3), (3, 4), (4, 5), (5, 1)];
        let mut t3 = graph(3, &ring);
        assert_eq!(t3.first_hop(1, 4), Some(2));
        assert_eq!(
            t3.first_hop(4, 4),
            Some(4),
            "in 4's own tree, the direct link"
        );
        assert_eq!(t3.first_hop(1, 3), None);
        let mut t2 = graph(2, &ring);
        assert_eq!(t2.first_hop(1, 3), Some(3), "down to a child");
        assert_eq!(t2.first_hop(1, 5), Some(1), "up to the parent");
        assert_eq!(t2.first_hop(1, 9), None, "unknown");
    }

    /// An edge listed by one side only does not count; a node behind it is unreachable.
    #[test]
    fn one_sided_edges_do_not_route() {
        let mut t = Topology::new(1, 10);
        t.set_own(1, vec![2]);
        assert_eq!(t.offer(2, 1, [3].into_iter()), Offer::Newer);
        assert_eq!(t.offer(3, 1, [2].into_iter()), Offer::Newer);
        assert!(t.tree(3).is_none());
        assert_eq!(t.offer(2, 2, [1, 3].into_iter()), Offer::Newer);
        assert_eq!(t.tree(3).unwrap().parent, Some(2));
        assert_eq!(t.offer(2, 2, [3, 1].into_iter()), Offer::Stale);
        assert_eq!(t.offer(2, 1, [1].into_iter()), Offer::Older);
        assert_eq!(t.offer(1, 5, [].into_iter()), Offer::OwnNewer(5));
        assert_eq!(t.offer(1, 1, [2].into_iter()), Offer::Stale, "our own echo");
        assert_eq!(t.offer(1, 1, [3].into_iter()), Offer::OwnNewer(1));
        assert_eq!(t.offer(1, 1, [].into_iter()), Offer::Older);
        // Two link states under one number: the greater neighbour list wins everywhere.
        assert_eq!(t.offer(2, 2, [1, 4].into_iter()), Offer::Newer);
        assert_eq!(t.offer(2, 2, [1, 3].into_iter()), Offer::Older);
    }

    #[test]
    fn changed_trees_and_sweep() {
        let mut t = graph(1, &[(1, 2), (2, 3)]);
        assert_eq!(t.changed_trees(), vec![1, 2, 3]);
        assert!(t.changed_trees().is_empty());
        // 2 drops its link to 3: 3 becomes unreachable, and the other trees lose it.
        assert_eq!(t.offer(2, 2, [1].into_iter()), Offer::Newer);
        assert_eq!(t.changed_trees(), vec![1, 2, 3]);
        assert!(t.sweep().is_empty(), "first sweep only marks");
        assert_eq!(t.sweep(), vec![3]);
        assert_eq!(t.nodes(), 2);
    }
}
